/* troupe — launches per training step of the main job on CUDA (issue 16): the CUDA dialect of
 * the Fashion-MNIST trainer's routines (examples/fmnist, parallel/dp.h: dp_grad, the merges
 * dp_merge_*, the hyper-parameter copy dp_hyper_stage*, the optimizer dp_sgd / dp_adamw) as
 * troupe_dp_new compiles them, counted in kernels and library calls (GEMM steps) per routine.
 *
 * The routines are built on the sync backend with TROUPE_STACK_THRESHOLD 0 and
 * TROUPE_LOOP_FUSION same-space, so that the optimiser makes no Local arrays and fuses only
 * nests over the same space, as it does for the cuda backend (devices/device.h,
 * no_local_arrays, no_outer_fusion), at the main job's size, 128 rows per replica, two streams (so
 * the merges exist), and generated with troupe_cgen_emit(TROUPE_CGEN_CUDA). The counts are
 * asserted, so a change that stops fusing fails here.
 *
 * Set TROUPE_TEST_KERNELS_DUMP=<dir> to write each routine's procedure and CUDA source there. */
#define _POSIX_C_SOURCE 200809L
#include "base/alloc.h"
#include "compiler/cgen.h"
#include "compiler/cgen_impl.h"
#include "compiler/interp.h"
#include "cuda_emu.h"
#include "ir/text.h"
#include "mlp.h"
#include "parallel/dp.h"
#include "parallel/dp_impl.h"
#include "troupe_config.h"
#if TROUPE_HAVE_CUDA
#include "devices/cuda/nvrtc.h"
#endif

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(x) cr_assert_eq((x), TROUPE_OK, "%s: %s", #x, troupe_last_error())

#define S_ROWS 128   /* per replica: the main job's batch */
#define S_BATCHES 4  /* minibatches in the data (the count does not depend on it) */

/* Launches of one call of a CUDA routine: a kernel step launches one kernel, a GEMM step one
 * library call (cuBLASLt; its fallback kernels run only when the library cannot). */
typedef struct s_count {
    size_t kernels, library;
    size_t one_thread; /* kernels of them that run on one thread (no parallelism) */
} s_count_t;

static size_t s_launches(s_count_t c)
{
    return c.kernels + c.library;
}

static void s_dump(const troupe_ll_proc_t *proc, const troupe_cgen_result_t *gen)
{
    const char *dir = getenv("TROUPE_TEST_KERNELS_DUMP");
    if (dir == NULL || dir[0] == '\0')
        return;
    char path[512], *text = NULL;
    snprintf(path, sizeof path, "%s/%s.txt", dir, proc->name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return;
    if (troupe_text_print_proc(proc, &text) == TROUPE_OK)
        fprintf(f, "%s\n", text);
    troupe_free(text);
    fprintf(f, "%s", gen->source);
    fclose(f);
}

static s_count_t s_count_gen(const troupe_cgen_result_t *gen)
{
    s_count_t c = {0, 0, 0};
    for (size_t i = 0; i < gen->nsteps; i++) {
        if (gen->steps[i].kind == TROUPE_CGEN_STEP_GEMM) {
            c.library++;
            continue;
        }
        c.kernels++;
        c.one_thread += gen->kernels[gen->steps[i].first_kernel].one_thread ? 1 : 0;
    }
    return c;
}

/* The routine's launches, and (*alone) those with sharing off (troupe__cgen_cuda_set_sharing:
 * each statement a launch of its own). */
static s_count_t s_count(const troupe_code_t *code, s_count_t *alone)
{
    const troupe_ll_proc_t *proc = troupe_code_proc(code);
    troupe_cgen_result_t *gen = NULL;
    troupe__cgen_cuda_set_sharing(false);
    troupe_status_t st = troupe_cgen_emit(proc, TROUPE_CGEN_CUDA, &gen);
    troupe__cgen_cuda_set_sharing(true);
    OK(st);
    *alone = s_count_gen(gen);
    troupe_cgen_result_destroy(&gen);
    OK(troupe_cgen_emit(proc, TROUPE_CGEN_CUDA, &gen));
    s_count_t c = s_count_gen(gen);
    s_dump(proc, gen);
    printf("kernels: %-16s %2zu kernels (%zu one-thread) + %zu library calls; unshared %zu + %zu\n",
           proc->name, c.kernels, c.one_thread, c.library, alone->kernels, alone->library);
    troupe_cgen_result_destroy(&gen);
    return c;
}

/* The per-routine counts of the trainer with optimizer `kind`, and a step's total: the gradient
 * routine, one merge per parameter, one hyper-parameter copy and the optimizer. */
typedef struct s_step {
    s_count_t feed, grad, merge, hyper, opt;
    size_t total, total_alone;
} s_step_t;

static void s_add_count(s_step_t *s, s_count_t *into, s_count_t c, s_count_t alone)
{
    into->kernels += c.kernels;
    into->library += c.library;
    into->one_thread += c.one_thread;
    s->total += s_launches(c);
    s->total_alone += s_launches(alone);
}

/* The trainer's routines as troupe_dp_new compiles them on two streams of the sync backend,
 * `rows` rows per replica, with optimizer `kind`, in the fed form (what the trainer picks on
 * cuda: a feed routine copies the minibatch, the gradient routine reads fixed nodes) or the
 * indexed one. */
static void s_open(troupe_optimizer_kind_t kind, int64_t rows, bool fed, fmnist_mlp_t **mlp_out,
                   troupe_dp_t **dp_out)
{
    fmnist_mlp_config_t mc = fmnist_mlp_config_default(rows, S_BATCHES);
    mc.fed = fed;
    fmnist_mlp_t *mlp = NULL;
    OK(fmnist_mlp_new(&mc, &mlp));
    OK(fmnist_mlp_init_params(mlp, 7));
    troupe_dp_model_t model;
    fmnist_mlp_dp_model(mlp, &model);
    OK(troupe_config_set_stack_threshold_bytes(0)); /* no Local arrays, as on cuda */
    troupe_config_set_loop_fusion_outer(false);     /* same-space fusion only, as on cuda */
    troupe_config_set_iteration_scalars(false);     /* no iteration scalars, as on cuda */
    troupe_dp_config_t dc = {
        .backend = "sync",
        .streams = 2,
        .optimizer = troupe_optimizer_default(kind),
        .overlap = TROUPE_DP_OVERLAP_OFF}; /* one gradient routine: what one rank compiles */
    OK(troupe_dp_new(&dc, &model, dp_out));
    *mlp_out = mlp;
}

static s_step_t s_trainer(troupe_optimizer_kind_t kind, bool fed)
{
    fmnist_mlp_t *mlp = NULL;
    troupe_dp_t *dp = NULL;
    s_open(kind, S_ROWS, fed, &mlp, &dp);
    s_step_t s;
    memset(&s, 0, sizeof s);
    s_count_t alone, c;
    cr_assert_eq(dp->feed_code != NULL, fed);
    if (fed) {
        c = s_count(dp->feed_code, &alone);
        s_add_count(&s, &s.feed, c, alone);
    }
    cr_assert_eq(dp->nseg, 1, "the gradient routine is one segment");
    c = s_count(dp->seg_code[0], &alone);
    s_add_count(&s, &s.grad, c, alone);
    for (size_t i = 0; i < dp->n_params; i++) {
        c = s_count(dp->merge_code[i], &alone);
        s_add_count(&s, &s.merge, c, alone);
    }
    c = s_count(dp->hyper_copy_code[0], &alone);
    s_add_count(&s, &s.hyper, c, alone);
    c = s_count(dp->opt_code, &alone);
    s_add_count(&s, &s.opt, c, alone);
    printf("kernels: %s %s step: %zu launches (%zu unshared)\n", troupe_optimizer_name(kind),
           fed ? "fed" : "indexed", s.total, s.total_alone);
    fflush(stdout);
    troupe_dp_destroy(&dp);
    fmnist_mlp_destroy(&mlp);
    return s;
}

/* The gradient routine, derived from the forward pass by nn/grad.h: 8 GEMM steps (3 forward, 3
 * weight gradients, 2 input gradients reading the weights transposed in place) and 10 kernels,
 * none on one thread (the hand-written backward it replaced took 11: it materialised two
 * transposes); the elementwise passes and bias sums share launches with independent ones. The
 * optimizer is one kernel (its per-parameter updates are independent), each merge one, the
 * hyper-parameter copy one, the feed (fed form) one. Unshared: 21 kernels for the gradient (24
 * before cheap temporaries read at most three times per cell were inlined: compiler/optimize.h
 * step 2; 22 before a gradient whose first contribution subtracts was no longer zeroed first:
 * compiler/lower.c writes 0 - v), 6 for the optimizer, 2 for the feed. */
static void s_assert_step(const s_step_t *s, bool fed)
{
    cr_expect_eq(s->feed.kernels, fed ? 1 : 0);
    cr_expect_eq(s->grad.library, 8);
    cr_expect_eq(s->grad.kernels, 10);
    cr_expect_eq(s->grad.one_thread, 0);
    cr_expect_eq(s->merge.kernels, 6);
    cr_expect_eq(s->merge.library, 0);
    cr_expect_eq(s->hyper.kernels, 1);
    cr_expect_eq(s->opt.kernels, 1);
    cr_expect_eq(s->opt.one_thread, 0);
    cr_expect_eq(s->total, fed ? 27 : 26);
    cr_expect_eq(s->total_alone, (fed ? 2 : 0) + 8 + 21 + 6 + 1 + 6, "%zu", s->total_alone);
}

/* Every test of this file has the same .timeout: with tests of different timeouts running at
 * once (--jobs 2), Criterion's runner leaks 48 bytes, which fails the ASan+UBSan pass
 * (deploy/test.sh, leak detection on). */
Test(kernels, main_job_sgd, .timeout = 600)
{
    s_step_t s = s_trainer(TROUPE_OPT_SGD, true);
    s_assert_step(&s, true);
    s = s_trainer(TROUPE_OPT_SGD, false);
    s_assert_step(&s, false);
}

Test(kernels, main_job_adamw, .timeout = 600)
{
    s_step_t s = s_trainer(TROUPE_OPT_ADAMW, true);
    s_assert_step(&s, true);
}

/* ---- the routines run: emulated CUDA against the interpreter ------------------------------- */

#define S_EMU_ROWS 64 /* the main job's plan on a smaller batch */

static uint64_t s_rng = 0x9E3779B97F4A7C15ull;

/* Uniform in [0, 1): positive values keep the optimizer's square roots real. */
static double s_unit(void)
{
    s_rng ^= s_rng >> 12;
    s_rng ^= s_rng << 25;
    s_rng ^= s_rng >> 27;
    return (double)((s_rng * 2685821657736338717ull) >> 11) * 0x1p-53;
}

/* Runs the CUDA dialect of `proc` on the host (tests/cuda_emu.h: planned grid, then a small grid
 * in reverse order) and the interpreter from the same random inputs, and checks every node the
 * routine writes bit for bit; NVRTC compiles it where the toolkit is. */
static size_t s_emulate(const troupe_ll_proc_t *proc, const char *must_have)
{
    troupe_cgen_result_t *res = NULL;
    OK(troupe_cgen_emit(proc, TROUPE_CGEN_CUDA, &res));
    if (must_have != NULL)
        cr_assert_not_null(strstr(res->source, must_have), "%s lacks '%s'", proc->name, must_have);
    for (size_t k = 0; k < res->nkernels; k++)
        cr_assert(!res->kernels[k].reassociates, "%s: kernel %s reassociates", proc->name,
                  res->kernels[k].name);
    size_t np = res->nparams;
    void **orig = calloc(np, sizeof(void *)), **ref = calloc(np, sizeof(void *)),
         **got = calloc(np, sizeof(void *)), **ptrs = calloc(np, sizeof(void *)),
         **args = calloc(np, sizeof(void *));
    int64_t *statics = calloc(np, sizeof(int64_t));
    troupe_interp_buffer_t *bufs = calloc(np, sizeof *bufs);
    troupe_interp_static_t *sts = calloc(np, sizeof *sts);
    cr_assert(orig && ref && got && ptrs && args && statics && bufs && sts);
    size_t nbufs = 0, nsts = 0;
    const void *merge = NULL;
    for (size_t k = 0; k < np; k++) {
        const troupe_cgen_param_t *p = &res->params[k];
        if (p->kind == TROUPE_CGEN_PARAM_STATIC_IDX) {
            statics[k] = p->static_range > 1 ? 1 : 0;
            sts[nsts++] = (troupe_interp_static_t){p->sym, NULL, statics[k]};
            args[k] = &statics[k];
            continue;
        }
        size_t bytes = p->tn->size_bytes, es = troupe_prec_size_bytes(p->tn->prec);
        orig[k] = malloc(bytes);
        ref[k] = malloc(bytes);
        got[k] = malloc(bytes);
        cr_assert(orig[k] && ref[k] && got[k]);
        for (size_t i = 0; i < bytes / es; i++)
            troupe_prec_store_double(p->tn->prec, (char *)orig[k] + i * es, s_unit());
        memcpy(ref[k], orig[k], bytes);
        if (p->kind == TROUPE_CGEN_PARAM_MERGE_BUFFER)
            merge = ref[k];
        else
            bufs[nbufs++] = (troupe_interp_buffer_t){p->tn, ref[k]};
        ptrs[k] = got[k];
        args[k] = &ptrs[k];
    }
    troupe_interp_args_t ia = {bufs, nbufs, sts, nsts, merge};
    OK(troupe_interp_run(proc, &ia));
    if (troupe_emu_available()) {
        troupe_emu_t e;
        troupe_emu_open(res, &e);
        for (int shape = 0; shape < 2; shape++) {
            for (size_t k = 0; k < np; k++)
                if (got[k] != NULL)
                    memcpy(got[k], orig[k], res->params[k].tn->size_bytes);
            troupe_emu_run(&e, args, (troupe_emu_shape_t)shape, -1);
            for (size_t k = 0; k < np; k++) {
                const troupe_cgen_param_t *p = &res->params[k];
                if (p->kind != TROUPE_CGEN_PARAM_NODE_PTR || !p->is_written)
                    continue;
                size_t es = troupe_prec_size_bytes(p->tn->prec);
                for (size_t i = 0; i < p->tn->size_bytes / es; i++)
                    cr_assert(memcmp((char *)got[k] + i * es, (char *)ref[k] + i * es, es) == 0,
                              "%s (%s): %s element %zu: emulated CUDA %.9g, the interpreter %.9g",
                              proc->name, shape ? "small grid, reverse" : "planned grid",
                              p->ident, i,
                              troupe_prec_load_double(p->tn->prec, (char *)got[k] + i * es),
                              troupe_prec_load_double(p->tn->prec, (char *)ref[k] + i * es));
            }
        }
        troupe_emu_close(&e);
    }
#if TROUPE_HAVE_CUDA
    char *ptx = NULL, *log = NULL;
    troupe_status_t st = troupe_nvrtc_compile(res->source, proc->name, "compute_80", &ptx, &log);
    if (st != TROUPE_OK)
        cr_log_error("%s", log ? log : "");
    cr_expect_eq(st, TROUPE_OK, "%s: nvrtc: %s", proc->name, troupe_last_error());
    troupe_free(ptx);
    troupe_free(log);
#endif
    for (size_t k = 0; k < np; k++) {
        free(orig[k]);
        free(ref[k]);
        free(got[k]);
    }
    free(orig);
    free(ref);
    free(got);
    free(ptrs);
    free(args);
    free(statics);
    free(bufs);
    free(sts);
    size_t launches = res->nsteps;
    troupe_cgen_result_destroy(&res);
    return launches;
}

/* Every routine of a step, shared launches included. */
static void s_emulate_step(troupe_optimizer_kind_t kind)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    fmnist_mlp_t *mlp = NULL;
    troupe_dp_t *dp = NULL;
    s_open(kind, S_EMU_ROWS, true, &mlp, &dp);
    /* the (derived) gradient routine without Local arrays (no one-block segment: 10 kernels and
     * 8 GEMM steps at 128 rows, 18 launches at 64); the optimizer's parts in one kernel */
    s_emulate(troupe_code_proc(dp->feed_code), "2 parts over");
    size_t grad_launches = s_emulate(troupe_code_proc(dp->seg_code[0]), NULL);
    cr_expect_eq(grad_launches, 18, "%zu", grad_launches);
    s_emulate(troupe_code_proc(dp->merge_code[0]), NULL);
    s_emulate(troupe_code_proc(dp->hyper_copy_code[0]), NULL);
    s_emulate(troupe_code_proc(dp->opt_code), "6 parts over");
    troupe_dp_destroy(&dp);
    fmnist_mlp_destroy(&mlp);
}

Test(kernels, emulated_step_sgd, .timeout = 600)
{
    s_emulate_step(TROUPE_OPT_SGD);
}

Test(kernels, emulated_step_adamw, .timeout = 600)
{
    s_emulate_step(TROUPE_OPT_ADAMW);
}
