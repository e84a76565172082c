/* troupe — the high-level assignment form (OCANNL `Assignments`, OCANNL_NOTES §6.1) and its
 * lowering to the low-level IR (ir/lowlevel.h).
 *
 * An assignment tree (troupe_asgn_t) is one of:
 *   NOOP; SEQ of n items; BLOCK_COMMENT(text, body);
 *   ACCUM_OP  lhs =accum op(rhs1[, rhs2[, rhs3]]) over a projection (einsum notation below),
 *             optionally initialising the lhs with the accumulator's neutral element first;
 *   SET_VEC_UNOP  lhs = vec_op(rhs) where each rhs cell yields `length` consecutive lhs cells
 *             along the lhs's last axis;
 *   FETCH     fill a node: a constant, constant bits, a table of values, its own flat offsets,
 *             a slice of another node at a static index, a static index value, its own id.
 * Operands of ACCUM_OP and SET_VEC_UNOP are buffers: a node, or a node's merge buffer (the
 * `.merge` pseudo-field: the copy of the node received from another stream).
 *
 * Trees live in a container, troupe_asgn_comp_t (OCANNL `comp`): it owns an arena holding every
 * tree node, projection and string, holds one reference to every tnode mentioned, a table of
 * static index symbols (named, with a range, e.g. "batch_n" over 0..n-1: values bound when
 * the compiled routine runs) and the `embedded_nodes` set (nodes the computation itself
 * creates and initialises; the others must already be in a context the routine is linked to).
 *
 * ---- Projection notation ----------------------------------------------------------------------
 *
 *   spec  := term ("," term)* "=>" term          rhs terms (one per operand) => lhs term
 *   term  := index*                              one index per axis of the node, outermost first;
 *                                                the empty term is a scalar operand: a node
 *                                                with 0 dims, or with all dims equal to 1
 *   index := LETTER                              an iterator ('a'-'z', 'A'-'Z'; one character)
 *          | "[" DIGITS "]"                      a fixed index, e.g. "[0]"
 *          | "{" NAME "}"                        a static index symbol of the comp, e.g.
 *                                                "{batch_n}" ([A-Za-z_][A-Za-z0-9_]*)
 *          | "(" affine ")"                      an affine index, e.g. "(2i+k)", "(i+1)",
 *                                                "(2i+k-1)": terms [DIGITS]LETTER or DIGITS
 *                                                joined by + or -, at most 4 iterator terms
 * Blanks (space, tab) between tokens are ignored. Examples:
 *   "bi,ij=>bj"    matmul: product space b,i,j; lhs b,j; rhs1 b,i; rhs2 i,j (i is reduced)
 *   "bi=>b"        row sum (with accum add) / row max (accum max)
 *   "b,=>b"        b-vector times a scalar operand
 *   "ij=>ji"       transpose (unary)
 *   "a,a,a=>a"     pointwise ternary (where, fma)
 *   "{batch_n}i=>i"  read row batch_n of a matrix
 *   "b[0]=>b"      take column 0
 *   "o(2i+k),k=>oi"  1-d convolution with stride 2
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
 *  - The product space is every iterator, ordered as the lowered loops nest (outermost first):
 *    the lhs's plain iterators in lhs axis order except the lhs's last axis, then the reduced
 *    iterators in order of first appearance in the rhs terms, then the iterator of the lhs's
 *    last axis when that axis is a plain iterator. So the innermost loop walks the lhs's last
 *    (contiguous) axis, e.g. matmul "bi,ij=>bj" nests b, i, j.
 *  - Injective (distinct points of the product space write distinct lhs cells): every
 *    iterator of size > 1 appears as a plain lhs index. Surjective (every lhs cell is
 *    written): every lhs axis holds a plain iterator that appears only once in the lhs, or
 *    has dim 1 (then a fixed index or static symbol covers it). Both are decided
 *    conservatively: an iterator that reaches the lhs only through an affine index makes the
 *    projection non-injective, an affine lhs index makes it non-surjective; either only adds
 *    a neutral-element fill and accumulation, never changes results.
 *  - Padding is not treated specially: indices range over the stored (padded) dims.
 *
 * Errors are INVALID_ARGUMENT with the spec quoted and either the 1-based column, e.g.
 *   "projection 'b?,ij=>bj' col 2: unexpected '?'"
 * or the operand and axis, e.g.
 *   "projection 'bi,ij=>bj': axis 'i' is 784 in operand 1 (node #3 x, axis 1) but 512 in
 *    operand 2 (node #4 w, axis 0)"
 *   "projection 'bij,ij=>bj': operand 1 (node #3 x) has 2 axes but its term 'bij' has 3"
 * Operands are numbered from 1; the lhs is called "the lhs".
 *
 * ---- Lowering (OCANNL `Assignments.to_low_level`) ---------------------------------------------
 *
 *  ACCUM_OP: nested FOR loops over the product space (fresh iterator symbols, from 0 to dim-1),
 *    body SET lhs[pl] := accum(GET lhs[pl], op(rhs...)), or SET lhs[pl] := op(rhs...) when
 *    initialize_neutral and the projection is injective. If initialize_neutral and not both
 *    injective and surjective, the lhs is first filled with accum's neutral element
 *    (troupe_binop_neutral): ZERO_OUT when it is 0.0, else loops of SET of the constant.
 *    Merge-buffer operands are read with GET_MERGE_BUFFER.
 *  SET_VEC_UNOP: loops over the product space, SET_FROM_VEC at the lhs index with the lhs's
 *    last-axis iterator multiplied by length = troupe_vec_unop_output_count(op, lhs prec)
 *    (16 byte/fp8, 8 uint16/half/bfloat16, 4 int32/uint32/single, 2 int64/uint64/double).
 *  FETCH: CONSTANT 0.0 -> ZERO_OUT; other CONSTANT / CONSTANT_BITS -> loops of SET;
 *    CONSTANT_FILL -> one SET per element (fixed indices, row-major order);
 *    RANGE_OVER_OFFSETS -> SET lhs[idx] := EMBED_INDEX(row-major flat offset of idx);
 *    SLICE -> SET lhs[idx] := GET sliced[batch_sym, idx...]; EMBED_SYMBOL -> SET lhs[idx] :=
 *    EMBED_INDEX(sym); EMBED_SELF_ID -> SET lhs[idx] := CONSTANT_BITS(lhs id).
 *    Fetch loops skip axes of dim 1 (fixed index 0 there).
 *  BLOCK_COMMENT -> COMMENT text; body; COMMENT "end".  SEQ -> SEQ.  NOOP -> NOOP.
 *  The comp's static symbols become the procedure's static symbols, in comp order, with the
 *  same names and ranges (so their ids in the procedure equal their ids in the comp).
 *
 * Thread safety: a comp is not thread-safe while being built; once built it may be read
 * (lowered, printed) from several threads.
 * Ownership: troupe_asgn_comp_new -> caller owns; troupe_asgn_comp_destroy frees every tree of
 * the comp and releases its tnodes. Builders copy strings, specs and value tables into the
 * comp's arena and retain tnodes; trees returned by builders are borrowed from the comp. A
 * tree may only be used in the comp that built it.
 */
#ifndef TROUPE_IR_ASSIGN_H
#define TROUPE_IR_ASSIGN_H

#include "base/status.h"
#include "ir/lowlevel.h"
#include "ir/ops.h"
#include "ir/prec.h"
#include "ir/tnode.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most iterators of one projection (letters are the only iterator names). */
#define TROUPE_PROJ_MAX_ITERS 52

/* ---- projections -------------------------------------------------------------------------- */

typedef struct troupe_proj_term {
    int64_t coeff;
    int32_t iter; /* position in the product space (troupe_projections_t.iter_*) */
} troupe_proj_term_t;

/* One axis index of a projected node:
 * sum(terms[k].coeff * iter_k) + (static_sym >= 0 ? value(static_sym) : 0) + offset.
 * Kinds by form: fixed (nterms 0, static_sym -1), plain iterator (nterms 1, coeff 1, offset 0,
 * is_affine false), static (nterms 0, static_sym >= 0), affine (is_affine true). */
typedef struct troupe_proj_index {
    int nterms;
    troupe_proj_term_t terms[TROUPE_MAX_INDEX_TERMS];
    int32_t static_sym; /* a comp static symbol id, or -1 */
    int64_t offset;
    bool is_affine; /* written "(...)" */
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
} troupe_projections_t;

/* ---- trees -------------------------------------------------------------------------------- */

typedef enum troupe_asgn_kind {
    TROUPE_ASGN_NOOP = 0,
    TROUPE_ASGN_SEQ,
    TROUPE_ASGN_BLOCK_COMMENT,
    TROUPE_ASGN_ACCUM_OP,
    TROUPE_ASGN_SET_VEC_UNOP,
    TROUPE_ASGN_FETCH,
} troupe_asgn_kind_t;

/* OCANNL `accum_rhs`: which op family combines the rhs operands. */
typedef enum troupe_asgn_rhs_kind {
    TROUPE_ASGN_RHS_UNOP = 1, /* 1 operand */
    TROUPE_ASGN_RHS_BINOP,    /* 2 operands */
    TROUPE_ASGN_RHS_TERNOP,   /* 3 operands */
} troupe_asgn_rhs_kind_t;

typedef enum troupe_fetch_kind {
    TROUPE_FETCH_CONSTANT = 0,
    TROUPE_FETCH_CONSTANT_BITS,
    TROUPE_FETCH_CONSTANT_FILL,
    TROUPE_FETCH_RANGE_OVER_OFFSETS,
    TROUPE_FETCH_SLICE,
    TROUPE_FETCH_EMBED_SYMBOL,
    TROUPE_FETCH_EMBED_SELF_ID,
} troupe_fetch_kind_t;

/* An operand: node `tn`, read from its merge buffer when is_merge_buffer. */
typedef struct troupe_asgn_buffer {
    troupe_tnode_t *tn;
    bool is_merge_buffer;
} troupe_asgn_buffer_t;

static inline troupe_asgn_buffer_t troupe_asgn_node(troupe_tnode_t *tn)
{
    troupe_asgn_buffer_t b = {tn, false};
    return b;
}
static inline troupe_asgn_buffer_t troupe_asgn_merge(troupe_tnode_t *tn)
{
    troupe_asgn_buffer_t b = {tn, true};
    return b;
}

typedef struct troupe_asgn troupe_asgn_t;

struct troupe_asgn {
    troupe_asgn_kind_t kind;
    union {
        struct {
            size_t count; /* >= 2 after flattening by troupe_asgn_seq */
            troupe_asgn_t **items;
        } seq;
        struct {
            const char *text;
            troupe_asgn_t *body;
        } block_comment;
        struct {
            bool initialize_neutral;
            troupe_binop_t accum;
            troupe_tnode_t *lhs;
            troupe_asgn_rhs_kind_t rhs_kind;
            int op;                      /* troupe_unop_t / troupe_binop_t / troupe_ternop_t */
            troupe_asgn_buffer_t rhs[3]; /* 1 / 2 / 3 used by rhs_kind */
            troupe_projections_t *proj;
        } accum_op;
        struct {
            troupe_vec_unop_t op;
            troupe_tnode_t *lhs;
            troupe_asgn_buffer_t rhs;
            troupe_projections_t *proj; /* nrhs 1, vec_length set */
        } set_vec_unop;
        struct {
            troupe_tnode_t *tn; /* the node being filled (OCANNL `array`) */
            troupe_fetch_kind_t kind;
            double constant;       /* CONSTANT */
            int64_t constant_bits; /* CONSTANT_BITS */
            const double *values;  /* CONSTANT_FILL: num_elems values, row-major */
            size_t count;
            int32_t static_sym;     /* SLICE (batch index), EMBED_SYMBOL; else -1 */
            troupe_tnode_t *sliced; /* SLICE */
        } fetch;
    } u;
};

typedef struct troupe_asgn_static_symbol {
    const char *name;
    int64_t range; /* values 0..range-1; 0 = unbounded (checked when the routine runs) */
} troupe_asgn_static_symbol_t;

/* OCANNL `comp`: the arena, the root tree, static symbols, embedded nodes. */
typedef struct troupe_asgn_comp {
    troupe_arena_t *arena; /* ir/arena.h */
    troupe_asgn_t *root; /* starts as NOOP; set it with troupe_asgn_comp_set_root */

    troupe_asgn_static_symbol_t *syms; /* nsyms entries; ids are indices */
    int32_t nsyms, syms_cap;

    troupe_tnode_t **nodes; /* every node mentioned, retained, sorted by id */
    size_t nnodes, nodes_cap;

    troupe_tnode_t **embedded; /* embedded_nodes, retained, sorted by id */
    size_t nembedded, embedded_cap;
} troupe_asgn_comp_t;

/* ---- container ---------------------------------------------------------------------------- */

/* New empty comp (root NOOP). RESOURCE_EXHAUSTED; INVALID_ARGUMENT if out is NULL. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_comp_new(troupe_asgn_comp_t **out);
/* Frees the comp, all its trees, and releases its tnodes. Accepts NULL; sets *comp_p NULL. */
void troupe_asgn_comp_destroy(troupe_asgn_comp_t **comp_p);
/* Sets the root tree (must come from this comp; NULL means NOOP). */
void troupe_asgn_comp_set_root(troupe_asgn_comp_t *comp, troupe_asgn_t *root);

/* Declares a static index symbol `name` ([A-Za-z_][A-Za-z0-9_]*) with values 0..range-1
 * (range 0 = unbounded). *out_id (may be NULL) gets its id (ids count from 0 in declaration
 * order). INVALID_ARGUMENT (bad name, negative range), ALREADY_EXISTS (name taken),
 * RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_comp_add_static_symbol(troupe_asgn_comp_t *comp,
                                                                   const char *name, int64_t range,
                                                                   int32_t *out_id);
/* Id of a static symbol by name, -1 if none. */
int32_t troupe_asgn_comp_find_static_symbol(const troupe_asgn_comp_t *comp, const char *name);

/* Adds tn to embedded_nodes (retained; adding twice is a no-op). RESOURCE_EXHAUSTED,
 * INVALID_ARGUMENT for NULL. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_comp_add_embedded(troupe_asgn_comp_t *comp,
                                                              troupe_tnode_t *tn);
bool troupe_asgn_comp_is_embedded(const troupe_asgn_comp_t *comp, const troupe_tnode_t *tn);

/* ---- projections -------------------------------------------------------------------------- */

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

/* ---- builders ----------------------------------------------------------------------------- */
/* Every builder returns OK and the new tree in *out (borrowed from comp), or INVALID_ARGUMENT
 * (NULL arguments, an op out of range, a bad projection as described above) or
 * RESOURCE_EXHAUSTED; *out is NULL on failure. */

TROUPE_MUST_USE troupe_status_t troupe_asgn_noop(troupe_asgn_comp_t *comp, troupe_asgn_t **out);
/* SEQ of `count` trees in order; nested SEQs are flattened, NOOPs dropped; count 0 gives NOOP,
 * one remaining item gives the item itself. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_seq(troupe_asgn_comp_t *comp, size_t count,
                                                troupe_asgn_t *const *items, troupe_asgn_t **out);
TROUPE_MUST_USE troupe_status_t troupe_asgn_seq2(troupe_asgn_comp_t *comp, troupe_asgn_t *a,
                                                 troupe_asgn_t *b, troupe_asgn_t **out);
/* text is copied; body NULL means NOOP. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_block_comment(troupe_asgn_comp_t *comp,
                                                          const char *text, troupe_asgn_t *body,
                                                          troupe_asgn_t **out);

/* lhs =accum op(rhs...) over `spec` (operand i of the spec is rhs i). Any valid binop may be
 * the accumulator (the body computes accum(lhs, op(rhs...))); with initialize_neutral it must
 * have a neutral element (troupe_binop_neutral), else FAILED_PRECONDITION. Errors surface
 * here, not at lowering. Source: OCANNL Accum_op. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_accum_unop(troupe_asgn_comp_t *comp,
                                                       bool initialize_neutral,
                                                       troupe_binop_t accum, troupe_tnode_t *lhs,
                                                       troupe_unop_t op, troupe_asgn_buffer_t rhs,
                                                       const char *spec, troupe_asgn_t **out);
TROUPE_MUST_USE troupe_status_t
troupe_asgn_accum_binop(troupe_asgn_comp_t *comp, bool initialize_neutral, troupe_binop_t accum,
                        troupe_tnode_t *lhs, troupe_binop_t op, troupe_asgn_buffer_t rhs1,
                        troupe_asgn_buffer_t rhs2, const char *spec, troupe_asgn_t **out);
TROUPE_MUST_USE troupe_status_t troupe_asgn_accum_ternop(
    troupe_asgn_comp_t *comp, bool initialize_neutral, troupe_binop_t accum, troupe_tnode_t *lhs,
    troupe_ternop_t op, troupe_asgn_buffer_t rhs1, troupe_asgn_buffer_t rhs2,
    troupe_asgn_buffer_t rhs3, const char *spec, troupe_asgn_t **out);

/* lhs = op(rhs) with one rhs cell giving troupe_vec_unop_output_count(op, lhs->prec) lhs cells
 * along the lhs's last axis (see troupe_projections_parse's vec_length). INVALID_ARGUMENT
 * also when the lhs precision has no vector form (void, uint4x32). Source: OCANNL
 * Set_vec_unop. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_set_vec_unop(troupe_asgn_comp_t *comp,
                                                         troupe_vec_unop_t op, troupe_tnode_t *lhs,
                                                         troupe_asgn_buffer_t rhs, const char *spec,
                                                         troupe_asgn_t **out);

/* Fetches (OCANNL Fetch); each fills every cell of tn. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_fetch_constant(troupe_asgn_comp_t *comp,
                                                           troupe_tnode_t *tn, double c,
                                                           troupe_asgn_t **out);
TROUPE_MUST_USE troupe_status_t troupe_asgn_fetch_constant_bits(troupe_asgn_comp_t *comp,
                                                                troupe_tnode_t *tn, int64_t bits,
                                                                troupe_asgn_t **out);
/* `values` (copied) in row-major order; count must equal num_elems (INVALID_ARGUMENT giving
 * both). */
TROUPE_MUST_USE troupe_status_t troupe_asgn_fetch_constant_fill(troupe_asgn_comp_t *comp,
                                                                troupe_tnode_t *tn,
                                                                const double *values, size_t count,
                                                                troupe_asgn_t **out);
/* Each cell gets its row-major flat offset. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_fetch_range_over_offsets(troupe_asgn_comp_t *comp,
                                                                     troupe_tnode_t *tn,
                                                                     troupe_asgn_t **out);
/* tn = sliced[batch, ...]: sliced has ndims = tn->ndims + 1 with dims[1..] equal to tn's
 * dims, and the static symbol's range (when nonzero) must not exceed sliced->dims[0].
 * INVALID_ARGUMENT naming the mismatching axis or the symbol; NOT_FOUND for an unknown
 * symbol id. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_fetch_slice(troupe_asgn_comp_t *comp,
                                                        troupe_tnode_t *tn, int32_t static_sym,
                                                        troupe_tnode_t *sliced,
                                                        troupe_asgn_t **out);
/* Each cell gets the static symbol's value. NOT_FOUND for an unknown symbol id. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_fetch_embed_symbol(troupe_asgn_comp_t *comp,
                                                               troupe_tnode_t *tn,
                                                               int32_t static_sym,
                                                               troupe_asgn_t **out);
/* Each cell gets tn's id. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_fetch_embed_self_id(troupe_asgn_comp_t *comp,
                                                                troupe_tnode_t *tn,
                                                                troupe_asgn_t **out);

/* ---- helpers for common forms ------------------------------------------------------------- */

/* lhs := rhs cell by cell (same ndims and dims): accum_unop(true, ARG2, lhs, IDENTITY, rhs,
 * "ab..=>ab.."). */
TROUPE_MUST_USE troupe_status_t troupe_asgn_copy(troupe_asgn_comp_t *comp, troupe_tnode_t *lhs,
                                                 troupe_asgn_buffer_t rhs, troupe_asgn_t **out);
/* lhs := op(rhs1, rhs2) cell by cell (all three the same ndims and dims). */
TROUPE_MUST_USE troupe_status_t troupe_asgn_pointwise_binop(troupe_asgn_comp_t *comp,
                                                            troupe_tnode_t *lhs, troupe_binop_t op,
                                                            troupe_asgn_buffer_t rhs1,
                                                            troupe_asgn_buffer_t rhs2,
                                                            troupe_asgn_t **out);

/* ---- inspection --------------------------------------------------------------------------- */

/* Structural equality of two trees (nodes by id, specs by text, constants bitwise, static
 * symbols by id). Trees may come from different comps. */
bool troupe_asgn_equal(const troupe_asgn_t *a, const troupe_asgn_t *b);

/* ---- lowering ----------------------------------------------------------------------------- */

/* Lowers comp->root into a new procedure named `name` (a C identifier) as described in the
 * header comment; the result passes troupe_ll_proc_validate. Caller owns *out.
 * INVALID_ARGUMENT (bad name), FAILED_PRECONDITION (initialize_neutral with an accumulator
 * that has no neutral element), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_lower(const troupe_asgn_comp_t *comp, const char *name,
                                                  troupe_ll_proc_t **out);

/* Lowers one tree of `comp` into an existing procedure and returns the statement in *out
 * (not installed as the body). The comp's static symbols are added to proc by name where
 * missing (an existing symbol of the same name must be static). Same errors. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_lower_into(const troupe_asgn_comp_t *comp,
                                                       const troupe_asgn_t *tree,
                                                       troupe_ll_proc_t *proc, troupe_ll_t **out);

#ifdef __cplusplus
}
#endif
#endif
