/* The model of the data-parallel tests, shared by tests/test_dp.c (one process, Criterion) and
 * tests/mpi/test_dp_model.c (the multi-rank programs): a linear regression y = x W + b with a
 * mean-squared-error loss and hand-written gradients (ir/assign), trained by parallel/dp.h.
 *
 * Shapes: nb minibatches of bs rows; X [nb, bs, din] and Y [nb, bs, dout] are the inputs,
 * W [din, dout] and b [dout] the parameters, W_grad and b_grad their gradients, loss a scalar.
 * The gradient comp takes minibatch `batch` (a static index over nb) and computes
 *   pred = xb W + b, diff = pred - yb, loss = sum(diff^2) / (bs*dout),
 *   W_grad = xb^T (2 diff / (bs*dout)), b_grad = sum over rows of 2 diff / (bs*dout).
 *
 * In the fed form (dpt_lr_new_form; parallel/dp.h, troupe_dp_model_t.feed_comp) a feed comp
 * with the static index `batch` copies the minibatch into the fixed nodes xb [bs, din] and
 * yb [bs, dout], and the gradient comp, without a static index, reads them: the same values.
 *
 * dpt_lr_new builds it, dpt_lr_params reads the trained parameters back, dpt_lr_destroy
 * releases it, and dpt_opt gives the optimizer settings both tests train with.
 *
 * The includer defines DPT_CHECK(expr) before including this header: what a non-OK status of a
 * troupe call does (fail the Criterion test; print, leave the cluster and exit). All functions
 * are static inline so that a program using only some of them stays warning-free.
 */
#ifndef TROUPE_TESTS_DP_TEST_MODEL_H
#define TROUPE_TESTS_DP_TEST_MODEL_H

#include "actors/troupe.h"
#include "parallel/dp.h"

#include <stdint.h>
#include <string.h>

#ifndef DPT_CHECK
#error "define DPT_CHECK(expr) before including dp_test_model.h"
#endif

typedef struct dpt_lr {
    troupe_tnode_t *X, *Y, *W, *b, *gW, *gb, *loss;
    troupe_tnode_t *xb, *yb; /* the minibatch (fixed nodes in the fed form) */
    troupe_asgn_comp_t *comp;
    troupe_asgn_comp_t *feed; /* the fed form's feed comp, else NULL */
    troupe_tnode_t *params[2], *grads[2], *inputs[2];
    troupe_dp_model_t model; /* points into this struct: do not copy it */
} dpt_lr_t;

/* A single-precision tnode. */
static inline troupe_tnode_t *dpt_node(const char *label, int ndims, const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    const char *l[1] = {label};
    DPT_CHECK(troupe_tnode_new(l, 1, TROUPE_PREC_SINGLE, ndims, dims, NULL, 0.0, &tn));
    return tn;
}

/* Builds m with the shapes above; xv [nb*bs*din], yv [nb*bs*dout], wv [din*dout] and bv [dout]
 * (row-major, borrowed) become the host values of X, Y, W and b. `fixed` 0: the indexed form;
 * else the fed form with xb and yb in that memory mode (TROUPE_MM_MATERIALIZED; another to
 * test refusals). Release with dpt_lr_destroy. */
static inline void dpt_lr_new_form(dpt_lr_t *m, int64_t nb, int64_t bs, int64_t din, int64_t dout,
                                   const double *xv, const double *yv, const double *wv,
                                   const double *bv, troupe_memory_mode_kind_t fixed)
{
    memset(m, 0, sizeof *m);
    m->X = dpt_node("X", 3, (int64_t[]){nb, bs, din});
    m->Y = dpt_node("Y", 3, (int64_t[]){nb, bs, dout});
    m->W = dpt_node("W", 2, (int64_t[]){din, dout});
    m->b = dpt_node("b", 1, (int64_t[]){dout});
    m->gW = dpt_node("W_grad", 2, (int64_t[]){din, dout});
    m->gb = dpt_node("b_grad", 1, (int64_t[]){dout});
    m->loss = dpt_node("loss", 0, NULL);
    DPT_CHECK(troupe_tnode_set_values(m->X, xv, (size_t)(nb * bs * din)));
    DPT_CHECK(troupe_tnode_set_values(m->Y, yv, (size_t)(nb * bs * dout)));
    DPT_CHECK(troupe_tnode_set_values(m->W, wv, (size_t)(din * dout)));
    DPT_CHECK(troupe_tnode_set_values(m->b, bv, (size_t)dout));

    troupe_tnode_t *xb = m->xb = dpt_node("xb", 2, (int64_t[]){bs, din});
    troupe_tnode_t *yb = m->yb = dpt_node("yb", 2, (int64_t[]){bs, dout});
    troupe_tnode_t *pred = dpt_node("pred", 2, (int64_t[]){bs, dout});
    troupe_tnode_t *diff = dpt_node("diff", 2, (int64_t[]){bs, dout});
    troupe_tnode_t *gp = dpt_node("gpred", 2, (int64_t[]){bs, dout});
    troupe_tnode_t *l2 = dpt_node("sq", 2, (int64_t[]){bs, dout});
    troupe_tnode_t *c2 = dpt_node("two_over_n", 0, NULL);
    troupe_tnode_t *cinv = dpt_node("one_over_n", 0, NULL);
    troupe_asgn_comp_t *c = NULL, *slicer = NULL;
    DPT_CHECK(troupe_asgn_comp_new(&c));
    troupe_asgn_t *t[12], *ft[2];
    int n = 0;
    if (fixed) { /* the feed: xb, yb := X[batch], Y[batch] */
        troupe_memory_mode_t mode = {fixed, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET};
        DPT_CHECK(troupe_tnode_update_memory_mode(xb, mode, 990));
        DPT_CHECK(troupe_tnode_update_memory_mode(yb, mode, 990));
        DPT_CHECK(troupe_asgn_comp_new(&m->feed));
    }
    slicer = fixed ? m->feed : c;
    int32_t sym = -1;
    DPT_CHECK(troupe_asgn_comp_add_static_symbol(slicer, "batch", nb, &sym));
    DPT_CHECK(troupe_asgn_fetch_slice(slicer, xb, sym, m->X, &ft[0]));
    DPT_CHECK(troupe_asgn_fetch_slice(slicer, yb, sym, m->Y, &ft[1]));
    if (fixed) {
        troupe_asgn_t *froot = NULL;
        DPT_CHECK(troupe_asgn_seq(m->feed, 2, ft, &froot));
        troupe_asgn_comp_set_root(m->feed, froot);
    } else {
        t[n++] = ft[0];
        t[n++] = ft[1];
    }
    DPT_CHECK(troupe_asgn_fetch_constant(c, c2, 2.0 / (double)(bs * dout), &t[n++]));
    DPT_CHECK(troupe_asgn_fetch_constant(c, cinv, 1.0 / (double)(bs * dout), &t[n++]));
    DPT_CHECK(troupe_asgn_comp_add_embedded(c, c2));
    DPT_CHECK(troupe_asgn_comp_add_embedded(c, cinv));
    DPT_CHECK(troupe_asgn_accum_binop(c, true, TROUPE_BINOP_ADD, pred, TROUPE_BINOP_MUL,
                                      troupe_asgn_node(xb), troupe_asgn_node(m->W), "bi,io=>bo",
                                      &t[n++]));
    DPT_CHECK(troupe_asgn_accum_unop(c, false, TROUPE_BINOP_ADD, pred, TROUPE_UNOP_IDENTITY,
                                     troupe_asgn_node(m->b), "o=>^bo", &t[n++]));
    DPT_CHECK(troupe_asgn_pointwise_binop(c, diff, TROUPE_BINOP_SUB, troupe_asgn_node(pred),
                                          troupe_asgn_node(yb), &t[n++]));
    DPT_CHECK(troupe_asgn_accum_binop(c, false, TROUPE_BINOP_ARG2, gp, TROUPE_BINOP_MUL,
                                      troupe_asgn_node(diff), troupe_asgn_node(c2), "bo,=>bo",
                                      &t[n++]));
    DPT_CHECK(troupe_asgn_accum_binop(c, false, TROUPE_BINOP_ARG2, l2, TROUPE_BINOP_MUL,
                                      troupe_asgn_node(diff), troupe_asgn_node(cinv), "bo,=>bo",
                                      &t[n++]));
    DPT_CHECK(troupe_asgn_accum_binop(c, true, TROUPE_BINOP_ADD, m->loss, TROUPE_BINOP_MUL,
                                      troupe_asgn_node(diff), troupe_asgn_node(l2), "bo,bo=>",
                                      &t[n++]));
    DPT_CHECK(troupe_asgn_accum_binop(c, true, TROUPE_BINOP_ADD, m->gW, TROUPE_BINOP_MUL,
                                      troupe_asgn_node(xb), troupe_asgn_node(gp), "bi,bo=>io",
                                      &t[n++]));
    DPT_CHECK(troupe_asgn_accum_unop(c, true, TROUPE_BINOP_ADD, m->gb, TROUPE_UNOP_IDENTITY,
                                     troupe_asgn_node(gp), "bo=>o", &t[n++]));
    troupe_asgn_t *root = NULL;
    DPT_CHECK(troupe_asgn_seq(c, (size_t)n, t, &root));
    troupe_asgn_comp_set_root(c, root);
    m->comp = c;
    troupe_tnode_t **tmp[] = {&pred, &diff, &gp, &l2, &c2, &cinv};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++)
        troupe_tnode_release(tmp[i]);

    m->params[0] = m->W;
    m->params[1] = m->b;
    m->grads[0] = m->gW;
    m->grads[1] = m->gb;
    m->inputs[0] = m->X;
    m->inputs[1] = m->Y;
    m->model.grad_comp = m->comp;
    m->model.batch_index = "batch";
    m->model.num_batches = nb;
    m->model.params = m->params;
    m->model.grads = m->grads;
    m->model.n_params = 2;
    m->model.loss = m->loss;
    m->model.inputs = m->inputs;
    m->model.n_inputs = 2;
    m->model.feed_comp = m->feed;
}

/* The indexed form (dpt_lr_new_form with fixed 0). */
static inline void dpt_lr_new(dpt_lr_t *m, int64_t nb, int64_t bs, int64_t din, int64_t dout,
                              const double *xv, const double *yv, const double *wv,
                              const double *bv)
{
    dpt_lr_new_form(m, nb, bs, din, dout, xv, yv, wv, bv, (troupe_memory_mode_kind_t)0);
}

/* A synthetic 3-feature, 2-output regression over nb full batches of fb rows (the inputs from
 * an LCG keyed by `seed`, the targets a fixed linear map of them), each full batch cut in
 * `split` minibatches: minibatch j * split + h holds rows [h * fb / split, (h + 1) * fb / split)
 * of full batch j. So a run on `split` replicas (or micro-steps) covers the full batches of a
 * run on one. fb * nb <= 64 and split divides fb. */
static inline void dpt_lr_synthetic(dpt_lr_t *m, uint32_t seed, int nb, int fb, int split)
{
    enum { SD = 3, SO = 2, SROWS = 64 };
    double xv[SROWS * SD], yv[SROWS * SO], wv[SD * SO], bv[SO];
    for (int e = 0; e < nb * fb * SD; e++) {
        seed = seed * 1664525u + 1013904223u;
        xv[e] = (double)(seed >> 8) / (double)(1u << 24) * 2.0 - 1.0;
    }
    for (int r = 0; r < nb * fb; r++)
        for (int o = 0; o < SO; o++)
            yv[r * SO + o] = 0.5 * xv[r * SD] - (o + 1) * xv[r * SD + 1] + 0.25 * xv[r * SD + 2] + 0.1 * o;
    for (int e = 0; e < SD * SO; e++)
        wv[e] = 0.05 * (e + 1) * (e % 2 ? -1 : 1);
    for (int o = 0; o < SO; o++)
        bv[o] = 0.01 * o;
    dpt_lr_new(m, (int64_t)nb * split, fb / split, SD, SO, xv, yv, wv, bv);
}

static inline void dpt_lr_destroy(dpt_lr_t *m)
{
    troupe_asgn_comp_destroy(&m->comp);
    troupe_asgn_comp_destroy(&m->feed);
    troupe_tnode_t **all[] = {&m->X, &m->Y, &m->W, &m->b, &m->gW, &m->gb, &m->loss, &m->xb, &m->yb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        troupe_tnode_release(all[i]);
}

/* W (row-major) then b, as floats, from the host arrays (after troupe_dp_params_to_host);
 * out holds din*dout + dout floats. */
static inline void dpt_lr_params(const dpt_lr_t *m, float *out)
{
    void *h = NULL;
    DPT_CHECK(troupe_tnode_host_array(m->W, &h));
    memcpy(out, h, m->W->size_bytes);
    DPT_CHECK(troupe_tnode_host_array(m->b, &h));
    memcpy(out + troupe_tnode_num_elems(m->W), h, m->b->size_bytes);
}

/* The optimizers the data-parallel tests train with: SGD lr 0.05, momentum 0.9, weight decay
 * 0.01; AdamW lr 0.01, weight decay 0.05 (other fields at troupe_optimizer_default's values). */
static inline troupe_optimizer_t dpt_opt(troupe_optimizer_kind_t kind)
{
    troupe_optimizer_t o = troupe_optimizer_default(kind);
    if (kind == TROUPE_OPT_SGD) {
        o.lr = 0.05;
        o.momentum = 0.9;
        o.weight_decay = 0.01;
    } else {
        o.lr = 0.01;
        o.weight_decay = 0.05;
    }
    return o;
}

#endif
