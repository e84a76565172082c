/* troupe — the CUDA target of the code generator (compiler/cgen.h, "CUDA dialect"): the routine
 * becomes `extern "C" __global__` kernels, planned per top-level statement (consecutive
 * sequential ones share a one-thread kernel; the statements that use Local arrays one block
 * with the arrays in shared memory), whose loops over independent iterations are mapped onto
 * the grid; top-level matrix products become GEMM steps with their kernels as the fallback.
 * Independent pieces then share kernels (horizontal fusion over virtual blocks). A prelude
 * section's CUDA text replaces its C text where it has one.
 *
 * The mapping rule (cgen.h) is checked on the statement's accesses alone: loop i is mapped
 * when every node the nest writes is only ever accessed at `c*i + o` (one c != 0, one o) on
 * some axis, and every write lies inside loop i. Distinct values of i then touch disjoint
 * elements of every written node and read nothing another value of i writes, so running the
 * values of i in any order or at once gives what the sequential nest gives, operation for
 * operation. */
#include "compiler/cgen_impl.h"

#include "base/alloc.h"
#include "base/log.h"
#include "base/vec.h"
#include "compiler/gemm.h"
#include "ir/ops.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define S_BLOCK_THREADS 256 /* threads per block */
#define S_BLOCK_X_2D 32     /* block x of a 2D kernel (a warp along x) */
#define S_FLAT_BELOW 256    /* a 2-D nest's x extent, not a multiple of 32, below which it is 1-D */
#define S_GRID_MAX 65535    /* blocks per grid axis (the grid-stride loops do the rest) */
#define S_MAX_MAPPED 16     /* loops of one nest mapped onto the grid, at most */
/* Block-level reductions (cgen.h): threads per block (a power of two), the least reduction
 * extent, the most outputs (above, one output per thread already fills a GPU better). */
#define S_REDUCE_THREADS 256
#define S_REDUCE_MIN_EXTENT 256
#define S_REDUCE_MAX_OUTPUTS 16384
/* Warp-level reductions (cgen.h): the reductions of more outputs than that, one warp of
 * S_WARP_LANES lanes per output (S_REDUCE_THREADS / S_WARP_LANES outputs a block), from
 * S_WARP_MIN_EXTENT terms: every lane then has a term (a max/min's contiguous ranges are never
 * empty), and a row of 32 single floats is one 128-byte line the warp reads in one request,
 * where a thread per output reads 32 rows a request. */
#define S_WARP_LANES 32
#define S_WARP_MIN_EXTENT 32
/* A horizontal kernel of at least this many parts finds its part by a table (s_put_horizontal) */
#define S_HZ_TABLE_MIN_PARTS 4

/* ---- accesses ----------------------------------------------------------------------------- */

typedef struct s_access {
    const troupe_tnode_t *tn;
    const troupe_axis_index_t *idcs; /* NULL for a ZERO_OUT (the whole node) */
    bool write;
    int vec_len; /* elements a SET_FROM_VEC writes along the last axis; else 1 */
} s_access_t;

/* Loops of one nest whose extents s_accesses_t records (a deeper nest's index terms past them
 * count as of unknown range). */
#define S_NEST_LOOPS 32

typedef struct s_accesses {
    s_access_t *v;
    size_t n, cap;
    bool oom;
    int nloops; /* the nest's loop symbols (s_collect_ll), each with the range its loops cover */
    int32_t loop_sym[S_NEST_LOOPS];
    int64_t loop_lo[S_NEST_LOOPS], loop_hi[S_NEST_LOOPS];
} s_accesses_t;

static void s_add(s_accesses_t *a, const troupe_tnode_t *tn, const troupe_axis_index_t *idcs,
                  bool write, int vec_len)
{
    s_access_t x = {tn, idcs, write, vec_len};
    if (!TROUPE__VEC_PUSH(a->v, a->n, a->cap, x))
        a->oom = true;
}

static void s_collect_ll(s_accesses_t *a, const troupe_ll_t *s);

static void s_collect_sc(s_accesses_t *a, const troupe_sc_t *e)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        s_collect_ll(a, e->u.local_scope.body);
        break;
    case TROUPE_SC_GET:
        s_add(a, e->u.get.tn, e->u.get.idcs, false, 1);
        break;
    case TROUPE_SC_TERNOP:
        for (int i = 0; i < 3; i++)
            s_collect_sc(a, e->u.op.args[i]);
        break;
    case TROUPE_SC_BINOP:
        for (int i = 0; i < 2; i++)
            s_collect_sc(a, e->u.op.args[i]);
        break;
    case TROUPE_SC_UNOP:
        s_collect_sc(a, e->u.op.args[0]);
        break;
    default: /* constants, indices, local variables, the (read-only) merge buffer */
        break;
    }
}

static void s_collect_ll(s_accesses_t *a, const troupe_ll_t *s)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            s_collect_ll(a, s->u.seq.items[i]);
        break;
    case TROUPE_LL_FOR: {
        /* sibling loops may bind one symbol: its range is the union of theirs */
        int k = 0;
        while (k < a->nloops && a->loop_sym[k] != s->u.for_loop.sym)
            k++;
        if (k < a->nloops) {
            if (s->u.for_loop.from < a->loop_lo[k])
                a->loop_lo[k] = s->u.for_loop.from;
            if (s->u.for_loop.to > a->loop_hi[k])
                a->loop_hi[k] = s->u.for_loop.to;
        } else if (a->nloops < S_NEST_LOOPS) {
            a->loop_sym[a->nloops] = s->u.for_loop.sym;
            a->loop_lo[a->nloops] = s->u.for_loop.from;
            a->loop_hi[a->nloops++] = s->u.for_loop.to;
        }
        s_collect_ll(a, s->u.for_loop.body);
        break;
    }
    case TROUPE_LL_ZERO_OUT:
        s_add(a, s->u.zero_out, NULL, true, 1);
        break;
    case TROUPE_LL_SET:
        s_add(a, s->u.set.tn, s->u.set.idcs, true, 1);
        s_collect_sc(a, s->u.set.value);
        break;
    case TROUPE_LL_SET_FROM_VEC:
        s_add(a, s->u.set_from_vec.tn, s->u.set_from_vec.idcs, true, s->u.set_from_vec.length);
        s_collect_sc(a, s->u.set_from_vec.arg);
        break;
    case TROUPE_LL_SET_LOCAL: /* a thread's own variable */
        s_collect_sc(a, s->u.set_local.value);
        break;
    case TROUPE_LL_BIND_INDEX:
        /* The bound symbol is data, not a loop: a write indexed by it lies on no slice of a
         * mapped loop, so a scatter's loops over the duplicates stay sequential (no atomics). */
        s_add(a, s->u.bind_index.tn, s->u.bind_index.idcs, false, 1);
        s_collect_ll(a, s->u.bind_index.body);
        break;
    default:
        break;
    }
}

static int64_t s_abs64(int64_t v)
{
    return v < 0 ? -v : v;
}

/* How many values loop symbol `sym` takes in the nest `a` was collected from (over all the
 * loops that bind it), or 0 when no loop there binds it. */
static int64_t s_nest_extent(const s_accesses_t *a, int32_t sym)
{
    for (int i = 0; i < a->nloops; i++)
        if (a->loop_sym[i] == sym)
            return a->loop_hi[i] - a->loop_lo[i] + 1;
    return 0;
}

/* Whether index x holds term (sym, coeff). */
static bool s_index_has(const troupe_axis_index_t *x, int32_t sym, int64_t coeff)
{
    for (int t = 0; t < x->nterms; t++)
        if (x->terms[t].sym == sym && x->terms[t].coeff == coeff)
            return true;
    return false;
}

/* Whether indices x and y are the same sum (the same terms in any order, the same offset). */
static bool s_index_same(const troupe_axis_index_t *x, const troupe_axis_index_t *y)
{
    if (x->nterms != y->nterms || x->offset != y->offset)
        return false;
    for (int t = 0; t < x->nterms; t++)
        if (!s_index_has(y, x->terms[t].sym, x->terms[t].coeff))
            return false;
    return true;
}

/* Whether every access of `tn` in `a` is on axis `ax` at one index (the same sum of terms and
 * offset everywhere) holding a term of `sym`, whose terms make a mixed radix: taken by
 * increasing |coefficient|, each exceeds the span of those before it (sum of |c| (extent - 1),
 * every other term's symbol a loop of the nest, so of known extent), starting from the
 * elements a vector write covers past its index along the last axis. The index's value then
 * determines every term's symbol, `sym` among them, so distinct values of sym (whatever the
 * other loops, mapped or not) touch distinct slices. One term c*sym + o is such a radix. */
static bool s_axis_slices(const s_accesses_t *a, const troupe_tnode_t *tn, int ax, int32_t sym)
{
    const troupe_axis_index_t *ref = NULL;
    int64_t vec_span = 0;
    for (size_t i = 0; i < a->n; i++) {
        const s_access_t *x = &a->v[i];
        if (x->tn != tn)
            continue;
        if (x->idcs == NULL)
            return false;
        const troupe_axis_index_t *idx = &x->idcs[ax];
        if (ref == NULL)
            ref = idx;
        else if (!s_index_same(ref, idx))
            return false;
        if (x->write && x->vec_len > 1 && ax == tn->ndims - 1 && x->vec_len - 1 > vec_span)
            vec_span = x->vec_len - 1;
    }
    if (ref == NULL)
        return false;
    bool has_sym = false;
    for (int t = 0; t < ref->nterms; t++)
        has_sym |= ref->terms[t].sym == sym && ref->terms[t].coeff != 0;
    if (!has_sym)
        return false;
    /* the terms by increasing |coefficient| (at most TROUPE_MAX_INDEX_TERMS) */
    int order[TROUPE_MAX_INDEX_TERMS];
    for (int t = 0; t < ref->nterms; t++) {
        int k = t;
        while (k > 0 && s_abs64(ref->terms[order[k - 1]].coeff) > s_abs64(ref->terms[t].coeff)) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = t;
    }
    int64_t span = vec_span;
    for (int k = 0; k < ref->nterms; k++) {
        const troupe_index_term_t *term = &ref->terms[order[k]];
        const int64_t mag = s_abs64(term->coeff);
        if (mag == 0 || mag <= span)
            return false;
        if (k + 1 == ref->nterms)
            break; /* the largest term's own range does not matter */
        const int64_t ext = s_nest_extent(a, term->sym);
        if (ext <= 0 || (ext - 1) > (INT64_MAX - span) / mag)
            return false;
        span += mag * (ext - 1);
    }
    return true;
}

/* Whether the iterations of loop `sym` touch disjoint data (see the file comment); `a` holds
 * the accesses of the whole nest, which lies inside the loop. */
static bool s_loop_independent(const s_accesses_t *a, int32_t sym)
{
    for (size_t i = 0; i < a->n; i++) {
        const s_access_t *x = &a->v[i];
        if (!x->write)
            continue;
        bool found = false;
        for (int ax = 0; ax < x->tn->ndims && !found; ax++)
            found = s_axis_slices(a, x->tn, ax, sym);
        if (!found)
            return false;
    }
    return true;
}

/* The statement of kind `kind` that is the only statement of `body` (comments aside), or NULL. */
static const troupe_ll_t *s_only(const troupe_ll_t *body, troupe_ll_kind_t kind)
{
    if (body->kind == kind)
        return body;
    if (body->kind != TROUPE_LL_SEQ)
        return NULL;
    const troupe_ll_t *only = NULL;
    for (size_t i = 0; i < body->u.seq.count; i++) {
        const troupe_ll_t *it = body->u.seq.items[i];
        if (it->kind == TROUPE_LL_COMMENT || it->kind == TROUPE_LL_NOOP)
            continue;
        if (it->kind != kind || only != NULL)
            return NULL;
        only = it;
    }
    return only;
}

/* The loop that is the only statement of `body` (comments aside), or NULL. */
static const troupe_ll_t *s_only_loop(const troupe_ll_t *body)
{
    return s_only(body, TROUPE_LL_FOR);
}

/* The loop that is the only statement of `body`, or of the body of a gather index bound there
 * as its only statement (a scatter's `for bt { i = idx[bt]; for c { ... } }`), or NULL. */
static const troupe_ll_t *s_only_loop_through_binds(const troupe_ll_t *body)
{
    const troupe_ll_t *bind = s_only(body, TROUPE_LL_BIND_INDEX);
    return bind != NULL ? s_only_loop(bind->u.bind_index.body) : s_only_loop(body);
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* A kernel being planned: its mapped loops (outermost first; the last is x). A loop with a
 * skew partner (skew[i] non-NULL, the pair's outer loop) stands for the pair's sum u =
 * outer + inner (s_plan_skew): the thread's index is u, the outer loop runs in the thread. */
typedef struct s_map {
    int nmapped;
    const troupe_ll_t *loops[S_MAX_MAPPED];
    const troupe_ll_t *skew[S_MAX_MAPPED];
    /* the node this nest writes each element of once after a zeroing that was dropped
     * (s_plan_zero_covers): its reads print as 0 */
    const troupe_tnode_t *zeroed;
} s_map_t;

static int64_t s_extent(const troupe_ll_t *loop);
static const troupe_ll_t *s_only_loop(const troupe_ll_t *body);

/* The axis of nest `set`'s output index holding symbol `sym`, -1 when none, -2 when several. */
static int s_axis_of(const troupe_ll_t *set, int32_t sym)
{
    int found = -1;
    for (int ax = 0; ax < set->u.set.tn->ndims; ax++) {
        const troupe_axis_index_t *x = &set->u.set.idcs[ax];
        for (int t = 0; t < x->nterms; t++)
            if (x->terms[t].sym == sym && x->terms[t].coeff != 0)
                found = found == -1 || found == ax ? ax : -2;
    }
    return found;
}

/* Skew pairs (cgen.h): a perfect nest whose one statement is a SET of O, O the only node it
 * writes and accessed at that one index, whose unmapped loops pair up as a + b on axes of their
 * own (two terms of one coefficient, a transposed convolution's oh + kh): each pair maps as u =
 * a + b, the outer of the two looping in the thread over the values that keep the inner in its
 * range. Distinct u touch distinct elements; the iterations of one element, all in one thread,
 * run in the nest's order. map keeps its plan when the nest does not qualify. */
static void s_plan_skew(const troupe_ll_t *s, const s_accesses_t *a, s_map_t *map)
{
    const troupe_ll_t *chain[S_MAX_MAPPED], *body = NULL;
    int n = 0;
    for (const troupe_ll_t *l = s; l != NULL; l = s_only_loop(body)) {
        if (n == S_MAX_MAPPED)
            return;
        chain[n++] = l;
        body = l->u.for_loop.body;
    }
    const troupe_ll_t *set = s_only(body, TROUPE_LL_SET);
    if (set == NULL || n == map->nmapped)
        return;
    const troupe_tnode_t *o = set->u.set.tn;
    for (size_t i = 0; i < a->n; i++) {
        const s_access_t *x = &a->v[i];
        if (x->write && x->tn != o)
            return;
        if (x->tn == o &&
            (x->idcs == NULL || !troupe_axis_indices_equal(x->idcs, set->u.set.idcs, o->ndims)))
            return;
    }
    bool mapped[S_MAX_MAPPED] = {false};
    int partner[S_MAX_MAPPED];
    for (int p = 0; p < n; p++) {
        partner[p] = -1;
        for (int m = 0; m < map->nmapped; m++)
            mapped[p] = mapped[p] || map->loops[m] == chain[p];
    }
    for (int ax = 0; ax < o->ndims; ax++) {
        const troupe_axis_index_t *x = &set->u.set.idcs[ax];
        if (x->nterms != 2 || x->terms[0].coeff == 0 || x->terms[0].coeff != x->terms[1].coeff)
            continue;
        int at[2] = {-1, -1};
        for (int t = 0; t < 2; t++)
            for (int p = 0; p < n; p++)
                if (chain[p]->u.for_loop.sym == x->terms[t].sym)
                    at[t] = p;
        if (at[0] < 0 || at[1] < 0 || at[0] == at[1] || mapped[at[0]] || mapped[at[1]] ||
            partner[at[0]] >= 0 || partner[at[1]] >= 0 || s_axis_of(set, x->terms[0].sym) != ax ||
            s_axis_of(set, x->terms[1].sym) != ax)
            continue;
        partner[at[0]] = at[1];
        partner[at[1]] = at[0];
    }
    s_map_t skewed = {0};
    for (int p = 0; p < n; p++) {
        if (!mapped[p] && partner[p] < 0)
            return;                        /* a loop that neither maps nor pairs */
        if (mapped[p] || partner[p] < p) { /* mapped, or the pair's inner loop */
            skewed.skew[skewed.nmapped] = mapped[p] ? NULL : chain[partner[p]];
            skewed.loops[skewed.nmapped++] = chain[p];
        }
    }
    *map = skewed;
}

/* The extent and first value of mapped dimension i of m (a skew pair: of its sum). */
static int64_t s_dim_extent(const s_map_t *m, int i)
{
    return s_extent(m->loops[i]) + (m->skew[i] != NULL ? s_extent(m->skew[i]) - 1 : 0);
}

static int64_t s_dim_from(const s_map_t *m, int i)
{
    return m->loops[i]->u.for_loop.from + (m->skew[i] != NULL ? m->skew[i]->u.for_loop.from : 0);
}

/* The mapped loops of nest `s` (a FOR), in nest order; nmapped 0 when none can be. */
static troupe_status_t s_plan_nest(const troupe_ll_t *s, s_map_t *map)
{
    memset(map, 0, sizeof *map);
    s_accesses_t a = {0};
    s_collect_ll(&a, s);
    troupe_status_t st = TROUPE_OK;
    if (a.oom) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto out;
    }
    /* A loop below a bound gather index maps too: the scatter's channels run in parallel,
     * each thread taking the positions in the nest's order, so each element sees the same
     * additions in the same order (the bound index is data: the loops above it stay). */
    for (const troupe_ll_t *l = s; l != NULL && map->nmapped < S_MAX_MAPPED;
         l = s_only_loop_through_binds(l->u.for_loop.body))
        if (s_loop_independent(&a, l->u.for_loop.sym))
            map->loops[map->nmapped++] = l;
    s_plan_skew(s, &a, map);
out:
    troupe_free(a.v);
    return st;
}

static int64_t s_extent(const troupe_ll_t *loop)
{
    return loop->u.for_loop.to - loop->u.for_loop.from + 1;
}

static uint32_t s_grid(int64_t extent, uint32_t block)
{
    int64_t g = (extent + block - 1) / block;
    return (uint32_t)(g < 1 ? 1 : g > S_GRID_MAX ? S_GRID_MAX : g);
}

static uint32_t s_round32(int64_t extent, uint32_t cap)
{
    int64_t r = (extent + 31) / 32 * 32;
    return (uint32_t)(r > cap ? cap : r < 32 ? 32 : r);
}

/* The launch shape of a kernel covering ex x ey iterations (ey 1: 1D); cgen.h's rule. */
static void s_shape(troupe_cgen_kernel_t *k, int64_t ex, int64_t ey)
{
    k->extent[0] = ex;
    k->extent[1] = ey;
    if (ey <= 1) {
        k->block[0] = s_round32(ex, S_BLOCK_THREADS);
        k->block[1] = 1;
    } else {
        k->block[0] = s_round32(ex, S_BLOCK_X_2D);
        int64_t by = S_BLOCK_THREADS / k->block[0];
        k->block[1] = (uint32_t)(by > ey ? ey : by);
    }
    k->grid[0] = s_grid(ex, k->block[0]);
    k->grid[1] = s_grid(ey, k->block[1]);
}

/* Kernel k of routine r: `<r>_k<k>` (s_open_kernel; a horizontal kernel's table, written before
 * it, takes the name it will have). */
#define S_KERNEL_NAME "%s_k%zu"

/* Where a kernel's parameter list goes in its signature until s_put_kernel_params fills it. */
#define S_PARAMS_MARK "\x01"

/* FNV-1a of n bytes (a name's slot in s_put_kernel_params's table). */
static size_t s_name_hash(const char *w, size_t n)
{
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)w[i]) * 1099511628211ULL;
    return (size_t)h;
}

/* Fills each kernel's parameter list at its mark with the routine's parameters its text (up to
 * the next kernel's mark) names, in the routine's order, and records them as the kernel's
 * launch arguments (troupe_cgen_kernel_t.args), the gather error words last. A name in a
 * comment counts too: at worst an unused parameter. */
static troupe_status_t s_put_kernel_params(troupe_cgen_result_t *r, troupe__strbuf_t *b)
{
    troupe_status_t st = TROUPE_OK;
    size_t cap = 16;
    while (cap < 2 * r->nparams + 2)
        cap *= 2;
    size_t *slot = troupe_malloc(cap * sizeof *slot); /* open addressing: param index + 1 */
    bool *used = troupe_calloc(r->nparams + 1, sizeof *used);
    troupe__strbuf_t nb = TROUPE__STRBUF_INIT;
    if (slot == NULL || used == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto out;
    }
    memset(slot, 0, cap * sizeof *slot);
    for (size_t i = 0; i < r->nparams; i++) {
        const char *id = r->params[i].ident;
        size_t h = s_name_hash(id, strlen(id)) & (cap - 1);
        while (slot[h] != 0)
            h = (h + 1) & (cap - 1);
        slot[h] = i + 1;
    }
    const char *text = b->data != NULL ? b->data : "", *end = text + b->len;
    const char *at = memchr(text, S_PARAMS_MARK[0], b->len);
    troupe__strbuf_putn(&nb, text, at ? (size_t)(at - text) : b->len);
    for (size_t k = 0; k < r->nkernels; k++) {
        if (at == NULL) {
            st = troupe__error(TROUPE_INTERNAL, "cgen: kernel %s has no parameter mark",
                               r->kernels[k].name);
            goto out;
        }
        const char *from = at + 1;
        const char *next = memchr(from, S_PARAMS_MARK[0], (size_t)(end - from));
        const char *stop = next ? next : end;
        memset(used, 0, (r->nparams + 1) * sizeof *used);
        for (const char *c = from; c < stop;) {
            if (isdigit((unsigned char)*c)) { /* 12LL, 1.0f: not names */
                while (c < stop && (isalnum((unsigned char)*c) || *c == '_' || *c == '.'))
                    c++;
                continue;
            }
            if (!isalpha((unsigned char)*c) && *c != '_') {
                c++;
                continue;
            }
            const char *w = c;
            while (c < stop && (isalnum((unsigned char)*c) || *c == '_'))
                c++;
            size_t h = s_name_hash(w, (size_t)(c - w)) & (cap - 1);
            for (; slot[h] != 0; h = (h + 1) & (cap - 1)) {
                const char *id = r->params[slot[h] - 1].ident;
                if (strlen(id) == (size_t)(c - w) && memcmp(id, w, (size_t)(c - w)) == 0) {
                    used[slot[h] - 1] = true;
                    break;
                }
            }
        }
        size_t n = r->ngathers > 0;
        for (size_t i = 0; i < r->nparams; i++)
            n += used[i];
        troupe_cgen_kernel_t *kn = &r->kernels[k];
        kn->args = troupe_malloc((n ? n : 1) * sizeof *kn->args);
        if (kn->args == NULL) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
            goto out;
        }
        kn->nargs = 0;
        for (size_t i = 0; i < r->nparams; i++)
            if (used[i]) {
                troupe__strbuf_printf(&nb, "%s%s", kn->nargs ? ", " : "", r->params[i].decl);
                kn->args[kn->nargs++] = i;
            }
        if (r->ngathers > 0) {
            if (kn->nargs > 0)
                troupe__strbuf_puts(&nb, ", ");
            kn->args[kn->nargs++] = r->nparams;
        }
        troupe__strbuf_putn(&nb, from, (size_t)(stop - from));
        at = next;
    }
    if (at != NULL) {
        st = troupe__error(TROUPE_INTERNAL, "cgen: a parameter mark without a kernel");
        goto out;
    }
    if (nb.failed) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto out;
    }
    troupe__strbuf_reset(b);
    *b = nb;
    nb = (troupe__strbuf_t)TROUPE__STRBUF_INIT;
out:
    troupe__strbuf_reset(&nb);
    troupe_free(slot);
    troupe_free(used);
    return st;
}

/* Appends a kernel "<name>_k<i>" to r and writes its signature and opening brace. */
static troupe_status_t s_open_kernel(troupe_cgen_result_t *r, troupe__strbuf_t *b,
                                     troupe_cgen_kernel_t **out)
{
    troupe_cgen_kernel_t *k = troupe_realloc(r->kernels, (r->nkernels + 1) * sizeof *k);
    if (k == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    r->kernels = k;
    k = &r->kernels[r->nkernels];
    memset(k, 0, sizeof *k);
    k->name = troupe_strdup_printf(S_KERNEL_NAME, r->name, r->nkernels);
    if (k->name == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    r->nkernels++;
    troupe__strbuf_puts(b, "\nextern \"C\" __global__ void ");
    troupe__strbuf_puts(b, k->name);
    /* the parameters the kernel's text names go at the mark (s_put_kernel_params) */
    troupe__strbuf_putn(b, "(" S_PARAMS_MARK, 2);
    if (r->ngathers > 0) {
        troupe__strbuf_puts(b, "int64_t *troupe_err)\n{\n");
        troupe__strbuf_puts(b, "    if (troupe_err[0] != 0) return; /* a gather index failed */\n");
    } else {
        troupe__strbuf_puts(b, ")\n{\n");
    }
    *out = k;
    return TROUPE_OK;
}

static troupe_status_t s_add_step(troupe_cgen_result_t *r, const troupe_cgen_step_t *step)
{
    troupe_cgen_step_t *v = troupe_realloc(r->steps, (r->nsteps + 1) * sizeof *v);
    if (v == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    r->steps = v;
    r->steps[r->nsteps++] = *step;
    return TROUPE_OK;
}

/* A one-thread kernel running the `count` statements at `items` (no Local arrays: a segment
 * holds those). */
static troupe_status_t s_put_one_thread_kernel(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                               const troupe_ll_t *const *items, size_t count,
                                               troupe__strbuf_t *b)
{
    troupe_cgen_kernel_t *k = NULL;
    TROUPE_RETURN_IF_ERROR(s_open_kernel(r, b, &k));
    s_shape(k, 1, 1);
    k->block[0] = 1;
    k->one_thread = true;
    troupe__strbuf_puts(b, "    /* Sequential code: thread 0 of block 0 runs it. */\n"
                           "    if (threadIdx.x != 0 || threadIdx.y != 0 || blockIdx.x != 0 || "
                           "blockIdx.y != 0) return;\n");
    for (size_t i = 0; i < count; i++)
        TROUPE_RETURN_IF_ERROR(troupe__cgen_emit_stmt(g, items[i], 1, b));
    troupe__strbuf_puts(b, "}\n");
    return TROUPE_OK;
}

/* The same as a step of its own. */
static troupe_status_t s_put_one_thread(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                        const troupe_ll_t *const *items, size_t count,
                                        troupe__strbuf_t *b)
{
    if (count == 0)
        return TROUPE_OK;
    TROUPE_RETURN_IF_ERROR(s_put_one_thread_kernel(g, r, items, count, b));
    troupe_cgen_step_t step = {TROUPE_CGEN_STEP_KERNEL, r->nkernels - 1, 1, {0}};
    return s_add_step(r, &step);
}

/* Before every grid-stride loop: not unrolled. Unrolled, each thread first works out the trip
 * count, a 64-bit division by the runtime stride (gridDim * blockDim), which in kernels of one
 * item a thread cost more than the item: attention's softmax passes were 264 PTX instructions
 * with it, 103 without. */
#define S_NO_UNROLL "#pragma unroll 1\n"

/* The grid-stride loop over `extent` along axis 'x' or 'y', at `indent`. */
static void s_put_stride_loop(troupe__strbuf_t *b, char axis, int64_t extent, int indent)
{
    troupe__strbuf_repeat(b, "    ", indent);
    troupe__strbuf_puts(b, S_NO_UNROLL);
    troupe__strbuf_repeat(b, "    ", indent);
    troupe__strbuf_printf(b,
                          "for (int64_t t_%c = (int64_t)blockIdx.%c * blockDim.%c + threadIdx.%c; "
                          "t_%c < %" PRId64 "LL; t_%c += (int64_t)gridDim.%c * blockDim.%c) {\n",
                          axis, axis, axis, axis, axis, extent, axis, axis, axis);
}

/* Writes the mapped loops' values from t_x and t_y (x the innermost mapped loop, the others
 * decomposed from t_y, innermost varying fastest) and binds their symbols. */
static void s_put_map_vars(troupe__cgen_t *g, const s_map_t *m, troupe__strbuf_t *b, int in)
{
    /* a skew pair's sum, by its dimension (S_MAX_MAPPED names) */
    static const char *const u_names[S_MAX_MAPPED] = {
        "t_u0", "t_u1", "t_u2",  "t_u3",  "t_u4",  "t_u5",  "t_u6",  "t_u7",
        "t_u8", "t_u9", "t_u10", "t_u11", "t_u12", "t_u13", "t_u14", "t_u15"};
    int64_t below = 1;
    for (int i = m->nmapped - 1; i >= 0; i--) {
        const troupe_ll_t *l = m->loops[i];
        troupe__strbuf_repeat(b, "    ", in);
        troupe__strbuf_printf(b, "const int64_t %s = %" PRId64 "LL + ",
                              m->skew[i] != NULL ? u_names[i]
                                                 : troupe__cgen_sym_ident(g, l->u.for_loop.sym),
                              s_dim_from(m, i));
        if (i == m->nmapped - 1)
            troupe__strbuf_puts(b, "t_x;\n");
        else
            troupe__strbuf_printf(b, "t_y / %" PRId64 "LL %% %" PRId64 "LL;\n", below,
                                  s_dim_extent(m, i));
        if (i < m->nmapped - 1)
            below *= s_dim_extent(m, i);
        if (m->skew[i] != NULL)
            troupe__cgen_bind_skew(g, m->skew[i]->u.for_loop.sym, l->u.for_loop.sym, u_names[i],
                                   l->u.for_loop.from, l->u.for_loop.to);
        else
            troupe__cgen_bind_sym(g, l->u.for_loop.sym, true, l->u.for_loop.from, l->u.for_loop.to);
    }
}

/* Nest `s` with its mapped loops' values bound (s_put_map_vars), then unbound. */
static troupe_status_t s_put_mapped_stmt(troupe__cgen_t *g, const s_map_t *m,
                                         const troupe_ll_t *s, troupe__strbuf_t *b, int in)
{
    s_put_map_vars(g, m, b, in);
    char zero[48]; /* a zero of the node's storage type: -zero is -0, exp(zero) resolves */
    if (m->zeroed != NULL) {
        snprintf(zero, sizeof zero, "((%s)0)", troupe_prec_c_type(m->zeroed->prec));
        troupe__cgen_read_as(g, m->zeroed, zero);
    }
    troupe_status_t st = troupe__cgen_emit_stmt(g, s, in, b);
    if (m->zeroed != NULL)
        troupe__cgen_read_as(g, m->zeroed, NULL);
    for (int i = 0; i < m->nmapped; i++)
        if (m->skew[i] != NULL)
            troupe__cgen_bind_skew(g, m->skew[i]->u.for_loop.sym, m->loops[i]->u.for_loop.sym, NULL,
                                   0, 0);
        else
            troupe__cgen_bind_sym(g, m->loops[i]->u.for_loop.sym, false, 0, 0);
    return st;
}

/* The extents of nest m's iterations along x (the innermost mapped loop) and y (the others). */
static void s_map_extents(const s_map_t *m, int64_t *ex, int64_t *ey)
{
    *ex = s_dim_extent(m, m->nmapped - 1);
    *ey = 1;
    for (int i = 0; i < m->nmapped - 1; i++)
        *ey *= s_dim_extent(m, i);
}

static troupe_status_t s_put_mapped_flat(troupe__cgen_t *g, const s_map_t *m, const troupe_ll_t *s,
                                         troupe__strbuf_t *b, int in, const char *start,
                                         const char *stride);

/* A kernel of nest `s` with its mapped loops on the grid. */
static troupe_status_t s_put_mapped(troupe__cgen_t *g, troupe_cgen_result_t *r, const s_map_t *m,
                                    const troupe_ll_t *s, troupe__strbuf_t *b, size_t *out_kernel)
{
    troupe_cgen_kernel_t *k = NULL;
    TROUPE_RETURN_IF_ERROR(s_open_kernel(r, b, &k));
    *out_kernel = r->nkernels - 1;
    int64_t ex, ey;
    s_map_extents(m, &ex, &ey);
    if (m->nmapped > 1 && ex % S_BLOCK_X_2D != 0 && ex < S_FLAT_BELOW) {
        /* A short x (an image row of 26) on a 2-D block of 32 x 8 idles the lanes past it: the
         * iterations flattened onto a 1-D grid instead, every lane busy (threads outside the
         * planned shape's y find no work). */
        s_shape(k, ex * ey, 1);
        troupe__strbuf_puts(b, "    if (blockIdx.y != 0 || threadIdx.y != 0) return;\n");
        troupe_status_t st =
            s_put_mapped_flat(g, m, s, b, 1, "(int64_t)blockIdx.x * blockDim.x + threadIdx.x",
                              "(int64_t)gridDim.x * blockDim.x");
        troupe__strbuf_puts(b, "}\n");
        return st;
    }
    s_shape(k, ex, m->nmapped > 1 ? ey : 1);
    /* Both loops always: threads outside the planned shape's y (any launch) find no work. */
    int in = 1;
    s_put_stride_loop(b, 'y', ey, in++);
    s_put_stride_loop(b, 'x', ex, in++);
    troupe_status_t st = s_put_mapped_stmt(g, m, s, b, in);
    while (in-- > 1) {
        troupe__strbuf_repeat(b, "    ", in);
        troupe__strbuf_puts(b, "}\n");
    }
    troupe__strbuf_puts(b, "}\n");
    return st;
}

/* Opens `for (int64_t t_f = <start>; t_f < <count>; t_f += <stride>) {` at `in`: the work items
 * of a part of a kernel that shares its grid (horizontal) or its block (s_put_serial_part). */
static void s_put_flat_loop(troupe__strbuf_t *b, int64_t count, const char *start,
                            const char *stride, int in)
{
    troupe__strbuf_repeat(b, "    ", in);
    troupe__strbuf_puts(b, S_NO_UNROLL);
    troupe__strbuf_repeat(b, "    ", in);
    troupe__strbuf_printf(b, "for (int64_t t_f = %s; t_f < %" PRId64 "LL; t_f += %s) {\n", start,
                          count, stride);
}

/* Nest `s` as the flattened work items t_f of its mapped iterations (t_y = t_f / ex,
 * t_x = t_f % ex), at `in`. */
static troupe_status_t s_put_mapped_flat(troupe__cgen_t *g, const s_map_t *m,
                                         const troupe_ll_t *s, troupe__strbuf_t *b, int in,
                                         const char *start, const char *stride)
{
    int64_t ex, ey;
    s_map_extents(m, &ex, &ey);
    s_put_flat_loop(b, ex * ey, start, stride, in);
    troupe__strbuf_repeat(b, "    ", in + 1);
    if (m->nmapped > 1)
        troupe__strbuf_printf(b,
                              "const int64_t t_y = t_f / %" PRId64 "LL, t_x = t_f %% %" PRId64
                              "LL;\n",
                              ex, ex);
    else
        troupe__strbuf_puts(b, "const int64_t t_x = t_f;\n");
    troupe_status_t st = s_put_mapped_stmt(g, m, s, b, in + 1);
    troupe__strbuf_repeat(b, "    ", in);
    troupe__strbuf_puts(b, "}\n");
    return st;
}

/* `<id>[<at>] = 0;` (the four words of a uint4x32), at `in`. */
static void s_put_zero_elem(troupe__strbuf_t *b, const char *id, troupe_prec_t prec,
                            const char *at, int in)
{
    troupe__strbuf_repeat(b, "    ", in);
    if (prec == TROUPE_PREC_UINT4X32)
        troupe__strbuf_printf(b,
                              "%s[%s].v[0] = 0u; %s[%s].v[1] = 0u; %s[%s].v[2] = 0u; %s[%s].v[3] "
                              "= 0u;\n",
                              id, at, id, at, id, at, id, at);
    else
        troupe__strbuf_printf(b, "%s[%s] = 0;\n", id, at);
}

/* Zeroes the elements t_f of array `id` (n elements of precision prec), at `in`. */
static void s_put_zero_flat(troupe__strbuf_t *b, const char *id, troupe_prec_t prec, int64_t n,
                            const char *start, const char *stride, int in)
{
    s_put_flat_loop(b, n, start, stride, in);
    s_put_zero_elem(b, id, prec, "t_f", in + 1);
    troupe__strbuf_repeat(b, "    ", in);
    troupe__strbuf_puts(b, "}\n");
}

/* A kernel zeroing node tn (grid-stride over its elements). */
static troupe_status_t s_put_zero(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                  const troupe_tnode_t *tn, troupe__strbuf_t *b, size_t *out_kernel)
{
    troupe_cgen_kernel_t *k = NULL;
    TROUPE_RETURN_IF_ERROR(s_open_kernel(r, b, &k));
    *out_kernel = r->nkernels - 1;
    int64_t n = troupe_tnode_num_elems(tn);
    s_shape(k, n, 1);
    s_put_stride_loop(b, 'y', 1, 1);
    s_put_stride_loop(b, 'x', n, 2);
    s_put_zero_elem(b, troupe__cgen_node_ident(g, tn), tn->prec, "t_x", 3);
    troupe__strbuf_puts(b, "        }\n    }\n}\n");
    return TROUPE_OK;
}

/* ---- block-level reductions ---------------------------------------------------------------- */

/* A nest `for ... { O[idx] = O[idx] + term }` (or term + O[idx], or fma(x, y, O[idx]), or
 * max/min(O[idx], term) or max/min(term, O[idx])) whose unmapped loops reduce into O: their
 * symbols are absent from idx and the term neither reads nor writes O nor writes anything
 * else. */
typedef struct s_reduce {
    troupe_binop_t op;                      /* ADD (FMA: fx, fy set), MAX or MIN */
    bool acc_first;                         /* MAX/MIN: O is the first operand */
    bool subtracts;                         /* ADD: the nest is O = O - term */
    const troupe_ll_t *loops[S_MAX_MAPPED]; /* the whole nest, outermost first */
    bool mapped[S_MAX_MAPPED];
    int nloops;
    const troupe_ll_t *set;
    const troupe_sc_t *term;    /* ADD: the added (subtracted) operand; FMA: NULL */
    const troupe_sc_t *fx, *fy; /* FMA: the factors */
    int64_t outputs, extent;    /* product of the mapped, of the reduction loops' extents */
    bool warp;                  /* a warp per output (else a block per output) */
} s_reduce_t;

static bool s_same_get(const troupe_sc_t *e, const troupe_ll_t *set)
{
    return e->kind == TROUPE_SC_GET && e->u.get.tn == set->u.set.tn &&
           troupe_axis_indices_equal(e->u.get.idcs, set->u.set.idcs, set->u.set.tn->ndims);
}

/* Whether expression e touches node tn or writes any node. */
static troupe_status_t s_term_clean(const troupe_sc_t *e, const troupe_tnode_t *tn, bool *clean)
{
    s_accesses_t a = {0};
    s_collect_sc(&a, e);
    *clean = !a.oom;
    for (size_t i = 0; i < a.n && *clean; i++)
        if (a.v[i].write || a.v[i].tn == tn)
            *clean = false;
    troupe_free(a.v);
    return a.oom ? troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory") : TROUPE_OK;
}

/* Whether more of the reads of red's term step by one element along its innermost reduction
 * loop than along its innermost mapped loop (a row's terms side by side: attention's softmax
 * rows). Then a warp's lanes on consecutive terms read consecutive elements, where a thread
 * per output (consecutive threads on consecutive values of the innermost mapped loop) reads
 * elements a row apart; the other way round (a column sum, a weight gradient's nest) the
 * threads already read side by side and a warp's lanes would not. */
static troupe_status_t s_reduce_reads_rows(const s_reduce_t *red, bool *yes)
{
    *yes = false;
    const troupe_ll_t *inner_r = NULL, *inner_m = NULL;
    for (int i = 0; i < red->nloops; i++) {
        if (red->mapped[i])
            inner_m = red->loops[i];
        else
            inner_r = red->loops[i];
    }
    if (inner_r == NULL || inner_m == NULL)
        return TROUPE_OK;
    s_accesses_t a = {0};
    const troupe_sc_t *terms[2] = {red->term != NULL ? red->term : red->fx, red->fy};
    for (int t = 0; t < 2; t++)
        if (terms[t] != NULL)
            s_collect_sc(&a, terms[t]);
    int along_r = 0, along_m = 0;
    for (size_t i = 0; i < a.n; i++) {
        if (a.v[i].write || a.v[i].idcs == NULL)
            continue;
        int64_t sr = troupe_gemm_sym_stride(a.v[i].tn, a.v[i].idcs, inner_r->u.for_loop.sym);
        int64_t sm = troupe_gemm_sym_stride(a.v[i].tn, a.v[i].idcs, inner_m->u.for_loop.sym);
        along_r += sr == 1 || sr == -1;
        along_m += sm == 1 || sm == -1;
    }
    *yes = !a.oom && along_r > along_m;
    troupe_free(a.v);
    return a.oom ? troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory") : TROUPE_OK;
}

/* The most outputs of a block-level reduction; past it, warps (troupe__cgen_cuda_set_reduce_
 * max_outputs lowers it for the host emulator's tests). */
static int64_t s_reduce_max_outputs = S_REDUCE_MAX_OUTPUTS;

void troupe__cgen_cuda_set_reduce_max_outputs(int64_t outputs)
{
    s_reduce_max_outputs = outputs > 0 ? outputs : S_REDUCE_MAX_OUTPUTS;
}

/* Whether nest s (its mapped loops in map) is a reduction cgen.h's rule puts on a block (at
 * most s_reduce_max_outputs outputs) or on warps (more, its term's reads along rows). */
static troupe_status_t s_plan_reduce(const troupe_ll_t *s, const s_map_t *map, s_reduce_t *red,
                                     bool *yes)
{
    *yes = false;
    memset(red, 0, sizeof *red);
    const troupe_ll_t *l = s, *body = NULL;
    for (; l != NULL; l = s_only_loop(body)) {
        if (red->nloops == S_MAX_MAPPED)
            return TROUPE_OK;
        red->loops[red->nloops++] = l;
        body = l->u.for_loop.body;
    }
    const troupe_ll_t *set = s_only(body, TROUPE_LL_SET);
    if (set == NULL)
        return TROUPE_OK;
    const troupe_tnode_t *o = set->u.set.tn;
    const bool is_float = o->prec == TROUPE_PREC_SINGLE || o->prec == TROUPE_PREC_DOUBLE;
    /* Integers whose compute type is their storage type: their sums are exact in any order. */
    const bool is_int = o->prec == TROUPE_PREC_INT32 || o->prec == TROUPE_PREC_UINT32 ||
                        o->prec == TROUPE_PREC_INT64 || o->prec == TROUPE_PREC_UINT64;
    if (!is_float && !is_int)
        return TROUPE_OK;
    const troupe_sc_t *v = set->u.set.value;
    red->op = TROUPE_BINOP_ADD;
    if (v->kind == TROUPE_SC_BINOP &&
        (v->u.op.op == TROUPE_BINOP_MAX || v->u.op.op == TROUPE_BINOP_MIN)) {
        red->op = v->u.op.op;
        red->acc_first = s_same_get(v->u.op.args[0], set);
        if (red->acc_first)
            red->term = v->u.op.args[1];
        else if (s_same_get(v->u.op.args[1], set))
            red->term = v->u.op.args[0];
        else
            return TROUPE_OK;
    } else if (v->kind == TROUPE_SC_BINOP && v->u.op.op == TROUPE_BINOP_ADD) {
        if (s_same_get(v->u.op.args[0], set))
            red->term = v->u.op.args[1];
        else if (s_same_get(v->u.op.args[1], set))
            red->term = v->u.op.args[0];
        else
            return TROUPE_OK;
    } else if (v->kind == TROUPE_SC_BINOP && v->u.op.op == TROUPE_BINOP_SUB &&
               s_same_get(v->u.op.args[0], set)) {
        /* O - t0 - t1 - ... is O + ((0 - t0) - t1 - ...): negation is exact, so the partials
         * subtract their terms and the tree adds them, a sum's reassociation and no more */
        red->term = v->u.op.args[1];
        red->subtracts = true;
    } else if (is_float && v->kind == TROUPE_SC_TERNOP && v->u.op.op == TROUPE_TERNOP_FMA &&
               s_same_get(v->u.op.args[2], set)) {
        red->fx = v->u.op.args[0];
        red->fy = v->u.op.args[1];
    } else {
        return TROUPE_OK;
    }
    bool clean = true;
    const troupe_sc_t *terms[2] = {red->term != NULL ? red->term : red->fx, red->fy};
    for (int t = 0; t < 2 && clean; t++)
        if (terms[t] != NULL)
            TROUPE_RETURN_IF_ERROR(s_term_clean(terms[t], o, &clean));
    if (!clean)
        return TROUPE_OK;
    red->outputs = 1;
    red->extent = 1;
    for (int i = 0; i < red->nloops; i++) {
        for (int m = 0; m < map->nmapped; m++)
            if (map->loops[m] == red->loops[i])
                red->mapped[i] = true;
        if (red->mapped[i]) {
            red->outputs *= s_extent(red->loops[i]);
        } else {
            if (troupe_axis_indices_use(set->u.set.idcs, o->ndims, red->loops[i]->u.for_loop.sym))
                return TROUPE_OK; /* not a reduction into O: a dependence between iterations */
            red->extent *= s_extent(red->loops[i]);
        }
    }
    red->set = set;
    if (red->outputs > s_reduce_max_outputs && red->extent >= S_WARP_MIN_EXTENT)
        TROUPE_RETURN_IF_ERROR(s_reduce_reads_rows(red, &red->warp));
    *yes =
        red->warp || (red->extent >= S_REDUCE_MIN_EXTENT && red->outputs <= s_reduce_max_outputs);
    return TROUPE_OK;
}

/* Writes `const int64_t <sym> = from + <flat> / below % extent;` for the loops of red with
 * mapped == want (innermost fastest), binding their symbols. */
static void s_put_decompose(troupe__cgen_t *g, troupe__strbuf_t *b, const s_reduce_t *red,
                            bool want, const char *flat, int indent)
{
    int64_t below = 1;
    for (int i = red->nloops - 1; i >= 0; i--) {
        const troupe_ll_t *l = red->loops[i];
        if (red->mapped[i] != want)
            continue;
        troupe__strbuf_repeat(b, "    ", indent);
        troupe__strbuf_printf(
            b, "const int64_t %s = %" PRId64 "LL + %s / %" PRId64 "LL %% %" PRId64 "LL;\n",
            troupe__cgen_sym_ident(g, l->u.for_loop.sym), l->u.for_loop.from, flat, below,
            s_extent(l));
        below *= s_extent(l);
        troupe__cgen_bind_sym(g, l->u.for_loop.sym, true, l->u.for_loop.from, l->u.for_loop.to);
    }
}

/* Writes the combination of the partial results l (earlier terms) and r (later ones) of a
 * MAX/MIN reduction: the nest's operator with O's operand position taken by l. */
static void s_put_select(troupe__strbuf_t *b, const s_reduce_t *red, const troupe_c_syntax_t *syn,
                         const char *l, const char *r)
{
    const char *first = red->acc_first ? l : r, *second = red->acc_first ? r : l;
    troupe__strbuf_printf(b, "%s%s%s%s%s", syn->piece[0], first, syn->piece[1], second,
                          syn->piece[2]);
}

/* The kernel of a block-level or warp-level reduction (cgen.h, "CUDA dialect": the order is
 * documented there). Each output takes n threads (a block: n = 256; a warp: n = 32, the lane
 * l = t % 32 of thread t). A sum: lane l takes terms l, l+n, ... and the tree adds slot l+s
 * into l; in the warp form consecutive lanes read consecutive terms (one request for a row's
 * 32 terms when the reduced axis is the innermost). A max/min: lane l takes the contiguous
 * terms [l*E/n, (l+1)*E/n) in order (E >= n, so none is empty) and the tree combines adjacent
 * slots, earlier on the left: the operator (ir/ops.h troupe_fmax*: NaN ignored, equal
 * operands give the second) picks one operand by a total order on (value, position), so any
 * grouping that keeps the order picks what the sequential loop picks, bit for bit, signed
 * zeros and NaN payloads included. Strided terms would lose that order (two slots' ties would
 * need the terms' positions), so a warp's max/min reads 32 contiguous ranges of one row: each
 * request touches several lines, still of that one row, where a thread per output touches 32
 * rows. */
static troupe_status_t s_put_reduce_part(troupe__cgen_t *g, const s_reduce_t *red,
                                         troupe__strbuf_t *b, const char *o_start,
                                         const char *o_stride);

/* Whether the block-level reduction red sums floats in another order than the interpreter. */
static bool s_reduce_reassociates(const s_reduce_t *red)
{
    return red->op == TROUPE_BINOP_ADD && troupe_prec_is_float(red->set->u.set.tn->prec);
}

/* Outputs a block of a warp-level reduction takes at a time. */
#define S_WARP_OUTPUTS (S_REDUCE_THREADS / S_WARP_LANES)

/* The blocks reduction red takes, at most S_GRID_MAX: its outputs, or its groups of
 * S_WARP_OUTPUTS outputs in the warp form. */
static int64_t s_reduce_blocks(const s_reduce_t *red)
{
    int64_t n = red->warp ? (red->outputs + S_WARP_OUTPUTS - 1) / S_WARP_OUTPUTS : red->outputs;
    return n < S_GRID_MAX ? n : S_GRID_MAX;
}

static troupe_status_t s_put_reduce(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                    const s_reduce_t *red, troupe__strbuf_t *b, size_t *out_kernel)
{
    troupe_cgen_kernel_t *k = NULL;
    TROUPE_RETURN_IF_ERROR(s_open_kernel(r, b, &k));
    *out_kernel = r->nkernels - 1;
    k->extent[0] = red->extent;
    k->extent[1] = red->outputs;
    k->block[0] = S_REDUCE_THREADS;
    k->block[1] = 1;
    k->grid[0] = (uint32_t)s_reduce_blocks(red);
    k->grid[1] = 1;
    k->fixed_block = true;
    k->reassociates = s_reduce_reassociates(red);
    troupe_status_t st = s_put_reduce_part(g, red, b, "(int64_t)blockIdx.y * gridDim.x + blockIdx.x",
                                           "(int64_t)gridDim.x * gridDim.y");
    troupe__strbuf_puts(b, "}\n");
    return st;
}

/* The code of reduction red for the outputs (block form) or groups of S_WARP_OUTPUTS outputs
 * (warp form) o_start, o_start + o_stride, ...: one 256-thread block each, threadIdx.x the
 * thread. o_start must be the same for a block's threads: they all meet every barrier. */
static troupe_status_t s_put_reduce_part(troupe__cgen_t *g, const s_reduce_t *red,
                                         troupe__strbuf_t *b, const char *o_start,
                                         const char *o_stride)
{
    const troupe_tnode_t *o = red->set->u.set.tn;
    const bool select = red->op != TROUPE_BINOP_ADD, warp = red->warp;
    troupe_c_syntax_t syn;
    if (select)
        TROUPE_RETURN_IF_ERROR(troupe_binop_c_syntax(o->prec, red->op, &syn));
    const char *ty = troupe_prec_c_type(o->prec);
    /* Threads per output, the lane's variable, the extra indent of the warp form's terms (inside
     * `if (t_o < outputs)`). */
    const int n = warp ? S_WARP_LANES : S_REDUCE_THREADS;
    const char *lane = warp ? "red_l" : "red_t";
    const int in = warp ? 1 : 0;
    if (warp && select)
        troupe__strbuf_printf(b,
                              "    /* Warp-level reduction over %" PRId64
                              " terms into each of %" PRId64 " outputs: one warp of %d lanes per\n"
                              "     * output (%d a block), lane l takes terms [l*%" PRId64
                              "/%d, (l+1)*%" PRId64 "/%d) in order, then a tree of\n"
                              "     * adjacent slots in shared memory; the output takes the total "
                              "last. */\n",
                              red->extent, red->outputs, n, S_WARP_OUTPUTS, red->extent, n,
                              red->extent, n);
    else if (warp)
        troupe__strbuf_printf(
            b,
            "    /* Warp-level reduction over %" PRId64 " terms into each of %" PRId64
            " outputs: one warp of %d lanes per\n"
            "     * output (%d a block), lane l sums terms l, l+%d, ... in order, "
            "then a tree in shared memory;\n"
            "     * the output adds the total last. */\n",
            red->extent, red->outputs, n, S_WARP_OUTPUTS, n);
    else if (select)
        troupe__strbuf_printf(b,
                              "    /* Block-level reduction over %" PRId64
                              " terms into each of %" PRId64
                              " outputs: one block of %d threads per output, thread t takes terms\n"
                              "     * [t*%" PRId64 "/%d, (t+1)*%" PRId64
                              "/%d) in order, then a tree of adjacent slots in shared memory;\n"
                              "     * the output takes the total last. */\n",
                              red->extent, red->outputs, n, red->extent, n, red->extent, n);
    else
        troupe__strbuf_printf(
            b,
            "    /* Block-level reduction over %" PRId64 " terms into each of %" PRId64
            " outputs: one block of %d threads per output, thread t sums terms t,\n"
            "     * t+%d, ... in order, then a tree in shared memory; the output "
            "adds the total last. */\n",
            red->extent, red->outputs, n, n);
    troupe__strbuf_printf(b,
                          "    __shared__ %s red_sh[%d];\n"
                          "    const unsigned red_t = threadIdx.x;\n",
                          ty, S_REDUCE_THREADS);
    if (warp) {
        troupe__strbuf_printf(
            b,
            "    const unsigned red_l = red_t %% %du;\n"
            "    /* Groups of %d outputs, one a warp; a warp past the last output still meets "
            "the\n"
            "     * barriers, with no terms. */\n"
            "    " S_NO_UNROLL "    for (int64_t t_g = %s; t_g < %" PRId64 "LL; t_g += %s) {\n"
            "        const int64_t t_o = t_g * %dLL + (int64_t)(red_t / %du);\n",
            n, S_WARP_OUTPUTS, o_start, (red->outputs + S_WARP_OUTPUTS - 1) / S_WARP_OUTPUTS,
            o_stride, S_WARP_OUTPUTS, n);
    } else {
        troupe__strbuf_printf(
            b, "    " S_NO_UNROLL "    for (int64_t t_o = %s; t_o < %" PRId64 "LL; t_o += %s) {\n",
            o_start, red->outputs, o_stride);
    }
    s_put_decompose(g, b, red, true, "t_o", 2);
    troupe__strbuf_printf(b, "        %s red_acc = 0;\n", ty);
    if (warp)
        troupe__strbuf_printf(b, "        if (t_o < %" PRId64 "LL) {\n", red->outputs);
    if (select) {
        troupe__strbuf_repeat(b, "    ", 2 + in);
        troupe__strbuf_printf(b, "const int64_t red_lo = (int64_t)%s * %" PRId64 "LL / %d;\n", lane,
                              red->extent, n);
        troupe__strbuf_repeat(b, "    ", 2 + in);
        troupe__strbuf_printf(b, "const int64_t red_hi = ((int64_t)%s + 1) * %" PRId64 "LL / %d;\n",
                              lane, red->extent, n);
        troupe__strbuf_repeat(b, "    ", 2 + in);
        troupe__strbuf_puts(b, "for (int64_t t_r = red_lo; t_r < red_hi; t_r++) {\n");
    } else {
        troupe__strbuf_repeat(b, "    ", 2 + in);
        troupe__strbuf_printf(b, "for (int64_t t_r = %s; t_r < %" PRId64 "LL; t_r += %d) {\n", lane,
                              red->extent, n);
    }
    s_put_decompose(g, b, red, false, "t_r", 3 + in);
    troupe_status_t st;
    if (red->term != NULL) {
        troupe__strbuf_repeat(b, "    ", 3 + in);
        troupe__strbuf_printf(b, "%s red_x;\n", ty);
        st = troupe__cgen_emit_value(g, "red_x", red->term, o->prec, 3 + in, b);
        troupe__strbuf_repeat(b, "    ", 3 + in);
        if (select) {
            troupe__strbuf_puts(b, "red_acc = t_r == red_lo ? red_x : ");
            s_put_select(b, red, &syn, "red_acc", "red_x");
            troupe__strbuf_puts(b, ";\n");
        } else {
            troupe__strbuf_puts(b, red->subtracts ? "red_acc = red_acc - red_x;\n"
                                                  : "red_acc = red_acc + red_x;\n");
        }
    } else {
        troupe__strbuf_repeat(b, "    ", 3 + in);
        troupe__strbuf_printf(b, "%s red_x, red_y;\n", ty);
        st = troupe__cgen_emit_value(g, "red_x", red->fx, o->prec, 3 + in, b);
        if (st == TROUPE_OK)
            st = troupe__cgen_emit_value(g, "red_y", red->fy, o->prec, 3 + in, b);
        troupe__strbuf_repeat(b, "    ", 3 + in);
        troupe__strbuf_printf(b, "red_acc = %s(red_x, red_y, red_acc);\n",
                              o->prec == TROUPE_PREC_SINGLE ? "fmaf" : "fma");
    }
    for (int i = 0; i < red->nloops; i++)
        troupe__cgen_bind_sym(g, red->loops[i]->u.for_loop.sym, false, 0, 0);
    if (warp)
        troupe__strbuf_puts(b, "            }\n");
    troupe__strbuf_puts(b, "        }\n"
                           "        red_sh[red_t] = red_acc;\n"
                           "        __syncthreads();\n");
    if (select) {
        troupe__strbuf_printf(b,
                              "        for (unsigned red_s = 1u; red_s < %du; red_s <<= 1) {\n"
                              "            if ((%s & (2u * red_s - 1u)) == 0u)\n"
                              "                red_sh[red_t] = ",
                              n, lane);
        s_put_select(b, red, &syn, "red_sh[red_t]", "red_sh[red_t + red_s]");
        troupe__strbuf_puts(b, ";\n");
    } else {
        troupe__strbuf_printf(b,
                              "        for (unsigned red_s = %du; red_s > 0u; red_s >>= 1) {\n"
                              "            if (%s < red_s)\n"
                              "                red_sh[red_t] = red_sh[red_t] + "
                              "red_sh[red_t + red_s];\n",
                              n / 2, lane);
    }
    troupe__strbuf_puts(b, "            __syncthreads();\n"
                           "        }\n");
    if (warp)
        troupe__strbuf_printf(b, "        if (red_l == 0u && t_o < %" PRId64 "LL) {\n",
                              red->outputs);
    else
        troupe__strbuf_puts(b, "        if (red_t == 0) {\n");
    /* The output's index uses only the mapped loops: bind them again for its access. */
    for (int i = 0; i < red->nloops; i++)
        if (red->mapped[i])
            troupe__cgen_bind_sym(g, red->loops[i]->u.for_loop.sym, true,
                                  red->loops[i]->u.for_loop.from, red->loops[i]->u.for_loop.to);
    troupe__strbuf_t acc = TROUPE__STRBUF_INIT;
    troupe__cgen_put_access(g, &acc, o, red->set->u.set.idcs);
    for (int i = 0; i < red->nloops; i++)
        troupe__cgen_bind_sym(g, red->loops[i]->u.for_loop.sym, false, 0, 0);
    const char *at = acc.data ? acc.data : "";
    /* The total: slot 0 of the block, or of the warp (lane 0's own slot, red_t). */
    const char *total = warp ? "red_sh[red_t]" : "red_sh[0]";
    troupe__strbuf_printf(b, "            %.*s = ", (int)acc.len, at);
    if (select)
        s_put_select(b, red, &syn, at, total);
    else
        troupe__strbuf_printf(b, "%.*s + %s", (int)acc.len, at, total);
    troupe__strbuf_puts(b, ";\n");
    if (acc.failed)
        b->failed = true;
    troupe__strbuf_reset(&acc);
    if (warp)
        /* Lane 0 read only its own slot, which only it writes next; every other slot was
         * last read before the tree's last barrier. */
        troupe__strbuf_puts(b,
                            "        } /* no barrier: lane 0 read only the slot it writes next */\n"
                            "    }\n");
    else
        troupe__strbuf_puts(b,
                            "        }\n"
                            "        __syncthreads(); /* red_sh is reused by the next output */\n"
                            "    }\n");
    return st;
}

/* ---- GEMM steps --------------------------------------------------------------------------- */

/* The batch loops of a GEMM step: loops peeled off above the product (outermost first), then
 * the product's own outer loops (compiler/gemm.h's merged nests). */
typedef struct s_batch {
    int n;
    int32_t sym[TROUPE_GEMM_MAX_LOOPS + TROUPE_CGEN_GEMM_MAX_BATCH];
    int64_t ext[TROUPE_GEMM_MAX_LOOPS + TROUPE_CGEN_GEMM_MAX_BATCH];
} s_batch_t;

/* peeled (n loops, outermost first) followed by gm's outer loops. */
static void s_batch_of(const troupe_gemm_t *gm, const s_batch_t *peeled, s_batch_t *out)
{
    *out = peeled != NULL ? *peeled : (s_batch_t){0};
    for (int o = 0; o < gm->nouter; o++) {
        out->sym[out->n] = gm->outer_syms[o];
        out->ext[out->n++] = gm->outer_ext[o];
    }
}

/* Whether sym is one of the batch's loops. */
static bool s_batch_has(const s_batch_t *bt, int32_t sym)
{
    for (int o = 0; o < bt->n; o++)
        if (bt->sym[o] == sym)
            return true;
    return false;
}

/* s itself, or the one statement inside SEQs of one item each. */
static const troupe_ll_t *s_only_statement(const troupe_ll_t *s)
{
    while (s != NULL && s->kind == TROUPE_LL_SEQ && s->u.seq.count == 1)
        s = s->u.seq.items[0];
    return s;
}

/* The depth of sym's loop in the perfect nest from `nest` (0: nest itself), or -1. */
static int s_loop_depth(const troupe_ll_t *nest, int32_t sym)
{
    int d = 0;
    for (const troupe_ll_t *l = nest; l != NULL && l->kind == TROUPE_LL_FOR; d++) {
        if (l->u.for_loop.sym == sym)
            return d;
        const troupe_ll_t *body = s_only_statement(l->u.for_loop.body);
        l = body;
    }
    return -1;
}

/* Fills the batch of call c from gm's outer loops (nest: the product's loop nest): false when
 * the tiles could not run it as the nest does: too many batch loops, a stride that is negative,
 * an accumulating batch loop inside one of the product's k loops (the sums' order would
 * change), or batch points whose C blocks could overlap (they run in parallel). */
static bool s_gemm_batch(const troupe_gemm_t *gm, const s_batch_t *bt, const troupe_ll_t *nest,
                         troupe_cgen_gemm_call_t *c)
{
    if (bt->n == 0)
        return true;
    if (bt->n > TROUPE_CGEN_GEMM_MAX_BATCH || nest == NULL)
        return false;
    const troupe_gemm_operand_t *ops[3] = {&gm->a, &gm->b, &gm->c};
    troupe_cgen_gemm_operand_t *outs[3] = {&c->a, &c->b, &c->c};
    c->nbatch = bt->n;
    int deepest_acc = -1, shallowest_k = 1 << 30;
    for (int o = 0; o < bt->n; o++) {
        c->batch_ext[o] = bt->ext[o];
        for (int i = 0; i < 3; i++) {
            outs[i]->batch_stride[o] = troupe_gemm_sym_stride(ops[i]->tn, ops[i]->idcs, bt->sym[o]);
            if (outs[i]->batch_stride[o] < 0)
                return false;
        }
        if (c->c.batch_stride[o] == 0) {
            int d = s_loop_depth(nest, bt->sym[o]);
            if (d < 0)
                return false;
            deepest_acc = d > deepest_acc ? d : deepest_acc;
        }
    }
    for (int s = 0; s < gm->nsyms; s++)
        if (troupe_gemm_sym_stride(gm->c.tn, gm->c.idcs, gm->syms[s]) == 0) { /* a k loop */
            int d = s_loop_depth(nest, gm->syms[s]);
            if (d < 0)
                return false;
            shallowest_k = d < shallowest_k ? d : shallowest_k;
        }
    if (deepest_acc >= shallowest_k)
        return false;
    /* the parallel batch loops, by stride: each steps past all the blocks of the ones below */
    bool done[TROUPE_CGEN_GEMM_MAX_BATCH] = {false};
    int64_t span = (c->m - 1) * gm->c.ld + c->n;
    for (;;) {
        int next = -1;
        for (int o = 0; o < c->nbatch; o++)
            if (!done[o] && c->c.batch_stride[o] > 0 && c->batch_ext[o] > 1 &&
                (next < 0 || c->c.batch_stride[o] < c->c.batch_stride[next]))
                next = o;
        if (next < 0)
            break;
        if (c->c.batch_stride[next] < span)
            return false;
        span = c->c.batch_stride[next] * (c->batch_ext[next] - 1) + span;
        done[next] = true;
    }
    return true;
}

/* The call's operand for o: the node's parameter and its base offset over static indices.
 * false when some other symbol moves the base (then the product is no GEMM step). */
static bool s_gemm_operand(const troupe_cgen_result_t *r, const troupe_ll_proc_t *proc,
                           const troupe_gemm_t *gm, const s_batch_t *bt,
                           const troupe_gemm_operand_t *o, troupe_cgen_gemm_operand_t *out)
{
    memset(out, 0, sizeof *out);
    ptrdiff_t p = troupe_cgen_find_node_param(r, o->tn);
    if (p < 0)
        return false;
    out->param = (size_t)p;
    out->trans = o->trans;
    out->ld = o->ld;
    int64_t stride = 1;
    for (int ax = o->tn->ndims - 1; ax >= 0; ax--) {
        const troupe_axis_index_t *idx = &o->idcs[ax];
        out->offset += idx->offset * stride;
        for (int t = 0; t < idx->nterms; t++) {
            int32_t sym = idx->terms[t].sym;
            if (troupe_gemm_has_sym(gm, sym) || s_batch_has(bt, sym))
                continue; /* the call's own loops; the batch loops: batch_stride */
            if (!proc->syms[sym].is_static)
                return false;
            size_t sp = 0;
            while (sp < r->nparams && !(r->params[sp].kind == TROUPE_CGEN_PARAM_STATIC_IDX &&
                                        r->params[sp].sym == sym))
                sp++;
            if (sp == r->nparams || out->nterms == TROUPE_CGEN_GEMM_MAX_TERMS)
                return false;
            out->static_param[out->nterms] = sp;
            out->coeff[out->nterms++] = idx->terms[t].coeff * stride;
        }
        stride *= o->tn->dims[ax];
    }
    return true;
}

/* The call of product gm over the routine's parameters (operands, precision, extents, the
 * batch of gm's outer loops; the rest zero): false when an operand's base moves with a symbol
 * other than a static index or a batch loop, or the batch does not fit s_gemm_batch. nest:
 * the product's loop nest. */
static bool s_gemm_call(troupe__cgen_t *g, const troupe_cgen_result_t *r, const troupe_gemm_t *gm,
                        const s_batch_t *peeled, const troupe_ll_t *nest,
                        troupe_cgen_gemm_call_t *c)
{
    memset(c, 0, sizeof *c);
    const troupe_ll_proc_t *proc = troupe__cgen_proc(g);
    s_batch_t bt;
    s_batch_of(gm, peeled, &bt);
    if (!s_gemm_operand(r, proc, gm, &bt, &gm->a, &c->a) ||
        !s_gemm_operand(r, proc, gm, &bt, &gm->b, &c->b) ||
        !s_gemm_operand(r, proc, gm, &bt, &gm->c, &c->c))
        return false;
    c->prec = gm->prec;
    c->m = gm->m;
    c->n = gm->n;
    c->k = gm->k;
    return s_gemm_batch(gm, &bt, nest, c);
}

/* The loops above a product that the matcher does not take at the top of `nest` (a FOR): peels
 * up to TROUPE_CGEN_GEMM_MAX_BATCH loops from 0, each with one statement for its body, until
 * the nest below is a product (YES): then *gm is it, *peeled the loops. False otherwise. */
static bool s_gemm_peel(const troupe_ll_t *nest, troupe_gemm_t *gm, s_batch_t *peeled)
{
    *peeled = (s_batch_t){0};
    const troupe_ll_t *l = nest;
    for (int d = 0; d < TROUPE_CGEN_GEMM_MAX_BATCH; d++) {
        if (l == NULL || l->kind != TROUPE_LL_FOR || l->u.for_loop.from != 0)
            return false;
        peeled->sym[peeled->n] = l->u.for_loop.sym;
        peeled->ext[peeled->n++] = l->u.for_loop.to + 1;
        const troupe_ll_t *body = s_only_statement(l->u.for_loop.body);
        const char *why = NULL;
        if (body != NULL && body->kind == TROUPE_LL_FOR &&
            troupe_gemm_match(body, gm, &why) == TROUPE_GEMM_YES &&
            peeled->n + gm->nouter <= TROUPE_CGEN_GEMM_MAX_BATCH)
            return true;
        l = body;
    }
    return false;
}

/* Whether the top-level statements from items[at] are a product the GEMM step takes, with the
 * parts of its epilogue (compiler/gemm.h) cuBLASLt takes: a zeroing (beta = 0), an initial bias
 * b[j] (beta = 0 and the bias epilogue) and a post pass in place (relu, bias b[j]). A bias b[i]
 * or a post pass into another node stays kernels of its own (cuBLASLt's bias runs along the
 * rows of its column-major output, which are troupe's columns j, and it writes one output).
 * Fills the step's call and ep with the parts taken; *used: the statements they are. */
static bool s_gemm_step(troupe__cgen_t *g, const troupe_cgen_result_t *r,
                        const troupe_ll_t *const *items, size_t n, size_t at, troupe_gemm_t *gm,
                        troupe_gemm_epilogue_t *ep, size_t *used, troupe_cgen_step_t *step)
{
    const char *why = NULL;
    if (troupe_gemm_match_window(items, n, at, gm, ep, used, &why) != TROUPE_GEMM_YES) {
        /* a product inside loops the matcher does not take (a batch: attention's heads): the
         * product alone, over them */
        s_batch_t peeled;
        if (!s_gemm_peel(items[at], gm, &peeled) || gm->factor_prec != gm->prec)
            return false;
        memset(ep, 0, sizeof *ep);
        *used = 1;
        memset(step, 0, sizeof *step);
        step->kind = TROUPE_CGEN_STEP_GEMM;
        return s_gemm_call(g, r, gm, &peeled, items[at], &step->gemm);
    }
    if (gm->factor_prec != gm->prec || /* bfloat16/half factors: no cuBLAS step yet (tiles) */
        ep->zero_slice > 0 ||   /* the zeroing a kernel of its own; the product matches at at + 1 */
        ep->init_slice != NULL) /* the initial values likewise */
        return false;
    if (ep->init != NULL && ep->bias_axis != TROUPE_GEMM_BIAS_N)
        return false; /* the init runs as a kernel; the product matches at at + 1 */
    bool pre = ep->beta_zero || ep->init != NULL;
    /* batched: the product alone (a zeroing or initial values run as kernels of their own, the
     * product then matches at at + 1; a post pass after it, below; a zeroing its blocks make
     * redundant is dropped for beta = 0 by s_plan_zero_covers) */
    if (gm->nouter > 0 && pre)
        return false;
    if (ep->post != NULL &&
        (gm->nouter > 0 || ep->d != gm->c.tn ||
         (!ep->bias_in_init && ep->bias != NULL && ep->bias_axis != TROUPE_GEMM_BIAS_N))) {
        if (!ep->bias_in_init)
            ep->bias = NULL;
        ep->post = NULL;
        ep->relu = false;
    }
    *used = 1 + (pre ? 1 : 0) + (ep->post != NULL ? 1 : 0);
    memset(step, 0, sizeof *step);
    step->kind = TROUPE_CGEN_STEP_GEMM;
    troupe_cgen_gemm_call_t *c = &step->gemm;
    if (!s_gemm_call(g, r, gm, NULL, items[at + (pre ? 1 : 0)], c))
        return false;
    if (ep->bias != NULL) { /* read at j from element 0: no other term (compiler/gemm.h) */
        ptrdiff_t p = troupe_cgen_find_node_param(r, ep->bias);
        if (p < 0)
            return false;
        c->bias.param = (size_t)p;
    }
    c->beta_zero = pre;
    c->epilogue = ep->relu ? (ep->bias ? TROUPE_CGEN_GEMM_EPI_RELU_BIAS : TROUPE_CGEN_GEMM_EPI_RELU)
                           : (ep->bias ? TROUPE_CGEN_GEMM_EPI_BIAS : TROUPE_CGEN_GEMM_EPI_NONE);
    return true;
}

/* The tile shape of a GEMM fallback kernel: a block of S_GEMM_THREADS threads computes a bm x bn
 * tile of C, each thread a tm x tn micro-tile in registers (rows ty + r*(bm/tm), columns
 * tx + c*(bn/tn)), with bk-deep slices of A and B staged in shared memory. */
typedef struct s_tile {
    int bm, bn, bk, tm, tn;
} s_tile_t;

#define S_GEMM_THREADS 256

/* The tile of a product whose output computes in `compute` (single or double: the shared slices
 * and the accumulators hold that type, whatever the operands' storage precisions). */
/* Single-precision products with fewer 128x128 tiles than this take 64x64 tiles (0: never;
 * troupe__cgen_cuda_set_gemm_few_tiles): 512^3 was 16 blocks of 128x128 on an H200's 132
 * multiprocessors, 0.25x cublasSgemm. */
#define S_GEMM_FEW_TILES 128
static int64_t s_gemm_few_tiles = S_GEMM_FEW_TILES;

void troupe__cgen_cuda_set_gemm_few_tiles(int64_t tiles)
{
    s_gemm_few_tiles = tiles < 0 ? S_GEMM_FEW_TILES : tiles;
}

static s_tile_t s_gemm_tile(troupe_prec_t compute, int64_t m, int64_t n)
{
    /* single: 128x128 tiles of 8x8 per thread (64 accumulators), 2 x 8 x 132 floats = 8.25 KiB
     * of shared memory; double, and single with few tiles: 64x64 of 4x4, 2 x 16 x 68 values =
     * 17 KiB (double). Both 16x16 threads, well inside the 48 KiB a block gets without opting
     * in. */
    bool few = ((m + 127) / 128) * ((n + 127) / 128) < s_gemm_few_tiles;
    return compute == TROUPE_PREC_SINGLE && !few ? (s_tile_t){128, 128, 8, 8, 8}
                                                 : (s_tile_t){64, 64, 16, 4, 4};
}

/* `(<ident> + <offset expression>)`: a GEMM operand's base pointer. */
static void s_put_gemm_base(const troupe_cgen_result_t *r, troupe__strbuf_t *b,
                            const troupe_cgen_gemm_operand_t *o)
{
    troupe__strbuf_printf(b, "(%s + (%" PRId64 "LL", r->params[o->param].ident, o->offset);
    for (int t = 0; t < o->nterms; t++)
        troupe__strbuf_printf(b, " + %" PRId64 "LL * %s", o->coeff[t],
                              r->params[o->static_param[t]].ident);
    troupe__strbuf_puts(b, "))");
}

/* Loads one bk-deep slice of A (a: true) or B into shared memory: element e of the tile
 * (consecutive threads, consecutive addresses of the operand) into gm_as[k][i] / gm_bs[k][j],
 * converted into the computation type by conv (the nest's GET conversion), zero outside the
 * matrix. */
static void s_put_gemm_load(troupe__strbuf_t *b, const s_tile_t *t, bool a, bool trans, int64_t ld,
                            int64_t rows, int64_t k, const char *ty, const troupe_c_syntax_t *conv)
{
    int span = a ? t->bm : t->bn; /* the tile's extent along i (A) or j (B) */
    /* Contiguous along k: A untransposed (A[i*ld + k]), B transposed (B[j*ld + k]). */
    bool k_inner = a ? !trans : trans;
    const char *arr = a ? "gm_as" : "gm_bs", *ptr = a ? "gm_a" : "gm_b",
               *o0 = a ? "gm_i0" : "gm_j0";
    troupe__strbuf_printf(b,
                          "            for (int gm_l = 0; gm_l < %d; gm_l++) {\n"
                          "                const int gm_e = gm_tid + %d * gm_l;\n",
                          span * t->bk / S_GEMM_THREADS, S_GEMM_THREADS);
    if (k_inner)
        troupe__strbuf_printf(b, "                const int gm_r = gm_e / %d, gm_k = gm_e %% %d;\n",
                              t->bk, t->bk);
    else
        troupe__strbuf_printf(b, "                const int gm_k = gm_e / %d, gm_r = gm_e %% %d;\n",
                              span, span);
    troupe__strbuf_printf(b,
                          "                const int64_t gm_gr = %s + gm_r, gm_gk = gm_k0 + gm_k;\n"
                          "                %s[gm_k][gm_r] = (gm_gr < %" PRId64
                          "LL && gm_gk < %" PRId64 "LL) ? %s%s[",
                          o0, arr, rows, k, conv->piece[0], ptr);
    /* A: op(A)[i,k] at A[i*ld + k] or A[k*ld + i]; B: op(B)[k,j] at B[k*ld + j] or B[j*ld + k]. */
    if (k_inner)
        troupe__strbuf_printf(b, "gm_gr * %" PRId64 "LL + gm_gk", ld);
    else
        troupe__strbuf_printf(b, "gm_gk * %" PRId64 "LL + gm_gr", ld);
    troupe__strbuf_printf(b, "]%s : (%s)0;\n            }\n", conv->piece[1], ty);
}

/* The multiply-adds of `count` k steps of the staged slices (count: a literal or gm_kt), each
 * result wrapped in rnd[0] .. rnd[1] (the round trip through a small-float output: the value
 * the nest stores and reads back at the next k; empty otherwise). */
static void s_put_gemm_steps(troupe__strbuf_t *b, const s_tile_t *t, bool fma, bool single,
                             const char *count, const char *ty, const char *const rnd[2])
{
    troupe__strbuf_printf(b,
                          "                for (int gm_kk = 0; gm_kk < %s; gm_kk++) {\n"
                          "                    %s gm_ra[%d], gm_rb[%d];\n"
                          "                    for (int gm_x = 0; gm_x < %d; gm_x++)\n"
                          "                        gm_ra[gm_x] = gm_as[gm_kk][gm_ty + %d * gm_x];\n"
                          "                    for (int gm_y = 0; gm_y < %d; gm_y++)\n"
                          "                        gm_rb[gm_y] = gm_bs[gm_kk][gm_tx + %d * gm_y];\n"
                          "                    for (int gm_x = 0; gm_x < %d; gm_x++)\n"
                          "                        for (int gm_y = 0; gm_y < %d; gm_y++)\n",
                          count, ty, t->tm, t->tn, t->tm, t->bm / t->tm, t->tn, t->bn / t->tn,
                          t->tm, t->tn);
    if (fma)
        troupe__strbuf_printf(b,
                              "                            gm_acc[gm_x][gm_y] = %s%s(gm_ra[gm_x], "
                              "gm_rb[gm_y], gm_acc[gm_x][gm_y])%s;\n",
                              rnd[0], single ? "fmaf" : "fma", rnd[1]);
    else
        troupe__strbuf_printf(b,
                              "                            gm_acc[gm_x][gm_y] = "
                              "%sgm_acc[gm_x][gm_y] + gm_ra[gm_x] * gm_rb[gm_y]%s;\n",
                              rnd[0], rnd[1]);
    troupe__strbuf_puts(b, "                }\n");
}

/* The offsets of A, B (and C when oc is not NULL) at batch point `index` of the parallel batch
 * loops (parallel: C moves along them) or of the accumulating ones, as int64 declarations
 * named oa, ob, oc: the loops in order, the last the fastest. */
static void s_put_batch_offsets(troupe__strbuf_t *b, const troupe_cgen_gemm_call_t *c,
                                bool parallel, const char *index, const char *oa, const char *ob,
                                const char *oc, const char *indent)
{
    const troupe_cgen_gemm_operand_t *ops[3] = {&c->a, &c->b, &c->c};
    const char *names[3] = {oa, ob, oc};
    for (int i = 0; i < 3; i++) {
        if (names[i] == NULL)
            continue;
        troupe__strbuf_printf(b, "%sconst int64_t %s = 0", indent, names[i]);
        int64_t div = 1;
        for (int o = c->nbatch - 1; o >= 0; o--) {
            if ((c->c.batch_stride[o] != 0) != parallel)
                continue;
            if (ops[i]->batch_stride[o] != 0)
                troupe__strbuf_printf(b,
                                      " + %s / %" PRId64 "LL %% %" PRId64 "LL * %" PRId64 "LL",
                                      index, div, c->batch_ext[o], ops[i]->batch_stride[o]);
            div *= c->batch_ext[o];
        }
        troupe__strbuf_puts(b, ";\n");
    }
}

/* The storage precisions of a tiled product's operands A, B and C. */
typedef struct s_gemm_precs {
    troupe_prec_t a, b, c;
} s_gemm_precs_t;

/* One kernel of shared-memory tiles (cgen.h, "CUDA dialect"): the GEMM step's fallback, or the
 * kernel of a product the step refuses for its precisions. The operands are stored in p's
 * precisions; everything computes in C's computation type (c->prec is not read). */
static troupe_status_t s_put_gemm_tiled(troupe_cgen_result_t *r, const troupe_cgen_gemm_call_t *c,
                                        const s_gemm_precs_t *p, bool fma, troupe__strbuf_t *b,
                                        size_t *out_kernel)
{
    troupe_prec_t cp = troupe_prec_compute(p->c);
    troupe_c_syntax_t conv_a, conv_b, conv_c, conv_out;
    TROUPE_RETURN_IF_ERROR(troupe_c_convert_precision(p->a, cp, &conv_a));
    TROUPE_RETURN_IF_ERROR(troupe_c_convert_precision(p->b, cp, &conv_b));
    TROUPE_RETURN_IF_ERROR(troupe_c_convert_precision(p->c, cp, &conv_c));
    TROUPE_RETURN_IF_ERROR(troupe_c_convert_precision(cp, p->c, &conv_out));
    char rnd_open[2 * TROUPE_C_SYNTAX_PIECE_SIZE], rnd_close[2 * TROUPE_C_SYNTAX_PIECE_SIZE];
    snprintf(rnd_open, sizeof rnd_open, "%s%s", conv_c.piece[0], conv_out.piece[0]);
    snprintf(rnd_close, sizeof rnd_close, "%s%s", conv_out.piece[1], conv_c.piece[1]);
    const char *const rnd[2] = {rnd_open, rnd_close};
    troupe_cgen_kernel_t *k = NULL;
    TROUPE_RETURN_IF_ERROR(s_open_kernel(r, b, &k));
    *out_kernel = r->nkernels - 1;
    s_tile_t t = s_gemm_tile(cp, c->m, c->n);
    bool single = cp == TROUPE_PREC_SINGLE;
    const char *ty = single ? "float" : "double";
    int64_t tiles_m = (c->m + t.bm - 1) / t.bm, tiles_n = (c->n + t.bn - 1) / t.bn;
    k->extent[0] = c->n;
    k->extent[1] = c->m;
    k->block[0] = S_GEMM_THREADS;
    k->block[1] = 1;
    k->grid[1] = 1;
    k->fixed_block = true;
    /* batched (cgen.h): the parallel batch loops (C moves) share the grid with the tiles; the
     * accumulating ones (C stays) run in order inside each tile, between its start from C (or
     * zero) and its store */
    const bool batched = c->nbatch > 0;
    int64_t npar = 1, nred = 1;
    for (int o = 0; o < c->nbatch; o++)
        *(c->c.batch_stride[o] != 0 ? &npar : &nred) *= c->batch_ext[o];
    k->grid[0] = s_grid(npar * tiles_m * tiles_n, 1);
    const char *base = batched ? "0" : "";
    troupe__strbuf_printf(b,
                          "    /* Tiles of %dx%d of C per block (%d threads, %dx%d each in "
                          "registers), %d-deep slices of A and B in shared memory; every element "
                          "sums k = 0, 1, ... in order from %s%s. */\n"
                          "    __shared__ %s gm_as[%d][%d];\n"
                          "    __shared__ %s gm_bs[%d][%d];\n"
                          "    const %s *gm_a%s = ",
                          t.bm, t.bn, S_GEMM_THREADS, t.tm, t.tn, t.bk,
                          c->beta_zero ? "zero" : "C's value",
                          batched ? ", over the batch points that accumulate into it in turn" : "",
                          ty, t.bk, t.bm + 4, ty, t.bk, t.bn + 4, troupe_prec_c_type(p->a), base);
    s_put_gemm_base(r, b, &c->a);
    troupe__strbuf_printf(b, ";\n    const %s *gm_b%s = ", troupe_prec_c_type(p->b), base);
    s_put_gemm_base(r, b, &c->b);
    troupe__strbuf_printf(b, ";\n    %s *gm_c%s = ", troupe_prec_c_type(p->c), base);
    s_put_gemm_base(r, b, &c->c);
    troupe__strbuf_printf(
        b,
        ";\n"
        "    const int gm_tid = (int)threadIdx.x, gm_tx = gm_tid %% %d, gm_ty = gm_tid / %d;\n"
        "    " S_NO_UNROLL
        "    for (int64_t gm_tile = (int64_t)blockIdx.y * gridDim.x + blockIdx.x; gm_tile < "
        "%" PRId64 "LL; gm_tile += (int64_t)gridDim.x * gridDim.y) {\n",
        t.bn / t.tn, t.bn / t.tn, npar * tiles_m * tiles_n);
    if (batched) {
        troupe__strbuf_printf(b,
                              "        const int64_t gm_p = gm_tile / %" PRId64
                              "LL, gm_t = gm_tile %% %" PRId64 "LL;\n",
                              tiles_m * tiles_n, tiles_m * tiles_n);
        s_put_batch_offsets(b, c, true, "gm_p", "gm_pa", "gm_pb", "gm_pc", "        ");
        troupe__strbuf_printf(b, "        %s *gm_c = gm_c0 + gm_pc;\n", troupe_prec_c_type(p->c));
    }
    const char *tile = batched ? "gm_t" : "gm_tile";
    troupe__strbuf_printf(
        b,
        "        const int64_t gm_i0 = %s / %" PRId64 "LL * %d, gm_j0 = %s %% %" PRId64
        "LL * %d;\n"
        "        %s gm_acc[%d][%d];\n"
        "        for (int gm_x = 0; gm_x < %d; gm_x++)\n"
        "            for (int gm_y = 0; gm_y < %d; gm_y++) {\n"
        "                const int64_t gm_i = gm_i0 + gm_ty + %d * gm_x, gm_j = gm_j0 + gm_tx + %d "
        "* "
        "gm_y;\n",
        tile, tiles_n, t.bm, tile, tiles_n, t.bn, ty, t.tm, t.tn, t.tm, t.tn, t.bm / t.tm,
        t.bn / t.tn);
    if (c->beta_zero)
        troupe__strbuf_puts(b, "                gm_acc[gm_x][gm_y] = 0;\n");
    else
        troupe__strbuf_printf(b,
                              "                gm_acc[gm_x][gm_y] = (gm_i < %" PRId64
                              "LL && gm_j < %" PRId64 "LL) ? %sgm_c[gm_i * %" PRId64
                              "LL + gm_j]%s : (%s)0;\n",
                              c->m, c->n, conv_c.piece[0], c->c.ld, conv_c.piece[1], ty);
    troupe__strbuf_puts(b, "            }\n");
    if (batched) {
        troupe__strbuf_printf(b, "        for (int64_t gm_r = 0; gm_r < %" PRId64 "LL; gm_r++) {\n",
                              nred);
        s_put_batch_offsets(b, c, false, "gm_r", "gm_ra0", "gm_rb0", NULL, "        ");
        troupe__strbuf_printf(b,
                              "        const %s *gm_a = gm_a0 + gm_pa + gm_ra0;\n"
                              "        const %s *gm_b = gm_b0 + gm_pb + gm_rb0;\n",
                              troupe_prec_c_type(p->a), troupe_prec_c_type(p->b));
    }
    troupe__strbuf_printf(b,
                          "        for (int64_t gm_k0 = 0; gm_k0 < %" PRId64 "LL; gm_k0 += %d) {\n",
                          c->k, t.bk);
    s_put_gemm_load(b, &t, true, c->a.trans, c->a.ld, c->m, c->k, ty, &conv_a);
    s_put_gemm_load(b, &t, false, c->b.trans, c->b.ld, c->n, c->k, ty, &conv_b);
    troupe__strbuf_printf(b,
                          "            __syncthreads();\n"
                          "            const int gm_kt = %" PRId64
                          "LL - gm_k0 < %d ? (int)(%" PRId64 "LL - gm_k0) : %d;\n"
                          "            if (gm_kt == %d) {\n"
                          "#pragma unroll\n",
                          c->k, t.bk, c->k, t.bk, t.bk);
    char full[16];
    snprintf(full, sizeof full, "%d", t.bk);
    s_put_gemm_steps(b, &t, fma, single, full, ty, rnd);
    troupe__strbuf_puts(b,
                        "            } else { /* the last, partial slice: only its k steps */\n");
    s_put_gemm_steps(b, &t, fma, single, "gm_kt", ty, rnd);
    troupe__strbuf_printf(b,
                          "            }\n"
                          "            __syncthreads();\n"
                          "        }\n"
                          "%s"
                          "        for (int gm_x = 0; gm_x < %d; gm_x++)\n"
                          "            for (int gm_y = 0; gm_y < %d; gm_y++) {\n"
                          "                const int64_t gm_i = gm_i0 + gm_ty + %d * gm_x, gm_j = "
                          "gm_j0 + gm_tx + %d * gm_y;\n"
                          "                if (gm_i < %" PRId64 "LL && gm_j < %" PRId64 "LL)\n"
                          "                    gm_c[gm_i * %" PRId64
                          "LL + gm_j] = %sgm_acc[gm_x][gm_y]%s;\n"
                          "            }\n"
                          "    }\n"
                          "}\n",
                          batched ? "        } /* the accumulating batch points */\n" : "",
                          t.tm, t.tn, t.bm / t.tm, t.bn / t.tn, c->m, c->n, c->c.ld,
                          conv_out.piece[0], conv_out.piece[1]);
    return TROUPE_OK;
}

/* Kernels for one nest: its mapped loops on the grid, else one thread. */
static troupe_status_t s_put_nest(troupe__cgen_t *g, troupe_cgen_result_t *r, const troupe_ll_t *s,
                                  troupe__strbuf_t *b)
{
    s_map_t map;
    size_t kernel = 0;
    TROUPE_RETURN_IF_ERROR(s_plan_nest(s, &map));
    if (map.nmapped > 0)
        return s_put_mapped(g, r, &map, s, b, &kernel);
    return s_put_one_thread_kernel(g, r, &s, 1, b);
}

/* Emits the GEMM step's fallback kernels and adds the step: the statements as written, the
 * product as one kernel of shared-memory tiles. A zeroing just before the product becomes
 * beta = 0 inside that kernel; an initial bias runs as a kernel of its own before it (the
 * tiles then start from C's values, the bias: bit for bit the nest's order), a post pass
 * after it. */
static troupe_status_t s_put_gemm(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                  const troupe_gemm_t *gm, const troupe_gemm_epilogue_t *ep,
                                  troupe_cgen_step_t *step, troupe__strbuf_t *b)
{
    static const char *const epi[] = {"", ", then + bias", ", then relu", ", then relu(+ bias)"};
    char batch[96] = "";
    for (int o = 0, at = 0; o < step->gemm.nbatch && at < (int)sizeof batch; o++)
        at += snprintf(batch + at, sizeof batch - (size_t)at, "%s%" PRId64 "%s",
                       o ? " x " : ", over a batch of ", step->gemm.batch_ext[o],
                       step->gemm.c.batch_stride[o] ? "" : " (accumulating)");
    troupe__strbuf_printf(
        b,
        "\n/* GEMM step: %s = %s%s x %s%s + %s (m %" PRId64 ", n %" PRId64 ", k %" PRId64
        ")%s%s; the kernels below are its fallback. */\n",
        troupe__cgen_node_ident(g, gm->c.tn), troupe__cgen_node_ident(g, gm->a.tn),
        gm->a.trans ? "^T" : "", troupe__cgen_node_ident(g, gm->b.tn), gm->b.trans ? "^T" : "",
        step->gemm.beta_zero ? "0" : "itself", gm->m, gm->n, gm->k, batch,
        epi[step->gemm.epilogue]);
    step->first_kernel = r->nkernels;
    size_t kernel = 0;
    troupe_cgen_gemm_call_t tiles = step->gemm;
    tiles.beta_zero = ep->beta_zero && ep->init == NULL;
    if (ep->init != NULL)
        TROUPE_RETURN_IF_ERROR(s_put_nest(g, r, ep->init, b));
    s_gemm_precs_t precs = {gm->prec, gm->prec, gm->prec};
    TROUPE_RETURN_IF_ERROR(s_put_gemm_tiled(r, &tiles, &precs, gm->fma, b, &kernel));
    if (ep->post != NULL)
        TROUPE_RETURN_IF_ERROR(s_put_nest(g, r, ep->post, b));
    step->nkernels = r->nkernels - step->first_kernel;
    return s_add_step(r, step);
}

/* Whether nest s is a product compiler/gemm.h refuses for its precisions alone (shape_ok) of
 * at least TROUPE_GEMM_MIN_MACS multiply-adds (below, one thread per output is as good) whose
 * operands' base offsets depend only on static indices: then *gm, *c and *why describe it, for
 * s_put_refused_tiles. */
static bool s_refused_tiles(troupe__cgen_t *g, const troupe_cgen_result_t *r, const troupe_ll_t *s,
                            troupe_gemm_t *gm, troupe_cgen_gemm_call_t *c, const char **why)
{
    troupe_gemm_verdict_t v = troupe_gemm_match(s, gm, why);
    if (v == TROUPE_GEMM_YES && gm->factor_prec != gm->prec)
        *why = "bfloat16 or half factors: the C target's library form, no cuBLAS step here";
    else if (v != TROUPE_GEMM_REFUSED || !gm->shape_ok)
        return false;
    if (gm->m * gm->n * gm->k < TROUPE_GEMM_MIN_MACS)
        return false;
    return s_gemm_call(g, r, gm, NULL, s, c);
}

/* The kernel of a product s_refused_tiles takes: its shared-memory tiles in the operands' own
 * precisions, as a plain kernel (no GEMM step: no library takes these precisions). */
static troupe_status_t s_put_refused_tiles(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                           const troupe_gemm_t *gm,
                                           const troupe_cgen_gemm_call_t *c, const char *why,
                                           troupe__strbuf_t *b, size_t *kernel)
{
    s_gemm_precs_t precs = {gm->a.tn->prec, gm->b.tn->prec, gm->c.tn->prec};
    troupe__strbuf_printf(b, "\n/* Tiled product, no GEMM step (%s): %s (%s) = ", why,
                          troupe__cgen_node_ident(g, gm->c.tn), troupe_prec_name(precs.c));
    troupe__strbuf_printf(b, "%s%s (%s) x ", troupe__cgen_node_ident(g, gm->a.tn),
                          gm->a.trans ? "^T" : "", troupe_prec_name(precs.a));
    troupe__strbuf_printf(b,
                          "%s%s (%s) + itself (m %" PRId64 ", n %" PRId64 ", k %" PRId64
                          "). */\n",
                          troupe__cgen_node_ident(g, gm->b.tn), gm->b.trans ? "^T" : "",
                          troupe_prec_name(precs.b), gm->m, gm->n, gm->k);
    return s_put_gemm_tiled(r, c, &precs, gm->fma, b, kernel);
}

/* ---- the routine -------------------------------------------------------------------------- */

/* One line per routine at debug:ir: what one call launches (cgen.h, "CUDA dialect"). */
static void s_log_launches(const troupe_cgen_result_t *r)
{
    size_t kernels = 0, gemms = 0, one_thread = 0;
    for (size_t i = 0; i < r->nsteps; i++) {
        if (r->steps[i].kind == TROUPE_CGEN_STEP_GEMM) {
            gemms++;
            continue;
        }
        kernels++;
        one_thread += r->kernels[r->steps[i].first_kernel].one_thread ? 1 : 0;
    }
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_IR,
               "cgen cuda %s: %zu launches per call: %zu kernels (%zu one-thread), %zu GEMM "
               "steps (a library call each, else their fallback kernels)",
               r->name, kernels + gemms, kernels, one_thread, gemms);
}

/* ---- units and launches ----------------------------------------------------------------- */

/* What one piece of the routine becomes (cgen.h, "CUDA dialect", the plan). */
typedef enum s_unit_kind {
    S_U_MAPPED, /* a nest with mapped loops */
    S_U_ZERO,   /* a ZERO_OUT */
    S_U_REDUCE, /* a block-level or warp-level reduction */
    S_U_SEQ,    /* consecutive statements run by one thread (with a segment's Local arrays) */
    S_U_BLOCK,  /* a segment of statements run by one block, its Local arrays in shared memory */
    S_U_WIDE,   /* a wide segment: every block builds the Local arrays, all share the rest */
    S_U_GEMM,   /* a GEMM step (a launch of its own) */
    S_U_TILES,  /* a refused product's tiles (a launch of its own) */
} s_unit_kind_t;

typedef struct s_unit {
    s_unit_kind_t kind;
    size_t first, count; /* its top-level statements: items[first .. first + count - 1] */
    s_map_t map;         /* MAPPED */
    s_reduce_t red;      /* REDUCE */
    troupe_gemm_t gm;    /* GEMM, TILES */
    troupe_gemm_epilogue_t ep;
    troupe_cgen_step_t step;
    troupe_cgen_gemm_call_t tc;
    const char *why;
    size_t seg; /* SEQ, BLOCK of a segment: its index in s_plan_t.segs; else SIZE_MAX */
    int64_t vblocks;      /* blocks it takes in a horizontal kernel */
    int64_t iters;        /* MAPPED: iterations of its nest's perfect head; ZERO: elements */
    int64_t shared_bytes; /* shared memory it declares */
    s_accesses_t acc;     /* what its statements read and write */
} s_unit_t;

/* A segment: the top-level statements from the first access of some Local arrays to the last
 * (overlapping ranges merged), with those arrays. */
typedef struct s_segment {
    size_t first, last;
    const troupe_tnode_t **locals;
    size_t nlocals, cap;
    int64_t bytes;
    int64_t wide_blocks; /* > 0: a wide segment (s_widen_segment) over this many blocks */
    /* s_pack_segment: the Local arrays share one pool, each at off[k] elements, zeroed before
     * item first_use[k] (arrays whose uses do not overlap share the same elements) */
    bool packed;
    int64_t pool_elems;
    int64_t *off;
    size_t *first_use;
} s_segment_t;

/* A launch: units run by one kernel (horizontal when several), or one GEMM/TILES unit. A serial
 * group is one block running its units in order, a barrier after each statement. */
typedef struct s_group {
    size_t *units;
    size_t n, cap;
    int64_t shared_bytes;
    bool serial;
} s_group_t;

typedef struct s_plan {
    const troupe_ll_t **items;
    size_t nitems;
    s_unit_t *units;
    size_t nunits, ucap;
    s_segment_t *segs;
    size_t nsegs, scap;
    s_group_t *groups;
    size_t ngroups, gcap;
    bool oom;
} s_plan_t;

/* Shared memory a kernel of several parts may declare (a block gets 48 KiB without opting in;
 * the rest is left to the compiler). */
#define S_SHARED_MAX (44 * 1024)
/* A segment alone in its kernel may take all the static shared memory a block gets
 * (TROUPE__CGEN_STATIC_SHARED_MAX, 48 KiB), and past it, as dynamic shared memory, what the
 * target allows (troupe__cgen_cuda_shared_max: troupe_cgen_options_t); nothing joins a launch
 * past S_SHARED_MAX. Local arrays beyond that run on one thread. */
#define S_DYN_ALIGN 16 /* byte alignment of each array in dynamic shared memory */
/* The most iterations of a map or elements of a zeroing that a segment's block takes over
 * (64 per thread) to save their launch. */
#define S_ABSORB_MAX_ITERS (64 * S_BLOCK_THREADS)
/* A wide segment: its statements writing global arrays have more iterations than a block
 * takes over, and the statements building its Local arrays, which every block repeats, at most
 * this many iterations; its grid, at most S_WIDE_GRID_MAX blocks (they grid-stride). */
#define S_WIDE_LOCAL_MAX_ITERS (16 * S_BLOCK_THREADS)
#define S_WIDE_GRID_MAX 1024

static void s_plan_free(s_plan_t *p)
{
    for (size_t i = 0; i < p->nunits; i++)
        troupe_free(p->units[i].acc.v);
    for (size_t i = 0; i < p->nsegs; i++) {
        troupe_free(p->segs[i].locals);
        troupe_free(p->segs[i].off);
        troupe_free(p->segs[i].first_use);
    }
    for (size_t i = 0; i < p->ngroups; i++)
        troupe_free(p->groups[i].units);
    troupe_free(p->units);
    troupe_free(p->segs);
    troupe_free(p->groups);
    troupe_free(p->items);
}

/* The virtual blocks of a map or zeroing of `work` items in a horizontal kernel: one item a
 * thread up to S_HZ_FINE_BLOCKS blocks; past that, S_HZ_COARSE items a thread (at least
 * S_HZ_FINE_BLOCKS blocks), so that finding the part (s_put_horizontal) is paid once for
 * several items: GPT-2 124M's first kernel had 5 M virtual blocks of one item a thread, 13.7 ms
 * on an H200 for about 3 GB of stores. */
#define S_HZ_FINE_BLOCKS 1024
#define S_HZ_COARSE 8
static int64_t s_blocks_of(int64_t work)
{
    int64_t nb = (work + S_BLOCK_THREADS - 1) / S_BLOCK_THREADS;
    if (nb > S_HZ_FINE_BLOCKS) {
        int64_t coarse = (nb + S_HZ_COARSE - 1) / S_HZ_COARSE;
        nb = coarse > S_HZ_FINE_BLOCKS ? coarse : S_HZ_FINE_BLOCKS;
    }
    return nb < 1 ? 1 : nb > S_GRID_MAX ? S_GRID_MAX : nb;
}

/* Appends a unit of `kind` over items[first .. first + count - 1], collecting its accesses. */
static s_unit_t *s_new_unit(s_plan_t *p, s_unit_kind_t kind, size_t first, size_t count)
{
    s_unit_t u;
    memset(&u, 0, sizeof u);
    u.kind = kind;
    u.first = first;
    u.count = count;
    u.seg = SIZE_MAX;
    u.vblocks = 1;
    for (size_t i = first; i < first + count; i++)
        s_collect_ll(&u.acc, p->items[i]);
    if (u.acc.oom || !TROUPE__VEC_PUSH(p->units, p->nunits, p->ucap, u)) {
        troupe_free(u.acc.v);
        p->oom = true;
        return NULL;
    }
    return &p->units[p->nunits - 1];
}

/* The segments of the Local arrays (see s_segment_t), in order. */
static troupe_status_t s_find_segments(troupe__cgen_t *g, s_plan_t *p)
{
    const troupe_ll_proc_t *proc = troupe__cgen_proc(g);
    size_t nn = proc->nnodes;
    ptrdiff_t *first = troupe_calloc(nn ? nn : 1, sizeof *first);
    ptrdiff_t *last = troupe_calloc(nn ? nn : 1, sizeof *last);
    ptrdiff_t *reach = troupe_calloc(p->nitems ? p->nitems : 1, sizeof *reach);
    troupe_status_t st = TROUPE_OK;
    if (first == NULL || last == NULL || reach == NULL)
        goto oom;
    for (size_t k = 0; k < nn; k++)
        first[k] = last[k] = -1;
    for (size_t i = 0; i < p->nitems; i++) {
        reach[i] = -1;
        s_accesses_t a = {0};
        s_collect_ll(&a, p->items[i]);
        bool bad = a.oom;
        for (size_t x = 0; x < a.n; x++) {
            if (!troupe__cgen_node_is_local(g, a.v[x].tn))
                continue;
            for (size_t k = 0; k < nn; k++)
                if (proc->nodes[k] == a.v[x].tn) {
                    if (first[k] < 0)
                        first[k] = (ptrdiff_t)i;
                    last[k] = (ptrdiff_t)i;
                }
        }
        troupe_free(a.v);
        if (bad)
            goto oom;
    }
    for (size_t k = 0; k < nn; k++)
        if (first[k] >= 0 && last[k] > reach[first[k]])
            reach[first[k]] = last[k];
    for (size_t i = 0; i < p->nitems;) {
        if (reach[i] < 0) {
            i++;
            continue;
        }
        s_segment_t seg = {i, (size_t)reach[i], NULL, 0, 0, 0, 0, false, 0, NULL, NULL};
        for (size_t j = i; j <= seg.last; j++)
            if (reach[j] > (ptrdiff_t)seg.last)
                seg.last = (size_t)reach[j];
        for (size_t k = 0; k < nn; k++)
            if (first[k] >= (ptrdiff_t)seg.first && first[k] <= (ptrdiff_t)seg.last) {
                if (!TROUPE__VEC_PUSH(seg.locals, seg.nlocals, seg.cap, proc->nodes[k]))
                    goto oom_seg;
                seg.bytes += (int64_t)proc->nodes[k]->size_bytes;
            }
        if (!TROUPE__VEC_PUSH(p->segs, p->nsegs, p->scap, seg))
            goto oom_seg;
        i = seg.last + 1;
        continue;
    oom_seg:
        troupe_free(seg.locals);
        goto oom;
    }
    goto out;
oom:
    st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
out:
    troupe_free(first);
    troupe_free(last);
    troupe_free(reach);
    return st;
}

/* All iterations of the nest at s (its loops' extents multiplied, as far as each body is one
 * loop), or a ZERO_OUT's elements; 1 for anything else. */
static int64_t s_item_iters(const troupe_ll_t *s)
{
    if (s->kind == TROUPE_LL_ZERO_OUT)
        return troupe_tnode_num_elems(s->u.zero_out);
    int64_t n = 1;
    for (const troupe_ll_t *l = s; l != NULL && l->kind == TROUPE_LL_FOR;
         l = s_only_loop(l->u.for_loop.body))
        n *= s_extent(l);
    return n;
}

static bool s_accesses_node(const s_accesses_t *a, const troupe_tnode_t *tn)
{
    for (size_t x = 0; x < a->n; x++)
        if (a->v[x].tn == tn)
            return true;
    return false;
}

/* Whether a statement (its accesses a) writes a node that is not Local (then, in a wide segment,
 * the blocks share its iterations; else every block runs it). Every Local node a segment's
 * statement touches is one of that segment's arrays (segments span their arrays' uses). */
static bool s_writes_global(troupe__cgen_t *g, const s_accesses_t *a)
{
    for (size_t x = 0; x < a->n; x++)
        if (a->v[x].write && !troupe__cgen_node_is_local(g, a->v[x].tn))
            return true;
    return false;
}

/* Makes segment sg wide when that spreads its work over the GPU: one block running a segment
 * whose statement writing a global array has more iterations than a block takes over (the main
 * job's da2 = dz3 x w3_t at batch 8192 read a Local transposed weight: 10M multiply-adds on
 * 256 threads, 2.2 ms of a 2.4 ms step on an H200) wastes the rest of the device. A wide
 * segment runs on many blocks: each block builds the Local arrays in its own shared memory
 * (the statements writing only Local arrays, repeated by every block: at most
 * S_WIDE_LOCAL_MAX_ITERS iterations in all), and the statements writing global arrays share
 * their mapped iterations among all the blocks' threads (grid-stride), each output element
 * computed by one thread with the operations the interpreter does, in its order. Allowed when
 * every statement writing a global array is a nest with mapped loops that writes no Local
 * array, and no other statement of the segment touches what it writes (a statement reads its
 * own output only at the element it writes, the mapping's rule). Zeroings of global arrays in
 * the segment move before it first when nothing before them in it touches the array (the
 * zeroing of da2 is the case). Returns with the items and sg unchanged when the segment does
 * not qualify. */
static troupe_status_t s_widen_segment(troupe__cgen_t *g, s_plan_t *p, s_segment_t *sg)
{
    if (sg->bytes > S_SHARED_MAX || sg->last <= sg->first)
        return TROUPE_OK;
    size_t n = sg->last - sg->first + 1;
    s_accesses_t *acc = troupe_calloc(n, sizeof *acc);
    bool *hoist = troupe_calloc(n, sizeof *hoist), *global = troupe_calloc(n, sizeof *global);
    troupe_status_t st = TROUPE_OK;
    if (acc == NULL || hoist == NULL || global == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto out;
    }
    bool ok = true;
    for (size_t k = 0; k < n && ok; k++) {
        s_collect_ll(&acc[k], p->items[sg->first + k]);
        if (acc[k].oom) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
            goto out;
        }
    }
    int64_t local_iters = 0, global_iters = 0;
    for (size_t k = 0; k < n && ok; k++) {
        const troupe_ll_t *s = p->items[sg->first + k];
        if (s->kind == TROUPE_LL_COMMENT)
            continue;
        if (s->kind == TROUPE_LL_ZERO_OUT && !troupe__cgen_node_is_local(g, s->u.zero_out)) {
            hoist[k] = true;
            for (size_t j = 0; j < k && hoist[k]; j++)
                hoist[k] = !s_accesses_node(&acc[j], s->u.zero_out);
            ok = hoist[k];
            continue;
        }
        global[k] = s_writes_global(g, &acc[k]);
        if (!global[k]) {
            local_iters += s_item_iters(s);
            continue;
        }
        s_map_t map = {0};
        if (s->kind != TROUPE_LL_FOR) {
            ok = false;
            continue;
        }
        if ((st = s_plan_nest(s, &map)) != TROUPE_OK)
            goto out;
        ok = map.nmapped > 0;
        for (size_t x = 0; x < acc[k].n && ok; x++)
            ok = !(acc[k].v[x].write && troupe__cgen_node_is_local(g, acc[k].v[x].tn));
        if (!ok)
            continue;
        int64_t ex, ey;
        s_map_extents(&map, &ex, &ey);
        if (ex * ey > global_iters)
            global_iters = ex * ey;
    }
    /* what a global statement writes, no other statement (hoisted zeroings aside) touches */
    for (size_t k = 0; k < n && ok; k++) {
        if (!global[k])
            continue;
        for (size_t x = 0; x < acc[k].n && ok; x++) {
            if (!acc[k].v[x].write)
                continue;
            for (size_t j = 0; j < n && ok; j++)
                ok = j == k || hoist[j] || !s_accesses_node(&acc[j], acc[k].v[x].tn);
        }
    }
    if (!ok || global_iters <= S_ABSORB_MAX_ITERS || local_iters > S_WIDE_LOCAL_MAX_ITERS)
        goto out;
    /* the zeroings go before the segment, in their order */
    size_t at = sg->first;
    for (size_t k = 0; k < n; k++) {
        if (!hoist[k])
            continue;
        size_t from = sg->first + k;
        const troupe_ll_t *z = p->items[from];
        memmove(&p->items[at + 1], &p->items[at], (from - at) * sizeof p->items[0]);
        p->items[at++] = z;
    }
    sg->first = at;
    int64_t nb = (global_iters + S_BLOCK_THREADS - 1) / S_BLOCK_THREADS;
    sg->wide_blocks = nb > S_WIDE_GRID_MAX ? S_WIDE_GRID_MAX : nb;
out:
    if (acc != NULL)
        for (size_t k = 0; k < n; k++)
            troupe_free(acc[k].v);
    troupe_free(acc);
    troupe_free(hoist);
    troupe_free(global);
    return st;
}

/* Packs segment sg's Local arrays when, side by side, they pass the static shared memory a
 * block gets (TROUPE__CGEN_STATIC_SHARED_MAX) and all share one precision: arrays whose uses (from
 * their first statement to their last) do not overlap take the same elements of one pool (first
 * fit, in order of first use, each at a multiple of 4 elements), each zeroed just before its first
 * statement instead of all at the start. The main job's loss segment at 256 rows per replica held
 * 48 KiB of Local arrays (the logits, their shifted and exponentiated copies, dz3, w3 transposed:
 * 10 KiB each) and so ran on one GPU thread; no more than 31 KiB of them are in use at once. When
 * the pool fits in what a block may have (troupe__cgen_cuda_shared_max), sg->bytes becomes its
 * size; else nothing changes. */
static troupe_status_t s_pack_segment(troupe__cgen_t *g, s_plan_t *p, s_segment_t *sg)
{
    if (sg->bytes <= TROUPE__CGEN_STATIC_SHARED_MAX || sg->nlocals < 2 || sg->wide_blocks > 0)
        return TROUPE_OK;
    for (size_t k = 1; k < sg->nlocals; k++)
        if (sg->locals[k]->prec != sg->locals[0]->prec)
            return TROUPE_OK;
    size_t nl = sg->nlocals;
    size_t *first = troupe_calloc(nl, sizeof *first), *last = troupe_calloc(nl, sizeof *last),
           *order = troupe_calloc(nl, sizeof *order);
    int64_t *off = troupe_calloc(nl, sizeof *off);
    troupe_status_t st = TROUPE_OK;
    if (first == NULL || last == NULL || order == NULL || off == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto out;
    }
    for (size_t k = 0; k < nl; k++)
        first[k] = SIZE_MAX;
    for (size_t i = sg->first; i <= sg->last; i++) {
        s_accesses_t a = {0};
        s_collect_ll(&a, p->items[i]);
        if (a.oom) {
            troupe_free(a.v);
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
            goto out;
        }
        for (size_t k = 0; k < nl; k++)
            if (s_accesses_node(&a, sg->locals[k])) {
                if (first[k] == SIZE_MAX)
                    first[k] = i;
                last[k] = i;
            }
        troupe_free(a.v);
    }
    for (size_t k = 0; k < nl; k++) {
        if (first[k] == SIZE_MAX) /* declared by the segment but unused: keep the old layout */
            goto out;
        order[k] = k;
    }
    for (size_t a = 1; a < nl; a++) /* by first use (insertion sort: a handful of arrays) */
        for (size_t b = a; b > 0 && first[order[b]] < first[order[b - 1]]; b--) {
            size_t t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    int64_t pool = 0;
    for (size_t a = 0; a < nl; a++) {
        size_t k = order[a];
        int64_t n = (troupe_tnode_num_elems(sg->locals[k]) + 3) / 4 * 4, at = 0;
        for (bool moved = true; moved;) { /* the lowest offset clear of every live placed one */
            moved = false;
            for (size_t c = 0; c < a; c++) {
                size_t j = order[c];
                int64_t nj = (troupe_tnode_num_elems(sg->locals[j]) + 3) / 4 * 4;
                bool live = !(last[j] < first[k] || last[k] < first[j]);
                if (live && at < off[j] + nj && off[j] < at + n) {
                    at = off[j] + nj;
                    moved = true;
                }
            }
        }
        off[k] = at;
        if (at + n > pool)
            pool = at + n;
    }
    int64_t bytes = pool * (int64_t)troupe_prec_size_bytes(sg->locals[0]->prec);
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_IR,
               "cgen cuda: a segment's %zu Local arrays (%" PRId64 " bytes side by side) %s in "
               "%" PRId64 " bytes of shared memory when packed by their uses",
               nl, sg->bytes,
               bytes <= TROUPE__CGEN_STATIC_SHARED_MAX    ? "fit"
               : bytes <= troupe__cgen_cuda_shared_max(g) ? "fit (dynamic shared memory)"
                                                          : "still do not fit",
               bytes);
    if (bytes > troupe__cgen_cuda_shared_max(g))
        goto out;
    sg->packed = true;
    sg->pool_elems = pool;
    sg->bytes = bytes;
    sg->off = off;
    sg->first_use = first;
    off = NULL;
    first = NULL;
out:
    troupe_free(first);
    troupe_free(last);
    troupe_free(order);
    troupe_free(off);
    return st;
}

/* Byte offset of Local array k of a segment that is not packed, in dynamic shared memory (k =
 * nlocals: the bytes of them all): side by side in order, each at a multiple of S_DYN_ALIGN. */
static int64_t s_dyn_offset(const s_segment_t *sg, size_t k)
{
    int64_t at = 0;
    for (size_t i = 0; i < k; i++) {
        at += troupe_tnode_num_elems(sg->locals[i]) *
              (int64_t)troupe_prec_size_bytes(sg->locals[i]->prec);
        at = (at + S_DYN_ALIGN - 1) / S_DYN_ALIGN * S_DYN_ALIGN;
    }
    return at;
}

/* Shared memory segment sg's Local arrays take in a block: their bytes (its pool when packed)
 * when that fits in static shared memory, else their layout in dynamic shared memory. */
static int64_t s_segment_shared_bytes(const s_segment_t *sg)
{
    if (sg->bytes <= TROUPE__CGEN_STATIC_SHARED_MAX || sg->packed)
        return sg->bytes;
    return s_dyn_offset(sg, sg->nlocals);
}

/* Whether a block holds segment sg's Local arrays in dynamic shared memory (beyond 48 KiB). */
static bool s_segment_dynamic(const s_segment_t *sg)
{
    return s_segment_shared_bytes(sg) > TROUPE__CGEN_STATIC_SHARED_MAX;
}

/* Whether top-level item i lies in one of p's segments. */
static bool s_in_segment(const s_plan_t *p, size_t i)
{
    for (size_t k = 0; k < p->nsegs; k++)
        if (i >= p->segs[k].first && i <= p->segs[k].last)
            return true;
    return false;
}

/* The box [lo[ax], hi[ax]] that nest s (a FOR) writes its one output O over, each element
 * once: a perfect nest whose one statement is a SET of O, O the only node it writes and
 * accessed at that index alone, every loop mapped (s_plan_nest, no skew) and each axis index a
 * constant or a dense mixed radix of positive terms (the smallest coefficient 1, each next the
 * one before times its loop's extent), every loop in one term: the nest is a bijection onto
 * the box. False otherwise. */
static bool s_covers_box(const troupe_ll_t *s, const s_map_t *map, const troupe_tnode_t **o,
                         int64_t *lo, int64_t *hi)
{
    const troupe_ll_t *body = NULL;
    int n = 0;
    int64_t iters = 1;
    for (const troupe_ll_t *l = s; l != NULL; l = s_only_loop(body)) {
        if (n == map->nmapped || map->loops[n] != l || map->skew[n] != NULL ||
            l->u.for_loop.from != 0)
            return false;
        n++;
        iters *= s_extent(l);
        body = l->u.for_loop.body;
    }
    if (n != map->nmapped)
        return false;
    const troupe_ll_t *set = s_only(body, TROUPE_LL_SET);
    if (set == NULL || set->u.set.tn->ndims > TROUPE_MAX_DIMS)
        return false;
    *o = set->u.set.tn;
    s_accesses_t a = {0};
    s_collect_ll(&a, s);
    bool ok = !a.oom;
    for (size_t i = 0; i < a.n && ok; i++)
        ok = !(a.v[i].write && a.v[i].tn != *o) &&
             (a.v[i].tn != *o ||
              (a.v[i].idcs != NULL &&
               troupe_axis_indices_equal(a.v[i].idcs, set->u.set.idcs, (*o)->ndims)));
    int64_t volume = 1;
    for (int ax = 0; ax < (*o)->ndims && ok; ax++) {
        const troupe_axis_index_t *x = &set->u.set.idcs[ax];
        int64_t want = 1, span = 1;
        bool used[TROUPE_MAX_INDEX_TERMS] = {false};
        for (int k = 0; k < x->nterms && ok; k++) { /* the term of coefficient `want` next */
            int t = -1;
            for (int q = 0; q < x->nterms; q++)
                if (!used[q] && x->terms[q].coeff == want)
                    t = q;
            const int64_t ext = t >= 0 ? s_nest_extent(&a, x->terms[t].sym) : 0;
            ok = ext > 0;
            if (ok) {
                used[t] = true;
                want *= ext;
                span = want;
            }
        }
        lo[ax] = x->offset;
        hi[ax] = x->offset + span - 1;
        volume *= span;
    }
    troupe_free(a.v);
    return ok && volume == iters;
}

/* The end of the window of top-level items a GEMM step starting at j may take: the next
 * segment's first item, else the last item's end. */
static size_t s_window_end(const s_plan_t *p, size_t j)
{
    size_t end = p->nitems;
    for (size_t k = 0; k < p->nsegs; k++)
        if (p->segs[k].first > j && p->segs[k].first < end)
            end = p->segs[k].first;
    return end;
}

/* Whether item j, the first access after ZERO_OUT i of its node, is a batched product
 * planned as a GEMM step of that one item whose points' blocks tile the node exactly
 * (troupe__cgen_batched_zero): the zeroing then is its beta = 0. */
static bool s_batched_zero_step(troupe__cgen_t *g, const troupe_cgen_result_t *r, const s_plan_t *p,
                                size_t i, size_t j)
{
    troupe_gemm_t gm;
    troupe_gemm_epilogue_t ep;
    troupe_cgen_step_t step;
    size_t used = 0;
    return !s_in_segment(p, j) && p->items[j]->kind == TROUPE_LL_FOR &&
           troupe__cgen_batched_zero(p->items[i], p->items[j]) &&
           s_gemm_step(g, r, p->items, s_window_end(p, j), j, &gm, &ep, &used, &step) &&
           used == 1 && step.gemm.nbatch > 0 && !step.gemm.beta_zero &&
           step.gemm.c.param < r->nparams &&
           r->params[step.gemm.c.param].tn == p->items[i]->u.zero_out;
}

/* Zeroings the nests after them make redundant: a top-level ZERO_OUT of a global node O whose
 * next accesses are nests that each write a box of O once (s_covers_box, planned as mapped
 * nests outside segments, never absorbed into one: s_absorbable), disjoint and together
 * all of O, is dropped (drop[i]), and those nests read O as 0 (zeroed[j] = O): the same values
 * (0 + t is what the zeroed element gave), one pass over O and a read of it fewer (an im2col
 * copy and its bias row on a GPU: 680 MB each for the convnet's conv2 at batch 1024). */
static void s_plan_zero_covers(troupe__cgen_t *g, const troupe_cgen_result_t *r, const s_plan_t *p,
                               bool *drop, const troupe_tnode_t **zeroed, bool *beta0)
{
    for (size_t i = 0; i < p->nitems; i++) {
        const troupe_ll_t *z = p->items[i];
        if (z->kind != TROUPE_LL_ZERO_OUT || troupe__cgen_node_is_local(g, z->u.zero_out) ||
            z->u.zero_out->prec == TROUPE_PREC_UINT4X32 || s_in_segment(p, i))
            continue;
        const troupe_tnode_t *o = z->u.zero_out;
        enum { S_COVERS_MAX = 8 };
        size_t at[S_COVERS_MAX], ncov = 0;
        int64_t lo[S_COVERS_MAX][TROUPE_MAX_DIMS], hi[S_COVERS_MAX][TROUPE_MAX_DIMS];
        int64_t covered = 0;
        const int64_t total = troupe_tnode_num_elems(o);
        for (size_t j = i + 1; j < p->nitems && covered < total; j++) {
            const troupe_ll_t *s = p->items[j];
            if (s->kind == TROUPE_LL_COMMENT)
                continue;
            s_accesses_t a = {0};
            s_collect_ll(&a, s);
            bool touches = a.oom;
            for (size_t k = 0; k < a.n && !touches; k++)
                touches = a.v[k].tn == o;
            troupe_free(a.v);
            if (!touches)
                continue;
            if (ncov == 0 && s_batched_zero_step(g, r, p, i, j)) {
                /* a batched product whose points' blocks tile O: beta = 0 in each call */
                drop[i] = true;
                beta0[j] = true;
                break;
            }
            s_map_t map;
            const troupe_tnode_t *w = NULL;
            int64_t iters = 1;
            if (s->kind != TROUPE_LL_FOR || ncov == S_COVERS_MAX || s_in_segment(p, j) ||
                s_plan_nest(s, &map) != TROUPE_OK ||
                !s_covers_box(s, &map, &w, lo[ncov], hi[ncov]) || w != o)
                break;
            for (int d = 0; d < o->ndims; d++)
                iters *= hi[ncov][d] - lo[ncov][d] + 1;
            bool disjoint = true;
            for (size_t c = 0; c < ncov && disjoint; c++) {
                bool apart = false;
                for (int d = 0; d < o->ndims && !apart; d++)
                    apart = hi[c][d] < lo[ncov][d] || hi[ncov][d] < lo[c][d];
                disjoint = apart;
            }
            if (!disjoint)
                break;
            at[ncov++] = j;
            covered += iters;
        }
        if (covered != total || ncov == 0)
            continue;
        drop[i] = true;
        for (size_t c = 0; c < ncov; c++)
            zeroed[at[c]] = o;
    }
}

/* The units of the routine, in order: a segment is one unit (BLOCK when its Local arrays fit in
 * shared memory, else SEQ); outside segments, each GEMM window, refused product, block-level
 * reduction, mapped nest and ZERO_OUT is one, and consecutive sequential statements are one
 * SEQ. Top-level comments outside segments are dropped. */
static troupe_status_t s_plan_units(troupe__cgen_t *g, const troupe_cgen_result_t *r, s_plan_t *p)
{
    size_t seg = 0;
    s_unit_t *seq = NULL; /* the SEQ unit being extended */
    bool *drop = troupe_calloc(p->nitems ? p->nitems : 1, sizeof *drop);
    bool *beta0 = troupe_calloc(p->nitems ? p->nitems : 1, sizeof *beta0);
    const troupe_tnode_t **zeroed = troupe_calloc(p->nitems ? p->nitems : 1, sizeof *zeroed);
    if (drop == NULL || zeroed == NULL || beta0 == NULL) {
        troupe_free(drop);
        troupe_free(beta0);
        troupe_free(zeroed);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    }
    s_plan_zero_covers(g, r, p, drop, zeroed, beta0);
    for (size_t i = 0; i < p->nitems && !p->oom; i++) {
        const troupe_ll_t *s = p->items[i];
        if (drop[i]) { /* no run of sequential statements spans it (it would be emitted) */
            seq = NULL;
            continue;
        }
        size_t seg_from = seg < p->nsegs ? p->segs[seg].first : p->nitems;
        if (i == seg_from) {
            const s_segment_t *sg = &p->segs[seg];
            bool block = s_segment_shared_bytes(sg) <= troupe__cgen_cuda_shared_max(g);
            s_unit_t *u = s_new_unit(p,
                                     sg->wide_blocks > 0 ? S_U_WIDE
                                     : block             ? S_U_BLOCK
                                                         : S_U_SEQ,
                                     sg->first, sg->last - sg->first + 1);
            if (u != NULL) {
                u->seg = seg;
                u->shared_bytes = block ? s_segment_shared_bytes(sg) : 0;
                u->vblocks = sg->wide_blocks > 0 ? sg->wide_blocks : 1;
            }
            seq = NULL;
            i = sg->last;
            seg++;
            continue;
        }
        troupe_gemm_t gm;
        troupe_gemm_epilogue_t ep;
        troupe_cgen_step_t step;
        size_t used = 0;
        if ((s->kind == TROUPE_LL_FOR || s->kind == TROUPE_LL_ZERO_OUT) &&
            s_gemm_step(g, r, p->items, seg_from, i, &gm, &ep, &used, &step)) {
            s_unit_t *u = s_new_unit(p, S_U_GEMM, i, used);
            if (u != NULL) {
                u->gm = gm;
                u->ep = ep;
                u->step = step;
                if (beta0[i]) /* its zeroing dropped: the calls and the fallback tiles too */
                    u->step.gemm.beta_zero = u->ep.beta_zero = true;
            }
            seq = NULL;
            i += used - 1;
            continue;
        }
        if (s->kind == TROUPE_LL_COMMENT)
            continue;
        s_map_t map = {0};
        s_reduce_t red;
        bool reduce = false, tiled = false;
        troupe_cgen_gemm_call_t tc;
        const char *why = NULL;
        if (s->kind == TROUPE_LL_FOR)
            tiled = s_refused_tiles(g, r, s, &gm, &tc, &why);
        if (!tiled && s->kind == TROUPE_LL_FOR)
            TROUPE_RETURN_IF_ERROR(s_plan_nest(s, &map));
        if (!tiled && s->kind == TROUPE_LL_FOR)
            TROUPE_RETURN_IF_ERROR(s_plan_reduce(s, &map, &red, &reduce));
        if (!tiled && s->kind != TROUPE_LL_ZERO_OUT && map.nmapped == 0 && !reduce) {
            if (seq != NULL) { /* extend the run (only comments lie between) */
                seq->count = i - seq->first + 1;
                s_collect_ll(&seq->acc, s);
                p->oom = p->oom || seq->acc.oom;
            } else {
                seq = s_new_unit(p, S_U_SEQ, i, 1);
            }
            continue;
        }
        seq = NULL;
        s_unit_t *u = s_new_unit(p, tiled    ? S_U_TILES
                                    : reduce ? S_U_REDUCE
                                    : s->kind == TROUPE_LL_ZERO_OUT ? S_U_ZERO
                                                                    : S_U_MAPPED,
                                 i, 1);
        if (u == NULL)
            break;
        u->map = map;
        u->map.zeroed = zeroed[i];
        if (tiled) {
            u->gm = gm;
            u->tc = tc;
            u->why = why;
        } else if (reduce) {
            u->red = red;
            u->vblocks = s_reduce_blocks(&red);
            u->shared_bytes = S_REDUCE_THREADS * (int64_t)troupe_prec_size_bytes(
                                                     red.set->u.set.tn->prec);
        } else if (s->kind == TROUPE_LL_ZERO_OUT) {
            u->iters = troupe_tnode_num_elems(s->u.zero_out);
            u->vblocks = s_blocks_of(u->iters);
        } else {
            int64_t ex, ey;
            s_map_extents(&map, &ex, &ey);
            u->vblocks = s_blocks_of(ex * ey);
            u->iters = 1;
            for (const troupe_ll_t *l = s; l != NULL; l = s_only_loop(l->u.for_loop.body))
                u->iters *= s_extent(l);
        }
    }
    troupe_free(drop);
    troupe_free(beta0);
    troupe_free(zeroed);
    return p->oom ? troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory") : TROUPE_OK;
}

/* Whether units a and b touch a node one of them writes (then their order matters). */
static bool s_conflict(const s_unit_t *a, const s_unit_t *b)
{
    for (size_t i = 0; i < a->acc.n; i++)
        for (size_t j = 0; j < b->acc.n; j++)
            if (a->acc.v[i].tn == b->acc.v[j].tn && (a->acc.v[i].write || b->acc.v[j].write))
                return true;
    return false;
}

static bool s_launch_alone(const s_unit_t *u)
{
    return u->kind == S_U_GEMM || u->kind == S_U_TILES || u->kind == S_U_WIDE;
}

/* Whether a segment's block may take unit u over: a small map or zeroing, or sequential code. */
static bool s_absorbable(const s_unit_t *u)
{
    /* a nest reading a node whose zeroing was dropped keeps its plan (s_plan_zero_covers) */
    return (u->kind == S_U_SEQ && u->seg == SIZE_MAX) ||
           ((u->kind == S_U_MAPPED || u->kind == S_U_ZERO) && u->iters <= S_ABSORB_MAX_ITERS &&
            u->map.zeroed == NULL);
}

/* Whether group gr is one block (serial, or a segment alone) that may run u after its units. */
static bool s_appendable(const s_plan_t *p, const s_group_t *gr, const s_unit_t *u)
{
    return s_absorbable(u) && (gr->serial || (gr->n == 1 && p->units[gr->units[0]].kind == S_U_BLOCK));
}

/* Whether every unit of group gr may run before a segment in its block. */
static bool s_prependable(const s_plan_t *p, const s_group_t *gr)
{
    for (size_t k = 0; k < gr->n; k++)
        if (!s_absorbable(&p->units[gr->units[k]]))
            return false;
    return !gr->serial;
}

static bool s_sharing = true; /* troupe__cgen_cuda_set_sharing */

void troupe__cgen_cuda_set_sharing(bool on)
{
    s_sharing = on;
}

/* The launches (cgen.h, "CUDA dialect"). Each unit, in order, looking back to the last launch
 * holding a unit it conflicts with (everything after that launch is independent of it):
 *   - joins the earliest of the independent kernels that takes parts (not serial), when the
 *     shared memory fits: it runs beside that kernel's parts, before the later launches;
 *   - else, when small (s_absorbable), goes to the end of the earliest one-block launch (a
 *     segment) from that last conflicting one on: the block runs it after what it holds;
 *   - else a segment takes the last conflicting launch into its block when all of that
 *     launch's parts are small: the block runs them first, then the segment;
 *   - else it opens a launch of its own.
 * Each unit thus still runs after all it depends on and before all that depends on it. */
static void s_plan_groups(s_plan_t *p)
{
    for (size_t ui = 0; ui < p->nunits && !p->oom; ui++) {
        const s_unit_t *u = &p->units[ui];
        ptrdiff_t join = -1, append = -1, conflict = -1;
        for (size_t gi = p->ngroups; gi-- > 0 && s_sharing && !s_launch_alone(u);) {
            const s_group_t *gr = &p->groups[gi];
            bool dep = false;
            for (size_t k = 0; k < gr->n && !dep; k++)
                dep = s_conflict(u, &p->units[gr->units[k]]);
            bool fits = gr->shared_bytes + u->shared_bytes <= S_SHARED_MAX;
            if (fits && s_appendable(p, gr, u))
                append = (ptrdiff_t)gi;
            if (dep) {
                conflict = (ptrdiff_t)gi;
                break;
            }
            if (fits && !gr->serial && !s_launch_alone(&p->units[gr->units[0]]))
                join = (ptrdiff_t)gi;
        }
        ptrdiff_t to = join >= 0 ? join : append;
        bool prepend = false;
        if (to < 0 && u->kind == S_U_BLOCK && conflict >= 0 &&
            s_prependable(p, &p->groups[conflict]) &&
            p->groups[conflict].shared_bytes + u->shared_bytes <= S_SHARED_MAX) {
            to = conflict;
            prepend = true;
        }
        if (to < 0) {
            s_group_t ng = {NULL, 0, 0, 0, false};
            if (!TROUPE__VEC_PUSH(p->groups, p->ngroups, p->gcap, ng)) {
                p->oom = true;
                return;
            }
            to = (ptrdiff_t)p->ngroups - 1;
        }
        s_group_t *gr = &p->groups[to];
        if (!TROUPE__VEC_PUSH(gr->units, gr->n, gr->cap, ui)) {
            p->oom = true;
            return;
        }
        gr->shared_bytes += u->shared_bytes;
        if ((join < 0 && to == append) || prepend)
            gr->serial = gr->n > 1;
    }
}

/* Declarations of a segment's Local arrays at `in`: in shared memory (zeroed by the block's
 * threads, then a barrier; past 48 KiB in the launch's dynamic shared memory, hz_dyn), else in
 * the thread, zero-filled. */
static void s_put_segment_locals(troupe__cgen_t *g, const s_segment_t *sg, bool shared,
                                 troupe__strbuf_t *b, int in)
{
    bool dyn = shared && s_segment_dynamic(sg);
    if (dyn) {
        troupe__strbuf_repeat(b, "    ", in);
        troupe__strbuf_printf(b,
                              "/* %" PRId64 " bytes of Local arrays: in the launch's dynamic "
                              "shared memory. */\n",
                              s_segment_shared_bytes(sg));
        troupe__strbuf_repeat(b, "    ", in);
        troupe__strbuf_puts(b, "TROUPE_DYN_SHARED(hz_dyn);\n");
    }
    if (shared && sg->packed) { /* s_pack_segment: one pool, each array zeroed at first use */
        const char *ty = troupe_prec_c_type(sg->locals[0]->prec);
        troupe__strbuf_repeat(b, "    ", in);
        troupe__strbuf_printf(b,
                              "/* The Local arrays share one pool: those whose uses do not "
                              "overlap share elements. */\n");
        troupe__strbuf_repeat(b, "    ", in);
        if (dyn)
            troupe__strbuf_printf(b, "%s *const seg_pool = (%s *)hz_dyn;\n", ty, ty);
        else
            troupe__strbuf_printf(b, "__shared__ %s seg_pool[%" PRId64 "];\n", ty, sg->pool_elems);
        for (size_t k = 0; k < sg->nlocals; k++) {
            troupe__strbuf_repeat(b, "    ", in);
            troupe__strbuf_printf(b, "%s *const %s = seg_pool + %" PRId64 ";\n", ty,
                                  troupe__cgen_node_ident(g, sg->locals[k]), sg->off[k]);
        }
        return;
    }
    for (size_t k = 0; k < sg->nlocals; k++) {
        const troupe_tnode_t *tn = sg->locals[k];
        troupe__strbuf_repeat(b, "    ", in);
        if (dyn) {
            const char *ty = troupe_prec_c_type(tn->prec);
            troupe__strbuf_printf(b, "%s *const %s = (%s *)(hz_dyn + %" PRId64 ");\n", ty,
                                  troupe__cgen_node_ident(g, tn), ty, s_dyn_offset(sg, k));
            continue;
        }
        troupe__strbuf_printf(b, "%s%s %s[%" PRId64 "]%s;\n", shared ? "__shared__ " : "",
                              troupe_prec_c_type(tn->prec), troupe__cgen_node_ident(g, tn),
                              troupe_tnode_num_elems(tn),
                              shared                              ? ""
                              : tn->prec == TROUPE_PREC_UINT4X32 ? " = {{{0u}}}"
                                                                 : " = {0}");
    }
    if (!shared)
        return;
    for (size_t k = 0; k < sg->nlocals; k++)
        s_put_zero_flat(b, troupe__cgen_node_ident(g, sg->locals[k]), sg->locals[k]->prec,
                        troupe_tnode_num_elems(sg->locals[k]), "hz_t", "hz_nt", in);
    troupe__strbuf_repeat(b, "    ", in);
    troupe__strbuf_puts(b, "__syncthreads();\n");
}

/* The code of one block running `n` units (units[0..n-1], indices into p->units) in order: the
 * block's threads run each statement, meeting at a barrier after it; a segment's Local arrays
 * are in shared memory, zeroed first. A nest's mapped iterations are spread over the threads
 * (the others stay in each thread, in order), a ZERO_OUT's elements too, any other statement
 * runs on thread 0. */
static troupe_status_t s_put_serial_part(troupe__cgen_t *g, const s_plan_t *p,
                                         const size_t *units, size_t n, troupe__strbuf_t *b,
                                         int in)
{
    troupe__strbuf_repeat(b, "    ", in);
    troupe__strbuf_puts(b, n == 1 && p->units[units[0]].kind == S_U_WIDE
                               ? "/* Each block runs these statements in order, a barrier after "
                                 "each. */\n"
                               : "/* One block runs these statements in order, a barrier after "
                                 "each. */\n");
    troupe_status_t st = TROUPE_OK;
    for (size_t k = 0; k < n && st == TROUPE_OK; k++) {
        const s_unit_t *u = &p->units[units[k]];
        bool wide = u->kind == S_U_WIDE;
        if (u->kind == S_U_BLOCK || wide)
            s_put_segment_locals(g, &p->segs[u->seg], true, b, in);
        const s_segment_t *packed = (u->kind == S_U_BLOCK && p->segs[u->seg].packed)
                                        ? &p->segs[u->seg]
                                        : NULL;
        for (size_t i = u->first; i < u->first + u->count && st == TROUPE_OK; i++) {
            const troupe_ll_t *s = p->items[i];
            bool zeroed = false;
            for (size_t l = 0; packed != NULL && l < packed->nlocals; l++)
                if (packed->first_use[l] == i) {
                    s_put_zero_flat(b, troupe__cgen_node_ident(g, packed->locals[l]),
                                    packed->locals[l]->prec,
                                    troupe_tnode_num_elems(packed->locals[l]), "hz_t", "hz_nt",
                                    in);
                    zeroed = true;
                }
            if (zeroed) {
                troupe__strbuf_repeat(b, "    ", in);
                troupe__strbuf_puts(b, "__syncthreads();\n");
            }
            if (s->kind == TROUPE_LL_COMMENT) {
                st = troupe__cgen_emit_stmt(g, s, in, b);
                continue;
            }
            s_map_t map = {0};
            if (s->kind == TROUPE_LL_FOR && (st = s_plan_nest(s, &map)) != TROUPE_OK)
                break;
            bool shared_out = false; /* a wide segment's statement writing a global array */
            if (wide) {
                s_accesses_t a = {0};
                s_collect_ll(&a, s);
                shared_out = s_writes_global(g, &a);
                troupe_free(a.v);
                if (a.oom) {
                    st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
                    break;
                }
            }
            if (s->kind == TROUPE_LL_ZERO_OUT) {
                s_put_zero_flat(b, troupe__cgen_node_ident(g, s->u.zero_out),
                                s->u.zero_out->prec, troupe_tnode_num_elems(s->u.zero_out),
                                "hz_t", "hz_nt", in);
            } else if (shared_out) { /* s_widen_segment: a nest with mapped loops */
                st = s_put_mapped_flat(g, &map, s, b, in, "hz_g", "hz_gn");
            } else if (map.nmapped > 0) {
                st = s_put_mapped_flat(g, &map, s, b, in, "hz_t", "hz_nt");
            } else {
                troupe__strbuf_repeat(b, "    ", in);
                troupe__strbuf_puts(b, "if (hz_t == 0) {\n");
                st = troupe__cgen_emit_stmt(g, s, in + 1, b);
                troupe__strbuf_repeat(b, "    ", in);
                troupe__strbuf_puts(b, "}\n");
            }
            troupe__strbuf_repeat(b, "    ", in);
            troupe__strbuf_puts(b, "__syncthreads();\n");
        }
    }
    return st;
}

/* A kernel of the units of group gr, each taking a range of virtual blocks: virtual block v
 * (the real blocks grid-stride over them) runs part k when v lies in k's range, as its block
 * hz_vb = v - (the range's start) of the part's own blocks, with the block's hz_nt threads. */
static troupe_status_t s_put_horizontal(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                        const s_plan_t *p, const s_group_t *gr,
                                        troupe__strbuf_t *b, size_t *out_kernel)
{
    size_t nparts = gr->serial ? 1 : gr->n;
    /* Many parts: a table of their ranges' ends in constant memory, searched (log2 of the parts
     * comparisons, a block's threads alike), then a switch, instead of a chain of ifs that
     * every virtual block walks (376 parts, 5 M virtual blocks of one element: 27 ms of GPT-2
     * 124M's step on an H200, for 1 ms of stores). */
    bool table = nparts >= S_HZ_TABLE_MIN_PARTS;
    if (table) {
        troupe__strbuf_printf(b, "\n__constant__ int64_t " S_KERNEL_NAME "_hz_end[%zu] = {",
                              r->name, r->nkernels, nparts);
        int64_t end = 0;
        for (size_t i = 0; i < nparts; i++) {
            end += p->units[gr->units[i]].vblocks;
            troupe__strbuf_printf(b, "%s%" PRId64 "LL", i ? (i % 8 ? ", " : ",\n    ") : "", end);
        }
        troupe__strbuf_puts(b, "};\n");
    }
    troupe_cgen_kernel_t *k = NULL;
    TROUPE_RETURN_IF_ERROR(s_open_kernel(r, b, &k));
    *out_kernel = r->nkernels - 1;
    int64_t v = gr->serial ? 1 : 0;
    bool fixed = gr->serial, all_seq = !gr->serial;
    for (size_t i = 0; i < gr->n; i++) {
        const s_unit_t *u = &p->units[gr->units[i]];
        v += gr->serial ? 0 : u->vblocks;
        fixed = fixed || u->kind == S_U_REDUCE || u->kind == S_U_BLOCK;
        all_seq = all_seq && u->kind == S_U_SEQ;
        if (u->kind == S_U_REDUCE && s_reduce_reassociates(&u->red))
            k->reassociates = true;
        if (u->kind == S_U_BLOCK && s_segment_dynamic(&p->segs[u->seg]) &&
            s_segment_shared_bytes(&p->segs[u->seg]) > (int64_t)k->dynamic_shared_bytes)
            k->dynamic_shared_bytes = (uint32_t)s_segment_shared_bytes(&p->segs[u->seg]);
    }
    k->extent[0] = v;
    k->extent[1] = 1;
    k->block[0] = all_seq ? 1 : S_BLOCK_THREADS;
    k->block[1] = 1;
    k->grid[0] = s_grid(v, 1);
    k->grid[1] = 1;
    k->fixed_block = fixed;
    k->one_thread = all_seq && gr->n == 1;
    troupe__strbuf_printf(b,
                          "    /* %zu parts over %" PRId64
                          " virtual blocks (grid-stride); each part runs in its range. */\n"
                          "    const int64_t hz_nt = (int64_t)blockDim.x * blockDim.y;\n"
                          "    const int64_t hz_t = (int64_t)threadIdx.y * blockDim.x + "
                          "threadIdx.x;\n"
                          "    " S_NO_UNROLL
                          "    for (int64_t hz_v = (int64_t)blockIdx.y * gridDim.x + blockIdx.x; "
                          "hz_v < %" PRId64 "LL; hz_v += (int64_t)gridDim.x * gridDim.y) {\n",
                          nparts, v, v);
    if (table)
        troupe__strbuf_printf(b,
                              "        int64_t hz_lo = 0, hz_hi = %zu;\n"
                              "        while (hz_lo < hz_hi) {\n"
                              "            const int64_t hz_m = (hz_lo + hz_hi) >> 1;\n"
                              "            if (hz_v < %s_hz_end[hz_m]) hz_hi = hz_m; else hz_lo = "
                              "hz_m + 1;\n"
                              "        }\n"
                              "        switch (hz_lo) {\n",
                              nparts - 1, k->name);
    troupe_status_t st = TROUPE_OK;
    int64_t v0 = 0;
    for (size_t i = 0; i < nparts && st == TROUPE_OK; i++) {
        const s_unit_t *u = &p->units[gr->units[i]];
        int64_t nb = gr->serial ? 1 : u->vblocks;
        if (table)
            troupe__strbuf_printf(b, "        case %zu: {\n", i);
        else
            troupe__strbuf_printf(b, "        %sif (hz_v < %" PRId64 "LL) {\n", i ? "else " : "",
                                  v0 + nb);
        char start[64], stride[64];
        snprintf(start, sizeof start, "hz_vb * hz_nt + hz_t");
        snprintf(stride, sizeof stride, "%" PRId64 "LL * hz_nt", u->vblocks);
        if (!gr->serial &&
            (u->kind == S_U_MAPPED || u->kind == S_U_ZERO || u->kind == S_U_REDUCE))
            troupe__strbuf_printf(b, "            const int64_t hz_vb = hz_v - %" PRId64 "LL;\n",
                                  v0);
        if (gr->serial) {
            st = s_put_serial_part(g, p, gr->units, gr->n, b, 3);
        } else if (u->kind == S_U_MAPPED) {
            st = s_put_mapped_flat(g, &u->map, p->items[u->first], b, 3, start, stride);
        } else if (u->kind == S_U_ZERO) {
            const troupe_tnode_t *tn = p->items[u->first]->u.zero_out;
            s_put_zero_flat(b, troupe__cgen_node_ident(g, tn), tn->prec,
                            troupe_tnode_num_elems(tn), start, stride, 3);
        } else if (u->kind == S_U_REDUCE) {
            char ostride[32];
            snprintf(ostride, sizeof ostride, "%" PRId64 "LL", u->vblocks);
            st = s_put_reduce_part(g, &u->red, b, "hz_vb", ostride);
        } else if (u->kind == S_U_BLOCK) {
            st = s_put_serial_part(g, p, &gr->units[i], 1, b, 3);
        } else { /* SEQ */
            troupe__strbuf_puts(b, "            if (hz_t == 0) {\n");
            if (u->seg != SIZE_MAX)
                s_put_segment_locals(g, &p->segs[u->seg], false, b, 4);
            for (size_t j = u->first; j < u->first + u->count && st == TROUPE_OK; j++)
                st = troupe__cgen_emit_stmt(g, p->items[j], 4, b);
            troupe__strbuf_puts(b, "            }\n");
        }
        troupe__strbuf_puts(b, table ? "        } break;\n" : "        }\n");
        v0 += nb;
    }
    troupe__strbuf_puts(b, table ? "        }\n    }\n}\n" : "    }\n}\n");
    return st;
}

/* The kernel of a wide segment (s_widen_segment): every block builds the Local arrays in its
 * shared memory and runs the statements writing only them; the statements writing global
 * arrays take their iterations t_f from hz_g, striding by hz_gn over all blocks' threads.
 * Every thread of every block meets every barrier, so any grid is correct. */
static troupe_status_t s_put_wide(troupe__cgen_t *g, troupe_cgen_result_t *r, const s_plan_t *p,
                                  size_t unit, troupe__strbuf_t *b, size_t *out_kernel)
{
    const s_unit_t *u = &p->units[unit];
    troupe_cgen_kernel_t *k = NULL;
    TROUPE_RETURN_IF_ERROR(s_open_kernel(r, b, &k));
    *out_kernel = r->nkernels - 1;
    k->extent[0] = u->vblocks;
    k->extent[1] = 1;
    k->block[0] = S_BLOCK_THREADS;
    k->block[1] = 1;
    k->grid[0] = s_grid(u->vblocks, 1);
    k->grid[1] = 1;
    k->fixed_block = true;
    troupe__strbuf_printf(
        b,
        "    /* A wide segment over %" PRId64
        " blocks: each block builds the Local arrays in its shared memory, the statements "
        "writing global arrays share their iterations among all blocks' threads. */\n"
        "    const int64_t hz_nt = (int64_t)blockDim.x * blockDim.y;\n"
        "    const int64_t hz_t = (int64_t)threadIdx.y * blockDim.x + threadIdx.x;\n"
        "    const int64_t hz_g = ((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * hz_nt + "
        "hz_t;\n"
        "    const int64_t hz_gn = (int64_t)gridDim.x * gridDim.y * hz_nt;\n",
        u->vblocks);
    troupe_status_t st = s_put_serial_part(g, p, &unit, 1, b, 1);
    troupe__strbuf_puts(b, "}\n");
    return st;
}

/* The launch of group gr: a unit alone keeps its own kernel (or GEMM step); several units, a
 * segment or a SEQ with Local arrays, a horizontal kernel. */
static troupe_status_t s_put_group(troupe__cgen_t *g, troupe_cgen_result_t *r, s_plan_t *p,
                                   const s_group_t *gr, troupe__strbuf_t *b)
{
    s_unit_t *u = &p->units[gr->units[0]];
    size_t kernel = 0;
    troupe_status_t st = TROUPE_OK;
    if (u->kind == S_U_WIDE)
        st = s_put_wide(g, r, p, gr->units[0], b, &kernel);
    else if (gr->n > 1 || gr->serial || u->kind == S_U_BLOCK ||
             (u->kind == S_U_SEQ && u->seg != SIZE_MAX))
        st = s_put_horizontal(g, r, p, gr, b, &kernel);
    else if (u->kind == S_U_GEMM)
        return s_put_gemm(g, r, &u->gm, &u->ep, &u->step, b);
    else if (u->kind == S_U_SEQ)
        return s_put_one_thread(g, r, &p->items[u->first], u->count, b);
    else if (u->kind == S_U_TILES)
        st = s_put_refused_tiles(g, r, &u->gm, &u->tc, u->why, b, &kernel);
    else if (u->kind == S_U_REDUCE)
        st = s_put_reduce(g, r, &u->red, b, &kernel);
    else if (u->kind == S_U_MAPPED)
        st = s_put_mapped(g, r, &u->map, p->items[u->first], b, &kernel);
    else
        st = s_put_zero(g, r, p->items[u->first]->u.zero_out, b, &kernel);
    if (st != TROUPE_OK)
        return st;
    troupe_cgen_step_t ks = {TROUPE_CGEN_STEP_KERNEL, kernel, 1, {0}};
    return s_add_step(r, &ks);
}

static troupe_status_t s_put_routine(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                     troupe__strbuf_t *b)
{
    const troupe_ll_proc_t *proc = troupe__cgen_proc(g);
    s_plan_t p;
    memset(&p, 0, sizeof p);
    size_t cap = 0;
    troupe_status_t st = TROUPE_OK;
    if (!troupe__cgen_flatten(proc->body, &p.items, &p.nitems, &cap)) { /* top-level statements */
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto out;
    }
    if ((st = s_find_segments(g, &p)) != TROUPE_OK)
        goto out;
    for (size_t i = 0; i < p.nsegs && st == TROUPE_OK; i++)
        st = s_widen_segment(g, &p, &p.segs[i]);
    for (size_t i = 0; i < p.nsegs && st == TROUPE_OK; i++)
        st = s_pack_segment(g, &p, &p.segs[i]);
    if (st != TROUPE_OK || (st = s_plan_units(g, r, &p)) != TROUPE_OK)
        goto out;
    s_plan_groups(&p);
    if (p.oom) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto out;
    }
    if (r->ngathers > 0) {
        /* First step: one thread checks every gather index before any kernel writes; the
         * kernels after it return at once when it filled the error words. */
        troupe_cgen_kernel_t *k = NULL;
        if ((st = s_open_kernel(r, b, &k)) != TROUPE_OK)
            goto out;
        s_shape(k, 1, 1);
        k->block[0] = 1;
        k->one_thread = true;
        troupe__strbuf_puts(b, "    if (threadIdx.x != 0 || threadIdx.y != 0 || blockIdx.x != 0 || "
                               "blockIdx.y != 0) return;\n");
        if ((st = troupe__cgen_emit_checks(g, proc->body, 1, b)) != TROUPE_OK)
            goto out;
        troupe__strbuf_puts(b, "}\n");
        troupe_cgen_step_t ks = {TROUPE_CGEN_STEP_KERNEL, r->nkernels - 1, 1, {0}};
        if ((st = s_add_step(r, &ks)) != TROUPE_OK)
            goto out;
    }
    for (size_t i = 0; i < p.ngroups && st == TROUPE_OK; i++)
        st = s_put_group(g, r, &p, &p.groups[i], b);
    if (st == TROUPE_OK && !b->failed)
        st = s_put_kernel_params(r, b);
out:
    s_plan_free(&p);
    if (st == TROUPE_OK && b->failed)
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    if (st == TROUPE_OK)
        s_log_launches(r);
    return st;
}

static void s_put_calling(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    troupe__strbuf_puts(b, " * Kernels (each takes the parameters its signature names, in the "
                           "order above), by step:\n");
    if (r->nsteps == 0)
        troupe__strbuf_puts(b, " *   (none: the routine does nothing)\n");
    for (size_t i = 0; i < r->nsteps; i++) {
        const troupe_cgen_step_t *s = &r->steps[i];
        troupe__strbuf_printf(b, " *   step %zu: %s", i,
                              s->kind == TROUPE_CGEN_STEP_GEMM ? "GEMM, else" : "kernel");
        for (size_t k = s->first_kernel; k < s->first_kernel + s->nkernels; k++) {
            const troupe_cgen_kernel_t *kn = &r->kernels[k];
            troupe__strbuf_printf(b, " %s grid %ux%u block %ux%u", kn->name, kn->grid[0],
                                  kn->grid[1], kn->block[0], kn->block[1]);
            if (kn->one_thread)
                troupe__strbuf_puts(b, " (one thread)");
        }
        troupe__strbuf_puts(b, "\n");
    }
}

static void s_put_open(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    (void)b;
    (void)r; /* put_routine writes the kernels */
}

static const char *s_section_text(const troupe__cgen_section_t *s)
{
    return s->text_cuda != NULL ? s->text_cuda : s->text_c;
}

const troupe__cgen_target_t troupe__cgen_target_cuda = {
    .dialect = TROUPE_CGEN_CUDA,
    .name = "cuda",
    .restrict_kw = "__restrict__",
    .has_entry = false,
    .gemm_library = false,
    .put_calling = s_put_calling,
    .put_open = s_put_open,
    .put_routine = s_put_routine,
    .put_after = NULL,
    .section_text = s_section_text,
};
