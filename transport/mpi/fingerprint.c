/* troupe — request fingerprints (docs/architecture.md §6): what every rank sends before a collective's
 * (or a point-to-point move's) data moves, so that ranks that disagree fail naming the ranks,
 * the tensor and the field instead of hanging or reducing garbage. Their wire form, digest and
 * comparison (transport_impl.h: pure data, no MPI), and the exchange the engine runs for each
 * request (engine_impl.h: digests first, full fingerprints only when digests differ). */
#include "troupe_config.h"

#include "transport/mpi/engine_impl.h"
#include "transport/mpi/transport_impl.h"

#include "base/alloc.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "ir/prec.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *troupe__req_kind_name(int kind)
{
    switch (kind) {
    case TROUPE__REQ_ALLREDUCE:
        return "allreduce";
    case TROUPE__REQ_BROADCAST:
        return "broadcast";
    case TROUPE__REQ_SEND:
        return "send";
    case TROUPE__REQ_RECV:
        return "recv";
    default:
        return "unknown";
    }
}

size_t troupe__fp_size(size_t n)
{
    return sizeof(troupe__fp_header_t) + n * sizeof(troupe__fp_tensor_t);
}

void troupe__fp_encode(const troupe__req_t *r, void *buf)
{
    troupe__fp_header_t h;
    memset(&h, 0, sizeof h);
    h.magic = TROUPE__FP_MAGIC;
    h.seq = (int64_t)r->seq;
    h.kind = r->kind;
    h.op = r->kind == TROUPE__REQ_ALLREDUCE ? (int64_t)r->op : 0;
    h.root = r->kind == TROUPE__REQ_BROADCAST ? r->root : 0;
    h.fusion = r->fusion_bytes;
    h.bf16 = r->bf16_wire ? 1 : 0;
    h.apply = r->apply_fn != NULL ? (int64_t)r->apply_id : 0;
    h.n_side = r->apply_fn != NULL ? (int64_t)r->n_side : 0;
    h.n_private = r->apply_fn != NULL ? (int64_t)r->n_private : 0;
    h.private_node = r->apply_fn != NULL && r->n_private > 0 ? r->private_node : 0;
    h.unshard = r->apply_fn != NULL && r->unshard ? 1 : 0;
    h.n = (int64_t)r->n;
    memcpy(buf, &h, sizeof h);
    if (r->n > 0)
        memcpy((char *)buf + sizeof h, r->fp, r->n * sizeof(troupe__fp_tensor_t));
}

/* The digest hashes 64-bit words, one multiply-rotate-multiply round per word (xxHash64's
 * round), then avalanches (MurmurHash3's fmix64): FNV-1a byte by byte took 5 us for a
 * request of 100 tensors, on the critical path of every collective (bench_merge). */
#define S_SEED UINT64_C(0xcbf29ce484222325)
#define S_K1 UINT64_C(0x9e3779b185ebca87)
#define S_K2 UINT64_C(0xc2b2ae3d27d4eb4f)

static uint64_t s_mix(uint64_t h, int64_t v)
{
    h += (uint64_t)v * S_K2;
    h = (h << 31) | (h >> 33);
    return h * S_K1;
}

static uint64_t s_avalanche(uint64_t h)
{
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    return h ^ (h >> 33);
}

void troupe__fp_digest(const troupe__req_t *r, troupe__fp_digest_t *out)
{
    bool p2p = r->kind == TROUPE__REQ_SEND || r->kind == TROUPE__REQ_RECV;
    uint64_t h = S_SEED;
    if (!p2p) {
        h = s_mix(h, (int64_t)r->seq);
        h = s_mix(h, r->kind);
        h = s_mix(h, r->kind == TROUPE__REQ_ALLREDUCE ? (int64_t)r->op : 0);
        h = s_mix(h, r->kind == TROUPE__REQ_BROADCAST ? r->root : 0);
        h = s_mix(h, r->fusion_bytes);
        h = s_mix(h, r->bf16_wire ? 1 : 0);
        h = s_mix(h, r->apply_fn != NULL ? (int64_t)r->apply_id : 0);
        h = s_mix(h, r->apply_fn != NULL ? (int64_t)r->n_side : 0);
        h = s_mix(h, r->apply_fn != NULL ? (int64_t)r->n_private : 0);
        h = s_mix(h, r->apply_fn != NULL && r->n_private > 0 ? r->private_node : 0);
        h = s_mix(h, r->apply_fn != NULL && r->unshard ? 1 : 0);
    }
    h = s_mix(h, (int64_t)r->n);
    for (size_t i = 0; i < r->n; i++) {
        const troupe__fp_tensor_t *t = &r->fp[i];
        h = s_mix(h, t->node_id);
        h = s_mix(h, t->prec);
        h = s_mix(h, t->ndims);
        for (int64_t d = 0; d < t->ndims && d < TROUPE_MAX_DIMS; d++)
            h = s_mix(h, t->dims[d]);
        h = s_mix(h, t->count);
    }
    memset(out, 0, sizeof *out);
    out->magic = TROUPE__FP_MAGIC;
    out->seq = (int64_t)r->seq;
    out->kind = r->kind;
    out->n = (int64_t)r->n;
    out->hash = s_avalanche(h);
}

bool troupe__fp_digest_equal(const troupe__fp_digest_t *a, const troupe__fp_digest_t *b)
{
    return a->magic == b->magic && a->n == b->n && a->hash == b->hash;
}

troupe_status_t troupe__fp_check_frame(const void *buf, size_t size, int rank)
{
    troupe__fp_header_t h;
    if (size < sizeof h)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "fingerprint from rank %d: %zu bytes, shorter than its header", rank,
                             size);
    memcpy(&h, buf, sizeof h);
    if (h.magic != TROUPE__FP_MAGIC)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "fingerprint from rank %d: bad magic 0x%016" PRIx64 " (not troupe?)",
                             rank, (uint64_t)h.magic);
    if (h.n < 0 || (uint64_t)h.n > (SIZE_MAX - sizeof h) / sizeof(troupe__fp_tensor_t) ||
        troupe__fp_size((size_t)h.n) != size)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "fingerprint from rank %d: %zu bytes do not hold %" PRId64 " tensors",
                             rank, size, h.n);
    return TROUPE_OK;
}

static void s_dims(const troupe__fp_tensor_t *t, char *buf, size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    troupe__strbuf_putc(&sb, '[');
    for (int64_t i = 0; i < t->ndims && i < TROUPE_MAX_DIMS; i++)
        troupe__strbuf_printf(&sb, "%s%" PRId64, i ? ";" : "", t->dims[i]);
    troupe__strbuf_putc(&sb, ']');
}

static const char *s_op_name(int64_t op)
{
    return op >= TROUPE_REDUCE_SUM && op <= TROUPE_REDUCE_MIN
               ? troupe_reduce_op_name((troupe_reduce_op_t)op)
               : "invalid";
}

static const char *s_prec_name(int64_t p)
{
    return p >= 0 && p < TROUPE_PREC_COUNT ? troupe_prec_name((troupe_prec_t)p) : "invalid";
}

troupe_status_t troupe__fp_compare(const char *what, const void *a, int ra, const void *b, int rb)
{
    troupe__fp_header_t ha, hb;
    memcpy(&ha, a, sizeof ha);
    memcpy(&hb, b, sizeof hb);
    bool p2p = ha.kind == TROUPE__REQ_SEND || ha.kind == TROUPE__REQ_RECV;
    if (!p2p) {
        if (ha.kind != hb.kind)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: kind %s on rank %d but %s on rank %d",
                                 what, troupe__req_kind_name((int)ha.kind), ra,
                                 troupe__req_kind_name((int)hb.kind), rb);
        if (ha.seq != hb.seq)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: sequence number %" PRId64
                                 " on rank %d but %" PRId64 " on rank %d",
                                 what, ha.seq, ra, hb.seq, rb);
        if (ha.op != hb.op)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: op %s on rank %d but %s on rank %d",
                                 what, s_op_name(ha.op), ra, s_op_name(hb.op), rb);
        if (ha.root != hb.root)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: root %" PRId64
                                 " on rank %d but %" PRId64 " on rank %d",
                                 what, ha.root, ra, hb.root, rb);
        if (ha.fusion != hb.fusion)
            return troupe__error(
                TROUPE_FAILED_PRECONDITION,
                "%s: fingerprint mismatch: fusion bucket size (TROUPE_FUSION_BYTES) "
                "%" PRId64 " on rank %d but %" PRId64 " on rank %d: set it alike on every rank",
                what, ha.fusion, ra, hb.fusion, rb);
        if (ha.bf16 != hb.bf16)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: bfloat16 compression "
                                 "(TROUPE_COLL_BF16) on rank %d but not on rank %d",
                                 what, ha.bf16 ? ra : rb, ha.bf16 ? rb : ra);
        if (ha.apply != hb.apply || ha.n_side != hb.n_side) {
            char va[48] = "none", vb[48] = "none";
            if (ha.apply != 0)
                snprintf(va, sizeof va, "0x%" PRIx64 " (%" PRId64 " side arrays)",
                         (uint64_t)ha.apply, ha.n_side);
            if (hb.apply != 0)
                snprintf(vb, sizeof vb, "0x%" PRIx64 " (%" PRId64 " side arrays)",
                         (uint64_t)hb.apply, hb.n_side);
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: fused update %s on rank %d but %s on "
                                 "rank %d",
                                 what, va, ra, vb, rb);
        }
        if (ha.n_private != hb.n_private || ha.private_node != hb.private_node)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: fused update with %" PRId64
                                 " private side arrays (from node %" PRId64 ") on rank %d but %"
                                 PRId64 " (from node %" PRId64 ") on rank %d",
                                 what, ha.n_private, ha.private_node, ra, hb.n_private,
                                 hb.private_node, rb);
        if (ha.unshard != hb.unshard)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: rank %d gathers the sharded state "
                                 "(TROUPE_COLL_UNSHARD: a checkpoint) while rank %d reduces: "
                                 "every rank must save the checkpoint",
                                 what, ha.unshard ? ra : rb, ha.unshard ? rb : ra);
    }
    if (ha.n != hb.n)
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "%s: fingerprint mismatch: number of tensors %" PRId64
                             " on rank %d but %" PRId64 " on rank %d",
                             what, ha.n, ra, hb.n, rb);
    const char *ta = (const char *)a + sizeof ha, *tb = (const char *)b + sizeof hb;
    for (int64_t i = 0; i < ha.n; i++) {
        troupe__fp_tensor_t x, y;
        memcpy(&x, ta + (size_t)i * sizeof x, sizeof x);
        memcpy(&y, tb + (size_t)i * sizeof y, sizeof y);
        x.name[TROUPE__FP_NAME_MAX] = '\0';
        y.name[TROUPE__FP_NAME_MAX] = '\0';
        char who[96];
        snprintf(who, sizeof who, "tensor %" PRId64 " (node %" PRId64 " '%s')", i, x.node_id,
                 x.name[0] ? x.name : (y.name[0] ? y.name : "?"));
        if (x.node_id != 0 && y.node_id != 0 && x.node_id != y.node_id)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: %s node id %" PRId64
                                 " on rank %d but %" PRId64 " on rank %d",
                                 what, who, x.node_id, ra, y.node_id, rb);
        if (x.prec != y.prec)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: %s precision %s on rank %d but %s on "
                                 "rank %d",
                                 what, who, s_prec_name(x.prec), ra, s_prec_name(y.prec), rb);
        bool dims_differ = false;
        if (x.ndims != 0 && y.ndims != 0) {
            dims_differ = x.ndims != y.ndims;
            for (int64_t d = 0; !dims_differ && d < x.ndims && d < TROUPE_MAX_DIMS; d++)
                dims_differ = x.dims[d] != y.dims[d];
        }
        if (dims_differ) {
            char da[160], db[160];
            s_dims(&x, da, sizeof da);
            s_dims(&y, db, sizeof db);
            return troupe__error(
                TROUPE_FAILED_PRECONDITION,
                "%s: fingerprint mismatch: %s dims %s on rank %d but %s on rank %d", what, who, da,
                ra, db, rb);
        }
        if (x.count != y.count)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "%s: fingerprint mismatch: %s count %" PRId64
                                 " on rank %d but %" PRId64 " on rank %d",
                                 what, who, x.count, ra, y.count, rb);
    }
    return TROUPE_OK;
}

/* ---- the exchange (engine_impl.h) -------------------------------------------------------- */

#if TROUPE_HAVE_MPI

/* The tags r's digests travel on: sent, received. Point-to-point: the sender's digest travels
 * on S2R, the receiver's on R2S, so the channel A->B never mixes with B->A. */
static void s_tags(const troupe__req_t *r, int *send_tag, int *recv_tag)
{
    *send_tag = *recv_tag = TROUPE__TAG_FP_COLL;
    if (r->kind == TROUPE__REQ_SEND) {
        *send_tag = TROUPE__TAG_FP_S2R;
        *recv_tag = TROUPE__TAG_FP_R2S;
    } else if (r->kind == TROUPE__REQ_RECV) {
        *send_tag = TROUPE__TAG_FP_R2S;
        *recv_tag = TROUPE__TAG_FP_S2R;
    }
}

troupe_status_t troupe__fp_exchange_start(troupe__fp_exchange_t *x, const troupe__engine_comm_t *c,
                                          const troupe__req_t *r, const char *what, bool flat,
                                          const troupe__shm_ref_t *shm,
                                          const troupe__shm_ref_t *side_shm)
{
    size_t size = (size_t)c->size;
    x->peer = troupe_calloc(size, sizeof *x->peer);
    x->fp_peer = troupe_calloc(size, sizeof *x->fp_peer);
    x->fp_peer_size = troupe_calloc(size, sizeof *x->fp_peer_size);
    x->recv = troupe_calloc(size, sizeof *x->recv);
    x->state = troupe_calloc(size, 1);
    if (x->peer == NULL || x->fp_peer == NULL || x->fp_peer_size == NULL || x->recv == NULL ||
        x->state == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    troupe__fp_digest(r, &x->mine);
    x->mine.flat = flat ? 1 : 0;
    if (shm != NULL)
        x->mine.shm = *shm;
    for (size_t k = 0; side_shm != NULL && k < r->n_side && k < TROUPE_COLL_APPLY_MAX_SIDE; k++)
        x->mine.side_shm[k] = side_shm[k];
    x->stage = 1;
    int send_tag, recv_tag;
    s_tags(r, &send_tag, &recv_tag);
    x->tag = recv_tag;
    for (int p = 0; p < c->size; p++) {
        x->recv[p] = MPI_REQUEST_NULL;
        if (!troupe__req_involves(r, p, c->rank)) {
            x->state[p] = 2;
            continue;
        }
        int rc = MPI_Irecv(&x->peer[p], (int)sizeof x->peer[p], MPI_BYTE, p, recv_tag, c->ctl,
                           &x->recv[p]);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error(what, "MPI_Irecv (fingerprint)", rc);
        x->state[p] = 1;
        TROUPE_RETURN_IF_ERROR(
            troupe__engine_send_ctl(&x->mine, sizeof x->mine, p, send_tag, what));
    }
    return TROUPE_OK;
}

/* Stage 2: the digests differed somewhere: send the full fingerprint to the ranks involved,
 * receive theirs. */
static troupe_status_t s_stage2(troupe__fp_exchange_t *x, const troupe__engine_comm_t *c,
                                const troupe__req_t *r, const char *what)
{
    x->stage = 2;
    x->fp_size = troupe__fp_size(r->n);
    x->fp_mine = troupe_malloc(x->fp_size);
    if (x->fp_mine == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    troupe__fp_encode(r, x->fp_mine);
    int send_tag, recv_tag;
    s_tags(r, &send_tag, &recv_tag);
    for (int p = 0; p < c->size; p++) {
        if (!troupe__req_involves(r, p, c->rank))
            continue;
        x->state[p] = 0;
        TROUPE_RETURN_IF_ERROR(
            troupe__engine_send_ctl(x->fp_mine, x->fp_size, p, send_tag + TROUPE__TAG_FULL, what));
    }
    return TROUPE_OK;
}

static const void *s_fp_of(const troupe__fp_exchange_t *x, int p, int rank)
{
    return p == rank ? x->fp_mine : x->fp_peer[p];
}

/* Every full fingerprint is in: checks framing, then compares against rank 0's (point to
 * point: the lower rank's). */
static troupe_status_t s_compare_all(const troupe__fp_exchange_t *x, const troupe__engine_comm_t *c,
                                     const troupe__req_t *r, const char *what)
{
    for (int p = 0; p < c->size; p++) {
        if (p == c->rank || x->fp_peer[p] == NULL)
            continue;
        troupe_status_t st = troupe__fp_check_frame(x->fp_peer[p], x->fp_peer_size[p], p);
        if (st != TROUPE_OK)
            return troupe__error(TROUPE_TRANSPORT_ERROR, "%s: %s", what, troupe_last_error());
    }
    if (troupe__req_is_p2p(r)) {
        int lo = c->rank < r->peer ? c->rank : r->peer;
        int hi = c->rank < r->peer ? r->peer : c->rank;
        return troupe__fp_compare(what, s_fp_of(x, lo, c->rank), lo, s_fp_of(x, hi, c->rank), hi);
    }
    for (int p = 1; p < c->size; p++)
        TROUPE_RETURN_IF_ERROR(
            troupe__fp_compare(what, s_fp_of(x, 0, c->rank), 0, s_fp_of(x, p, c->rank), p));
    return TROUPE_OK;
}

/* Matches rank p's full fingerprint when it arrived (stage 2: sizes may differ, so probe). */
static troupe_status_t s_match_full(troupe__fp_exchange_t *x, const troupe__engine_comm_t *c, int p,
                                    const char *what)
{
    int flag = 0;
    MPI_Message m;
    MPI_Status st;
    int rc = MPI_Improbe(p, x->tag + TROUPE__TAG_FULL, c->ctl, &flag, &m, &st);
    if (rc != MPI_SUCCESS)
        return troupe__mpi_error(what, "MPI_Improbe (fingerprint)", rc);
    if (!flag)
        return TROUPE_OK;
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    x->fp_peer[p] = troupe_malloc(count > 0 ? (size_t)count : 1);
    if (x->fp_peer[p] == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    x->fp_peer_size[p] = (size_t)(count > 0 ? count : 0);
    rc = MPI_Imrecv(x->fp_peer[p], count, MPI_BYTE, &m, &x->recv[p]);
    if (rc != MPI_SUCCESS)
        return troupe__mpi_error(what, "MPI_Imrecv (fingerprint)", rc);
    x->state[p] = 1;
    return TROUPE_OK;
}

troupe_status_t troupe__fp_exchange_poll(troupe__fp_exchange_t *x, const troupe__engine_comm_t *c,
                                         const troupe__req_t *r, const char *what, bool *agreed)
{
    *agreed = false;
    bool all = true;
    for (int p = 0; p < c->size; p++) {
        if (x->state[p] == 0)
            TROUPE_RETURN_IF_ERROR(s_match_full(x, c, p, what));
        if (x->state[p] == 1) {
            int flag = 0;
            MPI_Status st;
            int rc = MPI_Test(&x->recv[p], &flag, &st);
            if (rc != MPI_SUCCESS)
                return troupe__mpi_error(what, "MPI_Test (fingerprint)", rc);
            if (flag) {
                int count = 0;
                MPI_Get_count(&st, MPI_BYTE, &count);
                if (x->stage == 2)
                    x->fp_peer_size[p] = (size_t)(count > 0 ? count : 0);
                else if (count != (int)sizeof(troupe__fp_digest_t))
                    return troupe__error(TROUPE_TRANSPORT_ERROR,
                                         "%s: fingerprint digest from rank %d has %d bytes, "
                                         "expected %zu",
                                         what, p, count, sizeof(troupe__fp_digest_t));
                x->state[p] = 2;
            }
        }
        if (x->state[p] != 2)
            all = false;
    }
    if (!all)
        return TROUPE_OK;
    if (x->stage == 2) {
        *agreed = true; /* unless the comparison below says otherwise */
        return s_compare_all(x, c, r, what);
    }
    for (int p = 0; p < c->size; p++) {
        if (!troupe__req_involves(r, p, c->rank))
            continue;
        if (x->peer[p].magic != TROUPE__FP_MAGIC)
            return troupe__error(TROUPE_TRANSPORT_ERROR,
                                 "%s: fingerprint digest from rank %d has a bad magic", what, p);
        if (!troupe__fp_digest_equal(&x->peer[p], &x->mine))
            return s_stage2(x, c, r, what);
    }
    *agreed = true;
    return TROUPE_OK;
}

bool troupe__fp_exchange_pending(const troupe__fp_exchange_t *x, int p)
{
    return x->state != NULL && x->state[p] != 2;
}

void troupe__fp_exchange_free(troupe__fp_exchange_t *x, int size)
{
    troupe_free(x->fp_mine);
    troupe_free(x->peer);
    if (x->fp_peer != NULL)
        for (int p = 0; p < size; p++)
            troupe_free(x->fp_peer[p]);
    troupe_free(x->fp_peer);
    troupe_free(x->fp_peer_size);
    troupe_free(x->recv);
    troupe_free(x->state);
    memset(x, 0, sizeof *x);
}

#endif /* TROUPE_HAVE_MPI */
