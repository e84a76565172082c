/* troupe — lending arrays to external agents, and remote contexts (docs/architecture.md §5, §8): how the
 * transport (transport/mpi) reads and writes device arrays on a stream's schedule, and how a
 * device_to_device reaches another rank.
 *
 * A lend is a work item of a context's stream: when it reaches the head of the stream, the
 * stream hands the host-visible addresses of the lent arrays to the agent, which completes an
 * event when it is done with them. The ledger rules (docs/architecture.md §4) treat a lend as a write of
 * every lent array.
 *
 * Thread safety: thread-safe. Ownership: as documented per call.
 */
#ifndef TROUPE_ACTORS_LEND_H
#define TROUPE_ACTORS_LEND_H

#include "troupe/actors/context.h"
#include "troupe/actors/event.h"
#include "troupe/base/status.h"
#include "troupe/ir/tnode.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called on the stream's executing thread when a lend reaches the head of the stream: ptrs[i]
 * is the host-visible address of lent array i and bytes[i] its size (the vectors are valid
 * only during the call, the arrays until `done` completes). Return OK after handing the arrays
 * to the agent, which then completes `done` exactly once; a non-OK return (message through
 * troupe__error) fails the stream, and the lend completes `done` itself with that status. */
typedef troupe_status_t (*troupe_lend_fn)(void *user, void *const *ptrs, const int64_t *bytes,
                                          size_t n);
typedef void (*troupe_lend_dtor_fn)(void *user);

/* Lends ctx's arrays of tns[0..n) to an external agent (the MPI transport actor) for reading
 * and writing. On ctx's stream, after the waits a write needs under the ledger rules (other
 * streams' pending reads and writes of the arrays), `start(user, ptrs, bytes, n)` runs; the
 * stream then waits for `done` (borrowed; the lend retains it) before anything scheduled after
 * the lend; the arrays count as written by ctx's stream with an event completing after `done`,
 * returned in *out_ev (may be NULL). If the stream fails or shuts down before `start` runs,
 * `done` is completed with the stream's status (CANCELLED at shutdown) so no agent waits for
 * it; a failed `done` fails the stream with its status and message. `dtor(user)` (may be
 * NULL) runs exactly once, after start ran or when the item is dropped.
 * Needs a driver with host-addressable memory (sync, cpu).
 * Errors: INVALID_ARGUMENT (NULL, n == 0, a remote ctx), NOT_FOUND (a node not in ctx, named),
 * UNIMPLEMENTED (driver without host_ptr, named), the stream's failure, RESOURCE_EXHAUSTED.
 * On an error return dtor(user) has run and `done` is untouched, except when the stream
 * refused the work item because it failed or shut down concurrently: then `done` was completed
 * with the stream's status. */
TROUPE_MUST_USE troupe_status_t troupe_lend_arrays(troupe_context_t *ctx, size_t n,
                                                   troupe_tnode_t *const *tns, troupe_lend_fn start,
                                                   void *user, troupe_lend_dtor_fn dtor,
                                                   troupe_event_t *done, troupe_event_t **out_ev);

/* Same as troupe_lend_arrays, except that ctx's stream does not wait for `done`: it goes on
 * with the work scheduled after the lend while the agent holds the arrays (so an allreduce of
 * one gradient overlaps the local merging of the next). The arrays count as written with `done`
 * itself as the write event, so other streams' reads and writes of them wait for the agent;
 * ctx's own stream does not (its FIFO order is no guard here): the caller must make it wait,
 * troupe_will_wait_for(ctx, done), before any later work of that stream reads or writes the
 * arrays. A failed `done` fails the stream at that wait. Errors: as troupe_lend_arrays. */
TROUPE_MUST_USE troupe_status_t troupe_lend_arrays_deferred(troupe_context_t *ctx, size_t n,
                                                            troupe_tnode_t *const *tns,
                                                            troupe_lend_fn start, void *user,
                                                            troupe_lend_dtor_fn dtor,
                                                            troupe_event_t *done);

/* The transport that moves bytes for device_to_device between processes (docs/architecture.md §5, §8),
 * registered by transport/mpi in troupe_cluster_init. `move` runs on the local stream's
 * thread: send (is_send) the `bytes` at `ptr` to `peer_rank`, or receive them into `ptr` from
 * it; `tn` (borrowed for the call) names and fingerprints the node: both sides must move the
 * same node id, dims and precision, else both fail naming the difference. The transport
 * adopts the reference to `done`, completes it exactly once, and does not touch `ptr` after.
 * Returns OK once accepted (on a non-OK return the caller still owns `done`). */
typedef struct troupe_remote_transport {
    troupe_status_t (*move)(void *user, bool is_send, int peer_rank, troupe_tnode_t *tn, void *ptr,
                            int64_t bytes, troupe_event_t *done);
    void *user;
    int rank; /* this process's rank */
    int size; /* number of ranks */
} troupe_remote_transport_t;

/* Registers (*t copied) or, with NULL, unregisters the remote transport. Thread-safe. Moves
 * scheduled after unregistering fail with FAILED_PRECONDITION. */
void troupe_set_remote_transport(const troupe_remote_transport_t *t);

/* A context standing for rank `rank`'s side of a device_to_device: as src_ctx the call
 * receives from that rank into the local dst_ctx; as dst_ctx it sends the local src_ctx's
 * array to that rank. It holds no arrays and no stream; only troupe_device_to_device,
 * troupe_context_is_remote, troupe_context_remote_rank and retain/release accept it. The
 * transfer is scheduled on the local context's stream (ledger rules as for a local copy: a
 * send reads the array, a receive writes it or the merge buffer, grown as for COPY); the
 * other rank makes the matching call with the same node and NO or COPY (the use only matters
 * on the receiving side). STREAMING has no remote form (FAILED_PRECONDITION). A receive's
 * *out_ctx is a child of the local dst_ctx (tagged with n for COPY); a send's is NULL. A
 * remote context needs a driver with host-addressable memory (UNIMPLEMENTED otherwise).
 * Caller owns *out.
 * Errors: FAILED_PRECONDITION (no remote transport registered: call troupe_cluster_init),
 * INVALID_ARGUMENT (rank outside 0..size-1, or this process's own rank), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_context_new_remote(int rank, troupe_context_t **out);
bool troupe_context_is_remote(const troupe_context_t *ctx);
int troupe_context_remote_rank(const troupe_context_t *ctx); /* -1 for a local context */

#ifdef __cplusplus
}
#endif
#endif
