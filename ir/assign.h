/* troupe — the high-level assignment form (OCANNL `Assignments`, OCANNL_NOTES §6.1): trees of
 * accumulations over einsum projections (ir/projection.h), vector ops and fetches, in a comp.
 *
 * An assignment tree (troupe_asgn_t) is one of:
 *   NOOP; SEQ of n items; BLOCK_COMMENT(text, body);
 *   ACCUM_OP  lhs =accum op(rhs1[, rhs2[, rhs3]]) over a projection (einsum notation of
 *             ir/projection.h), optionally initialising the lhs with the accumulator's
 *             neutral element first;
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
 * Projections are written in einsum notation (ir/projection.h); compiler/lower.h lowers a comp
 * to the low-level IR (ir/lowlevel.h).
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

#include "troupe/base/status.h"
#include "troupe/ir/lowlevel.h"
#include "troupe/ir/ops.h"
#include "troupe/ir/prec.h"
#include "troupe/ir/projection.h"
#include "troupe/ir/tnode.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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

/* Most gather nodes of one assignment (ir/projection.h "@N[...]"). */
#define TROUPE_ASGN_MAX_GATHER TROUPE_PROJ_MAX_GATHER

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
            troupe_tnode_t *gather[TROUPE_ASGN_MAX_GATHER]; /* "@1", "@2" of the spec */
            int ngather;
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
    troupe_arena_t *arena; /* bump allocator (internal: ir/arena_impl.h) */
    troupe_asgn_t *root; /* starts as NOOP; set it with troupe_asgn_comp_set_root */

    troupe_asgn_static_symbol_t *syms; /* nsyms entries; ids are indices */
    int32_t nsyms;
    size_t syms_cap;

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
/* The index of tn in comp->nodes (the nodes the comp mentions, sorted by id; a binary search),
 * or SIZE_MAX when the comp does not mention it (or either is NULL). */
size_t troupe_asgn_comp_node_index(const troupe_asgn_comp_t *comp, const troupe_tnode_t *tn);

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

/* The general accumulating assignment: lhs =accum op(rhs[0..arity-1]) over `spec`, with rhs_kind
 * giving the arity (1..3) and op's family, and `ngather` (0..TROUPE_ASGN_MAX_GATHER) gather
 * nodes that the spec's "@N[...]" indices read (gather[N-1]); ngather 0 is exactly
 * troupe_asgn_accum_unop/binop/ternop. A gather node has an integer precision (byte, uint16,
 * int32, uint32, int64, uint64) or single/double holding integral values (a fractional value
 * fails the run like an out-of-range one); it must not be written by the routine that gathers.
 * With a gather in the lhs and accum ADD this is a scatter-add; duplicates are summed in the
 * product space's loop order on every backend. INVALID_ARGUMENT names the gather node for a
 * bad precision. */
TROUPE_MUST_USE troupe_status_t troupe_asgn_accum_gather(
    troupe_asgn_comp_t *comp, bool initialize_neutral, troupe_binop_t accum, troupe_tnode_t *lhs,
    troupe_asgn_rhs_kind_t rhs_kind, int op, const troupe_asgn_buffer_t *rhs, int ngather,
    troupe_tnode_t *const *gather, const char *spec, troupe_asgn_t **out);

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


#ifdef __cplusplus
}
#endif
#endif
