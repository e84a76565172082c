/* troupe — multi-rank test of an update fused into a device-level allreduce
 * (troupe_coll_apply_t, transport/mpi/collective.h), run by CTest under `mpiexec -n 2` and
 * `-n 3` on this one machine. The update is p := p * a + sum, m := m + sum * b (a, b from its
 * argument), on values whose sums and updates are exact in single precision, so every result is
 * checked for equality with the value computed here:
 *   - gradients and side arrays packed alike (troupe_init_from_host_packed, in the same order):
 *     with shared memory on (mode `on`) the request goes through it (stats.shm +1, each rank
 *     updating its chunk and writing every rank's side arrays), three times in a row with
 *     another argument each time, the first with TROUPE_COLL_DEFERRED | TROUPE_COLL_LAZY as
 *     parallel/ issues it; with TROUPE_COLL_SHM=0 (mode `off`) the same through the MPI paths
 *     (every rank updating every element);
 *   - side arrays that do not lie as the gradients (one array each), on every rank or on rank 0
 *     only: the sums through shared memory all the same (stats.shm +1 in mode `on`), then the
 *     update on every rank, results right;
 *   - gradients that form no span (one array each): the per-tensor MPI path, results right;
 *   - mode `on`, last: rank 1 fails to map another rank's memory (troupe__shm_coll_fail_maps):
 *     every rank takes the MPI path for that request and the next, the update runs once;
 *   - a tensor or a side array given twice: refused (the transport would write what others sum);
 *   - arguments that break the rules: INVALID_ARGUMENT naming the problem, nothing issued;
 *   - mode `mismatch`: rank 0 passes an update, the others do not: every rank fails the
 *     collective with FAILED_PRECONDITION naming the fused update;
 *   - mode `private` (and in mode `off`): the state m private (troupe_coll_apply_t n_private,
 *     ZeRO stage 1): through shared memory p is right everywhere while each rank's m is
 *     current in its own chunk only (the rest still holds its starting value: the copies were
 *     skipped); TROUPE_COLL_UNSHARD makes m whole and right on every rank, and the next update
 *     starts from it; side arrays that do not lie as the gradients are never sharded; a failed
 *     mapping after sharded rounds: the MPI path gathers m first and every rank's p and m are
 *     right; with TROUPE_COLL_SHM=0 nothing is sharded and the gather does nothing;
 *   - on one rank (mode `private`, np1): the update runs once, a gather changes nothing (its
 *     update is not run);
 *   - m sharded (troupe_coll_apply_t shard, ZeRO stage 1's memory saving; modes `private` on
 *     2 and 3 ranks, `off` and `shard`, the last on 3 ranks without shared memory): each rank
 *     holds only its shard [lo, hi) of m, and p is right on every rank while each shard is
 *     right on its rank, three rounds in a row; through shared memory stats.shm +1; without it,
 *     packed gradients (one span) take the reduce-scatter (stats.reduce_scatters +1, no fusion
 *     bucket) and gradients one by one the buckets' allreduce (reduce_scatters +0);
 *   - refused: every side array private, TROUPE_COLL_UNSHARD without private side arrays.
 * Prints one FAIL line per failed check; exits 0 only if every check passed on this rank. */
#include "actors/troupe.h"
#include "base/config.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"
#include "transport/mpi/transport_impl.h"

#include "mpi_test_util.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NT 3                           /* tensors */
static const int64_t s_counts[NT] = {20000, 48, 4099}; /* 96 KiB (shareable pools), back to back */
#define SYNC_NS (60LL * 1000 * 1000 * 1000)

typedef struct s_arg {
    float a, b;
} s_arg_t;

static void s_update(const void *arg, int64_t n, const float *sum, float *const *side)
{
    const s_arg_t *x = arg;
    for (int64_t e = 0; e < n; e++) {
        side[0][e] = side[0][e] * x->a + sum[e];
        side[1][e] = side[1][e] + sum[e] * x->b;
    }
}

/* One stream's context holding gradients g[NT], parameters p[NT] and states m[NT], uploaded
 * packed (one pool per kind, in tensor order) or one array each. */
typedef struct s_setup {
    troupe_backend_t *b;
    troupe_stream_t *s;
    troupe_context_t *ctx;
    troupe_tnode_t *g[NT], *p[NT], *m[NT];
    double pv[NT][20000], mv[NT][20000]; /* the expected side values */
} s_setup_t;

static s_setup_t s_set;
static size_t s_private; /* the updates' private side arrays (m when 1) */
static bool s_laid;      /* the side arrays lie as the gradients (shared memory can shard m) */
static double s_mb[NT][20000]; /* m when it was last whole on every rank (sharded: the rest) */

static troupe_status_t s_new_node(const char *kind, int t, troupe_tnode_t **out)
{
    char label[32];
    snprintf(label, sizeof label, "%s%d", kind, t);
    const char *l[1] = {label};
    return troupe_tnode_new(l, 1, TROUPE_PREC_SINGLE, 1, &s_counts[t], NULL, 0.0, out);
}

/* Uploads the nodes of one kind into s_set.ctx, packed or one by one. */
static troupe_status_t s_upload(troupe_tnode_t **tns, bool packed)
{
    troupe_context_t *c = NULL;
    if (packed) {
        TROUPE_RETURN_IF_ERROR(troupe_init_from_host_packed(s_set.ctx, NT, tns, &c));
        troupe_context_release(&s_set.ctx);
        s_set.ctx = c;
        return TROUPE_OK;
    }
    for (int t = 0; t < NT; t++) {
        TROUPE_RETURN_IF_ERROR(troupe_init_from_host(s_set.ctx, tns[t], &c, NULL));
        troupe_context_release(&s_set.ctx);
        s_set.ctx = c;
    }
    return TROUPE_OK;
}

static void s_teardown(void)
{
    troupe_context_release(&s_set.ctx);
    for (int t = 0; t < NT; t++) {
        troupe_tnode_release(&s_set.g[t]);
        troupe_tnode_release(&s_set.p[t]);
        troupe_tnode_release(&s_set.m[t]);
    }
    troupe_stream_release(&s_set.s);
    troupe_backend_close(&s_set.b);
}

/* Fresh nodes with this rank's gradients (s_gen) and the starting side values, uploaded. */
static bool s_setup(bool packed_grads, bool packed_sides)
{
    s_teardown();
    troupe_device_t *d = NULL;
    static double v[20000];
    CHECK_OK(troupe_backend_open("cpu", TROUPE_FOR_PARALLEL_COPYING, &s_set.b));
    CHECK_OK(troupe_get_device(s_set.b, 0, &d));
    CHECK_OK(troupe_new_stream(d, &s_set.s));
    CHECK_OK(troupe_context_new(s_set.s, &s_set.ctx));
    for (int t = 0; t < NT; t++) {
        CHECK_OK(s_new_node("g", t, &s_set.g[t]));
        CHECK_OK(s_new_node("p", t, &s_set.p[t]));
        CHECK_OK(s_new_node("m", t, &s_set.m[t]));
        for (int64_t i = 0; i < s_counts[t]; i++)
            v[i] = s_gen(TROUPE_PREC_SINGLE, s_rank, i + 10000 * t);
        CHECK_OK(troupe_tnode_set_values(s_set.g[t], v, s_counts[t]));
        for (int64_t i = 0; i < s_counts[t]; i++) { /* the same on every rank, as parameters */
            s_set.pv[t][i] = (double)(i % 9) - 4.0;
            s_set.mv[t][i] = 1.0;
        }
        CHECK_OK(troupe_tnode_set_values(s_set.p[t], s_set.pv[t], s_counts[t]));
        memcpy(s_mb[t], s_set.mv[t], sizeof s_mb[t]);
        CHECK_OK(troupe_tnode_set_values(s_set.m[t], s_set.mv[t], s_counts[t]));
    }
    CHECK_OK(s_upload(s_set.g, packed_grads));
    CHECK_OK(s_upload(s_set.p, packed_sides));
    CHECK_OK(s_upload(s_set.m, packed_sides));
    return true;
out:
    return false;
}

/* The update with argument *arg over s_set's side arrays, listed into side[2 * NT]: p[t] at t,
 * m[t] at NT + t. */
static troupe_coll_apply_t s_apply_of(troupe_tnode_t **side, const s_arg_t *arg)
{
    for (int t = 0; t < NT; t++) {
        side[t] = s_set.p[t];
        side[NT + t] = s_set.m[t];
    }
    return (troupe_coll_apply_t){.fn = s_update,
                                 .arg = arg,
                                 .arg_bytes = sizeof *arg,
                                 .id = 0x7465737400000001u,
                                 .n_side = 2,
                                 .n_private = s_private,
                                 .side = side};
}

/* Checks m on this rank against s_set.mv. `sharded`: through shared memory with m private,
 * where this rank's copy is current only in its own chunk: every other element must still
 * hold its value when m was last whole (s_mb), and both kinds must occur (the copies to this
 * rank were skipped, its own chunk was updated). Then, unless sharded, m is whole: s_mb. */
static void s_check_m(const char *what, bool sharded)
{
    static double got[20000];
    int64_t stale = 0, current = 0;
    for (int t = 0; t < NT; t++) {
        CHECK_OK(troupe_tnode_get_values(s_set.m[t], got, s_counts[t]));
        for (int64_t i = 0; i < s_counts[t]; i++) {
            if (got[i] == s_set.mv[t][i] && s_set.mv[t][i] != s_mb[t][i]) {
                current++;
            } else if (sharded && got[i] == s_mb[t][i]) {
                stale++;
            } else if (got[i] != s_set.mv[t][i]) {
                s_fail("%s: m%d[%lld] = %.9g, expected %.9g%s", what, t, (long long)i, got[i],
                       s_set.mv[t][i], sharded ? " or the stale value" : "");
                return;
            }
        }
    }
    for (int t = 0; t < NT && !sharded; t++)
        memcpy(s_mb[t], s_set.mv[t], sizeof s_mb[t]);
    if (sharded && (stale == 0 || current == 0))
        s_fail("%s: %lld elements of m stale and %lld current here: expected both (sharded)",
               what, (long long)stale, (long long)current);
out:
    return;
}

/* Issues the fused allreduce with (a, b) and `flags`, waits, checks p and m on this rank
 * against the update of the expected values and stats.shm's change against want_shm (m
 * private and through shared memory: current in this rank's chunk only, s_check_m). With
 * TROUPE_COLL_UNSHARD nothing is updated and m must be whole. */
static void s_round(const char *what, s_arg_t arg, unsigned flags, bool want_shm)
{
    bool unshard = (flags & TROUPE_COLL_UNSHARD) != 0;
    troupe_tnode_t *side[2 * NT];
    troupe_coll_apply_t ap = s_apply_of(side, &arg);
    troupe_allreduce_args_t a = {
        .op = TROUPE_REDUCE_SUM, .flags = flags, .n = NT, .ctx = s_set.ctx, .nodes = s_set.g};
    a.apply = &ap;
    troupe_transport_stats_t before, after;
    troupe_event_t *ev = NULL;
    /* this rank's gradients again: the MPI paths leave the sums in the arrays */
    for (int t = 0; t < NT; t++)
        CHECK_OK(troupe_from_host(s_set.ctx, s_set.g[t], NULL));
    troupe_transport_get_stats(&before);
    CHECK_OK(troupe_allreduce(&a, &ev));
    if ((flags & TROUPE_COLL_DEFERRED) != 0)
        CHECK_OK(troupe_will_wait_for(s_set.ctx, ev));
    static double got[20000];
    for (int t = 0; t < NT; t++) {
        troupe_event_t *e = NULL;
        CHECK_OK(troupe_to_host(s_set.ctx, s_set.p[t], NULL));
        CHECK_OK(troupe_to_host(s_set.ctx, s_set.m[t], &e));
        CHECK_OK(troupe_event_sync(e, SYNC_NS));
        troupe_event_release(&e);
    }
    CHECK_OK(troupe_event_sync(ev, SYNC_NS));
    troupe_transport_get_stats(&after);
    uint64_t shm = after.shm - before.shm;
    if (shm != (want_shm ? 1u : 0u))
        s_fail("%s: stats.shm moved by %llu, expected %d", what, (unsigned long long)shm,
               want_shm ? 1 : 0);
    for (int t = 0; t < NT; t++) {
        for (int64_t i = 0; i < s_counts[t] && !unshard; i++) {
            double sum = s_expect(TROUPE_PREC_SINGLE, TROUPE_REDUCE_SUM, i + 10000 * t);
            s_set.pv[t][i] = (double)((float)s_set.pv[t][i] * arg.a + (float)sum);
            s_set.mv[t][i] = (double)((float)s_set.mv[t][i] + (float)sum * arg.b);
        }
        bool ok = true;
        CHECK_OK(troupe_tnode_get_values(s_set.p[t], got, s_counts[t]));
        for (int64_t i = 0; i < s_counts[t] && ok; i++)
            if (got[i] != s_set.pv[t][i]) {
                s_fail("%s: p%d[%lld] = %.9g, expected %.9g", what, t, (long long)i, got[i],
                       s_set.pv[t][i]);
                ok = false;
            }
    }
    s_check_m(what, s_private > 0 && s_laid && want_shm && !unshard);
out:
    troupe_event_release(&ev);
}

static void s_test_layouts(bool shm_on)
{
    if (s_setup(true, true)) {
        s_round("packed, deferred and lazy", (s_arg_t){0.5f, 2.0f},
                TROUPE_COLL_DEFERRED | TROUPE_COLL_LAZY, shm_on);
        s_round("packed, second", (s_arg_t){0.25f, -1.0f}, 0u, shm_on);
        s_round("packed, third", (s_arg_t){1.0f, 0.5f}, 0u, shm_on);
    }
    /* side arrays that do not lie as the gradients: the sums through shared memory all the
     * same, then the update on every rank */
    if (s_setup(true, false))
        s_round("side arrays one by one", (s_arg_t){0.5f, 2.0f}, 0u, shm_on);
    if (s_setup(true, s_rank != 0))
        s_round("side arrays one by one on rank 0 only", (s_arg_t){0.5f, 2.0f}, 0u, shm_on);
    if (s_setup(false, true))
        s_round("gradients one by one", (s_arg_t){0.5f, 2.0f}, 0u, false);
    /* last (shared memory stays off after it): rank 1 fails to map another rank's memory: every
     * rank takes the MPI path, the update runs once on each */
    if (shm_on && s_setup(true, true)) {
        if (s_rank == 1)
            troupe__shm_coll_fail_maps(1);
        s_round("a failed mapping", (s_arg_t){0.5f, 2.0f}, 0u, false);
        s_round("after a failed mapping", (s_arg_t){0.25f, 1.0f}, 0u, false);
    }
}

/* m private (ZeRO stage 1): through shared memory each rank keeps its chunk of m, p is
 * copied everywhere; TROUPE_COLL_UNSHARD makes m whole on every rank; a failed mapping after
 * rounds that left m sharded: the MPI path gathers m first, so every rank updates every
 * element from whole state, and a gather then has nothing to do. */
static void s_test_private(bool shm_on)
{
    s_private = 1;
    s_laid = true;
    if (s_setup(true, true)) {
        s_round("private, first", (s_arg_t){0.5f, 2.0f}, TROUPE_COLL_DEFERRED | TROUPE_COLL_LAZY,
                shm_on);
        s_round("private, second", (s_arg_t){0.25f, -1.0f}, 0u, shm_on);
        s_round("private, gathered", (s_arg_t){0.0f, 0.0f}, TROUPE_COLL_UNSHARD, shm_on);
        s_round("private, after the gather", (s_arg_t){1.0f, 0.5f}, 0u, shm_on);
        s_round("private, gathered again", (s_arg_t){0.0f, 0.0f}, TROUPE_COLL_UNSHARD, shm_on);
    }
    /* side arrays that do not lie as the gradients: never sharded, the gather does nothing */
    s_laid = false;
    if (s_setup(true, false)) { /* the sums through shared memory, the update everywhere */
        s_round("private, side arrays one by one", (s_arg_t){0.5f, 2.0f}, 0u, shm_on);
        s_round("private, side arrays one by one, gathered", (s_arg_t){0.0f, 0.0f},
                TROUPE_COLL_UNSHARD, false);
    }
    s_laid = true;
    if (shm_on && s_setup(true, true)) { /* last: shared memory stays off after it */
        s_round("private before a failed mapping", (s_arg_t){0.5f, 2.0f}, 0u, true);
        if (s_rank == 1)
            troupe__shm_coll_fail_maps(1);
        s_round("private, a failed mapping", (s_arg_t){0.25f, 1.0f}, 0u, false);
        s_round("private, after a failed mapping", (s_arg_t){0.5f, -2.0f}, 0u, false);
        s_round("private, gathered after a failed mapping", (s_arg_t){0.0f, 0.0f},
                TROUPE_COLL_UNSHARD, false);
    }
    s_private = 0;
}

/* A round of the update with m sharded: this rank's shard of m over the tensors end to end
 * (troupe_coll_shard_range) in shard[], no m nodes; p checked as s_round does, the shard
 * against the update of its expected values, and the path by the stats: through shared memory
 * (want_shm), else by the reduce-scatter (want_scatter) or the buckets. */
static float s_shard[20000 + 48 + 4099];
static void s_shard_round(const char *what, s_arg_t arg, bool want_shm, bool want_scatter)
{
    int64_t total = 0, lo = 0, hi = 0;
    for (int t = 0; t < NT; t++)
        total += s_counts[t];
    troupe_coll_shard_range(total, s_rank, s_size, &lo, &hi);
    troupe_tnode_t *side[2 * NT];
    troupe_coll_apply_t ap = s_apply_of(side, &arg);
    float *shard[1] = {s_shard};
    for (int t = 0; t < NT; t++)
        side[NT + t] = NULL; /* sharded: unused */
    ap.n_private = 1;
    ap.shard = shard;
    troupe_allreduce_args_t a = {
        .op = TROUPE_REDUCE_SUM, .n = NT, .ctx = s_set.ctx, .nodes = s_set.g, .apply = &ap};
    troupe_transport_stats_t before, after;
    troupe_event_t *ev = NULL;
    for (int t = 0; t < NT; t++)
        CHECK_OK(troupe_from_host(s_set.ctx, s_set.g[t], NULL));
    troupe_transport_get_stats(&before);
    CHECK_OK(troupe_allreduce(&a, &ev));
    CHECK_OK(troupe_event_sync(ev, SYNC_NS));
    for (int t = 0; t < NT; t++) {
        troupe_event_t *e = NULL;
        CHECK_OK(troupe_to_host(s_set.ctx, s_set.p[t], &e));
        CHECK_OK(troupe_event_sync(e, SYNC_NS));
        troupe_event_release(&e);
    }
    troupe_transport_get_stats(&after);
    uint64_t shm = after.shm - before.shm, rsc = after.reduce_scatters - before.reduce_scatters;
    uint64_t bks = after.buckets - before.buckets;
    if (shm != (want_shm ? 1u : 0u) || rsc != (want_scatter ? 1u : 0u) ||
        (want_scatter && bks != 0))
        s_fail("%s: stats.shm +%llu, reduce_scatters +%llu, buckets +%llu; expected shm +%d, "
               "reduce_scatters +%d%s",
               what, (unsigned long long)shm, (unsigned long long)rsc, (unsigned long long)bks,
               want_shm ? 1 : 0, want_scatter ? 1 : 0, want_scatter ? ", buckets +0" : "");
    static double got[20000];
    int64_t at = 0;
    for (int t = 0; t < NT; t++) {
        CHECK_OK(troupe_tnode_get_values(s_set.p[t], got, s_counts[t]));
        bool ok = true;
        for (int64_t i = 0; i < s_counts[t]; i++, at++) {
            double sum = s_expect(TROUPE_PREC_SINGLE, TROUPE_REDUCE_SUM, i + 10000 * t);
            s_set.pv[t][i] = (double)((float)s_set.pv[t][i] * arg.a + (float)sum);
            s_set.mv[t][i] = (double)((float)s_set.mv[t][i] + (float)sum * arg.b);
            if (ok && got[i] != s_set.pv[t][i]) {
                s_fail("%s: p%d[%lld] = %.9g, expected %.9g", what, t, (long long)i, got[i],
                       s_set.pv[t][i]);
                ok = false;
            }
            if (ok && at >= lo && at < hi && (double)s_shard[at - lo] != s_set.mv[t][i]) {
                s_fail("%s: m%d[%lld] (shard element %lld) = %.9g, expected %.9g", what, t,
                       (long long)i, (long long)(at - lo), (double)s_shard[at - lo],
                       s_set.mv[t][i]);
                ok = false;
            }
        }
    }
out:
    troupe_event_release(&ev);
}

static void s_test_shard(bool shm_on)
{
    for (int layout = 0; layout < 2; layout++) {
        bool packed = layout == 0; /* gradients in one span, or one array each */
        if (!s_setup(packed, true))
            return;
        for (size_t e = 0; e < sizeof s_shard / sizeof s_shard[0]; e++)
            s_shard[e] = 1.0f; /* m's starting value (s_setup) */
        const char *name[3] = {packed ? "sharded, packed, first" : "sharded, one by one, first",
                               packed ? "sharded, packed, second" : "sharded, one by one, second",
                               packed ? "sharded, packed, third" : "sharded, one by one, third"};
        s_arg_t args[3] = {{0.5f, 2.0f}, {0.25f, -1.0f}, {1.0f, 0.5f}};
        for (int k = 0; k < 3; k++)
            s_shard_round(name[k], args[k], shm_on && packed, !shm_on && packed);
    }
}

/* One bad argument set: INVALID_ARGUMENT whose message holds `needle`. */
static void s_bad(const char *what, const troupe_allreduce_args_t *a, const char *needle)
{
    troupe_event_t *ev = NULL;
    troupe_status_t st = troupe_allreduce(a, &ev);
    troupe_event_release(&ev);
    if (st != TROUPE_INVALID_ARGUMENT || strstr(troupe_last_error(), needle) == NULL)
        s_fail("%s: got %s: %s; expected INVALID_ARGUMENT naming '%s'", what,
               troupe_status_str(st), troupe_last_error(), needle);
}

static void s_test_refused(void)
{
    if (!s_setup(true, true))
        return;
    troupe_tnode_t *side[2 * NT], *dbl = NULL, *shortp = NULL;
    s_arg_t arg = {1.0f, 1.0f};
    troupe_coll_apply_t ap = s_apply_of(side, &arg);
    troupe_allreduce_args_t a = {.op = TROUPE_REDUCE_MEAN, .n = NT, .ctx = s_set.ctx,
                                 .nodes = s_set.g, .apply = &ap};
    s_bad("mean", &a, "needs op sum");
    a.op = TROUPE_REDUCE_SUM;
    troupe_coll_apply_t bad = ap;
    bad.fn = NULL;
    a.apply = &bad;
    s_bad("no function", &a, "without a function");
    bad = ap;
    bad.id = 0;
    s_bad("no id", &a, "without an id");
    bad = ap;
    bad.n_side = TROUPE_COLL_APPLY_MAX_SIDE + 1;
    s_bad("too many side arrays", &a, "side arrays per tensor");
    bad = ap;
    bad.arg_bytes = TROUPE_COLL_APPLY_MAX_ARG + 1;
    s_bad("argument too large", &a, "argument of");
    bad = ap;
    bad.arg = NULL;
    s_bad("an argument's bytes without the argument", &a, "argument of");
    bad = ap;
    bad.side = NULL;
    s_bad("no side arrays", &a, "without side arrays");
    bad = ap;
    bad.n_private = bad.n_side;
    s_bad("every side array private", &a, "private side arrays of");
    a.flags = TROUPE_COLL_UNSHARD;
    a.apply = &ap;
    s_bad("a gather without private side arrays", &a, "TROUPE_COLL_UNSHARD needs");
    a.apply = NULL;
    s_bad("a gather without an update", &a, "TROUPE_COLL_UNSHARD needs");
    a.flags = 0;
    const int64_t two = 2;
    const char *ld[1] = {"wide"}, *ls[1] = {"short"};
    CHECK_OK(troupe_tnode_new(ld, 1, TROUPE_PREC_DOUBLE, 1, &two, NULL, 0.0, &dbl));
    CHECK_OK(troupe_tnode_new(ls, 1, TROUPE_PREC_SINGLE, 1, &two, NULL, 0.0, &shortp));
    troupe_tnode_t *g_dbl[NT] = {dbl, s_set.g[1], s_set.g[2]};
    a.apply = &ap;
    a.nodes = g_dbl;
    s_bad("a double tensor", &a, "is double, not single");
    a.nodes = s_set.g;
    troupe_tnode_t *side_short[2 * NT];
    memcpy(side_short, side, sizeof side);
    side_short[1] = shortp;
    bad = ap;
    bad.side = side_short;
    a.apply = &bad;
    s_bad("a side array of another size", &a, "of another size");
    side_short[1] = NULL;
    s_bad("a NULL side array", &a, "is NULL");
    side_short[1] = dbl;
    s_bad("a double side array", &a, "is not single");
    troupe_tnode_t *side_dup[2 * NT];
    memcpy(side_dup, side, sizeof side);
    side_dup[NT + 2] = s_set.g[2]; /* a gradient as a side array: written while others sum it */
    bad = ap;
    bad.side = side_dup;
    s_bad("a tensor as a side array", &a, "stands twice");
    side_dup[NT + 2] = s_set.p[0]; /* a side array given twice */
    s_bad("a side array twice", &a, "stands twice");
    float host[4] = {0};
    troupe_coll_tensor_t ht = {.data = host, .count = 4, .prec = TROUPE_PREC_SINGLE};
    troupe_allreduce_args_t h = {.n = 1, .tensors = &ht, .apply = &ap};
    s_bad("host level", &h, "needs the device level");
    troupe_allreduce_args_t hu = {.n = 1, .tensors = &ht, .flags = TROUPE_COLL_UNSHARD};
    s_bad("a gather at the host level", &hu, "TROUPE_COLL_UNSHARD needs the device level");
out:
    troupe_tnode_release(&dbl);
    troupe_tnode_release(&shortp);
}

/* Rank 0 fuses an update, the others do not: every rank fails naming it. */
static void s_test_mismatch(void)
{
    if (!s_setup(true, true))
        return;
    troupe_tnode_t *side[2 * NT];
    s_arg_t arg = {0.5f, 2.0f};
    troupe_coll_apply_t ap = s_apply_of(side, &arg);
    troupe_allreduce_args_t a = {.op = TROUPE_REDUCE_SUM, .n = NT, .ctx = s_set.ctx,
                                 .nodes = s_set.g, .apply = s_rank == 0 ? &ap : NULL};
    troupe_event_t *ev = NULL;
    CHECK_OK(troupe_allreduce(&a, &ev));
    troupe_status_t st = troupe_event_sync(ev, SYNC_NS);
    const char *msg = troupe_last_error();
    printf("rank %d: %s: %s\n", s_rank, troupe_status_str(st), msg);
    if (st != TROUPE_FAILED_PRECONDITION || strstr(msg, "fused update 0x7465737400000001") == NULL ||
        strstr(msg, "but none on rank") == NULL)
        s_fail("expected FAILED_PRECONDITION naming the fused update, got %s: %s",
               troupe_status_str(st), msg);
    troupe_event_release(&ev);
out:
    troupe_event_release(&ev);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "on";
    if (strcmp(mode, "on") != 0 && strcmp(mode, "off") != 0 && strcmp(mode, "mismatch") != 0 &&
        strcmp(mode, "private") != 0 && strcmp(mode, "shard") != 0) {
        printf("FAIL: unknown mode '%s' (on, off, mismatch, private, shard)\n", mode);
        return 2;
    }
    troupe_status_t st = s_init(&argc, &argv);
    if (st != TROUPE_OK)
        return 1;
    troupe_config_set_auto_host_transfers(false);
    bool shm_on = strcmp(mode, "off") != 0 && strcmp(mode, "shard") != 0;
    if (troupe_config_coll_shm() != shm_on)
        s_fail("TROUPE_COLL_SHM is %d in mode %s", troupe_config_coll_shm() ? 1 : 0, mode);
    if (s_fails == 0 && strcmp(mode, "mismatch") == 0) {
        s_test_mismatch();
    } else if (s_fails == 0 && strcmp(mode, "private") == 0) {
        if (s_size > 1) /* first: the private test's last failed mapping turns shm off */
            s_test_shard(true);
        s_test_private(s_size > 1); /* one rank: no shared memory, a gather does nothing */
    } else if (s_fails == 0 && strcmp(mode, "shard") == 0) {
        s_test_shard(false);
    } else if (s_fails == 0) {
        s_test_refused();
        if (!shm_on) {
            s_test_private(false);
            s_test_shard(false);
        }
        s_test_layouts(shm_on);
    }
    s_teardown();
    st = troupe_cluster_finalize();
    bool failed_cluster = strcmp(mode, "mismatch") == 0;
    if (st != (failed_cluster ? TROUPE_FAILED_PRECONDITION : TROUPE_OK))
        s_fail("troupe_cluster_finalize: %s: %s", troupe_status_str(st), troupe_last_error());
    if (s_fails == 0)
        printf("PASS rank %d/%d: fused update (%s)\n", s_rank, s_size, mode);
    return s_fails == 0 ? 0 : 1;
}
