/* troupe — bench_gemm_libs' adapters: one single-threaded sgemm call per GEMM library, each in
 * its own source file because the libraries' headers clash (OpenBLAS's and BLIS's both declare
 * the CBLAS interface; both libraries export cblas_sgemm, so only OpenBLAS's is called by that
 * name, BLIS through its native bli_sgemm and libxsmm through its JIT dispatch).
 *
 * A call is row-major, as troupe lays arrays out:
 *   C[m x n] = beta C + op(A) op(B),   op(A) is m x k, op(B) is k x n,
 * with op(X) = X, or X^T when trans_x (then A is stored k x m, B n x k). lda, ldb, ldc are the
 * row strides in elements.
 *
 * Thread safety: prepare and release from one thread; run may be called from several threads
 * at once on different operands when the library is (the benchmark checks it).
 * Ownership: a plan belongs to the caller until release; operands are borrowed.
 */
#ifndef TROUPE_BENCH_GEMM_LIBS_H
#define TROUPE_BENCH_GEMM_LIBS_H

#include <stdbool.h>

typedef struct troupe_bench_gemm {
    bool trans_a, trans_b;
    int m, n, k;
    const float *a, *b;
    float *c;
    int lda, ldb, ldc;
    float beta;
} troupe_bench_gemm_t;

typedef struct troupe_bench_gemm_lib {
    const char *name;
    /* Sets the library to one thread and prints its facts line (troupe_bench_print_library). */
    void (*identify)(void);
    /* Prepares g's shape (libxsmm: generates the kernel) into *plan; NULL on success, else a
     * short reason the library cannot take the call (printed as `skipped=`). */
    const char *(*prepare)(const troupe_bench_gemm_t *g, void **plan);
    /* One multiplication with g's operands (another call of the same shape may pass other
     * operands and the same plan). */
    void (*run)(const troupe_bench_gemm_t *g, void *plan);
    /* Releases a plan (NULL is fine). */
    void (*release)(void *plan);
} troupe_bench_gemm_lib_t;

extern const troupe_bench_gemm_lib_t troupe_bench_gemm_openblas;
extern const troupe_bench_gemm_lib_t troupe_bench_gemm_blis;
extern const troupe_bench_gemm_lib_t troupe_bench_gemm_libxsmm;

#endif
