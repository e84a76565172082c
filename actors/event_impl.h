/* troupe — the internal side of events: producers' progress hooks and quiet state queries
 * (see event.h for events). Internal: not installed; transport/mpi sets the hooks.
 *
 * Thread safety: as event.h. Ownership: as event.h (nothing here takes or gives references).
 */
#ifndef TROUPE_ACTORS_EVENT_IMPL_H
#define TROUPE_ACTORS_EVENT_IMPL_H

#include "actors/event.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A producer's progress hook, internal to troupe (transport/mpi sets it on the events of its
 * lazily started collectives: host-level ones, and device-level ones with TROUPE_COLL_LAZY).
 * It is called with
 *   - deadline_ns == TROUPE__EVENT_KICK, once, when the event is first consumed otherwise:
 *     its state queried (troupe_event_state, _is_done, _status) or a subscriber added (which
 *     stream waits and troupe_event_all do): the producer must start the work;
 *   - the absolute CLOCK_MONOTONIC deadline in ns (TROUPE_TIMEOUT_INFINITE for none) by
 *     troupe_event_sync before it blocks, or by troupe__event_drive (a stream before it parks
 *     on a WAIT): the producer may drive the work that completes `ev`
 *     on the calling thread, returning when `ev` completed, the deadline passed, or it cannot
 *     help (it then starts the work elsewhere, and troupe_event_sync blocks as usual). This
 *     saves the two thread wake-ups of a hand-off to an idle producer.
 * Never called with the event's lock held. Set it before `ev` is shared with another thread. */
#define TROUPE__EVENT_KICK INT64_MIN
typedef void (*troupe__event_progress_fn)(troupe_event_t *ev, int64_t deadline_ns);
void troupe__event_set_progress(troupe_event_t *ev, troupe__event_progress_fn fn);

/* An attachment: what the event's producer keeps with it (actors/async.c: the device event a
 * stream of an asynchronous driver recorded for it), freed by `free_fn` when the event's last
 * reference goes. Attached once, by one thread (the producer), before or after the event is
 * shared: troupe__event_attach returns false when one is already there (nothing is taken).
 * troupe__event_attachment returns it, or NULL before it is attached. */
bool troupe__event_attach(troupe_event_t *ev, void *att, void (*free_fn)(void *));
void *troupe__event_attachment(const troupe_event_t *ev);

/* troupe_event_state without kicking the progress hook: for bookkeeping that prunes finished
 * events (the coherence ledger), which must not start lazy work. */
troupe_event_state_t troupe__event_state_quiet(const troupe_event_t *ev);

/* When `ev` completed, on troupe_now_ns()'s clock (base/clock.h): stamped by the completing
 * thread before it wakes waiters or calls subscribers. 0 while pending (or NULL). A subscriber
 * that times work reads this rather than the clock: it may run much later than the completion
 * (inside troupe_event_subscribe when the event was done already, or on a descheduled thread). */
int64_t troupe__event_completed_ns(const troupe_event_t *ev);

/* True once `ev` was consumed in a way that kicks its progress hook (see above): a producer
 * that submits lazy work after that must start it at once. */
bool troupe__event_was_kicked(const troupe_event_t *ev);

/* Lets the calling thread drive `ev`'s producer (its progress hook, with the deadline
 * `timeout_ns` from now) before it waits for `ev` some other way; a no-op for an event without
 * a hook or not pending. troupe_event_sync does this; a stream does it before it parks on a
 * WAIT. Returns when the hook returns (ev may still be pending). */
void troupe__event_drive(troupe_event_t *ev, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif
#endif
