/* Tests for ir/text: print -> parse -> equal (and identical re-print) for low-level procedures
 * covering every statement and scalar kind, every operation and several precisions; golden
 * text for a small matmul; node reuse and the live-node mismatch error; every parse error form
 * with its line:column message; assignment comps (matmul accumulation, every fetch form, block
 * comments, vector unops, merge buffers); and the seed corpus of the fuzz target
 * (tests/data/text_corpus) run through troupe_text_fuzz_one, the fuzzer's entry point; and the
 * S-expression reader of ir/sexp.h (trees, positions, errors). */
#define _POSIX_C_SOURCE 200809L
#include "base/alloc.h"
#include "compiler/lower.h"
#include "ir/assign.h"
#include "ir/lowlevel.h"
#include "ir/ops.h"
#include "ir/sexp.h"
#include "ir/text.h"
#include "ir/tnode.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------------------- */

static troupe_tnode_t *s_node_id(int32_t id, const char *label, troupe_prec_t prec, int ndims, ...)
{
    int64_t dims[TROUPE_MAX_DIMS];
    va_list ap;
    va_start(ap, ndims);
    for (int i = 0; i < ndims; i++)
        dims[i] = va_arg(ap, int64_t);
    va_end(ap);
    troupe_tnode_t *tn = NULL;
    const char *labels[1] = {label};
    troupe_status_t st =
        id > 0 ? troupe_tnode_new_with_id(id, labels, 1, prec, ndims, dims, NULL, 0.0, &tn)
               : troupe_tnode_new(labels, 1, prec, ndims, dims, NULL, 0.0, &tn);
    cr_assert_eq(st, TROUPE_OK, "%s", troupe_last_error());
    return tn;
}

static troupe_axis_index_t X(int32_t sym)
{
    return troupe_idx_sym(sym);
}

static troupe_axis_index_t F(int64_t i)
{
    return troupe_idx_fixed(i);
}

static troupe_axis_index_t AFF(int64_t c0, int32_t s0, int64_t c1, int32_t s1, int64_t off)
{
    troupe_axis_index_t x = {2, {{c0, s0}, {c1, s1}}, off};
    return x;
}

/* Print, parse, compare trees and headers, re-print identically. Returns the text (free). */
static char *s_roundtrip(const troupe_ll_proc_t *p)
{
    char *t1 = NULL, *t2 = NULL;
    troupe_ll_proc_t *q = NULL;
    cr_assert_eq(troupe_text_print_proc(p, &t1), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_text_parse_proc(t1, &q), TROUPE_OK, "%s\n%s", troupe_last_error(), t1);
    cr_assert(troupe_ll_equal(p->body, q->body), "trees differ:\n%s", t1);
    cr_assert_eq(q->nsyms, p->nsyms);
    for (int32_t i = 0; i < p->nsyms; i++) {
        cr_assert_str_eq(q->syms[i].name, p->syms[i].name);
        cr_assert_eq(q->syms[i].is_static, p->syms[i].is_static);
        cr_assert_eq(q->syms[i].static_range, p->syms[i].static_range);
    }
    cr_assert_eq(q->nnodes, p->nnodes);
    for (size_t i = 0; i < p->nnodes; i++)
        cr_assert_eq(q->nodes[i], p->nodes[i], "node %zu not reused", i);
    cr_assert_eq(troupe_text_print_proc(q, &t2), TROUPE_OK, "%s", troupe_last_error());
    cr_assert(strcmp(t1, t2) == 0, "re-print differs:\n%s\n---\n%s", t1, t2);
    troupe_free(t2);
    troupe_ll_proc_destroy(&q);
    return t1;
}

/* Expects parse failure with exactly `msg` as the last error. */
static void s_parse_fails(const char *text, const char *msg)
{
    troupe_ll_proc_t *q = (troupe_ll_proc_t *)1;
    cr_assert_eq(troupe_text_parse_proc(text, &q), TROUPE_INVALID_ARGUMENT, "parsed: %s", text);
    cr_assert_null(q);
    cr_assert(strcmp(troupe_last_error(), msg) == 0, "for input:\n%s\ngot:  %s\nwant: %s", text,
              troupe_last_error(), msg);
}

#define HDR "(proc p (nodes (node 7001 (label x) single (dims 2 3))) (symbols (sym 0 i) (sym 1 j)) "

/* ---- round trips ---------------------------------------------------------------------------- */

Test(text, roundtrip_every_statement_and_scalar)
{
    troupe_tnode_t *a = s_node_id(0, "a", TROUPE_PREC_SINGLE, 2, (int64_t)4, (int64_t)6);
    troupe_tnode_t *h = s_node_id(0, "h", TROUPE_PREC_HALF, 1, (int64_t)8);
    troupe_tnode_t *n = s_node_id(0, "n", TROUPE_PREC_INT32, 1, (int64_t)4);
    troupe_tnode_t *k = s_node_id(0, "k", TROUPE_PREC_UINT4X32, 0);
    troupe_tnode_t *d = s_node_id(0, "d", TROUPE_PREC_DOUBLE, 0);
    troupe_tnode_t *v = s_node_id(0, "v", TROUPE_PREC_BFLOAT16, 1, (int64_t)4);
    int64_t pdims[2] = {4, 5};
    troupe_axis_padding_t pad[2] = {{1, 1}, {0, 2}};
    const char *plabel[2] = {"padded \"one\"", "grad"};
    troupe_tnode_t *pn = NULL;
    cr_assert_eq(troupe_tnode_new(plabel, 2, TROUPE_PREC_FP8, 2, pdims, pad, -0.5, &pn), TROUPE_OK,
                 "%s", troupe_last_error());

    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("everything", &p), TROUPE_OK);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, "col");
    int32_t b = troupe_ll_proc_add_static_symbol(p, "batch_n", 4);
    int32_t u = troupe_ll_proc_add_static_symbol(p, "open", 0);
    troupe_axis_index_t ij[2] = {X(i), X(j)}, aff[2] = {AFF(2, i, -1, b, 1), F(0)};
    troupe_axis_index_t iv[1] = {X(i)}, f0[1] = {F(0)}, none[1] = {F(0)};
    troupe_axis_index_t scaled[1] = {{1, {{3, i}}, 0}};
    troupe_axis_index_t pidx[2] = {X(i), {1, {{1, u}}, -2}};

    troupe_ll_t *items[64];
    size_t ni = 0;
    items[ni++] = troupe_ll_comment(p, "all \"forms\"\n\ttab\\ \x01 ok");
    items[ni++] = troupe_ll_zero_out(p, a);
    items[ni++] = troupe_ll_noop(p); /* dropped by seq: still round-trips */
    /* every binop on single (threefry on uint4x32 below) */
    for (int op = 0; op < TROUPE_BINOP_COUNT; op++) {
        if (op == TROUPE_BINOP_THREEFRY4X32_CRYPTO || op == TROUPE_BINOP_THREEFRY4X32_LIGHT)
            continue;
        troupe_axis_index_t at[2] = {F(op % 4), F(op % 6)};
        items[ni++] = troupe_ll_set(p, a, at,
                                    troupe_sc_binop(p, (troupe_binop_t)op, troupe_sc_get(p, a, ij),
                                                    troupe_sc_constant(p, op * 0.1)));
    }
    /* every unop, chained */
    troupe_sc_t *chain = troupe_sc_get(p, h, scaled);
    for (int op = 0; op < TROUPE_UNOP_COUNT; op++)
        if (op != TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1)
            chain = troupe_sc_unop(p, (troupe_unop_t)op, chain);
    items[ni++] = troupe_ll_set(p, h, iv, chain);
    /* ternops, constants of every shape */
    items[ni++] = troupe_ll_set(
        p, d, NULL,
        troupe_sc_ternop(p, TROUPE_TERNOP_WHERE, troupe_sc_get(p, n, iv),
                         troupe_sc_ternop(p, TROUPE_TERNOP_FMA, troupe_sc_constant(p, -0.0),
                                          troupe_sc_constant(p, INFINITY),
                                          troupe_sc_constant(p, -INFINITY)),
                         troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_constant(p, NAN),
                                         troupe_sc_constant(p, 4.9406564584124654e-324))));
    double payload_nan;
    uint64_t bits = 0x7ff0000000000123ull;
    memcpy(&payload_nan, &bits, sizeof bits);
    items[ni++] = troupe_ll_set(
        p, d, NULL,
        troupe_sc_binop(p, TROUPE_BINOP_SUB, troupe_sc_constant(p, payload_nan),
                        troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_constant(p, 1e300),
                                        troupe_sc_constant(p, 1.0 / 3.0))));
    items[ni++] = troupe_ll_set(p, d, NULL, troupe_sc_constant(p, -NAN));
    /* uint4x32: threefry, constant bits, embed index, get of a uint4x32 */
    items[ni++] = troupe_ll_set(
        p, k, NULL,
        troupe_sc_binop(p, TROUPE_BINOP_THREEFRY4X32_CRYPTO, troupe_sc_constant_bits(p, -42),
                        troupe_sc_binop(p, TROUPE_BINOP_THREEFRY4X32_LIGHT,
                                        troupe_sc_constant_bits(p, INT64_MIN),
                                        troupe_sc_embed_index(p, AFF(5, b, 7, u, -3)))));
    items[ni++] = troupe_ll_set(
        p, n, iv,
        troupe_sc_unop(p, TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1, troupe_sc_get(p, k, none)));
    items[ni++] = troupe_ll_set_from_vec(p, v, f0, 4, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM,
                                         troupe_sc_get(p, k, none));
    /* merge buffer, padded node, affine indices */
    items[ni++] = troupe_ll_set(p, a, aff, troupe_sc_get_merge_buffer(p, a, ij));
    items[ni++] = troupe_ll_set(p, pn, pidx, troupe_sc_constant(p, 2.5));
    /* local scope (nested in a for, with set_local/get_local) */
    int32_t sid = troupe_ll_proc_new_scope_id(p);
    troupe_ll_t *scope_body = troupe_ll_seq2(
        p, troupe_ll_set_local(p, sid, troupe_sc_constant(p, 0)),
        troupe_ll_set_local(p, sid,
                            troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get_local(p, sid),
                                            troupe_sc_get(p, a, ij))));
    items[ni++] = troupe_ll_set(p, h, iv, troupe_sc_local_scope(p, sid, v, scope_body, iv));
    troupe_ll_t *inner = troupe_ll_seq(p, ni, items);
    troupe_ll_t *loops = troupe_ll_for(p, i, 0, 3, troupe_ll_for(p, j, -1, 5, inner, false), true);
    p->body = troupe_ll_seq2(p, troupe_ll_comment(p, ""), loops);
    cr_assert_eq(troupe_ll_proc_status(p), TROUPE_OK);

    char *t1 = s_roundtrip(p);
    cr_assert(strstr(t1, "(+ (* 2 i0) (* -1 batch_n) 1)") != NULL, "%s", t1);
    cr_assert(strstr(t1, "(f64 #x7ff0000000000123)") != NULL, "%s", t1);
    cr_assert(strstr(t1, "(f64 #xfff8000000000000)") != NULL, "%s", t1);
    cr_assert(strstr(t1, "#x8000000000000000") != NULL, "%s", t1);
    cr_assert(strstr(t1, "#xffffffffffffffd6") != NULL, "%s", t1);
    cr_assert(strstr(t1, "(fma -0 inf -inf)") != NULL, "%s", t1);
    cr_assert(strstr(t1, "4.94065645841247e-324") != NULL, "%s", t1);
    cr_assert(strstr(t1, " 0.1)") != NULL, "shortest form expected:\n%s", t1);
    cr_assert(strstr(t1, "(for col -1 5 untraced") != NULL, "%s", t1);
    cr_assert(strstr(t1, "\\\"forms\\\"\\n\\ttab\\\\ \\x01 ok") != NULL, "%s", t1);
    cr_assert(strstr(t1, "(padding -0.5 (1 1) (0 2))") != NULL, "%s", t1);
    cr_assert(strstr(t1, "(static 3 open 0)") != NULL, "%s", t1);

    /* Parsing when the nodes are not live creates them with the declared ids. */
    int32_t ids[7] = {a->id, h->id, n->id, k->id, d->id, v->id, pn->id};
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&a);
    troupe_tnode_release(&h);
    troupe_tnode_release(&n);
    troupe_tnode_release(&k);
    troupe_tnode_release(&d);
    troupe_tnode_release(&v);
    troupe_tnode_release(&pn);
    troupe_tnode_t *gone = NULL;
    cr_assert_eq(troupe_tnode_find(ids[0], &gone), TROUPE_NOT_FOUND);
    troupe_ll_proc_t *q = NULL;
    cr_assert_eq(troupe_text_parse_proc(t1, &q), TROUPE_OK, "%s", troupe_last_error());
    char *t3 = NULL;
    cr_assert_eq(troupe_text_print_proc(q, &t3), TROUPE_OK);
    cr_assert_str_eq(t1, t3);
    cr_assert_eq(q->nnodes, 7);
    for (int m = 0; m < 7; m++) {
        troupe_tnode_t *found = NULL;
        cr_assert_eq(troupe_tnode_find(ids[m], &found), TROUPE_OK);
        troupe_tnode_release(&found);
    }
    cr_assert_eq(q->nodes[6]->has_padding, true);
    cr_assert_eq(q->nodes[6]->padding[1].right, 2);
    cr_assert_eq(q->nodes[6]->label_count, 2);
    cr_assert_str_eq(q->nodes[6]->label[0], "padded \"one\"");
    troupe_free(t3);
    troupe_free(t1);
    troupe_ll_proc_destroy(&q);
}

Test(text, roundtrip_precisions)
{
    static const troupe_prec_t precs[] = {
        TROUPE_PREC_BYTE,     TROUPE_PREC_UINT16, TROUPE_PREC_INT32,    TROUPE_PREC_UINT32,
        TROUPE_PREC_INT64,    TROUPE_PREC_UINT64, TROUPE_PREC_UINT4X32, TROUPE_PREC_HALF,
        TROUPE_PREC_BFLOAT16, TROUPE_PREC_FP8,    TROUPE_PREC_SINGLE,   TROUPE_PREC_DOUBLE};
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("precs", &p), TROUPE_OK);
    troupe_tnode_t *nodes[12];
    troupe_ll_t *items[12];
    for (int m = 0; m < 12; m++) {
        nodes[m] = s_node_id(0, troupe_prec_name(precs[m]), precs[m], 1, (int64_t)(m + 1));
        troupe_axis_index_t last[1] = {F(m)};
        items[m] = troupe_ll_set(p, nodes[m], last, troupe_sc_constant(p, m - 0.75));
    }
    p->body = troupe_ll_seq(p, 12, items);
    char *t = s_roundtrip(p);
    for (int m = 0; m < 12; m++) {
        char want[64];
        snprintf(want, sizeof want, "%s (dims %d))", troupe_prec_name(precs[m]), m + 1);
        cr_assert(strstr(t, want) != NULL, "missing '%s' in\n%s", want, t);
    }
    troupe_free(t);
    troupe_ll_proc_destroy(&p);
    for (int m = 0; m < 12; m++)
        troupe_tnode_release(&nodes[m]);
}

/* ---- golden text ----------------------------------------------------------------------------- */

static const char s_matmul_golden[] =
    "(proc matmul\n"
    "  (nodes\n"
    "    (node 9101 (label \"a\") single (dims 2 3))\n"
    "    (node 9102 (label \"b\") single (dims 3 4))\n"
    "    (node 9103 (label \"c\") single (dims 2 4)))\n"
    "  (symbols\n"
    "    (sym 0 i0)\n"
    "    (sym 1 i1)\n"
    "    (sym 2 i2))\n"
    "  (body\n"
    "    (seq\n"
    "      (zero_out 9103)\n"
    "      (for i0 0 1\n"
    "        (for i1 0 2\n"
    "          (for i2 0 3\n"
    "            (set 9103 (i0 i2) (add (get 9103 (i0 i2)) (mul (get 9101 (i0 i1)) (get 9102 (i1 "
    "i2)))))))))))\n";

Test(text, golden_matmul)
{
    troupe_tnode_t *a = s_node_id(9101, "a", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)3);
    troupe_tnode_t *b = s_node_id(9102, "b", TROUPE_PREC_SINGLE, 2, (int64_t)3, (int64_t)4);
    troupe_tnode_t *c = s_node_id(9103, "c", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)4);
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("matmul", &p), TROUPE_OK);
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), k = troupe_ll_proc_add_symbol(p, NULL),
            j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ik[2] = {X(i), X(k)}, kj[2] = {X(k), X(j)}, ij[2] = {X(i), X(j)};
    troupe_ll_t *upd =
        troupe_ll_set(p, c, ij,
                      troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get(p, c, ij),
                                      troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_get(p, a, ik),
                                                      troupe_sc_get(p, b, kj))));
    p->body = troupe_ll_seq2(
        p, troupe_ll_zero_out(p, c),
        troupe_ll_for(p, i, 0, 1,
                      troupe_ll_for(p, k, 0, 2, troupe_ll_for(p, j, 0, 3, upd, true), true), true));
    char *t = s_roundtrip(p);
    cr_assert(strcmp(t, s_matmul_golden) == 0, "golden differs:\n%s", t);
    troupe_free(t);
    /* The golden text itself parses to the same tree. */
    troupe_ll_proc_t *q = NULL;
    cr_assert_eq(troupe_text_parse_proc(s_matmul_golden, &q), TROUPE_OK, "%s", troupe_last_error());
    cr_assert(troupe_ll_equal(p->body, q->body));
    troupe_ll_proc_destroy(&q);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&a);
    troupe_tnode_release(&b);
    troupe_tnode_release(&c);
}

Test(text, print_rejects_shared_symbol_names)
{
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("dup", &p), TROUPE_OK);
    troupe_ll_proc_add_symbol(p, "i");
    troupe_ll_proc_add_symbol(p, "i");
    char *t = (char *)1;
    cr_assert_eq(troupe_text_print_proc(p, &t), TROUPE_INVALID_ARGUMENT);
    cr_assert_null(t);
    cr_assert(strstr(troupe_last_error(), "share the name 'i'") != NULL, "%s", troupe_last_error());
    cr_assert_eq(troupe_text_print_proc(NULL, &t), TROUPE_INVALID_ARGUMENT);
    troupe_ll_proc_destroy(&p);
}

Test(text, print_rejects_trees_too_deep_to_parse_back)
{
    troupe_tnode_t *y = s_node_id(0, "y", TROUPE_PREC_SINGLE, 0);
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("deep", &p), TROUPE_OK);
    /* 239 nested negations: the deepest printable tree (240 levels with the set) */
    troupe_sc_t *e = troupe_sc_constant(p, 1);
    for (int d = 0; d < 239; d++)
        e = troupe_sc_unop(p, TROUPE_UNOP_NEG, e);
    p->body = troupe_ll_set(p, y, NULL, e);
    char *t = s_roundtrip(p);
    troupe_free(t);
    p->body = troupe_ll_set(p, y, NULL, troupe_sc_unop(p, TROUPE_UNOP_NEG, e));
    cr_assert_eq(troupe_text_print_proc(p, &t), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "deeper than the text form allows") != NULL, "%s",
              troupe_last_error());
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&y);
}

/* ---- nodes against the registry -------------------------------------------------------------- */

Test(text, live_node_mismatch_is_reported)
{
    troupe_tnode_t *x = s_node_id(7001, "x", TROUPE_PREC_DOUBLE, 2, (int64_t)2, (int64_t)3);
    s_parse_fails(HDR "(body (noop)))",
                  "1:16: node 7001: declared single 2x3 but the live node is double 2x3");
    s_parse_fails("(proc p (nodes (node 7001 (label x) double (dims 2 3) (padding 0 (1 0) (0 0))))"
                  " (symbols) (body (noop)))",
                  "1:16: node 7001: declared double 2x3 padded with 0 (1 0) (0 0) but the live "
                  "node is double 2x3 unpadded");
    troupe_ll_proc_t *q = NULL;
    cr_assert_eq(troupe_text_parse_proc("(proc p (nodes (node 7001 (label other) double (dims 2 "
                                        "3))) (symbols) (body (zero_out 7001)))",
                                        &q),
                 TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(q->nodes[0], x, "the live node is reused");
    troupe_ll_proc_destroy(&q);
    troupe_tnode_release(&x);
}

/* ---- errors ---------------------------------------------------------------------------------- */

Test(text, error_messages)
{
    /* Each message points at the offending token (verified column by column). */
    s_parse_fails(HDR "(body (noop))",
                  "1:100: expected ')' closing the procedure, found end of input");
    s_parse_fails(HDR "(body (noop))))", "1:101: expected end of input, found ')'");
    s_parse_fails(")", "1:1: expected '(proc', found ')'");
    s_parse_fails("", "1:1: expected '(proc', found end of input");
    s_parse_fails(HDR "(body (set 7001 (0 0) (frobnicate 1 2))))",
                  "1:110: expected a scalar form (get get_merge_buffer get_local local_scope embed "
                  "f64 or an operation name of ir/ops.h), found 'frobnicate'");
    s_parse_fails(HDR "(body (set 7001 (0 0) (add 1))))",
                  "1:115: expected argument 2 of add (it takes 2), found ')'");
    s_parse_fails(HDR "(body (set 7001 (0 0) (neg 1 2))))",
                  "1:116: expected ')' closing neg (it takes 1 argument), found '2'");
    s_parse_fails(HDR "(body (teleport)))",
                  "1:94: expected a statement (noop comment seq for zero_out set set_from_vec "
                  "set_local bind_index), found 'teleport'");
    s_parse_fails(HDR "(body (set 7001 (0 0) 1.2.3)))",
                  "1:109: expected a scalar (number, #x bits or a form), found '1.2.3'");
    s_parse_fails(HDR "(body (set 7001 (0 0) 1e999)))",
                  "1:109: expected a scalar (number, #x bits or a form), found '1e999'");
    s_parse_fails(
        HDR "(body (set 7001 (0 0) #x12345678901234567)))",
        "1:109: expected a scalar (number, #x bits or a form), found '#x12345678901234567'");
    s_parse_fails(HDR "(body (set 7001 (99999999999999999999 0) 1)))",
                  "1:104: expected an index (integer, symbol, (+ ...) or (* c s)), found "
                  "'99999999999999999999'");
    s_parse_fails("(proc p (nodes (node 1 (label) single (dims 0))) (symbols) (body (noop)))",
                  "1:45: expected a positive dim, found '0'");
    s_parse_fails("(proc p (nodes (node 0 (label) single (dims 1))) (symbols) (body (noop)))",
                  "1:22: expected a node id (1..2147483647), found '0'");
    s_parse_fails("(proc p (nodes (node 5 (label) quad (dims 1))) (symbols) (body (noop)))",
                  "1:32: expected a precision (byte uint16 int32 uint32 int64 uint64 uint4x32 half "
                  "bfloat16 fp8 single double), found 'quad'");
    s_parse_fails(HDR "(body (set 7001 (i k) 1)))",
                  "1:106: expected a declared symbol, found 'k' (not in the symbol list)");
    s_parse_fails("(proc p (nodes) (symbols (sym 1 i)) (body (noop)))",
                  "1:31: expected symbol id 0 (ids run 0, 1, ...), found '1'");
    s_parse_fails("(proc p (nodes) (symbols (sym 0 i) (static 1 i 3)) (body (noop)))",
                  "1:46: expected a new symbol name, found 'i' (declared twice)");
    s_parse_fails("(proc p (nodes) (symbols (static 0 b 3)) (body (for b 0 1 (noop))))",
                  "1:53: expected a loop symbol, found static symbol 'b'");
    s_parse_fails(HDR "(body (zero_out 42)))",
                  "1:103: expected a declared node id, found 42 (not in the node list)");
    s_parse_fails(HDR "(body (set 7001 (i) 1)))",
                  "1:103: expected 2 indices for node 7001, found 1");
    s_parse_fails(
        HDR "(body (set 7001 (i j 0) 1)))",
        "1:108: expected ')' after 2 indices (node 7001 has 2 dims), found another index");
    s_parse_fails("(proc p (nodes (node 3 (label) single (dims 1)) (node 3 (label) single (dims "
                  "1))) (symbols) (body (noop)))",
                  "1:49: node 3 declared twice");
    s_parse_fails(HDR "(body (set 7001 (0 0) (get_local 0))))",
                  "1:120: expected the id of an enclosing local_scope, found 0");
    s_parse_fails(HDR "(body (comment \"oops)))",
                  "1:110: expected '\"' closing the string started at 1:102, found end of input");
    s_parse_fails(HDR "(body (comment \"bad \\q\")))",
                  "1:107: expected an escape (\\\\ \\\" \\n \\t \\r \\xHH), found a bad escape");
    s_parse_fails(
        HDR "(body (comment \"nul \\x00\")))",
        "1:107: expected an escape \\xHH with two hex digits (not 00), found a bad escape");
    s_parse_fails("(proc p\n  (nodes)\n\x01", "3:1: expected a token, found byte 0x01");
    s_parse_fails("(proc p (nodes) (symbols) (body (comment \"a\nb\")))",
                  "1:44: expected a printable byte in a string, found byte 0x0a");
    s_parse_fails("; a comment\n(proc p\n  (nodes)\n  (symbols)\n  (body (zap)))",
                  "5:10: expected a statement (noop comment seq for zero_out set set_from_vec "
                  "set_local bind_index), found 'zap'");
}

Test(text, error_limits_depth_length_atoms)
{
    /* deep nesting: 300 nested negations */
    size_t n = 300;
    size_t cap = strlen(HDR) + 64 + n * 6;
    char *deep = malloc(cap);
    cr_assert_not_null(deep);
    size_t len = (size_t)snprintf(deep, cap, "%s(body (set 7001 (0 0) ", HDR);
    for (size_t m = 0; m < n; m++)
        len += (size_t)snprintf(deep + len, cap - len, "(neg ");
    len += (size_t)snprintf(deep + len, cap - len, "1");
    for (size_t m = 0; m < n + 3; m++)
        deep[len++] = ')';
    deep[len] = '\0';
    troupe_ll_proc_t *q = NULL;
    cr_assert_eq(troupe_text_parse_proc(deep, &q), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "expected lists nested at most 256 deep, found deeper "
                                          "nesting") != NULL,
              "%s", troupe_last_error());
    free(deep);

    /* overlong input (checked before reading) */
    size_t big = TROUPE_TEXT_MAX_BYTES + 1;
    char *huge = malloc(big);
    cr_assert_not_null(huge);
    memset(huge, ' ', big);
    cr_assert_eq(troupe_text_parse_proc_n(huge, big, &q), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "1:1: expected at most 16777216 bytes of input") != NULL,
              "%s", troupe_last_error());
    free(huge);

    /* an overlong atom */
    char atom[TROUPE_TEXT_MAX_ATOM + 64];
    memset(atom, 'x', sizeof atom - 1);
    atom[0] = '(';
    atom[sizeof atom - 1] = '\0';
    cr_assert_eq(troupe_text_parse_proc(atom, &q), TROUPE_INVALID_ARGUMENT);
    cr_assert_str_eq(troupe_last_error(), "1:2: expected an atom of at most 1024 bytes, found a "
                                          "longer one");

    /* an embedded NUL is an unexpected byte */
    cr_assert_eq(troupe_text_parse_proc_n("(proc\0", 6, &q), TROUPE_INVALID_ARGUMENT);
    cr_assert_str_eq(troupe_last_error(), "1:6: expected a token, found byte 0x00");
    cr_assert_null(q);
}

/* ---- assignment comps ---------------------------------------------------------------------- */

static char *s_comp_roundtrip(const troupe_asgn_comp_t *c)
{
    char *t1 = NULL, *t2 = NULL;
    troupe_asgn_comp_t *q = NULL;
    cr_assert_eq(troupe_text_print_comp(c, &t1), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_text_parse_comp(t1, &q), TROUPE_OK, "%s\n%s", troupe_last_error(), t1);
    cr_assert(troupe_asgn_equal(c->root, q->root), "trees differ:\n%s", t1);
    cr_assert_eq(q->nsyms, c->nsyms);
    cr_assert_eq(q->nembedded, c->nembedded);
    cr_assert_eq(troupe_text_print_comp(q, &t2), TROUPE_OK, "%s", troupe_last_error());
    cr_assert(strcmp(t1, t2) == 0, "re-print differs:\n%s\n---\n%s", t1, t2);
    troupe_free(t2);
    troupe_asgn_comp_destroy(&q);
    return t1;
}

static void s_check(troupe_status_t st)
{
    cr_assert_eq(st, TROUPE_OK, "%s", troupe_last_error());
}

/* Runs a builder writing into `t`, then yields `t` (the comma operator sequences them). */
#define S_OK(call) (s_check(call), t)

Test(text, comp_roundtrip_all_forms)
{
    troupe_tnode_t *x = s_node_id(9201, "x", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)3);
    troupe_tnode_t *w = s_node_id(9202, "w", TROUPE_PREC_SINGLE, 2, (int64_t)3, (int64_t)4);
    troupe_tnode_t *y = s_node_id(9203, "y", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)4);
    troupe_tnode_t *s = s_node_id(9204, "s", TROUPE_PREC_DOUBLE, 1, (int64_t)3);
    troupe_tnode_t *batch = s_node_id(9205, "batch", TROUPE_PREC_DOUBLE, 2, (int64_t)5, (int64_t)3);
    troupe_tnode_t *ctr = s_node_id(9206, "ctr", TROUPE_PREC_UINT4X32, 1, (int64_t)2);
    troupe_tnode_t *u = s_node_id(9207, "u", TROUPE_PREC_HALF, 1, (int64_t)16);
    troupe_tnode_t *e = s_node_id(9208, "e", TROUPE_PREC_INT64, 0);
    troupe_asgn_comp_t *c = NULL;
    cr_assert_eq(troupe_asgn_comp_new(&c), TROUPE_OK);
    int32_t bn = -1;
    cr_assert_eq(troupe_asgn_comp_add_static_symbol(c, "batch_n", 5, &bn), TROUPE_OK);
    troupe_asgn_t *t, *items[12];
    size_t n = 0;
    items[n++] =
        S_OK(troupe_asgn_accum_binop(c, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                     troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &t));
    items[n++] = S_OK(troupe_asgn_accum_unop(c, false, TROUPE_BINOP_MAX, s, TROUPE_UNOP_RELU,
                                             troupe_asgn_merge(batch), "{batch_n}i=>i", &t));
    items[n++] = S_OK(troupe_asgn_accum_ternop(c, true, TROUPE_BINOP_ARG2, y, TROUPE_TERNOP_FMA,
                                               troupe_asgn_node(y), troupe_asgn_merge(y),
                                               troupe_asgn_node(y), "a b, a b ,ab=>ab", &t));
    items[n++] = S_OK(troupe_asgn_fetch_constant(c, s, -0.0, &t));
    items[n++] = S_OK(troupe_asgn_fetch_constant_bits(c, e, -7, &t));
    double fill[3] = {0.1, NAN, -INFINITY};
    items[n++] = S_OK(troupe_asgn_fetch_constant_fill(c, s, fill, 3, &t));
    items[n++] = S_OK(troupe_asgn_fetch_range_over_offsets(c, x, &t));
    items[n++] = S_OK(troupe_asgn_fetch_slice(c, s, bn, batch, &t));
    items[n++] = S_OK(troupe_asgn_fetch_embed_symbol(c, e, bn, &t));
    items[n++] = S_OK(troupe_asgn_fetch_embed_self_id(c, e, &t));
    items[n++] = S_OK(troupe_asgn_set_vec_unop(c, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM, u,
                                               troupe_asgn_node(ctr), "i=>i", &t));
    troupe_asgn_t *seq = S_OK(troupe_asgn_seq(c, n, items, &t));
    troupe_asgn_t *noop = S_OK(troupe_asgn_noop(c, &t));
    troupe_asgn_t *inner = S_OK(troupe_asgn_block_comment(c, "empty \"block\"", noop, &t));
    troupe_asgn_t *outer = S_OK(troupe_asgn_block_comment(c, "all forms", seq, &t));
    troupe_asgn_comp_set_root(c, S_OK(troupe_asgn_seq2(c, outer, inner, &t)));
    cr_assert_eq(troupe_asgn_comp_add_embedded(c, y), TROUPE_OK);
    troupe_tnode_t *only_embedded = s_node_id(9209, "z", TROUPE_PREC_BYTE, 1, (int64_t)2);
    cr_assert_eq(troupe_asgn_comp_add_embedded(c, only_embedded), TROUPE_OK);

    char *text = s_comp_roundtrip(c);
    cr_assert(
        strstr(text, "(accum_op 9203 add mul (9201 9202) \"bi,ij=>bj\" initialize_neutral)") !=
            NULL,
        "%s", text);
    cr_assert(strstr(text, "(accum_op 9204 max relu ((merge 9205)) \"{batch_n}i=>i\")") != NULL,
              "%s", text);
    cr_assert(strstr(text, "(fetch 9204 constant_fill 0.1 nan -inf)") != NULL, "%s", text);
    cr_assert(strstr(text, "(fetch 9204 slice batch_n 9205)") != NULL, "%s", text);
    cr_assert(strstr(text, "(fetch 9208 constant_bits #xfffffffffffffff9)") != NULL, "%s", text);
    cr_assert(strstr(text, "(set_vec_unop 9207 uint4x32_to_prec_uniform 9206 \"i=>i\")") != NULL,
              "%s", text);
    cr_assert(strstr(text, "(embedded 9203 9209)") != NULL, "%s", text);
    cr_assert(strstr(text, "(node 9209 (label \"z\") byte (dims 2))") != NULL, "%s", text);
    troupe_free(text);
    troupe_asgn_comp_destroy(&c);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
    troupe_tnode_release(&s);
    troupe_tnode_release(&batch);
    troupe_tnode_release(&ctr);
    troupe_tnode_release(&u);
    troupe_tnode_release(&e);
    troupe_tnode_release(&only_embedded);
}

static const char s_comp_golden[] =
    "(comp\n"
    "  (nodes\n"
    "    (node 9301 (label \"x\") single (dims 2 3))\n"
    "    (node 9302 (label \"w\") single (dims 3 4))\n"
    "    (node 9303 (label \"y\") single (dims 2 4)))\n"
    "  (symbols)\n"
    "  (embedded)\n"
    "  (body\n"
    "    (block_comment \"matmul\"\n"
    "      (accum_op 9303 add mul (9301 9302) \"bi,ij=>bj\" initialize_neutral))))\n";

Test(text, comp_golden_matmul_and_errors)
{
    troupe_tnode_t *x = s_node_id(9301, "x", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)3);
    troupe_tnode_t *w = s_node_id(9302, "w", TROUPE_PREC_SINGLE, 2, (int64_t)3, (int64_t)4);
    troupe_tnode_t *y = s_node_id(9303, "y", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)4);
    troupe_asgn_comp_t *c = NULL;
    cr_assert_eq(troupe_asgn_comp_new(&c), TROUPE_OK);
    troupe_asgn_t *t, *mm;
    mm = S_OK(troupe_asgn_accum_binop(c, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                      troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &t));
    troupe_asgn_comp_set_root(c, S_OK(troupe_asgn_block_comment(c, "matmul", mm, &t)));
    char *text = s_comp_roundtrip(c);
    cr_assert(strcmp(text, s_comp_golden) == 0, "golden differs:\n%s", text);
    troupe_free(text);
    troupe_asgn_comp_destroy(&c);

    /* builder errors carry their message at the form's position */
    const char *bad_spec = "(comp (nodes (node 9301 (label) single (dims 2 3)) (node 9303 (label) "
                           "single (dims 2 4))) (symbols) (embedded) (body (accum_op 9303 add "
                           "identity (9301) \"ij=>ij\")))";
    troupe_asgn_comp_t *q = (troupe_asgn_comp_t *)1;
    cr_assert_eq(troupe_text_parse_comp(bad_spec, &q), TROUPE_INVALID_ARGUMENT);
    cr_assert_null(q);
    cr_assert(strncmp(troupe_last_error(), "1:118: projection 'ij=>ij'", 26) == 0, "%s",
              troupe_last_error());
    const char *bad_op = "(comp (nodes (node 9301 (label) single (dims 2 3))) (symbols) (embedded) "
                         "(body (accum_op 9301 add mul (9301) \"ij=>ij\")))";
    cr_assert_eq(troupe_text_parse_comp(bad_op, &q), TROUPE_INVALID_ARGUMENT);
    cr_assert_str_eq(troupe_last_error(), "1:99: expected a unop name for 1 operand, found 'mul'");
    const char *no_neutral = "(comp (nodes (node 9301 (label) single (dims 2 3))) (symbols) "
                             "(embedded) (body (accum_op 9301 mod identity (9301) \"ij=>ij\" "
                             "initialize_neutral)))";
    cr_assert_eq(troupe_text_parse_comp(no_neutral, &q), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "1:80: ") == troupe_last_error(), "%s",
              troupe_last_error());
    cr_assert(strstr(troupe_last_error(), "no neutral element") != NULL, "%s", troupe_last_error());
    const char *bad_fill = "(comp (nodes (node 9301 (label) single (dims 2 3))) (symbols) "
                           "(embedded) (body (fetch 9301 constant_fill 1 2)))";
    cr_assert_eq(troupe_text_parse_comp(bad_fill, &q), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "2 values given but the node has 6 elements") != NULL,
              "%s", troupe_last_error());
    const char *bad_sym = "(comp (nodes (node 9301 (label) single (dims 2 3))) (symbols) "
                          "(embedded) (body (fetch 9301 embed_symbol b)))";
    cr_assert_eq(troupe_text_parse_comp(bad_sym, &q), TROUPE_INVALID_ARGUMENT);
    cr_assert_str_eq(troupe_last_error(),
                     "1:105: expected a declared symbol, found 'b' (not in the symbol list)");
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
}

Test(text, comp_lowers_like_the_original)
{
    /* A parsed comp is a working comp: it lowers to the same procedure text. */
    troupe_tnode_t *x = s_node_id(9401, "x", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)3);
    troupe_tnode_t *w = s_node_id(9402, "w", TROUPE_PREC_SINGLE, 2, (int64_t)3, (int64_t)4);
    troupe_tnode_t *y = s_node_id(9403, "y", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)4);
    troupe_asgn_comp_t *c = NULL, *q = NULL;
    cr_assert_eq(troupe_asgn_comp_new(&c), TROUPE_OK);
    troupe_asgn_t *t;
    troupe_asgn_comp_set_root(c, S_OK(troupe_asgn_accum_binop(
                                     c, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                     troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &t)));
    char *text = NULL, *l1 = NULL, *l2 = NULL;
    cr_assert_eq(troupe_text_print_comp(c, &text), TROUPE_OK);
    cr_assert_eq(troupe_text_parse_comp(text, &q), TROUPE_OK, "%s", troupe_last_error());
    troupe_ll_proc_t *p1 = NULL, *p2 = NULL;
    cr_assert_eq(troupe_asgn_lower(c, "mm", &p1), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_asgn_lower(q, "mm", &p2), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_text_print_proc(p1, &l1), TROUPE_OK);
    cr_assert_eq(troupe_text_print_proc(p2, &l2), TROUPE_OK);
    cr_assert_str_eq(l1, l2);
    char *rt = s_roundtrip(p1);
    troupe_free(rt);
    troupe_free(text);
    troupe_free(l1);
    troupe_free(l2);
    troupe_ll_proc_destroy(&p1);
    troupe_ll_proc_destroy(&p2);
    troupe_asgn_comp_destroy(&c);
    troupe_asgn_comp_destroy(&q);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
}

/* ---- seed corpus through the fuzzer's entry point ------------------------------------------- */

static char *s_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    cr_assert(n >= 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

Test(text, seed_corpus_through_fuzz_entry)
{
    const char *dir = TROUPE_TEST_DATA_DIR "/text_corpus";
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "no corpus directory %s", dir);
    int files = 0, valid = 0, invalid = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        const char *name = ent->d_name;
        size_t nl = strlen(name);
        if (nl < 5 || strcmp(name + nl - 5, ".sexp") != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        size_t len = 0;
        char *data = s_read_file(path, &len);
        files++;
        troupe_status_t st = troupe_text_fuzz_one((const uint8_t *)data, len);
        cr_assert_eq(st, TROUPE_OK, "%s: %s", name, troupe_last_error());
        /* valid_* files parse (as a procedure or a comp); invalid_* files fail cleanly */
        troupe_ll_proc_t *p = NULL;
        troupe_asgn_comp_t *c = NULL;
        troupe_status_t sp = troupe_text_parse_proc_n(data, len, &p);
        char perr[1024];
        snprintf(perr, sizeof perr, "%s", troupe_last_error());
        troupe_status_t sc = troupe_text_parse_comp_n(data, len, &c);
        bool parsed = sp == TROUPE_OK || sc == TROUPE_OK;
        if (strncmp(name, "valid_", 6) == 0) {
            cr_assert(parsed, "%s does not parse: %s / %s", name, perr, troupe_last_error());
            valid++;
        } else {
            cr_assert(!parsed, "%s parses but is named as invalid", name);
            cr_assert_eq(sp, TROUPE_INVALID_ARGUMENT, "%s", name);
            cr_assert_eq(sc, TROUPE_INVALID_ARGUMENT, "%s", name);
            cr_assert(strchr(perr, ':') != NULL, "%s: no position in '%s'", name, perr);
            invalid++;
        }
        troupe_ll_proc_destroy(&p);
        troupe_asgn_comp_destroy(&c);
        free(data);
    }
    closedir(d);
    cr_assert(valid >= 4 && invalid >= 4, "corpus has %d valid and %d invalid files of %d", valid,
              invalid, files);
}

Test(text, fuzz_entry_handles_empty_and_garbage)
{
    cr_assert_eq(troupe_text_fuzz_one(NULL, 0), TROUPE_OK);
    cr_assert_eq(troupe_text_fuzz_one((const uint8_t *)"", 0), TROUPE_OK);
    const uint8_t junk[] = {0xff, '(', '(', 0x00, ')', '"'};
    cr_assert_eq(troupe_text_fuzz_one(junk, sizeof junk), TROUPE_OK);
}

Test(text, numbers_ignore_the_process_locale)
{
    /* Needs a locale with a decimal comma (e.g. LOCPATH with a de_DE.UTF-8 from localedef). */
    if (setlocale(LC_ALL, "de_DE.UTF-8") == NULL && setlocale(LC_ALL, "de_DE.utf8") == NULL &&
        setlocale(LC_ALL, "fr_FR.UTF-8") == NULL)
        cr_skip_test("no locale with a decimal comma is installed");
    char probe[16];
    snprintf(probe, sizeof probe, "%g", 0.5);
    if (strcmp(probe, "0,5") != 0)
        cr_skip_test("the locale does not use a decimal comma");
    troupe_tnode_t *x = s_node_id(0, "x", TROUPE_PREC_DOUBLE, 1, (int64_t)2);
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new("loc", &p), TROUPE_OK);
    troupe_axis_index_t f0[1] = {F(0)};
    p->body = troupe_ll_set(p, x, f0, troupe_sc_constant(p, 0.5));
    char *t = s_roundtrip(p);
    cr_assert(strstr(t, "(set ") != NULL && strstr(t, " 0.5)") != NULL, "%s", t);
    troupe_free(t);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
}

/* ---- the S-expression reader (ir/sexp.h) ------------------------------------------------- */

Test(sexp, reads_lists_atoms_and_strings_with_positions)
{
    const char *text = "; a comment\n(backend (name cpu)\n"
                       "  (tags \"a \\\"b\\\"\\n\" x) () #x1f)  \n";
    troupe_sexp_t *x = NULL;
    cr_assert_eq(troupe_sexp_read(text, strlen(text), &x), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(x->kind, TROUPE_SEXP_LIST);
    cr_assert_eq(x->line, 2);
    cr_assert_eq(x->col, 1);
    cr_assert_eq(x->count, 5);
    cr_assert(troupe_sexp_is_atom(x->items[0], "backend"));
    cr_assert(troupe_sexp_is_form(x, "backend"));
    const troupe_sexp_t *name = troupe_sexp_find(x, "name");
    cr_assert_not_null(name);
    cr_assert_eq(name->count, 2);
    cr_assert(troupe_sexp_is_atom(name->items[1], "cpu"));
    cr_assert_eq(name->items[1]->col, 16);
    const troupe_sexp_t *tags = troupe_sexp_find(x, "tags");
    cr_assert_not_null(tags);
    cr_assert_eq(tags->line, 3);
    cr_assert_eq(tags->items[1]->kind, TROUPE_SEXP_STRING);
    cr_assert_str_eq(tags->items[1]->text, "a \"b\"\n");
    cr_assert_eq(tags->items[1]->len, 6);
    cr_assert_eq(x->items[3]->kind, TROUPE_SEXP_LIST);
    cr_assert_eq(x->items[3]->count, 0);
    cr_assert(troupe_sexp_is_atom(x->items[4], "#x1f"));
    cr_assert_null(troupe_sexp_find(x, "missing"));
    cr_assert_null(troupe_sexp_find(name->items[1], "cpu"), "an atom has no forms");
    troupe_sexp_destroy(&x);
    cr_assert_null(x);
    troupe_sexp_destroy(&x);
}

Test(sexp, errors_name_the_position)
{
    struct {
        const char *text, *message;
    } cases[] = {
        {"(a (b)", "1:7: expected ')', found end of input"},
        {"(a) b", "1:5: expected end of input, found 'b'"},
        {"", "1:1: expected a datum ('(', an atom or a string), found end of input"},
        {")", "1:1: expected a datum ('(', an atom or a string), found ')'"},
        {"(a\n  \"open",
         "2:8: expected '\"' closing the string started at 2:3, found end of input"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        troupe_sexp_t *x = (troupe_sexp_t *)&x;
        cr_assert_eq(troupe_sexp_read(cases[i].text, strlen(cases[i].text), &x),
                     TROUPE_INVALID_ARGUMENT, "%s", cases[i].text);
        cr_assert_null(x);
        cr_assert_str_eq(troupe_last_error(), cases[i].message);
    }
    char deep[2 * TROUPE_SEXP_MAX_DEPTH + 8];
    size_t n = 0;
    for (int i = 0; i <= TROUPE_SEXP_MAX_DEPTH; i++)
        deep[n++] = '(';
    for (int i = 0; i <= TROUPE_SEXP_MAX_DEPTH; i++)
        deep[n++] = ')';
    troupe_sexp_t *x = NULL;
    cr_assert_eq(troupe_sexp_read(deep, n, &x), TROUPE_INVALID_ARGUMENT);
    cr_assert_null(x);
    cr_assert_eq(troupe_sexp_read(NULL, 1, &x), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_sexp_read("a", 1, NULL), TROUPE_INVALID_ARGUMENT);
}
