/* fmnist — the MLP as troupe assignments, and what both models share (see mlp.h). */
#include "mlp.h"

#include "cnn_impl.h"

#include "actors/backend.h"
#include "actors/event.h"
#include "base/clock.h"
#include "ir/ops.h"
#include "nn/layers.h"
#include "nn/nn.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Provenance code of the memory modes this example sets (OCANNL_NOTES §5.3 codes are the
 * library's; 9xx are the examples'). */
#define S_PROV 901

static const char *const k_param_names[FMNIST_MLP_NPARAMS] = {"w1", "b1", "w2", "b2", "w3", "b3"};

const char *fmnist_mlp_param_name(int i)
{
    return i >= 0 && i < FMNIST_MLP_NPARAMS ? k_param_names[i] : "invalid";
}

const char *fmnist_mlp_param_label(const fmnist_mlp_t *m, int i)
{
    return m && m->cfg.kind == FMNIST_MODEL_CNN ? fmnist__cnn_param_name(i)
                                                : fmnist_mlp_param_name(i);
}

static const char *const k_model_names[] = {"mlp", "cnn"};

troupe_status_t fmnist_model_parse(const char *text, fmnist_model_kind_t *out)
{
    for (int i = 0; text && out && i < 2; i++)
        if (strcmp(text, k_model_names[i]) == 0) {
            *out = (fmnist_model_kind_t)i;
            return TROUPE_OK;
        }
    return troupe_error_set(TROUPE_INVALID_ARGUMENT, "model '%s': expected mlp or cnn",
                            text ? text : "(null)");
}

const char *fmnist_model_name(fmnist_model_kind_t k)
{
    return k == FMNIST_MODEL_MLP || k == FMNIST_MODEL_CNN ? k_model_names[k] : "invalid";
}

fmnist_mlp_config_t fmnist_cnn_config_default(int64_t batch, int64_t num_batches)
{
    fmnist_mlp_config_t c = fmnist_mlp_config_default(batch, num_batches);
    c.kind = FMNIST_MODEL_CNN;
    c.side = 28;
    c.conv[0] = 32;
    c.conv[1] = 32;
    c.conv[2] = 64;
    c.hidden1 = 128;
    c.hidden2 = 0;
    return c;
}

/* The dims of one image row: (in), or the CNN's (1, side, side). Returns the axes. */
static int s_image_dims(const fmnist_mlp_config_t *c, int64_t *dims)
{
    if (c->kind != FMNIST_MODEL_CNN)
        return dims[0] = c->in, 1;
    dims[0] = 1;
    dims[1] = dims[2] = c->side;
    return 3;
}

/* (lead..., image dims): n0 leading axes lead[0..n0). */
static int s_rows_dims(const fmnist_mlp_config_t *c, int n0, const int64_t *lead, int64_t *dims)
{
    for (int a = 0; a < n0; a++)
        dims[a] = lead[a];
    return n0 + s_image_dims(c, dims + n0);
}

fmnist_mlp_config_t fmnist_mlp_config_default(int64_t batch, int64_t num_batches)
{
    fmnist_mlp_config_t c = {.in = FMNIST_IMAGE_PIXELS,
                             .hidden1 = 256,
                             .hidden2 = 128,
                             .out = FMNIST_NUM_CLASSES,
                             .batch = batch,
                             .num_batches = num_batches,
                             .prec = TROUPE_PREC_SINGLE};
    return c;
}

static const char *const k_feed_names[] = {"auto", "fed", "indexed"};

troupe_status_t fmnist_feed_parse(const char *text, fmnist_feed_t *out)
{
    for (int i = 0; text && out && i < 3; i++)
        if (strcmp(text, k_feed_names[i]) == 0) {
            *out = (fmnist_feed_t)i;
            return TROUPE_OK;
        }
    return troupe_error_set(TROUPE_INVALID_ARGUMENT, "feed '%s': expected auto, fed or indexed",
                            text ? text : "(null)");
}

const char *fmnist_feed_name(fmnist_feed_t f)
{
    return f >= FMNIST_FEED_AUTO && f <= FMNIST_FEED_INDEXED ? k_feed_names[f] : "invalid";
}

bool fmnist_feed_resolve(fmnist_feed_t f, const char *backend)
{
    return f == FMNIST_FEED_FED || (f == FMNIST_FEED_AUTO && troupe_backend_has_graphs(backend));
}

troupe_nn_conv2d_lowering_t fmnist_conv_lowering_resolve(const char *backend)
{
    const char *b = backend ? backend : troupe_config_backend();
    return b && strcmp(b, "cuda") == 0 ? TROUPE_NN_CONV2D_IM2COL_FOLDED : TROUPE_NN_CONV2D_AUTO;
}

void fmnist_mlp_dp_model(const fmnist_mlp_t *m, troupe_dp_model_t *out)
{
    *out = (troupe_dp_model_t){
        .grad_comp = m->grad_comp,
        .batch_index = FMNIST_BATCH_SYMBOL,
        .num_batches = m->cfg.num_batches,
        .params = m->params,
        .grads = m->grads,
        .n_params = (size_t)m->nparams,
        .loss = m->loss,
        .inputs = m->inputs,
        .n_inputs = 2,
        .feed_comp = m->feed_comp,
        .loss_scale = m->loss_scale,
    };
}

/* ---- node bookkeeping ---------------------------------------------------------------------- */

typedef struct s_nodes {
    troupe_tnode_t ***v;
    size_t *n, *cap;
} s_nodes_t;

static troupe_status_t s_node(s_nodes_t ns, const char *l1, const char *l2, troupe_prec_t prec,
                              int ndims, const int64_t *dims, troupe_tnode_t **out)
{
    *out = NULL;
    if (*ns.n == *ns.cap) {
        size_t cap = *ns.cap ? 2 * *ns.cap : 32;
        troupe_tnode_t **v = realloc(*ns.v, cap * sizeof *v);
        if (!v)
            return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "fmnist: out of memory");
        *ns.v = v;
        *ns.cap = cap;
    }
    const char *labels[2] = {l1, l2};
    troupe_tnode_t *tn = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_tnode_new(labels, l2 ? 2 : 1, prec, ndims, dims, NULL, 0.0, &tn));
    (*ns.v)[(*ns.n)++] = tn;
    *out = tn;
    return TROUPE_OK;
}

/* Keeps a reference to tn (made elsewhere) in the node list. */
static troupe_status_t s_adopt(s_nodes_t ns, troupe_tnode_t *tn)
{
    if (*ns.n == *ns.cap) {
        size_t cap = *ns.cap ? 2 * *ns.cap : 32;
        troupe_tnode_t **v = realloc(*ns.v, cap * sizeof *v);
        if (!v)
            return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "fmnist: out of memory");
        *ns.v = v;
        *ns.cap = cap;
    }
    troupe_tnode_retain(tn);
    (*ns.v)[(*ns.n)++] = tn;
    return TROUPE_OK;
}

static void s_release_nodes(troupe_tnode_t **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        troupe_tnode_release(&v[i]);
    free(v);
}

static troupe_status_t s_set_mode(troupe_tnode_t *tn, troupe_memory_mode_kind_t kind,
                                  troupe_memory_type_t memtype)
{
    troupe_memory_mode_t m = {kind, memtype, TROUPE_SHARING_UNSET};
    return troupe_tnode_update_memory_mode(tn, m, S_PROV);
}

/* ---- statement list ------------------------------------------------------------------------ */

enum { S_MAX_ITEMS = 64 };

typedef struct s_items {
    troupe_asgn_comp_t *comp;
    troupe_asgn_t *v[S_MAX_ITEMS];
    size_t n;
    troupe_status_t st; /* first failure; later builders are skipped */
} s_items_t;

static void s_push(s_items_t *it, troupe_status_t st, troupe_asgn_t *t)
{
    if (it->st != TROUPE_OK)
        return;
    if (st != TROUPE_OK) {
        it->st = st;
        return;
    }
    if (it->n == S_MAX_ITEMS) {
        it->st = troupe_error_set(TROUPE_INTERNAL, "fmnist: too many statements");
        return;
    }
    it->v[it->n++] = t;
}

/* lhs =accum op(a, b) over spec. */
static void s_bin(s_items_t *it, bool init, troupe_binop_t accum, troupe_tnode_t *lhs,
                  troupe_binop_t op, troupe_tnode_t *a, troupe_tnode_t *b, const char *spec)
{
    troupe_asgn_t *t = NULL;
    if (it->st != TROUPE_OK)
        return;
    troupe_status_t st = troupe_asgn_accum_binop(
        it->comp, init, accum, lhs, op, troupe_asgn_node(a), troupe_asgn_node(b), spec, &t);
    s_push(it, st, t);
}

static void s_un(s_items_t *it, bool init, troupe_binop_t accum, troupe_tnode_t *lhs,
                 troupe_unop_t op, troupe_tnode_t *a, const char *spec)
{
    troupe_asgn_t *t = NULL;
    if (it->st != TROUPE_OK)
        return;
    troupe_status_t st =
        troupe_asgn_accum_unop(it->comp, init, accum, lhs, op, troupe_asgn_node(a), spec, &t);
    s_push(it, st, t);
}

static void s_const(s_items_t *it, troupe_tnode_t *tn, double c)
{
    troupe_asgn_t *t = NULL;
    if (it->st != TROUPE_OK)
        return;
    troupe_status_t st = troupe_asgn_fetch_constant(it->comp, tn, c, &t);
    s_push(it, st, t);
}

/* Wraps items[from..] in a block comment (the text shows in the generated code). */
static void s_block(s_items_t *it, size_t from, const char *text)
{
    if (it->st != TROUPE_OK || it->n <= from)
        return;
    troupe_asgn_t *seq = NULL, *blk = NULL;
    it->st = troupe_asgn_seq(it->comp, it->n - from, it->v + from, &seq);
    if (it->st == TROUPE_OK)
        it->st = troupe_asgn_block_comment(it->comp, text, seq, &blk);
    if (it->st == TROUPE_OK) {
        it->n = from;
        it->v[it->n++] = blk;
    }
}

static troupe_status_t s_finish(s_items_t *it)
{
    if (it->st != TROUPE_OK)
        return it->st;
    troupe_asgn_t *root = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_seq(it->comp, it->n, it->v, &root));
    troupe_asgn_comp_set_root(it->comp, root);
    return TROUPE_OK;
}

/* ---- the forward pass ------------------------------------------------------------------------ */

typedef struct s_fwd {
    troupe_tnode_t *z1, *a1, *z2, *a2, *z3;
} s_fwd_t;

/* Layers 1-3 over `rows` rows of x; xspec is x's term ("{batch}bi" or "bi"). z3 may be given
 * (the eval's hosted logits) or is created. */
static troupe_status_t s_forward(s_items_t *it, s_nodes_t ns, const fmnist_mlp_t *m,
                                 troupe_tnode_t *x, const char *xspec, int64_t rows,
                                 troupe_tnode_t *z3, s_fwd_t *f)
{
    const fmnist_mlp_config_t *c = &m->cfg;
    troupe_prec_t p = c->prec;
    troupe_tnode_t *const *w = m->params;
    TROUPE_RETURN_IF_ERROR(s_node(ns, "z1", NULL, p, 2, (int64_t[]){rows, c->hidden1}, &f->z1));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "a1", NULL, p, 2, (int64_t[]){rows, c->hidden1}, &f->a1));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "z2", NULL, p, 2, (int64_t[]){rows, c->hidden2}, &f->z2));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "a2", NULL, p, 2, (int64_t[]){rows, c->hidden2}, &f->a2));
    if (!z3)
        TROUPE_RETURN_IF_ERROR(s_node(ns, "z3", NULL, p, 2, (int64_t[]){rows, c->out}, &z3));
    f->z3 = z3;
    char mm1[64];
    snprintf(mm1, sizeof mm1, "%s,ij=>bj", xspec);

    size_t from = it->n;
    /* z = bias broadcast over rows, then z += in * w (a reduction over i) */
    s_un(it, true, TROUPE_BINOP_ARG2, f->z1, TROUPE_UNOP_IDENTITY, w[1], "j=>^bj");
    s_bin(it, false, TROUPE_BINOP_ADD, f->z1, TROUPE_BINOP_MUL, x, w[0], mm1);
    s_un(it, true, TROUPE_BINOP_ARG2, f->a1, TROUPE_UNOP_RELU, f->z1, "bj=>bj");
    s_block(it, from, "layer 1: a1 = relu(x w1 + b1)");
    from = it->n;
    s_un(it, true, TROUPE_BINOP_ARG2, f->z2, TROUPE_UNOP_IDENTITY, w[3], "j=>^bj");
    s_bin(it, false, TROUPE_BINOP_ADD, f->z2, TROUPE_BINOP_MUL, f->a1, w[2], "bi,ij=>bj");
    s_un(it, true, TROUPE_BINOP_ARG2, f->a2, TROUPE_UNOP_RELU, f->z2, "bj=>bj");
    s_block(it, from, "layer 2: a2 = relu(a1 w2 + b2)");
    from = it->n;
    s_un(it, true, TROUPE_BINOP_ARG2, z3, TROUPE_UNOP_IDENTITY, w[5], "j=>^bj");
    s_bin(it, false, TROUPE_BINOP_ADD, z3, TROUPE_BINOP_MUL, f->a2, w[4], "bi,ij=>bj");
    s_block(it, from, "layer 3: logits z3 = a2 w3 + b3");
    return it->st;
}

/* ---- the gradient computation ---------------------------------------------------------------- */

/* The hand-written backward pass: kept only as the reference the derived one is tested
 * against (cfg.hand_grad; tests/test_mlp.c). */
static troupe_status_t s_build_grad_by_hand(fmnist_mlp_t *m)
{
    const fmnist_mlp_config_t *c = &m->cfg;
    troupe_prec_t p = c->prec;
    int64_t B = c->batch;
    s_nodes_t ns = {&m->nodes, &m->nnodes, &m->nodes_cap};
    TROUPE_RETURN_IF_ERROR(troupe_asgn_comp_new(&m->grad_comp));
    troupe_asgn_comp_t *comp = m->grad_comp;
    /* the minibatch: the fixed nodes (fed), or a slice of the data set at the static index */
    bool fed = c->fed;
    if (!fed)
        TROUPE_RETURN_IF_ERROR(
            troupe_asgn_comp_add_static_symbol(comp, FMNIST_BATCH_SYMBOL, c->num_batches, NULL));
    troupe_tnode_t *x = fed ? m->x : m->x_all, *y = fed ? m->y : m->y_all;
    const char *xspec = fed ? "bi" : "{" FMNIST_BATCH_SYMBOL "}bi";
    const char *yspec = fed ? "bc" : "{" FMNIST_BATCH_SYMBOL "}bc";
    s_items_t it = {.comp = comp};
    s_fwd_t f;
    TROUPE_RETURN_IF_ERROR(s_forward(&it, ns, m, x, xspec, B, NULL, &f));

    troupe_tnode_t *bsz, *mx, *d, *e, *s, *lse, *picked, *nll, *prob, *t3, *dz3;
    troupe_tnode_t *w3t, *da2, *dz2, *w2t, *da1, *dz1;
    const int64_t bo[2] = {B, c->out}, b1d[1] = {B};
    TROUPE_RETURN_IF_ERROR(s_node(ns, "batch_size", NULL, p, 0, NULL, &bsz));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "max", NULL, p, 1, b1d, &mx));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "shifted", NULL, p, 2, bo, &d));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "exp", NULL, p, 2, bo, &e));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "sumexp", NULL, p, 1, b1d, &s));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "lse", NULL, p, 1, b1d, &lse));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "picked", NULL, p, 1, b1d, &picked));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "nll", NULL, p, 1, b1d, &nll));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "softmax", NULL, p, 2, bo, &prob));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "softmax_minus_onehot", NULL, p, 2, bo, &t3));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "dz3", NULL, p, 2, bo, &dz3));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "w3", "t", p, 2, (int64_t[]){c->out, c->hidden2}, &w3t));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "da2", NULL, p, 2, (int64_t[]){B, c->hidden2}, &da2));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "dz2", NULL, p, 2, (int64_t[]){B, c->hidden2}, &dz2));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "w2", "t", p, 2, (int64_t[]){c->hidden2, c->hidden1}, &w2t));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "da1", NULL, p, 2, (int64_t[]){B, c->hidden1}, &da1));
    TROUPE_RETURN_IF_ERROR(s_node(ns, "dz1", NULL, p, 2, (int64_t[]){B, c->hidden1}, &dz1));
    /* The transposes exist to be read contiguously: keep them (a copy read many times would
     * otherwise be inlined back into a strided read). The pointwise results feeding the
     * gradient matmuls are kept too, so the matmul loops read one value per cell. */
    troupe_tnode_t *keep[] = {w3t, w2t, dz3, dz2, dz1, f.a1, f.a2};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        TROUPE_RETURN_IF_ERROR(s_set_mode(keep[i], TROUPE_MM_NEVER_VIRTUAL, 0));

    char spec[64];
    troupe_tnode_t *z3 = f.z3;
    troupe_tnode_t *const *w = m->params, *const *g = m->grads;

    size_t from = it.n;
    s_const(&it, bsz, (double)B);
    s_un(&it, true, TROUPE_BINOP_MAX, mx, TROUPE_UNOP_IDENTITY, z3, "bc=>b");
    s_bin(&it, true, TROUPE_BINOP_ARG2, d, TROUPE_BINOP_SUB, z3, mx, "bc,b=>bc");
    s_un(&it, true, TROUPE_BINOP_ARG2, e, TROUPE_UNOP_EXP, d, "bc=>bc");
    s_un(&it, true, TROUPE_BINOP_ADD, s, TROUPE_UNOP_IDENTITY, e, "bc=>b");
    s_un(&it, true, TROUPE_BINOP_ARG2, lse, TROUPE_UNOP_LOG, s, "b=>b");
    snprintf(spec, sizeof spec, "%s,bc=>b", yspec);
    s_bin(&it, true, TROUPE_BINOP_ADD, picked, TROUPE_BINOP_MUL, y, d, spec);
    s_bin(&it, true, TROUPE_BINOP_ARG2, nll, TROUPE_BINOP_SUB, lse, picked, "b,b=>b");
    s_bin(&it, true, TROUPE_BINOP_ADD, m->loss, TROUPE_BINOP_DIV, nll, bsz, "b,=>");
    s_block(&it, from, "mean softmax cross-entropy (max-shifted log-sum-exp)");

    from = it.n;
    s_bin(&it, true, TROUPE_BINOP_ARG2, prob, TROUPE_BINOP_DIV, e, s, "bc,b=>bc");
    snprintf(spec, sizeof spec, "bc,%s=>bc", yspec);
    s_bin(&it, true, TROUPE_BINOP_ARG2, t3, TROUPE_BINOP_SUB, prob, y, spec);
    s_bin(&it, true, TROUPE_BINOP_ARG2, dz3, TROUPE_BINOP_DIV, t3, bsz, "bc,=>bc");
    s_block(&it, from, "dz3 = (softmax - onehot) / B");

    from = it.n;
    s_bin(&it, true, TROUPE_BINOP_ADD, g[4], TROUPE_BINOP_MUL, f.a2, dz3, "bi,bj=>ij");
    s_un(&it, true, TROUPE_BINOP_ADD, g[5], TROUPE_UNOP_IDENTITY, dz3, "bj=>j");
    s_un(&it, true, TROUPE_BINOP_ARG2, w3t, TROUPE_UNOP_IDENTITY, w[4], "ij=>ji");
    s_bin(&it, true, TROUPE_BINOP_ADD, da2, TROUPE_BINOP_MUL, dz3, w3t, "bj,ji=>bi");
    s_bin(&it, true, TROUPE_BINOP_ARG2, dz2, TROUPE_BINOP_RELU_GATE, f.z2, da2, "bi,bi=>bi");
    s_block(&it, from, "layer 3 backward");

    from = it.n;
    s_bin(&it, true, TROUPE_BINOP_ADD, g[2], TROUPE_BINOP_MUL, f.a1, dz2, "bi,bj=>ij");
    s_un(&it, true, TROUPE_BINOP_ADD, g[3], TROUPE_UNOP_IDENTITY, dz2, "bj=>j");
    s_un(&it, true, TROUPE_BINOP_ARG2, w2t, TROUPE_UNOP_IDENTITY, w[2], "ij=>ji");
    s_bin(&it, true, TROUPE_BINOP_ADD, da1, TROUPE_BINOP_MUL, dz2, w2t, "bj,ji=>bi");
    s_bin(&it, true, TROUPE_BINOP_ARG2, dz1, TROUPE_BINOP_RELU_GATE, f.z1, da1, "bi,bi=>bi");
    s_block(&it, from, "layer 2 backward");

    from = it.n;
    snprintf(spec, sizeof spec, "%s,bj=>ij", xspec);
    s_bin(&it, true, TROUPE_BINOP_ADD, g[0], TROUPE_BINOP_MUL, x, dz1, spec);
    s_un(&it, true, TROUPE_BINOP_ADD, g[1], TROUPE_UNOP_IDENTITY, dz1, "bj=>j");
    s_block(&it, from, "layer 1 backward");
    return s_finish(&it);
}

/* The model as a list of layers (nn/): 784-256-128-10 with ReLUs, or the convnet (cnn.c). x
 * is (rows, in) (CNN (rows, 1, side, side)); *z3 gets the logits (rows, out). */
static troupe_status_t s_nn_forward(troupe_nn_t *nn, const fmnist_mlp_t *m, troupe_tnode_t *x,
                                    troupe_tnode_t **z3)
{
    if (m->cfg.kind == FMNIST_MODEL_CNN)
        return fmnist__cnn_forward(nn, m, x, z3);
    troupe_tnode_t *const *w = m->params;
    troupe_tnode_t *z1, *a1, *z2, *a2;
    troupe_nn_begin(nn, "layer 1: a1 = relu(x w1 + b1)");
    troupe_nn_linear(nn, x, w[0], w[1], &z1);
    troupe_nn_relu(nn, z1, &a1);
    troupe_nn_begin(nn, "layer 2: a2 = relu(a1 w2 + b2)");
    troupe_nn_linear(nn, a1, w[2], w[3], &z2);
    troupe_nn_relu(nn, z2, &a2);
    troupe_nn_begin(nn, "layer 3: logits z3 = a2 w3 + b3");
    troupe_nn_linear(nn, a2, w[4], w[5], z3);
    return troupe_nn_end(nn);
}

/* The gradient computation from the forward pass: the layers, the mean softmax
 * cross-entropy, and the backward derived by nn/grad.h. In the indexed form the minibatch
 * is a slice of the data set at the static index (x := x_all[batch], y := y_all[batch]),
 * which the optimizer inlines into the reads. */
static troupe_status_t s_build_grad(fmnist_mlp_t *m)
{
    const fmnist_mlp_config_t *c = &m->cfg;
    if (c->hand_grad)
        return s_build_grad_by_hand(m);
    TROUPE_RETURN_IF_ERROR(troupe_asgn_comp_new(&m->grad_comp));
    troupe_asgn_comp_t *comp = m->grad_comp;
    troupe_nn_t *nn = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_nn_new(comp, c->prec, &nn));
    troupe_tnode_t *x = m->x, *y = m->y;
    troupe_status_t st = TROUPE_OK;
    if (c->compute_prec != TROUPE_PREC_VOID)
        st = troupe_nn_set_compute_prec(nn, c->compute_prec);
    if (!c->fed) {
        int32_t sym = -1;
        st = troupe_asgn_comp_add_static_symbol(comp, FMNIST_BATCH_SYMBOL, c->num_batches, &sym);
        troupe_nn_begin(nn, "the minibatch: x, y := x_all[batch], y_all[batch]");
        int64_t xd[TROUPE_MAX_DIMS];
        int xn = s_rows_dims(c, 1, (int64_t[]){c->batch}, xd);
        troupe_nn_node(nn, "x", xn, xd, &x);
        troupe_nn_node(nn, "y", 2, (int64_t[]){c->batch, c->out}, &y);
        troupe_asgn_t *t = NULL;
        if (st == TROUPE_OK && troupe_nn_status(nn) == TROUPE_OK)
            st = troupe_nn_add(nn, troupe_asgn_fetch_slice(comp, x, sym, m->x_all, &t), &t);
        if (st == TROUPE_OK && troupe_nn_status(nn) == TROUPE_OK)
            st = troupe_nn_add(nn, troupe_asgn_fetch_slice(comp, y, sym, m->y_all, &t), &t);
    }
    for (int i = 0; i < m->nparams && st == TROUPE_OK; i++)
        st = troupe_nn_param_use(nn, m->params[i], m->grads[i]);
    troupe_tnode_t *z3 = NULL, *loss = NULL;
    if (st == TROUPE_OK)
        st = s_nn_forward(nn, m, x, &z3);
    troupe_nn_begin(nn, "mean softmax cross-entropy (max-shifted log-sum-exp)");
    troupe_nn_softmax_xent(nn, z3, y, &loss);
    /* half products: the backward pass starts from the loss scale (the driver's) */
    if (st == TROUPE_OK && c->compute_prec == TROUPE_PREC_HALF) {
        st = troupe_nn_loss_scale(nn, &m->loss_scale);
        if (st == TROUPE_OK)
            st = s_adopt((s_nodes_t){&m->nodes, &m->nnodes, &m->nodes_cap}, m->loss_scale);
    }
    if (st == TROUPE_OK)
        st = troupe_nn_finish(nn, loss);
    /* the trainer reads the loss on the host */
    if (st == TROUPE_OK) {
        s_nodes_t ns = {&m->nodes, &m->nnodes, &m->nodes_cap};
        st = s_adopt(ns, loss);
    }
    if (st == TROUPE_OK) {
        m->loss = loss; /* the placeholder made by fmnist_mlp_new stays unused */
        st = s_set_mode(m->loss, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
    }
    troupe_nn_destroy(&nn);
    return st;
}

/* The fed form's feed: x := x_all[batch], y := y_all[batch] (exact copies). */
static troupe_status_t s_build_feed(fmnist_mlp_t *m)
{
    TROUPE_RETURN_IF_ERROR(troupe_asgn_comp_new(&m->feed_comp));
    int32_t sym = -1;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_comp_add_static_symbol(m->feed_comp, FMNIST_BATCH_SYMBOL,
                                                              m->cfg.num_batches, &sym));
    s_items_t it = {.comp = m->feed_comp};
    troupe_asgn_t *t = NULL;
    troupe_status_t st = troupe_asgn_fetch_slice(it.comp, m->x, sym, m->x_all, &t);
    s_push(&it, st, t);
    if (it.st == TROUPE_OK) {
        st = troupe_asgn_fetch_slice(it.comp, m->y, sym, m->y_all, &t);
        s_push(&it, st, t);
    }
    s_block(&it, 0, "the minibatch: x, y := x_all[batch], y_all[batch]");
    return s_finish(&it);
}

troupe_status_t fmnist_mlp_new(const fmnist_mlp_config_t *cfg, fmnist_mlp_t **out)
{
    if (!cfg || !out)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_mlp_new: NULL argument");
    *out = NULL;
    bool cnn = cfg->kind == FMNIST_MODEL_CNN;
    if (cfg->kind != FMNIST_MODEL_MLP && !cnn)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_mlp_new: model kind %d",
                                (int)cfg->kind);
    if (cnn && (cfg->side < 1 || cfg->in != cfg->side * cfg->side || cfg->conv[0] < 1 ||
                cfg->conv[1] < 1 || cfg->conv[2] < 1 || cfg->hand_grad || cfg->eval_chunk < 0))
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "fmnist_mlp_new: cnn: image side %lld for %lld pixels, channels "
                                "%lld-%lld-%lld, evaluation chunk %lld%s",
                                (long long)cfg->side, (long long)cfg->in, (long long)cfg->conv[0],
                                (long long)cfg->conv[1], (long long)cfg->conv[2],
                                (long long)cfg->eval_chunk,
                                cfg->hand_grad ? ", hand_grad (the MLP's only)" : "");
    if (cfg->in < 1 || cfg->hidden1 < 1 || (!cnn && cfg->hidden2 < 1) || cfg->out < 2 ||
        cfg->batch < 1 || cfg->num_batches < 1)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "fmnist_mlp_new: bad sizes %lld-%lld-%lld-%lld, batch %lld x %lld",
                                (long long)cfg->in, (long long)cfg->hidden1,
                                (long long)cfg->hidden2, (long long)cfg->out,
                                (long long)cfg->num_batches, (long long)cfg->batch);
    if (cfg->prec != TROUPE_PREC_SINGLE && cfg->prec != TROUPE_PREC_DOUBLE)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "fmnist_mlp_new: precision %s (expected single or double)",
                                troupe_prec_name(cfg->prec));
    if (cfg->compute_prec != TROUPE_PREC_VOID && cfg->compute_prec != cfg->prec &&
        (cfg->hand_grad ||
         (cfg->compute_prec != TROUPE_PREC_BFLOAT16 && cfg->compute_prec != TROUPE_PREC_HALF) ||
         cfg->prec != TROUPE_PREC_SINGLE))
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "fmnist_mlp_new: products in %s in a %s model%s (expected "
                                "bfloat16 or half in a single-precision model with a derived "
                                "gradient)",
                                troupe_prec_name(cfg->compute_prec), troupe_prec_name(cfg->prec),
                                cfg->hand_grad ? " with the hand-written gradient" : "");
    fmnist_mlp_t *m = calloc(1, sizeof *m);
    if (!m)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "fmnist_mlp_new: out of memory");
    m->cfg = *cfg;
    m->nparams = cnn ? FMNIST_CNN_NPARAMS : FMNIST_MLP_NPARAMS;
    s_nodes_t ns = {&m->nodes, &m->nnodes, &m->nodes_cap};
    troupe_prec_t p = cfg->prec;
    const int64_t sizes[4] = {cfg->in, cfg->hidden1, cfg->hidden2, cfg->out};
    troupe_status_t st = TROUPE_OK;
    for (int i = 0; cnn && i < FMNIST_CNN_NPARAMS && st == TROUPE_OK; i++) {
        int64_t d[4];
        int nd = fmnist__cnn_param_dims(cfg, i, d);
        const char *name = fmnist__cnn_param_name(i);
        st = s_node(ns, name, NULL, p, nd, d, &m->params[i]);
        if (st == TROUPE_OK)
            st = s_node(ns, name, "grad", p, nd, d, &m->grads[i]);
    }
    for (int l = 0; !cnn && l < 3 && st == TROUPE_OK; l++) {
        const int64_t wd[2] = {sizes[l], sizes[l + 1]}, bd[1] = {sizes[l + 1]};
        st = s_node(ns, k_param_names[2 * l], NULL, p, 2, wd, &m->params[2 * l]);
        if (st == TROUPE_OK)
            st = s_node(ns, k_param_names[2 * l + 1], NULL, p, 1, bd, &m->params[2 * l + 1]);
        if (st == TROUPE_OK)
            st = s_node(ns, k_param_names[2 * l], "grad", p, 2, wd, &m->grads[2 * l]);
        if (st == TROUPE_OK)
            st = s_node(ns, k_param_names[2 * l + 1], "grad", p, 1, bd, &m->grads[2 * l + 1]);
    }
    if (st == TROUPE_OK)
        st = s_node(ns, "loss", NULL, p, 0, NULL, &m->loss);
    int64_t xd[TROUPE_MAX_DIMS];
    int xn = s_rows_dims(cfg, 2, (int64_t[]){cfg->num_batches, cfg->batch}, xd);
    if (st == TROUPE_OK)
        st = s_node(ns, "train", "images", p, xn, xd, &m->x_all);
    if (st == TROUPE_OK)
        st = s_node(ns, "train", "onehot", p, 3,
                    (int64_t[]){cfg->num_batches, cfg->batch, cfg->out}, &m->y_all);
    /* params: hosted, set by init_params; data: one device-wide constant copy, or rewritten
     * between steps (cfg->changing); loss: hosted so the host can read it */
    troupe_memory_type_t data = cfg->changing ? TROUPE_MEMTYPE_NONCONSTANT : TROUPE_MEMTYPE_CONSTANT;
    for (int i = 0; i < m->nparams && st == TROUPE_OK; i++)
        st = s_set_mode(m->params[i], TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
    if (st == TROUPE_OK)
        st = s_set_mode(m->loss, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
    if (st == TROUPE_OK)
        st = s_set_mode(m->x_all, TROUPE_MM_HOSTED, data);
    if (st == TROUPE_OK)
        st = s_set_mode(m->y_all, TROUPE_MM_HOSTED, data);
    m->inputs[0] = m->x_all;
    m->inputs[1] = m->y_all;
    /* fed form: the minibatch's fixed nodes, one array per replica that outlives the feed */
    if (st == TROUPE_OK && cfg->fed)
        st = s_node(ns, "batch", "images", p, xn - 1, xd + 1, &m->x);
    if (st == TROUPE_OK && cfg->fed)
        st = s_node(ns, "batch", "onehot", p, 2, (int64_t[]){cfg->batch, cfg->out}, &m->y);
    if (st == TROUPE_OK && cfg->fed)
        st = s_set_mode(m->x, TROUPE_MM_MATERIALIZED, TROUPE_MEMTYPE_UNSET_HOSTED);
    if (st == TROUPE_OK && cfg->fed)
        st = s_set_mode(m->y, TROUPE_MM_MATERIALIZED, TROUPE_MEMTYPE_UNSET_HOSTED);
    if (st == TROUPE_OK && cfg->fed)
        st = s_build_feed(m);
    if (st == TROUPE_OK)
        st = s_build_grad(m);
    if (st != TROUPE_OK) {
        fmnist_mlp_destroy(&m);
        return st;
    }
    *out = m;
    return TROUPE_OK;
}

void fmnist_mlp_destroy(fmnist_mlp_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    fmnist_mlp_t *m = *m_p;
    *m_p = NULL;
    troupe_asgn_comp_destroy(&m->feed_comp);
    troupe_asgn_comp_destroy(&m->grad_comp);
    s_release_nodes(m->nodes, m->nnodes);
    free(m);
}

/* ---- host data --------------------------------------------------------------------------------
 */

troupe_status_t fmnist_mlp_init_params(fmnist_mlp_t *m, uint64_t seed)
{
    if (!m)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_mlp_init_params: NULL argument");
    if (m->cfg.kind == FMNIST_MODEL_CNN)
        return fmnist__cnn_init_params(m, seed);
    const fmnist_mlp_config_t *c = &m->cfg;
    const int64_t sizes[4] = {c->in, c->hidden1, c->hidden2, c->out};
    size_t maxn = 0;
    for (int l = 0; l < 3; l++)
        if ((size_t)(sizes[l] * sizes[l + 1]) > maxn)
            maxn = (size_t)(sizes[l] * sizes[l + 1]);
    double *v = malloc(maxn * sizeof *v);
    if (!v)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "fmnist_mlp_init_params: out of memory");
    troupe_status_t st = TROUPE_OK;
    for (int l = 0; l < 3 && st == TROUPE_OK; l++) {
        double fan_in = (double)sizes[l], fan_out = (double)sizes[l + 1];
        double a = l < 2 ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
        size_t n = (size_t)(sizes[l] * sizes[l + 1]);
        troupe_uint4x32_t key = {
            {(uint32_t)seed, (uint32_t)(seed >> 32), (uint32_t)(2 * l), 0x6d6c7021u /* "mlp!" */}};
        for (size_t i = 0; i < n; i++) {
            troupe_uint4x32_t ctr = {{(uint32_t)i, (uint32_t)((uint64_t)i >> 32), 0, 0}};
            double u = 0;
            st = troupe_uint4x32_to_prec_uniform1(TROUPE_PREC_DOUBLE,
                                                  troupe_threefry4x32_crypto(key, ctr), &u);
            if (st != TROUPE_OK)
                break;
            v[i] = (2.0 * u - 1.0) * a;
        }
        if (st == TROUPE_OK)
            st = troupe_tnode_set_values(m->params[2 * l], v, n);
        if (st == TROUPE_OK) {
            memset(v, 0, (size_t)sizes[l + 1] * sizeof *v);
            st = troupe_tnode_set_values(m->params[2 * l + 1], v, (size_t)sizes[l + 1]);
        }
    }
    free(v);
    return st;
}

/* Writes value v at flat offset i of a single/double host array. */
static inline void s_store(void *host, troupe_prec_t p, size_t i, double v)
{
    if (p == TROUPE_PREC_SINGLE)
        ((float *)host)[i] = (float)v;
    else
        ((double *)host)[i] = v;
}

/* Fills x_all / y_all; exactly one of pixels (scaled by 1/255) and xv is non-NULL. */
static troupe_status_t s_fill_train(fmnist_mlp_t *m, const uint8_t *pixels, const double *xv,
                                    const uint8_t *labels)
{
    const fmnist_mlp_config_t *c = &m->cfg;
    size_t rows = (size_t)(c->num_batches * c->batch);
    for (size_t r = 0; r < rows; r++)
        if (labels[r] >= c->out)
            return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                    "fmnist: label %u of row %zu is out of range 0..%lld",
                                    (unsigned)labels[r], r, (long long)c->out - 1);
    void *hx = NULL, *hy = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(m->x_all, &hx));
    TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(m->y_all, &hy));
    size_t nx = rows * (size_t)c->in;
    for (size_t i = 0; i < nx; i++)
        s_store(hx, c->prec, i, pixels ? pixels[i] * (1.0 / 255.0) : xv[i]);
    for (size_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < c->out; k++)
            s_store(hy, c->prec, r * (size_t)c->out + (size_t)k, labels[r] == k ? 1.0 : 0.0);
    return TROUPE_OK;
}

troupe_status_t fmnist_mlp_load_train(fmnist_mlp_t *m, const fmnist_dataset_t *ds)
{
    if (!m || !ds)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_mlp_load_train: NULL argument");
    int64_t rows = m->cfg.num_batches * m->cfg.batch;
    if (ds->count < rows || ds->rows * ds->cols != m->cfg.in)
        return troupe_error_set(
            TROUPE_INVALID_ARGUMENT,
            "fmnist_mlp_load_train: the model needs %lld images of %lld pixels, "
            "the data set has %lld of %lld",
            (long long)rows, (long long)m->cfg.in, (long long)ds->count,
            (long long)(ds->rows * ds->cols));
    return s_fill_train(m, ds->pixels, NULL, ds->labels);
}

troupe_status_t fmnist_mlp_set_train(fmnist_mlp_t *m, const double *x, const uint8_t *labels)
{
    if (!m || !x || !labels)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_mlp_set_train: NULL argument");
    return s_fill_train(m, NULL, x, labels);
}

/* ---- plain SGD ------------------------------------------------------------------------------- */

static const char *s_axes_spec(int ndims, bool scalar_rhs, char *buf, size_t cap)
{
    char t[TROUPE_MAX_DIMS + 1];
    for (int i = 0; i < ndims; i++)
        t[i] = (char)('a' + i);
    t[ndims] = '\0';
    snprintf(buf, cap, scalar_rhs ? "%s,=>%s" : "%s=>%s", t, t);
    return buf;
}

troupe_status_t fmnist_mlp_sgd_comp(const fmnist_mlp_t *m, double lr, troupe_asgn_comp_t **out)
{
    if (!m || !out || !(lr > 0))
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_mlp_sgd_comp: bad argument");
    *out = NULL;
    troupe_asgn_comp_t *comp = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_comp_new(&comp));
    troupe_tnode_t *lrn = NULL;
    troupe_status_t st =
        troupe_tnode_new((const char *const[]){"lr"}, 1, m->cfg.prec, 0, NULL, NULL, 0.0, &lrn);
    s_items_t it = {.comp = comp, .st = st};
    s_const(&it, lrn, lr);
    char spec[32];
    for (int i = 0; i < m->nparams; i++)
        s_bin(&it, false, TROUPE_BINOP_SUB, m->params[i], TROUPE_BINOP_MUL, m->grads[i], lrn,
              s_axes_spec(m->params[i]->ndims, true, spec, sizeof spec));
    st = s_finish(&it);
    troupe_tnode_release(&lrn); /* the comp holds its own reference */
    if (st != TROUPE_OK) {
        troupe_asgn_comp_destroy(&comp);
        return st;
    }
    *out = comp;
    return TROUPE_OK;
}

/* ---- evaluation ------------------------------------------------------------------------------ */

troupe_status_t fmnist_mlp_eval_new(const fmnist_mlp_t *m, int64_t n, fmnist_mlp_eval_t **out)
{
    if (!m || !out || n < 1)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_mlp_eval_new: bad argument");
    *out = NULL;
    fmnist_mlp_eval_t *e = calloc(1, sizeof *e);
    if (!e)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "fmnist_mlp_eval_new: out of memory");
    const fmnist_mlp_config_t *c = &m->cfg;
    e->n = n;
    e->chunk = n;
    if (c->kind == FMNIST_MODEL_CNN) {
        int64_t k = c->eval_chunk > 0 ? c->eval_chunk : 500;
        e->chunk = n < k ? n : k;
    }
    e->nchunks = (n + e->chunk - 1) / e->chunk;
    s_nodes_t ns = {&e->nodes, &e->nnodes, &e->nodes_cap};
    int64_t xd[TROUPE_MAX_DIMS];
    int xn = e->nchunks > 1 ? s_rows_dims(c, 2, (int64_t[]){e->nchunks, e->chunk}, xd)
                            : s_rows_dims(c, 1, (int64_t[]){n}, xd);
    troupe_status_t st = s_node(ns, "test", "images", c->prec, xn, xd, &e->x);
    if (st == TROUPE_OK)
        st = s_node(ns, "test", "logits", c->prec, 2, (int64_t[]){e->chunk, c->out}, &e->logits);
    if (st == TROUPE_OK)
        st = s_set_mode(e->x, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_CONSTANT);
    if (st == TROUPE_OK)
        st = s_set_mode(e->logits, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
    if (st == TROUPE_OK)
        st = troupe_asgn_comp_new(&e->comp);
    troupe_nn_t *nn = NULL;
    if (st == TROUPE_OK)
        st = troupe_nn_new(e->comp, c->prec, &nn);
    if (st == TROUPE_OK && c->compute_prec != TROUPE_PREC_VOID)
        st = troupe_nn_set_compute_prec(nn, c->compute_prec);
    troupe_tnode_t *x = e->x;
    if (st == TROUPE_OK && e->nchunks > 1) {
        /* run k reads chunk k: x := test_images[chunk] */
        int32_t sym = -1;
        st = troupe_asgn_comp_add_static_symbol(e->comp, FMNIST_EVAL_SYMBOL, e->nchunks, &sym);
        troupe_nn_begin(nn, "the chunk: x := test images[chunk]");
        troupe_nn_node(nn, "x", xn - 1, xd + 1, &x);
        troupe_asgn_t *t = NULL;
        if (st == TROUPE_OK && troupe_nn_status(nn) == TROUPE_OK)
            st = troupe_nn_add(nn, troupe_asgn_fetch_slice(e->comp, x, sym, e->x, &t), &t);
    }
    if (st == TROUPE_OK) {
        troupe_tnode_t *z3 = NULL;
        st = s_nn_forward(nn, m, x, &z3);
        troupe_nn_begin(nn, "the logits to the host");
        troupe_asgn_t *t = NULL;
        if (st == TROUPE_OK && troupe_nn_status(nn) == TROUPE_OK)
            troupe_nn_add(nn, troupe_asgn_copy(e->comp, e->logits, troupe_asgn_node(z3), &t), &t);
        troupe_nn_end(nn);
        if (st == TROUPE_OK)
            st = troupe_nn_status(nn);
        /* the forward pass only: no loss, no gradient */
        if (st == TROUPE_OK)
            st = troupe_nn_forward_root(nn);
    }
    troupe_nn_destroy(&nn);
    if (st != TROUPE_OK) {
        fmnist_mlp_eval_destroy(&e);
        return st;
    }
    *out = e;
    return TROUPE_OK;
}

void fmnist_mlp_eval_destroy(fmnist_mlp_eval_t **e_p)
{
    if (!e_p || !*e_p)
        return;
    fmnist_mlp_eval_t *e = *e_p;
    *e_p = NULL;
    troupe_asgn_comp_destroy(&e->comp);
    s_release_nodes(e->nodes, e->nnodes);
    free(e);
}

troupe_status_t fmnist_mlp_eval_load(fmnist_mlp_eval_t *e, const fmnist_dataset_t *ds)
{
    if (!e || !ds)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_mlp_eval_load: NULL argument");
    size_t total = (size_t)troupe_tnode_num_elems(e->x);
    int64_t in = (int64_t)(total / (size_t)(e->nchunks * e->chunk));
    if (ds->count < e->n || ds->rows * ds->cols != in)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "fmnist_mlp_eval_load: the evaluation needs %lld images of %lld "
                                "pixels, the data set has %lld of %lld",
                                (long long)e->n, (long long)in, (long long)ds->count,
                                (long long)(ds->rows * ds->cols));
    void *hx = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(e->x, &hx));
    size_t nx = (size_t)(e->n * in);
    for (size_t i = 0; i < total; i++) /* the last chunk's padding: zero images */
        s_store(hx, e->x->prec, i, i < nx ? ds->pixels[i] * (1.0 / 255.0) : 0.0);
    return TROUPE_OK;
}

/* Adds to *right the rows among the first `rows` of the current logits whose largest logit
 * (first on ties) is their label. */
static troupe_status_t s_count_right(fmnist_mlp_eval_t *e, const uint8_t *labels, int64_t rows,
                                     int64_t *right)
{
    int64_t k = e->logits->dims[1];
    size_t n = (size_t)(e->chunk * k);
    double *v = malloc(n * sizeof *v);
    if (!v)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED,
                                "fmnist_mlp_eval_accuracy: out of memory");
    troupe_status_t st = troupe_tnode_get_values(e->logits, v, n);
    for (int64_t r = 0; st == TROUPE_OK && r < rows; r++) {
        const double *row = v + r * k;
        int64_t best = 0;
        for (int64_t c = 1; c < k; c++)
            if (row[c] > row[best])
                best = c;
        *right += best == labels[r];
    }
    free(v);
    return st;
}

troupe_status_t fmnist_mlp_eval_accuracy(fmnist_mlp_eval_t *e, const uint8_t *labels, double *out)
{
    if (!e || !labels || !out)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_mlp_eval_accuracy: NULL argument");
    if (e->nchunks != 1)
        return troupe_error_set(TROUPE_FAILED_PRECONDITION,
                                "fmnist_mlp_eval_accuracy: the evaluation runs in %lld chunks; "
                                "use fmnist_mlp_eval_run",
                                (long long)e->nchunks);
    int64_t right = 0;
    TROUPE_RETURN_IF_ERROR(s_count_right(e, labels, e->n, &right));
    *out = (double)right / (double)e->n;
    return TROUPE_OK;
}

troupe_status_t fmnist_mlp_eval_run(fmnist_mlp_eval_t *e, troupe_routine_t *routine,
                                    const uint8_t *labels, double *out)
{
    if (!e || !routine || !labels || !out)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_mlp_eval_run: NULL argument");
    int64_t right = 0;
    for (int64_t k = 0; k < e->nchunks; k++) {
        if (e->nchunks > 1)
            TROUPE_RETURN_IF_ERROR(troupe_routine_set_index(routine, FMNIST_EVAL_SYMBOL, k));
        troupe_event_t *ev = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_routine_run(routine, &ev));
        troupe_status_t st = troupe_event_sync(ev, TROUPE_TIMEOUT_INFINITE);
        troupe_event_release(&ev);
        TROUPE_RETURN_IF_ERROR(st);
        int64_t rows = k + 1 < e->nchunks ? e->chunk : e->n - k * e->chunk;
        TROUPE_RETURN_IF_ERROR(s_count_right(e, labels + k * e->chunk, rows, &right));
    }
    *out = (double)right / (double)e->n;
    return TROUPE_OK;
}
