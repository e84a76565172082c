/* troupe — the runtime's private object layouts and the internal calls between its files
 * (docs/architecture.md §2). Internal: not installed, not part of the user API.
 *
 * The files of the runtime call each other downward only, in this order (each may call the
 * ones before it):
 *   ledger.c     the coherence ledger: entries, RAW/WAR/WAW (ledger.h)
 *   device.c     devices: stream records, memory pools, shared arrays (this header)
 *   context.c    contexts: finding and deriving arrays (this header)
 *   host.c       the host side of hosted nodes: the host-array table, host transfers (host_impl.h)
 *   merge.c      merge buffers and local device_to_device (merge_impl.h)
 *   lend.c       lending arrays to external agents, remote contexts (lend_impl.h)
 *   routine.c    compile, link, run (this header)
 *   transfer.c   device_to_device, dispatching to merge.c, lend.c and routine.c
 *   backend.c    opening and tearing down backends (teardown reaches host.c and merge.c)
 * Releasing the last reference to a context or a code may close the backend (backend.c): the
 * only calls that go back up are these releases.
 *
 * Thread safety: the fields marked "device lock" are read and written with the device's mutex
 * (troupe_device_t.lock) held; fields marked "stream side" only by the stream's own work items
 * (FIFO, one at a time); the rest is immutable after creation.
 * Ownership: as marked on each field.
 */
#ifndef TROUPE_ACTORS_RUNTIME_IMPL_H
#define TROUPE_ACTORS_RUNTIME_IMPL_H

#include "actors/backend.h"
#include "actors/context.h"
#include "actors/event.h"
#include "actors/ledger.h"
#include "actors/merge_impl.h"
#include "actors/routine.h"
#include "actors/stream.h"
#include "base/refcount.h"
#include "devices/device.h"
#include "compiler/cgen.h"
#include "compiler/optimize.h"
#include "ir/lowlevel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layouts -------------------------------------------------------------------------------- */

/* A stream made by troupe_new_stream, as its device knows it. */
struct troupe__srec {
    troupe_stream_t *stream; /* one reference held by the device */
    int stream_id;
    troupe_device_t *dev;
    troupe__merge_buffer_t merge; /* its merge buffer (merge_impl.h) */
};

typedef struct troupe__pool {
    int32_t pool_id;
    int64_t size_bytes;
} troupe__pool_t;

/* The one device-wide array of a node shared across streams. */
typedef struct troupe__shared {
    troupe_tnode_t *tn; /* retained */
    troupe_buffer_loc_t loc;
} troupe__shared_t;

struct troupe_device {
    troupe_backend_t *backend; /* not retained (owned by it) */
    int ordinal;
    int32_t device_id;    /* global, unique across opened backends */
    pthread_mutex_t lock; /* the device lock: everything below */
    int32_t next_pool_id;
    int64_t used_bytes;       /* pools (the merge buffers are counted by their streams) */
    troupe__srec_t **streams; /* owned; index = stream_id */
    size_t nstreams, streams_cap;
    troupe__ledger_t ledger;
    troupe__pool_t *pools; /* every live pool troupe allocated on the device */
    size_t npools, pools_cap;
    troupe__shared_t *shared;
    size_t nshared, shared_cap;
};

/* The opened driver, shared by the backend and its codes (a code may be released by a stream's
 * work item after the backend was closed by its user: the driver stays open until both went). */
typedef struct troupe__dref {
    troupe_refcount_t refs;
    troupe_driver_t *drv;
} troupe__dref_t;

struct troupe_backend {
    troupe_refcount_t refs;
    troupe__dref_t *dref;
    troupe_driver_t *drv; /* dref->drv */
    troupe_stream_config_t config;
    bool inline_mode;
    int ndevices;
    troupe_device_t *devices;
};

/* An array of a context. */
typedef struct troupe__carray {
    troupe_tnode_t *tn; /* retained */
    troupe_buffer_loc_t loc;
    bool shared;
} troupe__carray_t;

struct troupe_context {
    troupe_refcount_t refs;
    troupe_backend_t *backend; /* retained */
    troupe_device_t *dev;
    troupe__srec_t *srec;
    troupe_context_t *parent; /* retained, NULL for a root */
    troupe__carray_t *arrays; /* sorted by node id */
    size_t narrays;
    int32_t owned_pool_id; /* pool of the arrays the parent lacks, -1 none */
    atomic_bool finalized;
    troupe_tnode_t *merge_node; /* era-B merge_buffer_node, retained, or NULL */
    int remote_rank;            /* -1: local; else a remote context (no backend, stream, arrays) */
};

struct troupe_code {
    troupe_refcount_t refs;
    troupe__dref_t *dref;      /* retained */
    troupe_ll_proc_t *proc;    /* optimized */
    troupe_cgen_result_t *gen; /* parameter list of the driver code */
    troupe_dcode_t *dcode;
    troupe_tnode_t **embedded; /* retained */
    size_t nembedded;
};

struct troupe_routine {
    troupe_refcount_t refs;
    troupe_context_t *ctx;  /* retained: the child context of the link */
    troupe_code_t *code;    /* retained */
    int64_t *static_values; /* per gen param (only STATIC_IDX slots used) */
};

/* ---- backend.c ------------------------------------------------------------------------------ */

void troupe__dref_release(troupe__dref_t **d_p);

/* ---- device.c (device lock held unless noted) ----------------------------------------------- */

/* Sets up device `ordinal` of b (no lock needed: nobody else sees it yet). */
void troupe__device_init(troupe_device_t *dev, troupe_backend_t *b, int ordinal);
/* A fresh pool of `size_bytes` (zero-filled) on dev, counted in its used memory.
 * The driver's status (UNIMPLEMENTED without alloc_pool), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__pool_alloc(troupe_device_t *dev, int64_t size_bytes,
                                                   int32_t *out_pool_id);
/* Frees pool `pool_id` and forgets its ledger entries; nothing for an unknown id. */
void troupe__pool_free(troupe_device_t *dev, int32_t pool_id);
/* Frees every pool (device teardown). */
void troupe__pool_free_all(troupe_device_t *dev);
/* The device-wide array of the shared node tn, allocated (own pool, ledger entry) when
 * missing. RESOURCE_EXHAUSTED, the driver's status. */
TROUPE_MUST_USE troupe_status_t troupe__shared_array(troupe_device_t *dev, troupe_tnode_t *tn,
                                                     troupe_buffer_loc_t *out);
/* The entry of tn's shared array on dev, or NULL when it has none. */
troupe__entry_t *troupe__shared_entry(troupe_device_t *dev, const troupe_tnode_t *tn);
/* The record of s on dev, or NULL. */
troupe__srec_t *troupe__srec_of(troupe_device_t *dev, troupe_stream_t *s);
/* The record of a stream made by troupe_new_stream, in any live backend, or NULL (own mutex;
 * call it without a device lock). */
troupe__srec_t *troupe__srec_lookup_global(troupe_stream_t *s);
/* Forgets dev's stream records (device teardown: streams awaited; no lock needed). */
void troupe__srec_unregister_all(troupe_device_t *dev);

/* ---- context.c ------------------------------------------------------------------------------ */

/* INVALID_ARGUMENT naming `op` when ctx is a remote context (lend.h), else OK. */
TROUPE_MUST_USE troupe_status_t troupe__context_check_local(const troupe_context_t *ctx,
                                                            const char *op);
/* The array of tn in ctx (or inherited), or NULL. */
const troupe__carray_t *troupe__context_find(const troupe_context_t *ctx, const troupe_tnode_t *tn);
/* NOT_FOUND "<op>: the context on <stream> lacks node <name>". */
TROUPE_MUST_USE troupe_status_t troupe__context_lacks(const troupe_context_t *ctx,
                                                      const troupe_tnode_t *tn, const char *op);
/* A child of parent whose arrays are parent's plus `extra` (retained copies), owning pool
 * `owned_pool_id` (-1 none) and tagged `merge_node` (NULL: none). RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__context_derive(troupe_context_t *parent,
                                                       const troupe__carray_t *extra, size_t nextra,
                                                       int32_t owned_pool_id,
                                                       troupe_tnode_t *merge_node,
                                                       troupe_context_t **out);

/* ---- routine.c ------------------------------------------------------------------------------ */

/* The optimizer's options for a routine compiled for driver `vt`: the defaults, with no Local
 * arrays for a driver that asks for none (devices/device.h, no_local_arrays: cuda) and only
 * same-space loop fusion for one that asks (no_outer_fusion: cuda). */
void troupe__routine_optimize_opts(const troupe_driver_vtable_t *vt, troupe_optimize_opts_t *o);

/* troupe_routine_run with the device lock held (STREAMING runs its consumer so). */
TROUPE_MUST_USE troupe_status_t troupe__routine_run_locked(troupe_routine_t *r,
                                                           troupe_event_t **out_ev);

#ifdef __cplusplus
}
#endif
#endif
