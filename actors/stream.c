/* troupe — the stream actor (see stream.h for semantics and the verb table). */
#define _GNU_SOURCE
#include "actors/stream_impl.h"

#include "actors/actor_impl.h"
#include "actors/async_impl.h"
#include "actors/board_impl.h"
#include "actors/event_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/trace_impl.h"
#include "base/vec.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define S_NAME_MAX 48
#define S_DEBUG_TIMEOUT_NS (5LL * 1000000000LL)
#define S_BUSY_POLL_NS (1000000LL) /* a busy actor still looks at its pipe every 1 ms */
#define S_BLOCK_ITEMS 128          /* items per queue block */
#define S_KEEP_BLOCKS 512          /* spare blocks kept after a burst (65536 items) */
#ifndef S_SPIN_NS
#define S_SPIN_NS (20000LL) /* an actor out of work spins this long before sleeping */
#endif


typedef enum s_kind {
    S_RUN = 0,
    S_RECORD,
    S_WAIT,
} s_kind_t;

typedef struct s_item {
    s_kind_t kind;
    troupe_stream_work_fn fn;
    void *arg;
    troupe_stream_dtor_fn dtor;
    troupe_event_t *ev; /* RECORD, WAIT: one reference owned by the item */
} s_item_t;

/* The queue is a chain of fixed blocks: producers (under mu) fill the tail block and link a
 * new one when it is full, then publish the item count `submitted`; the executor reads items
 * up to `submitted` without the lock and hands finished blocks back to the spare list. */
typedef struct s_block {
    _Atomic(struct s_block *) next; /* set (release) before items in it are published */
    s_item_t items[S_BLOCK_ITEMS];
} s_block_t;

typedef struct s_counters {
    uint64_t run, records, waits, dropped, cancelled;
} s_counters_t;

/* Cache-line padding between groups of fields written by different threads (the struct is
 * not line-aligned, so a whole line of padding keeps any two groups apart). */
#define S_CACHE_LINE 64

struct troupe_stream {
    atomic_int_fast32_t refs;     /* user references: the last one shuts the stream down */
    atomic_int_fast32_t mem_refs; /* memory: 1 for the users + inline subscriptions in flight */

    /* Immutable after creation. */
    const troupe_driver_vtable_t *vt;
    troupe_driver_t *drv;
    int ordinal, stream_id;
    bool inline_mode;
    char name[S_NAME_MAX];
    size_t name_len;
    troupe_actor_t *actor; /* threaded */
    troupe_mailbox_t *mb;  /* threaded: event completions and wake-ups */
    troupe__board_slot_t *board; /* the status board's slot (board_impl.h), NULL if full */

    /* Read on every item, rarely written. */
    atomic_bool term_requested;    /* release: stop between items */
    troupe_status_t failed_status; /* written by the executor under mu; TROUPE_OK: healthy */
    char *failed_msg;              /* idem (NULL: status name) */

    char pad_producers[S_CACHE_LINE];
    /* The producers' side, under mu. */
    pthread_mutex_t mu;
    s_block_t *tail_blk; /* the block being filled */
    unsigned tail_idx;   /* next free slot in tail_blk */
    s_block_t *spare;    /* recycled blocks (linked by next) */
    size_t nspare;       /* blocks in spare */
    bool want_work;      /* threaded: the actor is going to sleep; wake it on a push */
    bool draining;       /* inline: a thread holds the executor role */
    bool kick;           /* inline: the parked event may have completed */
    bool terminating;    /* release started: refuse new work */
    atomic_uint_fast64_t record_seq;

    char pad_submitted[S_CACHE_LINE];
    /* Written by producers (under mu, release), read by the executor without the lock. */
    atomic_uint_fast64_t submitted; /* items published */

    char pad_executor[S_CACHE_LINE];
    /* Written by the executor, read by waiting host threads. */
    atomic_uint_fast64_t finished; /* items finished (seq_cst): pending = submitted - finished */
    atomic_int awaiters;           /* threads in troupe_stream_await (under mu, seq_cst) */
    pthread_cond_t idle_cv; /* the stream went idle, or the inline drain role was released */
    char pub_parked[TROUPE_EVENT_NAME_MAX + 1]; /* mu: name of the parked-on event, "" if none */
    s_counters_t pub; /* mu: inline streams' executor counters, published per batch */

    /* Executor-private: the actor thread (threaded) or the holder of the drain role (inline,
     * handed over under mu). */
    troupe_dqueue_t *queue;
    s_block_t *head_blk;    /* the block holding the next item to take */
    unsigned head_idx;      /* its slot */
    uint64_t taken;         /* items taken from the queue */
    uint64_t done;          /* items finished (published to `finished` per batch) */
    troupe_event_t *parked; /* the WAIT's reference while parked */
    int64_t wait_t0_ns;     /* when the WAIT began, when traced (base/trace_impl.h); else 0 */
    uint64_t wait_seq;
    s_counters_t ctr;
};

/* ---- small helpers ------------------------------------------------------------------------- */

static void s_mem_release(troupe_stream_t *s);

/* Under mu: a block for the producers, from the spare list or new (NULL: out of memory). */
static s_block_t *s_block_get_locked(troupe_stream_t *s)
{
    s_block_t *b = s->spare;
    if (b) {
        s->spare = atomic_load_explicit(&b->next, memory_order_relaxed);
        s->nspare--;
    } else if (!(b = (s_block_t *)troupe_malloc(sizeof *b))) {
        return NULL;
    }
    atomic_store_explicit(&b->next, NULL, memory_order_relaxed);
    return b;
}

/* Under mu: keeps `b` as a spare, or frees it beyond S_KEEP_BLOCKS (what a burst grew). */
static void s_block_put_locked(troupe_stream_t *s, s_block_t *b)
{
    if (s->nspare >= S_KEEP_BLOCKS) {
        troupe_free(b);
        return;
    }
    atomic_store_explicit(&b->next, s->spare, memory_order_relaxed);
    s->spare = b;
    s->nspare++;
}

/* Under mu: appends `it` and publishes it to the executor. */
static troupe_status_t s_queue_append_locked(troupe_stream_t *s, const s_item_t *it)
{
    if (s->tail_idx == S_BLOCK_ITEMS) {
        s_block_t *b = s_block_get_locked(s);
        if (!b)
            return TROUPE_RESOURCE_EXHAUSTED;
        atomic_store_explicit(&s->tail_blk->next, b, memory_order_release);
        s->tail_blk = b;
        s->tail_idx = 0;
    }
    s->tail_blk->items[s->tail_idx++] = *it;
    uint64_t n = atomic_load_explicit(&s->submitted, memory_order_relaxed);
    atomic_store_explicit(&s->submitted, n + 1, memory_order_release);
    return TROUPE_OK;
}

/* Executor: items published and not yet taken. */
static uint64_t s_queue_available(troupe_stream_t *s)
{
    return atomic_load_explicit(&s->submitted, memory_order_acquire) - s->taken;
}

/* Executor: takes the next item (one must be available); finished blocks go back to the
 * spare list. */
static void s_queue_take(troupe_stream_t *s, s_item_t *out)
{
    if (s->head_idx == S_BLOCK_ITEMS) {
        s_block_t *old = s->head_blk;
        s->head_blk = atomic_load_explicit(&old->next, memory_order_acquire);
        s->head_idx = 0;
        pthread_mutex_lock(&s->mu);
        s_block_put_locked(s, old);
        pthread_mutex_unlock(&s->mu);
    }
    *out = s->head_blk->items[s->head_idx++];
    s->taken++;
}

static void s_item_drop(s_item_t *it)
{
    if (it->kind == S_RUN && it->dtor)
        it->dtor(it->arg);
    if (it->ev)
        troupe_event_release(&it->ev);
}

/* Reports the stream's failure (caller holds mu) as this thread's last error. */
static troupe_status_t s_failure_locked(troupe_stream_t *s)
{
    return troupe__error(s->failed_status, "%s",
                         s->failed_msg ? s->failed_msg : troupe_status_str(s->failed_status));
}

/* Executor: records the stream's first failure. */
static void s_fail(troupe_stream_t *s, troupe_status_t st, const char *msg)
{
    pthread_mutex_lock(&s->mu);
    bool first = s->failed_status == TROUPE_OK;
    if (first) {
        s->failed_status = st;
        s->failed_msg = troupe_strdup(msg);
    }
    pthread_mutex_unlock(&s->mu);
    if (first)
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_ACTORS, "stream %s failed: %s: %s", s->name,
                   troupe_status_str(st), msg);
}

static void s_fail_from_event(troupe_stream_t *s, troupe_event_t *ev)
{
    char *emsg = troupe_event_copy_message(ev);
    troupe__strbuf_t b = TROUPE__STRBUF_INIT;
    troupe__strbuf_printf(&b, "%s: waited on %s: %s", s->name, troupe_event_name(ev),
                          emsg ? emsg : troupe_status_str(troupe_event_status(ev)));
    s_fail(s, troupe_event_status(ev),
           b.failed ? troupe_status_str(troupe_event_status(ev)) : troupe__strbuf_cstr(&b));
    troupe__strbuf_reset(&b);
    troupe_free(emsg);
}

/* Items scheduled and not finished (queued, running, or a parked WAIT). Any thread. */
static uint64_t s_pending(troupe_stream_t *s)
{
    /* finished first: submitted only grows, so the difference never goes negative. */
    uint64_t fin = atomic_load_explicit(&s->finished, memory_order_seq_cst);
    return atomic_load_explicit(&s->submitted, memory_order_seq_cst) - fin;
}

/* Executor: publishes progress; wakes await()ers when the stream went idle. The seq_cst store
 * of `finished` and load of `awaiters` pair with troupe_stream_await's increment and load. */
static void s_account(troupe_stream_t *s)
{
    if (atomic_load_explicit(&s->finished, memory_order_relaxed) == s->done)
        return; /* nothing finished since the last call */
    atomic_store_explicit(&s->finished, s->done, memory_order_seq_cst);
    if (atomic_load_explicit(&s->awaiters, memory_order_seq_cst) > 0 &&
        atomic_load_explicit(&s->submitted, memory_order_seq_cst) == s->done) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->idle_cv);
        pthread_mutex_unlock(&s->mu);
    }
}

static void s_publish_parked(troupe_stream_t *s)
{
    troupe__board_wait_event(s->board, s->parked);
    pthread_mutex_lock(&s->mu);
    snprintf(s->pub_parked, sizeof s->pub_parked, "%s",
             s->parked ? troupe_event_name(s->parked) : "");
    pthread_mutex_unlock(&s->mu);
}

/* Executor: the trace event of a WAIT on `ev` that began at s->wait_t0_ns (traced only). */
static void s_trace_wait(troupe_stream_t *s, troupe_event_t *ev)
{
    if (s->wait_t0_ns == 0)
        return;
    char name[TROUPE__TRACE_NAME_MAX];
    snprintf(name, sizeof name, "wait %s", troupe_event_name(ev));
    troupe__trace_arg_t a[] = {
        TROUPE__TRACE_STR("status", troupe_status_str(troupe_event_status(ev)))};
    troupe__trace_emit(TROUPE__TRACK_THREAD, "wait", name, s->wait_t0_ns, troupe_now_ns(), a, 1);
    s->wait_t0_ns = 0;
}

/* ---- the executor -------------------------------------------------------------------------- */

static void s_inline_event_cb(void *user, troupe_event_t *ev, troupe_status_t status);

/* Executor: if the parked-on event completed, leaves the parked state (failing the stream if the
 * event failed) and returns true; false while it is still pending. */
static bool s_try_unpark(troupe_stream_t *s)
{
    troupe_event_state_t state = troupe_event_state(s->parked);
    if (state == TROUPE_EVENT_PENDING)
        return false;
    if (state == TROUPE_EVENT_FAILED)
        s_fail_from_event(s, s->parked);
    s_trace_wait(s, s->parked);
    troupe_event_release(&s->parked);
    s_publish_parked(s);
    s->done++; /* the WAIT item is finished only now */
    return true;
}

static void s_exec_run(troupe_stream_t *s, s_item_t *it)
{
    if (s->failed_status != TROUPE_OK) {
        s->ctr.dropped++;
    } else {
        troupe_clear_error();
        troupe_status_t st = it->fn(it->arg, s->queue);
        s->ctr.run++;
        if (st != TROUPE_OK) {
            char msg[1100];
            const char *err = troupe_last_error();
            snprintf(msg, sizeof msg, "%s: %s", s->name, err[0] ? err : troupe_status_str(st));
            s_fail(s, st, msg);
        }
    }
    if (it->dtor)
        it->dtor(it->arg);
}

/* The stream's queue completes work later (cuda): a driver event completes the RECORD. */
static bool s_async(const troupe_stream_t *s)
{
    return s->vt != NULL && s->vt->async_queues;
}

static void s_exec_record(troupe_stream_t *s, s_item_t *it)
{
    s->ctr.records++;
    if (s_async(s) && s->failed_status == TROUPE_OK) {
        troupe_status_t st = troupe__async_record(s->drv, s->queue, s->ordinal, it->ev);
        if (st != TROUPE_OK) {
            char msg[1100];
            snprintf(msg, sizeof msg, "%s: record: %s", s->name, troupe_last_error());
            s_fail(s, st, msg);
            troupe_event_complete(it->ev, st, msg);
        }
        troupe_event_release(&it->ev);
        return;
    }
    /* failed_status/failed_msg are only written by this executor: safe to read unlocked. */
    troupe_event_complete(it->ev, s->failed_status, s->failed_msg);
    troupe_event_release(&it->ev);
}

/* Returns true when the queue parked (the WAIT stays pending until s_try_unpark). */
static bool s_exec_wait(troupe_stream_t *s, s_item_t *it)
{
    s->ctr.waits++;
    if (s->failed_status != TROUPE_OK) {
        troupe_event_release(&it->ev);
        return false;
    }
    s->wait_t0_ns = troupe__trace_on() ? troupe_now_ns() : 0;
    /* An event of this device's queues: the device orders the work (no host round trip). */
    if (s_async(s) && troupe__event_state_quiet(it->ev) == TROUPE_EVENT_PENDING &&
        troupe__async_wait(s->drv, s->queue, s->ordinal, it->ev)) {
        s_trace_wait(s, it->ev);
        troupe_event_release(&it->ev);
        return false;
    }
    /* A lazily started producer (a transport collective) runs on this thread when it is idle:
     * the queue would park on it anyway, and a hand-off would cost two wake-ups. */
    troupe__board_wait_event(s->board, it->ev);
    troupe__event_drive(it->ev, troupe_config_timeout_ns());
    troupe_event_state_t state = troupe_event_state(it->ev);
    if (state != TROUPE_EVENT_PENDING) {
        troupe__board_wait_event(s->board, NULL);
        if (state == TROUPE_EVENT_FAILED)
            s_fail_from_event(s, it->ev);
        s_trace_wait(s, it->ev);
        troupe_event_release(&it->ev);
        return false;
    }
    /* Park the queue (not the actor) until the event completes. */
    s->parked = it->ev;
    it->ev = NULL;
    s_publish_parked(s);
    troupe_status_t st;
    if (s->inline_mode) {
        atomic_fetch_add_explicit(&s->mem_refs, 1, memory_order_relaxed);
        st = troupe_event_subscribe(s->parked, s_inline_event_cb, s);
        if (st != TROUPE_OK)
            s_mem_release(s);
    } else {
        st = troupe_event_subscribe_mailbox(s->parked, s->mb, ++s->wait_seq);
    }
    if (st != TROUPE_OK) {
        char msg[1100];
        snprintf(msg, sizeof msg, "%s: cannot wait on %s: %s", s->name,
                 troupe_event_name(s->parked), troupe_last_error());
        s_fail(s, st, msg);
        troupe_event_release(&s->parked);
        s_publish_parked(s);
        return false;
    }
    return true;
}

/* Executor: runs the items available now (one batch) until none of them is left, the queue is
 * parked on a pending event, or shutdown was requested. */
static void s_run_batch(troupe_stream_t *s)
{
    if (s->parked && !s_try_unpark(s))
        return;
    for (uint64_t n = s_queue_available(s); n > 0; n--) {
        if (atomic_load_explicit(&s->term_requested, memory_order_relaxed))
            return;
        s_item_t it;
        s_queue_take(s, &it);
        switch (it.kind) {
        case S_RUN:
            s_exec_run(s, &it);
            break;
        case S_RECORD:
            s_exec_record(s, &it);
            break;
        case S_WAIT:
            if (s_exec_wait(s, &it))
                return; /* parked: counted when it unparks */
            break;
        }
        s->done++;
    }
}

/* Executor at shutdown: cancels everything queued, parked or not yet taken. */
static void s_cancel_all(troupe_stream_t *s)
{
    char msg[128];
    snprintf(msg, sizeof msg, "%s: stream destroyed with this work pending", s->name);
    pthread_mutex_lock(&s->mu);
    s->terminating = true; /* nobody pushes any more: `submitted` is final */
    pthread_mutex_unlock(&s->mu);
    if (s->parked) {
        troupe_event_release(&s->parked);
        s_publish_parked(s);
        s->ctr.cancelled++;
        s->done++;
    }
    for (uint64_t n = s_queue_available(s); n > 0; n--) {
        s_item_t it;
        s_queue_take(s, &it);
        if (it.kind == S_RECORD)
            troupe_event_complete(it.ev, TROUPE_CANCELLED, msg);
        s_item_drop(&it);
        s->ctr.cancelled++;
        s->done++;
    }
    s_account(s);
}

/* ---- inline mode --------------------------------------------------------------------------- */

/* Holder of the drain role: runs until idle or parked, then gives the role up. */
static void s_inline_drain(troupe_stream_t *s)
{
    for (;;) {
        s_run_batch(s);
        s_account(s);
        pthread_mutex_lock(&s->mu);
        s->pub = s->ctr; /* inline debug info reads these under mu */
        bool stop = atomic_load_explicit(&s->term_requested, memory_order_relaxed);
        if (!stop && s->parked) {
            stop = !s->kick;
            s->kick = false;
        } else if (!stop) {
            stop = s_queue_available(s) == 0;
        }
        if (stop) {
            s->draining = false;
            pthread_cond_broadcast(&s->idle_cv);
        }
        pthread_mutex_unlock(&s->mu);
        if (stop)
            return;
    }
}

static void s_inline_event_cb(void *user, troupe_event_t *ev, troupe_status_t status)
{
    (void)ev;
    (void)status;
    troupe_stream_t *s = (troupe_stream_t *)user;
    bool drain = false;
    pthread_mutex_lock(&s->mu);
    if (!s->terminating) {
        s->kick = true;
        if (!s->draining) {
            s->draining = true;
            drain = true;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (drain)
        s_inline_drain(s);
    s_mem_release(s);
}

/* ---- requests (pipe verbs; also answered inline) ------------------------------------------ */

static troupe_status_t s_debug_sexp(troupe_stream_t *s, char **out);

static zmsg_t *s_reply(uint64_t id, troupe_status_t st)
{
    zmsg_t *reply = NULL;
    if (troupe_msg_build(&reply, "8S", id, st) != TROUPE_OK)
        return NULL;
    return reply;
}

static zmsg_t *s_invalid(troupe_stream_t *s, uint64_t id, const char *verb)
{
    TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_ACTORS, "stream %s: bad message (%s): %s", s->name,
               verb[0] ? verb : "?", troupe_last_error());
    return s_reply(id, TROUPE_INVALID_ARGUMENT);
}

static void s_fn_from_ptr(void *p, troupe_stream_work_fn *fn)
{
    memcpy(fn, &p, sizeof *fn);
}

static void s_dtor_from_ptr(void *p, troupe_stream_dtor_fn *fn)
{
    memcpy(fn, &p, sizeof *fn);
}

/* Handles one request of the verb table and returns its reply (NULL when out of memory, or for
 * $TERM which has none). Used by the actor for pipe messages and by troupe__stream_request for
 * inline streams; *terminate is set for $TERM. */
static zmsg_t *s_dispatch(troupe_stream_t *s, zmsg_t *msg, bool *terminate)
{
    char verb[TROUPE_MSG_VERB_MAX + 1];
    uint64_t id = 0;
    zframe_t *f0 = zmsg_first(msg);
    if (terminate && zmsg_size(msg) == 1 && f0 && zframe_streq(f0, TROUPE_VERB_TERM)) {
        *terminate = true;
        return NULL;
    }
    if (troupe_msg_head(msg, verb, sizeof verb, &id) != TROUPE_OK)
        return s_invalid(s, id, verb);

    if (strcmp(verb, TROUPE_STREAM_VERB_RUN) == 0) {
        void *fnp = NULL, *arg = NULL, *dtorp = NULL;
        if (troupe_msg_decode(msg, "s8ppp", NULL, NULL, &fnp, &arg, &dtorp) != TROUPE_OK)
            return s_invalid(s, id, verb);
        if (!fnp) {
            troupe__error(TROUPE_INVALID_ARGUMENT, "RUN: NULL function");
            return s_invalid(s, id, verb);
        }
        troupe_stream_work_fn fn;
        troupe_stream_dtor_fn dtor;
        s_fn_from_ptr(fnp, &fn);
        s_dtor_from_ptr(dtorp, &dtor);
        return s_reply(id, troupe_stream_schedule(s, fn, arg, dtor));
    }
    if (strcmp(verb, TROUPE_STREAM_VERB_RECORD) == 0) {
        if (troupe_msg_decode(msg, "s8", NULL, NULL) != TROUPE_OK)
            return s_invalid(s, id, verb);
        troupe_event_t *ev = NULL;
        troupe_status_t st = troupe_stream_record(s, &ev);
        zmsg_t *reply = NULL;
        if (troupe_msg_build(&reply, "8Sp", id, st, (void *)ev) != TROUPE_OK) {
            troupe_event_release(&ev);
            return NULL;
        }
        return reply; /* the reference in `ev` travels with the reply */
    }
    if (strcmp(verb, TROUPE_STREAM_VERB_WAIT) == 0) {
        void *evp = NULL;
        if (troupe_msg_decode(msg, "s8p", NULL, NULL, &evp) != TROUPE_OK)
            return s_invalid(s, id, verb);
        if (!evp) {
            troupe__error(TROUPE_INVALID_ARGUMENT, "WAIT: NULL event");
            return s_invalid(s, id, verb);
        }
        troupe_event_t *ev = (troupe_event_t *)evp; /* adopted */
        troupe_status_t st = troupe_stream_wait_for(s, ev);
        troupe_event_release(&ev);
        return s_reply(id, st);
    }
    if (strcmp(verb, TROUPE_STREAM_VERB_DEBUG) == 0) {
        if (troupe_msg_decode(msg, "s8", NULL, NULL) != TROUPE_OK)
            return s_invalid(s, id, verb);
        char *sexp = NULL;
        troupe_status_t st = s_debug_sexp(s, &sexp);
        zmsg_t *reply = NULL;
        if (troupe_msg_build(&reply, "8Ss", id, st, sexp ? sexp : "") != TROUPE_OK)
            reply = NULL;
        troupe_free(sexp);
        return reply;
    }
    bool done = strcmp(verb, TROUPE_VERB_EV_DONE) == 0;
    if (done || strcmp(verb, TROUPE_VERB_EV_FAIL) == 0) {
        void *evp = NULL;
        if (troupe_msg_decode(msg, done ? "s8p" : "s8pS", NULL, NULL, &evp, NULL) != TROUPE_OK)
            return s_invalid(s, id, verb);
        troupe_event_t *ev = (troupe_event_t *)evp; /* adopted; the executor re-reads its state */
        troupe_event_release(&ev);
        if (s->inline_mode) {
            /* Same as a subscription firing: let the executor look at its parked event. */
            atomic_fetch_add_explicit(&s->mem_refs, 1, memory_order_relaxed);
            s_inline_event_cb(s, NULL, TROUPE_OK);
        }
        return s_reply(id, TROUPE_OK);
    }
    troupe__error(TROUPE_INVALID_ARGUMENT, "unknown verb %s", verb);
    return s_invalid(s, id, verb);
}

/* ---- threaded mode: the actor -------------------------------------------------------------- */

static troupe_status_t s_queue_create(troupe_stream_t *s)
{
    if (!s->drv)
        return TROUPE_OK; /* a host-only stream */
    troupe_status_t st = troupe_driver_queue_create(s->drv, s->ordinal, &s->queue);
    if (st != TROUPE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        return troupe__error(st, "stream %s: queue_create failed: %s", s->name, msg);
    }
    return TROUPE_OK;
}

static void s_queue_destroy(troupe_stream_t *s)
{
    troupe_driver_queue_destroy(s->drv, s->queue);
    s->queue = NULL;
}

/* A mailbox notification: EV_DONE/EV_FAIL (the event reference is adopted and dropped; the
 * executor re-reads the parked event's state). */
static void s_handle_note(troupe_stream_t *s, zmsg_t *msg)
{
    char verb[TROUPE_MSG_VERB_MAX + 1];
    uint64_t id;
    void *evp = NULL;
    troupe_status_t st = troupe_msg_head(msg, verb, sizeof verb, &id);
    if (st == TROUPE_OK) {
        if (strcmp(verb, TROUPE_VERB_EV_DONE) == 0)
            st = troupe_msg_decode(msg, "s8p", NULL, NULL, &evp);
        else if (strcmp(verb, TROUPE_VERB_EV_FAIL) == 0)
            st = troupe_msg_decode(msg, "s8pS", NULL, NULL, &evp, NULL);
        else
            st = troupe__error(TROUPE_INVALID_ARGUMENT, "unknown notification %s", verb);
    }
    if (st != TROUPE_OK) {
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_ACTORS, "stream %s: bad notification: %s", s->name,
                   troupe_last_error());
    } else {
        troupe_event_t *ev = (troupe_event_t *)evp;
        troupe_event_release(&ev);
    }
    zmsg_destroy(&msg);
}

/* Handles what the poller returned; sets *terminated on $TERM or a dead context. */
static void s_handle_ready(troupe_stream_t *s, zsock_t *pipe, zpoller_t *poller, void *which,
                           bool *terminated)
{
    if (which == pipe) {
        zmsg_t *msg = troupe_actor_recv(pipe);
        if (!msg) {
            *terminated = true;
            return;
        }
        zmsg_t *reply = s_dispatch(s, msg, terminated);
        zmsg_destroy(&msg);
        if (reply && troupe_actor_send(pipe, &reply) != TROUPE_OK)
            TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_ACTORS, "stream %s: %s", s->name,
                       troupe_last_error());
    } else if (which == troupe_mailbox_poll_handle(s->mb)) {
        troupe_mailbox_clear(s->mb);
        zmsg_t *msg;
        while ((msg = troupe_mailbox_take(s->mb)))
            s_handle_note(s, msg);
    } else if (zpoller_terminated(poller)) {
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_ACTORS, "stream %s: ZeroMQ context terminated",
                   s->name);
        *terminated = true;
    }
}

static void s_actor(zsock_t *pipe, void *args)
{
    troupe_stream_t *s = (troupe_stream_t *)args;
    zpoller_t *poller = zpoller_new(pipe, troupe_mailbox_poll_handle(s->mb), NULL);
    troupe_status_t st =
        poller ? s_queue_create(s) : troupe__error(TROUPE_TRANSPORT_ERROR, "zpoller_new failed");
    troupe_actor_ready(pipe, st);
    if (st != TROUPE_OK) {
        zpoller_destroy(&poller);
        return;
    }
    zpoller_set_nonstop(poller, true);
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_ACTORS, "stream %s: actor started", s->name);

    bool terminated = false;
    int64_t last_poll = troupe_now_ns();
    while (!terminated) {
        /* Run everything runnable, looking at the pipe now and then when busy. */
        bool spun = false;
        for (;;) {
            s_run_batch(s);
            s_account(s);
            bool term = atomic_load_explicit(&s->term_requested, memory_order_relaxed);
            bool runnable = !term && !s->parked && s_queue_available(s) > 0;
            bool idle = !runnable && !term && !s->parked;
            /* Out of work: spin briefly for more before announcing sleep (pipelined producers
             * then never pay a wake-up), once per wake cycle. */
            if (idle && !spun) {
                spun = true;
                troupe__spin_t spin = TROUPE__SPIN_INIT;
                while (s_queue_available(s) == 0 &&
                       !atomic_load_explicit(&s->term_requested, memory_order_relaxed) &&
                       troupe__spin_step(&spin, S_SPIN_NS))
                    ;
                if (s_queue_available(s) != 0)
                    spun = false; /* found work: allow another spin after it */
                continue;
            }
            if (idle) {
                /* Announce sleep; a producer that publishes after this (under mu) wakes us. */
                pthread_mutex_lock(&s->mu);
                s->want_work = s_queue_available(s) == 0;
                runnable = !s->want_work;
                pthread_mutex_unlock(&s->mu);
                spun = !runnable;
            }
            if (!runnable)
                break;
            int64_t now = troupe_now_ns();
            if (now - last_poll > S_BUSY_POLL_NS) {
                last_poll = now;
                void *which = zpoller_wait(poller, 0);
                if (which)
                    s_handle_ready(s, pipe, poller, which, &terminated);
                if (terminated)
                    break;
            }
        }
        if (terminated)
            break;
        void *which = zpoller_wait(poller, -1);
        last_poll = troupe_now_ns();
        if (which)
            s_handle_ready(s, pipe, poller, which, &terminated);
        else if (zpoller_terminated(poller))
            terminated = true;
    }
    s_cancel_all(s);
    s_queue_destroy(s);
    /* Refuse later notifications (their senders drop their own references) and adopt the
     * references of those already queued. */
    troupe_mailbox_close(s->mb);
    zmsg_t *note;
    while ((note = troupe_mailbox_take(s->mb)))
        s_handle_note(s, note);
    zpoller_destroy(&poller);
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_ACTORS, "stream %s: actor stopped", s->name);
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

static void s_free(troupe_stream_t *s)
{
    troupe__board_release(&s->board);
    troupe_mailbox_release(&s->mb);
    /* The executor took every item (s_cancel_all): the chain from head_blk is items-free. */
    for (s_block_t *b = s->head_blk, *next; b; b = next) {
        next = atomic_load_explicit(&b->next, memory_order_relaxed);
        troupe_free(b);
    }
    for (s_block_t *b = s->spare, *next; b; b = next) {
        next = atomic_load_explicit(&b->next, memory_order_relaxed);
        troupe_free(b);
    }
    troupe_free(s->failed_msg);
    pthread_cond_destroy(&s->idle_cv);
    pthread_mutex_destroy(&s->mu);
    troupe_free(s);
}

static void s_mem_release(troupe_stream_t *s)
{
    if (atomic_fetch_sub_explicit(&s->mem_refs, 1, memory_order_acq_rel) == 1)
        s_free(s);
}

troupe_status_t troupe__stream_actor_new(const troupe_driver_vtable_t *vt, troupe_driver_t *drv,
                                         int ordinal, int stream_id, bool inline_mode,
                                         troupe_stream_t **out)
{
    troupe_status_t st = TROUPE_OK;
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "stream_actor_new: NULL out");
    *out = NULL;
    if ((vt && !drv) || ordinal < 0 || stream_id < 0)
        return troupe__error(
            TROUPE_INVALID_ARGUMENT, "stream_actor_new: %s (ordinal %d, stream %d)",
            vt && !drv ? "driver vtable without a driver" : "negative index", ordinal, stream_id);
    troupe_stream_t *s = (troupe_stream_t *)troupe_calloc(1, sizeof *s);
    if (!s)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "stream_actor_new: out of memory");
    atomic_init(&s->refs, 1);
    atomic_init(&s->mem_refs, 1);
    atomic_init(&s->term_requested, false);
    atomic_init(&s->record_seq, 0);
    atomic_init(&s->submitted, 0);
    atomic_init(&s->finished, 0);
    atomic_init(&s->awaiters, 0);
    s->vt = vt;
    s->drv = drv;
    s->ordinal = ordinal;
    s->stream_id = stream_id;
    s->inline_mode = inline_mode;
    snprintf(s->name, sizeof s->name, "%s:%d:%d", vt && vt->name ? vt->name : "host", ordinal,
             stream_id);
    s->name_len = strlen(s->name);
    s->board = troupe__board_claim(TROUPE__BOARD_STREAM, s->name, &s->submitted, &s->finished);
    s->failed_status = TROUPE_OK;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle_cv, &attr);
    pthread_condattr_destroy(&attr);
    s->head_blk = s->tail_blk = (s_block_t *)troupe_malloc(sizeof *s->head_blk);
    if (!s->head_blk) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "stream_actor_new: out of memory");
        goto cleanup_stream;
    }
    atomic_init(&s->head_blk->next, NULL);

    if (inline_mode) {
        st = s_queue_create(s);
        if (st != TROUPE_OK)
            goto cleanup_stream;
    } else {
        st = troupe_mailbox_new(&s->mb);
        if (st != TROUPE_OK)
            goto cleanup_stream;
        st = troupe_actor_new(s->name, s_actor, s, &s->actor);
        if (st != TROUPE_OK)
            goto cleanup_stream;
    }
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_ACTORS, "stream %s created (%s)", s->name,
               inline_mode ? "inline" : "threaded");
    *out = s;
    return TROUPE_OK;

cleanup_stream:
    s_free(s);
    return st;
}

void troupe_stream_retain(troupe_stream_t *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void troupe_stream_release(troupe_stream_t **s_p)
{
    if (!s_p || !*s_p)
        return;
    troupe_stream_t *s = *s_p;
    *s_p = NULL;
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_lock(&s->mu);
    s->terminating = true;
    atomic_store_explicit(&s->term_requested, true, memory_order_relaxed);
    if (s->inline_mode) {
        while (s->draining)
            pthread_cond_wait(&s->idle_cv, &s->mu);
        s->draining = true;
    }
    pthread_mutex_unlock(&s->mu);
    if (s->inline_mode) {
        s_cancel_all(s);
        s_queue_destroy(s);
        pthread_mutex_lock(&s->mu);
        s->draining = false;
        pthread_mutex_unlock(&s->mu);
    } else {
        troupe_actor_destroy(&s->actor); /* $TERM: the actor cancels and destroys its queue */
        troupe_mailbox_close(s->mb);
    }
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_ACTORS, "stream %s destroyed", s->name);
    s_mem_release(s);
}

void troupe_stream_destroy(troupe_stream_t **s_p)
{
    troupe_stream_release(s_p);
}

/* ---- scheduling ---------------------------------------------------------------------------- */

/* Appends `it` (ownership moves to the stream on success). */
static troupe_status_t s_push(troupe_stream_t *s, const s_item_t *it)
{
    bool wake = false, drain = false;
    pthread_mutex_lock(&s->mu);
    if (s->failed_status != TROUPE_OK) {
        troupe_status_t st = s_failure_locked(s);
        pthread_mutex_unlock(&s->mu);
        return st;
    }
    if (s->terminating) {
        pthread_mutex_unlock(&s->mu);
        return troupe__error(TROUPE_CANCELLED, "stream %s is shutting down", s->name);
    }
    if (s_queue_append_locked(s, it) != TROUPE_OK) {
        pthread_mutex_unlock(&s->mu);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "stream %s: queue: out of memory", s->name);
    }
    if (s->inline_mode) {
        if (!s->draining) {
            s->draining = true;
            drain = true;
        }
    } else if (s->want_work) {
        s->want_work = false;
        wake = true;
    }
    pthread_mutex_unlock(&s->mu);
    if (wake)
        troupe_mailbox_wake(s->mb);
    if (drain)
        s_inline_drain(s);
    return TROUPE_OK;
}

troupe_status_t troupe_stream_schedule(troupe_stream_t *s, troupe_stream_work_fn fn, void *arg,
                                       troupe_stream_dtor_fn dtor)
{
    if (!s || !fn) {
        if (dtor)
            dtor(arg);
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_stream_schedule: NULL %s",
                             s ? "function" : "stream");
    }
    s_item_t it = {S_RUN, fn, arg, dtor, NULL};
    troupe_status_t st = s_push(s, &it);
    if (st != TROUPE_OK && dtor)
        dtor(arg);
    return st;
}

troupe_status_t troupe_stream_record(troupe_stream_t *s, troupe_event_t **out)
{
    if (!s || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_stream_record: NULL argument");
    *out = NULL;
    /* "<stream>#<n>", formatted by hand: snprintf cost more than the rest of a RECORD. */
    char name[S_NAME_MAX + 24];
    uint64_t n = atomic_fetch_add_explicit(&s->record_seq, 1, memory_order_relaxed) + 1;
    char digits[20];
    size_t nd = 0, len = s->name_len;
    do {
        digits[nd++] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    memcpy(name, s->name, len);
    name[len++] = '#';
    while (nd > 0)
        name[len++] = digits[--nd];
    name[len] = '\0';
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_event_new(name, &ev));
    if (s_async(s))
        troupe__async_prepare(ev);
    troupe_event_t *item_ref = ev;
    troupe_event_retain(item_ref); /* the item's reference */
    s_item_t it = {S_RECORD, NULL, NULL, NULL, item_ref};
    troupe_status_t st = s_push(s, &it);
    if (st != TROUPE_OK) {
        troupe_event_release(&item_ref);
        troupe_event_release(&ev);
        return st;
    }
    *out = ev;
    return TROUPE_OK;
}

troupe_status_t troupe_stream_all_work(troupe_stream_t *s, troupe_event_t **out)
{
    if (!s || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_stream_all_work: NULL argument");
    *out = NULL;
    pthread_mutex_lock(&s->mu);
    /* On an asynchronous queue the device may still be busy when the actor is idle. */
    bool idle = s_pending(s) == 0 && s->failed_status == TROUPE_OK && !s->terminating &&
                !s_async(s);
    pthread_mutex_unlock(&s->mu);
    if (idle) {
        char name[TROUPE_EVENT_NAME_MAX + 1];
        snprintf(name, sizeof name, "%s#idle", s->name);
        return troupe_event_new_completed(name, TROUPE_OK, NULL, out);
    }
    return troupe_stream_record(s, out);
}

troupe_status_t troupe_stream_wait_for(troupe_stream_t *s, troupe_event_t *ev)
{
    if (!s || !ev)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_stream_wait_for: NULL %s",
                             s ? "event" : "stream");
    if (troupe__event_state_quiet(ev) == TROUPE_EVENT_DONE) {
        /* Nothing to wait for, but a failed stream still refuses new work. */
        troupe_status_t st = TROUPE_OK;
        pthread_mutex_lock(&s->mu);
        if (s->failed_status != TROUPE_OK)
            st = s_failure_locked(s);
        pthread_mutex_unlock(&s->mu);
        return st;
    }
    troupe_event_retain(ev);
    s_item_t it = {S_WAIT, NULL, NULL, NULL, ev};
    troupe_status_t st = s_push(s, &it);
    if (st != TROUPE_OK)
        troupe_event_release(&ev);
    return st;
}

/* ---- host waits and queries ---------------------------------------------------------------- */

troupe_status_t troupe_stream_await(troupe_stream_t *s, int64_t timeout_ns)
{
    if (!s)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_stream_await: NULL stream");
    int64_t deadline = troupe_deadline_after(timeout_ns);
    troupe_status_t st = TROUPE_OK;
    if (s_async(s)) {
        /* The device's work too: an event after everything scheduled, synced (its failure is
         * the device's error on this stream). */
        troupe_event_t *ev = NULL;
        st = troupe_stream_record(s, &ev);
        if (st == TROUPE_OK) {
            int64_t left = troupe_deadline_remaining(deadline);
            st = troupe_event_sync(ev, deadline == TROUPE_TIMEOUT_INFINITE ? timeout_ns : left);
        }
        troupe_event_release(&ev);
        if (st != TROUPE_OK && st != TROUPE_CANCELLED) /* CANCELLED: shutting down */
            return st;
        st = TROUPE_OK;
    }
    troupe__board_host_wait(NULL, s->name);
    pthread_mutex_lock(&s->mu);
    atomic_fetch_add_explicit(&s->awaiters, 1, memory_order_seq_cst);
    uint64_t pending;
    while ((pending = s_pending(s)) > 0) {
        if (deadline == TROUPE_TIMEOUT_INFINITE) {
            pthread_cond_wait(&s->idle_cv, &s->mu);
            continue;
        }
        if (troupe_deadline_remaining(deadline) == 0 && !troupe__board_extend_deadline(&deadline))
            break;
        struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000LL),
                              .tv_nsec = (long)(deadline % 1000000000LL)};
        pthread_cond_timedwait(&s->idle_cv, &s->mu, &ts);
    }
    atomic_fetch_sub_explicit(&s->awaiters, 1, memory_order_seq_cst);
    if (pending > 0) {
        st = troupe__error(TROUPE_DEADLINE_EXCEEDED,
                           "stream %s not idle after %.3f ms: %llu item(s) pending%s%s", s->name,
                           (double)(timeout_ns < 0 ? 0 : timeout_ns) / 1e6,
                           (unsigned long long)pending,
                           s->pub_parked[0] ? ", parked on event " : "", s->pub_parked);
    } else if (s->failed_status != TROUPE_OK) {
        st = s_failure_locked(s);
    }
    pthread_mutex_unlock(&s->mu);
    if (pending > 0)
        troupe__board_deadline_hit(st);
    troupe__board_host_done();
    return st;
}

bool troupe_stream_is_idle(troupe_stream_t *s)
{
    return s_pending(s) == 0;
}

troupe_status_t troupe_stream_status(troupe_stream_t *s)
{
    pthread_mutex_lock(&s->mu);
    troupe_status_t st = s->failed_status != TROUPE_OK ? s_failure_locked(s) : TROUPE_OK;
    pthread_mutex_unlock(&s->mu);
    return st;
}

static troupe_status_t s_debug_sexp(troupe_stream_t *s, char **out)
{
    troupe__strbuf_t b = TROUPE__STRBUF_INIT;
    pthread_mutex_lock(&s->mu);
    /* Threaded streams answer on their actor thread, which owns ctr; inline ones read the
     * copy published under mu. */
    const s_counters_t *c = s->inline_mode ? &s->pub : &s->ctr;
    troupe__strbuf_puts(&b, "(stream (name ");
    troupe__sexp_put_quoted(&b, s->name);
    troupe__strbuf_printf(&b, ") (mode %s) (queue_length %llu) (parked_on ",
                          s->inline_mode ? "inline" : "threaded",
                          (unsigned long long)s_pending(s));
    if (s->pub_parked[0])
        troupe__sexp_put_quoted(&b, s->pub_parked);
    else
        troupe__strbuf_puts(&b, "nil");
    troupe__strbuf_puts(&b, ") (failed ");
    if (s->failed_status != TROUPE_OK) {
        troupe__strbuf_printf(&b, "(%s ", troupe_status_str(s->failed_status));
        troupe__sexp_put_quoted(&b, s->failed_msg ? s->failed_msg
                                                  : troupe_status_str(s->failed_status));
        troupe__strbuf_puts(&b, ")");
    } else {
        troupe__strbuf_puts(&b, "nil");
    }
    troupe__strbuf_printf(&b,
                          ") (counters (scheduled %llu) (run %llu) (records %llu) (waits %llu) "
                          "(dropped %llu) (cancelled %llu)))",
                          (unsigned long long)atomic_load(&s->submitted),
                          (unsigned long long)c->run, (unsigned long long)c->records,
                          (unsigned long long)c->waits, (unsigned long long)c->dropped,
                          (unsigned long long)c->cancelled);
    pthread_mutex_unlock(&s->mu);
    return troupe__strbuf_finish(&b, "stream debug info", out, NULL);
}

uint64_t troupe__stream_next_request_id(troupe_stream_t *s)
{
    static atomic_uint_fast64_t inline_ids = 1;
    if (s->actor)
        return troupe_actor_next_id(s->actor);
    return atomic_fetch_add_explicit(&inline_ids, 1, memory_order_relaxed);
}

troupe_status_t troupe__stream_request(troupe_stream_t *s, zmsg_t **req_p, int64_t timeout_ns,
                                      zmsg_t **reply_p)
{
    if (reply_p)
        *reply_p = NULL;
    if (!s || !req_p || !*req_p || !reply_p) {
        if (req_p)
            zmsg_destroy(req_p);
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe__stream_request: NULL argument");
    }
    zframe_t *f0 = zmsg_first(*req_p);
    if (f0 && zframe_streq(f0, TROUPE_VERB_TERM)) {
        zmsg_destroy(req_p);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "stream %s: $TERM is sent by troupe_stream_release only", s->name);
    }
    if (!s->inline_mode)
        return troupe_actor_request(s->actor, req_p, timeout_ns, reply_p);
    zmsg_t *reply = s_dispatch(s, *req_p, NULL);
    zmsg_destroy(req_p);
    if (!reply)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "stream %s: reply: out of memory", s->name);
    *reply_p = reply;
    return TROUPE_OK;
}

troupe_status_t troupe_stream_debug_info(troupe_stream_t *s, char **out)
{
    if (!s || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_stream_debug_info: NULL argument");
    *out = NULL;
    if (s->inline_mode)
        return s_debug_sexp(s, out);
    int64_t timeout = troupe_config_timeout_ns();
    if (timeout <= 0 || timeout > S_DEBUG_TIMEOUT_NS)
        timeout = S_DEBUG_TIMEOUT_NS;
    uint64_t id = troupe_actor_next_id(s->actor);
    zmsg_t *req = NULL, *reply = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_msg_build(&req, "s8", TROUPE_STREAM_VERB_DEBUG, id));
    TROUPE_RETURN_IF_ERROR(troupe_actor_request(s->actor, &req, timeout, &reply));
    troupe_status_t rst = TROUPE_OK;
    char *sexp = NULL;
    troupe_status_t st = troupe_msg_decode(reply, "8Ss", NULL, &rst, &sexp);
    zmsg_destroy(&reply);
    if (st != TROUPE_OK)
        return troupe__error(TROUPE_INTERNAL, "stream %s: bad DEBUG reply: %s", s->name,
                             troupe_last_error());
    if (rst != TROUPE_OK) {
        troupe_free(sexp);
        return troupe__error(rst, "stream %s: debug info failed", s->name);
    }
    *out = sexp;
    return TROUPE_OK;
}

/* ---- properties ---------------------------------------------------------------------------- */

const char *troupe_stream_name(const troupe_stream_t *s)
{
    return s->name;
}

int troupe_stream_ordinal(const troupe_stream_t *s)
{
    return s->ordinal;
}

int troupe_stream_id(const troupe_stream_t *s)
{
    return s->stream_id;
}

bool troupe_stream_is_inline(const troupe_stream_t *s)
{
    return s->inline_mode;
}

const troupe_driver_vtable_t *troupe_stream_vtable(const troupe_stream_t *s)
{
    return s->vt;
}

troupe_driver_t *troupe_stream_driver(const troupe_stream_t *s)
{
    return s->drv;
}
