/* troupe — backends, devices, streams and device pools (see backend.h). */
#include "actors/backend.h"

#include "actors/ledger.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/log.h"
#include "base/status.h"

#include <stdatomic.h>
#include <string.h>

static atomic_int_fast32_t s_next_device_id = 0;

/* Every live stream record (streams carry no user data, so contexts find theirs here). */
static pthread_mutex_t s_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static troupe__srec_t **s_reg;
static size_t s_nreg, s_reg_cap;

static bool s_reg_add(troupe__srec_t *s)
{
    bool ok = true;
    pthread_mutex_lock(&s_reg_lock);
    if (s_nreg == s_reg_cap) {
        size_t cap = s_reg_cap ? s_reg_cap * 2 : 16;
        troupe__srec_t **v = troupe_realloc(s_reg, cap * sizeof *v);
        if (!v)
            ok = false;
        else {
            s_reg = v;
            s_reg_cap = cap;
        }
    }
    if (ok)
        s_reg[s_nreg++] = s;
    pthread_mutex_unlock(&s_reg_lock);
    return ok;
}

static void s_reg_remove(troupe__srec_t *s)
{
    pthread_mutex_lock(&s_reg_lock);
    for (size_t i = 0; i < s_nreg; i++) {
        if (s_reg[i] == s) {
            s_reg[i] = s_reg[--s_nreg];
            break;
        }
    }
    pthread_mutex_unlock(&s_reg_lock);
}

troupe__srec_t *troupe__srec_lookup_global(troupe_stream_t *st)
{
    troupe__srec_t *r = NULL;
    pthread_mutex_lock(&s_reg_lock);
    for (size_t i = 0; i < s_nreg; i++) {
        if (s_reg[i]->stream == st) {
            r = s_reg[i];
            break;
        }
    }
    pthread_mutex_unlock(&s_reg_lock);
    return r;
}

troupe_status_t troupe_backend_open(const char *name, troupe_stream_config_t config,
                                    troupe_backend_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "backend_open: NULL output");
    *out = NULL;
    if (!name)
        name = troupe_config_backend();
    const troupe_driver_vtable_t *vt = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_driver_lookup(name, &vt));
    troupe_status_t st = TROUPE_OK;
    troupe_backend_t *b = troupe_calloc(1, sizeof *b);
    if (!b)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "backend_open %s: out of memory", name);
    troupe_refcount_init(&b->refs);
    b->vt = vt;
    b->config = config;
    b->inline_mode = strcmp(vt->name, "sync") == 0;
    st = vt->open(&b->drv);
    if (st != TROUPE_OK)
        goto out_free;
    b->dref = troupe_calloc(1, sizeof *b->dref);
    if (!b->dref) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "backend_open %s: out of memory", name);
        goto out_close;
    }
    troupe_refcount_init(&b->dref->refs);
    b->dref->vt = vt;
    b->dref->drv = b->drv;
    b->ndevices = vt->num_devices ? vt->num_devices(b->drv) : 0;
    if (b->ndevices < 0)
        b->ndevices = 0;
    if (b->ndevices > 0) {
        b->devices = troupe_calloc((size_t)b->ndevices, sizeof *b->devices);
        if (!b->devices) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "backend_open %s: out of memory", name);
            goto out_close;
        }
    }
    for (int i = 0; i < b->ndevices; i++) {
        troupe_device_t *d = &b->devices[i];
        d->backend = b;
        d->ordinal = i;
        d->device_id = (int32_t)atomic_fetch_add(&s_next_device_id, 1);
        d->next_pool_id = 1;
        pthread_mutex_init(&d->lock, NULL);
    }
    *out = b;
    return TROUPE_OK;
out_close:
    troupe_free(b->dref);
    vt->close(b->drv);
out_free:
    troupe_free(b);
    return st;
}

void troupe_backend_retain(troupe_backend_t *b)
{
    if (b)
        troupe_refcount_retain(&b->refs);
}

static void s_device_teardown(troupe_backend_t *b, troupe_device_t *d)
{
    /* Let queued work finish before its memory goes. */
    for (size_t i = 0; i < d->nstreams; i++) {
        troupe_status_t st = troupe_stream_await(d->streams[i]->stream, troupe_config_timeout_ns());
        if (st != TROUPE_OK)
            TROUPE_LOG(st == TROUPE_DEADLINE_EXCEEDED ? TROUPE_LOG_WARN : TROUPE_LOG_DEBUG, TROUPE_SUB_ACTORS, "backend teardown: stream %s: %s",
                       troupe_stream_name(d->streams[i]->stream), troupe_status_str(st));
    }
    troupe__host_purge_device(d);
    for (size_t i = 0; i < d->nstreams; i++) {
        troupe__srec_t *s = d->streams[i];
        s_reg_remove(s);
        troupe_stream_release(&s->stream);
        if (s->mb_capacity > 0 && b->vt->free_pool)
            (void)b->vt->free_pool(b->drv, d->ordinal, s->merge_pool_id);
        troupe_tnode_release(&s->sched_merge_node);
        troupe_free(s);
    }
    troupe_free(d->streams);
    troupe__ledger_clear(d);
    for (size_t i = 0; i < d->npools; i++)
        if (b->vt->free_pool)
            (void)b->vt->free_pool(b->drv, d->ordinal, d->pools[i].pool_id);
    troupe_free(d->pools);
    for (size_t i = 0; i < d->nshared; i++)
        troupe_tnode_release(&d->shared[i].tn);
    troupe_free(d->shared);
    pthread_mutex_destroy(&d->lock);
}

void troupe_backend_close(troupe_backend_t **b_p)
{
    if (!b_p || !*b_p)
        return;
    troupe_backend_t *b = *b_p;
    *b_p = NULL;
    if (!troupe_refcount_release(&b->refs))
        return;
    for (int i = 0; i < b->ndevices; i++)
        s_device_teardown(b, &b->devices[i]);
    troupe_free(b->devices);
    troupe__dref_release(&b->dref);
    troupe_free(b);
}

void troupe__dref_release(troupe__dref_t **d_p)
{
    troupe__dref_t *d = *d_p;
    *d_p = NULL;
    if (d && troupe_refcount_release(&d->refs)) {
        d->vt->close(d->drv);
        troupe_free(d);
    }
}

const char *troupe_backend_name(const troupe_backend_t *b)
{
    return b ? b->vt->name : "nil";
}

troupe_status_t troupe_num_devices(troupe_backend_t *b, int *out_count)
{
    if (!b || !out_count)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "num_devices: NULL argument");
    *out_count = b->ndevices;
    return TROUPE_OK;
}

troupe_status_t troupe_get_device(troupe_backend_t *b, int ordinal, troupe_device_t **out)
{
    if (!b || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "get_device: NULL argument");
    *out = NULL;
    if (ordinal < 0 || ordinal >= b->ndevices)
        return troupe__error(TROUPE_NOT_FOUND, "get_device: backend %s has no device %d (it has %d)",
                             b->vt->name, ordinal, b->ndevices);
    *out = &b->devices[ordinal];
    return TROUPE_OK;
}

int troupe_device_ordinal(const troupe_device_t *d)
{
    return d ? d->ordinal : -1;
}

int32_t troupe_device_id(const troupe_device_t *d)
{
    return d ? d->device_id : -1;
}

troupe_status_t troupe_suggested_num_streams(troupe_device_t *d, int *out_count)
{
    if (!d || !out_count)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "suggested_num_streams: NULL argument");
    troupe_backend_t *b = d->backend;
    int n = b->vt->suggested_num_streams ? b->vt->suggested_num_streams(b->drv, d->ordinal, b->config)
                                         : 1;
    *out_count = n < 1 ? 1 : n;
    return TROUPE_OK;
}

troupe_status_t troupe_new_stream(troupe_device_t *d, troupe_stream_t **out)
{
    if (!d || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "new_stream: NULL argument");
    *out = NULL;
    troupe_backend_t *b = d->backend;
    troupe_status_t st = TROUPE_OK;
    troupe__srec_t *s = troupe_calloc(1, sizeof *s);
    if (!s)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "new_stream: out of memory");
    pthread_mutex_lock(&d->lock);
    if (d->nstreams == d->streams_cap) {
        size_t cap = d->streams_cap ? d->streams_cap * 2 : 8;
        troupe__srec_t **v = troupe_realloc(d->streams, cap * sizeof *v);
        if (!v) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "new_stream: out of memory");
            goto out_unlock;
        }
        d->streams = v;
        d->streams_cap = cap;
    }
    s->dev = d;
    s->stream_id = (int)d->nstreams;
    s->merge_pool_id = d->next_pool_id++;
    st = troupe_stream_new(b->vt, b->drv, d->ordinal, s->stream_id, b->inline_mode, &s->stream);
    if (st != TROUPE_OK)
        goto out_unlock;
    if (!s_reg_add(s)) {
        troupe_stream_release(&s->stream);
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "new_stream: out of memory");
        goto out_unlock;
    }
    d->streams[d->nstreams++] = s;
    troupe_stream_retain(s->stream);
    *out = s->stream;
    s = NULL;
out_unlock:
    pthread_mutex_unlock(&d->lock);
    troupe_free(s);
    return st;
}

troupe__srec_t *troupe__srec_of(troupe_device_t *dev, troupe_stream_t *s)
{
    for (size_t i = 0; i < dev->nstreams; i++)
        if (dev->streams[i]->stream == s)
            return dev->streams[i];
    return NULL;
}

troupe_status_t troupe__pool_alloc(troupe_device_t *dev, int64_t size_bytes, int32_t *out_pool_id)
{
    troupe_backend_t *b = dev->backend;
    if (!b->vt->alloc_pool)
        return troupe__error(TROUPE_UNIMPLEMENTED, "backend %s lacks alloc_pool", b->vt->name);
    if (dev->npools == dev->pools_cap) {
        size_t cap = dev->pools_cap ? dev->pools_cap * 2 : 16;
        troupe__pool_t *v = troupe_realloc(dev->pools, cap * sizeof *v);
        if (!v)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "pool table: out of memory");
        dev->pools = v;
        dev->pools_cap = cap;
    }
    int32_t id = dev->next_pool_id++;
    TROUPE_RETURN_IF_ERROR(b->vt->alloc_pool(b->drv, dev->ordinal, id, size_bytes, true));
    dev->pools[dev->npools++] = (troupe__pool_t){id, size_bytes};
    dev->used_bytes += size_bytes;
    *out_pool_id = id;
    return TROUPE_OK;
}

void troupe__pool_free(troupe_device_t *dev, int32_t pool_id)
{
    troupe_backend_t *b = dev->backend;
    for (size_t i = 0; i < dev->npools; i++) {
        if (dev->pools[i].pool_id != pool_id)
            continue;
        if (b->vt->free_pool)
            (void)b->vt->free_pool(b->drv, dev->ordinal, pool_id);
        dev->used_bytes -= dev->pools[i].size_bytes;
        dev->pools[i] = dev->pools[--dev->npools];
        troupe__ledger_remove_pool(dev, pool_id);
        return;
    }
}

troupe_status_t troupe_get_used_memory(troupe_device_t *d, int64_t *out_bytes)
{
    if (!d || !out_bytes)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "get_used_memory: NULL argument");
    pthread_mutex_lock(&d->lock);
    int64_t n = d->used_bytes;
    for (size_t i = 0; i < d->nstreams; i++)
        n += d->streams[i]->sched_merge_capacity;
    pthread_mutex_unlock(&d->lock);
    *out_bytes = n;
    return TROUPE_OK;
}

static troupe_status_t s_stream_sexp(troupe_backend_t *b, troupe__srec_t *s, char **buf,
                                     size_t *len, size_t *cap)
{
    char *inner = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_stream_debug_info(s->stream, &inner));
    char mname[64] = "nil";
    if (s->sched_merge_node)
        troupe_tnode_debug_name(s->sched_merge_node, mname, sizeof mname);
    troupe_status_t st = troupe__sappend(
        buf, len, cap,
        "(troupe_stream (backend %s) (device %d) (stream_id %d) (merge_buffer (node %s) (mode %s) "
        "(capacity %lld)) %s)",
        b->vt->name, s->dev->ordinal, s->stream_id, mname,
        s->sched_merge_node ? (s->sched_merge_streaming ? "streaming" : "copy") : "nil",
        (long long)s->sched_merge_capacity, inner);
    troupe_free(inner);
    return st;
}

troupe_status_t troupe_debug_info(troupe_backend_t *b, troupe_stream_t *stream, char **out)
{
    if (!b || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "debug_info: NULL argument");
    *out = NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    troupe_status_t st = TROUPE_OK;
    if (stream) {
        for (int i = 0; i < b->ndevices; i++) {
            troupe_device_t *d = &b->devices[i];
            pthread_mutex_lock(&d->lock);
            troupe__srec_t *s = troupe__srec_of(d, stream);
            if (s)
                st = s_stream_sexp(b, s, &buf, &len, &cap);
            pthread_mutex_unlock(&d->lock);
            if (s)
                goto out_done;
        }
        return troupe__error(TROUPE_NOT_FOUND, "debug_info: stream %s is not a stream of backend %s",
                             troupe_stream_name(stream), b->vt->name);
    }
    st = troupe__sappend(&buf, &len, &cap, "(backend (name %s) (devices (", b->vt->name);
    for (int i = 0; st == TROUPE_OK && i < b->ndevices; i++) {
        troupe_device_t *d = &b->devices[i];
        pthread_mutex_lock(&d->lock);
        int64_t used = d->used_bytes;
        for (size_t k = 0; k < d->nstreams; k++)
            used += d->streams[k]->sched_merge_capacity;
        st = troupe__sappend(&buf, &len, &cap,
                             "%s(device (ordinal %d) (id %d) (used_memory %lld) (streams (",
                             i ? " " : "", d->ordinal, (int)d->device_id, (long long)used);
        for (size_t k = 0; st == TROUPE_OK && k < d->nstreams; k++) {
            if (k)
                st = troupe__sappend(&buf, &len, &cap, " ");
            if (st == TROUPE_OK)
                st = s_stream_sexp(b, d->streams[k], &buf, &len, &cap);
        }
        if (st == TROUPE_OK)
            st = troupe__sappend(&buf, &len, &cap, ")) ");
        if (st == TROUPE_OK)
            st = troupe__ledger_sexp(d, &buf, &len, &cap);
        if (st == TROUPE_OK)
            st = troupe__sappend(&buf, &len, &cap, ")");
        pthread_mutex_unlock(&d->lock);
    }
    if (st == TROUPE_OK)
        st = troupe__sappend(&buf, &len, &cap, ")))");
out_done:
    if (st != TROUPE_OK) {
        troupe_free(buf);
        return st;
    }
    *out = buf;
    return TROUPE_OK;
}
