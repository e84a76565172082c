/* troupe — embedding lookup and cross-entropy against integer targets: layers that read a table
 * at indices held in an integer tensor (the IR's gather, ir/projection.h "@N[...]"). Their
 * gradients are scatter-adds over the same index maps (nn/grad.h), summed in a fixed order.
 *
 * An index outside the table fails the routine's run with INVALID_ARGUMENT naming the index
 * node, the cell and the value; nothing is written (ir/projection.h).
 *
 * Thread safety: as nn/nn.h. Ownership: inputs are borrowed; results are owned by the nn.
 */
#ifndef TROUPE_NN_EMBEDDING_H
#define TROUPE_NN_EMBEDDING_H

#include "troupe/nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[..., c] = table[ids[...], c]: ids (...) of an integer precision (1 to 3 axes), table
 * (V, C) a parameter or constant of the nn's precision, y (..., C). GPT-2's token (wte) and
 * position (wpe) embeddings. */
troupe_status_t troupe_nn_embedding(troupe_nn_t *nn, troupe_tnode_t *ids, troupe_tnode_t *table,
                                    troupe_tnode_t **out);

/* Mean softmax cross-entropy of logits z (..., Vp) against integer targets (...) in
 * 0..n_valid-1, over every row (1 to 3 leading axes, e.g. (B, T)): loss = mean over rows of
 * logsumexp(z[r, 0..n_valid)) - z[r, targets[r]]. n_valid <= Vp counts the logits that take
 * part (GPT-2's padded vocabulary: only the first V of Vp, the rest get probability 0 and
 * gradient 0; 0 means all). The row max is a stop-gradient. A target outside 0..Vp-1 fails the
 * run (INVALID_ARGUMENT naming it). *out is a scalar. */
troupe_status_t troupe_nn_softmax_xent_targets(troupe_nn_t *nn, troupe_tnode_t *z,
                                               troupe_tnode_t *targets, int64_t n_valid,
                                               troupe_tnode_t **out);

#ifdef __cplusplus
}
#endif
#endif
