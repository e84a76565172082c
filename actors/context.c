/* troupe — contexts (see context.h). */
#include "actors/context.h"

#include "actors/runtime_impl.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

static troupe_status_t s_new(troupe_backend_t *b, troupe_device_t *dev, troupe__srec_t *srec,
                             troupe_context_t *parent, size_t cap, troupe_context_t **out)
{
    troupe_context_t *c = troupe_calloc(1, sizeof *c);
    if (!c)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "context: out of memory");
    if (cap) {
        c->arrays = troupe_calloc(cap, sizeof *c->arrays);
        if (!c->arrays) {
            troupe_free(c);
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "context: out of memory");
        }
    }
    troupe_refcount_init(&c->refs);
    troupe_backend_retain(b);
    c->backend = b;
    c->dev = dev;
    c->srec = srec;
    troupe_stream_retain(srec->stream);
    if (parent)
        troupe_context_retain(parent);
    c->parent = parent;
    c->owned_pool_id = -1;
    c->remote_rank = -1;
    atomic_init(&c->finalized, false);
    *out = c;
    return TROUPE_OK;
}

troupe_status_t troupe_context_new(troupe_stream_t *stream, troupe_context_t **out)
{
    if (!stream || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "context_new: NULL argument");
    *out = NULL;
    troupe__srec_t *srec = troupe__srec_lookup_global(stream);
    if (!srec)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "context_new: stream %s was not created by troupe_new_stream",
                             troupe_stream_name(stream));
    return s_new(srec->dev->backend, srec->dev, srec, NULL, 0, out);
}

troupe_status_t troupe__context_check_local(const troupe_context_t *ctx, const char *op)
{
    if (ctx && ctx->remote_rank >= 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s: the context stands for rank %d (a remote context only serves "
                             "device_to_device)",
                             op, ctx->remote_rank);
    return TROUPE_OK;
}

const troupe__carray_t *troupe__context_find(const troupe_context_t *ctx, const troupe_tnode_t *tn)
{
    size_t lo = 0, hi = ctx->narrays;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int32_t id = ctx->arrays[mid].tn->id;
        if (id == tn->id)
            return &ctx->arrays[mid];
        if (id < tn->id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

troupe_status_t troupe__context_lacks(const troupe_context_t *ctx, const troupe_tnode_t *tn,
                                      const char *op)
{
    char name[64];
    troupe_tnode_debug_name(tn, name, sizeof name);
    return troupe__error(TROUPE_NOT_FOUND, "%s%sthe context on %s lacks node %s", op ? op : "",
                         op ? ": " : "", troupe_stream_name(ctx->srec->stream), name);
}

static int s_cmp_carray(const void *a, const void *b)
{
    int32_t x = ((const troupe__carray_t *)a)->tn->id, y = ((const troupe__carray_t *)b)->tn->id;
    return (x > y) - (x < y);
}

troupe_status_t troupe__context_derive(troupe_context_t *parent, const troupe__carray_t *extra,
                                       size_t nextra, int32_t owned_pool_id,
                                       troupe_tnode_t *merge_node, troupe_context_t **out)
{
    troupe_context_t *c = NULL;
    TROUPE_RETURN_IF_ERROR(
        s_new(parent->backend, parent->dev, parent->srec, parent, parent->narrays + nextra, &c));
    for (size_t i = 0; i < parent->narrays; i++) {
        c->arrays[c->narrays] = parent->arrays[i];
        troupe_tnode_retain(parent->arrays[i].tn);
        c->narrays++;
    }
    for (size_t i = 0; i < nextra; i++) {
        c->arrays[c->narrays] = extra[i];
        troupe_tnode_retain(extra[i].tn);
        c->narrays++;
    }
    if (nextra)
        qsort(c->arrays, c->narrays, sizeof *c->arrays, s_cmp_carray);
    c->owned_pool_id = owned_pool_id;
    if (merge_node) {
        troupe_tnode_retain(merge_node);
        c->merge_node = merge_node;
    }
    *out = c;
    return TROUPE_OK;
}

troupe_status_t troupe_context_child(troupe_context_t *ctx, troupe_context_t **out)
{
    if (!ctx || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "context_child: NULL argument");
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__context_check_local(ctx, "context_child"));
    return troupe__context_derive(ctx, NULL, 0, -1, NULL, out);
}

void troupe_context_retain(troupe_context_t *ctx)
{
    if (ctx)
        troupe_refcount_retain(&ctx->refs);
}

void troupe_context_release(troupe_context_t **ctx_p)
{
    if (!ctx_p || !*ctx_p)
        return;
    troupe_context_t *c = *ctx_p;
    *ctx_p = NULL;
    while (c && troupe_refcount_release(&c->refs)) {
        troupe_context_t *parent = c->parent;
        for (size_t i = 0; i < c->narrays; i++)
            troupe_tnode_release(&c->arrays[i].tn);
        troupe_free(c->arrays);
        troupe_tnode_release(&c->merge_node);
        troupe_stream_t *stream = c->srec ? c->srec->stream : NULL;
        troupe_stream_release(&stream);
        troupe_backend_t *b = c->backend;
        troupe_free(c);
        troupe_backend_close(&b);
        c = parent; /* the reference c held on its parent */
    }
}

troupe_status_t troupe_context_finalize(troupe_context_t *ctx)
{
    if (!ctx)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "context_finalize: NULL context");
    if (ctx->remote_rank >= 0)
        return TROUPE_OK; /* holds nothing */
    bool expected = false;
    if (!atomic_compare_exchange_strong(&ctx->finalized, &expected, true))
        return TROUPE_OK;
    troupe_status_t st = troupe_stream_await(ctx->srec->stream, troupe_config_timeout_ns());
    if (st != TROUPE_OK)
        goto out_unmark;
    if (ctx->owned_pool_id < 0)
        return TROUPE_OK;
    troupe_device_t *dev = ctx->dev;
    /* Other streams may still read (d2d sources, merge readers) or write (d2d into) the
     * arrays: wait for them before the memory goes. */
    for (;;) {
        troupe_event_t **evs = NULL;
        size_t nev = 0;
        pthread_mutex_lock(&dev->lock);
        for (size_t i = 0; i < dev->ledger.nentries && st == TROUPE_OK; i++) {
            troupe__entry_t *e = dev->ledger.entries[i];
            if (e->key.pool_id != ctx->owned_pool_id)
                continue;
            st = troupe__ledger_pending(e, &evs, &nev);
            if (nev)
                break;
        }
        if (st == TROUPE_OK && nev == 0) {
            troupe__pool_free(dev, ctx->owned_pool_id);
            pthread_mutex_unlock(&dev->lock);
            return TROUPE_OK;
        }
        pthread_mutex_unlock(&dev->lock);
        for (size_t i = 0; i < nev; i++) {
            if (st == TROUPE_OK)
                st = troupe_event_sync(evs[i], troupe_config_timeout_ns());
            troupe_event_release(&evs[i]);
        }
        troupe_free(evs);
        if (st != TROUPE_OK)
            goto out_unmark;
    }
out_unmark:
    atomic_store(&ctx->finalized, false);
    return st;
}

troupe_stream_t *troupe_context_stream(const troupe_context_t *ctx)
{
    return ctx && ctx->srec ? ctx->srec->stream : NULL;
}

troupe_context_t *troupe_context_parent(const troupe_context_t *ctx)
{
    return ctx ? ctx->parent : NULL;
}

bool troupe_context_has_node(const troupe_context_t *ctx, const troupe_tnode_t *tn)
{
    return ctx && tn && troupe__context_find(ctx, tn) != NULL;
}

troupe_status_t troupe_context_buffer(const troupe_context_t *ctx, const troupe_tnode_t *tn,
                                      troupe_buffer_loc_t *out)
{
    if (!ctx || !tn || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "context_buffer: NULL argument");
    TROUPE_RETURN_IF_ERROR(troupe__context_check_local(ctx, "context_buffer"));
    const troupe__carray_t *a = troupe__context_find(ctx, tn);
    if (!a)
        return troupe__context_lacks(ctx, tn, NULL);
    *out = a->loc;
    return TROUPE_OK;
}

troupe_tnode_t *troupe_context_merge_buffer_node(const troupe_context_t *ctx)
{
    return ctx ? ctx->merge_node : NULL;
}

troupe_status_t troupe_will_wait_for(troupe_context_t *ctx, troupe_event_t *ev)
{
    if (!ctx || !ev)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "will_wait_for: NULL argument");
    TROUPE_RETURN_IF_ERROR(troupe__context_check_local(ctx, "will_wait_for"));
    return troupe_stream_wait_for(ctx->srec->stream, ev);
}
