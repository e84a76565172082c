/* troupe — the fused update's state across ranks (engine_impl.h, apply.c's section; collective.h,
 * troupe_coll_apply_t): where the side spans of a fused update lie in shareable memory, the
 * shared-memory reduction that runs the update on each rank's chunk, and the private side arrays
 * (the optimizer state) it leaves sharded: each rank's chunk is current only on that rank until
 * a request that goes through MPI gathers them (MPI_Iallgatherv, in place, every rank giving
 * its chunk as shared memory cut it) or TROUPE_COLL_UNSHARD asks for it.
 *
 * Every rank holds the same set of sharded requests, since every rank adds and removes at the
 * same requests: so every rank decides alike whether a request gathers first.
 *
 * Thread safety: the engine's owner only (engine.c).
 * Ownership: the sharded set belongs to this file, from troupe__apply_init to
 * troupe__apply_stop; rs->gather_counts belongs to rs (troupe__apply_free).
 */
#include "troupe_config.h"

#include "transport/mpi/engine_impl.h"
#include "transport/mpi/transport_impl.h"

#include "base/alloc.h"
#include "base/log.h"
#include "base/status.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

void troupe_coll_shard_range(int64_t count, int rank, int size, int64_t *lo, int64_t *hi)
{
#if TROUPE_HAVE_MPI
    *lo = troupe__shm_chunk_lo(count, sizeof(float), rank, size);
    *hi = troupe__shm_chunk_lo(count, sizeof(float), rank + 1, size);
#else
    (void)rank;
    (void)size;
    *lo = 0;
    *hi = count;
#endif
}

#if TROUPE_HAVE_MPI

/* the requests (s_shard_key) whose private side arrays shared memory left sharded */
static struct {
    uint64_t *sharded;
    size_t nsharded, sharded_cap;
} s_s;

bool troupe__apply_init(void)
{
    s_s.sharded_cap = 16;
    s_s.nsharded = 0;
    s_s.sharded = troupe_calloc(s_s.sharded_cap, sizeof *s_s.sharded);
    return s_s.sharded != NULL;
}

void troupe__apply_stop(void)
{
    troupe_free(s_s.sharded);
    s_s.sharded = NULL;
    s_s.nsharded = s_s.sharded_cap = 0;
}

/* Whether side array s of every tensor of r lies as the tensors do from the first. */
static bool s_side_laid(const troupe__req_t *r, size_t s)
{
    const char *t0 = r->tensors[0].data, *s0 = r->side[s * r->n];
    bool laid = s0 != NULL;
    for (size_t i = 1; i < r->n && laid; i++)
        laid = (const char *)r->side[s * r->n + i] - s0 == (const char *)r->tensors[i].data - t0;
    return laid;
}

/* With r's fused update and a flat span in shareable memory: side_shm[s] locates side span s
 * when side array s of every tensor lies as the tensors do from the first (else it stays
 * zeroed, and every rank runs the update on every element after the sums). */
void troupe__apply_side_spans(const troupe__req_t *r, const troupe__rs_t *rs,
                              troupe__shm_ref_t *side_shm)
{
    for (size_t s = 0; s < r->n_side - r->nshard; s++) { /* a shard stays here */
        if (!s_side_laid(r, s) ||
            !troupe__shm_find(r->side[s * r->n], (size_t)rs->span_bytes, &side_shm[s])) {
            memset(side_shm, 0, TROUPE_COLL_APPLY_MAX_SIDE * sizeof *side_shm);
            return;
        }
    }
}

bool troupe__apply_sides_shared(const troupe__req_t *r, const troupe__fp_digest_t *d)
{
    for (size_t s = 0; s < r->n_side - r->nshard && r->apply_fn != NULL; s++)
        if (d->side_shm[s].id == 0)
            return false;
    return true;
}

/* A request's identity for the set of sharded requests, the same on every rank (made of what
 * the fingerprints compared): its update, its private side arrays (tensor 0's first one's
 * node: a dp's state nodes are its own, so two dp instances on one model differ), its first
 * and last tensor's nodes and its bytes. 0 when it has no private side arrays. */
static uint64_t s_shard_key(const troupe__req_t *r)
{
    if (r->apply_fn == NULL || r->n_private == 0 || r->n == 0 || r->nshard > 0)
        return 0; /* sharded state is never whole anywhere: nothing to gather */
    uint64_t v[7] = {r->apply_id,
                     r->n_side,
                     r->n_private,
                     (uint64_t)r->private_node,
                     (uint64_t)r->fp[0].node_id,
                     (uint64_t)r->fp[r->n - 1].node_id,
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
    for (size_t i = 0; i < s_s.nsharded; i++)
        if (s_s.sharded[i] == key)
            return i;
    return SIZE_MAX;
}

/* Notes that rs's private side arrays are left sharded (no-op when noted already). */
static troupe_status_t s_sharded_add(const troupe__rs_t *rs)
{
    if (s_sharded_find(rs->shard_key) != SIZE_MAX)
        return TROUPE_OK;
    if (s_s.nsharded == s_s.sharded_cap) {
        size_t cap = s_s.sharded_cap ? 2 * s_s.sharded_cap : 8;
        uint64_t *v = troupe_realloc(s_s.sharded, cap * sizeof *v);
        if (v == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
        s_s.sharded = v;
        s_s.sharded_cap = cap;
    }
    s_s.sharded[s_s.nsharded++] = rs->shard_key;
    return TROUPE_OK;
}

static void s_sharded_remove(uint64_t key)
{
    size_t i = s_sharded_find(key);
    if (i != SIZE_MAX)
        s_s.sharded[i] = s_s.sharded[--s_s.nsharded];
}

void troupe__apply_agreed(const troupe__req_t *r, troupe__rs_t *rs)
{
    rs->shard_key = s_shard_key(r);
    if (r->unshard && r->nshard > 0) { /* the caller holds the shards: nothing to move */
        rs->use_shm = rs->shm_apply = false;
        return;
    }
    /* sums through shared memory without the side spans: a gather has nothing to do there,
     * and an update on every rank needs whole state, which only MPI gathers (every rank
     * decides alike: the same agreement and the same sharded set) */
    if (rs->use_shm && !rs->shm_apply &&
        (r->unshard || (rs->shard_key != 0 && s_sharded_find(rs->shard_key) != SIZE_MAX)))
        rs->use_shm = false;
}

troupe_status_t troupe__apply_shm_begin(troupe__req_t *r, troupe__rs_t *rs,
                                        const troupe__shm_ref_t *refs)
{
    int size = troupe__eng.comm.size;
    size_t ub = troupe__cls_size(rs->span_cls); /* single precision (collective.c checked) */
    troupe__shm_ref_t side_refs[TROUPE_COLL_APPLY_MAX_SIDE * size];
    void *side_mine[TROUPE_COLL_APPLY_MAX_SIDE];
    size_t nshared = r->n_side - r->nshard;
    for (size_t k = 0; k < r->n_side; k++) {
        side_mine[k] = k < nshared ? r->side[k * r->n] : (void *)r->shard[k - nshared];
        for (int p = 0; p < size; p++)
            side_refs[k * (size_t)size + (size_t)p] =
                p == troupe__eng.comm.rank ? rs->fp.mine.side_shm[k] : rs->fp.peer[p].side_shm[k];
    }
    /* private side arrays updated here stay sharded until gathered: noted first, so that
     * a later request that goes another way gathers them (troupe__apply_gather_post) */
    if (r->n_private > 0 && !r->unshard && r->nshard == 0)
        TROUPE_RETURN_IF_ERROR(s_sharded_add(rs));
    return troupe__shm_coll_begin_apply(&rs->shm, rs->what, r->seq + 1, refs, (void *)rs->span,
                                        rs->span_bytes / (int64_t)ub, r->apply_fn, r->apply_arg,
                                        r->n_side, r->n_private, r->unshard, r->nshard > 0,
                                        side_refs, side_mine);
}

void troupe__apply_shm_done(const troupe__req_t *r, const troupe__rs_t *rs)
{
    if (r->unshard)
        s_sharded_remove(rs->shard_key);
}

/* Posts an MPI_Iallgatherv of each private side array in place, every rank giving its chunk
 * (troupe__shm_chunk_lo, as shared memory cut them), so that the update after the sums finds
 * them whole. */
troupe_status_t troupe__apply_gather_post(troupe__req_t *r, troupe__rs_t *rs)
{
    if (rs->shard_key == 0 || s_sharded_find(rs->shard_key) == SIZE_MAX)
        return TROUPE_OK;
    int size = troupe__eng.comm.size;
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
                                 troupe__eng.comm.data, q);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error(rs->what, "MPI_Iallgatherv", rc);
        rs->ngather++;
    }
    s_sharded_remove(rs->shard_key);
    return TROUPE_OK;
}

/* Copies elements [lo, hi) over r's tensors end to end between shared side array k's arrays
 * and flat[lo - lo .. hi - lo) (to_flat: into flat). */
static void s_side_copy(const troupe__req_t *r, size_t k, int64_t lo, int64_t hi, float *flat,
                        bool to_flat)
{
    int64_t at = 0;
    for (size_t i = 0; i < r->n && at < hi; i++) {
        int64_t count = r->tensors[i].count;
        int64_t a = lo > at ? lo : at, b = hi < at + count ? hi : at + count;
        float *side = (float *)r->side[k * r->n + i];
        if (b > a) {
            if (to_flat)
                memcpy(flat + (a - lo), side + (a - at), (size_t)(b - a) * sizeof(float));
            else
                memcpy(side + (a - at), flat + (a - lo), (size_t)(b - a) * sizeof(float));
        }
        at += count;
    }
}

/* Sharded state off the shared-memory update: this rank ran the update on its shard after the
 * sums; each shared side array (the parameters) now goes to every rank through
 * MPI_Iallgatherv, every rank giving its shard's elements: in place when the tensors and that
 * side array lie in one span, else through a flat copy (troupe__apply_shard_done unpacks it). */
troupe_status_t troupe__apply_shard_post(troupe__req_t *r, troupe__rs_t *rs)
{
    int size = troupe__eng.comm.size;
    int64_t units = r->bytes / (int64_t)sizeof(float);
    size_t nshared = r->n_side - r->nshard;
    bool laid = rs->flat && rs->span == r->tensors[0].data;
    for (size_t k = 0; k < nshared && laid; k++)
        laid = s_side_laid(r, k);
    if (units > INT_MAX)
        return troupe__error(TROUPE_UNIMPLEMENTED,
                             "%s: cannot gather %" PRId64 " updated elements in one MPI call",
                             rs->what, units);
    rs->gather_counts = troupe_calloc(2 * (size_t)size, sizeof *rs->gather_counts);
    if (rs->gather_counts == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
    for (int p = 0; p < size; p++) {
        int64_t lo = 0, hi = 0;
        troupe_coll_shard_range(units, p, size, &lo, &hi);
        rs->gather_counts[p] = (int)(hi - lo);
        rs->gather_counts[size + p] = (int)lo;
    }
    if (!laid) {
        rs->shard_flat = troupe_malloc((size_t)(units > 0 ? units : 1) * nshared * sizeof(float));
        if (rs->shard_flat == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", rs->what);
        for (size_t k = 0; k < nshared; k++)
            s_side_copy(r, k, r->shard_lo, r->shard_hi,
                        rs->shard_flat + (size_t)units * k + r->shard_lo, true);
    }
    for (size_t k = 0; k < nshared; k++) {
        MPI_Request *q = &rs->gather[rs->ngather];
        void *buf = laid ? r->side[k * r->n] : (void *)(rs->shard_flat + (size_t)units * k);
        int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, rs->gather_counts,
                                 rs->gather_counts + size, MPI_FLOAT, troupe__eng.comm.data, q);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error(rs->what, "MPI_Iallgatherv", rc);
        rs->ngather++;
    }
    rs->shard_posted = true;
    return TROUPE_OK;
}

void troupe__apply_shard_done(const troupe__req_t *r, troupe__rs_t *rs)
{
    int64_t units = r->bytes / (int64_t)sizeof(float);
    for (size_t k = 0; rs->shard_flat != NULL && k < r->n_side - r->nshard; k++)
        s_side_copy(r, k, 0, units, rs->shard_flat + (size_t)units * k, false);
}

troupe_status_t troupe__apply_gather_test(troupe__rs_t *rs, bool *progress, bool *done)
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

void troupe__apply_free(troupe__rs_t *rs)
{
    /* a gather still in flight (only on failures) may read its counts if MPI ever progresses
     * again: left to MPI, as the buckets' buffers */
    if (rs->ngather == 0) {
        troupe_free(rs->gather_counts);
        troupe_free(rs->shard_flat);
    }
    rs->gather_counts = NULL;
    rs->shard_flat = NULL;
}

#endif /* TROUPE_HAVE_MPI */
