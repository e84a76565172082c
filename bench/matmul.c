/* troupe — bench_matmul: troupe's single-precision matmul (through the GEMM library, and its own
 * generated loops) against a naive loop and OpenBLAS.
 *
 * troupe side: y = x . w built as an assignment (ir/assign.h) "bi,ij=>bj" with
 * initialize_neutral, accum add, op mul; lowered, optimised with the default options
 * (troupe_ll_optimize), compiled by the cpu driver (C from compiler/cgen, $CC with
 * TROUPE_CC_FLAGS) and launched through the driver vtable on buffers of one pool. Only the
 * launch is timed (the host driver runs it synchronously in the calling thread). The generated
 * code calls the GEMM library for this contraction when TROUPE_GEMM=library (the default) and
 * troupe was built with one (devices/host/gemm_library.h): the lines say troupe_path=library,
 * and the same routine compiled with TROUPE_GEMM=generated (troupe's own loops, the fallback)
 * is timed beside it as case <case>-generated. Otherwise troupe_path=generated and there is no
 * -generated case. The facts line `troupe` names the library (gemm_library=).
 * Peers, compiled into this program with the flags printed as bench_flags:
 *   naive     the textbook dot-product loop, order r-j-i (row, column, reduction innermost);
 *   openblas  cblas_sgemm of OpenBLAS when CMake found it (BENCH_HAVE_OPENBLAS; linked by name,
 *             never the system's generic BLAS, which may be the reference one), run on one
 *             thread as troupe's routine is. Its identity comes first (openblas_peer.h:
 *             openblas_get_config(), the core it picked, its threads), with a warning when it
 *             does not run the kernels this CPU takes. Without OpenBLAS a line says why and
 *             the peer is skipped.
 * Cases (m x k x n: x is m x k, w is k x n): 512x512x512, and the MLP layer 64x784x256
 * (batch 64, 784 inputs, 256 outputs).
 *
 * Check: each result cell of troupe (and of the BLAS) is compared with the naive loop's; the
 * error is relative to sum_i |x[r,i]| |w[i,j]|, the scale a float dot product's rounding error
 * is proportional to (a plain |ref| would blow up on cells that cancel to near zero). The
 * largest must be below 1e-4: the line says check=ok, else check=fail, the worst cell goes to
 * stderr and the exit status is 1.
 *
 * Fields beyond the common ones: m k n, troupe_gflops/peer_gflops (2mkn / time),
 * troupe_threads/peer_threads, the run counts, compile_ms (the driver's compile of this run: a
 * cache hit, well under a millisecond, once the object is in TROUPE_CACHE_DIR), max_rel_err
 * (troupe vs naive), peer_max_rel_err (the BLAS vs naive), check, troupe_path.
 *
 * Options: see --help (bench/bench_util.h). Exit status: 0, 1 on a failure or a failed check,
 * 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench/bench_util.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/status.h"
#include "compiler/cgen.h"
#include "compiler/lower.h"
#include "compiler/optimize.h"
#include "devices/device.h"
#include "devices/host/gemm_library.h"
#include "devices/host/host_impl.h"
#include "ir/assign.h"
#include "ir/lowlevel.h"
#include "ir/tnode.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if BENCH_HAVE_OPENBLAS
#include "bench/openblas_peer.h"

#include <cblas.h>
#endif

#define S_PROG "bench_matmul"
#define S_TOLERANCE 1e-4

#define S_BLAS_PEER "openblas"
#define S_GEN_POOL_OFFSET 100 /* pool ids of the generated path's buffers: case's + this */

typedef struct s_case {
    const char *name;
    int64_t m, k, n;
} s_case_t;

static const s_case_t s_cases[] = {
    {"512x512x512", 512, 512, 512},
    {"mlp_64x784x256", 64, 784, 256},
};
#define S_NCASES (sizeof s_cases / sizeof s_cases[0])

/* Everything one case needs; the s_run_* functions time one multiplication each. */
typedef struct s_state {
    int64_t m, k, n;
    float *x, *w;            /* inputs, host copies */
    float *y_naive, *y_blas; /* peer results */
    /* troupe */
    troupe_driver_t *drv;
    troupe_dqueue_t *q;
    troupe_dcode_t *code;
    troupe_karg_t args[3];
    size_t nargs;
    int32_t pool_id;
    bool pool_allocated;
    troupe_buffer_loc_t y_loc;
    troupe_status_t launch_status;
    bool generated; /* compiled with TROUPE_GEMM=generated: troupe's own loops */
} s_state_t;

/* ---- peers -------------------------------------------------------------------------------- */

/* The textbook loop as a program would write it: a generic function, kept out of line so the
 * compiler cannot specialise it for the call site's constant shapes. */
#if defined(__GNUC__)
#define S_NOINLINE __attribute__((noinline))
#else
#define S_NOINLINE
#endif

static S_NOINLINE void s_naive(int64_t m, int64_t k, int64_t n, const float *restrict x,
                               const float *restrict w, float *restrict y)
{
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t i = 0; i < k; i++)
                s += x[r * k + i] * w[i * n + j];
            y[r * n + j] = s;
        }
}

static int s_run_naive(void *arg)
{
    s_state_t *s = arg;
    s_naive(s->m, s->k, s->n, s->x, s->w, s->y_naive);
    return 0;
}

#if BENCH_HAVE_OPENBLAS
static int s_run_blas(void *arg)
{
    s_state_t *s = arg;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s->m, (int)s->n, (int)s->k, 1.0f,
                s->x, (int)s->k, s->w, (int)s->n, 0.0f, s->y_blas, (int)s->n);
    return 0;
}
#endif

static int s_run_troupe(void *arg)
{
    s_state_t *s = arg;
    s->launch_status = s->drv->vt->launch(s->drv, s->q, s->code, s->args, s->nargs);
    return s->launch_status == TROUPE_OK ? 0 : 1;
}

/* ---- troupe side -------------------------------------------------------------------------- */

static troupe_status_t s_node(const char *label, int64_t d0, int64_t d1, troupe_tnode_t **out)
{
    int64_t dims[2] = {d0, d1};
    return troupe_tnode_new(&label, 1, TROUPE_PREC_SINGLE, 2, dims, NULL, 0.0, out);
}

static int64_t s_align64(int64_t v)
{
    return (v + 63) & ~(int64_t)63;
}

/* Builds, optimises and compiles y = x . w for s's shape, puts x and w into pool s->pool_id
 * and fills s->args and s->y_loc. *out_compile_ms: time of the driver's compile (a cache hit
 * is fast). Returns 0, or 1 after printing the failure (s->code and s->pool_allocated say
 * what the caller must release). */
static int s_troupe_setup(s_state_t *s, const char *case_name, const troupe_bench_opts_t *opts,
                          double *out_compile_ms)
{
    const troupe_driver_vtable_t *vt = s->drv->vt;
    troupe_tnode_t *x = NULL, *w = NULL, *y = NULL;
    troupe_asgn_comp_t *comp = NULL;
    troupe_ll_proc_t *proc = NULL;
    troupe_cgen_result_t *gen = NULL;
    int rc = 1;
    troupe_status_t st;
    const char *what = "create nodes";

    if ((st = s_node("x", s->m, s->k, &x)) != TROUPE_OK ||
        (st = s_node("w", s->k, s->n, &w)) != TROUPE_OK ||
        (st = s_node("y", s->m, s->n, &y)) != TROUPE_OK)
        goto out_fail;

    what = "build the assignment";
    troupe_asgn_t *mm = NULL;
    if ((st = troupe_asgn_comp_new(&comp)) != TROUPE_OK ||
        (st = troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                      troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj",
                                      &mm)) != TROUPE_OK)
        goto out_fail;
    troupe_asgn_comp_set_root(comp, mm);

    what = "lower";
    char name[64];
    /* a name of its own for the generated path: the same source would share one loaded object,
     * and with it the GEMM hooks of the last load (devices/host) */
    snprintf(name, sizeof name, "matmul_%lldx%lldx%lld%s", (long long)s->m, (long long)s->k,
             (long long)s->n, s->generated ? "_gen" : "");
    if ((st = troupe_asgn_lower(comp, name, &proc)) != TROUPE_OK)
        goto out_fail;
    what = "optimize";
    if ((st = troupe_ll_optimize(proc, NULL)) != TROUPE_OK)
        goto out_fail;

    /* The emitter is deterministic: its parameter order is the compiled code's. The library
     * setting is read when the code is generated (library-only code: no loops of its own) and
     * when it is loaded. */
    const bool library = troupe_config_gemm_library();
    if (s->generated)
        troupe_config_set_gemm_library(false);
    what = "emit C";
    troupe_cgen_options_t copts;
    troupe__hdrv_cgen_options(vt, &copts);
    if ((st = troupe_cgen_emit_with(proc, TROUPE_CGEN_C, &copts, &gen)) != TROUPE_OK) {
        troupe_config_set_gemm_library(library);
        goto out_fail;
    }
    if (opts->dump_source)
        fprintf(stderr, "---- %s: generated C for case=%s ----\n%s---- end %s ----\n", S_PROG,
                case_name, gen->source, gen->name);

    what = "compile";
    int64_t t0 = troupe_now_ns();
    st = vt->compile(s->drv, proc, &s->code);
    troupe_config_set_gemm_library(library);
    if (st != TROUPE_OK)
        goto out_fail;
    *out_compile_ms = (double)(troupe_now_ns() - t0) / 1e6;

    what = "allocate and fill buffers";
    troupe_tnode_t *nodes[3] = {x, w, y};
    const float *host[3] = {s->x, s->w, NULL};
    int64_t offset = 0;
    troupe_buffer_loc_t loc[3];
    for (int i = 0; i < 3; i++) {
        loc[i] = (troupe_buffer_loc_t){s->pool_id, offset, (int64_t)nodes[i]->size_bytes};
        offset += s_align64((int64_t)nodes[i]->size_bytes);
    }
    if ((st = vt->alloc_pool(s->drv, 0, s->pool_id, offset, true)) != TROUPE_OK)
        goto out_fail;
    s->pool_allocated = true;
    s->y_loc = loc[2];
    for (int i = 0; i < 2; i++)
        if ((st = vt->h2d(s->drv, s->q, loc[i], host[i], loc[i].size_bytes)) != TROUPE_OK)
            goto out_fail;

    what = "bind arguments";
    s->nargs = gen->nparams;
    if (gen->nparams != 3) {
        st = troupe_error_set(TROUPE_INTERNAL, "expected 3 parameters (x, w, y), the code has %zu",
                              gen->nparams);
        goto out_fail;
    }
    for (int i = 0; i < 3; i++) {
        ptrdiff_t p = troupe_cgen_find_node_param(gen, nodes[i]);
        if (p < 0 || p >= 3) {
            st = troupe_error_set(TROUPE_INTERNAL, "node %s is not a parameter of the code",
                                  nodes[i]->label[0]);
            goto out_fail;
        }
        s->args[p] = (troupe_karg_t){.kind = TROUPE_KARG_BUFFER, .ordinal = 0, .buf = loc[i]};
    }
    rc = 0;
    goto out;
out_fail:
    troupe_bench_fail_status(S_PROG, what, st);
out:
    troupe_cgen_result_destroy(&gen);
    troupe_ll_proc_destroy(&proc);
    troupe_asgn_comp_destroy(&comp);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
    return rc;
}

/* ---- checking ----------------------------------------------------------------------------- */

/* scale[r,j] = sum_i |x[r,i]| |w[i,j]| in double. */
static void s_error_scale(const s_state_t *s, double *scale)
{
    for (int64_t r = 0; r < s->m; r++) {
        double *row = scale + r * s->n;
        for (int64_t j = 0; j < s->n; j++)
            row[j] = 0.0;
        for (int64_t i = 0; i < s->k; i++) {
            double a = fabs((double)s->x[r * s->k + i]);
            const float *wr = s->w + i * s->n;
            for (int64_t j = 0; j < s->n; j++)
                row[j] += a * fabs((double)wr[j]);
        }
    }
}

/* Largest |got - ref| / scale over the cells (NaN or infinity gives infinity); *worst gets its
 * cell. */
static double s_max_rel_err(const float *got, const float *ref, const double *scale, int64_t count,
                            int64_t *worst)
{
    double max = 0.0;
    *worst = 0;
    for (int64_t c = 0; c < count; c++) {
        double d = fabs((double)got[c] - (double)ref[c]);
        double e = scale[c] > 0.0 ? d / scale[c] : d;
        if (!(e <= max)) {
            max = isfinite(e) ? e : INFINITY;
            *worst = c;
            if (!isfinite(e))
                break;
        }
    }
    return max;
}

static bool s_check(const char *case_name, const char *who, const s_state_t *s, const float *got,
                    const double *scale, double *out_err)
{
    int64_t worst = 0;
    *out_err = s_max_rel_err(got, s->y_naive, scale, s->m * s->n, &worst);
    if (*out_err < S_TOLERANCE)
        return true;
    fprintf(stderr,
            "%s: case=%s: %s disagrees with the naive loop: cell [%lld,%lld] = %.9g, naive %.9g, "
            "relative error %.3g >= %g\n",
            S_PROG, case_name, who, (long long)(worst / s->n), (long long)(worst % s->n),
            (double)got[worst], (double)s->y_naive[worst], *out_err, S_TOLERANCE);
    return false;
}

/* ---- main --------------------------------------------------------------------------------- */

static double s_gflops(const s_state_t *s, double us)
{
    return us > 0.0 ? 2.0 * (double)s->m * (double)s->k * (double)s->n / (us * 1e3) : 0.0;
}

/* Runs one case; returns 0, 1 on failure (printed). *check_ok is false when a result is wrong. */
static int s_run_case(const s_case_t *c, int32_t pool_id, troupe_driver_t *drv, troupe_dqueue_t *q,
                      const troupe_bench_opts_t *opts, bool *check_ok)
{
    s_state_t s = {.m = c->m, .k = c->k, .n = c->n, .drv = drv, .q = q, .pool_id = pool_id};
    s_state_t g = {.drv = drv}; /* the same on troupe's generated path */
    double *scale = NULL;
    troupe_status_t st = TROUPE_OK;
    int rc = 1;
    s.x = troupe_bench_alloc_floats(c->m * c->k);
    s.w = troupe_bench_alloc_floats(c->k * c->n);
    s.y_naive = troupe_bench_alloc_floats(c->m * c->n);
    s.y_blas = troupe_bench_alloc_floats(c->m * c->n);
    scale = malloc((size_t)(c->m * c->n) * sizeof *scale);
    if (!s.x || !s.w || !s.y_naive || !s.y_blas || !scale) {
        fprintf(stderr, "%s: case=%s: out of memory\n", S_PROG, c->name);
        goto out;
    }
    troupe_bench_fill_uniform(s.x, c->m * c->k, 1u + (uint64_t)pool_id);
    troupe_bench_fill_uniform(s.w, c->k * c->n, 1000u + (uint64_t)pool_id);

    double compile_ms = 0.0, gen_compile_ms = 0.0;
    if (s_troupe_setup(&s, c->name, opts, &compile_ms) != 0)
        goto out;
    /* troupe's own loops too, when the default path is the GEMM library */
    const bool with_gen = troupe_config_gemm_library() && troupe_gemm_library_available();
    g = s;
    g.code = NULL;
    g.pool_allocated = false;
    g.pool_id = pool_id + S_GEN_POOL_OFFSET;
    g.generated = true;
    if (with_gen && s_troupe_setup(&g, c->name, opts, &gen_compile_ms) != 0)
        goto out;

    /* Sides: troupe, naive, then the BLAS when linked, then troupe's loops. */
    troupe_bench_side_t sides[4] = {{s_run_troupe, &s}, {s_run_naive, &s}};
    int nsides = 2;
#if BENCH_HAVE_OPENBLAS
    const int i_blas = nsides;
    sides[nsides++] = (troupe_bench_side_t){s_run_blas, &s};
#endif
    const int i_gen = nsides;
    if (with_gen)
        sides[nsides++] = (troupe_bench_side_t){s_run_troupe, &g};
    troupe_bench_stats_t t[4];
    if (troupe_bench_time_sides(sides, nsides, opts, t) != 0) {
        troupe_status_t ls = s.launch_status != TROUPE_OK ? s.launch_status : g.launch_status;
        if (ls != TROUPE_OK)
            troupe_bench_fail_status(S_PROG, "launch", ls);
        else
            fprintf(stderr, "%s: case=%s: timing failed\n", S_PROG, c->name);
        goto out;
    }
    const troupe_bench_stats_t t_troupe = t[0], t_naive = t[1];
#if BENCH_HAVE_OPENBLAS
    const troupe_bench_stats_t t_blas = t[i_blas];
#endif
    const char *path = with_gen ? "library" : "generated";

    /* Troupe's results, read in place (the cpu driver's memory is host memory). */
    void *yp = NULL, *gp = NULL;
    st = drv->vt->host_ptr(drv, 0, s.y_loc, &yp);
    if (st == TROUPE_OK && with_gen)
        st = drv->vt->host_ptr(drv, 0, g.y_loc, &gp);
    if (st != TROUPE_OK) {
        troupe_bench_fail_status(S_PROG, "read the result", st);
        goto out;
    }
    s_error_scale(&s, scale);
    double err = 0.0, gen_err = 0.0;
    bool ok = s_check(c->name, "troupe", &s, yp, scale, &err);
    bool gen_ok = !with_gen || s_check(c->name, "troupe (generated)", &s, gp, scale, &gen_err);
    *check_ok = *check_ok && ok && gen_ok;

    const int64_t bytes = (c->m * c->k + c->k * c->n + c->m * c->n) * (int64_t)sizeof(float);
    troupe_bench_print_case(
        "matmul", c->name, bytes, t_troupe.median_us, "naive", t_naive.median_us,
        "m=%lld k=%lld n=%lld troupe_gflops=%.2f peer_gflops=%.2f troupe_threads=1 "
        "peer_threads=1 troupe_runs=%d peer_runs=%d compile_ms=%.1f max_rel_err=%.2e check=%s "
        "troupe_path=%s",
        (long long)c->m, (long long)c->k, (long long)c->n, s_gflops(&s, t_troupe.median_us),
        s_gflops(&s, t_naive.median_us), t_troupe.runs, t_naive.runs, compile_ms, err,
        ok ? "ok" : "fail", path);
#if BENCH_HAVE_OPENBLAS
    double blas_err = 0.0;
    bool blas_ok = s_check(c->name, S_BLAS_PEER, &s, s.y_blas, scale, &blas_err);
    *check_ok = *check_ok && blas_ok;
    troupe_bench_print_case(
        "matmul", c->name, bytes, t_troupe.median_us, S_BLAS_PEER, t_blas.median_us,
        "m=%lld k=%lld n=%lld troupe_gflops=%.2f peer_gflops=%.2f troupe_threads=1 "
        "peer_threads=%d troupe_runs=%d peer_runs=%d compile_ms=%.1f "
        "max_rel_err=%.2e peer_max_rel_err=%.2e check=%s troupe_path=%s",
        (long long)c->m, (long long)c->k, (long long)c->n, s_gflops(&s, t_troupe.median_us),
        s_gflops(&s, t_blas.median_us), openblas_get_num_threads(), t_troupe.runs, t_blas.runs,
        compile_ms, err, blas_err, ok && blas_ok ? "ok" : "fail", path);
#endif
    if (with_gen) {
        /* the generated fallback against the best peer linked */
        char gname[80];
        snprintf(gname, sizeof gname, "%s-generated", c->name);
#if BENCH_HAVE_OPENBLAS
        const char *gpeer = S_BLAS_PEER;
        const troupe_bench_stats_t t_gpeer = t_blas;
#else
        const char *gpeer = "naive";
        const troupe_bench_stats_t t_gpeer = t_naive;
#endif
        troupe_bench_print_case(
            "matmul", gname, bytes, t[i_gen].median_us, gpeer, t_gpeer.median_us,
            "m=%lld k=%lld n=%lld troupe_gflops=%.2f peer_gflops=%.2f troupe_threads=1 "
            "troupe_runs=%d peer_runs=%d compile_ms=%.1f max_rel_err=%.2e check=%s "
            "troupe_path=generated",
            (long long)c->m, (long long)c->k, (long long)c->n, s_gflops(&s, t[i_gen].median_us),
            s_gflops(&s, t_gpeer.median_us), t[i_gen].runs, t_gpeer.runs, gen_compile_ms, gen_err,
            gen_ok ? "ok" : "fail");
    }
    rc = 0;
out:
    if (s.pool_allocated && (st = drv->vt->free_pool(drv, 0, pool_id)) != TROUPE_OK)
        rc = troupe_bench_fail_status(S_PROG, "free the pool", st);
    if (s.code)
        drv->vt->code_release(drv, s.code);
    if (g.pool_allocated && (st = drv->vt->free_pool(drv, 0, g.pool_id)) != TROUPE_OK)
        rc = troupe_bench_fail_status(S_PROG, "free the pool", st);
    if (g.code)
        drv->vt->code_release(drv, g.code);
    free(scale);
    free(s.x);
    free(s.w);
    free(s.y_naive);
    free(s.y_blas);
    return rc;
}

int main(int argc, char **argv)
{
    troupe_bench_opts_t opts;
    troupe_bench_opts_default(&opts);
    int pr = troupe_bench_parse_args(
        argc, argv,
        "Single-precision matmul: troupe's generated code vs a naive loop and OpenBLAS.", &opts);
    if (pr != 0)
        return pr > 0 ? 0 : 2;

    troupe_bench_print_machine(TROUPE_BENCH_C_FLAGS);
#if BENCH_HAVE_OPENBLAS
    troupe_bench_openblas_identify();
#else
    troupe_bench_print_library("openblas", "absent", "reason=\"" BENCH_OPENBLAS_WHY "\"");
    printf("peer openblas skipped: %s\n", BENCH_OPENBLAS_WHY);
#endif

    const troupe_driver_vtable_t *vt = NULL;
    troupe_driver_t *drv = NULL;
    troupe_dqueue_t *q = NULL;
    troupe_status_t st = troupe_driver_lookup("cpu", &vt);
    if (st != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "find the cpu driver", st);
    if ((st = vt->open(&drv)) != TROUPE_OK)
        return troupe_bench_fail_status(S_PROG, "open the cpu driver", st);
    int rc = 0;
    if ((st = vt->queue_create(drv, 0, &q)) != TROUPE_OK) {
        rc = troupe_bench_fail_status(S_PROG, "create a queue", st);
        goto out_driver;
    }

    bool check_ok = true;
    for (size_t i = 0; i < S_NCASES && rc == 0; i++)
        rc = s_run_case(&s_cases[i], (int32_t)i + 1, drv, q, &opts, &check_ok);
    if (rc == 0 && !check_ok)
        rc = 1;

    vt->queue_destroy(drv, q);
out_driver:
    vt->close(drv);
    return rc;
}
