/* troupe — fusion buckets (collective.h, Fusion buckets): the one planner that cuts a
 * collective's tensors into the messages the engine moves, and the staging conversions of the
 * buckets that do not lie in place. Not installed.
 *
 * A plan depends only on the fingerprinted request (tensor precisions and counts, kind, the
 * fusion size, bfloat16 compression) and on whether every rank's tensors form one span
 * (troupe__bucket_flat, exchanged in the fingerprint digests), so every rank plans the same
 * buckets; only whether this rank copies a bucket through a staging buffer (in_place) depends
 * on its own memory. Pure data: no MPI.
 *
 * Thread safety: none; a plan belongs to the engine's owner (engine.c).
 * Ownership: a plan owns its vectors; troupe__bucket_plan_free releases them.
 */
#ifndef TROUPE_TRANSPORT_MPI_BUCKET_IMPL_H
#define TROUPE_TRANSPORT_MPI_BUCKET_IMPL_H

#include "transport/mpi/transport_impl.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest single message or bucket (bytes): MPI counts are int. */
#define TROUPE__MAX_MSG_BYTES (INT64_C(1) << 30)

/* Bucket classes: the type a precision is reduced (or broadcast) in; one class a bucket. */
typedef enum troupe__cls {
    TROUPE__CLS_F32 = 0, /* single, and half/bfloat16/fp8 widened to single */
    TROUPE__CLS_F64,
    TROUPE__CLS_I32,
    TROUPE__CLS_I64,
    TROUPE__CLS_U32,
    TROUPE__CLS_U64,
    TROUPE__CLS_BF16W, /* single travelling as bfloat16 (TROUPE_COLL_BF16): always staged, ring */
    TROUPE__CLS_BYTES, /* broadcast: any precision as bytes */
    TROUPE__NCLS
} troupe__cls_t;

/* The class tensors of precision p of request r travel in. */
troupe__cls_t troupe__cls_of(const troupe__req_t *r, troupe_prec_t p);

/* Bytes of one element of class c (1 for TROUPE__CLS_BYTES). */
size_t troupe__cls_size(troupe__cls_t c);

/* The reduction type of class c (reduce.c); TROUPE__RED_NONE for bytes. */
troupe__red_type_t troupe__cls_red_type(troupe__cls_t c);

/* True when a tensor of precision p travels in class c in its own type (no conversion). */
bool troupe__cls_native(troupe__cls_t c, troupe_prec_t p);

/* Units of tensor t of r in its class: elements, or bytes for a broadcast. */
int64_t troupe__req_units(const troupe__req_t *r, size_t t);

/* Bytes of one unit of tensor t of r. */
size_t troupe__req_unit_bytes(const troupe__req_t *r, size_t t);

/* True when r's tensors (those with data) are of one class, in their own type, and lie back
 * to back in this rank's memory in request order: one span, as a routine's gradients do in
 * node-id order (parallel/ issues them so); then *span and *span_bytes locate it and *cls
 * tells its class. When every rank's request is flat the plan cuts the span in order, or
 * shared memory reduces it whole (shm_allreduce.c). */
bool troupe__bucket_flat(const troupe__req_t *r, const char **span, int64_t *span_bytes,
                         troupe__cls_t *cls);

/* A run of `count` units of tensor t from unit `off`. */
typedef struct troupe__seg {
    size_t t;
    int64_t off;
    int64_t count;
} troupe__seg_t;

/* One message: segments seg0 .. seg0 + nseg - 1 of the plan, `units` units of class cls. */
typedef struct troupe__bucket {
    troupe__cls_t cls;
    size_t seg0, nseg;
    int64_t units;
    bool in_place; /* native segments back to back in this rank's memory: reduced there */
    int slot;      /* the engine's: staging slot holding it (packed ahead, in flight), else -1 */
} troupe__bucket_t;

typedef struct troupe__bucket_plan {
    troupe__seg_t *segs;
    size_t nsegs, segs_cap;
    troupe__bucket_t *bks;
    size_t nbks, bks_cap;
    bool planned;
} troupe__bucket_plan_t;

/* Plans r's buckets into the empty plan p. `all_flat`: every rank's request is flat
 * (troupe__bucket_flat): the span is cut in request order into buckets of the fusion size,
 * each in place. Otherwise class by class in order of first appearance: first the tensors
 * that get buckets of their own (larger than a bucket: in slices; of at least
 * TROUPE_COLL_INPLACE_BYTES in their own type: in place), then the others packed in order into
 * shared buckets of at most the fusion size. Errors: RESOURCE_EXHAUSTED naming `what`. */
TROUPE_MUST_USE troupe_status_t troupe__bucket_plan(troupe__bucket_plan_t *p,
                                                    const troupe__req_t *r, bool all_flat,
                                                    const char *what);

/* Releases p's vectors and empties it. */
void troupe__bucket_plan_free(troupe__bucket_plan_t *p);

/* This rank's address of segment s of r. */
void *troupe__seg_ptr(const troupe__req_t *r, const troupe__seg_t *s);

/* Bytes of a staging buffer for bucket b. */
size_t troupe__bucket_bytes(const troupe__bucket_t *b);

/* Caller's memory -> staging buffer for bucket b (half/bfloat16/fp8 widened to single, single
 * narrowed to bfloat16 for TROUPE__CLS_BF16W). */
void troupe__bucket_pack(const troupe__req_t *r, const troupe__bucket_plan_t *p,
                         const troupe__bucket_t *b, void *slot);

/* Staging buffer -> caller's memory: a mean divided by `nranks` once, then rounded back to
 * each tensor's precision once (nearest even). */
void troupe__bucket_unpack(const troupe__req_t *r, const troupe__bucket_plan_t *p,
                           const troupe__bucket_t *b, void *slot, int nranks);

#ifdef __cplusplus
}
#endif
#endif /* TROUPE_TRANSPORT_MPI_BUCKET_IMPL_H */
