/* Tests for actors/async_impl.h: streams on a driver whose queues complete work after the call
 * (devices/device.h async_queues), without a GPU.
 *
 * A fake asynchronous driver stands in for cuda: each queue is a worker thread running its
 * operations in order (a slow write of a value into host memory, a RECORD of a fake device
 * event, a WAIT for another queue's event, a fault that, like a sticky CUDA error, fails every
 * later event of its device). Through it, the stream actor, the device's poller and the progress
 * hook are checked: a RECORD's event completes only when the device reaches it, by the poller or
 * by a syncing thread; a WAIT on a same-device event becomes a device-side wait (event_wait) and
 * still orders the work; a WAIT on another device's event parks; a fault fails the next events
 * with its status and message, and what waits on them; await and all_work cover device work;
 * stopping the pollers fails what never completed, without a hang. Runs under ThreadSanitizer.
 */
#define _POSIX_C_SOURCE 200809L
#include "actors/async_impl.h"
#include "actors/board_impl.h"
#include "actors/event.h"
#include "actors/stream_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "devices/device.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LONG_WAIT (20000 * MS)

/* ---- the fake asynchronous driver ------------------------------------------------------- */

enum { S_OP_WRITE = 0, S_OP_RECORD, S_OP_WAIT, S_OP_FAULT, S_OP_BLOCK, S_OP_ADD };

struct troupe_devent {
    atomic_int refs;
    atomic_int state; /* 0 pending, 1 done, 2 failed */
    int ordinal;
};

typedef struct s_op {
    int kind;
    troupe_devent_t *ev; /* RECORD, WAIT: one reference */
    int64_t sleep_ms;    /* WRITE */
    atomic_int *dst;     /* WRITE */
    int value;
} s_op_t;

#define S_MAX_OPS 512

struct troupe_dqueue {
    int ordinal;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    s_op_t ops[S_MAX_OPS];
    size_t head, tail;
    atomic_bool stop;
};

typedef struct s_fake {
    troupe_driver_t base;
} s_fake_t;

static atomic_bool s_dev_failed[2];
static atomic_int s_event_waits; /* event_wait calls: device-side waits */
static atomic_bool s_unblock;

static void s_ev_release(troupe_devent_t *ev)
{
    if (ev != NULL && atomic_fetch_sub(&ev->refs, 1) == 1)
        troupe_free(ev);
}

static void s_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *s_worker(void *arg)
{
    troupe_dqueue_t *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->head == q->tail && !atomic_load(&q->stop))
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->head == q->tail && atomic_load(&q->stop))
            break;
        s_op_t op = q->ops[q->head % S_MAX_OPS];
        pthread_mutex_unlock(&q->mu);
        switch (op.kind) {
        case S_OP_WRITE:
            s_sleep_ms(op.sleep_ms);
            atomic_store(op.dst, op.value);
            break;
        case S_OP_RECORD:
            atomic_store(&op.ev->state, atomic_load(&s_dev_failed[q->ordinal]) ? 2 : 1);
            s_ev_release(op.ev);
            break;
        case S_OP_WAIT:
            while (atomic_load(&op.ev->state) == 0 && !atomic_load(&q->stop))
                s_sleep_ms(1);
            s_ev_release(op.ev);
            break;
        case S_OP_FAULT:
            atomic_store(&s_dev_failed[q->ordinal], true);
            break;
        case S_OP_BLOCK:
            while (!atomic_load(&s_unblock) && !atomic_load(&q->stop))
                s_sleep_ms(1);
            break;
        case S_OP_ADD:
            atomic_fetch_add(op.dst, op.value);
            break;
        }
        pthread_mutex_lock(&q->mu);
        q->head++;
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void s_push(troupe_dqueue_t *q, s_op_t op)
{
    pthread_mutex_lock(&q->mu);
    cr_assert_lt(q->tail - q->head, (size_t)S_MAX_OPS);
    q->ops[q->tail++ % S_MAX_OPS] = op;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static troupe_status_t s_open(troupe_driver_t **out);

static void s_close(troupe_driver_t *drv)
{
    troupe_free(drv);
}

static int s_num_devices(troupe_driver_t *drv)
{
    return 2;
}

static troupe_status_t s_queue_create(troupe_driver_t *drv, int ordinal, troupe_dqueue_t **out)
{
    troupe_dqueue_t *q = troupe_calloc(1, sizeof *q);
    q->ordinal = ordinal;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_create(&q->th, NULL, s_worker, q);
    *out = q;
    return TROUPE_OK;
}

static void s_queue_destroy(troupe_driver_t *drv, troupe_dqueue_t *q)
{
    pthread_mutex_lock(&q->mu);
    atomic_store(&q->stop, true);
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->th, NULL);
    for (size_t i = q->head; i < q->tail; i++) /* what never ran */
        s_ev_release(q->ops[i % S_MAX_OPS].ev);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    troupe_free(q);
}

static troupe_status_t s_event_record(troupe_driver_t *drv, troupe_dqueue_t *q,
                                      troupe_devent_t **out)
{
    troupe_devent_t *ev = troupe_calloc(1, sizeof *ev);
    atomic_init(&ev->refs, 2); /* the caller's and the queue's */
    atomic_init(&ev->state, 0);
    ev->ordinal = q->ordinal;
    s_push(q, (s_op_t){S_OP_RECORD, ev, 0, NULL, 0});
    *out = ev;
    return TROUPE_OK;
}

static troupe_status_t s_event_query(troupe_driver_t *drv, troupe_devent_t *ev, bool *done)
{
    int st = atomic_load(&ev->state);
    *done = st != 0;
    if (st == 2)
        return troupe__error(TROUPE_DEVICE_ERROR, "fake device %d: fakeErrorIllegalAddress",
                             ev->ordinal);
    return TROUPE_OK;
}

static troupe_status_t s_event_wait(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_devent_t *ev)
{
    atomic_fetch_add(&ev->refs, 1);
    atomic_fetch_add(&s_event_waits, 1);
    s_push(q, (s_op_t){S_OP_WAIT, ev, 0, NULL, 0});
    return TROUPE_OK;
}

static void s_event_release(troupe_driver_t *drv, troupe_devent_t *ev)
{
    s_ev_release(ev);
}

/* ---- the fake code and its graphs ----------------------------------------------------------
 * A code has 16 counters; a launch with arguments [static index v, buffer at offset o] adds
 * 1 + o to counter v on the device. A graph is captured like a CUDA graph: its arguments are
 * baked in, and a replay adds to the counter of the index it was captured with, whatever the
 * launch passes, so replaying the wrong graph shows in the counters. */

struct troupe_dcode {
    atomic_int out[16];
};

struct troupe_dgraph {
    troupe_dqueue_t *q;
    troupe_dcode_t *code;
    troupe_karg_t args[2];
};

static atomic_int s_launches, s_captures, s_replays, s_graph_releases;
static atomic_bool s_capture_fails, s_graphs_stale;

static troupe_status_t s_add(troupe_dqueue_t *q, troupe_dcode_t *code, const troupe_karg_t *args,
                             size_t nargs)
{
    if (nargs != 2 || args[0].kind != TROUPE_KARG_STATIC_IDX || args[0].value < 0 ||
        args[0].value >= 16 || args[1].kind != TROUPE_KARG_BUFFER)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "fake launch: bad arguments");
    s_push(q, (s_op_t){S_OP_ADD, NULL, 0, &code->out[args[0].value], 1 + (int)args[1].buf.offset});
    return TROUPE_OK;
}

static troupe_status_t s_launch(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                                const troupe_karg_t *args, size_t nargs)
{
    atomic_fetch_add(&s_launches, 1);
    return s_add(q, code, args, nargs);
}

static troupe_status_t s_graph_capture(troupe_driver_t *drv, troupe_dqueue_t *q,
                                       troupe_dcode_t *code, const troupe_karg_t *args,
                                       size_t nargs, troupe_dgraph_t **out)
{
    atomic_fetch_add(&s_captures, 1);
    if (atomic_load(&s_capture_fails))
        return troupe__error(TROUPE_DEVICE_ERROR,
                             "fake graph_capture: fakeErrorStreamCaptureUnsupported");
    cr_assert_eq(nargs, 2);
    troupe_dgraph_t *g = troupe_calloc(1, sizeof *g);
    *g = (troupe_dgraph_t){q, code, {args[0], args[1]}};
    *out = g;
    return TROUPE_OK;
}

static troupe_status_t s_graph_launch(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dgraph_t *g,
                                      const troupe_karg_t *args, size_t nargs)
{
    if (atomic_load(&s_graphs_stale))
        return troupe__error(TROUPE_UNAVAILABLE, "fake graph_launch: a buffer moved");
    cr_assert_eq(g->q, q, "a graph is replayed on the queue it was captured on");
    atomic_fetch_add(&s_replays, 1);
    return s_add(q, g->code, g->args, 2); /* the baked arguments */
}

static void s_graph_release(troupe_driver_t *drv, troupe_dgraph_t *g)
{
    atomic_fetch_add(&s_graph_releases, 1);
    troupe_free(g);
}

static const troupe_driver_vtable_t s_fake_vt = {
    .name = "fake",
    .async_queues = true,
    .open = s_open,
    .close = s_close,
    .num_devices = s_num_devices,
    .queue_create = s_queue_create,
    .queue_destroy = s_queue_destroy,
    .event_record = s_event_record,
    .event_query = s_event_query,
    .event_wait = s_event_wait,
    .event_release = s_event_release,
    .launch = s_launch,
    .graph_capture = s_graph_capture,
    .graph_launch = s_graph_launch,
    .graph_release = s_graph_release,
};

static troupe_status_t s_open(troupe_driver_t **out)
{
    s_fake_t *f = troupe_calloc(1, sizeof *f);
    f->base.vt = &s_fake_vt;
    *out = &f->base;
    return TROUPE_OK;
}

/* ---- work items ----------------------------------------------------------------------- */

typedef struct s_write {
    atomic_int *dst;
    int value;
    int64_t sleep_ms;
} s_write_t;

static troupe_status_t s_write_work(void *arg, troupe_dqueue_t *q)
{
    s_write_t *w = arg;
    s_push(q, (s_op_t){S_OP_WRITE, NULL, w->sleep_ms, w->dst, w->value});
    return TROUPE_OK;
}

/* Schedules "after sleep_ms, *dst = value" on the stream's device queue. */
static void s_write(troupe_stream_t *s, atomic_int *dst, int value, int64_t sleep_ms)
{
    s_write_t *w = troupe_malloc(sizeof *w);
    *w = (s_write_t){dst, value, sleep_ms};
    OK(troupe_stream_schedule(s, s_write_work, w, troupe_free));
}

static troupe_status_t s_op_work(void *arg, troupe_dqueue_t *q)
{
    s_push(q, (s_op_t){(int)(intptr_t)arg, NULL, 0, NULL, 0});
    return TROUPE_OK;
}

typedef struct s_env {
    troupe_driver_t *drv;
    troupe_stream_t *s[3];
} s_env_t;

/* Streams 0 and 1 on device 0, stream 2 on device 1. */
static void s_env_open(s_env_t *e)
{
    memset(e, 0, sizeof *e);
    atomic_store(&s_dev_failed[0], false);
    atomic_store(&s_dev_failed[1], false);
    atomic_store(&s_event_waits, 0);
    atomic_store(&s_unblock, false);
    atomic_store(&s_launches, 0);
    atomic_store(&s_captures, 0);
    atomic_store(&s_replays, 0);
    atomic_store(&s_graph_releases, 0);
    atomic_store(&s_capture_fails, false);
    atomic_store(&s_graphs_stale, false);
    troupe_driver_graph_stats_reset();
    OK(troupe_driver_open(&s_fake_vt, &e->drv));
    for (int i = 0; i < 3; i++)
        OK(troupe__stream_actor_new(&s_fake_vt, e->drv, i < 2 ? 0 : 1, i, false, &e->s[i]));
}

static void s_env_close(s_env_t *e)
{
    atomic_store(&s_unblock, true);
    for (int i = 0; i < 3; i++)
        troupe_stream_release(&e->s[i]);
    troupe__async_driver_closing(e->drv);
    troupe_driver_close(e->drv);
}

/* Whether the device's poller is on the status board, waiting for `ev` (its one event in
 * flight). */
static bool s_polled(troupe_event_t *ev)
{
    troupe__board_rec_t recs[TROUPE__BOARD_SLOTS];
    size_t nrec = troupe__board_snapshot(recs, TROUPE__BOARD_SLOTS, NULL);
    bool polled = false;
    for (size_t i = 0; i < nrec; i++)
        polled |= recs[i].kind == TROUPE__BOARD_DEVICE && recs[i].state == TROUPE__BOARD_WAITING &&
                  strcmp(recs[i].wait_on, troupe_event_name(ev)) == 0 && recs[i].queue == 1;
    return polled;
}

/* Polls `cond` every millisecond until it holds or LONG_WAIT passed (the caller asserts it):
 * what an actor does in its own thread is waited for, not slept for, so a loaded machine only
 * makes the test slower. */
#define S_UNTIL(cond)                                                                              \
    for (int64_t until__ = troupe_deadline_after(LONG_WAIT);                                       \
         !(cond) && troupe_deadline_remaining(until__) > 0;)                                       \
    rtu_sleep_ms(1)

/* Holds stream s's device queue (S_OP_BLOCK) until s_unblock is set: what is scheduled after it
 * stays pending on the device however slowly the test's own thread runs. */
static void s_hold_device(troupe_stream_t *s)
{
    OK(troupe_stream_schedule(s, s_op_work, (void *)(intptr_t)S_OP_BLOCK, NULL));
}

/* ---- tests ------------------------------------------------------------------------------ */

Test(async, a_record_completes_when_the_device_gets_there)
{
    s_env_t e;
    s_env_open(&e);
    atomic_int x = 0;
    s_hold_device(e.s[0]);
    s_write(e.s[0], &x, 7, 0);
    troupe_event_t *ev = NULL;
    OK(troupe_stream_record(e.s[0], &ev));
    /* The actor hands everything to the device queue and is done; the device is held. */
    S_UNTIL(troupe_stream_is_idle(e.s[0]) && s_polled(ev));
    cr_assert(troupe_stream_is_idle(e.s[0]), "the actor itself is idle");
    /* the status board shows the poller's wait */
    cr_assert(s_polled(ev), "the device's poller is on the status board, waiting for the event");
    cr_assert(!troupe_event_is_done(ev), "the event waits for the device, not for the actor");
    cr_assert_eq(atomic_load(&x), 0);
    atomic_store(&s_unblock, true);
    OK(troupe_event_sync(ev, LONG_WAIT));
    cr_assert_eq(atomic_load(&x), 7, "what comes before the event is done when it is");
    troupe_event_release(&ev);
    s_env_close(&e);
}

static void s_count_cb(void *user, troupe_event_t *ev, troupe_status_t st)
{
    (void)ev;
    atomic_fetch_add((atomic_int *)user, st == TROUPE_OK ? 1 : 100);
}

Test(async, the_poller_completes_events_nobody_syncs)
{
    s_env_t e;
    s_env_open(&e);
    atomic_int x = 0, fired = 0;
    troupe_event_t *ev[8];
    for (int i = 0; i < 8; i++) {
        s_write(e.s[0], &x, i, 2);
        OK(troupe_stream_record(e.s[0], &ev[i]));
        OK(troupe_event_subscribe(ev[i], s_count_cb, &fired));
    }
    int64_t deadline = troupe_deadline_after(LONG_WAIT);
    while (atomic_load(&fired) < 8 && troupe_deadline_remaining(deadline) > 0)
        rtu_sleep_ms(1);
    cr_assert_eq(atomic_load(&fired), 8, "every subscriber called once, done");
    cr_assert_eq(atomic_load(&x), 7);
    for (int i = 0; i < 8; i++)
        troupe_event_release(&ev[i]);
    s_env_close(&e);
}

Test(async, a_wait_on_the_same_device_is_ordered_on_the_device)
{
    s_env_t e;
    s_env_open(&e);
    atomic_int x = 0, y = 0;
    s_hold_device(e.s[0]);
    s_write(e.s[0], &x, 1, 0);
    troupe_event_t *ev = NULL;
    OK(troupe_stream_record(e.s[0], &ev));
    S_UNTIL(troupe_stream_is_idle(e.s[0]));
    cr_assert(troupe_stream_is_idle(e.s[0]), "stream 0's actor has recorded the device event");
    OK(troupe_stream_wait_for(e.s[1], ev));
    s_write(e.s[1], &y, 2, 0);
    troupe_event_t *after = NULL;
    OK(troupe_stream_record(e.s[1], &after));
    /* Stream 1's actor does not park: the wait goes to its device queue. */
    S_UNTIL(troupe_stream_is_idle(e.s[1]));
    cr_assert(troupe_stream_is_idle(e.s[1]), "the actor went past the WAIT");
    cr_assert_eq(atomic_load(&s_event_waits), 1, "one device-side wait");
    cr_assert_eq(atomic_load(&y), 0, "but the device did not");
    atomic_store(&s_unblock, true);
    OK(troupe_event_sync(after, LONG_WAIT));
    cr_assert(atomic_load(&x) == 1 && atomic_load(&y) == 2);
    troupe_event_release(&after);
    troupe_event_release(&ev);
    s_env_close(&e);
}

Test(async, a_wait_on_another_device_parks_the_queue)
{
    s_env_t e;
    s_env_open(&e);
    atomic_int x = 0, y = 0;
    s_hold_device(e.s[0]);
    s_write(e.s[0], &x, 1, 0);
    troupe_event_t *ev = NULL;
    OK(troupe_stream_record(e.s[0], &ev));
    S_UNTIL(troupe_stream_is_idle(e.s[0]));
    cr_assert(troupe_stream_is_idle(e.s[0]), "stream 0's actor has recorded the device event");
    OK(troupe_stream_wait_for(e.s[2], ev)); /* device 1 waits for device 0 */
    s_write(e.s[2], &y, 2, 0);
    troupe_event_t *after = NULL;
    OK(troupe_stream_record(e.s[2], &after));
    rtu_sleep_ms(30); /* time for a wrong device-side wait to show */
    cr_assert(!troupe_stream_is_idle(e.s[2]), "stream 2 is parked on the host");
    cr_assert_eq(atomic_load(&s_event_waits), 0);
    cr_assert_eq(atomic_load(&y), 0);
    atomic_store(&s_unblock, true);
    OK(troupe_event_sync(after, LONG_WAIT));
    cr_assert(atomic_load(&x) == 1 && atomic_load(&y) == 2);
    troupe_event_release(&after);
    troupe_event_release(&ev);
    s_env_close(&e);
}

Test(async, a_device_fault_fails_the_next_events_and_their_dependants)
{
    s_env_t e;
    s_env_open(&e);
    atomic_int x = 0;
    troupe_event_t *good = NULL, *bad = NULL;
    s_write(e.s[0], &x, 1, 10);
    OK(troupe_stream_record(e.s[0], &good));
    OK(troupe_stream_schedule(e.s[0], s_op_work, (void *)(intptr_t)S_OP_FAULT, NULL));
    OK(troupe_stream_record(e.s[0], &bad));
    /* A stream of the other device waits on the failed event (parks, then fails). */
    OK(troupe_stream_wait_for(e.s[2], bad));
    OK(troupe_event_sync(good, LONG_WAIT));
    cr_assert_eq(troupe_event_sync(bad, LONG_WAIT), TROUPE_DEVICE_ERROR);
    cr_assert(strstr(troupe_last_error(), "fakeErrorIllegalAddress") &&
                  strstr(troupe_last_error(), troupe_event_name(bad)),
              "%s", troupe_last_error());
    troupe_status_t st = troupe_stream_await(e.s[2], LONG_WAIT);
    cr_assert_eq(st, TROUPE_DEVICE_ERROR, "the dependant fails: %s", troupe_last_error());
    cr_assert(strstr(troupe_last_error(), "fakeErrorIllegalAddress"), "%s", troupe_last_error());
    /* The faulted stream's own await reports the device error too. */
    cr_assert_eq(troupe_stream_await(e.s[0], LONG_WAIT), TROUPE_DEVICE_ERROR);
    troupe_event_release(&good);
    troupe_event_release(&bad);
    s_env_close(&e);
}

Test(async, await_and_all_work_cover_the_device)
{
    s_env_t e;
    s_env_open(&e);
    atomic_int x = 0;
    s_hold_device(e.s[0]);
    s_write(e.s[0], &x, 5, 80);
    S_UNTIL(troupe_stream_is_idle(e.s[0]));
    cr_assert(troupe_stream_is_idle(e.s[0]));
    troupe_event_t *all = NULL;
    OK(troupe_stream_all_work(e.s[0], &all));
    cr_assert(!troupe_event_is_done(all), "all_work is not done while the device works");
    atomic_store(&s_unblock, true); /* the write still takes 80 ms on the device */
    OK(troupe_stream_await(e.s[0], LONG_WAIT));
    cr_assert_eq(atomic_load(&x), 5, "await returned after the device's work");
    OK(troupe_event_sync(all, LONG_WAIT));
    troupe_event_release(&all);
    s_env_close(&e);
}

Test(async, stopping_the_pollers_fails_what_never_completed)
{
    s_env_t e;
    s_env_open(&e);
    s_hold_device(e.s[0]);
    troupe_event_t *ev = NULL;
    OK(troupe_stream_record(e.s[0], &ev));
    S_UNTIL(s_polled(ev));
    cr_assert(s_polled(ev), "recorded and handed to the poller; the device is blocked");
    troupe__async_driver_closing(e.drv);
    cr_assert_eq(troupe_event_sync(ev, LONG_WAIT), TROUPE_CANCELLED);
    cr_assert(strstr(troupe_last_error(), "fake:0:poller stopped"), "%s", troupe_last_error());
    troupe_event_release(&ev);
    s_env_close(&e);
}

/* ---- the graph policy (devices/graph_impl.h) through the fake driver ------------------------ */

typedef struct s_run {
    troupe_driver_t *drv;
    troupe_dcode_t *code;
    int64_t index, offset;
} s_run_t;

static troupe_status_t s_run_work(void *arg, troupe_dqueue_t *q)
{
    s_run_t *r = arg;
    troupe_karg_t args[2] = {{.kind = TROUPE_KARG_STATIC_IDX, .value = r->index},
                             {.kind = TROUPE_KARG_BUFFER, .buf = {0, r->offset, 64}}};
    return troupe_driver_launch(r->drv, q, r->code, args, 2);
}

/* Schedules one launch of code on stream s with static index `index` and a buffer at `offset`. */
static void s_run(s_env_t *e, troupe_stream_t *s, troupe_dcode_t *code, int64_t index,
                  int64_t offset)
{
    s_run_t *r = troupe_malloc(sizeof *r);
    *r = (s_run_t){e->drv, code, index, offset};
    OK(troupe_stream_schedule(s, s_run_work, r, troupe_free));
}

/* Waits for everything scheduled on s so far, on the device too. */
static void s_drain(troupe_stream_t *s)
{
    troupe_event_t *ev = NULL;
    OK(troupe_stream_record(s, &ev));
    OK(troupe_event_sync(ev, LONG_WAIT));
    troupe_event_release(&ev);
}

static void s_stats_are(uint64_t plain, uint64_t captures, uint64_t replays)
{
    troupe_graph_stats_t st;
    troupe_driver_graph_stats(&st);
    cr_assert_eq(st.plain, plain, "plain launches: %llu, expected %llu",
                 (unsigned long long)st.plain, (unsigned long long)plain);
    cr_assert_eq(st.captures, captures, "captures: %llu, expected %llu",
                 (unsigned long long)st.captures, (unsigned long long)captures);
    cr_assert_eq(st.replays, replays, "replays: %llu, expected %llu",
                 (unsigned long long)st.replays, (unsigned long long)replays);
    cr_assert_eq(atomic_load(&s_launches), (int)plain, "the driver saw the plain launches");
    cr_assert_eq(atomic_load(&s_replays), (int)replays, "the driver saw the replays");
}

Test(async_graphs, plain_runs_first_then_one_capture_then_replays)
{
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
    s_env_t e;
    s_env_open(&e);
    troupe_dcode_t code = {0};
    for (int i = 0; i < TROUPE_GRAPH_WARMUP_RUNS; i++)
        s_run(&e, e.s[0], &code, 3, 0);
    s_drain(e.s[0]);
    s_stats_are(TROUPE_GRAPH_WARMUP_RUNS, 0, 0);
    s_run(&e, e.s[0], &code, 3, 0); /* captured, and that run is the graph's first launch */
    s_drain(e.s[0]);
    s_stats_are(TROUPE_GRAPH_WARMUP_RUNS, 1, 1);
    for (int i = 0; i < 5; i++)
        s_run(&e, e.s[0], &code, 3, 0);
    s_drain(e.s[0]);
    s_stats_are(TROUPE_GRAPH_WARMUP_RUNS, 1, 6);
    cr_assert_eq(atomic_load(&code.out[3]), TROUPE_GRAPH_WARMUP_RUNS + 6, "every run ran once");
    /* the same code on another queue is its own binding: warmed up and captured there */
    for (int i = 0; i < TROUPE_GRAPH_WARMUP_RUNS + 1; i++)
        s_run(&e, e.s[1], &code, 3, 0);
    s_drain(e.s[1]);
    s_stats_are(2 * TROUPE_GRAPH_WARMUP_RUNS, 2, 7);
    troupe_driver_code_release(e.drv, &code); /* forgets its graphs (no code_release entry) */
    cr_assert_eq(atomic_load(&s_graph_releases), 2, "the code's two graphs were released");
    s_env_close(&e);
}

Test(async_graphs, replays_with_changing_static_indices_give_the_right_results)
{
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
    s_env_t e;
    s_env_open(&e);
    troupe_dcode_t code = {0};
    enum { NB = 4, ROUNDS = 10 }; /* NB minibatch indices, cycled: each binding its own graph */
    for (int r = 0; r < ROUNDS; r++)
        for (int b = 0; b < NB; b++)
            s_run(&e, e.s[0], &code, b, b); /* the index and the buffer offset change together */
    s_drain(e.s[0]);
    for (int b = 0; b < NB; b++)
        cr_assert_eq(atomic_load(&code.out[b]), ROUNDS * (1 + b), "index %d: %d, expected %d", b,
                     atomic_load(&code.out[b]), ROUNDS * (1 + b));
    s_stats_are(NB * TROUPE_GRAPH_WARMUP_RUNS, NB, NB * (ROUNDS - TROUPE_GRAPH_WARMUP_RUNS));
    s_env_close(&e);
    cr_assert_eq(atomic_load(&s_graph_releases), NB, "closing the queue released its graphs");
}

Test(async_graphs, bindings_that_keep_changing_stay_plain_and_right)
{
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
    s_env_t e;
    s_env_open(&e);
    troupe_dcode_t code = {0};
    enum { NB = TROUPE_GRAPH_SLOTS + 4, ROUNDS = 12 }; /* more bindings than slots, cycled */
    for (int r = 0; r < ROUNDS; r++)
        for (int b = 0; b < NB; b++)
            s_run(&e, e.s[0], &code, b, 0);
    s_drain(e.s[0]);
    for (int b = 0; b < NB; b++)
        cr_assert_eq(atomic_load(&code.out[b]), ROUNDS, "index %d ran every round", b);
    troupe_graph_stats_t st;
    troupe_driver_graph_stats(&st);
    cr_assert_eq(st.captures, 0, "a binding is evicted before its warm-up ends: no capture");
    cr_assert_eq(st.refused, 1, "the code turned plain after %d evictions",
                 TROUPE_GRAPH_MAX_EVICTIONS);
    s_stats_are(NB * ROUNDS, 0, 0);
    s_env_close(&e);
}

/* Churn beside bindings that repeat (a few hot minibatches, a new one now and then) is no
 * reason to give up: each replay starts the eviction count again, so more than
 * TROUPE_GRAPH_MAX_EVICTIONS evictions spread over a long run keep the hot graphs. */
Test(async_graphs, evictions_between_replays_do_not_turn_the_code_plain)
{
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
    s_env_t e;
    s_env_open(&e);
    troupe_dcode_t code = {0};
    enum { HOT = 4, ROUNDS = TROUPE_GRAPH_MAX_EVICTIONS + 36, COLD = 15 };
    for (int r = 0; r < ROUNDS; r++) {
        for (int b = 0; b < HOT; b++)
            s_run(&e, e.s[0], &code, b, 0);
        s_run(&e, e.s[0], &code, COLD, 64 * (r + 1)); /* a binding seen once */
    }
    s_drain(e.s[0]);
    for (int b = 0; b < HOT; b++)
        cr_assert_eq(atomic_load(&code.out[b]), ROUNDS, "index %d ran every round", b);
    int cold = 0; /* the fake kernel adds 1 + the buffer's offset to out[index] */
    for (int r = 0; r < ROUNDS; r++)
        cold += 1 + 64 * (r + 1);
    cr_assert_eq(atomic_load(&code.out[COLD]), cold, "every cold binding ran once");
    troupe_graph_stats_t st;
    troupe_driver_graph_stats(&st);
    cr_assert_eq(st.refused, 0, "%d evictions between replays turned the code plain",
                 ROUNDS - (TROUPE_GRAPH_SLOTS - HOT));
    s_stats_are(HOT * TROUPE_GRAPH_WARMUP_RUNS + ROUNDS, HOT,
                HOT * (ROUNDS - TROUPE_GRAPH_WARMUP_RUNS));
    s_env_close(&e);
}

static char *s_read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char *buf = troupe_calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static size_t s_count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

Test(async_graphs, a_failing_capture_falls_back_to_plain_launches_and_says_so_once)
{
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
    char path[] = "/tmp/troupe_test_graph_log_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    OK(troupe_log_set_file(path));
    OK(troupe_log_configure("debug:devices"));
    s_env_t e;
    s_env_open(&e);
    atomic_store(&s_capture_fails, true);
    troupe_dcode_t code = {0};
    for (int i = 0; i < 10; i++)
        s_run(&e, e.s[0], &code, 1, 0);
    s_drain(e.s[0]);
    cr_assert_eq(troupe_stream_status(e.s[0]), TROUPE_OK, "the failure is not the user's");
    cr_assert_eq(atomic_load(&code.out[1]), 10, "every run ran, plainly");
    troupe_graph_stats_t st;
    troupe_driver_graph_stats(&st);
    cr_assert_eq(st.capture_failures, 1);
    cr_assert_eq(st.refused, 1);
    s_stats_are(10, 1, 0); /* one capture tried, never again */
    s_env_close(&e);
    OK(troupe_log_configure("warn"));
    OK(troupe_log_set_file(NULL));
    char *log = s_read_file(path);
    remove(path);
    cr_assert_eq(s_count(log, "fake graphs: plain launches from now on"), 1, "log:\n%s", log);
    cr_assert_eq(s_count(log, "fakeErrorStreamCaptureUnsupported"), 1, "log:\n%s", log);
    troupe_free(log);
}

Test(async_graphs, a_stale_graph_is_dropped_and_the_run_stays_right)
{
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
    s_env_t e;
    s_env_open(&e);
    troupe_dcode_t code = {0};
    for (int i = 0; i < TROUPE_GRAPH_WARMUP_RUNS + 2; i++)
        s_run(&e, e.s[0], &code, 2, 0);
    s_drain(e.s[0]);
    s_stats_are(TROUPE_GRAPH_WARMUP_RUNS, 1, 2);
    atomic_store(&s_graphs_stale, true); /* e.g. its pool was freed and allocated again */
    s_run(&e, e.s[0], &code, 2, 0);
    s_drain(e.s[0]);
    cr_assert_eq(atomic_load(&s_graph_releases), 1, "the stale graph was released");
    atomic_store(&s_graphs_stale, false);
    for (int i = 0; i < TROUPE_GRAPH_WARMUP_RUNS + 1; i++) /* warmed up and captured again */
        s_run(&e, e.s[0], &code, 2, 0);
    s_drain(e.s[0]);
    s_stats_are(2 * TROUPE_GRAPH_WARMUP_RUNS + 1, 2, 3);
    cr_assert_eq(atomic_load(&code.out[2]), 2 * TROUPE_GRAPH_WARMUP_RUNS + 4, "every run ran once");
    troupe_graph_stats_t st;
    troupe_driver_graph_stats(&st);
    cr_assert_eq(st.stale, 1);
    cr_assert_eq(st.refused, 0, "a stale graph does not turn the code plain");
    s_env_close(&e);
}

Test(async_graphs, off_never_captures)
{
    troupe_driver_set_graphs(TROUPE_GRAPHS_OFF);
    cr_assert_eq(troupe_driver_graphs(), TROUPE_GRAPHS_OFF);
    s_env_t e;
    s_env_open(&e);
    troupe_dcode_t code = {0};
    for (int i = 0; i < 20; i++)
        s_run(&e, e.s[0], &code, 5, 0);
    s_drain(e.s[0]);
    s_stats_are(20, 0, 0);
    cr_assert_eq(atomic_load(&s_captures), 0, "the driver was never asked to capture");
    cr_assert_eq(atomic_load(&code.out[5]), 20);
    s_env_close(&e);
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
}

Test(async_graphs, the_environment_sets_the_mode)
{
    /* read once, at the first query, in this test's own process (criterion forks each test) */
    setenv("TROUPE_CUDA_GRAPHS", "off", 1);
    cr_assert_eq(troupe_driver_graphs(), TROUPE_GRAPHS_OFF);
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO); /* the API equivalent overrides it */
    cr_assert_eq(troupe_driver_graphs(), TROUPE_GRAPHS_AUTO);
}
