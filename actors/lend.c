/* troupe — lending arrays to external agents, remote contexts and device_to_device with another
 * rank (see lend.h). */
#include "actors/lend_impl.h"

#include "actors/host_impl.h"
#include "actors/merge_impl.h"
#include "actors/runtime_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/trace_impl.h"
#include "base/status.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- lend work items ------------------------------------------------------------------------ */

struct s_lend;
typedef troupe_status_t (*s_lend_start_fn)(struct s_lend *l, void *const *ptrs,
                                           const int64_t *bytes);

/* A lend work item: resolves host pointers of `n` arrays (or of the merge buffer, grown to
 * merge_bytes, when to_merge), hands them to `start`, which hands `done` to the agent. */
typedef struct s_lend {
    troupe_driver_t *drv;
    int ordinal;
    troupe__srec_t *srec;
    troupe_stream_t *stream; /* retained: its status completes `done` when dropped */
    size_t n;
    troupe_buffer_loc_t *locs;
    bool to_merge;
    int64_t merge_bytes;
    s_lend_start_fn start;
    troupe_event_t *done; /* retained */
    bool handed;          /* the agent owns the completion of done */
    /* public lend */
    troupe_lend_fn user_start;
    troupe_lend_dtor_fn user_dtor;
    void *user;
    /* remote move */
    troupe_remote_transport_t rt;
    bool is_send;
    int peer;
    troupe_tnode_t *tn; /* retained */
} s_lend_t;

static pthread_mutex_t s_rt_lock = PTHREAD_MUTEX_INITIALIZER;
static troupe_remote_transport_t s_rt;
static bool s_rt_set;

void troupe_set_remote_transport(const troupe_remote_transport_t *t)
{
    pthread_mutex_lock(&s_rt_lock);
    s_rt_set = t != NULL;
    if (t)
        s_rt = *t;
    else
        memset(&s_rt, 0, sizeof s_rt);
    pthread_mutex_unlock(&s_rt_lock);
}

static bool s_rt_get(troupe_remote_transport_t *out)
{
    pthread_mutex_lock(&s_rt_lock);
    bool set = s_rt_set;
    if (set)
        *out = s_rt;
    pthread_mutex_unlock(&s_rt_lock);
    return set;
}

static troupe_status_t s_lend_work(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    s_lend_t *l = arg;
    int64_t t0 = troupe__trace_on() ? troupe_now_ns() : 0;
    size_t n = l->to_merge ? 1 : l->n;
    void *ptrs_small[8];
    int64_t bytes_small[8];
    void **ptrs = n <= 8 ? ptrs_small : troupe_calloc(n, sizeof *ptrs);
    int64_t *bytes = n <= 8 ? bytes_small : troupe_calloc(n, sizeof *bytes);
    troupe_status_t st = TROUPE_OK;
    if (!ptrs || !bytes)
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "lend: out of memory");
    if (st == TROUPE_OK && l->to_merge) {
        troupe_buffer_loc_t mb;
        st = troupe__merge_buffer_ensure(l->srec, l->merge_bytes, &mb);
        if (st == TROUPE_OK) {
            st = troupe_driver_host_ptr(l->drv, l->ordinal, mb, &ptrs[0]);
            bytes[0] = l->merge_bytes;
            /* A consumer reading `.merge` resolves to what was received. */
            troupe__merge_buffer_set(l->srec, mb);
        }
    } else {
        for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
            st = troupe_driver_host_ptr(l->drv, l->ordinal, l->locs[i], &ptrs[i]);
            bytes[i] = l->locs[i].size_bytes;
        }
    }
    if (st == TROUPE_OK)
        st = l->start(l, ptrs, bytes);
    if (st == TROUPE_OK) {
        l->handed = true;
    } else {
        /* The agent never got `done`: complete it so the stream's WAIT behind us resolves. */
        l->handed = true;
        troupe_event_complete(l->done, st, troupe_last_error());
    }
    if (t0 != 0) {
        int64_t total = 0;
        for (size_t i = 0; i < n && st == TROUPE_OK; i++)
            total += bytes[i];
        troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("arrays", n), TROUPE__TRACE_NUM("bytes", total),
                                   TROUPE__TRACE_STR("status", troupe_status_str(st))};
        troupe__trace_emit(TROUPE__TRACK_THREAD, "transfer", "lend", t0,
                           troupe_now_ns(), a, 3);
    }
    if (ptrs != (void **)ptrs_small)
        troupe_free(ptrs);
    if (bytes != bytes_small)
        troupe_free(bytes);
    return st;
}

static void s_lend_dtor(void *arg)
{
    s_lend_t *l = arg;
    if (!l->handed && l->done) {
        troupe_status_t st = l->stream ? troupe_stream_status(l->stream) : TROUPE_OK;
        if (st == TROUPE_OK)
            troupe_event_complete(l->done, TROUPE_CANCELLED,
                                  "lend: the stream shut down before the arrays were handed over");
        else
            troupe_event_complete(l->done, st, troupe_last_error());
    }
    if (l->user_dtor)
        l->user_dtor(l->user);
    troupe_event_release(&l->done);
    troupe_stream_release(&l->stream);
    troupe_tnode_release(&l->tn);
    troupe_free(l->locs);
    troupe_free(l);
}

static troupe_status_t s_lend_user_start(s_lend_t *l, void *const *ptrs, const int64_t *bytes)
{
    return l->user_start(l->user, ptrs, bytes, l->n);
}

static troupe_status_t s_lend_remote_start(s_lend_t *l, void *const *ptrs, const int64_t *bytes)
{
    troupe_event_retain(l->done); /* the transport adopts this reference */
    (void)bytes;
    troupe_status_t st = l->rt.move(l->rt.user, l->is_send, l->peer, l->tn, ptrs[0],
                                    (int64_t)l->tn->size_bytes, l->done);
    if (st != TROUPE_OK) {
        troupe_event_t *ref = l->done;
        troupe_event_release(&ref);
    }
    return st;
}

static troupe_status_t s_lend_new(troupe__srec_t *s, size_t n, troupe_event_t *done, s_lend_t **out)
{
    s_lend_t *l = troupe_calloc(1, sizeof *l);
    if (!l || !(l->locs = troupe_calloc(n ? n : 1, sizeof *l->locs))) {
        troupe_free(l);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "lend: out of memory");
    }
    l->drv = s->dev->backend->drv;
    l->ordinal = s->dev->ordinal;
    l->srec = s;
    troupe_stream_retain(s->stream);
    l->stream = s->stream;
    l->n = n;
    troupe_event_retain(done);
    l->done = done;
    *out = l;
    return TROUPE_OK;
}

/* dev->lock held. Schedules l on s (consumed), then, unless deferred, a WAIT for l->done, and
 * records the event after it in *out_ev (a reference; deferred: `done` itself). */
static troupe_status_t s_lend_schedule(troupe__srec_t *s, s_lend_t *l, bool deferred,
                                       troupe_event_t **out_ev)
{
    troupe_event_t *done = l->done;
    troupe_event_retain(done);
    troupe_status_t st = troupe_stream_schedule(s->stream, s_lend_work, l, s_lend_dtor);
    if (st != TROUPE_OK) {
        troupe_event_release(&done);
        return st;
    }
    if (deferred) {
        *out_ev = done; /* our reference */
        return TROUPE_OK;
    }
    st = troupe_stream_wait_for(s->stream, done);
    if (st == TROUPE_OK)
        st = troupe_stream_record(s->stream, out_ev);
    if (st != TROUPE_OK && troupe_stream_status(s->stream) == st) {
        /* The lend was accepted and failed the stream during this call (an inline stream runs
         * it at once): report it through the event, as a threaded stream would. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        st = troupe_event_new_completed("lend", st, msg, out_ev);
    }
    troupe_event_release(&done);
    return st;
}

static troupe_status_t s_check_host_ptr(const troupe_device_t *dev, const char *op)
{
    if (troupe_driver_require(dev->backend->drv, "host_ptr") == TROUPE_OK)
        return TROUPE_OK;
    return troupe__error(TROUPE_UNIMPLEMENTED,
                         "%s: the %s driver has no host-addressable memory (host_ptr)", op,
                         troupe_driver_name(dev->backend->drv));
}

static troupe_status_t s_lend_arrays(troupe_context_t *ctx, size_t n, troupe_tnode_t *const *tns,
                                     troupe_lend_fn start, void *user, troupe_lend_dtor_fn dtor,
                                     troupe_event_t *done, bool deferred, troupe_event_t **out_ev)
{
    if (out_ev)
        *out_ev = NULL;
    troupe_status_t st = TROUPE_OK;
    if (!ctx || !tns || !start || !done || n == 0)
        st = troupe__error(TROUPE_INVALID_ARGUMENT, "lend_arrays: NULL argument or no arrays");
    if (st == TROUPE_OK)
        st = troupe__context_check_local(ctx, "lend_arrays");
    if (st == TROUPE_OK)
        st = s_check_host_ptr(ctx->dev, "lend_arrays");
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        if (!tns[i])
            st = troupe__error(TROUPE_INVALID_ARGUMENT, "lend_arrays: node %zu is NULL", i);
        else if (!troupe__context_find(ctx, tns[i]))
            st = troupe__context_lacks(ctx, tns[i], "lend_arrays");
    }
    s_lend_t *l = NULL;
    if (st == TROUPE_OK)
        st = s_lend_new(ctx->srec, n, done, &l);
    if (st != TROUPE_OK) {
        if (dtor)
            dtor(user);
        return st;
    }
    l->start = s_lend_user_start;
    l->user_start = start;
    l->user_dtor = dtor;
    l->user = user;
    for (size_t i = 0; i < n; i++)
        l->locs[i] = troupe__context_find(ctx, tns[i])->loc;

    troupe_device_t *dev = ctx->dev;
    troupe__srec_t *s = ctx->srec;
    troupe_event_t *ev = NULL;
    pthread_mutex_lock(&dev->lock);
    st = troupe_stream_status(s->stream);
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        troupe__entry_t *e = troupe__ledger_find(&dev->ledger, troupe__key_of(l->locs[i]));
        if (e)
            st = troupe__ledger_before_write(s->stream, e);
    }
    if (st != TROUPE_OK) {
        pthread_mutex_unlock(&dev->lock);
        l->handed = true; /* `done` untouched on an error return */
        s_lend_dtor(l);
        return st;
    }
    st = s_lend_schedule(s, l, deferred, &ev); /* l consumed: locations from ctx again */
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        troupe_buffer_loc_t loc = troupe__context_find(ctx, tns[i])->loc;
        troupe__entry_t *e = troupe__ledger_find(&dev->ledger, troupe__key_of(loc));
        if (e) {
            troupe__ledger_note_write(e, s->stream, ev);
            if (troupe_tnode_known_hosted(tns[i]))
                st = troupe__host_array_note_device_write(tns[i], s, e->key, ev);
        }
    }
    troupe__ledger_tick(&dev->ledger);
    pthread_mutex_unlock(&dev->lock);
    if (st == TROUPE_OK && out_ev)
        *out_ev = ev;
    else
        troupe_event_release(&ev);
    return st;
}

troupe_status_t troupe_lend_arrays(troupe_context_t *ctx, size_t n, troupe_tnode_t *const *tns,
                                   troupe_lend_fn start, void *user, troupe_lend_dtor_fn dtor,
                                   troupe_event_t *done, troupe_event_t **out_ev)
{
    return s_lend_arrays(ctx, n, tns, start, user, dtor, done, false, out_ev);
}

troupe_status_t troupe_lend_arrays_deferred(troupe_context_t *ctx, size_t n,
                                            troupe_tnode_t *const *tns, troupe_lend_fn start,
                                            void *user, troupe_lend_dtor_fn dtor,
                                            troupe_event_t *done)
{
    troupe_event_t *ev = NULL;
    troupe_status_t st = s_lend_arrays(ctx, n, tns, start, user, dtor, done, true, &ev);
    troupe_event_release(&ev); /* a reference to `done` */
    return st;
}

troupe_status_t troupe_context_new_remote(int rank, troupe_context_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "context_new_remote: NULL out");
    *out = NULL;
    troupe_remote_transport_t rt;
    if (!s_rt_get(&rt))
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "context_new_remote: no remote transport is registered (call "
                             "troupe_cluster_init first)");
    if (rank < 0 || rank >= rt.size || rank == rt.rank)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "context_new_remote: rank %d is not another rank of this job "
                             "(this is rank %d of %d)",
                             rank, rt.rank, rt.size);
    troupe_context_t *c = troupe_calloc(1, sizeof *c);
    if (!c)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "context_new_remote: out of memory");
    troupe_refcount_init(&c->refs);
    c->owned_pool_id = -1;
    c->remote_rank = rank;
    atomic_init(&c->finalized, false);
    *out = c;
    return TROUPE_OK;
}

bool troupe_context_is_remote(const troupe_context_t *ctx)
{
    return ctx && ctx->remote_rank >= 0;
}

int troupe_context_remote_rank(const troupe_context_t *ctx)
{
    return ctx ? ctx->remote_rank : -1;
}

troupe_status_t troupe__lend_d2d_remote(troupe_tnode_t *n, troupe_merge_use_t use,
                                        troupe_context_t *dst_ctx, troupe_context_t *src_ctx,
                                        troupe_context_t **out_ctx, troupe_event_t **out_ev)
{
    bool is_send = dst_ctx->remote_rank >= 0;
    troupe_context_t *local = is_send ? src_ctx : dst_ctx;
    int peer = is_send ? dst_ctx->remote_rank : src_ctx->remote_rank;
    if (local->remote_rank >= 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "device_to_device: both contexts are remote (ranks %d and %d)",
                             src_ctx->remote_rank, dst_ctx->remote_rank);
    if (use == TROUPE_MERGE_STREAMING)
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "device_to_device with rank %d: STREAMING has no remote form (use "
                             "COPY and run the consumer)",
                             peer);
    troupe_remote_transport_t rt;
    if (!s_rt_get(&rt))
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "device_to_device with rank %d: no remote transport is registered "
                             "(troupe_cluster_init, or the cluster was finalized)",
                             peer);
    TROUPE_RETURN_IF_ERROR(s_check_host_ptr(local->dev, "device_to_device with a remote rank"));
    const troupe__carray_t *a = NULL;
    if (is_send || use == TROUPE_MERGE_NO) {
        a = troupe__context_find(local, n);
        if (!a)
            return troupe__context_lacks(
                local, n, is_send ? "device_to_device source" : "device_to_device destination");
    }
    troupe_context_t *child = NULL;
    if (!is_send && out_ctx)
        TROUPE_RETURN_IF_ERROR(troupe__context_derive(
            local, NULL, 0, -1, use == TROUPE_MERGE_NO ? local->merge_node : n, &child));

    troupe_event_t *done = NULL;
    troupe_status_t st = troupe_event_new(is_send ? "remote-send" : "remote-recv", &done);
    s_lend_t *l = NULL;
    if (st == TROUPE_OK)
        st = s_lend_new(local->srec, 1, done, &l);
    troupe_event_release(&done);
    if (st != TROUPE_OK) {
        troupe_context_release(&child);
        return st;
    }
    l->start = s_lend_remote_start;
    l->rt = rt;
    l->is_send = is_send;
    l->peer = peer;
    troupe_tnode_retain(n);
    l->tn = n;
    if (a)
        l->locs[0] = a->loc;
    l->to_merge = !is_send && use == TROUPE_MERGE_COPY;
    l->merge_bytes = (int64_t)n->size_bytes;

    troupe_device_t *dev = local->dev;
    troupe__srec_t *s = local->srec;
    troupe_event_t *ev = NULL;
    pthread_mutex_lock(&dev->lock);
    st = troupe_stream_status(s->stream);
    troupe__entry_t *e = a ? troupe__ledger_find(&dev->ledger, troupe__key_of(a->loc)) : NULL;
    if (st == TROUPE_OK && e)
        st = is_send ? troupe__ledger_before_read(s->stream, e)
                     : troupe__ledger_before_write(s->stream, e);
    if (st != TROUPE_OK) {
        pthread_mutex_unlock(&dev->lock);
        l->handed = true;
        s_lend_dtor(l);
        troupe_context_release(&child);
        return st;
    }
    st = s_lend_schedule(s, l, false, &ev); /* l consumed */
    if (st == TROUPE_OK && e) {
        if (is_send) {
            st = troupe__ledger_note_read(e, s->stream, ev);
        } else {
            troupe__ledger_note_write(e, s->stream, ev);
            troupe__host_array_note_written(e, -1);
            if (troupe_tnode_known_hosted(n))
                st = troupe__host_array_note_device_write(n, s, e->key, ev);
        }
    }
    if (st == TROUPE_OK && !is_send && use == TROUPE_MERGE_COPY) {
        troupe__merge_buffer_schedule_copy(s, n);
    }
    troupe__ledger_tick(&dev->ledger);
    pthread_mutex_unlock(&dev->lock);
    if (st != TROUPE_OK) {
        troupe_event_release(&ev);
        troupe_context_release(&child);
        return st;
    }
    if (out_ev)
        *out_ev = ev;
    else
        troupe_event_release(&ev);
    if (out_ctx)
        *out_ctx = child;
    return TROUPE_OK;
}
