/* troupe — recognising matrix products in the low-level IR (see gemm.h). */
#include "compiler/gemm.h"

#include <stddef.h>

int64_t troupe_gemm_sym_stride(const troupe_tnode_t *tn, const troupe_axis_index_t *idcs,
                               int32_t sym)
{
    int64_t coeff = 0, stride = 1;
    for (int ax = tn->ndims - 1; ax >= 0; ax--) {
        for (int t = 0; t < idcs[ax].nterms; t++)
            if (idcs[ax].terms[t].sym == sym)
                coeff += idcs[ax].terms[t].coeff * stride;
        stride *= tn->dims[ax];
    }
    return coeff;
}

static bool s_same_access(const troupe_sc_t *get, const troupe_tnode_t *tn,
                          const troupe_axis_index_t *idcs)
{
    if (get->kind != TROUPE_SC_GET || get->u.get.tn != tn)
        return false;
    for (int ax = 0; ax < tn->ndims; ax++)
        if (!troupe_axis_index_equal(&get->u.get.idcs[ax], &idcs[ax]))
            return false;
    return true;
}

/* Splits the value of C[idcs] = value into the two factors x*y accumulated into C.
 * NO when the value is not an accumulation of a product into the set element. */
static troupe_gemm_verdict_t s_factors(const troupe_ll_t *set, const troupe_sc_t **x,
                                       const troupe_sc_t **y, bool *fma, const char **why)
{
    const troupe_tnode_t *tn = set->u.set.tn;
    const troupe_axis_index_t *idcs = set->u.set.idcs;
    const troupe_sc_t *v = set->u.set.value;
    if (v->kind == TROUPE_SC_TERNOP && v->u.op.op == TROUPE_TERNOP_FMA &&
        s_same_access(v->u.op.args[2], tn, idcs)) {
        *x = v->u.op.args[0];
        *y = v->u.op.args[1];
        *fma = true;
    } else if (v->kind == TROUPE_SC_BINOP && v->u.op.op == TROUPE_BINOP_ADD) {
        const troupe_sc_t *prod = NULL;
        if (s_same_access(v->u.op.args[0], tn, idcs))
            prod = v->u.op.args[1];
        else if (s_same_access(v->u.op.args[1], tn, idcs))
            prod = v->u.op.args[0];
        if (prod == NULL || prod->kind != TROUPE_SC_BINOP || prod->u.op.op != TROUPE_BINOP_MUL)
            return TROUPE_GEMM_NO;
        *x = prod->u.op.args[0];
        *y = prod->u.op.args[1];
        *fma = false;
    } else {
        return TROUPE_GEMM_NO;
    }
    if ((*x)->kind == TROUPE_SC_GET_MERGE_BUFFER || (*y)->kind == TROUPE_SC_GET_MERGE_BUFFER) {
        *why = "a factor is read from the merge buffer";
        return TROUPE_GEMM_REFUSED;
    }
    if ((*x)->kind != TROUPE_SC_GET || (*y)->kind != TROUPE_SC_GET) {
        *why = "a factor is computed inline (a virtual node or an expression), not an array";
        return TROUPE_GEMM_REFUSED;
    }
    return TROUPE_GEMM_YES;
}

/* Fits an operand whose element (r, c) (r over extent nr, c over extent nc) lies at stride
 * sr*r + sc*c: untransposed when c has unit stride, transposed when r has. Extent-1 axes take
 * any stride. */
static bool s_fit(int64_t sr, int64_t sc, int64_t nr, int64_t nc, bool *trans, int64_t *ld)
{
    if ((sc == 1 || nc == 1) && (nr == 1 || sr >= nc)) {
        *trans = false;
        *ld = nr == 1 ? (nc > 1 ? nc : 1) : sr;
        return true;
    }
    if ((sr == 1 || nr == 1) && (nc == 1 || sc >= nr)) {
        *trans = true;
        *ld = nc == 1 ? (nr > 1 ? nr : 1) : sc;
        return true;
    }
    return false;
}

troupe_gemm_verdict_t troupe_gemm_match(const troupe_ll_t *loop, troupe_gemm_t *out,
                                        const char **why)
{
    static const char *none = "";
    *why = none;
    const troupe_ll_t *loops[3];
    const troupe_ll_t *s = loop;
    for (int d = 0; d < 3; d++) {
        if (s->kind != TROUPE_LL_FOR || s->u.for_loop.from != 0 ||
            s->u.for_loop.to < s->u.for_loop.from)
            return TROUPE_GEMM_NO;
        loops[d] = s;
        s = s->u.for_loop.body;
    }
    if (s->kind != TROUPE_LL_SET)
        return TROUPE_GEMM_NO;
    out->c.tn = s->u.set.tn; /* named in the caller's log line, whatever the verdict */
    const troupe_sc_t *x = NULL, *y = NULL;
    bool fma = false;
    troupe_gemm_verdict_t v = s_factors(s, &x, &y, &fma, why);
    if (v != TROUPE_GEMM_YES)
        return v;

    const troupe_tnode_t *c = s->u.set.tn, *xa = x->u.get.tn, *ya = y->u.get.tn;
    int32_t sym[3];
    int64_t ext[3], cs[3], xs[3], ys[3];
    for (int d = 0; d < 3; d++) {
        sym[d] = loops[d]->u.for_loop.sym;
        ext[d] = loops[d]->u.for_loop.to + 1;
        cs[d] = troupe_gemm_sym_stride(c, s->u.set.idcs, sym[d]);
        xs[d] = troupe_gemm_sym_stride(xa, x->u.get.idcs, sym[d]);
        ys[d] = troupe_gemm_sym_stride(ya, y->u.get.idcs, sym[d]);
    }
    /* The reduction symbol is the one the output does not move with. */
    int kd = -1, zeros = 0;
    for (int d = 0; d < 3; d++)
        if (cs[d] == 0) {
            kd = d;
            zeros++;
        }
    if (zeros != 1)
        return TROUPE_GEMM_NO;
    int p = (kd + 1) % 3, q = (kd + 2) % 3; /* the output's two symbols */
    if (xs[kd] == 0 || ys[kd] == 0) {
        *why = "a factor does not move with the reduction iterator";
        return TROUPE_GEMM_REFUSED;
    }
    /* Each factor moves with exactly one of the output's symbols. */
    bool x_has_p = xs[p] != 0, x_has_q = xs[q] != 0, y_has_p = ys[p] != 0, y_has_q = ys[q] != 0;
    if (x_has_p == x_has_q || y_has_p == y_has_q || x_has_p == y_has_p) {
        *why = "the factors do not split the output's iterators one each (not a matrix product)";
        return TROUPE_GEMM_REFUSED;
    }
    if (cs[p] < 0 || cs[q] < 0 || xs[p] < 0 || xs[q] < 0 || xs[kd] < 0 || ys[p] < 0 ||
        ys[q] < 0 || ys[kd] < 0) {
        *why = "an access runs backwards (negative stride)";
        return TROUPE_GEMM_REFUSED;
    }
    /* Column j: the output symbol with unit stride; row i: the other. */
    int jd, id;
    if (cs[q] == 1 || (cs[p] != 1 && ext[q] == 1)) {
        jd = q;
        id = p;
    } else {
        jd = p;
        id = q;
    }
    troupe_gemm_t g;
    g.m = ext[id];
    g.n = ext[jd];
    g.k = ext[kd];
    g.sym_m = sym[id];
    g.sym_n = sym[jd];
    g.sym_k = sym[kd];
    const troupe_sc_t *a = (xs[id] != 0) ? x : y;
    const troupe_sc_t *b = (a == x) ? y : x;
    const int64_t *as = (a == x) ? xs : ys, *bs = (a == x) ? ys : xs;
    g.c.tn = c;
    g.c.idcs = s->u.set.idcs;
    g.a.tn = a->u.get.tn;
    g.a.idcs = a->u.get.idcs;
    g.b.tn = b->u.get.tn;
    g.b.idcs = b->u.get.idcs;
    if (!s_fit(cs[id], cs[jd], g.m, g.n, &g.c.trans, &g.c.ld) || g.c.trans) {
        *why = "the output has no unit-stride axis (or its rows overlap)";
        return TROUPE_GEMM_REFUSED;
    }
    if (!s_fit(as[id], as[kd], g.m, g.k, &g.a.trans, &g.a.ld) ||
        !s_fit(bs[kd], bs[jd], g.k, g.n, &g.b.trans, &g.b.ld)) {
        *why = "a factor has no unit-stride axis (or its rows overlap)";
        return TROUPE_GEMM_REFUSED;
    }
    if (c->prec != g.a.tn->prec || c->prec != g.b.tn->prec) {
        *why = "the factors and the output differ in precision";
        return TROUPE_GEMM_REFUSED;
    }
    if (c->prec != TROUPE_PREC_SINGLE && c->prec != TROUPE_PREC_DOUBLE) {
        *why = "the precision has no library GEMM (single and double only)";
        return TROUPE_GEMM_REFUSED;
    }
    if (c == g.a.tn || c == g.b.tn) {
        *why = "the output is also a factor";
        return TROUPE_GEMM_REFUSED;
    }
    if (g.m > INT32_MAX || g.n > INT32_MAX || g.k > INT32_MAX || g.a.ld > INT32_MAX ||
        g.b.ld > INT32_MAX || g.c.ld > INT32_MAX) {
        *why = "an extent or leading dimension exceeds the library's 32-bit integers";
        return TROUPE_GEMM_REFUSED;
    }
    if (g.m * g.n * g.k < TROUPE_GEMM_MIN_MACS) {
        *why = "too small: a library call costs more than the loops";
        return TROUPE_GEMM_REFUSED;
    }
    g.prec = c->prec;
    g.fma = fma;
    *out = g;
    return TROUPE_GEMM_YES;
}

bool troupe_gemm_covers_output(const troupe_gemm_t *g)
{
    const troupe_tnode_t *c = g->c.tn;
    for (int ax = 0; ax < c->ndims; ax++) {
        const troupe_axis_index_t *x = &g->c.idcs[ax];
        if (x->offset != 0)
            return false;
        for (int t = 0; t < x->nterms; t++)
            if (x->terms[t].sym != g->sym_m && x->terms[t].sym != g->sym_n)
                return false;
    }
    return g->c.ld == g->n && g->m * g->n == troupe_tnode_num_elems(c);
}
