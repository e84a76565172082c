/* troupe — dropout as forward assignments (nn/nn.h), drawn with Threefry4x32 (ir/ops.h) so a
 * mask is a pure function of (seed, step, cell): reproducible on every driver.
 *
 * The stream, for x of precision p (the nn's) and the caller's scalar step node (uint32 or
 * int32) holding s at run time:
 *   key  = threefry4x32_crypto({lo(seed), hi(seed), 0, 0}, spread(s))
 *   bits = threefry4x32_crypto(key, spread(i))     i the cell's row-major flat offset (uint32:
 *                                                  past 2^32 cells the mask repeats)
 *   u    = uint4x32_to_prec_uniform1(p, bits)      (single: (bits.v0 >> 8) 2^-24)
 *   y[i] = x[i] / (1 - drop) when drop < u, else 0
 * where spread is the uint32 counter construction of troupe_prec_bits_to_uint4x32. The mask
 * is a constant of the backward pass: the gradient reaches x only through the kept cells.
 *
 * Thread safety: as nn/nn.h. Ownership: inputs are borrowed; results are owned by the nn.
 */
#ifndef TROUPE_NN_DROPOUT_H
#define TROUPE_NN_DROPOUT_H

#include "troupe/nn/nn.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Training-time (inverted) dropout: x and y of the same shape (1 to 5 axes); each cell is
 * zeroed with probability drop in [0, 1) and the others scaled by 1 / (1 - drop). `step`
 * (borrowed, a scalar of precision uint32 or int32 that the caller updates between runs, e.g.
 * the training step) selects the mask with `seed`; same seed and step, same mask. At
 * evaluation time leave the layer out. drop = 0 is a copy. INVALID_ARGUMENT for drop outside
 * [0, 1) or a step node of another shape or precision. */
troupe_status_t troupe_nn_dropout(troupe_nn_t *nn, troupe_tnode_t *x, double drop, uint64_t seed,
                                  troupe_tnode_t *step, troupe_tnode_t **out);

#ifdef __cplusplus
}
#endif
#endif
