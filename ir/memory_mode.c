/* troupe — the memory-mode lattice of tensor nodes (see ir/memory_mode.h).
 *
 * s_refine and s_refine_sharing are the seed's update_memory_mode and update_memory_sharing
 * (OCANNL_NOTES §5.2, OCANNL 0.6 `tnode.ml`), with the Unset_hosted and On_device Unset rules of
 * the notes and one completion: a request coarser than the current mode (Hosted Unset_hosted
 * of a hosted node, On_device Unset of On_device s, Changed_on_devices Unset of
 * Changed_on_devices s) is a no-op, as the seed already does for Never_virtual, Device_only,
 * Materialized and Nonconstant requests.
 */
#define _POSIX_C_SOURCE 200809L
#include "ir/memory_mode.h"

#include "base/config.h"
#include "base/strbuf.h"
#include "ir/memory_mode_impl.h"
#include "ir/tnode.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- memory modes: text -------------------------------------------------------------------- */

static const char *const s_sharing_names[] = {
    [TROUPE_SHARING_UNSET] = "Unset",
    [TROUPE_SHARING_PER_STREAM] = "Per_stream",
    [TROUPE_SHARING_SHARED_CROSS_STREAMS] = "Shared_cross_streams",
};

/* Kinds and hosted memory types; the ones written with a sharing end in '('. */
static const char *const s_kind_names[] = {
    [TROUPE_MM_EFFECTIVELY_CONSTANT] = "Effectively_constant",
    [TROUPE_MM_VIRTUAL] = "Virtual",
    [TROUPE_MM_NEVER_VIRTUAL] = "Never_virtual",
    [TROUPE_MM_LOCAL] = "Local",
    [TROUPE_MM_DEVICE_ONLY] = "Device_only",
    [TROUPE_MM_ON_DEVICE] = "On_device(",
    [TROUPE_MM_MATERIALIZED] = "Materialized",
    [TROUPE_MM_HOSTED] = "Hosted(",
};
static const char *const s_memtype_names[] = {
    [TROUPE_MEMTYPE_UNSET_HOSTED] = "Unset_hosted",
    [TROUPE_MEMTYPE_CONSTANT] = "Constant",
    [TROUPE_MEMTYPE_NONCONSTANT] = "Nonconstant",
    [TROUPE_MEMTYPE_CHANGED_ON_DEVICES] = "Changed_on_devices(",
    [TROUPE_MEMTYPE_VOLATILE] = "Volatile",
};

#define S_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* names[i], or "Invalid" out of range. */
static const char *s_name(const char *const *names, size_t count, int i)
{
    return i >= 0 && (size_t)i < count && names[i] != NULL ? names[i] : "Invalid";
}

static const char *s_sharing_name(troupe_sharing_t s)
{
    return s_name(s_sharing_names, S_COUNT(s_sharing_names), (int)s);
}

/* `name`, and when it ends in '(' the sharing and ')'. */
static void s_put_named(troupe__strbuf_t *sb, const char *name, troupe_sharing_t sharing)
{
    troupe__strbuf_puts(sb, name);
    if (name[strlen(name) - 1] == '(') {
        troupe__strbuf_puts(sb, s_sharing_name(sharing));
        troupe__strbuf_puts(sb, ")");
    }
}

void troupe__memory_mode_put(troupe__strbuf_t *sb, troupe_memory_mode_t m)
{
    const char *kind = s_name(s_kind_names, S_COUNT(s_kind_names), (int)m.kind);
    if (m.kind != TROUPE_MM_HOSTED) {
        s_put_named(sb, kind, m.sharing);
        return;
    }
    troupe__strbuf_puts(sb, kind);
    s_put_named(sb, s_name(s_memtype_names, S_COUNT(s_memtype_names), (int)m.memtype), m.sharing);
    troupe__strbuf_puts(sb, ")");
}

size_t troupe_memory_mode_to_string(troupe_memory_mode_t m, char *buf, size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    troupe__memory_mode_put(&sb, m);
    return sb.len;
}

void troupe__memory_mode_put_prov(troupe__strbuf_t *sb, bool has, troupe_memory_mode_t m,
                                  int32_t prov)
{
    if (!has) {
        troupe__strbuf_puts(sb, "unknown");
        return;
    }
    troupe__memory_mode_put(sb, m);
    troupe__strbuf_printf(sb, "/%" PRId32, prov);
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
        troupe__mm(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_CONSTANT, TROUPE_SHARING_UNSET);
    *res = r;
    if (!has)
        return s_set;
    if (s_mode_eq(c, r))
        return s_keep;
    if (c.kind == TROUPE_MM_NEVER_VIRTUAL && r.kind == TROUPE_MM_VIRTUAL)
        return s_err_not_virtual;

    /* Effectively_constant = Hosted Constant or a kind of Virtual. */
    if (r.kind == TROUPE_MM_EFFECTIVELY_CONSTANT) {
        if (c.kind == TROUPE_MM_VIRTUAL || troupe__mm_is_hosted(c, TROUPE_MEMTYPE_CONSTANT))
            return s_keep;
        *res = hosted_constant;
        if (c.kind == TROUPE_MM_NEVER_VIRTUAL || c.kind == TROUPE_MM_MATERIALIZED)
            return s_set;
        if (troupe__mm_is_hosted(c, TROUPE_MEMTYPE_UNSET_HOSTED))
            return s_set_chained;
        return s_err_inconsistent;
    }
    if (c.kind == TROUPE_MM_EFFECTIVELY_CONSTANT) {
        if (r.kind == TROUPE_MM_VIRTUAL)
            return s_set;
        *res = hosted_constant;
        if (r.kind == TROUPE_MM_NEVER_VIRTUAL || r.kind == TROUPE_MM_MATERIALIZED ||
            troupe__mm_is_hosted(r, TROUPE_MEMTYPE_CONSTANT))
            return s_set;
        if (troupe__mm_is_hosted(r, TROUPE_MEMTYPE_UNSET_HOSTED))
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
        *res = troupe__mm(TROUPE_MM_ON_DEVICE, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET);
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
    *res = troupe__mm(TROUPE_MM_ON_DEVICE, TROUPE_MEMTYPE_UNSET_HOSTED, s);
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
            *res = troupe__mm(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_CHANGED_ON_DEVICES, s);
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
    troupe__strbuf_t sb;
    troupe_tnode_debug_name(tn, name, sizeof name);
    troupe__strbuf_init_fixed(&sb, cur, sizeof cur);
    troupe__memory_mode_put_prov(&sb, tn->has_memory_mode, tn->memory_mode, tn->provenance);
    return troupe__error(TROUPE_FAILED_PRECONDITION,
                         "%s: memory mode %s cannot become %s/%" PRId32 ": %s", name, cur, req_text,
                         provenance, s_outcome_reason(o));
}

troupe_status_t troupe__tnode_update_mode_locked(troupe_tnode_t *tn, troupe_memory_mode_t mode,
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
    troupe_status_t st = troupe__tnode_update_mode_locked(tn, mode, provenance);
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
                    : troupe__mm((troupe_memory_mode_kind_t)0, TROUPE_MEMTYPE_UNSET_HOSTED,
                                 TROUPE_SHARING_UNSET);
    if (provenance)
        *provenance = has ? tn->provenance : 0;
    pthread_mutex_unlock(&tn->lock);
    return has;
}

/* ---- placeholders and predicates --------------------------------------------------------- */

static void s_default_to_most_local_locked(troupe_tnode_t *tn, int32_t provenance,
                                           int64_t local_max_bytes)
{
    if (local_max_bytes < 0)
        local_max_bytes = (int64_t)troupe_config_stack_threshold_bytes();
    troupe_memory_mode_kind_t k =
        tn->has_memory_mode ? tn->memory_mode.kind : TROUPE_MM_EFFECTIVELY_CONSTANT;
    troupe_memory_mode_t m;
    switch (k) {
    case TROUPE_MM_EFFECTIVELY_CONSTANT: /* or unset */
        m = troupe__mm(TROUPE_MM_VIRTUAL, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET);
        break;
    case TROUPE_MM_NEVER_VIRTUAL:
    case TROUPE_MM_DEVICE_ONLY:
        m = troupe__mm((int64_t)tn->size_bytes <= local_max_bytes ? TROUPE_MM_LOCAL
                                                                 : TROUPE_MM_ON_DEVICE,
                       TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET);
        break;
    case TROUPE_MM_MATERIALIZED:
        m = troupe__mm(TROUPE_MM_ON_DEVICE, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET);
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
    troupe_tnode_default_to_most_local_within(tn, provenance, -1);
}

void troupe_tnode_default_to_most_local_within(troupe_tnode_t *tn, int32_t provenance,
                                               int64_t local_max_bytes)
{
    pthread_mutex_lock(&tn->lock);
    s_default_to_most_local_locked(tn, provenance, local_max_bytes);
    pthread_mutex_unlock(&tn->lock);
}

/* Snapshot; kind 0 when unset. */
static troupe_memory_mode_t s_snapshot(troupe_tnode_t *tn, bool force, int32_t provenance)
{
    troupe_memory_mode_t m = {(troupe_memory_mode_kind_t)0, TROUPE_MEMTYPE_UNSET_HOSTED,
                              TROUPE_SHARING_UNSET};
    pthread_mutex_lock(&tn->lock);
    if (force)
        s_default_to_most_local_locked(tn, provenance, -1);
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

bool troupe_tnode_known_hosted(troupe_tnode_t *tn)
{
    return s_snapshot(tn, false, 0).kind == TROUPE_MM_HOSTED;
}

bool troupe_tnode_known_constant(troupe_tnode_t *tn)
{
    troupe_memory_mode_t m = s_snapshot(tn, false, 0);
    return m.kind == TROUPE_MM_EFFECTIVELY_CONSTANT ||
           troupe__mm_is_hosted(m, TROUPE_MEMTYPE_CONSTANT);
}

bool troupe_tnode_known_volatile(troupe_tnode_t *tn)
{
    return troupe__mm_is_hosted(s_snapshot(tn, false, 0), TROUPE_MEMTYPE_VOLATILE);
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
           (troupe__mm_is_hosted(m, TROUPE_MEMTYPE_CHANGED_ON_DEVICES) &&
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
           troupe__mm_is_hosted(m, TROUPE_MEMTYPE_CONSTANT) ||
           troupe__mm_is_hosted(m, TROUPE_MEMTYPE_VOLATILE) ||
           (troupe__mm_is_hosted(m, TROUPE_MEMTYPE_CHANGED_ON_DEVICES) &&
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
