/* troupe — transfers, merge buffers and the host side of hosted nodes (see transfer.h). */
#include "actors/transfer.h"

#include "actors/ledger.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/status.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define S_PROV_PER_STREAM 410

/* ---- the host table: per hosted node, its host generation, the device write the host has not
 * fetched yet, and the transfers using its host array ---------------------------------------- */

typedef struct s_hrec {
    int32_t node_id;
    int64_t gen;
    troupe_device_t *wr_dev; /* pending device write, NULL when none */
    troupe__srec_t *wr_s;
    troupe__akey_t wr_key;
    troupe_event_t *wr_ev;
    troupe_event_t **users;
    bool *users_write;
    size_t nusers, users_cap;
} s_hrec_t;

static pthread_mutex_t s_hlock = PTHREAD_MUTEX_INITIALIZER;
static s_hrec_t *s_hrecs;
static size_t s_nhrecs, s_hcap;

/* s_hlock held. NULL when absent and !create or out of memory. */
static s_hrec_t *s_hfind(int32_t id, bool create)
{
    for (size_t i = 0; i < s_nhrecs; i++)
        if (s_hrecs[i].node_id == id)
            return &s_hrecs[i];
    if (!create)
        return NULL;
    if (s_nhrecs == s_hcap) {
        size_t cap = s_hcap ? s_hcap * 2 : 32;
        s_hrec_t *v = troupe_realloc(s_hrecs, cap * sizeof *v);
        if (!v)
            return NULL;
        s_hrecs = v;
        s_hcap = cap;
    }
    s_hrec_t *r = &s_hrecs[s_nhrecs++];
    memset(r, 0, sizeof *r);
    r->node_id = id;
    return r;
}

static void s_prune_users(s_hrec_t *r)
{
    size_t k = 0;
    for (size_t i = 0; i < r->nusers; i++) {
        if (troupe__event_state_quiet(r->users[i]) != TROUPE_EVENT_PENDING) {
            troupe_event_release(&r->users[i]);
        } else {
            r->users_write[k] = r->users_write[i];
            r->users[k++] = r->users[i];
        }
    }
    r->nusers = k;
}

int64_t troupe__host_gen(const troupe_tnode_t *tn)
{
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, false);
    int64_t g = r ? r->gen : 0;
    pthread_mutex_unlock(&s_hlock);
    return g;
}

troupe_status_t troupe__host_note_device_write(troupe_tnode_t *tn, troupe__srec_t *s,
                                               troupe__akey_t key, troupe_event_t *ev)
{
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, true);
    if (!r) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "host table: out of memory");
    } else {
        troupe_event_release(&r->wr_ev);
        troupe_event_retain(ev);
        r->wr_ev = ev;
        r->wr_dev = s->dev;
        r->wr_s = s;
        r->wr_key = key;
    }
    pthread_mutex_unlock(&s_hlock);
    return st;
}

troupe_status_t troupe__host_order(troupe_tnode_t *tn, troupe__srec_t *s, bool is_write)
{
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, false);
    if (r) {
        s_prune_users(r);
        for (size_t i = 0; i < r->nusers && st == TROUPE_OK; i++)
            if (is_write || r->users_write[i])
                st = troupe_stream_wait_for(s->stream, r->users[i]);
    }
    pthread_mutex_unlock(&s_hlock);
    return st;
}

troupe_status_t troupe__host_note_user(troupe_tnode_t *tn, troupe_event_t *ev, bool is_write)
{
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, true);
    if (r) {
        s_prune_users(r);
        if (r->nusers == r->users_cap) {
            size_t cap = r->users_cap ? r->users_cap * 2 : 4;
            troupe_event_t **v = troupe_realloc(r->users, cap * sizeof *v);
            if (v)
                r->users = v;
            bool *w = v ? troupe_realloc(r->users_write, cap * sizeof *w) : NULL;
            if (w) {
                r->users_write = w;
                r->users_cap = cap;
            }
        }
    }
    if (!r || r->nusers == r->users_cap) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "host table: out of memory");
    } else {
        troupe_event_retain(ev);
        r->users_write[r->nusers] = is_write;
        r->users[r->nusers++] = ev;
    }
    pthread_mutex_unlock(&s_hlock);
    return st;
}

void troupe__host_purge_device(troupe_device_t *dev)
{
    pthread_mutex_lock(&s_hlock);
    for (size_t i = 0; i < s_nhrecs; i++) {
        s_hrec_t *r = &s_hrecs[i];
        if (r->wr_dev == dev) {
            troupe_event_release(&r->wr_ev);
            r->wr_dev = NULL;
            r->wr_s = NULL;
        }
    }
    pthread_mutex_unlock(&s_hlock);
}

/* Host read: fetch the newest device value (to_host on the writer's stream, then sync that
 * event only). */
static troupe_status_t s_prepare_read(troupe_tnode_t *tn, void *user)
{
    (void)user;
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, false);
    if (!r || !r->wr_ev) {
        pthread_mutex_unlock(&s_hlock);
        return TROUPE_OK;
    }
    troupe_device_t *dev = r->wr_dev;
    troupe__srec_t *s = r->wr_s;
    troupe__akey_t key = r->wr_key;
    troupe_event_t *wev = r->wr_ev;
    troupe_event_retain(wev);
    pthread_mutex_unlock(&s_hlock);

    troupe_status_t st = TROUPE_OK;
    troupe_event_t *ev = NULL;
    pthread_mutex_lock(&dev->lock);
    troupe__entry_t *e = troupe__ledger_find(dev, key);
    if (e) {
        troupe_buffer_loc_t loc = {key.pool_id, key.offset, e->size_bytes};
        st = troupe__to_host_locked(s, tn, loc, &ev);
    }
    pthread_mutex_unlock(&dev->lock);
    if (st == TROUPE_OK && ev)
        st = troupe_event_sync(ev, troupe_config_timeout_ns());
    troupe_event_release(&ev);
    if (st == TROUPE_OK) {
        pthread_mutex_lock(&s_hlock);
        r = s_hfind(tn->id, false);
        if (r && r->wr_ev == wev) {
            troupe_event_release(&r->wr_ev);
            r->wr_dev = NULL;
            r->wr_s = NULL;
        }
        pthread_mutex_unlock(&s_hlock);
    }
    troupe_event_release(&wev);
    return st;
}

/* Host write: wait for the transfers still using the host array; the host becomes newest. */
static troupe_status_t s_prepare_write(troupe_tnode_t *tn, void *user)
{
    (void)user;
    troupe_event_t **users = NULL;
    size_t n = 0;
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, true);
    if (!r) {
        pthread_mutex_unlock(&s_hlock);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "host table: out of memory");
    }
    r->gen++;
    troupe_event_release(&r->wr_ev);
    r->wr_dev = NULL;
    r->wr_s = NULL;
    s_prune_users(r);
    users = r->users;
    n = r->nusers;
    troupe_free(r->users_write);
    r->users = NULL;
    r->users_write = NULL;
    r->nusers = r->users_cap = 0;
    pthread_mutex_unlock(&s_hlock);
    troupe_status_t st = TROUPE_OK;
    for (size_t i = 0; i < n; i++) {
        troupe_status_t s2 = troupe_event_sync(users[i], troupe_config_timeout_ns());
        /* A failed transfer no longer uses the array; only a deadline is an error here. */
        if (s2 == TROUPE_DEADLINE_EXCEEDED && st == TROUPE_OK)
            st = s2;
        troupe_event_release(&users[i]);
    }
    troupe_free(users);
    return st;
}

void troupe__host_install_hooks(troupe_tnode_t *tn)
{
    if (tn->hooks.prepare_read == s_prepare_read)
        return;
    troupe_tnode_hooks_t h = {s_prepare_read, s_prepare_write, NULL};
    troupe_tnode_set_hooks(tn, &h);
}

/* ---- work items ----------------------------------------------------------------------------- */

typedef struct s_copy {
    int kind; /* 0 h2d, 1 d2h, 2 d2d, 3 into merge buffer, 4 merge buffer points at src */
    const troupe_driver_vtable_t *vt;
    troupe_driver_t *drv;
    troupe_tnode_t *tn; /* retained (h2d, d2h) */
    void *host;
    int ordinal;
    troupe_buffer_loc_t dst, src;
    int64_t size_bytes;
    troupe__srec_t *srec; /* merge kinds */
} s_copy_t;

/* Stream side: grows stream s's merge buffer to at least `bytes` (grow-only, inside the
 * stream's FIFO) and returns its location for `bytes`. */
static troupe_status_t s_mb_ensure(const troupe_driver_vtable_t *vt, troupe_driver_t *drv,
                                   int ordinal, troupe__srec_t *s, int64_t bytes,
                                   troupe_buffer_loc_t *out)
{
    if (s->mb_capacity < bytes) {
        if (s->mb_capacity > 0)
            (void)vt->free_pool(drv, ordinal, s->merge_pool_id);
        s->mb_capacity = 0;
        s->mb_valid = false;
        TROUPE_RETURN_IF_ERROR(vt->alloc_pool(drv, ordinal, s->merge_pool_id, bytes, false));
        s->mb_capacity = bytes;
    }
    *out = (troupe_buffer_loc_t){s->merge_pool_id, 0, bytes};
    return TROUPE_OK;
}

static troupe_status_t s_copy_work(void *arg, troupe_dqueue_t *q)
{
    s_copy_t *c = arg;
    switch (c->kind) {
    case 0:
        return c->vt->h2d(c->drv, q, c->dst, c->host, c->size_bytes);
    case 1:
        return c->vt->d2h(c->drv, q, c->host, c->src, c->size_bytes);
    case 2:
        return c->vt->d2d(c->drv, q, c->ordinal, c->dst, c->ordinal, c->src, c->size_bytes);
    case 3: {
        troupe_buffer_loc_t mb;
        TROUPE_RETURN_IF_ERROR(s_mb_ensure(c->vt, c->drv, c->ordinal, c->srec, c->size_bytes, &mb));
        TROUPE_RETURN_IF_ERROR(
            c->vt->d2d(c->drv, q, c->ordinal, mb, c->ordinal, c->src, c->size_bytes));
        c->srec->mb_cur = mb;
        c->srec->mb_valid = true;
        return TROUPE_OK;
    }
    default:
        c->srec->mb_cur = c->src;
        c->srec->mb_valid = true;
        return TROUPE_OK;
    }
}

static void s_copy_dtor(void *arg)
{
    s_copy_t *c = arg;
    troupe_tnode_release(&c->tn);
    troupe_free(c);
}

static troupe_status_t s_new_copy(troupe__srec_t *s, int kind, s_copy_t **out)
{
    s_copy_t *c = troupe_calloc(1, sizeof *c);
    if (!c)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "transfer: out of memory");
    c->kind = kind;
    c->vt = s->dev->backend->vt;
    c->drv = s->dev->backend->drv;
    c->ordinal = s->dev->ordinal;
    c->srec = s;
    *out = c;
    return TROUPE_OK;
}

/* Schedules c on s and records the event after it. */
static troupe_status_t s_schedule(troupe__srec_t *s, s_copy_t *c, troupe_event_t **out_ev)
{
    TROUPE_RETURN_IF_ERROR(troupe_stream_schedule(s->stream, s_copy_work, c, s_copy_dtor));
    return troupe_stream_record(s->stream, out_ev);
}

static troupe_status_t s_lacks(const troupe_context_t *ctx, const troupe_tnode_t *tn,
                               const char *op)
{
    char name[64];
    troupe_tnode_debug_name(tn, name, sizeof name);
    return troupe__error(TROUPE_NOT_FOUND, "%s: the context on %s lacks node %s", op,
                         troupe_stream_name(ctx->srec->stream), name);
}

static troupe_status_t s_not_hosted(const troupe_tnode_t *tn, const char *op)
{
    char name[64];
    troupe_tnode_debug_name(tn, name, sizeof name);
    return troupe__error(TROUPE_FAILED_PRECONDITION, "%s: node %s is not hosted", op, name);
}

/* ---- host <-> device ----------------------------------------------------------------------- */

troupe_status_t troupe__from_host_locked(troupe_context_t *ctx, troupe_tnode_t *tn,
                                         troupe_event_t **out_ev)
{
    const troupe__carray_t *a = troupe__context_find(ctx, tn);
    if (!a)
        return s_lacks(ctx, tn, "from_host");
    if (!troupe_tnode_known_hosted(tn))
        return s_not_hosted(tn, "from_host");
    troupe__srec_t *s = ctx->srec;
    TROUPE_RETURN_IF_ERROR(troupe_stream_status(s->stream));
    void *host = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(tn, &host));
    troupe__entry_t *e = troupe__ledger_find(ctx->dev, troupe__key_of(a->loc));
    if (e)
        TROUPE_RETURN_IF_ERROR(troupe__ledger_before_write(s, e));
    TROUPE_RETURN_IF_ERROR(troupe__host_order(tn, s, false));
    s_copy_t *c = NULL;
    TROUPE_RETURN_IF_ERROR(s_new_copy(s, 0, &c));
    troupe_tnode_retain(tn);
    c->tn = tn;
    c->host = host;
    c->dst = a->loc;
    c->size_bytes = (int64_t)tn->size_bytes;
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(s_schedule(s, c, &ev));
    troupe_status_t st = troupe__host_note_user(tn, ev, false);
    if (e) {
        troupe__ledger_note_write(e, s, ev);
        e->host_gen = troupe__host_gen(tn);
    }
    if (st == TROUPE_OK)
        st = troupe_tnode_mark_not_lagging(tn, ctx->dev->device_id);
    troupe__ledger_tick(ctx->dev);
    if (st == TROUPE_OK && out_ev)
        *out_ev = ev;
    else
        troupe_event_release(&ev);
    return st;
}

troupe_status_t troupe__to_host_locked(troupe__srec_t *s, troupe_tnode_t *tn,
                                       troupe_buffer_loc_t loc, troupe_event_t **out_ev)
{
    TROUPE_RETURN_IF_ERROR(troupe_stream_status(s->stream));
    void *host = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(tn, &host));
    troupe__entry_t *e = troupe__ledger_find(s->dev, troupe__key_of(loc));
    if (e)
        TROUPE_RETURN_IF_ERROR(troupe__ledger_before_read(s, e));
    TROUPE_RETURN_IF_ERROR(troupe__host_order(tn, s, true));
    s_copy_t *c = NULL;
    TROUPE_RETURN_IF_ERROR(s_new_copy(s, 1, &c));
    troupe_tnode_retain(tn);
    c->tn = tn;
    c->host = host;
    c->src = loc;
    c->size_bytes = (int64_t)tn->size_bytes;
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(s_schedule(s, c, &ev));
    troupe_status_t st = troupe__host_note_user(tn, ev, true);
    if (e && st == TROUPE_OK)
        st = troupe__ledger_note_read(e, s, ev);
    troupe__ledger_tick(s->dev);
    if (st == TROUPE_OK && out_ev)
        *out_ev = ev;
    else
        troupe_event_release(&ev);
    return st;
}

troupe_status_t troupe_from_host(troupe_context_t *ctx, troupe_tnode_t *tn, troupe_event_t **out_ev)
{
    if (out_ev)
        *out_ev = NULL;
    if (!ctx || !tn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "from_host: NULL argument");
    TROUPE_RETURN_IF_ERROR(troupe__context_check_local(ctx, "from_host"));
    pthread_mutex_lock(&ctx->dev->lock);
    troupe_status_t st = troupe__from_host_locked(ctx, tn, out_ev);
    pthread_mutex_unlock(&ctx->dev->lock);
    if (st == TROUPE_OK)
        troupe__host_install_hooks(tn);
    return st;
}

troupe_status_t troupe_to_host(troupe_context_t *ctx, troupe_tnode_t *tn, troupe_event_t **out_ev)
{
    if (out_ev)
        *out_ev = NULL;
    if (!ctx || !tn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "to_host: NULL argument");
    TROUPE_RETURN_IF_ERROR(troupe__context_check_local(ctx, "to_host"));
    const troupe__carray_t *a = troupe__context_find(ctx, tn);
    if (!a)
        return s_lacks(ctx, tn, "to_host");
    if (!troupe_tnode_known_hosted(tn))
        return s_not_hosted(tn, "to_host");
    pthread_mutex_lock(&ctx->dev->lock);
    troupe_status_t st = troupe__to_host_locked(ctx->srec, tn, a->loc, out_ev);
    pthread_mutex_unlock(&ctx->dev->lock);
    return st;
}

troupe_status_t troupe_init_from_host(troupe_context_t *ctx, troupe_tnode_t *tn,
                                      troupe_context_t **out_ctx, troupe_event_t **out_ev)
{
    if (out_ev)
        *out_ev = NULL;
    if (!ctx || !tn || !out_ctx)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "init_from_host: NULL argument");
    *out_ctx = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__context_check_local(ctx, "init_from_host"));
    char name[64];
    troupe_tnode_debug_name(tn, name, sizeof name);
    if (troupe__context_find(ctx, tn))
        return troupe__error(TROUPE_ALREADY_EXISTS,
                             "init_from_host: the context already has node %s", name);
    void *host = NULL;
    if (troupe_tnode_host_array(tn, &host) != TROUPE_OK || !troupe_tnode_known_hosted(tn))
        return s_not_hosted(tn, "init_from_host");
    bool shared = troupe_tnode_known_shared_cross_streams(tn);
    if (!shared && !troupe_tnode_known_non_cross_stream(tn))
        TROUPE_RETURN_IF_ERROR(
            troupe_tnode_update_memory_sharing(tn, TROUPE_SHARING_PER_STREAM, S_PROV_PER_STREAM));
    troupe_device_t *dev = ctx->dev;
    troupe_status_t st = TROUPE_OK;
    int32_t pool = -1;
    troupe_context_t *child = NULL;
    pthread_mutex_lock(&dev->lock);
    troupe__carray_t a = {tn, {0, 0, (int64_t)tn->size_bytes}, shared};
    if (shared) {
        for (size_t i = 0; i < dev->nshared; i++)
            if (dev->shared[i].tn == tn)
                a.loc = dev->shared[i].loc;
        if (a.loc.pool_id == 0) {
            st = troupe__pool_alloc(dev, (int64_t)tn->size_bytes, &a.loc.pool_id);
            troupe__shared_t *v = NULL;
            if (st == TROUPE_OK) {
                v = troupe_realloc(dev->shared, (dev->nshared + 1) * sizeof *v);
                if (!v) {
                    troupe__pool_free(dev, a.loc.pool_id);
                    st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "init_from_host: out of memory");
                }
            }
            if (st != TROUPE_OK)
                goto out_unlock;
            dev->shared = v;
            dev->shared_cap = dev->nshared + 1;
            troupe_tnode_retain(tn);
            dev->shared[dev->nshared++] = (troupe__shared_t){tn, a.loc};
        }
    } else {
        st = troupe__pool_alloc(dev, (int64_t)tn->size_bytes, &pool);
        if (st != TROUPE_OK)
            goto out_unlock;
        a.loc.pool_id = pool;
    }
    troupe__entry_t *e = NULL;
    st = troupe__ledger_add(dev, tn, a.loc, shared, &e);
    if (st == TROUPE_OK)
        st = troupe__context_derive(ctx, &a, 1, pool, ctx->merge_node, &child);
    if (st != TROUPE_OK) {
        if (pool >= 0)
            troupe__pool_free(dev, pool);
        goto out_unlock;
    }
    st = troupe__from_host_locked(child, tn, out_ev);
out_unlock:
    pthread_mutex_unlock(&dev->lock);
    if (st != TROUPE_OK) {
        troupe_context_release(&child);
        return st;
    }
    troupe__host_install_hooks(tn);
    *out_ctx = child;
    return TROUPE_OK;
}

/* ---- device to device ---------------------------------------------------------------------- */

static troupe_status_t s_d2d_locked(troupe_tnode_t *n, troupe_merge_use_t use,
                                    troupe_context_t *dst, troupe_context_t *src,
                                    const troupe__carray_t *sa, troupe_routine_t *consumer,
                                    troupe_event_t **out_ev)
{
    troupe_device_t *dev = dst->dev;
    troupe__srec_t *ds = dst->srec;
    TROUPE_RETURN_IF_ERROR(troupe_stream_status(ds->stream));
    troupe__entry_t *se = troupe__ledger_find(dev, troupe__key_of(sa->loc));
    if (se)
        TROUPE_RETURN_IF_ERROR(troupe__ledger_before_read(ds, se));
    troupe_event_t *ev = NULL;
    troupe_status_t st = TROUPE_OK;
    s_copy_t *c = NULL;
    if (use == TROUPE_MERGE_NO) {
        const troupe__carray_t *da = troupe__context_find(dst, n);
        troupe__entry_t *de = troupe__ledger_find(dev, troupe__key_of(da->loc));
        if (de)
            TROUPE_RETURN_IF_ERROR(troupe__ledger_before_write(ds, de));
        TROUPE_RETURN_IF_ERROR(s_new_copy(ds, 2, &c));
        c->dst = da->loc;
        c->src = sa->loc;
        c->size_bytes = (int64_t)n->size_bytes;
        TROUPE_RETURN_IF_ERROR(s_schedule(ds, c, &ev));
        if (se)
            st = troupe__ledger_note_read(se, ds, ev);
        if (de) {
            troupe__ledger_note_write(de, ds, ev);
            de->host_gen = se ? se->host_gen : -1;
            if (st == TROUPE_OK && troupe_tnode_known_hosted(n))
                st = troupe__host_note_device_write(n, ds, de->key, ev);
        }
    } else if (use == TROUPE_MERGE_COPY) {
        TROUPE_RETURN_IF_ERROR(s_new_copy(ds, 3, &c));
        c->src = sa->loc;
        c->size_bytes = (int64_t)n->size_bytes;
        TROUPE_RETURN_IF_ERROR(s_schedule(ds, c, &ev));
        if (ds->sched_merge_capacity < (int64_t)n->size_bytes)
            ds->sched_merge_capacity = (int64_t)n->size_bytes;
        if (se)
            st = troupe__ledger_note_read(se, ds, ev);
        troupe_tnode_retain(n);
        troupe_tnode_release(&ds->sched_merge_node);
        ds->sched_merge_node = n;
        ds->sched_merge_streaming = false;
    } else {
        TROUPE_RETURN_IF_ERROR(s_new_copy(ds, 4, &c));
        c->src = sa->loc;
        TROUPE_RETURN_IF_ERROR(troupe_stream_schedule(ds->stream, s_copy_work, c, s_copy_dtor));
        troupe_tnode_retain(n);
        troupe_tnode_release(&ds->sched_merge_node);
        ds->sched_merge_node = n;
        ds->sched_merge_streaming = true;
        ds->sched_merge_src = troupe__key_of(sa->loc);
        /* The consumer registers itself as a reader of the source array. */
        st = troupe__routine_run_locked(consumer, &ev);
    }
    troupe__ledger_tick(dev);
    (void)src;
    if (st == TROUPE_OK && out_ev)
        *out_ev = ev;
    else
        troupe_event_release(&ev);
    return st;
}

/* ---- lending arrays to an external agent; remote device_to_device ------------------------- */

struct s_lend;
typedef troupe_status_t (*s_lend_start_fn)(struct s_lend *l, void *const *ptrs,
                                           const int64_t *bytes);

/* A lend work item: resolves host pointers of `n` arrays (or of the merge buffer, grown to
 * merge_bytes, when to_merge), hands them to `start`, which hands `done` to the agent. */
typedef struct s_lend {
    const troupe_driver_vtable_t *vt;
    troupe_driver_t *drv;
    int ordinal;
    troupe__srec_t *srec;
    troupe_stream_t *stream; /* retained: its status completes `done` when dropped */
    size_t n;
    troupe_buffer_loc_t *locs;
    bool to_merge;
    int64_t merge_bytes;
    s_lend_start_fn start;
    troupe_event_t *done; /* retained */
    bool handed;          /* the agent owns the completion of done */
    /* public lend */
    troupe_lend_fn user_start;
    troupe_lend_dtor_fn user_dtor;
    void *user;
    /* remote move */
    troupe_remote_transport_t rt;
    bool is_send;
    int peer;
    troupe_tnode_t *tn; /* retained */
} s_lend_t;

static pthread_mutex_t s_rt_lock = PTHREAD_MUTEX_INITIALIZER;
static troupe_remote_transport_t s_rt;
static bool s_rt_set;

void troupe_set_remote_transport(const troupe_remote_transport_t *t)
{
    pthread_mutex_lock(&s_rt_lock);
    s_rt_set = t != NULL;
    if (t)
        s_rt = *t;
    else
        memset(&s_rt, 0, sizeof s_rt);
    pthread_mutex_unlock(&s_rt_lock);
}

static bool s_rt_get(troupe_remote_transport_t *out)
{
    pthread_mutex_lock(&s_rt_lock);
    bool set = s_rt_set;
    if (set)
        *out = s_rt;
    pthread_mutex_unlock(&s_rt_lock);
    return set;
}

static troupe_status_t s_lend_work(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    s_lend_t *l = arg;
    size_t n = l->to_merge ? 1 : l->n;
    void *ptrs_small[8];
    int64_t bytes_small[8];
    void **ptrs = n <= 8 ? ptrs_small : troupe_calloc(n, sizeof *ptrs);
    int64_t *bytes = n <= 8 ? bytes_small : troupe_calloc(n, sizeof *bytes);
    troupe_status_t st = TROUPE_OK;
    if (!ptrs || !bytes)
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "lend: out of memory");
    if (st == TROUPE_OK && l->to_merge) {
        troupe_buffer_loc_t mb;
        st = s_mb_ensure(l->vt, l->drv, l->ordinal, l->srec, l->merge_bytes, &mb);
        if (st == TROUPE_OK) {
            st = l->vt->host_ptr(l->drv, l->ordinal, mb, &ptrs[0]);
            bytes[0] = l->merge_bytes;
            /* A consumer reading `.merge` resolves to what was received. */
            l->srec->mb_cur = mb;
            l->srec->mb_valid = true;
        }
    } else {
        for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
            st = l->vt->host_ptr(l->drv, l->ordinal, l->locs[i], &ptrs[i]);
            bytes[i] = l->locs[i].size_bytes;
        }
    }
    if (st == TROUPE_OK)
        st = l->start(l, ptrs, bytes);
    if (st == TROUPE_OK) {
        l->handed = true;
    } else {
        /* The agent never got `done`: complete it so the stream's WAIT behind us resolves. */
        l->handed = true;
        troupe_event_complete(l->done, st, troupe_last_error());
    }
    if (ptrs != (void **)ptrs_small)
        troupe_free(ptrs);
    if (bytes != bytes_small)
        troupe_free(bytes);
    return st;
}

static void s_lend_dtor(void *arg)
{
    s_lend_t *l = arg;
    if (!l->handed && l->done) {
        troupe_status_t st = l->stream ? troupe_stream_status(l->stream) : TROUPE_OK;
        if (st == TROUPE_OK)
            troupe_event_complete(l->done, TROUPE_CANCELLED,
                                  "lend: the stream shut down before the arrays were handed over");
        else
            troupe_event_complete(l->done, st, troupe_last_error());
    }
    if (l->user_dtor)
        l->user_dtor(l->user);
    troupe_event_release(&l->done);
    troupe_stream_release(&l->stream);
    troupe_tnode_release(&l->tn);
    troupe_free(l->locs);
    troupe_free(l);
}

static troupe_status_t s_lend_user_start(s_lend_t *l, void *const *ptrs, const int64_t *bytes)
{
    return l->user_start(l->user, ptrs, bytes, l->n);
}

static troupe_status_t s_lend_remote_start(s_lend_t *l, void *const *ptrs, const int64_t *bytes)
{
    troupe_event_retain(l->done); /* the transport adopts this reference */
    (void)bytes;
    troupe_status_t st = l->rt.move(l->rt.user, l->is_send, l->peer, l->tn, ptrs[0],
                                    (int64_t)l->tn->size_bytes, l->done);
    if (st != TROUPE_OK) {
        troupe_event_t *ref = l->done;
        troupe_event_release(&ref);
    }
    return st;
}

static troupe_status_t s_lend_new(troupe__srec_t *s, size_t n, troupe_event_t *done, s_lend_t **out)
{
    s_lend_t *l = troupe_calloc(1, sizeof *l);
    if (!l || !(l->locs = troupe_calloc(n ? n : 1, sizeof *l->locs))) {
        troupe_free(l);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "lend: out of memory");
    }
    l->vt = s->dev->backend->vt;
    l->drv = s->dev->backend->drv;
    l->ordinal = s->dev->ordinal;
    l->srec = s;
    troupe_stream_retain(s->stream);
    l->stream = s->stream;
    l->n = n;
    troupe_event_retain(done);
    l->done = done;
    *out = l;
    return TROUPE_OK;
}

/* dev->lock held. Schedules l on s (consumed), then, unless deferred, a WAIT for l->done, and
 * records the event after it in *out_ev (a reference; deferred: `done` itself). */
static troupe_status_t s_lend_schedule(troupe__srec_t *s, s_lend_t *l, bool deferred,
                                       troupe_event_t **out_ev)
{
    troupe_event_t *done = l->done;
    troupe_event_retain(done);
    troupe_status_t st = troupe_stream_schedule(s->stream, s_lend_work, l, s_lend_dtor);
    if (st != TROUPE_OK) {
        troupe_event_release(&done);
        return st;
    }
    if (deferred) {
        *out_ev = done; /* our reference */
        return TROUPE_OK;
    }
    st = troupe_stream_wait_for(s->stream, done);
    if (st == TROUPE_OK)
        st = troupe_stream_record(s->stream, out_ev);
    if (st != TROUPE_OK && troupe_stream_status(s->stream) == st) {
        /* The lend was accepted and failed the stream during this call (an inline stream runs
         * it at once): report it through the event, as a threaded stream would. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        st = troupe_event_new_completed("lend", st, msg, out_ev);
    }
    troupe_event_release(&done);
    return st;
}

static troupe_status_t s_check_host_ptr(const troupe_device_t *dev, const char *op)
{
    if (!dev->backend->vt->host_ptr)
        return troupe__error(TROUPE_UNIMPLEMENTED,
                             "%s: the %s driver has no host-addressable memory (host_ptr)", op,
                             dev->backend->vt->name);
    return TROUPE_OK;
}

static troupe_status_t s_lend_arrays(troupe_context_t *ctx, size_t n, troupe_tnode_t *const *tns,
                                     troupe_lend_fn start, void *user, troupe_lend_dtor_fn dtor,
                                     troupe_event_t *done, bool deferred, troupe_event_t **out_ev)
{
    if (out_ev)
        *out_ev = NULL;
    troupe_status_t st = TROUPE_OK;
    if (!ctx || !tns || !start || !done || n == 0)
        st = troupe__error(TROUPE_INVALID_ARGUMENT, "lend_arrays: NULL argument or no arrays");
    if (st == TROUPE_OK)
        st = troupe__context_check_local(ctx, "lend_arrays");
    if (st == TROUPE_OK)
        st = s_check_host_ptr(ctx->dev, "lend_arrays");
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        if (!tns[i])
            st = troupe__error(TROUPE_INVALID_ARGUMENT, "lend_arrays: node %zu is NULL", i);
        else if (!troupe__context_find(ctx, tns[i]))
            st = s_lacks(ctx, tns[i], "lend_arrays");
    }
    s_lend_t *l = NULL;
    if (st == TROUPE_OK)
        st = s_lend_new(ctx->srec, n, done, &l);
    if (st != TROUPE_OK) {
        if (dtor)
            dtor(user);
        return st;
    }
    l->start = s_lend_user_start;
    l->user_start = start;
    l->user_dtor = dtor;
    l->user = user;
    for (size_t i = 0; i < n; i++)
        l->locs[i] = troupe__context_find(ctx, tns[i])->loc;

    troupe_device_t *dev = ctx->dev;
    troupe__srec_t *s = ctx->srec;
    troupe_event_t *ev = NULL;
    pthread_mutex_lock(&dev->lock);
    st = troupe_stream_status(s->stream);
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        troupe__entry_t *e = troupe__ledger_find(dev, troupe__key_of(l->locs[i]));
        if (e)
            st = troupe__ledger_before_write(s, e);
    }
    if (st != TROUPE_OK) {
        pthread_mutex_unlock(&dev->lock);
        l->handed = true; /* `done` untouched on an error return */
        s_lend_dtor(l);
        return st;
    }
    st = s_lend_schedule(s, l, deferred, &ev); /* l consumed: locations from ctx again */
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        troupe_buffer_loc_t loc = troupe__context_find(ctx, tns[i])->loc;
        troupe__entry_t *e = troupe__ledger_find(dev, troupe__key_of(loc));
        if (e) {
            troupe__ledger_note_write(e, s, ev);
            if (troupe_tnode_known_hosted(tns[i]))
                st = troupe__host_note_device_write(tns[i], s, e->key, ev);
        }
    }
    troupe__ledger_tick(dev);
    pthread_mutex_unlock(&dev->lock);
    if (st == TROUPE_OK && out_ev)
        *out_ev = ev;
    else
        troupe_event_release(&ev);
    return st;
}

troupe_status_t troupe_lend_arrays(troupe_context_t *ctx, size_t n, troupe_tnode_t *const *tns,
                                   troupe_lend_fn start, void *user, troupe_lend_dtor_fn dtor,
                                   troupe_event_t *done, troupe_event_t **out_ev)
{
    return s_lend_arrays(ctx, n, tns, start, user, dtor, done, false, out_ev);
}

troupe_status_t troupe_lend_arrays_deferred(troupe_context_t *ctx, size_t n,
                                            troupe_tnode_t *const *tns, troupe_lend_fn start,
                                            void *user, troupe_lend_dtor_fn dtor,
                                            troupe_event_t *done)
{
    troupe_event_t *ev = NULL;
    troupe_status_t st = s_lend_arrays(ctx, n, tns, start, user, dtor, done, true, &ev);
    troupe_event_release(&ev); /* a reference to `done` */
    return st;
}

troupe_status_t troupe_context_new_remote(int rank, troupe_context_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "context_new_remote: NULL out");
    *out = NULL;
    troupe_remote_transport_t rt;
    if (!s_rt_get(&rt))
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "context_new_remote: no remote transport is registered (call "
                             "troupe_cluster_init first)");
    if (rank < 0 || rank >= rt.size || rank == rt.rank)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "context_new_remote: rank %d is not another rank of this job "
                             "(this is rank %d of %d)",
                             rank, rt.rank, rt.size);
    troupe_context_t *c = troupe_calloc(1, sizeof *c);
    if (!c)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "context_new_remote: out of memory");
    troupe_refcount_init(&c->refs);
    c->owned_pool_id = -1;
    c->remote_rank = rank;
    atomic_init(&c->finalized, false);
    *out = c;
    return TROUPE_OK;
}

bool troupe_context_is_remote(const troupe_context_t *ctx)
{
    return ctx && ctx->remote_rank >= 0;
}

int troupe_context_remote_rank(const troupe_context_t *ctx)
{
    return ctx ? ctx->remote_rank : -1;
}

/* device_to_device with one remote side: a send (dst remote) reads the local array; a receive
 * (src remote) writes the local array (NO) or the merge buffer (COPY). */
static troupe_status_t s_d2d_remote(troupe_tnode_t *n, troupe_merge_use_t use,
                                    troupe_context_t *dst_ctx, troupe_context_t *src_ctx,
                                    troupe_routine_t *consumer, troupe_context_t **out_ctx,
                                    troupe_event_t **out_ev)
{
    bool is_send = dst_ctx->remote_rank >= 0;
    troupe_context_t *local = is_send ? src_ctx : dst_ctx;
    int peer = is_send ? dst_ctx->remote_rank : src_ctx->remote_rank;
    if (local->remote_rank >= 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "device_to_device: both contexts are remote (ranks %d and %d)",
                             src_ctx->remote_rank, dst_ctx->remote_rank);
    if (use == TROUPE_MERGE_STREAMING || consumer)
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "device_to_device with rank %d: STREAMING has no remote form (use "
                             "COPY and run the consumer)",
                             peer);
    troupe_remote_transport_t rt;
    if (!s_rt_get(&rt))
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "device_to_device with rank %d: no remote transport is registered "
                             "(troupe_cluster_init, or the cluster was finalized)",
                             peer);
    TROUPE_RETURN_IF_ERROR(s_check_host_ptr(local->dev, "device_to_device with a remote rank"));
    const troupe__carray_t *a = NULL;
    if (is_send || use == TROUPE_MERGE_NO) {
        a = troupe__context_find(local, n);
        if (!a)
            return s_lacks(local, n,
                           is_send ? "device_to_device source" : "device_to_device destination");
    }
    troupe_context_t *child = NULL;
    if (!is_send && out_ctx)
        TROUPE_RETURN_IF_ERROR(troupe__context_derive(
            local, NULL, 0, -1, use == TROUPE_MERGE_NO ? local->merge_node : n, &child));

    troupe_event_t *done = NULL;
    troupe_status_t st = troupe_event_new(is_send ? "remote-send" : "remote-recv", &done);
    s_lend_t *l = NULL;
    if (st == TROUPE_OK)
        st = s_lend_new(local->srec, 1, done, &l);
    troupe_event_release(&done);
    if (st != TROUPE_OK) {
        troupe_context_release(&child);
        return st;
    }
    l->start = s_lend_remote_start;
    l->rt = rt;
    l->is_send = is_send;
    l->peer = peer;
    troupe_tnode_retain(n);
    l->tn = n;
    if (a)
        l->locs[0] = a->loc;
    l->to_merge = !is_send && use == TROUPE_MERGE_COPY;
    l->merge_bytes = (int64_t)n->size_bytes;

    troupe_device_t *dev = local->dev;
    troupe__srec_t *s = local->srec;
    troupe_event_t *ev = NULL;
    pthread_mutex_lock(&dev->lock);
    st = troupe_stream_status(s->stream);
    troupe__entry_t *e = a ? troupe__ledger_find(dev, troupe__key_of(a->loc)) : NULL;
    if (st == TROUPE_OK && e)
        st = is_send ? troupe__ledger_before_read(s, e) : troupe__ledger_before_write(s, e);
    if (st != TROUPE_OK) {
        pthread_mutex_unlock(&dev->lock);
        l->handed = true;
        s_lend_dtor(l);
        troupe_context_release(&child);
        return st;
    }
    st = s_lend_schedule(s, l, false, &ev); /* l consumed */
    if (st == TROUPE_OK && e) {
        if (is_send) {
            st = troupe__ledger_note_read(e, s, ev);
        } else {
            troupe__ledger_note_write(e, s, ev);
            e->host_gen = -1;
            if (troupe_tnode_known_hosted(n))
                st = troupe__host_note_device_write(n, s, e->key, ev);
        }
    }
    if (st == TROUPE_OK && !is_send && use == TROUPE_MERGE_COPY) {
        if (s->sched_merge_capacity < (int64_t)n->size_bytes)
            s->sched_merge_capacity = (int64_t)n->size_bytes;
        troupe_tnode_retain(n);
        troupe_tnode_release(&s->sched_merge_node);
        s->sched_merge_node = n;
        s->sched_merge_streaming = false;
    }
    troupe__ledger_tick(dev);
    pthread_mutex_unlock(&dev->lock);
    if (st != TROUPE_OK) {
        troupe_event_release(&ev);
        troupe_context_release(&child);
        return st;
    }
    if (out_ev)
        *out_ev = ev;
    else
        troupe_event_release(&ev);
    if (out_ctx)
        *out_ctx = child;
    return TROUPE_OK;
}

troupe_status_t troupe_device_to_device(troupe_tnode_t *n, troupe_merge_use_t use,
                                        troupe_context_t *dst_ctx, troupe_context_t *src_ctx,
                                        troupe_routine_t *consumer, troupe_context_t **out_ctx,
                                        troupe_event_t **out_ev)
{
    if (out_ev)
        *out_ev = NULL;
    if (out_ctx)
        *out_ctx = NULL;
    if (!n || !dst_ctx || !src_ctx)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "device_to_device: NULL argument");
    if (use != TROUPE_MERGE_NO && use != TROUPE_MERGE_COPY && use != TROUPE_MERGE_STREAMING)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "device_to_device: bad merge use %d",
                             (int)use);
    if (dst_ctx->remote_rank >= 0 || src_ctx->remote_rank >= 0)
        return s_d2d_remote(n, use, dst_ctx, src_ctx, consumer, out_ctx, out_ev);
    if ((use == TROUPE_MERGE_STREAMING) != (consumer != NULL))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "device_to_device: a consumer routine is required for STREAMING and "
                             "only for it");
    if (dst_ctx->backend != src_ctx->backend)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "device_to_device: the contexts belong to different backends");
    if (dst_ctx->dev != src_ctx->dev)
        return troupe__error(use == TROUPE_MERGE_STREAMING ? TROUPE_FAILED_PRECONDITION
                                                           : TROUPE_UNIMPLEMENTED,
                             "device_to_device: copies between devices %d and %d are not "
                             "supported%s",
                             src_ctx->dev->ordinal, dst_ctx->dev->ordinal,
                             use == TROUPE_MERGE_STREAMING ? " (STREAMING needs one device)" : "");
    char n1[64], n2[64];
    troupe_tnode_debug_name(n, n1, sizeof n1);
    const troupe__carray_t *sa = troupe__context_find(src_ctx, n);
    if (!sa)
        return s_lacks(src_ctx, n, "device_to_device source");
    troupe_tnode_t *tag = use == TROUPE_MERGE_NO ? dst_ctx->merge_node : n;
    if (use == TROUPE_MERGE_NO) {
        const troupe__carray_t *da = troupe__context_find(dst_ctx, n);
        if (!da)
            return s_lacks(dst_ctx, n, "device_to_device destination");
        if (da->loc.pool_id == sa->loc.pool_id && da->loc.offset == sa->loc.offset) {
            if (out_ev)
                TROUPE_RETURN_IF_ERROR(
                    troupe_event_new_completed("d2d-noop", TROUPE_OK, NULL, out_ev));
            if (out_ctx)
                return troupe__context_derive(dst_ctx, NULL, 0, -1, tag, out_ctx);
            return TROUPE_OK;
        }
    }
    if (use == TROUPE_MERGE_STREAMING) {
        if (consumer->ctx->srec != dst_ctx->srec)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "device_to_device STREAMING: the consumer %s runs on stream %s, "
                                 "not on the destination stream %s",
                                 troupe_routine_name(consumer),
                                 troupe_stream_name(consumer->ctx->srec->stream),
                                 troupe_stream_name(dst_ctx->srec->stream));
        troupe_tnode_t *m = consumer->code->proc->merge_node;
        if (m != n) {
            if (m)
                troupe_tnode_debug_name(m, n2, sizeof n2);
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "device_to_device STREAMING of %s: merge buffer mismatch: the "
                                 "consumer %s reads %s through its merge buffer",
                                 n1, troupe_routine_name(consumer), m ? n2 : "no merge node");
        }
    }
    troupe_context_t *child = NULL;
    if (out_ctx)
        TROUPE_RETURN_IF_ERROR(troupe__context_derive(dst_ctx, NULL, 0, -1, tag, &child));
    pthread_mutex_lock(&dst_ctx->dev->lock);
    troupe_status_t st = s_d2d_locked(n, use, dst_ctx, src_ctx, sa, consumer, out_ev);
    pthread_mutex_unlock(&dst_ctx->dev->lock);
    if (st != TROUPE_OK) {
        troupe_context_release(&child);
        return st;
    }
    if (out_ctx)
        *out_ctx = child;
    return TROUPE_OK;
}
