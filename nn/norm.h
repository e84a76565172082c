/* troupe — normalisation layers as forward assignments (nn/nn.h); their gradients are
 * derived (nn/grad.h).
 *
 * Shapes are in the signature comments, outermost axis first; "..." is 0 to 4 leading axes
 * that pass through. Results are new nodes owned by the nn (*out is borrowed). Every function
 * returns the nn's sticky status: INVALID_ARGUMENT naming the mismatching node and axis,
 * RESOURCE_EXHAUSTED.
 *
 * Thread safety: as nn/nn.h. Ownership: inputs are borrowed.
 */
#ifndef TROUPE_NN_NORM_H
#define TROUPE_NN_NORM_H

#include "troupe/nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Layer normalisation over the last axis (Ba, Kiros, Hinton 2016; GPT-2 uses eps = 1e-5):
 * x (..., C), w (C), b (C), y (..., C);
 *   mean = sum_c x / C,  var = sum_c (x - mean)^2 / C (biased, as PyTorch),
 *   rstd = 1 / sqrt(var + eps),  y = (x - mean) * rstd * w + b.
 * The per-row mean and rstd are nodes of their own (..., as llm.c keeps them). eps > 0. */
troupe_status_t troupe_nn_layernorm(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                    troupe_tnode_t *b, double eps, troupe_tnode_t **out);

#ifdef __cplusplus
}
#endif
#endif
