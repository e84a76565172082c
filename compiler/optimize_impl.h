/* troupe — what the optimiser's passes share (internal; not installed): the per-procedure
 * context they read and fill, and the helpers more than one pass uses.
 *
 * The driver (compiler/optimize.c) builds the context, runs the passes in order and turns the
 * facts into memory modes:
 *   compiler/trace.c       step 1: static scan, concrete tracing, constant expressions and
 *                          complexity (OCANNL visit_llc, is_constexpr_comp, is_complex_comp);
 *   compiler/optimize.c    step 2: memory-mode inference (visit_llc's epilogue);
 *   compiler/virtualize.c  step 3: definition units, stability, inlining (virtual_llc,
 *                          check_and_store_virtual, inline_computation, cleanup_virtual_llc);
 *   compiler/simplify.c    step 4: folding and algebraic rewrites (simplify_llc);
 *   compiler/fuse.c        step 4b: loop fusion of adjacent pointwise nests (compiler/fuse.h);
 *   compiler/optimize.c    step 5: placeholders resolved, inputs and outputs.
 * All rewriting is functional (new statements from the procedure's arena; unchanged subtrees are
 * shared), so a failed attempt can be dropped and retried.
 *
 * Thread safety: a context belongs to one troupe_ll_optimize call.
 * Ownership: the context owns its arrays (freed by the driver); statements belong to the
 * procedure's arena.
 */
#ifndef TROUPE_COMPILER_OPTIMIZE_IMPL_H
#define TROUPE_COMPILER_OPTIMIZE_IMPL_H

#include "base/alloc.h"
#include "base/vec.h"
#include "compiler/optimize.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable array of T: `at` holds n elements of cap (base/vec.h grows it). */
#define TROUPE__OPT_VEC(T)                                                                         \
    struct {                                                                                       \
        T *at;                                                                                     \
        size_t n, cap;                                                                             \
    }
#define TROUPE__OPT_PUSH(vec, item) TROUPE__VEC_PUSH((vec).at, (vec).n, (vec).cap, item)
#define TROUPE__OPT_VEC_FREE(vec) (troupe_free((vec).at), (vec).at = NULL, (vec).n = (vec).cap = 0)

/* Item positions (indices into troupe__opt_ctx_t.items), increasing. */
typedef TROUPE__OPT_VEC(size_t) troupe__opt_pos_t;

/* Per-node cell map of the tracing walk: flat offset -> visits, assigned (open addressing). */
typedef struct troupe__opt_elem {
    int64_t key1; /* flat offset + 1; 0 = empty slot */
    int64_t visits;
    bool assigned;
} troupe__opt_elem_t;

typedef struct troupe__opt_emap {
    troupe__opt_elem_t *slots;
    size_t cap, count;
} troupe__opt_emap_t;

/* Nodes of at most this many elements keep their cells in a dense array (one int64 per cell:
 * visits * 2 + assigned) instead of the map, when the walk is full (a full walk executes at
 * most max_trace_steps statements, so a large node's cells are mostly untouched and calloc's
 * zero pages stay unmapped) or when the node is small. 32 MiB at most per node. */
#define TROUPE__OPT_DENSE_MAX_CELLS ((int64_t)1 << 22)
#define TROUPE__OPT_DENSE_SAMPLED_CELLS ((int64_t)1 << 12)

/* Virtualisation state of a candidate node. */
enum { TROUPE__OPT_NOT_CANDIDATE = 0, TROUPE__OPT_ACCEPTED, TROUPE__OPT_REJECTED };

/* A node an inlined definition reads, and the first item from which it must not change. */
typedef struct troupe__opt_read {
    size_t node;
    size_t start;
} troupe__opt_read_t;

/* The cost at which a node's definition stops being cheap (compiler/optimize.h, step 2). */
#define TROUPE__OPT_CHEAP_OPS 8
#define TROUPE__OPT_COST_MAX 1000000

typedef struct troupe__opt_node {
    /* static scan (trace.c) */
    troupe__opt_pos_t wpos; /* items writing the node */
    troupe__opt_pos_t rpos; /* items reading it with GET */
    bool external_read, merge_read, vec_write;
    bool gather_access; /* read or written under a BIND_INDEX, or its index node */
    /* tracing (trace.c): the cells in `dense` (allocated at the first access) when
     * dense_ok, else in `elems` */
    troupe__opt_emap_t elems;
    int64_t *dense;
    bool dense_ok;
    int64_t n_assign_exec;
    bool any_access, read_before_first_assign;
    const troupe_sc_t *first_value;
    bool first_is_zero, first_is_vec;
    int constexpr_state; /* 0 unknown, 1 in progress, 2 yes, 3 no */
    int64_t cost;        /* operations of the SETs writing it (TROUPE__OPT_COST_MAX: too costly
                            to recompute at each read: transcendental, local scope, vector) */
    int64_t chain_cost;  /* cost plus, for each node its definition reads that is likely
                            inlined, that node's chain_cost and one load (trace.c) */
    /* definition units (virtualize.c) */
    TROUPE__OPT_VEC(const troupe_axis_index_t *) unit_I; /* per wpos entry, NULL for ZERO_OUT */
    bool struct_ok, has_reduction;
    int32_t reason;
    /* decisions (optimize.c step 2, virtualize.c) */
    bool constexpr_wanted;
    int state;
    int32_t reject_reason;
    TROUPE__OPT_VEC(troupe__opt_read_t) R; /* what its inlined definition reads */
    TROUPE__OPT_VEC(troupe_ll_t *) stored; /* rewritten units */
} troupe__opt_node_t;

typedef struct troupe__opt_ctx {
    troupe_ll_proc_t *proc;
    troupe_optimize_opts_t o;
    size_t nn;
    troupe_tnode_t **tns;       /* snapshot of proc->nodes (sorted by id) */
    int32_t *by_id;             /* id - id_lo -> index in tns or -1 (NULL: binary search) */
    int32_t id_lo;
    size_t id_span;
    bool reference;             /* troupe__opt_set_reference was on when the call began */
    troupe_ll_traced_t *traced; /* nn */
    troupe__opt_node_t *nd;     /* nn */
    troupe_ll_t **items;        /* the top-level items of the body */
    size_t nitems;
    troupe__opt_pos_t *item_reads; /* per item: node indices read with GET */
    size_t *item_nwriters;
    size_t *item_writer; /* the first node written by the item */
    int64_t *env;        /* symbol values while tracing */
    int32_t env_syms;
    bool sampled;
    int in_bind; /* static scan: BIND_INDEX statements around the current one */
    troupe_tnode_t *merge;
} troupe__opt_ctx_t;

/* ---- the reference implementation and phase times (compiler/optimize.c) ------------------ */

/* Process-wide debug switch: while on, troupe_ll_optimize calls that begin trace with the
 * original data structures (an open-addressing map of cells for every node, a binary search
 * for node lookups, symbol kinds checked at every index read) instead of the faster ones
 * (dense cell arrays, a direct node table). Both must give byte-identical results: tests and
 * bench_compile compare them. Returns the previous setting. Thread-safe (atomic). */
bool troupe__opt_set_reference(bool on);

/* Wall-clock nanoseconds of the phases of the calling thread's last troupe_ll_optimize. */
typedef struct troupe__opt_times {
    int64_t setup_ns, trace_ns, units_ns, infer_ns, virtualize_ns, simplify_ns, fuse_ns,
        finish_ns, total_ns;
} troupe__opt_times_t;
void troupe__opt_last_times(troupe__opt_times_t *out);

/* ---- shared helpers (compiler/optimize.c) ------------------------------------------------- */

/* RESOURCE_EXHAUSTED "out of memory optimizing a procedure". */
troupe_status_t troupe__opt_oom(void);
/* The procedure's sticky builder failure (or RESOURCE_EXHAUSTED), naming it. */
troupe_status_t troupe__opt_proc_oom(const troupe_ll_proc_t *proc);
/* Index of tn in c->tns, or -1 (the direct table when there is one, else a binary search). */
ptrdiff_t troupe__opt_node_of(const troupe__opt_ctx_t *c, const troupe_tnode_t *tn);
/* A memory mode without sharing. */
troupe_memory_mode_t troupe__opt_mode(troupe_memory_mode_kind_t kind, troupe_memory_type_t memtype);
/* Refines tn's mode; an inconsistency is re-recorded with the procedure and `why`. */
TROUPE_MUST_USE troupe_status_t troupe__opt_update(const troupe__opt_ctx_t *c, troupe_tnode_t *tn,
                                                   troupe_memory_mode_t m, int32_t prov,
                                                   const char *why);
/* Rebuilding after a rewrite: the for loop s with body b, or the set, set_from_vec or
 * set_local s with value v. s itself when the part is unchanged, NULL when it is NULL (a
 * failure). */
troupe_ll_t *troupe__opt_with_body(troupe_ll_proc_t *proc, troupe_ll_t *s, troupe_ll_t *b);
troupe_ll_t *troupe__opt_with_value(troupe_ll_proc_t *proc, troupe_ll_t *s, troupe_sc_t *v);
/* The same for the BIND_INDEX s with body b. */
troupe_ll_t *troupe__opt_with_bind_body(troupe_ll_proc_t *proc, troupe_ll_t *s, troupe_ll_t *b);

/* ---- the passes --------------------------------------------------------------------------- */

/* Step 1 (trace.c): fills c->traced and the scan and tracing fields of c->nd. */
TROUPE_MUST_USE troupe_status_t troupe__opt_trace(troupe__opt_ctx_t *c);
/* Step 4c (scalars.c): the iteration scalars, made Local with c->traced[i].iteration_scalar. */
TROUPE_MUST_USE troupe_status_t troupe__opt_iteration_scalars(troupe__opt_ctx_t *c);
/* Step 3a (virtualize.c): the definition units of every written node (struct_ok, reason,
 * unit_I); a reduction around a definition makes the node's computation complex. */
TROUPE_MUST_USE troupe_status_t troupe__opt_find_units(troupe__opt_ctx_t *c);
/* Steps 3b-3c (virtualize.c): chooses the nodes to inline, rewrites proc->body and records
 * Virtual / Never_virtual modes. */
TROUPE_MUST_USE troupe_status_t troupe__opt_virtualize(troupe__opt_ctx_t *c);
/* Step 4 (simplify.c): the simplified body of proc into *out (proc->body unchanged). */
TROUPE_MUST_USE troupe_status_t troupe__opt_simplify(troupe_ll_proc_t *proc,
                                                     const troupe_optimize_opts_t *o,
                                                     troupe_ll_t **out);

#endif
