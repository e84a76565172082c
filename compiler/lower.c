/* troupe — lowering of assignments to the low-level IR (see compiler/lower.h). */
#define _POSIX_C_SOURCE 200809L
#include "compiler/lower.h"

#include "base/alloc.h"

#include <math.h>
#include <string.h>


typedef struct s_lower {
    const troupe_asgn_comp_t *comp;
    troupe_ll_proc_t *proc;
    int32_t *static_map; /* comp static symbol id -> proc symbol id */
} s_lower_t;

/* One data-dependent index of an assignment: a BIND_INDEX of `sym` around the body. */
typedef struct s_bind {
    int32_t sym;
    troupe_tnode_t *tn;
    const troupe_proj_index_t *pi; /* its "@N[...]" */
    int64_t range;
    troupe_tnode_t *table;
    int axis;
    int deepest; /* innermost product-space iterator its term uses, -1 for none */
} s_bind_t;

#define S_MAX_BINDS (4 * TROUPE_MAX_DIMS)

static troupe_status_t s_proc_status(const s_lower_t *L)
{
    troupe_status_t st = troupe_ll_proc_status(L->proc);
    if (st == TROUPE_OK)
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "lowering assignments: a builder failed");
    return st;
}

/* The symbol bound to gather index pi (axis `axis` of `table`, of dim `range`), adding a bind
 * to binds (shared by equal gather indices over the same range); -1 on failure. */
static int32_t s_gather_sym(s_lower_t *L, const troupe_asgn_t *t, const troupe_proj_index_t *pi,
                            troupe_tnode_t *table, int axis, s_bind_t *binds, int *nbinds)
{
    troupe_tnode_t *tn = t->u.accum_op.gather[pi->gather - 1];
    int64_t range = table->dims[axis];
    for (int b = 0; b < *nbinds; b++) {
        const s_bind_t *x = &binds[b];
        if (x->tn != tn || x->range != range || x->pi->gather_n != pi->gather_n)
            continue;
        bool same = true;
        for (int k = 0; k < pi->gather_n && same; k++)
            same = x->pi->gather_iter[k] == pi->gather_iter[k] &&
                   x->pi->gather_fixed[k] == pi->gather_fixed[k];
        if (same)
            return x->sym;
    }
    if (*nbinds == S_MAX_BINDS)
        return -1;
    s_bind_t *nb = &binds[(*nbinds)++];
    nb->sym = troupe_ll_proc_add_symbol(L->proc, NULL);
    nb->tn = tn;
    nb->pi = pi;
    nb->range = range;
    nb->table = table;
    nb->axis = axis;
    nb->deepest = -1;
    for (int k = 0; k < pi->gather_n; k++)
        if (pi->gather_iter[k] > nb->deepest)
            nb->deepest = pi->gather_iter[k];
    return nb->sym;
}

static troupe_axis_index_t s_axis(const s_lower_t *L, const troupe_proj_index_t *pi,
                                  const int32_t *loop_syms, int64_t scale)
{
    troupe_axis_index_t x = troupe_idx_fixed(pi->offset * scale);
    for (int k = 0; k < pi->nterms; k++) {
        x.terms[x.nterms].coeff = pi->terms[k].coeff * scale;
        x.terms[x.nterms].sym = loop_syms[pi->terms[k].iter];
        x.nterms++;
    }
    if (pi->static_sym >= 0 && x.nterms < TROUPE_MAX_INDEX_TERMS) {
        x.terms[x.nterms].coeff = scale;
        x.terms[x.nterms].sym = L->static_map[pi->static_sym];
        x.nterms++;
    }
    return x;
}

/* Wraps `body` in the bind of binds[b] (inside the loops its term uses). */
static troupe_ll_t *s_wrap_bind(s_lower_t *L, const s_bind_t *b, const int32_t *loop_syms,
                                troupe_ll_t *body)
{
    troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
    for (int k = 0; k < b->pi->gather_n; k++)
        idcs[k] = b->pi->gather_iter[k] >= 0 ? troupe_idx_sym(loop_syms[b->pi->gather_iter[k]])
                                             : troupe_idx_fixed(b->pi->gather_fixed[k]);
    return troupe_ll_bind_index(L->proc, b->sym, b->tn, idcs, b->range, b->table, b->axis, body);
}

/* Wraps `body` in loops over the product space (loop_syms[k] from 0 to iter_dim[k]-1,
 * iterator 0 outermost), each bind just inside the innermost loop its term uses. */
static troupe_ll_t *s_wrap_loops_binds(s_lower_t *L, const troupe_projections_t *pr,
                                       const int32_t *loop_syms, const s_bind_t *binds,
                                       int nbinds, troupe_ll_t *body)
{
    for (int k = pr->niters - 1; k >= -1 && body != NULL; k--) {
        for (int b = nbinds - 1; b >= 0 && body != NULL; b--)
            if (binds[b].deepest == k)
                body = s_wrap_bind(L, &binds[b], loop_syms, body);
        if (k >= 0 && body != NULL)
            body = troupe_ll_for(L->proc, loop_syms[k], 0, pr->iter_dim[k] - 1, body, true);
    }
    return body;
}

static troupe_ll_t *s_wrap_loops(s_lower_t *L, const troupe_projections_t *pr,
                                 const int32_t *loop_syms, troupe_ll_t *body)
{
    return s_wrap_loops_binds(L, pr, loop_syms, NULL, 0, body);
}

static troupe_status_t s_new_loop_syms(s_lower_t *L, int n, int32_t *syms)
{
    for (int k = 0; k < n; k++) {
        syms[k] = troupe_ll_proc_add_symbol(L->proc, NULL);
        if (syms[k] < 0)
            return s_proc_status(L);
    }
    return TROUPE_OK;
}

typedef troupe_sc_t *(*s_cell_fn)(s_lower_t *L, const troupe_tnode_t *tn,
                                  const troupe_axis_index_t *idcs, const int32_t *syms,
                                  const void *arg);

/* Loops over every cell of tn (axes of dim 1 get the fixed index 0, no loop), setting each
 * to fn(idcs). */
static troupe_status_t s_loop_over_dims(s_lower_t *L, troupe_tnode_t *tn, s_cell_fn fn,
                                        const void *arg, troupe_ll_t **out)
{
    int32_t syms[TROUPE_MAX_DIMS];
    troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
    for (int a = 0; a < tn->ndims; a++) {
        syms[a] = -1;
        idcs[a] = troupe_idx_fixed(0);
        if (tn->dims[a] > 1) {
            syms[a] = troupe_ll_proc_add_symbol(L->proc, NULL);
            if (syms[a] < 0)
                return s_proc_status(L);
            idcs[a] = troupe_idx_sym(syms[a]);
        }
    }
    troupe_sc_t *v = fn(L, tn, idcs, syms, arg);
    troupe_ll_t *body = v != NULL ? troupe_ll_set(L->proc, tn, idcs, v) : NULL;
    for (int a = tn->ndims - 1; a >= 0 && body != NULL; a--)
        if (syms[a] >= 0)
            body = troupe_ll_for(L->proc, syms[a], 0, tn->dims[a] - 1, body, true);
    if (body == NULL)
        return s_proc_status(L);
    *out = body;
    return TROUPE_OK;
}

static troupe_sc_t *s_cell_constant(s_lower_t *L, const troupe_tnode_t *tn,
                                    const troupe_axis_index_t *idcs, const int32_t *syms,
                                    const void *arg)
{
    (void)tn, (void)idcs, (void)syms;
    return troupe_sc_constant(L->proc, *(const double *)arg);
}

static troupe_sc_t *s_cell_bits(s_lower_t *L, const troupe_tnode_t *tn,
                                const troupe_axis_index_t *idcs, const int32_t *syms,
                                const void *arg)
{
    (void)tn, (void)idcs, (void)syms;
    return troupe_sc_constant_bits(L->proc, *(const int64_t *)arg);
}

static troupe_sc_t *s_cell_offset(s_lower_t *L, const troupe_tnode_t *tn,
                                  const troupe_axis_index_t *idcs, const int32_t *syms,
                                  const void *arg)
{
    (void)idcs, (void)arg;
    /* Row-major flat offset sum(stride_a * i_a), in chunks of TROUPE_MAX_INDEX_TERMS terms
     * added together when the node has more looped axes than one index can hold. */
    troupe_sc_t *acc = NULL;
    troupe_axis_index_t x = troupe_idx_fixed(0);
    int64_t stride = 1;
    for (int a = tn->ndims - 1; a >= 0; a--) {
        if (syms[a] >= 0) {
            if (x.nterms == TROUPE_MAX_INDEX_TERMS) {
                troupe_sc_t *e = troupe_sc_embed_index(L->proc, x);
                acc = acc == NULL ? e : troupe_sc_binop(L->proc, TROUPE_BINOP_ADD, acc, e);
                x = troupe_idx_fixed(0);
            }
            x.terms[x.nterms++] = (troupe_index_term_t){stride, syms[a]};
        }
        stride *= tn->dims[a];
    }
    troupe_sc_t *e = troupe_sc_embed_index(L->proc, x);
    return acc == NULL ? e : troupe_sc_binop(L->proc, TROUPE_BINOP_ADD, acc, e);
}

static troupe_sc_t *s_cell_slice(s_lower_t *L, const troupe_tnode_t *tn,
                                 const troupe_axis_index_t *idcs, const int32_t *syms,
                                 const void *arg)
{
    (void)syms;
    const troupe_asgn_t *t = arg;
    troupe_axis_index_t src[TROUPE_MAX_DIMS];
    src[0] = troupe_idx_sym(L->static_map[t->u.fetch.static_sym]);
    for (int a = 0; a < tn->ndims; a++)
        src[a + 1] = idcs[a];
    return troupe_sc_get(L->proc, t->u.fetch.sliced, src);
}

static troupe_sc_t *s_cell_symbol(s_lower_t *L, const troupe_tnode_t *tn,
                                  const troupe_axis_index_t *idcs, const int32_t *syms,
                                  const void *arg)
{
    (void)tn, (void)idcs, (void)syms;
    const troupe_asgn_t *t = arg;
    return troupe_sc_embed_index(L->proc, troupe_idx_sym(L->static_map[t->u.fetch.static_sym]));
}

/* OCANNL Fetch Constant: ZERO_OUT for 0.0, else loops of SET. */
static troupe_status_t s_fill_constant(s_lower_t *L, troupe_tnode_t *tn, double c,
                                       troupe_ll_t **out)
{
    if (c == 0.0 && !signbit(c)) {
        *out = troupe_ll_zero_out(L->proc, tn);
        return *out != NULL ? TROUPE_OK : s_proc_status(L);
    }
    return s_loop_over_dims(L, tn, s_cell_constant, &c, out);
}

static troupe_sc_t *s_read(s_lower_t *L, const troupe_asgn_buffer_t *b,
                           const troupe_axis_index_t *idcs)
{
    return b->is_merge_buffer ? troupe_sc_get_merge_buffer(L->proc, b->tn, idcs)
                              : troupe_sc_get(L->proc, b->tn, idcs);
}

/* Whether op's neutral element n (troupe_binop_neutral, a right identity: x op n = x) is a left
 * identity too (n op v = v), so that an initialising write over an injective projection may set
 * v itself: ADD, MUL, MAX, MIN, ARG2. For SUB (0 - v), DIV (1 / v) and the rest it may not. */
static bool s_neutral_on_left(troupe_binop_t op)
{
    return op == TROUPE_BINOP_ADD || op == TROUPE_BINOP_MUL || op == TROUPE_BINOP_MAX ||
           op == TROUPE_BINOP_MIN || op == TROUPE_BINOP_ARG2;
}

static troupe_status_t s_lower_accum(s_lower_t *L, const troupe_asgn_t *t, troupe_ll_t **out)
{
    const troupe_projections_t *pr = t->u.accum_op.proj;
    troupe_tnode_t *lhs = t->u.accum_op.lhs;
    int32_t syms[TROUPE_PROJ_MAX_ITERS];
    TROUPE_RETURN_IF_ERROR(s_new_loop_syms(L, pr->niters, syms));

    s_bind_t binds[S_MAX_BINDS];
    int nbinds = 0;
    troupe_axis_index_t lidx[TROUPE_MAX_DIMS], ridx[3][TROUPE_MAX_DIMS];
    for (int a = 0; a < pr->lhs_ndims; a++) {
        lidx[a] = s_axis(L, &pr->lhs[a], syms, 1);
        if (pr->lhs[a].gather > 0) {
            int32_t g = s_gather_sym(L, t, &pr->lhs[a], lhs, a, binds, &nbinds);
            if (g < 0)
                return s_proc_status(L);
            lidx[a] = troupe_idx_sym(g);
        }
    }
    troupe_sc_t *args[3] = {NULL, NULL, NULL};
    for (int i = 0; i < pr->nrhs; i++) {
        for (int a = 0; a < pr->rhs_ndims[i]; a++) {
            ridx[i][a] = s_axis(L, &pr->rhs[i][a], syms, 1);
            if (pr->rhs[i][a].gather > 0) {
                int32_t g = s_gather_sym(L, t, &pr->rhs[i][a], t->u.accum_op.rhs[i].tn, a, binds,
                                         &nbinds);
                if (g < 0)
                    return s_proc_status(L);
                ridx[i][a] = troupe_idx_sym(g);
            }
        }
        args[i] = s_read(L, &t->u.accum_op.rhs[i], ridx[i]);
    }
    troupe_sc_t *v;
    switch (t->u.accum_op.rhs_kind) {
    case TROUPE_ASGN_RHS_UNOP:
        v = troupe_sc_unop(L->proc, (troupe_unop_t)t->u.accum_op.op, args[0]);
        break;
    case TROUPE_ASGN_RHS_BINOP:
        v = troupe_sc_binop(L->proc, (troupe_binop_t)t->u.accum_op.op, args[0], args[1]);
        break;
    default:
        v = troupe_sc_ternop(L->proc, (troupe_ternop_t)t->u.accum_op.op, args[0], args[1], args[2]);
        break;
    }
    const bool init = t->u.accum_op.initialize_neutral;
    if (!(init && pr->injective)) {
        v = troupe_sc_binop(L->proc, t->u.accum_op.accum, troupe_sc_get(L->proc, lhs, lidx), v);
    } else if (!s_neutral_on_left(t->u.accum_op.accum)) {
        /* each cell is written once, over its neutral: neutral accum v (0 - v for SUB) */
        double neutral = 0.0;
        TROUPE_RETURN_IF_ERROR(troupe_binop_neutral(t->u.accum_op.accum, &neutral));
        v = troupe_sc_binop(L->proc, t->u.accum_op.accum, troupe_sc_constant(L->proc, neutral), v);
    }
    troupe_ll_t *body = v != NULL ? troupe_ll_set(L->proc, lhs, lidx, v) : NULL;
    troupe_ll_t *loops =
        body != NULL ? s_wrap_loops_binds(L, pr, syms, binds, nbinds, body) : NULL;
    if (loops == NULL)
        return s_proc_status(L);
    if (init && !(pr->injective && pr->surjective)) {
        double neutral;
        troupe_status_t st = troupe_binop_neutral(t->u.accum_op.accum, &neutral);
        if (st != TROUPE_OK)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "lowering '%s': accumulator '%s' has no neutral element", pr->spec,
                                 troupe_binop_name(t->u.accum_op.accum));
        troupe_ll_t *fill;
        TROUPE_RETURN_IF_ERROR(s_fill_constant(L, lhs, neutral, &fill));
        loops = troupe_ll_seq2(L->proc, fill, loops);
        if (loops == NULL)
            return s_proc_status(L);
    }
    *out = loops;
    return TROUPE_OK;
}

static troupe_status_t s_lower_vec(s_lower_t *L, const troupe_asgn_t *t, troupe_ll_t **out)
{
    const troupe_projections_t *pr = t->u.set_vec_unop.proj;
    troupe_tnode_t *lhs = t->u.set_vec_unop.lhs;
    int32_t syms[TROUPE_PROJ_MAX_ITERS];
    TROUPE_RETURN_IF_ERROR(s_new_loop_syms(L, pr->niters, syms));
    troupe_axis_index_t lidx[TROUPE_MAX_DIMS], ridx[TROUPE_MAX_DIMS];
    for (int a = 0; a < pr->lhs_ndims; a++)
        lidx[a] = s_axis(L, &pr->lhs[a], syms, a == pr->lhs_ndims - 1 ? pr->vec_length : 1);
    for (int a = 0; a < pr->rhs_ndims[0]; a++)
        ridx[a] = s_axis(L, &pr->rhs[0][a], syms, 1);
    troupe_sc_t *arg = s_read(L, &t->u.set_vec_unop.rhs, ridx);
    troupe_ll_t *body = arg != NULL ? troupe_ll_set_from_vec(L->proc, lhs, lidx, pr->vec_length,
                                                             t->u.set_vec_unop.op, arg)
                                    : NULL;
    troupe_ll_t *loops = body != NULL ? s_wrap_loops(L, pr, syms, body) : NULL;
    if (loops == NULL)
        return s_proc_status(L);
    *out = loops;
    return TROUPE_OK;
}

static troupe_status_t s_lower_fill(s_lower_t *L, const troupe_asgn_t *t, troupe_ll_t **out)
{
    troupe_tnode_t *tn = t->u.fetch.tn;
    size_t n = t->u.fetch.count;
    troupe_ll_t **items = troupe_ll_alloc(L->proc, (n > 0 ? n : 1) * sizeof *items);
    if (items == NULL)
        return s_proc_status(L);
    troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
    int64_t pos[TROUPE_MAX_DIMS] = {0};
    for (size_t k = 0; k < n; k++) {
        for (int a = 0; a < tn->ndims; a++)
            idcs[a] = troupe_idx_fixed(pos[a]);
        items[k] =
            troupe_ll_set(L->proc, tn, idcs, troupe_sc_constant(L->proc, t->u.fetch.values[k]));
        if (items[k] == NULL)
            return s_proc_status(L);
        for (int a = tn->ndims - 1; a >= 0; a--) {
            if (++pos[a] < tn->dims[a])
                break;
            pos[a] = 0;
        }
    }
    *out = troupe_ll_seq(L->proc, n, items);
    return *out != NULL ? TROUPE_OK : s_proc_status(L);
}

static troupe_status_t s_lower_fetch(s_lower_t *L, const troupe_asgn_t *t, troupe_ll_t **out)
{
    troupe_tnode_t *tn = t->u.fetch.tn;
    switch (t->u.fetch.kind) {
    case TROUPE_FETCH_CONSTANT:
        return s_fill_constant(L, tn, t->u.fetch.constant, out);
    case TROUPE_FETCH_CONSTANT_BITS:
        return s_loop_over_dims(L, tn, s_cell_bits, &t->u.fetch.constant_bits, out);
    case TROUPE_FETCH_CONSTANT_FILL:
        return s_lower_fill(L, t, out);
    case TROUPE_FETCH_RANGE_OVER_OFFSETS:
        return s_loop_over_dims(L, tn, s_cell_offset, NULL, out);
    case TROUPE_FETCH_SLICE:
        return s_loop_over_dims(L, tn, s_cell_slice, t, out);
    case TROUPE_FETCH_EMBED_SYMBOL:
        return s_loop_over_dims(L, tn, s_cell_symbol, t, out);
    case TROUPE_FETCH_EMBED_SELF_ID: {
        int64_t id = tn->id;
        return s_loop_over_dims(L, tn, s_cell_bits, &id, out);
    }
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "unknown fetch kind %d", (int)t->u.fetch.kind);
}

static troupe_status_t s_lower(s_lower_t *L, const troupe_asgn_t *t, troupe_ll_t **out)
{
    if (t == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "lowering: missing assignment");
    switch (t->kind) {
    case TROUPE_ASGN_NOOP:
        *out = troupe_ll_noop(L->proc);
        return *out != NULL ? TROUPE_OK : s_proc_status(L);
    case TROUPE_ASGN_SEQ: {
        size_t n = t->u.seq.count;
        troupe_ll_t **items = troupe_ll_alloc(L->proc, (n > 0 ? n : 1) * sizeof *items);
        if (items == NULL)
            return s_proc_status(L);
        for (size_t i = 0; i < n; i++)
            TROUPE_RETURN_IF_ERROR(s_lower(L, t->u.seq.items[i], &items[i]));
        *out = troupe_ll_seq(L->proc, n, items);
        return *out != NULL ? TROUPE_OK : s_proc_status(L);
    }
    case TROUPE_ASGN_BLOCK_COMMENT: {
        troupe_ll_t *items[3];
        items[0] = troupe_ll_comment(L->proc, t->u.block_comment.text);
        TROUPE_RETURN_IF_ERROR(s_lower(L, t->u.block_comment.body, &items[1]));
        items[2] = troupe_ll_comment(L->proc, "end");
        if (items[0] == NULL || items[2] == NULL)
            return s_proc_status(L);
        *out = troupe_ll_seq(L->proc, 3, items);
        return *out != NULL ? TROUPE_OK : s_proc_status(L);
    }
    case TROUPE_ASGN_ACCUM_OP:
        return s_lower_accum(L, t, out);
    case TROUPE_ASGN_SET_VEC_UNOP:
        return s_lower_vec(L, t, out);
    case TROUPE_ASGN_FETCH:
        return s_lower_fetch(L, t, out);
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "unknown assignment kind %d", (int)t->kind);
}

troupe_status_t troupe_asgn_lower_into(const troupe_asgn_comp_t *comp, const troupe_asgn_t *tree,
                                       troupe_ll_proc_t *proc, troupe_ll_t **out)
{
    if (out != NULL)
        *out = NULL;
    if (comp == NULL || tree == NULL || proc == NULL || out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_lower_into: NULL argument");
    s_lower_t L = {comp, proc, NULL};
    L.static_map = troupe_calloc((size_t)(comp->nsyms > 0 ? comp->nsyms : 1), sizeof(int32_t));
    if (L.static_map == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory lowering assignments");
    troupe_status_t st = TROUPE_OK;
    for (int32_t i = 0; i < comp->nsyms && st == TROUPE_OK; i++) {
        int32_t s = troupe_ll_proc_find_symbol(proc, comp->syms[i].name);
        if (s >= 0 && !proc->syms[s].is_static) {
            st = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "lowering: procedure %s has a loop symbol named like static "
                               "symbol '%s'",
                               proc->name, comp->syms[i].name);
        } else if (s < 0) {
            s = troupe_ll_proc_add_static_symbol(proc, comp->syms[i].name, comp->syms[i].range);
            if (s < 0)
                st = s_proc_status(&L);
        }
        L.static_map[i] = s;
    }
    troupe_ll_t *res = NULL;
    if (st == TROUPE_OK)
        st = s_lower(&L, tree, &res);
    if (st == TROUPE_OK && troupe_ll_proc_status(proc) != TROUPE_OK)
        st = s_proc_status(&L);
    troupe_free(L.static_map);
    if (st == TROUPE_OK)
        *out = res;
    return st;
}

troupe_status_t troupe_asgn_lower(const troupe_asgn_comp_t *comp, const char *name,
                                  troupe_ll_proc_t **out)
{
    if (out != NULL)
        *out = NULL;
    if (comp == NULL || out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_lower: NULL argument");
    troupe_ll_proc_t *proc;
    TROUPE_RETURN_IF_ERROR(troupe_ll_proc_new(name, &proc));
    troupe_ll_t *body;
    troupe_status_t st = troupe_asgn_lower_into(comp, comp->root, proc, &body);
    if (st != TROUPE_OK) {
        troupe_ll_proc_destroy(&proc);
        return st;
    }
    proc->body = body;
    *out = proc;
    return TROUPE_OK;
}
