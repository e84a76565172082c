/* troupe — layers: each a composition of forward assignments over nodes created in a
 * troupe_nn_t (nn/nn.h); their backward passes are derived (nn/grad.h), never written.
 *
 * Shapes are in the signature comments, outermost axis first; "..." is any number (0 to 3) of
 * leading axes that pass through unchanged. Results are new nodes owned by the nn (*out is
 * borrowed). Every function returns the nn's sticky status: INVALID_ARGUMENT naming the
 * mismatching node and axis, RESOURCE_EXHAUSTED.
 *
 * Thread safety: as nn/nn.h. Ownership: inputs are borrowed.
 */
#ifndef TROUPE_NN_LAYERS_H
#define TROUPE_NN_LAYERS_H

#include "troupe/nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[..., j] = sum_i x[..., i] w[i, j] + b[j]: x (..., in), w (in, out), b (out) or NULL,
 * y (..., out). The bias is written first, then the product is added (one pass each). */
troupe_status_t troupe_nn_linear(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                 troupe_tnode_t *b, troupe_tnode_t **out);

/* y[..., j] = sum_i x[..., i] w[j, i] + b[j]: the (out, in) layout of llm.c and PyTorch's
 * nn.Linear, read as stored ("Ai,ji=>Aj", no transposed copy): x (..., in), w (out, in),
 * b (out) or NULL, y (..., out). Otherwise as troupe_nn_linear. */
troupe_status_t troupe_nn_linear_oi(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                    troupe_tnode_t *b, troupe_tnode_t **out);
/* y = max(x, 0), any shape. The gradient at 0 is 0 (PyTorch's). */
troupe_status_t troupe_nn_relu(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t **out);

/* Mean softmax cross-entropy over the rows of logits z (rows, classes) against one-hot (or
 * any probability) targets y (rows, classes): loss = mean_r (logsumexp(z[r]) - sum_c y[r,c]
 * z[r,c]), computed with the row max subtracted (a stop-gradient, so the derived gradient is
 * (softmax(z) - y) / rows). *out is a scalar. */
troupe_status_t troupe_nn_softmax_xent(troupe_nn_t *nn, troupe_tnode_t *z, troupe_tnode_t *y,
                                       troupe_tnode_t **out);

#ifdef __cplusplus
}
#endif
#endif
