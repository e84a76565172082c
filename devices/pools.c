/* troupe — pool tables and argument checks shared by the drivers (see pools_impl.h). */
#include "devices/pools_impl.h"

#include "base/alloc.h"
#include "base/vec.h"

#include <string.h>

static size_t s_lower_bound(const troupe__pool_table_t *t, int32_t id)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

troupe__pool_slot_t *troupe__pools_find(troupe__pool_table_t *t, int32_t id)
{
    size_t i = s_lower_bound(t, id);
    return i < t->n && t->v[i].id == id ? &t->v[i] : NULL;
}

troupe_status_t troupe__pools_reserve(troupe__pool_table_t *t, const char *drv, int ordinal,
                                      int32_t id)
{
    const troupe__pool_slot_t *s = troupe__pools_find(t, id);
    if (s != NULL)
        return troupe__error(TROUPE_ALREADY_EXISTS,
                             "%s alloc_pool: pool %d already exists on device %d (%lld bytes)",
                             drv, (int)id, ordinal, (long long)s->size_bytes);
    if (!TROUPE__VEC_RESERVE(t->v, t->cap, t->n + 1))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                             "%s alloc_pool: pool %d: out of memory for the pool table", drv,
                             (int)id);
    return TROUPE_OK;
}

void troupe__pools_insert(troupe__pool_table_t *t, troupe__pool_slot_t slot)
{
    size_t i = s_lower_bound(t, slot.id);
    memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof *t->v);
    t->v[i] = slot;
    t->n++;
}

troupe_status_t troupe__pools_remove(troupe__pool_table_t *t, const char *drv, int ordinal,
                                     int32_t id, troupe__pool_slot_t *out)
{
    size_t i = s_lower_bound(t, id);
    if (i == t->n || t->v[i].id != id)
        return troupe__error(TROUPE_NOT_FOUND, "%s free_pool: pool %d not found on device %d",
                             drv, (int)id, ordinal);
    *out = t->v[i];
    memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof *t->v);
    t->n--;
    return TROUPE_OK;
}

void troupe__pools_free(troupe__pool_table_t *t)
{
    troupe_free(t->v);
    memset(t, 0, sizeof *t);
}

troupe_status_t troupe__pools_resolve(troupe__pool_table_t *t, const char *drv, const char *op,
                                      int ordinal, troupe_buffer_loc_t buf, void **out)
{
    if (buf.offset < 0 || buf.size_bytes < 0)
        return troupe__error(
            TROUPE_INVALID_ARGUMENT, "%s %s: negative offset %lld or size %lld bytes in pool %d",
            drv, op, (long long)buf.offset, (long long)buf.size_bytes, (int)buf.pool_id);
    const troupe__pool_slot_t *s = troupe__pools_find(t, buf.pool_id);
    if (s == NULL)
        return troupe__error(TROUPE_NOT_FOUND,
                             "%s %s: pool %d not found on device %d (buffer at offset %lld, %lld "
                             "bytes)",
                             drv, op, (int)buf.pool_id, ordinal, (long long)buf.offset,
                             (long long)buf.size_bytes);
    if (buf.offset > s->size_bytes || buf.size_bytes > s->size_bytes - buf.offset)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s %s: buffer at offset %lld of %lld bytes exceeds pool %d of %lld "
                             "bytes",
                             drv, op, (long long)buf.offset, (long long)buf.size_bytes,
                             (int)buf.pool_id, (long long)s->size_bytes);
    *out = (char *)s->base + buf.offset;
    return TROUPE_OK;
}

troupe_status_t troupe__check_copy_size(const char *drv, const char *op, troupe_buffer_loc_t buf,
                                        int64_t size_bytes)
{
    if (size_bytes < 0 || size_bytes > buf.size_bytes)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s %s: copy of %lld bytes does not fit the buffer of %lld bytes at "
                             "offset %lld of pool %d",
                             drv, op, (long long)size_bytes, (long long)buf.size_bytes,
                             (long long)buf.offset, (int)buf.pool_id);
    return TROUPE_OK;
}

/* ---- a launch's arguments ---------------------------------------------------------------- */

troupe_status_t troupe__kparams_new(const troupe_cgen_result_t *gen, troupe__kparam_t **out)
{
    *out = NULL;
    if (gen->nparams == 0)
        return TROUPE_OK;
    troupe__kparam_t *p = troupe_calloc(gen->nparams, sizeof *p);
    if (p == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compile %s: out of memory", gen->name);
    for (size_t i = 0; i < gen->nparams; i++) {
        const troupe_cgen_param_t *gp = &gen->params[i];
        p[i].kind = gp->kind;
        p[i].min_size_bytes = gp->tn ? (int64_t)gp->tn->size_bytes : 0;
        p[i].static_range = gp->kind == TROUPE_CGEN_PARAM_STATIC_IDX ? gp->static_range : 0;
        p[i].ident = troupe_strdup(gp->ident ? gp->ident : "?");
        if (p[i].ident == NULL) {
            troupe__kparams_free(p, gen->nparams);
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compile %s: out of memory",
                                 gen->name);
        }
    }
    *out = p;
    return TROUPE_OK;
}

void troupe__kparams_free(troupe__kparam_t *p, size_t n)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        troupe_free(p[i].ident);
    troupe_free(p);
}

static const char *s_karg_kind_name(troupe_karg_kind_t k)
{
    switch (k) {
    case TROUPE_KARG_BUFFER:
        return "buffer";
    case TROUPE_KARG_STATIC_IDX:
        return "static index";
    case TROUPE_KARG_MERGE_BUFFER:
        return "merge buffer";
    }
    return "invalid kind";
}

static troupe_karg_kind_t s_expected_kind(troupe_cgen_param_kind_t k)
{
    switch (k) {
    case TROUPE_CGEN_PARAM_STATIC_IDX:
        return TROUPE_KARG_STATIC_IDX;
    case TROUPE_CGEN_PARAM_MERGE_BUFFER:
        return TROUPE_KARG_MERGE_BUFFER;
    case TROUPE_CGEN_PARAM_NODE_PTR:
        break;
    }
    return TROUPE_KARG_BUFFER;
}

troupe_status_t troupe__karg_check(const char *drv, const char *code, size_t i,
                                   const troupe__kparam_t *p, const troupe_karg_t *a)
{
    troupe_karg_kind_t want = s_expected_kind(p->kind);
    if (a->kind != want)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s launch %s: argument %zu is a %s but parameter %zu (%s) expects "
                             "a %s",
                             drv, code, i, s_karg_kind_name(a->kind), i, p->ident,
                             s_karg_kind_name(want));
    if (want == TROUPE_KARG_STATIC_IDX) {
        if (a->value < 0 || (p->static_range > 0 && a->value >= p->static_range))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "%s launch %s: parameter %zu (%s) expects a static index in "
                                 "0..%lld, got %lld",
                                 drv, code, i, p->ident,
                                 (long long)(p->static_range > 0 ? p->static_range - 1 : INT64_MAX),
                                 (long long)a->value);
        return TROUPE_OK;
    }
    if (a->buf.size_bytes < p->min_size_bytes)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s launch %s: parameter %zu (%s) expects a %s of at least %lld "
                             "bytes, got %lld bytes (pool %d, offset %lld)",
                             drv, code, i, p->ident, s_karg_kind_name(want),
                             (long long)p->min_size_bytes, (long long)a->buf.size_bytes,
                             (int)a->buf.pool_id, (long long)a->buf.offset);
    return TROUPE_OK;
}
