/* troupe — code and routines: compile (context-independent) and link (code in a context)
 * (docs/architecture.md §2, §4, §5; seed `Backend_intf` compile / link / routine; OCANNL_NOTES §1.6, §1.7).
 *
 * troupe_compile lowers assignments (ir/assign, compiler/lower) or takes a low-level procedure,
 * optimizes it (compiler/optimize: memory modes are inferred here), generates C
 * (compiler/cgen) and has the backend's driver compile it. The code keeps the optimized
 * procedure (inputs, outputs, merge node) and the generated parameter list, which fixes the
 * order of the launch arguments.
 *
 * troupe_link puts code in a context and returns a routine whose context is a child holding
 * every array the code uses:
 *   - verify_prior_context: every node the code reads before writing it (proc inputs: read-only
 *     or recurrent, materialized, not constant) and its merge node, unless embedded (nodes the
 *     comp initialises itself), must already be in the context, else FAILED_PRECONDITION
 *     "the linked context lacks node <name>";
 *   - merge buffer, statically (era B): if the code reads node m through `.merge` and the
 *     context is tagged with another merge node n, FAILED_PRECONDITION naming both;
 *   - missing arrays are allocated deterministically: per-stream arrays sorted by node id,
 *     64-byte aligned, packed into one fresh zero-filled pool {pool_id, offset} owned by the
 *     child; nodes known Shared_cross_streams (and hosted constants/volatiles) use one
 *     device-wide array; other nodes become Per_stream (provenance 410). troupe departs from
 *     OCANNL here: a read-only node is not made shared by its first link;
 *   - WAW: a shared array written by the code gets the context's stream as its owner; if
 *     another stream already owns it, FAILED_PRECONDITION naming the node and both streams;
 *   - hosted nodes get the host coherence hooks (docs/architecture.md §4 host read / host write).
 * The routine's static index bindings start at 0 and are set with troupe_routine_set_index.
 *
 * troupe_routine_run schedules, on the context's stream (returns at once):
 *   1. with troupe_config_auto_host_transfers(), a from_host of every hosted node the code
 *      reads whose array lags the node's host array;
 *   2. RAW waits for other streams' pending writes of the arrays it reads (merge source
 *      included), WAR/WAW waits for other streams' pending reads/writes of the arrays it
 *      writes (d2d copies and merge-buffer readers included);
 *   3. the launch (the merge buffer argument is resolved when it launches);
 *   4. an event recorded after it, noted as writer/reader in the ledger.
 *
 * Thread safety: compile, link and run are thread-safe; set_index races with a concurrent run
 * of the same routine (the value is read when run schedules it). Ownership: code and routines
 * are refcounted (atomic); a routine retains its code and context; code retains its backend.
 */
#ifndef TROUPE_ACTORS_ROUTINE_H
#define TROUPE_ACTORS_ROUTINE_H

#include "troupe/actors/backend.h"
#include "troupe/actors/context.h"
#include "troupe/actors/event.h"
#include "troupe/base/status.h"
#include "troupe/ir/assign.h"
#include "troupe/ir/lowlevel.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_code troupe_code_t;
typedef struct troupe_routine troupe_routine_t;

/* Compiles comp->root as routine `name` (a C identifier) for backend b; the comp's embedded
 * nodes are remembered for link. comp is borrowed.
 * Errors: INVALID_ARGUMENT (NULL, bad name, invalid code), FAILED_PRECONDITION (inconsistent
 * memory modes), DEVICE_ERROR (the C compiler's message), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_compile(troupe_backend_t *b, const troupe_asgn_comp_t *comp,
                                               const char *name, troupe_code_t **out);
/* As troupe_compile, without fusing a product and a sum into one fma (compiler/optimize.h,
 * fuse_fma): every operation of the comp rounds on its own, as C code doing the same operations
 * in the same order does, bit for bit (parallel/'s optimizer routine and its fused update in the
 * allreduce, parallel/dp.h). Same errors. */
TROUPE_MUST_USE troupe_status_t troupe_compile_unfused(troupe_backend_t *b,
                                                       const troupe_asgn_comp_t *comp,
                                                       const char *name, troupe_code_t **out);
/* Same from a low-level procedure, which is consumed (*proc_p nulled, also on error); it is
 * optimized unless already optimized. No node counts as embedded. */
TROUPE_MUST_USE troupe_status_t troupe_compile_proc(troupe_backend_t *b, troupe_ll_proc_t **proc_p,
                                                    troupe_code_t **out);
void troupe_code_retain(troupe_code_t *code);
void troupe_code_release(troupe_code_t **code_p);
/* The optimized procedure (borrowed). */
const troupe_ll_proc_t *troupe_code_proc(const troupe_code_t *code);

/* Links code in ctx (see the header comment). Caller owns *out.
 * Errors: INVALID_ARGUMENT (NULL, code of another backend), FAILED_PRECONDITION (missing prior
 * node, merge-buffer mismatch, a second writer of a shared array, a memory mode that cannot be
 * made per-stream), RESOURCE_EXHAUSTED (device memory), driver errors. */
TROUPE_MUST_USE troupe_status_t troupe_link(troupe_context_t *ctx, troupe_code_t *code,
                                            troupe_routine_t **out);
void troupe_routine_retain(troupe_routine_t *r);
void troupe_routine_release(troupe_routine_t **r_p);

/* The routine's context: the link's child (borrowed). Use it for later links that need the
 * arrays this link added. */
troupe_context_t *troupe_routine_context(const troupe_routine_t *r);
const char *troupe_routine_name(const troupe_routine_t *r);

/* Binds static index `name` to `value` for later runs. NOT_FOUND (no such symbol),
 * INVALID_ARGUMENT (value outside 0..range-1, or negative for an unbounded symbol) naming the
 * symbol, its range and the value. */
TROUPE_MUST_USE troupe_status_t troupe_routine_set_index(troupe_routine_t *r, const char *name,
                                                         int64_t value);
TROUPE_MUST_USE troupe_status_t troupe_routine_get_index(const troupe_routine_t *r,
                                                         const char *name, int64_t *out_value);

/* Schedules one run (see the header comment); *out_ev (may be NULL) gets an event completing
 * after it (caller owns it). A failure of the launch itself fails that event, the stream and
 * everything waiting on them; troupe_event_sync / troupe_stream_await report it.
 * Errors now: the stream's failure status (a failed stream refuses new work),
 * FAILED_PRECONDITION (merge buffer scheduled for another node, or none), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_routine_run(troupe_routine_t *r, troupe_event_t **out_ev);

#ifdef __cplusplus
}
#endif
#endif
