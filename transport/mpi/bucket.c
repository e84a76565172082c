/* troupe — fusion buckets: the planner and the staging conversions (bucket_impl.h;
 * collective.h, Fusion buckets). */
#include "transport/mpi/bucket_impl.h"

#include "base/alloc.h"
#include "base/status.h"
#include "base/vec.h"
#include "ir/prec.h"

#include <string.h>

/* ---- classes ----------------------------------------------------------------------------- */

troupe__cls_t troupe__cls_of(const troupe__req_t *r, troupe_prec_t p)
{
    if (r->kind == TROUPE__REQ_BROADCAST)
        return TROUPE__CLS_BYTES;
    if (r->bf16_wire && p == TROUPE_PREC_SINGLE)
        return TROUPE__CLS_BF16W;
    switch (p) {
    case TROUPE_PREC_DOUBLE:
        return TROUPE__CLS_F64;
    case TROUPE_PREC_INT32:
        return TROUPE__CLS_I32;
    case TROUPE_PREC_INT64:
        return TROUPE__CLS_I64;
    case TROUPE_PREC_UINT32:
        return TROUPE__CLS_U32;
    case TROUPE_PREC_UINT64:
        return TROUPE__CLS_U64;
    default:
        return TROUPE__CLS_F32; /* single, half, bfloat16, fp8 (checked at the call) */
    }
}

size_t troupe__cls_size(troupe__cls_t c)
{
    switch (c) {
    case TROUPE__CLS_F64:
    case TROUPE__CLS_I64:
    case TROUPE__CLS_U64:
        return 8;
    case TROUPE__CLS_BF16W:
        return 2;
    case TROUPE__CLS_BYTES:
        return 1;
    default:
        return 4;
    }
}

troupe__red_type_t troupe__cls_red_type(troupe__cls_t c)
{
    static const troupe__red_type_t k_type[TROUPE__NCLS] = {
        [TROUPE__CLS_F32] = TROUPE__RED_F32,    [TROUPE__CLS_F64] = TROUPE__RED_F64,
        [TROUPE__CLS_I32] = TROUPE__RED_I32,    [TROUPE__CLS_I64] = TROUPE__RED_I64,
        [TROUPE__CLS_U32] = TROUPE__RED_U32,    [TROUPE__CLS_U64] = TROUPE__RED_U64,
        [TROUPE__CLS_BF16W] = TROUPE__RED_BF16, [TROUPE__CLS_BYTES] = TROUPE__RED_NONE};
    return k_type[c];
}

bool troupe__cls_native(troupe__cls_t c, troupe_prec_t p)
{
    if (c == TROUPE__CLS_BF16W)
        return false; /* converted on the way in and out */
    return c != TROUPE__CLS_F32 || p == TROUPE_PREC_SINGLE;
}

size_t troupe__req_unit_bytes(const troupe__req_t *r, size_t t)
{
    return r->kind == TROUPE__REQ_BROADCAST ? 1 : troupe_prec_size_bytes(r->tensors[t].prec);
}

int64_t troupe__req_units(const troupe__req_t *r, size_t t)
{
    const troupe_coll_tensor_t *x = &r->tensors[t];
    return r->kind == TROUPE__REQ_BROADCAST ? x->count * (int64_t)troupe_prec_size_bytes(x->prec)
                                            : x->count;
}

bool troupe__bucket_flat(const troupe__req_t *r, const char **span, int64_t *span_bytes,
                         troupe__cls_t *cls_out)
{
    if (r->kind != TROUPE__REQ_ALLREDUCE && r->kind != TROUPE__REQ_BROADCAST)
        return false;
    const char *start = NULL, *end = NULL;
    troupe__cls_t cls = TROUPE__NCLS;
    for (size_t j = 0; j < r->n; j++) {
        int64_t u = troupe__req_units(r, j);
        if (u == 0)
            continue;
        troupe__cls_t c = troupe__cls_of(r, r->tensors[j].prec);
        if ((cls != TROUPE__NCLS && c != cls) || !troupe__cls_native(c, r->tensors[j].prec))
            return false;
        const char *p = r->tensors[j].data;
        if (end != NULL && p != end)
            return false;
        if (start == NULL)
            start = p;
        cls = c;
        end = p + u * (int64_t)troupe__req_unit_bytes(r, j);
    }
    *span = start;
    *span_bytes = end - start;
    *cls_out = cls;
    return cls != TROUPE__NCLS;
}

/* ---- the plan ---------------------------------------------------------------------------- */

void *troupe__seg_ptr(const troupe__req_t *r, const troupe__seg_t *s)
{
    return (char *)r->tensors[s->t].data + s->off * (int64_t)troupe__req_unit_bytes(r, s->t);
}

size_t troupe__bucket_bytes(const troupe__bucket_t *b)
{
    return (size_t)b->units * troupe__cls_size(b->cls);
}

void troupe__bucket_plan_free(troupe__bucket_plan_t *p)
{
    troupe_free(p->segs);
    troupe_free(p->bks);
    memset(p, 0, sizeof *p);
}

static troupe_status_t s_add_seg(troupe__bucket_plan_t *p, size_t t, int64_t off, int64_t count,
                                 const char *what)
{
    if (!TROUPE__VEC_PUSH(p->segs, p->nsegs, p->segs_cap, ((troupe__seg_t){t, off, count})))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    p->bks[p->nbks - 1].units += count;
    return TROUPE_OK;
}

static troupe_status_t s_open_bucket(troupe__bucket_plan_t *p, troupe__cls_t cls, const char *what)
{
    troupe__bucket_t b = {cls, p->nsegs, 0, 0, false, -1};
    if (!TROUPE__VEC_PUSH(p->bks, p->nbks, p->bks_cap, b))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    return TROUPE_OK;
}

/* True when bucket b's segments are all of its own type and lie back to back in this rank's
 * memory, in order (one segment always does): then the bucket is reduced in place, as one
 * span, without staging copies, as with PyTorch DDP's gradients that are views of a flat
 * bucket (a routine's per-stream arrays are packed that way: actors/routine.h). The plan,
 * which every rank makes alike, does not depend on it; only this rank's copies do. */
static bool s_contiguous(const troupe__req_t *r, const troupe__bucket_plan_t *p,
                         const troupe__bucket_t *b)
{
    const char *end = NULL;
    for (size_t k = 0; k < b->nseg; k++) {
        const troupe__seg_t *s = &p->segs[b->seg0 + k];
        if (!troupe__cls_native(b->cls, r->tensors[s->t].prec))
            return false;
        const char *ptr = troupe__seg_ptr(r, s);
        if (end != NULL && ptr != end)
            return false;
        end = ptr + s->count * (int64_t)troupe__req_unit_bytes(r, s->t);
    }
    return true;
}

static void s_close_bucket(const troupe__req_t *r, troupe__bucket_plan_t *p)
{
    troupe__bucket_t *b = &p->bks[p->nbks - 1];
    b->nseg = p->nsegs - b->seg0;
    b->in_place = s_contiguous(r, p, b);
}

/* True when tensor j gets buckets of its own: larger than a bucket (cap units), or of at least
 * TROUPE_COLL_INPLACE_BYTES in its own type (reduced in place, no staging copies). */
static bool s_own_buckets(const troupe__req_t *r, size_t j, troupe__cls_t cls, int64_t cap)
{
    int64_t u = troupe__req_units(r, j);
    return u > cap || (troupe__cls_native(cls, r->tensors[j].prec) &&
                       u * (int64_t)troupe__cls_size(cls) >= TROUPE_COLL_INPLACE_BYTES);
}

/* Plans class cls (first seen at tensor i): first the tensors with buckets of their own, slice
 * by slice, then the others packed in order into shared buckets of at most cap units. */
static troupe_status_t s_plan_class(troupe__bucket_plan_t *p, const troupe__req_t *r, size_t i,
                                    troupe__cls_t cls, int64_t cap, const char *what)
{
    for (size_t j = i; j < r->n; j++) {
        int64_t u = troupe__req_units(r, j);
        if (troupe__cls_of(r, r->tensors[j].prec) != cls || u == 0 ||
            !s_own_buckets(r, j, cls, cap))
            continue;
        for (int64_t off = 0; off < u; off += cap) {
            TROUPE_RETURN_IF_ERROR(s_open_bucket(p, cls, what));
            TROUPE_RETURN_IF_ERROR(s_add_seg(p, j, off, u - off < cap ? u - off : cap, what));
            s_close_bucket(r, p);
        }
    }
    bool open = false;
    for (size_t j = i; j < r->n; j++) {
        int64_t u = troupe__req_units(r, j);
        if (troupe__cls_of(r, r->tensors[j].prec) != cls || u == 0 || s_own_buckets(r, j, cls, cap))
            continue;
        if (open && p->bks[p->nbks - 1].units + u > cap) {
            s_close_bucket(r, p);
            open = false;
        }
        if (!open) {
            TROUPE_RETURN_IF_ERROR(s_open_bucket(p, cls, what));
            open = true;
        }
        TROUPE_RETURN_IF_ERROR(s_add_seg(p, j, 0, u, what));
    }
    if (open)
        s_close_bucket(r, p);
    return TROUPE_OK;
}

/* Units of class cls per bucket: the fingerprinted fusion size, within the message limit. */
static int64_t s_cap(const troupe__req_t *r, troupe__cls_t cls)
{
    int64_t cap = (int64_t)((size_t)r->fusion_bytes / troupe__cls_size(cls));
    int64_t max_cap = TROUPE__MAX_MSG_BYTES / (int64_t)troupe__cls_size(cls);
    if (cap > max_cap)
        cap = max_cap;
    return cap < 1 ? 1 : cap;
}

/* The flat plan: the span cut in request order into buckets of cap units, each in place. */
static troupe_status_t s_plan_flat(troupe__bucket_plan_t *p, const troupe__req_t *r,
                                   const char *what)
{
    troupe__cls_t cls = TROUPE__NCLS;
    for (size_t j = 0; j < r->n && cls == TROUPE__NCLS; j++)
        if (troupe__req_units(r, j) > 0)
            cls = troupe__cls_of(r, r->tensors[j].prec);
    if (cls == TROUPE__NCLS)
        return TROUPE_OK; /* nothing to move */
    int64_t cap = s_cap(r, cls), room = 0;
    for (size_t j = 0; j < r->n; j++) {
        int64_t u = troupe__req_units(r, j);
        for (int64_t off = 0; off < u;) {
            if (room == 0) {
                if (p->nbks > 0)
                    s_close_bucket(r, p);
                TROUPE_RETURN_IF_ERROR(s_open_bucket(p, cls, what));
                room = cap;
            }
            int64_t c = u - off < room ? u - off : room;
            TROUPE_RETURN_IF_ERROR(s_add_seg(p, j, off, c, what));
            off += c;
            room -= c;
        }
    }
    if (p->nbks > 0)
        s_close_bucket(r, p);
    return TROUPE_OK;
}

troupe_status_t troupe__bucket_plan(troupe__bucket_plan_t *p, const troupe__req_t *r, bool all_flat,
                                    const char *what)
{
    p->planned = true;
    if (all_flat)
        return s_plan_flat(p, r, what);
    bool seen[TROUPE__NCLS] = {false};
    for (size_t i = 0; i < r->n; i++) {
        troupe__cls_t cls = troupe__cls_of(r, r->tensors[i].prec);
        if (seen[cls])
            continue;
        seen[cls] = true;
        TROUPE_RETURN_IF_ERROR(s_plan_class(p, r, i, cls, s_cap(r, cls), what));
    }
    return TROUPE_OK;
}

/* ---- staging ----------------------------------------------------------------------------- */

void troupe__bucket_pack(const troupe__req_t *r, const troupe__bucket_plan_t *p,
                         const troupe__bucket_t *b, void *slot)
{
    char *dst = slot;
    size_t cs = troupe__cls_size(b->cls);
    for (size_t k = 0; k < b->nseg; k++) {
        const troupe__seg_t *s = &p->segs[b->seg0 + k];
        const void *src = troupe__seg_ptr(r, s);
        troupe_prec_t prec = r->tensors[s->t].prec;
        float *f = (float *)(void *)dst;
        if (b->cls == TROUPE__CLS_BF16W) {
            troupe__bf16_pack((uint16_t *)(void *)dst, src, s->count);
        } else if (b->cls != TROUPE__CLS_F32 || prec == TROUPE_PREC_SINGLE) {
            memcpy(dst, src, (size_t)s->count * cs);
        } else if (prec == TROUPE_PREC_HALF) {
            const uint16_t *h = src;
            for (int64_t i = 0; i < s->count; i++)
                f[i] = troupe_half_to_single(h[i]);
        } else if (prec == TROUPE_PREC_BFLOAT16) { /* reduce.c: bit-exact, vectorized */
            troupe__bf16_unpack(f, src, s->count, 1);
        } else { /* fp8 */
            const uint8_t *h = src;
            for (int64_t i = 0; i < s->count; i++)
                f[i] = troupe_fp8_to_single(h[i]);
        }
        dst += (size_t)s->count * cs;
    }
}

void troupe__bucket_unpack(const troupe__req_t *r, const troupe__bucket_plan_t *p,
                           const troupe__bucket_t *b, void *slot, int nranks)
{
    bool mean = r->kind == TROUPE__REQ_ALLREDUCE && r->op == TROUPE_REDUCE_MEAN;
    if (mean)
        troupe__divide_by(troupe__cls_red_type(b->cls), slot, b->units, nranks);
    const char *src = slot;
    size_t cs = troupe__cls_size(b->cls);
    for (size_t k = 0; k < b->nseg; k++) {
        const troupe__seg_t *s = &p->segs[b->seg0 + k];
        void *dst = troupe__seg_ptr(r, s);
        troupe_prec_t prec = r->tensors[s->t].prec;
        const float *f = (const float *)(const void *)src;
        if (b->cls == TROUPE__CLS_BF16W) {
            troupe__bf16_unpack(dst, (const uint16_t *)(const void *)src, s->count,
                                mean ? nranks : 1);
        } else if (b->cls != TROUPE__CLS_F32 || prec == TROUPE_PREC_SINGLE) {
            memcpy(dst, src, (size_t)s->count * cs);
        } else if (prec == TROUPE_PREC_HALF) {
            uint16_t *h = dst;
            for (int64_t i = 0; i < s->count; i++)
                h[i] = troupe_single_to_half(f[i]);
        } else if (prec == TROUPE_PREC_BFLOAT16) { /* reduce.c: bit-exact, vectorized */
            troupe__bf16_pack(dst, f, s->count);
        } else {
            uint8_t *h = dst;
            for (int64_t i = 0; i < s->count; i++)
                h[i] = troupe_single_to_fp8(f[i]);
        }
        src += (size_t)s->count * cs;
    }
}
