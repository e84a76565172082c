/* troupe — merge buffers inside the runtime (see merge.h for the rules). Internal: not
 * installed.
 *
 * Each stream record (runtime_impl.h) holds a troupe__merge_buffer_t. Its "scheduled" half is
 * the host side's view, read and written with the device lock held when work is scheduled; its
 * "stream side" half is what the stream's own work items see when they run (FIFO order). The
 * two agree at each point of the stream's schedule.
 *
 * Thread safety: as marked on each function. Ownership: the merge buffer holds a reference to
 * its scheduled node; contexts, routines and nodes passed in are borrowed.
 */
#ifndef TROUPE_ACTORS_MERGE_IMPL_H
#define TROUPE_ACTORS_MERGE_IMPL_H

#include "actors/device.h"
#include "actors/event.h"
#include "actors/ledger.h"
#include "actors/merge.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "devices/device.h"
#include "ir/lowlevel.h"
#include "ir/tnode.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe__srec troupe__srec_t;     /* runtime_impl.h */
typedef struct troupe_context troupe_context_t; /* actors/context.h */
typedef struct troupe__carray troupe__carray_t; /* runtime_impl.h */

typedef struct troupe__merge_buffer {
    /* Scheduled (device lock). */
    troupe_tnode_t *node;   /* the node it was last scheduled to hold, retained; NULL none */
    bool streaming;         /* it points at a source array (STREAMING) */
    troupe__akey_t src;     /* that array */
    int64_t sched_capacity; /* bytes of its pool as scheduled (grow-only) */
    int32_t pool_id;        /* its pool's id (fixed) */
    /* Stream side. */
    int64_t capacity;        /* bytes of its pool actually allocated */
    troupe_buffer_loc_t cur; /* what a merge-buffer argument resolves to */
    bool valid;              /* cur holds something */
} troupe__merge_buffer_t;

/* ---- the per-stream state ------------------------------------------------------------------- */

/* An empty merge buffer whose pool will be `pool_id`. */
static inline void troupe__merge_buffer_init(troupe__merge_buffer_t *mb, int32_t pool_id)
{
    *mb = (troupe__merge_buffer_t){.pool_id = pool_id};
}
/* Frees its pool and drops its node (device teardown, the stream idle). */
void troupe__merge_buffer_release(troupe__merge_buffer_t *mb, troupe_driver_t *drv, int ordinal);
/* Appends (merge_buffer (node n|nil) (mode copy|streaming|nil) (capacity N)). Device lock. */
void troupe__merge_buffer_sexp(const troupe__merge_buffer_t *mb, troupe__strbuf_t *sb);

/* Stream side: grows s's merge buffer to at least `bytes` (its old pool is freed first) and
 * returns where `bytes` of it lie. The driver's status. */
TROUPE_MUST_USE troupe_status_t troupe__merge_buffer_ensure(troupe__srec_t *s, int64_t bytes,
                                                            troupe_buffer_loc_t *out);
/* Stream side: merge-buffer arguments of later launches on s resolve to `loc`. */
void troupe__merge_buffer_set(troupe__srec_t *s, troupe_buffer_loc_t loc);
/* Device lock: s's merge buffer is scheduled to receive a copy of tn (grown to its size). */
void troupe__merge_buffer_schedule_copy(troupe__srec_t *s, troupe_tnode_t *tn);

/* ---- checks and resolution of a routine's merge node ----------------------------------------- */

/* The static check at link (era B): FAILED_PRECONDITION naming both nodes when `proc` reads a
 * merge node and ctx is tagged with another one. */
TROUPE_MUST_USE troupe_status_t troupe__merge_check_link(const troupe_ll_proc_t *proc,
                                                         const troupe_context_t *ctx);
/* The run-time check (device lock): FAILED_PRECONDITION unless s's merge buffer is scheduled
 * to hold proc's merge node. *out_src is the ledger entry of the source array a STREAMING
 * merge buffer points at (the run reads it), else NULL. OK when proc reads no merge node. */
TROUPE_MUST_USE troupe_status_t troupe__merge_check_run(const troupe_ll_proc_t *proc,
                                                        troupe__srec_t *s,
                                                        troupe__entry_t **out_src);
/* Launch resolution (stream side): sets the merge-buffer argument `arg` of a launch of routine
 * `name` on s. FAILED_PRECONDITION when the merge buffer holds nothing. */
TROUPE_MUST_USE troupe_status_t troupe__merge_resolve(troupe__srec_t *s, const char *name,
                                                      troupe_karg_t *arg);

/* ---- local device_to_device (one process; the devices' locks held) -------------------------- */

/* STREAMING's consumer check: FAILED_PRECONDITION unless `consumer_merge` (the node the
 * consumer reads through `.merge`, NULL none) is n, naming both. */
TROUPE_MUST_USE troupe_status_t troupe__merge_check_consumer(const troupe_tnode_t *n,
                                                             const troupe_tnode_t *consumer_merge,
                                                             const char *consumer_name);
/* Schedules on dst's stream, after the RAW wait for src's array `sa` of n (on device `src_dev`:
 * dst's device or another device of its backend, both locked, lower ordinal first): NO copies
 * it into dst's array of n, COPY into dst's merge buffer; *out_ev (may be NULL) is the copy's
 * event, noted as a reader of `sa` in src_dev's ledger (WAR). STREAMING (one device only)
 * points dst's merge buffer at `sa` and records no event: the caller runs the consumer next.
 * The stream's refusal, RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__merge_d2d_locked(troupe_tnode_t *n, troupe_merge_use_t use,
                                                         troupe_context_t *dst,
                                                         troupe_device_t *src_dev,
                                                         const troupe__carray_t *sa,
                                                         troupe_event_t **out_ev);

#ifdef __cplusplus
}
#endif
#endif
