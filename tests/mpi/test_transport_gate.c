/* troupe — multi-rank test: a gated allreduce (troupe_allreduce_args_t.after) whose events never
 * complete fails within the transport's deadline instead of waiting forever
 * (transport/mpi/engine.c s_gate_check), on every rank, with messages that agree.
 *
 * The deadline is 2 s (troupe_config_set_timeout_s). After one allreduce that must succeed,
 * rank 1 issues an allreduce of tensor 'stuck_grad' (node 77) gated on two host events:
 * 'done_copy', completed at once, and 'stuck_copy', never completed (a stuck stream's copy to the
 * host); rank 0 issues the same allreduce ungated. Both sync the event with no deadline of their
 * own (TROUPE_TIMEOUT_INFINITE): before the fix rank 1 waited there forever. Asserted:
 *   - rank 1: while it waits, the status board shows the transport waiting on this rank's events
 *     with a verdict due one deadline after the request's turn; the sync returns
 *     DEADLINE_EXCEEDED no sooner than the deadline and within seconds, with a message naming
 *     the collective, the tensor, the pending event (not the completed one, "1 of 2 pending"),
 *     the deadline and that the other ranks name rank 1;
 *   - rank 0: DEADLINE_EXCEEDED naming rank 1 as having failed the collective at its events
 *     (the notice rank 1 sends), before its own deadline and liveness probe would (2 s + 2 s);
 *   - both: a later troupe_allreduce returns the cluster's failure at once, and
 *     troupe_cluster_finalize returns DEADLINE_EXCEEDED.
 * The cluster then skips MPI_Finalize (a deadline breaks the communicators); this program calls it
 * itself, both ranks being alive, so that mpiexec exits 0 when every check passed. */
#include "actors/board_impl.h"
#include "actors/event.h"
#include "base/clock.h"
#include "base/config.h"
#include "mpi_test_util.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_S 2
#define NS_PER_S (1000LL * 1000 * 1000)

static void s_expect_in(const char *what, const char *msg, const char *needle)
{
    if (strstr(msg, needle) == NULL)
        s_fail("%s: the message lacks \"%s\": %s", what, needle, msg);
}

/* Rank 1: the board's transport slot shows the gated request waiting on this rank's events, its
 * verdict due one deadline after t0 (the submission) at the earliest. */
static void s_check_board(int64_t t0)
{
    troupe__board_rec_t recs[64];
    bool seen = false;
    for (int64_t end = troupe_now_ns() + NS_PER_S; !seen && troupe_now_ns() < end;) {
        size_t n = troupe__board_snapshot(recs, 64, NULL);
        for (size_t i = 0; i < n && i < 64; i++) {
            const troupe__board_rec_t *r = &recs[i];
            if (r->kind != TROUPE__BOARD_TRANSPORT || r->state != TROUPE__BOARD_WAITING ||
                r->verdict_due_ns == 0)
                continue;
            seen = true;
            int64_t due = r->verdict_due_ns - t0;
            if (strstr(r->wait_by, "events filling its tensors") == NULL ||
                due < TIMEOUT_S * NS_PER_S || due > (TIMEOUT_S + 1) * NS_PER_S)
                s_fail("board: waits on %s by '%s', verdict due %.3f s after the submission",
                       r->wait_on, r->wait_by, (double)due / 1e9);
        }
    }
    if (!seen)
        s_fail("board: the transport never published a gated wait with its deadline");
}

int main(int argc, char **argv)
{
    if (s_init(&argc, &argv) != TROUPE_OK)
        return 1;
    const int64_t count = 256;
    float *buf = calloc((size_t)count, sizeof *buf);
    troupe_event_t *ev = NULL, *done = NULL, *stuck = NULL;
    if (buf == NULL) {
        s_fail("out of memory");
        goto out;
    }
    if (s_size != 2) {
        s_fail("run with 2 ranks, not %d", s_size);
        goto out;
    }
    CHECK_OK(troupe_config_set_timeout_s(TIMEOUT_S));
    troupe_coll_tensor_t t = {.data = buf,
                              .count = count,
                              .prec = TROUPE_PREC_SINGLE,
                              .node_id = 77,
                              .name = "stuck_grad"};
    troupe_allreduce_args_t args = {.op = TROUPE_REDUCE_SUM, .n = 1, .tensors = &t};
    CHECK_OK(troupe_allreduce(&args, &ev)); /* a healthy one first: both ranks are in step */
    CHECK_OK(troupe_event_sync(ev, 30 * NS_PER_S));
    troupe_event_release(&ev);

    CHECK_OK(troupe_event_new("done_copy", &done));
    CHECK_OK(troupe_event_new("stuck_copy", &stuck));
    troupe_event_t *after[2] = {done, stuck};
    if (s_rank == 1) {
        args.after = after;
        args.n_after = 2;
    }
    int64_t t0 = troupe_now_ns();
    CHECK_OK(troupe_allreduce(&args, &ev));
    troupe_event_complete(done, TROUPE_OK, NULL);
    if (s_rank == 1)
        s_check_board(t0);
    troupe_status_t st = troupe_event_sync(ev, TROUPE_TIMEOUT_INFINITE);
    double took = (double)(troupe_now_ns() - t0) / 1e9;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", st == TROUPE_OK ? "" : troupe_last_error());
    printf("rank %d: after %.2f s: %s: %s\n", s_rank, took, troupe_status_str(st), msg);
    fflush(stdout);
    if (st != TROUPE_DEADLINE_EXCEEDED)
        s_fail("the gated allreduce gave %s, expected DEADLINE_EXCEEDED", troupe_status_str(st));
    if (took > TIMEOUT_S + 10)
        s_fail("the gated allreduce failed after %.2f s, not within seconds of the deadline", took);
    if (s_rank == 1) {
        if (took < TIMEOUT_S - 0.05)
            s_fail("the gated allreduce failed after %.2f s, before its %d s deadline", took,
                   TIMEOUT_S);
        s_expect_in("rank 1", msg, "allreduce #2");
        s_expect_in("rank 1", msg, "'stuck_grad' (node 77)");
        s_expect_in("rank 1", msg, "'stuck_copy' (1 of 2 pending)");
        s_expect_in("rank 1", msg, "within 2 s");
        s_expect_in("rank 1", msg, "the other ranks fail it naming rank 1");
        if (strstr(msg, "done_copy") != NULL)
            s_fail("rank 1: the message names the completed event: %s", msg);
    } else {
        /* the notice, not rank 0's own deadline (2 s) and liveness probe (2 s more) */
        s_expect_in("rank 0", msg, "allreduce #2: rank 1 failed it before sending a fingerprint");
        s_expect_in("rank 0", msg, "events filling its tensors");
        if (took > TIMEOUT_S + 1.8)
            s_fail("rank 0 failed after %.2f s: its own deadline, not rank 1's notice", took);
    }
    troupe_event_release(&ev);
    /* the cluster failed: a later collective fails at once with that failure */
    args.after = NULL;
    args.n_after = 0;
    int64_t t1 = troupe_now_ns();
    st = troupe_allreduce(&args, &ev);
    if (st != TROUPE_DEADLINE_EXCEEDED || troupe_now_ns() - t1 > NS_PER_S)
        s_fail("an allreduce after the failure gave %s after %.2f s, expected DEADLINE_EXCEEDED "
               "at once",
               troupe_status_str(st), (double)(troupe_now_ns() - t1) / 1e9);
out:
    troupe_event_release(&ev);
    if (stuck != NULL)
        troupe_event_complete(stuck, TROUPE_CANCELLED, "test over");
    troupe_event_release(&stuck);
    troupe_event_release(&done);
    st = troupe_cluster_finalize();
    if (st != TROUPE_DEADLINE_EXCEEDED)
        s_fail("troupe_cluster_finalize() = %s, expected DEADLINE_EXCEEDED", troupe_status_str(st));
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
        MPI_Finalize();
    free(buf);
    if (s_fails == 0)
        printf("rank %d: PASS\n", s_rank);
    return s_fails == 0 ? 0 : 1;
}
