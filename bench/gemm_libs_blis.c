/* troupe — bench_gemm_libs: the BLIS adapter (gemm_libs.h), the typed API bli_sgemm with row
 * and column strides (row-major: row stride ld, column stride 1; a transpose is a flag). */
#define _POSIX_C_SOURCE 200809L /* blis.h uses pthread_barrier_t */
#include "bench/gemm_libs.h"
#include "bench/bench_util.h"

#include <blis.h>
#include <stdio.h>
#include <stdlib.h>

/* BLIS picks its sub-configuration once, at bli_init, from the CPU or from BLIS_ARCH_TYPE (an
 * arch_t number in BLIS 0.9). BLIS 0.9.0 does not recognise every AVX-512 Xeon (it takes
 * haswell, the AVX2 kernels, on model 0xCF), so when the variable is unset and the CPU has
 * AVX-512F this sets it to skx first: each library is measured with the best kernels it has. */
static void s_identify(void)
{
    const char *env = getenv("BLIS_ARCH_TYPE");
    const char *how = "env";
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if ((!env || !env[0]) && __builtin_cpu_supports("avx512f")) {
        char id[16];
        snprintf(id, sizeof id, "%d", (int)BLIS_ARCH_SKX);
        setenv("BLIS_ARCH_TYPE", id, 1);
        how = "set-by-bench(cpu-has-avx512f)";
    }
#endif
    env = getenv("BLIS_ARCH_TYPE");
    bli_init();
    char extra[256];
    snprintf(extra, sizeof extra, "arch=%s arch_env=%s%s%s threading=%s threads=%ld",
             bli_arch_string(bli_arch_query_id()), env && env[0] ? env : "unset",
             env && env[0] ? "," : "", env && env[0] ? how : "",
             bli_info_get_enable_threading() ? "on" : "off(serial)",
             (long)bli_thread_get_num_threads());
    troupe_bench_print_library("blis", bli_info_get_version_str(), extra);
}

static const char *s_prepare(const troupe_bench_gemm_t *g, void **plan)
{
    (void)g;
    *plan = NULL;
    return NULL;
}

static void s_run(const troupe_bench_gemm_t *g, void *plan)
{
    (void)plan;
    float one = 1.0f, beta = g->beta;
    bli_sgemm(g->trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
              g->trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, g->m, g->n, g->k, &one,
              (float *)g->a, g->lda, 1, (float *)g->b, g->ldb, 1, &beta, g->c, g->ldc, 1);
}

static void s_release(void *plan)
{
    (void)plan;
}

const troupe_bench_gemm_lib_t troupe_bench_gemm_blis = {"blis", s_identify, s_prepare, s_run,
                                                        s_release};
