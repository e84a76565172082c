/* troupe — merge buffers: per-stream state, checks, launch resolution and local
 * device_to_device (see merge.h for the rules, merge_impl.h for the calls). */
#include "actors/merge_impl.h"

#include "actors/host_impl.h"
#include "actors/runtime_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/trace_impl.h"
#include "base/status.h"

/* ---- the per-stream state ------------------------------------------------------------------- */

void troupe__merge_buffer_release(troupe__merge_buffer_t *mb, troupe_driver_t *drv, int ordinal)
{
    if (mb->capacity > 0)
        (void)troupe_driver_free_pool(drv, ordinal, mb->pool_id);
    mb->capacity = 0;
    mb->valid = false;
    troupe_tnode_release(&mb->node);
}

void troupe__merge_buffer_sexp(const troupe__merge_buffer_t *mb, troupe__strbuf_t *sb)
{
    char name[64] = "nil";
    if (mb->node)
        troupe_tnode_debug_name(mb->node, name, sizeof name);
    troupe__strbuf_printf(sb, "(merge_buffer (node %s) (mode %s) (capacity %lld))", name,
                          mb->node ? (mb->streaming ? "streaming" : "copy") : "nil",
                          (long long)mb->sched_capacity);
}

troupe_status_t troupe__merge_buffer_ensure(troupe__srec_t *s, int64_t bytes,
                                            troupe_buffer_loc_t *out)
{
    troupe__merge_buffer_t *mb = &s->merge;
    troupe_driver_t *drv = s->dev->backend->drv;
    int ordinal = s->dev->ordinal;
    if (mb->capacity < bytes) {
        if (mb->capacity > 0)
            (void)troupe_driver_free_pool(drv, ordinal, mb->pool_id);
        mb->capacity = 0;
        mb->valid = false;
        TROUPE_RETURN_IF_ERROR(troupe_driver_alloc_pool(drv, ordinal, mb->pool_id, bytes, false));
        mb->capacity = bytes;
    }
    *out = (troupe_buffer_loc_t){mb->pool_id, 0, bytes};
    return TROUPE_OK;
}

void troupe__merge_buffer_set(troupe__srec_t *s, troupe_buffer_loc_t loc)
{
    s->merge.cur = loc;
    s->merge.valid = true;
}

/* Device lock: s's merge buffer is scheduled to hold tn. */
static void s_schedule_node(troupe__merge_buffer_t *mb, troupe_tnode_t *tn, bool streaming)
{
    troupe_tnode_retain(tn);
    troupe_tnode_release(&mb->node);
    mb->node = tn;
    mb->streaming = streaming;
}

void troupe__merge_buffer_schedule_copy(troupe__srec_t *s, troupe_tnode_t *tn)
{
    if (s->merge.sched_capacity < (int64_t)tn->size_bytes)
        s->merge.sched_capacity = (int64_t)tn->size_bytes;
    s_schedule_node(&s->merge, tn, false);
}

/* ---- checks and resolution ------------------------------------------------------------------ */

troupe_status_t troupe__merge_check_link(const troupe_ll_proc_t *proc, const troupe_context_t *ctx)
{
    if (!proc->merge_node || !ctx->merge_node || ctx->merge_node == proc->merge_node)
        return TROUPE_OK;
    char n1[64], n2[64];
    troupe_tnode_debug_name(proc->merge_node, n1, sizeof n1);
    troupe_tnode_debug_name(ctx->merge_node, n2, sizeof n2);
    return troupe__error(TROUPE_FAILED_PRECONDITION,
                         "link %s: merge buffer mismatch: the code reads %s through its merge "
                         "buffer but the context's merge buffer holds %s",
                         proc->name, n1, n2);
}

troupe_status_t troupe__merge_check_run(const troupe_ll_proc_t *proc, troupe__srec_t *s,
                                        troupe__entry_t **out_src)
{
    *out_src = NULL;
    if (!proc->merge_node)
        return TROUPE_OK;
    const troupe__merge_buffer_t *mb = &s->merge;
    if (mb->node != proc->merge_node) {
        char n1[64], n2[64];
        troupe_tnode_debug_name(proc->merge_node, n1, sizeof n1);
        if (mb->node)
            troupe_tnode_debug_name(mb->node, n2, sizeof n2);
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "run %s: merge buffer mismatch: the code reads %s through its "
                             "merge buffer but stream %s's merge buffer holds %s",
                             proc->name, n1, troupe_stream_name(s->stream),
                             mb->node ? n2 : "nothing");
    }
    if (mb->streaming)
        *out_src = troupe__ledger_find(&s->dev->ledger, mb->src);
    return TROUPE_OK;
}

troupe_status_t troupe__merge_resolve(troupe__srec_t *s, const char *name, troupe_karg_t *arg)
{
    if (!s->merge.valid)
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "routine %s: the merge buffer of stream %s holds nothing", name,
                             troupe_stream_name(s->stream));
    arg->buf = s->merge.cur;
    return TROUPE_OK;
}

troupe_status_t troupe__merge_check_consumer(const troupe_tnode_t *n,
                                             const troupe_tnode_t *consumer_merge,
                                             const char *consumer_name)
{
    if (consumer_merge == n)
        return TROUPE_OK;
    char n1[64], n2[64];
    troupe_tnode_debug_name(n, n1, sizeof n1);
    if (consumer_merge)
        troupe_tnode_debug_name(consumer_merge, n2, sizeof n2);
    return troupe__error(TROUPE_FAILED_PRECONDITION,
                         "device_to_device STREAMING of %s: merge buffer mismatch: the consumer "
                         "%s reads %s through its merge buffer",
                         n1, consumer_name, consumer_merge ? n2 : "no merge node");
}

/* ---- local device_to_device ----------------------------------------------------------------- */

/* A work item of dst's stream: NO copies src into dst, COPY src into the merge buffer (grown
 * first), STREAMING points the merge buffer at src. */
typedef struct s_d2d {
    troupe_merge_use_t use;
    troupe__srec_t *srec; /* the destination stream */
    troupe_buffer_loc_t dst, src;
    int src_ordinal; /* the source's device (the destination's, or another of its backend) */
    int64_t size_bytes;
    int32_t node_id; /* for the trace */
} s_d2d_t;

static troupe_status_t s_d2d_run(s_d2d_t *c, troupe_dqueue_t *q);

static troupe_status_t s_d2d_work(void *arg, troupe_dqueue_t *q)
{
    s_d2d_t *c = arg;
    int64_t t0 = troupe__trace_on() ? troupe_now_ns() : 0;
    troupe_status_t st = s_d2d_run(c, q);
    if (t0 != 0) {
        const char *name = c->use == TROUPE_MERGE_NO     ? "d2d copy"
                           : c->use == TROUPE_MERGE_COPY ? "merge buffer copy"
                                                         : "merge buffer streaming";
        troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("bytes", c->size_bytes),
                                   TROUPE__TRACE_NUM("node", c->node_id)};
        troupe__trace_emit(TROUPE__TRACK_THREAD, c->use == TROUPE_MERGE_NO ? "copy" : "merge",
                           name, t0, troupe_now_ns(), a, 2);
    }
    return st;
}

static troupe_status_t s_d2d_run(s_d2d_t *c, troupe_dqueue_t *q)
{
    troupe_driver_t *drv = c->srec->dev->backend->drv;
    int ordinal = c->srec->dev->ordinal;
    switch (c->use) {
    case TROUPE_MERGE_NO:
        return troupe_driver_d2d(drv, q, ordinal, c->dst, c->src_ordinal, c->src, c->size_bytes);
    case TROUPE_MERGE_COPY: {
        troupe_buffer_loc_t mb;
        TROUPE_RETURN_IF_ERROR(troupe__merge_buffer_ensure(c->srec, c->size_bytes, &mb));
        TROUPE_RETURN_IF_ERROR(
            troupe_driver_d2d(drv, q, ordinal, mb, c->src_ordinal, c->src, c->size_bytes));
        troupe__merge_buffer_set(c->srec, mb);
        return TROUPE_OK;
    }
    default:
        troupe__merge_buffer_set(c->srec, c->src);
        return TROUPE_OK;
    }
}

static void s_d2d_dtor(void *arg)
{
    troupe_free(arg);
}

troupe_status_t troupe__merge_d2d_locked(troupe_tnode_t *n, troupe_merge_use_t use,
                                         troupe_context_t *dst, troupe_device_t *src_dev,
                                         const troupe__carray_t *sa, troupe_event_t **out_ev)
{
    troupe_device_t *dev = dst->dev;
    troupe__srec_t *ds = dst->srec;
    troupe_stream_t *stream = ds->stream;
    TROUPE_RETURN_IF_ERROR(troupe_stream_status(stream));
    /* the source array's entry lives in its own device's ledger */
    troupe__entry_t *se = troupe__ledger_find(&src_dev->ledger, troupe__key_of(sa->loc));
    if (se)
        TROUPE_RETURN_IF_ERROR(troupe__ledger_before_read(stream, se));
    troupe__entry_t *de = NULL;
    s_d2d_t *c = troupe_calloc(1, sizeof *c);
    if (!c)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "device_to_device: out of memory");
    *c = (s_d2d_t){use, ds, {0, 0, 0}, sa->loc, src_dev->ordinal, (int64_t)n->size_bytes, n->id};
    if (use == TROUPE_MERGE_NO) {
        c->dst = troupe__context_find(dst, n)->loc;
        de = troupe__ledger_find(&dev->ledger, troupe__key_of(c->dst));
        troupe_status_t st = de ? troupe__ledger_before_write(stream, de) : TROUPE_OK;
        if (st != TROUPE_OK) {
            s_d2d_dtor(c);
            return st;
        }
    }
    TROUPE_RETURN_IF_ERROR(troupe_stream_schedule(stream, s_d2d_work, c, s_d2d_dtor));
    if (use == TROUPE_MERGE_STREAMING) {
        /* No event here: the consumer the caller runs next registers itself as a reader of
         * the source array. */
        s_schedule_node(&ds->merge, n, true);
        ds->merge.src = troupe__key_of(sa->loc);
        return TROUPE_OK;
    }
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_stream_record(stream, &ev));
    troupe_status_t st = se ? troupe__ledger_note_read(se, stream, ev) : TROUPE_OK;
    if (use == TROUPE_MERGE_COPY) {
        troupe__merge_buffer_schedule_copy(ds, n);
    } else if (de) {
        troupe__ledger_note_write(de, stream, ev);
        de->host_gen = se ? se->host_gen : -1;
        de->host_explicit = se && se->host_explicit;
        if (st == TROUPE_OK && troupe_tnode_known_hosted(n))
            st = troupe__host_array_note_device_write(n, ds, de->key, ev);
    }
    troupe__ledger_tick(&dev->ledger);
    if (src_dev != dev)
        troupe__ledger_tick(&src_dev->ledger);
    if (st == TROUPE_OK && out_ev)
        *out_ev = ev;
    else
        troupe_event_release(&ev);
    return st;
}
