/* troupe — step 3 of the optimiser: virtualisation, the inlining of per-cell computations
 * (OCANNL `virtual_llc`, `check_and_store_virtual`, `inline_computation`, `cleanup_virtual_llc`;
 * compiler/optimize.h step 3, compiler/optimize_impl.h).
 *
 * s_us_* checks that each statement writing a node is a definition unit; s_stability rejects
 * nodes whose inlined reads could see a changed input; s_rw_* / s_cp_* rewrite the body,
 * replacing each read of an accepted node with a local scope that recomputes the cell. */
#include "compiler/optimize_impl.h"

#include <stdio.h>
#include <string.h>

/* Deepest loop nest of a definition unit. */
#define S_MAX_DEPTH 64

static bool s_contains_pos(const troupe__opt_pos_t *v, size_t item)
{
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v->at[mid] < item)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < v->n && v->at[lo] == item;
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
    case TROUPE_PROV_NV_GATHER:
        return "it is read or written under a gather index";
    case TROUPE_PROV_NV_NARROW_PRECISION:
        return "its precision is narrower than its compute type (inline_narrow_precisions off)";
    default:
        return "it cannot be inlined";
    }
}

/* ---- step 3a: definition units (OCANNL check_and_store_virtual) ----------------------------- */

typedef struct s_us {
    troupe__opt_ctx_t *c;
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

static int32_t s_check_I(const troupe__opt_ctx_t *c, const troupe_tnode_t *tn,
                         const troupe_axis_index_t *I)
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
        if (e->u.get.tn == u->tn &&
            (u->I == NULL || !troupe_axis_indices_equal(e->u.get.idcs, u->I, u->tn->ndims)))
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
        } else if (!troupe_axis_indices_equal(u->I, s->u.set.idcs, tn->ndims)) {
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
    case TROUPE_LL_BIND_INDEX:
        u->reason = TROUPE_PROV_NV_GATHER;
        return;
    }
}

static troupe_status_t s_analyse_units(troupe__opt_ctx_t *c, size_t i)
{
    troupe__opt_node_t *nd = &c->nd[i];
    const troupe_tnode_t *tn = c->tns[i];
    nd->struct_ok = false;
    if (nd->gather_access) {
        nd->reason = TROUPE_PROV_NV_GATHER;
        return TROUPE_OK;
    }
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
        size_t item = nd->wpos.at[k];
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
        if (!TROUPE__OPT_PUSH(nd->unit_I, I))
            return troupe__opt_oom();
    }
    size_t last = nd->wpos.at[nd->wpos.n - 1];
    for (size_t k = 0; k < nd->rpos.n; k++) {
        size_t r = nd->rpos.at[k];
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

troupe_status_t troupe__opt_find_units(troupe__opt_ctx_t *c)
{
    for (size_t i = 0; i < c->nn; i++) {
        if (c->nd[i].wpos.n == 0)
            continue;
        TROUPE_RETURN_IF_ERROR(s_analyse_units(c, i));
        if (c->nd[i].has_reduction)
            c->traced[i].is_complex = true;
    }
    return TROUPE_OK;
}

/* ---- step 3b: stability of inlined definitions --------------------------------------------- */

static bool s_add_read(troupe__opt_node_t *nd, troupe__opt_read_t r)
{
    for (size_t k = 0; k < nd->R.n; k++) {
        troupe__opt_read_t *x = &nd->R.at[k];
        if (x->node == r.node) {
            if (r.start < x->start)
                x->start = r.start;
            return true;
        }
    }
    return TROUPE__OPT_PUSH(nd->R, r);
}

static bool s_written_between(const troupe__opt_ctx_t *c, size_t node, size_t from, size_t to)
{
    const troupe__opt_pos_t *w = &c->nd[node].wpos;
    for (size_t k = 0; k < w->n; k++) {
        size_t p = w->at[k];
        if (p >= from && p <= to)
            return true;
    }
    return false;
}

static bool s_item_is_accepted_unit(const troupe__opt_ctx_t *c, size_t item)
{
    return c->item_nwriters[item] == 1 && c->nd[c->item_writer[item]].state == TROUPE__OPT_ACCEPTED;
}

/* Rejects accepted nodes whose inlined reads could see changed inputs, to a fixpoint.
 * `order` lists candidates by their last definition unit. */
static troupe_status_t s_stability(troupe__opt_ctx_t *c, const size_t *order, size_t norder)
{
    for (;;) {
        for (size_t k = 0; k < norder; k++) {
            troupe__opt_node_t *nd = &c->nd[order[k]];
            if (nd->state != TROUPE__OPT_ACCEPTED)
                continue;
            nd->R.n = 0;
            for (size_t u = 0; u < nd->wpos.n; u++) {
                /* a unit's inputs must hold from that unit on, not from the first unit: a
                 * later unit (an accumulation) may read what was computed between them */
                const size_t at = nd->wpos.at[u];
                const troupe__opt_pos_t *reads = &c->item_reads[at];
                for (size_t r = 0; r < reads->n; r++) {
                    size_t x = reads->at[r];
                    if (x == order[k])
                        continue;
                    if (c->nd[x].state == TROUPE__OPT_ACCEPTED) {
                        for (size_t j = 0; j < c->nd[x].R.n; j++)
                            if (!s_add_read(nd, c->nd[x].R.at[j]))
                                return troupe__opt_oom();
                    } else {
                        troupe__opt_read_t rd = {x, at};
                        if (!s_add_read(nd, rd))
                            return troupe__opt_oom();
                    }
                }
            }
        }
        bool changed = false;
        for (size_t q = 0; q < c->nitems; q++) {
            if (s_item_is_accepted_unit(c, q))
                continue;
            const troupe__opt_pos_t *reads = &c->item_reads[q];
            for (size_t r = 0; r < reads->n; r++) {
                troupe__opt_node_t *nx = &c->nd[reads->at[r]];
                if (nx->state != TROUPE__OPT_ACCEPTED)
                    continue;
                for (size_t j = 0; j < nx->R.n; j++) {
                    troupe__opt_read_t rd = nx->R.at[j];
                    if (s_written_between(c, rd.node, rd.start, q)) {
                        nx->state = TROUPE__OPT_REJECTED;
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

typedef TROUPE__OPT_VEC(s_pair_t) s_pairs_t;

/* Copy of one definition unit at a read site: I's iterators -> the read's indices (sigma),
 * other loop symbols -> fresh symbols (rho), nested scope ids -> fresh ids. */
typedef struct s_cp {
    troupe__opt_ctx_t *c;
    troupe_tnode_t *tn;
    const troupe_axis_index_t *I; /* NULL for a ZERO_OUT unit */
    const troupe_axis_index_t *E; /* the read's indices */
    int32_t id;                   /* the scope being built */
    s_pairs_t rho;                /* symbol renaming, a stack */
    s_pairs_t smap;               /* scope id renaming, a stack */
    bool too_complex;
    bool oom; /* a vector could not grow (builders make the procedure sticky themselves) */
} s_cp_t;

static int32_t s_lookup(const s_pairs_t *v, int32_t from)
{
    for (size_t k = v->n; k-- > 0;)
        if (v->at[k].from == from)
            return v->at[k].to;
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
        if (!TROUPE__OPT_PUSH(p->rho, pr)) {
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
    case TROUPE_LL_BIND_INDEX:   /* unreachable: units have no gathers */
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
        if (!TROUPE__OPT_PUSH(p->smap, pr)) {
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
    troupe__opt_ctx_t *c;
    ptrdiff_t self;   /* node whose unit is being rewritten: its reads stay */
    ptrdiff_t failed; /* node whose inlining did not fit, or -1 */
} s_rw_t;

/* The local scope recomputing virtual node `x` at indices E. NULL on failure. */
static troupe_sc_t *s_inline(s_rw_t *w, size_t x, const troupe_axis_index_t *E)
{
    troupe__opt_ctx_t *c = w->c;
    troupe_ll_proc_t *proc = c->proc;
    troupe__opt_node_t *nd = &c->nd[x];
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
        p.I = nd->unit_I.at[k];
        p.rho.n = p.smap.n = 0;
        if ((parts[k] = s_cp_ll(&p, nd->stored.at[k])) == NULL)
            goto done;
    }
    res = troupe_sc_local_scope(proc, p.id, p.tn, troupe_ll_seq(proc, nd->stored.n, parts), E);
done:
    if (res == NULL && p.too_complex && w->failed < 0)
        w->failed = (ptrdiff_t)x;
    TROUPE__OPT_VEC_FREE(p.rho);
    TROUPE__OPT_VEC_FREE(p.smap);
    return res;
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
        return troupe__opt_with_body(proc, s, s_rw_ll(w, s->u.for_loop.body));
    case TROUPE_LL_SET:
        return troupe__opt_with_value(proc, s, s_rw_sc(w, s->u.set.value));
    case TROUPE_LL_SET_FROM_VEC:
        return troupe__opt_with_value(proc, s, s_rw_sc(w, s->u.set_from_vec.arg));
    case TROUPE_LL_SET_LOCAL:
        return troupe__opt_with_value(proc, s, s_rw_sc(w, s->u.set_local.value));
    case TROUPE_LL_BIND_INDEX:
        return troupe__opt_with_bind_body(proc, s, s_rw_ll(w, s->u.bind_index.body));
    default:
        return s;
    }
}

static troupe_sc_t *s_rw_sc(s_rw_t *w, troupe_sc_t *e)
{
    troupe_ll_proc_t *proc = w->c->proc;
    switch (e->kind) {
    case TROUPE_SC_GET: {
        ptrdiff_t x = troupe__opt_node_of(w->c, e->u.get.tn);
        if (x < 0 || x == w->self || w->c->nd[x].state != TROUPE__OPT_ACCEPTED)
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
static troupe_status_t s_rewrite(troupe__opt_ctx_t *c, troupe_ll_t **out, ptrdiff_t *failed)
{
    troupe_ll_proc_t *proc = c->proc;
    s_rw_t w = {c, -1, -1};
    *failed = -1;
    for (size_t i = 0; i < c->nn; i++)
        c->nd[i].stored.n = 0;
    troupe_ll_t **kept = troupe_ll_alloc(proc, (c->nitems + 1) * sizeof *kept);
    if (kept == NULL)
        return troupe__opt_proc_oom(proc);
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
            return troupe__opt_proc_oom(proc);
        }
        if (unit) {
            if (!TROUPE__OPT_PUSH(c->nd[c->item_writer[q]].stored, r))
                return troupe__opt_oom();
        } else {
            kept[nkept++] = r;
        }
    }
    *out = troupe_ll_seq(proc, nkept, kept);
    return *out != NULL ? TROUPE_OK : troupe__opt_proc_oom(proc);
}

troupe_status_t troupe__opt_virtualize(troupe__opt_ctx_t *c)
{
    troupe_status_t st = TROUPE_OK;
    size_t *order = troupe_calloc(c->nn + 1, sizeof *order);
    if (order == NULL)
        return troupe__opt_oom();
    size_t norder = 0;
    for (size_t i = 0; i < c->nn; i++) {
        troupe__opt_node_t *nd = &c->nd[i];
        if (nd->wpos.n == 0 || troupe_tnode_known_non_virtual(c->tns[i]))
            continue;
        if (!c->o.virtualize) {
            nd->state = TROUPE__OPT_REJECTED;
            nd->reject_reason = TROUPE_PROV_NV_DISABLED;
        } else if (!nd->struct_ok) {
            nd->state = TROUPE__OPT_REJECTED;
            nd->reject_reason = nd->reason;
        } else {
            nd->state = TROUPE__OPT_ACCEPTED;
        }
        order[norder++] = i;
    }
    /* By last definition unit: a node's inputs that are virtual come earlier. Insertion sort
     * (candidate lists are short). */
    for (size_t k = 1; k < norder; k++) {
        size_t v = order[k], j = k;
        size_t lv = c->nd[v].wpos.at[c->nd[v].wpos.n - 1];
        while (j > 0 && (c->nd[order[j - 1]].wpos).at[c->nd[order[j - 1]].wpos.n - 1] > lv) {
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
        c->nd[failed].state = TROUPE__OPT_REJECTED;
        c->nd[failed].reject_reason = TROUPE_PROV_NV_INDEX_TOO_COMPLEX;
    }
    /* Rejections first: a node the user set Virtual that cannot be inlined is an error, and
     * the body is still intact then. */
    for (size_t k = 0; k < norder; k++) {
        size_t i = order[k];
        if (c->nd[i].state != TROUPE__OPT_REJECTED)
            continue;
        char why[160];
        snprintf(why, sizeof why, "it cannot be inlined: %s",
                 s_reason_text(c->nd[i].reject_reason));
        if ((st = troupe__opt_update(c, c->tns[i], troupe__opt_mode(TROUPE_MM_NEVER_VIRTUAL, 0),
                                     c->nd[i].reject_reason, why)) != TROUPE_OK)
            goto out;
    }
    c->proc->body = body;
    for (size_t k = 0; k < norder; k++) {
        size_t i = order[k];
        if (c->nd[i].state != TROUPE__OPT_ACCEPTED)
            continue;
        int32_t prov =
            c->nd[i].constexpr_wanted ? TROUPE_PROV_SCALAR_CONSTEXPR : TROUPE_PROV_VIRTUALIZED;
        if ((st = troupe__opt_update(c, c->tns[i], troupe__opt_mode(TROUPE_MM_VIRTUAL, 0), prov,
                                     "inlined")) != TROUPE_OK)
            goto out;
    }
out:
    troupe_free(order);
    return st;
}
