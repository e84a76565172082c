/* troupe — ZeRO stage 1's memory saving (docs/parallel.md, Sharded optimizer state): with the
 * update fused into the allreduce and optimizer state to keep, rank r allocates only its shard
 * of that state, elements [lo, hi) of the gradients laid end to end in grads_by_id's order, cut
 * as the transport cuts its chunks (troupe_coll_shard_range); with overlap segments, each
 * segment's request cuts its own span, so the shard is one such range per segment. The fused
 * update's request carries the shard buffers (troupe_coll_apply_t shard); no state node exists, and
 * the optimizer routine is neither compiled nor linked. With several streams per rank (the
 * passes across the streams) the passes merge into replica 0, its allreduce carries the update
 * of the shard as with one stream, and a last pass copies the new parameters to the other
 * replicas (dp_local.c, TROUPE__DP_LOCAL_COPY). Checkpoints gather the shards in gradient
 * order (every rank's shard broadcast from it) and slice a loaded state into this rank's shard, so
 * a checkpoint written by R ranks restores onto any number of ranks, and the bytes equal an
 * unsharded run's.
 *
 * Thread safety: the thread that drives the troupe_dp_t.
 * Ownership: dp->zero and its buffers belong to dp (troupe__dp_zero_free).
 */
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/log.h"

#include <inttypes.h>
#include <string.h>

bool troupe__dp_zero_wanted(const troupe_dp_t *dp)
{
    /* the passes across the streams need the in-place exchange with several ranks, one
     * gradient routine and single precision: what the allreduce's fused update needs */
    return (dp->strat.update == TROUPE__DP_UPDATE_FUSED ||
            dp->strat.update == TROUPE__DP_UPDATE_STREAMS) &&
           dp->nranks > 1 && dp->nstate > 0;
}

bool troupe__dp_update_in_allreduce(const troupe_dp_t *dp)
{
    return dp->strat.update == TROUPE__DP_UPDATE_FUSED ||
           (dp->strat.update == TROUPE__DP_UPDATE_STREAMS && dp->zero != NULL);
}

troupe_status_t troupe__dp_zero_new(troupe_dp_t *dp)
{
    troupe__dp_zero_t *z = troupe_calloc(1, sizeof *z);
    if (z == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    dp->zero = z;
    size_t nseg = dp->nseg > 0 ? dp->nseg : 1;
    z->nseg = nseg;
    z->at = troupe_calloc(dp->n_params > 0 ? dp->n_params : 1, sizeof *z->at);
    z->base = troupe_calloc(nseg, sizeof *z->base);
    z->lo = troupe_calloc(nseg, sizeof *z->lo);
    z->hi = troupe_calloc(nseg, sizeof *z->hi);
    z->off = troupe_calloc(nseg, sizeof *z->off);
    if (z->at == NULL || z->base == NULL || z->lo == NULL || z->hi == NULL || z->off == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    /* each segment's request cuts its own span as the transport does (troupe_coll_shard_range) */
    for (size_t g = 0; g < nseg; g++) {
        z->base[g] = z->count;
        size_t first = dp->seg_first[g], end = dp->seg_first[g + 1];
        for (size_t j = first; j < end; j++) {
            z->at[troupe__dp_param_of(dp, j)] = z->count;
            z->count += troupe_tnode_num_elems(dp->grads_by_id[j]);
        }
        troupe_coll_shard_range(z->count - z->base[g], dp->rank, dp->nranks, &z->lo[g], &z->hi[g]);
        z->off[g] = z->len;
        z->len += z->hi[g] - z->lo[g];
    }
    for (int s = 0; s < dp->nstate; s++) {
        /* zeroed as the unsharded state starts; one element at least, so never NULL */
        z->shard[s] = troupe_calloc(z->len > 0 ? (size_t)z->len : 1, sizeof(float));
        if (z->shard[s] == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                                 "dp_new: out of memory for the optimizer state's shard");
    }
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL,
               "dp: optimizer state sharded (ZeRO-1): rank %d holds %" PRId64 " of %" PRId64
               " elements (first segment's [%" PRId64 ", %" PRId64 "); %zu segment(s)), %d "
               "array(s), %" PRId64 " bytes",
               dp->rank, z->len, z->count, z->lo[0], z->hi[0], nseg, dp->nstate,
               troupe__dp_zero_bytes(dp));
    return TROUPE_OK;
}

void troupe__dp_zero_free(troupe__dp_zero_t **z_p)
{
    if (z_p == NULL || *z_p == NULL)
        return;
    troupe__dp_zero_t *z = *z_p;
    for (int s = 0; s < 2; s++)
        troupe_free(z->shard[s]);
    troupe_free(z->at);
    troupe_free(z->base);
    troupe_free(z->lo);
    troupe_free(z->hi);
    troupe_free(z->off);
    troupe_free(z);
    *z_p = NULL;
}

int64_t troupe__dp_zero_bytes(const troupe_dp_t *dp)
{
    const troupe__dp_zero_t *z = dp->zero;
    return z == NULL ? 0 : z->len * (int64_t)sizeof(float) * dp->nstate;
}

float *troupe__dp_zero_seg_shard(const troupe_dp_t *dp, size_t g, int s)
{
    return dp->zero->shard[s] + dp->zero->off[g];
}

troupe_status_t troupe__dp_zero_gather(troupe_dp_t *dp, int s, float *full)
{
    const troupe__dp_zero_t *z = dp->zero;
    for (size_t g = 0; g < z->nseg; g++)
        memcpy(full + z->base[g] + z->lo[g], z->shard[s] + z->off[g],
               (size_t)(z->hi[g] - z->lo[g]) * sizeof(float));
    for (size_t g = 0; g < z->nseg; g++) {
        int64_t n = (g + 1 < z->nseg ? z->base[g + 1] : z->count) - z->base[g];
        for (int p = 0; p < dp->nranks; p++) {
            int64_t lo = 0, hi = 0;
            troupe_coll_shard_range(n, p, dp->nranks, &lo, &hi);
            if (hi == lo)
                continue; /* every rank skips it alike */
            troupe_coll_tensor_t t = {.data = full + z->base[g] + lo,
                                      .count = hi - lo,
                                      .prec = TROUPE_PREC_SINGLE,
                                      .node_id = -1,
                                      .ndims = 1,
                                      .dims = {hi - lo},
                                      .name = "dp_zero_shard"};
            troupe_event_t *ev = NULL;
            TROUPE_RETURN_IF_ERROR(troupe_broadcast(&t, 1, p, &ev));
            TROUPE_RETURN_IF_ERROR(
                troupe__dp_sync_event(&ev, "dp_save: gathering the optimizer state's shards"));
        }
    }
    return TROUPE_OK;
}

void troupe__dp_zero_load(troupe_dp_t *dp, size_t i, int s, const float *values)
{
    troupe__dp_zero_t *z = dp->zero;
    int64_t at = z->at[i], count = troupe_tnode_num_elems(dp->params[i]);
    for (size_t g = 0; g < z->nseg; g++) {
        int64_t slo = z->base[g] + z->lo[g], shi = z->base[g] + z->hi[g];
        int64_t lo = at > slo ? at : slo, hi = at + count < shi ? at + count : shi;
        if (hi > lo)
            memcpy(z->shard[s] + z->off[g] + (lo - slo), values + (lo - at),
                   (size_t)(hi - lo) * sizeof(float));
    }
}

int64_t troupe_dp_optimizer_state_bytes(const troupe_dp_t *dp)
{
    if (dp == NULL)
        return 0;
    if (dp->zero != NULL)
        return troupe__dp_zero_bytes(dp);
    int64_t bytes = 0;
    for (size_t k = 0; dp->state != NULL && k < dp->n_params * (size_t)dp->nstate; k++)
        bytes += (int64_t)dp->state[k]->size_bytes;
    return bytes;
}
