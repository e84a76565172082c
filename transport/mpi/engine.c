/* troupe — the transport engine (docs/architecture.md §3, §8; transport_impl.h, The engine): the
 * only code that calls MPI between troupe_cluster_init and troupe_cluster_finalize
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
 *   2. data (engine_coll.c): fusion buckets (bucket.c) with up to two in flight —
 *      MPI_Iallreduce/MPI_Ibcast, or troupe's ring (ring.c) — the next one packed while the
 *      previous moves; or the shared-memory allreduce of the whole span (shm_allreduce.c; with
 *      a fused update, apply.c); point-to-point (engine_p2p.c): Isend/Irecv slices. When
 *      nothing completes for the deadline, a liveness probe (engine_probe.c: PING to the ranks
 *      involved, PONG back, 2 s) names the ranks that did not answer.
 *   3. the request's event completes, after this turn's MPI calls, so a host thread woken by
 *      it never calls MPI while the engine still does (bench/merge relies on it).
 * A gated request (collective.h `after`) waits before 1. for this rank's own events, with the
 * same deadline (engine_probe.c); past it, it fails and tells the other ranks (S_GATE_EXPIRED on
 * the probe tag), which fail it at once naming this rank.
 * After a failure the cluster is failed: later requests fail at once. After a deadline or an
 * MPI error the engine makes no further MPI calls (a dead peer can make any of them hang).
 *
 * This file holds the mailbox, the loop, a request's life and start/stop; engine_coll.c,
 * engine_p2p.c, engine_probe.c and apply.c each hold one concern (engine_impl.h).
 *
 * Thread safety: troupe__engine_submit, _wake, _running, _progress, _start and _stop from any
 * thread; the rest by the engine's owner only (busy/helping under the mutex say which thread).
 * Ownership: a submitted request belongs to the engine until it completes the request's event
 * and frees it (s_reap).
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

#if TROUPE_HAVE_MPI

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
    troupe__req_t *head; /* active list, issue order */
    unsigned char *lane_busy;
    troupe__board_slot_t *board; /* the transport's status-board slot (s_board_publish) */
    uint64_t coll_done;          /* the last collective that completed */
    uint64_t board_sig;          /* what was last published there */
    /* every request in flight waited for its gate at the last turn (s_iteration), which began
     * when gate_wakes was gated_at: the engine thread then sleeps until a gate opens */
    bool all_gated;
    uint64_t gated_at;
    uint64_t gate_wakes;      /* under mu: troupe__engine_wake calls */
    bool waiting_on_peers;    /* every active request waits for slower ranks (s_iteration) */
    int64_t waiting_since_ns; /* then: when the newest of them started */
} s_a = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
    .exit_cv = PTHREAD_COND_INITIALIZER,
};

/* the engine's owner only (engine_impl.h) */
troupe__engine_shared_t troupe__eng;

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

int64_t troupe__engine_timeout_ns(void)
{
    return troupe_config_timeout_s() * TROUPE__NS_PER_S;
}

void troupe__engine_finish(troupe__req_t *r, troupe_status_t st, const char *msg)
{
    troupe__rs_t *rs = r->engine_state;
    if (rs->finished)
        return;
    rs->finished = true;
    rs->fin = st;
    if (st != TROUPE_OK)
        rs->fin_msg = troupe_strdup(msg != NULL ? msg : troupe_status_str(st));
}

/* Fails r with the status and message troupe__error just recorded and fails the cluster. */
void troupe__engine_fail(troupe__req_t *r, troupe_status_t st, bool comm_broken)
{
    const char *msg = troupe_last_error();
    /* troupe__cluster_fail logs the first failure (once); this one may only repeat it. */
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT, "%s", msg);
    troupe__cluster_fail(st, msg, comm_broken);
    if (st == TROUPE_DEADLINE_EXCEEDED)
        troupe__board_deadline_hit(st); /* the control plane logs the hang report */
    if (comm_broken)
        troupe__eng.broken = true;
    troupe__engine_finish(r, st, troupe_last_error());
}

/* Waits on cv (mu held) for at most left_ns, and at most a second (a clock step bounds the
 * error). */
static void s_cond_wait_for(pthread_cond_t *cv, int64_t left_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = (int64_t)ts.tv_nsec + (left_ns < TROUPE__NS_PER_S ? left_ns : TROUPE__NS_PER_S);
    ts.tv_sec += (time_t)(ns / TROUPE__NS_PER_S);
    ts.tv_nsec = (long)(ns % TROUPE__NS_PER_S);
    pthread_cond_timedwait(cv, &s_a.mu, &ts);
}

/* ---- state of a request ------------------------------------------------------------------ */

static void s_rs_free(troupe__rs_t *rs)
{
    if (rs == NULL)
        return;
    troupe__fp_exchange_free(&rs->fp, troupe__eng.comm.size);
    troupe__engine_coll_release(rs);
    troupe__shm_coll_free(&rs->shm);
    troupe__bucket_plan_free(&rs->plan);
    troupe__apply_free(rs);
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

/* A request leaving the engine: its span from arrival (submission) to completion, on the
 * collectives' (or point-to-point) timeline, and its phases. */
static void s_trace_request(const troupe__req_t *r, const troupe__rs_t *rs)
{
    if (!troupe__trace_on())
        return;
    int64_t now = troupe_now_ns();
    bool p2p = troupe__req_is_p2p(r);
    const char *path = p2p ? "p2p" : troupe__engine_coll_path(r, rs);
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

/* ---- one request ------------------------------------------------------------------------- */

static void s_log_done(troupe__req_t *r, troupe__rs_t *rs)
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
               "%s%s: %zu tensors, %" PRId64 " bytes, %zu buckets%s, %.1f us (fingerprints %.1f "
               "us, queued %.1f us before)%s",
               rs->what, r->unshard ? " (a gather of the sharded state, TROUPE_COLL_UNSHARD)" : "",
               r->n, r->bytes, rs->plan.nbks,
               rs->scatter ? " (a reduce-scatter of the shards, then the parameters' gather)" : "", (double)(now - rs->t_start_ns) / 1e3,
               (double)(rs->t_data_ns - rs->t_start_ns) / 1e3,
               (double)(rs->t_start_ns - r->submitted_ns) / 1e3, shm);
}

/* Starts the fingerprint exchange with this rank's layout: whether its tensors form one span
 * (the flat plan) and, for an allreduce while shared memory is on, where that span lies in
 * shareable memory (id 0: it does not), and its fused update's side spans
 * (troupe__apply_side_spans). */
static troupe_status_t s_fp_begin(troupe__req_t *r, troupe__rs_t *rs)
{
    troupe__shm_ref_t shm = {0}, side_shm[TROUPE_COLL_APPLY_MAX_SIDE] = {{0}};
    rs->flat = troupe__bucket_flat(r, &rs->span, &rs->span_bytes, &rs->span_cls);
    if (rs->flat && r->kind == TROUPE__REQ_ALLREDUCE && troupe__shm_coll_on() &&
        !troupe__shm_find(rs->span, (size_t)rs->span_bytes, &shm))
        memset(&shm, 0, sizeof shm);
    if (shm.id != 0 && r->apply_fn != NULL && rs->span == r->tensors[0].data)
        troupe__apply_side_spans(r, rs, side_shm);
    return troupe__fp_exchange_start(&rs->fp, &troupe__eng.comm, r, rs->what, rs->flat, &shm,
                                     side_shm);
}

/* The fingerprints agree: decides from every rank's layout (the digests) how the data moves,
 * alike on every rank: the flat plan when every rank's tensors form one span, through shared
 * memory when each such span lies in shareable memory. */
static void s_fp_agreed(const troupe__req_t *r, troupe__rs_t *rs)
{
    rs->all_flat = rs->fp.mine.flat != 0;
    rs->use_shm = rs->all_flat && rs->fp.mine.shm.id != 0 && troupe__shm_coll_on();
    rs->shm_apply = r->apply_fn != NULL && troupe__apply_sides_shared(r, &rs->fp.mine);
    for (int p = 0; p < troupe__eng.comm.size; p++) {
        if (!troupe__req_involves(r, p, troupe__eng.comm.rank))
            continue;
        rs->all_flat = rs->all_flat && rs->fp.peer[p].flat != 0;
        rs->use_shm = rs->use_shm && rs->fp.peer[p].shm.id != 0;
        rs->shm_apply = rs->shm_apply && troupe__apply_sides_shared(r, &rs->fp.peer[p]);
    }
    rs->use_shm = rs->use_shm && rs->all_flat;
    rs->shm_apply = rs->shm_apply && rs->use_shm;
}

/* Advances r; on failure returns its status (the message recorded) and whether MPI broke. */
static troupe_status_t s_step(troupe__req_t *r, troupe__rs_t *rs, bool *broken)
{
    int64_t now = troupe_now_ns();
    *broken = true;
    if (rs->phase == TROUPE__PH_INIT) {
        rs->t_start_ns = now;
        rs->deadline_ns = now + troupe__engine_timeout_ns();
        rs->phase = TROUPE__PH_FP;
        TROUPE_RETURN_IF_ERROR(s_fp_begin(r, rs));
    }
    if (rs->phase == TROUPE__PH_FP) {
        bool agreed = false;
        troupe_status_t st =
            troupe__fp_exchange_poll(&rs->fp, &troupe__eng.comm, r, rs->what, &agreed);
        if (st != TROUPE_OK) {
            *broken = st != TROUPE_FAILED_PRECONDITION;
            return st;
        }
        if (!agreed && !troupe__req_is_p2p(r)) {
            TROUPE_RETURN_IF_ERROR(troupe__engine_peer_gate_expired(r, rs));
            if (!r->unshard) /* a gather reduces nothing */
                TROUPE_RETURN_IF_ERROR(troupe__engine_coll_prepack(r, rs));
        }
        if (!agreed) {
            int64_t t = troupe_now_ns();
            if (t < rs->deadline_ns)
                return TROUPE_OK;
            /* Missing fingerprints past the deadline: probe before naming anyone, as the data
             * phase does, so that a rank still busy with an earlier collective is not called
             * dead (tests/cluster: a partition cut while allreduces stream). */
            if (!rs->probing)
                return troupe__engine_probe_start(r, rs, t);
            return t < rs->probe_end ? TROUPE_OK : troupe__engine_probe_fp_verdict(rs);
        }
        rs->probing = false;
        s_fp_agreed(r, rs);
        troupe__apply_agreed(r, rs);
        rs->phase = TROUPE__PH_DATA;
        rs->t_data_ns = troupe_now_ns();
        rs->deadline_ns = rs->t_data_ns + troupe__engine_timeout_ns();
        if (troupe__req_is_p2p(r))
            TROUPE_RETURN_IF_ERROR(troupe__engine_p2p_post(r, rs));
        else if (rs->use_shm)
            TROUPE_RETURN_IF_ERROR(troupe__engine_coll_shm_begin(r, rs));
        else
            TROUPE_RETURN_IF_ERROR(troupe__engine_coll_mpi_begin(r, rs));
    }
    bool progress = false, all = false;
    if (rs->shard_posted) { /* sharded state: the updated parameters' gather */
        TROUPE_RETURN_IF_ERROR(troupe__apply_gather_test(rs, &progress, &all));
        if (all)
            troupe__apply_shard_done(r, rs);
    } else if (rs->use_shm) {
        TROUPE_RETURN_IF_ERROR(troupe__shm_coll_test(&rs->shm, &progress));
        all = rs->shm.state == TROUPE__SHM_DONE;
        if (all)
            troupe__apply_shm_done(r, rs);
        if (rs->shm.state == TROUPE__SHM_FALLBACK) { /* on every rank alike: the MPI path */
            rs->use_shm = rs->shm_apply = false;
            TROUPE_RETURN_IF_ERROR(troupe__engine_coll_mpi_begin(r, rs));
        }
    }
    if (troupe__req_is_p2p(r)) {
        TROUPE_RETURN_IF_ERROR(troupe__engine_p2p_test(rs, &progress, &all));
    } else if (!rs->use_shm && !rs->shard_posted) {
        bool gathered = false;
        TROUPE_RETURN_IF_ERROR(troupe__apply_gather_test(rs, &progress, &gathered));
        if (gathered && r->unshard) {
            all = true;
        } else if (gathered && rs->scatter) { /* sharded state: this rank's shard's sums */
            TROUPE_RETURN_IF_ERROR(troupe__engine_coll_scatter_test(r, rs, &progress, &all));
        } else if (gathered) {
            TROUPE_RETURN_IF_ERROR(troupe__engine_coll_test(r, rs, &progress));
            TROUPE_RETURN_IF_ERROR(troupe__engine_coll_post(r, rs));
            all = rs->done_bks == rs->plan.nbks;
        }
    }
    if (!rs->fault_seen && !troupe__req_is_p2p(r) &&
        troupe__fault_armed(TROUPE__FAULT_COLLECTIVE)) {
        rs->fault_seen = true; /* TROUPE_FAULT at this collective: its data is moving */
        troupe__fault_collective(r->seq, rs->what);
    }
    now = troupe_now_ns();
    if (all && r->nshard > 0 && !rs->shm_apply && !rs->shard_posted && !r->unshard) {
        /* sharded state off the shared-memory update: this rank updates its shard from the
         * sums (the reduce-scatter's, or the buckets' allreduce where the span is not flat),
         * then gathers everyone's updated parameters */
        troupe__req_apply_all(r);
        TROUPE_RETURN_IF_ERROR(troupe__apply_shard_post(r, rs));
        all = false;
        progress = true;
    }
    if (all) {
        /* the MPI paths, or shared memory without the side spans: every rank updates every
         * element after the sums (the same bits everywhere) */
        if (!rs->shm_apply && !r->unshard && r->nshard == 0)
            troupe__req_apply_all(r);
        s_log_done(r, rs);
        troupe__engine_finish(r, TROUPE_OK, NULL);
        return TROUPE_OK;
    }
    if (progress) {
        rs->deadline_ns = now + troupe__engine_timeout_ns();
        rs->probing = false;
    } else if (!rs->probing && now >= rs->deadline_ns) {
        TROUPE_RETURN_IF_ERROR(troupe__engine_probe_start(r, rs, now));
    } else if (rs->probing && now >= rs->probe_end) {
        return troupe__engine_probe_verdict(r, rs);
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
    while (r != NULL && ((troupe__rs_t *)r->engine_state)->finished)
        r = r->next;
    troupe__board_transport_t t = {.state = TROUPE__BOARD_IDLE,
                                   .wait_rank = -1,
                                   .queue = queue,
                                   .coll_done = (int64_t)s_a.coll_done};
    char who[256] = "";
    int size = troupe__eng.comm.size;
    if (r != NULL && ((troupe__rs_t *)r->engine_state)->phase == TROUPE__PH_INIT &&
        troupe__gate_closed(r->gate)) {
        /* gated (troupe_allreduce_args_t.after): it waits for this rank's own events that fill
         * its tensors (the staged exchange's copies to the host), not for any peer */
        troupe__rs_t *rs = r->engine_state;
        t.state = TROUPE__BOARD_WAITING;
        t.wait_on = rs->what;
        t.wait_by = "this rank's events filling its tensors";
        t.coll_active = troupe__req_is_p2p(r) ? 0 : (int64_t)r->seq;
        t.since_ns = rs->t_submit_ns;
        t.verdict_due_ns = rs->t_gate_ns != 0 ? rs->t_gate_ns + troupe__engine_timeout_ns() : 0;
    } else if (r != NULL) {
        troupe__rs_t *rs = r->engine_state;
        bool pending[size];
        for (int p = 0; p < size; p++)
            pending[p] = troupe__req_involves(r, p, troupe__eng.comm.rank) &&
                         (rs->phase != TROUPE__PH_FP || troupe__fp_exchange_pending(&rs->fp, p));
        for (int p = size - 1; p >= 0; p--)
            t.wait_rank = pending[p] ? p : t.wait_rank;
        if (t.wait_rank >= 0)
            troupe__engine_rank_list(pending, size, who, sizeof who);
        t.wait_on = rs->what;
        t.wait_by = who;
        t.coll_active = troupe__req_is_p2p(r) ? 0 : (int64_t)r->seq;
        if (rs->phase == TROUPE__PH_FP ||
            rs->phase == TROUPE__PH_DATA) { /* both probe past the deadline */
            bool fp = rs->phase == TROUPE__PH_FP;
            t.state = rs->probing ? TROUPE__BOARD_PROBING
                      : fp        ? TROUPE__BOARD_FINGERPRINT
                                  : TROUPE__BOARD_DATA;
            t.since_ns = fp ? rs->t_start_ns
                            : rs->deadline_ns - troupe__engine_timeout_ns(); /* last progress */
            t.verdict_due_ns =
                rs->probing ? rs->probe_end : rs->deadline_ns + TROUPE__PROBE_WINDOW_NS;
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
        troupe__rs_t *rs = r->engine_state;
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
        troupe__engine_finish(r, st, msg);
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
    memset(s_a.lane_busy, 0, 1 + 2 * (size_t)troupe__eng.comm.size);
    pthread_mutex_lock(&s_a.mu);
    uint64_t wakes = s_a.gate_wakes;
    pthread_mutex_unlock(&s_a.mu);
    bool finished = false, stepped = false;
    s_a.waiting_on_peers = s_a.head != NULL;
    s_a.waiting_since_ns = 0;
    troupe__eng.gate_due_ns = 0;
    int64_t patient = troupe_now_ns() - S_PATIENT_NS;
    for (troupe__req_t *r = s_a.head; r != NULL; r = r->next) {
        troupe__rs_t *rs = r->engine_state;
        if (rs->finished)
            continue;
        if (rs->phase != TROUPE__PH_FP || rs->t_start_ns > patient)
            s_a.waiting_on_peers = false;
        if (rs->t_start_ns > s_a.waiting_since_ns)
            s_a.waiting_since_ns = rs->t_start_ns;
        size_t lane = s_lane(r);
        if (s_a.lane_busy[lane])
            continue;
        s_a.lane_busy[lane] = 1;
        if (rs->phase == TROUPE__PH_INIT && troupe__gate_closed(r->gate)) {
            /* its tensors are still being filled; those behind it in its lane wait */
            finished |= !troupe__cluster_is_failed() && troupe__engine_gate_check(r, rs);
            continue;
        }
        stepped = true;
        if (troupe__cluster_is_failed()) {
            troupe_status_t cst = troupe__cluster_failure(cmsg, sizeof cmsg);
            troupe__engine_finish(r, cst, cmsg);
            continue;
        }
        bool broken = false;
        troupe_status_t st = s_step(r, rs, &broken);
        if (st != TROUPE_OK)
            troupe__engine_fail(r, st, broken);
        finished |= rs->finished;
    }
    if (!troupe__eng.broken && !troupe__cluster_is_failed() &&
        (turn % S_SERVICE_EVERY == 0 || finished)) {
        troupe_status_t st = troupe__engine_probe_service();
        if (st != TROUPE_OK) {
            troupe__cluster_fail(st, troupe_last_error(), true);
            troupe__eng.broken = true;
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
    troupe__rs_t *rs = troupe_calloc(1, sizeof *rs);
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
    if (troupe__eng.broken || troupe__cluster_failure(NULL, 0) == TROUPE_DEADLINE_EXCEEDED ||
        troupe__cluster_failure(NULL, 0) == TROUPE_TRANSPORT_ERROR)
        return;
    troupe__engine_probe_drain(s_a.coll_seq);
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
    troupe_status_t st = troupe__engine_probe_open();
    if (st != TROUPE_OK) {
        troupe__cluster_fail(st, troupe_last_error(), true);
        troupe__eng.broken = true;
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
        int64_t gate_left = troupe__eng.gate_due_ns - troupe_now_ns(); /* the gates' deadline */
        if (gated && troupe__eng.gate_due_ns != 0 && gate_left <= 0)
            gated = false; /* a turn fails the request whose gate stayed closed */
        if (in == NULL && (s_a.head == NULL || gated) && !abort_now) {
            s_a.busy = false;
            if (s_a.stop) {
                pthread_mutex_unlock(&s_a.mu);
                break;
            }
            s_a.sleeping = true;
            if (gated && troupe__eng.gate_due_ns != 0)
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
    troupe_free(s_a.lane_busy);
    s_a.send_seq = s_a.recv_seq = NULL;
    s_a.lane_busy = NULL;
    troupe__engine_probe_stop();
    troupe__apply_stop();
}

troupe_status_t troupe__engine_start(const void *data_comm, const void *ctl_comm, int rank,
                                     int size)
{
    if (s_a.running)
        return troupe__error(TROUPE_INTERNAL, "transport: the engine already runs");
    troupe__eng.comm.data = *(const MPI_Comm *)data_comm;
    troupe__eng.comm.ctl = *(const MPI_Comm *)ctl_comm;
    troupe__eng.comm.rank = rank;
    troupe__eng.comm.size = size;
    s_a.head = NULL;
    troupe__eng.broken = false;
    /* collective (every rank calls it whatever fails here after): first */
    TROUPE_RETURN_IF_ERROR(troupe__shm_coll_start(data_comm, rank, size));
    s_a.send_seq = troupe_calloc((size_t)size, sizeof *s_a.send_seq);
    s_a.recv_seq = troupe_calloc((size_t)size, sizeof *s_a.recv_seq);
    s_a.lane_busy = troupe_calloc(1 + 2 * (size_t)size, 1);
    /* the probes' per-peer records (probe_init), and room for the sharded set up front
     * (apply_init): growing it can fail on one rank alone, which fails that rank's request while
     * the others wait for their deadline */
    bool probes = troupe__engine_probe_init(size);
    bool sharded = troupe__apply_init();
    if (s_a.send_seq == NULL || s_a.recv_seq == NULL || s_a.lane_busy == NULL || !probes ||
        !sharded) {
        troupe__error(TROUPE_RESOURCE_EXHAUSTED, "transport: out of memory");
        goto free_peers;
    }
    s_a.coll_seq = 0;
    s_a.coll_done = 0;
    troupe__eng.gate_due_ns = 0;
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
    troupe__engine_coll_stop();
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
