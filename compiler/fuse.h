/* troupe — loop fusion of pointwise nests (issue 14, "fused epilogues").
 *
 * troupe_ll_fuse_loops merges adjacent loop nests of a procedure that run over the same
 * iteration space and touch each element of the arrays they share at the same iteration, so
 * that a chain of elementwise passes (an optimizer's update `m = mu*m; m += lr*g; w -= c*m`, a
 * bias add then an activation, the softmax pieces) reads and writes each element once while it
 * is in registers, instead of once per pass.
 *
 * Two statements A then B of a sequence are fused when both are perfect loop nests of the same
 * depth, with the same bounds level by level, whose innermost bodies are plain SETs (their
 * local scopes, if any, SET_LOCALs without loops: an inlined pointwise definition), every SET
 * writes its node injectively (each axis a fixed index, or exactly one loop iterator of the nest
 * with coefficient 1, every iterator used once), and every node one of them writes is accessed by
 * the other only at the element the writer writes at the same iteration. Then each element sees A's
 * statements before B's, exactly as before, so results are bit for bit those of the unfused code
 * (the interpreter runs the fused form too). Fusion repeats along the sequence (A+B, then +C...)
 * and inside loop bodies, past comments between them. Contractions (a write that does not use every
 * iterator) are never fused this way, so compiler/gemm still sees them whole.
 *
 * Prefix fusion (troupe's): when that test fails, A and B that share their first d loops (the
 * same bounds level by level) become those d loops around A's body then B's, for the largest
 * d where every node one of them writes and the other accesses belongs to the outer
 * iterations: each axis of every access to it either one outer iterator (coefficient 1, the
 * same index in all of them, every outer iterator on one axis) or none. Two accesses to one
 * element then fall in the same outer iteration, where A's still precede B's. Only nests that
 * share such a node fuse, none holding a product summed over a loop (a GEMM candidate), and
 * never over a loop whose body is one SET summing over it (compiler/cgen may run it as a lane
 * sum, another order of additions).
 *
 * Past independent statements (troupe's): a nest that fuses with none of the above with the
 * statement before it may fuse with an earlier one, passing up to 8 statements (comments
 * aside) that neither write a node it accesses nor access a node it writes; a zeroing right
 * before it of a node it accesses moves with it. Its first two loops may be swapped for that,
 * above an inner loop, when every node it writes is accessed at one index on the axes of those
 * two loops' iterators and uses at least one of them (two iterations touching one element then
 * share an iterator and keep their order): a convolution's bias gradient, summed over
 * (channel, batch, position), joins the pass over the batch's planes that wrote them.
 * A max pool's gradient pieces (tie count, share, the window's cells) become one pass, and the
 * pass over a plane after them joins it per plane.
 *
 * Sunk zeroings (troupe's): a ZERO_OUT of n followed by a nest whose first d loops own n's
 * slices that way (those loops spanning n's axes from 0; the zeroing's other axes free) becomes
 * a zeroing of the slice at the start of each outer iteration, so the cells are written while
 * in cache; again not before a summed product (compiler/cgen drops such zeroings itself).
 *
 * Source: the classic legality condition of loop fusion (no fusion-preventing dependence,
 * Kennedy & McKinley), restricted to same-element dependences.
 *
 * Thread safety: mutates the procedure (as troupe_ll_optimize).
 * Ownership: new statements come from the procedure's arena.
 */
#ifndef TROUPE_COMPILER_FUSE_H
#define TROUPE_COMPILER_FUSE_H

#include "troupe/base/status.h"
#include "troupe/ir/lowlevel.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fuses the procedure's body in place, every kind of fusion above; *out_fused (may be NULL)
 * counts the fusions made. INVALID_ARGUMENT when proc is NULL; RESOURCE_EXHAUSTED when the
 * arena cannot grow (the body is then unchanged). */
TROUPE_MUST_USE troupe_status_t troupe_ll_fuse_loops(troupe_ll_proc_t *proc, size_t *out_fused);

/* The same, with the same status codes; with outer false only nests over the same space fuse
 * (no prefix fusion, no fusion past independent statements, no sunk zeroings): for code
 * generators that spread a nest's threads over its outer loops only (cuda), where a fused nest
 * would run on fewer threads. troupe_ll_fuse_loops is this with outer true. */
TROUPE_MUST_USE troupe_status_t troupe_ll_fuse_loops_outer(troupe_ll_proc_t *proc, bool outer,
                                                           size_t *out_fused);

#ifdef __cplusplus
}
#endif
#endif
