/* troupe — the host-memory driver core of the `cpu` and `sync` drivers (see host_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include "devices/host/host_impl.h"

#include "base/alloc.h"
#include "base/log.h"
#include "base/shared_memory_impl.h"
#include "base/status.h"
#include "base/vec.h"
#include "base/config.h"
#include "base/fpmode_impl.h"
#include "compiler/cgen.h"
#include "devices/host/cc_cache_impl.h"
#include "devices/host/gemm_library.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define S_POOL_ALIGN 64
/* Launches with at most this many parameters build their argument array on the stack. */
#define S_STACK_ARGS 32

typedef struct s_pool {
    int32_t id;
    void *base;
    int64_t size_bytes;
} s_pool_t;

typedef struct s_host_driver {
    troupe_driver_t base; /* first: the vtable header */
    pthread_mutex_t lock; /* guards the pool table */
    s_pool_t *pools;      /* sorted by id */
    size_t npools, cap;
} s_host_driver_t;

struct troupe_dqueue {
    int ordinal;
};

struct troupe_devent {
    troupe_status_t status; /* host work is finished when recorded: always OK for now */
};

typedef void (*s_entry_fn)(void **args);

typedef struct s_param {
    troupe_cgen_param_kind_t kind;
    int64_t min_size_bytes; /* NODE_PTR / MERGE_BUFFER: the node's size */
    int64_t static_range;   /* STATIC_IDX: 0 = unbounded */
    char *ident;
} s_param_t;

struct troupe_dcode {
    char *name;
    void *lib;
    s_entry_fn entry;
    size_t nparams;
    s_param_t *params;
};

static s_host_driver_t *s_self(troupe_driver_t *drv)
{
    return (s_host_driver_t *)drv;
}

static const char *s_name(troupe_driver_t *drv)
{
    return drv && drv->vt && drv->vt->name ? drv->vt->name : "host";
}

static troupe_status_t s_check_ordinal(troupe_driver_t *drv, const char *op, int ordinal)
{
    if (ordinal != 0)
        return troupe__error(TROUPE_NOT_FOUND, "%s %s: no device %d (the driver has 1 device, 0)",
                             s_name(drv), op, ordinal);
    return TROUPE_OK;
}

/* Index of the first pool with id >= pool_id (lock held). */
static size_t s_lower_bound(const s_host_driver_t *d, int32_t pool_id)
{
    size_t lo = 0, hi = d->npools;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->pools[mid].id < pool_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Resolves `buf` on device `ordinal` to a host pointer, checking that the whole buffer lies in
 * its pool. */
static troupe_status_t s_resolve(troupe_driver_t *drv, const char *op, int ordinal,
                                 troupe_buffer_loc_t buf, void **out)
{
    TROUPE_RETURN_IF_ERROR(s_check_ordinal(drv, op, ordinal));
    if (buf.offset < 0 || buf.size_bytes < 0)
        return troupe__error(
            TROUPE_INVALID_ARGUMENT, "%s %s: negative offset %lld or size %lld bytes in pool %d",
            s_name(drv), op, (long long)buf.offset, (long long)buf.size_bytes, (int)buf.pool_id);
    s_host_driver_t *d = s_self(drv);
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&d->lock);
    size_t i = s_lower_bound(d, buf.pool_id);
    if (i == d->npools || d->pools[i].id != buf.pool_id) {
        st = troupe__error(TROUPE_NOT_FOUND,
                           "%s %s: pool %d not found on device 0 (buffer at offset %lld, %lld "
                           "bytes)",
                           s_name(drv), op, (int)buf.pool_id, (long long)buf.offset,
                           (long long)buf.size_bytes);
    } else if (buf.offset > d->pools[i].size_bytes ||
               buf.size_bytes > d->pools[i].size_bytes - buf.offset) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT,
                           "%s %s: buffer at offset %lld of %lld bytes exceeds pool %d of %lld "
                           "bytes",
                           s_name(drv), op, (long long)buf.offset, (long long)buf.size_bytes,
                           (int)buf.pool_id, (long long)d->pools[i].size_bytes);
    } else {
        *out = (char *)d->pools[i].base + buf.offset;
    }
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* ---- driver and devices ------------------------------------------------------------------ */

troupe_status_t troupe__hdrv_open(const troupe_driver_vtable_t *vt, troupe_driver_t **out)
{
    if (!vt || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "open: NULL vtable or output");
    *out = NULL;
    s_host_driver_t *d = troupe_calloc(1, sizeof *d);
    if (!d)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s open: out of memory", vt->name);
    if (pthread_mutex_init(&d->lock, NULL) != 0) {
        troupe_free(d);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s open: pthread_mutex_init failed",
                             vt->name);
    }
    d->base.vt = vt;
    *out = &d->base;
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES, "%s driver opened", vt->name);
    return TROUPE_OK;
}

void troupe__hdrv_close(troupe_driver_t *drv)
{
    if (!drv)
        return;
    s_host_driver_t *d = s_self(drv);
    if (d->npools > 0)
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                   "%s close: freeing %zu pools still "
                   "allocated",
                   s_name(drv), d->npools);
    for (size_t i = 0; i < d->npools; i++)
        if (!troupe__shm_free(d->pools[i].base))
            free(d->pools[i].base);
    troupe_free(d->pools);
    pthread_mutex_destroy(&d->lock);
    troupe_free(d);
}

int troupe__hdrv_num_devices(troupe_driver_t *drv)
{
    return 1;
}

/* ---- memory ------------------------------------------------------------------------------ */

troupe_status_t troupe__hdrv_alloc_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id,
                                        int64_t size_bytes, bool zero)
{
    TROUPE_RETURN_IF_ERROR(s_check_ordinal(drv, "alloc_pool", ordinal));
    if (size_bytes < 0 || (uint64_t)size_bytes > (uint64_t)SIZE_MAX - S_POOL_ALIGN)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s alloc_pool: pool %d: bad size %lld bytes",
                             s_name(drv), (int)pool_id, (long long)size_bytes);
    /* Round up to the alignment (and to at least one block, so a 0-byte pool has an address). */
    size_t alloc = ((size_t)size_bytes + S_POOL_ALIGN - 1) / S_POOL_ALIGN * S_POOL_ALIGN;
    if (alloc == 0)
        alloc = S_POOL_ALIGN;

    s_host_driver_t *d = s_self(drv);
    troupe_status_t st = TROUPE_OK;
    void *base = NULL;
    pthread_mutex_lock(&d->lock);
    size_t i = s_lower_bound(d, pool_id);
    if (i < d->npools && d->pools[i].id == pool_id) {
        st = troupe__error(TROUPE_ALREADY_EXISTS,
                           "%s alloc_pool: pool %d already exists on device 0 (%lld bytes)",
                           s_name(drv), (int)pool_id, (long long)d->pools[i].size_bytes);
        goto out_unlock;
    }
    if (!TROUPE__VEC_RESERVE(d->pools, d->cap, d->npools + 1)) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                           "%s alloc_pool: pool %d: out of memory for the pool table", s_name(drv),
                           (int)pool_id);
        goto out_unlock;
    }
    /* Shareable when the transport asked for it (base/shared_memory_impl.h: ranks on this node then
     * reduce gradients in each other's pools); zero-filled, page-aligned. Else ordinary memory. */
    bool shared = troupe__shm_pools() && alloc >= TROUPE__SHM_MIN_BYTES &&
                  (base = troupe__shm_alloc(alloc)) != NULL;
    if (shared)
        zero = false;
    else if (posix_memalign(&base, S_POOL_ALIGN, alloc) != 0) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                           "%s alloc_pool: pool %d: cannot allocate %lld bytes of host memory",
                           s_name(drv), (int)pool_id, (long long)size_bytes);
        goto out_unlock;
    }
    if (zero)
        memset(base, 0, alloc);
    memmove(&d->pools[i + 1], &d->pools[i], (d->npools - i) * sizeof *d->pools);
    d->pools[i] = (s_pool_t){.id = pool_id, .base = base, .size_bytes = size_bytes};
    d->npools++;
out_unlock:
    pthread_mutex_unlock(&d->lock);
    return st;
}

troupe_status_t troupe__hdrv_free_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id)
{
    TROUPE_RETURN_IF_ERROR(s_check_ordinal(drv, "free_pool", ordinal));
    s_host_driver_t *d = s_self(drv);
    troupe_status_t st = TROUPE_OK;
    void *base = NULL;
    pthread_mutex_lock(&d->lock);
    size_t i = s_lower_bound(d, pool_id);
    if (i == d->npools || d->pools[i].id != pool_id) {
        st = troupe__error(TROUPE_NOT_FOUND, "%s free_pool: pool %d not found on device 0",
                           s_name(drv), (int)pool_id);
    } else {
        base = d->pools[i].base;
        memmove(&d->pools[i], &d->pools[i + 1], (d->npools - i - 1) * sizeof *d->pools);
        d->npools--;
    }
    pthread_mutex_unlock(&d->lock);
    if (!troupe__shm_free(base))
        free(base);
    return st;
}

troupe_status_t troupe__hdrv_host_ptr(troupe_driver_t *drv, int ordinal, troupe_buffer_loc_t buf,
                                      void **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s host_ptr: NULL output", s_name(drv));
    return s_resolve(drv, "host_ptr", ordinal, buf, out);
}

/* ---- queues ------------------------------------------------------------------------------ */

troupe_status_t troupe__hdrv_queue_create(troupe_driver_t *drv, int ordinal, troupe_dqueue_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s queue_create: NULL output", s_name(drv));
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(s_check_ordinal(drv, "queue_create", ordinal));
    troupe_dqueue_t *q = troupe_calloc(1, sizeof *q);
    if (!q)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s queue_create: out of memory",
                             s_name(drv));
    q->ordinal = ordinal;
    *out = q;
    return TROUPE_OK;
}

void troupe__hdrv_queue_destroy(troupe_driver_t *drv, troupe_dqueue_t *q)
{
    troupe_free(q);
}

static troupe_status_t s_check_queue(troupe_driver_t *drv, const char *op, troupe_dqueue_t *q)
{
    if (!q)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s %s: NULL queue", s_name(drv), op);
    return TROUPE_OK;
}

/* A copy of size_bytes into/out of buffer `buf`: the size must fit the buffer. */
static troupe_status_t s_check_copy_size(troupe_driver_t *drv, const char *op,
                                         troupe_buffer_loc_t buf, int64_t size_bytes)
{
    if (size_bytes < 0 || size_bytes > buf.size_bytes)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s %s: copy of %lld bytes does not fit the buffer of %lld bytes at "
                             "offset %lld of pool %d",
                             s_name(drv), op, (long long)size_bytes, (long long)buf.size_bytes,
                             (long long)buf.offset, (int)buf.pool_id);
    return TROUPE_OK;
}

troupe_status_t troupe__hdrv_memset_zero(troupe_driver_t *drv, troupe_dqueue_t *q,
                                         troupe_buffer_loc_t dst)
{
    TROUPE_RETURN_IF_ERROR(s_check_queue(drv, "memset_zero", q));
    void *p = NULL;
    TROUPE_RETURN_IF_ERROR(s_resolve(drv, "memset_zero", q->ordinal, dst, &p));
    memset(p, 0, (size_t)dst.size_bytes);
    return TROUPE_OK;
}

troupe_status_t troupe__hdrv_h2d(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_buffer_loc_t dst,
                                 const void *src, int64_t size_bytes)
{
    TROUPE_RETURN_IF_ERROR(s_check_queue(drv, "h2d", q));
    TROUPE_RETURN_IF_ERROR(s_check_copy_size(drv, "h2d", dst, size_bytes));
    if (!src && size_bytes > 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s h2d: NULL host source", s_name(drv));
    void *p = NULL;
    TROUPE_RETURN_IF_ERROR(s_resolve(drv, "h2d", q->ordinal, dst, &p));
    if (size_bytes > 0)
        memcpy(p, src, (size_t)size_bytes);
    return TROUPE_OK;
}

troupe_status_t troupe__hdrv_d2h(troupe_driver_t *drv, troupe_dqueue_t *q, void *dst,
                                 troupe_buffer_loc_t src, int64_t size_bytes)
{
    TROUPE_RETURN_IF_ERROR(s_check_queue(drv, "d2h", q));
    TROUPE_RETURN_IF_ERROR(s_check_copy_size(drv, "d2h", src, size_bytes));
    if (!dst && size_bytes > 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s d2h: NULL host destination", s_name(drv));
    void *p = NULL;
    TROUPE_RETURN_IF_ERROR(s_resolve(drv, "d2h", q->ordinal, src, &p));
    if (size_bytes > 0)
        memcpy(dst, p, (size_t)size_bytes);
    return TROUPE_OK;
}

troupe_status_t troupe__hdrv_d2d(troupe_driver_t *drv, troupe_dqueue_t *q, int dst_ordinal,
                                 troupe_buffer_loc_t dst, int src_ordinal, troupe_buffer_loc_t src,
                                 int64_t size_bytes)
{
    TROUPE_RETURN_IF_ERROR(s_check_queue(drv, "d2d", q));
    TROUPE_RETURN_IF_ERROR(s_check_copy_size(drv, "d2d (destination)", dst, size_bytes));
    TROUPE_RETURN_IF_ERROR(s_check_copy_size(drv, "d2d (source)", src, size_bytes));
    void *pd = NULL, *ps = NULL;
    TROUPE_RETURN_IF_ERROR(s_resolve(drv, "d2d (destination)", dst_ordinal, dst, &pd));
    TROUPE_RETURN_IF_ERROR(s_resolve(drv, "d2d (source)", src_ordinal, src, &ps));
    if (size_bytes > 0)
        memmove(pd, ps, (size_t)size_bytes);
    return TROUPE_OK;
}

/* ---- code -------------------------------------------------------------------------------- */

static void s_code_free(troupe_dcode_t *code)
{
    if (!code)
        return;
    if (code->params)
        for (size_t i = 0; i < code->nparams; i++)
            troupe_free(code->params[i].ident);
    troupe_free(code->params);
    troupe_free(code->name);
    troupe__cc_unload(code->lib);
    troupe_free(code);
}

/* Hands the GEMM library to code that calls it (compiler/gemm.h), or NULLs when
 * TROUPE_GEMM=generated or no library can be loaded: then the code runs its own loops. Loaded
 * code is shared by the routines compiled from the same source (one dlopen handle), so the last
 * load's choice holds for all of them. */
static troupe_status_t s_connect_gemm(const troupe_cgen_result_t *gen, void *lib)
{
    if (gen->gemm_hooks_name == NULL)
        return TROUPE_OK;
    void *sym = dlsym(lib, gen->gemm_hooks_name);
    if (sym == NULL)
        return troupe__error(TROUPE_INTERNAL, "routine %s: generated code lacks %s", gen->name,
                             gen->gemm_hooks_name);
    void (*hooks)(troupe_sgemm_fn, troupe_dgemm_fn);
    memcpy(&hooks, &sym, sizeof hooks);
    bool use = troupe_config_gemm_library() && troupe_gemm_library_available();
    if (!use)
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                   "routine %s: contractions run generated loops (%s)", gen->name,
                   troupe_config_gemm_library() ? troupe_gemm_library_name()
                                                : "TROUPE_GEMM=generated");
    hooks(use ? troupe_gemm_library_sgemm() : NULL, use ? troupe_gemm_library_dgemm() : NULL);
    return TROUPE_OK;
}

troupe_status_t troupe__hdrv_compile(troupe_driver_t *drv, const troupe_ll_proc_t *proc,
                                     troupe_dcode_t **out)
{
    if (!proc || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s compile: NULL procedure or output",
                             s_name(drv));
    *out = NULL;
    troupe_cgen_result_t *gen = NULL;
    troupe_status_t st = troupe_cgen_emit(proc, TROUPE_CGEN_C, &gen);
    if (st != TROUPE_OK)
        return st;

    troupe_dcode_t *code = troupe_calloc(1, sizeof *code);
    if (!code) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s compile %s: out of memory", s_name(drv),
                           gen->name);
        goto out_gen;
    }
    code->name = troupe_strdup(gen->name);
    code->nparams = gen->nparams;
    code->params = gen->nparams ? troupe_calloc(gen->nparams, sizeof *code->params) : NULL;
    if (!code->name || (gen->nparams && !code->params)) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s compile %s: out of memory", s_name(drv),
                           gen->name);
        goto out_code;
    }
    for (size_t i = 0; i < gen->nparams; i++) {
        const troupe_cgen_param_t *gp = &gen->params[i];
        s_param_t *p = &code->params[i];
        p->kind = gp->kind;
        p->min_size_bytes = gp->tn ? (int64_t)gp->tn->size_bytes : 0;
        p->static_range = gp->kind == TROUPE_CGEN_PARAM_STATIC_IDX ? gp->static_range : 0;
        p->ident = troupe_strdup(gp->ident ? gp->ident : "?");
        if (!p->ident) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s compile %s: out of memory",
                               s_name(drv), gen->name);
            goto out_code;
        }
    }
    void *entry = NULL;
    st = troupe__cc_load(gen->name, gen->source, gen->entry_name, &code->lib, &entry);
    if (st != TROUPE_OK)
        goto out_code;
    /* POSIX guarantees an object pointer from dlsym converts to a function pointer. */
    memcpy(&code->entry, &entry, sizeof code->entry);
    if ((st = s_connect_gemm(gen, code->lib)) != TROUPE_OK)
        goto out_code;
    *out = code;
    code = NULL;
out_code:
    s_code_free(code);
out_gen:
    troupe_cgen_result_destroy(&gen);
    return st;
}

void troupe__hdrv_code_release(troupe_driver_t *drv, troupe_dcode_t *code)
{
    s_code_free(code);
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

/* Checks argument i against parameter i and fills its slot of the entry's array. */
static troupe_status_t s_bind_arg(troupe_driver_t *drv, const troupe_dcode_t *code, size_t i,
                                  const troupe_karg_t *a, void **slot, int64_t *value)
{
    const s_param_t *p = &code->params[i];
    troupe_karg_kind_t want = s_expected_kind(p->kind);
    if (a->kind != want)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s launch %s: argument %zu is a %s but parameter %zu (%s) expects "
                             "a %s",
                             s_name(drv), code->name, i, s_karg_kind_name(a->kind), i, p->ident,
                             s_karg_kind_name(want));
    if (want == TROUPE_KARG_STATIC_IDX) {
        if (a->value < 0 || (p->static_range > 0 && a->value >= p->static_range))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "%s launch %s: parameter %zu (%s) expects a static index in "
                                 "0..%lld, got %lld",
                                 s_name(drv), code->name, i, p->ident,
                                 (long long)(p->static_range > 0 ? p->static_range - 1 : INT64_MAX),
                                 (long long)a->value);
        *value = a->value;
        *slot = value;
        return TROUPE_OK;
    }
    if (a->buf.size_bytes < p->min_size_bytes)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s launch %s: parameter %zu (%s) expects a %s of at least %lld "
                             "bytes, got %lld bytes (pool %d, offset %lld)",
                             s_name(drv), code->name, i, p->ident, s_karg_kind_name(want),
                             (long long)p->min_size_bytes, (long long)a->buf.size_bytes,
                             (int)a->buf.pool_id, (long long)a->buf.offset);
    return s_resolve(drv, "launch", a->ordinal, a->buf, slot);
}

troupe_status_t troupe__hdrv_launch(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                                    const troupe_karg_t *args, size_t nargs)
{
    TROUPE_RETURN_IF_ERROR(s_check_queue(drv, "launch", q));
    if (!code || (nargs > 0 && !args))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s launch: NULL code or arguments",
                             s_name(drv));
    if (nargs != code->nparams)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s launch %s: got %zu arguments, the code has %zu parameters",
                             s_name(drv), code->name, nargs, code->nparams);
    void *slots_stack[S_STACK_ARGS];
    int64_t values_stack[S_STACK_ARGS];
    void **slots = slots_stack;
    int64_t *values = values_stack;
    troupe_status_t st = TROUPE_OK;
    if (nargs > S_STACK_ARGS) {
        slots = troupe_malloc(nargs * sizeof *slots);
        values = troupe_malloc(nargs * sizeof *values);
        if (!slots || !values) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s launch %s: out of memory",
                               s_name(drv), code->name);
            goto out_arrays;
        }
    }
    for (size_t i = 0; i < nargs; i++) {
        st = s_bind_arg(drv, code, i, &args[i], &slots[i], &values[i]);
        if (st != TROUPE_OK)
            goto out_arrays;
    }
    if (troupe_config_flush_denormals()) {
        troupe__fp_mode_t prev = troupe__fp_flush_enter();
        code->entry(slots);
        troupe__fp_restore(prev);
    } else {
        code->entry(slots);
    }
out_arrays:
    if (slots != slots_stack)
        troupe_free(slots);
    if (values != values_stack)
        troupe_free(values);
    return st;
}

/* ---- events ------------------------------------------------------------------------------ */

troupe_status_t troupe__hdrv_event_record(troupe_driver_t *drv, troupe_dqueue_t *q,
                                          troupe_devent_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s event_record: NULL output", s_name(drv));
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(s_check_queue(drv, "event_record", q));
    troupe_devent_t *ev = troupe_calloc(1, sizeof *ev);
    if (!ev)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s event_record: out of memory",
                             s_name(drv));
    ev->status = TROUPE_OK;
    *out = ev;
    return TROUPE_OK;
}

troupe_status_t troupe__hdrv_event_query(troupe_driver_t *drv, troupe_devent_t *ev, bool *done)
{
    if (!ev || !done)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s event_query: NULL event or output",
                             s_name(drv));
    *done = true;
    return ev->status;
}

troupe_status_t troupe__hdrv_event_wait(troupe_driver_t *drv, troupe_dqueue_t *q,
                                        troupe_devent_t *ev)
{
    TROUPE_RETURN_IF_ERROR(s_check_queue(drv, "event_wait", q));
    if (!ev)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s event_wait: NULL event", s_name(drv));
    return TROUPE_OK;
}

void troupe__hdrv_event_release(troupe_driver_t *drv, troupe_devent_t *ev)
{
    troupe_free(ev);
}
