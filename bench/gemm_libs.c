/* troupe — bench_gemm_libs: single-threaded sgemm in each GEMM library found (OpenBLAS, BLIS,
 * libxsmm) on the shapes the main job multiplies, to choose the library troupe's contractions
 * call by measurement (issue 14).
 *
 * Cases (m x k x n, row-major C[m x n] = beta C + op(A) op(B), the MLP 784-256-128-10 at batch
 * 128; gemm_libs.h):
 *   fwd1..3   the forward layers x w1, a1 w2, a2 w3 (op nn, beta 1: the bias is already in C)
 *   dw1..3    the weight gradients x^T dz1, a1^T dz2, a2^T dz3 (op tn, beta 0)
 *   da1..2    the activation gradients dz2 w2^T, dz3 w3^T (op nt, beta 0)
 *   sq512     512 x 512 x 512, and mlp64: 64 x 784 x 256 (bench_matmul's shapes, op nn)
 * then the concurrency cases `threads2_<case>`: two threads call the library at once on their own
 * operands (troupe calls it from several stream threads); each result is checked after every
 * call of a first phase (a library that is not thread-safe returns wrong cells or crashes), then
 * rounds of calls are timed without checks; the time is per pair of calls (both threads).
 *
 * Every library runs on one thread: OpenBLAS by openblas_set_num_threads(1) (and Debian's serial
 * build, when that is the one linked, has no threads at all), BLIS's serial build has no
 * threads, libxsmm's kernels run in the calling thread. The sides are timed together
 * (bench_util.h: interleaved rounds), after an unprinted pass of the first case that brings the
 * core to its working clock (the first case timed read up to 2x slow without it). The facts lines
 * give the versions, the kernels each library picked for this CPU, and the load average (others
 * compiling on a shared machine slow every side alike, but add noise).
 *
 * Output, for each case and each library but OpenBLAS (the peer):
 *   bench=gemm_libs case=<case> bytes=<operand bytes> troupe_us=<the library's median>
 *     peer=openblas peer_us=<OpenBLAS's> ratio=<lib/openblas> lib=<library> op=<nn|tn|nt>
 *     m= k= n= beta= lib_gflops= peer_gflops= openblas_gflops= blis_gflops= libxsmm_gflops=
 *     best=<library with the most GFLOP/s> runs= max_rel_err= check=<ok|fail>
 * (a library declining a shape prints `lib=<name> skipped=<why>`: libxsmm 1.17 has no JIT kernel
 * for the row-major A B^T, its column-major transposed A; a library not found at configure
 * time has a facts line saying so and no case lines; concurrency lines
 * add threads=2 agg_gflops=<both threads together> thread_safe=<yes|no>), then a summary
 *   gemm_libs_best case=<case> best=<library> gflops=<its GFLOP/s>
 * per case. check compares each result cell with a double-precision loop, relative to
 * sum_i |a||b| (bench_matmul's measure), below 1e-4.
 *
 * Options: see --help (bench/bench_util.h). Exit status: 0; 1 when a single-threaded result is
 * wrong; 2 on a usage error. A library failing the concurrency check is reported
 * (thread_safe=no), not an exit status: it is a fact about the library.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench/bench_util.h"
#include "bench/gemm_libs.h"

#include "base/clock.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_PROG "bench_gemm_libs"
#define S_TOLERANCE 1e-4
#define S_CHECKED_CALLS 200 /* calls per thread checked one by one in a concurrency case */
#define S_PAIR_CALLS 20     /* calls per thread in one timed run of a concurrency case */

typedef struct s_case {
    const char *role;
    int m, k, n;
    bool ta, tb;
    float beta;
    bool threads2; /* also run the two-thread case */
} s_case_t;

static const s_case_t s_cases[] = {
    {"fwd1", 128, 784, 256, false, false, 1.0f, true},
    {"fwd2", 128, 256, 128, false, false, 1.0f, false},
    {"fwd3", 128, 128, 10, false, false, 1.0f, false},
    {"dw1", 784, 128, 256, true, false, 0.0f, true},
    {"dw2", 256, 128, 128, true, false, 0.0f, false},
    {"dw3", 128, 128, 10, true, false, 0.0f, false},
    {"da1", 128, 128, 256, false, true, 0.0f, false},
    {"da2", 128, 10, 128, false, true, 0.0f, false},
    {"sq512", 512, 512, 512, false, false, 0.0f, true},
    {"mlp64", 64, 784, 256, false, false, 0.0f, false},
};
#define S_NCASES (sizeof s_cases / sizeof s_cases[0])

/* The libraries this build found; OpenBLAS first (the peer). */
static const troupe_bench_gemm_lib_t *const s_libs[] = {
    &troupe_bench_gemm_openblas,
#if BENCH_HAVE_BLIS
    &troupe_bench_gemm_blis,
#endif
#if BENCH_HAVE_LIBXSMM
    &troupe_bench_gemm_libxsmm,
#endif
};
#define S_NLIBS (sizeof s_libs / sizeof s_libs[0])
#define S_MAX_LIBS 3

/* One library's side of a case. */
typedef struct s_side {
    const troupe_bench_gemm_lib_t *lib;
    troupe_bench_gemm_t g; /* its own C */
    void *plan;
    const char *skipped; /* why not, or NULL */
    troupe_bench_stats_t t;
    double err;
    bool ok;
    bool thread_safe;
} s_side_t;

/* ---- operands ----------------------------------------------------------------------------- */

/* The operands of one shape: A, B and C's starting value, with their strides. */
typedef struct s_operands {
    float *a, *b, *c0;
    int lda, ldb, ldc;
} s_operands_t;

static bool s_operands_new(const s_case_t *c, uint64_t seed, s_operands_t *o)
{
    o->lda = c->ta ? c->m : c->k;
    o->ldb = c->tb ? c->k : c->n;
    o->ldc = c->n;
    o->a = troupe_bench_alloc_floats((int64_t)c->m * c->k);
    o->b = troupe_bench_alloc_floats((int64_t)c->k * c->n);
    o->c0 = troupe_bench_alloc_floats((int64_t)c->m * c->n);
    if (!o->a || !o->b || !o->c0)
        return false;
    troupe_bench_fill_uniform(o->a, (int64_t)c->m * c->k, seed);
    troupe_bench_fill_uniform(o->b, (int64_t)c->k * c->n, seed + 1000);
    troupe_bench_fill_uniform(o->c0, (int64_t)c->m * c->n, seed + 2000);
    return true;
}

static void s_operands_free(s_operands_t *o)
{
    free(o->a);
    free(o->b);
    free(o->c0);
    memset(o, 0, sizeof *o);
}

/* The expected C and the error scale sum_i |a||b| (+ |beta c0|), in double. */
static void s_reference(const s_case_t *c, const s_operands_t *o, double *ref, double *scale)
{
    for (int r = 0; r < c->m; r++)
        for (int j = 0; j < c->n; j++) {
            double s = 0.0, sc = 0.0;
            for (int i = 0; i < c->k; i++) {
                double a = c->ta ? o->a[(int64_t)i * o->lda + r] : o->a[(int64_t)r * o->lda + i];
                double b = c->tb ? o->b[(int64_t)j * o->ldb + i] : o->b[(int64_t)i * o->ldb + j];
                s += a * b;
                sc += fabs(a * b);
            }
            double c0 = (double)c->beta * o->c0[(int64_t)r * o->ldc + j];
            ref[(int64_t)r * c->n + j] = s + c0;
            scale[(int64_t)r * c->n + j] = sc + fabs(c0);
        }
}

/* Largest relative error of got against ref (infinity for a NaN or infinite cell). */
static double s_max_rel_err(const float *got, const double *ref, const double *scale, int64_t count)
{
    double max = 0.0;
    for (int64_t i = 0; i < count; i++) {
        double d = fabs((double)got[i] - ref[i]);
        double e = scale[i] > 0.0 ? d / scale[i] : d;
        if (!(e <= max))
            max = isfinite(e) ? e : INFINITY;
    }
    return max;
}

/* g for operands o and output c. */
static troupe_bench_gemm_t s_gemm(const s_case_t *c, const s_operands_t *o, float *out)
{
    return (troupe_bench_gemm_t){.trans_a = c->ta,
                                 .trans_b = c->tb,
                                 .m = c->m,
                                 .n = c->n,
                                 .k = c->k,
                                 .a = o->a,
                                 .b = o->b,
                                 .c = out,
                                 .lda = o->lda,
                                 .ldb = o->ldb,
                                 .ldc = o->ldc,
                                 .beta = c->beta};
}

static int s_run_side(void *arg)
{
    s_side_t *s = arg;
    s->lib->run(&s->g, s->plan);
    return 0;
}

static double s_gflops(const s_case_t *c, double us)
{
    return us > 0.0 ? 2.0 * c->m * (double)c->k * c->n / (us * 1e3) : 0.0;
}

static const char *s_op(const s_case_t *c)
{
    return c->ta ? "tn" : c->tb ? "nt" : "nn";
}

/* ---- two threads at once ------------------------------------------------------------------ */

typedef struct s_worker {
    const troupe_bench_gemm_lib_t *lib;
    const s_case_t *c;
    s_operands_t o;
    float *out;
    double *ref, *scale;
    void *plan;
    pthread_barrier_t *go;
    int checked_calls, timed_calls; /* this phase */
    double worst_err;
    int64_t elapsed_ns;
} s_worker_t;

static void *s_worker_main(void *arg)
{
    s_worker_t *w = arg;
    const int64_t cells = (int64_t)w->c->m * w->c->n;
    troupe_bench_gemm_t g = s_gemm(w->c, &w->o, w->out);
    pthread_barrier_wait(w->go);
    int64_t t0 = troupe_now_ns();
    for (int i = 0; i < w->checked_calls; i++) {
        memcpy(w->out, w->o.c0, (size_t)cells * sizeof(float));
        w->lib->run(&g, w->plan);
        double e = s_max_rel_err(w->out, w->ref, w->scale, cells);
        w->worst_err = e > w->worst_err ? e : w->worst_err;
    }
    for (int i = 0; i < w->timed_calls; i++)
        w->lib->run(&g, w->plan);
    w->elapsed_ns = troupe_now_ns() - t0;
    return NULL;
}

/* Runs one phase on both workers at once; false when a thread could not start. */
static bool s_phase(s_worker_t *w, int checked, int timed)
{
    pthread_barrier_t go;
    if (pthread_barrier_init(&go, NULL, 2) != 0)
        return false;
    pthread_t th;
    for (int i = 0; i < 2; i++) {
        w[i].go = &go;
        w[i].checked_calls = checked;
        w[i].timed_calls = timed;
    }
    if (pthread_create(&th, NULL, s_worker_main, &w[1]) != 0) {
        pthread_barrier_destroy(&go);
        return false;
    }
    s_worker_main(&w[0]);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&go);
    return true;
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The two-thread case of c for every side that ran c; fills side[i].t (per pair of calls),
 * side[i].err and side[i].thread_safe. Returns false when out of memory. */
static bool s_threads2(const s_case_t *c, s_side_t *side, const troupe_bench_opts_t *opts)
{
    const int64_t cells = (int64_t)c->m * c->n;
    bool ok = true;
    for (size_t l = 0; l < S_NLIBS && ok; l++) {
        s_side_t *s = &side[l];
        if (s->skipped)
            continue;
        s_worker_t w[2];
        memset(w, 0, sizeof w);
        for (int i = 0; i < 2 && ok; i++) {
            w[i] = (s_worker_t){.lib = s->lib, .c = c, .plan = s->plan};
            ok = s_operands_new(c, 77u + 10u * (uint64_t)i, &w[i].o);
            w[i].out = ok ? troupe_bench_alloc_floats(cells) : NULL;
            w[i].ref = ok ? malloc((size_t)cells * sizeof(double)) : NULL;
            w[i].scale = ok ? malloc((size_t)cells * sizeof(double)) : NULL;
            ok = w[i].out && w[i].ref && w[i].scale;
            if (ok)
                s_reference(c, &w[i].o, w[i].ref, w[i].scale);
        }
        if (ok)
            ok = s_phase(w, S_CHECKED_CALLS, 0);
        if (ok) {
            s->err = w[0].worst_err > w[1].worst_err ? w[0].worst_err : w[1].worst_err;
            s->thread_safe = s->err < S_TOLERANCE;
            int runs = opts->max_runs == opts->min_runs ? opts->min_runs : 9;
            double us[TROUPE_BENCH_MAX_RUNS];
            for (int r = 0; r < runs && ok; r++) {
                ok = s_phase(w, 0, S_PAIR_CALLS);
                int64_t ns = w[0].elapsed_ns > w[1].elapsed_ns ? w[0].elapsed_ns : w[1].elapsed_ns;
                us[r] = (double)ns / 1e3 / S_PAIR_CALLS;
            }
            if (ok) {
                qsort(us, (size_t)runs, sizeof us[0], s_cmp_double);
                s->t = (troupe_bench_stats_t){.median_us = us[runs / 2],
                                              .min_us = us[0],
                                              .max_us = us[runs - 1],
                                              .runs = runs};
            }
        }
        for (int i = 0; i < 2; i++) {
            s_operands_free(&w[i].o);
            free(w[i].out);
            free(w[i].ref);
            free(w[i].scale);
        }
    }
    return ok;
}

/* ---- one case ----------------------------------------------------------------------------- */

/* Prints the lines of one case (single-threaded, or two threads when threads2). */
static void s_print(const s_case_t *c, const char *name, const s_side_t *side, bool threads2)
{
    const int64_t bytes = ((int64_t)c->m * c->k + (int64_t)c->k * c->n + (int64_t)c->m * c->n) *
                          (int64_t)sizeof(float);
    const double pairs = threads2 ? 2.0 : 1.0;
    double gf[S_MAX_LIBS] = {0};
    size_t best = 0;
    for (size_t l = 0; l < S_NLIBS; l++) {
        gf[l] = side[l].skipped ? 0.0 : pairs * s_gflops(c, side[l].t.median_us);
        if (gf[l] > gf[best])
            best = l;
    }
    char all[256] = "";
    size_t used = 0;
    for (size_t l = 0; l < S_NLIBS; l++)
        used += (size_t)snprintf(all + used, sizeof all - used, "%s%s_gflops=%.2f", l ? " " : "",
                                 side[l].lib->name, gf[l]);
    for (size_t l = 1; l < S_NLIBS; l++) {
        const s_side_t *s = &side[l];
        if (s->skipped) {
            printf("bench=gemm_libs case=%s lib=%s op=%s m=%d k=%d n=%d skipped=%s\n", name,
                   s->lib->name, s_op(c), c->m, c->k, c->n, s->skipped);
            continue;
        }
        troupe_bench_print_case(
            "gemm_libs", name, bytes, s->t.median_us, "openblas", side[0].t.median_us,
            "lib=%s op=%s m=%d k=%d n=%d beta=%g lib_gflops=%.2f peer_gflops=%.2f %s best=%s "
            "runs=%d peer_runs=%d max_rel_err=%.2e peer_max_rel_err=%.2e check=%s%s%s%s",
            s->lib->name, s_op(c), c->m, c->k, c->n, (double)c->beta, gf[l], gf[0], all,
            side[best].lib->name, s->t.runs, side[0].t.runs, s->err, side[0].err,
            s->ok && side[0].ok ? "ok" : "fail", threads2 ? " threads=2 thread_safe=" : "",
            threads2 ? (s->thread_safe ? "yes" : "no") : "",
            threads2 ? (side[0].thread_safe ? " peer_thread_safe=yes" : " peer_thread_safe=no")
                     : "");
    }
    if (S_NLIBS == 1)
        printf("bench=gemm_libs case=%s lib=openblas openblas_gflops=%.2f%s\n", name, gf[0],
               threads2 ? (side[0].thread_safe ? " threads=2 thread_safe=yes"
                                               : " threads=2 thread_safe=no")
                        : "");
    printf("gemm_libs_best case=%s best=%s gflops=%.2f\n", name, side[best].lib->name, gf[best]);
    fflush(stdout);
}

/* Runs case c and prints its lines when `report` (else it only warms up: the first case timed
 * would otherwise find the core at a lower clock and cold caches); returns 0, or 1 when out of
 * memory or a result is wrong (printed). */
static int s_run_case(const s_case_t *c, const troupe_bench_opts_t *opts, bool report)
{
    const int64_t cells = (int64_t)c->m * c->n;
    s_operands_t o;
    s_side_t side[S_MAX_LIBS];
    memset(side, 0, sizeof side);
    double *ref = malloc((size_t)cells * sizeof *ref);
    double *scale = malloc((size_t)cells * sizeof *scale);
    int rc = 1;
    char name[64];
    snprintf(name, sizeof name, "%s_%dx%dx%d", c->role, c->m, c->k, c->n);
    if (!s_operands_new(c, 1u, &o) || !ref || !scale) {
        fprintf(stderr, "%s: case=%s: out of memory\n", S_PROG, name);
        goto out;
    }
    s_reference(c, &o, ref, scale);

    troupe_bench_side_t timed[S_MAX_LIBS];
    s_side_t *timed_side[S_MAX_LIBS];
    int ntimed = 0;
    bool all_ok = true;
    for (size_t l = 0; l < S_NLIBS; l++) {
        s_side_t *s = &side[l];
        s->lib = s_libs[l];
        float *out = troupe_bench_alloc_floats(cells);
        if (!out) {
            fprintf(stderr, "%s: case=%s: out of memory\n", S_PROG, name);
            goto out;
        }
        s->g = s_gemm(c, &o, out);
        s->skipped = s->lib->prepare(&s->g, &s->plan);
        if (s->skipped)
            continue;
        /* check one call from C's starting value, then time */
        memcpy(out, o.c0, (size_t)cells * sizeof(float));
        s->lib->run(&s->g, s->plan);
        s->err = s_max_rel_err(out, ref, scale, cells);
        s->ok = s->err < S_TOLERANCE;
        if (!s->ok) {
            fprintf(stderr, "%s: case=%s: %s's result is wrong: relative error %.3g >= %g\n",
                    S_PROG, name, s->lib->name, s->err, S_TOLERANCE);
            all_ok = false;
        }
        timed_side[ntimed] = s;
        timed[ntimed++] = (troupe_bench_side_t){s_run_side, s};
    }
    troupe_bench_stats_t t[S_MAX_LIBS];
    if (ntimed > 0 && troupe_bench_time_sides(timed, ntimed, opts, t) != 0) {
        fprintf(stderr, "%s: case=%s: timing failed\n", S_PROG, name);
        goto out;
    }
    for (int i = 0; i < ntimed; i++)
        timed_side[i]->t = t[i];
    if (report)
        s_print(c, name, side, false);

    if (report && c->threads2) {
        char name2[80];
        snprintf(name2, sizeof name2, "threads2_%s", name);
        if (!s_threads2(c, side, opts)) {
            fprintf(stderr, "%s: case=%s: out of memory or no thread\n", S_PROG, name2);
            goto out;
        }
        for (size_t l = 0; l < S_NLIBS; l++)
            if (!side[l].skipped && !side[l].thread_safe)
                fprintf(stderr,
                        "%s: case=%s: %s returned wrong cells when called from two threads at "
                        "once (relative error %.3g): not thread-safe as built\n",
                        S_PROG, name2, side[l].lib->name, side[l].err);
        s_print(c, name2, side, true);
    }
    rc = all_ok ? 0 : 1;
out:
    for (size_t l = 0; l < S_NLIBS; l++) {
        if (side[l].lib)
            side[l].lib->release(side[l].plan);
        free(side[l].g.c);
    }
    s_operands_free(&o);
    free(ref);
    free(scale);
    return rc;
}

int main(int argc, char **argv)
{
    troupe_bench_opts_t opts;
    troupe_bench_opts_default(&opts);
    int pr = troupe_bench_parse_args(
        argc, argv, "Single-threaded sgemm of OpenBLAS, BLIS and libxsmm on the main job's shapes.",
        &opts);
    if (pr != 0)
        return pr > 0 ? 0 : 2;
    troupe_bench_print_machine(TROUPE_BENCH_C_FLAGS);
    for (size_t l = 0; l < S_NLIBS; l++)
        s_libs[l]->identify();
#if !BENCH_HAVE_BLIS
    troupe_bench_print_library("blis", "absent",
                               "reason=\"not found at configure time (libblis-serial-dev)\"");
#endif
#if !BENCH_HAVE_LIBXSMM
    troupe_bench_print_library("libxsmm", "absent",
                               "reason=\"not found at configure time (libxsmm-dev)\"");
#endif
    int rc = s_run_case(&s_cases[0], &opts, false); /* warm-up, not printed */
    for (size_t i = 0; i < S_NCASES; i++)
        rc |= s_run_case(&s_cases[i], &opts, true);
    return rc;
}
