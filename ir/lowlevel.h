/* troupe — the low-level IR (OCANNL `Low_level.t`, OCANNL_NOTES §6.2): loops, sets and
 * scalar expressions over tensor nodes, the form that code generators and the interpreter
 * consume.
 *
 * A procedure (troupe_ll_proc_t) owns an arena from which every statement (troupe_ll_t),
 * scalar (troupe_sc_t) and index array is allocated; destroying the procedure frees them all.
 * It also owns a symbol table (loop iterators and static index symbols) and holds one
 * reference to every tnode its code mentions (proc->nodes, sorted by id).
 *
 * Indices: every axis index is an affine combination `sum(coeff_k * sym_k) + offset` of
 * symbols; a fixed index has no terms, a plain iterator one term with coeff 1.
 * Arrays are dense row-major over the tnode's stored dims.
 *
 * Builders (troupe_ll_*, troupe_sc_*) never fail loudly: on allocation failure they return
 * NULL and make the procedure sticky-failed; troupe_ll_proc_status() reports it, and
 * troupe_ll_proc_validate() checks the whole tree (symbols defined, index arity matching
 * each node's ndims, every index provably within bounds over the loop ranges and static
 * symbol ranges, local scopes well nested, at most one merge-buffer node).
 *
 * Thread safety: a procedure is not thread-safe while being built or optimized; once done it
 * may be read (interpreted, printed, code-generated) from several threads.
 * Ownership: troupe_ll_proc_new -> caller owns; troupe_ll_proc_destroy frees and releases
 * the tnodes. Builders copy index arrays and strings into the arena and retain tnodes.
 */
#ifndef TROUPE_IR_LOWLEVEL_H
#define TROUPE_IR_LOWLEVEL_H

#include "troupe/base/status.h"
#include "troupe/ir/ops.h"
#include "troupe/ir/prec.h"
#include "troupe/ir/tnode.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE_MAX_INDEX_TERMS 4

typedef struct troupe_index_term {
    int64_t coeff;
    int32_t sym;
} troupe_index_term_t;

/* sum(terms[k].coeff * value(terms[k].sym)) + offset */
typedef struct troupe_axis_index {
    int nterms;
    troupe_index_term_t terms[TROUPE_MAX_INDEX_TERMS];
    int64_t offset;
} troupe_axis_index_t;

static inline troupe_axis_index_t troupe_idx_fixed(int64_t i)
{
    troupe_axis_index_t x = {0, {{0, 0}}, i};
    return x;
}
static inline troupe_axis_index_t troupe_idx_sym(int32_t sym)
{
    troupe_axis_index_t x = {1, {{1, sym}}, 0};
    return x;
}

typedef struct troupe_ll_symbol {
    char *name;           /* printed name; iterators default to "i<id>" */
    bool is_static;       /* a static index symbol: value bound at call time */
    int64_t static_range; /* static symbols: valid values 0..static_range-1 (0 = unbounded) */
} troupe_ll_symbol_t;

typedef enum troupe_ll_kind {
    TROUPE_LL_NOOP = 0,
    TROUPE_LL_COMMENT,
    TROUPE_LL_SEQ,
    TROUPE_LL_FOR,
    TROUPE_LL_ZERO_OUT,
    TROUPE_LL_SET,
    TROUPE_LL_SET_FROM_VEC,
    TROUPE_LL_SET_LOCAL,
    TROUPE_LL_BIND_INDEX,
} troupe_ll_kind_t;

typedef enum troupe_sc_kind {
    TROUPE_SC_LOCAL_SCOPE = 0,
    TROUPE_SC_GET_LOCAL,
    TROUPE_SC_GET,
    TROUPE_SC_GET_MERGE_BUFFER,
    TROUPE_SC_TERNOP,
    TROUPE_SC_BINOP,
    TROUPE_SC_UNOP,
    TROUPE_SC_CONSTANT,
    TROUPE_SC_CONSTANT_BITS,
    TROUPE_SC_EMBED_INDEX,
} troupe_sc_kind_t;

typedef struct troupe_ll troupe_ll_t;
typedef struct troupe_sc troupe_sc_t;

/* A scalar expression. Its precision is that of the context it is used in (the node being
 * set, or a local scope's node); Get reads in the read node's precision and code
 * generators convert (ir/prec rules, seed `c_convert_precision`). */
struct troupe_sc {
    troupe_sc_kind_t kind;
    union {
        struct {
            int32_t id;           /* scope id, unique within the procedure */
            troupe_tnode_t *tn;   /* the inlined (virtual) node: gives name and precision */
            troupe_ll_t *body;    /* sets the scope's value with SET_LOCAL(id, ...) */
            troupe_axis_index_t *orig_indices; /* tn->ndims indices it was inlined at */
        } local_scope;
        struct {
            int32_t id;
        } get_local;
        struct {
            troupe_tnode_t *tn;
            troupe_axis_index_t *idcs; /* tn->ndims entries */
        } get;                         /* GET and GET_MERGE_BUFFER */
        struct {
            int op;                    /* troupe_ternop_t / troupe_binop_t / troupe_unop_t */
            troupe_sc_t *args[3];      /* 3 / 2 / 1 used */
        } op;
        double constant;
        int64_t constant_bits;
        troupe_axis_index_t embed_index;
    } u;
};

struct troupe_ll {
    troupe_ll_kind_t kind;
    union {
        const char *comment;
        struct {
            size_t count;
            troupe_ll_t **items;
        } seq;
        struct {
            int32_t sym;
            int64_t from, to; /* inclusive bounds, as OCANNL */
            troupe_ll_t *body;
            bool trace_it;
        } for_loop;
        troupe_tnode_t *zero_out;
        struct {
            troupe_tnode_t *tn;
            troupe_axis_index_t *idcs;
            troupe_sc_t *value;
        } set;
        struct {
            troupe_tnode_t *tn;
            troupe_axis_index_t *idcs; /* index of the first of `length` consecutive elements
                                          along the last axis */
            int length;                /* 16 / 8 / 4 / 2 elements per uint4x32 (OCANNL §6.1) */
            troupe_vec_unop_t op;
            troupe_sc_t *arg;          /* a uint4x32 value */
        } set_from_vec;
        struct {
            int32_t id;
            troupe_sc_t *value;
        } set_local;
        /* A data-dependent index (a gather, ir/projection.h): runs body with loop symbol `sym`
         * bound to tn[idcs] read as int64. The value must lie in 0..range-1 (range is the dim
         * of axis `axis` of `table`, the node the index selects in): the interpreter and the
         * generated code check every bind of a procedure before its first write, and fail the
         * run naming tn, the cell and the value. tn is an integer node (or a float one holding
         * integers) and is not written by the procedure. */
        struct {
            int32_t sym;
            troupe_tnode_t *tn;
            troupe_axis_index_t *idcs; /* tn->ndims entries, over enclosing loop symbols */
            int64_t range;
            troupe_tnode_t *table; /* for messages; may be NULL */
            int axis;
            troupe_ll_t *body;
        } bind_index;
    } u;
};

/* Per-node facts found by tracing (OCANNL `traced_array`), filled by troupe_ll_optimize. */
typedef struct troupe_ll_traced {
    troupe_tnode_t *tn;
    int64_t assignments;      /* SET / SET_FROM_VEC / ZERO_OUT statements writing the node */
    int64_t max_visits;       /* most reads of one element in one execution */
    bool zero_initialized;    /* zeroed before any other write */
    bool zeroed_out;          /* ZERO_OUT appears */
    bool read_before_write;   /* some element is read before it is written (recurrent) */
    bool read_only;           /* never written in this procedure */
    bool is_scalar_constexpr; /* all dims 1, assigned once from constants */
    bool is_accessing;        /* read at all */
    bool is_complex;          /* its computation has nested loops/reductions */
    bool iteration_scalar;    /* held in a scalar per iteration of its one loop (Local;
                                 compiler/optimize.h step 4c) */
} troupe_ll_traced_t;

typedef struct troupe_arena troupe_arena_t;

typedef struct troupe_ll_proc {
    char *name;
    troupe_arena_t *arena;
    troupe_ll_t *body;

    troupe_ll_symbol_t *syms; /* nsyms entries; symbol ids are indices */
    int32_t nsyms;
    size_t syms_cap;

    troupe_tnode_t **nodes;   /* every node mentioned, retained, sorted by id */
    size_t nnodes, nodes_cap;

    int32_t next_scope_id;
    troupe_status_t sticky;   /* first builder failure */

    /* Filled by troupe_ll_optimize (compiler/optimize.h); all arrays sorted by node id. */
    bool optimized;
    troupe_ll_traced_t *traced; /* nnodes entries, aligned with nodes */
    troupe_tnode_t **inputs;    /* materialized non-constant nodes read (before written) */
    size_t ninputs;
    troupe_tnode_t **outputs;   /* materialized nodes written */
    size_t noutputs;
    troupe_tnode_t *merge_node; /* the node read through GET_MERGE_BUFFER, or NULL */
} troupe_ll_proc_t;

/* ---- procedures --------------------------------------------------------------------------- */

/* New empty procedure named `name` (a C identifier: [A-Za-z_][A-Za-z0-9_]*, else
 * INVALID_ARGUMENT). Body starts as NOOP. */
TROUPE_MUST_USE troupe_status_t troupe_ll_proc_new(const char *name, troupe_ll_proc_t **out);
void troupe_ll_proc_destroy(troupe_ll_proc_t **proc_p);
/* The first builder failure (RESOURCE_EXHAUSTED / INVALID_ARGUMENT) or OK. */
troupe_status_t troupe_ll_proc_status(const troupe_ll_proc_t *proc);
/* Checks the tree as described at the top of this header. INVALID_ARGUMENT naming the node,
 * axis and the offending index range on failure. */
TROUPE_MUST_USE troupe_status_t troupe_ll_proc_validate(const troupe_ll_proc_t *proc);

/* Adds a loop iterator symbol (name NULL -> "i<id>") / a static index symbol with its range
 * (values 0..range-1; 0 = unbounded). Returns the symbol id, or -1 on failure (sticky). */
int32_t troupe_ll_proc_add_symbol(troupe_ll_proc_t *proc, const char *name);
int32_t troupe_ll_proc_add_static_symbol(troupe_ll_proc_t *proc, const char *name, int64_t range);
/* Symbol id by name, -1 if none. */
int32_t troupe_ll_proc_find_symbol(const troupe_ll_proc_t *proc, const char *name);
/* Fresh local-scope id. */
int32_t troupe_ll_proc_new_scope_id(troupe_ll_proc_t *proc);
/* Records (retains) tn in proc->nodes; builders call it. Index in nodes, -1 on failure. */
ptrdiff_t troupe_ll_proc_add_node(troupe_ll_proc_t *proc, troupe_tnode_t *tn);
/* Index of tn in proc->nodes or -1. */
ptrdiff_t troupe_ll_proc_node_index(const troupe_ll_proc_t *proc, const troupe_tnode_t *tn);

/* Arena allocation tied to the procedure's lifetime (zeroed). NULL on failure (sticky). */
void *troupe_ll_alloc(troupe_ll_proc_t *proc, size_t size_bytes);
char *troupe_ll_strdup(troupe_ll_proc_t *proc, const char *s);

/* ---- statement builders (NULL on failure) -------------------------------------------------- */
troupe_ll_t *troupe_ll_noop(troupe_ll_proc_t *proc);
troupe_ll_t *troupe_ll_comment(troupe_ll_proc_t *proc, const char *text);
/* Flattens nested SEQs and drops NOOPs; count 0 gives NOOP, count 1 the item itself. */
troupe_ll_t *troupe_ll_seq(troupe_ll_proc_t *proc, size_t count, troupe_ll_t *const *items);
troupe_ll_t *troupe_ll_seq2(troupe_ll_proc_t *proc, troupe_ll_t *a, troupe_ll_t *b);
troupe_ll_t *troupe_ll_for(troupe_ll_proc_t *proc, int32_t sym, int64_t from, int64_t to,
                           troupe_ll_t *body, bool trace_it);
troupe_ll_t *troupe_ll_zero_out(troupe_ll_proc_t *proc, troupe_tnode_t *tn);
troupe_ll_t *troupe_ll_set(troupe_ll_proc_t *proc, troupe_tnode_t *tn,
                           const troupe_axis_index_t *idcs, troupe_sc_t *value);
troupe_ll_t *troupe_ll_set_from_vec(troupe_ll_proc_t *proc, troupe_tnode_t *tn,
                                    const troupe_axis_index_t *idcs, int length,
                                    troupe_vec_unop_t op, troupe_sc_t *arg);
troupe_ll_t *troupe_ll_set_local(troupe_ll_proc_t *proc, int32_t scope_id, troupe_sc_t *value);
/* BIND_INDEX: body with loop symbol `sym` = tn[idcs], checked within 0..range-1 (range >= 1);
 * `table` and `axis` name where the index selects, for messages (table may be NULL). */
troupe_ll_t *troupe_ll_bind_index(troupe_ll_proc_t *proc, int32_t sym, troupe_tnode_t *tn,
                                  const troupe_axis_index_t *idcs, int64_t range,
                                  troupe_tnode_t *table, int axis, troupe_ll_t *body);
/* Whether the tree (local-scope bodies included) holds a BIND_INDEX. */
bool troupe_ll_has_bind_index(const troupe_ll_t *s);
/* The failure of a gather index out of range (or fractional): INVALID_ARGUMENT with
 * "gather: <index>[<cell>] = <value> is outside 0..<range-1> of <table>'s axis <axis>"
 * (`table` NULL: "of the gathered axis"). `cell` holds ndims indices. */
TROUPE_MUST_USE troupe_status_t troupe_ll_gather_failure(const char *index_name, int ndims,
                                                         const int64_t *cell, double value,
                                                         int64_t range, const char *table_name,
                                                         int axis);
/* Whether the tree (local-scope bodies included) writes tn (SET, SET_FROM_VEC, ZERO_OUT). */
bool troupe_ll_writes(const troupe_ll_t *s, const troupe_tnode_t *tn);

/* ---- scalar builders (NULL on failure) ----------------------------------------------------- */
troupe_sc_t *troupe_sc_local_scope(troupe_ll_proc_t *proc, int32_t scope_id, troupe_tnode_t *tn,
                                   troupe_ll_t *body, const troupe_axis_index_t *orig_indices);
troupe_sc_t *troupe_sc_get_local(troupe_ll_proc_t *proc, int32_t scope_id);
troupe_sc_t *troupe_sc_get(troupe_ll_proc_t *proc, troupe_tnode_t *tn,
                           const troupe_axis_index_t *idcs);
troupe_sc_t *troupe_sc_get_merge_buffer(troupe_ll_proc_t *proc, troupe_tnode_t *tn,
                                        const troupe_axis_index_t *idcs);
troupe_sc_t *troupe_sc_ternop(troupe_ll_proc_t *proc, troupe_ternop_t op, troupe_sc_t *a,
                              troupe_sc_t *b, troupe_sc_t *c);
troupe_sc_t *troupe_sc_binop(troupe_ll_proc_t *proc, troupe_binop_t op, troupe_sc_t *a,
                             troupe_sc_t *b);
troupe_sc_t *troupe_sc_unop(troupe_ll_proc_t *proc, troupe_unop_t op, troupe_sc_t *a);
troupe_sc_t *troupe_sc_constant(troupe_ll_proc_t *proc, double c);
troupe_sc_t *troupe_sc_constant_bits(troupe_ll_proc_t *proc, int64_t bits);
troupe_sc_t *troupe_sc_embed_index(troupe_ll_proc_t *proc, troupe_axis_index_t idx);

/* ---- utilities ---------------------------------------------------------------------------- */
/* Structural equality of two trees (symbols by id, nodes by id, constants bitwise). */
bool troupe_ll_equal(const troupe_ll_t *a, const troupe_ll_t *b);
bool troupe_sc_equal(const troupe_sc_t *a, const troupe_sc_t *b);
bool troupe_axis_index_equal(const troupe_axis_index_t *a, const troupe_axis_index_t *b);
/* Whether the n indices a[0..n-1] and b[0..n-1] (an access's, one per axis) are equal, each as
 * troupe_axis_index_equal. */
bool troupe_axis_indices_equal(const troupe_axis_index_t *a, const troupe_axis_index_t *b, int n);
/* Whether any of the n indices idcs[0..n-1] has a term in `sym` with a nonzero coefficient. */
bool troupe_axis_indices_use(const troupe_axis_index_t *idcs, int n, int32_t sym);
/* Deep copy of a subtree into `dst` (nodes are added to dst->nodes; symbol ids kept, so the
 * caller must ensure dst has them). NULL on failure. */
troupe_ll_t *troupe_ll_copy(troupe_ll_proc_t *dst, const troupe_ll_t *src);
troupe_sc_t *troupe_sc_copy(troupe_ll_proc_t *dst, const troupe_sc_t *src);

#ifdef __cplusplus
}
#endif
#endif
