/* troupe — the cuda driver's gather error words (cuda_impl.h "gathers"): a routine with gather
 * indices (compiler/cgen.h troupe_cgen_result_t.gathers) runs between a zeroing of its queue's
 * error words and their copy back to the host, and a host function in stream order latches the
 * first failure; the queue's later events fail with it and its later launches are refused, and
 * so do those of queues ordered after it by event_wait. */
#include "devices/cuda/driver_impl.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/status.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define S_WORDS_BYTES (TROUPE_CGEN_GATHER_ERR_WORDS * sizeof(int64_t))

/* A queue's first gather failure, shared with the events recorded on it (they may outlive the
 * queue: refcounted). */
struct troupe__cuda_glatch {
    atomic_int refs;
    pthread_mutex_t mu;
    uint64_t done;      /* host functions run: gather launches finished, in stream order */
    uint64_t failed_at; /* the 1-based launch that failed first (0: none) */
    troupe_status_t status;
    char msg[1024];
};

/* The host function's argument: one per code launched on the queue (its address is baked into
 * the graphs captured there). */
struct troupe__cuda_gslot {
    troupe_dqueue_t *q;
    troupe_dcode_t *code;
};

static void s_latch_release(troupe__cuda_glatch_t *l)
{
    if (l == NULL || atomic_fetch_sub(&l->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&l->mu);
    troupe_free(l);
}

/* The latched failure as this thread's last error, or OK. */
static troupe_status_t s_latched(troupe__cuda_glatch_t *l, uint64_t upto)
{
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&l->mu);
    if (l->failed_at != 0 && l->failed_at <= upto)
        st = troupe__error(l->status, "%s", l->msg);
    pthread_mutex_unlock(&l->mu);
    return st;
}

/* Runs on a CUDA thread after the launch's copy of the words reached q->gerr_host (stream
 * order); makes no CUDA call. The code is alive: code_release waits for the devices first. */
static void CUDART_CB s_launch_done(void *user)
{
    troupe__cuda_gslot_t *slot = user;
    troupe__cuda_glatch_t *l = slot->q->glatch;
    pthread_mutex_lock(&l->mu);
    l->done++;
    if (l->failed_at == 0 && slot->q->gerr_host[0] != 0) {
        troupe_status_t st = troupe_cgen_gather_failure(slot->code->gen, slot->q->gerr_host);
        l->failed_at = l->done;
        l->status = st != TROUPE_OK ? st : TROUPE_INTERNAL;
        snprintf(l->msg, sizeof l->msg, "%s", troupe_last_error());
        troupe_clear_error();
    }
    pthread_mutex_unlock(&l->mu);
}

troupe_status_t troupe__cuda_gather_prepare(troupe_dqueue_t *q, troupe_dcode_t *code,
                                            troupe__cuda_gslot_t **out)
{
    troupe__cuda_dev_t *dev = &q->drv->devs[q->ordinal];
    cudaError_t e;
    if (q->glatch == NULL) {
        troupe__cuda_glatch_t *l = troupe_calloc(1, sizeof *l);
        if (l == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda launch %s: out of memory",
                                 code->name);
        atomic_init(&l->refs, 1);
        pthread_mutex_init(&l->mu, NULL);
        q->glatch = l;
    }
    if (q->gerr_dev == NULL &&
        (e = cudaMalloc((void **)&q->gerr_dev, S_WORDS_BYTES)) != cudaSuccess) {
        q->gerr_dev = NULL;
        return troupe__cuda_fail(dev, e, "launch %s: cudaMalloc of the gather error words",
                                 code->name);
    }
    if (q->gerr_host == NULL && (e = cudaHostAlloc((void **)&q->gerr_host, S_WORDS_BYTES,
                                                   cudaHostAllocDefault)) != cudaSuccess) {
        q->gerr_host = NULL;
        return troupe__cuda_fail(dev, e, "launch %s: cudaHostAlloc of the gather error words",
                                 code->name);
    }
    for (size_t i = 0; i < q->ngslots; i++) {
        if (q->gslots[i]->code == code) {
            *out = q->gslots[i];
            return TROUPE_OK;
        }
    }
    /* A code released and another allocated at its address finds the old slot: it holds the
     * same two pointers. */
    troupe__cuda_gslot_t **v = troupe_realloc(q->gslots, (q->ngslots + 1) * sizeof *v);
    if (v == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda launch %s: out of memory",
                             code->name);
    q->gslots = v;
    troupe__cuda_gslot_t *slot = troupe_calloc(1, sizeof *slot);
    if (slot == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda launch %s: out of memory",
                             code->name);
    slot->q = q;
    slot->code = code;
    q->gslots[q->ngslots++] = slot;
    *out = slot;
    return TROUPE_OK;
}

/* The first latched failure among deps (n of them), or OK. */
static troupe_status_t s_deps_latched(const troupe__cuda_gdep_t *deps, size_t n)
{
    troupe_status_t st = TROUPE_OK;
    for (size_t i = 0; i < n && st == TROUPE_OK; i++)
        st = s_latched(deps[i].latch, deps[i].mark);
    return st;
}

static void s_deps_release(troupe__cuda_gdep_t *deps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s_latch_release(deps[i].latch);
    troupe_free(deps);
}

troupe_status_t troupe__cuda_gather_refused(troupe_dqueue_t *q)
{
    troupe_status_t st = q->glatch != NULL ? s_latched(q->glatch, UINT64_MAX) : TROUPE_OK;
    return st != TROUPE_OK ? st : s_deps_latched(q->gups, q->ngups);
}

troupe_status_t troupe__cuda_gather_begin(troupe_dqueue_t *q, troupe__cuda_gslot_t *slot)
{
    cudaError_t e = cudaMemsetAsync(q->gerr_dev, 0, S_WORDS_BYTES, q->stream);
    if (e != cudaSuccess)
        return troupe__cuda_fail(&q->drv->devs[q->ordinal], e,
                                 "launch %s: zeroing the gather error words", slot->code->name);
    return TROUPE_OK;
}

bool troupe__cuda_gather_checked(const troupe_cgen_result_t *gen)
{
    if (gen->ngathers == 0 || troupe_config_cuda_gather_gemm() != TROUPE_CUDA_GATHER_GEMM_CHECKED ||
        !troupe_config_gemm_library())
        return false;
    for (size_t s = 0; s < gen->nsteps; s++)
        if (gen->steps[s].kind == TROUPE_CGEN_STEP_GEMM)
            return true;
    return false;
}

troupe_status_t troupe__cuda_gather_verdict(troupe_dqueue_t *q, troupe_dcode_t *code, bool *failed)
{
    troupe__cuda_dev_t *dev = &q->drv->devs[q->ordinal];
    *failed = false;
    cudaError_t e = cudaSuccess;
    if (q->gcheck_ev == NULL &&
        (e = cudaEventCreateWithFlags(&q->gcheck_ev, cudaEventDisableTiming)) != cudaSuccess) {
        q->gcheck_ev = NULL;
        return troupe__cuda_fail(dev, e, "launch %s: an event for the gather check", code->name);
    }
    /* In stream order after the earlier launches' copies and host functions, which have run
     * when the event completes; gather_end's copy overwrites the words with the same values. */
    e = cudaMemcpyAsync(q->gerr_host, q->gerr_dev, sizeof(int64_t), cudaMemcpyDeviceToHost,
                        q->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(q->gcheck_ev, q->stream);
    if (e != cudaSuccess)
        return troupe__cuda_fail(dev, e, "launch %s: reading the gather check's verdict",
                                 code->name);
    const int64_t deadline = troupe_now_ns() + troupe_config_timeout_ns();
    int64_t nap = 2000; /* ns: the check is one kernel behind the earlier work; back off */
    while ((e = cudaEventQuery(q->gcheck_ev)) == cudaErrorNotReady) {
        if (troupe_now_ns() > deadline)
            return troupe__error(TROUPE_DEADLINE_EXCEEDED,
                                 "launch %s: the gather index check had not finished after "
                                 "%lld s (TROUPE_TIMEOUT_S); the stream is stuck before it",
                                 code->name, (long long)troupe_config_timeout_s());
        troupe_sleep_ns(nap);
        nap = nap < 200000 ? nap * 2 : nap;
    }
    if (e != cudaSuccess)
        return troupe__cuda_fail(dev, e, "launch %s: waiting for the gather check", code->name);
    *failed = q->gerr_host[0] != 0;
    return TROUPE_OK;
}

troupe_status_t troupe__cuda_gather_end(troupe_dqueue_t *q, troupe__cuda_gslot_t *slot,
                                        bool counted)
{
    troupe__cuda_dev_t *dev = &q->drv->devs[q->ordinal];
    cudaError_t e = cudaMemcpyAsync(q->gerr_host, q->gerr_dev, S_WORDS_BYTES,
                                    cudaMemcpyDeviceToHost, q->stream);
    if (e != cudaSuccess)
        return troupe__cuda_fail(dev, e, "launch %s: copying the gather error words back",
                                 slot->code->name);
    e = cudaLaunchHostFunc(q->stream, s_launch_done, slot);
    if (e != cudaSuccess)
        return troupe__cuda_fail(dev, e, "launch %s: cudaLaunchHostFunc for the gather check",
                                 slot->code->name);
    if (counted)
        q->gather_seq++;
    return TROUPE_OK;
}

troupe_status_t troupe__cuda_gather_event_mark(troupe_dqueue_t *q, troupe_devent_t *ev)
{
    if (q->ngups > 0) {
        ev->gups = troupe_calloc(q->ngups, sizeof *ev->gups);
        if (ev->gups == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda event_record: out of memory");
        for (size_t i = 0; i < q->ngups; i++) {
            atomic_fetch_add(&q->gups[i].latch->refs, 1);
            ev->gups[i] = q->gups[i];
        }
        ev->ngups = q->ngups;
    }
    if (q->glatch != NULL) { /* else no gather launch came before this event */
        atomic_fetch_add(&q->glatch->refs, 1);
        ev->glatch = q->glatch;
        ev->gmark = q->gather_seq;
    }
    return TROUPE_OK;
}

troupe_status_t troupe__cuda_gather_event_check(const troupe_devent_t *ev)
{
    troupe_status_t st = ev->glatch == NULL ? TROUPE_OK : s_latched(ev->glatch, ev->gmark);
    return st != TROUPE_OK ? st : s_deps_latched(ev->gups, ev->ngups);
}

/* q follows `latch` up to `mark` (its own latch needs no entry: q orders its own launches). */
static troupe_status_t s_follow(troupe_dqueue_t *q, troupe__cuda_glatch_t *latch, uint64_t mark)
{
    if (latch == NULL || latch == q->glatch)
        return TROUPE_OK;
    for (size_t i = 0; i < q->ngups; i++) {
        if (q->gups[i].latch == latch) {
            if (mark > q->gups[i].mark)
                q->gups[i].mark = mark;
            return TROUPE_OK;
        }
    }
    troupe__cuda_gdep_t *v = troupe_realloc(q->gups, (q->ngups + 1) * sizeof *v);
    if (v == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda event_wait: out of memory");
    q->gups = v;
    atomic_fetch_add(&latch->refs, 1);
    q->gups[q->ngups++] = (troupe__cuda_gdep_t){latch, mark};
    return TROUPE_OK;
}

troupe_status_t troupe__cuda_gather_event_wait(troupe_dqueue_t *q, const troupe_devent_t *ev)
{
    TROUPE_RETURN_IF_ERROR(s_follow(q, ev->glatch, ev->gmark));
    for (size_t i = 0; i < ev->ngups; i++)
        TROUPE_RETURN_IF_ERROR(s_follow(q, ev->gups[i].latch, ev->gups[i].mark));
    return TROUPE_OK;
}

void troupe__cuda_gather_event_release(troupe_devent_t *ev)
{
    s_latch_release(ev->glatch);
    ev->glatch = NULL;
    s_deps_release(ev->gups, ev->ngups);
    ev->gups = NULL;
    ev->ngups = 0;
}

void troupe__cuda_gather_queue_free(troupe_dqueue_t *q)
{
    if (q->gerr_dev != NULL)
        (void)cudaFree(q->gerr_dev);
    if (q->gerr_host != NULL)
        (void)cudaFreeHost(q->gerr_host);
    if (q->gcheck_ev != NULL)
        (void)cudaEventDestroy(q->gcheck_ev);
    (void)cudaGetLastError();
    for (size_t i = 0; i < q->ngslots; i++)
        troupe_free(q->gslots[i]);
    troupe_free(q->gslots);
    s_latch_release(q->glatch);
    s_deps_release(q->gups, q->ngups);
    q->gups = NULL;
    q->ngups = 0;
    q->gerr_dev = q->gerr_host = NULL;
    q->gslots = NULL;
    q->ngslots = 0;
    q->glatch = NULL;
}
