/* Test helper: runs the CUDA dialect of compiler/cgen on the host, without a GPU.
 *
 * The generated unit is compiled as C++ by the system C++ compiler (`c++`) after a small
 * emulation header: __global__, __device__ and __forceinline__ become plain C++, threadIdx,
 * blockIdx, blockDim and gridDim are variables, and the bit-cast intrinsics the prelude uses
 * are memcpy. For each kernel the test side gets `emu_<kernel>(args, gx, gy, bx, by, reverse)`,
 * which runs every thread of a gx x gy grid of bx x by blocks one after the other (forward, or
 * in reverse order) with the CUDA argument convention (args[k] points to parameter k's value).
 * Sequential threads are exact for kernels without __syncthreads (troupe's have none); the
 * reverse order and a small grid (so the grid-stride loops take several turns) make a wrong
 * thread mapping visible: a reduction mapped onto threads then sums in another order, two
 * threads writing one element leave the other's value.
 *
 * troupe_emu_run runs one call of the routine: its steps in order, a GEMM step through its
 * fallback kernels (cuBLASLt itself needs a GPU); troupe_emu_gemm_ref computes a GEMM step from
 * its call description alone (its epilogue included), so the description can be checked
 * against the kernels.
 */
#ifndef TROUPE_TESTS_CUDA_EMU_H
#define TROUPE_TESTS_CUDA_EMU_H

#include "base/strbuf.h"
#include "compiler/cgen.h"
#include "ir/prec.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void (*troupe_emu_fn)(void **args, unsigned gx, unsigned gy, unsigned bx, unsigned by,
                              int reverse);

typedef struct troupe_emu {
    char dir[128];
    void *handle;
    const troupe_cgen_result_t *res; /* borrowed */
    troupe_emu_fn fns[64];
} troupe_emu_t;

/* Launch shapes troupe_emu_run uses. */
typedef enum troupe_emu_shape {
    TROUPE_EMU_PLANNED = 0, /* each kernel's planned grid and block, threads in order */
    TROUPE_EMU_SMALL_REVERSE, /* a 2x2 grid of 3x2 blocks, threads in reverse order */
} troupe_emu_shape_t;

static const char s_emu_header[] =
    "#include <math.h>\n"
    "#include <string.h>\n"
    "struct troupe_emu_dim3 { unsigned x, y, z; };\n"
    "static troupe_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;\n"
    "#define __global__\n"
    "#define __device__\n"
    "#define __forceinline__ inline\n"
    "static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }\n"
    "static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }\n"
    "static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }\n"
    "static inline long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, 8); "
    "return i; }\n"
    "static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); "
    "return d; }\n";

/* Whether a C++ compiler is there (else the emulation tests skip). */
static inline bool troupe_emu_available(void)
{
    return system("c++ --version > /dev/null 2>&1") == 0;
}

/* The parameter's type: its declaration without the trailing identifier. */
static inline void s_emu_param_type(const troupe_cgen_param_t *p, char *buf, size_t cap)
{
    size_t dl = strlen(p->decl), il = strlen(p->ident);
    cr_assert(dl > il && strcmp(p->decl + dl - il, p->ident) == 0, "%s", p->decl);
    snprintf(buf, cap, "%.*s", (int)(dl - il), p->decl);
}

static inline void troupe_emu_open(const troupe_cgen_result_t *res, troupe_emu_t *e)
{
    memset(e, 0, sizeof *e);
    e->res = res;
    cr_assert_eq(res->dialect, TROUPE_CGEN_CUDA);
    cr_assert_leq(res->nkernels, sizeof e->fns / sizeof e->fns[0]);
    troupe__strbuf_t b = TROUPE__STRBUF_INIT;
    troupe__strbuf_puts(&b, s_emu_header);
    /* A namespace keeps the unit's own int64_t & co. apart from the C library's. */
    troupe__strbuf_puts(&b, "namespace troupe_emu {\n");
    troupe__strbuf_putn(&b, res->source, res->source_len);
    for (size_t k = 0; k < res->nkernels; k++) {
        troupe__strbuf_printf(&b,
                              "\nextern \"C\" void emu_%s(void **args, unsigned gx, unsigned gy, "
                              "unsigned bx, unsigned by, int reverse)\n{\n"
                              "    (void)args;\n"
                              "    gridDim.x = gx; gridDim.y = gy; gridDim.z = 1;\n"
                              "    blockDim.x = bx; blockDim.y = by; blockDim.z = 1;\n"
                              "    unsigned long total = (unsigned long)gx * gy * bx * by;\n"
                              "    for (unsigned long t = 0; t < total; t++) {\n"
                              "        unsigned long m = reverse ? total - 1 - t : t;\n"
                              "        threadIdx.x = m %% bx; m /= bx; threadIdx.y = m %% by; "
                              "m /= by;\n"
                              "        blockIdx.x = m %% gx; blockIdx.y = m / gx;\n"
                              "        %s(",
                              res->kernels[k].name, res->kernels[k].name);
        for (size_t i = 0; i < res->nparams; i++) {
            char type[160];
            s_emu_param_type(&res->params[i], type, sizeof type);
            troupe__strbuf_printf(&b, "%s*(%s*)args[%zu]", i ? ", " : "", type, i);
        }
        troupe__strbuf_puts(&b, ");\n    }\n}\n");
    }
    troupe__strbuf_puts(&b, "} // namespace troupe_emu\n");
    cr_assert(!b.failed);
    snprintf(e->dir, sizeof e->dir, "/tmp/troupe-emu-XXXXXX");
    cr_assert_not_null(mkdtemp(e->dir));
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "%s/unit.cpp", e->dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fwrite(b.data, 1, b.len, f);
    fclose(f);
    troupe__strbuf_reset(&b);
    snprintf(cmd, sizeof cmd,
             "c++ -std=c++14 -O1 -ffp-contract=off -fwrapv -shared -fPIC -o %s/unit.so %s "
             "> %s/cxx.log 2>&1",
             e->dir, path, e->dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "cat %s/cxx.log >&2; head -c 20000 %s >&2", e->dir, path);
        (void)system(cmd);
        cr_assert_fail("c++ failed on the emulated CUDA unit of %s", res->name);
    }
    snprintf(path, sizeof path, "%s/unit.so", e->dir);
    e->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(e->handle, "dlopen: %s", dlerror());
    for (size_t k = 0; k < res->nkernels; k++) {
        char sym[200];
        snprintf(sym, sizeof sym, "emu_%s", res->kernels[k].name);
        void *p = dlsym(e->handle, sym);
        cr_assert_not_null(p, "dlsym %s", sym);
        memcpy(&e->fns[k], &p, sizeof p);
    }
}

static inline void troupe_emu_close(troupe_emu_t *e)
{
    if (e->handle != NULL)
        dlclose(e->handle);
    if (e->dir[0] != '\0') {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", e->dir);
        (void)system(cmd);
    }
    memset(e, 0, sizeof *e);
}

static inline void troupe_emu_kernel(const troupe_emu_t *e, size_t k, void **args,
                                     troupe_emu_shape_t shape)
{
    const troupe_cgen_kernel_t *kn = &e->res->kernels[k];
    if (shape == TROUPE_EMU_PLANNED)
        e->fns[k](args, kn->grid[0], kn->grid[1], kn->block[0], kn->block[1], 0);
    else
        e->fns[k](args, 2, 2, 3, 2, 1);
}

static inline void troupe_emu_gemm_ref(const troupe_cgen_gemm_call_t *call, void **args);

/* One call of the routine: every step, GEMM steps through their fallback kernels, except step
 * `ref_step` (a GEMM step; -1: none), computed by troupe_emu_gemm_ref from its description. */
static inline void troupe_emu_run(const troupe_emu_t *e, void **args, troupe_emu_shape_t shape,
                                  long ref_step)
{
    for (size_t s = 0; s < e->res->nsteps; s++) {
        const troupe_cgen_step_t *st = &e->res->steps[s];
        if ((long)s == ref_step && st->kind == TROUPE_CGEN_STEP_GEMM) {
            troupe_emu_gemm_ref(&st->gemm, args);
            continue;
        }
        for (size_t k = st->first_kernel; k < st->first_kernel + st->nkernels; k++)
            troupe_emu_kernel(e, k, args, shape);
    }
}

/* The element offset of a GEMM operand for the call's arguments (as troupe_emu_run's). */
static inline int64_t troupe_emu_gemm_offset(const troupe_cgen_gemm_operand_t *o, void **args)
{
    int64_t off = o->offset;
    for (int t = 0; t < o->nterms; t++)
        off += o->coeff[t] * *(const int64_t *)args[o->static_param[t]];
    return off;
}

/* The step's epilogue (compiler/cgen.h) on x = sum + beta C at column j: the bias b[j] read
 * through its operand, then relu. */
static inline double troupe_emu_gemm_epilogue(const troupe_cgen_gemm_call_t *call, void **args,
                                              int64_t j, double x)
{
    if (call->epilogue == TROUPE_CGEN_GEMM_EPI_BIAS ||
        call->epilogue == TROUPE_CGEN_GEMM_EPI_RELU_BIAS) {
        const char *bp = *(char **)args[call->bias.param];
        int64_t at = troupe_emu_gemm_offset(&call->bias, args) + j;
        x += call->prec == TROUPE_PREC_SINGLE ? ((const float *)(const void *)bp)[at]
                                              : ((const double *)(const void *)bp)[at];
    }
    if (call->epilogue == TROUPE_CGEN_GEMM_EPI_RELU ||
        call->epilogue == TROUPE_CGEN_GEMM_EPI_RELU_BIAS)
        x = x > 0 ? x : 0;
    return x;
}

/* Computes GEMM step `call` on the host from its description alone (sums in double) into the
 * C operand's array, the others read through args (args[k] points to parameter k's value). */
static inline void troupe_emu_gemm_ref(const troupe_cgen_gemm_call_t *call, void **args)
{
    bool single = call->prec == TROUPE_PREC_SINGLE;
    char *a = *(char **)args[call->a.param], *bm = *(char **)args[call->b.param],
         *c = *(char **)args[call->c.param];
    size_t es = single ? 4 : 8;
    a += (size_t)troupe_emu_gemm_offset(&call->a, args) * es;
    bm += (size_t)troupe_emu_gemm_offset(&call->b, args) * es;
    c += (size_t)troupe_emu_gemm_offset(&call->c, args) * es;
    for (int64_t i = 0; i < call->m; i++)
        for (int64_t j = 0; j < call->n; j++) {
            double acc = 0;
            for (int64_t k = 0; k < call->k; k++) {
                int64_t ia = call->a.trans ? k * call->a.ld + i : i * call->a.ld + k;
                int64_t ib = call->b.trans ? j * call->b.ld + k : k * call->b.ld + j;
                double x = single ? ((float *)(void *)a)[ia] : ((double *)(void *)a)[ia];
                double y = single ? ((float *)(void *)bm)[ib] : ((double *)(void *)bm)[ib];
                acc += x * y;
            }
            int64_t ic = i * call->c.ld + j;
            double x = acc;
            if (!call->beta_zero)
                x += single ? ((float *)(void *)c)[ic] : ((double *)(void *)c)[ic];
            x = troupe_emu_gemm_epilogue(call, args, j, x);
            if (single)
                ((float *)(void *)c)[ic] = (float)x;
            else
                ((double *)(void *)c)[ic] = x;
        }
}

#endif
