/* troupe — bench_merge: troupe's host-level allreduce (transport/mpi/collective.h, through the
 * transport engine) against plain MPI on the same buffers, on two ranks.
 *
 * Launch: `mpiexec -n 2 ... bench_merge`; rank 0 prints. Started without a launcher (as
 * deploy/bench.sh does), it re-executes itself under `mpiexec -n 2` on this machine (shared
 * memory and loopback: --mca btl self,vader --mca oob_tcp_if_include lo --oversubscribe
 * --bind-to none, plus --allow-run-as-root as root); TROUPE_BENCH_NO_MPIEXEC=1 prevents that.
 *
 * Cases (SUM, float, MPI_COMM_WORLD for the peer, troupe's own duplicated communicator):
 *   allreduce      one tensor of 4 KiB .. 64 MiB (x4 steps): troupe_allreduce + event sync
 *                  (in place: MPI_Iallreduce below 64 KiB, troupe's ring from 64 KiB, see
 *                  transport/mpi/collective.h) vs MPI_Allreduce(MPI_IN_PLACE).
 *                  algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests' definitions).
 *   allreduce-shm  the same from 64 KiB, the buffer from troupe_coll_alloc: memory the ranks
 *                  share, so troupe reduces it through shared memory (no MPI; collective.h,
 *                  "Shared memory") while MPI_Allreduce still takes its own path on it.
 *   small-tensors  100 tensors of 4 KiB lying back to back in one allocation, as troupe packs
 *                  a routine's arrays (gradients included) in a context's pool: one
 *                  troupe_allreduce of all 100 (one fusion bucket, which troupe reduces in
 *                  place: no staging copies) vs 100 separate MPI_Allreduce calls on the same
 *                  buffers.
 *   small-tensors-scattered  the same with each tensor allocated on its own (troupe_malloc):
 *                  the bucket is packed into a staging buffer and unpacked after the reduce.
 *   small-tensors-shm  small-tensors in one troupe_coll_alloc allocation (shared memory).
 * Troupe's side is troupe_allreduce and troupe_event_sync, what a program does (the syncing
 * thread drives the idle transport engine itself, see transport/mpi/engine.c).
 * Each repetition: MPI_Barrier, then the timed operation; the two sides' repetitions
 * alternate (their order rotates), so all meet the same machine load. A repetition's time is
 * the slower rank's (MPI_Reduce with MPI_MAX over the per-rank samples); the line gives the
 * median (troupe_us, peer_us) and the minimum (troupe_min_us, peer_min_us).
 * Both ranks run the same fixed number of repetitions (collectives must match), so the
 * harness's time-based run counts are not used: by default max(20, min(200, 512 MiB / bytes))
 * repetitions, or exactly N with --runs N (3 with --quick), after max(2, --warmup) warm-ups.
 *
 * MPI_THREAD_SERIALIZED: after troupe_cluster_init only the transport engine calls MPI, except
 * here: the peer, the barriers and the reductions of samples run on the main thread while the
 * engine is idle. It is idle once every troupe event was synced: it completes a request's event
 * after its last MPI call for it and then sleeps until the next request.
 *
 * Check: before timing, each size is reduced once by each side from rank-dependent values and
 * compared with the exact sum (check=ok); a wrong result prints why on stderr and exits 1.
 * Exit status: 0, 1 on a failure or a failed check, 2 on a usage error or no second rank. */
#define _GNU_SOURCE
#include "bench/bench_util.h"

#include "actors/event.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_PROG "bench_merge"
#define S_SYNC_NS (120LL * 1000 * 1000 * 1000)
#define S_SMALL_N 100
#define S_SMALL_BYTES 4096

static int s_rank, s_size;

/* Re-executes under mpiexec -n 2 when no launcher is present. Returns only on failure. */
static void s_reexec(int argc, char **argv)
{
    const char *head[] = {"mpiexec",   "-n",
                          "2",         "--mca",
                          "btl",       "self,vader",
                          "--mca",     "oob_tcp_if_include",
                          "lo",        "--oversubscribe",
                          "--bind-to", "none"};
    size_t nh = sizeof head / sizeof *head;
    char **av = calloc(nh + 2 + (size_t)argc + 1, sizeof *av);
    if (av == NULL)
        return;
    size_t k = 0;
    for (size_t i = 0; i < nh; i++)
        av[k++] = (char *)head[i];
    if (geteuid() == 0)
        av[k++] = "--allow-run-as-root";
    for (int i = 0; i < argc; i++)
        av[k++] = argv[i];
    av[k] = NULL;
    setenv("TROUPE_BENCH_NO_MPIEXEC", "1", 1);
    fflush(stdout);
    execvp("mpiexec", av);
    fprintf(stderr, "%s: cannot run mpiexec: %s\n", S_PROG, strerror(errno));
    free(av);
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median and minimum of n samples (sorted in place). */
static void s_stats(double *v, int n, double *median, double *min)
{
    qsort(v, (size_t)n, sizeof *v, s_cmp_double);
    *min = v[0];
    *median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the two sides --------------------------------------------------------------------- */

typedef struct s_case {
    float **bufs; /* nbufs buffers of count floats */
    int nbufs;
    int64_t count;
    troupe_status_t st; /* troupe's failure */
} s_case_t;

static int s_troupe(s_case_t *c)
{
    troupe_coll_tensor_t t[S_SMALL_N];
    for (int i = 0; i < c->nbufs; i++)
        t[i] = (troupe_coll_tensor_t){.data = c->bufs[i],
                                      .count = c->count,
                                      .prec = TROUPE_PREC_SINGLE,
                                      .node_id = i + 1,
                                      .ndims = 1,
                                      .dims = {c->count}};
    troupe_event_t *ev = NULL;
    troupe_allreduce_args_t ar = {.op = TROUPE_REDUCE_SUM, .n = (size_t)c->nbufs, .tensors = t};
    c->st = troupe_allreduce(&ar, &ev);
    if (c->st == TROUPE_OK)
        c->st = troupe_event_sync(ev, S_SYNC_NS);
    troupe_event_release(&ev);
    return c->st == TROUPE_OK ? 0 : 1;
}

static int s_peer(s_case_t *c)
{
    for (int i = 0; i < c->nbufs; i++)
        if (MPI_Allreduce(MPI_IN_PLACE, c->bufs[i], (int)c->count, MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD) != MPI_SUCCESS)
            return 1;
    return 0;
}

/* One reduction per side from values rank + 1 + i % 7; both must give the exact sum. */
static int s_check(s_case_t *c, const char *name)
{
    for (int side = 0; side < 2; side++) {
        for (int b = 0; b < c->nbufs; b++)
            for (int64_t i = 0; i < c->count; i++)
                c->bufs[b][i] = (float)(s_rank + 1 + i % 7);
        if ((side == 0 ? s_troupe(c) : s_peer(c)) != 0) {
            if (side == 0)
                troupe_bench_fail_status(S_PROG, name, c->st);
            else
                fprintf(stderr, "%s: %s: MPI_Allreduce failed\n", S_PROG, name);
            return 1;
        }
        for (int b = 0; b < c->nbufs; b++)
            for (int64_t i = 0; i < c->count; i++) {
                float want = (float)(s_size * (s_size + 1) / 2 + s_size * (i % 7));
                if (c->bufs[b][i] != want) {
                    fprintf(stderr,
                            "%s: %s: check=fail: %s: buffer %d element %lld is %g, "
                            "expected %g\n",
                            S_PROG, name, side == 0 ? "troupe" : "MPI_Allreduce", b, (long long)i,
                            c->bufs[b][i], want);
                    return 1;
                }
            }
    }
    /* Zeros from here: sums of zeros stay zeros (no overflow, no subnormals). */
    for (int b = 0; b < c->nbufs; b++)
        memset(c->bufs[b], 0, (size_t)c->count * sizeof(float));
    return 0;
}

/* The two sides: troupe, the peer. */
#define S_NSIDES 2

static int s_side(s_case_t *c, int side)
{
    return side == 1 ? s_peer(c) : s_troupe(c);
}

/* Times every side `reps` times (interleaved, the order rotating). t[side][rep] gets the
 * slower rank's samples (us, on rank 0). Returns 0 or 1. */
static int s_time(s_case_t *c, int warmup, int reps, double *t[S_NSIDES])
{
    double *mine = malloc(S_NSIDES * (size_t)reps * sizeof *mine);
    double *all = malloc(S_NSIDES * (size_t)reps * sizeof *all);
    int rc = 1;
    if (mine == NULL || all == NULL)
        goto free_samples;
    for (int i = 0; i < warmup; i++)
        for (int side = 0; side < S_NSIDES; side++)
            if (s_side(c, side) != 0)
                goto free_samples;
    for (int i = 0; i < reps; i++) {
        for (int k = 0; k < S_NSIDES; k++) {
            int side = (i + k) % S_NSIDES;
            MPI_Barrier(MPI_COMM_WORLD);
            int64_t t0 = troupe_now_ns();
            if (s_side(c, side) != 0)
                goto free_samples;
            mine[side * reps + i] = (double)(troupe_now_ns() - t0) / 1e3;
        }
    }
    MPI_Reduce(mine, all, S_NSIDES * reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    for (int side = 0; side < S_NSIDES; side++)
        memcpy(t[side], all + side * reps, (size_t)reps * sizeof(double));
    rc = 0;
free_samples:
    if (rc != 0 && c->st != TROUPE_OK)
        troupe_bench_fail_status(S_PROG, "troupe_allreduce", c->st);
    free(mine);
    free(all);
    return rc;
}

/* Median and minimum of each side's samples. */
typedef struct s_result {
    double med[S_NSIDES], min[S_NSIDES];
} s_result_t;

static double *s_samples_new(int reps, double *t[S_NSIDES])
{
    double *block = calloc(S_NSIDES * (size_t)reps, sizeof *block);
    for (int side = 0; side < S_NSIDES; side++)
        t[side] = block != NULL ? block + side * reps : NULL;
    return block;
}

static void s_result(double *t[S_NSIDES], int reps, s_result_t *out)
{
    for (int side = 0; side < S_NSIDES; side++)
        s_stats(t[side], reps, &out->med[side], &out->min[side]);
}

static int s_reps(const troupe_bench_opts_t *o, int64_t bytes)
{
    if (o->min_runs == o->max_runs)
        return o->max_runs; /* --runs N, --quick */
    int64_t r = (512LL << 20) / bytes;
    return (int)(r < 20 ? 20 : r > 200 ? 200 : r);
}

/* One tensor of `bytes`: from troupe_malloc (case=allreduce), or from troupe_coll_alloc
 * (case=allreduce-shm: shared memory between the ranks, see the header). */
static int s_case_allreduce(const troupe_bench_opts_t *o, int warmup, int64_t bytes, bool shm)
{
    const char *name = shm ? "allreduce-shm" : "allreduce";
    char what[64];
    snprintf(what, sizeof what, "case=%s", name);
    int64_t count = bytes / (int64_t)sizeof(float);
    float *buf = shm ? troupe_coll_alloc((size_t)bytes) : troupe_malloc((size_t)bytes);
    int reps = s_reps(o, bytes);
    double *t[S_NSIDES];
    double *block = s_samples_new(reps, t);
    s_case_t c = {.bufs = &buf, .nbufs = 1, .count = count};
    int rc = 1;
    if (buf == NULL || block == NULL) {
        fprintf(stderr, "%s: out of memory\n", S_PROG);
        goto free_buffers;
    }
    if (s_check(&c, what) != 0 || s_time(&c, warmup, reps, t) != 0)
        goto free_buffers;
    if (s_rank == 0) {
        s_result_t r;
        s_result(t, reps, &r);
        double algbw = (double)bytes / (r.med[0] * 1e3); /* bytes/ns = GB/s */
        double busbw = algbw * 2.0 * (s_size - 1) / s_size;
        double peer_algbw = (double)bytes / (r.med[1] * 1e3);
        troupe_bench_print_case("merge", name, bytes, r.med[0], "MPI_Allreduce", r.med[1],
                                "algbw_GBps=%.3f busbw_GBps=%.3f peer_algbw_GBps=%.3f "
                                "troupe_min_us=%.1f peer_min_us=%.1f ranks=%d reps=%d check=ok",
                                algbw, busbw, peer_algbw, r.min[0], r.min[1], s_size, reps);
    }
    rc = 0;
free_buffers:
    if (shm)
        troupe_coll_free(buf);
    else
        troupe_free(buf);
    free(block);
    return rc;
}

/* Layouts of the small-tensors cases. */
typedef enum s_layout { S_FLAT, S_SCATTERED, S_SHM } s_layout_t;

/* small-tensors (one allocation), small-tensors-scattered, small-tensors-shm (one
 * troupe_coll_alloc allocation). */
static int s_case_small(const troupe_bench_opts_t *o, int warmup, s_layout_t layout)
{
    static const char *const k_name[] = {"small-tensors", "small-tensors-scattered",
                                         "small-tensors-shm"};
    static const char *const k_layout[] = {"flat", "scattered", "shm"};
    const char *name = k_name[layout];
    bool flat = layout != S_SCATTERED;
    char what[64];
    snprintf(what, sizeof what, "case=%s", name);
    float *bufs[S_SMALL_N] = {NULL};
    float *base = NULL;
    int64_t count = S_SMALL_BYTES / (int64_t)sizeof(float);
    int64_t bytes = (int64_t)S_SMALL_N * S_SMALL_BYTES;
    int reps = s_reps(o, bytes);
    double *t[S_NSIDES];
    double *block = s_samples_new(reps, t);
    s_case_t c = {.bufs = bufs, .nbufs = S_SMALL_N, .count = count};
    int rc = 1;
    if (flat && (base = layout == S_SHM ? troupe_coll_alloc((size_t)bytes)
                                        : troupe_malloc((size_t)bytes)) == NULL)
        goto oom;
    for (int i = 0; i < S_SMALL_N; i++) {
        bufs[i] = flat ? base + i * count : troupe_malloc(S_SMALL_BYTES);
        if (bufs[i] == NULL)
            goto oom;
    }
    if (block == NULL)
        goto oom;
    if (s_check(&c, what) != 0 || s_time(&c, warmup, reps, t) != 0)
        goto free_buffers;
    if (s_rank == 0) {
        s_result_t r;
        s_result(t, reps, &r);
        troupe_bench_print_case("merge", name, bytes, r.med[0], "MPI_Allreduce_x100", r.med[1],
                                "tensors=%d tensor_bytes=%d layout=%s troupe_min_us=%.1f "
                                "peer_min_us=%.1f ranks=%d reps=%d check=ok",
                                S_SMALL_N, S_SMALL_BYTES, k_layout[layout], r.min[0], r.min[1],
                                s_size, reps);
    }
    rc = 0;
    goto free_buffers;
oom:
    fprintf(stderr, "%s: out of memory\n", S_PROG);
free_buffers:
    for (int i = 0; i < S_SMALL_N && !flat; i++)
        troupe_free(bufs[i]);
    if (layout == S_SHM)
        troupe_coll_free(base);
    else
        troupe_free(base);
    free(block);
    return rc;
}

int main(int argc, char **argv)
{
    troupe_bench_opts_t opts;
    troupe_bench_opts_default(&opts);
    int pr = troupe_bench_parse_args(
        argc, argv,
        "Cross-rank merge: troupe_allreduce (transport engine, MPI_Iallreduce) vs MPI_Allreduce "
        "on two ranks (run under mpiexec -n 2; re-executes itself under it otherwise).",
        &opts);
    if (pr != 0)
        return pr > 0 ? 0 : 2;
    const char *no_reexec = getenv("TROUPE_BENCH_NO_MPIEXEC");
    bool launcher = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("SLURM_PROCID");
    if (!launcher && (no_reexec == NULL || strcmp(no_reexec, "1") != 0))
        s_reexec(argc, argv); /* returns only on failure */
    troupe_status_t st = troupe_cluster_init(&argc, &argv);
    if (st != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "troupe_cluster_init", st);
    s_rank = troupe_cluster_rank();
    s_size = troupe_cluster_size();
    if (s_size < 2) {
        fprintf(stderr, "%s: needs two ranks: run it under mpiexec -n 2 (this is rank 0 of 1)\n",
                S_PROG);
        st = troupe_cluster_finalize();
        return 2;
    }
    if (s_rank == 0) {
        troupe_bench_print_machine(TROUPE_BENCH_C_FLAGS);
        const char *alg = getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
        char extra[128];
        snprintf(extra, sizeof extra, "ranks=%d coll_libnbc_iallreduce_algorithm=%s", s_size,
                 alg ? alg : "default");
        troupe_bench_print_library("mpi", troupe_mpi_version(), extra);
    }
    int warmup = opts.warmup > 2 ? opts.warmup : 2;
    int rc = 0;
    for (int64_t bytes = 4096; bytes <= (64LL << 20) && rc == 0; bytes *= 4)
        rc = s_case_allreduce(&opts, warmup, bytes, false);
    for (int64_t bytes = 64 << 10; bytes <= (64LL << 20) && rc == 0; bytes *= 4)
        rc = s_case_allreduce(&opts, warmup, bytes, true);
    for (int layout = S_FLAT; layout <= S_SHM && rc == 0; layout++)
        rc = s_case_small(&opts, warmup, (s_layout_t)layout);
    if (rc != 0) { /* the other rank may be waiting in a collective: leave; mpiexec ends it */
        st = troupe_cluster_leave(S_PROG ": a case failed");
        (void)st; /* failing already: reported by the case */
        return rc;
    }
    st = troupe_cluster_finalize();
    if (st != TROUPE_OK)
        rc = troupe_bench_fail_status(S_PROG, "troupe_cluster_finalize", st);
    return rc;
}
