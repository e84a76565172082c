/* troupe — collectives (transport/mpi/collective.h): argument checks, requests built at call
 * time, the single-rank path, and the device level through troupe_lend_arrays. The data moves
 * in the transport engine (engine.c). */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include "troupe_config.h"

#include "transport/mpi/collective.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/transport_impl.h"

#include "actors/lend.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "base/trace.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- stats ------------------------------------------------------------------------------- */

static _Atomic uint64_t s_collectives, s_completed, s_buckets, s_ring_buckets, s_bytes, s_staged,
    s_failures, s_shm, s_scatters;

void troupe__stats_add(uint64_t collectives, uint64_t completed, uint64_t buckets, uint64_t bytes,
                       uint64_t failures)
{
    if (collectives)
        atomic_fetch_add(&s_collectives, collectives);
    if (completed)
        atomic_fetch_add(&s_completed, completed);
    if (buckets)
        atomic_fetch_add(&s_buckets, buckets);
    if (bytes)
        atomic_fetch_add(&s_bytes, bytes);
    if (failures)
        atomic_fetch_add(&s_failures, failures);
}

void troupe__stats_add_staged(uint64_t bytes)
{
    atomic_fetch_add(&s_staged, bytes);
}

void troupe__stats_add_ring(void)
{
    atomic_fetch_add(&s_ring_buckets, 1);
}

void troupe__stats_add_scatter(void)
{
    atomic_fetch_add(&s_scatters, 1);
}

void troupe__stats_add_shm(void)
{
    atomic_fetch_add(&s_shm, 1);
}

void troupe_transport_get_stats(troupe_transport_stats_t *out)
{
    if (out == NULL)
        return;
    out->collectives = atomic_load(&s_collectives);
    out->completed = atomic_load(&s_completed);
    out->buckets = atomic_load(&s_buckets);
    out->ring_buckets = atomic_load(&s_ring_buckets);
    out->bytes = atomic_load(&s_bytes);
    out->staged = atomic_load(&s_staged);
    out->failures = atomic_load(&s_failures);
    out->shm = atomic_load(&s_shm);
    out->reduce_scatters = atomic_load(&s_scatters);
}

/* ---- requests ---------------------------------------------------------------------------- */

troupe__req_t *troupe__req_new(troupe__req_kind_t kind, size_t n)
{
    troupe__req_t *r = troupe_calloc(1, sizeof *r);
    if (r == NULL)
        goto free_request;
    r->kind = kind;
    r->n = n;
    r->phase = troupe_trace_phase();
    if (kind == TROUPE__REQ_ALLREDUCE || kind == TROUPE__REQ_BROADCAST)
        r->fusion_bytes = (int64_t)troupe_config_fusion_bytes();
    if (n > 0) {
        r->tensors = troupe_calloc(n, sizeof *r->tensors);
        r->fp = troupe_calloc(n, sizeof *r->fp);
        if (r->tensors == NULL || r->fp == NULL)
            goto free_request;
    }
    return r;
free_request:
    troupe__req_free(&r);
    troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory for a request of %zu tensors",
                  troupe__req_kind_name(kind), n);
    return NULL;
}

void troupe__req_set_tensor(troupe__req_t *r, size_t i, const troupe_coll_tensor_t *t)
{
    troupe__fp_tensor_t *f = &r->fp[i];
    memset(f, 0, sizeof *f);
    f->node_id = t->node_id;
    f->prec = t->prec;
    f->ndims = t->ndims;
    for (int d = 0; d < t->ndims && d < TROUPE_MAX_DIMS; d++)
        f->dims[d] = t->dims[d];
    f->count = t->count;
    if (t->name != NULL)
        snprintf(f->name, sizeof f->name, "%s", t->name);
    r->tensors[i] = *t;
    r->tensors[i].name = f->name;
    r->bytes += t->count * (int64_t)troupe_prec_size_bytes(t->prec);
}

void troupe__req_free(troupe__req_t **r_p)
{
    if (r_p == NULL || *r_p == NULL)
        return;
    troupe__req_t *r = *r_p;
    troupe__gate_release(&r->gate);
    troupe_event_release(&r->ev);
    troupe_free(r->tensors);
    troupe_free(r->fp);
    troupe_free(r->apply_arg);
    troupe_free(r->side);
    troupe_free(r);
    *r_p = NULL;
}

void troupe__req_apply_all(const troupe__req_t *r)
{
    if (r->apply_fn == NULL)
        return;
    float *side[TROUPE_COLL_APPLY_MAX_SIDE];
    size_t nshared = r->n_side - r->nshard;
    int64_t at = 0; /* tensor i's first element over the tensors end to end */
    for (size_t i = 0; i < r->n; i++) {
        int64_t count = r->tensors[i].count, lo = 0, hi = count;
        if (r->nshard > 0) { /* this rank's shard only */
            lo = r->shard_lo > at ? r->shard_lo - at : 0;
            hi = r->shard_hi - at < count ? r->shard_hi - at : count;
        }
        for (size_t s = 0; s < nshared; s++)
            side[s] = (float *)r->side[s * r->n + i] + lo;
        for (size_t s = 0; s < r->nshard; s++)
            side[nshared + s] = r->shard[s] + (at + lo - r->shard_lo);
        if (hi > lo)
            r->apply_fn(r->apply_arg, hi - lo, (const float *)r->tensors[i].data + lo, side);
        at += count;
    }
}

void troupe__req_finish(troupe__req_t **r_p, troupe_status_t status, const char *message)
{
    troupe__req_t *r = *r_p;
    bool coll = r->kind == TROUPE__REQ_ALLREDUCE || r->kind == TROUPE__REQ_BROADCAST;
    if (status == TROUPE_OK && r->gate != NULL && atomic_load(&r->gate->status) != TROUPE_OK) {
        /* the data moved (so no rank waits for this one) but what it read was not ready */
        status = (troupe_status_t)atomic_load(&r->gate->status);
        message = r->gate->message;
    }
    if (status == TROUPE_OK)
        troupe__stats_add(0, coll ? 1 : 0, 0, coll ? (uint64_t)r->bytes : 0, 0);
    else
        troupe__stats_add(0, 0, 0, 0, 1);
    troupe_event_complete(r->ev, status, message);
    troupe__req_free(r_p);
}

/* ---- gates (troupe_allreduce_args_t.after) ------------------------------------------------ */

void troupe__gate_release(troupe__gate_t **g_p)
{
    if (g_p == NULL || *g_p == NULL)
        return;
    troupe__gate_t *g = *g_p;
    *g_p = NULL;
    if (atomic_fetch_sub(&g->refs, 1) == 1)
        troupe_free(g);
}

bool troupe__gate_closed(troupe__gate_t *g)
{
    return g != NULL && atomic_load(&g->left) > 0;
}

void troupe__gate_describe(troupe__gate_t *g, char *buf, size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    size_t pending = 0;
    for (size_t i = 0; g != NULL && i < g->n; i++) {
        if (atomic_load(&g->item[i].done))
            continue;
        troupe__strbuf_printf(&sb, "%s'%s'", pending > 0 ? ", " : "", g->item[i].name);
        pending++;
    }
    troupe__strbuf_printf(&sb, " (%zu of %zu pending)", pending, g != NULL ? g->n : 0);
}

/* One of the gate's events completed (or was released pending: CANCELLED). */
static void s_gate_opened(void *user, troupe_event_t *ev, troupe_status_t status)
{
    troupe__gate_item_t *it = user;
    troupe__gate_t *g = it->gate;
    atomic_store(&it->done, true);
    int ok = TROUPE_OK;
    if (status != TROUPE_OK && atomic_compare_exchange_strong(&g->status, &ok, (int)status)) {
        char *m = ev != NULL ? troupe_event_copy_message(ev) : NULL;
        snprintf(g->message, sizeof g->message, "allreduce: an event it waited for (%s) failed: %s",
                 ev != NULL ? troupe_event_name(ev) : "released", m != NULL ? m : "cancelled");
        troupe_free(m);
    }
    if (atomic_fetch_sub(&g->left, 1) == 1)
        troupe__engine_wake();
    troupe__gate_release(&g);
}

troupe_status_t troupe__gate_new(troupe_event_t *const *after, size_t n, troupe__gate_t **out)
{
    *out = NULL;
    if (n == 0)
        return TROUPE_OK;
    troupe__gate_t *g = troupe_calloc(1, sizeof *g + n * sizeof g->item[0]);
    if (g == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "allreduce: out of memory");
    atomic_init(&g->refs, 1);
    atomic_init(&g->left, n + 1);
    atomic_init(&g->status, TROUPE_OK);
    g->n = n;
    for (size_t i = 0; i < n; i++) {
        g->item[i].gate = g;
        atomic_init(&g->item[i].done, false);
        snprintf(g->item[i].name, sizeof g->item[i].name, "%s", troupe_event_name(after[i]));
    }
    troupe_status_t st = TROUPE_OK;
    for (size_t i = 0; i < n; i++) {
        atomic_fetch_add(&g->refs, 1);
        st = troupe_event_subscribe(after[i], s_gate_opened, &g->item[i]);
        if (st != TROUPE_OK) { /* the callback never runs: undo its share */
            atomic_fetch_sub(&g->refs, 1);
            atomic_fetch_sub(&g->left, (size_t)(n - i));
            break;
        }
    }
    atomic_fetch_sub(&g->left, 1);
    if (st != TROUPE_OK) {
        troupe__gate_release(&g); /* the pending callbacks hold the rest */
        return st;
    }
    *out = g;
    return TROUPE_OK;
}

/* ---- argument checks --------------------------------------------------------------------- */

const char *troupe_reduce_op_name(troupe_reduce_op_t op)
{
    switch (op) {
    case TROUPE_REDUCE_SUM:
        return "sum";
    case TROUPE_REDUCE_MEAN:
        return "mean";
    case TROUPE_REDUCE_MAX:
        return "max";
    case TROUPE_REDUCE_MIN:
        return "min";
    }
    return "invalid";
}

static bool s_reducible(troupe_prec_t p)
{
    switch (p) {
    case TROUPE_PREC_SINGLE:
    case TROUPE_PREC_DOUBLE:
    case TROUPE_PREC_HALF:
    case TROUPE_PREC_BFLOAT16:
    case TROUPE_PREC_FP8:
    case TROUPE_PREC_INT32:
    case TROUPE_PREC_INT64:
    case TROUPE_PREC_UINT32:
    case TROUPE_PREC_UINT64:
        return true;
    default:
        return false;
    }
}

troupe_coll_tensor_t troupe_coll_tensor_of(const troupe_tnode_t *tn, void *data)
{
    troupe_coll_tensor_t t;
    memset(&t, 0, sizeof t);
    t.data = data;
    if (tn == NULL)
        return t;
    t.count = troupe_tnode_num_elems(tn);
    t.prec = tn->prec;
    t.node_id = tn->id;
    t.ndims = tn->ndims;
    for (int d = 0; d < tn->ndims && d < TROUPE_MAX_DIMS; d++)
        t.dims[d] = tn->dims[d];
    t.name = tn->label_count > 0 ? tn->label[tn->label_count - 1] : NULL;
    return t;
}

/* Checks tensor i of a request of `kind`; `need_data`: host level (data must be set). */
static troupe_status_t s_check_tensor(const char *what, size_t i, const troupe_coll_tensor_t *t,
                                      bool reduce, bool need_data)
{
    const char *name = t->name != NULL ? t->name : "";
    if (!troupe_prec_is_valid(t->prec) || t->prec == TROUPE_PREC_VOID)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s: tensor %zu (node %" PRId32 " '%s'): invalid precision %d", what,
                             i, t->node_id, name, (int)t->prec);
    if (reduce && !s_reducible(t->prec))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s: tensor %zu (node %" PRId32
                             " '%s'): precision %s cannot be reduced (single, double, half, "
                             "bfloat16, fp8, int32, int64, uint32, uint64 can)",
                             what, i, t->node_id, name, troupe_prec_name(t->prec));
    if (t->count < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s: tensor %zu (node %" PRId32 " '%s'): count %" PRId64 " < 0", what,
                             i, t->node_id, name, t->count);
    if (t->ndims < 0 || t->ndims > TROUPE_MAX_DIMS)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s: tensor %zu (node %" PRId32 " '%s'): ndims %d outside 0..%d", what,
                             i, t->node_id, name, t->ndims, TROUPE_MAX_DIMS);
    if (t->ndims > 0) {
        int64_t elems = 1;
        for (int d = 0; d < t->ndims; d++) {
            if (t->dims[d] < 0 || (t->dims[d] > 0 && elems > INT64_MAX / t->dims[d]))
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "%s: tensor %zu (node %" PRId32 " '%s'): bad dim %d: %" PRId64,
                                     what, i, t->node_id, name, d, t->dims[d]);
            elems *= t->dims[d];
        }
        if (elems != t->count)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "%s: tensor %zu (node %" PRId32 " '%s'): dims hold %" PRId64
                                 " elements but count is %" PRId64,
                                 what, i, t->node_id, name, elems, t->count);
    }
    if (t->count > INT64_MAX / 16)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s: tensor %zu (node %" PRId32 " '%s'): count %" PRId64 " too large",
                             what, i, t->node_id, name, t->count);
    if (need_data && t->data == NULL && t->count > 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s: tensor %zu (node %" PRId32 " '%s'): data is NULL", what, i,
                             t->node_id, name);
    return TROUPE_OK;
}

static troupe_status_t s_check_cluster(const char *what)
{
    char msg[1024];
    troupe_status_t st = troupe__cluster_failure(msg, sizeof msg);
    if (st != TROUPE_OK)
        return troupe__error(st, "%s", msg);
    return TROUPE_OK;
}

/* Builds a host-level request after checking the arguments. */
/* INVALID_ARGUMENT for an allreduce op outside sum..min or a broadcast root outside the ranks. */
static troupe_status_t s_check_op_root(troupe__req_kind_t kind, troupe_reduce_op_t op, int root)
{
    if (kind == TROUPE__REQ_ALLREDUCE && (op < TROUPE_REDUCE_SUM || op > TROUPE_REDUCE_MIN))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "allreduce: op %d is not sum, mean, max or min", (int)op);
    if (kind == TROUPE__REQ_BROADCAST && (root < 0 || root >= troupe_cluster_size()))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "broadcast: root %d outside the ranks 0..%d",
                             root, troupe_cluster_size() - 1);
    return TROUPE_OK;
}

static troupe_status_t s_build(troupe__req_kind_t kind, const troupe_coll_tensor_t *tensors,
                               size_t n, troupe_reduce_op_t op, int root, troupe__req_t **out)
{
    const char *what = troupe__req_kind_name(kind);
    *out = NULL;
    if (tensors == NULL || n == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: no tensors (tensors %s, n = %zu)", what,
                             tensors == NULL ? "NULL" : "given", n);
    TROUPE_RETURN_IF_ERROR(s_check_op_root(kind, op, root));
    for (size_t i = 0; i < n; i++)
        TROUPE_RETURN_IF_ERROR(
            s_check_tensor(what, i, &tensors[i], kind == TROUPE__REQ_ALLREDUCE, true));
    TROUPE_RETURN_IF_ERROR(s_check_cluster(what));
    troupe__req_t *r = troupe__req_new(kind, n);
    if (r == NULL)
        return TROUPE_RESOURCE_EXHAUSTED;
    r->op = op;
    r->root = root;
    for (size_t i = 0; i < n; i++)
        troupe__req_set_tensor(r, i, &tensors[i]);
    *out = r;
    return TROUPE_OK;
}

/* Hands r (with its event set) to the engine, or completes it at once on a single rank, where
 * every collective is exact without moving anything: sum, max and min of one rank are the
 * identity, mean divides by 1, a broadcast from rank 0 to itself leaves the data. */
static void s_dispatch(troupe__req_t **r_p)
{
    troupe__stats_add(1, 0, 0, 0, 0);
    if (troupe__engine_running()) {
        troupe__engine_submit(r_p);
        return;
    }
    troupe__req_t *r = *r_p;
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT,
               "%s (single rank): %zu tensors, %" PRId64 " bytes, nothing to move%s",
               troupe__req_kind_name(r->kind), r->n, r->bytes,
               r->apply_fn == NULL ? ""
               : r->unshard        ? "; a gather of unsharded state: nothing to do"
                                   : "; the fused update runs here");
    if (!r->unshard)
        troupe__req_apply_all(r);
    troupe__req_finish(r_p, TROUPE_OK, NULL);
}

/* INVALID_ARGUMENT naming the bits of `flags` that are not TROUPE_COLL_* flags. */
static troupe_status_t s_check_flags(const char *what, unsigned flags)
{
    unsigned unknown =
        flags & ~(unsigned)(TROUPE_COLL_LAZY | TROUPE_COLL_BF16 | TROUPE_COLL_DEFERRED |
                            TROUPE_COLL_UNSHARD);
    if (unknown != 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: unknown flags 0x%x", what, unknown);
    return TROUPE_OK;
}

static troupe_status_t s_host_collective(troupe__req_kind_t kind,
                                         const troupe_coll_tensor_t *tensors, size_t n,
                                         troupe_reduce_op_t op, int root, unsigned flags,
                                         troupe_event_t *const *after, size_t n_after,
                                         troupe_event_t **out_ev)
{
    const char *what = troupe__req_kind_name(kind);
    if (out_ev == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: out_ev is NULL", what);
    *out_ev = NULL;
    if ((after == NULL) != (n_after == 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: after is %s but n_after is %zu", what,
                             after == NULL ? "NULL" : "given", n_after);
    for (size_t i = 0; i < n_after; i++)
        if (after[i] == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: after[%zu] is NULL", what, i);
    troupe__req_t *r = NULL;
    TROUPE_RETURN_IF_ERROR(s_build(kind, tensors, n, op, root, &r));
    r->bf16_wire = (flags & TROUPE_COLL_BF16) != 0;
    troupe_status_t gst = troupe__gate_new(after, n_after, &r->gate);
    if (gst != TROUPE_OK) {
        troupe__req_free(&r);
        return gst;
    }
    char name[64];
    snprintf(name, sizeof name, "transport:%s", what);
    troupe_status_t st = troupe_event_new(name, &r->ev);
    if (st != TROUPE_OK) {
        troupe__req_free(&r);
        return st;
    }
    /* started by the event's first consumer (see troupe__engine_progress); a gated request as
     * soon as its gate opens, so that it overlaps what comes after its events */
    r->lazy = r->gate == NULL;
    troupe__event_set_progress(r->ev, troupe__engine_progress);
    troupe_event_retain(r->ev);
    *out_ev = r->ev;
    s_dispatch(&r);
    return TROUPE_OK;
}

void *troupe_coll_alloc(size_t size_bytes)
{
    void *p = troupe__shm_pools() && size_bytes >= TROUPE__SHM_MIN_BYTES
                  ? troupe__shm_alloc(size_bytes)
                  : NULL;
    if (p != NULL)
        return p; /* zero-filled, page-aligned */
    size_t n = size_bytes == 0 ? 64 : (size_bytes + 63) / 64 * 64;
    if (n < size_bytes || posix_memalign(&p, 64, n) != 0)
        return NULL;
    memset(p, 0, n);
    return p;
}

void troupe_coll_free(void *p)
{
    if (p != NULL && !troupe__shm_free(p))
        free(p);
}

troupe_status_t troupe_broadcast(const troupe_coll_tensor_t *tensors, size_t n, int root,
                                 troupe_event_t **out_ev)
{
    return s_host_collective(TROUPE__REQ_BROADCAST, tensors, n, TROUPE_REDUCE_SUM, root, 0u, NULL,
                             0, out_ev);
}

/* ---- device level ------------------------------------------------------------------------ */

/* What a lend carries: the request until `start` hands it to the engine (then NULL). Owned by
 * the lend (freed by s_lend_dtor), so the engine may free the request while the lend still
 * holds this. */
typedef struct s_lend {
    troupe__req_t *req;
} s_lend_t;

static troupe_status_t s_lend_start(void *user, void *const *ptrs, const int64_t *bytes, size_t n)
{
    s_lend_t *l = user;
    troupe__req_t *r = l->req;
    const char *what = troupe__req_kind_name(r->kind);
    size_t nlent_side = r->n_side - r->nshard; /* sharded state is not lent */
    if (n != r->n * (1 + nlent_side))
        return troupe__error(TROUPE_INTERNAL, "%s: lent %zu arrays for %zu tensors", what, n,
                             r->n * (1 + nlent_side));
    for (size_t i = 0; i < r->n; i++) {
        int64_t want = r->tensors[i].count * (int64_t)troupe_prec_size_bytes(r->tensors[i].prec);
        if (bytes[i] < want || (ptrs[i] == NULL && want > 0))
            return troupe__error(TROUPE_INTERNAL,
                                 "%s: tensor %zu (node %" PRId32 " '%s'): lent array of %" PRId64
                                 " bytes, need %" PRId64,
                                 what, i, r->tensors[i].node_id, r->tensors[i].name, bytes[i],
                                 want);
        r->tensors[i].data = ptrs[i];
    }
    for (size_t k = 0; k < r->n * nlent_side; k++) {
        const troupe_coll_tensor_t *t = &r->tensors[k % r->n];
        int64_t want = t->count * (int64_t)sizeof(float);
        if (bytes[r->n + k] < want || (ptrs[r->n + k] == NULL && want > 0))
            return troupe__error(TROUPE_INTERNAL,
                                 "%s: side array %zu of tensor %zu (node %" PRId32
                                 " '%s'): lent array of %" PRId64 " bytes, need %" PRId64,
                                 what, k / r->n, k % r->n, t->node_id, t->name, bytes[r->n + k],
                                 want);
        r->side[k] = ptrs[r->n + k];
    }
    l->req = NULL;
    s_dispatch(&r);
    return TROUPE_OK;
}

static void s_lend_dtor(void *user)
{
    s_lend_t *l = user;
    /* Never handed to the engine (dropped, or start failed): the lend completed `done`. */
    troupe__req_free(&l->req);
    troupe_free(l);
}

static troupe_status_t s_lend_collective(troupe__req_kind_t kind, troupe_context_t *ctx, size_t n,
                                         size_t nlend, troupe_tnode_t *const *tns,
                                         troupe_reduce_op_t op, int root, unsigned flags,
                                         const troupe_coll_apply_t *apply, troupe_event_t **out_ev);

static int s_cmp_node(const void *x, const void *y)
{
    const troupe_tnode_t *a = *(troupe_tnode_t *const *)x, *b = *(troupe_tnode_t *const *)y;
    return (a > b) - (a < b);
}

/* INVALID_ARGUMENT naming the node when a node stands twice among the tensors tns[0..n) and the
 * side arrays of `a` (non-NULL): the transport would write what other ranks still sum. */
static troupe_status_t s_check_distinct(const troupe_coll_apply_t *a, size_t n,
                                        troupe_tnode_t *const *tns)
{
    size_t all = n * (1 + a->n_side);
    troupe_tnode_t **v = troupe_calloc(all, sizeof *v);
    if (v == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "allreduce: out of memory");
    for (size_t k = 0; k < all; k++)
        v[k] = k < n ? tns[k] : a->side[k - n];
    qsort(v, all, sizeof *v, s_cmp_node);
    troupe_status_t st = TROUPE_OK;
    for (size_t k = 1; k < all && st == TROUPE_OK; k++)
        if (v[k] != NULL && v[k] == v[k - 1]) {
            char label[TROUPE__FP_NAME_MAX + 1];
            troupe_tnode_label_string(v[k], label, sizeof label);
            st = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "allreduce: fused update: node %" PRId32
                               " '%s' stands twice among the tensors and side arrays",
                               v[k]->id, label);
        }
    troupe_free(v);
    return st;
}

/* INVALID_ARGUMENT unless `a` (for the n nodes tns, op) meets troupe_coll_apply_t's
 * requirements. */
static troupe_status_t s_check_apply(const troupe_coll_apply_t *a, size_t n,
                                     troupe_tnode_t *const *tns, troupe_reduce_op_t op)
{
    if (a->fn == NULL || a->id == 0 || a->side == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "allreduce: fused update without %s",
                             a->fn == NULL ? "a function" : a->id == 0 ? "an id" : "side arrays");
    if (a->n_side < 1 || a->n_side > TROUPE_COLL_APPLY_MAX_SIDE)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "allreduce: fused update with %zu side arrays per tensor (1..%d)",
                             a->n_side, TROUPE_COLL_APPLY_MAX_SIDE);
    if (a->n_private >= a->n_side)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "allreduce: fused update with %zu private side arrays of %zu (at "
                             "least one must be shared: the parameters)",
                             a->n_private, a->n_side);
    if (a->arg_bytes > TROUPE_COLL_APPLY_MAX_ARG || (a->arg == NULL && a->arg_bytes > 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "allreduce: fused update argument of %zu bytes (at most %d, not NULL)",
                             a->arg_bytes, TROUPE_COLL_APPLY_MAX_ARG);
    if (op != TROUPE_REDUCE_SUM)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "allreduce: a fused update needs op sum, not %s",
                             troupe_reduce_op_name(op));
    if (a->shard != NULL) {
        if (a->n_private == 0)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "allreduce: fused update with sharded state but no private side "
                                 "arrays");
        for (size_t k = 0; k < a->n_private; k++)
            if (a->shard[k] == NULL)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "allreduce: fused update: shard %zu of the private side "
                                     "arrays is NULL",
                                     k);
    }
    TROUPE_RETURN_IF_ERROR(s_check_distinct(a, n, tns));
    for (size_t i = 0; i < n; i++) {
        char label[TROUPE__FP_NAME_MAX + 1];
        troupe_tnode_label_string(tns[i], label, sizeof label);
        if (tns[i]->prec != TROUPE_PREC_SINGLE)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "allreduce: fused update: tensor %zu (node %" PRId32
                                 " '%s') is %s, not single",
                                 i, tns[i]->id, label, troupe_prec_name(tns[i]->prec));
        size_t nlent = a->n_side - (a->shard != NULL ? a->n_private : 0);
        for (size_t s = 0; s < nlent; s++) {
            const troupe_tnode_t *sd = a->side[s * n + i];
            if (sd == NULL || sd->prec != TROUPE_PREC_SINGLE ||
                troupe_tnode_num_elems(sd) != troupe_tnode_num_elems(tns[i]))
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "allreduce: fused update: side array %zu of tensor %zu (node "
                                     "%" PRId32 " '%s') is %s",
                                     s, i, tns[i]->id, label,
                                     sd == NULL                          ? "NULL"
                                     : sd->prec != TROUPE_PREC_SINGLE ? "not single"
                                                                       : "of another size");
        }
    }
    return TROUPE_OK;
}

static troupe_status_t s_nodes_collective(troupe__req_kind_t kind, troupe_context_t *ctx, size_t n,
                                          troupe_tnode_t *const *tns, troupe_reduce_op_t op,
                                          int root, unsigned flags,
                                          const troupe_coll_apply_t *apply, troupe_event_t **out_ev)
{
    const char *what = troupe__req_kind_name(kind);
    if (out_ev != NULL)
        *out_ev = NULL;
    if (ctx == NULL || tns == NULL || n == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: %s", what,
                             ctx == NULL ? "ctx is NULL" : "no nodes");
    TROUPE_RETURN_IF_ERROR(s_check_op_root(kind, op, root));
    for (size_t i = 0; i < n; i++)
        if (tns[i] == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: node %zu is NULL", what, i);
    if (apply != NULL)
        TROUPE_RETURN_IF_ERROR(s_check_apply(apply, n, tns, op));
    TROUPE_RETURN_IF_ERROR(s_check_cluster(what));
    /* the lent arrays: the tensors, then the fused update's side arrays (the shared ones first:
     * sharded state is not lent) */
    size_t nlend =
        n * (1 + (apply != NULL ? apply->n_side - (apply->shard != NULL ? apply->n_private : 0)
                                : 0));
    troupe_tnode_t **lend = troupe_calloc(nlend, sizeof *lend);
    if (lend == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    for (size_t k = 0; k < nlend; k++)
        lend[k] = k < n ? tns[k] : apply->side[k - n];
    troupe_status_t st = s_lend_collective(kind, ctx, n, nlend, lend, op, root, flags, apply,
                                           out_ev);
    troupe_free(lend);
    return st;
}

static troupe_status_t s_lend_collective(troupe__req_kind_t kind, troupe_context_t *ctx, size_t n,
                                         size_t nlend, troupe_tnode_t *const *tns,
                                         troupe_reduce_op_t op, int root, unsigned flags,
                                         const troupe_coll_apply_t *apply, troupe_event_t **out_ev)
{
    const char *what = troupe__req_kind_name(kind);

    troupe__req_t *r = troupe__req_new(kind, n);
    if (r == NULL)
        return TROUPE_RESOURCE_EXHAUSTED;
    r->op = op;
    r->root = root;
    r->bf16_wire = (flags & TROUPE_COLL_BF16) != 0;
    bool lazy = (flags & TROUPE_COLL_LAZY) != 0;
    troupe_status_t st = TROUPE_OK;
    if (apply != NULL) {
        r->apply_fn = apply->fn;
        r->apply_id = apply->id;
        r->n_side = apply->n_side;
        r->n_private = apply->n_private;
        r->unshard = (flags & TROUPE_COLL_UNSHARD) != 0;
        if (apply->shard != NULL) { /* sharded state: no node; -1 in the fingerprint */
            r->private_node = -1;
            r->nshard = apply->n_private;
            for (size_t k = 0; k < r->nshard; k++)
                r->shard[k] = apply->shard[k];
        } else if (apply->n_private > 0) { /* the first private side array of tensor 0 */
            r->private_node = apply->side[(apply->n_side - apply->n_private) * n]->id;
        }
        r->side = troupe_calloc(n * apply->n_side, sizeof *r->side);
        r->apply_arg = troupe_calloc(1, apply->arg_bytes > 0 ? apply->arg_bytes : 1);
        if (r->side == NULL || r->apply_arg == NULL) {
            troupe__req_free(&r);
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
        }
        if (apply->arg_bytes > 0)
            memcpy(r->apply_arg, apply->arg, apply->arg_bytes);
    }
    for (size_t i = 0; i < n; i++) {
        char label[TROUPE__FP_NAME_MAX + 1];
        troupe_tnode_label_string(tns[i], label, sizeof label);
        troupe_coll_tensor_t t = troupe_coll_tensor_of(tns[i], NULL);
        t.name = label;
        st = s_check_tensor(what, i, &t, kind == TROUPE__REQ_ALLREDUCE, false);
        if (st != TROUPE_OK) {
            troupe__req_free(&r);
            return st;
        }
        troupe__req_set_tensor(r, i, &t);
    }
    if (r->nshard > 0)
        troupe_coll_shard_range(r->bytes / (int64_t)sizeof(float), troupe_cluster_rank(),
                                troupe_cluster_size(), &r->shard_lo, &r->shard_hi);
    char name[64];
    snprintf(name, sizeof name, "transport:%s_nodes", what);
    troupe_event_t *done = NULL;
    st = troupe_event_new(name, &done);
    if (st != TROUPE_OK) {
        troupe__req_free(&r);
        return st;
    }
    r->ev = done;
    if (lazy) { /* started by done's first consumer: see troupe__engine_progress */
        r->lazy = true;
        troupe__event_set_progress(done, troupe__engine_progress);
    }
    troupe_event_retain(done); /* the request's reference; `done` stays ours until the lend */
    s_lend_t *l = troupe_calloc(1, sizeof *l);
    if (l == NULL) {
        troupe__req_free(&r);
        troupe_event_release(&done);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    }
    l->req = r;
    /* On an error return the lend ran s_lend_dtor (freeing r) and did not touch `done`. */
    if ((flags & TROUPE_COLL_DEFERRED) != 0) {
        st = troupe_lend_arrays_deferred(ctx, nlend, tns, s_lend_start, l, s_lend_dtor, done);
        if (st == TROUPE_OK && out_ev != NULL)
            *out_ev = done; /* our reference */
        else
            troupe_event_release(&done);
        return st;
    }
    st = troupe_lend_arrays(ctx, nlend, tns, s_lend_start, l, s_lend_dtor, done, out_ev);
    troupe_event_release(&done);
    return st;
}

troupe_status_t troupe_allreduce(const troupe_allreduce_args_t *args, troupe_event_t **out_ev)
{
    if (out_ev != NULL)
        *out_ev = NULL;
    if (args == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "allreduce: args is NULL");
    TROUPE_RETURN_IF_ERROR(s_check_flags("allreduce", args->flags));
    if ((args->tensors != NULL) == (args->ctx != NULL))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "allreduce: set either tensors (host level) or ctx and nodes (device "
                             "level), not %s",
                             args->tensors != NULL ? "both" : "neither");
    bool deferred = (args->flags & TROUPE_COLL_DEFERRED) != 0;
    if (args->tensors != NULL) {
        bool unshard = (args->flags & TROUPE_COLL_UNSHARD) != 0;
        if (deferred || unshard || args->apply != NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "allreduce: %s needs the device level (ctx)",
                                 deferred  ? "TROUPE_COLL_DEFERRED"
                                 : unshard ? "TROUPE_COLL_UNSHARD"
                                           : "a fused update");
        return s_host_collective(TROUPE__REQ_ALLREDUCE, args->tensors, args->n, args->op, 0,
                                 args->flags, args->after, args->n_after, out_ev);
    }
    if (args->after != NULL || args->n_after != 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "allreduce: after needs the host level (tensors): a device-level "
                             "allreduce follows its stream");
    if ((args->flags & TROUPE_COLL_UNSHARD) != 0 &&
        (args->apply == NULL || args->apply->n_private == 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "allreduce: TROUPE_COLL_UNSHARD needs a fused update with private "
                             "side arrays");
    if (deferred && out_ev == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "allreduce: out_ev is NULL with TROUPE_COLL_DEFERRED (the caller "
                             "must wait for it)");
    return s_nodes_collective(TROUPE__REQ_ALLREDUCE, args->ctx, args->n, args->nodes, args->op, 0,
                              args->flags, args->apply, out_ev);
}

troupe_status_t troupe_broadcast_nodes(troupe_context_t *ctx, size_t n, troupe_tnode_t *const *tns,
                                       int root, troupe_event_t **out_ev)
{
    return s_nodes_collective(TROUPE__REQ_BROADCAST, ctx, n, tns, TROUPE_REDUCE_SUM, root, 0u,
                              NULL, out_ev);
}
