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
 * local scopes, if any, SET_LOCALs without loops: an inlined pointwise definition), every SET writes its node injectively (each axis a fixed index, or exactly one loop
 * iterator of the nest with coefficient 1, every iterator used once), and every node one of them
 * writes is accessed by the other only at the element the writer writes at the same iteration.
 * Then each element sees A's statements before B's, exactly as before, so results are bit for bit
 * those of the unfused code (the interpreter runs the fused form too). Fusion repeats along the
 * sequence (A+B, then +C...) and inside loop bodies. Contractions (a write that does not use
 * every iterator) are never fused, so compiler/gemm still sees them whole.
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

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fuses the procedure's body in place; *out_fused (may be NULL) counts the fusions made.
 * RESOURCE_EXHAUSTED when the arena cannot grow (the body is then unchanged). */
TROUPE_MUST_USE troupe_status_t troupe_ll_fuse_loops(troupe_ll_proc_t *proc, size_t *out_fused);

#ifdef __cplusplus
}
#endif
#endif
