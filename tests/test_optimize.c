/* Tests for compiler/optimize: tracing facts, memory-mode inference, virtualisation (inlining of
 * intermediate nodes, and what stays materialized), inputs/outputs/merge node, simplification
 * (constant folding, identities, integer powers, FMA fusion), inconsistent memory modes.
 * Results are compared before and after optimisation with a tiny evaluator over double
 * arrays (all evaluated nodes are double precision, so only the optimiser can change values),
 * and every optimised procedure is validated again. */
#include "compiler/optimize.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------------------- */

#define MAX_TN 16

static troupe_tnode_t *s_tns[MAX_TN];
static int s_ntns;

static troupe_tnode_t *s_node(const char *label, troupe_prec_t prec, int ndims, int64_t d0,
                              int64_t d1)
{
    int64_t dims[2] = {d0, d1};
    troupe_tnode_t *tn = NULL;
    const char *labels[1] = {label};
    cr_assert_eq(troupe_tnode_new(labels, 1, prec, ndims, dims, NULL, 0.0, &tn), TROUPE_OK);
    cr_assert_lt(s_ntns, MAX_TN);
    s_tns[s_ntns++] = tn;
    return tn;
}

static void s_release_all(void)
{
    for (int i = 0; i < s_ntns; i++)
        troupe_tnode_release(&s_tns[i]);
    s_ntns = 0;
}

static troupe_ll_proc_t *s_proc(const char *name)
{
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new(name, &p), TROUPE_OK);
    return p;
}

static troupe_axis_index_t s_i(int32_t sym)
{
    return troupe_idx_sym(sym);
}

static troupe_axis_index_t s_ip(int32_t sym, int64_t off)
{
    troupe_axis_index_t x = troupe_idx_sym(sym);
    x.offset = off;
    return x;
}

static troupe_sc_t *s_get1(troupe_ll_proc_t *p, troupe_tnode_t *tn, troupe_axis_index_t i0)
{
    return troupe_sc_get(p, tn, &i0);
}

static troupe_sc_t *s_get2(troupe_ll_proc_t *p, troupe_tnode_t *tn, troupe_axis_index_t i0,
                           troupe_axis_index_t i1)
{
    troupe_axis_index_t x[2] = {i0, i1};
    return troupe_sc_get(p, tn, x);
}

static troupe_ll_t *s_set1(troupe_ll_proc_t *p, troupe_tnode_t *tn, troupe_axis_index_t i0,
                           troupe_sc_t *v)
{
    return troupe_ll_set(p, tn, &i0, v);
}

static troupe_sc_t *s_c(troupe_ll_proc_t *p, double v)
{
    return troupe_sc_constant(p, v);
}

static troupe_sc_t *s_bin(troupe_ll_proc_t *p, troupe_binop_t op, troupe_sc_t *a, troupe_sc_t *b)
{
    return troupe_sc_binop(p, op, a, b);
}

/* for sym in 0..n-1: body */
static troupe_ll_t *s_for(troupe_ll_proc_t *p, int32_t sym, int64_t n, troupe_ll_t *body)
{
    return troupe_ll_for(p, sym, 0, n - 1, body, true);
}

static void s_body(troupe_ll_proc_t *p, size_t n, troupe_ll_t *const *items)
{
    p->body = troupe_ll_seq(p, n, items);
    cr_assert_not_null(p->body);
    cr_assert_eq(troupe_ll_proc_status(p), TROUPE_OK);
    cr_assert_eq(troupe_ll_proc_validate(p), TROUPE_OK, "%s", troupe_last_error());
}

static void s_optimize_ok(troupe_ll_proc_t *p, const troupe_optimize_opts_t *o)
{
    troupe_status_t st = troupe_ll_optimize(p, o);
    cr_assert_eq(st, TROUPE_OK, "optimize: %s: %s", troupe_status_str(st), troupe_last_error());
    cr_assert(p->optimized);
    cr_assert_eq(troupe_ll_proc_validate(p), TROUPE_OK, "%s", troupe_last_error());
}

/* Counting walk: SETs of `tn`, GETs of `tn`, LOCAL_SCOPEs, ops. */
typedef struct s_counts {
    int sets, gets, scopes, fmas, adds, muls, pows, local_loops;
} s_counts_t;

static void s_count_sc(const troupe_sc_t *e, const troupe_tnode_t *tn, s_counts_t *c);

static void s_count_ll(const troupe_ll_t *s, const troupe_tnode_t *tn, s_counts_t *c, int in_scope)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t k = 0; k < s->u.seq.count; k++)
            s_count_ll(s->u.seq.items[k], tn, c, in_scope);
        return;
    case TROUPE_LL_FOR:
        if (in_scope)
            c->local_loops++;
        s_count_ll(s->u.for_loop.body, tn, c, in_scope);
        return;
    case TROUPE_LL_SET:
        if (s->u.set.tn == tn)
            c->sets++;
        s_count_sc(s->u.set.value, tn, c);
        return;
    case TROUPE_LL_ZERO_OUT:
        if (s->u.zero_out == tn)
            c->sets++;
        return;
    case TROUPE_LL_SET_LOCAL:
        s_count_sc(s->u.set_local.value, tn, c);
        return;
    case TROUPE_LL_SET_FROM_VEC:
        s_count_sc(s->u.set_from_vec.arg, tn, c);
        return;
    default:
        return;
    }
}

static void s_count_sc(const troupe_sc_t *e, const troupe_tnode_t *tn, s_counts_t *c)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        c->scopes++;
        s_count_ll(e->u.local_scope.body, tn, c, 1);
        return;
    case TROUPE_SC_GET:
    case TROUPE_SC_GET_MERGE_BUFFER:
        if (e->u.get.tn == tn)
            c->gets++;
        return;
    case TROUPE_SC_TERNOP:
        if (e->u.op.op == TROUPE_TERNOP_FMA)
            c->fmas++;
        for (int k = 0; k < 3; k++)
            s_count_sc(e->u.op.args[k], tn, c);
        return;
    case TROUPE_SC_BINOP:
        if (e->u.op.op == TROUPE_BINOP_ADD)
            c->adds++;
        if (e->u.op.op == TROUPE_BINOP_MUL)
            c->muls++;
        if (e->u.op.op == TROUPE_BINOP_TO_POW_OF)
            c->pows++;
        for (int k = 0; k < 2; k++)
            s_count_sc(e->u.op.args[k], tn, c);
        return;
    case TROUPE_SC_UNOP:
        s_count_sc(e->u.op.args[0], tn, c);
        return;
    default:
        return;
    }
}

static s_counts_t s_counts(const troupe_ll_proc_t *p, const troupe_tnode_t *tn)
{
    s_counts_t c;
    memset(&c, 0, sizeof c);
    s_count_ll(p->body, tn, &c, 0);
    return c;
}

/* The value expression of the first SET of `tn` in the body. */
static const troupe_sc_t *s_find_set_value(const troupe_ll_t *s, const troupe_tnode_t *tn)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t k = 0; k < s->u.seq.count; k++) {
            const troupe_sc_t *v = s_find_set_value(s->u.seq.items[k], tn);
            if (v)
                return v;
        }
        return NULL;
    case TROUPE_LL_FOR:
        return s_find_set_value(s->u.for_loop.body, tn);
    case TROUPE_LL_SET:
        return s->u.set.tn == tn ? s->u.set.value : NULL;
    default:
        return NULL;
    }
}

/* ---- a tiny evaluator over double arrays -------------------------------------------------- */

typedef struct s_ev {
    const troupe_ll_proc_t *p;
    double *arr[MAX_TN]; /* by index in s_tns */
    double *merge;       /* merge buffer contents, laid out like the merge node */
    int64_t env[256];
    double locals[1024];
} s_ev_t;

static double *s_arr(s_ev_t *ev, const troupe_tnode_t *tn)
{
    for (int i = 0; i < s_ntns; i++)
        if (s_tns[i] == tn) {
            if (ev->arr[i] == NULL)
                ev->arr[i] = calloc((size_t)troupe_tnode_num_elems(tn), sizeof(double));
            return ev->arr[i];
        }
    cr_assert_fail("unknown node");
    return NULL;
}

static int64_t s_ev_index(s_ev_t *ev, const troupe_axis_index_t *x)
{
    int64_t v = x->offset;
    for (int k = 0; k < x->nterms; k++)
        v += x->terms[k].coeff * ev->env[x->terms[k].sym];
    return v;
}

static int64_t s_ev_flat(s_ev_t *ev, const troupe_tnode_t *tn, const troupe_axis_index_t *idcs)
{
    int64_t off = 0;
    for (int a = 0; a < tn->ndims; a++) {
        int64_t v = s_ev_index(ev, &idcs[a]);
        cr_assert(v >= 0 && v < tn->dims[a], "index out of bounds");
        off = off * tn->dims[a] + v;
    }
    return off;
}

static void s_ev_ll(s_ev_t *ev, const troupe_ll_t *s);

static double s_ev_sc(s_ev_t *ev, const troupe_sc_t *e)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        cr_assert_lt(e->u.local_scope.id, 1024);
        ev->locals[e->u.local_scope.id] = 0.0;
        s_ev_ll(ev, e->u.local_scope.body);
        return ev->locals[e->u.local_scope.id];
    case TROUPE_SC_GET_LOCAL:
        return ev->locals[e->u.get_local.id];
    case TROUPE_SC_GET:
        return s_arr(ev, e->u.get.tn)[s_ev_flat(ev, e->u.get.tn, e->u.get.idcs)];
    case TROUPE_SC_GET_MERGE_BUFFER:
        return ev->merge[s_ev_flat(ev, e->u.get.tn, e->u.get.idcs)];
    case TROUPE_SC_TERNOP:
        return troupe_interpret_ternop((troupe_ternop_t)e->u.op.op, s_ev_sc(ev, e->u.op.args[0]),
                                       s_ev_sc(ev, e->u.op.args[1]), s_ev_sc(ev, e->u.op.args[2]));
    case TROUPE_SC_BINOP:
        return troupe_interpret_binop((troupe_binop_t)e->u.op.op, s_ev_sc(ev, e->u.op.args[0]),
                                      s_ev_sc(ev, e->u.op.args[1]));
    case TROUPE_SC_UNOP:
        return troupe_interpret_unop((troupe_unop_t)e->u.op.op, s_ev_sc(ev, e->u.op.args[0]));
    case TROUPE_SC_CONSTANT:
        return e->u.constant;
    case TROUPE_SC_CONSTANT_BITS:
        return (double)e->u.constant_bits;
    case TROUPE_SC_EMBED_INDEX:
        return (double)s_ev_index(ev, &e->u.embed_index);
    }
    return NAN;
}

static void s_ev_ll(s_ev_t *ev, const troupe_ll_t *s)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t k = 0; k < s->u.seq.count; k++)
            s_ev_ll(ev, s->u.seq.items[k]);
        return;
    case TROUPE_LL_FOR:
        for (int64_t v = s->u.for_loop.from; v <= s->u.for_loop.to; v++) {
            ev->env[s->u.for_loop.sym] = v;
            s_ev_ll(ev, s->u.for_loop.body);
        }
        return;
    case TROUPE_LL_ZERO_OUT: {
        double *a = s_arr(ev, s->u.zero_out);
        memset(a, 0, sizeof(double) * (size_t)troupe_tnode_num_elems(s->u.zero_out));
        return;
    }
    case TROUPE_LL_SET: {
        double v = s_ev_sc(ev, s->u.set.value);
        s_arr(ev, s->u.set.tn)[s_ev_flat(ev, s->u.set.tn, s->u.set.idcs)] = v;
        return;
    }
    case TROUPE_LL_SET_LOCAL:
        ev->locals[s->u.set_local.id] = s_ev_sc(ev, s->u.set_local.value);
        return;
    default:
        return;
    }
}

/* Runs p with `inputs` filled deterministically (value = seed + 0.25 * k per node); returns
 * a copy of `out`'s values. */
static double *s_run(const troupe_ll_proc_t *p, troupe_tnode_t *const *inputs, int ninputs,
                     const troupe_tnode_t *out)
{
    s_ev_t *ev = calloc(1, sizeof *ev);
    cr_assert_not_null(ev);
    ev->p = p;
    for (int i = 0; i < ninputs; i++) {
        double *a = s_arr(ev, inputs[i]);
        for (int64_t k = 0; k < troupe_tnode_num_elems(inputs[i]); k++)
            a[k] = 1.0 + 0.5 * i + 0.25 * (double)k - 0.125 * (double)((k * 7) % 5);
    }
    s_ev_ll(ev, p->body);
    int64_t n = troupe_tnode_num_elems(out);
    double *res = malloc(sizeof(double) * (size_t)n);
    memcpy(res, s_arr(ev, out), sizeof(double) * (size_t)n);
    for (int i = 0; i < MAX_TN; i++)
        free(ev->arr[i]);
    free(ev);
    return res;
}

static void s_assert_same(const double *a, const double *b, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        cr_assert(a[k] == b[k], "element %lld differs: %.17g vs %.17g", (long long)k, a[k], b[k]);
}

static troupe_memory_mode_kind_t s_mode_kind(troupe_tnode_t *tn, int32_t *prov)
{
    troupe_memory_mode_t m;
    if (!troupe_tnode_get_memory_mode(tn, &m, prov))
        return (troupe_memory_mode_kind_t)0;
    return m.kind;
}

static bool s_in_list(troupe_tnode_t *const *list, size_t n, const troupe_tnode_t *tn)
{
    for (size_t k = 0; k < n; k++)
        if (list[k] == tn)
            return true;
    return false;
}

static void s_set_mode(troupe_tnode_t *tn, troupe_memory_mode_kind_t kind,
                       troupe_memory_type_t memtype, int32_t prov)
{
    troupe_memory_mode_t m = {kind, memtype, TROUPE_SHARING_UNSET};
    cr_assert_eq(troupe_tnode_update_memory_mode(tn, m, prov), TROUPE_OK);
}

static void s_teardown(void)
{
    s_release_all();
}

TestSuite(optimize, .fini = s_teardown);

/* ---- virtualisation ---------------------------------------------------------------------- */

/* t[i] = a[i]*2; out[i] = t[i]+1 */
static troupe_ll_proc_t *s_build_chain(troupe_tnode_t **a, troupe_tnode_t **t, troupe_tnode_t **out)
{
    *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 4, 0);
    *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("chain");
    int32_t i = troupe_ll_proc_add_symbol(p, "i"), j = troupe_ll_proc_add_symbol(p, "j");
    troupe_ll_t *items[2] = {
        s_for(
            p, i, 4,
            s_set1(p, *t, s_i(i), s_bin(p, TROUPE_BINOP_MUL, s_get1(p, *a, s_i(i)), s_c(p, 2.0)))),
        s_for(p, j, 4,
              s_set1(p, *out, s_i(j),
                     s_bin(p, TROUPE_BINOP_ADD, s_get1(p, *t, s_i(j)), s_c(p, 1.0)))),
    };
    s_body(p, 2, items);
    return p;
}

Test(optimize, intermediate_used_once_is_inlined)
{
    troupe_tnode_t *a, *t, *out;
    troupe_ll_proc_t *p = s_build_chain(&a, &t, &out);
    double *before = s_run(p, &a, 1, out);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.simplify = false; /* look at the inlined form itself */
    s_optimize_ok(p, &o);

    s_counts_t ct = s_counts(p, t);
    cr_assert_eq(ct.sets, 0, "a SET of t remains");
    cr_assert_eq(ct.gets, 0, "a GET of t remains");
    cr_assert_geq(ct.scopes, 1, "no local scope was inlined");
    cr_assert_eq(s_counts(p, out).sets, 1);
    int32_t prov = 0;
    cr_assert_eq(s_mode_kind(t, &prov), TROUPE_MM_VIRTUAL);
    cr_assert_eq(prov, TROUPE_PROV_VIRTUALIZED);
    const troupe_ll_traced_t *tr = troupe_optimize_traced(p, t);
    cr_assert_not_null(tr);
    cr_assert_eq(tr->assignments, 1);
    cr_assert_eq(tr->max_visits, 1);
    cr_assert(!tr->read_before_write);
    cr_assert(tr->is_accessing);
    cr_assert(tr->is_complex); /* a*2 applies an op to a memory read (OCANNL's notion) */

    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    /* inputs/outputs: a in, out out; t neither (virtual). */
    cr_assert_eq(p->ninputs, 1);
    cr_assert_eq(p->inputs[0], a);
    cr_assert_eq(p->noutputs, 1);
    cr_assert_eq(p->outputs[0], out);
    cr_assert_null(p->merge_node);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, intermediate_inlined_and_simplified)
{
    troupe_tnode_t *a, *t, *out;
    troupe_ll_proc_t *p = s_build_chain(&a, &t, &out);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    s_counts_t ct = s_counts(p, t);
    cr_assert_eq(ct.sets + ct.gets + ct.scopes, 0);
    /* out[j] = fma(a[j], 2, 1): the scope unwrapped (same precision) and fused. */
    const troupe_sc_t *v = s_find_set_value(p->body, out);
    cr_assert_not_null(v);
    cr_assert_eq(v->kind, TROUPE_SC_TERNOP);
    cr_assert_eq(v->u.op.op, TROUPE_TERNOP_FMA);
    cr_assert_eq(v->u.op.args[0]->kind, TROUPE_SC_GET);
    cr_assert_eq(v->u.op.args[0]->u.get.tn, a);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4); /* a*2 is exact, so fma changes nothing here */
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, narrow_precision_intermediate_stays_materialized)
{
    /* A half t would lose its rounding to half if inlined (local scopes compute in float). */
    for (int pass = 0; pass < 2; pass++) {
        troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 1, 4, 0);
        troupe_tnode_t *t = s_node("t", TROUPE_PREC_HALF, 1, 4, 0);
        troupe_tnode_t *out = s_node("out", TROUPE_PREC_SINGLE, 1, 4, 0);
        troupe_ll_proc_t *p = s_proc("narrow");
        int32_t i = troupe_ll_proc_add_symbol(p, "i");
        troupe_ll_t *items[2] = {
            s_for(p, i, 4,
                  s_set1(p, t, s_i(i),
                         s_bin(p, TROUPE_BINOP_MUL, s_get1(p, a, s_i(i)), s_c(p, 3.0)))),
            s_for(p, i, 4,
                  s_set1(p, out, s_i(i),
                         s_bin(p, TROUPE_BINOP_ADD, s_get1(p, t, s_i(i)), s_c(p, 1.0)))),
        };
        s_body(p, 2, items);
        troupe_optimize_opts_t o;
        troupe_optimize_opts_default(&o);
        o.inline_narrow_precisions = pass == 1;
        s_optimize_ok(p, &o);
        int32_t prov = 0;
        troupe_memory_mode_kind_t k = s_mode_kind(t, &prov);
        if (pass == 0) {
            cr_assert_neq(k, TROUPE_MM_VIRTUAL);
            cr_assert_eq(prov / 1000, TROUPE_PROV_NV_NARROW_PRECISION);
            cr_assert_eq(s_counts(p, t).sets, 1);
        } else {
            cr_assert_eq(k, TROUPE_MM_VIRTUAL);
        }
        troupe_ll_proc_destroy(&p);
        s_release_all();
    }
}

Test(optimize, shifted_read_substitutes_indices)
{
    /* t[i] = a[i]*3 (i < 5); out[j] = t[j+1] - t[j] ... read at two cells: t is complex and a
     * cell is read twice -> not virtual; use a single shifted read instead. */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 5, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 5, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("shift");
    int32_t i = troupe_ll_proc_add_symbol(p, "i"), j = troupe_ll_proc_add_symbol(p, "j");
    troupe_ll_t *items[2] = {
        s_for(p, i, 5,
              s_set1(p, t, s_i(i), s_bin(p, TROUPE_BINOP_MUL, s_get1(p, a, s_i(i)), s_c(p, 3.0)))),
        s_for(p, j, 4,
              s_set1(p, out, s_i(j),
                     s_bin(p, TROUPE_BINOP_SUB, s_get1(p, t, s_ip(j, 1)), s_c(p, 0.5)))),
    };
    s_body(p, 2, items);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    cr_assert_eq(s_mode_kind(t, NULL), TROUPE_MM_VIRTUAL);
    cr_assert_eq(s_counts(p, t).gets, 0);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, chain_of_virtual_nodes)
{
    /* t1 = a + 1; t2 = t1 * 3; out = t2 - 1 (2-D) */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 2, 2, 3);
    troupe_tnode_t *t1 = s_node("t1", TROUPE_PREC_DOUBLE, 2, 2, 3);
    troupe_tnode_t *t2 = s_node("t2", TROUPE_PREC_DOUBLE, 2, 2, 3);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 2, 2, 3);
    troupe_ll_proc_t *p = s_proc("chain2");
    int32_t i = troupe_ll_proc_add_symbol(p, "i"), j = troupe_ll_proc_add_symbol(p, "j");
    troupe_axis_index_t ij[2] = {s_i(i), s_i(j)};
    troupe_ll_t *items[3] = {
        s_for(p, i, 2,
              s_for(p, j, 3,
                    troupe_ll_set(
                        p, t1, ij,
                        s_bin(p, TROUPE_BINOP_ADD, s_get2(p, a, s_i(i), s_i(j)), s_c(p, 1.0))))),
        s_for(p, i, 2,
              s_for(p, j, 3,
                    troupe_ll_set(
                        p, t2, ij,
                        s_bin(p, TROUPE_BINOP_MUL, s_get2(p, t1, s_i(i), s_i(j)), s_c(p, 3.0))))),
        s_for(p, j, 3,
              s_for(p, i, 2,
                    troupe_ll_set(
                        p, out, ij,
                        s_bin(p, TROUPE_BINOP_SUB, s_get2(p, t2, s_i(i), s_i(j)), s_c(p, 1.0))))),
    };
    s_body(p, 3, items);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    cr_assert_eq(s_mode_kind(t1, NULL), TROUPE_MM_VIRTUAL);
    cr_assert_eq(s_mode_kind(t2, NULL), TROUPE_MM_VIRTUAL);
    cr_assert_eq(s_counts(p, t1).gets + s_counts(p, t2).gets, 0);
    cr_assert_eq(s_counts(p, t1).sets + s_counts(p, t2).sets, 0);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 6);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

/* t[i] = a[i]*2; out[i] = t[i]*t[i] over 4 doubles: each cell of t is read twice by a complex
 * computation. */
static troupe_ll_proc_t *s_twice(const char *name, troupe_tnode_t **a, troupe_tnode_t **t,
                                 troupe_tnode_t **out)
{
    *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 4, 0);
    *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc(name);
    int32_t i = troupe_ll_proc_add_symbol(p, "i"), j = troupe_ll_proc_add_symbol(p, "j");
    troupe_ll_t *items[2] = {
        s_for(p, i, 4,
              s_set1(p, *t, s_i(i),
                     s_bin(p, TROUPE_BINOP_MUL, s_get1(p, *a, s_i(i)), s_c(p, 2.0)))),
        s_for(p, j, 4,
              s_set1(p, *out, s_i(j),
                     s_bin(p, TROUPE_BINOP_MUL, s_get1(p, *t, s_i(j)), s_get1(p, *t, s_i(j))))),
    };
    s_body(p, 2, items);
    return p;
}

Test(optimize, read_twice_stays_materialized)
{
    /* t[i] = a[i]*2; out[i] = t[i]*t[i]: each cell of t is read twice by a complex
     * computation -> Never_virtual (1), resolved to Local (small) with chained provenance,
     * under OCANNL's rule (virtualize_max_cheap_visits 0). */
    troupe_tnode_t *a, *t, *out;
    troupe_ll_proc_t *p = s_twice("twice", &a, &t, &out);
    double *before = s_run(p, &a, 1, out);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.virtualize_max_cheap_visits = 0;
    s_optimize_ok(p, &o);
    const troupe_ll_traced_t *tr = troupe_optimize_traced(p, t);
    cr_assert_eq(tr->max_visits, 2);
    int32_t prov = 0;
    troupe_memory_mode_kind_t k = s_mode_kind(t, &prov);
    cr_assert(k == TROUPE_MM_LOCAL || k == TROUPE_MM_ON_DEVICE, "t mode %d", (int)k);
    cr_assert_eq(prov, TROUPE_PROV_TOO_MANY_VISITS * 1000 + TROUPE_PROV_RESOLVED);
    cr_assert_eq(s_counts(p, t).sets, 1);
    cr_assert_eq(s_counts(p, t).gets, 2);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

/* Whether the statement tree zeroes tn. */
static bool s_zeroes(const troupe_ll_t *s, const troupe_tnode_t *tn)
{
    if (s->kind == TROUPE_LL_ZERO_OUT)
        return s->u.zero_out == tn;
    if (s->kind == TROUPE_LL_FOR)
        return s_zeroes(s->u.for_loop.body, tn);
    for (size_t i = 0; s->kind == TROUPE_LL_SEQ && i < s->u.seq.count; i++)
        if (s_zeroes(s->u.seq.items[i], tn))
            return true;
    return false;
}

/* y (8) zeroed, then `form`: 0 y[4h + d] += x[2d + h] over h < 2, d < 4 (a permuted copy);
 * 1 two nests y[d] += x[d], y[d + 4] += 2 x[d] (halves); 2 y[i] += x[2i + j] over i < 4,
 * j < 2 (a reduction); 3 y[d] += x[d] over d < 4 only (half of y). Whether y is still zeroed
 * after optimising; the results stay the same. */
static bool s_sole_still_zeroed(int form)
{
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_DOUBLE, 1, 8, 0);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_DOUBLE, 1, 8, 0);
    troupe_ll_proc_t *p = s_proc("sole");
    int32_t h = troupe_ll_proc_add_symbol(p, "h"), d = troupe_ll_proc_add_symbol(p, "d");
    troupe_ll_t *items[3] = {troupe_ll_zero_out(p, y), NULL, NULL};
    size_t n = 2;
    if (form == 0 || form == 2) {
        troupe_axis_index_t yi = {2, {{4, h}, {1, d}}, 0}, xi = {2, {{2, d}, {1, h}}, 0};
        if (form == 2) { /* h < 4 over y[h], d < 2 reduced */
            yi = s_i(h);
            xi = (troupe_axis_index_t){2, {{2, h}, {1, d}}, 0};
        }
        items[1] = s_for(p, h, form == 2 ? 4 : 2,
                         s_for(p, d, form == 2 ? 2 : 4,
                               s_set1(p, y, yi,
                                      s_bin(p, TROUPE_BINOP_ADD, s_get1(p, y, yi),
                                            s_get1(p, x, xi)))));
    } else {
        items[1] = s_for(p, d, 4,
                         s_set1(p, y, s_i(d),
                                s_bin(p, TROUPE_BINOP_ADD, s_get1(p, y, s_i(d)),
                                      s_get1(p, x, s_i(d)))));
        if (form == 1) {
            items[2] = s_for(
                p, h, 4,
                s_set1(p, y, s_ip(h, 4),
                       s_bin(p, TROUPE_BINOP_ADD, s_get1(p, y, s_ip(h, 4)),
                             s_bin(p, TROUPE_BINOP_MUL, s_c(p, 2.0), s_get1(p, x, s_i(h))))));
            n = 3;
        }
    }
    s_body(p, n, items);
    double *before = s_run(p, &x, 1, y);
    s_optimize_ok(p, NULL);
    bool zeroed = s_zeroes(p->body, y);
    double *after = s_run(p, &x, 1, y);
    s_assert_same(before, after, 8);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
    return zeroed;
}

Test(optimize, a_zeroing_before_adds_into_each_cell_once_goes)
{
    cr_assert(!s_sole_still_zeroed(0), "a permuted copy still zeroes its output");
    cr_assert(!s_sole_still_zeroed(1), "two nests partitioning the output still zero it");
    cr_assert(s_sole_still_zeroed(2), "a reduction lost its zeroing");
    cr_assert(s_sole_still_zeroed(3), "a nest covering half the output lost its zeroing");
}

/* t[i] = a[i]*2 (exp(a[i]) when `costly`); out[i] = t[i]*...*t[i], `reads` factors. */
static troupe_ll_proc_t *s_reads(const char *name, int reads, bool costly, troupe_tnode_t **a,
                                 troupe_tnode_t **t, troupe_tnode_t **out)
{
    *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 4, 0);
    *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc(name);
    int32_t i = troupe_ll_proc_add_symbol(p, "i"), j = troupe_ll_proc_add_symbol(p, "j");
    troupe_sc_t *def = costly ? troupe_sc_unop(p, TROUPE_UNOP_EXP, s_get1(p, *a, s_i(i)))
                              : s_bin(p, TROUPE_BINOP_MUL, s_get1(p, *a, s_i(i)), s_c(p, 2.0));
    troupe_sc_t *prod = s_get1(p, *t, s_i(j));
    for (int k = 1; k < reads; k++)
        prod = s_bin(p, TROUPE_BINOP_MUL, prod, s_get1(p, *t, s_i(j)));
    troupe_ll_t *items[2] = {s_for(p, i, 4, s_set1(p, *t, s_i(i), def)),
                             s_for(p, j, 4, s_set1(p, *out, s_i(j), prod))};
    s_body(p, 2, items);
    return p;
}

/* The mode kind and provenance t gets under the default options; the results stay the same. */
static troupe_memory_mode_kind_t s_reads_mode(int reads, bool costly, int32_t *prov,
                                              int64_t *sets)
{
    troupe_tnode_t *a, *t, *out;
    troupe_ll_proc_t *p = s_reads("reads", reads, costly, &a, &t, &out);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    cr_assert_eq(troupe_optimize_traced(p, t)->max_visits, reads);
    troupe_memory_mode_kind_t k = s_mode_kind(t, prov);
    *sets = s_counts(p, t).sets;
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
    return k;
}

Test(optimize, cheap_read_a_few_times_is_inlined)
{
    /* a cheap definition (a[i]*2) read up to virtualize_max_cheap_visits (3) times is
     * recomputed at each read (troupe's rule); read 4 times, or costly (exp) read twice, it
     * stays an array as under OCANNL's rule. */
    int32_t prov = 0;
    int64_t sets = -1;
    cr_assert_eq(s_reads_mode(2, false, &prov, &sets), TROUPE_MM_VIRTUAL);
    cr_assert_eq(prov, TROUPE_PROV_VIRTUALIZED);
    cr_assert_eq(sets, 0, "its loop is gone");
    cr_assert_eq(s_reads_mode(3, false, &prov, &sets), TROUPE_MM_VIRTUAL);
    troupe_memory_mode_kind_t k = s_reads_mode(4, false, &prov, &sets);
    cr_assert(k == TROUPE_MM_LOCAL || k == TROUPE_MM_ON_DEVICE, "mode %d", (int)k);
    cr_assert_eq(prov, TROUPE_PROV_TOO_MANY_VISITS * 1000 + TROUPE_PROV_RESOLVED);
    cr_assert_eq(sets, 1);
    k = s_reads_mode(2, true, &prov, &sets);
    cr_assert(k == TROUPE_MM_LOCAL || k == TROUPE_MM_ON_DEVICE, "mode %d", (int)k);
    cr_assert_eq(prov, TROUPE_PROV_TOO_MANY_VISITS * 1000 + TROUPE_PROV_RESOLVED);
    cr_assert_eq(sets, 1);
}

Test(optimize, chain_of_cheap_definitions_is_cut)
{
    /* r0 = a+1; r[k+1] = r[k]*r[k] + a; out = r4*2. Each r is cheap (2 operations) and read
     * twice, but inlined into the next it brings its own chain along: r3's definition with r0,
     * r1 and r2 inlined is 10 operations (over 8), so r3 is stored and the chain starts again
     * (the residual stream's adds, each layer's sum reading every earlier layer's output). */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *r[5];
    troupe_ll_proc_t *p = s_proc("chain");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[6];
    for (int k = 0; k < 5; k++) {
        char label[8];
        snprintf(label, sizeof label, "r%d", k);
        r[k] = s_node(label, TROUPE_PREC_DOUBLE, 1, 4, 0);
        troupe_sc_t *v = k == 0 ? s_bin(p, TROUPE_BINOP_ADD, s_get1(p, a, s_i(i)), s_c(p, 1.0))
                                : s_bin(p, TROUPE_BINOP_ADD,
                                        s_bin(p, TROUPE_BINOP_MUL, s_get1(p, r[k - 1], s_i(i)),
                                              s_get1(p, r[k - 1], s_i(i))),
                                        s_get1(p, a, s_i(i)));
        items[k] = s_for(p, i, 4, s_set1(p, r[k], s_i(i), v));
    }
    items[5] = s_for(
        p, i, 4,
        s_set1(p, out, s_i(i), s_bin(p, TROUPE_BINOP_MUL, s_get1(p, r[4], s_i(i)), s_c(p, 2.0))));
    s_body(p, 6, items);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    int32_t prov = 0;
    for (int k = 0; k < 5; k++) {
        troupe_memory_mode_kind_t kind = s_mode_kind(r[k], &prov);
        if (k == 3) {
            cr_assert_neq(kind, TROUPE_MM_VIRTUAL, "r3 is stored");
            cr_assert_eq(prov, TROUPE_PROV_TOO_MANY_VISITS * 1000 + TROUPE_PROV_RESOLVED);
        } else {
            cr_assert_eq(kind, TROUPE_MM_VIRTUAL, "r%d is inlined (mode %d/%d)", k, (int)kind,
                         (int)prov);
        }
    }
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
    s_release_all();
}

Test(optimize, chain_counts_only_definitions_read_twice)
{
    /* u = a*a*...*a (8 operations, read once); t = u + 1 (read twice); out = t*t. u sits in
     * t's loop, so u counts nothing toward t's chain and t stays cheap; both are inlined. */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *u = s_node("u", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("chain_once");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_sc_t *pw = s_get1(p, a, s_i(i));
    for (int k = 0; k < 8; k++)
        pw = s_bin(p, TROUPE_BINOP_MUL, pw, s_get1(p, a, s_i(i)));
    troupe_ll_t *items[3] = {
        s_for(p, i, 4, s_set1(p, u, s_i(i), pw)),
        s_for(p, i, 4,
              s_set1(p, t, s_i(i), s_bin(p, TROUPE_BINOP_ADD, s_get1(p, u, s_i(i)), s_c(p, 1.0)))),
        s_for(p, i, 4,
              s_set1(p, out, s_i(i),
                     s_bin(p, TROUPE_BINOP_MUL, s_get1(p, t, s_i(i)), s_get1(p, t, s_i(i))))),
    };
    s_body(p, 3, items);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    cr_assert_eq(s_mode_kind(u, NULL), TROUPE_MM_VIRTUAL);
    int32_t prov = 0;
    cr_assert_eq(s_mode_kind(t, &prov), TROUPE_MM_VIRTUAL, "prov %d", (int)prov);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
    s_release_all();
}

/* c[i] = identity(src[i]); out[i] = c[i]^4 (c read 4 times). src is the input a, or
 * t[i] = a[i]*2 (a cheap definition that may itself be inlined). The mode c gets. */
static troupe_memory_mode_kind_t s_copy_mode(bool of_input)
{
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *cp = s_node("c", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("copy");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[3];
    size_t n = 0;
    if (!of_input)
        items[n++] = s_for(
            p, i, 4,
            s_set1(p, t, s_i(i), s_bin(p, TROUPE_BINOP_MUL, s_get1(p, a, s_i(i)), s_c(p, 2.0))));
    troupe_sc_t *src = s_get1(p, of_input ? a : t, s_i(i));
    items[n++] =
        s_for(p, i, 4, s_set1(p, cp, s_i(i), troupe_sc_unop(p, TROUPE_UNOP_IDENTITY, src)));
    troupe_sc_t *prod = s_get1(p, cp, s_i(i));
    for (int k = 1; k < 4; k++)
        prod = s_bin(p, TROUPE_BINOP_MUL, prod, s_get1(p, cp, s_i(i)));
    items[n++] = s_for(p, i, 4, s_set1(p, out, s_i(i), prod));
    s_body(p, n, items);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    troupe_memory_mode_kind_t k = s_mode_kind(cp, NULL);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
    s_release_all();
    return k;
}

Test(optimize, copy_of_a_stored_node_is_inlined)
{
    /* a copy of a stored node is a simple computation, inlined at every read (a product
     * then reads the stored node through its strides: attention's q, k, v out of qkv) */
    cr_assert_eq(s_copy_mode(true), TROUPE_MM_VIRTUAL);
    /* a copy of a definition that may be inlined stays stored, so that a product never
     * reads an inlined definition */
    cr_assert_neq(s_copy_mode(false), TROUPE_MM_VIRTUAL);
}

/* t[i] = a[i]*2; out[i] = t[i]*t[i] again, t resolving from Never_virtual: Local under the
 * default (TROUPE_STACK_THRESHOLD, 32 bytes pass), On_device with local_max_bytes 0 (what the
 * cuda backend asks, devices/device.h no_local_arrays), Local again with a limit of its 32 bytes
 * and On_device with 31; the results stay the same; a limit below -1 is refused. */
static troupe_memory_mode_kind_t s_twice_mode(int64_t local_max_bytes)
{
    troupe_tnode_t *a, *t, *out;
    troupe_ll_proc_t *p = s_twice("twice_lim", &a, &t, &out);
    double *before = s_run(p, &a, 1, out);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    cr_assert_eq(o.local_max_bytes, -1, "the default follows TROUPE_STACK_THRESHOLD");
    o.local_max_bytes = local_max_bytes;
    o.virtualize_max_cheap_visits = 0; /* t stays an array */
    s_optimize_ok(p, &o);
    troupe_memory_mode_kind_t k = s_mode_kind(t, NULL);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
    return k;
}

Test(optimize, local_max_bytes_decides_local_arrays)
{
    cr_assert_eq(s_twice_mode(-1), TROUPE_MM_LOCAL);
    cr_assert_eq(s_twice_mode(0), TROUPE_MM_ON_DEVICE);
    cr_assert_eq(s_twice_mode(32), TROUPE_MM_LOCAL);
    cr_assert_eq(s_twice_mode(31), TROUPE_MM_ON_DEVICE);
    troupe_ll_proc_t *p = s_proc("bad_lim");
    troupe_ll_t *items[1] = {troupe_ll_noop(p)};
    s_body(p, 1, items);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.local_max_bytes = -2;
    cr_assert_eq(troupe_ll_optimize(p, &o), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "negative limit in the options") != NULL, "%s",
              troupe_last_error());
    troupe_ll_proc_destroy(&p);
}

Test(optimize, simple_copy_read_twice_is_inlined)
{
    /* t[i] = a[i] (a copy: not complex) read twice -> still inlined (inline_simple). */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("copy2");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[2] = {
        s_for(p, i, 4, s_set1(p, t, s_i(i), s_get1(p, a, s_i(i)))),
        s_for(p, i, 4,
              s_set1(p, out, s_i(i),
                     s_bin(p, TROUPE_BINOP_ADD, s_get1(p, t, s_i(i)), s_get1(p, t, s_i(i))))),
    };
    s_body(p, 2, items);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    cr_assert_eq(s_mode_kind(t, NULL), TROUPE_MM_VIRTUAL);
    cr_assert(!troupe_optimize_traced(p, t)->is_complex);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, recurrent_accumulator_is_materialized_input_and_output)
{
    /* for i: acc[0] = acc[0] + a[i] with no initialisation: read before written. */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *acc = s_node("acc", TROUPE_PREC_DOUBLE, 1, 1, 0);
    troupe_ll_proc_t *p = s_proc("recur");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[1] = {
        s_for(p, i, 4,
              s_set1(p, acc, troupe_idx_fixed(0),
                     s_bin(p, TROUPE_BINOP_ADD, s_get1(p, acc, troupe_idx_fixed(0)),
                           s_get1(p, a, s_i(i))))),
    };
    s_body(p, 1, items);
    s_optimize_ok(p, NULL);
    const troupe_ll_traced_t *tr = troupe_optimize_traced(p, acc);
    cr_assert(tr->read_before_write);
    cr_assert(!tr->read_only);
    int32_t prov = 0;
    cr_assert_eq(s_mode_kind(acc, &prov), TROUPE_MM_ON_DEVICE);
    cr_assert_eq(prov, TROUPE_PROV_RECURRENT * 1000 + TROUPE_PROV_RESOLVED);
    cr_assert(s_in_list(p->inputs, p->ninputs, acc));
    cr_assert(s_in_list(p->inputs, p->ninputs, a));
    cr_assert(s_in_list(p->outputs, p->noutputs, acc));
    cr_assert_eq(p->noutputs, 1);
    cr_assert_eq(s_counts(p, acc).sets, 1);
    troupe_ll_proc_destroy(&p);
}

/* ---- matmul: inputs, outputs, reductions --------------------------------------------------- */

/* zero c; for i,j,k: c[i,j] = c[i,j] + a[i,k]*b[k,j] */
static troupe_ll_proc_t *s_build_matmul(troupe_tnode_t **a, troupe_tnode_t **b, troupe_tnode_t **c)
{
    *a = s_node("a", TROUPE_PREC_DOUBLE, 2, 2, 3);
    *b = s_node("b", TROUPE_PREC_DOUBLE, 2, 3, 2);
    *c = s_node("c", TROUPE_PREC_DOUBLE, 2, 2, 2);
    troupe_ll_proc_t *p = s_proc("matmul");
    int32_t i = troupe_ll_proc_add_symbol(p, "i"), j = troupe_ll_proc_add_symbol(p, "j"),
            k = troupe_ll_proc_add_symbol(p, "k");
    troupe_axis_index_t ij[2] = {s_i(i), s_i(j)};
    troupe_sc_t *prod =
        s_bin(p, TROUPE_BINOP_MUL, s_get2(p, *a, s_i(i), s_i(k)), s_get2(p, *b, s_i(k), s_i(j)));
    troupe_ll_t *acc =
        troupe_ll_set(p, *c, ij, s_bin(p, TROUPE_BINOP_ADD, troupe_sc_get(p, *c, ij), prod));
    troupe_ll_t *items[2] = {troupe_ll_zero_out(p, *c),
                             s_for(p, i, 2, s_for(p, j, 2, s_for(p, k, 3, acc)))};
    s_body(p, 2, items);
    return p;
}

Test(optimize, matmul_inputs_outputs)
{
    troupe_tnode_t *a, *b, *c;
    troupe_ll_proc_t *p = s_build_matmul(&a, &b, &c);
    troupe_tnode_t *ins[2];
    double *before;
    ins[0] = a;
    ins[1] = b;
    before = s_run(p, ins, 2, c);
    s_optimize_ok(p, NULL);
    cr_assert_eq(p->ninputs, 2);
    cr_assert(s_in_list(p->inputs, 2, a) && s_in_list(p->inputs, 2, b));
    cr_assert(p->inputs[0]->id < p->inputs[1]->id, "inputs sorted by id");
    cr_assert_eq(p->noutputs, 1);
    cr_assert_eq(p->outputs[0], c);
    cr_assert_null(p->merge_node);
    const troupe_ll_traced_t *tc = troupe_optimize_traced(p, c);
    cr_assert(tc->zeroed_out && tc->zero_initialized);
    cr_assert(!tc->read_before_write);
    cr_assert_eq(tc->assignments, 2);
    cr_assert_eq(tc->max_visits, 3); /* the accumulation reads each cell 3 times */
    const troupe_ll_traced_t *ta = troupe_optimize_traced(p, a);
    cr_assert(ta->read_only && ta->is_accessing);
    cr_assert_eq(ta->max_visits, 2); /* a[i,k] read for each j */
    int32_t prov = 0;
    cr_assert_eq(s_mode_kind(a, &prov), TROUPE_MM_HOSTED);
    cr_assert_eq(prov, TROUPE_PROV_READ_ONLY_HOSTED);
    cr_assert_neq(s_mode_kind(c, NULL), TROUPE_MM_VIRTUAL);
    cr_assert(troupe_tnode_is_materialized_force(c, 0));
    double *after = s_run(p, ins, 2, c);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, merge_node_is_recorded)
{
    /* g[i] = g[i] + merge(g)[i] */
    troupe_tnode_t *g = s_node("g", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("merge");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_axis_index_t x = s_i(i);
    troupe_ll_t *items[1] = {s_for(
        p, i, 4,
        s_set1(p, g, x,
               s_bin(p, TROUPE_BINOP_ADD, s_get1(p, g, x), troupe_sc_get_merge_buffer(p, g, &x))))};
    s_body(p, 1, items);
    s_optimize_ok(p, NULL);
    cr_assert_eq(p->merge_node, g);
    cr_assert(s_in_list(p->inputs, p->ninputs, g));
    cr_assert(s_in_list(p->outputs, p->noutputs, g));
    troupe_ll_proc_destroy(&p);
}

Test(optimize, merge_source_copied_is_materialized)
{
    /* g[i] = merge(g)[i]: g is written, its only other read is the merge buffer; it must stay
     * a materialized output (not virtual, not local). */
    troupe_tnode_t *g = s_node("g", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("merge_copy");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_axis_index_t x = s_i(i);
    troupe_ll_t *items[1] = {s_for(p, i, 4, s_set1(p, g, x, troupe_sc_get_merge_buffer(p, g, &x)))};
    s_body(p, 1, items);
    s_optimize_ok(p, NULL);
    int32_t prov = 0;
    cr_assert_eq(s_mode_kind(g, &prov), TROUPE_MM_ON_DEVICE);
    cr_assert_eq(prov, TROUPE_PROV_MERGE_SOURCE * 1000 + TROUPE_PROV_RESOLVED);
    cr_assert_eq(p->merge_node, g);
    cr_assert(s_in_list(p->outputs, p->noutputs, g));
    troupe_ll_proc_destroy(&p);
}

Test(optimize, two_merge_nodes_is_an_error)
{
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("merge2");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_axis_index_t ix = s_i(i);
    troupe_ll_t *items[1] = {
        s_for(p, i, 4,
              s_set1(p, out, ix,
                     s_bin(p, TROUPE_BINOP_ADD, troupe_sc_get_merge_buffer(p, x, &ix),
                           troupe_sc_get_merge_buffer(p, y, &ix))))};
    p->body = troupe_ll_seq(p, 1, items);
    troupe_status_t st = troupe_ll_optimize(p, NULL);
    cr_assert_eq(st, TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "merge buffer") != NULL, "%s", troupe_last_error());
    cr_assert(!p->optimized);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, reduction_inlined_only_with_complex_computations)
{
    /* t[i] = sum_k a[i,k] (t[i] = 0; for k: t[i] += a[i,k]); out[i] = t[i] * 2 */
    for (int pass = 0; pass < 2; pass++) {
        troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 2, 3, 4);
        troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 3, 0);
        troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 3, 0);
        troupe_ll_proc_t *p = s_proc("reduce");
        int32_t i = troupe_ll_proc_add_symbol(p, "i"), k = troupe_ll_proc_add_symbol(p, "k");
        troupe_ll_t *def[2] = {
            s_set1(p, t, s_i(i), s_c(p, 0.0)),
            s_for(p, k, 4,
                  s_set1(p, t, s_i(i),
                         s_bin(p, TROUPE_BINOP_ADD, s_get1(p, t, s_i(i)),
                               s_get2(p, a, s_i(i), s_i(k))))),
        };
        troupe_ll_t *items[2] = {
            s_for(p, i, 3, troupe_ll_seq(p, 2, def)),
            s_for(p, i, 3,
                  s_set1(p, out, s_i(i),
                         s_bin(p, TROUPE_BINOP_MUL, s_get1(p, t, s_i(i)), s_c(p, 2.0)))),
        };
        s_body(p, 2, items);
        double *before = s_run(p, &a, 1, out);
        troupe_optimize_opts_t o;
        troupe_optimize_opts_default(&o);
        o.inline_complex_computations = pass == 1;
        s_optimize_ok(p, &o);
        if (pass == 0) {
            int32_t prov = 0;
            cr_assert_neq(s_mode_kind(t, &prov), TROUPE_MM_VIRTUAL);
            cr_assert_eq(prov / 1000, TROUPE_PROV_TOO_MANY_VISITS, "prov %d", prov);
            cr_assert_eq(troupe_optimize_traced(p, t)->max_visits, 5); /* 4 self reads + 1 */
            cr_assert_eq(s_counts(p, t).sets, 2);
            cr_assert_eq(s_counts(p, t).gets, 2); /* the accumulation's and out's */
        } else {
            cr_assert_eq(s_mode_kind(t, NULL), TROUPE_MM_VIRTUAL);
            s_counts_t ct = s_counts(p, t);
            cr_assert_eq(ct.gets + ct.sets, 0);
            cr_assert_eq(ct.scopes, 1);
            cr_assert_eq(ct.local_loops, 1, "the reduction became a local loop");
            cr_assert(troupe_optimize_traced(p, t)->is_complex);
        }
        double *after = s_run(p, &a, 1, out);
        s_assert_same(before, after, 3);
        free(before);
        free(after);
        troupe_ll_proc_destroy(&p);
        s_release_all();
    }
}

Test(optimize, changed_input_blocks_inlining)
{
    /* t[i] = a[i]*2; a[i] = 0; out[i] = t[i]: inlining would read the new a. */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("clobber");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[3] = {
        s_for(p, i, 4,
              s_set1(p, t, s_i(i), s_bin(p, TROUPE_BINOP_MUL, s_get1(p, a, s_i(i)), s_c(p, 2.0)))),
        s_for(p, i, 4, s_set1(p, a, s_i(i), s_c(p, 0.0))),
        s_for(p, i, 4, s_set1(p, out, s_i(i), s_get1(p, t, s_i(i)))),
    };
    s_body(p, 3, items);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    cr_assert_neq(s_mode_kind(t, NULL), TROUPE_MM_VIRTUAL);
    cr_assert_eq(s_counts(p, t).sets, 1);
    cr_assert(s_in_list(p->inputs, p->ninputs, a), "a is read before written");
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

/* t[i] = a[i]*2; s[i] = a[i]+1; t[i] += s[i]; [s[i] = 0 when clobber]; out[i] = t[i]*3,
 * s materialized. t's second unit reads s after s is written, as softmax's gradient reads the
 * row sums it needs: t is inlined unless s changes after that unit. */
static troupe_memory_mode_kind_t s_later_unit_mode(bool clobber, int32_t *prov)
{
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *s = s_node("s", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    s_set_mode(s, TROUPE_MM_MATERIALIZED, 0, 29);
    troupe_ll_proc_t *p = s_proc("later_unit");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[5];
    size_t n = 0;
    items[n++] =
        s_for(p, i, 4,
              s_set1(p, t, s_i(i), s_bin(p, TROUPE_BINOP_MUL, s_get1(p, a, s_i(i)), s_c(p, 2.0))));
    items[n++] =
        s_for(p, i, 4,
              s_set1(p, s, s_i(i), s_bin(p, TROUPE_BINOP_ADD, s_get1(p, a, s_i(i)), s_c(p, 1.0))));
    items[n++] =
        s_for(p, i, 4,
              s_set1(p, t, s_i(i),
                     s_bin(p, TROUPE_BINOP_ADD, s_get1(p, t, s_i(i)), s_get1(p, s, s_i(i)))));
    if (clobber)
        items[n++] = s_for(p, i, 4, s_set1(p, s, s_i(i), s_c(p, 0.0)));
    items[n++] = s_for(
        p, i, 4,
        s_set1(p, out, s_i(i), s_bin(p, TROUPE_BINOP_MUL, s_get1(p, t, s_i(i)), s_c(p, 3.0))));
    s_body(p, n, items);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    troupe_memory_mode_kind_t k = s_mode_kind(t, prov);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
    s_release_all();
    return k;
}

Test(optimize, later_unit_reads_checked_from_that_unit)
{
    int32_t prov = 0;
    cr_assert_eq(s_later_unit_mode(false, &prov), TROUPE_MM_VIRTUAL, "prov %d", (int)prov);
    /* stays stored, for the changed input (resolution appends its own code: 717703) */
    cr_assert_neq(s_later_unit_mode(true, &prov), TROUPE_MM_VIRTUAL);
    cr_assert_eq(prov / 1000, TROUPE_PROV_NV_INPUT_CHANGED, "prov %d", (int)prov);
}

Test(optimize, scalar_constexpr_becomes_virtual_constant)
{
    /* c[] = 2.5 (scalar); out[i] = a[i] * c[] -> out[i] = a[i] * 2.5 */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *c = s_node("c", TROUPE_PREC_DOUBLE, 0, 0, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("constexpr");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[2] = {
        troupe_ll_set(p, c, NULL, s_c(p, 2.5)),
        s_for(p, i, 4,
              s_set1(p, out, s_i(i),
                     s_bin(p, TROUPE_BINOP_MUL, s_get1(p, a, s_i(i)), troupe_sc_get(p, c, NULL)))),
    };
    s_body(p, 2, items);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    cr_assert(troupe_optimize_traced(p, c)->is_scalar_constexpr);
    int32_t prov = 0;
    cr_assert_eq(s_mode_kind(c, &prov), TROUPE_MM_VIRTUAL);
    cr_assert_eq(prov, TROUPE_PROV_SCALAR_CONSTEXPR);
    const troupe_sc_t *v = s_find_set_value(p->body, out);
    cr_assert_eq(v->kind, TROUPE_SC_BINOP);
    cr_assert_eq(v->u.op.op, TROUPE_BINOP_MUL);
    cr_assert_eq(v->u.op.args[1]->kind, TROUPE_SC_CONSTANT);
    cr_assert_eq(v->u.op.args[1]->u.constant, 2.5);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, unread_result_is_materialized_output)
{
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("result");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[1] = {
        s_for(p, i, 4,
              s_set1(p, t, s_i(i), s_bin(p, TROUPE_BINOP_MUL, s_get1(p, a, s_i(i)), s_c(p, 2.0)))),
    };
    s_body(p, 1, items);
    s_optimize_ok(p, NULL);
    int32_t prov = 0;
    cr_assert_eq(s_mode_kind(t, &prov), TROUPE_MM_ON_DEVICE);
    cr_assert_eq(prov, TROUPE_PROV_RESULT * 1000 + TROUPE_PROV_RESOLVED);
    cr_assert_eq(p->noutputs, 1);
    cr_assert_eq(p->outputs[0], t);
    cr_assert_eq(s_counts(p, t).sets, 1);
    cr_assert_null(troupe_optimize_traced(p, s_node("other", TROUPE_PREC_DOUBLE, 1, 1, 0)));
    troupe_ll_proc_destroy(&p);
}

Test(optimize, virtualize_off_keeps_code)
{
    troupe_tnode_t *a, *t, *out;
    troupe_ll_proc_t *p = s_build_chain(&a, &t, &out);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.virtualize = false;
    s_optimize_ok(p, &o);
    int32_t prov = 0;
    cr_assert_neq(s_mode_kind(t, &prov), TROUPE_MM_VIRTUAL);
    cr_assert_eq(prov, TROUPE_PROV_NV_DISABLED * 1000 + TROUPE_PROV_RESOLVED);
    cr_assert_eq(s_counts(p, t).sets, 1);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, sampled_tracing_of_large_loops)
{
    /* Force sampling: visits are counted over the sampled prefix only, decisions stay safe. */
    troupe_tnode_t *a, *t, *out;
    troupe_ll_proc_t *p = s_build_chain(&a, &t, &out);
    double *before = s_run(p, &a, 1, out);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.max_trace_steps = 1;
    o.virtualize_max_tracing_dim = 1;
    s_optimize_ok(p, &o);
    cr_assert_eq(s_mode_kind(t, NULL), TROUPE_MM_VIRTUAL);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

/* ---- simplification ---------------------------------------------------------------------- */

/* out[i] = value(a[i]) for one expression; returns the simplified value. */
typedef troupe_sc_t *(*s_mk_fn)(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y);

static const troupe_sc_t *s_simplified(troupe_ll_proc_t **pp, troupe_prec_t prec, s_mk_fn mk,
                                       const troupe_optimize_opts_t *o, troupe_tnode_t **a_out,
                                       troupe_tnode_t **b_out)
{
    troupe_tnode_t *a = s_node("a", prec, 1, 4, 0);
    troupe_tnode_t *b = s_node("b", prec, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", prec, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("simp");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[1] = {
        s_for(p, i, 4, s_set1(p, out, s_i(i), mk(p, s_get1(p, a, s_i(i)), s_get1(p, b, s_i(i)))))};
    s_body(p, 1, items);
    s_optimize_ok(p, o);
    *pp = p;
    if (a_out)
        *a_out = a;
    if (b_out)
        *b_out = b;
    return s_find_set_value(p->body, out);
}

static troupe_sc_t *s_mk_fold(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    (void)y;
    return s_bin(p, TROUPE_BINOP_MUL, x, s_bin(p, TROUPE_BINOP_ADD, s_c(p, 2.0), s_c(p, 3.0)));
}

Test(optimize, constant_folding)
{
    troupe_ll_proc_t *p;
    troupe_tnode_t *a;
    const troupe_sc_t *v = s_simplified(&p, TROUPE_PREC_DOUBLE, s_mk_fold, NULL, &a, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_BINOP);
    cr_assert_eq(v->u.op.op, TROUPE_BINOP_MUL);
    cr_assert_eq(v->u.op.args[0]->kind, TROUPE_SC_GET);
    cr_assert_eq(v->u.op.args[1]->kind, TROUPE_SC_CONSTANT);
    cr_assert_eq(v->u.op.args[1]->u.constant, 5.0);
    troupe_ll_proc_destroy(&p);
}

static troupe_sc_t *s_mk_fold_single(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    (void)x;
    (void)y;
    return s_bin(p, TROUPE_BINOP_ADD, s_c(p, 0.1), s_c(p, 0.2));
}

Test(optimize, constant_folding_rounds_like_float)
{
    troupe_ll_proc_t *p;
    const troupe_sc_t *v = s_simplified(&p, TROUPE_PREC_SINGLE, s_mk_fold_single, NULL, NULL, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_CONSTANT);
    cr_assert_eq(v->u.constant, (double)(0.1f + 0.2f));
    troupe_ll_proc_destroy(&p);
}

static troupe_sc_t *s_mk_no_fold(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    (void)x;
    (void)y;
    return s_bin(p, TROUPE_BINOP_ADD, troupe_sc_unop(p, TROUPE_UNOP_EXP, s_c(p, 1.0)),
                 s_bin(p, TROUPE_BINOP_DIV, s_c(p, 7.0), s_c(p, 2.0)));
}

Test(optimize, no_folding_of_transcendentals_or_integers)
{
    troupe_ll_proc_t *p;
    const troupe_sc_t *v = s_simplified(&p, TROUPE_PREC_DOUBLE, s_mk_no_fold, NULL, NULL, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_BINOP); /* exp(1) stays; 7/2 folds to 3.5 */
    cr_assert_eq(v->u.op.args[0]->kind, TROUPE_SC_UNOP);
    cr_assert_eq(v->u.op.args[1]->kind, TROUPE_SC_CONSTANT);
    cr_assert_eq(v->u.op.args[1]->u.constant, 3.5);
    troupe_ll_proc_destroy(&p);
    s_release_all();
    v = s_simplified(&p, TROUPE_PREC_INT32, s_mk_no_fold, NULL, NULL, NULL);
    cr_assert_eq(v->u.op.args[1]->kind, TROUPE_SC_BINOP, "7/2 is not folded in int32");
    troupe_ll_proc_destroy(&p);
}

static troupe_sc_t *s_mk_mul1(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    (void)y;
    return s_bin(p, TROUPE_BINOP_MUL, x, s_c(p, 1.0));
}
static troupe_sc_t *s_mk_1mul(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    (void)y;
    return s_bin(p, TROUPE_BINOP_MUL, s_c(p, 1.0), x);
}
static troupe_sc_t *s_mk_add0(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    (void)y;
    return s_bin(p, TROUPE_BINOP_SUB, s_bin(p, TROUPE_BINOP_ADD, s_c(p, 0.0), x), s_c(p, 0.0));
}
static troupe_sc_t *s_mk_div1(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    (void)y;
    return troupe_sc_unop(p, TROUPE_UNOP_IDENTITY, s_bin(p, TROUPE_BINOP_DIV, x, s_c(p, 1.0)));
}
static troupe_sc_t *s_mk_mul0(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    (void)y;
    return s_bin(p, TROUPE_BINOP_MUL, x, s_c(p, 0.0));
}

Test(optimize, identities)
{
    s_mk_fn fns[4] = {s_mk_mul1, s_mk_1mul, s_mk_add0, s_mk_div1};
    for (int k = 0; k < 4; k++) {
        troupe_ll_proc_t *p;
        troupe_tnode_t *a;
        const troupe_sc_t *v = s_simplified(&p, TROUPE_PREC_SINGLE, fns[k], NULL, &a, NULL);
        cr_assert_eq(v->kind, TROUPE_SC_GET, "case %d", k);
        cr_assert_eq(v->u.get.tn, a);
        troupe_ll_proc_destroy(&p);
        s_release_all();
    }
}

Test(optimize, mul_by_zero_only_when_nan_safe)
{
    troupe_ll_proc_t *p;
    const troupe_sc_t *v = s_simplified(&p, TROUPE_PREC_SINGLE, s_mk_mul0, NULL, NULL, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_BINOP, "x*0 kept: x may be NaN");
    troupe_ll_proc_destroy(&p);
    s_release_all();
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.fold_mul_by_zero = true;
    v = s_simplified(&p, TROUPE_PREC_SINGLE, s_mk_mul0, &o, NULL, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_CONSTANT);
    cr_assert_eq(v->u.constant, 0.0);
    troupe_ll_proc_destroy(&p);
    s_release_all();
    v = s_simplified(&p, TROUPE_PREC_INT32, s_mk_mul0, NULL, NULL, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_CONSTANT, "integers have no NaN");
    troupe_ll_proc_destroy(&p);
}

static double s_pow_exp;
static troupe_sc_t *s_mk_pow(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    (void)y;
    return s_bin(p, TROUPE_BINOP_TO_POW_OF, x, s_c(p, s_pow_exp));
}
static troupe_sc_t *s_mk_pow_complex(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    return s_bin(p, TROUPE_BINOP_TO_POW_OF, s_bin(p, TROUPE_BINOP_SUB, x, y), s_c(p, 2.0));
}

Test(optimize, integer_powers)
{
    troupe_ll_proc_t *p;
    troupe_tnode_t *a;
    s_pow_exp = 3.0;
    const troupe_sc_t *v = s_simplified(&p, TROUPE_PREC_SINGLE, s_mk_pow, NULL, &a, NULL);
    /* (a*a)*a */
    cr_assert_eq(v->kind, TROUPE_SC_BINOP);
    cr_assert_eq(v->u.op.op, TROUPE_BINOP_MUL);
    cr_assert_eq(v->u.op.args[1]->kind, TROUPE_SC_GET);
    const troupe_sc_t *l = v->u.op.args[0];
    cr_assert_eq(l->kind, TROUPE_SC_BINOP);
    cr_assert_eq(l->u.op.op, TROUPE_BINOP_MUL);
    cr_assert_eq(l->u.op.args[0]->kind, TROUPE_SC_GET);
    cr_assert_eq(l->u.op.args[1]->kind, TROUPE_SC_GET);
    cr_assert_eq(l->u.op.args[0]->u.get.tn, a);
    troupe_ll_proc_destroy(&p);
    s_release_all();

    s_pow_exp = 1.0;
    v = s_simplified(&p, TROUPE_PREC_SINGLE, s_mk_pow, NULL, &a, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_GET);
    troupe_ll_proc_destroy(&p);
    s_release_all();

    s_pow_exp = 0.0;
    v = s_simplified(&p, TROUPE_PREC_SINGLE, s_mk_pow, NULL, &a, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_CONSTANT);
    cr_assert_eq(v->u.constant, 1.0);
    troupe_ll_proc_destroy(&p);
    s_release_all();

    s_pow_exp = -1.0;
    v = s_simplified(&p, TROUPE_PREC_SINGLE, s_mk_pow, NULL, &a, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_UNOP);
    cr_assert_eq(v->u.op.op, TROUPE_UNOP_RECIP);
    troupe_ll_proc_destroy(&p);
    s_release_all();

    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.expand_integer_pow = false;
    s_pow_exp = 3.0;
    v = s_simplified(&p, TROUPE_PREC_SINGLE, s_mk_pow, &o, &a, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_BINOP);
    cr_assert_eq(v->u.op.op, TROUPE_BINOP_TO_POW_OF);
    troupe_ll_proc_destroy(&p);
    s_release_all();

    s_pow_exp = 2.5; /* not an integer: kept */
    v = s_simplified(&p, TROUPE_PREC_SINGLE, s_mk_pow, NULL, &a, NULL);
    cr_assert_eq(v->kind, TROUPE_SC_BINOP);
    cr_assert_eq(v->u.op.op, TROUPE_BINOP_TO_POW_OF);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, integer_power_of_expression_uses_a_local_scope)
{
    troupe_ll_proc_t *p;
    troupe_tnode_t *a, *b;
    const troupe_sc_t *v = s_simplified(&p, TROUPE_PREC_DOUBLE, s_mk_pow_complex, NULL, &a, &b);
    cr_assert_eq(v->kind, TROUPE_SC_LOCAL_SCOPE);
    s_counts_t ct = s_counts(p, a);
    cr_assert_eq(ct.gets, 1, "the base is computed once");
    cr_assert_eq(ct.pows, 0);
    /* values: (a-b)^2 */
    troupe_tnode_t *ins[2] = {a, b};
    troupe_tnode_t *out = s_tns[2];
    double *after = s_run(p, ins, 2, out);
    for (int k = 0; k < 4; k++) {
        double x = 1.0 + 0.25 * k - 0.125 * ((k * 7) % 5),
               y = 1.5 + 0.25 * k - 0.125 * ((k * 7) % 5);
        cr_assert_eq(after[k], (x - y) * (x - y));
    }
    free(after);
    troupe_ll_proc_destroy(&p);
}

static troupe_sc_t *s_mk_fma1(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    return s_bin(p, TROUPE_BINOP_ADD, s_bin(p, TROUPE_BINOP_MUL, x, y), s_c(p, 0.5));
}
static troupe_sc_t *s_mk_fma2(troupe_ll_proc_t *p, troupe_sc_t *x, troupe_sc_t *y)
{
    return s_bin(p, TROUPE_BINOP_ADD, s_c(p, 0.5), s_bin(p, TROUPE_BINOP_MUL, x, y));
}

Test(optimize, fma_fusion_on_and_off)
{
    s_mk_fn fns[2] = {s_mk_fma1, s_mk_fma2};
    for (int k = 0; k < 2; k++) {
        troupe_ll_proc_t *p;
        troupe_tnode_t *a, *b;
        const troupe_sc_t *v = s_simplified(&p, TROUPE_PREC_SINGLE, fns[k], NULL, &a, &b);
        cr_assert_eq(v->kind, TROUPE_SC_TERNOP, "case %d", k);
        cr_assert_eq(v->u.op.op, TROUPE_TERNOP_FMA);
        cr_assert_eq(v->u.op.args[0]->u.get.tn, a);
        cr_assert_eq(v->u.op.args[1]->u.get.tn, b);
        cr_assert_eq(v->u.op.args[2]->kind, TROUPE_SC_CONSTANT);
        troupe_ll_proc_destroy(&p);
        s_release_all();

        troupe_optimize_opts_t o;
        troupe_optimize_opts_default(&o);
        o.fuse_fma = false;
        v = s_simplified(&p, TROUPE_PREC_SINGLE, fns[k], &o, &a, &b);
        cr_assert_eq(v->kind, TROUPE_SC_BINOP);
        cr_assert_eq(v->u.op.op, TROUPE_BINOP_ADD);
        troupe_ll_proc_destroy(&p);
        s_release_all();

        v = s_simplified(&p, TROUPE_PREC_INT32, fns[k], NULL, &a, &b);
        cr_assert_eq(v->kind, TROUPE_SC_BINOP, "no fma in integer contexts");
        troupe_ll_proc_destroy(&p);
        s_release_all();
    }
}

/* ---- inconsistent memory modes ------------------------------------------------------------ */

Test(optimize, virtual_node_that_cannot_be_inlined_is_an_error)
{
    /* t set Virtual, but read before it is written: it cannot be inlined. */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *t = s_node("tvirt", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    s_set_mode(t, TROUPE_MM_VIRTUAL, 0, 29);
    troupe_ll_proc_t *p = s_proc("bad_virtual");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[2] = {
        s_for(p, i, 4, s_set1(p, out, s_i(i), s_get1(p, t, s_i(i)))),
        s_for(p, i, 4,
              s_set1(p, t, s_i(i), s_bin(p, TROUPE_BINOP_MUL, s_get1(p, a, s_i(i)), s_c(p, 2.0)))),
    };
    s_body(p, 2, items);
    troupe_status_t st = troupe_ll_optimize(p, NULL);
    cr_assert_eq(st, TROUPE_FAILED_PRECONDITION, "%s", troupe_status_str(st));
    cr_assert(strstr(troupe_last_error(), "tvirt") != NULL, "%s", troupe_last_error());
    cr_assert(!p->optimized);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, local_node_read_but_not_computed_is_an_error)
{
    troupe_tnode_t *x = s_node("xlocal", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    s_set_mode(x, TROUPE_MM_LOCAL, 0, 28);
    troupe_ll_proc_t *p = s_proc("bad_local");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_t *items[1] = {s_for(p, i, 4, s_set1(p, out, s_i(i), s_get1(p, x, s_i(i))))};
    s_body(p, 1, items);
    troupe_status_t st = troupe_ll_optimize(p, NULL);
    cr_assert_eq(st, TROUPE_FAILED_PRECONDITION);
    cr_assert(strstr(troupe_last_error(), "xlocal") != NULL, "%s", troupe_last_error());
    troupe_ll_proc_destroy(&p);
}

Test(optimize, hosted_node_is_never_inlined)
{
    troupe_tnode_t *a, *t, *out;
    troupe_ll_proc_t *p = s_build_chain(&a, &t, &out);
    s_set_mode(t, TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, 24);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    cr_assert_eq(s_mode_kind(t, NULL), TROUPE_MM_HOSTED);
    cr_assert_eq(s_counts(p, t).sets, 1);
    cr_assert(s_in_list(p->outputs, p->noutputs, t));
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, optimizing_twice_is_stable)
{
    troupe_tnode_t *a, *t, *out;
    troupe_ll_proc_t *p = s_build_chain(&a, &t, &out);
    double *before = s_run(p, &a, 1, out);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.simplify = false;
    s_optimize_ok(p, &o);
    s_optimize_ok(p, NULL);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, bad_arguments)
{
    cr_assert_eq(troupe_ll_optimize(NULL, NULL), TROUPE_INVALID_ARGUMENT);
    troupe_ll_proc_t *p = s_proc("empty");
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.virtualize_max_visits = -1;
    cr_assert_eq(troupe_ll_optimize(p, &o), TROUPE_INVALID_ARGUMENT);
    s_optimize_ok(p, NULL); /* an empty procedure optimises to itself */
    cr_assert_eq(p->ninputs + p->noutputs, 0);
    troupe_ll_proc_destroy(&p);
}

/* ---- randomised programs: optimisation never changes results ------------------------------- */

static uint64_t s_rng = 0x243F6A8885A308D3ull;

static uint32_t s_rand(uint32_t n)
{
    s_rng ^= s_rng >> 12;
    s_rng ^= s_rng << 25;
    s_rng ^= s_rng >> 27;
    return (uint32_t)(((s_rng * 0x2545F4914F6CDD1Dull) >> 33) % n);
}

#define R_D 4 /* 1-D nodes have 4 cells; the matrix is 4x4 */

typedef struct s_rgen {
    troupe_ll_proc_t *p;
    troupe_tnode_t *vec[8]; /* 0,1 inputs; 2..7 intermediates / outputs */
    troupe_tnode_t *mat;    /* input matrix */
    bool defined[8];
} s_rgen_t;

/* A random expression over cell `i` (a loop symbol) of defined vectors. */
static troupe_sc_t *s_rexpr(s_rgen_t *g, int32_t i, int depth)
{
    troupe_ll_proc_t *p = g->p;
    int r = (int)s_rand(depth > 2 ? 3 : 9);
    if (r <= 2) {
        int src;
        do
            src = (int)s_rand(8);
        while (!g->defined[src]);
        troupe_axis_index_t x;
        switch (s_rand(4)) {
        case 0:
            x = troupe_idx_fixed((int64_t)s_rand(R_D));
            break;
        case 1: /* reversed: 3 - i */
            x = (troupe_axis_index_t){1, {{-1, i}}, R_D - 1};
            break;
        default:
            x = s_i(i);
        }
        return troupe_sc_get(p, g->vec[src], &x);
    }
    if (r == 3)
        return s_c(p, (double)((int)s_rand(7) - 3) * 0.5);
    if (r == 4)
        return troupe_sc_unop(p, s_rand(2) ? TROUPE_UNOP_NEG : TROUPE_UNOP_RELU,
                              s_rexpr(g, i, depth + 1));
    static const troupe_binop_t ops[4] = {TROUPE_BINOP_ADD, TROUPE_BINOP_SUB, TROUPE_BINOP_MUL,
                                          TROUPE_BINOP_MAX};
    return s_bin(p, ops[s_rand(4)], s_rexpr(g, i, depth + 1), s_rexpr(g, i, depth + 1));
}

static troupe_ll_t *s_ritem(s_rgen_t *g)
{
    troupe_ll_proc_t *p = g->p;
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), k = troupe_ll_proc_add_symbol(p, NULL);
    int dst = 2 + (int)s_rand(6);
    int kind = (int)s_rand(10);
    troupe_ll_t *it;
    if (kind == 0) { /* overwrite an input */
        dst = (int)s_rand(2);
        it = s_for(p, i, R_D, s_set1(p, g->vec[dst], s_i(i), s_rexpr(g, i, 0)));
    } else if (kind == 1) { /* partial definition */
        it = s_for(p, i, 2, s_set1(p, g->vec[dst], s_i(i), s_rexpr(g, i, 0)));
    } else if (kind == 2) { /* reduction: t[i] = c; for k: t[i] += mat[i,k] * e */
        troupe_ll_t *def[2] = {
            s_set1(p, g->vec[dst], s_i(i), s_c(p, 0.5)),
            s_for(p, k, R_D,
                  s_set1(p, g->vec[dst], s_i(i),
                         s_bin(p, TROUPE_BINOP_ADD, s_get1(p, g->vec[dst], s_i(i)),
                               s_bin(p, TROUPE_BINOP_MUL, s_get2(p, g->mat, s_i(i), s_i(k)),
                                     s_rexpr(g, k, 1))))),
        };
        it = s_for(p, i, R_D, troupe_ll_seq(p, 2, def));
    } else if (kind == 3) { /* zero, then accumulate in a second item */
        troupe_ll_t *two[2] = {
            troupe_ll_zero_out(p, g->vec[dst]),
            s_for(p, i, R_D,
                  s_set1(p, g->vec[dst], s_i(i),
                         s_bin(p, TROUPE_BINOP_ADD, s_get1(p, g->vec[dst], s_i(i)),
                               s_rexpr(g, i, 1)))),
        };
        g->defined[dst] = true;
        it = troupe_ll_seq(p, 2, two);
    } else if (kind == 4 && g->defined[dst]) { /* in-place update of a defined node */
        it = s_for(
            p, i, R_D,
            s_set1(p, g->vec[dst], s_i(i),
                   s_bin(p, TROUPE_BINOP_MUL, s_get1(p, g->vec[dst], s_i(i)), s_rexpr(g, i, 1))));
    } else if (kind == 5) { /* two nodes in one loop */
        int other = 2 + (int)s_rand(6);
        troupe_ll_t *two[2] = {s_set1(p, g->vec[dst], s_i(i), s_rexpr(g, i, 0)),
                               s_set1(p, g->vec[other], s_i(i), s_rexpr(g, i, 0))};
        g->defined[other] = true;
        it = s_for(p, i, R_D, troupe_ll_seq(p, 2, two));
    } else {
        it = s_for(p, i, R_D, s_set1(p, g->vec[dst], s_i(i), s_rexpr(g, i, 0)));
    }
    g->defined[dst] = true;
    return it;
}

Test(optimize, random_programs_keep_their_results)
{
    int nvirtual = 0, nscopes_with_loops = 0;
    for (int iter = 0; iter < 1500; iter++) {
        s_rgen_t g;
        memset(&g, 0, sizeof g);
        char name[16];
        for (int v = 0; v < 8; v++) {
            snprintf(name, sizeof name, "v%d", v);
            g.vec[v] = s_node(name, TROUPE_PREC_DOUBLE, 1, R_D, 0);
        }
        g.mat = s_node("m", TROUPE_PREC_DOUBLE, 2, R_D, R_D);
        g.defined[0] = g.defined[1] = true;
        g.p = s_proc("rand");
        troupe_ll_t *items[8];
        int n = 1 + (int)s_rand(7);
        for (int k = 0; k < n; k++)
            items[k] = s_ritem(&g);
        s_body(g.p, (size_t)n, items);
        troupe_tnode_t *ins[3] = {g.vec[0], g.vec[1], g.mat};

        double *before[8], *after[8];
        for (int v = 0; v < 8; v++)
            before[v] = s_run(g.p, ins, 3, g.vec[v]);

        troupe_optimize_opts_t o;
        troupe_optimize_opts_default(&o);
        o.fuse_fma = false; /* fma changes rounding */
        o.inline_complex_computations = s_rand(2);
        o.inline_simple_computations = s_rand(4) != 0;
        o.simplify = s_rand(4) != 0;
        o.virtualize = s_rand(8) != 0;
        if (s_rand(4) == 0)
            o.max_trace_steps = 3;
        if (s_rand(4) == 0)
            o.virtualize_max_visits = 2;
        s_optimize_ok(g.p, &o);
        for (int v = 0; v < 8; v++) {
            after[v] = s_run(g.p, ins, 3, g.vec[v]);
            if (s_mode_kind(g.vec[v], NULL) != TROUPE_MM_VIRTUAL)
                for (int c = 0; c < R_D; c++)
                    cr_assert(before[v][c] == after[v][c],
                              "iteration %d: node v%d cell %d: %.17g before, %.17g after", iter, v,
                              c, before[v][c], after[v][c]);
            else {
                cr_assert_eq(s_counts(g.p, g.vec[v]).sets + s_counts(g.p, g.vec[v]).gets, 0);
                nvirtual++;
            }
            free(before[v]);
            free(after[v]);
        }
        if (s_counts(g.p, NULL).local_loops > 0)
            nscopes_with_loops++;
        troupe_ll_proc_destroy(&g.p);
        s_release_all();
    }
    fprintf(stderr, "random programs: %d virtual nodes, %d procedures with inlined loops\n",
            nvirtual, nscopes_with_loops);
    cr_assert_gt(nvirtual, 300);
    cr_assert_gt(nscopes_with_loops, 10);
}

Test(optimize, too_complex_substitution_falls_back)
{
    /* t[i,j] = a[i+j] read at t[s1+s2+s3+s4, s5+s6+s7+s8]: the inlined read of a would need 8
     * index terms, more than TROUPE_MAX_INDEX_TERMS, so t stays materialized (713). */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 1, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 2, 1, 1);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 1, 0);
    troupe_ll_proc_t *p = s_proc("toocomplex");
    int32_t i = troupe_ll_proc_add_symbol(p, "i"), j = troupe_ll_proc_add_symbol(p, "j");
    int32_t s[8];
    for (int k = 0; k < 8; k++)
        s[k] = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ipj = {2, {{1, i}, {1, j}}, 0};
    troupe_axis_index_t ij[2] = {s_i(i), s_i(j)};
    troupe_axis_index_t use[2] = {{4, {{1, s[0]}, {1, s[1]}, {1, s[2]}, {1, s[3]}}, 0},
                                  {4, {{1, s[4]}, {1, s[5]}, {1, s[6]}, {1, s[7]}}, 0}};
    troupe_ll_t *inner = s_set1(p, out, troupe_idx_fixed(0), troupe_sc_get(p, t, use));
    for (int k = 7; k >= 0; k--)
        inner = s_for(p, s[k], 1, inner);
    troupe_ll_t *items[2] = {
        s_for(p, i, 1, s_for(p, j, 1, troupe_ll_set(p, t, ij, troupe_sc_get(p, a, &ipj)))), inner};
    s_body(p, 2, items);
    double *before = s_run(p, &a, 1, out);
    s_optimize_ok(p, NULL);
    int32_t prov = 0;
    cr_assert_neq(s_mode_kind(t, &prov), TROUPE_MM_VIRTUAL);
    cr_assert_eq(prov, TROUPE_PROV_NV_INDEX_TOO_COMPLEX * 1000 + TROUPE_PROV_RESOLVED);
    cr_assert_eq(s_counts(p, t).sets, 1);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 1);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, embedded_index_is_substituted)
{
    /* t[i] = i * 0.5 + a[i]; out[j] = t[3 - j] */
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("embed");
    int32_t i = troupe_ll_proc_add_symbol(p, "i"), j = troupe_ll_proc_add_symbol(p, "j");
    troupe_axis_index_t rev = {1, {{-1, j}}, 3};
    troupe_ll_t *items[2] = {
        s_for(
            p, i, 4,
            s_set1(p, t, s_i(i),
                   s_bin(p, TROUPE_BINOP_ADD,
                         s_bin(p, TROUPE_BINOP_MUL, troupe_sc_embed_index(p, s_i(i)), s_c(p, 0.5)),
                         s_get1(p, a, s_i(i))))),
        s_for(p, j, 4, s_set1(p, out, s_i(j), troupe_sc_get(p, t, &rev))),
    };
    s_body(p, 2, items);
    double *before = s_run(p, &a, 1, out);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.fuse_fma = false;
    s_optimize_ok(p, &o);
    cr_assert_eq(s_mode_kind(t, NULL), TROUPE_MM_VIRTUAL);
    double *after = s_run(p, &a, 1, out);
    s_assert_same(before, after, 4);
    free(before);
    free(after);
    troupe_ll_proc_destroy(&p);
}

Test(optimize, vector_written_node_is_not_inlined)
{
    troupe_tnode_t *key = s_node("key", TROUPE_PREC_UINT4X32, 1, 1, 0);
    troupe_tnode_t *r = s_node("r", TROUPE_PREC_SINGLE, 1, 4, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_SINGLE, 1, 4, 0);
    troupe_ll_proc_t *p = s_proc("vec");
    int32_t i = troupe_ll_proc_add_symbol(p, "i");
    troupe_axis_index_t z = troupe_idx_fixed(0);
    troupe_ll_t *items[2] = {
        troupe_ll_set_from_vec(p, r, &z, 4, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM,
                               troupe_sc_get(p, key, &z)),
        s_for(p, i, 4, s_set1(p, out, s_i(i), s_get1(p, r, s_i(i)))),
    };
    s_body(p, 2, items);
    s_optimize_ok(p, NULL);
    int32_t prov = 0;
    cr_assert_neq(s_mode_kind(r, &prov), TROUPE_MM_VIRTUAL);
    cr_assert_eq(prov, TROUPE_PROV_NV_VECTOR_WRITE * 1000 + TROUPE_PROV_RESOLVED);
    const troupe_ll_traced_t *tr = troupe_optimize_traced(p, r);
    cr_assert_eq(tr->assignments, 1);
    cr_assert(!tr->read_before_write, "the vector write covers cells 0..3");
    cr_assert(s_in_list(p->inputs, p->ninputs, key));
    troupe_ll_proc_destroy(&p);
}

/* Sampled tracing (a procedure longer than max_trace_steps) walks each loop's first values
 * only: t[j] = a[j] for j < 64 writes t[0..5]; out[h, d] = t[8h + d] then reads t[8], t[9],
 * ... which the sampled writes skipped. t is written before it is read: not recurrent, not an
 * input (attention's head split "bt(64h+d)=>bhtd" hit this). */
Test(optimize, sampled_trace_affine_read_after_write_is_not_recurrent)
{
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_DOUBLE, 1, 64, 0);
    troupe_tnode_t *t = s_node("t", TROUPE_PREC_DOUBLE, 1, 64, 0);
    troupe_tnode_t *out = s_node("out", TROUPE_PREC_DOUBLE, 2, 8, 8);
    troupe_ll_proc_t *p = s_proc("sampled");
    int32_t j = troupe_ll_proc_add_symbol(p, "j"), h = troupe_ll_proc_add_symbol(p, "h"),
            d = troupe_ll_proc_add_symbol(p, "d");
    troupe_axis_index_t hd8 = {2, {{8, h}, {1, d}}, 0};
    troupe_axis_index_t hd[2] = {s_i(h), s_i(d)};
    troupe_ll_t *items[2] = {
        s_for(p, j, 64, s_set1(p, t, s_i(j), s_get1(p, a, s_i(j)))),
        s_for(p, h, 8, s_for(p, d, 8, troupe_ll_set(p, out, hd, s_get1(p, t, hd8)))),
    };
    s_body(p, 2, items);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.max_trace_steps = 10; /* force sampling */
    s_optimize_ok(p, &o);
    const troupe_ll_traced_t *tr = troupe_optimize_traced(p, t);
    cr_assert_not_null(tr);
    cr_assert(!tr->read_before_write, "t taken as recurrent");
    cr_assert(!s_in_list(p->inputs, p->ninputs, t), "t taken as an input");
    cr_assert(s_in_list(p->inputs, p->ninputs, a));
    troupe_ll_proc_destroy(&p);
}
