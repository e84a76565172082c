/* troupe — the intra-node shared-memory allreduce (transport_impl.h; collective.h, Algorithms).
 *
 * When every rank of the job runs on this node (MPI_COMM_TYPE_SHARED), TROUPE_COLL_SHM is on
 * everywhere and every rank can map every other's memory (checked once, at start, on each
 * rank's control page), the host pools become shareable (base/shared_memory_impl.h) and an
 * allreduce whose tensors form one span in shareable memory on every rank (the flat plan: a
 * routine's gradients) is reduced directly in the ranks' own buffers, without MPI messages or
 * copies through the kernel:
 *
 *   1. arrive:  each rank maps the others' spans (cached per region) and stores the request's
 *               sequence number in its control page, with a bit telling whether its mappings
 *               failed; it waits until every rank arrived (its gradients are complete and lent);
 *               if any rank failed to map, every rank sees it and takes the MPI path instead
 *               (and shared memory stays off from then on, on every rank alike);
 *   2. reduce:  rank c owns chunk c of the span (bounds at multiples of 64 bytes from the
 *               span's start: whole cache lines when spans are 64-byte aligned, as a pool's
 *               arrays are); block by block (two ranks: in one pass) it sums
 *               the ranks' copies in rank order 0, 1, ..., p-1 (then divides, for a mean) and
 *               writes the result into every rank's copy: each rank reads and writes 1/p of
 *               every buffer, all ranks in parallel, and every rank ends with the same bits;
 *      with a fused update (troupe_coll_apply_t), the block's sums go to the update, which
 *      writes this rank's side arrays, and the block of each shared side array is copied into
 *      every other rank's copy (the tensors' own copies are not written; the private side
 *      arrays, the optimizer state, stay with this rank: ZeRO stage 1); a gather
 *      (TROUPE_COLL_UNSHARD) instead copies this rank's chunk of each private side array into
 *      every other rank's copy;
 *   3. depart:  each rank stores the sequence number again in its depart word and waits until
 *               every rank departed: until then others may still write into its buffer. The
 *               first rank to see every departure may finish its program and stop while a
 *               slower one has yet to read its depart word: its control page is released
 *               with its words intact (troupe__shm_free_keep), not zeroed.
 *
 * Two waits per allreduce on shared flags (sub-microsecond) replace the ring's 2(p-1) message
 * rounds through Open MPI's shared-memory transport, whose large messages go through the
 * kernel's process_vm_readv (CMA) with page pinning per message. Waiting polls: after the
 * engine's deadline without progress a liveness probe (engine_probe.c) names the ranks that do not
 * answer (a dead rank); if all answer, the error says so (a rank whose request failed
 * part-way, leaving the others waiting: their deadline ends it).
 * Known limit: a rank that gives up part-way (its deadline, a cluster failure) hands its
 * buffer back while slower ranks may still write their chunks into it.
 *
 * Thread safety: the engine's owner only (engine.c), except start/stop (main thread, engine not
 * running).
 */
#define _GNU_SOURCE
#include "troupe_config.h"

#include "transport/mpi/transport_impl.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/shared_memory_impl.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if TROUPE_HAVE_MPI
#include <mpi.h>

/* A rank's control page: written by its owner only, read by the others. */
typedef struct s_ctl {
    _Alignas(64) _Atomic uint64_t arrive; /* seq << 1 | 1 when this rank could not map */
    _Alignas(64) _Atomic uint64_t depart; /* seq */
} s_ctl_t;

/* A peer's region mapped here. */
typedef struct s_map {
    int rank;
    uint64_t id;
    void *base;
    int64_t len;
    uint64_t used; /* LRU stamp */
} s_map_t;

#define S_MAPS_PER_RANK 8                /* peer regions kept mapped per rank (LRU) */
#define S_BLOCK_BYTES 8192               /* reduced in L1 before being written back */
#define S_SLICE_BYTES ((int64_t)1 << 20) /* reduced per engine turn (probes keep flowing) */
#define S_ALIGN_BYTES 64                 /* chunk bounds: whole cache lines */

static struct {
    bool on;
    int rank, size;
    s_ctl_t *mine; /* this rank's control page (a region of its own) */
    s_ctl_t **ctl; /* [size]: every rank's control page as mapped here */
    int64_t ctl_len;
    s_map_t *maps; /* [size * S_MAPS_PER_RANK] */
    uint64_t stamp;
    int fail_maps; /* tests: the next this many peer mappings fail */
    _Alignas(64) unsigned char tmp[S_BLOCK_BYTES];
} s_m;

bool troupe__shm_coll_on(void)
{
    return s_m.on;
}

void troupe__shm_coll_fail_maps(int n)
{
    s_m.fail_maps = n;
}

/* Unmaps everything mapped from peers and frees this rank's control page. */
static void s_release(void)
{
    if (s_m.maps != NULL)
        for (int i = 0; i < s_m.size * S_MAPS_PER_RANK; i++)
            troupe__shm_unmap(s_m.maps[i].base, s_m.maps[i].len);
    troupe_free(s_m.maps);
    if (s_m.ctl != NULL)
        for (int p = 0; p < s_m.size; p++)
            if (p != s_m.rank)
                troupe__shm_unmap(s_m.ctl[p], s_m.ctl_len);
    troupe_free(s_m.ctl);
    /* Kept, not zeroed: a slower peer may still be polling this rank's depart word of the
     * last collective (it completes once it reads it), and zeros would read as "not departed"
     * until its deadline failed a collective that every rank completed. */
    troupe__shm_free_keep(s_m.mine);
    s_m.maps = NULL;
    s_m.ctl = NULL;
    s_m.mine = NULL;
    s_m.on = false;
}

/* Why shared memory stays off ("" when it can be on) for this rank alone. */
static const char *s_local_veto(MPI_Comm comm, int size)
{
    if (size < 2)
        return "one rank";
    MPI_Comm node; /* collective: called whatever this rank's TROUPE_COLL_SHM says */
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return "MPI_Comm_split_type failed";
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    if (node_size != size)
        return "the ranks span several nodes";
    if (!troupe_config_coll_shm())
        return "TROUPE_COLL_SHM=0";
    return "";
}

troupe_status_t troupe__shm_coll_start(const void *comm_p, int rank, int size)
{
    MPI_Comm comm = *(const MPI_Comm *)comm_p;
    int fail_maps = s_m.fail_maps;
    memset(&s_m, 0, sizeof s_m);
    s_m.fail_maps = fail_maps;
    s_m.rank = rank;
    s_m.size = size;
    const char *veto = s_local_veto(comm, size); /* collective: every rank calls it */
    troupe__shm_ref_t mine = {0};
    if (veto[0] == '\0') {
        s_m.mine = troupe__shm_alloc(sizeof(s_ctl_t));
        if (s_m.mine == NULL || !troupe__shm_find(s_m.mine, sizeof(s_ctl_t), &mine))
            veto = "cannot create a shared-memory control page (memfd_create)";
    }
    troupe__shm_ref_t *all = troupe_calloc((size_t)size, sizeof *all);
    s_m.ctl = troupe_calloc((size_t)size, sizeof *s_m.ctl);
    s_m.maps = troupe_calloc((size_t)size * S_MAPS_PER_RANK, sizeof *s_m.maps);
    if (all == NULL || s_m.ctl == NULL || s_m.maps == NULL)
        veto = "out of memory";
    /* Any rank's veto so far (several nodes, switched off, no memory) ends it on every rank
     * before the control pages travel. */
    int can = veto[0] == '\0', all_can = 0;
    int rc = MPI_Allreduce(&can, &all_can, 1, MPI_INT, MPI_MIN, comm);
    if (rc == MPI_SUCCESS && all_can)
        rc =
            MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, comm);
    if (rc != MPI_SUCCESS && veto[0] == '\0')
        veto = "MPI_Allreduce or MPI_Allgather at start failed";
    else if (!all_can && veto[0] == '\0')
        veto = "another rank cannot use it";
    char why[256];
    snprintf(why, sizeof why, "%s", veto);
    if (why[0] == '\0') {
        s_m.ctl_len = mine.len;
        for (int p = 0; p < size && why[0] == '\0'; p++) {
            if (p == rank) {
                s_m.ctl[p] = s_m.mine;
                continue;
            }
            void *base = NULL;
            if (all[p].id == 0)
                snprintf(why, sizeof why, "rank %d has no control page", p);
            else if (troupe__shm_map(&all[p], &base) != TROUPE_OK)
                snprintf(why, sizeof why, "%s", troupe_last_error());
            else
                s_m.ctl[p] = base;
        }
    }
    int ok = why[0] == '\0', all_ok = 0;
    if (all_can) /* every rank got here through the Allgather: agree on the mappings */
        rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    troupe_free(all);
    if (rc != MPI_SUCCESS || !all_ok) {
        if (why[0] == '\0')
            snprintf(why, sizeof why, "another rank cannot use it");
        TROUPE_LOG(size > 1 ? TROUPE_LOG_INFO : TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT,
                   "shared-memory allreduce off: %s", why);
        s_release();
        troupe__shm_set_pools(false);
        return TROUPE_OK;
    }
    s_m.on = true;
    troupe__shm_set_pools(true);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TRANSPORT,
               "shared-memory allreduce on: %d ranks on this node", size);
    return TROUPE_OK;
}

void troupe__shm_coll_stop(void)
{
    s_release();
    troupe__shm_set_pools(false);
}

/* rank p's region `ref` mapped here (cached; LRU among p's S_MAPS_PER_RANK). */
static troupe_status_t s_peer_base(int p, const troupe__shm_ref_t *ref, char **out)
{
    if (s_m.fail_maps > 0) {
        s_m.fail_maps--;
        return troupe__error(TROUPE_UNAVAILABLE, "shared memory: mapping failure injected (test)");
    }
    s_map_t *m = &s_m.maps[(size_t)p * S_MAPS_PER_RANK], *victim = &m[0];
    for (int i = 0; i < S_MAPS_PER_RANK; i++) {
        if (m[i].base != NULL && m[i].id == ref->id && m[i].len == ref->len) {
            m[i].used = ++s_m.stamp;
            *out = m[i].base;
            return TROUPE_OK;
        }
        if (m[i].base == NULL || (victim->base != NULL && m[i].used < victim->used))
            victim = &m[i];
    }
    void *base = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__shm_map(ref, &base));
    troupe__shm_unmap(victim->base, victim->len);
    *victim =
        (s_map_t){.rank = p, .id = ref->id, .base = base, .len = ref->len, .used = ++s_m.stamp};
    *out = base;
    return TROUPE_OK;
}

int64_t troupe__shm_chunk_lo(int64_t units, size_t unit_bytes, int k, int size)
{
    if (k >= size)
        return units;
    int64_t a = S_ALIGN_BYTES / (int64_t)unit_bytes;
    a = a < 1 ? 1 : a;
    return units * k / size / a * a;
}

/* First unit of chunk k of c. */
static int64_t s_chunk_lo(const troupe__shm_coll_t *c, int k)
{
    return troupe__shm_chunk_lo(c->units, c->unit_bytes, k, s_m.size);
}

/* Rank p's span at `ref` (an offset into one of its regions) of `bytes`, mapped here into *out;
 * false (message recorded) when it lies outside the region or cannot be mapped. */
static bool s_map_span(int p, const troupe__shm_ref_t *ref, int64_t bytes, char **out)
{
    char *base = NULL;
    if (ref->off < 0 || ref->off > ref->len || bytes > ref->len - ref->off) {
        troupe__error(TROUPE_INVALID_ARGUMENT, "rank %d's span lies outside its region", p);
        return false;
    }
    if (s_peer_base(p, ref, &base) != TROUPE_OK)
        return false;
    *out = base + ref->off;
    return true;
}

/* Maps every rank's span (and side spans, c->n_side of them) and posts this rank's arrival. */
static troupe_status_t s_begin(troupe__shm_coll_t *c, const char *what, const troupe__shm_ref_t *refs,
                               void *mine, const troupe__shm_ref_t *side_refs,
                               void *const *side_mine)
{
    int64_t bytes = c->units * (int64_t)c->unit_bytes;
    c->buf = troupe_calloc((size_t)s_m.size, sizeof *c->buf);
    if (c->n_side > 0)
        c->side = troupe_calloc(c->n_side * (size_t)s_m.size, sizeof *c->side);
    bool failed = c->buf == NULL || (c->n_side > 0 && c->side == NULL);
    if (failed) /* posted like a mapping failure: every rank falls back */
        troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    for (int p = 0; p < s_m.size && !failed; p++) {
        for (size_t k = 0; k <= c->n_side && !failed; k++) { /* k == 0: the span itself */
            char **dst = k == 0 ? &c->buf[p] : &c->side[(k - 1) * (size_t)s_m.size + (size_t)p];
            if (p == s_m.rank)
                *dst = k == 0 ? mine : side_mine[k - 1];
            else if (k > 0 && c->sharded && k - 1 >= c->n_side - c->n_private)
                *dst = NULL; /* another rank's shard: never read here */
            else
                failed = !s_map_span(p, k == 0 ? &refs[p]
                                                : &side_refs[(k - 1) * (size_t)s_m.size + (size_t)p],
                                     bytes, dst);
        }
    }
    if (failed)
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT,
                   "%s: cannot map another rank's memory (%s); the ranks use the ring from now on",
                   what, troupe_last_error());
    c->lo = s_chunk_lo(c, s_m.rank);
    c->hi = s_chunk_lo(c, s_m.rank + 1);
    c->next = c->lo;
    /* release: this rank's gradients (written before the request reached the engine) are
     * visible to whoever sees the arrival */
    atomic_store_explicit(&s_m.mine->arrive, c->seq << 1 | (failed ? 1u : 0u),
                          memory_order_release);
    c->state = TROUPE__SHM_ARRIVED;
    c->t_begin_ns = troupe_now_ns();
    return TROUPE_OK;
}

/* c zeroed and set for an allreduce (`seq`, `units` of `unit_bytes`, type, op). */
static void s_init(troupe__shm_coll_t *c, uint64_t seq, int64_t units, size_t unit_bytes,
                   troupe__red_type_t type, troupe_reduce_op_t op)
{
    memset(c, 0, sizeof *c);
    c->seq = seq;
    c->units = units;
    c->unit_bytes = unit_bytes;
    c->type = type;
    c->op = op;
}

troupe_status_t troupe__shm_coll_begin(troupe__shm_coll_t *c, const char *what, uint64_t seq,
                                       const troupe__shm_ref_t *refs, void *mine, int64_t units,
                                       size_t unit_bytes, troupe__red_type_t type,
                                       troupe_reduce_op_t op)
{
    s_init(c, seq, units, unit_bytes, type, op);
    return s_begin(c, what, refs, mine, NULL, NULL);
}

troupe_status_t troupe__shm_coll_begin_apply(troupe__shm_coll_t *c, const char *what, uint64_t seq,
                                             const troupe__shm_ref_t *refs, void *mine,
                                             int64_t units, troupe_coll_apply_fn fn,
                                             const void *arg, size_t n_side,
                                             size_t n_private, bool gather, bool sharded,
                                             const troupe__shm_ref_t *side_refs,
                                             void *const *side_mine)
{
    s_init(c, seq, units, sizeof(float), TROUPE__RED_F32, TROUPE_REDUCE_SUM);
    c->apply_fn = fn;
    c->apply_arg = arg;
    c->n_side = n_side;
    c->n_private = n_private;
    c->gather = gather;
    c->sharded = sharded;
    return s_begin(c, what, refs, mine, side_refs, side_mine);
}

/* The ranks' values of the n units at byte offset `off` summed (reduced with c's op) in rank
 * order 0, 1, ..., p-1 into s_m.tmp. */
static void s_sum_block(const troupe__shm_coll_t *c, size_t off, int64_t n)
{
    memcpy(s_m.tmp, c->buf[0] + off, (size_t)n * c->unit_bytes);
    for (int p = 1; p < s_m.size; p++)
        troupe__reduce_into(c->type, c->op, s_m.tmp, c->buf[p] + off, n);
}

/* This rank's `bytes` at byte offset `off` of side array k copied into every other rank's. */
static void s_push_side(troupe__shm_coll_t *c, size_t k, size_t off, size_t bytes)
{
    size_t size = (size_t)s_m.size;
    const char *mine = c->side[k * size + (size_t)s_m.rank] + off;
    for (size_t p = 0; p < size; p++)
        if (p != (size_t)s_m.rank)
            memcpy(c->side[k * size + p] + off, mine, bytes);
}

/* The fused update of [from, to) of this rank's chunk (single precision): block by block, the
 * ranks' values summed in rank order 0, 1, ..., p-1 (as s_reduce_range sums), the update run
 * on this rank's side arrays, and the side values it wrote copied into every other rank's. */
static void s_apply_range(troupe__shm_coll_t *c, int64_t from, int64_t to)
{
    int64_t per = S_BLOCK_BYTES / (int64_t)sizeof(float);
    size_t size = (size_t)s_m.size;
    float *side[TROUPE_COLL_APPLY_MAX_SIDE];
    for (int64_t i = from; i < to; i += per) {
        int64_t n = to - i < per ? to - i : per;
        size_t off = (size_t)i * sizeof(float), bytes = (size_t)n * sizeof(float);
        s_sum_block(c, off, n);
        for (size_t k = 0; k < c->n_side; k++) {
            bool shard = c->sharded && k >= c->n_side - c->n_private;
            side[k] = (float *)(c->side[k * size + (size_t)s_m.rank] +
                                (shard ? off - (size_t)c->lo * sizeof(float) : off));
        }
        c->apply_fn(c->apply_arg, n, (const float *)s_m.tmp, side);
        for (size_t k = 0; k < c->n_side - c->n_private; k++) /* the shared ones */
            s_push_side(c, k, off, bytes);
    }
}

/* A gather: [from, to) of this rank's chunk of each private side array copied into every
 * other rank's copy. */
static void s_gather_range(troupe__shm_coll_t *c, int64_t from, int64_t to)
{
    size_t off = (size_t)from * sizeof(float), bytes = (size_t)(to - from) * sizeof(float);
    for (size_t k = c->n_side - c->n_private; k < c->n_side; k++)
        s_push_side(c, k, off, bytes);
}

/* Reduces [from, to) of this rank's chunk into every rank's copy. */
static void s_reduce_range(troupe__shm_coll_t *c, int64_t from, int64_t to)
{
    size_t ub = c->unit_bytes;
    if (s_m.size == 2 && c->op != TROUPE_REDUCE_MEAN) { /* one pass, no block copies */
        troupe__reduce_pair(c->type, c->op, c->buf[0] + (size_t)from * ub,
                            c->buf[1] + (size_t)from * ub, to - from);
        return;
    }
    int64_t per = S_BLOCK_BYTES / (int64_t)ub;
    for (int64_t i = from; i < to; i += per) {
        int64_t n = to - i < per ? to - i : per;
        size_t off = (size_t)i * ub, bytes = (size_t)n * ub;
        s_sum_block(c, off, n);
        if (c->op == TROUPE_REDUCE_MEAN)
            troupe__divide_by(c->type, s_m.tmp, n, s_m.size);
        for (int p = 0; p < s_m.size; p++)
            memcpy(c->buf[p] + off, s_m.tmp, bytes);
    }
}

troupe_status_t troupe__shm_coll_test(troupe__shm_coll_t *c, bool *progress)
{
    if (c->state == TROUPE__SHM_ARRIVED) {
        bool fallback = false;
        for (int p = 0; p < s_m.size; p++) {
            uint64_t v = atomic_load_explicit(&s_m.ctl[p]->arrive, memory_order_acquire);
            if ((v >> 1) < c->seq)
                return TROUPE_OK; /* not yet */
            fallback |= (v & 1u) != 0;
        }
        *progress = true;
        if (fallback) {
            /* every rank saw the same flags: all take the MPI path, now and from now on */
            TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TRANSPORT,
                       "shared-memory allreduce off from now on: a rank could not map another's "
                       "memory (its warning says why); this request and later ones use MPI");
            c->state = TROUPE__SHM_FALLBACK;
            s_m.on = false;
            troupe__shm_set_pools(false);
            return TROUPE_OK;
        }
        c->state = TROUPE__SHM_REDUCING;
        c->t_arrived_ns = troupe_now_ns();
    }
    if (c->state == TROUPE__SHM_REDUCING) {
        int64_t slice = S_SLICE_BYTES / (int64_t)c->unit_bytes;
        int64_t to = c->hi - c->next < slice ? c->hi : c->next + slice;
        if (c->gather)
            s_gather_range(c, c->next, to);
        else if (c->apply_fn != NULL)
            s_apply_range(c, c->next, to);
        else
            s_reduce_range(c, c->next, to);
        c->next = to;
        *progress = true;
        if (c->next < c->hi)
            return TROUPE_OK;
        atomic_store_explicit(&s_m.mine->depart, c->seq, memory_order_release);
        c->state = TROUPE__SHM_DEPARTED;
        c->t_reduced_ns = troupe_now_ns();
    }
    if (c->state == TROUPE__SHM_DEPARTED) {
        for (int p = 0; p < s_m.size; p++)
            if (atomic_load_explicit(&s_m.ctl[p]->depart, memory_order_acquire) < c->seq)
                return TROUPE_OK;
        *progress = true;
        c->state = TROUPE__SHM_DONE;
        c->t_done_ns = troupe_now_ns();
        troupe__stats_add_shm();
    }
    return TROUPE_OK;
}

void troupe__shm_coll_free(troupe__shm_coll_t *c)
{
    troupe_free(c->buf);
    troupe_free(c->side);
    c->buf = NULL;
    c->side = NULL;
}

#endif /* TROUPE_HAVE_MPI */
