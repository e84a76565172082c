/* troupe — the device driver interface (docs/architecture.md §1 (devices); seeds `Backend_impl` Device_slab and
 * No_buffer_retrieval_or_syncing, `Schedulers.Multicore`).
 *
 * One vtable per driver family ("sync", "cpu", "cuda"). The interface is designed for
 * asynchronous devices: every data-moving or compute entry is *enqueued* on a driver queue
 * and its completion is observed through a driver event (record / query / wait). A
 * synchronous driver (sync, cpu) simply completes the work inside the call, and its events
 * are complete as soon as they are recorded; the actors above do not care which.
 *
 * Memory is addressed deterministically as {pool_id, offset} (seed Device_slab, era-B
 * `buffer_loc`): pools are allocated per device with caller-chosen ids, buffers are offsets
 * into pools, and the base pointer of a pool is resolved only inside the driver.
 *
 * A NULL vtable entry means the driver lacks the feature. Callers go through the wrappers
 * troupe_driver_<entry> below (IREE's iree_hal_driver_* style), which check the entry in one
 * place: a status-returning wrapper returns TROUPE_UNIMPLEMENTED naming the driver and the
 * entry, the others have a documented fallback.
 *
 * Thread safety: a driver's device-level entries (pools, compile, load) are thread-safe. Queue
 * entries for one queue are called by one thread at a time (its stream actor); different
 * queues may be driven concurrently. Events may be queried from any thread.
 * Ownership: the driver owns its devices, pools, queues, events and code objects; each
 * *_create / *_alloc entry has a matching release entry.
 */
#ifndef TROUPE_DEVICES_DEVICE_H
#define TROUPE_DEVICES_DEVICE_H

#include "troupe/base/status.h"
#include "troupe/ir/lowlevel.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A buffer: `size_bytes` at `offset` in pool `pool_id` of one device. */
typedef struct troupe_buffer_loc {
    int32_t pool_id;
    int64_t offset;
    int64_t size_bytes;
} troupe_buffer_loc_t;

typedef struct troupe_driver troupe_driver_t; /* one opened driver (backend) */
typedef struct troupe_dqueue troupe_dqueue_t; /* a driver queue (one per stream) */
typedef struct troupe_devent troupe_devent_t; /* a driver event */
typedef struct troupe_dcode troupe_dcode_t;   /* compiled, device-independent code */
typedef struct troupe_dgraph troupe_dgraph_t; /* one launch captured for replay (a CUDA graph) */

/* Seed `config`: only sets suggested_num_streams. */
typedef enum troupe_stream_config {
    TROUPE_ONLY_DEVICES_PARALLEL = 0,
    TROUPE_FOR_PARALLEL_COPYING,
    TROUPE_MOST_PARALLEL_STREAMS,
} troupe_stream_config_t;

/* Kernel arguments at launch, in the order of the code's parameter list (compiler/cgen): a node
 * parameter gets its buffer; a static index its value; the merge buffer its buffer. */
typedef enum troupe_karg_kind {
    TROUPE_KARG_BUFFER = 0,
    TROUPE_KARG_STATIC_IDX,
    TROUPE_KARG_MERGE_BUFFER,
} troupe_karg_kind_t;

typedef struct troupe_karg {
    troupe_karg_kind_t kind;
    int32_t ordinal;         /* device of the buffer (buffers) */
    troupe_buffer_loc_t buf; /* BUFFER, MERGE_BUFFER */
    int64_t value;           /* STATIC_IDX */
} troupe_karg_t;

typedef struct troupe_driver_vtable {
    const char *name; /* "sync", "cpu", "cuda" */
    /* false: every queue entry has finished its work when it returns (sync, cpu), so an event
     * recorded after it is complete at once. true (cuda): queue entries enqueue work that
     * completes later; only event_query tells when, and event_wait orders one queue after
     * another's event without the host (actors/async_impl.h drives such drivers). */
    bool async_queues;
    /* true: the routines compiled for it get no Local arrays (compiler/optimize.h,
     * local_max_bytes 0: their temporaries are device arrays). cuda: a Local array lives in one
     * block's shared memory, so every statement from its first use to its last runs on that one
     * block (compiler/cgen.h, segments), while a device array lets each statement take the
     * grid; the main job's loss segment took 82 of the 117 us of a step at 128 rows per replica
     * on an H200, 381 us at 384 rows. false (host drivers): TROUPE_STACK_THRESHOLD decides. */
    bool no_local_arrays;
    /* true: its routines fuse only nests over the same space (compiler/optimize.h fuse_outer
     * false). cuda: a nest's threads span its outer loops, which fusion over a shared prefix
     * leaves fewer of (a max pool's gradient fused per (image, channel) plane would run on
     * B·C threads instead of every cell's). false (host drivers): every fusion of fuse.h. */
    bool no_outer_fusion;

    /* ---- driver and devices ---- */
    troupe_status_t (*open)(troupe_driver_t **out);
    void (*close)(troupe_driver_t *drv);
    int (*num_devices)(troupe_driver_t *drv);
    int (*suggested_num_streams)(troupe_driver_t *drv, int ordinal, troupe_stream_config_t cfg);

    /* ---- memory: pools of one device; a pool is zero-initialised when `zero`. The host
     * drivers align a pool to 64 bytes, one of 2 MiB or more to 2 MiB with transparent huge
     * pages asked for (madvise), and find and zero its memory outside their table's lock; they
     * refuse a pool larger than the host memory free (RESOURCE_EXHAUSTED, TROUPE_HOST_MEMORY in
     * base/config.h) ---- */
    troupe_status_t (*alloc_pool)(troupe_driver_t *drv, int ordinal, int32_t pool_id,
                                  int64_t size_bytes, bool zero);
    troupe_status_t (*free_pool)(troupe_driver_t *drv, int ordinal, int32_t pool_id);
    /* Host-visible pointer of a buffer, for drivers with host-addressable memory (sync, cpu);
     * NULL entry on devices without it. Used by tests and the host fast paths. */
    troupe_status_t (*host_ptr)(troupe_driver_t *drv, int ordinal, troupe_buffer_loc_t buf,
                                void **out);

    /* ---- queues ---- */
    troupe_status_t (*queue_create)(troupe_driver_t *drv, int ordinal, troupe_dqueue_t **out);
    void (*queue_destroy)(troupe_driver_t *drv, troupe_dqueue_t *q);
    troupe_status_t (*memset_zero)(troupe_driver_t *drv, troupe_dqueue_t *q,
                                   troupe_buffer_loc_t dst);
    troupe_status_t (*h2d)(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_buffer_loc_t dst,
                           const void *src, int64_t size_bytes);
    troupe_status_t (*d2h)(troupe_driver_t *drv, troupe_dqueue_t *q, void *dst,
                           troupe_buffer_loc_t src, int64_t size_bytes);
    /* Copy between buffers, possibly of different devices of this driver (peer copy). */
    troupe_status_t (*d2d)(troupe_driver_t *drv, troupe_dqueue_t *q, int dst_ordinal,
                           troupe_buffer_loc_t dst, int src_ordinal, troupe_buffer_loc_t src,
                           int64_t size_bytes);

    /* ---- code ---- */
    /* Generates and compiles an optimized procedure. A compiler failure is
     * TROUPE_DEVICE_ERROR with the compiler's message in troupe_last_error(). */
    troupe_status_t (*compile)(troupe_driver_t *drv, const troupe_ll_proc_t *proc,
                               troupe_dcode_t **out);
    void (*code_release)(troupe_driver_t *drv, troupe_dcode_t *code);
    troupe_status_t (*launch)(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                              const troupe_karg_t *args, size_t nargs);

    /* ---- events ---- */
    troupe_status_t (*event_record)(troupe_driver_t *drv, troupe_dqueue_t *q,
                                    troupe_devent_t **out);
    /* true when complete; a failed device operation returns its status. */
    troupe_status_t (*event_query)(troupe_driver_t *drv, troupe_devent_t *ev, bool *done);
    /* Makes queue q wait for ev on the device (no host blocking). */
    troupe_status_t (*event_wait)(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_devent_t *ev);
    /* Must not use drv: an event may be released after its driver was closed. */
    void (*event_release)(troupe_driver_t *drv, troupe_devent_t *ev);

    /* ---- graphs (optional: all three or none; devices/graph.c decides when to use them) ----
     * graph_capture records what launch(drv, q, code, args, nargs) would enqueue as one
     * replayable graph *without running it*, bound to exactly these arguments (their device
     * addresses, static indices and merge buffer are baked in); any failure leaves q as it was
     * (not capturing, nothing enqueued) and returns its status; TROUPE_UNAVAILABLE says the
     * driver does not capture this code by design (no failure: it runs plainly from then on).
     * graph_launch enqueues the
     * graph's work on q (the queue it was captured on) for a launch with `args`: it returns
     * TROUPE_UNAVAILABLE without enqueuing anything when the graph no longer matches them (an
     * argument resolves to another address, a setting the capture depended on changed), other
     * errors as launch. graph_release may be called while launches of the graph are still in
     * flight (the policy drops evicted, stale and refused graphs at once): the driver frees it
     * once that work finished (CUDA's cudaGraphExecDestroy does so by itself). */
    troupe_status_t (*graph_capture)(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                                     const troupe_karg_t *args, size_t nargs,
                                     troupe_dgraph_t **out);
    troupe_status_t (*graph_launch)(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dgraph_t *g,
                                    const troupe_karg_t *args, size_t nargs);
    void (*graph_release)(troupe_driver_t *drv, troupe_dgraph_t *g);
} troupe_driver_vtable_t;

/* Every opened driver starts with this header (drivers embed it first). */
struct troupe_driver {
    const troupe_driver_vtable_t *vt;
};

/* The built drivers. troupe_driver_lookup("cpu") etc.; NOT_FOUND naming the backend and
 * listing the built ones. "cuda" loads the cuda driver's plugin, libtroupe_cuda.so, the first
 * time (devices/plugin_impl.h): NOT_FOUND naming the plugin and the loader's reason when it or a
 * CUDA library it needs is missing. */
TROUPE_MUST_USE troupe_status_t troupe_driver_lookup(const char *name,
                                                     const troupe_driver_vtable_t **out);

/* The built drivers, in table order ("cpu", "sync", then "cuda" when built): their number, and
 * the name of driver i (0..count-1; NULL outside). A driver is built when this troupe was
 * compiled with it (for cuda: its plugin was built; listing it loads nothing); whether it
 * opens on this machine is troupe_backend_open's answer. */
size_t troupe_driver_built_count(void);
const char *troupe_driver_built_name(size_t i);

/* ---- calling a driver ------------------------------------------------------------------------
 * One wrapper per vtable entry. Each takes the opened driver (whose header holds its vtable;
 * troupe_driver_open takes the vtable) and the entry's other arguments unchanged, and calls the
 * entry. For a NULL entry a status-returning wrapper records and returns TROUPE_UNIMPLEMENTED
 * "the <driver> driver has no <entry> entry"; the void and int ones fall back as noted. A NULL
 * driver is INVALID_ARGUMENT (void wrappers: nothing). Thread safety: as the entry. */

/* The driver's name ("sync", "cpu"), or "nil" for NULL. */
const char *troupe_driver_name(const troupe_driver_t *drv);
/* TROUPE_OK when `drv` has a non-NULL entry named `entry` (a vtable member name: "h2d",
 * "host_ptr"...), else TROUPE_UNIMPLEMENTED with the wrappers' message (INVALID_ARGUMENT for
 * an unknown name or NULL). For callers that must refuse work before it is scheduled. */
TROUPE_MUST_USE troupe_status_t troupe_driver_require(const troupe_driver_t *drv,
                                                      const char *entry);

TROUPE_MUST_USE troupe_status_t troupe_driver_open(const troupe_driver_vtable_t *vt,
                                                   troupe_driver_t **out);
void troupe_driver_close(troupe_driver_t *drv);
/* 0 without the entry; never negative. */
int troupe_driver_num_devices(troupe_driver_t *drv);
/* 1 without the entry; never below 1. */
int troupe_driver_suggested_num_streams(troupe_driver_t *drv, int ordinal,
                                        troupe_stream_config_t cfg);

TROUPE_MUST_USE troupe_status_t troupe_driver_alloc_pool(troupe_driver_t *drv, int ordinal,
                                                         int32_t pool_id, int64_t size_bytes,
                                                         bool zero);
/* Callers freeing memory at teardown may ignore the status (it is recorded as usual). */
troupe_status_t troupe_driver_free_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id);
TROUPE_MUST_USE troupe_status_t troupe_driver_host_ptr(troupe_driver_t *drv, int ordinal,
                                                       troupe_buffer_loc_t buf, void **out);

/* Without the entry *out is NULL and the result TROUPE_OK: the driver needs no queue (work
 * items then get q == NULL). */
TROUPE_MUST_USE troupe_status_t troupe_driver_queue_create(troupe_driver_t *drv, int ordinal,
                                                           troupe_dqueue_t **out);
/* Nothing for a NULL queue or without the entry. */
void troupe_driver_queue_destroy(troupe_driver_t *drv, troupe_dqueue_t *q);
TROUPE_MUST_USE troupe_status_t troupe_driver_memset_zero(troupe_driver_t *drv, troupe_dqueue_t *q,
                                                          troupe_buffer_loc_t dst);
TROUPE_MUST_USE troupe_status_t troupe_driver_h2d(troupe_driver_t *drv, troupe_dqueue_t *q,
                                                  troupe_buffer_loc_t dst, const void *src,
                                                  int64_t size_bytes);
TROUPE_MUST_USE troupe_status_t troupe_driver_d2h(troupe_driver_t *drv, troupe_dqueue_t *q,
                                                  void *dst, troupe_buffer_loc_t src,
                                                  int64_t size_bytes);
TROUPE_MUST_USE troupe_status_t troupe_driver_d2d(troupe_driver_t *drv, troupe_dqueue_t *q,
                                                  int dst_ordinal, troupe_buffer_loc_t dst,
                                                  int src_ordinal, troupe_buffer_loc_t src,
                                                  int64_t size_bytes);

TROUPE_MUST_USE troupe_status_t troupe_driver_compile(troupe_driver_t *drv,
                                                      const troupe_ll_proc_t *proc,
                                                      troupe_dcode_t **out);
/* Nothing for NULL code or without the entry. */
void troupe_driver_code_release(troupe_driver_t *drv, troupe_dcode_t *code);
/* Launches code on q. On a driver with the graph entries, while graphs are on
 * (troupe_driver_graphs), the launch goes through the graph policy (devices/graph.c): the same
 * code on the same queue with the same arguments (buffers, static-index values, merge buffer) is
 * launched plainly TROUPE_GRAPH_WARMUP_RUNS times, then captured once and replayed from then on;
 * up to TROUPE_GRAPH_SLOTS argument bindings keep a graph each per code and queue (least
 * recently used evicted). A capture, instantiation or graph launch that fails, or bindings that
 * keep changing (TROUPE_GRAPH_MAX_EVICTIONS evictions with no replay between them: a replay
 * starts the count again), turn graphs off for that code on that
 * queue: its launches are plain from then on, and one line at debug level (subsystem devices)
 * says why. Such a failure is never the caller's: the status is the plain launch's. The code
 * must stay alive during the call. Thread safety: as launch (one thread per queue). */
TROUPE_MUST_USE troupe_status_t troupe_driver_launch(troupe_driver_t *drv, troupe_dqueue_t *q,
                                                     troupe_dcode_t *code,
                                                     const troupe_karg_t *args, size_t nargs);

/* ---- the graph policy (devices/graph.c) ----------------------------------------------------- */
#define TROUPE_GRAPH_WARMUP_RUNS 2    /* plain launches of a binding before it is captured */
#define TROUPE_GRAPH_SLOTS 8          /* bindings with a graph, per code and queue */
#define TROUPE_GRAPH_MAX_EVICTIONS 64 /* evictions in a row (no replay between) after which a code
                                        stays plain */

typedef enum troupe_graphs_mode {
    TROUPE_GRAPHS_AUTO = 0, /* capture and replay where the driver can (default) */
    TROUPE_GRAPHS_OFF,      /* plain launches only (debugging) */
} troupe_graphs_mode_t;

/* The graph mode: TROUPE_CUDA_GRAPHS (auto|off, read at the first launch; another value is
 * logged at warn and means auto) until troupe_driver_set_graphs sets it. Setting it affects
 * later launches; graphs already captured stay until their code or queue goes, unused while
 * off. Thread-safe. */
troupe_graphs_mode_t troupe_driver_graphs(void);
void troupe_driver_set_graphs(troupe_graphs_mode_t mode);

/* What the policy did since the process started (or the last reset), summed over drivers:
 * plain launches, captures tried, captures that failed, graph launches (replays), bindings
 * whose graph went stale, codes turned plain. For tests and diagnosis. Thread-safe. */
typedef struct troupe_graph_stats {
    uint64_t plain, captures, capture_failures, replays, stale, refused;
} troupe_graph_stats_t;
void troupe_driver_graph_stats(troupe_graph_stats_t *out);
void troupe_driver_graph_stats_reset(void);

TROUPE_MUST_USE troupe_status_t troupe_driver_event_record(troupe_driver_t *drv, troupe_dqueue_t *q,
                                                           troupe_devent_t **out);
TROUPE_MUST_USE troupe_status_t troupe_driver_event_query(troupe_driver_t *drv, troupe_devent_t *ev,
                                                          bool *done);
TROUPE_MUST_USE troupe_status_t troupe_driver_event_wait(troupe_driver_t *drv, troupe_dqueue_t *q,
                                                         troupe_devent_t *ev);
/* Nothing for a NULL event or without the entry. */
void troupe_driver_event_release(troupe_driver_t *drv, troupe_devent_t *ev);

#ifdef __cplusplus
}
#endif
#endif
