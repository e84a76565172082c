/* troupe — the transport engine (docs/architecture.md §3, §8; transport_impl.h, The engine): the only
 * code that calls MPI between troupe_cluster_init and troupe_cluster_finalize
 * (MPI_THREAD_SERIALIZED). It is not a CZMQ actor: no message travels to it through a socket.
 * It is a state machine over the requests in flight, turned by one owner at a time: the
 * engine thread (a pthread sleeping on a condition variable when nothing is in flight), or a
 * thread waiting for a lazily started collective while the engine thread is idle — a host
 * thread in troupe_event_sync, or a stream parking on a TROUPE_COLL_LAZY device-level
 * collective (troupe__engine_progress, below) — which saves the hand-off's two thread
 * wake-ups.
 *
 * Mailbox: a mutex-protected FIFO of requests (troupe__engine_submit) and a condition variable
 * the engine thread sleeps on when it has nothing in flight. While anything is in flight the
 * owner polls MPI continuously (libnbc progresses only inside MPI calls), checks deadlines,
 * answers liveness probes, and keeps taking new requests.
 *
 * Lanes. Requests run in issue order within their lane: one lane for the collectives (every
 * rank issues them in one order), and one per point-to-point channel (sends to rank p; receives
 * from rank p), so a device_to_device between two ranks never waits behind a collective that
 * the other rank issues later (or the reverse). Only the head of a lane is active.
 *
 * A request's life:
 *   1. fingerprints (fingerprint.c, the exchange): digests to every rank involved, full
 *      fingerprints only when digests differ; all ranks fail alike with FAILED_PRECONDITION on
 *      a difference. When fingerprints have not all arrived by the deadline, a liveness probe
 *      (as in 2.) tells the ranks that do not answer (named first) from those that answer but
 *      have not reached this collective (DEADLINE_EXCEEDED). Meanwhile the buckets are planned
 *      (bucket.c) and the first staged.
 *   2. data: fusion buckets (bucket.c) with up to two in flight — MPI_Iallreduce/MPI_Ibcast, or
 *      troupe's ring (ring.c) — the next one packed while the previous moves; or the
 *      shared-memory allreduce of the whole span (shm_allreduce.c); point-to-point:
 *      Isend/Irecv slices. When nothing completes for the deadline, a liveness probe (PING to
 *      the ranks involved, PONG back, 2 s) names the ranks that did not answer.
 *   3. the request's event completes, after this turn's MPI calls, so a host thread woken by
 *      it never calls MPI while the engine still does (bench/merge relies on it).
 * A gated request (collective.h `after`) waits before 1. for this rank's own events, with the
 * same deadline (s_gate_check); past it, it fails and tells the other ranks (S_GATE_EXPIRED on
 * the probe tag), which fail it at once naming this rank (s_peer_gate_expired).
 * After a failure the cluster is failed: later requests fail at once. After a deadline or an
 * MPI error the engine makes no further MPI calls (a dead peer can make any of them hang).
 */
#define _GNU_SOURCE
#include "troupe_config.h"

#include "transport/mpi/bucket_impl.h"
#include "transport/mpi/engine_impl.h"
#include "transport/mpi/transport_impl.h"

#include "actors/board_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/fault_impl.h"
#include "base/log.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "base/trace_impl.h"
#include "base/vec.h"

#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if TROUPE_HAVE_MPI

#define S_PING 1
#define S_PONG 2
#define S_GATE_EXPIRED 3 /* {S_GATE_EXPIRED, seq}: this rank failed collective #seq at its gate */

#define S_NS_PER_S (1000LL * 1000 * 1000)
#define S_PROBE_WINDOW_NS (2LL * S_NS_PER_S) /* how long a liveness probe waits for PONGs */
#define S_DRAIN_NS (2LL * S_NS_PER_S)        /* at stop: how long to wait for small sends */

/* A bucket in flight. */
typedef struct s_flight {
    MPI_Request req;     /* the MPI_Iallreduce or MPI_Ibcast (when !on_ring) */
    troupe__ring_t ring; /* troupe's ring (ring.c) */
    bool on_ring;
    size_t bucket;
    int slot; /* staging slot, -1 in place */
    int tmp;  /* the ring's receive buffer (s_a.rtmp), -1 none */
    int64_t t_post_ns;
    int track; /* TROUPE__TRACK_BUCKET0 or 1: not the other flight's (trace) */
} s_flight_t;

typedef enum s_phase { S_PH_INIT = 0, S_PH_FP, S_PH_DATA } s_phase_t;

/* The engine's state of one request (troupe__req_t.engine_state). */
typedef struct s_rs {
    s_phase_t phase;
    char what[96];
    int64_t t_start_ns;
    int64_t t_submit_ns; /* when the engine took the request (a gated one waits from then) */
    int64_t t_gate_ns;   /* gated: when it reached the head of its lane, its gate closed (its
                            gate's deadline counts from then); 0 before */
    int64_t t_data_ns;   /* when the data phase began */
    int64_t deadline_ns; /* fingerprints: activation + timeout; data: last progress + timeout */
    troupe__fp_exchange_t fp;
    bool flat;        /* this rank's tensors form one span (troupe__bucket_flat) */
    bool all_flat;    /* ...every rank's: buckets in order (the flat plan) */
    bool use_shm;     /* ...and each lies in shareable memory: reduced through it */
    bool shm_apply;   /* ...and so do the fused update's side spans: each rank updates its
                         chunk there (else the update runs on every rank after the sums) */
    uint64_t shard_key; /* a fused update with private side arrays: s_shard_key, else 0 */
    MPI_Request gather[TROUPE_COLL_APPLY_MAX_SIDE]; /* s_gather_post's, in flight */
    int ngather;
    int *gather_counts; /* [2 * size]: each rank's chunk (units), then its first unit */
    const char *span; /* this rank's span when flat */
    int64_t span_bytes;
    troupe__cls_t span_cls;
    troupe__shm_coll_t shm;
    /* collective data */
    troupe__bucket_plan_t plan;
    size_t next_bk, done_bks;
    s_flight_t fl[2];
    int nfl;
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
} s_rs_t;

/* A small control send in flight (fingerprint, PING, PONG) and the buffer it owns. */
typedef struct s_send {
    MPI_Request req;
    void *buf;
} s_send_t;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* the engine thread sleeps here when idle */
    pthread_cond_t exit_cv; /* troupe__engine_stop waits here */
    bool running;           /* started and not yet joined */
    bool accepting;         /* submit hands requests to the engine */
    bool stop, abort_now, exited, sleeping;
    bool busy;    /* the engine thread drives the engine (has requests in flight) */
    bool helping; /* a waiting thread drives the engine (troupe__engine_progress) */
    troupe__req_t *in_head, *in_tail;
    uint64_t coll_seq;
    uint64_t *send_seq, *recv_seq; /* [size] */
    pthread_t thread;

    /* the engine's owner only: the engine thread, or a helping thread (busy/helping, under mu,
     * say which; the hand-over through mu orders their accesses) */
    unsigned turn;
    troupe__engine_comm_t comm;
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
    uint64_t *gate_expired; /* [size]: 1 + the collective rank p failed at its gate, 0 none */
    int64_t gate_due_ns;    /* the earliest deadline of a closed gate at the last turn, 0 none */
    unsigned char *lane_busy;
    bool broken;              /* MPI must not be called any more */
    troupe__board_slot_t *board; /* the transport's status-board slot (s_board_publish) */
    uint64_t coll_done;          /* the last collective that completed */
    uint64_t board_sig;          /* what was last published there */
    /* every request in flight waited for its gate at the last turn (s_iteration), which began
     * when gate_wakes was gated_at: the engine thread then sleeps until a gate opens */
    bool all_gated;
    uint64_t gated_at;
    uint64_t gate_wakes; /* under mu: troupe__engine_wake calls */
    bool waiting_on_peers;    /* every active request waits for slower ranks (s_iteration) */
    int64_t waiting_since_ns; /* then: when the newest of them started */
    /* the requests (s_shard_key) whose private side arrays shared memory left sharded: every
     * rank holds the same set, since every rank adds and removes at the same requests */
    uint64_t *sharded;
    size_t nsharded, sharded_cap;
} s_a = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
    .exit_cv = PTHREAD_COND_INITIALIZER,
};

/* ---- helpers ----------------------------------------------------------------------------- */

troupe_status_t troupe__mpi_error(const char *what, const char *call, int rc)
{
    char es[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, es, &len) != MPI_SUCCESS)
        snprintf(es, sizeof es, "MPI error %d", rc);
    return troupe__error(TROUPE_TRANSPORT_ERROR, "%s: %s failed: %s", what, call, es);
}

MPI_Datatype troupe__cls_mpi_type(troupe__cls_t c)
{
    switch (c) {
    case TROUPE__CLS_F32:
        return MPI_FLOAT;
    case TROUPE__CLS_F64:
        return MPI_DOUBLE;
    case TROUPE__CLS_I32:
        return MPI_INT32_T;
    case TROUPE__CLS_I64:
        return MPI_INT64_T;
    case TROUPE__CLS_U32:
        return MPI_UINT32_T;
    case TROUPE__CLS_U64:
        return MPI_UINT64_T;
    case TROUPE__CLS_BF16W:
        return MPI_UINT16_T; /* moved by the ring only, never reduced by MPI */
    default:
        return MPI_BYTE;
    }
}

static int64_t s_timeout_ns(void)
{
    return troupe_config_timeout_s() * S_NS_PER_S;
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

static void s_finish(troupe__req_t *r, troupe_status_t st, const char *msg)
{
    s_rs_t *rs = r->engine_state;
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
    /* troupe__cluster_fail logs the first failure (once); this one may only repeat it. */
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT, "%s", msg);
    troupe__cluster_fail(st, msg, comm_broken);
    if (st == TROUPE_DEADLINE_EXCEEDED)
        troupe__board_deadline_hit(st); /* the control plane logs the hang report */
    if (comm_broken)
        s_a.broken = true;
    s_finish(r, st, troupe_last_error());
}

troupe_status_t troupe__engine_send_ctl(const void *data, size_t size, int dest, int tag,
                                        const char *what)
{
    if (!TROUPE__VEC_RESERVE(s_a.sends, s_a.sends_cap, s_a.nsends + 1))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    void *buf = troupe_malloc(size ? size : 1);
    if (buf == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    memcpy(buf, data, size);
    s_send_t *s = &s_a.sends[s_a.nsends];
    int rc = MPI_Isend(buf, (int)size, MPI_BYTE, dest, tag, s_a.comm.ctl, &s->req);
    if (rc != MPI_SUCCESS) {
        troupe_free(buf);
        return troupe__mpi_error(what, "MPI_Isend", rc);
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
            return troupe__mpi_error("transport", "MPI_Test (control send)", rc);
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
                       TROUPE__TAG_PROBE, s_a.comm.ctl, &s_a.probe_req);
    if (rc != MPI_SUCCESS)
        return troupe__mpi_error("transport", "MPI_Irecv (probe)", rc);
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
            return troupe__mpi_error("transport", "MPI_Test (probe)", rc);
        if (!flag)
            break;
        s_a.probe_posted = false;
        int src = st.MPI_SOURCE;
        int64_t msg[2] = {s_a.probe_buf[0], s_a.probe_buf[1]};
        if (src >= 0 && src < s_a.comm.size) {
            if (msg[0] == S_PING) {
                int64_t pong[2] = {S_PONG, msg[1]};
                TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT, "probe from rank %d: PONG", src);
                TROUPE_RETURN_IF_ERROR(
                    troupe__engine_send_ctl(pong, sizeof pong, src, TROUPE__TAG_PROBE, "PONG"));
            } else if (msg[0] == S_PONG) {
                s_a.last_pong_ns[src] = troupe_now_ns();
            } else if (msg[0] == S_GATE_EXPIRED && msg[1] >= 0) {
                s_a.gate_expired[src] = (uint64_t)msg[1] + 1;
                s_a.last_pong_ns[src] = troupe_now_ns(); /* alive */
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
    for (int r = 0; r < s_a.comm.size; r++)
        count += bad[r];
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    troupe__strbuf_puts(&sb, count == 1 ? "rank " : "ranks ");
    int seen = 0;
    for (int r = 0; r < s_a.comm.size; r++)
        if (bad[r])
            troupe__strbuf_printf(&sb, "%s%d", seen++ ? ", " : "", r);
}

/* Writes r's tensors, "'w1' (node 12), 'b1' (node 13) and 3 more", into buf. */
static void s_tensor_list(const troupe__req_t *r, char *buf, size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    size_t shown = r->n < 4 ? r->n : 4;
    for (size_t i = 0; i < shown; i++)
        troupe__strbuf_printf(&sb, "%s'%s' (node %" PRId32 ")", i > 0 ? ", " : "",
                              r->tensors[i].name, r->tensors[i].node_id);
    if (r->n > shown)
        troupe__strbuf_printf(&sb, " and %zu more", r->n - shown);
}

/* Waits on cv (mu held) for at most left_ns, and at most a second (a clock step bounds the
 * error). */
static void s_cond_wait_for(pthread_cond_t *cv, int64_t left_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = (int64_t)ts.tv_nsec + (left_ns < S_NS_PER_S ? left_ns : S_NS_PER_S);
    ts.tv_sec += (time_t)(ns / S_NS_PER_S);
    ts.tv_nsec = (long)(ns % S_NS_PER_S);
    pthread_cond_timedwait(cv, &s_a.mu, &ts);
}

/* ---- state of a request ------------------------------------------------------------------ */

/* Gives back the slots of buckets that will not complete (any left when a request is freed: it
 * failed). */
static void s_release_slots(s_rs_t *rs)
{
    for (size_t i = 0; i < rs->plan.nbks; i++) {
        if (rs->plan.bks[i].slot >= 0)
            s_a.slot_busy[rs->plan.bks[i].slot] = false;
        rs->plan.bks[i].slot = -1;
    }
}

static void s_rs_free(s_rs_t *rs)
{
    if (rs == NULL)
        return;
    troupe__fp_exchange_free(&rs->fp, s_a.comm.size);
    /* Buckets still in flight belong to a failed request: MPI may still write into their
     * buffers if it is ever progressed again, so those buffers are left to MPI (leaked: only
     * on failures, which fail the cluster) rather than reused or freed. */
    for (int i = 0; i < rs->nfl; i++) {
        const s_flight_t *f = &rs->fl[i];
        if (f->slot >= 0) {
            s_a.slot[f->slot] = NULL;
            s_a.slot_cap[f->slot] = 0;
            s_a.slot_busy[f->slot] = false;
            rs->plan.bks[f->bucket].slot = -1;
        }
        if (f->tmp >= 0) {
            s_a.rtmp[f->tmp] = NULL;
            s_a.rtmp_cap[f->tmp] = 0;
            s_a.rtmp_busy[f->tmp] = false;
        }
    }
    s_release_slots(rs);
    troupe__shm_coll_free(&rs->shm);
    troupe__bucket_plan_free(&rs->plan);
    /* a gather still in flight (only on failures) may read its counts if MPI ever progresses
     * again: left to MPI, as the buckets' buffers above */
    if (rs->ngather == 0)
        troupe_free(rs->gather_counts);
    troupe_free(rs->p2p);
    troupe_free(rs->fin_msg);
    troupe_free(rs);
}

/* 0: the collectives; 1 + 2p: sends to p; 2 + 2p: receives from p. */
static size_t s_lane(const troupe__req_t *r)
{
    if (!troupe__req_is_p2p(r))
        return 0;
    return 1 + 2 * (size_t)r->peer + (r->kind == TROUPE__REQ_RECV);
}

/* ---- trace (base/trace_impl.h) ------------------------------------------------------------ */

/* A bucket track the other flights of rs do not use. */
static int s_trace_track(const s_rs_t *rs)
{
    bool busy0 = false;
    for (int i = 0; i < rs->nfl; i++)
        busy0 = busy0 || rs->fl[i].track == TROUPE__TRACK_BUCKET0;
    return busy0 ? TROUPE__TRACK_BUCKET1 : TROUPE__TRACK_BUCKET0;
}

/* A finished bucket: its span and, on the ring, its two phases. */
static void s_trace_bucket(const troupe__req_t *r, const s_flight_t *f, const troupe__bucket_t *b)
{
    if (!troupe__trace_on())
        return;
    int64_t now = troupe_now_ns();
    troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("seq", r->seq),
                               TROUPE__TRACE_NUM("bucket", f->bucket),
                               TROUPE__TRACE_NUM("bytes", troupe__bucket_bytes(b))};
    troupe__trace_track_t tr = (troupe__trace_track_t)f->track;
    const char *name = f->on_ring                           ? "ring allreduce bucket"
                       : r->kind == TROUPE__REQ_BROADCAST ? "MPI_Ibcast bucket"
                                                          : "MPI_Iallreduce bucket";
    troupe__trace_emit(tr, "allreduce", name, f->t_post_ns, now, a, 3);
    if (f->on_ring && f->ring.t_scattered_ns != 0) {
        troupe__trace_emit(tr, "allreduce", "reduce-scatter", f->ring.t_start_ns,
                           f->ring.t_scattered_ns, a, 3);
        troupe__trace_emit(tr, "allreduce", "allgather", f->ring.t_scattered_ns, now, a, 3);
    }
}

/* A request leaving the engine: its span from arrival (submission) to completion, on the
 * collectives' (or point-to-point) timeline, and its phases. */
static void s_trace_request(const troupe__req_t *r, const s_rs_t *rs)
{
    if (!troupe__trace_on())
        return;
    int64_t now = troupe_now_ns();
    bool p2p = troupe__req_is_p2p(r);
    const char *path = p2p             ? "p2p"
                       : rs->use_shm   ? "shm"
                       : rs->plan.nbks > 0 && troupe__ring_wanted(r->kind, &rs->plan.bks[0],
                                                                  s_a.comm.size)
                           ? "ring"
                           : "mpi";
    troupe__trace_arg_t a[] = {
        TROUPE__TRACE_NUM("seq", r->seq), TROUPE__TRACE_NUM("bytes", r->bytes),
        TROUPE__TRACE_STR("status", troupe_status_str(rs->finished ? rs->fin : TROUPE_CANCELLED)),
        p2p ? (troupe__trace_arg_t)TROUPE__TRACE_NUM("peer", r->peer)
            : (troupe__trace_arg_t)TROUPE__TRACE_STR("phase", r->phase ? r->phase : "")};
    troupe__trace_emit(p2p ? TROUPE__TRACK_P2P : TROUPE__TRACK_COLLECTIVES,
                       p2p ? "transfer" : "collective", rs->what, r->submitted_ns, now, a, 4);
    if (p2p || rs->t_start_ns == 0)
        return;
    troupe__trace_arg_t b[] = {TROUPE__TRACE_NUM("seq", r->seq),
                               TROUPE__TRACE_NUM("bytes", r->bytes),
                               TROUPE__TRACE_STR("path", path)};
    int64_t t_fp_end = rs->t_data_ns != 0 ? rs->t_data_ns : now;
    troupe__trace_emit(TROUPE__TRACK_PHASES, "allreduce", "fingerprints", rs->t_start_ns, t_fp_end,
                       b, 3);
    const troupe__shm_coll_t *c = &rs->shm;
    if (rs->use_shm && c->t_begin_ns != 0 && c->t_done_ns != 0) {
        troupe__trace_emit(TROUPE__TRACK_PHASES, "allreduce", "shm arrivals", c->t_begin_ns,
                           c->t_arrived_ns, b, 3);
        troupe__trace_emit(TROUPE__TRACK_PHASES, "allreduce", "shm reduce", c->t_arrived_ns,
                           c->t_reduced_ns, b, 3);
        troupe__trace_emit(TROUPE__TRACK_PHASES, "allreduce", "shm departures", c->t_reduced_ns,
                           c->t_done_ns, b, 3);
    } else if (rs->t_data_ns != 0) {
        troupe__trace_emit(TROUPE__TRACK_PHASES, "allreduce", "data", rs->t_data_ns, now, b, 3);
    }
}

/* ---- collective data ---------------------------------------------------------------------- */

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
static troupe_status_t s_stage(troupe__req_t *r, s_rs_t *rs, troupe__bucket_t *b)
{
    size_t bytes = troupe__bucket_bytes(b);
    int slot = s_take_slot(bytes);
    if (slot == -1)
        return TROUPE_OK;
    if (slot == -2)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                             "%s: out of memory for a staging buffer of %zu bytes", rs->what,
                             bytes);
    b->slot = slot;
    troupe__stats_add_staged((uint64_t)bytes);
    if (r->kind != TROUPE__REQ_BROADCAST || s_a.comm.rank == r->root)
        troupe__bucket_pack(r, &rs->plan, b, s_a.slot[slot]);
    return TROUPE_OK;
}

/* While the fingerprints travel: plans the buckets and packs the first ones, so the data
 * can move as soon as the ranks agree (the caller's memory is only read). */
static troupe_status_t s_prepack(troupe__req_t *r, s_rs_t *rs)
{
    if (rs->flat)
        return TROUPE_OK; /* nothing to pack; the plan waits for the others' layout flags */
    if (!rs->plan.planned)
        TROUPE_RETURN_IF_ERROR(troupe__bucket_plan(&rs->plan, r, false, rs->what));
    for (size_t i = rs->next_bk; i < rs->plan.nbks && i < rs->next_bk + 2; i++) {
        troupe__bucket_t *b = &rs->plan.bks[i];
        if (b->in_place || b->slot >= 0)
            continue;
        TROUPE_RETURN_IF_ERROR(s_stage(r, rs, b));
        if (b->slot < 0)
            break;
    }
    return TROUPE_OK;
}

/* Posts buckets while fewer than two are in flight. */
static troupe_status_t s_coll_post(troupe__req_t *r, s_rs_t *rs)
{
    bool bcast = r->kind == TROUPE__REQ_BROADCAST;
    while (rs->nfl < 2 && rs->next_bk < rs->plan.nbks) {
        /* Buckets in flight finish in any order. Ring messages of buckets TROUPE__RING_TAGS apart
         * share a tag, so a bucket waits while one that far back is still in flight (the
         * steps of one bucket, and buckets of different tags, cannot be confused). */
        size_t oldest = rs->next_bk;
        for (int i = 0; i < rs->nfl; i++)
            oldest = rs->fl[i].bucket < oldest ? rs->fl[i].bucket : oldest;
        if (rs->next_bk - oldest >= TROUPE__RING_TAGS)
            break;
        troupe__bucket_t *b = &rs->plan.bks[rs->next_bk];
        void *ptr;
        int slot = -1;
        if (b->in_place) {
            ptr = troupe__seg_ptr(r, &rs->plan.segs[b->seg0]);
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
                          .bucket = rs->next_bk,
                          .slot = slot,
                          .tmp = -1,
                          .t_post_ns = troupe_now_ns(),
                          .track = s_trace_track(rs)};
        if (troupe__ring_wanted(r->kind, b, s_a.comm.size)) {
            size_t tmp_bytes = troupe__ring_tmp_bytes(b, s_a.comm.size);
            int tmp = s_take_buf(s_a.rtmp, s_a.rtmp_cap, s_a.rtmp_busy, tmp_bytes);
            if (tmp < 0) /* -1 cannot happen: at most two flights, one buffer each */
                return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                                     "%s: out of memory for a ring buffer of %zu bytes", rs->what,
                                     tmp_bytes);
            f->tmp = tmp;
            f->on_ring = true;
            f->ring.rreq = f->ring.sreq = MPI_REQUEST_NULL;
            rs->next_bk++;
            rs->nfl++; /* counted now: s_rs_free gives the ring buffer back on failure */
            troupe__stats_add_ring();
            TROUPE_RETURN_IF_ERROR(troupe__ring_start(&f->ring, &s_a.comm, b, f->bucket, r->op, ptr,
                                                      s_a.rtmp[tmp], rs->what));
        } else {
            int rc;
            if (bcast)
                rc = MPI_Ibcast(ptr, (int)b->units, MPI_BYTE, r->root, s_a.comm.data, &f->req);
            else
                rc = MPI_Iallreduce(MPI_IN_PLACE, ptr, (int)b->units, troupe__cls_mpi_type(b->cls),
                                    s_mpi_op(r->op), s_a.comm.data, &f->req);
            if (rc != MPI_SUCCESS)
                return troupe__mpi_error(rs->what, bcast ? "MPI_Ibcast" : "MPI_Iallreduce", rc);
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
        if (rs->fl[i].on_ring) {
            TROUPE_RETURN_IF_ERROR(
                troupe__ring_test(&rs->fl[i].ring, &s_a.comm, rs->what, &done, progress));
            if (done) {
                s_a.rtmp_busy[rs->fl[i].tmp] = false;
                rs->fl[i].tmp = -1;
            }
        } else {
            int flag = 0;
            int rc = MPI_Test(&rs->fl[i].req, &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS)
                return troupe__mpi_error(rs->what, "MPI_Test", rc);
            done = flag != 0;
        }
        if (!done) {
            i++;
            continue;
        }
        s_flight_t f = rs->fl[i];
        troupe__bucket_t *b = &rs->plan.bks[f.bucket];
        s_trace_bucket(r, &f, b);
        if (f.slot >= 0) {
            if (!bcast || s_a.comm.rank != r->root)
                troupe__bucket_unpack(r, &rs->plan, b, s_a.slot[f.slot], s_a.comm.size);
            s_a.slot_busy[f.slot] = false;
            b->slot = -1;
        } else if (mean) {
            troupe__divide_by(troupe__cls_red_type(b->cls),
                              troupe__seg_ptr(r, &rs->plan.segs[b->seg0]), b->units, s_a.comm.size);
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
    int n = (int)((bytes + TROUPE__MAX_MSG_BYTES - 1) / TROUPE__MAX_MSG_BYTES);
    if (n == 0)
        return TROUPE_OK;
    rs->p2p = troupe_calloc((size_t)n, sizeof *rs->p2p);
    if (rs->p2p == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
    char *base = r->tensors[0].data;
    for (int i = 0; i < n; i++) {
        int64_t off = (int64_t)i * TROUPE__MAX_MSG_BYTES;
        int c = (int)(bytes - off < TROUPE__MAX_MSG_BYTES ? bytes - off : TROUPE__MAX_MSG_BYTES);
        int rc = r->kind == TROUPE__REQ_SEND
                     ? MPI_Isend(base + off, c, MPI_BYTE, r->peer, TROUPE__TAG_DATA_P2P,
                                 s_a.comm.data, &rs->p2p[i])
                     : MPI_Irecv(base + off, c, MPI_BYTE, r->peer, TROUPE__TAG_DATA_P2P,
                                 s_a.comm.data, &rs->p2p[i]);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error(rs->what,
                                     r->kind == TROUPE__REQ_SEND ? "MPI_Isend" : "MPI_Irecv", rc);
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
            return troupe__mpi_error(rs->what, "MPI_Test", rc);
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
    for (int p = 0; p < s_a.comm.size; p++) {
        if (p == s_a.comm.rank || (troupe__req_is_p2p(r) && p != r->peer))
            continue;
        TROUPE_RETURN_IF_ERROR(
            troupe__engine_send_ctl(ping, sizeof ping, p, TROUPE__TAG_PROBE, "PING"));
    }
    return TROUPE_OK;
}

/* The probe window closed: names the ranks that did not answer. */
static troupe_status_t s_probe_verdict(troupe__req_t *r, s_rs_t *rs)
{
    bool bad[s_a.comm.size];
    int nbad = 0;
    for (int p = 0; p < s_a.comm.size; p++) {
        bad[p] = p != s_a.comm.rank && (!troupe__req_is_p2p(r) || p == r->peer) &&
                 s_a.last_pong_ns[p] < rs->probe_t0;
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

/* The probe window of the fingerprint phase closed: names the ranks whose fingerprints are
 * missing, those that did not answer the probe either (dead, stuck or cut off) first, then those
 * that answered (alive, but still in an earlier collective or not issuing this one). */
static troupe_status_t s_fp_verdict(s_rs_t *rs)
{
    bool silent[s_a.comm.size], behind[s_a.comm.size];
    int nsilent = 0, nbehind = 0;
    for (int p = 0; p < s_a.comm.size; p++) {
        bool pending = troupe__fp_exchange_pending(&rs->fp, p);
        silent[p] = pending && s_a.last_pong_ns[p] < rs->probe_t0;
        behind[p] = pending && !silent[p];
        nsilent += silent[p];
        nbehind += behind[p];
    }
    char quiet[256], late[256], also[320] = "";
    s_rank_list(silent, quiet, sizeof quiet);
    s_rank_list(behind, late, sizeof late);
    if (nsilent == 0)
        return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                             "%s: %s answered a liveness probe but did not reach this collective "
                             "within %" PRId64 " s (behind, in an earlier collective, or issuing "
                             "other collectives)",
                             rs->what, late, troupe_config_timeout_s());
    if (nbehind > 0)
        snprintf(also, sizeof also, "; %s answered but did not reach this collective", late);
    return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                         "%s: %s did not answer within %" PRId64
                         " s (dead or stuck): no fingerprint and no answer to a liveness probe%s",
                         rs->what, quiet, troupe_config_timeout_s(), also);
}

static void s_log_done(troupe__req_t *r, s_rs_t *rs)
{
    int64_t now = troupe_now_ns();
    char shm[192] = "";
    if (rs->use_shm) {
        const troupe__shm_coll_t *c = &rs->shm;
        snprintf(shm, sizeof shm,
                 " (shared memory%s: arrivals %.1f us, reduce %.1f us, departures %.1f us)",
                 !rs->shm_apply     ? ""
                 : r->unshard       ? ", the private side arrays gathered"
                 : r->n_private > 0 ? ", the update on each rank's chunk, its state private"
                                    : ", the update on each rank's chunk",
                 (double)(c->t_arrived_ns - c->t_begin_ns) / 1e3,
                 (double)(c->t_reduced_ns - c->t_arrived_ns) / 1e3,
                 (double)(c->t_done_ns - c->t_reduced_ns) / 1e3);
    }
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT,
               "%s%s: %zu tensors, %" PRId64 " bytes, %zu buckets, %.1f us (fingerprints %.1f us, "
               "queued %.1f us before)%s",
               rs->what, r->unshard ? " (a gather of the sharded state, TROUPE_COLL_UNSHARD)" : "",
               r->n, r->bytes, rs->plan.nbks, (double)(now - rs->t_start_ns) / 1e3,
               (double)(rs->t_data_ns - rs->t_start_ns) / 1e3,
               (double)(rs->t_start_ns - r->submitted_ns) / 1e3, shm);
}

/* With r's fused update and a flat span in shareable memory: side_shm[s] locates side span s
 * when side array s of every tensor lies as the tensors do from the first (else it stays
 * zeroed, and every rank runs the update on every element after the sums: s_fp_agreed). */
/* Whether side array s of every tensor of r lies as the tensors do from the first. */
static bool s_side_laid(const troupe__req_t *r, size_t s)
{
    const char *t0 = r->tensors[0].data, *s0 = r->side[s * r->n];
    bool laid = s0 != NULL;
    for (size_t i = 1; i < r->n && laid; i++)
        laid = (const char *)r->side[s * r->n + i] - s0 == (const char *)r->tensors[i].data - t0;
    return laid;
}

static void s_side_spans(const troupe__req_t *r, const s_rs_t *rs, troupe__shm_ref_t *side_shm)
{
    for (size_t s = 0; s < r->n_side; s++) {
        if (!s_side_laid(r, s) ||
            !troupe__shm_find(r->side[s * r->n], (size_t)rs->span_bytes, &side_shm[s])) {
            memset(side_shm, 0, TROUPE_COLL_APPLY_MAX_SIDE * sizeof *side_shm);
            return;
        }
    }
}

/* Starts the fingerprint exchange with this rank's layout: whether its tensors form one span
 * (the flat plan) and, for an allreduce while shared memory is on, where that span lies in
 * shareable memory (id 0: it does not), and its fused update's side spans (s_side_spans). */
static troupe_status_t s_fp_begin(troupe__req_t *r, s_rs_t *rs)
{
    troupe__shm_ref_t shm = {0}, side_shm[TROUPE_COLL_APPLY_MAX_SIDE] = {{0}};
    rs->flat = troupe__bucket_flat(r, &rs->span, &rs->span_bytes, &rs->span_cls);
    if (rs->flat && r->kind == TROUPE__REQ_ALLREDUCE && troupe__shm_coll_on() &&
        !troupe__shm_find(rs->span, (size_t)rs->span_bytes, &shm))
        memset(&shm, 0, sizeof shm);
    if (shm.id != 0 && r->apply_fn != NULL && rs->span == r->tensors[0].data)
        s_side_spans(r, rs, side_shm);
    return troupe__fp_exchange_start(&rs->fp, &s_a.comm, r, rs->what, rs->flat, &shm, side_shm);
}

/* Whether digest d located every side span of r's fused update (true without one). */
static bool s_sides_shared(const troupe__req_t *r, const troupe__fp_digest_t *d)
{
    for (size_t s = 0; s < r->n_side && r->apply_fn != NULL; s++)
        if (d->side_shm[s].id == 0)
            return false;
    return true;
}

/* The fingerprints agree: decides from every rank's layout (the digests) how the data moves,
 * alike on every rank: the flat plan when every rank's tensors form one span, through shared
 * memory when each such span lies in shareable memory. */
static void s_fp_agreed(const troupe__req_t *r, s_rs_t *rs)
{
    rs->all_flat = rs->fp.mine.flat != 0;
    rs->use_shm = rs->all_flat && rs->fp.mine.shm.id != 0 && troupe__shm_coll_on();
    rs->shm_apply = r->apply_fn != NULL && s_sides_shared(r, &rs->fp.mine);
    for (int p = 0; p < s_a.comm.size; p++) {
        if (!troupe__req_involves(r, p, s_a.comm.rank))
            continue;
        rs->all_flat = rs->all_flat && rs->fp.peer[p].flat != 0;
        rs->use_shm = rs->use_shm && rs->fp.peer[p].shm.id != 0;
        rs->shm_apply = rs->shm_apply && s_sides_shared(r, &rs->fp.peer[p]);
    }
    rs->use_shm = rs->use_shm && rs->all_flat;
    rs->shm_apply = rs->shm_apply && rs->use_shm;
}

/* ---- sharded private side arrays (collective.h, troupe_coll_apply_t n_private) ------------- */

/* A request's identity for the set of sharded requests, the same on every rank (made of what
 * the fingerprints compared): its update, its private side arrays (tensor 0's first one's
 * node: a dp's state nodes are its own, so two dp instances on one model differ), its first
 * and last tensor's nodes and its bytes. 0 when it has no private side arrays. */
static uint64_t s_shard_key(const troupe__req_t *r)
{
    if (r->apply_fn == NULL || r->n_private == 0 || r->n == 0)
        return 0;
    uint64_t v[7] = {r->apply_id, r->n_side, r->n_private, (uint64_t)r->private_node,
                     (uint64_t)r->fp[0].node_id, (uint64_t)r->fp[r->n - 1].node_id,
                     (uint64_t)r->bytes};
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (int i = 0; i < 7; i++) {
        h ^= v[i];
        h *= UINT64_C(0x100000001b3);
        h ^= h >> 29;
    }
    return h | 1; /* never 0 */
}

static size_t s_sharded_find(uint64_t key)
{
    for (size_t i = 0; i < s_a.nsharded; i++)
        if (s_a.sharded[i] == key)
            return i;
    return SIZE_MAX;
}

/* Notes that rs's private side arrays are left sharded (no-op when noted already). */
static troupe_status_t s_sharded_add(const s_rs_t *rs)
{
    if (s_sharded_find(rs->shard_key) != SIZE_MAX)
        return TROUPE_OK;
    if (s_a.nsharded == s_a.sharded_cap) {
        size_t cap = s_a.sharded_cap ? 2 * s_a.sharded_cap : 8;
        uint64_t *v = troupe_realloc(s_a.sharded, cap * sizeof *v);
        if (v == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
        s_a.sharded = v;
        s_a.sharded_cap = cap;
    }
    s_a.sharded[s_a.nsharded++] = rs->shard_key;
    return TROUPE_OK;
}

static void s_sharded_remove(uint64_t key)
{
    size_t i = s_sharded_find(key);
    if (i != SIZE_MAX)
        s_a.sharded[i] = s_a.sharded[--s_a.nsharded];
}

/* r goes through MPI (or shared memory is off) while its private side arrays were left sharded
 * by earlier requests through shared memory: posts an MPI_Iallgatherv of each in place, every
 * rank giving its chunk (troupe__shm_chunk_lo, as shared memory cut them), so that the update
 * after the sums finds them whole. Every rank holds the same sharded set, so either every rank
 * posts or none does. No-op when nothing is sharded. */
static troupe_status_t s_gather_post(troupe__req_t *r, s_rs_t *rs)
{
    if (rs->shard_key == 0 || s_sharded_find(rs->shard_key) == SIZE_MAX)
        return TROUPE_OK;
    int size = s_a.comm.size;
    int64_t units = rs->span_bytes / (int64_t)sizeof(float);
    /* sharded through shared memory, so its tensors and side arrays lay as one span there; the
     * same nodes (the key) lie the same way now, unless re-uploaded elsewhere */
    bool laid = rs->flat && rs->span == r->tensors[0].data;
    for (size_t k = r->n_side - r->n_private; k < r->n_side && laid; k++)
        laid = s_side_laid(r, k);
    if (!laid)
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "%s: cannot gather the optimizer state that shared memory left "
                             "sharded: its arrays no longer lie as the tensors",
                             rs->what);
    if (units > INT_MAX)
        return troupe__error(TROUPE_UNIMPLEMENTED,
                             "%s: cannot gather %" PRId64 " sharded elements in one MPI call",
                             rs->what, units);
    rs->gather_counts = troupe_calloc(2 * (size_t)size, sizeof *rs->gather_counts);
    if (rs->gather_counts == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
    for (int p = 0; p < size; p++) {
        int64_t lo = troupe__shm_chunk_lo(units, sizeof(float), p, size);
        int64_t hi = troupe__shm_chunk_lo(units, sizeof(float), p + 1, size);
        rs->gather_counts[p] = (int)(hi - lo);
        rs->gather_counts[size + p] = (int)lo;
    }
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT,
               "%s: gathering %zu private side array(s) left sharded by shared memory through "
               "MPI_Iallgatherv first",
               rs->what, r->n_private);
    for (size_t k = r->n_side - r->n_private; k < r->n_side; k++) {
        MPI_Request *q = &rs->gather[rs->ngather];
        int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r->side[k * r->n],
                                 rs->gather_counts, rs->gather_counts + size, MPI_FLOAT,
                                 s_a.comm.data, q);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error(rs->what, "MPI_Iallgatherv", rc);
        rs->ngather++;
    }
    s_sharded_remove(rs->shard_key);
    return TROUPE_OK;
}

/* Tests s_gather_post's requests; *done when none is in flight (*progress when they ended). */
static troupe_status_t s_gather_test(s_rs_t *rs, bool *progress, bool *done)
{
    *done = rs->ngather == 0;
    if (*done)
        return TROUPE_OK;
    int flag = 0;
    int rc = MPI_Testall(rs->ngather, rs->gather, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
        return troupe__mpi_error(rs->what, "MPI_Testall", rc);
    if (flag) {
        rs->ngather = 0;
        *progress = *done = true;
    }
    return TROUPE_OK;
}

/* Begins reducing r's span through shared memory (every rank's digest located its span). */
static troupe_status_t s_shm_begin(troupe__req_t *r, s_rs_t *rs)
{
    troupe__shm_ref_t refs[s_a.comm.size];
    for (int p = 0; p < s_a.comm.size; p++)
        refs[p] = p == s_a.comm.rank ? rs->fp.mine.shm : rs->fp.peer[p].shm;
    size_t ub = troupe__cls_size(rs->span_cls);
    if (rs->shm_apply) { /* single precision (collective.c checked) */
        int size = s_a.comm.size;
        troupe__shm_ref_t side_refs[TROUPE_COLL_APPLY_MAX_SIDE * size];
        void *side_mine[TROUPE_COLL_APPLY_MAX_SIDE];
        for (size_t k = 0; k < r->n_side; k++) {
            side_mine[k] = r->side[k * r->n];
            for (int p = 0; p < size; p++)
                side_refs[k * (size_t)size + (size_t)p] =
                    p == s_a.comm.rank ? rs->fp.mine.side_shm[k] : rs->fp.peer[p].side_shm[k];
        }
        /* private side arrays updated here stay sharded until gathered: noted first, so that
         * a later request that goes another way gathers them (s_gather_post) */
        if (r->n_private > 0 && !r->unshard)
            TROUPE_RETURN_IF_ERROR(s_sharded_add(rs));
        return troupe__shm_coll_begin_apply(&rs->shm, rs->what, r->seq + 1, refs,
                                            (void *)rs->span, rs->span_bytes / (int64_t)ub,
                                            r->apply_fn, r->apply_arg, r->n_side, r->n_private,
                                            r->unshard, side_refs, side_mine);
    }
    return troupe__shm_coll_begin(&rs->shm, rs->what, r->seq + 1, refs, (void *)rs->span,
                                  rs->span_bytes / (int64_t)ub, ub,
                                  troupe__cls_red_type(rs->span_cls), r->op);
}

/* Begins r's data through MPI: first a gather of private side arrays left sharded
 * (s_gather_post), then, unless r is only that gather, its buckets (planned once). */
static troupe_status_t s_mpi_begin(troupe__req_t *r, s_rs_t *rs)
{
    TROUPE_RETURN_IF_ERROR(s_gather_post(r, rs));
    if (r->unshard || rs->plan.planned)
        return TROUPE_OK;
    return troupe__bucket_plan(&rs->plan, r, rs->all_flat, rs->what);
}

/* r waits at the head of its lane for its gate (troupe_allreduce_args_t.after: this rank's own
 * events filling its tensors). Its gate gets the deadline of any request (TROUPE_TIMEOUT_S),
 * counted from then: past it r fails with DEADLINE_EXCEEDED naming r, its tensors, the events
 * still pending and the time, as a hang must not be silent. The other ranks wait for r's
 * fingerprint meanwhile; a notice (S_GATE_EXPIRED on the probe tag) tells them, so that they
 * fail r at once naming this rank and why (s_peer_gate_expired), not after their own deadline
 * and a liveness probe this rank no longer answers. Returns whether r failed; else notes its
 * deadline in s_a.gate_due_ns (the engine thread sleeps until then at most). */
static bool s_gate_check(troupe__req_t *r, s_rs_t *rs)
{
    int64_t now = troupe_now_ns();
    if (rs->t_gate_ns == 0)
        rs->t_gate_ns = now;
    int64_t due = rs->t_gate_ns + s_timeout_ns();
    if (now < due) {
        if (s_a.gate_due_ns == 0 || due < s_a.gate_due_ns)
            s_a.gate_due_ns = due;
        return false;
    }
    if (!s_a.broken && !troupe__req_is_p2p(r)) {
        int64_t note[2] = {S_GATE_EXPIRED, (int64_t)r->seq};
        for (int p = 0; p < s_a.comm.size; p++) /* best effort: else their deadlines name us */
            if (p != s_a.comm.rank &&
                troupe__engine_send_ctl(note, sizeof note, p, TROUPE__TAG_PROBE, "gate notice") !=
                    TROUPE_OK)
                break;
    }
    char tensors[256], events[320];
    s_tensor_list(r, tensors, sizeof tensors);
    troupe__gate_describe(r->gate, events, sizeof events);
    troupe__error(TROUPE_DEADLINE_EXCEEDED,
                  "%s of %s: the events filling this rank's tensors did not complete within "
                  "%" PRId64 " s: %s; never started, so the other ranks fail it naming rank %d",
                  rs->what, tensors, troupe_config_timeout_s(), events, s_a.comm.rank);
    s_fail(r, TROUPE_DEADLINE_EXCEEDED, true);
    return true;
}

/* r's fingerprints are incomplete: a rank that has not sent its own told this one that it
 * failed r at its gate (s_gate_check). Then r fails now, with DEADLINE_EXCEEDED naming that
 * rank; else OK. */
static troupe_status_t s_peer_gate_expired(const troupe__req_t *r, s_rs_t *rs)
{
    bool gone[s_a.comm.size];
    int n = 0;
    for (int p = 0; p < s_a.comm.size; p++) {
        gone[p] = p != s_a.comm.rank && troupe__fp_exchange_pending(&rs->fp, p) &&
                  s_a.gate_expired[p] == r->seq + 1;
        n += gone[p];
    }
    if (n == 0)
        return TROUPE_OK;
    char ranks[256];
    s_rank_list(gone, ranks, sizeof ranks);
    return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                         "%s: %s failed it before sending a fingerprint: the events filling its "
                         "tensors there did not complete within %" PRId64
                         " s (that rank's message names them)",
                         rs->what, ranks, troupe_config_timeout_s());
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
        TROUPE_RETURN_IF_ERROR(s_fp_begin(r, rs));
    }
    if (rs->phase == S_PH_FP) {
        bool agreed = false;
        troupe_status_t st = troupe__fp_exchange_poll(&rs->fp, &s_a.comm, r, rs->what, &agreed);
        if (st != TROUPE_OK) {
            *broken = st != TROUPE_FAILED_PRECONDITION;
            return st;
        }
        if (!agreed && !troupe__req_is_p2p(r)) {
            TROUPE_RETURN_IF_ERROR(s_peer_gate_expired(r, rs));
            if (!r->unshard) /* a gather reduces nothing */
                TROUPE_RETURN_IF_ERROR(s_prepack(r, rs));
        }
        if (!agreed) {
            int64_t t = troupe_now_ns();
            if (t < rs->deadline_ns)
                return TROUPE_OK;
            /* Missing fingerprints past the deadline: probe before naming anyone, as the data
             * phase does, so that a rank still busy with an earlier collective is not called
             * dead (tests/cluster: a partition cut while allreduces stream). */
            if (!rs->probing)
                return s_start_probe(r, rs, t);
            return t < rs->probe_end ? TROUPE_OK : s_fp_verdict(rs);
        }
        rs->probing = false;
        s_fp_agreed(r, rs);
        rs->shard_key = s_shard_key(r);
        /* sums through shared memory without the side spans: a gather has nothing to do there,
         * and an update on every rank needs whole state, which only MPI gathers (every rank
         * decides alike: the same agreement and the same sharded set) */
        if (rs->use_shm && !rs->shm_apply &&
            (r->unshard ||
             (rs->shard_key != 0 && s_sharded_find(rs->shard_key) != SIZE_MAX)))
            rs->use_shm = false;
        rs->phase = S_PH_DATA;
        rs->t_data_ns = troupe_now_ns();
        rs->deadline_ns = rs->t_data_ns + s_timeout_ns();
        if (troupe__req_is_p2p(r))
            TROUPE_RETURN_IF_ERROR(s_p2p_post(r, rs));
        else if (rs->use_shm)
            TROUPE_RETURN_IF_ERROR(s_shm_begin(r, rs));
        else
            TROUPE_RETURN_IF_ERROR(s_mpi_begin(r, rs));
    }
    bool progress = false, all = false;
    if (rs->use_shm) {
        TROUPE_RETURN_IF_ERROR(troupe__shm_coll_test(&rs->shm, &progress));
        all = rs->shm.state == TROUPE__SHM_DONE;
        if (all && r->unshard)
            s_sharded_remove(rs->shard_key);
        if (rs->shm.state == TROUPE__SHM_FALLBACK) { /* on every rank alike: the MPI path */
            rs->use_shm = rs->shm_apply = false;
            TROUPE_RETURN_IF_ERROR(s_mpi_begin(r, rs));
        }
    }
    if (troupe__req_is_p2p(r)) {
        TROUPE_RETURN_IF_ERROR(s_p2p_test(rs, &progress, &all));
    } else if (!rs->use_shm) {
        bool gathered = false;
        TROUPE_RETURN_IF_ERROR(s_gather_test(rs, &progress, &gathered));
        if (gathered && r->unshard) {
            all = true;
        } else if (gathered) {
            TROUPE_RETURN_IF_ERROR(s_coll_test(r, rs, &progress));
            TROUPE_RETURN_IF_ERROR(s_coll_post(r, rs));
            all = rs->done_bks == rs->plan.nbks;
        }
    }
    if (!rs->fault_seen && !troupe__req_is_p2p(r) &&
        troupe__fault_armed(TROUPE__FAULT_COLLECTIVE)) {
        rs->fault_seen = true; /* TROUPE_FAULT at this collective: its data is moving */
        troupe__fault_collective(r->seq, rs->what);
    }
    now = troupe_now_ns();
    if (all) {
        /* the MPI paths, or shared memory without the side spans: every rank updates every
         * element after the sums (the same bits everywhere) */
        if (!rs->shm_apply && !r->unshard)
            troupe__req_apply_all(r);
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

/* ---- the status board -------------------------------------------------------------------- */

/* Publishes what the oldest unfinished request waits for on the transport's status-board slot
 * (actors/board_impl.h): which collective, in which phase, for which ranks, since when, and
 * when its deadline fails it. Fingerprints name the ranks whose digests have not arrived; a
 * stalled data phase names the other ranks involved (which of them is slow only a liveness
 * probe tells); a request still gated on its own events (WAITING) names no rank. Written only
 * when something changed. */
static void s_board_publish(void)
{
    troupe__req_t *r = s_a.head;
    int64_t queue = 0;
    for (troupe__req_t *q = s_a.head; q != NULL; q = q->next)
        queue++;
    while (r != NULL && ((s_rs_t *)r->engine_state)->finished)
        r = r->next;
    troupe__board_transport_t t = {.state = TROUPE__BOARD_IDLE, .wait_rank = -1, .queue = queue,
                                   .coll_done = (int64_t)s_a.coll_done};
    char who[256] = "";
    int size = s_a.comm.size;
    if (r != NULL && ((s_rs_t *)r->engine_state)->phase == S_PH_INIT &&
        troupe__gate_closed(r->gate)) {
        /* gated (troupe_allreduce_args_t.after): it waits for this rank's own events that fill
         * its tensors (the staged exchange's copies to the host), not for any peer */
        s_rs_t *rs = r->engine_state;
        t.state = TROUPE__BOARD_WAITING;
        t.wait_on = rs->what;
        t.wait_by = "this rank's events filling its tensors";
        t.coll_active = troupe__req_is_p2p(r) ? 0 : (int64_t)r->seq;
        t.since_ns = rs->t_submit_ns;
        t.verdict_due_ns = rs->t_gate_ns != 0 ? rs->t_gate_ns + s_timeout_ns() : 0;
    } else if (r != NULL) {
        s_rs_t *rs = r->engine_state;
        bool pending[size];
        for (int p = 0; p < size; p++)
            pending[p] = troupe__req_involves(r, p, s_a.comm.rank) &&
                         (rs->phase != S_PH_FP || troupe__fp_exchange_pending(&rs->fp, p));
        for (int p = size - 1; p >= 0; p--)
            t.wait_rank = pending[p] ? p : t.wait_rank;
        if (t.wait_rank >= 0)
            s_rank_list(pending, who, sizeof who);
        t.wait_on = rs->what;
        t.wait_by = who;
        t.coll_active = troupe__req_is_p2p(r) ? 0 : (int64_t)r->seq;
        if (rs->phase == S_PH_FP || rs->phase == S_PH_DATA) { /* both probe past the deadline */
            bool fp = rs->phase == S_PH_FP;
            t.state = rs->probing ? TROUPE__BOARD_PROBING
                      : fp        ? TROUPE__BOARD_FINGERPRINT
                                  : TROUPE__BOARD_DATA;
            t.since_ns = fp ? rs->t_start_ns : rs->deadline_ns - s_timeout_ns(); /* last progress */
            t.verdict_due_ns = rs->probing ? rs->probe_end : rs->deadline_ns + S_PROBE_WINDOW_NS;
        }
    }
    uint64_t sig = (uint64_t)t.state * 0x9e3779b97f4a7c15ULL ^ (uint64_t)t.coll_active << 20 ^
                   (uint64_t)t.coll_done << 40 ^ (uint64_t)t.verdict_due_ns ^
                   (uint64_t)(t.wait_rank + 1) << 8 ^ (uint64_t)queue << 56;
    if (sig == s_a.board_sig)
        return;
    s_a.board_sig = sig;
    troupe__board_set_transport(s_a.board, &t);
}

/* ---- the loop ---------------------------------------------------------------------------- */

/* Completes and frees the finished requests (after this iteration's MPI calls). */
static void s_reap(void)
{
    troupe__req_t **pp = &s_a.head;
    while (*pp != NULL) {
        troupe__req_t *r = *pp;
        s_rs_t *rs = r->engine_state;
        if (!rs->finished) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        r->next = NULL;
        r->engine_state = NULL;
        s_trace_request(r, rs);
        if (!troupe__req_is_p2p(r) && r->seq > s_a.coll_done)
            s_a.coll_done = r->seq;
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

/* How often (loop turns) a busy engine answers probes, reaps control sends and yields the CPU:
 * not every turn, since each costs a few percent of a large allreduce's bandwidth. */
#define S_SERVICE_EVERY 16
#define S_YIELD_EVERY 32
/* A request whose peers have not sent their fingerprints for S_PATIENT_NS is waiting for a
 * slower rank, not for bytes to move: the engine thread then naps S_NAP_NS between turns
 * instead of spinning, so on a machine with fewer cores than busy threads the slower rank's
 * compute gets the core (measured on 2 cores: the spinning engine thread took a third of a rank's
 * CPU time). A helping thread (troupe__engine_progress: a stream or host thread blocked on the
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
    memset(s_a.lane_busy, 0, 1 + 2 * (size_t)s_a.comm.size);
    pthread_mutex_lock(&s_a.mu);
    uint64_t wakes = s_a.gate_wakes;
    pthread_mutex_unlock(&s_a.mu);
    bool finished = false, stepped = false;
    s_a.waiting_on_peers = s_a.head != NULL;
    s_a.waiting_since_ns = 0;
    s_a.gate_due_ns = 0;
    int64_t patient = troupe_now_ns() - S_PATIENT_NS;
    for (troupe__req_t *r = s_a.head; r != NULL; r = r->next) {
        s_rs_t *rs = r->engine_state;
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
        if (rs->phase == S_PH_INIT && troupe__gate_closed(r->gate)) {
            /* its tensors are still being filled; those behind it in its lane wait */
            finished |= !troupe__cluster_is_failed() && s_gate_check(r, rs);
            continue;
        }
        stepped = true;
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
    s_a.all_gated = !stepped && s_a.head != NULL;
    s_a.gated_at = wakes;
    if (turn % S_SERVICE_EVERY == 0 || finished || s_a.all_gated) /* the engine may sleep next */
        s_board_publish();
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
    rs->t_submit_ns = troupe_now_ns();
    r->engine_state = rs;
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

/* Between two turns of the engine: while only slower ranks are awaited, the engine thread naps
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
    } else if (s_a.all_gated) {
        /* every request waits for this rank's own events (the stream copies filling a gated
         * request): give the core to those streams at every turn, not every S_YIELD_EVERY */
        sched_yield();
    } else if (s_a.head != NULL && s_a.turn % S_YIELD_EVERY == 0) {
        sched_yield();
    }
}

static void *s_engine_main(void *arg)
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
        bool gated = s_a.head != NULL && s_a.all_gated && s_a.gated_at == s_a.gate_wakes;
        int64_t gate_left = s_a.gate_due_ns - troupe_now_ns(); /* the gates' deadline */
        if (gated && s_a.gate_due_ns != 0 && gate_left <= 0)
            gated = false; /* a turn fails the request whose gate stayed closed */
        if (in == NULL && (s_a.head == NULL || gated) && !abort_now) {
            s_a.busy = false;
            if (s_a.stop) {
                pthread_mutex_unlock(&s_a.mu);
                break;
            }
            s_a.sleeping = true;
            if (gated && s_a.gate_due_ns != 0)
                s_cond_wait_for(&s_a.cv, gate_left);
            else
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
 * the engine thread is not woken (r->lazy); their event's first consumer starts them
 * (troupe__event_set_progress). A thread that waits for such an event while the engine thread is
 * idle (asleep, nothing in flight) — in troupe_event_sync, or a stream parking on it (measured on
 * bench_train 2x1: context switches 15.5k -> 3.1k per run) — takes the engine over instead of
 * waking the engine thread and sleeping itself: it admits the mailbox, turns the engine (every
 * request in flight, not only its own) until its event completes or its deadline passes, and hands
 * back, waking the engine thread if work is left. That saves both thread wake-ups of the hand-off
 * (about 10 us each here), which dominate small and mid-sized collectives; merely waking the
 * actor at submit, to find the engine taken, cost as much on 2 cores (bench_merge 4 KiB:
 * 16-22 us against 5.7 us without that wake-up). MPI calls stay serialized: busy and helping,
 * under mu, make one thread at a time the engine's owner, and mu orders what each leaves for
 * the next. */
void troupe__engine_progress(troupe_event_t *ev, int64_t deadline_ns)
{
    pthread_mutex_lock(&s_a.mu);
    if (deadline_ns == TROUPE__EVENT_KICK || !s_a.running || !s_a.accepting || s_a.exited ||
        s_a.stop || s_a.busy || s_a.helping) {
        /* the engine thread (or another helping thread, which admits the mailbox every turn) drives
         */
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
            break; /* the engine thread aborts or drains; or nothing is in flight */
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

/* The per-peer vectors troupe__engine_start allocates. */
static void s_free_peer_arrays(void)
{
    troupe_free(s_a.send_seq);
    troupe_free(s_a.recv_seq);
    troupe_free(s_a.last_pong_ns);
    troupe_free(s_a.gate_expired);
    troupe_free(s_a.lane_busy);
    troupe_free(s_a.sharded);
    s_a.sharded = NULL;
    s_a.nsharded = s_a.sharded_cap = 0;
    s_a.send_seq = s_a.recv_seq = NULL;
    s_a.last_pong_ns = NULL;
    s_a.gate_expired = NULL;
    s_a.lane_busy = NULL;
}

troupe_status_t troupe__engine_start(const void *data_comm, const void *ctl_comm, int rank,
                                     int size)
{
    if (s_a.running)
        return troupe__error(TROUPE_INTERNAL, "transport: the engine already runs");
    s_a.comm.data = *(const MPI_Comm *)data_comm;
    s_a.comm.ctl = *(const MPI_Comm *)ctl_comm;
    s_a.comm.rank = rank;
    s_a.comm.size = size;
    s_a.head = NULL;
    s_a.broken = false;
    s_a.probe_posted = false;
    /* collective (every rank calls it whatever fails here after): first */
    TROUPE_RETURN_IF_ERROR(troupe__shm_coll_start(data_comm, rank, size));
    s_a.send_seq = troupe_calloc((size_t)size, sizeof *s_a.send_seq);
    s_a.recv_seq = troupe_calloc((size_t)size, sizeof *s_a.recv_seq);
    s_a.last_pong_ns = troupe_calloc((size_t)size, sizeof *s_a.last_pong_ns);
    s_a.gate_expired = troupe_calloc((size_t)size, sizeof *s_a.gate_expired);
    s_a.lane_busy = troupe_calloc(1 + 2 * (size_t)size, 1);
    /* room for the sharded set up front: growing it can fail on one rank alone, which fails
     * that rank's request while the others wait for their deadline */
    s_a.sharded_cap = 16;
    s_a.nsharded = 0;
    s_a.sharded = troupe_calloc(s_a.sharded_cap, sizeof *s_a.sharded);
    if (s_a.send_seq == NULL || s_a.recv_seq == NULL || s_a.last_pong_ns == NULL ||
        s_a.gate_expired == NULL || s_a.lane_busy == NULL || s_a.sharded == NULL) {
        troupe__error(TROUPE_RESOURCE_EXHAUSTED, "transport: out of memory");
        goto free_peers;
    }
    for (int p = 0; p < size; p++)
        s_a.last_pong_ns[p] = INT64_MIN;
    s_a.coll_seq = 0;
    s_a.coll_done = 0;
    s_a.gate_due_ns = 0;
    s_a.board_sig = 0;
    s_a.board = troupe__board_claim(TROUPE__BOARD_TRANSPORT, "transport", NULL, NULL);
    s_a.turn = 0;
    s_a.stop = s_a.abort_now = s_a.exited = s_a.sleeping = false;
    s_a.busy = s_a.helping = false;
    int rc = pthread_create(&s_a.thread, NULL, s_engine_main, NULL);
    if (rc != 0) {
        char es[128];
        troupe__error(TROUPE_RESOURCE_EXHAUSTED, "transport: pthread_create: %s",
                      strerror_r(rc, es, sizeof es)); /* GNU: returns the text */
        goto free_peers;
    }
    pthread_mutex_lock(&s_a.mu);
    s_a.running = true;
    s_a.accepting = true;
    pthread_mutex_unlock(&s_a.mu);
    return TROUPE_OK;
free_peers: /* and shared memory, which started first */
    troupe__board_release(&s_a.board);
    s_free_peer_arrays();
    troupe__shm_coll_stop();
    return TROUPE_RESOURCE_EXHAUSTED;
}

bool troupe__engine_stop(bool drain, int64_t timeout_ns)
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
        s_cond_wait_for(&s_a.exit_cv, left);
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
    troupe__board_release(&s_a.board);
    return true;
}

bool troupe__engine_running(void)
{
    pthread_mutex_lock(&s_a.mu);
    bool on = s_a.accepting;
    pthread_mutex_unlock(&s_a.mu);
    return on;
}
void troupe__engine_wake(void)
{
    pthread_mutex_lock(&s_a.mu);
    s_a.gate_wakes++;
    if (s_a.sleeping && !s_a.helping)
        pthread_cond_signal(&s_a.cv);
    pthread_mutex_unlock(&s_a.mu);
}

void troupe__engine_submit(troupe__req_t **r_p)
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
    troupe__board_set_issued(s_a.board, (int64_t)s_a.coll_seq);
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

#else /* !TROUPE_HAVE_MPI: a single-rank cluster has no engine */

void troupe__engine_progress(troupe_event_t *ev, int64_t deadline_ns)
{
    (void)ev;
    (void)deadline_ns;
}

troupe_status_t troupe__engine_start(const void *data_comm, const void *ctl_comm, int rank,
                                     int size)
{
    (void)data_comm;
    (void)ctl_comm;
    (void)rank;
    (void)size;
    return troupe__error(TROUPE_UNIMPLEMENTED, "transport: troupe was built without MPI");
}

bool troupe__engine_stop(bool drain, int64_t timeout_ns)
{
    (void)drain;
    (void)timeout_ns;
    return true;
}

bool troupe__engine_running(void)
{
    return false;
}

void troupe__engine_wake(void)
{
}

void troupe__engine_submit(troupe__req_t **r_p)
{
    troupe__req_finish(r_p, TROUPE_FAILED_PRECONDITION,
                       "transport: troupe was built without MPI (single rank)");
}

#endif
