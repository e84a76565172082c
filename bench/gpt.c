/* bench_gpt — GPT-2 training (examples/gpt, `gpt train`, 1 rank x 1 stream, cpu backend)
 * against PyTorch (bench/peers/torch_gpt.py, one thread) on the same llm.c model file, token
 * shard, batches and AdamW, interleaved in rounds:
 *
 *   bench=gpt case=<case> bytes=<parameter bytes> troupe_us=<us per step> peer=torch-<v>-1thread
 *     peer_us=<us per step> ratio=<troupe_us/peer_us> troupe_tokens_per_s=<n>
 *     peer_tokens_per_s=<n> troupe_gflops=<n> peer_gflops=<n> params=<N> loss_rel_diff=<max>
 *
 * Cases (issue 31): "default" L=4 NH=4 C=128 T=64 B=4, "small" L=6 NH=6 C=384 T=128 B=8, one
 * rank of one stream against PyTorch with one thread; and on two ranks of one stream each
 * (mpiexec), every rank keeping the case's batch B (the global batch 2B), so they run the code
 * the one-rank case compiled:
 *   "default-2ranks": against PyTorch DDP over gloo, 2 processes x 1 thread, the same global
 *     batch and split (peer=torch-<v>-ddp-gloo-2x1; the losses compared as above);
 *   "small-e2": against troupe itself on one rank at batch B (peer=troupe-1x1), and
 *     e2=<peer_us/troupe_us>, the weak-scaling efficiency E(2) (two ranks' tokens per second over
 *     twice one rank's).
 * And "small-bf16" (issue 34): the small case on one rank with `--precision bf16` (bfloat16
 * matrix products, fp32 sums and state) against troupe itself in fp32 on the same batches
 * (peer=troupe-fp32), and bf16_speedup=<peer_us/troupe_us> (tokens per second, bf16 over
 * fp32); the losses may differ by up to relative 0.02 (gpt_train_precision's bound).
 * A side's step time is the mean over the steps of one run (what `gpt train` reports as
 * tokens_per_s; the peer likewise), the line the median over the rounds. GFLOP/s by llm.c's
 * accounting: 6 N + 6 L C T FLOPs per token, N the parameters (padded vocabulary included);
 * troupe_peak_frac= is troupe's GFLOP/s over the ranks' cores' fp32 peak as the machine lines'
 * `peak fp32_gflops=` measured it (bench_util.h, troupe_bench_fp32_peak_gflops).
 * The losses of both sides are compared step by step: beyond relative 1e-4 the bench says so
 * on stderr and exits 1. `gpt train` compiles its routines before the first step (not timed;
 * the code cache, TROUPE_CACHE_DIR, keeps them for the later rounds).
 *
 * With --overlap, instead of the peer: the case on 2 ranks x 1 stream (mpiexec; B rows per
 * rank), gradient overlap off and on (TROUPE_DP_OVERLAP, DDP's buckets: TROUPE_DP_BUCKET_BYTES
 * as set) in alternating order each round, so both sides see the machine's drift alike:
 *
 *   bench=gpt_overlap case=<case> bytes=<parameter bytes> troupe_us=<us per step, on>
 *     peer=overlap-off peer_us=<us per step, off> ratio=<on/off> segments=<n> update=<kind>
 *     compute_overlap_us=<median over rank 0's logged steps>
 *
 * The losses of the two sides must agree within relative 1e-5 (they differ only in the order
 * of sums beyond two ranks; with two they are equal). Case "30m" (L=10 NH=8 C=512 T=128 B=4,
 * 31.6 M parameters: issue 33's 30M-parameter config for the overlap) runs only with --overlap.
 *
 * Case "small-zero" (issue 33, ZeRO-1 vs unsharded): "small" on 2 ranks x 1 stream, the update
 * fused into the allreduce with the optimizer state sharded (TROUPE_DP_FUSED_UPDATE=auto:
 * parallel/dp_zero.c) against the optimizer routine after the allreduce on every rank, the state
 * whole (TROUPE_DP_FUSED_UPDATE=off), alternating which goes first each round:
 *
 *   bench=gpt_zero case=small-zero bytes=<parameter bytes> troupe_us=<us per step, sharded>
 *     peer=unsharded peer_us=<us per step, unsharded> ratio=<sharded/unsharded> update=<kind>
 *     state_bytes=<per rank, sharded> peer_state_bytes=<per rank, unsharded>
 *     path=<shm|reduce-scatter|mpi> exchange_us=<n> optimizer_us=<n> peer_exchange_us=<n>
 *     peer_optimizer_us=<n>
 *
 * exchange_us and optimizer_us: medians of the step breakdown's (docs/parallel.md, Step
 * breakdown; the sharded side's update is inside its exchange) over the logged steps from 2 of
 * the side's last round: the part of the step that ZeRO-1 changes, less noisy than the step.
 *
 * The losses must be equal (the fused update does the routine's operations in the same order:
 * docs/parallel.md); TROUPE_COLL_SHM=0 in the environment measures the path across nodes (the
 * reduce-scatter).
 *
 * usage: bench_gpt [--case default|small|default-2ranks|small-e2|small-zero|30m|small-bf16|
 *                  all] [--steps N] [--rounds R] [--overlap]
 * The text: Debian's fortunes (`gpt data`), else generated words. The peer's interpreter:
 * $TROUPE_BENCH_PYTHON, else /usr/bin/python3 (Debian's torch); OPENBLAS_CORETYPE is unset for
 * it. Without torch the lines say peer=none.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_util.h"
#include "llmc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef GPT_BENCH_GPT
#define GPT_BENCH_GPT "gpt"
#endif
#ifndef GPT_BENCH_TORCH_SCRIPT
#define GPT_BENCH_TORCH_SCRIPT "bench/peers/torch_gpt.py"
#endif

#ifndef GPT_BENCH_MPIEXEC
#define GPT_BENCH_MPIEXEC ""
#endif
#ifndef GPT_BENCH_MPI_ARGS
#define GPT_BENCH_MPI_ARGS ""
#endif

#define S_MAX_STEPS 1000
#define S_MAX_ROUNDS 15

typedef enum gmode {
    S_VS_TORCH = 0, /* 1 rank against PyTorch, 1 thread */
    S_VS_DDP,       /* 2 ranks against PyTorch DDP over gloo, 2 x 1 */
    S_E2,           /* 2 ranks against 1 rank */
    S_ZERO,         /* 2 ranks, ZeRO-1 (sharded state) against the unsharded update */
    S_OVERLAP,      /* only with --overlap (a size for the overlap measurement) */
    S_BF16          /* 1 rank, --precision bf16 against fp32 */
} gmode_t;

typedef struct gcase {
    const char *name;
    int L, NH, C, T, B; /* B: per rank */
    gmode_t mode;
} gcase_t;

static const gcase_t s_cases[] = {{"default", 4, 4, 128, 64, 4, S_VS_TORCH},
                                  {"small", 6, 6, 384, 128, 8, S_VS_TORCH},
                                  {"default-2ranks", 4, 4, 128, 64, 4, S_VS_DDP},
                                  {"small-e2", 6, 6, 384, 128, 8, S_E2},
                                  {"small-zero", 6, 6, 384, 128, 8, S_ZERO},
                                  {"30m", 10, 8, 512, 128, 4, S_OVERLAP},
                                  {"small-bf16", 6, 6, 384, 128, 8, S_BF16}};

/* The optimizer_state_bytes= of the last s_run that printed it (gpt train's start line). */
static double s_state_bytes = NAN;

/* Runs `cmd` (sh -c), reading its `step=K loss=X` lines into losses[0..steps) and the number
 * after `key` on its last line that has one into *value. 0 on success; 1 when the command
 * failed or printed too few steps (its output goes to stderr). */
static int s_run(const char *cmd, int steps, double *losses, const char *key, double *value,
                 char *peer, size_t peer_cap)
{
    FILE *p = popen(cmd, "r");
    if (!p) {
        fprintf(stderr, "bench_gpt: cannot run: %s\n", cmd);
        return 1;
    }
    char line[1024];
    int got = 0;
    *value = NAN;
    while (fgets(line, sizeof line, p)) {
        long long k = 0;
        double l = 0;
        if (sscanf(line, "step=%lld loss=%lf", &k, &l) == 2 && k >= 0 && k < steps) {
            losses[k] = l;
            got++;
        }
        const char *at = strstr(line, key);
        if (at)
            *value = strtod(at + strlen(key), NULL);
        at = strstr(line, "optimizer_state_bytes=");
        if (at)
            s_state_bytes = strtod(at + strlen("optimizer_state_bytes="), NULL);
        at = strstr(line, "peer=");
        if (peer && at && sscanf(at, "peer=%63s", peer) != 1)
            snprintf(peer, peer_cap, "torch");
    }
    int rc = pclose(p);
    if (rc != 0 || got != steps || !isfinite(*value)) {
        fprintf(stderr, "bench_gpt: '%s' failed (status %d, %d of %d steps)\n", cmd, rc, got,
                steps);
        return 1;
    }
    return 0;
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double s_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, s_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A text file of pseudo-random words (when the fortunes are not installed). */
static int s_write_words(const char *path)
{
    static const char *const words[] = {"the", "of", "a", "troupe", "plays", "in", "town",
                                        "tonight", "and", "every", "night", "after", "rain"};
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    uint64_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        fprintf(f, "%s%c", words[(s >> 33) % 13], (s >> 20) % 11 == 0 ? '\n' : ' ');
    }
    return fclose(f) != 0;
}

/* The value after `key` on the first line of `path` that has it and a step number >= `from`
 * after "dp step " (the step breakdown), as a median over those lines; or the text after
 * `key` up to a space into text[cap] (text != NULL). NAN when none. */
static double s_log_median(const char *path, const char *key, long long from, char *text,
                           size_t cap)
{
    FILE *f = fopen(path, "r");
    double v[S_MAX_STEPS];
    int n = 0;
    char line[4096];
    while (f && fgets(line, sizeof line, f) && n < S_MAX_STEPS) {
        const char *at = strstr(line, key), *st = strstr(line, "dp step ");
        if (!at)
            continue;
        if (text) {
            sscanf(at + strlen(key), "%63[^ ,;)\n]", text);
            (void)cap;
            break;
        }
        if (st && strtoll(st + 8, NULL, 10) >= from)
            v[n++] = strtod(at + strlen(key), NULL);
    }
    if (f)
        fclose(f);
    return text || n == 0 ? NAN : s_median(v, n);
}

/* --overlap: the case on 2 ranks x 1 stream with overlap off and on, alternating; case
 * small-zero (zero): the update sharded (ZeRO-1) and not, alternating. */
static int s_case_overlap(const gcase_t *c, const char *dir, int steps, int rounds)
{
    bool zero = c->mode == S_ZERO;
    const char *what = zero ? "case small-zero" : "--overlap";
    if (!GPT_BENCH_MPIEXEC[0]) {
        fprintf(stderr, "bench_gpt: %s needs MPI (built without it)\n", what);
        return 1;
    }
    char cmd[4096], model[1024], data[1024], log[1100];
    snprintf(model, sizeof model, "%s/%s.bin", dir, c->name);
    snprintf(data, sizeof data, "%s/fortunes_train.bin", dir);
    snprintf(log, sizeof log, "%s/overlap.log", dir);
    snprintf(cmd, sizeof cmd,
             "'%s' init --layers %d --heads %d --channels %d --max-seq %d --vocab 256 --seed 1 "
             "--out '%s' >/dev/null",
             GPT_BENCH_GPT, c->L, c->NH, c->C, c->T, model);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench_gpt: %s failed\n", cmd);
        return 1;
    }
    gpt_llmc_config_t cfg = {.max_seq = c->T, .vocab = 256, .layers = c->L, .heads = c->NH,
                             .channels = c->C, .padded_vocab = 256};
    double n = (double)gpt_llmc_num_params(&cfg);
    double tokens = 2.0 * c->B * c->T; /* the global batch: B rows per rank */
    double us[2][S_MAX_ROUNDS], worst = 0, cover = NAN, bytes[2] = {NAN, NAN};
    double xu[2] = {NAN, NAN}, ou[2] = {NAN, NAN}; /* zero: exchange_us, optimizer_us */
    double *l[2] = {calloc((size_t)steps, sizeof(double)), calloc((size_t)steps, sizeof(double))};
    char segs[64] = "?", update[64] = "?", path[64] = "?";
    int st = l[0] && l[1] ? 0 : 1;
    for (int r = 0; r < rounds && st == 0; r++) {
        for (int k = 0; k < 2 && st == 0; k++) {
            int on = (r + k) % 2; /* alternate which side goes first */
            double tps = NAN;
            /* zero: "on" is the sharded side (the fused update's default), "off" the routine */
            snprintf(cmd, sizeof cmd,
                     "%s=%s TROUPE_LOG=debug:parallel%s TROUPE_LOG_FILE='%s' "
                     "'%s' -n 2 %s '%s' train --model '%s' --data '%s' --batch %d --seq %d "
                     "--steps %d --lr 1e-4 --streams 1 --backend cpu",
                     zero ? "TROUPE_DP_FUSED_UPDATE" : "TROUPE_DP_OVERLAP",
                     on ? (zero ? "auto" : "on") : "off", zero ? ",transport" : "", log,
                     GPT_BENCH_MPIEXEC, GPT_BENCH_MPI_ARGS, GPT_BENCH_GPT, model, data, 2 * c->B,
                     c->T, steps);
            s_state_bytes = NAN;
            st = s_run(cmd, steps, l[on], "tokens_per_s=", &tps, NULL, 0);
            if (st != 0)
                break;
            us[on][r] = tokens / tps * 1e6;
            bytes[on] = s_state_bytes;
            if (zero) {
                xu[on] = s_log_median(log, " exchange_us=", 2, NULL, 0);
                ou[on] = s_log_median(log, " optimizer_us=", 2, NULL, 0);
            }
            if (on && zero) {
                s_log_median(log, "dp: update ", 0, update, sizeof update);
                FILE *f = fopen(log, "r");
                char line[4096];
                snprintf(path, sizeof path, "mpi");
                while (f && fgets(line, sizeof line, f))
                    if (strstr(line, "its state private") != NULL) {
                        snprintf(path, sizeof path, "shm");
                        break;
                    } else if (strstr(line, "a reduce-scatter of the shards") != NULL) {
                        snprintf(path, sizeof path, "reduce-scatter");
                        break;
                    }
                if (f)
                    fclose(f);
            } else if (on) {
                s_log_median(log, "dp: overlap on (", 0, segs, sizeof segs);
                s_log_median(log, "dp: update ", 0, update, sizeof update);
                cover = s_log_median(log, " compute_overlap_us=", 2, NULL, 0);
            }
            unlink(log);
        }
        for (int k = 0; k < steps && st == 0; k++) {
            double d = fabs(l[1][k] - l[0][k]) / fabs(l[0][k]);
            worst = d > worst ? d : worst;
        }
    }
    if (st == 0 && (zero ? worst != 0.0 : worst > 1e-5)) {
        fprintf(stderr, "bench_gpt: case %s: the losses %s differ by up to %g relative (limit "
                        "%s)\n",
                c->name, zero ? "sharded and unsharded" : "with and without overlap", worst,
                zero ? "0: the same bits" : "1e-5");
        st = 1;
    }
    if (st == 0 && zero && strcmp(update, "fused") != 0) {
        fprintf(stderr, "bench_gpt: case %s: the sharded side's update is %s, not fused\n",
                c->name, update);
        st = 1;
    }
    if (st == 0 && zero) {
        double z_us = s_median(us[1], rounds), u_us = s_median(us[0], rounds);
        troupe_bench_print_case("gpt_zero", c->name, (int64_t)(4 * n), z_us, "unsharded", u_us,
                                "update=%s state_bytes=%.0f peer_state_bytes=%.0f path=%s "
                                "exchange_us=%.0f optimizer_us=%.0f peer_exchange_us=%.0f "
                                "peer_optimizer_us=%.0f params=%.0f ranks=2 streams=1 "
                                "loss_rel_diff=%.2g steps=%d rounds=%d",
                                update, bytes[1], bytes[0], path, xu[1], ou[1], xu[0], ou[0], n,
                                worst, steps, rounds);
    } else if (st == 0) {
        double on_us = s_median(us[1], rounds), off_us = s_median(us[0], rounds);
        troupe_bench_print_case("gpt_overlap", c->name, (int64_t)(4 * n), on_us, "overlap-off",
                                off_us,
                                "segments=%s update=%s compute_overlap_us=%.0f params=%.0f "
                                "ranks=2 streams=1 loss_rel_diff=%.2g steps=%d rounds=%d",
                                segs, update, cover, n, worst, steps, rounds);
    }
    unlink(model);
    free(l[0]);
    free(l[1]);
    return st;
}

static int s_case(const gcase_t *c, const char *dir, int steps, int rounds, const char *python)
{
    char cmd[4096], model[1024], data[1024];
    snprintf(model, sizeof model, "%s/%s.bin", dir, c->name);
    snprintf(data, sizeof data, "%s/fortunes_train.bin", dir);
    snprintf(cmd, sizeof cmd,
             "'%s' init --layers %d --heads %d --channels %d --max-seq %d --vocab 256 --seed 1 "
             "--out '%s' >/dev/null",
             GPT_BENCH_GPT, c->L, c->NH, c->C, c->T, model);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench_gpt: %s failed\n", cmd);
        return 1;
    }
    gpt_llmc_config_t cfg = {.max_seq = c->T, .vocab = 256, .layers = c->L, .heads = c->NH,
                             .channels = c->C, .padded_vocab = 256};
    double n = (double)gpt_llmc_num_params(&cfg);
    double flops_per_token = 6 * n + 6.0 * c->L * c->C * c->T;
    int ranks = c->mode == S_VS_TORCH || c->mode == S_BF16 ? 1 : 2;
    double tokens = (double)ranks * c->B * c->T; /* a step's, over every rank */
    char launch[1024] = "";
    if (ranks > 1) {
        if (!GPT_BENCH_MPIEXEC[0]) {
            printf("bench=gpt case=%s skipped: this build has no mpiexec\n", c->name);
            unlink(model);
            return 0;
        }
        snprintf(launch, sizeof launch, "'%s' -n 2 %s ", GPT_BENCH_MPIEXEC, GPT_BENCH_MPI_ARGS);
        /* compile once, in one process (each rank runs one rank's code at batch B): two ranks
         * compiling the gradient routine at once would take twice cc's memory */
        snprintf(cmd, sizeof cmd,
                 "TROUPE_LOG=warn '%s' train --model '%s' --data '%s' --batch %d --seq %d "
                 "--steps 0 --streams 1 --backend cpu >/dev/null",
                 GPT_BENCH_GPT, model, data, c->B, c->T);
        if (system(cmd) != 0) {
            fprintf(stderr, "bench_gpt: %s failed\n", cmd);
            unlink(model);
            return 1;
        }
    }
    double t_us[S_MAX_ROUNDS], p_us[S_MAX_ROUNDS], worst = 0;
    double *tl = calloc((size_t)steps, sizeof *tl), *pl = calloc((size_t)steps, sizeof *pl);
    char peer[64] = "none";
    int st = tl && pl ? 0 : 1, np = 0;
    for (int r = 0; r < rounds && st == 0; r++) {
        double tps = NAN;
        snprintf(cmd, sizeof cmd,
                 "TROUPE_LOG=warn %s'%s' train --model '%s' --data '%s' --batch %d --seq %d "
                 "--steps %d --lr 1e-4 --streams 1 --backend cpu%s",
                 launch, GPT_BENCH_GPT, model, data, ranks * c->B, c->T, steps,
                 c->mode == S_BF16 ? " --precision bf16" : "");
        st = s_run(cmd, steps, tl, "tokens_per_s=", &tps, NULL, 0);
        if (st != 0)
            break;
        t_us[r] = tokens / tps * 1e6;
        double us = NAN;
        if (c->mode == S_E2 || c->mode == S_BF16) {
            /* the peer is troupe on one rank at batch B: for E(2) the same rank alone (other
             * batches: no losses to compare), for bf16 the same batches in fp32 */
            bool e2 = c->mode == S_E2;
            snprintf(cmd, sizeof cmd,
                     "TROUPE_LOG=warn '%s' train --model '%s' --data '%s' --batch %d --seq %d "
                     "--steps %d --lr 1e-4 --streams 1 --backend cpu%s",
                     GPT_BENCH_GPT, model, data, c->B, c->T, steps,
                     e2 ? "" : " --precision fp32");
            if (s_run(cmd, steps, pl, "tokens_per_s=", &tps, NULL, 0) != 0) {
                st = 1;
                break;
            }
            p_us[np++] = (double)c->B * c->T / tps * 1e6;
            snprintf(peer, sizeof peer, e2 ? "troupe-1x1" : "troupe-fp32");
            for (int k = 0; k < steps && !e2; k++) {
                double d = fabs(tl[k] - pl[k]) / fabs(pl[k]);
                worst = d > worst ? d : worst;
            }
            continue;
        }
        if (!python)
            continue;
        snprintf(cmd, sizeof cmd,
                 "env -u OPENBLAS_CORETYPE '%s' '%s' --model '%s' --data '%s' --batch %d "
                 "--seq %d --steps %d --lr 1e-4 --threads 1 --ranks %d",
                 python, GPT_BENCH_TORCH_SCRIPT, model, data, ranks * c->B, c->T, steps, ranks);
        if (s_run(cmd, steps, pl, "peer_us=", &us, peer, sizeof peer) != 0) {
            st = 1;
            break;
        }
        p_us[np++] = us;
        for (int k = 0; k < steps; k++) {
            double d = fabs(tl[k] - pl[k]) / fabs(pl[k]);
            worst = d > worst ? d : worst;
        }
    }
    const double limit = c->mode == S_BF16 ? 0.02 : 1e-4; /* bf16: gpt_train_precision's */
    if (st == 0 && worst > limit) {
        fprintf(stderr, "bench_gpt: case %s: troupe's losses differ from %s's by up to %g "
                        "relative (limit %g)\n",
                c->name, c->mode == S_BF16 ? "fp32" : "PyTorch", worst, limit);
        st = 1;
    }
    if (st == 0) {
        double tu = s_median(t_us, rounds), pu = np ? s_median(p_us, np) : NAN;
        double ttps = tokens / tu * 1e6, ptps = tokens / pu * 1e6;
        if (c->mode == S_E2) /* the peer ran one rank's tokens */
            ptps = (double)c->B * c->T / pu * 1e6;
        char e2[64] = "";
        if (c->mode == S_E2)
            snprintf(e2, sizeof e2, " e2=%.3f", ttps / (2 * ptps));
        if (c->mode == S_BF16)
            snprintf(e2, sizeof e2, " bf16_speedup=%.3f", ttps / ptps);
        troupe_bench_print_case("gpt", c->name, (int64_t)(4 * n), tu, np ? peer : "none", pu,
                                "troupe_tokens_per_s=%.0f peer_tokens_per_s=%.0f "
                                "troupe_gflops=%.2f peer_gflops=%.2f params=%.0f "
                                "loss_rel_diff=%.2g ranks=%d steps=%d rounds=%d%s "
                                "troupe_peak_frac=%.2f",
                                ttps, ptps, ttps * flops_per_token / 1e9,
                                ptps * flops_per_token / 1e9, n, worst, ranks, steps, rounds,
                                e2,
                                ttps * flops_per_token / 1e9 /
                                    (ranks * troupe_bench_fp32_peak_gflops(NULL)));
    }
    unlink(model);
    free(tl);
    free(pl);
    return st;
}

int main(int argc, char **argv)
{
    const char *which = "default";
    int steps = 10, rounds = 3;
    bool overlap = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--overlap")) {
            overlap = true;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: bench_gpt [--case default|small|default-2ranks|small-e2|small-zero|"
                   "30m|small-bf16|all] [--steps N] [--rounds R] [--overlap]\n"
                   "GPT-2 training steps, gpt train (1 rank x 1 stream) against PyTorch "
                   "(1 thread); 2 ranks against PyTorch DDP (gloo) and against 1 rank; "
                   "small-zero: 2 ranks, the optimizer state sharded (ZeRO-1) against not; "
                   "small-bf16: bf16 against fp32; "
                   "--overlap: 2 ranks x 1 stream, gradient overlap on against off\n");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_gpt: option %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        bool known = !strcmp(v, "all");
        for (size_t k = 0; k < sizeof s_cases / sizeof *s_cases; k++)
            known = known || !strcmp(v, s_cases[k].name);
        if (!strcmp(a, "--case") && known) {
            which = v;
        } else if (!strcmp(a, "--steps") && atoi(v) >= 2 && atoi(v) <= S_MAX_STEPS) {
            steps = atoi(v);
        } else if (!strcmp(a, "--rounds") && atoi(v) >= 1 && atoi(v) <= S_MAX_ROUNDS) {
            rounds = atoi(v);
        } else {
            fprintf(stderr,
                    "bench_gpt: bad option %s %s (--case default|small|default-2ranks|small-e2|"
                    "small-zero|30m|small-bf16|all, --steps 2..%d, "
                    "--rounds 1..%d)\n",
                    a, v, S_MAX_STEPS, S_MAX_ROUNDS);
            return 2;
        }
    }
    for (size_t k = 0; k < sizeof s_cases / sizeof *s_cases; k++)
        if (!overlap && s_cases[k].mode == S_OVERLAP && !strcmp(which, s_cases[k].name)) {
            fprintf(stderr, "bench_gpt: case %s runs only with --overlap\n", which);
            return 2;
        }
    troupe_bench_print_machine(TROUPE_BENCH_C_FLAGS);
    char dir[] = "/tmp/bench_gpt.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("bench_gpt: mkdtemp");
        return 1;
    }
    char cmd[4096], text[1100];
    snprintf(text, sizeof text, "%s/words.txt", dir);
    snprintf(cmd, sizeof cmd, "'%s' data --out-dir '%s' >/dev/null 2>&1", GPT_BENCH_GPT, dir);
    int st = 0;
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "'%s' data --text '%s' --out-dir '%s' --name fortunes >/dev/null",
                 GPT_BENCH_GPT, text, dir);
        st = s_write_words(text) != 0 || system(cmd) != 0;
        if (st)
            fprintf(stderr, "bench_gpt: cannot make the token shard in %s\n", dir);
    }
    /* the peer's interpreter: one that imports torch */
    const char *env = getenv("TROUPE_BENCH_PYTHON");
    const char *python = env && env[0] ? env : "/usr/bin/python3";
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", python);
    if (!overlap && system(cmd) != 0) {
        printf("peer torch absent: %s cannot import torch\n", python);
        python = NULL;
    }
    fflush(stdout);
    for (size_t i = 0; i < sizeof s_cases / sizeof *s_cases && st == 0; i++)
        if ((!strcmp(which, "all") || !strcmp(which, s_cases[i].name)) &&
            (overlap || s_cases[i].mode != S_OVERLAP))
            st = overlap || s_cases[i].mode == S_ZERO
                     ? s_case_overlap(&s_cases[i], dir, steps, rounds)
                     : s_case(&s_cases[i], dir, steps, rounds, python);
    const char *files[] = {"fortunes_train.bin", "fortunes_val.bin", "words.txt"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s/%s", dir, files[i]);
        unlink(cmd);
    }
    rmdir(dir);
    return st;
}
