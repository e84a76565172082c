/* troupe — the entry point of libtroupe_cuda.so, the cuda driver's plugin
 * (devices/plugin_impl.h). */
#include "devices/plugin_impl.h"

#include "devices/cuda/cuda_impl.h"
#include "devices/cuda/nvrtc.h"
#include "troupe_config.h"

/* Exported: dlsym'd by devices/plugin.c. */
const troupe__cuda_plugin_t *troupe_cuda_plugin(void);

static const troupe__cuda_plugin_t s_table = {
    .abi = TROUPE__CUDA_PLUGIN_ABI,
    .version = TROUPE_VERSION_STRING,
    .driver = &troupe__driver_cuda,
    .device_count = troupe__cuda_device_count,
    .why_no_device = troupe__cuda_why_no_device,
    .describe = troupe__cuda_describe,
    .gemm_name = troupe__cuda_gemm_name,
    .assembler = troupe_nvrtc_assembler,
    .versions = troupe_cuda_versions,
};

const troupe__cuda_plugin_t *troupe_cuda_plugin(void)
{
    return &s_table;
}
