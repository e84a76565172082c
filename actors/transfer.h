/* troupe — transfers between host and devices and between streams, and merge buffers
 * (DESIGN.md §4, §5; seed `Backend_intf` from_host / to_host / init_from_host /
 * device_to_device; OCANNL_NOTES §2).
 *
 * All calls only schedule work and return at once with an event completing after it (out_ev
 * may be NULL). They follow the ledger rules (actors/ledger.h): a read waits for another
 * stream's pending write of the array, a write for other streams' pending reads and writes.
 *
 * Host arrays: a from_host reads the node's host array until its event completes and a to_host
 * writes it; troupe_tnode_set_values waits for both (DESIGN.md §4 host write). A host read
 * (troupe_tnode_get_values...) of a node whose newest value is on a device fetches it: it
 * schedules a to_host on the stream of the last write and syncs that event only (not the whole
 * stream), with the configured timeout.
 *
 * Merge buffers: one per stream, grow-only, in a pool of its own, tagged with the node it was
 * last scheduled to hold. Its pointer is resolved when a consumer routine launches.
 *
 * Thread safety: thread-safe. Ownership: contexts and nodes are borrowed; *out_ctx and *out_ev
 * are owned by the caller.
 */
#ifndef TROUPE_ACTORS_TRANSFER_H
#define TROUPE_ACTORS_TRANSFER_H

#include "actors/context.h"
#include "actors/event.h"
#include "actors/routine.h"
#include "base/status.h"
#include "ir/tnode.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Seed `merge_buffer_use`. */
typedef enum troupe_merge_use {
    TROUPE_MERGE_NO = 0,    /* copy src's array of n into dst's array of n */
    TROUPE_MERGE_COPY,      /* copy src's array of n into dst's stream's merge buffer */
    TROUPE_MERGE_STREAMING, /* dst's merge buffer points at src's array while `consumer` runs */
} troupe_merge_use_t;

/* Seed `from_host`: h2d of tn's host array into ctx's array of tn, on ctx's stream.
 * Errors: NOT_FOUND (tn not in ctx), FAILED_PRECONDITION (tn not hosted), the stream's
 * failure, RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_from_host(troupe_context_t *ctx, troupe_tnode_t *tn,
                                                 troupe_event_t **out_ev);

/* Seed `to_host`: d2h of ctx's array of tn into tn's host array, on ctx's stream. Same errors. */
TROUPE_MUST_USE troupe_status_t troupe_to_host(troupe_context_t *ctx, troupe_tnode_t *tn,
                                               troupe_event_t **out_ev);

/* Seed `init_from_host`: tn must be hosted and absent from ctx; allocates its array (own pool,
 * zero-filled), uploads the host array and returns the child context holding it in *out_ctx.
 * Errors: ALREADY_EXISTS (tn in ctx), FAILED_PRECONDITION (not hosted), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_init_from_host(troupe_context_t *ctx, troupe_tnode_t *tn,
                                                      troupe_context_t **out_ctx,
                                                      troupe_event_t **out_ev);

/* Seed `device_to_device` (era B shape: it yields a context). Moves src_ctx's array of n to
 * dst_ctx's stream, which first waits for src's pending write of n (RAW):
 *   NO         into dst_ctx's array of n (n must be in dst_ctx); the source array then counts
 *              as read by dst until the copy completes (WAR for later writers of it);
 *   COPY       into dst's stream's merge buffer (grown if needed); *out_ctx is tagged with n;
 *   STREAMING  (same device) dst's merge buffer points at src's array and `consumer` (a
 *              routine on dst's stream reading n through `.merge`) is run at once; src's array
 *              counts as read until the consumer's event completes, so a later write of n on
 *              src's stream waits for it. *out_ev is the consumer's event.
 * *out_ctx (may be NULL) gets a child of dst_ctx (tagged with n for COPY/STREAMING). When both
 * contexts hold the same array (shared), NO schedules nothing and *out_ev is a done event.
 * Errors: INVALID_ARGUMENT (bad use, contexts of different backends, a consumer missing or
 * given for NO/COPY, a consumer on another stream), NOT_FOUND (n not in src_ctx, or for NO not
 * in dst_ctx), FAILED_PRECONDITION (the consumer reads another merge node, naming both;
 * STREAMING across devices), the dst stream's failure, RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_device_to_device(troupe_tnode_t *n, troupe_merge_use_t use,
                                                        troupe_context_t *dst_ctx,
                                                        troupe_context_t *src_ctx,
                                                        troupe_routine_t *consumer,
                                                        troupe_context_t **out_ctx,
                                                        troupe_event_t **out_ev);

#ifdef __cplusplus
}
#endif
#endif
