/* troupe — streams on asynchronous drivers and the device actor's event poller (see
 * async_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include "actors/async_impl.h"

#include "actors/actor_impl.h"
#include "actors/board_impl.h"
#include "actors/event_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/vec.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define S_MAGIC 0x61737963u            /* "asyc": an attachment of this file */
#define S_HOST_POLL_NS (200000LL)      /* a host sync polls the device event itself this long */
#define S_POLL_YIELDS 2000             /* poller rounds with only a yield between them */
#define S_POLL_SLEEP_NS (50000L)       /* the poller's pause after those */
#define S_VERB_WATCH "WATCH"           /* [WATCH][id][event p]: poll this event */

/* The driver event behind a troupe event. */
typedef struct s_att {
    uint32_t magic;
    const troupe_driver_vtable_t *vt;
    troupe_driver_t *drv;
    int ordinal;
    troupe_devent_t *dev;
    atomic_bool claimed; /* the completer: whoever sets it */
} s_att_t;

static void s_att_free(void *p)
{
    s_att_t *a = p;
    a->vt->event_release(a->drv, a->dev); /* does not use drv (devices/device.h) */
    troupe_free(a);
}

static s_att_t *s_att_of(const troupe_event_t *ev)
{
    s_att_t *a = troupe__event_attachment(ev);
    return a != NULL && a->magic == S_MAGIC ? a : NULL;
}

/* Queries a's driver event once; when it finished (or failed), completes ev unless someone else
 * did. Returns true when ev is complete (by this call or another). */
static bool s_poll(troupe_event_t *ev, s_att_t *a)
{
    if (troupe__event_state_quiet(ev) != TROUPE_EVENT_PENDING)
        return true;
    bool done = false;
    troupe_clear_error();
    troupe_status_t st = a->vt->event_query(a->drv, a->dev, &done);
    if (st == TROUPE_OK && !done)
        return false;
    if (atomic_exchange(&a->claimed, true))
        return true;
    if (st == TROUPE_OK) {
        troupe_event_complete(ev, TROUPE_OK, NULL);
    } else {
        char msg[1100];
        snprintf(msg, sizeof msg, "%s: %s", troupe_event_name(ev), troupe_last_error());
        troupe_event_complete(ev, st, msg);
    }
    return true;
}

/* Progress hook of a RECORD event on an asynchronous stream (actors/event_impl.h): a thread
 * about to wait for it polls the device event itself for a while. */
static void s_progress(troupe_event_t *ev, int64_t deadline_ns)
{
    if (deadline_ns == TROUPE__EVENT_KICK)
        return; /* the work is already enqueued: nothing to start */
    int64_t limit = S_HOST_POLL_NS;
    if (deadline_ns != TROUPE_TIMEOUT_INFINITE && troupe_deadline_remaining(deadline_ns) < limit)
        limit = troupe_deadline_remaining(deadline_ns);
    troupe__spin_t spin = TROUPE__SPIN_INIT;
    do {
        if (troupe__event_state_quiet(ev) != TROUPE_EVENT_PENDING)
            return;
        s_att_t *a = s_att_of(ev);
        if (a != NULL && s_poll(ev, a))
            return;
    } while (troupe__spin_step(&spin, limit));
}

void troupe__async_prepare(troupe_event_t *ev)
{
    troupe__event_set_progress(ev, s_progress);
}

/* ---- the pollers ------------------------------------------------------------------------- */

typedef struct s_poller {
    troupe_driver_t *drv;
    int ordinal;
    char tag[48];
    troupe_mailbox_t *mb;
    troupe_actor_t *actor;
} s_poller_t;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static s_poller_t **s_pollers;
static size_t s_npollers, s_pollers_cap;

/* Moves the events posted to the mailbox into items (adopting their references). */
static void s_take(s_poller_t *p, troupe_event_t ***items, size_t *n, size_t *cap)
{
    zmsg_t *msg;
    while ((msg = troupe_mailbox_take(p->mb)) != NULL) {
        void *evp = NULL;
        if (troupe_msg_decode(msg, "s8p", NULL, NULL, &evp) != TROUPE_OK || evp == NULL) {
            TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_ACTORS, "%s: bad message: %s", p->tag,
                       troupe_last_error());
        } else if (!TROUPE__VEC_PUSH(*items, *n, *cap, (troupe_event_t *)evp)) {
            /* Out of memory: the event still completes through its host syncs' polling; a
             * parked waiter would wait for its deadline. Fail it rather than lose it. */
            troupe_event_t *ev = evp;
            troupe_event_complete(ev, TROUPE_RESOURCE_EXHAUSTED,
                                  "device poller: out of memory for its event list");
            troupe_event_release(&ev);
        }
        zmsg_destroy(&msg);
    }
}

/* One round over the watched events: completes the finished ones and drops them. Returns
 * whether any finished. */
static bool s_round(troupe_event_t **items, size_t *n)
{
    size_t k = 0;
    for (size_t i = 0; i < *n; i++) {
        s_att_t *a = s_att_of(items[i]);
        if (a == NULL || s_poll(items[i], a))
            troupe_event_release(&items[i]);
        else
            items[k++] = items[i];
    }
    bool progressed = k < *n;
    *n = k;
    return progressed;
}

/* The status board (actors/board_impl.h): the events in flight and the oldest one, written when
 * events arrive or complete (no lock, no allocation). */
static void s_board(troupe__board_slot_t *board, troupe_event_t **items, size_t n)
{
    troupe__board_wait_event(board, n > 0 ? items[0] : NULL);
    troupe__board_set_queue(board, (int64_t)n);
}

static void s_poller_actor(zsock_t *pipe, void *args)
{
    s_poller_t *p = args;
    void *mbh = troupe_mailbox_poll_handle(p->mb);
    zpoller_t *zp = zpoller_new(pipe, mbh, NULL);
    troupe_actor_ready(pipe, zp ? TROUPE_OK
                                : troupe__error(TROUPE_TRANSPORT_ERROR, "zpoller_new failed"));
    if (zp == NULL)
        return;
    troupe_event_t **items = NULL;
    size_t n = 0, cap = 0;
    troupe__board_slot_t *board = troupe__board_claim(TROUPE__BOARD_DEVICE, p->tag, NULL, NULL);
    unsigned idle_rounds = 0;
    bool term = false;
    while (!term) {
        void *which = zpoller_wait(zp, n == 0 ? -1 : 0);
        if (which == pipe) {
            zmsg_t *m = troupe_actor_recv(pipe);
            term = true; /* the only message the pipe carries is $TERM */
            zmsg_destroy(&m);
        } else if (which == mbh) {
            troupe_mailbox_clear(p->mb);
            s_take(p, &items, &n, &cap);
            s_board(board, items, n);
        } else if (which == NULL && zpoller_terminated(zp)) {
            term = true;
        }
        if (term || n == 0)
            continue;
        if (s_round(items, &n)) {
            idle_rounds = 0;
            s_board(board, items, n);
        }
        if (n == 0)
            continue;
        if (++idle_rounds < S_POLL_YIELDS) {
            sched_yield();
        } else {
            struct timespec ts = {0, S_POLL_SLEEP_NS};
            nanosleep(&ts, NULL);
        }
    }
    /* Stopping (the driver closes): what is still pending is polled once more, then failed. */
    troupe_mailbox_close(p->mb);
    s_take(p, &items, &n, &cap);
    s_round(items, &n);
    for (size_t i = 0; i < n; i++) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s stopped (its driver closed) with this event pending",
                 p->tag);
        s_att_t *a = s_att_of(items[i]);
        if (a == NULL || !atomic_exchange(&a->claimed, true))
            troupe_event_complete(items[i], TROUPE_CANCELLED, msg);
        troupe_event_release(&items[i]);
    }
    troupe_free(items);
    troupe__board_release(&board);
    zpoller_destroy(&zp);
}

static void s_poller_free(s_poller_t *p)
{
    if (p == NULL)
        return;
    troupe_actor_destroy(&p->actor);
    troupe_mailbox_release(&p->mb);
    troupe_free(p);
}

/* The poller of drv's device `ordinal`, started on first use (s_lock held). */
static troupe_status_t s_poller_locked(troupe_driver_t *drv, int ordinal, s_poller_t **out)
{
    for (size_t i = 0; i < s_npollers; i++) {
        if (s_pollers[i]->drv == drv && s_pollers[i]->ordinal == ordinal) {
            *out = s_pollers[i];
            return TROUPE_OK;
        }
    }
    if (!TROUPE__VEC_RESERVE(s_pollers, s_pollers_cap, s_npollers + 1))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "device poller: out of memory");
    s_poller_t *p = troupe_calloc(1, sizeof *p);
    if (p == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "device poller: out of memory");
    p->drv = drv;
    p->ordinal = ordinal;
    snprintf(p->tag, sizeof p->tag, "%s:%d:poller", troupe_driver_name(drv), ordinal);
    troupe_status_t st = troupe_mailbox_new(&p->mb);
    if (st == TROUPE_OK)
        st = troupe_actor_new(p->tag, s_poller_actor, p, &p->actor);
    if (st != TROUPE_OK) {
        s_poller_free(p);
        return st;
    }
    s_pollers[s_npollers++] = p;
    *out = p;
    return TROUPE_OK;
}

troupe_status_t troupe__async_record(troupe_driver_t *drv, troupe_dqueue_t *q, int ordinal,
                                     troupe_event_t *ev)
{
    s_poller_t *p = NULL;
    pthread_mutex_lock(&s_lock);
    troupe_status_t st = s_poller_locked(drv, ordinal, &p);
    troupe_mailbox_t *mb = p != NULL ? p->mb : NULL;
    if (mb != NULL)
        troupe_mailbox_retain(mb);
    pthread_mutex_unlock(&s_lock);
    if (st != TROUPE_OK)
        return st;
    troupe_devent_t *dev = NULL;
    s_att_t *a = NULL;
    if ((st = troupe_driver_event_record(drv, q, &dev)) != TROUPE_OK)
        goto out_mb;
    a = troupe_calloc(1, sizeof *a);
    if (a == NULL) {
        drv->vt->event_release(drv, dev);
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "record: out of memory");
        goto out_mb;
    }
    *a = (s_att_t){S_MAGIC, drv->vt, drv, ordinal, dev, false};
    if (!troupe__event_attach(ev, a, s_att_free)) {
        s_att_free(a);
        st = troupe__error(TROUPE_INTERNAL, "record: event %s already has a device event",
                           troupe_event_name(ev));
        goto out_mb;
    }
    troupe_event_retain(ev); /* the poller's reference, adopted from the message */
    zmsg_t *msg = NULL;
    st = troupe_msg_build(&msg, "s8p", S_VERB_WATCH, (uint64_t)0, (void *)ev);
    if (st == TROUPE_OK)
        st = troupe_mailbox_post(mb, &msg);
    if (st != TROUPE_OK) {
        troupe_event_release(&ev);
        st = troupe__error(st, "record: cannot hand the event to the device poller: %s",
                           troupe_last_error());
    }
out_mb:
    troupe_mailbox_release(&mb);
    return st;
}

bool troupe__async_wait(troupe_driver_t *drv, troupe_dqueue_t *q, int ordinal, troupe_event_t *ev)
{
    s_att_t *a = s_att_of(ev);
    if (a == NULL || a->drv != drv || a->ordinal != ordinal)
        return false;
    if (troupe_driver_event_wait(drv, q, a->dev) != TROUPE_OK) {
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_ACTORS,
                   "device-side wait on %s failed (%s); waiting on the host",
                   troupe_event_name(ev), troupe_last_error());
        return false;
    }
    return true;
}

void troupe__async_driver_closing(troupe_driver_t *drv)
{
    for (;;) {
        s_poller_t *p = NULL;
        pthread_mutex_lock(&s_lock);
        for (size_t i = 0; i < s_npollers && p == NULL; i++) {
            if (s_pollers[i]->drv == drv) {
                p = s_pollers[i];
                s_pollers[i] = s_pollers[--s_npollers];
            }
        }
        if (s_npollers == 0) {
            troupe_free(s_pollers);
            s_pollers = NULL;
            s_pollers_cap = 0;
        }
        pthread_mutex_unlock(&s_lock);
        if (p == NULL)
            return;
        s_poller_free(p);
    }
}
