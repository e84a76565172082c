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
 * factors (s_bgemm), buffer 2 for a transposed single factor (s_sgemm_xsmm_bt). */
typedef struct s_scratch {
    void *buf[3];
    size_t cap[3]; /* bytes */
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
/* libxsmm's bf16 kernel (column-major, A in VNNI pairs along k, k even): row-major
 * C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. Its A is op(B)^T (n x k) packed as
 * [k/2][n][2]; its B is op(A)^T (k x m, k contiguous): A itself when untransposed with k even,
 * else a packed copy. An odd k is padded with a zero pair member (adds exact zeros). False
 * when libxsmm has no kernel for the shape or no scratch memory. */
static bool s_bgemm_xsmm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                         const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                         float beta, float *c, int64_t ldc)
{
    if (beta != 0.0f && beta != 1.0f)
        return false;
    const int64_t kp = k + (k & 1);
    const bool a_direct = !trans_a && (k & 1) == 0;
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
    uint16_t *va = s_scratch(0, (size_t)(kp * n) * sizeof(uint16_t));
    uint16_t *vb = a_direct ? NULL : s_scratch(1, (size_t)(kp * m) * sizeof(uint16_t));
    if (va == NULL || (!a_direct && vb == NULL))
        return false;
    for (int64_t kk = 0; kk < kp; kk += 2) {
        uint16_t *row = va + kk * n; /* the pair (kk, kk + 1): [j][2] */
        const bool two = kk + 1 < k;
        if (!trans_b) {
            const uint16_t *b0 = b + kk * ldb, *b1 = two ? b0 + ldb : NULL;
            for (int64_t j = 0; j < n; j++) {
                row[2 * j] = b0[j];
                row[2 * j + 1] = two ? b1[j] : 0;
            }
        } else {
            for (int64_t j = 0; j < n; j++) {
                row[2 * j] = b[j * ldb + kk];
                row[2 * j + 1] = two ? b[j * ldb + kk + 1] : 0;
            }
        }
    }
    if (!a_direct)
        for (int64_t i = 0; i < m; i++) {
            for (int64_t kk = 0; kk < k; kk++)
                vb[i * kp + kk] = S_OP(a, trans_a, lda, i, kk);
            if (kp != k)
                vb[i * kp + k] = 0;
        }
    f(va, a_direct ? a : vb, c);
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
