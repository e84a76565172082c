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
 * The libraries, chosen by measurement (bench_gemm_libs, issue 14): libxsmm's JIT kernels
 * (linked when found, TROUPE_HAVE_LIBXSMM) for the forms it has, 1.1-1.7x faster than OpenBLAS
 * on the main job's shapes on an AVX-512 core; OpenBLAS (found at build time by pkg-config,
 * loaded at run time with dlopen, the threaded build first) for the rest (double precision;
 * TROUPE_GEMM=openblas). libxsmm 1.17 has no single row-major A B^T kernel: that form copies
 * B^T (up to 8 MiB) into a per-thread scratch with libxsmm's transposition and runs its A B
 * kernel, faster than OpenBLAS's A B^T on the GPT job's shapes (docs/gpt.md); larger B^T go to
 * OpenBLAS. Without OpenBLAS troupe builds
 * and generated code keeps its loops. A stream is one core (docs/architecture.md §1 (devices)): OpenBLAS is made
 * single-threaded when first used (openblas_set_num_threads(1), process-wide), libxsmm kernels
 * run in the calling thread, and concurrent calls from several stream threads are safe (both
 * libraries checked from two threads at once by bench_gemm_libs). Results are bitwise the same
 * run to run for a fixed library and shape.
 *
 * Thread safety: all functions are thread-safe.
 * Ownership: nothing is allocated for the caller; the name is static storage; a pack
 * (troupe_spack_bt_fn) is the calling thread's scratch, freed when the thread ends.
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

/* bfloat16 factors (uint16_t bits, ir/prec.h) into a single-precision C, alpha 1, beta 0 or 1:
 * each product of two bfloat16 values is exact in single precision and the sums are single
 * (fp32 accumulation), so only their order differs from the generated loops. libxsmm's bf16
 * kernels (AVX512_BF16 VDPBF16PS, or its emulation) on operands repacked to its VNNI layout
 * once per call (AVX2 transposes of 8 x 8 pairs; A read in place when untransposed with k and
 * lda even); where libxsmm has none, the factors widened to single and the sgemm above. */
typedef void (*troupe_bgemm_fn)(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                                float beta, float *c, int64_t ldc);

/* IEEE binary16 factors (uint16_t bits, ir/prec.h) into a single-precision C, alpha 1, beta 0 or
 * 1: as troupe_bgemm_fn (each product of two halves is exact in single, fp32 sums). The factors
 * widened to single and the sgemm: libxsmm has no CPU fp16 kernel worth using (no native fp16
 * dot product on this CPU; its fp16 path converts as this does). */
typedef void (*troupe_hgemm_fn)(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                                float beta, float *c, int64_t ldc);

/* B^T packed once for a loop of calls sgemm(0, 1, m, n, k, 1, a, lda, b + off, ldb, beta, c,
 * ldc) whose B differ only by a shift 0 <= off <= kext - k along k (a convolution's weight
 * gradient as shifted products, docs/trainer.md): B's n x kext block (row j at b + j*ldb)
 * transposed into the calling thread's pack scratch, kext x n with leading dimension n. Then
 * sgemm(0, 0, m, n, k, 1, a, lda, bt + off*n, n, beta, c, ldc) gives each call's result bit for
 * bit (the kernel and the transposed values the call would use). Valid until the thread's next
 * pack. NULL when the calls would not run that way (no libxsmm, its A B kernel missing for the
 * shape, the block past the transposition's size limit, kext > ldb, no memory): then make the
 * calls as they are. */
typedef const float *(*troupe_spack_bt_fn)(int64_t m, int64_t n, int64_t k, int64_t kext,
                                           int64_t lda, const float *b, int64_t ldb, float beta,
                                           int64_t ldc);

/* A batch-reduce product: C += sum over t < count of A_t B_t, with A_t = a + a_offs[t] and
 * B_t = b + b_offs[t] (element offsets, each >= 0), all untransposed, row-major m x k, k x n
 * and m x n with leading dimensions lda, ldb, ldc, alpha = beta = 1: the calls
 * sgemm(0, 0, m, n, k, 1, A_t, lda, B_t, ldb, 1, c, ldc) for t = 0, 1, ... in one (a
 * convolution's forward as shifted products sums its kernel offsets into one output block,
 * docs/trainer.md). libxsmm's batch-reduce kernel keeps the block of C in registers across
 * the batch and adds each product's k terms in the order the single-product kernel does, so
 * the result is bit for bit that of the calls (measured on the convolution shapes; tests
 * check it). Returns 0 when it cannot (no libxsmm in use, no kernel for the shape, count
 * above TROUPE_SBRGEMM_MAX_COUNT, a bad argument): then make the calls as they are. */
#define TROUPE_SBRGEMM_MAX_COUNT 1024
typedef int (*troupe_sbrgemm_fn)(int64_t m, int64_t n, int64_t k, int64_t count,
                                 const float *a, int64_t lda, const int64_t *a_offs,
                                 const float *b, int64_t ldb, const int64_t *b_offs, float *c,
                                 int64_t ldc);

/* Whether troupe was built with a GEMM library. */
bool troupe_gemm_library_available(void);

/* "OpenBLAS 0.3.21 (<config>, core <name>, 1 thread)" or "none (generated loops)". */
const char *troupe_gemm_library_name(void);

/* The entries handed to generated code; NULL when no library was built in. The first call makes
 * the library single-threaded. */
troupe_sgemm_fn troupe_gemm_library_sgemm(void);
troupe_dgemm_fn troupe_gemm_library_dgemm(void);
troupe_bgemm_fn troupe_gemm_library_bgemm(void);
troupe_hgemm_fn troupe_gemm_library_hgemm(void);
/* The pack and batch-reduce entries handed to generated code (the loader sets them as hooks);
 * NULL when libxsmm is not the library in use (not built in, or TROUPE_GEMM=openblas), where
 * the generated code makes its calls one by one. */
troupe_spack_bt_fn troupe_gemm_library_spack_bt(void);
troupe_sbrgemm_fn troupe_gemm_library_sbrgemm(void);

#ifdef __cplusplus
}
#endif
#endif
