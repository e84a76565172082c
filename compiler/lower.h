/* troupe — lowering of assignment comps (ir/assign.h) to the low-level IR (ir/lowlevel.h):
 * OCANNL `Assignments.to_low_level` (OCANNL_NOTES §6.1).
 *
 * ---- Rules ----------------------------------------------------------------------------------
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
 * Thread safety: lowering only reads the comp, so several threads may lower one built comp
 * at once (each into its own procedure).
 * Ownership: troupe_asgn_lower returns a procedure the caller owns (troupe_ll_proc_destroy);
 * troupe_asgn_lower_into builds into the caller's procedure.
 */
#ifndef TROUPE_COMPILER_LOWER_H
#define TROUPE_COMPILER_LOWER_H

#include "troupe/base/status.h"
#include "troupe/ir/assign.h"
#include "troupe/ir/lowlevel.h"

#ifdef __cplusplus
extern "C" {
#endif

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
