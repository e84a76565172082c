/* Tests of compiler/fuse (loop fusion of pointwise nests): an optimizer-style chain becomes one
 * nest with bit-identical results under the interpreter; nests that read another's output at
 * another element, reductions, different bounds and non-injective writes stay apart; fusion
 * happens inside loop bodies and over inlined pointwise definitions (local scopes);
 * troupe_ll_optimize runs it (fuse_loops) and can be told not to; nests that share only outer loops
 * fuse over them when each shared cell belongs to one outer iteration, and a zeroing moves into
 * such a nest, but not before a summed product. */
#include "compiler/fuse.h"
#include "compiler/interp.h"
#include "compiler/optimize.h"
#include "ir/lowlevel.h"
#include "ir/tnode.h"

#include <criterion/criterion.h>
#include <string.h>

#define N 37

static troupe_tnode_t *s_vec(const char *label, int64_t n)
{
    troupe_tnode_t *tn = NULL;
    const char *l[1] = {label};
    cr_assert_eq(troupe_tnode_new(l, 1, TROUPE_PREC_SINGLE, 1, &n, NULL, 0.0, &tn), TROUPE_OK);
    return tn;
}

static troupe_axis_index_t s_rev(int32_t sym)
{
    troupe_axis_index_t x = {1, {{-1, sym}}, N - 1};
    return x;
}

/* for i: dst[i] = op(a[at(i)], b[i]) as one nest. */
static troupe_ll_t *s_nest(troupe_ll_proc_t *p, troupe_tnode_t *dst, troupe_binop_t op,
                           troupe_tnode_t *a, bool reversed, troupe_tnode_t *b, int64_t to)
{
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ii = troupe_idx_sym(i), ai = reversed ? s_rev(i) : ii;
    troupe_sc_t *v = troupe_sc_binop(p, op, troupe_sc_get(p, a, &ai), troupe_sc_get(p, b, &ii));
    return troupe_ll_for(p, i, 0, to, troupe_ll_set(p, dst, &ii, v), false);
}

typedef struct s_vars {
    troupe_tnode_t *g, *m, *w, *t, *s;
} s_vars_t;

static s_vars_t s_make_vars(void)
{
    s_vars_t v = {s_vec("g", N), s_vec("m", N), s_vec("w", N), s_vec("t", N), s_vec("s", 1)};
    return v;
}

static void s_free_vars(s_vars_t *v)
{
    troupe_tnode_release(&v->g);
    troupe_tnode_release(&v->m);
    troupe_tnode_release(&v->w);
    troupe_tnode_release(&v->t);
    troupe_tnode_release(&v->s);
}

/* The SGD-with-momentum shape: m = m*g; m = m+g; w = w-m; then t = w*m. */
static troupe_ll_proc_t *s_chain(const s_vars_t *v)
{
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("chain", &p), TROUPE_OK);
    troupe_ll_t *items[4] = {
        s_nest(p, v->m, TROUPE_BINOP_MUL, v->m, false, v->g, N - 1),
        s_nest(p, v->m, TROUPE_BINOP_ADD, v->m, false, v->g, N - 1),
        s_nest(p, v->w, TROUPE_BINOP_SUB, v->w, false, v->m, N - 1),
        s_nest(p, v->t, TROUPE_BINOP_MUL, v->w, false, v->m, N - 1),
    };
    p->body = troupe_ll_seq(p, 4, items);
    cr_assert_eq(troupe_ll_proc_status(p), TROUPE_OK);
    return p;
}

static size_t s_top_nests(const troupe_ll_proc_t *p)
{
    if (p->body->kind == TROUPE_LL_FOR)
        return 1;
    size_t n = 0;
    for (size_t i = 0; p->body->kind == TROUPE_LL_SEQ && i < p->body->u.seq.count; i++)
        n += p->body->u.seq.items[i]->kind == TROUPE_LL_FOR;
    return n;
}

typedef struct s_data {
    float g[N], m[N], w[N], t[N], s[1];
} s_data_t;

static void s_fill(s_data_t *d)
{
    for (int i = 0; i < N; i++) {
        d->g[i] = 0.37f * (float)i - 3.1f;
        d->m[i] = 0.11f * (float)(i % 7) - 0.2f;
        d->w[i] = 1.0f / (float)(i + 1);
        d->t[i] = 0.0f;
    }
    d->s[0] = 0.0f;
}

static void s_interp(const troupe_ll_proc_t *p, const s_vars_t *v, s_data_t *d)
{
    troupe_interp_buffer_t bufs[5] = {{v->g, d->g}, {v->m, d->m}, {v->w, d->w}, {v->t, d->t},
                                      {v->s, d->s}};
    troupe_interp_args_t args = {bufs, 5, NULL, 0, NULL};
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_OK, "%s", troupe_last_error());
}

Test(fuse, an_update_chain_becomes_one_nest_with_identical_results)
{
    s_vars_t v = s_make_vars();
    troupe_ll_proc_t *plain = s_chain(&v), *fused = s_chain(&v);
    size_t count = 0;
    cr_assert_eq(troupe_ll_fuse_loops(fused, &count), TROUPE_OK);
    cr_assert_eq(count, 3);
    cr_assert_eq(s_top_nests(fused), 1);
    cr_assert_eq(troupe_ll_proc_validate(fused), TROUPE_OK, "%s", troupe_last_error());
    s_data_t a, b;
    s_fill(&a);
    s_fill(&b);
    s_interp(plain, &v, &a);
    s_interp(fused, &v, &b);
    cr_assert(memcmp(&a, &b, sizeof a) == 0, "fused results differ from the unfused ones");
    troupe_ll_proc_destroy(&plain);
    troupe_ll_proc_destroy(&fused);
    s_free_vars(&v);
}

Test(fuse, a_nest_with_an_inlined_pointwise_definition_fuses)
{
    /* m = m*g; then w = w - {t = m*g; t = t+g} (a local scope of SET_LOCALs, as virtualisation
     * leaves an inlined definition): one nest, the same results */
    s_vars_t v = s_make_vars();
    troupe_ll_proc_t *pr[2];
    for (int k = 0; k < 2; k++) {
        troupe_ll_proc_t *p = NULL;
        cr_assert_eq(troupe_ll_proc_new("scoped", &p), TROUPE_OK);
        int32_t i = troupe_ll_proc_add_symbol(p, NULL), id = troupe_ll_proc_new_scope_id(p);
        troupe_axis_index_t ii = troupe_idx_sym(i);
        troupe_ll_t *sets[2] = {
            troupe_ll_set_local(p, id,
                                troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_get(p, v.m, &ii),
                                                troupe_sc_get(p, v.g, &ii))),
            troupe_ll_set_local(p, id,
                                troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get_local(p, id),
                                                troupe_sc_get(p, v.g, &ii)))};
        troupe_sc_t *scope = troupe_sc_local_scope(p, id, v.t, troupe_ll_seq(p, 2, sets), &ii);
        troupe_ll_t *items[2] = {
            s_nest(p, v.m, TROUPE_BINOP_MUL, v.m, false, v.g, N - 1),
            troupe_ll_for(p, i, 0, N - 1,
                          troupe_ll_set(p, v.w, &ii,
                                        troupe_sc_binop(p, TROUPE_BINOP_SUB,
                                                        troupe_sc_get(p, v.w, &ii), scope)),
                          false)};
        p->body = troupe_ll_seq(p, 2, items);
        cr_assert_eq(troupe_ll_proc_status(p), TROUPE_OK);
        pr[k] = p;
    }
    size_t count = 0;
    cr_assert_eq(troupe_ll_fuse_loops(pr[1], &count), TROUPE_OK);
    cr_assert_eq(count, 1);
    cr_assert_eq(s_top_nests(pr[1]), 1);
    cr_assert_eq(troupe_ll_proc_validate(pr[1]), TROUPE_OK, "%s", troupe_last_error());
    s_data_t a, b;
    s_fill(&a);
    s_fill(&b);
    s_interp(pr[0], &v, &a);
    s_interp(pr[1], &v, &b);
    cr_assert(memcmp(&a, &b, sizeof a) == 0, "fused results differ from the unfused ones");
    troupe_ll_proc_destroy(&pr[0]);
    troupe_ll_proc_destroy(&pr[1]);
    s_free_vars(&v);
}

Test(fuse, a_read_of_another_element_keeps_the_nests_apart)
{
    s_vars_t v = s_make_vars();
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("shifted", &p), TROUPE_OK);
    /* m = m*g, then t[i] = m[N-1-i] + g[i]: reads m where the first nest writes later. */
    troupe_ll_t *items[2] = {s_nest(p, v.m, TROUPE_BINOP_MUL, v.m, false, v.g, N - 1),
                             s_nest(p, v.t, TROUPE_BINOP_ADD, v.m, true, v.g, N - 1)};
    p->body = troupe_ll_seq(p, 2, items);
    size_t count = 9;
    cr_assert_eq(troupe_ll_fuse_loops(p, &count), TROUPE_OK);
    cr_assert_eq(count, 0);
    cr_assert_eq(s_top_nests(p), 2);
    troupe_ll_proc_destroy(&p);
    s_free_vars(&v);
}

Test(fuse, different_bounds_and_reductions_stay_apart)
{
    s_vars_t v = s_make_vars();
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("apart", &p), TROUPE_OK);
    int32_t r = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ri = troupe_idx_sym(r), zero = troupe_idx_fixed(0);
    /* s[0] += g[i] writes one element at every iteration: not injective. */
    troupe_ll_t *red = troupe_ll_for(
        p, r, 0, N - 1,
        troupe_ll_set(p, v.s, &zero,
                      troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get(p, v.s, &zero),
                                      troupe_sc_get(p, v.g, &ri))),
        false);
    troupe_ll_t *items[3] = {s_nest(p, v.m, TROUPE_BINOP_MUL, v.m, false, v.g, N - 1), red,
                             s_nest(p, v.t, TROUPE_BINOP_ADD, v.w, false, v.g, N - 2)};
    p->body = troupe_ll_seq(p, 3, items);
    size_t count = 9;
    cr_assert_eq(troupe_ll_fuse_loops(p, &count), TROUPE_OK);
    cr_assert_eq(count, 0);
    cr_assert_eq(s_top_nests(p), 3);
    troupe_ll_proc_destroy(&p);
    s_free_vars(&v);
}

Test(fuse, nests_inside_a_loop_body_fuse)
{
    s_vars_t v = s_make_vars();
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("inner", &p), TROUPE_OK);
    int32_t o = troupe_ll_proc_add_symbol(p, NULL);
    troupe_ll_t *items[2] = {s_nest(p, v.m, TROUPE_BINOP_MUL, v.m, false, v.g, N - 1),
                             s_nest(p, v.w, TROUPE_BINOP_SUB, v.w, false, v.m, N - 1)};
    p->body = troupe_ll_for(p, o, 0, 2, troupe_ll_seq(p, 2, items), false);
    size_t count = 0;
    cr_assert_eq(troupe_ll_fuse_loops(p, &count), TROUPE_OK);
    cr_assert_eq(count, 1);
    const troupe_ll_t *inner = p->body->u.for_loop.body;
    cr_assert_eq(inner->kind, TROUPE_LL_FOR, "the outer loop's body is one nest");
    cr_assert_eq(inner->u.for_loop.body->kind, TROUPE_LL_SEQ);
    cr_assert_eq(inner->u.for_loop.body->u.seq.count, 2);
    troupe_ll_proc_destroy(&p);
    s_free_vars(&v);
}

Test(fuse, the_optimizer_fuses_unless_told_not_to)
{
    s_vars_t v = s_make_vars();
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    cr_assert(o.fuse_loops);
    troupe_ll_proc_t *on = s_chain(&v), *off = s_chain(&v);
    cr_assert_eq(troupe_ll_optimize(on, &o), TROUPE_OK, "%s", troupe_last_error());
    o.fuse_loops = false;
    cr_assert_eq(troupe_ll_optimize(off, &o), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(s_top_nests(on), 1);
    cr_assert_eq(s_top_nests(off), 4);
    troupe_ll_proc_destroy(&on);
    troupe_ll_proc_destroy(&off);
    s_free_vars(&v);
}

/* ---- prefix fusion and sunk zeroings --------------------------------------------------------- */

#define PR 3 /* rows */
#define PW 4 /* windows of 2 per row */

typedef struct s_pool_vars {
    troupe_tnode_t *in, *g, *cnt, *sh, *dx, *c;
} s_pool_vars_t;

static troupe_tnode_t *s_mat(const char *label, int64_t r, int64_t c)
{
    troupe_tnode_t *tn = NULL;
    const char *l[1] = {label};
    int64_t dims[2] = {r, c};
    cr_assert_eq(troupe_tnode_new(l, 1, TROUPE_PREC_SINGLE, 2, dims, NULL, 0.0, &tn), TROUPE_OK);
    return tn;
}

static s_pool_vars_t s_pool_vars(void)
{
    s_pool_vars_t v = {s_mat("in", PR, 2 * PW), s_mat("g", PR, PW),      s_mat("cnt", PR, PW),
                       s_mat("sh", PR, PW),     s_mat("dx", PR, 2 * PW), s_mat("c", PR, PR)};
    return v;
}

static void s_pool_free(s_pool_vars_t *v)
{
    troupe_tnode_release(&v->in);
    troupe_tnode_release(&v->g);
    troupe_tnode_release(&v->cnt);
    troupe_tnode_release(&v->sh);
    troupe_tnode_release(&v->dx);
    troupe_tnode_release(&v->c);
}

/* A max pool gradient's shape over windows of 2: cnt[r,w] = sum_k in[r,2w+k] (zeroed first);
 * sh[r,w] = g[r,w'] / cnt[r,w] with w' = w, or PW-1-w when `other`;
 * dx[r,2w+k] = in[r,2w+k] * sh[r',w] with r' = r, or PR-1-r when `other`. */
static troupe_ll_proc_t *s_pool_proc(const s_pool_vars_t *v, bool other)
{
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("pool", &p), TROUPE_OK);
    troupe_ll_t *items[4];
    items[0] = troupe_ll_zero_out(p, v->cnt);
    int32_t r = troupe_ll_proc_add_symbol(p, NULL), w = troupe_ll_proc_add_symbol(p, NULL),
            k = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t o[2] = {troupe_idx_sym(r), troupe_idx_sym(w)};
    troupe_axis_index_t at[2] = {troupe_idx_sym(r), {2, {{2, w}, {1, k}}, 0}};
    troupe_sc_t *sum = troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get(p, v->cnt, o),
                                       troupe_sc_get(p, v->in, at));
    items[1] = troupe_ll_for(
        p, r, 0, PR - 1,
        troupe_ll_for(p, w, 0, PW - 1,
                      troupe_ll_for(p, k, 0, 1, troupe_ll_set(p, v->cnt, o, sum), false), false),
        false);
    int32_t r2 = troupe_ll_proc_add_symbol(p, NULL), w2 = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t o2[2] = {troupe_idx_sym(r2), troupe_idx_sym(w2)};
    troupe_axis_index_t gi[2] = {troupe_idx_sym(r2), {1, {{-1, w2}}, PW - 1}};
    troupe_sc_t *q = troupe_sc_binop(p, TROUPE_BINOP_DIV, troupe_sc_get(p, v->g, other ? gi : o2),
                                     troupe_sc_get(p, v->cnt, o2));
    items[2] = troupe_ll_for(p, r2, 0, PR - 1,
                             troupe_ll_for(p, w2, 0, PW - 1, troupe_ll_set(p, v->sh, o2, q), false),
                             false);
    int32_t r3 = troupe_ll_proc_add_symbol(p, NULL), w3 = troupe_ll_proc_add_symbol(p, NULL),
            k3 = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t o3[2] = {troupe_idx_sym(r3), troupe_idx_sym(w3)};
    troupe_axis_index_t shi[2] = {{1, {{-1, r3}}, PR - 1}, troupe_idx_sym(w3)};
    troupe_axis_index_t at3[2] = {troupe_idx_sym(r3), {2, {{2, w3}, {1, k3}}, 0}};
    troupe_sc_t *m = troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_get(p, v->in, at3),
                                     troupe_sc_get(p, v->sh, other ? shi : o3));
    items[3] = troupe_ll_for(
        p, r3, 0, PR - 1,
        troupe_ll_for(p, w3, 0, PW - 1,
                      troupe_ll_for(p, k3, 0, 1, troupe_ll_set(p, v->dx, at3, m), false), false),
        false);
    p->body = troupe_ll_seq(p, 4, items);
    cr_assert_eq(troupe_ll_proc_status(p), TROUPE_OK);
    return p;
}

typedef struct s_pool_data {
    float in[PR * 2 * PW], g[PR * PW], cnt[PR * PW], sh[PR * PW], dx[PR * 2 * PW], c[PR * PR];
} s_pool_data_t;

static void s_pool_run(const troupe_ll_proc_t *p, const s_pool_vars_t *v, s_pool_data_t *d)
{
    memset(d, 0, sizeof *d);
    for (int i = 0; i < PR * 2 * PW; i++)
        d->in[i] = 0.25f * (float)(i % 5) + 0.5f;
    for (int i = 0; i < PR * PW; i++) {
        d->g[i] = 0.3f * (float)i - 1.7f;
        d->cnt[i] = 99.0f; /* the zeroing must reach every cell */
    }
    troupe_interp_buffer_t bufs[6] = {{v->in, d->in}, {v->g, d->g},   {v->cnt, d->cnt},
                                      {v->sh, d->sh}, {v->dx, d->dx}, {v->c, d->c}};
    troupe_interp_args_t args = {bufs, 6, NULL, 0, NULL};
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_OK, "%s", troupe_last_error());
}

Test(fuse, a_windowed_gradient_becomes_one_nest_over_the_shared_loops)
{
    s_pool_vars_t v = s_pool_vars();
    troupe_ll_proc_t *plain = s_pool_proc(&v, false), *fused = s_pool_proc(&v, false);
    size_t count = 0;
    cr_assert_eq(troupe_ll_fuse_loops(fused, &count), TROUPE_OK);
    cr_assert_eq(count, 3, "the zeroing sunk, then two prefix fusions (got %zu)", count);
    cr_assert_eq(fused->body->kind, TROUPE_LL_FOR, "one nest, the zeroing inside it");
    cr_assert_eq(troupe_ll_proc_validate(fused), TROUPE_OK, "%s", troupe_last_error());
    s_pool_data_t a, b;
    s_pool_run(plain, &v, &a);
    s_pool_run(fused, &v, &b);
    cr_assert(memcmp(&a, &b, sizeof a) == 0, "fused results differ from the unfused ones");
    cr_assert_float_eq(b.cnt[0], a.in[0] + a.in[1], 0.0f);
    troupe_ll_proc_destroy(&plain);
    troupe_ll_proc_destroy(&fused);
    s_pool_free(&v);
}

/* With outer false (the cuda driver's choice, devices/device.h no_outer_fusion) the same
 * procedure keeps its zeroing and its three nests: none shares its whole space with another. */
Test(fuse, without_outer_fusion_the_windowed_gradient_stays_apart)
{
    s_pool_vars_t v = s_pool_vars();
    troupe_ll_proc_t *p = s_pool_proc(&v, false);
    size_t count = 99;
    cr_assert_eq(troupe_ll_fuse_loops_outer(p, false, &count), TROUPE_OK);
    cr_assert_eq(count, 0, "got %zu fusions", count);
    cr_assert_eq(p->body->kind, TROUPE_LL_SEQ);
    cr_assert_eq(p->body->u.seq.items[0]->kind, TROUPE_LL_ZERO_OUT, "the zeroing stays first");
    troupe_ll_proc_destroy(&p);
    s_pool_free(&v);
}

Test(fuse, a_read_of_another_outer_iterations_cell_keeps_the_prefix_apart)
{
    s_pool_vars_t v = s_pool_vars();
    troupe_ll_proc_t *plain = s_pool_proc(&v, true), *p = s_pool_proc(&v, true);
    size_t count = 9;
    cr_assert_eq(troupe_ll_fuse_loops(p, &count), TROUPE_OK);
    /* the zeroing sinks into cnt's nest, which sh's nest joins (it reads cnt where cnt's
     * iteration writes it); dx reads sh[PR-1-r, w], written by another row: apart */
    cr_assert_eq(count, 2, "got %zu", count);
    cr_assert_eq(s_top_nests(p), 2);
    s_pool_data_t a, b;
    s_pool_run(plain, &v, &a);
    s_pool_run(p, &v, &b);
    cr_assert(memcmp(&a, &b, sizeof a) == 0, "fused results differ from the unfused ones");
    troupe_ll_proc_destroy(&plain);
    troupe_ll_proc_destroy(&p);
    s_pool_free(&v);
}

Test(fuse, a_zeroing_before_a_summed_product_stays)
{
    s_pool_vars_t v = s_pool_vars();
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("product", &p), TROUPE_OK);
    /* c[i,j] += in[i,k] * in[j,k]: a contraction compiler/gemm may take whole */
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, NULL),
            k = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ij[2] = {troupe_idx_sym(i), troupe_idx_sym(j)},
                        ik[2] = {troupe_idx_sym(i), troupe_idx_sym(k)},
                        jk[2] = {troupe_idx_sym(j), troupe_idx_sym(k)};
    troupe_sc_t *prod = troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_get(p, v.in, ik),
                                        troupe_sc_get(p, v.in, jk));
    troupe_ll_t *items[2] = {
        troupe_ll_zero_out(p, v.c),
        troupe_ll_for(
            p, i, 0, PR - 1,
            troupe_ll_for(
                p, j, 0, PR - 1,
                troupe_ll_for(p, k, 0, 2 * PW - 1,
                              troupe_ll_set(p, v.c, ij,
                                            troupe_sc_binop(p, TROUPE_BINOP_ADD,
                                                            troupe_sc_get(p, v.c, ij), prod)),
                              false),
                false),
            false)};
    p->body = troupe_ll_seq(p, 2, items);
    size_t count = 9;
    cr_assert_eq(troupe_ll_fuse_loops(p, &count), TROUPE_OK);
    cr_assert_eq(count, 0);
    cr_assert_eq(p->body->kind, TROUPE_LL_SEQ);
    cr_assert_eq(p->body->u.seq.items[0]->kind, TROUPE_LL_ZERO_OUT);
    troupe_ll_proc_destroy(&p);
    s_pool_free(&v);
}

/* sh[r,w] = g[r,w] + in[r,2w]; zero dx; zero s; s[w] += sh[r,w] over (w, r, q < 2): the sum's nest,
 * its loops swapped, joins the first past the independent zeroing of dx; s's zeroing stays
 * before the fused nest. */
Test(fuse, a_channel_sum_joins_its_producer_past_independent_statements)
{
    s_pool_vars_t v = s_pool_vars();
    troupe_tnode_t *s = s_vec("s", PW);
    troupe_ll_proc_t *pr[2] = {NULL, NULL};
    for (int n = 0; n < 2; n++) {
        cr_assert_eq(troupe_ll_proc_new("sum", &pr[n]), TROUPE_OK);
        troupe_ll_proc_t *p = pr[n];
        int32_t r = troupe_ll_proc_add_symbol(p, NULL), w = troupe_ll_proc_add_symbol(p, NULL);
        troupe_axis_index_t o[2] = {troupe_idx_sym(r), troupe_idx_sym(w)};
        troupe_axis_index_t at[2] = {troupe_idx_sym(r), {1, {{2, w}}, 0}};
        troupe_sc_t *a = troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get(p, v.g, o),
                                         troupe_sc_get(p, v.in, at));
        int32_t w2 = troupe_ll_proc_add_symbol(p, NULL), r2 = troupe_ll_proc_add_symbol(p, NULL),
                q = troupe_ll_proc_add_symbol(p, NULL);
        troupe_axis_index_t o2[2] = {troupe_idx_sym(r2), troupe_idx_sym(w2)},
                            sw[1] = {troupe_idx_sym(w2)};
        troupe_sc_t *b = troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get(p, s, sw),
                                         troupe_sc_get(p, v.sh, o2));
        troupe_ll_t *items[4] = {
            troupe_ll_for(p, r, 0, PR - 1,
                          troupe_ll_for(p, w, 0, PW - 1, troupe_ll_set(p, v.sh, o, a), false),
                          false),
            troupe_ll_zero_out(p, v.dx), troupe_ll_zero_out(p, s),
            troupe_ll_for(
                p, w2, 0, PW - 1,
                troupe_ll_for(p, r2, 0, PR - 1,
                              troupe_ll_for(p, q, 0, 1, troupe_ll_set(p, s, sw, b), false), false),
                false)};
        p->body = troupe_ll_seq(p, 4, items);
        cr_assert_eq(troupe_ll_proc_status(p), TROUPE_OK);
    }
    size_t count = 0;
    cr_assert_eq(troupe_ll_fuse_loops(pr[1], &count), TROUPE_OK);
    cr_assert_eq(count, 1);
    cr_assert_eq(troupe_ll_proc_validate(pr[1]), TROUPE_OK, "%s", troupe_last_error());
    const troupe_ll_t *body = pr[1]->body;
    cr_assert_eq(body->kind, TROUPE_LL_SEQ);
    cr_assert_eq(body->u.seq.count, 3);
    cr_assert(body->u.seq.items[0]->kind == TROUPE_LL_ZERO_OUT &&
                  body->u.seq.items[0]->u.zero_out == s,
              "s's zeroing moved up with its sum");
    cr_assert_eq(body->u.seq.items[1]->kind, TROUPE_LL_FOR);
    cr_assert_eq(body->u.seq.items[1]->u.for_loop.to, PR - 1, "the sum's loops were swapped");
    cr_assert_eq(body->u.seq.items[2]->kind, TROUPE_LL_ZERO_OUT);
    float res[2][PW + PR * PW + 2 * PR * PW];
    for (int n = 0; n < 2; n++) {
        s_pool_data_t d;
        memset(&d, 0, sizeof d);
        for (int i = 0; i < PR * 2 * PW; i++)
            d.in[i] = 0.37f * (float)(i % 7) - 0.4f;
        for (int i = 0; i < PR * PW; i++)
            d.g[i] = 0.3f * (float)i - 1.7f;
        float sv[PW] = {5.0f, 5.0f, 5.0f, 5.0f};
        troupe_interp_buffer_t bufs[4] = {{v.in, d.in}, {v.g, d.g}, {v.sh, d.sh}, {s, sv}};
        troupe_interp_buffer_t all[5] = {bufs[0], bufs[1], bufs[2], bufs[3], {v.dx, d.dx}};
        troupe_interp_args_t args = {all, 5, NULL, 0, NULL};
        cr_assert_eq(troupe_interp_run(pr[n], &args), TROUPE_OK, "%s", troupe_last_error());
        memcpy(res[n], sv, sizeof sv);
        memcpy(res[n] + PW, d.sh, sizeof d.sh);
        memcpy(res[n] + PW + PR * PW, d.dx, sizeof d.dx);
    }
    cr_assert(memcmp(res[0], res[1], sizeof res[0]) == 0,
              "fused results differ from the unfused ones");
    troupe_ll_proc_destroy(&pr[0]);
    troupe_ll_proc_destroy(&pr[1]);
    troupe_tnode_release(&s);
    s_pool_free(&v);
}

/* e[i,j] = g[j] + m[j]; zero s; s[i] += e[i,j]: the sum's inner loop stays one SET (a lane sum
 * for compiler/cgen, whose order of additions a shared loop would change), so the nests share
 * only the loop over i. */
Test(fuse, a_summing_loop_is_never_shared)
{
    troupe_tnode_t *g = s_vec("g", N), *m = s_vec("m", N), *e = s_mat("e", 2, N),
                   *s = s_vec("s", 2);
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("sums", &p), TROUPE_OK);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, NULL),
            i2 = troupe_ll_proc_add_symbol(p, NULL), j2 = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ij[2] = {troupe_idx_sym(i), troupe_idx_sym(j)}, jj[1] = {troupe_idx_sym(j)},
                        ij2[2] = {troupe_idx_sym(i2), troupe_idx_sym(j2)},
                        i2i[1] = {troupe_idx_sym(i2)};
    troupe_ll_t *items[3] = {
        troupe_ll_for(p, i, 0, 1,
                      troupe_ll_for(p, j, 0, N - 1,
                                    troupe_ll_set(p, e, ij,
                                                  troupe_sc_binop(p, TROUPE_BINOP_ADD,
                                                                  troupe_sc_get(p, g, jj),
                                                                  troupe_sc_get(p, m, jj))),
                                    false),
                      false),
        troupe_ll_zero_out(p, s),
        troupe_ll_for(p, i2, 0, 1,
                      troupe_ll_for(p, j2, 0, N - 1,
                                    troupe_ll_set(p, s, i2i,
                                                  troupe_sc_binop(p, TROUPE_BINOP_ADD,
                                                                  troupe_sc_get(p, s, i2i),
                                                                  troupe_sc_get(p, e, ij2))),
                                    false),
                      false)};
    p->body = troupe_ll_seq(p, 3, items);
    size_t count = 0;
    cr_assert_eq(troupe_ll_fuse_loops(p, &count), TROUPE_OK);
    cr_assert_eq(troupe_ll_proc_validate(p), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(p->body->kind, TROUPE_LL_FOR, "one nest over i, s zeroed inside it");
    const troupe_ll_t *b = p->body->u.for_loop.body;
    cr_assert_eq(b->kind, TROUPE_LL_SEQ);
    cr_assert_eq(b->u.seq.count, 3, "s's zeroing, e's loop, the sum's loop");
    const troupe_ll_t *sum = b->u.seq.items[2];
    cr_assert_eq(sum->kind, TROUPE_LL_FOR);
    cr_assert_eq(sum->u.for_loop.body->kind, TROUPE_LL_SET, "the summing loop holds its SET alone");
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&g);
    troupe_tnode_release(&m);
    troupe_tnode_release(&e);
    troupe_tnode_release(&s);
}

/* As above, but the sum writes s[0] (no index of the outer two loops): swapping them would
 * reorder its additions, so the nests stay apart. */
Test(fuse, a_sum_into_one_cell_keeps_its_loop_order)
{
    s_pool_vars_t v = s_pool_vars();
    troupe_tnode_t *s = s_vec("s", PW);
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("one_cell", &p), TROUPE_OK);
    int32_t r = troupe_ll_proc_add_symbol(p, NULL), w = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t o[2] = {troupe_idx_sym(r), troupe_idx_sym(w)};
    int32_t w2 = troupe_ll_proc_add_symbol(p, NULL), r2 = troupe_ll_proc_add_symbol(p, NULL),
            q = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t o2[2] = {troupe_idx_sym(r2), troupe_idx_sym(w2)},
                        s0[1] = {troupe_idx_fixed(0)};
    troupe_ll_t *items[2] = {
        troupe_ll_for(p, r, 0, PR - 1,
                      troupe_ll_for(p, w, 0, PW - 1,
                                    troupe_ll_set(p, v.sh, o, troupe_sc_get(p, v.g, o)), false),
                      false),
        troupe_ll_for(
            p, w2, 0, PW - 1,
            troupe_ll_for(p, r2, 0, PR - 1,
                          troupe_ll_for(p, q, 0, 1,
                                        troupe_ll_set(p, s, s0,
                                                      troupe_sc_binop(p, TROUPE_BINOP_ADD,
                                                                      troupe_sc_get(p, s, s0),
                                                                      troupe_sc_get(p, v.sh, o2))),
                                        false),
                          false),
            false)};
    p->body = troupe_ll_seq(p, 2, items);
    size_t count = 9;
    cr_assert_eq(troupe_ll_fuse_loops(p, &count), TROUPE_OK);
    cr_assert_eq(count, 0);
    cr_assert_eq(s_top_nests(p), 2);
    cr_assert_eq(p->body->u.seq.items[1]->u.for_loop.to, PW - 1,
                 "the sum's loops kept their order");
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&s);
    s_pool_free(&v);
}
