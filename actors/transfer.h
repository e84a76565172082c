/* troupe — transfers: device_to_device, and the headers of the other transfers (docs/architecture.md §4,
 * §5; seed `Backend_intf` device_to_device; OCANNL_NOTES §2.3).
 *
 * This header gathers the runtime's transfers: between a node's host array and its device
 * arrays (actors/host.h), between contexts and through merge buffers (this call; the rules in
 * actors/merge.h), and to external agents and other ranks (actors/lend.h).
 *
 * troupe_device_to_device only schedules work and returns at once with an event completing
 * after it (out_ev may be NULL), following the ledger rules (docs/architecture.md §4).
 *
 * Thread safety: thread-safe. Ownership: contexts, nodes and the consumer are borrowed;
 * *out_ctx and *out_ev are owned by the caller.
 */
#ifndef TROUPE_ACTORS_TRANSFER_H
#define TROUPE_ACTORS_TRANSFER_H

#include "troupe/actors/context.h"
#include "troupe/actors/event.h"
#include "troupe/actors/host.h"
#include "troupe/actors/lend.h"
#include "troupe/actors/merge.h"
#include "troupe/actors/routine.h"
#include "troupe/base/status.h"
#include "troupe/ir/tnode.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * Either context may stand for another rank (troupe_context_new_remote, actors/lend.h).
 * Errors: INVALID_ARGUMENT (bad use, contexts of different backends, a consumer missing or
 * given for NO/COPY, a consumer on another stream), NOT_FOUND (n not in src_ctx, or for NO not
 * in dst_ctx), FAILED_PRECONDITION (the consumer reads another merge node, naming both;
 * STREAMING across devices), the dst stream's failure, RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_device_to_device(
    troupe_tnode_t *n, troupe_merge_use_t use, troupe_context_t *dst_ctx, troupe_context_t *src_ctx,
    troupe_routine_t *consumer, troupe_context_t **out_ctx, troupe_event_t **out_ev);

#ifdef __cplusplus
}
#endif
#endif
