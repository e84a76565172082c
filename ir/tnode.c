/* troupe — tensor nodes (seed `Ir.Tnode`): registry, shape, memory-mode lattice, host values.
 *
 * Registry: a sorted dynamic array of node pointers keyed by id under one global mutex. The
 * registry holds no reference. The last release drops the count to zero outside the lock and
 * then takes the lock to unregister; troupe_tnode_find therefore only retains a node whose
 * count is still positive (check-and-retain under the registry lock), so it never hands out a
 * node that is being destroyed. A dying node may still sit in the registry for a moment;
 * troupe_tnode_new_with_id replaces such an entry, and the dying node removes its entry only
 * if it is still its own.
 *
 * Memory modes: s_refine and s_refine_sharing are the seed's update_memory_mode and
 * update_memory_sharing (OCANNL_NOTES §5.2, OCANNL 0.6 `tnode.ml`), with the Unset_hosted and
 * On_device Unset rules of the notes and one completion: a request coarser than the current
 * mode (Hosted Unset_hosted of a hosted node, On_device Unset of On_device s,
 * Changed_on_devices Unset of Changed_on_devices s) is a no-op, as the seed already does for
 * Never_virtual, Device_only, Materialized and Nonconstant requests.
 *
 * Provenance codes used here (OCANNL_NOTES §5.3): 30 host array creation (as the seed),
 * 31 host write (set_values/set_value).
 */
#define _POSIX_C_SOURCE 200809L
#include "ir/tnode.h"

#include "base/alloc.h"
#include "base/config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

enum {
    s_prov_host_array = 30, /* seed: hosted forcing on array creation */
    s_prov_host_write = 31, /* troupe: set_values / set_value */
};

/* ---- small string builder (snprintf convention) ------------------------------------------ */

typedef struct s_sb {
    char *buf;
    size_t cap;
    size_t len; /* length needed so far */
} s_sb_t;

static void s_sb_init(s_sb_t *sb, char *buf, size_t cap)
{
    sb->buf = buf;
    sb->cap = cap;
    sb->len = 0;
    if (buf && cap > 0)
        buf[0] = '\0';
}

static void s_sb_add(s_sb_t *sb, const char *s)
{
    size_t n = strlen(s);
    if (sb->buf && sb->cap > 0 && sb->len < sb->cap - 1) {
        size_t room = sb->cap - 1 - sb->len;
        size_t k = n < room ? n : room;
        memcpy(sb->buf + sb->len, s, k);
        sb->buf[sb->len + k] = '\0';
    }
    sb->len += n;
}

static void s_sb_addf(s_sb_t *sb, const char *fmt, ...) TROUPE_PRINTF(2, 3);
static void s_sb_addf(s_sb_t *sb, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        s_sb_add(sb, tmp); /* only used for short numeric pieces */
}

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
    if (s_node_count == s_node_cap) {
        size_t cap = s_node_cap ? 2 * s_node_cap : 64;
        troupe_tnode_t **p = troupe_realloc(s_nodes, cap * sizeof *p);
        if (!p) {
            r = s_reg_nomem;
            goto out_unlock;
        }
        s_nodes = p;
        s_node_cap = cap;
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

/* ---- creation ------------------------------------------------------------------------------ */

static void s_free_node(troupe_tnode_t *tn)
{
    if (tn->label) {
        for (size_t i = 0; i < tn->label_count; i++)
            troupe_free(tn->label[i]);
        troupe_free(tn->label);
    }
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
    s_sb_t sb;
    s_sb_init(&sb, buf, cap);
    if (tn->ndims == 0)
        s_sb_add(&sb, "1");
    for (int a = 0; a < tn->ndims; a++) {
        if (a > 0)
            s_sb_add(&sb, "x");
        if (with_axis_numbers)
            s_sb_addf(&sb, "%d:", a);
        s_sb_addf(&sb, "%" PRId64, tn->dims[a]);
    }
    return sb.len;
}

static void s_add_label(s_sb_t *sb, const troupe_tnode_t *tn)
{
    for (size_t i = 0; i < tn->label_count; i++) {
        if (i > 0)
            s_sb_add(sb, "_");
        s_sb_add(sb, tn->label[i]);
    }
}

size_t troupe_tnode_label_string(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    s_sb_t sb;
    s_sb_init(&sb, buf, cap);
    if (tn->label_count == 0)
        s_sb_addf(&sb, "n%" PRId32, tn->id);
    else
        s_add_label(&sb, tn);
    return sb.len;
}

size_t troupe_tnode_debug_name(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    s_sb_t sb;
    s_sb_init(&sb, buf, cap);
    s_sb_addf(&sb, "n%" PRId32, tn->id);
    if (tn->label_count > 0) {
        s_sb_add(&sb, "_");
        s_add_label(&sb, tn);
    }
    return sb.len;
}

/* ---- memory modes: text -------------------------------------------------------------------- */

static const char *s_sharing_name(troupe_sharing_t s)
{
    switch (s) {
    case TROUPE_SHARING_UNSET:
        return "Unset";
    case TROUPE_SHARING_PER_STREAM:
        return "Per_stream";
    case TROUPE_SHARING_SHARED_CROSS_STREAMS:
        return "Shared_cross_streams";
    }
    return "Invalid";
}

static void s_add_mode(s_sb_t *sb, troupe_memory_mode_t m)
{
    switch (m.kind) {
    case TROUPE_MM_EFFECTIVELY_CONSTANT:
        s_sb_add(sb, "Effectively_constant");
        return;
    case TROUPE_MM_VIRTUAL:
        s_sb_add(sb, "Virtual");
        return;
    case TROUPE_MM_NEVER_VIRTUAL:
        s_sb_add(sb, "Never_virtual");
        return;
    case TROUPE_MM_LOCAL:
        s_sb_add(sb, "Local");
        return;
    case TROUPE_MM_DEVICE_ONLY:
        s_sb_add(sb, "Device_only");
        return;
    case TROUPE_MM_ON_DEVICE:
        s_sb_add(sb, "On_device(");
        s_sb_add(sb, s_sharing_name(m.sharing));
        s_sb_add(sb, ")");
        return;
    case TROUPE_MM_MATERIALIZED:
        s_sb_add(sb, "Materialized");
        return;
    case TROUPE_MM_HOSTED:
        s_sb_add(sb, "Hosted(");
        switch (m.memtype) {
        case TROUPE_MEMTYPE_UNSET_HOSTED:
            s_sb_add(sb, "Unset_hosted");
            break;
        case TROUPE_MEMTYPE_CONSTANT:
            s_sb_add(sb, "Constant");
            break;
        case TROUPE_MEMTYPE_NONCONSTANT:
            s_sb_add(sb, "Nonconstant");
            break;
        case TROUPE_MEMTYPE_CHANGED_ON_DEVICES:
            s_sb_add(sb, "Changed_on_devices(");
            s_sb_add(sb, s_sharing_name(m.sharing));
            s_sb_add(sb, ")");
            break;
        case TROUPE_MEMTYPE_VOLATILE:
            s_sb_add(sb, "Volatile");
            break;
        default:
            s_sb_add(sb, "Invalid");
            break;
        }
        s_sb_add(sb, ")");
        return;
    }
    s_sb_add(sb, "Invalid");
}

size_t troupe_memory_mode_to_string(troupe_memory_mode_t m, char *buf, size_t cap)
{
    s_sb_t sb;
    s_sb_init(&sb, buf, cap);
    s_add_mode(&sb, m);
    return sb.len;
}

/* "<mode>/<prov>", or "unknown" for an unset mode (the seed's debug_memory_mode). */
static void s_add_mode_prov(s_sb_t *sb, bool has, troupe_memory_mode_t m, int32_t prov)
{
    if (!has) {
        s_sb_add(sb, "unknown");
        return;
    }
    s_add_mode(sb, m);
    s_sb_addf(sb, "/%" PRId32, prov);
}

size_t troupe_tnode_header(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    troupe_memory_mode_t m;
    int32_t prov = 0;
    bool has = troupe_tnode_get_memory_mode((troupe_tnode_t *)tn, &m, &prov);
    s_sb_t sb;
    s_sb_init(&sb, buf, cap);
    s_sb_addf(&sb, "#%" PRId32 " ", tn->id);
    if (tn->label_count == 0)
        s_sb_addf(&sb, "n%" PRId32, tn->id);
    else
        s_add_label(&sb, tn);
    s_sb_add(&sb, " ");
    s_sb_add(&sb, troupe_prec_name(tn->prec));
    s_sb_add(&sb, " ");
    if (tn->ndims == 0)
        s_sb_add(&sb, "1");
    for (int a = 0; a < tn->ndims; a++)
        s_sb_addf(&sb, a > 0 ? "x%" PRId64 : "%" PRId64, tn->dims[a]);
    s_sb_add(&sb, " ");
    s_add_mode_prov(&sb, has, m, prov);
    return sb.len;
}

/* ---- memory modes: the lattice --------------------------------------------------------------- */

/* Checks ranges and zeroes the fields a kind ignores. */
static bool s_normalize(troupe_memory_mode_t in, troupe_memory_mode_t *out)
{
    troupe_memory_mode_t m = {in.kind, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET};
    bool sharing_ok =
        in.sharing >= TROUPE_SHARING_UNSET && in.sharing <= TROUPE_SHARING_SHARED_CROSS_STREAMS;
    if (in.kind < TROUPE_MM_EFFECTIVELY_CONSTANT || in.kind > TROUPE_MM_HOSTED)
        return false;
    if (in.kind == TROUPE_MM_ON_DEVICE) {
        if (!sharing_ok)
            return false;
        m.sharing = in.sharing;
    } else if (in.kind == TROUPE_MM_HOSTED) {
        if (in.memtype < TROUPE_MEMTYPE_UNSET_HOSTED || in.memtype > TROUPE_MEMTYPE_VOLATILE)
            return false;
        m.memtype = in.memtype;
        if (in.memtype == TROUPE_MEMTYPE_CHANGED_ON_DEVICES) {
            if (!sharing_ok)
                return false;
            m.sharing = in.sharing;
        }
    }
    *out = m;
    return true;
}

static bool s_mode_eq(troupe_memory_mode_t a, troupe_memory_mode_t b)
{
    return a.kind == b.kind && a.memtype == b.memtype && a.sharing == b.sharing;
}

static troupe_memory_mode_t s_mk(troupe_memory_mode_kind_t k, troupe_memory_type_t t,
                                 troupe_sharing_t s)
{
    troupe_memory_mode_t m = {k, t, s};
    return m;
}

static bool s_is_hosted(troupe_memory_mode_t m, troupe_memory_type_t t)
{
    return m.kind == TROUPE_MM_HOSTED && m.memtype == t;
}

/* Old provenance * 1000 + new (OCANNL_NOTES §5.3); when that does not fit in 32 bits the new
 * code alone is kept. */
static int32_t s_chain(int32_t old_prov, int32_t new_prov)
{
    int64_t v = (int64_t)old_prov * 1000 + new_prov;
    return v > INT32_MAX || v < INT32_MIN ? new_prov : (int32_t)v;
}

typedef enum s_outcome {
    s_keep,            /* no change */
    s_set,             /* take *res with the new provenance */
    s_set_chained,     /* take *res with the chained provenance */
    s_err_not_virtual, /* seed: "cannot be virtual" */
    s_err_is_virtual,  /* seed: "is already virtual" */
    s_err_per_stream,  /* seed: hosted non-device-changed nodes must be shared cross-stream */
    s_err_unsetting,   /* seed: un-setting of sharing not allowed */
    s_err_inconsistent,
} s_outcome_t;

static const char *s_outcome_reason(s_outcome_t o)
{
    switch (o) {
    case s_err_not_virtual:
        return "it cannot be virtual";
    case s_err_is_virtual:
        return "it is already virtual";
    case s_err_per_stream:
        return "hosted nodes not changed on devices must be shared cross-stream";
    case s_err_unsetting:
        return "un-setting the sharing is not allowed";
    default:
        return "inconsistent";
    }
}

/* Seed update_memory_mode: the meet of the current mode `c` (when `has`) and the request `r`. */
static s_outcome_t s_refine(bool has, troupe_memory_mode_t c, troupe_memory_mode_t r,
                            troupe_memory_mode_t *res)
{
    const troupe_memory_mode_t hosted_constant =
        s_mk(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_CONSTANT, TROUPE_SHARING_UNSET);
    *res = r;
    if (!has)
        return s_set;
    if (s_mode_eq(c, r))
        return s_keep;
    if (c.kind == TROUPE_MM_NEVER_VIRTUAL && r.kind == TROUPE_MM_VIRTUAL)
        return s_err_not_virtual;

    /* Effectively_constant = Hosted Constant or a kind of Virtual. */
    if (r.kind == TROUPE_MM_EFFECTIVELY_CONSTANT) {
        if (c.kind == TROUPE_MM_VIRTUAL || s_is_hosted(c, TROUPE_MEMTYPE_CONSTANT))
            return s_keep;
        *res = hosted_constant;
        if (c.kind == TROUPE_MM_NEVER_VIRTUAL || c.kind == TROUPE_MM_MATERIALIZED)
            return s_set;
        if (s_is_hosted(c, TROUPE_MEMTYPE_UNSET_HOSTED))
            return s_set_chained;
        return s_err_inconsistent;
    }
    if (c.kind == TROUPE_MM_EFFECTIVELY_CONSTANT) {
        if (r.kind == TROUPE_MM_VIRTUAL)
            return s_set;
        *res = hosted_constant;
        if (r.kind == TROUPE_MM_NEVER_VIRTUAL || r.kind == TROUPE_MM_MATERIALIZED ||
            s_is_hosted(r, TROUPE_MEMTYPE_CONSTANT))
            return s_set;
        if (s_is_hosted(r, TROUPE_MEMTYPE_UNSET_HOSTED))
            return s_set_chained; /* the same meet as above, from the other side */
        return s_err_inconsistent;
    }

    /* Hosted memory types: Unset_hosted > Nonconstant > {Changed_on_devices s, Volatile}. */
    if (c.kind == TROUPE_MM_HOSTED && r.kind == TROUPE_MM_HOSTED) {
        troupe_memory_type_t ct = c.memtype, rt = r.memtype;
        bool c_open =
            ct == TROUPE_MEMTYPE_NONCONSTANT || ct == TROUPE_MEMTYPE_UNSET_HOSTED ||
            (ct == TROUPE_MEMTYPE_CHANGED_ON_DEVICES && c.sharing == TROUPE_SHARING_UNSET);
        if (c_open && (rt == TROUPE_MEMTYPE_CHANGED_ON_DEVICES || rt == TROUPE_MEMTYPE_VOLATILE))
            return s_set;
        if (ct == TROUPE_MEMTYPE_UNSET_HOSTED &&
            (rt == TROUPE_MEMTYPE_CONSTANT || rt == TROUPE_MEMTYPE_NONCONSTANT))
            return s_set;
        if ((ct == TROUPE_MEMTYPE_CHANGED_ON_DEVICES || ct == TROUPE_MEMTYPE_VOLATILE) &&
            rt == TROUPE_MEMTYPE_NONCONSTANT)
            return s_keep;
        if (rt == TROUPE_MEMTYPE_UNSET_HOSTED)
            return s_keep; /* completion: coarser request */
        if (ct == TROUPE_MEMTYPE_CHANGED_ON_DEVICES && rt == TROUPE_MEMTYPE_CHANGED_ON_DEVICES &&
            r.sharing == TROUPE_SHARING_UNSET)
            return s_keep; /* completion: coarser request */
        return s_err_inconsistent;
    }

    if (c.kind == TROUPE_MM_NEVER_VIRTUAL)
        return s_set;
    if (r.kind == TROUPE_MM_NEVER_VIRTUAL)
        return c.kind == TROUPE_MM_VIRTUAL ? s_err_is_virtual : s_keep;
    if (c.kind == TROUPE_MM_DEVICE_ONLY &&
        (r.kind == TROUPE_MM_LOCAL || r.kind == TROUPE_MM_ON_DEVICE))
        return s_set;
    if (c.kind == TROUPE_MM_MATERIALIZED &&
        (r.kind == TROUPE_MM_ON_DEVICE || r.kind == TROUPE_MM_HOSTED))
        return s_set;
    if ((c.kind == TROUPE_MM_LOCAL || c.kind == TROUPE_MM_ON_DEVICE) &&
        r.kind == TROUPE_MM_DEVICE_ONLY)
        return s_keep;
    if ((c.kind == TROUPE_MM_ON_DEVICE || c.kind == TROUPE_MM_HOSTED) &&
        r.kind == TROUPE_MM_MATERIALIZED)
        return s_keep;
    if ((c.kind == TROUPE_MM_DEVICE_ONLY && r.kind == TROUPE_MM_MATERIALIZED) ||
        (c.kind == TROUPE_MM_MATERIALIZED && r.kind == TROUPE_MM_DEVICE_ONLY)) {
        *res = s_mk(TROUPE_MM_ON_DEVICE, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET);
        return s_set;
    }
    if (c.kind == TROUPE_MM_ON_DEVICE && r.kind == TROUPE_MM_ON_DEVICE) {
        if (c.sharing == TROUPE_SHARING_UNSET)
            return s_set;
        if (r.sharing == TROUPE_SHARING_UNSET)
            return s_keep; /* completion: coarser request */
    }
    return s_err_inconsistent;
}

/* Seed update_memory_sharing. */
static s_outcome_t s_refine_sharing(bool has, troupe_memory_mode_t c, troupe_sharing_t s,
                                    troupe_memory_mode_t *res)
{
    *res = s_mk(TROUPE_MM_ON_DEVICE, TROUPE_MEMTYPE_UNSET_HOSTED, s);
    if (!has)
        return s_set;
    if (c.kind == TROUPE_MM_ON_DEVICE && c.sharing != TROUPE_SHARING_UNSET && c.sharing == s)
        return s_keep;
    if ((c.kind == TROUPE_MM_ON_DEVICE && c.sharing == TROUPE_SHARING_UNSET) ||
        c.kind == TROUPE_MM_DEVICE_ONLY || c.kind == TROUPE_MM_MATERIALIZED)
        return s_set;
    if (c.kind == TROUPE_MM_HOSTED) {
        troupe_memory_type_t ct = c.memtype;
        bool const_or_volatile = ct == TROUPE_MEMTYPE_CONSTANT || ct == TROUPE_MEMTYPE_VOLATILE;
        if (const_or_volatile && s == TROUPE_SHARING_PER_STREAM)
            return s_err_per_stream;
        if (ct == TROUPE_MEMTYPE_CHANGED_ON_DEVICES && c.sharing != TROUPE_SHARING_UNSET &&
            c.sharing == s)
            return s_keep;
        if (const_or_volatile && s == TROUPE_SHARING_SHARED_CROSS_STREAMS)
            return s_keep;
        if (ct == TROUPE_MEMTYPE_NONCONSTANT || ct == TROUPE_MEMTYPE_UNSET_HOSTED ||
            (ct == TROUPE_MEMTYPE_CHANGED_ON_DEVICES && c.sharing == TROUPE_SHARING_UNSET)) {
            *res = s_mk(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_CHANGED_ON_DEVICES, s);
            return s_set_chained; /* e.g. Host&stream/24410 */
        }
    }
    if (s == TROUPE_SHARING_UNSET)
        return s_err_unsetting;
    return s_err_inconsistent;
}

/* Applies an outcome to tn (lock held); on error records the message and returns
 * FAILED_PRECONDITION with the mode unchanged. `req_text` describes the request. */
static troupe_status_t s_apply_locked(troupe_tnode_t *tn, s_outcome_t o, troupe_memory_mode_t res,
                                      int32_t provenance, const char *req_text)
{
    switch (o) {
    case s_keep:
        return TROUPE_OK;
    case s_set:
        tn->memory_mode = res;
        tn->provenance = provenance;
        tn->has_memory_mode = true;
        return TROUPE_OK;
    case s_set_chained:
        tn->memory_mode = res;
        tn->provenance = tn->has_memory_mode ? s_chain(tn->provenance, provenance) : provenance;
        tn->has_memory_mode = true;
        return TROUPE_OK;
    default:
        break;
    }
    char name[96], cur[96];
    s_sb_t sb;
    troupe_tnode_debug_name(tn, name, sizeof name);
    s_sb_init(&sb, cur, sizeof cur);
    s_add_mode_prov(&sb, tn->has_memory_mode, tn->memory_mode, tn->provenance);
    return troupe__error(TROUPE_FAILED_PRECONDITION,
                         "%s: memory mode %s cannot become %s/%" PRId32 ": %s", name, cur, req_text,
                         provenance, s_outcome_reason(o));
}

static troupe_status_t s_update_mode_locked(troupe_tnode_t *tn, troupe_memory_mode_t mode,
                                            int32_t provenance)
{
    troupe_memory_mode_t req, res;
    if (!s_normalize(mode, &req)) {
        char name[96];
        troupe_tnode_debug_name(tn, name, sizeof name);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s: invalid memory mode (kind %d, memtype %d, sharing %d)", name,
                             (int)mode.kind, (int)mode.memtype, (int)mode.sharing);
    }
    s_outcome_t o = s_refine(tn->has_memory_mode, tn->memory_mode, req, &res);
    char req_text[96];
    troupe_memory_mode_to_string(req, req_text, sizeof req_text);
    return s_apply_locked(tn, o, res, provenance, req_text);
}

troupe_status_t troupe_tnode_update_memory_mode(troupe_tnode_t *tn, troupe_memory_mode_t mode,
                                                int32_t provenance)
{
    if (!tn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "update_memory_mode: tn is NULL");
    pthread_mutex_lock(&tn->lock);
    troupe_status_t st = s_update_mode_locked(tn, mode, provenance);
    pthread_mutex_unlock(&tn->lock);
    return st;
}

troupe_status_t troupe_tnode_update_memory_sharing(troupe_tnode_t *tn, troupe_sharing_t sharing,
                                                   int32_t provenance)
{
    if (!tn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "update_memory_sharing: tn is NULL");
    if (sharing < TROUPE_SHARING_UNSET || sharing > TROUPE_SHARING_SHARED_CROSS_STREAMS) {
        char name[96];
        troupe_tnode_debug_name(tn, name, sizeof name);
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: invalid sharing %d", name, (int)sharing);
    }
    pthread_mutex_lock(&tn->lock);
    troupe_memory_mode_t res;
    s_outcome_t o = s_refine_sharing(tn->has_memory_mode, tn->memory_mode, sharing, &res);
    char req_text[64];
    snprintf(req_text, sizeof req_text, "sharing %s", s_sharing_name(sharing));
    troupe_status_t st = s_apply_locked(tn, o, res, provenance, req_text);
    pthread_mutex_unlock(&tn->lock);
    return st;
}

bool troupe_tnode_get_memory_mode(troupe_tnode_t *tn, troupe_memory_mode_t *mode,
                                  int32_t *provenance)
{
    pthread_mutex_lock(&tn->lock);
    bool has = tn->has_memory_mode;
    if (mode)
        *mode = has ? tn->memory_mode
                    : s_mk((troupe_memory_mode_kind_t)0, TROUPE_MEMTYPE_UNSET_HOSTED,
                           TROUPE_SHARING_UNSET);
    if (provenance)
        *provenance = has ? tn->provenance : 0;
    pthread_mutex_unlock(&tn->lock);
    return has;
}

/* ---- placeholders and predicates --------------------------------------------------------- */

static void s_default_to_most_local_locked(troupe_tnode_t *tn, int32_t provenance)
{
    troupe_memory_mode_kind_t k =
        tn->has_memory_mode ? tn->memory_mode.kind : TROUPE_MM_EFFECTIVELY_CONSTANT;
    troupe_memory_mode_t m;
    switch (k) {
    case TROUPE_MM_EFFECTIVELY_CONSTANT: /* or unset */
        m = s_mk(TROUPE_MM_VIRTUAL, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET);
        break;
    case TROUPE_MM_NEVER_VIRTUAL:
    case TROUPE_MM_DEVICE_ONLY:
        m = s_mk(tn->size_bytes <= troupe_config_stack_threshold_bytes() ? TROUPE_MM_LOCAL
                                                                         : TROUPE_MM_ON_DEVICE,
                 TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET);
        break;
    case TROUPE_MM_MATERIALIZED:
        m = s_mk(TROUPE_MM_ON_DEVICE, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET);
        break;
    default: /* Virtual, Local, On_device, Hosted: already resolved */
        return;
    }
    tn->memory_mode = m;
    tn->provenance = provenance;
    tn->has_memory_mode = true;
}

void troupe_tnode_default_to_most_local(troupe_tnode_t *tn, int32_t provenance)
{
    pthread_mutex_lock(&tn->lock);
    s_default_to_most_local_locked(tn, provenance);
    pthread_mutex_unlock(&tn->lock);
}

/* Snapshot; kind 0 when unset. */
static troupe_memory_mode_t s_snapshot(troupe_tnode_t *tn, bool force, int32_t provenance)
{
    troupe_memory_mode_t m = {(troupe_memory_mode_kind_t)0, TROUPE_MEMTYPE_UNSET_HOSTED,
                              TROUPE_SHARING_UNSET};
    pthread_mutex_lock(&tn->lock);
    if (force)
        s_default_to_most_local_locked(tn, provenance);
    if (tn->has_memory_mode)
        m = tn->memory_mode;
    pthread_mutex_unlock(&tn->lock);
    return m;
}

bool troupe_tnode_known_not_materialized(troupe_tnode_t *tn)
{
    troupe_memory_mode_t m = s_snapshot(tn, false, 0);
    return m.kind == TROUPE_MM_VIRTUAL || m.kind == TROUPE_MM_LOCAL;
}

bool troupe_tnode_known_constant(troupe_tnode_t *tn)
{
    troupe_memory_mode_t m = s_snapshot(tn, false, 0);
    return m.kind == TROUPE_MM_EFFECTIVELY_CONSTANT || s_is_hosted(m, TROUPE_MEMTYPE_CONSTANT);
}

bool troupe_tnode_known_volatile(troupe_tnode_t *tn)
{
    return s_is_hosted(s_snapshot(tn, false, 0), TROUPE_MEMTYPE_VOLATILE);
}

bool troupe_tnode_known_non_virtual(troupe_tnode_t *tn)
{
    troupe_memory_mode_t m = s_snapshot(tn, false, 0);
    return m.kind != 0 && m.kind != TROUPE_MM_VIRTUAL && m.kind != TROUPE_MM_EFFECTIVELY_CONSTANT;
}

bool troupe_tnode_known_virtual(troupe_tnode_t *tn)
{
    return s_snapshot(tn, false, 0).kind == TROUPE_MM_VIRTUAL;
}

static bool s_non_cross_stream(troupe_memory_mode_t m)
{
    return (m.kind == TROUPE_MM_ON_DEVICE && m.sharing == TROUPE_SHARING_PER_STREAM) ||
           (s_is_hosted(m, TROUPE_MEMTYPE_CHANGED_ON_DEVICES) &&
            m.sharing == TROUPE_SHARING_PER_STREAM);
}

bool troupe_tnode_known_non_cross_stream(troupe_tnode_t *tn)
{
    return s_non_cross_stream(s_snapshot(tn, false, 0));
}

bool troupe_tnode_known_shared_cross_streams(troupe_tnode_t *tn)
{
    troupe_memory_mode_t m = s_snapshot(tn, false, 0);
    return (m.kind == TROUPE_MM_ON_DEVICE && m.sharing == TROUPE_SHARING_SHARED_CROSS_STREAMS) ||
           s_is_hosted(m, TROUPE_MEMTYPE_CONSTANT) || s_is_hosted(m, TROUPE_MEMTYPE_VOLATILE) ||
           (s_is_hosted(m, TROUPE_MEMTYPE_CHANGED_ON_DEVICES) &&
            m.sharing == TROUPE_SHARING_SHARED_CROSS_STREAMS);
}

bool troupe_tnode_potentially_cross_stream(troupe_tnode_t *tn)
{
    troupe_memory_mode_t m = s_snapshot(tn, false, 0);
    bool not_materialized = m.kind == TROUPE_MM_VIRTUAL || m.kind == TROUPE_MM_LOCAL;
    return !(not_materialized || s_non_cross_stream(m));
}

bool troupe_tnode_mode_is_unspecified(troupe_tnode_t *tn)
{
    troupe_memory_mode_t m = s_snapshot(tn, false, 0);
    return m.kind == 0 || m.kind == TROUPE_MM_NEVER_VIRTUAL ||
           m.kind == TROUPE_MM_EFFECTIVELY_CONSTANT;
}

bool troupe_tnode_is_virtual_force(troupe_tnode_t *tn, int32_t provenance)
{
    return s_snapshot(tn, true, provenance).kind == TROUPE_MM_VIRTUAL;
}

bool troupe_tnode_is_hosted_force(troupe_tnode_t *tn, int32_t provenance)
{
    return s_snapshot(tn, true, provenance).kind == TROUPE_MM_HOSTED;
}

bool troupe_tnode_is_materialized_force(troupe_tnode_t *tn, int32_t provenance)
{
    troupe_memory_mode_kind_t k = s_snapshot(tn, true, provenance).kind;
    return k == TROUPE_MM_ON_DEVICE || k == TROUPE_MM_HOSTED;
}

bool troupe_tnode_is_in_context_force(troupe_tnode_t *tn, bool use_host_memory, int32_t provenance)
{
    troupe_memory_mode_t m = s_snapshot(tn, true, provenance);
    switch (m.kind) {
    case TROUPE_MM_HOSTED:
        /* On unified host memory the kernel uses the host array of a constant or volatile
         * node directly; everything else hosted has an array in the context. */
        return !(use_host_memory &&
                 (m.memtype == TROUPE_MEMTYPE_CONSTANT || m.memtype == TROUPE_MEMTYPE_VOLATILE));
    case TROUPE_MM_ON_DEVICE:
        return true;
    default: /* Virtual, Local (placeholders were resolved) */
        return false;
    }
}

/* ---- devices not lagging host ------------------------------------------------------------ */

troupe_status_t troupe_tnode_mark_not_lagging(troupe_tnode_t *tn, int32_t device_id)
{
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&tn->lock);
    for (size_t i = 0; i < tn->devices_not_lagging_count; i++)
        if (tn->devices_not_lagging_host[i] == device_id)
            goto out_unlock;
    if (tn->devices_not_lagging_count == tn->devices_not_lagging_cap) {
        size_t cap = tn->devices_not_lagging_cap ? 2 * tn->devices_not_lagging_cap : 4;
        int32_t *p = troupe_realloc(tn->devices_not_lagging_host, cap * sizeof *p);
        if (!p) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                               "tnode: out of memory marking device %" PRId32, device_id);
            goto out_unlock;
        }
        tn->devices_not_lagging_host = p;
        tn->devices_not_lagging_cap = cap;
    }
    tn->devices_not_lagging_host[tn->devices_not_lagging_count++] = device_id;
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
        s_mk(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET);
    troupe_memory_mode_t nonconstant =
        s_mk(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, TROUPE_SHARING_UNSET);
    troupe_status_t st;
    if (!write) {
        st = s_update_mode_locked(tn, unset_hosted, s_prov_host_array);
    } else {
        bool constant =
            tn->has_memory_mode && (tn->memory_mode.kind == TROUPE_MM_EFFECTIVELY_CONSTANT ||
                                    s_is_hosted(tn->memory_mode, TROUPE_MEMTYPE_CONSTANT));
        st = s_update_mode_locked(tn, constant ? unset_hosted : nonconstant, s_prov_host_write);
    }
    if (st != TROUPE_OK)
        return st;
    if (!tn->host) {
        tn->host = troupe_calloc(1, tn->size_bytes);
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
