/* troupe — the host side of hosted nodes: transfers between a node's host array and its
 * device arrays (docs/architecture.md §4; seed `Backend_intf` from_host / to_host / init_from_host, seed
 * `Tnode` prepare_read / prepare_write / devices_not_lagging_host; OCANNL_NOTES §2.1, §2.2, §3).
 *
 * All calls only schedule work and return at once with an event completing after it (out_ev
 * may be NULL). They follow the ledger rules (docs/architecture.md §4): a read of a device array waits for
 * another stream's pending write of it, a write for other streams' pending reads and writes.
 *
 * Host arrays: a from_host reads the node's host array until its event completes and a to_host
 * writes it; troupe_tnode_set_values waits for both (docs/architecture.md §4 host write). A host read
 * (troupe_tnode_get_values...) of a node whose newest value is on a device fetches it: it
 * schedules a to_host on the stream of the last write and syncs that event only (not the whole
 * stream), with the configured timeout.
 *
 * Lagging the host (automatic transfers). Every host write of a node (troupe_tnode_set_values
 * and the like) starts a new generation of its host array. A device array lags the host when it
 * holds an older generation; with troupe_config_auto_host_transfers() a routine that reads a
 * hosted node first uploads the host array into its array when that array lags (troupe keeps
 * this per array, where OCANNL's devices_not_lagging_host keeps it per device). One exception:
 * an array filled by an explicit troupe_from_host or troupe_init_from_host keeps its values when
 * the program explicitly uploaded the newer generation elsewhere too. So setting a host array,
 * uploading it to stream A, setting it again and uploading it to stream B leaves A's values in
 * place: explicit uploads are never undone behind the program's back. A host write that no
 * explicit upload followed still refreshes every array of the node, explicitly filled or not.
 * Arrays filled otherwise (links, automatic transfers, routine writes) always follow the host;
 * a device_to_device NO copy passes its source's state on.
 *
 * Thread safety: thread-safe. Ownership: contexts and nodes are borrowed; *out_ctx and *out_ev
 * are owned by the caller.
 */
#ifndef TROUPE_ACTORS_HOST_H
#define TROUPE_ACTORS_HOST_H

#include "troupe/actors/context.h"
#include "troupe/actors/event.h"
#include "troupe/base/status.h"
#include "troupe/ir/tnode.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* troupe_init_from_host for tns[0..n) at once: the per-stream nodes' arrays packed in one
 * zero-filled pool, in the order given, each at the next multiple of 64 bytes (the packing a
 * linked routine gives its arrays, actors/routine.h, so nodes passed in node-id order lie as a
 * routine's arrays of the same sizes do: parallel/ lays its parameters out like their
 * gradients so); nodes known shared across streams get their device-wide arrays. One child
 * context holds them all (*out_ctx). The uploads are scheduled in order on ctx's stream.
 * Errors: INVALID_ARGUMENT (NULL, n == 0, a node given twice), and those of
 * troupe_init_from_host, naming the node; the argument errors come before anything is
 * allocated (an upload that fails later leaves the stream failed, as troupe_init_from_host). */
TROUPE_MUST_USE troupe_status_t troupe_init_from_host_packed(troupe_context_t *ctx, size_t n,
                                                             troupe_tnode_t *const *tns,
                                                             troupe_context_t **out_ctx);

#ifdef __cplusplus
}
#endif
#endif
