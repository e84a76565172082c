/* fmnist — the trainer's training set sharded per rank (docs/trainer.md, Sharded data): which
 * shuffled items a rank's replicas take, and a loader thread that lays out the next step's
 * minibatches while the current step trains.
 *
 * The order is the trainer's (main.c): the set is shuffled once (fmnist_shuffle_order, --seed)
 * and minibatch g is positions g B .. g B + B - 1 of it; parallel/dp.h gives replica k of rank
 * r (o replicas before it, T in all) in micro-step j of step s minibatch (s K + j) T + o + k,
 * modulo the S K T minibatches of an epoch. The same every epoch, so a rank only ever takes
 * the minibatches g with g mod T in [o, o + N): its share, S K N B items, read once.
 *
 * fmnist_share_t: that layout, and the rows M of the model's x_all / y_all that dp binds
 * (troupe_dp_model_t.num_batches). dp binds row ((s K + j) T + o + k) mod M. When every rank
 * runs the same N streams and gcd(K, R) = 1, M = K N: the row is N ((j R + r) mod K) + k,
 * distinct for every j and k (s K T is a multiple of K N). Otherwise M = K T (a row per
 * replica and micro-step of the run), of which this rank writes its own. Both give the same
 * M on every rank (dp fingerprints it).
 *
 * fmnist_loader_t: fills, for step s, the share's minibatches into those rows as x (pixels /
 * 255, M B in values) and y (one-hot, M B out values) in single precision, rounded as
 * fmnist_mlp_load_train rounds, on a thread of its own, one step ahead; two buffers take turns.
 *
 * Errors: INVALID_ARGUMENT (a layout that does not fit), RESOURCE_EXHAUSTED,
 * FAILED_PRECONDITION (the thread did not start). Thread safety: a loader is driven from one
 * thread. Ownership: fmnist_loader_new returns a loader freed with fmnist_loader_destroy; it
 * borrows the share's items, which must outlive it.
 */
#ifndef FMNIST_LOADER_H
#define FMNIST_LOADER_H

#include "base/status.h"
#include "idx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fmnist_share {
    int64_t batch;           /* B: rows of a minibatch (one replica, one micro-step) */
    int64_t steps_per_epoch; /* S */
    int64_t accum;           /* K: micro-steps per step (--grad-accum) */
    int64_t replicas;        /* T: over every rank */
    int64_t offset;          /* o: replicas of the ranks before this one */
    int64_t streams;         /* N: this rank's replicas */
    int64_t rows;            /* M: rows of x_all (fmnist_share_init) */
} fmnist_share_t;

/* Fills *s from the layout; compact: every rank runs `streams` replicas (then M = K N when
 * gcd(K, ranks) = 1). INVALID_ARGUMENT for a size below 1 or a range outside [0, T). */
TROUPE_MUST_USE troupe_status_t fmnist_share_init(int64_t batch, int64_t steps_per_epoch,
                                                  int64_t accum, int64_t replicas, int64_t offset,
                                                  int64_t streams, int64_t ranks, bool compact,
                                                  fmnist_share_t *s);

/* Items of the share: S K N B. */
int64_t fmnist_share_count(const fmnist_share_t *s);

/* The share's items in the loader's order (out: fmnist_share_count entries), from the set's
 * shuffled order (order[p]: the item at position p, at least S K T B entries). */
void fmnist_share_items(const fmnist_share_t *s, const int64_t *order, int64_t *out);

typedef struct fmnist_loader fmnist_loader_t;

/* A loader of share (fmnist_share_count items of `in` pixels in fmnist_share_items' order,
 * labels below `classes`) starting with step `step` (prefetched at once). */
TROUPE_MUST_USE troupe_status_t fmnist_loader_new(const fmnist_share_t *s,
                                                  const fmnist_dataset_t *share, int64_t in,
                                                  int64_t classes, int64_t step,
                                                  fmnist_loader_t **out);

/* The next step's x (M B in values) and y (M B classes values) in single precision, valid
 * until the next call; the step after it then starts loading. */
TROUPE_MUST_USE troupe_status_t fmnist_loader_next(fmnist_loader_t *l, const float **x,
                                                   const float **y);

/* Bytes the loader holds (its two buffers). */
size_t fmnist_loader_bytes(const fmnist_loader_t *l);

void fmnist_loader_destroy(fmnist_loader_t **l_p);

#ifdef __cplusplus
}
#endif

#endif
