/* troupe — step 4 of the optimiser: simplification (OCANNL `simplify_llc`; compiler/optimize.h
 * step 4): constant folding in each expression's context precision, identities, integer powers,
 * FMA fusion, trivial local scopes. s_simp_* rewrite functionally: an unchanged subtree is
 * returned as is. */
#include "compiler/optimize_impl.h"

#include <float.h>
#include <math.h>
#include <string.h>

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
    troupe_ll_proc_t *proc;
    const troupe_optimize_opts_t *o;
    TROUPE__OPT_VEC(s_scope_t) scopes; /* a stack */
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
    case TROUPE_LL_BIND_INDEX:
        return s_ll_uses_local(s->u.bind_index.body, id);
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
    troupe_ll_proc_t *proc = m->proc;
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
    troupe_ll_proc_t *proc = m->proc;
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
    troupe_ll_proc_t *proc = m->proc;
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
                 (ar == S_ARITH_INT || m->o->fold_mul_by_zero || s_provably_finite(a))) ||
                (s_is_const(a, 0.0) &&
                 (ar == S_ARITH_INT || m->o->fold_mul_by_zero || s_provably_finite(b))))
                return troupe_sc_constant(proc, 0.0);
            break;
        case TROUPE_BINOP_DIV:
            if (s_is_const(b, 1.0))
                return a;
            break;
        case TROUPE_BINOP_TO_POW_OF:
            if (m->o->expand_integer_pow && b->kind == TROUPE_SC_CONSTANT &&
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
    if (op == TROUPE_BINOP_ADD && is_float && m->o->fuse_fma) {
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
    troupe_ll_proc_t *proc = m->proc;
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
    troupe_ll_proc_t *proc = m->proc;
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE: {
        s_scope_t sc = {e->u.local_scope.id, e->u.local_scope.tn, e->u.local_scope.orig_indices};
        if (!TROUPE__OPT_PUSH(m->scopes, sc)) {
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
    troupe_ll_proc_t *proc = m->proc;
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
        return troupe__opt_with_body(proc, s, b);
    }
    case TROUPE_LL_SET: {
        s_sctx_t x = {s->u.set.tn->prec, s->u.set.tn, s->u.set.idcs};
        return troupe__opt_with_value(proc, s, s_simp_sc(m, s->u.set.value, x));
    }
    case TROUPE_LL_SET_FROM_VEC: {
        s_sctx_t x = {TROUPE_PREC_UINT4X32, NULL, NULL};
        return troupe__opt_with_value(proc, s, s_simp_sc(m, s->u.set_from_vec.arg, x));
    }
    case TROUPE_LL_SET_LOCAL: {
        s_sctx_t x = {TROUPE_PREC_VOID, NULL, NULL};
        for (size_t k = m->scopes.n; k-- > 0;) {
            s_scope_t *sc = &m->scopes.at[k];
            if (sc->id == s->u.set_local.id) {
                x.prec = sc->tn->prec;
                x.tn = sc->tn;
                x.idcs = sc->orig;
                break;
            }
        }
        return troupe__opt_with_value(proc, s, s_simp_sc(m, s->u.set_local.value, x));
    }
    case TROUPE_LL_BIND_INDEX: /* kept even around a NOOP: the index is still checked */
        return troupe__opt_with_bind_body(proc, s, s_simp_ll(m, s->u.bind_index.body));
    default:
        return s;
    }
}

troupe_status_t troupe__opt_simplify(troupe_ll_proc_t *proc, const troupe_optimize_opts_t *o,
                                     troupe_ll_t **out)
{
    s_simp_t m;
    memset(&m, 0, sizeof m);
    m.proc = proc;
    m.o = o;
    *out = s_simp_ll(&m, proc->body);
    TROUPE__OPT_VEC_FREE(m.scopes);
    if (*out == NULL)
        return m.oom ? troupe__opt_oom() : troupe__opt_proc_oom(proc);
    return TROUPE_OK;
}
