/* troupe — events (see event.h). */
#define _GNU_SOURCE
#include "actors/event_impl.h"

#include "actors/actor_impl.h"
#include "actors/board_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/vec.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct s_sub {
    troupe_event_callback_fn fn;
    void *user;
} s_sub_t;

#define S_INLINE_SUBS 2
#ifndef S_SYNC_SPIN_NS
#define S_SYNC_SPIN_NS (20000LL) /* troupe_event_sync spins this long before it blocks */
#endif

struct troupe_event {
    atomic_int_fast32_t refs;
    /* PENDING until completion; status and message are written under `mu` before the state is
     * stored (release), so a reader that loads a final state (acquire) may read them unlocked:
     * they never change again. */
    atomic_int state;
    _Atomic int64_t done_ns; /* troupe_now_ns() at completion; 0 while pending */
    troupe_status_t status;
    char *message;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    int waiters;       /* threads in troupe_event_sync (mu) */
    s_sub_t *subs;     /* mu; inline_subs or heap */
    size_t nsubs, cap;
    s_sub_t inline_subs[S_INLINE_SUBS];
    char name[TROUPE_EVENT_NAME_MAX + 1];
    troupe__event_progress_fn progress; /* set before sharing; never changes afterwards */
    atomic_bool kicked;                 /* the progress hook was told the event is consumed */
    _Atomic(void *) attachment;         /* set once (release); freed with the event */
    void (*attachment_free)(void *);    /* written before the attachment is published */
};

static pthread_once_t s_attr_once = PTHREAD_ONCE_INIT;
static pthread_condattr_t s_cond_attr;

static void s_init_attr(void)
{
    pthread_condattr_init(&s_cond_attr);
    pthread_condattr_setclock(&s_cond_attr, CLOCK_MONOTONIC);
}

troupe_status_t troupe_event_new(const char *name, troupe_event_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_event_new: NULL out");
    *out = NULL;
    pthread_once(&s_attr_once, s_init_attr);
    troupe_event_t *ev = (troupe_event_t *)troupe_malloc(sizeof *ev);
    if (!ev)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "troupe_event_new: out of memory");
    atomic_init(&ev->refs, 1);
    atomic_init(&ev->state, TROUPE_EVENT_PENDING);
    atomic_init(&ev->done_ns, 0);
    ev->status = TROUPE_OK;
    ev->message = NULL;
    if (pthread_mutex_init(&ev->mu, NULL) != 0) {
        troupe_free(ev);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "troupe_event_new: mutex");
    }
    if (pthread_cond_init(&ev->cv, &s_cond_attr) != 0) {
        pthread_mutex_destroy(&ev->mu);
        troupe_free(ev);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "troupe_event_new: condition variable");
    }
    ev->waiters = 0;
    ev->subs = ev->inline_subs;
    ev->nsubs = 0;
    ev->cap = S_INLINE_SUBS;
    ev->progress = NULL;
    atomic_init(&ev->kicked, false);
    atomic_init(&ev->attachment, NULL);
    ev->attachment_free = NULL;
    /* Not snprintf: streams name an event per RECORD, and formatting cost more than the rest of
     * the hand-off. */
    if (!name)
        name = "event";
    size_t len = strnlen(name, TROUPE_EVENT_NAME_MAX);
    memcpy(ev->name, name, len);
    ev->name[len] = '\0';
    *out = ev;
    return TROUPE_OK;
}

troupe_status_t troupe_event_new_completed(const char *name, troupe_status_t status,
                                           const char *message, troupe_event_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_event_new(name, out));
    troupe_event_complete(*out, status, message);
    return TROUPE_OK;
}

void troupe_event_retain(troupe_event_t *ev)
{
    atomic_fetch_add_explicit(&ev->refs, 1, memory_order_relaxed);
}

static void s_call_subs(troupe_event_t *ev, s_sub_t *subs, size_t n, troupe_status_t status)
{
    for (size_t i = 0; i < n; i++)
        subs[i].fn(subs[i].user, ev, status);
}

void troupe_event_release(troupe_event_t **ev_p)
{
    if (!ev_p || !*ev_p)
        return;
    troupe_event_t *ev = *ev_p;
    *ev_p = NULL;
    /* acq_rel rather than a release + fence: ThreadSanitizer does not model fences. */
    if (atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_acq_rel) != 1)
        return;
    /* Last reference: nobody can complete it any more. Tell pending subscribers. */
    pthread_mutex_lock(&ev->mu);
    s_sub_t *subs = ev->subs;
    size_t n = ev->nsubs;
    bool pending = atomic_load_explicit(&ev->state, memory_order_relaxed) == TROUPE_EVENT_PENDING;
    ev->nsubs = 0;
    pthread_mutex_unlock(&ev->mu);
    if (pending && n > 0) {
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_ACTORS,
                   "event %s released while pending; cancelling %zu subscriber(s)", ev->name, n);
        s_call_subs(NULL, subs, n, TROUPE_CANCELLED);
    }
    if (subs != ev->inline_subs)
        troupe_free(subs);
    void *att = atomic_load_explicit(&ev->attachment, memory_order_acquire);
    if (att != NULL && ev->attachment_free != NULL)
        ev->attachment_free(att);
    troupe_free(ev->message);
    pthread_cond_destroy(&ev->cv);
    pthread_mutex_destroy(&ev->mu);
    troupe_free(ev);
}

bool troupe_event_complete(troupe_event_t *ev, troupe_status_t status, const char *message)
{
    if (!ev)
        return false;
    char *copy = NULL;
    if (status != TROUPE_OK)
        copy = troupe_strdup(message && message[0] ? message : troupe_status_str(status));
    pthread_mutex_lock(&ev->mu);
    int prev = atomic_load_explicit(&ev->state, memory_order_relaxed);
    if (prev != TROUPE_EVENT_PENDING) {
        pthread_mutex_unlock(&ev->mu);
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_ACTORS,
                   "event %s completed twice; ignoring the later completion (%s: %s)", ev->name,
                   troupe_status_str(status), message ? message : "");
        troupe_free(copy);
        return false;
    }
    ev->status = status;
    ev->message = copy; /* NULL on out of memory: readers fall back to the status name */
    atomic_store_explicit(&ev->done_ns, troupe_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&ev->state, status == TROUPE_OK ? TROUPE_EVENT_DONE : TROUPE_EVENT_FAILED,
                          memory_order_release);
    s_sub_t local[S_INLINE_SUBS];
    s_sub_t *subs = ev->subs;
    size_t n = ev->nsubs;
    if (subs == ev->inline_subs) {
        memcpy(local, ev->inline_subs, n * sizeof *local);
        subs = local;
    }
    ev->subs = ev->inline_subs;
    ev->cap = S_INLINE_SUBS;
    ev->nsubs = 0;
    if (ev->waiters > 0)
        pthread_cond_broadcast(&ev->cv);
    pthread_mutex_unlock(&ev->mu);

    /* Subscribers may release the last other reference; keep `ev` alive while calling them. */
    if (n > 0) {
        troupe_event_retain(ev);
        s_call_subs(ev, subs, n, status);
        troupe_event_release(&ev);
    }
    if (subs != local)
        troupe_free(subs);
    return true;
}

static troupe_event_state_t s_state_raw(const troupe_event_t *ev)
{
    return (troupe_event_state_t)atomic_load_explicit(&((troupe_event_t *)ev)->state,
                                                      memory_order_acquire);
}

int64_t troupe__event_completed_ns(const troupe_event_t *ev)
{
    if (ev == NULL || s_state_raw(ev) == TROUPE_EVENT_PENDING)
        return 0;
    return atomic_load_explicit(&((troupe_event_t *)ev)->done_ns, memory_order_relaxed);
}

/* The first consumer of a pending event with a progress hook tells its producer to start
 * (TROUPE__EVENT_KICK). The flag is logically mutable state of a const event. */
static void s_kick(const troupe_event_t *cev)
{
    troupe_event_t *ev = (troupe_event_t *)cev;
    if (ev->progress == NULL || atomic_load_explicit(&ev->kicked, memory_order_relaxed) ||
        atomic_exchange(&ev->kicked, true))
        return;
    ev->progress(ev, TROUPE__EVENT_KICK);
}

troupe_event_state_t troupe_event_state(const troupe_event_t *ev)
{
    troupe_event_state_t state = s_state_raw(ev);
    if (state == TROUPE_EVENT_PENDING)
        s_kick(ev);
    return state;
}

bool troupe_event_is_done(const troupe_event_t *ev)
{
    return troupe_event_state(ev) != TROUPE_EVENT_PENDING;
}

troupe_status_t troupe_event_status(const troupe_event_t *ev)
{
    if (troupe_event_state(ev) != TROUPE_EVENT_FAILED)
        return TROUPE_OK;
    return ev->status;
}

static const char *s_message(const troupe_event_t *ev)
{
    /* Only for failed events (state loaded with acquire by the caller). */
    return ev->message ? ev->message : troupe_status_str(ev->status);
}

char *troupe_event_copy_message(const troupe_event_t *ev)
{
    if (troupe_event_state(ev) != TROUPE_EVENT_FAILED)
        return NULL;
    return troupe_strdup(s_message(ev));
}

const char *troupe_event_name(const troupe_event_t *ev)
{
    return ev->name;
}

static troupe_status_t s_final(const troupe_event_t *ev, troupe_event_state_t state)
{
    if (state == TROUPE_EVENT_DONE)
        return TROUPE_OK;
    return troupe__error(ev->status, "%s", s_message(ev));
}

void troupe__event_set_progress(troupe_event_t *ev, troupe__event_progress_fn fn)
{
    if (ev != NULL)
        ev->progress = fn;
}

static void s_drive(troupe_event_t *ev, int64_t deadline)
{
    if (ev->progress == NULL || s_state_raw(ev) != TROUPE_EVENT_PENDING)
        return;
    atomic_store(&ev->kicked, true);
    ev->progress(ev, deadline);
}

bool troupe__event_attach(troupe_event_t *ev, void *att, void (*free_fn)(void *))
{
    if (ev == NULL || att == NULL || atomic_load(&ev->attachment) != NULL)
        return false;
    ev->attachment_free = free_fn;
    atomic_store_explicit(&ev->attachment, att, memory_order_release);
    return true;
}

void *troupe__event_attachment(const troupe_event_t *ev)
{
    return ev == NULL ? NULL
                      : atomic_load_explicit(&((troupe_event_t *)ev)->attachment,
                                             memory_order_acquire);
}

troupe_event_state_t troupe__event_state_quiet(const troupe_event_t *ev)
{
    return s_state_raw(ev);
}

bool troupe__event_was_kicked(const troupe_event_t *ev)
{
    return ev != NULL && atomic_load(&((troupe_event_t *)ev)->kicked);
}

void troupe__event_drive(troupe_event_t *ev, int64_t timeout_ns)
{
    if (ev != NULL)
        s_drive(ev, troupe_deadline_after(timeout_ns));
}

static troupe_status_t s_sync_pending(troupe_event_t *ev, int64_t timeout_ns);

troupe_status_t troupe_event_sync(troupe_event_t *ev, int64_t timeout_ns)
{
    if (!ev)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_event_sync: NULL event");
    troupe_event_state_t state = s_state_raw(ev);
    if (state != TROUPE_EVENT_PENDING)
        return s_final(ev, state);
    troupe__board_host_wait(ev->name, NULL);
    troupe_status_t st = s_sync_pending(ev, timeout_ns);
    if (st == TROUPE_DEADLINE_EXCEEDED && s_state_raw(ev) == TROUPE_EVENT_PENDING)
        troupe__board_deadline_hit(st);
    troupe__board_host_done();
    return st;
}

/* troupe_event_sync of an event found pending. */
static troupe_status_t s_sync_pending(troupe_event_t *ev, int64_t timeout_ns)
{
    troupe_event_state_t state;
    int64_t deadline = troupe_deadline_after(timeout_ns);
    s_drive(ev, deadline); /* may complete ev on this thread */
    /* An event about to complete (a stream finishing a short item) is caught by a brief spin,
     * which saves the completer a wake-up and this thread a sleep. */
    troupe__spin_t spin = TROUPE__SPIN_INIT;
    int64_t spin_ns = S_SYNC_SPIN_NS;
    if (deadline != TROUPE_TIMEOUT_INFINITE && troupe_deadline_remaining(deadline) < spin_ns)
        spin_ns = troupe_deadline_remaining(deadline);
    while ((state = s_state_raw(ev)) == TROUPE_EVENT_PENDING && troupe__spin_step(&spin, spin_ns))
        ;
    if (state != TROUPE_EVENT_PENDING)
        return s_final(ev, state);
    pthread_mutex_lock(&ev->mu);
    ev->waiters++;
    for (;;) {
        state = (troupe_event_state_t)atomic_load_explicit(&ev->state, memory_order_acquire);
        if (state != TROUPE_EVENT_PENDING)
            break;
        if (deadline == TROUPE_TIMEOUT_INFINITE) {
            pthread_cond_wait(&ev->cv, &ev->mu);
            continue;
        }
        if (troupe_deadline_remaining(deadline) == 0 && !troupe__board_extend_deadline(&deadline))
            break;
        struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000LL),
                              .tv_nsec = (long)(deadline % 1000000000LL)};
        int rc = pthread_cond_timedwait(&ev->cv, &ev->mu, &ts);
        if (rc != 0 && rc != ETIMEDOUT && rc != EINTR)
            break; /* cannot happen with valid arguments; re-check state and give up */
    }
    ev->waiters--;
    pthread_mutex_unlock(&ev->mu);
    if (state != TROUPE_EVENT_PENDING)
        return s_final(ev, state);
    if (timeout_ns == TROUPE_TIMEOUT_INFINITE)
        return troupe__error(TROUPE_INTERNAL, "event %s: wait failed", ev->name);
    return troupe__error(TROUPE_DEADLINE_EXCEEDED, "event %s not done after %.3f ms", ev->name,
                         (double)(timeout_ns < 0 ? 0 : timeout_ns) / 1e6);
}

troupe_status_t troupe_event_subscribe(troupe_event_t *ev, troupe_event_callback_fn fn, void *user)
{
    if (!ev || !fn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_event_subscribe: NULL %s",
                             ev ? "callback" : "event");
    s_kick(ev);
    pthread_mutex_lock(&ev->mu);
    troupe_event_state_t state =
        (troupe_event_state_t)atomic_load_explicit(&ev->state, memory_order_relaxed);
    if (state == TROUPE_EVENT_PENDING) {
        if (ev->nsubs == ev->cap) {
            /* Out of the inline slots: the subscribers move to (or grow on) the heap. */
            bool is_inline = ev->subs == ev->inline_subs;
            s_sub_t *subs = is_inline ? NULL : ev->subs;
            size_t cap = is_inline ? 0 : ev->cap;
            if (!TROUPE__VEC_RESERVE(subs, cap, ev->nsubs + 1)) {
                pthread_mutex_unlock(&ev->mu);
                return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "event %s: cannot add a subscriber",
                                     ev->name);
            }
            if (is_inline)
                memcpy(subs, ev->inline_subs, ev->nsubs * sizeof *subs);
            ev->subs = subs;
            ev->cap = cap;
        }
        ev->subs[ev->nsubs].fn = fn;
        ev->subs[ev->nsubs].user = user;
        ev->nsubs++;
        pthread_mutex_unlock(&ev->mu);
        return TROUPE_OK;
    }
    pthread_mutex_unlock(&ev->mu);
    fn(user, ev, state == TROUPE_EVENT_DONE ? TROUPE_OK : ev->status);
    return TROUPE_OK;
}

/* ---- mailbox subscriptions ----------------------------------------------------------------- */

typedef struct s_mailbox_sub {
    troupe_mailbox_t *mb;
    uint64_t id;
} s_mailbox_sub_t;

static void s_mailbox_cb(void *user, troupe_event_t *ev, troupe_status_t status)
{
    s_mailbox_sub_t *sub = (s_mailbox_sub_t *)user;
    if (ev) {
        zmsg_t *msg = NULL;
        troupe_event_retain(ev); /* the message's reference, adopted by the receiver */
        troupe_status_t st =
            status == TROUPE_OK
                ? troupe_msg_build(&msg, "s8p", TROUPE_VERB_EV_DONE, sub->id, (void *)ev)
                : troupe_msg_build(&msg, "s8pS", TROUPE_VERB_EV_FAIL, sub->id, (void *)ev, status);
        if (st == TROUPE_OK)
            st = troupe_mailbox_post(sub->mb, &msg);
        if (st != TROUPE_OK) {
            TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_ACTORS,
                       "event %s: completion not delivered (%s)", ev->name, troupe_last_error());
            troupe_event_release(&ev);
        }
    }
    troupe_mailbox_release(&sub->mb);
    troupe_free(sub);
}

troupe_status_t troupe_event_subscribe_mailbox(troupe_event_t *ev, troupe_mailbox_t *mb,
                                               uint64_t id)
{
    if (!ev || !mb)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_event_subscribe_mailbox: NULL %s",
                             ev ? "mailbox" : "event");
    s_mailbox_sub_t *sub = (s_mailbox_sub_t *)troupe_malloc(sizeof *sub);
    if (!sub)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "event %s: cannot add a subscriber",
                             ev->name);
    troupe_mailbox_retain(mb);
    sub->mb = mb;
    sub->id = id;
    troupe_status_t st = troupe_event_subscribe(ev, s_mailbox_cb, sub);
    if (st != TROUPE_OK) {
        troupe_mailbox_release(&sub->mb);
        troupe_free(sub);
    }
    return st;
}

/* ---- all ----------------------------------------------------------------------------------- */

typedef struct s_all {
    atomic_size_t refs;      /* outstanding input subscriptions */
    atomic_size_t remaining; /* inputs not yet done */
    atomic_bool finished;    /* `out` completed (first failure or last success) */
    troupe_event_t *out;     /* one reference, dropped with the last subscription */
} s_all_t;

static void s_all_finish(s_all_t *all, troupe_status_t status, const char *message)
{
    if (!atomic_exchange_explicit(&all->finished, true, memory_order_acq_rel))
        troupe_event_complete(all->out, status, message);
}

static void s_all_cb(void *user, troupe_event_t *ev, troupe_status_t status)
{
    s_all_t *all = (s_all_t *)user;
    if (!ev) {
        s_all_finish(all, TROUPE_CANCELLED, "an input event was released before completing");
    } else if (status != TROUPE_OK) {
        char *msg = troupe_event_copy_message(ev);
        s_all_finish(all, status, msg);
        troupe_free(msg);
    } else if (atomic_fetch_sub_explicit(&all->remaining, 1, memory_order_acq_rel) == 1) {
        s_all_finish(all, TROUPE_OK, NULL);
    }
    if (atomic_fetch_sub_explicit(&all->refs, 1, memory_order_acq_rel) == 1) {
        troupe_event_release(&all->out);
        troupe_free(all);
    }
}

troupe_status_t troupe_event_all(const char *name, troupe_event_t *const *events, size_t count,
                                 troupe_event_t **out)
{
    if (!out || (count > 0 && !events))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_event_all: NULL argument");
    *out = NULL;
    for (size_t i = 0; i < count; i++)
        if (!events[i])
            return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_event_all: event %zu is NULL", i);
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_event_new(name ? name : "all", &ev));
    if (count == 0) {
        troupe_event_complete(ev, TROUPE_OK, NULL);
        *out = ev;
        return TROUPE_OK;
    }
    s_all_t *all = (s_all_t *)troupe_malloc(sizeof *all);
    if (!all) {
        troupe_event_release(&ev);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "troupe_event_all: out of memory");
    }
    atomic_init(&all->refs, count);
    atomic_init(&all->remaining, count);
    atomic_init(&all->finished, false);
    troupe_event_retain(ev);
    all->out = ev;
    troupe_status_t st = TROUPE_OK;
    for (size_t i = 0; i < count; i++) {
        if (st == TROUPE_OK)
            st = troupe_event_subscribe(events[i], s_all_cb, all);
        if (st != TROUPE_OK) {
            /* Balance the references of inputs that could not be subscribed. */
            char msg[256];
            snprintf(msg, sizeof msg, "troupe_event_all: %s", troupe_last_error());
            s_all_finish(all, st, msg);
            s_all_cb(all, events[i], TROUPE_OK);
        }
    }
    if (st != TROUPE_OK) {
        troupe_event_release(&ev);
        return troupe__error(st, "troupe_event_all: cannot subscribe to every input");
    }
    *out = ev;
    return TROUPE_OK;
}

troupe_status_t troupe_event_debug_info(const troupe_event_t *ev, char **out)
{
    if (!ev || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_event_debug_info: NULL argument");
    *out = NULL;
    troupe__strbuf_t b = TROUPE__STRBUF_INIT;
    troupe_event_state_t state = s_state_raw(ev);
    troupe__strbuf_puts(&b, "(event (name ");
    troupe__sexp_put_quoted(&b, ev->name);
    troupe__strbuf_printf(&b, ") (state %s)",
                          state == TROUPE_EVENT_PENDING ? "pending"
                          : state == TROUPE_EVENT_DONE  ? "done"
                                                        : "failed");
    if (state == TROUPE_EVENT_FAILED) {
        troupe__strbuf_printf(&b, " (status %s) (message ", troupe_status_str(ev->status));
        troupe__sexp_put_quoted(&b, s_message(ev));
        troupe__strbuf_puts(&b, ")");
    }
    troupe__strbuf_puts(&b, ")");
    return troupe__strbuf_finish(&b, "troupe_event_debug_info", out, NULL);
}
