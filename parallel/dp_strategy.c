/* troupe — the data-parallel driver's strategy (dp_strategy_impl.h; docs/parallel.md): the
 * exchange, the overlap segments, the update and the accumulation of a run, decided once in
 * troupe_dp_new from the config, the backend and one small allreduce in which the ranks agree
 * on what must be alike (the exchange, the segment count, the most streams of a rank).
 */
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/log.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- exchange ------------------------------------------------------------------------------ */

const char *troupe__dp_exchange_name(int exchange)
{
    switch (exchange) {
    case TROUPE__DP_EXCHANGE_INPLACE:
        return "in-place";
    case TROUPE__DP_EXCHANGE_STAGED:
        return "staged";
    case TROUPE__DP_EXCHANGE_DIRECT:
        return "direct";
    default:
        return "none";
    }
}

troupe__dp_exchange_t troupe__dp_choose_exchange(int nranks, bool device_memory, bool lendable,
                                                 bool cuda_aware)
{
    if (nranks <= 1)
        return TROUPE__DP_EXCHANGE_NONE;
    if (!device_memory)
        return TROUPE__DP_EXCHANGE_INPLACE;
    /* CUDA-aware MPI takes device pointers, but the arrays reach the transport through a lend,
     * which needs a backend that can hand out its arrays' addresses (actors/lend.h): a host
     * backend standing for device memory can; the cuda backend cannot yet, so it stages. */
    if (cuda_aware && lendable)
        return TROUPE__DP_EXCHANGE_DIRECT;
    return TROUPE__DP_EXCHANGE_STAGED;
}

/* ---- overlap ------------------------------------------------------------------------------- */

bool troupe__dp_choose_overlap(troupe_dp_overlap_t mode, int nranks, bool device_compute,
                               long cores, int local_ranks, int streams, char *why, size_t cap)
{
    if (mode == TROUPE_DP_OVERLAP_ON) {
        snprintf(why, cap, "asked for (on)");
        return true;
    }
    if (mode == TROUPE_DP_OVERLAP_OFF) {
        snprintf(why, cap, "turned off (off)");
        return false;
    }
    if (nranks <= 1) {
        snprintf(why, cap, "auto: one rank, no allreduce to overlap");
        return false;
    }
    if (device_compute) {
        snprintf(why, cap, "auto: the backend computes on a device, the host's cores are free "
                           "for the transport engine");
        return true;
    }
    long need = (long)(local_ranks > 0 ? local_ranks : 1) * ((long)streams + 1);
    bool spare = cores >= need;
    snprintf(why, cap,
             "auto: %ld cores on the node for %d local ranks x (%d compute streams + 1 "
             "transport engine) = %ld: %s",
             cores, local_ranks, streams, need,
             spare ? "a core per rank for the engine" : "no core left for the engine");
    return spare;
}

/* qsort order of (segment, node) pairs: by segment, then node id. */
typedef struct s_seg_node {
    size_t seg;
    troupe_tnode_t *tn;
} s_seg_node_t;

static int s_by_seg_id(const void *a, const void *b)
{
    const s_seg_node_t *x = a, *y = b;
    if (x->seg != y->seg)
        return (x->seg > y->seg) - (x->seg < y->seg);
    return (x->tn->id > y->tn->id) - (x->tn->id < y->tn->id);
}

/* Every rank must issue the same requests: the smallest and the largest segment count and
 * exchange kind over the ranks, and (for the pass across the streams, s_plan_fused) the most
 * streams of a rank, whether every rank's streams are threads on host memory and whether no
 * rank knows a parameter shared across streams (one host-level allreduce of min(v) and
 * min(-v)). */
static troupe_status_t s_agree_plan(troupe_dp_t *dp, size_t nseg, size_t *seg_lo, size_t *seg_hi,
                                    int *exch_lo, int *exch_hi)
{
    bool host_threads =
        troupe_backend_threaded(dp->backend) && troupe_backend_host_addressable(dp->backend);
    bool per_stream = true; /* no parameter known shared across streams */
    for (size_t i = 0; i < dp->n_params; i++)
        per_stream = per_stream && !troupe_tnode_known_shared_cross_streams(dp->params[i]);
    int32_t v[7] = {(int32_t)nseg,          -(int32_t)nseg,  (int32_t)dp->strat.exchange,
                    -(int32_t)dp->strat.exchange, -(int32_t)dp->n, host_threads ? 1 : 0,
                    per_stream ? 1 : 0};
    *seg_lo = *seg_hi = nseg;
    *exch_lo = *exch_hi = (int)dp->strat.exchange;
    dp->strat.max_streams = dp->n;
    dp->strat.all_host_threads = host_threads;
    dp->strat.all_per_stream = per_stream;
    if (dp->nranks <= 1)
        return TROUPE_OK;
    troupe_coll_tensor_t t;
    memset(&t, 0, sizeof t);
    t.data = v;
    t.count = 7;
    t.prec = TROUPE_PREC_INT32;
    t.name = "dp_exchange_plan";
    troupe_allreduce_args_t ar = {.op = TROUPE_REDUCE_MIN, .n = 1, .tensors = &t};
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_allreduce(&ar, &ev));
    TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(
        &ev, "dp_new: agreeing on the exchange and the gradient routine's segments"));
    *seg_lo = (size_t)v[0];
    *seg_hi = (size_t)-v[1];
    *exch_lo = v[2];
    *exch_hi = -v[3];
    dp->strat.max_streams = (int)-v[4];
    dp->strat.all_host_threads = v[5] != 0;
    dp->strat.all_per_stream = v[6] != 0;
    return TROUPE_OK;
}

/* Ranks that chose different exchanges (a cuda rank staging beside a cpu rank lending in
 * place; CUDA-aware MPI detected on some ranks only) would issue different requests and meet
 * only at the collective's deadline: they all stage through host memory instead, which every
 * backend can (s_check_stageable names a gradient that cannot), and say so. */
static void s_agree_exchange(troupe_dp_t *dp, int lo, int hi)
{
    if (lo == hi)
        return;
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL,
               "dp: the ranks chose different exchanges (%s on some, %s on others; this rank: "
               "%s): every rank stages through host memory",
               troupe__dp_exchange_name(lo), troupe__dp_exchange_name(hi),
               troupe__dp_exchange_name((int)dp->strat.exchange));
    dp->strat.exchange = TROUPE__DP_EXCHANGE_STAGED;
}

/* Decides whether this run overlaps (troupe__dp_choose_overlap), plans the split, checks that
 * every rank splits alike, materializes the crossing nodes and orders grads_by_id by segment
 * (dp->nseg, seg_first, seg_of_grad; one segment when not overlapping). */
static troupe_status_t s_plan_segments(troupe_dp_t *dp, const troupe_dp_config_t *cfg,
                                       const troupe_dp_model_t *m)
{
    troupe_dp_overlap_t mode =
        cfg->overlap != TROUPE_DP_OVERLAP_AUTO ? cfg->overlap : troupe_config_dp_overlap();
    char why[256];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = dp->nranks > 1 ? troupe_cluster_local_size() : 1;
    bool want = troupe__dp_choose_overlap(mode, dp->nranks,
                                          !troupe_backend_host_addressable(dp->backend),
                                          cores, local, dp->n, why, sizeof why);
    /* DDP's buckets: a segment closes once its gradients hold bucket_bytes, the first at 1 MiB */
    dp->bucket_bytes = cfg->bucket_bytes != 0 ? cfg->bucket_bytes : troupe_config_dp_bucket_bytes();
    dp->bucket_first = dp->bucket_bytes < TROUPE_DP_FIRST_BUCKET_BYTES
                           ? dp->bucket_bytes
                           : TROUPE_DP_FIRST_BUCKET_BYTES;
    troupe__dp_split_t sp;
    memset(&sp, 0, sizeof sp);
    TROUPE_RETURN_IF_ERROR(troupe__dp_split_plan_buckets(m->grad_comp, dp->grads, dp->n_params,
                                                         dp->bucket_first, dp->bucket_bytes,
                                                         &sp));
    size_t nseg = want ? sp.nseg : 1, lo = 0, hi = 0;
    int exch_lo = 0, exch_hi = 0;
    troupe_status_t st = s_agree_plan(dp, nseg, &lo, &hi, &exch_lo, &exch_hi);
    if (st == TROUPE_OK)
        s_agree_exchange(dp, exch_lo, exch_hi);
    if (st == TROUPE_OK && nseg > 1 && lo != hi) {
        snprintf(why, sizeof why, "the ranks split into %zu to %zu segments: every rank runs "
                                  "unsplit", lo, hi);
        nseg = 1;
    }
    if (st == TROUPE_OK && nseg > 1)
        st = troupe__dp_split_materialize(&sp);
    size_t late = SIZE_MAX;
    if (st == TROUPE_OK && nseg > 1)
        st = troupe__dp_split_late_param(m->grad_comp, &sp, dp->params, dp->n_params, &late);
    dp->strat.late_param = late != SIZE_MAX;
    if (dp->strat.late_param) {
        char nm[64];
        troupe__dp_node_name(dp->params[late], nm, sizeof nm);
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL,
                   "dp: overlap: parameter %s is read after its bucket's segment: the optimizer "
                   "step cannot be fused into the buckets' allreduces",
                   nm);
    }
    dp->nseg = st == TROUPE_OK ? nseg : 1;
    dp->overlap = dp->nseg > 1;
    dp->seg_first = troupe_calloc(dp->nseg + 1, sizeof *dp->seg_first);
    dp->seg_of_grad = troupe_calloc(dp->n_params, sizeof *dp->seg_of_grad);
    dp->seg_code = troupe_calloc(dp->nseg, sizeof *dp->seg_code);
    s_seg_node_t *pairs = troupe_calloc(dp->n_params, sizeof *pairs);
    if (st == TROUPE_OK && (!dp->seg_first || !dp->seg_of_grad || !dp->seg_code || !pairs))
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    for (int k = 0; k < dp->n && st == TROUPE_OK; k++) {
        dp->rep[k].seg = troupe_calloc(dp->nseg, sizeof *dp->rep[k].seg);
        if (dp->rep[k].seg == NULL)
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    }
    if (st == TROUPE_OK) {
        for (size_t i = 0; i < dp->n_params; i++) {
            dp->seg_of_grad[i] = dp->overlap ? sp.seg_of_grad[i] : 0;
            pairs[i] = (s_seg_node_t){dp->seg_of_grad[i], dp->grads[i]};
        }
        qsort(pairs, dp->n_params, sizeof *pairs, s_by_seg_id);
        for (size_t i = 0; i < dp->n_params; i++) {
            dp->grads_by_id[i] = pairs[i].tn;
            dp->seg_first[pairs[i].seg + 1] = i + 1;
        }
        for (size_t g = 1; g <= dp->nseg; g++) /* a segment without gradients: none */
            if (dp->seg_first[g] < dp->seg_first[g - 1])
                dp->seg_first[g] = dp->seg_first[g - 1];
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL,
                   "dp: overlap %s (%zu segments, %zu nodes materialized across them; buckets of "
                   "%zu bytes, the first %zu): %s%s%s",
                   dp->overlap ? "on" : "off", dp->nseg, dp->overlap ? sp.ncrossing : 0,
                   dp->bucket_bytes, dp->bucket_first, why,
                   want && sp.nseg == 1 ? "; but grad_comp cannot be split: " : "",
                   want && sp.nseg == 1 ? sp.why : "");
    }
    troupe_free(pairs);
    troupe__dp_split_free(&sp);
    return st;
}

/* ---- update -------------------------------------------------------------------------------- */

bool troupe__dp_choose_fused(bool config_on, int nranks, troupe__dp_exchange_t exchange,
                             size_t nseg, bool late_param, bool all_single, char *why, size_t cap)
{
    const char *no = !config_on                               ? "TROUPE_DP_FUSED_UPDATE=off"
                     : nranks <= 1                            ? "one rank, no allreduce"
                     : exchange != TROUPE__DP_EXCHANGE_INPLACE ? "the exchange is not in place"
                     : nseg > 1 && late_param
                         ? "overlap: a segment reads a parameter of an earlier bucket"
                     : !all_single ? "a parameter is not single precision"
                                   : NULL;
    snprintf(why, cap, "%s",
             no != NULL  ? no
             : nseg > 1 ? "in place, one allreduce per overlap bucket, each updating its "
                          "parameters, single precision"
                        : "in place, one allreduce, single precision");
    return no == NULL;
}


troupe__dp_update_t troupe__dp_choose_update(bool config_on, int nranks,
                                             const troupe__dp_strategy_t *s, size_t nseg,
                                             bool all_single, char *why, size_t cap)
{
    char local[96], fused[96];
    /* several streams on some rank: the passes across the streams (on every rank, so that
     * every rank's allreduce carries no update), else the update in the allreduce */
    if (troupe__dp_choose_local(config_on, s->max_streams, s->exchange, s->all_host_threads,
                                nseg, all_single, s->all_per_stream, local, sizeof local)) {
        snprintf(why, cap, "merge and optimizer step fused into passes across the streams: %s",
                 local);
        return TROUPE__DP_UPDATE_STREAMS;
    }
    bool f = troupe__dp_choose_fused(config_on, nranks, s->exchange, nseg, s->late_param,
                                     all_single, fused, sizeof fused);
    snprintf(why, cap,
             "merge and optimizer step not fused across the streams: %s; optimizer step %s: %s",
             local, f ? "fused into the allreduce" : "as a routine after the allreduce", fused);
    return f ? TROUPE__DP_UPDATE_FUSED : TROUPE__DP_UPDATE_ROUTINE;
}

const char *troupe__dp_update_name(int update)
{
    switch (update) {
    case TROUPE__DP_UPDATE_FUSED:
        return "fused";
    case TROUPE__DP_UPDATE_STREAMS:
        return "streams";
    default:
        return "routine";
    }
}

const char *troupe_dp_update_name(troupe_dp_update_t u)
{
    switch (u) {
    case TROUPE_DP_UPDATE_AUTO:
        return "auto";
    case TROUPE_DP_UPDATE_ROUTINE:
        return "routine";
    case TROUPE_DP_UPDATE_FUSED:
        return "fused";
    case TROUPE_DP_UPDATE_STREAMS:
        return "streams";
    }
    return "invalid";
}

/* The update a config asks for (troupe_dp_config_t.update, grad_clip) against what the
 * strategy can take: AUTO follows troupe__dp_choose_update (the routine with grad_clip: the
 * norm needs every gradient's final sum before any element is updated, which the fused forms
 * update as they go); FUSED or STREAMS that the rules refuse are INVALID_ARGUMENT naming the
 * conflict. Every input is agreed across ranks, so every rank decides alike. */
static troupe_status_t s_resolve_update(troupe_dp_t *dp, const troupe_dp_config_t *cfg,
                                        bool all_single, char *why, size_t cap)
{
    troupe_dp_update_t want = cfg->update;
    bool clip = cfg->grad_clip > 0.0, ls = dp->ls_on;
    if (want == TROUPE_DP_UPDATE_ROUTINE || (want == TROUPE_DP_UPDATE_AUTO && (clip || ls))) {
        snprintf(why, cap, "%s",
                 clip ? "grad_clip: the norm needs the whole gradient first"
                 : ls ? "loss scaling: the finiteness check needs the whole gradient first"
                      : "asked for (update routine)");
        dp->strat.update = TROUPE__DP_UPDATE_ROUTINE;
        return TROUPE_OK;
    }
    if (want == TROUPE_DP_UPDATE_AUTO) {
        dp->strat.update = troupe__dp_choose_update(troupe_config_dp_fused_update(), dp->nranks,
                                                    &dp->strat, dp->nseg, all_single, why, cap);
        return TROUPE_OK;
    }
    const char *name = troupe_dp_update_name(want);
    if (want != TROUPE_DP_UPDATE_FUSED && want != TROUPE_DP_UPDATE_STREAMS)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: update = %d is none of auto, routine, fused, streams",
                             (int)want);
    if (clip)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: update %s conflicts with grad_clip = %g: the global norm "
                             "needs every gradient reduced before any parameter is updated "
                             "(use update routine or auto)",
                             name, cfg->grad_clip);
    if (ls)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: update %s conflicts with loss scaling: a step is skipped "
                             "when any averaged gradient is not finite, which needs every "
                             "gradient reduced before any parameter is updated (use update "
                             "routine or auto)",
                             name);
    bool ok = want == TROUPE_DP_UPDATE_FUSED
                  ? troupe__dp_choose_fused(true, dp->nranks, dp->strat.exchange, dp->nseg,
                                            dp->strat.late_param, all_single, why, cap)
                  : troupe__dp_choose_local(true, dp->strat.max_streams, dp->strat.exchange,
                                            dp->strat.all_host_threads, dp->nseg, all_single,
                                            dp->strat.all_per_stream, why, cap);
    if (!ok)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: update %s conflicts with this run (exchange %s, overlap "
                             "%s, %d stream%s on the widest rank, %d rank%s): %s",
                             name, troupe__dp_exchange_name((int)dp->strat.exchange),
                             dp->overlap ? "on" : "off", dp->strat.max_streams,
                             dp->strat.max_streams == 1 ? "" : "s", dp->nranks,
                             dp->nranks == 1 ? "" : "s", why);
    dp->strat.update =
        want == TROUPE_DP_UPDATE_FUSED ? TROUPE__DP_UPDATE_FUSED : TROUPE__DP_UPDATE_STREAMS;
    return TROUPE_OK;
}

/* ---- accumulation -------------------------------------------------------------------------- */

troupe_status_t troupe__dp_strategy_accum(const troupe_dp_config_t *cfg, int *out)
{
    int k = cfg->grad_accum == 0 ? 1 : cfg->grad_accum;
    if (k < 1 || k > TROUPE_DP_MAX_GRAD_ACCUM)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: grad_accum = %d: the micro-steps per optimizer step must "
                             "be 1 to %d (0 means 1)",
                             cfg->grad_accum, TROUPE_DP_MAX_GRAD_ACCUM);
    *out = k;
    return TROUPE_OK;
}

/* ---- the whole strategy -------------------------------------------------------------------- */

troupe_status_t troupe__dp_strategy_resolve(troupe_dp_t *dp, const troupe_dp_config_t *cfg,
                                            const troupe_dp_model_t *m)
{
    TROUPE_RETURN_IF_ERROR(troupe__dp_strategy_accum(cfg, &dp->strat.accum));
    bool lendable = troupe_backend_host_addressable(dp->backend);
    bool cuda_aware = troupe_config_cuda_aware() == TROUPE_CUDA_AWARE_ON ||
                      (troupe_config_cuda_aware() == TROUPE_CUDA_AWARE_AUTO &&
                       troupe_cluster_cuda_aware());
    bool device_memory = cfg->stage_through_host || !lendable;
    /* DIRECT: the lent path, with device memory handed to MPI as it is; NONE (one rank,
     * local_only): nothing crosses ranks, so nothing is staged whatever the memory */
    dp->strat.exchange =
        troupe__dp_choose_exchange(dp->nranks, device_memory, lendable, cuda_aware);
    TROUPE_RETURN_IF_ERROR(s_plan_segments(dp, cfg, m)); /* agrees on the exchange too */
    bool all_single = true; /* the model's precisions are the same on every rank (dp_agree) */
    for (size_t i = 0; i < dp->n_params; i++)
        all_single = all_single && dp->params[i]->prec == TROUPE_PREC_SINGLE;
    char why[256];
    TROUPE_RETURN_IF_ERROR(s_resolve_update(dp, cfg, all_single, why, sizeof why));
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL, "dp: update %s (%s); %d micro-step%s per step",
               troupe__dp_update_name((int)dp->strat.update), why, dp->strat.accum,
               dp->strat.accum == 1 ? "" : "s");
    return TROUPE_OK;
}
