/* troupe — the cuda driver: devices, pools, queues, copies, events and launch (see
 * cuda_impl.h; compile is in module.c, GEMM steps in gemm_lt.c). */
#define _POSIX_C_SOURCE 200809L
#include "devices/cuda/driver_impl.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/status.h"
#include "devices/cuda/nvrtc.h"
#include "ir/tnode_impl.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_NAME "cuda"
/* Launches with at most this many parameters build their argument arrays on the stack. */
#define S_STACK_ARGS 32

/* ---- errors and devices ------------------------------------------------------------------ */

/* Errors after which the context is unusable: those whose description in the CUDA runtime API
 * reference (cudaError, driver_types.h of CUDA 13.0) says "This leaves the process in an
 * inconsistent state and any further CUDA work will return the same error", plus an
 * uncorrectable ECC error. */
static bool s_is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorContained:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
    case cudaErrorECCUncorrectable:
        return true;
    default:
        return false;
    }
}

/* The first sticky error seen on each device ordinal in this process (0: none). The CUDA
 * reference says a process must be relaunched to use CUDA after one, and a GPU showed it
 * (an H200, driver 580: after a trap and cudaDeviceReset, cudaInitDevice answered
 * cudaErrorDevicesUnavailable), so a later backend refuses the device by name instead of
 * failing on a less telling error. Ordinals past the table are not remembered. */
#define S_MAX_ORDINALS 64
static _Atomic int s_sticky_seen[S_MAX_ORDINALS];

troupe_status_t troupe__cuda_fail(troupe__cuda_dev_t *dev, cudaError_t e, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    (void)cudaGetLastError(); /* a non-sticky error must not surface in a later call */
    if (dev != NULL && s_is_sticky(e)) {
        dev->sticky = true;
        int none = 0;
        if (dev->ordinal >= 0 && dev->ordinal < S_MAX_ORDINALS)
            atomic_compare_exchange_strong(&s_sticky_seen[dev->ordinal], &none, (int)e);
    }
    return troupe__error(e == cudaErrorMemoryAllocation ? TROUPE_RESOURCE_EXHAUSTED
                                                        : TROUPE_DEVICE_ERROR,
                         "cuda %s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static troupe__cuda_driver_t *s_self(troupe_driver_t *drv)
{
    return (troupe__cuda_driver_t *)drv;
}

static troupe_status_t s_dev(troupe__cuda_driver_t *d, const char *op, int ordinal,
                             troupe__cuda_dev_t **out)
{
    if (ordinal < 0 || ordinal >= d->ndevices)
        return troupe__error(TROUPE_NOT_FOUND, "cuda %s: no device %d (the driver has %d)", op,
                             ordinal, d->ndevices);
    *out = &d->devs[ordinal];
    return TROUPE_OK;
}

troupe_status_t troupe__cuda_use(troupe__cuda_driver_t *d, int ordinal)
{
    cudaError_t e = cudaSetDevice(ordinal);
    if (e != cudaSuccess)
        return troupe__cuda_fail(&d->devs[ordinal], e, "cudaSetDevice(%d)", ordinal);
    return TROUPE_OK;
}

void troupe__cuda_why_no_device(char *buf, size_t cap)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(buf, cap, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(e),
                 cudaGetErrorString(e));
        (void)cudaGetLastError();
    } else if (n == 0) {
        snprintf(buf, cap, "cudaGetDeviceCount: 0 devices");
    } else if (cap > 0) {
        buf[0] = '\0';
    }
}

int troupe__cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    return n;
}

/* Fills dev from the runtime's properties of CUDA device `ordinal`. */
static troupe_status_t s_probe(troupe__cuda_dev_t *dev, int ordinal)
{
    memset(dev, 0, sizeof *dev);
    dev->ordinal = ordinal;
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, ordinal);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&dev->cc_major, cudaDevAttrComputeCapabilityMajor, ordinal);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&dev->cc_minor, cudaDevAttrComputeCapabilityMinor, ordinal);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&dev->sm_count, cudaDevAttrMultiProcessorCount, ordinal);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&dev->async_engines, cudaDevAttrAsyncEngineCount, ordinal);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&dev->compute_mode, cudaDevAttrComputeMode, ordinal);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&dev->shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                   ordinal);
    if (e != cudaSuccess)
        return troupe__cuda_fail(NULL, e, "open: properties of device %d", ordinal);
    snprintf(dev->name, sizeof dev->name, "%s", p.name);
    dev->total_bytes = p.totalGlobalMem;
    TROUPE_RETURN_IF_ERROR(
        troupe_nvrtc_arch_for(dev->cc_major, dev->cc_minor, dev->arch, sizeof dev->arch));
    if (pthread_mutex_init(&dev->lock, NULL) != 0)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda open: pthread_mutex_init failed");
    return TROUPE_OK;
}

troupe_status_t troupe__cuda_describe(int ordinal, char *buf, size_t cap)
{
    if (buf == NULL || cap == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe__cuda_describe: NULL buffer");
    troupe__cuda_dev_t dev;
    TROUPE_RETURN_IF_ERROR(s_probe(&dev, ordinal));
    pthread_mutex_destroy(&dev.lock);
    snprintf(buf, cap, "%s, compute %d.%d, %d SMs, %zu MiB, arch %s", dev.name, dev.cc_major,
             dev.cc_minor, dev.sm_count, dev.total_bytes >> 20, dev.arch);
    return TROUPE_OK;
}

/* Peer access between every pair of devices that can (cudaDeviceCanAccessPeer); a pair that
 * cannot is copied through the host by cudaMemcpyPeerAsync. */
static void s_enable_peers(troupe__cuda_driver_t *d)
{
    for (int i = 0; i < d->ndevices; i++)
        for (int j = 0; j < d->ndevices; j++) {
            int can = 0;
            if (i == j || cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess || !can)
                continue;
            cudaError_t e = cudaSetDevice(i);
            if (e == cudaSuccess)
                e = cudaDeviceEnablePeerAccess(j, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
                TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
                           "cuda: no peer access from device %d to %d: %s", i, j,
                           cudaGetErrorName(e));
            (void)cudaGetLastError();
        }
}

/* The distinct architectures of the devices (each device's arch_index into them). */
static troupe_status_t s_archs(troupe__cuda_driver_t *d)
{
    d->archs = troupe_calloc(d->ndevices > 0 ? (size_t)d->ndevices : 1, sizeof *d->archs);
    if (d->archs == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda open: out of memory");
    for (int i = 0; i < d->ndevices; i++) {
        int k = 0;
        while (k < d->narchs && strcmp(d->archs[k], d->devs[i].arch) != 0)
            k++;
        if (k == d->narchs)
            snprintf(d->archs[d->narchs++], TROUPE__CUDA_ARCH_MAX, "%s", d->devs[i].arch);
        d->devs[i].arch_index = k;
    }
    return TROUPE_OK;
}

/* Host arrays of tensor nodes (ir/tnode_impl.h): page-aligned memory registered with the CUDA
 * runtime (cudaHostRegister), so copies to and from them are direct and asynchronous. Registered
 * rather than cudaHostAlloc'd: the memory stays valid (pageable again, copies then staged) if
 * the device is reset after a sticky error. */
#define S_PIN_MIN_BYTES ((size_t)64 << 10)

#define S_PAGE_BYTES ((size_t)4096)

/* Whole pages are allocated and registered, so no two registered ranges share a page
 * (cudaHostRegister pins whole pages; a range overlapping a registered one is
 * cudaErrorHostMemoryAlreadyRegistered, CUDA runtime API reference). */
static void *s_pinned_alloc(size_t size_bytes)
{
    void *p = NULL;
    size_t pages = (size_bytes + S_PAGE_BYTES - 1) / S_PAGE_BYTES * S_PAGE_BYTES;
    if (pages < size_bytes || posix_memalign(&p, S_PAGE_BYTES, pages) != 0)
        return NULL;
    cudaError_t e = cudaHostRegister(p, pages, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        /* Stays pageable: its copies are staged. */
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                   "cuda: host array of %zu bytes not page-locked: cudaHostRegister: %s", pages,
                   cudaGetErrorName(e));
        (void)cudaGetLastError();
    }
    return p;
}

static void s_pinned_free(void *p)
{
    if (p == NULL)
        return;
    if (cudaHostUnregister(p) != cudaSuccess)
        (void)cudaGetLastError();
    free(p);
}

/* The pinned allocator is installed while some open driver sees a device, and uninstalled when
 * the last such one closes: a process that opened and closed a cuda backend (a test that asked
 * whether a GPU is there, `troupe doctor`) then allocates its later host arrays as before,
 * unregistered (arrays allocated meanwhile keep s_pinned_free). */
static pthread_mutex_t s_pin_lock = PTHREAD_MUTEX_INITIALIZER;
static int s_pin_users;

static void s_pin_acquire(troupe__cuda_driver_t *d)
{
    pthread_mutex_lock(&s_pin_lock);
    if (s_pin_users++ == 0)
        troupe__tnode_set_host_allocator(s_pinned_alloc, s_pinned_free, S_PIN_MIN_BYTES);
    pthread_mutex_unlock(&s_pin_lock);
    d->pins = true;
}

static void s_pin_release(troupe__cuda_driver_t *d)
{
    if (!d->pins)
        return;
    d->pins = false;
    pthread_mutex_lock(&s_pin_lock);
    if (--s_pin_users == 0)
        troupe__tnode_set_host_allocator(NULL, NULL, 0);
    pthread_mutex_unlock(&s_pin_lock);
}

static const char *s_compute_mode_name(int mode)
{
    switch (mode) {
    case cudaComputeModeDefault:
        return "default";
    case cudaComputeModeProhibited:
        return "prohibited";
    case cudaComputeModeExclusiveProcess:
        return "exclusive-process";
    default:
        return "unknown";
    }
}

/* Creates the device's primary context now (cudaInitDevice, CUDA 12.0+), so a device that
 * cannot be used (compute mode prohibited, exclusive-process and taken by another process:
 * cudaErrorDevicesUnavailable) fails the open with its error rather than the first queue, and
 * the log says what the context cost. */
static troupe_status_t s_init_device(troupe__cuda_dev_t *dev)
{
    int seen = dev->ordinal >= 0 && dev->ordinal < S_MAX_ORDINALS
                   ? atomic_load(&s_sticky_seen[dev->ordinal])
                   : 0;
    if (seen != 0)
        return troupe__error(TROUPE_DEVICE_ERROR,
                             "cuda open: device %d (%s) had a sticky error earlier in this "
                             "process (%s: %s); CUDA cannot use it again in this process: "
                             "restart the process",
                             dev->ordinal, dev->name, cudaGetErrorName((cudaError_t)seen),
                             cudaGetErrorString((cudaError_t)seen));
    int64_t t0 = troupe_now_ns();
    cudaError_t e = cudaInitDevice(dev->ordinal, 0, 0);
    if (e != cudaSuccess)
        return troupe__cuda_fail(NULL, e, "open: device %d (%s, compute mode %s): cudaInitDevice",
                                 dev->ordinal, dev->name, s_compute_mode_name(dev->compute_mode));
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
               "cuda: device %d: %s, compute %d.%d, %d SMs, %zu MiB, %d copy engines, compute "
               "mode %s, code for %s; context ready in %.1f ms",
               dev->ordinal, dev->name, dev->cc_major, dev->cc_minor, dev->sm_count,
               dev->total_bytes >> 20, dev->async_engines, s_compute_mode_name(dev->compute_mode),
               dev->arch, (double)(troupe_now_ns() - t0) * 1e-6);
    return TROUPE_OK;
}

static void s_close(troupe_driver_t *drv);

static troupe_status_t s_open(troupe_driver_t **out)
{
    troupe__cuda_driver_t *d = troupe_calloc(1, sizeof *d);
    if (d == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda open: out of memory");
    d->base.vt = &troupe__driver_cuda;
    troupe_status_t st = TROUPE_OK;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        char why[256];
        troupe__cuda_why_no_device(why, sizeof why);
        (void)cudaGetLastError();
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES, "cuda: 0 devices: %s", why);
        n = 0;
    }
    if (n > 0 && (d->devs = troupe_calloc((size_t)n, sizeof *d->devs)) == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda open: out of memory");
        goto out_fail;
    }
    for (int i = 0; i < n; i++) {
        if ((st = s_probe(&d->devs[i], i)) != TROUPE_OK)
            goto out_fail;
        d->ndevices++;
        if ((st = s_init_device(&d->devs[i])) != TROUPE_OK)
            goto out_fail;
    }
    if ((st = s_archs(d)) != TROUPE_OK)
        goto out_fail;
    s_enable_peers(d);
    if (d->ndevices > 0)
        s_pin_acquire(d);
    *out = &d->base;
    return TROUPE_OK;
out_fail:
    s_close(&d->base);
    return st;
}

static void s_close(troupe_driver_t *drv)
{
    if (drv == NULL)
        return;
    troupe__cuda_driver_t *d = s_self(drv);
    s_pin_release(d);
    for (int i = 0; i < d->ndevices; i++) {
        troupe__cuda_dev_t *dev = &d->devs[i];
        if (dev->pools.n > 0)
            TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                       "cuda close: device %d: freeing %zu pools still allocated", i,
                       dev->pools.n);
        cudaError_t se = cudaSetDevice(i);
        if (se == cudaSuccess)
            for (size_t k = 0; k < dev->pools.n; k++)
                (void)cudaFree(dev->pools.v[k].base);
        if (dev->sticky) {
            /* cudaDeviceReset resets the calling thread's current device: with a sticky error
             * cudaSetDevice may return it, so the reset happens only once device i is
             * current, never on another device. */
            int cur = -1;
            if (cudaGetDevice(&cur) == cudaSuccess && cur == i) {
                cudaError_t re = cudaDeviceReset();
                TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
                           "cuda close: device %d had a sticky error; cudaSetDevice: %s, "
                           "cudaDeviceReset: %s",
                           i, cudaGetErrorName(se), cudaGetErrorName(re));
            } else {
                TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_DEVICES,
                           "cuda close: device %d had a sticky error and cannot be made current "
                           "(cudaSetDevice: %s; current device %d): not reset",
                           i, cudaGetErrorName(se), cur);
            }
        }
        (void)cudaGetLastError();
        troupe__pools_free(&dev->pools);
        pthread_mutex_destroy(&dev->lock);
    }
    troupe_free(d->devs);
    troupe_free(d->archs);
    troupe_free(d);
}

static int s_num_devices(troupe_driver_t *drv)
{
    return s_self(drv)->ndevices;
}

/* Seed `Backend_intf` CUDA config: 1; 1 + the async engines (copies overlap compute); one per
 * multiprocessor. 0 for a device that does not exist. */
static int s_suggested_num_streams(troupe_driver_t *drv, int ordinal, troupe_stream_config_t cfg)
{
    troupe__cuda_driver_t *d = s_self(drv);
    if (ordinal < 0 || ordinal >= d->ndevices)
        return 0;
    const troupe__cuda_dev_t *dev = &d->devs[ordinal];
    switch (cfg) {
    case TROUPE_ONLY_DEVICES_PARALLEL:
        return 1;
    case TROUPE_FOR_PARALLEL_COPYING:
        return 1 + dev->async_engines;
    case TROUPE_MOST_PARALLEL_STREAMS:
        return dev->sm_count > 0 ? dev->sm_count : 1;
    }
    return 1;
}

/* ---- memory ------------------------------------------------------------------------------ */

static troupe_status_t s_alloc_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id,
                                    int64_t size_bytes, bool zero)
{
    troupe__cuda_driver_t *d = s_self(drv);
    troupe__cuda_dev_t *dev = NULL;
    TROUPE_RETURN_IF_ERROR(s_dev(d, "alloc_pool", ordinal, &dev));
    if (size_bytes < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "cuda alloc_pool: pool %d: bad size %lld",
                             (int)pool_id, (long long)size_bytes);
    TROUPE_RETURN_IF_ERROR(troupe__cuda_use(d, ordinal));
    troupe_status_t st = TROUPE_OK;
    void *base = NULL;
    pthread_mutex_lock(&dev->lock);
    if ((st = troupe__pools_reserve(&dev->pools, S_NAME, ordinal, pool_id)) != TROUPE_OK)
        goto out_unlock;
    /* A 0-byte pool still gets an address (256 bytes, cudaMalloc's alignment). */
    cudaError_t e = cudaMalloc(&base, size_bytes > 0 ? (size_t)size_bytes : 256);
    if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total_b = 0;
        (void)cudaGetLastError();
        (void)cudaMemGetInfo(&free_b, &total_b);
        (void)cudaGetLastError();
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                           "cuda alloc_pool: pool %d: cannot allocate %lld bytes on device %d "
                           "(%s): %zu bytes free of %zu (cudaErrorMemoryAllocation)",
                           (int)pool_id, (long long)size_bytes, ordinal, dev->name, free_b,
                           total_b);
        goto out_unlock;
    }
    if (e != cudaSuccess) {
        st = troupe__cuda_fail(dev, e, "alloc_pool: cudaMalloc of %lld bytes for pool %d",
                               (long long)size_bytes, (int)pool_id);
        goto out_unlock;
    }
    if (zero && size_bytes > 0) {
        /* On the legacy stream and waited for: the non-blocking streams do not order after it. */
        e = cudaMemsetAsync(base, 0, (size_t)size_bytes, 0);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(0);
        if (e != cudaSuccess) {
            st = troupe__cuda_fail(dev, e, "alloc_pool: zeroing pool %d", (int)pool_id);
            (void)cudaFree(base);
            goto out_unlock;
        }
    }
    troupe__pools_insert(&dev->pools, (troupe__pool_slot_t){pool_id, base, size_bytes});
    dev->used_bytes += size_bytes;
out_unlock:
    pthread_mutex_unlock(&dev->lock);
    return st;
}

static troupe_status_t s_free_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id)
{
    troupe__cuda_driver_t *d = s_self(drv);
    troupe__cuda_dev_t *dev = NULL;
    TROUPE_RETURN_IF_ERROR(s_dev(d, "free_pool", ordinal, &dev));
    troupe__pool_slot_t slot = {0, NULL, 0};
    pthread_mutex_lock(&dev->lock);
    troupe_status_t st = troupe__pools_remove(&dev->pools, S_NAME, ordinal, pool_id, &slot);
    if (st == TROUPE_OK)
        dev->used_bytes -= slot.size_bytes;
    pthread_mutex_unlock(&dev->lock);
    if (st != TROUPE_OK)
        return st;
    /* cudaFree waits for the device first, so work still reading the pool finishes. */
    TROUPE_RETURN_IF_ERROR(troupe__cuda_use(d, ordinal));
    cudaError_t e = cudaFree(slot.base);
    if (e != cudaSuccess)
        return troupe__cuda_fail(dev, e, "free_pool: pool %d", (int)pool_id);
    return TROUPE_OK;
}

/* The device address of buf on device `ordinal` (driver_impl.h). */
troupe_status_t troupe__cuda_resolve(troupe__cuda_driver_t *d, const char *op, int ordinal,
                                     troupe_buffer_loc_t buf, void **out)
{
    troupe__cuda_dev_t *dev = NULL;
    TROUPE_RETURN_IF_ERROR(s_dev(d, op, ordinal, &dev));
    pthread_mutex_lock(&dev->lock);
    troupe_status_t st = troupe__pools_resolve(&dev->pools, S_NAME, op, ordinal, buf, out);
    pthread_mutex_unlock(&dev->lock);
    return st;
}

/* ---- queues ------------------------------------------------------------------------------ */

static troupe_status_t s_queue_create(troupe_driver_t *drv, int ordinal, troupe_dqueue_t **out)
{
    troupe__cuda_driver_t *d = s_self(drv);
    troupe__cuda_dev_t *dev = NULL;
    TROUPE_RETURN_IF_ERROR(s_dev(d, "queue_create", ordinal, &dev));
    TROUPE_RETURN_IF_ERROR(troupe__cuda_use(d, ordinal));
    troupe_dqueue_t *q = troupe_calloc(1, sizeof *q);
    if (q == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda queue_create: out of memory");
    q->drv = d;
    q->ordinal = ordinal;
    cudaError_t e = cudaStreamCreateWithFlags(&q->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        troupe_free(q);
        return troupe__cuda_fail(dev, e, "queue_create: cudaStreamCreateWithFlags on device %d",
                                 ordinal);
    }
    *out = q;
    return TROUPE_OK;
}

static void s_queue_destroy(troupe_driver_t *drv, troupe_dqueue_t *q)
{
    if (q == NULL)
        return;
    (void)cudaSetDevice(q->ordinal);
    (void)cudaStreamSynchronize(q->stream);
    troupe__cuda_gemm_queue_free(q);
    troupe__cuda_gather_queue_free(q);
    for (int i = 0; i < 2; i++) {
        if (q->stage[i] != NULL) {
            (void)cudaEventDestroy(q->stage_ev[i]);
            (void)cudaFreeHost(q->stage[i]);
        }
    }
    (void)cudaStreamDestroy(q->stream);
    (void)cudaGetLastError();
    troupe_free(q);
}

static troupe_status_t s_check_queue(const char *op, troupe_dqueue_t *q)
{
    if (q == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "cuda %s: NULL queue", op);
    return troupe__cuda_use(q->drv, q->ordinal);
}

static troupe__cuda_dev_t *s_qdev(troupe_dqueue_t *q)
{
    return &q->drv->devs[q->ordinal];
}

static troupe_status_t s_memset_zero(troupe_driver_t *drv, troupe_dqueue_t *q,
                                     troupe_buffer_loc_t dst)
{
    TROUPE_RETURN_IF_ERROR(s_check_queue("memset_zero", q));
    void *p = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__cuda_resolve(q->drv, "memset_zero", q->ordinal, dst, &p));
    cudaError_t e = cudaMemsetAsync(p, 0, (size_t)dst.size_bytes, q->stream);
    if (e != cudaSuccess)
        return troupe__cuda_fail(s_qdev(q), e, "memset_zero of %lld bytes",
                                 (long long)dst.size_bytes);
    return TROUPE_OK;
}

/* Whether host memory at p is page-locked (cudaHostAlloc'd or registered): then the copy
 * engines read it directly and asynchronously. */
static bool s_pinned(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

/* Staging slot i of q, allocated on first use; waits until its last copy finished. */
static troupe_status_t s_stage(troupe_dqueue_t *q, int i, void **out)
{
    cudaError_t e = cudaSuccess;
    if (q->stage[i] == NULL) {
        e = cudaHostAlloc(&q->stage[i], TROUPE__CUDA_STAGE_BYTES, cudaHostAllocPortable);
        if (e != cudaSuccess) {
            q->stage[i] = NULL;
            return troupe__cuda_fail(s_qdev(q), e, "staging buffer of %zu bytes",
                                     TROUPE__CUDA_STAGE_BYTES);
        }
        e = cudaEventCreateWithFlags(&q->stage_ev[i], cudaEventDisableTiming);
        if (e != cudaSuccess) {
            (void)cudaFreeHost(q->stage[i]);
            q->stage[i] = NULL;
            return troupe__cuda_fail(s_qdev(q), e, "staging event");
        }
    } else if (q->stage_busy[i]) {
        e = cudaEventSynchronize(q->stage_ev[i]);
        if (e != cudaSuccess)
            return troupe__cuda_fail(s_qdev(q), e, "waiting for a staged copy");
    }
    q->stage_busy[i] = false;
    *out = q->stage[i];
    return TROUPE_OK;
}

/* Enqueues a copy from or into staging slot i and marks the slot busy until it is done. */
static troupe_status_t s_stage_copy(troupe_dqueue_t *q, int i, void *dst, const void *src,
                                    size_t n, enum cudaMemcpyKind kind)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, q->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(q->stage_ev[i], q->stream);
    if (e != cudaSuccess)
        return troupe__cuda_fail(s_qdev(q), e, "staged copy of %zu bytes", n);
    q->stage_busy[i] = true;
    return TROUPE_OK;
}

/* Bytes of the staged chunk at `off` of an n-byte copy. */
static size_t s_chunk(size_t n, size_t off)
{
    return n - off < TROUPE__CUDA_STAGE_BYTES ? n - off : TROUPE__CUDA_STAGE_BYTES;
}

/* What h2d and d2h share: checks, the device address of buf in *dev, and the copy itself when
 * it needs no staging (nothing to copy, or page-locked host memory): then *done. */
static troupe_status_t s_host_copy(troupe_dqueue_t *q, bool to_host, troupe_buffer_loc_t buf,
                                   const void *host, int64_t size_bytes, char **dev, bool *done)
{
    const char *op = to_host ? "d2h" : "h2d";
    *done = false;
    TROUPE_RETURN_IF_ERROR(s_check_queue(op, q));
    TROUPE_RETURN_IF_ERROR(troupe__check_copy_size(S_NAME, op, buf, size_bytes));
    if (host == NULL && size_bytes > 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "cuda %s: NULL host %s", op,
                             to_host ? "destination" : "source");
    TROUPE_RETURN_IF_ERROR(troupe__cuda_resolve(q->drv, op, q->ordinal, buf, (void **)dev));
    if (size_bytes > 0 && !s_pinned(host))
        return TROUPE_OK;
    *done = true;
    if (size_bytes == 0)
        return TROUPE_OK;
    cudaError_t e = to_host ? cudaMemcpyAsync((void *)host, *dev, (size_t)size_bytes,
                                              cudaMemcpyDeviceToHost, q->stream)
                            : cudaMemcpyAsync(*dev, host, (size_t)size_bytes,
                                              cudaMemcpyHostToDevice, q->stream);
    if (e != cudaSuccess)
        return troupe__cuda_fail(s_qdev(q), e, "%s of %lld bytes", op, (long long)size_bytes);
    return TROUPE_OK;
}

static troupe_status_t s_h2d(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_buffer_loc_t dst,
                             const void *src, int64_t size_bytes)
{
    char *p = NULL;
    bool done = false;
    TROUPE_RETURN_IF_ERROR(s_host_copy(q, false, dst, src, size_bytes, &p, &done));
    if (done)
        return TROUPE_OK;
    /* Pageable memory: copied into the two staging buffers in turn, so the host copy of one
     * chunk overlaps the transfer of the other. */
    size_t n = (size_t)size_bytes;
    for (size_t off = 0, c = 0; off < n; off += TROUPE__CUDA_STAGE_BYTES, c++) {
        int i = (int)(c & 1);
        void *stage = NULL;
        TROUPE_RETURN_IF_ERROR(s_stage(q, i, &stage));
        memcpy(stage, (const char *)src + off, s_chunk(n, off));
        TROUPE_RETURN_IF_ERROR(
            s_stage_copy(q, i, p + off, stage, s_chunk(n, off), cudaMemcpyHostToDevice));
    }
    return TROUPE_OK;
}

static troupe_status_t s_d2h(troupe_driver_t *drv, troupe_dqueue_t *q, void *dst,
                             troupe_buffer_loc_t src, int64_t size_bytes)
{
    char *p = NULL;
    bool done = false;
    TROUPE_RETURN_IF_ERROR(s_host_copy(q, true, src, dst, size_bytes, &p, &done));
    if (done)
        return TROUPE_OK;
    /* Pageable memory: chunk c lands in staging slot c % 2, and chunk c - 2 is copied out of
     * that slot first, so the transfer of one chunk overlaps the host copy of the other. The
     * entry returns when all the data is in dst. */
    size_t n = (size_t)size_bytes, nchunks = (n + TROUPE__CUDA_STAGE_BYTES - 1) /
                                              TROUPE__CUDA_STAGE_BYTES;
    for (size_t c = 0; c < nchunks + 2; c++) {
        if (c >= 2) {
            size_t off = (c - 2) * TROUPE__CUDA_STAGE_BYTES;
            void *stage = NULL;
            TROUPE_RETURN_IF_ERROR(s_stage(q, (int)(c & 1), &stage));
            memcpy((char *)dst + off, stage, s_chunk(n, off));
        }
        if (c < nchunks) {
            size_t off = c * TROUPE__CUDA_STAGE_BYTES;
            void *stage = NULL;
            TROUPE_RETURN_IF_ERROR(s_stage(q, (int)(c & 1), &stage));
            TROUPE_RETURN_IF_ERROR(s_stage_copy(q, (int)(c & 1), stage, p + off, s_chunk(n, off),
                                                cudaMemcpyDeviceToHost));
        }
    }
    return TROUPE_OK;
}

static troupe_status_t s_d2d(troupe_driver_t *drv, troupe_dqueue_t *q, int dst_ordinal,
                             troupe_buffer_loc_t dst, int src_ordinal, troupe_buffer_loc_t src,
                             int64_t size_bytes)
{
    TROUPE_RETURN_IF_ERROR(s_check_queue("d2d", q));
    TROUPE_RETURN_IF_ERROR(troupe__check_copy_size(S_NAME, "d2d (destination)", dst, size_bytes));
    TROUPE_RETURN_IF_ERROR(troupe__check_copy_size(S_NAME, "d2d (source)", src, size_bytes));
    void *pd = NULL, *ps = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__cuda_resolve(q->drv, "d2d (destination)", dst_ordinal, dst, &pd));
    TROUPE_RETURN_IF_ERROR(troupe__cuda_resolve(q->drv, "d2d (source)", src_ordinal, src, &ps));
    if (size_bytes == 0)
        return TROUPE_OK;
    cudaError_t e = dst_ordinal == src_ordinal
                        ? cudaMemcpyAsync(pd, ps, (size_t)size_bytes, cudaMemcpyDeviceToDevice,
                                          q->stream)
                        : cudaMemcpyPeerAsync(pd, dst_ordinal, ps, src_ordinal,
                                              (size_t)size_bytes, q->stream);
    if (e != cudaSuccess)
        return troupe__cuda_fail(s_qdev(q), e, "d2d of %lld bytes from device %d to %d",
                                 (long long)size_bytes, src_ordinal, dst_ordinal);
    return TROUPE_OK;
}

/* ---- launch ------------------------------------------------------------------------------ */

/* The device address of a GEMM operand: its parameter's buffer plus its offset at this call. */
static const void *s_gemm_addr(const troupe_cgen_gemm_operand_t *o, size_t es, void *const *ptrs,
                               const int64_t *values)
{
    int64_t off = o->offset;
    for (int t = 0; t < o->nterms; t++)
        off += o->coeff[t] * values[o->static_param[t]];
    return (const char *)ptrs[o->param] + off * (int64_t)es;
}

static troupe_status_t s_launch_kernel(troupe_dqueue_t *q, troupe_dcode_t *code, size_t k,
                                       void **kargs)
{
    const troupe_cgen_kernel_t *kn = &code->gen->kernels[k];
    int a = q->drv->devs[q->ordinal].arch_index;
    dim3 grid = {kn->grid[0], kn->grid[1], 1}, block = {kn->block[0], kn->block[1], 1};
    const void *fn = (const void *)code->kernels[(size_t)a * code->gen->nkernels + k];
    /* the kernel takes only the parameters it names (troupe_cgen_kernel_t.args); the launch
     * copies the argument values, so the array may go once it returns */
    void *sub_stack[64], **sub = sub_stack;
    if (kn->nargs > sizeof sub_stack / sizeof sub_stack[0] &&
        (sub = troupe_calloc(kn->nargs, sizeof *sub)) == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "launch %s: out of memory", code->name);
    for (size_t j = 0; j < kn->nargs; j++)
        sub[j] = kargs[kn->args[j]];
    cudaError_t e = cudaLaunchKernel(fn, grid, block, sub, kn->dynamic_shared_bytes, q->stream);
    if (sub != sub_stack)
        troupe_free(sub);
    if (e != cudaSuccess)
        return troupe__cuda_fail(s_qdev(q), e,
                                 "launch %s: kernel %s (grid %ux%u, block %ux%u, %u bytes of "
                                 "dynamic shared memory)",
                                 code->name, kn->name, kn->grid[0], kn->grid[1], kn->block[0],
                                 kn->block[1], kn->dynamic_shared_bytes);
    return TROUPE_OK;
}

/* Runs the code's steps with the bound arguments (ptrs: device addresses; values: static
 * indices; kargs[i] points to parameter i's value, kargs[nparams] to the gather error words;
 * each kernel gets its own arguments from them, s_launch_kernel). */
static troupe_status_t s_run_steps(troupe_dqueue_t *q, troupe_dcode_t *code, void **ptrs,
                                   const int64_t *values, void **kargs)
{
    const troupe_cgen_result_t *gen = code->gen;
    /* With gather indices the first step checks them, and the later kernels return at once
     * after a failure, while cuBLASLt would still write its outputs. TROUPE_CUDA_GATHER_GEMM
     * (base/config.h): checked waits for the check before the first product that would use
     * cuBLASLt (not while the stream is being captured: tiles then), tiles never uses it,
     * library does without the wait. */
    troupe_cuda_gather_gemm_t mode =
        gen->ngathers > 0 ? troupe_config_cuda_gather_gemm() : TROUPE_CUDA_GATHER_GEMM_LIBRARY;
    bool wait = troupe__cuda_gather_checked(gen);
    if (wait) {
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(q->stream, &cs) != cudaSuccess ||
            cs != cudaStreamCaptureStatusNone) {
            wait = false;
            mode = TROUPE_CUDA_GATHER_GEMM_TILES;
        }
        (void)cudaGetLastError();
    }
    for (size_t s = 0; s < gen->nsteps; s++) {
        const troupe_cgen_step_t *st = &gen->steps[s];
        if (st->kind == TROUPE_CGEN_STEP_GEMM && wait) {
            bool failed = false;
            TROUPE_RETURN_IF_ERROR(troupe__cuda_gather_verdict(q, code, &failed));
            if (failed) /* nothing more is written; gather_end reports the index */
                return TROUPE_OK;
            wait = false;
            mode = TROUPE_CUDA_GATHER_GEMM_LIBRARY;
        }
        if (st->kind == TROUPE_CGEN_STEP_GEMM && mode == TROUPE_CUDA_GATHER_GEMM_LIBRARY) {
            const troupe_cgen_gemm_call_t *g = &st->gemm;
            size_t es = g->prec == TROUPE_PREC_DOUBLE ? 8 : 4;
            bool has_bias = g->epilogue == TROUPE_CGEN_GEMM_EPI_BIAS ||
                            g->epilogue == TROUPE_CGEN_GEMM_EPI_RELU_BIAS;
            troupe_status_t gs = troupe__cuda_gemm(
                q, code, s, s_gemm_addr(&g->a, es, ptrs, values),
                s_gemm_addr(&g->b, es, ptrs, values), (void *)s_gemm_addr(&g->c, es, ptrs, values),
                has_bias ? s_gemm_addr(&g->bias, es, ptrs, values) : NULL);
            if (gs == TROUPE_OK)
                continue;
            if (gs != TROUPE_UNAVAILABLE)
                return gs;
        }
        for (size_t k = st->first_kernel; k < st->first_kernel + st->nkernels; k++)
            TROUPE_RETURN_IF_ERROR(s_launch_kernel(q, code, k, kargs));
    }
    return TROUPE_OK;
}

troupe_status_t troupe__cuda_launch(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                                    const troupe_karg_t *args, size_t nargs)
{
    return troupe__cuda_launch_steps(drv, q, code, args, nargs, true);
}

troupe_status_t troupe__cuda_launch_steps(troupe_driver_t *drv, troupe_dqueue_t *q,
                                          troupe_dcode_t *code, const troupe_karg_t *args,
                                          size_t nargs, bool counted)
{
    (void)drv;
    TROUPE_RETURN_IF_ERROR(s_check_queue("launch", q));
    if (code == NULL || (nargs > 0 && args == NULL))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "cuda launch: NULL code or arguments");
    if (nargs != code->nparams)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "cuda launch %s: got %zu arguments, the code has %zu parameters",
                             code->name, nargs, code->nparams);
    /* kargs has one more entry: the gather error words of a code with gather indices. */
    void *ptrs_stack[S_STACK_ARGS], *kargs_stack[S_STACK_ARGS + 1];
    int64_t values_stack[S_STACK_ARGS];
    void **ptrs = ptrs_stack, **kargs = kargs_stack;
    int64_t *values = values_stack;
    troupe__cuda_gslot_t *gslot = NULL;
    troupe_status_t st = TROUPE_OK;
    if (nargs > S_STACK_ARGS) {
        ptrs = troupe_calloc(nargs, sizeof *ptrs);
        kargs = troupe_calloc(nargs + 1, sizeof *kargs);
        values = troupe_calloc(nargs, sizeof *values);
        if (ptrs == NULL || kargs == NULL || values == NULL) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda launch %s: out of memory",
                               code->name);
            goto out_arrays;
        }
    }
    for (size_t i = 0; i < nargs; i++) {
        const troupe_karg_t *a = &args[i];
        if ((st = troupe__karg_check(S_NAME, code->name, i, &code->params[i], a)) != TROUPE_OK)
            goto out_arrays;
        values[i] = 0;
        ptrs[i] = NULL;
        if (a->kind == TROUPE_KARG_STATIC_IDX) {
            values[i] = a->value;
            kargs[i] = &values[i];
            continue;
        }
        if (a->ordinal != q->ordinal) {
            st = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "cuda launch %s: parameter %zu (%s) is on device %d, the queue on "
                               "device %d",
                               code->name, i, code->params[i].ident, a->ordinal, q->ordinal);
            goto out_arrays;
        }
        if ((st = troupe__cuda_resolve(q->drv, "launch", a->ordinal, a->buf, &ptrs[i])) != TROUPE_OK)
            goto out_arrays;
        kargs[i] = &ptrs[i];
    }
    /* A gather failure latched on this queue refuses its later launches (as a failed stream
     * drops its later work on the CPU drivers). */
    if ((st = troupe__cuda_gather_refused(q)) != TROUPE_OK)
        goto out_arrays;
    if (code->gen->ngathers > 0) {
        if ((st = troupe__cuda_gather_prepare(q, code, &gslot)) != TROUPE_OK ||
            (st = troupe__cuda_gather_begin(q, gslot)) != TROUPE_OK)
            goto out_arrays;
        kargs[nargs] = &q->gerr_dev;
    }
    st = s_run_steps(q, code, ptrs, values, kargs);
    if (st == TROUPE_OK && gslot != NULL)
        st = troupe__cuda_gather_end(q, gslot, counted);
out_arrays:
    if (ptrs != ptrs_stack)
        troupe_free(ptrs);
    if (kargs != kargs_stack)
        troupe_free(kargs);
    if (values != values_stack)
        troupe_free(values);
    return st;
}

/* ---- events ------------------------------------------------------------------------------ */

static troupe_status_t s_event_record(troupe_driver_t *drv, troupe_dqueue_t *q,
                                      troupe_devent_t **out)
{
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "cuda event_record: NULL output");
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(s_check_queue("event_record", q));
    troupe_devent_t *ev = troupe_calloc(1, sizeof *ev);
    if (ev == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda event_record: out of memory");
    ev->ordinal = q->ordinal;
    cudaError_t e = cudaEventCreateWithFlags(&ev->ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        troupe_free(ev);
        return troupe__cuda_fail(s_qdev(q), e, "event_record: cudaEventCreateWithFlags");
    }
    e = cudaEventRecord(ev->ev, q->stream);
    if (e != cudaSuccess) {
        (void)cudaEventDestroy(ev->ev);
        troupe_free(ev);
        return troupe__cuda_fail(s_qdev(q), e, "event_record: cudaEventRecord");
    }
    troupe_status_t st = troupe__cuda_gather_event_mark(q, ev);
    if (st != TROUPE_OK) {
        troupe__cuda_gather_event_release(ev);
        (void)cudaEventDestroy(ev->ev);
        troupe_free(ev);
        return st;
    }
    *out = ev;
    return TROUPE_OK;
}

static troupe_status_t s_event_query(troupe_driver_t *drv, troupe_devent_t *ev, bool *done)
{
    if (ev == NULL || done == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "cuda event_query: NULL event or output");
    cudaError_t e = cudaEventQuery(ev->ev);
    *done = e != cudaErrorNotReady;
    if (e == cudaSuccess || e == cudaErrorNotReady) {
        /* cudaErrorNotReady "is not actually an error" (CUDA runtime API reference, cudaError);
         * should this runtime still record it as the thread's last error, it is cleared, and
         * only it: this may be a user's host thread (a sync polls), whose own pending error
         * must stay for its cudaGetLastError. Logged once, for the first GPU run to tell. */
        if (e == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady) {
            (void)cudaGetLastError();
            static atomic_bool logged;
            if (!atomic_exchange(&logged, true))
                TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                           "cuda: cudaEventQuery's cudaErrorNotReady was recorded as the "
                           "thread's last error (cleared)");
        }
        /* Done: a gather index of a routine before it that failed fails it (gather.c). */
        return e == cudaSuccess ? troupe__cuda_gather_event_check(ev) : TROUPE_OK;
    }
    troupe__cuda_dev_t *dev = NULL;
    if (drv != NULL && s_dev(s_self(drv), "event_query", ev->ordinal, &dev) != TROUPE_OK)
        dev = NULL;
    return troupe__cuda_fail(dev, e, "device %d: the work before this event failed",
                             ev->ordinal);
}

static troupe_status_t s_event_wait(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_devent_t *ev)
{
    TROUPE_RETURN_IF_ERROR(s_check_queue("event_wait", q));
    if (ev == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "cuda event_wait: NULL event");
    /* q's later events and launches follow the gather launches before ev (gather.c). */
    TROUPE_RETURN_IF_ERROR(troupe__cuda_gather_event_wait(q, ev));
    cudaError_t e = cudaStreamWaitEvent(q->stream, ev->ev, 0);
    if (e != cudaSuccess)
        return troupe__cuda_fail(s_qdev(q), e, "event_wait: cudaStreamWaitEvent");
    return TROUPE_OK;
}

/* Does not use drv: it may run after close (actors/event.c frees attached events last). */
static void s_event_release(troupe_driver_t *drv, troupe_devent_t *ev)
{
    (void)drv;
    if (ev == NULL)
        return;
    (void)cudaEventDestroy(ev->ev);
    (void)cudaGetLastError();
    troupe__cuda_gather_event_release(ev);
    troupe_free(ev);
}

const troupe_driver_vtable_t troupe__driver_cuda = {
    .name = S_NAME,
    .async_queues = true,
    .no_local_arrays = true,
    .no_outer_fusion = true,
    .open = s_open,
    .close = s_close,
    .num_devices = s_num_devices,
    .suggested_num_streams = s_suggested_num_streams,
    .alloc_pool = s_alloc_pool,
    .free_pool = s_free_pool,
    .host_ptr = NULL, /* device memory is not host-addressable */
    .queue_create = s_queue_create,
    .queue_destroy = s_queue_destroy,
    .memset_zero = s_memset_zero,
    .h2d = s_h2d,
    .d2h = s_d2h,
    .d2d = s_d2d,
    .compile = troupe__cuda_compile,
    .code_release = troupe__cuda_code_release,
    .launch = troupe__cuda_launch,
    .graph_capture = troupe__cuda_graph_capture,
    .graph_launch = troupe__cuda_graph_launch,
    .graph_release = troupe__cuda_graph_release,
    .event_record = s_event_record,
    .event_query = s_event_query,
    .event_wait = s_event_wait,
    .event_release = s_event_release,
};
