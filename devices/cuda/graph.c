/* troupe — the cuda driver's graph entries (cuda_impl.h "graphs"): one launch captured from
 * its queue's stream as a CUDA graph (cudaStreamBeginCapture / cudaStreamEndCapture /
 * cudaGraphInstantiate) and replayed with cudaGraphLaunch. When to capture is not decided here
 * (devices/graph.c). */
#include "devices/cuda/driver_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/status.h"

#include <string.h>

struct troupe_dgraph {
    troupe_dqueue_t *q; /* captured from its stream */
    cudaGraphExec_t exec;
    size_t nargs;
    void **ptrs;       /* each buffer argument's device address at capture (NULL: an index) */
    int64_t *values;   /* each static index's value at capture */
    bool gemm_library; /* troupe_config_gemm_library() at capture (read at each plain launch) */
    bool gathers;      /* the code has gather indices: each replay is a gather launch */
};

static void s_free(troupe_dgraph_t *g)
{
    if (g == NULL)
        return;
    troupe_free(g->ptrs);
    troupe_free(g->values);
    troupe_free(g);
}

/* The arguments' device addresses and values into ptrs/values (nargs each). */
static troupe_status_t s_bind(troupe_dqueue_t *q, const char *op, const troupe_karg_t *args,
                              size_t nargs, void **ptrs, int64_t *values)
{
    for (size_t i = 0; i < nargs; i++) {
        ptrs[i] = NULL;
        values[i] = args[i].kind == TROUPE_KARG_STATIC_IDX ? args[i].value : 0;
        if (args[i].kind != TROUPE_KARG_STATIC_IDX)
            TROUPE_RETURN_IF_ERROR(
                troupe__cuda_resolve(q->drv, op, args[i].ordinal, args[i].buf, &ptrs[i]));
    }
    return TROUPE_OK;
}

troupe_status_t troupe__cuda_graph_capture(troupe_driver_t *drv, troupe_dqueue_t *q,
                                           troupe_dcode_t *code, const troupe_karg_t *args,
                                           size_t nargs, troupe_dgraph_t **out)
{
    if (out == NULL || q == NULL || code == NULL || (nargs > 0 && args == NULL))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "cuda graph_capture: NULL argument");
    *out = NULL;
    /* A routine with gather indices whose products run on cuBLASLt after the host has waited for
     * the index check (TROUPE_CUDA_GATHER_GEMM=checked): a graph cannot wait on the host, and its
     * replays would run the tiles instead (150 ms of GPT-2 124M's 450 ms step on an H200), so it
     * stays plain. */
    if (troupe__cuda_gather_checked(code->gen))
        return troupe__error(TROUPE_UNAVAILABLE,
                             "cuda graph_capture %s: its products run on cuBLASLt after the host "
                             "waits for its gather index check (TROUPE_CUDA_GATHER_GEMM=checked): "
                             "plain launches",
                             code->name);
    TROUPE_RETURN_IF_ERROR(troupe__cuda_use(q->drv, q->ordinal));
    troupe_dgraph_t *g = troupe_calloc(1, sizeof *g);
    if (g != NULL) {
        g->ptrs = troupe_calloc(nargs ? nargs : 1, sizeof *g->ptrs);
        g->values = troupe_calloc(nargs ? nargs : 1, sizeof *g->values);
    }
    if (g == NULL || g->ptrs == NULL || g->values == NULL) {
        s_free(g);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda graph_capture %s: out of memory",
                             code->name);
    }
    g->q = q;
    g->nargs = nargs;
    g->gemm_library = troupe_config_gemm_library();
    g->gathers = code->gen->ngathers > 0;
    troupe_status_t st = s_bind(q, "graph_capture", args, nargs, g->ptrs, g->values);
    if (st != TROUPE_OK)
        goto out_graph;
    if (g->gathers) {
        /* The error words and the host function's slot exist before the capture (nothing is
         * allocated during one); a queue whose gather check failed captures nothing. */
        troupe__cuda_gslot_t *slot = NULL;
        if ((st = troupe__cuda_gather_prepare(q, code, &slot)) != TROUPE_OK)
            goto out_graph;
    }
    /* Thread-local mode: only this thread (the queue's) is barred from calls that are unsafe
     * during a capture; other streams' threads go on. */
    cudaError_t e = cudaStreamBeginCapture(q->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        st = troupe__cuda_fail(&q->drv->devs[q->ordinal], e, "graph_capture %s: cudaStreamBeginCapture", code->name);
        goto out_graph;
    }
    /* Captured: the zeroing of the gather error words (a memset node), the steps, the copy
     * back and the host function are replayed each time; the replay is counted, not this. */
    st = troupe__cuda_launch_steps(drv, q, code, args, nargs, false);
    cudaGraph_t graph = NULL;
    e = cudaStreamEndCapture(q->stream, &graph); /* always: the stream leaves capture mode */
    if (st == TROUPE_OK && e != cudaSuccess)
        st = troupe__cuda_fail(&q->drv->devs[q->ordinal], e, "graph_capture %s: cudaStreamEndCapture", code->name);
    if (st == TROUPE_OK) {
        e = cudaGraphInstantiate(&g->exec, graph, 0);
        if (e != cudaSuccess)
            st = troupe__cuda_fail(&q->drv->devs[q->ordinal], e, "graph_capture %s: cudaGraphInstantiate", code->name);
    }
    if (graph != NULL)
        (void)cudaGraphDestroy(graph); /* the executable graph is independent of it */
    (void)cudaGetLastError();
out_graph:
    if (st != TROUPE_OK) {
        s_free(g);
        return st;
    }
    *out = g;
    return TROUPE_OK;
}

troupe_status_t troupe__cuda_graph_launch(troupe_driver_t *drv, troupe_dqueue_t *q,
                                          troupe_dgraph_t *g, const troupe_karg_t *args,
                                          size_t nargs)
{
    (void)drv;
    if (q == NULL || g == NULL || (nargs > 0 && args == NULL))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "cuda graph_launch: NULL argument");
    if (g->q != q || g->nargs != nargs)
        return troupe__error(TROUPE_UNAVAILABLE,
                             "cuda graph_launch: the graph was captured on another queue or "
                             "with %zu arguments, not %zu",
                             g->nargs, nargs);
    if (g->gemm_library != troupe_config_gemm_library())
        return troupe__error(TROUPE_UNAVAILABLE,
                             "cuda graph_launch: the GEMM mode changed since the capture");
    TROUPE_RETURN_IF_ERROR(troupe__cuda_use(q->drv, q->ordinal));
    TROUPE_RETURN_IF_ERROR(troupe__cuda_gather_refused(q));
    for (size_t i = 0; i < nargs; i++) {
        const troupe_karg_t *a = &args[i];
        if (a->kind == TROUPE_KARG_STATIC_IDX) {
            if (a->value != g->values[i])
                return troupe__error(TROUPE_UNAVAILABLE,
                                     "cuda graph_launch: static index %zu is %lld, captured "
                                     "with %lld",
                                     i, (long long)a->value, (long long)g->values[i]);
            continue;
        }
        void *p = NULL;
        TROUPE_RETURN_IF_ERROR(
            troupe__cuda_resolve(q->drv, "graph_launch", a->ordinal, a->buf, &p));
        if (p != g->ptrs[i])
            return troupe__error(TROUPE_UNAVAILABLE,
                                 "cuda graph_launch: argument %zu is now at %p, captured at %p", i,
                                 p, g->ptrs[i]);
    }
    cudaError_t e = cudaGraphLaunch(g->exec, q->stream);
    if (e != cudaSuccess)
        return troupe__cuda_fail(&q->drv->devs[q->ordinal], e, "graph_launch: cudaGraphLaunch");
    if (g->gathers)
        q->gather_seq++; /* its host function runs once per replay */
    return TROUPE_OK;
}

void troupe__cuda_graph_release(troupe_driver_t *drv, troupe_dgraph_t *g)
{
    (void)drv;
    if (g == NULL)
        return;
    /* An executable graph still in flight is freed when it completes (cuGraphExecDestroy).
     * The calling thread's current device is put back: release runs on whatever thread drops
     * the last reference (a stream actor, a host thread), which may be issuing to another GPU. */
    int prev = -1;
    bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    (void)cudaSetDevice(g->q->ordinal);
    (void)cudaGraphExecDestroy(g->exec);
    if (have_prev && prev != g->q->ordinal)
        (void)cudaSetDevice(prev);
    (void)cudaGetLastError();
    s_free(g);
}
