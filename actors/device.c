/* troupe — devices: stream records, memory pools and shared arrays (see device.h and
 * runtime_impl.h). */
#include "actors/device.h"

#include "actors/runtime_impl.h"
#include "actors/stream_impl.h"
#include "base/alloc.h"
#include "base/status.h"
#include "base/vec.h"

#include <stdatomic.h>
#include <string.h>

static atomic_int_fast32_t s_next_device_id = 0;

/* Every live stream record (streams carry no user data, so contexts find theirs here). */
static pthread_mutex_t s_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static troupe__srec_t **s_reg;
static size_t s_nreg, s_reg_cap;

static bool s_reg_add(troupe__srec_t *s)
{
    pthread_mutex_lock(&s_reg_lock);
    bool ok = TROUPE__VEC_PUSH(s_reg, s_nreg, s_reg_cap, s);
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

void troupe__srec_unregister_all(troupe_device_t *dev)
{
    for (size_t i = 0; i < dev->nstreams; i++)
        s_reg_remove(dev->streams[i]);
}

troupe__srec_t *troupe__srec_of(troupe_device_t *dev, troupe_stream_t *s)
{
    for (size_t i = 0; i < dev->nstreams; i++)
        if (dev->streams[i]->stream == s)
            return dev->streams[i];
    return NULL;
}

void troupe__device_init(troupe_device_t *dev, troupe_backend_t *b, int ordinal)
{
    dev->backend = b;
    dev->ordinal = ordinal;
    dev->device_id = (int32_t)atomic_fetch_add(&s_next_device_id, 1);
    dev->next_pool_id = 1;
    pthread_mutex_init(&dev->lock, NULL);
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
    *out_count = troupe_driver_suggested_num_streams(b->drv, d->ordinal, b->config);
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
    if (!TROUPE__VEC_RESERVE(d->streams, d->streams_cap, d->nstreams + 1)) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "new_stream: out of memory");
        goto out_unlock;
    }
    s->dev = d;
    s->stream_id = (int)d->nstreams;
    troupe__merge_buffer_init(&s->merge, d->next_pool_id++);
    st = troupe__stream_actor_new(b->drv->vt, b->drv, d->ordinal, s->stream_id, b->inline_mode,
                                  &s->stream);
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

troupe_status_t troupe_get_used_memory(troupe_device_t *d, int64_t *out_bytes)
{
    if (!d || !out_bytes)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "get_used_memory: NULL argument");
    pthread_mutex_lock(&d->lock);
    int64_t n = d->used_bytes;
    for (size_t i = 0; i < d->nstreams; i++)
        n += d->streams[i]->merge.sched_capacity;
    pthread_mutex_unlock(&d->lock);
    *out_bytes = n;
    return TROUPE_OK;
}

/* ---- pools and shared arrays ---------------------------------------------------------------- */

troupe_status_t troupe__pool_alloc(troupe_device_t *dev, int64_t size_bytes, int32_t *out_pool_id)
{
    troupe_driver_t *drv = dev->backend->drv;
    TROUPE_RETURN_IF_ERROR(troupe_driver_require(drv, "alloc_pool"));
    if (!TROUPE__VEC_RESERVE(dev->pools, dev->pools_cap, dev->npools + 1))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "pool table: out of memory");
    int32_t id = dev->next_pool_id++;
    TROUPE_RETURN_IF_ERROR(troupe_driver_alloc_pool(drv, dev->ordinal, id, size_bytes, true));
    dev->pools[dev->npools++] = (troupe__pool_t){id, size_bytes};
    dev->used_bytes += size_bytes;
    *out_pool_id = id;
    return TROUPE_OK;
}

void troupe__pool_free(troupe_device_t *dev, int32_t pool_id)
{
    for (size_t i = 0; i < dev->npools; i++) {
        if (dev->pools[i].pool_id != pool_id)
            continue;
        (void)troupe_driver_free_pool(dev->backend->drv, dev->ordinal, pool_id);
        dev->used_bytes -= dev->pools[i].size_bytes;
        dev->pools[i] = dev->pools[--dev->npools];
        troupe__ledger_remove_pool(&dev->ledger, pool_id);
        return;
    }
}

void troupe__pool_free_all(troupe_device_t *dev)
{
    for (size_t i = 0; i < dev->npools; i++)
        (void)troupe_driver_free_pool(dev->backend->drv, dev->ordinal, dev->pools[i].pool_id);
    troupe_free(dev->pools);
    dev->pools = NULL;
    dev->npools = dev->pools_cap = 0;
    dev->used_bytes = 0;
    for (size_t i = 0; i < dev->nshared; i++)
        troupe_tnode_release(&dev->shared[i].tn);
    troupe_free(dev->shared);
    dev->shared = NULL;
    dev->nshared = dev->shared_cap = 0;
}

troupe_status_t troupe__shared_array(troupe_device_t *dev, troupe_tnode_t *tn,
                                     troupe_buffer_loc_t *out)
{
    for (size_t i = 0; i < dev->nshared; i++) {
        if (dev->shared[i].tn == tn) {
            *out = dev->shared[i].loc;
            return TROUPE_OK;
        }
    }
    if (!TROUPE__VEC_RESERVE(dev->shared, dev->shared_cap, dev->nshared + 1))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "shared array: out of memory");
    int32_t pool = -1;
    TROUPE_RETURN_IF_ERROR(troupe__pool_alloc(dev, (int64_t)tn->size_bytes, &pool));
    troupe_buffer_loc_t loc = {pool, 0, (int64_t)tn->size_bytes};
    troupe__entry_t *e = NULL;
    troupe_status_t st = troupe__ledger_add(&dev->ledger, tn, loc, true, &e);
    if (st != TROUPE_OK) {
        troupe__pool_free(dev, pool);
        return st;
    }
    troupe_tnode_retain(tn);
    dev->shared[dev->nshared++] = (troupe__shared_t){tn, loc};
    *out = loc;
    return TROUPE_OK;
}

troupe__entry_t *troupe__shared_entry(troupe_device_t *dev, const troupe_tnode_t *tn)
{
    for (size_t i = 0; i < dev->nshared; i++)
        if (dev->shared[i].tn == tn)
            return troupe__ledger_find(&dev->ledger, troupe__key_of(dev->shared[i].loc));
    return NULL;
}
