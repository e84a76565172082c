/* troupe — the low-level optimiser (OCANNL optimize_proc): tracing, memory-mode inference,
 * virtualisation (inlining of per-cell computations) and simplification. See compiler/optimize.h for
 * the rules and their OCANNL sources; this file only implements them.
 *
 * Structure: s_scan_* is a static walk of the top-level items (who writes/reads what, where);
 * s_tr_* is the concrete tracing walk; s_us_* checks definition units; s_rw_* / s_cp_* rewrite
 * the body, inlining virtual nodes; s_simp_* simplifies. All rewriting is functional (new
 * statements from the procedure's arena; unchanged subtrees are shared), so a failed attempt
 * can be dropped and retried. */
#include "compiler/optimize.h"

#include "base/alloc.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define S_MAX_DEPTH 64

/* ---- small growable vectors --------------------------------------------------------------- */

typedef struct s_vec {
    void *data;
    size_t n, cap;
} s_vec_t;

static bool s_vec_push(s_vec_t *v, size_t esz, const void *x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        void *d = troupe_realloc(v->data, cap * esz);
        if (d == NULL)
            return false;
        v->data = d;
        v->cap = cap;
    }
    memcpy((char *)v->data + v->n * esz, x, esz);
    v->n++;
    return true;
}

static void s_vec_free(s_vec_t *v)
{
    troupe_free(v->data);
    v->data = NULL;
    v->n = v->cap = 0;
}

#define S_AT(v, T, i) (((T *)(v).data)[i])

/* ---- per-node cell map (flat offset -> visits, assigned) ----------------------------------- */

typedef struct s_elem {
    int64_t key1; /* flat offset + 1; 0 = empty slot */
    int64_t visits;
    bool assigned;
} s_elem_t;

typedef struct s_emap {
    s_elem_t *slots;
    size_t cap, count;
} s_emap_t;

static size_t s_hash(int64_t key, size_t mask)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & mask;
}

static s_elem_t *s_emap_get(s_emap_t *m, int64_t key)
{
    if ((m->count + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        s_elem_t *slots = troupe_calloc(cap, sizeof *slots);
        if (slots == NULL)
            return NULL;
        for (size_t i = 0; i < m->cap; i++) {
            if (m->slots[i].key1 == 0)
                continue;
            size_t j = s_hash(m->slots[i].key1 - 1, cap - 1);
            while (slots[j].key1 != 0)
                j = (j + 1) & (cap - 1);
            slots[j] = m->slots[i];
        }
        troupe_free(m->slots);
        m->slots = slots;
        m->cap = cap;
    }
    size_t mask = m->cap - 1, i = s_hash(key, mask);
    while (m->slots[i].key1 != 0 && m->slots[i].key1 != key + 1)
        i = (i + 1) & mask;
    if (m->slots[i].key1 == 0) {
        m->slots[i].key1 = key + 1;
        m->count++;
    }
    return &m->slots[i];
}

/* ---- context ------------------------------------------------------------------------------ */

enum { S_NOT_CANDIDATE = 0, S_ACCEPTED, S_REJECTED };

typedef struct s_read {
    size_t node;  /* node index */
    size_t start; /* first item from which it must not change */
} s_read_t;

typedef struct s_node {
    /* static scan */
    s_vec_t wpos; /* size_t: items writing the node, increasing */
    s_vec_t rpos; /* size_t: items reading it with GET, increasing */
    bool external_read, merge_read, vec_write;
    /* tracing */
    s_emap_t elems;
    int64_t n_assign_exec;
    bool any_access, read_before_first_assign;
    const troupe_sc_t *first_value;
    bool first_is_zero, first_is_vec;
    int constexpr_state; /* 0 unknown, 1 in progress, 2 yes, 3 no */
    /* definition units */
    s_vec_t unit_I; /* const troupe_axis_index_t *: per wpos entry, NULL for ZERO_OUT */
    bool struct_ok, has_reduction;
    int32_t reason;
    /* decisions */
    bool constexpr_wanted;
    int state;
    int32_t reject_reason;
    s_vec_t R;      /* s_read_t: what its inlined definition reads */
    s_vec_t stored; /* troupe_ll_t *: rewritten units */
} s_node_t;

typedef struct s_ctx {
    troupe_ll_proc_t *proc;
    troupe_optimize_opts_t o;
    size_t nn;
    troupe_tnode_t **tns;       /* snapshot of proc->nodes (sorted by id) */
    troupe_ll_traced_t *traced; /* nn */
    s_node_t *nd;               /* nn */
    troupe_ll_t **items;
    size_t nitems;
    s_vec_t *item_reads; /* per item: size_t node indices read with GET */
    size_t *item_nwriters;
    size_t *item_writer; /* the first node written by the item */
    int64_t *env;        /* symbol values while tracing */
    int32_t env_syms;
    bool sampled;
    troupe_tnode_t *merge;
} s_ctx_t;

static troupe_status_t s_oom(void)
{
    return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory optimizing a procedure");
}

static troupe_status_t s_proc_oom(const troupe_ll_proc_t *proc)
{
    return troupe__error(
        proc->sticky != TROUPE_OK ? proc->sticky : TROUPE_RESOURCE_EXHAUSTED,
        "procedure %s: building optimized code failed (%s)", proc->name,
        troupe_status_str(proc->sticky != TROUPE_OK ? proc->sticky : TROUPE_RESOURCE_EXHAUSTED));
}

static ptrdiff_t s_node_of(const s_ctx_t *c, const troupe_tnode_t *tn)
{
    size_t lo = 0, hi = c->nn;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->tns[mid]->id < tn->id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->nn && c->tns[lo] == tn ? (ptrdiff_t)lo : -1;
}

static troupe_status_t s_unknown_node(const s_ctx_t *c, const troupe_tnode_t *tn)
{
    return troupe__error(TROUPE_INTERNAL, "procedure %s: node #%d is not in its node list",
                         c->proc->name, tn ? tn->id : -1);
}

static bool s_idcs_eq(const troupe_axis_index_t *a, const troupe_axis_index_t *b, int n)
{
    for (int i = 0; i < n; i++)
        if (!troupe_axis_index_equal(&a[i], &b[i]))
            return false;
    return true;
}

static bool s_scalar_dims(const troupe_tnode_t *tn)
{
    for (int a = 0; a < tn->ndims; a++)
        if (tn->dims[a] != 1)
            return false;
    return true;
}

static bool s_push_pos(s_vec_t *v, size_t item)
{
    if (v->n > 0 && S_AT(*v, size_t, v->n - 1) == item)
        return true;
    return s_vec_push(v, sizeof item, &item);
}

static bool s_contains_pos(const s_vec_t *v, size_t item)
{
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (S_AT(*v, size_t, mid) < item)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < v->n && S_AT(*v, size_t, lo) == item;
}

/* ---- step 1a: static scan of the top-level items ------------------------------------------- */

typedef struct s_self {
    const troupe_tnode_t *tn;
    const troupe_axis_index_t *idcs;
} s_self_t;

static bool s_is_self(s_self_t self, const troupe_tnode_t *tn, const troupe_axis_index_t *idcs)
{
    return self.tn == tn && s_idcs_eq(self.idcs, idcs, tn->ndims);
}

static troupe_status_t s_note_write(s_ctx_t *c, size_t item, const troupe_tnode_t *tn)
{
    ptrdiff_t i = s_node_of(c, tn);
    if (i < 0)
        return s_unknown_node(c, tn);
    c->traced[i].assignments++;
    s_vec_t *w = &c->nd[i].wpos;
    if (w->n == 0 || S_AT(*w, size_t, w->n - 1) != item) {
        if (!s_vec_push(w, sizeof item, &item))
            return s_oom();
        if (c->item_nwriters[item]++ == 0)
            c->item_writer[item] = (size_t)i;
    }
    return TROUPE_OK;
}

static troupe_status_t s_scan_sc(s_ctx_t *c, size_t item, const troupe_sc_t *e, s_self_t self);

static troupe_status_t s_scan_ll(s_ctx_t *c, size_t item, const troupe_ll_t *s, s_self_t self)
{
    switch (s->kind) {
    case TROUPE_LL_NOOP:
    case TROUPE_LL_COMMENT:
        return TROUPE_OK;
    case TROUPE_LL_SEQ:
        for (size_t k = 0; k < s->u.seq.count; k++)
            TROUPE_RETURN_IF_ERROR(s_scan_ll(c, item, s->u.seq.items[k], self));
        return TROUPE_OK;
    case TROUPE_LL_FOR:
        return s_scan_ll(c, item, s->u.for_loop.body, self);
    case TROUPE_LL_ZERO_OUT:
        return s_note_write(c, item, s->u.zero_out);
    case TROUPE_LL_SET: {
        TROUPE_RETURN_IF_ERROR(s_note_write(c, item, s->u.set.tn));
        s_self_t me = {s->u.set.tn, s->u.set.idcs};
        return s_scan_sc(c, item, s->u.set.value, me);
    }
    case TROUPE_LL_SET_FROM_VEC: {
        TROUPE_RETURN_IF_ERROR(s_note_write(c, item, s->u.set_from_vec.tn));
        c->nd[s_node_of(c, s->u.set_from_vec.tn)].vec_write = true;
        s_self_t none = {NULL, NULL};
        return s_scan_sc(c, item, s->u.set_from_vec.arg, none);
    }
    case TROUPE_LL_SET_LOCAL:
        return s_scan_sc(c, item, s->u.set_local.value, self);
    }
    return troupe__error(TROUPE_INTERNAL, "unknown statement kind %d", (int)s->kind);
}

static troupe_status_t s_scan_sc(s_ctx_t *c, size_t item, const troupe_sc_t *e, s_self_t self)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        return s_scan_ll(c, item, e->u.local_scope.body, self);
    case TROUPE_SC_GET: {
        ptrdiff_t i = s_node_of(c, e->u.get.tn);
        if (i < 0)
            return s_unknown_node(c, e->u.get.tn);
        c->traced[i].is_accessing = true;
        if (!s_push_pos(&c->nd[i].rpos, item))
            return s_oom();
        if (!s_is_self(self, e->u.get.tn, e->u.get.idcs))
            c->nd[i].external_read = true;
        return TROUPE_OK;
    }
    case TROUPE_SC_GET_MERGE_BUFFER: {
        ptrdiff_t i = s_node_of(c, e->u.get.tn);
        if (i < 0)
            return s_unknown_node(c, e->u.get.tn);
        if (c->merge != NULL && c->merge != e->u.get.tn)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "procedure %s reads the merge buffers of nodes #%d and #%d: at "
                                 "most one merge buffer per routine",
                                 c->proc->name, c->merge->id, e->u.get.tn->id);
        c->merge = e->u.get.tn;
        c->traced[i].is_accessing = true;
        c->nd[i].external_read = true;
        c->nd[i].merge_read = true;
        return TROUPE_OK;
    }
    case TROUPE_SC_TERNOP:
        for (int k = 0; k < 3; k++)
            TROUPE_RETURN_IF_ERROR(s_scan_sc(c, item, e->u.op.args[k], self));
        return TROUPE_OK;
    case TROUPE_SC_BINOP:
        for (int k = 0; k < 2; k++)
            TROUPE_RETURN_IF_ERROR(s_scan_sc(c, item, e->u.op.args[k], self));
        return TROUPE_OK;
    case TROUPE_SC_UNOP:
        return s_scan_sc(c, item, e->u.op.args[0], self);
    case TROUPE_SC_GET_LOCAL:
    case TROUPE_SC_CONSTANT:
    case TROUPE_SC_CONSTANT_BITS:
    case TROUPE_SC_EMBED_INDEX:
        return TROUPE_OK;
    }
    return troupe__error(TROUPE_INTERNAL, "unknown scalar kind %d", (int)e->kind);
}

/* ---- step 1b: concrete tracing ------------------------------------------------------------- */

static uint64_t s_sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t s_sat_mul(uint64_t a, uint64_t b)
{
    return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

static uint64_t s_count_sc(const troupe_sc_t *e);

/* Statement executions of a full walk (saturating). */
static uint64_t s_count_ll(const troupe_ll_t *s)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ: {
        uint64_t n = 0;
        for (size_t k = 0; k < s->u.seq.count; k++)
            n = s_sat_add(n, s_count_ll(s->u.seq.items[k]));
        return n;
    }
    case TROUPE_LL_FOR: {
        int64_t ext = s->u.for_loop.to - s->u.for_loop.from + 1;
        if (ext <= 0)
            return 1;
        return s_sat_add(1, s_sat_mul((uint64_t)ext, s_count_ll(s->u.for_loop.body)));
    }
    case TROUPE_LL_SET:
        return s_sat_add(1, s_count_sc(s->u.set.value));
    case TROUPE_LL_SET_FROM_VEC:
        return s_sat_add(1, s_count_sc(s->u.set_from_vec.arg));
    case TROUPE_LL_SET_LOCAL:
        return s_sat_add(1, s_count_sc(s->u.set_local.value));
    default:
        return 1;
    }
}

static uint64_t s_count_sc(const troupe_sc_t *e)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        return s_count_ll(e->u.local_scope.body);
    case TROUPE_SC_TERNOP:
        return s_sat_add(s_count_sc(e->u.op.args[0]),
                         s_sat_add(s_count_sc(e->u.op.args[1]), s_count_sc(e->u.op.args[2])));
    case TROUPE_SC_BINOP:
        return s_sat_add(s_count_sc(e->u.op.args[0]), s_count_sc(e->u.op.args[1]));
    case TROUPE_SC_UNOP:
        return s_count_sc(e->u.op.args[0]);
    default:
        return 0;
    }
}

static int64_t s_index_value(const s_ctx_t *c, const troupe_axis_index_t *ix)
{
    int64_t v = ix->offset;
    for (int k = 0; k < ix->nterms; k++) {
        int32_t sym = ix->terms[k].sym;
        int64_t x = 0; /* static symbols (and anything unbound) read as 0, as OCANNL */
        if (sym >= 0 && sym < c->env_syms && !c->proc->syms[sym].is_static)
            x = c->env[sym];
        v += ix->terms[k].coeff * x;
    }
    return v;
}

static int64_t s_flat(const s_ctx_t *c, const troupe_tnode_t *tn, const troupe_axis_index_t *idcs)
{
    int64_t off = 0;
    for (int a = 0; a < tn->ndims; a++) {
        int64_t v = s_index_value(c, &idcs[a]);
        if (v < 0)
            v = 0;
        if (v >= tn->dims[a])
            v = tn->dims[a] - 1;
        off = off * tn->dims[a] + v;
    }
    return off;
}

static troupe_status_t s_tr_sc(s_ctx_t *c, const troupe_sc_t *e, s_self_t self);

static troupe_status_t s_tr_ll(s_ctx_t *c, const troupe_ll_t *s, s_self_t self)
{
    switch (s->kind) {
    case TROUPE_LL_NOOP:
    case TROUPE_LL_COMMENT:
        return TROUPE_OK;
    case TROUPE_LL_SEQ:
        for (size_t k = 0; k < s->u.seq.count; k++)
            TROUPE_RETURN_IF_ERROR(s_tr_ll(c, s->u.seq.items[k], self));
        return TROUPE_OK;
    case TROUPE_LL_FOR: {
        int64_t ext = s->u.for_loop.to - s->u.for_loop.from + 1;
        if (ext <= 0)
            return TROUPE_OK;
        int64_t n = ext;
        if (c->sampled) {
            int64_t cap = s->u.for_loop.trace_it ? c->o.virtualize_max_tracing_dim + 1 : 1;
            if (n > cap)
                n = cap;
        }
        int32_t sym = s->u.for_loop.sym;
        for (int64_t k = 0; k < n; k++) {
            c->env[sym] = s->u.for_loop.from + k;
            TROUPE_RETURN_IF_ERROR(s_tr_ll(c, s->u.for_loop.body, self));
        }
        return TROUPE_OK;
    }
    case TROUPE_LL_ZERO_OUT: {
        ptrdiff_t i = s_node_of(c, s->u.zero_out);
        s_node_t *nd = &c->nd[i];
        if (nd->n_assign_exec == 0 && !nd->any_access)
            c->traced[i].zero_initialized = true;
        if (nd->n_assign_exec == 0)
            nd->first_is_zero = true;
        c->traced[i].zeroed_out = true;
        nd->n_assign_exec++;
        return TROUPE_OK;
    }
    case TROUPE_LL_SET: {
        s_self_t me = {s->u.set.tn, s->u.set.idcs};
        TROUPE_RETURN_IF_ERROR(s_tr_sc(c, s->u.set.value, me));
        ptrdiff_t i = s_node_of(c, s->u.set.tn);
        s_node_t *nd = &c->nd[i];
        s_elem_t *el = s_emap_get(&nd->elems, s_flat(c, s->u.set.tn, s->u.set.idcs));
        if (el == NULL)
            return s_oom();
        el->assigned = true;
        if (nd->n_assign_exec == 0)
            nd->first_value = s->u.set.value;
        nd->n_assign_exec++;
        return TROUPE_OK;
    }
    case TROUPE_LL_SET_FROM_VEC: {
        s_self_t none = {NULL, NULL};
        TROUPE_RETURN_IF_ERROR(s_tr_sc(c, s->u.set_from_vec.arg, none));
        const troupe_tnode_t *tn = s->u.set_from_vec.tn;
        ptrdiff_t i = s_node_of(c, tn);
        s_node_t *nd = &c->nd[i];
        int64_t base = s_flat(c, tn, s->u.set_from_vec.idcs);
        int64_t total = troupe_tnode_num_elems(tn);
        for (int k = 0; k < s->u.set_from_vec.length && base + k < total; k++) {
            s_elem_t *el = s_emap_get(&nd->elems, base + k);
            if (el == NULL)
                return s_oom();
            el->assigned = true;
        }
        if (nd->n_assign_exec == 0)
            nd->first_is_vec = true;
        nd->n_assign_exec++;
        return TROUPE_OK;
    }
    case TROUPE_LL_SET_LOCAL:
        return s_tr_sc(c, s->u.set_local.value, self);
    }
    return troupe__error(TROUPE_INTERNAL, "unknown statement kind %d", (int)s->kind);
}

static troupe_status_t s_tr_sc(s_ctx_t *c, const troupe_sc_t *e, s_self_t self)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        return s_tr_ll(c, e->u.local_scope.body, self);
    case TROUPE_SC_GET: {
        const troupe_tnode_t *tn = e->u.get.tn;
        ptrdiff_t i = s_node_of(c, tn);
        s_node_t *nd = &c->nd[i];
        troupe_ll_traced_t *tr = &c->traced[i];
        s_elem_t *el = s_emap_get(&nd->elems, s_flat(c, tn, e->u.get.idcs));
        if (el == NULL)
            return s_oom();
        if (!(tr->zeroed_out || el->assigned))
            tr->read_before_write = true;
        if (nd->n_assign_exec == 0)
            nd->read_before_first_assign = true;
        nd->any_access = true;
        /* OCANNL: with inline_complex_computations an accumulation's read of the cell it
         * writes is part of the computation, not a visit. */
        if (!(c->o.inline_complex_computations && s_is_self(self, tn, e->u.get.idcs))) {
            el->visits++;
            if (el->visits > tr->max_visits)
                tr->max_visits = el->visits;
        }
        return TROUPE_OK;
    }
    case TROUPE_SC_TERNOP:
        for (int k = 0; k < 3; k++)
            TROUPE_RETURN_IF_ERROR(s_tr_sc(c, e->u.op.args[k], self));
        return TROUPE_OK;
    case TROUPE_SC_BINOP:
        /* OCANNL traces only the operand arg1/arg2 keeps. */
        if (e->u.op.op == TROUPE_BINOP_ARG1)
            return s_tr_sc(c, e->u.op.args[0], self);
        if (e->u.op.op == TROUPE_BINOP_ARG2)
            return s_tr_sc(c, e->u.op.args[1], self);
        for (int k = 0; k < 2; k++)
            TROUPE_RETURN_IF_ERROR(s_tr_sc(c, e->u.op.args[k], self));
        return TROUPE_OK;
    case TROUPE_SC_UNOP:
        return s_tr_sc(c, e->u.op.args[0], self);
    default: /* merge-buffer reads, locals, constants, embedded indices */
        return TROUPE_OK;
    }
}

/* ---- step 1c: constant expressions and complexity (OCANNL is_constexpr_comp, ---------------
 *      is_accessing_comp, is_complex_comp) */

static bool s_constexpr_sc(s_ctx_t *c, const troupe_sc_t *e);

/* Scalar node assigned exactly once, before any read, from a constant expression. */
static bool s_constexpr_node(s_ctx_t *c, size_t i)
{
    s_node_t *nd = &c->nd[i];
    if (nd->constexpr_state >= 2)
        return nd->constexpr_state == 2;
    if (nd->constexpr_state == 1)
        return false; /* cyclic */
    nd->constexpr_state = 1;
    bool r = s_scalar_dims(c->tns[i]) && nd->n_assign_exec == 1 && !nd->read_before_first_assign &&
             !nd->first_is_vec &&
             (nd->first_is_zero || (nd->first_value && s_constexpr_sc(c, nd->first_value)));
    nd->constexpr_state = r ? 2 : 3;
    return r;
}

static bool s_constexpr_sc(s_ctx_t *c, const troupe_sc_t *e)
{
    switch (e->kind) {
    case TROUPE_SC_CONSTANT:
    case TROUPE_SC_CONSTANT_BITS:
        return true;
    case TROUPE_SC_GET: {
        ptrdiff_t i = s_node_of(c, e->u.get.tn);
        return i >= 0 && s_constexpr_node(c, (size_t)i);
    }
    case TROUPE_SC_TERNOP:
        return s_constexpr_sc(c, e->u.op.args[0]) && s_constexpr_sc(c, e->u.op.args[1]) &&
               s_constexpr_sc(c, e->u.op.args[2]);
    case TROUPE_SC_BINOP:
        return s_constexpr_sc(c, e->u.op.args[0]) && s_constexpr_sc(c, e->u.op.args[1]);
    case TROUPE_SC_UNOP:
        return s_constexpr_sc(c, e->u.op.args[0]);
    default: /* merge reads, locals, embedded indices */
        return false;
    }
}

static bool s_accessing_sc(s_ctx_t *c, const troupe_sc_t *e)
{
    switch (e->kind) {
    case TROUPE_SC_GET:
        return !s_constexpr_sc(c, e);
    case TROUPE_SC_GET_MERGE_BUFFER:
    case TROUPE_SC_LOCAL_SCOPE:
    case TROUPE_SC_GET_LOCAL:
        return true;
    case TROUPE_SC_TERNOP:
        return s_accessing_sc(c, e->u.op.args[0]) || s_accessing_sc(c, e->u.op.args[1]) ||
               s_accessing_sc(c, e->u.op.args[2]);
    case TROUPE_SC_BINOP:
        return s_accessing_sc(c, e->u.op.args[0]) || s_accessing_sc(c, e->u.op.args[1]);
    case TROUPE_SC_UNOP:
        return s_accessing_sc(c, e->u.op.args[0]);
    default:
        return false;
    }
}

static bool s_complex_sc(s_ctx_t *c, const troupe_sc_t *e)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
    case TROUPE_SC_GET_LOCAL:
        return true;
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
    case TROUPE_SC_UNOP:
        return s_accessing_sc(c, e);
    default: /* a plain read, constants, indices */
        return false;
    }
}

static void s_complexity_ll(s_ctx_t *c, const troupe_ll_t *s)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t k = 0; k < s->u.seq.count; k++)
            s_complexity_ll(c, s->u.seq.items[k]);
        return;
    case TROUPE_LL_FOR:
        s_complexity_ll(c, s->u.for_loop.body);
        return;
    case TROUPE_LL_SET:
        if (s_complex_sc(c, s->u.set.value))
            c->traced[s_node_of(c, s->u.set.tn)].is_complex = true;
        return;
    case TROUPE_LL_SET_FROM_VEC:
        if (!s_constexpr_sc(c, s->u.set_from_vec.arg))
            c->traced[s_node_of(c, s->u.set_from_vec.tn)].is_complex = true;
        return;
    default:
        return;
    }
}

/* ---- step 3a: definition units (OCANNL check_and_store_virtual) ----------------------------- */

typedef struct s_us {
    s_ctx_t *c;
    const troupe_tnode_t *tn;
    const troupe_axis_index_t *I;
    int32_t loop_sym[S_MAX_DEPTH];
    int64_t loop_from[S_MAX_DEPTH], loop_to[S_MAX_DEPTH];
    int depth;
    int32_t reason;
    bool has_reduction;
} s_us_t;

/* Axis of `sym` in I, or -1. */
static int s_axis_of(const troupe_tnode_t *tn, const troupe_axis_index_t *I, int32_t sym)
{
    for (int a = 0; a < tn->ndims; a++)
        if (I[a].nterms == 1 && I[a].terms[0].sym == sym)
            return a;
    return -1;
}

static int32_t s_check_I(const s_ctx_t *c, const troupe_tnode_t *tn, const troupe_axis_index_t *I)
{
    for (int a = 0; a < tn->ndims; a++) {
        const troupe_axis_index_t *x = &I[a];
        if (x->nterms == 0) {
            if (x->offset != 0 || tn->dims[a] != 1)
                return TROUPE_PROV_NV_PARTIAL;
            continue;
        }
        if (x->nterms != 1 || x->terms[0].coeff != 1 || x->offset != 0)
            return TROUPE_PROV_NV_NOT_PER_INDEX;
        int32_t sym = x->terms[0].sym;
        if (sym < 0 || sym >= c->proc->nsyms || c->proc->syms[sym].is_static)
            return TROUPE_PROV_NV_NOT_PER_INDEX;
        for (int b = 0; b < a; b++)
            if (I[b].nterms == 1 && I[b].terms[0].sym == sym)
                return TROUPE_PROV_NV_NOT_PER_INDEX;
    }
    return 0;
}

static void s_us_ll(s_us_t *u, const troupe_ll_t *s);

static void s_us_sc(s_us_t *u, const troupe_sc_t *e)
{
    if (u->reason != 0)
        return;
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        s_us_ll(u, e->u.local_scope.body);
        return;
    case TROUPE_SC_GET:
        if (e->u.get.tn == u->tn && (u->I == NULL || !s_idcs_eq(e->u.get.idcs, u->I, u->tn->ndims)))
            u->reason = TROUPE_PROV_NV_CROSS_ELEMENT;
        return;
    case TROUPE_SC_TERNOP:
        for (int k = 0; k < 3; k++)
            s_us_sc(u, e->u.op.args[k]);
        return;
    case TROUPE_SC_BINOP:
        for (int k = 0; k < 2; k++)
            s_us_sc(u, e->u.op.args[k]);
        return;
    case TROUPE_SC_UNOP:
        s_us_sc(u, e->u.op.args[0]);
        return;
    default:
        return;
    }
}

static void s_us_ll(s_us_t *u, const troupe_ll_t *s)
{
    if (u->reason != 0)
        return;
    switch (s->kind) {
    case TROUPE_LL_NOOP:
    case TROUPE_LL_COMMENT:
        return;
    case TROUPE_LL_SEQ:
        for (size_t k = 0; k < s->u.seq.count; k++)
            s_us_ll(u, s->u.seq.items[k]);
        return;
    case TROUPE_LL_FOR:
        if (u->depth == S_MAX_DEPTH) {
            u->reason = TROUPE_PROV_NV_NOT_PER_INDEX;
            return;
        }
        u->loop_sym[u->depth] = s->u.for_loop.sym;
        u->loop_from[u->depth] = s->u.for_loop.from;
        u->loop_to[u->depth] = s->u.for_loop.to;
        u->depth++;
        s_us_ll(u, s->u.for_loop.body);
        u->depth--;
        return;
    case TROUPE_LL_ZERO_OUT: /* only a whole item may zero the node */
        u->reason = TROUPE_PROV_NV_NOT_PER_INDEX;
        return;
    case TROUPE_LL_SET_FROM_VEC:
        u->reason = TROUPE_PROV_NV_VECTOR_WRITE;
        return;
    case TROUPE_LL_SET: {
        const troupe_tnode_t *tn = u->tn;
        if (s->u.set.tn != tn) {
            u->reason = TROUPE_PROV_NV_SHARED_STATEMENT;
            return;
        }
        if (u->I == NULL) {
            u->I = s->u.set.idcs;
            if ((u->reason = s_check_I(u->c, tn, u->I)) != 0)
                return;
        } else if (!s_idcs_eq(u->I, s->u.set.idcs, tn->ndims)) {
            u->reason = TROUPE_PROV_NV_INDICES_DIFFER;
            return;
        }
        for (int d = 0; d < u->depth; d++) {
            int a = s_axis_of(tn, u->I, u->loop_sym[d]);
            if (a < 0)
                u->has_reduction = true;
            else if (u->loop_from[d] != 0 || u->loop_to[d] != tn->dims[a] - 1) {
                u->reason = TROUPE_PROV_NV_PARTIAL;
                return;
            }
        }
        s_us_sc(u, s->u.set.value);
        return;
    }
    case TROUPE_LL_SET_LOCAL:
        s_us_sc(u, s->u.set_local.value);
        return;
    }
}

static troupe_status_t s_analyse_units(s_ctx_t *c, size_t i)
{
    s_node_t *nd = &c->nd[i];
    const troupe_tnode_t *tn = c->tns[i];
    nd->struct_ok = false;
    if (nd->vec_write) {
        nd->reason = TROUPE_PROV_NV_VECTOR_WRITE;
        return TROUPE_OK;
    }
    if (nd->merge_read) {
        nd->reason = TROUPE_PROV_NV_MERGE_READ;
        return TROUPE_OK;
    }
    if (!c->o.inline_narrow_precisions &&
        (tn->prec == TROUPE_PREC_HALF || tn->prec == TROUPE_PREC_BFLOAT16 ||
         tn->prec == TROUPE_PREC_FP8)) {
        nd->reason = TROUPE_PROV_NV_NARROW_PRECISION;
        return TROUPE_OK;
    }
    for (size_t k = 0; k < nd->wpos.n; k++) {
        size_t item = S_AT(nd->wpos, size_t, k);
        const troupe_axis_index_t *I = NULL;
        if (c->item_nwriters[item] != 1) {
            nd->reason = TROUPE_PROV_NV_SHARED_STATEMENT;
            return TROUPE_OK;
        }
        if (c->items[item]->kind != TROUPE_LL_ZERO_OUT) {
            s_us_t u;
            memset(&u, 0, sizeof u);
            u.c = c;
            u.tn = tn;
            s_us_ll(&u, c->items[item]);
            if (u.reason == 0 && u.I == NULL)
                u.reason = TROUPE_PROV_NV_SHARED_STATEMENT; /* cannot happen: it writes tn */
            if (u.reason != 0) {
                nd->reason = u.reason;
                return TROUPE_OK;
            }
            nd->has_reduction = nd->has_reduction || u.has_reduction;
            I = u.I;
        }
        if (!s_vec_push(&nd->unit_I, sizeof I, &I))
            return s_oom();
    }
    size_t last = S_AT(nd->wpos, size_t, nd->wpos.n - 1);
    for (size_t k = 0; k < nd->rpos.n; k++) {
        size_t r = S_AT(nd->rpos, size_t, k);
        if (!s_contains_pos(&nd->wpos, r) && r < last) {
            nd->reason = TROUPE_PROV_NV_USE_ORDER;
            return TROUPE_OK;
        }
    }
    if (nd->has_reduction && !c->o.inline_complex_computations) {
        nd->reason = TROUPE_PROV_NV_REDUCTION;
        return TROUPE_OK;
    }
    nd->struct_ok = true;
    return TROUPE_OK;
}

/* ---- memory-mode helpers ----------------------------------------------------------------- */

static troupe_memory_mode_t s_mode(troupe_memory_mode_kind_t kind, troupe_memory_type_t memtype)
{
    troupe_memory_mode_t m = {kind, memtype, TROUPE_SHARING_UNSET};
    return m;
}

/* Updates tn's mode; on an inconsistency re-records the tnode's message with context. */
static troupe_status_t s_update(const s_ctx_t *c, troupe_tnode_t *tn, troupe_memory_mode_t m,
                                int32_t prov, const char *why)
{
    troupe_status_t st = troupe_tnode_update_memory_mode(tn, m, prov);
    if (st == TROUPE_OK)
        return st;
    char msg[768];
    snprintf(msg, sizeof msg, "%s", troupe_last_error());
    return troupe__error(st, "optimizing %s (%s): %s", c->proc->name, why, msg);
}

static const char *s_reason_text(int32_t r)
{
    switch (r) {
    case TROUPE_PROV_NV_INDICES_DIFFER:
        return "its assignments use different index tuples";
    case TROUPE_PROV_NV_NOT_PER_INDEX:
        return "it is not written per cell by plain loop iterators";
    case TROUPE_PROV_NV_SHARED_STATEMENT:
        return "a statement writing it writes other nodes too";
    case TROUPE_PROV_NV_CROSS_ELEMENT:
        return "its definition reads it at other cells";
    case TROUPE_PROV_NV_INDEX_TOO_COMPLEX:
        return "an inlined index would exceed the index term limit";
    case TROUPE_PROV_NV_PARTIAL:
        return "its definition does not cover the whole node";
    case TROUPE_PROV_NV_USE_ORDER:
        return "it is read before its definition is complete";
    case TROUPE_PROV_NV_MERGE_READ:
        return "it is read through a merge buffer";
    case TROUPE_PROV_NV_INPUT_CHANGED:
        return "an input of its definition changes before it is read";
    case TROUPE_PROV_NV_REDUCTION:
        return "it is a reduction and inline_complex_computations is off";
    case TROUPE_PROV_NV_VECTOR_WRITE:
        return "it is written by a vector operation";
    case TROUPE_PROV_NV_DISABLED:
        return "virtualisation is disabled";
    case TROUPE_PROV_NV_NARROW_PRECISION:
        return "its precision is narrower than its compute type (inline_narrow_precisions off)";
    default:
        return "it cannot be inlined";
    }
}

/* ---- step 2: memory-mode inference (OCANNL visit_llc epilogue) ------------------------------ */

static troupe_status_t s_infer_modes(s_ctx_t *c)
{
    for (size_t i = 0; i < c->nn; i++) {
        troupe_tnode_t *tn = c->tns[i];
        troupe_ll_traced_t *tr = &c->traced[i];
        s_node_t *nd = &c->nd[i];
        if (!tr->is_accessing && tr->assignments == 0)
            continue; /* mentioned only as a local scope's node */
        bool too_many = tr->max_visits > c->o.virtualize_max_visits || tr->read_before_write;
        nd->constexpr_wanted = c->o.inline_scalar_constexprs && c->o.virtualize &&
                               tr->is_scalar_constexpr && nd->external_read &&
                               !troupe_tnode_known_non_virtual(tn);
        bool skip_simple = c->o.inline_simple_computations && !tr->is_complex &&
                           !troupe_tnode_known_non_virtual(tn);
        if (!nd->constexpr_wanted && !skip_simple && too_many &&
            !troupe_tnode_get_memory_mode(tn, NULL, NULL))
            TROUPE_RETURN_IF_ERROR(s_update(c, tn, s_mode(TROUPE_MM_NEVER_VIRTUAL, 0),
                                            TROUPE_PROV_TOO_MANY_VISITS, "cell read repeatedly"));
        if (tr->read_only && tr->is_accessing) {
            if (troupe_tnode_mode_is_unspecified(tn)) {
                TROUPE_RETURN_IF_ERROR(
                    s_update(c, tn, s_mode(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_UNSET_HOSTED),
                             TROUPE_PROV_READ_ONLY_HOSTED, "read-only"));
            } else if (troupe_tnode_known_not_materialized(tn)) {
                char name[96], mode[96];
                troupe_memory_mode_t m;
                int32_t prov = 0;
                troupe_tnode_debug_name(tn, name, sizeof name);
                troupe_tnode_get_memory_mode(tn, &m, &prov);
                troupe_memory_mode_to_string(m, mode, sizeof mode);
                return troupe__error(TROUPE_FAILED_PRECONDITION,
                                     "optimizing %s: %s is read but not computed here, and its "
                                     "memory mode %s/%" PRId32
                                     " keeps no data between routines: mark it materialized "
                                     "before the first routine using it is optimized",
                                     c->proc->name, name, mode, prov);
            } else if (troupe_tnode_known_non_virtual(tn)) {
                TROUPE_RETURN_IF_ERROR(s_update(c, tn, s_mode(TROUPE_MM_MATERIALIZED, 0),
                                                TROUPE_PROV_READ_ONLY_MATERIALIZED, "read-only"));
            }
        }
        if (tr->read_before_write && !troupe_tnode_known_virtual(tn))
            TROUPE_RETURN_IF_ERROR(s_update(c, tn, s_mode(TROUPE_MM_MATERIALIZED, 0),
                                            TROUPE_PROV_RECURRENT, "read before written"));
        if (nd->merge_read)
            TROUPE_RETURN_IF_ERROR(s_update(c, tn, s_mode(TROUPE_MM_MATERIALIZED, 0),
                                            TROUPE_PROV_MERGE_SOURCE,
                                            "read through a merge buffer"));
        if (tr->assignments > 0 && !nd->external_read) {
            troupe_memory_mode_t m;
            bool has = troupe_tnode_get_memory_mode(tn, &m, NULL);
            if (!has || m.kind == TROUPE_MM_NEVER_VIRTUAL ||
                m.kind == TROUPE_MM_EFFECTIVELY_CONSTANT)
                TROUPE_RETURN_IF_ERROR(s_update(c, tn, s_mode(TROUPE_MM_MATERIALIZED, 0),
                                                TROUPE_PROV_RESULT, "result of the procedure"));
        }
    }
    return TROUPE_OK;
}

/* ---- step 3b: stability of inlined definitions --------------------------------------------- */

static bool s_add_read(s_node_t *nd, s_read_t r)
{
    for (size_t k = 0; k < nd->R.n; k++) {
        s_read_t *x = &S_AT(nd->R, s_read_t, k);
        if (x->node == r.node) {
            if (r.start < x->start)
                x->start = r.start;
            return true;
        }
    }
    return s_vec_push(&nd->R, sizeof r, &r);
}

static bool s_written_between(const s_ctx_t *c, size_t node, size_t from, size_t to)
{
    const s_vec_t *w = &c->nd[node].wpos;
    for (size_t k = 0; k < w->n; k++) {
        size_t p = S_AT(*w, size_t, k);
        if (p >= from && p <= to)
            return true;
    }
    return false;
}

static bool s_item_is_accepted_unit(const s_ctx_t *c, size_t item)
{
    return c->item_nwriters[item] == 1 && c->nd[c->item_writer[item]].state == S_ACCEPTED;
}

/* Rejects accepted nodes whose inlined reads could see changed inputs, to a fixpoint.
 * `order` lists candidates by their last definition unit. */
static troupe_status_t s_stability(s_ctx_t *c, const size_t *order, size_t norder)
{
    for (;;) {
        for (size_t k = 0; k < norder; k++) {
            s_node_t *nd = &c->nd[order[k]];
            if (nd->state != S_ACCEPTED)
                continue;
            nd->R.n = 0;
            size_t first = S_AT(nd->wpos, size_t, 0);
            for (size_t u = 0; u < nd->wpos.n; u++) {
                const s_vec_t *reads = &c->item_reads[S_AT(nd->wpos, size_t, u)];
                for (size_t r = 0; r < reads->n; r++) {
                    size_t x = S_AT(*reads, size_t, r);
                    if (x == order[k])
                        continue;
                    if (c->nd[x].state == S_ACCEPTED) {
                        for (size_t j = 0; j < c->nd[x].R.n; j++)
                            if (!s_add_read(nd, S_AT(c->nd[x].R, s_read_t, j)))
                                return s_oom();
                    } else {
                        s_read_t rd = {x, first};
                        if (!s_add_read(nd, rd))
                            return s_oom();
                    }
                }
            }
        }
        bool changed = false;
        for (size_t q = 0; q < c->nitems; q++) {
            if (s_item_is_accepted_unit(c, q))
                continue;
            const s_vec_t *reads = &c->item_reads[q];
            for (size_t r = 0; r < reads->n; r++) {
                s_node_t *nx = &c->nd[S_AT(*reads, size_t, r)];
                if (nx->state != S_ACCEPTED)
                    continue;
                for (size_t j = 0; j < nx->R.n; j++) {
                    s_read_t rd = S_AT(nx->R, s_read_t, j);
                    if (s_written_between(c, rd.node, rd.start, q)) {
                        nx->state = S_REJECTED;
                        nx->reject_reason = TROUPE_PROV_NV_INPUT_CHANGED;
                        changed = true;
                        break;
                    }
                }
            }
        }
        if (!changed)
            return TROUPE_OK;
    }
}

/* ---- step 3c: rewriting (OCANNL inline_computation, cleanup_virtual_llc) -------------------- */

typedef struct s_pair {
    int32_t from, to;
} s_pair_t;

/* Copy of one definition unit at a read site: I's iterators -> the read's indices (sigma),
 * other loop symbols -> fresh symbols (rho), nested scope ids -> fresh ids. */
typedef struct s_cp {
    s_ctx_t *c;
    troupe_tnode_t *tn;
    const troupe_axis_index_t *I; /* NULL for a ZERO_OUT unit */
    const troupe_axis_index_t *E; /* the read's indices */
    int32_t id;                   /* the scope being built */
    s_vec_t rho;                  /* s_pair_t stack */
    s_vec_t smap;                 /* s_pair_t stack */
    bool too_complex;
    bool oom; /* a vector could not grow (builders make the procedure sticky themselves) */
} s_cp_t;

static int32_t s_lookup(const s_vec_t *v, int32_t from)
{
    for (size_t k = v->n; k-- > 0;)
        if (S_AT(*v, s_pair_t, k).from == from)
            return S_AT(*v, s_pair_t, k).to;
    return -1;
}

typedef struct s_terms {
    int n;
    troupe_index_term_t t[3 * TROUPE_MAX_INDEX_TERMS * TROUPE_MAX_INDEX_TERMS];
    int64_t offset;
    bool overflow;
} s_terms_t;

static void s_terms_add(s_terms_t *ts, int64_t coeff, int32_t sym)
{
    for (int k = 0; k < ts->n; k++)
        if (ts->t[k].sym == sym) {
            if (__builtin_add_overflow(ts->t[k].coeff, coeff, &ts->t[k].coeff))
                ts->overflow = true;
            return;
        }
    if (ts->n == (int)(sizeof ts->t / sizeof ts->t[0])) {
        ts->overflow = true;
        return;
    }
    ts->t[ts->n].coeff = coeff;
    ts->t[ts->n].sym = sym;
    ts->n++;
}

/* Simultaneous substitution of sigma and rho into `in`. False when the result does not fit. */
static bool s_subst(s_cp_t *p, const troupe_axis_index_t *in, troupe_axis_index_t *out)
{
    s_terms_t ts;
    ts.n = 0;
    ts.offset = in->offset;
    ts.overflow = false;
    for (int k = 0; k < in->nterms; k++) {
        int64_t coeff = in->terms[k].coeff;
        int32_t sym = in->terms[k].sym;
        int a = p->I ? s_axis_of(p->tn, p->I, sym) : -1;
        if (a >= 0) {
            const troupe_axis_index_t *e = &p->E[a];
            int64_t prod;
            if (__builtin_mul_overflow(coeff, e->offset, &prod) ||
                __builtin_add_overflow(ts.offset, prod, &ts.offset))
                ts.overflow = true;
            for (int j = 0; j < e->nterms; j++) {
                if (__builtin_mul_overflow(coeff, e->terms[j].coeff, &prod))
                    ts.overflow = true;
                s_terms_add(&ts, prod, e->terms[j].sym);
            }
            continue;
        }
        int32_t r = s_lookup(&p->rho, sym);
        s_terms_add(&ts, coeff, r >= 0 ? r : sym);
    }
    memset(out, 0, sizeof *out);
    out->offset = ts.offset;
    for (int k = 0; k < ts.n; k++) {
        if (ts.t[k].coeff == 0)
            continue;
        if (out->nterms == TROUPE_MAX_INDEX_TERMS)
            ts.overflow = true;
        else
            out->terms[out->nterms++] = ts.t[k];
    }
    if (ts.overflow)
        p->too_complex = true;
    return !ts.overflow;
}

static bool s_subst_idcs(s_cp_t *p, const troupe_axis_index_t *in, int n, troupe_axis_index_t *out)
{
    for (int a = 0; a < n; a++)
        if (!s_subst(p, &in[a], &out[a]))
            return false;
    return true;
}

static troupe_sc_t *s_cp_sc(s_cp_t *p, const troupe_sc_t *e);

/* NULL on failure: builder failure (proc sticky) or p->too_complex. */
static troupe_ll_t *s_cp_ll(s_cp_t *p, const troupe_ll_t *s)
{
    troupe_ll_proc_t *proc = p->c->proc;
    switch (s->kind) {
    case TROUPE_LL_NOOP:
    case TROUPE_LL_COMMENT:
        return troupe_ll_noop(proc);
    case TROUPE_LL_SEQ: {
        troupe_ll_t **items = troupe_ll_alloc(proc, (s->u.seq.count + 1) * sizeof *items);
        if (items == NULL)
            return NULL;
        for (size_t k = 0; k < s->u.seq.count; k++)
            if ((items[k] = s_cp_ll(p, s->u.seq.items[k])) == NULL)
                return NULL;
        return troupe_ll_seq(proc, s->u.seq.count, items);
    }
    case TROUPE_LL_FOR: {
        int32_t sym = s->u.for_loop.sym;
        if (p->I != NULL && s_axis_of(p->tn, p->I, sym) >= 0)
            return s_cp_ll(p, s->u.for_loop.body); /* the read fixes this iterator */
        int32_t fresh = troupe_ll_proc_add_symbol(proc, NULL);
        if (fresh < 0)
            return NULL;
        s_pair_t pr = {sym, fresh};
        if (!s_vec_push(&p->rho, sizeof pr, &pr)) {
            p->oom = true;
            return NULL;
        }
        troupe_ll_t *body = s_cp_ll(p, s->u.for_loop.body);
        p->rho.n--;
        return troupe_ll_for(proc, fresh, s->u.for_loop.from, s->u.for_loop.to, body,
                             s->u.for_loop.trace_it);
    }
    case TROUPE_LL_ZERO_OUT:
        return troupe_ll_set_local(proc, p->id, troupe_sc_constant(proc, 0.0));
    case TROUPE_LL_SET:
        return troupe_ll_set_local(proc, p->id, s_cp_sc(p, s->u.set.value));
    case TROUPE_LL_SET_LOCAL: {
        int32_t id = s_lookup(&p->smap, s->u.set_local.id);
        return troupe_ll_set_local(proc, id >= 0 ? id : s->u.set_local.id,
                                   s_cp_sc(p, s->u.set_local.value));
    }
    case TROUPE_LL_SET_FROM_VEC: /* unreachable: units have no vector writes */
        break;
    }
    p->oom = true;
    return NULL;
}

static troupe_sc_t *s_cp_sc(s_cp_t *p, const troupe_sc_t *e)
{
    troupe_ll_proc_t *proc = p->c->proc;
    troupe_axis_index_t idx[TROUPE_MAX_DIMS];
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE: {
        int32_t nid = troupe_ll_proc_new_scope_id(proc);
        s_pair_t pr = {e->u.local_scope.id, nid};
        if (!s_vec_push(&p->smap, sizeof pr, &pr)) {
            p->oom = true;
            return NULL;
        }
        troupe_ll_t *body = s_cp_ll(p, e->u.local_scope.body);
        p->smap.n--;
        const troupe_tnode_t *stn = e->u.local_scope.tn;
        if (body == NULL || !s_subst_idcs(p, e->u.local_scope.orig_indices, stn->ndims, idx))
            return NULL;
        return troupe_sc_local_scope(proc, nid, e->u.local_scope.tn, body, idx);
    }
    case TROUPE_SC_GET_LOCAL: {
        int32_t id = s_lookup(&p->smap, e->u.get_local.id);
        return troupe_sc_get_local(proc, id >= 0 ? id : e->u.get_local.id);
    }
    case TROUPE_SC_GET:
        if (e->u.get.tn == p->tn)
            return troupe_sc_get_local(proc, p->id); /* the accumulation's own cell */
        if (!s_subst_idcs(p, e->u.get.idcs, e->u.get.tn->ndims, idx))
            return NULL;
        return troupe_sc_get(proc, e->u.get.tn, idx);
    case TROUPE_SC_GET_MERGE_BUFFER:
        if (!s_subst_idcs(p, e->u.get.idcs, e->u.get.tn->ndims, idx))
            return NULL;
        return troupe_sc_get_merge_buffer(proc, e->u.get.tn, idx);
    case TROUPE_SC_TERNOP:
        return troupe_sc_ternop(proc, (troupe_ternop_t)e->u.op.op, s_cp_sc(p, e->u.op.args[0]),
                                s_cp_sc(p, e->u.op.args[1]), s_cp_sc(p, e->u.op.args[2]));
    case TROUPE_SC_BINOP:
        return troupe_sc_binop(proc, (troupe_binop_t)e->u.op.op, s_cp_sc(p, e->u.op.args[0]),
                               s_cp_sc(p, e->u.op.args[1]));
    case TROUPE_SC_UNOP:
        return troupe_sc_unop(proc, (troupe_unop_t)e->u.op.op, s_cp_sc(p, e->u.op.args[0]));
    case TROUPE_SC_CONSTANT:
        return troupe_sc_constant(proc, e->u.constant);
    case TROUPE_SC_CONSTANT_BITS:
        return troupe_sc_constant_bits(proc, e->u.constant_bits);
    case TROUPE_SC_EMBED_INDEX: {
        troupe_axis_index_t x;
        if (!s_subst(p, &e->u.embed_index, &x))
            return NULL;
        return troupe_sc_embed_index(proc, x);
    }
    }
    return NULL;
}

typedef struct s_rw {
    s_ctx_t *c;
    ptrdiff_t self;   /* node whose unit is being rewritten: its reads stay */
    ptrdiff_t failed; /* node whose inlining did not fit, or -1 */
} s_rw_t;

/* The local scope recomputing virtual node `x` at indices E. NULL on failure. */
static troupe_sc_t *s_inline(s_rw_t *w, size_t x, const troupe_axis_index_t *E)
{
    s_ctx_t *c = w->c;
    troupe_ll_proc_t *proc = c->proc;
    s_node_t *nd = &c->nd[x];
    s_cp_t p;
    memset(&p, 0, sizeof p);
    p.c = c;
    p.tn = c->tns[x];
    p.E = E;
    p.id = troupe_ll_proc_new_scope_id(proc);
    troupe_ll_t **parts = troupe_ll_alloc(proc, (nd->stored.n + 1) * sizeof *parts);
    troupe_sc_t *res = NULL;
    if (parts == NULL)
        goto done;
    for (size_t k = 0; k < nd->stored.n; k++) {
        p.I = S_AT(nd->unit_I, const troupe_axis_index_t *, k);
        p.rho.n = p.smap.n = 0;
        if ((parts[k] = s_cp_ll(&p, S_AT(nd->stored, troupe_ll_t *, k))) == NULL)
            goto done;
    }
    res = troupe_sc_local_scope(proc, p.id, p.tn, troupe_ll_seq(proc, nd->stored.n, parts), E);
done:
    if (res == NULL && p.too_complex && w->failed < 0)
        w->failed = (ptrdiff_t)x;
    s_vec_free(&p.rho);
    s_vec_free(&p.smap);
    return res;
}

/* Rebuilding after a rewrite (steps 3c and 4): for loop s with body b, or set, set_from_vec or
 * set_local s with value v. s itself when the part is unchanged, NULL when it is NULL (a
 * failure). */
static troupe_ll_t *s_with_body(troupe_ll_proc_t *proc, troupe_ll_t *s, troupe_ll_t *b)
{
    if (b == NULL || b == s->u.for_loop.body)
        return b == NULL ? NULL : s;
    return troupe_ll_for(proc, s->u.for_loop.sym, s->u.for_loop.from, s->u.for_loop.to, b,
                         s->u.for_loop.trace_it);
}

static troupe_ll_t *s_with_value(troupe_ll_proc_t *proc, troupe_ll_t *s, troupe_sc_t *v)
{
    if (v == NULL)
        return NULL;
    switch (s->kind) {
    case TROUPE_LL_SET:
        return v == s->u.set.value ? s : troupe_ll_set(proc, s->u.set.tn, s->u.set.idcs, v);
    case TROUPE_LL_SET_FROM_VEC:
        if (v == s->u.set_from_vec.arg)
            return s;
        return troupe_ll_set_from_vec(proc, s->u.set_from_vec.tn, s->u.set_from_vec.idcs,
                                      s->u.set_from_vec.length, s->u.set_from_vec.op, v);
    case TROUPE_LL_SET_LOCAL:
        return v == s->u.set_local.value ? s : troupe_ll_set_local(proc, s->u.set_local.id, v);
    default:
        return s;
    }
}

static troupe_sc_t *s_rw_sc(s_rw_t *w, troupe_sc_t *e);

/* Returns s itself when nothing changed, NULL on failure. */
static troupe_ll_t *s_rw_ll(s_rw_t *w, troupe_ll_t *s)
{
    troupe_ll_proc_t *proc = w->c->proc;
    switch (s->kind) {
    case TROUPE_LL_SEQ: {
        troupe_ll_t **items = NULL;
        for (size_t k = 0; k < s->u.seq.count; k++) {
            troupe_ll_t *r = s_rw_ll(w, s->u.seq.items[k]);
            if (r == NULL)
                return NULL;
            if (r != s->u.seq.items[k] && items == NULL) {
                items = troupe_ll_alloc(proc, s->u.seq.count * sizeof *items);
                if (items == NULL)
                    return NULL;
                memcpy(items, s->u.seq.items, k * sizeof *items);
            }
            if (items != NULL)
                items[k] = r;
        }
        return items == NULL ? s : troupe_ll_seq(proc, s->u.seq.count, items);
    }
    case TROUPE_LL_FOR:
        return s_with_body(proc, s, s_rw_ll(w, s->u.for_loop.body));
    case TROUPE_LL_SET:
        return s_with_value(proc, s, s_rw_sc(w, s->u.set.value));
    case TROUPE_LL_SET_FROM_VEC:
        return s_with_value(proc, s, s_rw_sc(w, s->u.set_from_vec.arg));
    case TROUPE_LL_SET_LOCAL:
        return s_with_value(proc, s, s_rw_sc(w, s->u.set_local.value));
    default:
        return s;
    }
}

static troupe_sc_t *s_rw_sc(s_rw_t *w, troupe_sc_t *e)
{
    troupe_ll_proc_t *proc = w->c->proc;
    switch (e->kind) {
    case TROUPE_SC_GET: {
        ptrdiff_t x = s_node_of(w->c, e->u.get.tn);
        if (x < 0 || x == w->self || w->c->nd[x].state != S_ACCEPTED)
            return e;
        return s_inline(w, (size_t)x, e->u.get.idcs);
    }
    case TROUPE_SC_LOCAL_SCOPE: {
        troupe_ll_t *b = s_rw_ll(w, e->u.local_scope.body);
        if (b == NULL || b == e->u.local_scope.body)
            return b == NULL ? NULL : e;
        return troupe_sc_local_scope(proc, e->u.local_scope.id, e->u.local_scope.tn, b,
                                     e->u.local_scope.orig_indices);
    }
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
    case TROUPE_SC_UNOP: {
        int n = e->kind == TROUPE_SC_TERNOP ? 3 : e->kind == TROUPE_SC_BINOP ? 2 : 1;
        troupe_sc_t *a[3] = {NULL, NULL, NULL};
        bool changed = false;
        for (int k = 0; k < n; k++) {
            if ((a[k] = s_rw_sc(w, e->u.op.args[k])) == NULL)
                return NULL;
            changed = changed || a[k] != e->u.op.args[k];
        }
        if (!changed)
            return e;
        if (n == 3)
            return troupe_sc_ternop(proc, (troupe_ternop_t)e->u.op.op, a[0], a[1], a[2]);
        if (n == 2)
            return troupe_sc_binop(proc, (troupe_binop_t)e->u.op.op, a[0], a[1]);
        return troupe_sc_unop(proc, (troupe_unop_t)e->u.op.op, a[0]);
    }
    default:
        return e;
    }
}

/* Builds the rewritten body into *out. On failure either *failed >= 0 names a node whose
 * inlining did not fit (the caller rejects it and retries) or a builder ran out of memory. */
static troupe_status_t s_rewrite(s_ctx_t *c, troupe_ll_t **out, ptrdiff_t *failed)
{
    troupe_ll_proc_t *proc = c->proc;
    s_rw_t w = {c, -1, -1};
    *failed = -1;
    for (size_t i = 0; i < c->nn; i++)
        c->nd[i].stored.n = 0;
    troupe_ll_t **kept = troupe_ll_alloc(proc, (c->nitems + 1) * sizeof *kept);
    if (kept == NULL)
        return s_proc_oom(proc);
    size_t nkept = 0;
    for (size_t q = 0; q < c->nitems; q++) {
        bool unit = s_item_is_accepted_unit(c, q);
        w.self = unit ? (ptrdiff_t)c->item_writer[q] : -1;
        troupe_ll_t *r = s_rw_ll(&w, c->items[q]);
        if (r == NULL) {
            if (w.failed >= 0) {
                *failed = w.failed;
                return TROUPE_INVALID_ARGUMENT;
            }
            return s_proc_oom(proc);
        }
        if (unit) {
            if (!s_vec_push(&c->nd[c->item_writer[q]].stored, sizeof r, &r))
                return s_oom();
        } else {
            kept[nkept++] = r;
        }
    }
    *out = troupe_ll_seq(proc, nkept, kept);
    return *out != NULL ? TROUPE_OK : s_proc_oom(proc);
}

static troupe_status_t s_virtualize(s_ctx_t *c)
{
    troupe_status_t st = TROUPE_OK;
    size_t *order = troupe_calloc(c->nn + 1, sizeof *order);
    if (order == NULL)
        return s_oom();
    size_t norder = 0;
    for (size_t i = 0; i < c->nn; i++) {
        s_node_t *nd = &c->nd[i];
        if (nd->wpos.n == 0 || troupe_tnode_known_non_virtual(c->tns[i]))
            continue;
        if (!c->o.virtualize) {
            nd->state = S_REJECTED;
            nd->reject_reason = TROUPE_PROV_NV_DISABLED;
        } else if (!nd->struct_ok) {
            nd->state = S_REJECTED;
            nd->reject_reason = nd->reason;
        } else {
            nd->state = S_ACCEPTED;
        }
        order[norder++] = i;
    }
    /* By last definition unit: a node's inputs that are virtual come earlier. Insertion sort
     * (candidate lists are short). */
    for (size_t k = 1; k < norder; k++) {
        size_t v = order[k], j = k;
        size_t lv = S_AT(c->nd[v].wpos, size_t, c->nd[v].wpos.n - 1);
        while (j > 0 &&
               S_AT(c->nd[order[j - 1]].wpos, size_t, c->nd[order[j - 1]].wpos.n - 1) > lv) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    troupe_ll_t *body = NULL;
    for (;;) {
        if ((st = s_stability(c, order, norder)) != TROUPE_OK)
            goto out;
        ptrdiff_t failed;
        st = s_rewrite(c, &body, &failed);
        if (st == TROUPE_OK)
            break;
        if (failed < 0)
            goto out;
        troupe_clear_error();
        c->nd[failed].state = S_REJECTED;
        c->nd[failed].reject_reason = TROUPE_PROV_NV_INDEX_TOO_COMPLEX;
    }
    /* Rejections first: a node the user set Virtual that cannot be inlined is an error, and
     * the body is still intact then. */
    for (size_t k = 0; k < norder; k++) {
        size_t i = order[k];
        if (c->nd[i].state != S_REJECTED)
            continue;
        char why[160];
        snprintf(why, sizeof why, "it cannot be inlined: %s",
                 s_reason_text(c->nd[i].reject_reason));
        if ((st = s_update(c, c->tns[i], s_mode(TROUPE_MM_NEVER_VIRTUAL, 0), c->nd[i].reject_reason,
                           why)) != TROUPE_OK)
            goto out;
    }
    c->proc->body = body;
    for (size_t k = 0; k < norder; k++) {
        size_t i = order[k];
        if (c->nd[i].state != S_ACCEPTED)
            continue;
        int32_t prov =
            c->nd[i].constexpr_wanted ? TROUPE_PROV_SCALAR_CONSTEXPR : TROUPE_PROV_VIRTUALIZED;
        if ((st = s_update(c, c->tns[i], s_mode(TROUPE_MM_VIRTUAL, 0), prov, "inlined")) !=
            TROUPE_OK)
            goto out;
    }
out:
    troupe_free(order);
    return st;
}

/* ---- step 4: simplification (OCANNL simplify_llc) ------------------------------------------- */

typedef enum s_arith {
    S_ARITH_NONE = 0, /* uint4x32, void, a where's condition: structural rules only */
    S_ARITH_INT,      /* integer C semantics: identities, no folding */
    S_ARITH_FLOAT_S,  /* computed in float: single, half, bfloat16, fp8 */
    S_ARITH_FLOAT_D,  /* double */
} s_arith_t;

static s_arith_t s_arith_of(troupe_prec_t p)
{
    switch (p) {
    case TROUPE_PREC_DOUBLE:
        return S_ARITH_FLOAT_D;
    case TROUPE_PREC_SINGLE:
    case TROUPE_PREC_HALF:
    case TROUPE_PREC_BFLOAT16:
    case TROUPE_PREC_FP8:
        return S_ARITH_FLOAT_S;
    case TROUPE_PREC_BYTE:
    case TROUPE_PREC_UINT16:
    case TROUPE_PREC_INT32:
    case TROUPE_PREC_UINT32:
    case TROUPE_PREC_INT64:
    case TROUPE_PREC_UINT64:
        return S_ARITH_INT;
    default:
        return S_ARITH_NONE;
    }
}

typedef struct s_scope {
    int32_t id;
    troupe_tnode_t *tn;
    const troupe_axis_index_t *orig;
} s_scope_t;

typedef struct s_simp {
    s_ctx_t *c;
    s_vec_t scopes; /* s_scope_t stack */
    bool oom;
} s_simp_t;

/* The expression's context: its precision and the node (with indices) a helper local scope
 * may be named after. */
typedef struct s_sctx {
    troupe_prec_t prec;
    troupe_tnode_t *tn;
    const troupe_axis_index_t *idcs;
} s_sctx_t;

static bool s_is_const(const troupe_sc_t *e, double v)
{
    return e->kind == TROUPE_SC_CONSTANT && e->u.constant == v;
}

static bool s_fold_unop_ok(troupe_unop_t op)
{
    switch (op) {
    case TROUPE_UNOP_IDENTITY:
    case TROUPE_UNOP_RELU:
    case TROUPE_UNOP_SATUR01:
    case TROUPE_UNOP_NEG:
    case TROUPE_UNOP_NOT:
    case TROUPE_UNOP_SQRT:
    case TROUPE_UNOP_RECIP:
        return true;
    default: /* exp log exp2 log2 sin cos recip_sqrt tanh_approx: libm, not exact */
        return false;
    }
}

static bool s_fold_binop_ok(troupe_binop_t op)
{
    switch (op) {
    case TROUPE_BINOP_ARG1:
    case TROUPE_BINOP_ARG2:
    case TROUPE_BINOP_ADD:
    case TROUPE_BINOP_SUB:
    case TROUPE_BINOP_MUL:
    case TROUPE_BINOP_DIV:
    case TROUPE_BINOP_RELU_GATE:
    case TROUPE_BINOP_SATUR01_GATE:
    case TROUPE_BINOP_MAX:
    case TROUPE_BINOP_MIN:
    case TROUPE_BINOP_MOD:
    case TROUPE_BINOP_CMPLT:
    case TROUPE_BINOP_CMPEQ:
    case TROUPE_BINOP_CMPNE:
    case TROUPE_BINOP_OR:
    case TROUPE_BINOP_AND:
        return true;
    default: /* to_pow_of (pow is not exact), threefry */
        return false;
    }
}

/* Rounds a folded operand/result to what the context computes with; false when it is not a
 * finite value of that type (nothing is folded then). */
static bool s_round_ctx(s_arith_t a, double x, double *out)
{
    if (!isfinite(x))
        return false;
    if (a == S_ARITH_FLOAT_S) {
        if (fabs(x) > FLT_MAX)
            return false;
        x = (double)(float)x;
    }
    *out = x;
    return true;
}

/* A value that cannot be NaN or infinite. */
static bool s_provably_finite(const troupe_sc_t *e)
{
    return (e->kind == TROUPE_SC_CONSTANT && isfinite(e->u.constant)) ||
           e->kind == TROUPE_SC_EMBED_INDEX;
}

static bool s_uses_local(const troupe_sc_t *e, int32_t id);

static bool s_ll_uses_local(const troupe_ll_t *s, int32_t id)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t k = 0; k < s->u.seq.count; k++)
            if (s_ll_uses_local(s->u.seq.items[k], id))
                return true;
        return false;
    case TROUPE_LL_FOR:
        return s_ll_uses_local(s->u.for_loop.body, id);
    case TROUPE_LL_SET:
        return s_uses_local(s->u.set.value, id);
    case TROUPE_LL_SET_FROM_VEC:
        return s_uses_local(s->u.set_from_vec.arg, id);
    case TROUPE_LL_SET_LOCAL:
        return s->u.set_local.id == id || s_uses_local(s->u.set_local.value, id);
    default:
        return false;
    }
}

static bool s_uses_local(const troupe_sc_t *e, int32_t id)
{
    switch (e->kind) {
    case TROUPE_SC_GET_LOCAL:
        return e->u.get_local.id == id;
    case TROUPE_SC_LOCAL_SCOPE:
        return s_ll_uses_local(e->u.local_scope.body, id);
    case TROUPE_SC_TERNOP:
        return s_uses_local(e->u.op.args[0], id) || s_uses_local(e->u.op.args[1], id) ||
               s_uses_local(e->u.op.args[2], id);
    case TROUPE_SC_BINOP:
        return s_uses_local(e->u.op.args[0], id) || s_uses_local(e->u.op.args[1], id);
    case TROUPE_SC_UNOP:
        return s_uses_local(e->u.op.args[0], id);
    default:
        return false;
    }
}

static bool s_simple_base(const troupe_sc_t *e)
{
    return e->kind == TROUPE_SC_GET || e->kind == TROUPE_SC_GET_LOCAL ||
           e->kind == TROUPE_SC_GET_MERGE_BUFFER || e->kind == TROUPE_SC_CONSTANT ||
           e->kind == TROUPE_SC_EMBED_INDEX;
}

/* x ** n for 2 <= n <= 8 as ((x*x)*x)... ; a base that is not a plain read is computed once
 * in a local scope named after the context node. NULL: builder failure, or `e` unchanged when
 * there is no context node (returned via *keep). */
static troupe_sc_t *s_expand_pow(s_simp_t *m, troupe_sc_t *base, int n, s_sctx_t x, bool *keep)
{
    troupe_ll_proc_t *proc = m->c->proc;
    *keep = false;
    if (s_simple_base(base)) {
        troupe_sc_t *prod = troupe_sc_copy(proc, base);
        for (int k = 2; k <= n; k++)
            prod = troupe_sc_binop(proc, TROUPE_BINOP_MUL, prod, troupe_sc_copy(proc, base));
        return prod;
    }
    if (x.tn == NULL || x.tn->prec != x.prec) {
        *keep = true;
        return NULL;
    }
    int32_t id = troupe_ll_proc_new_scope_id(proc);
    troupe_sc_t *prod = troupe_sc_get_local(proc, id);
    for (int k = 2; k <= n; k++)
        prod = troupe_sc_binop(proc, TROUPE_BINOP_MUL, prod, troupe_sc_get_local(proc, id));
    troupe_ll_t *body = troupe_ll_seq2(proc, troupe_ll_set_local(proc, id, base),
                                       troupe_ll_set_local(proc, id, prod));
    return troupe_sc_local_scope(proc, id, x.tn, body, x.idcs);
}

static troupe_sc_t *s_simp_sc(s_simp_t *m, troupe_sc_t *e, s_sctx_t x);
static troupe_ll_t *s_simp_ll(s_simp_t *m, troupe_ll_t *s);

static troupe_sc_t *s_simp_unop(s_simp_t *m, troupe_sc_t *e, s_sctx_t x)
{
    troupe_ll_proc_t *proc = m->c->proc;
    troupe_unop_t op = (troupe_unop_t)e->u.op.op;
    s_sctx_t ax = x;
    if (op == TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1) {
        ax.prec = TROUPE_PREC_UINT4X32;
        ax.tn = NULL;
    }
    troupe_sc_t *a = s_simp_sc(m, e->u.op.args[0], ax);
    if (a == NULL)
        return NULL;
    if (op == TROUPE_UNOP_IDENTITY)
        return a;
    s_arith_t ar = s_arith_of(x.prec);
    double va, r;
    if ((ar == S_ARITH_FLOAT_S || ar == S_ARITH_FLOAT_D) && a->kind == TROUPE_SC_CONSTANT &&
        s_fold_unop_ok(op) && s_round_ctx(ar, a->u.constant, &va) &&
        s_round_ctx(ar, troupe_interpret_unop(op, va), &r))
        return troupe_sc_constant(proc, r);
    if (op == TROUPE_UNOP_NEG && a->kind == TROUPE_SC_UNOP && a->u.op.op == TROUPE_UNOP_NEG &&
        ar != S_ARITH_NONE)
        return a->u.op.args[0];
    return a == e->u.op.args[0] ? e : troupe_sc_unop(proc, op, a);
}

static troupe_sc_t *s_simp_binop(s_simp_t *m, troupe_sc_t *e, s_sctx_t x)
{
    troupe_ll_proc_t *proc = m->c->proc;
    troupe_binop_t op = (troupe_binop_t)e->u.op.op;
    troupe_sc_t *a = s_simp_sc(m, e->u.op.args[0], x);
    troupe_sc_t *b = a ? s_simp_sc(m, e->u.op.args[1], x) : NULL;
    if (b == NULL)
        return NULL;
    if (op == TROUPE_BINOP_ARG1)
        return a;
    if (op == TROUPE_BINOP_ARG2)
        return b;
    s_arith_t ar = s_arith_of(x.prec);
    bool is_float = ar == S_ARITH_FLOAT_S || ar == S_ARITH_FLOAT_D;
    double va, vb, r;
    if (is_float && a->kind == TROUPE_SC_CONSTANT && b->kind == TROUPE_SC_CONSTANT &&
        s_fold_binop_ok(op) && s_round_ctx(ar, a->u.constant, &va) &&
        s_round_ctx(ar, b->u.constant, &vb) &&
        s_round_ctx(ar, troupe_interpret_binop(op, va, vb), &r))
        return troupe_sc_constant(proc, r);
    if (ar != S_ARITH_NONE) {
        switch (op) {
        case TROUPE_BINOP_ADD:
            if (s_is_const(b, 0.0))
                return a;
            if (s_is_const(a, 0.0))
                return b;
            break;
        case TROUPE_BINOP_SUB:
            if (s_is_const(b, 0.0))
                return a;
            break;
        case TROUPE_BINOP_MUL:
            if (s_is_const(b, 1.0))
                return a;
            if (s_is_const(a, 1.0))
                return b;
            if ((s_is_const(b, 0.0) &&
                 (ar == S_ARITH_INT || m->c->o.fold_mul_by_zero || s_provably_finite(a))) ||
                (s_is_const(a, 0.0) &&
                 (ar == S_ARITH_INT || m->c->o.fold_mul_by_zero || s_provably_finite(b))))
                return troupe_sc_constant(proc, 0.0);
            break;
        case TROUPE_BINOP_DIV:
            if (s_is_const(b, 1.0))
                return a;
            break;
        case TROUPE_BINOP_TO_POW_OF:
            if (m->c->o.expand_integer_pow && b->kind == TROUPE_SC_CONSTANT &&
                b->u.constant == floor(b->u.constant) && b->u.constant >= -1.0 &&
                b->u.constant <= 8.0) {
                int n = (int)b->u.constant;
                if (n == 1)
                    return a;
                if (n == 0)
                    return troupe_sc_constant(proc, 1.0);
                if (n == -1) {
                    troupe_sc_t *rc = troupe_sc_unop(proc, TROUPE_UNOP_RECIP, a);
                    return rc == NULL ? NULL : s_simp_unop(m, rc, x);
                }
                bool keep;
                troupe_sc_t *p = s_expand_pow(m, a, n, x, &keep);
                if (!keep)
                    return p == NULL ? NULL : s_simp_sc(m, p, x);
            }
            break;
        default:
            break;
        }
    }
    if (op == TROUPE_BINOP_ADD && is_float && m->c->o.fuse_fma) {
        if (a->kind == TROUPE_SC_BINOP && a->u.op.op == TROUPE_BINOP_MUL)
            return troupe_sc_ternop(proc, TROUPE_TERNOP_FMA, a->u.op.args[0], a->u.op.args[1], b);
        if (b->kind == TROUPE_SC_BINOP && b->u.op.op == TROUPE_BINOP_MUL)
            return troupe_sc_ternop(proc, TROUPE_TERNOP_FMA, b->u.op.args[0], b->u.op.args[1], a);
    }
    if (a == e->u.op.args[0] && b == e->u.op.args[1])
        return e;
    return troupe_sc_binop(proc, op, a, b);
}

/* A where-condition constant whose truth is the same in every precision. */
static bool s_cond_const(const troupe_sc_t *e, bool *truth)
{
    if (e->kind != TROUPE_SC_CONSTANT)
        return false;
    double v = e->u.constant;
    if (v == 0.0) {
        *truth = false;
        return true;
    }
    if (v == floor(v) && v >= 1.0 && v <= 127.0) {
        *truth = true;
        return true;
    }
    return false;
}

static troupe_sc_t *s_simp_ternop(s_simp_t *m, troupe_sc_t *e, s_sctx_t x)
{
    troupe_ll_proc_t *proc = m->c->proc;
    troupe_ternop_t op = (troupe_ternop_t)e->u.op.op;
    s_sctx_t cx = x;
    if (op == TROUPE_TERNOP_WHERE) {
        cx.prec = TROUPE_PREC_VOID; /* the condition keeps its own precision */
        cx.tn = NULL;
    }
    troupe_sc_t *a = s_simp_sc(m, e->u.op.args[0], cx);
    troupe_sc_t *b = a ? s_simp_sc(m, e->u.op.args[1], x) : NULL;
    troupe_sc_t *d = b ? s_simp_sc(m, e->u.op.args[2], x) : NULL;
    if (d == NULL)
        return NULL;
    bool truth;
    if (op == TROUPE_TERNOP_WHERE && s_cond_const(a, &truth))
        return truth ? b : d;
    double r;
    if (op == TROUPE_TERNOP_FMA && s_arith_of(x.prec) == S_ARITH_FLOAT_D &&
        a->kind == TROUPE_SC_CONSTANT && b->kind == TROUPE_SC_CONSTANT &&
        d->kind == TROUPE_SC_CONSTANT && isfinite(a->u.constant) && isfinite(b->u.constant) &&
        isfinite(d->u.constant) &&
        s_round_ctx(S_ARITH_FLOAT_D,
                    troupe_interpret_ternop(op, a->u.constant, b->u.constant, d->u.constant), &r))
        return troupe_sc_constant(proc, r);
    if (a == e->u.op.args[0] && b == e->u.op.args[1] && d == e->u.op.args[2])
        return e;
    return troupe_sc_ternop(proc, op, a, b, d);
}

static troupe_sc_t *s_simp_sc(s_simp_t *m, troupe_sc_t *e, s_sctx_t x)
{
    troupe_ll_proc_t *proc = m->c->proc;
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE: {
        s_scope_t sc = {e->u.local_scope.id, e->u.local_scope.tn, e->u.local_scope.orig_indices};
        if (!s_vec_push(&m->scopes, sizeof sc, &sc)) {
            m->oom = true;
            return NULL;
        }
        troupe_ll_t *b = s_simp_ll(m, e->u.local_scope.body);
        m->scopes.n--;
        if (b == NULL)
            return NULL;
        if (b->kind == TROUPE_LL_SET_LOCAL && b->u.set_local.id == sc.id && sc.tn->prec == x.prec &&
            !s_uses_local(b->u.set_local.value, sc.id))
            return b->u.set_local.value;
        if (b == e->u.local_scope.body)
            return e;
        return troupe_sc_local_scope(proc, sc.id, sc.tn, b, sc.orig);
    }
    case TROUPE_SC_UNOP:
        return s_simp_unop(m, e, x);
    case TROUPE_SC_BINOP:
        return s_simp_binop(m, e, x);
    case TROUPE_SC_TERNOP:
        return s_simp_ternop(m, e, x);
    default:
        return e;
    }
}

static troupe_ll_t *s_simp_ll(s_simp_t *m, troupe_ll_t *s)
{
    troupe_ll_proc_t *proc = m->c->proc;
    switch (s->kind) {
    case TROUPE_LL_SEQ: {
        troupe_ll_t **items = troupe_ll_alloc(proc, (s->u.seq.count + 1) * sizeof *items);
        if (items == NULL)
            return NULL;
        bool changed = false;
        for (size_t k = 0; k < s->u.seq.count; k++) {
            if ((items[k] = s_simp_ll(m, s->u.seq.items[k])) == NULL)
                return NULL;
            changed = changed || items[k] != s->u.seq.items[k];
        }
        return changed ? troupe_ll_seq(proc, s->u.seq.count, items) : s;
    }
    case TROUPE_LL_FOR: {
        troupe_ll_t *b = s_simp_ll(m, s->u.for_loop.body);
        if (b == NULL)
            return NULL;
        if (b->kind == TROUPE_LL_NOOP)
            return b;
        return s_with_body(proc, s, b);
    }
    case TROUPE_LL_SET: {
        s_sctx_t x = {s->u.set.tn->prec, s->u.set.tn, s->u.set.idcs};
        return s_with_value(proc, s, s_simp_sc(m, s->u.set.value, x));
    }
    case TROUPE_LL_SET_FROM_VEC: {
        s_sctx_t x = {TROUPE_PREC_UINT4X32, NULL, NULL};
        return s_with_value(proc, s, s_simp_sc(m, s->u.set_from_vec.arg, x));
    }
    case TROUPE_LL_SET_LOCAL: {
        s_sctx_t x = {TROUPE_PREC_VOID, NULL, NULL};
        for (size_t k = m->scopes.n; k-- > 0;) {
            s_scope_t *sc = &S_AT(m->scopes, s_scope_t, k);
            if (sc->id == s->u.set_local.id) {
                x.prec = sc->tn->prec;
                x.tn = sc->tn;
                x.idcs = sc->orig;
                break;
            }
        }
        return s_with_value(proc, s, s_simp_sc(m, s->u.set_local.value, x));
    }
    default:
        return s;
    }
}

/* ---- step 5 and the driver ---------------------------------------------------------------- */

void troupe_optimize_opts_default(troupe_optimize_opts_t *opts)
{
    opts->virtualize_max_visits = 1;
    opts->virtualize_max_tracing_dim = 5;
    opts->max_trace_steps = (int64_t)1 << 20;
    opts->inline_scalar_constexprs = true;
    opts->inline_simple_computations = true;
    opts->inline_complex_computations = false;
    opts->inline_narrow_precisions = false;
    opts->virtualize = true;
    opts->simplify = true;
    opts->fuse_fma = true;
    opts->expand_integer_pow = true;
    opts->fold_mul_by_zero = false;
}

const troupe_ll_traced_t *troupe_optimize_traced(const troupe_ll_proc_t *proc,
                                                 const troupe_tnode_t *tn)
{
    if (proc == NULL || tn == NULL || !proc->optimized || proc->traced == NULL)
        return NULL;
    ptrdiff_t i = troupe_ll_proc_node_index(proc, tn);
    return i < 0 ? NULL : &proc->traced[i];
}

static void s_ctx_free(s_ctx_t *c)
{
    if (c->nd != NULL)
        for (size_t i = 0; i < c->nn; i++) {
            s_node_t *nd = &c->nd[i];
            s_vec_free(&nd->wpos);
            s_vec_free(&nd->rpos);
            s_vec_free(&nd->unit_I);
            s_vec_free(&nd->R);
            s_vec_free(&nd->stored);
            troupe_free(nd->elems.slots);
        }
    if (c->item_reads != NULL)
        for (size_t q = 0; q < c->nitems; q++)
            s_vec_free(&c->item_reads[q]);
    troupe_free(c->item_reads);
    troupe_free(c->item_nwriters);
    troupe_free(c->item_writer);
    troupe_free(c->nd);
    troupe_free(c->traced);
    troupe_free(c->tns);
    troupe_free(c->env);
}

/* Resolves placeholders, chaining the provenance so the reason that chose the placeholder
 * stays visible (e.g. 1703: Never_virtual for repeated reads, then Local). */
static void s_resolve(troupe_tnode_t *tn)
{
    troupe_memory_mode_t m;
    int32_t prov = 0;
    bool has = troupe_tnode_get_memory_mode(tn, &m, &prov);
    if (has && (m.kind == TROUPE_MM_VIRTUAL || m.kind == TROUPE_MM_LOCAL ||
                m.kind == TROUPE_MM_ON_DEVICE || m.kind == TROUPE_MM_HOSTED))
        return;
    int64_t chained = has ? (int64_t)prov * 1000 + TROUPE_PROV_RESOLVED : TROUPE_PROV_RESOLVED;
    if (chained > INT32_MAX || chained < INT32_MIN)
        chained = TROUPE_PROV_RESOLVED;
    troupe_tnode_default_to_most_local(tn, (int32_t)chained);
}

static troupe_status_t s_finish(s_ctx_t *c)
{
    troupe_ll_proc_t *proc = c->proc;
    troupe_ll_traced_t *traced = troupe_calloc(proc->nnodes + 1, sizeof *traced);
    troupe_tnode_t **ins = troupe_calloc(proc->nnodes + 1, sizeof *ins);
    troupe_tnode_t **outs = troupe_calloc(proc->nnodes + 1, sizeof *outs);
    if (traced == NULL || ins == NULL || outs == NULL) {
        troupe_free(traced);
        troupe_free(ins);
        troupe_free(outs);
        return s_oom();
    }
    size_t nin = 0, nout = 0;
    for (size_t k = 0; k < proc->nnodes; k++) {
        troupe_tnode_t *tn = proc->nodes[k];
        ptrdiff_t i = s_node_of(c, tn);
        if (i >= 0)
            traced[k] = c->traced[i];
        traced[k].tn = tn;
        s_resolve(tn);
        if (!troupe_tnode_is_materialized_force(tn, TROUPE_PROV_RESOLVED))
            continue;
        const troupe_ll_traced_t *tr = &traced[k];
        if (!troupe_tnode_known_constant(tn) &&
            ((tr->read_only && tr->is_accessing) || tr->read_before_write))
            ins[nin++] = tn;
        if (tr->assignments > 0)
            outs[nout++] = tn;
    }
    troupe_free(proc->traced);
    troupe_free(proc->inputs);
    troupe_free(proc->outputs);
    proc->traced = traced;
    proc->inputs = ins;
    proc->ninputs = nin;
    proc->outputs = outs;
    proc->noutputs = nout;
    proc->merge_node = c->merge;
    return TROUPE_OK;
}

troupe_status_t troupe_ll_optimize(troupe_ll_proc_t *proc, const troupe_optimize_opts_t *opts)
{
    if (proc == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_ll_optimize: proc is NULL");
    s_ctx_t c;
    memset(&c, 0, sizeof c);
    c.proc = proc;
    if (opts != NULL)
        c.o = *opts;
    else
        troupe_optimize_opts_default(&c.o);
    if (c.o.virtualize_max_visits < 0 || c.o.virtualize_max_tracing_dim < 0 ||
        c.o.max_trace_steps < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_ll_optimize: negative limit in the options");
    troupe_status_t st = troupe_ll_proc_validate(proc);
    if (st != TROUPE_OK)
        return st;
    proc->optimized = false;

    /* Context: node snapshot, items. */
    c.nn = proc->nnodes;
    c.tns = troupe_calloc(c.nn + 1, sizeof *c.tns);
    c.traced = troupe_calloc(c.nn + 1, sizeof *c.traced);
    c.nd = troupe_calloc(c.nn + 1, sizeof *c.nd);
    c.env_syms = proc->nsyms;
    c.env = troupe_calloc((size_t)proc->nsyms + 1, sizeof *c.env);
    if (c.tns == NULL || c.traced == NULL || c.nd == NULL || c.env == NULL) {
        st = s_oom();
        goto out;
    }
    if (c.nn > 0)
        memcpy(c.tns, proc->nodes, c.nn * sizeof *c.tns);
    for (size_t i = 0; i < c.nn; i++)
        c.traced[i].tn = c.tns[i];
    if (proc->body->kind == TROUPE_LL_SEQ) {
        c.items = proc->body->u.seq.items;
        c.nitems = proc->body->u.seq.count;
    } else {
        c.items = &proc->body;
        c.nitems = 1;
    }
    c.item_reads = troupe_calloc(c.nitems + 1, sizeof *c.item_reads);
    c.item_nwriters = troupe_calloc(c.nitems + 1, sizeof *c.item_nwriters);
    c.item_writer = troupe_calloc(c.nitems + 1, sizeof *c.item_writer);
    if (c.item_reads == NULL || c.item_nwriters == NULL || c.item_writer == NULL) {
        st = s_oom();
        goto out;
    }

    /* Step 1: scan, trace, derive. */
    s_self_t none = {NULL, NULL};
    for (size_t q = 0; q < c.nitems; q++)
        if ((st = s_scan_ll(&c, q, c.items[q], none)) != TROUPE_OK)
            goto out;
    for (size_t i = 0; i < c.nn; i++) {
        for (size_t k = 0; k < c.nd[i].rpos.n; k++)
            if (!s_vec_push(&c.item_reads[S_AT(c.nd[i].rpos, size_t, k)], sizeof i, &i)) {
                st = s_oom();
                goto out;
            }
        c.traced[i].read_only = c.traced[i].assignments == 0;
    }
    c.sampled = s_count_ll(proc->body) > (uint64_t)c.o.max_trace_steps;
    if ((st = s_tr_ll(&c, proc->body, none)) != TROUPE_OK)
        goto out;
    for (size_t i = 0; i < c.nn; i++)
        c.traced[i].is_scalar_constexpr = s_constexpr_node(&c, i);
    s_complexity_ll(&c, proc->body);
    for (size_t i = 0; i < c.nn; i++) {
        if (c.nd[i].wpos.n == 0)
            continue;
        if ((st = s_analyse_units(&c, i)) != TROUPE_OK)
            goto out;
        if (c.nd[i].has_reduction)
            c.traced[i].is_complex = true;
    }

    /* Step 2. */
    if ((st = s_infer_modes(&c)) != TROUPE_OK)
        goto out;
    /* Step 3. */
    if ((st = s_virtualize(&c)) != TROUPE_OK)
        goto out;
    /* Step 4. */
    if (c.o.simplify) {
        s_simp_t m;
        memset(&m, 0, sizeof m);
        m.c = &c;
        troupe_ll_t *b = s_simp_ll(&m, proc->body);
        s_vec_free(&m.scopes);
        if (b == NULL) {
            st = m.oom ? s_oom() : s_proc_oom(proc);
            goto out;
        }
        proc->body = b;
    }
    if (proc->sticky != TROUPE_OK) {
        st = s_proc_oom(proc);
        goto out;
    }
    /* Step 5. */
    if ((st = s_finish(&c)) != TROUPE_OK)
        goto out;
    st = troupe_ll_proc_validate(proc);
    if (st != TROUPE_OK) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        st = troupe__error(TROUPE_INTERNAL, "optimizer bug: %s no longer validates: %s", proc->name,
                           msg);
        goto out;
    }
    proc->optimized = true;
out:
    s_ctx_free(&c);
    return st;
}
