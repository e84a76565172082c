/* troupe — bench_gemm_libs: the OpenBLAS adapter (gemm_libs.h), cblas_sgemm row-major. */
#include "bench/gemm_libs.h"
#include "bench/openblas_peer.h"

#include <cblas.h>

static const char *s_prepare(const troupe_bench_gemm_t *g, void **plan)
{
    (void)g;
    *plan = NULL;
    return NULL;
}

static void s_run(const troupe_bench_gemm_t *g, void *plan)
{
    (void)plan;
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                g->trans_b ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, 1.0f, g->a, g->lda, g->b,
                g->ldb, g->beta, g->c, g->ldc);
}

static void s_release(void *plan)
{
    (void)plan;
}

const troupe_bench_gemm_lib_t troupe_bench_gemm_openblas = {
    "openblas", troupe_bench_openblas_identify, s_prepare, s_run, s_release};
