/* troupe — the cuda driver's compile entry: the CUDA dialect of compiler/cgen, NVRTC images
 * through the compile cache (troupe__cuda_image), one CUDA library per architecture of the
 * devices (see cuda_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include "devices/cuda/driver_impl.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/status.h"
#include "devices/cuda/nvrtc.h"
#include "devices/host/cc_cache_impl.h"
#include "troupe_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define S_NAME_MAX 64 /* characters of the routine's name in file names */

static atomic_uint_fast64_t s_tmp_seq;

static bool s_is_ident(const char *s)
{
    if (s == NULL || !(isalpha((unsigned char)*s) || *s == '_'))
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_'))
            return false;
    return true;
}

/* The whole file at `path` in *out (troupe_malloc) and its size; false when it cannot be read
 * or is empty. */
static bool s_read(const char *path, void **out, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return false;
    bool ok = false;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = troupe_malloc((size_t)n + 1)) != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        *out = buf;
        *size = (size_t)n;
        buf = NULL;
        ok = true;
    }
    troupe_free(buf);
    fclose(f);
    return ok;
}

/* Stores an image under `path` (a unique temporary file renamed into place). A cache that
 * cannot be written costs a recompilation next time, nothing else: logged, not an error. */
static void s_store(const char *dir, const char *path, const void *image, size_t size)
{
    char *tmp = troupe_strdup_printf("%s.tmp%ld-%llu", path, (long)getpid(),
                                     (unsigned long long)atomic_fetch_add(&s_tmp_seq, 1));
    troupe_status_t st = tmp == NULL ? troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory")
                                     : troupe__cache_mkdir_p(dir);
    if (st == TROUPE_OK)
        st = troupe__cache_write_new(tmp, image, size);
    if (st == TROUPE_OK && rename(tmp, path) != 0) {
        st = troupe__error(TROUPE_DEVICE_ERROR, "cannot move '%s' to '%s' (errno %d)", tmp, path,
                           errno);
        unlink(tmp);
    }
    if (st != TROUPE_OK)
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_DEVICES, "cuda: not cached: %s",
                   troupe_last_error());
    troupe_free(tmp);
}

troupe_status_t troupe__cuda_image(const char *name, const char *source, const char *arch,
                                   bool ftz, void **out_image, size_t *out_size, bool *out_hit)
{
    if (!s_is_ident(name) || source == NULL || arch == NULL || out_image == NULL ||
        out_size == NULL || out_hit == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "cuda compile: bad name '%.80s' or NULL argument",
                             name ? name : "(null)");
    *out_image = NULL;
    *out_size = 0;
    *out_hit = false;
    int major = 0, minor = 0;
    TROUPE_RETURN_IF_ERROR(troupe_nvrtc_version(&major, &minor));
    char key[160];
    /* the assembler is in the key: NVRTC's own cubins may not honour ftz (devices/cuda/nvrtc.c) */
    snprintf(key, sizeof key, "troupe %s; nvrtc %d.%d; %s; fmad=false ftz=%s; %s",
             TROUPE_VERSION_STRING, major, minor, arch, ftz ? "true" : "false",
             troupe_nvrtc_assembler());
    uint64_t h = troupe__fnv1a64(TROUPE__FNV64_INIT, key, strlen(key) + 1);
    h = troupe__fnv1a64(h, source, strlen(source));
    bool cubin = strncmp(arch, "sm_", 3) == 0;
    char *dir = troupe_strdup(troupe_config_cache_dir());
    char *path = dir == NULL ? NULL
                             : troupe_strdup_printf("%s/%.*s-%016llx.%s", dir, S_NAME_MAX, name,
                                                    (unsigned long long)h, cubin ? "cubin" : "ptx");
    troupe_status_t st = TROUPE_OK;
    if (path == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda compile %s: out of memory", name);
        goto out_path;
    }
    if (s_read(path, out_image, out_size)) {
        *out_hit = true;
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
                   "cuda compile %s: cache hit, subnormals %s (%s)", name,
                   ftz ? "flushed" : "kept", path);
        goto out_path;
    }
    int64_t t0 = troupe_now_ns();
    char *log = NULL;
    st = troupe_nvrtc_compile_image(source, name, arch, ftz, out_image, out_size, &log);
    if (st != TROUPE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES, "cuda compile %s for %s failed; NVRTC log:\n%s",
                   name, arch, log ? log : "(none)");
        st = troupe__error(st, "cuda compile %s for %s: %s", name, arch, msg);
    } else {
        s_store(dir, path, *out_image, *out_size);
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
                   "cuda compile %s: cache miss, NVRTC compiled it for %s, subnormals %s, in "
                   "%.3f s (%s)",
                   name, arch, ftz ? "flushed" : "kept", (double)(troupe_now_ns() - t0) * 1e-9,
                   path);
    }
    troupe_free(log);
out_path:
    troupe_free(path);
    troupe_free(dir);
    return st;
}

/* Waits until every device of the driver is idle; the calling thread's current device is
 * kept. Errors (a sticky one) are left to the calls that own the work. */
static void s_sync_devices(troupe__cuda_driver_t *d)
{
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = -1;
    for (int i = 0; i < d->ndevices; i++)
        if (cudaSetDevice(i) == cudaSuccess)
            (void)cudaDeviceSynchronize();
    if (prev >= 0)
        (void)cudaSetDevice(prev);
    (void)cudaGetLastError();
}

void troupe__cuda_code_release(troupe_driver_t *drv, troupe_dcode_t *code)
{
    if (code == NULL)
        return;
    /* A code's last reference may go as soon as its last launch was enqueued (actors/routine.c
     * releases it once cudaLaunchKernel returned), and cudaLibraryUnload's reference says
     * nothing of the library's kernels still queued or running (using a handle after it is
     * destroyed is undefined): the devices finish their work first. */
    bool loaded = false;
    for (int a = 0; code->libs != NULL && a < code->narchs; a++)
        loaded = loaded || code->libs[a] != NULL;
    if (loaded && drv != NULL)
        s_sync_devices((troupe__cuda_driver_t *)drv);
    size_t nplans = code->gen != NULL ? (size_t)code->narchs * code->gen->nsteps *
                                            TROUPE__CUDA_ALIGN_CLASSES
                                      : 0;
    if (code->plans != NULL)
        for (size_t i = 0; i < nplans; i++)
            troupe__cuda_gemm_plan_free(code->plans[i]);
    troupe_free(code->plans);
    for (int a = 0; code->libs != NULL && a < code->narchs; a++)
        if (code->libs[a] != NULL)
            (void)cudaLibraryUnload(code->libs[a]);
    (void)cudaGetLastError();
    troupe_free(code->libs);
    troupe_free(code->kernels);
    troupe__kparams_free(code->params, code->nparams);
    troupe_cgen_result_destroy(&code->gen);
    troupe_free(code->name);
    pthread_mutex_destroy(&code->lock);
    troupe_free(code);
}

/* Kernel k's attributes on device `ordinal` (cudaFuncGetAttributes takes a cudaKernel_t cast to
 * const void *: CUDA runtime API reference, cudaFuncGetAttributes). Asking loads the kernel
 * into the device's context, so an image the device cannot run (cudaErrorNoKernelImageForDevice,
 * cudaErrorUnsupportedPtxVersion: PTX newer than the driver) fails the compile, not the first
 * launch; a planned block larger than the kernel allows (its registers) fails it too, rather
 * than the launch with cudaErrorLaunchOutOfResources. The attributes are logged at debug. A
 * kernel with dynamic shared memory also gets its limit raised on every device of its
 * architecture, after checking that each allows that much beside its static shared memory. */
static troupe_status_t s_check_kernel(troupe__cuda_driver_t *d, int ordinal,
                                      const troupe_cgen_result_t *gen, size_t k, cudaKernel_t kern)
{
    const troupe_cgen_kernel_t *kn = &gen->kernels[k];
    struct cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)kern);
    if (e != cudaSuccess)
        return troupe__cuda_fail(&d->devs[ordinal], e, "compile %s: kernel %s on device %d",
                                 gen->name, kn->name, ordinal);
    uint64_t threads = (uint64_t)kn->block[0] * kn->block[1];
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
               "cuda compile %s: kernel %s on device %d: %d registers, %zu local bytes, %zu "
               "static shared bytes, at most %d threads per block, binary sm_%d, PTX %d; "
               "grid %ux%u, block %ux%u",
               gen->name, kn->name, ordinal, fa.numRegs, fa.localSizeBytes, fa.sharedSizeBytes,
               fa.maxThreadsPerBlock, fa.binaryVersion, fa.ptxVersion, kn->grid[0], kn->grid[1],
               kn->block[0], kn->block[1]);
    if (threads > (uint64_t)fa.maxThreadsPerBlock)
        return troupe__error(TROUPE_DEVICE_ERROR,
                             "cuda compile %s: kernel %s takes at most %d threads per block on "
                             "device %d (%d registers each), the plan has %llu",
                             gen->name, kn->name, fa.maxThreadsPerBlock, ordinal, fa.numRegs,
                             (unsigned long long)threads);
    if (kn->dynamic_shared_bytes == 0)
        return TROUPE_OK;
    /* Its Local arrays in dynamic shared memory (compiler/cgen.h): every device of this
     * architecture lets its blocks opt into that much, beside what the kernel declares. */
    for (int i = 0; i < d->ndevices; i++) {
        const troupe__cuda_dev_t *dev = &d->devs[i];
        if (dev->arch_index != d->devs[ordinal].arch_index)
            continue;
        uint64_t need = (uint64_t)kn->dynamic_shared_bytes + fa.sharedSizeBytes;
        if (need > (uint64_t)dev->shared_optin)
            return troupe__error(TROUPE_DEVICE_ERROR,
                                 "cuda compile %s: kernel %s needs %llu bytes of shared memory "
                                 "per block (%u dynamic, %zu static), device %d allows %d",
                                 gen->name, kn->name, (unsigned long long)need,
                                 kn->dynamic_shared_bytes, fa.sharedSizeBytes, i,
                                 dev->shared_optin);
        e = cudaKernelSetAttributeForDevice(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)kn->dynamic_shared_bytes, i);
        if (e != cudaSuccess)
            return troupe__cuda_fail(&d->devs[i], e,
                                     "compile %s: kernel %s: raising its dynamic shared memory "
                                     "to %u bytes on device %d",
                                     gen->name, kn->name, kn->dynamic_shared_bytes, i);
    }
    return TROUPE_OK;
}

/* Shared memory one block of a generated kernel may use on every device of the driver: the
 * least opt-in limit, less S_SHARED_RESERVE for what a kernel declares statically beside its
 * dynamic shared memory (a segment's kernel declares none today; s_check_kernel checks). */
#define S_SHARED_RESERVE 1024
static int64_t s_shared_max(const troupe__cuda_driver_t *d)
{
    int64_t least = INT64_MAX;
    for (int i = 0; i < d->ndevices; i++)
        if (d->devs[i].shared_optin < least)
            least = d->devs[i].shared_optin;
    return least == INT64_MAX || least < S_SHARED_RESERVE ? 0 : least - S_SHARED_RESERVE;
}

/* Loads the image for architecture a and finds the code's kernels in it. */
static troupe_status_t s_load(troupe__cuda_driver_t *d, troupe_dcode_t *code, int a)
{
    const troupe_cgen_result_t *gen = code->gen;
    int ordinal = 0;
    while (ordinal < d->ndevices && d->devs[ordinal].arch_index != a)
        ordinal++;
    TROUPE_RETURN_IF_ERROR(troupe__cuda_use(d, ordinal));
    void *image = NULL;
    size_t size = 0;
    bool hit = false;
    TROUPE_RETURN_IF_ERROR(
        troupe__cuda_image(gen->name, gen->source, d->archs[a], code->ftz, &image, &size, &hit));
    cudaError_t e = cudaLibraryLoadData(&code->libs[a], image, NULL, NULL, 0, NULL, NULL, 0);
    troupe_free(image);
    if (e != cudaSuccess) {
        code->libs[a] = NULL;
        return troupe__cuda_fail(&d->devs[ordinal], e, "compile %s: cudaLibraryLoadData (%s%s)",
                                 gen->name, d->archs[a], hit ? ", from the cache" : "");
    }
    for (size_t k = 0; k < gen->nkernels; k++) {
        cudaKernel_t *kp = &code->kernels[(size_t)a * gen->nkernels + k];
        e = cudaLibraryGetKernel(kp, code->libs[a], gen->kernels[k].name);
        if (e != cudaSuccess)
            return troupe__cuda_fail(&d->devs[ordinal], e, "compile %s: cudaLibraryGetKernel(%s)",
                                     gen->name, gen->kernels[k].name);
        TROUPE_RETURN_IF_ERROR(s_check_kernel(d, ordinal, gen, k, *kp));
    }
    return TROUPE_OK;
}

troupe_status_t troupe__cuda_compile(troupe_driver_t *drv, const troupe_ll_proc_t *proc,
                                     troupe_dcode_t **out)
{
    if (drv == NULL || proc == NULL || out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "cuda compile: NULL argument");
    *out = NULL;
    troupe__cuda_driver_t *d = (troupe__cuda_driver_t *)drv;
    if (d->ndevices == 0) {
        char why[256];
        troupe__cuda_why_no_device(why, sizeof why);
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "cuda compile %s: no CUDA device to compile for (%s)", proc->name, why);
    }
    troupe_dcode_t *code = troupe_calloc(1, sizeof *code);
    if (code == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda compile: out of memory");
    pthread_mutex_init(&code->lock, NULL);
    code->ftz = troupe_config_flush_denormals();
    troupe_cgen_options_t opts = {.cuda_shared_max_bytes = s_shared_max(d)};
    troupe_status_t st = troupe_cgen_emit_with(proc, TROUPE_CGEN_CUDA, &opts, &code->gen);
    if (st != TROUPE_OK)
        goto out_code;
    const troupe_cgen_result_t *gen = code->gen;
    code->name = troupe_strdup(gen->name);
    code->narchs = d->narchs;
    code->libs = troupe_calloc((size_t)d->narchs, sizeof *code->libs);
    code->kernels = troupe_calloc((size_t)d->narchs * (gen->nkernels ? gen->nkernels : 1),
                                  sizeof *code->kernels);
    code->plans = troupe_calloc(
        (size_t)d->narchs * (gen->nsteps ? gen->nsteps : 1) * TROUPE__CUDA_ALIGN_CLASSES,
        sizeof *code->plans);
    if (code->name == NULL || code->libs == NULL || code->kernels == NULL || code->plans == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda compile %s: out of memory", gen->name);
        goto out_code;
    }
    if ((st = troupe__kparams_new(gen, &code->params)) != TROUPE_OK)
        goto out_code;
    code->nparams = gen->nparams;
    for (int a = 0; a < d->narchs && gen->nkernels > 0; a++)
        if ((st = s_load(d, code, a)) != TROUPE_OK)
            goto out_code;
    /* The source is not needed any more; the kernels, steps and parameters are. */
    troupe_free(code->gen->source);
    code->gen->source = NULL;
    code->gen->source_len = 0;
    *out = code;
    code = NULL;
out_code:
    troupe__cuda_code_release(drv, code);
    return st;
}
