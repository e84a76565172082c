/* troupe — the `cuda` driver (docs/architecture.md §7; seeds `Backend_intf` CUDA config and
 * `Backend_impl`): one troupe device per visible GPU, driven through the CUDA Runtime API, with
 * kernels from compiler/cgen's CUDA dialect compiled by NVRTC (devices/cuda/nvrtc.h).
 *
 *   - open: cudaGetDeviceCount; every visible GPU is a device (ordinal = CUDA device index).
 *     No driver or no GPU is not an error: the backend opens with 0 devices and logs, at info
 *     level, why (the cudaError_t name cudaGetDeviceCount returned). Each device's primary
 *     context is created at open (cudaInitDevice): a device that cannot be used (compute mode
 *     prohibited, or exclusive-process and held by another process) fails the open with
 *     DEVICE_ERROR naming the cudaError_t and the compute mode; the info line gives the
 *     context's cost. Every thread that issues work sets its device first (cudaSetDevice at
 *     each queue entry, allocation and load: the current device is per thread). Peer access
 *     is enabled between every pair of devices that supports it. While a backend that sees a
 *     device is open, tensor nodes' host arrays of 64 KiB or more are allocated in whole pages
 *     and registered with the runtime (cudaHostRegister; ir/tnode_impl.h), so their copies need
 *     no staging (a registration that fails leaves the array pageable, logged at debug); when
 *     the last such backend closes, troupe_calloc is back for later arrays.
 *   - pools: cudaMalloc'd device memory addressed {pool_id, offset} (devices/pools_impl.h);
 *     used bytes are counted exactly; an allocation the device cannot hold is
 *     RESOURCE_EXHAUSTED naming the bytes asked and the bytes free (cudaMemGetInfo).
 *   - queues: each owns a non-blocking cudaStream_t (cudaStreamNonBlocking) created on its
 *     stream actor's thread. Every queue entry enqueues and returns: memset_zero
 *     cudaMemsetAsync; h2d/d2h cudaMemcpyAsync, directly when the host memory is page-locked
 *     (cudaHostAlloc'd or registered), else through two pinned staging buffers of the queue
 *     (h2d: the host data is copied into them before the entry returns; d2h: the entry returns
 *     once the data reached the host, i.e. it waits for the queue); d2d cudaMemcpyAsync on one
 *     device, cudaMemcpyPeerAsync between devices (the runtime stages through the host when
 *     peer access is off); launch runs the code's steps (compiler/cgen.h): kernels with
 *     cudaLaunchKernel, GEMM steps with cuBLASLt (TF32 off) or the step's kernels.
 *   - events: event_record is cudaEventRecord of a cudaEventDisableTiming event; event_query
 *     cudaEventQuery (a CUDA error fails the event with DEVICE_ERROR naming the cudaError_t);
 *     event_wait cudaStreamWaitEvent (no host round trip). The vtable sets async_queues: the
 *     actors above complete troupe events from these (actors/async_impl.h's poller).
 *   - code: compile emits the CUDA dialect and compiles it for each distinct architecture of
 *     the devices (troupe__cuda_image: a cubin for sm_XY, or PTX), loads each image with
 *     cudaLibraryLoadData and finds its kernels with cudaLibraryGetKernel; each kernel's
 *     attributes are asked (cudaFuncGetAttributes, which loads it into the context), so an
 *     image the device cannot run or a block larger than the kernel allows fails the compile
 *     (DEVICE_ERROR), and TROUPE_LOG=debug:devices lists registers, local and shared bytes.
 *     code_release waits for the devices to be idle before cudaLibraryUnload (a launch may
 *     still be queued when the code's last reference goes). Launch arguments are
 *     checked as on the CPU (devices/pools_impl.h); static indices and the merge buffer are read
 *     at each launch (a replayed graph is one captured with the same ones: "graphs" below).
 *   - graphs (graph.c; issue 16): graph_capture runs the launch entry between
 *     cudaStreamBeginCapture (cudaStreamCaptureModeThreadLocal: only the queue's thread is
 *     barred from unsafe calls) and cudaStreamEndCapture, then cudaGraphInstantiate; any
 *     failure ends the capture and returns (the stream is left as it was). graph_launch is
 *     cudaGraphLaunch on the queue's stream, after checking that every argument still resolves
 *     to the address it had at capture and the GEMM mode is unchanged (else UNAVAILABLE: the
 *     policy drops the graph). graph_release is cudaGraphExecDestroy (an executable graph
 *     still in flight is freed when it completes: cuGraphExecDestroy's reference).
 *     When to capture is devices/graph.c's policy (device.h troupe_driver_launch), not here.
 *     Design: a captured launch bakes in every kernel parameter *and* every cuBLASLt operand
 *     address, and a GEMM step's operand addresses move with the static indices
 *     (compiler/cgen.h: offset + coeff x index). Updating parameters per replay
 *     (cudaGraphExecKernelNodeSetParams) would reach our kernels but not the nodes cuBLASLt
 *     captured, and reading static indices from a device buffer would need a cgen change and
 *     still not reach cuBLASLt. So a graph is keyed by its exact binding (the arguments'
 *     buffers, static-index values and merge buffer, on one queue, for one code): robust by
 *     construction, nothing to patch per replay, and one cudaGraphLaunch per run. A routine
 *     that cycles over up to TROUPE_GRAPH_SLOTS minibatch indices keeps one graph per index;
 *     one whose bindings keep changing stays plain. The warm-up runs (TROUPE_GRAPH_WARMUP_RUNS
 *     plain launches of the binding) build the cuBLASLt plans and the queue's workspace (one
 *     per queue, never reallocated: capture needs a stable workspace), so nothing is allocated
 *     during a capture. NOT YET RUN ON A GPU: only compiled.
 *   - gathers (gather.c; issue 30): a routine with gather indices (compiler/cgen.h) gets its
 *     queue's TROUPE_CGEN_GATHER_ERR_WORDS device words as the kernels' last argument. Each
 *     launch enqueues cudaMemsetAsync of the words, the steps (the first a one-thread index
 *     check; every kernel returns at once once the words are set; GEMM steps run their kernels,
 *     never cuBLASLt, which would still write), cudaMemcpyAsync of the words to pinned host
 *     words, and cudaLaunchHostFunc: in stream order, that function latches the queue's first
 *     failure (troupe_cgen_gather_failure's INVALID_ARGUMENT naming the index node, cell, value
 *     and range). A captured graph holds the same memset, copy and host nodes, so each replay
 *     zeroes and checks. Every event recorded on the queue after the failed launch then fails
 *     with that message once the device reaches it (event_query), and the queue's later launches
 *     are refused with it (as a failed stream drops its work on the CPU). A queue ordered
 *     after such an event by event_wait inherits the failure the same way (on the CPU, a WAIT
 *     on a failed event fails the stream).
 *     Work enqueued before the failure was latched still runs: only the failing routine is
 *     sure to write nothing. NOT YET RUN ON A GPU: compiled, the kernels emulated on the host.
 *   - suggested_num_streams (seed CUDA config): ONLY_DEVICES_PARALLEL 1,
 *     FOR_PARALLEL_COPYING 1 + the async engine count, MOST_PARALLEL_STREAMS the number of
 *     multiprocessors.
 * A CUDA error that concerns a call is returned by it (DEVICE_ERROR, or RESOURCE_EXHAUSTED for
 * cudaErrorMemoryAllocation) with "cuda <entry>: <what>: <cudaError_t name> (<description>)" in
 * troupe_last_error(). A sticky error (a faulting kernel: the cudaError_t values whose reference
 * says the process is left "in an inconsistent state") makes every later call on the device
 * fail; close resets such a device (cudaDeviceReset). The CUDA reference says that to use CUDA
 * again after such an error the process must be relaunched; tests/test_cuda.c checks whether a
 * backend opened after the reset works, and says which way it went.
 *
 * This header includes no CUDA header (devices/device.c includes it); the driver's CUDA-typed
 * internals are in devices/cuda/driver_impl.h.
 *
 * Thread safety: as devices/device.h. Ownership: as devices/device.h; event_release does not
 * use its driver argument (it may run after close).
 */
#ifndef TROUPE_DEVICES_CUDA_CUDA_IMPL_H
#define TROUPE_DEVICES_CUDA_CUDA_IMPL_H

#include "base/status.h"
#include "devices/device.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The cuda driver's vtable (device.c's lookup table). */
extern const troupe_driver_vtable_t troupe__driver_cuda;

/* The image of `source` (CUDA C++ of compiler/cgen) for architecture `arch` ("sm_XY": a cubin;
 * "compute_XY": PTX), from the compile cache or compiled by NVRTC and stored there: the
 * configured cache directory (troupe_config_cache_dir()) holds `<name>-<hash>.cubin` (or .ptx),
 * the 64-bit FNV-1a hash covering the troupe and NVRTC versions, the architecture, the options
 * and the source; a new image is written to a unique temporary file and renamed into place, so
 * concurrent compilers never see a partial one. *out_hit tells whether it came from the cache.
 * *out_image (troupe_malloc) holds *out_size bytes.
 * Errors: INVALID_ARGUMENT (name not an identifier, NULL arguments); DEVICE_ERROR when NVRTC
 * fails (the message carries the start of its log; the full log is logged at info level) or
 * the cache cannot be written; RESOURCE_EXHAUSTED. Needs no GPU. Thread-safe. */
TROUPE_MUST_USE troupe_status_t troupe__cuda_image(const char *name, const char *source,
                                                   const char *arch, bool ftz, void **out_image,
                                                   size_t *out_size, bool *out_hit);

/* Why the cuda driver sees no device, or "" when it sees some; for `troupe info` and the tests'
 * skip messages (e.g. "cudaGetDeviceCount: cudaErrorNoDevice (no CUDA-capable device is
 * detected)"). Asks the runtime (cudaGetDeviceCount) on each call; never fails. */
void troupe__cuda_why_no_device(char *buf, size_t cap);

/* The number of CUDA devices the runtime sees (0 when it sees none or fails). Like
 * troupe__cuda_why_no_device, it creates no context and installs nothing (cudaGetDeviceCount
 * only initialises the runtime): the cheap probe for tests and `troupe info`, where opening a
 * backend would create a context on every device. */
int troupe__cuda_device_count(void);

/* "cuBLASLt <version>" (what runs GEMM steps), or "none (built without cuBLASLt)". */
const char *troupe__cuda_gemm_name(void);

/* One line about CUDA device `ordinal` for `troupe info`: "<name>, compute <major>.<minor>,
 * <SMs> SMs, <MiB> MiB, arch <sm_XY|compute_XY>". INVALID_ARGUMENT / DEVICE_ERROR. */
TROUPE_MUST_USE troupe_status_t troupe__cuda_describe(int ordinal, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
