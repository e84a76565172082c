/* troupe — the coherence ledger and the runtime's internal object layout (DESIGN.md §4, §5;
 * OCANNL_NOTES §3, with the gaps of §3.5 closed). Internal: not part of the user API (the
 * umbrella actors/troupe.h does not include it); backend.c, context.c, routine.c and
 * transfer.c share these definitions.
 *
 * The ledger lives with each device on the caller's side behind one mutex (device->lock).
 * It keys every device array by {pool_id, offset} (a troupe__akey_t) and keeps, per array:
 *   - the node it holds and whether it is a cross-stream shared array (with its owner stream,
 *     the only stream allowed to write it: seed `owner_stream`);
 *   - the last writer: (stream, event) of the most recent scheduled write (routine output,
 *     from_host, d2d destination);
 *   - the readers: (stream, event) of scheduled reads still pending (routine inputs, to_host,
 *     d2d sources — COPY into a merge buffer included — and STREAMING consumers reading the
 *     array through their merge buffer), at most one entry per stream (FIFO makes the newest
 *     event of a stream imply the older ones);
 *   - host_gen: the generation of the node's host array last uploaded into it (or -1), so
 *     "lagging the host" is decided per array, not per device (gap 3.5.7).
 * Rules, applied at schedule time by the caller holding device->lock:
 *   RAW  before a read on stream s: wait for the last writer if it is another stream's and not
 *        done (a failed writer is waited for too, so its failure reaches the reader);
 *   WAR  before a write on stream s: wait for every other stream's pending reader;
 *   WAW  before a write on stream s: wait for another stream's pending last write (only shared
 *        arrays can see this; link refuses two writing streams unless one owns the array).
 * After the operation is scheduled its event is recorded on s and noted: reads add (s, e) to
 * the readers, writes replace the writer with (s, e) and drop the readers (they are all before
 * e: other streams' were waited for, s's own precede it in FIFO order). Done events are pruned
 * whenever an entry is touched, and every 64 ledger operations across the whole device.
 *
 * Thread safety: everything here is called with device->lock held, except the fields marked
 * "stream side", which only the stream's own work items touch (FIFO, one at a time).
 * Ownership: entries own one reference to each event they hold.
 */
#ifndef TROUPE_ACTORS_LEDGER_H
#define TROUPE_ACTORS_LEDGER_H

#include "actors/backend.h"
#include "actors/context.h"
#include "actors/event.h"
#include "actors/routine.h"
#include "actors/stream.h"
#include "base/refcount.h"
#include "devices/device.h"
#include "compiler/cgen.h"
#include "ir/lowlevel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device-array identity. */
typedef struct troupe__akey {
    int32_t pool_id;
    int64_t offset;
} troupe__akey_t;

/* A stream created by troupe_new_stream, as the device knows it. */
typedef struct troupe__srec {
    troupe_stream_t *stream; /* one reference held by the device */
    int stream_id;
    troupe_device_t *dev;
    /* Host side (device->lock): what the merge buffer was last scheduled to hold. */
    troupe_tnode_t *sched_merge_node;  /* retained, NULL when none */
    bool sched_merge_streaming;        /* points at a source array (STREAMING) */
    troupe__akey_t sched_merge_src;    /* that array (STREAMING) */
    int64_t sched_merge_capacity;      /* bytes of the merge pool as scheduled (grow-only) */
    int32_t merge_pool_id;             /* this stream's merge pool id (fixed) */
    /* Stream side (work items of this stream only). */
    int64_t mb_capacity;               /* bytes of the merge pool actually allocated */
    troupe_buffer_loc_t mb_cur;        /* what MERGE_BUFFER kargs resolve to */
    bool mb_valid;
} troupe__srec_t;

typedef struct troupe__reader {
    troupe__srec_t *s;
    troupe_event_t *ev;
} troupe__reader_t;

typedef struct troupe__entry {
    int32_t node_id;
    char node_name[64];
    troupe__akey_t key;
    int64_t size_bytes;
    bool shared;
    troupe__srec_t *owner;     /* shared arrays: the writing stream, NULL until one writes */
    troupe__srec_t *writer_s;  /* last writer, NULL when none */
    troupe_event_t *writer_ev;
    troupe__reader_t *readers;
    size_t nreaders, readers_cap;
    int64_t host_gen;          /* host generation last uploaded, -1 never */
} troupe__entry_t;

typedef struct troupe__pool {
    int32_t pool_id;
    int64_t size_bytes;
} troupe__pool_t;

typedef struct troupe__shared {
    troupe_tnode_t *tn; /* retained */
    troupe_buffer_loc_t loc;
} troupe__shared_t;

struct troupe_device {
    troupe_backend_t *backend; /* not retained (owned by it) */
    int ordinal;
    int32_t device_id;         /* global, unique across opened backends */
    pthread_mutex_t lock;      /* the ledger mutex: everything below */
    int32_t next_pool_id;
    int64_t used_bytes;
    troupe__srec_t **streams;
    size_t nstreams, streams_cap;
    troupe__entry_t **entries;
    size_t nentries, entries_cap;
    troupe__pool_t *pools; /* every live pool troupe allocated on the device */
    size_t npools, pools_cap;
    troupe__shared_t *shared;
    size_t nshared, shared_cap;
    uint64_t ops;
};

/* The opened driver, shared by the backend and its codes (a code may be released by a stream's
 * work item after the backend was closed by its user: the driver stays open until both went). */
typedef struct troupe__dref {
    troupe_refcount_t refs;
    const troupe_driver_vtable_t *vt;
    troupe_driver_t *drv;
} troupe__dref_t;
void troupe__dref_release(troupe__dref_t **d_p);

struct troupe_backend {
    troupe_refcount_t refs;
    troupe__dref_t *dref;
    const troupe_driver_vtable_t *vt;
    troupe_driver_t *drv;
    troupe_stream_config_t config;
    bool inline_mode;
    int ndevices;
    troupe_device_t *devices;
};

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
    troupe_context_t *parent;  /* retained, NULL for a root */
    troupe__carray_t *arrays;  /* sorted by node id */
    size_t narrays;
    int32_t owned_pool_id;     /* pool of the arrays the parent lacks, -1 none */
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
    troupe_context_t *ctx; /* retained: the child context of the link */
    troupe_code_t *code;   /* retained */
    int64_t *static_values; /* per gen param (only STATIC_IDX slots used) */
};

/* ---- ledger (device->lock held) ----------------------------------------------------------- */
troupe__entry_t *troupe__ledger_find(troupe_device_t *dev, troupe__akey_t key);
TROUPE_MUST_USE troupe_status_t troupe__ledger_add(troupe_device_t *dev, troupe_tnode_t *tn,
                                                   troupe_buffer_loc_t loc, bool shared,
                                                   troupe__entry_t **out);
void troupe__ledger_remove_pool(troupe_device_t *dev, int32_t pool_id);
void troupe__ledger_clear(troupe_device_t *dev);
void troupe__ledger_prune(troupe__entry_t *e);
void troupe__ledger_tick(troupe_device_t *dev);
TROUPE_MUST_USE troupe_status_t troupe__ledger_before_read(troupe__srec_t *s, troupe__entry_t *e);
TROUPE_MUST_USE troupe_status_t troupe__ledger_before_write(troupe__srec_t *s, troupe__entry_t *e);
TROUPE_MUST_USE troupe_status_t troupe__ledger_note_read(troupe__entry_t *e, troupe__srec_t *s,
                                                         troupe_event_t *ev);
void troupe__ledger_note_write(troupe__entry_t *e, troupe__srec_t *s, troupe_event_t *ev);
/* Events of other streams still reading `e` (retained into *out, count in *n; troupe_free). */
TROUPE_MUST_USE troupe_status_t troupe__ledger_pending(troupe__entry_t *e,
                                                       troupe_event_t ***out, size_t *n);
/* S-expression of the device's ledger appended to a growing string. */
TROUPE_MUST_USE troupe_status_t troupe__ledger_sexp(troupe_device_t *dev, char **buf,
                                                    size_t *len, size_t *cap);
TROUPE_MUST_USE troupe_status_t troupe__sappend(char **buf, size_t *len, size_t *cap,
                                                const char *fmt, ...) TROUPE_PRINTF(4, 5);

/* ---- device pools (device->lock held) ----------------------------------------------------- */
TROUPE_MUST_USE troupe_status_t troupe__pool_alloc(troupe_device_t *dev, int64_t size_bytes,
                                                   int32_t *out_pool_id);
void troupe__pool_free(troupe_device_t *dev, int32_t pool_id);
troupe__srec_t *troupe__srec_of(troupe_device_t *dev, troupe_stream_t *s);
/* The record of a stream made by troupe_new_stream, in any live backend, or NULL (own mutex;
 * call it without a device lock). */
troupe__srec_t *troupe__srec_lookup_global(troupe_stream_t *s);

/* ---- contexts ------------------------------------------------------------------------------ */
/* The array of tn in ctx or NULL. */
/* INVALID_ARGUMENT naming `op` when ctx is a remote context (transfer.h), else OK. */
TROUPE_MUST_USE troupe_status_t troupe__context_check_local(const troupe_context_t *ctx,
                                                            const char *op);
const troupe__carray_t *troupe__context_find(const troupe_context_t *ctx, const troupe_tnode_t *tn);
/* A child of parent whose arrays are parent's plus `extra` (retained copies), owning pool
 * `owned_pool_id` (-1 none) and tagged `merge_node` (NULL: none). */
TROUPE_MUST_USE troupe_status_t troupe__context_derive(troupe_context_t *parent,
                                                       const troupe__carray_t *extra, size_t nextra,
                                                       int32_t owned_pool_id,
                                                       troupe_tnode_t *merge_node,
                                                       troupe_context_t **out);

/* ---- host side of hosted nodes (transfer.c; process-wide table, its own mutex) -------------- */
/* Installs the coherence hooks on a hosted node (idempotent). */
void troupe__host_install_hooks(troupe_tnode_t *tn);
/* The host array's generation (bumped by every host write). */
int64_t troupe__host_gen(const troupe_tnode_t *tn);
/* A device write of tn's array `key` on stream s completes with ev: host reads fetch it. */
TROUPE_MUST_USE troupe_status_t troupe__host_note_device_write(troupe_tnode_t *tn,
                                                               troupe__srec_t *s,
                                                               troupe__akey_t key,
                                                               troupe_event_t *ev);
/* An in-flight transfer reads (h2d) or writes (d2h, is_write) tn's host array until ev
 * completes; host writes wait for all of them. */
TROUPE_MUST_USE troupe_status_t troupe__host_note_user(troupe_tnode_t *tn, troupe_event_t *ev,
                                                       bool is_write);
/* Makes stream s wait for the pending transfers using tn's host array: the writers only
 * (before an h2d reads it), or all of them (before a d2h writes it). Host-array RAW/WAR/WAW. */
TROUPE_MUST_USE troupe_status_t troupe__host_order(troupe_tnode_t *tn, troupe__srec_t *s,
                                                   bool is_write);
/* Forgets everything about the device's arrays (backend teardown). */
void troupe__host_purge_device(troupe_device_t *dev);

/* ---- scheduling helpers (device->lock held) ------------------------------------------------- */
/* from_host of ctx's array of tn, with the ledger rules; *out_ev may be NULL. */
TROUPE_MUST_USE troupe_status_t troupe__from_host_locked(troupe_context_t *ctx, troupe_tnode_t *tn,
                                                         troupe_event_t **out_ev);
/* d2h of array `key` (`loc`) on stream s into tn's host array. */
TROUPE_MUST_USE troupe_status_t troupe__to_host_locked(troupe__srec_t *s, troupe_tnode_t *tn,
                                                       troupe_buffer_loc_t loc,
                                                       troupe_event_t **out_ev);
/* routine_run with the lock held (used by STREAMING). */
TROUPE_MUST_USE troupe_status_t troupe__routine_run_locked(troupe_routine_t *r,
                                                           troupe_event_t **out_ev);

static inline troupe__akey_t troupe__key_of(troupe_buffer_loc_t loc)
{
    troupe__akey_t k = {loc.pool_id, loc.offset};
    return k;
}

#ifdef __cplusplus
}
#endif
#endif
