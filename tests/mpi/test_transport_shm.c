/* troupe — multi-rank test of the intra-node shared-memory allreduce
 * (transport/mpi/shm_allreduce.c; collective.h, "Shared memory"), run by CTest under `mpiexec -n 2`
 * and `-n 3` on this one machine, so every rank is on one node and shared memory must be on: every
 * allreduce below whose tensors lie back to back in troupe_coll_alloc memory on every rank is
 * counted in stats.shm (+1 per collective) and uses no ring bucket and no staging:
 *   - sum, mean, max and min of single, double, int32 and int64 tensors of 1, 7, 16, 40003 and
 *     2^20 elements (chunks of zero elements, of unequal length, several engine slices),
 *     against the exact result;
 *   - several tensors back to back in one block (one collective), at a different offset in its
 *     block on each rank; tensors with a gap between them, or of two precisions, are no span:
 *     the MPI path, right results;
 *   - the same buffers reduced 20 times in a row, with a broadcast and an ordinary-memory
 *     allreduce in between (sequence numbers of collectives that skip shared memory);
 *   - a sum of inexact floats and doubles: every rank holds the bits rank 0 holds, and they are
 *     the values summed in rank order 0, 1, ..., p-1;
 *   - layout disagreement: one rank's buffer in ordinary memory (malloc), or not one span:
 *     no rank uses shared memory, results right;
 *   - last (it turns shared memory off for the rest of the process): rank 1 fails to map
 *     another rank's memory (troupe__shm_coll_fail_maps): every rank takes the MPI path for
 *     that allreduce, results right, and for the next one too.
 * With the argument `off` (CTest runs it with TROUPE_COLL_SHM=0), the same checks expect the
 * MPI paths: stats.shm never moves, troupe_coll_alloc gives ordinary memory, results right;
 * with `mixed` (CTest sets TROUPE_COLL_SHM=0 on the last rank only) too: one rank's veto turns
 * shared memory off on every rank.
 * With `teardown` (2 ranks): the last collective before the ranks stop, where the rank that
 * completes it first stops while the other still polls its depart word: TROUPE_FAULT stalls
 * rank 0 (late to issue it, so first to arrive) 300 ms after it arrived and rank 1 2 s after
 * it departed, so rank 0 completes it and stops (troupe_cluster_finalize) before rank 1 looks
 * again; rank 1 must still complete it, with the right sums, within its deadline (the control
 * page a stopped rank leaves behind keeps its last words).
 * Prints one FAIL line per failed check; exits 0 only if every check passed on this rank. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "actors/troupe.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/shared_memory_impl.h"
#include "ir/prec.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"
#include "transport/mpi/transport_impl.h"

#include "mpi_test_util.h"

#include <math.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool s_on; /* shared memory expected (mode `on`, the default) */

/* Checks a request's counter deltas: shared memory (when expected) without ring or staging. */
static void s_check_delta(const char *what, const troupe_transport_stats_t *d, bool want_shm)
{
    uint64_t want = want_shm && s_on ? 1 : 0;
    if (d->shm != want)
        s_fail("%s: stats.shm moved by %llu, expected %llu", what, (unsigned long long)d->shm,
               (unsigned long long)want);
    if (want == 1 && (d->ring_buckets != 0 || d->staged != 0))
        s_fail("%s: %llu ring buckets and %llu staged bytes, expected none (shared memory)", what,
               (unsigned long long)d->ring_buckets, (unsigned long long)d->staged);
}

static void s_fill(troupe_prec_t p, void *data, int64_t count, int64_t salt)
{
    size_t es = troupe_prec_size_bytes(p);
    for (int64_t i = 0; i < count; i++)
        troupe_prec_store_double(p, (char *)data + (size_t)i * es, s_gen(p, s_rank, i + salt));
}

static troupe_coll_tensor_t s_tensor(void *data, troupe_prec_t p, int64_t count, int32_t id)
{
    return (troupe_coll_tensor_t){.data = data,
                                  .count = count,
                                  .prec = p,
                                  .node_id = id,
                                  .ndims = 1,
                                  .dims = {count},
                                  .name = "shm"};
}

/* troupe_coll_alloc of at least TROUPE__SHM_MIN_BYTES (smaller ones hold no descriptor and
 * are ordinary memory), as every buffer below is allocated. */
static void *s_shared(size_t bytes)
{
    return troupe_coll_alloc(bytes < TROUPE__SHM_MIN_BYTES ? TROUPE__SHM_MIN_BYTES : bytes);
}

/* The memory troupe_coll_alloc gives is shareable exactly when shared memory is on and the
 * allocation is of at least TROUPE__SHM_MIN_BYTES. */
static void s_test_alloc(void)
{
    void *small = troupe_coll_alloc(100);
    troupe__shm_ref_t ref;
    if (small == NULL)
        s_fail("alloc: troupe_coll_alloc(100) returned NULL");
    else if (troupe__shm_find(small, 100, &ref))
        s_fail("alloc: troupe_coll_alloc(100) is shareable (below TROUPE__SHM_MIN_BYTES)");
    troupe_coll_free(small);
    size_t n = TROUPE__SHM_MIN_BYTES;
    void *p = troupe_coll_alloc(n);
    if (p == NULL) {
        s_fail("alloc: troupe_coll_alloc(%zu) returned NULL", n);
        return;
    }
    bool shared = troupe__shm_find(p, n, &ref);
    if (shared != s_on)
        s_fail("alloc: troupe_coll_alloc's memory is %sshareable with shared memory %s",
               shared ? "" : "not ", s_on ? "on" : "off");
    if ((uintptr_t)p % 64 != 0)
        s_fail("alloc: %p is not 64-byte aligned", p);
    for (size_t i = 0; i < n; i++)
        if (((unsigned char *)p)[i] != 0) {
            s_fail("alloc: byte %zu is not zero", i);
            break;
        }
    troupe_coll_free(p);
    troupe_coll_free(NULL);
    if (shared && troupe__shm_find(p, 1, &ref))
        s_fail("alloc: troupe_coll_free left the region");
}

static void s_test_ops(void)
{
    const troupe_prec_t precs[] = {TROUPE_PREC_SINGLE, TROUPE_PREC_DOUBLE, TROUPE_PREC_INT32,
                                   TROUPE_PREC_INT64};
    const troupe_reduce_op_t ops[] = {TROUPE_REDUCE_SUM, TROUPE_REDUCE_MEAN, TROUPE_REDUCE_MAX,
                                      TROUPE_REDUCE_MIN};
    const int64_t counts[] = {1, 7, 16, 40003, (int64_t)1 << 20};
    for (size_t pi = 0; pi < sizeof precs / sizeof *precs; pi++) {
        for (size_t oi = 0; oi < sizeof ops / sizeof *ops; oi++) {
            for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
                troupe_prec_t p = precs[pi];
                int64_t count = counts[ci], salt = (int64_t)(pi * 20 + oi * 5 + ci);
                char what[96];
                snprintf(what, sizeof what, "ops %s %s %lld", troupe_prec_name(p),
                         troupe_reduce_op_name(ops[oi]), (long long)count);
                void *data = s_shared((size_t)count * troupe_prec_size_bytes(p));
                if (data == NULL) {
                    s_fail("%s: out of memory", what);
                    return;
                }
                s_fill(p, data, count, salt);
                troupe_coll_tensor_t t = s_tensor(data, p, count, 7);
                troupe_transport_stats_t d;
                troupe_status_t st = s_allreduce(&t, 1, ops[oi], 0u, &d);
                if (st != TROUPE_OK)
                    s_fail("%s: %s: %s", what, troupe_status_str(st), troupe_last_error());
                else if (s_verify(what, p, ops[oi], data, count, salt))
                    s_check_delta(what, &d, true);
                troupe_coll_free(data);
            }
        }
    }
}

/* Tensors back to back in one block, at an offset that differs between ranks: one span. */
static void s_test_flat(void)
{
    {
        const int64_t counts[] = {3, 1000, 1, 50000, 17};
        enum { N = sizeof counts / sizeof *counts };
        int64_t total = 0;
        for (int k = 0; k < N; k++)
            total += counts[k];
        size_t lead = (size_t)s_rank * 4; /* floats before the span, per rank */
        float *block = s_shared((lead + (size_t)total + 5) * sizeof(float));
        if (block == NULL) {
            s_fail("flat: out of memory");
            return;
        }
        troupe_coll_tensor_t t[N];
        float *at = block + lead;
        for (int k = 0; k < N; k++) {
            s_fill(TROUPE_PREC_SINGLE, at, counts[k], 100 * k);
            t[k] = s_tensor(at, TROUPE_PREC_SINGLE, counts[k], 20 + k);
            at += counts[k];
        }
        at[0] = 42.0f; /* past the span: untouched */
        troupe_transport_stats_t d;
        troupe_status_t st = s_allreduce(t, N, TROUPE_REDUCE_SUM, 0u, &d);
        bool ok = st == TROUPE_OK;
        if (!ok)
            s_fail("flat single: %s: %s", troupe_status_str(st), troupe_last_error());
        for (int k = 0; k < N && ok; k++)
            ok = s_verify("flat single", TROUPE_PREC_SINGLE, TROUPE_REDUCE_SUM, t[k].data,
                          counts[k], 100 * k);
        if (ok && at[0] != 42.0f)
            s_fail("flat single: the float after the span changed to %g", (double)at[0]);
        if (ok)
            s_check_delta("flat single (5 tensors)", &d, true);
        troupe_coll_free(block);
    }
    {
        /* int64 tensors, the span 8 bytes into the block on rank 0, 16 on rank 1, ...; max */
        const int64_t counts[] = {7, 4096, 9, 1};
        enum { N = sizeof counts / sizeof *counts };
        int64_t *block = s_shared((size_t)(s_rank + 1 + 4200) * sizeof(int64_t));
        if (block == NULL) {
            s_fail("flat: out of memory");
            return;
        }
        troupe_coll_tensor_t t[N];
        int64_t *at = block + s_rank + 1;
        for (int k = 0; k < N; k++) {
            s_fill(TROUPE_PREC_INT64, at, counts[k], 3 * k);
            t[k] = s_tensor(at, TROUPE_PREC_INT64, counts[k], 30 + k);
            at += counts[k];
        }
        troupe_transport_stats_t d;
        troupe_status_t st = s_allreduce(t, N, TROUPE_REDUCE_MAX, 0u, &d);
        bool ok = st == TROUPE_OK;
        if (!ok)
            s_fail("flat int64: %s: %s", troupe_status_str(st), troupe_last_error());
        for (int k = 0; k < N && ok; k++)
            ok = s_verify("flat int64", TROUPE_PREC_INT64, TROUPE_REDUCE_MAX, t[k].data, counts[k],
                          3 * k);
        if (ok)
            s_check_delta("flat int64 (4 tensors, offset by rank)", &d, true);
        troupe_coll_free(block);
    }
}

/* Tensors in one shareable block that are no span: a gap, or two precisions. */
static void s_test_not_a_span(void)
{
    char *block = s_shared(64 * 1024);
    if (block == NULL) {
        s_fail("not a span: out of memory");
        return;
    }
    /* a gap of 4 bytes between two single tensors */
    troupe_coll_tensor_t t[2] = {s_tensor(block, TROUPE_PREC_SINGLE, 100, 40),
                                 s_tensor(block + 404, TROUPE_PREC_SINGLE, 300, 41)};
    s_fill(TROUPE_PREC_SINGLE, t[0].data, 100, 0);
    s_fill(TROUPE_PREC_SINGLE, t[1].data, 300, 1000);
    troupe_transport_stats_t d;
    troupe_status_t st = s_allreduce(t, 2, TROUPE_REDUCE_SUM, 0u, &d);
    if (st != TROUPE_OK)
        s_fail("gap: %s: %s", troupe_status_str(st), troupe_last_error());
    else if (s_verify("gap", TROUPE_PREC_SINGLE, TROUPE_REDUCE_SUM, t[0].data, 100, 0) &&
             s_verify("gap", TROUPE_PREC_SINGLE, TROUPE_REDUCE_SUM, t[1].data, 300, 1000))
        s_check_delta("gap", &d, false);
    /* single then double, back to back */
    memset(block, 0, 64 * 1024);
    t[0] = s_tensor(block, TROUPE_PREC_SINGLE, 10, 42);
    t[1] = s_tensor(block + 40, TROUPE_PREC_DOUBLE, 200, 43);
    s_fill(TROUPE_PREC_SINGLE, t[0].data, 10, 5);
    s_fill(TROUPE_PREC_DOUBLE, t[1].data, 200, 6);
    st = s_allreduce(t, 2, TROUPE_REDUCE_MIN, 0u, &d);
    if (st != TROUPE_OK)
        s_fail("two precisions: %s: %s", troupe_status_str(st), troupe_last_error());
    else if (s_verify("two precisions", TROUPE_PREC_SINGLE, TROUPE_REDUCE_MIN, t[0].data, 10, 5) &&
             s_verify("two precisions", TROUPE_PREC_DOUBLE, TROUPE_REDUCE_MIN, t[1].data, 200, 6))
        s_check_delta("two precisions", &d, false);
    troupe_coll_free(block);
}

/* The same shareable buffers (mapped once, then from the peers' caches) reduced again and
 * again, with collectives that skip shared memory in between. */
static void s_test_repeat(void)
{
    enum { COUNT = 30000, ROUNDS = 20 };
    int32_t *a = s_shared(COUNT * sizeof *a);
    double *b = s_shared(COUNT * sizeof *b);
    float *plain = malloc(1000 * sizeof *plain);
    if (a == NULL || b == NULL || plain == NULL) {
        s_fail("repeat: out of memory");
        goto out;
    }
    for (int k = 0; k < ROUNDS; k++) {
        char what[64];
        snprintf(what, sizeof what, "repeat %d", k);
        bool use_a = k % 3 != 2;
        troupe_prec_t p = use_a ? TROUPE_PREC_INT32 : TROUPE_PREC_DOUBLE;
        void *data = use_a ? (void *)a : (void *)b;
        s_fill(p, data, COUNT, 11 * k);
        troupe_coll_tensor_t t = s_tensor(data, p, COUNT, 50);
        troupe_transport_stats_t d;
        troupe_status_t st = s_allreduce(&t, 1, TROUPE_REDUCE_SUM, 0u, &d);
        if (st != TROUPE_OK) {
            s_fail("%s: %s: %s", what, troupe_status_str(st), troupe_last_error());
            goto out;
        }
        if (!s_verify(what, p, TROUPE_REDUCE_SUM, data, COUNT, 11 * k))
            goto out;
        s_check_delta(what, &d, true);
        if (k % 4 == 1) { /* an allreduce of ordinary memory: the MPI path */
            s_fill(TROUPE_PREC_SINGLE, plain, 1000, k);
            troupe_coll_tensor_t tp = s_tensor(plain, TROUPE_PREC_SINGLE, 1000, 51);
            st = s_allreduce(&tp, 1, TROUPE_REDUCE_MAX, 0u, &d);
            if (st != TROUPE_OK) {
                s_fail("%s (ordinary): %s: %s", what, troupe_status_str(st), troupe_last_error());
                goto out;
            }
            if (!s_verify(what, TROUPE_PREC_SINGLE, TROUPE_REDUCE_MAX, plain, 1000, k))
                goto out;
            s_check_delta("ordinary memory", &d, false);
        } else if (k % 4 == 3) { /* a broadcast of the shareable block from the last rank */
            for (int i = 0; i < COUNT; i++)
                a[i] = s_rank * 1000 + i;
            troupe_coll_tensor_t tb = s_tensor(a, TROUPE_PREC_INT32, COUNT, 52);
            troupe_event_t *ev = NULL;
            troupe_transport_stats_t before, after;
            troupe_transport_get_stats(&before);
            st = troupe_broadcast(&tb, 1, s_size - 1, &ev);
            if (st == TROUPE_OK)
                st = troupe_event_sync(ev, MTU_SYNC_NS);
            troupe_event_release(&ev);
            troupe_transport_get_stats(&after);
            if (st != TROUPE_OK) {
                s_fail("%s (broadcast): %s: %s", what, troupe_status_str(st), troupe_last_error());
                goto out;
            }
            for (int i = 0; i < COUNT; i++)
                if (a[i] != (s_size - 1) * 1000 + i) {
                    s_fail("%s (broadcast): element %d is %d", what, i, (int)a[i]);
                    break;
                }
            if (after.shm != before.shm)
                s_fail("%s: a broadcast counted in stats.shm", what);
        }
    }
out:
    troupe_coll_free(a);
    troupe_coll_free(b);
    free(plain);
}

/* Rank r's inexact value at i (rounded to p by the caller). */
static double s_inexact(int r, int64_t i)
{
    return sin(0.37 * (double)i + 1.91 * r) * ldexp(1.0, (int)((i * 5 + r) % 23) - 11) +
           1.0 / (3.0 + (double)r);
}

/* Sums of inexact values: all ranks hold rank 0's bits, the rank-order sum. */
static void s_test_bitwise(void)
{
    enum { COUNT = 40003 };
    const troupe_prec_t precs[] = {TROUPE_PREC_SINGLE, TROUPE_PREC_DOUBLE};
    for (size_t pi = 0; pi < 2; pi++) {
        troupe_prec_t p = precs[pi];
        size_t es = troupe_prec_size_bytes(p), bytes = COUNT * es;
        const char *what = pi == 0 ? "bitwise single" : "bitwise double";
        char *data = s_shared(bytes);
        char *root = malloc(bytes);
        if (data == NULL || root == NULL) {
            s_fail("%s: out of memory", what);
            troupe_coll_free(data);
            free(root);
            return;
        }
        for (int64_t i = 0; i < COUNT; i++) {
            if (p == TROUPE_PREC_SINGLE)
                ((float *)(void *)data)[i] = (float)s_inexact(s_rank, i);
            else
                ((double *)(void *)data)[i] = s_inexact(s_rank, i);
        }
        troupe_coll_tensor_t t = s_tensor(data, p, COUNT, 60);
        troupe_transport_stats_t d;
        troupe_status_t st = s_allreduce(&t, 1, TROUPE_REDUCE_SUM, 0u, &d);
        if (st != TROUPE_OK) {
            s_fail("%s: %s: %s", what, troupe_status_str(st), troupe_last_error());
        } else {
            s_check_delta(what, &d, true);
            if (s_on) { /* shared memory sums in rank order (the ring in another order) */
                for (int64_t i = 0; i < COUNT; i++) {
                    bool same;
                    double want;
                    if (p == TROUPE_PREC_SINGLE) {
                        float acc = (float)s_inexact(0, i);
                        for (int r = 1; r < s_size; r++)
                            acc += (float)s_inexact(r, i);
                        same = memcmp(&acc, data + (size_t)i * es, es) == 0;
                        want = acc;
                    } else {
                        double acc = s_inexact(0, i);
                        for (int r = 1; r < s_size; r++)
                            acc += s_inexact(r, i);
                        same = memcmp(&acc, data + (size_t)i * es, es) == 0;
                        want = acc;
                    }
                    if (!same) {
                        s_fail("%s: element %lld is %.17g, not the rank-order sum %.17g", what,
                               (long long)i, troupe_prec_load_double(p, data + (size_t)i * es),
                               want);
                        break;
                    }
                }
            }
        }
        /* every rank compares its bits with rank 0's (all ranks call, whatever happened) */
        memcpy(root, data, bytes);
        if (MPI_Bcast(root, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
            s_fail("%s: MPI_Bcast failed", what);
        else if (st == TROUPE_OK && memcmp(root, data, bytes) != 0) {
            int64_t i = 0;
            while (i < COUNT && memcmp(root + i * es, data + i * es, es) == 0)
                i++;
            s_fail("%s: element %lld differs from rank 0's: %.17g here, %.17g there", what,
                   (long long)i, troupe_prec_load_double(p, data + (size_t)i * es),
                   troupe_prec_load_double(p, root + (size_t)i * es));
        }
        troupe_coll_free(data);
        free(root);
    }
}

/* One rank's tensors in ordinary memory, or not one span: no rank uses shared memory. */
static void s_test_disagree(void)
{
    enum { COUNT = 40003 };
    /* rank 1: malloc; the others: troupe_coll_alloc */
    for (int big = 0; big < 2; big++) {
        int64_t count = big ? COUNT : 100; /* the ring, or MPI_Iallreduce */
        size_t bytes = (size_t)count * sizeof(float);
        float *data = s_rank == 1 ? malloc(bytes) : s_shared(bytes);
        if (data == NULL) {
            s_fail("disagree: out of memory");
            return;
        }
        s_fill(TROUPE_PREC_SINGLE, data, count, 9);
        troupe_coll_tensor_t t = s_tensor(data, TROUPE_PREC_SINGLE, count, 70);
        troupe_transport_stats_t d;
        troupe_status_t st = s_allreduce(&t, 1, TROUPE_REDUCE_MEAN, 0u, &d);
        if (st != TROUPE_OK)
            s_fail("disagree (rank 1 malloc): %s: %s", troupe_status_str(st), troupe_last_error());
        else if (s_verify("disagree (rank 1 malloc)", TROUPE_PREC_SINGLE, TROUPE_REDUCE_MEAN, data,
                          count, 9))
            s_check_delta("disagree (rank 1's buffer from malloc)", &d, false);
        if (s_rank == 1)
            free(data);
        else
            troupe_coll_free(data);
    }
    /* rank 0: two tensors in two blocks; the others: back to back in one */
    float *blk[2] = {NULL, NULL};
    if (s_rank == 0) {
        blk[0] = s_shared(500 * sizeof(float));
        blk[1] = s_shared(700 * sizeof(float));
    } else {
        blk[0] = s_shared(1200 * sizeof(float));
    }
    if (blk[0] == NULL || (s_rank == 0 && blk[1] == NULL)) {
        s_fail("disagree: out of memory");
        goto out;
    }
    troupe_coll_tensor_t t[2] = {
        s_tensor(blk[0], TROUPE_PREC_INT32, 500, 71),
        s_tensor(s_rank == 0 ? blk[1] : (void *)(blk[0] + 500), TROUPE_PREC_INT32, 700, 72)};
    s_fill(TROUPE_PREC_INT32, t[0].data, 500, 1);
    s_fill(TROUPE_PREC_INT32, t[1].data, 700, 2);
    troupe_transport_stats_t d;
    troupe_status_t st = s_allreduce(t, 2, TROUPE_REDUCE_SUM, 0u, &d);
    if (st != TROUPE_OK)
        s_fail("disagree (rank 0 two blocks): %s: %s", troupe_status_str(st), troupe_last_error());
    else if (s_verify("disagree (rank 0 two blocks)", TROUPE_PREC_INT32, TROUPE_REDUCE_SUM,
                      t[0].data, 500, 1) &&
             s_verify("disagree (rank 0 two blocks)", TROUPE_PREC_INT32, TROUPE_REDUCE_SUM,
                      t[1].data, 700, 2))
        s_check_delta("disagree (rank 0's tensors in two blocks)", &d, false);
    /* and afterwards shared memory is still on */
    s_fill(TROUPE_PREC_INT32, blk[0], 500, 3);
    st = s_allreduce(t, 1, TROUPE_REDUCE_SUM, 0u, &d);
    if (st != TROUPE_OK)
        s_fail("after disagreeing: %s: %s", troupe_status_str(st), troupe_last_error());
    else if (s_verify("after disagreeing", TROUPE_PREC_INT32, TROUPE_REDUCE_SUM, blk[0], 500, 3))
        s_check_delta("after disagreeing", &d, true);
out:
    troupe_coll_free(blk[0]);
    troupe_coll_free(blk[1]);
}

/* Rank 1 cannot map another rank's memory at one request: every rank reduces it through MPI,
 * and shared memory stays off from then on. Last: it turns shared memory off for good. */
static void s_test_fallback(void)
{
    enum { COUNT = 40003 };
    double *data = s_shared(COUNT * sizeof *data);
    if (data == NULL) {
        s_fail("fallback: out of memory");
        return;
    }
    for (int k = 0; k < 3; k++) {
        /* k 0: shared memory still on; k 1: rank 1's mapping fails; k 2: off from then on */
        char what[64];
        snprintf(what, sizeof what, "fallback %d", k);
        if (k == 1 && s_rank == 1)
            troupe__shm_coll_fail_maps(1);
        s_fill(TROUPE_PREC_DOUBLE, data, COUNT, 7 * k);
        troupe_coll_tensor_t t = s_tensor(data, TROUPE_PREC_DOUBLE, COUNT, 80);
        troupe_transport_stats_t d;
        troupe_status_t st = s_allreduce(&t, 1, TROUPE_REDUCE_SUM, 0u, &d);
        if (st != TROUPE_OK) {
            s_fail("%s: %s: %s", what, troupe_status_str(st), troupe_last_error());
            break;
        }
        if (s_verify(what, TROUPE_PREC_DOUBLE, TROUPE_REDUCE_SUM, data, COUNT, 7 * k))
            s_check_delta(what, &d, k == 0);
    }
    troupe_coll_free(data);
}

/* Mode `teardown` (see the top): the run's last collective, then main stops the cluster. */
static void s_test_teardown(void)
{
    enum { COUNT = 40000 }; /* 160 KiB: shareable */
    float *data = s_shared(COUNT * sizeof *data);
    if (data == NULL) {
        s_fail("teardown: out of memory");
        return;
    }
    s_fill(TROUPE_PREC_SINGLE, data, COUNT, 3);
    troupe_coll_tensor_t t = s_tensor(data, TROUPE_PREC_SINGLE, COUNT, 60);
    troupe_transport_stats_t d;
    /* #1 maps the ranks' spans, so that in #2 rank 0 arrives within microseconds of getting
     * rank 1's fingerprint, while rank 1, waiting for rank 0's, polls every 50 us */
    CHECK_OK(s_allreduce(&t, 1, TROUPE_REDUCE_SUM, 0u, &d));
    s_fill(TROUPE_PREC_SINGLE, data, COUNT, 3);
    CHECK_OK(troupe_config_set_fault(
        "stall:rank=0:collective=2:ms=300,stall:rank=1:collective=2:ms=2000"));
    if (s_rank == 0) { /* rank 1 waits for its fingerprint: rank 0 arrives first */
        struct timespec late = {0, 200 * 1000 * 1000};
        nanosleep(&late, NULL);
    }
    CHECK_OK(s_allreduce(&t, 1, TROUPE_REDUCE_SUM, 0u, &d));
    s_check_delta("teardown", &d, true);
    s_verify("teardown", TROUPE_PREC_SINGLE, TROUPE_REDUCE_SUM, data, COUNT, 3);
out:
    troupe_coll_free(data);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "on";
    bool mixed = strcmp(mode, "mixed") == 0;
    bool teardown = strcmp(mode, "teardown") == 0;
    if (strcmp(mode, "on") != 0 && strcmp(mode, "off") != 0 && !mixed && !teardown) {
        printf("FAIL: unknown mode '%s' (on, off, mixed, teardown)\n", mode);
        return 2;
    }
    s_on = strcmp(mode, "on") == 0 || teardown;
    troupe_status_t st = s_init(&argc, &argv);
    if (st != TROUPE_OK)
        return 1;
    if (s_size < 2 || s_size > 8)
        s_fail("expected 2 to 8 ranks under mpiexec, got %d", s_size);
    bool want_env = mixed ? s_rank != s_size - 1 : s_on;
    if (troupe_config_coll_shm() != want_env)
        s_fail("TROUPE_COLL_SHM is %d in mode %s", troupe_config_coll_shm() ? 1 : 0, mode);
    if (s_fails == 0 && teardown) {
        if (s_size != 2)
            s_fail("teardown: expected 2 ranks, got %d", s_size);
        else
            s_test_teardown();
    } else if (s_fails == 0) {
        s_test_alloc();
        s_test_ops();
        s_test_flat();
        s_test_not_a_span();
        s_test_repeat();
        s_test_bitwise();
        s_test_disagree();
        s_test_fallback(); /* last: shared memory is off after it */
    }
    st = troupe_cluster_finalize();
    if (st != TROUPE_OK)
        s_fail("troupe_cluster_finalize: %s: %s", troupe_status_str(st), troupe_last_error());
    if (s_fails == 0)
        printf("PASS rank %d/%d: shared-memory allreduce (%s)\n", s_rank, s_size, mode);
    return s_fails == 0 ? 0 : 1;
}
