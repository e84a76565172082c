/* gpt — GPT-2 as llm.c's train_gpt2.c has it, built from nn/ layers (its backward derived by
 * nn/grad.h): token and position embeddings; L pre-LayerNorm blocks (LN, fused QKV, causal
 * multi-head attention, output projection, residual; LN, fc 4C, GELU tanh, projection,
 * residual); a final LayerNorm; logits = lnf . wte^T over the padded vocabulary Vp, of which
 * the first V count in the loss (mean cross-entropy over B*T positions). LayerNorm eps 1e-5.
 * Weights are read in llm.c's (out, in) layout as stored.
 *
 * gpt_params_t: the parameter nodes (and their gradients), one per tensor and layer, created
 * in llm.c's file order, so node k covers a contiguous range of the flat parameter array of
 * llmc.h. gpt_model_t: a computation over those nodes for B sequences of T tokens, in one of
 * two forms:
 *   indexed (num_batches > 0): minibatches x_all, y_all (num_batches, B, T) int32, hosted
 *     and copied to each device; a feed comp with the static index GPT_BATCH_SYMBOL copies
 *     one into x, y, which the comp reads (parallel/dp.h's fed form: a gather's index node
 *     must be an input of its routine). The trainer refills them before each step
 *     (gpt_model_set_minibatches: a host write, which each stream's copy follows before its
 *     next read, troupe_config_auto_host_transfers);
 *   fixed (num_batches == 0): x, y (B, T) hosted nodes set before each run (evaluation,
 *     sampling, tests).
 * With train, the comp is forward + derived backward (every gradient overwritten); else the
 * forward only. Without targets (sampling) there is no loss, only logits.
 *
 * Thread safety: build and fill from one thread. Ownership: _new returns objects the caller
 * frees with _destroy; a model borrows its params (they must outlive it).
 */
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include "actors/backend.h"
#include "actors/routine.h"
#include "ir/assign.h"
#include "ir/tnode.h"
#include "llmc.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPT_BATCH_SYMBOL "batch"
#define GPT_LN_EPS 1e-5

typedef struct gpt_params {
    gpt_llmc_config_t cfg;
    size_t n;                /* nodes: 4 + 12 L */
    troupe_tnode_t **params; /* hosted, single precision */
    troupe_tnode_t **grads;
    size_t *offset; /* node k's first element in the flat array */
} gpt_params_t;

/* The parameter nodes of a model of config cfg (checked). INVALID_ARGUMENT, RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t gpt_params_new(const gpt_llmc_config_t *cfg, gpt_params_t **out);
void gpt_params_destroy(gpt_params_t **p_p);
/* Node of tensor t (gpt_llmc_tensor_t) for layer l (0 for the tensors without layers). */
troupe_tnode_t *gpt_params_node(const gpt_params_t *p, int t, int l);
/* The flat array (gpt_llmc_num_params floats) into the nodes' host arrays, and back. Reading
 * fetches the newest values (from a device where they are). */
TROUPE_MUST_USE troupe_status_t gpt_params_set(gpt_params_t *p, const float *flat);
TROUPE_MUST_USE troupe_status_t gpt_params_get(gpt_params_t *p, float *flat);
/* The gradients' host values as a flat array (after a run that wrote them). */
TROUPE_MUST_USE troupe_status_t gpt_params_get_grads(gpt_params_t *p, float *flat);

/* GPT-2's initialisation into flat (gpt_llmc_num_params floats): weights and embeddings
 * normal(0, 0.02), the residual projections (attprojw, fcprojw) normal(0, 0.02 / sqrt(2 L)),
 * biases 0, LayerNorm weights 1 and biases 0, wte's padded rows V..Vp-1 0. Tensor t draws from
 * the nn/init.h stream of seed + t. INVALID_ARGUMENT. */
TROUPE_MUST_USE troupe_status_t gpt_init_params(const gpt_llmc_config_t *cfg, uint64_t seed,
                                                float *flat);

typedef struct gpt_model_config {
    int64_t batch;       /* B */
    int64_t seq;         /* T, at most maxT */
    int64_t num_batches; /* > 0: indexed form; 0: fixed x, y */
    bool train;          /* derive the backward */
    bool targets;        /* y and the loss (required with train) */
    /* The matrix products' factors: VOID (0) or SINGLE: single; BFLOAT16 or HALF: mixed
     * precision (bfloat16 or half copies, fp32 sums; troupe_nn_set_compute_prec); HALF with
     * train adds loss_scale. */
    troupe_prec_t compute_prec;
} gpt_model_config_t;

typedef struct gpt_model {
    gpt_model_config_t cfg;
    troupe_asgn_comp_t *comp;
    troupe_asgn_comp_t *feed_comp; /* indexed form: x, y := x_all[batch], y_all[batch] */
    troupe_tnode_t *x_all, *y_all; /* indexed form, hosted */
    troupe_tnode_t *x, *y;         /* fixed form: hosted; indexed: the slices */
    troupe_tnode_t *pos;           /* positions 0..T-1, hosted constant */
    troupe_tnode_t *logits;        /* (B, T, Vp) */
    troupe_tnode_t *loss;          /* scalar, hosted (NULL without targets) */
    troupe_tnode_t *loss_scale;    /* HALF training: troupe_dp_model_t.loss_scale, else NULL */
    troupe_tnode_t *own[9];        /* references this model holds */
    int nown;
} gpt_model_t;

TROUPE_MUST_USE troupe_status_t gpt_model_new(gpt_params_t *p, const gpt_model_config_t *cfg,
                                              gpt_model_t **out);
void gpt_model_destroy(gpt_model_t **m_p);
/* Fixed form: sets x (and y when targets) from B*T tokens each. */
TROUPE_MUST_USE troupe_status_t gpt_model_set_batch(gpt_model_t *m, const int32_t *x,
                                                    const int32_t *y);
/* Indexed form: x_all and y_all, num_batches B T values each (a host write: each stream's copy
 * is refreshed before the feed next reads it, when automatic host transfers are on). */
TROUPE_MUST_USE troupe_status_t gpt_model_set_minibatches(gpt_model_t *m, const int32_t *x,
                                                          const int32_t *y);
/* Indexed form: x_all, y_all from the token stream per the trainer's batch order: minibatch k
 * holds sequences i = 0..B-1 starting at token (k B + i) T, targets shifted by one. The
 * stream must hold num_batches B T + 1 tokens. */
TROUPE_MUST_USE troupe_status_t gpt_model_set_data(gpt_model_t *m, const uint16_t *tokens,
                                                   size_t count);

/* A model compiled and linked on one stream of a backend (evaluation, sampling, tests). */
typedef struct gpt_runner {
    troupe_backend_t *backend;
    troupe_stream_t *stream;
    troupe_context_t *ctx;
    troupe_code_t *code;
    troupe_routine_t *routine;
} gpt_runner_t;
/* Opens backend (NULL: the configured default), uploads the parameters p and m's inputs on a
 * new stream and links m's comp there; or links it in ctx when given (troupe_dp_owner_context:
 * the trainer's current parameters; backend is then that context's, and must be passed). */
TROUPE_MUST_USE troupe_status_t gpt_runner_new(const char *backend_name, troupe_backend_t *backend,
                                               troupe_context_t *ctx, gpt_params_t *p,
                                               gpt_model_t *m, const char *name,
                                               gpt_runner_t **out);
/* Runs once and waits. */
TROUPE_MUST_USE troupe_status_t gpt_runner_run(gpt_runner_t *r);
void gpt_runner_destroy(gpt_runner_t **r_p);

#ifdef __cplusplus
}
#endif

#endif
