/* troupe — clock offsets between ranks for the trace files (engine_impl.h, troupe__clock_sync;
 * base/trace.h).
 *
 * Cristian's method: rank 0 sends its time t0, rank p answers with its own time tp, rank 0
 * reads t1; then tp - (t0 + t1) / 2 is p's offset, off by at most half the round trip. Of
 * S_SAMPLES round trips the shortest wins (the first ones also pay for connection setup). Each
 * rank's trace file carries its offset, and `troupe trace merge` subtracts it, so events of all
 * ranks share rank 0's clock. Runs once, before the transport engine starts, with blocking
 * calls (the only MPI calls outside the engine after MPI_Init, as the communicators' setup).
 */
#include "troupe_config.h"

#include "transport/mpi/engine_impl.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/trace_impl.h"

#if TROUPE_HAVE_MPI

#define S_SAMPLES 16

/* Rank 0's side with rank p: *off_ns and *rtt_ns of the shortest round trip. */
static troupe_status_t s_measure(MPI_Comm comm, int p, int64_t *off_ns, int64_t *rtt_ns)
{
    *rtt_ns = INT64_MAX;
    *off_ns = 0;
    for (int k = 0; k < S_SAMPLES; k++) {
        int64_t t0 = troupe_now_ns(), tp = 0;
        int rc = MPI_Send(&t0, 1, MPI_INT64_T, p, TROUPE__TAG_CLOCK, comm);
        if (rc == MPI_SUCCESS)
            rc = MPI_Recv(&tp, 1, MPI_INT64_T, p, TROUPE__TAG_CLOCK, comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error("clock offsets", "MPI_Send/MPI_Recv", rc);
        int64_t t1 = troupe_now_ns();
        if (t1 - t0 < *rtt_ns) {
            *rtt_ns = t1 - t0;
            *off_ns = tp - (t0 + (t1 - t0) / 2);
        }
    }
    return TROUPE_OK;
}

troupe_status_t troupe__clock_sync(MPI_Comm comm, int rank, int size)
{
    int mine = troupe__trace_on(), any = 0;
    int rc = MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm);
    if (rc != MPI_SUCCESS)
        return troupe__mpi_error("clock offsets", "MPI_Allreduce", rc);
    if (!any || size < 2)
        return TROUPE_OK;
    int64_t res[2] = {0, 0}; /* offset, round trip */
    if (rank == 0) {
        for (int p = 1; p < size; p++) {
            TROUPE_RETURN_IF_ERROR(s_measure(comm, p, &res[0], &res[1]));
            rc = MPI_Send(res, 2, MPI_INT64_T, p, TROUPE__TAG_CLOCK, comm);
            if (rc != MPI_SUCCESS)
                return troupe__mpi_error("clock offsets", "MPI_Send", rc);
        }
        res[0] = res[1] = 0;
    } else {
        for (int k = 0; k < S_SAMPLES; k++) {
            int64_t t0 = 0;
            rc = MPI_Recv(&t0, 1, MPI_INT64_T, 0, TROUPE__TAG_CLOCK, comm, MPI_STATUS_IGNORE);
            int64_t now = troupe_now_ns();
            if (rc == MPI_SUCCESS)
                rc = MPI_Send(&now, 1, MPI_INT64_T, 0, TROUPE__TAG_CLOCK, comm);
            if (rc != MPI_SUCCESS)
                return troupe__mpi_error("clock offsets", "MPI_Recv/MPI_Send", rc);
        }
        rc = MPI_Recv(res, 2, MPI_INT64_T, 0, TROUPE__TAG_CLOCK, comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error("clock offsets", "MPI_Recv", rc);
    }
    troupe__trace_set_clock(res[0], res[1], S_SAMPLES);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TRANSPORT,
               "trace: clock offset to rank 0 %+.3f us (round trip %.3f us, best of %d)",
               (double)res[0] / 1e3, (double)res[1] / 1e3, S_SAMPLES);
    return TROUPE_OK;
}

#endif /* TROUPE_HAVE_MPI */
