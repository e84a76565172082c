/* troupe — the tuned GEMM library behind generated CPU code (see gemm_library.h). */
#include "devices/host/gemm_library.h"

#include "troupe_config.h"

#include <pthread.h>
#include <stdio.h>

#if TROUPE_HAVE_OPENBLAS
#include <cblas.h>

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static char s_name[256];

static void s_init(void)
{
    openblas_set_num_threads(1);
    const char *config = openblas_get_config();
    const char *core = openblas_get_corename();
    snprintf(s_name, sizeof s_name, "OpenBLAS %s (%s; core %s; 1 thread per stream)",
             TROUPE_OPENBLAS_VERSION, config ? config : "?", core ? core : "?");
}

static void s_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

static void s_dgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                    double *c, int64_t ldc)
{
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

bool troupe_gemm_library_available(void)
{
    return true;
}

const char *troupe_gemm_library_name(void)
{
    pthread_once(&s_once, s_init);
    return s_name;
}

troupe_sgemm_fn troupe_gemm_library_sgemm(void)
{
    pthread_once(&s_once, s_init);
    return s_sgemm;
}

troupe_dgemm_fn troupe_gemm_library_dgemm(void)
{
    pthread_once(&s_once, s_init);
    return s_dgemm;
}

#else /* no GEMM library */

bool troupe_gemm_library_available(void)
{
    return false;
}

const char *troupe_gemm_library_name(void)
{
    return "none (generated loops)";
}

troupe_sgemm_fn troupe_gemm_library_sgemm(void)
{
    return NULL;
}

troupe_dgemm_fn troupe_gemm_library_dgemm(void)
{
    return NULL;
}

#endif
