/* troupe — what the transport engine's files share in MPI builds (not installed): the
 * communicators, the message tags, control sends, the two protocols the engine runs for a
 * request besides moving buckets: the fingerprint exchange (fingerprint.c) and the ring
 * allreduce of one bucket (ring.c), and what the engine's own files share: a request's state
 * and the calls between the loop (engine.c), a collective's data (engine_coll.c), a send or
 * receive (engine_p2p.c), liveness (engine_probe.c) and the fused update's sharded state
 * (apply.c). engine.c drives them (transport_impl.h, The engine).
 *
 * Thread safety: the engine's owner only (one thread at a time, engine.c).
 * Ownership: see each type.
 */
#ifndef TROUPE_TRANSPORT_MPI_ENGINE_IMPL_H
#define TROUPE_TRANSPORT_MPI_ENGINE_IMPL_H

#include "troupe_config.h"

#if TROUPE_HAVE_MPI

#include "transport/mpi/bucket_impl.h"
#include "transport/mpi/transport_impl.h"

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tags on the control communicator (fingerprints, probes) and the data communicator. */
#define TROUPE__TAG_FP_COLL 101 /* collective fingerprint digests */
#define TROUPE__TAG_FP_S2R 102  /* point-to-point: the sender's digest, to the receiver */
#define TROUPE__TAG_FP_R2S 103  /* point-to-point: the receiver's digest, to the sender */
#define TROUPE__TAG_PROBE 104   /* liveness: {PING|PONG, stamp} */
#define TROUPE__TAG_FULL 10     /* added to a digest's tag: the full fingerprint */
#define TROUPE__TAG_DATA_P2P 201
#define TROUPE__TAG_CLOCK 110 /* clock offsets at init (clock_sync.c), before the engine */
#define TROUPE__TAG_RING 301  /* + bucket index % TROUPE__RING_TAGS: a ring bucket's steps */
#define TROUPE__RING_TAGS 64  /* buckets in flight are fewer than this many apart (engine_coll.c)  \
                               */

/* Where the engine runs: its communicators (data; fingerprints and probes), rank and size. */
typedef struct troupe__engine_comm {
    MPI_Comm data, ctl;
    int rank, size;
} troupe__engine_comm_t;

/* TRANSPORT_ERROR "<what>: <call> failed: <MPI error string>". */
TROUPE_MUST_USE troupe_status_t troupe__mpi_error(const char *what, const char *call, int rc);

/* The MPI type class c travels in (MPI_UINT16_T for bfloat16: moved, never reduced by MPI;
 * MPI_BYTE for bytes). */
MPI_Datatype troupe__cls_mpi_type(troupe__cls_t c);

/* Sends `size` bytes at `data` (copied) to `dest` on the control communicator without
 * waiting; the engine tests the send and frees the copy. Errors: RESOURCE_EXHAUSTED,
 * TRANSPORT_ERROR, naming `what`. */
TROUPE_MUST_USE troupe_status_t troupe__engine_send_ctl(const void *data, size_t size, int dest,
                                                        int tag, const char *what);

/* At troupe_cluster_init, before the engine starts, when any rank traces (base/trace.h): rank 0
 * measures each rank's clock offset to its own with round trips on `comm` (the one with the
 * smallest round-trip time wins) and tells it; every rank hands its offset to the trace
 * recorder. Collective over `comm`. Errors: TRANSPORT_ERROR naming the MPI call. */
TROUPE_MUST_USE troupe_status_t troupe__clock_sync(MPI_Comm comm, int rank, int size);

/* True for a send or receive (a point-to-point channel, not a collective). */
static inline bool troupe__req_is_p2p(const troupe__req_t *r)
{
    return r->kind == TROUPE__REQ_SEND || r->kind == TROUPE__REQ_RECV;
}

/* True when rank p (not this one) takes part in r. */
static inline bool troupe__req_involves(const troupe__req_t *r, int p, int rank)
{
    return p != rank && (!troupe__req_is_p2p(r) || p == r->peer);
}

/* ---- the fingerprint exchange (fingerprint.c) ---------------------------------------------
 * Stage 1: every rank involved sends its digest (troupe__fp_digest, with this rank's layout)
 * and receives theirs. When every digest equals, the fingerprints agree. Otherwise (all ranks
 * see every digest, so all get there together) stage 2: the full fingerprints travel and are
 * compared field by field against rank 0's (point-to-point: the lower rank's), so every rank
 * fails alike with FAILED_PRECONDITION naming the ranks, the tensor and the field. */
typedef struct troupe__fp_exchange {
    int stage;
    int tag; /* the peers' digests' tag on the control communicator */
    troupe__fp_digest_t mine;
    troupe__fp_digest_t *peer; /* [size] */
    void *fp_mine;
    size_t fp_size;
    void **fp_peer;       /* [size] received full fingerprints */
    size_t *fp_peer_size; /* [size] */
    MPI_Request *recv;    /* [size] */
    unsigned char *state; /* [size]: 0 not yet matched, 1 receiving, 2 received/not involved */
} troupe__fp_exchange_t;

/* Starts the exchange of r's fingerprint (x zeroed): `flat`/`shm`, this rank's layout, and
 * side_shm[0..r->n_side) (its fused update's side spans; NULL: none) travel in the digest.
 * Errors: RESOURCE_EXHAUSTED, TRANSPORT_ERROR naming `what`. */
TROUPE_MUST_USE troupe_status_t troupe__fp_exchange_start(troupe__fp_exchange_t *x,
                                                          const troupe__engine_comm_t *c,
                                                          const troupe__req_t *r, const char *what,
                                                          bool flat, const troupe__shm_ref_t *shm,
                                                          const troupe__shm_ref_t *side_shm);

/* Receives what arrived; *agreed once the fingerprints are known to agree. Errors:
 * FAILED_PRECONDITION (they differ: the message names the field), TRANSPORT_ERROR (MPI, bad
 * framing), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__fp_exchange_poll(troupe__fp_exchange_t *x,
                                                         const troupe__engine_comm_t *c,
                                                         const troupe__req_t *r, const char *what,
                                                         bool *agreed);

/* True when rank p's part of the exchange has not arrived (deadline messages). */
bool troupe__fp_exchange_pending(const troupe__fp_exchange_t *x, int p);

/* Frees x's buffers (NULL-safe members); x is zeroed. */
void troupe__fp_exchange_free(troupe__fp_exchange_t *x, int size);

/* ---- the ring allreduce of one bucket (ring.c) --------------------------------------------
 * Patarasuk and Yuan's bandwidth-optimal allreduce, as in Baidu's ring-allreduce, Horovod and
 * NCCL: the bucket is cut into `size` chunks; p-1 reduce-scatter steps, then p-1 allgather
 * steps, each sending one chunk to the right neighbour and receiving one from the left. */

/* Buckets from this many bytes (and one element per rank at least) take the ring. */
#define TROUPE__RING_MIN_BYTES (64 * 1024)

typedef struct troupe__ring {
    MPI_Request rreq, sreq; /* the step's receive and send */
    int step;               /* 0 .. 2(p-1) */
    int tag;
    char *base; /* the bucket's data: the caller's memory (in place) or its staging slot */
    void *tmp;  /* receive buffer of troupe__ring_tmp_bytes() bytes, borrowed */
    int64_t units;
    troupe__cls_t cls;
    troupe_reduce_op_t op;
    bool scatter; /* the reduce-scatter half only, cut at the shards (troupe__ring_scatter_start) */
    int64_t t_start_ns, t_scattered_ns; /* posted; reduce-scatter done (allgather began) */
} troupe__ring_t;

/* True when bucket b of a request of `kind` is reduced by the ring on `size` ranks. */
bool troupe__ring_wanted(troupe__req_kind_t kind, const troupe__bucket_t *b, int size);

/* Bytes of the receive buffer a ring over `size` ranks needs for bucket b. */
size_t troupe__ring_tmp_bytes(const troupe__bucket_t *b, int size);

/* Posts the first step of the ring of bucket b (index `bucket` in its plan: the tag) at
 * `base`, receiving into `tmp`. Errors: TRANSPORT_ERROR naming `what`. */
TROUPE_MUST_USE troupe_status_t troupe__ring_start(troupe__ring_t *g,
                                                   const troupe__engine_comm_t *c,
                                                   const troupe__bucket_t *b, size_t bucket,
                                                   troupe_reduce_op_t op, char *base, void *tmp,
                                                   const char *what);

/* Posts the first step of a reduce-scatter of `units` units of class `cls` at `base` over the
 * ranks, cut at troupe_coll_shard_range's bounds, so that rank r ends with the reduced units of
 * its own shard (the rest of base holds partial sums); receives into `tmp`
 * (troupe__ring_scatter_tmp_bytes). One at a time: its tag is bucket 0's. Errors:
 * TRANSPORT_ERROR naming `what`. */
TROUPE_MUST_USE troupe_status_t troupe__ring_scatter_start(troupe__ring_t *g,
                                                           const troupe__engine_comm_t *c,
                                                           int64_t units, troupe__cls_t cls,
                                                           troupe_reduce_op_t op, char *base,
                                                           void *tmp, const char *what);
/* Bytes of the receive buffer troupe__ring_scatter_start needs: the largest shard. */
size_t troupe__ring_scatter_tmp_bytes(int64_t units, troupe__cls_t cls, int size);

/* Completes the steps that finished (reducing what a reduce-scatter step received) and posts
 * the next; *progress when a step finished, *done after the last one (tmp is free again).
 * Errors: TRANSPORT_ERROR naming `what`. */
TROUPE_MUST_USE troupe_status_t troupe__ring_test(troupe__ring_t *g, const troupe__engine_comm_t *c,
                                                  const char *what, bool *done, bool *progress);

/* ---- the engine's own files ---------------------------------------------------------------
 * engine.c runs the loop and a request's life; it calls into engine_coll.c (a collective's
 * data: fusion buckets, the ring, shared memory), engine_p2p.c (a send's or a receive's
 * slices), engine_probe.c (control sends, liveness probes, gates and the deadline verdicts) and
 * apply.c (the fused update's side spans and the private optimizer state that shared memory
 * leaves sharded). Everything below is touched by the engine's owner only. */

#define TROUPE__NS_PER_S (1000LL * 1000 * 1000)
#define TROUPE__PROBE_WINDOW_NS (2LL * TROUPE__NS_PER_S) /* a liveness probe waits for PONGs */

/* A bucket in flight. */
typedef struct troupe__flight {
    MPI_Request req;     /* the MPI_Iallreduce or MPI_Ibcast (when !on_ring) */
    troupe__ring_t ring; /* troupe's ring (ring.c) */
    bool on_ring;
    size_t bucket;
    int slot; /* staging slot, -1 in place */
    int tmp;  /* the ring's receive buffer (engine_coll.c), -1 none */
    int64_t t_post_ns;
    int track; /* TROUPE__TRACK_BUCKET0 or 1: not the other flight's (trace) */
} troupe__flight_t;

typedef enum troupe__phase { TROUPE__PH_INIT = 0, TROUPE__PH_FP, TROUPE__PH_DATA } troupe__phase_t;

/* The engine's state of one request (troupe__req_t.engine_state). */
typedef struct troupe__rs {
    troupe__phase_t phase;
    char what[96];
    int64_t t_start_ns;
    int64_t t_submit_ns; /* when the engine took the request (a gated one waits from then) */
    int64_t t_gate_ns;   /* gated: when it reached the head of its lane, its gate closed (its
                            gate's deadline counts from then); 0 before */
    int64_t t_data_ns;   /* when the data phase began */
    int64_t deadline_ns; /* fingerprints: activation + timeout; data: last progress + timeout */
    troupe__fp_exchange_t fp;
    bool flat;          /* this rank's tensors form one span (troupe__bucket_flat) */
    bool all_flat;      /* ...every rank's: buckets in order (the flat plan) */
    bool use_shm;       /* ...and each lies in shareable memory: reduced through it */
    bool shm_apply;     /* ...and so do the fused update's side spans: each rank updates its
                           chunk there (else the update runs on every rank after the sums) */
    uint64_t shard_key; /* a fused update with private side arrays: apply.c's key, else 0 */
    MPI_Request gather[TROUPE_COLL_APPLY_MAX_SIDE]; /* troupe__apply_gather_post's, in flight */
    int ngather;
    bool shard_posted;  /* sharded state: the updated shared side arrays' gather is posted */
    float *shard_flat;  /* ...through this flat copy when they lie in no span, else NULL */
    int *gather_counts; /* [2 * size]: each rank's chunk (units), then its first unit */
    const char *span;   /* this rank's span when flat */
    int64_t span_bytes;
    troupe__cls_t span_cls;
    troupe__shm_coll_t shm;
    /* collective data */
    troupe__bucket_plan_t plan;
    size_t next_bk, done_bks;
    troupe__flight_t fl[2];
    int nfl;
    /* sharded state off shared memory: the span's reduce-scatter instead of buckets */
    bool scatter;        /* taken (engine_coll.c, troupe__engine_coll_mpi_begin) */
    bool scatter_done;   /* ...and complete: this rank's shard holds the sums */
    troupe__ring_t sc;   /* its ring */
    int sc_tmp;          /* its receive buffer (engine_coll.c's ring buffers), -1 none */
    /* point-to-point data */
    MPI_Request *p2p;
    int np2p;
    /* liveness probe */
    bool probing;
    int64_t probe_t0, probe_end;
    bool fault_seen; /* TROUPE_FAULT's collective hook ran for it */
    /* outcome */
    bool finished;
    troupe_status_t fin;
    char *fin_msg;
} troupe__rs_t;

/* What the engine's files share (engine.c defines it; the owner only). */
typedef struct troupe__engine_shared {
    troupe__engine_comm_t comm;
    bool broken;         /* MPI must not be called any more */
    int64_t gate_due_ns; /* the earliest deadline of a closed gate at the last turn, 0 none */
} troupe__engine_shared_t;
extern troupe__engine_shared_t troupe__eng;

/* TROUPE_TIMEOUT_S in nanoseconds: a request's deadline without progress. */
int64_t troupe__engine_timeout_ns(void);

/* Records r's outcome (the first one only; msg copied, NULL: the status's name). engine.c. */
void troupe__engine_finish(troupe__req_t *r, troupe_status_t st, const char *msg);

/* Fails r with the status and message troupe__error just recorded and fails the cluster;
 * comm_broken: MPI must not be called any more. engine.c. */
void troupe__engine_fail(troupe__req_t *r, troupe_status_t st, bool comm_broken);

/* engine_coll.c: a collective's data. */
/* While the fingerprints travel: plans the buckets and packs the first ones (the caller's memory
 * is only read). Errors: RESOURCE_EXHAUSTED and the planner's. */
TROUPE_MUST_USE troupe_status_t troupe__engine_coll_prepack(troupe__req_t *r, troupe__rs_t *rs);
/* Begins r's data through MPI: first a gather of private side arrays left sharded, then,
 * unless r is only that gather, its buckets (planned once), or, for a fused update with
 * sharded state whose span is flat on every rank, the span's reduce-scatter (rs->scatter). */
TROUPE_MUST_USE troupe_status_t troupe__engine_coll_mpi_begin(troupe__req_t *r, troupe__rs_t *rs);
/* Begins reducing r's span through shared memory (every rank's digest located its span). */
TROUPE_MUST_USE troupe_status_t troupe__engine_coll_shm_begin(troupe__req_t *r, troupe__rs_t *rs);
/* Posts buckets while fewer than two are in flight. Errors: RESOURCE_EXHAUSTED,
 * TRANSPORT_ERROR. */
TROUPE_MUST_USE troupe_status_t troupe__engine_coll_post(troupe__req_t *r, troupe__rs_t *rs);
/* Tests the buckets in flight; unpacks the finished ones. *progress when one finished. */
TROUPE_MUST_USE troupe_status_t troupe__engine_coll_test(troupe__req_t *r, troupe__rs_t *rs,
                                                         bool *progress);
/* Advances rs's reduce-scatter (rs->scatter); *done when this rank's shard holds the sums.
 * Errors: TRANSPORT_ERROR. */
TROUPE_MUST_USE troupe_status_t troupe__engine_coll_scatter_test(troupe__req_t *r,
                                                                 troupe__rs_t *rs,
                                                                 bool *progress, bool *done);
/* The buffers of rs's buckets that will not complete: the slots and ring buffers still in
 * flight are left to MPI (only after a failure), the others given back. */
void troupe__engine_coll_release(troupe__rs_t *rs);
/* At stop: frees the staging slots and ring buffers. */
void troupe__engine_coll_stop(void);
/* The bucket path r's data took, for the trace: "shm", "reduce-scatter", "ring" or "mpi". */
const char *troupe__engine_coll_path(const troupe__req_t *r, const troupe__rs_t *rs);

/* engine_p2p.c: a send's or a receive's slices (Isend/Irecv of TROUPE__MAX_MSG_BYTES each). */
TROUPE_MUST_USE troupe_status_t troupe__engine_p2p_post(troupe__req_t *r, troupe__rs_t *rs);
/* *all when every slice completed; *progress when one did at this call. */
TROUPE_MUST_USE troupe_status_t troupe__engine_p2p_test(troupe__rs_t *rs, bool *progress,
                                                        bool *all);

/* engine_probe.c: control sends, liveness probes, gates. */
/* Allocates the per-peer records of `size` ranks; false when out of memory. */
bool troupe__engine_probe_init(int size);
/* Posts the probe receive (the engine thread, first). Errors: TRANSPORT_ERROR. */
TROUPE_MUST_USE troupe_status_t troupe__engine_probe_open(void);
/* Answers PINGs, records PONGs and gate notices, frees finished control sends. */
TROUPE_MUST_USE troupe_status_t troupe__engine_probe_service(void);
/* Sends PING to the ranks r involves; the window closes TROUPE__PROBE_WINDOW_NS after now. */
TROUPE_MUST_USE troupe_status_t troupe__engine_probe_start(troupe__req_t *r, troupe__rs_t *rs,
                                                           int64_t now);
/* The data phase's probe window closed: DEADLINE_EXCEEDED naming the silent ranks. */
TROUPE_MUST_USE troupe_status_t troupe__engine_probe_verdict(troupe__req_t *r, troupe__rs_t *rs);
/* The fingerprint phase's probe window closed: DEADLINE_EXCEEDED naming the silent ranks
 * first, then those alive but behind. */
TROUPE_MUST_USE troupe_status_t troupe__engine_probe_fp_verdict(troupe__rs_t *rs);
/* r waits at the head of its lane for its gate; returns whether r failed (its gate's deadline
 * passed: the other ranks are told); else notes the deadline in troupe__eng.gate_due_ns. */
bool troupe__engine_gate_check(troupe__req_t *r, troupe__rs_t *rs);
/* DEADLINE_EXCEEDED when a rank whose fingerprint is missing told this one that it failed r at
 * its gate; else OK. */
TROUPE_MUST_USE troupe_status_t troupe__engine_peer_gate_expired(const troupe__req_t *r,
                                                                 troupe__rs_t *rs);
/* Writes "rank 1" / "ranks 1, 3" for the ranks p < size with bad[p] into buf. */
void troupe__engine_rank_list(const bool *bad, int size, char *buf, size_t cap);
/* At stop on a healthy cluster: tells every peer that this rank stopped after issuing ncoll
 * collectives (so that a peer still waiting for it names it as finished, not as dead or stuck),
 * withdraws the probe receive, lets small sends finish. */
void troupe__engine_probe_drain(uint64_t ncoll);
/* At stop: frees the control sends and the per-peer records. */
void troupe__engine_probe_stop(void);

/* ---- the fused update's state across ranks (apply.c) ---------------------------------------
 * A fused update (collective.h, troupe_coll_apply_t) reads side spans beside the tensors.
 * Through shared memory each rank updates its chunk of every side span; private side arrays
 * (n_private: the optimizer state) then stay sharded, each rank's chunk current only there,
 * until a request that goes through MPI gathers them (MPI_Iallgatherv) or TROUPE_COLL_UNSHARD
 * asks for it. Every rank keeps the same set of sharded requests. */

/* Allocates the sharded set (room up front: growing it can fail on one rank alone); false when
 * out of memory. */
bool troupe__apply_init(void);
/* Frees the sharded set. */
void troupe__apply_stop(void);
/* Fills side_shm[s] (zeroed by the caller) with where side span s of r's fused update lies in
 * shareable memory, when every side array s lies as the tensors do; else leaves all zeroed. */
void troupe__apply_side_spans(const troupe__req_t *r, const troupe__rs_t *rs,
                              troupe__shm_ref_t *side_shm);
/* Whether digest d located every side span of r's fused update (true without one). */
bool troupe__apply_sides_shared(const troupe__req_t *r, const troupe__fp_digest_t *d);
/* The fingerprints agree (rs->use_shm, rs->shm_apply decided): keys r's private state and sends
 * r through MPI when shared memory would reduce it without the side spans while its state is
 * sharded (or r is only the gather): alike on every rank. */
void troupe__apply_agreed(const troupe__req_t *r, troupe__rs_t *rs);
/* Begins r's reduction and fused update through shared memory, each rank on its chunk (refs:
 * every rank's span). Notes r's private state sharded. */
TROUPE_MUST_USE troupe_status_t troupe__apply_shm_begin(troupe__req_t *r, troupe__rs_t *rs,
                                                        const troupe__shm_ref_t *refs);
/* Shared memory finished r: a gather (TROUPE_COLL_UNSHARD) leaves its state whole. */
void troupe__apply_shm_done(const troupe__req_t *r, const troupe__rs_t *rs);
/* r goes through MPI while its private state is sharded: posts its gather. No-op when nothing
 * is sharded. Errors: FAILED_PRECONDITION (the arrays moved), UNIMPLEMENTED (over INT_MAX
 * elements), RESOURCE_EXHAUSTED, TRANSPORT_ERROR. */
TROUPE_MUST_USE troupe_status_t troupe__apply_gather_post(troupe__req_t *r, troupe__rs_t *rs);
/* Tests the gather; *done when none is in flight (*progress when it ended). */
/* r has sharded state and did not update through shared memory: after this rank updated its
 * shard, posts the gather of the shared side arrays (rs->shard_posted; the same requests as
 * troupe__apply_gather_test tests). Errors: UNIMPLEMENTED (over INT_MAX elements), RESOURCE_EXHAUSTED, TRANSPORT_ERROR. */
TROUPE_MUST_USE troupe_status_t troupe__apply_shard_post(troupe__req_t *r, troupe__rs_t *rs);
/* The gather troupe__apply_shard_post posted completed: unpacks its flat copy (if any). */
void troupe__apply_shard_done(const troupe__req_t *r, troupe__rs_t *rs);
TROUPE_MUST_USE troupe_status_t troupe__apply_gather_test(troupe__rs_t *rs, bool *progress,
                                                          bool *done);
/* Frees rs's gather counts unless a gather is still in flight (failures: left to MPI). */
void troupe__apply_free(troupe__rs_t *rs);

#ifdef __cplusplus
}
#endif
#endif /* TROUPE_HAVE_MPI */
#endif /* TROUPE_TRANSPORT_MPI_ENGINE_IMPL_H */
