/* troupe — the tuned GEMM library behind generated CPU code (see gemm_library.h).
 *
 * OpenBLAS is loaded with dlopen when first needed rather than linked: its CPU detection runs
 * when it is loaded, and OpenBLAS 0.3.21 (Debian 12) does not know recent Intel server cores
 * (Sapphire/Emerald Rapids): it falls back to its generic "Prescott" kernels, about 4x slower
 * than its AVX-512 ones (OpenBLAS issue #4267, fixed in 0.3.25). Loading it ourselves lets troupe
 * name the core from the CPU's features first, as OPENBLAS_CORETYPE, when the user has not. */
#define _GNU_SOURCE
#include "devices/host/gemm_library.h"

#include "base/config.h"
#include "base/log.h"
#include "ir/prec.h"
#include "troupe_config.h"
#include "troupe_paths_impl.h"

#if TROUPE_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CBLAS's enumerations (the reference CBLAS header's values). */
enum { S_ROW_MAJOR = 101, S_NO_TRANS = 111, S_TRANS = 112 };

typedef void (*s_cblas_sgemm_t)(int, int, int, int, int, int, float, const float *, int,
                                const float *, int, float, float *, int);
typedef void (*s_cblas_dgemm_t)(int, int, int, int, int, int, double, const double *, int,
                                const double *, int, double, double *, int);

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
/* Each thread's scratch, freed when the thread ends: buffers 0 and 1 for repacked bfloat16
 * factors (s_bgemm), buffer 2 for a transposed single factor (s_sgemm_xsmm_bt), buffer 3 for
 * one packed for a loop of calls (s_spack_bt; the calls it serves use none of the others). */
typedef struct s_scratch {
    void *buf[4];
    size_t cap[4]; /* bytes */
} s_scratch_t;
static pthread_key_t s_scratch_key;
static bool s_scratch_ok;
static char s_name[320] = "none (generated loops)";
static s_cblas_sgemm_t s_cblas_sgemm;
static s_cblas_dgemm_t s_cblas_dgemm;
/* A sequential OpenBLAS build without locking is not safe to call from several threads at
 * once: then calls take this lock (slower, still correct). */
static bool s_serialize;
static pthread_mutex_t s_call_lock = PTHREAD_MUTEX_INITIALIZER;
#if TROUPE_HAVE_LIBXSMM
/* libxsmm kernels first where it has them (measured faster: bench_gemm_libs), OpenBLAS for the
 * rest; off under TROUPE_GEMM=openblas. */
static bool s_use_xsmm;
#endif

#if TROUPE_HAVE_OPENBLAS
/* The OpenBLAS core matching this CPU's vector units, or NULL to let OpenBLAS decide. */
static const char *s_core_for_cpu(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

static void *s_open(const char *path, const char *core, bool *core_set)
{
    *core_set = false;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (lib != NULL)
        return lib; /* already in the process: its core is chosen */
    if (core != NULL && getenv("OPENBLAS_CORETYPE") == NULL) {
        *core_set = setenv("OPENBLAS_CORETYPE", core, 0) == 0;
    }
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (*core_set)
        unsetenv("OPENBLAS_CORETYPE"); /* the user's environment as it was */
    return lib;
}

#endif

static void s_scratch_free(void *p)
{
    s_scratch_t *sc = p;
    free(sc->buf[0]);
    free(sc->buf[1]);
    free(sc->buf[2]);
    free(sc->buf[3]);
    free(sc);
}

/* The calling thread's scratch buffer `which` of at least size_bytes, or NULL. */
static void *s_scratch(int which, size_t size_bytes)
{
    if (!s_scratch_ok)
        return NULL;
    s_scratch_t *sc = pthread_getspecific(s_scratch_key);
    if (sc == NULL) {
        sc = calloc(1, sizeof *sc);
        if (sc == NULL || pthread_setspecific(s_scratch_key, sc) != 0) {
            free(sc);
            return NULL;
        }
    }
    if (sc->cap[which] < size_bytes) {
        void *p = realloc(sc->buf[which], size_bytes);
        if (p == NULL)
            return NULL;
        sc->buf[which] = p;
        sc->cap[which] = size_bytes;
    }
    return sc->buf[which];
}

static void s_init(void)
{
    s_scratch_ok = pthread_key_create(&s_scratch_key, s_scratch_free) == 0;
#if TROUPE_HAVE_OPENBLAS
    /* The threaded build first: it is safe to call from several stream threads at once. */
    static const char *const paths[] = {
        TROUPE_OPENBLAS_PTHREAD_LIBDIR "/libopenblas.so.0",
        TROUPE_OPENBLAS_LIBDIR "/libopenblas.so.0",
        "libopenblas.so.0",
    };
    const char *core = s_core_for_cpu();
    void *lib = NULL;
    bool core_set = false;
    const char *path = NULL;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0] && lib == NULL; i++) {
        if (strcmp(paths[i], "/libopenblas.so.0") == 0)
            continue; /* a build-time directory that was not found */
        path = paths[i];
        lib = s_open(path, core, &core_set);
    }
    if (lib == NULL) {
        snprintf(s_name, sizeof s_name, "none (OpenBLAS not loadable: %s)", dlerror());
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES, "GEMM library: %s; generated loops run",
                   s_name);
        return;
    }
    void (*set_threads)(int) = NULL;
    char *(*get_config)(void) = NULL;
    char *(*get_core)(void) = NULL;
    int (*get_parallel)(void) = NULL;
    void *sym;
    /* POSIX: an object pointer from dlsym converts to a function pointer. */
    if ((sym = dlsym(lib, "openblas_set_num_threads")) != NULL)
        memcpy(&set_threads, &sym, sizeof sym);
    if ((sym = dlsym(lib, "openblas_get_config")) != NULL)
        memcpy(&get_config, &sym, sizeof sym);
    if ((sym = dlsym(lib, "openblas_get_corename")) != NULL)
        memcpy(&get_core, &sym, sizeof sym);
    if ((sym = dlsym(lib, "openblas_get_parallel")) != NULL)
        memcpy(&get_parallel, &sym, sizeof sym);
    void *sg = dlsym(lib, "cblas_sgemm"), *dg = dlsym(lib, "cblas_dgemm");
    if (sg == NULL || dg == NULL || set_threads == NULL) {
        snprintf(s_name, sizeof s_name, "none (%s lacks cblas_sgemm/cblas_dgemm)", path);
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_DEVICES, "GEMM library: %s; generated loops run",
                   s_name);
        dlclose(lib);
        return;
    }
    set_threads(1); /* a stream is one core (process-wide for OpenBLAS) */
    s_serialize = get_parallel != NULL && get_parallel() == 0;
    const char *corename = get_core ? get_core() : "?";
    snprintf(s_name, sizeof s_name, "OpenBLAS %s (%s; core %s%s; 1 thread per stream%s)",
             TROUPE_OPENBLAS_VERSION, path, corename ? corename : "?",
             core_set ? ", chosen by troupe" : "",
             s_serialize ? "; sequential build: calls serialised" : "");
    if (core != NULL && !core_set && corename != NULL && strcmp(corename, "Prescott") == 0)
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_DEVICES,
                   "GEMM library: OpenBLAS runs its generic Prescott kernels on a CPU with %s "
                   "(it was loaded before troupe, or OPENBLAS_CORETYPE says so); "
                   "OPENBLAS_CORETYPE=%s is about 4x faster",
                   strcmp(core, "SkylakeX") == 0 ? "AVX-512" : "AVX2", core);
#if TROUPE_HAVE_LIBXSMM
    s_use_xsmm = troupe_config_gemm_mode() == TROUPE_GEMM_MODE_LIBRARY;
    if (s_use_xsmm) {
        libxsmm_init();
        size_t len = strlen(s_name);
        snprintf(s_name + len, sizeof s_name - len, " with libxsmm %s kernels (%s) first",
                 LIBXSMM_VERSION, libxsmm_get_target_arch());
    }
#endif
    memcpy(&s_cblas_sgemm, &sg, sizeof sg);
    memcpy(&s_cblas_dgemm, &dg, sizeof dg);
    (void)get_config;
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES, "GEMM library: %s", s_name);
#endif
}

#if TROUPE_HAVE_LIBXSMM
/* A libxsmm kernel for the row-major product, or NULL when libxsmm has none (it lacks some
 * transposed forms). libxsmm is column-major: row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T, so the kernel takes (n, m, k), B first, and a transposed A is its
 * TRANS_B. Kernels are generated once per shape and cached by libxsmm (thread-safe). */
static libxsmm_smmfunction s_xsmm_kernel(int trans_a, int trans_b, int64_t m, int64_t n,
                                         int64_t k, float alpha, int64_t lda, int64_t ldb,
                                         float beta, int64_t ldc)
{
    if (beta != 0.0f && beta != 1.0f)
        return NULL;
    const libxsmm_blasint xm = (libxsmm_blasint)n, xn = (libxsmm_blasint)m,
                          xk = (libxsmm_blasint)k, xlda = (libxsmm_blasint)ldb,
                          xldb = (libxsmm_blasint)lda, xldc = (libxsmm_blasint)ldc;
    const int flags = (trans_b ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) |
                      (trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
    const int prefetch = LIBXSMM_PREFETCH_NONE;
    return libxsmm_smmdispatch(xm, xn, xk, &xlda, &xldb, &xldc, &alpha, &beta, &flags,
                               &prefetch);
}
#endif

#if TROUPE_HAVE_LIBXSMM
/* Most bytes of B^T s_sgemm_xsmm_bt copies: the linear layers' weights and attention's keys of
 * the GPT configurations troupe trains on one core are far below it; beyond it the copy would
 * leave the caches and OpenBLAS's own packing is the better deal. */
#define S_XSMM_BT_MAX_BYTES ((size_t)8 << 20)

/* Row-major C = A B^T (the forward pass of a linear layer, attention's q k^T), which libxsmm
 * 1.17 has no kernel for: B^T copied once into the thread's scratch by libxsmm's transposition
 * kernel, then libxsmm's A B kernel. The copy is exact, so the result is what that kernel gives
 * for the shape: bitwise the same run to run. Faster than OpenBLAS's A B^T on the GPT job's
 * shapes, the copy included (docs/gpt.md, "Speed"). False when libxsmm
 * has no A B kernel for the shape, B^T exceeds S_XSMM_BT_MAX_BYTES or no scratch memory. */
static bool s_sgemm_xsmm_bt(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                            int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                            int64_t ldc)
{
    const size_t bytes = (size_t)n * (size_t)k * sizeof(float);
    if (bytes == 0 || bytes > S_XSMM_BT_MAX_BYTES)
        return false;
    libxsmm_smmfunction f = s_xsmm_kernel(0, 0, m, n, k, alpha, lda, n, beta, ldc);
    if (f == NULL)
        return false;
    float *bt = s_scratch(2, bytes);
    if (bt == NULL)
        return false;
    /* B (n x k, row-major) is libxsmm's column-major k x n with leading dimension ldb; its
     * transpose, column-major n x k with leading dimension n, is row-major B^T (k x n). */
    libxsmm_otrans(bt, b, (unsigned int)sizeof(float), (libxsmm_blasint)k, (libxsmm_blasint)n,
                   (libxsmm_blasint)ldb, (libxsmm_blasint)n);
    f(bt, a, c);
    return true;
}

/* troupe_spack_bt_fn: B^T for a loop of shifted A B^T calls, packed once. NULL unless each
 * call would go through s_sgemm_xsmm_bt (libxsmm in use, no direct kernel for the transposed
 * form, an A B kernel for (m, n, k) with ldb = n), so that the A B calls on the pack run that
 * same kernel on the same values. */
static const float *s_spack_bt(int64_t m, int64_t n, int64_t k, int64_t kext, int64_t lda,
                               const float *b, int64_t ldb, float beta, int64_t ldc)
{
    if (!s_use_xsmm || m <= 0 || n <= 0 || k <= 0 || kext < k || kext > ldb)
        return NULL;
    const size_t bytes = (size_t)n * (size_t)kext * sizeof(float);
    if (bytes > S_XSMM_BT_MAX_BYTES)
        return NULL;
    if (s_xsmm_kernel(0, 1, m, n, k, 1.0f, lda, ldb, beta, ldc) != NULL ||
        s_xsmm_kernel(0, 0, m, n, k, 1.0f, lda, n, beta, ldc) == NULL)
        return NULL;
    float *bt = s_scratch(3, bytes);
    if (bt == NULL)
        return NULL;
    /* as s_sgemm_xsmm_bt, over kext columns of B instead of k */
    libxsmm_otrans(bt, b, (unsigned int)sizeof(float), (libxsmm_blasint)kext, (libxsmm_blasint)n,
                   (libxsmm_blasint)ldb, (libxsmm_blasint)n);
    return bt;
}
#endif

#if TROUPE_HAVE_LIBXSMM
/* troupe_sbrgemm_fn through libxsmm's batch-reduce kernel with byte offsets (column-major,
 * operands swapped as in s_xsmm_kernel: B's offsets are its A's). 0 unless s_sgemm would run
 * each call on libxsmm's A B kernel for the shape (s_use_xsmm, that kernel there). */
static int s_sbrgemm(int64_t m, int64_t n, int64_t k, int64_t count, const float *a,
                     int64_t lda, const int64_t *a_offs, const float *b, int64_t ldb,
                     const int64_t *b_offs, float *c, int64_t ldc)
{
    if (!s_use_xsmm || m <= 0 || n <= 0 || k <= 0 || count < 1 ||
        count > TROUPE_SBRGEMM_MAX_COUNT || lda < k || ldb < n || ldc < n)
        return 0;
    unsigned long long xa[TROUPE_SBRGEMM_MAX_COUNT], xb[TROUPE_SBRGEMM_MAX_COUNT];
    for (int64_t t = 0; t < count; t++) {
        if (a_offs[t] < 0 || b_offs[t] < 0)
            return 0;
        xa[t] = (unsigned long long)b_offs[t] * sizeof(float);
        xb[t] = (unsigned long long)a_offs[t] * sizeof(float);
    }
    if (s_xsmm_kernel(0, 0, m, n, k, 1.0f, lda, ldb, 1.0f, ldc) == NULL)
        return 0;
    const libxsmm_blasint xm = (libxsmm_blasint)n, xn = (libxsmm_blasint)m,
                          xk = (libxsmm_blasint)k, xlda = (libxsmm_blasint)ldb,
                          xldb = (libxsmm_blasint)lda, xldc = (libxsmm_blasint)ldc;
    const float one = 1.0f;
    const int flags = 0, prefetch = LIBXSMM_PREFETCH_NONE;
    libxsmm_smmfunction_reducebatch_offs f = libxsmm_smmdispatch_reducebatch_offs(
        xm, xn, xk, &xlda, &xldb, &xldc, &one, &one, &flags, &prefetch);
    if (f == NULL)
        return 0;
    const unsigned long long cnt = (unsigned long long)count;
    f(b, a, c, &cnt, xa, xb);
    return 1;
}
#endif

static void s_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc)
{
#if TROUPE_HAVE_LIBXSMM
    if (s_use_xsmm) {
        libxsmm_smmfunction f = s_xsmm_kernel(trans_a, trans_b, m, n, k, alpha, lda, ldb, beta,
                                              ldc);
        if (f != NULL) {
            f(b, a, c);
            return;
        }
        if (trans_b && !trans_a &&
            s_sgemm_xsmm_bt(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
            return;
    }
#endif
    if (s_serialize)
        pthread_mutex_lock(&s_call_lock);
    s_cblas_sgemm(S_ROW_MAJOR, trans_a ? S_TRANS : S_NO_TRANS, trans_b ? S_TRANS : S_NO_TRANS,
                  (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    if (s_serialize)
        pthread_mutex_unlock(&s_call_lock);
}

static void s_dgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                    double *c, int64_t ldc)
{
    if (s_serialize)
        pthread_mutex_lock(&s_call_lock);
    s_cblas_dgemm(S_ROW_MAJOR, trans_a ? S_TRANS : S_NO_TRANS, trans_b ? S_TRANS : S_NO_TRANS,
                  (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    if (s_serialize)
        pthread_mutex_unlock(&s_call_lock);
}

/* bfloat16 bits to single: exact (ir/prec.c; a NaN stays a NaN). */
static inline float s_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* op(X)[r][c] of a row-major operand with leading dimension ld, transposed or not. */
#define S_OP(x, trans, ld, r, c) ((trans) ? (x)[(c) * (ld) + (r)] : (x)[(r) * (ld) + (c)])

/* The bfloat16 product with the factors widened to single (exact) and the sgemm: for what
 * libxsmm has no kernel for. False when scratch memory cannot be had. */
static bool s_bgemm_widened(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                            const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                            float beta, float *c, int64_t ldc)
{
    float *wa = s_scratch(0, (size_t)(m * k) * sizeof(float));
    float *wb = s_scratch(1, (size_t)(k * n) * sizeof(float));
    if (wa == NULL || wb == NULL)
        return false;
    for (int64_t i = 0; i < m; i++)
        for (int64_t kk = 0; kk < k; kk++)
            wa[i * k + kk] = s_bf16_to_f32(S_OP(a, trans_a, lda, i, kk));
    for (int64_t kk = 0; kk < k; kk++)
        for (int64_t j = 0; j < n; j++)
            wb[kk * n + j] = s_bf16_to_f32(S_OP(b, trans_b, ldb, kk, j));
    s_sgemm(0, 0, m, n, k, 1.0f, wa, k, wb, n, beta, c, ldc);
    return true;
}

#if TROUPE_HAVE_LIBXSMM
/* The repacking (s_bgemm_xsmm) in one primitive: a transpose of 32-bit words, where a word
 * is a VNNI pair of two bfloat16 values along k. Row r of the source has `cols` words; word c
 * is s_word(r, c); it goes to dst[c * dld + r]. The words come from 16-bit rows either
 * directly (two neighbours in one row: src[r * sld + 2c], src[r * sld + 2c + 1]; rows_paired
 * false) or from two rows (src[2r * sld + c] low, src[(2r + 1) * sld + c] high; rows_paired:
 * interleaving rows 2r and 2r + 1). On x86-64 blocks of 8 x 8 words are moved through AVX2
 * registers (8 loads, 24 shuffles, 8 stores), and the edges word by word. The element-wise
 * loops this replaced read one element per cache line: the GPT "small" dW products took
 * 15-45 % longer with them (fc 7.5 ms against 6.2, an attention head's 20 us against 12). */
static inline uint32_t s_word(bool rows_paired, const uint16_t *src, int64_t sld, int64_t r,
                              int64_t c)
{
    if (rows_paired)
        return (uint32_t)src[2 * r * sld + c] | (uint32_t)src[(2 * r + 1) * sld + c] << 16;
    uint32_t w;
    memcpy(&w, src + r * sld + 2 * c, sizeof w);
    return w;
}

static void s_transpose_words_scalar(bool rows_paired, int64_t r0, int64_t r1, int64_t c0,
                                     int64_t c1, const uint16_t *src, int64_t sld,
                                     uint32_t *dst, int64_t dld)
{
    for (int64_t c = c0; c < c1; c++)
        for (int64_t r = r0; r < r1; r++)
            dst[c * dld + r] = s_word(rows_paired, src, sld, r, c);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Rows r0..r0+7, words c0..c0+7 through registers; rows of the result are 8 words apart. */
__attribute__((target("avx2"), always_inline)) static inline void
s_block8(bool rows_paired, int64_t r0, int64_t c0, const uint16_t *src, int64_t sld,
         uint32_t *dst, int64_t dld)
{
    __m256 r[8], t[8], u[8];
    for (int q = 0; q < 8; q++) {
        __m256i w;
        if (rows_paired) { /* words c0..c0+7 of row r0+q: rows 2(r0+q), 2(r0+q)+1 interleaved */
            const uint16_t *lo = src + 2 * (r0 + q) * sld + c0, *hi = lo + sld;
            __m128i l = _mm_loadu_si128((const __m128i *)lo);
            __m128i h = _mm_loadu_si128((const __m128i *)hi);
            w = _mm256_set_m128i(_mm_unpackhi_epi16(l, h), _mm_unpacklo_epi16(l, h));
        } else {
            w = _mm256_loadu_si256((const __m256i *)(src + (r0 + q) * sld + 2 * c0));
        }
        r[q] = _mm256_castsi256_ps(w);
    }
    for (int q = 0; q < 8; q += 2) {
        t[q] = _mm256_unpacklo_ps(r[q], r[q + 1]);
        t[q + 1] = _mm256_unpackhi_ps(r[q], r[q + 1]);
    }
    for (int q = 0; q < 8; q += 4) {
        u[q] = _mm256_shuffle_ps(t[q], t[q + 2], 0x44);
        u[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], 0xEE);
        u[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0x44);
        u[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0xEE);
    }
    for (int q = 0; q < 4; q++) {
        _mm256_storeu_ps((float *)(dst + (c0 + q) * dld + r0),
                         _mm256_permute2f128_ps(u[q], u[q + 4], 0x20));
        _mm256_storeu_ps((float *)(dst + (c0 + q + 4) * dld + r0),
                         _mm256_permute2f128_ps(u[q], u[q + 4], 0x31));
    }
}

__attribute__((target("avx2"), always_inline)) static inline void
s_transpose_words_avx2(bool rows_paired, int64_t rows, int64_t cols, const uint16_t *src,
                       int64_t sld, uint32_t *dst, int64_t dld)
{
    const int64_t r8 = rows & ~(int64_t)7, c8 = cols & ~(int64_t)7;
    /* 64 x 64 words at a time: the destination rows being filled stay in L1 */
    for (int64_t rb = 0; rb < r8; rb += 64)
        for (int64_t cb = 0; cb < c8; cb += 64) {
            const int64_t re = rb + 64 < r8 ? rb + 64 : r8, ce = cb + 64 < c8 ? cb + 64 : c8;
            for (int64_t r0 = rb; r0 < re; r0 += 8)
                for (int64_t c0 = cb; c0 < ce; c0 += 8)
                    s_block8(rows_paired, r0, c0, src, sld, dst, dld);
        }
    s_transpose_words_scalar(rows_paired, r8, rows, 0, cols, src, sld, dst, dld);
    s_transpose_words_scalar(rows_paired, 0, r8, c8, cols, src, sld, dst, dld);
}

/* The two kinds of source, each compiled with its own branch folded away. */
__attribute__((target("avx2"))) static void s_transpose_pairs_avx2(int64_t rows, int64_t cols,
                                                                   const uint16_t *src,
                                                                   int64_t sld, uint32_t *dst,
                                                                   int64_t dld)
{
    s_transpose_words_avx2(true, rows, cols, src, sld, dst, dld);
}

__attribute__((target("avx2"))) static void s_transpose_rows_avx2(int64_t rows, int64_t cols,
                                                                  const uint16_t *src,
                                                                  int64_t sld, uint32_t *dst,
                                                                  int64_t dld)
{
    s_transpose_words_avx2(false, rows, cols, src, sld, dst, dld);
}
#endif

static void s_transpose_words(bool rows_paired, int64_t rows, int64_t cols,
                              const uint16_t *src, int64_t sld, uint32_t *dst, int64_t dld)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) {
        if (rows_paired)
            s_transpose_pairs_avx2(rows, cols, src, sld, dst, dld);
        else
            s_transpose_rows_avx2(rows, cols, src, sld, dst, dld);
        return;
    }
#endif
    s_transpose_words_scalar(rows_paired, 0, rows, 0, cols, src, sld, dst, dld);
}

/* op(B) (k x n) in libxsmm's VNNI layout: word j of pair row p = kk / 2 is op(B)[kk][j] in its
 * low half and op(B)[kk + 1][j] (0 past k) in its high half (little-endian: the lower
 * address). `va` holds (k + 1) / 2 rows of n words. */
static void s_pack_vnni(int trans_b, int64_t n, int64_t k, const uint16_t *b, int64_t ldb,
                        uint32_t *va)
{
    const int64_t pairs = k / 2;
    if (!trans_b) {
        for (int64_t p = 0; p < pairs; p++) {
            const uint16_t *b0 = b + 2 * p * ldb, *b1 = b0 + ldb;
            uint32_t *row = va + p * n;
            int64_t j = 0;
#if defined(__x86_64__) && defined(__GNUC__)
            for (; j + 8 <= n; j += 8) { /* SSE2: in every x86-64 */
                __m128i l = _mm_loadu_si128((const __m128i *)(b0 + j));
                __m128i h = _mm_loadu_si128((const __m128i *)(b1 + j));
                _mm_storeu_si128((__m128i *)(row + j), _mm_unpacklo_epi16(l, h));
                _mm_storeu_si128((__m128i *)(row + j + 4), _mm_unpackhi_epi16(l, h));
            }
#endif
            for (; j < n; j++)
                row[j] = (uint32_t)b0[j] | (uint32_t)b1[j] << 16;
        }
    } else { /* B is stored n x k: a pair is one (unaligned) word of row j */
        s_transpose_words(false, n, pairs, b, ldb, va, n);
    }
    if (k & 1)
        for (int64_t j = 0; j < n; j++)
            va[pairs * n + j] = trans_b ? b[j * ldb + k - 1] : b[(k - 1) * ldb + j];
}

/* libxsmm's bf16 kernel (column-major, A in VNNI pairs along k, k even): row-major
 * C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. Its A is op(B)^T (n x k) packed as
 * [k/2][n][2]; its B is op(A)^T (k x m, k contiguous): A itself when untransposed with k even,
 * else a packed copy (a transposed A through the blocked transpose). An odd k is padded with
 * a zero pair member (adds exact zeros). One kernel takes the whole product: tiles of C of
 * 128 to 512 rows or columns, each a kernel call on the same packed operands, measured no
 * faster on the GPT "small" shapes (n up to 1536, k up to 1536). False when libxsmm has no
 * kernel for the shape or no scratch memory. */
static bool s_bgemm_xsmm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                         const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                         float beta, float *c, int64_t ldc)
{
    if (beta != 0.0f && beta != 1.0f)
        return false;
    const int64_t kp = k + (k & 1);
    /* the kernel reads B in pairs along k: a row must start on a pair (lda even) */
    const bool a_direct = !trans_a && (k & 1) == 0 && (lda & 1) == 0;
    const libxsmm_blasint xm = (libxsmm_blasint)n, xn = (libxsmm_blasint)m,
                          xk = (libxsmm_blasint)kp, xlda = (libxsmm_blasint)n,
                          xldb = (libxsmm_blasint)(a_direct ? lda : kp),
                          xldc = (libxsmm_blasint)ldc;
    const float alpha = 1.0f;
    const int flags = LIBXSMM_GEMM_FLAG_VNNI_A, prefetch = LIBXSMM_PREFETCH_NONE;
    libxsmm_bsmmfunction f = libxsmm_bsmmdispatch(xm, xn, xk, &xlda, &xldb, &xldc, &alpha,
                                                  &beta, &flags, &prefetch);
    if (f == NULL)
        return false;
    uint32_t *va = s_scratch(0, (size_t)(kp * n) * sizeof(uint16_t));
    uint16_t *vb = a_direct ? NULL : s_scratch(1, (size_t)(kp * m) * sizeof(uint16_t));
    if (va == NULL || (!a_direct && vb == NULL))
        return false;
    s_pack_vnni(trans_b, n, k, b, ldb, va);
    if (trans_a) { /* vb[i * kp + kk] = A[kk * lda + i]: rows kk, kk + 1 of A interleaved */
        uint32_t *w = (uint32_t *)vb;
        s_transpose_words(true, k / 2, m, a, lda, w, kp / 2);
        if (k & 1)
            for (int64_t i = 0; i < m; i++)
                w[i * (kp / 2) + k / 2] = a[(k - 1) * lda + i];
    } else if (!a_direct) {
        for (int64_t i = 0; i < m; i++)
            memcpy(vb + i * kp, a + i * lda, (size_t)k * sizeof(uint16_t));
    }
    if (!trans_a && !a_direct && kp != k) /* the pad after an odd k */
        for (int64_t i = 0; i < m; i++)
            vb[i * kp + k] = 0;
    f((const libxsmm_bfloat16 *)va, (const libxsmm_bfloat16 *)(a_direct ? a : vb), c);
    return true;
}
#endif

static void s_bgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                    const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb, float beta,
                    float *c, int64_t ldc)
{
#if TROUPE_HAVE_LIBXSMM
    if (s_use_xsmm && s_bgemm_xsmm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc))
        return;
#endif
    if (s_bgemm_widened(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc))
        return;
    /* no scratch memory: the product element by element, each term exact, sums in order */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float v = beta == 0.0f ? 0.0f : c[i * ldc + j];
            for (int64_t kk = 0; kk < k; kk++)
                v += s_bf16_to_f32(S_OP(a, trans_a, lda, i, kk)) *
                     s_bf16_to_f32(S_OP(b, trans_b, ldb, kk, j));
            c[i * ldc + j] = v;
        }
}

bool troupe_gemm_library_available(void)
{
    pthread_once(&s_once, s_init);
    return s_cblas_sgemm != NULL;
}

const char *troupe_gemm_library_name(void)
{
    pthread_once(&s_once, s_init);
    return s_name;
}

troupe_sgemm_fn troupe_gemm_library_sgemm(void)
{
    pthread_once(&s_once, s_init);
    return s_cblas_sgemm ? s_sgemm : NULL;
}

troupe_dgemm_fn troupe_gemm_library_dgemm(void)
{
    pthread_once(&s_once, s_init);
    return s_cblas_dgemm ? s_dgemm : NULL;
}

troupe_bgemm_fn troupe_gemm_library_bgemm(void)
{
    pthread_once(&s_once, s_init);
    return s_cblas_sgemm ? s_bgemm : NULL;
}

/* Every half's single value (ir/prec.c's exact decoder), built once: one load per widened
 * element instead of the decoder's branches (the widening is most of a half GEMM's cost). */
static float *s_half_table;
static pthread_once_t s_half_once = PTHREAD_ONCE_INIT;

static void s_half_table_init(void)
{
    float *t = malloc(65536 * sizeof *t);
    if (t == NULL)
        return;
    for (uint32_t h = 0; h < 65536; h++)
        t[h] = troupe_half_to_single((uint16_t)h);
    s_half_table = t;
}

static inline float s_h2f(const float *table, uint16_t h)
{
    return table != NULL ? table[h] : troupe_half_to_single(h);
}

/* Half factors (troupe_hgemm_fn): widened to single exactly and handed to the sgemm; without
 * scratch memory, element by element (each term exact, the sums in order). libxsmm has no CPU
 * fp16 kernel worth using here: this CPU has no fp16 dot product, so it would convert too. */
static void s_hgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                    int64_t lda, const uint16_t *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    pthread_once(&s_half_once, s_half_table_init);
    const float *tab = s_half_table;
    float *wa = s_scratch(0, (size_t)(m * k) * sizeof(float));
    float *wb = s_scratch(1, (size_t)(k * n) * sizeof(float));
    if (wa != NULL && wb != NULL) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t kk = 0; kk < k; kk++)
                wa[i * k + kk] = s_h2f(tab, S_OP(a, trans_a, lda, i, kk));
        for (int64_t kk = 0; kk < k; kk++)
            for (int64_t j = 0; j < n; j++)
                wb[kk * n + j] = s_h2f(tab, S_OP(b, trans_b, ldb, kk, j));
        s_sgemm(0, 0, m, n, k, 1.0f, wa, k, wb, n, beta, c, ldc);
        return;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float v = beta == 0.0f ? 0.0f : c[i * ldc + j];
            for (int64_t kk = 0; kk < k; kk++)
                v += s_h2f(tab, S_OP(a, trans_a, lda, i, kk)) *
                     s_h2f(tab, S_OP(b, trans_b, ldb, kk, j));
            c[i * ldc + j] = v;
        }
}

troupe_hgemm_fn troupe_gemm_library_hgemm(void)
{
    pthread_once(&s_once, s_init);
    return s_cblas_sgemm ? s_hgemm : NULL;
}

troupe_sbrgemm_fn troupe_gemm_library_sbrgemm(void)
{
    pthread_once(&s_once, s_init);
#if TROUPE_HAVE_LIBXSMM
    return s_cblas_sgemm && s_use_xsmm ? s_sbrgemm : NULL;
#else
    return NULL;
#endif
}

troupe_spack_bt_fn troupe_gemm_library_spack_bt(void)
{
    pthread_once(&s_once, s_init);
#if TROUPE_HAVE_LIBXSMM
    return s_cblas_sgemm && s_use_xsmm ? s_spack_bt : NULL;
#else
    return NULL;
#endif
}
