/* Tests for actors/stream.h: FIFO order, RECORD/sync, WAIT across streams, deadlines, exact
 * failure propagation (within a stream and through WAIT), cancellation on destroy, the pipe's
 * message schema (malformed messages), debug info, and a multi-stream stress run. Each case
 * runs on inline (sync backend) and threaded (cpu backend) streams where meaningful. */
#define _POSIX_C_SOURCE 200809L
#include "actors/actor.h"
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

#define LONG_WAIT (60000 * MS)

static troupe_stream_t *s_new(bool inline_mode, int id)
{
    troupe_stream_t *s = NULL;
    troupe_status_t st = troupe__stream_actor_new(NULL, NULL, 0, id, inline_mode, &s);
    cr_assert_eq(st, TROUPE_OK, "stream_new: %s", troupe_last_error());
    return s;
}

/* ---- work items ---------------------------------------------------------------------------- */

typedef struct {
    atomic_long next; /* FIFO check: item i expects next == i */
    atomic_long errors;
    atomic_long runs;
    atomic_long dtors;
} s_fifo_t;

typedef struct {
    s_fifo_t *f;
    long index;
} s_fifo_item_t;

static troupe_status_t s_fifo_work(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    s_fifo_item_t *it = (s_fifo_item_t *)arg;
    long expected = atomic_fetch_add(&it->f->next, 1);
    if (expected != it->index)
        atomic_fetch_add(&it->f->errors, 1);
    atomic_fetch_add(&it->f->runs, 1);
    return TROUPE_OK;
}

static void s_fifo_dtor(void *arg)
{
    s_fifo_item_t *it = (s_fifo_item_t *)arg;
    atomic_fetch_add(&it->f->dtors, 1);
    troupe_free(it);
}

static troupe_status_t s_schedule_fifo(troupe_stream_t *s, s_fifo_t *f, long index)
{
    s_fifo_item_t *it = (s_fifo_item_t *)troupe_malloc(sizeof *it);
    it->f = f;
    it->index = index;
    return troupe_stream_schedule(s, s_fifo_work, it, s_fifo_dtor);
}

static troupe_status_t s_fail_work(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    return troupe__error(TROUPE_DEVICE_ERROR, "boom in kernel %ld", (long)(intptr_t)arg);
}

static troupe_status_t s_sleep_work(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    rtu_sleep_ms((int)(intptr_t)arg);
    return TROUPE_OK;
}

/* ---- FIFO ---------------------------------------------------------------------------------- */

static void s_fifo_1000(bool inline_mode)
{
    troupe_stream_t *s = s_new(inline_mode, 1);
    s_fifo_t f = {0};
    for (long i = 0; i < 1000; i++)
        cr_assert_eq(s_schedule_fifo(s, &f, i), TROUPE_OK);
    cr_assert_eq(troupe_stream_await(s, LONG_WAIT), TROUPE_OK, "%s", troupe_last_error());
    cr_assert(troupe_stream_is_idle(s));
    cr_assert_eq(atomic_load(&f.runs), 1000);
    cr_assert_eq(atomic_load(&f.errors), 0, "items ran out of order");
    cr_assert_eq(atomic_load(&f.dtors), 1000);
    troupe_stream_release(&s);
    cr_assert_null(s);
}

Test(stream_inline, fifo_order_of_1000_items)
{
    s_fifo_1000(true);
}
Test(stream_threaded, fifo_order_of_1000_items)
{
    s_fifo_1000(false);
}

/* ---- record / sync ------------------------------------------------------------------------- */

static void s_record_sync(bool inline_mode)
{
    troupe_stream_t *s = s_new(inline_mode, 2);
    s_fifo_t f = {0};
    troupe_event_t *evs[10] = {NULL};
    for (long i = 0; i < 100; i++) {
        cr_assert_eq(s_schedule_fifo(s, &f, i), TROUPE_OK);
        if (i % 10 == 9)
            cr_assert_eq(troupe_stream_record(s, &evs[i / 10]), TROUPE_OK);
    }
    for (int k = 0; k < 10; k++) {
        cr_assert_eq(troupe_event_sync(evs[k], LONG_WAIT), TROUPE_OK);
        /* Everything before the record ran. */
        cr_assert_geq(atomic_load(&f.runs), 10 * (k + 1));
        cr_assert_not_null(strstr(troupe_event_name(evs[k]), "host:0:2#"));
        troupe_event_release(&evs[k]);
    }
    troupe_event_t *all = NULL;
    cr_assert_eq(troupe_stream_all_work(s, &all), TROUPE_OK);
    cr_assert_eq(troupe_event_sync(all, LONG_WAIT), TROUPE_OK);
    troupe_event_release(&all);
    cr_assert_eq(troupe_stream_await(s, LONG_WAIT), TROUPE_OK);
    cr_assert_eq(atomic_load(&f.errors), 0);
    troupe_stream_release(&s);
}

Test(stream_inline, record_then_sync)
{
    s_record_sync(true);
}
Test(stream_threaded, record_then_sync)
{
    s_record_sync(false);
}

/* ---- deadlines ----------------------------------------------------------------------------- */

static void s_deadline(bool inline_mode)
{
    troupe_stream_t *s = s_new(inline_mode, 3);
    troupe_event_t *never = NULL;
    cr_assert_eq(troupe_event_new("never", &never), TROUPE_OK);
    s_fifo_t f = {0};
    cr_assert_eq(troupe_stream_wait_for(s, never), TROUPE_OK);
    cr_assert_eq(s_schedule_fifo(s, &f, 0), TROUPE_OK);
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_stream_record(s, &ev), TROUPE_OK);

    int64_t t0 = troupe_now_ns();
    cr_assert_eq(troupe_event_sync(ev, 50 * MS), TROUPE_DEADLINE_EXCEEDED);
    int64_t dt = troupe_now_ns() - t0;
    cr_assert_geq(dt, 50 * MS);
    cr_assert_lt(dt, 10000 * MS, "overshot: %lld ns", (long long)dt);
    cr_assert_not_null(strstr(troupe_last_error(), troupe_event_name(ev)), "%s",
                       troupe_last_error());

    t0 = troupe_now_ns();
    cr_assert_eq(troupe_stream_await(s, 50 * MS), TROUPE_DEADLINE_EXCEEDED);
    cr_assert_lt(troupe_now_ns() - t0, 10000 * MS);
    cr_assert_not_null(strstr(troupe_last_error(), "parked on event never"), "%s",
                       troupe_last_error());
    cr_assert_not(troupe_stream_is_idle(s));
    cr_assert_eq(atomic_load(&f.runs), 0, "work behind a pending WAIT ran");

    /* Completing the awaited event releases the queue. */
    troupe_event_complete(never, TROUPE_OK, NULL);
    cr_assert_eq(troupe_event_sync(ev, LONG_WAIT), TROUPE_OK);
    cr_assert_eq(troupe_stream_await(s, LONG_WAIT), TROUPE_OK);
    cr_assert_eq(atomic_load(&f.runs), 1);
    troupe_event_release(&ev);
    troupe_event_release(&never);
    troupe_stream_release(&s);
}

Test(stream_inline, sync_deadline_on_a_stream_parked_forever)
{
    s_deadline(true);
}
Test(stream_threaded, sync_deadline_on_a_stream_parked_forever)
{
    s_deadline(false);
}

/* ---- cross-stream wait --------------------------------------------------------------------- */

typedef struct {
    atomic_int a_done;
    atomic_int b_saw_a;
    atomic_llong a_end_ns, b_start_ns;
} s_cross_t;

static troupe_status_t s_a_work(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    s_cross_t *c = (s_cross_t *)arg;
    rtu_sleep_ms(30);
    atomic_store(&c->a_end_ns, troupe_now_ns());
    atomic_store(&c->a_done, 1);
    return TROUPE_OK;
}

static troupe_status_t s_b_work(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    s_cross_t *c = (s_cross_t *)arg;
    atomic_store(&c->b_start_ns, troupe_now_ns());
    atomic_store(&c->b_saw_a, atomic_load(&c->a_done));
    return TROUPE_OK;
}

/* A (a_inline) runs slow work and records; B (b_inline) waits for it, then works. When A is
 * inline its work runs inside schedule(), so it is driven from a helper thread. */
typedef struct {
    troupe_stream_t *a;
    s_cross_t *c;
    troupe_event_t *ev;
} s_drive_a_t;

static void *s_drive_a(void *arg)
{
    s_drive_a_t *d = (s_drive_a_t *)arg;
    rtu_sleep_ms(20);
    if (troupe_stream_schedule(d->a, s_a_work, d->c, NULL) != TROUPE_OK)
        return (void *)1;
    /* Complete the event B waits on through an ordinary RECORD of A. */
    troupe_event_t *rec = NULL;
    if (troupe_stream_record(d->a, &rec) != TROUPE_OK)
        return (void *)1;
    if (troupe_event_sync(rec, LONG_WAIT) != TROUPE_OK)
        return (void *)1;
    troupe_event_complete(d->ev, TROUPE_OK, NULL);
    troupe_event_release(&rec);
    return NULL;
}

static void s_cross_wait(bool a_inline, bool b_inline)
{
    troupe_stream_t *a = s_new(a_inline, 1);
    troupe_stream_t *b = s_new(b_inline, 2);
    s_cross_t c = {0};

    /* Direct form: A's own RECORD event, scheduled first. */
    cr_assert_eq(troupe_stream_schedule(a, s_sleep_work, (void *)(intptr_t)1, NULL), TROUPE_OK);
    if (!a_inline) {
        cr_assert_eq(troupe_stream_schedule(a, s_a_work, &c, NULL), TROUPE_OK);
        troupe_event_t *ea = NULL;
        cr_assert_eq(troupe_stream_record(a, &ea), TROUPE_OK);
        cr_assert_eq(troupe_stream_wait_for(b, ea), TROUPE_OK);
        troupe_event_release(&ea); /* B holds its own reference */
        cr_assert_eq(troupe_stream_schedule(b, s_b_work, &c, NULL), TROUPE_OK);
    } else {
        /* Inline A runs its work inside schedule(): make B wait on an event a helper thread
         * completes after A's work, so B's work is really queued before A's. */
        troupe_event_t *ea = NULL;
        cr_assert_eq(troupe_event_new("a-done", &ea), TROUPE_OK);
        cr_assert_eq(troupe_stream_wait_for(b, ea), TROUPE_OK);
        cr_assert_eq(troupe_stream_schedule(b, s_b_work, &c, NULL), TROUPE_OK);
        s_drive_a_t d = {a, &c, ea};
        pthread_t t;
        pthread_create(&t, NULL, s_drive_a, &d);
        cr_assert_eq(troupe_stream_await(b, LONG_WAIT), TROUPE_OK, "%s", troupe_last_error());
        void *r;
        pthread_join(t, &r);
        cr_assert_null(r);
        troupe_event_release(&ea);
    }
    troupe_event_t *eb = NULL;
    cr_assert_eq(troupe_stream_record(b, &eb), TROUPE_OK);
    cr_assert_eq(troupe_event_sync(eb, LONG_WAIT), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(atomic_load(&c.b_saw_a), 1, "B's work ran before A's");
    cr_assert_geq(atomic_load(&c.b_start_ns), atomic_load(&c.a_end_ns));
    troupe_event_release(&eb);
    cr_assert_eq(troupe_stream_await(a, LONG_WAIT), TROUPE_OK);
    troupe_stream_release(&b);
    troupe_stream_release(&a);
}

Test(stream_threaded, cross_stream_wait_orders_work)
{
    s_cross_wait(false, false);
}
Test(stream_inline, cross_stream_wait_orders_work)
{
    s_cross_wait(true, true);
}
Test(stream_mixed, inline_waits_for_threaded)
{
    s_cross_wait(false, true);
}
Test(stream_mixed, threaded_waits_for_inline)
{
    s_cross_wait(true, false);
}

/* ---- failure propagation ------------------------------------------------------------------- */

static void s_failure_in_stream(bool inline_mode)
{
    troupe_stream_t *s = s_new(inline_mode, 4);
    s_fifo_t f = {0};
    cr_assert_eq(s_schedule_fifo(s, &f, 0), TROUPE_OK);
    troupe_event_t *before = NULL, *after = NULL, *after2 = NULL;
    cr_assert_eq(troupe_stream_record(s, &before), TROUPE_OK);
    cr_assert_eq(troupe_stream_schedule(s, s_fail_work, (void *)(intptr_t)42, NULL), TROUPE_OK);
    /* Work behind the failure is dropped (its destructor still runs). The stream may or may not
     * have failed yet (threaded), so accept OK or the failure here. */
    troupe_status_t st = s_schedule_fifo(s, &f, 1);
    cr_assert(st == TROUPE_OK || st == TROUPE_DEVICE_ERROR);
    st = troupe_stream_record(s, &after);
    cr_assert(st == TROUPE_OK || st == TROUPE_DEVICE_ERROR);

    cr_assert_eq(troupe_event_sync(before, LONG_WAIT), TROUPE_OK);
    if (after) {
        cr_assert_eq(troupe_event_sync(after, LONG_WAIT), TROUPE_DEVICE_ERROR);
        cr_assert_not_null(strstr(troupe_last_error(), "boom in kernel 42"), "%s",
                           troupe_last_error());
    }
    cr_assert_eq(troupe_stream_await(s, LONG_WAIT), TROUPE_DEVICE_ERROR);
    cr_assert_not_null(strstr(troupe_last_error(), "boom in kernel 42"));
    cr_assert_not_null(strstr(troupe_last_error(), troupe_stream_name(s)));
    cr_assert_eq(troupe_stream_status(s), TROUPE_DEVICE_ERROR);

    /* Later scheduling is refused with the failure, and consumes its argument. */
    long dtors = atomic_load(&f.dtors);
    cr_assert_eq(s_schedule_fifo(s, &f, 2), TROUPE_DEVICE_ERROR);
    cr_assert_not_null(strstr(troupe_last_error(), "boom in kernel 42"));
    cr_assert_eq(atomic_load(&f.dtors), dtors + 1);
    cr_assert_eq(troupe_stream_record(s, &after2), TROUPE_DEVICE_ERROR);
    cr_assert_null(after2);
    cr_assert_eq(troupe_stream_wait_for(s, before), TROUPE_DEVICE_ERROR);
    cr_assert_eq(troupe_stream_all_work(s, &after2), TROUPE_DEVICE_ERROR);

    cr_assert_eq(atomic_load(&f.runs), 1, "work after the failure ran");
    char *dbg = NULL;
    cr_assert_eq(troupe_stream_debug_info(s, &dbg), TROUPE_OK);
    cr_assert_not_null(strstr(dbg, "(failed (DEVICE_ERROR"), "%s", dbg);
    troupe_free(dbg);
    troupe_event_release(&before);
    troupe_event_release(&after);
    troupe_stream_release(&s);
    cr_assert_eq(atomic_load(&f.dtors), 3, "each of the 3 work arguments released once");
}

Test(stream_inline, failed_work_fails_later_events)
{
    s_failure_in_stream(true);
}
Test(stream_threaded, failed_work_fails_later_events)
{
    s_failure_in_stream(false);
}

static void s_failure_across(bool a_inline, bool b_inline)
{
    troupe_stream_t *a = s_new(a_inline, 1);
    troupe_stream_t *b = s_new(b_inline, 2);
    s_fifo_t fb = {0};
    troupe_event_t *gate = NULL;
    cr_assert_eq(troupe_event_new("gate", &gate), TROUPE_OK);

    /* A: wait for the gate (so B's schedule is fully queued first), then fail. */
    cr_assert_eq(troupe_stream_wait_for(a, gate), TROUPE_OK);
    cr_assert_eq(troupe_stream_schedule(a, s_fail_work, (void *)(intptr_t)7, NULL), TROUPE_OK);
    troupe_event_t *ea = NULL;
    cr_assert_eq(troupe_stream_record(a, &ea), TROUPE_OK);

    /* B: work before the WAIT runs, work behind it fails. */
    cr_assert_eq(s_schedule_fifo(b, &fb, 0), TROUPE_OK);
    troupe_event_t *b_before = NULL, *b_after = NULL;
    cr_assert_eq(troupe_stream_record(b, &b_before), TROUPE_OK);
    cr_assert_eq(troupe_stream_wait_for(b, ea), TROUPE_OK);
    cr_assert_eq(s_schedule_fifo(b, &fb, 1), TROUPE_OK);
    cr_assert_eq(troupe_stream_record(b, &b_after), TROUPE_OK);

    troupe_event_complete(gate, TROUPE_OK, NULL);

    cr_assert_eq(troupe_event_sync(ea, LONG_WAIT), TROUPE_DEVICE_ERROR);
    cr_assert_eq(troupe_event_sync(b_before, LONG_WAIT), TROUPE_OK);
    cr_assert_eq(troupe_event_sync(b_after, LONG_WAIT), TROUPE_DEVICE_ERROR);
    cr_assert_not_null(strstr(troupe_last_error(), "boom in kernel 7"), "%s", troupe_last_error());
    cr_assert_not_null(strstr(troupe_last_error(), troupe_event_name(ea)), "%s",
                       troupe_last_error());
    cr_assert_eq(troupe_stream_await(b, LONG_WAIT), TROUPE_DEVICE_ERROR);
    cr_assert_not_null(strstr(troupe_last_error(), troupe_stream_name(b)));
    cr_assert_eq(troupe_stream_await(a, LONG_WAIT), TROUPE_DEVICE_ERROR);
    cr_assert_eq(atomic_load(&fb.runs), 1, "B's work behind the failed WAIT ran");
    cr_assert_eq(atomic_load(&fb.dtors), 2);
    cr_assert_eq(s_schedule_fifo(b, &fb, 2), TROUPE_DEVICE_ERROR);

    troupe_event_release(&gate);
    troupe_event_release(&ea);
    troupe_event_release(&b_before);
    troupe_event_release(&b_after);
    troupe_stream_release(&b);
    troupe_stream_release(&a);
}

Test(stream_threaded, waiting_on_a_failed_event_fails_the_waiter)
{
    s_failure_across(false, false);
}
Test(stream_inline, waiting_on_a_failed_event_fails_the_waiter)
{
    s_failure_across(true, true);
}
Test(stream_mixed, inline_waiter_of_failed_threaded)
{
    s_failure_across(false, true);
}
Test(stream_mixed, threaded_waiter_of_failed_inline)
{
    s_failure_across(true, false);
}

static void s_wait_on_already_failed(bool inline_mode)
{
    troupe_stream_t *s = s_new(inline_mode, 5);
    troupe_event_t *bad = NULL, *ev = NULL;
    cr_assert_eq(troupe_event_new_completed("bad", TROUPE_TRANSPORT_ERROR, "MPI_ERR_OTHER", &bad),
                 TROUPE_OK);
    cr_assert_eq(troupe_stream_wait_for(s, bad), TROUPE_OK);
    cr_assert_eq(troupe_stream_record(s, &ev) == TROUPE_OK ||
                     troupe_stream_status(s) == TROUPE_TRANSPORT_ERROR,
                 true);
    if (ev) {
        cr_assert_eq(troupe_event_sync(ev, LONG_WAIT), TROUPE_TRANSPORT_ERROR);
        cr_assert_not_null(strstr(troupe_last_error(), "MPI_ERR_OTHER"));
    }
    cr_assert_eq(troupe_stream_await(s, LONG_WAIT), TROUPE_TRANSPORT_ERROR);
    troupe_event_release(&ev);
    troupe_event_release(&bad);
    troupe_stream_release(&s);
}

Test(stream_inline, wait_on_an_already_failed_event)
{
    s_wait_on_already_failed(true);
}
Test(stream_threaded, wait_on_an_already_failed_event)
{
    s_wait_on_already_failed(false);
}

/* ---- destroy with pending work ------------------------------------------------------------- */

static void s_destroy_cancels(bool inline_mode)
{
    troupe_stream_t *s = s_new(inline_mode, 6);
    troupe_event_t *never = NULL, *ev = NULL, *ev2 = NULL;
    cr_assert_eq(troupe_event_new("never", &never), TROUPE_OK);
    s_fifo_t f = {0};
    cr_assert_eq(troupe_stream_wait_for(s, never), TROUPE_OK);
    for (long i = 0; i < 10; i++)
        cr_assert_eq(s_schedule_fifo(s, &f, i), TROUPE_OK);
    cr_assert_eq(troupe_stream_record(s, &ev), TROUPE_OK);
    cr_assert_eq(troupe_stream_record(s, &ev2), TROUPE_OK);
    int64_t t0 = troupe_now_ns();
    troupe_stream_release(&s);
    cr_assert_lt(troupe_now_ns() - t0, 30000 * MS);
    cr_assert_eq(troupe_event_sync(ev, 0), TROUPE_CANCELLED);
    cr_assert_not_null(strstr(troupe_last_error(), "destroyed"), "%s", troupe_last_error());
    cr_assert_eq(troupe_event_sync(ev2, 0), TROUPE_CANCELLED);
    cr_assert_eq(atomic_load(&f.runs), 0);
    cr_assert_eq(atomic_load(&f.dtors), 10);
    /* The awaited event can still complete after the stream is gone. */
    troupe_event_complete(never, TROUPE_OK, NULL);
    troupe_event_release(&never);
    troupe_event_release(&ev);
    troupe_event_release(&ev2);
}

Test(stream_inline, destroy_cancels_pending_work)
{
    s_destroy_cancels(true);
}
Test(stream_threaded, destroy_cancels_pending_work)
{
    s_destroy_cancels(false);
}

Test(stream_threaded, destroy_while_busy_does_not_hang)
{
    troupe_stream_t *s = s_new(false, 7);
    s_fifo_t f = {0};
    cr_assert_eq(troupe_stream_schedule(s, s_sleep_work, (void *)(intptr_t)50, NULL), TROUPE_OK);
    for (long i = 0; i < 1000; i++)
        cr_assert_eq(s_schedule_fifo(s, &f, i), TROUPE_OK);
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_stream_record(s, &ev), TROUPE_OK);
    troupe_stream_release(&s);
    troupe_status_t st = troupe_event_sync(ev, 0);
    cr_assert(st == TROUPE_CANCELLED || st == TROUPE_OK);
    cr_assert_eq(atomic_load(&f.dtors), 1000, "every work argument is released exactly once");
    troupe_event_release(&ev);
}

/* ---- the message schema on the actor's pipe ------------------------------------------------ */

static troupe_status_t s_request_status(troupe_stream_t *s, zmsg_t **req, uint64_t expect_id)
{
    zmsg_t *reply = NULL;
    cr_assert_eq(troupe__stream_request(s, req, LONG_WAIT, &reply), TROUPE_OK, "%s",
                 troupe_last_error());
    uint64_t id = 1;
    troupe_status_t st = TROUPE_OK;
    zframe_t *f0 = zmsg_first(reply);
    cr_assert_eq(zframe_size(f0), 8);
    memcpy(&id, zframe_data(f0), 8);
    cr_assert_eq(id, expect_id);
    zframe_t *f1 = zmsg_next(reply);
    cr_assert_eq(zframe_size(f1), 4);
    uint32_t v;
    memcpy(&v, zframe_data(f1), 4);
    st = (troupe_status_t)v;
    zmsg_destroy(&reply);
    return st;
}

static void s_malformed(bool inline_mode)
{
    troupe_stream_t *s = s_new(inline_mode, 8);
    uint64_t id = troupe__stream_next_request_id(s);
    zmsg_t *req = NULL;

    cr_assert_eq(troupe_msg_build(&req, "s8", "BOGUS", id), TROUPE_OK);
    cr_assert_eq(s_request_status(s, &req, id), TROUPE_INVALID_ARGUMENT);

    id = troupe__stream_next_request_id(s);
    cr_assert_eq(troupe_msg_build(&req, "s8p", "RUN", id, (void *)s), TROUPE_OK); /* frames */
    cr_assert_eq(s_request_status(s, &req, id), TROUPE_INVALID_ARGUMENT);

    id = troupe__stream_next_request_id(s);
    cr_assert_eq(troupe_msg_build(&req, "s84", "WAIT", id, (uint32_t)3), TROUPE_OK); /* sizes */
    cr_assert_eq(s_request_status(s, &req, id), TROUPE_INVALID_ARGUMENT);

    id = troupe__stream_next_request_id(s);
    cr_assert_eq(troupe_msg_build(&req, "s8p", "WAIT", id, NULL), TROUPE_OK); /* NULL event */
    cr_assert_eq(s_request_status(s, &req, id), TROUPE_INVALID_ARGUMENT);

    cr_assert_eq(troupe_msg_build(&req, "s", "RECORD"), TROUPE_OK); /* no id: answered with 0 */
    cr_assert_eq(s_request_status(s, &req, 0), TROUPE_INVALID_ARGUMENT);

    req = zmsg_new();
    zmsg_addmem(req, "", 0); /* empty verb */
    zmsg_addmem(req, &id, 8);
    cr_assert_eq(s_request_status(s, &req, id), TROUPE_INVALID_ARGUMENT);

    /* $TERM is refused from the request path. */
    cr_assert_eq(troupe_msg_build(&req, "s", "$TERM"), TROUPE_OK);
    zmsg_t *reply = NULL;
    cr_assert_eq(troupe__stream_request(s, &req, LONG_WAIT, &reply), TROUPE_INVALID_ARGUMENT);
    cr_assert_null(req);

    /* The stream still works, and well-formed requests are honoured. */
    s_fifo_t f = {0};
    s_fifo_item_t *it = (s_fifo_item_t *)troupe_malloc(sizeof *it);
    it->f = &f;
    it->index = 0;
    troupe_stream_work_fn fn = s_fifo_work;
    troupe_stream_dtor_fn dtor = s_fifo_dtor;
    void *fnp, *dtorp;
    memcpy(&fnp, &fn, sizeof fnp);
    memcpy(&dtorp, &dtor, sizeof dtorp);
    id = troupe__stream_next_request_id(s);
    cr_assert_eq(troupe_msg_build(&req, "s8ppp", "RUN", id, fnp, (void *)it, dtorp), TROUPE_OK);
    cr_assert_eq(s_request_status(s, &req, id), TROUPE_OK);

    id = troupe__stream_next_request_id(s);
    cr_assert_eq(troupe_msg_build(&req, "s8", "RECORD", id), TROUPE_OK);
    cr_assert_eq(troupe__stream_request(s, &req, LONG_WAIT, &reply), TROUPE_OK);
    troupe_status_t st;
    void *evp = NULL;
    cr_assert_eq(troupe_msg_decode(reply, "8Sp", NULL, &st, &evp), TROUPE_OK);
    zmsg_destroy(&reply);
    cr_assert_eq(st, TROUPE_OK);
    troupe_event_t *ev = (troupe_event_t *)evp; /* adopted */
    cr_assert_eq(troupe_event_sync(ev, LONG_WAIT), TROUPE_OK);
    cr_assert_eq(atomic_load(&f.runs), 1);

    id = troupe__stream_next_request_id(s);
    troupe_event_retain(ev); /* the message's reference */
    cr_assert_eq(troupe_msg_build(&req, "s8p", "WAIT", id, (void *)ev), TROUPE_OK);
    cr_assert_eq(s_request_status(s, &req, id), TROUPE_OK);
    troupe_event_release(&ev);

    cr_assert_eq(troupe_stream_await(s, LONG_WAIT), TROUPE_OK);
    troupe_stream_release(&s);
    cr_assert_eq(atomic_load(&f.dtors), 1);
}

Test(stream_threaded, malformed_messages_get_invalid_argument)
{
    s_malformed(false);
}
Test(stream_inline, malformed_messages_get_invalid_argument)
{
    s_malformed(true);
}

/* ---- debug info ---------------------------------------------------------------------------- */

static void s_debug(bool inline_mode)
{
    troupe_stream_t *s = s_new(inline_mode, 9);
    char *d = NULL;
    cr_assert_eq(troupe_stream_debug_info(s, &d), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_not_null(strstr(d, "(name \"host:0:9\")"), "%s", d);
    cr_assert_not_null(strstr(d, inline_mode ? "(mode inline)" : "(mode threaded)"), "%s", d);
    cr_assert_not_null(strstr(d, "(parked_on nil)"), "%s", d);
    cr_assert_not_null(strstr(d, "(failed nil)"), "%s", d);
    troupe_free(d);

    troupe_event_t *gate = NULL;
    cr_assert_eq(troupe_event_new("gate#1", &gate), TROUPE_OK);
    cr_assert_eq(troupe_stream_wait_for(s, gate), TROUPE_OK);
    cr_assert_eq(troupe_stream_schedule(s, s_sleep_work, (void *)(intptr_t)0, NULL), TROUPE_OK);
    /* Threaded: the actor parks asynchronously; poll the debug info until it shows. */
    int64_t deadline = troupe_deadline_after(LONG_WAIT);
    bool parked = false;
    while (!parked && troupe_deadline_remaining(deadline) > 0) {
        cr_assert_eq(troupe_stream_debug_info(s, &d), TROUPE_OK);
        parked = strstr(d, "(parked_on \"gate#1\")") != NULL;
        if (parked)
            cr_assert_not_null(strstr(d, "(queue_length 2)"), "%s", d);
        troupe_free(d);
        if (!parked)
            rtu_sleep_ms(1);
    }
    cr_assert(parked);
    troupe_event_complete(gate, TROUPE_OK, NULL);
    cr_assert_eq(troupe_stream_await(s, LONG_WAIT), TROUPE_OK);
    cr_assert_eq(troupe_stream_debug_info(s, &d), TROUPE_OK);
    cr_assert_not_null(strstr(d, "(counters (scheduled 2) (run 1) (records 0) (waits 1)"), "%s", d);
    troupe_free(d);
    troupe_event_release(&gate);
    troupe_stream_release(&s);
}

Test(stream_inline, debug_info_names_the_stream)
{
    s_debug(true);
}
Test(stream_threaded, debug_info_names_the_stream)
{
    s_debug(false);
}

/* ---- misc API ------------------------------------------------------------------------------ */

static void s_idle_all_work(bool inline_mode)
{
    troupe_stream_t *s = s_new(inline_mode, 10);
    cr_assert(troupe_stream_is_idle(s));
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_stream_all_work(s, &ev), TROUPE_OK);
    cr_assert(troupe_event_is_done(ev));
    troupe_event_release(&ev);
    troupe_event_t *done = NULL;
    cr_assert_eq(troupe_event_new_completed("done", TROUPE_OK, NULL, &done), TROUPE_OK);
    cr_assert_eq(troupe_stream_wait_for(s, done), TROUPE_OK); /* adds nothing */
    cr_assert(troupe_stream_is_idle(s));
    troupe_event_release(&done);
    cr_assert_eq(troupe_stream_schedule(s, NULL, NULL, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_stream_record(s, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_stream_await(s, 0), TROUPE_OK);
    cr_assert_str_eq(troupe_stream_name(s), "host:0:10");
    cr_assert_eq(troupe_stream_id(s), 10);
    cr_assert_eq(troupe_stream_ordinal(s), 0);
    cr_assert_eq(troupe_stream_is_inline(s), inline_mode);
    troupe_stream_retain(s);
    troupe_stream_t *s2 = s;
    troupe_stream_release(&s2); /* not the last reference */
    cr_assert_eq(troupe_stream_await(s, 0), TROUPE_OK);
    troupe_stream_destroy(&s);
    troupe_stream_release(&s); /* NULL-safe */
}

Test(stream_inline, idle_and_all_work)
{
    s_idle_all_work(true);
}
Test(stream_threaded, idle_and_all_work)
{
    s_idle_all_work(false);
}

Test(stream, bad_arguments)
{
    troupe_stream_t *s = NULL;
    cr_assert_eq(troupe__stream_actor_new(NULL, NULL, 0, 0, false, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe__stream_actor_new(NULL, NULL, -1, 0, false, &s), TROUPE_INVALID_ARGUMENT);
    troupe_driver_vtable_t vt = {.name = "fake"};
    cr_assert_eq(troupe__stream_actor_new(&vt, NULL, 0, 0, false, &s), TROUPE_INVALID_ARGUMENT);
    cr_assert_null(s);
}

/* ---- driver queues ------------------------------------------------------------------------- */

typedef struct s_fake_driver {
    troupe_driver_t base;
    atomic_int created, destroyed;
    atomic_int fail_create;
} s_fake_driver_t;

struct troupe_dqueue {
    int magic;
    pthread_t owner;
};

static troupe_status_t s_fake_queue_create(troupe_driver_t *drv, int ordinal, troupe_dqueue_t **out)
{
    s_fake_driver_t *d = (s_fake_driver_t *)drv;
    if (atomic_load(&d->fail_create))
        return troupe__error(TROUPE_DEVICE_ERROR, "fake: no queue on device %d", ordinal);
    troupe_dqueue_t *q = (troupe_dqueue_t *)troupe_malloc(sizeof *q);
    q->magic = 0x51;
    q->owner = pthread_self();
    atomic_fetch_add(&d->created, 1);
    *out = q;
    return TROUPE_OK;
}

static void s_fake_queue_destroy(troupe_driver_t *drv, troupe_dqueue_t *q)
{
    s_fake_driver_t *d = (s_fake_driver_t *)drv;
    atomic_fetch_add(&d->destroyed, 1);
    troupe_free(q);
}

static atomic_int s_queue_ok;

static troupe_status_t s_check_queue(void *arg, troupe_dqueue_t *q)
{
    (void)arg;
    if (q && q->magic == 0x51 && (arg == NULL || pthread_equal(q->owner, pthread_self())))
        atomic_fetch_add(&s_queue_ok, 1);
    return TROUPE_OK;
}

static void s_driver_queue(bool inline_mode)
{
    static const troupe_driver_vtable_t vt = {
        .name = "fake", .queue_create = s_fake_queue_create, .queue_destroy = s_fake_queue_destroy};
    s_fake_driver_t d = {.base = {&vt}};
    troupe_stream_t *s = NULL;
    cr_assert_eq(troupe__stream_actor_new(&vt, &d.base, 1, 3, inline_mode, &s), TROUPE_OK);
    cr_assert_str_eq(troupe_stream_name(s), "fake:1:3");
    cr_assert_eq(troupe_stream_vtable(s), &vt);
    cr_assert_eq(troupe_stream_driver(s), &d.base);
    atomic_store(&s_queue_ok, 0);
    /* Threaded: the queue lives on the actor thread (created and used there). */
    cr_assert_eq(troupe_stream_schedule(s, s_check_queue, inline_mode ? NULL : (void *)1, NULL),
                 TROUPE_OK);
    cr_assert_eq(troupe_stream_await(s, LONG_WAIT), TROUPE_OK);
    cr_assert_eq(atomic_load(&s_queue_ok), 1);
    troupe_stream_release(&s);
    cr_assert_eq(atomic_load(&d.created), 1);
    cr_assert_eq(atomic_load(&d.destroyed), 1);

    atomic_store(&d.fail_create, 1);
    cr_assert_eq(troupe__stream_actor_new(&vt, &d.base, 1, 4, inline_mode, &s), TROUPE_DEVICE_ERROR);
    cr_assert_null(s);
    cr_assert_not_null(strstr(troupe_last_error(), "no queue on device 1"), "%s",
                       troupe_last_error());
}

Test(stream_inline, driver_queue_lifecycle)
{
    s_driver_queue(true);
}
Test(stream_threaded, driver_queue_lifecycle_and_setup_failure)
{
    s_driver_queue(false);
}

/* devices/device.h's wrappers: a NULL entry is refused in one place, naming the driver and the
 * entry; the entries a driver has are called. */
Test(driver_wrappers, null_entries_are_unimplemented_and_named)
{
    static const troupe_driver_vtable_t vt = {
        .name = "fake", .queue_create = s_fake_queue_create, .queue_destroy = s_fake_queue_destroy};
    s_fake_driver_t d = {.base = {&vt}};
    troupe_buffer_loc_t buf = {1, 0, 4};
    float host[1] = {0};
    void *p = NULL;
    cr_assert_str_eq(troupe_driver_name(&d.base), "fake");
    cr_assert_eq(troupe_driver_h2d(&d.base, NULL, buf, host, 4), TROUPE_UNIMPLEMENTED);
    cr_assert_str_eq(troupe_last_error(), "the fake driver has no h2d entry");
    cr_assert_eq(troupe_driver_host_ptr(&d.base, 0, buf, &p), TROUPE_UNIMPLEMENTED);
    cr_assert_str_eq(troupe_last_error(), "the fake driver has no host_ptr entry");
    cr_assert_eq(troupe_driver_alloc_pool(&d.base, 0, 1, 64, true), TROUPE_UNIMPLEMENTED);
    cr_assert_eq(troupe_driver_launch(&d.base, NULL, NULL, NULL, 0), TROUPE_UNIMPLEMENTED);
    cr_assert_str_eq(troupe_last_error(), "the fake driver has no launch entry");
    cr_assert_eq(troupe_driver_require(&d.base, "queue_create"), TROUPE_OK);
    cr_assert_eq(troupe_driver_require(&d.base, "d2d"), TROUPE_UNIMPLEMENTED);
    cr_assert_str_eq(troupe_last_error(), "the fake driver has no d2d entry");
    cr_assert_eq(troupe_driver_require(&d.base, "no_such_entry"), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_driver_h2d(NULL, NULL, buf, host, 4), TROUPE_INVALID_ARGUMENT);
    /* fallbacks of the entries that return no status */
    cr_assert_eq(troupe_driver_num_devices(&d.base), 0);
    cr_assert_eq(troupe_driver_suggested_num_streams(&d.base, 0, TROUPE_MOST_PARALLEL_STREAMS), 1);
    troupe_driver_code_release(&d.base, NULL);
    troupe_driver_event_release(&d.base, NULL);
    /* the entries it has are called */
    troupe_dqueue_t *q = NULL;
    cr_assert_eq(troupe_driver_queue_create(&d.base, 0, &q), TROUPE_OK);
    cr_assert_not_null(q);
    cr_assert_eq(atomic_load(&d.created), 1);
    troupe_driver_queue_destroy(&d.base, q);
    cr_assert_eq(atomic_load(&d.destroyed), 1);
}

/* The built drivers' queues, when the devices module provides them. */
static troupe_status_t s_zero_work(void *arg, troupe_dqueue_t *q)
{
    troupe_driver_t *drv = (troupe_driver_t *)arg;
    troupe_buffer_loc_t buf = {.pool_id = 1, .offset = 0, .size_bytes = 64};
    float host[16];
    for (int i = 0; i < 16; i++)
        host[i] = (float)i;
    TROUPE_RETURN_IF_ERROR(troupe_driver_h2d(drv, q, buf, host, sizeof host));
    TROUPE_RETURN_IF_ERROR(troupe_driver_memset_zero(drv, q, buf));
    for (int i = 0; i < 16; i++)
        host[i] = 1.0f;
    TROUPE_RETURN_IF_ERROR(troupe_driver_d2h(drv, q, host, buf, sizeof host));
    for (int i = 0; i < 16; i++)
        if (host[i] != 0.0f)
            return troupe__error(TROUPE_INTERNAL, "memset_zero left %g at %d", host[i], i);
    return TROUPE_OK;
}

static void s_real_driver(const char *name, bool inline_mode)
{
    const troupe_driver_vtable_t *vt = NULL;
    if (troupe_driver_lookup(name, &vt) != TROUPE_OK || !vt->open || !vt->queue_create ||
        !vt->h2d || !vt->d2h || !vt->memset_zero || !vt->alloc_pool)
        cr_skip_test("driver %s not built", name);
    troupe_driver_t *drv = NULL;
    if (vt->open(&drv) != TROUPE_OK)
        cr_skip_test("driver %s cannot open: %s", name, troupe_last_error());
    cr_assert_eq(vt->alloc_pool(drv, 0, 1, 1024, true), TROUPE_OK, "%s", troupe_last_error());
    troupe_stream_t *s = NULL;
    cr_assert_eq(troupe__stream_actor_new(vt, drv, 0, 0, inline_mode, &s), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(troupe_stream_schedule(s, s_zero_work, drv, NULL), TROUPE_OK);
    cr_assert_eq(troupe_stream_await(s, LONG_WAIT), TROUPE_OK, "%s", troupe_last_error());
    troupe_stream_release(&s);
    if (vt->free_pool)
        cr_assert_eq(vt->free_pool(drv, 0, 1), TROUPE_OK);
    vt->close(drv);
}

Test(stream_conformance, sync_driver_inline)
{
    s_real_driver("sync", true);
}
Test(stream_conformance, cpu_driver_threaded)
{
    s_real_driver("cpu", false);
}

/* ---- stress -------------------------------------------------------------------------------- */

#define S_STREAMS 4
#define S_ITEMS 10000
#define S_EVERY 100

typedef struct {
    atomic_long done[S_STREAMS];
    atomic_long violations;
} s_stress_t;

typedef struct {
    s_stress_t *st;
    int stream;
    int other; /* stream whose progress this item checks, or -1 */
    long need; /* items `other` must have finished */
} s_stress_item_t;

static troupe_status_t s_stress_work(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    s_stress_item_t *it = (s_stress_item_t *)arg;
    if (it->other >= 0 && atomic_load(&it->st->done[it->other]) < it->need)
        atomic_fetch_add(&it->st->violations, 1);
    atomic_fetch_add(&it->st->done[it->stream], 1);
    return TROUPE_OK;
}

static void s_stress(bool inline_mode)
{
    troupe_stream_t *s[S_STREAMS];
    s_stress_t st = {0};
    for (int i = 0; i < S_STREAMS; i++)
        s[i] = s_new(inline_mode, i);
    for (long k = 0; k < S_ITEMS; k++) {
        for (int i = 0; i < S_STREAMS; i++) {
            s_stress_item_t *it = (s_stress_item_t *)troupe_malloc(sizeof *it);
            *it = (s_stress_item_t){&st, i, -1, 0};
            if (k % S_EVERY == 0 && k > 0) {
                /* Stream i waits for stream i+1's progress so far, then checks it. */
                int o = (i + 1) % S_STREAMS;
                long o_scheduled = o > i ? k : k + 1; /* items of `o` scheduled before now */
                troupe_event_t *ev = NULL;
                cr_assert_eq(troupe_stream_record(s[o], &ev), TROUPE_OK);
                cr_assert_eq(troupe_stream_wait_for(s[i], ev), TROUPE_OK);
                troupe_event_release(&ev);
                it->other = o;
                it->need = o_scheduled;
            }
            cr_assert_eq(troupe_stream_schedule(s[i], s_stress_work, it, troupe_free), TROUPE_OK,
                         "%s", troupe_last_error());
        }
    }
    for (int i = 0; i < S_STREAMS; i++)
        cr_assert_eq(troupe_stream_await(s[i], LONG_WAIT), TROUPE_OK, "stream %d: %s", i,
                     troupe_last_error());
    for (int i = 0; i < S_STREAMS; i++) {
        cr_assert_eq(atomic_load(&st.done[i]), S_ITEMS);
        troupe_stream_release(&s[i]);
    }
    cr_assert_eq(atomic_load(&st.violations), 0, "a WAIT let work through early");
}

Test(stream_threaded, stress_4_streams_10000_items_cross_waits, .timeout = 300)
{
    s_stress(false);
}
Test(stream_inline, stress_4_streams_10000_items_cross_waits, .timeout = 300)
{
    s_stress(true);
}

/* Several host threads schedule onto one threaded stream concurrently; each thread's own items
 * stay in order. */
typedef struct {
    troupe_stream_t *s;
    s_fifo_t f;
} s_mt_arg_t;

static void *s_mt_producer(void *arg)
{
    s_mt_arg_t *a = (s_mt_arg_t *)arg;
    for (long i = 0; i < 2000; i++)
        if (s_schedule_fifo(a->s, &a->f, i) != TROUPE_OK)
            return (void *)1;
    troupe_event_t *ev = NULL;
    if (troupe_stream_record(a->s, &ev) != TROUPE_OK)
        return (void *)1;
    troupe_status_t st = troupe_event_sync(ev, LONG_WAIT);
    troupe_event_release(&ev);
    return st == TROUPE_OK ? NULL : (void *)1;
}

static void s_multi_producer(bool inline_mode)
{
    troupe_stream_t *s = s_new(inline_mode, 11);
    s_mt_arg_t args[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].s = s;
        pthread_create(&t[i], NULL, s_mt_producer, &args[i]);
    }
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        cr_assert_null(r);
        cr_assert_eq(atomic_load(&args[i].f.errors), 0);
        cr_assert_eq(atomic_load(&args[i].f.runs), 2000);
    }
    cr_assert_eq(troupe_stream_await(s, LONG_WAIT), TROUPE_OK);
    troupe_stream_release(&s);
}

Test(stream_threaded, concurrent_producers)
{
    s_multi_producer(false);
}
Test(stream_inline, concurrent_producers)
{
    s_multi_producer(true);
}
