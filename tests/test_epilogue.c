/* Tests of GEMM epilogues (compiler/gemm.h's window; issues 14 and 15): the matcher's verdicts
 * on a dense layer as the optimizer leaves it (initial bias, accumulating product, relu into
 * another node or in place, bias added after, b[i] biases) and its refusals with their reasons
 * and debug-log lines; the generated C of such layers, run with the GEMM library (row panels)
 * and without it (the loops), against the reference interpreter on random shapes and forms
 * (transposes, accumulation, several panels): the loops bit for bit, the library within float
 * rounding, and bitwise against the unfused library call it replaces; run-to-run bitwise;
 * the CUDA GEMM step's description (epilogue, bias operand) and its fallback kernels, emulated
 * on the host, against the interpreter; a relu after a loop of per-sample calls run per sample
 * inside that loop (and not when it reads another sample's slice), against the interpreter. */
#define _POSIX_C_SOURCE 200809L
#include "base/log.h"
#include "compiler/cgen.h"
#include "compiler/gemm.h"
#include "compiler/interp.h"
#include "compiler/lower.h"
#include "compiler/optimize.h"
#include "cuda_emu.h"
#include "devices/host/gemm_library.h"
#include "runtime_test_util.h"
#include "troupe_config.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(epilogue_match);
TestSuite(epilogue_run, .timeout = 240);

/* ---- building a dense layer ---------------------------------------------------------------- */

enum { S_POST_NONE, S_POST_RELU_INTO, S_POST_RELU_IN_PLACE, S_POST_BIAS_INTO, S_POST_BIAS_ROWS };
enum { S_INIT_NONE, S_INIT_BIAS, S_INIT_ZERO, S_INIT_BIAS_ROWS };

typedef struct s_layer {
    int64_t m, n, k;
    int form;         /* 0: z = x w; 1: z = x^T w (x stored k x m); 2: z = x w^T (w stored n x k) */
    int init, post;   /* S_INIT_*, S_POST_* */
    troupe_prec_t prec_a; /* the post's output precision (a refusal when not single) */
    bool relu_into_x; /* the relu writes the factor x (a refusal) */
    troupe_tnode_t *x, *w, *b, *bm, *z, *a;
    troupe_ll_proc_t *proc;
} s_layer_t;

static const char *const s_mm_spec[3] = {"bi,ij=>bj", "ib,ij=>bj", "bi,ji=>bj"};

/* Lowers and optimizes the layer's statements: init, product, post. */
static void s_build(s_layer_t *L, const char *name)
{
    int64_t dx[2] = {L->m, L->k}, dw[2] = {L->k, L->n}, dz[2] = {L->m, L->n};
    if (L->form == 1) {
        dx[0] = L->k;
        dx[1] = L->m;
    } else if (L->form == 2) {
        dw[0] = L->n;
        dw[1] = L->k;
    }
    L->x = rtu_node("x", TROUPE_PREC_SINGLE, 2, dx);
    L->w = rtu_node("w", TROUPE_PREC_SINGLE, 2, dw);
    L->b = rtu_node("b", TROUPE_PREC_SINGLE, 1, &L->n);
    L->bm = rtu_node("bm", TROUPE_PREC_SINGLE, 1, &L->m);
    L->z = rtu_node("z", TROUPE_PREC_SINGLE, 2, dz);
    L->a = rtu_node("a", L->prec_a ? L->prec_a : TROUPE_PREC_SINGLE, 2, dz);
    rtu_set_hosted(L->z, 411);
    rtu_set_hosted(L->a, 411);
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t[3] = {NULL, NULL, NULL};
    size_t nt = 0;
    OK(troupe_asgn_comp_new(&comp));
    if (L->init == S_INIT_BIAS || L->init == S_INIT_BIAS_ROWS)
        OK(troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, L->z, TROUPE_UNOP_IDENTITY,
                                  troupe_asgn_node(L->init == S_INIT_BIAS ? L->b : L->bm),
                                  L->init == S_INIT_BIAS ? "j=>^bj" : "b=>b^j", &t[nt++]));
    OK(troupe_asgn_accum_binop(comp, L->init == S_INIT_ZERO, TROUPE_BINOP_ADD, L->z,
                               TROUPE_BINOP_MUL, troupe_asgn_node(L->x), troupe_asgn_node(L->w),
                               s_mm_spec[L->form], &t[nt++]));
    troupe_tnode_t *out = L->relu_into_x ? L->x : L->a;
    if (L->post == S_POST_RELU_INTO)
        OK(troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, out, TROUPE_UNOP_RELU,
                                  troupe_asgn_node(L->z), "bj=>bj", &t[nt++]));
    else if (L->post == S_POST_RELU_IN_PLACE)
        OK(troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, L->z, TROUPE_UNOP_RELU,
                                  troupe_asgn_node(L->z), "bj=>bj", &t[nt++]));
    else if (L->post == S_POST_BIAS_INTO || L->post == S_POST_BIAS_ROWS)
        OK(troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ARG2, out, TROUPE_BINOP_ADD,
                                   troupe_asgn_node(L->z),
                                   troupe_asgn_node(L->post == S_POST_BIAS_INTO ? L->b : L->bm),
                                   L->post == S_POST_BIAS_INTO ? "bj,j=>bj" : "bj,b=>bj",
                                   &t[nt++]));
    troupe_asgn_t *root = NULL;
    OK(troupe_asgn_seq(comp, nt, t, &root));
    troupe_asgn_comp_set_root(comp, root);
    L->proc = NULL;
    OK(troupe_asgn_lower(comp, name, &L->proc));
    OK(troupe_ll_optimize(L->proc, NULL));
    troupe_asgn_comp_destroy(&comp);
}

static void s_layer_free(s_layer_t *L)
{
    troupe_ll_proc_destroy(&L->proc);
    troupe_tnode_t **v[6] = {&L->x, &L->w, &L->b, &L->bm, &L->z, &L->a};
    for (int i = 0; i < 6; i++)
        troupe_tnode_release(v[i]);
}

/* The body's statements with SEQs spliced in and NOOPs dropped (at most cap). */
static size_t s_flat(const troupe_ll_t *s, const troupe_ll_t **v, size_t n, size_t cap)
{
    if (s->kind == TROUPE_LL_NOOP)
        return n;
    if (s->kind != TROUPE_LL_SEQ) {
        cr_assert_lt(n, cap);
        v[n] = s;
        return n + 1;
    }
    for (size_t i = 0; i < s->u.seq.count; i++)
        n = s_flat(s->u.seq.items[i], v, n, cap);
    return n;
}

/* The first window with a product: its verdict, product and epilogue. */
static troupe_gemm_verdict_t s_window(const s_layer_t *L, troupe_gemm_t *g,
                                      troupe_gemm_epilogue_t *ep, size_t *used)
{
    const troupe_ll_t *items[32];
    size_t n = s_flat(L->proc->body, items, 0, 32);
    const char *refused = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *why = NULL;
        troupe_gemm_verdict_t v = troupe_gemm_match_window(items, n, i, g, ep, used, &why);
        if (ep->refused != NULL && refused == NULL)
            refused = ep->refused;
        if (v != TROUPE_GEMM_NO) {
            if (ep->refused == NULL)
                ep->refused = refused;
            return v;
        }
    }
    return TROUPE_GEMM_NO;
}

/* ---- the matcher --------------------------------------------------------------------------- */

Test(epilogue_match, the_mlp_layer_is_an_initial_bias_and_a_relu_into_another_node)
{
    s_layer_t L = {.m = 32, .n = 48, .k = 40, .init = S_INIT_BIAS, .post = S_POST_RELU_INTO};
    s_build(&L, "layer");
    troupe_gemm_t g;
    troupe_gemm_epilogue_t ep;
    size_t used = 0;
    cr_assert_eq(s_window(&L, &g, &ep, &used), TROUPE_GEMM_YES);
    cr_expect_eq(used, 3, "init, product and relu as one: %zu", used);
    cr_expect(g.m == 32 && g.n == 48 && g.k == 40);
    cr_expect(ep.init != NULL && ep.post != NULL && !ep.beta_zero);
    cr_expect(ep.bias == L.b && ep.bias_in_init && ep.bias_axis == TROUPE_GEMM_BIAS_N);
    cr_expect(ep.relu && ep.relu_zero_first && ep.d == L.a);
    cr_expect_null(ep.refused, "%s", ep.refused);
    s_layer_free(&L);
}

Test(epilogue_match, relu_in_place_bias_after_and_row_biases)
{
    s_layer_t L = {.m = 32, .n = 48, .k = 40, .init = S_INIT_ZERO, .post = S_POST_RELU_IN_PLACE};
    s_build(&L, "inplace");
    troupe_gemm_t g;
    troupe_gemm_epilogue_t ep;
    size_t used = 0;
    cr_assert_eq(s_window(&L, &g, &ep, &used), TROUPE_GEMM_YES);
    cr_expect(used == 3 && ep.beta_zero && ep.relu && ep.d == L.z && ep.bias == NULL);
    s_layer_free(&L);

    s_layer_t B = {.m = 32, .n = 48, .k = 40, .init = S_INIT_ZERO, .post = S_POST_BIAS_INTO};
    s_build(&B, "bias_after");
    cr_assert_eq(s_window(&B, &g, &ep, &used), TROUPE_GEMM_YES);
    cr_expect(used == 3 && !ep.relu && ep.d == B.a && ep.bias == B.b && !ep.bias_in_init &&
              ep.bias_axis == TROUPE_GEMM_BIAS_N);
    s_layer_free(&B);

    s_layer_t R = {.m = 32, .n = 48, .k = 40, .init = S_INIT_BIAS_ROWS, .post = S_POST_NONE};
    s_build(&R, "rows");
    cr_assert_eq(s_window(&R, &g, &ep, &used), TROUPE_GEMM_YES);
    cr_expect(used == 2 && ep.bias == R.bm && ep.bias_axis == TROUPE_GEMM_BIAS_M);
    s_layer_free(&R);

    s_layer_t T = {.m = 32, .n = 48, .k = 40, .form = 1, .init = S_INIT_BIAS,
                   .post = S_POST_RELU_INTO};
    s_build(&T, "transposed");
    cr_assert_eq(s_window(&T, &g, &ep, &used), TROUPE_GEMM_YES);
    cr_expect(used == 3 && g.a.trans && ep.relu && ep.bias == T.b);
    s_layer_free(&T);
}

/* Each refusal keeps the product (the library still takes it) and names the rule. */
static void s_expect_refused(s_layer_t *L, const char *rule)
{
    s_build(L, "refused");
    troupe_gemm_t g;
    troupe_gemm_epilogue_t ep;
    size_t used = 0;
    cr_assert_eq(s_window(L, &g, &ep, &used), TROUPE_GEMM_YES);
    cr_expect(ep.post == NULL, "the refused post pass was fused");
    cr_assert_not_null(ep.refused, "no reason for %s", rule);
    cr_expect(strstr(ep.refused, rule) != NULL, "'%s' does not say '%s'", ep.refused, rule);
    s_layer_free(L);
}

Test(epilogue_match, refusals_name_the_rule)
{
    s_layer_t a = {.m = 32, .n = 48, .k = 48, .init = S_INIT_BIAS, .post = S_POST_RELU_INTO,
                   .relu_into_x = true}; /* x is m x k: z's shape when k = n */
    s_expect_refused(&a, "writes a factor of the product");
    s_layer_t b = {.m = 32, .n = 48, .k = 40, .init = S_INIT_BIAS, .post = S_POST_BIAS_INTO};
    s_expect_refused(&b, "a second bias");
    s_layer_t c = {.m = 32, .n = 48, .k = 40, .init = S_INIT_ZERO, .post = S_POST_RELU_INTO,
                   .prec_a = TROUPE_PREC_DOUBLE};
    s_expect_refused(&c, "differs from the product in precision");
}


Test(epilogue_match, the_debug_log_names_the_epilogue_and_the_refusal)
{
    char path[256];
    snprintf(path, sizeof path, "%s/epilogue-log-%d.txt", TROUPE_TEST_BUILD_DIR, (int)getpid());
    unlink(path);
    OK(troupe_log_set_file(path));
    OK(troupe_log_configure("debug:ir"));
    s_layer_t L = {.m = 32, .n = 48, .k = 40, .init = S_INIT_BIAS, .post = S_POST_RELU_INTO};
    s_layer_t R = {.m = 32, .n = 48, .k = 48, .init = S_INIT_BIAS, .post = S_POST_RELU_INTO,
                   .relu_into_x = true};
    s_build(&L, "ep_log_fused");
    s_build(&R, "ep_log_refused");
    troupe_cgen_result_t *res = NULL;
    OK(troupe_cgen_emit(L.proc, TROUPE_CGEN_C, &res));
    troupe_cgen_result_destroy(&res);
    OK(troupe_cgen_emit(R.proc, TROUPE_CGEN_C, &res));
    troupe_cgen_result_destroy(&res);
    OK(troupe_log_configure("warn"));
    OK(troupe_log_set_file(NULL));
    cr_expect(rtu_file_has(path, "cgen of ep_log_fused: ") &&
                  rtu_file_has(path, "calls the GEMM library, with its epilogue: starts from "
                                   "bias "),
              "no fused line in %s", path);
    cr_expect(rtu_file_has(path, "relu into "), "no relu in %s", path);
    cr_expect(rtu_file_has(path, "cgen of ep_log_refused: the statement beside the product into "),
              "no refusal line in %s", path);
    cr_expect(rtu_file_has(path, "is not fused with it: the epilogue writes a factor of the "
                               "product"));
    s_layer_free(&L);
    s_layer_free(&R);
    unlink(path);
}

/* ---- running the generated C --------------------------------------------------------------- */

typedef void (*s_entry_fn)(void **);
typedef void (*s_hooks_fn)(troupe_sgemm_fn, troupe_dgemm_fn);

typedef struct s_bufs {
    troupe_tnode_t *tn[6];
    float *data[6];
    size_t n;
} s_bufs_t;

static uint64_t s_rng = 0x9e3779b97f4a7c15ull;
static float s_uniform(void)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (float)((double)(s_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Random inputs for every node of the layer (z and a too: accumulation reads z). */
static void s_bufs_new(const s_layer_t *L, s_bufs_t *b)
{
    troupe_tnode_t *v[6] = {L->x, L->w, L->b, L->bm, L->z, L->a};
    b->n = 6;
    for (size_t i = 0; i < 6; i++) {
        b->tn[i] = v[i];
        int64_t n = troupe_tnode_num_elems(v[i]);
        b->data[i] = malloc((size_t)n * sizeof(float));
        for (int64_t e = 0; e < n; e++)
            b->data[i][e] = s_uniform();
    }
}

static void s_bufs_copy(const s_bufs_t *from, s_bufs_t *to)
{
    *to = *from;
    for (size_t i = 0; i < from->n; i++) {
        size_t bytes = (size_t)troupe_tnode_num_elems(from->tn[i]) * sizeof(float);
        to->data[i] = malloc(bytes);
        memcpy(to->data[i], from->data[i], bytes);
    }
}

static void s_bufs_free(s_bufs_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->data[i]);
}

static float *s_data_of(const s_bufs_t *b, const troupe_tnode_t *tn)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->tn[i] == tn)
            return b->data[i];
    cr_assert_fail("no buffer for node #%d", tn->id);
    return NULL;
}

static void s_interp(const s_layer_t *L, s_bufs_t *b)
{
    troupe_interp_buffer_t ib[6];
    for (size_t i = 0; i < b->n; i++)
        ib[i] = (troupe_interp_buffer_t){b->tn[i], b->data[i]};
    troupe_interp_args_t args = {ib, b->n, NULL, 0, NULL};
    cr_assert_eq(troupe_interp_run(L->proc, &args), TROUPE_OK, "%s", troupe_last_error());
}

typedef struct s_so {
    char dir[128];
    void *handle;
    s_entry_fn entry;
    s_hooks_fn hooks;
    troupe_cgen_result_t *res;
} s_so_t;

/* Compiles the layer's C dialect (with the CPU driver's optimisation level) and loads it. */
static void s_so_open(const s_layer_t *L, s_so_t *so)
{
    memset(so, 0, sizeof *so);
    OK(troupe_cgen_emit(L->proc, TROUPE_CGEN_C, &so->res));
    snprintf(so->dir, sizeof so->dir, "%s/epilogue-XXXXXX", TROUPE_TEST_BUILD_DIR);
    cr_assert_not_null(mkdtemp(so->dir));
    char src[256], lib[256], cmd[768];
    snprintf(src, sizeof src, "%s/u.c", so->dir);
    snprintf(lib, sizeof lib, "%s/u.so", so->dir);
    FILE *f = fopen(src, "w");
    cr_assert_not_null(f);
    fwrite(so->res->source, 1, so->res->source_len, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc -std=c11 -O3 -march=native -fPIC -shared -o %s %s -lm", lib,
             src);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
    so->handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(so->handle, "%s", dlerror());
    *(void **)&so->entry = dlsym(so->handle, so->res->entry_name);
    cr_assert_not_null(so->entry);
    cr_assert_not_null(so->res->gemm_hooks_name, "the product does not call the library");
    *(void **)&so->hooks = dlsym(so->handle, so->res->gemm_hooks_name);
    cr_assert_not_null(so->hooks);
}

static void s_so_close(s_so_t *so)
{
    char cmd[256];
    dlclose(so->handle);
    snprintf(cmd, sizeof cmd, "rm -rf %s", so->dir);
    cr_expect_eq(system(cmd), 0);
    troupe_cgen_result_destroy(&so->res);
}

static void s_so_run(const s_so_t *so, bool library, s_bufs_t *b)
{
    so->hooks(library ? troupe_gemm_library_sgemm() : NULL,
              library ? troupe_gemm_library_dgemm() : NULL);
    void *args[8];
    cr_assert_leq(so->res->nparams, 8);
    for (size_t p = 0; p < so->res->nparams; p++)
        args[p] = s_data_of(b, so->res->params[p].tn);
    so->entry(args);
}

static void s_expect_equal(const s_layer_t *L, const s_bufs_t *x, const s_bufs_t *y, double tol,
                           const char *what)
{
    for (size_t i = 0; i < x->n; i++) {
        int64_t n = troupe_tnode_num_elems(x->tn[i]);
        for (int64_t e = 0; e < n; e++) {
            float u = x->data[i][e], v = y->data[i][e];
            if (tol == 0)
                cr_assert(memcmp(&u, &v, sizeof u) == 0,
                          "%s (m %lld n %lld k %lld form %d init %d post %d): node %s "
                          "element %lld: %.9g vs %.9g",
                          what, (long long)L->m, (long long)L->n, (long long)L->k, L->form,
                          L->init, L->post, x->tn[i]->label[0], (long long)e, u, v);
            else
                cr_assert(fabs((double)u - v) <= tol * (1.0 + fabs((double)v)),
                          "%s (m %lld n %lld k %lld form %d init %d post %d): node %s "
                          "element %lld: %.9g vs %.9g",
                          what, (long long)L->m, (long long)L->n, (long long)L->k, L->form,
                          L->init, L->post, x->tn[i]->label[0], (long long)e, u, v);
        }
    }
}

static int64_t s_pick(int64_t lo, int64_t hi)
{
    return lo + (int64_t)((s_uniform() + 1.0f) * 0.5f * (float)(hi - lo));
}

/* One built layer: the loops bit for bit against the interpreter; the library within rounding
 * of it, and bitwise the same on a second run. */
static void s_check_built(s_layer_t *L)
{
    s_so_t so;
    s_so_open(L, &so);
    s_bufs_t in, ref, loops, lib, lib2;
    s_bufs_new(L, &in);
    s_bufs_copy(&in, &ref);
    s_bufs_copy(&in, &loops);
    s_bufs_copy(&in, &lib);
    s_bufs_copy(&in, &lib2);
    s_interp(L, &ref);
    s_so_run(&so, false, &loops);

    s_expect_equal(L, &loops, &ref, 0, "generated loops vs the interpreter");
    if (troupe_gemm_library_available()) {
        s_so_run(&so, true, &lib);
        s_expect_equal(L, &lib, &ref, 2e-5 * (double)L->k, "library vs the interpreter");
        s_so_run(&so, true, &lib2);
        s_expect_equal(L, &lib2, &lib, 0, "library, second run");
    }
    s_bufs_free(&in);
    s_bufs_free(&ref);
    s_bufs_free(&loops);
    s_bufs_free(&lib);
    s_bufs_free(&lib2);
    s_so_close(&so);
    s_layer_free(L);
}

static void s_check_layer(s_layer_t *L)
{
    s_build(L, "ep_run");
    s_check_built(L);
}

Test(epilogue_run, fused_layers_agree_with_the_interpreter_on_random_shapes)
{
    static const int posts[] = {S_POST_RELU_INTO, S_POST_RELU_IN_PLACE, S_POST_BIAS_INTO,
                                S_POST_BIAS_ROWS, S_POST_NONE};
    static const int inits[] = {S_INIT_BIAS, S_INIT_ZERO, S_INIT_NONE, S_INIT_BIAS_ROWS};
    for (int c = 0; c < 12; c++) {
        s_layer_t L = {.m = s_pick(9, 90), .n = s_pick(16, 300), .k = s_pick(8, 70),
                       .form = c % 3, .init = inits[c % 4], .post = posts[c % 5]};
        if ((L.init == S_INIT_BIAS || L.init == S_INIT_BIAS_ROWS) &&
            (L.post == S_POST_BIAS_INTO || L.post == S_POST_BIAS_ROWS))
            L.post = S_POST_RELU_INTO;
        s_check_layer(&L);
    }
}

/* n = 2048 floats is 8 KiB a row: 32 rows a panel, so m = 100 runs 4 panels (the last one 4
 * rows). Against the unfused library path, the same call on the whole matrix with the
 * initial values set before it and relu applied after: bitwise equal (the libraries' row
 * blocking keeps each element's sum order; measured with OpenBLAS and libxsmm here). */
Test(epilogue_run, several_panels_match_the_unfused_library_path_bitwise)
{
    s_layer_t L = {.m = 100, .n = 2048, .k = 72, .init = S_INIT_BIAS, .post = S_POST_RELU_INTO};
    s_layer_t T = {.m = 100, .n = 2048, .k = 72, .form = 1, .init = S_INIT_BIAS,
                   .post = S_POST_RELU_INTO};
    s_check_layer(&T);
    s_build(&L, "ep_panels");
    s_so_t so;
    s_so_open(&L, &so);
    cr_expect(strstr(so.res->source, "g_p += 32)") != NULL, "not 32-row panels");
    s_bufs_t in, fused;
    s_bufs_new(&L, &in);
    s_bufs_copy(&in, &fused);
    troupe_sgemm_fn sgemm = troupe_gemm_library_sgemm();
    if (sgemm != NULL) {
        s_so_run(&so, true, &fused);
        float *x = s_data_of(&in, L.x), *w = s_data_of(&in, L.w), *b = s_data_of(&in, L.b);
        float *z = s_data_of(&in, L.z), *a = s_data_of(&in, L.a);
        for (int64_t i = 0; i < L.m; i++)
            for (int64_t j = 0; j < L.n; j++)
                z[i * L.n + j] = b[j];
        sgemm(0, 0, L.m, L.n, L.k, 1.0f, x, L.k, w, L.n, 1.0f, z, L.n);
        for (int64_t e = 0; e < L.m * L.n; e++)
            a[e] = z[e] >= 0 ? z[e] : 0.0f; /* relu z = max(0, z) */
        s_expect_equal(&L, &fused, &in, 0, "row panels vs one whole-matrix call");
    }
    s_bufs_free(&in);
    s_bufs_free(&fused);
    s_so_close(&so);
    s_layer_free(&L);
}

/* ---- the CUDA GEMM step -------------------------------------------------------------------- */

/* The step of the layer's CUDA dialect, its epilogue and bias; then the emulated fallback
 * kernels bit for bit against the interpreter and the step computed from its description
 * within rounding. */
static void s_check_cuda(s_layer_t *L, troupe_cgen_gemm_epilogue_t want, bool want_bias,
                         size_t want_steps)
{
    s_build(L, "ep_cuda");
    troupe_cgen_result_t *res = NULL;
    OK(troupe_cgen_emit(L->proc, TROUPE_CGEN_CUDA, &res));
    long gs = -1;
    for (size_t s = 0; s < res->nsteps; s++)
        if (res->steps[s].kind == TROUPE_CGEN_STEP_GEMM)
            gs = (long)s;
    cr_assert_geq(gs, 0, "no GEMM step");
    const troupe_cgen_gemm_call_t *c = &res->steps[gs].gemm;
    cr_expect_eq(res->nsteps, want_steps, "%zu steps", res->nsteps);
    cr_expect_eq(c->epilogue, want, "epilogue %d, want %d", (int)c->epilogue, (int)want);
    if (want_bias) {
        cr_expect(res->params[c->bias.param].tn == L->b, "the bias is not b[j]");
        cr_expect(c->beta_zero || L->init != S_INIT_BIAS, "an initial bias keeps beta = 1");
        cr_expect(c->bias.offset == 0 && c->bias.nterms == 0);
    }
    if (troupe_emu_available()) {
        troupe_emu_t e;
        troupe_emu_open(res, &e);
        s_bufs_t in;
        s_bufs_new(L, &in);
        for (long ref = -1; ref <= gs; ref += gs + 1) {
            s_bufs_t ref_b, emu;
            s_bufs_copy(&in, &ref_b);
            s_bufs_copy(&in, &emu);
            s_interp(L, &ref_b);
            void *ptrs[8], *args[8];
            for (size_t p = 0; p < res->nparams; p++) {
                ptrs[p] = s_data_of(&emu, res->params[p].tn);
                args[p] = &ptrs[p];
            }
            troupe_emu_run(&e, args, ref < 0 ? TROUPE_EMU_SMALL_REVERSE : TROUPE_EMU_PLANNED,
                           ref);
            s_expect_equal(L, &emu, &ref_b, ref < 0 ? 0 : 2e-5 * (double)L->k,
                           ref < 0 ? "CUDA fallback kernels (emulated) vs the interpreter"
                                   : "the GEMM step's description vs the interpreter");
            s_bufs_free(&ref_b);
            s_bufs_free(&emu);
        }
        s_bufs_free(&in);
        troupe_emu_close(&e);
    }
    troupe_cgen_result_destroy(&res);
    s_layer_free(L);
}

Test(epilogue_run, cuda_steps_carry_the_epilogues_cublaslt_takes)
{
    /* the MLP's layer: the initial bias becomes the bias epilogue (beta 0); relu into another
     * node stays its own kernel (cuBLASLt writes one output, and z is still read) */
    s_layer_t a = {.m = 24, .n = 40, .k = 36, .init = S_INIT_BIAS, .post = S_POST_RELU_INTO};
    s_check_cuda(&a, TROUPE_CGEN_GEMM_EPI_BIAS, true, 2);
    /* relu in place after an initial bias: one step with relu(+ bias) */
    s_layer_t b = {.m = 24, .n = 40, .k = 36, .init = S_INIT_BIAS, .post = S_POST_RELU_IN_PLACE};
    s_check_cuda(&b, TROUPE_CGEN_GEMM_EPI_RELU_BIAS, true, 1);
    /* relu in place after a zeroing, transposed x */
    s_layer_t c = {.m = 24, .n = 40, .k = 36, .form = 1, .init = S_INIT_ZERO,
                   .post = S_POST_RELU_IN_PLACE};
    s_check_cuda(&c, TROUPE_CGEN_GEMM_EPI_RELU, false, 1);
    /* a bias b[i] runs along cuBLASLt's columns: a kernel before a plain accumulating step */
    s_layer_t d = {.m = 24, .n = 40, .k = 36, .form = 2, .init = S_INIT_BIAS_ROWS,
                   .post = S_POST_RELU_IN_PLACE};
    s_check_cuda(&d, TROUPE_CGEN_GEMM_EPI_RELU, false, 2);
}

/* ---- a pass after a loop of calls, per iteration ------------------------------------------ */

/* conv1 of the convnet as nn/conv.c lowers it: z[b] = w x[b] per sample (x the im2col rows,
 * (B, K, P)), one call per sample writing its own slice of z, then a = relu z into another
 * node of z's layout; or, with `shift`, a[b] = relu z[b + 1] over one sample fewer (it reads
 * the next sample's slice: not a pass per sample). */
static void s_build_per_sample(s_layer_t *L, bool shift)
{
    int64_t dx[3] = {3, L->k, L->n}, dw[2] = {L->m, L->k}, dz[3] = {3, L->m, L->n};
    int64_t one = 1;
    L->x = rtu_node("x", TROUPE_PREC_SINGLE, 3, dx);
    L->w = rtu_node("w", TROUPE_PREC_SINGLE, 2, dw);
    L->b = rtu_node("b", TROUPE_PREC_SINGLE, 1, &one);
    L->bm = rtu_node("bm", TROUPE_PREC_SINGLE, 1, &one);
    L->z = rtu_node("z", TROUPE_PREC_SINGLE, 3, dz);
    dz[0] = shift ? 2 : 3;
    L->a = rtu_node("a", TROUPE_PREC_SINGLE, 3, dz);
    rtu_set_hosted(L->z, 411);
    rtu_set_hosted(L->a, 411);
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t[2] = {NULL, NULL}, *root = NULL;
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ADD, L->z, TROUPE_BINOP_MUL,
                               troupe_asgn_node(L->w), troupe_asgn_node(L->x), "ok,bkp=>bop",
                               &t[0]));
    OK(troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, L->a, TROUPE_UNOP_RELU,
                              troupe_asgn_node(L->z), shift ? "(b+1)op=>bop" : "bop=>bop", &t[1]));
    OK(troupe_asgn_seq(comp, 2, t, &root));
    troupe_asgn_comp_set_root(comp, root);
    L->proc = NULL;
    OK(troupe_asgn_lower(comp, "ep_slice", &L->proc));
    OK(troupe_ll_optimize(L->proc, NULL));
    troupe_asgn_comp_destroy(&comp);
}

Test(epilogue_run, a_relu_after_per_sample_calls_runs_per_sample)
{
    for (int shift = 0; shift < 2; shift++) {
        s_layer_t L = {.m = 16, .n = 60, .k = 10};
        s_build_per_sample(&L, shift != 0);
        troupe_gemm_t g;
        troupe_gemm_epilogue_t ep;
        size_t used = 0;
        cr_assert_eq(s_window(&L, &g, &ep, &used), TROUPE_GEMM_YES);
        cr_assert(g.nouter == 1 && g.outer_ext[0] == 3 && ep.beta_zero && ep.post == NULL,
                  "nouter %d", g.nouter);
        cr_assert_eq(ep.slice_post != NULL, !shift, "shift %d: the relu per sample", shift);
        troupe_cgen_result_t *res = NULL;
        OK(troupe_cgen_emit(L.proc, TROUPE_CGEN_C, &res));
        const char *src = res->source, *loop = strstr(src, "; ++");
        const char *call = strstr(src, "troupe_sgemm(0, 0, 16, 60, 10, 1.0f, ");
        const char *pass = strstr(src, "/* the pass after the calls, over this iteration's slice");
        cr_assert(loop != NULL && call != NULL, "%s", src);
        cr_assert_eq(pass != NULL, !shift, "shift %d:\n%s", shift, src);
        if (!shift) { /* after the call, inside the calls' loop: its symbol indexes a and z */
            char sym[32], a_at[64];
            const char *p = strstr(src, "for (int64_t ");
            cr_assert(p != NULL && sscanf(p, "for (int64_t %31[a-z0-9_]", sym) == 1);
            snprintf(a_at, sizeof a_at, "_a[960*%s + ", sym);
            cr_assert(pass > call && strstr(pass, a_at) != NULL, "%s not after the call:\n%s", a_at,
                      src);
            const char *close = strstr(pass, "\n    }\n"); /* the calls' loop ends after it */
            cr_assert(close != NULL && strstr(pass, a_at) < close, "%s", src);
        }
        troupe_cgen_result_destroy(&res);
        s_check_built(&L);
    }
}
