/* troupe — bench_train: data-parallel training throughput of the Fashion-MNIST MLP
 * (examples/fmnist: 784-256-128-10, SGD with momentum) with parallel/dp.h, in several layouts,
 * against the single-stream layout as the peer:
 *
 *   1x1         one rank, one stream, minibatch 128 (the peer)        in this process
 *   1x1-proc    the same in a fresh process of its own                child (one process)
 *   1x2         one rank, two streams, global minibatch 128           in this process
 *               (the merge and the optimizer step as one pass across the streams:
 *               docs/parallel.md, Fused update across streams; checked with
 *               troupe_dp_fused_streams)
 *   1x2-unfused 1x2 with the tree merge, the optimizer routine and the copies to stream 1 as
 *               separate work (TROUPE_DP_FUSED_UPDATE=off), printed against 1x2
 *               (peer_fused_streams=1 fused_streams=0)                in this process
 *   2x1         two ranks of one stream, global minibatch 128         child job (below)
 *   2x1-weak    two ranks of one stream, 128 per rank (global 256)    child job
 *   2x1-bf16    2x1 with the gradients compressed to bfloat16 between the ranks
 *   2x1-overlap 2x1 with each gradient bucket's allreduce overlapping the rest of the backward
 *               pass (troupe_dp_config_t.overlap on: the MLP's gradient routine in 3 segments);
 *               printed against 2x1, with the median compute_overlap_us of its rank 0's logged
 *               steps after the warm-up (the step breakdown, parallel/dp.h: how long buckets
 *               were reduced while later segments computed)
 *               (troupe_dp_config_t.compress_bf16, the trainer's --compress bf16)  child job
 *   2x1-unfused 2x1 with the optimizer step as its own routine after the allreduce on every rank
 *               (TROUPE_DP_FUSED_UPDATE=off; 2x1 fuses it into the allreduce: parallel/dp.h,
 *               Fused update), printed against 2x1 (peer_fused=1 fused=0; each child checks
 *               troupe_dp_fused_update says so) as a child job (--unfused)
 *   2x1-nocomm  two independent single-rank processes of minibatch 64 started together: the
 *               2x1 layout's compute without any communication, so its efficiency is the
 *               ceiling this machine puts on 2x1 (shared memory bandwidth and caches, the
 *               per-step costs that do not shrink with the minibatch: the optimizer update)
 *   1x1-trace   1x1-proc and 2x1 with TROUPE_TRACE on (base/trace.h; the files go to a
 *   2x1-trace   temporary directory, are checked to exist, and removed), each against the
 *               same process's untraced runs: a traced child alternates untraced and
 *               traced runs (tracing switched off and on between them), so the machine's
 *               drift falls on both alike
 *
 * Every layout trains the model in the form --feed picks (examples/fmnist/mlp.h: auto, the
 * default, is fed on a backend with graphs, cuda, and indexed on cpu and sync; fed or indexed
 * force one), which children inherit.
 *
 * A child job is this program re-launched as `mpiexec -n 2 <TROUPE_MPI_LAUNCHER_ARGS> <self>
 * --child --batch B --feed F [--bf16] ...` (posix_spawnp), or without mpiexec for 2x1-nocomm; each
 * child times its runs itself and reports the median on one line that this process reads.
 * (`--child --streams N` runs N streams per rank in a child: for A/B runs by hand, such as
 * `bench_train --child --batch 128 --runs 9 --streams 2 [--unfused]`.)
 *
 * One timed run is S_STEPS synchronous steps (troupe_dp_step) and a troupe_dp_sync: S_STEPS x
 * the global minibatch samples. 1x1, 1x2 and 1x2-unfused are timed together (bench_util:
 * interleaved rounds); a child runs a fixed number of runs on every rank (a time-based stop could
 * differ between ranks and leave one waiting in an allreduce). The machine's speed drifts by
 * several percent over a minute (shared hosts), so the child cases are measured in S_ROUNDS paired
 * rounds: each round times 1x1 again in this process, then runs each child (1x1-proc first); a
 * round's efficiencies compare its own 1x1-proc (1x1 when that child fails) with its own
 * children, and the torch 1-thread line compares 1x1-proc (both fresh processes; the in-process
 * 1x1 shares its process with the 1x2 layout and measured up to 1.6x slower on the development
 * machine), and the lines give the medians over
 * the rounds (the 1x1 line: the median of every 1x1 measurement). Every case trains the same model
 * on the same synthetic data set (deterministic pseudo-random pixels and labels: throughput does
 * not depend on the values; no file is needed), after S_WARM_STEPS untimed steps that compile,
 * upload and warm the caches.
 *
 * Output (bench/bench_util.h format), one line per case, times per sample:
 *   bench=train case=<case> bytes=<bytes per sample> troupe_us=<us per sample>
 *     peer=1x1 peer_us=<us per sample of 1x1> ratio=<troupe_us/peer_us> samples_per_s=<n>
 *     global_batch=<n>
 * where bytes = the input and one-hot label bytes one sample reads ((784 + 10) x 4), then,
 * against PyTorch (bench/peers/torch_mlp.py: the same MLP, loss, SGD with momentum and
 * synthetic data, step time only), times per step of the global minibatch 128:
 *   bench=train case=1x1 bytes=<bytes per step> troupe_us=<us per step> peer=torch-<v>-1thread
 *     peer_us=<torch's us per step, one thread> ratio=... troupe_samples_s=<n>
 *     peer_samples_s=<n> global_batch=128 rounds=<n>
 *   bench=train case=2x1 ... peer=torch-<v>-ddp-gloo-2x64 (two processes, DDP over gloo on
 *     loopback, 64 samples and one thread each)
 * The torch peer runs once per paired round in each mode (the medians are printed) under the
 * first interpreter that imports torch ($TROUPE_BENCH_PYTHON, python3, /usr/bin/python3); its
 * identity (torch's version, the OpenBLAS it loaded and that library's core) is a facts line.
 * Without torch a line `peer torch absent: <why>` replaces these two lines. Then the last line
 *   efficiency=<samples_per_s(2x1) / (2 x samples_per_s(1x1))> efficiency_1x2=<the same for
 *   1x2> efficiency_weak=<the same for 2x1-weak> efficiency_nocomm=<the same for 2x1-nocomm>
 *   rounds=<n> efficiency_min=<lowest round> efficiency_max=<highest round>
 *   efficiency_bf16=<the same for 2x1-bf16> efficiency_unfused=<the same for 2x1-unfused>
 *   efficiency_1x2_unfused=<the same for 1x2-unfused>
 * efficiency is strong scaling (the global minibatch of the trainer's default, 128, split over
 * the ranks); efficiency_weak keeps each rank's minibatch at 128, as Horovod and PyTorch DDP
 * report scaling. Without an MPI build (or an mpiexec that fails) the 2x1 cases are reported
 * on stderr as not measured and their efficiencies print nan.
 *
 * Each child layout's rank 0 also reports, once per distinct line, the optimizer state it holds:
 *   bench=train memory ranks=<R> streams=<N> update=fused-sharded|unfused
 *     optimizer_state_bytes=<bytes> (troupe_dp_optimizer_state_bytes: with the update fused
 *     into the allreduce on several ranks only the rank's ZeRO-1 shard), so 2x1 against
 *     2x1-unfused gives the sharded state's bytes and step time against the unsharded's.
 *
 * The traced cases print `bench=train case=1x1-trace ... peer=1x1-proc ... ratio=<traced /
 * untraced> overhead_pct=<the median over the rounds of each round's (traced / untraced - 1),
 * in percent, of the runs' medians> overhead_best_pct=<the same of each side's fastest run, the
 * one the machine's load disturbed least>` (2x1-trace against 2x1, the untraced runs of the
 * same child), and a
 * `trace_cost` line: rank 0's events per traced step, the cost of one event timed in this
 * process, and the overhead they imply. In the full run the traced children are the rounds'
 * 1x1-proc and 2x1 children (their untraced runs are those cases' figures);
 * `--trace-overhead` runs only them, in S_TRACE_ROUNDS rounds of S_TRACE_RUNS runs per side,
 * and prints those lines.
 *
 * `--model cnn` trains the trainer's convnet instead (examples/fmnist/mlp.h: conv 32-32-64, two
 * max pools, fc 128; SGD with momentum) on the same synthetic images, in fewer cases (a CNN
 * step costs ~30x an MLP step), against bench/peers/torch_cnn.py (the same model, optimizer
 * and data; PyTorch's convolutions through oneDNN, its CPU default):
 *   bench=train case=2x1 ... peer=1x1-proc (us per sample; efficiency as above)
 *   bench=train case=1x1-proc ... peer=torch-<v>-1thread   (per step of the global batch 128)
 *     (each torch line: the faster of the peer's step of 128 and its S_CNN_PEER_ACCUM
 *     micro-steps, peer_grad_accum= saying which, against the faster of troupe's step and
 *     its micro-steps of S_CNN_MICRO_BATCH samples a replica, grad_accum= saying which; all
 *     forms timed in every round)
 *   bench=train case=2x1 ... peer=torch-<v>-ddp-gloo-2x64
 *   efficiency=<...> rounds=<n> efficiency_min=<...> efficiency_max=<...>
 * with 1x1-proc and 2x1 child jobs and the two torch modes measured in each paired round.
 *
 * Two other modes replace the cases above:
 *   --scaling R1,R2,...  weak scaling at 128 per rank over R ranks (child jobs of R ranks under
 *                        mpiexec) against R independent processes (the node's ceiling), for the
 *                        16-core machine (s_scaling below: what each line carries)
 *   --backend cuda       the main job on GPU 0 at global minibatches 128, 256, 1024, 8192 against
 *                        PyTorch on the same GPU, and two ranks sharing it (s_device_cases)
 * `--backend NAME` also names the backend of every layout and child (default cpu).
 *
 * Options: see --help (bench/bench_util.h). Exit status: 0; 1 on a failure (a failed step, a
 * non-finite loss, a child failing); 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench/bench_util.h"

#include "examples/fmnist/idx.h"
#include "examples/fmnist/mlp.h"

#include "actors/troupe.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/trace_impl.h"
#include "devices/device.h"
#include "parallel/dp.h"
#include "transport/mpi/cluster.h"
#include "troupe_config.h"

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define S_PROG "bench_train"
#define S_GLOBAL_BATCH 128 /* the trainer's default global minibatch */
#define S_STEPS 40         /* steps per timed run */
#define S_WARM_STEPS 10    /* untimed steps after building a layout */
#define S_DATA_ROWS 5120   /* synthetic training rows (40 global minibatches of 128; at least
                              4 global minibatches for larger ones) */
#define S_MAX_RANKS 64     /* ranks of a --scaling child job, at most */
#define S_CHILD_RUNS 7     /* timed runs of a child per round (3 with --quick) */
#define S_ROUNDS 3         /* paired rounds (1 with --quick) */
#define S_TRACE_ROUNDS 5   /* rounds of --trace-overhead (1 with --quick) */
#define S_TRACE_RUNS 15    /* timed runs per side of its children (3 with --quick) */
#define S_BYTES_PER_SAMPLE ((int64_t)(FMNIST_IMAGE_PIXELS + FMNIST_NUM_CLASSES) * 4)

/* One layout: its model, driver and per-run sample count. */
typedef struct layout {
    fmnist_mlp_t *mlp;
    troupe_dp_t *dp;
    int64_t samples_per_run;
    int failed;
} layout_t;

/* The synthetic data set for a global minibatch: S_DATA_ROWS rows, or 4 minibatches when more. */
static void s_synthetic(fmnist_dataset_t *ds, int64_t global_batch)
{
    const size_t rows = (size_t)(4 * global_batch > S_DATA_ROWS ? 4 * global_batch : S_DATA_ROWS);
    memset(ds, 0, sizeof *ds);
    ds->count = rows;
    ds->rows = FMNIST_IMAGE_ROWS;
    ds->cols = FMNIST_IMAGE_COLS;
    ds->pixels = malloc(rows * FMNIST_IMAGE_PIXELS);
    ds->labels = malloc(rows);
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; ds->pixels && ds->labels && i < rows * FMNIST_IMAGE_PIXELS; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ds->pixels[i] = (uint8_t)(x >> 56);
        if (i < rows)
            ds->labels[i] = (uint8_t)((x >> 40) % FMNIST_NUM_CLASSES);
    }
}

static bool s_bf16;               /* a child of 2x1-bf16 (--bf16) */
static bool s_overlap;            /* a child of 2x1-overlap (--overlap); the next child started */
static bool s_unfused;            /* a child of 2x1-unfused (--unfused); the next child started */
static int s_child_streams = 1;   /* a child's streams per rank (--streams) */
static int s_spawn_streams = 1;   /* --streams for the next child started (1: none) */
static double s_child_cover_us;   /* the last child's median compute_overlap_us (NAN: none) */
static const char *s_backend = "cpu"; /* --backend: every layout's and child's backend */
/* --optimizer: every layout's, child's and the torch peer's (SGD: lr 0.05, momentum 0.9;
 * AdamW: troupe_optimizer_default's, torch.optim.AdamW's defaults) */
static troupe_optimizer_kind_t s_opt_kind = TROUPE_OPT_SGD;
/* --feed: the model's form (examples/fmnist/mlp.h): auto is fed on a backend with graphs */
static fmnist_feed_t s_feed = FMNIST_FEED_AUTO;
/* --model: the MLP or the convnet (examples/fmnist/mlp.h), every layout's and child's */
static fmnist_model_kind_t s_model = FMNIST_MODEL_MLP;
/* --grad-accum K: micro-steps per optimizer step on both sides (troupe_dp_config_t's
 * grad_accum; the torch peer's backward per 1/K of the batch before its step) */
static int s_grad_accum = 1;
/* The torch peer's micro-steps when not 0 (else s_grad_accum's): --model cnn also times the
 * peer with S_CNN_PEER_ACCUM micro-steps, 4 % faster than one step of 128 on this machine
 * (docs/trainer.md), and compares troupe with the faster of its two forms. */
static int s_torch_accum;
#define S_CNN_PEER_ACCUM 4
/* --model cnn (without --grad-accum) also times troupe with micro-steps of this many samples a
 * replica (grad_accum 32 on one rank, 16 on two), where conv2d's AUTO lowering takes Winograd
 * (nn/conv.h), and compares the faster of troupe's two forms with the faster of the peer's. */
#define S_CNN_MICRO_BATCH 4
static int s_run(void *arg);
static const char *s_trace_prefix; /* a traced child (--trace PREFIX) */
static bool s_trace_failed;        /* a traced child could not switch tracing */

/* A traced child's runs: tracing off (the untraced side) or on (the traced side). */
static int s_run_switch(void *arg, const char *prefix)
{
    if (troupe_config_set_trace_prefix(prefix) != TROUPE_OK) {
        s_trace_failed = true;
        return 1;
    }
    return s_run(arg);
}
static int s_run_untraced(void *arg)
{
    return s_run_switch(arg, NULL);
}
static int s_run_traced(void *arg)
{
    return s_run_switch(arg, s_trace_prefix);
}

/* Builds a layout of `streams` replicas on this rank (the cluster decides the ranks) and runs
 * the warm-up steps. */
static troupe_status_t s_layout_new(int streams, int64_t global_batch, const fmnist_dataset_t *ds,
                                    layout_t *l)
{
    memset(l, 0, sizeof *l);
    int64_t replicas = (int64_t)streams * troupe_cluster_size();
    int64_t B = global_batch / (replicas * s_grad_accum);
    int64_t nb = ds->count / B;
    fmnist_mlp_config_t mc = s_model == FMNIST_MODEL_CNN ? fmnist_cnn_config_default(B, nb)
                                                         : fmnist_mlp_config_default(B, nb);
    mc.fed = fmnist_feed_resolve(s_feed, s_backend);
    mc.conv_lowering = fmnist_conv_lowering_resolve(s_backend);
    TROUPE_RETURN_IF_ERROR(fmnist_mlp_new(&mc, &l->mlp));
    TROUPE_RETURN_IF_ERROR(fmnist_mlp_init_params(l->mlp, 42));
    TROUPE_RETURN_IF_ERROR(fmnist_mlp_load_train(l->mlp, ds));
    troupe_dp_model_t model;
    fmnist_mlp_dp_model(l->mlp, &model);
    troupe_optimizer_t opt = troupe_optimizer_default(s_opt_kind);
    if (s_opt_kind == TROUPE_OPT_SGD)
        opt.lr = 0.05;
    troupe_dp_config_t dc = {.backend = s_backend,
                             .streams = streams,
                             .optimizer = opt,
                             .compress_bf16 = s_bf16,
                             .grad_accum = s_grad_accum,
                             .overlap = s_overlap ? TROUPE_DP_OVERLAP_ON : TROUPE_DP_OVERLAP_OFF,
                             /* the MLP's 0.94 MB fit in DDP's first bucket: a bucket per layer */
                             .bucket_bytes = 1};
    TROUPE_RETURN_IF_ERROR(troupe_dp_new(&dc, &model, &l->dp));
    /* 2x1-unfused must run the routine; 2x1 on a host backend must fuse (parallel/dp.h);
     * likewise 1x2-unfused and 1x2 on cpu's threaded streams, across the streams */
    troupe_backend_t *be = troupe_dp_backend(l->dp);
    bool want_fused = !s_unfused && !s_overlap && troupe_cluster_size() > 1 &&
                      troupe_backend_host_addressable(be);
    bool want_streams = !s_unfused && !s_overlap && troupe_cluster_size() == 1 && streams > 1 &&
                        troupe_backend_host_addressable(be) && troupe_backend_threaded(be);
    if (troupe_dp_fused_update(l->dp) != want_fused ||
        troupe_dp_fused_streams(l->dp) != want_streams)
        return troupe_error_set(TROUPE_INTERNAL,
                                "the optimizer step is %sfused into the allreduce and %sfused "
                                "across the streams, expected %s and %s",
                                troupe_dp_fused_update(l->dp) ? "" : "not ",
                                troupe_dp_fused_streams(l->dp) ? "" : "not ",
                                want_fused ? "fused" : "not fused",
                                want_streams ? "fused" : "not fused");
    for (int s = 0; s < S_WARM_STEPS; s++)
        TROUPE_RETURN_IF_ERROR(troupe_dp_step(l->dp));
    TROUPE_RETURN_IF_ERROR(troupe_dp_sync(l->dp));
    l->samples_per_run = (int64_t)S_STEPS * B * replicas * s_grad_accum;
    return TROUPE_OK;
}

/* Checks the training is sane (a finite loss), then releases the layout. */
static troupe_status_t s_layout_done(layout_t *l)
{
    troupe_status_t st = TROUPE_OK;
    if (l->dp) {
        double loss = 0;
        st = troupe_dp_last_loss(l->dp, &loss);
        if (st == TROUPE_OK && !isfinite(loss))
            st = troupe_error_set(TROUPE_INTERNAL, "the loss is %g after training", loss);
    }
    troupe_dp_destroy(&l->dp);
    fmnist_mlp_destroy(&l->mlp);
    return st;
}

/* One timed run: S_STEPS steps and a sync. */
static int s_run(void *arg)
{
    layout_t *l = arg;
    for (int s = 0; s < S_STEPS; s++) {
        if (troupe_dp_step(l->dp) != TROUPE_OK) {
            l->failed = 1;
            return 1;
        }
    }
    if (troupe_dp_sync(l->dp) != TROUPE_OK) {
        l->failed = 1;
        return 1;
    }
    return 0;
}

/* ---- a child: `[mpiexec -n 2 ...] bench_train --child --batch B [--runs N] [--warmup N]` -- */

/* A failed 2x1 child: leaves the cluster (no MPI_Finalize, which would wait for a peer that
 * may be gone) and exits with `rc`; mpiexec then ends the other rank. */
static void s_child_leave(int rc)
{
    troupe_status_t st = troupe_cluster_leave("bench_train child failed");
    (void)st; /* failing already: reported by the caller */
    exit(rc);
}
static double s_median(const double *v, int n);

/* The median compute_overlap_us of the step breakdown lines in `path` for steps from
 * S_WARM_STEPS on (all of them when none is), NAN when there is none. */
static double s_cover_median(const char *path)
{
    FILE *f = fopen(path, "r");
    double v[64], w[64];
    int n = 0, nw = 0;
    char line[2048];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        const char *p = strstr(line, "dp step "), *c = strstr(line, " compute_overlap_us=");
        if (p == NULL || c == NULL || strstr(p, " breakdown: ") == NULL)
            continue;
        double x = strtod(c + 20, NULL);
        if (strtoll(p + 8, NULL, 10) >= S_WARM_STEPS && n < 64)
            v[n++] = x;
        if (nw < 64)
            w[nw++] = x;
    }
    if (f != NULL)
        fclose(f);
    return n > 0 ? s_median(v, n) : nw > 0 ? s_median(w, nw) : NAN;
}

static int s_child(const troupe_bench_opts_t *opts, int64_t global_batch)
{
    char logpath[96] = "";
    if (s_overlap) { /* the step breakdown (debug:parallel) of every logged step, to a file */
        snprintf(logpath, sizeof logpath, "/tmp/bench_train-overlap-%d.log", (int)getpid());
        if (troupe_log_set_file(logpath) != TROUPE_OK ||
            troupe_log_configure("debug:parallel") != TROUPE_OK)
            logpath[0] = '\0';
    }
    fmnist_dataset_t ds;
    s_synthetic(&ds, global_batch);
    if (!ds.pixels || !ds.labels)
        return troupe_bench_fail_status(
            S_PROG, "child: synthetic data",
            troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "out of memory"));
    layout_t l;
    troupe_status_t st = s_layout_new(s_child_streams, global_batch, &ds, &l);
    if (st != TROUPE_OK) {
        int rc = troupe_bench_fail_status(S_PROG, "child: building the layout", st);
        s_child_leave(rc);
    }
    troupe_bench_opts_t o = *opts;
    o.max_runs = o.min_runs; /* the same number of runs on every rank */
    o.min_total_s = 0.0;
    troupe_bench_stats_t stats, traced = {0};
    int rc;
    if (s_trace_prefix) { /* untraced and traced runs alternate (their order too) */
        troupe_bench_side_t sides[2] = {{s_run_untraced, &l}, {s_run_traced, &l}};
        troupe_bench_stats_t both[2];
        rc = troupe_bench_time_sides(sides, 2, &o, both);
        stats = both[0];
        traced = both[1];
        if (troupe_config_set_trace_prefix(s_trace_prefix) != TROUPE_OK) /* written at exit */
            s_trace_failed = true;
        if (s_trace_failed)
            rc = 1;
    } else {
        rc = troupe_bench_time(s_run, &l, &o, &stats);
    }
    if (rc != 0 || l.failed) {
        troupe_bench_fail_status(S_PROG, "child: training", troupe_cluster_status());
        s_child_leave(1);
    }
    /* rank 0's optimizer state (ZeRO-1 shards it when the update is fused) */
    long long state_bytes = (long long)troupe_dp_optimizer_state_bytes(l.dp);
    bool fused = troupe_dp_fused_update(l.dp);
    st = s_layout_done(&l);
    if (st != TROUPE_OK) {
        troupe_bench_fail_status(S_PROG, "child: finishing", st);
        s_child_leave(1);
    }
    double cover = NAN;
    if (logpath[0] != '\0') {
        troupe_status_t lst = troupe_log_configure("warn"); /* only the breakdown was wanted */
        (void)lst;
        if (troupe_log_set_file(NULL) == TROUPE_OK)
            cover = s_cover_median(logpath);
        unlink(logpath);
    }
    /* the launches of the whole child (warm-up included): whether the graphs replay */
    troupe_graph_stats_t gs;
    troupe_driver_graph_stats(&gs);
    if (troupe_cluster_rank() == 0)
        printf("bench=train memory ranks=%d streams=%d update=%s optimizer_state_bytes=%lld\n",
               troupe_cluster_size(), s_child_streams, fused ? "fused-sharded" : "unfused",
               state_bytes);
    if (troupe_cluster_rank() == 0)
        printf("child ranks=%d median_us=%.3f min_us=%.3f max_us=%.3f runs=%d samples=%lld "
               "traced_median_us=%.3f traced_min_us=%.3f compute_overlap_us=%.3f feed=%s "
               "graph_replays=%llu plain_launches=%llu\n",
               troupe_cluster_size(), stats.median_us, stats.min_us, stats.max_us, stats.runs,
               (long long)l.samples_per_run, traced.median_us, traced.min_us, cover,
               fmnist_feed_resolve(s_feed, s_backend) ? "fed" : "indexed",
               (unsigned long long)gs.replays, (unsigned long long)gs.plain);
    fmnist_dataset_free(&ds);
    return 0;
}

#if TROUPE_HAVE_MPI && defined(FMNIST_BENCH_MPIEXEC)
#define S_HAVE_MPIEXEC 1
#else
#define S_HAVE_MPIEXEC 0
#endif

/* A child process and the pipe its stdout goes to. */
typedef struct s_child_proc {
    pid_t pid;
    FILE *out;
    const char *what; /* for messages */
} s_child_proc_t;

static troupe_status_t s_spawn(char **argv, s_child_proc_t *c);

/* Starts `self --child --batch B --runs R --warmup W --backend NAME`, under
 * `mpiexec -n <mpi_ranks> <launcher args>` when mpi_ranks > 0 (MPI builds with a found mpiexec
 * only), else as a plain process. */
static troupe_status_t s_child_start(int mpi_ranks, int64_t batch, bool bf16, const char *trace,
                                     int runs, int warmup, const char *what, s_child_proc_t *c)
{
    memset(c, 0, sizeof *c);
    c->what = what;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return troupe_error_set(TROUPE_NOT_FOUND, "cannot find this program: %s", strerror(errno));
    self[n] = '\0';
    char runs_s[16], warm_s[16], batch_s[24], ranks_s[16];
    snprintf(ranks_s, sizeof ranks_s, "%d", mpi_ranks);
    snprintf(runs_s, sizeof runs_s, "%d", runs);
    snprintf(warm_s, sizeof warm_s, "%d", warmup);
    snprintf(batch_s, sizeof batch_s, "%lld", (long long)batch);
    char *argv[64];
    int argc = 0;
#if S_HAVE_MPIEXEC
    char launcher[] = FMNIST_BENCH_MPI_ARGS;
    if (mpi_ranks > 0) {
        argv[argc++] = (char *)FMNIST_BENCH_MPIEXEC;
        argv[argc++] = (char *)"-n";
        argv[argc++] = ranks_s;
        for (char *save = NULL, *t = strtok_r(launcher, " ", &save); t && argc < 40;
             t = strtok_r(NULL, " ", &save))
            argv[argc++] = t;
    }
#else
    (void)ranks_s;
    if (mpi_ranks > 0)
        return troupe_error_set(TROUPE_UNAVAILABLE, "built without MPI");
#endif
    argv[argc++] = self;
    argv[argc++] = (char *)"--child";
    argv[argc++] = (char *)"--batch";
    argv[argc++] = batch_s;
    argv[argc++] = (char *)"--runs";
    argv[argc++] = runs_s;
    argv[argc++] = (char *)"--warmup";
    argv[argc++] = warm_s;
    argv[argc++] = (char *)"--backend";
    argv[argc++] = (char *)s_backend;
    argv[argc++] = (char *)"--optimizer";
    argv[argc++] = (char *)troupe_optimizer_name(s_opt_kind);
    argv[argc++] = (char *)"--feed";
    argv[argc++] = (char *)fmnist_feed_name(s_feed);
    argv[argc++] = (char *)"--model";
    argv[argc++] = (char *)fmnist_model_name(s_model);
    char accum_s[16];
    if (s_grad_accum > 1) {
        snprintf(accum_s, sizeof accum_s, "%d", s_grad_accum);
        argv[argc++] = (char *)"--grad-accum";
        argv[argc++] = accum_s;
    }
    if (bf16)
        argv[argc++] = (char *)"--bf16";
    if (s_overlap)
        argv[argc++] = (char *)"--overlap";
    if (s_unfused)
        argv[argc++] = (char *)"--unfused";
    char streams_s[16];
    if (s_spawn_streams > 1) {
        snprintf(streams_s, sizeof streams_s, "%d", s_spawn_streams);
        argv[argc++] = (char *)"--streams";
        argv[argc++] = streams_s;
    }
    if (trace) {
        argv[argc++] = (char *)"--trace";
        argv[argc++] = (char *)trace;
    }
    argv[argc] = NULL;
    return s_spawn(argv, c);
}

/* Starts argv (PATH searched) with its stdout on a pipe read through c->out. */
static troupe_status_t s_spawn(char **argv, s_child_proc_t *c)
{
    int fds[2];
    if (pipe(fds) != 0)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    int e = posix_spawnp(&c->pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (e != 0) {
        close(fds[0]);
        return troupe_error_set(TROUPE_UNAVAILABLE, "cannot start %s: %s", argv[0], strerror(e));
    }
    c->out = fdopen(fds[0], "r");
    if (c->out == NULL)
        close(fds[0]); /* the child then dies of SIGPIPE or finishes unread: reported below */
    return TROUPE_OK;
}

/* The median and the fastest of a traced child's traced runs, us (0: not traced), and the
 * fastest of its untraced runs. */
static double s_traced_median_us, s_traced_min_us, s_child_min_us;
/* The last child's form and launches: " feed=... graph_replays=... plain_launches=..." */
static char s_child_launches[128];

/* Prints a child's "bench=train memory ..." line unless an equal one was printed. */
static void s_memory_line(const char *line)
{
    static char seen[8][160];
    static int nseen;
    for (int i = 0; i < nseen; i++)
        if (strncmp(seen[i], line, sizeof seen[i] - 1) == 0)
            return;
    if (nseen < 8)
        snprintf(seen[nseen++], sizeof seen[0], "%.*s", (int)sizeof seen[0] - 1, line);
    fputs(line, stdout);
    fflush(stdout);
}

/* Reads the child's result line (median run time in us, samples per run, `ranks` ranks; a
 * traced child's traced median into s_traced_median_us) and waits for it. */
static troupe_status_t s_child_finish(s_child_proc_t *c, int ranks, double *median_us,
                                      int64_t *samples)
{
    s_traced_median_us = 0;
    s_child_launches[0] = '\0';
    char line[512];
    bool found = false;
    while (c->out && fgets(line, sizeof line, c->out)) {
        int rk = 0, r = 0;
        long long sm = 0;
        double med = 0, mn = 0, mx = 0;
        if (sscanf(line, "child ranks=%d median_us=%lf min_us=%lf max_us=%lf runs=%d samples=%lld",
                   &rk, &med, &mn, &mx, &r, &sm) == 6) {
            *median_us = med;
            *samples = sm;
            found = rk == ranks && sm > 0 && med > 0;
            const char *tr = strstr(line, " traced_median_us=");
            const char *tm = strstr(line, " traced_min_us=");
            const char *cv = strstr(line, " compute_overlap_us=");
            s_child_cover_us = cv != NULL ? strtod(cv + 20, NULL) : NAN;
            s_child_min_us = mn;
            if (tr)
                s_traced_median_us = strtod(tr + 18, NULL);
            if (tm)
                s_traced_min_us = strtod(tm + 15, NULL);
            const char *fd = strstr(line, " feed=");
            snprintf(s_child_launches, sizeof s_child_launches, "%.*s",
                     fd ? (int)strcspn(fd, "\n") : 0, fd ? fd : "");
        } else if (strncmp(line, "bench=train memory ", 19) == 0) {
            s_memory_line(line); /* the optimizer state's bytes: once per layout */
        } else {
            fputs(line, stderr); /* anything else the child printed */
        }
    }
    if (c->out)
        fclose(c->out);
    c->out = NULL;
    int status = 0;
    while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return troupe_error_set(TROUPE_UNAVAILABLE, "the %s child failed (status %d)", c->what,
                                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    if (!found)
        return troupe_error_set(TROUPE_INTERNAL, "the %s child printed no result line", c->what);
    return TROUPE_OK;
}

/* Events in the last traced child's rank 0 file (its otherData "events"), -1 unknown. */
static int64_t s_trace_events = -1;

/* The "events" count of a trace file (the last 512 bytes hold otherData), -1 when not found. */
static int64_t s_trace_file_events(const char *path)
{
    char tail[513];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = 0;
    if (fseek(f, -512, SEEK_END) != 0)
        rewind(f);
    n = fread(tail, 1, sizeof tail - 1, f);
    fclose(f);
    tail[n] = '\0';
    const char *e = strstr(tail, "\"events\":");
    return e ? strtoll(e + 9, NULL, 10) : -1;
}

/* A traced child's files <dir>/t.<rank>.json: error unless each of `ranks` exists; removed. */
static troupe_status_t s_trace_files_check(const char *dir, int ranks)
{
    troupe_status_t st = TROUPE_OK;
    for (int r = 0; r < ranks; r++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/t.%d.json", dir, r);
        if (access(path, R_OK) != 0 && st == TROUPE_OK)
            st = troupe_error_set(TROUPE_NOT_FOUND, "the traced child wrote no %s", path);
        if (r == 0)
            s_trace_events = s_trace_file_events(path);
        unlink(path);
    }
    rmdir(dir);
    return st;
}

/* Us per sample of the last traced child's traced runs: median and fastest (NAN: none), and
 * of its fastest untraced run. */
static double s_traced_us = NAN, s_traced_best_us = NAN, s_untraced_best_us = NAN;

/* One child job of `ranks` ranks (more than 1: under mpiexec); us per sample (of its untraced runs), NAN
 * when not measured. When `trace`, it traces every other run into a temporary directory, and
 * s_traced_us gets its traced runs' us per sample. */
static double s_child_case(int ranks, int64_t batch, bool bf16, bool trace, int runs, int warmup,
                           const char *what)
{
    s_child_proc_t c;
    double med = 0;
    int64_t samples = 0;
    char dir[4096] = "", prefix[4200] = "";
    if (trace) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/bench_train-trace-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (mkdtemp(dir) == NULL) {
            fprintf(stderr, "%s: case %s not measured: mkdtemp %s: %s\n", S_PROG, what, dir,
                    strerror(errno));
            return NAN;
        }
        snprintf(prefix, sizeof prefix, "%s/t", dir);
    }
    troupe_status_t st =
        s_child_start(ranks > 1 ? ranks : 0, batch, bf16, trace ? prefix : NULL, runs, warmup,
                      what, &c);
    if (st == TROUPE_OK)
        st = s_child_finish(&c, ranks, &med, &samples);
    s_traced_us = NAN;
    if (trace) {
        troupe_status_t tst = s_trace_files_check(dir, ranks);
        st = st == TROUPE_OK ? tst : st;
        if (st == TROUPE_OK && s_traced_median_us <= 0)
            st = troupe_error_set(TROUPE_INTERNAL, "the traced child printed no traced time");
        if (st == TROUPE_OK) {
            s_traced_us = s_traced_median_us / (double)samples;
            s_traced_best_us = s_traced_min_us / (double)samples;
            s_untraced_best_us = s_child_min_us / (double)samples;
        }
    }
    if (st != TROUPE_OK) {
        fprintf(stderr, "%s: case %s not measured: %s\n", S_PROG, what, troupe_last_error());
        return NAN;
    }
    return med / (double)samples;
}

/* `procs` (1..S_MAX_RANKS) single-rank children started together; their combined us per
 * sample (1 / the sum of their throughputs), NAN when not measured. */
static double s_nocomm_case(int procs, int64_t batch, int runs, int warmup, const char *what)
{
    s_child_proc_t c[S_MAX_RANKS];
    troupe_status_t st[S_MAX_RANKS];
    double per_us = 0.0; /* samples per us, summed */
    bool ok = true;
    for (int i = 0; i < procs; i++)
        st[i] = s_child_start(0, batch, false, NULL, runs, warmup, what, &c[i]);
    for (int i = 0; i < procs; i++) {
        double med = 0;
        int64_t samples = 0;
        if (st[i] == TROUPE_OK)
            st[i] = s_child_finish(&c[i], 1, &med, &samples);
        if (st[i] != TROUPE_OK) {
            if (ok)
                fprintf(stderr, "%s: case %s not measured: %s\n", S_PROG, what,
                        troupe_last_error());
            ok = false;
            continue;
        }
        per_us += (double)samples / med;
    }
    return ok ? 1.0 / per_us : NAN;
}

/* ---- the PyTorch peer (bench/peers/torch_mlp.py) ------------------------------------------ */

#ifndef TROUPE_BENCH_TORCH_SCRIPT
#define TROUPE_BENCH_TORCH_SCRIPT "bench/peers/torch_mlp.py"
#endif
#ifndef TROUPE_BENCH_TORCH_CNN_SCRIPT
#define TROUPE_BENCH_TORCH_CNN_SCRIPT "bench/peers/torch_cnn.py"
#endif

/* The interpreter that imported torch (NULL until one did), torch's major.minor version, and
 * why no interpreter could (set once every candidate failed). */
static const char *s_torch_python;
static char s_torch_version[32] = "unknown";
static char s_torch_absent[512];

/* Runs the script once: `<python> torch_mlp.py --mode <mode> --runs R --steps S_STEPS`. Its
 * `library` line goes to stdout when print_facts; other unknown lines to stderr. Returns 0 with
 * *us_per_step set, 3 when this interpreter cannot import torch (the reason in
 * s_torch_absent), 1 on a failure (printed). */
static int s_torch_run(const char *python, const char *mode, int64_t batch, int runs,
                       bool print_facts, double *us_per_step)
{
    char runs_s[16], steps_s[16], batch_s[24], accum_s[16];
    snprintf(batch_s, sizeof batch_s, "%lld", (long long)batch);
    const int accum = s_torch_accum > 0 ? s_torch_accum : s_grad_accum;
    snprintf(accum_s, sizeof accum_s, "%d", accum);
    snprintf(runs_s, sizeof runs_s, "%d", runs);
    snprintf(steps_s, sizeof steps_s, "%d", S_STEPS);
    char *argv[] = {(char *)python,
                    (char *)(s_model == FMNIST_MODEL_CNN ? TROUPE_BENCH_TORCH_CNN_SCRIPT
                                                         : TROUPE_BENCH_TORCH_SCRIPT),
                    (char *)"--mode",
                    (char *)mode,
                    (char *)"--runs",
                    runs_s,
                    (char *)"--steps",
                    steps_s,
                    (char *)"--batch",
                    batch_s,
                    (char *)"--optimizer",
                    (char *)troupe_optimizer_name(s_opt_kind),
                    accum > 1 ? (char *)"--grad-accum" : NULL,
                    accum_s,
                    NULL};
    s_child_proc_t c = {.what = "torch peer"};
    if (s_spawn(argv, &c) != TROUPE_OK) {
        snprintf(s_torch_absent, sizeof s_torch_absent, "%s", troupe_last_error());
        return 3;
    }
    char line[1024];
    bool found = false, absent = false;
    while (c.out && fgets(line, sizeof line, c.out)) {
        const char *med = strstr(line, " median_step_us=");
        const char *ver = strstr(line, " version=\"");
        if (strncmp(line, "torch_peer absent ", 18) == 0) {
            absent = true;
            line[strcspn(line, "\n")] = '\0';
            snprintf(s_torch_absent, sizeof s_torch_absent, "%s: %.400s", python, line + 18);
        } else if (strncmp(line, "torch_peer ", 11) == 0 && med) {
            *us_per_step = strtod(med + 16, NULL);
            found = *us_per_step > 0.0;
        } else if (strncmp(line, "library name=torch ", 19) == 0) {
            if (ver) { /* "1.13.0a0" -> "1.13" */
                int major = 0, minor = 0;
                if (sscanf(ver + 10, "%d.%d", &major, &minor) == 2)
                    snprintf(s_torch_version, sizeof s_torch_version, "%d.%d", major, minor);
            }
            if (print_facts)
                fputs(line, stdout);
        } else {
            fputs(line, stderr);
        }
    }
    if (c.out)
        fclose(c.out);
    int status = 0;
    while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR)
        ;
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (rc == 3 || absent) {
        if (!absent)
            snprintf(s_torch_absent, sizeof s_torch_absent, "%s exited with status 3", python);
        return 3;
    }
    if (rc != 0 || !found) {
        fprintf(stderr, "%s: the torch peer (%s, mode %s) failed (status %d)%s\n", S_PROG, python,
                mode, rc, found ? "" : ", no result line");
        return 1;
    }
    return 0;
}

/* The torch peer's median step time in us in `mode`, NAN when torch is absent (one line on
 * stdout says so, once) or the peer failed. The interpreters tried, in order:
 * $TROUPE_BENCH_PYTHON, python3 on PATH, /usr/bin/python3 (where Debian's python3-torch is). */
static double s_torch_case(const char *mode, int64_t batch, int runs, bool print_facts)
{
    static bool said_absent = false;
    double us = NAN;
    if (s_torch_python)
        return s_torch_run(s_torch_python, mode, batch, runs, print_facts, &us) == 0 ? us : NAN;
    if (said_absent)
        return NAN;
    const char *env = getenv("TROUPE_BENCH_PYTHON");
    const char *cands[3] = {env && env[0] ? env : NULL, "python3", "/usr/bin/python3"};
    for (int i = 0; i < 3; i++) {
        if (!cands[i])
            continue;
        int rc = s_torch_run(cands[i], mode, batch, runs, print_facts, &us);
        if (rc == 0) {
            s_torch_python = cands[i];
            return us;
        }
        if (rc != 3)
            return NAN;
    }
    printf("peer torch absent: %s (deploy/bench.sh installs python3-torch)\n", s_torch_absent);
    fflush(stdout);
    said_absent = true;
    return NAN;
}

#define S_MEDIAN_MAX 16

/* The median of v[0..n) (n <= S_MEDIAN_MAX); NAN when any is NAN (a case not measured). */
static double s_median(const double *v, int n)
{
    double s[S_MEDIAN_MAX];
    if (n > S_MEDIAN_MAX)
        n = S_MEDIAN_MAX;
    for (int i = 0; i < n; i++) {
        if (isnan(v[i]))
            return NAN;
        s[i] = v[i];
    }
    for (int i = 1; i < n; i++) /* insertion sort: n is tiny */
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
            double t = s[j];
            s[j] = s[j - 1];
            s[j - 1] = t;
        }
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* ---- the recorder's overhead (1x1-trace, 2x1-trace) --------------------------------------- */

/* T*: medians of the runs; B*: the fastest run (the one the load disturbed least). */
enum { T11, T11T, T21, T21T, B11, B11T, B21, B21T, TCASES };
static const char *const s_tnames[TCASES] = {"1x1-proc", "1x1-trace", "2x1", "2x1-trace",
                                             "",         "",          "",    ""};
static int64_t s_tevents[TCASES]; /* rank 0's trace events of the last traced run */

/* Round k of the traced cases: a traced 1x1-proc child and a traced 2x1 child, each giving
 * its untraced and its traced runs' us per sample (out[T11], out[T11T], out[T21], out[T21T]). */
static void s_trace_round(int k, int runs, int warmup, double out[TCASES])
{
    for (int pair = 0; pair < 2; pair++) {
        out[2 * pair] = out[2 * pair + 1] = out[B11 + 2 * pair] = out[B11 + 2 * pair + 1] = NAN;
        if (pair == 1 && !S_HAVE_MPIEXEC) {
            if (k == 0)
                fprintf(stderr, "%s: cases 2x1 and 2x1-trace not measured: built without MPI\n",
                        S_PROG);
            continue;
        }
        s_trace_events = -1;
        out[2 * pair] =
            s_child_case(pair + 1, S_GLOBAL_BATCH, false, true, runs, warmup, s_tnames[2 * pair]);
        out[2 * pair + 1] = s_traced_us;
        out[B11 + 2 * pair] = s_untraced_best_us;
        out[B11 + 2 * pair + 1] = s_traced_best_us;
        s_tevents[2 * pair + 1] = s_trace_events;
    }
}

/* The median over the rounds of each round's (v[k][a] / v[k][b] - 1), and its spread. */
static double s_round_ratio(const double v[][TCASES], int rounds, int a, int b, double *lo,
                            double *hi)
{
    double r[S_MEDIAN_MAX];
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int k = 0; k < rounds && k < S_MEDIAN_MAX; k++) {
        r[k] = v[k][a] / v[k][b] - 1.0;
        *lo = r[k] < *lo ? r[k] : *lo;
        *hi = r[k] > *hi ? r[k] : *hi;
    }
    return s_median(r, rounds);
}

/* `bench=train case=<traced case> ... peer=<untraced case> ... ratio=<traced/untraced>
 * overhead_pct=<median of the rounds' (traced/untraced - 1) of the runs' medians, %>
 * overhead_best_pct=<the same of the fastest runs> ...`; nothing when not measured. */
static void s_print_trace(int traced_case, const double v[][TCASES], int rounds)
{
    int plain_case = traced_case - 1, best = B11 + (traced_case - T11T);
    double t[S_MEDIAN_MAX], p[S_MEDIAN_MAX], lo, hi, blo, bhi;
    for (int k = 0; k < rounds && k < S_MEDIAN_MAX; k++) {
        t[k] = v[k][traced_case];
        p[k] = v[k][plain_case];
    }
    double tm = s_median(t, rounds), pm = s_median(p, rounds);
    double rm = s_round_ratio(v, rounds, traced_case, plain_case, &lo, &hi);
    double rb = s_round_ratio(v, rounds, best + 1, best, &blo, &bhi);
    if (isnan(tm) || isnan(pm))
        return;
    troupe_bench_print_case("train", s_tnames[traced_case], S_BYTES_PER_SAMPLE, tm,
                            s_tnames[plain_case], pm,
                            "overhead_pct=%.2f overhead_min_pct=%.2f overhead_max_pct=%.2f "
                            "overhead_best_pct=%.2f rounds=%d samples_per_s=%.0f global_batch=%d",
                            100.0 * rm, 100.0 * lo, 100.0 * hi, 100.0 * rb, rounds, 1e6 / tm,
                            S_GLOBAL_BATCH);
}

/* What one recorded event costs the thread that records it, in ns: the two clock reads and
 * the append of a routine's event, timed here with tracing on (into a prefix never flushed:
 * the prefix is set back before exit; the events stay in memory, unwritten unless the user
 * traces this process too). */
static double s_ns_per_event(void)
{
    enum { N = 100000 };
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", troupe_config_trace_prefix());
    if (troupe_config_set_trace_prefix("/nonexistent/bench_train-never-written") != TROUPE_OK)
        return NAN;
    int64_t t0 = troupe_now_ns();
    for (int i = 0; i < N; i++) {
        int64_t a = troupe_now_ns();
        troupe__trace_arg_t args[] = {TROUPE__TRACE_STR("status", "OK"),
                                      TROUPE__TRACE_NUM("merge_buffer", 0)};
        troupe__trace_emit(TROUPE__TRACK_THREAD, "routine", "fmnist_grad", a, troupe_now_ns(),
                           args, 2);
    }
    double ns = (double)(troupe_now_ns() - t0) / N;
    if (troupe_config_set_trace_prefix(saved) != TROUPE_OK) /* the user's TROUPE_TRACE, if any */
        return NAN;
    return ns;
}

/* `trace_cost` line: events per step of rank 0 in the traced cases, the cost of an event, and
 * the overhead they imply per step (events x cost / untraced step time), which the machine's
 * load does not blur as it blurs the timed ratio. */
static void s_print_trace_cost(const double v[][TCASES], int rounds, int runs, int warmup)
{
    double ns = s_ns_per_event();
    double steps = S_WARM_STEPS + (double)(warmup + runs) * S_STEPS;
    printf("trace_cost ns_per_event=%.1f", ns);
    for (int c = T11T; c < B11; c += 2) {
        double p[S_MEDIAN_MAX];
        for (int k = 0; k < rounds && k < S_MEDIAN_MAX; k++)
            p[k] = v[k][c - 1];
        double step_us = s_median(p, rounds) * S_GLOBAL_BATCH;
        double per_step = s_tevents[c] > 0 ? (double)s_tevents[c] / steps : NAN;
        printf(" events_per_step_%s=%.1f implied_overhead_pct_%s=%.3f", s_tnames[c - 1],
               per_step, s_tnames[c - 1], 100.0 * per_step * ns / (1000.0 * step_us));
    }
    printf("\n");
}

/* --trace-overhead: only the traced cases and their untraced pairs. */
static int s_trace_overhead(const troupe_bench_opts_t *opts)
{
    bool quick = opts->max_runs == opts->min_runs;
    int runs = quick ? opts->min_runs : S_TRACE_RUNS, rounds = quick ? 1 : S_TRACE_ROUNDS;
    double v[S_TRACE_ROUNDS][TCASES];
    for (int k = 0; k < rounds; k++)
        s_trace_round(k, runs, opts->warmup, v[k]);
    s_print_trace(T11T, (const double(*)[TCASES])v, rounds);
    s_print_trace(T21T, (const double(*)[TCASES])v, rounds);
    s_print_trace_cost((const double(*)[TCASES])v, rounds, runs, opts->warmup);
    for (int k = 0; k < rounds; k++)
        for (int c = 0; c < TCASES; c++)
            if (isnan(v[k][c]) && (c < T21 || S_HAVE_MPIEXEC))
                return 1;
    return 0;
}

/* ---- --scaling: weak scaling over many ranks (issue 14: the 16-core machine) ------------- */

/* `--scaling R1,R2,...`: for each R, R ranks of one stream at S_GLOBAL_BATCH per rank (a child
 * job under mpiexec), R independent single-rank processes of S_GLOBAL_BATCH each started
 * together (the same compute without communication: what the node's memory bandwidth, caches
 * and cores allow), and a fresh 1x1-proc before them (the machine drifts). One line per R:
 *   bench=train case=weak-<R>x1 ... peer=1x1-proc ... efficiency_weak=<thr(R) / (R thr(1))>
 *     efficiency_nocomm=<thr(nocomm R) / (R thr(1))> comm_share=<1 - us(nocomm) / us(R)>
 *     efficiency_weak_unfused=<the same job with TROUPE_DP_FUSED_UPDATE=off, a child of its own>
 *     efficiency_weak_streams=<the same for one process of R streams, 128 each (weak-1x<R>:
 *     the merge and the update as one pass across the streams), a child of its own>
 * efficiency_nocomm well below 1 says the node limits scaling (memory bandwidth, shared caches,
 * turbo); comm_share says what the merge and the synchronous step add on top (the allreduce and
 * waiting for the slowest rank). Then the torch peer with one thread against 1x1-proc. */
static int s_scaling(const troupe_bench_opts_t *opts, const int *ranks, int nranks)
{
    bool quick = opts->max_runs == opts->min_runs;
    int runs = quick ? opts->min_runs : S_CHILD_RUNS;
    int rc = 0;
    double u1_all[S_MEDIAN_MAX];
    int n1 = 0;
    for (int i = 0; i < nranks; i++) {
        const int R = ranks[i];
        char what[64], what_nc[64];
        snprintf(what, sizeof what, "weak-%dx1", R);
        snprintf(what_nc, sizeof what_nc, "nocomm-%dx1", R);
        double u1 = s_child_case(1, S_GLOBAL_BATCH, false, false, runs, opts->warmup, "1x1-proc");
        if (n1 < S_MEDIAN_MAX)
            u1_all[n1++] = u1;
        double uR = S_HAVE_MPIEXEC ? s_child_case(R, (int64_t)R * S_GLOBAL_BATCH, false, false,
                                                  runs, opts->warmup, what)
                                   : NAN;
        double uN = s_nocomm_case(R, S_GLOBAL_BATCH, runs, opts->warmup, what_nc);
        /* the same job with the optimizer step after the allreduce on every rank */
        char what_u[64];
        snprintf(what_u, sizeof what_u, "weak-%dx1-unfused", R);
        s_unfused = true;
        double uU = S_HAVE_MPIEXEC ? s_child_case(R, (int64_t)R * S_GLOBAL_BATCH, false, false,
                                                  runs, opts->warmup, what_u)
                                   : NAN;
        s_unfused = false;
        /* one process of R streams (the merge and update as one pass across them) */
        char what_s[64];
        snprintf(what_s, sizeof what_s, "weak-1x%d", R);
        s_spawn_streams = R;
        double uS = s_child_case(1, (int64_t)R * S_GLOBAL_BATCH, false, false, runs,
                                 opts->warmup, what_s);
        s_spawn_streams = 1;
        if (isnan(u1) || isnan(uR) || isnan(uN) || isnan(uU) || isnan(uS))
            rc = 1;
        if (isnan(u1) || isnan(uR))
            continue;
        troupe_bench_print_case("train", what, S_BYTES_PER_SAMPLE, uR, "1x1-proc", u1,
                                "samples_per_s=%.0f global_batch=%lld ranks=%d "
                                "efficiency_weak=%.3f efficiency_nocomm=%.3f comm_share=%.3f "
                                "efficiency_weak_unfused=%.3f efficiency_weak_streams=%.3f",
                                1e6 / uR, (long long)R * S_GLOBAL_BATCH, R, u1 / (R * uR),
                                u1 / (R * uN), 1.0 - uN / uR, u1 / (R * uU), u1 / (R * uS));
        fflush(stdout);
    }
    double t1 = s_torch_case("1thread", S_GLOBAL_BATCH, runs, true);
    double u1 = s_median(u1_all, n1);
    if (!isnan(t1) && !isnan(u1)) {
        char peer[64];
        snprintf(peer, sizeof peer, "torch-%s-1thread", s_torch_version);
        troupe_bench_print_case("train", "1x1-proc", S_BYTES_PER_SAMPLE * S_GLOBAL_BATCH,
                                u1 * S_GLOBAL_BATCH, peer, t1,
                                "troupe_samples_s=%.0f peer_samples_s=%.0f global_batch=%d",
                                1e6 / u1, 1e6 * S_GLOBAL_BATCH / t1, S_GLOBAL_BATCH);
    }
    return rc;
}

/* ---- --backend cuda: the main job on a GPU against PyTorch on it (issue 16) --------------- */

/* One rank, one stream on the backend's device 0, at global minibatches 128, 256 (where the loss
 * segment packs its Local arrays), 1024 and 8192, each a fresh child process, against
 * bench/peers/torch_mlp.py --mode gpu (the same MLP, TF32 off, data on the device); per step:
 *   bench=train case=<backend>-1x1-b<B> bytes=<bytes per step> troupe_us=<us per step>
 *     peer=torch-<v>-gpu peer_us=<us per step> ratio=... troupe_samples_s=... peer_samples_s=...
 *     global_batch=<B> feed=<fed|indexed> graph_replays=<n> plain_launches=<n>
 * (the child's form, --feed, and its launches through the graph policy, warm-up included: with
 * the fed form nearly every launch but the feed's is a replay)
 * With --model cnn: the convnet at 128 and 1024 (issue 32's GPU target) against
 * bench/peers/torch_cnn.py --mode gpu (cuDNN, its autotuner on, TF32 off), and no shared case.
 * Otherwise then `case=<backend>-2x1-shared`: two ranks at global 128 sharing device 0 (the
 * cross-rank merge of device buffers), correctness only (`note=` says so): its time is no scaling
 * figure. */
static int s_device_cases(const troupe_bench_opts_t *opts)
{
    static const int64_t mlp_batches[] = {128, 256, 1024, 8192};
    /* the convnet: the CPU target's batch, and issue 32's GPU target's */
    static const int64_t cnn_batches[] = {128, 1024};
    const bool cnn = s_model == FMNIST_MODEL_CNN;
    const int64_t *batches = cnn ? cnn_batches : mlp_batches;
    const size_t nbatches = cnn ? sizeof cnn_batches / sizeof cnn_batches[0]
                                : sizeof mlp_batches / sizeof mlp_batches[0];
    /* a machine without the device: one line, as bench_cuda (the children would each fail) */
    troupe_backend_t *be = NULL;
    int ndev = 0;
    troupe_status_t st = troupe_backend_open(s_backend, TROUPE_ONLY_DEVICES_PARALLEL, &be);
    if (st == TROUPE_OK)
        st = troupe_num_devices(be, &ndev);
    troupe_backend_close(&be);
    if (st != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "opening the backend", st);
    if (ndev == 0) {
        printf("bench=train case=%s skipped reason=\"backend %s has no device (troupe info says "
               "why)\"\n",
               s_backend, s_backend);
        return 0;
    }
    bool quick = opts->max_runs == opts->min_runs;
    int runs = quick ? opts->min_runs : S_CHILD_RUNS;
    int rc = 0;
    for (size_t i = 0; i < nbatches; i++) {
        const int64_t B = batches[i];
        char what[64];
        snprintf(what, sizeof what, "%s-1x1-b%lld", s_backend, (long long)B);
        double u = s_child_case(1, B, false, false, runs, opts->warmup, what);
        double t = s_torch_case("gpu", B, runs, i == 0);
        if (isnan(u)) {
            rc = 1;
            continue;
        }
        char peer[64];
        snprintf(peer, sizeof peer, "torch-%s-gpu", s_torch_version);
        if (isnan(t)) { /* no torch with CUDA: troupe's figure alone */
            printf("bench=train case=%s bytes=%lld troupe_us=%.3f peer=none samples_per_s=%.0f "
                   "global_batch=%lld%s\n",
                   what, (long long)(S_BYTES_PER_SAMPLE * B), u * (double)B, 1e6 / u, (long long)B,
                   s_child_launches);
            continue;
        }
        troupe_bench_print_case("train", what, S_BYTES_PER_SAMPLE * B, u * (double)B, peer, t,
                                "troupe_samples_s=%.0f peer_samples_s=%.0f global_batch=%lld%s",
                                1e6 / u, 1e6 * (double)B / t, (long long)B, s_child_launches);
        fflush(stdout);
    }
    if (S_HAVE_MPIEXEC && !cnn) {
        char what[64];
        snprintf(what, sizeof what, "%s-2x1-shared", s_backend);
        double u = s_child_case(2, S_GLOBAL_BATCH, false, false, runs, opts->warmup, what);
        if (isnan(u))
            rc = 1;
        else
            printf("bench=train case=%s bytes=%lld troupe_us=%.3f peer=none samples_per_s=%.0f "
                   "global_batch=%d note=\"2 ranks share one device: correctness only\"\n",
                   what, (long long)(S_BYTES_PER_SAMPLE * S_GLOBAL_BATCH),
                   u * S_GLOBAL_BATCH, 1e6 / u, S_GLOBAL_BATCH);
    }
    return rc;
}

/* "2,4,8,16" -> ranks[]; false on a malformed list (each 1..S_MAX_RANKS, at most S_MEDIAN_MAX). */
static bool s_parse_ranks(const char *text, int *ranks, int *n)
{
    *n = 0;
    const char *p = text;
    while (*p) {
        char *end = NULL;
        long r = strtol(p, &end, 10);
        if (end == p || r < 1 || r > S_MAX_RANKS || *n >= S_MEDIAN_MAX ||
            (*end != ',' && *end != '\0'))
            return false;
        ranks[(*n)++] = (int)r;
        p = *end == ',' ? end + 1 : end;
    }
    return *n > 0;
}

/* --model cnn: 1x1-proc and 2x1 child jobs and the torch peer's two modes, in paired rounds
 * (the header's output). */
static int s_cnn_cases(const troupe_bench_opts_t *opts)
{
    bool quick = opts->max_runs == opts->min_runs;
    int runs = quick ? opts->min_runs : S_CHILD_RUNS, rounds = quick ? 1 : S_ROUNDS;
    double u1[S_ROUNDS], u2[S_ROUNDS], eff[S_ROUNDS], t1[S_ROUNDS], td[S_ROUNDS];
    double t1m[S_ROUNDS], tdm[S_ROUNDS]; /* the peer with S_CNN_PEER_ACCUM micro-steps */
    double u1m[S_ROUNDS], u2m[S_ROUNDS]; /* troupe with S_CNN_MICRO_BATCH samples a micro-step */
    const bool other_form = s_grad_accum == 1;
    for (int k = 0; k < rounds; k++) {
        u1[k] = s_child_case(1, S_GLOBAL_BATCH, false, false, runs, opts->warmup, "1x1-proc");
        u2[k] = S_HAVE_MPIEXEC
                    ? s_child_case(2, S_GLOBAL_BATCH, false, false, runs, opts->warmup, "2x1")
                    : NAN;
        eff[k] = u1[k] / (2.0 * u2[k]);
        u1m[k] = u2m[k] = NAN;
        if (other_form) {
            s_grad_accum = S_GLOBAL_BATCH / S_CNN_MICRO_BATCH;
            u1m[k] = s_child_case(1, S_GLOBAL_BATCH, false, false, runs, opts->warmup, "1x1-proc");
            s_grad_accum = S_GLOBAL_BATCH / (2 * S_CNN_MICRO_BATCH);
            u2m[k] = S_HAVE_MPIEXEC
                         ? s_child_case(2, S_GLOBAL_BATCH, false, false, runs, opts->warmup, "2x1")
                         : NAN;
            s_grad_accum = 1;
        }
        t1[k] = s_torch_case("1thread", S_GLOBAL_BATCH, runs, k == 0);
        td[k] = s_torch_case("ddp", S_GLOBAL_BATCH, runs, false);
        t1m[k] = tdm[k] = NAN;
        if (other_form) {
            s_torch_accum = S_CNN_PEER_ACCUM;
            t1m[k] = s_torch_case("1thread", S_GLOBAL_BATCH, runs, false);
            tdm[k] = s_torch_case("ddp", S_GLOBAL_BATCH, runs, false);
            s_torch_accum = 0;
        }
    }
    const double us1 = s_median(u1, rounds), us2 = s_median(u2, rounds);
    if (isnan(us1))
        return troupe_bench_fail_status(S_PROG, "the 1x1-proc child", TROUPE_INTERNAL);
    if (!isnan(us2))
        troupe_bench_print_case("train", "2x1", S_BYTES_PER_SAMPLE, us2, "1x1-proc", us1,
                                "samples_per_s=%.0f global_batch=%d rounds=%d", 1e6 / us2,
                                S_GLOBAL_BATCH, rounds);
    double tus[2] = {us1, us2};
    const double um[2] = {s_median(u1m, rounds), s_median(u2m, rounds)};
    int accum[2] = {s_grad_accum, s_grad_accum};
    for (int i = 0; i < 2; i++) /* troupe at its best too: the faster of its two forms */
        if (!isnan(um[i]) && (isnan(tus[i]) || um[i] < tus[i])) {
            tus[i] = um[i];
            accum[i] = S_GLOBAL_BATCH / ((i + 1) * S_CNN_MICRO_BATCH);
        }
    double peer_us[2] = {s_median(t1, rounds), s_median(td, rounds)};
    const double peer_m[2] = {s_median(t1m, rounds), s_median(tdm, rounds)};
    int peer_accum[2] = {s_grad_accum, s_grad_accum};
    for (int i = 0; i < 2; i++) /* the peer at its best: the faster of its two forms */
        if (!isnan(peer_m[i]) && (isnan(peer_us[i]) || peer_m[i] < peer_us[i])) {
            peer_us[i] = peer_m[i];
            peer_accum[i] = S_CNN_PEER_ACCUM;
        }
    for (int i = 0; i < 2; i++) {
        if (isnan(tus[i]) || isnan(peer_us[i]))
            continue;
        char peer[64];
        snprintf(peer, sizeof peer, i == 0 ? "torch-%s-1thread" : "torch-%s-ddp-gloo-2x64",
                 s_torch_version);
        troupe_bench_print_case("train", i == 0 ? "1x1-proc" : "2x1",
                                S_BYTES_PER_SAMPLE * S_GLOBAL_BATCH, tus[i] * S_GLOBAL_BATCH, peer,
                                peer_us[i],
                                "troupe_samples_s=%.0f peer_samples_s=%.0f global_batch=%d "
                                "grad_accum=%d peer_grad_accum=%d rounds=%d",
                                1e6 / tus[i], 1e6 * S_GLOBAL_BATCH / peer_us[i], S_GLOBAL_BATCH,
                                accum[i], peer_accum[i], rounds);
    }
    double lo = eff[0], hi = eff[0];
    for (int k = 1; k < rounds; k++) {
        lo = eff[k] < lo ? eff[k] : lo;
        hi = eff[k] > hi ? eff[k] : hi;
    }
    printf("efficiency=%.3f rounds=%d efficiency_min=%.3f efficiency_max=%.3f\n",
           s_median(eff, rounds), rounds, lo, hi);
    return S_HAVE_MPIEXEC && isnan(us2) ? 1 : 0;
}

int main(int argc, char **argv)
{
    /* --child and --batch B are ours; the rest are bench_util's options */
    bool child = false, trace_only = false;
    int64_t batch = S_GLOBAL_BATCH;
    int scaling[S_MEDIAN_MAX], nscaling = 0;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && strcmp(argv[i], "--child") == 0) {
            child = true;
        } else if (i > 0 && strcmp(argv[i], "--backend") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0') {
                fprintf(stderr, "%s: --backend needs a backend name (cpu, sync, cuda)\n", S_PROG);
                return 2;
            }
            s_backend = argv[++i];
        } else if (i > 0 && strcmp(argv[i], "--optimizer") == 0) {
            if (i + 1 >= argc || troupe_optimizer_parse(argv[i + 1], &s_opt_kind) != TROUPE_OK) {
                fprintf(stderr, "%s: --optimizer needs sgd or adamw\n", S_PROG);
                return 2;
            }
            i++;
        } else if (i > 0 && strcmp(argv[i], "--scaling") == 0) {
            if (i + 1 >= argc || !s_parse_ranks(argv[i + 1], scaling, &nscaling)) {
                fprintf(stderr, "%s: --scaling needs a list of rank counts from 1 to %d, such as "
                                "2,4,8,16\n",
                        S_PROG, S_MAX_RANKS);
                return 2;
            }
            i++;
        } else if (i > 0 && strcmp(argv[i], "--grad-accum") == 0) {
            char *end = NULL;
            long k = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || k < 1 ||
                k > TROUPE_DP_MAX_GRAD_ACCUM || S_GLOBAL_BATCH % (2 * k) != 0) {
                fprintf(stderr, "%s: --grad-accum needs K from 1 to %d dividing %d / 2\n", S_PROG,
                        TROUPE_DP_MAX_GRAD_ACCUM, S_GLOBAL_BATCH);
                return 2;
            }
            s_grad_accum = (int)k;
            i++;
        } else if (i > 0 && strcmp(argv[i], "--model") == 0) {
            if (i + 1 >= argc || fmnist_model_parse(argv[i + 1], &s_model) != TROUPE_OK) {
                fprintf(stderr, "%s: --model needs mlp or cnn\n", S_PROG);
                return 2;
            }
            i++;
        } else if (i > 0 && strcmp(argv[i], "--feed") == 0) {
            if (i + 1 >= argc || fmnist_feed_parse(argv[i + 1], &s_feed) != TROUPE_OK) {
                fprintf(stderr, "%s: --feed needs auto, fed or indexed\n", S_PROG);
                return 2;
            }
            i++;
        } else if (i > 0 && strcmp(argv[i], "--bf16") == 0) {
            s_bf16 = true;
        } else if (i > 0 && strcmp(argv[i], "--overlap") == 0) {
            s_overlap = true;
        } else if (i > 0 && strcmp(argv[i], "--unfused") == 0) {
            s_unfused = true;
            troupe_config_set_dp_fused_update(false);
        } else if (i > 0 && strcmp(argv[i], "--streams") == 0) {
            char *end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (end == NULL || *end != '\0' || v < 1 || v > 64) {
                fprintf(stderr, "%s: --streams needs a stream count from 1 to 64\n", S_PROG);
                return 2;
            }
            s_child_streams = (int)v;
            i++;
        } else if (i > 0 && strcmp(argv[i], "--trace-overhead") == 0) {
            trace_only = true;
        } else if (i > 0 && strcmp(argv[i], "--trace") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: --trace needs a file prefix\n", S_PROG);
                return 2;
            }
            s_trace_prefix = argv[++i];
        } else if (i > 0 && strcmp(argv[i], "--batch") == 0) {
            char *end = NULL;
            batch = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : 0;
            if (end == NULL || *end != '\0' || batch < 2 || batch > 65536) {
                fprintf(stderr, "%s: --batch needs a global minibatch from 2 to 65536\n", S_PROG);
                return 2;
            }
            i++;
        } else {
            argv[n++] = argv[i];
        }
    }
    argc = n;
    argv[argc] = NULL;
    troupe_bench_opts_t opts;
    troupe_bench_opts_default(&opts);
    int pr = troupe_bench_parse_args(
        argc, argv,
        "data-parallel MLP training throughput: 1x1, 1x2, 2x1, "
        "2x1-weak, 2x1-nocomm, 2x1-overlap, 2x1-unfused, "
        "1x1-trace, 2x1-trace (ranks x "
        "streams); --trace-overhead: only 1x1-proc and 2x1 with "
        "TROUPE_TRACE off and on; --scaling R1,R2,..: weak scaling "
        "(128 per rank) against as many independent processes; "
        "--backend cuda: batches 128, 256, 1024, 8192 on GPU 0 (--model cnn: 128, 1024) against "
        "PyTorch on it; --feed auto|fed|indexed: the model's "
        "minibatch form (examples/fmnist/mlp.h; auto: fed on a "
        "backend with graphs, cuda); --optimizer sgd|adamw: every "
        "case's and the torch peer's (sgd: lr 0.05, momentum 0.9; "
        "adamw: torch.optim.AdamW's defaults); --grad-accum K: K micro-steps per "
        "step of the same global batch on both sides (troupe's grad_accum; the peer "
        "sums K backward passes); --model mlp|cnn: the "
        "trainer's MLP or its convnet (cnn: 1x1-proc and 2x1 against "
        "PyTorch only, SGD)",
        &opts);
    if (pr != 0)
        return pr > 0 ? 0 : 2;
    if (child) {
        /* only --trace traces a child (an exported TROUPE_TRACE would trace the untraced cases) */
        if (troupe_config_set_trace_prefix(s_trace_prefix) != TROUPE_OK)
            return troupe_bench_fail_status(S_PROG, "child: --trace", TROUPE_INVALID_ARGUMENT);
        troupe_status_t st = troupe_cluster_init(&argc, &argv);
        if (st != TROUPE_OK)
            return troupe_bench_fail_status(S_PROG, "child: cluster init", st);
        int rc = s_child(&opts, batch);
        st = troupe_cluster_finalize();
        return rc != 0           ? rc
               : st != TROUPE_OK ? troupe_bench_fail_status(S_PROG, "finalize", st)
                                 : 0;
    }

    troupe_bench_print_machine(TROUPE_BENCH_C_FLAGS);
    if (s_model == FMNIST_MODEL_CNN) {
        printf("job model=cnn-c32-c32-p2-c64-p2-fc128-10 optimizer=%s\n",
               troupe_optimizer_name(s_opt_kind));
        if (trace_only || nscaling > 0 || s_opt_kind != TROUPE_OPT_SGD) {
            fprintf(stderr,
                    "%s: --model cnn runs its cases with sgd only (not "
                    "--trace-overhead, --scaling or adamw)\n",
                    S_PROG);
            return 2;
        }
        if (strcmp(s_backend, "cpu") != 0 && strcmp(s_backend, "sync") != 0)
            return s_device_cases(&opts);
        return s_cnn_cases(&opts);
    }
    printf("job model=mlp-784-256-128-10 optimizer=%s\n", troupe_optimizer_name(s_opt_kind));
    if (trace_only)
        return s_trace_overhead(&opts);
    if (nscaling > 0)
        return s_scaling(&opts, scaling, nscaling);
    if (strcmp(s_backend, "cpu") != 0 && strcmp(s_backend, "sync") != 0)
        return s_device_cases(&opts);
    fmnist_dataset_t ds;
    s_synthetic(&ds, S_GLOBAL_BATCH);
    if (!ds.pixels || !ds.labels)
        return troupe_bench_fail_status(
            S_PROG, "synthetic data", troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "out of memory"));

    /* 1x1, 1x2 and 1x2-unfused, timed together */
    layout_t l11, l12, l12u;
    troupe_status_t st = s_layout_new(1, S_GLOBAL_BATCH, &ds, &l11);
    if (st != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "building the 1x1 layout", st);
    st = s_layout_new(2, S_GLOBAL_BATCH, &ds, &l12);
    if (st != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "building the 1x2 layout", st);
    s_unfused = true;
    troupe_config_set_dp_fused_update(false);
    st = s_layout_new(2, S_GLOBAL_BATCH, &ds, &l12u);
    troupe_config_set_dp_fused_update(true);
    s_unfused = false;
    if (st != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "building the 1x2-unfused layout", st);
    troupe_bench_side_t sides[3] = {{s_run, &l11}, {s_run, &l12}, {s_run, &l12u}};
    troupe_bench_stats_t stats[3];
    troupe_bench_opts_t o = opts;
    o.warmup = 0; /* s_layout_new warmed up */
    if (troupe_bench_time_sides(sides, 3, &o, stats) != 0 || l11.failed || l12.failed ||
        l12u.failed)
        return troupe_bench_fail_status(S_PROG, "training", TROUPE_INTERNAL);
    const double us12u = stats[2].median_us / (double)l12u.samples_per_run;
    enum { C11, C12, C11P, C21, C21W, C21B, C21N, C21O, C21U, NCASES };
    static const char *const names[NCASES] = {
        "1x1",      "1x2",        "1x1-proc",    "2x1",        "2x1-weak",
        "2x1-bf16", "2x1-nocomm", "2x1-overlap", "2x1-unfused"};
    const int64_t batches[NCASES] = {S_GLOBAL_BATCH, S_GLOBAL_BATCH,     S_GLOBAL_BATCH,
                                     S_GLOBAL_BATCH, 2 * S_GLOBAL_BATCH, S_GLOBAL_BATCH,
                                     S_GLOBAL_BATCH, S_GLOBAL_BATCH,     S_GLOBAL_BATCH};
    double us[NCASES] = {stats[0].median_us / (double)l11.samples_per_run,
                         stats[1].median_us / (double)l12.samples_per_run,
                         NAN,
                         NAN,
                         NAN,
                         NAN,
                         NAN,
                         NAN,
                         NAN};
    double cover[S_ROUNDS]; /* 2x1-overlap's median compute_overlap_us per round */
    double eff_1x2 = us[C11] / (2.0 * us[C12]), eff_1x2u = us[C11] / (2.0 * us12u);
    if ((st = s_layout_done(&l12)) != TROUPE_OK || (st = s_layout_done(&l12u)) != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "checking the training", st);

    /* paired rounds: 1x1 again, then the child jobs one after the other */
    bool quick = opts.max_runs == opts.min_runs;
    int runs = quick ? opts.min_runs : S_CHILD_RUNS, rounds = quick ? 1 : S_ROUNDS;
    double r11[S_ROUNDS + 1], rus[NCASES][S_ROUNDS], eff[NCASES][S_ROUNDS];
    double torch1[S_ROUNDS], torchd[S_ROUNDS]; /* the torch peer's step times, us */
    double tv[S_ROUNDS][TCASES];               /* the traced cases and their pairs */
    int n11 = 0;
    r11[n11++] = us[C11];
    troupe_bench_opts_t o11 = opts;
    o11.warmup = 1;
    o11.min_runs = o11.max_runs = runs;
    o11.min_total_s = 0.0;
    for (int k = 0; k < rounds; k++) {
        troupe_bench_stats_t s11;
        if (troupe_bench_time(s_run, &l11, &o11, &s11) != 0 || l11.failed)
            return troupe_bench_fail_status(S_PROG, "training 1x1", TROUPE_INTERNAL);
        double u11 = s11.median_us / (double)l11.samples_per_run;
        r11[n11++] = u11;
        /* 1x1 in a fresh process of its own, as the 2x1 children and the torch peer run, and
         * 2x1; each beside its traced run */
        s_trace_round(k, runs, opts.warmup, tv[k]);
        rus[C11P][k] = tv[k][T11];
        rus[C21][k] = tv[k][T21];
        if (!isnan(rus[C11P][k]))
            u11 = rus[C11P][k];
#if S_HAVE_MPIEXEC
        rus[C21W][k] =
            s_child_case(2, 2 * S_GLOBAL_BATCH, false, false, runs, opts.warmup, names[C21W]);
        rus[C21B][k] = s_child_case(2, S_GLOBAL_BATCH, true, false, runs, opts.warmup, names[C21B]);
        s_overlap = true;
        rus[C21O][k] = s_child_case(2, S_GLOBAL_BATCH, false, false, runs, opts.warmup, names[C21O]);
        s_overlap = false;
        cover[k] = isnan(rus[C21O][k]) ? NAN : s_child_cover_us;
        s_unfused = true;
        rus[C21U][k] = s_child_case(2, S_GLOBAL_BATCH, false, false, runs, opts.warmup, names[C21U]);
        s_unfused = false;
#else
        rus[C21W][k] = rus[C21B][k] = rus[C21O][k] = rus[C21U][k] = cover[k] = NAN;
#endif
        /* each of the two processes trains on half the 2x1 global minibatch */
        rus[C21N][k] = s_nocomm_case(2, S_GLOBAL_BATCH / 2, runs, opts.warmup, names[C21N]);
        for (int c = C21; c < NCASES; c++)
            eff[c][k] = u11 / (2.0 * rus[c][k]); /* throughput(2) / (2 throughput(1)) */
        torch1[k] = s_torch_case("1thread", S_GLOBAL_BATCH, runs, k == 0);
        torchd[k] = s_torch_case("ddp", S_GLOBAL_BATCH, runs, false);
    }
    us[C11] = s_median(r11, n11);
    for (int c = C11P; c < NCASES; c++)
        us[c] = s_median(rus[c], rounds);
    if ((st = s_layout_done(&l11)) != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "checking the training", st);

    for (int c = 0; c < NCASES; c++) {
        if (isnan(us[c]) || c == C21O || c == C21U)
            continue;
        troupe_bench_print_case("train", names[c], S_BYTES_PER_SAMPLE, us[c], "1x1", us[C11],
                                "samples_per_s=%.0f global_batch=%lld", 1e6 / us[c],
                                (long long)batches[c]);
    }
    /* 1x2-unfused against 1x2 (timed together): the pass across the streams' gain */
    troupe_bench_print_case("train", "1x2-unfused", S_BYTES_PER_SAMPLE, us12u, names[C12],
                            us[C12],
                            "samples_per_s=%.0f peer_samples_per_s=%.0f peer_fused_streams=1 "
                            "fused_streams=0 global_batch=%d",
                            1e6 / us12u, 1e6 / us[C12], S_GLOBAL_BATCH);
    /* 2x1-overlap against 2x1 (the same rounds) */
    if (!isnan(us[C21O]) && !isnan(us[C21]))
        troupe_bench_print_case("train", names[C21O], S_BYTES_PER_SAMPLE, us[C21O], names[C21],
                                us[C21],
                                "samples_per_s=%.0f peer_samples_per_s=%.0f "
                                "compute_overlap_us=%.1f global_batch=%d rounds=%d",
                                1e6 / us[C21O], 1e6 / us[C21], s_median(cover, rounds),
                                S_GLOBAL_BATCH, rounds);
    /* 2x1-unfused against 2x1: the fused update's gain (ratio above 1: fused is faster) */
    if (!isnan(us[C21U]) && !isnan(us[C21]))
        troupe_bench_print_case("train", names[C21U], S_BYTES_PER_SAMPLE, us[C21U], names[C21],
                                us[C21],
                                "samples_per_s=%.0f peer_samples_per_s=%.0f peer_fused=1 "
                                "fused=0 global_batch=%d rounds=%d",
                                1e6 / us[C21U], 1e6 / us[C21], S_GLOBAL_BATCH, rounds);
    s_print_trace(T11T, (const double(*)[TCASES])tv, rounds);
    s_print_trace(T21T, (const double(*)[TCASES])tv, rounds);
    s_print_trace_cost((const double(*)[TCASES])tv, rounds, runs, opts.warmup);
    /* against the torch peer, per step of the global minibatch 128 */
    const double t1 = s_median(torch1, rounds), td = s_median(torchd, rounds);
    const bool proc = !isnan(us[C11P]);
    const char *const tcases[2] = {names[proc ? C11P : C11], names[C21]};
    const double tus[2] = {us[proc ? C11P : C11], us[C21]}, peer_us[2] = {t1, td};
    for (int i = 0; i < 2; i++) {
        if (isnan(tus[i]) || isnan(peer_us[i]))
            continue;
        char peer[64];
        snprintf(peer, sizeof peer, i == 0 ? "torch-%s-1thread" : "torch-%s-ddp-gloo-2x64",
                 s_torch_version);
        const double step_us = tus[i] * S_GLOBAL_BATCH;
        troupe_bench_print_case(
            "train", tcases[i], S_BYTES_PER_SAMPLE * S_GLOBAL_BATCH, step_us, peer, peer_us[i],
            "troupe_samples_s=%.0f peer_samples_s=%.0f global_batch=%d "
            "rounds=%d",
            1e6 / tus[i], 1e6 * S_GLOBAL_BATCH / peer_us[i], S_GLOBAL_BATCH, rounds);
    }
    /* throughput(2) / (2 throughput(1)) = us(1) / (2 us(2)), the median of the rounds' */
    double lo = eff[C21][0], hi = eff[C21][0];
    for (int k = 1; k < rounds; k++) {
        lo = eff[C21][k] < lo ? eff[C21][k] : lo;
        hi = eff[C21][k] > hi ? eff[C21][k] : hi;
    }
    printf("efficiency=%.3f efficiency_1x2=%.3f efficiency_weak=%.3f efficiency_nocomm=%.3f "
           "rounds=%d efficiency_min=%.3f efficiency_max=%.3f efficiency_bf16=%.3f "
           "efficiency_unfused=%.3f efficiency_1x2_unfused=%.3f\n",
           s_median(eff[C21], rounds), eff_1x2, s_median(eff[C21W], rounds),
           s_median(eff[C21N], rounds), rounds, lo, hi, s_median(eff[C21B], rounds),
           s_median(eff[C21U], rounds), eff_1x2u);
    fmnist_dataset_free(&ds);
#if S_HAVE_MPIEXEC
    /* MPI was built: a 2x1 case that did not run is a failure */
    return isnan(us[C21]) || isnan(us[C21W]) || isnan(us[C21B]) || isnan(us[C21N]) ||
                   isnan(us[C21O]) || isnan(us[C21U])
               ? 1
               : 0;
#else
    return isnan(us[C21N]) ? 1 : 0;
#endif
}
