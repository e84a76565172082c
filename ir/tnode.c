/* troupe — tensor nodes (seed `Ir.Tnode`): registry, shape and names, host values (the
 * memory-mode lattice is ir/memory_mode.c).
 *
 * Registry: a sorted dynamic array of node pointers keyed by id under one global mutex. The
 * registry holds no reference. The last release drops the count to zero outside the lock and
 * then takes the lock to unregister; troupe_tnode_find therefore only retains a node whose
 * count is still positive (check-and-retain under the registry lock), so it never hands out a
 * node that is being destroyed. A dying node may still sit in the registry for a moment;
 * troupe_tnode_new_with_id replaces such an entry, and the dying node removes its entry only
 * if it is still its own.
 *
 * Provenance codes used here (OCANNL_NOTES §5.3): 30 host array creation (as the seed),
 * 31 host write (set_values/set_value).
 */
#define _POSIX_C_SOURCE 200809L
#include "ir/tnode.h"
#include "ir/tnode_impl.h"

#include "base/alloc.h"
#include "base/strbuf.h"
#include "base/vec.h"
#include "ir/memory_mode_impl.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

enum {
    s_prov_host_array = 30, /* seed: hosted forcing on array creation */
    s_prov_host_write = 31, /* troupe: set_values / set_value */
};

/* ---- registry ------------------------------------------------------------------------------ */

static pthread_mutex_t s_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static troupe_tnode_t **s_nodes; /* sorted by id */
static size_t s_node_count, s_node_cap;
static atomic_int_fast64_t s_last_id; /* largest id handed out or seen */

/* Index of the first entry with id >= `id`. Registry lock held. */
static size_t s_lower_bound(int32_t id)
{
    size_t lo = 0, hi = s_node_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s_nodes[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Retains `tn` unless its count already reached zero (it is being destroyed). */
static bool s_try_retain(troupe_tnode_t *tn)
{
    int_fast32_t c = atomic_load_explicit(&tn->refs.count, memory_order_relaxed);
    while (c > 0) {
        if (atomic_compare_exchange_weak_explicit(&tn->refs.count, &c, c + 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return true;
    }
    return false;
}

/* Outcome of trying to register `tn` under its id. */
typedef enum s_reg_result {
    s_reg_ok,
    s_reg_taken, /* a live node has the id */
    s_reg_nomem,
} s_reg_result_t;

static s_reg_result_t s_register(troupe_tnode_t *tn)
{
    s_reg_result_t r = s_reg_ok;
    pthread_mutex_lock(&s_registry_lock);
    size_t i = s_lower_bound(tn->id);
    if (i < s_node_count && s_nodes[i]->id == tn->id) {
        if (troupe_refcount_get(&s_nodes[i]->refs) > 0)
            r = s_reg_taken;
        else
            s_nodes[i] = tn; /* the old one is dying; it will not remove us */
        goto out_unlock;
    }
    if (!TROUPE__VEC_RESERVE(s_nodes, s_node_cap, s_node_count + 1)) {
        r = s_reg_nomem;
        goto out_unlock;
    }
    memmove(s_nodes + i + 1, s_nodes + i, (s_node_count - i) * sizeof *s_nodes);
    s_nodes[i] = tn;
    s_node_count++;
out_unlock:
    pthread_mutex_unlock(&s_registry_lock);
    return r;
}

static void s_unregister(troupe_tnode_t *tn)
{
    pthread_mutex_lock(&s_registry_lock);
    size_t i = s_lower_bound(tn->id);
    if (i < s_node_count && s_nodes[i] == tn) {
        memmove(s_nodes + i, s_nodes + i + 1, (s_node_count - i - 1) * sizeof *s_nodes);
        s_node_count--;
        if (s_node_count == 0) {
            troupe_free(s_nodes);
            s_nodes = NULL;
            s_node_cap = 0;
        }
    }
    pthread_mutex_unlock(&s_registry_lock);
}

static void s_bump_last_id(int64_t id)
{
    int_fast64_t cur = atomic_load_explicit(&s_last_id, memory_order_relaxed);
    while (cur < id && !atomic_compare_exchange_weak_explicit(
                           &s_last_id, &cur, id, memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* ---- the host-array allocator (ir/tnode_impl.h) -------------------------------------------- */

typedef struct s_host_alloc {
    void *(*alloc)(size_t size_bytes);
    void (*free)(void *p);
    size_t min_bytes;
} s_host_alloc_t;

static pthread_mutex_t s_host_alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static s_host_alloc_t s_host_alloc_cur;

void troupe__tnode_set_host_allocator(void *(*alloc)(size_t size_bytes), void (*free_fn)(void *p),
                                      size_t min_bytes)
{
    pthread_mutex_lock(&s_host_alloc_lock);
    s_host_alloc_cur = (s_host_alloc_t){alloc, alloc ? free_fn : NULL, min_bytes};
    pthread_mutex_unlock(&s_host_alloc_lock);
}

bool troupe__tnode_host_allocator_installed(void)
{
    pthread_mutex_lock(&s_host_alloc_lock);
    bool on = s_host_alloc_cur.alloc != NULL;
    pthread_mutex_unlock(&s_host_alloc_lock);
    return on;
}

static s_host_alloc_t s_host_allocator(void)
{
    pthread_mutex_lock(&s_host_alloc_lock);
    s_host_alloc_t a = s_host_alloc_cur;
    pthread_mutex_unlock(&s_host_alloc_lock);
    return a;
}

/* ---- creation ------------------------------------------------------------------------------ */

static void s_free_node(troupe_tnode_t *tn)
{
    if (tn->label) {
        for (size_t i = 0; i < tn->label_count; i++)
            troupe_free(tn->label[i]);
        troupe_free(tn->label);
    }
    if (tn->host_free != NULL)
        tn->host_free(tn->host);
    else
        troupe_free(tn->host);
    troupe_free(tn->devices_not_lagging_host);
    troupe_free(tn->code_name);
    troupe_free(tn);
}

/* Validates the inputs and builds an unregistered node with id 0. */
static troupe_status_t s_build(const char *const *label, size_t label_count, troupe_prec_t prec,
                               int ndims, const int64_t *dims, const troupe_axis_padding_t *padding,
                               double padding_value, troupe_tnode_t **out)
{
    *out = NULL;
    if (!troupe_prec_is_valid(prec))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "tnode: precision %d is not valid",
                             (int)prec);
    if (prec == TROUPE_PREC_VOID)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "tnode: precision void has no elements to store");
    if (ndims < 0 || ndims > TROUPE_MAX_DIMS)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "tnode: ndims %d outside 0..%d", ndims,
                             TROUPE_MAX_DIMS);
    if (ndims > 0 && !dims)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "tnode: dims is NULL for ndims %d", ndims);
    if (label_count > 0 && !label)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "tnode: label is NULL for label_count %zu",
                             label_count);
    for (size_t i = 0; i < label_count; i++)
        if (!label[i])
            return troupe__error(TROUPE_INVALID_ARGUMENT, "tnode: label %zu is NULL", i);

    size_t elem_bytes = troupe_prec_size_bytes(prec);
    int64_t num_elems = 1;
    for (int a = 0; a < ndims; a++) {
        if (dims[a] <= 0)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "tnode: axis %d: dim %" PRId64 " must be positive", a, dims[a]);
        if (padding) {
            int64_t l = padding[a].left, r = padding[a].right;
            if (l < 0 || r < 0)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "tnode: axis %d: padding %" PRId64 "+%" PRId64
                                     " must be non-negative",
                                     a, l, r);
            if (l >= dims[a] || r >= dims[a] - l)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "tnode: axis %d: padding %" PRId64 "+%" PRId64
                                     " must be smaller than dim %" PRId64,
                                     a, l, r, dims[a]);
        }
        if (num_elems > INT64_MAX / dims[a] ||
            (uint64_t)(num_elems * dims[a]) > (uint64_t)(SIZE_MAX / elem_bytes))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "tnode: axis %d: dim %" PRId64 " overflows the size in bytes", a,
                                 dims[a]);
        num_elems *= dims[a];
    }

    troupe_tnode_t *tn = troupe_calloc(1, sizeof *tn);
    if (!tn)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "tnode: out of memory");
    if (label_count > 0) {
        tn->label = troupe_calloc(label_count, sizeof *tn->label);
        if (!tn->label)
            goto fail_free;
        tn->label_count = label_count;
        for (size_t i = 0; i < label_count; i++) {
            tn->label[i] = troupe_strdup(label[i]);
            if (!tn->label[i])
                goto fail_free;
        }
    }
    tn->prec = prec;
    tn->ndims = ndims;
    for (int a = 0; a < ndims; a++) {
        tn->dims[a] = dims[a];
        if (padding)
            tn->padding[a] = padding[a];
    }
    tn->has_padding = padding != NULL;
    tn->padding_value = padding ? padding_value : 0.0;
    tn->size_bytes = (size_t)num_elems * elem_bytes;
    troupe_refcount_init(&tn->refs);
    if (pthread_mutex_init(&tn->lock, NULL) != 0)
        goto fail_free;
    *out = tn;
    return TROUPE_OK;

fail_free:
    s_free_node(tn);
    return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "tnode: out of memory");
}

static void s_destroy(troupe_tnode_t *tn)
{
    pthread_mutex_destroy(&tn->lock);
    s_free_node(tn);
}

troupe_status_t troupe_tnode_new(const char *const *label, size_t label_count, troupe_prec_t prec,
                                 int ndims, const int64_t *dims,
                                 const troupe_axis_padding_t *padding, double padding_value,
                                 troupe_tnode_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "tnode: out is NULL");
    *out = NULL;
    troupe_tnode_t *tn = NULL;
    TROUPE_RETURN_IF_ERROR(
        s_build(label, label_count, prec, ndims, dims, padding, padding_value, &tn));
    for (;;) {
        int64_t id = (int64_t)atomic_fetch_add_explicit(&s_last_id, 1, memory_order_relaxed) + 1;
        if (id > INT32_MAX) {
            s_destroy(tn);
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "tnode: ids exhausted");
        }
        tn->id = (int32_t)id;
        s_reg_result_t r = s_register(tn);
        if (r == s_reg_ok)
            break;
        if (r == s_reg_nomem) {
            s_destroy(tn);
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "tnode: out of memory (registry)");
        }
        /* Taken by troupe_tnode_new_with_id meanwhile, which also raised s_last_id: retry. */
    }
    *out = tn;
    return TROUPE_OK;
}

troupe_status_t troupe_tnode_new_with_id(int32_t id, const char *const *label, size_t label_count,
                                         troupe_prec_t prec, int ndims, const int64_t *dims,
                                         const troupe_axis_padding_t *padding, double padding_value,
                                         troupe_tnode_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "tnode: out is NULL");
    *out = NULL;
    if (id <= 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "tnode: id %" PRId32 " must be positive", id);
    troupe_tnode_t *tn = NULL;
    TROUPE_RETURN_IF_ERROR(
        s_build(label, label_count, prec, ndims, dims, padding, padding_value, &tn));
    tn->id = id;
    s_bump_last_id(id);
    s_reg_result_t r = s_register(tn);
    if (r != s_reg_ok) {
        s_destroy(tn);
        if (r == s_reg_taken)
            return troupe__error(TROUPE_ALREADY_EXISTS, "tnode: id %" PRId32 " is already in use",
                                 id);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "tnode: out of memory (registry)");
    }
    *out = tn;
    return TROUPE_OK;
}

void troupe_tnode_retain(troupe_tnode_t *tn)
{
    if (tn)
        troupe_refcount_retain(&tn->refs);
}

void troupe_tnode_release(troupe_tnode_t **tn_p)
{
    if (!tn_p || !*tn_p)
        return;
    troupe_tnode_t *tn = *tn_p;
    *tn_p = NULL;
    if (!troupe_refcount_release(&tn->refs))
        return;
    s_unregister(tn);
    s_destroy(tn);
}

troupe_status_t troupe_tnode_find(int32_t id, troupe_tnode_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "tnode_find: out is NULL");
    *out = NULL;
    pthread_mutex_lock(&s_registry_lock);
    size_t i = s_lower_bound(id);
    if (i < s_node_count && s_nodes[i]->id == id && s_try_retain(s_nodes[i]))
        *out = s_nodes[i];
    pthread_mutex_unlock(&s_registry_lock);
    if (!*out)
        return troupe__error(TROUPE_NOT_FOUND, "tnode: no live node with id %" PRId32, id);
    return TROUPE_OK;
}

/* ---- shape and names ----------------------------------------------------------------------- */

int64_t troupe_tnode_num_elems(const troupe_tnode_t *tn)
{
    int64_t n = 1;
    for (int a = 0; a < tn->ndims; a++)
        n *= tn->dims[a];
    return n;
}

void troupe_tnode_dims_without_padding(const troupe_tnode_t *tn, int64_t *out)
{
    for (int a = 0; a < tn->ndims; a++)
        out[a] = tn->has_padding ? tn->dims[a] - tn->padding[a].left - tn->padding[a].right
                                 : tn->dims[a];
}

size_t troupe_tnode_dims_to_string(const troupe_tnode_t *tn, bool with_axis_numbers, char *buf,
                                   size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    if (tn->ndims == 0)
        troupe__strbuf_puts(&sb, "1");
    for (int a = 0; a < tn->ndims; a++) {
        if (a > 0)
            troupe__strbuf_puts(&sb, "x");
        if (with_axis_numbers)
            troupe__strbuf_printf(&sb, "%d:", a);
        troupe__strbuf_printf(&sb, "%" PRId64, tn->dims[a]);
    }
    return sb.len;
}

static void s_add_label(troupe__strbuf_t *sb, const troupe_tnode_t *tn)
{
    for (size_t i = 0; i < tn->label_count; i++) {
        if (i > 0)
            troupe__strbuf_puts(sb, "_");
        troupe__strbuf_puts(sb, tn->label[i]);
    }
}

size_t troupe_tnode_label_string(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    if (tn->label_count == 0)
        troupe__strbuf_printf(&sb, "n%" PRId32, tn->id);
    else
        s_add_label(&sb, tn);
    return sb.len;
}

size_t troupe_tnode_debug_name(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    troupe__strbuf_printf(&sb, "n%" PRId32, tn->id);
    if (tn->label_count > 0) {
        troupe__strbuf_puts(&sb, "_");
        s_add_label(&sb, tn);
    }
    return sb.len;
}

size_t troupe_tnode_header(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    troupe_memory_mode_t m;
    int32_t prov = 0;
    bool has = troupe_tnode_get_memory_mode((troupe_tnode_t *)tn, &m, &prov);
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    troupe__strbuf_printf(&sb, "#%" PRId32 " ", tn->id);
    if (tn->label_count == 0)
        troupe__strbuf_printf(&sb, "n%" PRId32, tn->id);
    else
        s_add_label(&sb, tn);
    troupe__strbuf_puts(&sb, " ");
    troupe__strbuf_puts(&sb, troupe_prec_name(tn->prec));
    troupe__strbuf_puts(&sb, " ");
    if (tn->ndims == 0)
        troupe__strbuf_puts(&sb, "1");
    for (int a = 0; a < tn->ndims; a++)
        troupe__strbuf_printf(&sb, a > 0 ? "x%" PRId64 : "%" PRId64, tn->dims[a]);
    troupe__strbuf_puts(&sb, " ");
    troupe__memory_mode_put_prov(&sb, has, m, prov);
    return sb.len;
}

/* ---- devices not lagging host ------------------------------------------------------------ */

troupe_status_t troupe_tnode_mark_not_lagging(troupe_tnode_t *tn, int32_t device_id)
{
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&tn->lock);
    for (size_t i = 0; i < tn->devices_not_lagging_count; i++)
        if (tn->devices_not_lagging_host[i] == device_id)
            goto out_unlock;
    if (!TROUPE__VEC_PUSH(tn->devices_not_lagging_host, tn->devices_not_lagging_count,
                          tn->devices_not_lagging_cap, device_id))
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                           "tnode: out of memory marking device %" PRId32, device_id);
out_unlock:
    pthread_mutex_unlock(&tn->lock);
    return st;
}

bool troupe_tnode_is_not_lagging(troupe_tnode_t *tn, int32_t device_id)
{
    bool found = false;
    pthread_mutex_lock(&tn->lock);
    for (size_t i = 0; i < tn->devices_not_lagging_count && !found; i++)
        found = tn->devices_not_lagging_host[i] == device_id;
    pthread_mutex_unlock(&tn->lock);
    return found;
}

void troupe_tnode_clear_not_lagging(troupe_tnode_t *tn)
{
    pthread_mutex_lock(&tn->lock);
    tn->devices_not_lagging_count = 0;
    pthread_mutex_unlock(&tn->lock);
}

/* ---- host values ------------------------------------------------------------------------- */

void troupe_tnode_set_hooks(troupe_tnode_t *tn, const troupe_tnode_hooks_t *hooks)
{
    pthread_mutex_lock(&tn->lock);
    if (hooks)
        tn->hooks = *hooks;
    else
        memset(&tn->hooks, 0, sizeof tn->hooks);
    pthread_mutex_unlock(&tn->lock);
}

/* Runs the prepare_read or prepare_write hook, without holding the node lock. */
static troupe_status_t s_run_hook(troupe_tnode_t *tn, bool write)
{
    pthread_mutex_lock(&tn->lock);
    troupe_tnode_hooks_t h = tn->hooks;
    pthread_mutex_unlock(&tn->lock);
    troupe_status_t (*fn)(troupe_tnode_t *, void *) = write ? h.prepare_write : h.prepare_read;
    return fn ? fn(tn, h.user) : TROUPE_OK;
}

/* Makes tn hosted (lock held) and returns its host array, allocating it zero-filled. For a
 * write, the mode is refined to Hosted(Nonconstant) unless the node is a constant being
 * initialised (Effectively_constant or Hosted Constant: it becomes/stays Hosted Constant). */
static troupe_status_t s_host_locked(troupe_tnode_t *tn, bool write, void **out)
{
    troupe_memory_mode_t unset_hosted =
        troupe__mm(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET);
    troupe_memory_mode_t nonconstant =
        troupe__mm(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, TROUPE_SHARING_UNSET);
    troupe_status_t st;
    if (!write) {
        st = troupe__tnode_update_mode_locked(tn, unset_hosted, s_prov_host_array);
    } else {
        bool constant =
            tn->has_memory_mode && (tn->memory_mode.kind == TROUPE_MM_EFFECTIVELY_CONSTANT ||
                                    troupe__mm_is_hosted(tn->memory_mode, TROUPE_MEMTYPE_CONSTANT));
        st = troupe__tnode_update_mode_locked(tn, constant ? unset_hosted : nonconstant,
                                              s_prov_host_write);
    }
    if (st == TROUPE_FAILED_PRECONDITION) {
        /* the node lives only on the devices (or nowhere): say what would make it readable */
        char why[768];
        snprintf(why, sizeof why, "%s", troupe_last_error());
        return troupe__error(st,
                             "%s; the host %s only hosted nodes: make it hosted before compiling "
                             "the code that writes it (troupe_tnode_update_memory_mode with "
                             "TROUPE_MM_HOSTED), or copy it into a hosted node (troupe_asgn_copy) "
                             "and read that one after troupe_to_host",
                             why, write ? "writes" : "reads");
    }
    if (st != TROUPE_OK)
        return st;
    if (!tn->host) {
        s_host_alloc_t ha = s_host_allocator();
        if (ha.alloc != NULL && tn->size_bytes >= ha.min_bytes &&
            (tn->host = ha.alloc(tn->size_bytes)) != NULL) {
            memset(tn->host, 0, tn->size_bytes);
            tn->host_free = ha.free;
        } else {
            tn->host = troupe_calloc(1, tn->size_bytes);
        }
        if (!tn->host) {
            char name[96];
            troupe_tnode_debug_name(tn, name, sizeof name);
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                                 "%s: out of memory for a host array of %zu bytes", name,
                                 tn->size_bytes);
        }
    }
    *out = tn->host;
    return TROUPE_OK;
}

troupe_status_t troupe_tnode_host_array(troupe_tnode_t *tn, void **out)
{
    if (!tn || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "host_array: NULL argument");
    *out = NULL;
    pthread_mutex_lock(&tn->lock);
    troupe_status_t st = s_host_locked(tn, false, out);
    pthread_mutex_unlock(&tn->lock);
    return st;
}

static troupe_status_t s_check_count(troupe_tnode_t *tn, const char *what, size_t count)
{
    int64_t n = troupe_tnode_num_elems(tn);
    if ((uint64_t)n == (uint64_t)count)
        return TROUPE_OK;
    char name[96];
    troupe_tnode_debug_name(tn, name, sizeof name);
    return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: %s got %zu values, the node has %" PRId64,
                         name, what, count, n);
}

troupe_status_t troupe_tnode_get_values(troupe_tnode_t *tn, double *out, size_t count)
{
    if (!tn || (!out && count > 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "get_values: NULL argument");
    TROUPE_RETURN_IF_ERROR(s_check_count(tn, "get_values", count));
    TROUPE_RETURN_IF_ERROR(s_run_hook(tn, false));
    size_t elem = troupe_prec_size_bytes(tn->prec);
    void *host = NULL;
    pthread_mutex_lock(&tn->lock);
    troupe_status_t st = s_host_locked(tn, false, &host);
    if (st == TROUPE_OK)
        for (size_t i = 0; i < count; i++)
            out[i] = troupe_prec_load_double(tn->prec, (const char *)host + i * elem);
    pthread_mutex_unlock(&tn->lock);
    return st;
}

troupe_status_t troupe_tnode_set_values(troupe_tnode_t *tn, const double *values, size_t count)
{
    if (!tn || (!values && count > 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "set_values: NULL argument");
    TROUPE_RETURN_IF_ERROR(s_check_count(tn, "set_values", count));
    TROUPE_RETURN_IF_ERROR(s_run_hook(tn, true));
    size_t elem = troupe_prec_size_bytes(tn->prec);
    void *host = NULL;
    pthread_mutex_lock(&tn->lock);
    troupe_status_t st = s_host_locked(tn, true, &host);
    if (st == TROUPE_OK) {
        for (size_t i = 0; i < count; i++)
            troupe_prec_store_double(tn->prec, (char *)host + i * elem, values[i]);
        tn->devices_not_lagging_count = 0;
    }
    pthread_mutex_unlock(&tn->lock);
    return st;
}

/* Row-major offset (in elements) of idx, bounds-checked per axis. */
static troupe_status_t s_offset(troupe_tnode_t *tn, const int64_t *idx, int64_t *out)
{
    if (tn->ndims > 0 && !idx)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "tnode: idx is NULL for %d axes", tn->ndims);
    int64_t off = 0;
    for (int a = 0; a < tn->ndims; a++) {
        if (idx[a] < 0 || idx[a] >= tn->dims[a]) {
            char name[96];
            troupe_tnode_debug_name(tn, name, sizeof name);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "%s: axis %d: index %" PRId64 " outside [0, %" PRId64 ")", name, a,
                                 idx[a], tn->dims[a]);
        }
        off = off * tn->dims[a] + idx[a];
    }
    *out = off;
    return TROUPE_OK;
}

troupe_status_t troupe_tnode_get_value(troupe_tnode_t *tn, const int64_t *idx, double *out)
{
    if (!tn || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "get_value: NULL argument");
    int64_t off = 0;
    TROUPE_RETURN_IF_ERROR(s_offset(tn, idx, &off));
    TROUPE_RETURN_IF_ERROR(s_run_hook(tn, false));
    void *host = NULL;
    pthread_mutex_lock(&tn->lock);
    troupe_status_t st = s_host_locked(tn, false, &host);
    if (st == TROUPE_OK)
        *out = troupe_prec_load_double(
            tn->prec, (const char *)host + (size_t)off * troupe_prec_size_bytes(tn->prec));
    pthread_mutex_unlock(&tn->lock);
    return st;
}

troupe_status_t troupe_tnode_set_value(troupe_tnode_t *tn, const int64_t *idx, double value)
{
    if (!tn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "set_value: tn is NULL");
    int64_t off = 0;
    TROUPE_RETURN_IF_ERROR(s_offset(tn, idx, &off));
    TROUPE_RETURN_IF_ERROR(s_run_hook(tn, true));
    void *host = NULL;
    pthread_mutex_lock(&tn->lock);
    troupe_status_t st = s_host_locked(tn, true, &host);
    if (st == TROUPE_OK) {
        troupe_prec_store_double(
            tn->prec, (char *)host + (size_t)off * troupe_prec_size_bytes(tn->prec), value);
        tn->devices_not_lagging_count = 0;
    }
    pthread_mutex_unlock(&tn->lock);
    return st;
}

troupe_status_t troupe_tnode_points_1d(troupe_tnode_t *tn, double *out, size_t cap,
                                       size_t *out_count)
{
    if (!tn || !out_count || (!out && cap > 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "points_1d: NULL argument");
    *out_count = 0;
    TROUPE_RETURN_IF_ERROR(s_run_hook(tn, false));
    size_t n = (size_t)troupe_tnode_num_elems(tn);
    if (n > cap)
        n = cap;
    size_t elem = troupe_prec_size_bytes(tn->prec);
    void *host = NULL;
    pthread_mutex_lock(&tn->lock);
    troupe_status_t st = s_host_locked(tn, false, &host);
    if (st == TROUPE_OK) {
        for (size_t i = 0; i < n; i++)
            out[i] = troupe_prec_load_double(tn->prec, (const char *)host + i * elem);
        *out_count = n;
    }
    pthread_mutex_unlock(&tn->lock);
    return st;
}

troupe_status_t troupe_tnode_points_2d(troupe_tnode_t *tn, int64_t xdim, int64_t ydim, double *out,
                                       size_t cap, size_t *out_count)
{
    if (!tn || !out_count || (!out && cap > 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "points_2d: NULL argument");
    *out_count = 0;
    int64_t last = tn->ndims > 0 ? tn->dims[tn->ndims - 1] : 1;
    if (xdim < 0 || xdim >= last || ydim < 0 || ydim >= last) {
        char name[96];
        troupe_tnode_debug_name(tn, name, sizeof name);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s: points_2d: xdim %" PRId64 " / ydim %" PRId64
                             " outside the last axis [0, %" PRId64 ")",
                             name, xdim, ydim, last);
    }
    TROUPE_RETURN_IF_ERROR(s_run_hook(tn, false));
    size_t rows = (size_t)(troupe_tnode_num_elems(tn) / last);
    if (rows > cap)
        rows = cap;
    size_t elem = troupe_prec_size_bytes(tn->prec);
    void *host = NULL;
    pthread_mutex_lock(&tn->lock);
    troupe_status_t st = s_host_locked(tn, false, &host);
    if (st == TROUPE_OK) {
        const char *base = host;
        for (size_t r = 0; r < rows; r++) {
            const char *row = base + r * (size_t)last * elem;
            out[2 * r] = troupe_prec_load_double(tn->prec, row + (size_t)xdim * elem);
            out[2 * r + 1] = troupe_prec_load_double(tn->prec, row + (size_t)ydim * elem);
        }
        *out_count = rows;
    }
    pthread_mutex_unlock(&tn->lock);
    return st;
}
