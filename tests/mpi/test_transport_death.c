/* troupe — multi-rank test: a dead or stuck rank is reported by rank within the deadline
 * (transport/mpi/cluster.h "Deadlines"), and the program ends the job through
 * troupe_cluster_leave and a non-zero exit instead of hanging.
 *
 * Both ranks run a sequence of allreduces; before the 4th, rank 1
 *   kill       SIGKILLs itself (rank 0 waits for its fingerprint), or
 *   stuck      sleeps 30 s without issuing it (alive, but not answering), or
 *   kill-data  issues it (a 256 MiB tensor, so its data is still moving) and SIGKILLs itself
 *              5 ms later: rank 0's data phase stalls and a liveness probe names rank 1;
 *   kill-shm   the same with the tensor in troupe_coll_alloc memory, so the data phase goes
 *              through shared memory (transport/mpi/shm_allreduce.c; the first three allreduces are
 *              checked to have gone that way): rank 1 dies while reducing its half, before it
 *              departs (its half of 256 MiB takes far longer than 5 ms), so rank 0 waits on
 *              its departure flag forever and the deadline and liveness probe must name it.
 *   finished   ends its run normally after 3 allreduces (troupe_cluster_finalize): rank 0 must
 *              name it as finished, from the notice its transport sends as it stops, not as
 *              dead (a stopped rank sits in MPI_Finalize and cannot answer a probe);
 *   fault      does nothing itself: TROUPE_FAULT (tests/mpi/fault.cmake) kills or stalls rank 1
 *   fault-shm  at a collective's data phase (a 256 MiB tensor; fault-shm: in troupe_coll_alloc
 *              memory, through shared memory).
 * Rank 0 must see DEADLINE_EXCEEDED naming "rank 1" (TROUPE_TIMEOUT_S=5 in the test's
 * environment); it prints the message, leaves the cluster (troupe_cluster_leave stops the
 * transport engine, so this thread may call MPI) and ends the job with MPI_Abort(3): the
 * program's choice, since the test runs mpiexec with orte_abort_on_non_zero_status=0 (below),
 * where a plain non-zero exit would leave mpiexec waiting for the dead rank. Anything else prints a
 * FAIL line (and also exits non-zero). tests/mpi/transport_death.sh runs it under mpiexec and
 * checks the exit status, the message and that the whole run ended before its time limit. */
#include "actors/event.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void s_free(float *buf, bool coll)
{
    if (coll)
        troupe_coll_free(buf);
    else
        free(buf);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "kill";
    bool kill = strcmp(mode, "kill") == 0, stuck = strcmp(mode, "stuck") == 0;
    bool finished = strcmp(mode, "finished") == 0;
    bool fault_shm = strcmp(mode, "fault-shm") == 0;
    bool fault = strcmp(mode, "fault") == 0 || fault_shm; /* TROUPE_FAULT acts */
    bool kill_shm = strcmp(mode, "kill-shm") == 0 || fault_shm;
    bool kill_data = strcmp(mode, "kill-data") == 0 || kill_shm || fault;
    if (!kill && !stuck && !finished && !kill_data) {
        printf("FAIL: unknown mode '%s' (kill, stuck, finished, kill-data, kill-shm, fault, "
               "fault-shm)\n",
               mode);
        return 2;
    }
    troupe_status_t st = troupe_cluster_init(&argc, &argv);
    if (st != TROUPE_OK) {
        printf("FAIL: troupe_cluster_init: %s: %s\n", troupe_status_str(st), troupe_last_error());
        return 1;
    }
    int rank = troupe_cluster_rank();
    const int64_t count = kill_data ? (64LL << 20) : 1024;
    float *buf = kill_shm ? troupe_coll_alloc((size_t)count * sizeof *buf)
                          : calloc((size_t)count, sizeof *buf);
    if (buf == NULL) {
        printf("FAIL: out of memory\n");
        return 1;
    }
    for (int k = 0; k < 10; k++) {
        if (kill_shm && k == 3) {
            troupe_transport_stats_t stats;
            troupe_transport_get_stats(&stats);
            if (stats.shm != 3)
                printf("FAIL rank %d: %llu of 3 allreduces went through shared memory\n", rank,
                       (unsigned long long)stats.shm);
            fflush(stdout);
        }
        if (rank == 1 && k == 3 && finished) {
            printf("rank 1: finishing its run before allreduce %d\n", k);
            fflush(stdout);
            free(buf);
            st = troupe_cluster_finalize();
            if (st != TROUPE_OK)
                printf("FAIL rank 1: troupe_cluster_finalize: %s: %s\n", troupe_status_str(st),
                       troupe_last_error());
            return st == TROUPE_OK ? 0 : 1;
        }
        if (rank == 1 && k == 3 && !kill_data) {
            printf("rank 1: %s before allreduce %d\n", kill ? "dying" : "stuck", k);
            fflush(stdout);
            if (kill)
                raise(SIGKILL);
            else
                sleep(30);
        }
        troupe_coll_tensor_t t = {
            .data = buf, .count = count, .prec = TROUPE_PREC_SINGLE, .node_id = 1, .name = "grad"};
        troupe_event_t *ev = NULL;
        troupe_allreduce_args_t ar = {.op = TROUPE_REDUCE_SUM, .n = 1, .tensors = &t};
        st = troupe_allreduce(&ar, &ev);
        if (st == TROUPE_OK && rank == 1 && k == 3 && kill_data && !fault) {
            st = troupe_event_sync(ev, 5LL * 1000 * 1000);
            printf("rank 1: dying during allreduce %d (%s)\n", k,
                   st == TROUPE_OK ? "it completed already" : "data still moving");
            fflush(stdout);
            raise(SIGKILL);
        }
        if (st == TROUPE_OK)
            st = troupe_event_sync(ev, 60LL * 1000 * 1000 * 1000);
        troupe_event_release(&ev);
        if (st != TROUPE_OK) {
            char msg[1200];
            snprintf(msg, sizeof msg, "allreduce %d failed: %s: %s", k, troupe_status_str(st),
                     troupe_last_error());
            printf("rank %d: %s\n", rank, msg);
            if (st != TROUPE_DEADLINE_EXCEEDED || strstr(msg, "rank 1") == NULL)
                printf("FAIL rank %d: expected DEADLINE_EXCEEDED naming rank 1\n", rank);
            if ((strstr(msg, "finished its run") != NULL) != finished)
                printf("FAIL rank %d: the report %s say that rank 1 finished its run\n", rank,
                       finished ? "does not" : "must not");
            fflush(stdout);
            troupe_status_t lst = troupe_cluster_leave(msg);
            if (lst != TROUPE_OK)
                printf("FAIL rank %d: troupe_cluster_leave: %s: %s\n", rank, troupe_status_str(lst),
                       troupe_last_error());
            fflush(stdout);
            s_free(buf, kill_shm);
            MPI_Abort(MPI_COMM_WORLD, 3);
            return 3;
        }
    }
    printf("FAIL rank %d: every allreduce succeeded although rank 1 %s\n", rank,
           stuck ? "was stuck" : "died");
    s_free(buf, kill_shm);
    troupe_status_t fst = troupe_cluster_finalize();
    (void)fst;
    return 1;
}
