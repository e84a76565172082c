/* troupe — backends, the user-facing entry of the runtime (docs/architecture.md §2; seed
 * `Backend_intf`: fresh_backend, num_devices, get_device, new_stream, suggested_num_streams,
 * get_used_memory, get_debug_info).
 *
 * A backend is one opened driver family ("sync": everything inline in the caller,
 * deterministic; "cpu": one actor thread per stream). It owns its devices (actors/device.h);
 * each device owns its memory pools, its streams' records and the coherence ledger.
 * Streams are the actor streams of actors/stream.h, named "<backend>:<ordinal>:<stream_id>";
 * troupe_stream_all_work / troupe_stream_await / troupe_stream_is_idle and troupe_event_sync /
 * troupe_event_is_done (actors/stream.h, actors/event.h) are the seed's operations on them.
 *
 * Thread safety: every function is thread-safe (device bookkeeping is behind one mutex per
 * device). Ownership: the backend is refcounted: troupe_backend_close drops the caller's
 * reference, and contexts and codes hold their own, so teardown (streams awaited and released,
 * every pool freed, the driver closed) happens when the last of them goes. Devices are
 * borrowed from their backend.
 */
#ifndef TROUPE_ACTORS_BACKEND_H
#define TROUPE_ACTORS_BACKEND_H

#include "troupe/actors/device.h"
#include "troupe/actors/stream.h"
#include "troupe/base/status.h"
#include "troupe/devices/device.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_backend troupe_backend_t;

/* Opens backend `name` ("sync" or "cpu"; NULL: troupe_config_backend()) with `config`
 * (only sets suggested_num_streams). Caller owns *out.
 * Errors: NOT_FOUND (no such driver, listing the built ones), INVALID_ARGUMENT (NULL out),
 * RESOURCE_EXHAUSTED, the driver's open status. */
TROUPE_MUST_USE troupe_status_t troupe_backend_open(const char *name, troupe_stream_config_t config,
                                                    troupe_backend_t **out);
void troupe_backend_retain(troupe_backend_t *b);
/* Drops the caller's reference (NULL-safe, nulls *b_p). Teardown happens at the last reference
 * (see Ownership); streams still holding work are awaited (with the configured timeout). */
void troupe_backend_close(troupe_backend_t **b_p);

/* The driver family's name: "sync", "cpu". */
const char *troupe_backend_name(const troupe_backend_t *b);

/* Number of devices (>= 0). INVALID_ARGUMENT for NULL arguments. */
TROUPE_MUST_USE troupe_status_t troupe_num_devices(troupe_backend_t *b, int *out_count);

/* Whether b's device arrays are host memory (the driver has a host_ptr entry: "sync", "cpu";
 * not "cuda"): what lending arrays to the transport (actors/lend.h, the device level of
 * transport/mpi/collective.h) needs. false for NULL. */
bool troupe_backend_host_addressable(const troupe_backend_t *b);

/* Whether b's streams run their work on threads of their own (actors/stream.h, threaded mode:
 * "cpu", "cuda"), not in the threads that schedule or complete it (inline: "sync"): what work
 * items that wait for one another across streams need (docs/parallel.md, Fused update across
 * streams). false for NULL. */
bool troupe_backend_threaded(const troupe_backend_t *b);

/* Whether the driver of backend `name` ("cpu", "sync", "cuda"; NULL: troupe_config_backend())
 * has the graph entries (devices/device.h; of the built ones, "cuda"), without opening it: a
 * routine launched again with exactly the same arguments (buffers, static-index values, merge
 * buffer) is then captured once and replayed while graphs are on (troupe_driver_graphs,
 * TROUPE_CUDA_GRAPHS; devices/device.h, troupe_driver_launch). For programs that shape their
 * routines for replay (parallel/dp.h, troupe_dp_model_t.feed_comp). false for a driver that was
 * not built (troupe_backend_open would refuse it). */
bool troupe_backend_has_graphs(const char *name);

/* Device `ordinal` (0..num_devices-1), borrowed from b. NOT_FOUND naming the ordinal. */
TROUPE_MUST_USE troupe_status_t troupe_get_device(troupe_backend_t *b, int ordinal,
                                                  troupe_device_t **out);

/* Seed `get_debug_info`: an S-expression in *out (troupe_free).
 * stream == NULL: the whole backend,
 *   (backend (name cpu) (devices ((device (ordinal 0) (id 3) (used_memory 1024)
 *     (streams (<stream> ...)) (ledger ((array (node n1_a) (pool 1) (offset 0) ...) ...))))))
 * else that stream (which must come from troupe_new_stream on b):
 *   (troupe_stream (backend cpu) (device 0) (merge_buffer (node n1_a|nil) (capacity N))
 *     (stream (name "cpu:0:1") ...)).
 * Errors: NOT_FOUND (a stream not of b), RESOURCE_EXHAUSTED, the stream's debug errors. */
TROUPE_MUST_USE troupe_status_t troupe_debug_info(troupe_backend_t *b, troupe_stream_t *stream,
                                                  char **out);

#ifdef __cplusplus
}
#endif
#endif
