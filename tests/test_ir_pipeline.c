/* Integration tests of the IR pipeline: assignments (ir/assign.h) -> lowering -> optimiser
 * (compiler/optimize.h) -> C / CUDA code generation (compiler/cgen.h), checked against the reference
 * interpreter (compiler/interp.h) and the text form (ir/text.h).
 *
 *  golden.*      the S-expression text of the lowered (unoptimised) procedure of matmul
 *                "bi,ij=>bj", a row sum "bi=>b" and the softmax cross-entropy forward pass,
 *                compared byte for byte with tests/data/golden/<name>.sexp
 *                (TROUPE_UPDATE_GOLDEN=1 rewrites the files). Nodes get fixed ids (9001...).
 *  pipeline.*    each case is lowered, optimised, emitted as C, compiled with the system
 *                compiler (cc -O2 -shared -fPIC), dlopened and run on random inputs; every
 *                parameter node must equal, bit for bit, what the interpreter computes from the
 *                same inputs on the same optimised procedure; outputs are also checked against
 *                values computed here (exactly where the arithmetic is exact, else with the
 *                stated tolerance). The softmax cross-entropy gradient is also checked against
 *                central finite differences of the compiled forward loss in double precision.
 *  virtualize.*  a pointwise intermediate read once is inlined: Virtual memory mode, no SET or
 *                GET of it left, absent from the generated C, and results equal to the
 *                unoptimised interpreter run.
 *  text.*        every comp and procedure built here (lowered and optimised) prints, parses
 *                back to an equal tree and re-prints identically. The same round trip also
 *                runs inside every other test on each comp and procedure it builds.
 *  cuda.*        with the CUDA toolkit (TROUPE_HAVE_CUDA), the CUDA dialect of every optimised
 *                procedure compiles with NVRTC (no GPU needed); skipped otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include "ir_test_util.h"

#include "compiler/cgen.h"
#include "compiler/interp.h"
#include "compiler/lower.h"
#include "compiler/optimize.h"
#include "ir/assign.h"
#include "ir/lowlevel.h"
#include "ir/ops.h"
#include "ir/prec.h"
#include "ir/text.h"
#include "ir/tnode.h"
#include "troupe_config.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- cases: a comp, its nodes, its lowered procedure --------------------------------------- */

#define PC_MAX_ITEMS 64

typedef struct pcase {
    char name[64];
    int32_t next_id; /* the next fixed node id */
    troupe_asgn_comp_t *comp;
    troupe_tnode_t *tn[IRT_MAX_BINDS];
    size_t ntn;
    troupe_asgn_t *items[PC_MAX_ITEMS];
    size_t nitems;
    troupe_asgn_t *tmp;
    troupe_ll_proc_t *proc;
} pcase_t;

static void pc_init(pcase_t *c, const char *name, int32_t id_base)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->next_id = id_base;
    cr_assert_eq(troupe_asgn_comp_new(&c->comp), TROUPE_OK, "%s", troupe_last_error());
}

static void pc_free(pcase_t *c)
{
    troupe_ll_proc_destroy(&c->proc);
    troupe_asgn_comp_destroy(&c->comp);
    for (size_t i = 0; i < c->ntn; i++)
        troupe_tnode_release(&c->tn[i]);
    memset(c, 0, sizeof *c);
}

/* A node of the case with the next fixed id; ndims 0..2 (d0, d1 used as needed). */
static troupe_tnode_t *pc_node(pcase_t *c, const char *label, troupe_prec_t prec, int ndims,
                               int64_t d0, int64_t d1)
{
    int64_t dims[2] = {d0, d1};
    cr_assert_lt(c->ntn, IRT_MAX_BINDS);
    troupe_tnode_t *tn = irt_node(c->next_id++, label, prec, ndims, dims);
    c->tn[c->ntn++] = tn;
    return tn;
}

/* The case's node labelled `label`. */
static troupe_tnode_t *pc_get(const pcase_t *c, const char *label)
{
    for (size_t i = 0; i < c->ntn; i++)
        if (strcmp(c->tn[i]->label[c->tn[i]->label_count - 1], label) == 0)
            return c->tn[i];
    cr_assert_fail("%s: no node labelled %s", c->name, label);
    return NULL;
}

static void pc_push(pcase_t *c, troupe_status_t st)
{
    cr_assert_eq(st, TROUPE_OK, "%s: building item %zu: %s", c->name, c->nitems,
                 troupe_last_error());
    cr_assert_not_null(c->tmp);
    cr_assert_lt(c->nitems, PC_MAX_ITEMS);
    c->items[c->nitems++] = c->tmp;
    c->tmp = NULL;
}

/* ASG(c, troupe_asgn_xxx, args...) calls troupe_asgn_xxx(c->comp, args..., &tree) and appends
 * the tree to the case's top-level items. */
#define ASG(c, fn, ...) pc_push((c), fn((c)->comp, __VA_ARGS__, &(c)->tmp))

/* Wraps items [from, nitems) into one block comment item. */
static void pc_block(pcase_t *c, size_t from, const char *text)
{
    troupe_asgn_t *seq = NULL, *blk = NULL;
    cr_assert_eq(troupe_asgn_seq(c->comp, c->nitems - from, c->items + from, &seq), TROUPE_OK,
                 "%s", troupe_last_error());
    cr_assert_eq(troupe_asgn_block_comment(c->comp, text, seq, &blk), TROUPE_OK, "%s",
                 troupe_last_error());
    c->nitems = from;
    c->items[c->nitems++] = blk;
}

/* Installs the items as the comp's root, round-trips the comp through text, lowers it into
 * c->proc (validated) and round-trips the procedure. */
static void pc_lower(pcase_t *c)
{
    troupe_asgn_t *root = NULL;
    cr_assert_eq(troupe_asgn_seq(c->comp, c->nitems, c->items, &root), TROUPE_OK, "%s",
                 troupe_last_error());
    troupe_asgn_comp_set_root(c->comp, root);
    irt_roundtrip_comp(c->comp, false);
    cr_assert_eq(troupe_asgn_lower(c->comp, c->name, &c->proc), TROUPE_OK, "lower %s: %s",
                 c->name, troupe_last_error());
    cr_assert_eq(troupe_ll_proc_validate(c->proc), TROUPE_OK, "%s", troupe_last_error());
    irt_roundtrip_proc(c->proc, false);
}

/* Optimises c->proc with the default settings and round-trips the result through text. */
static void pc_optimize(pcase_t *c)
{
    cr_assert_eq(troupe_ll_optimize(c->proc, NULL), TROUPE_OK, "optimize %s: %s", c->name,
                 troupe_last_error());
    cr_assert(c->proc->optimized);
    irt_roundtrip_proc(c->proc, false);
}

/* ---- case builders ---------------------------------------------------------------------------- */

enum { MM_B = 4, MM_I = 6, MM_J = 5 };

/* y[b,j] = sum_i x[b,i] * w[i,j]. */
static void build_matmul(pcase_t *c, troupe_prec_t prec)
{
    troupe_tnode_t *x = pc_node(c, "x", prec, 2, MM_B, MM_I);
    troupe_tnode_t *w = pc_node(c, "w", prec, 2, MM_I, MM_J);
    troupe_tnode_t *y = pc_node(c, "y", prec, 2, MM_B, MM_J);
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
        troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj");
}

/* s[b] = sum_i x[b,i]. */
static void build_rowsum(pcase_t *c, troupe_prec_t prec)
{
    troupe_tnode_t *x = pc_node(c, "x", prec, 2, 4, 7);
    troupe_tnode_t *s = pc_node(c, "s", prec, 1, 4, 0);
    ASG(c, troupe_asgn_accum_unop, true, TROUPE_BINOP_ADD, s, TROUPE_UNOP_IDENTITY,
        troupe_asgn_node(x), "bi=>b");
}

enum { SX_B = 4, SX_C = 5 };

/* Softmax cross-entropy of logits[b,c] against one-hot targets onehot[b,c]:
 *   forward:  m = max_c logits; z = logits - m; e = exp z; s = sum_c e; lse = log s;
 *             picked = sum_c onehot * z (the label's z, gathered by the one-hot);
 *             nll = lse - picked; loss = sum_b nll / bsz (bsz = B, a constant scalar node);
 *   backward: p = e / s; d = p - onehot; g = d / bsz (the gradient of loss w.r.t. logits). */
static void build_softmax_xent(pcase_t *c, troupe_prec_t prec, bool backward)
{
    troupe_tnode_t *logits = pc_node(c, "logits", prec, 2, SX_B, SX_C);
    troupe_tnode_t *onehot = pc_node(c, "onehot", prec, 2, SX_B, SX_C);
    troupe_tnode_t *bsz = pc_node(c, "bsz", prec, 0, 0, 0);
    troupe_tnode_t *m = pc_node(c, "m", prec, 1, SX_B, 0);
    troupe_tnode_t *z = pc_node(c, "z", prec, 2, SX_B, SX_C);
    troupe_tnode_t *e = pc_node(c, "e", prec, 2, SX_B, SX_C);
    troupe_tnode_t *s = pc_node(c, "s", prec, 1, SX_B, 0);
    troupe_tnode_t *lse = pc_node(c, "lse", prec, 1, SX_B, 0);
    troupe_tnode_t *picked = pc_node(c, "picked", prec, 1, SX_B, 0);
    troupe_tnode_t *nll = pc_node(c, "nll", prec, 1, SX_B, 0);
    troupe_tnode_t *loss = pc_node(c, "loss", prec, 0, 0, 0);
    size_t from = c->nitems;
    ASG(c, troupe_asgn_fetch_constant, bsz, (double)SX_B);
    ASG(c, troupe_asgn_accum_unop, true, TROUPE_BINOP_MAX, m, TROUPE_UNOP_IDENTITY,
        troupe_asgn_node(logits), "bc=>b");
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ARG2, z, TROUPE_BINOP_SUB,
        troupe_asgn_node(logits), troupe_asgn_node(m), "bc,b=>bc");
    ASG(c, troupe_asgn_accum_unop, true, TROUPE_BINOP_ARG2, e, TROUPE_UNOP_EXP,
        troupe_asgn_node(z), "bc=>bc");
    ASG(c, troupe_asgn_accum_unop, true, TROUPE_BINOP_ADD, s, TROUPE_UNOP_IDENTITY,
        troupe_asgn_node(e), "bc=>b");
    ASG(c, troupe_asgn_accum_unop, true, TROUPE_BINOP_ARG2, lse, TROUPE_UNOP_LOG,
        troupe_asgn_node(s), "b=>b");
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ADD, picked, TROUPE_BINOP_MUL,
        troupe_asgn_node(onehot), troupe_asgn_node(z), "bc,bc=>b");
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ARG2, nll, TROUPE_BINOP_SUB,
        troupe_asgn_node(lse), troupe_asgn_node(picked), "b,b=>b");
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ADD, loss, TROUPE_BINOP_DIV,
        troupe_asgn_node(nll), troupe_asgn_node(bsz), "b,=>");
    pc_block(c, from, "softmax cross-entropy forward");
    if (!backward)
        return;
    troupe_tnode_t *p = pc_node(c, "p", prec, 2, SX_B, SX_C);
    troupe_tnode_t *d = pc_node(c, "d", prec, 2, SX_B, SX_C);
    troupe_tnode_t *g = pc_node(c, "g", prec, 2, SX_B, SX_C);
    from = c->nitems;
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ARG2, p, TROUPE_BINOP_DIV,
        troupe_asgn_node(e), troupe_asgn_node(s), "bc,b=>bc");
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ARG2, d, TROUPE_BINOP_SUB,
        troupe_asgn_node(p), troupe_asgn_node(onehot), "bc,bc=>bc");
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ARG2, g, TROUPE_BINOP_DIV,
        troupe_asgn_node(d), troupe_asgn_node(bsz), "bc,=>bc");
    pc_block(c, from, "softmax cross-entropy backward");
}

enum { BR_B = 4, BR_J = 5 };

/* h[b,j] = x[b,j] + bias[j] (single); y[b,j] = relu(h[b,j]) in precision out_prec. */
static void build_bias_relu(pcase_t *c, troupe_prec_t out_prec)
{
    troupe_tnode_t *x = pc_node(c, "x", TROUPE_PREC_SINGLE, 2, BR_B, BR_J);
    troupe_tnode_t *bias = pc_node(c, "bias", TROUPE_PREC_SINGLE, 1, BR_J, 0);
    troupe_tnode_t *h = pc_node(c, "h", TROUPE_PREC_SINGLE, 2, BR_B, BR_J);
    troupe_tnode_t *y = pc_node(c, "y", out_prec, 2, BR_B, BR_J);
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ARG2, h, TROUPE_BINOP_ADD,
        troupe_asgn_node(x), troupe_asgn_node(bias), "bj,j=>bj");
    ASG(c, troupe_asgn_accum_unop, true, TROUPE_BINOP_ARG2, y, TROUPE_UNOP_RELU,
        troupe_asgn_node(h), "bj=>bj");
}

/* bias+relu into `prec`, plus mm[b,j] = sum_i a[b,i] * w[i,j] with a and mm in `prec` (the
 * accumulation reads back the rounded value) and w single. */
static void build_narrow(pcase_t *c, troupe_prec_t prec)
{
    build_bias_relu(c, prec);
    troupe_tnode_t *a = pc_node(c, "a", prec, 2, MM_B, MM_I);
    troupe_tnode_t *w = pc_node(c, "w", TROUPE_PREC_SINGLE, 2, MM_I, MM_J);
    troupe_tnode_t *mm = pc_node(c, "mm", prec, 2, MM_B, MM_J);
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ADD, mm, TROUPE_BINOP_MUL,
        troupe_asgn_node(a), troupe_asgn_node(w), "bi,ij=>bj");
}

enum { AC_B = 4, AC_I = 6 };

/* For every assign op (troupe_is_assign_op): acc_<op>_n[b] =op x[b,i] reduced over i starting
 * from the op's neutral element (initialize_neutral), and acc_<op>[b] =op x[b,i] accumulating
 * into the incoming values. */
static void build_accum_all(pcase_t *c, troupe_prec_t prec)
{
    troupe_tnode_t *x = pc_node(c, "x", prec, 2, AC_B, AC_I);
    for (int op = 0; op < TROUPE_BINOP_COUNT; op++) {
        if (!troupe_is_assign_op((troupe_binop_t)op))
            continue;
        for (int init = 1; init >= 0; init--) {
            char label[64];
            snprintf(label, sizeof label, "acc_%s%s", troupe_binop_name((troupe_binop_t)op),
                     init ? "_n" : "");
            troupe_tnode_t *acc = pc_node(c, label, prec, 1, AC_B, 0);
            ASG(c, troupe_asgn_accum_unop, init != 0, (troupe_binop_t)op, acc,
                TROUPE_UNOP_IDENTITY, troupe_asgn_node(x), "bi=>b");
        }
    }
}

enum { UN_N = 64 };

/* ye = exp x, yl = log x, yt = tanh x, pointwise. */
static void build_unary(pcase_t *c, troupe_prec_t prec)
{
    troupe_tnode_t *x = pc_node(c, "x", prec, 1, UN_N, 0);
    troupe_tnode_t *ye = pc_node(c, "ye", prec, 1, UN_N, 0);
    troupe_tnode_t *yl = pc_node(c, "yl", prec, 1, UN_N, 0);
    troupe_tnode_t *yt = pc_node(c, "yt", prec, 1, UN_N, 0);
    ASG(c, troupe_asgn_accum_unop, true, TROUPE_BINOP_ARG2, ye, TROUPE_UNOP_EXP,
        troupe_asgn_node(x), "i=>i");
    ASG(c, troupe_asgn_accum_unop, true, TROUPE_BINOP_ARG2, yl, TROUPE_UNOP_LOG,
        troupe_asgn_node(x), "i=>i");
    ASG(c, troupe_asgn_accum_unop, true, TROUPE_BINOP_ARG2, yt, TROUPE_UNOP_TANH_APPROX,
        troupe_asgn_node(x), "i=>i");
}

enum { UF_N = 1024 };
static const int64_t k_uniform_key = 0x0123456789abcdefLL;

/* Threefry-based initialisation: key (uint4x32 scalar) := constant bits; ctr[i] := i (uint32,
 * range over offsets); bits[i] := threefry4x32_crypto(key, ctr[i]); then
 *   u  (single, 4 per counter) := uint4x32_to_prec_uniform(bits)   (SET_VEC_UNOP)
 *   uh (half,   8 per counter) := uint4x32_to_prec_uniform(bits)   (SET_VEC_UNOP)
 *   u1 (single, 1 per counter) := uint4x32_to_prec_uniform1(bits)  (pointwise). */
static void build_uniform(pcase_t *c)
{
    troupe_tnode_t *key = pc_node(c, "key", TROUPE_PREC_UINT4X32, 0, 0, 0);
    troupe_tnode_t *ctr = pc_node(c, "ctr", TROUPE_PREC_UINT32, 1, UF_N, 0);
    troupe_tnode_t *bits = pc_node(c, "bits", TROUPE_PREC_UINT4X32, 1, UF_N, 0);
    troupe_tnode_t *u = pc_node(c, "u", TROUPE_PREC_SINGLE, 1, 4 * UF_N, 0);
    troupe_tnode_t *uh = pc_node(c, "uh", TROUPE_PREC_HALF, 1, 8 * UF_N, 0);
    troupe_tnode_t *u1 = pc_node(c, "u1", TROUPE_PREC_SINGLE, 1, UF_N, 0);
    ASG(c, troupe_asgn_fetch_constant_bits, key, k_uniform_key);
    ASG(c, troupe_asgn_fetch_range_over_offsets, ctr);
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ARG2, bits,
        TROUPE_BINOP_THREEFRY4X32_CRYPTO, troupe_asgn_node(key), troupe_asgn_node(ctr), ",i=>i");
    ASG(c, troupe_asgn_set_vec_unop, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM, u,
        troupe_asgn_node(bits), "i=>i");
    ASG(c, troupe_asgn_set_vec_unop, TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM, uh,
        troupe_asgn_node(bits), "i=>i");
    ASG(c, troupe_asgn_accum_unop, true, TROUPE_BINOP_ARG2, u1,
        TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1, troupe_asgn_node(bits), "i=>i");
}

enum { VT_B = 3, VT_J = 5 };

/* tmp[b,j] = x[b,j] - bias[j]; y[b,j] = tmp[b,j] * scale[b,j]: tmp is read once per cell. */
static void build_virt(pcase_t *c)
{
    troupe_tnode_t *x = pc_node(c, "x", TROUPE_PREC_SINGLE, 2, VT_B, VT_J);
    troupe_tnode_t *bias = pc_node(c, "bias", TROUPE_PREC_SINGLE, 1, VT_J, 0);
    troupe_tnode_t *scale = pc_node(c, "scale", TROUPE_PREC_SINGLE, 2, VT_B, VT_J);
    troupe_tnode_t *tmp = pc_node(c, "tmp", TROUPE_PREC_SINGLE, 2, VT_B, VT_J);
    troupe_tnode_t *y = pc_node(c, "y", TROUPE_PREC_SINGLE, 2, VT_B, VT_J);
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ARG2, tmp, TROUPE_BINOP_SUB,
        troupe_asgn_node(x), troupe_asgn_node(bias), "bj,j=>bj");
    ASG(c, troupe_asgn_accum_binop, true, TROUPE_BINOP_ARG2, y, TROUPE_BINOP_MUL,
        troupe_asgn_node(tmp), troupe_asgn_node(scale), "bj,bj=>bj");
}

/* Every case of this file, with its fixed node-id range (distinct, so that all cases can live
 * in one process). */
typedef enum case_kind {
    K_MATMUL,
    K_ROWSUM,
    K_SOFTMAX_FWD,
    K_SOFTMAX,
    K_BIAS_RELU,
    K_NARROW,
    K_ACCUM,
    K_UNARY,
    K_UNIFORM,
    K_VIRT,
} case_kind_t;

typedef struct case_spec {
    const char *name;
    int32_t id_base;
    case_kind_t kind;
    troupe_prec_t prec;
} case_spec_t;

static const case_spec_t k_cases[] = {
    {"matmul_single", 9001, K_MATMUL, TROUPE_PREC_SINGLE},
    {"matmul_double", 9011, K_MATMUL, TROUPE_PREC_DOUBLE},
    {"rowsum_single", 9021, K_ROWSUM, TROUPE_PREC_SINGLE},
    {"softmax_xent_fwd_single", 9031, K_SOFTMAX_FWD, TROUPE_PREC_SINGLE},
    {"softmax_xent_single", 9051, K_SOFTMAX, TROUPE_PREC_SINGLE},
    {"softmax_xent_double", 9071, K_SOFTMAX, TROUPE_PREC_DOUBLE},
    {"bias_relu_single", 9101, K_BIAS_RELU, TROUPE_PREC_SINGLE},
    {"narrow_half", 9501, K_NARROW, TROUPE_PREC_HALF},
    {"narrow_bfloat16", 9521, K_NARROW, TROUPE_PREC_BFLOAT16},
    {"narrow_fp8", 9541, K_NARROW, TROUPE_PREC_FP8},
    {"accum_single", 9201, K_ACCUM, TROUPE_PREC_SINGLE},
    {"accum_double", 9301, K_ACCUM, TROUPE_PREC_DOUBLE},
    {"unary_single", 9401, K_UNARY, TROUPE_PREC_SINGLE},
    {"uniform_init", 9601, K_UNIFORM, TROUPE_PREC_SINGLE},
    {"virt", 9701, K_VIRT, TROUPE_PREC_SINGLE},
};
#define N_CASES (sizeof k_cases / sizeof k_cases[0])

static const case_spec_t *case_find(const char *name)
{
    for (size_t i = 0; i < N_CASES; i++)
        if (strcmp(k_cases[i].name, name) == 0)
            return &k_cases[i];
    cr_assert_fail("no case %s", name);
    return NULL;
}

/* Builds the named case's comp and lowers it (c->proc, unoptimised). */
static void case_build(pcase_t *c, const char *name)
{
    const case_spec_t *s = case_find(name);
    pc_init(c, s->name, s->id_base);
    switch (s->kind) {
    case K_MATMUL:
        build_matmul(c, s->prec);
        break;
    case K_ROWSUM:
        build_rowsum(c, s->prec);
        break;
    case K_SOFTMAX_FWD:
        build_softmax_xent(c, s->prec, false);
        break;
    case K_SOFTMAX:
        build_softmax_xent(c, s->prec, true);
        break;
    case K_BIAS_RELU:
        build_bias_relu(c, s->prec);
        break;
    case K_NARROW:
        build_narrow(c, s->prec);
        break;
    case K_ACCUM:
        build_accum_all(c, s->prec);
        break;
    case K_UNARY:
        build_unary(c, s->prec);
        break;
    case K_UNIFORM:
        build_uniform(c);
        break;
    case K_VIRT:
        build_virt(c);
        break;
    }
    pc_lower(c);
}

/* ---- numeric helpers ---------------------------------------------------------------------------- */

/* got is within rel * max(1, |want|) of want; NaN matches NaN, infinities match exactly. */
static bool close_to(double got, double want, double rel)
{
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return got == want;
    return fabs(got - want) <= rel * fmax(1.0, fabs(want));
}

/* Compiles the optimised case, runs it on `b` and checks it against the interpreter. */
static void case_run(pcase_t *c, irt_binds_t *b, irt_lib_t *lib)
{
    irt_lib_open(c->proc, NULL, lib);
    irt_run_and_compare(c->proc, lib, b);
}

/* ---- 1. golden text of lowered procedures ---------------------------------------------------- */

static void golden_case(const char *case_name, const char *golden_name)
{
    pcase_t c;
    case_build(&c, case_name);
    char *text = irt_roundtrip_proc(c.proc, true);
    irt_golden_check(golden_name, text);
    troupe_free(text);
    pc_free(&c);
}

Test(golden, lowering_matmul)
{
    golden_case("matmul_single", "lower_matmul");
}

Test(golden, lowering_rowsum)
{
    golden_case("rowsum_single", "lower_rowsum");
}

Test(golden, lowering_softmax_xent_forward)
{
    golden_case("softmax_xent_fwd_single", "lower_softmax_xent_forward");
}

/* ---- 2. compiled C vs interpreter --------------------------------------------------------------- */

static void matmul_case(const char *name, double rel_tol)
{
    pcase_t c;
    irt_lib_t lib;
    irt_binds_t b = {0};
    case_build(&c, name);
    pc_optimize(&c);
    troupe_tnode_t *x = pc_get(&c, "x"), *w = pc_get(&c, "w"), *y = pc_get(&c, "y");
    irt_fill_uniform(&b, x, -2.0, 2.0);
    irt_fill_uniform(&b, w, -2.0, 2.0);
    irt_fill_uniform(&b, y, 50.0, 60.0); /* overwritten: initialize_neutral */
    case_run(&c, &b, &lib);
    for (int i = 0; i < MM_B; i++)
        for (int j = 0; j < MM_J; j++) {
            double want = 0.0, mag = 0.0;
            for (int k = 0; k < MM_I; k++) {
                double p = irt_value(&b, x, i * MM_I + k) * irt_value(&b, w, k * MM_J + j);
                want += p;
                mag += fabs(p);
            }
            double got = irt_value(&b, y, i * MM_J + j);
            cr_expect_leq(fabs(got - want), rel_tol * mag, "%s y[%d,%d] = %.17g, want %.17g",
                          name, i, j, got, want);
        }
    irt_lib_close(&lib);
    irt_binds_free(&b);
    pc_free(&c);
}

Test(pipeline, matmul)
{
    matmul_case("matmul_single", 1e-6);
    matmul_case("matmul_double", 1e-15);
}

Test(pipeline, bias_relu)
{
    pcase_t c;
    irt_lib_t lib;
    irt_binds_t b = {0};
    case_build(&c, "bias_relu_single");
    pc_optimize(&c);
    troupe_tnode_t *x = pc_get(&c, "x"), *bias = pc_get(&c, "bias"), *y = pc_get(&c, "y");
    irt_fill_uniform(&b, x, -2.0, 2.0);
    irt_fill_uniform(&b, bias, -1.0, 1.0);
    case_run(&c, &b, &lib);
    const float *xv = irt_binds_get(&b, x), *bv = irt_binds_get(&b, bias),
                *yv = irt_binds_get(&b, y);
    int positives = 0;
    for (int i = 0; i < BR_B; i++)
        for (int j = 0; j < BR_J; j++) {
            float h = xv[i * BR_J + j] + bv[j];
            float want = h > 0.0f ? h : 0.0f;
            positives += h > 0.0f;
            cr_expect_eq(yv[i * BR_J + j], want, "y[%d,%d] = %.9g, want %.9g", i, j,
                         yv[i * BR_J + j], want);
        }
    cr_expect(positives > 0 && positives < BR_B * BR_J, "inputs exercise both relu branches");
    irt_lib_close(&lib);
    irt_binds_free(&b);
    pc_free(&c);
}

static void accum_case(const char *name)
{
    pcase_t c;
    irt_lib_t lib;
    irt_binds_t b = {0};
    case_build(&c, name);
    pc_optimize(&c);
    troupe_tnode_t *x = pc_get(&c, "x");
    troupe_prec_t prec = x->prec;
    /* Values in [0.25, 1.75) with some exact zeros (for or/and, the gates and div). */
    irt_fill_uniform(&b, x, 0.25, 1.75);
    for (int k = 3; k < AC_B * AC_I; k += 7)
        troupe_prec_store_double(prec, (char *)irt_binds_get(&b, x) + k * troupe_prec_size_bytes(prec),
                                 0.0);
    for (int op = 0; op < TROUPE_BINOP_COUNT; op++) {
        if (!troupe_is_assign_op((troupe_binop_t)op))
            continue;
        char label[64];
        snprintf(label, sizeof label, "acc_%s", troupe_binop_name((troupe_binop_t)op));
        irt_fill_uniform(&b, pc_get(&c, label), 0.25, 1.75);
        strcat(label, "_n");
        irt_fill_uniform(&b, pc_get(&c, label), 50.0, 60.0); /* overwritten by the neutral */
    }
    irt_binds_t before;
    irt_binds_copy(&before, &b, NULL, NULL);
    case_run(&c, &b, &lib);
    int checked = 0;
    for (int op = 0; op < TROUPE_BINOP_COUNT; op++) {
        if (!troupe_is_assign_op((troupe_binop_t)op))
            continue;
        double neutral = 0.0;
        cr_assert_eq(troupe_binop_neutral((troupe_binop_t)op, &neutral), TROUPE_OK);
        for (int init = 0; init <= 1; init++) {
            char label[64];
            snprintf(label, sizeof label, "acc_%s%s", troupe_binop_name((troupe_binop_t)op),
                     init ? "_n" : "");
            troupe_tnode_t *acc = pc_get(&c, label);
            for (int r = 0; r < AC_B; r++) {
                double want = init ? neutral : irt_value(&before, acc, r);
                for (int i = 0; i < AC_I; i++) {
                    want = troupe_interpret_binop((troupe_binop_t)op, want,
                                                  irt_value(&b, x, r * AC_I + i));
                    if (prec == TROUPE_PREC_SINGLE)
                        want = (double)(float)want;
                }
                double got = irt_value(&b, acc, r);
                /* Exact but for pow: powf vs the rounded double pow, compounded over 6 steps. */
                double tol = op == TROUPE_BINOP_TO_POW_OF && prec == TROUPE_PREC_SINGLE ? 1e-5 : 0.0;
                cr_expect(close_to(got, want, tol), "%s %s[%d] = %.17g, want %.17g", name, label,
                          r, got, want);
                checked++;
            }
        }
    }
    cr_expect_eq(checked, 12 * 2 * AC_B, "12 assign ops, with and without initialisation");
    irt_lib_close(&lib);
    irt_binds_free(&before);
    irt_binds_free(&b);
    pc_free(&c);
}

Test(pipeline, every_accumulate_op)
{
    accum_case("accum_single");
    accum_case("accum_double");
}

Test(pipeline, exp_log_tanh)
{
    pcase_t c;
    irt_lib_t lib;
    irt_binds_t b = {0};
    case_build(&c, "unary_single");
    pc_optimize(&c);
    troupe_tnode_t *x = pc_get(&c, "x");
    irt_fill_uniform(&b, x, 0.001, 20.0);
    float *xv = irt_binds_get(&b, x);
    xv[0] = 1.0f;
    xv[1] = 0.0f; /* log 0 = -inf */
    xv[2] = -0.5f; /* log of a negative: NaN */
    case_run(&c, &b, &lib);
    const float *ye = irt_binds_get(&b, pc_get(&c, "ye")), *yl = irt_binds_get(&b, pc_get(&c, "yl")),
                *yt = irt_binds_get(&b, pc_get(&c, "yt"));
    for (int i = 0; i < UN_N; i++) {
        cr_expect(close_to(ye[i], exp(xv[i]), 1e-6), "exp(%.9g) = %.9g", xv[i], ye[i]);
        cr_expect(close_to(yl[i], log(xv[i]), 1e-6), "log(%.9g) = %.9g", xv[i], yl[i]);
        cr_expect(close_to(yt[i], tanh(xv[i]), 1e-6), "tanh(%.9g) = %.9g", xv[i], yt[i]);
    }
    cr_expect(isinf(yl[1]) && yl[1] < 0);
    cr_expect(isnan(yl[2]));
    irt_lib_close(&lib);
    irt_binds_free(&b);
    pc_free(&c);
}

/* Reference softmax cross-entropy in double: *loss and grad[b*C+c]. */
static void softmax_reference(const irt_binds_t *b, const pcase_t *c, double *loss, double *grad)
{
    troupe_tnode_t *logits = pc_get(c, "logits"), *onehot = pc_get(c, "onehot");
    *loss = 0.0;
    for (int i = 0; i < SX_B; i++) {
        double m = -INFINITY, s = 0.0, picked = 0.0;
        for (int k = 0; k < SX_C; k++)
            m = fmax(m, irt_value(b, logits, i * SX_C + k));
        for (int k = 0; k < SX_C; k++)
            s += exp(irt_value(b, logits, i * SX_C + k) - m);
        for (int k = 0; k < SX_C; k++)
            picked += irt_value(b, onehot, i * SX_C + k) * (irt_value(b, logits, i * SX_C + k) - m);
        *loss += (log(s) - picked) / SX_B;
        for (int k = 0; k < SX_C; k++)
            grad[i * SX_C + k] = (exp(irt_value(b, logits, i * SX_C + k) - m) / s -
                                  irt_value(b, onehot, i * SX_C + k)) /
                                 SX_B;
    }
}

/* Random logits in [-3, 3) and one-hot rows of random labels. */
static void softmax_inputs(irt_binds_t *b, const pcase_t *c)
{
    troupe_tnode_t *logits = pc_get(c, "logits"), *onehot = pc_get(c, "onehot");
    irt_fill_uniform(b, logits, -3.0, 3.0);
    char *oh = irt_binds_ensure(b, onehot);
    size_t es = troupe_prec_size_bytes(onehot->prec);
    for (int i = 0; i < SX_B; i++) {
        int label = (int)(irt_rnd32() % SX_C);
        for (int k = 0; k < SX_C; k++)
            troupe_prec_store_double(onehot->prec, oh + (size_t)(i * SX_C + k) * es,
                                     k == label ? 1.0 : 0.0);
    }
}

Test(pipeline, softmax_xent_forward_backward)
{
    double want_loss, want_grad[SX_B * SX_C];

    /* Single precision: bit-exact against the interpreter, close to the double reference. */
    pcase_t c;
    irt_lib_t lib;
    irt_binds_t b = {0};
    case_build(&c, "softmax_xent_single");
    pc_optimize(&c);
    softmax_inputs(&b, &c);
    case_run(&c, &b, &lib);
    softmax_reference(&b, &c, &want_loss, want_grad);
    troupe_tnode_t *loss = pc_get(&c, "loss"), *g = pc_get(&c, "g");
    cr_expect(close_to(irt_value(&b, loss, 0), want_loss, 1e-5), "single loss %.9g, want %.9g",
              irt_value(&b, loss, 0), want_loss);
    for (int k = 0; k < SX_B * SX_C; k++)
        cr_expect_leq(fabs(irt_value(&b, g, k) - want_grad[k]), 1e-6, "single g[%d] = %.9g, want %.9g",
                      k, irt_value(&b, g, k), want_grad[k]);
    irt_lib_close(&lib);
    irt_binds_free(&b);
    pc_free(&c);

    /* Double precision: bit-exact against the interpreter, equal to the reference up to
     * rounding, and the gradient matches central differences of the compiled forward loss. */
    case_build(&c, "softmax_xent_double");
    pc_optimize(&c);
    softmax_inputs(&b, &c);
    case_run(&c, &b, &lib);
    softmax_reference(&b, &c, &want_loss, want_grad);
    loss = pc_get(&c, "loss");
    g = pc_get(&c, "g");
    double *lv = irt_binds_get(&b, pc_get(&c, "logits"));
    const double *gv = irt_binds_get(&b, g), *lossv = irt_binds_get(&b, loss);
    cr_expect(close_to(lossv[0], want_loss, 1e-14), "double loss %.17g, want %.17g", lossv[0],
              want_loss);
    double grad[SX_B * SX_C];
    memcpy(grad, gv, sizeof grad);
    for (int k = 0; k < SX_B * SX_C; k++)
        cr_expect_leq(fabs(grad[k] - want_grad[k]), 1e-14, "double g[%d] = %.17g, want %.17g", k,
                      grad[k], want_grad[k]);
    const double h = 1e-5;
    double worst = 0.0;
    for (int k = 0; k < SX_B * SX_C; k++) {
        double x0 = lv[k];
        lv[k] = x0 + h;
        irt_call(&lib, &b);
        double lp = lossv[0];
        lv[k] = x0 - h;
        irt_call(&lib, &b);
        double lm = lossv[0];
        lv[k] = x0;
        double fd = (lp - lm) / (2.0 * h);
        double rel = fabs(grad[k] - fd) / fmax(fabs(grad[k]), fabs(fd));
        worst = fmax(worst, rel);
        cr_expect_lt(rel, 1e-6, "dloss/dlogits[%d] = %.17g, central difference %.17g (rel %.3g)",
                     k, grad[k], fd, rel);
    }
    cr_log_info("softmax cross-entropy: worst relative gradient error vs finite differences %.3g",
                worst);
    irt_lib_close(&lib);
    irt_binds_free(&b);
    pc_free(&c);
}

static void narrow_case(const char *name)
{
    pcase_t c;
    irt_lib_t lib;
    irt_binds_t b = {0};
    case_build(&c, name);
    pc_optimize(&c);
    troupe_tnode_t *x = pc_get(&c, "x"), *bias = pc_get(&c, "bias"), *y = pc_get(&c, "y");
    troupe_tnode_t *a = pc_get(&c, "a"), *w = pc_get(&c, "w"), *mm = pc_get(&c, "mm");
    troupe_prec_t prec = y->prec;
    irt_fill_uniform(&b, x, -3.0, 3.0);
    irt_fill_uniform(&b, bias, -1.0, 1.0);
    irt_fill_uniform(&b, a, -2.0, 2.0);
    irt_fill_uniform(&b, w, -2.0, 2.0);
    /* h = 1 + 2^-11 (a tie for half: rounds to even, 1.0) and a value that overflows every
     * narrow format (3.4e38 rounds up to 2^128 in bfloat16). */
    float *xv = irt_binds_get(&b, x), *bv = irt_binds_get(&b, bias);
    bv[0] = 0.0f;
    xv[0] = 1.0f + 0x1p-11f;
    xv[1] = 3.4e38f;
    case_run(&c, &b, &lib);
    for (int i = 0; i < BR_B; i++)
        for (int j = 0; j < BR_J; j++) {
            float h = xv[i * BR_J + j] + bv[j];
            unsigned char enc[2] = {0, 0};
            troupe_prec_store_double(prec, enc, (double)(h > 0.0f ? h : 0.0f));
            double want = troupe_prec_load_double(prec, enc);
            double got = irt_value(&b, y, i * BR_J + j);
            cr_expect(got == want, "%s y[%d,%d] = %.9g, want %.9g", name, i, j, got, want);
        }
    cr_expect(isinf(irt_value(&b, y, 1)), "%s: overflow gives infinity", name);
    double rel = prec == TROUPE_PREC_HALF ? 4e-3 : prec == TROUPE_PREC_BFLOAT16 ? 3e-2 : 0.3;
    for (int i = 0; i < MM_B; i++)
        for (int j = 0; j < MM_J; j++) {
            double want = 0.0, mag = 0.0;
            for (int k = 0; k < MM_I; k++) {
                double p = irt_value(&b, a, i * MM_I + k) * irt_value(&b, w, k * MM_J + j);
                want += p;
                mag += fabs(p);
            }
            double got = irt_value(&b, mm, i * MM_J + j);
            cr_expect_leq(fabs(got - want), rel * mag, "%s mm[%d,%d] = %.9g, want %.9g", name, i,
                          j, got, want);
        }
    irt_lib_close(&lib);
    irt_binds_free(&b);
    pc_free(&c);
}

Test(pipeline, half_bfloat16_fp8_outputs)
{
    narrow_case("narrow_half");
    narrow_case("narrow_bfloat16");
    narrow_case("narrow_fp8");
}

/* Values of a [0, 1) uniform node: all in range, mean within `tol` of 0.5. */
static void check_uniform_values(const irt_binds_t *b, const troupe_tnode_t *tn, int64_t n,
                                 double tol)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = irt_value(b, tn, i);
        cr_assert(v >= 0.0 && v < 1.0, "node #%d value %lld = %.17g outside [0, 1)", tn->id,
                  (long long)i, v);
        sum += v;
    }
    double mean = sum / (double)n;
    cr_expect_lt(fabs(mean - 0.5), tol, "node #%d: mean of %lld values %.6f", tn->id,
                 (long long)n, mean);
}

Test(pipeline, threefry_uniform_init)
{
    pcase_t c;
    irt_lib_t lib;
    irt_binds_t b = {0};
    case_build(&c, "uniform_init");
    pc_optimize(&c);
    case_run(&c, &b, &lib);
    troupe_tnode_t *u = pc_get(&c, "u"), *uh = pc_get(&c, "uh"), *u1 = pc_get(&c, "u1");
    /* 4096 single values: the mean's standard deviation is 0.289/64 = 0.0045. */
    check_uniform_values(&b, u, 4 * UF_N, 0.02);
    check_uniform_values(&b, uh, 8 * UF_N, 0.02);
    check_uniform_values(&b, u1, UF_N, 0.04);
    /* Bit-exact against the host Threefry and conversions: key {lo, hi, 0, 0}, counter i
     * spread as a uint32. */
    const troupe_uint4x32_t key = {{(uint32_t)k_uniform_key, (uint32_t)((uint64_t)k_uniform_key >> 32), 0, 0}};
    const float *uv = irt_binds_get(&b, u), *u1v = irt_binds_get(&b, u1);
    const uint16_t *uhv = irt_binds_get(&b, uh);
    for (uint32_t i = 0; i < UF_N; i++) {
        troupe_uint4x32_t ctr, x;
        float want4[4], want1;
        uint16_t want8[8];
        size_t cnt = 0;
        cr_assert_eq(troupe_prec_bits_to_uint4x32(TROUPE_PREC_UINT32, &i, &ctr), TROUPE_OK);
        x = troupe_threefry4x32_crypto(key, ctr);
        cr_assert_eq(troupe_uint4x32_to_prec_uniform(TROUPE_PREC_SINGLE, x, want4, &cnt), TROUPE_OK);
        cr_assert_eq(cnt, 4);
        cr_assert_eq(troupe_uint4x32_to_prec_uniform(TROUPE_PREC_HALF, x, want8, &cnt), TROUPE_OK);
        cr_assert_eq(cnt, 8);
        cr_assert_eq(troupe_uint4x32_to_prec_uniform1(TROUPE_PREC_SINGLE, x, &want1), TROUPE_OK);
        cr_expect(memcmp(uv + 4 * i, want4, sizeof want4) == 0, "u at counter %u", i);
        cr_expect(memcmp(uhv + 8 * i, want8, sizeof want8) == 0, "uh at counter %u", i);
        cr_expect(memcmp(&u1v[i], &want1, sizeof want1) == 0, "u1 at counter %u: %.9g vs %.9g", i,
                  u1v[i], want1);
    }
    irt_lib_close(&lib);
    irt_binds_free(&b);
    pc_free(&c);
}

/* ---- 3. virtualisation ------------------------------------------------------------------------- */

Test(virtualize, intermediate_used_once_is_inlined)
{
    pcase_t c;
    irt_lib_t lib;
    irt_binds_t unopt = {0}, b;
    case_build(&c, "virt");
    troupe_tnode_t *x = pc_get(&c, "x"), *bias = pc_get(&c, "bias"), *scale = pc_get(&c, "scale");
    troupe_tnode_t *tmp = pc_get(&c, "tmp"), *y = pc_get(&c, "y");
    irt_fill_uniform(&unopt, x, -2.0, 2.0);
    irt_fill_uniform(&unopt, bias, -1.0, 1.0);
    irt_fill_uniform(&unopt, scale, -3.0, 3.0);
    irt_binds_copy(&b, &unopt, NULL, NULL); /* the inputs only */
    irt_binds_ensure(&unopt, tmp);
    irt_binds_ensure(&unopt, y);
    irt_interp(c.proc, &unopt); /* the unoptimised procedure materialises tmp */

    pc_optimize(&c);
    troupe_memory_mode_t mode;
    int32_t prov = 0;
    cr_assert(troupe_tnode_get_memory_mode(tmp, &mode, &prov), "tmp has a memory mode");
    cr_expect_eq(mode.kind, TROUPE_MM_VIRTUAL, "tmp: mode kind %d (provenance %d)", (int)mode.kind,
                 prov);
    cr_expect(troupe_tnode_get_memory_mode(y, &mode, &prov) && mode.kind != TROUPE_MM_VIRTUAL &&
                  mode.kind != TROUPE_MM_LOCAL,
              "y is a result and stays materialized");

    /* No statement writes tmp and nothing reads it: it only names a local scope. */
    char *text = irt_roundtrip_proc(c.proc, true);
    char pat[64];
    snprintf(pat, sizeof pat, "(set %d ", tmp->id);
    cr_expect_null(strstr(text, pat), "%s still set:\n%s", pat, text);
    snprintf(pat, sizeof pat, "(get %d ", tmp->id);
    cr_expect_null(strstr(text, pat), "%s still read:\n%s", pat, text);
    snprintf(pat, sizeof pat, "(zero_out %d)", tmp->id);
    cr_expect_null(strstr(text, pat), "%s:\n%s", pat, text);
    /* Its definition is recomputed where it was read: as a local scope of tmp, or, once the
     * simplifier has dropped a scope that only sets its value, as the expression itself. */
    int scopes_of_tmp = 0;
    for (const char *q = strstr(text, "(local_scope "); q != NULL;
         q = strstr(q + 1, "(local_scope ")) {
        int scope_id = -1, node_id = -1;
        if (sscanf(q, "(local_scope %d %d", &scope_id, &node_id) == 2 && node_id == tmp->id)
            scopes_of_tmp++;
    }
    snprintf(pat, sizeof pat, "(sub (get %d ", x->id);
    cr_expect(scopes_of_tmp >= 1 || strstr(text, pat) != NULL,
              "tmp's definition inlined into y:\n%s", text);
    troupe_free(text);

    irt_lib_open(c.proc, NULL, &lib);
    char ident[96];
    troupe_cgen_node_ident(tmp, ident, sizeof ident);
    cr_expect_lt(troupe_cgen_find_node_param(lib.res, tmp), 0, "tmp is not a parameter");
    cr_expect_null(strstr(lib.res->source, ident), "generated C mentions %s:\n%s", ident,
                   lib.res->source);
    cr_expect_eq(lib.res->nparams, 4, "x, bias, scale, y");
    irt_run_and_compare(c.proc, &lib, &b);
    irt_expect_same_bytes("optimised compiled run vs unoptimised interpreter", y, &b, &unopt);
    irt_lib_close(&lib);
    irt_binds_free(&b);
    irt_binds_free(&unopt);
    pc_free(&c);
}

/* ---- 4. text round trips ------------------------------------------------------------------------ */

/* case_build round-trips the comp and the lowered procedure, pc_optimize the optimised one;
 * this test names the property and covers every case of the file. */
Test(text, every_tree_round_trips)
{
    for (size_t i = 0; i < N_CASES; i++) {
        pcase_t c;
        case_build(&c, k_cases[i].name);
        irt_roundtrip_comp(c.comp, false);
        irt_roundtrip_proc(c.proc, false);
        pc_optimize(&c);
        irt_roundtrip_proc(c.proc, false);
        pc_free(&c);
    }
}

/* ---- 5. CUDA dialect through NVRTC -------------------------------------------------------------- */

Test(cuda, optimized_procs_compile_with_nvrtc)
{
#if !TROUPE_HAVE_CUDA
    cr_skip_test("built without the CUDA toolkit (TROUPE_HAVE_CUDA is 0)");
#else
    for (size_t i = 0; i < N_CASES; i++) {
        pcase_t c;
        case_build(&c, k_cases[i].name);
        pc_optimize(&c);
        cr_assert(irt_nvrtc_check(c.proc));
        pc_free(&c);
    }
#endif
}
