/* troupe — runtime compilation of CUDA C++ to PTX or cubin with NVRTC (OCANNL cuda_backend's
 * `compile_to_ptx`, OCANNL_NOTES §6.6). Needs no GPU: it only runs the compiler.
 *
 * Built only when the CUDA toolkit was found (troupe_config.h TROUPE_HAVE_CUDA == 1). This
 * header includes no CUDA header; only devices/cuda/ *.c do.
 *
 * Options passed to NVRTC, always: `-I<TROUPE_CUDA_INCLUDE_DIR>` (so cuda_fp16.h,
 * cuda_bf16.h and cuda_fp8.h resolve), `--fmad=false` (no contraction of a*b+c into fma:
 * troupe's generated code must round like the interpreter; compiler/cgen.h), `--ftz=false`
 * (troupe_nvrtc_compile_image: as asked) and `--gpu-architecture=<arch>` when arch is given.
 * Never --use_fast_math.
 *
 * Thread safety: thread-safe (each call owns its NVRTC program).
 * Ownership: *out_ptx and *out_log are allocated with troupe_malloc and owned by the caller
 * (troupe_free).
 */
#ifndef TROUPE_DEVICES_CUDA_NVRTC_H
#define TROUPE_DEVICES_CUDA_NVRTC_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Compiles `source` (NUL-terminated CUDA C++) to PTX.
 *   name:    the program name NVRTC uses in messages, e.g. "matmul.cu" (NULL: "troupe.cu");
 *   arch:    a virtual architecture such as "compute_80", or NULL for NVRTC's default;
 *   out_ptx: receives the NUL-terminated PTX (NULL on failure);
 *   out_log: may be NULL; else receives the compiler log (NUL-terminated, possibly empty) on
 *            success and on failure (NULL only when no program could be created).
 * Errors: INVALID_ARGUMENT (NULL source or out_ptx, an arch that is not [a-z0-9_]+);
 * DEVICE_ERROR when NVRTC fails — troupe_last_error() names the NVRTC call and its error
 * (e.g. "NVRTC_ERROR_COMPILATION") followed by the start of the log (truncated), and the full
 * log is in *out_log; RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_nvrtc_compile(const char *source, const char *name,
                                                     const char *arch, char **out_ptx,
                                                     char **out_log);

/* Compiles `source` to a loadable image for one architecture (cudaLibraryLoadData):
 *   arch "sm_XY":      a cubin for that GPU: NVRTC's PTX for compute_XY assembled by nvJitLink
 *                      where the build has it (NVRTC's own cubins ignored --ftz on a GPU
 *                      machine), falling back to nvrtcGetCUBIN with a warning when nvJitLink
 *                      fails (an nvJitLink older than NVRTC, say); else nvrtcGetCUBIN;
 *   arch "compute_XY": PTX (NUL included in *out_size), which the driver compiles at load;
 *   ftz:               --ftz=true (single-precision subnormal inputs and results flushed to
 *                      zero, as troupe's CPU routines under TROUPE_DENORMALS=flush), else false.
 * Options as troupe_nvrtc_compile's otherwise. *out_code (troupe_malloc, caller frees) holds
 * *out_size bytes. Errors as troupe_nvrtc_compile's. */
TROUPE_MUST_USE troupe_status_t troupe_nvrtc_compile_image(const char *source, const char *name,
                                                           const char *arch, bool ftz,
                                                           void **out_code, size_t *out_size,
                                                           char **out_log);

/* The architecture to compile for a GPU of compute capability major.minor, into buf (cap >=
 * 16): "sm_<XY>" when NVRTC supports it, else "compute_<XY>" of the newest supported one
 * below it (PTX, which the driver compiles for the GPU). NOT_FOUND when NVRTC supports nothing
 * that old; DEVICE_ERROR when NVRTC fails; INVALID_ARGUMENT. */
TROUPE_MUST_USE troupe_status_t troupe_nvrtc_arch_for(int major, int minor, char *buf, size_t cap);

/* NVRTC's version (e.g. 13, 0). INVALID_ARGUMENT for NULL outputs; DEVICE_ERROR if NVRTC
 * reports an error. */
TROUPE_MUST_USE troupe_status_t troupe_nvrtc_version(int *major, int *minor);

/* The assembler of troupe_nvrtc_compile_image's cubins, for cache keys: "nvjitlink <major>.<minor>"
 * or "nvrtc" (a build without nvJitLink); never fails. */
const char *troupe_nvrtc_assembler(void);

/* The CUDA versions this process sees, on one line in buf (capacity cap bytes, NUL-terminated):
 *   "nvrtc 13.0, runtime 13.0, driver 12.8"
 * nvrtc: nvrtcVersion; runtime: cudaRuntimeGetVersion (the cudart troupe was linked with);
 * driver: cudaDriverGetVersion, the newest CUDA version the installed driver supports. A piece
 * that cannot be had reads "none" (no libcuda.so.1: "driver none"); that is not an error, so
 * it works on machines without a GPU.
 * Errors: INVALID_ARGUMENT (NULL buf, cap < 64). Never touches a device; thread-safe.
 * Defined only in CUDA builds (devices/CMakeLists.txt compiles devices/cuda/ when
 * TROUPE_HAVE_CUDA); callers outside devices/cuda guard their call with #if TROUPE_HAVE_CUDA. */
TROUPE_MUST_USE troupe_status_t troupe_cuda_versions(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
