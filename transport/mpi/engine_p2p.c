/* troupe — the transport engine's point-to-point data (engine_impl.h, the engine's own files): a
 * send or a receive between two ranks moves in slices of at most TROUPE__MAX_MSG_BYTES
 * (MPI counts are ints), all posted at once on the data communicator, with one tag: MPI keeps
 * the order of messages between two ranks on one tag, and each channel's lane runs one request
 * at a time (engine.c).
 *
 * Thread safety: the engine's owner only (engine.c).
 * Ownership: rs->p2p (the slices' requests) belongs to rs, freed with it (engine.c).
 */
#include "troupe_config.h"

#include "transport/mpi/engine_impl.h"
#include "transport/mpi/transport_impl.h"

#include "base/alloc.h"
#include "base/status.h"

#if TROUPE_HAVE_MPI

troupe_status_t troupe__engine_p2p_post(troupe__req_t *r, troupe__rs_t *rs)
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
                                 troupe__eng.comm.data, &rs->p2p[i])
                     : MPI_Irecv(base + off, c, MPI_BYTE, r->peer, TROUPE__TAG_DATA_P2P,
                                 troupe__eng.comm.data, &rs->p2p[i]);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error(rs->what,
                                     r->kind == TROUPE__REQ_SEND ? "MPI_Isend" : "MPI_Irecv", rc);
        rs->np2p++;
    }
    return TROUPE_OK;
}

troupe_status_t troupe__engine_p2p_test(troupe__rs_t *rs, bool *progress, bool *all)
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

#endif /* TROUPE_HAVE_MPI */
