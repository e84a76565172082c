/* troupe — clock offsets between ranks for the trace files (engine_impl.h, troupe__clock_sync;
 * base/trace.h).
 *
 * Cristian's method: rank 0 sends its time t0, rank p answers with its own time tp, rank 0
 * reads t1; then tp - (t0 + t1) / 2 is p's offset, off by at most half the round trip. Of
 * S_SAMPLES round trips the shortest wins (the first ones also pay for connection setup). Each
 * rank's trace file carries its offset, and `troupe trace merge` subtracts it, so events of all
 * ranks share rank 0's clock. Ranks on rank 0's machine (the same boot id) in the same time
 * namespace (the same monotonic offset in /proc/self/timens_offsets) read the very same
 * CLOCK_MONOTONIC: their offset is 0 exactly, and the measured one (off by up to half a round
 * trip, hundreds of microseconds on a loaded machine) is only noted. Runs once, before the transport engine starts, with blocking
 * calls (the only MPI calls outside the engine after MPI_Init, as the communicators' setup).
 */
#include "troupe_config.h"

#include "transport/mpi/engine_impl.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/trace_impl.h"

#include <stdio.h>
#include <string.h>

#if TROUPE_HAVE_MPI

#define S_SAMPLES 32
#define S_ID_MAX 128

/* What makes two processes' CLOCK_MONOTONIC the same clock: the boot and the time namespace's
 * offset ("" when the boot id cannot be read: then no two ranks count as sharing a clock). */
static void s_clock_id(char *id, size_t cap)
{
    memset(id, 0, cap);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f == NULL)
        return;
    size_t n = fread(id, 1, cap / 2, f);
    fclose(f);
    id[n < cap / 2 ? n : cap / 2 - 1] = '\0';
    f = fopen("/proc/self/timens_offsets", "r");
    if (f != NULL) {
        char line[128];
        while (fgets(line, sizeof line, f) != NULL)
            if (strncmp(line, "monotonic", 9) == 0)
                snprintf(id + strlen(id), cap - strlen(id), "/%.60s", line + 9);
        fclose(f);
    }
}

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
    char id[S_ID_MAX], root_id[S_ID_MAX];
    s_clock_id(id, sizeof id);
    memcpy(root_id, id, sizeof id);
    rc = MPI_Bcast(root_id, S_ID_MAX, MPI_CHAR, 0, comm);
    if (rc != MPI_SUCCESS)
        return troupe__mpi_error("clock offsets", "MPI_Bcast", rc);
    bool same = id[0] != '\0' && memcmp(id, root_id, sizeof id) == 0;
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
    troupe__trace_set_clock(same ? 0 : res[0], res[0], res[1], S_SAMPLES, same);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TRANSPORT,
               "trace: clock offset to rank 0 %+.3f us measured (round trip %.3f us, best of %d)%s",
               (double)res[0] / 1e3, (double)res[1] / 1e3, S_SAMPLES,
               same ? "; the same clock as rank 0's (same machine): 0 used" : "");
    return TROUPE_OK;
}

#endif /* TROUPE_HAVE_MPI */
