/* troupe — recognising matrix products in the low-level IR (docs/architecture.md §1 (the IR and compiler) "GEMMs"; issue 14).
 *
 * troupe_gemm_match looks at one FOR statement of an optimized procedure and says whether the
 * perfectly nested three loops it opens compute a matrix product that a tuned GEMM library
 * can take:
 *
 *     for i < m: for k < kk: for j < n:      (the three loops in any order, from 0)
 *         C[c(i, j)] = fma(A[a(i, k)], B[b(k, j)], C[c(i, j)])    (or C + A*B, or A*B + C)
 *
 * where every access is an affine map of the loop symbols (plus any outer iterators and static
 * indices, which only move the operands' base addresses), C's innermost-varying symbol has unit
 * stride, and each of A and B has unit stride along one of its two symbols (untransposed or
 * transposed), with leading dimensions at least the extent they step over. This covers the
 * forward product "bi,ij=>bj", the backward products "bi,bj=>ij" and "bj,ji=>bi", batched forms
 * (the batch loop stays outside the call: its iterator moves the base addresses), slices of
 * larger arrays (any leading strides) and accumulation into existing values (beta = 1). When C's
 * unit-stride symbol is the row rather than the column, the product is computed transposed
 * (C^T = B^T A^T), which is the same arithmetic.
 *
 * The result is normalised to a row-major call: C[i*ldc + j] += sum_k op(A)[i,k] * op(B)[k,j],
 * with op(A)[i,k] at A[i*lda + k] (trans_a false) or A[k*lda + i] (trans_a true), likewise B.
 * Code generators emit a call with the generated loops kept as the fallback; the reference
 * interpreter never uses it, so the library path and the loops agree within float rounding,
 * not bit for bit (the library sums in another order).
 *
 * Thread safety: reads the procedure only.
 * Ownership: the result borrows the statement's nodes and index arrays.
 */
#ifndef TROUPE_COMPILER_GEMM_H
#define TROUPE_COMPILER_GEMM_H

#include "ir/lowlevel.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Below this many multiply-adds (m*n*k) a call costs more than the loops (measured with
 * bench_matmul on the development machine); such products stay generated. */
#define TROUPE_GEMM_MIN_MACS 4096

typedef struct troupe_gemm_operand {
    const troupe_tnode_t *tn;
    const troupe_axis_index_t *idcs; /* the access, tn->ndims indices (borrowed) */
    bool trans;                      /* A stored k-major / B stored j-major (never for C) */
    int64_t ld;                      /* leading dimension, elements */
} troupe_gemm_operand_t;

typedef struct troupe_gemm {
    troupe_prec_t prec;   /* SINGLE or DOUBLE */
    int64_t m, n, k;      /* extents of the row, column and reduction loops */
    int32_t sym_m, sym_n, sym_k;
    troupe_gemm_operand_t a, b, c;
    bool fma; /* each step is fma(a, b, c) (one rounding); else c + a*b (two) */
} troupe_gemm_t;

typedef enum troupe_gemm_verdict {
    TROUPE_GEMM_NO = 0,  /* not a contraction nest: nothing to say */
    TROUPE_GEMM_YES,     /* *out describes the call */
    TROUPE_GEMM_REFUSED, /* a contraction nest the library cannot take; *why says which rule */
} troupe_gemm_verdict_t;

/* Matches the loop nest opened by `loop` (a TROUPE_LL_FOR). On TROUPE_GEMM_REFUSED, *why is a
 * static string naming the reason (precision, a virtual operand, a stride, too small...) and
 * out->c.tn the node the nest writes. */
troupe_gemm_verdict_t troupe_gemm_match(const troupe_ll_t *loop, troupe_gemm_t *out,
                                        const char **why);

/* Whether the product writes every element of its output exactly once (the output is the
 * m-by-n matrix itself: no other iterator or offset in its access, ldc = n): then a zeroing of
 * the output just before it can become beta = 0. */
bool troupe_gemm_covers_output(const troupe_gemm_t *g);

/* The linear coefficient of `sym` in the row-major offset of `idcs` into `tn`. */
int64_t troupe_gemm_sym_stride(const troupe_tnode_t *tn, const troupe_axis_index_t *idcs,
                               int32_t sym);

#ifdef __cplusplus
}
#endif
#endif
