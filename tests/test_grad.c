/* Tests of nn/grad.h: derived gradients against central finite differences in double
 * precision (through the reference interpreter), the tie rules of max/min, and the refusals. */
#include "nn/grad.h"

#include "base/log.h"
#include "compiler/interp.h"
#include "compiler/lower.h"
#include "ir/assign.h"
#include "ir/text.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a small model under test ------------------------------------------------------------- */

#define G_MAX_NODES 16

typedef struct g_model {
    troupe_asgn_comp_t *comp;
    troupe_tnode_t *nodes[G_MAX_NODES]; /* owned references */
    int n;
    troupe_asgn_t *items[32];
    int nitems;
    troupe_tnode_t *params[4], *grads[4];
    int nparams;
    troupe_tnode_t *loss;
    troupe_ll_proc_t *proc;
    /* buffers: one per node of the comp */
    troupe_interp_buffer_t *bufs;
    size_t nbufs;
    uint64_t rng;
} g_model_t;

static double g_rnd(g_model_t *m, double lo, double hi)
{
    m->rng = m->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (double)(m->rng >> 11) * 0x1p-53;
}

static troupe_tnode_t *g_node(g_model_t *m, const char *label, int ndims, const int64_t *dims)
{
    const char *labels[1] = {label};
    troupe_tnode_t *tn = NULL;
    cr_assert_eq(troupe_tnode_new(labels, 1, TROUPE_PREC_DOUBLE, ndims, dims, NULL, 0.0, &tn),
                 TROUPE_OK, "%s", troupe_last_error());
    cr_assert_lt(m->n, G_MAX_NODES);
    m->nodes[m->n++] = tn;
    return tn;
}

static troupe_tnode_t *g_param(g_model_t *m, const char *label, int ndims, const int64_t *dims)
{
    troupe_tnode_t *p = g_node(m, label, ndims, dims);
    troupe_tnode_t *g = NULL;
    cr_assert_eq(troupe_nn_grad_node_new(p, &g), TROUPE_OK);
    cr_assert_lt(m->n, G_MAX_NODES);
    m->nodes[m->n++] = g;
    m->params[m->nparams] = p;
    m->grads[m->nparams++] = g;
    return p;
}

static void g_init(g_model_t *m, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->rng = seed;
    cr_assert_eq(troupe_asgn_comp_new(&m->comp), TROUPE_OK);
    m->loss = g_node(m, "loss", 0, NULL);
}

static void g_add(g_model_t *m, troupe_status_t st, troupe_asgn_t *const *t)
{
    cr_assert_eq(st, TROUPE_OK, "builder: %s", troupe_last_error());
    m->items[m->nitems++] = *t;
}

static void g_un(g_model_t *m, bool init, troupe_binop_t acc, troupe_tnode_t *l, troupe_unop_t op,
                 troupe_tnode_t *a, const char *spec)
{
    troupe_asgn_t *t = NULL;
    g_add(m, troupe_asgn_accum_unop(m->comp, init, acc, l, op, troupe_asgn_node(a), spec, &t), &t);
}

static void g_bin(g_model_t *m, bool init, troupe_binop_t acc, troupe_tnode_t *l,
                  troupe_binop_t op, troupe_tnode_t *a, troupe_tnode_t *b, const char *spec)
{
    troupe_asgn_t *t = NULL;
    g_add(m,
          troupe_asgn_accum_binop(m->comp, init, acc, l, op, troupe_asgn_node(a),
                                  troupe_asgn_node(b), spec, &t),
          &t);
}

static void g_ter(g_model_t *m, troupe_ternop_t op, troupe_tnode_t *l, troupe_tnode_t *a,
                  troupe_tnode_t *b, troupe_tnode_t *c, const char *spec)
{
    troupe_asgn_t *t = NULL;
    g_add(m,
          troupe_asgn_accum_ternop(m->comp, true, TROUPE_BINOP_ARG2, l, op, troupe_asgn_node(a),
                                   troupe_asgn_node(b), troupe_asgn_node(c), spec, &t),
          &t);
}

/* loss = sum(y * r) over y's cells, r a fixed random weight: every cell of y matters. */
static void g_loss_of(g_model_t *m, troupe_tnode_t *y)
{
    troupe_tnode_t *r = g_node(m, "r", y->ndims, y->dims);
    char term[16] = {0};
    for (int a = 0; a < y->ndims; a++)
        term[a] = (char)('p' + a);
    char spec[64];
    snprintf(spec, sizeof spec, "%s,%s=>", term, term);
    g_bin(m, true, TROUPE_BINOP_ADD, m->loss, TROUPE_BINOP_MUL, y, r, spec);
}

/* Sets the root and differentiates. Returns the status of troupe_nn_grad. */
static troupe_status_t g_grad(g_model_t *m)
{
    troupe_asgn_t *root = NULL;
    cr_assert_eq(troupe_asgn_seq(m->comp, (size_t)m->nitems, m->items, &root), TROUPE_OK);
    troupe_asgn_comp_set_root(m->comp, root);
    return troupe_nn_grad(m->comp, m->loss, (size_t)m->nparams, m->params, m->grads, NULL);
}

static double *g_data(g_model_t *m, const troupe_tnode_t *tn)
{
    for (size_t i = 0; i < m->nbufs; i++)
        if (m->bufs[i].tn == tn)
            return m->bufs[i].data;
    cr_assert_fail("no buffer for #%d", tn->id);
    return NULL;
}

/* Lowers, gives every node of the comp a buffer, fills the read-only ones with uniform values
 * in [lo, hi). */
static void g_build(g_model_t *m, double lo, double hi)
{
    cr_assert_eq(troupe_asgn_lower(m->comp, "grad_test", &m->proc), TROUPE_OK, "%s",
                 troupe_last_error());
    m->nbufs = m->comp->nnodes;
    m->bufs = calloc(m->nbufs, sizeof *m->bufs);
    for (size_t i = 0; i < m->nbufs; i++) {
        m->bufs[i].tn = m->comp->nodes[i];
        m->bufs[i].data = calloc(1, m->comp->nodes[i]->size_bytes);
    }
    for (int i = 0; i < m->n; i++) {
        if (troupe_asgn_comp_node_index(m->comp, m->nodes[i]) == SIZE_MAX)
            continue; /* a parameter the comp never mentions */
        double *d = g_data(m, m->nodes[i]);
        for (int64_t k = 0; k < troupe_tnode_num_elems(m->nodes[i]); k++)
            d[k] = g_rnd(m, lo, hi);
    }
}

static double g_run(g_model_t *m)
{
    troupe_interp_args_t args = {m->bufs, m->nbufs, NULL, 0, NULL};
    cr_assert_eq(troupe_interp_run(m->proc, &args), TROUPE_OK, "%s", troupe_last_error());
    return g_data(m, m->loss)[0];
}

static void g_free(g_model_t *m)
{
    troupe_ll_proc_destroy(&m->proc);
    for (size_t i = 0; i < m->nbufs; i++)
        free(m->bufs[i].data);
    free(m->bufs);
    troupe_asgn_comp_destroy(&m->comp);
    for (int i = 0; i < m->n; i++)
        troupe_tnode_release(&m->nodes[i]);
}

/* Every parameter's derived gradient against central differences: relative error <= tol, with
 * the inputs uniform in [lo, hi). */
static void g_check_in(g_model_t *m, double lo, double hi, double tol)
{
    cr_assert_eq(g_grad(m), TROUPE_OK, "grad: %s", troupe_last_error());
    if (getenv("GRAD_TEST_PRINT")) {
        char *txt = NULL;
        if (troupe_text_print_comp(m->comp, &txt) == TROUPE_OK)
            fprintf(stderr, "%s\n", txt);
        free(txt);
    }
    g_build(m, lo, hi);
    g_run(m);
    for (int p = 0; p < m->nparams; p++) {
        if (troupe_asgn_comp_node_index(m->comp, m->params[p]) == SIZE_MAX)
            continue; /* never read: its gradient is the zero fill */
        int64_t n = troupe_tnode_num_elems(m->params[p]);
        g_run(m); /* at the unperturbed point */
        double *g = malloc((size_t)n * sizeof *g);
        memcpy(g, g_data(m, m->grads[p]), (size_t)n * sizeof *g);
        double *v = g_data(m, m->params[p]);
        for (int64_t k = 0; k < n; k++) {
            const double h = 1e-6;
            double v0 = v[k];
            v[k] = v0 + h;
            double lp = g_run(m);
            v[k] = v0 - h;
            double lm = g_run(m);
            v[k] = v0;
            double fd = (lp - lm) / (2 * h);
            double err = fabs(fd - g[k]) / fmax(1.0, fmax(fabs(fd), fabs(g[k])));
            cr_expect_leq(err, tol, "%s[%lld]: derived %.12g, finite difference %.12g (%s)",
                          m->params[p]->label[0], (long long)k, g[k], fd, m->proc->name);
        }
        free(g);
    }
    g_free(m);
}

static void g_check(g_model_t *m, double tol)
{
    g_check_in(m, 0.3, 1.2, tol);
}

static const int64_t D2x3[2] = {2, 3}, D3x4[2] = {3, 4}, D2x4[2] = {2, 4}, D3[1] = {3},
                     D4[1] = {4};

/* ---- accumulations and projections ---------------------------------------------------------- */

Test(grad, linear_bias_then_matmul)
{
    g_model_t m;
    g_init(&m, 1);
    troupe_tnode_t *x = g_node(&m, "x", 2, D2x3);
    troupe_tnode_t *w = g_param(&m, "w", 2, D3x4);
    troupe_tnode_t *b = g_param(&m, "b", 1, D4);
    troupe_tnode_t *z = g_node(&m, "z", 2, D2x4);
    g_un(&m, true, TROUPE_BINOP_ARG2, z, TROUPE_UNOP_IDENTITY, b, "j=>^bj");
    g_bin(&m, false, TROUPE_BINOP_ADD, z, TROUPE_BINOP_MUL, x, w, "bi,ij=>bj");
    g_loss_of(&m, z);
    g_check(&m, 1e-6);
}

Test(grad, both_matmul_operands_and_reuse)
{
    /* z = x w, loss = sum((z + x w) r): x and w are each read twice */
    g_model_t m;
    g_init(&m, 2);
    troupe_tnode_t *x = g_param(&m, "x", 2, D2x3);
    troupe_tnode_t *w = g_param(&m, "w", 2, D3x4);
    troupe_tnode_t *z = g_node(&m, "z", 2, D2x4), *y = g_node(&m, "y", 2, D2x4);
    g_bin(&m, true, TROUPE_BINOP_ADD, z, TROUPE_BINOP_MUL, x, w, "bi,ij=>bj");
    g_bin(&m, true, TROUPE_BINOP_ARG2, y, TROUPE_BINOP_ADD, z, z, "bj,bj=>bj");
    g_bin(&m, false, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL, x, w, "bi,ij=>bj");
    g_loss_of(&m, y);
    g_check(&m, 1e-6);
}

Test(grad, transpose_diagonal_fixed_index)
{
    g_model_t m;
    g_init(&m, 3);
    const int64_t d33[2] = {3, 3};
    troupe_tnode_t *a = g_param(&m, "a", 2, d33);
    troupe_tnode_t *t = g_node(&m, "t", 2, d33), *dg = g_node(&m, "dg", 1, D3),
                   *col = g_node(&m, "col", 1, D3), *s = g_node(&m, "s", 1, D3);
    g_un(&m, true, TROUPE_BINOP_ARG2, t, TROUPE_UNOP_IDENTITY, a, "ij=>ji");
    g_un(&m, true, TROUPE_BINOP_ARG2, dg, TROUPE_UNOP_IDENTITY, t, "ii=>i");
    g_un(&m, true, TROUPE_BINOP_ARG2, col, TROUPE_UNOP_IDENTITY, a, "i[1]=>i");
    g_bin(&m, true, TROUPE_BINOP_ARG2, s, TROUPE_BINOP_MUL, dg, col, "i,i=>i");
    g_un(&m, false, TROUPE_BINOP_SUB, s, TROUPE_UNOP_IDENTITY, t, "ij=>i");
    g_loss_of(&m, s);
    g_check(&m, 1e-6);
}

Test(grad, strided_and_dilated_convolution)
{
    g_model_t m;
    g_init(&m, 4);
    const int64_t d9[1] = {9}, d3[1] = {3}, dy[1] = {4}, dz[1] = {5};
    troupe_tnode_t *x = g_param(&m, "x", 1, d9), *k = g_param(&m, "k", 1, d3);
    troupe_tnode_t *y = g_node(&m, "y", 1, dy), *z = g_node(&m, "z", 1, dz);
    troupe_tnode_t *s = g_node(&m, "s", 0, NULL);
    g_bin(&m, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL, x, k, "(2i+j),j=>i"); /* stride 2 */
    g_bin(&m, true, TROUPE_BINOP_ADD, z, TROUPE_BINOP_MUL, x, k, "(i+2j),j=>i"); /* dilation 2 */
    const int64_t one[1] = {1};
    (void)one;
    g_un(&m, true, TROUPE_BINOP_ADD, s, TROUPE_UNOP_IDENTITY, y, "i=>");
    g_un(&m, false, TROUPE_BINOP_ADD, s, TROUPE_UNOP_EXP, z, "i=>");
    g_un(&m, true, TROUPE_BINOP_ADD, m.loss, TROUPE_UNOP_IDENTITY, s, "=>");
    g_check(&m, 1e-6);
}

Test(grad, broadcast_scalar_and_reduction_multiplicity)
{
    /* loss = sum_ij (a_i + c) * w_j: c is broadcast over i and j; a over j */
    g_model_t m;
    g_init(&m, 5);
    troupe_tnode_t *a = g_param(&m, "a", 1, D3), *c = g_param(&m, "c", 0, NULL);
    troupe_tnode_t *w = g_node(&m, "w", 1, D4);
    troupe_tnode_t *u = g_node(&m, "u", 1, D3);
    g_bin(&m, true, TROUPE_BINOP_ARG2, u, TROUPE_BINOP_ADD, a, c, "i,=>i");
    g_bin(&m, true, TROUPE_BINOP_ADD, m.loss, TROUPE_BINOP_MUL, u, w, "i,j=>");
    /* an add whose other operand brings an iterator of its own: sum_ij (a_i + w_j) */
    g_bin(&m, false, TROUPE_BINOP_ADD, m.loss, TROUPE_BINOP_ADD, a, w, "i,j=>");
    g_check(&m, 1e-6);
}

/* ---- ops ------------------------------------------------------------------------------------ */

static void g_unop_case(troupe_unop_t op, bool reduce, double lo, double hi)
{
    g_model_t m;
    g_init(&m, 10 + (uint64_t)op);
    troupe_tnode_t *x = g_param(&m, "x", 2, D2x3);
    troupe_tnode_t *y = g_node(&m, "y", reduce ? 1 : 2, reduce ? (const int64_t[]){2} : D2x3);
    if (reduce)
        g_un(&m, true, TROUPE_BINOP_ADD, y, op, x, "ab=>a");
    else
        g_un(&m, true, TROUPE_BINOP_ARG2, y, op, x, "ab=>ab");
    g_loss_of(&m, y);
    cr_log_info("unop %s%s", troupe_unop_name(op), reduce ? " (reduced)" : "");
    g_check_in(&m, lo, hi, 1e-6);
}

Test(grad, unops)
{
    const troupe_unop_t smooth[] = {TROUPE_UNOP_IDENTITY, TROUPE_UNOP_EXP,  TROUPE_UNOP_LOG,
                                    TROUPE_UNOP_EXP2,     TROUPE_UNOP_LOG2, TROUPE_UNOP_SIN,
                                    TROUPE_UNOP_COS,      TROUPE_UNOP_SQRT, TROUPE_UNOP_RECIP,
                                    TROUPE_UNOP_RECIP_SQRT, TROUPE_UNOP_NEG,
                                    TROUPE_UNOP_TANH_APPROX};
    for (size_t i = 0; i < sizeof smooth / sizeof smooth[0]; i++) {
        g_unop_case(smooth[i], false, 0.3, 1.2);
        g_unop_case(smooth[i], true, 0.3, 1.2);
    }
    /* piecewise: away from the kinks */
    g_unop_case(TROUPE_UNOP_RELU, false, 0.1, 1.0);
    g_unop_case(TROUPE_UNOP_RELU, true, -1.0, -0.1);
    g_unop_case(TROUPE_UNOP_SATUR01, false, 0.1, 0.9);
}

static void g_binop_case(troupe_binop_t op, const char *spec, double lo, double hi)
{
    g_model_t m;
    g_init(&m, 40 + (uint64_t)op);
    troupe_tnode_t *a = g_param(&m, "a", 2, D2x3), *b = g_param(&m, "b", 1, D3);
    troupe_tnode_t *y = g_node(&m, "y", 2, D2x3);
    g_bin(&m, true, TROUPE_BINOP_ARG2, y, op, a, b, spec);
    g_loss_of(&m, y);
    cr_log_info("binop %s", troupe_binop_name(op));
    g_check_in(&m, lo, hi, 1e-6);
}

Test(grad, binops)
{
    const troupe_binop_t ops[] = {TROUPE_BINOP_ARG1,      TROUPE_BINOP_ARG2, TROUPE_BINOP_ADD,
                                  TROUPE_BINOP_SUB,       TROUPE_BINOP_MUL,  TROUPE_BINOP_DIV,
                                  TROUPE_BINOP_TO_POW_OF, TROUPE_BINOP_MAX,  TROUPE_BINOP_MIN,
                                  TROUPE_BINOP_RELU_GATE};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        g_binop_case(ops[i], "ab,b=>ab", 0.3, 1.2);
}

Test(grad, ternops)
{
    g_model_t m;
    g_init(&m, 60);
    troupe_tnode_t *a = g_param(&m, "a", 2, D2x3), *b = g_param(&m, "b", 1, D3),
                   *c = g_param(&m, "c", 2, D2x3);
    troupe_tnode_t *cond = g_node(&m, "cond", 2, D2x3);
    troupe_tnode_t *y = g_node(&m, "y", 2, D2x3), *z = g_node(&m, "z", 2, D2x3),
                   *s = g_node(&m, "s", 2, D2x3);
    /* cond = a < c: a constant; then where and fma */
    g_bin(&m, true, TROUPE_BINOP_ARG2, cond, TROUPE_BINOP_CMPLT, a, c, "ab,ab=>ab");
    g_ter(&m, TROUPE_TERNOP_WHERE, y, cond, a, c, "ab,ab,ab=>ab");
    g_ter(&m, TROUPE_TERNOP_FMA, z, a, b, c, "ab,b,ab=>ab");
    g_bin(&m, true, TROUPE_BINOP_ARG2, s, TROUPE_BINOP_MUL, y, z, "ab,ab=>ab");
    g_loss_of(&m, s);
    g_check(&m, 1e-6);
}

/* ---- max and min reductions ----------------------------------------------------------------- */

Test(grad, max_min_reductions)
{
    g_model_t m;
    g_init(&m, 70);
    troupe_tnode_t *x = g_param(&m, "x", 2, D3x4);
    troupe_tnode_t *mx = g_node(&m, "mx", 1, D3), *mn = g_node(&m, "mn", 1, D4);
    g_un(&m, true, TROUPE_BINOP_MAX, mx, TROUPE_UNOP_IDENTITY, x, "ij=>i");
    g_un(&m, true, TROUPE_BINOP_MIN, mn, TROUPE_UNOP_EXP, x, "ij=>j");
    g_bin(&m, true, TROUPE_BINOP_ADD, m.loss, TROUPE_BINOP_MUL, mx, mx, "i,i=>");
    g_un(&m, false, TROUPE_BINOP_ADD, m.loss, TROUPE_UNOP_IDENTITY, mn, "j=>");
    g_check(&m, 1e-6);
}

Test(grad, max_ties_split_evenly)
{
    /* PyTorch's amax: d amax / dx is 1/k for each of k tied maxima */
    g_model_t m;
    g_init(&m, 71);
    troupe_tnode_t *x = g_param(&m, "x", 2, D2x4);
    troupe_tnode_t *mx = g_node(&m, "mx", 1, (const int64_t[]){2});
    g_un(&m, true, TROUPE_BINOP_MAX, mx, TROUPE_UNOP_IDENTITY, x, "ij=>i");
    g_un(&m, true, TROUPE_BINOP_ADD, m.loss, TROUPE_UNOP_IDENTITY, mx, "i=>");
    cr_assert_eq(g_grad(&m), TROUPE_OK, "%s", troupe_last_error());
    g_build(&m, 0, 1);
    const double xs[8] = {1, 3, 3, 2, 5, 5, 5, 0};
    memcpy(g_data(&m, x), xs, sizeof xs);
    cr_assert_float_eq(g_run(&m), 8.0, 1e-15);
    const double want[8] = {0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0};
    double *g = g_data(&m, m.grads[0]);
    for (int k = 0; k < 8; k++)
        cr_expect_float_eq(g[k], want[k], 1e-15, "x[%d]: %g, want %g", k, g[k], want[k]);
    g_free(&m);
}

Test(grad, pointwise_max_ties_split_evenly)
{
    g_model_t m;
    g_init(&m, 72);
    troupe_tnode_t *a = g_param(&m, "a", 1, D3), *b = g_param(&m, "b", 1, D3);
    troupe_tnode_t *y = g_node(&m, "y", 1, D3);
    g_bin(&m, true, TROUPE_BINOP_ARG2, y, TROUPE_BINOP_MAX, a, b, "i,i=>i");
    g_un(&m, true, TROUPE_BINOP_ADD, m.loss, TROUPE_UNOP_IDENTITY, y, "i=>");
    cr_assert_eq(g_grad(&m), TROUPE_OK, "%s", troupe_last_error());
    g_build(&m, 0, 1);
    const double av[3] = {1, 2, 3}, bv[3] = {2, 2, 1};
    memcpy(g_data(&m, a), av, sizeof av);
    memcpy(g_data(&m, b), bv, sizeof bv);
    g_run(&m);
    const double wa[3] = {0, 0.5, 1}, wb[3] = {1, 0.5, 0};
    for (int k = 0; k < 3; k++) {
        cr_expect_float_eq(g_data(&m, m.grads[0])[k], wa[k], 1e-15, "a[%d]", k);
        cr_expect_float_eq(g_data(&m, m.grads[1])[k], wb[k], 1e-15, "b[%d]", k);
    }
    g_free(&m);
}

/* ---- refusals ------------------------------------------------------------------------------- */

Test(grad, refuses_non_scalar_loss)
{
    g_model_t m;
    g_init(&m, 80);
    troupe_tnode_t *w = g_param(&m, "w", 1, D3);
    troupe_tnode_t *y = g_node(&m, "y", 1, D3);
    g_un(&m, true, TROUPE_BINOP_ARG2, y, TROUPE_UNOP_EXP, w, "i=>i");
    troupe_asgn_t *root = NULL;
    cr_assert_eq(troupe_asgn_seq(m.comp, (size_t)m.nitems, m.items, &root), TROUPE_OK);
    troupe_asgn_comp_set_root(m.comp, root);
    cr_assert_eq(troupe_nn_grad(m.comp, y, 1, m.params, m.grads, NULL), TROUPE_INVALID_ARGUMENT);
    cr_expect(strstr(troupe_last_error(), "must be a scalar") != NULL, "%s", troupe_last_error());
    cr_expect_eq(m.comp->root, root, "the comp's root is unchanged");
    g_free(&m);
}

Test(grad, refuses_accumulation_without_derivative)
{
    g_model_t m;
    g_init(&m, 81);
    troupe_tnode_t *w = g_param(&m, "w", 1, D3);
    g_un(&m, true, TROUPE_BINOP_MUL, m.loss, TROUPE_UNOP_IDENTITY, w, "i=>");
    cr_assert_eq(g_grad(&m), TROUPE_INVALID_ARGUMENT);
    const char *e = troupe_last_error();
    cr_expect(strstr(e, "loss =mul identity(...) over 'i=>'") != NULL, "%s", e);
    cr_expect(strstr(e, "has no derivative") != NULL, "%s", e);
    g_free(&m);
}

Test(grad, refuses_arg2_over_non_injective_projection)
{
    g_model_t m;
    g_init(&m, 82);
    troupe_tnode_t *w = g_param(&m, "w", 2, D2x3);
    troupe_tnode_t *y = g_node(&m, "y", 1, (const int64_t[]){2});
    g_un(&m, true, TROUPE_BINOP_ARG2, y, TROUPE_UNOP_IDENTITY, w, "ab=>a");
    g_un(&m, true, TROUPE_BINOP_ADD, m.loss, TROUPE_UNOP_IDENTITY, y, "a=>");
    cr_assert_eq(g_grad(&m), TROUPE_INVALID_ARGUMENT);
    cr_expect(strstr(troupe_last_error(), "non-injective") != NULL, "%s", troupe_last_error());
    g_free(&m);
}

Test(grad, refuses_overwrite_on_the_path)
{
    g_model_t m;
    g_init(&m, 83);
    troupe_tnode_t *w = g_param(&m, "w", 1, D3);
    troupe_tnode_t *y = g_node(&m, "y", 1, D3);
    g_un(&m, true, TROUPE_BINOP_ARG2, y, TROUPE_UNOP_EXP, w, "i=>i");
    g_un(&m, false, TROUPE_BINOP_MAX, y, TROUPE_UNOP_IDENTITY, w, "i=>i");
    g_un(&m, true, TROUPE_BINOP_ADD, m.loss, TROUPE_UNOP_IDENTITY, y, "i=>");
    cr_assert_eq(g_grad(&m), TROUPE_INVALID_ARGUMENT);
    cr_expect(strstr(troupe_last_error(), "may only be added to") != NULL, "%s",
              troupe_last_error());
    g_free(&m);
}

Test(grad, unreached_parameter_gets_zero_gradient)
{
    g_model_t m;
    g_init(&m, 84);
    troupe_tnode_t *w = g_param(&m, "w", 1, D3);
    troupe_tnode_t *u = g_param(&m, "unused", 1, D4);
    (void)u;
    troupe_tnode_t *cst = g_node(&m, "c", 1, D3);
    g_bin(&m, true, TROUPE_BINOP_ADD, m.loss, TROUPE_BINOP_MUL, w, cst, "i,i=>");
    cr_assert_eq(g_grad(&m), TROUPE_OK, "%s", troupe_last_error());
    g_build(&m, 0.5, 1);
    double *gu = g_data(&m, m.grads[1]);
    for (int k = 0; k < 4; k++)
        gu[k] = 42; /* stale values from an earlier step are overwritten */
    g_run(&m);
    for (int k = 0; k < 4; k++)
        cr_expect_eq(gu[k], 0.0);
    double *gw = g_data(&m, m.grads[0]), *c = g_data(&m, cst);
    for (int k = 0; k < 3; k++)
        cr_expect_eq(gw[k], c[k]);
    g_free(&m);
}

Test(grad, comparisons_are_constants)
{
    /* y = (w < c) * w: the comparison passes no gradient; d/dw = (w < c) */
    g_model_t m;
    g_init(&m, 85);
    troupe_tnode_t *w = g_param(&m, "w", 1, D3);
    troupe_tnode_t *c = g_node(&m, "c", 1, D3), *lt = g_node(&m, "lt", 1, D3);
    g_bin(&m, true, TROUPE_BINOP_ARG2, lt, TROUPE_BINOP_CMPLT, w, c, "i,i=>i");
    g_bin(&m, true, TROUPE_BINOP_ADD, m.loss, TROUPE_BINOP_MUL, lt, w, "i,i=>");
    cr_assert_eq(g_grad(&m), TROUPE_OK, "%s", troupe_last_error());
    g_build(&m, 0, 1);
    const double wv[3] = {0.2, 0.8, 0.5}, cv[3] = {0.5, 0.5, 0.9};
    memcpy(g_data(&m, w), wv, sizeof wv);
    memcpy(g_data(&m, c), cv, sizeof cv);
    g_run(&m);
    const double want[3] = {1, 0, 1};
    for (int k = 0; k < 3; k++)
        cr_expect_eq(g_data(&m, m.grads[0])[k], want[k], "w[%d]", k);
    g_free(&m);
}

/* ---- fuzz: random forward DAGs --------------------------------------------------------------- */

/* Shapes of the fuzzed nodes: (2,3) "ab", (3,2) "ba", (2) "a", (3) "b", scalar "". */
enum { F_A, F_AT, F_R, F_C, F_S, F_NSHAPES };
static const char *const k_fterm[F_NSHAPES] = {"ab", "ba", "a", "b", ""};
static const int k_fndims[F_NSHAPES] = {2, 2, 1, 1, 0};
static const int64_t k_fdims[F_NSHAPES][2] = {{2, 3}, {3, 2}, {2, 0}, {3, 0}, {0, 0}};

typedef struct f_val {
    troupe_tnode_t *tn;
    int shape;
} f_val_t;

static uint32_t f_pick(g_model_t *m, uint32_t n)
{
    return (uint32_t)(g_rnd(m, 0, 1) * n) % n;
}

/* "r1,r2=>lhs" with each lhs letter that no operand term has marked "^" (a broadcast asked
 * for, ir/projection.h). */
static void f_spec(char *spec, size_t cap, const char *r1, const char *r2, const char *lhs)
{
    int n = snprintf(spec, cap, r2 ? "%s,%s=>" : "%s=>", r1, r2);
    for (const char *l = lhs; *l && (size_t)n + 3 < cap; l++) {
        if (!strchr(r1, *l) && !(r2 && strchr(r2, *l)))
            spec[n++] = '^';
        spec[n++] = *l;
    }
    spec[n] = '\0';
}

/* One random statement reading earlier values, writing a new node. */
static f_val_t f_statement(g_model_t *m, const f_val_t *vals, int nvals)
{
    static const troupe_unop_t unops[] = {TROUPE_UNOP_IDENTITY, TROUPE_UNOP_NEG,
                                          TROUPE_UNOP_TANH_APPROX, TROUPE_UNOP_SIN,
                                          TROUPE_UNOP_COS, TROUPE_UNOP_EXP};
    static const troupe_binop_t binops[] = {TROUPE_BINOP_ADD, TROUPE_BINOP_SUB, TROUPE_BINOP_MUL,
                                            TROUPE_BINOP_MAX, TROUPE_BINOP_MIN};
    f_val_t a = vals[f_pick(m, (uint32_t)nvals)], b = vals[f_pick(m, (uint32_t)nvals)];
    char spec[64];
    f_val_t out = {NULL, F_A};
    if (f_pick(m, 2) == 0) {
        /* unop: same shape, transpose, reduction (add or max) or broadcast */
        troupe_unop_t op = unops[f_pick(m, sizeof unops / sizeof unops[0])];
        int to;
        troupe_binop_t acc = TROUPE_BINOP_ARG2;
        switch (f_pick(m, 4)) {
        case 0:
            to = a.shape;
            break;
        case 1:
            to = a.shape == F_A ? F_AT : a.shape == F_AT ? F_A : a.shape;
            break;
        case 2: /* reduce to a vector or scalar */
            to = a.shape == F_A ? (f_pick(m, 2) ? F_R : F_C) : F_S;
            acc = f_pick(m, 3) == 0 ? TROUPE_BINOP_MAX : TROUPE_BINOP_ADD;
            break;
        default: /* broadcast a vector or scalar up to (2,3) */
            to = F_A;
            acc = a.shape == F_A || a.shape == F_AT ? TROUPE_BINOP_ADD : TROUPE_BINOP_ARG2;
            break;
        }
        out.shape = to;
        out.tn = g_node(m, "f", k_fndims[to], k_fdims[to]);
        f_spec(spec, sizeof spec, k_fterm[a.shape], NULL, k_fterm[to]);
        g_un(m, true, acc, out.tn, op, a.tn, spec);
        return out;
    }
    /* binop: pointwise over the union of the operands' axes, written into (2,3), or a
     * contraction into (2) */
    troupe_binop_t op = binops[f_pick(m, sizeof binops / sizeof binops[0])];
    if (f_pick(m, 3) == 0) {
        out.shape = F_R;
        out.tn = g_node(m, "f", 1, k_fdims[F_R]);
        f_spec(spec, sizeof spec, k_fterm[a.shape], k_fterm[b.shape], "a");
        g_bin(m, true, TROUPE_BINOP_ADD, out.tn, op, a.tn, b.tn, spec);
        return out;
    }
    out.tn = g_node(m, "f", 2, k_fdims[F_A]);
    f_spec(spec, sizeof spec, k_fterm[a.shape], k_fterm[b.shape], "ab");
    g_bin(m, true, TROUPE_BINOP_ARG2, out.tn, op, a.tn, b.tn, spec); /* injective */
    return out;
}

Test(grad, fuzz_random_dags_against_finite_differences)
{
    int seeds = getenv("GRAD_FUZZ_SEEDS") ? atoi(getenv("GRAD_FUZZ_SEEDS")) : 150;
    for (int seed = 1; seed <= seeds; seed++) {
        g_model_t m;
        g_init(&m, 1000 + (uint64_t)seed);
        f_val_t vals[12];
        int nv = 0;
        vals[nv++] = (f_val_t){g_param(&m, "p", 2, k_fdims[F_A]), F_A};
        vals[nv++] = (f_val_t){g_param(&m, "q", 1, k_fdims[F_C]), F_C};
        int nst = 2 + (int)f_pick(&m, 5);
        for (int s = 0; s < nst && m.n < G_MAX_NODES - 2; s++) {
            f_val_t v = f_statement(&m, vals, nv);
            vals[nv++] = v;
        }
        g_loss_of(&m, vals[nv - 1].tn);
        cr_log_info("seed %d: %d statements", seed, nst);
        g_check(&m, 1e-6);
    }
}
