/* troupe — multi-rank test of the transport's collectives (transport/mpi/collective.h), run by
 * CTest under `mpiexec -n 2` with TROUPE_FUSION_BYTES=65536 (so tensors larger than a bucket
 * are sliced):
 *   - allreduce sum/mean/max/min for single, double, half, bfloat16, fp8, int32, int64 with
 *     rank-dependent inputs, against the exact result (computed in double, rounded once to the
 *     precision);
 *   - 100 small tensors of three precisions fused into buckets; one single tensor and one half
 *     tensor larger than a bucket (in-place slices, staged slices); with 1 MiB buckets, tensors
 *     of at least 128 KiB reduced in place in buckets of their own between staged ones;
 *   - tensors back to back in memory reduced in place as one bucket (no staging), also when
 *     the other rank's layout differs, and staged when a gap breaks the run; requests that
 *     form one span on every rank cut in order into in-place buckets (the flat plan), and the
 *     class plan on every rank when one rank's layout is scattered;
 *   - lazy host-level collectives started by polling their event, or by subscribing to it;
 *   - broadcast from root 1;
 *   - device level: a cpu-backend context with two hosted nodes reduced with
 *     troupe_allreduce's device level, read back with troupe_to_host; broadcast, mean,
 *     deferred (TROUPE_COLL_DEFERRED), and deferred lazy (TROUPE_COLL_LAZY, run by the waiting
 * stream), bfloat16 compression (TROUPE_COLL_BF16: rounded values, ring, staging);
 *   - the transport counters.
 * Prints one FAIL line per failed check; exits 0 only if every check passed on this rank. */
#include "actors/board_impl.h"
#include "actors/troupe.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "ir/prec.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include "mpi_test_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYNC_NS (60LL * 1000 * 1000 * 1000)

static void *s_fill(troupe_prec_t p, int64_t count, int64_t salt)
{
    size_t es = troupe_prec_size_bytes(p);
    unsigned char *data = troupe_malloc((size_t)count * es + 1);
    for (int64_t i = 0; i < count; i++)
        troupe_prec_store_double(p, data + (size_t)i * es, s_gen(p, s_rank, i + salt));
    return data;
}

static troupe_status_t s_run(troupe_event_t **ev)
{
    troupe_status_t st = troupe_event_sync(*ev, SYNC_NS);
    troupe_event_release(ev);
    return st;
}

static void s_test_ops(void)
{
    const troupe_prec_t precs[] = {TROUPE_PREC_SINGLE,   TROUPE_PREC_DOUBLE, TROUPE_PREC_HALF,
                                   TROUPE_PREC_BFLOAT16, TROUPE_PREC_FP8,    TROUPE_PREC_INT32,
                                   TROUPE_PREC_INT64};
    const troupe_reduce_op_t ops[] = {TROUPE_REDUCE_SUM, TROUPE_REDUCE_MEAN, TROUPE_REDUCE_MAX,
                                      TROUPE_REDUCE_MIN};
    const int64_t count = 1000;
    for (size_t pi = 0; pi < sizeof precs / sizeof *precs; pi++) {
        for (size_t oi = 0; oi < sizeof ops / sizeof *ops; oi++) {
            troupe_prec_t p = precs[pi];
            void *data = s_fill(p, count, 0);
            troupe_coll_tensor_t t = {.data = data,
                                      .count = count,
                                      .prec = p,
                                      .node_id = 7,
                                      .ndims = 2,
                                      .dims = {10, 100},
                                      .name = "ops"};
            troupe_event_t *ev = NULL;
            CHECK_OK(s_allreduce_start(&t, 1, ops[oi], &ev));
            CHECK_OK(s_run(&ev));
            s_verify("ops", p, ops[oi], data, count, 0);
        out:
            troupe_free(data);
        }
    }
}

/* 100 tensors of 1 KiB each, cycling single/double/half, in one request. */
static void s_test_fused(void)
{
    enum { N = 100 };
    const troupe_prec_t cyc[3] = {TROUPE_PREC_SINGLE, TROUPE_PREC_DOUBLE, TROUPE_PREC_HALF};
    troupe_coll_tensor_t t[N];
    void *data[N] = {NULL};
    troupe_transport_stats_t before, after;
    troupe_transport_get_stats(&before);
    for (int k = 0; k < N; k++) {
        troupe_prec_t p = cyc[k % 3];
        int64_t count = 1024 / (int64_t)troupe_prec_size_bytes(p);
        data[k] = s_fill(p, count, k);
        t[k] = (troupe_coll_tensor_t){.data = data[k],
                                      .count = count,
                                      .prec = p,
                                      .node_id = 100 + k,
                                      .ndims = 1,
                                      .dims = {count},
                                      .name = "fused"};
    }
    troupe_event_t *ev = NULL;
    CHECK_OK(s_allreduce_start(t, N, TROUPE_REDUCE_SUM, &ev));
    CHECK_OK(s_run(&ev));
    for (int k = 0; k < N; k++)
        if (!s_verify("fused", t[k].prec, TROUPE_REDUCE_SUM, data[k], t[k].count, k))
            break;
    troupe_transport_get_stats(&after);
    /* single and half reduce as single: 34 KiB + 66 KiB (half widened) in 64 KiB buckets;
     * double: 33 KiB. 2 + 1 buckets, far fewer than 100 messages. */
    if (after.buckets - before.buckets != 3)
        s_fail("fused: %llu buckets, expected 3",
               (unsigned long long)(after.buckets - before.buckets));
out:
    for (int k = 0; k < N; k++)
        troupe_free(data[k]);
}

/* Tensors larger than a 64 KiB bucket: reduced in slices. */
static void s_test_large(void)
{
    const int64_t nf = 1 << 20; /* 4 MiB single: 64 in-place slices */
    const int64_t nh = 100000;  /* 400 KB widened half: 7 staged slices */
    void *f = s_fill(TROUPE_PREC_SINGLE, nf, 3);
    void *h = s_fill(TROUPE_PREC_HALF, nh, 5);
    troupe_transport_stats_t before, after;
    troupe_transport_get_stats(&before);
    troupe_coll_tensor_t t = {.data = f,
                              .count = nf,
                              .prec = TROUPE_PREC_SINGLE,
                              .node_id = 1,
                              .ndims = 1,
                              .dims = {nf},
                              .name = "big"};
    troupe_event_t *ev = NULL;
    CHECK_OK(s_allreduce_start(&t, 1, TROUPE_REDUCE_MEAN, &ev));
    CHECK_OK(s_run(&ev));
    s_verify("large single", TROUPE_PREC_SINGLE, TROUPE_REDUCE_MEAN, f, nf, 3);
    t = (troupe_coll_tensor_t){
        .data = h, .count = nh, .prec = TROUPE_PREC_HALF, .node_id = 2, .name = "bighalf"};
    CHECK_OK(s_allreduce_start(&t, 1, TROUPE_REDUCE_SUM, &ev));
    CHECK_OK(s_run(&ev));
    s_verify("large half", TROUPE_PREC_HALF, TROUPE_REDUCE_SUM, h, nh, 5);
    troupe_transport_get_stats(&after);
    if (after.buckets - before.buckets != 64 + 7)
        s_fail("large: %llu buckets, expected 71",
               (unsigned long long)(after.buckets - before.buckets));
out:
    troupe_free(f);
    troupe_free(h);
}

/* With 1 MiB buckets: tensors of at least TROUPE_COLL_INPLACE_BYTES in their own type get
 * in-place buckets of their own, between staged small ones of the same class; a large half
 * tensor (widened) stays staged. */
static void s_test_inplace(void)
{
    enum { N = 5 };
    const troupe_prec_t precs[N] = {TROUPE_PREC_SINGLE, TROUPE_PREC_SINGLE, TROUPE_PREC_HALF,
                                    TROUPE_PREC_DOUBLE, TROUPE_PREC_SINGLE};
    const int64_t counts[N] = {256, 65536, 150000, 25600, 512}; /* 1 KiB, 256 KiB, 300 KB,
                                                                   200 KiB, 2 KiB */
    size_t fusion = troupe_config_fusion_bytes();
    troupe_coll_tensor_t t[N];
    void *data[N] = {NULL};
    troupe_transport_stats_t before, after;
    troupe_transport_get_stats(&before);
    CHECK_OK(troupe_config_set_fusion_bytes(1 << 20));
    for (int k = 0; k < N; k++) {
        data[k] = s_fill(precs[k], counts[k], 20 + k);
        t[k] = (troupe_coll_tensor_t){.data = data[k],
                                      .count = counts[k],
                                      .prec = precs[k],
                                      .node_id = 200 + k,
                                      .ndims = 1,
                                      .dims = {counts[k]},
                                      .name = "inplace"};
    }
    troupe_event_t *ev = NULL;
    CHECK_OK(s_allreduce_start(t, N, TROUPE_REDUCE_SUM, &ev));
    CHECK_OK(s_run(&ev));
    for (int k = 0; k < N; k++)
        if (!s_verify("inplace", precs[k], TROUPE_REDUCE_SUM, data[k], counts[k], 20 + k))
            break;
    troupe_transport_get_stats(&after);
    /* single class: the 256 KiB tensor alone (in place), the rest staged (1 KiB + 600 KB
     * widened half + 2 KiB); double: the 200 KiB tensor alone. */
    if (after.buckets - before.buckets != 3)
        s_fail("inplace: %llu buckets, expected 3",
               (unsigned long long)(after.buckets - before.buckets));
out:
    if (troupe_config_set_fusion_bytes(fusion) != TROUPE_OK)
        s_fail("inplace: cannot restore the fusion size: %s", troupe_last_error());
    for (int k = 0; k < N; k++)
        troupe_free(data[k]);
}

/* One layout round: n tensors, tensor k of counts[k] values of precs[k] (rank-dependent, index
 * offset salt + k, node id node_base + k), in one allocation back to back (flat) or each on
 * its own; allreduced with op and checked against the exact result. *buckets and *staged get
 * the round's transport counter deltas. Returns false after reporting a failure. */
static bool s_layout_round(const char *what, size_t n, const int64_t *counts,
                           const troupe_prec_t *precs, bool flat, int32_t node_base, int64_t salt,
                           troupe_reduce_op_t op, uint64_t *buckets, uint64_t *staged)
{
    bool ok = false;
    troupe_coll_tensor_t *t = troupe_calloc(n, sizeof *t);
    void **own = troupe_calloc(n, sizeof *own);
    unsigned char *block = NULL;
    size_t bytes = 0;
    for (size_t k = 0; k < n; k++)
        bytes += (size_t)counts[k] * troupe_prec_size_bytes(precs[k]);
    if (t == NULL || own == NULL || (flat && (block = troupe_malloc(bytes)) == NULL)) {
        s_fail("%s: out of memory", what);
        goto out;
    }
    for (size_t k = 0, off = 0; k < n; k++) {
        size_t es = troupe_prec_size_bytes(precs[k]);
        unsigned char *data =
            flat ? block + off : (own[k] = troupe_malloc((size_t)counts[k] * es + 1));
        if (data == NULL) {
            s_fail("%s: out of memory", what);
            goto out;
        }
        for (int64_t i = 0; i < counts[k]; i++)
            troupe_prec_store_double(precs[k], data + (size_t)i * es,
                                     s_gen(precs[k], s_rank, i + salt + (int64_t)k));
        off += (size_t)counts[k] * es;
        t[k] = (troupe_coll_tensor_t){.data = data,
                                      .count = counts[k],
                                      .prec = precs[k],
                                      .node_id = node_base + (int32_t)k,
                                      .ndims = 1,
                                      .dims = {counts[k]},
                                      .name = what};
    }
    troupe_transport_stats_t d;
    CHECK_OK(s_allreduce(t, n, op, 0u, &d));
    *buckets = d.buckets;
    *staged = d.staged;
    ok = true;
    for (size_t k = 0; k < n && ok; k++)
        ok = s_verify(what, precs[k], op, t[k].data, counts[k], salt + (int64_t)k);
out:
    for (size_t k = 0; own != NULL && k < n; k++)
        troupe_free(own[k]);
    troupe_free(own);
    troupe_free(block);
    troupe_free(t);
    return ok;
}

/* Tensors that lie back to back in memory share one bucket reduced in place, with no staging
 * copies (stats.staged), whatever the other ranks' layout: the plan does not depend on it.
 * 40 tensors of 50 + 7k values:
 *   round 0: single, in one allocation on both ranks (mean: divided in place);
 *   round 1: the same, but rank 1 allocates each tensor on its own (staged there only);
 *   round 2: one allocation on both ranks, with a double tensor between single ones: the
 *            single bucket has a gap and is staged, the double alone is in place. */
static void s_test_flat(void)
{
    enum { N = 40 };
    int64_t counts[N];
    troupe_prec_t precs[N];
    for (int round = 0; round < 3; round++) {
        uint64_t single_bytes = 0, buckets = 0, staged = 0;
        for (int k = 0; k < N; k++) {
            counts[k] = 50 + 7 * k;
            precs[k] = round == 2 && k == N / 2 ? TROUPE_PREC_DOUBLE : TROUPE_PREC_SINGLE;
            if (precs[k] == TROUPE_PREC_SINGLE)
                single_bytes += (uint64_t)counts[k] * sizeof(float);
        }
        char what[32];
        snprintf(what, sizeof what, "flat round %d", round);
        troupe_reduce_op_t op = round == 0 ? TROUPE_REDUCE_MEAN : TROUPE_REDUCE_SUM;
        if (!s_layout_round(what, N, counts, precs, round != 1 || s_rank == 0, 400, 40, op,
                            &buckets, &staged))
            continue;
        uint64_t want = round == 0 || (round == 1 && s_rank == 0) ? 0 : single_bytes;
        if (staged != want)
            s_fail("%s: %llu bytes staged, expected %llu", what, (unsigned long long)staged,
                   (unsigned long long)want);
        if (buckets != (round == 2 ? 2u : 1u))
            s_fail("%s: %llu buckets, expected %u", what, (unsigned long long)buckets,
                   round == 2 ? 2u : 1u);
    }
}

/* The flat plan: when every rank's tensors form one span (200 KiB, 1 KiB, 300 KiB, 2 KiB of
 * single here), the request is cut in order into 64 KiB buckets, all in place: 8 buckets, no
 * staging. When one rank's tensors are scattered (round 1), every rank falls back to the
 * class plan: the two large tensors in buckets of their own (4 + 5) and the two small ones
 * staged in one shared bucket, on both ranks (on rank 0 they are not adjacent). */
static void s_test_flat_plan(void)
{
    const int64_t counts[4] = {51200, 256, 76800, 512};
    const troupe_prec_t precs[4] = {TROUPE_PREC_SINGLE, TROUPE_PREC_SINGLE, TROUPE_PREC_SINGLE,
                                    TROUPE_PREC_SINGLE};
    for (int round = 0; round < 2; round++) {
        uint64_t buckets = 0, staged = 0;
        char what[32];
        snprintf(what, sizeof what, "flat plan round %d", round);
        if (!s_layout_round(what, 4, counts, precs, round == 0 || s_rank == 0, 500, 60,
                            TROUPE_REDUCE_SUM, &buckets, &staged))
            continue;
        uint64_t want_b = round == 0 ? 8 : 10, want_s = round == 0 ? 0 : 768 * sizeof(float);
        if (buckets != want_b || staged != want_s)
            s_fail("%s: %llu buckets and %llu bytes staged, expected %llu and %llu", what,
                   (unsigned long long)buckets, (unsigned long long)staged,
                   (unsigned long long)want_b, (unsigned long long)want_s);
    }
}

/* Host-level collectives start lazily, when their event is first consumed: by polling its
 * state, or by subscribing (here through troupe_event_all, synced on the combined event, which
 * has no progress hook of its own). Both must complete without a troupe_event_sync on them. */
static void s_test_lazy(void)
{
    const int64_t count = 4096;
    void *a = s_fill(TROUPE_PREC_SINGLE, count, 31);
    void *b = s_fill(TROUPE_PREC_SINGLE, count, 32);
    troupe_event_t *ev = NULL, *all = NULL;
    troupe_coll_tensor_t t = {
        .data = a, .count = count, .prec = TROUPE_PREC_SINGLE, .node_id = 300, .name = "lazy"};
    CHECK_OK(s_allreduce_start(&t, 1, TROUPE_REDUCE_SUM, &ev));
    int64_t end = troupe_now_ns() + SYNC_NS;
    while (!troupe_event_is_done(ev) && troupe_now_ns() < end)
        ;
    if (troupe_event_state(ev) != TROUPE_EVENT_DONE)
        s_fail("lazy: a polled allreduce did not complete (state %d)", troupe_event_state(ev));
    troupe_event_release(&ev);
    s_verify("lazy polled", TROUPE_PREC_SINGLE, TROUPE_REDUCE_SUM, a, count, 31);
    t.data = b;
    t.node_id = 301;
    CHECK_OK(s_allreduce_start(&t, 1, TROUPE_REDUCE_SUM, &ev));
    CHECK_OK(troupe_event_all("lazy_all", &ev, 1, &all));
    CHECK_OK(s_run(&all));
    s_verify("lazy subscribed", TROUPE_PREC_SINGLE, TROUPE_REDUCE_SUM, b, count, 32);
out:
    troupe_event_release(&ev);
    troupe_event_release(&all);
    troupe_free(a);
    troupe_free(b);
}

/* A request gated on its own events (troupe_allreduce_args_t.after) waits for this rank, not for
 * a peer: the status board says so (state waiting, no rank named, what fills it), since the
 * submission; once the event completes the collective runs and gives the sums. */
static void s_test_gated_board(void)
{
    const int64_t count = 1024;
    void *a = s_fill(TROUPE_PREC_SINGLE, count, 41);
    troupe_event_t *fill = NULL, *ev = NULL;
    troupe_coll_tensor_t t = {
        .data = a, .count = count, .prec = TROUPE_PREC_SINGLE, .node_id = 310, .name = "gated"};
    CHECK_OK(troupe_event_new("gated_fill", &fill));
    troupe_event_t *after[1] = {fill};
    troupe_allreduce_args_t args = {
        .op = TROUPE_REDUCE_SUM, .n = 1, .tensors = &t, .after = after, .n_after = 1};
    int64_t t0 = troupe_now_ns();
    CHECK_OK(troupe_allreduce(&args, &ev));
    bool seen = false;
    troupe__board_rec_t recs[64];
    for (int64_t end = troupe_now_ns() + SYNC_NS; !seen && troupe_now_ns() < end;) {
        size_t n = troupe__board_snapshot(recs, 64, NULL);
        for (size_t i = 0; i < n && i < 64; i++) {
            const troupe__board_rec_t *r = &recs[i];
            if (r->kind != TROUPE__BOARD_TRANSPORT || r->state != TROUPE__BOARD_WAITING)
                continue;
            seen = true;
            if (r->wait_rank != -1 || strstr(r->wait_by, "events filling its tensors") == NULL ||
                r->coll_active <= 0 || r->since_ns < t0 || r->since_ns > troupe_now_ns())
                s_fail("gated: the board says it waits on %s by '%s' (rank %d) since %lld, "
                       "collective %lld",
                       r->wait_on, r->wait_by, (int)r->wait_rank, (long long)r->since_ns,
                       (long long)r->coll_active);
        }
    }
    if (!seen)
        s_fail("gated: the transport never published a waiting state");
    if (troupe_event_is_done(ev))
        s_fail("gated: the allreduce completed before its event");
    troupe_event_complete(fill, TROUPE_OK, NULL);
    CHECK_OK(s_run(&ev));
    s_verify("gated", TROUPE_PREC_SINGLE, TROUPE_REDUCE_SUM, a, count, 41);
out:
    if (fill != NULL && !troupe_event_is_done(fill))
        troupe_event_complete(fill, TROUPE_CANCELLED, "test failed");
    troupe_event_release(&ev);
    troupe_event_release(&fill);
    troupe_free(a);
}

static void s_test_broadcast(void)
{
    const troupe_prec_t precs[3] = {TROUPE_PREC_INT32, TROUPE_PREC_SINGLE, TROUPE_PREC_FP8};
    const int64_t counts[3] = {100, 50000, 7};
    troupe_coll_tensor_t t[3];
    void *data[3] = {NULL};
    for (int k = 0; k < 3; k++) {
        data[k] = s_fill(precs[k], counts[k], 11 * k);
        t[k] = (troupe_coll_tensor_t){.data = data[k],
                                      .count = counts[k],
                                      .prec = precs[k],
                                      .node_id = 50 + k,
                                      .name = "bcast"};
    }
    troupe_event_t *ev = NULL;
    CHECK_OK(troupe_broadcast(t, 3, 1, &ev));
    CHECK_OK(s_run(&ev));
    for (int k = 0; k < 3; k++) {
        size_t es = troupe_prec_size_bytes(precs[k]);
        for (int64_t i = 0; i < counts[k]; i++) {
            double got = troupe_prec_load_double(precs[k], (char *)data[k] + (size_t)i * es);
            double want = s_gen(precs[k], 1, i + 11 * k);
            if (got != want) {
                s_fail("broadcast from 1: tensor %d element %lld: got %g, expected %g", k,
                       (long long)i, got, want);
                break;
            }
        }
    }
out:
    for (int k = 0; k < 3; k++)
        troupe_free(data[k]);
}

static void s_test_device(void)
{
    troupe_backend_t *b = NULL;
    troupe_device_t *d = NULL;
    troupe_stream_t *s = NULL;
    troupe_context_t *ctx = NULL;
    troupe_tnode_t *tn[2] = {NULL, NULL};
    troupe_event_t *ev = NULL;
    troupe_config_set_auto_host_transfers(false);
    CHECK_OK(troupe_backend_open("cpu", TROUPE_FOR_PARALLEL_COPYING, &b));
    CHECK_OK(troupe_get_device(b, 0, &d));
    CHECK_OK(troupe_new_stream(d, &s));
    CHECK_OK(troupe_context_new(s, &ctx));
    const int64_t dims0[1] = {3}, dims1[2] = {2, 2};
    const char *l0[1] = {"w"}, *l1[1] = {"v"};
    CHECK_OK(troupe_tnode_new(l0, 1, TROUPE_PREC_SINGLE, 1, dims0, NULL, 0.0, &tn[0]));
    CHECK_OK(troupe_tnode_new(l1, 1, TROUPE_PREC_DOUBLE, 2, dims1, NULL, 0.0, &tn[1]));
    double v0[3], v1[4];
    for (int i = 0; i < 3; i++)
        v0[i] = (i + 1) * (s_rank + 1); /* rank 0: 1 2 3; rank 1: 2 4 6 */
    for (int i = 0; i < 4; i++)
        v1[i] = 0.5 * i + 10 * s_rank;
    CHECK_OK(troupe_tnode_set_values(tn[0], v0, 3));
    CHECK_OK(troupe_tnode_set_values(tn[1], v1, 4));
    for (int k = 0; k < 2; k++) {
        troupe_context_t *c = NULL;
        CHECK_OK(troupe_init_from_host(ctx, tn[k], &c, NULL));
        troupe_context_release(&ctx);
        ctx = c;
    }
    CHECK_OK(s_allreduce_nodes(ctx, 2, tn, TROUPE_REDUCE_SUM, 0u, &ev));
    CHECK_OK(s_run(&ev));
    for (int k = 0; k < 2; k++) {
        CHECK_OK(troupe_to_host(ctx, tn[k], &ev));
        CHECK_OK(s_run(&ev));
    }
    double got0[3], got1[4];
    CHECK_OK(troupe_tnode_get_values(tn[0], got0, 3));
    CHECK_OK(troupe_tnode_get_values(tn[1], got1, 4));
    for (int i = 0; i < 3; i++)
        if (got0[i] != 3.0 * (i + 1))
            s_fail("device: w[%d] = %g, expected %g", i, got0[i], 3.0 * (i + 1));
    for (int i = 0; i < 4; i++)
        if (got1[i] != 1.0 * i + 10)
            s_fail("device: v[%d] = %g, expected %g", i, got1[i], 1.0 * i + 10);
    /* Device-level mean of the rank-dependent v again, then a broadcast of w from rank 1. */
    CHECK_OK(troupe_tnode_set_values(tn[1], v1, 4));
    CHECK_OK(troupe_from_host(ctx, tn[1], NULL));
    CHECK_OK(s_allreduce_nodes(ctx, 1, &tn[1], TROUPE_REDUCE_MEAN, 0u, NULL));
    if (s_rank == 1) {
        double w1[3] = {-1, -2, -3};
        CHECK_OK(troupe_tnode_set_values(tn[0], w1, 3));
        CHECK_OK(troupe_from_host(ctx, tn[0], NULL));
    }
    CHECK_OK(troupe_broadcast_nodes(ctx, 1, &tn[0], 1, &ev));
    CHECK_OK(s_run(&ev));
    for (int k = 0; k < 2; k++) {
        CHECK_OK(troupe_to_host(ctx, tn[k], &ev));
        CHECK_OK(s_run(&ev));
    }
    CHECK_OK(troupe_tnode_get_values(tn[0], got0, 3));
    CHECK_OK(troupe_tnode_get_values(tn[1], got1, 4));
    for (int i = 0; i < 3; i++)
        if (got0[i] != -(i + 1.0))
            s_fail("device broadcast: w[%d] = %g, expected %g", i, got0[i], -(i + 1.0));
    for (int i = 0; i < 4; i++)
        if (got1[i] != 0.5 * i + 5)
            s_fail("device mean: v[%d] = %g, expected %g", i, got1[i], 0.5 * i + 5);
    /* Deferred: the stream goes on; it waits for the result only where the caller says. Lazy:
     * started when the stream reaches the WAIT, and run by the stream's own thread when the
     * transport is idle (only the result is observable: it must be the same). */
    if (s_allreduce_nodes(ctx, 1, &tn[0], TROUPE_REDUCE_SUM, TROUPE_COLL_DEFERRED | 0x80u, &ev) !=
            TROUPE_INVALID_ARGUMENT ||
        strstr(troupe_last_error(), "unknown flags 0x80") == NULL)
        s_fail("device deferred: unknown flags not refused by name: %s", troupe_last_error());
    const troupe_reduce_op_t dops[2] = {TROUPE_REDUCE_MAX, TROUPE_REDUCE_SUM};
    const double dscale[2] = {2.0, 3.0}; /* max(1, 2) and 1 + 2, times i + 1 */
    for (int lazy = 0; lazy < 2; lazy++) {
        CHECK_OK(troupe_tnode_set_values(tn[0], v0, 3));
        CHECK_OK(troupe_from_host(ctx, tn[0], NULL));
        troupe_event_t *done = NULL;
        CHECK_OK(s_allreduce_nodes(ctx, 1, &tn[0], dops[lazy],
                                   TROUPE_COLL_DEFERRED | (lazy ? TROUPE_COLL_LAZY : 0u), &done));
        CHECK_OK(troupe_will_wait_for(ctx, done));
        troupe_event_release(&done);
        CHECK_OK(troupe_to_host(ctx, tn[0], &ev));
        CHECK_OK(s_run(&ev));
        CHECK_OK(troupe_tnode_get_values(tn[0], got0, 3));
        for (int i = 0; i < 3; i++)
            if (got0[i] != dscale[lazy] * (i + 1))
                s_fail("device deferred%s %s: w[%d] = %g, expected %g", lazy ? " lazy" : "",
                       troupe_reduce_op_name(dops[lazy]), i, got0[i], dscale[lazy] * (i + 1));
    }
    /* bfloat16 compression (TROUPE_COLL_BF16): rank 0's 1 + 2^-9 is no bfloat16 and travels
     * as 1, so the sum is 1.5 (2.0 + 2^-9 without compression); the others are exact. The
     * single tensor goes through a staging buffer and the ring, whatever its size. */
    {
        const double vb[2][3] = {{1.0 + 1.0 / 512, 2.0, -3.0}, {0.5, 0.25, 1.0}};
        const double want[3] = {1.5, 2.25, -2.0};
        troupe_transport_stats_t before, after;
        troupe_transport_get_stats(&before);
        CHECK_OK(troupe_tnode_set_values(tn[0], vb[s_rank], 3));
        CHECK_OK(troupe_from_host(ctx, tn[0], NULL));
        troupe_event_t *done = NULL;
        CHECK_OK(s_allreduce_nodes(ctx, 1, &tn[0], TROUPE_REDUCE_SUM,
                                   TROUPE_COLL_DEFERRED | TROUPE_COLL_BF16 | TROUPE_COLL_LAZY,
                                   &done));
        CHECK_OK(troupe_will_wait_for(ctx, done));
        troupe_event_release(&done);
        CHECK_OK(troupe_to_host(ctx, tn[0], &ev));
        CHECK_OK(s_run(&ev));
        troupe_transport_get_stats(&after);
        CHECK_OK(troupe_tnode_get_values(tn[0], got0, 3));
        for (int i = 0; i < 3; i++)
            if (got0[i] != want[i])
                s_fail("device bf16: w[%d] = %.9g, expected %g", i, got0[i], want[i]);
        if (after.ring_buckets - before.ring_buckets != 1 || after.staged - before.staged != 6)
            s_fail("device bf16: %llu ring buckets and %llu bytes staged, expected 1 and 6",
                   (unsigned long long)(after.ring_buckets - before.ring_buckets),
                   (unsigned long long)(after.staged - before.staged));
    }
out:
    troupe_event_release(&ev);
    if (s != NULL && troupe_stream_await(s, SYNC_NS) != TROUPE_OK)
        s_fail("device: stream: %s", troupe_last_error());
    troupe_context_release(&ctx);
    troupe_tnode_release(&tn[0]);
    troupe_tnode_release(&tn[1]);
    troupe_stream_release(&s);
    troupe_backend_close(&b);
}

int main(int argc, char **argv)
{
    troupe_status_t st = s_init(&argc, &argv);
    if (st != TROUPE_OK)
        return 1;
    if (s_size != 2 || !troupe_cluster_is_distributed())
        s_fail("expected 2 ranks under mpiexec, got %d (distributed %d)", s_size,
               troupe_cluster_is_distributed());
    /* Both ranks on this node, or one per node where the launcher says so (tests/cluster). */
    const char *per_node = getenv("TROUPE_TEST_RANKS_PER_NODE");
    int want_size = per_node != NULL ? atoi(per_node) : 2, want_rank = want_size == 1 ? 0 : s_rank;
    if (troupe_cluster_local_size() != want_size || troupe_cluster_local_rank() != want_rank)
        s_fail("local rank %d of %d, expected %d of %d", troupe_cluster_local_rank(),
               troupe_cluster_local_size(), want_rank, want_size);
    if (strstr(troupe_mpi_version(), "MPI") == NULL)
        s_fail("troupe_mpi_version() = '%s'", troupe_mpi_version());
    if (s_fails == 0) {
        s_test_ops();
        s_test_fused();
        s_test_large();
        s_test_inplace();
        s_test_flat();
        s_test_flat_plan();
        s_test_lazy();
        s_test_gated_board();
        s_test_broadcast();
        s_test_device();
    }
    troupe_transport_stats_t stats;
    troupe_transport_get_stats(&stats);
    if (stats.completed != stats.collectives || stats.failures != 0)
        s_fail("stats: %llu collectives, %llu completed, %llu failures",
               (unsigned long long)stats.collectives, (unsigned long long)stats.completed,
               (unsigned long long)stats.failures);
    st = troupe_cluster_finalize();
    if (st != TROUPE_OK)
        s_fail("troupe_cluster_finalize: %s: %s", troupe_status_str(st), troupe_last_error());
    if (s_fails == 0)
        printf("PASS rank %d: allreduce, fusion, slicing, broadcast, device level\n", s_rank);
    return s_fails == 0 ? 0 : 1;
}
