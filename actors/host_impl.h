/* troupe — the host-array table and the scheduling of host transfers inside the runtime (see
 * host.h for the rules). Internal: not installed.
 *
 * The host-array table (troupe__host_array_*) is process-wide, behind its own mutex, keyed by
 * node id. Per hosted node it keeps the generation of the host array (bumped by every host
 * write), the newest generation the program uploaded explicitly, the device write the host has
 * not fetched yet, and the transfers still using the host array. The coherence hooks of a
 * hosted node (troupe_tnode_hooks_t) read it: a host read fetches the pending device write, a
 * host write waits for the transfers and starts a new generation.
 *
 * Thread safety: the troupe__host_array_* calls take the table's mutex (never hold it while
 * taking a device lock); the *_locked calls need the device lock of the context or stream.
 * Ownership: the table holds one reference to each event it keeps; nodes and streams are
 * borrowed.
 */
#ifndef TROUPE_ACTORS_HOST_IMPL_H
#define TROUPE_ACTORS_HOST_IMPL_H

#include "actors/event.h"
#include "actors/host.h"
#include "actors/ledger.h"
#include "base/status.h"
#include "devices/device.h"
#include "ir/tnode.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe__srec troupe__srec_t;     /* runtime_impl.h */
typedef struct troupe_device troupe_device_t;   /* actors/device.h */
typedef struct troupe_context troupe_context_t; /* actors/context.h */

/* ---- the host-array table ------------------------------------------------------------------- */

/* Installs the coherence hooks on a hosted node (idempotent). */
void troupe__host_array_install_hooks(troupe_tnode_t *tn);
/* The host array's generation (0 before the first host write). */
int64_t troupe__host_array_gen(const troupe_tnode_t *tn);
/* Whether the device array `e` of the hosted node tn lags the host: it holds an older
 * generation of the host array, and it was not filled explicitly while the newest generation
 * was uploaded explicitly elsewhere (host.h, "Lagging the host"). */
bool troupe__host_array_lagging(const troupe_tnode_t *tn, const troupe__entry_t *e);
/* The array `e` now holds what a device write put there: generation `gen`, not explicit. */
void troupe__host_array_note_written(troupe__entry_t *e, int64_t gen);
/* A device write of tn's array `key` on stream s completes with ev: host reads fetch it.
 * RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__host_array_note_device_write(troupe_tnode_t *tn,
                                                                     troupe__srec_t *s,
                                                                     troupe__akey_t key,
                                                                     troupe_event_t *ev);
/* An in-flight transfer reads (h2d) or writes (d2h, is_write) tn's host array until ev
 * completes; host writes wait for all of them. RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__host_array_note_user(troupe_tnode_t *tn, troupe_event_t *ev,
                                                             bool is_write);
/* Makes stream s wait for the pending transfers using tn's host array: the writers only
 * (before an h2d reads it), or all of them (before a d2h writes it). Host-array RAW/WAR/WAW.
 * The stream's refusal status. */
TROUPE_MUST_USE troupe_status_t troupe__host_array_order(troupe_tnode_t *tn, troupe__srec_t *s,
                                                         bool is_write);
/* Forgets the device writes pending on dev's arrays (backend teardown). */
void troupe__host_array_purge_device(troupe_device_t *dev);

/* ---- host transfers (device lock held) ------------------------------------------------------ */

/* from_host of ctx's array of tn, with the ledger rules; `is_explicit` for the program's own
 * troupe_from_host / troupe_init_from_host (host.h), false for automatic transfers. *out_ev may
 * be NULL. Errors as troupe_from_host. */
TROUPE_MUST_USE troupe_status_t troupe__from_host_locked(troupe_context_t *ctx, troupe_tnode_t *tn,
                                                         bool is_explicit, troupe_event_t **out_ev);
/* d2h of array `loc` on stream s into tn's host array. */
TROUPE_MUST_USE troupe_status_t troupe__to_host_locked(troupe__srec_t *s, troupe_tnode_t *tn,
                                                       troupe_buffer_loc_t loc,
                                                       troupe_event_t **out_ev);

#ifdef __cplusplus
}
#endif
#endif
