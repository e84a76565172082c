/* troupe — backends: opening, teardown and debug info (see backend.h). */
#include "actors/backend.h"

#include "actors/async_impl.h"
#include "actors/host_impl.h"
#include "actors/merge_impl.h"
#include "actors/runtime_impl.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/fault_impl.h"
#include "base/trace_impl.h"
#include "base/log.h"
#include "base/status.h"
#include "base/strbuf.h"

#include <string.h>

/* The environment variables this layer reads (base/config.h registry; docs/configuration.md). */
static const troupe_config_var_t s_env_vars[] = {
    {"TROUPE_AUTO_HOST_TRANSFERS", "actors", "0|1", "1", "0|1",
     "troupe_config_set_auto_host_transfers", "automatic host to device transfers of hosted nodes"},
};
TROUPE_CONFIG_VARS(actors, s_env_vars)

troupe_status_t troupe_backend_open(const char *name, troupe_stream_config_t config,
                                    troupe_backend_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "backend_open: NULL output");
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__fault_check()); /* a malformed TROUPE_FAULT: refuse to start */
    TROUPE_RETURN_IF_ERROR(troupe__trace_check()); /* timelines that could not be written */
    if (!name)
        name = troupe_config_backend();
    const troupe_driver_vtable_t *vt = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_driver_lookup(name, &vt));
    troupe_status_t st = TROUPE_OK;
    troupe_backend_t *b = troupe_calloc(1, sizeof *b);
    if (!b)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "backend_open %s: out of memory", name);
    troupe_refcount_init(&b->refs);
    b->config = config;
    b->inline_mode = strcmp(vt->name, "sync") == 0;
    st = troupe_driver_open(vt, &b->drv);
    if (st != TROUPE_OK)
        goto out_free_backend;
    b->dref = troupe_calloc(1, sizeof *b->dref);
    if (!b->dref) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "backend_open %s: out of memory", name);
        goto out_close_driver;
    }
    troupe_refcount_init(&b->dref->refs);
    b->dref->drv = b->drv;
    b->ndevices = troupe_driver_num_devices(b->drv);
    if (b->ndevices > 0) {
        b->devices = troupe_calloc((size_t)b->ndevices, sizeof *b->devices);
        if (!b->devices) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "backend_open %s: out of memory", name);
            goto out_close_driver;
        }
    }
    for (int i = 0; i < b->ndevices; i++)
        troupe__device_init(&b->devices[i], b, i);
    *out = b;
    return TROUPE_OK;
out_close_driver:
    troupe_free(b->dref);
    troupe_driver_close(b->drv);
out_free_backend:
    troupe_free(b);
    return st;
}

void troupe_backend_retain(troupe_backend_t *b)
{
    if (b)
        troupe_refcount_retain(&b->refs);
}

static void s_device_teardown(troupe_device_t *d)
{
    /* Let queued work finish before its memory goes. */
    for (size_t i = 0; i < d->nstreams; i++) {
        troupe_status_t st = troupe_stream_await(d->streams[i]->stream, troupe_config_timeout_ns());
        if (st != TROUPE_OK)
            TROUPE_LOG(st == TROUPE_DEADLINE_EXCEEDED &&
                               troupe_stream_status(d->streams[i]->stream) == TROUPE_OK
                           ? TROUPE_LOG_WARN
                           : TROUPE_LOG_DEBUG,
                       TROUPE_SUB_ACTORS, "backend teardown: stream %s: %s",
                       troupe_stream_name(d->streams[i]->stream), troupe_status_str(st));
    }
    troupe__host_array_purge_device(d);
    troupe__srec_unregister_all(d);
    for (size_t i = 0; i < d->nstreams; i++) {
        troupe__srec_t *s = d->streams[i];
        troupe_stream_release(&s->stream);
        troupe__merge_buffer_release(&s->merge, d->backend->drv, d->ordinal);
        troupe_free(s);
    }
    troupe_free(d->streams);
    troupe__ledger_clear(&d->ledger);
    troupe__pool_free_all(d);
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
        s_device_teardown(&b->devices[i]);
    troupe_free(b->devices);
    troupe__dref_release(&b->dref);
    troupe_free(b);
}

void troupe__dref_release(troupe__dref_t **d_p)
{
    troupe__dref_t *d = *d_p;
    *d_p = NULL;
    if (d && troupe_refcount_release(&d->refs)) {
        troupe__async_driver_closing(d->drv);
        troupe_driver_close(d->drv);
        troupe_free(d);
    }
}

const char *troupe_backend_name(const troupe_backend_t *b)
{
    return b ? troupe_driver_name(b->drv) : "nil";
}

troupe_status_t troupe_num_devices(troupe_backend_t *b, int *out_count)
{
    if (!b || !out_count)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "num_devices: NULL argument");
    *out_count = b->ndevices;
    return TROUPE_OK;
}

bool troupe_backend_host_addressable(const troupe_backend_t *b)
{
    return b != NULL && troupe_driver_require(b->drv, "host_ptr") == TROUPE_OK;
}

bool troupe_backend_threaded(const troupe_backend_t *b)
{
    return b != NULL && !b->inline_mode;
}

bool troupe_backend_has_graphs(const char *name)
{
    const troupe_driver_vtable_t *vt = NULL;
    if (troupe_driver_lookup(name ? name : troupe_config_backend(), &vt) != TROUPE_OK) {
        troupe_clear_error(); /* a question, not a failure */
        return false;
    }
    return vt->graph_capture != NULL && vt->graph_launch != NULL && vt->graph_release != NULL;
}

troupe_status_t troupe_get_device(troupe_backend_t *b, int ordinal, troupe_device_t **out)
{
    if (!b || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "get_device: NULL argument");
    *out = NULL;
    if (ordinal < 0 || ordinal >= b->ndevices)
        return troupe__error(TROUPE_NOT_FOUND,
                             "get_device: backend %s has no device %d (it has %d)",
                             troupe_driver_name(b->drv), ordinal, b->ndevices);
    *out = &b->devices[ordinal];
    return TROUPE_OK;
}

/* ---- debug info ----------------------------------------------------------------------------- */

/* Device lock held. */
static troupe_status_t s_stream_sexp(troupe_backend_t *b, troupe__srec_t *s, troupe__strbuf_t *sb)
{
    char *inner = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_stream_debug_info(s->stream, &inner));
    troupe__strbuf_printf(sb, "(troupe_stream (backend %s) (device %d) (stream_id %d) ",
                          troupe_backend_name(b), s->dev->ordinal, s->stream_id);
    troupe__merge_buffer_sexp(&s->merge, sb);
    troupe__strbuf_printf(sb, " %s)", inner);
    troupe_free(inner);
    return TROUPE_OK;
}

/* Device lock held. */
static troupe_status_t s_device_sexp(troupe_backend_t *b, troupe_device_t *d, troupe__strbuf_t *sb)
{
    int64_t used = d->used_bytes;
    for (size_t k = 0; k < d->nstreams; k++)
        used += d->streams[k]->merge.sched_capacity;
    troupe__strbuf_printf(sb, "(device (ordinal %d) (id %d) (used_memory %lld) (streams (",
                          d->ordinal, (int)d->device_id, (long long)used);
    for (size_t k = 0; k < d->nstreams; k++) {
        if (k)
            troupe__strbuf_putc(sb, ' ');
        TROUPE_RETURN_IF_ERROR(s_stream_sexp(b, d->streams[k], sb));
    }
    troupe__strbuf_puts(sb, ")) ");
    troupe__ledger_sexp(&d->ledger, sb);
    troupe__strbuf_putc(sb, ')');
    return TROUPE_OK;
}

troupe_status_t troupe_debug_info(troupe_backend_t *b, troupe_stream_t *stream, char **out)
{
    if (!b || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "debug_info: NULL argument");
    *out = NULL;
    troupe__strbuf_t sb = TROUPE__STRBUF_INIT;
    troupe_status_t st = TROUPE_OK;
    if (stream) {
        troupe__srec_t *s = NULL;
        for (int i = 0; !s && i < b->ndevices; i++) {
            troupe_device_t *d = &b->devices[i];
            pthread_mutex_lock(&d->lock);
            s = troupe__srec_of(d, stream);
            if (s)
                st = s_stream_sexp(b, s, &sb);
            pthread_mutex_unlock(&d->lock);
        }
        if (!s)
            return troupe__error(TROUPE_NOT_FOUND,
                                 "debug_info: stream %s is not a stream of backend %s",
                                 troupe_stream_name(stream), troupe_backend_name(b));
    } else {
        troupe__strbuf_printf(&sb, "(backend (name %s) (devices (", troupe_backend_name(b));
        for (int i = 0; st == TROUPE_OK && i < b->ndevices; i++) {
            troupe_device_t *d = &b->devices[i];
            if (i)
                troupe__strbuf_putc(&sb, ' ');
            pthread_mutex_lock(&d->lock);
            st = s_device_sexp(b, d, &sb);
            pthread_mutex_unlock(&d->lock);
        }
        troupe__strbuf_puts(&sb, ")))");
    }
    if (st != TROUPE_OK) {
        troupe__strbuf_reset(&sb);
        return st;
    }
    return troupe__strbuf_finish(&sb, "debug_info", out, NULL);
}
