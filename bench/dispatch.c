/* troupe — bench_dispatch: the cost of handing work to a stream (actors/stream.h, threaded
 * mode on the cpu driver) against a bare work queue.
 *
 * Peer pthread_queue, written here: one worker thread, a ring of (fn, arg) items protected by
 * a pthread mutex; the worker sleeps on a condition variable when the ring is empty (signalled
 * only when it sleeps), pops one item at a time and runs it, counts completions, and signals a
 * second condition variable when a host thread waits for a completion count.
 *
 * Cases:
 *   round-trip  troupe: schedule one empty work item, record an event, sync it; peer: push one
 *               empty item and wait until it completed. Median of one round trip in µs over
 *               S_RT_ITERS iterations (S_RT_ITERS_QUICK with --quick) after a warm-up; the two
 *               sides alternate iteration by iteration.
 *   pipelined   S_PIPE_ITEMS small items, each checking that its sequence number is the
 *               previous one + 1 and incrementing a counter, scheduled back to back, then
 *               troupe: one record + sync; peer: wait for the last completion. Total µs, the
 *               median over runs (bench_util timing, sides interleaved).
 *
 * What each side pays (so the ratio reads right): troupe's items go through the stream's
 * public API (a RECORD allocates and names an event) into its block queue, which the actor
 * drains in batches without the lock; a troupe host sync and an idle actor poll for up to
 * 20 µs with sched_yield before they sleep (actors/stream.h), while the peer's threads sleep
 * on their condition variables at once and its worker takes the mutex per item.
 *
 * Check: every pipelined item ran, in FIFO order (sequence numbers), on both sides; every
 * round trip's event completed OK. A wrong result prints why on stderr and exits 1.
 *
 * Options: see --help (bench/bench_util.h). Exit status: 0, 1 on a failure or a failed check,
 * 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench/bench_util.h"

#include "actors/event.h"
#include "actors/stream_impl.h"
#include "base/clock.h"
#include "base/status.h"
#include "devices/device.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_PROG "bench_dispatch"
#define S_RT_ITERS 2000
#define S_RT_ITERS_QUICK 200
#define S_RT_WARMUP 200
#define S_RT_WARMUP_QUICK 20
#define S_PIPE_ITEMS 100000
#define S_SYNC_TIMEOUT_NS (30LL * 1000 * 1000 * 1000)

/* ---- the work items ---------------------------------------------------------------------- */

/* Sequence state of one side's pipelined run (written by that side's worker thread only; read
 * by the host after the completion it waited for). */
typedef struct s_seq {
    uint64_t last;  /* last sequence number seen */
    uint64_t count; /* items run */
    uint64_t bad;   /* items whose number was not last + 1 */
} s_seq_t;

static s_seq_t s_troupe_seq, s_peer_seq;

static void s_seq_step(s_seq_t *sq, uint64_t n)
{
    if (n != sq->last + 1)
        sq->bad++;
    sq->last = n;
    sq->count++;
}

static troupe_status_t s_troupe_empty(void *arg, troupe_dqueue_t *q)
{
    (void)arg;
    (void)q;
    return TROUPE_OK;
}

/* arg carries the sequence number (1..N). */
static troupe_status_t s_troupe_item(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    s_seq_step(&s_troupe_seq, (uint64_t)(uintptr_t)arg);
    return TROUPE_OK;
}

static void s_peer_empty(void *arg)
{
    (void)arg;
}

static void s_peer_item(void *arg)
{
    s_seq_step(&s_peer_seq, (uint64_t)(uintptr_t)arg);
}

/* ---- the peer: a bare mutex/condvar work queue -------------------------------------------- */

#define S_RING_CAP (1u << 17) /* > S_PIPE_ITEMS: the producer never blocks in the pipelined case */

typedef void (*s_work_fn)(void *arg);

typedef struct s_item {
    s_work_fn fn;
    void *arg;
} s_item_t;

typedef struct s_queue {
    pthread_mutex_t mu;
    pthread_cond_t not_empty; /* worker waits: ring empty */
    pthread_cond_t not_full;  /* producer waits: ring full */
    pthread_cond_t done;      /* host waits: completions */
    s_item_t *ring;
    uint32_t head, tail; /* pop at head, push at tail (free-running, masked) */
    uint64_t pushed, completed;
    bool worker_sleeping, host_waiting, producer_waiting, stop;
    pthread_t thread;
} s_queue_t;

static void *s_queue_worker(void *p)
{
    s_queue_t *q = p;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->head == q->tail && !q->stop) {
            q->worker_sleeping = true;
            pthread_cond_wait(&q->not_empty, &q->mu);
            q->worker_sleeping = false;
        }
        if (q->head == q->tail && q->stop)
            break;
        s_item_t it = q->ring[q->head & (S_RING_CAP - 1)];
        q->head++;
        if (q->producer_waiting)
            pthread_cond_signal(&q->not_full);
        pthread_mutex_unlock(&q->mu);
        it.fn(it.arg);
        pthread_mutex_lock(&q->mu);
        q->completed++;
        if (q->host_waiting)
            pthread_cond_broadcast(&q->done);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static int s_queue_init(s_queue_t *q)
{
    memset(q, 0, sizeof *q);
    q->ring = malloc(S_RING_CAP * sizeof *q->ring);
    if (!q->ring)
        return -1;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    pthread_cond_init(&q->done, NULL);
    if (pthread_create(&q->thread, NULL, s_queue_worker, q) != 0) {
        free(q->ring);
        return -1;
    }
    return 0;
}

static void s_queue_destroy(s_queue_t *q)
{
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    pthread_cond_destroy(&q->done);
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    pthread_mutex_destroy(&q->mu);
    free(q->ring);
}

/* Pushes one item; returns its ticket (the completion count at which it has run). */
static uint64_t s_queue_push(s_queue_t *q, s_work_fn fn, void *arg)
{
    pthread_mutex_lock(&q->mu);
    while (q->tail - q->head == S_RING_CAP) {
        q->producer_waiting = true;
        pthread_cond_wait(&q->not_full, &q->mu);
        q->producer_waiting = false;
    }
    q->ring[q->tail & (S_RING_CAP - 1)] = (s_item_t){fn, arg};
    q->tail++;
    uint64_t ticket = ++q->pushed;
    if (q->worker_sleeping)
        pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
    return ticket;
}

/* Waits until the item with `ticket` (and so everything before it) completed. */
static void s_queue_wait(s_queue_t *q, uint64_t ticket)
{
    pthread_mutex_lock(&q->mu);
    while (q->completed < ticket) {
        q->host_waiting = true;
        pthread_cond_wait(&q->done, &q->mu);
    }
    q->host_waiting = false;
    pthread_mutex_unlock(&q->mu);
}

/* ---- the two sides ------------------------------------------------------------------------ */

typedef struct s_state {
    troupe_stream_t *stream;
    s_queue_t queue;
    troupe_status_t status; /* first troupe failure */
    const char *failed_what;
    int64_t items;
} s_state_t;

static int s_fail(s_state_t *s, const char *what, troupe_status_t st)
{
    if (s->status == TROUPE_OK) {
        s->status = st;
        s->failed_what = what;
    }
    return 1;
}

static int s_troupe_round_trip(s_state_t *s)
{
    troupe_event_t *ev = NULL;
    troupe_status_t st = troupe_stream_schedule(s->stream, s_troupe_empty, NULL, NULL);
    if (st != TROUPE_OK)
        return s_fail(s, "schedule", st);
    if ((st = troupe_stream_record(s->stream, &ev)) != TROUPE_OK)
        return s_fail(s, "record", st);
    st = troupe_event_sync(ev, S_SYNC_TIMEOUT_NS);
    troupe_event_release(&ev);
    if (st != TROUPE_OK)
        return s_fail(s, "sync", st);
    return 0;
}

static int s_peer_round_trip(s_state_t *s)
{
    s_queue_wait(&s->queue, s_queue_push(&s->queue, s_peer_empty, NULL));
    return 0;
}

static int s_troupe_pipelined(void *arg)
{
    s_state_t *s = arg;
    troupe_status_t st = TROUPE_OK;
    memset(&s_troupe_seq, 0, sizeof s_troupe_seq);
    for (int64_t i = 1; i <= s->items; i++)
        if ((st = troupe_stream_schedule(s->stream, s_troupe_item, (void *)(uintptr_t)i, NULL)) !=
            TROUPE_OK)
            return s_fail(s, "schedule", st);
    troupe_event_t *ev = NULL;
    if ((st = troupe_stream_record(s->stream, &ev)) != TROUPE_OK)
        return s_fail(s, "record", st);
    st = troupe_event_sync(ev, S_SYNC_TIMEOUT_NS);
    troupe_event_release(&ev);
    if (st != TROUPE_OK)
        return s_fail(s, "sync", st);
    if (s_troupe_seq.count != (uint64_t)s->items || s_troupe_seq.bad != 0) {
        fprintf(stderr, "%s: case=pipelined: troupe ran %llu of %lld items, %llu out of order\n",
                S_PROG, (unsigned long long)s_troupe_seq.count, (long long)s->items,
                (unsigned long long)s_troupe_seq.bad);
        return 2;
    }
    return 0;
}

static int s_peer_pipelined(void *arg)
{
    s_state_t *s = arg;
    uint64_t ticket = 0;
    memset(&s_peer_seq, 0, sizeof s_peer_seq);
    for (int64_t i = 1; i <= s->items; i++)
        ticket = s_queue_push(&s->queue, s_peer_item, (void *)(uintptr_t)i);
    s_queue_wait(&s->queue, ticket);
    if (s_peer_seq.count != (uint64_t)s->items || s_peer_seq.bad != 0) {
        fprintf(stderr,
                "%s: case=pipelined: pthread_queue ran %llu of %lld items, %llu out of order\n",
                S_PROG, (unsigned long long)s_peer_seq.count, (long long)s->items,
                (unsigned long long)s_peer_seq.bad);
        return 2;
    }
    return 0;
}

/* ---- main --------------------------------------------------------------------------------- */

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double s_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, s_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The round-trip case; returns 0 or 1 (printed). */
static int s_case_round_trip(s_state_t *s, bool quick)
{
    const int iters = quick ? S_RT_ITERS_QUICK : S_RT_ITERS;
    const int warmup = quick ? S_RT_WARMUP_QUICK : S_RT_WARMUP;
    double *tt = malloc((size_t)iters * sizeof *tt), *tp = malloc((size_t)iters * sizeof *tp);
    int rc = 1;
    if (!tt || !tp) {
        fprintf(stderr, "%s: out of memory\n", S_PROG);
        goto out;
    }
    for (int i = 0; i < warmup; i++)
        if (s_troupe_round_trip(s) != 0 || s_peer_round_trip(s) != 0)
            goto fail;
    for (int i = 0; i < iters; i++) {
        /* Alternate which side goes first, so neither always follows the other. */
        for (int side = 0; side < 2; side++) {
            bool troupe = (side == 0) == (i % 2 == 0);
            int64_t t0 = troupe_now_ns();
            if ((troupe ? s_troupe_round_trip(s) : s_peer_round_trip(s)) != 0)
                goto fail;
            double us = (double)(troupe_now_ns() - t0) / 1e3;
            (troupe ? tt : tp)[i] = us;
        }
    }
    double mt = s_median(tt, iters), mp = s_median(tp, iters);
    troupe_bench_print_case("dispatch", "round-trip", 0, mt, "pthread_queue", mp,
                            "items=%d troupe_min_us=%.2f peer_min_us=%.2f check=ok", iters, tt[0],
                            tp[0]);
    rc = 0;
    goto out;
fail:
    troupe_bench_fail_status(S_PROG, s->failed_what ? s->failed_what : "round trip", s->status);
out:
    free(tt);
    free(tp);
    return rc;
}

/* The pipelined case; returns 0 or 1 (printed). */
static int s_case_pipelined(s_state_t *s, const troupe_bench_opts_t *opts)
{
    troupe_bench_side_t sides[2] = {{s_troupe_pipelined, s}, {s_peer_pipelined, s}};
    troupe_bench_stats_t t[2];
    s->items = S_PIPE_ITEMS;
    int r = troupe_bench_time_sides(sides, 2, opts, t);
    if (r != 0) {
        if (s->status != TROUPE_OK)
            troupe_bench_fail_status(S_PROG, s->failed_what, s->status);
        else if (r != 2)
            fprintf(stderr, "%s: case=pipelined: timing failed\n", S_PROG);
        return 1;
    }
    troupe_bench_print_case("dispatch", "pipelined", 0, t[0].median_us, "pthread_queue",
                            t[1].median_us,
                            "items=%d troupe_ns_per_item=%.1f peer_ns_per_item=%.1f "
                            "troupe_runs=%d peer_runs=%d check=ok",
                            S_PIPE_ITEMS, t[0].median_us * 1e3 / S_PIPE_ITEMS,
                            t[1].median_us * 1e3 / S_PIPE_ITEMS, t[0].runs, t[1].runs);
    return 0;
}

int main(int argc, char **argv)
{
    troupe_bench_opts_t opts;
    troupe_bench_opts_default(&opts);
    int pr = troupe_bench_parse_args(
        argc, argv,
        "Work dispatch: a threaded troupe stream (cpu driver) vs a bare pthread mutex/condvar "
        "work queue.",
        &opts);
    if (pr != 0)
        return pr > 0 ? 0 : 2;
    bool quick = false;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--quick") == 0)
            quick = true;

    troupe_bench_print_machine(TROUPE_BENCH_C_FLAGS);

    const troupe_driver_vtable_t *vt = NULL;
    troupe_driver_t *drv = NULL;
    troupe_status_t st = troupe_driver_lookup("cpu", &vt);
    if (st != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "find the cpu driver", st);
    if ((st = vt->open(&drv)) != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "open the cpu driver", st);

    int rc = 0;
    s_state_t s = {0};
    if ((st = troupe__stream_actor_new(vt, drv, 0, 0, false, &s.stream)) != TROUPE_OK) {
        rc = troupe_bench_fail_status(S_PROG, "create the stream", st);
        goto out_driver;
    }
    if (s_queue_init(&s.queue) != 0) {
        fprintf(stderr, "%s: cannot start the pthread queue\n", S_PROG);
        rc = 1;
        goto out_stream;
    }

    rc = s_case_round_trip(&s, quick);
    if (rc == 0)
        rc = s_case_pipelined(&s, &opts);

    s_queue_destroy(&s.queue);
out_stream:
    if (rc == 0 && (st = troupe_stream_await(s.stream, S_SYNC_TIMEOUT_NS)) != TROUPE_OK)
        rc = troupe_bench_fail_status(S_PROG, "await the stream", st);
    troupe_stream_release(&s.stream);
out_driver:
    vt->close(drv);
    return rc;
}
