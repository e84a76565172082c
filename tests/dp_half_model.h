/* The model of the loss scaling tests, shared by tests/test_dp_loss_scale.c (one process,
 * Criterion) and tests/mpi/test_dp_loss_scale_ranks.c (2 ranks): a softmax regression
 * z = x W + b over nb minibatches of BS rows whose product runs in half precision (nn/,
 * compute precision HALF) and whose derived backward starts from the loss scale node
 * (troupe_nn_loss_scale), as parallel/dp.h's loss scaling wants.
 *
 * The includer defines DHM_CHECK(expr) (what a non-OK status does) before including it. All
 * functions are static inline.
 */
#ifndef TROUPE_TESTS_DP_HALF_MODEL_H
#define TROUPE_TESTS_DP_HALF_MODEL_H

#include "actors/troupe.h"
#include "ir/assign.h"
#include "nn/layers.h"
#include "nn/nn.h"
#include "parallel/dp.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifndef DHM_CHECK
#error "define DHM_CHECK(expr) before including dp_half_model.h"
#endif

enum { DHM_NB = 8, DHM_BS = 4, DHM_DIN = 4, DHM_DOUT = 3, DHM_NP = DHM_DIN * DHM_DOUT + DHM_DOUT };

typedef struct dhm_model {
    troupe_asgn_comp_t *comp;
    troupe_nn_t *nn;
    troupe_tnode_t *X, *Y, *W, *b, *loss, *scale;
    troupe_tnode_t *params[2], *grads[2], *inputs[2];
    troupe_dp_model_t dp;
} dhm_model_t;

static inline troupe_tnode_t *dhm_node(const char *label, int nd, const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    const char *l[1] = {label};
    DHM_CHECK(troupe_tnode_new(l, 1, TROUPE_PREC_SINGLE, nd, dims, NULL, 0.0, &tn));
    return tn;
}

/* The initial parameters (W then b). */
static inline void dhm_init_params(dhm_model_t *m)
{
    double w[DHM_DIN * DHM_DOUT], b[DHM_DOUT];
    for (int e = 0; e < DHM_DIN * DHM_DOUT; e++)
        w[e] = 0.1 * (e % 5) - 0.2;
    for (int o = 0; o < DHM_DOUT; o++)
        b[o] = 0.0;
    DHM_CHECK(troupe_tnode_set_values(m->W, w, DHM_DIN * DHM_DOUT));
    DHM_CHECK(troupe_tnode_set_values(m->b, b, DHM_DOUT));
}

/* z = x W + b with half products, loss = softmax cross-entropy, backward from the loss scale. */
static inline void dhm_model_new(dhm_model_t *m)
{
    memset(m, 0, sizeof *m);
    m->X = dhm_node("X", 3, (int64_t[]){DHM_NB, DHM_BS, DHM_DIN});
    m->Y = dhm_node("Y", 3, (int64_t[]){DHM_NB, DHM_BS, DHM_DOUT});
    double xv[DHM_NB * DHM_BS * DHM_DIN], yv[DHM_NB * DHM_BS * DHM_DOUT];
    uint32_t seed = 7;
    for (int e = 0; e < DHM_NB * DHM_BS * DHM_DIN; e++) {
        seed = seed * 1664525u + 1013904223u;
        xv[e] = (double)(seed >> 8) / (double)(1u << 24) * 2.0 - 1.0;
    }
    for (int r = 0; r < DHM_NB * DHM_BS; r++)
        for (int o = 0; o < DHM_DOUT; o++)
            yv[r * DHM_DOUT + o] = o == (int)((xv[r * DHM_DIN] + 1.0) * 1.5) % DHM_DOUT;
    DHM_CHECK(troupe_tnode_set_values(m->X, xv, DHM_NB * DHM_BS * DHM_DIN));
    DHM_CHECK(troupe_tnode_set_values(m->Y, yv, DHM_NB * DHM_BS * DHM_DOUT));
    DHM_CHECK(troupe_asgn_comp_new(&m->comp));
    DHM_CHECK(troupe_nn_new(m->comp, TROUPE_PREC_SINGLE, &m->nn));
    troupe_nn_t *nn = m->nn;
    DHM_CHECK(troupe_nn_set_compute_prec(nn, TROUPE_PREC_HALF));
    int32_t sym = -1;
    DHM_CHECK(troupe_asgn_comp_add_static_symbol(m->comp, "batch", DHM_NB, &sym));
    troupe_tnode_t *x = NULL, *y = NULL, *z = NULL;
    troupe_nn_begin(nn, "minibatch");
    DHM_CHECK(troupe_nn_node(nn, "x", 2, (int64_t[]){DHM_BS, DHM_DIN}, &x));
    DHM_CHECK(troupe_nn_node(nn, "y", 2, (int64_t[]){DHM_BS, DHM_DOUT}, &y));
    troupe_asgn_t *t = NULL;
    DHM_CHECK(troupe_nn_add(nn, troupe_asgn_fetch_slice(m->comp, x, sym, m->X, &t), &t));
    DHM_CHECK(troupe_nn_add(nn, troupe_asgn_fetch_slice(m->comp, y, sym, m->Y, &t), &t));
    DHM_CHECK(troupe_nn_param(nn, "W", 2, (int64_t[]){DHM_DIN, DHM_DOUT}, &m->W));
    DHM_CHECK(troupe_nn_param(nn, "b", 1, (int64_t[]){DHM_DOUT}, &m->b));
    dhm_init_params(m);
    troupe_nn_begin(nn, "linear");
    DHM_CHECK(troupe_nn_linear(nn, x, m->W, m->b, &z));
    troupe_nn_begin(nn, "loss");
    DHM_CHECK(troupe_nn_softmax_xent(nn, z, y, &m->loss));
    DHM_CHECK(troupe_nn_loss_scale(nn, &m->scale));
    DHM_CHECK(troupe_nn_finish(nn, m->loss));
    size_t n = troupe_nn_params(nn, NULL, NULL);
    if (n != 2)
        DHM_CHECK(troupe_error_set(TROUPE_INTERNAL, "%zu parameters, expected 2", n));
    troupe_tnode_t *const *ps = NULL, *const *gs = NULL;
    (void)troupe_nn_params(nn, &ps, &gs);
    for (int i = 0; i < 2; i++) {
        m->params[i] = ps[i];
        m->grads[i] = gs[i];
    }
    troupe_memory_mode_t hosted = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT,
                                   TROUPE_SHARING_UNSET};
    DHM_CHECK(troupe_tnode_update_memory_mode(m->loss, hosted, 990));
    m->inputs[0] = m->X;
    m->inputs[1] = m->Y;
    m->dp = (troupe_dp_model_t){.grad_comp = m->comp,
                                .batch_index = "batch",
                                .num_batches = DHM_NB,
                                .params = m->params,
                                .grads = m->grads,
                                .n_params = 2,
                                .loss = m->loss,
                                .inputs = m->inputs,
                                .n_inputs = 2,
                                .loss_scale = m->scale};
}

static inline void dhm_model_destroy(dhm_model_t *m)
{
    troupe_nn_destroy(&m->nn);
    troupe_asgn_comp_destroy(&m->comp);
    troupe_tnode_release(&m->X);
    troupe_tnode_release(&m->Y);
}

/* W then b as floats (after troupe_dp_params_to_host). */
static inline void dhm_params(troupe_dp_t *dp, const dhm_model_t *m, float *out)
{
    DHM_CHECK(troupe_dp_params_to_host(dp));
    void *h = NULL;
    DHM_CHECK(troupe_tnode_host_array(m->W, &h));
    memcpy(out, h, DHM_DIN * DHM_DOUT * sizeof(float));
    DHM_CHECK(troupe_tnode_host_array(m->b, &h));
    memcpy(out + DHM_DIN * DHM_DOUT, h, DHM_DOUT * sizeof(float));
}

/* The loss scaling tests' configuration: fp16 (loss scaling on by default), AdamW at lr 0.05 on
 * the cpu backend with `streams` streams; local_only for one process. */
static inline troupe_dp_config_t dhm_config(int streams, bool local_only)
{
    troupe_dp_config_t c;
    memset(&c, 0, sizeof c);
    c.backend = "cpu";
    c.streams = streams;
    c.optimizer = troupe_optimizer_default(TROUPE_OPT_ADAMW);
    c.optimizer.lr = 0.05;
    c.local_only = local_only;
    c.precision = TROUPE_DP_PRECISION_FP16;
    return c;
}

/* Runs `steps` steps; after step s the parameters go to p[s] and the loss scaling state to
 * ls[s]. */
static inline void dhm_steps(troupe_dp_t *dp, const dhm_model_t *m, int steps,
                             float (*p)[DHM_NP], troupe_dp_loss_scale_state_t *ls)
{
    for (int s = 0; s < steps; s++) {
        DHM_CHECK(troupe_dp_step(dp));
        dhm_params(dp, m, p[s]);
        DHM_CHECK(troupe_dp_loss_scale(dp, &ls[s]));
    }
}

#endif
