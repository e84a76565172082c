/* troupe — loop fusion of pointwise nests (see fuse.h). */
#include "compiler/fuse.h"

#include "base/alloc.h"
#include "base/vec.h"

#include <stdbool.h>
#include <string.h>

#define S_MAX_DEPTH 16

typedef struct s_nest {
    int depth;
    const troupe_ll_t *loops[S_MAX_DEPTH];
    const troupe_ll_t *body; /* a SET or a SEQ of SETs */
} s_nest_t;

/* One access of a nest, its indices in the first nest's iterators (copied, renamed). */
typedef struct s_access {
    const troupe_tnode_t *tn;
    troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
    bool write;
} s_access_t;

/* B's iterators -> A's, level by level; n = 0 renames nothing. */
typedef struct s_rename {
    int32_t from[S_MAX_DEPTH], to[S_MAX_DEPTH];
    int n;
} s_rename_t;

static troupe_axis_index_t s_ren_axis(const s_rename_t *r, troupe_axis_index_t x)
{
    for (int t = 0; t < x.nterms; t++)
        for (int k = 0; k < r->n; k++)
            if (x.terms[t].sym == r->from[k]) {
                x.terms[t].sym = r->to[k];
                break;
            }
    return x;
}

static void s_ren_idcs(const s_rename_t *r, const troupe_tnode_t *tn, const troupe_axis_index_t *in,
                       troupe_axis_index_t *out)
{
    for (int ax = 0; ax < tn->ndims; ax++)
        out[ax] = s_ren_axis(r, in[ax]);
}

typedef struct s_accesses {
    s_access_t *items;
    size_t count, cap;
    bool oom;
} s_accesses_t;

typedef struct s_fuser {
    troupe_ll_proc_t *proc;
    size_t fused;
    bool oom;
    bool outer; /* prefix fusion, fusion past independent statements, sunk zeroings */
} s_fuser_t;

/* ---- recognising nests ------------------------------------------------------------------- */

static bool s_scalar_ok(const troupe_sc_t *v);

/* A local scope's body that is SET_LOCALs only (an inlined pointwise definition, no loops). */
static bool s_scope_body_ok(const troupe_ll_t *b)
{
    if (b->kind == TROUPE_LL_SET_LOCAL)
        return s_scalar_ok(b->u.set_local.value);
    if (b->kind != TROUPE_LL_SEQ)
        return false;
    for (size_t i = 0; i < b->u.seq.count; i++)
        if (!s_scope_body_ok(b->u.seq.items[i]))
            return false;
    return true;
}

static bool s_scalar_ok(const troupe_sc_t *v)
{
    switch (v->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        return s_scope_body_ok(v->u.local_scope.body);
    case TROUPE_SC_GET_LOCAL:
        return true; /* inside its scope's body */
    case TROUPE_SC_TERNOP:
        return s_scalar_ok(v->u.op.args[0]) && s_scalar_ok(v->u.op.args[1]) &&
               s_scalar_ok(v->u.op.args[2]);
    case TROUPE_SC_BINOP:
        return s_scalar_ok(v->u.op.args[0]) && s_scalar_ok(v->u.op.args[1]);
    case TROUPE_SC_UNOP:
        return s_scalar_ok(v->u.op.args[0]);
    default:
        return true;
    }
}

static bool s_body_ok(const troupe_ll_t *b)
{
    if (b->kind == TROUPE_LL_SET)
        return s_scalar_ok(b->u.set.value);
    if (b->kind != TROUPE_LL_SEQ || b->u.seq.count == 0)
        return false;
    for (size_t i = 0; i < b->u.seq.count; i++)
        if (b->u.seq.items[i]->kind != TROUPE_LL_SET || !s_scalar_ok(b->u.seq.items[i]->u.set.value))
            return false;
    return true;
}

static bool s_nest_of(const troupe_ll_t *s, s_nest_t *n)
{
    n->depth = 0;
    while (s->kind == TROUPE_LL_FOR) {
        if (n->depth == S_MAX_DEPTH)
            return false;
        n->loops[n->depth++] = s;
        s = s->u.for_loop.body;
    }
    n->body = s;
    return n->depth > 0 && s_body_ok(s);
}

static int s_level(const s_nest_t *n, int32_t sym)
{
    for (int l = 0; l < n->depth; l++)
        if (n->loops[l]->u.for_loop.sym == sym)
            return l;
    return -1;
}

/* Each axis a fixed index (no iterator of the nest) or exactly one iterator of the nest with
 * coefficient 1, and every iterator used once: the write visits each element at most once. */
static bool s_injective(const s_nest_t *n, const troupe_tnode_t *tn, const troupe_axis_index_t *idcs)
{
    bool seen[S_MAX_DEPTH] = {false};
    for (int ax = 0; ax < tn->ndims; ax++) {
        const troupe_axis_index_t *x = &idcs[ax];
        int nest_terms = 0;
        for (int t = 0; t < x->nterms; t++)
            if (s_level(n, x->terms[t].sym) >= 0)
                nest_terms++;
        if (nest_terms == 0)
            continue;
        if (x->nterms != 1 || x->terms[0].coeff != 1)
            return false;
        int l = s_level(n, x->terms[0].sym);
        if (seen[l])
            return false;
        seen[l] = true;
    }
    for (int l = 0; l < n->depth; l++)
        if (!seen[l])
            return false;
    return true;
}

static void s_add(s_accesses_t *a, const s_rename_t *r, const troupe_tnode_t *tn,
                  const troupe_axis_index_t *idcs, bool write)
{
    s_access_t x;
    x.tn = tn;
    x.write = write;
    s_ren_idcs(r, tn, idcs, x.idcs);
    if (!TROUPE__VEC_PUSH(a->items, a->count, a->cap, x))
        a->oom = true;
}

/* What a walk of a value does with a local scope's body (ctx: the walk's own state); false
 * when the body holds a form the walk does not know. */
typedef bool (*s_scope_fn)(void *ctx, s_accesses_t *a, const s_rename_t *r,
                           const troupe_ll_t *body);

/* The reads of value v, renamed by r, into a (the last argument first); a local scope's body
 * goes to scope. False when scope said false. */
static bool s_value_reads(s_accesses_t *a, const s_rename_t *r, const troupe_sc_t *v,
                          s_scope_fn scope, void *ctx)
{
    bool ok = true;
    switch (v->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        ok = scope(ctx, a, r, v->u.local_scope.body);
        break;
    case TROUPE_SC_GET:
    case TROUPE_SC_GET_MERGE_BUFFER:
        s_add(a, r, v->u.get.tn, v->u.get.idcs, false);
        break;
    case TROUPE_SC_TERNOP:
        ok = s_value_reads(a, r, v->u.op.args[2], scope, ctx) && ok;
        /* fall through */
    case TROUPE_SC_BINOP:
        ok = s_value_reads(a, r, v->u.op.args[1], scope, ctx) && ok;
        /* fall through */
    case TROUPE_SC_UNOP:
        ok = s_value_reads(a, r, v->u.op.args[0], scope, ctx) && ok;
        break;
    default:
        break;
    }
    return ok;
}

/* The reads of a local scope's body (SET_LOCALs only: s_scope_body_ok). */
static bool s_scope_reads(void *ctx, s_accesses_t *a, const s_rename_t *r, const troupe_ll_t *b)
{
    if (b->kind == TROUPE_LL_SET_LOCAL)
        return s_value_reads(a, r, b->u.set_local.value, s_scope_reads, ctx);
    for (size_t i = 0; i < b->u.seq.count; i++)
        s_scope_reads(ctx, a, r, b->u.seq.items[i]);
    return true;
}

static void s_reads(s_accesses_t *a, const s_rename_t *r, const troupe_sc_t *v)
{
    (void)s_value_reads(a, r, v, s_scope_reads, NULL);
}

/* The accesses of a nest body (SETs only: s_body_ok), renamed by r. */
static void s_collect(s_accesses_t *a, const s_rename_t *r, const troupe_ll_t *b)
{
    size_t n = b->kind == TROUPE_LL_SEQ ? b->u.seq.count : 1;
    for (size_t i = 0; i < n; i++) {
        const troupe_ll_t *set = b->kind == TROUPE_LL_SEQ ? b->u.seq.items[i] : b;
        s_reads(a, r, set->u.set.value);
        s_add(a, r, set->u.set.tn, set->u.set.idcs, true);
    }
}

/* ---- B's statements with A's iterators ---------------------------------------------------- */

static troupe_sc_t *s_ren_sc(troupe_ll_proc_t *p, const s_rename_t *r, const troupe_sc_t *v);
static troupe_ll_t *s_ren_set(troupe_ll_proc_t *p, const s_rename_t *r, const troupe_ll_t *set);

/* A statement (loops, sequences, SETs, SET_LOCALs, comments: s_tree_ok) with A's iterators. */
static troupe_ll_t *s_ren_ll(troupe_ll_proc_t *p, const s_rename_t *r, const troupe_ll_t *b)
{
    switch (b->kind) {
    case TROUPE_LL_SET_LOCAL: {
        troupe_sc_t *v = s_ren_sc(p, r, b->u.set_local.value);
        return v ? troupe_ll_set_local(p, b->u.set_local.id, v) : NULL;
    }
    case TROUPE_LL_SET:
        return s_ren_set(p, r, b);
    case TROUPE_LL_FOR: {
        troupe_ll_t *body = s_ren_ll(p, r, b->u.for_loop.body);
        return body ? troupe_ll_for(p, b->u.for_loop.sym, b->u.for_loop.from, b->u.for_loop.to,
                                    body, b->u.for_loop.trace_it)
                    : NULL;
    }
    case TROUPE_LL_SEQ:
        break;
    default:
        return (troupe_ll_t *)b; /* comments and no-ops hold no index */
    }
    size_t n = b->u.seq.count;
    troupe_ll_t **items = troupe_calloc(n ? n : 1, sizeof *items);
    if (items == NULL)
        return NULL;
    troupe_ll_t *out = NULL;
    size_t i = 0;
    for (; i < n; i++)
        if ((items[i] = s_ren_ll(p, r, b->u.seq.items[i])) == NULL)
            break;
    if (i == n)
        out = troupe_ll_seq(p, n, items);
    troupe_free(items);
    return out;
}

static troupe_sc_t *s_ren_sc(troupe_ll_proc_t *p, const s_rename_t *r, const troupe_sc_t *v)
{
    troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
    switch (v->kind) {
    case TROUPE_SC_LOCAL_SCOPE: {
        const troupe_tnode_t *tn = v->u.local_scope.tn;
        troupe_ll_t *body = s_ren_ll(p, r, v->u.local_scope.body);
        s_ren_idcs(r, tn, v->u.local_scope.orig_indices, idcs);
        return body ? troupe_sc_local_scope(p, v->u.local_scope.id, v->u.local_scope.tn, body,
                                            idcs)
                    : NULL;
    }
    case TROUPE_SC_GET_LOCAL:
        return troupe_sc_get_local(p, v->u.get_local.id);
    case TROUPE_SC_GET:
    case TROUPE_SC_GET_MERGE_BUFFER:
        s_ren_idcs(r, v->u.get.tn, v->u.get.idcs, idcs);
        return v->kind == TROUPE_SC_GET ? troupe_sc_get(p, v->u.get.tn, idcs)
                                        : troupe_sc_get_merge_buffer(p, v->u.get.tn, idcs);
    case TROUPE_SC_TERNOP: {
        troupe_sc_t *a = s_ren_sc(p, r, v->u.op.args[0]), *b = s_ren_sc(p, r, v->u.op.args[1]),
                    *c = s_ren_sc(p, r, v->u.op.args[2]);
        return a && b && c ? troupe_sc_ternop(p, (troupe_ternop_t)v->u.op.op, a, b, c) : NULL;
    }
    case TROUPE_SC_BINOP: {
        troupe_sc_t *a = s_ren_sc(p, r, v->u.op.args[0]), *b = s_ren_sc(p, r, v->u.op.args[1]);
        return a && b ? troupe_sc_binop(p, (troupe_binop_t)v->u.op.op, a, b) : NULL;
    }
    case TROUPE_SC_UNOP: {
        troupe_sc_t *a = s_ren_sc(p, r, v->u.op.args[0]);
        return a ? troupe_sc_unop(p, (troupe_unop_t)v->u.op.op, a) : NULL;
    }
    case TROUPE_SC_EMBED_INDEX:
        return troupe_sc_embed_index(p, s_ren_axis(r, v->u.embed_index));
    case TROUPE_SC_CONSTANT:
        return troupe_sc_constant(p, v->u.constant);
    case TROUPE_SC_CONSTANT_BITS:
        return troupe_sc_constant_bits(p, v->u.constant_bits);
    default:
        return NULL; /* other forms were excluded by s_body_ok */
    }
}

static troupe_ll_t *s_ren_set(troupe_ll_proc_t *p, const s_rename_t *r, const troupe_ll_t *set)
{
    troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
    s_ren_idcs(r, set->u.set.tn, set->u.set.idcs, idcs);
    troupe_sc_t *v = s_ren_sc(p, r, set->u.set.value);
    return v ? troupe_ll_set(p, set->u.set.tn, idcs, v) : NULL;
}

/* ---- the fusion test and the fused nest --------------------------------------------------- */

static bool s_same_space(const s_nest_t *a, const s_nest_t *b)
{
    if (a->depth != b->depth)
        return false;
    for (int l = 0; l < a->depth; l++)
        if (a->loops[l]->u.for_loop.from != b->loops[l]->u.for_loop.from ||
            a->loops[l]->u.for_loop.to != b->loops[l]->u.for_loop.to)
            return false;
    return true;
}

/* Every access in `other` of a node `writer` writes is at the element `writer` writes. */
static bool s_respects(const s_accesses_t *writer, const s_accesses_t *other)
{
    for (size_t i = 0; i < writer->count; i++) {
        const s_access_t *w = &writer->items[i];
        if (!w->write)
            continue;
        for (size_t j = 0; j < writer->count; j++) /* one element per node in the writer */
            if (writer->items[j].write && writer->items[j].tn == w->tn &&
                !troupe_axis_indices_equal(writer->items[j].idcs, w->idcs, w->tn->ndims))
                return false;
        for (size_t j = 0; j < other->count; j++)
            if (other->items[j].tn == w->tn && !troupe_axis_indices_equal(other->items[j].idcs, w->idcs, w->tn->ndims))
                return false;
    }
    return true;
}

static bool s_writes_injective(const s_nest_t *n, const s_accesses_t *a)
{
    for (size_t i = 0; i < a->count; i++)
        if (a->items[i].write && !s_injective(n, a->items[i].tn, a->items[i].idcs))
            return false;
    return true;
}

/* A then B as one nest, or NULL when they may not be fused (or out of memory: f->oom). The test
 * runs on copies of the indices; B's statements are rebuilt with A's iterators only when fusing. */
static troupe_ll_t *s_try_fuse(s_fuser_t *f, const troupe_ll_t *a_stmt, const troupe_ll_t *b_stmt)
{
    s_nest_t a, b;
    if (!s_nest_of(a_stmt, &a) || !s_nest_of(b_stmt, &b) || !s_same_space(&a, &b))
        return NULL;
    s_rename_t none = {{0}, {0}, 0}, r;
    r.n = b.depth;
    for (int l = 0; l < b.depth; l++) {
        r.from[l] = b.loops[l]->u.for_loop.sym;
        r.to[l] = a.loops[l]->u.for_loop.sym;
    }
    troupe_ll_t *out = NULL, **sets = NULL;
    s_accesses_t aa = {0}, ba = {0};
    s_collect(&aa, &none, a.body);
    s_collect(&ba, &r, b.body);
    if (aa.oom || ba.oom) {
        f->oom = true;
        goto free_accesses;
    }
    if (!s_writes_injective(&a, &aa) || !s_writes_injective(&a, &ba) || !s_respects(&aa, &ba) ||
        !s_respects(&ba, &aa))
        goto free_accesses;
    troupe_ll_proc_t *p = f->proc;
    size_t nb = b.body->kind == TROUPE_LL_SEQ ? b.body->u.seq.count : 1;
    sets = troupe_calloc(nb, sizeof *sets);
    if (sets == NULL) {
        f->oom = true;
        goto free_accesses;
    }
    for (size_t i = 0; i < nb; i++) {
        sets[i] = s_ren_set(p, &r, b.body->kind == TROUPE_LL_SEQ ? b.body->u.seq.items[i] : b.body);
        if (sets[i] == NULL) {
            f->oom = true;
            goto free_accesses;
        }
    }
    troupe_ll_t *b_body = troupe_ll_seq(p, nb, sets);
    out = b_body ? troupe_ll_seq2(p, (troupe_ll_t *)a.body, b_body) : NULL;
    for (int l = a.depth - 1; l >= 0 && out != NULL; l--) {
        const troupe_ll_t *lp = a.loops[l];
        out = troupe_ll_for(p, lp->u.for_loop.sym, lp->u.for_loop.from, lp->u.for_loop.to, out,
                            lp->u.for_loop.trace_it || b.loops[l]->u.for_loop.trace_it);
    }
    if (out == NULL)
        f->oom = true;
    else
        f->fused++;
free_accesses:
    troupe_free(aa.items);
    troupe_free(ba.items);
    troupe_free(sets);
    return out;
}

/* ---- prefix fusion ------------------------------------------------------------------------- */

/* The accesses of a statement tree below a nest's shared outer loops, renamed by r, and whether
 * the tree holds only forms the test reads (loops, sequences, SETs, comments; loops and
 * SET_LOCALs inside local scopes) and no product summed over a loop (a contraction that
 * compiler/gemm may take: it stays whole). */
typedef struct s_tree {
    s_accesses_t acc;
    const s_rename_t *r;
    int32_t loops[2 * S_MAX_DEPTH];
    int nloops;
    bool ok;
} s_tree_t;

static void s_tree_ll(s_tree_t *t, const troupe_ll_t *s);

static bool s_has_product(const troupe_sc_t *v)
{
    switch (v->kind) {
    case TROUPE_SC_TERNOP:
        return v->u.op.op == TROUPE_TERNOP_FMA || s_has_product(v->u.op.args[0]) ||
               s_has_product(v->u.op.args[1]) || s_has_product(v->u.op.args[2]);
    case TROUPE_SC_BINOP:
        return v->u.op.op == TROUPE_BINOP_MUL || s_has_product(v->u.op.args[0]) ||
               s_has_product(v->u.op.args[1]);
    case TROUPE_SC_UNOP:
        return s_has_product(v->u.op.args[0]);
    default:
        return false;
    }
}

/* A local scope's body as more of the tree (t->ok says whether it holds only known forms). */
static bool s_tree_scope(void *ctx, s_accesses_t *a, const s_rename_t *r, const troupe_ll_t *body)
{
    (void)a;
    (void)r;
    s_tree_ll(ctx, body);
    return true;
}

static void s_tree_sc(s_tree_t *t, const troupe_sc_t *v)
{
    (void)s_value_reads(&t->acc, t->r, v, s_tree_scope, t);
}

static void s_tree_ll(s_tree_t *t, const troupe_ll_t *s)
{
    if (!t->ok)
        return;
    switch (s->kind) {
    case TROUPE_LL_NOOP:
    case TROUPE_LL_COMMENT:
        break;
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            s_tree_ll(t, s->u.seq.items[i]);
        break;
    case TROUPE_LL_FOR:
        if (t->nloops == 2 * S_MAX_DEPTH) {
            t->ok = false;
            break;
        }
        t->loops[t->nloops++] = s->u.for_loop.sym;
        s_tree_ll(t, s->u.for_loop.body);
        t->nloops--;
        break;
    case TROUPE_LL_SET_LOCAL:
        s_tree_sc(t, s->u.set_local.value);
        break;
    case TROUPE_LL_SET: {
        bool reduction = false;
        for (int l = 0; l < t->nloops; l++)
            reduction = reduction ||
                        !troupe_axis_indices_use(s->u.set.idcs, s->u.set.tn->ndims, t->loops[l]);
        if (reduction && s_has_product(s->u.set.value)) {
            t->ok = false;
            break;
        }
        s_tree_sc(t, s->u.set.value);
        s_add(&t->acc, t->r, s->u.set.tn, s->u.set.idcs, true);
        break;
    }
    default:
        t->ok = false; /* zeroings, vector SETs, gathers: not analysed */
        break;
    }
}

/* The FOR chain opening s (at most S_MAX_DEPTH loops). */
static int s_chain(const troupe_ll_t *s, const troupe_ll_t **loops)
{
    int n = 0;
    while (s->kind == TROUPE_LL_FOR && n < S_MAX_DEPTH) {
        loops[n++] = s;
        s = s->u.for_loop.body;
    }
    return n;
}

static bool s_outer(const int32_t *x, int d, int32_t sym)
{
    for (int l = 0; l < d; l++)
        if (x[l] == sym)
            return true;
    return false;
}

/* Whether every access to tn in the lists sits at the element(s) one outer iteration owns: each
 * axis either only outer iterators (then a single one, coefficient 1, the same index in every
 * access, each of the d outer iterators on one such axis) or none. Two accesses to one element
 * then happen in the same outer iteration. */
static bool s_owned(const s_accesses_t *const *lists, int nlists, const troupe_tnode_t *tn,
                    const int32_t *x, int d)
{
    const s_access_t *ref = NULL;
    bool used[S_MAX_DEPTH] = {false};
    for (int li = 0; li < nlists; li++)
        for (size_t j = 0; j < lists[li]->count; j++) {
            const s_access_t *a = &lists[li]->items[j];
            if (a->tn != tn)
                continue;
            for (int ax = 0; ax < tn->ndims; ax++) {
                const troupe_axis_index_t *ix = &a->idcs[ax];
                int outer = 0;
                for (int k = 0; k < ix->nterms; k++)
                    outer += s_outer(x, d, ix->terms[k].sym);
                if (outer > 0 && outer != ix->nterms)
                    return false;
                if (ref == NULL) {
                    if (outer == 0)
                        continue;
                    if (ix->nterms != 1 || ix->terms[0].coeff != 1)
                        return false;
                    for (int l = 0; l < d; l++)
                        if (x[l] == ix->terms[0].sym) {
                            if (used[l])
                                return false;
                            used[l] = true;
                        }
                } else {
                    bool ref_outer = false;
                    for (int k = 0; k < ref->idcs[ax].nterms; k++)
                        ref_outer = ref_outer || s_outer(x, d, ref->idcs[ax].terms[k].sym);
                    if (ref_outer != (outer > 0) ||
                        (outer > 0 && !troupe_axis_indices_equal(ix, &ref->idcs[ax], 1)))
                        return false;
                }
            }
            if (ref == NULL) {
                for (int l = 0; l < d; l++)
                    if (!used[l])
                        return false;
                ref = a;
            }
        }
    return true;
}

static bool s_accesses(const s_accesses_t *a, const troupe_tnode_t *tn, bool write_only)
{
    for (size_t j = 0; j < a->count; j++)
        if (a->items[j].tn == tn && (a->items[j].write || !write_only))
            return true;
    return false;
}

/* Whether A and B, their first d loops shared, may run as one nest of d loops around A's body
 * then B's: every node one writes and the other accesses is owned by the outer iterations
 * (s_owned); *related when there is such a node. */
static bool s_prefix_legal(const s_accesses_t *aa, const s_accesses_t *ba, const int32_t *x, int d,
                           bool *related)
{
    const s_accesses_t *both[2] = {aa, ba};
    *related = false;
    for (int side = 0; side < 2; side++) {
        const s_accesses_t *w = both[side], *o = both[1 - side];
        for (size_t j = 0; j < w->count; j++) {
            const troupe_tnode_t *tn = w->items[j].tn;
            if (!w->items[j].write || !s_accesses(o, tn, false))
                continue;
            *related = true;
            if (!s_owned(both, 2, tn, x, d))
                return false;
        }
    }
    return true;
}

/* Whether loop s is one SET summing over it (its indices do not use the loop), which
 * compiler/cgen may run as a lane sum: another order of additions than the same SET beside
 * other statements. */
static bool s_sum_loop(const troupe_ll_t *s)
{
    const troupe_ll_t *b = s->u.for_loop.body;
    return b->kind == TROUPE_LL_SET &&
           !troupe_axis_indices_use(b->u.set.idcs, b->u.set.tn->ndims, s->u.for_loop.sym);
}

/* A then B as one nest over their longest legal shared prefix of loops (troupe's: a producer
 * and its consumer that run over one outer space but differ below it, e.g. a max pool's
 * gradient pieces, or a pass over a plane after one over its windows), or NULL. Only nests
 * that share data are fused, and never around a summed product. */
static troupe_ll_t *s_try_prefix(s_fuser_t *f, const troupe_ll_t *a_stmt, const troupe_ll_t *b_stmt)
{
    const troupe_ll_t *al[S_MAX_DEPTH], *bl[S_MAX_DEPTH];
    int an = s_chain(a_stmt, al), bn = s_chain(b_stmt, bl), d = 0;
    while (d < an && d < bn && al[d]->u.for_loop.from == bl[d]->u.for_loop.from &&
           al[d]->u.for_loop.to == bl[d]->u.for_loop.to)
        d++;
    troupe_ll_t *out = NULL;
    for (; d > 0 && out == NULL && !f->oom; d--) {
        if (s_sum_loop(al[d - 1]) || s_sum_loop(bl[d - 1]))
            continue; /* its body would no longer be the one SET of a lane sum */
        s_rename_t none = {{0}, {0}, 0}, r;
        int32_t x[S_MAX_DEPTH];
        r.n = d;
        for (int l = 0; l < d; l++) {
            r.from[l] = bl[l]->u.for_loop.sym;
            r.to[l] = x[l] = al[l]->u.for_loop.sym;
        }
        s_tree_t ta = {{NULL, 0, 0, false}, &none, {0}, 0, true};
        s_tree_t tb = {{NULL, 0, 0, false}, &r, {0}, 0, true};
        for (int l = 0; l < d; l++) {
            ta.loops[ta.nloops++] = x[l];
            tb.loops[tb.nloops++] = r.from[l]; /* B's own, as its SETs name them */
        }
        const troupe_ll_t *abody = al[d - 1]->u.for_loop.body, *bbody = bl[d - 1]->u.for_loop.body;
        s_tree_ll(&ta, abody);
        s_tree_ll(&tb, bbody);
        bool related = false;
        if (ta.acc.oom || tb.acc.oom) {
            f->oom = true;
        } else if (ta.ok && tb.ok && s_prefix_legal(&ta.acc, &tb.acc, x, d, &related) && related) {
            troupe_ll_proc_t *p = f->proc;
            troupe_ll_t *rb = s_ren_ll(p, &r, bbody);
            out = rb ? troupe_ll_seq2(p, (troupe_ll_t *)abody, rb) : NULL;
            for (int l = d - 1; l >= 0 && out != NULL; l--)
                out = troupe_ll_for(p, x[l], al[l]->u.for_loop.from, al[l]->u.for_loop.to, out,
                                    al[l]->u.for_loop.trace_it || bl[l]->u.for_loop.trace_it);
            if (out == NULL)
                f->oom = true;
            else
                f->fused++;
        }
        troupe_free(ta.acc.items);
        troupe_free(tb.acc.items);
    }
    return out;
}

/* ZERO_OUT of n followed by a nest whose outer loops each own one slice of n (s_owned over the
 * nest's accesses, the outer axes' loops spanning n's axes from 0): the nest zeroes its slice
 * at the start of each outer iteration instead (the slices partition n, and no other
 * iteration touches it), or NULL. Not around a summed product: a zeroing before a loop of
 * library calls is compiler/cgen's to drop. */
static troupe_ll_t *s_try_sink_zero(s_fuser_t *f, const troupe_ll_t *zero, const troupe_ll_t *nest)
{
    troupe_tnode_t *tn = zero->u.zero_out;
    const troupe_ll_t *loops[S_MAX_DEPTH];
    int n = s_chain(nest, loops);
    troupe_ll_t *out = NULL;
    for (int d = n; d > 0 && out == NULL && !f->oom; d--) {
        s_rename_t none = {{0}, {0}, 0};
        s_tree_t t = {{NULL, 0, 0, false}, &none, {0}, 0, true};
        int32_t x[S_MAX_DEPTH];
        for (int l = 0; l < d; l++)
            t.loops[t.nloops++] = x[l] = loops[l]->u.for_loop.sym;
        const troupe_ll_t *body = loops[d - 1]->u.for_loop.body;
        s_tree_ll(&t, body);
        const s_accesses_t *lists[1] = {&t.acc};
        const s_access_t *ref = NULL;
        for (size_t j = 0; j < t.acc.count && ref == NULL; j++)
            if (t.acc.items[j].tn == tn)
                ref = &t.acc.items[j];
        bool ok = !t.acc.oom && t.ok && ref != NULL && s_owned(lists, 1, tn, x, d);
        /* the outer axes' loops span the axes exactly, so the slices cover n */
        for (int ax = 0; ok && ax < tn->ndims; ax++) {
            const troupe_axis_index_t *ix = &ref->idcs[ax];
            if (ix->nterms == 1 && s_outer(x, d, ix->terms[0].sym))
                for (int l = 0; l < d; l++)
                    if (x[l] == ix->terms[0].sym)
                        ok = ix->offset == 0 && loops[l]->u.for_loop.from == 0 &&
                             loops[l]->u.for_loop.to == tn->dims[ax] - 1;
        }
        if (t.acc.oom)
            f->oom = true;
        if (ok) {
            troupe_ll_proc_t *p = f->proc;
            troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
            int32_t free_sym[TROUPE_MAX_DIMS];
            int free_ax[TROUPE_MAX_DIMS], nfree = 0;
            for (int ax = 0; ax < tn->ndims; ax++) {
                const troupe_axis_index_t *ix = &ref->idcs[ax];
                if (ix->nterms == 1 && s_outer(x, d, ix->terms[0].sym)) {
                    idcs[ax] = *ix;
                } else {
                    free_ax[nfree] = ax;
                    free_sym[nfree] = troupe_ll_proc_add_symbol(p, NULL);
                    idcs[ax] = troupe_idx_sym(free_sym[nfree]);
                    nfree++;
                }
            }
            troupe_ll_t *z = troupe_ll_set(p, tn, idcs, troupe_sc_constant(p, 0.0));
            for (int k = nfree - 1; k >= 0 && z != NULL; k--)
                z = free_sym[k] < 0
                        ? NULL
                        : troupe_ll_for(p, free_sym[k], 0, tn->dims[free_ax[k]] - 1, z, false);
            out = z ? troupe_ll_seq2(p, z, (troupe_ll_t *)body) : NULL;
            for (int l = d - 1; l >= 0 && out != NULL; l--)
                out = troupe_ll_for(p, x[l], loops[l]->u.for_loop.from, loops[l]->u.for_loop.to,
                                    out, loops[l]->u.for_loop.trace_it);
            if (out == NULL)
                f->oom = true;
            else
                f->fused++;
        }
        troupe_free(t.acc.items);
    }
    return out;
}

/* ---- interchange and fusion past independent statements ------------------------------------ */

/* The nodes a statement reads and writes, any form (a zeroing writes its node, a gather reads
 * its index node); false for a form it does not know. */
static bool s_nodes_ll(s_accesses_t *a, const troupe_ll_t *s);

static bool s_nodes_scope(void *ctx, s_accesses_t *a, const s_rename_t *r, const troupe_ll_t *body)
{
    (void)ctx;
    (void)r;
    return s_nodes_ll(a, body);
}

static void s_nodes_sc(s_accesses_t *a, const troupe_sc_t *v, bool *ok)
{
    static const s_rename_t none = {{0}, {0}, 0};
    *ok = s_value_reads(a, &none, v, s_nodes_scope, NULL) && *ok;
}

static bool s_nodes_ll(s_accesses_t *a, const troupe_ll_t *s)
{
    static const s_rename_t none = {{0}, {0}, 0};
    troupe_axis_index_t fixed[TROUPE_MAX_DIMS];
    for (int ax = 0; ax < TROUPE_MAX_DIMS; ax++)
        fixed[ax] = troupe_idx_fixed(0);
    bool ok = true;
    switch (s->kind) {
    case TROUPE_LL_NOOP:
    case TROUPE_LL_COMMENT:
        break;
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count && ok; i++)
            ok = s_nodes_ll(a, s->u.seq.items[i]);
        break;
    case TROUPE_LL_FOR:
        ok = s_nodes_ll(a, s->u.for_loop.body);
        break;
    case TROUPE_LL_ZERO_OUT:
        s_add(a, &none, s->u.zero_out, fixed, true);
        break;
    case TROUPE_LL_SET:
        s_nodes_sc(a, s->u.set.value, &ok);
        s_add(a, &none, s->u.set.tn, s->u.set.idcs, true);
        break;
    case TROUPE_LL_SET_FROM_VEC:
        s_nodes_sc(a, s->u.set_from_vec.arg, &ok);
        s_add(a, &none, s->u.set_from_vec.tn, s->u.set_from_vec.idcs, true);
        break;
    case TROUPE_LL_SET_LOCAL:
        s_nodes_sc(a, s->u.set_local.value, &ok);
        break;
    case TROUPE_LL_BIND_INDEX:
        s_add(a, &none, s->u.bind_index.tn, s->u.bind_index.idcs, false);
        ok = s_nodes_ll(a, s->u.bind_index.body);
        break;
    default:
        ok = false;
        break;
    }
    return ok;
}

/* Whether two statements' node sets leave their order free: no node one writes that the other
 * accesses. */
static bool s_independent(const s_accesses_t *x, const s_accesses_t *y)
{
    for (size_t i = 0; i < x->count; i++)
        if (s_accesses(y, x->items[i].tn, !x->items[i].write))
            return false;
    return true;
}

/* `nest` with its first two loops swapped, or NULL when that may reorder two iterations that
 * touch one element: every node it writes must be accessed at the same index on the axes that
 * use the two loops' iterators (one of them each, coefficient 1), and use at least one. Then two
 * iterations touching one element share one of the two iterators and keep their order. For a
 * sum over the batch into a per-channel gradient, (channel, batch) becomes (batch, channel):
 * each channel still adds the batch in order. */
static troupe_ll_t *s_try_interchange(s_fuser_t *f, const troupe_ll_t *nest)
{
    /* a loop below the two: the innermost loop, whose sums compiler/cgen may split into
     * lanes (another order of additions), stays the innermost */
    if (nest->kind != TROUPE_LL_FOR || nest->u.for_loop.body->kind != TROUPE_LL_FOR ||
        nest->u.for_loop.body->u.for_loop.body->kind != TROUPE_LL_FOR)
        return NULL;
    const troupe_ll_t *l0 = nest, *l1 = nest->u.for_loop.body;
    int32_t x[2] = {l0->u.for_loop.sym, l1->u.for_loop.sym};
    static const s_rename_t none = {{0}, {0}, 0};
    s_tree_t t = {{NULL, 0, 0, false}, &none, {0}, 0, true};
    t.loops[t.nloops++] = x[0];
    t.loops[t.nloops++] = x[1];
    s_tree_ll(&t, l1->u.for_loop.body);
    bool ok = t.ok && !t.acc.oom;
    for (size_t j = 0; ok && j < t.acc.count; j++) {
        const s_access_t *w = &t.acc.items[j];
        if (!w->write)
            continue;
        bool uses = false;
        for (size_t i = 0; ok && i < t.acc.count; i++) {
            const s_access_t *a = &t.acc.items[i];
            if (a->tn != w->tn)
                continue;
            for (int ax = 0; ok && ax < w->tn->ndims; ax++) {
                bool ao = false, wo = false;
                for (int k = 0; k < a->idcs[ax].nterms; k++)
                    ao = ao || s_outer(x, 2, a->idcs[ax].terms[k].sym);
                for (int k = 0; k < w->idcs[ax].nterms; k++)
                    wo = wo || s_outer(x, 2, w->idcs[ax].terms[k].sym);
                if (wo)
                    ok = w->idcs[ax].nterms == 1 && w->idcs[ax].terms[0].coeff == 1 &&
                         troupe_axis_indices_equal(&a->idcs[ax], &w->idcs[ax], 1);
                else
                    ok = !ao;
                uses = uses || wo;
            }
        }
        ok = ok && uses;
    }
    if (t.acc.oom)
        f->oom = true;
    troupe_free(t.acc.items);
    if (!ok)
        return NULL;
    troupe_ll_t *in = troupe_ll_for(f->proc, x[0], l0->u.for_loop.from, l0->u.for_loop.to,
                                    l1->u.for_loop.body, l0->u.for_loop.trace_it);
    troupe_ll_t *out = in ? troupe_ll_for(f->proc, x[1], l1->u.for_loop.from, l1->u.for_loop.to, in,
                                          l1->u.for_loop.trace_it)
                          : NULL;
    if (out == NULL)
        f->oom = true;
    return out;
}

#define S_LOOKBACK 8

/* Fuses nest `it`, appended after items[0..*k-1], into an earlier nest past statements it is
 * independent of (at most S_LOOKBACK of them), its first two loops swapped if that lets it
 * fuse over a shared prefix. A zeroing of a node `it` accesses right before it moves up with it
 * (it stays before the fused nest). Returns whether it fused (items and *k updated). */
static bool s_fuse_back(s_fuser_t *f, troupe_ll_t **items, size_t *k, troupe_ll_t *it)
{
    if (!f->outer || it->kind != TROUPE_LL_FOR || *k == 0)
        return false;
    s_accesses_t mine = {0}, other = {0};
    bool fused = false;
    if (!s_nodes_ll(&mine, it))
        goto done;
    size_t start = *k;
    troupe_ll_t *carried = NULL;
    if (items[start - 1]->kind == TROUPE_LL_ZERO_OUT &&
        s_accesses(&mine, items[start - 1]->u.zero_out, false)) {
        carried = items[--start];
        if (!s_nodes_ll(&mine, carried))
            goto done;
    }
    troupe_ll_t *swapped = NULL;
    bool swap_tried = false;
    int passed = 0;
    for (size_t j = start; j > 0 && passed <= S_LOOKBACK && !f->oom; j--) {
        troupe_ll_t *prev = items[j - 1];
        if (prev->kind == TROUPE_LL_COMMENT || prev->kind == TROUPE_LL_NOOP)
            continue;
        other.count = 0;
        if (!s_nodes_ll(&other, prev) || other.oom)
            break;
        if (carried != NULL && s_accesses(&other, carried->u.zero_out, false))
            break; /* the zeroing may not move before prev */
        troupe_ll_t *both = NULL;
        if (j < start || carried != NULL) {
            both = s_try_fuse(f, prev, it);
            if (both == NULL && !f->oom)
                both = s_try_prefix(f, prev, it);
        }
        if (both == NULL && !f->oom) {
            if (!swap_tried) {
                swap_tried = true;
                swapped = s_try_interchange(f, it);
            }
            if (swapped != NULL)
                both = s_try_prefix(f, prev, swapped);
        }
        troupe_ll_t *sunk =
            both != NULL && carried != NULL && !f->oom ? s_try_sink_zero(f, carried, both) : NULL;
        if (sunk != NULL) { /* the zeroing, last of the items, goes */
            items[j - 1] = sunk;
            (*k)--;
            fused = true;
            goto done;
        }
        if (both != NULL) {
            if (carried != NULL) { /* prev's slot: the zeroing, then the fused nest */
                memmove(&items[j], &items[j - 1], (start - (j - 1)) * sizeof *items);
                items[j - 1] = carried;
                items[j] = both;
            } else {
                items[j - 1] = both;
            }
            fused = true;
            goto done;
        }
        if (!s_independent(&mine, &other) || !s_independent(&other, &mine))
            break;
        passed++;
    }
done:
    if (mine.oom || other.oom)
        f->oom = true;
    troupe_free(mine.items);
    troupe_free(other.items);
    return fused && !f->oom;
}

/* ---- the walk ------------------------------------------------------------------------------ */

static troupe_ll_t *s_fuse_ll(s_fuser_t *f, troupe_ll_t *s);

static troupe_ll_t *s_fuse_seq(s_fuser_t *f, troupe_ll_t *s)
{
    size_t n = s->u.seq.count;
    troupe_ll_t **items = troupe_calloc(n, sizeof *items);
    if (items == NULL) {
        f->oom = true;
        return s;
    }
    size_t k = 0;
    bool changed = false;
    for (size_t i = 0; i < n; i++) {
        troupe_ll_t *it = s_fuse_ll(f, s->u.seq.items[i]);
        changed |= it != s->u.seq.items[i];
        if (s_fuse_back(f, items, &k, it)) {
            changed = true;
            continue;
        }
        troupe_ll_t *sunk = f->outer && k > 0 && items[k - 1]->kind == TROUPE_LL_ZERO_OUT &&
                                    it->kind == TROUPE_LL_FOR
                                ? s_try_sink_zero(f, items[k - 1], it)
                                : NULL;
        if (sunk != NULL) {
            it = sunk;
            k--;
            changed = true;
        }
        /* the previous statement, past comments (they then follow the fused nest) */
        size_t j = k;
        while (j > 0 &&
               (items[j - 1]->kind == TROUPE_LL_COMMENT || items[j - 1]->kind == TROUPE_LL_NOOP))
            j--;
        troupe_ll_t *both = j > 0 ? s_try_fuse(f, items[j - 1], it) : NULL;
        if (both == NULL && f->outer && j > 0 && !f->oom)
            both = s_try_prefix(f, items[j - 1], it);
        if (both != NULL) {
            items[j - 1] = both;
            changed = true;
        } else {
            items[k++] = it;
        }
    }
    troupe_ll_t *out = changed && !f->oom ? troupe_ll_seq(f->proc, k, items) : s;
    if (out == NULL) {
        f->oom = true;
        out = s;
    }
    troupe_free(items);
    return out;
}

static troupe_ll_t *s_fuse_ll(s_fuser_t *f, troupe_ll_t *s)
{
    if (f->oom)
        return s;
    if (s->kind == TROUPE_LL_SEQ)
        return s_fuse_seq(f, s);
    if (s->kind == TROUPE_LL_FOR) {
        troupe_ll_t *b = s_fuse_ll(f, s->u.for_loop.body);
        if (b == s->u.for_loop.body)
            return s;
        troupe_ll_t *out = troupe_ll_for(f->proc, s->u.for_loop.sym, s->u.for_loop.from,
                                         s->u.for_loop.to, b, s->u.for_loop.trace_it);
        if (out == NULL) {
            f->oom = true;
            return s;
        }
        return out;
    }
    return s;
}

troupe_status_t troupe_ll_fuse_loops(troupe_ll_proc_t *proc, size_t *out_fused)
{
    return troupe_ll_fuse_loops_outer(proc, true, out_fused);
}

troupe_status_t troupe_ll_fuse_loops_outer(troupe_ll_proc_t *proc, bool outer, size_t *out_fused)
{
    if (out_fused)
        *out_fused = 0;
    if (proc == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_ll_fuse_loops: proc is NULL");
    s_fuser_t f = {proc, 0, false, outer};
    troupe_ll_t *body = s_fuse_ll(&f, proc->body);
    if (f.oom || troupe_ll_proc_status(proc) != TROUPE_OK)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                             "loop fusion of %s: out of memory (the body is unchanged)", proc->name);
    proc->body = body;
    if (out_fused)
        *out_fused = f.fused;
    return TROUPE_OK;
}
