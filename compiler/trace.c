/* troupe — step 1 of the optimiser: tracing (OCANNL `visit_llc`, `is_constexpr_comp`,
 * `is_accessing_comp`, `is_complex_comp`; compiler/optimize.h step 1, compiler/optimize_impl.h).
 *
 * s_scan_* is a static walk of the top-level items (who writes and reads what, where); s_tr_* is
 * the concrete walk over loop values (sampled when the full walk is too long), counting visits
 * per cell (a dense array per node up to TROUPE__OPT_DENSE_MAX_CELLS cells, else a map; the
 * reference implementation, troupe__opt_set_reference, keeps maps only); then constant
 * expressions and complexity are derived per node. */
#include "compiler/optimize_impl.h"

#include <string.h>

/* ---- per-node cell map (flat offset -> visits, assigned) ----------------------------------- */

static size_t s_hash(int64_t key, size_t mask)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & mask;
}

static troupe__opt_elem_t *s_emap_get(troupe__opt_emap_t *m, int64_t key)
{
    if ((m->count + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        troupe__opt_elem_t *slots = troupe_calloc(cap, sizeof *slots);
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

static troupe_status_t s_unknown_node(const troupe__opt_ctx_t *c, const troupe_tnode_t *tn)
{
    return troupe__error(TROUPE_INTERNAL, "procedure %s: node #%d is not in its node list",
                         c->proc->name, tn ? tn->id : -1);
}

static bool s_scalar_dims(const troupe_tnode_t *tn)
{
    for (int a = 0; a < tn->ndims; a++)
        if (tn->dims[a] != 1)
            return false;
    return true;
}

static bool s_push_pos(troupe__opt_pos_t *v, size_t item)
{
    if (v->n > 0 && v->at[v->n - 1] == item)
        return true;
    return TROUPE__OPT_PUSH(*v, item);
}

/* ---- step 1a: static scan of the top-level items ------------------------------------------- */

typedef struct s_self {
    const troupe_tnode_t *tn;
    const troupe_axis_index_t *idcs;
} s_self_t;

static bool s_is_self(s_self_t self, const troupe_tnode_t *tn, const troupe_axis_index_t *idcs)
{
    return self.tn == tn && troupe_axis_indices_equal(self.idcs, idcs, tn->ndims);
}

static troupe_status_t s_note_write(troupe__opt_ctx_t *c, size_t item, const troupe_tnode_t *tn)
{
    ptrdiff_t i = troupe__opt_node_of(c, tn);
    if (i < 0)
        return s_unknown_node(c, tn);
    c->traced[i].assignments++;
    if (c->in_bind > 0)
        c->nd[i].gather_access = true;
    troupe__opt_pos_t *w = &c->nd[i].wpos;
    if (w->n == 0 || w->at[w->n - 1] != item) {
        if (!TROUPE__OPT_PUSH(*w, item))
            return troupe__opt_oom();
        if (c->item_nwriters[item]++ == 0)
            c->item_writer[item] = (size_t)i;
    }
    return TROUPE_OK;
}

static troupe_status_t s_scan_sc(troupe__opt_ctx_t *c, size_t item, const troupe_sc_t *e,
                                 s_self_t self);

static troupe_status_t s_scan_ll(troupe__opt_ctx_t *c, size_t item, const troupe_ll_t *s,
                                 s_self_t self)
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
        c->nd[troupe__opt_node_of(c, s->u.set_from_vec.tn)].vec_write = true;
        s_self_t none = {NULL, NULL};
        return s_scan_sc(c, item, s->u.set_from_vec.arg, none);
    }
    case TROUPE_LL_SET_LOCAL:
        return s_scan_sc(c, item, s->u.set_local.value, self);
    case TROUPE_LL_BIND_INDEX: {
        /* the index node is read like a GET; everything under it stays materialized */
        troupe_sc_t get;
        memset(&get, 0, sizeof get);
        get.kind = TROUPE_SC_GET;
        get.u.get.tn = s->u.bind_index.tn;
        get.u.get.idcs = s->u.bind_index.idcs;
        c->in_bind++;
        troupe_status_t st = s_scan_sc(c, item, &get, self);
        if (st == TROUPE_OK)
            st = s_scan_ll(c, item, s->u.bind_index.body, self);
        c->in_bind--;
        return st;
    }
    }
    return troupe__error(TROUPE_INTERNAL, "unknown statement kind %d", (int)s->kind);
}

static troupe_status_t s_scan_sc(troupe__opt_ctx_t *c, size_t item, const troupe_sc_t *e,
                                 s_self_t self)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        return s_scan_ll(c, item, e->u.local_scope.body, self);
    case TROUPE_SC_GET: {
        ptrdiff_t i = troupe__opt_node_of(c, e->u.get.tn);
        if (i < 0)
            return s_unknown_node(c, e->u.get.tn);
        c->traced[i].is_accessing = true;
        if (c->in_bind > 0)
            c->nd[i].gather_access = true;
        if (!s_push_pos(&c->nd[i].rpos, item))
            return troupe__opt_oom();
        if (!s_is_self(self, e->u.get.tn, e->u.get.idcs))
            c->nd[i].external_read = true;
        return TROUPE_OK;
    }
    case TROUPE_SC_GET_MERGE_BUFFER: {
        ptrdiff_t i = troupe__opt_node_of(c, e->u.get.tn);
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
    case TROUPE_LL_BIND_INDEX:
        return s_sat_add(1, s_count_ll(s->u.bind_index.body));
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

/* Static symbols (and anything unbound) read as 0, as OCANNL. The reference checks the
 * symbol's kind at every read; otherwise env never holds a value for a static symbol (the
 * loop over one, if any, stores 0), so the read needs no check. */
static int64_t s_index_value(const troupe__opt_ctx_t *c, const troupe_axis_index_t *ix)
{
    int64_t v = ix->offset;
    for (int k = 0; k < ix->nterms; k++) {
        int32_t sym = ix->terms[k].sym;
        int64_t x = 0;
        if (sym >= 0 && sym < c->env_syms && (!c->reference || !c->proc->syms[sym].is_static))
            x = c->env[sym];
        v += ix->terms[k].coeff * x;
    }
    return v;
}

static int64_t s_flat(const troupe__opt_ctx_t *c, const troupe_tnode_t *tn,
                      const troupe_axis_index_t *idcs)
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

/* The cell of node i at flat offset off: *dense (visits * 2 + assigned) or *el. false: out
 * of memory. */
typedef struct s_cell {
    int64_t *dense;
    troupe__opt_elem_t *el;
} s_cell_t;

static bool s_cell(troupe__opt_ctx_t *c, size_t i, int64_t off, s_cell_t *out)
{
    troupe__opt_node_t *nd = &c->nd[i];
    if (nd->dense_ok) {
        if (nd->dense == NULL &&
            (nd->dense = troupe_calloc((size_t)troupe_tnode_num_elems(c->tns[i]),
                                       sizeof *nd->dense)) == NULL)
            return false;
        out->dense = &nd->dense[off];
        out->el = NULL;
        return true;
    }
    out->dense = NULL;
    out->el = s_emap_get(&nd->elems, off);
    return out->el != NULL;
}

static bool s_cell_assigned(const s_cell_t *cell)
{
    return cell->dense ? (*cell->dense & 1) != 0 : cell->el->assigned;
}

static void s_cell_assign(s_cell_t *cell)
{
    if (cell->dense)
        *cell->dense |= 1;
    else
        cell->el->assigned = true;
}

/* One more visit; the cell's visits after it. */
static int64_t s_cell_visit(s_cell_t *cell)
{
    if (cell->dense)
        return (*cell->dense += 2) >> 1;
    return ++cell->el->visits;
}

/* Which nodes keep their cells densely (TROUPE__OPT_DENSE_MAX_CELLS); c->sampled is set. */
static void s_choose_cells(troupe__opt_ctx_t *c)
{
    if (c->reference)
        return;
    int64_t cap = c->sampled ? TROUPE__OPT_DENSE_SAMPLED_CELLS : TROUPE__OPT_DENSE_MAX_CELLS;
    for (size_t i = 0; i < c->nn; i++)
        c->nd[i].dense_ok = troupe_tnode_num_elems(c->tns[i]) > 0 && /* else s_flat may be -1 */
                            troupe_tnode_num_elems(c->tns[i]) <= cap;
}

static troupe_status_t s_tr_sc(troupe__opt_ctx_t *c, const troupe_sc_t *e, s_self_t self);

static troupe_status_t s_tr_ll(troupe__opt_ctx_t *c, const troupe_ll_t *s, s_self_t self)
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
        bool store = c->reference || !c->proc->syms[sym].is_static;
        for (int64_t k = 0; k < n; k++) {
            c->env[sym] = store ? s->u.for_loop.from + k : 0;
            TROUPE_RETURN_IF_ERROR(s_tr_ll(c, s->u.for_loop.body, self));
        }
        return TROUPE_OK;
    }
    case TROUPE_LL_ZERO_OUT: {
        ptrdiff_t i = troupe__opt_node_of(c, s->u.zero_out);
        troupe__opt_node_t *nd = &c->nd[i];
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
        ptrdiff_t i = troupe__opt_node_of(c, s->u.set.tn);
        troupe__opt_node_t *nd = &c->nd[i];
        s_cell_t cell;
        if (!s_cell(c, (size_t)i, s_flat(c, s->u.set.tn, s->u.set.idcs), &cell))
            return troupe__opt_oom();
        s_cell_assign(&cell);
        if (nd->n_assign_exec == 0)
            nd->first_value = s->u.set.value;
        nd->n_assign_exec++;
        return TROUPE_OK;
    }
    case TROUPE_LL_SET_FROM_VEC: {
        s_self_t none = {NULL, NULL};
        TROUPE_RETURN_IF_ERROR(s_tr_sc(c, s->u.set_from_vec.arg, none));
        const troupe_tnode_t *tn = s->u.set_from_vec.tn;
        ptrdiff_t i = troupe__opt_node_of(c, tn);
        troupe__opt_node_t *nd = &c->nd[i];
        int64_t base = s_flat(c, tn, s->u.set_from_vec.idcs);
        int64_t total = troupe_tnode_num_elems(tn);
        for (int k = 0; k < s->u.set_from_vec.length && base + k < total; k++) {
            s_cell_t cell;
            if (!s_cell(c, (size_t)i, base + k, &cell))
                return troupe__opt_oom();
            s_cell_assign(&cell);
        }
        if (nd->n_assign_exec == 0)
            nd->first_is_vec = true;
        nd->n_assign_exec++;
        return TROUPE_OK;
    }
    case TROUPE_LL_SET_LOCAL:
        return s_tr_sc(c, s->u.set_local.value, self);
    case TROUPE_LL_BIND_INDEX: {
        /* The bound value is data: trace the index read, then the body once with the value 0
         * as a representative (the nodes under a bind are kept materialized). */
        troupe_sc_t get;
        memset(&get, 0, sizeof get);
        get.kind = TROUPE_SC_GET;
        get.u.get.tn = s->u.bind_index.tn;
        get.u.get.idcs = s->u.bind_index.idcs;
        TROUPE_RETURN_IF_ERROR(s_tr_sc(c, &get, self));
        c->env[s->u.bind_index.sym] = 0;
        return s_tr_ll(c, s->u.bind_index.body, self);
    }
    }
    return troupe__error(TROUPE_INTERNAL, "unknown statement kind %d", (int)s->kind);
}

static troupe_status_t s_tr_sc(troupe__opt_ctx_t *c, const troupe_sc_t *e, s_self_t self)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        return s_tr_ll(c, e->u.local_scope.body, self);
    case TROUPE_SC_GET: {
        const troupe_tnode_t *tn = e->u.get.tn;
        ptrdiff_t i = troupe__opt_node_of(c, tn);
        troupe__opt_node_t *nd = &c->nd[i];
        troupe_ll_traced_t *tr = &c->traced[i];
        s_cell_t cell;
        if (!s_cell(c, (size_t)i, s_flat(c, tn, e->u.get.idcs), &cell))
            return troupe__opt_oom();
        /* Sampled, a loop writes only its first values, so a read through an affine or
         * transposed index (attention's "bt(64h+d)=>bhtd") can land on a cell the sampled
         * writes skipped: once the node has been written, such a read is taken as reading
         * what was written, not as a recurrent read (the full walk decides cell by cell). */
        if (!(tr->zeroed_out || s_cell_assigned(&cell)) && !(c->sampled && nd->n_assign_exec > 0))
            tr->read_before_write = true;
        if (nd->n_assign_exec == 0)
            nd->read_before_first_assign = true;
        nd->any_access = true;
        /* OCANNL: with inline_complex_computations an accumulation's read of the cell it
         * writes is part of the computation, not a visit. */
        if (!(c->o.inline_complex_computations && s_is_self(self, tn, e->u.get.idcs))) {
            int64_t visits = s_cell_visit(&cell);
            if (visits > tr->max_visits)
                tr->max_visits = visits;
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

static bool s_constexpr_sc(troupe__opt_ctx_t *c, const troupe_sc_t *e);

/* Scalar node assigned exactly once, before any read, from a constant expression. */
static bool s_constexpr_node(troupe__opt_ctx_t *c, size_t i)
{
    troupe__opt_node_t *nd = &c->nd[i];
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

static bool s_constexpr_sc(troupe__opt_ctx_t *c, const troupe_sc_t *e)
{
    switch (e->kind) {
    case TROUPE_SC_CONSTANT:
    case TROUPE_SC_CONSTANT_BITS:
        return true;
    case TROUPE_SC_GET: {
        ptrdiff_t i = troupe__opt_node_of(c, e->u.get.tn);
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

static bool s_accessing_sc(troupe__opt_ctx_t *c, const troupe_sc_t *e)
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

/* Whether e is a plain read of a node that stays stored: read-only here, known non-virtual, or
 * a complex computation read more often than a cheap one may be (compiler/optimize.h step 2).
 * A copy of such a read (an identity: attention's q, k and v out of qkv, a permuted view of a
 * product's output) is a simple computation, inlined where it is read: a product then reads
 * the stored node through its strides (compiler/gemm.h: slices of larger arrays). A copy of a
 * node that may itself be inlined stays complex, so a product never reads an inlined
 * definition. */
static bool s_stored_read(const troupe__opt_ctx_t *c, const troupe_sc_t *e)
{
    if (e->kind != TROUPE_SC_GET)
        return false;
    ptrdiff_t x = troupe__opt_node_of(c, e->u.get.tn);
    if (x < 0)
        return false;
    const troupe_ll_traced_t *tr = &c->traced[x];
    return tr->read_only || troupe_tnode_known_non_virtual(c->tns[x]) ||
           (tr->is_complex && tr->max_visits > c->o.virtualize_max_cheap_visits);
}

static bool s_complex_sc(troupe__opt_ctx_t *c, const troupe_sc_t *e)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
    case TROUPE_SC_GET_LOCAL:
        return true;
    case TROUPE_SC_UNOP:
        if (e->u.op.op == TROUPE_UNOP_IDENTITY && s_stored_read(c, e->u.op.args[0]))
            return false;
        return s_accessing_sc(c, e);
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
        return s_accessing_sc(c, e);
    default: /* a plain read, constants, indices */
        return false;
    }
}

/* Operations of e, TROUPE__OPT_COST_MAX when recomputing it at each read would cost more
 * than a load: transcendentals, powers, random bits, local scopes, merge-buffer reads. */
static int64_t s_cost_sc(const troupe_sc_t *e)
{
    int64_t n = 0;
    switch (e->kind) {
    case TROUPE_SC_GET:
    case TROUPE_SC_CONSTANT:
    case TROUPE_SC_CONSTANT_BITS:
    case TROUPE_SC_EMBED_INDEX:
        return 0;
    case TROUPE_SC_TERNOP:
        n = 1 + s_cost_sc(e->u.op.args[0]) + s_cost_sc(e->u.op.args[1]) +
            s_cost_sc(e->u.op.args[2]);
        break;
    case TROUPE_SC_BINOP:
        switch (e->u.op.op) {
        case TROUPE_BINOP_TO_POW_OF:
        case TROUPE_BINOP_MOD:
        case TROUPE_BINOP_THREEFRY4X32_CRYPTO:
        case TROUPE_BINOP_THREEFRY4X32_LIGHT:
            return TROUPE__OPT_COST_MAX;
        default:
            break;
        }
        n = 1 + s_cost_sc(e->u.op.args[0]) + s_cost_sc(e->u.op.args[1]);
        break;
    case TROUPE_SC_UNOP:
        switch (e->u.op.op) {
        case TROUPE_UNOP_EXP:
        case TROUPE_UNOP_LOG:
        case TROUPE_UNOP_EXP2:
        case TROUPE_UNOP_LOG2:
        case TROUPE_UNOP_SIN:
        case TROUPE_UNOP_COS:
        case TROUPE_UNOP_TANH_APPROX:
        case TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1:
            return TROUPE__OPT_COST_MAX;
        default:
            break;
        }
        n = 1 + s_cost_sc(e->u.op.args[0]);
        break;
    default: /* local scopes and their locals, merge-buffer reads */
        return TROUPE__OPT_COST_MAX;
    }
    return n < TROUPE__OPT_COST_MAX ? n : TROUPE__OPT_COST_MAX;
}

static void s_add_cost(troupe__opt_node_t *nd, int64_t cost)
{
    nd->cost = nd->cost + cost < TROUPE__OPT_COST_MAX ? nd->cost + cost : TROUPE__OPT_COST_MAX;
}

static void s_complexity_ll(troupe__opt_ctx_t *c, const troupe_ll_t *s)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t k = 0; k < s->u.seq.count; k++)
            s_complexity_ll(c, s->u.seq.items[k]);
        return;
    case TROUPE_LL_FOR:
        s_complexity_ll(c, s->u.for_loop.body);
        return;
    case TROUPE_LL_BIND_INDEX:
        s_complexity_ll(c, s->u.bind_index.body);
        return;
    case TROUPE_LL_SET: {
        ptrdiff_t i = troupe__opt_node_of(c, s->u.set.tn);
        if (s_complex_sc(c, s->u.set.value))
            c->traced[i].is_complex = true;
        s_add_cost(&c->nd[i], s_cost_sc(s->u.set.value));
        return;
    }
    case TROUPE_LL_SET_FROM_VEC: {
        ptrdiff_t i = troupe__opt_node_of(c, s->u.set_from_vec.tn);
        if (!s_constexpr_sc(c, s->u.set_from_vec.arg))
            c->traced[i].is_complex = true;
        c->nd[i].cost = TROUPE__OPT_COST_MAX;
        return;
    }
    default:
        return;
    }
}

/* Chain costs: a cheap definition reading cheap definitions is inlined with them, so what a
 * read recomputes is the whole chain (the residual stream's adds: layer k's sum reads every
 * earlier layer's output). A node is likely inlined when step 2 and 3 can make it virtual and
 * it is read once, or its chain is cheap and read at most virtualize_max_cheap_visits times.
 * Only nodes read more than once count: one read once sits in the loop that reads the node
 * (GELU's backward), where the C compiler shares it between the node's reads.
 * state: 0 not seen, 1 in progress (a recurrence: counts nothing), 2 done. */
static bool s_likely_inlined(troupe__opt_ctx_t *c, size_t i, uint8_t *state);

static int64_t s_chain_cost(troupe__opt_ctx_t *c, size_t i, uint8_t *state)
{
    troupe__opt_node_t *nd = &c->nd[i];
    if (state[i] == 2)
        return nd->chain_cost;
    if (state[i] == 1)
        return 0;
    state[i] = 1;
    int64_t e = nd->cost;
    for (size_t u = 0; u < nd->wpos.n && e < TROUPE__OPT_COST_MAX; u++) {
        const troupe__opt_pos_t *reads = &c->item_reads[nd->wpos.at[u]];
        for (size_t r = 0; r < reads->n && e < TROUPE__OPT_COST_MAX; r++) {
            size_t x = reads->at[r];
            if (x != i && state[x] != 1 && c->traced[x].max_visits > 1 &&
                s_likely_inlined(c, x, state))
                e += 1 + c->nd[x].chain_cost;
        }
    }
    nd->chain_cost = e < TROUPE__OPT_COST_MAX ? e : TROUPE__OPT_COST_MAX;
    state[i] = 2;
    return nd->chain_cost;
}

static bool s_likely_inlined(troupe__opt_ctx_t *c, size_t i, uint8_t *state)
{
    const troupe_ll_traced_t *tr = &c->traced[i];
    if (c->nd[i].wpos.n == 0 || tr->read_before_write || troupe_tnode_known_non_virtual(c->tns[i]))
        return false;
    int64_t e = s_chain_cost(c, i, state);
    return tr->max_visits <= c->o.virtualize_max_visits ||
           (e <= TROUPE__OPT_CHEAP_OPS && tr->max_visits <= c->o.virtualize_max_cheap_visits);
}

/* ---- the pass ----------------------------------------------------------------------------- */

troupe_status_t troupe__opt_trace(troupe__opt_ctx_t *c)
{
    s_self_t none = {NULL, NULL};
    for (size_t q = 0; q < c->nitems; q++)
        TROUPE_RETURN_IF_ERROR(s_scan_ll(c, q, c->items[q], none));
    for (size_t i = 0; i < c->nn; i++) {
        for (size_t k = 0; k < c->nd[i].rpos.n; k++)
            if (!TROUPE__OPT_PUSH(c->item_reads[c->nd[i].rpos.at[k]], i))
                return troupe__opt_oom();
        c->traced[i].read_only = c->traced[i].assignments == 0;
    }
    c->sampled = s_count_ll(c->proc->body) > (uint64_t)c->o.max_trace_steps;
    s_choose_cells(c);
    TROUPE_RETURN_IF_ERROR(s_tr_ll(c, c->proc->body, none));
    for (size_t i = 0; i < c->nn; i++)
        c->traced[i].is_scalar_constexpr = s_constexpr_node(c, i);
    s_complexity_ll(c, c->proc->body);
    uint8_t *state = troupe_calloc(c->nn + 1, 1);
    if (state == NULL)
        return troupe__opt_oom();
    for (size_t i = 0; i < c->nn; i++)
        s_chain_cost(c, i, state);
    troupe_free(state);
    return TROUPE_OK;
}
