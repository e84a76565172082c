/* troupe — recognising matrix products in the low-level IR (see gemm.h). */
#include "compiler/gemm.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

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
    return get->kind == TROUPE_SC_GET && get->u.get.tn == tn &&
           troupe_axis_indices_equal(get->u.get.idcs, idcs, tn->ndims);
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

bool troupe_gemm_has_sym(const troupe_gemm_t *g, int32_t sym)
{
    for (int d = 0; d < g->nsyms; d++)
        if (g->syms[d] == sym)
            return true;
    return false;
}

/* Whether loop b continues loop a's dense chain: b steps every operand by a's stride times a's
 * extent. */
static bool s_continues(int a, int b, const int64_t *ext, const int64_t *const st[3])
{
    for (int o = 0; o < 3; o++)
        if (st[o][b] != st[o][a] * ext[a])
            return false;
    return true;
}

/* One way to fold a group of loops into one dimension: a dense chain of its loops. */
typedef struct s_dim {
    int64_t ext, st[3]; /* the chain's extent; its fastest loop's strides in C, x and y */
    int32_t sym;        /* its fastest loop */
    uint32_t loops;     /* the loops (bits over the nest) it takes, with the group's extent-1 ones */
} s_dim_t;

/* The candidate dimensions of the loops ds[0..n-1] (extents ext, strides st[o][d] in the
 * three operands): from each loop of extent > 1, the dense chain that grows from it (each next
 * loop stepping every operand by the previous one's stride times its extent); one of extent 1
 * when every loop has extent 1. Returns how many (at most n). */
static int s_dims(const int *ds, int n, const int64_t *ext, const int64_t *const st[3],
                  const int32_t *sym, s_dim_t *out)
{
    uint32_t ones = 0;
    for (int i = 0; i < n; i++)
        if (ext[ds[i]] <= 1)
            ones |= 1u << ds[i];
    int nc = 0;
    for (int i = 0; i < n; i++) {
        if (ext[ds[i]] <= 1)
            continue;
        s_dim_t d = {ext[ds[i]], {st[0][ds[i]], st[1][ds[i]], st[2][ds[i]]}, sym[ds[i]],
                     ones | 1u << ds[i]};
        int last = ds[i];
        for (bool grew = true; grew;) {
            grew = false;
            for (int j = 0; j < n && !grew; j++)
                if (!(d.loops >> ds[j] & 1u) && s_continues(last, ds[j], ext, st)) {
                    d.loops |= 1u << ds[j];
                    d.ext *= ext[ds[j]];
                    last = ds[j];
                    grew = true;
                }
        }
        out[nc++] = d;
    }
    if (nc == 0)
        out[nc++] = (s_dim_t){1, {0, 0, 0}, sym[ds[0]], ones};
    return nc;
}

/* The product's call from its three dimensions (0 the reduction; 1 and 2 the output's, row
 * and column decided here): fills g's extents, symbols and operands. False, with *why, when
 * an operand has no unit-stride axis. */
static bool s_shape(const int32_t sym[3], const int64_t ext[3], const int64_t cs[3],
                    const int64_t xs[3], const int64_t ys[3], const troupe_ll_t *set,
                    const troupe_sc_t *x, const troupe_sc_t *y, troupe_gemm_t *g,
                    const char **why)
{
    const int kd = 0, p = 1, q = 2;
    /* Column j: the output symbol with unit stride; row i: the other. */
    int jd, id;
    if (cs[q] == 1 || (cs[p] != 1 && ext[q] == 1)) {
        jd = q;
        id = p;
    } else {
        jd = p;
        id = q;
    }
    g->m = ext[id];
    g->n = ext[jd];
    g->k = ext[kd];
    g->sym_m = sym[id];
    g->sym_n = sym[jd];
    g->sym_k = sym[kd];
    const troupe_sc_t *a = (xs[id] != 0) ? x : y;
    const troupe_sc_t *b = (a == x) ? y : x;
    const int64_t *as = (a == x) ? xs : ys, *bs = (a == x) ? ys : xs;
    g->c.tn = set->u.set.tn;
    g->c.idcs = set->u.set.idcs;
    g->a.tn = a->u.get.tn;
    g->a.idcs = a->u.get.idcs;
    g->b.tn = b->u.get.tn;
    g->b.idcs = b->u.get.idcs;
    if (!s_fit(cs[id], cs[jd], g->m, g->n, &g->c.trans, &g->c.ld) || g->c.trans) {
        *why = "the output has no unit-stride axis (or its rows overlap)";
        return false;
    }
    if (!s_fit(as[id], as[kd], g->m, g->k, &g->a.trans, &g->a.ld) ||
        !s_fit(bs[kd], bs[jd], g->k, g->n, &g->b.trans, &g->b.ld)) {
        *why = "a factor has no unit-stride axis (or its rows overlap)";
        return false;
    }
    return true;
}

/* The elements of the operands outer loop o leaves in place: what consecutive calls share
 * when o runs innermost. */
static int64_t s_outer_reuse(const troupe_gemm_t *g, int o)
{
    const troupe_gemm_operand_t *op[3] = {&g->a, &g->b, &g->c};
    const int64_t size[3] = {g->m * g->k, g->k * g->n, g->m * g->n};
    int64_t reuse = 0;
    for (int i = 0; i < 3; i++)
        if (troupe_gemm_sym_stride(op[i]->tn, op[i]->idcs, g->outer_syms[o]) == 0)
            reuse += size[i];
    return reuse;
}

/* Orders the outer loops so that the one whose calls share the most data runs innermost
 * (e.g. a convolution's shifted products: the window offsets inside, the batch outside, so
 * that one sample's operands stay in cache over its calls). Two loops that both accumulate
 * into the same output block keep their order, so each element sums in the same order. */
static void s_order_outer(troupe_gemm_t *g)
{
    int64_t reuse[TROUPE_GEMM_MAX_LOOPS];
    bool acc[TROUPE_GEMM_MAX_LOOPS];
    for (int o = 0; o < g->nouter; o++) {
        reuse[o] = s_outer_reuse(g, o);
        acc[o] = troupe_gemm_sym_stride(g->c.tn, g->c.idcs, g->outer_syms[o]) == 0;
    }
    for (int i = 1; i < g->nouter; i++)
        for (int j = i; j > 0 && reuse[j - 1] > reuse[j] && !(acc[j - 1] && acc[j]); j--) {
            int32_t s = g->outer_syms[j];
            int64_t e = g->outer_ext[j], r = reuse[j];
            bool a = acc[j];
            g->outer_syms[j] = g->outer_syms[j - 1];
            g->outer_ext[j] = g->outer_ext[j - 1];
            reuse[j] = reuse[j - 1];
            acc[j] = acc[j - 1];
            g->outer_syms[j - 1] = s;
            g->outer_ext[j - 1] = e;
            reuse[j - 1] = r;
            acc[j - 1] = a;
        }
}

troupe_gemm_verdict_t troupe_gemm_match(const troupe_ll_t *loop, troupe_gemm_t *out,
                                        const char **why)
{
    static const char *none = "";
    *why = none;
    const troupe_ll_t *loops[TROUPE_GEMM_MAX_LOOPS];
    const troupe_ll_t *s = loop;
    int depth = 0;
    while (s->kind == TROUPE_LL_FOR) {
        if (depth == TROUPE_GEMM_MAX_LOOPS || s->u.for_loop.from != 0 ||
            s->u.for_loop.to < s->u.for_loop.from)
            return TROUPE_GEMM_NO;
        loops[depth++] = s;
        s = s->u.for_loop.body;
    }
    if (depth < 3 || s->kind != TROUPE_LL_SET)
        return TROUPE_GEMM_NO;
    out->c.tn = s->u.set.tn; /* named in the caller's log line, whatever the verdict */
    out->shape_ok = false;
    const troupe_sc_t *x = NULL, *y = NULL;
    bool fma = false;
    troupe_gemm_verdict_t v = s_factors(s, &x, &y, &fma, why);
    if (v != TROUPE_GEMM_YES)
        return v;

    const troupe_tnode_t *c = s->u.set.tn, *xa = x->u.get.tn, *ya = y->u.get.tn;
    int32_t lsym[TROUPE_GEMM_MAX_LOOPS];
    int64_t lext[TROUPE_GEMM_MAX_LOOPS], lcs[TROUPE_GEMM_MAX_LOOPS], lxs[TROUPE_GEMM_MAX_LOOPS],
        lys[TROUPE_GEMM_MAX_LOOPS];
    int zeros = 0;
    for (int d = 0; d < depth; d++) {
        lsym[d] = loops[d]->u.for_loop.sym;
        lext[d] = loops[d]->u.for_loop.to + 1;
        lcs[d] = troupe_gemm_sym_stride(c, s->u.set.idcs, lsym[d]);
        lxs[d] = troupe_gemm_sym_stride(xa, x->u.get.idcs, lsym[d]);
        lys[d] = troupe_gemm_sym_stride(ya, y->u.get.idcs, lsym[d]);
        zeros += lcs[d] == 0;
    }
    /* The reduction loops are those the output does not move with; each other loop moves
     * exactly one factor (x's side or y's). A deeper nest that does not split so (a batch
     * loop moving all three) is NO: the level below may be a product. */
    const bool deep = depth > 3;
    if (zeros == 0 || (!deep && zeros != 1))
        return TROUPE_GEMM_NO;
    int grp[3][TROUPE_GEMM_MAX_LOOPS], ng[3] = {0, 0, 0}; /* K, x's side, y's side */
    for (int d = 0; d < depth; d++) {
        if (lcs[d] == 0) {
            if (lxs[d] == 0 || lys[d] == 0) {
                *why = "a factor does not move with the reduction iterator";
                return deep ? TROUPE_GEMM_NO : TROUPE_GEMM_REFUSED;
            }
            grp[0][ng[0]++] = d;
        } else if ((lxs[d] != 0) == (lys[d] != 0)) {
            *why = "the factors do not split the output's iterators one each (not a matrix "
                   "product)";
            return deep ? TROUPE_GEMM_NO : TROUPE_GEMM_REFUSED;
        } else {
            grp[lxs[d] != 0 ? 1 : 2][ng[lxs[d] != 0 ? 1 : 2]++] = d;
        }
    }
    if (ng[1] == 0 || ng[2] == 0) {
        *why = "the factors do not split the output's iterators one each (not a matrix product)";
        return deep ? TROUPE_GEMM_NO : TROUPE_GEMM_REFUSED;
    }
    for (int d = 0; d < depth; d++)
        if (lcs[d] < 0 || lxs[d] < 0 || lys[d] < 0) {
            *why = "an access runs backwards (negative stride)";
            return deep ? TROUPE_GEMM_NO : TROUPE_GEMM_REFUSED;
        }
    /* The three dimensions, reduction first: in a nest of three, the output's two in loop
     * order after the reduction's (cyclically). Merged, x's side then y's, each one dense
     * chain of its group's loops: of the candidates, the call that fits with the most
     * multiply-adds; the group's other loops run around it. */
    troupe_gemm_t g;
    memset(&g, 0, sizeof g);
    uint32_t taken = (1u << depth) - 1;
    if (!deep) {
        int32_t sym[3];
        int64_t ext[3], cs[3], xs[3], ys[3];
        int l[3] = {grp[0][0], (grp[0][0] + 1) % 3, (grp[0][0] + 2) % 3};
        for (int d = 0; d < 3; d++) {
            sym[d] = lsym[l[d]];
            ext[d] = lext[l[d]];
            cs[d] = lcs[l[d]];
            xs[d] = lxs[l[d]];
            ys[d] = lys[l[d]];
        }
        if (!s_shape(sym, ext, cs, xs, ys, s, x, y, &g, why))
            return TROUPE_GEMM_REFUSED;
    } else {
        const int64_t *st[3] = {lcs, lxs, lys};
        s_dim_t cand[3][TROUPE_GEMM_MAX_LOOPS];
        int nc[3];
        for (int d = 0; d < 3; d++)
            nc[d] = s_dims(grp[d], ng[d], lext, st, lsym, cand[d]);
        int64_t best = -1;
        for (int i0 = 0; i0 < nc[0]; i0++)
            for (int i1 = 0; i1 < nc[1]; i1++)
                for (int i2 = 0; i2 < nc[2]; i2++) {
                    const s_dim_t *dd[3] = {&cand[0][i0], &cand[1][i1], &cand[2][i2]};
                    int32_t sym[3];
                    int64_t ext[3], cs[3], xs[3], ys[3];
                    for (int d = 0; d < 3; d++) {
                        sym[d] = dd[d]->sym;
                        ext[d] = dd[d]->ext;
                        cs[d] = dd[d]->st[0];
                        xs[d] = dd[d]->st[1];
                        ys[d] = dd[d]->st[2];
                    }
                    troupe_gemm_t t;
                    const char *tw = NULL;
                    if (s_shape(sym, ext, cs, xs, ys, s, x, y, &t, &tw) && t.m * t.n * t.k > best) {
                        best = t.m * t.n * t.k;
                        g = t;
                        taken = dd[0]->loops | dd[1]->loops | dd[2]->loops;
                    }
                }
        if (best < 0)
            return TROUPE_GEMM_NO; /* no fold fits a call: the level below may */
    }
    g.nsyms = 0;
    g.nouter = 0;
    for (int d = 0; d < depth; d++) {
        if (taken >> d & 1u) {
            g.syms[g.nsyms++] = lsym[d];
        } else {
            g.outer_syms[g.nouter] = lsym[d];
            g.outer_ext[g.nouter++] = lext[d];
        }
    }
    s_order_outer(&g);
    /* The precision rules come first (their reasons are the ones reported); a nest refused
     * for them alone is still described (shape_ok), for targets that tile it themselves. */
    const char *prec_why = NULL;
    /* mixed precision: two bfloat16 or two half factors into a single output */
    bool narrow = c->prec == TROUPE_PREC_SINGLE && g.a.tn->prec == g.b.tn->prec &&
                  (g.a.tn->prec == TROUPE_PREC_BFLOAT16 || g.a.tn->prec == TROUPE_PREC_HALF);
    if (!narrow && (c->prec != g.a.tn->prec || c->prec != g.b.tn->prec))
        prec_why = "the factors and the output differ in precision (two bfloat16 or two half "
                   "factors into a single output excepted)";
    else if (c->prec != TROUPE_PREC_SINGLE && c->prec != TROUPE_PREC_DOUBLE)
        prec_why = "the precision has no library GEMM (single and double only)";
    if (c == g.a.tn || c == g.b.tn) {
        *why = prec_why != NULL ? prec_why : "the output is also a factor";
        return TROUPE_GEMM_REFUSED;
    }
    g.prec = c->prec;
    g.factor_prec = narrow ? g.a.tn->prec : c->prec;
    g.fma = fma;
    g.shape_ok = false;
    if (prec_why != NULL) {
        *why = prec_why;
        if (troupe_prec_is_float(c->prec) && troupe_prec_is_float(g.a.tn->prec) &&
            troupe_prec_is_float(g.b.tn->prec)) {
            g.shape_ok = true;
            *out = g;
        }
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
    *out = g;
    return TROUPE_GEMM_YES;
}

bool troupe_gemm_covers_output(const troupe_gemm_t *g)
{
    const troupe_tnode_t *c = g->c.tn;
    bool outer[TROUPE_GEMM_MAX_LOOPS] = {false};
    for (int ax = 0; ax < c->ndims; ax++) {
        const troupe_axis_index_t *x = &g->c.idcs[ax];
        if (x->offset != 0)
            return false;
        for (int t = 0; t < x->nterms; t++) {
            bool found = troupe_gemm_has_sym(g, x->terms[t].sym);
            for (int o = 0; o < g->nouter && !found; o++)
                found = outer[o] = g->outer_syms[o] == x->terms[t].sym;
            if (!found)
                return false;
        }
    }
    if (g->c.ld != g->n)
        return false;
    /* the outer loops each move C, and in some order each steps it by the block before it:
     * the calls' m x n blocks tile C */
    int64_t block = g->m * g->n;
    bool used[TROUPE_GEMM_MAX_LOOPS] = {false};
    for (int placed = 0; placed < g->nouter; placed++) {
        int next = -1;
        for (int o = 0; o < g->nouter && next < 0; o++)
            if (!used[o] && outer[o] && g->outer_ext[o] > 1 &&
                troupe_gemm_sym_stride(c, g->c.idcs, g->outer_syms[o]) == block)
                next = o;
        for (int o = 0; o < g->nouter && next < 0; o++)
            if (!used[o] && g->outer_ext[o] == 1 && outer[o])
                next = o;
        if (next < 0)
            return false; /* a loop accumulates into the same block, or leaves gaps */
        used[next] = true;
        block *= g->outer_ext[next];
    }
    return block == troupe_tnode_num_elems(c);
}

/* The slice of C each iteration of the outermost outer loop writes within (see
 * troupe_gemm_zero_slice, which adds that the calls accumulate), or 0. */
static int64_t s_iter_slice(const troupe_gemm_t *g)
{
    const troupe_tnode_t *c = g->c.tn;
    if (g->nouter == 0 || g->a.tn == c || g->b.tn == c)
        return 0;
    for (int ax = 0; ax < c->ndims; ax++) { /* only the product's and the outer iterators */
        const troupe_axis_index_t *x = &g->c.idcs[ax];
        if (x->offset != 0)
            return 0;
        for (int t = 0; t < x->nterms; t++) {
            bool found = troupe_gemm_has_sym(g, x->terms[t].sym);
            for (int o = 0; o < g->nouter && !found; o++)
                found = g->outer_syms[o] == x->terms[t].sym;
            if (!found)
                return 0;
        }
    }
    int64_t slice = troupe_gemm_sym_stride(c, g->c.idcs, g->outer_syms[0]);
    if (slice <= 0 || slice * g->outer_ext[0] != troupe_tnode_num_elems(c))
        return 0;
    /* the last element one iteration's calls write, from its slice's start: the calls' blocks
     * (row i at i * ldc) moved by the inner outer loops, each forward */
    int64_t last = (g->m - 1) * g->c.ld + g->n - 1;
    for (int o = 1; o < g->nouter; o++) {
        int64_t st = troupe_gemm_sym_stride(c, g->c.idcs, g->outer_syms[o]);
        if (st < 0)
            return 0;
        last += st * (g->outer_ext[o] - 1);
    }
    return last < slice ? slice : 0;
}

int64_t troupe_gemm_zero_slice(const troupe_gemm_t *g)
{
    return troupe_gemm_covers_output(g) ? 0 : s_iter_slice(g);
}

/* ---- epilogues ------------------------------------------------------------------------- */

/* The SET at the bottom of a two-deep nest of loops from 0 (their symbols and extents), or
 * NULL. */
static const troupe_ll_t *s_nest2(const troupe_ll_t *s, int32_t sym[2], int64_t ext[2])
{
    for (int d = 0; d < 2; d++) {
        if (s->kind != TROUPE_LL_FOR || s->u.for_loop.from != 0 ||
            s->u.for_loop.to < s->u.for_loop.from)
            return NULL;
        sym[d] = s->u.for_loop.sym;
        ext[d] = s->u.for_loop.to + 1;
        s = s->u.for_loop.body;
    }
    return s->kind == TROUPE_LL_SET ? s : NULL;
}

/* Whether tn[idcs] is element (i, j) of tn as a whole row-major m x n matrix, i the value of
 * sym_m and j of sym_n: tn[i*n + j], nothing else moving it. */
static bool s_whole(const troupe_tnode_t *tn, const troupe_axis_index_t *idcs,
                    const troupe_gemm_t *g, int32_t sym_m, int32_t sym_n)
{
    if (troupe_tnode_num_elems(tn) != g->m * g->n)
        return false;
    for (int ax = 0; ax < tn->ndims; ax++) {
        if (idcs[ax].offset != 0)
            return false;
        for (int t = 0; t < idcs[ax].nterms; t++)
            if (idcs[ax].terms[t].sym != sym_m && idcs[ax].terms[t].sym != sym_n)
                return false;
    }
    return (g->m == 1 || troupe_gemm_sym_stride(tn, idcs, sym_m) == g->n) &&
           (g->n == 1 || troupe_gemm_sym_stride(tn, idcs, sym_n) == 1);
}

/* Which of a nest's two symbols runs over i and which over j, for the nest's own output
 * element `set` being element (i, j) of its node as a whole m x n matrix. */
static bool s_rows_cols(const troupe_ll_t *set, const int32_t sym[2], const int64_t ext[2],
                        const troupe_gemm_t *g, int32_t *sym_m, int32_t *sym_n)
{
    for (int r = 0; r < 2; r++) {
        int c = 1 - r;
        if (ext[r] == g->m && ext[c] == g->n &&
            s_whole(set->u.set.tn, set->u.set.idcs, g, sym[r], sym[c])) {
            *sym_m = sym[r];
            *sym_n = sym[c];
            return true;
        }
    }
    return false;
}

/* Whether v reads a bias vector: b[i] or b[j] alone, unit stride, from element 0. */
static bool s_bias(const troupe_sc_t *v, const troupe_gemm_t *g, int32_t sym_m, int32_t sym_n,
                   troupe_gemm_bias_axis_t *axis, const troupe_tnode_t **tn)
{
    if (v->kind != TROUPE_SC_GET)
        return false;
    const troupe_tnode_t *b = v->u.get.tn;
    const troupe_axis_index_t *idcs = v->u.get.idcs;
    bool on_m = false, on_n = false;
    for (int ax = 0; ax < b->ndims; ax++) {
        if (idcs[ax].offset != 0)
            return false;
        for (int t = 0; t < idcs[ax].nterms; t++) {
            int32_t s = idcs[ax].terms[t].sym;
            if (s == sym_m)
                on_m = true;
            else if (s == sym_n)
                on_n = true;
            else
                return false;
        }
    }
    if (on_m == on_n)
        return false;
    int64_t len = on_m ? g->m : g->n;
    if (troupe_gemm_sym_stride(b, idcs, on_m ? sym_m : sym_n) != 1 ||
        troupe_tnode_num_elems(b) < len)
        return false;
    *axis = on_m ? TROUPE_GEMM_BIAS_M : TROUPE_GEMM_BIAS_N;
    *tn = b;
    return true;
}

/* Whether v reads node tn anywhere. */
static bool s_reads(const troupe_sc_t *v, const troupe_tnode_t *tn)
{
    switch (v->kind) {
    case TROUPE_SC_GET:
        return v->u.get.tn == tn;
    case TROUPE_SC_TERNOP:
        return s_reads(v->u.op.args[0], tn) || s_reads(v->u.op.args[1], tn) ||
               s_reads(v->u.op.args[2], tn);
    case TROUPE_SC_BINOP:
        return s_reads(v->u.op.args[0], tn) || s_reads(v->u.op.args[1], tn);
    case TROUPE_SC_UNOP:
        return s_reads(v->u.op.args[0], tn);
    default:
        return true; /* a local scope may read it: not a plain epilogue */
    }
}

static bool s_is_zero(const troupe_sc_t *v)
{
    return v->kind == TROUPE_SC_CONSTANT && v->u.constant == 0.0 && !signbit(v->u.constant);
}

/* The init nest `s`, C[i,j] = b: fills ep's init fields; false (ep->refused set when s writes
 * the product's output) when it is not one. */
static bool s_init(const troupe_ll_t *s, const troupe_gemm_t *g, troupe_gemm_epilogue_t *ep)
{
    int32_t sym[2];
    int64_t ext[2];
    const troupe_ll_t *set = s_nest2(s, sym, ext);
    if (set == NULL || set->u.set.tn != g->c.tn)
        return false;
    int32_t sm = 0, sn = 0;
    const troupe_tnode_t *b = NULL;
    troupe_gemm_bias_axis_t axis = TROUPE_GEMM_BIAS_NONE;
    if (!troupe_gemm_covers_output(g) || !s_rows_cols(set, sym, ext, g, &sm, &sn)) {
        ep->refused = "the initial values and the product do not cover the whole output alike";
        return false;
    }
    if (!s_bias(set->u.set.value, g, sm, sn, &axis, &b)) {
        ep->refused = "the initial value is not a vector b[i] or b[j] (unit stride, from 0)";
        return false;
    }
    if (b == g->c.tn || b->prec != g->prec) {
        ep->refused = "the initial bias is the output or differs from it in precision";
        return false;
    }
    ep->init = s;
    ep->init_sym_m = sm;
    ep->init_sym_n = sn;
    ep->bias_axis = axis;
    ep->bias = b;
    ep->bias_in_init = true;
    return true;
}

/* The post nest `s`, D[i,j] = post(C[i,j]): fills ep's post fields; false (ep->refused set when
 * s reads the product's output) when it is not one or breaks a rule. */
static bool s_post(const troupe_ll_t *s, const troupe_gemm_t *g, troupe_gemm_epilogue_t *ep)
{
    int32_t sym[2];
    int64_t ext[2];
    const troupe_ll_t *set = s_nest2(s, sym, ext);
    const troupe_tnode_t *c = g->c.tn;
    if (set == NULL || !s_reads(set->u.set.value, c))
        return false;
    int32_t sm = 0, sn = 0;
    if (!troupe_gemm_covers_output(g) || !s_rows_cols(set, sym, ext, g, &sm, &sn)) {
        ep->refused = "the pointwise statement after the product does not write a whole node "
                      "of the output's shape over the product's iterations";
        return false;
    }
    const troupe_sc_t *v = set->u.set.value;
    bool relu = false, zero_first = false;
    if (v->kind == TROUPE_SC_BINOP && v->u.op.op == TROUPE_BINOP_MAX &&
        (s_is_zero(v->u.op.args[0]) || s_is_zero(v->u.op.args[1]))) {
        relu = true;
        zero_first = s_is_zero(v->u.op.args[0]);
        v = v->u.op.args[zero_first ? 1 : 0];
    } else if (v->kind == TROUPE_SC_UNOP && v->u.op.op == TROUPE_UNOP_RELU) {
        relu = true; /* relu x is max(0, x) (ir/ops.h) */
        zero_first = true;
        v = v->u.op.args[0];
    }
    const troupe_tnode_t *b = NULL;
    troupe_gemm_bias_axis_t axis = TROUPE_GEMM_BIAS_NONE;
    bool plain =
        v->kind == TROUPE_SC_GET && v->u.get.tn == c && s_whole(c, v->u.get.idcs, g, sm, sn);
    if (!plain && v->kind == TROUPE_SC_BINOP && v->u.op.op == TROUPE_BINOP_ADD) {
        for (int x = 0; x < 2 && axis == TROUPE_GEMM_BIAS_NONE; x++) {
            const troupe_sc_t *cv = v->u.op.args[x], *bv = v->u.op.args[1 - x];
            if (cv->kind == TROUPE_SC_GET && cv->u.get.tn == c &&
                s_whole(c, cv->u.get.idcs, g, sm, sn) && !s_bias(bv, g, sm, sn, &axis, &b))
                axis = TROUPE_GEMM_BIAS_NONE;
        }
    }
    if ((!plain && axis == TROUPE_GEMM_BIAS_NONE) || (plain && !relu)) {
        ep->refused = "the statement after the product is not C + b, relu C, max(0, C) or "
                      "their forms over C + b at the same element";
        return false;
    }
    const troupe_tnode_t *d = set->u.set.tn;
    if (d->prec != g->prec || (b != NULL && b->prec != g->prec)) {
        ep->refused = "the epilogue's output or bias differs from the product in precision";
        return false;
    }
    if (d == g->a.tn || d == g->b.tn) {
        ep->refused = "the epilogue writes a factor of the product";
        return false;
    }
    if (b != NULL && (b == c || b == d)) {
        ep->refused = "the bias is the product's or the epilogue's output";
        return false;
    }
    if (b != NULL && ep->bias != NULL) {
        ep->refused = "a second bias (the product already starts from one)";
        return false;
    }
    ep->post = s;
    ep->post_sym_m = sm;
    ep->post_sym_n = sn;
    ep->relu = relu;
    ep->relu_zero_first = zero_first;
    ep->d = d;
    if (b != NULL) {
        ep->bias_axis = axis;
        ep->bias = b;
        ep->bias_in_init = false;
    }
    return true;
}

/* Whether the element tn[idcs] lies inside the slice [slice * p, slice * (p + 1)) for the value
 * p of sym, the other symbols in its index running over the nest's loops syms[0..n-1] (from 0
 * to ext - 1). */
static bool s_idx_in_slice(const troupe_tnode_t *c, const troupe_axis_index_t *idcs, int32_t sym,
                           int64_t slice, const int32_t *syms, const int64_t *ext, int n)
{
    if (troupe_gemm_sym_stride(c, idcs, sym) != slice)
        return false;
    int64_t lo = 0, hi = 0, stride = 1;
    for (int ax = c->ndims - 1; ax >= 0; ax--) { /* the constant part, each axis's offset */
        lo += idcs[ax].offset * stride;
        stride *= c->dims[ax];
    }
    hi = lo;
    for (int ax = 0; ax < c->ndims; ax++)
        for (int t = 0; t < idcs[ax].nterms; t++) {
            int32_t s = idcs[ax].terms[t].sym;
            int l = 0;
            while (l < n && syms[l] != s)
                l++;
            if (s == sym)
                continue;
            if (l == n)
                return false; /* a symbol from outside the nest */
        }
    for (int l = 0; l < n; l++) {
        int64_t st = troupe_gemm_sym_stride(c, idcs, syms[l]);
        if (st < 0)
            lo += st * (ext[l] - 1);
        else
            hi += st * (ext[l] - 1);
    }
    return lo >= 0 && hi < slice;
}

/* Whether every read of c in v is inside slice p (s_idx_in_slice); false for a value form it
 * does not know. */
static bool s_reads_slice(const troupe_sc_t *v, const troupe_tnode_t *c, int32_t sym, int64_t slice,
                          const int32_t *syms, const int64_t *ext, int n)
{
    switch (v->kind) {
    case TROUPE_SC_CONSTANT:
        return true;
    case TROUPE_SC_GET:
        return v->u.get.tn != c || s_idx_in_slice(c, v->u.get.idcs, sym, slice, syms, ext, n);
    case TROUPE_SC_TERNOP:
        return s_reads_slice(v->u.op.args[0], c, sym, slice, syms, ext, n) &&
               s_reads_slice(v->u.op.args[1], c, sym, slice, syms, ext, n) &&
               s_reads_slice(v->u.op.args[2], c, sym, slice, syms, ext, n);
    case TROUPE_SC_BINOP:
        return s_reads_slice(v->u.op.args[0], c, sym, slice, syms, ext, n) &&
               s_reads_slice(v->u.op.args[1], c, sym, slice, syms, ext, n);
    case TROUPE_SC_UNOP:
        return s_reads_slice(v->u.op.args[0], c, sym, slice, syms, ext, n);
    default:
        return false;
    }
}

/* The SET at the bottom of nest s, a loop over the extent of the product's outermost loop of
 * calls around a perfect nest of loops from 0 (its symbol in *sym, the inner loops' in syms and
 * ext, n of them), or NULL. */
static const troupe_ll_t *s_slice_nest(const troupe_gemm_t *g, const troupe_ll_t *s, int32_t *sym,
                                       int32_t *syms, int64_t *ext, int *n)
{
    *n = 0;
    if (g->nouter == 0 || s->kind != TROUPE_LL_FOR || s->u.for_loop.from != 0 ||
        s->u.for_loop.to != g->outer_ext[0] - 1)
        return NULL;
    *sym = s->u.for_loop.sym;
    const troupe_ll_t *b = s->u.for_loop.body;
    while (b->kind == TROUPE_LL_FOR && *n < TROUPE_MAX_DIMS + 4) {
        if (b->u.for_loop.from != 0 || b->u.for_loop.to < 0)
            return NULL;
        syms[*n] = b->u.for_loop.sym;
        ext[(*n)++] = b->u.for_loop.to + 1;
        b = b->u.for_loop.body;
    }
    return b->kind == TROUPE_LL_SET ? b : NULL;
}

bool troupe_gemm_slice_post(const troupe_gemm_t *g, const troupe_ll_t *s)
{
    int64_t slice = s_iter_slice(g);
    int32_t sym = 0, syms[TROUPE_MAX_DIMS + 4];
    int64_t ext[TROUPE_MAX_DIMS + 4];
    int n = 0;
    const troupe_ll_t *b = slice == 0 ? NULL : s_slice_nest(g, s, &sym, syms, ext, &n);
    if (b == NULL)
        return false;
    const troupe_tnode_t *d = b->u.set.tn;
    return d != g->c.tn && d != g->a.tn && d != g->b.tn && s_reads(b->u.set.value, g->c.tn) &&
           s_reads_slice(b->u.set.value, g->c.tn, sym, slice, syms, ext, n);
}

bool troupe_gemm_init_slice(const troupe_gemm_t *g, const troupe_ll_t *s)
{
    int64_t slice = troupe_gemm_zero_slice(g);
    int32_t sym = 0, syms[TROUPE_MAX_DIMS + 4];
    int64_t ext[TROUPE_MAX_DIMS + 4];
    int n = 0;
    const troupe_ll_t *b = slice == 0 ? NULL : s_slice_nest(g, s, &sym, syms, ext, &n);
    return b != NULL && b->u.set.tn == g->c.tn && !s_reads(b->u.set.value, g->c.tn) &&
           s_idx_in_slice(g->c.tn, b->u.set.idcs, sym, slice, syms, ext, n);
}

troupe_gemm_verdict_t troupe_gemm_match_window(const troupe_ll_t *const *items, size_t n, size_t at,
                                               troupe_gemm_t *g, troupe_gemm_epilogue_t *ep,
                                               size_t *consumed, const char **why)
{
    memset(ep, 0, sizeof *ep);
    *consumed = 0;
    const troupe_ll_t *first = items[at];
    troupe_gemm_verdict_t v = TROUPE_GEMM_NO;
    if (first->kind == TROUPE_LL_FOR)
        v = troupe_gemm_match(first, g, why);
    if (v == TROUPE_GEMM_REFUSED)
        return v;
    size_t p = at;
    if (v != TROUPE_GEMM_YES) {
        const char *ignored = NULL;
        if (at + 1 >= n || items[at + 1]->kind != TROUPE_LL_FOR ||
            (first->kind != TROUPE_LL_ZERO_OUT && first->kind != TROUPE_LL_FOR) ||
            troupe_gemm_match(items[at + 1], g, &ignored) != TROUPE_GEMM_YES)
            return TROUPE_GEMM_NO;
        if (first->kind == TROUPE_LL_ZERO_OUT) {
            if (first->u.zero_out != g->c.tn)
                return TROUPE_GEMM_NO;
            if (troupe_gemm_covers_output(g))
                ep->beta_zero = true;
            else if ((ep->zero_slice = troupe_gemm_zero_slice(g)) == 0)
                return TROUPE_GEMM_NO;
        } else if (!s_init(first, g, ep)) {
            if (!troupe_gemm_init_slice(g, first))
                return TROUPE_GEMM_NO; /* the product matches on its own at at + 1 */
            ep->refused = NULL;        /* not an init over the whole output, but one per slice */
            ep->init_slice = first;
        }
        p = at + 1;
    }
    *consumed = p - at + 1;
    if (p + 1 < n && s_post(items[p + 1], g, ep)) {
        (*consumed)++;
    } else if (ep->init == NULL && ep->post == NULL) {
        size_t q = p + 1; /* past comments */
        while (q < n && (items[q]->kind == TROUPE_LL_COMMENT || items[q]->kind == TROUPE_LL_NOOP))
            q++;
        if (q < n && troupe_gemm_slice_post(g, items[q])) {
            ep->slice_post = items[q];
            ep->slice_post_at = q - at;
        }
    }
    return TROUPE_GEMM_YES;
}
