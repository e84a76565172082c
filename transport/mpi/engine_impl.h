/* troupe — what the transport engine's files share in MPI builds (not installed): the
 * communicators, the message tags, control sends, and the two protocols the engine runs for a
 * request besides moving buckets: the fingerprint exchange (fingerprint.c) and the ring
 * allreduce of one bucket (ring.c). engine.c drives them (transport_impl.h, The engine).
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
#define TROUPE__TAG_RING 301 /* + bucket index % TROUPE__RING_TAGS: a ring bucket's steps */
#define TROUPE__RING_TAGS 64 /* buckets in flight are fewer than this many apart (engine.c) */

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

/* Completes the steps that finished (reducing what a reduce-scatter step received) and posts
 * the next; *progress when a step finished, *done after the last one (tmp is free again).
 * Errors: TRANSPORT_ERROR naming `what`. */
TROUPE_MUST_USE troupe_status_t troupe__ring_test(troupe__ring_t *g, const troupe__engine_comm_t *c,
                                                  const char *what, bool *done, bool *progress);

#ifdef __cplusplus
}
#endif
#endif /* TROUPE_HAVE_MPI */
#endif /* TROUPE_TRANSPORT_MPI_ENGINE_IMPL_H */
