/* troupe — the update fused across a rank's streams (docs/parallel.md, Fused update across
 * streams): the tree merge of the replicas' gradients, the optimizer step and the copies of the
 * new parameters to the other replicas as one pass, divided among the streams.
 *
 * Each step every replica k lends its gradients and parameters (replica 0 its optimizer state
 * too: actors/lend.h) to the step's round. When the lend reaches the head of stream k, the
 * stream's own thread (the lend's start) publishes the arrays' addresses, waits until every
 * stream arrived, then works through chunk k of the parameters (all parameters laid end to end
 * in dp->params order, cut into n chunks at cache-line bounds within each array): block by
 * block it sums the n gradients in the tree merge's order (s_tree: the pairs of OCANNL's
 * stride loop, so each element gets the same bits as the merge routines give), runs the
 * optimizer's update on replica 0's parameter and state (troupe__dp_apply, the same operations
 * as the optimizer routine) and copies the new values into every other replica's parameter.
 * It then waits until every stream finished (until then others may still write into its
 * arrays) and completes its lend. That is the one-rank pass (FULL); with several ranks a SUM
 * pass writes the block's sums into replica 0's gradient instead, the in-place allreduce runs
 * on stream 0 between the passes, and an APPLY pass reads replica 0's gradient as the sums,
 * updates and copies; with the state sharded across ranks (ZeRO-1, dp_zero.c) the allreduce
 * itself updates this rank's shard and gathers the parameters into replica 0, and a COPY pass
 * only copies them to the other replicas. Every write into replica j's arrays happens while stream j's
 * lend holds them, so the ledger rules (a lend is a write of what it lends) stay true.
 *
 * Compared with the tree merge, the optimizer routine on stream 0 and the copies to the other
 * streams, the merge's copies into merge buffers are gone, the update's work and its pass over
 * the parameters are divided by n, and no stream reads lines another core is about to write
 * (the copies in the separate form left stream 0's parameters shared in the other cores'
 * caches, so its next update waited on every line).
 *
 * Waiting: a stream spins briefly, then sleeps on the round's condition variable until
 * TROUPE_TIMEOUT_S; a stream that fails or shuts down before its lend began (its lend is
 * dropped, which runs the lend's destructor) aborts the round, and a stream whose wait for the
 * others' arrival runs out aborts it too (under the round's lock, so either every stream
 * proceeds or none does): the waiting streams fail with the reason, naming the streams that
 * did not arrive. Two waits only warn each TROUPE_TIMEOUT_S and go on: for the others to
 * finish (they are in their parts, which never block, and may still write into this stream's
 * arrays), and, before the update pass, for stream 0 (it waits for the allreduce, whose own
 * deadlines end a stuck one, and a failed stream 0 aborts the round).
 *
 * Thread safety: troupe__dp_local_step on the driver's thread; a round's parts run on the
 * streams' threads. Ownership: a round holds a reference to the plan, each lend one to the
 * round.
 */
#define _GNU_SOURCE /* pthread_condattr_setclock */
#include "parallel/dp_impl.h"

#include "actors/lend.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/fpmode_impl.h"
#include "base/log.h"
#include "base/trace_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define S_BLOCK 2048 /* floats summed in L1 (8 KiB per receiver) before the update reads them */
#define S_LINE 16    /* floats per cache line: chunk bounds within an array */
#define S_SPINS 4096 /* polls before a waiting stream sleeps */

struct troupe__dp_local {
    atomic_int refs;
    int n;         /* streams (replicas) taking part */
    size_t np;     /* parameters */
    int nstate;    /* optimizer state arrays per parameter */
    int64_t *len;  /* np: elements of parameter i */
    int64_t total; /* sum of len */
    /* what replica 0 lends: grads (np), params (np), state s of parameter i at
     * 2 np + s np + i; the other replicas lend the first 2 np */
    troupe_tnode_t **lent; /* borrowed from the driver */
    size_t nlent0, nlent;
    float *scratch; /* n * (n / 2) * S_BLOCK: the tree's partial sums, per stream */
    const float **src; /* n * n: the tree's operands, per stream */
    char (*names)[48]; /* n: the streams' names, for messages */
};

typedef struct s_round s_round_t;

/* Replica k's part of a round: the lend's user argument. */
typedef struct s_part {
    s_round_t *r;
    int k;
    bool started; /* its lend's start ran (set on stream k's thread, read in the destructor) */
} s_part_t;

struct s_round {
    atomic_int refs; /* the driver while scheduling, and one per lend */
    troupe__dp_local_t *l;
    troupe__dp_local_mode_t mode;
    troupe__dp_apply_arg_t arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, finished;        /* under mu */
    bool *here;                   /* n, under mu: stream k arrived */
    atomic_bool go, gone, abort;  /* every stream arrived / finished; the round is off */
    char why[256];                /* under mu: why the round is off */
    troupe_status_t why_status;   /* under mu: its status (CANCELLED, DEADLINE_EXCEEDED) */
    float **ptr;                  /* n * nlent0: the lent arrays' addresses */
    s_part_t *part;               /* n */
    troupe_event_t **done;        /* n: the lends' done events (owned) */
};

/* ---- the plan -------------------------------------------------------------------------- */

static void s_local_release(troupe__dp_local_t *l)
{
    if (l == NULL || atomic_fetch_sub(&l->refs, 1) != 1)
        return;
    troupe_free(l->len);
    troupe_free(l->lent);
    troupe_free(l->scratch);
    troupe_free(l->src);
    troupe_free(l->names);
    troupe_free(l);
}

void troupe__dp_local_free(troupe__dp_local_t **l_p)
{
    if (l_p == NULL)
        return;
    s_local_release(*l_p);
    *l_p = NULL;
}

troupe_status_t troupe__dp_local_new(troupe_dp_t *dp, troupe__dp_local_t **out)
{
    *out = NULL;
    troupe__dp_local_t *l = troupe_calloc(1, sizeof *l);
    if (l == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    atomic_init(&l->refs, 1);
    l->n = dp->n;
    l->np = dp->n_params;
    l->nstate = dp->zero != NULL ? 0 : dp->nstate; /* sharded: the allreduce updates */
    l->nlent = 2 * l->np;
    l->nlent0 = l->nlent + (size_t)l->nstate * l->np;
    size_t n = (size_t)l->n;
    l->len = troupe_calloc(l->np, sizeof *l->len);
    l->lent = troupe_calloc(l->nlent0, sizeof *l->lent);
    l->scratch = troupe_calloc(n > 1 ? n * (n / 2) * S_BLOCK : 1, sizeof *l->scratch);
    l->src = troupe_calloc(n * n, sizeof *l->src);
    l->names = troupe_calloc(n, sizeof *l->names);
    if (!l->len || !l->lent || !l->scratch || !l->src || !l->names) {
        s_local_release(l);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    }
    for (size_t i = 0; i < l->np; i++) {
        l->len[i] = dp->params[i]->size_bytes / (int64_t)sizeof(float);
        l->total += l->len[i];
        l->lent[i] = dp->grads[i];
        l->lent[l->np + i] = dp->params[i];
        for (int s = 0; s < l->nstate; s++)
            l->lent[2 * l->np + (size_t)s * l->np + i] = dp->state[i * (size_t)l->nstate + (size_t)s];
    }
    for (int k = 0; k < l->n; k++)
        snprintf(l->names[k], sizeof l->names[k], "%s", troupe_stream_name(dp->rep[k].stream));
    *out = l;
    return TROUPE_OK;
}

/* ---- a round --------------------------------------------------------------------------- */

static void s_round_release(s_round_t *r)
{
    if (r == NULL || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    for (int k = 0; r->done != NULL && k < r->l->n; k++)
        troupe_event_release(&r->done[k]);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    s_local_release(r->l);
    troupe_free(r->here);
    troupe_free(r->ptr);
    troupe_free(r->part);
    troupe_free(r->done);
    troupe_free(r);
}

static troupe_status_t s_round_new(troupe__dp_local_t *l, troupe__dp_local_mode_t mode,
                                   const troupe__dp_apply_arg_t *arg, s_round_t **out)
{
    *out = NULL;
    s_round_t *r = troupe_calloc(1, sizeof *r);
    if (r == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_step: out of memory");
    size_t n = (size_t)l->n;
    r->here = troupe_calloc(n, sizeof *r->here);
    r->ptr = troupe_calloc(n * l->nlent0, sizeof *r->ptr);
    r->part = troupe_calloc(n, sizeof *r->part);
    r->done = troupe_calloc(n, sizeof *r->done);
    pthread_condattr_t ca;
    bool ok = r->here && r->ptr && r->part && r->done && pthread_condattr_init(&ca) == 0;
    if (ok) {
        ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
             pthread_cond_init(&r->cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
        if (ok && pthread_mutex_init(&r->mu, NULL) != 0) {
            pthread_cond_destroy(&r->cv);
            ok = false;
        }
    }
    if (!ok) {
        troupe_free(r->here);
        troupe_free(r->ptr);
        troupe_free(r->part);
        troupe_free(r->done);
        troupe_free(r);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_step: out of memory");
    }
    atomic_init(&r->refs, 1);
    atomic_fetch_add(&l->refs, 1);
    r->l = l;
    r->mode = mode;
    r->arg = *arg;
    atomic_init(&r->go, false);
    atomic_init(&r->gone, false);
    atomic_init(&r->abort, false);
    for (int k = 0; k < l->n; k++)
        r->part[k] = (s_part_t){r, k, false};
    *out = r;
    return TROUPE_OK;
}

/* Turns the round off (under mu) with the reason, unless every stream already arrived; wakes
 * the waiting streams. */
static void s_abort_locked(s_round_t *r, troupe_status_t st, const char *why)
{
    if (atomic_load(&r->go) || atomic_load(&r->abort))
        return;
    r->why_status = st;
    snprintf(r->why, sizeof r->why, "%s", why);
    atomic_store(&r->abort, true);
    pthread_cond_broadcast(&r->cv);
}

/* The streams that have not arrived, for a message. */
static void s_missing_locked(const s_round_t *r, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < r->l->n && at < cap; k++)
        if (!r->here[k]) {
            int w = snprintf(buf + at, cap - at, "%s%s", at > 0 ? ", " : "", r->l->names[k]);
            at += w > 0 ? (size_t)w : 0;
        }
}

/* Counts stream k in (counter: arrived or finished) and waits until every stream is, the round
 * is off, or the deadline passed (arrival only: it turns the round off). Returns whether every
 * stream is. */
static bool s_meet(s_round_t *r, int k, bool arrival, int64_t deadline_ns)
{
    atomic_bool *flag = arrival ? &r->go : &r->gone;
    pthread_mutex_lock(&r->mu);
    int *count = arrival ? &r->arrived : &r->finished;
    if (arrival)
        r->here[k] = true;
    if (!atomic_load(&r->abort) && ++*count == r->l->n) {
        atomic_store(flag, true);
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < S_SPINS && !atomic_load(flag) && !atomic_load(&r->abort); i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    if (atomic_load(flag))
        return true;
    struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
    pthread_mutex_lock(&r->mu);
    while (!atomic_load(flag) && !atomic_load(&r->abort)) {
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT && !atomic_load(flag)) {
            /* After the arrival every stream is in its part, which never blocks, and may still
             * write into this stream's arrays: wait on, saying so. Before the update pass the
             * other streams wait for stream 0, which waits for the allreduce (whose own
             * deadlines fail it, and a failed stream 0 turns the round off): the same. */
            bool behind0 = r->mode == TROUPE__DP_LOCAL_APPLY || r->mode == TROUPE__DP_LOCAL_COPY;
            if (!arrival || behind0) {
                TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_PARALLEL,
                           "dp: stream %s has waited %lld s (TROUPE_TIMEOUT_S) for the other "
                           "streams to %s the step's %s pass; waiting on",
                           r->l->names[k], (long long)troupe_config_timeout_s(),
                           arrival ? "reach" : "finish their parts of",
                           behind0 ? "update" : "merge");
                int64_t next = troupe_now_ns() + troupe_config_timeout_ns();
                ts = (struct timespec){(time_t)(next / 1000000000), (long)(next % 1000000000)};
                continue;
            }
            char missing[160], why[256];
            s_missing_locked(r, missing, sizeof missing);
            snprintf(why, sizeof why,
                     "stream %s waited %lld s (TROUPE_TIMEOUT_S) for stream(s) %s to reach the "
                     "step's update",
                     r->l->names[k], (long long)troupe_config_timeout_s(), missing);
            s_abort_locked(r, TROUPE_DEADLINE_EXCEEDED, why);
        }
    }
    bool all = atomic_load(flag);
    pthread_mutex_unlock(&r->mu);
    return all;
}

/* Element offsets within an array of len elements: a chunk bound at x rounds down to a whole
 * cache line from the array's start (arrays are 64-byte aligned), so no two streams write one
 * line. */
static int64_t s_snap(int64_t x, int64_t len)
{
    if (x <= 0)
        return 0;
    return x >= len ? len : x - x % S_LINE;
}

/* d = a + b over len elements (d may be a: the tree's receiver adds in place). */
TROUPE__DP_CLONED static void s_add(float *d, const float *a, const float *b, int64_t len)
{
    for (int64_t e = 0; e < len; e++)
        d[e] = a[e] + b[e];
}

/* The sum of the n gradients' block in the tree merge's order (parallel/dp.h, step 2: for
 * stride 1, 2, 4, ...: replica k, k % (2 stride) == 0, adds replica k + stride's), through
 * the stream's receivers' blocks in acc; returns the block holding the sum. */
static const float *s_tree(const float **src, int n, float *acc, int64_t len)
{
    for (int stride = 1; stride < n; stride *= 2)
        for (int k = 0; k + stride < n; k += 2 * stride) {
            float *d = acc + (size_t)(k / 2) * S_BLOCK;
            s_add(d, src[k], src[k + stride], len);
            src[k] = d;
        }
    return src[0];
}

/* Stream k's chunk of every parameter: the sums, the update, the copies (FULL); the sums into
 * replica 0's gradient (SUM); the update from replica 0's gradient, the copies (APPLY). */
static void s_work(s_round_t *r, int k)
{
    const troupe__dp_local_t *l = r->l;
    int n = l->n;
    size_t np = l->np;
    float *acc = l->scratch + (size_t)k * (size_t)(n / 2) * S_BLOCK;
    const float **src = l->src + (size_t)k * (size_t)n;
    /* the merge routines' floating-point mode (troupe__dp_apply sets it for the update) */
    bool flush = troupe_config_flush_denormals();
    troupe__fp_mode_t prev = flush ? troupe__fp_flush_enter() : (troupe__fp_mode_t)0;
    int64_t lo = l->total * k / n, hi = l->total * (k + 1) / n, base = 0;
    for (size_t i = 0; i < np; base += l->len[i], i++) {
        int64_t a = s_snap(lo - base, l->len[i]), b = s_snap(hi - base, l->len[i]);
        if (r->mode == TROUPE__DP_LOCAL_COPY) { /* replica 0's new parameters, already updated */
            for (int j = 1; j < n && b > a; j++)
                memcpy(r->ptr[(size_t)j * l->nlent0 + np + i] + a, r->ptr[np + i] + a,
                       (size_t)(b - a) * sizeof(float));
            continue;
        }
        for (int64_t o = a; o < b; o += S_BLOCK) {
            int64_t len = b - o < S_BLOCK ? b - o : S_BLOCK;
            float *g0 = r->ptr[i] + o;
            const float *sum = g0;
            if (r->mode != TROUPE__DP_LOCAL_APPLY) {
                for (int j = 0; j < n; j++)
                    src[j] = r->ptr[(size_t)j * l->nlent0 + i] + o;
                sum = s_tree(src, n, acc, len);
            }
            if (r->mode == TROUPE__DP_LOCAL_SUM) {
                if (sum != g0)
                    memcpy(g0, sum, (size_t)len * sizeof(float));
                continue;
            }
            float *side[3] = {r->ptr[np + i] + o, NULL, NULL};
            for (int s = 0; s < l->nstate; s++)
                side[1 + s] = r->ptr[2 * np + (size_t)s * np + i] + o;
            troupe__dp_apply(&r->arg, len, sum, side);
            for (int j = 1; j < n; j++)
                memcpy(r->ptr[(size_t)j * l->nlent0 + np + i] + o, side[0],
                       (size_t)len * sizeof(float));
        }
    }
    if (flush)
        troupe__fp_restore(prev);
}

/* The lend's start, on stream k's thread (actors/lend.h). */
static troupe_status_t s_start(void *user, void *const *ptrs, const int64_t *bytes, size_t nlent)
{
    s_part_t *p = user;
    s_round_t *r = p->r;
    const troupe__dp_local_t *l = r->l;
    p->started = true;
    size_t want = p->k == 0 ? l->nlent0 : l->nlent;
    bool sized = nlent == want;
    for (size_t i = 0; i < nlent && sized; i++)
        sized = bytes[i] == l->len[i % l->np] * (int64_t)sizeof(float);
    if (!sized) {
        pthread_mutex_lock(&r->mu);
        s_abort_locked(r, TROUPE_INTERNAL, "the lent arrays differ from the plan");
        pthread_mutex_unlock(&r->mu);
        return troupe__error(TROUPE_INTERNAL,
                             "dp_step: stream %s lent %zu arrays to the update across streams, "
                             "not the %zu of the plan, or of other sizes",
                             l->names[p->k], nlent, want);
    }
    for (size_t i = 0; i < nlent; i++)
        r->ptr[(size_t)p->k * l->nlent0 + i] = ptrs[i];
    int64_t t_arrive = troupe_now_ns(), deadline = t_arrive + troupe_config_timeout_ns();
    if (!s_meet(r, p->k, true, deadline)) {
        pthread_mutex_lock(&r->mu);
        troupe_status_t st = troupe__error(r->why_status,
                                           "dp_step: the update across streams on stream %s: %s",
                                           l->names[p->k], r->why);
        pthread_mutex_unlock(&r->mu);
        return st;
    }
    int64_t t_work = troupe__trace_on() ? troupe_now_ns() : 0;
    s_work(r, p->k);
    if (t_work != 0) { /* the stream's part on its timeline, with how long it waited first */
        static const char *const names[] = {"merge+update pass", "merge pass", "update pass",
                                            "copy pass"};
        troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("streams", l->n),
                                   TROUPE__TRACE_NUM("waited_ns", t_work - t_arrive)};
        troupe__trace_emit(TROUPE__TRACK_THREAD, "dp", names[r->mode], t_work, troupe_now_ns(),
                           a, 2);
    }
    (void)s_meet(r, p->k, false, troupe_now_ns() + troupe_config_timeout_ns()); /* all finish */
    troupe_event_complete(r->done[p->k], TROUPE_OK, NULL);
    return TROUPE_OK;
}

/* The lend's destructor: after its start ran, or when the lend was dropped (its stream failed
 * or shut down first): then the round is off. */
static void s_part_dtor(void *user)
{
    s_part_t *p = user;
    s_round_t *r = p->r;
    if (!p->started) {
        char why[160];
        snprintf(why, sizeof why,
                 "stream %s's part of the step's update was dropped (the stream failed or shut "
                 "down first, or the part could not be scheduled)",
                 r->l->names[p->k]);
        pthread_mutex_lock(&r->mu);
        s_abort_locked(r, TROUPE_CANCELLED, why);
        pthread_mutex_unlock(&r->mu);
    }
    s_round_release(r);
}

troupe_status_t troupe__dp_local_step(troupe_dp_t *dp, troupe__dp_local_mode_t mode,
                                      const troupe__dp_apply_arg_t *arg, troupe_event_t **out_ev0)
{
    troupe__dp_local_t *l = dp->local;
    s_round_t *r = NULL;
    TROUPE_RETURN_IF_ERROR(s_round_new(l, mode, arg, &r));
    troupe_status_t st = TROUPE_OK;
    for (int k = 0; k < l->n && st == TROUPE_OK; k++) {
        st = troupe_event_new("dp_update_streams", &r->done[k]);
        if (st != TROUPE_OK)
            break;
        atomic_fetch_add(&r->refs, 1); /* the lend's, dropped by s_part_dtor */
        st = troupe_lend_arrays(troupe__dp_tail(dp, k), k == 0 ? l->nlent0 : l->nlent, l->lent,
                                s_start, &r->part[k], s_part_dtor, r->done[k],
                                k == 0 ? out_ev0 : NULL);
    }
    if (st != TROUPE_OK) { /* the streams already holding a part must not wait for the rest */
        pthread_mutex_lock(&r->mu);
        s_abort_locked(r, TROUPE_CANCELLED, "the step could not schedule every stream's part");
        pthread_mutex_unlock(&r->mu);
    }
    s_round_release(r);
    return st;
}

bool troupe__dp_choose_local(bool config_on, int max_streams, troupe__dp_exchange_t exchange,
                             bool host_threads, size_t nseg, bool all_single, bool per_stream,
                             char *why, size_t cap)
{
    const char *no = !config_on       ? "TROUPE_DP_FUSED_UPDATE=off"
                     : max_streams <= 1 ? "one stream on every rank, nothing to merge"
                     : exchange != TROUPE__DP_EXCHANGE_NONE &&
                             exchange != TROUPE__DP_EXCHANGE_INPLACE
                         ? "the exchange goes through other memory"
                     : !host_threads ? "the backend's streams are not threads on host memory"
                     : nseg > 1      ? "overlap: the gradient routine is split"
                     : !all_single   ? "a parameter is not single precision"
                     : !per_stream   ? "a parameter is shared across streams"
                                     : NULL;
    snprintf(why, cap, "%s",
             no != NULL ? no
             : exchange == TROUPE__DP_EXCHANGE_NONE
                 ? "one rank, streams on host memory, single precision"
                 : "several streams on a rank, in-place allreduce between the passes");
    return no == NULL;
}
