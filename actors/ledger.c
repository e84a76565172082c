/* troupe — the coherence ledger (see ledger.h for the rules). */
#include "actors/ledger.h"

#include "base/alloc.h"
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define S_TICK_EVERY 64

troupe_status_t troupe__sappend(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = *cap - *len;
        va_start(ap, fmt);
        int w = vsnprintf(*buf ? *buf + *len : NULL, *buf ? room : 0, fmt, ap);
        va_end(ap);
        if (w < 0)
            return troupe__error(TROUPE_INTERNAL, "debug info: formatting failed");
        if (*buf && (size_t)w < room) {
            *len += (size_t)w;
            return TROUPE_OK;
        }
        size_t ncap = (*cap ? *cap * 2 : 256) + (size_t)w + 1;
        char *nb = troupe_realloc(*buf, ncap);
        if (!nb)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "debug info: out of memory");
        if (!*buf)
            nb[0] = '\0';
        *buf = nb;
        *cap = ncap;
    }
}

static bool s_key_eq(troupe__akey_t a, troupe__akey_t b)
{
    return a.pool_id == b.pool_id && a.offset == b.offset;
}

troupe__entry_t *troupe__ledger_find(troupe_device_t *dev, troupe__akey_t key)
{
    for (size_t i = 0; i < dev->nentries; i++)
        if (s_key_eq(dev->entries[i]->key, key))
            return dev->entries[i];
    return NULL;
}

troupe_status_t troupe__ledger_add(troupe_device_t *dev, troupe_tnode_t *tn,
                                   troupe_buffer_loc_t loc, bool shared, troupe__entry_t **out)
{
    troupe__akey_t key = troupe__key_of(loc);
    troupe__entry_t *e = troupe__ledger_find(dev, key);
    if (e) {
        *out = e;
        return TROUPE_OK;
    }
    if (dev->nentries == dev->entries_cap) {
        size_t cap = dev->entries_cap ? dev->entries_cap * 2 : 32;
        troupe__entry_t **v = troupe_realloc(dev->entries, cap * sizeof *v);
        if (!v)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "ledger: out of memory");
        dev->entries = v;
        dev->entries_cap = cap;
    }
    e = troupe_calloc(1, sizeof *e);
    if (!e)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "ledger: out of memory");
    e->node_id = tn->id;
    troupe_tnode_debug_name(tn, e->node_name, sizeof e->node_name);
    e->key = key;
    e->size_bytes = loc.size_bytes;
    e->shared = shared;
    e->host_gen = -1;
    dev->entries[dev->nentries++] = e;
    *out = e;
    return TROUPE_OK;
}

static void s_entry_free(troupe__entry_t *e)
{
    troupe_event_release(&e->writer_ev);
    for (size_t i = 0; i < e->nreaders; i++)
        troupe_event_release(&e->readers[i].ev);
    troupe_free(e->readers);
    troupe_free(e);
}

void troupe__ledger_remove_pool(troupe_device_t *dev, int32_t pool_id)
{
    size_t k = 0;
    for (size_t i = 0; i < dev->nentries; i++) {
        if (dev->entries[i]->key.pool_id == pool_id)
            s_entry_free(dev->entries[i]);
        else
            dev->entries[k++] = dev->entries[i];
    }
    dev->nentries = k;
}

void troupe__ledger_clear(troupe_device_t *dev)
{
    for (size_t i = 0; i < dev->nentries; i++)
        s_entry_free(dev->entries[i]);
    troupe_free(dev->entries);
    dev->entries = NULL;
    dev->nentries = dev->entries_cap = 0;
}

void troupe__ledger_prune(troupe__entry_t *e)
{
    /* A done writer is forgotten; a failed one is kept so that its failure reaches readers. */
    if (e->writer_ev && troupe__event_state_quiet(e->writer_ev) == TROUPE_EVENT_DONE) {
        troupe_event_release(&e->writer_ev);
        e->writer_s = NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < e->nreaders; i++) {
        if (troupe__event_state_quiet(e->readers[i].ev) != TROUPE_EVENT_PENDING)
            troupe_event_release(&e->readers[i].ev);
        else
            e->readers[k++] = e->readers[i];
    }
    e->nreaders = k;
}

void troupe__ledger_tick(troupe_device_t *dev)
{
    if (++dev->ops % S_TICK_EVERY != 0)
        return;
    for (size_t i = 0; i < dev->nentries; i++)
        troupe__ledger_prune(dev->entries[i]);
}

troupe_status_t troupe__ledger_before_read(troupe__srec_t *s, troupe__entry_t *e)
{
    troupe__ledger_prune(e);
    if (e->writer_ev && e->writer_s != s)
        return troupe_stream_wait_for(s->stream, e->writer_ev);
    return TROUPE_OK;
}

troupe_status_t troupe__ledger_before_write(troupe__srec_t *s, troupe__entry_t *e)
{
    troupe__ledger_prune(e);
    for (size_t i = 0; i < e->nreaders; i++)
        if (e->readers[i].s != s)
            TROUPE_RETURN_IF_ERROR(troupe_stream_wait_for(s->stream, e->readers[i].ev));
    if (e->writer_ev && e->writer_s != s)
        return troupe_stream_wait_for(s->stream, e->writer_ev);
    return TROUPE_OK;
}

troupe_status_t troupe__ledger_note_read(troupe__entry_t *e, troupe__srec_t *s, troupe_event_t *ev)
{
    for (size_t i = 0; i < e->nreaders; i++) {
        if (e->readers[i].s == s) {
            troupe_event_release(&e->readers[i].ev);
            troupe_event_retain(ev);
            e->readers[i].ev = ev;
            return TROUPE_OK;
        }
    }
    if (e->nreaders == e->readers_cap) {
        size_t cap = e->readers_cap ? e->readers_cap * 2 : 4;
        troupe__reader_t *v = troupe_realloc(e->readers, cap * sizeof *v);
        if (!v)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "ledger: out of memory");
        e->readers = v;
        e->readers_cap = cap;
    }
    troupe_event_retain(ev);
    e->readers[e->nreaders++] = (troupe__reader_t){s, ev};
    return TROUPE_OK;
}

void troupe__ledger_note_write(troupe__entry_t *e, troupe__srec_t *s, troupe_event_t *ev)
{
    troupe_event_release(&e->writer_ev);
    troupe_event_retain(ev);
    e->writer_ev = ev;
    e->writer_s = s;
    for (size_t i = 0; i < e->nreaders; i++)
        troupe_event_release(&e->readers[i].ev);
    e->nreaders = 0;
}

troupe_status_t troupe__ledger_pending(troupe__entry_t *e, troupe_event_t ***out, size_t *n)
{
    troupe__ledger_prune(e);
    *out = NULL;
    *n = 0;
    size_t total = e->nreaders + (e->writer_ev ? 1 : 0);
    if (total == 0)
        return TROUPE_OK;
    troupe_event_t **v = troupe_calloc(total, sizeof *v);
    if (!v)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "ledger: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < e->nreaders; i++) {
        troupe_event_retain(e->readers[i].ev);
        v[k++] = e->readers[i].ev;
    }
    if (e->writer_ev) {
        troupe_event_retain(e->writer_ev);
        v[k++] = e->writer_ev;
    }
    *out = v;
    *n = k;
    return TROUPE_OK;
}

static const char *s_sname(const troupe__srec_t *s)
{
    return s ? troupe_stream_name(s->stream) : "nil";
}

troupe_status_t troupe__ledger_sexp(troupe_device_t *dev, char **buf, size_t *len, size_t *cap)
{
    TROUPE_RETURN_IF_ERROR(troupe__sappend(buf, len, cap, "(ledger ("));
    for (size_t i = 0; i < dev->nentries; i++) {
        troupe__entry_t *e = dev->entries[i];
        troupe__ledger_prune(e);
        TROUPE_RETURN_IF_ERROR(troupe__sappend(
            buf, len, cap,
            "%s(array (node %s) (pool %d) (offset %lld) (size_bytes %lld) (shared %s) (owner "
            "\"%s\") (writer %s%s%s) (readers (",
            i ? " " : "", e->node_name, (int)e->key.pool_id, (long long)e->key.offset,
            (long long)e->size_bytes, e->shared ? "true" : "false", s_sname(e->owner),
            e->writer_ev ? "\"" : "", e->writer_ev ? troupe_event_name(e->writer_ev) : "nil",
            e->writer_ev ? "\"" : ""));
        for (size_t j = 0; j < e->nreaders; j++)
            TROUPE_RETURN_IF_ERROR(troupe__sappend(buf, len, cap, "%s\"%s\"", j ? " " : "",
                                                   troupe_event_name(e->readers[j].ev)));
        TROUPE_RETURN_IF_ERROR(troupe__sappend(buf, len, cap, ")))"));
    }
    return troupe__sappend(buf, len, cap, "))");
}
