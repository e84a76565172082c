/* troupe — the host side of hosted nodes: the host-array table, its coherence hooks and the
 * host transfers (see host.h for the rules, host_impl.h for the table). */
#include "actors/host_impl.h"

#include "actors/event_impl.h"
#include "actors/runtime_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/trace_impl.h"
#include "base/config.h"
#include "base/status.h"
#include "base/vec.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define S_PROV_PER_STREAM 410

/* ---- the host-array table ------------------------------------------------------------------- */

/* A transfer using a host array until its event completes. */
typedef struct s_user {
    troupe_event_t *ev;
    bool is_write; /* d2h: it writes the host array */
} s_user_t;

typedef struct s_hrec {
    int32_t node_id;
    int64_t gen;             /* host generation: bumped by every host write */
    int64_t explicit_gen;    /* the newest generation uploaded explicitly, -1 none */
    troupe_device_t *wr_dev; /* the device write the host has not fetched, NULL none */
    troupe__srec_t *wr_s;
    troupe__akey_t wr_key;
    troupe_event_t *wr_ev;
    s_user_t *users;
    size_t nusers, users_cap;
} s_hrec_t;

static pthread_mutex_t s_hlock = PTHREAD_MUTEX_INITIALIZER;
static s_hrec_t *s_hrecs;
static size_t s_nhrecs, s_hcap;

/* s_hlock held. NULL when absent and !create, or out of memory. */
static s_hrec_t *s_hfind(int32_t id, bool create)
{
    for (size_t i = 0; i < s_nhrecs; i++)
        if (s_hrecs[i].node_id == id)
            return &s_hrecs[i];
    if (!create || !TROUPE__VEC_RESERVE(s_hrecs, s_hcap, s_nhrecs + 1))
        return NULL;
    s_hrec_t *r = &s_hrecs[s_nhrecs++];
    memset(r, 0, sizeof *r);
    r->node_id = id;
    r->explicit_gen = -1;
    return r;
}

static void s_forget_write(s_hrec_t *r)
{
    troupe_event_release(&r->wr_ev);
    r->wr_dev = NULL;
    r->wr_s = NULL;
}

static void s_prune_users(s_hrec_t *r)
{
    size_t k = 0;
    for (size_t i = 0; i < r->nusers; i++) {
        if (troupe__event_state_quiet(r->users[i].ev) != TROUPE_EVENT_PENDING)
            troupe_event_release(&r->users[i].ev);
        else
            r->users[k++] = r->users[i];
    }
    r->nusers = k;
}

int64_t troupe__host_array_gen(const troupe_tnode_t *tn)
{
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, false);
    int64_t g = r ? r->gen : 0;
    pthread_mutex_unlock(&s_hlock);
    return g;
}

bool troupe__host_array_lagging(const troupe_tnode_t *tn, const troupe__entry_t *e)
{
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, false);
    int64_t gen = r ? r->gen : 0, explicit_gen = r ? r->explicit_gen : -1;
    pthread_mutex_unlock(&s_hlock);
    if (e->host_gen == gen)
        return false;
    /* An explicit upload is kept when the newer generation went elsewhere explicitly. */
    return !(e->host_explicit && explicit_gen == gen);
}

void troupe__host_array_note_written(troupe__entry_t *e, int64_t gen)
{
    e->host_gen = gen;
    e->host_explicit = false;
}

/* The newest generation of tn was uploaded explicitly. */
static void s_note_explicit(const troupe_tnode_t *tn, int64_t gen)
{
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, true);
    if (r && r->gen == gen)
        r->explicit_gen = gen;
    pthread_mutex_unlock(&s_hlock);
}

troupe_status_t troupe__host_array_note_device_write(troupe_tnode_t *tn, troupe__srec_t *s,
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

troupe_status_t troupe__host_array_order(troupe_tnode_t *tn, troupe__srec_t *s, bool is_write)
{
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, false);
    if (r) {
        s_prune_users(r);
        for (size_t i = 0; i < r->nusers && st == TROUPE_OK; i++)
            if (is_write || r->users[i].is_write)
                st = troupe_stream_wait_for(s->stream, r->users[i].ev);
    }
    pthread_mutex_unlock(&s_hlock);
    return st;
}

troupe_status_t troupe__host_array_note_user(troupe_tnode_t *tn, troupe_event_t *ev, bool is_write)
{
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, true);
    if (r)
        s_prune_users(r);
    if (!r || !TROUPE__VEC_PUSH(r->users, r->nusers, r->users_cap, ((s_user_t){ev, is_write}))) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "host table: out of memory");
    } else {
        troupe_event_retain(ev);
    }
    pthread_mutex_unlock(&s_hlock);
    return st;
}

void troupe__host_array_purge_device(troupe_device_t *dev)
{
    pthread_mutex_lock(&s_hlock);
    for (size_t i = 0; i < s_nhrecs; i++)
        if (s_hrecs[i].wr_dev == dev)
            s_forget_write(&s_hrecs[i]);
    pthread_mutex_unlock(&s_hlock);
}

/* ---- coherence hooks ------------------------------------------------------------------------ */

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
    troupe__entry_t *e = troupe__ledger_find(&dev->ledger, key);
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
        if (r && r->wr_ev == wev)
            s_forget_write(r);
        pthread_mutex_unlock(&s_hlock);
    }
    troupe_event_release(&wev);
    return st;
}

/* Host write: wait for the transfers still using the host array; the host becomes newest. */
static troupe_status_t s_prepare_write(troupe_tnode_t *tn, void *user)
{
    (void)user;
    pthread_mutex_lock(&s_hlock);
    s_hrec_t *r = s_hfind(tn->id, true);
    if (!r) {
        pthread_mutex_unlock(&s_hlock);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "host table: out of memory");
    }
    r->gen++;
    s_forget_write(r);
    s_prune_users(r);
    s_user_t *users = r->users;
    size_t n = r->nusers;
    r->users = NULL;
    r->nusers = r->users_cap = 0;
    pthread_mutex_unlock(&s_hlock);
    troupe_status_t st = TROUPE_OK;
    for (size_t i = 0; i < n; i++) {
        troupe_status_t s2 = troupe_event_sync(users[i].ev, troupe_config_timeout_ns());
        /* A failed transfer no longer uses the array; only a deadline is an error here. */
        if (s2 == TROUPE_DEADLINE_EXCEEDED && st == TROUPE_OK)
            st = s2;
        troupe_event_release(&users[i].ev);
    }
    troupe_free(users);
    return st;
}

void troupe__host_array_install_hooks(troupe_tnode_t *tn)
{
    if (tn->hooks.prepare_read == s_prepare_read)
        return;
    troupe_tnode_hooks_t h = {s_prepare_read, s_prepare_write, NULL};
    troupe_tnode_set_hooks(tn, &h);
}

/* ---- host transfers ------------------------------------------------------------------------- */

/* An h2d or d2h work item. */
typedef struct s_host_copy {
    troupe_driver_t *drv;
    troupe_tnode_t *tn; /* retained */
    void *host;
    troupe_buffer_loc_t dev_buf;
    bool to_host;
} s_host_copy_t;

static troupe_status_t s_host_copy_work(void *arg, troupe_dqueue_t *q)
{
    s_host_copy_t *c = arg;
    int64_t bytes = (int64_t)c->tn->size_bytes;
    int64_t t0 = troupe__trace_on() ? troupe_now_ns() : 0;
    troupe_status_t st = c->to_host ? troupe_driver_d2h(c->drv, q, c->host, c->dev_buf, bytes)
                                    : troupe_driver_h2d(c->drv, q, c->dev_buf, c->host, bytes);
    if (t0 != 0) {
        char name[TROUPE__TRACE_NAME_MAX], label[40];
        troupe_tnode_label_string(c->tn, label, sizeof label);
        snprintf(name, sizeof name, "%s %s", c->to_host ? "d2h" : "h2d", label);
        troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("bytes", bytes),
                                   TROUPE__TRACE_NUM("node", c->tn->id)};
        troupe__trace_emit(TROUPE__TRACK_THREAD, "copy", name, t0, troupe_now_ns(), a, 2);
    }
    return st;
}

static void s_host_copy_dtor(void *arg)
{
    s_host_copy_t *c = arg;
    troupe_tnode_release(&c->tn);
    troupe_free(c);
}

/* Schedules the copy between tn's host array and `dev_buf` on s (after the host-array waits)
 * and records the event after it in *out_ev. */
static troupe_status_t s_host_copy(troupe__srec_t *s, troupe_tnode_t *tn,
                                   troupe_buffer_loc_t dev_buf, bool to_host,
                                   troupe_event_t **out_ev)
{
    void *host = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(tn, &host));
    TROUPE_RETURN_IF_ERROR(troupe__host_array_order(tn, s, to_host));
    s_host_copy_t *c = troupe_calloc(1, sizeof *c);
    if (!c)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory",
                             to_host ? "to_host" : "from_host");
    c->drv = s->dev->backend->drv;
    troupe_tnode_retain(tn);
    c->tn = tn;
    c->host = host;
    c->dev_buf = dev_buf;
    c->to_host = to_host;
    TROUPE_RETURN_IF_ERROR(
        troupe_stream_schedule(s->stream, s_host_copy_work, c, s_host_copy_dtor));
    return troupe_stream_record(s->stream, out_ev);
}

static troupe_status_t s_not_hosted(const troupe_tnode_t *tn, const char *op)
{
    char name[64];
    troupe_tnode_debug_name(tn, name, sizeof name);
    return troupe__error(TROUPE_FAILED_PRECONDITION, "%s: node %s is not hosted", op, name);
}

troupe_status_t troupe__from_host_locked(troupe_context_t *ctx, troupe_tnode_t *tn,
                                         bool is_explicit, troupe_event_t **out_ev)
{
    const troupe__carray_t *a = troupe__context_find(ctx, tn);
    if (!a)
        return troupe__context_lacks(ctx, tn, "from_host");
    if (!troupe_tnode_known_hosted(tn))
        return s_not_hosted(tn, "from_host");
    troupe__srec_t *s = ctx->srec;
    TROUPE_RETURN_IF_ERROR(troupe_stream_status(s->stream));
    troupe__entry_t *e = troupe__ledger_find(&ctx->dev->ledger, troupe__key_of(a->loc));
    if (e)
        TROUPE_RETURN_IF_ERROR(troupe__ledger_before_write(s->stream, e));
    int64_t gen = troupe__host_array_gen(tn);
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(s_host_copy(s, tn, a->loc, false, &ev));
    troupe_status_t st = troupe__host_array_note_user(tn, ev, false);
    if (e) {
        troupe__ledger_note_write(e, s->stream, ev);
        e->host_gen = gen;
        e->host_explicit = is_explicit;
    }
    if (is_explicit)
        s_note_explicit(tn, gen);
    if (st == TROUPE_OK)
        st = troupe_tnode_mark_not_lagging(tn, ctx->dev->device_id);
    troupe__ledger_tick(&ctx->dev->ledger);
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
    troupe__entry_t *e = troupe__ledger_find(&s->dev->ledger, troupe__key_of(loc));
    if (e)
        TROUPE_RETURN_IF_ERROR(troupe__ledger_before_read(s->stream, e));
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(s_host_copy(s, tn, loc, true, &ev));
    troupe_status_t st = troupe__host_array_note_user(tn, ev, true);
    if (e && st == TROUPE_OK)
        st = troupe__ledger_note_read(e, s->stream, ev);
    troupe__ledger_tick(&s->dev->ledger);
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
    troupe_status_t st = troupe__from_host_locked(ctx, tn, true, out_ev);
    pthread_mutex_unlock(&ctx->dev->lock);
    if (st == TROUPE_OK)
        troupe__host_array_install_hooks(tn);
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
        return troupe__context_lacks(ctx, tn, "to_host");
    if (!troupe_tnode_known_hosted(tn))
        return s_not_hosted(tn, "to_host");
    pthread_mutex_lock(&ctx->dev->lock);
    troupe_status_t st = troupe__to_host_locked(ctx->srec, tn, a->loc, out_ev);
    pthread_mutex_unlock(&ctx->dev->lock);
    return st;
}

/* init_from_host of tns[0..n) (non-NULL, checked by the caller) into one child of ctx: the
 * device-wide array of a node known shared across streams, else the next multiple of 64 bytes
 * of one fresh zero-filled pool, in order; then the uploads in order (*out_ev, may be NULL: the
 * last one's event). `what` names the call in errors. */
static troupe_status_t s_init_from_host(troupe_context_t *ctx, size_t n, troupe_tnode_t *const *tns,
                                        troupe_context_t **out_ctx, troupe_event_t **out_ev,
                                        const char *what)
{
    *out_ctx = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__context_check_local(ctx, what));
    for (size_t i = 0; i < n; i++) {
        char name[64];
        troupe_tnode_debug_name(tns[i], name, sizeof name);
        for (size_t j = 0; j < i; j++)
            if (tns[j] == tns[i])
                return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: node %s given twice", what,
                                     name);
        if (troupe__context_find(ctx, tns[i]))
            return troupe__error(TROUPE_ALREADY_EXISTS, "%s: the context already has node %s",
                                 what, name);
        void *host = NULL;
        if (troupe_tnode_host_array(tns[i], &host) != TROUPE_OK ||
            !troupe_tnode_known_hosted(tns[i]))
            return s_not_hosted(tns[i], what);
    }
    for (size_t i = 0; i < n; i++)
        if (!troupe_tnode_known_shared_cross_streams(tns[i]) &&
            !troupe_tnode_known_non_cross_stream(tns[i]))
            TROUPE_RETURN_IF_ERROR(troupe_tnode_update_memory_sharing(
                tns[i], TROUPE_SHARING_PER_STREAM, S_PROV_PER_STREAM));
    troupe__carray_t *a = troupe_calloc(n, sizeof *a);
    if (!a)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    troupe_device_t *dev = ctx->dev;
    troupe_context_t *child = NULL;
    int32_t pool = -1;
    int64_t off = 0;
    size_t nfresh = 0; /* the nodes in the pool */
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&dev->lock);
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        bool shared = troupe_tnode_known_shared_cross_streams(tns[i]);
        a[i] = (troupe__carray_t){tns[i], {0, 0, (int64_t)tns[i]->size_bytes}, shared};
        if (shared) {
            st = troupe__shared_array(dev, tns[i], &a[i].loc);
            continue;
        }
        off = (off + 63) / 64 * 64;
        a[i].loc.offset = off;
        off += (int64_t)tns[i]->size_bytes;
        nfresh++;
    }
    if (st == TROUPE_OK && nfresh > 0)
        st = troupe__pool_alloc(dev, off, &pool);
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        if (a[i].shared)
            continue;
        troupe__entry_t *e = NULL;
        a[i].loc.pool_id = pool;
        st = troupe__ledger_add(&dev->ledger, tns[i], a[i].loc, false, &e);
    }
    if (st == TROUPE_OK)
        st = troupe__context_derive(ctx, a, n, pool, ctx->merge_node, &child);
    if (st != TROUPE_OK && pool >= 0)
        troupe__pool_free(dev, pool); /* and its ledger entries */
    for (size_t i = 0; i < n && st == TROUPE_OK; i++)
        st = troupe__from_host_locked(child, tns[i], true, i + 1 == n ? out_ev : NULL);
    pthread_mutex_unlock(&dev->lock);
    troupe_free(a);
    if (st != TROUPE_OK) {
        troupe_context_release(&child);
        return st;
    }
    for (size_t i = 0; i < n; i++)
        troupe__host_array_install_hooks(tns[i]);
    *out_ctx = child;
    return TROUPE_OK;
}

troupe_status_t troupe_init_from_host(troupe_context_t *ctx, troupe_tnode_t *tn,
                                      troupe_context_t **out_ctx, troupe_event_t **out_ev)
{
    if (out_ev)
        *out_ev = NULL;
    if (!ctx || !tn || !out_ctx)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "init_from_host: NULL argument");
    return s_init_from_host(ctx, 1, &tn, out_ctx, out_ev, "init_from_host");
}

troupe_status_t troupe_init_from_host_packed(troupe_context_t *ctx, size_t n,
                                             troupe_tnode_t *const *tns, troupe_context_t **out_ctx)
{
    if (!ctx || !tns || !out_ctx || n == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "init_from_host_packed: %s",
                             n == 0 ? "no nodes" : "NULL argument");
    *out_ctx = NULL;
    for (size_t i = 0; i < n; i++)
        if (!tns[i])
            return troupe__error(TROUPE_INVALID_ARGUMENT, "init_from_host_packed: node %zu is NULL",
                                 i);
    return s_init_from_host(ctx, n, tns, out_ctx, NULL, "init_from_host_packed");
}
