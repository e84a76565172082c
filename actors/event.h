/* troupe — events: completion of a point in a stream's schedule (docs/architecture.md §2, §3; seed
 * `Backend_intf` event: sync / is_done / will_wait_for / all_work).
 *
 * An event is pending, done, or failed with a status and a one-line message. It completes once:
 * the first troupe_event_complete wins, later ones are ignored and logged. Events are the only
 * synchronisation between actors, and a failed event poisons what waits on it: a stream that
 * waits on it fails the work behind its WAIT with the same status (OCANNL silently released
 * the waiters of a dead stream — gap 3.5.4 in OCANNL_NOTES.md; troupe does not).
 *
 * Who learns of a completion:
 *   - host threads block in troupe_event_sync (a brief poll, then a condition variable, with
 *     a deadline);
 *   - subscribers: each troupe_event_subscribe callback runs exactly once, in the thread that
 *     completes the event (or inside troupe_event_subscribe when the event already completed);
 *   - actors: troupe_event_subscribe_mailbox posts [EV_DONE][id][event] or
 *     [EV_FAIL][id][event][status] to an actor's mailbox (actors/actor.h). Sockets are not
 *     thread-safe and the completer may be any thread, so completions reach actors through
 *     the mutex-protected mailbox and its wake-up descriptor, never through a shared socket.
 *
 * Thread safety: every function is thread-safe; an event may be completed, synced, queried and
 * subscribed to from any threads at once. Callbacks are called with no troupe lock held.
 * Ownership: refcounted (atomic). troupe_event_new's caller owns one reference; every holder
 * releases its own with troupe_event_release. A pointer in an EV_DONE/EV_FAIL message carries
 * a reference the receiver adopts.
 */
#ifndef TROUPE_ACTORS_EVENT_H
#define TROUPE_ACTORS_EVENT_H

#include "troupe/base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_event troupe_event_t;
typedef struct troupe_mailbox troupe_mailbox_t; /* actors/actor.h */

typedef enum troupe_event_state {
    TROUPE_EVENT_PENDING = 0,
    TROUPE_EVENT_DONE = 1,
    TROUPE_EVENT_FAILED = 2,
} troupe_event_state_t;

/* Longest event name kept (bytes, without NUL); longer names are truncated. */
#define TROUPE_EVENT_NAME_MAX 63

/* Called exactly once per subscription:
 *   - on completion, with `ev` (borrowed for the call) and its final status (TROUPE_OK when
 *     done, the failure status when failed), in the completing thread, or inside
 *     troupe_event_subscribe when `ev` had already completed;
 *   - with ev == NULL and TROUPE_CANCELLED when the event's last reference is released while it
 *     is still pending (nobody can complete it any more), inside that troupe_event_release.
 * It must not block; it may call any troupe function (no event lock is held). */
typedef void (*troupe_event_callback_fn)(void *user, troupe_event_t *ev, troupe_status_t status);

/* A new pending event named `name` (copied, truncated to TROUPE_EVENT_NAME_MAX; NULL → "event").
 * Streams name theirs "<backend>:<ordinal>:<stream_id>#<n>". Returns
 * TROUPE_RESOURCE_EXHAUSTED or TROUPE_INVALID_ARGUMENT (NULL out). */
TROUPE_MUST_USE troupe_status_t troupe_event_new(const char *name, troupe_event_t **out);

/* A new event that has already completed with `status` (TROUPE_OK: done) and `message`. */
TROUPE_MUST_USE troupe_status_t troupe_event_new_completed(const char *name, troupe_status_t status,
                                                           const char *message,
                                                           troupe_event_t **out);

void troupe_event_retain(troupe_event_t *ev);

/* Drops the caller's reference; sets *ev_p to NULL; accepts NULL and *ev_p == NULL. The last
 * release of a pending event calls its subscribers with (NULL, TROUPE_CANCELLED). */
void troupe_event_release(troupe_event_t **ev_p);

/* Completes `ev`: done when status == TROUPE_OK, otherwise failed with `status` and `message`
 * (copied; NULL → the status name). Wakes every troupe_event_sync waiter, then calls the
 * subscribers in subscription order, in this thread.
 * Returns true when this call completed the event; false when it had completed already (the
 * later completion is ignored and logged at warn level) or on NULL. If the message cannot be
 * copied (out of memory) the status is kept and the message becomes the status name. */
bool troupe_event_complete(troupe_event_t *ev, troupe_status_t status, const char *message);

/* True once the event completed, done or failed (seed `is_done`). Lock-free. */
bool troupe_event_is_done(const troupe_event_t *ev);

/* PENDING, DONE or FAILED. Lock-free. */
troupe_event_state_t troupe_event_state(const troupe_event_t *ev);

/* The failure status of a failed event; TROUPE_OK for a pending or done one. */
troupe_status_t troupe_event_status(const troupe_event_t *ev);

/* A copy of the failure message of a failed event (troupe_free), or NULL when not failed or
 * out of memory. */
char *troupe_event_copy_message(const troupe_event_t *ev);

/* The event's name (immutable; valid while the caller holds a reference). */
const char *troupe_event_name(const troupe_event_t *ev);

/* Blocks the calling thread until `ev` completes or `timeout_ns` passes
 * (TROUPE_TIMEOUT_INFINITE waits forever; 0 only checks). Seed `sync`. A pending event is
 * polled for up to 20 µs first, yielding the CPU between looks (a stream about to finish a
 * short item completes it without a wake-up), then the thread sleeps on a condition variable.
 * Returns TROUPE_OK when done; the event's failure status with its message in
 * troupe_last_error() when failed; TROUPE_DEADLINE_EXCEEDED naming the event when the deadline
 * passed first; TROUPE_INVALID_ARGUMENT for NULL.
 * Do not call it from a thread that must complete `ev` (an actor thread of the stream it
 * belongs to): it would wait for itself until the deadline. */
TROUPE_MUST_USE troupe_status_t troupe_event_sync(troupe_event_t *ev, int64_t timeout_ns);

/* Subscribes `fn(user, …)`; see troupe_event_callback_fn for when it runs (possibly before this
 * returns). Returns TROUPE_RESOURCE_EXHAUSTED (fn will not be called) or
 * TROUPE_INVALID_ARGUMENT for NULL ev/fn. */
TROUPE_MUST_USE troupe_status_t troupe_event_subscribe(troupe_event_t *ev,
                                                       troupe_event_callback_fn fn, void *user);

/* Subscribes an actor: on completion posts [EV_DONE][id][ev] or [EV_FAIL][id][ev][status S] to
 * `mb` (actors/actor.h), the `ev` frame carrying a reference the receiver adopts. The
 * subscription retains `mb` until it fires. A pending event released for good posts nothing.
 * Returns TROUPE_RESOURCE_EXHAUSTED or TROUPE_INVALID_ARGUMENT. */
TROUPE_MUST_USE troupe_status_t troupe_event_subscribe_mailbox(troupe_event_t *ev,
                                                               troupe_mailbox_t *mb, uint64_t id);

/* A new event (`name`) that completes when all `count` events have completed: done when all are
 * done, otherwise failed with the status and message of the first failure observed (in
 * completion order), as soon as that failure happens. count == 0 gives a done event. If an
 * input is released for good while pending, the result fails with TROUPE_CANCELLED. The inputs
 * are borrowed (the combinator does not keep them alive). Returns TROUPE_RESOURCE_EXHAUSTED or
 * TROUPE_INVALID_ARGUMENT (NULL out, NULL events with count > 0, NULL entries). */
TROUPE_MUST_USE troupe_status_t troupe_event_all(const char *name, troupe_event_t *const *events,
                                                 size_t count, troupe_event_t **out);

/* An S-expression describing the event, e.g. `(event (name cpu:0:1#3) (state failed)
 * (status CANCELLED) (message "..."))`, in *out (troupe_free). TROUPE_RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_event_debug_info(const troupe_event_t *ev, char **out);

#ifdef __cplusplus
}
#endif
#endif
