/* troupe — the cuda driver's compile entry: the CUDA dialect of compiler/cgen, cut into
 * translation units (troupe__cuda_units) that NVRTC compiles in parallel, images through the
 * compile cache (troupe__cuda_image), one CUDA library per unit and architecture of the devices
 * (see cuda_impl.h). */
#define _GNU_SOURCE
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
#include <pthread.h>
#include <sched.h>
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
    size_t nlibs = (size_t)code->narchs * (size_t)code->nunits;
    for (size_t i = 0; code->libs != NULL && i < nlibs; i++)
        loaded = loaded || code->libs[i] != NULL;
    if (loaded && drv != NULL)
        s_sync_devices((troupe__cuda_driver_t *)drv);
    size_t nplans = code->gen != NULL ? (size_t)code->narchs * code->gen->nsteps *
                                            TROUPE__CUDA_ALIGN_CLASSES
                                      : 0;
    if (code->plans != NULL)
        for (size_t i = 0; i < nplans; i++)
            troupe__cuda_gemm_plan_free(code->plans[i]);
    troupe_free(code->plans);
    for (size_t i = 0; code->libs != NULL && i < nlibs; i++)
        if (code->libs[i] != NULL)
            (void)cudaLibraryUnload(code->libs[i]);
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

/* ---- translation units ---------------------------------------------------------------------- */

void troupe__cuda_units_free(troupe__cuda_unit_t *units, int nunits)
{
    for (int u = 0; units != NULL && u < nunits; u++)
        troupe_free(units[u].source);
    troupe_free(units);
}

troupe_status_t troupe__cuda_units(const troupe_cgen_result_t *gen, int max_units, size_t min_bytes,
                                   troupe__cuda_unit_t **out, int *nunits)
{
    *out = NULL;
    *nunits = 0;
    const char *src = gen->source != NULL ? gen->source : "";
    size_t len = strlen(src), nk = gen->nkernels;
    size_t *at = troupe_calloc(nk + 1, sizeof *at); /* kernel k's text starts at at[k] */
    if (at == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda compile: out of memory");
    const char *from = src;
    troupe_status_t st = TROUPE_OK;
    for (size_t k = 0; k < nk && st == TROUPE_OK; k++) {
        const char *name = gen->kernels[k].name;
        char sig[160], table[160];
        snprintf(sig, sizeof sig, "\nextern \"C\" __global__ void %s(", name);
        snprintf(table, sizeof table, "\n__constant__ int64_t %s_hz_end[", name);
        const char *p = strstr(from, sig);
        if (p == NULL) {
            st = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "cuda compile %s: kernel %s's signature is not in the source after "
                               "kernel %zu's",
                               gen->name, name, k);
            break;
        }
        /* its table lies between the previous kernel's signature and its own */
        const char *t = memmem(from, (size_t)(p - from), table, strlen(table));
        at[k] = (size_t)((t != NULL ? t : p) - src);
        from = p + 1;
    }
    at[nk] = len;
    if (st != TROUPE_OK) {
        troupe_free(at);
        return st;
    }
    size_t prelude = nk > 0 ? at[0] : len, body = len - prelude;
    size_t share = max_units > 1 ? (body + (size_t)max_units - 1) / (size_t)max_units : body;
    if (share < min_bytes)
        share = min_bytes;
    int n = 0;
    troupe__cuda_unit_t *units = troupe_calloc(nk > 0 ? nk : 1, sizeof *units);
    for (size_t k = 0; units != NULL && (k < nk || n == 0);) {
        size_t first = k, bytes = 0;
        while (k < nk && (k == first || bytes + (at[k + 1] - at[k]) <= share || n + 1 == max_units))
            bytes += at[k + 1] - at[k], k++;
        troupe__cuda_unit_t *u = &units[n++];
        u->first_kernel = first;
        u->nkernels = k - first;
        u->source = troupe_malloc(prelude + bytes + 1);
        if (u->source == NULL) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda compile: out of memory");
            break;
        }
        memcpy(u->source, src, prelude);
        memcpy(u->source + prelude, src + (nk > 0 ? at[first] : len), bytes);
        u->source[prelude + bytes] = '\0';
    }
    troupe_free(at);
    if (units == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda compile: out of memory");
    if (st != TROUPE_OK) {
        troupe__cuda_units_free(units, n);
        return st;
    }
    *out = units;
    *nunits = n;
    return TROUPE_OK;
}

/* The cores this process may run on (at least 1): the compile's threads. */
static int s_cores(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return n < 1 ? 1 : n;
}

/* One unit's compile for one architecture, run by s_compile_units' threads. */
typedef struct s_unit_job {
    const char *name, *source, *arch;
    bool ftz;
    void *image;
    size_t size;
    bool hit;
    troupe_status_t st;
    char err[1024];
} s_unit_job_t;

typedef struct s_unit_pool {
    s_unit_job_t *jobs;
    int njobs;
    atomic_int next;
} s_unit_pool_t;

static void *s_unit_worker(void *arg)
{
    s_unit_pool_t *pool = arg;
    for (int i; (i = atomic_fetch_add(&pool->next, 1)) < pool->njobs;) {
        s_unit_job_t *j = &pool->jobs[i];
        j->st =
            troupe__cuda_image(j->name, j->source, j->arch, j->ftz, &j->image, &j->size, &j->hit);
        if (j->st != TROUPE_OK)
            snprintf(j->err, sizeof j->err, "%s", troupe_last_error());
    }
    return NULL;
}

/* Compiles the jobs on up to `threads` threads (this one among them); the first failure, in
 * unit order, is the result. */
static troupe_status_t s_compile_units(s_unit_job_t *jobs, int njobs, int threads)
{
    s_unit_pool_t pool = {jobs, njobs, 0};
    pthread_t tids[64];
    int started = 0;
    for (int t = 1; t < threads && t < njobs && started < 64; t++)
        if (pthread_create(&tids[started], NULL, s_unit_worker, &pool) == 0)
            started++;
    s_unit_worker(&pool);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    for (int i = 0; i < njobs; i++)
        if (jobs[i].st != TROUPE_OK)
            return troupe__error(jobs[i].st, "%s", jobs[i].err);
    return TROUPE_OK;
}

/* Loads the units' images for architecture a (compiled in parallel) and finds the code's
 * kernels in them. */
static troupe_status_t s_load(troupe__cuda_driver_t *d, troupe_dcode_t *code,
                              const troupe__cuda_unit_t *units, int a)
{
    const troupe_cgen_result_t *gen = code->gen;
    int ordinal = 0;
    while (ordinal < d->ndevices && d->devs[ordinal].arch_index != a)
        ordinal++;
    TROUPE_RETURN_IF_ERROR(troupe__cuda_use(d, ordinal));
    int nu = code->nunits;
    s_unit_job_t *jobs = troupe_calloc((size_t)nu, sizeof *jobs);
    char **names = troupe_calloc((size_t)nu, sizeof *names);
    troupe_status_t st = TROUPE_OK;
    if (jobs == NULL || names == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda compile %s: out of memory", gen->name);
        goto out;
    }
    for (int u = 0; u < nu; u++) {
        /* one unit keeps the routine's name (and its cache file's) */
        names[u] = nu == 1 ? troupe_strdup(gen->name)
                           : troupe_strdup_printf("%.*s_u%d", S_NAME_MAX - 8, gen->name, u);
        if (names[u] == NULL) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda compile: out of memory");
            goto out;
        }
        jobs[u] = (s_unit_job_t){
            .name = names[u], .source = units[u].source, .arch = d->archs[a], .ftz = code->ftz};
    }
    int64_t t0 = troupe_now_ns();
    int threads = s_cores();
    if ((st = s_compile_units(jobs, nu, threads)) != TROUPE_OK)
        goto out;
    if (nu > 1)
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
                   "cuda compile %s for %s: %d units on %d threads in %.3f s", gen->name,
                   d->archs[a], nu, threads < nu ? threads : nu,
                   (double)(troupe_now_ns() - t0) * 1e-9);
    for (int u = 0; u < nu; u++) {
        cudaLibrary_t *lib = &code->libs[(size_t)a * (size_t)nu + (size_t)u];
        cudaError_t e = cudaLibraryLoadData(lib, jobs[u].image, NULL, NULL, 0, NULL, NULL, 0);
        if (e != cudaSuccess) {
            *lib = NULL;
            st = troupe__cuda_fail(&d->devs[ordinal], e, "compile %s: cudaLibraryLoadData (%s%s)",
                                   names[u], d->archs[a], jobs[u].hit ? ", from the cache" : "");
            goto out;
        }
        for (size_t k = units[u].first_kernel;
             k < units[u].first_kernel + units[u].nkernels && st == TROUPE_OK; k++) {
            cudaKernel_t *kp = &code->kernels[(size_t)a * gen->nkernels + k];
            e = cudaLibraryGetKernel(kp, *lib, gen->kernels[k].name);
            if (e != cudaSuccess)
                st = troupe__cuda_fail(&d->devs[ordinal], e, "compile %s: cudaLibraryGetKernel(%s)",
                                       names[u], gen->kernels[k].name);
            else
                st = s_check_kernel(d, ordinal, gen, k, *kp);
        }
        if (st != TROUPE_OK)
            goto out;
    }
out:
    for (int u = 0; jobs != NULL && u < nu; u++)
        troupe_free(jobs[u].image);
    for (int u = 0; names != NULL && u < nu; u++)
        troupe_free(names[u]);
    troupe_free(jobs);
    troupe_free(names);
    return st;
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
    code->kernels = troupe_calloc((size_t)d->narchs * (gen->nkernels ? gen->nkernels : 1),
                                  sizeof *code->kernels);
    code->plans = troupe_calloc(
        (size_t)d->narchs * (gen->nsteps ? gen->nsteps : 1) * TROUPE__CUDA_ALIGN_CLASSES,
        sizeof *code->plans);
    if (code->name == NULL || code->kernels == NULL || code->plans == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda compile %s: out of memory", gen->name);
        goto out_code;
    }
    if ((st = troupe__kparams_new(gen, &code->params)) != TROUPE_OK)
        goto out_code;
    code->nparams = gen->nparams;
    if (gen->nkernels > 0) {
        troupe__cuda_unit_t *units = NULL;
        int nu = 0;
        if ((st = troupe__cuda_units(gen, s_cores(), TROUPE__CUDA_UNIT_MIN_BYTES, &units, &nu)) !=
            TROUPE_OK)
            goto out_code;
        code->nunits = nu;
        code->libs = troupe_calloc((size_t)d->narchs * (size_t)nu, sizeof *code->libs);
        if (code->libs == NULL)
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda compile %s: out of memory",
                               gen->name);
        for (int a = 0; a < d->narchs && st == TROUPE_OK; a++)
            st = s_load(d, code, units, a);
        troupe__cuda_units_free(units, nu);
        if (st != TROUPE_OK)
            goto out_code;
    }
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
