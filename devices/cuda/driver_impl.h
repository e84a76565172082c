/* troupe — the cuda driver's internals shared by its files (see cuda_impl.h for the driver):
 *   cuda.c     open/close, devices, pools, queues, copies, events, launch
 *   module.c   compile: the CUDA dialect, NVRTC images through the compile cache, libraries
 *   gemm_lt.c  GEMM steps through cuBLASLt (when the toolkit has it)
 *   graph.c    a launch captured as a CUDA graph and replayed (the graph entries)
 *   gather.c   the gather error words of routines with gather indices, their read-back
 * Only devices/cuda/ *.c include this header (it includes the CUDA runtime's).
 *
 * Thread safety: a device's pool table is guarded by its mutex; a queue is used by one thread
 * at a time (its stream actor); a code is immutable after compile except its per-step GEMM
 * plans, built on first use under the code's mutex. Ownership: the driver owns devices and
 * codes, a queue its stream, staging buffers and cuBLASLt handle.
 */
#ifndef TROUPE_DEVICES_CUDA_DRIVER_IMPL_H
#define TROUPE_DEVICES_CUDA_DRIVER_IMPL_H

#include "compiler/cgen.h"
#include "devices/cuda/cuda_impl.h"
#include "devices/pools_impl.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define TROUPE__CUDA_ARCH_MAX 24
#define TROUPE__CUDA_STAGE_BYTES ((size_t)8 << 20) /* each of a queue's two staging buffers */

typedef struct troupe__cuda_dev {
    int ordinal;
    char name[256];
    int cc_major, cc_minor;
    int sm_count, async_engines;
    int compute_mode; /* cudaComputeMode */
    int shared_optin; /* cudaDevAttrMaxSharedMemoryPerBlockOptin: bytes a block may opt into */
    size_t total_bytes;
    char arch[TROUPE__CUDA_ARCH_MAX]; /* what code is compiled for (troupe_nvrtc_arch_for) */
    int arch_index;                   /* index of arch in the driver's list of distinct ones */
    pthread_mutex_t lock;             /* pools, used_bytes */
    troupe__pool_table_t pools;
    int64_t used_bytes;
    bool sticky; /* a sticky error was seen: reset at close */
} troupe__cuda_dev_t;

typedef struct troupe__cuda_driver {
    troupe_driver_t base; /* first: the vtable header */
    int ndevices;
    troupe__cuda_dev_t *devs;
    int narchs;
    char (*archs)[TROUPE__CUDA_ARCH_MAX]; /* distinct architectures of the devices */
    bool pins; /* holds a use of the pinned host allocator (cuda.c s_pin_acquire) */
} troupe__cuda_driver_t;

/* gather.c: a queue's first gather failure (refcounted: events share it) and the host
 * function's argument, one per code launched on the queue. */
typedef struct troupe__cuda_glatch troupe__cuda_glatch_t;
typedef struct troupe__cuda_gslot troupe__cuda_gslot_t;
/* Another queue's latch and the count of its gather launches that a queue or an event follows
 * (an event_wait ordered it after them). */
typedef struct troupe__cuda_gdep {
    troupe__cuda_glatch_t *latch; /* one reference */
    uint64_t mark;
} troupe__cuda_gdep_t;

struct troupe_dqueue {
    troupe__cuda_driver_t *drv;
    int ordinal;
    cudaStream_t stream;
    void *stage[2];          /* pinned (cudaHostAlloc), lazily */
    cudaEvent_t stage_ev[2]; /* the last copy that used each */
    bool stage_busy[2];
    void *lt; /* the queue's cuBLASLt state (gemm_lt.c), lazily */
    /* Routines with gather indices (gather.c), lazily at the first one: */
    int64_t *gerr_dev;  /* TROUPE_CGEN_GATHER_ERR_WORDS device words, zeroed at each launch */
    int64_t *gerr_host; /* pinned: their copy after each launch */
    cudaEvent_t gcheck_ev; /* TROUPE_CUDA_GATHER_GEMM=checked: the verdict's copy, lazily */
    troupe__cuda_glatch_t *glatch;
    uint64_t gather_seq; /* such launches enqueued, plain or replayed */
    troupe__cuda_gslot_t **gslots;
    size_t ngslots;
    troupe__cuda_gdep_t *gups; /* other queues' gather launches this one waited for */
    size_t ngups;
};

struct troupe_devent {
    cudaEvent_t ev;
    int ordinal;
    troupe__cuda_glatch_t *glatch; /* its queue's, when a gather launch came before it */
    uint64_t gmark;                /* the queue's gather_seq when it was recorded */
    troupe__cuda_gdep_t *gups;     /* its queue's gups when it was recorded (a copy) */
    size_t ngups;
};

/* One GEMM step's cuBLASLt plan (gemm_lt.c), per device architecture and alignment class of
 * the operands (4, 8, ..., 256 bytes). */
typedef struct troupe__cuda_gemm_plan troupe__cuda_gemm_plan_t;
#define TROUPE__CUDA_ALIGN_CLASSES 7

struct troupe_dcode {
    char *name;
    troupe_cgen_result_t *gen;  /* kernels, steps, parameters (its source is freed) */
    size_t nparams;
    troupe__kparam_t *params;
    int narchs;
    int nunits;            /* translation units the source was cut into (troupe__cuda_units) */
    cudaLibrary_t *libs;   /* narchs x nunits */
    cudaKernel_t *kernels; /* narchs x gen->nkernels */
    pthread_mutex_t lock;  /* plans */
    troupe__cuda_gemm_plan_t **plans; /* narchs x nsteps x align classes, built on first use */
    bool ftz;
};

/* Records a CUDA error: RESOURCE_EXHAUSTED for cudaErrorMemoryAllocation, else DEVICE_ERROR,
 * "cuda <what>: <name> (<description>)". A sticky error marks the device (dev may be NULL).
 * Clears the runtime's last error. */
troupe_status_t troupe__cuda_fail(troupe__cuda_dev_t *dev, cudaError_t e, const char *fmt, ...)
    TROUPE_PRINTF(3, 4);

/* cudaSetDevice(ordinal), as a status. */
troupe_status_t troupe__cuda_use(troupe__cuda_driver_t *d, int ordinal);

/* The device address of buf on device `ordinal` (the pools' rule, devices/pools_impl.h). */
troupe_status_t troupe__cuda_resolve(troupe__cuda_driver_t *d, const char *op, int ordinal,
                                     troupe_buffer_loc_t buf, void **out);

/* The launch entry: the code's steps on q's stream with these arguments. */
troupe_status_t troupe__cuda_launch(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                                    const troupe_karg_t *args, size_t nargs);

/* graph.c: the graph entries (devices/device.h; the rules in cuda_impl.h). */
troupe_status_t troupe__cuda_graph_capture(troupe_driver_t *drv, troupe_dqueue_t *q,
                                           troupe_dcode_t *code, const troupe_karg_t *args,
                                           size_t nargs, troupe_dgraph_t **out);
troupe_status_t troupe__cuda_graph_launch(troupe_driver_t *drv, troupe_dqueue_t *q,
                                          troupe_dgraph_t *g, const troupe_karg_t *args,
                                          size_t nargs);
void troupe__cuda_graph_release(troupe_driver_t *drv, troupe_dgraph_t *g);

/* The launch entry's body; `counted` false while a graph captures it (its replays count). */
troupe_status_t troupe__cuda_launch_steps(troupe_driver_t *drv, troupe_dqueue_t *q,
                                          troupe_dcode_t *code, const troupe_karg_t *args,
                                          size_t nargs, bool counted);

/* gather.c (rules in cuda_impl.h "gathers"). A launch of a code with gather indices runs
 * gather_begin (zeroes q's error words), its steps (kernels get the words as their last
 * argument, GEMM steps run their kernels), then gather_end (copies the words back and enqueues
 * the host function that latches a failure; `counted`: the launch is enqueued now, not
 * captured). gather_prepare allocates q's words, latch and the code's slot (before a capture:
 * nothing is allocated during one); gather_refused is the latched failure (INVALID_ARGUMENT
 * naming the index) or OK. Queue thread only, except event_check (any thread). */
troupe_status_t troupe__cuda_gather_prepare(troupe_dqueue_t *q, troupe_dcode_t *code,
                                            troupe__cuda_gslot_t **out);
troupe_status_t troupe__cuda_gather_refused(troupe_dqueue_t *q);
troupe_status_t troupe__cuda_gather_begin(troupe_dqueue_t *q, troupe__cuda_gslot_t *slot);
troupe_status_t troupe__cuda_gather_end(troupe_dqueue_t *q, troupe__cuda_gslot_t *slot,
                                        bool counted);
/* An event recorded on q shares its latch and the count of gather launches before it, and
 * those q waited for on other queues (event_mark; RESOURCE_EXHAUSTED); event_check (once the
 * CUDA event is done) fails with the latched failure of one of them; event_wait makes q follow
 * ev's (RESOURCE_EXHAUSTED), so a failure crosses device-side waits as a failed WAIT does on
 * the CPU. */
/* Whether a launch of `gen` waits on the host for its gather index check before its first
 * product, which then runs on cuBLASLt: gather indices and a GEMM step, with
 * TROUPE_CUDA_GATHER_GEMM=checked and the GEMM library in use (base/config.h). Such a routine
 * is never captured as a graph (a graph cannot wait on the host). */
bool troupe__cuda_gather_checked(const troupe_cgen_result_t *gen);
/* TROUPE_CUDA_GATHER_GEMM=checked: waits (at most TROUPE_TIMEOUT_S) for what q has enqueued,
 * the launch's index check included, and sets *failed when an index failed. Not during a
 * stream capture. DEVICE_ERROR, DEADLINE_EXCEEDED. */
troupe_status_t troupe__cuda_gather_verdict(troupe_dqueue_t *q, troupe_dcode_t *code, bool *failed);
troupe_status_t troupe__cuda_gather_event_mark(troupe_dqueue_t *q, troupe_devent_t *ev);
troupe_status_t troupe__cuda_gather_event_check(const troupe_devent_t *ev);
troupe_status_t troupe__cuda_gather_event_wait(troupe_dqueue_t *q, const troupe_devent_t *ev);
void troupe__cuda_gather_event_release(troupe_devent_t *ev);
/* Frees q's words, slots and its reference to the latch (after the stream was synchronized). */
void troupe__cuda_gather_queue_free(troupe_dqueue_t *q);

/* module.c: a routine's CUDA source cut into translation units that NVRTC compiles in parallel
 * (one CUDA library each): every unit is the source's prelude (everything before its first
 * kernel) and a run of whole kernels in order (a kernel's constant table, s_put_horizontal's
 * hz_end, goes with it), each run about an equal share of the kernels' text, none under
 * min_bytes (the driver: TROUPE__CUDA_UNIT_MIN_BYTES, so a small routine stays one unit) unless
 * it is the only one, at most max_units. */
#define TROUPE__CUDA_UNIT_MIN_BYTES ((size_t)96 << 10)
typedef struct troupe__cuda_unit {
    size_t first_kernel, nkernels;
    char *source; /* NUL-terminated, troupe_malloc */
} troupe__cuda_unit_t;
/* *out (troupe_calloc, free with troupe__cuda_units_free) and *nunits >= 1. INVALID_ARGUMENT when
 * a kernel's signature is not found in order (names the kernel), RESOURCE_EXHAUSTED. */
troupe_status_t troupe__cuda_units(const troupe_cgen_result_t *gen, int max_units, size_t min_bytes,
                                   troupe__cuda_unit_t **out, int *nunits);
void troupe__cuda_units_free(troupe__cuda_unit_t *units, int nunits);

/* module.c: the compile and code_release entries. */
troupe_status_t troupe__cuda_compile(troupe_driver_t *drv, const troupe_ll_proc_t *proc,
                                     troupe_dcode_t **out);
void troupe__cuda_code_release(troupe_driver_t *drv, troupe_dcode_t *code);

/* gemm_lt.c: runs GEMM step `step` of `code` on queue q with the operands' device addresses
 * (a, b, c, and the bias vector when the step's epilogue has one, else NULL: already offset).
 * UNAVAILABLE when cuBLASLt is not built in or cannot run the shape or epilogue: the caller
 * then runs the step's kernels. Other errors are the step's failure. */
troupe_status_t troupe__cuda_gemm(troupe_dqueue_t *q, troupe_dcode_t *code, size_t step,
                                  const void *a, const void *b, void *c, const void *bias);
/* Frees a plan (NULL is ignored) and a queue's cuBLASLt state (q->lt). */
void troupe__cuda_gemm_plan_free(troupe__cuda_gemm_plan_t *plan);
void troupe__cuda_gemm_queue_free(troupe_dqueue_t *q);

#endif
