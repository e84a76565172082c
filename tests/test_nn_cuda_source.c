/* Tests of the CUDA dialect of nn/ layers' gradient routines, without a GPU: the causal mask of
 * attention and the padded vocabulary's mask are computed from positions, not fetched as T^2 or
 * Vp constants (one statement per cell, which NVRTC took 431 s to compile for GPT's "default"
 * model and could not compile at T = 1024), so the generated source does not grow with T or Vp;
 * each kernel's signature names only the parameters it uses (troupe_cgen_kernel_t.args); and
 * NVRTC compiles the source (when the toolkit is there). */
#define _GNU_SOURCE /* memmem */
#include "compiler/cgen.h"
#include "compiler/lower.h"
#include "compiler/optimize.h"
#include "ir_test_util.h"
#include "nn/attention.h"
#include "nn/conv.h"
#include "nn/embedding.h"
#include "nn/layers.h"
#include "nn/pool.h"
#include "runtime_test_util.h"
#include "troupe_config.h"
#if TROUPE_HAVE_CUDA
#include "base/alloc.h"
#include "devices/cuda/driver_impl.h"
#include "devices/cuda/nvrtc.h"
#endif

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct s_case {
    troupe_asgn_comp_t *comp;
    troupe_nn_t *nn;
} s_case_t;

static void s_begin(s_case_t *c)
{
    memset(c, 0, sizeof *c);
    OK(troupe_asgn_comp_new(&c->comp));
    OK(troupe_nn_new(c->comp, TROUPE_PREC_SINGLE, &c->nn));
}

/* Lowers c's comp as `name`, optimizes as for the cuda driver (no Local arrays, no outer
 * fusion) and emits the CUDA dialect: *proc and the result (the caller destroys both). */
static troupe_cgen_result_t *s_emit(s_case_t *c, const char *name, troupe_ll_proc_t **proc)
{
    OK(troupe_asgn_lower(c->comp, name, proc));
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.local_max_bytes = 0;
    o.fuse_outer = false;
    OK(troupe_ll_optimize(*proc, &o));
    troupe_cgen_options_t co = {.cuda_shared_max_bytes = 48 * 1024};
    troupe_cgen_result_t *res = NULL;
    OK(troupe_cgen_emit_with(*proc, TROUPE_CGEN_CUDA, &co, &res));
    return res;
}

/* Causal attention over (B, T, C), nh heads, its output summed into *loss: forward and derived
 * backward, in c (begun here). */
static void s_attention(s_case_t *c, int64_t B, int64_t T, int64_t C, int64_t nh,
                        troupe_tnode_t **loss)
{
    s_begin(c);
    troupe_tnode_t *x, *wqkv, *wp, *y = NULL;
    OK(troupe_nn_param(c->nn, "x", 3, (int64_t[]){B, T, C}, &x));
    OK(troupe_nn_param(c->nn, "w_qkv", 2, (int64_t[]){3 * C, C}, &wqkv));
    OK(troupe_nn_param(c->nn, "w_proj", 2, (int64_t[]){C, C}, &wp));
    OK(troupe_nn_begin(c->nn, "attention"));
    OK(troupe_nn_attention(c->nn, x, wqkv, NULL, wp, NULL, nh, TROUPE_NN_OUT_IN, &y));
    OK(troupe_nn_node(c->nn, "loss", 0, NULL, loss));
    OK(troupe_nn_un(c->nn, true, TROUPE_BINOP_ADD, *loss, TROUPE_UNOP_IDENTITY, y, "btc=>"));
    OK(troupe_nn_finish(c->nn, *loss));
}

static void s_end(s_case_t *c)
{
    troupe_nn_destroy(&c->nn);
    troupe_asgn_comp_destroy(&c->comp);
}

/* The CUDA dialect of c's comp (s_emit); returns the source length; compiles it with NVRTC when
 * `compile`. Ends c. */
static size_t s_cuda_source(s_case_t *c, const char *name, bool compile)
{
    troupe_ll_proc_t *proc = NULL;
    troupe_cgen_result_t *res = s_emit(c, name, &proc);
    size_t n = res->source_len;
    /* each kernel's signature is its own arguments (troupe_cgen_kernel_t.args), in order, and
     * they are fewer than the routine's parameters */
    size_t total = 0;
    for (size_t k = 0; k < res->nkernels; k++) {
        const troupe_cgen_kernel_t *kn = &res->kernels[k];
        char sig[160];
        snprintf(sig, sizeof sig, "__global__ void %s(", kn->name);
        const char *at = strstr(res->source, sig);
        cr_assert_not_null(at, "no signature for %s", kn->name);
        at += strlen(sig);
        for (size_t j = 0; j < kn->nargs; j++) {
            size_t i = kn->args[j];
            const char *decl = i < res->nparams ? res->params[i].decl : "int64_t *troupe_err";
            cr_assert(strncmp(at, decl, strlen(decl)) == 0, "%s: argument %zu is not %s: %.60s",
                      kn->name, j, decl, at);
            at += strlen(decl);
            cr_assert(*at == (j + 1 < kn->nargs ? ',' : ')'), "%s: %.60s", kn->name, at);
            at += j + 1 < kn->nargs ? 2 : 0;
        }
        total += kn->nargs;
    }
    cr_assert(res->nkernels > 1 && total < res->nkernels * res->nparams / 2,
              "%zu kernels take %zu arguments of %zu parameters", res->nkernels, total,
              res->nparams);
    /* every grid-stride loop (its step a runtime gridDim product) is kept rolled: unrolled, each
     * thread first divides by the stride in 64 bits to count the trips */
    int loops = 0;
    for (const char *p = res->source; (p = strstr(p, "for (int64_t ")) != NULL; p++) {
        const char *eol = strchr(p, '\n');
        if (eol == NULL || memmem(p, (size_t)(eol - p), "gridDim", 7) == NULL)
            continue;
        loops++;
        const char *line = p;
        while (line > res->source && line[-1] != '\n')
            line--;
        const char *prev = line - 1;
        while (prev > res->source && prev[-1] != '\n')
            prev--;
        while (*prev == ' ')
            prev++;
        cr_assert(strncmp(prev, "#pragma unroll 1\n", 17) == 0,
                  "an unrolled grid-stride loop: %.*s", (int)(eol - line), line);
    }
    cr_assert_gt(loops, 0);
#if TROUPE_HAVE_CUDA
    if (compile) {
        char *ptx = NULL, *log = NULL;
        troupe_status_t st = troupe_nvrtc_compile(res->source, name, "compute_80", &ptx, &log);
        cr_assert_eq(st, TROUPE_OK, "nvrtc: %s\n%s", troupe_last_error(), log ? log : "");
        troupe_free(ptx);
        troupe_free(log);
    }
#else
    (void)compile;
#endif
    troupe_cgen_result_destroy(&res);
    troupe_ll_proc_destroy(&proc);
    s_end(c);
    return n;
}

/* Causal attention over (1, T, 8), 2 heads, its output summed: forward and derived backward. */
static size_t s_attention_source(int64_t T, bool compile)
{
    s_case_t c;
    troupe_tnode_t *loss;
    s_attention(&c, 1, T, 8, 2, &loss);
    return s_cuda_source(&c, "attention_grad", compile);
}

/* The cross-entropy of 6 rows of Vp logits against targets, 10 of them valid. */
static size_t s_xent_source(int64_t vp, bool compile)
{
    s_case_t c;
    s_begin(&c);
    troupe_tnode_t *z, *t, *loss = NULL;
    OK(troupe_nn_param(c.nn, "z", 2, (int64_t[]){6, vp}, &z));
    OK(troupe_nn_node_prec(c.nn, "targets", TROUPE_PREC_INT32, 1, (int64_t[]){6}, &t));
    OK(troupe_nn_begin(c.nn, "loss"));
    OK(troupe_nn_softmax_xent_targets(c.nn, z, t, 10, &loss));
    OK(troupe_nn_finish(c.nn, loss));
    return s_cuda_source(&c, "xent_grad", compile);
}

Test(nn_cuda_source, attention_source_does_not_grow_with_the_sequence)
{
    size_t small = s_attention_source(64, true), large = s_attention_source(256, false);
    /* with the mask as constants, T = 256 added 2 (256^2 - 64^2) = 122880 statements (4 MB) */
    cr_assert(large < small + small / 4, "T = 64: %zu bytes of CUDA, T = 256: %zu", small, large);
}

Test(nn_cuda_source, xent_source_does_not_grow_with_the_padded_vocabulary)
{
    size_t small = s_xent_source(16, true), large = s_xent_source(8192, false);
    cr_assert(large < small + small / 4, "Vp = 16: %zu bytes of CUDA, Vp = 8192: %zu", small,
              large);
}

/* Causal attention over (B, T, C) = (2, 64, 32), 2 heads: its per-head products are batched GEMM
 * steps (every one; compiler/cgen.h), and on a CUDA device, where the driver runs them through
 * cuBLASLt's strided batches (devices/cuda/gemm_lt.c), the loss and every gradient equal the
 * cpu driver's within float rounding. */
Test(nn_cuda_source, attention_runs_its_batched_products_on_a_device_as_on_the_cpu, .timeout = 240)
{
    s_case_t c;
    troupe_tnode_t *loss;
    s_attention(&c, 2, 64, 32, 2, &loss);
    /* the values and hosted outputs before anything is lowered (lowering fixes memory modes) */
    troupe_tnode_t *const *params, *const *grads;
    size_t np = troupe_nn_params(c.nn, &params, &grads);
    cr_assert_eq(np, 3);
    for (size_t p = 0; p < np; p++) {
        size_t n = (size_t)troupe_tnode_num_elems(params[p]);
        double *v = malloc(n * sizeof *v);
        for (size_t k = 0; k < n; k++) /* deterministic, mixed signs, |v| < 0.5 */
            v[k] = 0.5 * sin(1.7 * (double)k + 0.3 * (double)p);
        rtu_set(params[p], v);
        free(v);
        rtu_set_hosted(grads[p], 999);
    }
    rtu_set_hosted(loss, 999);

    troupe_ll_proc_t *proc = NULL;
    troupe_cgen_result_t *res = s_emit(&c, "attention_batched", &proc);
    int batched = 0;
    for (size_t i = 0; i < res->nsteps; i++)
        batched += res->steps[i].kind == TROUPE_CGEN_STEP_GEMM && res->steps[i].gemm.nbatch > 0;
    /* forward: q k^T and att v; backward: two products for each */
    cr_assert_geq(batched, 6, "%d batched GEMM steps", batched);
    troupe_cgen_result_destroy(&res);
    troupe_ll_proc_destroy(&proc);

    char why[512];
    if (!rtu_cuda_present(why, sizeof why)) {
        s_end(&c);
        cr_skip_test("%s", why);
    }
    double got_loss[2];
    double *got[2][3];
    const char *drivers[2] = {"cpu", "cuda"};
    for (int d = 0; d < 2; d++) {
        rtu_env_t e;
        rtu_env_open(&e, drivers[d], 1);
        for (size_t p = 0; p < np; p++)
            rtu_init(&e.ctx[0], params[p]);
        troupe_code_t *code = NULL;
        troupe_routine_t *r = NULL;
        OK(troupe_compile(e.b, c.comp, "attention_batched", &code));
        OK(troupe_link(e.ctx[0], code, &r));
        troupe_event_t *ev = NULL;
        OK(troupe_routine_run(r, &ev));
        OK(troupe_event_sync(ev, 120 * 1000000000LL));
        troupe_event_release(&ev);
        OK(troupe_tnode_get_values(loss, &got_loss[d], 1));
        for (size_t p = 0; p < np; p++) {
            size_t n = (size_t)troupe_tnode_num_elems(grads[p]);
            got[d][p] = malloc(n * sizeof(double));
            OK(troupe_tnode_get_values(grads[p], got[d][p], n));
        }
        troupe_routine_release(&r);
        troupe_code_release(&code);
        rtu_env_close(&e);
    }
    cr_assert(fabs(got_loss[1] - got_loss[0]) <= 1e-5 * fabs(got_loss[0]),
              "loss: cuda %.9g, cpu %.9g", got_loss[1], got_loss[0]);
    for (size_t p = 0; p < np; p++) {
        size_t n = (size_t)troupe_tnode_num_elems(grads[p]);
        double gmax = 0, dmax = 0;
        for (size_t k = 0; k < n; k++) {
            gmax = fmax(gmax, fabs(got[0][p][k]));
            dmax = fmax(dmax, fabs(got[1][p][k] - got[0][p][k]));
        }
        cr_expect(gmax > 1e-3 && dmax <= 1e-5 * gmax, "%s: cuda differs by %g (max |g| %g)",
                  params[p]->label[0], dmax, gmax);
        free(got[0][p]);
        free(got[1][p]);
    }
    s_end(&c);
}

/* A convolution as the convnet runs it on a GPU (im2col with the batch folded, examples/fmnist),
 * its ReLU and a 2x2 max pool, summed (sizes whose sums stay below the C dialect's lane sums,
 * TROUPE_CGEN_LANES_MIN_TRIP terms, so that every result compares bit for bit): the CUDA dialect of
 * the forward and derived backward, run on the host (tests/cuda_emu.h, the planned grid and a small
 * reversed one), gives bit for bit what the compiled C and the interpreter give. Its im2col copy
 * and the pool's gradient index their outputs with several loops (9 c + 3 kh + kw; 2 oh + kh),
 * which now map onto the grid (compiler/cgen.h); the im2col gradient's oh + kh still overlaps and
 * stays in each thread. */
Test(nn_cuda_source, a_convolution_and_max_pool_gradient_emulated_match_c, .timeout = 240)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    s_case_t c;
    s_begin(&c);
    troupe_tnode_t *x, *w, *b, *y = NULL, *r = NULL, *p = NULL, *loss = NULL;
    OK(troupe_nn_param(c.nn, "x", 4, (int64_t[]){1, 3, 6, 6}, &x));
    OK(troupe_nn_param(c.nn, "w", 4, (int64_t[]){4, 3, 3, 3}, &w));
    OK(troupe_nn_param(c.nn, "b", 1, (int64_t[]){4}, &b));
    OK(troupe_nn_begin(c.nn, "conv"));
    troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
    o.lowering = TROUPE_NN_CONV2D_IM2COL_FOLDED;
    OK(troupe_nn_conv2d(c.nn, x, w, b, &o, &y));
    OK(troupe_nn_relu(c.nn, y, &r));
    troupe_nn_pool2d_opts_t po = TROUPE_NN_POOL2D_OPTS(2, 2);
    OK(troupe_nn_maxpool2d(c.nn, r, &po, &p));
    OK(troupe_nn_node(c.nn, "loss", 0, NULL, &loss));
    OK(troupe_nn_un(c.nn, true, TROUPE_BINOP_ADD, loss, TROUPE_UNOP_IDENTITY, p, "bchw=>"));
    OK(troupe_nn_finish(c.nn, loss));
    troupe_ll_proc_t *proc = NULL;
    troupe_cgen_result_t *res = s_emit(&c, "conv_pool_grad", &proc);
    troupe_cgen_result_destroy(&res);
    irt_binds_t bb;
    memset(&bb, 0, sizeof bb);
    irt_seed(7);
    irt_fill_uniform(&bb, x, -1.0, 1.0);
    irt_fill_uniform(&bb, w, -0.5, 0.5);
    irt_fill_uniform(&bb, b, -0.1, 0.1);
    irt_lib_t lib;
    irt_lib_open(proc, NULL, &lib);
    irt_run_and_compare(proc, &lib, &bb); /* C vs interpreter, then emulated CUDA vs C */
    irt_lib_close(&lib);
    irt_binds_free(&bb);
    troupe_ll_proc_destroy(&proc);
    s_end(&c);
}

/* The cuda driver compiles a routine as translation units in parallel (devices/cuda/module.c):
 * each unit is the prelude and a run of whole kernels in order, a kernel's constant table with
 * it; the runs cover every kernel once; each unit compiles on its own under NVRTC. */
Test(nn_cuda_source, the_source_cuts_into_units_that_compile_alone, .timeout = 240)
{
#if !TROUPE_HAVE_CUDA
    cr_skip_test("the cuda driver is not built (TROUPE_WITH_CUDA)");
#else
    s_case_t c;
    troupe_tnode_t *loss;
    s_attention(&c, 1, 64, 8, 2, &loss);
    troupe_ll_proc_t *proc = NULL;
    troupe_cgen_result_t *res = s_emit(&c, "units", &proc);
    cr_assert_geq(res->nkernels, 8);

    /* small routines stay one unit: the source as it is */
    troupe__cuda_unit_t *units = NULL;
    int n = 0;
    OK(troupe__cuda_units(res, 16, TROUPE__CUDA_UNIT_MIN_BYTES, &units, &n));
    cr_assert_eq(n, 1);
    cr_assert_str_eq(units[0].source, res->source);
    troupe__cuda_units_free(units, n);

    OK(troupe__cuda_units(res, 4, 1, &units, &n));
    cr_assert_eq(n, 4, "%d units", n);
    const char *first = strstr(res->source, "\nextern \"C\" __global__");
    const char *firsttab = strstr(res->source, "\n__constant__");
    if (firsttab != NULL && firsttab < first)
        first = firsttab;
    size_t prelude = (size_t)(first - res->source), body = 0;
    size_t next = 0;
    for (int u = 0; u < n; u++) {
        const troupe__cuda_unit_t *un = &units[u];
        cr_assert_eq(un->first_kernel, next, "unit %d starts at kernel %zu", u, un->first_kernel);
        cr_assert_gt(un->nkernels, 0);
        next += un->nkernels;
        cr_assert(strncmp(un->source, res->source, prelude) == 0, "unit %d: not the prelude", u);
        body += strlen(un->source) - prelude;
        for (size_t k = 0; k < res->nkernels; k++) {
            char sig[160], t[160];
            snprintf(sig, sizeof sig, "__global__ void %s(", res->kernels[k].name);
            snprintf(t, sizeof t, "%s_hz_end[", res->kernels[k].name);
            bool mine = k >= un->first_kernel && k < un->first_kernel + un->nkernels;
            cr_assert_eq(strstr(un->source, sig) != NULL, mine, "unit %d, kernel %s", u,
                         res->kernels[k].name);
            if (strstr(res->source, t) != NULL)
                cr_assert_eq(strstr(un->source, t) != NULL, mine, "unit %d, table of %s", u,
                             res->kernels[k].name);
        }
        char *ptx = NULL, *log = NULL;
        troupe_status_t st = troupe_nvrtc_compile(un->source, "unit", "compute_80", &ptx, &log);
        cr_assert_eq(st, TROUPE_OK, "unit %d: %s\n%s", u, troupe_last_error(), log ? log : "");
        troupe_free(ptx);
        troupe_free(log);
    }
    cr_assert_eq(next, res->nkernels);
    cr_assert_eq(prelude + body, res->source_len, "the units' kernels are not the source's");
    troupe__cuda_units_free(units, n);

    /* a kernel the source does not have is refused by name, and nothing is returned */
    char *name = res->kernels[3].name;
    res->kernels[3].name = "units_no_such_kernel";
    units = NULL;
    n = 7;
    cr_assert_eq(troupe__cuda_units(res, 4, 1, &units, &n), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "kernel units_no_such_kernel's signature") != NULL, "%s",
              troupe_last_error());
    cr_assert(units == NULL && n == 0);
    res->kernels[3].name = name;
    troupe_cgen_result_destroy(&res);
    troupe_ll_proc_destroy(&proc);
    s_end(&c);
#endif
}
