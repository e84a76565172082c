/* troupe — the stream actor's constructor (see stream.h for streams). Internal: not
 * installed. Programs make streams with troupe_new_stream (actors/backend.h), which registers
 * them with their device; this constructor makes a bare stream actor on any driver queue (the
 * runtime, tests, the dispatch benchmark), and the raw request of the pipe verb table (its
 * messages are CZMQ zmsg_t, which the installed headers do not expose).
 *
 * Thread safety: thread-safe. Ownership: the caller owns one reference (troupe_stream_release).
 */
#ifndef TROUPE_ACTORS_STREAM_IMPL_H
#define TROUPE_ACTORS_STREAM_IMPL_H

#include "actors/actor.h"
#include "actors/stream.h"
#include "devices/device.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A new stream `stream_id` on device `ordinal` of driver `drv` (vtable `vt`), named
 * "<vt->name>:<ordinal>:<stream_id>" ("host:…" when vt is NULL). When vt has queue_create, a
 * driver queue is created for the stream (threaded: on its actor thread) and destroyed with it;
 * vt == NULL gives a host-only stream whose work gets q == NULL (tests, host tasks).
 * inline_mode: true runs work in the calling threads (sync backend), false starts an actor
 * thread (cpu backend).
 * Returns TROUPE_INVALID_ARGUMENT (NULL out, vt without drv, negative ordinal/id), the driver's
 * queue_create status, TROUPE_RESOURCE_EXHAUSTED, TROUPE_TRANSPORT_ERROR (ZeroMQ). */
TROUPE_MUST_USE troupe_status_t troupe__stream_actor_new(const troupe_driver_vtable_t *vt,
                                                         troupe_driver_t *drv, int ordinal,
                                                         int stream_id, bool inline_mode,
                                                         troupe_stream_t **out);

/* Sends one raw request of the verb table to the stream and returns its reply in *reply_p
 * (caller owns it; zmsg_destroy). `*req_p` is consumed. Threaded: through the actor's pipe
 * with a deadline; inline: answered in this thread. $TERM is refused (INVALID_ARGUMENT: use
 * troupe_stream_release). Returns the transport status (DEADLINE_EXCEEDED, TRANSPORT_ERROR,
 * INVALID_ARGUMENT for NULL); the request's own outcome is in the reply. Not from the stream's
 * own work items (a threaded actor cannot answer while it runs one: DEADLINE_EXCEEDED). A RECORD
 * reply that arrives after its request timed out is discarded, leaking its event reference. */
TROUPE_MUST_USE troupe_status_t troupe__stream_request(troupe_stream_t *s, zmsg_t **req_p,
                                                       int64_t timeout_ns, zmsg_t **reply_p);

/* A fresh request id for troupe__stream_request (never 0). */
uint64_t troupe__stream_next_request_id(troupe_stream_t *s);

#ifdef __cplusplus
}
#endif
#endif
