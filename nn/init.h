/* troupe — parameter initialisers: host-side functions filling a buffer from a Threefry4x32
 * stream (ir/ops.h), reproducible for a seed on every machine. Copy the result into a node
 * with troupe_tnode_set_values.
 *
 * The stream for `seed`: draw j (j = 0, 1, ...) is
 *   r_j = threefry4x32_crypto({lo(seed), hi(seed), 0x696e6974 ("init"), 0}, {lo(j), hi(j), 0, 0})
 * and its two doubles (u_j0, u_j1) = uint4x32_to_prec_uniform(double, r_j): the top 53 bits of
 * r_j.v1:v0 and of r_j.v3:v2, times 2^-53, in [0, 1).
 *   uniform: out[i] = lo + (hi - lo) u_i0 (one draw per value);
 *   normal:  Box-Muller on draw j = i / 2: rad = sqrt(-2 ln(1 - u_j0)), out[2j] = mean + std
 *            rad cos(2 pi u_j1), out[2j+1] = mean + std rad sin(2 pi u_j1);
 *   kaiming: normal with mean 0, std = gain / sqrt(fan_in) (He et al. 2015; gain sqrt(2) for
 *            ReLU, 1 for linear).
 * Give each tensor its own seed (e.g. base seed + parameter index): one seed, one stream.
 *
 * Thread safety: pure functions of their arguments. Ownership: `out` is the caller's.
 */
#ifndef TROUPE_NN_INIT_H
#define TROUPE_NN_INIT_H

#include "troupe/base/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[0..count) uniform in [lo, hi). INVALID_ARGUMENT for NULL out with count > 0, or lo > hi
 * or a non-finite bound. */
TROUPE_MUST_USE troupe_status_t troupe_nn_init_uniform(double *out, size_t count, double lo,
                                                       double hi, uint64_t seed);

/* out[0..count) normal with the given mean and std (>= 0, finite). INVALID_ARGUMENT. */
TROUPE_MUST_USE troupe_status_t troupe_nn_init_normal(double *out, size_t count, double mean,
                                                      double std, uint64_t seed);

/* out[0..count) normal(0, gain / sqrt(fan_in)); fan_in >= 1, gain >= 0. INVALID_ARGUMENT. */
TROUPE_MUST_USE troupe_status_t troupe_nn_init_kaiming(double *out, size_t count, int64_t fan_in,
                                                       double gain, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
