/* troupe — GEMM steps of the cuda driver through cuBLASLt (see driver_impl.h).
 *
 * A GEMM step (compiler/cgen.h: row-major C = epilogue(op(A) op(B) + beta C)) is the
 * column-major product C^T (n x m) = op(B)^T (n x k) * op(A)^T (k x m): a row-major matrix
 * read column-major is its transpose, so B's buffer is cuBLASLt's first operand (untransposed when B is stored k x n)
 * and A's the second, with no copy. Compute type CUBLAS_COMPUTE_32F (64F for double): no TF32,
 * no reduced precision. Each step's descriptors and the algorithm cuBLASLt's heuristic picks
 * are made once per architecture and alignment class of the operands' addresses (4 to 256
 * bytes: the heuristic is told the alignment, since array offsets and static indices may leave
 * an operand less aligned than its default of 256 assumes) on first use and reused, so a step
 * sums in the same order every run on the same operands (bitwise reproducible). Each queue has its own cuBLASLt handle and a 32 MiB
 * workspace, made on first use. TROUPE_GEMM=generated, a build without cuBLASLt or a shape
 * cuBLASLt has no algorithm for gives UNAVAILABLE: the step's generated kernels run instead.
 * The step's epilogue (bias b[j], relu) is cuBLASLt's CUBLASLT_EPILOGUE_BIAS / _RELU /
 * _RELU_BIAS: its bias vector has one value per row of the column-major output, here C^T's
 * rows, which are troupe's columns j, so b[j] is passed as it is (a b[i] bias never reaches
 * a step: compiler/cgen_cuda.c keeps it as a kernel).
 */
#include "devices/cuda/driver_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/log.h"
#include "troupe_config.h"

#include <stdio.h>

#if TROUPE_HAVE_CUBLASLT
#include <cublasLt.h>

#define S_WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct s_lt_queue {
    cublasLtHandle_t handle;
    void *workspace;
} s_lt_queue_t;

struct troupe__cuda_gemm_plan {
    bool usable; /* false: no algorithm for the shape (the kernels run) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t lx, ly, lc;
    cublasLtMatmulAlgo_t algo;
    /* A batched step (compiler/cgen.h): its inner batch loops that fold into one strided batch
     * are cuBLASLt's batch; the outer ones (nouter, outermost first) are calls in order. */
    int nouter;
    int64_t outer_ext[TROUPE_CGEN_GEMM_MAX_BATCH];
    int64_t outer_a[TROUPE_CGEN_GEMM_MAX_BATCH], outer_b[TROUPE_CGEN_GEMM_MAX_BATCH],
        outer_c[TROUPE_CGEN_GEMM_MAX_BATCH]; /* elements per step of each outer loop */
};

/* The batch loops of g, innermost first, that fold into one strided batch: loop d joins when
 * every operand's stride along it is its stride along d + 1 times that loop's extent. Returns
 * the first folded loop (0: all); *count the batch's size. */
static int s_batch_fold(const troupe_cgen_gemm_call_t *g, int64_t *count)
{
    int first = g->nbatch - 1;
    *count = g->batch_ext[first];
    while (first > 0) {
        const troupe_cgen_gemm_operand_t *ops[3] = {&g->a, &g->b, &g->c};
        bool fold = true;
        for (int o = 0; o < 3; o++)
            fold = fold && ops[o]->batch_stride[first - 1] ==
                               ops[o]->batch_stride[first] * g->batch_ext[first];
        if (!fold)
            break;
        first--;
        *count *= g->batch_ext[first];
    }
    return first;
}

/* Sets a layout's strided batch (count matrices, `stride` elements apart). */
static cublasStatus_t s_layout_batch(cublasLtMatrixLayout_t l, int32_t count, int64_t stride)
{
    cublasStatus_t s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof count);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &stride, sizeof stride);
    return s;
}

void troupe__cuda_gemm_plan_free(troupe__cuda_gemm_plan_t *p)
{
    if (p == NULL)
        return;
    if (p->lc)
        (void)cublasLtMatrixLayoutDestroy(p->lc);
    if (p->ly)
        (void)cublasLtMatrixLayoutDestroy(p->ly);
    if (p->lx)
        (void)cublasLtMatrixLayoutDestroy(p->lx);
    if (p->op)
        (void)cublasLtMatmulDescDestroy(p->op);
    troupe_free(p);
}

void troupe__cuda_gemm_queue_free(troupe_dqueue_t *q)
{
    s_lt_queue_t *lt = q->lt;
    if (lt == NULL)
        return;
    if (lt->workspace)
        (void)cudaFree(lt->workspace);
    if (lt->handle)
        (void)cublasLtDestroy(lt->handle);
    troupe_free(lt);
    q->lt = NULL;
}

const char *troupe__cuda_gemm_name(void)
{
    static char name[64];
    size_t v = cublasLtGetVersion();
    snprintf(name, sizeof name, "cuBLASLt %zu.%zu.%zu", v / 10000, (v / 100) % 100, v % 100);
    return name;
}

static troupe_status_t s_lt_fail(cublasStatus_t s, const char *what, const char *code)
{
    return troupe__error(TROUPE_DEVICE_ERROR, "cuda launch %s: %s: %s", code, what,
                         cublasLtGetStatusName(s));
}

/* The queue's handle and workspace; false (logged once per queue) when they cannot be had. */
static bool s_queue(troupe_dqueue_t *q, s_lt_queue_t **out)
{
    if (q->lt == NULL) {
        s_lt_queue_t *lt = troupe_calloc(1, sizeof *lt);
        if (lt == NULL)
            return false;
        q->lt = lt;
        cublasStatus_t s = cublasLtCreate(&lt->handle);
        cudaError_t e = s == CUBLAS_STATUS_SUCCESS ? cudaMalloc(&lt->workspace, S_WORKSPACE_BYTES)
                                                   : cudaSuccess;
        if (s != CUBLAS_STATUS_SUCCESS || e != cudaSuccess) {
            TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
                       "cuda: queue on device %d: no cuBLASLt (%s, %s); GEMM steps run kernels",
                       q->ordinal, cublasLtGetStatusName(s), cudaGetErrorName(e));
            (void)cudaGetLastError();
            if (lt->handle)
                (void)cublasLtDestroy(lt->handle);
            lt->handle = NULL;
            lt->workspace = NULL;
        }
    }
    s_lt_queue_t *lt = q->lt;
    *out = lt;
    return lt->handle != NULL && lt->workspace != NULL;
}

/* The descriptors of `g` and the heuristic's algorithm for operands aligned to `align` bytes
 * (plan->usable false when it has none). */
static troupe_status_t s_plan(cublasLtHandle_t h, const troupe_cgen_gemm_call_t *g,
                              uint32_t align, const char *code, troupe__cuda_gemm_plan_t **out)
{
    troupe__cuda_gemm_plan_t *p = troupe_calloc(1, sizeof *p);
    if (p == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cuda launch %s: out of memory", code);
    bool dbl = g->prec == TROUPE_PREC_DOUBLE;
    cudaDataType_t t = dbl ? CUDA_R_64F : CUDA_R_32F;
    cublasComputeType_t ct = dbl ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    cublasOperation_t ta = g->b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = g->a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = NULL;
    size_t ws = S_WORKSPACE_BYTES;
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulDescCreate(&p->op, ct, t);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    /* The step's epilogue (compiler/cgen.h): its bias runs along j, the rows of C^T here, the
     * orientation of cuBLASLt's bias vector (one value per row of the column-major output). */
    static const cublasLtEpilogue_t epis[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                              CUBLASLT_EPILOGUE_RELU,
                                              CUBLASLT_EPILOGUE_RELU_BIAS};
    cublasLtEpilogue_t epi = epis[g->epilogue];
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    /* X = op(B)^T (n x k) from B's buffer; Y = op(A)^T (k x m) from A's; C^T (n x m). */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->lx, t, (uint64_t)(g->b.trans ? g->k : g->n),
                                       (uint64_t)(g->b.trans ? g->n : g->k), g->b.ld);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->ly, t, (uint64_t)(g->a.trans ? g->m : g->k),
                                       (uint64_t)(g->a.trans ? g->k : g->m), g->a.ld);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->lc, t, (uint64_t)g->n, (uint64_t)g->m, g->c.ld);
    /* A batched step: the folded inner loops as a strided batch (B's strides on X, A's on Y),
     * the others as calls. A loop along which C does not move accumulates into one block, in
     * order: cuBLASLt's batch has no order, so such a step keeps its tiles. */
    const char *refused = NULL; /* why the tiles run this batched step */
    for (int d = 0; d < g->nbatch; d++)
        if (g->c.batch_stride[d] == 0)
            refused = "a batch accumulating into one block";
    int64_t count = 1;
    if (g->nbatch > 0 && refused == NULL) {
        int first = s_batch_fold(g, &count);
        int bd = g->nbatch - 1;
        p->nouter = first;
        for (int d = 0; d < first; d++) {
            p->outer_ext[d] = g->batch_ext[d];
            p->outer_a[d] = g->a.batch_stride[d];
            p->outer_b[d] = g->b.batch_stride[d];
            p->outer_c[d] = g->c.batch_stride[d];
        }
        if (count > INT32_MAX)
            refused = "a batch past cuBLASLt's count (2^31 - 1)";
        if (refused == NULL && s == CUBLAS_STATUS_SUCCESS)
            s = s_layout_batch(p->lx, (int32_t)count, g->b.batch_stride[bd]);
        if (refused == NULL && s == CUBLAS_STATUS_SUCCESS)
            s = s_layout_batch(p->ly, (int32_t)count, g->a.batch_stride[bd]);
        if (refused == NULL && s == CUBLAS_STATUS_SUCCESS)
            s = s_layout_batch(p->lc, (int32_t)count, g->c.batch_stride[bd]);
    }
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceCreate(&pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws);
    static const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align);
    if (s == CUBLAS_STATUS_SUCCESS && refused == NULL)
        s = cublasLtMatmulAlgoGetHeuristic(h, p->op, p->lx, p->ly, p->lc, p->lc, pref, 1, &r,
                                           &found);
    if (pref)
        (void)cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) {
        troupe__cuda_gemm_plan_free(p);
        return s_lt_fail(s, "cuBLASLt descriptors", code);
    }
    p->usable = s == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p->usable) {
        p->algo = r.algo;
        /* what a profile needs to judge the pick: a skinny output over a long k (a convolution's
         * weight gradient) on few tiles without split-K would leave most of the GPU idle */
        int32_t splitk = 1;
        size_t got = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                                 sizeof splitk, &got) != CUBLAS_STATUS_SUCCESS)
            splitk = 0;
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                   "cuda %s: cuBLASLt for m=%lld n=%lld k=%lld (batch %lld): split-K %d, "
                   "%.2f waves, workspace %zu bytes",
                   code, (long long)g->m, (long long)g->n, (long long)g->k, (long long)count,
                   (int)splitk, (double)r.wavesCount, r.workspaceSize);
    } else
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
                   "cuda %s: %s for m=%lld n=%lld k=%lld (batch %lld); the step runs its kernels",
                   code, refused != NULL ? refused : "cuBLASLt has no algorithm", (long long)g->m,
                   (long long)g->n, (long long)g->k, (long long)count);
    *out = p;
    return TROUPE_OK;
}

/* The alignment class (0: 4 bytes ... 6: 256 bytes) of the least aligned of three addresses and
 * of the batch's offsets from them (es bytes an element). */
static int s_align_class(const troupe_cgen_gemm_call_t *g, size_t es, const void *a, const void *b,
                         const void *c)
{
    uintptr_t bits = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c;
    for (int d = 0; d < g->nbatch; d++)
        bits |=
            (uintptr_t)(g->a.batch_stride[d] | g->b.batch_stride[d] | g->c.batch_stride[d]) * es;
    int k = 0;
    while (k < TROUPE__CUDA_ALIGN_CLASSES - 1 && (bits & ((uintptr_t)4 << k)) == 0)
        k++;
    return k;
}

troupe_status_t troupe__cuda_gemm(troupe_dqueue_t *q, troupe_dcode_t *code, size_t step,
                                  const void *a, const void *b, void *c, const void *bias)
{
    s_lt_queue_t *lt = NULL;
    if (!troupe_config_gemm_library() || !s_queue(q, &lt))
        return TROUPE_UNAVAILABLE;
    const troupe_cgen_gemm_call_t *g = &code->gen->steps[step].gemm;
    bool has_bias = g->epilogue == TROUPE_CGEN_GEMM_EPI_BIAS ||
                    g->epilogue == TROUPE_CGEN_GEMM_EPI_RELU_BIAS;
    if (has_bias != (bias != NULL))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "cuda launch %s: GEMM step %zu: bias pointer %s, epilogue %d",
                             code->name, step, bias ? "given" : "missing", (int)g->epilogue);
    /* The bias vector must be aligned to its element (cuBLASLt's rule), which every offset into
     * a troupe array is; the kernels run for anything else. */
    if (has_bias && ((uintptr_t)bias % (g->prec == TROUPE_PREC_DOUBLE ? 8u : 4u)) != 0)
        return TROUPE_UNAVAILABLE;
    bool dbl = g->prec == TROUPE_PREC_DOUBLE;
    size_t es = dbl ? 8 : 4;
    int ac = s_align_class(g, es, a, b, c);
    size_t slot = ((size_t)q->drv->devs[q->ordinal].arch_index * code->gen->nsteps + step) *
                      TROUPE__CUDA_ALIGN_CLASSES +
                  (size_t)ac;
    pthread_mutex_lock(&code->lock);
    troupe_status_t st = TROUPE_OK;
    if (code->plans[slot] == NULL)
        st = s_plan(lt->handle, g, (uint32_t)4 << ac, code->name, &code->plans[slot]);
    const troupe__cuda_gemm_plan_t *p = code->plans[slot];
    pthread_mutex_unlock(&code->lock);
    if (st != TROUPE_OK)
        return st;
    if (!p->usable)
        return TROUPE_UNAVAILABLE;
    float one_f = 1.0f, beta_f = g->beta_zero ? 0.0f : 1.0f;
    double one_d = 1.0, beta_d = g->beta_zero ? 0.0 : 1.0;
    /* The plan's descriptor is shared by the streams running this code: its bias pointer is
     * set and used under the code's lock (cublasLtMatmul reads it when it enqueues). */
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (has_bias) {
        pthread_mutex_lock(&code->lock);
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof bias);
    }
    /* one call, or one per point of the outer batch loops (their order: outermost first) */
    int64_t calls = 1;
    for (int d = 0; d < p->nouter; d++)
        calls *= p->outer_ext[d];
    for (int64_t i = 0; i < calls && s == CUBLAS_STATUS_SUCCESS; i++) {
        int64_t oa = 0, ob = 0, oc = 0, rest = i;
        for (int d = p->nouter - 1; d >= 0; d--) {
            int64_t x = rest % p->outer_ext[d];
            rest /= p->outer_ext[d];
            oa += x * p->outer_a[d];
            ob += x * p->outer_b[d];
            oc += x * p->outer_c[d];
        }
        const char *ai = (const char *)a + oa * (int64_t)es,
                   *bi = (const char *)b + ob * (int64_t)es;
        char *ci = (char *)c + oc * (int64_t)es;
        s = cublasLtMatmul(lt->handle, p->op, dbl ? (const void *)&one_d : &one_f, bi, p->lx, ai,
                           p->ly, dbl ? (const void *)&beta_d : &beta_f, ci, p->lc, ci, p->lc,
                           &p->algo, lt->workspace, S_WORKSPACE_BYTES, q->stream);
    }
    if (has_bias)
        pthread_mutex_unlock(&code->lock);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s_lt_fail(s, "cublasLtMatmul", code->name);
    return TROUPE_OK;
}

#else /* !TROUPE_HAVE_CUBLASLT */

void troupe__cuda_gemm_plan_free(troupe__cuda_gemm_plan_t *p)
{
    (void)p;
}

void troupe__cuda_gemm_queue_free(troupe_dqueue_t *q)
{
    (void)q;
}

const char *troupe__cuda_gemm_name(void)
{
    return "none (built without cuBLASLt)";
}

troupe_status_t troupe__cuda_gemm(troupe_dqueue_t *q, troupe_dcode_t *code, size_t step,
                                  const void *a, const void *b, void *c, const void *bias)
{
    (void)q, (void)code, (void)step, (void)a, (void)b, (void)c, (void)bias;
    return TROUPE_UNAVAILABLE;
}

#endif
