/* troupe — the table of built-in drivers (devices/device.h). */
#include "devices/device.h"

#include "base/config.h"
#include "base/fault_impl.h"
#include "base/status.h"
#include "devices/cpu/cpu_impl.h"
#include "devices/graph_impl.h"
#include "devices/plugin_impl.h"
#include "devices/sync/sync_impl.h"
#include "troupe_config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The environment variables this layer reads (base/config.h registry; docs/configuration.md). */
static const troupe_config_var_t s_env_vars[] = {
    {"TROUPE_CPU_DEVICES", "devices", "count", "1", "1..64", "troupe_config_set_cpu_devices",
     "how many devices the cpu and sync backends expose"},
    {"TROUPE_DEVICE", "devices", "ordinals", "the node-local rank's share",
     "one ordinal or a list, 0,2", "troupe_config_set_device",
     "the device ordinals this rank uses"},
    {"TROUPE_CUDA_GRAPHS", "devices", "choice", "auto", "auto|off", "troupe_driver_set_graphs",
     "replay a routine run twice alike as a CUDA graph"},
    {"TROUPE_CUDA_GATHER_GEMM", "devices", "choice", "checked", "checked|tiles|library", "-",
     "the cuda driver's products in a routine with gather indices: cuBLASLt after the index "
     "check (checked), its tiles, or cuBLASLt unchecked"},
    {"TROUPE_GEMM", "devices", "choice", "library", "library|openblas|generated",
     "troupe_config_set_gemm_mode", "what contractions that are matrix products call"},
    {"TROUPE_STACK_THRESHOLD", "devices", "bytes", "16384", "0..",
     "troupe_config_set_stack_threshold_bytes",
     "bytes up to which a device-only node may live on a host routine's stack"},
    {"TROUPE_LOOP_FUSION", "devices", "choice", "all", "all|same-space",
     "troupe_config_set_loop_fusion_outer",
     "whether host routines also fuse nests over shared outer loops (cuda: never)"},
    {"TROUPE_ITERATION_SCALARS", "devices", "choice", "on", "on|off",
     "troupe_config_set_iteration_scalars",
     "whether host routines hold a per-iteration temporary in a C variable (cuda: never)"},
    {"TROUPE_HOST_MEMORY", "devices", "bytes", "auto", "auto|off|0..",
     "troupe_config_set_host_memory",
     "the host memory a new pool of the cpu and sync drivers may take (auto: what the kernel "
     "and the memory cgroups report free, for pools of 16 MiB or more)"},
};
TROUPE_CONFIG_VARS(devices, s_env_vars)

/* The drivers in this library. The cuda driver is a plugin (devices/plugin_impl.h): it is in
 * the built list when this troupe was built with CUDA, and its vtable is the plugin's. */
static const troupe_driver_vtable_t *const s_drivers[] = {
    &troupe__driver_cpu,
    &troupe__driver_sync,
};

#define S_NLINKED (sizeof s_drivers / sizeof s_drivers[0])
#define S_NDRIVERS (S_NLINKED + (TROUPE_HAVE_CUDA ? 1 : 0))

troupe_status_t troupe_driver_lookup(const char *name, const troupe_driver_vtable_t **out)
{
    if (!name || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "driver lookup: NULL name or output");
    *out = NULL;
    for (size_t i = 0; i < S_NLINKED; i++) {
        if (strcmp(s_drivers[i]->name, name) == 0) {
            *out = s_drivers[i];
            return TROUPE_OK;
        }
    }
#if TROUPE_HAVE_CUDA
    if (strcmp(name, "cuda") == 0) {
        const troupe__cuda_plugin_t *plugin = NULL;
        TROUPE_RETURN_IF_ERROR(troupe__cuda_plugin_load(&plugin));
        *out = plugin->driver;
        return TROUPE_OK;
    }
#endif
    char built[128] = "";
    size_t n = 0;
    for (size_t i = 0; i < S_NDRIVERS && n < sizeof built; i++) {
        int w = snprintf(built + n, sizeof built - n, "%s%s", i ? ", " : "",
                         troupe_driver_built_name(i));
        if (w < 0)
            break;
        n += (size_t)w;
    }
    return troupe__error(TROUPE_NOT_FOUND, "no backend named '%s' (built: %s)", name, built);
}

size_t troupe_driver_built_count(void)
{
    return S_NDRIVERS;
}

const char *troupe_driver_built_name(size_t i)
{
    if (i < S_NLINKED)
        return s_drivers[i]->name;
    return i < S_NDRIVERS ? "cuda" : NULL;
}

/* ---- calling a driver ----------------------------------------------------------------------- */

const char *troupe_driver_name(const troupe_driver_t *drv)
{
    return drv && drv->vt && drv->vt->name ? drv->vt->name : "nil";
}

static troupe_status_t s_unimplemented(const troupe_driver_t *drv, const char *entry)
{
    return troupe__error(TROUPE_UNIMPLEMENTED, "the %s driver has no %s entry",
                         troupe_driver_name(drv), entry);
}

static troupe_status_t s_no_driver(const char *entry)
{
    return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_driver_%s: NULL driver", entry);
}

/* The vtable's entries by name, for troupe_driver_require. */
#define S_ENTRY(m)                                                                                 \
    {                                                                                              \
#m, offsetof(troupe_driver_vtable_t, m)                                                    \
    }
static const struct {
    const char *name;
    size_t offset;
} s_entries[] = {
    S_ENTRY(open),          S_ENTRY(close),
    S_ENTRY(num_devices),   S_ENTRY(suggested_num_streams),
    S_ENTRY(alloc_pool),    S_ENTRY(free_pool),
    S_ENTRY(host_ptr),      S_ENTRY(queue_create),
    S_ENTRY(queue_destroy), S_ENTRY(memset_zero),
    S_ENTRY(h2d),           S_ENTRY(d2h),
    S_ENTRY(d2d),           S_ENTRY(compile),
    S_ENTRY(code_release),  S_ENTRY(launch),
    S_ENTRY(event_record),  S_ENTRY(event_query),
    S_ENTRY(event_wait),    S_ENTRY(event_release),
    S_ENTRY(graph_capture), S_ENTRY(graph_launch),
    S_ENTRY(graph_release),
};
#undef S_ENTRY

troupe_status_t troupe_driver_require(const troupe_driver_t *drv, const char *entry)
{
    if (!drv || !drv->vt || !entry)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_driver_require: NULL argument");
    for (size_t i = 0; i < sizeof s_entries / sizeof s_entries[0]; i++) {
        if (strcmp(s_entries[i].name, entry) != 0)
            continue;
        void (*fn)(void) = NULL;
        memcpy(&fn, (const char *)drv->vt + s_entries[i].offset, sizeof fn);
        return fn ? TROUPE_OK : s_unimplemented(drv, entry);
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "the driver vtable has no entry named '%s'",
                         entry);
}

/* Returns from the wrapper unless `drv` has entry `e`. */
#define S_CHECK(drv, e)                                                                            \
    do {                                                                                           \
        if (!(drv) || !(drv)->vt)                                                                  \
            return s_no_driver(#e);                                                                \
        if (!(drv)->vt->e)                                                                         \
            return s_unimplemented(drv, #e);                                                       \
    } while (0)

troupe_status_t troupe_driver_open(const troupe_driver_vtable_t *vt, troupe_driver_t **out)
{
    if (!vt || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_driver_open: NULL argument");
    *out = NULL;
    if (!vt->open)
        return troupe__error(TROUPE_UNIMPLEMENTED, "the %s driver has no open entry",
                             vt->name ? vt->name : "nil");
    return vt->open(out);
}

void troupe_driver_close(troupe_driver_t *drv)
{
    if (drv && drv->vt)
        troupe__graph_forget(drv, NULL, NULL);
    if (drv && drv->vt && drv->vt->close)
        drv->vt->close(drv);
}

int troupe_driver_num_devices(troupe_driver_t *drv)
{
    int n = drv && drv->vt && drv->vt->num_devices ? drv->vt->num_devices(drv) : 0;
    return n < 0 ? 0 : n;
}

int troupe_driver_suggested_num_streams(troupe_driver_t *drv, int ordinal,
                                        troupe_stream_config_t cfg)
{
    int n = drv && drv->vt && drv->vt->suggested_num_streams
                ? drv->vt->suggested_num_streams(drv, ordinal, cfg)
                : 1;
    return n < 1 ? 1 : n;
}

troupe_status_t troupe_driver_alloc_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id,
                                         int64_t size_bytes, bool zero)
{
    S_CHECK(drv, alloc_pool);
    if (troupe__fault_armed(TROUPE__FAULT_ALLOC)) {
        char what[128];
        snprintf(what, sizeof what, "%s alloc_pool: pool %d of %lld bytes on device %d",
                 drv->vt->name, (int)pool_id, (long long)size_bytes, ordinal);
        TROUPE_RETURN_IF_ERROR(troupe__fault_alloc(what));
    }
    return drv->vt->alloc_pool(drv, ordinal, pool_id, size_bytes, zero);
}

troupe_status_t troupe_driver_free_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id)
{
    S_CHECK(drv, free_pool);
    return drv->vt->free_pool(drv, ordinal, pool_id);
}

troupe_status_t troupe_driver_host_ptr(troupe_driver_t *drv, int ordinal, troupe_buffer_loc_t buf,
                                       void **out)
{
    S_CHECK(drv, host_ptr);
    return drv->vt->host_ptr(drv, ordinal, buf, out);
}

troupe_status_t troupe_driver_queue_create(troupe_driver_t *drv, int ordinal, troupe_dqueue_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_driver_queue_create: NULL out");
    *out = NULL;
    if (!drv || !drv->vt)
        return s_no_driver("queue_create");
    if (!drv->vt->queue_create)
        return TROUPE_OK;
    return drv->vt->queue_create(drv, ordinal, out);
}

void troupe_driver_queue_destroy(troupe_driver_t *drv, troupe_dqueue_t *q)
{
    if (q && drv && drv->vt)
        troupe__graph_forget(drv, q, NULL);
    if (q && drv && drv->vt && drv->vt->queue_destroy)
        drv->vt->queue_destroy(drv, q);
}

troupe_status_t troupe_driver_memset_zero(troupe_driver_t *drv, troupe_dqueue_t *q,
                                          troupe_buffer_loc_t dst)
{
    S_CHECK(drv, memset_zero);
    return drv->vt->memset_zero(drv, q, dst);
}

troupe_status_t troupe_driver_h2d(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_buffer_loc_t dst,
                                  const void *src, int64_t size_bytes)
{
    S_CHECK(drv, h2d);
    return drv->vt->h2d(drv, q, dst, src, size_bytes);
}

troupe_status_t troupe_driver_d2h(troupe_driver_t *drv, troupe_dqueue_t *q, void *dst,
                                  troupe_buffer_loc_t src, int64_t size_bytes)
{
    S_CHECK(drv, d2h);
    return drv->vt->d2h(drv, q, dst, src, size_bytes);
}

troupe_status_t troupe_driver_d2d(troupe_driver_t *drv, troupe_dqueue_t *q, int dst_ordinal,
                                  troupe_buffer_loc_t dst, int src_ordinal, troupe_buffer_loc_t src,
                                  int64_t size_bytes)
{
    S_CHECK(drv, d2d);
    return drv->vt->d2d(drv, q, dst_ordinal, dst, src_ordinal, src, size_bytes);
}

troupe_status_t troupe_driver_compile(troupe_driver_t *drv, const troupe_ll_proc_t *proc,
                                      troupe_dcode_t **out)
{
    S_CHECK(drv, compile);
    return drv->vt->compile(drv, proc, out);
}

void troupe_driver_code_release(troupe_driver_t *drv, troupe_dcode_t *code)
{
    if (code && drv && drv->vt)
        troupe__graph_forget(drv, NULL, code);
    if (code && drv && drv->vt && drv->vt->code_release)
        drv->vt->code_release(drv, code);
}

troupe_status_t troupe_driver_launch(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                                     const troupe_karg_t *args, size_t nargs)
{
    S_CHECK(drv, launch);
    const troupe_driver_vtable_t *vt = drv->vt;
    if (q == NULL || code == NULL || !vt->graph_capture || !vt->graph_launch || !vt->graph_release)
        return vt->launch(drv, q, code, args, nargs);
    return troupe__graph_run(drv, q, code, args, nargs);
}

troupe_status_t troupe_driver_event_record(troupe_driver_t *drv, troupe_dqueue_t *q,
                                           troupe_devent_t **out)
{
    S_CHECK(drv, event_record);
    return drv->vt->event_record(drv, q, out);
}

troupe_status_t troupe_driver_event_query(troupe_driver_t *drv, troupe_devent_t *ev, bool *done)
{
    S_CHECK(drv, event_query);
    return drv->vt->event_query(drv, ev, done);
}

troupe_status_t troupe_driver_event_wait(troupe_driver_t *drv, troupe_dqueue_t *q,
                                         troupe_devent_t *ev)
{
    S_CHECK(drv, event_wait);
    return drv->vt->event_wait(drv, q, ev);
}

void troupe_driver_event_release(troupe_driver_t *drv, troupe_devent_t *ev)
{
    if (ev && drv && drv->vt && drv->vt->event_release)
        drv->vt->event_release(drv, ev);
}
