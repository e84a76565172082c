/* Tests of compiler/gemm (recognising matrix products in the low-level IR) and of the GEMM
 * library path of generated CPU code (devices/host/gemm_library): the matcher's verdicts and
 * call shapes for the forward, backward, transposed-output and batched products; refusals
 * (precision, size) and their debug-log line; on every host driver, the library path against a
 * double-precision host reference and against the generated loops (within float rounding), with
 * and without accumulation into existing values, on random shapes; bitwise reproducibility of
 * the library path run to run; loops merged into one dimension (b and t over (B, T, C) arrays)
 * matched and, in a layout where they are not one dense dimension, not merged, both against
 * the interpreter, the other loop then outside the calls; bfloat16 or half factors into a
 * single output (mixed precision): matched, called through troupe_bgemm / troupe_hgemm, against
 * the interpreter within the fp32 sum-order bound and against the unrounded product within the
 * bf16 or fp16 rounding bound; B^T packed once for a loop of A B^T calls whose B shift along k
 * (a convolution's weight gradient), and not packed where the shifted ranges leave a gap. */
#define _POSIX_C_SOURCE 200809L
#include "actors/troupe.h"
#include "base/config.h"
#include "base/log.h"
#include "compiler/cgen.h"
#include "compiler/gemm.h"
#include "compiler/interp.h"
#include "devices/host/gemm_library.h"
#include "compiler/lower.h"
#include "compiler/optimize.h"
#include "devices/device.h"
#include "devices/host/host_impl.h"
#include "cuda_emu.h"
#include "ir/prec.h"
#include "runtime_test_util.h"
#include "troupe_config.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void s_init(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/gemm-cache", 60);
}

TestSuite(gemm_match, .init = s_init);
TestSuite(gemm_run, .init = s_init);

/* ---- the matcher ------------------------------------------------------------------------- */

typedef struct s_case {
    troupe_ll_proc_t *proc;
    troupe_tnode_t *x, *w, *y;
} s_case_t;

/* y (=+ or +=) x * w over `spec`, lowered and optimised. */
static s_case_t s_lower(const char *spec, troupe_prec_t prec, int nx, const int64_t *dx, int nw,
                        const int64_t *dw, int ny, const int64_t *dy, bool fresh)
{
    s_case_t c;
    c.x = rtu_node("x", prec, nx, dx);
    c.w = rtu_node("w", prec, nw, dw);
    c.y = rtu_node("y", prec, ny, dy);
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_asgn_accum_binop(comp, fresh, TROUPE_BINOP_ADD, c.y, TROUPE_BINOP_MUL,
                               troupe_asgn_node(c.x), troupe_asgn_node(c.w), spec, &t));
    troupe_asgn_comp_set_root(comp, t);
    c.proc = NULL;
    OK(troupe_asgn_lower(comp, "mm", &c.proc));
    OK(troupe_ll_optimize(c.proc, NULL));
    troupe_asgn_comp_destroy(&comp);
    return c;
}

static void s_free(s_case_t *c)
{
    troupe_ll_proc_destroy(&c->proc);
    troupe_tnode_release(&c->x);
    troupe_tnode_release(&c->w);
    troupe_tnode_release(&c->y);
}

/* The first verdict other than NO in the statement tree (as cgen walks it: a FOR that is not
 * a product is entered). */
static troupe_gemm_verdict_t s_find(const troupe_ll_t *s, troupe_gemm_t *g, const char **why)
{
    if (s->kind == TROUPE_LL_SEQ) {
        for (size_t i = 0; i < s->u.seq.count; i++) {
            troupe_gemm_verdict_t v = s_find(s->u.seq.items[i], g, why);
            if (v != TROUPE_GEMM_NO)
                return v;
        }
        return TROUPE_GEMM_NO;
    }
    if (s->kind != TROUPE_LL_FOR)
        return TROUPE_GEMM_NO;
    troupe_gemm_verdict_t v = troupe_gemm_match(s, g, why);
    return v != TROUPE_GEMM_NO ? v : s_find(s->u.for_loop.body, g, why);
}

static void s_expect(s_case_t *c, int64_t m, int64_t n, int64_t k, const troupe_tnode_t *a,
                     bool ta, int64_t lda, const troupe_tnode_t *b, bool tb, int64_t ldb,
                     int64_t ldc)
{
    troupe_gemm_t g;
    const char *why = NULL;
    cr_assert_eq(s_find(c->proc->body, &g, &why), TROUPE_GEMM_YES, "refused: %s", why);
    cr_assert_eq(g.m, m, "m = %lld", (long long)g.m);
    cr_assert_eq(g.n, n, "n = %lld", (long long)g.n);
    cr_assert_eq(g.k, k, "k = %lld", (long long)g.k);
    cr_assert_eq(g.a.tn, a, "A is node #%d", g.a.tn->id);
    cr_assert_eq(g.b.tn, b, "B is node #%d", g.b.tn->id);
    cr_assert_eq(g.c.tn, c->y);
    cr_assert_eq(g.a.trans, ta);
    cr_assert_eq(g.b.trans, tb);
    cr_assert_eq(g.a.ld, lda, "lda = %lld", (long long)g.a.ld);
    cr_assert_eq(g.b.ld, ldb, "ldb = %lld", (long long)g.b.ld);
    cr_assert_eq(g.c.ld, ldc, "ldc = %lld", (long long)g.c.ld);
    cr_assert_eq(g.prec, c->y->prec);
}

Test(gemm_match, forward_product_is_untransposed)
{
    s_case_t c = s_lower("bi,ij=>bj", TROUPE_PREC_SINGLE, 2, (int64_t[]){32, 48}, 2,
                         (int64_t[]){48, 40}, 2, (int64_t[]){32, 40}, true);
    s_expect(&c, 32, 40, 48, c.x, false, 48, c.w, false, 40, 40);
    s_free(&c);
}

Test(gemm_match, weight_gradient_transposes_the_first_factor)
{
    /* g[i,j] += x[b,i] * d[b,j]: x^T d */
    s_case_t c = s_lower("bi,bj=>ij", TROUPE_PREC_SINGLE, 2, (int64_t[]){32, 48}, 2,
                         (int64_t[]){32, 40}, 2, (int64_t[]){48, 40}, true);
    s_expect(&c, 48, 40, 32, c.x, true, 48, c.w, false, 40, 40);
    s_free(&c);
}

Test(gemm_match, input_gradient_transposes_the_second_factor)
{
    /* dx[b,i] += d[b,j] * w[i,j]: d w^T */
    s_case_t c = s_lower("bj,ij=>bi", TROUPE_PREC_DOUBLE, 2, (int64_t[]){32, 40}, 2,
                         (int64_t[]){48, 40}, 2, (int64_t[]){32, 48}, true);
    s_expect(&c, 32, 48, 40, c.x, false, 40, c.w, true, 40, 48);
    s_free(&c);
}

Test(gemm_match, transposed_output_is_computed_as_the_transposed_product)
{
    /* y[j,b] = sum_i x[b,i] w[i,j]: C^T = w^T x^T, rows over j */
    s_case_t c = s_lower("bi,ij=>jb", TROUPE_PREC_SINGLE, 2, (int64_t[]){32, 48}, 2,
                         (int64_t[]){48, 40}, 2, (int64_t[]){40, 32}, true);
    s_expect(&c, 40, 32, 48, c.w, true, 40, c.x, true, 48, 32);
    s_free(&c);
}

Test(gemm_match, batched_product_matches_inside_the_batch_loop)
{
    s_case_t c = s_lower("xbi,xij=>xbj", TROUPE_PREC_SINGLE, 3, (int64_t[]){3, 32, 48}, 3,
                         (int64_t[]){3, 48, 40}, 3, (int64_t[]){3, 32, 40}, false);
    s_expect(&c, 32, 40, 48, c.x, false, 48, c.w, false, 40, 40);
    s_free(&c);
}

/* The C source of c's procedure; the caller frees it. */
static char *s_c_source(const s_case_t *c)
{
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(c->proc, TROUPE_CGEN_C, &res), TROUPE_OK, "%s",
                 troupe_last_error());
    char *src = strdup(res->source);
    troupe_cgen_result_destroy(&res);
    cr_assert_not_null(src);
    return src;
}

Test(gemm_match, a_zeroing_before_batched_products_that_tile_the_output_becomes_beta_zero)
{
    /* y = x w per batch x (fresh): the batch loop's calls each overwrite their own block of
     * y, so y is not zeroed first on the library's side (only the fallback loops zero each
     * block); accumulating into y, the calls add (beta = 1) and nothing is zeroed */
    for (int fresh = 0; fresh < 2; fresh++) {
        s_case_t c = s_lower("xbi,xij=>xbj", TROUPE_PREC_SINGLE, 3, (int64_t[]){3, 32, 48}, 3,
                             (int64_t[]){3, 48, 40}, 3, (int64_t[]){3, 32, 40}, fresh);
        char *src = s_c_source(&c);
        cr_assert_null(strstr(src, "_y[zi] = 0"), "fresh %d: y zeroed whole:\n%s", fresh, src);
        cr_assert_eq(strstr(src, "0.0f, &n") != NULL, fresh, "fresh %d: beta:\n%s", fresh, src);
        cr_assert_eq(strstr(src, "g_z[zi] = 0") != NULL, fresh, "fresh %d:\n%s", fresh, src);
        free(src);
        s_free(&c);
    }
}

Test(gemm_match, refusals_name_the_rule)
{
    troupe_gemm_t g;
    const char *why = NULL;
    s_case_t h = s_lower("bi,ij=>bj", TROUPE_PREC_HALF, 2, (int64_t[]){32, 48}, 2,
                         (int64_t[]){48, 40}, 2, (int64_t[]){32, 40}, true);
    cr_assert_eq(s_find(h.proc->body, &g, &why), TROUPE_GEMM_REFUSED);
    cr_assert(strstr(why, "precision") != NULL, "%s", why);
    cr_assert_eq(g.c.tn, h.y);
    /* refused for its precision alone: still described, for targets that tile it */
    cr_assert(g.shape_ok);
    cr_expect(g.m == 32 && g.n == 40 && g.k == 48 && g.a.tn == h.x && g.b.tn == h.w);
    cr_expect(!g.a.trans && !g.b.trans && g.a.ld == 48 && g.b.ld == 40 && g.c.ld == 40);
    cr_expect_eq(g.prec, TROUPE_PREC_HALF);
    /* the CUDA dialect runs it as one tiled kernel, not as a GEMM step */
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(h.proc, TROUPE_CGEN_CUDA, &res), TROUPE_OK);
    cr_expect_not_null(strstr(res->source, "Tiled product, no GEMM step"), "%s", res->source);
    for (size_t i = 0; i < res->nsteps; i++)
        cr_expect_eq(res->steps[i].kind, TROUPE_CGEN_STEP_KERNEL);
    troupe_cgen_result_destroy(&res);
    s_free(&h);
    s_case_t t = s_lower("bi,ij=>bj", TROUPE_PREC_SINGLE, 2, (int64_t[]){4, 4}, 2,
                         (int64_t[]){4, 4}, 2, (int64_t[]){4, 4}, true);
    cr_assert_eq(s_find(t.proc->body, &g, &why), TROUPE_GEMM_REFUSED);
    cr_assert(strstr(why, "too small") != NULL, "%s", why);
    cr_expect(!g.shape_ok);
    s_free(&t);
    /* a row-wise dot product is two loops: not a matrix product at all */
    s_case_t d = s_lower("bi,bi=>b", TROUPE_PREC_SINGLE, 2, (int64_t[]){64, 64}, 2,
                         (int64_t[]){64, 64}, 1, (int64_t[]){64}, true);
    cr_assert_eq(s_find(d.proc->body, &g, &why), TROUPE_GEMM_NO);
    s_free(&d);
    /* an outer product has no reduction */
    s_case_t o = s_lower("i,j=>ij", TROUPE_PREC_SINGLE, 1, (int64_t[]){64}, 1, (int64_t[]){64},
                         2, (int64_t[]){64, 64}, true);
    cr_assert_eq(s_find(o.proc->body, &g, &why), TROUPE_GEMM_NO);
    s_free(&o);
}

Test(gemm_match, loops_over_one_dense_dimension_merge)
{
    /* a linear layer's weight gradient on (B, T, C) input sums over b and t: K = B*T */
    s_case_t w = s_lower("bti,btj=>ij", TROUPE_PREC_SINGLE, 3, (int64_t[]){4, 24, 40}, 3,
                         (int64_t[]){4, 24, 32}, 2, (int64_t[]){40, 32}, true);
    s_expect(&w, 40, 32, 96, w.x, true, 40, w.w, false, 32, 32);
    s_free(&w);
    /* its forward product and input gradient: M = B*T (no batch loop left outside) */
    s_case_t f = s_lower("bti,ij=>btj", TROUPE_PREC_SINGLE, 3, (int64_t[]){4, 24, 40}, 2,
                         (int64_t[]){40, 32}, 3, (int64_t[]){4, 24, 32}, false);
    s_expect(&f, 96, 32, 40, f.x, false, 40, f.w, false, 32, 32);
    s_free(&f);
    s_case_t d = s_lower("btj,ij=>bti", TROUPE_PREC_DOUBLE, 3, (int64_t[]){4, 24, 32}, 2,
                         (int64_t[]){40, 32}, 3, (int64_t[]){4, 24, 40}, true);
    s_expect(&d, 96, 40, 32, d.x, false, 32, d.w, true, 32, 40);
    s_free(&d);
    /* a reduction over two axes of each factor: K = 6*8 */
    s_case_t k = s_lower("ikl,klj=>ij", TROUPE_PREC_SINGLE, 3, (int64_t[]){20, 6, 8}, 3,
                         (int64_t[]){6, 8, 24}, 2, (int64_t[]){20, 24}, true);
    s_expect(&k, 20, 24, 48, k.x, false, 48, k.w, false, 24, 24);
    s_free(&k);
}

Test(gemm_match, loops_that_are_not_one_dense_dimension_do_not_merge)
{
    /* x laid out (T, B, C), the gradient (B, T, C): b and t step them in different orders, so
     * the call's reduction is the longer, t, and b loops around the calls (each accumulating) */
    s_case_t c = s_lower("tbi,btj=>ij", TROUPE_PREC_SINGLE, 3, (int64_t[]){24, 4, 40}, 3,
                         (int64_t[]){4, 24, 32}, 2, (int64_t[]){40, 32}, true);
    troupe_gemm_t g;
    const char *why = NULL;
    cr_assert_eq(s_find(c.proc->body, &g, &why), TROUPE_GEMM_YES, "%s", why);
    cr_assert(g.m == 40 && g.n == 32 && g.k == 24, "m %lld n %lld k %lld", (long long)g.m,
              (long long)g.n, (long long)g.k);
    cr_assert(g.a.trans && g.a.ld == 160 && !g.b.trans && g.b.ld == 32);
    cr_assert(g.nouter == 1 && g.outer_ext[0] == 4 && !troupe_gemm_has_sym(&g, g.outer_syms[0]));
    /* accumulating calls: the zeroing before them cannot become beta = 0 */
    cr_assert(!troupe_gemm_covers_output(&g));
    s_free(&c);
    /* x laid out (T, B, C) in the forward product: the rows are t, b loops around the calls,
     * each writing its own block of y, which the blocks tile (beta = 0 per block) */
    s_case_t f = s_lower("tbi,ij=>btj", TROUPE_PREC_SINGLE, 3, (int64_t[]){24, 4, 40}, 2,
                         (int64_t[]){40, 32}, 3, (int64_t[]){4, 24, 32}, true);
    cr_assert_eq(s_find(f.proc->body, &g, &why), TROUPE_GEMM_YES, "%s", why);
    cr_assert(g.m == 24 && g.n == 32 && g.k == 40 && g.a.ld == 160 && g.nouter == 1);
    cr_assert(troupe_gemm_covers_output(&g));
    s_free(&f);
}

/* A convolution's weight gradient as shifted products (nn/conv.h): per sample and kernel offset
 * (k, l) one call dw[k,l] += dy[b] x[b]^T over the shifted rows of x. The offsets nest inside
 * the batch loop, so that a sample's dy[b] and x[b] stay in cache over its 9 calls; the nest
 * itself runs k, l outside b. */
Test(gemm_match, outer_loops_run_the_batch_outside_the_kernel_offsets)
{
    s_case_t c = s_lower("bop,bi(p+10k+l)=>kloi", TROUPE_PREC_SINGLE, 3, (int64_t[]){2, 16, 78}, 3,
                         (int64_t[]){2, 16, 100}, 4, (int64_t[]){3, 3, 16, 16}, true);
    troupe_gemm_t g;
    const char *why = NULL;
    cr_assert_eq(s_find(c.proc->body, &g, &why), TROUPE_GEMM_YES, "%s", why);
    cr_assert(g.m == 16 && g.n == 16 && g.k == 78 && g.b.trans && g.b.ld == 100,
              "m %lld n %lld k %lld", (long long)g.m, (long long)g.n, (long long)g.k);
    cr_assert_eq(g.nouter, 3);
    cr_assert(g.outer_ext[0] == 2 && g.outer_ext[1] == 3 && g.outer_ext[2] == 3,
              "outer loops of %lld, %lld, %lld iterations", (long long)g.outer_ext[0],
              (long long)g.outer_ext[1], (long long)g.outer_ext[2]);
    /* the batch loop accumulates into the same block of dw; the offsets move it */
    cr_assert_eq(troupe_gemm_sym_stride(g.c.tn, g.c.idcs, g.outer_syms[0]), 0);
    cr_assert_neq(troupe_gemm_sym_stride(g.c.tn, g.c.idcs, g.outer_syms[2]), 0);
    s_free(&c);
}

/* ---- running it ---------------------------------------------------------------------------- */

static uint64_t s_rng = 0x9e3779b97f4a7c15ull;
static double s_uniform(void)
{
    s_rng = s_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(s_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* The CUDA dialect of each form: the product is a GEMM step (or, batched, the batch loop's
 * kernel with the product inside) and the step's call description, computed on the host,
 * agrees with its fallback kernels run on the host (tests/cuda_emu.h) within float rounding. */
Test(gemm_match, cuda_gemm_steps_describe_the_product)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    static const char *const specs[] = {"bi,ij=>bj", "bi,bj=>ij", "bj,ij=>bi", "bi,ij=>jb"};
    static const int64_t dims[][3][2] = {{{24, 40}, {40, 16}, {24, 16}},
                                         {{24, 40}, {24, 16}, {40, 16}},
                                         {{24, 16}, {40, 16}, {24, 40}},
                                         {{24, 40}, {40, 16}, {16, 24}}};
    for (int f = 0; f < 4; f++) {
        for (int fresh = 0; fresh < 2; fresh++) {
            s_case_t c = s_lower(specs[f], TROUPE_PREC_SINGLE, 2, dims[f][0], 2, dims[f][1], 2,
                                 dims[f][2], fresh != 0);
            troupe_cgen_result_t *res = NULL;
            OK(troupe_cgen_emit(c.proc, TROUPE_CGEN_CUDA, &res));
            long step = -1;
            for (size_t s = 0; s < res->nsteps; s++)
                if (res->steps[s].kind == TROUPE_CGEN_STEP_GEMM)
                    step = (long)s;
            cr_assert_geq(step, 0, "%s: no GEMM step in\n%s", specs[f], res->source);
            troupe_emu_t e;
            troupe_emu_open(res, &e);
            float *bufs[2][3];
            void *ptrs[8], *args[8];
            cr_assert_leq(res->nparams, 8);
            const troupe_tnode_t *nodes[3] = {c.x, c.w, c.y};
            for (int run = 0; run < 2; run++) {
                s_rng = 0x9e3779b97f4a7c15ull;
                for (int n = 0; n < 3; n++) {
                    int64_t cnt = troupe_tnode_num_elems(nodes[n]);
                    bufs[run][n] = malloc(sizeof(float) * (size_t)cnt);
                    for (int64_t i = 0; i < cnt; i++)
                        bufs[run][n][i] = (float)s_uniform();
                }
                for (size_t k = 0; k < res->nparams; k++) {
                    for (int n = 0; n < 3; n++)
                        if (res->params[k].tn == nodes[n])
                            ptrs[k] = bufs[run][n];
                    args[k] = &ptrs[k];
                }
                troupe_emu_run(&e, args, TROUPE_EMU_PLANNED, run == 0 ? -1 : step);
            }
            int64_t ny = troupe_tnode_num_elems(c.y);
            for (int64_t i = 0; i < ny; i++)
                cr_assert(fabsf(bufs[0][2][i] - bufs[1][2][i]) <= 1e-5f * 40,
                          "%s fresh=%d: y[%lld] kernels %.9g, GEMM description %.9g", specs[f],
                          fresh, (long long)i, bufs[0][2][i], bufs[1][2][i]);
            for (int run = 0; run < 2; run++)
                for (int n = 0; n < 3; n++)
                    free(bufs[run][n]);
            troupe_emu_close(&e);
            troupe_cgen_result_destroy(&res);
            s_free(&c);
        }
    }
}

typedef enum s_form { S_FORWARD, S_WGRAD, S_XGRAD, S_TOUT, S_BATCHED, S_NFORMS } s_form_t;

static const char *const s_spec[S_NFORMS] = {"bi,ij=>bj", "bi,bj=>ij", "bj,ij=>bi", "bi,ij=>jb",
                                             "xbi,xij=>xbj"};

/* y (m-by-n, or n-by-m for S_TOUT, times 2 batches for S_BATCHED) from x and w as `form`
 * lays them out; y = y0 + x*w when !fresh. Runs on `driver` with the library on or off and
 * returns y's values in `out`. `log` names the log file cgen's lines go to. */
typedef struct s_problem {
    s_form_t form;
    int64_t m, n, k;
    bool fresh;
    double *xv, *wv, *y0;
    int64_t nx, nw, ny;
    bool bf16; /* x and w are bfloat16 nodes (y stays single) */
    bool half; /* x and w are half nodes (y stays single) */
} s_problem_t;

static void s_dims(const s_problem_t *p, int *nd, int64_t dx[3], int64_t dw[3], int64_t dy[3])
{
    int64_t m = p->m, n = p->n, k = p->k;
    *nd = 2;
    switch (p->form) {
    case S_FORWARD:
        memcpy(dx, (int64_t[]){m, k}, 16), memcpy(dw, (int64_t[]){k, n}, 16);
        memcpy(dy, (int64_t[]){m, n}, 16);
        break;
    case S_WGRAD: /* y[i,j] over b: x[b,i] = [k,m], w = d[b,j] = [k,n] */
        memcpy(dx, (int64_t[]){k, m}, 16), memcpy(dw, (int64_t[]){k, n}, 16);
        memcpy(dy, (int64_t[]){m, n}, 16);
        break;
    case S_XGRAD: /* y[b,i] over j: x = d[b,j] = [m,k], w[i,j] = [n,k] */
        memcpy(dx, (int64_t[]){m, k}, 16), memcpy(dw, (int64_t[]){n, k}, 16);
        memcpy(dy, (int64_t[]){m, n}, 16);
        break;
    case S_TOUT:
        memcpy(dx, (int64_t[]){m, k}, 16), memcpy(dw, (int64_t[]){k, n}, 16);
        memcpy(dy, (int64_t[]){n, m}, 16);
        break;
    default:
        *nd = 3;
        memcpy(dx, (int64_t[]){2, m, k}, 24), memcpy(dw, (int64_t[]){2, k, n}, 24);
        memcpy(dy, (int64_t[]){2, m, n}, 24);
        break;
    }
}

/* The two factors of term l of output element (batch z, row i, column j), as `form` lays the
 * operands out. */
static void s_factors(const s_problem_t *p, int z, int64_t i, int64_t j, int64_t l, double *a,
                      double *b)
{
    int64_t m = p->m, n = p->n, k = p->k;
    switch (p->form) {
    case S_WGRAD:
        *a = p->xv[l * m + i], *b = p->wv[l * n + j];
        break;
    case S_XGRAD:
        *a = p->xv[i * k + l], *b = p->wv[j * k + l];
        break;
    case S_BATCHED:
        *a = p->xv[z * m * k + i * k + l], *b = p->wv[z * k * n + l * n + j];
        break;
    default:
        *a = p->xv[i * k + l], *b = p->wv[l * n + j];
        break;
    }
}

/* The product in double on the host, as the einsum spec says. */
static void s_reference(const s_problem_t *p, double *y)
{
    int64_t m = p->m, n = p->n, k = p->k;
    int nb = p->form == S_BATCHED ? 2 : 1;
    for (int64_t i = 0; i < p->ny; i++)
        y[i] = p->fresh ? 0.0 : p->y0[i];
    for (int z = 0; z < nb; z++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0.0;
                for (int64_t l = 0; l < k; l++) {
                    double a, b;
                    s_factors(p, z, i, j, l, &a, &b);
                    acc += (double)(float)a * (double)(float)b;
                }
                int64_t at = p->form == S_TOUT ? j * m + i : z * m * n + i * n + j;
                y[at] += acc;
            }
}

/* The product exactly as the generated loops and the interpreter compute it: in float, each
 * element from its start value adding its k terms in ascending order with one fma each (the
 * optimizer fuses the multiply-add). */
static void s_reference_fma(const s_problem_t *p, double *y)
{
    int64_t m = p->m, n = p->n, k = p->k;
    int nb = p->form == S_BATCHED ? 2 : 1;
    for (int z = 0; z < nb; z++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t at = p->form == S_TOUT ? j * m + i : z * m * n + i * n + j;
                float acc = p->fresh ? 0.0f : (float)p->y0[at];
                for (int64_t l = 0; l < k; l++) {
                    double a, b;
                    s_factors(p, z, i, j, l, &a, &b);
                    acc = fmaf((float)a, (float)b, acc);
                }
                y[at] = acc;
            }
}

static void s_run(const char *driver, const s_problem_t *p, bool library, double *out)
{
    troupe_config_set_gemm_library(library);
    rtu_env_t e;
    rtu_env_open(&e, driver, 1);
    int nd;
    int64_t dx[3], dw[3], dy[3];
    s_dims(p, &nd, dx, dw, dy);
    troupe_prec_t fp = p->bf16   ? TROUPE_PREC_BFLOAT16
                       : p->half ? TROUPE_PREC_HALF
                                 : TROUPE_PREC_SINGLE;
    troupe_tnode_t *x = rtu_node("x", fp, nd, dx);
    troupe_tnode_t *w = rtu_node("w", fp, nd, dw);
    troupe_tnode_t *y = rtu_node("y", TROUPE_PREC_SINGLE, nd, dy);
    rtu_set(x, p->xv);
    rtu_set(w, p->wv);
    rtu_set_hosted(y, 411);
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_asgn_accum_binop(comp, p->fresh, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                               troupe_asgn_node(x), troupe_asgn_node(w), s_spec[p->form], &t));
    troupe_code_t *code = rtu_compile_root(e.b, &comp, t, "gemm_case");
    troupe_context_t *ctx = e.ctx[0];
    troupe_context_retain(ctx);
    rtu_init(&ctx, x);
    rtu_init(&ctx, w);
    if (!p->fresh)
        rtu_put(&ctx, y, p->y0);
    troupe_routine_t *r = NULL;
    OK(troupe_link(ctx, code, &r));
    troupe_event_t *ev = NULL;
    OK(troupe_routine_run(r, &ev));
    OK(troupe_event_sync(ev, 20000 * MS));
    troupe_event_release(&ev);
    OK(troupe_tnode_get_values(y, out, (size_t)p->ny));
    troupe_routine_release(&r);
    troupe_code_release(&code);
    troupe_context_release(&ctx);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
    rtu_env_close(&e);
    troupe_config_set_gemm_library(true);
}

static int64_t s_pick(int64_t lo, int64_t hi)
{
    return lo + (int64_t)((s_uniform() + 1.0) / 2.0 * (double)(hi - lo));
}

Test(gemm_run, library_and_loops_agree_with_the_reference_on_random_shapes, .timeout = 240)
{
#if TROUPE_HAVE_OPENBLAS
    cr_assert(troupe_gemm_library_available(), "built with OpenBLAS but it does not load: %s",
              troupe_gemm_library_name());
#endif
    FOR_EACH_DRIVER(drv)
    {
        for (int form = 0; form < S_NFORMS; form++)
            for (int fresh = 0; fresh < 2; fresh++) {
                s_problem_t p = {(s_form_t)form, s_pick(17, 70), s_pick(17, 70), s_pick(17, 70),
                                 fresh != 0, NULL, NULL, NULL, 0, 0, 0, false, false};
                int nb = form == S_BATCHED ? 2 : 1;
                p.nx = nb * p.m * p.k, p.nw = nb * p.k * p.n, p.ny = nb * p.m * p.n;
                p.xv = malloc(sizeof(double) * (size_t)p.nx);
                p.wv = malloc(sizeof(double) * (size_t)p.nw);
                p.y0 = malloc(sizeof(double) * (size_t)p.ny);
                double *ref = malloc(sizeof(double) * (size_t)p.ny);
                double *lib = malloc(sizeof(double) * (size_t)p.ny);
                double *lib2 = malloc(sizeof(double) * (size_t)p.ny);
                double *gen = malloc(sizeof(double) * (size_t)p.ny);
                double *exact = malloc(sizeof(double) * (size_t)p.ny);
                cr_assert(p.xv && p.wv && p.y0 && ref && lib && lib2 && gen && exact);
                for (int64_t i = 0; i < p.nx; i++)
                    p.xv[i] = s_uniform();
                for (int64_t i = 0; i < p.nw; i++)
                    p.wv[i] = s_uniform();
                for (int64_t i = 0; i < p.ny; i++)
                    p.y0[i] = (double)(float)s_uniform();
                s_reference(&p, ref);
                s_reference_fma(&p, exact);
                s_run(*drv, &p, true, lib);
                s_run(*drv, &p, true, lib2);
                s_run(*drv, &p, false, gen);
                /* float products summed over k terms of size <= 1: error <= ~k * 2^-24 each */
                double tol = 4.0 * (double)p.k * 6e-8 + 1e-6;
                for (int64_t i = 0; i < p.ny; i++) {
                    cr_assert(fabs(lib[i] - ref[i]) <= tol,
                              "%s %s fresh=%d m=%lld n=%lld k=%lld: library y[%lld] = %.9g, "
                              "reference %.9g",
                              *drv, s_spec[form], fresh, (long long)p.m, (long long)p.n,
                              (long long)p.k, (long long)i, lib[i], ref[i]);
                    cr_assert(fabs(gen[i] - ref[i]) <= tol,
                              "%s %s: generated y[%lld] = %.9g, reference %.9g", *drv,
                              s_spec[form], (long long)i, gen[i], ref[i]);
                }
                /* the generated loops (unrolled and jammed) are bit-exact */
                for (int64_t i = 0; i < p.ny; i++)
                    cr_assert(memcmp(&gen[i], &exact[i], sizeof(double)) == 0,
                              "%s %s fresh=%d: generated y[%lld] = %.9g, exact fma order %.9g",
                              *drv, s_spec[form], fresh, (long long)i, gen[i], exact[i]);
                cr_assert(memcmp(lib, lib2, sizeof(double) * (size_t)p.ny) == 0,
                          "%s %s: the library path is not bitwise reproducible run to run",
                          *drv, s_spec[form]);
                free(p.xv), free(p.wv), free(p.y0), free(ref), free(lib), free(lib2), free(gen);
                free(exact);
            }
    }
}


/* A float value rounded to bfloat16 as ir/prec.c does (RNE), back in double. */
static double s_bf16(double v)
{
    return (double)troupe_bfloat16_to_single(troupe_single_to_bfloat16((float)v));
}

/* y (32 x 40, single) := x (32 x 48) w (48 x 40) with x and w in `prec` (bfloat16 or half):
 * matched, calling `entry` with the routine's hooks setter for that precision; with w in
 * single instead, refused (the factors differ in precision) and no `entry` call. */
static void s_small_factors_match(troupe_prec_t prec, const char *routine, const char *entry)
{
    troupe_gemm_t g;
    const char *why = NULL;
    troupe_tnode_t *x = rtu_node("x", prec, 2, (int64_t[]){32, 48});
    troupe_tnode_t *w = rtu_node("w", prec, 2, (int64_t[]){48, 40});
    troupe_tnode_t *ws = rtu_node("ws", TROUPE_PREC_SINGLE, 2, (int64_t[]){48, 40});
    troupe_tnode_t *y = rtu_node("y", TROUPE_PREC_SINGLE, 2, (int64_t[]){32, 40});
    for (int mixed = 0; mixed < 2; mixed++) {
        troupe_asgn_comp_t *comp = NULL;
        troupe_asgn_t *t = NULL;
        troupe_ll_proc_t *proc = NULL;
        OK(troupe_asgn_comp_new(&comp));
        OK(troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                   troupe_asgn_node(x), troupe_asgn_node(mixed ? ws : w),
                                   "bi,ij=>bj", &t));
        troupe_asgn_comp_set_root(comp, t);
        OK(troupe_asgn_lower(comp, routine, &proc));
        OK(troupe_ll_optimize(proc, NULL));
        troupe_asgn_comp_destroy(&comp);
        troupe_gemm_verdict_t v = s_find(proc->body, &g, &why);
        troupe_cgen_result_t *res = NULL;
        OK(troupe_cgen_emit(proc, TROUPE_CGEN_C, &res));
        if (mixed) { /* one small-float and one single factor: no library form */
            cr_assert_eq(v, TROUPE_GEMM_REFUSED);
            cr_assert(strstr(why, "differ in precision") != NULL, "%s", why);
            cr_expect_null(strstr(res->source, entry));
        } else {
            cr_assert_eq(v, TROUPE_GEMM_YES, "refused: %s", why);
            cr_expect_eq(g.prec, TROUPE_PREC_SINGLE);
            cr_expect_eq(g.factor_prec, prec);
            cr_expect(g.m == 32 && g.n == 40 && g.k == 48);
            cr_expect_not_null(strstr(res->source, entry), "%s", res->source);
            cr_expect_not_null(prec == TROUPE_PREC_HALF ? res->gemm_half_hooks_name
                                                        : res->gemm_bf16_hooks_name);
        }
        troupe_cgen_result_destroy(&res);
        troupe_ll_proc_destroy(&proc);
    }
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&ws);
    troupe_tnode_release(&y);
}

/* The same for half (IEEE binary16, RNE). */
static double s_half(double v)
{
    return (double)troupe_half_to_single(troupe_single_to_half((float)v));
}

Test(gemm_match, bfloat16_factors_into_a_single_output_call_the_bf16_library_entry)
{
    troupe_gemm_t g;
    const char *why = NULL;
    s_case_t c = s_lower("bi,ij=>bj", TROUPE_PREC_BFLOAT16, 2, (int64_t[]){32, 48}, 2,
                         (int64_t[]){48, 40}, 2, (int64_t[]){32, 40}, true);
    /* all bfloat16 (the output too): refused, as half is */
    cr_assert_eq(s_find(c.proc->body, &g, &why), TROUPE_GEMM_REFUSED);
    cr_assert(strstr(why, "precision") != NULL, "%s", why);
    s_free(&c);
    s_small_factors_match(TROUPE_PREC_BFLOAT16, "mm_bf16", "troupe_bgemm(");
}

/* The same for half factors: matched, troupe_hgemm, <routine>_gemm_half_hooks. */
Test(gemm_match, half_factors_into_a_single_output_call_the_half_library_entry)
{
    s_small_factors_match(TROUPE_PREC_HALF, "mm_half", "troupe_hgemm(");
}

/* bfloat16 x bfloat16 -> single, every form, fresh and accumulating, odd and even k, on the
 * cpu driver. Bounds, per output element with S = |y0| + sum_l |a_l b_l| over the bf16 factors:
 *  - generated loops: bit for bit the interpreter's order (the factors widened exactly, one fma
 *    per term in ascending l);
 *  - library (libxsmm's VDPBF16PS kernel or the widened sgemm): each product of two bfloat16
 *    values is exact in fp32 (8 + 8 significant bits), so it differs from the loops only by
 *    the order of k + 1 fp32 additions: |lib - loops| <= 2 (k + 1) 2^-24 S;
 *  - against the product of the unrounded float inputs (double reference): rounding each
 *    factor to bfloat16 (unit roundoff 2^-8) changes a product by at most (2^-7 + 2^-16) |ab|,
 *    plus the fp32 sums: |lib - ref| <= (2^-7 + 2^-16) sum |ab| + 2 (k + 1) 2^-24 S. */
static void s_narrow_factors(troupe_prec_t fp)
{
    bool half = fp == TROUPE_PREC_HALF;
    /* each factor's rounding: unit roundoff 2^-8 (bfloat16) or 2^-11 (half) */
    double round = half ? ldexp(1.0, -10) + ldexp(1.0, -22) : ldexp(1.0, -7) + ldexp(1.0, -16);
    for (int form = 0; form < S_NFORMS; form++)
        for (int fresh = 0; fresh < 2; fresh++) {
            s_problem_t p = {(s_form_t)form, s_pick(17, 70), s_pick(17, 70),
                             s_pick(17, 70) | (fresh ? 1 : 0), /* an odd k pads a VNNI pair */
                             fresh != 0, NULL, NULL, NULL, 0, 0, 0, !half, half};
            int nb = form == S_BATCHED ? 2 : 1;
            p.nx = nb * p.m * p.k, p.nw = nb * p.k * p.n, p.ny = nb * p.m * p.n;
            size_t ny = (size_t)p.ny;
            p.xv = malloc(sizeof(double) * (size_t)p.nx);
            p.wv = malloc(sizeof(double) * (size_t)p.nw);
            p.y0 = malloc(sizeof(double) * ny);
            double *ref = malloc(sizeof(double) * ny), *exact = malloc(sizeof(double) * ny);
            double *lib = malloc(sizeof(double) * ny), *lib2 = malloc(sizeof(double) * ny);
            double *gen = malloc(sizeof(double) * ny), *sab = malloc(sizeof(double) * ny);
            cr_assert(p.xv && p.wv && p.y0 && ref && exact && lib && lib2 && gen && sab);
            /* float inputs (the host sets them through single precision exactly) */
            for (int64_t i = 0; i < p.nx; i++)
                p.xv[i] = (double)(float)s_uniform();
            for (int64_t i = 0; i < p.nw; i++)
                p.wv[i] = (double)(float)s_uniform();
            for (int64_t i = 0; i < p.ny; i++)
                p.y0[i] = (double)(float)s_uniform();
            s_reference(&p, ref); /* unrounded float factors, double sums */
            double *xr = p.xv, *wr = p.wv;
            double *xb = malloc(sizeof(double) * (size_t)p.nx);
            double *wb = malloc(sizeof(double) * (size_t)p.nw);
            cr_assert(xb && wb);
            for (int64_t i = 0; i < p.nx; i++)
                xb[i] = half ? s_half(xr[i]) : s_bf16(xr[i]);
            for (int64_t i = 0; i < p.nw; i++)
                wb[i] = half ? s_half(wr[i]) : s_bf16(wr[i]);
            p.xv = xb, p.wv = wb;
            s_reference_fma(&p, exact); /* the interpreter's order over the bf16 factors */
            /* S per element: |y0| + sum |a b| over the bf16 factors (s_reference over |.|) */
            for (int64_t i = 0; i < p.nx; i++)
                xb[i] = fabs(xb[i]);
            for (int64_t i = 0; i < p.nw; i++)
                wb[i] = fabs(wb[i]);
            double *y0 = p.y0, *ya = malloc(sizeof(double) * ny);
            cr_assert(ya);
            for (int64_t i = 0; i < p.ny; i++)
                ya[i] = fabs(y0[i]);
            p.y0 = ya;
            s_reference(&p, sab);
            p.y0 = y0, p.xv = xr, p.wv = wr; /* the nodes round the float inputs themselves */
            free(xb), free(wb), free(ya);
            s_run("cpu", &p, false, gen);
            s_run("cpu", &p, true, lib);
            s_run("cpu", &p, true, lib2);
            double order = 2.0 * (double)(p.k + 1) * ldexp(1.0, -24);
            for (int64_t i = 0; i < p.ny; i++) {
                cr_assert(memcmp(&gen[i], &exact[i], sizeof(double)) == 0,
                          "%s fresh=%d: generated y[%lld] = %.9g, the interpreter's order %.9g",
                          s_spec[form], fresh, (long long)i, gen[i], exact[i]);
                cr_assert(fabs(lib[i] - exact[i]) <= order * sab[i],
                          "%s fresh=%d m=%lld n=%lld k=%lld: library y[%lld] = %.9g, loops "
                          "%.9g, sum-order bound %.3g",
                          s_spec[form], fresh, (long long)p.m, (long long)p.n, (long long)p.k,
                          (long long)i, lib[i], exact[i], order * sab[i]);
                cr_assert(fabs(lib[i] - ref[i]) <= round * sab[i] * 1.01 + order * sab[i],
                          "%s fresh=%d: library y[%lld] = %.9g, unrounded product %.9g",
                          s_spec[form], fresh, (long long)i, lib[i], ref[i]);
            }
            cr_assert(memcmp(lib, lib2, sizeof(double) * ny) == 0,
                      "%s: the %s library path is not bitwise reproducible run to run",
                      s_spec[form], troupe_prec_name(fp));
            free(p.xv), free(p.wv), free(p.y0), free(ref), free(exact), free(lib), free(lib2);
            free(gen), free(sab);
        }
}

Test(gemm_run, bfloat16_factors_agree_with_the_interpreter_within_their_bounds, .timeout = 240)
{
    s_narrow_factors(TROUPE_PREC_BFLOAT16);
}

/* half x half -> single: as bfloat16 with half's rounding (11 significant bits: each product of
 * two halves, 22 bits, is exact in fp32; |lib - ref| <= (2^-10 + 2^-22) sum |ab| + the order
 * term); the library widens the factors and calls the sgemm (libxsmm has no CPU fp16 kernel). */
Test(gemm_run, half_factors_agree_with_the_interpreter_within_their_bounds, .timeout = 240)
{
    s_narrow_factors(TROUPE_PREC_HALF);
}

Test(gemm_run, the_debug_log_says_which_contractions_call_the_library_and_why_not)
{
    char path[256];
    snprintf(path, sizeof path, "%s/gemm-log-%d.txt", TROUPE_TEST_BUILD_DIR, (int)getpid());
    unlink(path);
    OK(troupe_log_set_file(path));
    OK(troupe_log_configure("debug:ir"));
    rtu_env_t e;
    rtu_env_open(&e, "cpu", 1);
    const char *names[3] = {"gemm_log_half", "gemm_log_single", "gemm_log_acc"};
    troupe_prec_t precs[3] = {TROUPE_PREC_HALF, TROUPE_PREC_SINGLE, TROUPE_PREC_SINGLE};
    for (int c = 0; c < 3; c++) {
        troupe_tnode_t *x = rtu_node("x", precs[c], 2, (int64_t[]){32, 48});
        troupe_tnode_t *w = rtu_node("w", precs[c], 2, (int64_t[]){48, 40});
        troupe_tnode_t *y = rtu_node("y", precs[c], 2, (int64_t[]){32, 40});
        troupe_asgn_comp_t *comp = NULL;
        troupe_asgn_t *t = NULL;
        OK(troupe_asgn_comp_new(&comp));
        OK(troupe_asgn_accum_binop(comp, c < 2, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                   troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &t));
        troupe_code_t *code = rtu_compile_root(e.b, &comp, t, names[c]);
        troupe_code_release(&code);
        troupe_tnode_release(&x);
        troupe_tnode_release(&w);
        troupe_tnode_release(&y);
    }
    rtu_env_close(&e);
    OK(troupe_log_configure("warn"));
    OK(troupe_log_set_file(NULL));
    cr_assert(rtu_file_has(path, "cgen of gemm_log_half: the contraction into"),
              "no fallback line in %s", path);
    cr_assert(rtu_file_has(path, "stays generated loops: the precision has no library GEMM"));
    /* a fresh product overwrites its output (the zeroing becomes beta = 0); an accumulation
     * adds into it */
    cr_assert(rtu_file_has(path, "cgen of gemm_log_single: "));
    cr_assert(rtu_file_has(path, "_y = "), "no overwriting call");
    cr_assert(rtu_file_has(path, "cgen of gemm_log_acc: "));
    cr_assert(rtu_file_has(path, "_y += "), "no accumulating call");
    cr_assert(rtu_file_has(path, "(m=32 n=40 k=48) calls the GEMM library"));
    unlink(path);
}

Test(gemm_run, troupe_names_the_library)
{
    const char *name = troupe_gemm_library_name();
    cr_assert_not_null(name);
#if TROUPE_HAVE_OPENBLAS
    cr_assert(strncmp(name, "OpenBLAS ", 9) == 0, "%s", name);
    cr_assert(strstr(name, "1 thread per stream") != NULL, "%s", name);
    cr_assert_not_null(troupe_gemm_library_sgemm());
#else
    cr_assert(strncmp(name, "none", 4) == 0, "%s", name);
    cr_assert_null(troupe_gemm_library_sgemm());
#endif
}

/* The library's A B^T entry on one shape: padded leading dimensions, beta 0 and 1, against a
 * double-precision reference within float rounding; the padding untouched; twice the same
 * call gives the same bits. */
static void s_check_a_times_b_transposed(int m, int n, int k, int lda, int ldb, int ldc,
                                         float alpha)
{
    troupe_sgemm_fn f = troupe_gemm_library_sgemm();
    const size_t na = (size_t)(m * lda), nb = (size_t)(n * ldb), nc = (size_t)(m * ldc);
    float *a = malloc(sizeof(float) * na), *b = malloc(sizeof(float) * nb);
    float *c = malloc(sizeof(float) * nc), *c2 = malloc(sizeof(float) * nc);
    cr_assert(a != NULL && b != NULL && c != NULL && c2 != NULL);
    for (int i = 0; i < m * lda; i++)
        a[i] = (float)((int64_t)i * 7919 % 201 - 100) / 64.0f;
    for (int i = 0; i < n * ldb; i++)
        b[i] = (float)((int64_t)i * 104729 % 193 - 96) / 32.0f;
    for (int beta = 0; beta <= 1; beta++) {
        for (int i = 0; i < m * ldc; i++)
            c[i] = c2[i] = (float)(i % 13) - 6.0f;
        f(0, 1, m, n, k, alpha, a, lda, b, ldb, (float)beta, c, ldc);
        f(0, 1, m, n, k, alpha, a, lda, b, ldb, (float)beta, c2, ldc);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < ldc; j++) {
                const float c0 = (float)((i * ldc + j) % 13) - 6.0f;
                if (j >= n) {
                    cr_assert_eq(c[i * ldc + j], c0, "%dx%dx%d beta %d: padding (%d, %d) written",
                                 m, n, k, beta, i, j);
                    continue;
                }
                double want = 0.0, mag = 0.0;
                for (int kk = 0; kk < k; kk++) {
                    want += (double)a[i * lda + kk] * b[j * ldb + kk];
                    mag += fabs((double)a[i * lda + kk] * b[j * ldb + kk]);
                }
                want = alpha * want + (beta ? c0 : 0.0);
                mag = fabs(alpha) * mag + (beta ? fabs(c0) : 0.0);
                cr_assert(fabs(c[i * ldc + j] - want) <= 1e-5 * mag + 1e-6,
                          "%dx%dx%d beta %d: c[%d][%d] = %.9g, want %.9g", m, n, k, beta, i, j,
                          c[i * ldc + j], want);
            }
        cr_assert(memcmp(c, c2, sizeof(float) * nc) == 0, "%dx%dx%d beta %d: two calls differ", m,
                  n, k, beta);
    }
    free(a);
    free(b);
    free(c);
    free(c2);
}

/* libxsmm runs A B^T through a transposed copy of B: a small odd shape, and a convolution
 * weight gradient's shapes (m, n of 32-64, k of several hundred with a tail past a multiple
 * of 16, alpha not 1). */
Test(gemm_run, library_a_times_b_transposed_with_padded_leading_dimensions)
{
    if (troupe_gemm_library_sgemm() == NULL)
        cr_skip_test("no GEMM library in this build");
    s_check_a_times_b_transposed(37, 45, 29, 33, 31, 50, 1.0f);
    s_check_a_times_b_transposed(32, 36, 333, 340, 350, 41, 0.5f);
    s_check_a_times_b_transposed(64, 32, 640, 640, 676, 32, 1.0f);
}

/* y (=+ when fresh, else +=) x * w over `spec` on the cpu driver, the library on or off, y
 * holding y0 before: y's values into out. */
static void s_run_spec(const char *spec, const int64_t *dx, int nw, const int64_t *dw, int ny,
                       const int64_t *dy, bool fresh, const double *xv, const double *wv,
                       const double *y0, bool library, double *out)
{
    troupe_config_set_gemm_library(library);
    rtu_env_t e;
    rtu_env_open(&e, "cpu", 1);
    troupe_tnode_t *x = rtu_node("x", TROUPE_PREC_SINGLE, 3, dx);
    troupe_tnode_t *w = rtu_node("w", TROUPE_PREC_SINGLE, nw, dw);
    troupe_tnode_t *y = rtu_node("y", TROUPE_PREC_SINGLE, ny, dy);
    rtu_set(x, xv);
    rtu_set(w, wv);
    rtu_set_hosted(y, 412);
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_asgn_accum_binop(comp, fresh, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                               troupe_asgn_node(x), troupe_asgn_node(w), spec, &t));
    troupe_code_t *code = rtu_compile_root(e.b, &comp, t, "gemm_merged");
    troupe_context_t *ctx = e.ctx[0];
    troupe_context_retain(ctx);
    rtu_init(&ctx, x);
    rtu_init(&ctx, w);
    rtu_put(&ctx, y, y0); /* fresh: what the zeroing must clear */
    troupe_routine_t *r = NULL;
    OK(troupe_link(ctx, code, &r));
    troupe_event_t *ev = NULL;
    OK(troupe_routine_run(r, &ev));
    OK(troupe_event_sync(ev, 20000 * MS));
    troupe_event_release(&ev);
    OK(troupe_tnode_get_values(y, out, (size_t)troupe_tnode_num_elems(y)));
    troupe_routine_release(&r);
    troupe_code_release(&code);
    troupe_context_release(&ctx);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
    rtu_env_close(&e);
    troupe_config_set_gemm_library(true);
}

Test(gemm_run, merged_loops_agree_with_the_interpreter, .timeout = 240)
{
    /* weight gradient, forward and input gradient over (B, T, C); a layout that does not
     * merge; each fresh and accumulating. B*T = 60, C = 36 and 28. */
    static const char *const specs[] = {"bti,btj=>ij", "bti,ij=>btj", "btj,ij=>bti",
                                        "tbi,btj=>ij", "tbi,ij=>btj"};
    static const int64_t dims[][3][3] = {{{3, 20, 36}, {3, 20, 28}, {36, 28}},
                                         {{3, 20, 36}, {36, 28}, {3, 20, 28}},
                                         {{3, 20, 28}, {36, 28}, {3, 20, 36}},
                                         {{20, 3, 36}, {3, 20, 28}, {36, 28}},
                                         {{20, 3, 36}, {36, 28}, {3, 20, 28}}};
    static const int nws[] = {3, 2, 2, 3, 2}, nys[] = {2, 3, 3, 2, 3};
    static const int64_t ks[] = {60, 36, 28, 60, 36};
    for (int f = 0; f < 5; f++)
        for (int fresh = 0; fresh < 2; fresh++) {
            s_case_t c = s_lower(specs[f], TROUPE_PREC_SINGLE, 3, dims[f][0], nws[f], dims[f][1],
                                 nys[f], dims[f][2], fresh != 0);
            troupe_gemm_t g;
            const char *why = NULL;
            troupe_gemm_verdict_t v = s_find(c.proc->body, &g, &why);
            if (f < 3)
                cr_assert(v == TROUPE_GEMM_YES && g.m * g.n * g.k == 60 * 36 * 28,
                          "%s: not one merged product (verdict %d: %s)", specs[f], (int)v, why);
            else
                cr_assert(v == TROUPE_GEMM_YES && (g.k == 20 || g.m == 20) && g.nouter == 1,
                          "%s", specs[f]);
            const troupe_tnode_t *nodes[3] = {c.x, c.w, c.y};
            double *vals[3];
            float *fv[3];
            int64_t cnt[3];
            for (int n = 0; n < 3; n++) {
                cnt[n] = troupe_tnode_num_elems(nodes[n]);
                vals[n] = malloc(sizeof(double) * (size_t)cnt[n]);
                fv[n] = malloc(sizeof(float) * (size_t)cnt[n]);
                cr_assert(vals[n] && fv[n]);
                for (int64_t i = 0; i < cnt[n]; i++) {
                    vals[n][i] = (double)(float)s_uniform();
                    fv[n][i] = (float)vals[n][i];
                }
            }
            troupe_interp_buffer_t ib[3];
            for (int n = 0; n < 3; n++)
                ib[n] = (troupe_interp_buffer_t){nodes[n], fv[n]};
            troupe_interp_args_t args = {ib, 3, NULL, 0, NULL};
            cr_assert_eq(troupe_interp_run(c.proc, &args), TROUPE_OK, "%s", troupe_last_error());
            double *lib = malloc(sizeof(double) * (size_t)cnt[2]);
            double *gen = malloc(sizeof(double) * (size_t)cnt[2]);
            cr_assert(lib && gen);
            for (int lib_on = 0; lib_on < 2; lib_on++)
                s_run_spec(specs[f], dims[f][0], nws[f], dims[f][1], nys[f], dims[f][2],
                           fresh != 0, vals[0], vals[1], vals[2], lib_on != 0, lib_on ? lib : gen);
            double tol = 4.0 * (double)ks[f] * 6e-8 + 1e-6;
            for (int64_t i = 0; i < cnt[2]; i++) {
                cr_assert(fabs(lib[i] - fv[2][i]) <= tol,
                          "%s fresh=%d: library y[%lld] = %.9g, interpreter %.9g", specs[f],
                          fresh, (long long)i, lib[i], (double)fv[2][i]);
                cr_assert(fabs(gen[i] - fv[2][i]) <= tol,
                          "%s fresh=%d: loops y[%lld] = %.9g, interpreter %.9g", specs[f], fresh,
                          (long long)i, gen[i], (double)fv[2][i]);
            }
            for (int n = 0; n < 3; n++)
                free(vals[n]), free(fv[n]);
            free(lib), free(gen);
            s_free(&c);
        }
}

/* troupe_bgemm called directly, every transposition, odd and even k, leading dimensions past
 * the extents, fresh and accumulating, with shapes past the repacking's 8 x 8 register blocks
 * and 64 x 64 cache blocks and their edges: against the double-precision product of the same
 * bfloat16 values within the fp32 sum-order bound 2 (k + 1) 2^-24 S per element,
 * S = |c0| + sum |a b| (each product of two bfloat16 values is exact in fp32). */
Test(gemm_library, bf16_entry_agrees_with_the_exact_product_for_every_transposition)
{
    troupe_bgemm_fn bgemm = troupe_gemm_library_bgemm();
    if (bgemm == NULL) {
        cr_skip_test("no GEMM library in this build");
        return;
    }
    const int64_t m = 75, n = 133, ld_pad = 3; /* odd leading dimensions */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int64_t k = 136; k <= 137; k++) {
                const int64_t lda = (ta ? m : k) + ld_pad, ldb = (tb ? k : n) + ld_pad;
                const int64_t ldc = n + ld_pad, na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb;
                uint16_t *a = malloc(sizeof *a * (size_t)na), *b = malloc(sizeof *b * (size_t)nb);
                float *c = malloc(sizeof *c * (size_t)(m * ldc));
                float *c0 = malloc(sizeof *c0 * (size_t)(m * ldc));
                cr_assert(a && b && c && c0);
                for (int64_t i = 0; i < na; i++)
                    a[i] = troupe_single_to_bfloat16((float)s_uniform());
                for (int64_t i = 0; i < nb; i++)
                    b[i] = troupe_single_to_bfloat16((float)s_uniform());
                for (int64_t i = 0; i < m * ldc; i++)
                    c0[i] = (float)s_uniform();
                for (int beta = 0; beta < 2; beta++) {
                    memcpy(c, c0, sizeof *c * (size_t)(m * ldc));
                    bgemm(ta, tb, m, n, k, a, lda, b, ldb, (float)beta, c, ldc);
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            double v = beta ? c0[i * ldc + j] : 0.0, s = fabs(v);
                            for (int64_t l = 0; l < k; l++) {
                                double x = troupe_bfloat16_to_single(
                                    ta ? a[l * lda + i] : a[i * lda + l]);
                                double y = troupe_bfloat16_to_single(
                                    tb ? b[j * ldb + l] : b[l * ldb + j]);
                                v += x * y;
                                s += fabs(x * y);
                            }
                            double bound = 2.0 * (double)(k + 1) * ldexp(1.0, -24) * s;
                            cr_assert(fabs(c[i * ldc + j] - v) <= bound,
                                      "ta=%d tb=%d k=%lld beta=%d: c[%lld][%lld] = %.9g, "
                                      "exact %.9g, bound %.3g",
                                      ta, tb, (long long)k, beta, (long long)i, (long long)j,
                                      c[i * ldc + j], v, bound);
                        }
                    for (int64_t i = 0; i < m; i++) /* the padding between rows untouched */
                        for (int64_t j = n; j < ldc; j++)
                            cr_assert(memcmp(&c[i * ldc + j], &c0[i * ldc + j],
                                             sizeof(float)) == 0);
                }
                free(a), free(b), free(c), free(c0);
            }
}

/* ---- B^T packed once for shifted A B^T calls (compiler/cgen.c, s_bt_pack_t) --------------- */

/* A convolution's weight gradient as shifted products (nn/conv.h) on 8 x 8 padded inputs, a
 * 3 x 3 kernel, 6 x 6 outputs: per sample b and offset (k, l), dw[k,l] += dy[b] x[b]^T over
 * the rows of x shifted by 8k + l. dy (2, 16, 46): L = 5*8 + 6 = 46 wide cells; x (2, 24, 64):
 * the shifted ranges [8k + l, 8k + l + 46) cover [0, 64) whole. */
#define S_SHIFT_SPEC "bop,bi(p+8k+l)=>kloi"
static const int64_t s_shift_dy[3] = {2, 16, 46}, s_shift_x[3] = {2, 24, 64},
                     s_shift_dw[4] = {3, 3, 16, 24};

static size_t s_count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The text of the last "for (" line before `at` in src, or "". */
static void s_loop_before(const char *src, const char *at, char *line, size_t cap)
{
    const char *last = NULL;
    for (const char *p = strstr(src, "for ("); p != NULL && p < at; p = strstr(p + 1, "for ("))
        last = p;
    line[0] = '\0';
    if (last != NULL) {
        const char *eol = strchr(last, '\n');
        size_t n = eol != NULL ? (size_t)(eol - last) : strlen(last);
        snprintf(line, cap, "%.*s", (int)(n < cap ? n : cap - 1), last);
    }
}

Test(gemm_match, shifted_b_transposed_products_pack_b_once_per_sample)
{
    s_case_t c =
        s_lower(S_SHIFT_SPEC, TROUPE_PREC_SINGLE, 3, s_shift_dy, 3, s_shift_x, 4, s_shift_dw, true);
    troupe_gemm_t g;
    const char *why = NULL;
    cr_assert_eq(s_find(c.proc->body, &g, &why), TROUPE_GEMM_YES, "%s", why);
    cr_assert(g.b.trans && !g.a.trans && g.k == 46 && g.b.ld == 64 && g.nouter == 3);
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(c.proc, TROUPE_CGEN_C, &res), TROUPE_OK, "%s",
                 troupe_last_error());
    const char *src = res->source;
    cr_assert_not_null(res->gemm_pack_hooks_name);
    /* one pack in the code, inside the batch loop (2 samples), around the offsets' loops (3) */
    cr_assert_eq(s_count(src, "troupe_spack_bt(2"), 0, "%s", src);
    cr_assert_eq(s_count(src, "troupe_spack_bt(16, 24, 46, 64, 46, "), 1, "%s", src);
    const char *pack = strstr(src, "B^T packed once for the 9 calls inside");
    cr_assert_not_null(pack, "%s", src);
    char line[256];
    s_loop_before(src, pack, line, sizeof line);
    cr_assert(strstr(line, " < 2; ") != NULL, "the pack is not inside the batch loop: %s\n%s", line,
              src);
    const char *next = strstr(pack, "for (");
    cr_assert(next != NULL && strncmp(strchr(next, '<'), "< 3; ", 5) == 0,
              "the offsets' loops are not inside the pack's block:\n%s", src);
    /* the calls on the pack are untransposed with ldb = n; the per-call form stays after them */
    cr_assert(strstr(src, "troupe_sgemm(0, 0, 16, 24, 46, 1.0f, ") != NULL, "%s", src);
    cr_assert(strstr(src, ", 24, 1.0f, ") != NULL, "%s", src);
    cr_assert(strstr(src, "troupe_sgemm(0, 1, 16, 24, 46, 1.0f, ") != NULL, "%s", src);
    /* split into units, the hook reaches every part's copy of troupe_spack_bt */
    char **units = NULL;
    size_t nunits = 0;
    cr_assert_eq(troupe_cgen_c_split(res, 1, &units, &nunits), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_gt(nunits, 1);
    for (size_t k = 1; k < nunits; k++) {
        char call[64], def[128];
        snprintf(call, sizeof call, "mm__p%zu_gemm_pack_hooks(f);", k);
        snprintf(def, sizeof def,
                 "mm__p%zu_gemm_pack_hooks(troupe_spack_bt_fn f)\n{\n    troupe_spack_bt = f;", k);
        cr_assert_not_null(strstr(units[0], call), "%s\n%s", call, units[0]);
        cr_assert_not_null(strstr(units[k], def), "%s\n%s", def, units[k]);
    }
    troupe_cgen_c_units_free(&units, nunits);
    troupe_cgen_result_destroy(&res);
    s_free(&c);
}

Test(gemm_match, shifted_ranges_with_a_gap_are_not_packed)
{
    /* one offset loop of stride 40 over calls of k = 30: [0, 30), [40, 70), [80, 110) leave
     * gaps, so a pack would read what no call reads: each call transposes its own B */
    s_case_t c = s_lower("bop,bi(p+40k)=>koi", TROUPE_PREC_SINGLE, 3, (int64_t[]){2, 16, 30}, 3,
                         (int64_t[]){2, 24, 112}, 3, (int64_t[]){3, 16, 24}, true);
    troupe_gemm_t g;
    const char *why = NULL;
    cr_assert_eq(s_find(c.proc->body, &g, &why), TROUPE_GEMM_YES, "%s", why);
    cr_assert(g.b.trans && g.k == 30 && g.nouter == 2, "k %lld nouter %d", (long long)g.k,
              g.nouter);
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(c.proc, TROUPE_CGEN_C, &res), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_null(strstr(res->source, "troupe_spack_bt("), "%s", res->source);
    cr_assert_null(res->gemm_pack_hooks_name);
    cr_assert(strstr(res->source, "troupe_sgemm(0, 1, 16, 24, 30, 1.0f, ") != NULL, "%s",
              res->source);
    troupe_cgen_result_destroy(&res);
    s_free(&c);
    /* with a second offset loop of stride 1 inside it, [l, l + 30) for l < 3 is contiguous:
     * that loop's 3 calls share one pack (per sample and k), the gapped loop stays outside */
    c = s_lower("bop,bi(p+40k+l)=>kloi", TROUPE_PREC_SINGLE, 3, (int64_t[]){2, 16, 30}, 3,
                (int64_t[]){2, 24, 112}, 4, (int64_t[]){3, 3, 16, 24}, true);
    cr_assert_eq(troupe_cgen_emit(c.proc, TROUPE_CGEN_C, &res), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_not_null(strstr(res->source, "B^T packed once for the 3 calls inside"), "%s",
                       res->source);
    cr_assert_eq(s_count(res->source, "troupe_spack_bt(16, 24, 30, 32, 30, "), 1, "%s",
                 res->source);
    troupe_cgen_result_destroy(&res);
    s_free(&c);
}

typedef void (*s_entry_fn)(void **);
typedef void (*s_hooks_fn)(troupe_sgemm_fn, troupe_dgemm_fn);
typedef void (*s_pack_hooks_fn)(troupe_spack_bt_fn);

/* Compiles a generated source into a fresh directory under the build tree (named after tag;
 * the caller removes it) and loads it. */
static void *s_load(const troupe_cgen_result_t *res, const char *tag, char *dir, size_t cap)
{
    char path[320], lib[320], cmd[1024];
    snprintf(dir, cap, "%s/gemm-%s-XXXXXX", TROUPE_TEST_BUILD_DIR, tag);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/u.c", dir);
    snprintf(lib, sizeof lib, "%s/u.so", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(res->source, 1, res->source_len, f), res->source_len);
    cr_assert_eq(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "cc -std=c11 -O2 -fPIC -shared -o %s %s -lm", lib, path);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(h, "%s", dlerror());
    return h;
}

/* Closes a unit s_load opened and removes its directory. */
static void s_unload(void *h, const char *dir)
{
    char cmd[300];
    dlclose(h);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* Runs a loaded unit's entry with each parameter bound to the buffer of its node
 * (nodes[i] -> bufs[i], n of them). */
static void s_run_unit(s_entry_fn entry, const troupe_cgen_result_t *res,
                       const troupe_tnode_t *const *nodes, float *const *bufs, int n)
{
    void *argv[8];
    cr_assert_leq(res->nparams, 8);
    for (size_t p = 0; p < res->nparams; p++)
        for (int i = 0; i < n; i++)
            if (res->params[p].tn == nodes[i])
                argv[p] = bufs[i];
    entry(argv);
}

/* The packed calls against the per-call transposes (the pack hook set to NULL) bit for bit, and
 * both against the interpreter within float rounding: the generated code compiled and loaded
 * here, so that the test sets the hooks itself. */
Test(gemm_run, packed_shifted_products_equal_the_per_call_transposes_bit_for_bit)
{
    troupe_spack_bt_fn pack = troupe_gemm_library_spack_bt();
    if (troupe_gemm_library_sgemm() == NULL || pack == NULL) {
        cr_skip_test("no libxsmm A B^T path in this build: nothing is packed");
        return;
    }
    s_case_t c =
        s_lower(S_SHIFT_SPEC, TROUPE_PREC_SINGLE, 3, s_shift_dy, 3, s_shift_x, 4, s_shift_dw, true);
    const troupe_tnode_t *nodes[3] = {c.x, c.w, c.y};
    float *ref[3], *per_call[3], *packed[3];
    int64_t cnt[3];
    for (int n = 0; n < 3; n++) {
        cnt[n] = troupe_tnode_num_elems(nodes[n]);
        ref[n] = malloc(sizeof(float) * (size_t)cnt[n]);
        per_call[n] = malloc(sizeof(float) * (size_t)cnt[n]);
        packed[n] = malloc(sizeof(float) * (size_t)cnt[n]);
        cr_assert(ref[n] && per_call[n] && packed[n]);
        for (int64_t i = 0; i < cnt[n]; i++)
            ref[n][i] = per_call[n][i] = packed[n][i] = (float)s_uniform();
    }
    /* the pack the calls will use holds x[0]^T (64 x 24): the library takes the shape */
    const float *bt = pack(16, 24, 46, 64, 46, per_call[1], 64, 1.0f, 24);
    cr_assert_not_null(bt, "the library declines the pack for the test's shape");
    for (int64_t j = 0; j < 24; j++)
        for (int64_t q = 0; q < 64; q++)
            cr_assert_eq(bt[q * 24 + j], per_call[1][j * 64 + q], "pack[%lld][%lld]", (long long)q,
                         (long long)j);
    troupe_interp_buffer_t ib[3];
    for (int n = 0; n < 3; n++)
        ib[n] = (troupe_interp_buffer_t){nodes[n], ref[n]};
    troupe_interp_args_t args = {ib, 3, NULL, 0, NULL};
    cr_assert_eq(troupe_interp_run(c.proc, &args), TROUPE_OK, "%s", troupe_last_error());

    troupe_cgen_result_t *res = NULL;
    OK(troupe_cgen_emit(c.proc, TROUPE_CGEN_C, &res));
    cr_assert_not_null(res->gemm_pack_hooks_name);
    char dir[256];
    void *h = s_load(res, "pack", dir, sizeof dir);
    s_entry_fn entry;
    s_hooks_fn hooks;
    s_pack_hooks_fn pack_hooks;
    *(void **)&entry = dlsym(h, res->entry_name);
    *(void **)&hooks = dlsym(h, res->gemm_hooks_name);
    *(void **)&pack_hooks = dlsym(h, res->gemm_pack_hooks_name);
    cr_assert(entry != NULL && hooks != NULL && pack_hooks != NULL);
    hooks(troupe_gemm_library_sgemm(), troupe_gemm_library_dgemm());
    cr_assert_leq(res->nparams, 3);
    for (int run = 0; run < 2; run++) { /* the pack hook off, then on */
        float **bufs = run == 0 ? per_call : packed;
        pack_hooks(run == 0 ? NULL : pack);
        s_run_unit(entry, res, nodes, bufs, 3);
    }
    for (int64_t i = 0; i < cnt[2]; i++) {
        cr_assert(memcmp(&packed[2][i], &per_call[2][i], sizeof(float)) == 0,
                  "dw[%lld]: packed %.9g, per-call transposes %.9g", (long long)i,
                  (double)packed[2][i], (double)per_call[2][i]);
        /* 2 samples x 46 terms of |dy x| < 1 each, summed in another order */
        cr_assert(fabs((double)packed[2][i] - ref[2][i]) <= 4.0 * 92 * 6e-8 + 1e-6,
                  "dw[%lld]: packed %.9g, interpreter %.9g", (long long)i, (double)packed[2][i],
                  (double)ref[2][i]);
    }
    s_unload(h, dir);
    troupe_cgen_result_destroy(&res);
    for (int n = 0; n < 3; n++)
        free(ref[n]), free(per_call[n]), free(packed[n]);
    s_free(&c);
}

/* A convolution's input gradient as shifted products (nn/conv.h), the transpose of
 * S_SHIFT_SPEC: per sample b and offset (k, l), dx[b] rows shifted by 8k + l += w[k,l]^T dy[b].
 * The calls of one sample accumulate into its own slice of dx (24 x 64 elements), so a fresh
 * dx is zeroed slice by slice inside the batch loop, just before that sample's calls, not as a
 * whole first; accumulating, nothing is zeroed. Both against the interpreter, library on and
 * off, dx holding other values before. */
Test(gemm_run, accumulating_calls_zero_their_own_slice_first, .timeout = 240)
{
    static const char spec[] = "bop,kloi=>bi(p+8k+l)";
    static const int64_t dy[3] = {2, 16, 46}, w[4] = {3, 3, 16, 24}, dx[3] = {2, 24, 64};
    for (int fresh = 0; fresh < 2; fresh++) {
        s_case_t c = s_lower(spec, TROUPE_PREC_SINGLE, 3, dy, 4, w, 3, dx, fresh != 0);
        troupe_gemm_t g;
        const char *why = NULL;
        cr_assert_eq(s_find(c.proc->body, &g, &why), TROUPE_GEMM_YES, "%s", why);
        cr_assert(g.nouter == 3 && g.c.ld == 64 && !troupe_gemm_covers_output(&g),
                  "nouter %d ldc %lld", g.nouter, (long long)g.c.ld);
        cr_assert_eq(troupe_gemm_zero_slice(&g), 24 * 64);
        char *src = s_c_source(&c);
        const char *slice = strstr(src, "for (int64_t zi = 0; zi < 1536; ++zi) n");
        cr_assert_eq(slice != NULL, fresh, "fresh %d: zeroing:\n%s", fresh, src);
        cr_assert_null(strstr(src, "zi < 3072"), "dx zeroed whole:\n%s", src);
        if (fresh) {
            cr_assert_not_null(strstr(slice, "_y[1536*"), "not the sample's slice:\n%s", src);
            char line[256];
            s_loop_before(src, slice, line, sizeof line);
            cr_assert(strstr(line, " < 2; ") != NULL, "not in the batch loop: %s\n%s", line, src);
            const char *call = strstr(src, "troupe_sgemm(1, 0, 24, 46, 16, 1.0f, ");
            cr_assert(call != NULL && call > slice, "no call after the zeroing:\n%s", src);
        }
        free(src);
        const troupe_tnode_t *nodes[3] = {c.x, c.w, c.y};
        double *vals[3];
        float *fv[3];
        int64_t cnt[3];
        for (int n = 0; n < 3; n++) {
            cnt[n] = troupe_tnode_num_elems(nodes[n]);
            vals[n] = malloc(sizeof(double) * (size_t)cnt[n]);
            fv[n] = malloc(sizeof(float) * (size_t)cnt[n]);
            cr_assert(vals[n] && fv[n]);
            for (int64_t i = 0; i < cnt[n]; i++)
                fv[n][i] = (float)(vals[n][i] = (double)(float)s_uniform());
        }
        troupe_interp_buffer_t ib[3];
        for (int n = 0; n < 3; n++)
            ib[n] = (troupe_interp_buffer_t){nodes[n], fv[n]};
        troupe_interp_args_t args = {ib, 3, NULL, 0, NULL};
        cr_assert_eq(troupe_interp_run(c.proc, &args), TROUPE_OK, "%s", troupe_last_error());
        double *out = malloc(sizeof(double) * (size_t)cnt[2]);
        cr_assert_not_null(out);
        for (int lib_on = 0; lib_on < 2; lib_on++) {
            s_run_spec(spec, dy, 4, w, 3, dx, fresh != 0, vals[0], vals[1], vals[2], lib_on != 0,
                       out);
            for (int64_t i = 0; i < cnt[2]; i++) /* 9 offsets x 16 terms, another order */
                cr_assert(fabs(out[i] - fv[2][i]) <= 4.0 * 144 * 6e-8 + 1e-6,
                          "fresh %d library %d: dx[%lld] = %.9g, interpreter %.9g", fresh, lib_on,
                          (long long)i, out[i], (double)fv[2][i]);
        }
        free(out);
        for (int n = 0; n < 3; n++)
            free(vals[n]), free(fv[n]);
        s_free(&c);
    }
}

/* A convolution's forward as shifted products (nn/conv.h), 8 x 8 padded inputs, a 3 x 3
 * kernel, 6 x 6 outputs: per sample b and offset (k, l), y[b] += w[k,l] x[b] over the rows of
 * x shifted by 8k + l. The 9 calls of a sample write the same block y[b] (16 x 46), untransposed
 * and accumulating: one batch-reduce call per sample, the offsets listed in the calls' order. */
#define S_FWD_SPEC "bi(p+8k+l),kloi=>bop"
static const int64_t s_fwd_x[3] = {2, 24, 64}, s_fwd_w[4] = {3, 3, 16, 24},
                     s_fwd_y[3] = {2, 16, 46};

Test(gemm_match, shifted_products_into_one_block_make_one_batch_reduce_call_per_sample)
{
    s_case_t c = s_lower(S_FWD_SPEC, TROUPE_PREC_SINGLE, 3, s_fwd_x, 4, s_fwd_w, 3, s_fwd_y, true);
    troupe_gemm_t g;
    const char *why = NULL;
    cr_assert_eq(s_find(c.proc->body, &g, &why), TROUPE_GEMM_YES, "%s", why);
    cr_assert(!g.a.trans && !g.b.trans && g.m == 16 && g.n == 46 && g.k == 24 && g.nouter == 3,
              "m %lld n %lld k %lld nouter %d", (long long)g.m, (long long)g.n, (long long)g.k,
              g.nouter);
    troupe_cgen_result_t *res = NULL;
    OK(troupe_cgen_emit(c.proc, TROUPE_CGEN_C, &res));
    const char *src = res->source;
    cr_assert_not_null(res->gemm_brgemm_hooks_name);
    cr_assert_eq(s_count(src, "troupe_sbrgemm("), 1, "%s", src);
    const char *call = strstr(src, "!troupe_sbrgemm(16, 46, 24, 9, ");
    cr_assert_not_null(call, "%s", src);
    /* inside the batch loop: its header before the call, its brace still open there */
    const char *loop = strstr(src, " < 2; ++");
    cr_assert(loop != NULL && loop < call, "%s", src);
    int open = 0;
    for (const char *p = loop; p < call; p++)
        open += (*p == '{') - (*p == '}');
    cr_assert_gt(open, 0, "the call is not inside the batch loop:\n%s", src);
    /* w[k,l] at 3*16*24 k + 16*24 l, x's rows shifted by 8k + l, l fastest */
    cr_assert_not_null(strstr(src, "g_ao[9] = {0, 384, 768, 1152, 1536, 1920, 2304, 2688, 3072};"),
                       "%s", src);
    cr_assert_not_null(strstr(src, "g_bo[9] = {0, 1, 2, 8, 9, 10, 16, 17, 18};"), "%s", src);
    /* the 9 calls stay, as the fallback */
    cr_assert_eq(s_count(src, "troupe_sgemm(0, 0, 16, 46, 24, 1.0f, "), 1, "%s", src);
    troupe_cgen_result_destroy(&res);
    s_free(&c);
    /* the weight gradient's calls each write their own block (and B is transposed): none */
    c = s_lower(S_SHIFT_SPEC, TROUPE_PREC_SINGLE, 3, s_shift_dy, 3, s_shift_x, 4, s_shift_dw, true);
    OK(troupe_cgen_emit(c.proc, TROUPE_CGEN_C, &res));
    cr_assert_null(strstr(res->source, "troupe_sbrgemm("), "%s", res->source);
    cr_assert_null(res->gemm_brgemm_hooks_name);
    troupe_cgen_result_destroy(&res);
    s_free(&c);
}

typedef void (*s_brgemm_hooks_fn)(troupe_sbrgemm_fn);

/* The batch-reduce calls against the separate calls (the hook set to NULL) bit for bit, and
 * both against the interpreter within float rounding; the hook itself against 9 library calls
 * bit for bit on the test's shape (so that it does not decline it). */
Test(gemm_run, batch_reduce_calls_equal_the_separate_calls_bit_for_bit, .timeout = 240)
{
    troupe_sbrgemm_fn brg = troupe_gemm_library_sbrgemm();
    troupe_sgemm_fn sg = troupe_gemm_library_sgemm();
    if (sg == NULL || brg == NULL) {
        cr_skip_test("no libxsmm batch-reduce path in this build");
        return;
    }
    const troupe_tnode_t *nodes[3] = {NULL, NULL, NULL};
    s_case_t c = s_lower(S_FWD_SPEC, TROUPE_PREC_SINGLE, 3, s_fwd_x, 4, s_fwd_w, 3, s_fwd_y, true);
    nodes[0] = c.x, nodes[1] = c.w, nodes[2] = c.y;
    float *ref[3], *sep[3], *batch[3];
    int64_t cnt[3];
    for (int n = 0; n < 3; n++) {
        cnt[n] = troupe_tnode_num_elems(nodes[n]);
        ref[n] = malloc(sizeof(float) * (size_t)cnt[n]);
        sep[n] = malloc(sizeof(float) * (size_t)cnt[n]);
        batch[n] = malloc(sizeof(float) * (size_t)cnt[n]);
        cr_assert(ref[n] && sep[n] && batch[n]);
        for (int64_t i = 0; i < cnt[n]; i++)
            ref[n][i] = sep[n][i] = batch[n][i] = (float)s_uniform();
    }
    /* the hook on sample 0's shape: y0 += sum of 9 shifted products, as 9 calls would */
    static const int64_t ao[9] = {0, 384, 768, 1152, 1536, 1920, 2304, 2688, 3072},
                         bo[9] = {0, 1, 2, 8, 9, 10, 16, 17, 18};
    float y1[16 * 46], y2[16 * 46];
    memcpy(y1, sep[2], sizeof y1);
    memcpy(y2, sep[2], sizeof y2);
    for (int t = 0; t < 9; t++)
        sg(0, 0, 16, 46, 24, 1.0f, sep[1] + ao[t], 24, sep[0] + bo[t], 64, 1.0f, y1, 46);
    cr_assert_eq(brg(16, 46, 24, 9, sep[1], 24, ao, sep[0], 64, bo, y2, 46), 1,
                 "the library declines the batch for the test's shape");
    cr_assert(memcmp(y1, y2, sizeof y1) == 0, "the hook differs from 9 calls");
    cr_assert_eq(brg(16, 46, 24, TROUPE_SBRGEMM_MAX_COUNT + 1, sep[1], 24, ao, sep[0], 64, bo, y2,
                     46),
                 0, "a batch past the limit is accepted");

    troupe_interp_buffer_t ib[3];
    for (int n = 0; n < 3; n++)
        ib[n] = (troupe_interp_buffer_t){nodes[n], ref[n]};
    troupe_interp_args_t args = {ib, 3, NULL, 0, NULL};
    OK(troupe_interp_run(c.proc, &args));
    troupe_cgen_result_t *res = NULL;
    OK(troupe_cgen_emit(c.proc, TROUPE_CGEN_C, &res));
    cr_assert_not_null(res->gemm_brgemm_hooks_name);
    char dir[256];
    void *h = s_load(res, "brgemm", dir, sizeof dir);
    s_entry_fn entry;
    s_hooks_fn hooks;
    s_brgemm_hooks_fn brgemm_hooks;
    *(void **)&entry = dlsym(h, res->entry_name);
    *(void **)&hooks = dlsym(h, res->gemm_hooks_name);
    *(void **)&brgemm_hooks = dlsym(h, res->gemm_brgemm_hooks_name);
    cr_assert(entry != NULL && hooks != NULL && brgemm_hooks != NULL);
    hooks(sg, troupe_gemm_library_dgemm());
    cr_assert_leq(res->nparams, 3);
    for (int run = 0; run < 2; run++) { /* the batch hook off, then on */
        float **bufs = run == 0 ? sep : batch;
        brgemm_hooks(run == 0 ? NULL : brg);
        s_run_unit(entry, res, nodes, bufs, 3);
    }
    for (int64_t i = 0; i < cnt[2]; i++) {
        cr_assert(memcmp(&batch[2][i], &sep[2][i], sizeof(float)) == 0,
                  "y[%lld]: batch-reduce %.9g, separate calls %.9g", (long long)i,
                  (double)batch[2][i], (double)sep[2][i]);
        /* 9 x 24 terms of |w x| < 1 each, summed in another order */
        cr_assert(fabs((double)batch[2][i] - ref[2][i]) <= 4.0 * 216 * 6e-8 + 1e-6,
                  "y[%lld]: batch-reduce %.9g, interpreter %.9g", (long long)i,
                  (double)batch[2][i], (double)ref[2][i]);
    }
    s_unload(h, dir);
    troupe_cgen_result_destroy(&res);
    for (int n = 0; n < 3; n++)
        free(ref[n]), free(sep[n]), free(batch[n]);
    s_free(&c);
}

/* The forward of S_FWD_SPEC starting from a bias, as nn/conv.c lowers it: y[b,o,p] = bias[o],
 * then y[b] += w[k,l] x[b] per sample and offset. With `split`, a comment is put between the
 * two statements: the window no longer sees the bias nest beside the calls (the rule off). */
static s_case_t s_lower_bias_fwd(troupe_tnode_t **bias, bool split)
{
    s_case_t c;
    int64_t nb = s_fwd_y[1];
    c.x = rtu_node("x", TROUPE_PREC_SINGLE, 3, s_fwd_x);
    c.w = rtu_node("w", TROUPE_PREC_SINGLE, 4, s_fwd_w);
    c.y = rtu_node("y", TROUPE_PREC_SINGLE, 3, s_fwd_y);
    *bias = rtu_node("bias", TROUPE_PREC_SINGLE, 1, &nb);
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t[2] = {NULL, NULL}, *root = NULL;
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, c.y, TROUPE_UNOP_IDENTITY,
                              troupe_asgn_node(*bias), "o=>^bo^p", &t[0]));
    OK(troupe_asgn_accum_binop(comp, false, TROUPE_BINOP_ADD, c.y, TROUPE_BINOP_MUL,
                               troupe_asgn_node(c.x), troupe_asgn_node(c.w), S_FWD_SPEC, &t[1]));
    OK(troupe_asgn_seq(comp, 2, t, &root));
    troupe_asgn_comp_set_root(comp, root);
    c.proc = NULL;
    OK(troupe_asgn_lower(comp, "mm_bias", &c.proc));
    OK(troupe_ll_optimize(c.proc, NULL));
    troupe_asgn_comp_destroy(&comp);
    const troupe_ll_t *items[16];
    size_t n = 0;
    const troupe_ll_t *body = c.proc->body;
    if (body->kind == TROUPE_LL_SEQ)
        for (size_t i = 0; i < body->u.seq.count && n < 16; i++)
            items[n++] = body->u.seq.items[i];
    else
        items[n++] = body;
    size_t init_at = n;
    for (size_t i = 0; i < n && init_at == n; i++) {
        troupe_gemm_t g;
        troupe_gemm_epilogue_t ep;
        size_t used = 0;
        const char *why = NULL;
        if (troupe_gemm_match_window(items, n, i, &g, &ep, &used, &why) == TROUPE_GEMM_YES &&
            ep.init_slice == items[i])
            init_at = i;
    }
    cr_assert_lt(init_at, n, "the bias nest does not run per sample");
    if (split) {
        troupe_ll_t *v[17];
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            v[m++] = (troupe_ll_t *)items[i];
            if (i == init_at)
                v[m++] = troupe_ll_comment(c.proc, "apart");
        }
        c.proc->body = troupe_ll_seq(c.proc, m, v);
        cr_assert_not_null(c.proc->body);
    }
    return c;
}

/* The bias broadcast before per-sample accumulating calls runs per sample, at the start of the
 * sample's iteration, before its batch-reduce call; against the interpreter within float
 * rounding, and bit for bit against the same statements with the rule off (library on and off). */
Test(gemm_run, an_initial_bias_before_accumulating_calls_runs_per_sample, .timeout = 240)
{
    troupe_tnode_t *bias[2] = {NULL, NULL};
    s_case_t c[2];
    troupe_cgen_result_t *res[2] = {NULL, NULL};
    for (int split = 0; split < 2; split++) {
        c[split] = s_lower_bias_fwd(&bias[split], split != 0);
        OK(troupe_cgen_emit(c[split].proc, TROUPE_CGEN_C, &res[split]));
    }
    const char *src = res[0]->source;
    const char *init = strstr(src, "/* the initial values, over this iteration's slice */");
    const char *loop = strstr(src, " < 2; ++");
    const char *call = strstr(src, "troupe_sgemm(0, 0, 16, 46, 24, 1.0f, ");
    cr_assert(init != NULL && loop != NULL && call != NULL && loop < init && init < call, "%s",
              src);
    int open = 0; /* inside the batch loop */
    for (const char *p = loop; p < init; p++)
        open += (*p == '{') - (*p == '}');
    cr_assert_gt(open, 0, "the initial values are not inside the batch loop:\n%s", src);
    /* it writes the sample's slice (16 x 46 elements) before the sample's calls */
    const char *write = strstr(init, "_y[736*");
    const char *brg_call = strstr(src, "!troupe_sbrgemm(16, 46, 24, 9, ");
    cr_assert(write != NULL && write < call && (brg_call == NULL || write < brg_call), "%s", src);
    cr_assert_not_null(strstr(write, "] = n"), "not the bias's write:\n%s", src);
    cr_assert_not_null(brg_call, "%s", src);
    cr_assert_null(strstr(res[1]->source, "the initial values, over"), "%s", res[1]->source);

    float *ref, *out[2][2], *xw[3];
    const troupe_tnode_t *in[3] = {c[0].x, c[0].w, bias[0]};
    int64_t ny = troupe_tnode_num_elems(c[0].y), cnt[3];
    for (int n = 0; n < 3; n++) {
        cnt[n] = troupe_tnode_num_elems(in[n]);
        xw[n] = malloc(sizeof(float) * (size_t)cnt[n]);
        cr_assert_not_null(xw[n]);
        for (int64_t i = 0; i < cnt[n]; i++)
            xw[n][i] = (float)s_uniform();
    }
    ref = malloc(sizeof(float) * (size_t)ny);
    cr_assert_not_null(ref);
    for (int64_t i = 0; i < ny; i++)
        ref[i] = (float)s_uniform(); /* what the bias overwrites */
    for (int split = 0; split < 2; split++)
        for (int lib_on = 0; lib_on < 2; lib_on++) {
            out[split][lib_on] = malloc(sizeof(float) * (size_t)ny);
            cr_assert_not_null(out[split][lib_on]);
            memcpy(out[split][lib_on], ref, sizeof(float) * (size_t)ny);
        }
    troupe_interp_buffer_t ib[4] = {
        {c[0].x, xw[0]}, {c[0].w, xw[1]}, {bias[0], xw[2]}, {c[0].y, ref}};
    troupe_interp_args_t args = {ib, 4, NULL, 0, NULL};
    OK(troupe_interp_run(c[0].proc, &args));
    for (int split = 0; split < 2; split++) {
        char dir[256];
        void *h = s_load(res[split], "init", dir, sizeof dir);
        s_entry_fn entry;
        s_hooks_fn hooks;
        s_brgemm_hooks_fn brgemm_hooks = NULL;
        *(void **)&entry = dlsym(h, res[split]->entry_name);
        *(void **)&hooks = dlsym(h, res[split]->gemm_hooks_name);
        if (res[split]->gemm_brgemm_hooks_name != NULL)
            *(void **)&brgemm_hooks = dlsym(h, res[split]->gemm_brgemm_hooks_name);
        cr_assert(entry != NULL && hooks != NULL);
        for (int lib_on = 0; lib_on < 2; lib_on++) {
            hooks(lib_on ? troupe_gemm_library_sgemm() : NULL,
                  lib_on ? troupe_gemm_library_dgemm() : NULL);
            if (brgemm_hooks != NULL)
                brgemm_hooks(lib_on ? troupe_gemm_library_sbrgemm() : NULL);
            cr_assert_leq(res[split]->nparams, 4);
            const troupe_tnode_t *nodes[4] = {c[split].x, c[split].w, bias[split], c[split].y};
            float *bufs[4] = {xw[0], xw[1], xw[2], out[split][lib_on]};
            s_run_unit(entry, res[split], nodes, bufs, 4);
        }
        s_unload(h, dir);
    }
    for (int lib_on = 0; lib_on < 2; lib_on++)
        for (int64_t i = 0; i < ny; i++) {
            cr_assert(memcmp(&out[0][lib_on][i], &out[1][lib_on][i], sizeof(float)) == 0,
                      "library %d: y[%lld] per sample %.9g, whole first %.9g", lib_on, (long long)i,
                      (double)out[0][lib_on][i], (double)out[1][lib_on][i]);
            /* the bias and 9 x 24 terms of |w x| < 1 each, summed in another order */
            cr_assert(fabs((double)out[0][lib_on][i] - ref[i]) <= 4.0 * 217 * 6e-8 + 1e-6,
                      "library %d: y[%lld] = %.9g, interpreter %.9g", lib_on, (long long)i,
                      (double)out[0][lib_on][i], (double)ref[i]);
        }
    for (int split = 0; split < 2; split++) {
        for (int lib_on = 0; lib_on < 2; lib_on++)
            free(out[split][lib_on]);
        troupe_cgen_result_destroy(&res[split]);
        troupe_tnode_release(&bias[split]);
        s_free(&c[split]);
    }
    for (int n = 0; n < 3; n++)
        free(xw[n]);
    free(ref);
}

/* With c_gemm_library_only the C has the library call and none of its own loops for a NULL
 * hook; the host drivers generate it so exactly when the library is in use, and refuse to load
 * it when the library is not (its products would write nothing). */
Test(gemm_run, library_only_code_has_no_loops_and_is_refused_without_the_library)
{
    s_case_t c = s_lower("bi,ij=>bj", TROUPE_PREC_SINGLE, 2, (int64_t[]){32, 48}, 2,
                         (int64_t[]){48, 40}, 2, (int64_t[]){32, 40}, true);
    troupe_cgen_result_t *loops = NULL, *only = NULL;
    OK(troupe_cgen_emit(c.proc, TROUPE_CGEN_C, &loops));
    troupe_cgen_options_t o;
    memset(&o, 0, sizeof o);
    o.c_gemm_library_only = true;
    OK(troupe_cgen_emit_with(c.proc, TROUPE_CGEN_C, &o, &only));
    cr_assert_not_null(loops->gemm_hooks_name);
    cr_assert_not_null(only->gemm_hooks_name);
    cr_assert(!loops->gemm_library_only);
    cr_assert(only->gemm_library_only);
    cr_assert(strstr(loops->source, "troupe_sgemm(") != NULL, "%s", loops->source);
    cr_assert(strstr(only->source, "troupe_sgemm(") != NULL, "%s", only->source);
    cr_assert(strstr(loops->source, "} else {") != NULL, "the loops for a NULL hook: %s",
              loops->source);
    cr_assert(strstr(only->source, "} else {") == NULL, "loops kept: %s", only->source);
    cr_assert_lt(only->source_len, loops->source_len);

    /* The host drivers' choice follows the configuration; other drivers get the defaults. */
    const troupe_driver_vtable_t *vt = NULL;
    OK(troupe_driver_lookup("cpu", &vt));
    bool was = troupe_config_gemm_library();
    troupe_cgen_options_t host;
    troupe__hdrv_cgen_options(vt, &host);
    cr_assert_eq(host.c_gemm_library_only, was && troupe_gemm_library_available());
    troupe__hdrv_cgen_options(NULL, &host);
    cr_assert(!host.c_gemm_library_only);
    troupe_config_set_gemm_library(false);
    troupe__hdrv_cgen_options(vt, &host);
    cr_assert(!host.c_gemm_library_only);

    /* Offered library-only code while the library is off: refused, naming the routine and
     * the cause. */
    troupe_driver_t *drv = NULL;
    OK(vt->open(&drv));
    troupe_dcode_t *code = NULL;
    troupe__hdrv_offer_gen(c.proc, only);
    troupe_status_t st = vt->compile(drv, c.proc, &code);
    troupe__hdrv_offer_gen(NULL, NULL);
    cr_assert_eq(st, TROUPE_FAILED_PRECONDITION, "%s", troupe_status_str(st));
    cr_assert_null(code);
    cr_assert(strstr(troupe_last_error(), "routine mm: its code was generated to call the GEMM "
                                          "library") != NULL,
              "%s", troupe_last_error());
    cr_assert(strstr(troupe_last_error(), "TROUPE_GEMM=generated") != NULL, "%s",
              troupe_last_error());
    /* The code with its loops loads and runs without the library. */
    troupe__hdrv_offer_gen(c.proc, loops);
    st = vt->compile(drv, c.proc, &code);
    troupe__hdrv_offer_gen(NULL, NULL);
    cr_assert_eq(st, TROUPE_OK, "%s", troupe_last_error());
    vt->code_release(drv, code);
    vt->close(drv);
    troupe_config_set_gemm_library(was);
    troupe_cgen_result_destroy(&loops);
    troupe_cgen_result_destroy(&only);
    s_free(&c);
}
