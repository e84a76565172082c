/* troupe — the coherence ledger (see ledger.h for the rules). */
#include "actors/ledger.h"

#include "actors/event_impl.h"
#include "base/alloc.h"
#include "base/status.h"
#include "base/vec.h"

#include <string.h>

#define S_TICK_EVERY 64

static bool s_key_eq(troupe__akey_t a, troupe__akey_t b)
{
    return a.pool_id == b.pool_id && a.offset == b.offset;
}

static size_t s_key_hash(troupe__akey_t k)
{
    /* splitmix64's finaliser over the two fields */
    uint64_t h = (uint64_t)k.offset * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uint32_t)k.pool_id;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return (size_t)h;
}

static void s_index_put(troupe__entry_t **index, size_t cap, troupe__entry_t *e)
{
    size_t i = s_key_hash(e->key) & (cap - 1);
    while (index[i])
        i = (i + 1) & (cap - 1);
    index[i] = e;
}

/* Rebuilds the index for at least `want` entries; on allocation failure drops it (finds scan). */
static void s_index_rebuild(troupe__ledger_t *l, size_t want)
{
    size_t cap = 16;
    while (cap < 2 * want)
        cap *= 2;
    troupe_free(l->index);
    l->index = troupe_calloc(cap, sizeof *l->index);
    l->index_cap = l->index ? cap : 0;
    for (size_t i = 0; l->index && i < l->nentries; i++)
        s_index_put(l->index, cap, l->entries[i]);
}

troupe__entry_t *troupe__ledger_find(troupe__ledger_t *l, troupe__akey_t key)
{
    if (!l->index) {
        for (size_t i = 0; i < l->nentries; i++)
            if (s_key_eq(l->entries[i]->key, key))
                return l->entries[i];
        return NULL;
    }
    for (size_t i = s_key_hash(key) & (l->index_cap - 1);; i = (i + 1) & (l->index_cap - 1)) {
        if (!l->index[i])
            return NULL;
        if (s_key_eq(l->index[i]->key, key))
            return l->index[i];
    }
}

troupe_status_t troupe__ledger_add(troupe__ledger_t *l, troupe_tnode_t *tn, troupe_buffer_loc_t loc,
                                   bool shared, troupe__entry_t **out)
{
    troupe__akey_t key = troupe__key_of(loc);
    troupe__entry_t *e = troupe__ledger_find(l, key);
    if (e) {
        *out = e;
        return TROUPE_OK;
    }
    if (!TROUPE__VEC_RESERVE(l->entries, l->entries_cap, l->nentries + 1))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "ledger: out of memory");
    e = troupe_calloc(1, sizeof *e);
    if (!e)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "ledger: out of memory");
    e->node_id = tn->id;
    troupe_tnode_debug_name(tn, e->node_name, sizeof e->node_name);
    e->key = key;
    e->size_bytes = loc.size_bytes;
    e->shared = shared;
    e->host_gen = -1;
    l->entries[l->nentries++] = e;
    if (2 * l->nentries > l->index_cap)
        s_index_rebuild(l, l->nentries);
    else
        s_index_put(l->index, l->index_cap, e);
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

void troupe__ledger_remove_pool(troupe__ledger_t *l, int32_t pool_id)
{
    size_t k = 0;
    for (size_t i = 0; i < l->nentries; i++) {
        if (l->entries[i]->key.pool_id == pool_id)
            s_entry_free(l->entries[i]);
        else
            l->entries[k++] = l->entries[i];
    }
    if (k != l->nentries) {
        l->nentries = k;
        s_index_rebuild(l, k);
    }
}

void troupe__ledger_clear(troupe__ledger_t *l)
{
    for (size_t i = 0; i < l->nentries; i++)
        s_entry_free(l->entries[i]);
    troupe_free(l->entries);
    troupe_free(l->index);
    l->entries = NULL;
    l->index = NULL;
    l->nentries = l->entries_cap = l->index_cap = 0;
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

void troupe__ledger_tick(troupe__ledger_t *l)
{
    if (++l->ops % S_TICK_EVERY != 0)
        return;
    for (size_t i = 0; i < l->nentries; i++)
        troupe__ledger_prune(l->entries[i]);
}

troupe_status_t troupe__ledger_before_read(troupe_stream_t *s, troupe__entry_t *e)
{
    troupe__ledger_prune(e);
    if (e->writer_ev && e->writer_s != s)
        return troupe_stream_wait_for(s, e->writer_ev);
    return TROUPE_OK;
}

troupe_status_t troupe__ledger_before_write(troupe_stream_t *s, troupe__entry_t *e)
{
    troupe__ledger_prune(e);
    for (size_t i = 0; i < e->nreaders; i++)
        if (e->readers[i].s != s)
            TROUPE_RETURN_IF_ERROR(troupe_stream_wait_for(s, e->readers[i].ev));
    if (e->writer_ev && e->writer_s != s)
        return troupe_stream_wait_for(s, e->writer_ev);
    return TROUPE_OK;
}

troupe_status_t troupe__ledger_note_read(troupe__entry_t *e, troupe_stream_t *s, troupe_event_t *ev)
{
    for (size_t i = 0; i < e->nreaders; i++) {
        if (e->readers[i].s == s) {
            troupe_event_release(&e->readers[i].ev);
            troupe_event_retain(ev);
            e->readers[i].ev = ev;
            return TROUPE_OK;
        }
    }
    if (!TROUPE__VEC_RESERVE(e->readers, e->readers_cap, e->nreaders + 1))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "ledger: out of memory");
    troupe_event_retain(ev);
    e->readers[e->nreaders++] = (troupe__reader_t){s, ev};
    return TROUPE_OK;
}

void troupe__ledger_note_write(troupe__entry_t *e, troupe_stream_t *s, troupe_event_t *ev)
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

void troupe__ledger_sexp(troupe__ledger_t *l, troupe__strbuf_t *sb)
{
    troupe__strbuf_puts(sb, "(ledger (");
    for (size_t i = 0; i < l->nentries; i++) {
        troupe__entry_t *e = l->entries[i];
        troupe__ledger_prune(e);
        troupe__strbuf_printf(sb,
                              "%s(array (node %s) (pool %d) (offset %lld) (size_bytes %lld) "
                              "(shared %s) (owner \"%s\") (writer ",
                              i ? " " : "", e->node_name, (int)e->key.pool_id,
                              (long long)e->key.offset, (long long)e->size_bytes,
                              e->shared ? "true" : "false",
                              e->owner ? troupe_stream_name(e->owner) : "nil");
        if (e->writer_ev)
            troupe__strbuf_printf(sb, "\"%s\"", troupe_event_name(e->writer_ev));
        else
            troupe__strbuf_puts(sb, "nil");
        troupe__strbuf_puts(sb, ") (readers (");
        for (size_t j = 0; j < e->nreaders; j++)
            troupe__strbuf_printf(sb, "%s\"%s\"", j ? " " : "",
                                  troupe_event_name(e->readers[j].ev));
        troupe__strbuf_puts(sb, ")))");
    }
    troupe__strbuf_puts(sb, "))");
}
