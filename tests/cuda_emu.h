/* Test helper: runs the CUDA dialect of compiler/cgen on the host, without a GPU.
 *
 * The generated unit is compiled as C++ by the system C++ compiler (`c++`) after a small
 * emulation header: __global__, __device__ and __forceinline__ become plain C++, threadIdx,
 * blockIdx, blockDim and gridDim are variables, and the bit-cast intrinsics the prelude uses
 * are memcpy. For each kernel the test side gets `emu_<kernel>(args, gx, gy, bx, by, reverse)`,
 * which runs a gx x gy grid of bx x by blocks with the CUDA argument convention (args[k] points
 * to parameter k's value), one block after the other (forward, or in reverse order).
 *
 * A kernel whose text calls __syncthreads() runs each block's threads as cooperative fibers
 * (ucontext: makecontext/swapcontext on small stacks): a thread runs until it reaches the
 * barrier or ends, then the next thread of the block runs (in thread order, or reversed), and
 * no thread passes a barrier before every thread of its block has reached it. __shared__
 * arrays (and the dynamic shared memory of TROUPE_DYN_SHARED, 256 KiB) are `static` in the
 * emulated unit: one copy, which the blocks (run one at a time)
 * share like a block's shared memory; nothing resets it between blocks, as nothing
 * initialises shared memory on a GPU. A barrier some threads of a block reach while others
 * have ended (divergent __syncthreads, undefined in CUDA) makes emu_<kernel> return nonzero.
 * Kernels without __syncthreads run every thread of the grid one after the other (exact for
 * them). The reverse order and a small grid (so the grid-stride loops take several turns) make
 * a wrong thread mapping visible: a reduction mapped onto threads then sums in another order,
 * two threads writing one element leave the other's value. A kernel whose block shape is part
 * of its code (troupe_cgen_kernel_t.fixed_block) keeps its block under the small grid.
 *
 * A routine with gather indices (troupe_cgen_result_t.gathers) takes the gather error words
 * after its parameters: args[nparams] points to an `int64_t *` to TROUPE_CGEN_GATHER_ERR_WORDS
 * words, which the caller zeroes before the call (the cuda driver's memset).
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
#include "compiler/cgen_impl.h"
#include "ir/prec.h"
#include "troupe_config.h"
#include "troupe_paths_impl.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bytes of the emulated dynamic shared memory (TROUPE_DYN_SHARED): one static pool. */
#define TROUPE_EMU_DYN_SHARED_BYTES (256u * 1024u)

/* Runs one kernel; 0, or nonzero after a divergent barrier. */
typedef int (*troupe_emu_fn)(void **args, unsigned gx, unsigned gy, unsigned bx, unsigned by,
                             int reverse);

typedef struct troupe_emu {
    char dir[128];
    void *handle;
    const troupe_cgen_result_t *res; /* borrowed */
    troupe_emu_fn fns[64];
} troupe_emu_t;

/* Launch shapes troupe_emu_run uses. */
typedef enum troupe_emu_shape {
    TROUPE_EMU_PLANNED = 0,   /* each kernel's planned grid and block, threads in order */
    TROUPE_EMU_SMALL_REVERSE, /* a 2x2 grid of 3x2 blocks (a fixed-block kernel: its own
                               * block), blocks and threads in reverse order */
} troupe_emu_shape_t;

/* Host stand-ins for what the unit uses of cuda_fp16.h, cuda_bf16.h and cuda_fp8.h, for a
 * build without the CUDA toolkit (or when troupe_emu_standins is set): the conversions are
 * troupe's software ones (the C texts of the prelude's sections, in a namespace), so they
 * check the plumbing, not CUDA's rounding. With the toolkit the unit includes CUDA's own
 * headers, whose host implementations are CUDA's conversions. */
static const char s_emu_standins[] =
    "struct __half_raw { unsigned short x; };\n"
    "struct __half { unsigned short x; __half() : x(0) {}\n"
    "  __half(__half_raw r) : x(r.x) {} };\n"
    "static inline __half __ushort_as_half(unsigned short u) { __half_raw r; r.x = u; return "
    "__half(r); }\n"
    "static inline unsigned short __half_as_ushort(__half h) { return h.x; }\n"
    "static inline float __half2float(__half h) { return "
    "troupe_emu_soft::troupe_half_to_single(h.x); }\n"
    "static inline __half __float2half_rn(float f) { return "
    "__ushort_as_half(troupe_emu_soft::troupe_single_to_half(f)); }\n"
    "struct __nv_bfloat16 { unsigned short x; };\n"
    "static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 b; b.x "
    "= u; return b; }\n"
    "static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }\n"
    "static inline float __bfloat162float(__nv_bfloat16 b) { return "
    "troupe_emu_soft::troupe_bfloat16_to_single(b.x); }\n"
    "static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return "
    "__ushort_as_bfloat16(troupe_emu_soft::troupe_single_to_bfloat16(f)); }\n"
    "typedef unsigned char __nv_fp8_storage_t;\n"
    "enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };\n"
    "enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };\n"
    "static inline __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t x, "
    "__nv_fp8_interpretation_t) { __half_raw r; r.x = (unsigned short)(x << 8); return r; }\n"
    "static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float f, __nv_saturation_t, "
    "__nv_fp8_interpretation_t) { return troupe_emu_soft::troupe_single_to_fp8(f); }\n";

/* Set to run the unit on the stand-ins above even where the toolkit's headers are there. */
static int troupe_emu_standins;

static const char s_emu_header[] =
    "#include <math.h>\n"
    "#include <string.h>\n"
    "#undef __global__\n"
    "#undef __device__\n"
    "#undef __forceinline__\n"
    "#undef __shared__\n"
    "#undef __constant__\n"
    "struct troupe_emu_dim3 { unsigned x, y, z; };\n"
    "static troupe_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;\n"
    "#define __global__\n"
    "#define __device__\n"
    "#define __constant__ static\n"
    "#define __forceinline__ inline\n"
    "static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }\n"
    "static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }\n"
    "static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }\n"
    "static inline long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, 8); "
    "return i; }\n"
    "static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); "
    "return d; }\n"
    /* Blocks' threads as fibers, for kernels with barriers. */
    "#include <stdlib.h>\n"
    "#include <ucontext.h>\n"
    "#define __shared__ static\n"
    "#define TROUPE_DYN_SHARED(name) static __attribute__((aligned(16))) unsigned char "
    "name[256 * 1024]\n" /* TROUPE_EMU_DYN_SHARED_BYTES */
    "#define __syncthreads() troupe_emu_sync()\n"
    "enum { TROUPE_EMU_READY, TROUPE_EMU_AT_BARRIER, TROUPE_EMU_DONE };\n"
    "struct troupe_emu_fiber { ucontext_t uc; char *stack; int state; unsigned tx, ty; };\n"
    "static ucontext_t troupe_emu_sched;\n"
    "static troupe_emu_fiber *troupe_emu_cur;\n"
    "static void (*troupe_emu_body)(void);\n"
    "static void troupe_emu_sync(void)\n"
    "{\n"
    "    if (troupe_emu_cur == NULL) return; /* a kernel run without fibers: no barrier */\n"
    "    troupe_emu_cur->state = TROUPE_EMU_AT_BARRIER;\n"
    "    swapcontext(&troupe_emu_cur->uc, &troupe_emu_sched);\n"
    "}\n"
    "static void troupe_emu_fiber_main(void)\n"
    "{\n"
    "    troupe_emu_body();\n"
    "    troupe_emu_cur->state = TROUPE_EMU_DONE; /* uc_link resumes the scheduler */\n"
    "}\n"
    "#define TROUPE_EMU_STACK (256u * 1024u)\n"
    "/* Runs body as every thread of the grid; fibers: blocks' threads cooperatively. */\n"
    "static int troupe_emu_launch(void (*body)(void), unsigned gx, unsigned gy, unsigned bx,\n"
    "                             unsigned by, int reverse, int fibers)\n"
    "{\n"
    "    gridDim.x = gx; gridDim.y = gy; gridDim.z = 1;\n"
    "    blockDim.x = bx; blockDim.y = by; blockDim.z = 1;\n"
    "    unsigned long nb = (unsigned long)gx * gy, nt = (unsigned long)bx * by;\n"
    "    if (!fibers) {\n"
    "        for (unsigned long t = 0; t < nb * nt; t++) {\n"
    "            unsigned long m = reverse ? nb * nt - 1 - t : t;\n"
    "            threadIdx.x = m % bx; m /= bx; threadIdx.y = m % by; m /= by;\n"
    "            blockIdx.x = m % gx; blockIdx.y = m / gx;\n"
    "            body();\n"
    "        }\n"
    "        return 0;\n"
    "    }\n"
    "    troupe_emu_fiber *f = (troupe_emu_fiber *)calloc(nt, sizeof *f);\n"
    "    if (f == NULL) return 2;\n"
    "    int bad = 0;\n"
    "    for (unsigned long i = 0; i < nt; i++) {\n"
    "        f[i].stack = (char *)malloc(TROUPE_EMU_STACK);\n"
    "        if (f[i].stack == NULL) bad = 2;\n"
    "        f[i].tx = i % bx; f[i].ty = i / bx;\n"
    "    }\n"
    "    troupe_emu_body = body;\n"
    "    for (unsigned long b = 0; b < nb && !bad; b++) {\n"
    "        unsigned long bb = reverse ? nb - 1 - b : b;\n"
    "        blockIdx.x = bb % gx; blockIdx.y = bb / gx;\n"
    "        for (unsigned long i = 0; i < nt; i++) {\n"
    "            getcontext(&f[i].uc);\n"
    "            f[i].uc.uc_stack.ss_sp = f[i].stack;\n"
    "            f[i].uc.uc_stack.ss_size = TROUPE_EMU_STACK;\n"
    "            f[i].uc.uc_link = &troupe_emu_sched;\n"
    "            makecontext(&f[i].uc, troupe_emu_fiber_main, 0);\n"
    "            f[i].state = TROUPE_EMU_READY;\n"
    "        }\n"
    "        unsigned long alive = nt;\n"
    "        while (alive > 0) { /* one turn: every live thread up to the next barrier */\n"
    "            unsigned long ended = 0, waiting = 0;\n"
    "            for (unsigned long j = 0; j < nt; j++) {\n"
    "                troupe_emu_fiber *x = &f[reverse ? nt - 1 - j : j];\n"
    "                if (x->state == TROUPE_EMU_DONE) continue;\n"
    "                x->state = TROUPE_EMU_READY;\n"
    "                threadIdx.x = x->tx; threadIdx.y = x->ty; threadIdx.z = 0;\n"
    "                troupe_emu_cur = x;\n"
    "                swapcontext(&troupe_emu_sched, &x->uc);\n"
    "                if (x->state == TROUPE_EMU_DONE) ended++; else waiting++;\n"
    "            }\n"
    "            alive -= ended;\n"
    "            if (waiting > 0 && ended > 0) { bad = 1; break; } /* divergent barrier */\n"
    "        }\n"
    "    }\n"
    "    troupe_emu_cur = NULL;\n"
    "    for (unsigned long i = 0; i < nt; i++) free(f[i].stack);\n"
    "    free(f);\n"
    "    return bad;\n"
    "}\n";

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

/* Whether the text of kernel k (from its signature to the next kernel's) calls __syncthreads. */
static inline bool troupe_emu_kernel_syncs(const troupe_cgen_result_t *res, size_t k)
{
    char sig[200];
    snprintf(sig, sizeof sig, "__global__ void %s(", res->kernels[k].name);
    const char *from = strstr(res->source, sig);
    if (from == NULL)
        return true; /* unknown: the fibers are right for any kernel */
    const char *next = strstr(from + strlen(sig), "__global__");
    const char *sync = strstr(from, "__syncthreads");
    return sync != NULL && (next == NULL || sync < next);
}

static inline void troupe_emu_open(const troupe_cgen_result_t *res, troupe_emu_t *e)
{
    memset(e, 0, sizeof *e);
    e->res = res;
    cr_assert_eq(res->dialect, TROUPE_CGEN_CUDA);
    cr_assert_leq(res->nkernels, sizeof e->fns / sizeof e->fns[0]);
    for (size_t k = 0; k < res->nkernels; k++) /* the emulated TROUPE_DYN_SHARED pool */
        cr_assert_leq(res->kernels[k].dynamic_shared_bytes, TROUPE_EMU_DYN_SHARED_BYTES,
                      "kernel %s wants more dynamic shared memory than the emulator has",
                      res->kernels[k].name);
    troupe__strbuf_t b = TROUPE__STRBUF_INIT;
    const bool standins = troupe_emu_standins || TROUPE_CUDA_INCLUDE_DIR[0] == '\0';
    if (standins) {
        /* The software conversions from the C prelude; the unit's #include lines then find
         * the empty headers troupe_emu_open writes. */
        size_t nsec = 0;
        const troupe__cgen_section_t *secs = troupe__cgen_sections(&nsec);
        troupe__strbuf_puts(&b, "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"
                                "namespace troupe_emu_soft {\n#define TROUPE_FN static inline\n");
        for (size_t i = 0; i < nsec; i++) {
            char word[64];
            snprintf(word, sizeof word, " %s ", secs[i].name);
            if (strstr(" bits encode_small half bfloat16 fp8 ", word) != NULL)
                troupe__strbuf_puts(&b, secs[i].text_c);
        }
        troupe__strbuf_puts(&b, "#undef TROUPE_FN\n} // namespace troupe_emu_soft\n");
        troupe__strbuf_puts(&b, s_emu_standins);
    } else {
        troupe__strbuf_puts(&b, "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
                                "#include <cuda_fp8.h>\n");
    }
    troupe__strbuf_puts(&b, s_emu_header);
    /* A namespace keeps the unit's own int64_t & co. apart from the C library's. */
    troupe__strbuf_puts(&b, "namespace troupe_emu {\n");
    troupe__strbuf_putn(&b, res->source, res->source_len);
    for (size_t k = 0; k < res->nkernels; k++) {
        const char *kn = res->kernels[k].name;
        troupe__strbuf_printf(&b,
                              "\nstatic void **emu_args_%zu;\nstatic void emu_body_%zu(void)\n{\n"
                              "    (void)emu_args_%zu;\n    %s(",
                              k, k, k, kn);
        /* the kernel's own arguments (troupe_cgen_kernel_t.args), as the cuda driver passes
         * them: parameter args[j]'s value, the gather error words for index nparams */
        const troupe_cgen_kernel_t *kd = &res->kernels[k];
        for (size_t j = 0; j < kd->nargs; j++) {
            size_t i = kd->args[j];
            char type[160] = "int64_t *";
            if (i < res->nparams)
                s_emu_param_type(&res->params[i], type, sizeof type);
            else
                cr_assert(i == res->nparams && res->ngathers > 0 && j == kd->nargs - 1,
                          "kernel %s: argument %zu names parameter %zu of %zu", kd->name, j, i,
                          res->nparams);
            troupe__strbuf_printf(&b, "%s*(%s*)emu_args_%zu[%zu]", j ? ", " : "", type, k, i);
        }
        troupe__strbuf_printf(&b,
                              ");\n}\n"
                              "extern \"C\" int emu_%s(void **args, unsigned gx, unsigned gy, "
                              "unsigned bx, unsigned by, int reverse)\n{\n"
                              "    emu_args_%zu = args;\n"
                              "    return troupe_emu_launch(emu_body_%zu, gx, gy, bx, by, reverse, "
                              "%d);\n}\n",
                              kn, k, k, troupe_emu_kernel_syncs(res, k) ? 1 : 0);
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
    if (standins) {
        const char *hdrs[] = {"cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", e->dir, hdrs[i]);
            FILE *h = fopen(path, "w");
            cr_assert_not_null(h);
            fclose(h);
        }
        snprintf(path, sizeof path, "%s/unit.cpp", e->dir);
    }
    snprintf(cmd, sizeof cmd,
             "c++ -std=c++14 -O1 -ffp-contract=off -fwrapv -shared -fPIC -I%s -o %s/unit.so %s "
             "> %s/cxx.log 2>&1",
             standins ? e->dir : TROUPE_CUDA_INCLUDE_DIR, e->dir, path, e->dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "cat %s/cxx.log >&2; head -c 20000 %s >&2", e->dir, path);
        int shown = system(cmd); /* best effort: the failure below is the report */
        (void)shown;
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
        int removed = system(cmd); /* best effort: a left-over folder under /tmp harms nothing */
        (void)removed;
    }
    memset(e, 0, sizeof *e);
}

static inline void troupe_emu_kernel(const troupe_emu_t *e, size_t k, void **args,
                                     troupe_emu_shape_t shape)
{
    const troupe_cgen_kernel_t *kn = &e->res->kernels[k];
    int rc;
    if (shape == TROUPE_EMU_PLANNED)
        rc = e->fns[k](args, kn->grid[0], kn->grid[1], kn->block[0], kn->block[1], 0);
    else if (kn->fixed_block)
        rc = e->fns[k](args, 2, 2, kn->block[0], kn->block[1], 1);
    else
        rc = e->fns[k](args, 2, 2, 3, 2, 1);
    cr_assert_eq(rc, 0, "%s: %s", kn->name,
                 rc == 1 ? "a barrier reached by some threads of a block after others ended"
                         : "out of memory for the emulation's fibers");
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
    size_t es = single ? 4 : 8;
    /* each batch point in turn (compiler/cgen.h), the last loop the fastest */
    int64_t points = 1;
    for (int o = 0; o < call->nbatch; o++)
        points *= call->batch_ext[o];
    for (int64_t pt = 0; pt < points; pt++) {
    char *a = *(char **)args[call->a.param], *bm = *(char **)args[call->b.param],
         *c = *(char **)args[call->c.param];
    a += (size_t)troupe_emu_gemm_offset(&call->a, args) * es;
    bm += (size_t)troupe_emu_gemm_offset(&call->b, args) * es;
    c += (size_t)troupe_emu_gemm_offset(&call->c, args) * es;
    int64_t div = 1;
    for (int o = call->nbatch - 1; o >= 0; o--) {
        int64_t at = pt / div % call->batch_ext[o];
        a += (size_t)(at * call->a.batch_stride[o]) * es;
        bm += (size_t)(at * call->b.batch_stride[o]) * es;
        c += (size_t)(at * call->c.batch_stride[o]) * es;
        div *= call->batch_ext[o];
    }
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
}

#endif
