/* troupe — activations as forward assignments (nn/nn.h): GELU and softmax. Their gradients
 * are derived (nn/grad.h). ReLU is troupe_nn_relu (nn/layers.h).
 *
 * Shapes are in the signature comments, outermost axis first; "..." is 0 to 4 leading axes
 * that pass through. Results are new nodes owned by the nn (*out is borrowed). Every function
 * returns the nn's sticky status: INVALID_ARGUMENT naming the node, RESOURCE_EXHAUSTED.
 *
 * Thread safety: as nn/nn.h. Ownership: inputs are borrowed.
 */
#ifndef TROUPE_NN_ACTIVATION_H
#define TROUPE_NN_ACTIVATION_H

#include "troupe/nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GELU, tanh approximation as GPT-2 and llm.c (Hendrycks & Gimpel 2016):
 *   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),  x and y of any shape (1 to 5 axes). */
troupe_status_t troupe_nn_gelu(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t **out);

/* Softmax over the last axis: x (..., n), y (..., n), y = exp(x - m) / sum exp(x - m) with m
 * the row max, a stop-gradient (troupe_nn_stop_gradient: the shift cancels in y). Cells of
 * -inf get probability 0 (a causal mask); a row needs one finite cell. */
troupe_status_t troupe_nn_softmax(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t **out);

#ifdef __cplusplus
}
#endif
#endif
