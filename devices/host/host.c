/* troupe — the host-memory driver core of the `cpu` and `sync` drivers (see host_impl.h). */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
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
#include "devices/host/host_memory_impl.h"
#include "devices/pools_impl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define S_POOL_ALIGN 64
/* Pools of at least this many bytes are aligned to it and asked for transparent huge pages. */
#define S_HUGE_BYTES ((size_t)2 << 20)
/* Launches with at most this many parameters build their argument array on the stack. */
#define S_STACK_ARGS 32

typedef struct s_host_driver {
    troupe_driver_t base;        /* first: the vtable header */
    pthread_mutex_t lock;        /* guards the pool tables */
    int ndev;                    /* troupe_config_cpu_devices() when opened */
    troupe__pool_table_t *pools; /* one table per device: pool ids are per device */
} s_host_driver_t;

struct troupe_dqueue {
    int ordinal;
};

struct troupe_devent {
    troupe_status_t status; /* host work is finished when recorded: always OK for now */
};

typedef void (*s_entry_fn)(void **args);

struct troupe_dcode {
    char *name;
    void *lib;
    s_entry_fn entry;
    size_t nparams;
    troupe__kparam_t *params;
    troupe_cgen_gather_t *gathers; /* copies, for a failing gather's message */
    size_t ngathers;
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
    int n = s_self(drv)->ndev;
    if (ordinal < 0 || ordinal >= n)
        return troupe__error(TROUPE_NOT_FOUND,
                             "%s %s: no device %d (the driver has %d, 0 to %d: TROUPE_CPU_DEVICES)",
                             s_name(drv), op, ordinal, n, n - 1);
    return TROUPE_OK;
}

/* Resolves `buf` on device `ordinal` to a host pointer, checking that the whole buffer lies in
 * its pool. */
static troupe_status_t s_resolve(troupe_driver_t *drv, const char *op, int ordinal,
                                 troupe_buffer_loc_t buf, void **out)
{
    TROUPE_RETURN_IF_ERROR(s_check_ordinal(drv, op, ordinal));
    s_host_driver_t *d = s_self(drv);
    pthread_mutex_lock(&d->lock);
    troupe_status_t st =
        troupe__pools_resolve(&d->pools[ordinal], s_name(drv), op, ordinal, buf, out);
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
    d->ndev = troupe_config_cpu_devices();
    d->pools = troupe_calloc((size_t)d->ndev, sizeof *d->pools);
    if (!d->pools) {
        pthread_mutex_destroy(&d->lock);
        troupe_free(d);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s open: out of memory", vt->name);
    }
    d->base.vt = vt;
    *out = &d->base;
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES, "%s driver opened with %d device%s", vt->name,
               d->ndev, d->ndev == 1 ? "" : "s");
    return TROUPE_OK;
}

void troupe__hdrv_close(troupe_driver_t *drv)
{
    if (!drv)
        return;
    s_host_driver_t *d = s_self(drv);
    for (int o = 0; o < d->ndev; o++) {
        troupe__pool_table_t *t = &d->pools[o];
        if (t->n > 0)
            TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                       "%s close: freeing %zu pools still allocated on device %d", s_name(drv),
                       t->n, o);
        for (size_t i = 0; i < t->n; i++)
            if (!troupe__shm_free(t->v[i].base))
                free(t->v[i].base);
        troupe__pools_free(t);
    }
    troupe_free(d->pools);
    pthread_mutex_destroy(&d->lock);
    troupe_free(d);
}

/* TROUPE_CPU_DEVICES as read when the driver opened (base/config.h). */
int troupe__hdrv_num_devices(troupe_driver_t *drv)
{
    return s_self(drv)->ndev;
}

/* ---- how much host memory a pool may take (TROUPE_HOST_MEMORY) ---------------------------- */

/* Under TROUPE_HOST_MEMORY=auto, pools below this size are not checked: the figure costs a few
 * file reads, and what small pools add up to is seen by the next large one. */
#define S_CHECK_MIN_BYTES ((size_t)16 << 20)

/* The bytes a new pool of `alloc` bytes may take, or -1 for no check; `how` says where the
 * figure comes from (devices/host/host_memory_impl.h). */
static int64_t s_free_host_bytes(size_t alloc, char *how, size_t cap)
{
    int64_t cfg = troupe_config_host_memory();
    if (cfg == TROUPE_HOST_MEMORY_OFF)
        return -1;
    if (cfg >= 0) {
        snprintf(how, cap, "TROUPE_HOST_MEMORY=%lld", (long long)cfg);
        return cfg;
    }
    if (alloc < S_CHECK_MIN_BYTES)
        return -1;
    return troupe__host_memory_free("/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup", how,
                                    cap);
}

/* ---- memory ------------------------------------------------------------------------------ */

troupe_status_t troupe__hdrv_alloc_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id,
                                        int64_t size_bytes, bool zero)
{
    TROUPE_RETURN_IF_ERROR(s_check_ordinal(drv, "alloc_pool", ordinal));
    if (size_bytes < 0 || (uint64_t)size_bytes > (uint64_t)SIZE_MAX - S_HUGE_BYTES)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s alloc_pool: pool %d: bad size %lld bytes",
                             s_name(drv), (int)pool_id, (long long)size_bytes);
    /* Round up to the alignment (and to at least one block, so a 0-byte pool has an address). */
    size_t alloc = ((size_t)size_bytes + S_POOL_ALIGN - 1) / S_POOL_ALIGN * S_POOL_ALIGN;
    if (alloc == 0)
        alloc = S_POOL_ALIGN;

    s_host_driver_t *d = s_self(drv);
    troupe__pool_table_t *t = &d->pools[ordinal];
    /* The table is locked to check and to insert, not while the memory is found and zeroed:
     * copies and launches on every device of this driver resolve their buffers through it
     * (s_resolve) and need not wait behind a large pool's first writes. */
    pthread_mutex_lock(&d->lock);
    troupe_status_t st = troupe__pools_reserve(t, s_name(drv), ordinal, pool_id);
    pthread_mutex_unlock(&d->lock);
    if (st != TROUPE_OK)
        return st;
    /* what the pool takes: whole huge pages from 2 MiB on */
    size_t take =
        alloc >= S_HUGE_BYTES ? (alloc + S_HUGE_BYTES - 1) / S_HUGE_BYTES * S_HUGE_BYTES : alloc;
    char how[1200] = "";
    int64_t free_b = s_free_host_bytes(take, how, sizeof how);
    if (free_b >= 0 && (int64_t)take > free_b)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                             "%s alloc_pool: pool %d: %lld bytes (%.2f GiB) of host memory asked "
                             "for, %lld bytes (%.2f GiB) free; set TROUPE_HOST_MEMORY=off to try "
                             "anyway (free: %s)",
                             s_name(drv), (int)pool_id, (long long)size_bytes,
                             (double)size_bytes / (1 << 30), (long long)free_b,
                             (double)free_b / (1 << 30), how);
    /* Shareable when the transport asked for it (base/shared_memory_impl.h: ranks on this node then
     * reduce gradients in each other's pools); zero-filled, page-aligned. Else ordinary memory;
     * a large pool is aligned to 2 MiB and asked for transparent huge pages (madvise; the
     * kernel's choice under its `madvise` policy): fewer page faults when it is first written
     * and fewer TLB misses over a model's activations. */
    void *base = NULL;
    bool shared = troupe__shm_pools() && alloc >= TROUPE__SHM_MIN_BYTES &&
                  (base = troupe__shm_alloc(alloc)) != NULL;
    if (shared)
        zero = false;
    else if (alloc >= S_HUGE_BYTES) {
        if (posix_memalign(&base, S_HUGE_BYTES, take) != 0)
            base = NULL;
#ifdef MADV_HUGEPAGE
        if (base != NULL)
            (void)madvise(base, take, MADV_HUGEPAGE);
#endif
    } else if (posix_memalign(&base, S_POOL_ALIGN, alloc) != 0)
        base = NULL;
    if (base == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                             "%s alloc_pool: pool %d: cannot allocate %lld bytes of host memory",
                             s_name(drv), (int)pool_id, (long long)size_bytes);
    if (zero)
        memset(base, 0, alloc);
    pthread_mutex_lock(&d->lock);
    st = troupe__pools_reserve(t, s_name(drv), ordinal, pool_id); /* a racing twin */
    if (st == TROUPE_OK)
        troupe__pools_insert(
            t, (troupe__pool_slot_t){.id = pool_id, .base = base, .size_bytes = size_bytes});
    pthread_mutex_unlock(&d->lock);
    if (st != TROUPE_OK && !troupe__shm_free(base))
        free(base);
    return st;
}

troupe_status_t troupe__hdrv_free_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id)
{
    TROUPE_RETURN_IF_ERROR(s_check_ordinal(drv, "free_pool", ordinal));
    s_host_driver_t *d = s_self(drv);
    troupe__pool_slot_t slot = {0, NULL, 0};
    pthread_mutex_lock(&d->lock);
    troupe_status_t st =
        troupe__pools_remove(&d->pools[ordinal], s_name(drv), ordinal, pool_id, &slot);
    pthread_mutex_unlock(&d->lock);
    if (!troupe__shm_free(slot.base))
        free(slot.base);
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

static troupe_status_t s_check_copy_size(troupe_driver_t *drv, const char *op,
                                         troupe_buffer_loc_t buf, int64_t size_bytes)
{
    return troupe__check_copy_size(s_name(drv), op, buf, size_bytes);
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
    troupe__kparams_free(code->params, code->nparams);
    for (size_t i = 0; i < code->ngathers; i++) {
        troupe_free(code->gathers[i].index_name);
        troupe_free(code->gathers[i].table_name);
    }
    troupe_free(code->gathers);
    troupe_free(code->name);
    troupe__cc_unload(code->lib);
    troupe_free(code);
}

/* Whether generated code gets the GEMM library's entries at its load (s_connect_gemm). */
static bool s_gemm_library_in_use(void)
{
    return troupe_config_gemm_library() && troupe_gemm_library_available();
}

void troupe__hdrv_cgen_options(const troupe_driver_vtable_t *vt, troupe_cgen_options_t *o)
{
    memset(o, 0, sizeof *o);
    if (vt == NULL || vt->compile != troupe__hdrv_compile)
        return; /* another driver's C only lists parameters: no library to load for it */
    o->c_gemm_library_only = s_gemm_library_in_use() && troupe_gemm_library_sgemm() != NULL &&
                             troupe_gemm_library_dgemm() != NULL &&
                             troupe_gemm_library_bgemm() != NULL &&
                             troupe_gemm_library_hgemm() != NULL;
}

/* OK, or FAILED_PRECONDITION when gen was generated library-only (troupe_cgen_options_t.
 * c_gemm_library_only: generated only while every entry was there) and `in_use`
 * (s_gemm_library_in_use) is false: its products would write nothing. */
static troupe_status_t s_check_library_only(const troupe_cgen_result_t *gen, bool in_use)
{
    if (!gen->gemm_library_only || in_use)
        return TROUPE_OK;
    return troupe__error(TROUPE_FAILED_PRECONDITION,
                         "routine %s: its code was generated to call the GEMM library, with no "
                         "loops of its own, and %s now; compile the routine again",
                         gen->name,
                         !troupe_config_gemm_library()
                             ? "TROUPE_GEMM=generated (troupe_config_set_gemm_library) is set"
                             : "no GEMM library is in use");
}

/* Hands the GEMM library to code that calls it (compiler/gemm.h), or NULLs when
 * TROUPE_GEMM=generated or no library can be loaded: then the code runs its own loops (code
 * generated library-only has none and is refused instead). Loaded code is shared by the
 * routines compiled from the same source (one dlopen handle), so the last load's choice holds
 * for all of them. */
static troupe_status_t s_connect_gemm(const troupe_cgen_result_t *gen, void *lib)
{
    if (gen->gemm_hooks_name == NULL)
        return TROUPE_OK;
    bool use = s_gemm_library_in_use();
    TROUPE_RETURN_IF_ERROR(s_check_library_only(gen, use));
    void *sym = dlsym(lib, gen->gemm_hooks_name);
    if (sym == NULL)
        return troupe__error(TROUPE_INTERNAL, "routine %s: generated code lacks %s", gen->name,
                             gen->gemm_hooks_name);
    void (*hooks)(troupe_sgemm_fn, troupe_dgemm_fn);
    memcpy(&hooks, &sym, sizeof hooks);
    if (!use)
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                   "routine %s: contractions run generated loops (%s)", gen->name,
                   troupe_config_gemm_library() ? troupe_gemm_library_name()
                                                : "TROUPE_GEMM=generated");
    hooks(use ? troupe_gemm_library_sgemm() : NULL, use ? troupe_gemm_library_dgemm() : NULL);
    if (gen->gemm_bf16_hooks_name != NULL) {
        sym = dlsym(lib, gen->gemm_bf16_hooks_name);
        if (sym == NULL)
            return troupe__error(TROUPE_INTERNAL, "routine %s: generated code lacks %s",
                                 gen->name, gen->gemm_bf16_hooks_name);
        void (*bhooks)(troupe_bgemm_fn);
        memcpy(&bhooks, &sym, sizeof bhooks);
        bhooks(use ? troupe_gemm_library_bgemm() : NULL);
    }
    if (gen->gemm_half_hooks_name != NULL) {
        sym = dlsym(lib, gen->gemm_half_hooks_name);
        if (sym == NULL)
            return troupe__error(TROUPE_INTERNAL, "routine %s: generated code lacks %s", gen->name,
                                 gen->gemm_half_hooks_name);
        void (*hhooks)(troupe_hgemm_fn);
        memcpy(&hhooks, &sym, sizeof hhooks);
        hhooks(use ? troupe_gemm_library_hgemm() : NULL);
    }
    if (gen->gemm_pack_hooks_name != NULL) {
        sym = dlsym(lib, gen->gemm_pack_hooks_name);
        if (sym == NULL)
            return troupe__error(TROUPE_INTERNAL, "routine %s: generated code lacks %s", gen->name,
                                 gen->gemm_pack_hooks_name);
        void (*phooks)(troupe_spack_bt_fn);
        memcpy(&phooks, &sym, sizeof phooks);
        phooks(use ? troupe_gemm_library_spack_bt() : NULL);
    }
    if (gen->gemm_brgemm_hooks_name != NULL) {
        sym = dlsym(lib, gen->gemm_brgemm_hooks_name);
        if (sym == NULL)
            return troupe__error(TROUPE_INTERNAL, "routine %s: generated code lacks %s", gen->name,
                                 gen->gemm_brgemm_hooks_name);
        void (*rhooks)(troupe_sbrgemm_fn);
        memcpy(&rhooks, &sym, sizeof rhooks);
        rhooks(use ? troupe_gemm_library_sbrgemm() : NULL);
    }
    return TROUPE_OK;
}

static _Thread_local struct {
    const troupe_ll_proc_t *proc;
    const troupe_cgen_result_t *gen;
} s_offer;

void troupe__hdrv_offer_gen(const troupe_ll_proc_t *proc, const troupe_cgen_result_t *gen)
{
    s_offer.proc = proc;
    s_offer.gen = gen;
}

/* The compile cache's splitter (cc_cache_impl.h): the generated unit's own (compiler/cgen.h). */
static troupe_status_t s_split(void *ctx, size_t unit_bytes, char ***out_units, size_t *out_count)
{
    return troupe_cgen_c_split(ctx, unit_bytes, out_units, out_count);
}

troupe_status_t troupe__hdrv_compile(troupe_driver_t *drv, const troupe_ll_proc_t *proc,
                                     troupe_dcode_t **out)
{
    if (!proc || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s compile: NULL procedure or output",
                             s_name(drv));
    *out = NULL;
    troupe_cgen_result_t *own = NULL;
    const troupe_cgen_result_t *gen = s_offer.proc == proc ? s_offer.gen : NULL;
    troupe_status_t st = TROUPE_OK;
    if (gen == NULL) {
        troupe_cgen_options_t opts;
        troupe__hdrv_cgen_options(drv->vt, &opts);
        if ((st = troupe_cgen_emit_with(proc, TROUPE_CGEN_C, &opts, &own)) != TROUPE_OK)
            return st;
        gen = own;
    }
    /* before the compiler runs; the load checks again (s_connect_gemm) */
    if ((st = s_check_library_only(gen, s_gemm_library_in_use())) != TROUPE_OK)
        goto out_gen;

    troupe_dcode_t *code = troupe_calloc(1, sizeof *code);
    if (!code) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s compile %s: out of memory", s_name(drv),
                           gen->name);
        goto out_gen;
    }
    code->name = troupe_strdup(gen->name);
    if (!code->name) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s compile %s: out of memory", s_name(drv),
                           gen->name);
        goto out_code;
    }
    if ((st = troupe__kparams_new(gen, &code->params)) != TROUPE_OK)
        goto out_code;
    code->nparams = gen->nparams;
    if (gen->ngathers > 0) {
        code->gathers = troupe_calloc(gen->ngathers, sizeof *code->gathers);
        if (!code->gathers) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s compile %s: out of memory",
                               s_name(drv), gen->name);
            goto out_code;
        }
        code->ngathers = gen->ngathers;
        for (size_t i = 0; i < gen->ngathers; i++) {
            code->gathers[i] = gen->gathers[i];
            code->gathers[i].index_name = troupe_strdup(gen->gathers[i].index_name);
            code->gathers[i].table_name =
                gen->gathers[i].table_name ? troupe_strdup(gen->gathers[i].table_name) : NULL;
            if (!code->gathers[i].index_name ||
                (gen->gathers[i].table_name && !code->gathers[i].table_name)) {
                st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s compile %s: out of memory",
                                   s_name(drv), gen->name);
                goto out_code;
            }
        }
    }
    void *entry = NULL;
    st = troupe__cc_load(gen->name, gen->source, gen->entry_name, s_split, (void *)gen,
                         &code->lib, &entry);
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
    troupe_cgen_result_destroy(&own);
    return st;
}

void troupe__hdrv_code_release(troupe_driver_t *drv, troupe_dcode_t *code)
{
    s_code_free(code);
}

/* Checks argument i against parameter i and fills its slot of the entry's array. */
static troupe_status_t s_bind_arg(troupe_driver_t *drv, const troupe_dcode_t *code, size_t i,
                                  const troupe_karg_t *a, void **slot, int64_t *value)
{
    TROUPE_RETURN_IF_ERROR(troupe__karg_check(s_name(drv), code->name, i, &code->params[i], a));
    if (a->kind == TROUPE_KARG_STATIC_IDX) {
        *value = a->value;
        *slot = value;
        return TROUPE_OK;
    }
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
    void *slots_stack[S_STACK_ARGS + 1];
    int64_t values_stack[S_STACK_ARGS];
    int64_t err[TROUPE_CGEN_GATHER_ERR_WORDS] = {0};
    void **slots = slots_stack;
    int64_t *values = values_stack;
    troupe_status_t st = TROUPE_OK;
    if (nargs > S_STACK_ARGS) {
        slots = troupe_malloc((nargs + 1) * sizeof *slots);
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
    slots[nargs] = err; /* read only by code with gather indices */
    if (troupe_config_flush_denormals()) {
        troupe__fp_mode_t prev = troupe__fp_flush_enter();
        code->entry(slots);
        troupe__fp_restore(prev);
    } else {
        code->entry(slots);
    }
    if (err[0] != 0) {
        troupe_cgen_result_t view;
        memset(&view, 0, sizeof view);
        view.name = code->name;
        view.gathers = code->gathers;
        view.ngathers = code->ngathers;
        st = troupe_cgen_gather_failure(&view, err);
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
