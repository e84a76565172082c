/* troupe — the cuda driver as a plugin: libtroupe_cuda.so, loaded with dlopen the first time a
 * program asks for the `cuda` backend (troupe_driver_lookup("cuda"), so troupe_backend_open).
 * A program that uses only the cpu and sync backends links and maps no CUDA library.
 *
 * The plugin lies next to libtroupe.so (the directory dladdr gives for libtroupe itself; in the
 * build tree both are in <build>/lib), else it is searched for on the library path. It links
 * libtroupe.so, so the two share one copy of troupe's state (errors, log, configuration), and
 * exports one symbol, troupe_cuda_plugin, which returns the table below. A missing plugin, a
 * missing CUDA library (libcudart, NVRTC, nvJitLink, cuBLASLt: dlopen names it) or a plugin of
 * another troupe version is TROUPE_NOT_FOUND with a message that names the plugin's path and
 * the loader's reason; the outcome of the first load is kept, so later calls give the same
 * answer.
 *
 * Internal: not installed. Thread safety: troupe__cuda_plugin_load is thread-safe; the table's
 * entries are as devices/cuda/cuda_impl.h and nvrtc.h say. Ownership: the table is static in
 * the plugin, which stays loaded until the process ends.
 */
#ifndef TROUPE_DEVICES_PLUGIN_IMPL_H
#define TROUPE_DEVICES_PLUGIN_IMPL_H

#include "base/status.h"
#include "devices/device.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised when the table's layout changes. */
#define TROUPE__CUDA_PLUGIN_ABI 1u
#define TROUPE__CUDA_PLUGIN_FILE "libtroupe_cuda.so"
#define TROUPE__CUDA_PLUGIN_SYMBOL "troupe_cuda_plugin"

typedef struct troupe__cuda_plugin {
    uint32_t abi;        /* TROUPE__CUDA_PLUGIN_ABI */
    const char *version; /* TROUPE_VERSION_STRING the plugin was built with */
    const troupe_driver_vtable_t *driver;
    int (*device_count)(void);                    /* troupe__cuda_device_count */
    void (*why_no_device)(char *buf, size_t cap); /* troupe__cuda_why_no_device */
    troupe_status_t (*describe)(int ordinal, char *buf, size_t cap); /* troupe__cuda_describe */
    const char *(*gemm_name)(void);                                  /* troupe__cuda_gemm_name */
    const char *(*assembler)(void);                                  /* troupe_nvrtc_assembler */
    troupe_status_t (*versions)(char *buf, size_t cap);              /* troupe_cuda_versions */
} troupe__cuda_plugin_t;

/* The plugin's entry point (defined in libtroupe_cuda.so only). */
typedef const troupe__cuda_plugin_t *(*troupe__cuda_plugin_fn)(void);

/* Loads the plugin once and returns its table in *out. TROUPE_NOT_FOUND when this troupe was
 * built without CUDA, or the plugin cannot be loaded (message: the path tried and dlerror's
 * reason, e.g. a CUDA library that is missing) or is of another troupe version or table layout;
 * INVALID_ARGUMENT for NULL out. */
TROUPE_MUST_USE troupe_status_t troupe__cuda_plugin_load(const troupe__cuda_plugin_t **out);

#ifdef __cplusplus
}
#endif
#endif
