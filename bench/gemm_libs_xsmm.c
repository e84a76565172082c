/* troupe — bench_gemm_libs: the libxsmm adapter (gemm_libs.h), a JIT kernel from
 * libxsmm_smmdispatch per shape (libxsmm's own code: libxsmm_sgemm would hand shapes above its
 * threshold to the BLAS it is linked with).
 *
 * libxsmm is column-major: the row-major C = op(A) op(B) is the column-major
 * C^T = op(B)^T op(A)^T, so the kernel gets (m, n) = (n, m), B as its first operand and A as
 * its second, and a row-major transpose of A is libxsmm's TRANS_B (of B, its TRANS_A). */
#include "bench/gemm_libs.h"
#include "bench/bench_util.h"

#include <libxsmm.h>
#include <stdio.h>
#include <stdlib.h>

static void s_identify(void)
{
    libxsmm_init();
    char extra[128];
    snprintf(extra, sizeof extra, "arch=%s threads=1(per-call)", libxsmm_get_target_arch());
    troupe_bench_print_library("libxsmm", LIBXSMM_VERSION, extra);
}

typedef struct s_plan {
    libxsmm_smmfunction kernel;
} s_plan_t;

static const char *s_prepare(const troupe_bench_gemm_t *g, void **plan)
{
    *plan = NULL;
    const libxsmm_blasint m = g->n, n = g->m, k = g->k;
    const libxsmm_blasint lda = g->ldb, ldb = g->lda, ldc = g->ldc;
    const float alpha = 1.0f, beta = g->beta;
    const int flags =
        (g->trans_b ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (g->trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
    const int prefetch = LIBXSMM_PREFETCH_NONE;
    libxsmm_smmfunction f =
        libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
    if (!f)
        return "no-jit-kernel";
    s_plan_t *p = malloc(sizeof *p);
    if (!p)
        return "out-of-memory";
    p->kernel = f;
    *plan = p;
    return NULL;
}

static void s_run(const troupe_bench_gemm_t *g, void *plan)
{
    const s_plan_t *p = plan;
    p->kernel(g->b, g->a, g->c);
}

static void s_release(void *plan)
{
    free(plan);
}

const troupe_bench_gemm_lib_t troupe_bench_gemm_libxsmm = {"libxsmm", s_identify, s_prepare, s_run,
                                                           s_release};
