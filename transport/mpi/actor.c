/* troupe — the transport actor (DESIGN.md §3, §8): one thread per process that runs the
 * engine, the only code that calls MPI between troupe_cluster_init and troupe_cluster_finalize
 * (MPI_THREAD_SERIALIZED). The engine has one owner at a time: the actor thread, or a thread
 * waiting for a lazily started collective while the actor is idle — a host thread in
 * troupe_event_sync, or a stream parking on a TROUPE_COLL_LAZY device-level collective
 * (troupe__transport_progress, below) — which saves the hand-off's two thread wake-ups.
 *
 * Mailbox: a mutex-protected FIFO of requests (troupe__transport_submit) and a condition
 * variable the actor sleeps on when it has nothing in flight. While anything is in flight it
 * polls MPI continuously (libnbc progresses only inside MPI calls), checks deadlines, answers
 * liveness probes, and keeps taking new requests.
 *
 * Lanes. Requests run in issue order within their lane: one lane for the collectives (every
 * rank issues them in one order), and one per point-to-point channel (sends to rank p; receives
 * from rank p), so a device_to_device between two ranks never waits behind a collective that
 * the other rank issues later (or the reverse). Only the head of a lane is active.
 *
 * A request's life:
 *   1. fingerprints: Isend this rank's fingerprint to every rank involved and receive theirs
 *      (collectives: MPI_Improbe/MPI_Imrecv since their sizes may differ; point-to-point: fixed
 *      size). Every rank compares every fingerprint against rank 0's (point-to-point: the lower
 *      rank's), so all ranks fail alike with FAILED_PRECONDITION on a difference. Fingerprints
 *      that have not arrived by the deadline name their ranks (DEADLINE_EXCEEDED).
 *   2. data: fusion buckets (collective.h) with up to two MPI_Iallreduce/MPI_Ibcast in flight,
 *      the next one packed while the previous moves; point-to-point: Isend/Irecv slices. When
 *      nothing completes for the deadline, a liveness probe (PING to the ranks involved, PONG
 *      back, 2 s) names the ranks that did not answer.
 *   3. the request's event completes, after this iteration's MPI calls, so a host thread woken
 *      by it never calls MPI while the actor still does (bench/merge relies on it).
 * After a failure the cluster is failed: later requests fail at once. After a deadline or an
 * MPI error the actor makes no further MPI calls (a dead peer can make any of them hang).
 */
#define _GNU_SOURCE
#include "troupe_config.h"

#include "transport/mpi/transport_impl.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/status.h"
#include "ir/prec.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if TROUPE_HAVE_MPI
#include <mpi.h>

/* Tags on the control communicator (fingerprints, probes) and the data communicator. */
#define S_TAG_FP_COLL 101 /* collective fingerprint digests */
#define S_TAG_FP_S2R 102  /* point-to-point: the sender's digest, to the receiver */
#define S_TAG_FP_R2S 103  /* point-to-point: the receiver's digest, to the sender */
#define S_TAG_PROBE 104   /* liveness: {S_PING|S_PONG, stamp} */
#define S_TAG_FULL 10     /* added to a digest's tag: the full fingerprint (digests differed) */
#define S_TAG_DATA_P2P 201
#define S_TAG_RING 301 /* + bucket index % S_RING_TAGS: a ring bucket's steps */
#define S_RING_TAGS 64 /* buckets in flight are fewer than this many apart (s_coll_post) */

#define S_PING 1
#define S_PONG 2

#define S_NS_PER_S (1000LL * 1000 * 1000)
#define S_PROBE_WINDOW_NS (2LL * S_NS_PER_S) /* how long a liveness probe waits for PONGs */
#define S_MAX_MSG_BYTES (1LL << 30)          /* largest single message or bucket */
#define S_DRAIN_NS (2LL * S_NS_PER_S)        /* at stop: how long to wait for small sends */

/* Reduce classes: the MPI type a precision is reduced (or broadcast) in. */
typedef enum s_cls {
    S_CLS_F32 = 0, /* single, and half/bfloat16/fp8 widened to single */
    S_CLS_F64,
    S_CLS_I32,
    S_CLS_I64,
    S_CLS_U32,
    S_CLS_U64,
    S_CLS_BF16W, /* single travelling as bfloat16 (TROUPE_COLL_BF16): always staged, ring */
    S_CLS_BYTES, /* broadcast: any precision as bytes */
    S_NCLS
} s_cls_t;

typedef struct s_seg {
    size_t t;      /* tensor index */
    int64_t off;   /* first unit of the tensor (elements; bytes for S_CLS_BYTES) */
    int64_t count; /* units */
} s_seg_t;

typedef struct s_bucket {
    s_cls_t cls;
    size_t seg0, nseg;
    int64_t units;
    bool in_place; /* native segments back to back (s_contiguous): reduced in the caller's memory */
    int slot;      /* staging slot holding it (packed ahead, or in flight), else -1 */
} s_bucket_t;

typedef struct s_flight {
    MPI_Request req;  /* the MPI_Iallreduce or MPI_Ibcast; a ring step's receive */
    MPI_Request sreq; /* a ring step's send */
    size_t bucket;
    int slot;      /* staging slot, -1 in place */
    int ring_step; /* -1: one MPI collective; else the ring step in flight (s_ring_post) */
    int tmp;       /* a ring's receive buffer (s_a.rtmp), -1 none */
    char *base;    /* a ring's data: the caller's memory (in place) or its staging slot */
} s_flight_t;

typedef enum s_phase { S_PH_INIT = 0, S_PH_FP, S_PH_DATA } s_phase_t;

/* The actor's state of one request (troupe__req_t.actor_state). */
typedef struct s_rs {
    s_phase_t phase;
    char what[96];
    int64_t t_start_ns;
    int64_t t_data_ns;   /* when the data phase began */
    int64_t deadline_ns; /* fingerprints: activation + timeout; data: last progress + timeout */
    /* fingerprints: stage 1 digests; stage 2 (only when digests differ) full fingerprints */
    int fp_stage;
    int fp_tag; /* the digests' tag on the control communicator */
    troupe__fp_digest_t dg_mine;
    bool all_flat;    /* every rank's tensors form one span: buckets in order (s_plan_flat) */
    bool use_shm;     /* ...and each lies in shareable memory: reduced through it (shm.c) */
    const char *span; /* this rank's span when dg_mine.flat (s_flat) */
    int64_t span_bytes;
    troupe__shm_coll_t shm;
    troupe__fp_digest_t *dg_peer; /* [size] */
    void *fp_mine;
    size_t fp_size;
    void **fp_peer;          /* [size] received full fingerprints */
    size_t *fp_peer_size;    /* [size] */
    MPI_Request *fp_recv;    /* [size] */
    unsigned char *fp_state; /* [size]: 0 not yet matched, 1 receiving, 2 received/not involved */
    /* collective data */
    s_seg_t *segs;
    size_t nsegs, segs_cap;
    s_bucket_t *bks;
    size_t nbks, bks_cap;
    size_t next_bk, done_bks;
    bool planned;
    s_flight_t fl[2];
    int nfl;
    /* point-to-point data */
    MPI_Request *p2p;
    int np2p;
    /* liveness probe */
    bool probing;
    int64_t probe_t0, probe_end;
    /* outcome */
    bool finished;
    troupe_status_t fin;
    char *fin_msg;
} s_rs_t;

/* A small control send in flight (fingerprint, PING, PONG) and the buffer it owns. */
typedef struct s_send {
    MPI_Request req;
    void *buf;
} s_send_t;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* the actor sleeps here when idle */
    pthread_cond_t exit_cv; /* troupe__transport_stop waits here */
    bool running;           /* started and not yet joined */
    bool accepting;         /* submit hands requests to the actor */
    bool stop, abort_now, exited, sleeping;
    bool busy;    /* the actor thread drives the engine (has requests in flight) */
    bool helping; /* a waiting thread drives the engine (troupe__transport_progress) */
    troupe__req_t *in_head, *in_tail;
    uint64_t coll_seq;
    uint64_t *send_seq, *recv_seq; /* [size] */
    pthread_t thread;

    /* the engine's owner only: the actor thread, or a helping thread (busy/helping, under mu,
     * say which; the hand-over through mu orders their accesses) */
    unsigned turn;
    MPI_Comm data, ctl;
    int rank, size;
    troupe__req_t *head; /* active list, issue order */
    void *slot[2];
    size_t slot_cap[2];
    bool slot_busy[2];
    void *rtmp[2]; /* the receive buffers of ring buckets in flight */
    size_t rtmp_cap[2];
    bool rtmp_busy[2];
    MPI_Request probe_req;
    int64_t probe_buf[2];
    bool probe_posted;
    s_send_t *sends;
    size_t nsends, sends_cap;
    int64_t *last_pong_ns; /* [size] */
    unsigned char *lane_busy;
    bool broken;              /* MPI must not be called any more */
    bool waiting_on_peers;    /* every active request waits for slower ranks (s_iteration) */
    int64_t waiting_since_ns; /* then: when the newest of them started */
} s_a = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
    .exit_cv = PTHREAD_COND_INITIALIZER,
};

/* ---- helpers ----------------------------------------------------------------------------- */

static troupe_status_t s_mpi_err(const char *what, const char *call, int rc)
{
    char es[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, es, &len) != MPI_SUCCESS)
        snprintf(es, sizeof es, "MPI error %d", rc);
    return troupe__error(TROUPE_TRANSPORT_ERROR, "%s: %s failed: %s", what, call, es);
}

static int64_t s_timeout_ns(void)
{
    return troupe_config_timeout_s() * S_NS_PER_S;
}

static s_cls_t s_cls_of(const troupe__req_t *r, troupe_prec_t p)
{
    if (r->kind == TROUPE__REQ_BROADCAST)
        return S_CLS_BYTES;
    if (r->bf16_wire && p == TROUPE_PREC_SINGLE)
        return S_CLS_BF16W;
    switch (p) {
    case TROUPE_PREC_DOUBLE:
        return S_CLS_F64;
    case TROUPE_PREC_INT32:
        return S_CLS_I32;
    case TROUPE_PREC_INT64:
        return S_CLS_I64;
    case TROUPE_PREC_UINT32:
        return S_CLS_U32;
    case TROUPE_PREC_UINT64:
        return S_CLS_U64;
    default:
        return S_CLS_F32; /* single, half, bfloat16, fp8 (checked at the call) */
    }
}

static size_t s_cls_size(s_cls_t c)
{
    switch (c) {
    case S_CLS_F64:
    case S_CLS_I64:
    case S_CLS_U64:
        return 8;
    case S_CLS_BF16W:
        return 2;
    case S_CLS_BYTES:
        return 1;
    default:
        return 4;
    }
}

static MPI_Datatype s_cls_type(s_cls_t c)
{
    switch (c) {
    case S_CLS_F32:
        return MPI_FLOAT;
    case S_CLS_F64:
        return MPI_DOUBLE;
    case S_CLS_I32:
        return MPI_INT32_T;
    case S_CLS_I64:
        return MPI_INT64_T;
    case S_CLS_U32:
        return MPI_UINT32_T;
    case S_CLS_U64:
        return MPI_UINT64_T;
    case S_CLS_BF16W:
        return MPI_UINT16_T; /* moved by the ring only, never reduced by MPI */
    default:
        return MPI_BYTE;
    }
}

static bool s_native(s_cls_t c, troupe_prec_t p)
{
    if (c == S_CLS_BF16W)
        return false; /* converted on the way in and out */
    return c != S_CLS_F32 || p == TROUPE_PREC_SINGLE;
}

static MPI_Op s_mpi_op(troupe_reduce_op_t op)
{
    switch (op) {
    case TROUPE_REDUCE_MAX:
        return MPI_MAX;
    case TROUPE_REDUCE_MIN:
        return MPI_MIN;
    default:
        return MPI_SUM; /* sum, mean */
    }
}

/* Size of one unit of tensor t in the request's class (bytes for broadcast). */
static size_t s_unit_bytes(const troupe__req_t *r, size_t t)
{
    return r->kind == TROUPE__REQ_BROADCAST ? 1 : troupe_prec_size_bytes(r->tensors[t].prec);
}

static int64_t s_units(const troupe__req_t *r, size_t t)
{
    const troupe_coll_tensor_t *x = &r->tensors[t];
    return r->kind == TROUPE__REQ_BROADCAST ? x->count * (int64_t)troupe_prec_size_bytes(x->prec)
                                            : x->count;
}

/* True when r's tensors (those with data) are of one class, in their own type, and lie back
 * to back in this rank's memory in request order: one span, as a routine's gradients do when
 * issued in node-id order (parallel/ does); then *span and *span_bytes locate it. Exchanged in
 * the fingerprint digests: when every rank's request is flat, the plan cuts the span in order
 * (s_plan_flat), or shared memory reduces it whole (shm.c). */
static bool s_flat(const troupe__req_t *r, const char **span, int64_t *span_bytes)
{
    if (r->kind != TROUPE__REQ_ALLREDUCE && r->kind != TROUPE__REQ_BROADCAST)
        return false;
    const char *start = NULL, *end = NULL;
    s_cls_t cls = S_NCLS;
    for (size_t j = 0; j < r->n; j++) {
        int64_t u = s_units(r, j);
        if (u == 0)
            continue;
        s_cls_t c = s_cls_of(r, r->tensors[j].prec);
        if ((cls != S_NCLS && c != cls) || !s_native(c, r->tensors[j].prec))
            return false;
        const char *p = r->tensors[j].data;
        if (end != NULL && p != end)
            return false;
        if (start == NULL)
            start = p;
        cls = c;
        end = p + u * (int64_t)s_unit_bytes(r, j);
    }
    *span = start;
    *span_bytes = end - start;
    return cls != S_NCLS;
}

static void s_finish(troupe__req_t *r, troupe_status_t st, const char *msg)
{
    s_rs_t *rs = r->actor_state;
    if (rs->finished)
        return;
    rs->finished = true;
    rs->fin = st;
    if (st != TROUPE_OK)
        rs->fin_msg = troupe_strdup(msg != NULL ? msg : troupe_status_str(st));
}

/* Fails r with the status and message troupe__error just recorded and fails the cluster. */
static void s_fail(troupe__req_t *r, troupe_status_t st, bool comm_broken)
{
    const char *msg = troupe_last_error();
    TROUPE_LOG(TROUPE_LOG_ERROR, TROUPE_SUB_TRANSPORT, "%s", msg);
    troupe__cluster_fail(st, msg, comm_broken);
    if (comm_broken)
        s_a.broken = true;
    s_finish(r, st, msg);
}

static troupe_status_t s_send_ctl(const void *data, size_t size, int dest, int tag,
                                  const char *what)
{
    if (s_a.nsends == s_a.sends_cap) {
        size_t cap = s_a.sends_cap ? 2 * s_a.sends_cap : 16;
        s_send_t *p = troupe_realloc(s_a.sends, cap * sizeof *p);
        if (p == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
        s_a.sends = p;
        s_a.sends_cap = cap;
    }
    void *buf = troupe_malloc(size ? size : 1);
    if (buf == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    memcpy(buf, data, size);
    s_send_t *s = &s_a.sends[s_a.nsends];
    int rc = MPI_Isend(buf, (int)size, MPI_BYTE, dest, tag, s_a.ctl, &s->req);
    if (rc != MPI_SUCCESS) {
        troupe_free(buf);
        return s_mpi_err(what, "MPI_Isend", rc);
    }
    s->buf = buf;
    s_a.nsends++;
    return TROUPE_OK;
}

/* Tests the control sends; frees the finished ones. */
static troupe_status_t s_test_sends(void)
{
    for (size_t i = 0; i < s_a.nsends;) {
        int flag = 0;
        int rc = MPI_Test(&s_a.sends[i].req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return s_mpi_err("transport", "MPI_Test (control send)", rc);
        if (flag) {
            troupe_free(s_a.sends[i].buf);
            s_a.sends[i] = s_a.sends[--s_a.nsends];
        } else {
            i++;
        }
    }
    return TROUPE_OK;
}

static troupe_status_t s_post_probe_recv(void)
{
    int rc = MPI_Irecv(s_a.probe_buf, (int)sizeof s_a.probe_buf, MPI_BYTE, MPI_ANY_SOURCE,
                       S_TAG_PROBE, s_a.ctl, &s_a.probe_req);
    if (rc != MPI_SUCCESS)
        return s_mpi_err("transport", "MPI_Irecv (probe)", rc);
    s_a.probe_posted = true;
    return TROUPE_OK;
}

/* Answers PINGs with PONGs and records PONGs, up to a few per call. */
static troupe_status_t s_service_probes(void)
{
    for (int k = 0; k < 16 && s_a.probe_posted; k++) {
        int flag = 0;
        MPI_Status st;
        int rc = MPI_Test(&s_a.probe_req, &flag, &st);
        if (rc != MPI_SUCCESS)
            return s_mpi_err("transport", "MPI_Test (probe)", rc);
        if (!flag)
            break;
        s_a.probe_posted = false;
        int src = st.MPI_SOURCE;
        int64_t msg[2] = {s_a.probe_buf[0], s_a.probe_buf[1]};
        if (src >= 0 && src < s_a.size) {
            if (msg[0] == S_PING) {
                int64_t pong[2] = {S_PONG, msg[1]};
                TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT, "probe from rank %d: PONG", src);
                TROUPE_RETURN_IF_ERROR(s_send_ctl(pong, sizeof pong, src, S_TAG_PROBE, "PONG"));
            } else if (msg[0] == S_PONG) {
                s_a.last_pong_ns[src] = troupe_now_ns();
            }
        }
        TROUPE_RETURN_IF_ERROR(s_post_probe_recv());
    }
    return TROUPE_OK;
}

/* Appends "rank 1" / "ranks 1, 3" for the ranks with bad[r] to buf. */
static void s_rank_list(const bool *bad, char *buf, size_t cap)
{
    int count = 0;
    for (int r = 0; r < s_a.size; r++)
        count += bad[r];
    size_t len = (size_t)snprintf(buf, cap, "%s", count == 1 ? "rank " : "ranks ");
    int seen = 0;
    for (int r = 0; r < s_a.size && len < cap; r++)
        if (bad[r])
            len += (size_t)snprintf(buf + len, cap - len, "%s%d", seen++ ? ", " : "", r);
}

/* ---- state of a request ------------------------------------------------------------------ */

/* Gives back the slots of buckets that will not complete (any left when a request is freed: it
 * failed). */
static void s_release_slots(s_rs_t *rs)
{
    for (size_t i = 0; i < rs->nbks; i++) {
        if (rs->bks[i].slot >= 0)
            s_a.slot_busy[rs->bks[i].slot] = false;
        rs->bks[i].slot = -1;
    }
}

static void s_rs_free(s_rs_t *rs)
{
    if (rs == NULL)
        return;
    troupe_free(rs->fp_mine);
    troupe_free(rs->dg_peer);
    if (rs->fp_peer != NULL)
        for (int r = 0; r < s_a.size; r++)
            troupe_free(rs->fp_peer[r]);
    troupe_free(rs->fp_peer);
    troupe_free(rs->fp_peer_size);
    troupe_free(rs->fp_recv);
    troupe_free(rs->fp_state);
    /* Buckets still in flight belong to a failed request: MPI may still write into their
     * buffers if it is ever progressed again, so those buffers are left to MPI (leaked: only
     * on failures, which fail the cluster) rather than reused or freed. */
    for (int i = 0; i < rs->nfl; i++) {
        const s_flight_t *f = &rs->fl[i];
        if (f->slot >= 0) {
            s_a.slot[f->slot] = NULL;
            s_a.slot_cap[f->slot] = 0;
            s_a.slot_busy[f->slot] = false;
            rs->bks[f->bucket].slot = -1;
        }
        if (f->tmp >= 0) {
            s_a.rtmp[f->tmp] = NULL;
            s_a.rtmp_cap[f->tmp] = 0;
            s_a.rtmp_busy[f->tmp] = false;
        }
    }
    s_release_slots(rs);
    troupe__shm_coll_free(&rs->shm);
    troupe_free(rs->segs);
    troupe_free(rs->bks);
    troupe_free(rs->p2p);
    troupe_free(rs->fin_msg);
    troupe_free(rs);
}

static bool s_is_p2p(const troupe__req_t *r)
{
    return r->kind == TROUPE__REQ_SEND || r->kind == TROUPE__REQ_RECV;
}

/* 0: the collectives; 1 + 2p: sends to p; 2 + 2p: receives from p. */
static size_t s_lane(const troupe__req_t *r)
{
    if (!s_is_p2p(r))
        return 0;
    return 1 + 2 * (size_t)r->peer + (r->kind == TROUPE__REQ_RECV);
}

/* ---- fingerprints ------------------------------------------------------------------------ */

static bool s_involved(const troupe__req_t *r, int p)
{
    return p != s_a.rank && (!s_is_p2p(r) || p == r->peer);
}

/* Stage 1: posts the receives of the ranks' digests and sends this rank's. */
static troupe_status_t s_fp_start(troupe__req_t *r, s_rs_t *rs)
{
    rs->dg_peer = troupe_calloc((size_t)s_a.size, sizeof *rs->dg_peer);
    rs->fp_peer = troupe_calloc((size_t)s_a.size, sizeof *rs->fp_peer);
    rs->fp_peer_size = troupe_calloc((size_t)s_a.size, sizeof *rs->fp_peer_size);
    rs->fp_recv = troupe_calloc((size_t)s_a.size, sizeof *rs->fp_recv);
    rs->fp_state = troupe_calloc((size_t)s_a.size, 1);
    if (rs->dg_peer == NULL || rs->fp_peer == NULL || rs->fp_peer_size == NULL ||
        rs->fp_recv == NULL || rs->fp_state == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
    troupe__fp_digest(r, &rs->dg_mine);
    rs->dg_mine.flat = s_flat(r, &rs->span, &rs->span_bytes) ? 1 : 0;
    if (rs->dg_mine.flat && r->kind == TROUPE__REQ_ALLREDUCE && troupe__shm_coll_on() &&
        !troupe__shm_find(rs->span, (size_t)rs->span_bytes, &rs->dg_mine.shm))
        memset(&rs->dg_mine.shm, 0, sizeof rs->dg_mine.shm);
    rs->fp_stage = 1;
    /* Point-to-point: the sender's digest travels on S2R, the receiver's on R2S, so the
     * channel A->B never mixes with B->A. */
    int send_tag = S_TAG_FP_COLL, recv_tag = S_TAG_FP_COLL;
    if (r->kind == TROUPE__REQ_SEND) {
        send_tag = S_TAG_FP_S2R;
        recv_tag = S_TAG_FP_R2S;
    } else if (r->kind == TROUPE__REQ_RECV) {
        send_tag = S_TAG_FP_R2S;
        recv_tag = S_TAG_FP_S2R;
    }
    rs->fp_tag = recv_tag;
    for (int p = 0; p < s_a.size; p++) {
        rs->fp_recv[p] = MPI_REQUEST_NULL;
        if (!s_involved(r, p)) {
            rs->fp_state[p] = 2;
            continue;
        }
        int rc = MPI_Irecv(&rs->dg_peer[p], (int)sizeof rs->dg_peer[p], MPI_BYTE, p, recv_tag,
                           s_a.ctl, &rs->fp_recv[p]);
        if (rc != MPI_SUCCESS)
            return s_mpi_err(rs->what, "MPI_Irecv (fingerprint)", rc);
        rs->fp_state[p] = 1;
        TROUPE_RETURN_IF_ERROR(s_send_ctl(&rs->dg_mine, sizeof rs->dg_mine, p, send_tag, rs->what));
    }
    return TROUPE_OK;
}

/* Stage 2: the digests differed somewhere (every rank sees every digest, so all ranks get
 * here together): send the full fingerprint to the ranks involved, receive theirs. */
static troupe_status_t s_fp_stage2(troupe__req_t *r, s_rs_t *rs)
{
    rs->fp_stage = 2;
    rs->fp_size = troupe__fp_size(r->n);
    rs->fp_mine = troupe_malloc(rs->fp_size);
    if (rs->fp_mine == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
    troupe__fp_encode(r, rs->fp_mine);
    int send_tag = (r->kind == TROUPE__REQ_SEND   ? S_TAG_FP_S2R
                    : r->kind == TROUPE__REQ_RECV ? S_TAG_FP_R2S
                                                  : S_TAG_FP_COLL) +
                   S_TAG_FULL;
    for (int p = 0; p < s_a.size; p++) {
        if (!s_involved(r, p))
            continue;
        rs->fp_state[p] = 0;
        TROUPE_RETURN_IF_ERROR(s_send_ctl(rs->fp_mine, rs->fp_size, p, send_tag, rs->what));
    }
    return TROUPE_OK;
}

/* Receives what arrived; *done once the fingerprints are known to agree (*done with an
 * error status when they do not). */
static troupe_status_t s_fp_check(troupe__req_t *r, s_rs_t *rs);

static troupe_status_t s_fp_poll(troupe__req_t *r, s_rs_t *rs, bool *done)
{
    *done = false;
    bool all = true;
    for (int p = 0; p < s_a.size; p++) {
        if (rs->fp_state[p] == 0) {
            /* stage 2: sizes may differ, so probe first */
            int flag = 0;
            MPI_Message m;
            MPI_Status st;
            int rc = MPI_Improbe(p, rs->fp_tag + S_TAG_FULL, s_a.ctl, &flag, &m, &st);
            if (rc != MPI_SUCCESS)
                return s_mpi_err(rs->what, "MPI_Improbe (fingerprint)", rc);
            if (flag) {
                int count = 0;
                MPI_Get_count(&st, MPI_BYTE, &count);
                rs->fp_peer[p] = troupe_malloc(count > 0 ? (size_t)count : 1);
                if (rs->fp_peer[p] == NULL)
                    return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
                rs->fp_peer_size[p] = (size_t)(count > 0 ? count : 0);
                rc = MPI_Imrecv(rs->fp_peer[p], count, MPI_BYTE, &m, &rs->fp_recv[p]);
                if (rc != MPI_SUCCESS)
                    return s_mpi_err(rs->what, "MPI_Imrecv (fingerprint)", rc);
                rs->fp_state[p] = 1;
            }
        }
        if (rs->fp_state[p] == 1) {
            int flag = 0;
            MPI_Status st;
            int rc = MPI_Test(&rs->fp_recv[p], &flag, &st);
            if (rc != MPI_SUCCESS)
                return s_mpi_err(rs->what, "MPI_Test (fingerprint)", rc);
            if (flag) {
                int count = 0;
                MPI_Get_count(&st, MPI_BYTE, &count);
                if (rs->fp_stage == 2)
                    rs->fp_peer_size[p] = (size_t)(count > 0 ? count : 0);
                else if (count != (int)sizeof(troupe__fp_digest_t))
                    return troupe__error(TROUPE_TRANSPORT_ERROR,
                                         "%s: fingerprint digest from rank %d has %d bytes, "
                                         "expected %zu",
                                         rs->what, p, count, sizeof(troupe__fp_digest_t));
                rs->fp_state[p] = 2;
            }
        }
        if (rs->fp_state[p] != 2)
            all = false;
    }
    if (!all)
        return TROUPE_OK;
    if (rs->fp_stage == 2) {
        *done = true;
        return s_fp_check(r, rs);
    }
    for (int p = 0; p < s_a.size; p++) {
        if (!s_involved(r, p))
            continue;
        if (rs->dg_peer[p].magic != TROUPE__FP_MAGIC)
            return troupe__error(TROUPE_TRANSPORT_ERROR,
                                 "%s: fingerprint digest from rank %d has a bad magic", rs->what,
                                 p);
        if (!troupe__fp_digest_equal(&rs->dg_peer[p], &rs->dg_mine))
            return s_fp_stage2(r, rs);
    }
    rs->all_flat = rs->dg_mine.flat != 0;
    rs->use_shm = rs->all_flat && rs->dg_mine.shm.id != 0 && troupe__shm_coll_on();
    for (int p = 0; p < s_a.size; p++) {
        if (s_involved(r, p) && rs->dg_peer[p].flat == 0)
            rs->all_flat = false;
        if (s_involved(r, p) && rs->dg_peer[p].shm.id == 0)
            rs->use_shm = false;
    }
    rs->use_shm = rs->use_shm && rs->all_flat;
    *done = true;
    return TROUPE_OK;
}

static const void *s_fp_of(s_rs_t *rs, int p)
{
    return p == s_a.rank ? rs->fp_mine : rs->fp_peer[p];
}

/* Every fingerprint is in: checks framing, then compares. */
static troupe_status_t s_fp_check(troupe__req_t *r, s_rs_t *rs)
{
    for (int p = 0; p < s_a.size; p++) {
        if (p == s_a.rank || rs->fp_peer[p] == NULL)
            continue;
        troupe_status_t st = troupe__fp_check_frame(rs->fp_peer[p], rs->fp_peer_size[p], p);
        if (st != TROUPE_OK)
            return troupe__error(TROUPE_TRANSPORT_ERROR, "%s: %s", rs->what, troupe_last_error());
    }
    if (s_is_p2p(r)) {
        int lo = s_a.rank < r->peer ? s_a.rank : r->peer;
        int hi = s_a.rank < r->peer ? r->peer : s_a.rank;
        return troupe__fp_compare(rs->what, s_fp_of(rs, lo), lo, s_fp_of(rs, hi), hi);
    }
    for (int p = 1; p < s_a.size; p++)
        TROUPE_RETURN_IF_ERROR(troupe__fp_compare(rs->what, s_fp_of(rs, 0), 0, s_fp_of(rs, p), p));
    return TROUPE_OK;
}

/* ---- collective data --------------------------------------------------------------------- */

static troupe_status_t s_add_seg(s_rs_t *rs, size_t t, int64_t off, int64_t count)
{
    if (rs->nsegs == rs->segs_cap) {
        size_t cap = rs->segs_cap ? 2 * rs->segs_cap : 16;
        s_seg_t *p = troupe_realloc(rs->segs, cap * sizeof *p);
        if (p == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
        rs->segs = p;
        rs->segs_cap = cap;
    }
    rs->segs[rs->nsegs++] = (s_seg_t){t, off, count};
    return TROUPE_OK;
}

static troupe_status_t s_open_bucket(s_rs_t *rs, s_cls_t cls)
{
    if (rs->nbks == rs->bks_cap) {
        size_t cap = rs->bks_cap ? 2 * rs->bks_cap : 8;
        s_bucket_t *p = troupe_realloc(rs->bks, cap * sizeof *p);
        if (p == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
        rs->bks = p;
        rs->bks_cap = cap;
    }
    rs->bks[rs->nbks++] = (s_bucket_t){cls, rs->nsegs, 0, 0, false, -1};
    return TROUPE_OK;
}

static void *s_seg_ptr(const troupe__req_t *r, const s_seg_t *s)
{
    return (char *)r->tensors[s->t].data + s->off * (int64_t)s_unit_bytes(r, s->t);
}

/* True when bucket b's segments are all of its own type and lie back to back in this rank's
 * memory, in order (one segment always does): then the bucket is reduced in place, as one
 * span, without staging copies, as with PyTorch DDP's gradients that are views of a flat
 * bucket (a routine's per-stream arrays are packed that way: actors/routine.h). The plan,
 * which every rank makes alike, does not depend on it; only this rank's copies do. */
static bool s_contiguous(const troupe__req_t *r, const s_rs_t *rs, const s_bucket_t *b)
{
    const char *end = NULL;
    for (size_t k = 0; k < b->nseg; k++) {
        const s_seg_t *s = &rs->segs[b->seg0 + k];
        if (!s_native(b->cls, r->tensors[s->t].prec))
            return false;
        const char *p = s_seg_ptr(r, s);
        if (end != NULL && p != end)
            return false;
        end = p + s->count * (int64_t)s_unit_bytes(r, s->t);
    }
    return true;
}

static void s_close_bucket(troupe__req_t *r, s_rs_t *rs)
{
    s_bucket_t *b = &rs->bks[rs->nbks - 1];
    b->nseg = rs->nsegs - b->seg0;
    b->in_place = s_contiguous(r, rs, b);
}

/* True when tensor j gets buckets of its own: larger than a bucket (cap units), or of at least
 * TROUPE_COLL_INPLACE_BYTES in its own type (reduced in place, no staging copies). */
static bool s_own_buckets(const troupe__req_t *r, size_t j, s_cls_t cls, int64_t cap)
{
    int64_t u = s_units(r, j);
    return u > cap || (s_native(cls, r->tensors[j].prec) &&
                       u * (int64_t)s_cls_size(cls) >= TROUPE_COLL_INPLACE_BYTES);
}

/* Plans class cls (first seen at tensor i): first the tensors with buckets of their own, slice
 * by slice, then the others packed in order into shared buckets of at most cap units. */
static troupe_status_t s_plan_class(troupe__req_t *r, s_rs_t *rs, size_t i, s_cls_t cls,
                                    int64_t cap)
{
    for (size_t j = i; j < r->n; j++) {
        int64_t u = s_units(r, j);
        if (s_cls_of(r, r->tensors[j].prec) != cls || u == 0 || !s_own_buckets(r, j, cls, cap))
            continue;
        for (int64_t off = 0; off < u; off += cap) {
            int64_t c = u - off < cap ? u - off : cap;
            TROUPE_RETURN_IF_ERROR(s_open_bucket(rs, cls));
            TROUPE_RETURN_IF_ERROR(s_add_seg(rs, j, off, c));
            rs->bks[rs->nbks - 1].units = c;
            s_close_bucket(r, rs);
        }
    }
    bool open = false;
    for (size_t j = i; j < r->n; j++) {
        int64_t u = s_units(r, j);
        if (s_cls_of(r, r->tensors[j].prec) != cls || u == 0 || s_own_buckets(r, j, cls, cap))
            continue;
        if (open && rs->bks[rs->nbks - 1].units + u > cap) {
            s_close_bucket(r, rs);
            open = false;
        }
        if (!open) {
            TROUPE_RETURN_IF_ERROR(s_open_bucket(rs, cls));
            open = true;
        }
        TROUPE_RETURN_IF_ERROR(s_add_seg(rs, j, 0, u));
        rs->bks[rs->nbks - 1].units += u;
    }
    if (open)
        s_close_bucket(r, rs);
    return TROUPE_OK;
}

/* Units of class cls per bucket: the fingerprinted fusion size, within the message limit. */
static int64_t s_cap(const troupe__req_t *r, s_cls_t cls)
{
    int64_t cap = (int64_t)((size_t)r->fusion_bytes / s_cls_size(cls));
    int64_t max_cap = S_MAX_MSG_BYTES / (int64_t)s_cls_size(cls);
    if (cap > max_cap)
        cap = max_cap;
    return cap < 1 ? 1 : cap;
}

/* The flat plan (every rank's tensors form one span, rs->all_flat): the span cut in request
 * order into buckets of cap units, each reduced in place. */
static troupe_status_t s_plan_flat(troupe__req_t *r, s_rs_t *rs)
{
    s_cls_t cls = S_NCLS;
    for (size_t j = 0; j < r->n && cls == S_NCLS; j++)
        if (s_units(r, j) > 0)
            cls = s_cls_of(r, r->tensors[j].prec);
    if (cls == S_NCLS)
        return TROUPE_OK; /* nothing to move */
    int64_t cap = s_cap(r, cls), room = 0;
    for (size_t j = 0; j < r->n; j++) {
        int64_t u = s_units(r, j);
        for (int64_t off = 0; off < u;) {
            if (room == 0) {
                if (rs->nbks > 0)
                    s_close_bucket(r, rs);
                TROUPE_RETURN_IF_ERROR(s_open_bucket(rs, cls));
                room = cap;
            }
            int64_t c = u - off < room ? u - off : room;
            TROUPE_RETURN_IF_ERROR(s_add_seg(rs, j, off, c));
            rs->bks[rs->nbks - 1].units += c;
            off += c;
            room -= c;
        }
    }
    if (rs->nbks > 0)
        s_close_bucket(r, rs);
    return TROUPE_OK;
}

/* Plans the buckets. Every rank plans alike from the same (fingerprinted) request and the
 * layout flags all ranks exchanged: when every rank's tensors form one span, in request order
 * (s_plan_flat); else class by class, in order of first appearance (s_plan_class). */
static troupe_status_t s_plan(troupe__req_t *r, s_rs_t *rs)
{
    rs->planned = true;
    if (rs->all_flat)
        return s_plan_flat(r, rs);
    bool seen[S_NCLS] = {false};
    for (size_t i = 0; i < r->n; i++) {
        s_cls_t cls = s_cls_of(r, r->tensors[i].prec);
        if (seen[cls])
            continue;
        seen[cls] = true;
        TROUPE_RETURN_IF_ERROR(s_plan_class(r, rs, i, cls, s_cap(r, cls)));
    }
    return TROUPE_OK;
}

/* Caller's memory -> staging (widening half/bfloat16/fp8 to single). */
static void s_pack(const troupe__req_t *r, const s_rs_t *rs, const s_bucket_t *b, void *slot)
{
    char *dst = slot;
    size_t cs = s_cls_size(b->cls);
    for (size_t k = 0; k < b->nseg; k++) {
        const s_seg_t *s = &rs->segs[b->seg0 + k];
        const void *src = s_seg_ptr(r, s);
        troupe_prec_t p = r->tensors[s->t].prec;
        float *f = (float *)(void *)dst;
        if (b->cls == S_CLS_BF16W) {
            troupe__bf16_pack((uint16_t *)(void *)dst, src, s->count);
        } else if (b->cls != S_CLS_F32 || p == TROUPE_PREC_SINGLE) {
            memcpy(dst, src, (size_t)s->count * cs);
        } else if (p == TROUPE_PREC_HALF) {
            const uint16_t *h = src;
            for (int64_t i = 0; i < s->count; i++)
                f[i] = troupe_half_to_single(h[i]);
        } else if (p == TROUPE_PREC_BFLOAT16) { /* reduce.c: bit-exact, vectorized */
            troupe__bf16_unpack(f, src, s->count, 1);
        } else { /* fp8 */
            const uint8_t *h = src;
            for (int64_t i = 0; i < s->count; i++)
                f[i] = troupe_fp8_to_single(h[i]);
        }
        dst += (size_t)s->count * cs;
    }
}

/* The reduction type of class cls (reduce.c). */
static troupe__red_type_t s_red_type(s_cls_t cls)
{
    static const troupe__red_type_t k_type[S_NCLS] = {
        [S_CLS_F32] = TROUPE__RED_F32,    [S_CLS_F64] = TROUPE__RED_F64,
        [S_CLS_I32] = TROUPE__RED_I32,    [S_CLS_I64] = TROUPE__RED_I64,
        [S_CLS_U32] = TROUPE__RED_U32,    [S_CLS_U64] = TROUPE__RED_U64,
        [S_CLS_BF16W] = TROUPE__RED_BF16, [S_CLS_BYTES] = TROUPE__RED_NONE};
    return k_type[cls];
}

/* Divides `count` values of class cls at p by the number of ranks (mean). */
static void s_divide(s_cls_t cls, void *p, int64_t count)
{
    troupe__divide_by(s_red_type(cls), p, count, s_a.size);
}

/* Staging -> caller's memory (mean divided once, rounded back to the precision once, RNE). */
static void s_unpack(const troupe__req_t *r, const s_rs_t *rs, const s_bucket_t *b, void *slot)
{
    bool mean = r->kind == TROUPE__REQ_ALLREDUCE && r->op == TROUPE_REDUCE_MEAN;
    if (mean)
        s_divide(b->cls, slot, b->units);
    const char *src = slot;
    size_t cs = s_cls_size(b->cls);
    for (size_t k = 0; k < b->nseg; k++) {
        const s_seg_t *s = &rs->segs[b->seg0 + k];
        void *dst = s_seg_ptr(r, s);
        troupe_prec_t p = r->tensors[s->t].prec;
        const float *f = (const float *)(const void *)src;
        if (b->cls == S_CLS_BF16W) {
            troupe__bf16_unpack(dst, (const uint16_t *)(const void *)src, s->count,
                                mean ? s_a.size : 1);
        } else if (b->cls != S_CLS_F32 || p == TROUPE_PREC_SINGLE) {
            memcpy(dst, src, (size_t)s->count * cs);
        } else if (p == TROUPE_PREC_HALF) {
            uint16_t *h = dst;
            for (int64_t i = 0; i < s->count; i++)
                h[i] = troupe_single_to_half(f[i]);
        } else if (p == TROUPE_PREC_BFLOAT16) { /* reduce.c: bit-exact, vectorized */
            troupe__bf16_pack(dst, f, s->count);
        } else {
            uint8_t *h = dst;
            for (int64_t i = 0; i < s->count; i++)
                h[i] = troupe_single_to_fp8(f[i]);
        }
        src += (size_t)s->count * cs;
    }
}

/* Takes a free buffer of at least `bytes` among two (kept and grown: no page faults per
 * bucket). Returns its index, -1 when both are busy, -2 out of memory. */
static int s_take_buf(void **buf, size_t *cap, bool *busy, size_t bytes)
{
    for (int i = 0; i < 2; i++) {
        if (busy[i])
            continue;
        if (cap[i] < bytes) {
            troupe_free(buf[i]);
            cap[i] = 0;
            buf[i] = troupe_malloc(bytes);
            if (buf[i] == NULL)
                return -2;
            cap[i] = bytes;
        }
        busy[i] = true;
        return i;
    }
    return -1;
}

static int s_take_slot(size_t bytes)
{
    return s_take_buf(s_a.slot, s_a.slot_cap, s_a.slot_busy, bytes);
}

/* Takes a slot for bucket b and packs it (the root only, for a broadcast). Returns OK with
 * b->slot set, OK with b->slot == -1 when both slots are busy, or RESOURCE_EXHAUSTED. */
static troupe_status_t s_stage(troupe__req_t *r, s_rs_t *rs, s_bucket_t *b)
{
    int slot = s_take_slot((size_t)b->units * s_cls_size(b->cls));
    if (slot == -1)
        return TROUPE_OK;
    if (slot == -2)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                             "%s: out of memory for a staging buffer of %" PRId64 " bytes",
                             rs->what, b->units * (int64_t)s_cls_size(b->cls));
    b->slot = slot;
    troupe__stats_add_staged((uint64_t)b->units * s_cls_size(b->cls));
    if (r->kind != TROUPE__REQ_BROADCAST || s_a.rank == r->root)
        s_pack(r, rs, b, s_a.slot[slot]);
    return TROUPE_OK;
}

/* While the fingerprints travel: plans the buckets and packs the first ones, so the data
 * can move as soon as the ranks agree (the caller's memory is only read). */
static troupe_status_t s_prepack(troupe__req_t *r, s_rs_t *rs)
{
    if (rs->dg_mine.flat)
        return TROUPE_OK; /* nothing to pack; the plan waits for the others' layout flags */
    if (!rs->planned)
        TROUPE_RETURN_IF_ERROR(s_plan(r, rs));
    for (size_t i = rs->next_bk; i < rs->nbks && i < rs->next_bk + 2; i++) {
        s_bucket_t *b = &rs->bks[i];
        if (b->in_place || b->slot >= 0)
            continue;
        TROUPE_RETURN_IF_ERROR(s_stage(r, rs, b));
        if (b->slot < 0)
            break;
    }
    return TROUPE_OK;
}

/* ---- ring allreduce ------------------------------------------------------------------------
 * An allreduce bucket of at least S_RING_MIN_BYTES is reduced by troupe's own ring over
 * point-to-point messages (Patarasuk and Yuan's bandwidth-optimal allreduce, as in Baidu's
 * ring-allreduce, Horovod and NCCL): the bucket is cut into `size` chunks; in p-1
 * reduce-scatter steps each rank sends one chunk to its right neighbour, receives another from
 * its left one and reduces it into its own copy, so that each rank ends with one chunk fully
 * reduced; in p-1 allgather steps the reduced chunks travel around the ring into every rank's
 * bucket. Each rank sends and receives 2(p-1)/p of the bucket and reduces (p-1)/p of it, in
 * parallel with the others (measurements: collective.h, Algorithms). Each chunk is summed
 * along the ring in a fixed order and copied to the others, so all ranks hold the same bits
 * and a run is reproducible for a given number of ranks. */
#define S_RING_MIN_BYTES (64 * 1024)

static bool s_use_ring(const troupe__req_t *r, const s_bucket_t *b)
{
    if (b->cls == S_CLS_BF16W) /* MPI has no bfloat16 sum: always ours, whatever the size */
        return s_a.size > 1;
    return r->kind == TROUPE__REQ_ALLREDUCE && s_a.size > 1 && b->cls != S_CLS_BYTES &&
           b->units >= s_a.size && b->units * (int64_t)s_cls_size(b->cls) >= S_RING_MIN_BYTES;
}

/* First unit of chunk c of a bucket of `units` (chunk c is [lo(c), lo(c + 1))). */
static int64_t s_chunk_lo(int64_t units, int c)
{
    return units * c / s_a.size;
}

static int s_mod(int a, int p)
{
    return ((a % p) + p) % p;
}

/* dst op= src for n values of class cls (sum for mean), vectorized (reduce.c). */
static void s_reduce(s_cls_t cls, troupe_reduce_op_t op, void *dst, const void *src, int64_t n)
{
    troupe__reduce_into(s_red_type(cls), op, dst, src, n);
}

/* Posts ring step f->ring_step of f's bucket: steps 0 .. p-2 reduce-scatter (receive into the
 * ring buffer), p-1 .. 2p-3 allgather (receive into the bucket). */
static troupe_status_t s_ring_post(s_rs_t *rs, s_flight_t *f)
{
    const s_bucket_t *b = &rs->bks[f->bucket];
    int p = s_a.size, me = s_a.rank, st = f->ring_step;
    int send_c, recv_c;
    if (st < p - 1) {
        send_c = s_mod(me - st, p);
        recv_c = s_mod(me - st - 1, p);
    } else {
        send_c = s_mod(me + 1 - (st - (p - 1)), p);
        recv_c = s_mod(me - (st - (p - 1)), p);
    }
    size_t cs = s_cls_size(b->cls);
    int64_t s_lo = s_chunk_lo(b->units, send_c), s_n = s_chunk_lo(b->units, send_c + 1) - s_lo;
    int64_t r_lo = s_chunk_lo(b->units, recv_c), r_n = s_chunk_lo(b->units, recv_c + 1) - r_lo;
    void *rbuf = st < p - 1 ? s_a.rtmp[f->tmp] : f->base + r_lo * (int64_t)cs;
    int tag = S_TAG_RING + (int)(f->bucket % S_RING_TAGS);
    MPI_Datatype type = s_cls_type(b->cls);
    int rc = MPI_Irecv(rbuf, (int)r_n, type, s_mod(me - 1, p), tag, s_a.data, &f->req);
    if (rc != MPI_SUCCESS)
        return s_mpi_err(rs->what, "MPI_Irecv (ring)", rc);
    rc = MPI_Isend(f->base + s_lo * (int64_t)cs, (int)s_n, type, s_mod(me + 1, p), tag, s_a.data,
                   &f->sreq);
    if (rc != MPI_SUCCESS)
        return s_mpi_err(rs->what, "MPI_Isend (ring)", rc);
    return TROUPE_OK;
}

/* Tests a ring bucket in flight: completes the steps that finished (reducing what a
 * reduce-scatter step received) and posts the next. *done when its last step finished. */
static troupe_status_t s_ring_test(const troupe__req_t *r, s_rs_t *rs, s_flight_t *f, bool *done,
                                   bool *progress)
{
    const s_bucket_t *b = &rs->bks[f->bucket];
    int p = s_a.size;
    for (;;) {
        int rflag = 0, sflag = 0;
        int rc = MPI_Test(&f->req, &rflag, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS)
            rc = MPI_Test(&f->sreq, &sflag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return s_mpi_err(rs->what, "MPI_Test (ring)", rc);
        if (!rflag || !sflag)
            return TROUPE_OK;
        *progress = true;
        if (f->ring_step < p - 1) {
            int c = s_mod(s_a.rank - f->ring_step - 1, p);
            int64_t lo = s_chunk_lo(b->units, c), n = s_chunk_lo(b->units, c + 1) - lo;
            s_reduce(b->cls, r->op, f->base + lo * (int64_t)s_cls_size(b->cls), s_a.rtmp[f->tmp],
                     n);
        }
        if (++f->ring_step == 2 * (p - 1)) {
            s_a.rtmp_busy[f->tmp] = false;
            f->tmp = -1;
            *done = true;
            return TROUPE_OK;
        }
        TROUPE_RETURN_IF_ERROR(s_ring_post(rs, f));
    }
}

/* Posts buckets while fewer than two are in flight. */
static troupe_status_t s_coll_post(troupe__req_t *r, s_rs_t *rs)
{
    bool bcast = r->kind == TROUPE__REQ_BROADCAST;
    while (rs->nfl < 2 && rs->next_bk < rs->nbks) {
        /* Buckets in flight finish in any order. Ring messages of buckets S_RING_TAGS apart
         * share a tag, so a bucket waits while one that far back is still in flight (the
         * steps of one bucket, and buckets of different tags, cannot be confused). */
        size_t oldest = rs->next_bk;
        for (int i = 0; i < rs->nfl; i++)
            oldest = rs->fl[i].bucket < oldest ? rs->fl[i].bucket : oldest;
        if (rs->next_bk - oldest >= S_RING_TAGS)
            break;
        s_bucket_t *b = &rs->bks[rs->next_bk];
        void *ptr;
        int slot = -1;
        if (b->in_place) {
            ptr = s_seg_ptr(r, &rs->segs[b->seg0]);
        } else {
            if (b->slot < 0)
                TROUPE_RETURN_IF_ERROR(s_stage(r, rs, b));
            if (b->slot < 0)
                break; /* both slots in flight */
            slot = b->slot;
            ptr = s_a.slot[slot];
        }
        s_flight_t *f = &rs->fl[rs->nfl];
        *f = (s_flight_t){.req = MPI_REQUEST_NULL,
                          .sreq = MPI_REQUEST_NULL,
                          .bucket = rs->next_bk,
                          .slot = slot,
                          .ring_step = -1,
                          .tmp = -1,
                          .base = ptr};
        if (s_use_ring(r, b)) {
            int64_t chunk = b->units - s_chunk_lo(b->units, s_a.size - 1); /* the largest */
            int tmp = s_take_buf(s_a.rtmp, s_a.rtmp_cap, s_a.rtmp_busy,
                                 (size_t)chunk * s_cls_size(b->cls));
            if (tmp < 0) /* -1 cannot happen: at most two flights, one buffer each */
                return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                                     "%s: out of memory for a ring buffer of %" PRId64 " bytes",
                                     rs->what, chunk * (int64_t)s_cls_size(b->cls));
            f->tmp = tmp;
            f->ring_step = 0;
            rs->next_bk++;
            rs->nfl++; /* counted now: s_rs_free gives the ring buffer back on failure */
            troupe__stats_add_ring();
            TROUPE_RETURN_IF_ERROR(s_ring_post(rs, f));
        } else {
            int rc;
            if (bcast)
                rc = MPI_Ibcast(ptr, (int)b->units, MPI_BYTE, r->root, s_a.data, &f->req);
            else
                rc = MPI_Iallreduce(MPI_IN_PLACE, ptr, (int)b->units, s_cls_type(b->cls),
                                    s_mpi_op(r->op), s_a.data, &f->req);
            if (rc != MPI_SUCCESS)
                return s_mpi_err(rs->what, bcast ? "MPI_Ibcast" : "MPI_Iallreduce", rc);
            rs->next_bk++;
            rs->nfl++;
        }
        troupe__stats_add(0, 0, 1, 0, 0);
    }
    return TROUPE_OK;
}

/* Tests the buckets in flight; unpacks the finished ones. *progress when one finished. */
static troupe_status_t s_coll_test(troupe__req_t *r, s_rs_t *rs, bool *progress)
{
    bool bcast = r->kind == TROUPE__REQ_BROADCAST;
    bool mean = !bcast && r->op == TROUPE_REDUCE_MEAN;
    for (int i = 0; i < rs->nfl;) {
        bool done = false;
        if (rs->fl[i].ring_step >= 0) {
            TROUPE_RETURN_IF_ERROR(s_ring_test(r, rs, &rs->fl[i], &done, progress));
        } else {
            int flag = 0;
            int rc = MPI_Test(&rs->fl[i].req, &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS)
                return s_mpi_err(rs->what, "MPI_Test", rc);
            done = flag != 0;
        }
        if (!done) {
            i++;
            continue;
        }
        s_flight_t f = rs->fl[i];
        s_bucket_t *b = &rs->bks[f.bucket];
        if (f.slot >= 0) {
            if (!bcast || s_a.rank != r->root)
                s_unpack(r, rs, b, s_a.slot[f.slot]);
            s_a.slot_busy[f.slot] = false;
            b->slot = -1;
        } else if (mean) {
            s_divide(b->cls, s_seg_ptr(r, &rs->segs[b->seg0]), b->units);
        }
        rs->done_bks++;
        rs->fl[i] = rs->fl[--rs->nfl];
        *progress = true;
    }
    return TROUPE_OK;
}

/* ---- point-to-point data ----------------------------------------------------------------- */

static troupe_status_t s_p2p_post(troupe__req_t *r, s_rs_t *rs)
{
    int64_t bytes = r->bytes;
    int n = (int)((bytes + S_MAX_MSG_BYTES - 1) / S_MAX_MSG_BYTES);
    if (n == 0)
        return TROUPE_OK;
    rs->p2p = troupe_calloc((size_t)n, sizeof *rs->p2p);
    if (rs->p2p == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
    char *base = r->tensors[0].data;
    for (int i = 0; i < n; i++) {
        int64_t off = (int64_t)i * S_MAX_MSG_BYTES;
        int c = (int)(bytes - off < S_MAX_MSG_BYTES ? bytes - off : S_MAX_MSG_BYTES);
        int rc = r->kind == TROUPE__REQ_SEND ? MPI_Isend(base + off, c, MPI_BYTE, r->peer,
                                                         S_TAG_DATA_P2P, s_a.data, &rs->p2p[i])
                                             : MPI_Irecv(base + off, c, MPI_BYTE, r->peer,
                                                         S_TAG_DATA_P2P, s_a.data, &rs->p2p[i]);
        if (rc != MPI_SUCCESS)
            return s_mpi_err(rs->what, r->kind == TROUPE__REQ_SEND ? "MPI_Isend" : "MPI_Irecv", rc);
        rs->np2p++;
    }
    return TROUPE_OK;
}

static troupe_status_t s_p2p_test(s_rs_t *rs, bool *progress, bool *all)
{
    *all = true;
    for (int i = 0; i < rs->np2p; i++) {
        if (rs->p2p[i] == MPI_REQUEST_NULL)
            continue;
        int flag = 0;
        int rc = MPI_Test(&rs->p2p[i], &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return s_mpi_err(rs->what, "MPI_Test", rc);
        if (flag)
            *progress = true; /* MPI_Test set the request to MPI_REQUEST_NULL */
        else
            *all = false;
    }
    return TROUPE_OK;
}

/* ---- one request ------------------------------------------------------------------------- */

static troupe_status_t s_start_probe(troupe__req_t *r, s_rs_t *rs, int64_t now)
{
    rs->probing = true;
    rs->probe_t0 = now;
    rs->probe_end = now + S_PROBE_WINDOW_NS;
    int64_t ping[2] = {S_PING, now};
    TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT,
               "%s: no progress for %" PRId64 " s; probing the ranks involved", rs->what,
               troupe_config_timeout_s());
    for (int p = 0; p < s_a.size; p++) {
        if (p == s_a.rank || (s_is_p2p(r) && p != r->peer))
            continue;
        TROUPE_RETURN_IF_ERROR(s_send_ctl(ping, sizeof ping, p, S_TAG_PROBE, "PING"));
    }
    return TROUPE_OK;
}

/* The probe window closed: names the ranks that did not answer. */
static troupe_status_t s_probe_verdict(troupe__req_t *r, s_rs_t *rs)
{
    bool bad[s_a.size];
    int nbad = 0;
    for (int p = 0; p < s_a.size; p++) {
        bad[p] =
            p != s_a.rank && (!s_is_p2p(r) || p == r->peer) && s_a.last_pong_ns[p] < rs->probe_t0;
        nbad += bad[p];
    }
    if (nbad == 0)
        return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                             "%s: data made no progress within %" PRId64
                             " s although every rank answered a liveness probe (stuck in MPI?)",
                             rs->what, troupe_config_timeout_s());
    char ranks[256];
    s_rank_list(bad, ranks, sizeof ranks);
    return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                         "%s: %s did not answer within %" PRId64
                         " s (dead or stuck): data made no progress and a liveness probe got no "
                         "answer",
                         rs->what, ranks, troupe_config_timeout_s());
}

static void s_log_done(troupe__req_t *r, s_rs_t *rs)
{
    int64_t now = troupe_now_ns();
    char shm[128] = "";
    if (rs->use_shm) {
        const troupe__shm_coll_t *c = &rs->shm;
        snprintf(shm, sizeof shm,
                 " (shared memory: arrivals %.1f us, reduce %.1f us, departures %.1f us)",
                 (double)(c->t_arrived_ns - c->t_begin_ns) / 1e3,
                 (double)(c->t_reduced_ns - c->t_arrived_ns) / 1e3,
                 (double)(c->t_done_ns - c->t_reduced_ns) / 1e3);
    }
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT,
               "%s: %zu tensors, %" PRId64 " bytes, %zu buckets, %.1f us (fingerprints %.1f us, "
               "queued %.1f us before)%s",
               rs->what, r->n, r->bytes, rs->nbks, (double)(now - rs->t_start_ns) / 1e3,
               (double)(rs->t_data_ns - rs->t_start_ns) / 1e3,
               (double)(rs->t_start_ns - r->submitted_ns) / 1e3, shm);
}

/* Begins reducing r's span through shared memory (every rank's digest located its span). */
static troupe_status_t s_shm_begin(troupe__req_t *r, s_rs_t *rs)
{
    troupe__shm_ref_t refs[s_a.size];
    for (int p = 0; p < s_a.size; p++)
        refs[p] = p == s_a.rank ? rs->dg_mine.shm : rs->dg_peer[p].shm;
    s_cls_t cls = S_NCLS;
    for (size_t j = 0; j < r->n && cls == S_NCLS; j++)
        if (s_units(r, j) > 0)
            cls = s_cls_of(r, r->tensors[j].prec);
    size_t ub = s_cls_size(cls);
    return troupe__shm_coll_begin(&rs->shm, rs->what, r->seq + 1, refs, (void *)rs->span,
                                  rs->span_bytes / (int64_t)ub, ub, s_red_type(cls), r->op);
}

/* Advances r; on failure returns its status (the message recorded) and whether MPI broke. */
static troupe_status_t s_step(troupe__req_t *r, s_rs_t *rs, bool *broken)
{
    int64_t now = troupe_now_ns();
    *broken = true;
    if (rs->phase == S_PH_INIT) {
        rs->t_start_ns = now;
        rs->deadline_ns = now + s_timeout_ns();
        rs->phase = S_PH_FP;
        TROUPE_RETURN_IF_ERROR(s_fp_start(r, rs));
    }
    if (rs->phase == S_PH_FP) {
        bool agreed = false;
        troupe_status_t st = s_fp_poll(r, rs, &agreed);
        if (st != TROUPE_OK) {
            *broken = st != TROUPE_FAILED_PRECONDITION;
            return st;
        }
        if (!agreed && !s_is_p2p(r))
            TROUPE_RETURN_IF_ERROR(s_prepack(r, rs));
        if (!agreed) {
            if (troupe_now_ns() < rs->deadline_ns)
                return TROUPE_OK;
            bool bad[s_a.size];
            for (int p = 0; p < s_a.size; p++)
                bad[p] = rs->fp_state[p] != 2;
            char ranks[256];
            s_rank_list(bad, ranks, sizeof ranks);
            return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                                 "%s: %s did not answer within %" PRId64 " s (dead or stuck)",
                                 rs->what, ranks, troupe_config_timeout_s());
        }
        rs->phase = S_PH_DATA;
        rs->t_data_ns = troupe_now_ns();
        rs->deadline_ns = rs->t_data_ns + s_timeout_ns();
        if (s_is_p2p(r))
            TROUPE_RETURN_IF_ERROR(s_p2p_post(r, rs));
        else if (rs->use_shm)
            TROUPE_RETURN_IF_ERROR(s_shm_begin(r, rs));
        else if (!rs->planned)
            TROUPE_RETURN_IF_ERROR(s_plan(r, rs));
    }
    bool progress = false, all = false;
    if (rs->use_shm) {
        TROUPE_RETURN_IF_ERROR(troupe__shm_coll_test(&rs->shm, &progress));
        all = rs->shm.state == TROUPE__SHM_DONE;
        if (rs->shm.state == TROUPE__SHM_FALLBACK) { /* on every rank alike: the MPI path */
            rs->use_shm = false;
            TROUPE_RETURN_IF_ERROR(s_plan(r, rs));
        }
    }
    if (s_is_p2p(r)) {
        TROUPE_RETURN_IF_ERROR(s_p2p_test(rs, &progress, &all));
    } else if (!rs->use_shm) {
        TROUPE_RETURN_IF_ERROR(s_coll_test(r, rs, &progress));
        TROUPE_RETURN_IF_ERROR(s_coll_post(r, rs));
        all = rs->done_bks == rs->nbks;
    }
    now = troupe_now_ns();
    if (all) {
        s_log_done(r, rs);
        s_finish(r, TROUPE_OK, NULL);
        return TROUPE_OK;
    }
    if (progress) {
        rs->deadline_ns = now + s_timeout_ns();
        rs->probing = false;
    } else if (!rs->probing && now >= rs->deadline_ns) {
        TROUPE_RETURN_IF_ERROR(s_start_probe(r, rs, now));
    } else if (rs->probing && now >= rs->probe_end) {
        return s_probe_verdict(r, rs);
    }
    return TROUPE_OK;
}

/* ---- the loop ---------------------------------------------------------------------------- */

/* Completes and frees the finished requests (after this iteration's MPI calls). */
static void s_reap(void)
{
    troupe__req_t **pp = &s_a.head;
    while (*pp != NULL) {
        troupe__req_t *r = *pp;
        s_rs_t *rs = r->actor_state;
        if (!rs->finished) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        r->next = NULL;
        r->actor_state = NULL;
        troupe_status_t st = rs->fin;
        char *msg = rs->fin_msg;
        rs->fin_msg = NULL;
        s_rs_free(rs);
        troupe__req_finish(&r, st, msg);
        troupe_free(msg);
    }
}

static void s_fail_all(troupe_status_t st, const char *msg)
{
    for (troupe__req_t *r = s_a.head; r != NULL; r = r->next)
        s_finish(r, st, msg);
}

/* How often (loop turns) a busy actor answers probes, reaps control sends and yields the CPU:
 * not every turn, since each costs a few percent of a large allreduce's bandwidth. */
#define S_SERVICE_EVERY 16
#define S_YIELD_EVERY 32
/* A request whose peers have not sent their fingerprints for S_PATIENT_NS is waiting for a
 * slower rank, not for bytes to move: the actor thread then naps S_NAP_NS between turns
 * instead of spinning, so on a machine with fewer cores than busy threads the slower rank's
 * compute gets the core (measured on 2 cores: the spinning actor took a third of a rank's CPU
 * time). A helping thread (troupe__transport_progress: a stream or host thread blocked on the
 * collective, with nothing else to run) yields the core on every turn instead: a nap, rounded
 * up by the kernel's timer slack, made a 2-rank training step about 7% slower (bench_train's
 * child, alternated runs) by answering late when the slower rank arrived. The data phase
 * always spins: libnbc and the shared-memory BTL progress only inside MPI calls. */
#define S_PATIENT_NS (100 * 1000LL)
#define S_NAP_NS (50 * 1000L)
#define S_HELPER_SPIN_NS (2 * 1000 * 1000LL)

static void s_iteration(unsigned turn)
{
    char cmsg[1024];
    if (troupe__cluster_is_failed()) {
        troupe_status_t cst = troupe__cluster_failure(cmsg, sizeof cmsg);
        s_fail_all(cst, cmsg);
        s_reap();
        return;
    }
    memset(s_a.lane_busy, 0, 1 + 2 * (size_t)s_a.size);
    bool finished = false;
    s_a.waiting_on_peers = s_a.head != NULL;
    s_a.waiting_since_ns = 0;
    int64_t patient = troupe_now_ns() - S_PATIENT_NS;
    for (troupe__req_t *r = s_a.head; r != NULL; r = r->next) {
        s_rs_t *rs = r->actor_state;
        if (rs->finished)
            continue;
        if (rs->phase != S_PH_FP || rs->t_start_ns > patient)
            s_a.waiting_on_peers = false;
        if (rs->t_start_ns > s_a.waiting_since_ns)
            s_a.waiting_since_ns = rs->t_start_ns;
        size_t lane = s_lane(r);
        if (s_a.lane_busy[lane])
            continue;
        s_a.lane_busy[lane] = 1;
        if (troupe__cluster_is_failed()) {
            troupe_status_t cst = troupe__cluster_failure(cmsg, sizeof cmsg);
            s_finish(r, cst, cmsg);
            continue;
        }
        bool broken = false;
        troupe_status_t st = s_step(r, rs, &broken);
        if (st != TROUPE_OK)
            s_fail(r, st, broken);
        finished |= rs->finished;
    }
    if (!s_a.broken && !troupe__cluster_is_failed() && (turn % S_SERVICE_EVERY == 0 || finished)) {
        troupe_status_t st = s_service_probes();
        if (st == TROUPE_OK)
            st = s_test_sends();
        if (st != TROUPE_OK) {
            troupe__cluster_fail(st, troupe_last_error(), true);
            s_a.broken = true;
        }
    }
    if (troupe__cluster_is_failed()) {
        troupe_status_t cst = troupe__cluster_failure(cmsg, sizeof cmsg);
        s_fail_all(cst, cmsg);
    }
    s_reap();
}

static troupe_status_t s_new_state(troupe__req_t *r)
{
    s_rs_t *rs = troupe_calloc(1, sizeof *rs);
    if (rs == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "transport: out of memory");
    const char *k = troupe__req_kind_name(r->kind);
    if (r->kind == TROUPE__REQ_SEND)
        snprintf(rs->what, sizeof rs->what, "send #%" PRIu64 " to rank %d", r->seq, r->peer);
    else if (r->kind == TROUPE__REQ_RECV)
        snprintf(rs->what, sizeof rs->what, "recv #%" PRIu64 " from rank %d", r->seq, r->peer);
    else
        snprintf(rs->what, sizeof rs->what, "%s #%" PRIu64, k, r->seq);
    r->actor_state = rs;
    return TROUPE_OK;
}

/* At stop on a healthy cluster: withdraws the probe receive, lets small sends finish. */
static void s_cleanup_mpi(void)
{
    if (s_a.broken || troupe__cluster_failure(NULL, 0) == TROUPE_DEADLINE_EXCEEDED ||
        troupe__cluster_failure(NULL, 0) == TROUPE_TRANSPORT_ERROR)
        return;
    int64_t end = troupe_now_ns() + S_DRAIN_NS;
    if (s_a.probe_posted) {
        MPI_Cancel(&s_a.probe_req);
        int flag = 0;
        while (!flag && troupe_now_ns() < end)
            if (MPI_Test(&s_a.probe_req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                break;
        s_a.probe_posted = false;
    }
    while (s_a.nsends > 0 && troupe_now_ns() < end) {
        if (s_test_sends() != TROUPE_OK)
            break;
        sched_yield();
    }
    if (s_a.nsends > 0)
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT,
                   "transport: %zu control sends did not complete at finalize", s_a.nsends);
}

/* Takes the mailbox's requests (mu held). */
static troupe__req_t *s_take_inbox(void)
{
    troupe__req_t *in = s_a.in_head;
    s_a.in_head = s_a.in_tail = NULL;
    return in;
}

/* Appends new requests to the active list, in issue order (engine owner). */
static void s_admit(troupe__req_t *in)
{
    troupe__req_t **tail = &s_a.head;
    while (*tail != NULL)
        tail = &(*tail)->next;
    while (in != NULL) {
        troupe__req_t *r = in;
        in = in->next;
        r->next = NULL;
        if (s_new_state(r) != TROUPE_OK) {
            troupe__req_finish(&r, TROUPE_RESOURCE_EXHAUSTED, troupe_last_error());
            continue;
        }
        *tail = r;
        tail = &r->next;
    }
}

/* Between two turns of the engine: while only slower ranks are awaited, the actor thread naps
 * and a helping thread yields for S_HELPER_SPIN_NS more, then naps too (a rank seconds behind,
 * evaluating or checkpointing, must not cost a core); else yield now and then. */
static void s_pause(bool helping)
{
    if (s_a.waiting_on_peers && helping &&
        troupe_now_ns() - s_a.waiting_since_ns < S_PATIENT_NS + S_HELPER_SPIN_NS) {
        sched_yield();
    } else if (s_a.waiting_on_peers) {
        struct timespec nap = {0, S_NAP_NS};
        nanosleep(&nap, NULL);
    } else if (s_a.head != NULL && s_a.turn % S_YIELD_EVERY == 0) {
        sched_yield();
    }
}

static void *s_actor_main(void *arg)
{
    (void)arg;
    troupe_log_set_thread_tag("transport");
    troupe_status_t st = s_post_probe_recv();
    if (st != TROUPE_OK) {
        troupe__cluster_fail(st, troupe_last_error(), true);
        s_a.broken = true;
    }
    for (;;) {
        pthread_mutex_lock(&s_a.mu);
        while (s_a.helping) { /* a waiting thread drives the engine */
            s_a.sleeping = true;
            pthread_cond_wait(&s_a.cv, &s_a.mu);
            s_a.sleeping = false;
        }
        troupe__req_t *in = s_take_inbox();
        bool abort_now = s_a.abort_now;
        if (in == NULL && s_a.head == NULL && !abort_now) {
            s_a.busy = false;
            if (s_a.stop) {
                pthread_mutex_unlock(&s_a.mu);
                break;
            }
            s_a.sleeping = true;
            pthread_cond_wait(&s_a.cv, &s_a.mu);
            s_a.sleeping = false;
            pthread_mutex_unlock(&s_a.mu);
            continue;
        }
        s_a.busy = true;
        pthread_mutex_unlock(&s_a.mu);
        s_admit(in);
        if (abort_now) {
            s_fail_all(TROUPE_CANCELLED, "transport: the cluster is aborting");
            s_reap();
            break;
        }
        s_iteration(s_a.turn++);
        s_pause(false);
    }
    if (!s_a.abort_now)
        s_cleanup_mpi();
    pthread_mutex_lock(&s_a.mu);
    s_a.exited = true;
    pthread_cond_broadcast(&s_a.exit_cv);
    pthread_mutex_unlock(&s_a.mu);
    return NULL;
}

/* ---- a waiting thread drives the engine ---------------------------------------------------
 *
 * Host-level collectives, and device-level ones with TROUPE_COLL_LAZY, are submitted lazily:
 * the actor is not woken (r->lazy); their event's first consumer starts them
 * (troupe__event_set_progress). A thread that waits for such an event while the actor is idle
 * (asleep, nothing in flight) — in troupe_event_sync, or a stream parking on it (measured on
 * bench_train 2x1: context switches 15.5k -> 3.1k per run) — takes the engine over instead of
 * waking the actor and sleeping itself: it admits the mailbox, turns the engine (every request
 * in flight, not only its own) until its event completes or its deadline passes, and hands
 * back, waking the actor if work is left. That saves both thread wake-ups of the hand-off
 * (about 10 us each here), which dominate small and mid-sized collectives; merely waking the
 * actor at submit, to find the engine taken, cost as much on 2 cores (bench_merge 4 KiB:
 * 16-22 us against 5.7 us without that wake-up). MPI calls stay serialized: busy and helping,
 * under mu, make one thread at a time the engine's owner, and mu orders what each leaves for
 * the next. */
void troupe__transport_progress(troupe_event_t *ev, int64_t deadline_ns)
{
    pthread_mutex_lock(&s_a.mu);
    if (deadline_ns == TROUPE__EVENT_KICK || !s_a.running || !s_a.accepting || s_a.exited ||
        s_a.stop || s_a.busy || s_a.helping) {
        /* the actor (or another helping thread, which admits the mailbox every turn) drives */
        if (s_a.sleeping && !s_a.helping && s_a.in_head != NULL)
            pthread_cond_signal(&s_a.cv);
        pthread_mutex_unlock(&s_a.mu);
        return;
    }
    s_a.helping = true;
    pthread_mutex_unlock(&s_a.mu);
    TROUPE_LOG(TROUPE_LOG_TRACE, TROUPE_SUB_TRANSPORT, "a waiting thread drives the engine for %s",
               troupe_event_name(ev));
    for (;;) {
        pthread_mutex_lock(&s_a.mu);
        troupe__req_t *in = s_take_inbox();
        bool leave = s_a.abort_now || s_a.stop;
        pthread_mutex_unlock(&s_a.mu);
        s_admit(in);
        if (leave || s_a.head == NULL)
            break; /* the actor aborts or drains; or nothing is in flight */
        s_iteration(s_a.turn++);
        if (troupe_event_state(ev) != TROUPE_EVENT_PENDING ||
            (deadline_ns != TROUPE_TIMEOUT_INFINITE && troupe_now_ns() >= deadline_ns))
            break;
        s_pause(true);
    }
    pthread_mutex_lock(&s_a.mu);
    s_a.helping = false;
    if (s_a.sleeping && (s_a.head != NULL || s_a.in_head != NULL || s_a.stop || s_a.abort_now))
        pthread_cond_signal(&s_a.cv);
    pthread_mutex_unlock(&s_a.mu);
}

/* ---- start / stop / submit --------------------------------------------------------------- */

/* The per-peer vectors troupe__transport_start allocates. */
static void s_free_peer_arrays(void)
{
    troupe_free(s_a.send_seq);
    troupe_free(s_a.recv_seq);
    troupe_free(s_a.last_pong_ns);
    troupe_free(s_a.lane_busy);
    s_a.send_seq = s_a.recv_seq = NULL;
    s_a.last_pong_ns = NULL;
    s_a.lane_busy = NULL;
}

troupe_status_t troupe__transport_start(const void *data_comm, const void *ctl_comm, int rank,
                                        int size)
{
    if (s_a.running)
        return troupe__error(TROUPE_INTERNAL, "transport: the actor already runs");
    s_a.data = *(const MPI_Comm *)data_comm;
    s_a.ctl = *(const MPI_Comm *)ctl_comm;
    s_a.rank = rank;
    s_a.size = size;
    s_a.head = NULL;
    s_a.broken = false;
    s_a.probe_posted = false;
    /* collective (every rank calls it whatever fails here after): first */
    if (troupe__shm_coll_start(data_comm, rank, size) != TROUPE_OK)
        goto fail;
    s_a.send_seq = troupe_calloc((size_t)size, sizeof *s_a.send_seq);
    s_a.recv_seq = troupe_calloc((size_t)size, sizeof *s_a.recv_seq);
    s_a.last_pong_ns = troupe_calloc((size_t)size, sizeof *s_a.last_pong_ns);
    s_a.lane_busy = troupe_calloc(1 + 2 * (size_t)size, 1);
    if (s_a.send_seq == NULL || s_a.recv_seq == NULL || s_a.last_pong_ns == NULL ||
        s_a.lane_busy == NULL)
        goto oom;
    for (int p = 0; p < size; p++)
        s_a.last_pong_ns[p] = INT64_MIN;
    s_a.coll_seq = 0;
    s_a.turn = 0;
    s_a.stop = s_a.abort_now = s_a.exited = s_a.sleeping = false;
    s_a.busy = s_a.helping = false;
    int rc = pthread_create(&s_a.thread, NULL, s_actor_main, NULL);
    if (rc != 0) {
        troupe__error(TROUPE_RESOURCE_EXHAUSTED, "transport: pthread_create: %s", strerror(rc));
        goto fail;
    }
    pthread_mutex_lock(&s_a.mu);
    s_a.running = true;
    s_a.accepting = true;
    pthread_mutex_unlock(&s_a.mu);
    return TROUPE_OK;
oom:
    troupe__error(TROUPE_RESOURCE_EXHAUSTED, "transport: out of memory");
fail:
    troupe__shm_coll_stop();
    s_free_peer_arrays();
    return TROUPE_RESOURCE_EXHAUSTED;
}

bool troupe__transport_stop(bool drain, int64_t timeout_ns)
{
    pthread_mutex_lock(&s_a.mu);
    if (!s_a.running) {
        pthread_mutex_unlock(&s_a.mu);
        return true;
    }
    s_a.accepting = false;
    s_a.stop = true;
    if (!drain)
        s_a.abort_now = true;
    pthread_cond_signal(&s_a.cv);
    int64_t deadline = troupe_deadline_after(timeout_ns);
    while (!s_a.exited) {
        if (deadline == TROUPE_TIMEOUT_INFINITE) {
            pthread_cond_wait(&s_a.exit_cv, &s_a.mu);
            continue;
        }
        int64_t left = troupe_deadline_remaining(deadline);
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = (int64_t)ts.tv_nsec + (left < S_NS_PER_S ? left : S_NS_PER_S);
        ts.tv_sec += (time_t)(ns / S_NS_PER_S);
        ts.tv_nsec = (long)(ns % S_NS_PER_S);
        pthread_cond_timedwait(&s_a.exit_cv, &s_a.mu, &ts);
    }
    bool exited = s_a.exited;
    pthread_mutex_unlock(&s_a.mu);
    if (!exited)
        return false;
    pthread_join(s_a.thread, NULL);
    pthread_mutex_lock(&s_a.mu);
    s_a.running = false;
    pthread_mutex_unlock(&s_a.mu);
    for (int i = 0; i < 2; i++) {
        troupe_free(s_a.slot[i]);
        s_a.slot[i] = NULL;
        s_a.slot_cap[i] = 0;
        s_a.slot_busy[i] = false;
        troupe_free(s_a.rtmp[i]);
        s_a.rtmp[i] = NULL;
        s_a.rtmp_cap[i] = 0;
        s_a.rtmp_busy[i] = false;
    }
    for (size_t i = 0; i < s_a.nsends; i++)
        troupe_free(s_a.sends[i].buf); /* only left after a failure: never reused */
    troupe_free(s_a.sends);
    s_a.sends = NULL;
    s_a.nsends = s_a.sends_cap = 0;
    s_free_peer_arrays();
    troupe__shm_coll_stop();
    return true;
}

bool troupe__transport_running(void)
{
    pthread_mutex_lock(&s_a.mu);
    bool on = s_a.accepting;
    pthread_mutex_unlock(&s_a.mu);
    return on;
}

void troupe__transport_submit(troupe__req_t **r_p)
{
    troupe__req_t *r = *r_p;
    *r_p = NULL;
    char msg[1024];
    troupe_status_t st = troupe__cluster_failure(msg, sizeof msg);
    if (st != TROUPE_OK) {
        troupe__req_finish(&r, st, msg);
        return;
    }
    pthread_mutex_lock(&s_a.mu);
    if (!s_a.accepting) {
        pthread_mutex_unlock(&s_a.mu);
        troupe__req_finish(&r, TROUPE_CANCELLED, "transport: the cluster was finalized or aborted");
        return;
    }
    if (r->kind == TROUPE__REQ_SEND)
        r->seq = ++s_a.send_seq[r->peer];
    else if (r->kind == TROUPE__REQ_RECV)
        r->seq = ++s_a.recv_seq[r->peer];
    else
        r->seq = ++s_a.coll_seq;
    r->submitted_ns = troupe_now_ns();
    r->next = NULL;
    if (s_a.in_tail != NULL)
        s_a.in_tail->next = r;
    else
        s_a.in_head = r;
    s_a.in_tail = r;
    /* A lazy request whose event was consumed before it got here (a subscriber, a poll) starts
     * at once: that consumer's kick found nothing to start. */
    if (s_a.sleeping && (!r->lazy || troupe__event_was_kicked(r->ev)))
        pthread_cond_signal(&s_a.cv);
    pthread_mutex_unlock(&s_a.mu);
}

#else /* !TROUPE_HAVE_MPI: a single-rank cluster has no actor */

void troupe__transport_progress(troupe_event_t *ev, int64_t deadline_ns)
{
    (void)ev;
    (void)deadline_ns;
}

troupe_status_t troupe__transport_start(const void *data_comm, const void *ctl_comm, int rank,
                                        int size)
{
    (void)data_comm;
    (void)ctl_comm;
    (void)rank;
    (void)size;
    return troupe__error(TROUPE_UNIMPLEMENTED, "transport: troupe was built without MPI");
}

bool troupe__transport_stop(bool drain, int64_t timeout_ns)
{
    (void)drain;
    (void)timeout_ns;
    return true;
}

bool troupe__transport_running(void)
{
    return false;
}

void troupe__transport_submit(troupe__req_t **r_p)
{
    troupe__req_finish(r_p, TROUPE_FAILED_PRECONDITION,
                       "transport: troupe was built without MPI (single rank)");
}

#endif
