/* troupe — reverse-mode differentiation of an assignment comp (see grad.h). */
#include "nn/grad.h"

#include "base/log.h"
#include "ir/ops.h"
#include "ir/prec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest term or spec the rules build (a spec is at most 4 terms of TROUPE_MAX_DIMS
 * indices, each a few characters). */
#define S_TERM_MAX 192
#define S_SPEC_MAX (4 * S_TERM_MAX + 8)
#define S_MAX_CONSTS 8

/* ---- terms of a spec ------------------------------------------------------------------------ */

/* A spec split into its terms: term[0] the lhs, term[1..nrhs] the operands. */
typedef struct s_terms {
    int nrhs;
    char term[4][S_TERM_MAX];
} s_terms_t;

/* Splits "t1,t2=>tl" at depth 0 (outside [], (), {}). Blanks and broadcast marks ("^",
 * ir/projection.h) are dropped: a rule moves terms between the lhs and the operands, and
 * s_accum marks the broadcasts of each spec it emits. */
static troupe_status_t s_split(const char *spec, s_terms_t *out)
{
    memset(out, 0, sizeof *out);
    int depth = 0, cur = 1;
    size_t len = 0;
    bool seen_arrow = false;
    for (const char *p = spec; *p; p++) {
        char c = *p;
        if (c == ' ' || c == '\t' || c == '^')
            continue;
        if (c == '[' || c == '(' || c == '{')
            depth++;
        else if (c == ']' || c == ')' || c == '}')
            depth--;
        if (depth == 0 && c == ',' && !seen_arrow) {
            if (++cur > 3)
                break;
            len = 0;
            continue;
        }
        if (depth == 0 && c == '=' && p[1] == '>' && !seen_arrow) {
            seen_arrow = true;
            out->nrhs = cur;
            cur = 0;
            len = 0;
            p++;
            continue;
        }
        if (len + 1 >= S_TERM_MAX)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "grad: projection '%s' is too long",
                                 spec);
        out->term[cur][len++] = c;
        out->term[cur][len] = '\0';
    }
    if (!seen_arrow || cur != 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "grad: cannot split projection '%s'", spec);
    return TROUPE_OK;
}

/* Marks the iterators standing alone (depth 0) in `term`. */
static void s_plain(const char *term, bool *seen)
{
    int depth = 0;
    for (const char *p = term; *p; p++) {
        if (*p == '[' || *p == '(' || *p == '{')
            depth++;
        else if (*p == ']' || *p == ')' || *p == '}')
            depth--;
        else if (depth == 0 && ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            seen[(unsigned char)*p] = true;
    }
}

/* ---- the differentiation context -------------------------------------------------------------- */

typedef struct s_stmt {
    troupe_asgn_t *t;
    const char *layer; /* innermost enclosing block comment, or NULL */
} s_stmt_t;

typedef struct s_info {
    troupe_tnode_t *tn;
    bool dep;      /* depends on a parameter through differentiable ops */
    bool needed;   /* the loss depends on it */
    bool constant; /* a stop-gradient node */
    int param;     /* index in params, or -1 */
    int first_write, nwrites, first_read;
    troupe_tnode_t *g; /* its gradient (params: the caller's) */
    bool g_init;       /* the gradient has had its first (initialising) contribution */
} s_info_t;

typedef struct s_ctx {
    troupe_asgn_comp_t *comp;
    s_stmt_t *stmts;
    size_t nstmts, stmts_cap;
    s_info_t *info; /* one per node of the forward comp, sorted by id */
    size_t ninfo;
    troupe_asgn_t **items; /* the backward statements being emitted */
    size_t nitems, items_cap;
    troupe_asgn_t **blocks; /* finished backward blocks */
    size_t nblocks, blocks_cap;
    troupe_asgn_t **consts_items; /* fetches of the constants */
    size_t nconsts_items, consts_items_cap;
    struct {
        double v;
        troupe_tnode_t *tn;
    } consts[S_MAX_CONSTS];
    int nconsts;
    troupe_prec_t prec;           /* of the loss: the constants' precision */
    const troupe_asgn_t *current; /* the statement whose rule is being applied */
} s_ctx_t;

/* The gather nodes a derived spec refers to (its "@N[...]" indices, ir/projection.h): those of
 * the statement being differentiated, when the spec mentions any. */
static int s_gathers(const s_ctx_t *x, const char *spec, troupe_tnode_t *const **out)
{
    *out = NULL;
    if (!x->current || x->current->kind != TROUPE_ASGN_ACCUM_OP || !strchr(spec, '@'))
        return 0;
    *out = x->current->u.accum_op.gather;
    return x->current->u.accum_op.ngather;
}

static troupe_status_t s_emit(s_ctx_t *x, troupe_status_t st, troupe_asgn_t *const *t);

/* Copies the derived spec `in` ("t1,t2=>tl", no marks) to `out`, writing "^x" for each lhs
 * iterator that indexes no operand: the rules exchange terms, so the gradient of a reduction
 * "bi=>b" is the broadcast "b=>b^i". Letters inside "{...}" are static symbol names, not
 * iterators; lhs letters inside "(...)" are left alone (an affine index takes no mark). */
static troupe_status_t s_mark_broadcasts(const char *in, char *out, size_t cap)
{
    const char *arrow = strstr(in, "=>");
    if (!arrow)
        return troupe__error(TROUPE_INTERNAL, "grad: derived projection '%s' has no '=>'", in);
    bool rhs_letter[128] = {false};
    int brace = 0;
    for (const char *p = in; p < arrow; p++) {
        if (*p == '{')
            brace++;
        else if (*p == '}')
            brace--;
        else if (brace == 0 && ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            rhs_letter[(unsigned char)*p] = true;
    }
    size_t len = (size_t)(arrow - in) + 2;
    if (len >= cap)
        return troupe__error(TROUPE_INTERNAL, "grad: derived projection '%s' is too long", in);
    memcpy(out, in, len);
    int paren = 0;
    brace = 0;
    for (const char *p = arrow + 2; *p; p++) {
        char c = *p;
        if (c == '{')
            brace++;
        else if (c == '}')
            brace--;
        else if (c == '(')
            paren++;
        else if (c == ')')
            paren--;
        bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (len + 3 > cap)
            return troupe__error(TROUPE_INTERNAL, "grad: derived projection '%s' is too long", in);
        if (letter && brace == 0 && paren == 0 && !rhs_letter[(unsigned char)c])
            out[len++] = '^';
        out[len++] = c;
    }
    out[len] = '\0';
    return TROUPE_OK;
}

/* lhs =accum op(rhs...) over spec, with the statement's gather nodes when spec names them. */
static troupe_status_t s_accum(s_ctx_t *x, bool init, troupe_binop_t accum, troupe_tnode_t *lhs,
                               troupe_asgn_rhs_kind_t kind, int op, troupe_tnode_t *a,
                               troupe_tnode_t *b, troupe_tnode_t *c, const char *spec)
{
    troupe_asgn_buffer_t rhs[3] = {troupe_asgn_node(a), troupe_asgn_node(b), troupe_asgn_node(c)};
    troupe_tnode_t *const *g = NULL;
    int ng = s_gathers(x, spec, &g);
    char marked[S_SPEC_MAX + TROUPE_MAX_DIMS + 1];
    TROUPE_RETURN_IF_ERROR(s_mark_broadcasts(spec, marked, sizeof marked));
    troupe_asgn_t *t = NULL;
    return s_emit(
        x, troupe_asgn_accum_gather(x->comp, init, accum, lhs, kind, op, rhs, ng, g, marked, &t),
        &t);
}

static troupe_status_t s_oom(void)
{
    return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "grad: out of memory");
}

static troupe_status_t s_push(troupe_asgn_t ***v, size_t *n, size_t *cap, troupe_asgn_t *t)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        troupe_asgn_t **nv = realloc(*v, c * sizeof *nv);
        if (!nv)
            return s_oom();
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = t;
    return TROUPE_OK;
}

static s_info_t *s_info(s_ctx_t *x, const troupe_tnode_t *tn)
{
    size_t lo = 0, hi = x->ninfo;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (x->info[mid].tn->id < tn->id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < x->ninfo && x->info[lo].tn == tn ? &x->info[lo] : NULL;
}

static const char *s_label(const troupe_tnode_t *tn)
{
    return tn->label_count ? tn->label[tn->label_count - 1] : "(unlabelled)";
}

/* "lhs-label =accum op(...) over 'spec'" for messages. */
static const char *s_describe(const troupe_asgn_t *t, char *buf, size_t cap)
{
    if (t->kind == TROUPE_ASGN_ACCUM_OP) {
        const char *op = t->u.accum_op.rhs_kind == TROUPE_ASGN_RHS_UNOP
                             ? troupe_unop_name((troupe_unop_t)t->u.accum_op.op)
                         : t->u.accum_op.rhs_kind == TROUPE_ASGN_RHS_BINOP
                             ? troupe_binop_name((troupe_binop_t)t->u.accum_op.op)
                             : troupe_ternop_name((troupe_ternop_t)t->u.accum_op.op);
        snprintf(buf, cap, "#%d %s =%s %s(...) over '%s'", t->u.accum_op.lhs->id,
                 s_label(t->u.accum_op.lhs), troupe_binop_name(t->u.accum_op.accum), op,
                 t->u.accum_op.proj->spec);
    } else if (t->kind == TROUPE_ASGN_SET_VEC_UNOP) {
        snprintf(buf, cap, "#%d %s = %s(...) over '%s'", t->u.set_vec_unop.lhs->id,
                 s_label(t->u.set_vec_unop.lhs), troupe_vec_unop_name(t->u.set_vec_unop.op),
                 t->u.set_vec_unop.proj->spec);
    } else {
        snprintf(buf, cap, "fetch into #%d %s", t->u.fetch.tn->id, s_label(t->u.fetch.tn));
    }
    return buf;
}

static troupe_tnode_t *s_lhs(const troupe_asgn_t *t)
{
    return t->kind == TROUPE_ASGN_ACCUM_OP      ? t->u.accum_op.lhs
           : t->kind == TROUPE_ASGN_SET_VEC_UNOP ? t->u.set_vec_unop.lhs
                                                 : t->u.fetch.tn;
}

static int s_nrhs(const troupe_asgn_t *t)
{
    if (t->kind == TROUPE_ASGN_SET_VEC_UNOP)
        return 1;
    if (t->kind != TROUPE_ASGN_ACCUM_OP)
        return 0;
    return (int)t->u.accum_op.rhs_kind;
}

static const troupe_asgn_buffer_t *s_rhs(const troupe_asgn_t *t, int k)
{
    return t->kind == TROUPE_ASGN_SET_VEC_UNOP ? &t->u.set_vec_unop.rhs : &t->u.accum_op.rhs[k];
}

/* Whether operand k (0-based) of an assignment has a derivative. */
static bool s_differentiable(const troupe_asgn_t *t, int k)
{
    if (t->kind != TROUPE_ASGN_ACCUM_OP)
        return false;
    int op = t->u.accum_op.op;
    switch (t->u.accum_op.rhs_kind) {
    case TROUPE_ASGN_RHS_UNOP:
        return op != TROUPE_UNOP_NOT && op != TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1;
    case TROUPE_ASGN_RHS_BINOP:
        switch ((troupe_binop_t)op) {
        case TROUPE_BINOP_ARG1:
            return k == 0;
        case TROUPE_BINOP_ARG2:
        case TROUPE_BINOP_RELU_GATE:
        case TROUPE_BINOP_SATUR01_GATE:
            return k == 1;
        case TROUPE_BINOP_ADD:
        case TROUPE_BINOP_SUB:
        case TROUPE_BINOP_MUL:
        case TROUPE_BINOP_DIV:
        case TROUPE_BINOP_TO_POW_OF:
        case TROUPE_BINOP_MAX:
        case TROUPE_BINOP_MIN:
            return true;
        default:
            return false;
        }
    default:
        return op == TROUPE_TERNOP_FMA || k > 0;
    }
}

static troupe_status_t s_flatten(s_ctx_t *x, troupe_asgn_t *t, const char *layer)
{
    switch (t->kind) {
    case TROUPE_ASGN_NOOP:
        return TROUPE_OK;
    case TROUPE_ASGN_SEQ:
        for (size_t i = 0; i < t->u.seq.count; i++)
            TROUPE_RETURN_IF_ERROR(s_flatten(x, t->u.seq.items[i], layer));
        return TROUPE_OK;
    case TROUPE_ASGN_BLOCK_COMMENT:
        return s_flatten(x, t->u.block_comment.body, t->u.block_comment.text);
    default:
        if (x->nstmts == x->stmts_cap) {
            size_t c = x->stmts_cap ? 2 * x->stmts_cap : 64;
            s_stmt_t *v = realloc(x->stmts, c * sizeof *v);
            if (!v)
                return s_oom();
            x->stmts = v;
            x->stmts_cap = c;
        }
        x->stmts[x->nstmts++] = (s_stmt_t){t, layer};
        return TROUPE_OK;
    }
}

/* ---- emitting ------------------------------------------------------------------------------ */

static troupe_status_t s_new_node(const char *l1, const char *l2, troupe_prec_t prec, int ndims,
                                  const int64_t *dims, troupe_tnode_t **out)
{
    const char *labels[2] = {l1, l2};
    return troupe_tnode_new(labels, 2, prec, ndims, dims, NULL, 0.0, out);
}

/* The comp retains every node an assignment mentions; a builder failure leaves the node to
 * the caller, so temporaries are released right after their first use in an assignment. */
static troupe_status_t s_emit(s_ctx_t *x, troupe_status_t st, troupe_asgn_t *const *t)
{
    if (st != TROUPE_OK)
        return st;
    return s_push(&x->items, &x->nitems, &x->items_cap, *t);
}

static troupe_status_t s_un(s_ctx_t *x, bool init, troupe_binop_t accum, troupe_tnode_t *lhs,
                            troupe_unop_t op, troupe_tnode_t *a, const char *spec)
{
    return s_accum(x, init, accum, lhs, TROUPE_ASGN_RHS_UNOP, (int)op, a, NULL, NULL, spec);
}

static troupe_status_t s_bin(s_ctx_t *x, bool init, troupe_binop_t accum, troupe_tnode_t *lhs,
                             troupe_binop_t op, troupe_tnode_t *a, troupe_tnode_t *b,
                             const char *spec)
{
    return s_accum(x, init, accum, lhs, TROUPE_ASGN_RHS_BINOP, (int)op, a, b, NULL, spec);
}

static troupe_status_t s_ter(s_ctx_t *x, bool init, troupe_binop_t accum, troupe_tnode_t *lhs,
                             troupe_ternop_t op, troupe_tnode_t *a, troupe_tnode_t *b,
                             troupe_tnode_t *c, const char *spec)
{
    return s_accum(x, init, accum, lhs, TROUPE_ASGN_RHS_TERNOP, (int)op, a, b, c, spec);
}

/* A scalar constant node holding v (fetched at the start of the backward pass). Borrowed: the
 * comp holds it. */
static troupe_status_t s_const(s_ctx_t *x, double v, troupe_tnode_t **out)
{
    for (int i = 0; i < x->nconsts; i++)
        if (x->consts[i].v == v) {
            *out = x->consts[i].tn;
            return TROUPE_OK;
        }
    if (x->nconsts == S_MAX_CONSTS)
        return troupe__error(TROUPE_INTERNAL, "grad: too many constants");
    char name[32];
    snprintf(name, sizeof name, "%.17g", v);
    troupe_tnode_t *tn = NULL;
    TROUPE_RETURN_IF_ERROR(s_new_node("grad_const", name, x->prec, 0, NULL, &tn));
    troupe_asgn_t *t = NULL;
    troupe_status_t st = troupe_asgn_fetch_constant(x->comp, tn, v, &t);
    if (st == TROUPE_OK)
        st = s_push(&x->consts_items, &x->nconsts_items, &x->consts_items_cap, t);
    troupe_tnode_release(&tn);
    if (st != TROUPE_OK)
        return st;
    x->consts[x->nconsts].v = v;
    x->consts[x->nconsts].tn = t->u.fetch.tn;
    *out = x->consts[x->nconsts++].tn;
    return TROUPE_OK;
}

/* The product space of a projection as a term ("bij") and a temporary over it. */
typedef struct s_space {
    char term[TROUPE_PROJ_MAX_ITERS + 1];
    int n;
    int64_t dims[TROUPE_PROJ_MAX_ITERS];
} s_space_t;

static void s_space_of(const troupe_projections_t *pr, s_space_t *sp)
{
    sp->n = pr->niters;
    for (int i = 0; i < pr->niters; i++) {
        sp->term[i] = pr->iter_letter[i];
        sp->dims[i] = pr->iter_dim[i];
    }
    sp->term[pr->niters] = '\0';
}

/* A temporary over the product space (borrowed once an assignment uses it; the caller must
 * use it in an assignment at once). Product spaces beyond TROUPE_MAX_DIMS axes are refused. */
static troupe_status_t s_tmp(s_ctx_t *x, const s_space_t *sp, const char *what,
                             troupe_prec_t prec, troupe_tnode_t **out)
{
    if (sp->n > TROUPE_MAX_DIMS) {
        char d[160];
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "grad: %s: a temporary over the %d iterators of the product space "
                             "exceeds %d axes",
                             s_describe(x->current, d, sizeof d), sp->n, TROUPE_MAX_DIMS);
    }
    return s_new_node("grad_tmp", what, prec, sp->n, sp->dims, out);
}

/* ---- gradient nodes ------------------------------------------------------------------------ */

/* A narrow float (half, bfloat16, fp8): a mixed-precision copy (nn/nn.h, compute precision). */
static bool s_narrow(troupe_prec_t p)
{
    return p == TROUPE_PREC_HALF || p == TROUPE_PREC_BFLOAT16 || p == TROUPE_PREC_FP8;
}

/* Gradients accumulate in the node's precision, or in the loss's when the node is a narrow
 * float copy (mixed precision: the sums of its gradient stay fp32, as autocast's). */
static troupe_status_t s_grad_of(s_ctx_t *x, s_info_t *in)
{
    if (in->g)
        return TROUPE_OK;
    const char *labels[2] = {s_label(in->tn), "grad"};
    troupe_prec_t p = s_narrow(in->tn->prec) && troupe_prec_is_float(x->prec) ? x->prec
                                                                              : in->tn->prec;
    return troupe_tnode_new(labels, 2, p, in->tn->ndims, in->tn->dims, NULL, 0.0, &in->g);
}

/* G for the backward products of a product of two factors of one narrow float precision: G
 * itself when it has their precision, else a copy of G rounded to it (autocast: the backward
 * products run in the forward product's precision, accumulating in the gradients' wider one).
 * *out is borrowed (the comp holds it). */
static troupe_status_t s_product_grad(s_ctx_t *x, troupe_tnode_t *const r[3], troupe_tnode_t *G,
                                      troupe_tnode_t **out)
{
    *out = G;
    if (r[0] == NULL || r[1] == NULL || r[0]->prec != r[1]->prec || !s_narrow(r[0]->prec) ||
        G->prec == r[0]->prec)
        return TROUPE_OK;
    troupe_tnode_t *c = NULL;
    TROUPE_RETURN_IF_ERROR(s_new_node("grad_tmp", "cast", r[0]->prec, G->ndims, G->dims, &c));
    char spec[2 * TROUPE_MAX_DIMS + 3];
    int n = 0;
    for (int a = 0; a < G->ndims; a++)
        spec[n++] = (char)('a' + a);
    spec[n++] = '=';
    spec[n++] = '>';
    for (int a = 0; a < G->ndims; a++)
        spec[n++] = (char)('a' + a);
    spec[n] = '\0';
    troupe_status_t st = s_un(x, true, TROUPE_BINOP_ARG2, c, TROUPE_UNOP_IDENTITY, G, spec);
    *out = c;
    troupe_tnode_release(&c);
    return st;
}

/* Factor kinds of one contribution: g_r =(+|-) G[tg] * factor over the remaining terms. */
typedef enum s_fkind {
    F_ONE = 0,  /* G */
    F_MUL,      /* G * n (g_first) or n * G */
    F_DIV,      /* G / n */
    F_GATE,     /* gate(n, G) */
    F_WHERE_A,  /* where(c, G, 0) */
    F_WHERE_B,  /* where(c, 0, G) */
    F_TEMP,     /* G * n where n is a temporary over the product space */
} s_fkind_t;

typedef struct s_factor {
    s_fkind_t kind;
    troupe_tnode_t *n;
    const char *term;
    troupe_binop_t gate;
    bool g_first;
} s_factor_t;

/* Materialises a factor over the product space: D[P] such that contribution = G * D. */
static troupe_status_t s_materialise(s_ctx_t *x, const s_space_t *sp, s_factor_t *f)
{
    troupe_tnode_t *d = NULL, *one = NULL, *zero = NULL;
    TROUPE_RETURN_IF_ERROR(s_const(x, 1.0, &one));
    TROUPE_RETURN_IF_ERROR(s_const(x, 0.0, &zero));
    TROUPE_RETURN_IF_ERROR(s_tmp(x, sp, "factor", x->prec, &d));
    char spec[S_SPEC_MAX];
    troupe_status_t st;
    switch (f->kind) {
    case F_ONE: {
        troupe_asgn_t *t = NULL;
        st = s_emit(x, troupe_asgn_fetch_constant(x->comp, d, 1.0, &t), &t);
        break;
    }
    case F_MUL:
        snprintf(spec, sizeof spec, "%s=>%s", f->term, sp->term);
        st = s_un(x, true, TROUPE_BINOP_ARG2, d, TROUPE_UNOP_IDENTITY, f->n, spec);
        break;
    case F_DIV:
        snprintf(spec, sizeof spec, "%s=>%s", f->term, sp->term);
        st = s_un(x, true, TROUPE_BINOP_ARG2, d, TROUPE_UNOP_RECIP, f->n, spec);
        break;
    case F_GATE:
        snprintf(spec, sizeof spec, "%s,=>%s", f->term, sp->term);
        st = s_bin(x, true, TROUPE_BINOP_ARG2, d, f->gate, f->n, one, spec);
        break;
    case F_WHERE_A:
    case F_WHERE_B:
        snprintf(spec, sizeof spec, "%s,,=>%s", f->term, sp->term);
        st = s_ter(x, true, TROUPE_BINOP_ARG2, d, TROUPE_TERNOP_WHERE, f->n,
                   f->kind == F_WHERE_A ? one : zero, f->kind == F_WHERE_A ? zero : one, spec);
        break;
    default:
        st = TROUPE_OK;
        break;
    }
    troupe_tnode_t *keep = d;
    troupe_tnode_release(&d);
    if (st != TROUPE_OK)
        return st;
    f->kind = F_TEMP;
    f->n = keep; /* held by the comp */
    f->term = NULL;
    return TROUPE_OK;
}

/* Adds sign * G[tg] * factor into the gradient of operand node r read at term tr. */
static troupe_status_t s_contribute(s_ctx_t *x, const troupe_projections_t *pr, troupe_tnode_t *r,
                                    const char *tr, troupe_tnode_t *G, const char *tg, int sign,
                                    s_factor_t f)
{
    s_info_t *in = s_info(x, r);
    if (!in || !in->dep || !in->needed || in->constant)
        return TROUPE_OK;
    TROUPE_RETURN_IF_ERROR(s_grad_of(x, in));
    s_space_t sp;
    s_space_of(pr, &sp);
    /* every iterator of the product space must stand alone in some term of the new spec, or
     * the contribution would lose its multiplicity: else go through the product space */
    bool seen[128] = {false};
    s_plain(tr, seen);
    s_plain(tg, seen);
    if (f.kind != F_ONE && f.kind != F_TEMP)
        s_plain(f.term, seen);
    bool covered = true;
    for (int i = 0; i < sp.n; i++)
        covered = covered && seen[(unsigned char)sp.term[i]];
    if (!covered && f.kind != F_TEMP)
        TROUPE_RETURN_IF_ERROR(s_materialise(x, &sp, &f));
    const char *fterm = f.kind == F_TEMP ? sp.term : f.term;
    troupe_binop_t accum = sign > 0 ? TROUPE_BINOP_ADD : TROUPE_BINOP_SUB;
    /* the first contribution initialises (a subtracting one writes 0 - v: compiler/lower.c) */
    const bool init = !in->g_init;
    char spec[S_SPEC_MAX];
    troupe_status_t st;
    troupe_tnode_t *zero = NULL;
    switch (f.kind) {
    case F_ONE:
        snprintf(spec, sizeof spec, "%s=>%s", tg, tr);
        st = s_un(x, init, accum, in->g, TROUPE_UNOP_IDENTITY, G, spec);
        break;
    case F_MUL:
    case F_TEMP:
        if (f.g_first || f.kind == F_TEMP) {
            snprintf(spec, sizeof spec, "%s,%s=>%s", tg, fterm, tr);
            st = s_bin(x, init, accum, in->g, TROUPE_BINOP_MUL, G, f.n, spec);
        } else {
            snprintf(spec, sizeof spec, "%s,%s=>%s", fterm, tg, tr);
            st = s_bin(x, init, accum, in->g, TROUPE_BINOP_MUL, f.n, G, spec);
        }
        break;
    case F_DIV:
        snprintf(spec, sizeof spec, "%s,%s=>%s", tg, fterm, tr);
        st = s_bin(x, init, accum, in->g, TROUPE_BINOP_DIV, G, f.n, spec);
        break;
    case F_GATE:
        snprintf(spec, sizeof spec, "%s,%s=>%s", fterm, tg, tr);
        st = s_bin(x, init, accum, in->g, f.gate, f.n, G, spec);
        break;
    default: /* F_WHERE_A, F_WHERE_B */
        st = s_const(x, 0.0, &zero);
        if (st != TROUPE_OK)
            break;
        if (f.kind == F_WHERE_A) {
            snprintf(spec, sizeof spec, "%s,%s,=>%s", fterm, tg, tr);
            st = s_ter(x, init, accum, in->g, TROUPE_TERNOP_WHERE, f.n, G, zero, spec);
        } else {
            snprintf(spec, sizeof spec, "%s,,%s=>%s", fterm, tg, tr);
            st = s_ter(x, init, accum, in->g, TROUPE_TERNOP_WHERE, f.n, zero, G, spec);
        }
        break;
    }
    if (st == TROUPE_OK)
        in->g_init = true;
    return st;
}

/* ---- temporaries for the rules -------------------------------------------------------------- */

/* D[P] := op(a[ta]) / op(a[ta], b[tb]) / op(a, b, c); returns D (borrowed: the comp holds it). */
static troupe_status_t s_tmp_op(s_ctx_t *x, const s_space_t *sp, troupe_asgn_rhs_kind_t kind,
                                int op, troupe_tnode_t *a, const char *ta, troupe_tnode_t *b,
                                const char *tb, troupe_tnode_t *c, const char *tc,
                                troupe_tnode_t **out)
{
    troupe_tnode_t *d = NULL;
    TROUPE_RETURN_IF_ERROR(s_tmp(x, sp, "d", x->prec, &d));
    char spec[S_SPEC_MAX];
    troupe_status_t st;
    if (kind == TROUPE_ASGN_RHS_UNOP) {
        snprintf(spec, sizeof spec, "%s=>%s", ta, sp->term);
        st = s_un(x, true, TROUPE_BINOP_ARG2, d, (troupe_unop_t)op, a, spec);
    } else if (kind == TROUPE_ASGN_RHS_BINOP) {
        snprintf(spec, sizeof spec, "%s,%s=>%s", ta, tb, sp->term);
        st = s_bin(x, true, TROUPE_BINOP_ARG2, d, (troupe_binop_t)op, a, b, spec);
    } else {
        snprintf(spec, sizeof spec, "%s,%s,%s=>%s", ta, tb, tc, sp->term);
        st = s_ter(x, true, TROUPE_BINOP_ARG2, d, (troupe_ternop_t)op, a, b, c, spec);
    }
    *out = d;
    troupe_tnode_release(&d);
    return st;
}

static s_factor_t s_f(s_fkind_t kind, troupe_tnode_t *n, const char *term)
{
    s_factor_t f = {kind, n, term, TROUPE_BINOP_ARG1, true};
    return f;
}

/* ---- the rules ----------------------------------------------------------------------------- */

/* Whether the lhs holds the value op(rhs...) of each product-space point after the
 * statement (its only write, an injective initialising ARG2 or ADD): then rules may read the
 * lhs instead of recomputing the op. */
static bool s_lhs_holds_value(s_ctx_t *x, const troupe_asgn_t *t)
{
    const troupe_projections_t *pr = t->u.accum_op.proj;
    s_info_t *in = s_info(x, t->u.accum_op.lhs);
    if (!in || in->nwrites != 1 || !pr->injective)
        return false;
    if (t->u.accum_op.accum == TROUPE_BINOP_ARG2)
        return true;
    return t->u.accum_op.accum == TROUPE_BINOP_ADD && t->u.accum_op.initialize_neutral;
}

/* The unop's value op(r[tr]) at each product-space point: the lhs itself when it holds it
 * (*y = L read at tl), else a temporary over the product space (*y read at P). */
static troupe_status_t s_unop_value(s_ctx_t *x, const s_space_t *sp, bool holds, troupe_unop_t op,
                                    troupe_tnode_t *L, const char *tl, troupe_tnode_t *r,
                                    const char *tr, troupe_tnode_t **y, const char **ty)
{
    if (holds) {
        *y = L;
        *ty = tl;
        return TROUPE_OK;
    }
    *ty = sp->term;
    return s_tmp_op(x, sp, TROUPE_ASGN_RHS_UNOP, (int)op, r, tr, NULL, NULL, NULL, NULL, y);
}

/* Applies the op's rule: contributions of upstream G[tg] (times sign) to each operand. */
static troupe_status_t s_op_rule(s_ctx_t *x, const troupe_asgn_t *t, const s_terms_t *T,
                                 troupe_tnode_t *G, const char *tg, int sign, bool holds)
{
    const troupe_projections_t *pr = t->u.accum_op.proj;
    troupe_tnode_t *r[3] = {t->u.accum_op.rhs[0].tn, t->u.accum_op.rhs[1].tn,
                            t->u.accum_op.rhs[2].tn};
    const char *tr[3] = {T->term[1], T->term[2], T->term[3]};
    for (int k = 0; k < 3; k++)
        if (t->u.accum_op.rhs[k].is_merge_buffer)
            r[k] = NULL; /* a merge buffer is another stream's copy: a constant here */
    troupe_tnode_t *L = t->u.accum_op.lhs;
    const char *tl = T->term[0];
    s_space_t sp;
    s_space_of(pr, &sp);
    const char *P = sp.term;
    troupe_tnode_t *d = NULL, *d2 = NULL, *c = NULL;
    int op = t->u.accum_op.op;
#define S_ACTIVE(k) (r[k] != NULL && s_differentiable(t, k) && s_info(x, r[k]) != NULL &&         \
                     s_info(x, r[k])->dep && s_info(x, r[k])->needed && !s_info(x, r[k])->constant)
#define S_GIVE(k, sg, f) TROUPE_RETURN_IF_ERROR(s_contribute(x, pr, r[k], tr[k], G, tg, (sg), (f)))
    switch (t->u.accum_op.rhs_kind) {
    case TROUPE_ASGN_RHS_UNOP:
        if (!S_ACTIVE(0))
            return TROUPE_OK;
        switch ((troupe_unop_t)op) {
        case TROUPE_UNOP_IDENTITY:
            S_GIVE(0, sign, s_f(F_ONE, NULL, NULL));
            break;
        case TROUPE_UNOP_NEG:
            S_GIVE(0, -sign, s_f(F_ONE, NULL, NULL));
            break;
        case TROUPE_UNOP_RELU:
        case TROUPE_UNOP_SATUR01: {
            s_factor_t f = s_f(F_GATE, r[0], tr[0]);
            f.gate = op == TROUPE_UNOP_RELU ? TROUPE_BINOP_RELU_GATE : TROUPE_BINOP_SATUR01_GATE;
            S_GIVE(0, sign, f);
            break;
        }
        case TROUPE_UNOP_EXP: { /* exp x */
            troupe_tnode_t *y = NULL;
            const char *ty = NULL;
            TROUPE_RETURN_IF_ERROR(s_unop_value(x, &sp, holds, TROUPE_UNOP_EXP, L, tl, r[0], tr[0],
                                                &y, &ty));
            S_GIVE(0, sign, s_f(F_MUL, y, ty));
            break;
        }
        case TROUPE_UNOP_LOG:
            S_GIVE(0, sign, s_f(F_DIV, r[0], tr[0]));
            break;
        case TROUPE_UNOP_EXP2: { /* 2^x ln 2 */
            troupe_tnode_t *y = NULL;
            const char *ty = NULL;
            TROUPE_RETURN_IF_ERROR(s_const(x, 0.69314718055994530942, &c));
            TROUPE_RETURN_IF_ERROR(s_unop_value(x, &sp, holds, TROUPE_UNOP_EXP2, L, tl, r[0], tr[0],
                                                &y, &ty));
            TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_MUL, y, ty,
                                            c, "", NULL, NULL, &d));
            S_GIVE(0, sign, s_f(F_TEMP, d, NULL));
            break;
        }
        case TROUPE_UNOP_LOG2: /* 1 / (x ln 2) */
            TROUPE_RETURN_IF_ERROR(s_const(x, 0.69314718055994530942, &c));
            TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_MUL, r[0],
                                            tr[0], c, "", NULL, NULL, &d));
            S_GIVE(0, sign, s_f(F_DIV, d, P));
            break;
        case TROUPE_UNOP_SIN:
        case TROUPE_UNOP_COS: /* cos x, -sin x */
            TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_UNOP,
                                            op == TROUPE_UNOP_SIN ? TROUPE_UNOP_COS
                                                                  : TROUPE_UNOP_SIN,
                                            r[0], tr[0], NULL, NULL, NULL, NULL, &d));
            S_GIVE(0, op == TROUPE_UNOP_SIN ? sign : -sign, s_f(F_TEMP, d, NULL));
            break;
        case TROUPE_UNOP_SQRT:         /* 1 / (2 y) */
        case TROUPE_UNOP_RECIP:        /* -y^2 */
        case TROUPE_UNOP_RECIP_SQRT:   /* -y^3 / 2 */
        case TROUPE_UNOP_TANH_APPROX: { /* 1 - y^2 */
            troupe_tnode_t *y = NULL, *k = NULL, *y2 = NULL;
            const char *ty = NULL;
            TROUPE_RETURN_IF_ERROR(
                s_unop_value(x, &sp, holds, (troupe_unop_t)op, L, tl, r[0], tr[0], &y, &ty));
            if (op == TROUPE_UNOP_SQRT) {
                TROUPE_RETURN_IF_ERROR(s_const(x, 2.0, &k));
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_MUL, y,
                                                ty, k, "", NULL, NULL, &d));
                S_GIVE(0, sign, s_f(F_DIV, d, P));
                break;
            }
            TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_MUL, y, ty,
                                            y, ty, NULL, NULL, &y2));
            if (op == TROUPE_UNOP_RECIP) {
                S_GIVE(0, -sign, s_f(F_TEMP, y2, NULL));
            } else if (op == TROUPE_UNOP_TANH_APPROX) {
                TROUPE_RETURN_IF_ERROR(s_const(x, 1.0, &k));
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_SUB, k,
                                                "", y2, P, NULL, NULL, &d));
                S_GIVE(0, sign, s_f(F_TEMP, d, NULL));
            } else {
                troupe_tnode_t *y3 = NULL;
                TROUPE_RETURN_IF_ERROR(s_const(x, 0.5, &k));
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_MUL, y2,
                                                P, y, ty, NULL, NULL, &y3));
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_MUL, y3,
                                                P, k, "", NULL, NULL, &d));
                S_GIVE(0, -sign, s_f(F_TEMP, d, NULL));
            }
            break;
        }
        default:
            break; /* constants */
        }
        return TROUPE_OK;

    case TROUPE_ASGN_RHS_BINOP:
        switch ((troupe_binop_t)op) {
        case TROUPE_BINOP_ARG1:
        case TROUPE_BINOP_ARG2:
        case TROUPE_BINOP_ADD:
        case TROUPE_BINOP_SUB:
            for (int k = 0; k < 2; k++) {
                if (!S_ACTIVE(k))
                    continue;
                int sg = op == TROUPE_BINOP_SUB && k == 1 ? -sign : sign;
                /* the other operand keeps the product space when it adds iterators */
                s_factor_t f = s_f(F_ONE, NULL, NULL);
                S_GIVE(k, sg, f);
            }
            break;
        case TROUPE_BINOP_MUL: {
            troupe_tnode_t *Gp = G; /* G in the factors' precision (mixed precision) */
            if (S_ACTIVE(0) || S_ACTIVE(1))
                TROUPE_RETURN_IF_ERROR(s_product_grad(x, r, G, &Gp));
            if (S_ACTIVE(0))
                TROUPE_RETURN_IF_ERROR(
                    s_contribute(x, pr, r[0], tr[0], Gp, tg, sign, s_f(F_MUL, r[1], tr[1])));
            if (S_ACTIVE(1)) {
                s_factor_t f = s_f(F_MUL, r[0], tr[0]);
                f.g_first = false;
                TROUPE_RETURN_IF_ERROR(s_contribute(x, pr, r[1], tr[1], Gp, tg, sign, f));
            }
            break;
        }
        case TROUPE_BINOP_DIV:
            if (S_ACTIVE(0))
                S_GIVE(0, sign, s_f(F_DIV, r[1], tr[1]));
            if (S_ACTIVE(1)) { /* -(a/b)/b */
                if (holds)
                    TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP,
                                                    TROUPE_BINOP_DIV, L, tl, r[1], tr[1], NULL,
                                                    NULL, &d));
                else {
                    TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP,
                                                    TROUPE_BINOP_DIV, r[0], tr[0], r[1], tr[1],
                                                    NULL, NULL, &d2));
                    TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP,
                                                    TROUPE_BINOP_DIV, d2, P, r[1], tr[1], NULL,
                                                    NULL, &d));
                }
                S_GIVE(1, -sign, s_f(F_TEMP, d, NULL));
            }
            break;
        case TROUPE_BINOP_TO_POW_OF: {
            troupe_tnode_t *one = NULL;
            TROUPE_RETURN_IF_ERROR(s_const(x, 1.0, &one));
            if (S_ACTIVE(0)) { /* b * a^(b-1) */
                troupe_tnode_t *bm1 = NULL, *pw = NULL;
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_SUB,
                                                r[1], tr[1], one, "", NULL, NULL, &bm1));
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP,
                                                TROUPE_BINOP_TO_POW_OF, r[0], tr[0], bm1, P, NULL,
                                                NULL, &pw));
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_MUL,
                                                r[1], tr[1], pw, P, NULL, NULL, &d));
                S_GIVE(0, sign, s_f(F_TEMP, d, NULL));
            }
            if (S_ACTIVE(1)) { /* a^b ln a */
                troupe_tnode_t *pw = NULL, *ln = NULL, *e = NULL;
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP,
                                                TROUPE_BINOP_TO_POW_OF, r[0], tr[0], r[1], tr[1],
                                                NULL, NULL, &pw));
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_UNOP, TROUPE_UNOP_LOG,
                                                r[0], tr[0], NULL, NULL, NULL, NULL, &ln));
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_MUL,
                                                pw, P, ln, P, NULL, NULL, &e));
                S_GIVE(1, sign, s_f(F_TEMP, e, NULL));
            }
            break;
        }
        case TROUPE_BINOP_RELU_GATE:
        case TROUPE_BINOP_SATUR01_GATE:
            if (S_ACTIVE(1)) {
                s_factor_t f = s_f(F_GATE, r[0], tr[0]);
                f.gate = (troupe_binop_t)op;
                S_GIVE(1, sign, f);
            }
            break;
        case TROUPE_BINOP_MAX:
        case TROUPE_BINOP_MIN: {
            /* PyTorch's maximum/minimum: the winner gets G, ties G/2 each */
            troupe_tnode_t *half = NULL;
            TROUPE_RETURN_IF_ERROR(s_const(x, 0.5, &half));
            bool mx = op == TROUPE_BINOP_MAX;
            troupe_tnode_t *eq = NULL, *eqh = NULL;
            TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_CMPEQ,
                                            r[0], tr[0], r[1], tr[1], NULL, NULL, &eq));
            TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_MUL, eq,
                                            P, half, "", NULL, NULL, &eqh));
            for (int k = 0; k < 2; k++) {
                if (!S_ACTIVE(k))
                    continue;
                int w = mx ? 1 - k : k; /* wins when r[w] < r[1-w] */
                troupe_tnode_t *lt = NULL, *dd = NULL;
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP,
                                                TROUPE_BINOP_CMPLT, r[w], tr[w], r[1 - w],
                                                tr[1 - w], NULL, NULL, &lt));
                TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_ADD,
                                                lt, P, eqh, P, NULL, NULL, &dd));
                S_GIVE(k, sign, s_f(F_TEMP, dd, NULL));
            }
            break;
        }
        default:
            break; /* constants */
        }
        return TROUPE_OK;

    default: /* ternops */
        if (op == TROUPE_TERNOP_WHERE) {
            if (S_ACTIVE(1))
                S_GIVE(1, sign, s_f(F_WHERE_A, r[0], tr[0]));
            if (S_ACTIVE(2))
                S_GIVE(2, sign, s_f(F_WHERE_B, r[0], tr[0]));
        } else { /* fma: a*b + c */
            if (S_ACTIVE(0))
                S_GIVE(0, sign, s_f(F_MUL, r[1], tr[1]));
            if (S_ACTIVE(1)) {
                s_factor_t f = s_f(F_MUL, r[0], tr[0]);
                f.g_first = false;
                S_GIVE(1, sign, f);
            }
            if (S_ACTIVE(2))
                S_GIVE(2, sign, s_f(F_ONE, NULL, NULL));
        }
        return TROUPE_OK;
    }
#undef S_ACTIVE
#undef S_GIVE
}

/* One statement of the forward pass, in reverse. */
static troupe_status_t s_backprop(s_ctx_t *x, const troupe_asgn_t *t)
{
    if (t->kind != TROUPE_ASGN_ACCUM_OP)
        return TROUPE_OK;
    s_info_t *li = s_info(x, t->u.accum_op.lhs);
    if (!li || !li->g_init)
        return TROUPE_OK; /* nothing downstream read it on the path to the loss */
    bool any = false;
    for (int k = 0; k < s_nrhs(t); k++) {
        s_info_t *ri = t->u.accum_op.rhs[k].is_merge_buffer ? NULL : s_info(x, s_rhs(t, k)->tn);
        any = any || (ri && ri->dep && ri->needed && !ri->constant && s_differentiable(t, k));
    }
    if (!any)
        return TROUPE_OK;
    x->current = t;
    char d[256];
    s_terms_t T;
    TROUPE_RETURN_IF_ERROR(s_split(t->u.accum_op.proj->spec, &T));
    const troupe_projections_t *pr = t->u.accum_op.proj;
    troupe_binop_t accum = t->u.accum_op.accum;
    switch (accum) {
    case TROUPE_BINOP_ARG2:
        if (!pr->injective)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "grad: %s: a plain assignment (arg2) over a non-injective "
                                 "projection keeps one of several values and has no gradient",
                                 s_describe(t, d, sizeof d));
        /* fall through */
    case TROUPE_BINOP_ADD:
    case TROUPE_BINOP_SUB:
        return s_op_rule(x, t, &T, li->g, T.term[0], accum == TROUPE_BINOP_SUB ? -1 : 1,
                         s_lhs_holds_value(x, t));
    case TROUPE_BINOP_MAX:
    case TROUPE_BINOP_MIN: {
        /* gate: dv[P] = g[tl] * (v == lhs) / count(v == lhs), PyTorch's amax/amin tie rule */
        troupe_tnode_t *L = t->u.accum_op.lhs;
        s_space_t sp;
        s_space_of(pr, &sp);
        troupe_tnode_t *v = NULL, *eq = NULL, *cnt = NULL, *h = NULL, *dv = NULL;
        const char *tv;
        if (t->u.accum_op.rhs_kind == TROUPE_ASGN_RHS_UNOP &&
            t->u.accum_op.op == TROUPE_UNOP_IDENTITY) {
            v = t->u.accum_op.rhs[0].tn;
            tv = T.term[1];
        } else {
            const troupe_asgn_buffer_t *rb = t->u.accum_op.rhs;
            TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, t->u.accum_op.rhs_kind, t->u.accum_op.op,
                                            rb[0].tn, T.term[1], rb[1].tn, T.term[2], rb[2].tn,
                                            T.term[3], &v));
            tv = sp.term;
        }
        char spec[S_SPEC_MAX];
        TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_CMPEQ, v, tv,
                                        L, T.term[0], NULL, NULL, &eq));
        TROUPE_RETURN_IF_ERROR(
            s_new_node("grad_tmp", "ties", L->prec, L->ndims, L->dims, &cnt));
        snprintf(spec, sizeof spec, "%s=>%s", sp.term, T.term[0]);
        troupe_status_t st = s_un(x, true, TROUPE_BINOP_ADD, cnt, TROUPE_UNOP_IDENTITY, eq, spec);
        troupe_tnode_t *cnt_b = cnt;
        troupe_tnode_release(&cnt);
        TROUPE_RETURN_IF_ERROR(st);
        TROUPE_RETURN_IF_ERROR(
            s_new_node("grad_tmp", "share", L->prec, L->ndims, L->dims, &h));
        snprintf(spec, sizeof spec, "%s,%s=>%s", T.term[0], T.term[0], T.term[0]);
        st = s_bin(x, true, TROUPE_BINOP_ARG2, h, TROUPE_BINOP_DIV, li->g, cnt_b, spec);
        troupe_tnode_t *h_b = h;
        troupe_tnode_release(&h);
        TROUPE_RETURN_IF_ERROR(st);
        TROUPE_RETURN_IF_ERROR(s_tmp_op(x, &sp, TROUPE_ASGN_RHS_BINOP, TROUPE_BINOP_MUL, eq,
                                        sp.term, h_b, T.term[0], NULL, NULL, &dv));
        return s_op_rule(x, t, &T, dv, sp.term, 1, false);
    }
    default:
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "grad: %s: accumulation with '%s' has no derivative (use add, sub, "
                             "arg2, max or min)",
                             s_describe(t, d, sizeof d), troupe_binop_name(accum));
    }
}

/* ---- analysis ------------------------------------------------------------------------------- */

static bool s_initialising(const troupe_asgn_t *t)
{
    if (t->kind != TROUPE_ASGN_ACCUM_OP)
        return true; /* fetch, vector op: overwrite every cell */
    if (t->u.accum_op.initialize_neutral)
        return true;
    return t->u.accum_op.accum == TROUPE_BINOP_ARG2 && t->u.accum_op.proj->surjective;
}

static troupe_status_t s_analyse(s_ctx_t *x, troupe_tnode_t *loss, size_t n_params,
                                 troupe_tnode_t *const *params, const troupe_nn_grad_opts_t *o)
{
    char d[256];
    for (size_t i = 0; i < x->ninfo; i++) {
        x->info[i].param = -1;
        x->info[i].first_write = x->info[i].first_read = -1;
    }
    for (size_t i = 0; o && i < o->n_constants; i++) {
        s_info_t *in = o->constants[i] ? s_info(x, o->constants[i]) : NULL;
        if (in)
            in->constant = true;
    }
    for (size_t p = 0; p < n_params; p++) {
        s_info_t *in = s_info(x, params[p]);
        if (in) {
            in->param = (int)p;
            in->dep = !in->constant;
        }
    }
    /* writes and reads */
    for (size_t s = 0; s < x->nstmts; s++) {
        const troupe_asgn_t *t = x->stmts[s].t;
        s_info_t *li = s_info(x, s_lhs(t));
        for (int k = 0; k < s_nrhs(t); k++) {
            s_info_t *ri = s_info(x, s_rhs(t, k)->tn);
            if (ri && ri->first_read < 0)
                ri->first_read = (int)s;
        }
        if (li->first_write < 0)
            li->first_write = (int)s;
        li->nwrites++;
    }
    /* forward: what depends on a parameter */
    for (size_t s = 0; s < x->nstmts; s++) {
        const troupe_asgn_t *t = x->stmts[s].t;
        s_info_t *li = s_info(x, s_lhs(t));
        for (int k = 0; k < s_nrhs(t); k++) {
            s_info_t *ri = s_rhs(t, k)->is_merge_buffer ? NULL : s_info(x, s_rhs(t, k)->tn);
            if (ri && ri->dep && s_differentiable(t, k) && !li->constant)
                li->dep = true;
        }
    }
    /* backward: what the loss depends on */
    s_info(x, loss)->needed = true;
    for (size_t s = x->nstmts; s-- > 0;) {
        const troupe_asgn_t *t = x->stmts[s].t;
        if (!s_info(x, s_lhs(t))->needed)
            continue;
        for (int k = 0; k < s_nrhs(t); k++) {
            s_info_t *ri = s_rhs(t, k)->is_merge_buffer ? NULL : s_info(x, s_rhs(t, k)->tn);
            if (ri && s_differentiable(t, k))
                ri->needed = true;
        }
    }
    /* the write patterns this differentiation supports, on the path */
    for (size_t s = 0; s < x->nstmts; s++) {
        const troupe_asgn_t *t = x->stmts[s].t;
        s_info_t *li = s_info(x, s_lhs(t));
        if (!(li->dep && li->needed) || li->constant)
            continue;
        if (li->param >= 0)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "grad: %s writes parameter #%d %s: parameters must be inputs "
                                 "of the forward pass",
                                 s_describe(t, d, sizeof d), li->tn->id, s_label(li->tn));
        if ((int)s == li->first_write) {
            if (!s_initialising(t))
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "grad: %s is the first write of #%d %s but does not "
                                     "initialise every cell (use initialize_neutral)",
                                     s_describe(t, d, sizeof d), li->tn->id, s_label(li->tn));
            if (li->first_read >= 0 && li->first_read < (int)s)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "grad: #%d %s is read (statement %d) before its first "
                                     "write %s: a recurrent node has no derivative here",
                                     li->tn->id, s_label(li->tn), li->first_read + 1,
                                     s_describe(t, d, sizeof d));
        } else if (t->kind != TROUPE_ASGN_ACCUM_OP || t->u.accum_op.initialize_neutral ||
                   (t->u.accum_op.accum != TROUPE_BINOP_ADD &&
                    t->u.accum_op.accum != TROUPE_BINOP_SUB)) {
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "grad: %s writes #%d %s again: after its first write a node on "
                                 "the path to the loss may only be added to (add or sub, without "
                                 "initialize_neutral)",
                                 s_describe(t, d, sizeof d), li->tn->id, s_label(li->tn));
        }
        if (t->kind == TROUPE_ASGN_ACCUM_OP &&
            (t->u.accum_op.accum == TROUPE_BINOP_MAX || t->u.accum_op.accum == TROUPE_BINOP_MIN) &&
            li->nwrites != 1)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "grad: %s: a max/min accumulation must be the only write of "
                                 "its node",
                                 s_describe(t, d, sizeof d));
        for (int k = 0; k < s_nrhs(t); k++)
            if (s_rhs(t, k)->tn == li->tn && !s_rhs(t, k)->is_merge_buffer)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "grad: %s reads its own lhs: write into a fresh node",
                                     s_describe(t, d, sizeof d));
    }
    return TROUPE_OK;
}

/* ---- the driver ----------------------------------------------------------------------------- */

static troupe_status_t s_close_block(s_ctx_t *x, const char *layer)
{
    if (x->nitems == 0)
        return TROUPE_OK;
    troupe_asgn_t *seq = NULL, *blk = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_seq(x->comp, x->nitems, x->items, &seq));
    x->nitems = 0;
    if (layer) {
        char text[512];
        snprintf(text, sizeof text, "backward: %s", layer);
        TROUPE_RETURN_IF_ERROR(troupe_asgn_block_comment(x->comp, text, seq, &blk));
        seq = blk;
    }
    return s_push(&x->blocks, &x->nblocks, &x->blocks_cap, seq);
}

troupe_status_t troupe_nn_grad_node_new(const troupe_tnode_t *param, troupe_tnode_t **out)
{
    if (!param || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_grad_node_new: NULL argument");
    const char *labels[2] = {s_label(param), "grad"};
    return troupe_tnode_new(labels, 2, param->prec, param->ndims, param->dims, NULL, 0.0, out);
}

troupe_status_t troupe_nn_grad(troupe_asgn_comp_t *comp, troupe_tnode_t *loss, size_t n_params,
                               troupe_tnode_t *const *params, troupe_tnode_t *const *grads,
                               const troupe_nn_grad_opts_t *opts)
{
    if (!comp || !loss || (n_params && (!params || !grads)))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_grad: NULL argument");
    if (troupe_tnode_num_elems(loss) != 1)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_nn_grad: the loss #%d %s has %lld cells; it must be a scalar",
                             loss->id, s_label(loss), (long long)troupe_tnode_num_elems(loss));
    for (size_t p = 0; p < n_params; p++) {
        if (!params[p] || !grads[p])
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "troupe_nn_grad: parameter %zu or its gradient is NULL", p);
        bool same = params[p]->ndims == grads[p]->ndims;
        for (int a = 0; same && a < params[p]->ndims; a++)
            same = params[p]->dims[a] == grads[p]->dims[a];
        if (!same)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "troupe_nn_grad: gradient #%d %s has other dims than parameter "
                                 "#%d %s",
                                 grads[p]->id, s_label(grads[p]), params[p]->id,
                                 s_label(params[p]));
    }
    s_ctx_t x = {.comp = comp, .prec = loss->prec};
    troupe_status_t st = TROUPE_OK;
    troupe_asgn_t *fwd = comp->root;
    x.ninfo = comp->nnodes;
    x.info = calloc(x.ninfo ? x.ninfo : 1, sizeof *x.info);
    if (!x.info) {
        st = s_oom();
        goto out_free;
    }
    for (size_t i = 0; i < x.ninfo; i++)
        x.info[i].tn = comp->nodes[i];
    if (fwd)
        st = s_flatten(&x, fwd, NULL);
    if (st != TROUPE_OK)
        goto out_free;
    s_info_t *li = s_info(&x, loss);
    if (!li || li->tn != loss || x.nstmts == 0) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT,
                           "troupe_nn_grad: the forward pass never writes the loss #%d %s",
                           loss->id, s_label(loss));
        goto out_free;
    }
    st = s_analyse(&x, loss, n_params, params, opts);
    if (st != TROUPE_OK)
        goto out_free;
    if (li->first_write < 0) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT,
                           "troupe_nn_grad: the forward pass never writes the loss #%d %s",
                           loss->id, s_label(loss));
        goto out_free;
    }
    for (size_t p = 0; p < n_params; p++) {
        s_info_t *pi = s_info(&x, params[p]);
        if (pi) {
            if (pi->g && pi->g != grads[p]) {
                st = troupe__error(TROUPE_INVALID_ARGUMENT,
                                   "troupe_nn_grad: parameter #%d %s is listed twice",
                                   params[p]->id, s_label(params[p]));
                goto out_free;
            }
            pi->g = grads[p];
            troupe_tnode_retain(grads[p]);
        }
    }
    /* the seed: d loss / d loss = 1, or the loss scale (opts->loss_scale) */
    {
        troupe_asgn_t *t = NULL;
        troupe_tnode_t *scale = opts ? opts->loss_scale : NULL;
        st = s_grad_of(&x, li);
        if (st == TROUPE_OK && scale != NULL && scale->ndims != 0)
            st = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "troupe_nn_grad: the loss scale #%d %s is not a scalar", scale->id,
                               s_label(scale));
        if (st == TROUPE_OK && scale == NULL)
            st = troupe_asgn_fetch_constant(comp, li->g, 1.0, &t);
        else if (st == TROUPE_OK)
            st = troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, li->g, TROUPE_UNOP_IDENTITY,
                                        troupe_asgn_node(scale), "=>", &t);
        if (st == TROUPE_OK)
            st = s_push(&x.items, &x.nitems, &x.items_cap, t);
        li->g_init = true;
    }
    const char *layer = x.nstmts ? x.stmts[x.nstmts - 1].layer : NULL;
    for (size_t s = x.nstmts; st == TROUPE_OK && s-- > 0;) {
        if (x.stmts[s].layer != layer) {
            st = s_close_block(&x, layer);
            layer = x.stmts[s].layer;
        }
        if (st == TROUPE_OK)
            st = s_backprop(&x, x.stmts[s].t);
    }
    if (st == TROUPE_OK)
        st = s_close_block(&x, layer);
    /* parameters the loss does not reach: a zero gradient, and a warning */
    for (size_t p = 0; st == TROUPE_OK && p < n_params; p++) {
        s_info_t *pi = s_info(&x, params[p]);
        if (pi && pi->g_init)
            continue;
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_IR,
                   "grad: parameter #%d %s does not reach the loss #%d %s: its gradient is zero",
                   params[p]->id, s_label(params[p]), loss->id, s_label(loss));
        troupe_asgn_t *t = NULL;
        st = troupe_asgn_fetch_constant(comp, grads[p], 0.0, &t);
        if (st == TROUPE_OK)
            st = s_push(&x.items, &x.nitems, &x.items_cap, t);
        if (st == TROUPE_OK && pi)
            pi->g_init = true;
    }
    if (st == TROUPE_OK)
        st = s_close_block(&x, "parameters that do not reach the loss");
    if (st == TROUPE_OK) {
        /* root := SEQ(forward, constants, backward blocks) */
        troupe_asgn_t *consts = NULL, *bwd = NULL, *all = NULL, *root = NULL;
        st = troupe_asgn_seq(comp, x.nconsts_items, x.consts_items, &consts);
        if (st == TROUPE_OK)
            st = troupe_asgn_seq(comp, x.nblocks, x.blocks, &bwd);
        if (st == TROUPE_OK)
            st = troupe_asgn_seq2(comp, consts, bwd, &all);
        if (st == TROUPE_OK)
            st = troupe_asgn_seq2(comp, fwd, all, &root);
        if (st == TROUPE_OK)
            troupe_asgn_comp_set_root(comp, root);
    }
out_free:
    for (size_t i = 0; i < x.ninfo; i++)
        troupe_tnode_release(&x.info[i].g);
    free(x.info);
    free(x.stmts);
    free(x.items);
    free(x.blocks);
    free(x.consts_items);
    return st;
}
