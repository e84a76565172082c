/* troupe — the data-parallel driver's strategy (docs/parallel.md): how a step exchanges,
 * overlaps, updates and accumulates, resolved once in troupe_dp_new from the config, the
 * backend and what every rank agrees on, then read by each strategy's file:
 *   exchange      dp_exchange.c  none, in place, staged through host memory, direct
 *   overlap       dp_split.c     the gradient routine in segments, one bucket each (its
 *                                result, nseg and overlap, in struct troupe_dp)
 *   update        dp_update.c    the optimizer routine, fused into the allreduce, or passes
 *                                across the streams (dp_local.c)
 *   accumulation  dp_accum.c     K micro-steps per optimizer step
 * and scheduled by dp_schedule.c. The choose functions are pure, for the tests. Not installed.
 *
 * Thread safety: as parallel/dp.h. Ownership: plain values, held by struct troupe_dp.
 */
#ifndef TROUPE_PARALLEL_DP_STRATEGY_IMPL_H
#define TROUPE_PARALLEL_DP_STRATEGY_IMPL_H

#include "parallel/dp.h"

#include <stdbool.h>
#include <stddef.h>

/* How a step's gradients cross ranks (troupe__dp_exchange_name). */
typedef enum troupe__dp_exchange {
    TROUPE__DP_EXCHANGE_NONE = 0, /* one rank, or local_only */
    TROUPE__DP_EXCHANGE_INPLACE,  /* the owner stream's arrays lent to the transport */
    TROUPE__DP_EXCHANGE_STAGED,   /* pipelined through the gradients' host arrays */
    TROUPE__DP_EXCHANGE_DIRECT,   /* device memory handed to CUDA-aware MPI as it is */
} troupe__dp_exchange_t;
const char *troupe__dp_exchange_name(int exchange); /* "none", "in-place", "staged", "direct" */

/* Where a step's optimizer update runs (troupe__dp_update_name). */
typedef enum troupe__dp_update {
    TROUPE__DP_UPDATE_ROUTINE = 0, /* the optimizer routine on the owner stream */
    TROUPE__DP_UPDATE_FUSED,       /* inside the cross-rank allreduce (troupe_coll_apply_t) */
    TROUPE__DP_UPDATE_STREAMS,     /* passes divided among the streams, with the merge */
} troupe__dp_update_t;
const char *troupe__dp_update_name(int update); /* "routine", "fused", "streams" */

/* One run's strategy. The agreed fields are the same on every rank. */
typedef struct troupe__dp_strategy {
    troupe__dp_exchange_t exchange; /* agreed */
    troupe__dp_update_t update;
    int accum;             /* micro-steps per optimizer step, >= 1 (agreed: fingerprinted) */
    int max_streams;       /* the most local replicas of any rank (agreed) */
    bool all_host_threads; /* every rank's backend has threaded streams on host memory */
    bool all_per_stream;   /* no rank knows a parameter shared across streams */
    bool late_param;       /* overlap: a segment reads a parameter of an earlier bucket */
} troupe__dp_strategy_t;

/* The micro-steps a config asks for: grad_accum, 0 meaning 1. INVALID_ARGUMENT naming the
 * value when it is negative or above TROUPE_DP_MAX_GRAD_ACCUM. */
TROUPE_MUST_USE troupe_status_t troupe__dp_strategy_accum(const troupe_dp_config_t *cfg,
                                                          int *out);

/* The exchange a run uses (parallel/dp.h, troupe_dp_config_t.stage_through_host and CUDA-aware
 * MPI): `device_memory` (the backend's arrays are not host-addressable, or stage_through_host
 * makes a host backend stand for one), `lendable` (the backend can lend its arrays to the
 * transport: host-addressable), `cuda_aware` (troupe_config_cuda_aware() resolved against the
 * cluster's MPI). One rank: NONE. */
troupe__dp_exchange_t troupe__dp_choose_exchange(int nranks, bool device_memory, bool lendable,
                                                 bool cuda_aware);

/* Whether a run splits its gradient routine to overlap the allreduce with the backward pass,
 * before the split is tried: `mode` resolved (troupe_dp_config_t.overlap, else
 * TROUPE_DP_OVERLAP); on: yes; off: no; auto: no with one rank, yes when the backend computes
 * on a device (`device_compute`), else yes when the node's `cores` hold every local rank's
 * compute streams plus one for its transport engine (local_ranks * (streams + 1) <= cores).
 * why[cap] says which rule decided. */
bool troupe__dp_choose_overlap(troupe_dp_overlap_t mode, int nranks, bool device_compute,
                               long cores, int local_ranks, int streams, char *why, size_t cap);

/* Whether a run fuses its optimizer step into the cross-rank allreduce: `config_on`
 * (TROUPE_DP_FUSED_UPDATE not off), more than one rank, the in-place exchange, with overlap
 * segments (nseg > 1) no `late_param` (each bucket's request updates its parameters while the
 * later segments compute: none of them may read one), every parameter single precision.
 * why[cap] says which rule decided. */
bool troupe__dp_choose_fused(bool config_on, int nranks, troupe__dp_exchange_t exchange,
                             size_t nseg, bool late_param, bool all_single, char *why, size_t cap);

/* Whether a run fuses the merge and update into passes across a rank's streams (dp_local.c):
 * `config_on`, more than one stream on some rank (`max_streams`), no exchange or the in-place
 * one, `host_threads`, one gradient routine, every parameter single precision, `per_stream`
 * (no parameter known shared across streams). why[cap] says which rule decided. */
bool troupe__dp_choose_local(bool config_on, int max_streams, troupe__dp_exchange_t exchange,
                             bool host_threads, size_t nseg, bool all_single, bool per_stream,
                             char *why, size_t cap);

/* The update a run takes, from the inputs above (the streams' passes first, then the fused
 * update, else the routine). why[cap] says which rule decided. */
troupe__dp_update_t troupe__dp_choose_update(bool config_on, int nranks,
                                             const troupe__dp_strategy_t *s, size_t nseg,
                                             bool all_single, char *why, size_t cap);

#endif /* TROUPE_PARALLEL_DP_STRATEGY_IMPL_H */
