/* troupe — the data-parallel driver's cross-rank exchange (parallel/dp.h; docs/parallel.md,
 * Exchange): the parameters' broadcast from rank 0 when the driver is built, and each step's
 * gradients summed across ranks, in place on the owner stream's arrays (lent to the transport,
 * cut into fusion buckets by it) or staged through the gradients' host arrays (cut into buckets
 * here and pipelined: to_host, a host-level allreduce gated on the copies, from_host), one
 * request per overlap segment. With strat.update FUSED the in-place request carries the
 * optimizer step (troupe_coll_apply_t). With one rank (or local_only) nothing is issued.
 */
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/trace_impl.h"
#include "transport/mpi/collective.h"

#include <stdio.h>
#include <string.h>

/* Every gradient must have a host array to stage through. */
static troupe_status_t s_check_stageable(troupe_dp_t *dp)
{
    for (size_t i = 0; i < dp->n_params; i++) {
        void *host = NULL;
        troupe_status_t st = troupe_tnode_host_array(dp->grads[i], &host);
        if (st != TROUPE_OK) {
            char nm[64], prefix[320];
            troupe__dp_node_name(dp->grads[i], nm, sizeof nm);
            snprintf(prefix, sizeof prefix,
                     "dp_new: the gradient %s cannot be staged through host memory for the "
                     "allreduce across ranks (backend %s%s)",
                     nm, troupe_backend_name(dp->backend),
                     troupe_backend_host_addressable(dp->backend)
                         ? ", stage_through_host set"
                         : ": its arrays are not host-addressable");
            return troupe__dp_wrap(st == TROUPE_FAILED_PRECONDITION ? TROUPE_INVALID_ARGUMENT : st, prefix);
        }
    }
    return TROUPE_OK;
}

/* A host-level collective's tensors: nodes[i]'s host arrays (troupe_free the result). */
static troupe_status_t s_host_tensors(troupe_tnode_t *const *nodes, size_t n,
                                      troupe_coll_tensor_t **out)
{
    troupe_coll_tensor_t *t = troupe_calloc(n, sizeof *t);
    if (!t)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    for (size_t i = 0; i < n; i++) {
        void *host = NULL;
        troupe_status_t st = troupe_tnode_host_array(nodes[i], &host);
        if (st != TROUPE_OK) {
            troupe_free(t);
            return st;
        }
        t[i] = troupe_coll_tensor_of(nodes[i], host);
    }
    *out = t;
    return TROUPE_OK;
}

/* dp_new's broadcast through host memory: the parameters' host arrays (which every replica
 * was just initialised from) from rank 0 to every rank, then uploaded to every replica. */
static troupe_status_t s_broadcast_staged(troupe_dp_t *dp)
{
    troupe_coll_tensor_t *t = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__dp_await(dp, "dp_new")); /* the uploads read the host arrays */
    TROUPE_RETURN_IF_ERROR(s_host_tensors(dp->params, dp->n_params, &t));
    troupe_event_t *ev = NULL;
    const char *phase = troupe_trace_set_phase("dp.params");
    troupe_status_t st = troupe_broadcast(t, dp->n_params, 0, &ev);
    troupe_trace_set_phase(phase);
    troupe_free(t);
    TROUPE_RETURN_IF_ERROR(st);
    TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(&ev, "dp_new: broadcasting the parameters"));
    for (int k = 0; k < dp->n; k++)
        for (size_t i = 0; i < dp->n_params; i++)
            TROUPE_RETURN_IF_ERROR(troupe_from_host(troupe__dp_tail(dp, k), dp->params[i], NULL));
    return TROUPE_OK;
}

/* The staged exchange's buckets: the gradients in grads_by_id's order (the request order of
 * the in-place path), cut greedily so that a bucket holds at most troupe_config_fusion_bytes()
 * (a larger gradient alone), and at every segment's start (Overlap). Every rank builds the same
 * model, so the cut is the same on every rank; each bucket's allreduce fingerprints its tensors
 * and the fusion size, so ranks that cut otherwise fail with FAILED_PRECONDITION instead of
 * mixing values. */
static troupe_status_t s_plan_buckets(troupe_dp_t *dp)
{
    size_t cap = troupe_config_fusion_bytes();
    dp->bk_first = troupe_calloc(dp->n_params + 1, sizeof *dp->bk_first);
    dp->seg_bk = troupe_calloc(dp->nseg + 1, sizeof *dp->seg_bk);
    if (dp->bk_first == NULL || dp->seg_bk == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    size_t nb = 0, bytes = 0, g = 0;
    for (size_t i = 0; i < dp->n_params; i++) {
        const troupe_tnode_t *g_i = dp->grads_by_id[i];
        size_t sz = (size_t)troupe_tnode_num_elems(g_i) * troupe_prec_size_bytes(g_i->prec);
        bool seg_start = i == dp->seg_first[g];
        if (seg_start || bytes + sz > cap) {
            while (seg_start && g < dp->nseg && dp->seg_first[g] == i)
                dp->seg_bk[g++] = nb;
            dp->bk_first[nb++] = i;
            bytes = 0;
        }
        bytes += sz;
    }
    dp->bk_first[nb] = dp->n_params;
    for (; g <= dp->nseg; g++)
        dp->seg_bk[g] = nb;
    dp->nbk = nb;
    return TROUPE_OK;
}

troupe_status_t troupe__dp_exchange_setup(troupe_dp_t *dp)
{
    if (!troupe__dp_staged(dp) || dp->nranks <= 1)
        return TROUPE_OK;
    TROUPE_RETURN_IF_ERROR(s_check_stageable(dp));
    TROUPE_RETURN_IF_ERROR(s_host_tensors(dp->grads_by_id, dp->n_params, &dp->host_t));
    return s_plan_buckets(dp);
}

troupe_status_t troupe__dp_exchange_broadcast(troupe_dp_t *dp)
{
    troupe_status_t st = TROUPE_OK;
    if (dp->nranks <= 1)
        return TROUPE_OK;
    if (troupe__dp_staged(dp)) {
        st = s_broadcast_staged(dp);
        if (st != TROUPE_OK)
            return troupe__dp_wrap(st, "dp_new: broadcasting the parameters from rank 0 (through "
                                       "host memory)");
        return TROUPE_OK;
    }
    troupe_event_t *ev = NULL;
    const char *phase = troupe_trace_set_phase("dp.params");
    st = troupe_broadcast_nodes(troupe__dp_tail(dp, 0), dp->n_params, dp->params, 0, &ev);
    troupe_trace_set_phase(phase);
    if (st != TROUPE_OK)
        return troupe__dp_wrap(st, "dp_new: broadcasting the parameters from rank 0");
    TROUPE_RETURN_IF_ERROR(
        troupe__dp_sync_event(&ev, "dp_new: broadcasting the parameters from rank 0"));
    for (int k = 1; k < dp->n; k++)
        for (size_t i = 0; i < dp->n_params; i++)
            TROUPE_RETURN_IF_ERROR(troupe_device_to_device(dp->params[i], TROUPE_MERGE_NO,
                                                           troupe__dp_tail(dp, k),
                                                           troupe__dp_tail(dp, 0), NULL, NULL,
                                                           NULL));
    return TROUPE_OK;
}

void troupe__dp_xstep_free(troupe_dp_t *dp, troupe__dp_xstep_t *x)
{
    for (size_t i = 0; x->after != NULL && i < dp->n_params; i++)
        troupe_event_release(&x->after[i]);
    for (size_t b = 0; x->done != NULL && b < x->ndone; b++)
        troupe_event_release(&x->done[b]);
    troupe_free(x->after);
    troupe_free(x->done);
    memset(x, 0, sizeof *x);
}

troupe_status_t troupe__dp_xstep_new(troupe_dp_t *dp, troupe__dp_xstep_t *x)
{
    memset(x, 0, sizeof *x);
    if (dp->nranks <= 1)
        return TROUPE_OK;
    x->ndone = troupe__dp_staged(dp) ? dp->nbk : dp->nseg;
    x->done = troupe_calloc(x->ndone, sizeof *x->done);
    if (troupe__dp_staged(dp))
        x->after = troupe_calloc(dp->n_params, sizeof *x->after);
    if (x->done == NULL || (troupe__dp_staged(dp) && x->after == NULL)) {
        troupe__dp_xstep_free(dp, x);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_step: out of memory");
    }
    return TROUPE_OK;
}

/* (troupe__dp_update_in_allreduce)'s update of segment g's bucket with argument
 * *arg: its parameters and, private to each rank's chunk, their optimizer state as side arrays
 * (dp->fused_side's rows of the bucket's gradients), or the bucket's part of this rank's shard
 * of the state (dp->zero: dp_zero.c). Release out->side with troupe_free. */
typedef struct s_seg_apply {
    troupe_coll_apply_t apply;
    troupe_tnode_t **side;
    float *shard[2];
} s_seg_apply_t;

static troupe_status_t s_fused_apply(const troupe_dp_t *dp, size_t g,
                                     const troupe__dp_apply_arg_t *arg, s_seg_apply_t *out)
{
    size_t first = dp->seg_first[g], cnt = dp->seg_first[g + 1] - first;
    size_t nside = 1 + (size_t)dp->nstate;
    memset(out, 0, sizeof *out);
    out->side = troupe_calloc(cnt * nside, sizeof *out->side);
    if (out->side == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    for (size_t k = 0; k < nside; k++)
        for (size_t i = 0; i < cnt; i++)
            out->side[k * cnt + i] = dp->fused_side[k * dp->n_params + first + i];
    for (int k = 0; dp->zero != NULL && k < dp->nstate; k++)
        out->shard[k] = troupe__dp_zero_seg_shard(dp, g, k);
    out->apply = (troupe_coll_apply_t){.fn = troupe__dp_apply,
                                       .arg = arg,
                                       .arg_bytes = sizeof *arg,
                                       .id = troupe__dp_apply_id(dp),
                                       .n_side = nside,
                                       .n_private = (size_t)dp->nstate,
                                       .side = out->side,
                                       .shard = dp->zero != NULL ? out->shard : NULL};
    return TROUPE_OK;
}

troupe_status_t troupe__dp_unshard(troupe_dp_t *dp)
{
    if (!troupe__dp_update_in_allreduce(dp) || dp->nranks <= 1 || dp->nstate == 0)
        return TROUPE_OK; /* sharded (dp->zero): only the check that every rank saves; the
                             checkpoint gathers the shards itself */
    troupe__dp_apply_arg_t arg;
    memset(&arg, 0, sizeof arg); /* not run: the requests only gather */
    /* as the step's requests sharded it: one per overlap segment with gradients */
    for (size_t g = 0; g < dp->nseg; g++) {
        if (dp->seg_first[g + 1] == dp->seg_first[g])
            continue;
        s_seg_apply_t sa;
        TROUPE_RETURN_IF_ERROR(s_fused_apply(dp, g, &arg, &sa));
        troupe_allreduce_args_t ar = {
            .op = TROUPE_REDUCE_SUM,
            .flags = dp->coll_flags | TROUPE_COLL_UNSHARD,
            .n = dp->seg_first[g + 1] - dp->seg_first[g],
            .ctx = troupe__dp_tail(dp, 0),
            .nodes = dp->grads_by_id + dp->seg_first[g],
            .apply = &sa.apply,
        };
        troupe_event_t *ev = NULL;
        troupe_status_t st = troupe_allreduce(&ar, &ev);
        troupe_free(sa.side);
        TROUPE_RETURN_IF_ERROR(st);
        TROUPE_RETURN_IF_ERROR(
            troupe__dp_sync_event(&ev, "dp_save: gathering the sharded optimizer state"));
    }
    return TROUPE_OK;
}

/* Segment g's bucket(s), once the owner stream holds their sums over the local replicas
 * (`ready`: the owner stream's last event before, for the breakdown). In place: one
 * device-level allreduce (sum) of the segment's gradients, which form one span of the
 * segment's pool when nothing else lies between them (node-id order, the order the linked
 * routine packs its arrays in: actors/routine.h), so the transport reduces them in place, cut
 * into fusion buckets of troupe_config_fusion_bytes() (Horovod's tensor fusion; collective.h).
 * The owner stream goes on with the next segment while the transport reduces
 * (TROUPE_COLL_DEFERRED); the last segment's allreduce starts lazily: the owner stream waits
 * for it next and runs it itself (TROUPE_COLL_LAZY). Staged (through host memory, pipelined
 * without host waits): per bucket, the owner stream copies its gradients to their host arrays
 * (to_host) and a host-level allreduce of them is issued that the transport starts as soon as
 * those copies completed (troupe_allreduce_args_t.after), so bucket b is reduced while the
 * stream copies bucket b+1 or computes the next segment. The sums are those of the in-place
 * path (the same tensors, summed alike: parallel/dp.h). The collective sums: the optimizer's
 * 1 / (N * R) scale makes it the mean without a division pass in the transport. */
troupe_status_t troupe__dp_xstep_out(troupe_dp_t *dp, troupe__dp_xstep_t *x, size_t g,
                                      troupe_event_t *ready, troupe__dp_steplog_t *rec)
{
    if (dp->nranks <= 1)
        return TROUPE_OK;
    troupe_context_t *c0 = troupe__dp_tail(dp, 0);
    troupe_status_t st = TROUPE_OK;
    const char *phase = troupe_trace_set_phase("dp.gradients");
    if (!troupe__dp_staged(dp) && dp->seg_first[g + 1] > dp->seg_first[g]) { /* a bucket of 1 or more */
        bool last = g + 1 == dp->nseg;
        troupe_allreduce_args_t ar = {
            .op = TROUPE_REDUCE_SUM,
            .flags = dp->coll_flags | TROUPE_COLL_DEFERRED | (last ? TROUPE_COLL_LAZY : 0u),
            .n = dp->seg_first[g + 1] - dp->seg_first[g],
            .ctx = c0,
            .nodes = dp->grads_by_id + dp->seg_first[g],
        };
        /* the optimizer step of this step fused into it, for the bucket's parameters */
        s_seg_apply_t sa;
        memset(&sa, 0, sizeof sa);
        if (troupe__dp_update_in_allreduce(dp)) {
            st = s_fused_apply(dp, g, &x->arg, &sa);
            ar.apply = &sa.apply;
        }
        if (st == TROUPE_OK)
            st = troupe_allreduce(&ar, &x->done[g]);
        troupe_free(sa.side);
        troupe__dp_steplog_bucket(rec, g, 0, ready);
        troupe__dp_steplog_bucket(rec, g, 1, x->done[g]); /* before the stream's wait subscribes */
    }
    for (size_t b = troupe__dp_staged(dp) ? dp->seg_bk[g] : 0; troupe__dp_staged(dp) && b < dp->seg_bk[g + 1] &&
                                                    st == TROUPE_OK;
         b++) {
        size_t first = dp->bk_first[b], cnt = dp->bk_first[b + 1] - first;
        for (size_t i = 0; i < cnt && st == TROUPE_OK; i++)
            st = troupe_to_host(c0, dp->grads_by_id[first + i], &x->after[first + i]);
        if (st != TROUPE_OK)
            break;
        troupe__dp_steplog_bucket(rec, b, 0, x->after[first + cnt - 1]);
        troupe_allreduce_args_t ar = {.op = TROUPE_REDUCE_SUM,
                                      .flags = dp->coll_flags,
                                      .n = cnt,
                                      .tensors = dp->host_t + first,
                                      .after = x->after + first,
                                      .n_after = cnt};
        st = troupe_allreduce(&ar, &x->done[b]);
        troupe__dp_steplog_bucket(rec, b, 1, x->done[b]);
    }
    troupe_trace_set_phase(phase);
    return st;
}

/* The owner stream waits for every request, in order; staged: it copies each bucket's sums
 * back (from_host) once its allreduce completed, which overlaps the later buckets' reductions. */
troupe_status_t troupe__dp_xstep_back(troupe_dp_t *dp, troupe__dp_xstep_t *x, troupe__dp_steplog_t *rec)
{
    troupe_context_t *c0 = troupe__dp_tail(dp, 0);
    troupe_status_t st = TROUPE_OK;
    for (size_t b = 0; b < x->ndone && st == TROUPE_OK; b++) {
        if (x->done[b] == NULL)
            continue; /* a segment without gradients issued nothing */
        st = troupe_will_wait_for(c0, x->done[b]);
        for (size_t i = troupe__dp_staged(dp) ? dp->bk_first[b] : 0;
             troupe__dp_staged(dp) && i < dp->bk_first[b + 1] && st == TROUPE_OK; i++) {
            troupe_event_t *ev = NULL;
            bool last = i + 1 == dp->bk_first[b + 1];
            st = troupe_from_host(c0, dp->grads_by_id[i], last && rec != NULL ? &ev : NULL);
            troupe__dp_steplog_bucket(rec, b, 2, ev);
            troupe_event_release(&ev);
        }
    }
    return st;
}

