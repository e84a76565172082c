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

static void s_init(void)
{
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
