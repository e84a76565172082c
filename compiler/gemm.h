/* troupe — recognising matrix products in the low-level IR (docs/architecture.md §1 (the IR and
 * compiler) "GEMMs"; issue 14).
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
 * Merged loops: a deeper perfect nest (up to TROUPE_GEMM_MAX_LOOPS loops) is one product when
 * its loops fall into three groups (moving C and A, moving C and B, moving A and B: M, N and K)
 * and each group's loops step every operand they move as one dense dimension: ordered by
 * stride, each loop's stride is the previous loop's times its extent, in every operand (e.g. b
 * and t over contiguous (B, T, ...) arrays, "bti,btj=>ij": K = B*T). The group's extent is the
 * product of its loops' extents. Loops of extent 1 join any group. A group whose loops are not
 * one dense dimension keeps its longest dense chain (the largest extent) in the call; the
 * others become outer loops around it (troupe_gemm_t.outer): a loop of calls, each over its own
 * block of C (an M or N loop) or accumulating into the same C (a K loop: a batch-reduce GEMM,
 * e.g. a convolution's weight gradient summed over the batch). The outer loops nest with the one
 * whose calls share the most operand data innermost (two that accumulate keep their order). A
 * nest whose loops do not all fall into the three groups is NO (a deeper level is tried: a loop
 * that moves all three operands is a batch loop, left outside).
 *
 * Precisions (YES): the factors and the output all single or all double, or two bfloat16 or two
 * half factors into a single output (troupe_gemm_t.factor_prec; mixed precision: the products
 * of two bfloat16 or two half values are exact in single precision, so this differs from the
 * loops only by the order of the fp32 sums).
 *
 * The result is normalised to a row-major call: C[i*ldc + j] += sum_k op(A)[i,k] * op(B)[k,j],
 * with op(A)[i,k] at A[i*lda + k] (trans_a false) or A[k*lda + i] (trans_a true), likewise B.
 * Code generators emit a call with the generated loops kept as the fallback (for NULL hooks;
 * none where the C is generated library-only: compiler/cgen.h c_gemm_library_only); the reference
 * interpreter never uses it, so the library path and the loops agree within float rounding,
 * not bit for bit (the library sums in another order).
 *
 * Thread safety: reads the procedure only.
 * Ownership: the result borrows the statement's nodes and index arrays.
 */
#ifndef TROUPE_COMPILER_GEMM_H
#define TROUPE_COMPILER_GEMM_H

#include "troupe/ir/lowlevel.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Below this many multiply-adds (m*n*k) a call costs more than the loops (measured with
 * bench_matmul on the development machine); such products stay generated. */
#define TROUPE_GEMM_MIN_MACS 4096

/* The deepest perfect nest the matcher folds into one product (merged loops). */
#define TROUPE_GEMM_MAX_LOOPS 8

typedef struct troupe_gemm_operand {
    const troupe_tnode_t *tn;
    const troupe_axis_index_t *idcs; /* the access, tn->ndims indices (borrowed) */
    bool trans;                      /* A stored k-major / B stored j-major (never for C) */
    int64_t ld;                      /* leading dimension, elements */
} troupe_gemm_operand_t;

typedef struct troupe_gemm {
    troupe_prec_t prec;   /* the output's: SINGLE or DOUBLE (YES); any float (shape_ok) */
    troupe_prec_t factor_prec; /* the factors' (YES): prec, or BFLOAT16/HALF into SINGLE */
    int64_t m, n, k;      /* extents of the row, column and reduction loops */
    int32_t sym_m, sym_n, sym_k; /* each dimension's fastest loop (merged: one of several) */
    int nsyms;                   /* the nest's loops: 3, or more when some are merged */
    int32_t syms[TROUPE_GEMM_MAX_LOOPS]; /* their symbols, outermost first; an operand's base
                                            is its access with all of them at 0 */
    int nouter; /* loops of the nest the call runs inside (merged nests only), outermost first:
                   their symbols stay in the operands' base offsets */
    int32_t outer_syms[TROUPE_GEMM_MAX_LOOPS];
    int64_t outer_ext[TROUPE_GEMM_MAX_LOOPS]; /* each from 0 to outer_ext - 1 */
    troupe_gemm_operand_t a, b, c;
    bool fma; /* each step is fma(a, b, c) (one rounding); else c + a*b (two) */
    /* REFUSED for precision only (the factors and the output differ in precision, or the
     * precision has no library GEMM), every operand a float (single, double, half, bfloat16,
     * fp8) and the output no factor: *out is filled as for YES (operands' precisions in their
     * tn->prec; the size and 32-bit limits are not applied), so a target may compute the
     * product its own way with the nest's per-element arithmetic (compiler/cgen.h, "CUDA
     * dialect"). False on every other verdict. */
    bool shape_ok;
} troupe_gemm_t;

typedef enum troupe_gemm_verdict {
    TROUPE_GEMM_NO = 0,  /* not a contraction nest: nothing to say */
    TROUPE_GEMM_YES,     /* *out describes the call */
    TROUPE_GEMM_REFUSED, /* a contraction nest the library cannot take; *why says which rule */
} troupe_gemm_verdict_t;

/* ---- epilogues (issues 14 and 15) --------------------------------------------------------
 *
 * The statements right around a product at the same level that can run with it, over each
 * part of the output while it is in cache (CPU) or inside the library call (cuBLASLt):
 *
 *     [ZERO_OUT C]                                   beta = 0 (the call overwrites C); with
 *                                                    accumulating calls, zero_slice instead
 *                                                    (and init_slice for a nest setting C)
 *  or [for i < m: for j < n: C[i,j] = b[j]]          init: the bias as C's initial value (beta = 1
 *                                                    over it; b[i] also recognised)
 *     the product                                    C[i,j] += sum_k op(A)[i,k] op(B)[k,j]
 *     [for i < m: for j < n: D[i,j] = post(C[i,j])]  post, one of  C + b[j],  relu C  (the
 *                                                    unary op, which is max(0, C)), max(0, C) or
 *                                                    max(C, 0), and those over C + b[j] (either
 *                                                    operand order; b[i] too); D is C (in place)
 *                                                    or another node
 *
 * These are the forms troupe's optimizer leaves for a dense layer: the MLP's `z = x w + b`
 * lowers to the init nest and an accumulating product, `a = relu z` to a post nest into another
 * node (z stays written: the backward pass reads it). Every matrix here (C, D) is the whole
 * node, row-major m x n with ld = n (troupe_gemm_covers_output), and the nests may loop in
 * either order. Legality, each refused with its reason:
 *  - C, D and b have the product's precision; b is a vector read at i or j alone, unit stride,
 *    from element 0, and is none of C, D;
 *  - D is neither factor (the product runs in row panels: later panels still read A and B);
 *  - the post reads nothing but C at the same element and b; nothing runs between the three
 *    statements (they are adjacent), so no other reader sees C un-epilogued; when D is another
 *    node C keeps its un-epilogued values, as without fusion;
 *  - at most one bias (init or post).
 * Semantics are those of the statements: a target that keeps their order and operations per
 * element (the CPU's panels, the CUDA fallback kernels) gives the unfused results bit for bit;
 * one that adds the bias after the product (cuBLASLt's epilogue) differs by float rounding. */

typedef enum troupe_gemm_bias_axis {
    TROUPE_GEMM_BIAS_NONE = 0,
    TROUPE_GEMM_BIAS_N, /* b[j]: one value per output column, the same down every row */
    TROUPE_GEMM_BIAS_M, /* b[i]: one value per output row */
} troupe_gemm_bias_axis_t;

typedef struct troupe_gemm_epilogue {
    bool beta_zero;           /* a ZERO_OUT of C precedes the product */
    int64_t zero_slice;       /* else a ZERO_OUT of C precedes calls that accumulate: each
                                 iteration of the outermost loop zeroes its own slice of C, this
                                 many elements, before its calls (troupe_gemm_zero_slice); or 0 */
    const troupe_ll_t *init;  /* the nest C[i,j] = b (then beta = 1 over it), or NULL */
    const troupe_ll_t *post;  /* the pointwise nest after the product, or NULL */
    int32_t init_sym_m, init_sym_n; /* init's loop symbols running over i and j */
    int32_t post_sym_m, post_sym_n; /* post's */
    troupe_gemm_bias_axis_t bias_axis;
    const troupe_tnode_t *bias; /* the vector b (NONE: NULL) */
    bool bias_in_init;          /* b is C's initial value; else post adds it */
    bool relu;                  /* post takes max(0, .) */
    bool relu_zero_first;       /* as max(0, x) (keeps x = -0) rather than max(x, 0) (gives +0) */
    const troupe_tnode_t *d;    /* post's output: C itself (in place) or another m x n node */
    const troupe_ll_t *init_slice; /* else a nest that sets C (not reading it) precedes calls
                                      that accumulate: it runs one iteration of its outermost
                                      loop at the start of each iteration of the calls' outermost
                                      loop (troupe_gemm_init_slice), or NULL */
    const troupe_ll_t *slice_post; /* no init or post, and a later statement (past comments
                                      only), this nest, can run per iteration of the outermost
                                      loop of calls (troupe_gemm_slice_post), else NULL */
    size_t slice_post_at;          /* its distance from `at`; not counted in *consumed */
    const char *refused;        /* a statement beside the product looked like an epilogue part
                                   but broke the rule named here (static string), else NULL */
} troupe_gemm_epilogue_t;

/* Matches the product and its epilogue among the statements items[0..n-1] of one level (SEQs
 * flattened), starting at items[at]: [ZERO_OUT or init] product [post]. YES: *g the product,
 * *ep what surrounds it, *consumed how many statements from `at` they are (1 to 3). NO when
 * no product starts at `at` or `at + 1` with what precedes it; REFUSED (with *why) when
 * items[at] is itself a product the library cannot take. A part that breaks a rule is left
 * out (ep->refused names the rule): the product then runs without it. */
troupe_gemm_verdict_t troupe_gemm_match_window(const troupe_ll_t *const *items, size_t n,
                                               size_t at, troupe_gemm_t *g,
                                               troupe_gemm_epilogue_t *ep, size_t *consumed,
                                               const char **why);

/* Matches the loop nest opened by `loop` (a TROUPE_LL_FOR). On TROUPE_GEMM_REFUSED, *why is a
 * static string naming the reason (precision, a virtual operand, a stride, too small...),
 * out->c.tn the node the nest writes and out->shape_ok whether the rest of *out describes the
 * product anyway (refused for precision alone, see troupe_gemm_t). */
troupe_gemm_verdict_t troupe_gemm_match(const troupe_ll_t *loop, troupe_gemm_t *out,
                                        const char **why);

/* Whether the product writes every element of its output exactly once (the output is the
 * m-by-n matrix itself, ldc = n, or with outer loops their calls' m-by-n blocks tile it: no
 * other iterator or offset in its access): then a zeroing of the output just before it can
 * become beta = 0 (for each call, over its own block). */
bool troupe_gemm_covers_output(const troupe_gemm_t *g);

/* The slice of the output each iteration of the outermost of the product's outer loops owns,
 * in elements, when the calls accumulate (troupe_gemm_covers_output false) yet that loop steps
 * C by a slice, its slices tile C, and every call inside one iteration writes within its own
 * slice: a convolution's input gradient per sample, summed over the kernel offsets. Then a
 * zeroing of C just before the calls can run slice by slice, at the start of each iteration
 * (while the slice is in cache). 0 otherwise. */
int64_t troupe_gemm_zero_slice(const troupe_gemm_t *g);

/* Whether nest s, run after the product, may run one iteration of its outermost loop right
 * after each iteration of the product's outermost loop instead (while that iteration's slice of
 * C is in cache): the loop has that loop's extent, s is a perfect nest of loops from 0 around
 * one statement that writes neither C nor a factor, and every read of C at iteration p lies in
 * slice p of C (the slice each iteration's calls write within). A convolution's ReLU copied from
 * its per-sample products into the next layer's rows. */
bool troupe_gemm_slice_post(const troupe_gemm_t *g, const troupe_ll_t *s);

/* Whether nest s, run just before accumulating calls (troupe_gemm_zero_slice nonzero), may run
 * one iteration of its outermost loop at the start of each iteration of the calls' outermost
 * loop instead: the loop has that loop's extent, s is a perfect nest of loops from 0 around one
 * statement that sets C from values not reading C, and its writes at iteration p lie in slice p.
 * A convolution's bias broadcast before its per-sample products. */
bool troupe_gemm_init_slice(const troupe_gemm_t *g, const troupe_ll_t *s);

/* Whether `sym` is one of the product's loops (g->syms): the call replaces it. */
bool troupe_gemm_has_sym(const troupe_gemm_t *g, int32_t sym);

/* The linear coefficient of `sym` in the row-major offset of `idcs` into `tn`. */
int64_t troupe_gemm_sym_stride(const troupe_tnode_t *tn, const troupe_axis_index_t *idcs,
                               int32_t sym);

#ifdef __cplusplus
}
#endif
#endif
