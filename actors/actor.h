/* troupe — the actor core: CZMQ zactor helpers, thread-safe mailboxes and the message schema
 * (docs/architecture.md §3).
 *
 * An actor is a thread with a mailbox, a private state and a loop (CZMQ's zactor template).
 * This module gives every troupe actor the same three pieces:
 *
 *   troupe_actor_t    a zactor (thread + inproc PAIR pipe) whose setup status comes back to the
 *                     creator as a troupe_status_t, whose thread carries a log tag, and whose
 *                     pipe can be used for request/reply from any host thread
 *                     (troupe_actor_request serialises the pipe's front end and matches replies
 *                     to requests by id).
 *   troupe_mailbox_t  a refcounted, mutex-protected queue of zmsg_t that *any* thread may post
 *                     to, with a wake-up file descriptor the actor polls beside its pipe
 *                     (zpoller accepts file handles). ZeroMQ sockets are not thread-safe, so
 *                     notifications that come from arbitrary threads (event completions:
 *                     EV_DONE / EV_FAIL) travel through a mailbox, not through a socket.
 *   troupe_msg_*      encode/decode of the message schema: frame 0 an upper-case verb, frame 1
 *                     a 64-bit request id, then fixed frames per verb. Replies are
 *                     [id][status]... . Frame encodings match CZMQ's zsock_send pictures
 *                     ('s' string, '8' uint64 host order, '4' uint32 host order, 'p' pointer),
 *                     so zsock_send/zsock_recv interoperate; 'S' is a troupe_status_t sent as
 *                     a '4' frame.
 *
 * Writing an actor (the CZMQ template):
 *
 *     static void s_my_actor(zsock_t *pipe, void *args)
 *     {
 *         self_t *self = ...;                      // setup
 *         troupe_actor_ready(pipe, status);        // signal 0 when ready, nonzero on failure
 *         if (status != TROUPE_OK) return;
 *         zpoller_t *poller = zpoller_new(pipe, ..., NULL);
 *         while (!terminated) {
 *             zmsg_t *msg = troupe_actor_recv(pipe);   // "$TERM" ends the loop
 *             ... reply with troupe_actor_send(pipe, &reply) ...
 *         }
 *     }
 *     troupe_actor_new("cpu:0:1", s_my_actor, args, &actor);
 *
 * Pointers to refcounted objects may travel in 'p' frames inside one process: the sender
 * retains a reference for the message, the receiver adopts it (releases it when done). Array
 * bytes never travel through frames inside one process.
 *
 * First use of this module (troupe_actor_new, troupe_mailbox_new) initialises CZMQ's zsys layer
 * with its SIGINT/SIGTERM handlers disabled (a library must not take the program's signals) and
 * its log stream on stderr unless ZSYS_LOGSTREAM says otherwise. It also registers an exit
 * handler that runs before CZMQ's: a program that ends (returns from main, calls exit) with
 * actors still running has them stopped as troupe_actor_destroy would (a stream cancels its
 * queued work), instead of CZMQ closing their sockets under them and aborting; a request to an
 * actor stopped that way returns TROUPE_CANCELLED.
 *
 * Thread safety: troupe_actor_request, troupe_actor_next_id and every mailbox function are
 * thread-safe. troupe_actor_ready/recv/send are called only by the actor's own thread on its
 * pipe. troupe_msg_* work on messages owned by the caller.
 * Ownership: troupe_actor_new's result is destroyed with troupe_actor_destroy; mailboxes are
 * refcounted (troupe_mailbox_release); zmsg_t arguments passed as zmsg_t ** are consumed and
 * nulled, on success and on failure.
 */
#ifndef TROUPE_ACTORS_ACTOR_H
#define TROUPE_ACTORS_ACTOR_H

#include "base/status.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest verb accepted in frame 0 (bytes, without the terminating NUL). */
#define TROUPE_MSG_VERB_MAX 31

/* Verbs shared by every actor. */
#define TROUPE_VERB_TERM "$TERM"      /* [$TERM] — zactor's shutdown command; no id, no reply */
#define TROUPE_VERB_EV_DONE "EV_DONE" /* [EV_DONE][id][event p] — event completed; no reply   */
#define TROUPE_VERB_EV_FAIL "EV_FAIL" /* [EV_FAIL][id][event p][status S] — event failed       */

typedef struct troupe_actor troupe_actor_t;
typedef struct troupe_mailbox troupe_mailbox_t;

/* ---- actors ------------------------------------------------------------------------------ */

/* Starts `fn` on a new thread with `args` (borrowed: it must outlive the actor) and waits until
 * it called troupe_actor_ready. `tag` (copied; NULL for none) becomes the thread's log tag
 * before `fn` runs, e.g. "cpu:0:1".
 * Returns the status the actor passed to troupe_actor_ready (with the actor thread's message in
 * troupe_last_error()), TROUPE_INTERNAL if `fn` returned without calling it,
 * TROUPE_RESOURCE_EXHAUSTED when memory or the thread cannot be had. On failure *out is NULL
 * and the thread has ended. */
TROUPE_MUST_USE troupe_status_t troupe_actor_new(const char *tag, zactor_fn *fn, void *args,
                                                 troupe_actor_t **out);

/* Sends $TERM, waits until the actor's function returned, frees the actor. Accepts NULL and
 * *actor_p == NULL; sets *actor_p to NULL. Must not be called from the actor's own thread. */
void troupe_actor_destroy(troupe_actor_t **actor_p);

/* A fresh request id for this actor (never 0; ids are unique per actor). */
uint64_t troupe_actor_next_id(troupe_actor_t *actor);

/* Sends `*req_p` (consumed) on the actor's pipe and waits up to `timeout_ns` for the reply whose
 * frame 0 equals the request's id (frame 1 when it is a valid 8-byte id, else 0). Replies to
 * earlier requests that timed out are discarded. On TROUPE_OK *reply_p is the whole reply
 * ([id][status]...), owned by the caller (zmsg_destroy). Thread-safe: concurrent requests are
 * serialised on the pipe.
 * Returns TROUPE_DEADLINE_EXCEEDED when no reply came in time, TROUPE_TRANSPORT_ERROR when the
 * pipe fails (zmq error named), TROUPE_INVALID_ARGUMENT for NULL arguments or an empty message,
 * TROUPE_CANCELLED when the actor was stopped at process exit. */
TROUPE_MUST_USE troupe_status_t troupe_actor_request(troupe_actor_t *actor, zmsg_t **req_p,
                                                     int64_t timeout_ns, zmsg_t **reply_p);

/* Actor thread only: reports setup success (TROUPE_OK → zsock_signal(pipe, 0)) or failure
 * (nonzero signal; troupe_last_error() of this thread becomes the creator's message). Call it
 * exactly once, before the loop; after a failure the actor function returns. */
void troupe_actor_ready(zsock_t *pipe, troupe_status_t status);

/* Actor thread only: receives the next message from the pipe (blocking; NULL when interrupted
 * or the context ends) / sends a message on the pipe (consumed; returns
 * TROUPE_TRANSPORT_ERROR if it cannot be sent). These two also tell ThreadSanitizer that what
 * the host wrote before its request happens before the actor reads it, and vice versa —
 * libzmq's lock-free pipes are invisible to it. */
zmsg_t *troupe_actor_recv(zsock_t *pipe);
TROUPE_MUST_USE troupe_status_t troupe_actor_send(zsock_t *pipe, zmsg_t **msg_p);

/* Actor thread only: replies [id][status] on the pipe. */
void troupe_actor_reply_status(zsock_t *pipe, uint64_t id, troupe_status_t status);

/* ---- mailboxes --------------------------------------------------------------------------- */

/* A new, open mailbox (refcount 1). Returns TROUPE_RESOURCE_EXHAUSTED or TROUPE_TRANSPORT_ERROR
 * (the OS could not create the wake-up descriptor; errno named). */
TROUPE_MUST_USE troupe_status_t troupe_mailbox_new(troupe_mailbox_t **out);
void troupe_mailbox_retain(troupe_mailbox_t *mb);
/* Drops a reference; the last one destroys the queued messages unread and closes the
 * descriptor. An owner whose messages carry references (EV_DONE/EV_FAIL) closes the mailbox and
 * takes what is left before its last release. Accepts NULL and *mb_p == NULL; sets *mb_p to
 * NULL. */
void troupe_mailbox_release(troupe_mailbox_t **mb_p);

/* Appends `*msg_p` (consumed, also on failure) and wakes the owner. Any thread.
 * Returns TROUPE_UNAVAILABLE when the mailbox was closed, TROUPE_INVALID_ARGUMENT for NULL.
 * On failure the message is destroyed unread, so a sender that put retained pointers in it
 * releases those references itself. */
TROUPE_MUST_USE troupe_status_t troupe_mailbox_post(troupe_mailbox_t *mb, zmsg_t **msg_p);

/* Wakes the owner without a message (used by fast paths that queue work elsewhere). */
void troupe_mailbox_wake(troupe_mailbox_t *mb);

/* Owner only: the handle to give zpoller_new/zpoller_add (a pointer to the descriptor; stays
 * valid for the mailbox's lifetime). */
void *troupe_mailbox_poll_handle(troupe_mailbox_t *mb);

/* Owner only: resets the wake-up descriptor. Call it when the poller returned the mailbox
 * handle, before taking messages, so no wake-up is lost. */
void troupe_mailbox_clear(troupe_mailbox_t *mb);

/* Owner only: the oldest message (caller owns it), or NULL when empty. Never blocks. */
zmsg_t *troupe_mailbox_take(troupe_mailbox_t *mb);

/* Closes the mailbox: later posts fail with TROUPE_UNAVAILABLE; queued messages are returned
 * by troupe_mailbox_take until it is empty. Idempotent. */
void troupe_mailbox_close(troupe_mailbox_t *mb);

/* ---- message schema ---------------------------------------------------------------------- */

/* Builds a message from a picture, one frame per letter:
 *   's' const char *       string frame (no NUL); NULL sends an empty frame
 *   '8' uint64_t           8 bytes, host order
 *   '4' uint32_t           4 bytes, host order
 *   'S' troupe_status_t    4 bytes, host order
 *   'p' const void *       a pointer, sizeof(void *) bytes
 * e.g. troupe_msg_build(&m, "s8p", "WAIT", id, (void *)ev).
 * Returns TROUPE_RESOURCE_EXHAUSTED, or TROUPE_INVALID_ARGUMENT for an unknown letter
 * (*out is NULL on failure). */
TROUPE_MUST_USE troupe_status_t troupe_msg_build(zmsg_t **out, const char *picture, ...);

/* Appends frames to an existing message with the same picture letters. */
TROUPE_MUST_USE troupe_status_t troupe_msg_append(zmsg_t *msg, const char *picture, ...);

/* Strict decode: the message must have exactly strlen(picture) frames and each frame the size
 * its letter demands (as troupe_msg_build, 'S' must name a known status). Outputs may be NULL
 * to skip a frame:
 *   's' char **            a NUL-terminated copy (troupe_free) — only allocated on success
 *   '8' uint64_t *, '4' uint32_t *, 'S' troupe_status_t *, 'p' void **
 * The message is not modified. Returns TROUPE_INVALID_ARGUMENT naming the first bad frame
 * (frame count, size) — never asserts — or TROUPE_RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_msg_decode(zmsg_t *msg, const char *picture, ...);

/* Reads the head of a request: frame 0 into `verb` (cap bytes incl. NUL; at most
 * TROUPE_MSG_VERB_MAX) and frame 1 as the id. *id is 0 when frame 1 is missing or not 8 bytes,
 * so the caller can still answer. Returns TROUPE_INVALID_ARGUMENT (message names the problem)
 * when the verb is empty/too long or the id is bad; `verb` is "" when frame 0 is unusable. */
TROUPE_MUST_USE troupe_status_t troupe_msg_head(zmsg_t *msg, char *verb, size_t cap, uint64_t *id);

#ifdef __cplusplus
}
#endif
#endif
