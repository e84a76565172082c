/* troupe — devices: one physical device of a backend (docs/architecture.md §2; seed `Backend_intf`:
 * get_device's result, new_stream, suggested_num_streams, get_used_memory).
 *
 * A device is borrowed from its backend (troupe_get_device, actors/backend.h). It owns its
 * memory pools, the records of its streams (and their merge buffers) and the coherence ledger,
 * all behind one mutex on the caller's side.
 *
 * Thread safety: every function is thread-safe. Ownership: devices belong to their backend
 * and live until its teardown; streams are refcounted (see troupe_new_stream).
 */
#ifndef TROUPE_ACTORS_DEVICE_H
#define TROUPE_ACTORS_DEVICE_H

#include "troupe/actors/stream.h"
#include "troupe/base/status.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_device troupe_device_t;

int troupe_device_ordinal(const troupe_device_t *d);
/* Global device id: unique across every backend opened by this process (seed `device_id`). */
int32_t troupe_device_id(const troupe_device_t *d);

/* Seed `suggested_num_streams` for the backend's config: sync 1; cpu one per online core (>= 1). */
TROUPE_MUST_USE troupe_status_t troupe_suggested_num_streams(troupe_device_t *d, int *out_count);

/* Seed `new_stream` (the seed's troupe_stream_new; the actor layer's constructor it wraps is
 * troupe__stream_actor_new, actors/stream_impl.h): a new stream on device d with the next
 * stream id of the device (0, 1, ...), named "<backend>:<ordinal>:<stream_id>", inline for
 * "sync" and threaded for "cpu". The caller owns one reference (troupe_stream_release); the
 * device keeps another until teardown (its merge buffer and ledger entries refer to it).
 * Errors: INVALID_ARGUMENT, RESOURCE_EXHAUSTED, TRANSPORT_ERROR (actor start), driver status. */
TROUPE_MUST_USE troupe_status_t troupe_new_stream(troupe_device_t *d, troupe_stream_t **out);

/* Exact bytes of device memory troupe holds on d: context pools (the arrays links allocated),
 * shared arrays and merge buffers (as scheduled). */
TROUPE_MUST_USE troupe_status_t troupe_get_used_memory(troupe_device_t *d, int64_t *out_bytes);

#ifdef __cplusplus
}
#endif
#endif
