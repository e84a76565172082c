/* Shared scaffolding of the multi-rank transport tests (tests/mpi/test_transport_*.c): each
 * program is one translation unit that includes this once.
 *
 *  - s_init(&argc, &argv): troupe_cluster_init, then s_rank and s_size (this rank, the number
 *    of ranks); on failure prints a FAIL line and returns the status; s_fails: failed checks;
 *  - s_fail(fmt, ...): prints one "FAIL rank r/n: ..." line and counts it;
 *  - CHECK_OK(expr): a troupe call must return TROUPE_OK, else s_fail naming the call, the
 *    status and the last error, then `goto out` (the caller's cleanup label);
 *  - s_gen(p, r, i): rank r's deterministic value at index i, in a range where sums over up to
 *    8 ranks are exact in every float precision (multiples of 1/4 within +-7.5 for floats,
 *    integers within +-30), stored in precision p and read back;
 *  - s_allreduce(t, n, op, flags, &delta): troupe_allreduce of host tensors and a sync within
 *    the test deadline; delta (may be NULL) gets the transport counters' change over the call
 *    (buckets, staged, ring_buckets, shm);
 *  - s_allreduce_start(t, n, op, &ev), s_allreduce_nodes(ctx, n, tns, op, flags, &ev):
 *    troupe_allreduce of host tensors (not waited for) or of ctx's arrays;
 *  - s_expect(p, op, i): the exact allreduce of every rank's s_gen at i, rounded once to p
 *    (mean: integers truncate toward zero);
 *  - s_verify(what, p, op, data, count, salt): data against s_expect, one FAIL line if not.
 */
#ifndef TROUPE_TESTS_MPI_TEST_UTIL_H
#define TROUPE_TESTS_MPI_TEST_UTIL_H

#include "base/status.h"
#include "ir/prec.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

static int s_rank, s_size __attribute__((unused)), s_fails;

static void s_fail(const char *fmt, ...) TROUPE_PRINTF(1, 2);
static void s_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL rank %d/%d: ", s_rank, s_size);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    s_fails++;
}

static inline troupe_status_t s_init(int *argc, char ***argv)
{
    troupe_status_t st = troupe_cluster_init(argc, argv);
    if (st != TROUPE_OK) {
        printf("FAIL: troupe_cluster_init: %s: %s\n", troupe_status_str(st), troupe_last_error());
        return st;
    }
    s_rank = troupe_cluster_rank();
    s_size = troupe_cluster_size();
    return TROUPE_OK;
}

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        troupe_status_t s__ = (expr);                                                              \
        if (s__ != TROUPE_OK) {                                                                    \
            s_fail("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #expr, troupe_status_str(s__),       \
                   troupe_last_error());                                                           \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static inline double s_gen(troupe_prec_t p, int r, int64_t i)
{
    double v = (double)((i * 7 + r * 13 + 5) % 61 - 30);
    if (troupe_prec_is_float(p))
        v *= 0.25;
    unsigned char buf[16];
    troupe_prec_store_double(p, buf, v);
    return troupe_prec_load_double(p, buf);
}

static inline double s_expect(troupe_prec_t p, troupe_reduce_op_t op, int64_t i)
{
    double acc = s_gen(p, 0, i);
    for (int r = 1; r < s_size; r++) {
        double v = s_gen(p, r, i);
        if (op == TROUPE_REDUCE_MAX)
            acc = v > acc ? v : acc;
        else if (op == TROUPE_REDUCE_MIN)
            acc = v < acc ? v : acc;
        else
            acc += v;
    }
    if (op == TROUPE_REDUCE_MEAN)
        acc /= s_size; /* stored below: floats round once (RNE), integers truncate */
    unsigned char buf[16];
    troupe_prec_store_double(p, buf, acc);
    return troupe_prec_load_double(p, buf);
}

/* The deadline of every wait in these tests. */
/* True when `count` values of precision p at data hold the exact allreduce (s_expect at
 * index + salt); else one FAIL line naming the first wrong element. */
static inline bool s_verify(const char *what, troupe_prec_t p, troupe_reduce_op_t op,
                            const void *data, int64_t count, int64_t salt)
{
    size_t es = troupe_prec_size_bytes(p);
    for (int64_t i = 0; i < count; i++) {
        double got = troupe_prec_load_double(p, (const char *)data + (size_t)i * es);
        double want = s_expect(p, op, i + salt);
        if (!(got == want)) {
            s_fail("%s: %s %s: element %lld of %lld: got %.9g, expected %.9g", what,
                   troupe_prec_name(p), troupe_reduce_op_name(op), (long long)i, (long long)count,
                   got, want);
            return false;
        }
    }
    return true;
}

#define MTU_SYNC_NS (60LL * 1000 * 1000 * 1000)

/* troupe_allreduce of host tensors t[0..n), not waited for: *ev completes with it. */
static inline troupe_status_t s_allreduce_start(const troupe_coll_tensor_t *t, size_t n,
                                                troupe_reduce_op_t op, troupe_event_t **ev)
{
    troupe_allreduce_args_t a = {.op = op, .n = n, .tensors = t};
    return troupe_allreduce(&a, ev);
}

/* troupe_allreduce of ctx's arrays of tns[0..n) with `flags`; *ev may be NULL unless
 * TROUPE_COLL_DEFERRED. */
static inline troupe_status_t s_allreduce_nodes(troupe_context_t *ctx, size_t n,
                                                troupe_tnode_t *const *tns, troupe_reduce_op_t op,
                                                unsigned flags, troupe_event_t **ev)
{
    troupe_allreduce_args_t a = {.op = op, .flags = flags, .n = n, .ctx = ctx, .nodes = tns};
    return troupe_allreduce(&a, ev);
}

/* Allreduces t[0..n) with op and flags and waits for it; *delta (may be NULL) gets the
 * transport counters' change over the call (counted fields only; the others are 0). */
static inline troupe_status_t s_allreduce(const troupe_coll_tensor_t *t, size_t n,
                                          troupe_reduce_op_t op, unsigned flags,
                                          troupe_transport_stats_t *delta)
{
    troupe_transport_stats_t before, after;
    troupe_transport_get_stats(&before);
    troupe_event_t *ev = NULL;
    troupe_allreduce_args_t a = {.op = op, .flags = flags, .n = n, .tensors = t};
    troupe_status_t st = troupe_allreduce(&a, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, MTU_SYNC_NS);
    troupe_event_release(&ev);
    troupe_transport_get_stats(&after);
    if (delta != NULL)
        *delta =
            (troupe_transport_stats_t){.buckets = after.buckets - before.buckets,
                                       .staged = after.staged - before.staged,
                                       .ring_buckets = after.ring_buckets - before.ring_buckets,
                                       .shm = after.shm - before.shm};
    return st;
}

#endif /* TROUPE_TESTS_MPI_TEST_UTIL_H */
