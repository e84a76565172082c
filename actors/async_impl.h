/* troupe — streams on drivers whose queues complete work after the call (devices/device.h
 * `async_queues`: the cuda driver), and the device actor's event poller (docs/architecture.md
 * §3). Internal: not installed; actors/stream.c calls it.
 *
 * A RECORD on such a stream records a driver event on the stream's queue and attaches it to the
 * RECORD's troupe event (troupe__async_record); the troupe event completes when the driver
 * event does:
 *   - each device of an opened driver has a poller actor ("<driver>:<ordinal>:poller", started
 *     on first use) to which every such event is handed; it polls them with event_query
 *     (polling, not host callbacks: docs/architecture.md §3) and completes each troupe event:
 *     done, or failed with the driver's status and message (DEVICE_ERROR naming the
 *     cudaError_t). Between rounds it yields the CPU, then sleeps S_POLL_SLEEP_NS once the
 *     events stayed pending for a while;
 *   - a host thread that syncs such an event polls it itself first, for up to S_HOST_POLL_NS
 *     (the event's progress hook, actors/event_impl.h), so a short round trip has no hand-off;
 *     a stream that parks on one does the same before parking.
 * Whoever sees the driver event finish first completes the troupe event (exactly once).
 * A WAIT on an event whose driver event was recorded on the same driver and device becomes
 * event_wait on the waiting queue (troupe__async_wait): ordered on the device, no host round
 * trip (cudaStreamWaitEvent). Any other WAIT (a host event, another device, the transport, an
 * event not recorded yet) parks the queue as on the CPU.
 *
 * Thread safety: every function is thread-safe; troupe__async_record and troupe__async_wait are
 * called by the stream's executor with its queue. Ownership: the attachment (driver event) is
 * freed with its troupe event; a poller holds a reference to each event it watches.
 */
#ifndef TROUPE_ACTORS_ASYNC_IMPL_H
#define TROUPE_ACTORS_ASYNC_IMPL_H

#include "actors/event.h"
#include "devices/device.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Makes `ev` (a RECORD's event, before it is shared) one that a host sync polls itself. */
void troupe__async_prepare(troupe_event_t *ev);

/* Records a driver event on queue q (device `ordinal` of drv), attaches it to `ev` and hands
 * `ev` to the device's poller. Returns the driver's status (ev untouched: the caller fails it),
 * TROUPE_RESOURCE_EXHAUSTED, or the poller's start failure (TROUPE_TRANSPORT_ERROR). */
TROUPE_MUST_USE troupe_status_t troupe__async_record(troupe_driver_t *drv, troupe_dqueue_t *q,
                                                     int ordinal, troupe_event_t *ev);

/* When `ev` carries a driver event of drv's device `ordinal`, orders queue q after it on the
 * device and returns true; false when it does not (or event_wait failed): park as usual. */
bool troupe__async_wait(troupe_driver_t *drv, troupe_dqueue_t *q, int ordinal,
                        troupe_event_t *ev);

/* Stops drv's pollers before the driver closes: events still pending are queried once more
 * and completed, or failed with TROUPE_CANCELLED. */
void troupe__async_driver_closing(troupe_driver_t *drv);

#ifdef __cplusplus
}
#endif
#endif
