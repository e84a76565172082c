/* troupe — projections in einsum notation (OCANNL `Indexing.projections`, OCANNL_NOTES §6.1):
 * which cells of each operand an assignment (ir/assign.h) combines into which cell of its lhs.
 *
 * ---- Projection notation ----------------------------------------------------------------------
 *
 *   spec  := term ("," term)* "=>" term          rhs terms (one per operand) => lhs term
 *   term  := index*                              one index per axis of the node, outermost first;
 *                                                the empty term is a scalar operand: a node
 *                                                with 0 dims, or with all dims equal to 1
 *   index := LETTER                              an iterator ('a'-'z', 'A'-'Z'; one character)
 *          | "^" LETTER                          lhs only: an iterator that indexes no operand,
 *                                                a broadcast asked for, e.g. "j=>^bj"
 *          | "[" DIGITS "]"                      a fixed index, e.g. "[0]"
 *          | "{" NAME "}"                        a static index symbol of the comp, e.g.
 *                                                "{batch_n}" ([A-Za-z_][A-Za-z0-9_]*)
 *          | "(" affine ")"                      an affine index, e.g. "(2i+k)", "(i+1)",
 *                                                "(2i+k-1)": terms [DIGITS]LETTER or DIGITS
 *                                                joined by + or -, at most 4 iterator terms
 *          | "@" DIGIT "[" gindex* "]"           a gather index, e.g. "@1[bt]": the value of
 *                                                the assignment's gather node 1 (ir/assign.h)
 *                                                at [b,t]; gindex := LETTER | "[" DIGITS "]",
 *                                                one per axis of the gather node (an lhs
 *                                                gather term may mark "^x" too)
 * Blanks (space, tab) between tokens are ignored. Examples:
 *   "bi,ij=>bj"    matmul: product space b,i,j; lhs b,j; rhs1 b,i; rhs2 i,j (i is reduced)
 *   "bi=>b"        row sum (with accum add) / row max (accum max)
 *   "j=>^bj"       bias over rows: b indexes no operand, so each row gets the same copy
 *   "b=>b^i"       the gradient of "bi=>b" (nn/grad.c marks the broadcasts it derives)
 *   "b,=>b"        b-vector times a scalar operand
 *   "ij=>ji"       transpose (unary)
 *   "a,a,a=>a"     pointwise ternary (where, fma)
 *   "{batch_n}i=>i"  read row batch_n of a matrix
 *   "b[0]=>b"      take column 0
 *   "o(2i+k),k=>oi"  1-d convolution with stride 2
 *   "@1[bt]c=>btc"   embedding: out[b,t,c] = wte[tokens[b,t], c] (gather node 1: tokens)
 *   "b@1[b]=>b"      picked log-probability: picked[b] = logp[b, target[b]]
 *   "btc=>@1[bt]c"   scatter-add (accum add): g_wte[tokens[b,t], c] += g_out[b,t,c]
 * Rules:
 *  - The number of rhs terms must equal the op's arity (1, 2 or 3; SET_VEC_UNOP: 1) and each
 *    term's index count must equal its node's ndims (the empty term also accepts all-1 dims).
 *  - An iterator's size comes from the axes where it stands alone (a plain LETTER index): all
 *    such axes must have the same stored dim. An iterator used only inside affine indices has
 *    no size and is an error. Dims of size 1 do not broadcast: write "[0]" for them.
 *  - Fixed indices must lie within their axis; a static symbol's range (when nonzero) must
 *    not exceed its axis's dim; affine indices must stay within their axis over the whole
 *    iterator space.
 *  - Iterators absent from the lhs are reduced: their products are accumulated with `accum`.
 *  - Broadcasts are marked: an lhs iterator that indexes no operand (plainly, in an affine
 *    index or in a gather term) must be written "^x" at one of its lhs places, and a marked
 *    iterator must index no operand. Unmarked, "ik,kj=>iq" (a typo for "ik,kj=>ij") would
 *    copy each row's total along q and sum j away; it is refused naming 'q'. OCANNL gives an
 *    lhs-only index this broadcast meaning silently; here "ik,kj=>i^q" asks for it. Rejected
 *    alternatives: refusing only specs that both broadcast and reduce misses "i=>iq" for a
 *    diagonal "i=>ii", and "j=>^i[0]" (sum into every row) does both legitimately.
 *  - The product space is every iterator, ordered as the lowered loops nest (outermost first):
 *    the lhs's plain iterators in lhs axis order except the lhs's last axis, then the reduced
 *    iterators in order of first appearance in the rhs terms, then the iterator of the lhs's
 *    last axis when that axis is a plain iterator. So the innermost loop walks the lhs's last
 *    (contiguous) axis, e.g. matmul "bi,ij=>bj" nests b, i, j. Except for row reductions: when
 *    the lhs's last iterator is the last axis of no operand and the reduced iterator before it
 *    is some operand's last axis, the lhs's last iterator moves before the reduced ones, so
 *    "bi=>b" nests b, i and reads x's rows contiguously. Either way each lhs cell accumulates
 *    over the reduced iterators in the same order.
 *  - Injective (distinct points of the product space write distinct lhs cells): every
 *    iterator of size > 1 appears as a plain lhs index. Surjective (every lhs cell is
 *    written): every lhs axis holds a plain iterator that appears only once in the lhs, or
 *    has dim 1 (then a fixed index or static symbol covers it). Both are decided
 *    conservatively: an iterator that reaches the lhs only through an affine index makes the
 *    projection non-injective, an affine lhs index makes it non-surjective; either only adds
 *    a neutral-element fill and accumulation, never changes results.
 *  - Padding is not treated specially: indices range over the stored (padded) dims.
 *  - Gather indices: N counts from 1 up to the assignment's gather node count (at most
 *    TROUPE_PROJ_MAX_GATHER). Iterators inside "@N[...]" are sized by the gather node's dims
 *    (and must agree with their plain uses); they are iterators of the product space like any
 *    other. The gathered value must lie in 0..dim-1 of the axis it indexes: that is checked
 *    when the routine runs (an out-of-range value fails it with INVALID_ARGUMENT naming the
 *    gather node, the cell and the value; nothing is written). A gather index in the lhs
 *    makes the projection non-injective and (unless the axis has dim 1) non-surjective.
 *  - S-expression form (ir/text.h): the spec string is kept as it is, and the gather nodes
 *    follow the operands as `(gather <node> [<node>])`, e.g.
 *    (accum_binop ... "b@1[b]=>b" (gather target)); lowered, each gather index is a
 *    (bind_index <sym> <node>[<idcs>] <range> <table> <axis> <body>) statement.
 *
 * Errors are INVALID_ARGUMENT with the spec quoted and either the 1-based column, e.g.
 *   "projection 'b?,ij=>bj' col 2: unexpected '?'"
 * or the operand and axis, e.g.
 *   "projection 'bi,ij=>bj': axis 'i' is 784 in operand 1 (node #3 x, axis 1) but 512 in
 *    operand 2 (node #4 w, axis 0)"
 *   "projection 'bij,ij=>bj': operand 1 (node #3 x) has 2 axes but its term 'bij' has 3"
 *   "projection 'ik,kj=>iq' col 9: lhs index 'q' appears in no operand term, so the result
 *    would be broadcast along it (and summed over 'jk'); if that is meant, write '^q'"
 * Operands are numbered from 1; the lhs is called "the lhs".
 *
 * Thread safety: troupe_projections_parse only reads its arguments.
 * Ownership: the result is the caller's; out->spec borrows the spec string.
 */
#ifndef TROUPE_IR_PROJECTION_H
#define TROUPE_IR_PROJECTION_H

#include "troupe/base/status.h"
#include "troupe/ir/lowlevel.h"
#include "troupe/ir/tnode.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The comp whose static symbols a projection may name (ir/assign.h). */
typedef struct troupe_asgn_comp troupe_asgn_comp_t;

/* Most iterators of one projection (letters are the only iterator names). */
#define TROUPE_PROJ_MAX_ITERS 52
/* Most gather nodes of one projection ("@1", "@2"). */
#define TROUPE_PROJ_MAX_GATHER 2

/* ---- projections -------------------------------------------------------------------------- */

typedef struct troupe_proj_term {
    int64_t coeff;
    int32_t iter; /* position in the product space (troupe_projections_t.iter_*) */
} troupe_proj_term_t;

/* One axis index of a projected node:
 * sum(terms[k].coeff * iter_k) + (static_sym >= 0 ? value(static_sym) : 0) + offset.
 * Kinds by form: fixed (nterms 0, static_sym -1, gather 0), plain iterator (nterms 1, coeff 1,
 * offset 0, is_affine false), static (nterms 0, static_sym >= 0), affine (is_affine true),
 * gather (gather > 0: the value of gather node `gather` at gather_iter/gather_fixed, one per
 * axis of that node; nterms 0, offset 0). */
typedef struct troupe_proj_index {
    int nterms;
    troupe_proj_term_t terms[TROUPE_MAX_INDEX_TERMS];
    int32_t static_sym; /* a comp static symbol id, or -1 */
    int64_t offset;
    bool is_affine; /* written "(...)" */
    int gather;     /* 1-based gather node, 0 for none; written "@N[...]" */
    int gather_n;   /* the gather node's ndims */
    int32_t gather_iter[TROUPE_MAX_DIMS]; /* product-space iterator, or -1: gather_fixed */
    int64_t gather_fixed[TROUPE_MAX_DIMS];
} troupe_proj_index_t;

/* A parsed and checked projection. `spec` is the text it was parsed from (arena copy inside a
 * comp; the caller's pointer from troupe_projections_parse). */
typedef struct troupe_projections {
    const char *spec;
    int niters;                              /* product-space size */
    char iter_letter[TROUPE_PROJ_MAX_ITERS]; /* in loop order, outermost first */
    int64_t iter_dim[TROUPE_PROJ_MAX_ITERS];
    bool iter_reduced[TROUPE_PROJ_MAX_ITERS]; /* absent from the lhs */
    int nrhs;                                 /* 1..3 */
    int lhs_ndims;
    troupe_proj_index_t lhs[TROUPE_MAX_DIMS];
    int rhs_ndims[3];
    troupe_proj_index_t rhs[3][TROUPE_MAX_DIMS];
    int vec_length; /* SET_VEC_UNOP: lhs last-axis factor; else 0 */
    bool injective;
    bool surjective;
    int ngather; /* gather nodes the spec may name, 0..TROUPE_PROJ_MAX_GATHER */
    int gather_ndims[TROUPE_PROJ_MAX_GATHER];
} troupe_projections_t;

/* Parses and checks `spec` (notation in the header comment) against the lhs node and `nrhs`
 * (1..3) rhs nodes, with static symbols looked up in `comp` (may be NULL: then any "{name}"
 * is an error). vec_length > 0 parses a SET_VEC_UNOP projection: the lhs's last axis must be
 * a plain iterator that also appears in the rhs, and the lhs's last dim must equal
 * vec_length times that iterator's size. out->spec borrows `spec`.
 * Returns INVALID_ARGUMENT with the messages described above. */
TROUPE_MUST_USE troupe_status_t troupe_projections_parse(const troupe_asgn_comp_t *comp,
                                                         const char *spec,
                                                         const troupe_tnode_t *lhs, int nrhs,
                                                         troupe_tnode_t *const *rhs, int vec_length,
                                                         troupe_projections_t *out);
/* As troupe_projections_parse with `ngather` (0..TROUPE_PROJ_MAX_GATHER) gather nodes the
 * spec's "@N[...]" indices name (gather[N-1]). With ngather 0 any "@" is an error naming it. */
TROUPE_MUST_USE troupe_status_t troupe_projections_parse_gather(
    const troupe_asgn_comp_t *comp, const char *spec, const troupe_tnode_t *lhs, int nrhs,
    troupe_tnode_t *const *rhs, int ngather, troupe_tnode_t *const *gather, int vec_length,
    troupe_projections_t *out);

#ifdef __cplusplus
}
#endif
#endif
