/* troupe — the data-parallel driver's step (parallel/dp.h; docs/parallel.md, A step): per
 * optimizer step, the micro-steps of the gradient routine on every replica (dp_accum.c keeps
 * their sums), then per overlap segment the tree merge into the owner stream and the
 * segment's exchange (dp_exchange.c), then the update (dp_update.c) and the new parameters to
 * the other replicas; and the loss, read back as the mean over every replica and micro-step.
 * Nothing here waits: a step is scheduled on the streams and the transport, and
 * troupe_dp_sync waits for it.
 */
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/fault_impl.h"
#include "base/trace_impl.h"
#include "transport/mpi/collective.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Traced runs (base/trace.h) mark each step on the owner stream: from when the stream begins
 * the step to when its optimizer finished, on the rank's "steps" timeline. A mark is shared by
 * the two stream items and the scheduling host thread; the last one to let go frees it. */
typedef struct s_step_mark {
    atomic_int refs;
    int64_t step;
    int64_t t0_ns; /* 0 until the stream reached the step */
} s_step_mark_t;

static void s_mark_release(void *arg)
{
    s_step_mark_t *m = arg;
    if (m != NULL && atomic_fetch_sub(&m->refs, 1) == 1)
        troupe_free(m);
}

static troupe_status_t s_mark_begin(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    ((s_step_mark_t *)arg)->t0_ns = troupe_now_ns();
    return TROUPE_OK;
}

static troupe_status_t s_mark_end(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    const s_step_mark_t *m = arg;
    if (m->t0_ns != 0) {
        char name[32];
        snprintf(name, sizeof name, "step %lld", (long long)m->step);
        troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("step", m->step)};
        troupe__trace_emit(TROUPE__TRACK_STEPS, "step", name, m->t0_ns, troupe_now_ns(), a, 1);
    }
    return TROUPE_OK;
}

/* Schedules the step's begin mark on the owner stream; *out_mark (the host's reference, NULL
 * when not traced) goes to s_mark_step_end, or to s_mark_release if the step fails first. */
static troupe_status_t s_mark_step_begin(troupe_dp_t *dp, s_step_mark_t **out_mark)
{
    *out_mark = NULL;
    if (!troupe__trace_on())
        return TROUPE_OK;
    s_step_mark_t *m = troupe_calloc(1, sizeof *m);
    if (m == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_step: out of memory");
    atomic_init(&m->refs, 2);
    m->step = dp->steps;
    troupe_status_t st = troupe_stream_schedule(troupe_context_stream(troupe__dp_tail(dp, 0)),
                                                s_mark_begin, m, s_mark_release);
    if (st != TROUPE_OK) { /* the schedule dropped the item's reference */
        s_mark_release(m);
        return st;
    }
    *out_mark = m;
    return TROUPE_OK;
}

/* Schedules the end mark with the host's reference. */
static troupe_status_t s_mark_step_end(troupe_dp_t *dp, s_step_mark_t **mark_p)
{
    s_step_mark_t *m = *mark_p;
    *mark_p = NULL;
    if (m == NULL)
        return TROUPE_OK;
    return troupe_stream_schedule(troupe_context_stream(troupe__dp_tail(dp, 0)), s_mark_end, m,
                                  s_mark_release);
}

/* Points segment g of replica rep at minibatch b: the indexed form binds the segment's batch
 * index; the fed form binds the feed routine's and runs it before segment 0 (it copies the
 * minibatch into the fixed nodes, so the gradient routine keeps one binding: parallel/dp.h,
 * feed_comp). */
static troupe_status_t s_select_batch(troupe__dp_replica_t *rep, troupe_routine_t *seg, size_t g,
                                      const troupe_dp_t *dp, int64_t b)
{
    if (!rep->feed)
        return troupe_routine_set_index(seg, dp->batch_index, b);
    if (g != 0)
        return TROUPE_OK;
    TROUPE_RETURN_IF_ERROR(troupe_routine_set_index(rep->feed, dp->batch_index, b));
    return troupe_routine_run(rep->feed, NULL);
}

/* 1. Segment g of the gradient routine of micro-step j on every replica, each on its minibatch
 * (round-robin over the global list: micro-step j of step s is the (s * accum + j)-th round).
 * *ready (replaced when the step is logged) gets the owner stream's event after it; the last
 * segment's events are the replicas' gradient ends. */
static troupe_status_t s_run_segment(troupe_dp_t *dp, int j, size_t g, troupe__dp_steplog_t *rec,
                                     troupe_event_t **ready)
{
    int64_t round = dp->steps * dp->strat.accum + j;
    int64_t base = round * dp->replicas + dp->replica_offset;
    bool last = g + 1 == dp->nseg;
    for (int k = 0; k < dp->n; k++) {
        int64_t b = (base + k) % dp->num_batches;
        troupe_routine_t *r = dp->rep[k].seg[g];
        TROUPE_RETURN_IF_ERROR(s_select_batch(&dp->rep[k], r, g, dp, b));
        troupe_event_t *ev = NULL;
        TROUPE_RETURN_IF_ERROR(
            troupe_routine_run(r, rec != NULL && (last || k == 0) ? &ev : NULL));
        if (last)
            troupe__dp_steplog_grad(rec, k, ev);
        if (k == 0 && ev != NULL) {
            troupe_event_release(ready);
            *ready = ev;
        } else {
            troupe_event_release(&ev);
        }
    }
    return TROUPE_OK;
}

/* 2. The tree merge into replica 0 of segment g's gradients, last parameter first (the order
 * backprop finishes them); with one segment, every gradient in that order. *ready as
 * s_run_segment's (the owner stream's last merge). */
static troupe_status_t s_merge_segment(troupe_dp_t *dp, size_t g, troupe__dp_steplog_t *rec,
                                       troupe_event_t **ready)
{
    int n = dp->n;
    for (size_t i = dp->n_params; i-- > 0;) {
        if (dp->seg_of_grad[i] != g)
            continue;
        troupe_tnode_t *gr = dp->grads[i];
        for (int stride = 1; stride < n; stride *= 2) {
            for (int k = 0; k + stride < n; k += 2 * stride) {
                TROUPE_RETURN_IF_ERROR(
                    troupe_device_to_device(gr, TROUPE_MERGE_COPY, troupe__dp_tail(dp, k),
                                            troupe__dp_tail(dp, k + stride), NULL, NULL, NULL));
                troupe_event_t *ev = NULL;
                TROUPE_RETURN_IF_ERROR(
                    troupe_routine_run(dp->rep[k].merge[i], rec != NULL && k == 0 ? &ev : NULL));
                if (ev != NULL) {
                    troupe_event_release(ready);
                    *ready = ev;
                }
            }
        }
    }
    return TROUPE_OK;
}

/* 1. The micro-steps before the last (strat.accum > 1): every segment on every replica, then
 * the replicas keep their gradients' sums (dp_accum.c). */
static troupe_status_t s_early_micro_steps(troupe_dp_t *dp)
{
    for (int j = 0; j + 1 < dp->strat.accum; j++) {
        for (size_t g = 0; g < dp->nseg; g++)
            TROUPE_RETURN_IF_ERROR(s_run_segment(dp, j, g, NULL, NULL));
        TROUPE_RETURN_IF_ERROR(troupe__dp_accum_keep(dp, j));
    }
    return TROUPE_OK;
}

/* The steps 1 to 5 (parallel/dp.h) of one optimizer step: the strategy (dp->strat) picks each
 * one's form; mark: the trace's step mark (s_mark_step_end takes it). */
static troupe_status_t s_schedule_step(troupe_dp_t *dp, s_step_mark_t **mark,
                                       troupe__dp_steplog_t *rec)
{
    int n = dp->n, last = dp->strat.accum - 1;
    bool streams = dp->strat.update == TROUPE__DP_UPDATE_STREAMS;
    troupe__dp_xstep_t x;
    TROUPE_RETURN_IF_ERROR(troupe__dp_xstep_new(dp, &x));
    /* 0. this step's hyper-parameters, ahead of everything else on the owner stream */
    troupe_status_t st = troupe__dp_update_begin(dp, &x.arg);
    if (st == TROUPE_OK)
        st = s_early_micro_steps(dp);
    /* 1-3. per segment of the gradient routine (one without overlap) in the last micro-step:
     * the segment on every replica (and the sums of the earlier micro-steps added), the tree
     * merge of its gradients into replica 0, its bucket's exchange across ranks */
    troupe_event_t *ready = NULL;
    for (size_t g = 0; g < dp->nseg && st == TROUPE_OK; g++) {
        st = s_run_segment(dp, last, g, rec, &ready);
        if (st == TROUPE_OK && dp->accum != NULL)
            st = troupe__dp_accum_fold(dp, g, rec != NULL ? &ready : NULL);
        if (st == TROUPE_OK && !streams) {
            st = s_merge_segment(dp, g, rec, &ready);
        } else if (st == TROUPE_OK && n > 1 && dp->nranks > 1) {
            /* the merge as a pass across the streams into replica 0's gradients */
            troupe_event_release(&ready);
            st = troupe__dp_local_step(dp, TROUPE__DP_LOCAL_SUM, &x.arg,
                                       rec != NULL ? &ready : NULL);
        }
        if (st == TROUPE_OK)
            st = troupe__dp_xstep_out(dp, &x, g, ready, rec);
    }
    if (st == TROUPE_OK && n > 1 && (!streams || dp->nranks > 1))
        troupe__dp_steplog_merge(rec, ready); /* the owner stream's last merge */
    troupe_event_release(&ready);
    if (st == TROUPE_OK)
        st = troupe__dp_xstep_back(dp, &x, rec);
    bool fused = dp->strat.update == TROUPE__DP_UPDATE_FUSED;
    if (st == TROUPE_OK && fused && x.ndone > 0) /* the update ends with the allreduce */
        troupe__dp_steplog_optimizer(rec, x.done[x.ndone - 1]);
    troupe__dp_apply_arg_t arg = x.arg;
    troupe__dp_xstep_free(dp, &x);
    TROUPE_RETURN_IF_ERROR(st);
    /* 4. the update (the passes across the streams also leave the new parameters on every
     * replica: 5) */
    TROUPE_RETURN_IF_ERROR(troupe__dp_update_apply(dp, &arg, rec));
    TROUPE_RETURN_IF_ERROR(s_mark_step_end(dp, mark));
    if (streams)
        return TROUPE_OK;
    /* 5. the new parameters to the other replicas */
    for (int k = 1; k < n; k++)
        for (size_t i = 0; i < dp->n_params; i++)
            TROUPE_RETURN_IF_ERROR(troupe_device_to_device(dp->params[i], TROUPE_MERGE_NO,
                                                           troupe__dp_tail(dp, k),
                                                           troupe__dp_tail(dp, 0), NULL, NULL,
                                                           NULL));
    return TROUPE_OK;
}

troupe_status_t troupe__dp_refuse_if_failed(const troupe_dp_t *dp, const char *what)
{
    if (dp->failed != TROUPE_OK)
        return troupe__error(dp->failed, "%s: an earlier step failed while being scheduled: %s",
                             what, dp->failed_msg);
    return TROUPE_OK;
}

troupe_status_t troupe_dp_step(troupe_dp_t *dp)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_step: NULL dp");
    TROUPE_RETURN_IF_ERROR(troupe__dp_refuse_if_failed(dp, "dp_step"));
    if (troupe__fault_armed(TROUPE__FAULT_STEP))
        troupe__fault_step(dp->steps);
    int64_t t0 = troupe__trace_on() ? troupe_now_ns() : 0;
    int64_t h0 = 0; /* the host's scheduling time, for a logged step only */
    troupe__dp_steplog_t *rec = NULL;
    if (troupe__dp_steplog_wanted(dp->steps)) {
        h0 = troupe_now_ns();
        size_t nbk = dp->strat.exchange == TROUPE__DP_EXCHANGE_NONE ? 0
                     : troupe__dp_staged(dp)                             ? dp->nbk
                                                              : dp->nseg;
        rec = troupe__dp_steplog_new(dp->steps, dp->n, nbk, (int)dp->strat.exchange, dp->strat.update == TROUPE__DP_UPDATE_FUSED,
                                     dp->strat.update == TROUPE__DP_UPDATE_STREAMS);
        troupe__dp_steplog_begin(rec, dp->rep[0].stream);
    }
    s_step_mark_t *mark = NULL;
    /* loss scaling: the last step's verdict and this step's seed, ahead of the step */
    troupe_status_t st = troupe__dp_loss_scale_begin(dp);
    if (st == TROUPE_OK)
        st = s_mark_step_begin(dp, &mark);
    if (st == TROUPE_OK)
        st = s_schedule_step(dp, &mark, rec);
    s_mark_release(mark); /* the step failed before its end mark */
    if (rec != NULL)
        troupe__dp_steplog_set_host(rec, troupe_now_ns() - h0);
    troupe__dp_steplog_release(&rec);
    if (t0 != 0) {
        troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("step", dp->steps)};
        troupe__trace_emit(TROUPE__TRACK_THREAD, "step", "dp_step (schedule)", t0,
                           troupe_now_ns(), a, 1);
    }
    if (st != TROUPE_OK) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "dp_step %lld", (long long)dp->steps);
        st = troupe__dp_wrap(st, prefix);
        dp->failed = st;
        snprintf(dp->failed_msg, sizeof dp->failed_msg, "%s", troupe_last_error());
        return st;
    }
    dp->steps++;
    troupe__dp_note_progress(dp);
    return TROUPE_OK;
}

troupe_status_t troupe_dp_sync(troupe_dp_t *dp)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_sync: NULL dp");
    TROUPE_RETURN_IF_ERROR(troupe__dp_await(dp, "dp_sync"));
    return troupe__dp_refuse_if_failed(dp, "dp_sync");
}

troupe_status_t troupe_dp_last_loss(troupe_dp_t *dp, double *out)
{
    if (!dp || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_last_loss: NULL argument");
    if (!dp->loss)
        return troupe__error(TROUPE_FAILED_PRECONDITION, "dp_last_loss: the model has no loss "
                                                         "node");
    if (dp->steps == 0)
        return troupe__error(TROUPE_FAILED_PRECONDITION, "dp_last_loss: no step ran yet");
    TROUPE_RETURN_IF_ERROR(troupe_dp_sync(dp));
    double sum = 0.0;
    for (int k = 0; k < dp->n; k++) {
        troupe_event_t *ev = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_to_host(troupe__dp_tail(dp, k), dp->loss, &ev));
        TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(&ev, "dp_last_loss: reading the loss"));
        void *host = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(dp->loss, &host));
        sum += troupe_prec_load_double(dp->loss->prec, host);
    }
    /* with micro-steps, each replica's loss node holds the sum of theirs (dp_accum.c) */
    sum /= (double)dp->strat.accum;
    double mean = sum / (double)dp->n;
    if (dp->nranks > 1) {
        /* the mean of the ranks' means; with ranks that run different numbers of replicas,
         * the sum over all of them, over T */
        bool uneven = dp->replicas != (int64_t)dp->n * dp->nranks;
        troupe_coll_tensor_t t;
        memset(&t, 0, sizeof t);
        t.data = uneven ? &sum : &mean;
        t.count = 1;
        t.prec = TROUPE_PREC_DOUBLE;
        t.name = "dp_loss";
        troupe_event_t *ev = NULL;
        troupe_allreduce_args_t ar = {.op = uneven ? TROUPE_REDUCE_SUM : TROUPE_REDUCE_MEAN,
                                      .n = 1,
                                      .tensors = &t};
        const char *phase = troupe_trace_set_phase("dp.loss");
        troupe_status_t st = troupe_allreduce(&ar, &ev);
        troupe_trace_set_phase(phase);
        TROUPE_RETURN_IF_ERROR(st);
        TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(&ev, "dp_last_loss: averaging across "
                                                          "ranks"));
        if (uneven)
            mean = sum / (double)dp->replicas;
    }
    *out = mean;
    return TROUPE_OK;
}

