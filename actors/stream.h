/* troupe — the stream actor: a FIFO executor on one device (docs/architecture.md §2, §3; seed
 * `Schedulers.Multicore`, `Backend_intf` stream/event API).
 *
 * A stream runs its schedule in order: RUN (a work item: a callback given the stream's driver
 * queue — the layers above pass routine launches and copies as work items), RECORD (an event at
 * this point), WAIT (run nothing queued after this until event E completed). A failure is
 * sticky and exact:
 *   - a work item returning non-OK fails the stream with that status and the message it left in
 *     troupe_last_error();
 *   - a WAIT whose event failed fails the stream with the event's status (message
 *     "<stream>: waited on <event>: <event's message>"); work before the WAIT ran normally;
 *   - once failed, work items behind the failure are dropped (their destructors run), every
 *     later RECORD event fails with the stream's status and message, troupe_stream_await
 *     returns it, and troupe_stream_schedule/record/wait_for refuse new work with it.
 * Destroying a stream (last release) cancels what is still queued: RECORD events fail with
 * TROUPE_CANCELLED, work destructors run, nothing hangs.
 *
 * Two execution modes, same semantics:
 *   inline   (sync backend, the deterministic reference) no thread: the work runs in the thread
 *            that schedules it; work parked behind a WAIT runs in the thread that completes the
 *            awaited event (inside troupe_event_complete), or in a later caller.
 *   threaded (cpu backend) one actor thread per stream (a CZMQ zactor), log tag
 *            "<backend>:<ordinal>:<stream_id>", which owns the driver queue: it is created,
 *            used and destroyed on that thread.
 *
 * On a driver with asynchronous queues (devices/device.h async_queues: cuda; threaded mode) a
 * work item only enqueues device work. A RECORD then records a driver event on the queue and its
 * event completes when the device gets there (actors/async_impl.h: the device's poller, or a
 * host thread syncing it), failed with the driver's error (DEVICE_ERROR naming the cudaError_t)
 * when the device work before it failed. A WAIT on an event recorded on a stream of the same
 * device is ordered on the device (cudaStreamWaitEvent) instead of parking the queue.
 * troupe_stream_await and troupe_stream_all_work cover the device's work too (a RECORD);
 * troupe_stream_is_idle and queue_length in the debug info count the host side only.
 *
 * Threading and messaging design (threaded mode). The hot path sends no ZeroMQ message and
 * allocates nothing per RUN or WAIT item (a RECORD allocates the event it returns):
 *   - schedule/record/wait_for append the item to the stream's queue, a chain of fixed blocks
 *     of preallocated slots (128 items each): producers fill the tail block under a mutex the
 *     actor does not take on its hot path, and publish the item count with a release store.
 *     The actor reads everything published since its last look as one batch, without the
 *     lock; finished blocks go back to a spare list (up to 65536 items' worth kept after a
 *     burst), so a steady stream allocates nothing. FIFO order is the queue's order.
 *   - a producer wakes the actor (one eventfd write, via its mailbox) only when the actor
 *     announced, under the mutex, that it is about to sleep. An actor that runs out of work
 *     first spins briefly (sched_yield polls, 20 µs at most) before announcing sleep, so a
 *     producer that keeps scheduling rarely pays a wake-up and a busy core is handed over.
 *   - RECORD completes its event directly (actors/event.h): a host thread in
 *     troupe_event_sync polls it briefly the same way before it sleeps on the event's
 *     condition variable, which the completing actor signals only if someone sleeps there.
 *   - a WAIT on a pending event parks the queue, not the actor: the actor subscribes its mailbox
 *     to the event and goes back to its poller (pipe + mailbox descriptor); the completion
 *     arrives as an [EV_DONE]/[EV_FAIL] message, from whatever thread completed the event.
 *     Meanwhile new work keeps accumulating and pipe requests (DEBUG, ...) are answered.
 *   - the actor's pipe carries the control plane with the message schema below; host calls use
 *     it for troupe_stream_debug_info and troupe__stream_request, and troupe_stream_release for
 *     $TERM. Requests from several host threads are serialised (troupe_actor_request).
 *   - troupe_stream_await waits on a condition variable for the pending-item count to drop to
 *     zero (the actor publishes its finished count once per batch and signals only when a
 *     thread awaits and the stream went idle).
 *
 * Pipe verb table (threaded; inline streams answer the same messages from
 * troupe__stream_request, actors/stream_impl.h, in the caller's thread). Frames: s string,
 * 8 uint64, p pointer, S status (4 bytes). Every request gets exactly one reply [id][status]..., except $TERM:
 *
 * | verb    | request frames                               | reply frames               |
 * |---------|----------------------------------------------|----------------------------|
 * | RUN     | [RUN s][id 8][fn p][arg p][dtor p]           | [id 8][status S]           |
 * | RECORD  | [RECORD s][id 8]                             | [id 8][status S][event p]  |
 * | WAIT    | [WAIT s][id 8][event p]                      | [id 8][status S]           |
 * | DEBUG   | [DEBUG s][id 8]                              | [id 8][status S][sexp s]   |
 * | EV_DONE | [EV_DONE s][id 8][event p]                   | [id 8][status S]           |
 * | EV_FAIL | [EV_FAIL s][id 8][event p][status S]         | [id 8][status S]           |
 * | $TERM   | [$TERM s] (troupe_stream_release only)       | none (zactor exit signal)  |
 * | other / wrong frame count or sizes                     | [id or 0][INVALID_ARGUMENT] |
 *
 * RUN: fn is a troupe_stream_work_fn, dtor a troupe_stream_dtor_fn or NULL; the stream owns
 * arg from then on (also on a non-OK reply). RECORD: the event frame carries a reference the
 * requester adopts (NULL when status is not OK). WAIT, EV_DONE, EV_FAIL: the event frame
 * carries a reference the stream adopts. The reply status of RUN/RECORD/WAIT is the stream's
 * failure when it already failed. EV_DONE/EV_FAIL normally come through the mailbox (no reply);
 * on the pipe they are acknowledged. A malformed message is answered INVALID_ARGUMENT and
 * logged at warn level; nothing in it is adopted.
 *
 * Thread safety: every function is thread-safe, except that a stream must not be released
 * while another thread still uses it (hold a reference). Work callbacks run one at a time per
 * stream, in FIFO order (threaded: on the actor thread; inline: in a caller's thread).
 * Ownership: refcounted (atomic); the creator (troupe_new_stream, actors/device.h, or the
 * actor layer's constructor, actors/stream_impl.h) owns one reference. Work items' `arg` is
 * owned by the stream from the schedule call on: `dtor(arg)` runs exactly once, after the item
 * ran or when it is dropped (failed stream, cancellation, refused schedule).
 */
#ifndef TROUPE_ACTORS_STREAM_H
#define TROUPE_ACTORS_STREAM_H

#include "troupe/actors/event.h"
#include "troupe/base/status.h"
#include "troupe/devices/device.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_stream troupe_stream_t;

/* A work item. `q` is the stream's driver queue (NULL for a stream without a driver). Returns
 * TROUPE_OK, or a failure status with a message recorded by troupe__error (it becomes the
 * stream's and its later events' message). Runs on the stream's executing thread; it must not
 * wait for events of its own stream. */
typedef troupe_status_t (*troupe_stream_work_fn)(void *arg, troupe_dqueue_t *q);
typedef void (*troupe_stream_dtor_fn)(void *arg);

/* Verbs (frame 0) of the stream actor's pipe. */
#define TROUPE_STREAM_VERB_RUN "RUN"
#define TROUPE_STREAM_VERB_RECORD "RECORD"
#define TROUPE_STREAM_VERB_WAIT "WAIT"
#define TROUPE_STREAM_VERB_DEBUG "DEBUG"

void troupe_stream_retain(troupe_stream_t *s);

/* Drops a reference (NULL-safe; nulls *s_p). The last one shuts the stream down: queued work is
 * cancelled (RECORD events fail with TROUPE_CANCELLED, work destructors run, a running work item
 * finishes first), the actor thread is told $TERM and waited for, the driver queue destroyed.
 * Must not be called from the stream's own work items. */
void troupe_stream_release(troupe_stream_t **s_p);
/* Same as troupe_stream_release (STYLE.md's destroy spelling). */
void troupe_stream_destroy(troupe_stream_t **s_p);

/* Appends RUN(fn, arg, dtor). `arg` is consumed (see Ownership above).
 * Returns TROUPE_OK when queued (inline: already ran, unless parked; a failure of the item
 * itself is reported later by events/await, not here); the stream's failure status with its
 * message when it had already failed; TROUPE_CANCELLED while it shuts down;
 * TROUPE_RESOURCE_EXHAUSTED; TROUPE_INVALID_ARGUMENT for NULL stream/fn. */
TROUPE_MUST_USE troupe_status_t troupe_stream_schedule(troupe_stream_t *s, troupe_stream_work_fn fn,
                                                       void *arg, troupe_stream_dtor_fn dtor);

/* Appends RECORD and returns its new event in *out (caller owns a reference): it completes when
 * everything scheduled before it on this stream completed, and fails with the stream's status
 * and message if anything before it failed. Same errors as troupe_stream_schedule (*out NULL). */
TROUPE_MUST_USE troupe_status_t troupe_stream_record(troupe_stream_t *s, troupe_event_t **out);

/* Seed `all_work`: an event for everything currently scheduled — a RECORD, except that an idle,
 * healthy stream returns an already-done event without queueing anything. */
TROUPE_MUST_USE troupe_status_t troupe_stream_all_work(troupe_stream_t *s, troupe_event_t **out);

/* Seed `will_wait_for`: appends WAIT(ev) — nothing queued after it runs before `ev` completed;
 * if `ev` fails, the stream fails (see above). `ev` is borrowed (the stream retains it). An
 * already-done event adds nothing. Waiting on an event recorded later on the same stream
 * deadlocks that stream (until its deadline-bound host waits report it).
 * Same errors as troupe_stream_schedule. */
TROUPE_MUST_USE troupe_status_t troupe_stream_wait_for(troupe_stream_t *s, troupe_event_t *ev);

/* Seed `await`: blocks the calling thread until the stream is idle (nothing queued or running)
 * or `timeout_ns` passed. Returns TROUPE_OK; the stream's failure status with its message; or
 * TROUPE_DEADLINE_EXCEEDED naming the stream (and the event it is parked on, if any). Must not
 * be called from the stream's own work items. */
TROUPE_MUST_USE troupe_status_t troupe_stream_await(troupe_stream_t *s, int64_t timeout_ns);

/* Seed `is_idle`: nothing queued, parked or running right now. Non-blocking. */
bool troupe_stream_is_idle(troupe_stream_t *s);

/* The stream's failure status (TROUPE_OK while healthy); with a non-OK status the message is
 * also put in troupe_last_error(). Non-blocking. */
troupe_status_t troupe_stream_status(troupe_stream_t *s);

/* Seed `get_debug_info`: an S-expression of the stream's state in *out (troupe_free):
 *   (stream (name "cpu:0:1") (mode threaded) (queue_length N) (parked_on "cpu:0:0#3"|nil)
 *           (failed nil | (STATUS "message")) (counters (scheduled N) (run N) (records N)
 *           (waits N) (dropped N) (cancelled N)))
 * queue_length counts items scheduled and not finished: queued, running, and a parked WAIT.
 * Threaded streams answer through their actor (DEBUG request, 5 s deadline or the configured
 * timeout if shorter). Returns TROUPE_RESOURCE_EXHAUSTED, TROUPE_DEADLINE_EXCEEDED,
 * TROUPE_TRANSPORT_ERROR. */
TROUPE_MUST_USE troupe_status_t troupe_stream_debug_info(troupe_stream_t *s, char **out);

/* Immutable properties. */
const char *troupe_stream_name(const troupe_stream_t *s); /* "<backend>:<ordinal>:<id>" */
int troupe_stream_ordinal(const troupe_stream_t *s);
int troupe_stream_id(const troupe_stream_t *s);
bool troupe_stream_is_inline(const troupe_stream_t *s);
const troupe_driver_vtable_t *troupe_stream_vtable(const troupe_stream_t *s);
troupe_driver_t *troupe_stream_driver(const troupe_stream_t *s);

#ifdef __cplusplus
}
#endif
#endif
