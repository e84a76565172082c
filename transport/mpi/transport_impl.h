/* troupe — private declarations shared by transport/mpi's files (not installed).
 *
 * The files: collective.c (argument checks, requests built at call time, the single-rank
 * path, the device level through lends), cluster.c (MPI's life, the cross-rank
 * device_to_device), engine.c (the transport engine: the one thread of control that calls
 * MPI; its concerns in engine_coll.c, engine_p2p.c, engine_probe.c and apply.c), fingerprint.c
 * (what ranks exchange before data moves), bucket.c (the fusion-bucket planner), ring.c
 * (troupe's ring allreduce), shm_allreduce.c (the intra-node shared-memory allreduce), reduce.c
 * (the element-wise reductions). engine_impl.h holds what the engine's
 * files share in MPI builds, bucket_impl.h the planner's types.
 *
 * A request (troupe__req_t) is one collective or one point-to-point move, built by the caller
 * (collective.c, cluster.c's remote `move`), then handed to the engine with
 * troupe__engine_submit, which assigns its sequence number and owns it from then on: the
 * engine completes its event exactly once and frees it. Fingerprints (fingerprint.c) are the
 * wire form of what a request moves; they are pure data and need no MPI.
 *
 * Thread safety: troupe__engine_submit, troupe__cluster_fail and the cluster getters are
 * thread-safe; a request is touched by one thread at a time (its builder, then the engine's
 * owner). Ownership: see each function.
 */
#ifndef TROUPE_TRANSPORT_MPI_TRANSPORT_IMPL_H
#define TROUPE_TRANSPORT_MPI_TRANSPORT_IMPL_H

#include "actors/event_impl.h"
#include "base/shared_memory_impl.h"
#include "base/status.h"
#include "transport/mpi/collective.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- requests ---------------------------------------------------------------------------- */

typedef enum troupe__req_kind {
    TROUPE__REQ_ALLREDUCE = 1,
    TROUPE__REQ_BROADCAST = 2,
    TROUPE__REQ_SEND = 3, /* point-to-point: this rank's bytes to `peer` */
    TROUPE__REQ_RECV = 4, /* point-to-point: `peer`'s bytes into this rank's buffer */
} troupe__req_kind_t;

/* "allreduce", "broadcast", "send", "recv". */
const char *troupe__req_kind_name(int kind);

/* Longest tensor name carried in a fingerprint (bytes, without NUL); longer ones are cut. */
#define TROUPE__FP_NAME_MAX 39

/* One tensor as it travels in a fingerprint. All integers are int64 so the layout has no
 * padding; ranks of one job run the same binary on the same architecture (byte order). */
typedef struct troupe__fp_tensor {
    int64_t node_id; /* 0: not checked */
    int64_t prec;    /* troupe_prec_t */
    int64_t ndims;   /* 0: dims not checked */
    int64_t dims[TROUPE_MAX_DIMS];
    int64_t count; /* elements */
    char name[TROUPE__FP_NAME_MAX + 1];
} troupe__fp_tensor_t;

/* Fingerprint header; `n` tensors follow on the wire. */
typedef struct troupe__fp_header {
    int64_t magic; /* TROUPE__FP_MAGIC */
    int64_t seq;
    int64_t kind;   /* troupe__req_kind_t */
    int64_t op;     /* troupe_reduce_op_t for allreduce, else 0 */
    int64_t root;   /* broadcast root, else 0 */
    int64_t fusion; /* collectives: the bucket size their plan uses (TROUPE_FUSION_BYTES) */
    int64_t bf16;   /* allreduce: 1 when single tensors travel as bfloat16 (TROUPE_COLL_BF16) */
    int64_t apply;  /* allreduce: the fused update's id (troupe_coll_apply_t.id), 0: none */
    int64_t n_side; /* allreduce: its side arrays per tensor, 0: none */
    int64_t n_private; /* allreduce: how many of them are private (troupe_coll_apply_t) */
    int64_t private_node; /* ...and the node id of tensor 0's first private side array */
    int64_t unshard;   /* allreduce: 1 for a TROUPE_COLL_UNSHARD gather */
    int64_t n;
} troupe__fp_header_t;

#define TROUPE__FP_MAGIC INT64_C(0x74727570666e6770) /* "trupfngp" */

/* The events a host-level request waits for before the engine starts it
 * (troupe_allreduce_args_t.after): refcounted by the request and by each subscription, since
 * a failed request can be freed before the events complete. */
typedef struct troupe__gate troupe__gate_t;
/* One event of a gate: its subscription's user pointer. */
typedef struct troupe__gate_item {
    troupe__gate_t *gate;
    atomic_bool done; /* its callback ran */
    char name[48];    /* the event's name (truncated), for the deadline's message */
} troupe__gate_item_t;
struct troupe__gate {
    atomic_int refs;           /* the request's, plus one per subscription not yet called */
    atomic_size_t left;        /* events not completed yet (+1 while subscribing) */
    atomic_int status;         /* the first failure among them (troupe_status_t), else OK */
    char message[256];         /* its message, written by the callback that set status */
    size_t n;                  /* events */
    troupe__gate_item_t item[]; /* n */
};

/* A gate over after[0..n) (each subscribed; the request's reference in *out). The engine is
 * woken (troupe__engine_wake) when the last one completes. NULL-safe for n == 0 (*out NULL).
 * Errors: RESOURCE_EXHAUSTED, the subscriptions'. */
TROUPE_MUST_USE troupe_status_t troupe__gate_new(troupe_event_t *const *after, size_t n,
                                                 troupe__gate_t **out);
/* True while some event of g has not completed (false for NULL). */
bool troupe__gate_closed(troupe__gate_t *g);
/* Writes the names of g's events that have not completed into buf ("'a', 'b' (2 of 3)"),
 * truncated to cap bytes. */
void troupe__gate_describe(troupe__gate_t *g, char *buf, size_t cap);
/* Drops a reference; NULL-safe; nulls *g_p. */
void troupe__gate_release(troupe__gate_t **g_p);

typedef struct troupe__req troupe__req_t;
struct troupe__req {
    troupe__req_t *next; /* engine queue link */
    troupe__req_kind_t kind;
    troupe_reduce_op_t op; /* allreduce */
    int root;              /* broadcast */
    int peer;              /* send/recv */
    int64_t fusion_bytes;  /* collectives: TROUPE_FUSION_BYTES when issued (the plan's, and
                              fingerprinted: ranks must plan the same buckets) */
    bool bf16_wire;        /* allreduce: single tensors travel as bfloat16 (TROUPE_COLL_BF16) */
    uint64_t seq;          /* set by troupe__engine_submit */
    size_t n;
    troupe_coll_tensor_t *tensors; /* n entries; `name` points into fp[i].name */
    troupe__fp_tensor_t *fp;       /* n entries */
    int64_t bytes;                 /* sum of the tensors' sizes */
    troupe_event_t *ev;            /* the request's reference; completed exactly once */
    bool lazy; /* host-level: submitting does not wake the engine thread; the event's first
                  consumer does (troupe__engine_progress), or the engine's next work */
    troupe__gate_t *gate; /* host level: events to wait for before reading the tensors (the
                             engine leaves the request unstarted while closed); NULL: none */
    int64_t submitted_ns;
    const char *phase;  /* the issuing thread's step phase (base/trace.h), a literal, or NULL */
    void *engine_state; /* the engine's per-request state (troupe__rs_t, engine_impl.h) */
    /* allreduce: the update fused into it (troupe_allreduce_args_t.apply), else apply_fn NULL:
     * apply_arg is the request's copy, side[s * n + i] side array s of tensor i (set with the
     * tensors' data when the arrays are lent) */
    troupe_coll_apply_fn apply_fn;
    void *apply_arg;
    uint64_t apply_id;
    size_t n_side;
    size_t n_private; /* the last n_private side arrays are private (sharded through shm) */
    bool unshard;     /* TROUPE_COLL_UNSHARD: gather the private side arrays, nothing else */
    int64_t private_node; /* n_private > 0: the node id of tensor 0's first private side array
                             (-1 with sharded state) */
    void **side;          /* private entries NULL with sharded state */
    /* sharded state (troupe_coll_apply_t shard): shard[k] holds elements [shard_lo, shard_hi)
     * of private side array k over the tensors end to end; nshard = n_private, else 0 */
    size_t nshard;
    float *shard[TROUPE_COLL_APPLY_MAX_SIDE];
    int64_t shard_lo, shard_hi;
};

/* Runs r's fused update locally on every element of its tensors (the tensors hold the sums):
 * the MPI paths' and a single rank's delivery of it (collective.h, troupe_coll_apply_t). With
 * sharded state only on this rank's shard [shard_lo, shard_hi). */
void troupe__req_apply_all(const troupe__req_t *r);

/* A request of `kind` with room for n tensors (zeroed), no event yet. NULL when out of memory
 * (message recorded). */
troupe__req_t *troupe__req_new(troupe__req_kind_t kind, size_t n);

/* Sets tensor i from `t` (name copied, truncated). */
void troupe__req_set_tensor(troupe__req_t *r, size_t i, const troupe_coll_tensor_t *t);

/* Frees the request and releases its event reference (without completing it). NULL-safe. */
void troupe__req_free(troupe__req_t **r_p);

/* Completes r's event with `status`/`message` (OK: done), counts it in the stats, frees r. */
void troupe__req_finish(troupe__req_t **r_p, troupe_status_t status, const char *message);

/* ---- reductions (reduce.c) ---------------------------------------------------------------- */

/* Element types the transport reduces itself (ring buckets). */
typedef enum troupe__red_type {
    TROUPE__RED_NONE = 0,
    TROUPE__RED_F32,
    TROUPE__RED_F64,
    TROUPE__RED_I32,
    TROUPE__RED_I64,
    TROUPE__RED_U32,
    TROUPE__RED_U64,
    TROUPE__RED_BF16, /* bfloat16 bits: added in single, rounded to nearest even */
} troupe__red_type_t;

/* dst[i] = dst[i] op src[i] for i < n (mean: sum; max/min as MPI_MAX/MPI_MIN). dst and src must
 * not overlap. TROUPE__RED_NONE does nothing. */
void troupe__reduce_into(troupe__red_type_t type, troupe_reduce_op_t op, void *restrict dst,
                         const void *restrict src, int64_t n);

/* a[i] = b[i] = a[i] op b[i] for i < n (two ranks' copies in one pass; mean: the sum), the
 * same bits as troupe__reduce_into(a, b) then a copy into b. a and b must not overlap.
 * TROUPE__RED_BF16 and TROUPE__RED_NONE do nothing. */
void troupe__reduce_pair(troupe__red_type_t type, troupe_reduce_op_t op, void *restrict a,
                         void *restrict b, int64_t n);

/* x[i] /= divisor for i < n (mean: single through double, rounded once; integers truncate
 * toward zero). TROUPE__RED_NONE and TROUPE__RED_BF16 do nothing. */
void troupe__divide_by(troupe__red_type_t type, void *x, int64_t n, int64_t divisor);

/* single -> bfloat16 (nearest even; NaN stays NaN), bit for bit as ir/prec's
 * troupe_single_to_bfloat16, for n values. */
void troupe__bf16_pack(uint16_t *restrict dst, const float *restrict src, int64_t n);

/* bfloat16 -> single for n values, divided by `divisor` (1: none) in single. */
void troupe__bf16_unpack(float *restrict dst, const uint16_t *restrict src, int64_t n, int divisor);

/* ---- fingerprints (fingerprint.c) -------------------------------------------------------- */

/* Bytes of r's fingerprint on the wire. */
size_t troupe__fp_size(size_t n);

/* Writes r's fingerprint (troupe__fp_size(r->n) bytes) into buf. */
void troupe__fp_encode(const troupe__req_t *r, void *buf);

/* The short form ranks exchange first: when every rank's digest equals, the fingerprints agree
 * and the full ones need not travel; otherwise the full fingerprints are exchanged and compared
 * field by field (troupe__fp_compare, which alone decides). `hash` covers what
 * troupe__fp_compare compares (for point-to-point moves: not kind, op, root or seq). */
typedef struct troupe__fp_digest {
    int64_t magic; /* TROUPE__FP_MAGIC */
    int64_t seq;
    int64_t kind;
    int64_t n;
    uint64_t hash;
    int64_t flat;          /* not compared: 1 when the sender's tensors form one span
                              (troupe__bucket_flat) */
    troupe__shm_ref_t shm; /* not compared: that span in shareable memory (id 0: it is not) */
    /* not compared: with a fused update and a flat span, side array s's span in shareable
     * memory, laid out as the tensors' span (id 0: it is not, or no such side) */
    troupe__shm_ref_t side_shm[TROUPE_COLL_APPLY_MAX_SIDE];
} troupe__fp_digest_t;

void troupe__fp_digest(const troupe__req_t *r, troupe__fp_digest_t *out);

/* True when two digests tell the same request (magic, n and hash equal). */
bool troupe__fp_digest_equal(const troupe__fp_digest_t *a, const troupe__fp_digest_t *b);

/* Checks a received fingerprint's framing: INVALID_ARGUMENT (bad size or magic) naming `rank`. */
TROUPE_MUST_USE troupe_status_t troupe__fp_check_frame(const void *buf, size_t size, int rank);

/* Compares the fingerprints `a` (of rank ra) and `b` (of rank rb) of request `what` (e.g.
 * "allreduce #3", "send #2 to rank 1"). Returns OK when they agree; otherwise
 * FAILED_PRECONDITION with the message "<what>: fingerprint mismatch: <field> <va> on rank ra
 * but <vb> on rank rb", naming the tensor (index, node id, name) for per-tensor fields.
 * Point-to-point fingerprints (kinds send/recv) are compared without kind/op/root and
 * sequence numbers (each side numbers its own channel). */
TROUPE_MUST_USE troupe_status_t troupe__fp_compare(const char *what, const void *a, int ra,
                                                   const void *b, int rb);

/* ---- the intra-node shared-memory allreduce (shm_allreduce.c) ---------------------------- */

/* Decides, collectively (every rank calls it, main thread, before the engine starts), whether
 * ranks reduce through shared memory: every rank on this node, TROUPE_COLL_SHM on everywhere,
 * and each rank maps every other's control page. Then host pools become shareable
 * (troupe__shm_set_pools). Returns OK also when it stays off (the reason is logged at info). */
TROUPE_MUST_USE troupe_status_t troupe__shm_coll_start(const void *comm, int rank, int size);

/* Unmaps the peers' memory and makes new host pools ordinary again (after the engine stopped). */
void troupe__shm_coll_stop(void);

/* True while shared memory is in use: agreed at start, and no rank failed to map another's
 * memory since (then every rank turned it off at the same request). Engine owner. */
bool troupe__shm_coll_on(void);

/* Tests: the next n peer mappings of this rank fail (UNAVAILABLE), as a permission or a
 * descriptor limit would; the requests concerned fall back to MPI on every rank. Call before
 * the collectives (not thread-safe with the engine). */
void troupe__shm_coll_fail_maps(int n);

typedef enum troupe__shm_state {
    TROUPE__SHM_ARRIVED = 1, /* waiting for every rank to arrive */
    TROUPE__SHM_REDUCING,    /* reducing this rank's chunk into every rank's copy */
    TROUPE__SHM_DEPARTED,    /* waiting for every rank to depart */
    TROUPE__SHM_DONE,        /* the allreduce is complete on this rank */
    TROUPE__SHM_FALLBACK,    /* a rank could not map: every rank takes the MPI path instead */
} troupe__shm_state_t;

/* One shared-memory allreduce in progress (engine owner). */
typedef struct troupe__shm_coll {
    troupe__shm_state_t state;
    uint64_t seq;      /* > 0, the same on every rank, increasing */
    char **buf;        /* [size]: every rank's span, as mapped in this process */
    int64_t units;     /* elements of the span */
    size_t unit_bytes; /* bytes per element */
    troupe__red_type_t type;
    troupe_reduce_op_t op;
    int64_t lo, hi, next; /* this rank's chunk and how far it is reduced */
    /* a fused update (troupe_coll_apply_t): run on this rank's chunk, its shared side values
     * copied into every rank's side arrays (the private ones stay here): side[s * size + p] is
     * rank p's side span s as mapped here */
    troupe_coll_apply_fn apply_fn;
    const void *apply_arg;
    size_t n_side;
    size_t n_private; /* the last n_private side arrays: not copied (each rank keeps its chunk) */
    bool gather;      /* TROUPE_COLL_UNSHARD: only copy this rank's chunk of the private ones */
    bool sharded;     /* the private side arrays are this rank's shard only, from unit lo (the
                         others' are not mapped: side[s * size + p] NULL for p != rank) */
    char **side;
    int64_t t_begin_ns, t_arrived_ns, t_reduced_ns, t_done_ns; /* when each state began */
} troupe__shm_coll_t;

/* Begins an allreduce of `units` elements of `type` at `mine` (this rank's span) with every
 * rank's span located by refs[p] (their digests; refs[rank] unused): maps the others' regions
 * (cached) and posts this rank's arrival. A mapping failure is not an error: it is posted, and
 * every rank's troupe__shm_coll_test then ends in TROUPE__SHM_FALLBACK. Errors:
 * RESOURCE_EXHAUSTED. Free with troupe__shm_coll_free. */
TROUPE_MUST_USE troupe_status_t troupe__shm_coll_begin(troupe__shm_coll_t *c, const char *what,
                                                       uint64_t seq, const troupe__shm_ref_t *refs,
                                                       void *mine, int64_t units, size_t unit_bytes,
                                                       troupe__red_type_t type,
                                                       troupe_reduce_op_t op);
/* As troupe__shm_coll_begin, with r's fused update (single precision sums): side_refs[s * size
 * + p] locates rank p's side span s (side_refs[s * size + rank] unused), side_mine[s] this
 * rank's; the last n_private side arrays are not copied to the other ranks (`sharded`: they
 * are this rank's shard, side_mine[s] its first element at unit lo). With `gather`
 * (TROUPE_COLL_UNSHARD) nothing is reduced or updated: this rank's chunk of each private side
 * array is copied into every other rank's. A side mapping failure is posted like the span's
 * (every rank falls back). */
TROUPE_MUST_USE troupe_status_t troupe__shm_coll_begin_apply(
    troupe__shm_coll_t *c, const char *what, uint64_t seq, const troupe__shm_ref_t *refs,
    void *mine, int64_t units, troupe_coll_apply_fn fn, const void *arg, size_t n_side,
    size_t n_private, bool gather, bool sharded, const troupe__shm_ref_t *side_refs,
    void *const *side_mine);

/* First unit of rank k's chunk of a span of `units` elements of unit_bytes on `size` ranks
 * (whole cache lines from the span's start; k == size: `units`): the chunk each rank reduces,
 * updates and, for private side arrays, keeps. */
int64_t troupe__shm_chunk_lo(int64_t units, size_t unit_bytes, int k, int size);

/* Advances c without blocking (*progress when its state or data moved); c->state tells where
 * it is. Never fails (a rank that never comes is the caller's deadline). */
TROUPE_MUST_USE troupe_status_t troupe__shm_coll_test(troupe__shm_coll_t *c, bool *progress);

void troupe__shm_coll_free(troupe__shm_coll_t *c);

/* ---- the cluster (cluster.c) ------------------------------------------------------------- */

/* Marks the cluster failed with `status` and `message` (first failure wins; later calls do
 * nothing). `comm_broken` tells that MPI can no longer be trusted (a dead or stuck peer, an MPI
 * error): then troupe_cluster_finalize skips MPI_Finalize. Thread-safe. */
void troupe__cluster_fail(troupe_status_t status, const char *message, bool comm_broken);

/* The cluster's failure status (OK while healthy); when failed and msg != NULL, copies the
 * message into msg (cap bytes). */
troupe_status_t troupe__cluster_failure(char *msg, size_t cap);

/* True once the cluster failed (lock-free; the engine checks it on every turn). */
bool troupe__cluster_is_failed(void);

/* Counters (atomic). */
void troupe__stats_add(uint64_t collectives, uint64_t completed, uint64_t buckets, uint64_t bytes,
                       uint64_t failures);
/* Counts `bytes` of a bucket that went through a staging buffer (troupe_transport_stats_t). */
void troupe__stats_add_staged(uint64_t bytes);

/* Counts a bucket reduced by troupe's ring (also counted in buckets). */
void troupe__stats_add_ring(void);
void troupe__stats_add_scatter(void);

/* Counts a collective reduced through shared memory (shm_allreduce.c). */
void troupe__stats_add_shm(void);

/* ---- the engine (engine.c) --------------------------------------------------------------- */

/* True while the engine runs (distributed cluster, initialised, not finalized). */
bool troupe__engine_running(void);

/* Hands *r_p to the engine (consumed; nulled). Assigns the request's sequence number (per
 * collective stream, or per point-to-point channel) in call order. Never blocks on MPI. If
 * the engine is not running, or the cluster has failed, the request completes at once with
 * that status. Thread-safe. */
void troupe__engine_submit(troupe__req_t **r_p);

/* Wakes the engine thread if it sleeps with gated requests in flight (a gate opened). Thread-safe;
 * a no-op without MPI or while the engine does not run. */
void troupe__engine_wake(void);

/* The progress hook of lazily submitted collectives' events (troupe__event_set_progress;
 * r->lazy: the engine thread is not woken). With TROUPE__EVENT_KICK it wakes the engine
 * thread if it sleeps with requests waiting. With a deadline (absolute, CLOCK_MONOTONIC, or
 * TROUPE_TIMEOUT_INFINITE; from troupe_event_sync or a parking stream): when the engine
 * thread is idle, the calling thread drives the engine until `ev` completes or the deadline
 * passes, then hands it back; otherwise it wakes the engine thread as for a kick. Thread-safe;
 * a no-op without MPI. */
void troupe__engine_progress(troupe_event_t *ev, int64_t deadline_ns);

/* Starts the engine thread (main thread, after MPI_Init_thread; MPI builds only). data_comm
 * and ctl_comm point to the MPI_Comm handles (data; fingerprints and probes), which the
 * engine uses until troupe__engine_stop. Collective: starts the shared-memory allreduce
 * first (troupe__shm_coll_start). Errors: RESOURCE_EXHAUSTED, INTERNAL. */
TROUPE_MUST_USE troupe_status_t troupe__engine_start(const void *data_comm, const void *ctl_comm,
                                                     int rank, int size);
/* Stops the engine thread and joins it. With `drain`, every submitted request completes first
 * (each bounded by its deadline); without, pending requests fail at once with CANCELLED and no
 * more MPI calls are made (abort). `timeout_ns` bounds the join; on timeout returns false and
 * leaves the engine running. True when no engine runs any more. Main thread only. */
bool troupe__engine_stop(bool drain, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif
#endif /* TROUPE_TRANSPORT_MPI_TRANSPORT_IMPL_H */
