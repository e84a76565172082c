/* Tests of the cuda driver (devices/cuda/cuda_impl.h) and of what runs it (actors/async_impl.h).
 *
 * Without a GPU (this project's CI): the backend opens with 0 devices and its log line says why
 * (the cudaError_t of cudaGetDeviceCount); driver entries for a device that is not there are
 * NOT_FOUND, compile is FAILED_PRECONDITION naming the reason; NVRTC picks the architectures a
 * device would get; the cubin/PTX compile cache misses, hits, keys on the options and reports
 * NVRTC's log; the tests' device probe (rtu_cuda_present) installs no host allocator, and a
 * closed backend leaves none. The tests that need a device skip, counted, with the reason: the conformance
 * suites' cuda runs (FOR_EACH_DRIVER in the other files, and this file's), the failure paths
 * (an allocation larger than the device, a kernel that faults, a launch with a bad static
 * index), copies through both staging and page-locked memory, device-side waits between streams,
 * a not-ready event query leaving no error behind, code_release waiting for queued launches,
 * page-locked host arrays, the pinned host allocator kept while one of two backends is open, and
 * whether a backend works again after a sticky fault and
 * cudaDeviceReset (CUDA documents a relaunch as the only way back; the failure message says so).
 * None of the GPU tests has run yet (no GPU was available where this was written).
 */
#define _POSIX_C_SOURCE 200809L
#include "actors/runtime_impl.h"
#include "actors/troupe.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/log.h"
#include "compiler/cgen.h"
#include "devices/device.h"
#include "devices/plugin_impl.h"
#include "runtime_test_util.h"
#include "troupe_config.h"

#if TROUPE_HAVE_CUDA
#include "devices/cuda/cuda_impl.h"
#include "devices/cuda/driver_impl.h"
#include "devices/cuda/nvrtc.h"
#include "ir/tnode_impl.h"

#include <cuda_runtime_api.h>
#endif

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void s_init(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/cuda-cache", 60);
}

TestSuite(cuda, .init = s_init);

#if TROUPE_HAVE_CUDA

/* Skips the current test unless a CUDA device is present. */
#define S_NEED_DEVICE()                                                                            \
    do {                                                                                           \
        char why_[512];                                                                            \
        if (!rtu_cuda_present(why_, sizeof why_))                                                  \
            cr_skip_test("%s", why_);                                                              \
    } while (0)


/* y[i] = x[i] * 2 + s[0] over n elements, a static index `b` choosing x's row (x is 4 x n). */
static troupe_ll_proc_t *s_axpb(const char *name, int64_t n, troupe_tnode_t **x,
                                troupe_tnode_t **y)
{
    troupe_ll_proc_t *p = NULL;
    OK(troupe_ll_proc_new(name, &p));
    *x = rtu_node("x", TROUPE_PREC_SINGLE, 2, (int64_t[]){4, n});
    *y = rtu_vec("y", n);
    int32_t b = troupe_ll_proc_add_static_symbol(p, "b", 4);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t xi[2] = {troupe_idx_sym(b), troupe_idx_sym(i)};
    troupe_axis_index_t yi = troupe_idx_sym(i);
    troupe_sc_t *v = troupe_sc_binop(
        p, TROUPE_BINOP_ADD,
        troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_get(p, *x, xi), troupe_sc_constant(p, 2.0)),
        troupe_sc_constant(p, 0.5));
    p->body = troupe_ll_for(p, i, 0, n - 1, troupe_ll_set(p, *y, &yi, v), false);
    OK(troupe_ll_proc_status(p));
    OK(troupe_ll_proc_validate(p));
    return p;
}

/* Loads `src` (CUDA C++ defining extern "C" kernel `kname`) for device 0 into *lib, *k. */
static void s_raw_kernel(const char *src, const char *kname, cudaLibrary_t *lib, cudaKernel_t *k)
{
    int major = 0, minor = 0;
    cr_assert_eq(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    cr_assert_eq(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
    char arch[32];
    OK(troupe_nvrtc_arch_for(major, minor, arch, sizeof arch));
    void *img = NULL;
    size_t sz = 0;
    OK(troupe_nvrtc_compile_image(src, "raw.cu", arch, false, &img, &sz, NULL));
    cr_assert_eq(cudaLibraryLoadData(lib, img, NULL, NULL, 0, NULL, NULL, 0), cudaSuccess);
    cr_assert_eq(cudaLibraryGetKernel(k, *lib, kname), cudaSuccess);
    troupe_free(img);
}

/* A kernel that keeps one thread busy for about `cycles` SM clock cycles (1e9: about half a
 * second on an H100). */
#define S_SPIN_SRC                                                                                 \
    "extern \"C\" __global__ void spin_k(long long cycles) {"                                      \
    " long long t0 = clock64(); while (clock64() - t0 < cycles) { } }"

static void s_spin(cudaKernel_t k, cudaStream_t stream, long long cycles)
{
    void *args[1] = {&cycles};
    cr_assert_eq(
        cudaLaunchKernel((const void *)k, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, stream),
        cudaSuccess);
}

/* ---- without a device ------------------------------------------------------------------- */

Test(cuda, backend_opens_and_the_log_says_why_there_is_no_device)
{
    char log[256];
    snprintf(log, sizeof log, "%s/cuda-open-%ld.log", TROUPE_TEST_BUILD_DIR, (long)getpid());
    unlink(log);
    OK(troupe_log_configure("info"));
    OK(troupe_log_set_file(log));
    troupe_backend_t *b = NULL;
    OK(troupe_backend_open("cuda", TROUPE_MOST_PARALLEL_STREAMS, &b));
    int n = -1;
    OK(troupe_num_devices(b, &n));
    int cuda_n = 0;
    cudaError_t e = cudaGetDeviceCount(&cuda_n);
    if (e != cudaSuccess)
        cuda_n = 0;
    cr_assert_eq(n, cuda_n, "troupe sees %d devices, the runtime %d", n, cuda_n);
    troupe_backend_close(&b);
    OK(troupe_log_set_file(NULL));
    OK(troupe_log_configure("warn"));
    char why[300];
    troupe__cuda_why_no_device(why, sizeof why);
    if (n == 0) {
        cr_assert(strncmp(why, "cudaGetDeviceCount: ", 20) == 0, "%s", why);
        cr_assert(rtu_file_has(log, "cuda: 0 devices: cudaGetDeviceCount: "), "log %s", log);
        if (e != cudaSuccess)
            cr_assert(rtu_file_has(log, cudaGetErrorName(e)), "the log names %s",
                      cudaGetErrorName(e));
    } else {
        cr_assert_str_eq(why, "");
        cr_assert(rtu_file_has(log, "cuda: device 0: "), "log %s", log);
        cr_assert(rtu_file_has(log, "compute mode ") && rtu_file_has(log, "context ready in "),
                  "the device line gives the compute mode and the context's cost: log %s", log);
    }
    unlink(log);
}

/* The library reaches the driver through the plugin, and loading the plugin this test links
 * gives the same object: one copy of the driver and its state. */
Test(cuda, the_cuda_backend_comes_from_the_plugin)
{
    const troupe_driver_vtable_t *vt = NULL;
    const troupe__cuda_plugin_t *plugin = NULL;
    OK(troupe__cuda_plugin_load(&plugin));
    cr_assert_eq(plugin->abi, TROUPE__CUDA_PLUGIN_ABI);
    cr_assert_str_eq(plugin->version, TROUPE_VERSION_STRING);
    OK(troupe_driver_lookup("cuda", &vt));
    cr_assert_eq(vt, plugin->driver);
    cr_assert_eq(vt, &troupe__driver_cuda, "the plugin was loaded a second time");
    cr_assert_eq(plugin->device_count(), troupe__cuda_device_count());
    bool listed = false;
    for (size_t i = 0; i < troupe_driver_built_count(); i++)
        listed |= strcmp(troupe_driver_built_name(i), "cuda") == 0;
    cr_assert(listed, "cuda is not among the built backends");
}

Test(cuda, entries_for_a_missing_device_are_refused_by_name)
{
    char why[512];
    if (rtu_cuda_present(why, sizeof why))
        cr_skip_test("a CUDA device is present: this test is for machines without one");
    const troupe_driver_vtable_t *vt = NULL;
    OK(troupe_driver_lookup("cuda", &vt));
    cr_assert(vt->async_queues);
    cr_assert_null(vt->host_ptr, "device memory is not host-addressable");
    troupe_driver_t *drv = NULL;
    OK(troupe_driver_open(vt, &drv));
    cr_assert_eq(troupe_driver_num_devices(drv), 0);
    cr_assert_eq(troupe_driver_suggested_num_streams(drv, 0, TROUPE_MOST_PARALLEL_STREAMS), 1);
    cr_assert_eq(troupe_driver_alloc_pool(drv, 0, 1, 1024, true), TROUPE_NOT_FOUND);
    cr_assert(strstr(troupe_last_error(), "no device 0 (the driver has 0)"), "%s",
              troupe_last_error());
    troupe_dqueue_t *q = NULL;
    cr_assert_eq(troupe_driver_queue_create(drv, 0, &q), TROUPE_NOT_FOUND);
    troupe_tnode_t *x, *y;
    troupe_ll_proc_t *p = s_axpb("axpb_nodev", 8, &x, &y);
    troupe_dcode_t *code = NULL;
    cr_assert_eq(troupe_driver_compile(drv, p, &code), TROUPE_FAILED_PRECONDITION);
    cr_assert(strstr(troupe_last_error(), "no CUDA device to compile for (cudaGetDeviceCount"),
              "%s", troupe_last_error());
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&y);
    troupe_driver_close(drv);
    /* At the API: a backend with no device has no device 0. */
    troupe_backend_t *b = NULL;
    OK(troupe_backend_open("cuda", TROUPE_ONLY_DEVICES_PARALLEL, &b));
    troupe_device_t *d = NULL;
    cr_assert_eq(troupe_get_device(b, 0, &d), TROUPE_NOT_FOUND);
    troupe_backend_close(&b);
}

Test(cuda, architectures_for_compute_capabilities)
{
    char a[32];
    OK(troupe_nvrtc_arch_for(8, 0, a, sizeof a));
    cr_assert_str_eq(a, "sm_80");
    OK(troupe_nvrtc_arch_for(9, 0, a, sizeof a));
    cr_assert_str_eq(a, "sm_90");
    /* A GPU newer than NVRTC knows: PTX of the newest architecture, which its driver JITs. */
    OK(troupe_nvrtc_arch_for(99, 9, a, sizeof a));
    cr_assert(strncmp(a, "compute_", 8) == 0 && atoi(a + 8) >= 90, "%s", a);
    cr_assert_eq(troupe_nvrtc_arch_for(1, 0, a, sizeof a), TROUPE_NOT_FOUND);
    cr_assert_eq(troupe_nvrtc_arch_for(8, 0, a, 4), TROUPE_INVALID_ARGUMENT);
}

/* Files in dir whose name starts with prefix and ends with suffix (suffix NULL: any file whose
 * name contains ".tmp", the cache's temporary files). */
static int s_count_files(const char *dir, const char *prefix, const char *suffix)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name), ls = suffix ? strlen(suffix) : 0;
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        if (suffix == NULL ? strstr(e->d_name, ".tmp") != NULL
                           : l > ls && strcmp(e->d_name + l - ls, suffix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

Test(cuda, compiled_images_are_cached_by_hash)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/cuda-image-cache-%ld", TROUPE_TEST_BUILD_DIR, (long)getpid());
    OK(troupe_config_set_cache_dir(dir));
    troupe_tnode_t *x, *y;
    troupe_ll_proc_t *p = s_axpb("axpb_img", 64, &x, &y);
    troupe_cgen_result_t *gen = NULL;
    OK(troupe_cgen_emit(p, TROUPE_CGEN_CUDA, &gen));
    void *img = NULL, *img2 = NULL;
    size_t n = 0, n2 = 0;
    bool hit = true;
    OK(troupe__cuda_image(gen->name, gen->source, "sm_80", false, &img, &n, &hit));
    cr_assert(!hit, "the first compile is a miss");
    cr_assert(n > 4 && memcmp(img, "\x7f" "ELF", 4) == 0, "a cubin is an ELF image");
    cr_assert_eq(s_count_files(dir, "axpb_img-", ".cubin"), 1);
    OK(troupe__cuda_image(gen->name, gen->source, "sm_80", false, &img2, &n2, &hit));
    cr_assert(hit, "the second is a hit");
    cr_assert(n == n2 && memcmp(img, img2, n) == 0, "and gives the same bytes");
    troupe_free(img2);
    /* Another option or architecture is another entry. */
    OK(troupe__cuda_image(gen->name, gen->source, "sm_80", true, &img2, &n2, &hit));
    cr_assert(!hit);
    troupe_free(img2);
    cr_assert_eq(s_count_files(dir, "axpb_img-", ".cubin"), 2);
    OK(troupe__cuda_image(gen->name, gen->source, "compute_80", false, &img2, &n2, &hit));
    cr_assert(!hit);
    cr_assert(strstr(img2, ".entry axpb_img_k0(") != NULL, "PTX defines the kernel");
    cr_assert_eq(((char *)img2)[n2 - 1], '\0', "the PTX image ends with its NUL");
    troupe_free(img2);
    cr_assert_eq(s_count_files(dir, "axpb_img-", ".ptx"), 1);
    /* The subnormal mode reaches the code: single-precision arithmetic flushes (.ftz) only when
     * asked (TROUPE_DENORMALS=flush), and keeps IEEE gradual underflow otherwise. */
    /* and into the cubin: NVRTC's own cubins ignored --ftz on a GPU machine (nvrtc.c) */
    void *c0 = NULL, *c1 = NULL;
    size_t n0 = 0, n1 = 0;
    OK(troupe__cuda_image(gen->name, gen->source, "sm_80", false, &c0, &n0, &hit));
    OK(troupe__cuda_image(gen->name, gen->source, "sm_80", true, &c1, &n1, &hit));
    cr_assert(n0 != n1 || memcmp(c0, c1, n0) != 0, "the cubins with and without ftz are equal");
    troupe_free(c0);
    troupe_free(c1);
    for (int ftz = 0; ftz <= 1; ftz++) {
        OK(troupe__cuda_image(gen->name, gen->source, "compute_80", ftz, &img2, &n2, &hit));
        cr_assert(strstr(img2, ".f32") != NULL, "the kernel does single-precision arithmetic");
        cr_assert_eq(strstr(img2, ".ftz.f32") != NULL, ftz == 1, "ftz=%d:\n%s", ftz,
                     (char *)img2);
        troupe_free(img2);
    }
    /* No temporary file is left behind. */
    cr_assert_eq(s_count_files(dir, "axpb_img-", NULL), 0);
    troupe_free(img);
    /* A compile error names NVRTC's verdict and the start of its log. */
    troupe_status_t st = troupe__cuda_image(
        "broken", "extern \"C\" __global__ void broken_k0(float *x) { x[0] = nope; }", "sm_80",
        false, &img, &n, &hit);
    cr_assert_eq(st, TROUPE_DEVICE_ERROR);
    cr_assert(strstr(troupe_last_error(), "NVRTC_ERROR_COMPILATION") &&
                  strstr(troupe_last_error(), "nope"),
              "%s", troupe_last_error());
    cr_assert_null(img);
    cr_assert_eq(troupe__cuda_image("not a name", "x", "sm_80", false, &img, &n, &hit),
                 TROUPE_INVALID_ARGUMENT);
    troupe_cgen_result_destroy(&gen);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&y);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* The conformance suites (FOR_EACH_DRIVER in test_runtime, test_merge, test_mlp, test_gemm,
 * test_gather, test_nn_embedding and the schedule fuzzer) include cuda exactly when a device is
 * present; this test says so, or skips with the reason. */
Test(cuda, conformance_suites_run_on_cuda_when_a_device_is_present)
{
    bool listed = false;
    FOR_EACH_DRIVER(drv)
    listed = listed || strcmp(*drv, "cuda") == 0;
    char why[512];
    bool present = rtu_cuda_present(why, sizeof why);
    cr_assert_eq(listed, present);
    if (!present)
        cr_skip_test("the conformance suites ran on sync and cpu only: %s", why);
}

/* ---- with a device ---------------------------------------------------------------------- */

Test(cuda, suggested_streams_follow_the_seed)
{
    S_NEED_DEVICE();
    int sms = 0, engines = 0;
    cr_assert_eq(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    cr_assert_eq(cudaDeviceGetAttribute(&engines, cudaDevAttrAsyncEngineCount, 0), cudaSuccess);
    const troupe_stream_config_t cfg[3] = {TROUPE_ONLY_DEVICES_PARALLEL, TROUPE_FOR_PARALLEL_COPYING,
                                           TROUPE_MOST_PARALLEL_STREAMS};
    const int want[3] = {1, 1 + engines, sms};
    for (int i = 0; i < 3; i++) {
        troupe_backend_t *b = NULL;
        troupe_device_t *d = NULL;
        int got = 0;
        OK(troupe_backend_open("cuda", cfg[i], &b));
        OK(troupe_get_device(b, 0, &d));
        OK(troupe_suggested_num_streams(d, &got));
        cr_assert_eq(got, want[i], "config %d: %d streams, want %d", i, got, want[i]);
        troupe_backend_close(&b);
    }
}

Test(cuda, allocating_more_than_the_device_holds_names_the_bytes)
{
    S_NEED_DEVICE();
    size_t free_b = 0, total_b = 0;
    cr_assert_eq(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    const troupe_driver_vtable_t *vt = NULL;
    troupe_driver_t *drv = NULL;
    OK(troupe_driver_lookup("cuda", &vt));
    OK(troupe_driver_open(vt, &drv));
    int64_t ask = (int64_t)total_b * 2;
    cr_assert_eq(troupe_driver_alloc_pool(drv, 0, 7, ask, false), TROUPE_RESOURCE_EXHAUSTED);
    char want[64];
    snprintf(want, sizeof want, "cannot allocate %lld bytes", (long long)ask);
    cr_assert(strstr(troupe_last_error(), want) && strstr(troupe_last_error(), "bytes free of"),
              "%s", troupe_last_error());
    /* Nothing is left behind: the same pool id takes a small allocation. */
    OK(troupe_driver_alloc_pool(drv, 0, 7, 4096, true));
    OK(troupe_driver_free_pool(drv, 0, 7));
    troupe_driver_close(drv);
}

/* Copies through the staging buffers (pageable memory, several chunks) and directly
 * (page-locked memory), each way, and d2d on the device. */
Test(cuda, copies_through_staging_and_pinned_memory)
{
    S_NEED_DEVICE();
    const troupe_driver_vtable_t *vt = NULL;
    troupe_driver_t *drv = NULL;
    OK(troupe_driver_lookup("cuda", &vt));
    OK(troupe_driver_open(vt, &drv));
    const int64_t n = (int64_t)20 << 20; /* 20 MiB: three staging chunks */
    OK(troupe_driver_alloc_pool(drv, 0, 1, n, false));
    OK(troupe_driver_alloc_pool(drv, 0, 2, n, false));
    troupe_dqueue_t *q = NULL;
    OK(troupe_driver_queue_create(drv, 0, &q));
    unsigned char *src = malloc((size_t)n), *dst = malloc((size_t)n), *pinned = NULL;
    cr_assert(src && dst);
    cr_assert_eq(cudaHostAlloc((void **)&pinned, (size_t)n, cudaHostAllocPortable), cudaSuccess);
    for (int64_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 7 + (i >> 12));
    troupe_buffer_loc_t b1 = {1, 0, n}, b2 = {2, 0, n};
    OK(troupe_driver_h2d(drv, q, b1, src, n));           /* staged */
    OK(troupe_driver_d2d(drv, q, 0, b2, 0, b1, n));       /* on the device */
    OK(troupe_driver_d2h(drv, q, pinned, b2, n));         /* direct, asynchronous */
    troupe_devent_t *ev = NULL;
    OK(troupe_driver_event_record(drv, q, &ev));
    bool done = false;
    while (!done)
        OK(troupe_driver_event_query(drv, ev, &done));
    troupe_driver_event_release(drv, ev);
    cr_assert(memcmp(src, pinned, (size_t)n) == 0, "staged h2d, d2d, pinned d2h");
    memset(pinned, 0x5a, (size_t)n);
    OK(troupe_driver_h2d(drv, q, b1, pinned, n));        /* direct */
    OK(troupe_driver_d2h(drv, q, dst, b1, n));           /* staged: returns when done */
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(dst[i], 0x5a, "byte %lld", (long long)i);
    troupe_driver_queue_destroy(drv, q);
    OK(troupe_driver_free_pool(drv, 0, 1));
    OK(troupe_driver_free_pool(drv, 0, 2));
    cudaFreeHost(pinned);
    free(src);
    free(dst);
    troupe_driver_close(drv);
}

/* The axpb routine compiled on a cuda driver of its own, x (pool 1, zeroed) and y (pool 2,
 * zeroed) on device 0, a queue, and launch arguments binding them with static index `idx`. */
typedef struct s_axpb_run {
    troupe_driver_t *drv;
    troupe_tnode_t *x, *y;
    troupe_ll_proc_t *p;
    troupe_dcode_t *code;
    troupe_cgen_result_t *gen;
    troupe_dqueue_t *q;
    troupe_karg_t args[3];
} s_axpb_run_t;

static void s_axpb_open(s_axpb_run_t *f, const char *name, int64_t n, int64_t idx)
{
    const troupe_driver_vtable_t *vt = NULL;
    OK(troupe_driver_lookup("cuda", &vt));
    OK(troupe_driver_open(vt, &f->drv));
    f->p = s_axpb(name, n, &f->x, &f->y);
    OK(troupe_driver_compile(f->drv, f->p, &f->code));
    OK(troupe_cgen_emit(f->p, TROUPE_CGEN_CUDA, &f->gen));
    OK(troupe_driver_alloc_pool(f->drv, 0, 1, (int64_t)f->x->size_bytes, true));
    OK(troupe_driver_alloc_pool(f->drv, 0, 2, (int64_t)f->y->size_bytes, true));
    OK(troupe_driver_queue_create(f->drv, 0, &f->q));
    cr_assert(f->gen->nparams <= 3);
    for (size_t k = 0; k < f->gen->nparams; k++) {
        const troupe_cgen_param_t *gp = &f->gen->params[k];
        f->args[k] = (troupe_karg_t){TROUPE_KARG_BUFFER, 0, {0, 0, 0}, 0};
        if (gp->kind == TROUPE_CGEN_PARAM_STATIC_IDX)
            f->args[k] = (troupe_karg_t){TROUPE_KARG_STATIC_IDX, 0, {0, 0, 0}, idx};
        else
            f->args[k].buf = gp->tn == f->x
                                 ? (troupe_buffer_loc_t){1, 0, (int64_t)f->x->size_bytes}
                                 : (troupe_buffer_loc_t){2, 0, (int64_t)f->y->size_bytes};
    }
}

/* y's values (n floats) copied back into `out`. */
static void s_axpb_get_y(s_axpb_run_t *f, float *out)
{
    OK(troupe_driver_d2h(f->drv, f->q, out, (troupe_buffer_loc_t){2, 0, (int64_t)f->y->size_bytes},
                         (int64_t)f->y->size_bytes));
}

/* Releases what s_axpb_open made (the code unless already released: f->code NULL). */
static void s_axpb_close(s_axpb_run_t *f)
{
    troupe_driver_queue_destroy(f->drv, f->q);
    troupe_driver_code_release(f->drv, f->code);
    OK(troupe_driver_free_pool(f->drv, 0, 1));
    OK(troupe_driver_free_pool(f->drv, 0, 2));
    troupe_cgen_result_destroy(&f->gen);
    troupe_ll_proc_destroy(&f->p);
    troupe_tnode_release(&f->x);
    troupe_tnode_release(&f->y);
    troupe_driver_close(f->drv);
}

Test(cuda, a_bad_static_index_is_refused_and_the_next_launch_works)
{
    S_NEED_DEVICE();
    const int64_t n = 1000;
    s_axpb_run_t f;
    s_axpb_open(&f, "axpb_idx", n, 4); /* range 0..3 */
    float *xv = malloc(f.x->size_bytes), *yv = malloc(f.y->size_bytes);
    for (int64_t i = 0; i < 4 * n; i++)
        xv[i] = (float)i;
    OK(troupe_driver_h2d(f.drv, f.q, (troupe_buffer_loc_t){1, 0, (int64_t)f.x->size_bytes}, xv,
                         (int64_t)f.x->size_bytes));
    cr_assert_eq(troupe_driver_launch(f.drv, f.q, f.code, f.args, f.gen->nparams),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "expects a static index in 0..3, got 4"), "%s",
              troupe_last_error());
    for (size_t k = 0; k < f.gen->nparams; k++)
        if (f.args[k].kind == TROUPE_KARG_STATIC_IDX)
            f.args[k].value = 2;
    OK(troupe_driver_launch(f.drv, f.q, f.code, f.args, f.gen->nparams));
    s_axpb_get_y(&f, yv);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(yv[i], (float)(2 * n + i) * 2.0f + 0.5f, "y[%lld] = %g", (long long)i,
                     (double)yv[i]);
    free(xv);
    free(yv);
    s_axpb_close(&f);
}

/* The cuda driver asks for no Local arrays (devices/device.h no_local_arrays) and a routine
 * compiled for it is optimized with local_max_bytes 0 (actors/routine.c), while the host
 * drivers keep TROUPE_STACK_THRESHOLD's rule (-1); no device needed. */
Test(cuda, routines_for_cuda_are_optimized_without_local_arrays)
{
    const troupe_driver_vtable_t *cuda = NULL, *cpu = NULL;
    OK(troupe_driver_lookup("cuda", &cuda));
    OK(troupe_driver_lookup("cpu", &cpu));
    cr_assert(cuda->no_local_arrays && !cpu->no_local_arrays);
    cr_assert(cuda->no_outer_fusion && !cpu->no_outer_fusion);
    troupe_optimize_opts_t o;
    troupe__routine_optimize_opts(cuda, &o);
    cr_assert_eq(o.local_max_bytes, 0);
    cr_assert(!o.fuse_outer, "cuda: only nests over the same space fuse");
    cr_assert(!o.iteration_scalars, "cuda: no iteration scalars (the C dialect's)");
    troupe__routine_optimize_opts(cpu, &o);
    cr_assert_eq(o.local_max_bytes, -1);
    cr_assert(o.fuse_outer);
    cr_assert(o.iteration_scalars, "cpu: iteration scalars (TROUPE_ITERATION_SCALARS on)");
}

/* A segment of explicitly Local arrays past the 48 KiB of static shared memory (three of 5000
 * floats, all in use at once: 60000 bytes) runs through the driver on one block with them in
 * dynamic shared memory (compiler/cgen.h: the driver passes every device's opt-in limit, raises
 * the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize at load and gives the bytes at each
 * launch): out[i] = l1[n-1-i] + l2[n-1-i] * l3[n-1-i] with l_k = a * (k + 1), bit for bit what
 * the same float operations give on the host (no contraction: NVRTC --fmad=false). */
Test(cuda, local_arrays_past_48_kib_run_in_dynamic_shared_memory)
{
    S_NEED_DEVICE();
    const int64_t n = 5000;
    troupe_ll_proc_t *p = NULL;
    OK(troupe_ll_proc_new("dyn_local", &p));
    troupe_tnode_t *a = rtu_vec("a", n), *out = rtu_vec("out", n), *l[3];
    for (int k = 0; k < 3; k++) {
        char nm[8];
        snprintf(nm, sizeof nm, "loc%d", k + 1);
        l[k] = rtu_vec(nm, n);
        troupe_memory_mode_t m = {TROUPE_MM_LOCAL, TROUPE_MEMTYPE_UNSET_HOSTED,
                                  TROUPE_SHARING_UNSET};
        OK(troupe_tnode_update_memory_mode(l[k], m, 1));
    }
    troupe_ll_t *it[4];
    for (int k = 0; k < 3; k++) {
        int32_t i = troupe_ll_proc_add_symbol(p, NULL);
        troupe_axis_index_t ix = troupe_idx_sym(i);
        it[k] = troupe_ll_for(p, i, 0, n - 1,
                              troupe_ll_set(p, l[k], &ix,
                                            troupe_sc_binop(p, TROUPE_BINOP_MUL,
                                                            troupe_sc_get(p, a, &ix),
                                                            troupe_sc_constant(p, k + 1.0))),
                              false);
    }
    int32_t j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t jx = troupe_idx_sym(j), rx = troupe_idx_sym(j);
    rx.terms[0].coeff = -1; /* n-1-j */
    rx.offset = n - 1;
    troupe_sc_t *v = troupe_sc_binop(
        p, TROUPE_BINOP_ADD, troupe_sc_get(p, l[0], &rx),
        troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_get(p, l[1], &rx),
                        troupe_sc_get(p, l[2], &rx)));
    it[3] = troupe_ll_for(p, j, 0, n - 1, troupe_ll_set(p, out, &jx, v), false);
    p->body = troupe_ll_seq(p, 4, it);
    OK(troupe_ll_proc_status(p));
    OK(troupe_ll_proc_validate(p));

    const troupe_driver_vtable_t *vt = NULL;
    troupe_driver_t *drv = NULL;
    OK(troupe_driver_lookup("cuda", &vt));
    OK(troupe_driver_open(vt, &drv));
    troupe_dcode_t *code = NULL;
    OK(troupe_driver_compile(drv, p, &code));
    cr_assert_eq(code->gen->nkernels, 1);
    const troupe_cgen_kernel_t *kn = &code->gen->kernels[0];
    cr_expect(!kn->one_thread && kn->block[0] == 256, "one block of 256 threads");
    cr_expect_eq(kn->dynamic_shared_bytes, 60000u);
    int64_t bytes = n * 4;
    OK(troupe_driver_alloc_pool(drv, 0, 1, bytes, true));
    OK(troupe_driver_alloc_pool(drv, 0, 2, bytes, true));
    troupe_dqueue_t *q = NULL;
    OK(troupe_driver_queue_create(drv, 0, &q));
    float *av = malloc((size_t)bytes), *ov = malloc((size_t)bytes);
    cr_assert(av && ov);
    for (int64_t i = 0; i < n; i++)
        av[i] = 0.5f + (float)(i % 97) / 64.0f;
    OK(troupe_driver_h2d(drv, q, (troupe_buffer_loc_t){1, 0, bytes}, av, bytes));
    troupe_karg_t args[2];
    cr_assert_eq(code->gen->nparams, 2);
    for (size_t k = 0; k < 2; k++)
        args[k] = (troupe_karg_t){TROUPE_KARG_BUFFER, 0,
                                  {code->gen->params[k].tn == a ? 1 : 2, 0, bytes}, 0};
    OK(troupe_driver_launch(drv, q, code, args, 2));
    OK(troupe_driver_d2h(drv, q, ov, (troupe_buffer_loc_t){2, 0, bytes}, bytes));
    for (int64_t i = 0; i < n; i++) {
        volatile float x = av[n - 1 - i], l2 = x * 2.0f, l3 = x * 3.0f, prod = l2 * l3;
        float want = x * 1.0f + prod;
        cr_assert_eq(ov[i], want, "out[%lld] = %.9g, want %.9g", (long long)i, (double)ov[i],
                     (double)want);
    }
    free(av);
    free(ov);
    troupe_driver_queue_destroy(drv, q);
    troupe_driver_code_release(drv, code);
    OK(troupe_driver_free_pool(drv, 0, 1));
    OK(troupe_driver_free_pool(drv, 0, 2));
    troupe_driver_close(drv);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_t *nodes[] = {a, out, l[0], l[1], l[2]};
    for (size_t k = 0; k < 5; k++)
        troupe_tnode_release(&nodes[k]);
}

/* A kernel that faults (a trap, launched beside troupe's work) poisons the device: troupe's
 * next event fails with DEVICE_ERROR naming the cudaError_t, the stream and what waits on it
 * fail too, nothing hangs; and a new backend in the same process refuses the device by name,
 * saying the process must be restarted (the CUDA reference's rule; on an H200 with driver 580,
 * cudaDeviceReset did not make the device usable again: cudaInitDevice answered
 * cudaErrorDevicesUnavailable). */
Test(cuda, a_faulting_kernel_fails_events_and_dependants_and_the_device_is_refused_after)
{
    S_NEED_DEVICE();
    rtu_env_t e;
    rtu_env_open(&e, "cuda", 2);
    troupe_tnode_t *a = rtu_vec("a", 256);
    double init[256];
    for (int i = 0; i < 256; i++)
        init[i] = i;
    rtu_put(&e.ctx[0], a, init);
    troupe_code_t *code = rtu_add_code(e.b, a, NULL, "a_twice_fault");
    troupe_routine_t *r = NULL;
    OK(troupe_link(e.ctx[0], code, &r));
    troupe_event_t *ev = NULL;
    OK(troupe_routine_run(r, &ev));
    OK(troupe_event_sync(ev, 20000 * MS));
    troupe_event_release(&ev);
    /* The fault, on a stream of its own. */
    cudaLibrary_t lib;
    cudaKernel_t k;
    cudaStream_t raw;
    s_raw_kernel("extern \"C\" __global__ void trap_k() { __trap(); }", "trap_k", &lib, &k);
    cr_assert_eq(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaLaunchKernel((const void *)k, (dim3){1, 1, 1}, (dim3){1, 1, 1}, NULL, 0, raw),
                 cudaSuccess);
    cudaError_t fault = cudaStreamSynchronize(raw);
    cr_log_info("the trap kernel ended with %s", cudaGetErrorName(fault));
    /* troupe's next run fails on the event, with the error's name. */
    troupe_status_t st = troupe_routine_run(r, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, 20000 * MS);
    cr_assert_eq(st, TROUPE_DEVICE_ERROR, "%s: %s", troupe_status_str(st), troupe_last_error());
    cr_assert(strstr(troupe_last_error(), "cudaError"), "%s", troupe_last_error());
    /* A dependant on the other stream fails too, and does not hang. */
    if (ev != NULL) {
        st = troupe_stream_wait_for(e.s[1], ev);
        if (st == TROUPE_OK)
            st = troupe_stream_await(e.s[1], 20000 * MS);
        cr_assert_neq(st, TROUPE_OK, "a stream waiting on the failed device work fails");
        cr_assert_neq(st, TROUPE_DEADLINE_EXCEEDED, "and does not hang");
    }
    troupe_event_release(&ev);
    troupe_routine_release(&r);
    troupe_code_release(&code);
    (void)cudaStreamDestroy(raw);
    (void)cudaLibraryUnload(lib);
    rtu_env_close(&e); /* resets the device (a sticky error was seen) */
    troupe_backend_t *nb = NULL;
    troupe_status_t ost = troupe_backend_open("cuda", TROUPE_ONLY_DEVICES_PARALLEL, &nb);
    cr_assert_eq(ost, TROUPE_DEVICE_ERROR, "after %s a new cuda backend: %s: %s",
                 cudaGetErrorName(fault), troupe_status_str(ost), troupe_last_error());
    cr_assert_null(nb);
    cr_assert(strstr(troupe_last_error(), "had a sticky error earlier in this process") &&
                  strstr(troupe_last_error(), cudaGetErrorName(fault)) &&
                  strstr(troupe_last_error(), "restart the process"),
              "%s", troupe_last_error());
    troupe_tnode_release(&a);
}

/* Stream 1 waits for stream 0's event on the device (cudaStreamWaitEvent), not on the host:
 * the wait is queued at once and the result is ordered. */
Test(cuda, a_wait_on_a_stream_of_the_same_device_is_ordered_on_the_device)
{
    S_NEED_DEVICE();
    rtu_env_t e;
    rtu_env_open(&e, "cuda", 2);
    troupe_tnode_t *a = rtu_vec("a", 1 << 20);
    rtu_set_hosted(a, 411);
    double *init = malloc(sizeof(double) << 20);
    for (int i = 0; i < 1 << 20; i++)
        init[i] = 1.0;
    rtu_put(&e.ctx[0], a, init);
    troupe_code_t *code = rtu_add_code(e.b, a, NULL, "a_twice_wait");
    troupe_routine_t *r = NULL;
    OK(troupe_link(e.ctx[0], code, &r));
    for (int i = 0; i < 10; i++)
        OK(troupe_routine_run(r, NULL)); /* a = 1024 */
    troupe_event_t *ev = NULL;
    OK(troupe_stream_record(e.s[0], &ev));
    OK(troupe_stream_wait_for(e.s[1], ev));
    troupe_event_t *after = NULL;
    OK(troupe_stream_record(e.s[1], &after));
    OK(troupe_event_sync(after, 20000 * MS));
    cr_assert(troupe_event_is_done(ev), "stream 1 went past the wait only after stream 0's work");
    troupe_event_release(&after);
    troupe_event_release(&ev);
    float *got = malloc(sizeof(float) << 20);
    rtu_get(e.ctx[0], a, got);
    for (int i = 0; i < 1 << 20; i += 4099)
        cr_assert_eq(got[i], 1024.0f, "a[%d] = %g", i, (double)got[i]);
    free(got);
    free(init);
    troupe_routine_release(&r);
    troupe_code_release(&code);
    troupe_tnode_release(&a);
    rtu_env_close(&e);
}

/* cudaErrorNotReady from an event query is no error: nothing is left in the thread's last
 * error for a later cudaGetLastError (the driver's query clears it only if the runtime
 * recorded it, which TROUPE_LOG=debug:devices reports). */
Test(cuda, an_event_that_is_not_ready_leaves_no_error_behind)
{
    S_NEED_DEVICE();
    const troupe_driver_vtable_t *vt = NULL;
    troupe_driver_t *drv = NULL;
    OK(troupe_driver_lookup("cuda", &vt));
    OK(troupe_driver_open(vt, &drv));
    troupe_dqueue_t *q = NULL;
    OK(troupe_driver_queue_create(drv, 0, &q));
    cudaLibrary_t lib;
    cudaKernel_t k;
    s_raw_kernel(S_SPIN_SRC, "spin_k", &lib, &k);
    s_spin(k, q->stream, 1000000000LL);
    troupe_devent_t *ev = NULL;
    OK(troupe_driver_event_record(drv, q, &ev));
    bool done = true;
    OK(troupe_driver_event_query(drv, ev, &done));
    cr_assert(!done, "the event after a half-second kernel is not complete at once");
    cr_assert_eq(cudaPeekAtLastError(), cudaSuccess, "left behind: %s",
                 cudaGetErrorName(cudaPeekAtLastError()));
    while (!done)
        OK(troupe_driver_event_query(drv, ev, &done));
    cr_assert_eq(cudaPeekAtLastError(), cudaSuccess);
    troupe_driver_event_release(drv, ev);
    troupe_driver_queue_destroy(drv, q);
    cr_assert_eq(cudaLibraryUnload(lib), cudaSuccess);
    troupe_driver_close(drv);
}

/* A code whose last reference goes while its launch is still queued behind other work is
 * unloaded only once the device has finished: code_release returns after the work. */
Test(cuda, releasing_a_code_waits_for_its_queued_launches)
{
    S_NEED_DEVICE();
    const int64_t n = 1000;
    s_axpb_run_t f;
    s_axpb_open(&f, "axpb_rel", n, 1);
    cudaLibrary_t lib;
    cudaKernel_t k;
    s_raw_kernel(S_SPIN_SRC, "spin_k", &lib, &k);
    s_spin(k, f.q->stream, 1000000000LL);
    OK(troupe_driver_launch(f.drv, f.q, f.code, f.args, f.gen->nparams));
    troupe_devent_t *ev = NULL;
    OK(troupe_driver_event_record(f.drv, f.q, &ev));
    troupe_driver_code_release(f.drv, f.code);
    f.code = NULL;
    bool done = false;
    OK(troupe_driver_event_query(f.drv, ev, &done));
    cr_assert(done, "code_release returned before the launch it was queued for ran");
    float *yv = malloc(f.y->size_bytes);
    s_axpb_get_y(&f, yv);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(yv[i], 0.5f, "y[%lld] = %g (x is zero)", (long long)i, (double)yv[i]);
    free(yv);
    troupe_driver_event_release(f.drv, ev);
    cr_assert_eq(cudaLibraryUnload(lib), cudaSuccess);
    s_axpb_close(&f);
}

/* Repeated launches go through the graph policy (devices/device.h): each static index is
 * launched plainly, then captured as a CUDA graph and replayed, and every run computes with its
 * own index; with graphs off the same runs stay plain and give the same values. */
Test(cuda, repeated_launches_are_captured_and_replayed_with_their_own_indices)
{
    S_NEED_DEVICE();
    const int64_t n = 1000;
    enum { NB = 4, ROUNDS = 5 };
    s_axpb_run_t f;
    s_axpb_open(&f, "axpb_graph", n, 0);
    float *xv = malloc(f.x->size_bytes), *yv = malloc(f.y->size_bytes);
    for (int64_t i = 0; i < 4 * n; i++)
        xv[i] = (float)i;
    OK(troupe_driver_h2d(f.drv, f.q, (troupe_buffer_loc_t){1, 0, (int64_t)f.x->size_bytes}, xv,
                         (int64_t)f.x->size_bytes));
    for (int mode = 0; mode < 2; mode++) {
        troupe_driver_set_graphs(mode == 0 ? TROUPE_GRAPHS_AUTO : TROUPE_GRAPHS_OFF);
        troupe_driver_graph_stats_reset();
        for (int r = 0; r < ROUNDS; r++) {
            for (int64_t b = 0; b < NB; b++) {
                for (size_t k = 0; k < f.gen->nparams; k++)
                    if (f.args[k].kind == TROUPE_KARG_STATIC_IDX)
                        f.args[k].value = b;
                OK(troupe_driver_launch(f.drv, f.q, f.code, f.args, f.gen->nparams));
                s_axpb_get_y(&f, yv);
                for (int64_t i = 0; i < n; i += 97)
                    cr_assert_eq(yv[i], (float)(b * n + i) * 2.0f + 0.5f,
                                 "graphs %s, round %d, index %lld: y[%lld] = %g",
                                 mode == 0 ? "auto" : "off", r, (long long)b, (long long)i,
                                 (double)yv[i]);
            }
        }
        troupe_graph_stats_t st;
        troupe_driver_graph_stats(&st);
        if (mode == 0) {
            cr_assert_eq(st.capture_failures, 0,
                         "a capture failed on this GPU (TROUPE_LOG=debug:devices says why)");
            cr_assert_eq(st.captures, NB);
            cr_assert_eq(st.replays, NB * (ROUNDS - TROUPE_GRAPH_WARMUP_RUNS));
        } else {
            cr_assert_eq(st.captures + st.replays, 0, "off never captures");
            cr_assert_eq(st.plain, NB * ROUNDS);
        }
    }
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
    free(xv);
    free(yv);
    s_axpb_close(&f);
}

/* Once a cuda backend with a device is open, a tensor node's host array of 64 KiB or more is
 * page-locked (registered with the runtime), so its copies skip the staging buffers. */
Test(cuda, large_host_arrays_are_page_locked)
{
    S_NEED_DEVICE();
    troupe_backend_t *b = NULL;
    OK(troupe_backend_open("cuda", TROUPE_ONLY_DEVICES_PARALLEL, &b));
    troupe_tnode_t *big = rtu_vec("big", (int64_t)1 << 16), *small = rtu_vec("small", 16);
    void *hb = NULL, *hs = NULL;
    OK(troupe_tnode_host_array(big, &hb));
    OK(troupe_tnode_host_array(small, &hs));
    struct cudaPointerAttributes a;
    cr_assert_eq(cudaPointerGetAttributes(&a, hb), cudaSuccess);
    cr_assert_eq(a.type, cudaMemoryTypeHost, "a 256 KiB host array is page-locked (type %d)",
                 (int)a.type);
    cr_assert_eq(cudaPointerGetAttributes(&a, hs), cudaSuccess);
    cr_assert_eq(a.type, cudaMemoryTypeUnregistered, "a 64-byte one is not (type %d)", (int)a.type);
    troupe_tnode_release(&big);
    troupe_tnode_release(&small);
    troupe_backend_close(&b);
}

/* The tests' device probe (rtu_cuda_present) asks the runtime for the device count and opens no
 * backend: afterwards no pinned host allocator is installed, and without a device it says why.
 * A backend installs the allocator while it sees a device, and closing it uninstalls it, so the
 * cpu and sync tests that follow in the same process allocate as before. */
Test(cuda, the_device_probe_installs_nothing_and_close_uninstalls)
{
    char why[512];
    bool present = rtu_cuda_present(why, sizeof why);
    cr_assert_not(troupe__tnode_host_allocator_installed(), "the probe installed an allocator");
    cr_assert_eq(present, troupe__cuda_device_count() > 0);
    if (!present)
        cr_assert(strncmp(why, "no CUDA device: cudaGetDeviceCount: ", 36) == 0, "%s", why);
    else
        cr_assert_str_eq(why, "");
    troupe_backend_t *b = NULL;
    OK(troupe_backend_open("cuda", TROUPE_ONLY_DEVICES_PARALLEL, &b));
    cr_assert_eq(troupe__tnode_host_allocator_installed(), present,
                 "a backend installs the pinned allocator iff it sees a device");
    troupe_backend_close(&b);
    cr_assert_not(troupe__tnode_host_allocator_installed(), "closing it left the allocator");
}

/* With two cuda backends open, closing one keeps the pinned allocator for the other; closing
 * the last uninstalls it; an array allocated while it was installed stays page-locked and is
 * freed (unregistered) after both closed. */
Test(cuda, the_pinned_allocator_lives_while_a_backend_is_open)
{
    S_NEED_DEVICE();
    troupe_backend_t *b1 = NULL, *b2 = NULL;
    OK(troupe_backend_open("cuda", TROUPE_ONLY_DEVICES_PARALLEL, &b1));
    OK(troupe_backend_open("cuda", TROUPE_ONLY_DEVICES_PARALLEL, &b2));
    troupe_backend_close(&b1);
    cr_assert(troupe__tnode_host_allocator_installed(), "closing one of two uninstalled it");
    troupe_tnode_t *pinned = rtu_vec("pinned", (int64_t)1 << 16);
    void *hp = NULL;
    OK(troupe_tnode_host_array(pinned, &hp));
    struct cudaPointerAttributes a;
    cr_assert_eq(cudaPointerGetAttributes(&a, hp), cudaSuccess);
    cr_assert_eq(a.type, cudaMemoryTypeHost, "page-locked while b2 is open (type %d)", (int)a.type);
    troupe_backend_close(&b2);
    cr_assert_not(troupe__tnode_host_allocator_installed(), "closing the last left it");
    troupe_tnode_t *plain = rtu_vec("plain", (int64_t)1 << 16);
    void *hq = NULL;
    OK(troupe_tnode_host_array(plain, &hq));
    cr_assert_eq(cudaPointerGetAttributes(&a, hq), cudaSuccess);
    cr_assert_eq(a.type, cudaMemoryTypeUnregistered, "allocated after close: pageable (type %d)",
                 (int)a.type);
    troupe_tnode_release(&pinned);
    troupe_tnode_release(&plain);
}

#else /* !TROUPE_HAVE_CUDA */

Test(cuda, built_without_cuda)
{
    const troupe_driver_vtable_t *vt = NULL;
    cr_assert_eq(troupe_driver_lookup("cuda", &vt), TROUPE_NOT_FOUND);
    cr_skip_test("built without the CUDA toolkit (TROUPE_WITH_CUDA=OFF or not found)");
}

#endif
