/* troupe — tensor nodes (seed `Ir.Tnode`).
 *
 * A tnode is an array-valued node of a computation: id, label, precision, dims (with optional
 * padding), a memory mode with provenance, and for hosted nodes a host array. Nodes are
 * registered in a process-wide registry so they can be found by id (text forms refer to
 * nodes by id).
 *
 * Memory modes (ir/memory_mode.h) say where a node lives; each node records its own.
 *
 * Dims are the stored (padded) dims; dims_without_padding subtracts left+right padding.
 * Arrays are dense row-major over the stored dims.
 *
 * Host reads and writes (get_values/set_values...) go through optional coherence hooks
 * installed by the runtime (actors/): prepare_read syncs the node's last writer and copies
 * it to the host; prepare_write waits for in-flight readers of the host array
 * (docs/architecture.md §4). Without hooks the host array is used as is.
 *
 * Thread safety: the registry and memory-mode updates are thread-safe (one internal lock).
 * Reading immutable fields (id, prec, dims, label) is always safe. Host-array access
 * functions are safe against each other for one node; concurrent writers to the same node
 * are the caller's race.
 * Ownership: troupe_tnode_new returns a node with one reference, owned by the caller;
 * troupe_tnode_retain/release manage it; the registry holds no reference (a node leaves
 * the registry when its last reference goes). troupe_tnode_find returns a new reference.
 */
#ifndef TROUPE_IR_TNODE_H
#define TROUPE_IR_TNODE_H

#include "troupe/base/refcount.h"
#include "troupe/base/status.h"
#include "troupe/ir/memory_mode.h"
#include "troupe/ir/prec.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE_MAX_DIMS 8

typedef struct troupe_axis_padding {
    int64_t left, right; /* elements of padding before/after the data on this axis */
} troupe_axis_padding_t;

typedef struct troupe_tnode troupe_tnode_t;

/* Coherence hooks (installed by the runtime for hosted nodes). Each returns a status; a
 * failure is returned by the host access that triggered it. */
typedef struct troupe_tnode_hooks {
    troupe_status_t (*prepare_read)(troupe_tnode_t *tn, void *user);
    troupe_status_t (*prepare_write)(troupe_tnode_t *tn, void *user);
    void *user;
} troupe_tnode_hooks_t;

struct troupe_tnode {
    /* Immutable after creation. */
    int32_t id;                  /* unique, > 0 */
    char **label;                /* label_count strings; the last is the most specific */
    size_t label_count;
    troupe_prec_t prec;
    int ndims;                   /* 0 for a scalar */
    int64_t dims[TROUPE_MAX_DIMS]; /* stored dims, padding included */
    bool has_padding;
    troupe_axis_padding_t padding[TROUPE_MAX_DIMS];
    double padding_value;
    size_t size_bytes;           /* num_elems * prec size */

    /* Guarded by the tnode lock (use the functions). */
    bool has_memory_mode;
    troupe_memory_mode_t memory_mode;
    int32_t provenance;
    void *host;                  /* host array of size_bytes, for hosted nodes (lazily allocated) */
    void (*host_free)(void *);   /* frees host when troupe__tnode_set_host_allocator's allocated it */
    int32_t *devices_not_lagging_host; /* device ids (set semantics) */
    size_t devices_not_lagging_count, devices_not_lagging_cap;
    troupe_tnode_hooks_t hooks;
    char *code_name;             /* identifier chosen by code generation, or NULL */

    troupe_refcount_t refs;
    pthread_mutex_t lock;
};

/* ---- creation and registry --------------------------------------------------------------- */

/* Creates and registers a node with a fresh id. `label` may be NULL (label_count 0);
 * strings are copied. dims: ndims (0..TROUPE_MAX_DIMS) positive sizes. `padding` may be NULL.
 * Errors: INVALID_ARGUMENT (bad prec, void prec, ndims out of range, a dim <= 0, negative
 * padding, padding not smaller than the dim, size overflow) naming the axis;
 * RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_tnode_new(const char *const *label, size_t label_count,
                                                 troupe_prec_t prec, int ndims,
                                                 const int64_t *dims,
                                                 const troupe_axis_padding_t *padding,
                                                 double padding_value, troupe_tnode_t **out);

/* Same with a caller-chosen id (for parsing stored programs). ALREADY_EXISTS if a live node
 * has that id; INVALID_ARGUMENT if id <= 0. Fresh ids continue above the largest id seen. */
TROUPE_MUST_USE troupe_status_t troupe_tnode_new_with_id(int32_t id, const char *const *label,
                                                         size_t label_count, troupe_prec_t prec,
                                                         int ndims, const int64_t *dims,
                                                         const troupe_axis_padding_t *padding,
                                                         double padding_value,
                                                         troupe_tnode_t **out);

void troupe_tnode_retain(troupe_tnode_t *tn);
/* Drops a reference; at zero unregisters and frees (host array included). *tn_p = NULL. */
void troupe_tnode_release(troupe_tnode_t **tn_p);

/* Finds a live node by id (new reference). NOT_FOUND naming the id. */
TROUPE_MUST_USE troupe_status_t troupe_tnode_find(int32_t id, troupe_tnode_t **out);

/* ---- shape ------------------------------------------------------------------------------- */
int64_t troupe_tnode_num_elems(const troupe_tnode_t *tn);
/* Writes ndims dims without padding into out (TROUPE_MAX_DIMS capacity). */
void troupe_tnode_dims_without_padding(const troupe_tnode_t *tn, int64_t *out);
/* "2x3x4" (scalar: "1"); with_axis_numbers: "0:2x1:3x2:4". Writes at most cap bytes,
 * returns the length it needed (snprintf convention). */
size_t troupe_tnode_dims_to_string(const troupe_tnode_t *tn, bool with_axis_numbers, char *buf,
                                   size_t cap);
/* Labels joined by '_' (e.g. "w1_grad"), "n<id>" when there is no label. */
size_t troupe_tnode_label_string(const troupe_tnode_t *tn, char *buf, size_t cap);
/* "n<id>_<label>": unique, for messages and identifiers. */
size_t troupe_tnode_debug_name(const troupe_tnode_t *tn, char *buf, size_t cap);
/* One line: "#<id> <label> <prec> <dims> <memory mode>/<provenance>". */
size_t troupe_tnode_header(const troupe_tnode_t *tn, char *buf, size_t cap);

/* ---- devices not lagging host (seed field) -------------------------------------------- */
TROUPE_MUST_USE troupe_status_t troupe_tnode_mark_not_lagging(troupe_tnode_t *tn,
                                                              int32_t device_id);
bool troupe_tnode_is_not_lagging(troupe_tnode_t *tn, int32_t device_id);
void troupe_tnode_clear_not_lagging(troupe_tnode_t *tn);

/* ---- host values -------------------------------------------------------------------------- */

void troupe_tnode_set_hooks(troupe_tnode_t *tn, const troupe_tnode_hooks_t *hooks);

/* Host array of the node (allocated zero-filled on first use; the node becomes hosted if its
 * mode allows: a Hosted(Unset_hosted) refinement with provenance 30). Returns
 * RESOURCE_EXHAUSTED, or FAILED_PRECONDITION if the node is known Virtual/Local/On_device/
 * Device_only (no host array exists for it). */
TROUPE_MUST_USE troupe_status_t troupe_tnode_host_array(troupe_tnode_t *tn, void **out);

/* All num_elems values as doubles (count must equal num_elems: else INVALID_ARGUMENT giving
 * both counts). Runs prepare_read first. */
TROUPE_MUST_USE troupe_status_t troupe_tnode_get_values(troupe_tnode_t *tn, double *out,
                                                        size_t count);
/* Sets all values, converting to the node's precision (RNE for floats). Runs prepare_write,
 * then refines the mode to Hosted(Nonconstant) (provenance 31; FAILED_PRECONDITION when that is
 * inconsistent, e.g. Virtual) — except that a constant being initialised (Effectively_constant
 * or Hosted Constant) becomes/stays Hosted Constant — and clears devices_not_lagging_host (the
 * host now has the newest data). set_value does the same for one element. */
TROUPE_MUST_USE troupe_status_t troupe_tnode_set_values(troupe_tnode_t *tn, const double *values,
                                                        size_t count);
/* One element at `idx` (ndims indices, bounds-checked: INVALID_ARGUMENT naming the axis). */
TROUPE_MUST_USE troupe_status_t troupe_tnode_get_value(troupe_tnode_t *tn, const int64_t *idx,
                                                       double *out);
TROUPE_MUST_USE troupe_status_t troupe_tnode_set_value(troupe_tnode_t *tn, const int64_t *idx,
                                                       double value);
/* Seed points_1d (without from_axis): the values flattened row-major, for plotting: out gets
 * the first min(cap, num_elems) values; *out_count set. Runs prepare_read first. */
TROUPE_MUST_USE troupe_status_t troupe_tnode_points_1d(troupe_tnode_t *tn, double *out,
                                                       size_t cap, size_t *out_count);
/* Seed points_2d: pairs (x,y) taken from the last axis at positions xdim and ydim for every
 * other index; out holds 2*cap doubles; *out_count pairs written.
 * INVALID_ARGUMENT if xdim/ydim are outside the last axis (a scalar has a last axis of 1).
 * Runs prepare_read first. */
TROUPE_MUST_USE troupe_status_t troupe_tnode_points_2d(troupe_tnode_t *tn, int64_t xdim,
                                                       int64_t ydim, double *out, size_t cap,
                                                       size_t *out_count);

#ifdef __cplusplus
}
#endif
#endif
