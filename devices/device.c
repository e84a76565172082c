/* troupe — the table of built-in drivers (devices/device.h). */
#include "devices/device.h"

#include "base/status.h"
#include "devices/cpu/cpu_impl.h"
#include "devices/sync/sync_impl.h"
#include "troupe_config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The CUDA driver joins the table once it is built and its private header declares
 * `troupe__driver_cuda`. */
#if TROUPE_HAVE_CUDA && defined(__has_include)
#if __has_include("devices/cuda/cuda_impl.h")
#include "devices/cuda/cuda_impl.h"
#define S_WITH_CUDA 1
#endif
#endif
#ifndef S_WITH_CUDA
#define S_WITH_CUDA 0
#endif

static const troupe_driver_vtable_t *const s_drivers[] = {
    &troupe__driver_cpu,
    &troupe__driver_sync,
#if S_WITH_CUDA
    &troupe__driver_cuda,
#endif
};

#define S_NDRIVERS (sizeof s_drivers / sizeof s_drivers[0])

troupe_status_t troupe_driver_lookup(const char *name, const troupe_driver_vtable_t **out)
{
    if (!name || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "driver lookup: NULL name or output");
    *out = NULL;
    for (size_t i = 0; i < S_NDRIVERS; i++) {
        if (strcmp(s_drivers[i]->name, name) == 0) {
            *out = s_drivers[i];
            return TROUPE_OK;
        }
    }
    char built[128] = "";
    size_t n = 0;
    for (size_t i = 0; i < S_NDRIVERS && n < sizeof built; i++) {
        int w = snprintf(built + n, sizeof built - n, "%s%s", i ? ", " : "", s_drivers[i]->name);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    return troupe__error(TROUPE_NOT_FOUND, "no backend named '%s' (built: %s)", name, built);
}
