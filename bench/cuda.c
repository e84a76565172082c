/* troupe — bench_cuda: the cuda backend (devices/cuda) through troupe's public API against the
 * bare CUDA calls doing the same work, in one run on device 0.
 *
 * Cases (troupe side / peer side; each pair timed together, bench/bench_util.h):
 *   h2d-1MiB, h2d-64MiB   troupe_from_host of a node's host array (page-locked: the driver
 *                         registers host arrays of 64 KiB or more) + troupe_event_sync /
 *                         cudaMemcpyAsync from cudaHostAlloc'd memory + cudaStreamSynchronize.
 *   d2h-1MiB, d2h-64MiB   troupe_to_host + troupe_event_sync / the same copy the other way.
 *                         Extra fields: registered_peer_us (the bare copy from the node's own
 *                         host array), troupe_call_us and troupe_wait_us (troupe's mean time in
 *                         the call and in troupe_event_sync; traced as "bench" spans).
 *   h2d-1MiB-x8, d2h-1MiB-x8  8 such copies in flight, then one sync (troupe: the last
 *                         copy's event) / 8 cudaMemcpyAsync + one cudaStreamSynchronize: a
 *                         stream of transfers, as a loader feeding batches issues them.
 *   round-trip            one run of a one-statement routine (a[0] = a[0] + a[0]: one kernel,
 *                         one thread) through the stream actor + troupe_event_sync /
 *                         cudaLaunchKernel of the same statement compiled by NVRTC +
 *                         cudaStreamSynchronize.
 *   matmul-512, matmul-4096  y = x . w (single precision, "bi,ij=>bj") as a troupe routine: its
 *                         GEMM step through cuBLASLt (troupe_path=cublaslt), and the same
 *                         routine with TROUPE_GEMM=generated (case <case>-generated: the
 *                         generated kernels) / cublasSgemm on the same operands with the default
 *                         math mode (no TF32), + cudaStreamSynchronize each.
 * Targets (issue 15): copies ratio <= 1/0.9, round trip <= 1.5, matmul through cuBLASLt <= 1/0.9,
 * generated <= 1/0.3 (ratio = troupe time / peer time).
 *
 * Check: the routines' results are compared with the peer's (matmul: |diff| <= 1e-5 k + 1e-4,
 * the copies byte for byte after a round trip). check=fail exits 1.
 *
 * Without a CUDA device the benchmark prints `bench=cuda skipped reason="..."` and exits 0.
 * Every case runs even when an earlier one failed. Options: see --help (bench/bench_util.h).
 * Exit status: 0, 1 on a failure or a failed check (any case), 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench/bench_util.h"

#include "actors/troupe.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/status.h"
#include "base/trace_impl.h"
#include "devices/cuda/cuda_impl.h"
#include "devices/cuda/nvrtc.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_PROG "bench_cuda"
#define S_TIMEOUT_NS (120LL * 1000 * 1000 * 1000)

static troupe_backend_t *s_b;
static troupe_stream_t *s_stream;
static troupe_context_t *s_ctx; /* the root context, replaced as arrays are added */
static cudaStream_t s_raw;
static const troupe_bench_opts_t *s_opts;

#define S_CUDA(call)                                                                               \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s: %s\n", S_PROG, #call, cudaGetErrorName(e_));                  \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define S_OK(what, call)                                                                           \
    do {                                                                                           \
        troupe_status_t st_ = (call);                                                              \
        if (st_ != TROUPE_OK)                                                                      \
            return troupe_bench_fail_status(S_PROG, what, st_);                                    \
    } while (0)

static troupe_tnode_t *s_node(const char *label, int ndims, const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    if (troupe_tnode_new(&label, 1, TROUPE_PREC_SINGLE, ndims, dims, NULL, 0.0, &tn) != TROUPE_OK)
        return NULL;
    troupe_memory_mode_t m = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, 0};
    if (troupe_tnode_update_memory_mode(tn, m, 411) != TROUPE_OK)
        troupe_tnode_release(&tn);
    return tn;
}

/* Uploads tn (its host values) into s_ctx, replacing it with the child that holds it. */
static troupe_status_t s_upload(troupe_tnode_t *tn)
{
    troupe_context_t *c = NULL;
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_init_from_host(s_ctx, tn, &c, &ev));
    troupe_context_release(&s_ctx);
    s_ctx = c;
    troupe_status_t st = troupe_event_sync(ev, S_TIMEOUT_NS);
    troupe_event_release(&ev);
    return st;
}

/* ---- copies ------------------------------------------------------------------------------ */

#define S_COPY_STREAM 8 /* copies in flight in the h2d/d2h-1MiB-x8 cases */

typedef struct s_copy {
    troupe_tnode_t *tn;
    bool to_host;
    void *pinned, *dev;
    void *host; /* the node's own host array (page-locked by the backend: cudaHostRegister) */
    size_t bytes;
    int reps;                        /* copies issued before the one sync */
    int64_t call_ns, wait_ns, calls; /* troupe's side: in the calls, in troupe_event_sync */
} s_copy_t;

static int s_troupe_copy(void *arg)
{
    s_copy_t *c = arg;
    troupe_event_t *ev = NULL;
    troupe_status_t st = TROUPE_OK;
    int64_t t0 = troupe_now_ns();
    for (int r = 0; r < c->reps && st == TROUPE_OK; r++) {
        troupe_event_release(&ev); /* only the last copy's event is waited for */
        st = c->to_host ? troupe_to_host(s_ctx, c->tn, &ev) : troupe_from_host(s_ctx, c->tn, &ev);
    }
    int64_t t1 = troupe_now_ns();
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, S_TIMEOUT_NS);
    int64_t t2 = troupe_now_ns();
    c->call_ns += t1 - t0;
    c->wait_ns += t2 - t1;
    c->calls++;
    if (troupe__trace_on()) { /* the host's side of the copy beside the stream's (actors/host.c) */
        troupe__trace_emit(TROUPE__TRACK_THREAD, "bench",
                           c->to_host ? "to_host calls" : "from_host calls", t0, t1, NULL, 0);
        troupe__trace_emit(TROUPE__TRACK_THREAD, "bench", "event_sync", t1, t2, NULL, 0);
    }
    troupe_event_release(&ev);
    return st == TROUPE_OK ? 0 : troupe_bench_fail_status(S_PROG, "copy", st);
}

/* c->reps bare copies between host memory `host` and c->dev, then one synchronize. */
static int s_bare_copy(const s_copy_t *c, void *host)
{
    for (int r = 0; r < c->reps; r++)
        S_CUDA(cudaMemcpyAsync(c->to_host ? host : c->dev, c->to_host ? c->dev : host, c->bytes,
                               c->to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                               s_raw));
    S_CUDA(cudaStreamSynchronize(s_raw));
    return 0;
}

/* The peer: cudaHostAlloc'd memory. */
static int s_peer_copy(void *arg)
{
    const s_copy_t *c = arg;
    return s_bare_copy(c, c->pinned);
}

/* The bare copy from or into the node's own host array: tells the cost of the memory kind
 * (registered pages against cudaHostAlloc's) from that of troupe's path. */
static int s_peer_copy_registered(void *arg)
{
    const s_copy_t *c = arg;
    return s_bare_copy(c, c->host);
}

/* One copy case: c->reps copies of c->bytes in direction c->to_host, each side timed, the
 * result checked against the peer's bytes, and the case's line printed. */
static int s_copy_case(s_copy_t *c)
{
    c->call_ns = c->wait_ns = c->calls = 0;
    troupe_bench_side_t sides[3] = {
        {s_troupe_copy, c}, {s_peer_copy, c}, {s_peer_copy_registered, c}};
    troupe_bench_stats_t st[3];
    if (troupe_bench_time_sides(sides, 3, s_opts, st) != 0)
        return 1;
    char name[32];
    int mib = (int)(c->bytes >> 20);
    if (c->reps == 1)
        snprintf(name, sizeof name, "%s-%dMiB", c->to_host ? "d2h" : "h2d", mib);
    else
        snprintf(name, sizeof name, "%s-%dMiB-x%d", c->to_host ? "d2h" : "h2d", mib, c->reps);
    double calls = c->calls > 0 ? (double)c->calls : 1.0; /* means over warm-up and runs */
    double call_us = (double)c->call_ns / calls / 1e3, wait_us = (double)c->wait_ns / calls / 1e3;
    /* the check: troupe's own copy last (the registered side also writes the host array on
     * d2h), into a host array cleared first */
    if (c->to_host)
        memset(c->host, 0, c->bytes);
    if (s_troupe_copy(c) != 0)
        return 1;
    bool same = memcmp(c->host, c->pinned, c->bytes) == 0;
    double moved = (double)c->bytes * c->reps;
    troupe_bench_print_case("cuda", name, (int64_t)moved, st[0].median_us, "cudaMemcpyAsync",
                            st[1].median_us,
                            "troupe_GBps=%.2f peer_GBps=%.2f registered_peer_us=%.1f "
                            "troupe_call_us=%.1f troupe_wait_us=%.1f copies=%d check=%s",
                            moved / st[0].median_us / 1e3, moved / st[1].median_us / 1e3,
                            st[2].median_us, call_us, wait_us, c->reps, same ? "ok" : "fail");
    return same ? 0 : 1;
}

static int s_copies(void)
{
    static const int64_t sizes[2] = {(int64_t)1 << 20, (int64_t)64 << 20};
    for (int i = 0; i < 2; i++) {
        int64_t count = sizes[i] / 4;
        troupe_tnode_t *tn = s_node(i == 0 ? "c1" : "c64", 1, &count);
        if (tn == NULL)
            return troupe_bench_fail_status(S_PROG, "node", TROUPE_RESOURCE_EXHAUSTED);
        void *host = NULL;
        S_OK("host array", troupe_tnode_host_array(tn, &host));
        troupe_bench_fill_uniform(host, count, 7 + (uint64_t)i);
        S_OK("upload", s_upload(tn));
        s_copy_t c = {tn, false, NULL, NULL, host, (size_t)sizes[i], 1, 0, 0, 0};
        S_CUDA(cudaHostAlloc(&c.pinned, c.bytes, cudaHostAllocPortable));
        S_CUDA(cudaMalloc(&c.dev, c.bytes));
        memcpy(c.pinned, host, c.bytes);
        /* 1 MiB also as S_COPY_STREAM copies in flight and one sync: a stream of transfers
         * (a loader feeding batches), where the hand-off to the stream actor overlaps the
         * copy engine's work instead of adding to each copy */
        int rounds = i == 0 ? 2 : 1;
        int rc = 0;
        for (int k = 0; k < rounds && rc == 0; k++) {
            c.reps = k == 0 ? 1 : S_COPY_STREAM;
            for (int dir = 0; dir < 2 && rc == 0; dir++) {
                c.to_host = dir == 1;
                rc = s_copy_case(&c);
            }
        }
        cudaFreeHost(c.pinned);
        cudaFree(c.dev);
        troupe_tnode_release(&tn);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ---- round trip -------------------------------------------------------------------------- */

typedef struct s_rt {
    troupe_routine_t *r;
    cudaKernel_t k;
    void *dev;
} s_rt_t;

static int s_troupe_rt(void *arg)
{
    s_rt_t *rt = arg;
    troupe_event_t *ev = NULL;
    troupe_status_t st = troupe_routine_run(rt->r, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, S_TIMEOUT_NS);
    troupe_event_release(&ev);
    return st == TROUPE_OK ? 0 : troupe_bench_fail_status(S_PROG, "round trip", st);
}

static int s_peer_rt(void *arg)
{
    s_rt_t *rt = arg;
    void *args[1] = {&rt->dev};
    S_CUDA(cudaLaunchKernel((const void *)rt->k, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, s_raw));
    S_CUDA(cudaStreamSynchronize(s_raw));
    return 0;
}

static int s_round_trip(void)
{
    int64_t one = 1;
    troupe_tnode_t *a = s_node("a", 1, &one);
    double v = 1.0;
    S_OK("set", troupe_tnode_set_values(a, &v, 1));
    S_OK("upload", s_upload(a));
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    S_OK("assignment", troupe_asgn_comp_new(&comp));
    S_OK("assignment", troupe_asgn_pointwise_binop(comp, a, TROUPE_BINOP_ADD, troupe_asgn_node(a),
                                                   troupe_asgn_node(a), &t));
    troupe_asgn_comp_set_root(comp, t);
    troupe_code_t *code = NULL;
    S_OK("compile", troupe_compile(s_b, comp, "rt_twice", &code));
    troupe_asgn_comp_destroy(&comp);
    s_rt_t rt = {NULL, NULL, NULL};
    S_OK("link", troupe_link(s_ctx, code, &rt.r));
    int major = 0, minor = 0;
    S_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    S_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    char arch[32];
    S_OK("arch", troupe_nvrtc_arch_for(major, minor, arch, sizeof arch));
    void *img = NULL;
    size_t size = 0;
    S_OK("nvrtc", troupe_nvrtc_compile_image(
                      "extern \"C\" __global__ void peer_twice(float *a) { a[0] = a[0] + a[0]; }",
                      "peer.cu", arch, false, &img, &size, NULL));
    cudaLibrary_t lib;
    S_CUDA(cudaLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0));
    troupe_free(img);
    S_CUDA(cudaLibraryGetKernel(&rt.k, lib, "peer_twice"));
    S_CUDA(cudaMalloc(&rt.dev, 4));
    S_CUDA(cudaMemset(rt.dev, 0, 4));
    troupe_bench_side_t sides[2] = {{s_troupe_rt, &rt}, {s_peer_rt, &rt}};
    troupe_bench_stats_t st[2];
    if (troupe_bench_time_sides(sides, 2, s_opts, st) != 0)
        return 1;
    troupe_bench_print_case("cuda", "round-trip", 4, st[0].median_us, "cudaLaunchKernel+sync",
                            st[1].median_us, "runs=%d check=ok", st[0].runs);
    cudaFree(rt.dev);
    cudaLibraryUnload(lib);
    troupe_routine_release(&rt.r);
    troupe_code_release(&code);
    troupe_tnode_release(&a);
    return 0;
}

/* ---- matmul ------------------------------------------------------------------------------ */

typedef struct s_mm {
    troupe_routine_t *r;
    bool library;
    cublasHandle_t h;
    int64_t n;
    float *x, *w, *y; /* the peer's device operands */
} s_mm_t;

static int s_troupe_mm(void *arg)
{
    s_mm_t *m = arg;
    troupe_config_set_gemm_library(m->library); /* read at each launch (devices/cuda) */
    troupe_event_t *ev = NULL;
    troupe_status_t st = troupe_routine_run(m->r, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, S_TIMEOUT_NS);
    troupe_event_release(&ev);
    troupe_config_set_gemm_library(true);
    return st == TROUPE_OK ? 0 : troupe_bench_fail_status(S_PROG, "matmul", st);
}

static int s_peer_mm(void *arg)
{
    s_mm_t *m = arg;
    const float one = 1.0f, zero = 0.0f;
    int n = (int)m->n;
    /* Row-major y = x w is column-major y^T = w^T x^T. */
    if (cublasSgemm(m->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, m->w, n, m->x, n, &zero, m->y,
                    n) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "%s: cublasSgemm failed\n", S_PROG);
        return 1;
    }
    S_CUDA(cudaStreamSynchronize(s_raw));
    return 0;
}

static int s_matmul(cublasHandle_t h, int64_t n)
{
    int64_t d[2] = {n, n};
    troupe_tnode_t *x = s_node("x", 2, d), *w = s_node("w", 2, d), *y = s_node("y", 2, d);
    void *hx = NULL, *hw = NULL;
    S_OK("host array", troupe_tnode_host_array(x, &hx));
    S_OK("host array", troupe_tnode_host_array(w, &hw));
    troupe_bench_fill_uniform(hx, n * n, 11);
    troupe_bench_fill_uniform(hw, n * n, 12);
    S_OK("upload", s_upload(x));
    S_OK("upload", s_upload(w));
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    S_OK("assignment", troupe_asgn_comp_new(&comp));
    S_OK("assignment",
         troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                 troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &t));
    troupe_asgn_comp_set_root(comp, t);
    char name[32];
    snprintf(name, sizeof name, "mm_%lld", (long long)n);
    troupe_code_t *code = NULL;
    S_OK("compile", troupe_compile(s_b, comp, name, &code));
    troupe_asgn_comp_destroy(&comp);
    s_mm_t lt = {NULL, true, h, n, NULL, NULL, NULL};
    S_OK("link", troupe_link(s_ctx, code, &lt.r));
    s_mm_t gen = lt;
    gen.library = false;
    size_t bytes = (size_t)(n * n) * sizeof(float);
    S_CUDA(cudaMalloc((void **)&lt.x, bytes));
    S_CUDA(cudaMalloc((void **)&lt.w, bytes));
    S_CUDA(cudaMalloc((void **)&lt.y, bytes));
    S_CUDA(cudaMemcpy(lt.x, hx, bytes, cudaMemcpyHostToDevice));
    S_CUDA(cudaMemcpy(lt.w, hw, bytes, cudaMemcpyHostToDevice));
    float *want = malloc(bytes);
    double *got = malloc(sizeof(double) * (size_t)(n * n));
    if (want == NULL || got == NULL)
        return troupe_bench_fail_status(S_PROG, "matmul", TROUPE_RESOURCE_EXHAUSTED);
    double flop = 2.0 * (double)n * (double)n * (double)n;
    for (int path = 0; path < 2; path++) {
        s_mm_t *m = path == 0 ? &lt : &gen;
        troupe_bench_side_t sides[2] = {{s_troupe_mm, m}, {s_peer_mm, &lt}};
        troupe_bench_stats_t st[2];
        if (troupe_bench_time_sides(sides, 2, s_opts, st) != 0)
            return 1;
        S_CUDA(cudaMemcpy(want, lt.y, bytes, cudaMemcpyDeviceToHost));
        S_OK("result", troupe_tnode_get_values(y, got, (size_t)(n * n)));
        double worst = 0;
        for (int64_t c = 0; c < n * n; c++)
            worst = fmax(worst, fabs(got[c] - (double)want[c]));
        bool ok = worst <= 1e-5 * (double)n + 1e-4;
        char cname[48];
        snprintf(cname, sizeof cname, "matmul-%lld%s", (long long)n, path ? "-generated" : "");
        troupe_bench_print_case(
            "cuda", cname, 3 * (int64_t)bytes, st[0].median_us, "cublasSgemm", st[1].median_us,
            "troupe_gflops=%.1f peer_gflops=%.1f troupe_path=%s max_abs_diff=%.3g check=%s",
            flop / st[0].median_us / 1e3, flop / st[1].median_us / 1e3,
            path ? "generated" : "cublaslt", worst, ok ? "ok" : "fail");
        if (!ok)
            return 1;
    }
    free(want);
    free(got);
    cudaFree(lt.x);
    cudaFree(lt.w);
    cudaFree(lt.y);
    troupe_routine_release(&lt.r);
    troupe_code_release(&code);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
    return 0;
}

int main(int argc, char **argv)
{
    troupe_bench_opts_t opts;
    troupe_bench_opts_default(&opts);
    int pa = troupe_bench_parse_args(argc, argv,
                                     "the cuda backend against bare CUDA: copies, a routine's "
                                     "round trip, matmul through cuBLASLt and generated kernels",
                                     &opts);
    if (pa != 0)
        return pa > 0 ? 0 : 2;
    s_opts = &opts;
    troupe_bench_print_machine(TROUPE_BENCH_C_FLAGS);
    if (troupe__cuda_device_count() == 0) {
        char why[400];
        troupe__cuda_why_no_device(why, sizeof why);
        printf("bench=cuda skipped reason=\"no CUDA device: %s\"\n", why);
        return 0;
    }
    char line[512];
    S_OK("describe", troupe__cuda_describe(0, line, sizeof line));
    troupe_bench_print_library("cuda", line, NULL);
    troupe_bench_print_library("gemm", troupe__cuda_gemm_name(), NULL);
    troupe_device_t *d = NULL;
    S_OK("open the cuda backend", troupe_backend_open("cuda", TROUPE_ONLY_DEVICES_PARALLEL, &s_b));
    S_OK("device 0", troupe_get_device(s_b, 0, &d));
    S_OK("stream", troupe_new_stream(d, &s_stream));
    S_OK("context", troupe_context_new(s_stream, &s_ctx));
    S_CUDA(cudaSetDevice(0));
    S_CUDA(cudaStreamCreateWithFlags(&s_raw, cudaStreamNonBlocking));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(h, s_raw) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(h, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "%s: cuBLAS does not start\n", S_PROG);
        return 1;
    }
    /* Every case runs even when one before failed (a short GPU loan learns the most from one
     * run; after a sticky error the rest fail fast); the status is the first failure's. */
    int rc = s_copies(), rc_case = s_round_trip();
    rc = rc != 0 ? rc : rc_case;
    rc_case = s_matmul(h, 512);
    rc = rc != 0 ? rc : rc_case;
    rc_case = s_matmul(h, 4096);
    rc = rc != 0 ? rc : rc_case;
    cublasDestroy(h);
    cudaStreamDestroy(s_raw);
    troupe_context_release(&s_ctx);
    troupe_stream_release(&s_stream);
    troupe_backend_close(&s_b);
    return rc;
}
