/* Tests for compiler/cgen (C and CUDA source from the low-level IR) and devices/cuda/nvrtc.
 *
 * Each routine is built with the lowlevel builders, emitted as C, written to a temporary
 * directory, compiled with the system compiler (`cc -O2 -shared -fPIC`, warnings as errors),
 * dlopened and called through `<name>_entry`. Its outputs are compared with values computed
 * here and, bit for bit, with the reference interpreter (compiler/interp.h) run on copies of the
 * same inputs. Tolerances: exact everywhere, except exp/log/tanh against this file's own libm
 * calls (2 ulp; the interpreter comparison stays exact since both call the same libm).
 * The CUDA dialect of the same procedures is compiled with NVRTC when the toolkit was found at
 * build time (TROUPE_HAVE_CUDA); otherwise those tests are skipped.
 */
#define _POSIX_C_SOURCE 200809L
#include "base/config.h"
#include "compiler/cgen.h"
#include "compiler/cgen_impl.h"
#include "compiler/interp.h"
#include "compiler/lower.h"
#include "compiler/optimize.h"
#include "ir/assign.h"
#include "ir/lowlevel.h"
#include "ir/ops.h"
#include "ir/prec.h"
#include "ir/tnode.h"
#include "troupe_config.h"
#if TROUPE_HAVE_CUDA
#include "devices/cuda/nvrtc.h"
#endif
#include "base/alloc.h"
#include "cuda_emu.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- small helpers ------------------------------------------------------------------------ */

static uint64_t s_rng = 0x243F6A8885A308D3ull;
static uint32_t s_rnd32(void)
{
    s_rng ^= s_rng >> 12;
    s_rng ^= s_rng << 25;
    s_rng ^= s_rng >> 27;
    return (uint32_t)((s_rng * 2685821657736338717ull) >> 32);
}

/* Uniform in [lo, hi) as a float. */
static float s_rndf(float lo, float hi)
{
    return lo + (hi - lo) * (float)(s_rnd32() >> 8) * (1.0f / 16777216.0f);
}

static troupe_tnode_t *s_node(const char *label, troupe_prec_t prec, int ndims, int64_t d0,
                              int64_t d1)
{
    int64_t dims[2] = {d0, d1};
    const char *labels[1] = {label};
    troupe_tnode_t *tn = NULL;
    cr_assert_eq(troupe_tnode_new(labels, 1, prec, ndims, dims, NULL, 0.0, &tn), TROUPE_OK, "%s",
                 troupe_last_error());
    return tn;
}

static troupe_tnode_t *s_node3(const char *label, int64_t d0, int64_t d1, int64_t d2)
{
    int64_t dims[3] = {d0, d1, d2};
    const char *labels[1] = {label};
    troupe_tnode_t *tn = NULL;
    cr_assert_eq(troupe_tnode_new(labels, 1, TROUPE_PREC_SINGLE, 3, dims, NULL, 0.0, &tn),
                 TROUPE_OK, "%s", troupe_last_error());
    return tn;
}

static void s_set_mode(troupe_tnode_t *tn, troupe_memory_mode_kind_t kind)
{
    troupe_memory_mode_t m = {kind, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET};
    cr_assert_eq(troupe_tnode_update_memory_mode(tn, m, 1), TROUPE_OK, "%s", troupe_last_error());
}

static troupe_ll_proc_t *s_proc(const char *name)
{
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new(name, &p), TROUPE_OK, "%s", troupe_last_error());
    return p;
}

static void s_finish(troupe_ll_proc_t *p, troupe_ll_t *body)
{
    cr_assert_not_null(body, "builder failed: %s", troupe_last_error());
    p->body = body;
    cr_assert_eq(troupe_ll_proc_status(p), TROUPE_OK);
    cr_assert_eq(troupe_ll_proc_validate(p), TROUPE_OK, "%s", troupe_last_error());
}

static troupe_axis_index_t s_ix(int32_t sym)
{
    return troupe_idx_sym(sym);
}

/* Affine index c*sym + off. */
static troupe_axis_index_t s_aff(int64_t c, int32_t sym, int64_t off)
{
    troupe_axis_index_t x = troupe_idx_sym(sym);
    x.terms[0].coeff = c;
    x.offset = off;
    return x;
}

static troupe_sc_t *s_get1(troupe_ll_proc_t *p, troupe_tnode_t *tn, troupe_axis_index_t a)
{
    return troupe_sc_get(p, tn, &a);
}

static troupe_sc_t *s_get2(troupe_ll_proc_t *p, troupe_tnode_t *tn, troupe_axis_index_t a,
                           troupe_axis_index_t b)
{
    troupe_axis_index_t idx[2] = {a, b};
    return troupe_sc_get(p, tn, idx);
}

static troupe_ll_t *s_set1(troupe_ll_proc_t *p, troupe_tnode_t *tn, troupe_axis_index_t a,
                           troupe_sc_t *v)
{
    return troupe_ll_set(p, tn, &a, v);
}

static troupe_ll_t *s_set2(troupe_ll_proc_t *p, troupe_tnode_t *tn, troupe_axis_index_t a,
                           troupe_axis_index_t b, troupe_sc_t *v)
{
    troupe_axis_index_t idx[2] = {a, b};
    return troupe_ll_set(p, tn, idx, v);
}

static troupe_ll_t *s_for(troupe_ll_proc_t *p, int32_t sym, int64_t n, troupe_ll_t *body)
{
    return troupe_ll_for(p, sym, 0, n - 1, body, false);
}

static void *s_buffer(const troupe_tnode_t *tn)
{
    void *b = calloc(1, tn->size_bytes);
    cr_assert_not_null(b);
    return b;
}

static void s_fill_float(const troupe_tnode_t *tn, void *buf, float lo, float hi)
{
    int64_t n = troupe_tnode_num_elems(tn);
    for (int64_t i = 0; i < n; i++)
        troupe_prec_store_double(tn->prec,
                                 (char *)buf + (size_t)i * troupe_prec_size_bytes(tn->prec),
                                 (double)s_rndf(lo, hi));
}

static char *s_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    return s;
}

/* ---- compile and load C --------------------------------------------------------------------- */

typedef struct s_lib {
    char dir[128];
    void *handle;
    void (*entry)(void **);
    troupe_cgen_result_t *res;
} s_lib_t;

static void s_lib_close(s_lib_t *lib)
{
    char path[256];
    if (lib->handle != NULL)
        dlclose(lib->handle);
    troupe_cgen_result_destroy(&lib->res);
    if (lib->dir[0] != '\0') {
        const char *files[] = {"routine.c", "routine.so", "cc.log"};
        for (size_t i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", lib->dir, files[i]);
            unlink(path);
        }
        rmdir(lib->dir);
    }
    memset(lib, 0, sizeof *lib);
}

/* Emits C for proc and compiles it with `flags`; fails the test on any error. */
static void s_lib_open(const troupe_ll_proc_t *proc, const char *flags, s_lib_t *lib)
{
    char path[256], cmd[1024];
    memset(lib, 0, sizeof *lib);
    cr_assert_eq(troupe_cgen_emit(proc, TROUPE_CGEN_C, &lib->res), TROUPE_OK, "emit: %s",
                 troupe_last_error());
    snprintf(lib->dir, sizeof lib->dir, "/tmp/troupe-cgen-XXXXXX");
    cr_assert_not_null(mkdtemp(lib->dir));
    snprintf(path, sizeof path, "%s/routine.c", lib->dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fwrite(lib->res->source, 1, lib->res->source_len, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc %s -shared -fPIC -o %s/routine.so %s -lm 2> %s/cc.log", flags,
             lib->dir, path, lib->dir);
    if (system(cmd) != 0) {
        snprintf(path, sizeof path, "%s/cc.log", lib->dir);
        char *log = s_read_file(path);
        cr_log_error("compiler failed:\n%s\n--- source ---\n%s", log ? log : "", lib->res->source);
        free(log);
        cr_assert_fail("cc failed for %s", proc->name);
    }
    snprintf(path, sizeof path, "%s/routine.so", lib->dir);
    lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(lib->handle, "dlopen: %s", dlerror());
    void *sym = dlsym(lib->handle, lib->res->entry_name);
    cr_assert_not_null(sym, "dlsym %s", lib->res->entry_name);
    memcpy(&lib->entry, &sym, sizeof sym);
    /* The typed routine is exported too. */
    cr_assert_not_null(dlsym(lib->handle, lib->res->name));
}

/* ---- running a routine both ways ----------------------------------------------------------- */

#define S_MAX_BINDS 12

typedef struct s_run {
    size_t nbinds;
    troupe_tnode_t *tn[S_MAX_BINDS];
    void *data[S_MAX_BINDS];
    const char *static_name; /* optional static index */
    int64_t static_value;
    void *merge; /* optional merge buffer */
    /* Kernels that reassociate (block-level reductions): the largest difference from the
     * interpreter allowed per element (the test's bound for its reductions); 0 otherwise. */
    double reassoc_tol;
} s_run_t;

static void s_bind(s_run_t *r, troupe_tnode_t *tn, void *data)
{
    cr_assert_lt(r->nbinds, S_MAX_BINDS);
    r->tn[r->nbinds] = tn;
    r->data[r->nbinds] = data;
    r->nbinds++;
}

static void s_call(const s_lib_t *lib, const s_run_t *r)
{
    void *args[32];
    const troupe_cgen_result_t *res = lib->res;
    cr_assert_leq(res->nparams, 32);
    for (size_t k = 0; k < res->nparams; k++) {
        const troupe_cgen_param_t *p = &res->params[k];
        args[k] = NULL;
        if (p->kind == TROUPE_CGEN_PARAM_NODE_PTR) {
            for (size_t b = 0; b < r->nbinds; b++)
                if (r->tn[b] == p->tn)
                    args[k] = r->data[b];
            cr_assert_not_null(args[k], "no buffer for parameter %s", p->decl);
        } else if (p->kind == TROUPE_CGEN_PARAM_STATIC_IDX) {
            cr_assert(r->static_name != NULL && strcmp(r->static_name, p->sym_name) == 0);
            args[k] = (void *)&r->static_value;
        } else {
            cr_assert_not_null(r->merge);
            args[k] = r->merge;
        }
    }
    lib->entry(args);
}

/* Runs the interpreter on copies of the bound buffers (made before the compiled call) and
 * compares every bound node bytewise with what the compiled routine produced; within
 * r->reassoc_tol instead when the C unit holds a lane sum (res->reassociates, cgen.h). */
static void s_compare_with_interp(const troupe_ll_proc_t *proc, const troupe_cgen_result_t *res,
                                  const s_run_t *r, void *const *before)
{
    cr_assert(!res->reassociates || r->reassoc_tol > 0,
              "%s: the C unit holds a lane sum but the test gives no bound", proc->name);
    troupe_interp_buffer_t bufs[S_MAX_BINDS];
    troupe_interp_static_t st = {-1, r->static_name, r->static_value};
    for (size_t b = 0; b < r->nbinds; b++) {
        bufs[b].tn = r->tn[b];
        bufs[b].data = before[b];
    }
    troupe_interp_args_t args = {bufs, r->nbinds, &st, r->static_name ? 1 : 0, r->merge};
    cr_assert_eq(troupe_interp_run(proc, &args), TROUPE_OK, "interp: %s", troupe_last_error());
    for (size_t b = 0; b < r->nbinds; b++) {
        const troupe_tnode_t *tn = r->tn[b];
        size_t es = troupe_prec_size_bytes(tn->prec);
        int64_t n = troupe_tnode_num_elems(tn);
        for (int64_t i = 0; i < n; i++) {
            const char *x = (const char *)r->data[b] + (size_t)i * es;
            const char *y = (const char *)before[b] + (size_t)i * es;
            if (res->reassociates) {
                double xv = troupe_prec_load_double(tn->prec, x);
                double yv = troupe_prec_load_double(tn->prec, y);
                cr_assert(fabs(xv - yv) <= r->reassoc_tol,
                          "%s: node #%d element %lld: generated %.9g, interpreter %.9g (bound %g)",
                          proc->name, tn->id, (long long)i, xv, yv, r->reassoc_tol);
            } else if (memcmp(x, y, es) != 0) {
                cr_assert_fail("%s: node #%d element %lld differs from the interpreter: "
                               "generated %.9g, interpreter %.9g",
                               proc->name, tn->id, (long long)i,
                               troupe_prec_load_double(tn->prec, x),
                               troupe_prec_load_double(tn->prec, y));
            }
        }
    }
}

/* ---- the CUDA dialect, emulated on the host (cuda_emu.h) ------------------------------------ */

static int s_emu_runs; /* routines checked through the emulation in this process */

/* args for an emulated call: args[k] points to parameter k's value (the buffers in data). */
static void s_emu_args(const troupe_cgen_result_t *res, const s_run_t *r, void **data, void **ptrs,
                       void **args)
{
    for (size_t k = 0; k < res->nparams; k++) {
        const troupe_cgen_param_t *p = &res->params[k];
        args[k] = NULL;
        if (p->kind == TROUPE_CGEN_PARAM_NODE_PTR) {
            for (size_t b = 0; b < r->nbinds; b++)
                if (r->tn[b] == p->tn)
                    ptrs[k] = data[b];
            args[k] = &ptrs[k];
        } else if (p->kind == TROUPE_CGEN_PARAM_STATIC_IDX) {
            args[k] = (void *)&r->static_value;
        } else {
            ptrs[k] = r->merge;
            args[k] = &ptrs[k];
        }
    }
}

/* The options every CUDA emission of this file uses (NULL: the defaults); a test that sets it
 * puts NULL back before it ends. */
static const troupe_cgen_options_t *s_cuda_opts;

/* Runs the CUDA dialect of proc emulated on the host, from the inputs `orig`, under both
 * emulation shapes, and checks it gives bit for bit what the C dialect gave (r->data, equal to
 * the interpreter); each GEMM step is also computed from its call description and checked
 * within rounding. Without a C++ compiler nothing is checked (Test(cuda_emu, ...) skips). */
static void s_emu_check(const troupe_ll_proc_t *proc, const s_run_t *r, void *const *orig)
{
    if (!troupe_emu_available())
        return;
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit_with(proc, TROUPE_CGEN_CUDA, s_cuda_opts, &res), TROUPE_OK,
                 "emit: %s", troupe_last_error());
    troupe_emu_t e;
    troupe_emu_open(res, &e);
    void *data[S_MAX_BINDS], *first[S_MAX_BINDS], *ptrs[32], *args[32];
    cr_assert_leq(res->nparams, 32);
    bool reassoc = false;
    for (size_t k = 0; k < res->nkernels; k++)
        reassoc = reassoc || res->kernels[k].reassociates;
    cr_assert(!reassoc || r->reassoc_tol > 0,
              "%s: a kernel reassociates and the test gave no "
              "tolerance",
              proc->name);
    for (size_t b = 0; b < r->nbinds; b++) {
        data[b] = malloc(r->tn[b]->size_bytes);
        first[b] = malloc(r->tn[b]->size_bytes);
    }
    for (long ref = -1; ref < (long)res->nsteps; ref++) {
        if (ref >= 0 && res->steps[ref].kind != TROUPE_CGEN_STEP_GEMM)
            continue;
        for (int shape = 0; shape < (ref < 0 ? 2 : 1); shape++) {
            for (size_t b = 0; b < r->nbinds; b++)
                memcpy(data[b], orig[b], r->tn[b]->size_bytes);
            s_emu_args(res, r, data, ptrs, args);
            troupe_emu_run(&e, args, (troupe_emu_shape_t)shape, ref);
            for (size_t b = 0; b < r->nbinds; b++) {
                const troupe_tnode_t *tn = r->tn[b];
                size_t es = troupe_prec_size_bytes(tn->prec);
                for (int64_t i = 0; i < troupe_tnode_num_elems(tn); i++) {
                    const char *x = (const char *)data[b] + (size_t)i * es;
                    const char *y = (const char *)r->data[b] + (size_t)i * es;
                    double xv = troupe_prec_load_double(tn->prec, x);
                    double yv = troupe_prec_load_double(tn->prec, y);
                    if (ref < 0 && reassoc) {
                        /* Bitwise the same for any grid; within the bound of the interpreter. */
                        if (shape == 1)
                            cr_assert(memcmp(x, (const char *)first[b] + (size_t)i * es, es) == 0,
                                      "%s: node #%d element %lld differs between the planned "
                                      "and the small reversed grid",
                                      proc->name, tn->id, (long long)i);
                        cr_assert(fabs(xv - yv) <= r->reassoc_tol,
                                  "%s (CUDA emulated, %s): node #%d element %lld: %.17g, the "
                                  "interpreter %.17g (bound %.3g)",
                                  proc->name, shape ? "small grid, reverse" : "planned grid",
                                  tn->id, (long long)i, xv, yv, r->reassoc_tol);
                    } else if (ref < 0)
                        cr_assert(memcmp(x, y, es) == 0,
                                  "%s (CUDA emulated, %s): node #%d element %lld: %.9g, C and "
                                  "the interpreter %.9g",
                                  proc->name, shape ? "small grid, reverse" : "planned grid",
                                  tn->id, (long long)i, xv, yv);
                    else
                        cr_assert(fabs(xv - yv) <= 1e-4 * (1.0 + fabs(yv)),
                                  "%s: GEMM step %ld's description gives %.9g at node #%d "
                                  "element %lld, the loops %.9g",
                                  proc->name, ref, xv, tn->id, (long long)i, yv);
                }
                if (ref < 0 && shape == 0)
                    memcpy(first[b], data[b], tn->size_bytes);
            }
        }
    }
    for (size_t b = 0; b < r->nbinds; b++) {
        free(data[b]);
        free(first[b]);
    }
    troupe_emu_close(&e);
    troupe_cgen_result_destroy(&res);
    s_emu_runs++;
}

/* Compiles proc with `flags`, runs it on the bound buffers (updated in place), and checks the
 * interpreter agrees bit for bit; then checks the CUDA dialect emulated on the host agrees too
 * (s_emu_check). */
static void s_run_flags(const troupe_ll_proc_t *proc, s_run_t *r, const char *flags)
{
    void *before[S_MAX_BINDS], *orig[S_MAX_BINDS];
    for (size_t b = 0; b < r->nbinds; b++) {
        before[b] = malloc(r->tn[b]->size_bytes);
        orig[b] = malloc(r->tn[b]->size_bytes);
        memcpy(before[b], r->data[b], r->tn[b]->size_bytes);
        memcpy(orig[b], r->data[b], r->tn[b]->size_bytes);
    }
    s_lib_t lib;
    s_lib_open(proc, flags, &lib);
    s_call(&lib, r);
    s_compare_with_interp(proc, lib.res, r, before);
    /* A lane sum leaves C within a bound of the interpreter: the CUDA emulation (whose
     * in-thread sums are the interpreter's) is then checked against the interpreter. */
    if (lib.res->reassociates)
        for (size_t b = 0; b < r->nbinds; b++)
            memcpy(r->data[b], before[b], r->tn[b]->size_bytes);
    s_lib_close(&lib);
    s_emu_check(proc, r, orig);
    for (size_t b = 0; b < r->nbinds; b++) {
        free(before[b]);
        free(orig[b]);
    }
}

static const char s_flags[] = "-O2 -Wall -Wextra -Werror";

static void s_run(const troupe_ll_proc_t *proc, s_run_t *r)
{
    s_run_flags(proc, r, s_flags);
}

/* ---- NVRTC helper ------------------------------------------------------------------------- */

/* Emits the CUDA dialect of proc and compiles it with NVRTC; skips without the toolkit. */
static void s_nvrtc_check(const troupe_ll_proc_t *proc)
{
#if TROUPE_HAVE_CUDA
    troupe_cgen_result_t *res = NULL;
    char *ptx = NULL, *log = NULL, entry[256];
    cr_assert_eq(troupe_cgen_emit_with(proc, TROUPE_CGEN_CUDA, s_cuda_opts, &res), TROUPE_OK,
                 "emit: %s", troupe_last_error());
    cr_assert_null(res->entry_name);
    troupe_status_t st = troupe_nvrtc_compile(res->source, proc->name, "compute_80", &ptx, &log);
    if (st != TROUPE_OK)
        cr_log_error("%s\n--- source ---\n%s", log ? log : "", res->source);
    cr_assert_eq(st, TROUPE_OK, "nvrtc: %s", troupe_last_error());
    for (size_t k = 0; k < res->nkernels; k++) {
        snprintf(entry, sizeof entry, ".entry %s(", res->kernels[k].name);
        cr_assert_not_null(strstr(ptx, entry), "PTX lacks '%s'", entry);
    }
    troupe_free(ptx);
    troupe_free(log);
    troupe_cgen_result_destroy(&res);
#else
    (void)proc;
#endif
}

/* Runs *p with the bound buffers (s_run: C, the interpreter and the CUDA dialect emulated),
 * NVRTC-compiles it and destroys it. */
static void s_run_once(troupe_ll_proc_t **p, s_run_t *r)
{
    s_run(*p, r);
    s_nvrtc_check(*p);
    troupe_ll_proc_destroy(p);
}

/* ---- procedures used by several tests ------------------------------------------------------ */

typedef struct s_mm {
    troupe_ll_proc_t *p;
    troupe_tnode_t *a, *b, *c;
} s_mm_t;

/* c[i,k] = sum_j a[i,j] * b[j,k], c zeroed first; 3x4 times 4x5. */
static void s_build_matmul(s_mm_t *m, const char *name, troupe_prec_t prec)
{
    m->p = s_proc(name);
    m->a = s_node("a", prec, 2, 3, 4);
    m->b = s_node("b", prec, 2, 4, 5);
    m->c = s_node("c", prec, 2, 3, 5);
    troupe_ll_proc_t *p = m->p;
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, NULL),
            k = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *v =
        troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get2(p, m->c, s_ix(i), s_ix(k)),
                        troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get2(p, m->a, s_ix(i), s_ix(j)),
                                        s_get2(p, m->b, s_ix(j), s_ix(k))));
    troupe_ll_t *loops =
        s_for(p, i, 3, s_for(p, j, 4, s_for(p, k, 5, s_set2(p, m->c, s_ix(i), s_ix(k), v))));
    s_finish(p, troupe_ll_seq2(p, troupe_ll_zero_out(p, m->c), loops));
}

static void s_free_matmul(s_mm_t *m)
{
    troupe_ll_proc_destroy(&m->p);
    troupe_tnode_release(&m->a);
    troupe_tnode_release(&m->b);
    troupe_tnode_release(&m->c);
}

/* y[i,j] = relu(x[i,j] + bias[j]), 2x3. */
static troupe_ll_proc_t *s_build_bias_relu(troupe_tnode_t **x, troupe_tnode_t **bias,
                                           troupe_tnode_t **y)
{
    troupe_ll_proc_t *p = s_proc("bias_relu");
    *x = s_node("x", TROUPE_PREC_SINGLE, 2, 2, 3);
    *bias = s_node("bias", TROUPE_PREC_SINGLE, 1, 3, 0);
    *y = s_node("y", TROUPE_PREC_SINGLE, 2, 2, 3);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *v =
        troupe_sc_unop(p, TROUPE_UNOP_RELU,
                       troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get2(p, *x, s_ix(i), s_ix(j)),
                                       s_get1(p, *bias, s_ix(j))));
    s_finish(p, s_for(p, i, 2, s_for(p, j, 3, s_set2(p, *y, s_ix(i), s_ix(j), v))));
    return p;
}

/* acc[i] = op(acc[i], x[i,j]) for j in 0..5, i in 0..3. */
static troupe_ll_proc_t *s_build_accum(troupe_binop_t op, troupe_prec_t prec, troupe_tnode_t **acc,
                                       troupe_tnode_t **x)
{
    char name[64];
    snprintf(name, sizeof name, "accum_%s_%s", troupe_binop_name(op), troupe_prec_name(prec));
    troupe_ll_proc_t *p = s_proc(name);
    *acc = s_node("acc", prec, 1, 4, 0);
    *x = s_node("x", prec, 2, 4, 6);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *v =
        troupe_sc_binop(p, op, s_get1(p, *acc, s_ix(i)), s_get2(p, *x, s_ix(i), s_ix(j)));
    s_finish(p, s_for(p, i, 4, s_for(p, j, 6, s_set1(p, *acc, s_ix(i), v))));
    return p;
}

/* ---- tests: C dialect -------------------------------------------------------------------- */

Test(cgen, matmul_3x4x5_single)
{
    s_mm_t m;
    s_build_matmul(&m, "matmul", TROUPE_PREC_SINGLE);
    float a[12], b[20], c[15], want[15];
    for (int i = 0; i < 12; i++)
        a[i] = s_rndf(-2, 2);
    for (int i = 0; i < 20; i++)
        b[i] = s_rndf(-2, 2);
    for (int i = 0; i < 15; i++)
        c[i] = 99.0f; /* zeroed by the routine */
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 5; k++) {
            float s = 0.0f;
            for (int j = 0; j < 4; j++) {
                volatile float prod = a[i * 4 + j] * b[j * 5 + k];
                s = s + prod;
            }
            want[i * 5 + k] = s;
        }
    s_run_t r = {0};
    s_bind(&r, m.a, a);
    s_bind(&r, m.b, b);
    s_bind(&r, m.c, c);
    s_run(m.p, &r);
    for (int i = 0; i < 15; i++)
        cr_expect_eq(c[i], want[i], "c[%d] = %.9g, want %.9g", i, c[i], want[i]);
    s_free_matmul(&m);
}

Test(cgen, matmul_int32_and_double)
{
    s_mm_t m;
    s_build_matmul(&m, "matmul_i32", TROUPE_PREC_INT32);
    int32_t a[12], b[20], c[15] = {0}, want[15];
    for (int i = 0; i < 12; i++)
        a[i] = (int32_t)(s_rnd32() % 41) - 20;
    for (int i = 0; i < 20; i++)
        b[i] = (int32_t)(s_rnd32() % 41) - 20;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 5; k++) {
            want[i * 5 + k] = 0;
            for (int j = 0; j < 4; j++)
                want[i * 5 + k] += a[i * 4 + j] * b[j * 5 + k];
        }
    s_run_t r = {0};
    s_bind(&r, m.a, a);
    s_bind(&r, m.b, b);
    s_bind(&r, m.c, c);
    s_run(m.p, &r);
    for (int i = 0; i < 15; i++)
        cr_expect_eq(c[i], want[i]);
    s_free_matmul(&m);

    s_build_matmul(&m, "matmul_f64", TROUPE_PREC_DOUBLE);
    double da[12], db[20], dc[15] = {0};
    for (int i = 0; i < 12; i++)
        da[i] = s_rndf(-1, 1);
    for (int i = 0; i < 20; i++)
        db[i] = s_rndf(-1, 1);
    s_run_t r2 = {0};
    s_bind(&r2, m.a, da);
    s_bind(&r2, m.b, db);
    s_bind(&r2, m.c, dc);
    s_run(m.p, &r2);
    double s = 0.0;
    for (int j = 0; j < 4; j++) {
        volatile double prod = da[j] * db[j * 5];
        s = s + prod;
    }
    cr_expect_eq(dc[0], s);
    s_free_matmul(&m);
}

/* -O3 -march=native may fuse a*b+c unless the unit forbids it: results must not change. */
Test(cgen, matmul_o3_native_no_contraction)
{
    s_mm_t m;
    s_build_matmul(&m, "matmul_o3", TROUPE_PREC_SINGLE);
    float a[12], b[20], c[15];
    for (int i = 0; i < 12; i++)
        a[i] = s_rndf(-3, 3);
    for (int i = 0; i < 20; i++)
        b[i] = s_rndf(-3, 3);
    s_run_t r = {0};
    s_bind(&r, m.a, a);
    s_bind(&r, m.b, b);
    s_bind(&r, m.c, c);
    s_run_flags(m.p, &r, "-O3 -march=native -ffp-contract=fast -Wall -Wextra -Werror");
    s_free_matmul(&m);
}

Test(cgen, bias_relu)
{
    troupe_tnode_t *x, *bias, *y;
    troupe_ll_proc_t *p = s_build_bias_relu(&x, &bias, &y);
    float xv[6] = {-1.5f, 0.25f, 3.0f, 0.0f, -0.5f, 2.0f}, bv[3] = {0.5f, -1.0f, 1.0f}, yv[6];
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, bias, bv);
    s_bind(&r, y, yv);
    s_run(p, &r);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            float s = xv[i * 3 + j] + bv[j];
            cr_expect_eq(yv[i * 3 + j], s > 0 ? s : 0.0f);
        }
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&bias);
    troupe_tnode_release(&y);
}

/* troupe_cgen_c_split: a body of one statement stays whole; two statements at a unit size of
 * 1 byte make the routine's unit and two parts, the routine calling them in order; a result
 * that is not C is refused by name. (The split's bits: tests/test_nn_embedding.c.) */
Test(cgen, c_split_cuts_between_top_level_statements)
{
    troupe_tnode_t *x, *bias, *y;
    troupe_ll_proc_t *p = s_build_bias_relu(&x, &bias, &y);
    troupe_cgen_result_t *res = NULL;
    char **units = (char **)1;
    size_t n = 7;
    cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_cgen_c_split(res, 1, &units, &n), TROUPE_OK, "%s", troupe_last_error());
    cr_assert(n == 0 && units == NULL, "one statement stays whole (%zu units)", n);
    troupe_cgen_result_destroy(&res);

    /* y = x + bias, then y = relu(y): two loop nests */
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *second = s_for(
        p, i, 2,
        s_for(p, j, 3,
              s_set2(p, y, s_ix(i), s_ix(j),
                     troupe_sc_unop(p, TROUPE_UNOP_RELU, s_get2(p, y, s_ix(i), s_ix(j))))));
    s_finish(p, troupe_ll_seq2(p, p->body, second));
    cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_cgen_c_split(res, 1, &units, &n), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(n, 3, "the routine's unit and one part per statement");
    const char *call1 = strstr(units[0], "    bias_relu__p1(");
    const char *call2 = strstr(units[0], "    bias_relu__p2(");
    cr_assert(call1 && call2 && call1 < call2, "the routine calls the parts in order:\n%s",
              units[0]);
    cr_assert_not_null(strstr(units[0], "void bias_relu_entry(void **args)"));
    cr_assert_not_null(strstr(units[1], "TROUPE_PART void bias_relu__p1("));
    cr_assert_null(strstr(units[1], "bias_relu_entry(void **args)\n{"),
                   "the entry is unit 0's alone");
    char xid[64], yid[64], ref[128];
    troupe_cgen_node_ident(x, xid, sizeof xid);
    troupe_cgen_node_ident(y, yid, sizeof yid);
    const char *body1 = strstr(strstr(units[1], "#define TROUPE_PART\n#endif\n"), "\n{\n");
    const char *body2 = strstr(strstr(units[2], "#define TROUPE_PART\n#endif\n"), "\n{\n");
    cr_assert(body1 && body2);
    snprintf(ref, sizeof ref, "(%s[", xid);
    cr_assert_not_null(strstr(body1, ref), "part 1 holds the first statement:\n%s", body1);
    cr_assert_null(strstr(body2, ref), "part 2 holds only the second:\n%s", body2);
    snprintf(ref, sizeof ref, "troupe_fmaxf(0.0f, (%s[", yid);
    cr_assert_not_null(strstr(body2, ref), "part 2 holds the second statement:\n%s", body2);
    troupe_cgen_c_units_free(&units, n);
    cr_assert_null(units);

    cr_assert_eq(troupe_cgen_c_split(NULL, 1, &units, &n), TROUPE_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(troupe_last_error(), "no C-dialect result"), "%s",
                       troupe_last_error());
    cr_assert_eq(troupe_cgen_c_split(res, 1, NULL, &n), TROUPE_INVALID_ARGUMENT);
    troupe_cgen_result_destroy(&res);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&bias);
    troupe_tnode_release(&y);
}

static float s_apply_f(troupe_binop_t op, float a, float b)
{
    switch (op) {
    case TROUPE_BINOP_ADD:
        return a + b;
    case TROUPE_BINOP_SUB:
        return a - b;
    case TROUPE_BINOP_MUL:
        return a * b;
    case TROUPE_BINOP_DIV:
        return a / b;
    case TROUPE_BINOP_MAX:
        return fmaxf(a, b);
    case TROUPE_BINOP_MIN:
        return fminf(a, b);
    default:
        return NAN;
    }
}

Test(cgen, accumulate_binops_single_and_int)
{
    const troupe_binop_t ops[] = {TROUPE_BINOP_ADD, TROUPE_BINOP_SUB, TROUPE_BINOP_MUL,
                                  TROUPE_BINOP_DIV, TROUPE_BINOP_MAX, TROUPE_BINOP_MIN};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        troupe_tnode_t *acc, *x;
        troupe_ll_proc_t *p = s_build_accum(ops[o], TROUPE_PREC_SINGLE, &acc, &x);
        float av[4], xv[24], want[4];
        for (int i = 0; i < 4; i++)
            av[i] = want[i] = s_rndf(0.5f, 2.0f);
        for (int i = 0; i < 24; i++)
            xv[i] = s_rndf(0.5f, 2.0f);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 6; j++)
                want[i] = s_apply_f(ops[o], want[i], xv[i * 6 + j]);
        s_run_t r = {0};
        s_bind(&r, acc, av);
        s_bind(&r, x, xv);
        s_run(p, &r);
        for (int i = 0; i < 4; i++)
            cr_expect_eq(av[i], want[i], "%s: acc[%d] = %.9g, want %.9g", troupe_binop_name(ops[o]),
                         i, av[i], want[i]);
        s_nvrtc_check(p);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&acc);
        troupe_tnode_release(&x);

        /* The same accumulation in int32 (division truncates; no divisor is 0). */
        p = s_build_accum(ops[o], TROUPE_PREC_INT32, &acc, &x);
        int32_t ai[4], xi[24], wi[4];
        for (int i = 0; i < 4; i++)
            ai[i] = wi[i] = (int32_t)(s_rnd32() % 1000) + 1000;
        for (int i = 0; i < 24; i++)
            xi[i] = (int32_t)(s_rnd32() % 3) + 1;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 6; j++) {
                int32_t a = wi[i], b = xi[i * 6 + j];
                switch (ops[o]) {
                case TROUPE_BINOP_ADD:
                    wi[i] = a + b;
                    break;
                case TROUPE_BINOP_SUB:
                    wi[i] = a - b;
                    break;
                case TROUPE_BINOP_MUL:
                    wi[i] = (int32_t)((uint32_t)a * (uint32_t)b);
                    break;
                case TROUPE_BINOP_DIV:
                    wi[i] = a / b;
                    break;
                case TROUPE_BINOP_MAX:
                    wi[i] = a > b ? a : b;
                    break;
                default:
                    wi[i] = a < b ? a : b;
                    break;
                }
            }
        s_run_t ri = {0};
        s_bind(&ri, acc, ai);
        s_bind(&ri, x, xi);
        s_run(p, &ri);
        for (int i = 0; i < 4; i++)
            cr_expect_eq(ai[i], wi[i], "int32 %s: acc[%d] = %d, want %d", troupe_binop_name(ops[o]),
                         i, ai[i], wi[i]);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&acc);
        troupe_tnode_release(&x);
    }
}

/* |got - want| within `ulps` units in the last place of want. */
static bool s_near_ulp(float got, float want, int ulps)
{
    if (isnan(want))
        return isnan(got);
    if (got == want)
        return true;
    float step = nextafterf(fabsf(want), INFINITY) - fabsf(want);
    return fabsf(got - want) <= (float)ulps * step;
}

static troupe_ll_proc_t *s_build_unary3(troupe_tnode_t **x, troupe_tnode_t **ye,
                                        troupe_tnode_t **yl, troupe_tnode_t **yt)
{
    troupe_ll_proc_t *p = s_proc("exp_log_tanh");
    *x = s_node("x", TROUPE_PREC_SINGLE, 1, 64, 0);
    *ye = s_node("exp", TROUPE_PREC_SINGLE, 1, 64, 0);
    *yl = s_node("log", TROUPE_PREC_SINGLE, 1, 64, 0);
    *yt = s_node("tanh", TROUPE_PREC_SINGLE, 1, 64, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *items[3] = {
        s_set1(p, *ye, s_ix(i), troupe_sc_unop(p, TROUPE_UNOP_EXP, s_get1(p, *x, s_ix(i)))),
        s_set1(p, *yl, s_ix(i), troupe_sc_unop(p, TROUPE_UNOP_LOG, s_get1(p, *x, s_ix(i)))),
        s_set1(p, *yt, s_ix(i), troupe_sc_unop(p, TROUPE_UNOP_TANH_APPROX, s_get1(p, *x, s_ix(i)))),
    };
    s_finish(p, s_for(p, i, 64, troupe_ll_seq(p, 3, items)));
    return p;
}

Test(cgen, exp_log_tanh)
{
    troupe_tnode_t *x, *ye, *yl, *yt;
    troupe_ll_proc_t *p = s_build_unary3(&x, &ye, &yl, &yt);
    float xv[64], e[64], l[64], t[64];
    for (int i = 0; i < 64; i++)
        xv[i] = s_rndf(0.001f, 20.0f);
    xv[0] = 1.0f;
    xv[1] = 0.0f; /* log(0) = -inf */
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, ye, e);
    s_bind(&r, yl, l);
    s_bind(&r, yt, t);
    s_run(p, &r);
    for (int i = 0; i < 64; i++) {
        cr_expect(s_near_ulp(e[i], expf(xv[i]), 2), "exp(%.9g) = %.9g", xv[i], e[i]);
        cr_expect(s_near_ulp(l[i], logf(xv[i]), 2), "log(%.9g) = %.9g", xv[i], l[i]);
        cr_expect(s_near_ulp(t[i], tanhf(xv[i]), 2), "tanh(%.9g) = %.9g", xv[i], t[i]);
    }
    cr_expect(isinf(l[1]) && l[1] < 0);
    cr_expect_eq(e[0], expf(1.0f));
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&ye);
    troupe_tnode_release(&yl);
    troupe_tnode_release(&yt);
}

/* out[i] = x[i] * 3 + in[i], out and in of a small float precision, x single. */
static troupe_ll_proc_t *s_build_small_out(troupe_prec_t prec, troupe_tnode_t **x,
                                           troupe_tnode_t **in, troupe_tnode_t **out)
{
    char name[64];
    snprintf(name, sizeof name, "small_out_%s", troupe_prec_name(prec));
    troupe_ll_proc_t *p = s_proc(name);
    *x = s_node("x", TROUPE_PREC_SINGLE, 1, 40, 0);
    *in = s_node("in", prec, 1, 40, 0);
    *out = s_node("out", prec, 1, 40, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *v = troupe_sc_binop(
        p, TROUPE_BINOP_ADD,
        troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, *x, s_ix(i)), troupe_sc_constant(p, 3.0)),
        s_get1(p, *in, s_ix(i)));
    s_finish(p, s_for(p, i, 40, s_set1(p, *out, s_ix(i), v)));
    return p;
}

static void s_small_out_case(troupe_prec_t prec, float range)
{
    troupe_tnode_t *x, *in, *out;
    troupe_ll_proc_t *p = s_build_small_out(prec, &x, &in, &out);
    float xv[40];
    uint16_t in16[40], out16[40];
    uint8_t in8[40], out8[40];
    bool is8 = prec == TROUPE_PREC_FP8;
    for (int i = 0; i < 40; i++)
        xv[i] = s_rndf(-range, range);
    /* Ties of each format: 1 + half an ulp, and overflow. */
    xv[0] = prec == TROUPE_PREC_HALF ? (1.0f + 0x1p-11f) / 3.0f : 0.5f;
    xv[1] = 1e30f;
    for (int i = 0; i < 40; i++) {
        float v = s_rndf(-range, range);
        if (is8)
            in8[i] = troupe_single_to_fp8(v);
        else
            in16[i] =
                prec == TROUPE_PREC_HALF ? troupe_single_to_half(v) : troupe_single_to_bfloat16(v);
    }
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, in, is8 ? (void *)in8 : (void *)in16);
    s_bind(&r, out, is8 ? (void *)out8 : (void *)out16);
    s_run(p, &r);
    for (int i = 0; i < 40; i++) {
        volatile float prod = xv[i] * 3.0f;
        if (is8) {
            float s = prod + troupe_fp8_to_single(in8[i]);
            cr_expect_eq(out8[i], troupe_single_to_fp8(s), "fp8 out[%d] = %02x", i, out8[i]);
        } else if (prec == TROUPE_PREC_HALF) {
            float s = prod + troupe_half_to_single(in16[i]);
            cr_expect_eq(out16[i], troupe_single_to_half(s), "half out[%d] = %04x", i, out16[i]);
        } else {
            float s = prod + troupe_bfloat16_to_single(in16[i]);
            cr_expect_eq(out16[i], troupe_single_to_bfloat16(s), "bf16 out[%d] = %04x", i,
                         out16[i]);
        }
    }
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&in);
    troupe_tnode_release(&out);
}

Test(cgen, half_output)
{
    s_small_out_case(TROUPE_PREC_HALF, 1000.0f);
}

Test(cgen, bfloat16_output)
{
    s_small_out_case(TROUPE_PREC_BFLOAT16, 1e6f);
}

Test(cgen, fp8_output)
{
    s_small_out_case(TROUPE_PREC_FP8, 100.0f);
}

/* out[i] = in[i] (a conversion from `from` to `to`) over n elements. */
static troupe_ll_proc_t *s_build_convert(troupe_prec_t from, troupe_prec_t to, int64_t n,
                                         troupe_tnode_t **in, troupe_tnode_t **out)
{
    char name[64];
    snprintf(name, sizeof name, "conv_%s_%s", troupe_prec_name(from), troupe_prec_name(to));
    troupe_ll_proc_t *p = s_proc(name);
    *in = s_node("in", from, 1, n, 0);
    *out = s_node("out", to, 1, n, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    s_finish(p, s_for(p, i, n, s_set1(p, *out, s_ix(i), s_get1(p, *in, s_ix(i)))));
    return p;
}

/* Every code of each small format decodes as ir/prec.c decodes it (NaN payloads included). */
Test(cgen, small_float_decoders_exhaustive)
{
    const troupe_prec_t precs[] = {TROUPE_PREC_HALF, TROUPE_PREC_BFLOAT16, TROUPE_PREC_FP8};
    for (size_t k = 0; k < 3; k++) {
        int64_t n = precs[k] == TROUPE_PREC_FP8 ? 256 : 65536;
        troupe_tnode_t *in, *out;
        troupe_ll_proc_t *p = s_build_convert(precs[k], TROUPE_PREC_SINGLE, n, &in, &out);
        uint16_t *codes16 = malloc(sizeof(uint16_t) * (size_t)n);
        uint8_t codes8[256];
        uint32_t *got = malloc(sizeof(uint32_t) * (size_t)n);
        for (int64_t c = 0; c < n; c++) {
            codes16[c] = (uint16_t)c;
            codes8[c & 255] = (uint8_t)c;
        }
        s_run_t r = {0};
        s_bind(&r, in, precs[k] == TROUPE_PREC_FP8 ? (void *)codes8 : (void *)codes16);
        s_bind(&r, out, got);
        s_run(p, &r);
        for (int64_t c = 0; c < n; c++) {
            float want = precs[k] == TROUPE_PREC_HALF       ? troupe_half_to_single((uint16_t)c)
                         : precs[k] == TROUPE_PREC_BFLOAT16 ? troupe_bfloat16_to_single((uint16_t)c)
                                                            : troupe_fp8_to_single((uint8_t)c);
            uint32_t wb;
            memcpy(&wb, &want, 4);
            cr_assert_eq(got[c], wb, "%s code %llx: %08x, want %08x", troupe_prec_name(precs[k]),
                         (unsigned long long)c, got[c], wb);
        }
        free(codes16);
        free(got);
        s_nvrtc_check(p);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&in);
        troupe_tnode_release(&out);
    }
}

/* Random and edge-case floats encode as ir/prec.c encodes them. */
Test(cgen, small_float_encoders)
{
    const troupe_prec_t precs[] = {TROUPE_PREC_HALF, TROUPE_PREC_BFLOAT16, TROUPE_PREC_FP8};
    enum { N = 20000 };
    uint32_t *bits = malloc(sizeof(uint32_t) * N);
    const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                              0x7f800001u, 0xffc12345u, 0x3f800000u, 0x3fc00000u, 0x3fe00000u,
                              0x477fe000u, 0x477ff000u, 0x47800000u, 0x33800000u, 0x33000000u,
                              0x33000001u, 0x37800000u, 0x37000000u, 0x3f808000u, 0x3f818000u,
                              0x7f7fffffu, 0x00000001u, 0x387fc000u, 0x47600000u, 0x47700000u,
                              /* bfloat16: max finite, the tie above it, subnormals and ties */
                              0x7f7f0000u, 0x7f7f8000u, 0xff7f7fffu, 0x00010000u, 0x00018000u,
                              0x00008000u, 0x80028000u, 0x3f80c000u,
                              /* half: subnormal ties, the smallest normal, -max */
                              0x33c00000u, 0xb4400000u, 0x38800000u, 0xc77fe000u,
                              /* fp8: subnormals 2^-16 * 1.5, 2.5; max finite -57344 */
                              0x37c00000u, 0x38200000u, 0xc7600000u, 0x7fa00000u};
    for (int i = 0; i < N; i++)
        bits[i] = s_rnd32();
    memcpy(bits, edges, sizeof edges);
    /* Values near each format's range, where rounding is interesting. */
    for (int i = 100; i < N / 2; i++) {
        float f = ldexpf(s_rndf(1.0f, 2.0f), (int)(s_rnd32() % 50) - 30);
        memcpy(&bits[i], &f, 4);
    }
    for (size_t k = 0; k < 3; k++) {
        troupe_tnode_t *in, *out;
        troupe_ll_proc_t *p = s_build_convert(TROUPE_PREC_SINGLE, precs[k], N, &in, &out);
        uint16_t *o16 = calloc(N, sizeof(uint16_t));
        uint8_t *o8 = calloc(N, 1);
        s_run_t r = {0};
        s_bind(&r, in, bits);
        s_bind(&r, out, precs[k] == TROUPE_PREC_FP8 ? (void *)o8 : (void *)o16);
        s_run(p, &r);
        for (int i = 0; i < N; i++) {
            float f;
            memcpy(&f, &bits[i], 4);
            if (precs[k] == TROUPE_PREC_HALF)
                cr_assert_eq(o16[i], troupe_single_to_half(f), "half(%08x)", bits[i]);
            else if (precs[k] == TROUPE_PREC_BFLOAT16)
                cr_assert_eq(o16[i], troupe_single_to_bfloat16(f), "bf16(%08x)", bits[i]);
            else
                cr_assert_eq(o8[i], troupe_single_to_fp8(f), "fp8(%08x)", bits[i]);
        }
        /* Known vectors (OCANNL_NOTES §8.2): fp8 1.5 -> 0x3e (OCANNL's bug gave 0x3d). */
        if (precs[k] == TROUPE_PREC_FP8)
            cr_expect_eq(o8[8], 0x3e);
        free(o16);
        free(o8);
        s_nvrtc_check(p);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&in);
        troupe_tnode_release(&out);
    }
    free(bits);
}

/* The CUDA dialect converts through CUDA's own types (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h)
 * and not the software encoder; both directions give ir/prec.c's bits on edge values (NaN
 * payloads, infinities, max finite, subnormals, ties) emulated with CUDA's host
 * implementations (the tests above) and with the emulator's stand-ins (here). */
static troupe_cgen_result_t *s_cuda(const troupe_ll_proc_t *p);

Test(cgen, cuda_small_float_types)
{
    const troupe_prec_t precs[] = {TROUPE_PREC_HALF, TROUPE_PREC_BFLOAT16, TROUPE_PREC_FP8};
    const char *enc[] = {"__float2half_rn(", "__float2bfloat16_rn(", "__nv_cvt_float_to_fp8("};
    const char *dec[] = {"__half2float(", "__bfloat162float(", "__nv_cvt_fp8_to_halfraw("};
    const char *inc[] = {"#include <cuda_fp16.h>", "#include <cuda_bf16.h>",
                         "#include <cuda_fp8.h>"};
    const uint32_t fbits[] = {0x7fc00000u, 0xffc12345u, 0x7f800001u, 0x7f800000u,
                              0xff800000u, 0x477fe000u, 0x477ff000u, 0x7f7f8000u,
                              0x47700000u, 0x33000001u, 0x33000000u, 0x37000000u,
                              0x00008000u, 0x3f808000u, 0x80000000u, 0x00000001u};
    enum { NF = sizeof fbits / sizeof fbits[0] };
    int runs0 = s_emu_runs;
    troupe_emu_standins = 1;
    for (size_t k = 0; k < 3; k++) {
        troupe_tnode_t *in, *out, *cin, *cout;
        troupe_ll_proc_t *pe = s_build_convert(TROUPE_PREC_SINGLE, precs[k], NF, &in, &out);
        troupe_ll_proc_t *pd = s_build_convert(precs[k], TROUPE_PREC_SINGLE, 256, &cin, &cout);
        troupe_cgen_result_t *re = s_cuda(pe), *rd = s_cuda(pd);
        cr_expect_not_null(strstr(re->source, enc[k]), "%s", re->source);
        cr_expect_not_null(strstr(rd->source, dec[k]), "%s", rd->source);
        cr_expect_not_null(strstr(re->source, inc[k]));
        cr_expect_null(strstr(re->source, "troupe__encode_small"), "%s", re->source);
        troupe_cgen_result_destroy(&re);
        troupe_cgen_result_destroy(&rd);
        /* Encoders on the edge values; decoders on codes 0..255 of the low byte and with the
         * exponent all ones (NaN payloads, infinities). */
        uint32_t fin[NF];
        memcpy(fin, fbits, sizeof fin);
        uint16_t o16[NF], c16[256];
        uint8_t o8[NF], c8[256];
        float got[256];
        s_run_t r = {0};
        s_bind(&r, in, fin);
        s_bind(&r, out, precs[k] == TROUPE_PREC_FP8 ? (void *)o8 : (void *)o16);
        s_run(pe, &r);
        for (int i = 0; i < NF; i++) {
            float f;
            memcpy(&f, &fbits[i], 4);
            uint32_t want = precs[k] == TROUPE_PREC_HALF       ? troupe_single_to_half(f)
                            : precs[k] == TROUPE_PREC_BFLOAT16 ? troupe_single_to_bfloat16(f)
                                                               : troupe_single_to_fp8(f);
            uint32_t have = precs[k] == TROUPE_PREC_FP8 ? o8[i] : o16[i];
            cr_expect_eq(have, want, "%s(%08x) = %x, want %x", troupe_prec_name(precs[k]), fbits[i],
                         have, want);
        }
        const uint16_t top = precs[k] == TROUPE_PREC_HALF ? 0x7C00 : 0x7F80;
        for (int c = 0; c < 256; c++) {
            c8[c] = (uint8_t)c;
            c16[c] = (uint16_t)((c & 0x80 ? 0x8000 : 0) | top | (c & 0x7F));
        }
        s_run_t rr = {0};
        s_bind(&rr, cin, precs[k] == TROUPE_PREC_FP8 ? (void *)c8 : (void *)c16);
        s_bind(&rr, cout, got);
        s_run(pd, &rr);
        s_nvrtc_check(pe);
        s_nvrtc_check(pd);
        troupe_ll_proc_destroy(&pe);
        troupe_ll_proc_destroy(&pd);
        troupe_tnode_release(&in);
        troupe_tnode_release(&out);
        troupe_tnode_release(&cin);
        troupe_tnode_release(&cout);
    }
    troupe_emu_standins = 0;
    if (troupe_emu_available())
        cr_expect_eq(s_emu_runs - runs0, 6, "every routine ran emulated");
}

static troupe_uint4x32_t s_key(int64_t k)
{
    troupe_uint4x32_t r = {{(uint32_t)k, (uint32_t)((uint64_t)k >> 32), 0, 0}};
    return r;
}

/* u[i] = uniform1(threefry(key, i)) for the given precision and variant. */
static troupe_ll_proc_t *s_build_uniform1(troupe_prec_t prec, troupe_binop_t variant, int64_t key,
                                          troupe_tnode_t **u)
{
    char name[64];
    snprintf(name, sizeof name, "uniform1_%s_%s", troupe_prec_name(prec),
             variant == TROUPE_BINOP_THREEFRY4X32_CRYPTO ? "crypto" : "light");
    troupe_ll_proc_t *p = s_proc(name);
    *u = s_node("u", prec, 1, 32, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *bits = troupe_sc_binop(p, variant, troupe_sc_constant_bits(p, key),
                                        troupe_sc_embed_index(p, s_ix(i)));
    troupe_sc_t *v = troupe_sc_unop(p, TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1, bits);
    s_finish(p, s_for(p, i, 32, s_set1(p, *u, s_ix(i), v)));
    return p;
}

Test(cgen, threefry_uniform1)
{
    const troupe_prec_t precs[] = {TROUPE_PREC_SINGLE,   TROUPE_PREC_HALF, TROUPE_PREC_DOUBLE,
                                   TROUPE_PREC_BFLOAT16, TROUPE_PREC_FP8,  TROUPE_PREC_INT32};
    const troupe_binop_t variants[] = {TROUPE_BINOP_THREEFRY4X32_CRYPTO,
                                       TROUPE_BINOP_THREEFRY4X32_LIGHT};
    for (size_t k = 0; k < sizeof precs / sizeof precs[0]; k++)
        for (size_t v = 0; v < 2; v++) {
            int64_t key = 0x123456789abLL + (int64_t)k;
            troupe_tnode_t *u;
            troupe_ll_proc_t *p = s_build_uniform1(precs[k], variants[v], key, &u);
            size_t es = troupe_prec_size_bytes(precs[k]);
            unsigned char got[32 * 8], want[8];
            s_run_t r = {0};
            s_bind(&r, u, got);
            s_run(p, &r);
            for (int i = 0; i < 32; i++) {
                troupe_uint4x32_t ctr; /* the index is a uint32 counter: spread */
                uint32_t ui = (uint32_t)i;
                cr_assert_eq(troupe_prec_bits_to_uint4x32(TROUPE_PREC_UINT32, &ui, &ctr),
                             TROUPE_OK);
                troupe_uint4x32_t x = variants[v] == TROUPE_BINOP_THREEFRY4X32_CRYPTO
                                          ? troupe_threefry4x32_crypto(s_key(key), ctr)
                                          : troupe_threefry4x32_light(s_key(key), ctr);
                cr_assert_eq(troupe_uint4x32_to_prec_uniform1(precs[k], x, want), TROUPE_OK);
                cr_expect(memcmp(got + (size_t)i * es, want, es) == 0, "%s element %d", p->name, i);
            }
            if (k < 2)
                s_nvrtc_check(p);
            troupe_ll_proc_destroy(&p);
            troupe_tnode_release(&u);
        }
}

/* v[len*i .. len*i+len-1] = uniform_vec(threefry_crypto(key, i)). */
static troupe_ll_proc_t *s_build_uniform_vec(troupe_prec_t prec, int64_t key, troupe_tnode_t **v,
                                             int *len)
{
    char name[64];
    snprintf(name, sizeof name, "uniform_vec_%s", troupe_prec_name(prec));
    *len = (int)troupe_vec_unop_output_count(TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM, prec);
    troupe_ll_proc_t *p = s_proc(name);
    *v = s_node("v", prec, 2, 3, 4 * *len);
    int32_t b = troupe_ll_proc_add_symbol(p, NULL), i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ctr_idx = troupe_idx_sym(i);
    ctr_idx.nterms = 2;
    ctr_idx.terms[1].coeff = 4;
    ctr_idx.terms[1].sym = b; /* counter = 4*b + i */
    troupe_sc_t *bits =
        troupe_sc_binop(p, TROUPE_BINOP_THREEFRY4X32_CRYPTO, troupe_sc_constant_bits(p, key),
                        troupe_sc_embed_index(p, ctr_idx));
    troupe_axis_index_t at[2] = {s_ix(b), s_aff(*len, i, 0)};
    troupe_ll_t *set =
        troupe_ll_set_from_vec(p, *v, at, *len, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM, bits);
    s_finish(p, s_for(p, b, 3, s_for(p, i, 4, set)));
    return p;
}

Test(cgen, threefry_uniform_vec)
{
    const troupe_prec_t precs[] = {TROUPE_PREC_SINGLE, TROUPE_PREC_HALF,   TROUPE_PREC_BFLOAT16,
                                   TROUPE_PREC_FP8,    TROUPE_PREC_DOUBLE, TROUPE_PREC_BYTE};
    for (size_t k = 0; k < sizeof precs / sizeof precs[0]; k++) {
        troupe_tnode_t *v;
        int len;
        troupe_ll_proc_t *p = s_build_uniform_vec(precs[k], 42, &v, &len);
        unsigned char *got = calloc(1, v->size_bytes);
        s_run_t r = {0};
        s_bind(&r, v, got);
        s_run(p, &r);
        for (int c = 0; c < 12; c++) {
            troupe_uint4x32_t ctr, x;
            unsigned char want[16];
            size_t cnt = 0;
            uint32_t uc = (uint32_t)c;
            cr_assert_eq(troupe_prec_bits_to_uint4x32(TROUPE_PREC_UINT32, &uc, &ctr), TROUPE_OK);
            x = troupe_threefry4x32_crypto(s_key(42), ctr);
            cr_assert_eq(troupe_uint4x32_to_prec_uniform(precs[k], x, want, &cnt), TROUPE_OK);
            cr_assert_eq((int)cnt, len);
            cr_expect(memcmp(got + 16 * c, want, 16) == 0, "%s counter %d", p->name, c);
        }
        s_nvrtc_check(p);
        free(got);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&v);
    }
}

/* A uint4x32 node holding raw Threefry output, then split into uint32 words. */
Test(cgen, threefry_raw_uint4x32)
{
    troupe_ll_proc_t *p = s_proc("threefry_raw");
    troupe_tnode_t *r4 = s_node("r", TROUPE_PREC_UINT4X32, 1, 8, 0);
    troupe_tnode_t *w0 = s_node("w0", TROUPE_PREC_UINT32, 1, 8, 0);
    troupe_tnode_t *k0 = s_node("kat", TROUPE_PREC_UINT4X32, 0, 0, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *kat_set = troupe_ll_set(p, k0, NULL,
                                         troupe_sc_binop(p, TROUPE_BINOP_THREEFRY4X32_LIGHT,
                                                         troupe_sc_constant_bits(p, 0),
                                                         troupe_sc_constant_bits(p, 0)));
    troupe_ll_t *items[2] = {
        s_set1(p, r4, s_ix(i),
               troupe_sc_binop(p, TROUPE_BINOP_THREEFRY4X32_LIGHT, troupe_sc_constant_bits(p, 0),
                               troupe_sc_embed_index(p, s_ix(i)))),
        s_set1(p, w0, s_ix(i), s_get1(p, r4, s_ix(i))),
    };
    s_finish(p, troupe_ll_seq2(p, kat_set, s_for(p, i, 8, troupe_ll_seq(p, 2, items))));
    troupe_uint4x32_t got[8], kat;
    uint32_t words[8];
    s_run_t r = {0};
    s_bind(&r, r4, got);
    s_bind(&r, w0, words);
    s_bind(&r, k0, &kat);
    s_run(p, &r);
    /* Key 0, counter 0 (constant bits: {0, 0, 0, 0}): {0, 0, 0, 0x1bd11bdb} (OCANNL_NOTES
     * §8.3). */
    cr_expect(kat.v[0] == 0 && kat.v[1] == 0 && kat.v[2] == 0 && kat.v[3] == 0x1bd11bdbu,
              "%08x %08x %08x %08x", kat.v[0], kat.v[1], kat.v[2], kat.v[3]);
    for (int k = 0; k < 8; k++) {
        troupe_uint4x32_t ctr;
        uint32_t uk = (uint32_t)k;
        cr_assert_eq(troupe_prec_bits_to_uint4x32(TROUPE_PREC_UINT32, &uk, &ctr), TROUPE_OK);
        troupe_uint4x32_t want = troupe_threefry4x32_light(s_key(0), ctr);
        cr_expect(memcmp(&got[k], &want, 16) == 0, "counter %d", k);
        cr_expect_eq(words[k], want.v[0]);
    }
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&r4);
    troupe_tnode_release(&w0);
    troupe_tnode_release(&k0);
}

Test(cgen, deterministic_sorted_parameters)
{
    s_mm_t m;
    s_build_matmul(&m, "matmul_det", TROUPE_PREC_SINGLE);
    troupe_cgen_result_t *r1 = NULL, *r2 = NULL;
    cr_assert_eq(troupe_cgen_emit(m.p, TROUPE_CGEN_C, &r1), TROUPE_OK);
    cr_assert_eq(troupe_cgen_emit(m.p, TROUPE_CGEN_C, &r2), TROUPE_OK);
    cr_assert_eq(r1->source_len, r2->source_len);
    cr_assert_str_eq(r1->source, r2->source);
    cr_assert_eq(r1->nparams, 3);
    for (size_t k = 1; k < r1->nparams; k++)
        cr_expect_lt(strcmp(r1->params[k - 1].decl, r1->params[k].decl), 0, "%s / %s",
                     r1->params[k - 1].decl, r1->params[k].decl);
    char want_a[64], want_c[64];
    snprintf(want_a, sizeof want_a, "const float *restrict n%d_a", m.a->id);
    snprintf(want_c, sizeof want_c, "float *restrict n%d_c", m.c->id); /* read and written */
    ptrdiff_t ka = troupe_cgen_find_node_param(r1, m.a), kc = troupe_cgen_find_node_param(r1, m.c);
    cr_assert(ka >= 0 && kc >= 0 && troupe_cgen_find_node_param(r1, m.b) >= 0);
    cr_expect_str_eq(r1->params[ka].decl, want_a);
    cr_expect_str_eq(r1->params[kc].decl, want_c);
    cr_expect_eq(kc, 2, "the only non-const parameter sorts last");
    cr_expect(r1->params[kc].is_read && r1->params[kc].is_written);
    cr_expect(r1->params[ka].is_read && !r1->params[ka].is_written);
    cr_expect_str_eq(r1->entry_name, "matmul_det_entry");
    cr_expect_not_null(strstr(r1->source, "void matmul_det_entry(void **args)"));
    /* Loops and row-major offsets as documented. */
    cr_expect_not_null(strstr(r1->source, "for (int64_t i0 = 0; i0 <= 2; ++i0)"));
    char off[64];
    snprintf(off, sizeof off, "n%d_a[4*i0 + i1]", m.a->id);
    cr_expect_not_null(strstr(r1->source, off), "%s", r1->source);
    /* Only the helpers used: plain float code needs no prelude section. */
    cr_expect_null(strstr(r1->source, "/* prelude:"));
    troupe_cgen_result_destroy(&r1);
    troupe_cgen_result_destroy(&r2);
    cr_assert_null(r1);

    /* The CUDA dialect: the same parameters in the same order (__restrict__), and two
     * kernels: the zeroing over c's 15 elements, then the product with its row (i0) and column
     * (i2) loops on the grid (flattened, column fastest) and the reduction (i1) inside each
     * thread, in the interpreter's order. No one-thread guard in either. */
    cr_assert_eq(troupe_cgen_emit(m.p, TROUPE_CGEN_CUDA, &r1), TROUPE_OK);
    cr_assert_eq(r1->nparams, 3);
    for (size_t k = 0; k < 3; k++)
        cr_expect_eq(r1->params[k].tn, k == 0 ? m.a : k == 1 ? m.b : m.c);
    cr_expect_not_null(strstr(r1->source, "__restrict__"));
    cr_expect_null(strstr(r1->source, "#include"));
    cr_expect_null(strstr(r1->source, "threadIdx.x != 0"), "%s", r1->source);
    cr_assert_eq(r1->nkernels, 2);
    cr_assert_eq(r1->nsteps, 2);
    cr_expect_str_eq(r1->kernels[0].name, "matmul_det_k0");
    cr_expect_str_eq(r1->kernels[1].name, "matmul_det_k1");
    cr_expect_not_null(strstr(r1->source, "extern \"C\" __global__ void matmul_det_k0("));
    cr_expect_not_null(strstr(r1->source, "extern \"C\" __global__ void matmul_det_k1("));
    for (size_t k = 0; k < 2; k++) {
        cr_expect_eq(r1->steps[k].kind, TROUPE_CGEN_STEP_KERNEL);
        cr_expect_eq(r1->steps[k].first_kernel, k);
        cr_expect_eq(r1->steps[k].nkernels, 1);
        cr_expect(!r1->kernels[k].one_thread);
    }
    const troupe_cgen_kernel_t *k0 = &r1->kernels[0], *k1 = &r1->kernels[1];
    cr_expect(k0->extent[0] == 15 && k0->extent[1] == 1);
    cr_expect(k0->block[0] == 32 && k0->block[1] == 1 && k0->grid[0] == 1 && k0->grid[1] == 1);
    /* the row (3) and column (5) loops flattened onto a 1-D grid: a column extent of 5 on a
     * 2-D block of 32 lanes would idle 27 of them */
    cr_expect(k1->extent[0] == 15 && k1->extent[1] == 1, "%lld x %lld", (long long)k1->extent[0],
              (long long)k1->extent[1]);
    cr_expect(k1->block[0] == 32 && k1->block[1] == 1 && k1->grid[0] == 1 && k1->grid[1] == 1);
    cr_expect_not_null(strstr(r1->source, "const int64_t t_y = t_f / 5LL, t_x = t_f % 5LL;"), "%s",
                       r1->source);
    cr_expect_not_null(strstr(r1->source, "t_x < 15LL; t_x += (int64_t)gridDim.x * blockDim.x"));
    cr_expect_not_null(strstr(r1->source, "const int64_t i2 = 0LL + t_x;"), "%s", r1->source);
    cr_expect_not_null(strstr(r1->source, "const int64_t i0 = 0LL + t_y / 1LL % 3LL;"));
    cr_expect_not_null(strstr(r1->source, "for (int64_t i1 = 0; i1 <= 3; ++i1)"));
    cr_expect_null(strstr(r1->source, "for (int64_t i0 ="));
    cr_expect_null(strstr(r1->source, "for (int64_t i2 ="));
    troupe_cgen_result_destroy(&r1);
    s_nvrtc_check(m.p);
    s_free_matmul(&m);
}

Test(cgen, static_index_slice)
{
    troupe_ll_proc_t *p = s_proc("slice");
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 2, 3, 4);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 1, 4, 0);
    int32_t batch = troupe_ll_proc_add_static_symbol(p, "batch", 3);
    int32_t j = troupe_ll_proc_add_symbol(p, NULL);
    s_finish(p, s_for(p, j, 4, s_set1(p, y, s_ix(j), s_get2(p, x, s_ix(batch), s_ix(j)))));
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_OK);
    ptrdiff_t k = troupe_cgen_find_static_param(res, "batch");
    cr_assert_geq(k, 0);
    cr_expect_eq(res->params[k].kind, TROUPE_CGEN_PARAM_STATIC_IDX);
    cr_expect_eq(res->params[k].static_range, 3);
    cr_expect_eq(res->params[k].sym, batch);
    cr_expect_str_eq(res->params[k].decl, "const int64_t s0_batch");
    troupe_cgen_result_destroy(&res);

    float xv[12], yv[4];
    for (int i = 0; i < 12; i++)
        xv[i] = (float)i;
    s_lib_t lib;
    s_lib_open(p, s_flags, &lib);
    for (int64_t b = 0; b < 3; b++) { /* one compiled routine, the index read at each call */
        s_run_t r = {0};
        s_bind(&r, x, xv);
        s_bind(&r, y, yv);
        r.static_name = "batch";
        r.static_value = b;
        s_call(&lib, &r);
        for (int q = 0; q < 4; q++)
            cr_expect_eq(yv[q], (float)(b * 4 + q));
    }
    s_lib_close(&lib);
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, y, yv);
    r.static_name = "batch";
    r.static_value = 2;
    s_run(p, &r);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&y);
}

Test(cgen, merge_buffer_parameter)
{
    troupe_ll_proc_t *p = s_proc("merge_add");
    troupe_tnode_t *g = s_node("grad", TROUPE_PREC_SINGLE, 1, 5, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t at = s_ix(i);
    troupe_sc_t *v = troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, g, s_ix(i)),
                                     troupe_sc_get_merge_buffer(p, g, &at));
    s_finish(p, s_for(p, i, 5, s_set1(p, g, s_ix(i), v)));
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_OK);
    cr_assert_eq(res->nparams, 2);
    ptrdiff_t k = troupe_cgen_find_merge_param(res);
    cr_assert_geq(k, 0);
    cr_expect_str_eq(res->params[k].decl, "const float *merge_buffer");
    cr_expect_eq(res->params[k].tn, g);
    troupe_cgen_result_destroy(&res);

    float gv[5] = {1, 2, 3, 4, 5}, mv[5] = {10, 20, 30, 40, 50};
    s_run_t r = {0};
    s_bind(&r, g, gv);
    r.merge = mv;
    s_run(p, &r);
    for (int q = 0; q < 5; q++)
        cr_expect_eq(gv[q], (float)(q + 1) * 11.0f);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&g);
}

/* A Local node is an array inside the routine, a Virtual one only a local-scope variable. */
Test(cgen, local_array_and_local_scope)
{
    troupe_ll_proc_t *p = s_proc("locals");
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 1, 6, 0);
    troupe_tnode_t *tmp = s_node("tmp", TROUPE_PREC_SINGLE, 1, 6, 0);
    troupe_tnode_t *virt = s_node("virt", TROUPE_PREC_HALF, 0, 0, 0);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 1, 6, 0);
    s_set_mode(tmp, TROUPE_MM_LOCAL);
    s_set_mode(virt, TROUPE_MM_VIRTUAL);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    int32_t scope = troupe_ll_proc_new_scope_id(p);
    /* tmp[i] = x[i] * 2; y[i] = (local scope: virt := tmp[i] / 3) + 1; the scope's variable
     * has virt's computation type (float), so nothing is rounded to half. */
    troupe_ll_t *body = troupe_ll_set_local(
        p, scope,
        troupe_sc_binop(p, TROUPE_BINOP_DIV, s_get1(p, tmp, s_ix(i)), troupe_sc_constant(p, 3)));
    troupe_sc_t *ls = troupe_sc_local_scope(p, scope, virt, body, NULL);
    troupe_ll_t *items[2] = {
        s_set1(
            p, tmp, s_ix(i),
            troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, x, s_ix(i)), troupe_sc_constant(p, 2))),
        s_set1(p, y, s_ix(i), troupe_sc_binop(p, TROUPE_BINOP_ADD, ls, troupe_sc_constant(p, 1))),
    };
    s_finish(p, s_for(p, i, 6, troupe_ll_seq(p, 2, items)));
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_OK, "%s", troupe_last_error());
    cr_expect_eq(res->nparams, 2, "x and y only");
    cr_expect_lt(troupe_cgen_find_node_param(res, tmp), 0);
    cr_expect_lt(troupe_cgen_find_node_param(res, virt), 0);
    char decl[64];
    snprintf(decl, sizeof decl, "float n%d_tmp[6] = {0};", tmp->id);
    cr_expect_not_null(strstr(res->source, decl), "%s", res->source);
    troupe_cgen_result_destroy(&res);

    float xv[6] = {0.1f, 1.0f, 2.5f, -3.0f, 1000.0f, 7.0f}, yv[6];
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, y, yv);
    s_run(p, &r);
    for (int q = 0; q < 6; q++) {
        volatile float t = xv[q] * 2.0f;
        float h = t / 3.0f;
        cr_expect_eq(yv[q], h + 1.0f, "y[%d] = %.9g", q, yv[q]);
    }
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&tmp);
    troupe_tnode_release(&virt);
    troupe_tnode_release(&y);
}

/* A constant fill (one SET per cell, as Fetch constant_fill lowers) is emitted in the C dialect
 * as a static table copied into the node, not one statement per cell; the cells get the SETs'
 * values (-inf and a value rounded to single included) and the cells outside the run keep
 * theirs, against the interpreter and bit for bit. A run broken by an out-of-order cell that
 * leaves fewer than 64 in order stays statements. */
Test(cgen, constant_fill_is_a_table)
{
    troupe_ll_proc_t *p = s_proc("fill");
    troupe_tnode_t *m = s_node("mask", TROUPE_PREC_SINGLE, 2, 10, 10);
    enum { RUN = 90 };
    troupe_ll_t *items[RUN];
    float want[100];
    for (int c = 0; c < 100; c++)
        want[c] = 5.0f; /* untouched cells */
    for (int c = 0; c < RUN; c++) {
        int t = c / 10, u = c % 10;
        double v = u <= t ? 1.0 / sqrt(32.0) : -INFINITY;
        want[c] = (float)v;
        items[c] = s_set2(p, m, troupe_idx_fixed(t), troupe_idx_fixed(u), troupe_sc_constant(p, v));
    }
    s_finish(p, troupe_ll_seq(p, RUN, items));
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_OK, "%s", troupe_last_error());
    char decl[64];
    snprintf(decl, sizeof decl, "static const float k_n%d_mask[90] = {", m->id);
    cr_expect_not_null(strstr(res->source, decl), "%s", res->source);
    cr_expect_null(strstr(res->source, "_mask[45] = "), "a cell still set on its own");
    troupe_cgen_result_destroy(&res);
    float mv[100];
    for (int c = 0; c < 100; c++)
        mv[c] = 5.0f;
    s_run_t r = {0};
    s_bind(&r, m, mv);
    s_run(p, &r);
    cr_expect(memcmp(mv, want, sizeof mv) == 0, "the cells differ from the SETs' values");
    troupe_ll_proc_destroy(&p);

    /* cells 0..39 in order, then 41, 40, 42..89: two runs shorter than 64 */
    p = s_proc("fill_short");
    for (int c = 0; c < RUN; c++) {
        int cell = c == 40 ? 41 : c == 41 ? 40 : c;
        items[c] = s_set2(p, m, troupe_idx_fixed(cell / 10), troupe_idx_fixed(cell % 10),
                          troupe_sc_constant(p, (double)cell));
    }
    s_finish(p, troupe_ll_seq(p, RUN, items));
    cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_OK, "%s", troupe_last_error());
    cr_expect_null(strstr(res->source, "static const float k_"), "%s", res->source);
    troupe_cgen_result_destroy(&res);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&m);
}

/* where, fma, integer gates and comparisons in several precisions, against the interpreter. */
Test(cgen, mixed_ops_against_interpreter)
{
    const troupe_prec_t precs[] = {TROUPE_PREC_SINGLE, TROUPE_PREC_DOUBLE, TROUPE_PREC_INT32,
                                   TROUPE_PREC_BYTE,   TROUPE_PREC_HALF,   TROUPE_PREC_UINT64};
    for (size_t k = 0; k < sizeof precs / sizeof precs[0]; k++) {
        troupe_prec_t pr = precs[k];
        char name[64];
        snprintf(name, sizeof name, "mixed_%s", troupe_prec_name(pr));
        troupe_ll_proc_t *p = s_proc(name);
        troupe_tnode_t *a = s_node("a", pr, 1, 16, 0),
                       *b = s_node("b", TROUPE_PREC_SINGLE, 1, 16, 0);
        troupe_tnode_t *o1 = s_node("o1", pr, 1, 16, 0), *o2 = s_node("o2", pr, 1, 16, 0);
        troupe_tnode_t *o3 = s_node("o3", pr, 1, 16, 0);
        int32_t i = troupe_ll_proc_add_symbol(p, NULL);
        troupe_ll_t *items[3] = {
            /* o1 = where(a < b, max(a, 2), relu_gate(b, a) - 1) */
            s_set1(p, o1, s_ix(i),
                   troupe_sc_ternop(p, TROUPE_TERNOP_WHERE,
                                    troupe_sc_binop(p, TROUPE_BINOP_CMPLT, s_get1(p, a, s_ix(i)),
                                                    s_get1(p, b, s_ix(i))),
                                    troupe_sc_binop(p, TROUPE_BINOP_MAX, s_get1(p, a, s_ix(i)),
                                                    troupe_sc_constant(p, 2)),
                                    troupe_sc_binop(p, TROUPE_BINOP_SUB,
                                                    troupe_sc_binop(p, TROUPE_BINOP_RELU_GATE,
                                                                    s_get1(p, b, s_ix(i)),
                                                                    s_get1(p, a, s_ix(i))),
                                                    troupe_sc_constant(p, 1)))),
            /* o2 = fma(a, b, i) */
            s_set1(p, o2, s_ix(i),
                   troupe_sc_ternop(p, TROUPE_TERNOP_FMA, s_get1(p, a, s_ix(i)),
                                    s_get1(p, b, s_ix(i)), troupe_sc_embed_index(p, s_ix(i)))),
            /* o3 = satur01(a / 4) + min(neg a, -5.5) */
            s_set1(p, o3, s_ix(i),
                   troupe_sc_binop(
                       p, TROUPE_BINOP_ADD,
                       troupe_sc_unop(p, TROUPE_UNOP_SATUR01,
                                      troupe_sc_binop(p, TROUPE_BINOP_DIV, s_get1(p, a, s_ix(i)),
                                                      troupe_sc_constant(p, 4))),
                       troupe_sc_binop(p, TROUPE_BINOP_MIN,
                                       troupe_sc_unop(p, TROUPE_UNOP_NEG, s_get1(p, a, s_ix(i))),
                                       troupe_sc_constant(p, -5.5)))),
        };
        s_finish(p, s_for(p, i, 16, troupe_ll_seq(p, 3, items)));
        void *av = s_buffer(a), *bv = s_buffer(b), *v1 = s_buffer(o1), *v2 = s_buffer(o2),
             *v3 = s_buffer(o3);
        s_fill_float(a, av, 0.0f, 12.0f);
        /* b is converted into pr: keep it in range (C's float->unsigned is undefined below 0). */
        bool is_unsigned = pr == TROUPE_PREC_BYTE || pr == TROUPE_PREC_UINT64;
        s_fill_float(b, bv, is_unsigned ? 0.0f : -3.0f, 12.0f);
        s_run_t r = {0};
        s_bind(&r, a, av);
        s_bind(&r, b, bv);
        s_bind(&r, o1, v1);
        s_bind(&r, o2, v2);
        s_bind(&r, o3, v3);
        s_run(p, &r);
        s_nvrtc_check(p);
        free(av), free(bv), free(v1), free(v2), free(v3);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&a);
        troupe_tnode_release(&b);
        troupe_tnode_release(&o1);
        troupe_tnode_release(&o2);
        troupe_tnode_release(&o3);
    }
}

/* Un-optimized procedures: every directly accessed node is a parameter unless Local/Virtual;
 * nodes without a memory mode are parameters; a read-only node is const. */
Test(cgen, unoptimized_parameter_rule)
{
    troupe_ll_proc_t *p = s_proc("copy_rule");
    troupe_tnode_t *src = s_node("src", TROUPE_PREC_SINGLE, 1, 3, 0);
    troupe_tnode_t *dst = s_node("dst", TROUPE_PREC_SINGLE, 1, 3, 0);
    s_set_mode(dst, TROUPE_MM_ON_DEVICE);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    s_finish(p, s_for(p, i, 3, s_set1(p, dst, s_ix(i), s_get1(p, src, s_ix(i)))));
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_OK);
    cr_assert_eq(res->nparams, 2);
    char want[64];
    snprintf(want, sizeof want, "float *restrict n%d_dst", dst->id);
    cr_expect_str_eq(res->params[troupe_cgen_find_node_param(res, dst)].decl, want);
    cr_expect(res->params[troupe_cgen_find_node_param(res, src)].is_read);
    troupe_cgen_result_destroy(&res);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&src);
    troupe_tnode_release(&dst);
}

Test(cgen, errors)
{
    troupe_cgen_result_t *res = NULL;
    cr_expect_eq(troupe_cgen_emit(NULL, TROUPE_CGEN_C, &res), TROUPE_INVALID_ARGUMENT);

    /* add in uint4x32: no dialect can express it; the message names op and precision. */
    troupe_ll_proc_t *p = s_proc("bad_add");
    troupe_tnode_t *u = s_node("u", TROUPE_PREC_UINT4X32, 1, 2, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    s_finish(p, s_for(p, i, 2,
                      s_set1(p, u, s_ix(i),
                             troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, u, s_ix(i)),
                                             troupe_sc_constant_bits(p, 1)))));
    for (int d = 0; d < 2; d++) {
        cr_expect_eq(troupe_cgen_emit(p, (troupe_cgen_dialect_t)d, &res), TROUPE_INVALID_ARGUMENT);
        cr_expect_null(res);
        cr_expect_not_null(strstr(troupe_last_error(), "add"), "%s", troupe_last_error());
        cr_expect_not_null(strstr(troupe_last_error(), "uint4x32"), "%s", troupe_last_error());
        cr_expect_not_null(strstr(troupe_last_error(), d ? "cuda" : "c dialect"), "%s",
                           troupe_last_error());
    }
    cr_expect_eq(troupe_cgen_emit(p, (troupe_cgen_dialect_t)7, &res), TROUPE_INVALID_ARGUMENT);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&u);

    /* A Virtual node read directly. */
    p = s_proc("reads_virtual");
    troupe_tnode_t *v = s_node("v", TROUPE_PREC_SINGLE, 1, 2, 0);
    troupe_tnode_t *o = s_node("o", TROUPE_PREC_SINGLE, 1, 2, 0);
    s_set_mode(v, TROUPE_MM_VIRTUAL);
    i = troupe_ll_proc_add_symbol(p, NULL);
    s_finish(p, s_for(p, i, 2, s_set1(p, o, s_ix(i), s_get1(p, v, s_ix(i)))));
    cr_expect_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_FAILED_PRECONDITION);
    cr_expect_not_null(strstr(troupe_last_error(), "Virtual"), "%s", troupe_last_error());
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&v);

    /* A name that collides with generated identifiers. */
    p = s_proc("troupe_routine");
    s_finish(p, troupe_ll_zero_out(p, o));
    cr_expect_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_INVALID_ARGUMENT);
    troupe_ll_proc_destroy(&p);
    p = s_proc("n1_x");
    s_finish(p, troupe_ll_zero_out(p, o));
    cr_expect_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_INVALID_ARGUMENT);
    troupe_ll_proc_destroy(&p);

    /* SET_FROM_VEC with the wrong length. */
    p = s_proc("bad_vec");
    troupe_axis_index_t at[1] = {troupe_idx_fixed(0)};
    s_finish(p, troupe_ll_set_from_vec(p, o, at, 2, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM,
                                       troupe_sc_constant_bits(p, 5)));
    cr_expect_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_INVALID_ARGUMENT);
    cr_expect_not_null(strstr(troupe_last_error(), "length 2"), "%s", troupe_last_error());
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&o);
}

/* A routine without parameters still has an entry; comments are escaped. */
Test(cgen, no_parameters_and_comments)
{
    troupe_ll_proc_t *p = s_proc("scratch_only");
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_SINGLE, 1, 4, 0);
    s_set_mode(t, TROUPE_MM_LOCAL);
    troupe_ll_t *items[2] = {troupe_ll_comment(p, "tricky */ comment /* here"),
                             troupe_ll_zero_out(p, t)};
    s_finish(p, troupe_ll_seq(p, 2, items));
    s_lib_t lib;
    /* gcc sees the local array written and never read. */
    s_lib_open(p, "-O2 -Wall -Wextra -Werror -Wno-unused-but-set-variable", &lib);
    cr_expect_eq(lib.res->nparams, 0);
    lib.entry(NULL);
    s_lib_close(&lib);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&t);
}

/* The prelude table lists every section after the sections it uses, and each identifier it
 * names is provided exactly once. */
Test(cgen, prelude_table_is_ordered)
{
    size_t n = 0;
    const troupe__cgen_section_t *secs = troupe__cgen_sections(&n);
    cr_assert_gt(n, 10);
    for (size_t i = 0; i < n; i++) {
        for (int d = 0; d < 2; d++) {
            const char *text = d && secs[i].text_cuda ? secs[i].text_cuda : secs[i].text_c;
            for (size_t j = i + 1; j < n; j++) {
                char ids[512];
                snprintf(ids, sizeof ids, "%s", secs[j].provides);
                for (char *tok = strtok(ids, " "); tok; tok = strtok(NULL, " ")) {
                    const char *hit = strstr(text, tok);
                    while (hit != NULL) {
                        char after = hit[strlen(tok)];
                        bool word = !(after == '_' || (after >= 'a' && after <= 'z') ||
                                      (after >= '0' && after <= '9')) &&
                                    (hit == text ||
                                     !(hit[-1] == '_' || (hit[-1] >= 'a' && hit[-1] <= 'z')));
                        cr_expect(!word, "section %s uses %s of later section %s", secs[i].name,
                                  tok, secs[j].name);
                        hit = strstr(hit + 1, tok);
                    }
                }
            }
        }
    }
}

/* A small MLP layer written as assignments, lowered (ir/assign.h) and optimised
 * (compiler/optimize.h): the emitter uses the optimised procedure's memory modes (Local arrays,
 * Virtual nodes inlined as local scopes); buffers are made for exactly the parameters. */
Test(cgen, assign_lowered_and_optimized)
{
    troupe_asgn_comp_t *comp = NULL;
    cr_assert_eq(troupe_asgn_comp_new(&comp), TROUPE_OK);
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 2, 4, 6);
    troupe_tnode_t *w = s_node("w", TROUPE_PREC_SINGLE, 2, 6, 5);
    troupe_tnode_t *bias = s_node("bias", TROUPE_PREC_SINGLE, 1, 5, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_SINGLE, 2, 4, 5);
    troupe_tnode_t *h = s_node("h", TROUPE_PREC_SINGLE, 2, 4, 5);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_HALF, 2, 4, 5);
    troupe_asgn_t *a[3], *root = NULL;
    cr_assert_eq(troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ADD, t, TROUPE_BINOP_MUL,
                                         troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj",
                                         &a[0]),
                 TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ARG2, h, TROUPE_BINOP_ADD,
                                         troupe_asgn_node(t), troupe_asgn_node(bias), "bj,j=>bj",
                                         &a[1]),
                 TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, y, TROUPE_UNOP_RELU,
                                        troupe_asgn_node(h), "bj=>bj", &a[2]),
                 TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_asgn_seq(comp, 3, a, &root), TROUPE_OK);
    troupe_asgn_comp_set_root(comp, root);
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_asgn_lower(comp, "mlp_layer", &p), TROUPE_OK, "%s", troupe_last_error());
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            cr_assert_eq(troupe_ll_optimize(p, NULL), TROUPE_OK, "%s", troupe_last_error());
        troupe_cgen_result_t *res = NULL;
        cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_OK, "%s",
                     troupe_last_error());
        s_run_t r = {0};
        void *bufs[S_MAX_BINDS] = {0};
        for (size_t k = 0; k < res->nparams; k++) {
            troupe_tnode_t *tn = res->params[k].tn;
            cr_assert_eq(res->params[k].kind, TROUPE_CGEN_PARAM_NODE_PTR);
            bufs[k] = s_buffer(tn);
            if (res->params[k].is_read)
                s_fill_float(tn, bufs[k], -1.0f, 1.0f);
            s_bind(&r, tn, bufs[k]);
        }
        cr_expect_geq(troupe_cgen_find_node_param(res, y), 0);
        if (pass == 1) /* t and h are not materialized any more */
            cr_expect_eq(res->nparams, 4, "%s", res->source);
        troupe_cgen_result_destroy(&res);
        s_run(p, &r);
        s_nvrtc_check(p);
        for (size_t k = 0; k < S_MAX_BINDS; k++)
            free(bufs[k]);
    }
    troupe_ll_proc_destroy(&p);
    troupe_asgn_comp_destroy(&comp);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&bias);
    troupe_tnode_release(&t);
    troupe_tnode_release(&h);
    troupe_tnode_release(&y);
}

/* ---- CUDA: the thread mapping ------------------------------------------------------------- */

/* Emits the CUDA dialect of p and returns it (caller destroys). */
static troupe_cgen_result_t *s_cuda(const troupe_ll_proc_t *p)
{
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit_with(p, TROUPE_CGEN_CUDA, s_cuda_opts, &res), TROUPE_OK, "%s",
                 troupe_last_error());
    return res;
}

/* Fills n floats with values in [0.5, 2). */
static void s_fill(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = s_rndf(0.5f, 2.0f);
}

/* The C dialect's bound for a lane sum (cgen.h) of n single terms v[0..n-1] (scaled by
 * `scale`) into `init`: s_red_bound's. */
static double s_lane_bound(const float *v, size_t n, double scale, double init)
{
    double abs_sum = fabs(init);
    for (size_t i = 0; i < n; i++)
        abs_sum += fabs(scale * v[i]);
    return 2.0 * (double)n * 0x1p-24 * abs_sum;
}

/* Which loops go on the grid, case by case (cgen.h's rule), each checked against C and the
 * interpreter through the host emulation of the kernels (s_run -> s_emu_check), under the
 * planned launch and under a small grid run in reverse thread order. */
Test(cgen, cuda_thread_mapping)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    int runs0 = s_emu_runs;

    /* 1. A full reduction s[0] += x[i]: no loop is independent -> one one-thread kernel. */
    troupe_ll_proc_t *p = s_proc("full_sum");
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 1, 40, 0);
    troupe_tnode_t *sum = s_node("sum", TROUPE_PREC_SINGLE, 1, 1, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *v = troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, sum, troupe_idx_fixed(0)),
                                     s_get1(p, x, s_ix(i)));
    s_finish(p, s_for(p, i, 40, s_set1(p, sum, troupe_idx_fixed(0), v)));
    troupe_cgen_result_t *res = s_cuda(p);
    cr_assert_eq(res->nkernels, 1);
    cr_expect(res->kernels[0].one_thread);
    cr_expect(res->kernels[0].grid[0] == 1 && res->kernels[0].block[0] == 1);
    cr_expect_not_null(strstr(res->source, "if (threadIdx.x != 0 || threadIdx.y != 0"));
    troupe_cgen_result_destroy(&res);
    float xv[40], sv[1] = {0.25f};
    s_fill(xv, 40);
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, sum, sv);
    r.reassoc_tol = s_lane_bound(xv, 40, 1.0, sv[0]); /* C: a lane sum */
    s_run(p, &r);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);

    /* 2. In place, reading the next element: x[i] = x[i] + x[i+1] must stay sequential. */
    p = s_proc("shift_add");
    i = troupe_ll_proc_add_symbol(p, NULL);
    v = troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, x, s_ix(i)), s_get1(p, x, s_aff(1, i, 1)));
    s_finish(p, troupe_ll_for(p, i, 0, 38, s_set1(p, x, s_ix(i), v), false));
    res = s_cuda(p);
    cr_assert_eq(res->nkernels, 1);
    cr_expect(res->kernels[0].one_thread);
    troupe_cgen_result_destroy(&res);
    s_fill(xv, 40);
    r = (s_run_t){0};
    s_bind(&r, x, xv);
    s_run(p, &r);
    troupe_ll_proc_destroy(&p);

    /* 3. An outer reduction around an independent loop: for k { for i { c[i] += a[k,i] } }.
     * i goes on the grid (1D), k stays a loop inside each thread. */
    p = s_proc("col_sum");
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 2, 7, 300);
    troupe_tnode_t *c = s_node("c", TROUPE_PREC_SINGLE, 1, 300, 0);
    int32_t k = troupe_ll_proc_add_symbol(p, NULL);
    i = troupe_ll_proc_add_symbol(p, NULL);
    v = troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, c, s_ix(i)), s_get2(p, a, s_ix(k), s_ix(i)));
    s_finish(p, s_for(p, k, 7, s_for(p, i, 300, s_set1(p, c, s_ix(i), v))));
    res = s_cuda(p);
    cr_assert_eq(res->nkernels, 1);
    cr_expect(!res->kernels[0].one_thread);
    cr_expect(res->kernels[0].extent[0] == 300 && res->kernels[0].extent[1] == 1);
    cr_expect(res->kernels[0].block[0] == 256 && res->kernels[0].grid[0] == 2);
    cr_expect_not_null(strstr(res->source, "const int64_t i1 = 0LL + t_x;"));
    cr_expect_not_null(strstr(res->source, "for (int64_t i0 = 0; i0 <= 6; ++i0)"));
    troupe_cgen_result_destroy(&res);
    float *av = malloc(sizeof(float) * 2100), cv[300];
    s_fill(av, 2100);
    s_fill(cv, 300);
    r = (s_run_t){0};
    s_bind(&r, a, av);
    s_bind(&r, c, cv);
    s_run(p, &r);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);

    /* 4. A transpose with a static batch index and an affine write: y[j, 2*i + 1] = a[b, ...]
     * has both loops independent (2D) and a zeroing before it (its own kernel). */
    p = s_proc("transpose_b");
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 2, 300, 15);
    int32_t b = troupe_ll_proc_add_static_symbol(p, "b", 7);
    i = troupe_ll_proc_add_symbol(p, NULL);
    int32_t j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t src[2] = {s_ix(b), s_ix(j)};
    troupe_ll_t *nest = s_for(
        p, i, 7, s_for(p, j, 300, s_set2(p, y, s_ix(j), s_aff(2, i, 1), troupe_sc_get(p, a, src))));
    s_finish(p, troupe_ll_seq2(p, troupe_ll_zero_out(p, y), nest));
    res = s_cuda(p);
    cr_assert_eq(res->nkernels, 2);
    cr_expect(res->kernels[0].extent[0] == 4500);
    cr_expect(res->kernels[1].extent[0] == 300 && res->kernels[1].extent[1] == 7);
    cr_expect(res->kernels[1].block[0] == 32 && res->kernels[1].block[1] == 7);
    cr_expect(res->kernels[1].grid[0] == 10 && res->kernels[1].grid[1] == 1);
    troupe_cgen_result_destroy(&res);
    float *yv = malloc(sizeof(float) * 4500);
    s_fill(yv, 4500);
    r = (s_run_t){0};
    s_bind(&r, a, av);
    s_bind(&r, y, yv);
    r.static_name = "b";
    r.static_value = 5;
    s_run(p, &r);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);

    /* 5. Two top-level sets share one one-thread kernel: sum[0] = 0; x[0] = 1; then
     * for i { for j { sum[0] = max(sum[0], a[i, j]) } } (sum[0] not sliced by i) is a max
     * over 2100 terms: a block-level reduction, bit for bit (cuda_block_max_min). */
    p = s_proc("mixed");
    i = troupe_ll_proc_add_symbol(p, NULL);
    j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *items[3] = {
        s_set1(p, sum, troupe_idx_fixed(0), troupe_sc_constant(p, 0.0)),
        s_set1(p, x, troupe_idx_fixed(0), troupe_sc_constant(p, 1.0)),
        s_for(p, i, 7,
              s_for(p, j, 300,
                    s_set1(p, sum, troupe_idx_fixed(0),
                           troupe_sc_binop(p, TROUPE_BINOP_MAX, s_get1(p, sum, troupe_idx_fixed(0)),
                                           s_get2(p, a, s_ix(i), s_ix(j))))))};
    s_finish(p, troupe_ll_seq(p, 3, items));
    res = s_cuda(p);
    cr_assert_eq(res->nkernels, 2, "%s", res->source);
    cr_expect(res->kernels[0].one_thread);
    cr_expect(res->kernels[1].fixed_block && !res->kernels[1].reassociates);
    troupe_cgen_result_destroy(&res);
    r = (s_run_t){0};
    s_bind(&r, a, av);
    s_bind(&r, sum, sv);
    s_bind(&r, x, xv);
    s_run(p, &r);
    troupe_ll_proc_destroy(&p);

    cr_expect_eq(s_emu_runs - runs0, 5, "every routine ran emulated");
    free(av);
    free(yv);
    troupe_tnode_release(&x);
    troupe_tnode_release(&sum);
    troupe_tnode_release(&a);
    troupe_tnode_release(&c);
    troupe_tnode_release(&y);
}

/* c0*s0 + c1*s1 (+ c2*s2 when c2 != 0): one axis index of several terms. */
static troupe_axis_index_t s_sum_ix(int64_t c0, int32_t s0, int64_t c1, int32_t s1, int64_t c2,
                                    int32_t s2)
{
    troupe_axis_index_t x = {2, {{c0, s0}, {c1, s1}}, 0};
    if (c2 != 0)
        x.terms[x.nterms++] = (troupe_index_term_t){c2, s2};
    return x;
}

/* The product of a kernel's mapped extents (x, and y when 2-D). */
static int64_t s_mapped(const troupe_cgen_kernel_t *k)
{
    return k->extent[0] * (k->extent[1] > 1 ? k->extent[1] : 1);
}

/* A loop whose symbol is one term of a written axis index maps onto the grid when the index's
 * terms make a mixed radix (each |coefficient| past the span of the smaller ones), so distinct
 * values touch distinct elements whatever the other loops: a max pool's gradient,
 * y[b, 2 i + k] += ... (its windows do not overlap), and an im2col copy, col[9 c + 3 kh + kw,
 * p] = x[c, kh + p + kw], map every loop. A transposed convolution's y[b, i + k] (the windows
 * overlap: an im2col's gradient) maps u = i + k, each thread looping over i in order with
 * k = u - i (a skew pair); y[b, 2 i + k] with k up to 2 keeps its overlapping loops in each
 * thread. Every routine runs emulated bit for bit as the C dialect (the planned grid and a small
 * reversed one). Before, any index of two terms kept its loops in each thread (one thread per
 * image and channel looped over a pool's every window). */
Test(cgen, cuda_mixed_radix_indices)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    int runs0 = s_emu_runs;
    /* loops b, i, k; y[b, ci i + ck k] += x[b, i] * w[k]; ni, nk the extents, mapped the
     * expected mapped iterations */
    const struct {
        const char *name;
        int64_t ci, ck, ni, nk, mapped;
    } pools[] = {{"pool_grad", 2, 1, 5, 2, 3 * 5 * 2},
                 {"overlap", 1, 1, 5, 2, 3 * 6},
                 {"transposed_conv", 1, 1, 7, 4, 3 * 10},
                 {"short_radix", 2, 1, 5, 3, 3}};
    for (int c = 0; c < 4; c++) {
        troupe_ll_proc_t *p = s_proc(pools[c].name);
        const int64_t ncols = pools[c].ci * (pools[c].ni - 1) + pools[c].ck * (pools[c].nk - 1) + 1;
        troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 2, 3, ncols);
        troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 2, 3, pools[c].ni);
        troupe_tnode_t *w = s_node("w", TROUPE_PREC_SINGLE, 1, pools[c].nk, 0);
        int32_t b = troupe_ll_proc_add_symbol(p, NULL), i = troupe_ll_proc_add_symbol(p, NULL),
                k = troupe_ll_proc_add_symbol(p, NULL);
        troupe_axis_index_t yi = s_sum_ix(pools[c].ci, i, pools[c].ck, k, 0, 0);
        troupe_sc_t *v =
            troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get2(p, y, s_ix(b), yi),
                            troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get2(p, x, s_ix(b), s_ix(i)),
                                            s_get1(p, w, s_ix(k))));
        s_finish(p, s_for(p, b, 3,
                          s_for(p, i, pools[c].ni,
                                s_for(p, k, pools[c].nk, s_set2(p, y, s_ix(b), yi, v)))));
        troupe_cgen_result_t *res = s_cuda(p);
        cr_assert_eq(res->nkernels, 1, "%s", res->source);
        cr_expect(!res->kernels[0].one_thread && s_mapped(&res->kernels[0]) == pools[c].mapped,
                  "%s: %lld iterations mapped, expected %lld\n%s", pools[c].name,
                  (long long)s_mapped(&res->kernels[0]), (long long)pools[c].mapped, res->source);
        /* i + k: the thread of u = i + k loops over i, k = u - i */
        bool skew = pools[c].ci == pools[c].ck;
        cr_expect((strstr(res->source, "const int64_t t_u") != NULL) == skew, "%s:\n%s",
                  pools[c].name, res->source);
        troupe_cgen_result_destroy(&res);
        float yv[64], xv[21], wv[4];
        s_fill(yv, (size_t)(3 * ncols));
        s_fill(xv, (size_t)(3 * pools[c].ni));
        s_fill(wv, (size_t)pools[c].nk);
        s_run_t r = {0};
        s_bind(&r, y, yv);
        s_bind(&r, x, xv);
        s_bind(&r, w, wv);
        s_run_once(&p, &r);
        troupe_tnode_release(&y);
        troupe_tnode_release(&x);
        troupe_tnode_release(&w);
    }

    /* im2col: for c, kh, kw, q { col[9 c + 3 kh + kw, q] = x[c, kh + q + kw] } */
    troupe_ll_proc_t *p = s_proc("im2col");
    troupe_tnode_t *col = s_node("col", TROUPE_PREC_SINGLE, 2, 18, 4);
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 2, 2, 8);
    int32_t c = troupe_ll_proc_add_symbol(p, NULL), kh = troupe_ll_proc_add_symbol(p, NULL),
            kw = troupe_ll_proc_add_symbol(p, NULL), q = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ci = s_sum_ix(9, c, 3, kh, 1, kw), xi = s_sum_ix(1, kh, 1, q, 1, kw);
    troupe_ll_t *set = s_set2(p, col, ci, s_ix(q), s_get2(p, x, s_ix(c), xi));
    s_finish(p, s_for(p, c, 2, s_for(p, kh, 3, s_for(p, kw, 3, s_for(p, q, 4, set)))));
    troupe_cgen_result_t *res = s_cuda(p);
    cr_assert_eq(res->nkernels, 1, "%s", res->source);
    cr_expect(s_mapped(&res->kernels[0]) == 72 && strstr(res->source, "for (int64_t i") == NULL,
              "%s", res->source);
    troupe_cgen_result_destroy(&res);
    float colv[72], x2[16];
    s_fill(colv, 72);
    s_fill(x2, 16);
    s_run_t r = {0};
    s_bind(&r, col, colv);
    s_bind(&r, x, x2);
    s_run_once(&p, &r);
    troupe_tnode_release(&col);
    troupe_tnode_release(&x);

    /* sibling loops binding one symbol: for i { for j < 2 { a[2 i + j] = x[2 i + j] }
     * for j < 5 { y[i] += a[2 i + j] } } (the IR allows it): j takes 5 values in the nest, so
     * 2 i + j is no radix and i stays in one thread (thread i would read what i + 1 writes) */
    p = s_proc("sibling_symbol");
    troupe_tnode_t *av = s_node("a", TROUPE_PREC_SINGLE, 1, 24, 0),
                   *xa = s_node("x", TROUPE_PREC_SINGLE, 1, 24, 0),
                   *ya = s_node("y", TROUPE_PREC_SINGLE, 1, 10, 0);
    int32_t si = troupe_ll_proc_add_symbol(p, NULL), sj = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t aij = s_sum_ix(2, si, 1, sj, 0, 0);
    troupe_ll_t *copy = troupe_ll_for(p, sj, 0, 1, s_set1(p, av, aij, s_get1(p, xa, aij)), false);
    troupe_ll_t *sum = troupe_ll_for(
        p, sj, 0, 4,
        s_set1(p, ya, s_ix(si),
               troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, ya, s_ix(si)), s_get1(p, av, aij))),
        false);
    s_finish(p, s_for(p, si, 10, troupe_ll_seq2(p, copy, sum)));
    res = s_cuda(p);
    cr_expect(res->nkernels == 1 && res->kernels[0].one_thread, "%s", res->source);
    troupe_cgen_result_destroy(&res);
    float a24[24], x24[24], y10[10];
    s_fill(a24, 24);
    s_fill(x24, 24);
    s_fill(y10, 10);
    r = (s_run_t){0};
    s_bind(&r, av, a24);
    s_bind(&r, xa, x24);
    s_bind(&r, ya, y10);
    s_run(p, &r);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&av);
    troupe_tnode_release(&xa);
    troupe_tnode_release(&ya);
    cr_expect_eq(s_emu_runs - runs0, 6, "every routine ran emulated");
}

/* A zeroing whose next accesses are nests writing disjoint boxes of the node once each, all of
 * it together (an im2col copy and its bias row), is dropped on a GPU: the nests read the node
 * as 0 (0 + t, the same bits), one pass over it and a read of it fewer. The routine runs
 * emulated bit for bit as the C dialect. A zeroing followed by a nest that leaves a row
 * unwritten, or that adds each element twice, stays. */
Test(cgen, cuda_zeroing_before_covering_nests_is_dropped)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    enum { R = 130, C = 200 };
    int runs0 = s_emu_runs;
    for (int c = 0; c < 3; c++) {
        /* col[r, q] = col + x[r, q] for r < R (c == 1: r < R - 1); col[R, q] = col + 1;
         * c == 2: the first nest runs twice before the second */
        troupe_ll_proc_t *p = s_proc(c == 0 ? "covers" : c == 1 ? "leaves_a_row" : "twice");
        troupe_tnode_t *col = s_node("col", TROUPE_PREC_SINGLE, 2, R + 1, C);
        troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 2, R, C);
        int32_t r = troupe_ll_proc_add_symbol(p, NULL), q = troupe_ll_proc_add_symbol(p, NULL),
                q2 = troupe_ll_proc_add_symbol(p, NULL), r3 = troupe_ll_proc_add_symbol(p, NULL),
                q3 = troupe_ll_proc_add_symbol(p, NULL);
        troupe_sc_t *v1 = troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get2(p, col, s_ix(r), s_ix(q)),
                                          s_get2(p, x, s_ix(r), s_ix(q)));
        troupe_sc_t *v2 =
            troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get2(p, col, troupe_idx_fixed(R), s_ix(q2)),
                            troupe_sc_constant(p, 1.0));
        troupe_ll_t *items[4] = {
            troupe_ll_zero_out(p, col),
            s_for(p, r, c == 1 ? R - 1 : R, s_for(p, q, C, s_set2(p, col, s_ix(r), s_ix(q), v1))),
            s_for(p, q2, C, s_set2(p, col, troupe_idx_fixed(R), s_ix(q2), v2)), NULL};
        size_t nitems = 3;
        if (c == 2) {
            troupe_sc_t *v3 =
                troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get2(p, col, s_ix(r3), s_ix(q3)),
                                s_get2(p, x, s_ix(r3), s_ix(q3)));
            items[3] = items[2]; /* the row R last: the rows below R are added twice first */
            items[2] = s_for(p, r3, R, s_for(p, q3, C, s_set2(p, col, s_ix(r3), s_ix(q3), v3)));
            nitems = 4;
        }
        s_finish(p, troupe_ll_seq(p, nitems, items));
        troupe_cgen_result_t *res = s_cuda(p);
        bool zeroes = strstr(res->source, "_col[t_x] = 0;") != NULL ||
                      strstr(res->source, "_col[t_f] = 0;") != NULL;
        cr_expect(zeroes == (c != 0), "%s: %s zeroing\n%s", p->name, zeroes ? "a" : "no",
                  res->source);
        cr_expect((strstr(res->source, "((((float)0)) + (") != NULL) == (c == 0), "%s:\n%s",
                  p->name, res->source);
        troupe_cgen_result_destroy(&res);
        float *colv = malloc(sizeof(float) * (R + 1) * C), *xv = malloc(sizeof(float) * R * C);
        s_fill(colv, (size_t)(R + 1) * C); /* what the zeroing overwrites */
        s_fill(xv, (size_t)R * C);
        xv[7] = -0.0f; /* 0 + -0 is +0: the first write keeps the zeroed element's sum */
        s_run_t rr = {0};
        s_bind(&rr, col, colv);
        s_bind(&rr, x, xv);
        s_run_once(&p, &rr);
        free(colv);
        free(xv);
        troupe_tnode_release(&col);
        troupe_tnode_release(&x);
    }
    cr_expect_eq(s_emu_runs - runs0, 3, "every routine ran emulated");
}

/* The dropped zeroing's edge cases, each emulated bit for bit against the C dialect (planned
 * and reversed small grids) and compiled by NVRTC: sequential statements on both sides of the
 * zeroing (a run of them must not span it: it would run after all, beside the covering nests);
 * covering nests that read the node through a function (exp in double: the zero they read is
 * typed, so the call resolves) and negated (single: -0 + -0 is -0, what the zeroed element
 * gives). */
static void s_store(troupe_prec_t prec, void *v, int64_t i, double d);

Test(cgen, cuda_dropped_zeroing_edge_cases)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    enum { R = 40, C = 50 };
    int runs0 = s_emu_runs;
    for (int c = 0; c < 3; c++) {
        const troupe_prec_t prec = c == 1 ? TROUPE_PREC_DOUBLE : TROUPE_PREC_SINGLE;
        troupe_ll_proc_t *p = s_proc(c == 0 ? "seq_around" : c == 1 ? "exp_double" : "negated");
        troupe_tnode_t *col = s_node("col", prec, 2, R, C), *x = s_node("x", prec, 2, R, C);
        troupe_tnode_t *f = s_node("f", TROUPE_PREC_SINGLE, 1, 2, 0);
        int32_t r = troupe_ll_proc_add_symbol(p, NULL), q = troupe_ll_proc_add_symbol(p, NULL);
        troupe_sc_t *old = s_get2(p, col, s_ix(r), s_ix(q));
        if (c == 1)
            old = troupe_sc_unop(p, TROUPE_UNOP_EXP, old);
        else if (c == 2)
            old = troupe_sc_unop(p, TROUPE_UNOP_NEG, old);
        troupe_sc_t *v = troupe_sc_binop(p, TROUPE_BINOP_ADD, old, s_get2(p, x, s_ix(r), s_ix(q)));
        troupe_ll_t *items[4] = {
            s_set1(p, f, troupe_idx_fixed(0), troupe_sc_constant(p, 2.0)),
            troupe_ll_zero_out(p, col),
            s_set1(p, f, troupe_idx_fixed(1), troupe_sc_constant(p, 3.0)),
            s_for(p, r, R, s_for(p, q, C, s_set2(p, col, s_ix(r), s_ix(q), v)))};
        s_finish(p, troupe_ll_seq(p, 4, items));
        troupe_cgen_result_t *res = s_cuda(p);
        cr_expect(strstr(res->source, "_col[t_x] = 0;") == NULL &&
                      strstr(res->source, "_col[zi] = 0;") == NULL &&
                      strstr(res->source, "_col[t_f] = 0;") == NULL,
                  "%s: the zeroing runs\n%s", p->name, res->source);
        troupe_cgen_result_destroy(&res);
        size_t es = troupe_prec_size_bytes(prec);
        void *colv = malloc(es * R * C), *xv = malloc(es * R * C);
        for (int k = 0; k < R * C; k++) {
            s_store(prec, colv, k, 7.0 + k % 5); /* what the zeroing overwrites */
            s_store(prec, xv, k, k % 3 == 0 ? -0.0 : 0.01 * (k % 17) - 0.08);
        }
        float fv[2] = {0, 0};
        s_run_t rr = {0};
        s_bind(&rr, col, colv);
        s_bind(&rr, x, xv);
        s_bind(&rr, f, fv);
        s_run_once(&p, &rr);
        free(colv);
        free(xv);
        troupe_tnode_release(&col);
        troupe_tnode_release(&x);
        troupe_tnode_release(&f);
    }
    cr_expect_eq(s_emu_runs - runs0, 3, "every routine ran emulated");
}

/* Sum of |term| over a reduction's terms, for its error bound: n terms summed in any order in a
 * precision with unit roundoff u differ from the exact sum by at most about (n - 1) u sum|t|;
 * the bound allows 2 n u sum|t| (plus the output's own value). */
static double s_red_bound(double n, double u, double abs_sum)
{
    return 2.0 * n * u * abs_sum;
}

/* Runs *p with the bound buffers (s_run: reassociating kernels within `tol`), NVRTC-compiles it
 * and destroys it. */
static void s_run_reduction(troupe_ll_proc_t **p, s_run_t *r, double tol)
{
    r->reassoc_tol = tol;
    s_run_once(p, r);
}

/* Reductions over many terms into few outputs go onto the threads of a block (cgen.h's rule:
 * at least 256 terms, at most 16384 outputs): a bias gradient db[j] = sum_b dy[b,j] (1000 x
 * 10), a loss over a batch with fma (s = fma(x[i], w[i], s), 5000 terms, one output), a double
 * sum over two loops (20 x 30 into one). Each agrees with the interpreter within the bound for
 * its length and precision and is bitwise the same under the planned grid and a small reversed
 * one (s_emu_check); a reduction of 255 terms stays in each thread, bit for bit. */
Test(cgen, cuda_block_reductions)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    int runs0 = s_emu_runs;

    /* 1. Bias gradient: for b { for j { db[j] = db[j] + dy[b, j] } }. */
    troupe_ll_proc_t *p = s_proc("bias_grad");
    troupe_tnode_t *dy = s_node("dy", TROUPE_PREC_SINGLE, 2, 1000, 10);
    troupe_tnode_t *db = s_node("db", TROUPE_PREC_SINGLE, 1, 10, 0);
    int32_t bs = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *v = troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, db, s_ix(j)),
                                     s_get2(p, dy, s_ix(bs), s_ix(j)));
    s_finish(p, s_for(p, bs, 1000, s_for(p, j, 10, s_set1(p, db, s_ix(j), v))));
    troupe_cgen_result_t *res = s_cuda(p);
    cr_assert_eq(res->nkernels, 1, "%s", res->source);
    const troupe_cgen_kernel_t *k = &res->kernels[0];
    cr_expect(k->fixed_block && k->reassociates && !k->one_thread);
    cr_expect(k->block[0] == 256 && k->block[1] == 1 && k->grid[0] == 10 && k->grid[1] == 1);
    cr_expect(k->extent[0] == 1000 && k->extent[1] == 10);
    cr_expect_not_null(strstr(res->source, "__syncthreads();"));
    cr_expect_null(strstr(res->source, "atomic"));
    troupe_cgen_result_destroy(&res);
    float *dyv = malloc(sizeof(float) * 10000), dbv[10];
    s_fill(dyv, 10000);
    for (int i = 0; i < 10000; i++)
        dyv[i] -= 1.25f; /* mixed signs */
    double abs_sum = 5;  /* the outputs' initial values */
    for (int i = 0; i < 10000; i++)
        abs_sum += fabs(dyv[i]);
    for (int i = 0; i < 10; i++)
        dbv[i] = 0.5f;
    s_run_t r = {0};
    s_bind(&r, dy, dyv);
    s_bind(&r, db, dbv);
    s_run_reduction(&p, &r, s_red_bound(1001, 0x1p-24, abs_sum));

    /* 2. A loss over the batch with fma: s[0] = fma(x[i], w[i], s[0]), 5000 terms, one output. */
    p = s_proc("dot_loss");
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 1, 5000, 0);
    troupe_tnode_t *w = s_node("w", TROUPE_PREC_SINGLE, 1, 5000, 0);
    troupe_tnode_t *sum = s_node("sum", TROUPE_PREC_SINGLE, 1, 1, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    v = troupe_sc_ternop(p, TROUPE_TERNOP_FMA, s_get1(p, x, s_ix(i)), s_get1(p, w, s_ix(i)),
                         s_get1(p, sum, troupe_idx_fixed(0)));
    s_finish(p, s_for(p, i, 5000, s_set1(p, sum, troupe_idx_fixed(0), v)));
    res = s_cuda(p);
    cr_assert_eq(res->nkernels, 1);
    cr_expect(res->kernels[0].reassociates && res->kernels[0].grid[0] == 1);
    cr_expect_not_null(strstr(res->source, "fmaf(red_x, red_y, red_acc)"));
    troupe_cgen_result_destroy(&res);
    float *xv = malloc(sizeof(float) * 5000), *wv = malloc(sizeof(float) * 5000), sv[1] = {2};
    s_fill(xv, 5000);
    s_fill(wv, 5000);
    abs_sum = 2;
    for (int n = 0; n < 5000; n++) {
        wv[n] -= 1.25f;
        abs_sum += fabs((double)xv[n] * wv[n]);
    }
    r = (s_run_t){0};
    s_bind(&r, x, xv);
    s_bind(&r, w, wv);
    s_bind(&r, sum, sv);
    s_run_reduction(&p, &r, s_red_bound(5001, 0x1p-24, abs_sum));

    /* 3. Double, two reduction loops into one output: t[0] = t[0] + a[u, q]. */
    p = s_proc("sum2d");
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 2, 20, 30);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 1, 0);
    int32_t u = troupe_ll_proc_add_symbol(p, NULL), q = troupe_ll_proc_add_symbol(p, NULL);
    v = troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get2(p, a, s_ix(u), s_ix(q)),
                        s_get1(p, t, troupe_idx_fixed(0)));
    s_finish(p, s_for(p, u, 20, s_for(p, q, 30, s_set1(p, t, troupe_idx_fixed(0), v))));
    res = s_cuda(p);
    cr_assert_eq(res->nkernels, 1);
    cr_expect(res->kernels[0].reassociates && res->kernels[0].extent[0] == 600);
    cr_expect_not_null(strstr(res->source, "__shared__ double red_sh[256];"));
    troupe_cgen_result_destroy(&res);
    double av[600], tv[1] = {-3};
    abs_sum = 3;
    for (int n = 0; n < 600; n++) {
        av[n] = (double)s_rndf(-2, 2) / 3.0;
        abs_sum += fabs(av[n]);
    }
    r = (s_run_t){0};
    s_bind(&r, a, av);
    s_bind(&r, t, tv);
    s_run_reduction(&p, &r, s_red_bound(601, 0x1p-53, abs_sum));

    /* 4. 255 terms: below the threshold, one thread sums in the interpreter's order. */
    p = s_proc("short_sum");
    troupe_tnode_t *x255 = s_node("x", TROUPE_PREC_SINGLE, 1, 255, 0);
    i = troupe_ll_proc_add_symbol(p, NULL);
    v = troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, sum, troupe_idx_fixed(0)),
                        s_get1(p, x255, s_ix(i)));
    s_finish(p, s_for(p, i, 255, s_set1(p, sum, troupe_idx_fixed(0), v)));
    res = s_cuda(p);
    cr_assert_eq(res->nkernels, 1);
    cr_expect(res->kernels[0].one_thread && !res->kernels[0].reassociates &&
              !res->kernels[0].fixed_block);
    troupe_cgen_result_destroy(&res);
    r = (s_run_t){0};
    s_bind(&r, x255, xv);
    s_bind(&r, sum, sv);
    /* CUDA bit for bit; C: a lane sum, within its bound */
    r.reassoc_tol = s_lane_bound(xv, 255, 1.0, sv[0]);
    s_run(p, &r);
    troupe_ll_proc_destroy(&p);

    cr_expect_eq(s_emu_runs - runs0, 4, "every routine ran emulated");
    free(dyv);
    free(xv);
    free(wv);
    troupe_tnode_release(&dy);
    troupe_tnode_release(&db);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&sum);
    troupe_tnode_release(&a);
    troupe_tnode_release(&t);
    troupe_tnode_release(&x255);
}

/* A product large enough for a GEMM library (16x32x24) becomes a GEMM step whose call (with a
 * static batch offset in A and the zeroing fused as beta = 0) is checked against the fallback
 * kernels on the host. */
Test(cgen, cuda_gemm_step)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    troupe_ll_proc_t *p = s_proc("bmm");
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 2, 3 * 16, 24);
    troupe_tnode_t *bm = s_node("b", TROUPE_PREC_SINGLE, 2, 24, 32);
    troupe_tnode_t *c = s_node("c", TROUPE_PREC_SINGLE, 2, 16, 32);
    int32_t bt = troupe_ll_proc_add_static_symbol(p, "batch", 3);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), k = troupe_ll_proc_add_symbol(p, NULL),
            j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ai[2] = {s_ix(i), s_ix(k)};
    ai[0].terms[1] = (troupe_index_term_t){16, bt};
    ai[0].nterms = 2;
    troupe_sc_t *v = troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get2(p, c, s_ix(i), s_ix(j)),
                                     troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_get(p, a, ai),
                                                     s_get2(p, bm, s_ix(k), s_ix(j))));
    troupe_ll_t *nest =
        s_for(p, i, 16, s_for(p, k, 24, s_for(p, j, 32, s_set2(p, c, s_ix(i), s_ix(j), v))));
    s_finish(p, troupe_ll_seq2(p, troupe_ll_zero_out(p, c), nest));
    troupe_cgen_result_t *res = s_cuda(p);
    cr_assert_eq(res->nsteps, 1, "%s", res->source);
    const troupe_cgen_step_t *st = &res->steps[0];
    cr_assert_eq(st->kind, TROUPE_CGEN_STEP_GEMM);
    cr_expect_eq(st->nkernels, 1); /* the tiled product, the zeroing fused as beta = 0 */
    cr_expect(res->kernels[st->first_kernel].fixed_block &&
              !res->kernels[st->first_kernel].reassociates);
    cr_expect(st->gemm.m == 16 && st->gemm.n == 32 && st->gemm.k == 24 && st->gemm.beta_zero);
    cr_expect(!st->gemm.a.trans && st->gemm.a.ld == 24 && st->gemm.a.nterms == 1 &&
              st->gemm.a.coeff[0] == 16 * 24);
    cr_expect_eq(res->params[st->gemm.a.static_param[0]].kind, TROUPE_CGEN_PARAM_STATIC_IDX);
    cr_expect(st->gemm.b.ld == 32 && st->gemm.c.ld == 32 && st->gemm.c.nterms == 0);
    troupe_cgen_result_destroy(&res);
    float *av = malloc(sizeof(float) * 48 * 24), *bv = malloc(sizeof(float) * 24 * 32),
          *cv = malloc(sizeof(float) * 16 * 32);
    s_fill(av, 48 * 24);
    s_fill(bv, 24 * 32);
    s_fill(cv, 16 * 32);
    s_run_t r = {0};
    s_bind(&r, a, av);
    s_bind(&r, bm, bv);
    s_bind(&r, c, cv);
    r.static_name = "batch";
    r.static_value = 2;
    s_run(p, &r);
    s_nvrtc_check(p);
    free(av);
    free(bv);
    free(cv);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&a);
    troupe_tnode_release(&bm);
    troupe_tnode_release(&c);
}

/* Batched products (compiler/cgen.h): c[b,h] += a[b,h] x w[b,h] over two batch loops whose
 * points write their own blocks (attention's per-head products), and c += a[b] x w[b] summed
 * over b (a weight gradient over the samples). Each is one GEMM step over its batch, whose
 * fallback tiles give the nest's results bit for bit and whose description is checked, on the
 * host. The first with c zeroed before it (another statement between) takes the zeroing as
 * beta = 0, no kernel of its own (attention's q k^T wrote 402 MB of zeros a layer of GPT-2
 * 124M at batch 8, then read them back). */
Test(cgen, cuda_batched_gemm_step)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    for (int form = 0; form < 3; form++) {
        /* 0: C = A W per batch point; 1: the points accumulate into one C; 2: as 0, C zeroed
         * first (another statement between): the zeroing becomes beta = 0 in each call */
        enum { NB = 2, NH = 3, M = 16, K = 24, N = 32 };
        const bool acc = form == 1, zeroed = form == 2;
        const int nh = acc ? 1 : NH;
        troupe_ll_proc_t *p = s_proc(acc ? "bgemm_acc" : zeroed ? "bgemm_zeroed" : "bgemm");
        troupe_tnode_t *a = s_node3("a", NB * nh, M, K);
        troupe_tnode_t *w = s_node3("w", NB * nh, K, N);
        troupe_tnode_t *c =
            acc ? s_node("c", TROUPE_PREC_SINGLE, 2, M, N) : s_node3("c", NB * nh, M, N);
        int32_t b = troupe_ll_proc_add_symbol(p, NULL), h = troupe_ll_proc_add_symbol(p, NULL),
                i = troupe_ll_proc_add_symbol(p, NULL), k = troupe_ll_proc_add_symbol(p, NULL),
                j = troupe_ll_proc_add_symbol(p, NULL);
        /* the batch axis is b * nh + h */
        troupe_axis_index_t bh = s_ix(b);
        bh.terms[0].coeff = nh;
        bh.terms[1] = (troupe_index_term_t){1, h};
        bh.nterms = 2;
        troupe_axis_index_t ai[3] = {bh, s_ix(i), s_ix(k)}, wi[3] = {bh, s_ix(k), s_ix(j)},
                            ci[3] = {bh, s_ix(i), s_ix(j)};
        troupe_sc_t *cur = acc ? s_get2(p, c, s_ix(i), s_ix(j)) : troupe_sc_get(p, c, ci);
        troupe_sc_t *v = troupe_sc_binop(
            p, TROUPE_BINOP_ADD, cur,
            troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_get(p, a, ai), troupe_sc_get(p, w, wi)));
        troupe_ll_t *set = acc ? s_set2(p, c, s_ix(i), s_ix(j), v) : troupe_ll_set(p, c, ci, v);
        troupe_ll_t *nest = s_for(
            p, b, NB, s_for(p, h, nh, s_for(p, i, M, s_for(p, k, K, s_for(p, j, N, set)))));
        troupe_tnode_t *flag = s_node("flag", TROUPE_PREC_SINGLE, 1, 1, 0);
        if (zeroed) {
            troupe_ll_t *items[3] = {
                troupe_ll_zero_out(p, c),
                s_set1(p, flag, troupe_idx_fixed(0), troupe_sc_constant(p, 2.0)), nest};
            s_finish(p, troupe_ll_seq(p, 3, items));
        } else {
            s_finish(p, nest);
        }
        troupe_cgen_result_t *res = s_cuda(p);
        const troupe_cgen_step_t *st = NULL;
        for (size_t q = 0; q < res->nsteps; q++)
            if (res->steps[q].kind == TROUPE_CGEN_STEP_GEMM)
                st = &res->steps[q];
        cr_assert_not_null(st, "no GEMM step:\n%s", res->source);
        cr_expect(st->gemm.m == M && st->gemm.n == N && st->gemm.k == K &&
                      st->gemm.beta_zero == zeroed,
                  "%s", res->source);
        cr_expect(strstr(res->source, "_c[t_f] = 0;") == NULL &&
                      strstr(res->source, "_c[t_x] = 0;") == NULL,
                  "a zeroing kernel:\n%s", res->source);
        int64_t points = 1, cstride = 0;
        for (int o = 0; o < st->gemm.nbatch; o++) {
            points *= st->gemm.batch_ext[o];
            cstride += st->gemm.c.batch_stride[o];
        }
        cr_expect(st->gemm.nbatch >= 1 && points == NB * nh, "batch of %d loops, %lld points",
                  st->gemm.nbatch, (long long)points);
        cr_expect(acc ? cstride == 0 : cstride > 0, "C's batch strides sum to %lld",
                  (long long)cstride);
        cr_expect_not_null(strstr(res->source, "over a batch of"), "%s", res->source);
        troupe_cgen_result_destroy(&res);
        int64_t na = NB * nh * M * K, nw = NB * nh * K * N, nc = acc ? M * N : NB * nh * M * N;
        float *av = malloc(sizeof(float) * (size_t)na), *wv = malloc(sizeof(float) * (size_t)nw),
              *cv = malloc(sizeof(float) * (size_t)nc);
        s_fill(av, na);
        s_fill(wv, nw);
        s_fill(cv, nc);
        s_run_t r = {0};
        s_bind(&r, a, av);
        s_bind(&r, w, wv);
        s_bind(&r, c, cv);
        float fv[1] = {0};
        if (zeroed)
            s_bind(&r, flag, fv);
        s_run(p, &r);
        s_nvrtc_check(p);
        free(av);
        free(wv);
        free(cv);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&a);
        troupe_tnode_release(&w);
        troupe_tnode_release(&c);
        troupe_tnode_release(&flag);
    }
}

/* The value of category col for a max/min reduction's input (see cuda_block_max_min). */
static double s_maxmin_value(int col, uint32_t rnd)
{
    const double nan_a = nan("0x123"), nan_b = -nan("0x4567");
    const double zeros[2] = {0.0, -0.0};
    switch (col) {
    case 1: /* zeros of both signs only: the sign is decided by position */
        return zeros[rnd & 1];
    case 2: /* NaN only, two payloads and signs */
        return (rnd & 1) ? nan_a : nan_b;
    case 3: { /* mostly NaN, infinities, a few values */
        const double v[5] = {nan_a, INFINITY, -INFINITY, nan_b, (double)(rnd % 7) - 3.0};
        return v[rnd % 5];
    }
    case 4: { /* max is a zero: -0, +0, -1, NaN */
        const double v[4] = {-0.0, 0.0, -1.0, nan_a};
        return v[rnd % 4];
    }
    case 5: { /* min is a zero: -0, +0, 1, NaN */
        const double v[4] = {-0.0, 0.0, 1.0, nan_b};
        return v[rnd % 4];
    }
    default: /* ties: small integers of both signs */
        return (double)(int)(rnd % 9) - 4.0;
    }
}

/* o[j] = max/min(o[j], x[b, j]) (or with the operands swapped) over 1000 values of b into 7
 * outputs runs on a block per output (fixed order, no reassociation flag) and gives the
 * interpreter's bits exactly under the planned and a small reversed grid (s_emu_check): signed
 * zeros, NaN payloads (all-NaN columns), infinities and ties included, in single, double and
 * int32; integer sums (int32 wrapping past INT32_MAX, uint64) go onto a block bit for bit too. */
Test(cgen, cuda_block_max_min)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    enum { NB = 1000, NJ = 7 };
    const troupe_prec_t precs[] = {TROUPE_PREC_SINGLE, TROUPE_PREC_DOUBLE, TROUPE_PREC_INT32};
    const troupe_binop_t ops[] = {TROUPE_BINOP_MAX, TROUPE_BINOP_MIN, TROUPE_BINOP_ADD};
    const double init[NJ] = {0.5, -0.0, nan("0x77"), -nan("0x1"), 0.0, -0.0, -INFINITY};
    int runs0 = s_emu_runs, nruns = 0;
    for (size_t pi = 0; pi < 3; pi++) {
        for (size_t oi = 0; oi < 3; oi++) {
            for (int acc_first = 0; acc_first < 2; acc_first++) {
                const troupe_prec_t prec = precs[pi];
                const troupe_binop_t op = ops[oi];
                if (op == TROUPE_BINOP_ADD && (prec != TROUPE_PREC_INT32 || !acc_first))
                    continue; /* float sums: cuda_block_reductions */
                char name[64];
                snprintf(name, sizeof name, "red_%s_%s_%d", troupe_prec_name(prec),
                         troupe_binop_name(op), acc_first);
                troupe_ll_proc_t *p = s_proc(name);
                troupe_tnode_t *x = s_node("x", prec, 2, NB, NJ);
                troupe_tnode_t *o = s_node("o", prec, 1, NJ, 0);
                int32_t b = troupe_ll_proc_add_symbol(p, NULL);
                int32_t j = troupe_ll_proc_add_symbol(p, NULL);
                troupe_sc_t *acc = s_get1(p, o, s_ix(j)), *t = s_get2(p, x, s_ix(b), s_ix(j));
                troupe_sc_t *v =
                    acc_first ? troupe_sc_binop(p, op, acc, t) : troupe_sc_binop(p, op, t, acc);
                s_finish(p, s_for(p, b, NB, s_for(p, j, NJ, s_set1(p, o, s_ix(j), v))));
                troupe_cgen_result_t *res = s_cuda(p);
                cr_assert_eq(res->nkernels, 1, "%s", res->source);
                const troupe_cgen_kernel_t *k = &res->kernels[0];
                cr_expect(k->fixed_block && !k->reassociates && k->block[0] == 256 &&
                              k->grid[0] == NJ && k->extent[0] == NB,
                          "%s", res->source);
                troupe_cgen_result_destroy(&res);
                size_t es = troupe_prec_size_bytes(prec);
                char *xv = malloc(es * NB * NJ), ov[8 * NJ];
                for (int i = 0; i < NB * NJ; i++) {
                    uint32_t rnd = s_rnd32();
                    double d = s_maxmin_value(i % NJ, rnd);
                    if (prec == TROUPE_PREC_SINGLE) {
                        float f = (float)d;
                        memcpy(xv + (size_t)i * es, &f, es);
                    } else if (prec == TROUPE_PREC_DOUBLE) {
                        memcpy(xv + (size_t)i * es, &d, es);
                    } else { /* int32: sums wrap past INT32_MAX, max/min ties */
                        int32_t n = op == TROUPE_BINOP_ADD ? (int32_t)(rnd | 0x40000000u)
                                                           : (int32_t)(rnd % 9) - 4;
                        memcpy(xv + (size_t)i * es, &n, es);
                    }
                }
                for (int i = 0; i < NJ; i++) {
                    if (prec == TROUPE_PREC_SINGLE) {
                        float f = (float)init[i];
                        memcpy(ov + (size_t)i * es, &f, es);
                    } else if (prec == TROUPE_PREC_DOUBLE) {
                        memcpy(ov + (size_t)i * es, &init[i], es);
                    } else {
                        int32_t n = i - 3;
                        memcpy(ov + (size_t)i * es, &n, es);
                    }
                }
                s_run_t r = {0};
                s_bind(&r, x, xv);
                s_bind(&r, o, ov);
                s_run(p, &r);
                s_nvrtc_check(p);
                nruns++;
                free(xv);
                troupe_ll_proc_destroy(&p);
                troupe_tnode_release(&x);
                troupe_tnode_release(&o);
            }
        }
    }
    /* uint64 sum into one output over 300 x 2 terms: one block. */
    troupe_ll_proc_t *p = s_proc("red_uint64_sum");
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_UINT64, 2, 300, 2);
    troupe_tnode_t *o = s_node("o", TROUPE_PREC_UINT64, 1, 1, 0);
    int32_t b = troupe_ll_proc_add_symbol(p, NULL), c = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *v = troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get2(p, x, s_ix(b), s_ix(c)),
                                     s_get1(p, o, troupe_idx_fixed(0)));
    s_finish(p, s_for(p, b, 300, s_for(p, c, 2, s_set1(p, o, troupe_idx_fixed(0), v))));
    troupe_cgen_result_t *res = s_cuda(p);
    cr_expect(res->nkernels == 1 && res->kernels[0].fixed_block && !res->kernels[0].reassociates,
              "%s", res->source);
    troupe_cgen_result_destroy(&res);
    uint64_t xv[600], ov = 7;
    for (int i = 0; i < 600; i++)
        xv[i] = ((uint64_t)s_rnd32() << 32 | s_rnd32()) | (1ull << 63);
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, o, &ov);
    s_run(p, &r);
    s_nvrtc_check(p);
    nruns++;
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&o);
    cr_expect_eq(s_emu_runs - runs0, nruns, "every routine ran emulated");
}

/* Stores d as element i of v in prec (single, double or int32). */
static void s_store(troupe_prec_t prec, void *v, int64_t i, double d)
{
    if (prec == TROUPE_PREC_SINGLE) {
        float f = (float)d;
        memcpy((char *)v + (size_t)i * sizeof f, &f, sizeof f);
    } else if (prec == TROUPE_PREC_DOUBLE) {
        memcpy((char *)v + (size_t)i * sizeof d, &d, sizeof d);
    } else {
        int32_t n = (int32_t)d;
        memcpy((char *)v + (size_t)i * sizeof n, &n, sizeof n);
    }
}

/* o[i] = o[i] op x[i, r] (op ADD or SUB) over nr terms into no outputs, x read along rows or
 * (column) down columns (caller destroys and releases). */
static troupe_ll_proc_t *s_build_row_sum_op(troupe_binop_t op, int64_t no, int64_t nr, bool column,
                                            troupe_tnode_t **x, troupe_tnode_t **o)
{
    const bool sub = op == TROUPE_BINOP_SUB;
    troupe_ll_proc_t *p =
        s_proc(column ? (sub ? "column_sub" : "column_sum") : (sub ? "row_sub" : "row_sum"));
    *x = column ? s_node("x", TROUPE_PREC_SINGLE, 2, nr, no)
                : s_node("x", TROUPE_PREC_SINGLE, 2, no, nr);
    *o = s_node("o", TROUPE_PREC_SINGLE, 1, no, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), r = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *v =
        troupe_sc_binop(p, op, s_get1(p, *o, s_ix(i)),
                        column ? s_get2(p, *x, s_ix(r), s_ix(i)) : s_get2(p, *x, s_ix(i), s_ix(r)));
    s_finish(p, s_for(p, i, no, s_for(p, r, nr, s_set1(p, *o, s_ix(i), v))));
    return p;
}

/* o[i] = o[i] + x[i, r] (column: x[r, i]) over nr terms into no outputs, single (caller
 * destroys and releases). */
static troupe_ll_proc_t *s_build_row_sum(int64_t no, int64_t nr, bool column, troupe_tnode_t **x,
                                         troupe_tnode_t **o)
{
    return s_build_row_sum_op(TROUPE_BINOP_ADD, no, nr, column, x, o);
}

/* Two independent reductions over nr terms into no outputs each: mx[i] = max(mx[i], x[i, r])
 * and mn[i] = min(x[i, r], mn[i]) (caller destroys and releases). */
static troupe_ll_proc_t *s_build_row_max_min(troupe_prec_t prec, int64_t no, int64_t nr,
                                             troupe_tnode_t **x, troupe_tnode_t **mx,
                                             troupe_tnode_t **mn)
{
    char name[64];
    snprintf(name, sizeof name, "row_max_min_%s", troupe_prec_name(prec));
    troupe_ll_proc_t *p = s_proc(name);
    *x = s_node("x", prec, 2, no, nr);
    *mx = s_node("mx", prec, 1, no, 0);
    *mn = s_node("mn", prec, 1, no, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), r = troupe_ll_proc_add_symbol(p, NULL),
            i2 = troupe_ll_proc_add_symbol(p, NULL), r2 = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *vmax = troupe_sc_binop(p, TROUPE_BINOP_MAX, s_get1(p, *mx, s_ix(i)),
                                        s_get2(p, *x, s_ix(i), s_ix(r)));
    troupe_sc_t *vmin = troupe_sc_binop(p, TROUPE_BINOP_MIN, s_get2(p, *x, s_ix(i2), s_ix(r2)),
                                        s_get1(p, *mn, s_ix(i2)));
    s_finish(p, troupe_ll_seq2(p, s_for(p, i, no, s_for(p, r, nr, s_set1(p, *mx, s_ix(i), vmax))),
                               s_for(p, i2, no, s_for(p, r2, nr, s_set1(p, *mn, s_ix(i2), vmin)))));
    return p;
}

/* Whether source holds the text `what` at least twice. */
static bool s_twice(const char *source, const char *what)
{
    const char *first = strstr(source, what);
    return first != NULL && strstr(first + 1, what) != NULL;
}

/* A reduction into more than 16384 outputs from at least 32 terms that lie along rows goes
 * onto warps (cgen.h's rule: one warp per output, 8 a block): a row sum over 40 terms into
 * 16387 outputs is one warp-level kernel (fixed 256-thread block, a block per 8 outputs,
 * reassociating); a row max and a row min over 100 terms are two parts of one kernel, not
 * reassociating; 31 terms, or a column sum (its threads read side by side), stay in each
 * thread, and 16384 outputs keep the block form (256 terms) or a thread each (40).
 * The emulator runs every thread as a fiber (16387 outputs: 7 s a routine), so the runs lower
 * the outputs threshold to 16 (troupe__cgen_cuda_set_reduce_max_outputs) and take 67 outputs
 * (the last group holds 3: its other warps meet the barriers idle): the sum agrees with the
 * interpreter within the bound for 41 terms and is bitwise the same under the planned and a
 * small reversed grid; the max and min (uneven ranges of 3 and 4 terms a lane) give the
 * interpreter's bits exactly in single, double and int32, signed zeros, NaN payloads
 * (all-NaN rows), infinities and ties included (s_run, s_emu_check). */
Test(cgen, cuda_warp_reductions)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    enum { NO = 16387, RS = 40, RM = 100, NO_RUN = 67 };
    int runs0 = s_emu_runs, nruns = 0;
    troupe_tnode_t *x, *o, *mx, *mn;

    /* 1. The plans at the default threshold. */
    troupe_ll_proc_t *p = s_build_row_sum(NO, RS, false, &x, &o);
    troupe_cgen_result_t *res = s_cuda(p);
    cr_assert_eq(res->nkernels, 1, "%s", res->source);
    const troupe_cgen_kernel_t *k = &res->kernels[0];
    cr_expect(k->fixed_block && k->reassociates && !k->one_thread, "%s", res->source);
    cr_expect(k->block[0] == 256 && k->block[1] == 1 && k->grid[0] == (NO + 7) / 8 &&
                  k->grid[1] == 1,
              "block %ux%u grid %ux%u", k->block[0], k->block[1], k->grid[0], k->grid[1]);
    cr_expect(k->extent[0] == RS && k->extent[1] == NO);
    cr_expect_not_null(strstr(res->source, "Warp-level reduction over 40 terms"), "%s",
                       res->source);
    cr_expect_not_null(strstr(res->source, "t_r += 32)"), "%s", res->source);
    cr_expect_null(strstr(res->source, "__shfl"));
    troupe_cgen_result_destroy(&res);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&o);

    /* o = o - x[i, r] (as softmax's gradient sums its rows): the same plans, each term
     * subtracted (a warp, then past the outputs' threshold a block) */
    for (int form = 0; form < 2; form++) {
        p = s_build_row_sum_op(TROUPE_BINOP_SUB, form == 0 ? NO : 16384, form == 0 ? RS : 256,
                               false, &x, &o);
        res = s_cuda(p);
        cr_assert_eq(res->nkernels, 1, "%s", res->source);
        k = &res->kernels[0];
        cr_expect(k->fixed_block && k->reassociates &&
                      strstr(res->source, form == 0 ? "Warp-level" : "Block-level") != NULL &&
                      strstr(res->source, "red_acc = red_acc - red_x;") != NULL,
                  "%s", res->source);
        troupe_cgen_result_destroy(&res);
        s_nvrtc_check(p);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&x);
        troupe_tnode_release(&o);
    }

    p = s_build_row_max_min(TROUPE_PREC_SINGLE, NO, RM, &x, &mx, &mn);
    res = s_cuda(p);
    cr_assert_eq(res->nkernels, 1, "%s", res->source);
    k = &res->kernels[0];
    cr_expect(k->fixed_block && !k->reassociates && k->block[0] == 256 &&
                  k->grid[0] == 2 * ((NO + 7) / 8) && k->extent[0] == 2 * ((NO + 7) / 8),
              "%s", res->source);
    cr_expect(s_twice(res->source, "Warp-level reduction over 100 terms"), "%s", res->source);
    cr_expect_not_null(strstr(res->source, "(int64_t)red_l * 100LL / 32"), "%s", res->source);
    troupe_cgen_result_destroy(&res);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&mx);
    troupe_tnode_release(&mn);

    /* outputs, terms, column */
    const int64_t others[4][3] = {{NO, 31, 0}, {16384, 256, 0}, {16384, RS, 0}, {NO, RS, 1}};
    for (int c = 0; c < 4; c++) {
        p = s_build_row_sum(others[c][0], others[c][1], others[c][2] != 0, &x, &o);
        res = s_cuda(p);
        cr_assert_eq(res->nkernels, 1, "%s", res->source);
        k = &res->kernels[0];
        bool block_form = c == 1;
        cr_expect(k->fixed_block == block_form && k->reassociates == block_form &&
                      strstr(res->source, "Warp-level") == NULL &&
                      (strstr(res->source, "Block-level") != NULL) == block_form,
                  "%lld outputs, %lld terms, column %d:\n%s", (long long)others[c][0],
                  (long long)others[c][1], (int)others[c][2], res->source);
        troupe_cgen_result_destroy(&res);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&x);
        troupe_tnode_release(&o);
    }

    /* 2. The runs, past a threshold of 16 outputs: sums, then subtractions. */
    troupe__cgen_cuda_set_reduce_max_outputs(16);
    s_run_t rr = {0};
    for (int sub = 0; sub < 2; sub++) {
        p = s_build_row_sum_op(sub ? TROUPE_BINOP_SUB : TROUPE_BINOP_ADD, NO_RUN, RS, false, &x,
                               &o);
        res = s_cuda(p);
        cr_expect(res->nkernels == 1 && res->kernels[0].grid[0] == (NO_RUN + 7) / 8 &&
                      strstr(res->source, "Warp-level") != NULL,
                  "%s", res->source);
        troupe_cgen_result_destroy(&res);
        float *xv = malloc(sizeof(float) * NO_RUN * RS), ov[NO_RUN];
        s_fill(xv, (size_t)NO_RUN * RS);
        double worst = 0; /* the largest |o[i]| + sum |x[i, r]| */
        for (int n = 0; n < NO_RUN; n++) {
            ov[n] = s_rndf(-2, 2);
            double abs_sum = fabs(ov[n]);
            for (int q = 0; q < RS; q++) {
                xv[n * RS + q] -= 1.25f; /* mixed signs */
                abs_sum += fabs(xv[n * RS + q]);
            }
            worst = abs_sum > worst ? abs_sum : worst;
        }
        rr = (s_run_t){0};
        s_bind(&rr, x, xv);
        s_bind(&rr, o, ov);
        s_run_reduction(&p, &rr, s_red_bound(RS + 1, 0x1p-24, worst));
        nruns++;
        free(xv);
        troupe_tnode_release(&x);
        troupe_tnode_release(&o);
    }

    /* Row i's terms are of s_maxmin_value's category i % 6 (int32: ties of -4 .. 4). */
    const troupe_prec_t precs[] = {TROUPE_PREC_SINGLE, TROUPE_PREC_DOUBLE, TROUPE_PREC_INT32};
    const double init[7] = {0.5, -0.0, nan("0x77"), -nan("0x1"), 0.0, -0.0, -INFINITY};
    for (size_t pi = 0; pi < 3; pi++) {
        const troupe_prec_t prec = precs[pi];
        const bool is_int = prec == TROUPE_PREC_INT32;
        p = s_build_row_max_min(prec, NO_RUN, RM, &x, &mx, &mn);
        res = s_cuda(p);
        cr_expect(res->nkernels == 1 && !res->kernels[0].reassociates &&
                      s_twice(res->source, "Warp-level reduction over 100 terms"),
                  "%s", res->source);
        troupe_cgen_result_destroy(&res);
        size_t es = troupe_prec_size_bytes(prec);
        void *xv2 = malloc(es * NO_RUN * RM), *mxv = malloc(es * NO_RUN),
             *mnv = malloc(es * NO_RUN);
        for (int n = 0; n < NO_RUN; n++) {
            for (int q = 0; q < RM; q++) {
                uint32_t rnd = s_rnd32();
                s_store(prec, xv2, (int64_t)n * RM + q,
                        is_int ? (double)(int)(rnd % 9) - 4.0 : s_maxmin_value(n % 6, rnd));
            }
            s_store(prec, mxv, n, is_int ? n % 7 - 3 : init[n % 7]);
            s_store(prec, mnv, n, is_int ? 3 - n % 7 : init[(n + 3) % 7]);
        }
        rr = (s_run_t){0};
        s_bind(&rr, x, xv2);
        s_bind(&rr, mx, mxv);
        s_bind(&rr, mn, mnv);
        s_run(p, &rr);
        s_nvrtc_check(p);
        nruns++;
        free(xv2);
        free(mxv);
        free(mnv);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&x);
        troupe_tnode_release(&mx);
        troupe_tnode_release(&mn);
    }
    troupe__cgen_cuda_set_reduce_max_outputs(0);
    cr_expect_eq(s_emu_runs - runs0, nruns, "every routine ran emulated");
}

/* ---- the emulator itself (cuda_emu.h): barriers and shared memory ---------------------------- */

/* A hand-written unit of one kernel taking `float *x`, for the emulator alone. */
static void s_emu_unit(const char *name, const char *kernel_name, const char *source,
                       troupe_cgen_result_t *r, troupe_cgen_param_t *param,
                       troupe_cgen_kernel_t *kernel, uint32_t block)
{
    memset(r, 0, sizeof *r);
    memset(param, 0, sizeof *param);
    memset(kernel, 0, sizeof *kernel);
    param->kind = TROUPE_CGEN_PARAM_NODE_PTR;
    param->decl = (char *)"float *x";
    param->ident = (char *)"x";
    kernel->name = (char *)kernel_name;
    kernel->grid[0] = 3;
    kernel->grid[1] = 1;
    kernel->block[0] = block;
    kernel->block[1] = 1;
    kernel->fixed_block = true;
    static size_t arg0 = 0; /* the kernel takes the one parameter */
    kernel->args = &arg0;
    kernel->nargs = 1;
    r->dialect = TROUPE_CGEN_CUDA;
    r->source = (char *)source;
    r->source_len = strlen(source);
    r->name = (char *)name;
    r->params = param;
    r->nparams = 1;
    r->kernels = kernel;
    r->nkernels = 1;
}

/* Each thread of a 64-thread block stores its element into shared memory and, after the
 * barrier, reads both neighbours' (mod 64): run one thread after the other without a barrier,
 * a thread would read a neighbour's slot before that neighbour wrote it, in either order. A
 * tree sum over the block (log2(64) barriers) checks the barrier in a loop. Both under the
 * planned grid and blocks/threads reversed. */
Test(cuda_emu, barrier_orders_shared_memory)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    static const char src[] =
        "extern \"C\" __global__ void rot_k0(float *x)\n"
        "{\n"
        "    __shared__ float sh[64];\n"
        "    __shared__ float tree[64];\n"
        "    unsigned t = threadIdx.x, base = (blockIdx.y * gridDim.x + blockIdx.x) * 64u;\n"
        "    sh[t] = x[base + t];\n"
        "    tree[t] = x[base + t];\n"
        "    __syncthreads();\n"
        "    for (unsigned s = 32; s > 0; s >>= 1) {\n"
        "        if (t < s) tree[t] = tree[t] + tree[t + s];\n"
        "        __syncthreads();\n"
        "    }\n"
        "    x[base + t] = sh[(t + 1u) % 64u] - sh[(t + 63u) % 64u] + 1000.0f * tree[0];\n"
        "}\n";
    troupe_cgen_result_t r;
    troupe_cgen_param_t param;
    troupe_cgen_kernel_t kernel;
    s_emu_unit("rot", "rot_k0", src, &r, &param, &kernel, 64);
    cr_assert(troupe_emu_kernel_syncs(&r, 0));
    troupe_emu_t e;
    troupe_emu_open(&r, &e);
    for (int shape = 0; shape < 2; shape++) {
        /* The planned grid covers 3 blocks of 64, the small one (2x2 blocks) all 4. */
        float x[4 * 64], want[4 * 64];
        for (int i = 0; i < 4 * 64; i++)
            x[i] = (float)(i % 64) + (float)(i / 64) * 0.5f;
        for (int b = 0; b < 4; b++) {
            float sum = 0, tree[64];
            for (int t = 0; t < 64; t++)
                tree[t] = x[b * 64 + t];
            for (int s = 32; s > 0; s >>= 1)
                for (int t = 0; t < s; t++)
                    tree[t] = tree[t] + tree[t + s];
            sum = tree[0];
            for (int t = 0; t < 64; t++)
                want[b * 64 + t] =
                    x[b * 64 + (t + 1) % 64] - x[b * 64 + (t + 63) % 64] + 1000.0f * sum;
        }
        void *ptr = x, *args[1] = {&ptr};
        troupe_emu_kernel(&e, 0, args, (troupe_emu_shape_t)shape);
        int nblocks = shape == TROUPE_EMU_PLANNED ? 3 : 4;
        for (int i = 0; i < nblocks * 64; i++)
            cr_assert_eq(x[i], want[i], "%s: x[%d] = %g, want %g",
                         shape ? "small grid, reverse" : "planned", i, x[i], want[i]);
    }
    troupe_emu_close(&e);
}

/* A barrier that only half of a block reaches (the others end) is reported, not run through. */
Test(cuda_emu, divergent_barrier_is_reported)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    static const char src[] = "extern \"C\" __global__ void half_k0(float *x)\n"
                              "{\n"
                              "    if (threadIdx.x < 16) { __syncthreads(); x[threadIdx.x] = 1; }\n"
                              "}\n";
    troupe_cgen_result_t r;
    troupe_cgen_param_t param;
    troupe_cgen_kernel_t kernel;
    s_emu_unit("half", "half_k0", src, &r, &param, &kernel, 32);
    troupe_emu_t e;
    troupe_emu_open(&r, &e);
    float x[32] = {0};
    void *ptr = x, *args[1] = {&ptr};
    cr_expect_eq(e.fns[0](args, 1, 1, 32, 1, 0), 1);
    troupe_emu_close(&e);
}

/* One product's case: C (m x n, rows padded by `pad` when it accumulates) = op(A) op(B)
 * (+ C), A stored k-major when ta, B stored j-major when tb, each with `pad` extra columns
 * (leading dimensions beyond the extent), as fma(a, b, c) or c + a*b. C in prec, A in pa and
 * B in pb (VOID: prec). All in single or all in double: a GEMM step (the zeroing fused);
 * otherwise compiler/gemm.h refuses it for its precisions and it is one tiled kernel (after
 * the zeroing's own kernel). */
typedef struct s_gemm_case {
    troupe_prec_t prec;
    int64_t m, n, k;
    bool ta, tb, zero, fma;
    int64_t pad;
    troupe_prec_t pa, pb;
} s_gemm_case_t;

/* Mirrors troupe__cgen_cuda_set_gemm_few_tiles for s_gemm_case_run's check of the tile. */
static int64_t s_few_tiles = 128;

static void s_set_few_tiles(int64_t tiles)
{
    troupe__cgen_cuda_set_gemm_few_tiles(tiles);
    s_few_tiles = tiles < 0 ? 128 : tiles;
}

static void s_gemm_case_run(const s_gemm_case_t *gc, int index)
{
    char name[32];
    snprintf(name, sizeof name, "gemm_case%d", index);
    troupe_ll_proc_t *p = s_proc(name);
    int64_t pc = gc->zero ? 0 : gc->pad;
    troupe_prec_t pa = gc->pa != TROUPE_PREC_VOID ? gc->pa : gc->prec,
                  pb = gc->pb != TROUPE_PREC_VOID ? gc->pb : gc->prec;
    bool step = pa == gc->prec && pb == gc->prec &&
                (gc->prec == TROUPE_PREC_SINGLE || gc->prec == TROUPE_PREC_DOUBLE);
    troupe_tnode_t *a = gc->ta ? s_node("a", pa, 2, gc->k, gc->m + gc->pad)
                               : s_node("a", pa, 2, gc->m, gc->k + gc->pad);
    troupe_tnode_t *bm = gc->tb ? s_node("b", pb, 2, gc->n, gc->k + gc->pad)
                                : s_node("b", pb, 2, gc->k, gc->n + gc->pad);
    troupe_tnode_t *c = s_node("c", gc->prec, 2, gc->m, gc->n + pc);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), k = troupe_ll_proc_add_symbol(p, NULL),
            j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_sc_t *ga = gc->ta ? s_get2(p, a, s_ix(k), s_ix(i)) : s_get2(p, a, s_ix(i), s_ix(k));
    troupe_sc_t *gb = gc->tb ? s_get2(p, bm, s_ix(j), s_ix(k)) : s_get2(p, bm, s_ix(k), s_ix(j));
    troupe_sc_t *gcv = s_get2(p, c, s_ix(i), s_ix(j));
    troupe_sc_t *v = gc->fma ? troupe_sc_ternop(p, TROUPE_TERNOP_FMA, ga, gb, gcv)
                             : troupe_sc_binop(p, TROUPE_BINOP_ADD, gcv,
                                               troupe_sc_binop(p, TROUPE_BINOP_MUL, ga, gb));
    troupe_ll_t *nest = s_for(
        p, i, gc->m, s_for(p, k, gc->k, s_for(p, j, gc->n, s_set2(p, c, s_ix(i), s_ix(j), v))));
    s_finish(p, gc->zero ? troupe_ll_seq2(p, troupe_ll_zero_out(p, c), nest) : nest);
    troupe_cgen_result_t *res = s_cuda(p);
    size_t nsteps = step || !gc->zero ? 1 : 2; /* the zeroing: a kernel of its own */
    cr_assert_eq(res->nsteps, nsteps, "case %d:\n%s", index, res->source);
    const troupe_cgen_step_t *st = &res->steps[nsteps - 1];
    if (step) {
        cr_assert_eq(st->kind, TROUPE_CGEN_STEP_GEMM, "case %d", index);
        cr_expect(st->gemm.m == gc->m && st->gemm.n == gc->n && st->gemm.k == gc->k, "case %d",
                  index);
        cr_expect(st->gemm.a.trans == gc->ta && st->gemm.b.trans == gc->tb, "case %d", index);
        cr_expect_eq(st->gemm.beta_zero, gc->zero, "case %d", index);
    } else {
        cr_assert_eq(st->kind, TROUPE_CGEN_STEP_KERNEL, "case %d", index);
        cr_expect_not_null(strstr(res->source, "Tiled product, no GEMM step"), "case %d:\n%s",
                           index, res->source);
    }
    cr_expect_eq(st->nkernels, 1, "case %d", index);
    const troupe_cgen_kernel_t *kn = &res->kernels[st->first_kernel];
    cr_expect(kn->fixed_block && !kn->reassociates && kn->block[0] == 256, "case %d", index);
    cr_expect_not_null(strstr(res->source, "__syncthreads();"));
    bool big = troupe_prec_compute(gc->prec) == TROUPE_PREC_SINGLE &&
               ((gc->m + 127) / 128) * ((gc->n + 127) / 128) >= s_few_tiles;
    cr_expect_not_null(strstr(res->source, big ? "Tiles of 128x128" : "Tiles of 64x64"),
                       "case %d: %s tiles expected", index, big ? "128x128" : "64x64");
    troupe_cgen_result_destroy(&res);
    void *av = s_buffer(a), *bv = s_buffer(bm), *cv = s_buffer(c);
    float range = gc->prec == TROUPE_PREC_FP8 ? 0.25f : 1.0f; /* fp8 sums stay finite */
    s_fill_float(a, av, -range, range);
    s_fill_float(bm, bv, -range, range);
    s_fill_float(c, cv, -range, range);
    s_run_t r = {0};
    s_bind(&r, a, av);
    s_bind(&r, bm, bv);
    s_bind(&r, c, cv);
    s_run(p, &r); /* bit for bit: C, the interpreter, both emulated grids; the description */
    s_nvrtc_check(p);
    free(av);
    free(bv);
    free(cv);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&a);
    troupe_tnode_release(&bm);
    troupe_tnode_release(&c);
}

/* GEMM steps' fallback is one kernel of shared-memory tiles (128x128 single, 64x64 double and
 * single with fewer than 128 tiles of 128x128) that keeps every element's k order: bit for bit
 * the interpreter's and the C dialect's, under the planned grid and a small reversed one, on
 * shapes that are not multiples of the tile (m, n, k edges, m = 1), with transposed operands,
 * leading dimensions beyond the extents, fma and c + a*b, accumulating (beta = 1) and fused
 * zeroing (beta = 0), single and double; the single cases once with each tile. */
Test(cgen, cuda_gemm_tiles)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    static const s_gemm_case_t cases[] = {
        {TROUPE_PREC_SINGLE, 130, 129, 17, false, false, true, false, 0, 0, 0},
        {TROUPE_PREC_SINGLE, 70, 200, 33, true, false, true, true, 0, 0, 0},
        {TROUPE_PREC_SINGLE, 64, 64, 64, false, true, false, false, 3, 0, 0},
        {TROUPE_PREC_SINGLE, 33, 260, 9, true, true, false, true, 5, 0, 0},
        {TROUPE_PREC_SINGLE, 1, 300, 40, false, false, true, false, 1, 0, 0},
        {TROUPE_PREC_DOUBLE, 65, 70, 31, true, false, false, true, 2, 0, 0},
        {TROUPE_PREC_DOUBLE, 100, 17, 50, false, true, true, false, 0, 0, 0},
    };
    for (int few = 0; few <= 1; few++) { /* these shapes are few tiles: 64x64 by default */
        s_set_few_tiles(few ? -1 : 0);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            if (few || cases[c].prec == TROUPE_PREC_SINGLE)
                s_gemm_case_run(&cases[c], (int)c + (few ? 0 : 50));
    }
    s_set_few_tiles(-1);
}

/* Products compiler/gemm.h refuses for their precisions alone (small floats, mixed precisions)
 * are one kernel of the same tiles, loading each operand converted as the nest's GETs convert
 * it and rounding a small-float output at every k step as the nest's stores do: bit for bit
 * the interpreter's and the C dialect's under both emulated grids, on edge shapes, transposed
 * operands, padded leading dimensions, fma and c + a*b, beta 1 and a zeroing before (beta 0);
 * NVRTC compiles each. */
Test(cgen, cuda_refused_gemm_tiles)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    const troupe_prec_t H = TROUPE_PREC_HALF, BF = TROUPE_PREC_BFLOAT16, F8 = TROUPE_PREC_FP8,
                        S = TROUPE_PREC_SINGLE, D = TROUPE_PREC_DOUBLE;
    const s_gemm_case_t cases[] = {
        {H, 130, 129, 17, false, false, true, true, 0, H, H},   /* half x half -> half */
        {H, 64, 70, 40, true, true, false, false, 3, H, H},     /* transposed, beta 1, c + a*b */
        {S, 70, 131, 33, true, false, true, true, 0, BF, BF},   /* bf16 x bf16 into single */
        {S, 129, 33, 20, false, true, false, false, 2, BF, BF}, /* beta 1, padded */
        {BF, 40, 150, 12, false, false, false, true, 1, BF, BF},
        {F8, 33, 140, 9, false, true, true, true, 0, F8, F8},   /* fp8 (e5m2) */
        {S, 1, 300, 40, false, false, true, false, 0, H, H},    /* half into single, m = 1 */
        {S, 50, 60, 25, true, false, false, true, 1, H, S},     /* mixed factors */
        {D, 65, 70, 31, false, false, true, true, 0, H, BF},    /* into double: 64x64 tiles */
        {H, 40, 40, 30, false, false, false, true, 0, S, S},    /* single factors, half output */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        s_gemm_case_run(&cases[c], (int)(100 + c));
}

/* ---- NVRTC ------------------------------------------------------------------------------ */

Test(nvrtc, compiles_generated_kernels)
{
#if TROUPE_HAVE_CUDA
    int major = 0, minor = 0;
    cr_assert_eq(troupe_nvrtc_version(&major, &minor), TROUPE_OK);
    cr_expect_geq(major, 11);
    s_mm_t m;
    s_build_matmul(&m, "matmul_cuda", TROUPE_PREC_SINGLE);
    s_nvrtc_check(m.p);
    s_free_matmul(&m);
    troupe_tnode_t *x, *b, *y, *e, *l, *t;
    troupe_ll_proc_t *p = s_build_bias_relu(&x, &b, &y);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&b);
    troupe_tnode_release(&y);
    p = s_build_unary3(&x, &e, &l, &t);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&e);
    troupe_tnode_release(&l);
    troupe_tnode_release(&t);
    const troupe_prec_t small[] = {TROUPE_PREC_HALF, TROUPE_PREC_BFLOAT16, TROUPE_PREC_FP8};
    for (int k = 0; k < 3; k++) {
        troupe_tnode_t *in, *out;
        p = s_build_convert(TROUPE_PREC_DOUBLE, small[k], 8, &in, &out);
        s_nvrtc_check(p);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&in);
        troupe_tnode_release(&out);
    }
#else
    cr_skip_test("built without the CUDA toolkit");
#endif
}

Test(nvrtc, broken_source_reports_device_error)
{
#if TROUPE_HAVE_CUDA
    char *ptx = (char *)"untouched", *log = NULL;
    troupe_status_t st =
        troupe_nvrtc_compile("extern \"C\" __global__ void k(float *x) { x[0] = undefined_thing; }",
                             "broken.cu", NULL, &ptx, &log);
    cr_assert_eq(st, TROUPE_DEVICE_ERROR);
    cr_expect_null(ptx);
    cr_assert_not_null(log);
    cr_expect_not_null(strstr(log, "undefined_thing"), "%s", log);
    cr_expect_not_null(strstr(troupe_last_error(), "NVRTC_ERROR_COMPILATION"), "%s",
                       troupe_last_error());
    cr_expect_not_null(strstr(troupe_last_error(), "broken.cu"), "%s", troupe_last_error());
    troupe_free(log);
    cr_expect_eq(troupe_nvrtc_compile(NULL, NULL, NULL, &ptx, NULL), TROUPE_INVALID_ARGUMENT);
    cr_expect_eq(troupe_nvrtc_compile("", NULL, "compute 80; rm", &ptx, NULL),
                 TROUPE_INVALID_ARGUMENT);
    /* An architecture NVRTC does not know is a device error with its option message. */
    cr_expect_eq(troupe_nvrtc_compile("", NULL, "compute_1", &ptx, &log), TROUPE_DEVICE_ERROR);
    troupe_free(log);
#else
    cr_skip_test("built without the CUDA toolkit");
#endif
}

Test(nvrtc, include_path_resolves_cuda_headers)
{
#if TROUPE_HAVE_CUDA
    char *ptx = NULL, *log = NULL;
    const char *src = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cuda_fp8.h>\n"
                      "extern \"C\" __global__ void conv(__half *h, __nv_bfloat16 *b, "
                      "__nv_fp8_e5m2 *e) {\n"
                      "  h[0] = __float2half_rn(1.5f); b[0] = __float2bfloat16_rn(2.5f);\n"
                      "  e[0] = __nv_fp8_e5m2(1.5f);\n}\n";
    troupe_status_t st = troupe_nvrtc_compile(src, "headers.cu", "compute_80", &ptx, &log);
    cr_assert_eq(st, TROUPE_OK, "%s\n%s", troupe_last_error(), log ? log : "");
    cr_expect_not_null(strstr(ptx, ".entry conv("));
    troupe_free(ptx);
    troupe_free(log);
#else
    cr_skip_test("built without the CUDA toolkit");
#endif
}

/* ---- launches shared by independent statements, Local arrays in segments --------------------- */

/* Independent statements share one kernel (a 2-D map, a zeroing, a block-level max reduction, a
 * sequential statement and a segment whose Local array one block holds in shared memory, read
 * at another element after a barrier); a statement reading three of them opens the next launch;
 * a segment whose Local array passes the shared memory runs on one thread. Each launch layout
 * is checked bit for bit against C and the interpreter (s_run: planned grid, small reversed
 * grid), and the count against the same routine with sharing off. The first launch's five parts
 * find theirs by a table of their ranges (s_put_horizontal). */
Test(cgen, cuda_shared_launches_and_segments)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    int runs0 = s_emu_runs;
    troupe_ll_proc_t *p = s_proc("shared_launches");
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 2, 300, 5);
    troupe_tnode_t *x2 = s_node("x2", TROUPE_PREC_SINGLE, 2, 300, 5);
    troupe_tnode_t *c = s_node("c", TROUPE_PREC_SINGLE, 1, 7, 0);
    troupe_tnode_t *mx = s_node("mx", TROUPE_PREC_SINGLE, 1, 5, 0);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 1, 40, 0);
    troupe_tnode_t *loc = s_node("loc", TROUPE_PREC_SINGLE, 1, 300, 0);
    troupe_tnode_t *m = s_node("m", TROUPE_PREC_SINGLE, 1, 300, 0);
    troupe_tnode_t *u = s_node("u", TROUPE_PREC_SINGLE, 1, 300, 0);
    troupe_tnode_t *big = s_node("big", TROUPE_PREC_SINGLE, 2, 300, 41); /* 49200 bytes */
    troupe_tnode_t *w = s_node("w", TROUPE_PREC_SINGLE, 1, 300, 0);
    s_set_mode(loc, TROUPE_MM_LOCAL);
    s_set_mode(big, TROUPE_MM_LOCAL);
    int32_t sy[16];
    for (int k = 0; k < 16; k++)
        sy[k] = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *it[10];
    /* 1. x2 = a * a (2-D map) */
    it[0] = s_for(p, sy[0], 300,
                  s_for(p, sy[1], 5,
                        s_set2(p, x2, s_ix(sy[0]), s_ix(sy[1]),
                               troupe_sc_binop(p, TROUPE_BINOP_MUL,
                                               s_get2(p, a, s_ix(sy[0]), s_ix(sy[1])),
                                               s_get2(p, a, s_ix(sy[0]), s_ix(sy[1]))))));
    /* 2. zero c */
    it[1] = troupe_ll_zero_out(p, c);
    /* 3. mx[j] = max(mx[j], a[i, j]) over 300 i: a block-level reduction, bit for bit */
    it[2] = s_for(p, sy[2], 300,
                  s_for(p, sy[3], 5,
                        s_set1(p, mx, s_ix(sy[3]),
                               troupe_sc_binop(p, TROUPE_BINOP_MAX, s_get1(p, mx, s_ix(sy[3])),
                                               s_get2(p, a, s_ix(sy[2]), s_ix(sy[3]))))));
    /* 4. y[i] = y[i] + y[i + 1]: sequential */
    it[3] = troupe_ll_for(p, sy[4], 0, 38,
                          s_set1(p, y, s_ix(sy[4]),
                                 troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, y, s_ix(sy[4])),
                                                 s_get1(p, y, s_aff(1, sy[4], 1)))),
                          false);
    /* 5, 6. loc[i] = a[i, 0] + a[i, 1]; m[i] = loc[i] * loc[299 - i] (Local: one block) */
    it[4] = s_for(p, sy[5], 300,
                  s_set1(p, loc, s_ix(sy[5]),
                         troupe_sc_binop(p, TROUPE_BINOP_ADD,
                                         s_get2(p, a, s_ix(sy[5]), troupe_idx_fixed(0)),
                                         s_get2(p, a, s_ix(sy[5]), troupe_idx_fixed(1)))));
    it[5] = s_for(p, sy[6], 300,
                  s_set1(p, m, s_ix(sy[6]),
                         troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, loc, s_ix(sy[6])),
                                         s_get1(p, loc, s_aff(-1, sy[6], 299)))));
    /* 7. u[i] = x2[i, 0] + mx[2] + c[0]: after 1, 2 and 3 */
    it[6] = s_for(p, sy[7], 300,
                  s_set1(p, u, s_ix(sy[7]),
                         troupe_sc_binop(
                             p, TROUPE_BINOP_ADD,
                             troupe_sc_binop(p, TROUPE_BINOP_ADD,
                                             s_get2(p, x2, s_ix(sy[7]), troupe_idx_fixed(0)),
                                             s_get1(p, mx, troupe_idx_fixed(2))),
                             s_get1(p, c, troupe_idx_fixed(0)))));
    /* 8, 9. big[i, j] = u[i] * 0.5; w[i] = big[i, 40] + big[299 - i, 0] (Local past the shared
     * memory: one thread) */
    it[7] = s_for(p, sy[8], 300,
                  s_for(p, sy[9], 41,
                        s_set2(p, big, s_ix(sy[8]), s_ix(sy[9]),
                               troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, u, s_ix(sy[8])),
                                               troupe_sc_constant(p, 0.5)))));
    it[8] = s_for(p, sy[10], 300,
                  s_set1(p, w, s_ix(sy[10]),
                         troupe_sc_binop(p, TROUPE_BINOP_ADD,
                                         s_get2(p, big, s_ix(sy[10]), troupe_idx_fixed(40)),
                                         s_get2(p, big, s_aff(-1, sy[10], 299),
                                                troupe_idx_fixed(0)))));
    s_finish(p, troupe_ll_seq(p, 9, it));

    troupe__cgen_cuda_set_sharing(false);
    troupe_cgen_result_t *res = s_cuda(p);
    troupe__cgen_cuda_set_sharing(true);
    cr_expect_eq(res->nsteps, 7, "unshared: %zu launches", res->nsteps);
    troupe_cgen_result_destroy(&res);
    res = s_cuda(p);
    cr_assert_eq(res->nsteps, 3, "%zu launches:\n%s", res->nsteps, res->source);
    const troupe_cgen_kernel_t *k = res->kernels;
    cr_expect(k[0].fixed_block && !k[0].one_thread && !k[0].reassociates);
    cr_expect(k[0].block[0] == 256 && k[0].block[1] == 1);
    /* 300x5 map: 6 blocks; zero: 1; reduction: 5 outputs; sequential: 1; segment: 1 */
    cr_expect_eq(k[0].extent[0], 14);
    cr_expect_eq(k[0].grid[0], 14);
    /* five parts: a virtual block finds its part in a table of the ranges' ends, then a switch */
    cr_expect_not_null(strstr(res->source, "_k0_hz_end[5] = {6LL, 7LL, 12LL, 13LL, 14LL};"), "%s",
                       res->source);
    cr_expect(!k[1].fixed_block && !k[1].one_thread && k[1].extent[0] == 300);
    cr_expect(k[2].one_thread && k[2].block[0] == 1);
    cr_expect_not_null(strstr(res->source, "__shared__ float n"), "%s", res->source);
    cr_expect_null(strstr(res->source, "__shared__ float n10_big"));
    troupe_cgen_result_destroy(&res);

    float *av = malloc(sizeof(float) * 1500), x2v[1500], cv[7], mxv[5], yv[40], mv[300], uv[300],
          wv[300];
    s_fill(av, 1500);
    for (int i = 0; i < 1500; i++)
        av[i] -= 1.25f; /* mixed signs for the max */
    s_fill(cv, 7);
    s_fill(yv, 40);
    for (int i = 0; i < 5; i++)
        mxv[i] = -0.0f;
    memset(x2v, 0, sizeof x2v);
    memset(mv, 0, sizeof mv);
    memset(uv, 0, sizeof uv);
    memset(wv, 0, sizeof wv);
    s_run_t r = {0};
    s_bind(&r, a, av);
    s_bind(&r, x2, x2v);
    s_bind(&r, c, cv);
    s_bind(&r, mx, mxv);
    s_bind(&r, y, yv);
    s_bind(&r, m, mv);
    s_bind(&r, u, uv);
    s_bind(&r, w, wv);
    s_run(p, &r);
    cr_expect_eq(cv[3], 0.0f);
    cr_expect_eq(mv[0], (av[0] + av[1]) * (av[299 * 5] + av[299 * 5 + 1]));
    s_nvrtc_check(p);
    cr_expect_eq(s_emu_runs, runs0 + 1);
    free(av);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_t *nodes[] = {a, x2, c, mx, y, loc, m, u, big, w};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++)
        troupe_tnode_release(&nodes[i]);
}

/* A segment's block takes the small passes beside it: the map before it (whose output the
 * segment reads at another element) and the one after it (reading the segment's output at
 * another element), all in one launch with barriers between, bit for bit C and the
 * interpreter; unshared, three launches. */
Test(cgen, cuda_segment_takes_small_passes)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    troupe_ll_proc_t *p = s_proc("segment_passes");
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 1, 300, 0);
    troupe_tnode_t *pre = s_node("pre", TROUPE_PREC_SINGLE, 1, 300, 0);
    troupe_tnode_t *loc = s_node("loc", TROUPE_PREC_SINGLE, 1, 300, 0);
    troupe_tnode_t *q = s_node("q", TROUPE_PREC_SINGLE, 1, 300, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_SINGLE, 1, 300, 0);
    s_set_mode(loc, TROUPE_MM_LOCAL);
    int32_t i[4];
    for (int k = 0; k < 4; k++)
        i[k] = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *it[4];
    it[0] = s_for(p, i[0], 300,
                  s_set1(p, pre, s_ix(i[0]),
                         troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, a, s_ix(i[0])),
                                         troupe_sc_constant(p, 3.0))));
    it[1] = s_for(p, i[1], 300,
                  s_set1(p, loc, s_ix(i[1]),
                         troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, pre, s_aff(-1, i[1], 299)),
                                         troupe_sc_constant(p, 1.0))));
    it[2] = s_for(p, i[2], 300,
                  s_set1(p, q, s_ix(i[2]),
                         troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, loc, s_ix(i[2])),
                                         s_get1(p, loc, s_aff(-1, i[2], 299)))));
    it[3] = s_for(p, i[3], 300,
                  s_set1(p, out, s_ix(i[3]),
                         troupe_sc_binop(p, TROUPE_BINOP_SUB, s_get1(p, q, s_aff(-1, i[3], 299)),
                                         s_get1(p, a, s_ix(i[3])))));
    s_finish(p, troupe_ll_seq(p, 4, it));
    troupe__cgen_cuda_set_sharing(false);
    troupe_cgen_result_t *res = s_cuda(p);
    troupe__cgen_cuda_set_sharing(true);
    cr_expect_eq(res->nsteps, 3);
    troupe_cgen_result_destroy(&res);
    res = s_cuda(p);
    cr_assert_eq(res->nsteps, 1, "%s", res->source);
    cr_expect(res->kernels[0].fixed_block && res->kernels[0].grid[0] == 1);
    troupe_cgen_result_destroy(&res);
    float av[300], prev[300] = {0}, qv[300] = {0}, ov[300] = {0};
    s_fill(av, 300);
    s_run_t r = {0};
    s_bind(&r, a, av);
    s_bind(&r, pre, prev);
    s_bind(&r, q, qv);
    s_bind(&r, out, ov);
    s_run(p, &r);
    cr_expect_eq(ov[0], qv[299] - av[0]);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_t *nodes[] = {a, pre, loc, q, out};
    for (size_t k = 0; k < sizeof nodes / sizeof nodes[0]; k++)
        troupe_tnode_release(&nodes[k]);
}

/* ---- wide segments: a Local array read by a large statement ------------------------------- */

/* Builds wt = w^T (10 x 128, Local), out = 0, out[b, i] += dz[b, j] * wt[j, i] over j (B x 128,
 * the main job's da2 = dz3 x w3_t), and, when `reread`, last[b] = out[b, 0] * wt[0, 0]. */
static troupe_ll_proc_t *s_wide_proc(const char *name, int64_t B, bool reread,
                                     troupe_tnode_t **nodes)
{
    troupe_ll_proc_t *p = s_proc(name);
    troupe_tnode_t *w = s_node("w", TROUPE_PREC_SINGLE, 2, 128, 10);
    troupe_tnode_t *wt = s_node("wt", TROUPE_PREC_SINGLE, 2, 10, 128);
    troupe_tnode_t *dz = s_node("dz", TROUPE_PREC_SINGLE, 2, B, 10);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_SINGLE, 2, B, 128);
    troupe_tnode_t *last = s_node("last", TROUPE_PREC_SINGLE, 1, B, 0);
    s_set_mode(wt, TROUPE_MM_LOCAL);
    int32_t sy[6];
    for (int k = 0; k < 6; k++)
        sy[k] = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *it[5];
    it[0] = troupe_ll_zero_out(p, wt);
    it[1] = s_for(p, sy[0], 10,
                  s_for(p, sy[1], 128,
                        s_set2(p, wt, s_ix(sy[0]), s_ix(sy[1]),
                               s_get2(p, w, s_ix(sy[1]), s_ix(sy[0])))));
    it[2] = troupe_ll_zero_out(p, out);
    it[3] = s_for(
        p, sy[2], B,
        s_for(p, sy[3], 128,
              troupe_ll_for(p, sy[4], 0, 9,
                            s_set2(p, out, s_ix(sy[2]), s_ix(sy[3]),
                                   troupe_sc_ternop(p, TROUPE_TERNOP_FMA,
                                                    s_get2(p, dz, s_ix(sy[2]), s_ix(sy[4])),
                                                    s_get2(p, wt, s_ix(sy[4]), s_ix(sy[3])),
                                                    s_get2(p, out, s_ix(sy[2]), s_ix(sy[3])))),
                            false)));
    it[4] = s_for(p, sy[5], B,
                  s_set1(p, last, s_ix(sy[5]),
                         troupe_sc_binop(p, TROUPE_BINOP_MUL,
                                         s_get2(p, out, s_ix(sy[5]), troupe_idx_fixed(0)),
                                         s_get2(p, wt, troupe_idx_fixed(0), troupe_idx_fixed(0)))));
    s_finish(p, troupe_ll_seq(p, reread ? 5 : 4, it));
    nodes[0] = w;
    nodes[1] = wt;
    nodes[2] = dz;
    nodes[3] = out;
    nodes[4] = last;
    return p;
}

/* Runs s_wide_proc's routine in C, the interpreter and emulated CUDA (planned grid, small grid
 * in reverse), bit for bit (s_run). */
static void s_wide_run(troupe_ll_proc_t *p, troupe_tnode_t **nodes, int64_t B)
{
    float *wv = malloc(sizeof(float) * 1280), *dzv = malloc(sizeof(float) * (size_t)B * 10),
          *ov = calloc((size_t)B * 128, sizeof(float)), *lv = calloc((size_t)B, sizeof(float));
    cr_assert(wv && dzv && ov && lv);
    s_fill(wv, 1280);
    s_fill(dzv, (int)B * 10);
    for (int64_t i = 0; i < B * 128; i++)
        ov[i] = 7.0f; /* the zeroing must reach every element */
    s_run_t r = {0};
    s_bind(&r, nodes[0], wv);
    s_bind(&r, nodes[2], dzv);
    s_bind(&r, nodes[3], ov);
    s_bind(&r, nodes[4], lv);
    s_run(p, &r);
    float want = 0.0f;
    for (int j = 0; j < 10; j++)
        want = fmaf(dzv[(B - 1) * 10 + j], wv[127 * 10 + j], want);
    cr_expect_eq(ov[(B - 1) * 128 + 127], want, "out[B-1, 127] = %g, want %g",
                 (double)ov[(B - 1) * 128 + 127], (double)want);
    free(wv);
    free(dzv);
    free(ov);
    free(lv);
}

/* A segment whose Local array (a transposed weight) is read by a statement of B x 128
 * iterations runs on many blocks: each builds the array in its shared memory, all share the
 * product's iterations; the zeroing of the product's output moves before it (2 launches, with
 * sharing on or off). Bit for bit C and the interpreter, on the planned grid and a small one in
 * reverse. Below a block's worth of work (B = 64) it stays one block. */
Test(cgen, cuda_wide_segment_spreads_a_large_statement_over_blocks)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    troupe_tnode_t *nodes[5];
    const int64_t B = 512; /* 65536 iterations of the product: 256 blocks */
    troupe_ll_proc_t *p = s_wide_proc("wide_seg", B, false, nodes);
    for (int sharing = 0; sharing <= 1; sharing++) {
        troupe__cgen_cuda_set_sharing(sharing == 1);
        troupe_cgen_result_t *res = s_cuda(p);
        troupe__cgen_cuda_set_sharing(true);
        cr_assert_eq(res->nsteps, 2, "sharing %d: %zu launches:\n%s", sharing, res->nsteps,
                     res->source);
        const troupe_cgen_kernel_t *k = &res->kernels[res->steps[1].first_kernel];
        cr_expect(k->fixed_block && !k->one_thread && k->block[0] == 256);
        cr_expect_eq(k->grid[0], 256, "%u blocks", k->grid[0]);
        cr_expect_not_null(strstr(res->source, "A wide segment over 256 blocks"), "%s",
                           res->source);
        cr_expect_not_null(strstr(res->source, "__shared__ float n"), "%s", res->source);
        /* the product's k loop keeps out[b, i] in a register */
        cr_expect_not_null(strstr(res->source, "accumulates in a register across"), "%s",
                           res->source);
        troupe_cgen_result_destroy(&res);
    }
    s_wide_run(p, nodes, B);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    for (int k = 0; k < 5; k++)
        troupe_tnode_release(&nodes[k]);

    p = s_wide_proc("narrow_seg", 64, false, nodes); /* 8192 iterations: one block */
    troupe_cgen_result_t *res = s_cuda(p);
    cr_expect_null(strstr(res->source, "A wide segment"), "%s", res->source);
    cr_expect_eq(res->kernels[res->nkernels - 1].grid[0], 1);
    troupe_cgen_result_destroy(&res);
    s_wide_run(p, nodes, 64);
    troupe_ll_proc_destroy(&p);
    for (int k = 0; k < 5; k++)
        troupe_tnode_release(&nodes[k]);
}

/* A segment whose later statement reads what its large statement wrote (at another element)
 * stays one block: the blocks could not see each other's writes. Bit for bit as above. */
Test(cgen, cuda_segment_rereading_a_global_output_stays_one_block)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    troupe_tnode_t *nodes[5];
    troupe_ll_proc_t *p = s_wide_proc("reread_seg", 512, true, nodes);
    troupe_cgen_result_t *res = s_cuda(p);
    cr_expect_null(strstr(res->source, "A wide segment"), "%s", res->source);
    for (size_t k = 0; k < res->nkernels; k++)
        cr_expect(res->kernels[k].grid[0] == 1 || !res->kernels[k].fixed_block,
                  "kernel %zu: %u blocks", k, res->kernels[k].grid[0]);
    troupe_cgen_result_destroy(&res);
    s_wide_run(p, nodes, 512);
    troupe_ll_proc_destroy(&p);
    for (int k = 0; k < 5; k++)
        troupe_tnode_release(&nodes[k]);
}

/* A loop accumulating into one element keeps it in a register in the CUDA dialect (loaded
 * before, stored after: the same operations in the same order), and one that also reads
 * another element of the node does not: s[0] += a[k] over k; t[0] = t[0] + t[1] * a[k]; both
 * bit for bit C and the interpreter under both emulated grids. */
Test(cgen, cuda_register_accumulation_only_for_one_element)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    troupe_ll_proc_t *p = s_proc("acc_reg");
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 1, 40, 0);
    troupe_tnode_t *sv = s_node("s", TROUPE_PREC_SINGLE, 1, 1, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_SINGLE, 1, 2, 0);
    int32_t k0 = troupe_ll_proc_add_symbol(p, NULL), k1 = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *it[2];
    it[0] = troupe_ll_for(p, k0, 0, 39,
                          s_set1(p, sv, troupe_idx_fixed(0),
                                 troupe_sc_binop(p, TROUPE_BINOP_ADD,
                                                 s_get1(p, sv, troupe_idx_fixed(0)),
                                                 s_get1(p, a, s_ix(k0)))),
                          false);
    it[1] = troupe_ll_for(
        p, k1, 0, 39,
        s_set1(p, t, troupe_idx_fixed(0),
               troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, t, troupe_idx_fixed(0)),
                               troupe_sc_binop(p, TROUPE_BINOP_MUL,
                                               s_get1(p, t, troupe_idx_fixed(1)),
                                               s_get1(p, a, s_ix(k1))))),
        false);
    s_finish(p, troupe_ll_seq(p, 2, it));
    troupe_cgen_result_t *res = s_cuda(p);
    const char *one = strstr(res->source, "accumulates in a register across");
    cr_expect_not_null(one, "%s", res->source);
    cr_expect(one == NULL || strstr(one + 1, "accumulates in a register across") == NULL,
              "only the first loop: %s", res->source);
    cr_expect_not_null(strstr(res->source, "_s[0] accumulates"), "%s", res->source);
    troupe_cgen_result_destroy(&res);
    float av[40], svv[1] = {0.25f}, tv[2] = {0.5f, 0.75f};
    s_fill(av, 40);
    s_run_t r = {0};
    s_bind(&r, a, av);
    s_bind(&r, sv, svv);
    s_bind(&r, t, tv);
    /* C: both loops are lane sums */
    r.reassoc_tol = fmax(s_lane_bound(av, 40, 1.0, svv[0]), s_lane_bound(av, 40, tv[1], tv[0]));
    s_run(p, &r);
    s_nvrtc_check(p);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&a);
    troupe_tnode_release(&sv);
    troupe_tnode_release(&t);
}

/* A segment whose Local arrays pass a block's shared memory side by side (3 x 20000 bytes) but
 * whose uses overlap at most two at a time runs as one block with the arrays packed in one pool:
 * loc3 takes loc1's elements once loc1 is dead, zeroed before its first statement (which reads
 * it: loc3 += ...), not at the start. Bit for bit C and the interpreter under both emulated
 * grids; without packing it ran on one thread. */
Test(cgen, cuda_segment_packs_local_arrays_by_their_uses)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler (c++) to run the CUDA dialect on the host");
    const int64_t n = 5000;
    troupe_ll_proc_t *p = s_proc("packed_seg");
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 1, n, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_SINGLE, 1, n, 0);
    troupe_tnode_t *l1 = s_node("loc1", TROUPE_PREC_SINGLE, 1, n, 0);
    troupe_tnode_t *l2 = s_node("loc2", TROUPE_PREC_SINGLE, 1, n, 0);
    troupe_tnode_t *l3 = s_node("loc3", TROUPE_PREC_SINGLE, 1, n, 0);
    s_set_mode(l1, TROUPE_MM_LOCAL);
    s_set_mode(l2, TROUPE_MM_LOCAL);
    s_set_mode(l3, TROUPE_MM_LOCAL);
    int32_t i[4];
    for (int k = 0; k < 4; k++)
        i[k] = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *it[4];
    it[0] = s_for(p, i[0], n,
                  s_set1(p, l1, s_ix(i[0]),
                         troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, a, s_ix(i[0])),
                                         troupe_sc_constant(p, 2.0))));
    it[1] = s_for(p, i[1], n,
                  s_set1(p, l2, s_ix(i[1]),
                         troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, l1, s_aff(-1, i[1], n - 1)),
                                         troupe_sc_constant(p, 1.0))));
    it[2] = s_for(p, i[2], n,
                  s_set1(p, l3, s_ix(i[2]),
                         troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, l3, s_ix(i[2])),
                                         s_get1(p, l2, s_aff(-1, i[2], n - 1)))));
    it[3] = s_for(p, i[3], n,
                  s_set1(p, out, s_ix(i[3]),
                         troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, l3, s_aff(-1, i[3], n - 1)),
                                         troupe_sc_constant(p, 3.0))));
    s_finish(p, troupe_ll_seq(p, 4, it));
    troupe_cgen_result_t *res = s_cuda(p);
    cr_expect_not_null(strstr(res->source, "seg_pool[10000]"), "%s", res->source);
    cr_expect_eq(res->nkernels, 1);
    cr_expect(!res->kernels[0].one_thread && res->kernels[0].fixed_block &&
                  res->kernels[0].block[0] == 256,
              "one block of 256 threads");
    troupe_cgen_result_destroy(&res);
    float *av = malloc(sizeof(float) * (size_t)n), *ov = calloc((size_t)n, sizeof(float));
    cr_assert(av && ov);
    s_fill(av, (size_t)n);
    s_run_t r = {0};
    s_bind(&r, a, av);
    s_bind(&r, out, ov);
    s_run(p, &r);
    cr_expect_eq(ov[0], (av[n - 1] * 2.0f + 1.0f) * 3.0f, "out[0] = %g", (double)ov[0]);
    s_nvrtc_check(p);
    free(av);
    free(ov);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_t *nodes[] = {a, out, l1, l2, l3};
    for (size_t k = 0; k < 5; k++)
        troupe_tnode_release(&nodes[k]);
}

/* A segment whose Local arrays are all in use at once and pass a block's 48 KiB of static
 * shared memory (loc1, loc2 single and loc3 in `prec3`, 5000 elements each: packing cannot
 * help) runs on one thread by default; given a target whose blocks may opt into more
 * (troupe_cgen_options_t.cuda_shared_max_bytes, 96 KiB), it runs on one block of 256 threads
 * with the arrays in the launch's dynamic shared memory (troupe_cgen_kernel_t.
 * dynamic_shared_bytes): one pool when they share a precision (packed, 60000 bytes), else side
 * by side at multiples of 16 bytes (80000 with loc3 double). Bit for bit C and the interpreter
 * under both emulated grids, and NVRTC compiles it. A limit below what the arrays need leaves
 * the one thread. */
static void s_dyn_segment(troupe_prec_t prec3)
{
    const int64_t n = 5000;
    bool dbl = prec3 == TROUPE_PREC_DOUBLE;
    uint32_t need = dbl ? 80000u : 60000u;
    troupe_ll_proc_t *p = s_proc("dyn_seg");
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 1, n, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_SINGLE, 1, n, 0);
    troupe_tnode_t *l[3];
    for (int k = 0; k < 3; k++) {
        char nm[8];
        snprintf(nm, sizeof nm, "loc%d", k + 1);
        l[k] = s_node(nm, k == 2 ? prec3 : TROUPE_PREC_SINGLE, 1, n, 0);
        s_set_mode(l[k], TROUPE_MM_LOCAL);
    }
    int32_t i[4];
    for (int k = 0; k < 4; k++)
        i[k] = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *it[4];
    /* loc_k[i] = a[i] * (k + 2); out[i] = loc1[n-1-i] + loc2[n-1-i] * loc3[n-1-i] */
    for (int k = 0; k < 3; k++)
        it[k] = s_for(p, i[k], n,
                      s_set1(p, l[k], s_ix(i[k]),
                             troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, a, s_ix(i[k])),
                                             troupe_sc_constant(p, (double)(k + 2)))));
    troupe_sc_t *prod =
        troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, l[1], s_aff(-1, i[3], n - 1)),
                        s_get1(p, l[2], s_aff(-1, i[3], n - 1)));
    it[3] = s_for(p, i[3], n,
                  s_set1(p, out, s_ix(i[3]),
                         troupe_sc_binop(p, TROUPE_BINOP_ADD,
                                         s_get1(p, l[0], s_aff(-1, i[3], n - 1)), prod)));
    s_finish(p, troupe_ll_seq(p, 4, it));

    troupe_cgen_result_t *res = s_cuda(p); /* the defaults: 48 KiB */
    cr_expect_eq(res->nkernels, 1);
    cr_expect(res->kernels[0].one_thread && res->kernels[0].dynamic_shared_bytes == 0,
              "by default the segment runs on one thread");
    troupe_cgen_result_destroy(&res);

    troupe_cgen_options_t small = {.cuda_shared_max_bytes = need - 1};
    s_cuda_opts = &small;
    res = s_cuda(p);
    cr_expect(res->kernels[0].one_thread && res->kernels[0].dynamic_shared_bytes == 0,
              "a limit below %u bytes leaves it on one thread", need);
    troupe_cgen_result_destroy(&res);

    troupe_cgen_options_t big = {.cuda_shared_max_bytes = 96 * 1024};
    s_cuda_opts = &big;
    res = s_cuda(p);
    cr_expect_eq(res->nkernels, 1);
    cr_expect(!res->kernels[0].one_thread && res->kernels[0].fixed_block &&
                  res->kernels[0].block[0] == 256,
              "one block of 256 threads");
    cr_expect_eq(res->kernels[0].dynamic_shared_bytes, need);
    cr_expect_not_null(strstr(res->source, "TROUPE_DYN_SHARED(hz_dyn);"), "%s", res->source);
    cr_expect_not_null(strstr(res->source, dbl ? "= (double *)(hz_dyn + 40000);"
                                               : "seg_pool = (float *)hz_dyn;"),
                       "%s", res->source);
    troupe_cgen_result_destroy(&res);
    float *av = malloc(sizeof(float) * (size_t)n), *ov = calloc((size_t)n, sizeof(float));
    cr_assert(av && ov);
    s_fill(av, (size_t)n);
    s_run_t r = {0};
    s_bind(&r, a, av);
    s_bind(&r, out, ov);
    s_run(p, &r); /* the interpreter, C, and (with a C++ compiler) the CUDA dialect emulated */
    cr_expect_gt(ov[0], 0.0f, "out[0] = %g", (double)ov[0]);
    s_nvrtc_check(p);
    s_cuda_opts = NULL;
    free(av);
    free(ov);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_t *nodes[] = {a, out, l[0], l[1], l[2]};
    for (size_t k = 0; k < 5; k++)
        troupe_tnode_release(&nodes[k]);
}

Test(cgen, cuda_segment_past_static_shared_memory_uses_dynamic_shared_memory)
{
    s_dyn_segment(TROUPE_PREC_SINGLE);
    s_dyn_segment(TROUPE_PREC_DOUBLE);
}

/* ---- lane sums and the vectorised exp and tanh (cgen.h) ------------------------------------- */

/* A lane sum in cgen.h's documented order, as a scalar reference: lane j mod 16 takes term j
 * (form 0: lane + x, 1: lane - x, 2: fma(x, w, lane)), then the tree, then o + lane 0. */
static float s_lanes_ref_f(int form, const float *x, int n, float o)
{
    float l[TROUPE_CGEN_LANES] = {0};
    for (int j = 0; j < n; j++) {
        float *a = &l[j % TROUPE_CGEN_LANES];
        *a = form == 0 ? *a + x[j] : *a - x[j];
    }
    for (int w = TROUPE_CGEN_LANES / 2; w >= 1; w /= 2)
        for (int k = 0; k < w; k++)
            l[k] = l[k] + l[k + w];
    return o + l[0];
}

static double s_lanes_ref_fma_d(const double *x, const double *y, int n, double o)
{
    double l[TROUPE_CGEN_LANES] = {0};
    for (int j = 0; j < n; j++)
        l[j % TROUPE_CGEN_LANES] = fma(x[j], y[j], l[j % TROUPE_CGEN_LANES]);
    for (int w = TROUPE_CGEN_LANES / 2; w >= 1; w /= 2)
        for (int k = 0; k < w; k++)
            l[k] = l[k] + l[k + w];
    return o + l[0];
}

/* Sums of 37 single terms (a tail of 5), 64 subtracted single terms and an fma over 50 double
 * terms become lane sums that give, bit for bit, the scalar reference of cgen.h's order (built
 * with -O3 -march=native, so vectorised); 31 terms stay a sequential sum, bit for bit the
 * interpreter's. The unit is flagged. */
Test(cgen, lane_sums_follow_the_documented_order)
{
    troupe_ll_proc_t *p = s_proc("lanes");
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 1, 64, 0);
    troupe_tnode_t *xd = s_node("xd", TROUPE_PREC_DOUBLE, 1, 50, 0);
    troupe_tnode_t *yd = s_node("yd", TROUPE_PREC_DOUBLE, 1, 50, 0);
    troupe_tnode_t *o = s_node("o", TROUPE_PREC_SINGLE, 1, 3, 0);
    troupe_tnode_t *od = s_node("od", TROUPE_PREC_DOUBLE, 1, 1, 0);
    int32_t i[4];
    for (int k = 0; k < 4; k++)
        i[k] = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *it[4] = {
        s_for(p, i[0], 37,
              s_set1(p, o, troupe_idx_fixed(0),
                     troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, x, s_ix(i[0])),
                                     s_get1(p, o, troupe_idx_fixed(0))))),
        s_for(p, i[1], 64,
              s_set1(p, o, troupe_idx_fixed(1),
                     troupe_sc_binop(p, TROUPE_BINOP_SUB, s_get1(p, o, troupe_idx_fixed(1)),
                                     s_get1(p, x, s_ix(i[1]))))),
        s_for(p, i[2], 50,
              s_set1(p, od, troupe_idx_fixed(0),
                     troupe_sc_ternop(p, TROUPE_TERNOP_FMA, s_get1(p, xd, s_ix(i[2])),
                                      s_get1(p, yd, s_ix(i[2])),
                                      s_get1(p, od, troupe_idx_fixed(0))))),
        s_for(p, i[3], 31,
              s_set1(p, o, troupe_idx_fixed(2),
                     troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, o, troupe_idx_fixed(2)),
                                     s_get1(p, x, s_ix(i[3]))))),
    };
    s_finish(p, troupe_ll_seq(p, 4, it));
    float xv[64], ov[3] = {0.25f, -3.0f, 1.5f};
    double xdv[50], ydv[50], odv[1] = {0.125};
    for (int k = 0; k < 64; k++) /* magnitudes 1e-3 .. 1e3: the order shows in the bits */
        xv[k] = s_rndf(-1.0f, 1.0f) * powf(10.0f, (float)(k % 7) - 3.0f);
    for (int k = 0; k < 50; k++) {
        xdv[k] = s_rndf(-1.0f, 1.0f) * pow(10.0, (double)(k % 5) - 2.0);
        ydv[k] = s_rndf(-1.0f, 1.0f);
    }
    float want[3] = {s_lanes_ref_f(0, xv, 37, ov[0]), s_lanes_ref_f(1, xv, 64, ov[1]), ov[2]};
    for (int k = 0; k < 31; k++)
        want[2] = want[2] + xv[k];
    double want_d = s_lanes_ref_fma_d(xdv, ydv, 50, odv[0]);
    s_lib_t lib;
    s_lib_open(p, "-O3 -march=native -fno-math-errno", &lib);
    cr_expect(lib.res->reassociates);
    const char *src = lib.res->source;
    int nlanes = 0;
    for (const char *q = strstr(src, "sums across"); q != NULL; q = strstr(q + 1, "sums across"))
        nlanes++;
    cr_expect_eq(nlanes, 3, "three lane sums (not the 31-term one):\n%s", src);
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, xd, xdv);
    s_bind(&r, yd, ydv);
    s_bind(&r, o, ov);
    s_bind(&r, od, odv);
    s_call(&lib, &r);
    s_lib_close(&lib);
    for (int k = 0; k < 3; k++)
        cr_expect(memcmp(&ov[k], &want[k], sizeof(float)) == 0, "o[%d] = %.9g, reference %.9g", k,
                  ov[k], want[k]);
    cr_expect(memcmp(&odv[0], &want_d, sizeof(double)) == 0, "od = %.17g, reference %.17g", odv[0],
              want_d);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&xd);
    troupe_tnode_release(&yd);
    troupe_tnode_release(&o);
    troupe_tnode_release(&od);
}

/* Counts the occurrences of needle in hay. */
static int s_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *q = strstr(hay, needle); q != NULL; q = strstr(q + 1, needle))
        n++;
    return n;
}

/* Perfect nests whose accesses collapse run as one lane sum over the flat index (cgen.h):
 * o[0] += x[i, j] over 3 x 24, and o[1] -= y[3a + b - 3, c] over a in 1..2, b < 3, c < 10
 * (an outer loop from 1, a two-term index) give, bit for bit, the reference of cgen.h's
 * order over their 72 and 60 terms, and the interpreter's within the bound; the unit is
 * flagged. o[2] += z[i, j] over 3 x 24 of z (3, 26) does not collapse (26 != 1 * 24): it
 * stays the in-order sum, bit for bit. The CUDA dialect keeps the nests' loops. */
Test(cgen, lane_sums_over_collapsing_nests)
{
    troupe_ll_proc_t *p = s_proc("lane_nests");
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 2, 3, 24);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 2, 6, 10);
    troupe_tnode_t *z = s_node("z", TROUPE_PREC_SINGLE, 2, 3, 26);
    troupe_tnode_t *o = s_node("o", TROUPE_PREC_SINGLE, 1, 3, 0);
    int32_t i[7];
    for (int k = 0; k < 7; k++)
        i[k] = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t row = s_aff(3, i[2], -3); /* 3a + b - 3 */
    row.nterms = 2;
    row.terms[1] = (troupe_index_term_t){1, i[3]};
    troupe_ll_t *it[3] = {
        s_for(p, i[0], 3,
              s_for(p, i[1], 24,
                    s_set1(p, o, troupe_idx_fixed(0),
                           troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, o, troupe_idx_fixed(0)),
                                           s_get2(p, x, s_ix(i[0]), s_ix(i[1])))))),
        troupe_ll_for(p, i[2], 1, 2,
                      s_for(p, i[3], 3,
                            s_for(p, i[4], 10,
                                  s_set1(p, o, troupe_idx_fixed(1),
                                         troupe_sc_binop(p, TROUPE_BINOP_SUB,
                                                         s_get1(p, o, troupe_idx_fixed(1)),
                                                         s_get2(p, y, row, s_ix(i[4])))))),
                      false),
        s_for(p, i[5], 3,
              s_for(p, i[6], 24,
                    s_set1(p, o, troupe_idx_fixed(2),
                           troupe_sc_binop(p, TROUPE_BINOP_ADD, s_get1(p, o, troupe_idx_fixed(2)),
                                           s_get2(p, z, s_ix(i[5]), s_ix(i[6])))))),
    };
    s_finish(p, troupe_ll_seq(p, 3, it));
    float xv[72], yv[60], zv[78], ov[3] = {0.25f, -3.0f, 1.5f};
    for (int k = 0; k < 78; k++) { /* magnitudes 1e-3 .. 1e3: the order shows in the bits */
        float m = powf(10.0f, (float)(k % 7) - 3.0f);
        zv[k] = s_rndf(-1.0f, 1.0f) * m;
        if (k < 72)
            xv[k] = s_rndf(-1.0f, 1.0f) * m;
        if (k < 60)
            yv[k] = s_rndf(-1.0f, 1.0f) * m;
    }
    float want[3] = {s_lanes_ref_f(0, xv, 72, ov[0]), s_lanes_ref_f(1, yv, 60, ov[1]), ov[2]};
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 24; c++)
            want[2] = want[2] + zv[26 * r + c];
    s_lib_t lib;
    s_lib_open(p, "-O3 -march=native -fno-math-errno", &lib);
    cr_expect(lib.res->reassociates);
    cr_expect_eq(s_count(lib.res->source, "sums across"), 2, "two lane sums:\n%s", lib.res->source);
    cr_expect_eq(s_count(lib.res->source, " as one loop "), 2, "%s", lib.res->source);
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, y, yv);
    s_bind(&r, z, zv);
    s_bind(&r, o, ov);
    r.reassoc_tol = fmax(s_lane_bound(xv, 72, 1.0, ov[0]), s_lane_bound(yv, 60, 1.0, ov[1]));
    void *before[S_MAX_BINDS];
    for (size_t b = 0; b < r.nbinds; b++) {
        before[b] = malloc(r.tn[b]->size_bytes);
        cr_assert_not_null(before[b]);
        memcpy(before[b], r.data[b], r.tn[b]->size_bytes);
    }
    s_call(&lib, &r);
    s_compare_with_interp(p, lib.res, &r, before);
    s_lib_close(&lib);
    for (int k = 0; k < 3; k++)
        cr_expect(memcmp(&ov[k], &want[k], sizeof(float)) == 0, "o[%d] = %.9g, reference %.9g", k,
                  ov[k], want[k]);
    troupe_cgen_result_t *cu = s_cuda(p);
    cr_expect_eq(s_count(cu->source, " lanes"), 0, "%s", cu->source);
    troupe_cgen_result_destroy(&cu);
    for (size_t b = 0; b < r.nbinds; b++)
        free(before[b]);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&y);
    troupe_tnode_release(&z);
    troupe_tnode_release(&o);
}

/* Max and min nests of 4 x 12 (inner loops under 32) run in lanes over the flat index and give
 * the interpreter's bits, unflagged: a max of mixed terms with NaNs, and a min of signed zeros
 * only (the in-order rerun over the flat index). */
Test(cgen, lane_max_min_over_nests_keep_the_sequential_bits)
{
    troupe_ll_proc_t *p = s_proc("lane_nest_maxmin");
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 2, 8, 12);
    troupe_tnode_t *o = s_node("o", TROUPE_PREC_SINGLE, 1, 2, 0);
    int32_t i[4];
    for (int k = 0; k < 4; k++)
        i[k] = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *it[2] = {
        s_for(p, i[0], 4,
              s_for(p, i[1], 12,
                    s_set1(p, o, troupe_idx_fixed(0),
                           troupe_sc_binop(p, TROUPE_BINOP_MAX, s_get1(p, o, troupe_idx_fixed(0)),
                                           s_get2(p, x, s_ix(i[0]), s_ix(i[1])))))),
        s_for(p, i[2], 4,
              s_for(p, i[3], 12,
                    s_set1(p, o, troupe_idx_fixed(1),
                           troupe_sc_binop(p, TROUPE_BINOP_MIN,
                                           s_get2(p, x, s_aff(1, i[2], 4), s_ix(i[3])),
                                           s_get1(p, o, troupe_idx_fixed(1)))))),
    };
    s_finish(p, troupe_ll_seq(p, 2, it));
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &res), TROUPE_OK, "%s", troupe_last_error());
    cr_expect(!res->reassociates);
    cr_expect_eq(s_count(res->source, " as one loop "), 2, "%s", res->source);
    troupe_cgen_result_destroy(&res);
    float xv[96], ov[2] = {-INFINITY, 0.0f};
    for (int c = 0; c < 48; c++) {
        xv[c] = (c % 11 == 0) ? NAN : s_rndf(-3.0f, 2.0f);
        xv[48 + c] = (c % 3 == 0) ? -0.0f : 0.0f;
    }
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, o, ov);
    s_run_flags(p, &r, "-O3 -march=native -fno-math-errno -Wall -Wextra -Werror");
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&o);
}

/* |got - want| in units of the spacing of floats just above |round(want)| (the smallest
 * subnormal below the normal range). */
static double s_ulps(float got, double want)
{
    if (isnan(want))
        return isnan(got) ? 0.0 : INFINITY;
    float w = (float)want;
    if (isinf(w))
        return got == w ? 0.0 : INFINITY;
    double u = (double)nextafterf(fabsf(w), INFINITY) - fabsf(w);
    return fabs((double)got - want) / u;
}

/* The prelude's troupe_expf and troupe_tanhf, compiled vectorised (-O3 -march=native), give
 * bit for bit ir/ops.h's (what the interpreter runs) over a sweep of every 4099th float bit
 * pattern, and stay within 1 ulp (exp) and 1.6 ulp (tanh) of the exact value (double libm);
 * specials as the C library's. */
Test(cgen, vectorised_exp_and_tanh)
{
    char dir[] = "/tmp/troupe-mathf-XXXXXX", path[256], cmd[768];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.c", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(troupe_cgen_c_prelude(), f);
    fputs("void ve(const float *x, float *y, long n);\n"
          "void ve(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = "
          "troupe_expf(x[i]); }\n"
          "void vt(const float *x, float *y, long n);\n"
          "void vt(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = "
          "troupe_tanhf(x[i]); }\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "cc -O3 -march=native -fno-math-errno -shared -fPIC -o %s/m.so %s -lm 2> %s/cc.log",
             dir, path, dir);
    cr_assert_eq(system(cmd), 0, "cc failed");
    snprintf(path, sizeof path, "%s/m.so", dir);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(h, "dlopen: %s", dlerror());
    void (*fn[2])(const float *, float *, long);
    void *sym[2] = {dlsym(h, "ve"), dlsym(h, "vt")};
    cr_assert(sym[0] != NULL && sym[1] != NULL);
    memcpy(&fn[0], &sym[0], sizeof sym[0]);
    memcpy(&fn[1], &sym[1], sizeof sym[1]);
    const long n = (long)(0x100000000ull / 4099) + 1;
    float *xs = malloc((size_t)n * sizeof *xs), *ys = malloc((size_t)n * sizeof *ys);
    cr_assert(xs != NULL && ys != NULL);
    for (long k = 0; k < n; k++) {
        uint32_t b = (uint32_t)((uint64_t)k * 4099u);
        memcpy(&xs[k], &b, sizeof b);
    }
    for (int which = 0; which < 2; which++) {
        fn[which](xs, ys, n);
        double worst = 0.0;
        float worst_x = 0.0f;
        for (long k = 0; k < n; k++) {
            float x = xs[k];
            float host = which == 0 ? troupe_expf(x) : troupe_tanhf(x);
            cr_assert(memcmp(&host, &ys[k], sizeof host) == 0 || (isnan(host) && isnan(ys[k])),
                      "%s(%a): generated %a, ir/ops.h %a", which ? "tanh" : "exp", (double)x,
                      (double)ys[k], (double)host);
            double e = s_ulps(ys[k], which == 0 ? exp((double)x) : tanh((double)x));
            if (e > worst) {
                worst = e;
                worst_x = x;
            }
        }
        cr_expect_leq(worst, which == 0 ? 1.0 : 1.6, "%s: %.3f ulp at %a", which ? "tanh" : "exp",
                      worst, (double)worst_x);
    }
    static const float sx[] = {0.0f, -0.0f, 88.72f, 88.73f, -103.0f, -104.0f, -87.5f};
    for (size_t k = 0; k < sizeof sx / sizeof sx[0]; k++)
        cr_expect(s_ulps(troupe_expf(sx[k]), exp((double)sx[k])) <= 1.0, "exp(%a) = %a",
                  (double)sx[k], (double)troupe_expf(sx[k]));
    cr_expect(isinf(troupe_expf(INFINITY)) && troupe_expf(-INFINITY) == 0.0f);
    cr_expect(isnan(troupe_expf(NAN)) && isnan(troupe_tanhf(NAN)));
    cr_expect(troupe_tanhf(INFINITY) == 1.0f && troupe_tanhf(-INFINITY) == -1.0f);
    cr_expect(signbit(troupe_tanhf(-0.0f)) && troupe_tanhf(-0.0f) == 0.0f);
    free(xs);
    free(ys);
    dlclose(h);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* Max and min loops of 40+ terms run in lanes (cgen.h) and still give the interpreter's bits:
 * a plain max, a max over signed zeros only (the in-order rerun), min(t, O) with NaN terms, and
 * a double max whose terms are all NaN into a NaN. */
Test(cgen, lane_max_min_keep_the_sequential_bits)
{
    troupe_ll_proc_t *p = s_proc("lane_maxmin");
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 2, 3, 40);
    troupe_tnode_t *xd = s_node("xd", TROUPE_PREC_DOUBLE, 1, 48, 0);
    troupe_tnode_t *o = s_node("o", TROUPE_PREC_SINGLE, 1, 3, 0);
    troupe_tnode_t *od = s_node("od", TROUPE_PREC_DOUBLE, 1, 1, 0);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, NULL);
    int32_t k = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *it[3] = {
        /* o[r] = max(o[r], x[r, j]) for rows 0 and 1 */
        s_for(p, i, 2,
              s_for(p, j, 40,
                    s_set1(p, o, s_ix(i),
                           troupe_sc_binop(p, TROUPE_BINOP_MAX, s_get1(p, o, s_ix(i)),
                                           s_get2(p, x, s_ix(i), s_ix(j)))))),
        /* o[2] = min(x[2, k], o[2]) */
        s_for(p, k, 40,
              s_set1(p, o, troupe_idx_fixed(2),
                     troupe_sc_binop(p, TROUPE_BINOP_MIN,
                                     s_get2(p, x, troupe_idx_fixed(2), s_ix(k)),
                                     s_get1(p, o, troupe_idx_fixed(2))))),
        /* od[0] = max(od[0], xd[k]) */
        s_for(p, k, 48,
              s_set1(p, od, troupe_idx_fixed(0),
                     troupe_sc_binop(p, TROUPE_BINOP_MAX, s_get1(p, od, troupe_idx_fixed(0)),
                                     s_get1(p, xd, s_ix(k))))),
    };
    s_finish(p, troupe_ll_seq(p, 3, it));
    s_lib_t lib;
    s_lib_open(p, s_flags, &lib);
    cr_expect(!lib.res->reassociates);
    int n = 0;
    for (const char *q = strstr(lib.res->source, " in 16 lanes"); q != NULL;
         q = strstr(q + 1, " in 16 lanes"))
        n++;
    cr_expect_eq(n, 3, "%s", lib.res->source);
    s_lib_close(&lib);
    float xv[120], ov[3] = {-INFINITY, -0.0f, 5.0f};
    double xdv[48], odv[1] = {NAN};
    for (int c = 0; c < 40; c++) {
        xv[c] = s_rndf(-3.0f, 2.0f);
        xv[40 + c] = (c % 3 == 0) ? 0.0f : -0.0f;
        xv[80 + c] = (c % 5 == 0) ? NAN : s_rndf(-1.0f, 4.0f);
    }
    for (int c = 0; c < 48; c++)
        xdv[c] = NAN;
    s_run_t r = {0};
    s_bind(&r, x, xv);
    s_bind(&r, xd, xdv);
    s_bind(&r, o, ov);
    s_bind(&r, od, odv);
    /* bit for bit: C (vectorised), the interpreter, CUDA emulated */
    s_run_flags(p, &r, "-O3 -march=native -fno-math-errno -Wall -Wextra -Werror");
    cr_expect(ov[1] == 0.0f && !signbit(ov[1]), "the last +0 wins: %g", ov[1]);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&xd);
    troupe_tnode_release(&o);
    troupe_tnode_release(&od);
}

/* ---- iteration scalars (compiler/optimize.h step 4c) --------------------------------------- */

/* for i < 8: { t[i] = exp(a[i]); b[i] = t[i] * t[i] } and, by `form`, t also touched where the
 * contraction must refuse: 1 read in a second loop, in reverse (no fusion joins the two); 2
 * read first in the loop; 3 read in a loop nested in it; 4 read at another cell. */
static troupe_ll_proc_t *s_scalar_proc(int form, troupe_tnode_t *a, troupe_tnode_t *t,
                                       troupe_tnode_t *b, troupe_tnode_t *c)
{
    troupe_ll_proc_t *p = s_proc("iteration_scalars");
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), k = troupe_ll_proc_add_symbol(p, NULL);
    /* exp: not cheap to recompute, so t is not inlined at its two reads */
    troupe_ll_t *set_t =
        s_set1(p, t, s_ix(i), troupe_sc_unop(p, TROUPE_UNOP_EXP, s_get1(p, a, s_ix(i))));
    troupe_sc_t *t2 = form == 4 ? s_get1(p, t, troupe_idx_fixed(0)) : s_get1(p, t, s_ix(i));
    troupe_ll_t *set_b =
        s_set1(p, b, s_ix(i), troupe_sc_binop(p, TROUPE_BINOP_MUL, s_get1(p, t, s_ix(i)), t2));
    troupe_ll_t *items[3] = {set_t, set_b, NULL};
    size_t n = 2;
    if (form == 2) { /* c[i] = t[i] before t is written */
        items[0] = s_set1(p, c, s_ix(i), s_get1(p, t, s_ix(i)));
        items[1] = set_t;
        items[2] = set_b;
        n = 3;
    } else if (form == 3) { /* c[i] = t[i] inside a loop of its own over k */
        items[2] = s_for(p, k, 2, s_set1(p, c, s_ix(i), s_get1(p, t, s_ix(i))));
        n = 3;
    }
    troupe_ll_t *loop = s_for(p, i, 8, troupe_ll_seq(p, n, items));
    if (form == 1)
        s_finish(
            p, troupe_ll_seq2(
                   p, loop, s_for(p, k, 8, s_set1(p, c, s_ix(k), s_get1(p, t, s_aff(-1, k, 7))))));
    else
        s_finish(p, loop);
    return p;
}

static bool s_is_iteration_scalar(const troupe_ll_proc_t *p, troupe_tnode_t *tn)
{
    const troupe_ll_traced_t *tr = troupe_optimize_traced(p, tn);
    cr_assert_not_null(tr);
    troupe_memory_mode_t m;
    int32_t prov = 0;
    bool has = troupe_tnode_get_memory_mode(tn, &m, &prov);
    cr_assert_eq(tr->iteration_scalar,
                 has && m.kind == TROUPE_MM_LOCAL && prov % 1000 == TROUPE_PROV_ITERATION_SCALAR,
                 "the traced flag and the mode (%d, provenance %d) agree", (int)m.kind, prov);
    return tr->iteration_scalar;
}

Test(cgen, c_iteration_scalars_hold_no_array)
{
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    cr_assert(!o.iteration_scalars, "off by default: the host runtime asks for them");
    o.iteration_scalars = true;
    /* refused forms: t stays an array (or is inlined), never a scalar */
    for (int form = 1; form <= 4; form++) {
        troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 1, 8, 0);
        troupe_tnode_t *t = s_node("t", TROUPE_PREC_SINGLE, 1, 8, 0);
        troupe_tnode_t *b = s_node("b", TROUPE_PREC_SINGLE, 1, 8, 0);
        troupe_tnode_t *c = s_node("c", TROUPE_PREC_SINGLE, 1, 8, 0);
        troupe_ll_proc_t *p = s_scalar_proc(form, a, t, b, c);
        cr_assert_eq(troupe_ll_optimize(p, &o), TROUPE_OK, "form %d: %s", form,
                     troupe_last_error());
        const troupe_ll_traced_t *tr = troupe_optimize_traced(p, t);
        cr_expect(tr == NULL || !tr->iteration_scalar, "form %d made t a scalar", form);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&a);
        troupe_tnode_release(&t);
        troupe_tnode_release(&b);
        troupe_tnode_release(&c);
    }
    /* the plain form: t is a scalar declared around its loop, with no array and no parameter;
     * the compiled routine equals the interpreter bit for bit */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 1, 8, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_SINGLE, 1, 8, 0);
    troupe_tnode_t *b = s_node("b", TROUPE_PREC_SINGLE, 1, 8, 0);
    troupe_ll_proc_t *p = s_scalar_proc(0, a, t, b, NULL);
    o.iteration_scalars = false;
    cr_assert_eq(troupe_ll_optimize(p, &o), TROUPE_OK, "%s", troupe_last_error());
    cr_assert(!troupe_optimize_traced(p, t)->iteration_scalar, "the option off keeps the array");
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&t);
    t = s_node("t", TROUPE_PREC_SINGLE, 1, 8, 0);
    p = s_scalar_proc(0, a, t, b, NULL);
    o.iteration_scalars = true;
    cr_assert_eq(troupe_ll_optimize(p, &o), TROUPE_OK, "%s", troupe_last_error());
    cr_assert(s_is_iteration_scalar(p, t));
    cr_assert(!s_is_iteration_scalar(p, b), "b, the result, stays an array");
    s_lib_t lib;
    s_lib_open(p, s_flags, &lib);
    cr_expect_lt(troupe_cgen_find_node_param(lib.res, t), 0, "t is no parameter");
    char ident[96];
    troupe_cgen_node_ident(t, ident, sizeof ident);
    char decl[160], elem[128];
    snprintf(decl, sizeof decl, "float %s = 0; /* an iteration scalar */", ident);
    snprintf(elem, sizeof elem, "%s[", ident);
    cr_expect_not_null(strstr(lib.res->source, decl), "%s", lib.res->source);
    cr_expect_null(strstr(lib.res->source, elem), "no element of t: %s", lib.res->source);
    s_run_t r = {0};
    void *bufs[2] = {s_buffer(a), s_buffer(b)}, *before[2];
    s_fill_float(a, bufs[0], -2.0f, 2.0f);
    s_fill_float(b, bufs[1], -2.0f, 2.0f);
    s_bind(&r, a, bufs[0]);
    s_bind(&r, b, bufs[1]);
    for (int k = 0; k < 2; k++) {
        before[k] = malloc(r.tn[k]->size_bytes);
        memcpy(before[k], r.data[k], r.tn[k]->size_bytes);
    }
    s_call(&lib, &r);
    s_compare_with_interp(p, lib.res, &r, before);
    s_lib_close(&lib);
    /* the cuda dialect does not take them: a clear refusal */
    troupe_cgen_result_t *res = NULL;
    cr_expect_eq(troupe_cgen_emit(p, TROUPE_CGEN_CUDA, &res), TROUPE_FAILED_PRECONDITION);
    cr_expect_not_null(strstr(troupe_last_error(), "iteration scalar"), "%s", troupe_last_error());
    troupe_ll_proc_destroy(&p);
    /* a procedure optimized later that holds t as an array larger than a stack array may be is
     * refused, naming t; a small one keeps it as a Local array */
    troupe_tnode_t *c = s_node("c", TROUPE_PREC_SINGLE, 1, 8, 0);
    size_t threshold = troupe_config_stack_threshold_bytes();
    cr_assert_eq(troupe_config_set_stack_threshold_bytes(16), TROUPE_OK); /* t's 32 do not fit */
    for (int on = 0; on < 2; on++) { /* refused with the option on or off (cuda's case) */
        o.iteration_scalars = on;
        p = s_scalar_proc(1, a, t, b, c);
        cr_expect_eq(troupe_ll_optimize(p, &o), TROUPE_FAILED_PRECONDITION);
        cr_expect_not_null(strstr(troupe_last_error(), "_t (32 bytes) is Local, held in a scalar"),
                           "%s", troupe_last_error());
        troupe_ll_proc_destroy(&p);
    }
    cr_assert_eq(troupe_config_set_stack_threshold_bytes(threshold), TROUPE_OK);
    p = s_scalar_proc(1, a, t, b, c);
    o.iteration_scalars = true;
    cr_expect_eq(troupe_ll_optimize(p, &o), TROUPE_OK, "%s", troupe_last_error());
    troupe_ll_proc_destroy(&p);
    for (int k = 0; k < 2; k++) {
        free(bufs[k]);
        free(before[k]);
    }
    troupe_tnode_release(&a);
    troupe_tnode_release(&t);
    troupe_tnode_release(&b);
    troupe_tnode_release(&c);
}
