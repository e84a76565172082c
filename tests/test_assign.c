/* Tests for ir/assign: the projection notation (every form, every error with its message),
 * the builders, and the lowering to the low-level IR (loop nests, neutral-element fills,
 * plain sets for injective projections, fetch forms, slices, vector ops), each lowered
 * procedure checked with troupe_ll_proc_validate, and numeric results of lowered matmul,
 * max-reduction, slice and offsets through the reference interpreter (compiler/interp.h). */
#include "compiler/interp.h"
#include "compiler/lower.h"
#include "ir/assign.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- fixture ------------------------------------------------------------------------------ */

static troupe_asgn_comp_t *s_comp;
static troupe_tnode_t *s_nodes[64];
static int s_nnodes;

static void s_setup(void)
{
    s_nnodes = 0;
    cr_assert_eq(troupe_asgn_comp_new(&s_comp), TROUPE_OK);
}

static void s_teardown(void)
{
    troupe_asgn_comp_destroy(&s_comp);
    for (int i = 0; i < s_nnodes; i++)
        troupe_tnode_release(&s_nodes[i]);
}

TestSuite(assign, .init = s_setup, .fini = s_teardown);

static troupe_tnode_t *s_mk(const char *label, troupe_prec_t prec, int ndims, const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    const char *labels[1] = {label};
    cr_assert_eq(troupe_tnode_new(labels, 1, prec, ndims, dims, NULL, 0.0, &tn), TROUPE_OK, "%s",
                 troupe_last_error());
    s_nodes[s_nnodes++] = tn;
    return tn;
}

#define MK(label, ...)                                                                             \
    s_mk(label, TROUPE_PREC_SINGLE, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),     \
         (int64_t[]){__VA_ARGS__})
#define MK0(label) s_mk(label, TROUPE_PREC_SINGLE, 0, NULL)

/* Parses spec against lhs and rhs nodes. */
static troupe_status_t s_parse(const char *spec, troupe_tnode_t *lhs, int nrhs, troupe_tnode_t *r1,
                               troupe_tnode_t *r2, troupe_tnode_t *r3, troupe_projections_t *out)
{
    troupe_tnode_t *rhs[3] = {r1, r2, r3};
    return troupe_projections_parse(s_comp, spec, lhs, nrhs, rhs, 0, out);
}

static void s_expect_error(troupe_status_t st, troupe_status_t code, const char *needle)
{
    cr_assert_eq(st, code, "status %s, expected %s (%s)", troupe_status_str(st),
                 troupe_status_str(code), troupe_last_error());
    cr_assert(strstr(troupe_last_error(), needle) != NULL, "message '%s' lacks '%s'",
              troupe_last_error(), needle);
}

static char s_expected[512];
#define EXPECTF(...) (snprintf(s_expected, sizeof s_expected, __VA_ARGS__), s_expected)

static bool s_is_iter(const troupe_proj_index_t *pi, const troupe_projections_t *pr, char letter)
{
    return !pi->is_affine && pi->nterms == 1 && pi->terms[0].coeff == 1 && pi->offset == 0 &&
           pi->static_sym < 0 && pr->iter_letter[pi->terms[0].iter] == letter;
}

static troupe_ll_proc_t *s_lower_root(troupe_asgn_t *root)
{
    troupe_asgn_comp_set_root(s_comp, root);
    troupe_ll_proc_t *proc = NULL;
    cr_assert_eq(troupe_asgn_lower(s_comp, "routine", &proc), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_ll_proc_validate(proc), TROUPE_OK, "validate: %s", troupe_last_error());
    return proc;
}

static bool s_idx_is_sym(const troupe_axis_index_t *x, int32_t sym)
{
    return x->nterms == 1 && x->terms[0].coeff == 1 && x->terms[0].sym == sym && x->offset == 0;
}

static bool s_idx_is_fixed(const troupe_axis_index_t *x, int64_t v)
{
    return x->nterms == 0 && x->offset == v;
}

/* ---- parsing: each notation form ---------------------------------------------------------- */

Test(assign, parse_matmul)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    troupe_projections_t pr;
    cr_assert_eq(s_parse("bi,ij=>bj", y, 2, x, w, NULL, &pr), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(pr.niters, 3);
    cr_assert_eq(memcmp(pr.iter_letter, "bij", 3), 0, "loop order b, i, j (j innermost)");
    cr_assert_eq(pr.iter_dim[0], 2);
    cr_assert_eq(pr.iter_dim[1], 3);
    cr_assert_eq(pr.iter_dim[2], 4);
    cr_assert(!pr.iter_reduced[0] && pr.iter_reduced[1] && !pr.iter_reduced[2]);
    cr_assert_eq(pr.nrhs, 2);
    cr_assert_eq(pr.lhs_ndims, 2);
    cr_assert(s_is_iter(&pr.lhs[0], &pr, 'b') && s_is_iter(&pr.lhs[1], &pr, 'j'));
    cr_assert(s_is_iter(&pr.rhs[0][0], &pr, 'b') && s_is_iter(&pr.rhs[0][1], &pr, 'i'));
    cr_assert(s_is_iter(&pr.rhs[1][0], &pr, 'i') && s_is_iter(&pr.rhs[1][1], &pr, 'j'));
    cr_assert(!pr.injective, "i is reduced");
    cr_assert(pr.surjective);
}

Test(assign, parse_row_sum)
{
    troupe_tnode_t *x = MK("x", 5, 7), *y = MK("y", 5);
    troupe_projections_t pr;
    cr_assert_eq(s_parse("bi=>b", y, 1, x, NULL, NULL, &pr), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(pr.niters, 2);
    /* a row reduction: the reduced i, x's contiguous axis, innermost (b fixes each cell) */
    cr_assert_eq(memcmp(pr.iter_letter, "bi", 2), 0, "the reduced row iterator innermost");
    cr_assert(!pr.iter_reduced[0] && pr.iter_reduced[1]);
    cr_assert(!pr.injective && pr.surjective);
}

Test(assign, parse_scalar_operand_zero_dims_and_all_ones)
{
    troupe_tnode_t *v = MK("v", 6), *s0 = MK0("s"), *s1 = MK("s1", 1, 1), *y = MK("y", 6);
    troupe_projections_t pr;
    cr_assert_eq(s_parse("b,=>b", y, 2, v, s0, NULL, &pr), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(pr.niters, 1);
    cr_assert_eq(pr.rhs_ndims[1], 0);
    cr_assert(pr.injective && pr.surjective);
    cr_assert_eq(s_parse("b,=>b", y, 2, v, s1, NULL, &pr), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(pr.rhs_ndims[1], 2, "an all-ones node keeps its axes");
    for (int a = 0; a < 2; a++)
        cr_assert(pr.rhs[1][a].nterms == 0 && pr.rhs[1][a].offset == 0 &&
                      pr.rhs[1][a].static_sym < 0,
                  "fixed 0 on every axis of the all-ones scalar");
}

Test(assign, parse_transpose_unary)
{
    troupe_tnode_t *x = MK("x", 3, 4), *y = MK("y", 4, 3);
    troupe_projections_t pr;
    cr_assert_eq(s_parse("ij=>ji", y, 1, x, NULL, NULL, &pr), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(memcmp(pr.iter_letter, "ji", 2), 0);
    cr_assert(s_is_iter(&pr.lhs[0], &pr, 'j') && s_is_iter(&pr.lhs[1], &pr, 'i'));
    cr_assert(s_is_iter(&pr.rhs[0][0], &pr, 'i') && s_is_iter(&pr.rhs[0][1], &pr, 'j'));
    cr_assert(pr.injective && pr.surjective);
}

Test(assign, parse_ternary_pointwise)
{
    troupe_tnode_t *a = MK("a", 9), *b = MK("b", 9), *c = MK("c", 9), *y = MK("y", 9);
    troupe_projections_t pr;
    cr_assert_eq(s_parse("a,a,a=>a", y, 3, a, b, c, &pr), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(pr.niters, 1);
    cr_assert_eq(pr.nrhs, 3);
    cr_assert(pr.injective && pr.surjective);
}

Test(assign, parse_fixed_index)
{
    troupe_tnode_t *x = MK("x", 4, 3), *y = MK("y", 4), *z = MK("z", 4, 2);
    troupe_projections_t pr;
    cr_assert_eq(s_parse("b[2]=>b", y, 1, x, NULL, NULL, &pr), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(pr.rhs[0][1].nterms, 0);
    cr_assert_eq(pr.rhs[0][1].offset, 2);
    cr_assert(pr.injective && pr.surjective);
    /* A fixed index on a lhs axis of dim > 1 leaves cells unwritten. */
    cr_assert_eq(s_parse("b=>b[1]", z, 1, y, NULL, NULL, &pr), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert(pr.injective && !pr.surjective);
}

Test(assign, parse_static_symbol)
{
    int32_t id;
    cr_assert_eq(troupe_asgn_comp_add_static_symbol(s_comp, "batch_n", 10, &id), TROUPE_OK);
    troupe_tnode_t *data = MK("data", 10, 5), *y = MK("y", 5);
    troupe_projections_t pr;
    cr_assert_eq(s_parse("{batch_n}i=>i", y, 1, data, NULL, NULL, &pr), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(pr.rhs[0][0].static_sym, id);
    cr_assert_eq(pr.rhs[0][0].nterms, 0);
    cr_assert(s_is_iter(&pr.rhs[0][1], &pr, 'i'));
    cr_assert_eq(pr.niters, 1);
}

Test(assign, parse_affine_convolution)
{
    troupe_tnode_t *x = MK("x", 3, 9), *k = MK("k", 3), *y = MK("y", 3, 4);
    troupe_projections_t pr;
    cr_assert_eq(s_parse("o(2i+k),k=>oi", y, 2, x, k, NULL, &pr), TROUPE_OK, "%s",
                 troupe_last_error());
    /* k is the kernel's contiguous axis and i is no operand's last: k innermost */
    cr_assert_eq(memcmp(pr.iter_letter, "oik", 3), 0);
    const troupe_proj_index_t *a = &pr.rhs[0][1];
    cr_assert(a->is_affine);
    cr_assert_eq(a->nterms, 2);
    cr_assert_eq(a->terms[0].coeff, 2);
    cr_assert_eq(pr.iter_letter[a->terms[0].iter], 'i');
    cr_assert_eq(a->terms[1].coeff, 1);
    cr_assert_eq(pr.iter_letter[a->terms[1].iter], 'k');
    cr_assert_eq(a->offset, 0);
    cr_assert(!pr.injective, "k is reduced");
    /* Offsets and subtraction. */
    troupe_tnode_t *x2 = MK("x2", 6), *y2 = MK("y2", 5);
    cr_assert_eq(s_parse("(i+1)=>i", y2, 1, x2, NULL, NULL, &pr), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(pr.rhs[0][0].offset, 1);
    cr_assert_eq(s_parse("( 5 - i )=>i", y2, 1, x2, NULL, NULL, &pr), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(pr.rhs[0][0].offset, 5);
    cr_assert_eq(pr.rhs[0][0].terms[0].coeff, -1);
}

Test(assign, parse_blanks_ignored)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    troupe_projections_t pr;
    cr_assert_eq(s_parse(" b i , i j => b j ", y, 2, x, w, NULL, &pr), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(memcmp(pr.iter_letter, "bij", 3), 0);
}

Test(assign, parse_broadcast_lhs_only_iterator)
{
    troupe_tnode_t *x = MK("x", 4), *y = MK("y", 4, 3);
    troupe_projections_t pr;
    cr_assert_eq(s_parse("b=>b^j", y, 1, x, NULL, NULL, &pr), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(pr.iter_dim[1], 3, "j's size comes from the lhs");
    cr_assert(!pr.iter_reduced[1], "a marked broadcast is not a reduction");
    cr_assert(pr.injective && pr.surjective);
}

/* An lhs index that no operand has ("ik,kj=>iq", a typo for "ik,kj=>ij") would broadcast
 * along q and sum j away: refused naming q, unless the broadcast is marked "^q". */
Test(assign, error_unmarked_broadcast_names_the_index)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    troupe_tnode_t *v = MK("v", 4);
    troupe_projections_t pr;
    s_expect_error(s_parse("ik,kj=>iq", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "projection 'ik,kj=>iq' col 9: lhs index 'q' appears in no operand term, so "
                   "the result would be broadcast along it (and summed over 'jk'); if that is "
                   "meant, write '^q'");
    s_expect_error(s_parse("j=>bj", y, 1, v, NULL, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "lhs index 'b' appears in no operand term, so the result would be broadcast "
                   "along it; if that is meant, write '^b'");
    /* OCANNL's meaning, asked for */
    cr_assert_eq(s_parse("ik,kj=>i^q", y, 2, x, w, NULL, &pr), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(pr.niters, 4);
    cr_assert_eq(s_parse("j=>^bj", y, 1, v, NULL, NULL, &pr), TROUPE_OK, "%s", troupe_last_error());
    cr_assert(pr.surjective);
}

Test(assign, error_broadcast_mark_misplaced)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    troupe_projections_t pr;
    s_expect_error(s_parse("^bi,ij=>bj", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "projection '^bi,ij=>bj' col 1: a broadcast mark '^' belongs in the lhs term");
    s_expect_error(s_parse("bi,ij=>b^j", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 9: '^j' marks a broadcast but 'j' indexes an operand; drop the '^'");
    s_expect_error(s_parse("bi,ij=>b^[0]", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 10: unexpected '['");
}

/* ---- parsing: errors ---------------------------------------------------------------------- */

Test(assign, error_bad_token_with_column)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    troupe_projections_t pr;
    s_expect_error(s_parse("b?,ij=>bj", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "projection 'b?,ij=>bj' col 2: unexpected '?'");
    s_expect_error(s_parse("bi,ij=>bj!", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 10: unexpected '!'");
    s_expect_error(s_parse("bi,ij", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 6: expected '=>' before the end");
    s_expect_error(s_parse("bi,ij=bj", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 6: unexpected '='");
    s_expect_error(s_parse("b[1,ij=>bj", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 4: unexpected ','");
    s_expect_error(s_parse("b[],ij=>bj", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 3: unexpected ']'");
    s_expect_error(s_parse("b(2i+),ij=>bj", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 6: unexpected ')'");
    s_expect_error(s_parse("b(2i*k),ij=>bj", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 5: unexpected '*'");
}

Test(assign, error_term_count)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    troupe_projections_t pr;
    s_expect_error(s_parse("bi=>b", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "projection 'bi=>b': 1 operand term but the operation takes 2");
    s_expect_error(s_parse("a,a,a,a=>a", y, 3, x, w, x, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 6: more than 3 operand terms");
}

Test(assign, error_arity_names_operand_and_term)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    troupe_projections_t pr;
    s_expect_error(s_parse("bij,ij=>bj", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   EXPECTF("projection 'bij,ij=>bj': operand 1 (node #%d x) has 2 axes but its "
                           "term 'bij' has 3",
                           x->id));
    s_expect_error(s_parse("bi,ij=>b", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   EXPECTF("the lhs (node #%d y) has 2 axes but its term 'b' has 1", y->id));
    s_expect_error(s_parse("bi,=>bj", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   EXPECTF("operand 2 (node #%d w) has 2 axes but its term '' has 0", w->id));
}

Test(assign, error_dim_mismatch_names_both)
{
    troupe_tnode_t *x = MK("x", 8, 784), *w = MK("w", 512, 10), *y = MK("y", 8, 10);
    troupe_projections_t pr;
    s_expect_error(s_parse("bi,ij=>bj", y, 2, x, w, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   EXPECTF("projection 'bi,ij=>bj': axis 'i' is 784 in operand 1 (node #%d x, "
                           "axis 1) but 512 in operand 2 (node #%d w, axis 0)",
                           x->id, w->id));
    troupe_tnode_t *y2 = MK("y2", 9, 10), *w2 = MK("w2", 784, 10);
    s_expect_error(s_parse("bi,ij=>bj", y2, 2, x, w2, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   EXPECTF("axis 'b' is 8 in operand 1 (node #%d x, axis 0) but 9 in the lhs "
                           "(node #%d y2, axis 0)",
                           x->id, y2->id));
}

Test(assign, error_bad_static_symbol)
{
    troupe_tnode_t *data = MK("data", 10, 5), *y = MK("y", 5);
    troupe_projections_t pr;
    s_expect_error(s_parse("{batch}i=>i", y, 1, data, NULL, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "projection '{batch}i=>i' col 1: unknown static symbol 'batch'");
    cr_assert_eq(troupe_asgn_comp_add_static_symbol(s_comp, "big", 20, NULL), TROUPE_OK);
    s_expect_error(s_parse("{big}i=>i", y, 1, data, NULL, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   EXPECTF("col 1: static symbol 'big' ranges over 20 values but operand 1 "
                           "(node #%d data, axis 0) has dim 10",
                           data->id));
    s_expect_error(s_parse("{}i=>i", y, 1, data, NULL, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 2: unexpected '}'");
    s_expect_error(s_parse("{b-g}i=>i", y, 1, data, NULL, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "col 3: unexpected '-'");
    /* Declaring symbols: bad name, duplicate, negative range. */
    s_expect_error(troupe_asgn_comp_add_static_symbol(s_comp, "9x", 3, NULL),
                   TROUPE_INVALID_ARGUMENT, "static symbol '9x'");
    s_expect_error(troupe_asgn_comp_add_static_symbol(s_comp, "big", 3, NULL),
                   TROUPE_ALREADY_EXISTS, "'big' already declared");
    s_expect_error(troupe_asgn_comp_add_static_symbol(s_comp, "neg", -1, NULL),
                   TROUPE_INVALID_ARGUMENT, "range -1");
}

Test(assign, error_index_bounds)
{
    troupe_tnode_t *x = MK("x", 4, 3), *y = MK("y", 4), *x2 = MK("x2", 3, 8), *k = MK("k", 3),
                   *y2 = MK("y2", 3, 4);
    troupe_projections_t pr;
    s_expect_error(s_parse("b[3]=>b", y, 1, x, NULL, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   EXPECTF("col 2: fixed index 3 is outside operand 1 (node #%d x, axis 1) of "
                           "dim 3",
                           x->id));
    s_expect_error(s_parse("o(2i+k),k=>oi", y2, 2, x2, k, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   EXPECTF("col 2: index '(2i+k)' of operand 1 (node #%d x2, axis 1) ranges over "
                           "[0, 8] outside dim 8",
                           x2->id));
    s_expect_error(s_parse("(i-1)=>i", y, 1, y, NULL, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "ranges over [-1, 2] outside dim 4");
    s_expect_error(s_parse("(i+k)=>i", y, 1, y, NULL, NULL, &pr), TROUPE_INVALID_ARGUMENT,
                   "iterator 'k' appears only inside affine indices, so its size is unknown");
}

Test(assign, error_builder_checks)
{
    troupe_tnode_t *x = MK("x", 4), *y = MK("y", 4);
    troupe_asgn_t *t = (troupe_asgn_t *)1;
    s_expect_error(troupe_asgn_accum_unop(s_comp, true, TROUPE_BINOP_CMPLT, y, TROUPE_UNOP_IDENTITY,
                                          troupe_asgn_node(x), "i=>i", &t),
                   TROUPE_FAILED_PRECONDITION, "has no neutral element");
    cr_assert_null(t);
    s_expect_error(troupe_asgn_accum_unop(s_comp, false, TROUPE_BINOP_ADD, y, (troupe_unop_t)99,
                                          troupe_asgn_node(x), "i=>i", &t),
                   TROUPE_INVALID_ARGUMENT, "bad op 99");
    s_expect_error(troupe_asgn_accum_unop(s_comp, false, TROUPE_BINOP_ADD, y, TROUPE_UNOP_IDENTITY,
                                          troupe_asgn_node(x), "i?=>i", &t),
                   TROUPE_INVALID_ARGUMENT, "col 2: unexpected '?'");
    double v[3] = {1, 2, 3};
    s_expect_error(troupe_asgn_fetch_constant_fill(s_comp, x, v, 3, &t), TROUPE_INVALID_ARGUMENT,
                   "3 values given but the node has 4 elements");
    s_expect_error(troupe_asgn_fetch_embed_symbol(s_comp, x, 0, &t), TROUPE_NOT_FOUND,
                   "no static symbol with id 0");
    int32_t sym;
    cr_assert_eq(troupe_asgn_comp_add_static_symbol(s_comp, "n", 5, &sym), TROUPE_OK);
    troupe_tnode_t *data = MK("data", 5, 3), *data4 = MK("data4", 4, 4);
    s_expect_error(troupe_asgn_fetch_slice(s_comp, x, sym, data, &t), TROUPE_INVALID_ARGUMENT,
                   "axis 1 of the sliced node is 3 but axis 0 of the result is 4");
    s_expect_error(troupe_asgn_fetch_slice(s_comp, x, sym, data4, &t), TROUPE_INVALID_ARGUMENT,
                   "static symbol 'n' ranges over 5 values but axis 0 has dim 4");
    s_expect_error(troupe_asgn_fetch_slice(s_comp, x, sym, x, &t), TROUPE_INVALID_ARGUMENT,
                   "needs 2 axes, it has 1");
}

/* ---- lowering ----------------------------------------------------------------------------- */

Test(assign, lower_matmul_loop_nest)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_accum_binop(s_comp, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                         troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &t),
                 TROUPE_OK, "%s", troupe_last_error());
    troupe_ll_proc_t *proc = s_lower_root(t);
    const troupe_ll_t *b = proc->body;
    cr_assert_eq(b->kind, TROUPE_LL_SEQ);
    cr_assert_eq(b->u.seq.count, 2);
    cr_assert_eq(b->u.seq.items[0]->kind, TROUPE_LL_ZERO_OUT, "i is reduced: zero y first");
    cr_assert_eq(b->u.seq.items[0]->u.zero_out, y);
    const troupe_ll_t *lb = b->u.seq.items[1], *li = lb->u.for_loop.body, *lj = li->u.for_loop.body;
    cr_assert_eq(lb->kind, TROUPE_LL_FOR);
    cr_assert_eq(li->kind, TROUPE_LL_FOR);
    cr_assert_eq(lj->kind, TROUPE_LL_FOR);
    cr_assert_eq(lb->u.for_loop.to, 1);
    cr_assert_eq(li->u.for_loop.to, 2);
    cr_assert_eq(lj->u.for_loop.to, 3, "innermost loop over j (dim 4)");
    int32_t sb = lb->u.for_loop.sym, si = li->u.for_loop.sym, sj = lj->u.for_loop.sym;
    const troupe_ll_t *set = lj->u.for_loop.body;
    cr_assert_eq(set->kind, TROUPE_LL_SET);
    cr_assert_eq(set->u.set.tn, y);
    cr_assert(s_idx_is_sym(&set->u.set.idcs[0], sb) && s_idx_is_sym(&set->u.set.idcs[1], sj));
    const troupe_sc_t *v = set->u.set.value;
    cr_assert_eq(v->kind, TROUPE_SC_BINOP);
    cr_assert_eq(v->u.op.op, TROUPE_BINOP_ADD, "accumulates with add");
    cr_assert_eq(v->u.op.args[0]->kind, TROUPE_SC_GET);
    cr_assert_eq(v->u.op.args[0]->u.get.tn, y);
    const troupe_sc_t *m = v->u.op.args[1];
    cr_assert_eq(m->kind, TROUPE_SC_BINOP);
    cr_assert_eq(m->u.op.op, TROUPE_BINOP_MUL);
    cr_assert_eq(m->u.op.args[0]->u.get.tn, x);
    cr_assert(s_idx_is_sym(&m->u.op.args[0]->u.get.idcs[0], sb) &&
              s_idx_is_sym(&m->u.op.args[0]->u.get.idcs[1], si));
    cr_assert_eq(m->u.op.args[1]->u.get.tn, w);
    cr_assert(s_idx_is_sym(&m->u.op.args[1]->u.get.idcs[0], si) &&
              s_idx_is_sym(&m->u.op.args[1]->u.get.idcs[1], sj));
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_matmul_without_initialize_neutral_has_no_zero_out)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_accum_binop(s_comp, false, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                         troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &t),
                 TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(t);
    cr_assert_eq(proc->body->kind, TROUPE_LL_FOR, "accumulates into existing y");
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_row_sum)
{
    troupe_tnode_t *x = MK("x", 5, 7), *y = MK("y", 5);
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_accum_unop(s_comp, true, TROUPE_BINOP_ADD, y, TROUPE_UNOP_IDENTITY,
                                        troupe_asgn_node(x), "bi=>b", &t),
                 TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(t);
    const troupe_ll_t *b = proc->body;
    cr_assert_eq(b->kind, TROUPE_LL_SEQ);
    cr_assert_eq(b->u.seq.items[0]->kind, TROUPE_LL_ZERO_OUT);
    const troupe_ll_t *li = b->u.seq.items[1], *lb = li->u.for_loop.body;
    cr_assert_eq(li->u.for_loop.to, 4, "outer loop over b, the lhs's axis");
    cr_assert_eq(lb->u.for_loop.to, 6, "inner loop over the reduced i, x's contiguous axis");
    const troupe_ll_t *set = lb->u.for_loop.body;
    cr_assert_eq(set->kind, TROUPE_LL_SET);
    cr_assert(s_idx_is_sym(&set->u.set.idcs[0], li->u.for_loop.sym));
    cr_assert_eq(set->u.set.value->u.op.op, TROUPE_BINOP_ADD);
    cr_assert_eq(set->u.set.value->u.op.args[1]->kind, TROUPE_SC_UNOP);
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_injective_map_is_plain_set)
{
    troupe_tnode_t *x = MK("x", 3, 4), *z = MK("z", 3, 4), *y = MK("y", 3, 4);
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_pointwise_binop(s_comp, y, TROUPE_BINOP_SUB, troupe_asgn_node(x),
                                             troupe_asgn_node(z), &t),
                 TROUPE_OK, "%s", troupe_last_error());
    troupe_ll_proc_t *proc = s_lower_root(t);
    const troupe_ll_t *l0 = proc->body;
    cr_assert_eq(l0->kind, TROUPE_LL_FOR, "no ZERO_OUT before the loops");
    const troupe_ll_t *set = l0->u.for_loop.body->u.for_loop.body;
    cr_assert_eq(set->kind, TROUPE_LL_SET);
    cr_assert_eq(set->u.set.value->kind, TROUPE_SC_BINOP);
    cr_assert_eq(set->u.set.value->u.op.op, TROUPE_BINOP_SUB, "plain Set of the op, no accum");
    cr_assert_eq(set->u.set.value->u.op.args[0]->u.get.tn, x);
    troupe_ll_proc_destroy(&proc);

    /* Transpose copy with accum add and initialize_neutral: also plain. */
    troupe_tnode_t *tt = MK("tt", 4, 3);
    cr_assert_eq(troupe_asgn_accum_unop(s_comp, true, TROUPE_BINOP_ADD, tt, TROUPE_UNOP_NEG,
                                        troupe_asgn_node(x), "ij=>ji", &t),
                 TROUPE_OK);
    proc = s_lower_root(t);
    cr_assert_eq(proc->body->kind, TROUPE_LL_FOR);
    set = proc->body->u.for_loop.body->u.for_loop.body;
    cr_assert_eq(set->u.set.value->kind, TROUPE_SC_UNOP);
    cr_assert_eq(set->u.set.value->u.op.op, TROUPE_UNOP_NEG);
    troupe_ll_proc_destroy(&proc);
}

/* An initialising subtraction over an injective map writes each cell once over its neutral:
 * 0 - v, not v (nn/grad.h's first contributions that subtract rely on it); a division 1 / v. */
Test(assign, lower_injective_initialising_sub_and_div_apply_the_neutral)
{
    troupe_tnode_t *x = MK("x", 3, 4), *y = MK("y", 4, 3);
    const troupe_binop_t ops[2] = {TROUPE_BINOP_SUB, TROUPE_BINOP_DIV};
    const double neutral[2] = {0.0, 1.0};
    for (int k = 0; k < 2; k++) {
        troupe_asgn_t *t;
        cr_assert_eq(troupe_asgn_accum_unop(s_comp, true, ops[k], y, TROUPE_UNOP_IDENTITY,
                                            troupe_asgn_node(x), "ij=>ji", &t),
                     TROUPE_OK, "%s", troupe_last_error());
        troupe_ll_proc_t *proc = s_lower_root(t);
        cr_assert_eq(proc->body->kind, TROUPE_LL_FOR, "no fill before the loops");
        const troupe_ll_t *set = proc->body->u.for_loop.body->u.for_loop.body;
        cr_assert_eq(set->kind, TROUPE_LL_SET);
        const troupe_sc_t *v = set->u.set.value;
        cr_assert_eq(v->kind, TROUPE_SC_BINOP);
        cr_assert_eq(v->u.op.op, ops[k]);
        cr_assert_eq(v->u.op.args[0]->kind, TROUPE_SC_CONSTANT, "op %d: not over the neutral",
                     (int)ops[k]);
        cr_assert_eq(v->u.op.args[0]->u.constant, neutral[k]);
        troupe_ll_proc_destroy(&proc);
    }
}

Test(assign, lower_injective_not_surjective_fills_then_sets)
{
    troupe_tnode_t *x = MK("x", 4), *y = MK("y", 4, 2);
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_accum_unop(s_comp, true, TROUPE_BINOP_ADD, y, TROUPE_UNOP_IDENTITY,
                                        troupe_asgn_node(x), "b=>b[1]", &t),
                 TROUPE_OK, "%s", troupe_last_error());
    troupe_ll_proc_t *proc = s_lower_root(t);
    cr_assert_eq(proc->body->kind, TROUPE_LL_SEQ);
    cr_assert_eq(proc->body->u.seq.items[0]->kind, TROUPE_LL_ZERO_OUT);
    const troupe_ll_t *set = proc->body->u.seq.items[1]->u.for_loop.body;
    cr_assert_eq(set->kind, TROUPE_LL_SET);
    cr_assert(s_idx_is_fixed(&set->u.set.idcs[1], 1));
    cr_assert_eq(set->u.set.value->kind, TROUPE_SC_UNOP, "injective: no accumulation");
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_max_reduction_fills_minus_infinity)
{
    troupe_tnode_t *x = MK("x", 3, 5), *y = MK("y", 3);
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_accum_unop(s_comp, true, TROUPE_BINOP_MAX, y, TROUPE_UNOP_IDENTITY,
                                        troupe_asgn_node(x), "bi=>b", &t),
                 TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(t);
    const troupe_ll_t *b = proc->body;
    cr_assert_eq(b->kind, TROUPE_LL_SEQ);
    const troupe_ll_t *fill = b->u.seq.items[0];
    cr_assert_eq(fill->kind, TROUPE_LL_FOR, "not ZERO_OUT: the neutral of max is -inf");
    cr_assert_eq(fill->u.for_loop.to, 2);
    const troupe_ll_t *fs = fill->u.for_loop.body;
    cr_assert_eq(fs->kind, TROUPE_LL_SET);
    cr_assert_eq(fs->u.set.tn, y);
    cr_assert_eq(fs->u.set.value->kind, TROUPE_SC_CONSTANT);
    cr_assert(isinf(fs->u.set.value->u.constant) && fs->u.set.value->u.constant < 0);
    const troupe_ll_t *set = b->u.seq.items[1]->u.for_loop.body->u.for_loop.body;
    cr_assert_eq(set->u.set.value->u.op.op, TROUPE_BINOP_MAX);
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_merge_buffer_operand)
{
    troupe_tnode_t *g = MK("g", 6);
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_accum_binop(s_comp, false, TROUPE_BINOP_ADD, g, TROUPE_BINOP_ARG2,
                                         troupe_asgn_node(g), troupe_asgn_merge(g), "i,i=>i", &t),
                 TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(t);
    const troupe_sc_t *v = proc->body->u.for_loop.body->u.set.value->u.op.args[1];
    cr_assert_eq(v->u.op.args[0]->kind, TROUPE_SC_GET);
    cr_assert_eq(v->u.op.args[1]->kind, TROUPE_SC_GET_MERGE_BUFFER);
    cr_assert_eq(v->u.op.args[1]->u.get.tn, g);
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_ternary_and_scalar_operand)
{
    troupe_tnode_t *a = MK("a", 4), *b = MK("b", 4), *c = MK("c", 4), *s = MK("s", 1),
                   *y = MK("y", 4), *z = MK("z", 4);
    troupe_asgn_t *t1, *t2, *seq;
    cr_assert_eq(troupe_asgn_accum_ternop(s_comp, true, TROUPE_BINOP_ADD, y, TROUPE_TERNOP_FMA,
                                          troupe_asgn_node(a), troupe_asgn_node(b),
                                          troupe_asgn_node(c), "a,a,a=>a", &t1),
                 TROUPE_OK);
    cr_assert_eq(troupe_asgn_accum_binop(s_comp, true, TROUPE_BINOP_ADD, z, TROUPE_BINOP_MUL,
                                         troupe_asgn_node(y), troupe_asgn_node(s), "b,=>b", &t2),
                 TROUPE_OK);
    cr_assert_eq(troupe_asgn_seq2(s_comp, t1, t2, &seq), TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(seq);
    cr_assert_eq(proc->body->kind, TROUPE_LL_SEQ);
    const troupe_ll_t *s1 = proc->body->u.seq.items[0]->u.for_loop.body;
    cr_assert_eq(s1->u.set.value->kind, TROUPE_SC_TERNOP);
    const troupe_ll_t *s2 = proc->body->u.seq.items[1]->u.for_loop.body;
    const troupe_sc_t *gs = s2->u.set.value->u.op.args[1];
    cr_assert_eq(gs->u.get.tn, s);
    cr_assert(s_idx_is_fixed(&gs->u.get.idcs[0], 0), "scalar with dims [1] read at [0]");
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_fetch_constants)
{
    troupe_tnode_t *a = MK("a", 2, 3), *b = MK("b", 1, 3), *c = MK("c", 2);
    troupe_asgn_t *t0, *t1, *t2, *t3;
    cr_assert_eq(troupe_asgn_fetch_constant(s_comp, a, 0.0, &t0), TROUPE_OK);
    cr_assert_eq(troupe_asgn_fetch_constant(s_comp, b, 2.5, &t1), TROUPE_OK);
    cr_assert_eq(troupe_asgn_fetch_constant_bits(s_comp, c, 0x1234, &t2), TROUPE_OK);
    cr_assert_eq(troupe_asgn_fetch_embed_self_id(s_comp, c, &t3), TROUPE_OK);
    troupe_asgn_t *items[4] = {t0, t1, t2, t3}, *seq;
    cr_assert_eq(troupe_asgn_seq(s_comp, 4, items, &seq), TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(seq);
    const troupe_ll_t *body = proc->body;
    cr_assert_eq(body->u.seq.count, 4);
    cr_assert_eq(body->u.seq.items[0]->kind, TROUPE_LL_ZERO_OUT, "constant 0.0 -> ZERO_OUT");
    const troupe_ll_t *l1 = body->u.seq.items[1];
    cr_assert_eq(l1->kind, TROUPE_LL_FOR, "a single loop: the dim-1 axis gets no loop");
    cr_assert_eq(l1->u.for_loop.to, 2);
    const troupe_ll_t *s1 = l1->u.for_loop.body;
    cr_assert_eq(s1->kind, TROUPE_LL_SET);
    cr_assert(s_idx_is_fixed(&s1->u.set.idcs[0], 0));
    cr_assert(s_idx_is_sym(&s1->u.set.idcs[1], l1->u.for_loop.sym));
    cr_assert_eq(s1->u.set.value->kind, TROUPE_SC_CONSTANT);
    cr_assert_eq(s1->u.set.value->u.constant, 2.5);
    const troupe_ll_t *s2 = body->u.seq.items[2]->u.for_loop.body;
    cr_assert_eq(s2->u.set.value->kind, TROUPE_SC_CONSTANT_BITS);
    cr_assert_eq(s2->u.set.value->u.constant_bits, 0x1234);
    const troupe_ll_t *s3 = body->u.seq.items[3]->u.for_loop.body;
    cr_assert_eq(s3->u.set.value->kind, TROUPE_SC_CONSTANT_BITS);
    cr_assert_eq(s3->u.set.value->u.constant_bits, c->id, "embed_self_id embeds the node's id");
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_fetch_constant_fill)
{
    troupe_tnode_t *a = MK("a", 2, 2);
    double v[4] = {1, 2, 3, 4};
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_fetch_constant_fill(s_comp, a, v, 4, &t), TROUPE_OK);
    v[0] = 99; /* copied at construction */
    troupe_ll_proc_t *proc = s_lower_root(t);
    const troupe_ll_t *b = proc->body;
    cr_assert_eq(b->kind, TROUPE_LL_SEQ);
    cr_assert_eq(b->u.seq.count, 4);
    for (int k = 0; k < 4; k++) {
        const troupe_ll_t *s = b->u.seq.items[k];
        cr_assert_eq(s->kind, TROUPE_LL_SET);
        cr_assert(s_idx_is_fixed(&s->u.set.idcs[0], k / 2) &&
                  s_idx_is_fixed(&s->u.set.idcs[1], k % 2));
        cr_assert_eq(s->u.set.value->u.constant, (double)(k + 1), "row-major order");
    }
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_fetch_range_over_offsets)
{
    troupe_tnode_t *a = MK("a", 2, 3);
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_fetch_range_over_offsets(s_comp, a, &t), TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(t);
    const troupe_ll_t *l0 = proc->body, *l1 = l0->u.for_loop.body, *s = l1->u.for_loop.body;
    const troupe_sc_t *e = s->u.set.value;
    cr_assert_eq(e->kind, TROUPE_SC_EMBED_INDEX);
    const troupe_axis_index_t *x = &e->u.embed_index;
    cr_assert_eq(x->nterms, 2);
    cr_assert_eq(x->offset, 0);
    /* offset = 3*i0 + i1, terms listed innermost first */
    cr_assert_eq(x->terms[0].coeff, 1);
    cr_assert_eq(x->terms[0].sym, l1->u.for_loop.sym);
    cr_assert_eq(x->terms[1].coeff, 3);
    cr_assert_eq(x->terms[1].sym, l0->u.for_loop.sym);
    troupe_ll_proc_destroy(&proc);

    /* More looped axes than one index holds: a sum of embedded indices. */
    troupe_tnode_t *big = MK("big", 2, 2, 2, 2, 2, 2);
    cr_assert_eq(troupe_asgn_fetch_range_over_offsets(s_comp, big, &t), TROUPE_OK);
    proc = s_lower_root(t);
    const troupe_ll_t *in = proc->body;
    for (int k = 0; k < 6; k++)
        in = in->u.for_loop.body;
    cr_assert_eq(in->u.set.value->kind, TROUPE_SC_BINOP);
    cr_assert_eq(in->u.set.value->u.op.op, TROUPE_BINOP_ADD);
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_slice_with_static_symbol)
{
    int32_t sym;
    cr_assert_eq(troupe_asgn_comp_add_static_symbol(s_comp, "batch_n", 10, &sym), TROUPE_OK);
    troupe_tnode_t *data = MK("data", 10, 4), *row = MK("row", 4);
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_fetch_slice(s_comp, row, sym, data, &t), TROUPE_OK, "%s",
                 troupe_last_error());
    troupe_ll_proc_t *proc = s_lower_root(t);
    cr_assert_eq(proc->nsyms, 2);
    cr_assert_str_eq(proc->syms[sym].name, "batch_n");
    cr_assert(proc->syms[sym].is_static);
    cr_assert_eq(proc->syms[sym].static_range, 10);
    const troupe_ll_t *l = proc->body, *s = l->u.for_loop.body;
    cr_assert_eq(s->kind, TROUPE_LL_SET);
    cr_assert_eq(s->u.set.tn, row);
    const troupe_sc_t *g = s->u.set.value;
    cr_assert_eq(g->kind, TROUPE_SC_GET);
    cr_assert_eq(g->u.get.tn, data);
    cr_assert(s_idx_is_sym(&g->u.get.idcs[0], sym), "batch index first");
    cr_assert(s_idx_is_sym(&g->u.get.idcs[1], l->u.for_loop.sym));
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_static_symbol_in_projection_and_embed_symbol)
{
    int32_t sym;
    cr_assert_eq(troupe_asgn_comp_add_static_symbol(s_comp, "step", 0, &sym), TROUPE_OK);
    cr_assert_eq(troupe_asgn_comp_add_static_symbol(s_comp, "batch_n", 8, &sym), TROUPE_OK);
    troupe_tnode_t *data = MK("data", 8, 3), *row = MK("row", 3), *k = MK("k", 1);
    troupe_asgn_t *t1, *t2, *seq;
    cr_assert_eq(troupe_asgn_accum_unop(s_comp, true, TROUPE_BINOP_ADD, row, TROUPE_UNOP_IDENTITY,
                                        troupe_asgn_node(data), "{batch_n}i=>i", &t1),
                 TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_asgn_fetch_embed_symbol(s_comp, k, 0, &t2), TROUPE_OK);
    cr_assert_eq(troupe_asgn_seq2(s_comp, t1, t2, &seq), TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(seq);
    cr_assert_eq(troupe_ll_proc_find_symbol(proc, "step"), 0, "static symbols keep comp ids");
    cr_assert_eq(troupe_ll_proc_find_symbol(proc, "batch_n"), 1);
    const troupe_ll_t *s = proc->body->u.seq.items[0]->u.for_loop.body;
    cr_assert(s_idx_is_sym(&s->u.set.value->u.op.args[0]->u.get.idcs[0], 1));
    const troupe_ll_t *e = proc->body->u.seq.items[1];
    cr_assert_eq(e->kind, TROUPE_LL_SET, "dims [1]: no loop");
    cr_assert_eq(e->u.set.value->kind, TROUPE_SC_EMBED_INDEX);
    cr_assert(s_idx_is_sym(&e->u.set.value->u.embed_index, 0));
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_set_vec_unop_length_per_precision)
{
    static const struct {
        troupe_prec_t prec;
        int length;
    } cases[] = {
        {TROUPE_PREC_BYTE, 16},  {TROUPE_PREC_FP8, 16},     {TROUPE_PREC_UINT16, 8},
        {TROUPE_PREC_HALF, 8},   {TROUPE_PREC_BFLOAT16, 8}, {TROUPE_PREC_INT32, 4},
        {TROUPE_PREC_UINT32, 4}, {TROUPE_PREC_SINGLE, 4},   {TROUPE_PREC_DOUBLE, 2},
        {TROUPE_PREC_INT64, 2},  {TROUPE_PREC_UINT64, 2},
    };
    troupe_tnode_t *bits = s_mk("bits", TROUPE_PREC_UINT4X32, 2, (int64_t[]){2, 3});
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        troupe_tnode_t *out = s_mk("u", cases[c].prec, 2, (int64_t[]){2, 3 * cases[c].length});
        troupe_asgn_t *t;
        cr_assert_eq(troupe_asgn_set_vec_unop(s_comp, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM, out,
                                              troupe_asgn_node(bits), "bi=>bi", &t),
                     TROUPE_OK, "%s: %s", troupe_prec_name(cases[c].prec), troupe_last_error());
        troupe_ll_proc_t *proc = s_lower_root(t);
        const troupe_ll_t *lb = proc->body, *li = lb->u.for_loop.body, *s = li->u.for_loop.body;
        cr_assert_eq(li->u.for_loop.to, 2, "loops over the rhs cells");
        cr_assert_eq(s->kind, TROUPE_LL_SET_FROM_VEC);
        cr_assert_eq(s->u.set_from_vec.length, cases[c].length, "%s",
                     troupe_prec_name(cases[c].prec));
        const troupe_axis_index_t *last = &s->u.set_from_vec.idcs[1];
        cr_assert_eq(last->nterms, 1);
        cr_assert_eq(last->terms[0].coeff, cases[c].length, "last axis index = length * i");
        cr_assert_eq(last->terms[0].sym, li->u.for_loop.sym);
        cr_assert(s_idx_is_sym(&s->u.set_from_vec.idcs[0], lb->u.for_loop.sym));
        cr_assert_eq(s->u.set_from_vec.arg->kind, TROUPE_SC_GET);
        cr_assert_eq(s->u.set_from_vec.arg->u.get.tn, bits);
        troupe_ll_proc_destroy(&proc);
    }
    troupe_tnode_t *bad = s_mk("bad", TROUPE_PREC_SINGLE, 2, (int64_t[]){2, 10});
    troupe_asgn_t *t;
    s_expect_error(troupe_asgn_set_vec_unop(s_comp, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM, bad,
                                            troupe_asgn_node(bits), "bi=>bi", &t),
                   TROUPE_INVALID_ARGUMENT,
                   EXPECTF("the lhs (node #%d bad, axis 1) has dim 10 but a vector operation of "
                           "length 4 over 'i' (size 3) writes 12",
                           bad->id));
    troupe_tnode_t *u4 = s_mk("u4", TROUPE_PREC_UINT4X32, 2, (int64_t[]){2, 3});
    s_expect_error(troupe_asgn_set_vec_unop(s_comp, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM, u4,
                                            troupe_asgn_node(bits), "bi=>bi", &t),
                   TROUPE_INVALID_ARGUMENT, "no vector form in precision uint4x32");
}

Test(assign, lower_block_comment_and_seq_flattening)
{
    troupe_tnode_t *a = MK("a", 3);
    troupe_asgn_t *f, *n, *inner, *outer, *blk;
    cr_assert_eq(troupe_asgn_fetch_constant(s_comp, a, 0.0, &f), TROUPE_OK);
    cr_assert_eq(troupe_asgn_noop(s_comp, &n), TROUPE_OK);
    cr_assert_eq(troupe_asgn_seq2(s_comp, f, n, &inner), TROUPE_OK);
    cr_assert_eq(inner, f, "a NOOP is dropped and one item remains");
    troupe_asgn_t *items[3] = {f, n, f}, *s2;
    cr_assert_eq(troupe_asgn_seq(s_comp, 3, items, &s2), TROUPE_OK);
    cr_assert_eq(s2->kind, TROUPE_ASGN_SEQ);
    cr_assert_eq(s2->u.seq.count, 2);
    cr_assert_eq(troupe_asgn_seq2(s_comp, s2, f, &outer), TROUPE_OK);
    cr_assert_eq(outer->u.seq.count, 3, "nested SEQs are flattened");
    cr_assert_eq(troupe_asgn_block_comment(s_comp, "init a", outer, &blk), TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(blk);
    const troupe_ll_t *b = proc->body;
    cr_assert_eq(b->kind, TROUPE_LL_SEQ);
    cr_assert_eq(b->u.seq.count, 5);
    cr_assert_eq(b->u.seq.items[0]->kind, TROUPE_LL_COMMENT);
    cr_assert_str_eq(b->u.seq.items[0]->u.comment, "init a");
    cr_assert_eq(b->u.seq.items[1]->kind, TROUPE_LL_ZERO_OUT);
    cr_assert_eq(b->u.seq.items[4]->kind, TROUPE_LL_COMMENT);
    cr_assert_str_eq(b->u.seq.items[4]->u.comment, "end");
    troupe_ll_proc_destroy(&proc);
}

Test(assign, lower_noop_root_and_bad_name)
{
    troupe_ll_proc_t *proc = NULL;
    cr_assert_eq(troupe_asgn_lower(s_comp, "empty", &proc), TROUPE_OK);
    cr_assert_eq(proc->body->kind, TROUPE_LL_NOOP);
    cr_assert_eq(troupe_ll_proc_validate(proc), TROUPE_OK);
    troupe_ll_proc_destroy(&proc);
    s_expect_error(troupe_asgn_lower(s_comp, "not a name", &proc), TROUPE_INVALID_ARGUMENT,
                   "not a C identifier");
    cr_assert_null(proc);
}

Test(assign, lower_into_existing_proc_reuses_static_symbols)
{
    int32_t sym;
    cr_assert_eq(troupe_asgn_comp_add_static_symbol(s_comp, "batch_n", 4, &sym), TROUPE_OK);
    troupe_tnode_t *k = MK("k", 2);
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_fetch_embed_symbol(s_comp, k, sym, &t), TROUPE_OK);
    troupe_ll_proc_t *proc;
    cr_assert_eq(troupe_ll_proc_new("p", &proc), TROUPE_OK);
    int32_t loop = troupe_ll_proc_add_symbol(proc, NULL);
    int32_t st = troupe_ll_proc_add_static_symbol(proc, "batch_n", 4);
    cr_assert_eq(loop, 0);
    cr_assert_eq(st, 1);
    troupe_ll_t *ll;
    cr_assert_eq(troupe_asgn_lower_into(s_comp, t, proc, &ll), TROUPE_OK, "%s",
                 troupe_last_error());
    proc->body = ll;
    cr_assert_eq(troupe_ll_proc_validate(proc), TROUPE_OK, "%s", troupe_last_error());
    cr_assert(s_idx_is_sym(&ll->u.for_loop.body->u.set.value->u.embed_index, 1));
    troupe_ll_proc_destroy(&proc);
}

/* ---- containers and equality -------------------------------------------------------------- */

Test(assign, embedded_nodes_and_equality)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    cr_assert_eq(troupe_asgn_comp_add_embedded(s_comp, y), TROUPE_OK);
    cr_assert_eq(troupe_asgn_comp_add_embedded(s_comp, y), TROUPE_OK);
    cr_assert_eq(s_comp->nembedded, 1);
    cr_assert(troupe_asgn_comp_is_embedded(s_comp, y));
    cr_assert(!troupe_asgn_comp_is_embedded(s_comp, x));

    troupe_asgn_comp_t *other;
    cr_assert_eq(troupe_asgn_comp_new(&other), TROUPE_OK);
    troupe_asgn_t *a, *b, *c;
    cr_assert_eq(troupe_asgn_accum_binop(s_comp, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                         troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &a),
                 TROUPE_OK);
    cr_assert_eq(troupe_asgn_accum_binop(other, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                         troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &b),
                 TROUPE_OK);
    /* the nodes a comp mentions, by index in comp->nodes (sorted by id); others SIZE_MAX */
    troupe_tnode_t *z = MK("z", 2, 2);
    size_t ix = troupe_asgn_comp_node_index(s_comp, x), iw = troupe_asgn_comp_node_index(s_comp, w),
           iy = troupe_asgn_comp_node_index(s_comp, y);
    cr_assert(ix < s_comp->nnodes && s_comp->nodes[ix] == x);
    cr_assert(iw < s_comp->nnodes && s_comp->nodes[iw] == w);
    cr_assert(iy < s_comp->nnodes && s_comp->nodes[iy] == y);
    cr_assert_eq(troupe_asgn_comp_node_index(s_comp, z), SIZE_MAX);
    cr_assert_eq(troupe_asgn_comp_node_index(NULL, x), SIZE_MAX);
    cr_assert_eq(troupe_asgn_comp_node_index(s_comp, NULL), SIZE_MAX);
    cr_assert_eq(troupe_asgn_accum_binop(other, false, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                         troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &c),
                 TROUPE_OK);
    cr_assert(troupe_asgn_equal(a, b));
    cr_assert(!troupe_asgn_equal(a, c));
    cr_assert_eq(other->nnodes, 3, "the comp retains every node it mentions");
    troupe_asgn_comp_destroy(&other);
    cr_assert_null(other);
    troupe_asgn_comp_destroy(&other); /* NULL is fine */
}

/* ---- numeric checks through the reference interpreter (compiler/interp.h) ----------------------- */

static void s_run(troupe_ll_proc_t *proc, troupe_interp_buffer_t *bufs, size_t nbufs,
                  const troupe_interp_static_t *statics, size_t nstatics)
{
    troupe_interp_args_t args = {bufs, nbufs, statics, nstatics, NULL};
    cr_assert_eq(troupe_interp_run(proc, &args), TROUPE_OK, "interp: %s", troupe_last_error());
}

Test(assign, numeric_matmul_through_interpreter)
{
    troupe_tnode_t *x = MK("x", 2, 3), *w = MK("w", 3, 4), *y = MK("y", 2, 4);
    float xv[6] = {1, 2, 3, 4, 5, 6};
    float wv[12] = {1, 0, -1, 2, 0.5f, 1, 0, -2, 3, -1, 2, 0};
    float yv[8];
    for (int k = 0; k < 8; k++)
        yv[k] = 1000.0f; /* garbage the neutral fill must erase */
    troupe_asgn_t *t;
    cr_assert_eq(troupe_asgn_accum_binop(s_comp, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                         troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &t),
                 TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(t);
    troupe_interp_buffer_t bufs[3] = {{x, xv}, {w, wv}, {y, yv}};
    s_run(proc, bufs, 3, NULL, 0);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 4; j++) {
            float e = 0;
            for (int i = 0; i < 3; i++)
                e += xv[b * 3 + i] * wv[i * 4 + j];
            cr_assert_float_eq(yv[b * 4 + j], e, 1e-6, "y[%d,%d] = %g, expected %g", b, j,
                               (double)yv[b * 4 + j], (double)e);
        }
    /* Running again gives the same result (the fill re-initialises y). */
    s_run(proc, bufs, 3, NULL, 0);
    cr_assert_float_eq(yv[0], 1 * 1 + 2 * 0.5f + 3 * 3, 1e-6);
    troupe_ll_proc_destroy(&proc);
}

Test(assign, numeric_max_reduction_slice_and_offsets_through_interpreter)
{
    int32_t sym;
    cr_assert_eq(troupe_asgn_comp_add_static_symbol(s_comp, "batch_n", 3, &sym), TROUPE_OK);
    troupe_tnode_t *x = MK("x", 2, 3), *m = MK("m", 2), *data = MK("data", 3, 2),
                   *row = MK("row", 2), *off = MK("off", 2, 3);
    float xv[6] = {-5, -2, -9, 4, 7, 1}, mv[2] = {0, 0};
    float dv[6] = {10, 11, 20, 21, 30, 31}, rv[2] = {0, 0}, ov[6];
    troupe_asgn_t *t1, *t2, *t3, *seq;
    cr_assert_eq(troupe_asgn_accum_unop(s_comp, true, TROUPE_BINOP_MAX, m, TROUPE_UNOP_IDENTITY,
                                        troupe_asgn_node(x), "bi=>b", &t1),
                 TROUPE_OK);
    cr_assert_eq(troupe_asgn_fetch_slice(s_comp, row, sym, data, &t2), TROUPE_OK);
    cr_assert_eq(troupe_asgn_fetch_range_over_offsets(s_comp, off, &t3), TROUPE_OK);
    troupe_asgn_t *items[3] = {t1, t2, t3};
    cr_assert_eq(troupe_asgn_seq(s_comp, 3, items, &seq), TROUPE_OK);
    troupe_ll_proc_t *proc = s_lower_root(seq);
    troupe_interp_buffer_t bufs[5] = {{x, xv}, {m, mv}, {data, dv}, {row, rv}, {off, ov}};
    troupe_interp_static_t st[1] = {{sym, NULL, 2}};
    s_run(proc, bufs, 5, st, 1);
    cr_assert_eq(mv[0], -2.0f, "max of an all-negative row (a 0 fill would give 0)");
    cr_assert_eq(mv[1], 7.0f);
    cr_assert_eq(rv[0], 30.0f);
    cr_assert_eq(rv[1], 31.0f);
    for (int k = 0; k < 6; k++)
        cr_assert_eq(ov[k], (float)k);
    troupe_ll_proc_destroy(&proc);
}
