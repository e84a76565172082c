/* troupe — the ring allreduce of one bucket (engine_impl.h; collective.h, Algorithms).
 *
 * An allreduce bucket of at least TROUPE__RING_MIN_BYTES is reduced by troupe's own ring over
 * point-to-point messages (Patarasuk and Yuan's bandwidth-optimal allreduce, as in Baidu's
 * ring-allreduce, Horovod and NCCL): the bucket is cut into `size` chunks; in p-1
 * reduce-scatter steps each rank sends one chunk to its right neighbour, receives another from
 * its left one and reduces it into its own copy, so that each rank ends with one chunk fully
 * reduced; in p-1 allgather steps the reduced chunks travel around the ring into every rank's
 * bucket. Each rank sends and receives 2(p-1)/p of the bucket and reduces (p-1)/p of it, in
 * parallel with the others (measurements: collective.h, Algorithms). Each chunk is summed
 * along the ring in a fixed order and copied to the others, so all ranks hold the same bits
 * and a run is reproducible for a given number of ranks. bfloat16-compressed buckets always
 * take the ring: MPI has no bfloat16 sum.
 *
 * The reduce-scatter half alone (troupe__ring_scatter_start) serves ZeRO stage 1 across nodes:
 * a fused update with sharded state needs only its own shard's sums, so the request's whole
 * span is cut at the shards' bounds (troupe_coll_shard_range) and the chunks are turned by one
 * place, so that rank r ends holding the sums of its own shard; p-1 steps, (p-1)/p of the span
 * sent and received instead of the allreduce's 2(p-1)/p. Chunk c is summed from rank c+1 round
 * to rank c (the allreduce's ring starts chunk c at rank c): with two ranks a + b either way.
 */
#include "transport/mpi/engine_impl.h"
#include "transport/mpi/transport_impl.h"
#include "base/clock.h"

#if TROUPE_HAVE_MPI

bool troupe__ring_wanted(troupe__req_kind_t kind, const troupe__bucket_t *b, int size)
{
    if (b->cls == TROUPE__CLS_BF16W) /* MPI has no bfloat16 sum: always ours, whatever the size */
        return size > 1;
    return kind == TROUPE__REQ_ALLREDUCE && size > 1 && b->cls != TROUPE__CLS_BYTES &&
           b->units >= size && (int64_t)troupe__bucket_bytes(b) >= TROUPE__RING_MIN_BYTES;
}

/* First unit of chunk k of a bucket of `units` over `size` ranks ([lo(k), lo(k + 1))). */
static int64_t s_chunk_lo(int64_t units, int k, int size)
{
    return units * k / size;
}

/* First unit of chunk k of g: the allreduce's even cut, or the shards' (scatter). */
static int64_t s_lo(const troupe__ring_t *g, int k, int size)
{
    if (g->scatter)
        return troupe__shm_chunk_lo(g->units, troupe__cls_size(g->cls), k, size);
    return s_chunk_lo(g->units, k, size);
}

static int s_mod(int a, int p)
{
    return ((a % p) + p) % p;
}

size_t troupe__ring_tmp_bytes(const troupe__bucket_t *b, int size)
{
    int64_t chunk = b->units - s_chunk_lo(b->units, size - 1, size); /* the largest */
    return (size_t)chunk * troupe__cls_size(b->cls);
}

/* Posts step g->step: steps 0 .. p-2 reduce-scatter (receive into tmp), p-1 .. 2p-3
 * allgather (receive into the bucket). */
static troupe_status_t s_post(troupe__ring_t *g, const troupe__engine_comm_t *c, const char *what)
{
    int p = c->size, me = c->rank, st = g->step;
    int turn = g->scatter ? 1 : 0; /* scatter: rank me ends with chunk me, not me + 1 */
    int send_c, recv_c;
    if (st < p - 1) {
        send_c = s_mod(me - st - turn, p);
        recv_c = s_mod(me - st - 1 - turn, p);
    } else {
        send_c = s_mod(me + 1 - (st - (p - 1)), p);
        recv_c = s_mod(me - (st - (p - 1)), p);
    }
    int64_t cs = (int64_t)troupe__cls_size(g->cls);
    int64_t s_at = s_lo(g, send_c, p);
    int64_t s_n = s_lo(g, send_c + 1, p) - s_at;
    int64_t r_lo = s_lo(g, recv_c, p);
    int64_t r_n = s_lo(g, recv_c + 1, p) - r_lo;
    void *rbuf = st < p - 1 ? g->tmp : g->base + r_lo * cs;
    MPI_Datatype type = troupe__cls_mpi_type(g->cls);
    int rc = MPI_Irecv(rbuf, (int)r_n, type, s_mod(me - 1, p), g->tag, c->data, &g->rreq);
    if (rc != MPI_SUCCESS)
        return troupe__mpi_error(what, "MPI_Irecv (ring)", rc);
    rc =
        MPI_Isend(g->base + s_at * cs, (int)s_n, type, s_mod(me + 1, p), g->tag, c->data, &g->sreq);
    if (rc != MPI_SUCCESS)
        return troupe__mpi_error(what, "MPI_Isend (ring)", rc);
    return TROUPE_OK;
}

troupe_status_t troupe__ring_start(troupe__ring_t *g, const troupe__engine_comm_t *c,
                                   const troupe__bucket_t *b, size_t bucket, troupe_reduce_op_t op,
                                   char *base, void *tmp, const char *what)
{
    *g = (troupe__ring_t){.rreq = MPI_REQUEST_NULL,
                          .sreq = MPI_REQUEST_NULL,
                          .step = 0,
                          .tag = TROUPE__TAG_RING + (int)(bucket % TROUPE__RING_TAGS),
                          .base = base,
                          .tmp = tmp,
                          .units = b->units,
                          .cls = b->cls,
                          .op = op,
                          .t_start_ns = troupe_now_ns()};
    return s_post(g, c, what);
}

size_t troupe__ring_scatter_tmp_bytes(int64_t units, troupe__cls_t cls, int size)
{
    int64_t most = 0;
    for (int k = 0; k < size; k++) {
        int64_t n = troupe__shm_chunk_lo(units, troupe__cls_size(cls), k + 1, size) -
                    troupe__shm_chunk_lo(units, troupe__cls_size(cls), k, size);
        most = n > most ? n : most;
    }
    return (size_t)(most > 0 ? most : 1) * troupe__cls_size(cls);
}

troupe_status_t troupe__ring_scatter_start(troupe__ring_t *g, const troupe__engine_comm_t *c,
                                           int64_t units, troupe__cls_t cls,
                                           troupe_reduce_op_t op, char *base, void *tmp,
                                           const char *what)
{
    *g = (troupe__ring_t){.rreq = MPI_REQUEST_NULL,
                          .sreq = MPI_REQUEST_NULL,
                          .step = 0,
                          .tag = TROUPE__TAG_RING,
                          .base = base,
                          .tmp = tmp,
                          .units = units,
                          .cls = cls,
                          .op = op,
                          .scatter = true,
                          .t_start_ns = troupe_now_ns()};
    return s_post(g, c, what);
}

troupe_status_t troupe__ring_test(troupe__ring_t *g, const troupe__engine_comm_t *c,
                                  const char *what, bool *done, bool *progress)
{
    int p = c->size;
    for (;;) {
        int rflag = 0, sflag = 0;
        int rc = MPI_Test(&g->rreq, &rflag, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS)
            rc = MPI_Test(&g->sreq, &sflag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error(what, "MPI_Test (ring)", rc);
        if (!rflag || !sflag)
            return TROUPE_OK;
        *progress = true;
        if (g->step < p - 1) { /* reduce what arrived into this rank's copy (reduce.c) */
            int k = s_mod(c->rank - g->step - 1 - (g->scatter ? 1 : 0), p);
            int64_t lo = s_lo(g, k, p), n = s_lo(g, k + 1, p) - lo;
            troupe__reduce_into(troupe__cls_red_type(g->cls), g->op,
                                g->base + lo * (int64_t)troupe__cls_size(g->cls), g->tmp, n);
        }
        if (++g->step == p - 1)
            g->t_scattered_ns = troupe_now_ns();
        if (g->step == (g->scatter ? p - 1 : 2 * (p - 1))) {
            *done = true;
            return TROUPE_OK;
        }
        TROUPE_RETURN_IF_ERROR(s_post(g, c, what));
    }
}

#endif /* TROUPE_HAVE_MPI */
