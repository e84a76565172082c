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
#include "base/status.h"
#include "devices/device.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define LONG_WAIT (20000 * MS)

/* ---- the fake asynchronous driver ------------------------------------------------------- */

enum { S_OP_WRITE = 0, S_OP_RECORD, S_OP_WAIT, S_OP_FAULT, S_OP_BLOCK };

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

/* ---- tests ------------------------------------------------------------------------------ */

Test(async, a_record_completes_when_the_device_gets_there)
{
    s_env_t e;
    s_env_open(&e);
    atomic_int x = 0;
    s_write(e.s[0], &x, 7, 100);
    troupe_event_t *ev = NULL;
    OK(troupe_stream_record(e.s[0], &ev));
    /* The actor enqueued both at once; the device is still sleeping. */
    rtu_sleep_ms(30);
    cr_assert(!troupe_event_is_done(ev), "the event waits for the device, not for the actor");
    cr_assert(troupe_stream_is_idle(e.s[0]), "the actor itself is idle");
    troupe__board_rec_t recs[TROUPE__BOARD_SLOTS]; /* the status board shows the poller's wait */
    size_t nrec = troupe__board_snapshot(recs, TROUPE__BOARD_SLOTS, NULL);
    bool polled = false;
    for (size_t i = 0; i < nrec; i++)
        polled |= recs[i].kind == TROUPE__BOARD_DEVICE && recs[i].state == TROUPE__BOARD_WAITING &&
                  strcmp(recs[i].wait_on, troupe_event_name(ev)) == 0 && recs[i].queue == 1;
    cr_assert(polled, "the device's poller is on the status board, waiting for the event");
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
    s_write(e.s[0], &x, 1, 150);
    troupe_event_t *ev = NULL;
    OK(troupe_stream_record(e.s[0], &ev));
    rtu_sleep_ms(20); /* stream 0's actor has recorded the device event */
    OK(troupe_stream_wait_for(e.s[1], ev));
    s_write(e.s[1], &y, 2, 0);
    troupe_event_t *after = NULL;
    OK(troupe_stream_record(e.s[1], &after));
    rtu_sleep_ms(40);
    /* Stream 1's actor did not park: the wait went to its device queue. */
    cr_assert(troupe_stream_is_idle(e.s[1]), "the actor went past the WAIT");
    cr_assert_eq(atomic_load(&s_event_waits), 1, "one device-side wait");
    cr_assert_eq(atomic_load(&y), 0, "but the device did not");
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
    s_write(e.s[0], &x, 1, 120);
    troupe_event_t *ev = NULL;
    OK(troupe_stream_record(e.s[0], &ev));
    rtu_sleep_ms(20);
    OK(troupe_stream_wait_for(e.s[2], ev)); /* device 1 waits for device 0 */
    s_write(e.s[2], &y, 2, 0);
    troupe_event_t *after = NULL;
    OK(troupe_stream_record(e.s[2], &after));
    rtu_sleep_ms(30);
    cr_assert(!troupe_stream_is_idle(e.s[2]), "stream 2 is parked on the host");
    cr_assert_eq(atomic_load(&s_event_waits), 0);
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
    s_write(e.s[0], &x, 5, 80);
    rtu_sleep_ms(10);
    cr_assert(troupe_stream_is_idle(e.s[0]));
    troupe_event_t *all = NULL;
    OK(troupe_stream_all_work(e.s[0], &all));
    cr_assert(!troupe_event_is_done(all), "all_work is not done while the device works");
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
    OK(troupe_stream_schedule(e.s[0], s_op_work, (void *)(intptr_t)S_OP_BLOCK, NULL));
    troupe_event_t *ev = NULL;
    OK(troupe_stream_record(e.s[0], &ev));
    rtu_sleep_ms(20); /* recorded and handed to the poller; the device is blocked */
    troupe__async_driver_closing(e.drv);
    cr_assert_eq(troupe_event_sync(ev, LONG_WAIT), TROUPE_CANCELLED);
    cr_assert(strstr(troupe_last_error(), "fake:0:poller stopped"), "%s", troupe_last_error());
    troupe_event_release(&ev);
    s_env_close(&e);
}
