/* Tests for compiler/interp: the reference interpreter of the low-level IR on hand-built
 * procedures — matmul with exact values, reductions, gates, where, FMA's single rounding,
 * half/bfloat16/fp8 rounding at SET (not per operation), integer semantics (promotion,
 * truncating division, wrap-around, division by zero), Threefry + uniforms against ir/ops.h
 * called directly, static index symbols and their bounds, missing buffers, merge-buffer reads,
 * local scopes, and the constant/index conversions into uint4x32. */
#include "compiler/interp.h"
#include "ir/lowlevel.h"
#include "ir/ops.h"
#include "ir/prec.h"
#include "ir/tnode.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------------------- */

static troupe_tnode_t *s_node(const char *label, troupe_prec_t prec, int ndims, ...)
{
    int64_t dims[TROUPE_MAX_DIMS];
    va_list ap;
    va_start(ap, ndims);
    for (int i = 0; i < ndims; i++)
        dims[i] = va_arg(ap, int64_t);
    va_end(ap);
    troupe_tnode_t *tn = NULL;
    const char *labels[1] = {label};
    cr_assert_eq(troupe_tnode_new(labels, 1, prec, ndims, dims, NULL, 0.0, &tn), TROUPE_OK, "%s",
                 troupe_last_error());
    return tn;
}

static troupe_ll_proc_t *s_proc(const char *name)
{
    troupe_ll_proc_t *p = NULL;
    cr_assert_eq(troupe_ll_proc_new(name, &p), TROUPE_OK);
    return p;
}

static troupe_axis_index_t X(int32_t sym)
{
    return troupe_idx_sym(sym);
}

static troupe_axis_index_t F(int64_t i)
{
    return troupe_idx_fixed(i);
}

/* Runs with the given buffers (tn, data pairs) and no statics. */
static troupe_status_t s_run(troupe_ll_proc_t *p, size_t n, const troupe_interp_buffer_t *bufs)
{
    troupe_interp_args_t args = {bufs, n, NULL, 0, NULL};
    return troupe_interp_run(p, &args);
}

static void s_install(troupe_ll_proc_t *p, troupe_ll_t *body)
{
    cr_assert_not_null(body);
    p->body = body;
    cr_assert_eq(troupe_ll_proc_validate(p), TROUPE_OK, "%s", troupe_last_error());
}

static uint32_t s_fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- matmul and reductions -------------------------------------------------------------- */

Test(interp, matmul_2x3x4_exact)
{
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)3);
    troupe_tnode_t *b = s_node("b", TROUPE_PREC_SINGLE, 2, (int64_t)3, (int64_t)4);
    troupe_tnode_t *c = s_node("c", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)4);
    troupe_ll_proc_t *p = s_proc("matmul");
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), k = troupe_ll_proc_add_symbol(p, NULL),
            j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ik[2] = {X(i), X(k)}, kj[2] = {X(k), X(j)}, ij[2] = {X(i), X(j)};
    troupe_sc_t *prod =
        troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_get(p, a, ik), troupe_sc_get(p, b, kj));
    troupe_ll_t *upd = troupe_ll_set(
        p, c, ij, troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get(p, c, ij), prod));
    troupe_ll_t *loops = troupe_ll_for(
        p, i, 0, 1, troupe_ll_for(p, k, 0, 2, troupe_ll_for(p, j, 0, 3, upd, true), true), true);
    s_install(p, troupe_ll_seq2(p, troupe_ll_zero_out(p, c), loops));

    float av[6] = {1, 2, 3, 4, 5, 6};
    float bv[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    float cv[8];
    for (int n = 0; n < 8; n++)
        cv[n] = 99.0f; /* zero_out must clear this */
    troupe_interp_buffer_t bufs[3] = {{a, av}, {b, bv}, {c, cv}};
    cr_assert_eq(s_run(p, 3, bufs), TROUPE_OK, "%s", troupe_last_error());
    float want[8] = {38, 44, 50, 56, 83, 98, 113, 128};
    for (int n = 0; n < 8; n++)
        cr_assert_eq(cv[n], want[n], "c[%d] = %g, want %g", n, cv[n], want[n]);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&a);
    troupe_tnode_release(&b);
    troupe_tnode_release(&c);
}

Test(interp, row_sum_and_row_max_double)
{
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_DOUBLE, 2, (int64_t)2, (int64_t)3);
    troupe_tnode_t *s = s_node("s", TROUPE_PREC_DOUBLE, 1, (int64_t)2);
    troupe_tnode_t *m = s_node("m", TROUPE_PREC_DOUBLE, 1, (int64_t)2);
    troupe_ll_proc_t *p = s_proc("reduce");
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, NULL);
    int32_t i2 = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t ij[2] = {X(i), X(j)}, iv[1] = {X(i)}, i2v[1] = {X(i2)};
    troupe_ll_t *init =
        troupe_ll_for(p, i2, 0, 1,
                      troupe_ll_seq2(p, troupe_ll_set(p, s, i2v, troupe_sc_constant(p, 0.0)),
                                     troupe_ll_set(p, m, i2v, troupe_sc_constant(p, -INFINITY))),
                      true);
    troupe_ll_t *body =
        troupe_ll_seq2(p,
                       troupe_ll_set(p, s, iv,
                                     troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get(p, s, iv),
                                                     troupe_sc_get(p, x, ij))),
                       troupe_ll_set(p, m, iv,
                                     troupe_sc_binop(p, TROUPE_BINOP_MAX, troupe_sc_get(p, m, iv),
                                                     troupe_sc_get(p, x, ij))));
    s_install(
        p, troupe_ll_seq2(p, init,
                          troupe_ll_for(p, i, 0, 1, troupe_ll_for(p, j, 0, 2, body, true), true)));
    double xv[6] = {0.5, -2.0, 0.25, -1.0, -3.0, -0.5};
    double sv[2] = {7, 7}, mv[2] = {7, 7};
    troupe_interp_buffer_t bufs[3] = {{x, xv}, {s, sv}, {m, mv}};
    cr_assert_eq(s_run(p, 3, bufs), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(sv[0], -1.25);
    cr_assert_eq(sv[1], -4.5);
    cr_assert_eq(mv[0], 0.5);
    cr_assert_eq(mv[1], -0.5);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&s);
    troupe_tnode_release(&m);
}

/* ---- gates, where, fma ------------------------------------------------------------------- */

Test(interp, relu_gate_and_unops)
{
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 1, (int64_t)4);
    troupe_tnode_t *g = s_node("g", TROUPE_PREC_SINGLE, 1, (int64_t)4);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 2, (int64_t)4, (int64_t)4);
    troupe_ll_proc_t *p = s_proc("gates");
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t iv[1] = {X(i)};
    troupe_axis_index_t y0[2] = {X(i), F(0)}, y1[2] = {X(i), F(1)}, y2[2] = {X(i), F(2)},
                        y3[2] = {X(i), F(3)};
    troupe_ll_t *items[4] = {
        troupe_ll_set(p, y, y0,
                      troupe_sc_binop(p, TROUPE_BINOP_RELU_GATE, troupe_sc_get(p, x, iv),
                                      troupe_sc_get(p, g, iv))),
        troupe_ll_set(p, y, y1, troupe_sc_unop(p, TROUPE_UNOP_RELU, troupe_sc_get(p, x, iv))),
        troupe_ll_set(p, y, y2, troupe_sc_unop(p, TROUPE_UNOP_SATUR01, troupe_sc_get(p, x, iv))),
        troupe_ll_set(p, y, y3,
                      troupe_sc_binop(p, TROUPE_BINOP_SATUR01_GATE, troupe_sc_get(p, x, iv),
                                      troupe_sc_get(p, g, iv))),
    };
    s_install(p, troupe_ll_for(p, i, 0, 3, troupe_ll_seq(p, 4, items), true));
    float xv[4] = {-1.0f, 0.0f, 0.5f, 2.0f}, gv[4] = {10, 20, 30, 40}, yv[16];
    troupe_interp_buffer_t bufs[3] = {{x, xv}, {g, gv}, {y, yv}};
    cr_assert_eq(s_run(p, 3, bufs), TROUPE_OK, "%s", troupe_last_error());
    float want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 30, 0.5f, 0.5f, 30, 40, 2, 1, 0};
    for (int n = 0; n < 16; n++)
        cr_assert_eq(yv[n], want[n], "y[%d] = %g, want %g", n, yv[n], want[n]);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&g);
    troupe_tnode_release(&y);
}

Test(interp, where_condition_in_its_own_precision)
{
    /* The condition is an int32 node; 0.5 would be "true" in float but the mask holds ints. */
    troupe_tnode_t *mask = s_node("mask", TROUPE_PREC_INT32, 1, (int64_t)3);
    troupe_tnode_t *a = s_node("a", TROUPE_PREC_SINGLE, 1, (int64_t)3);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 1, (int64_t)3);
    troupe_ll_proc_t *p = s_proc("where");
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t iv[1] = {X(i)};
    s_install(p, troupe_ll_for(p, i, 0, 2,
                               troupe_ll_set(p, y, iv,
                                             troupe_sc_ternop(
                                                 p, TROUPE_TERNOP_WHERE, troupe_sc_get(p, mask, iv),
                                                 troupe_sc_get(p, a, iv),
                                                 troupe_sc_unop(p, TROUPE_UNOP_NEG,
                                                                troupe_sc_get(p, a, iv)))),
                               true));
    int32_t mv[3] = {1, 0, -7};
    float av[3] = {1.5f, 2.5f, 3.5f}, yv[3];
    troupe_interp_buffer_t bufs[3] = {{mask, mv}, {a, av}, {y, yv}};
    cr_assert_eq(s_run(p, 3, bufs), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(yv[0], 1.5f);
    cr_assert_eq(yv[1], -2.5f);
    cr_assert_eq(yv[2], 3.5f);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&mask);
    troupe_tnode_release(&a);
    troupe_tnode_release(&y);
}

Test(interp, fma_rounds_once)
{
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 1, (int64_t)2);
    troupe_ll_proc_t *p = s_proc("fma");
    double a = 1.0 + ldexp(1.0, -23), c = -(1.0 + ldexp(1.0, -22));
    troupe_axis_index_t f0[1] = {F(0)}, f1[1] = {F(1)};
    troupe_ll_t *s0 =
        troupe_ll_set(p, y, f0,
                      troupe_sc_ternop(p, TROUPE_TERNOP_FMA, troupe_sc_constant(p, a),
                                       troupe_sc_constant(p, a), troupe_sc_constant(p, c)));
    troupe_ll_t *s1 =
        troupe_ll_set(p, y, f1,
                      troupe_sc_binop(p, TROUPE_BINOP_ADD,
                                      troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_constant(p, a),
                                                      troupe_sc_constant(p, a)),
                                      troupe_sc_constant(p, c)));
    s_install(p, troupe_ll_seq2(p, s0, s1));
    float yv[2];
    troupe_interp_buffer_t bufs[1] = {{y, yv}};
    cr_assert_eq(s_run(p, 1, bufs), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(yv[0], ldexpf(1.0f, -46), "fma gave %a", (double)yv[0]);
    cr_assert_eq(yv[1], 0.0f, "mul+add gave %a", (double)yv[1]);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&y);
}

/* ---- small float storage ------------------------------------------------------------------ */

Test(interp, half_rounds_at_set_not_per_op)
{
    /* (2048 + 1) - 1 in float is 2048; rounding 2049 to half first (a tie, to even: 2048)
     * would give 2047. */
    troupe_tnode_t *h = s_node("h", TROUPE_PREC_HALF, 1, (int64_t)3);
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 1, (int64_t)3);
    troupe_ll_proc_t *p = s_proc("half");
    troupe_axis_index_t f0[1] = {F(0)}, f1[1] = {F(1)}, f2[1] = {F(2)};
    troupe_ll_t *items[3] = {
        troupe_ll_set(
            p, h, f0,
            troupe_sc_binop(p, TROUPE_BINOP_SUB,
                            troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_constant(p, 2048),
                                            troupe_sc_constant(p, 1)),
                            troupe_sc_constant(p, 1))),
        troupe_ll_set(p, h, f1, troupe_sc_get(p, x, f1)),
        /* half -> half through float: a read of h[1] plus 0 keeps the value */
        troupe_ll_set(p, h, f2,
                      troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get(p, h, f1),
                                      troupe_sc_constant(p, 0))),
    };
    s_install(p, troupe_ll_seq(p, 3, items));
    uint16_t hv[3];
    float xv[3] = {0, 1.0f / 3.0f, 0};
    troupe_interp_buffer_t bufs[2] = {{h, hv}, {x, xv}};
    cr_assert_eq(s_run(p, 2, bufs), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_half_to_single(hv[0]), 2048.0f);
    cr_assert_eq(hv[1], troupe_single_to_half(1.0f / 3.0f));
    cr_assert_eq(hv[2], hv[1]);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&h);
    troupe_tnode_release(&x);
}

Test(interp, bfloat16_and_fp8_storage)
{
    troupe_tnode_t *b = s_node("b", TROUPE_PREC_BFLOAT16, 1, (int64_t)3);
    troupe_tnode_t *f = s_node("f", TROUPE_PREC_FP8, 1, (int64_t)4);
    troupe_ll_proc_t *p = s_proc("small");
    troupe_axis_index_t f0[1] = {F(0)}, f1[1] = {F(1)}, f2[1] = {F(2)}, f3[1] = {F(3)};
    troupe_ll_t *items[7] = {
        troupe_ll_set(p, b, f0, troupe_sc_constant(p, 3.14159)),
        troupe_ll_set(p, b, f1, troupe_sc_constant(p, 1000)),
        /* 1 + 2^-9 is below half a bf16 spacing above 1: rounds to 1 */
        troupe_ll_set(p, b, f2,
                      troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_constant(p, 1),
                                      troupe_sc_constant(p, ldexp(1.0, -9)))),
        troupe_ll_set(p, f, f0, troupe_sc_constant(p, 1.5)),
        troupe_ll_set(p, f, f1, troupe_sc_constant(p, 1.75)),
        troupe_ll_set(p, f, f2, troupe_sc_constant(p, -0.25)),
        /* 1e6 overflows E5M2 (max 57344): infinity, not saturation */
        troupe_ll_set(p, f, f3, troupe_sc_constant(p, 1e6)),
    };
    s_install(p, troupe_ll_seq(p, 7, items));
    uint16_t bv[3];
    uint8_t fv[4];
    troupe_interp_buffer_t bufs[2] = {{b, bv}, {f, fv}};
    cr_assert_eq(s_run(p, 2, bufs), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(bv[0], 0x4049);
    cr_assert_eq(bv[1], 0x447a);
    cr_assert_eq(bv[2], 0x3f80);
    cr_assert_eq(fv[0], 0x3e);
    cr_assert_eq(fv[1], 0x3f);
    cr_assert_eq(fv[2], 0xb4);
    cr_assert_eq(fv[3], 0x7c);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&b);
    troupe_tnode_release(&f);
}

/* ---- integers ---------------------------------------------------------------------------- */

Test(interp, integer_semantics)
{
    troupe_tnode_t *i32 = s_node("i", TROUPE_PREC_INT32, 1, (int64_t)4);
    troupe_tnode_t *u8 = s_node("b", TROUPE_PREC_BYTE, 1, (int64_t)3);
    troupe_tnode_t *u32 = s_node("u", TROUPE_PREC_UINT32, 1, (int64_t)2);
    troupe_ll_proc_t *p = s_proc("ints");
    troupe_axis_index_t f0[1] = {F(0)}, f1[1] = {F(1)}, f2[1] = {F(2)}, f3[1] = {F(3)};
#define K(v) troupe_sc_constant(p, (v))
#define B(op, a, b) troupe_sc_binop(p, TROUPE_BINOP_##op, (a), (b))
    troupe_ll_t *items[9] = {
        troupe_ll_set(p, i32, f0, B(DIV, K(-7), K(2))),
        troupe_ll_set(p, i32, f1, B(MOD, K(-7), K(2))),
        troupe_ll_set(p, i32, f2, K(2.9e9)),                   /* saturates */
        troupe_ll_set(p, i32, f3, B(MUL, K(65536), K(65536))), /* wraps to 0 */
        /* byte promotes to int: (200 + 100) / 2 = 150, not (44) / 2 */
        troupe_ll_set(p, u8, f0, B(DIV, B(ADD, K(200), K(100)), K(2))),
        /* and stores modulo 256 */
        troupe_ll_set(p, u8, f1, B(ADD, K(200), K(100))),
        /* max narrows its arguments to uint8: max((uint8)300, 50) = max(44, 50) */
        troupe_ll_set(p, u8, f2, B(MAX, B(ADD, K(200), K(100)), K(50))),
        troupe_ll_set(p, u32, f0, B(SUB, K(0), K(1))),
        troupe_ll_set(p, u32, f1, B(CMPLT, B(SUB, K(0), K(1)), K(5))), /* unsigned: 0 */
    };
#undef K
#undef B
    s_install(p, troupe_ll_seq(p, 9, items));
    int32_t iv[4];
    uint8_t bv[3];
    uint32_t uv[2];
    troupe_interp_buffer_t bufs[3] = {{i32, iv}, {u8, bv}, {u32, uv}};
    cr_assert_eq(s_run(p, 3, bufs), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(iv[0], -3);
    cr_assert_eq(iv[1], -1);
    cr_assert_eq(iv[2], INT32_MAX);
    cr_assert_eq(iv[3], 0);
    cr_assert_eq(bv[0], 150);
    cr_assert_eq(bv[1], 44);
    cr_assert_eq(bv[2], 50);
    cr_assert_eq(uv[0], 0xFFFFFFFFu);
    cr_assert_eq(uv[1], 0);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&i32);
    troupe_tnode_release(&u8);
    troupe_tnode_release(&u32);
}

Test(interp, integer_division_by_zero_is_an_error)
{
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_INT64, 1, (int64_t)1);
    troupe_ll_proc_t *p = s_proc("divz");
    troupe_axis_index_t f0[1] = {F(0)};
    s_install(p, troupe_ll_set(p, x, f0,
                               troupe_sc_binop(p, TROUPE_BINOP_DIV, troupe_sc_constant(p, 1),
                                               troupe_sc_get(p, x, f0))));
    int64_t xv[1] = {0};
    troupe_interp_buffer_t bufs[1] = {{x, xv}};
    cr_assert_eq(s_run(p, 1, bufs), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "division by zero") != NULL, "%s", troupe_last_error());
    /* but where's untaken branch is not evaluated */
    p->body = troupe_ll_set(
        p, x, f0,
        troupe_sc_ternop(
            p, TROUPE_TERNOP_WHERE, troupe_sc_get(p, x, f0),
            troupe_sc_binop(p, TROUPE_BINOP_DIV, troupe_sc_constant(p, 1), troupe_sc_get(p, x, f0)),
            troupe_sc_constant(p, 5)));
    cr_assert_eq(s_run(p, 1, bufs), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(xv[0], 5);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
}

/* ---- threefry and uniforms ----------------------------------------------------------------- */

Test(interp, threefry_uniform1_matches_ops)
{
    troupe_tnode_t *ctr = s_node("ctr", TROUPE_PREC_INT32, 1, (int64_t)64);
    troupe_tnode_t *u = s_node("u", TROUPE_PREC_SINGLE, 1, (int64_t)64);
    troupe_tnode_t *k = s_node("k", TROUPE_PREC_UINT4X32, 1, (int64_t)64);
    troupe_ll_proc_t *p = s_proc("rng");
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t iv[1] = {X(i)};
    const int64_t key = 0x123456789abcdefLL;
    troupe_sc_t *bits = troupe_sc_binop(p, TROUPE_BINOP_THREEFRY4X32_LIGHT,
                                        troupe_sc_constant_bits(p, key), troupe_sc_get(p, ctr, iv));
    troupe_ll_t *items[2] = {
        troupe_ll_set(p, u, iv, troupe_sc_unop(p, TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1, bits)),
        troupe_ll_set(p, k, iv,
                      troupe_sc_binop(p, TROUPE_BINOP_THREEFRY4X32_CRYPTO,
                                      troupe_sc_constant_bits(p, key), troupe_sc_get(p, ctr, iv))),
    };
    s_install(p, troupe_ll_for(p, i, 0, 63, troupe_ll_seq(p, 2, items), true));
    int32_t cv[64];
    float uv[64];
    troupe_uint4x32_t kv[64];
    for (int n = 0; n < 64; n++)
        cv[n] = n * 7 - 100;
    troupe_interp_buffer_t bufs[3] = {{ctr, cv}, {u, uv}, {k, kv}};
    cr_assert_eq(s_run(p, 3, bufs), TROUPE_OK, "%s", troupe_last_error());
    troupe_uint4x32_t key4 = {{(uint32_t)key, (uint32_t)((uint64_t)key >> 32), 0, 0}};
    for (int n = 0; n < 64; n++) {
        troupe_uint4x32_t c4;
        cr_assert_eq(troupe_prec_bits_to_uint4x32(TROUPE_PREC_INT32, &cv[n], &c4), TROUPE_OK);
        troupe_uint4x32_t r = troupe_threefry4x32_light(key4, c4);
        float want;
        cr_assert_eq(troupe_uint4x32_to_prec_uniform1(TROUPE_PREC_SINGLE, r, &want), TROUPE_OK);
        cr_assert_eq(s_fbits(uv[n]), s_fbits(want), "u[%d]", n);
        cr_assert(uv[n] >= 0.0f && uv[n] < 1.0f);
        troupe_uint4x32_t rc = troupe_threefry4x32_crypto(key4, c4);
        cr_assert_eq(memcmp(&kv[n], &rc, sizeof rc), 0, "k[%d]", n);
    }
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&ctr);
    troupe_tnode_release(&u);
    troupe_tnode_release(&k);
}

Test(interp, set_from_vec_uniform_half)
{
    /* 8 halves per uint4x32; the counter is the embedded row index (uint32 spreading). */
    troupe_tnode_t *h = s_node("h", TROUPE_PREC_HALF, 2, (int64_t)3, (int64_t)8);
    troupe_ll_proc_t *p = s_proc("vec");
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t at[2] = {X(i), F(0)};
    troupe_sc_t *bits =
        troupe_sc_binop(p, TROUPE_BINOP_THREEFRY4X32_CRYPTO, troupe_sc_constant_bits(p, 42),
                        troupe_sc_embed_index(p, X(i)));
    s_install(p, troupe_ll_for(p, i, 0, 2,
                               troupe_ll_set_from_vec(
                                   p, h, at, 8, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM, bits),
                               true));
    uint16_t hv[24];
    troupe_interp_buffer_t bufs[1] = {{h, hv}};
    cr_assert_eq(s_run(p, 1, bufs), TROUPE_OK, "%s", troupe_last_error());
    troupe_uint4x32_t key4 = {{42, 0, 0, 0}};
    for (uint32_t r = 0; r < 3; r++) {
        troupe_uint4x32_t c4;
        cr_assert_eq(troupe_prec_bits_to_uint4x32(TROUPE_PREC_UINT32, &r, &c4), TROUPE_OK);
        uint16_t want[8];
        size_t n = 0;
        cr_assert_eq(troupe_uint4x32_to_prec_uniform(
                         TROUPE_PREC_HALF, troupe_threefry4x32_crypto(key4, c4), want, &n),
                     TROUPE_OK);
        cr_assert_eq(n, 8);
        for (int e = 0; e < 8; e++) {
            cr_assert_eq(hv[r * 8 + e], want[e], "h[%u][%d]", r, e);
            float v = troupe_half_to_single(hv[r * 8 + e]);
            cr_assert(v >= 0.0f && v < 1.0f);
        }
    }
    /* a wrong length is rejected */
    p->body =
        troupe_ll_for(p, i, 0, 2,
                      troupe_ll_set_from_vec(p, h, at, 4, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM,
                                             troupe_sc_constant_bits(p, 1)),
                      true);
    cr_assert_eq(s_run(p, 1, bufs), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "length 4") != NULL, "%s", troupe_last_error());
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&h);
}

Test(interp, uint4x32_operations_outside_their_domain_fail)
{
    troupe_tnode_t *k = s_node("k", TROUPE_PREC_UINT4X32, 1, (int64_t)1);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 1, (int64_t)1);
    troupe_ll_proc_t *p = s_proc("bad");
    troupe_axis_index_t f0[1] = {F(0)};
    troupe_uint4x32_t kv[1];
    float yv[1];
    troupe_interp_buffer_t bufs[2] = {{k, kv}, {y, yv}};
    s_install(p, troupe_ll_set(p, k, f0,
                               troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_constant_bits(p, 1),
                                               troupe_sc_constant_bits(p, 2))));
    cr_assert_eq(s_run(p, 2, bufs), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "add") != NULL, "%s", troupe_last_error());
    p->body = troupe_ll_set(p, y, f0,
                            troupe_sc_binop(p, TROUPE_BINOP_THREEFRY4X32_LIGHT,
                                            troupe_sc_constant_bits(p, 1),
                                            troupe_sc_constant_bits(p, 2)));
    cr_assert_eq(s_run(p, 2, bufs), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "threefry4x32_light") != NULL, "%s", troupe_last_error());
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&k);
    troupe_tnode_release(&y);
}

Test(interp, conversions_into_uint4x32)
{
    troupe_tnode_t *k = s_node("k", TROUPE_PREC_UINT4X32, 1, (int64_t)4);
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 1, (int64_t)1);
    troupe_ll_proc_t *p = s_proc("conv");
    int32_t b = troupe_ll_proc_add_static_symbol(p, "b", 0);
    troupe_axis_index_t f0[1] = {F(0)}, f1[1] = {F(1)}, f2[1] = {F(2)}, f3[1] = {F(3)};
    troupe_ll_t *items[4] = {
        troupe_ll_set(p, k, f0, troupe_sc_constant_bits(p, -2)),
        troupe_ll_set(p, k, f1, troupe_sc_constant(p, 7.9)),
        troupe_ll_set(p, k, f2, troupe_sc_embed_index(p, X(b))),
        troupe_ll_set(p, k, f3, troupe_sc_get(p, x, f0)),
    };
    s_install(p, troupe_ll_seq(p, 4, items));
    troupe_uint4x32_t kv[4];
    float xv[1] = {1.0f};
    troupe_interp_buffer_t bufs[2] = {{k, kv}, {x, xv}};
    troupe_interp_static_t st[1] = {{-1, "b", 5}};
    troupe_interp_args_t args = {bufs, 2, st, 1, NULL};
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(kv[0].v[0], 0xFFFFFFFEu);
    cr_assert_eq(kv[0].v[1], 0xFFFFFFFFu);
    cr_assert_eq(kv[0].v[2], 0);
    cr_assert_eq(kv[1].v[0], 7);
    cr_assert_eq(kv[1].v[1], 0);
    cr_assert_eq(kv[2].v[0], 5);
    cr_assert_eq(kv[2].v[1], 5u ^ 0x9E3779B9u);
    cr_assert_eq(kv[2].v[2], 5u ^ 0x6C078965u);
    cr_assert_eq(kv[2].v[3], 5u ^ (5u << 16));
    cr_assert_eq(kv[3].v[0], 0x3f800000u);
    cr_assert_eq(kv[3].v[1], 0);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&k);
    troupe_tnode_release(&x);
}

/* ---- statics, buffers, merge ----------------------------------------------------------------- */

static troupe_ll_proc_t *s_slice_proc(troupe_tnode_t *src, troupe_tnode_t *dst)
{
    troupe_ll_proc_t *p = s_proc("slice");
    int32_t b = troupe_ll_proc_add_static_symbol(p, "batch_n", 3);
    int32_t j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t bj[2] = {X(b), X(j)}, jv[1] = {X(j)};
    s_install(
        p, troupe_ll_for(p, j, 0, 1, troupe_ll_set(p, dst, jv, troupe_sc_get(p, src, bj)), true));
    return p;
}

Test(interp, static_index_selects_and_is_bounds_checked)
{
    troupe_tnode_t *src = s_node("src", TROUPE_PREC_SINGLE, 2, (int64_t)3, (int64_t)2);
    troupe_tnode_t *dst = s_node("dst", TROUPE_PREC_SINGLE, 1, (int64_t)2);
    troupe_ll_proc_t *p = s_slice_proc(src, dst);
    float sv[6] = {1, 2, 3, 4, 5, 6}, dv[2];
    troupe_interp_buffer_t bufs[2] = {{src, sv}, {dst, dv}};
    troupe_interp_static_t st[1] = {{0, NULL, 2}};
    troupe_interp_args_t args = {bufs, 2, st, 1, NULL};
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(dv[0], 5);
    cr_assert_eq(dv[1], 6);
    st[0].value = 3;
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "batch_n") != NULL, "%s", troupe_last_error());
    cr_assert(strstr(troupe_last_error(), "0..2") != NULL, "%s", troupe_last_error());
    st[0].value = -1;
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "batch_n") != NULL, "%s", troupe_last_error());
    args.nstatics = 0;
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "'batch_n' has no value") != NULL, "%s",
              troupe_last_error());
    troupe_interp_static_t wrong[1] = {{-1, "nope", 0}};
    args.statics = wrong;
    args.nstatics = 1;
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "nope") != NULL, "%s", troupe_last_error());
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&src);
    troupe_tnode_release(&dst);
}

Test(interp, unbounded_static_is_checked_at_access)
{
    troupe_tnode_t *src = s_node("src", TROUPE_PREC_SINGLE, 2, (int64_t)3, (int64_t)2);
    troupe_tnode_t *dst = s_node("dst", TROUPE_PREC_SINGLE, 1, (int64_t)2);
    troupe_ll_proc_t *p = s_proc("slice_unbounded");
    int32_t b = troupe_ll_proc_add_static_symbol(p, "b", 0);
    int32_t j = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t bj[2] = {X(b), X(j)}, jv[1] = {X(j)};
    s_install(
        p, troupe_ll_for(p, j, 0, 1, troupe_ll_set(p, dst, jv, troupe_sc_get(p, src, bj)), true));
    float sv[6] = {0}, dv[2];
    troupe_interp_buffer_t bufs[2] = {{src, sv}, {dst, dv}};
    troupe_interp_static_t st[1] = {{b, NULL, 3}};
    troupe_interp_args_t args = {bufs, 2, st, 1, NULL};
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "axis 0: index 3 outside 0..2") != NULL, "%s",
              troupe_last_error());
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&src);
    troupe_tnode_release(&dst);
}

Test(interp, missing_buffer_names_the_node)
{
    troupe_tnode_t *src = s_node("src", TROUPE_PREC_SINGLE, 2, (int64_t)3, (int64_t)2);
    troupe_tnode_t *dst = s_node("dst", TROUPE_PREC_SINGLE, 1, (int64_t)2);
    troupe_ll_proc_t *p = s_slice_proc(src, dst);
    float dv[2];
    troupe_interp_buffer_t bufs[1] = {{dst, dv}};
    troupe_interp_static_t st[1] = {{0, NULL, 0}};
    troupe_interp_args_t args = {bufs, 1, st, 1, NULL};
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_INVALID_ARGUMENT);
    char name[64];
    troupe_tnode_debug_name(src, name, sizeof name);
    cr_assert(strstr(troupe_last_error(), name) != NULL, "%s", troupe_last_error());
    cr_assert(strstr(troupe_last_error(), "no buffer") != NULL, "%s", troupe_last_error());
    /* a Virtual node gets a zero-filled scratch buffer instead */
    troupe_memory_mode_t virt = {TROUPE_MM_VIRTUAL, 0, 0};
    cr_assert_eq(troupe_tnode_update_memory_mode(src, virt, 1), TROUPE_OK, "%s",
                 troupe_last_error());
    dv[0] = dv[1] = 9;
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(dv[0], 0);
    cr_assert_eq(dv[1], 0);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&src);
    troupe_tnode_release(&dst);
}

Test(interp, merge_buffer_read)
{
    troupe_tnode_t *g = s_node("grad", TROUPE_PREC_SINGLE, 1, (int64_t)3);
    troupe_ll_proc_t *p = s_proc("merge");
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t iv[1] = {X(i)};
    s_install(
        p, troupe_ll_for(p, i, 0, 2,
                         troupe_ll_set(p, g, iv,
                                       troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get(p, g, iv),
                                                       troupe_sc_get_merge_buffer(p, g, iv))),
                         true));
    float gv[3] = {1, 2, 3}, other[3] = {10, 20, 30};
    troupe_interp_buffer_t bufs[1] = {{g, gv}};
    troupe_interp_args_t args = {bufs, 1, NULL, 0, other};
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(gv[0], 11);
    cr_assert_eq(gv[1], 22);
    cr_assert_eq(gv[2], 33);
    args.merge_buffer = NULL;
    cr_assert_eq(troupe_interp_run(p, &args), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "merge buffer") != NULL, "%s", troupe_last_error());
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&g);
}

/* ---- local scopes ------------------------------------------------------------------------- */

Test(interp, local_scope_accumulates_in_compute_precision)
{
    /* y[i] = sum_j x[i,j] through an inlined virtual node of precision half: its local
     * variable is a float, so 2048 + 1 stays 2049 (a half could not hold it). */
    troupe_tnode_t *x = s_node("x", TROUPE_PREC_SINGLE, 2, (int64_t)2, (int64_t)2);
    troupe_tnode_t *v = s_node("v", TROUPE_PREC_HALF, 1, (int64_t)2);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 1, (int64_t)2);
    troupe_ll_proc_t *p = s_proc("scope");
    int32_t i = troupe_ll_proc_add_symbol(p, NULL), j = troupe_ll_proc_add_symbol(p, NULL);
    int32_t sid = troupe_ll_proc_new_scope_id(p);
    troupe_axis_index_t iv[1] = {X(i)}, ij[2] = {X(i), X(j)};
    troupe_ll_t *body = troupe_ll_seq2(
        p, troupe_ll_set_local(p, sid, troupe_sc_constant(p, 0)),
        troupe_ll_for(
            p, j, 0, 1,
            troupe_ll_set_local(p, sid,
                                troupe_sc_binop(p, TROUPE_BINOP_ADD, troupe_sc_get_local(p, sid),
                                                troupe_sc_get(p, x, ij))),
            true));
    s_install(p, troupe_ll_for(p, i, 0, 1,
                               troupe_ll_set(p, y, iv, troupe_sc_local_scope(p, sid, v, body, iv)),
                               true));
    float xv[4] = {2048, 1, 0.5f, 0.25f}, yv[2];
    troupe_interp_buffer_t bufs[2] = {{x, xv}, {y, yv}};
    cr_assert_eq(s_run(p, 2, bufs), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(yv[0], 2049.0f);
    cr_assert_eq(yv[1], 0.75f);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&x);
    troupe_tnode_release(&v);
    troupe_tnode_release(&y);
}

Test(interp, invalid_procedure_is_rejected)
{
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 1, (int64_t)2);
    troupe_ll_proc_t *p = s_proc("oob");
    troupe_axis_index_t f5[1] = {F(5)};
    p->body = troupe_ll_set(p, y, f5, troupe_sc_constant(p, 1));
    float yv[2];
    troupe_interp_buffer_t bufs[1] = {{y, yv}};
    cr_assert_eq(s_run(p, 1, bufs), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "outside dim") != NULL, "%s", troupe_last_error());
    cr_assert_eq(troupe_interp_run(NULL, NULL), TROUPE_INVALID_ARGUMENT);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&y);
}

Test(interp, comparison_results_are_c_int)
{
    /* Generated C gives comparisons, ||, && and ! the type int, and int op int stays int:
     * (1 < 2) / ((1 < 2) + (1 < 2)) is the int 1 / 2 = 0, not 0.5; in uint64,
     * (0 < ((1 < 2) - 2)) compares int 0 < int -1 (false), not 0 < 2^64 - 1. */
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 1, (int64_t)2);
    troupe_tnode_t *u = s_node("u", TROUPE_PREC_UINT64, 1, (int64_t)2);
    troupe_ll_proc_t *p = s_proc("cint");
    troupe_axis_index_t f0[1] = {F(0)}, f1[1] = {F(1)};
#define K(v) troupe_sc_constant(p, (v))
#define B(op, a, b) troupe_sc_binop(p, TROUPE_BINOP_##op, (a), (b))
    troupe_ll_t *items[4] = {
        troupe_ll_set(
            p, y, f0,
            B(DIV, B(CMPLT, K(1), K(2)), B(ADD, B(CMPLT, K(1), K(2)), B(CMPLT, K(1), K(2))))),
        /* mixed with a float operand, the int converts: 1 / 2.0f */
        troupe_ll_set(p, y, f1, B(DIV, B(CMPLT, K(1), K(2)), K(2))),
        troupe_ll_set(p, u, f0, B(CMPLT, K(0), B(SUB, B(CMPLT, K(1), K(2)), B(OR, K(1), K(0))))),
        /* ... but an int -1 stored into uint64 wraps */
        troupe_ll_set(p, u, f1,
                      troupe_sc_unop(p, TROUPE_UNOP_NEG, troupe_sc_unop(p, TROUPE_UNOP_NOT, K(0)))),
    };
#undef K
#undef B
    s_install(p, troupe_ll_seq(p, 4, items));
    float yv[2];
    uint64_t uv[2];
    troupe_interp_buffer_t bufs[2] = {{y, yv}, {u, uv}};
    cr_assert_eq(s_run(p, 2, bufs), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(yv[0], 0.0f);
    cr_assert_eq(yv[1], 0.5f);
    cr_assert_eq(uv[0], 0);
    cr_assert_eq(uv[1], UINT64_MAX);
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&y);
    troupe_tnode_release(&u);
}

Test(interp, local_scope_evaluates_in_its_node_precision)
{
    /* A scope of an fp8 node computes in float but evaluates uniform1 as fp8 does. */
    troupe_tnode_t *v = s_node("v", TROUPE_PREC_FP8, 0);
    troupe_tnode_t *y = s_node("y", TROUPE_PREC_SINGLE, 0);
    troupe_ll_proc_t *p = s_proc("scope_fp8");
    int32_t sid = troupe_ll_proc_new_scope_id(p);
    const int64_t key = 77;
    troupe_ll_t *body =
        troupe_ll_set_local(p, sid,
                            troupe_sc_unop(p, TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1,
                                           troupe_sc_binop(p, TROUPE_BINOP_THREEFRY4X32_CRYPTO,
                                                           troupe_sc_constant_bits(p, key),
                                                           troupe_sc_constant_bits(p, 5))));
    s_install(p, troupe_ll_set(p, y, NULL, troupe_sc_local_scope(p, sid, v, body, NULL)));
    float yv[1];
    troupe_interp_buffer_t bufs[1] = {{y, yv}};
    cr_assert_eq(s_run(p, 1, bufs), TROUPE_OK, "%s", troupe_last_error());
    troupe_uint4x32_t k4 = {{77, 0, 0, 0}}, c4 = {{5, 0, 0, 0}};
    uint8_t e;
    cr_assert_eq(
        troupe_uint4x32_to_prec_uniform1(TROUPE_PREC_FP8, troupe_threefry4x32_crypto(k4, c4), &e),
        TROUPE_OK);
    cr_assert_eq(yv[0], troupe_fp8_to_single(e));
    troupe_ll_proc_destroy(&p);
    troupe_tnode_release(&v);
    troupe_tnode_release(&y);
}
