/* troupe — the tuned GEMM library behind generated CPU code (issue 14; compiler/gemm.h).
 *
 * Generated C calls matrix products that compiler/gemm recognises through two function
 * pointers the host driver hands to each loaded routine (`<routine>_gemm_hooks`, see
 * compiler/cgen); these are they. They take the row-major form of compiler/gemm.h:
 *
 *     C[i*ldc + j] = alpha * sum_k op(A)[i,k] * op(B)[k,j] + beta * C[i*ldc + j]
 *
 * with i < m, j < n, k < kk; op(A)[i,k] = A[i*lda + k], or A[k*lda + i] when trans_a; likewise
 * B ([k*ldb + j], or [j*ldb + k] when trans_b). Extents and leading dimensions in elements.
 *
 * The library is found at build time by pkg-config (OpenBLAS, `openblas`); without it troupe
 * builds and generated code keeps its loops. A stream is one core (DESIGN.md §7): the library
 * is made single-threaded when first used (openblas_set_num_threads(1), which is process-wide
 * for OpenBLAS), and concurrent calls from several stream threads are safe.
 *
 * Thread safety: all functions are thread-safe.
 * Ownership: nothing is allocated for the caller; the name is static storage.
 */
#ifndef TROUPE_DEVICES_HOST_GEMM_LIBRARY_H
#define TROUPE_DEVICES_HOST_GEMM_LIBRARY_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*troupe_sgemm_fn)(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                float alpha, const float *a, int64_t lda, const float *b,
                                int64_t ldb, float beta, float *c, int64_t ldc);
typedef void (*troupe_dgemm_fn)(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                double alpha, const double *a, int64_t lda, const double *b,
                                int64_t ldb, double beta, double *c, int64_t ldc);

/* Whether troupe was built with a GEMM library. */
bool troupe_gemm_library_available(void);

/* "OpenBLAS 0.3.21 (<config>, core <name>, 1 thread)" or "none (generated loops)". */
const char *troupe_gemm_library_name(void);

/* The entries handed to generated code; NULL when no library was built in. The first call makes
 * the library single-threaded. */
troupe_sgemm_fn troupe_gemm_library_sgemm(void);
troupe_dgemm_fn troupe_gemm_library_dgemm(void);

#ifdef __cplusplus
}
#endif
#endif
