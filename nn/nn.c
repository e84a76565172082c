/* troupe — a model under construction (see nn.h). */
#include "nn/nn.h"

#include "nn/grad.h"

#include "ir/prec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct s_ptrs {
    void **v;
    size_t n, cap;
} s_ptrs_t;

struct troupe_nn {
    troupe_asgn_comp_t *comp;
    troupe_prec_t prec;
    troupe_prec_t compute_prec; /* of the matrix products' factors (troupe_nn_compute_copy) */
    troupe_status_t st;
    s_ptrs_t nodes;  /* owned references */
    s_ptrs_t params; /* borrowed from nodes */
    s_ptrs_t grads;
    s_ptrs_t stops;
    troupe_tnode_t *loss_scale; /* troupe_nn_loss_scale: borrowed from nodes, or NULL */
    s_ptrs_t layers; /* finished top-level trees: block comments and loose statements */
    s_ptrs_t items;  /* the open layer's statements */
    char *layer;     /* the open layer's name, or NULL */
    struct {
        double v;
        troupe_tnode_t *tn;
    } consts[32];
    int nconsts;
};

static troupe_status_t s_fail(troupe_nn_t *nn, troupe_status_t st)
{
    if (nn && nn->st == TROUPE_OK)
        nn->st = st;
    return nn ? nn->st : st;
}

static troupe_status_t s_append(troupe_nn_t *nn, s_ptrs_t *p, void *x)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        void **v = realloc(p->v, cap * sizeof *v);
        if (!v)
            return s_fail(nn, troupe__error(TROUPE_RESOURCE_EXHAUSTED, "nn: out of memory"));
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = x;
    return TROUPE_OK;
}

troupe_status_t troupe_nn_new(troupe_asgn_comp_t *comp, troupe_prec_t prec, troupe_nn_t **out)
{
    if (!comp || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_new: NULL argument");
    *out = NULL;
    if (prec != TROUPE_PREC_SINGLE && prec != TROUPE_PREC_DOUBLE)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_nn_new: precision %s (expected single or double)",
                             troupe_prec_name(prec));
    troupe_nn_t *nn = calloc(1, sizeof *nn);
    if (!nn)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "troupe_nn_new: out of memory");
    nn->comp = comp;
    nn->prec = prec;
    nn->compute_prec = prec;
    *out = nn;
    return TROUPE_OK;
}

void troupe_nn_destroy(troupe_nn_t **nn_p)
{
    if (!nn_p || !*nn_p)
        return;
    troupe_nn_t *nn = *nn_p;
    for (size_t i = 0; i < nn->nodes.n; i++) {
        troupe_tnode_t *tn = nn->nodes.v[i];
        troupe_tnode_release(&tn);
    }
    free(nn->nodes.v);
    free(nn->params.v);
    free(nn->grads.v);
    free(nn->stops.v);
    free(nn->layers.v);
    free(nn->items.v);
    free(nn->layer);
    free(nn);
    *nn_p = NULL;
}

troupe_status_t troupe_nn_status(const troupe_nn_t *nn)
{
    return nn ? nn->st : TROUPE_INVALID_ARGUMENT;
}

troupe_asgn_comp_t *troupe_nn_comp(const troupe_nn_t *nn)
{
    return nn ? nn->comp : NULL;
}

troupe_prec_t troupe_nn_prec(const troupe_nn_t *nn)
{
    return nn ? nn->prec : TROUPE_PREC_SINGLE;
}

/* Moves the open layer's statements into one tree of nn->layers. */
static troupe_status_t s_close(troupe_nn_t *nn)
{
    if (nn->items.n == 0) {
        free(nn->layer);
        nn->layer = NULL;
        return TROUPE_OK;
    }
    troupe_asgn_t *seq = NULL, *blk = NULL;
    troupe_status_t st =
        troupe_asgn_seq(nn->comp, nn->items.n, (troupe_asgn_t *const *)nn->items.v, &seq);
    if (st == TROUPE_OK && nn->layer)
        st = troupe_asgn_block_comment(nn->comp, nn->layer, seq, &blk);
    free(nn->layer);
    nn->layer = NULL;
    nn->items.n = 0;
    if (st != TROUPE_OK)
        return s_fail(nn, st);
    return s_append(nn, &nn->layers, blk ? blk : seq);
}

troupe_status_t troupe_nn_begin(troupe_nn_t *nn, const char *name)
{
    if (!nn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_begin: NULL nn");
    if (nn->st != TROUPE_OK)
        return nn->st;
    if (!name)
        return s_fail(nn, troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_begin: NULL name"));
    TROUPE_RETURN_IF_ERROR(s_close(nn));
    size_t len = strlen(name);
    nn->layer = malloc(len + 1);
    if (nn->layer)
        memcpy(nn->layer, name, len + 1);
    if (!nn->layer)
        return s_fail(nn, troupe__error(TROUPE_RESOURCE_EXHAUSTED, "nn: out of memory"));
    return TROUPE_OK;
}

troupe_status_t troupe_nn_end(troupe_nn_t *nn)
{
    if (!nn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_end: NULL nn");
    if (nn->st != TROUPE_OK)
        return nn->st;
    return s_close(nn);
}

troupe_status_t troupe_nn_node_prec(troupe_nn_t *nn, const char *label, troupe_prec_t prec,
                                    int ndims, const int64_t *dims, troupe_tnode_t **out)
{
    if (out)
        *out = NULL;
    if (!nn || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_node: NULL argument");
    if (nn->st != TROUPE_OK)
        return nn->st;
    const char *labels[1] = {label ? label : "nn"};
    troupe_tnode_t *tn = NULL;
    troupe_status_t st = troupe_tnode_new(labels, 1, prec, ndims, dims, NULL, 0.0, &tn);
    if (st != TROUPE_OK)
        return s_fail(nn, st);
    if (s_append(nn, &nn->nodes, tn) != TROUPE_OK) {
        troupe_tnode_release(&tn);
        return nn->st;
    }
    *out = tn;
    return TROUPE_OK;
}

troupe_status_t troupe_nn_node(troupe_nn_t *nn, const char *label, int ndims,
                               const int64_t *dims, troupe_tnode_t **out)
{
    return troupe_nn_node_prec(nn, label, nn ? nn->prec : TROUPE_PREC_SINGLE, ndims, dims, out);
}

troupe_status_t troupe_nn_param(troupe_nn_t *nn, const char *label, int ndims,
                                const int64_t *dims, troupe_tnode_t **out)
{
    troupe_tnode_t *p = NULL, *g = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, label, ndims, dims, &p));
    troupe_status_t st = troupe_nn_grad_node_new(p, &g);
    if (st != TROUPE_OK)
        return s_fail(nn, st);
    if (s_append(nn, &nn->nodes, g) != TROUPE_OK) {
        troupe_tnode_release(&g);
        return nn->st;
    }
    TROUPE_RETURN_IF_ERROR(s_append(nn, &nn->params, p));
    TROUPE_RETURN_IF_ERROR(s_append(nn, &nn->grads, g));
    *out = p;
    return TROUPE_OK;
}

troupe_status_t troupe_nn_param_use(troupe_nn_t *nn, troupe_tnode_t *param, troupe_tnode_t *grad)
{
    if (!nn || !param || !grad)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_param_use: NULL argument");
    if (nn->st != TROUPE_OK)
        return nn->st;
    troupe_tnode_retain(param);
    TROUPE_RETURN_IF_ERROR(s_append(nn, &nn->nodes, param));
    troupe_tnode_retain(grad);
    TROUPE_RETURN_IF_ERROR(s_append(nn, &nn->nodes, grad));
    TROUPE_RETURN_IF_ERROR(s_append(nn, &nn->params, param));
    return s_append(nn, &nn->grads, grad);
}

troupe_status_t troupe_nn_add(troupe_nn_t *nn, troupe_status_t built, troupe_asgn_t *const *t)
{
    if (!nn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_add: NULL nn");
    if (nn->st != TROUPE_OK)
        return nn->st;
    if (built != TROUPE_OK)
        return s_fail(nn, built);
    return s_append(nn, &nn->items, *t);
}

troupe_status_t troupe_nn_un(troupe_nn_t *nn, bool init, troupe_binop_t accum, troupe_tnode_t *lhs,
                             troupe_unop_t op, troupe_tnode_t *a, const char *spec)
{
    if (!nn || nn->st != TROUPE_OK)
        return nn ? nn->st : TROUPE_INVALID_ARGUMENT;
    troupe_asgn_t *t = NULL;
    troupe_status_t st =
        troupe_asgn_accum_unop(nn->comp, init, accum, lhs, op, troupe_asgn_node(a), spec, &t);
    return troupe_nn_add(nn, st, &t);
}

troupe_status_t troupe_nn_bin(troupe_nn_t *nn, bool init, troupe_binop_t accum,
                              troupe_tnode_t *lhs, troupe_binop_t op, troupe_tnode_t *a,
                              troupe_tnode_t *b, const char *spec)
{
    if (!nn || nn->st != TROUPE_OK)
        return nn ? nn->st : TROUPE_INVALID_ARGUMENT;
    troupe_asgn_t *t = NULL;
    troupe_status_t st = troupe_asgn_accum_binop(nn->comp, init, accum, lhs, op,
                                                 troupe_asgn_node(a), troupe_asgn_node(b), spec, &t);
    return troupe_nn_add(nn, st, &t);
}

troupe_status_t troupe_nn_ter(troupe_nn_t *nn, bool init, troupe_binop_t accum,
                              troupe_tnode_t *lhs, troupe_ternop_t op, troupe_tnode_t *a,
                              troupe_tnode_t *b, troupe_tnode_t *c, const char *spec)
{
    if (!nn || nn->st != TROUPE_OK)
        return nn ? nn->st : TROUPE_INVALID_ARGUMENT;
    troupe_asgn_t *t = NULL;
    troupe_status_t st = troupe_asgn_accum_ternop(nn->comp, init, accum, lhs, op,
                                                  troupe_asgn_node(a), troupe_asgn_node(b),
                                                  troupe_asgn_node(c), spec, &t);
    return troupe_nn_add(nn, st, &t);
}

troupe_status_t troupe_nn_const(troupe_nn_t *nn, double c, troupe_tnode_t **out)
{
    if (out)
        *out = NULL;
    if (!nn || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_const: NULL argument");
    if (nn->st != TROUPE_OK)
        return nn->st;
    for (int i = 0; i < nn->nconsts; i++)
        if (nn->consts[i].v == c) {
            *out = nn->consts[i].tn;
            return TROUPE_OK;
        }
    if (nn->nconsts == (int)(sizeof nn->consts / sizeof nn->consts[0]))
        return s_fail(nn,
                      troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                                    "nn: too many constants (%d distinct values; asked for %.9g)",
                                    nn->nconsts, c));
    char name[40];
    snprintf(name, sizeof name, "const %.9g", c);
    troupe_tnode_t *tn = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, name, 0, NULL, &tn));
    troupe_asgn_t *t = NULL;
    /* the fetch goes to the top level, before the open layer's statements */
    troupe_status_t st = troupe_asgn_fetch_constant(nn->comp, tn, c, &t);
    if (st != TROUPE_OK)
        return s_fail(nn, st);
    TROUPE_RETURN_IF_ERROR(s_append(nn, &nn->layers, t));
    nn->consts[nn->nconsts].v = c;
    nn->consts[nn->nconsts++].tn = tn;
    *out = tn;
    return TROUPE_OK;
}

troupe_status_t troupe_nn_materialize(troupe_nn_t *nn, troupe_tnode_t *tn, int32_t provenance)
{
    if (!nn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_materialize: NULL nn");
    if (nn->st != TROUPE_OK) /* tn may be NULL from that failure: keep its message */
        return nn->st;
    if (!tn)
        return troupe_nn_add(
            nn, troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_materialize: NULL node"), NULL);
    const troupe_memory_mode_t mat = {TROUPE_MM_MATERIALIZED, 0, 0};
    troupe_status_t st = troupe_tnode_update_memory_mode(tn, mat, provenance);
    return st == TROUPE_OK ? TROUPE_OK : troupe_nn_add(nn, st, NULL);
}

troupe_status_t troupe_nn_stop_gradient(troupe_nn_t *nn, troupe_tnode_t *tn)
{
    if (!nn || !tn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_stop_gradient: NULL argument");
    if (nn->st != TROUPE_OK)
        return nn->st;
    return s_append(nn, &nn->stops, tn);
}

troupe_status_t troupe_nn_forward_root(troupe_nn_t *nn)
{
    if (!nn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_forward_root: NULL nn");
    if (nn->st != TROUPE_OK)
        return nn->st;
    TROUPE_RETURN_IF_ERROR(s_close(nn));
    troupe_asgn_t *root = NULL;
    troupe_status_t st =
        troupe_asgn_seq(nn->comp, nn->layers.n, (troupe_asgn_t *const *)nn->layers.v, &root);
    if (st != TROUPE_OK)
        return s_fail(nn, st);
    troupe_asgn_comp_set_root(nn->comp, root);
    return TROUPE_OK;
}

troupe_status_t troupe_nn_finish(troupe_nn_t *nn, troupe_tnode_t *loss)
{
    if (!nn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_finish: NULL nn");
    if (nn->st != TROUPE_OK)
        return nn->st;
    if (!loss)
        return s_fail(nn, troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_finish: NULL loss"));
    TROUPE_RETURN_IF_ERROR(troupe_nn_forward_root(nn));
    troupe_status_t st;
    troupe_nn_grad_opts_t o = {(troupe_tnode_t *const *)nn->stops.v, nn->stops.n, nn->loss_scale};
    st = troupe_nn_grad(nn->comp, loss, nn->params.n, (troupe_tnode_t *const *)nn->params.v,
                        (troupe_tnode_t *const *)nn->grads.v, &o);
    return st != TROUPE_OK ? s_fail(nn, st) : TROUPE_OK;
}

size_t troupe_nn_params(const troupe_nn_t *nn, troupe_tnode_t *const **params,
                        troupe_tnode_t *const **grads)
{
    if (params)
        *params = nn ? (troupe_tnode_t *const *)nn->params.v : NULL;
    if (grads)
        *grads = nn ? (troupe_tnode_t *const *)nn->grads.v : NULL;
    return nn ? nn->params.n : 0;
}

troupe_status_t troupe_nn_loss_scale(troupe_nn_t *nn, troupe_tnode_t **out)
{
    if (!nn || !out)
        return s_fail(
            nn, troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_loss_scale: NULL argument"));
    if (nn->st != TROUPE_OK)
        return nn->st;
    if (nn->loss_scale == NULL) {
        TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "loss_scale", 0, NULL, &nn->loss_scale));
        const double one = 1.0;
        troupe_status_t st = troupe_tnode_set_values(nn->loss_scale, &one, 1);
        /* hosted, and rewritten between runs (the driver uploads each new scale) */
        troupe_memory_mode_t hosted = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT,
                                       TROUPE_SHARING_UNSET};
        if (st == TROUPE_OK)
            st = troupe_tnode_update_memory_mode(nn->loss_scale, hosted, 3202);
        if (st != TROUPE_OK)
            return s_fail(nn, st);
    }
    *out = nn->loss_scale;
    return TROUPE_OK;
}

troupe_status_t troupe_nn_set_compute_prec(troupe_nn_t *nn, troupe_prec_t prec)
{
    if (!nn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_set_compute_prec: NULL argument");
    if (nn->st != TROUPE_OK)
        return nn->st;
    bool narrow = prec == TROUPE_PREC_BFLOAT16 || prec == TROUPE_PREC_HALF;
    if (prec != nn->prec && !(narrow && nn->prec == TROUPE_PREC_SINGLE))
        return s_fail(nn, troupe__error(TROUPE_INVALID_ARGUMENT,
                                        "troupe_nn_set_compute_prec: %s products in a %s model "
                                        "(expected the model's precision, or bfloat16 or half "
                                        "in a single-precision model)",
                                        troupe_prec_name(prec), troupe_prec_name(nn->prec)));
    nn->compute_prec = prec;
    return TROUPE_OK;
}

troupe_prec_t troupe_nn_compute_prec(const troupe_nn_t *nn)
{
    return nn->compute_prec;
}

troupe_status_t troupe_nn_compute_copy(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t **out)
{
    if (!nn || !x || !out)
        return s_fail(nn, troupe__error(TROUPE_INVALID_ARGUMENT,
                                        "troupe_nn_compute_copy: NULL argument"));
    if (nn->st != TROUPE_OK)
        return nn->st;
    if (x->prec == nn->compute_prec || !troupe_prec_is_float(x->prec)) {
        *out = x;
        return TROUPE_OK;
    }
    TROUPE_RETURN_IF_ERROR(troupe_nn_node_prec(nn, troupe_prec_name(nn->compute_prec),
                                               nn->compute_prec, x->ndims, x->dims, out));
    char spec[2 * TROUPE_MAX_DIMS + 3];
    int n = 0;
    for (int a = 0; a < x->ndims; a++)
        spec[n++] = (char)('a' + a);
    spec[n++] = '=';
    spec[n++] = '>';
    for (int a = 0; a < x->ndims; a++)
        spec[n++] = (char)('a' + a);
    spec[n] = '\0';
    return troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_UNOP_IDENTITY, x, spec);
}
