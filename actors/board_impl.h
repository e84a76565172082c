/* troupe — the status board: what each actor of this process is doing and waiting on, published
 * cheaply by the actors themselves and read by the control plane (transport/zmq/status_impl.h)
 * to answer `troupe status` and to log the hang report (docs/architecture.md §8). Internal: not
 * installed.
 *
 * Every stream actor, the transport engine, and each host thread while it blocks in
 * troupe_stream_await or troupe_event_sync own one slot of a fixed table in the process's
 * memory. A slot holds the actor's name and kind, its state, what it waits on (an event or a
 * collective), who will complete it (a stream, "transport", "rank 1"), since when, its queue
 * length and, for the transport, the collective sequence numbers it reached. The owner writes
 * its slot at the points where it blocks and unblocks (a seqlock over relaxed/acquire-release
 * atomics: no lock, no allocation, no system call); readers copy every slot into plain records
 * (troupe__board_snapshot) and retry a slot whose writer was mid-update. Nothing is ever held
 * across a reader's use of the copy.
 *
 * The table has TROUPE__BOARD_SLOTS entries; an actor that finds it full runs without a slot
 * (its hooks do nothing; the snapshot counts the misses).
 *
 * Deadlines. Host-side waits (troupe_stream_await, troupe_event_sync) and the transport's
 * collectives share one timeout (TROUPE_TIMEOUT_S). When a peer rank stalls, a host wait would
 * otherwise expire first and blame a local stream; troupe__board_extend_deadline lets it wait
 * until the transport, which knows which rank is behind, has failed the collective with that
 * rank's name (issue 17). troupe__board_deadline_hit tells the control plane that a deadline
 * expired, so it logs the hang report once.
 *
 * Thread safety: a slot has one writer at a time (its owner: an actor thread, the engine's
 * current owner, the host thread); every function is safe against concurrent readers and
 * claims. Ownership: slots belong to the table; claim/release pair up.
 */
#ifndef TROUPE_ACTORS_BOARD_IMPL_H
#define TROUPE_ACTORS_BOARD_IMPL_H

#include "actors/event.h"
#include "base/status.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE__BOARD_SLOTS 256
#define TROUPE__BOARD_NAME_MAX 47    /* actor names, "who completes it" (bytes, no NUL) */
#define TROUPE__BOARD_WAIT_ON_MAX 63 /* event names, "allreduce #17" (bytes, no NUL) */

typedef enum troupe__board_kind {
    TROUPE__BOARD_FREE = 0,
    TROUPE__BOARD_STREAM = 1,
    TROUPE__BOARD_DEVICE = 2,
    TROUPE__BOARD_TRANSPORT = 3,
    TROUPE__BOARD_HOST = 4,
    TROUPE__BOARD_KIND_COUNT
} troupe__board_kind_t;

typedef enum troupe__board_state {
    TROUPE__BOARD_IDLE = 0,    /* not waiting (a stream may still be running its queue) */
    TROUPE__BOARD_PARKED,      /* a stream's queue waits on an event */
    TROUPE__BOARD_WAITING,     /* a host thread is blocked; a device actor polls an event */
    TROUPE__BOARD_FINGERPRINT, /* transport: a collective waits for peers' fingerprints */
    TROUPE__BOARD_DATA,        /* transport: a collective's data is moving (or stalled) */
    TROUPE__BOARD_PROBING,     /* transport: no progress; a liveness probe is out */
    TROUPE__BOARD_RUNNING,     /* readers only: a stream not waiting with work queued */
    TROUPE__BOARD_STATE_COUNT
} troupe__board_state_t;

/* "stream", "device", "transport", "host" ("?" out of range). */
const char *troupe__board_kind_name(int kind);
/* "idle", "parked", "waiting", "fingerprints", "data", "probing", "running" ("?" out of
 * range). */
const char *troupe__board_state_name(int state);

/* A copy of one slot (troupe__board_snapshot). Strings are NUL-terminated. */
typedef struct troupe__board_rec {
    int32_t kind;      /* troupe__board_kind_t */
    int32_t state;     /* troupe__board_state_t */
    int32_t wait_rank; /* the first rank it waits for, -1 none or unknown */
    int32_t reserved;
    int64_t queue;          /* items scheduled and not finished (streams), requests in flight
                               (transport); -1 unknown */
    int64_t since_ns;       /* troupe_now_ns() when the current wait began; 0 when idle */
    int64_t coll_issued;    /* transport: collectives issued by this rank (its sequence) */
    int64_t coll_done;      /* transport: the last collective completed */
    int64_t coll_active;    /* transport: the collective it works on, 0 none */
    int64_t verdict_due_ns; /* transport: when it fails that collective if nothing moves */
    char name[TROUPE__BOARD_NAME_MAX + 1];
    char wait_on[TROUPE__BOARD_WAIT_ON_MAX + 1];
    char wait_by[TROUPE__BOARD_NAME_MAX + 1];
} troupe__board_rec_t;

typedef struct troupe__board_slot troupe__board_slot_t;

/* Claims a slot for an actor of `kind` named `name` (copied, truncated). `q_in`/`q_out`, when
 * both non-NULL, are the actor's counters of items submitted and finished: readers compute the
 * queue length from them while the slot is claimed (they must stay valid until
 * troupe__board_release returns). Returns NULL when the table is full. Thread-safe. */
troupe__board_slot_t *troupe__board_claim(troupe__board_kind_t kind, const char *name,
                                          const atomic_uint_fast64_t *q_in,
                                          const atomic_uint_fast64_t *q_out);

/* Gives the slot back (NULL-safe; nulls *slot_p); waits for readers of its queue counters. */
void troupe__board_release(troupe__board_slot_t **slot_p);

/* Owner: the actor now waits on `ev` (a stream's queue parked, a device actor or host thread
 * waiting for it) — or, with
 * ev == NULL, waits on nothing. Waiting on the same event as already recorded keeps its
 * start time. Who completes it is read from the event's name ("cpu:0:1#5": stream cpu:0:1,
 * "transport:...": the transport). NULL slot: nothing. */
void troupe__board_wait_event(troupe__board_slot_t *slot, const troupe_event_t *ev);

/* Owner: the transport's state of the request it works on (state IDLE: none). `wait_on` names
 * it ("allreduce #17"), `wait_by` whom it waits for ("rank 1", "ranks 1, 3", "every rank"),
 * `since_ns` when that wait began, `verdict_due_ns` when it fails without progress. */
typedef struct troupe__board_transport {
    troupe__board_state_t state;
    const char *wait_on, *wait_by;
    int wait_rank;
    int64_t since_ns, verdict_due_ns;
    int64_t queue, coll_done, coll_active;
} troupe__board_transport_t;
void troupe__board_set_transport(troupe__board_slot_t *slot, const troupe__board_transport_t *t);

/* Owner: the queue length of an actor without counters (a device actor's events in flight). */
void troupe__board_set_queue(troupe__board_slot_t *slot, int64_t queue);

/* Any thread: the number of collectives this rank issued (transport slots; relaxed). */
void troupe__board_set_issued(troupe__board_slot_t *slot, int64_t issued);

/* The calling host thread blocks on `what` (an event name; NULL with a stream's name as `by`:
 * that stream going idle, recorded as "<stream> idle"), to be completed by `by` (NULL: derived
 * from `what` as for events) / stops blocking. The thread's
 * slot is claimed at its first wait and given back when the thread exits. */
void troupe__board_host_wait(const char *what, const char *by);
void troupe__board_host_done(void);

/* Copies every claimed slot into out[0..cap) (plain records); returns how many were copied.
 * *missed (may be NULL) gets the number of actors that found the table full since start.
 * Thread-safe; never blocks on a writer for more than a few retries (a slot still changing
 * after them is copied as its kind and name with state IDLE). */
size_t troupe__board_snapshot(troupe__board_rec_t *out, size_t cap, uint64_t *missed);

/* A host wait whose deadline passed asks this before it gives up: when the transport works on
 * a collective that waits for other ranks, or for this rank's events at its gate (state
 * waiting, with a verdict due), and will fail it (naming them) later than
 * *deadline_ns, or is about to, moves *deadline_ns to just after that point (plus a second's
 * grace) and returns true; otherwise returns false. The extensions of one wait (between
 * troupe__board_host_wait and _done, on this thread) end at most one timeout and 5 s after the
 * first. */
bool troupe__board_extend_deadline(int64_t *deadline_ns);

/* The hook the control plane registers (NULL: none) and the call that runs it: a deadline
 * expired with `status`, its message being this thread's troupe_last_error(). The hook runs in
 * the calling thread and gets a copy of the message; troupe_last_error() is kept. */
typedef void (*troupe__board_deadline_fn)(troupe_status_t status, const char *message);
void troupe__board_set_deadline_hook(troupe__board_deadline_fn fn);
void troupe__board_deadline_hit(troupe_status_t status);

#ifdef __cplusplus
}
#endif
#endif
