/* troupe — step 4c of the optimiser (compiler/optimize.h): iteration scalars. A node that the
 * procedure writes and reads only in the body of one loop, always at the same cell, written
 * first in every iteration, holds nothing an iteration can see from another: the generated
 * code keeps it in a scalar declared around that loop (compiler/cgen.h) instead of an array.
 * Array contraction (Allen & Kennedy, "Optimizing Compilers for Modern Architectures", §8.5);
 * the transforms of a Winograd convolution are the case that asked for it: their intermediate
 * rows and columns, fused into one loop per transform, were each a context array streamed
 * through the cache every micro-step. */
#include "compiler/optimize_impl.h"

#include "base/config.h"
#include "ir/tnode.h"

/* What the walk knows of one node. */
typedef struct s_use {
    const troupe_ll_t *loop;         /* the innermost loop around its first access */
    const troupe_axis_index_t *idcs; /* its first access's indices */
    bool seen, bad, written, read;
} s_use_t;

typedef struct s_walk {
    troupe__opt_ctx_t *c;
    s_use_t *use; /* aligned with c->tns */
} s_walk_t;

static bool s_same_idcs(const troupe_tnode_t *tn, const troupe_axis_index_t *a,
                        const troupe_axis_index_t *b)
{
    for (int ax = 0; ax < tn->ndims; ax++) {
        if (a[ax].nterms != b[ax].nterms || a[ax].offset != b[ax].offset)
            return false;
        for (int t = 0; t < a[ax].nterms; t++)
            if (a[ax].terms[t].coeff != b[ax].terms[t].coeff ||
                a[ax].terms[t].sym != b[ax].terms[t].sym)
                return false;
    }
    return true;
}

/* One access of tn in `loop` (NULL: outside every loop) at idcs; `bad`: one the contraction
 * cannot keep (a zeroing, a vector write, a merge-buffer read, a gather's index). */
static void s_access(s_walk_t *w, const troupe_tnode_t *tn, const troupe_ll_t *loop,
                     const troupe_axis_index_t *idcs, bool write, bool bad)
{
    ptrdiff_t i = troupe__opt_node_of(w->c, tn);
    if (i < 0)
        return;
    s_use_t *u = &w->use[i];
    if (bad || loop == NULL) {
        u->bad = true;
    } else if (!u->seen) {
        u->loop = loop;
        u->idcs = idcs;
        if (!write) /* read before its first write in the iteration */
            u->bad = true;
    } else if (u->loop != loop || idcs == NULL || u->idcs == NULL ||
               !s_same_idcs(tn, u->idcs, idcs)) {
        u->bad = true;
    }
    u->seen = true;
    if (write)
        u->written = true;
    else
        u->read = true;
}

static void s_walk_ll(s_walk_t *w, const troupe_ll_t *s, const troupe_ll_t *loop, bool gathered,
                      bool in_scope);

static void s_walk_sc(s_walk_t *w, const troupe_sc_t *e, const troupe_ll_t *loop, bool gathered)
{
    if (e == NULL)
        return;
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE: /* its body runs before the statement reading it */
        s_walk_ll(w, e->u.local_scope.body, loop, gathered, true);
        return;
    case TROUPE_SC_GET:
        s_access(w, e->u.get.tn, loop, e->u.get.idcs, false, gathered);
        return;
    case TROUPE_SC_GET_MERGE_BUFFER:
        s_access(w, e->u.get.tn, loop, e->u.get.idcs, false, true);
        return;
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
    case TROUPE_SC_UNOP: {
        int n = e->kind == TROUPE_SC_TERNOP ? 3 : e->kind == TROUPE_SC_BINOP ? 2 : 1;
        for (int k = 0; k < n; k++) /* in the order the code reads them */
            s_walk_sc(w, e->u.op.args[k], loop, gathered);
        return;
    }
    default:
        return;
    }
}

/* Statements in execution order; `loop` the innermost loop around s; `gathered`: under a
 * gather's bound index, where nothing is contracted; `in_scope`: in a local scope's body, whose
 * writes of nodes (none that the optimiser makes) are not contracted either. */
static void s_walk_ll(s_walk_t *w, const troupe_ll_t *s, const troupe_ll_t *loop, bool gathered,
                      bool in_scope)
{
    if (s == NULL)
        return;
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t k = 0; k < s->u.seq.count; k++)
            s_walk_ll(w, s->u.seq.items[k], loop, gathered, in_scope);
        return;
    case TROUPE_LL_FOR:
        s_walk_ll(w, s->u.for_loop.body, s, gathered, in_scope);
        return;
    case TROUPE_LL_ZERO_OUT:
        s_access(w, s->u.zero_out, loop, NULL, true, true);
        return;
    case TROUPE_LL_SET:
        /* the value's reads come before the write */
        s_walk_sc(w, s->u.set.value, loop, gathered);
        s_access(w, s->u.set.tn, loop, s->u.set.idcs, true, gathered || in_scope);
        return;
    case TROUPE_LL_SET_FROM_VEC:
        s_walk_sc(w, s->u.set_from_vec.arg, loop, gathered);
        s_access(w, s->u.set_from_vec.tn, loop, s->u.set_from_vec.idcs, true, true);
        return;
    case TROUPE_LL_SET_LOCAL:
        s_walk_sc(w, s->u.set_local.value, loop, gathered);
        return;
    case TROUPE_LL_BIND_INDEX:
        s_access(w, s->u.bind_index.tn, loop, s->u.bind_index.idcs, false, true);
        s_walk_ll(w, s->u.bind_index.body, loop, true, in_scope);
        return;
    default:
        return;
    }
}

/* A node an earlier optimisation made an iteration scalar (Local, provenance ...700). */
static bool s_was_scalar(troupe_tnode_t *tn)
{
    troupe_memory_mode_t m;
    int32_t prov = 0;
    return troupe_tnode_get_memory_mode(tn, &m, &prov) && m.kind == TROUPE_MM_LOCAL &&
           prov % 1000 == TROUPE_PROV_ITERATION_SCALAR;
}

/* Whether the node may be one here (its accesses, precision and mode). */
static bool s_candidate(const troupe__opt_ctx_t *c, const s_use_t *u, troupe_tnode_t *tn)
{
    if (!c->o.iteration_scalars || !u->seen || u->bad || !u->written || !u->read)
        return false;
    /* single and double precision only: a narrower node rounds each value it stores */
    if (tn->prec != TROUPE_PREC_SINGLE && tn->prec != TROUPE_PREC_DOUBLE)
        return false;
    /* a placeholder (Never_virtual or Device_only, the optimiser's or its caller's), or one
     * already: a mode that names a place (Materialized, On_device, Hosted) or a Local array
     * stays */
    troupe_memory_mode_t m;
    int32_t prov = 0;
    if (!troupe_tnode_get_memory_mode(tn, &m, &prov))
        return false;
    return m.kind == TROUPE_MM_NEVER_VIRTUAL || m.kind == TROUPE_MM_DEVICE_ONLY ||
           (m.kind == TROUPE_MM_LOCAL && prov % 1000 == TROUPE_PROV_ITERATION_SCALAR);
}

troupe_status_t troupe__opt_iteration_scalars(troupe__opt_ctx_t *c)
{
    if (c->nn == 0)
        return TROUPE_OK;
    s_walk_t w = {c, troupe_calloc(c->nn, sizeof *w.use)};
    bool *cand = troupe_calloc(c->nn, sizeof *cand);
    if (w.use == NULL || cand == NULL) {
        troupe_free(w.use);
        troupe_free(cand);
        return troupe__opt_oom();
    }
    s_walk_ll(&w, c->proc->body, NULL, false, false);
    for (size_t i = 0; i < c->nn; i++)
        cand[i] = s_candidate(c, &w.use[i], c->tns[i]);
    /* First the refusal, before any mode changes: a node an earlier optimisation made an
     * iteration scalar that is not one here needs a Local array of its whole size, which is
     * refused where the node would not have been Local without step 4c (past the stack
     * threshold, or past this procedure's own larger limit). */
    int64_t limit = (int64_t)troupe_config_stack_threshold_bytes();
    if (c->o.local_max_bytes > limit)
        limit = c->o.local_max_bytes;
    troupe_status_t st = TROUPE_OK;
    for (size_t i = 0; i < c->nn && st == TROUPE_OK; i++) {
        troupe_tnode_t *tn = c->tns[i];
        if (cand[i] || !s_was_scalar(tn) || (int64_t)tn->size_bytes <= limit)
            continue;
        char name[128];
        troupe_tnode_debug_name(tn, name, sizeof name);
        st = troupe__error(TROUPE_FAILED_PRECONDITION,
                           "optimizing %s: node %s (%zu bytes) is Local, held in a scalar per "
                           "loop iteration by an earlier optimisation (of another procedure, or "
                           "of this one), but here it is not one and is larger than a stack "
                           "array may be (%lld bytes); mark it materialized before the first "
                           "compile, or set TROUPE_ITERATION_SCALARS=off",
                           c->proc->name, name, tn->size_bytes, (long long)limit);
    }
    for (size_t i = 0; i < c->nn && st == TROUPE_OK; i++) {
        troupe_tnode_t *tn = c->tns[i];
        if (!cand[i])
            continue;
        if (!s_was_scalar(tn)) {
            troupe_memory_mode_t m;
            int32_t prov = 0;
            (void)troupe_tnode_get_memory_mode(tn, &m, &prov);
            int64_t chained = (int64_t)prov * 1000 + TROUPE_PROV_ITERATION_SCALAR;
            if (chained > INT32_MAX || chained < 0)
                chained = TROUPE_PROV_ITERATION_SCALAR;
            st = troupe__opt_update(c, tn, troupe__opt_mode(TROUPE_MM_LOCAL, 0), (int32_t)chained,
                                    "an iteration scalar");
        }
        if (st == TROUPE_OK)
            c->traced[i].iteration_scalar = true;
    }
    troupe_free(w.use);
    troupe_free(cand);
    return st;
}
