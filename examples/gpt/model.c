/* gpt — GPT-2 from nn/ layers (see model.h). */
#include "model.h"

#include "actors/context.h"
#include "actors/device.h"
#include "actors/event.h"
#include "actors/host.h"
#include "actors/stream.h"
#include "base/clock.h"
#include "base/config.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/nn.h"
#include "nn/norm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_PROV 970 /* provenance of this program's memory-mode choices */

static troupe_status_t s_set_mode(troupe_tnode_t *tn, troupe_memory_mode_kind_t kind,
                                  troupe_memory_type_t memtype)
{
    troupe_memory_mode_t m = {kind, memtype, TROUPE_SHARING_UNSET};
    return troupe_tnode_update_memory_mode(tn, m, S_PROV);
}

/* ---- parameters ----------------------------------------------------------------------------- */

static size_t s_index(int L, int t, int l)
{
    if (t < GPT_LN1W)
        return (size_t)t;
    if (t <= GPT_FCPROJB)
        return 2 + (size_t)(t - GPT_LN1W) * (size_t)L + (size_t)l;
    return 2 + 12 * (size_t)L + (size_t)(t - GPT_LNFW);
}

/* One layer's (or the whole) shape of tensor t. */
static int s_shape(const gpt_llmc_config_t *c, int t, int64_t *dims)
{
    int64_t C = c->channels;
    switch (t) {
    case GPT_WTE: dims[0] = c->padded_vocab; dims[1] = C; return 2;
    case GPT_WPE: dims[0] = c->max_seq; dims[1] = C; return 2;
    case GPT_QKVW: dims[0] = 3 * C; dims[1] = C; return 2;
    case GPT_QKVB: dims[0] = 3 * C; return 1;
    case GPT_ATTPROJW: dims[0] = C; dims[1] = C; return 2;
    case GPT_FCW: dims[0] = 4 * C; dims[1] = C; return 2;
    case GPT_FCB: dims[0] = 4 * C; return 1;
    case GPT_FCPROJW: dims[0] = C; dims[1] = 4 * C; return 2;
    default: dims[0] = C; return 1; /* LayerNorm weights and biases, C-wide biases */
    }
}

troupe_status_t gpt_params_new(const gpt_llmc_config_t *cfg, gpt_params_t **out)
{
    if (!cfg || !out)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_params_new: NULL argument");
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(gpt_llmc_config_check(cfg, "gpt_params_new"));
    gpt_params_t *p = calloc(1, sizeof *p);
    if (!p)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "gpt_params_new: out of memory");
    p->cfg = *cfg;
    int L = cfg->layers;
    p->n = 4 + 12 * (size_t)L;
    p->params = calloc(p->n, sizeof *p->params);
    p->grads = calloc(p->n, sizeof *p->grads);
    p->offset = calloc(p->n, sizeof *p->offset);
    troupe_status_t st = TROUPE_OK;
    if (!p->params || !p->grads || !p->offset)
        st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "gpt_params_new: out of memory");
    size_t at = 0;
    for (int t = 0; t < GPT_LLMC_NTENSORS && st == TROUPE_OK; t++) {
        int nl = gpt_llmc_tensor_per_layer(t) ? L : 1;
        for (int l = 0; l < nl && st == TROUPE_OK; l++) {
            size_t k = s_index(L, t, l);
            int64_t dims[2];
            int nd = s_shape(cfg, t, dims);
            char layer[24];
            if (nl > 1)
                snprintf(layer, sizeof layer, "h%d", l);
            else
                snprintf(layer, sizeof layer, "model");
            const char *lp[3] = {layer, gpt_llmc_tensor_name(t), "grad"};
            st = troupe_tnode_new(lp, 2, TROUPE_PREC_SINGLE, nd, dims, NULL, 0.0, &p->params[k]);
            if (st == TROUPE_OK)
                st = troupe_tnode_new(lp, 3, TROUPE_PREC_SINGLE, nd, dims, NULL, 0.0,
                                      &p->grads[k]);
            if (st == TROUPE_OK)
                st = s_set_mode(p->params[k], TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
            if (st == TROUPE_OK) {
                p->offset[k] = at;
                at += (size_t)troupe_tnode_num_elems(p->params[k]);
            }
        }
    }
    if (st != TROUPE_OK) {
        gpt_params_destroy(&p);
        return st;
    }
    *out = p;
    return TROUPE_OK;
}

void gpt_params_destroy(gpt_params_t **p_p)
{
    if (!p_p || !*p_p)
        return;
    gpt_params_t *p = *p_p;
    *p_p = NULL;
    for (size_t k = 0; k < p->n; k++) {
        if (p->params)
            troupe_tnode_release(&p->params[k]);
        if (p->grads)
            troupe_tnode_release(&p->grads[k]);
    }
    free(p->params);
    free(p->grads);
    free(p->offset);
    free(p);
}

troupe_tnode_t *gpt_params_node(const gpt_params_t *p, int t, int l)
{
    return p->params[s_index(p->cfg.layers, t, l)];
}

static troupe_status_t s_flat_io(gpt_params_t *p, troupe_tnode_t **nodes, float *get,
                                 const float *set)
{
    size_t maxn = 0;
    for (size_t k = 0; k < p->n; k++)
        if ((size_t)troupe_tnode_num_elems(nodes[k]) > maxn)
            maxn = (size_t)troupe_tnode_num_elems(nodes[k]);
    double *v = malloc(maxn * sizeof *v);
    if (!v)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "gpt: out of memory");
    troupe_status_t st = TROUPE_OK;
    for (size_t k = 0; k < p->n && st == TROUPE_OK; k++) {
        size_t n = (size_t)troupe_tnode_num_elems(nodes[k]);
        if (set) {
            for (size_t i = 0; i < n; i++)
                v[i] = set[p->offset[k] + i];
            st = troupe_tnode_set_values(nodes[k], v, n);
        } else {
            st = troupe_tnode_get_values(nodes[k], v, n);
            for (size_t i = 0; i < n && st == TROUPE_OK; i++)
                get[p->offset[k] + i] = (float)v[i];
        }
    }
    free(v);
    return st;
}

troupe_status_t gpt_params_set(gpt_params_t *p, const float *flat)
{
    if (!p || !flat)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_params_set: NULL argument");
    return s_flat_io(p, p->params, NULL, flat);
}

troupe_status_t gpt_params_get(gpt_params_t *p, float *flat)
{
    if (!p || !flat)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_params_get: NULL argument");
    return s_flat_io(p, p->params, flat, NULL);
}

troupe_status_t gpt_params_get_grads(gpt_params_t *p, float *flat)
{
    if (!p || !flat)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_params_get_grads: NULL argument");
    return s_flat_io(p, p->grads, flat, NULL);
}

troupe_status_t gpt_init_params(const gpt_llmc_config_t *cfg, uint64_t seed, float *flat)
{
    if (!cfg || !flat)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_init_params: NULL argument");
    TROUPE_RETURN_IF_ERROR(gpt_llmc_config_check(cfg, "gpt_init_params"));
    size_t counts[GPT_LLMC_NTENSORS], maxn = 0;
    gpt_llmc_tensor_counts(cfg, counts);
    for (int t = 0; t < GPT_LLMC_NTENSORS; t++)
        maxn = counts[t] > maxn ? counts[t] : maxn;
    double *v = malloc(maxn * sizeof *v);
    if (!v)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "gpt_init_params: out of memory");
    troupe_status_t st = TROUPE_OK;
    double resid = 0.02 / sqrt(2.0 * cfg->layers);
    size_t at = 0;
    for (int t = 0; t < GPT_LLMC_NTENSORS && st == TROUPE_OK; t++) {
        size_t n = counts[t];
        switch (t) {
        case GPT_WTE:
        case GPT_WPE:
        case GPT_QKVW:
        case GPT_FCW:
        case GPT_ATTPROJW:
        case GPT_FCPROJW:
            st = troupe_nn_init_normal(v, n, 0.0,
                                       t == GPT_ATTPROJW || t == GPT_FCPROJW ? resid : 0.02,
                                       seed + (uint64_t)t);
            if (t == GPT_WTE) /* the padded rows stay 0, as llm.c's writer pads them */
                for (size_t i = (size_t)cfg->vocab * (size_t)cfg->channels; i < n; i++)
                    v[i] = 0;
            break;
        case GPT_LN1W:
        case GPT_LN2W:
        case GPT_LNFW:
            for (size_t i = 0; i < n; i++)
                v[i] = 1;
            break;
        default:
            for (size_t i = 0; i < n; i++)
                v[i] = 0;
        }
        for (size_t i = 0; i < n && st == TROUPE_OK; i++)
            flat[at + i] = (float)v[i];
        at += n;
    }
    free(v);
    return st;
}

/* ---- the model ------------------------------------------------------------------------------ */

static troupe_status_t s_keep(gpt_model_t *m, troupe_tnode_t *tn)
{
    if (m->nown == (int)(sizeof m->own / sizeof m->own[0]))
        return troupe_error_set(TROUPE_INTERNAL, "gpt_model: too many kept nodes");
    troupe_tnode_retain(tn);
    m->own[m->nown++] = tn;
    return TROUPE_OK;
}

/* The forward pass from x (B,T) to the logits (B,T,Vp), as llm.c's gpt2_forward. */
static troupe_status_t s_forward(troupe_nn_t *nn, gpt_params_t *p, gpt_model_t *m)
{
    const gpt_llmc_config_t *c = &p->cfg;
    int64_t B = m->cfg.batch, T = m->cfg.seq, C = c->channels;
    const int64_t btc[3] = {B, T, C};
    troupe_tnode_t *tok = NULL, *pe = NULL, *res = NULL;
    troupe_nn_begin(nn, "embedding: wte[x] + wpe[t]");
    troupe_nn_embedding(nn, m->x, gpt_params_node(p, GPT_WTE, 0), &tok);
    troupe_nn_embedding(nn, m->pos, gpt_params_node(p, GPT_WPE, 0), &pe);
    troupe_nn_node(nn, "encoded", 3, btc, &res);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, res, TROUPE_BINOP_ADD, tok, pe, "btc,tc=>btc");
    for (int l = 0; l < c->layers; l++) {
        char name[64];
        troupe_tnode_t *ln1 = NULL, *att = NULL, *res2 = NULL, *ln2 = NULL, *fch = NULL,
                       *g = NULL, *fcp = NULL, *res3 = NULL;
        snprintf(name, sizeof name, "block %d: attention", l);
        troupe_nn_begin(nn, name);
        troupe_nn_layernorm(nn, res, gpt_params_node(p, GPT_LN1W, l),
                            gpt_params_node(p, GPT_LN1B, l), GPT_LN_EPS, &ln1);
        troupe_nn_attention(nn, ln1, gpt_params_node(p, GPT_QKVW, l),
                            gpt_params_node(p, GPT_QKVB, l), gpt_params_node(p, GPT_ATTPROJW, l),
                            gpt_params_node(p, GPT_ATTPROJB, l), c->heads, TROUPE_NN_OUT_IN,
                            &att);
        troupe_nn_node(nn, "residual2", 3, btc, &res2);
        troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, res2, TROUPE_BINOP_ADD, res, att,
                      "btc,btc=>btc");
        snprintf(name, sizeof name, "block %d: MLP", l);
        troupe_nn_begin(nn, name);
        troupe_nn_layernorm(nn, res2, gpt_params_node(p, GPT_LN2W, l),
                            gpt_params_node(p, GPT_LN2B, l), GPT_LN_EPS, &ln2);
        troupe_nn_linear_oi(nn, ln2, gpt_params_node(p, GPT_FCW, l),
                            gpt_params_node(p, GPT_FCB, l), &fch);
        troupe_nn_gelu(nn, fch, &g);
        troupe_nn_linear_oi(nn, g, gpt_params_node(p, GPT_FCPROJW, l),
                            gpt_params_node(p, GPT_FCPROJB, l), &fcp);
        troupe_nn_node(nn, "residual3", 3, btc, &res3);
        troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, res3, TROUPE_BINOP_ADD, res2, fcp,
                      "btc,btc=>btc");
        res = res3;
    }
    troupe_tnode_t *lnf = NULL;
    troupe_nn_begin(nn, "final LayerNorm, logits = lnf wte^T over Vp");
    troupe_nn_layernorm(nn, res, gpt_params_node(p, GPT_LNFW, 0), gpt_params_node(p, GPT_LNFB, 0),
                        GPT_LN_EPS, &lnf);
    troupe_nn_node(nn, "logits", 3, (int64_t[]){B, T, c->padded_vocab}, &m->logits);
    troupe_tnode_t *lnf_c = NULL, *wte_c = NULL; /* the factors in the compute precision */
    troupe_nn_compute_copy(nn, lnf, &lnf_c);
    troupe_nn_compute_copy(nn, gpt_params_node(p, GPT_WTE, 0), &wte_c);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, m->logits, TROUPE_BINOP_MUL, lnf_c, wte_c,
                  "btc,vc=>btv");
    return troupe_nn_status(nn);
}

troupe_status_t gpt_model_new(gpt_params_t *p, const gpt_model_config_t *cfg, gpt_model_t **out)
{
    if (!p || !cfg || !out)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_model_new: NULL argument");
    *out = NULL;
    if (cfg->batch < 1 || cfg->seq < 1 || cfg->num_batches < 0 ||
        (cfg->train && !cfg->targets) || (cfg->num_batches > 0 && !cfg->targets))
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "gpt_model_new: bad batch B=%lld T=%lld batches=%lld",
                                (long long)cfg->batch, (long long)cfg->seq,
                                (long long)cfg->num_batches);
    if (cfg->seq > p->cfg.max_seq)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "the model's maxT = %d is below the sequence length T = %lld",
                                p->cfg.max_seq, (long long)cfg->seq);
    gpt_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "gpt_model_new: out of memory");
    m->cfg = *cfg;
    troupe_nn_t *nn = NULL;
    troupe_status_t st = troupe_asgn_comp_new(&m->comp);
    if (st == TROUPE_OK)
        st = troupe_nn_new(m->comp, TROUPE_PREC_SINGLE, &nn);
    if (st == TROUPE_OK && cfg->compute_prec != TROUPE_PREC_VOID)
        st = troupe_nn_set_compute_prec(nn, cfg->compute_prec);
    if (st != TROUPE_OK)
        goto fail;
    int64_t B = cfg->batch, T = cfg->seq;
    const int64_t bt[2] = {B, T};
    troupe_nn_node_prec(nn, "pos", TROUPE_PREC_INT32, 1, &T, &m->pos);
    troupe_nn_node_prec(nn, "x", TROUPE_PREC_INT32, 2, bt, &m->x);
    if (cfg->targets)
        troupe_nn_node_prec(nn, "y", TROUPE_PREC_INT32, 2, bt, &m->y);
    if (cfg->num_batches > 0) {
        /* the feed: x, y := x_all[batch], y_all[batch] in a routine of its own (a gather's
         * index node must be an input of the routine that gathers with it) */
        int32_t sym = -1;
        const int64_t nbt[3] = {cfg->num_batches, B, T};
        troupe_nn_node_prec(nn, "x_all", TROUPE_PREC_INT32, 3, nbt, &m->x_all);
        troupe_nn_node_prec(nn, "y_all", TROUPE_PREC_INT32, 3, nbt, &m->y_all);
        st = troupe_nn_status(nn);
        if (st == TROUPE_OK)
            st = troupe_asgn_comp_new(&m->feed_comp);
        if (st == TROUPE_OK)
            st = troupe_asgn_comp_add_static_symbol(m->feed_comp, GPT_BATCH_SYMBOL,
                                                    cfg->num_batches, &sym);
        troupe_asgn_t *tx = NULL, *ty = NULL, *seq = NULL;
        if (st == TROUPE_OK)
            st = troupe_asgn_fetch_slice(m->feed_comp, m->x, sym, m->x_all, &tx);
        if (st == TROUPE_OK)
            st = troupe_asgn_fetch_slice(m->feed_comp, m->y, sym, m->y_all, &ty);
        if (st == TROUPE_OK)
            st = troupe_asgn_seq2(m->feed_comp, tx, ty, &seq);
        if (st == TROUPE_OK)
            troupe_asgn_comp_set_root(m->feed_comp, seq);
    }
    if (st == TROUPE_OK)
        st = troupe_nn_status(nn);
    for (size_t k = 0; k < p->n && st == TROUPE_OK; k++)
        st = troupe_nn_param_use(nn, p->params[k], p->grads[k]);
    if (st == TROUPE_OK)
        st = s_forward(nn, p, m);
    if (st == TROUPE_OK && cfg->targets) {
        troupe_nn_begin(nn, "loss: mean cross-entropy over the first V logits");
        troupe_nn_softmax_xent_targets(nn, m->logits, m->y, p->cfg.vocab, &m->loss);
        st = troupe_nn_status(nn);
    }
    /* half products: the backward pass starts from the loss scale (the driver keeps it) */
    if (st == TROUPE_OK && cfg->train && cfg->compute_prec == TROUPE_PREC_HALF)
        st = troupe_nn_loss_scale(nn, &m->loss_scale);
    if (st == TROUPE_OK)
        st = cfg->train ? troupe_nn_finish(nn, m->loss) : troupe_nn_forward_root(nn);
    /* the nodes the program reads or fills stay with the model */
    troupe_tnode_t *keep[8] = {m->pos, m->x_all,  m->y_all, m->x,
                               m->y,   m->logits, m->loss,  m->loss_scale};
    for (int i = 0; i < 8 && st == TROUPE_OK; i++)
        if (keep[i])
            st = s_keep(m, keep[i]);
    if (st == TROUPE_OK)
        st = s_set_mode(m->pos, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_CONSTANT);
    /* the minibatches change between steps (gpt_model_set_minibatches): not constant */
    if (st == TROUPE_OK && m->x_all)
        st = s_set_mode(m->x_all, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
    if (st == TROUPE_OK && m->y_all)
        st = s_set_mode(m->y_all, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
    if (st == TROUPE_OK && m->x_all) {
        st = s_set_mode(m->x, TROUPE_MM_MATERIALIZED, TROUPE_MEMTYPE_UNSET_HOSTED);
        if (st == TROUPE_OK)
            st = s_set_mode(m->y, TROUPE_MM_MATERIALIZED, TROUPE_MEMTYPE_UNSET_HOSTED);
    }
    if (st == TROUPE_OK && !m->x_all) {
        st = s_set_mode(m->x, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
        if (st == TROUPE_OK && m->y)
            st = s_set_mode(m->y, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
        if (st == TROUPE_OK && !cfg->train)
            st = s_set_mode(m->logits, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
    }
    if (st == TROUPE_OK && m->loss)
        st = s_set_mode(m->loss, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT);
    if (st == TROUPE_OK) {
        double *pv = malloc((size_t)T * sizeof *pv);
        if (!pv) {
            st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "gpt_model_new: out of memory");
        } else {
            for (int64_t t = 0; t < T; t++)
                pv[t] = (double)t;
            st = troupe_tnode_set_values(m->pos, pv, (size_t)T);
            free(pv);
        }
    }
    troupe_nn_destroy(&nn);
    if (st != TROUPE_OK)
        goto fail;
    *out = m;
    return TROUPE_OK;
fail:
    troupe_nn_destroy(&nn);
    gpt_model_destroy(&m);
    return st;
}

void gpt_model_destroy(gpt_model_t **m_p)
{
    if (!m_p || !*m_p)
        return;
    gpt_model_t *m = *m_p;
    *m_p = NULL;
    troupe_asgn_comp_destroy(&m->feed_comp);
    troupe_asgn_comp_destroy(&m->comp);
    for (int i = 0; i < m->nown; i++)
        troupe_tnode_release(&m->own[i]);
    free(m);
}

troupe_status_t gpt_model_set_batch(gpt_model_t *m, const int32_t *x, const int32_t *y)
{
    if (!m || !x || m->x_all || (m->y && !y))
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_model_set_batch: bad argument");
    size_t n = (size_t)(m->cfg.batch * m->cfg.seq);
    double *v = malloc(n * sizeof *v);
    if (!v)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "gpt_model_set_batch: out of memory");
    for (size_t i = 0; i < n; i++)
        v[i] = x[i];
    troupe_status_t st = troupe_tnode_set_values(m->x, v, n);
    if (st == TROUPE_OK && m->y) {
        for (size_t i = 0; i < n; i++)
            v[i] = y[i];
        st = troupe_tnode_set_values(m->y, v, n);
    }
    free(v);
    return st;
}

troupe_status_t gpt_model_set_data(gpt_model_t *m, const uint16_t *tokens, size_t count)
{
    if (!m || !tokens || !m->x_all)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_model_set_data: bad argument");
    size_t B = (size_t)m->cfg.batch, T = (size_t)m->cfg.seq, NB = (size_t)m->cfg.num_batches;
    if (count < NB * B * T + 1)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "gpt_model_set_data: %zu tokens, %zu minibatches of %zu x %zu "
                                "need %zu",
                                count, NB, B, T, NB * B * T + 1);
    void *hx = NULL, *hy = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(m->x_all, &hx));
    TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(m->y_all, &hy));
    int32_t *x = hx, *y = hy;
    for (size_t i = 0; i < NB * B * T; i++) {
        x[i] = tokens[i];
        y[i] = tokens[i + 1];
    }
    return TROUPE_OK;
}

troupe_status_t gpt_model_set_minibatches(gpt_model_t *m, const int32_t *x, const int32_t *y)
{
    if (!m || !x || !y || !m->x_all)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "gpt_model_set_minibatches: bad argument");
    size_t n = (size_t)(m->cfg.num_batches * m->cfg.batch * m->cfg.seq);
    double *v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED,
                                "gpt_model_set_minibatches: out of memory");
    for (size_t i = 0; i < n; i++)
        v[i] = x[i];
    troupe_status_t st = troupe_tnode_set_values(m->x_all, v, n);
    for (size_t i = 0; i < n && st == TROUPE_OK; i++)
        v[i] = y[i];
    if (st == TROUPE_OK)
        st = troupe_tnode_set_values(m->y_all, v, n);
    free(v);
    return st;
}

/* ---- runner --------------------------------------------------------------------------------- */

/* *ctx := init_from_host(*ctx, tn). */
static troupe_status_t s_upload(troupe_context_t **ctx, troupe_tnode_t *tn)
{
    troupe_context_t *c = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_init_from_host(*ctx, tn, &c, NULL));
    troupe_context_release(ctx);
    *ctx = c;
    return TROUPE_OK;
}

troupe_status_t gpt_runner_new(const char *backend_name, troupe_backend_t *backend,
                               troupe_context_t *ctx, gpt_params_t *p, gpt_model_t *m,
                               const char *name, gpt_runner_t **out)
{
    if (!p || !m || !name || !out || (ctx && !backend))
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_runner_new: bad argument");
    *out = NULL;
    gpt_runner_t *r = calloc(1, sizeof *r);
    if (!r)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "gpt_runner_new: out of memory");
    troupe_status_t st = TROUPE_OK;
    if (ctx) {
        troupe_backend_retain(backend);
        r->backend = backend;
        troupe_context_retain(ctx);
        r->ctx = ctx;
    } else {
        troupe_device_t *d = NULL;
        st = troupe_backend_open(backend_name ? backend_name : troupe_config_backend(),
                                 TROUPE_FOR_PARALLEL_COPYING, &r->backend);
        if (st == TROUPE_OK)
            st = troupe_get_device(r->backend, 0, &d);
        if (st == TROUPE_OK)
            st = troupe_new_stream(d, &r->stream);
        if (st == TROUPE_OK)
            st = troupe_context_new(r->stream, &r->ctx);
        /* the nodes the routine reads without writing: the parameters, positions, batch */
        for (size_t k = 0; k < p->n && st == TROUPE_OK; k++)
            st = s_upload(&r->ctx, p->params[k]);
    }
    /* and the model's own inputs (in a child of ctx when linking in a given context) */
    troupe_tnode_t *in[3] = {m->pos, m->x_all ? NULL : m->x, m->x_all ? NULL : m->y};
    for (int k = 0; k < 3 && st == TROUPE_OK; k++)
        if (in[k])
            st = s_upload(&r->ctx, in[k]);
    if (st == TROUPE_OK)
        st = troupe_compile(r->backend, m->comp, name, &r->code);
    if (st == TROUPE_OK)
        st = troupe_link(r->ctx, r->code, &r->routine);
    if (st != TROUPE_OK) {
        gpt_runner_destroy(&r);
        return st;
    }
    *out = r;
    return TROUPE_OK;
}

troupe_status_t gpt_runner_run(gpt_runner_t *r)
{
    if (!r)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_runner_run: NULL argument");
    troupe_event_t *ev = NULL;
    troupe_status_t st = troupe_routine_run(r->routine, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, TROUPE_TIMEOUT_INFINITE);
    troupe_event_release(&ev);
    return st;
}

void gpt_runner_destroy(gpt_runner_t **r_p)
{
    if (!r_p || !*r_p)
        return;
    gpt_runner_t *r = *r_p;
    *r_p = NULL;
    troupe_routine_release(&r->routine);
    troupe_code_release(&r->code);
    troupe_context_release(&r->ctx);
    troupe_stream_release(&r->stream);
    troupe_backend_close(&r->backend);
    free(r);
}
