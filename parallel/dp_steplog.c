/* troupe — the per-step time breakdown of the data-parallel driver (parallel/dp.h, Step
 * breakdown): a record per logged step whose slots the completions of the step's events fill
 * (each event's subscriber copies the event's completion time, taken on troupe_now_ns()'s
 * clock, the one base/trace.h times routine runs and collectives with), logged at debug level (subsystem parallel) by whoever lets go of the
 * record last, so the line is written once every slot it reads was stamped.
 *
 * Thread safety: slots are stamped from any thread (atomics); the record is refcounted.
 * Ownership: the driver holds one reference until the step is scheduled; each subscription
 * and the begin mark hold one.
 */
#include "parallel/dp_impl.h"

#include "actors/event_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"

#include <stdatomic.h>
#include <stdio.h>

/* Logged steps: the first S_FIRST, then every S_EVERY-th (keeps a long run's log small). */
#define S_FIRST 10
#define S_EVERY 100

/* Slots: the step's begin (owner stream), the last merge on the owner stream, the optimizer's
 * end, then one per replica (its gradient routine's end), then three per bucket (its last
 * to_host, its allreduce, its last from_host; in place: the owner stream's last work before
 * the bucket's allreduce, and the allreduce). */
enum { S_BEGIN = 0, S_MERGE = 1, S_OPT = 2, S_GRAD0 = 3 };

typedef struct s_tick {
    troupe__dp_steplog_t *rec;
    size_t slot;
} s_tick_t;

struct troupe__dp_steplog {
    atomic_int refs;
    int64_t step;
    int n;          /* replicas */
    size_t nbk;     /* buckets */
    int exchange;   /* troupe__dp_exchange_t */
    bool fused;     /* the optimizer step ran in the allreduce (docs/parallel.md, Fused update) */
    bool local;     /* the merge and the optimizer step ran as one pass across the streams */
    int64_t host_ns; /* time troupe_dp_step took on the host (set before the driver lets go) */
    size_t nslots;
    _Atomic int64_t *t; /* nslots stamps, 0 until stamped */
    s_tick_t *ticks;    /* nslots */
};

static size_t s_bucket_slot(const troupe__dp_steplog_t *r, size_t b, int which)
{
    return S_GRAD0 + (size_t)r->n + 3 * b + (size_t)which;
}

bool troupe__dp_steplog_wanted(int64_t step)
{
    return (step < S_FIRST || step % S_EVERY == 0) &&
           troupe_log_enabled(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL);
}

troupe__dp_steplog_t *troupe__dp_steplog_new(int64_t step, int n, size_t nbk, int exchange,
                                             bool fused, bool local)
{
    troupe__dp_steplog_t *r = troupe_calloc(1, sizeof *r);
    if (r == NULL)
        return NULL; /* best effort: the step runs without its breakdown */
    r->nslots = S_GRAD0 + (size_t)n + 3 * nbk;
    r->t = troupe_calloc(r->nslots, sizeof *r->t);
    r->ticks = troupe_calloc(r->nslots, sizeof *r->ticks);
    if (r->t == NULL || r->ticks == NULL) {
        troupe_free(r->t);
        troupe_free(r->ticks);
        troupe_free(r);
        return NULL;
    }
    atomic_init(&r->refs, 1);
    r->step = step;
    r->n = n;
    r->nbk = nbk;
    r->fused = fused;
    r->local = local;
    r->exchange = exchange;
    for (size_t i = 0; i < r->nslots; i++) {
        atomic_init(&r->t[i], 0);
        r->ticks[i].rec = r;
        r->ticks[i].slot = i;
    }
    return r;
}

static int64_t s_get(const troupe__dp_steplog_t *r, size_t slot)
{
    return atomic_load(&((troupe__dp_steplog_t *)r)->t[slot]);
}

static double s_us(int64_t ns)
{
    return ns > 0 ? (double)ns / 1e3 : 0.0;
}

static int64_t s_max(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int64_t s_min(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The breakdown (docs/parallel.md, Step breakdown): phases end where the next begins, so they
 * add up to the wall time; the exchange's pipeline is reconstructed from its stamps (staged:
 * the copies of a stream run one after another, the copies back after every copy out; a
 * bucket's reduction starts once it is ready — its copies done, or in place the owner
 * stream's work before it — and the previous bucket's reduction finished). The compute
 * overlap is the time buckets were reduced before the last replica's gradient routine ended:
 * with the gradient routine split into segments (Overlap), while later segments computed. */
static void s_log(const troupe__dp_steplog_t *r)
{
    int64_t begin = s_get(r, S_BEGIN), grad = 0;
    for (int k = 0; k < r->n; k++)
        grad = s_max(grad, s_get(r, S_GRAD0 + (size_t)k));
    int64_t merge = s_max(s_get(r, S_MERGE), grad), xend = merge;
    int64_t d2h = 0, reduce = 0, h2d = 0, cover = 0;
    /* the stream copies back only after it copied every bucket out */
    int64_t prev_d2h = merge, prev_red = 0,
            prev_h2d = r->nbk > 0 ? s_get(r, s_bucket_slot(r, r->nbk - 1, 0)) : 0;
    for (size_t b = 0; b < r->nbk; b++) {
        int64_t d = s_get(r, s_bucket_slot(r, b, 0)), red = s_get(r, s_bucket_slot(r, b, 1)),
                h = s_get(r, s_bucket_slot(r, b, 2));
        if (r->exchange != TROUPE__DP_EXCHANGE_STAGED) { /* a lent request per bucket */
            /* it starts once the owner stream handed it over (d: the stream's last work
             * before it) and the transport finished the previous one */
            int64_t start = s_max(d != 0 ? d : merge, prev_red);
            reduce += s_max(0, red - start);
            cover += s_max(0, s_min(red, grad) - s_max(start, begin));
            prev_red = s_max(prev_red, red);
            xend = s_max(xend, red);
            continue;
        }
        /* the copies out after the merges (with Overlap, an earlier bucket's copies ran
         * between segments: compute time, not exchange time) */
        d2h += s_max(0, d - s_max(prev_d2h, merge));
        int64_t start = s_max(d, prev_red);
        reduce += s_max(0, red - start);
        h2d += s_max(0, h - s_max(red, prev_h2d));
        cover += s_max(0, s_min(red, grad) - s_max(start, begin));
        prev_d2h = d;
        prev_red = red;
        prev_h2d = h;
        xend = s_max(xend, h);
    }
    /* fused: the update is part of the exchange, which the allreduce's end closes (its second
     * stamp, by another subscriber of the same event, only says when that one ran) */
    int64_t opt = r->fused ? xend : s_max(s_get(r, S_OPT), xend);
    int64_t exchange = xend - merge;
    int64_t overlap = r->exchange == TROUPE__DP_EXCHANGE_STAGED
                          ? s_max(0, d2h + reduce + h2d - exchange)
                          : 0;
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL,
               "dp step %lld breakdown: wall_us=%.1f compute_us=%.1f merge_us=%.1f "
               "exchange_us=%.1f optimizer_us=%.1f host_us=%.1f exchange=%s buckets=%zu "
               "d2h_us=%.1f reduce_us=%.1f h2d_us=%.1f overlap_us=%.1f compute_overlap_us=%.1f "
               "update=%s",
               (long long)r->step, s_us(opt - begin), s_us(grad - begin), s_us(merge - grad),
               s_us(exchange), s_us(opt - xend), s_us(r->host_ns),
               troupe__dp_exchange_name(r->exchange), r->nbk, s_us(d2h), s_us(reduce), s_us(h2d),
               s_us(overlap), s_us(cover),
               r->fused ? "fused" : r->local ? "streams" : "routine");
}

void troupe__dp_steplog_release(troupe__dp_steplog_t **r_p)
{
    if (r_p == NULL || *r_p == NULL)
        return;
    troupe__dp_steplog_t *r = *r_p;
    *r_p = NULL;
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    if (s_get(r, S_BEGIN) != 0 && s_get(r, S_OPT) != 0) /* a failed step logs nothing */
        s_log(r);
    troupe_free(r->t);
    troupe_free(r->ticks);
    troupe_free(r);
}

void troupe__dp_steplog_set_host(troupe__dp_steplog_t *r, int64_t host_ns)
{
    if (r != NULL)
        r->host_ns = host_ns;
}

/* The slot gets the event's completion time, not this call's: a subscriber runs late when the
 * event was done before the driver subscribed, or on a descheduled thread under load, and its
 * own clock would clamp the phases around it to 0. */
static void s_stamp(void *user, troupe_event_t *ev, troupe_status_t status)
{
    s_tick_t *tk = user;
    troupe__dp_steplog_t *r = tk->rec;
    if (status == TROUPE_OK) {
        int64_t t = troupe__event_completed_ns(ev);
        atomic_store(&r->t[tk->slot], t != 0 ? t : troupe_now_ns());
    }
    troupe__dp_steplog_release(&r);
}

/* Stamps `slot` when ev completes (best effort: without memory the slot stays 0). */
static void s_watch(troupe__dp_steplog_t *r, size_t slot, troupe_event_t *ev)
{
    if (r == NULL || ev == NULL || slot >= r->nslots)
        return;
    atomic_fetch_add(&r->refs, 1);
    if (troupe_event_subscribe(ev, s_stamp, &r->ticks[slot]) != TROUPE_OK)
        atomic_fetch_sub(&r->refs, 1); /* never called; the driver still holds its reference */
}

void troupe__dp_steplog_grad(troupe__dp_steplog_t *r, int k, troupe_event_t *ev)
{
    s_watch(r, S_GRAD0 + (size_t)k, ev);
}

void troupe__dp_steplog_merge(troupe__dp_steplog_t *r, troupe_event_t *ev)
{
    s_watch(r, S_MERGE, ev);
}

void troupe__dp_steplog_optimizer(troupe__dp_steplog_t *r, troupe_event_t *ev)
{
    s_watch(r, S_OPT, ev);
}

void troupe__dp_steplog_bucket(troupe__dp_steplog_t *r, size_t b, int which, troupe_event_t *ev)
{
    if (r != NULL && b < r->nbk && which >= 0 && which < 3)
        s_watch(r, s_bucket_slot(r, b, which), ev);
}

static troupe_status_t s_begin(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    troupe__dp_steplog_t *r = arg;
    atomic_store(&r->t[S_BEGIN], troupe_now_ns());
    return TROUPE_OK;
}

static void s_begin_release(void *arg)
{
    troupe__dp_steplog_t *r = arg;
    troupe__dp_steplog_release(&r);
}

void troupe__dp_steplog_begin(troupe__dp_steplog_t *r, troupe_stream_t *s)
{
    if (r == NULL)
        return;
    atomic_fetch_add(&r->refs, 1);
    if (troupe_stream_schedule(s, s_begin, r, s_begin_release) != TROUPE_OK)
        return; /* the schedule dropped the item's reference; the step fails on its own */
}
