/* troupe — the transport engine's liveness (engine_impl.h, the engine's own files): small control
 * sends (fingerprints, PING, PONG, gate notices) and the buffers they own, liveness probes that
 * tell a dead or stuck rank from one that is merely behind, a gated request's deadline, and the
 * verdicts that name the ranks when a deadline passes (docs/architecture.md §8).
 *
 * Protocol on the control communicator's probe tag: {PING, stamp} asks for {PONG, stamp};
 * {GATE_EXPIRED, seq} tells every rank that this one failed collective #seq at its gate
 * (troupe__engine_gate_check), so that they fail it at once naming this rank
 * (troupe__engine_peer_gate_expired), not after their own deadline and a probe this rank no
 * longer answers.
 *
 * Thread safety: the engine's owner only (engine.c).
 * Ownership: the control sends' copies and the per-peer records belong to this file, from
 * troupe__engine_probe_init to troupe__engine_probe_stop.
 */
#include "troupe_config.h"

#include "transport/mpi/engine_impl.h"
#include "transport/mpi/transport_impl.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "base/vec.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#if TROUPE_HAVE_MPI

#define S_PING 1
#define S_PONG 2
#define S_GATE_EXPIRED 3 /* {S_GATE_EXPIRED, seq}: this rank failed collective #seq at its gate */
#define S_BYE 4          /* {S_BYE, n}: this rank stopped its transport after n collectives */

#define S_DRAIN_NS (2LL * TROUPE__NS_PER_S) /* at stop: how long to wait for small sends */

/* A small control send in flight (fingerprint, PING, PONG) and the buffer it owns. */
typedef struct s_send {
    MPI_Request req;
    void *buf;
} s_send_t;

static struct {
    MPI_Request probe_req;
    int64_t probe_buf[2];
    bool probe_posted;
    s_send_t *sends;
    size_t nsends, sends_cap;
    int64_t *last_pong_ns;  /* [size] */
    uint64_t *gate_expired; /* [size]: 1 + the collective rank p failed at its gate, 0 none */
    uint64_t *departed;     /* [size]: 1 + the collectives rank p issued before it stopped, 0 */
} s_p;

bool troupe__engine_probe_init(int size)
{
    s_p.probe_posted = false;
    s_p.last_pong_ns = troupe_calloc((size_t)size, sizeof *s_p.last_pong_ns);
    s_p.gate_expired = troupe_calloc((size_t)size, sizeof *s_p.gate_expired);
    s_p.departed = troupe_calloc((size_t)size, sizeof *s_p.departed);
    if (s_p.last_pong_ns == NULL || s_p.gate_expired == NULL || s_p.departed == NULL)
        return false;
    for (int p = 0; p < size; p++)
        s_p.last_pong_ns[p] = INT64_MIN;
    return true;
}

void troupe__engine_probe_stop(void)
{
    for (size_t i = 0; i < s_p.nsends; i++)
        troupe_free(s_p.sends[i].buf); /* only left after a failure: never reused */
    troupe_free(s_p.sends);
    s_p.sends = NULL;
    s_p.nsends = s_p.sends_cap = 0;
    troupe_free(s_p.last_pong_ns);
    troupe_free(s_p.gate_expired);
    troupe_free(s_p.departed);
    s_p.last_pong_ns = NULL;
    s_p.gate_expired = NULL;
    s_p.departed = NULL;
}

troupe_status_t troupe__engine_send_ctl(const void *data, size_t size, int dest, int tag,
                                        const char *what)
{
    if (!TROUPE__VEC_RESERVE(s_p.sends, s_p.sends_cap, s_p.nsends + 1))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    void *buf = troupe_malloc(size ? size : 1);
    if (buf == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    memcpy(buf, data, size);
    s_send_t *s = &s_p.sends[s_p.nsends];
    int rc = MPI_Isend(buf, (int)size, MPI_BYTE, dest, tag, troupe__eng.comm.ctl, &s->req);
    if (rc != MPI_SUCCESS) {
        troupe_free(buf);
        return troupe__mpi_error(what, "MPI_Isend", rc);
    }
    s->buf = buf;
    s_p.nsends++;
    return TROUPE_OK;
}

/* Tests the control sends; frees the finished ones. */
static troupe_status_t s_test_sends(void)
{
    for (size_t i = 0; i < s_p.nsends;) {
        int flag = 0;
        int rc = MPI_Test(&s_p.sends[i].req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error("transport", "MPI_Test (control send)", rc);
        if (flag) {
            troupe_free(s_p.sends[i].buf);
            s_p.sends[i] = s_p.sends[--s_p.nsends];
        } else {
            i++;
        }
    }
    return TROUPE_OK;
}

troupe_status_t troupe__engine_probe_open(void)
{
    int rc = MPI_Irecv(s_p.probe_buf, (int)sizeof s_p.probe_buf, MPI_BYTE, MPI_ANY_SOURCE,
                       TROUPE__TAG_PROBE, troupe__eng.comm.ctl, &s_p.probe_req);
    if (rc != MPI_SUCCESS)
        return troupe__mpi_error("transport", "MPI_Irecv (probe)", rc);
    s_p.probe_posted = true;
    return TROUPE_OK;
}

/* Answers PINGs with PONGs and records PONGs, up to a few per call. */
static troupe_status_t s_service_probes(void)
{
    for (int k = 0; k < 16 && s_p.probe_posted; k++) {
        int flag = 0;
        MPI_Status st;
        int rc = MPI_Test(&s_p.probe_req, &flag, &st);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error("transport", "MPI_Test (probe)", rc);
        if (!flag)
            break;
        s_p.probe_posted = false;
        int src = st.MPI_SOURCE;
        int64_t msg[2] = {s_p.probe_buf[0], s_p.probe_buf[1]};
        if (src >= 0 && src < troupe__eng.comm.size) {
            if (msg[0] == S_PING) {
                int64_t pong[2] = {S_PONG, msg[1]};
                TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT, "probe from rank %d: PONG", src);
                TROUPE_RETURN_IF_ERROR(
                    troupe__engine_send_ctl(pong, sizeof pong, src, TROUPE__TAG_PROBE, "PONG"));
            } else if (msg[0] == S_PONG) {
                s_p.last_pong_ns[src] = troupe_now_ns();
            } else if (msg[0] == S_GATE_EXPIRED && msg[1] >= 0) {
                s_p.gate_expired[src] = (uint64_t)msg[1] + 1;
                s_p.last_pong_ns[src] = troupe_now_ns(); /* alive */
            } else if (msg[0] == S_BYE && msg[1] >= 0) {
                s_p.departed[src] = (uint64_t)msg[1] + 1;
                TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT,
                           "rank %d stopped its transport after %" PRId64 " collectives", src,
                           msg[1]);
            }
        }
        TROUPE_RETURN_IF_ERROR(troupe__engine_probe_open());
    }
    return TROUPE_OK;
}

troupe_status_t troupe__engine_probe_service(void)
{
    troupe_status_t st = s_service_probes();
    if (st == TROUPE_OK)
        st = s_test_sends();
    return st;
}

void troupe__engine_rank_list(const bool *bad, int size, char *buf, size_t cap)
{
    int count = 0;
    for (int r = 0; r < size; r++)
        count += bad[r];
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    troupe__strbuf_puts(&sb, count == 1 ? "rank " : "ranks ");
    int seen = 0;
    for (int r = 0; r < size; r++)
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

troupe_status_t troupe__engine_probe_start(troupe__req_t *r, troupe__rs_t *rs, int64_t now)
{
    rs->probing = true;
    rs->probe_t0 = now;
    rs->probe_end = now + TROUPE__PROBE_WINDOW_NS;
    int64_t ping[2] = {S_PING, now};
    TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT,
               "%s: no progress for %" PRId64 " s; probing the ranks involved", rs->what,
               troupe_config_timeout_s());
    for (int p = 0; p < troupe__eng.comm.size; p++) {
        if (p == troupe__eng.comm.rank || (troupe__req_is_p2p(r) && p != r->peer))
            continue;
        TROUPE_RETURN_IF_ERROR(
            troupe__engine_send_ctl(ping, sizeof ping, p, TROUPE__TAG_PROBE, "PING"));
    }
    return TROUPE_OK;
}

/* "; rank 1 finished its run: ..." for the ranks with bad[p] that said they stopped (S_BYE), so
 * that a rank which ended its run early (fewer steps, a skipped collective) is not called dead;
 * "" when none did. A stopped rank sits in MPI_Finalize and cannot answer a probe. */
static void s_departed_note(const bool *bad, int size, char *buf, size_t cap)
{
    buf[0] = '\0';
    size_t used = 0;
    for (int p = 0; p < size && used + 1 < cap; p++) {
        if (!bad[p] || s_p.departed[p] == 0)
            continue;
        int n = snprintf(buf + used, cap - used,
                         "; rank %d finished its run: it stopped its transport after %" PRIu64
                         " collectives, so it will not issue this one",
                         p, s_p.departed[p] - 1);
        if (n < 0)
            break;
        used += (size_t)n < cap - used ? (size_t)n : cap - used - 1;
    }
}

troupe_status_t troupe__engine_probe_verdict(troupe__req_t *r, troupe__rs_t *rs)
{
    int size = troupe__eng.comm.size;
    bool bad[size];
    int nbad = 0;
    for (int p = 0; p < size; p++) {
        bad[p] = p != troupe__eng.comm.rank && (!troupe__req_is_p2p(r) || p == r->peer) &&
                 s_p.last_pong_ns[p] < rs->probe_t0;
        nbad += bad[p];
    }
    if (nbad == 0)
        return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                             "%s: data made no progress within %" PRId64
                             " s although every rank answered a liveness probe (stuck in MPI?)",
                             rs->what, troupe_config_timeout_s());
    char ranks[256], gone[512];
    troupe__engine_rank_list(bad, size, ranks, sizeof ranks);
    s_departed_note(bad, size, gone, sizeof gone);
    return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                         "%s: %s did not answer within %" PRId64
                         " s (%s): data made no progress and a liveness probe got no "
                         "answer%s",
                         rs->what, ranks, troupe_config_timeout_s(),
                         gone[0] ? "finished, dead or stuck" : "dead or stuck", gone);
}

/* Names the ranks whose fingerprints are missing, those that did not answer the probe either
 * (dead, stuck or cut off) first, then those that answered (alive, but still in an earlier
 * collective or not issuing this one). */
troupe_status_t troupe__engine_probe_fp_verdict(troupe__rs_t *rs)
{
    int size = troupe__eng.comm.size;
    bool silent[size], behind[size];
    memset(silent, 0, sizeof silent); /* GCC cannot see that the loop fills them */
    memset(behind, 0, sizeof behind);
    int nsilent = 0, nbehind = 0;
    for (int p = 0; p < size; p++) {
        bool pending = troupe__fp_exchange_pending(&rs->fp, p);
        silent[p] = pending && s_p.last_pong_ns[p] < rs->probe_t0;
        behind[p] = pending && !silent[p];
        nsilent += silent[p];
        nbehind += behind[p];
    }
    char quiet[256], late[256], also[320] = "", gone[512];
    troupe__engine_rank_list(silent, size, quiet, sizeof quiet);
    troupe__engine_rank_list(behind, size, late, sizeof late);
    if (nsilent == 0)
        return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                             "%s: %s answered a liveness probe but did not reach this collective "
                             "within %" PRId64 " s (behind, in an earlier collective, or issuing "
                             "other collectives)",
                             rs->what, late, troupe_config_timeout_s());
    if (nbehind > 0)
        snprintf(also, sizeof also, "; %s answered but did not reach this collective", late);
    s_departed_note(silent, size, gone, sizeof gone);
    return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                         "%s: %s did not answer within %" PRId64
                         " s (%s): no fingerprint and no answer to a liveness probe%s%s",
                         rs->what, quiet, troupe_config_timeout_s(),
                         gone[0] ? "finished, dead or stuck" : "dead or stuck", also, gone);
}

/* r waits at the head of its lane for its gate (troupe_allreduce_args_t.after: this rank's own
 * events filling its tensors). Its gate gets the deadline of any request (TROUPE_TIMEOUT_S),
 * counted from then: past it r fails with DEADLINE_EXCEEDED naming r, its tensors, the events
 * still pending and the time, as a hang must not be silent. The other ranks wait for r's
 * fingerprint meanwhile; a notice (S_GATE_EXPIRED on the probe tag) tells them. */
bool troupe__engine_gate_check(troupe__req_t *r, troupe__rs_t *rs)
{
    int64_t now = troupe_now_ns();
    if (rs->t_gate_ns == 0)
        rs->t_gate_ns = now;
    int64_t due = rs->t_gate_ns + troupe__engine_timeout_ns();
    if (now < due) {
        if (troupe__eng.gate_due_ns == 0 || due < troupe__eng.gate_due_ns)
            troupe__eng.gate_due_ns = due;
        return false;
    }
    if (!troupe__eng.broken && !troupe__req_is_p2p(r)) {
        int64_t note[2] = {S_GATE_EXPIRED, (int64_t)r->seq};
        for (int p = 0; p < troupe__eng.comm.size; p++) /* best effort: else their deadlines
                                                           name us */
            if (p != troupe__eng.comm.rank &&
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
                  rs->what, tensors, troupe_config_timeout_s(), events, troupe__eng.comm.rank);
    troupe__engine_fail(r, TROUPE_DEADLINE_EXCEEDED, true);
    return true;
}

troupe_status_t troupe__engine_peer_gate_expired(const troupe__req_t *r, troupe__rs_t *rs)
{
    int size = troupe__eng.comm.size;
    bool gone[size];
    int n = 0;
    for (int p = 0; p < size; p++) {
        gone[p] = p != troupe__eng.comm.rank && troupe__fp_exchange_pending(&rs->fp, p) &&
                  s_p.gate_expired[p] == r->seq + 1;
        n += gone[p];
    }
    if (n == 0)
        return TROUPE_OK;
    char ranks[256];
    troupe__engine_rank_list(gone, size, ranks, sizeof ranks);
    return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                         "%s: %s failed it before sending a fingerprint: the events filling its "
                         "tensors there did not complete within %" PRId64
                         " s (that rank's message names them)",
                         rs->what, ranks, troupe_config_timeout_s());
}

void troupe__engine_probe_drain(uint64_t ncoll)
{
    int64_t end = troupe_now_ns() + S_DRAIN_NS;
    int64_t bye[2] = {S_BYE, (int64_t)ncoll};
    for (int p = 0; p < troupe__eng.comm.size; p++)
        if (p != troupe__eng.comm.rank &&
            troupe__engine_send_ctl(bye, sizeof bye, p, TROUPE__TAG_PROBE, "BYE") != TROUPE_OK)
            break; /* out of memory: the peers will call this rank dead or stuck instead */
    if (s_p.probe_posted) {
        MPI_Cancel(&s_p.probe_req);
        int flag = 0;
        while (!flag && troupe_now_ns() < end)
            if (MPI_Test(&s_p.probe_req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                break;
        s_p.probe_posted = false;
    }
    while (s_p.nsends > 0 && troupe_now_ns() < end) {
        if (s_test_sends() != TROUPE_OK)
            break;
        sched_yield();
    }
    if (s_p.nsends > 0)
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT,
                   "transport: %zu control sends did not complete at finalize", s_p.nsends);
}

#endif /* TROUPE_HAVE_MPI */
