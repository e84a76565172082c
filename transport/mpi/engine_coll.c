/* troupe — the transport engine's collective data (engine_impl.h, the engine's own files): a
 * collective's buckets (bucket.c plans them) with up to two in flight, each an
 * MPI_Iallreduce / MPI_Ibcast or troupe's ring (ring.c), the next one packed into a staging
 * slot while the previous moves; or the shared-memory allreduce of the whole span
 * (shm_allreduce.c, and apply.c when a fused update rides along).
 *
 * Thread safety: the engine's owner only (engine.c).
 * Ownership: the two staging slots and the two ring buffers belong to this file (kept and grown
 * across requests, freed by troupe__engine_coll_stop); a failed request's buffers still in flight
 * are left to MPI (troupe__engine_coll_release).
 */
#include "troupe_config.h"

#include "transport/mpi/bucket_impl.h"
#include "transport/mpi/engine_impl.h"
#include "transport/mpi/transport_impl.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/status.h"
#include "base/trace_impl.h"

#include <limits.h>

#if TROUPE_HAVE_MPI

static struct {
    void *slot[2];
    size_t slot_cap[2];
    bool slot_busy[2];
    void *rtmp[2]; /* the receive buffers of ring buckets in flight */
    size_t rtmp_cap[2];
    bool rtmp_busy[2];
} s_c;

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

/* ---- trace (base/trace_impl.h) ------------------------------------------------------------ */

/* A bucket track the other flights of rs do not use. */
static int s_trace_track(const troupe__rs_t *rs)
{
    bool busy0 = false;
    for (int i = 0; i < rs->nfl; i++)
        busy0 = busy0 || rs->fl[i].track == TROUPE__TRACK_BUCKET0;
    return busy0 ? TROUPE__TRACK_BUCKET1 : TROUPE__TRACK_BUCKET0;
}

/* A finished bucket: its span and, on the ring, its two phases. */
static void s_trace_bucket(const troupe__req_t *r, const troupe__flight_t *f,
                           const troupe__bucket_t *b)
{
    if (!troupe__trace_on())
        return;
    int64_t now = troupe_now_ns();
    troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("seq", r->seq),
                               TROUPE__TRACE_NUM("bucket", f->bucket),
                               TROUPE__TRACE_NUM("bytes", troupe__bucket_bytes(b))};
    troupe__trace_track_t tr = (troupe__trace_track_t)f->track;
    const char *name = f->on_ring                         ? "ring allreduce bucket"
                       : r->kind == TROUPE__REQ_BROADCAST ? "MPI_Ibcast bucket"
                                                          : "MPI_Iallreduce bucket";
    troupe__trace_emit(tr, "allreduce", name, f->t_post_ns, now, a, 3);
    if (f->on_ring && f->ring.t_scattered_ns != 0) {
        troupe__trace_emit(tr, "allreduce", "reduce-scatter", f->ring.t_start_ns,
                           f->ring.t_scattered_ns, a, 3);
        troupe__trace_emit(tr, "allreduce", "allgather", f->ring.t_scattered_ns, now, a, 3);
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
    return s_take_buf(s_c.slot, s_c.slot_cap, s_c.slot_busy, bytes);
}

/* Takes a slot for bucket b and packs it (the root only, for a broadcast). Returns OK with
 * b->slot set, OK with b->slot == -1 when both slots are busy, or RESOURCE_EXHAUSTED. */
static troupe_status_t s_stage(troupe__req_t *r, troupe__rs_t *rs, troupe__bucket_t *b)
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
    if (r->kind != TROUPE__REQ_BROADCAST || troupe__eng.comm.rank == r->root)
        troupe__bucket_pack(r, &rs->plan, b, s_c.slot[slot]);
    return TROUPE_OK;
}

/* While the fingerprints travel: plans the buckets and packs the first ones, so the data
 * can move as soon as the ranks agree (the caller's memory is only read). */
troupe_status_t troupe__engine_coll_prepack(troupe__req_t *r, troupe__rs_t *rs)
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
troupe_status_t troupe__engine_coll_post(troupe__req_t *r, troupe__rs_t *rs)
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
            ptr = s_c.slot[slot];
        }
        troupe__flight_t *f = &rs->fl[rs->nfl];
        *f = (troupe__flight_t){.req = MPI_REQUEST_NULL,
                                .bucket = rs->next_bk,
                                .slot = slot,
                                .tmp = -1,
                                .t_post_ns = troupe_now_ns(),
                                .track = s_trace_track(rs)};
        if (troupe__ring_wanted(r->kind, b, troupe__eng.comm.size)) {
            size_t tmp_bytes = troupe__ring_tmp_bytes(b, troupe__eng.comm.size);
            int tmp = s_take_buf(s_c.rtmp, s_c.rtmp_cap, s_c.rtmp_busy, tmp_bytes);
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
            TROUPE_RETURN_IF_ERROR(troupe__ring_start(&f->ring, &troupe__eng.comm, b, f->bucket,
                                                      r->op, ptr, s_c.rtmp[tmp], rs->what));
        } else {
            int rc;
            if (bcast)
                rc = MPI_Ibcast(ptr, (int)b->units, MPI_BYTE, r->root, troupe__eng.comm.data,
                                &f->req);
            else
                rc = MPI_Iallreduce(MPI_IN_PLACE, ptr, (int)b->units, troupe__cls_mpi_type(b->cls),
                                    s_mpi_op(r->op), troupe__eng.comm.data, &f->req);
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
troupe_status_t troupe__engine_coll_test(troupe__req_t *r, troupe__rs_t *rs, bool *progress)
{
    bool bcast = r->kind == TROUPE__REQ_BROADCAST;
    bool mean = !bcast && r->op == TROUPE_REDUCE_MEAN;
    for (int i = 0; i < rs->nfl;) {
        bool done = false;
        if (rs->fl[i].on_ring) {
            TROUPE_RETURN_IF_ERROR(
                troupe__ring_test(&rs->fl[i].ring, &troupe__eng.comm, rs->what, &done, progress));
            if (done) {
                s_c.rtmp_busy[rs->fl[i].tmp] = false;
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
        troupe__flight_t f = rs->fl[i];
        troupe__bucket_t *b = &rs->plan.bks[f.bucket];
        s_trace_bucket(r, &f, b);
        if (f.slot >= 0) {
            if (!bcast || troupe__eng.comm.rank != r->root)
                troupe__bucket_unpack(r, &rs->plan, b, s_c.slot[f.slot], troupe__eng.comm.size);
            s_c.slot_busy[f.slot] = false;
            b->slot = -1;
        } else if (mean) {
            troupe__divide_by(troupe__cls_red_type(b->cls),
                              troupe__seg_ptr(r, &rs->plan.segs[b->seg0]), b->units,
                              troupe__eng.comm.size);
        }
        rs->done_bks++;
        rs->fl[i] = rs->fl[--rs->nfl];
        *progress = true;
    }
    return TROUPE_OK;
}

/* Gives back the slots of buckets that will not complete (any left when a request is freed: it
 * failed). */
static void s_release_slots(troupe__rs_t *rs)
{
    for (size_t i = 0; i < rs->plan.nbks; i++) {
        if (rs->plan.bks[i].slot >= 0)
            s_c.slot_busy[rs->plan.bks[i].slot] = false;
        rs->plan.bks[i].slot = -1;
    }
}

void troupe__engine_coll_release(troupe__rs_t *rs)
{
    if (rs->scatter && rs->sc_tmp >= 0) { /* a reduce-scatter still in flight: left to MPI */
        s_c.rtmp[rs->sc_tmp] = NULL;
        s_c.rtmp_cap[rs->sc_tmp] = 0;
        s_c.rtmp_busy[rs->sc_tmp] = false;
        rs->sc_tmp = -1;
    }
    /* Buckets still in flight belong to a failed request: MPI may still write into their
     * buffers if it is ever progressed again, so those buffers are left to MPI (leaked: only
     * on failures, which fail the cluster) rather than reused or freed. */
    for (int i = 0; i < rs->nfl; i++) {
        const troupe__flight_t *f = &rs->fl[i];
        if (f->slot >= 0) {
            s_c.slot[f->slot] = NULL;
            s_c.slot_cap[f->slot] = 0;
            s_c.slot_busy[f->slot] = false;
            rs->plan.bks[f->bucket].slot = -1;
        }
        if (f->tmp >= 0) {
            s_c.rtmp[f->tmp] = NULL;
            s_c.rtmp_cap[f->tmp] = 0;
            s_c.rtmp_busy[f->tmp] = false;
        }
    }
    s_release_slots(rs);
}

void troupe__engine_coll_stop(void)
{
    for (int i = 0; i < 2; i++) {
        troupe_free(s_c.slot[i]);
        s_c.slot[i] = NULL;
        s_c.slot_cap[i] = 0;
        s_c.slot_busy[i] = false;
        troupe_free(s_c.rtmp[i]);
        s_c.rtmp[i] = NULL;
        s_c.rtmp_cap[i] = 0;
        s_c.rtmp_busy[i] = false;
    }
}

const char *troupe__engine_coll_path(const troupe__req_t *r, const troupe__rs_t *rs)
{
    if (rs->use_shm)
        return "shm";
    if (rs->scatter)
        return "reduce-scatter";
    if (rs->plan.nbks > 0 && troupe__ring_wanted(r->kind, &rs->plan.bks[0], troupe__eng.comm.size))
        return "ring";
    return "mpi";
}

troupe_status_t troupe__engine_coll_shm_begin(troupe__req_t *r, troupe__rs_t *rs)
{
    troupe__shm_ref_t refs[troupe__eng.comm.size];
    for (int p = 0; p < troupe__eng.comm.size; p++)
        refs[p] = p == troupe__eng.comm.rank ? rs->fp.mine.shm : rs->fp.peer[p].shm;
    if (rs->shm_apply)
        return troupe__apply_shm_begin(r, rs, refs);
    size_t ub = troupe__cls_size(rs->span_cls);
    return troupe__shm_coll_begin(&rs->shm, rs->what, r->seq + 1, refs, (void *)rs->span,
                                  rs->span_bytes / (int64_t)ub, ub,
                                  troupe__cls_red_type(rs->span_cls), r->op);
}

/* Whether r reduces by the reduce-scatter (ZeRO stage 1 across nodes): a fused update with
 * sharded state needs the sums of this rank's shard only, and the parameters' gather
 * (troupe__apply_shard_post) brings the rest. Needs every rank's tensors in one span starting
 * at tensor 0 (the shard's bounds count elements from there), single precision, a sum, and
 * each shard within an MPI count. The same on every rank: it reads what the ranks agreed. */
static bool s_scatter_wanted(const troupe__req_t *r, const troupe__rs_t *rs)
{
    int size = troupe__eng.comm.size;
    if (r->kind != TROUPE__REQ_ALLREDUCE || r->apply_fn == NULL || r->nshard == 0 ||
        r->unshard || r->op != TROUPE_REDUCE_SUM || size < 2 || !rs->all_flat ||
        rs->span != r->tensors[0].data || rs->span_cls != TROUPE__CLS_F32 ||
        rs->span_bytes != r->bytes)
        return false;
    return troupe__ring_scatter_tmp_bytes(rs->span_bytes / (int64_t)sizeof(float),
                                          TROUPE__CLS_F32, size) /
               sizeof(float) <=
           (size_t)INT_MAX;
}

static troupe_status_t s_scatter_begin(troupe__rs_t *rs)
{
    int64_t units = rs->span_bytes / (int64_t)sizeof(float);
    size_t tmp_bytes = troupe__ring_scatter_tmp_bytes(units, TROUPE__CLS_F32, troupe__eng.comm.size);
    int tmp = s_take_buf(s_c.rtmp, s_c.rtmp_cap, s_c.rtmp_busy, tmp_bytes);
    if (tmp == -1) /* no bucket of this request is in flight, and requests go one at a time */
        return troupe__error(TROUPE_INTERNAL, "%s: no free ring buffer for the reduce-scatter",
                             rs->what);
    if (tmp == -2)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                             "%s: out of memory for a reduce-scatter buffer of %zu bytes",
                             rs->what, tmp_bytes);
    rs->scatter = true;
    rs->scatter_done = false;
    rs->sc_tmp = tmp;
    troupe__stats_add_scatter();
    return troupe__ring_scatter_start(&rs->sc, &troupe__eng.comm, units, TROUPE__CLS_F32,
                                      TROUPE_REDUCE_SUM, (char *)rs->span, s_c.rtmp[tmp],
                                      rs->what);
}

troupe_status_t troupe__engine_coll_scatter_test(troupe__req_t *r, troupe__rs_t *rs,
                                                 bool *progress, bool *done)
{
    *done = rs->scatter_done;
    if (*done)
        return TROUPE_OK;
    TROUPE_RETURN_IF_ERROR(
        troupe__ring_test(&rs->sc, &troupe__eng.comm, rs->what, &rs->scatter_done, progress));
    if (!rs->scatter_done)
        return TROUPE_OK;
    s_c.rtmp_busy[rs->sc_tmp] = false;
    rs->sc_tmp = -1;
    *done = true;
    if (troupe__trace_on()) {
        troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("seq", r->seq),
                                   TROUPE__TRACE_NUM("bytes", rs->span_bytes)};
        troupe__trace_emit(TROUPE__TRACK_BUCKET0, "allreduce", "reduce-scatter (sharded state)",
                           rs->sc.t_start_ns, troupe_now_ns(), a, 2);
    }
    return TROUPE_OK;
}

troupe_status_t troupe__engine_coll_mpi_begin(troupe__req_t *r, troupe__rs_t *rs)
{
    TROUPE_RETURN_IF_ERROR(troupe__apply_gather_post(r, rs));
    if (r->unshard || rs->plan.planned || rs->scatter)
        return TROUPE_OK;
    if (s_scatter_wanted(r, rs))
        return s_scatter_begin(rs);
    return troupe__bucket_plan(&rs->plan, r, rs->all_flat, rs->what);
}

#endif /* TROUPE_HAVE_MPI */
