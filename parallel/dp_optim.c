/* troupe — the optimizer routine of the data-parallel driver (parallel/dp.h): SGD with momentum
 * and weight decay (PyTorch's SGD, dampening 0, nesterov off) and AdamW (Loshchilov & Hutter;
 * PyTorch's AdamW), written as ir/assign computations over every parameter, run on the owner
 * stream. Values that change between steps (learning rate, bias corrections) come from the
 * hosted "hyper" node, uploaded before each step's optimizer run, so the routine is compiled
 * once.
 */
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/fault_impl.h"
#include "base/fpmode_impl.h"
#include "base/log.h"
#include "base/vec.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

troupe_prec_t troupe__dp_state_prec(troupe_prec_t p)
{
    return p == TROUPE_PREC_DOUBLE ? TROUPE_PREC_DOUBLE : TROUPE_PREC_SINGLE;
}

int troupe__dp_nstate(const troupe_optimizer_t *opt)
{
    if (opt->kind == TROUPE_OPT_ADAMW)
        return 2;
    return opt->momentum != 0.0 ? 1 : 0;
}

troupe_optimizer_t troupe_optimizer_default(troupe_optimizer_kind_t kind)
{
    troupe_optimizer_t o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    if (kind == TROUPE_OPT_ADAMW) {
        o.lr = 1e-3;
        o.beta1 = 0.9;
        o.beta2 = 0.999;
        o.eps = 1e-8;
        o.weight_decay = 0.01;
    } else {
        o.kind = TROUPE_OPT_SGD;
        o.lr = 0.1;
        o.momentum = 0.9;
    }
    return o;
}

const char *troupe_optimizer_name(troupe_optimizer_kind_t kind)
{
    switch (kind) {
    case TROUPE_OPT_SGD:
        return "sgd";
    case TROUPE_OPT_ADAMW:
        return "adamw";
    }
    return "invalid";
}

troupe_status_t troupe_optimizer_parse(const char *text, troupe_optimizer_kind_t *out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "optimizer_parse: NULL out");
    if (text && strcmp(text, "sgd") == 0) {
        *out = TROUPE_OPT_SGD;
        return TROUPE_OK;
    }
    if (text && strcmp(text, "adamw") == 0) {
        *out = TROUPE_OPT_ADAMW;
        return TROUPE_OK;
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT,
                         "unknown optimizer '%s': the choices are sgd, adamw",
                         text ? text : "(null)");
}

troupe_status_t troupe__dp_check_optimizer(const troupe_optimizer_t *o)
{
    if (o->kind != TROUPE_OPT_SGD && o->kind != TROUPE_OPT_ADAMW)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp: optimizer kind %d is neither sgd (%d) nor adamw (%d)",
                             (int)o->kind, (int)TROUPE_OPT_SGD, (int)TROUPE_OPT_ADAMW);
    const char *name = troupe_optimizer_name(o->kind);
    if (!(o->lr > 0.0) || !isfinite(o->lr))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp: optimizer %s: learning rate lr = %g must be finite and > 0", name,
                             o->lr);
    if (!(o->weight_decay >= 0.0) || !isfinite(o->weight_decay))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp: optimizer %s: weight_decay = %g must be finite and >= 0", name,
                             o->weight_decay);
    if (o->kind == TROUPE_OPT_SGD) {
        if (!(o->momentum >= 0.0 && o->momentum < 1.0))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp: optimizer sgd: momentum = %g must be in [0, 1)", o->momentum);
        return TROUPE_OK;
    }
    if (!(o->beta1 >= 0.0 && o->beta1 < 1.0))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp: optimizer adamw: beta1 = %g must be in [0, 1)", o->beta1);
    if (!(o->beta2 >= 0.0 && o->beta2 < 1.0))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp: optimizer adamw: beta2 = %g must be in [0, 1)", o->beta2);
    if (!(o->eps > 0.0) || !isfinite(o->eps))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp: optimizer adamw: eps = %g must be finite and > 0", o->eps);
    return TROUPE_OK;
}

void troupe__dp_hyper_values(const troupe_dp_t *dp, int64_t t, double *h)
{
    const troupe_optimizer_t *o = &dp->opt;
    for (int i = 0; i < TROUPE__DP_HYPER_COUNT; i++)
        h[i] = 0.0;
    /* the gradient reaching the optimizer is the sum over the N local replicas of the R ranks
     * (the allreduce sums: dividing there would cost a pass over every gradient) */
    /* 1 / (K * N * R): K micro-steps (grad_accum) of N * R replicas when the ranks agree */
    h[TROUPE__DP_H_INV_N] = 1.0 / ((double)dp->replicas * (double)dp->strat.accum);
    if (dp->ls_on) /* the gradients arrive multiplied by the loss scale */
        h[TROUPE__DP_H_INV_N] /= dp->ls_scale;
    h[TROUPE__DP_H_CLIP] = dp->grad_clip;
    h[TROUPE__DP_H_CLIP_EPS] = 1e-6;
    h[TROUPE__DP_H_ONE] = 1.0;
    if (o->kind == TROUPE_OPT_SGD) {
        h[TROUPE__DP_H_SGD_WD] = o->weight_decay;
        h[TROUPE__DP_H_SGD_MOMENTUM] = o->momentum;
        h[TROUPE__DP_H_SGD_LR] = o->lr;
        return;
    }
    h[TROUPE__DP_H_ADAM_DECAY] = 1.0 - o->lr * o->weight_decay;
    h[TROUPE__DP_H_ADAM_B1] = o->beta1;
    h[TROUPE__DP_H_ADAM_1MB1] = 1.0 - o->beta1;
    h[TROUPE__DP_H_ADAM_B2] = o->beta2;
    h[TROUPE__DP_H_ADAM_1MB2] = 1.0 - o->beta2;
    h[TROUPE__DP_H_ADAM_IBC2] = 1.0 / (1.0 - pow(o->beta2, (double)t));
    h[TROUPE__DP_H_ADAM_EPS] = o->eps;
    h[TROUPE__DP_H_ADAM_LR_BC1] = o->lr / (1.0 - pow(o->beta1, (double)t));
}

/* ---- building the comp ---------------------------------------------------------------------- */

typedef struct s_builder {
    troupe_dp_t *dp;
    troupe_asgn_comp_t *comp;
    troupe_asgn_t **items;
    size_t nitems, cap;
    char letters[TROUPE_MAX_DIMS + 1]; /* the current parameter's axes, "ab.." */
    troupe_tnode_t *clip; /* the clip factor (a double scalar), NULL without grad_clip */
    /* loss scaling: the current parameter's targets (p, m, v: the real nodes, or with loss
     * scaling their shadows, committed by s_commit) */
    troupe_tnode_t *p, *m, *v;
} s_builder_t;

static troupe_status_t s_push(s_builder_t *b, troupe_asgn_t *t)
{
    if (!TROUPE__VEC_PUSH(b->items, b->nitems, b->cap, t))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory building the optimizer");
    return TROUPE_OK;
}

/* A node like `like` (dims) in precision `prec`, labelled "<like's label>_<suffix>". */
static troupe_status_t s_new_like(s_builder_t *b, troupe_tnode_t *like, troupe_prec_t prec,
                                  const char *suffix, bool temp, troupe_tnode_t **out)
{
    char base[96];
    troupe_tnode_label_string(like, base, sizeof base);
    char label[128];
    snprintf(label, sizeof label, "%s_%s", base, suffix);
    const char *l[1] = {label};
    TROUPE_RETURN_IF_ERROR(troupe_tnode_new(l, 1, prec, like->ndims, like->dims, NULL, 0.0, out));
    if (temp) {
        troupe_dp_t *dp = b->dp;
        if (!TROUPE__VEC_PUSH(dp->temps, dp->ntemps, dp->temps_cap, *out)) {
            troupe_tnode_release(out);
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
        }
    }
    return TROUPE_OK;
}

/* Projection specs over the current parameter's axes L: "L=>L", "L,L=>L", "L,[k]=>L",
 * "[k]=>^L" (a hyperparameter broadcast over every axis, marked per ir/projection.h). */
static void s_spec(const s_builder_t *b, char *buf, size_t cap, int nnodes, int hyper_slot)
{
    const char *L = b->letters;
    if (nnodes == 0) {
        char M[2 * TROUPE_MAX_DIMS + 1];
        size_t n = 0;
        for (const char *l = L; *l; l++) {
            M[n++] = '^';
            M[n++] = *l;
        }
        M[n] = '\0';
        snprintf(buf, cap, "[%d]=>%s", hyper_slot, M);
    } else if (nnodes == 1 && hyper_slot < 0)
        snprintf(buf, cap, "%s=>%s", L, L);
    else if (nnodes == 1)
        snprintf(buf, cap, "%s,[%d]=>%s", L, hyper_slot, L);
    else
        snprintf(buf, cap, "%s,%s=>%s", L, L, L);
}

/* lhs (accum)= x * hyper[slot]; accum ARG2 is a plain assignment. */
static troupe_status_t s_scale(s_builder_t *b, troupe_binop_t accum, troupe_tnode_t *lhs,
                               troupe_tnode_t *x, int slot)
{
    char spec[64];
    s_spec(b, spec, sizeof spec, 1, slot);
    troupe_asgn_t *t = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_binop(b->comp, false, accum, lhs, TROUPE_BINOP_MUL,
                                                   troupe_asgn_node(x),
                                                   troupe_asgn_node(b->dp->hyper), spec, &t));
    return s_push(b, t);
}

/* lhs (accum)= x op y, pointwise. */
static troupe_status_t s_pointwise(s_builder_t *b, troupe_binop_t accum, troupe_tnode_t *lhs,
                                   troupe_binop_t op, troupe_tnode_t *x, troupe_tnode_t *y)
{
    char spec[64];
    s_spec(b, spec, sizeof spec, 2, -1);
    troupe_asgn_t *t = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_binop(
        b->comp, false, accum, lhs, op, troupe_asgn_node(x), troupe_asgn_node(y), spec, &t));
    return s_push(b, t);
}

/* Sets b->letters to parameter i's axes. */
static void s_letters(s_builder_t *b, size_t i)
{
    int nd = b->dp->params[i]->ndims;
    for (int a = 0; a < nd; a++)
        b->letters[a] = (char)('a' + a);
    b->letters[nd] = '\0';
}

/* A double scalar temporary labelled `label`, kept in dp->temps. */
static troupe_status_t s_new_scalar(s_builder_t *b, const char *label, troupe_tnode_t **out)
{
    troupe_dp_t *dp = b->dp;
    const char *l[1] = {label};
    TROUPE_RETURN_IF_ERROR(
        troupe_tnode_new(l, 1, TROUPE_PREC_DOUBLE, 0, NULL, NULL, 0.0, out));
    if (!TROUPE__VEC_PUSH(dp->temps, dp->ntemps, dp->temps_cap, *out)) {
        troupe_tnode_release(out);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    }
    return TROUPE_OK;
}

/* Global-norm clipping (PyTorch's torch.nn.utils.clip_grad_norm_ with norm_type 2), ahead of
 * every parameter's update: with s the summed gradients (the optimizer scales them by 1/N),
 *   sq := sum over every gradient, in the params' order, of s^2     (double)
 *   norm := sqrt(sq) / N + 1e-6;  clip := min(C / norm, 1)          (double)
 * and each update below takes g = clip * s / N. The routine runs the same code on the same
 * sums on every rank, in one order, so the factor is the same bits everywhere and run to run. */
static troupe_status_t s_clip(s_builder_t *b)
{
    troupe_dp_t *dp = b->dp;
    troupe_tnode_t *sq = NULL, *norm = NULL, *clip = NULL;
    TROUPE_RETURN_IF_ERROR(s_new_scalar(b, "dp_grad_sqnorm", &sq));
    TROUPE_RETURN_IF_ERROR(s_new_scalar(b, "dp_grad_norm", &norm));
    TROUPE_RETURN_IF_ERROR(s_new_scalar(b, "dp_grad_clip", &clip));
    troupe_asgn_t *a = NULL;
    char spec[64];
    for (size_t i = 0; i < dp->n_params; i++) {
        s_letters(b, i);
        snprintf(spec, sizeof spec, "%s,%s=>", b->letters, b->letters);
        TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_binop(
            b->comp, i == 0, TROUPE_BINOP_ADD, sq, TROUPE_BINOP_MUL,
            troupe_asgn_node(dp->grads[i]), troupe_asgn_node(dp->grads[i]), spec, &a));
        TROUPE_RETURN_IF_ERROR(s_push(b, a));
    }
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_unop(b->comp, false, TROUPE_BINOP_ARG2, norm,
                                                  TROUPE_UNOP_SQRT, troupe_asgn_node(sq), "=>",
                                                  &a));
    TROUPE_RETURN_IF_ERROR(s_push(b, a));
    /* norm := norm * hyper[INV_N];  norm := norm + hyper[CLIP_EPS] */
    static const struct {
        troupe_binop_t op;
        int slot;
    } s_ops[2] = {{TROUPE_BINOP_MUL, TROUPE__DP_H_INV_N}, {TROUPE_BINOP_ADD, TROUPE__DP_H_CLIP_EPS}};
    for (int k = 0; k < 2; k++) {
        snprintf(spec, sizeof spec, ",[%d]=>", s_ops[k].slot);
        TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_binop(b->comp, false, TROUPE_BINOP_ARG2, norm,
                                                       s_ops[k].op, troupe_asgn_node(norm),
                                                       troupe_asgn_node(dp->hyper), spec, &a));
        TROUPE_RETURN_IF_ERROR(s_push(b, a));
    }
    snprintf(spec, sizeof spec, "[%d],=>", TROUPE__DP_H_CLIP);
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_binop(b->comp, false, TROUPE_BINOP_ARG2, clip,
                                                   TROUPE_BINOP_DIV, troupe_asgn_node(dp->hyper),
                                                   troupe_asgn_node(norm), spec, &a));
    TROUPE_RETURN_IF_ERROR(s_push(b, a));
    snprintf(spec, sizeof spec, ",[%d]=>", TROUPE__DP_H_ONE);
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_binop(b->comp, false, TROUPE_BINOP_ARG2, clip,
                                                   TROUPE_BINOP_MIN, troupe_asgn_node(clip),
                                                   troupe_asgn_node(dp->hyper), spec, &a));
    TROUPE_RETURN_IF_ERROR(s_push(b, a));
    b->clip = clip;
    return TROUPE_OK;
}

/* t := t * clip (the current parameter's axes; nothing without grad_clip). */
static troupe_status_t s_apply_clip(s_builder_t *b, troupe_tnode_t *t)
{
    if (b->clip == NULL)
        return TROUPE_OK;
    char spec[64];
    snprintf(spec, sizeof spec, "%s,=>%s", b->letters, b->letters);
    troupe_asgn_t *a = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_binop(b->comp, false, TROUPE_BINOP_ARG2, t,
                                                   TROUPE_BINOP_MUL, troupe_asgn_node(t),
                                                   troupe_asgn_node(b->clip), spec, &a));
    return s_push(b, a);
}

/* SGD for parameter i:  t := g / N;  t += wd p;  m := momentum m;  m += t;  p -= lr (m | t). */
static troupe_status_t s_sgd(s_builder_t *b, size_t i)
{
    troupe_dp_t *dp = b->dp;
    troupe_tnode_t *p = b->p, *g = dp->grads[i];
    troupe_prec_t sp = troupe__dp_state_prec(p->prec);
    troupe_tnode_t *t = NULL;
    TROUPE_RETURN_IF_ERROR(s_new_like(b, p, sp, "sgd_g", true, &t));
    TROUPE_RETURN_IF_ERROR(s_scale(b, TROUPE_BINOP_ARG2, t, g, TROUPE__DP_H_INV_N));
    TROUPE_RETURN_IF_ERROR(s_apply_clip(b, t));
    if (dp->opt.weight_decay != 0.0)
        TROUPE_RETURN_IF_ERROR(s_scale(b, TROUPE_BINOP_ADD, t, p, TROUPE__DP_H_SGD_WD));
    troupe_tnode_t *step = t;
    if (dp->nstate == 1) {
        troupe_tnode_t *m = b->m;
        TROUPE_RETURN_IF_ERROR(s_scale(b, TROUPE_BINOP_ARG2, m, m, TROUPE__DP_H_SGD_MOMENTUM));
        char spec[64];
        s_spec(b, spec, sizeof spec, 1, -1);
        troupe_asgn_t *a = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_unop(b->comp, false, TROUPE_BINOP_ADD, m,
                                                      TROUPE_UNOP_IDENTITY, troupe_asgn_node(t),
                                                      spec, &a));
        TROUPE_RETURN_IF_ERROR(s_push(b, a));
        step = m;
    }
    return s_scale(b, TROUPE_BINOP_SUB, p, step, TROUPE__DP_H_SGD_LR);
}

/* AdamW for parameter i:
 *   p := (1 - lr wd) p;  t := g / N;  m := b1 m;  m += t (1 - b1);
 *   u := t (1 - b2);  v := b2 v;  v += t u;
 *   d := sqrt(v / (1 - b2^t)) + eps;  r := m / d;  p -= (lr / (1 - b1^t)) r. */
static troupe_status_t s_adamw(s_builder_t *b, size_t i)
{
    troupe_dp_t *dp = b->dp;
    troupe_tnode_t *p = b->p, *g = dp->grads[i];
    troupe_tnode_t *m = b->m, *v = b->v;
    troupe_prec_t sp = troupe__dp_state_prec(p->prec);
    troupe_tnode_t *t = NULL, *u = NULL, *d = NULL, *r = NULL;
    TROUPE_RETURN_IF_ERROR(s_new_like(b, p, sp, "adamw_g", true, &t));
    TROUPE_RETURN_IF_ERROR(s_new_like(b, p, sp, "adamw_g2", true, &u));
    TROUPE_RETURN_IF_ERROR(s_new_like(b, p, sp, "adamw_denom", true, &d));
    TROUPE_RETURN_IF_ERROR(s_new_like(b, p, sp, "adamw_ratio", true, &r));
    if (dp->opt.weight_decay != 0.0)
        TROUPE_RETURN_IF_ERROR(s_scale(b, TROUPE_BINOP_ARG2, p, p, TROUPE__DP_H_ADAM_DECAY));
    TROUPE_RETURN_IF_ERROR(s_scale(b, TROUPE_BINOP_ARG2, t, g, TROUPE__DP_H_INV_N));
    TROUPE_RETURN_IF_ERROR(s_apply_clip(b, t));
    TROUPE_RETURN_IF_ERROR(s_scale(b, TROUPE_BINOP_ARG2, m, m, TROUPE__DP_H_ADAM_B1));
    TROUPE_RETURN_IF_ERROR(s_scale(b, TROUPE_BINOP_ADD, m, t, TROUPE__DP_H_ADAM_1MB1));
    TROUPE_RETURN_IF_ERROR(s_scale(b, TROUPE_BINOP_ARG2, u, t, TROUPE__DP_H_ADAM_1MB2));
    TROUPE_RETURN_IF_ERROR(s_scale(b, TROUPE_BINOP_ARG2, v, v, TROUPE__DP_H_ADAM_B2));
    TROUPE_RETURN_IF_ERROR(s_pointwise(b, TROUPE_BINOP_ADD, v, TROUPE_BINOP_MUL, t, u));
    TROUPE_RETURN_IF_ERROR(s_scale(b, TROUPE_BINOP_ARG2, d, v, TROUPE__DP_H_ADAM_IBC2));
    char spec[64];
    troupe_asgn_t *a = NULL;
    s_spec(b, spec, sizeof spec, 1, -1);
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_unop(b->comp, false, TROUPE_BINOP_ARG2, d,
                                                  TROUPE_UNOP_SQRT, troupe_asgn_node(d), spec, &a));
    TROUPE_RETURN_IF_ERROR(s_push(b, a));
    s_spec(b, spec, sizeof spec, 0, TROUPE__DP_H_ADAM_EPS);
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_unop(b->comp, false, TROUPE_BINOP_ADD, d,
                                                  TROUPE_UNOP_IDENTITY, troupe_asgn_node(dp->hyper),
                                                  spec, &a));
    TROUPE_RETURN_IF_ERROR(s_push(b, a));
    TROUPE_RETURN_IF_ERROR(s_pointwise(b, TROUPE_BINOP_ARG2, r, TROUPE_BINOP_DIV, m, d));
    return s_scale(b, TROUPE_BINOP_SUB, p, r, TROUPE__DP_H_ADAM_LR_BC1);
}

/* Loss scaling's verdict, ahead of everything else (docs/parallel.md, Loss scaling):
 *   finite := sum over every gradient, in the params' order, of g * 0     (double)
 * which is 0 when every element is finite and nan when one is inf or nan. The routine runs the
 * same code on the same sums on every rank, so the verdict agrees everywhere. */
static troupe_status_t s_finite(s_builder_t *b)
{
    troupe_dp_t *dp = b->dp;
    char spec[64];
    for (size_t i = 0; i < dp->n_params; i++) {
        s_letters(b, i);
        snprintf(spec, sizeof spec, "%s,[%d]=>", b->letters, TROUPE__DP_H_ZERO);
        troupe_asgn_t *a = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_binop(
            b->comp, i == 0, TROUPE_BINOP_ADD, dp->ls_finite, TROUPE_BINOP_MUL,
            troupe_asgn_node(dp->grads[i]), troupe_asgn_node(dp->hyper), spec, &a));
        TROUPE_RETURN_IF_ERROR(s_push(b, a));
    }
    return TROUPE_OK;
}

/* *shadow := a copy of x (the update writes the copy; s_commit keeps it only for a finite
 * gradient); x itself without loss scaling. */
static troupe_status_t s_shadow(s_builder_t *b, troupe_tnode_t *x, troupe_tnode_t **shadow)
{
    *shadow = x;
    if (x == NULL || !b->dp->ls_on)
        return TROUPE_OK;
    troupe_tnode_t *c = NULL;
    TROUPE_RETURN_IF_ERROR(s_new_like(b, x, x->prec, "ls_new", true, &c));
    char spec[64];
    s_spec(b, spec, sizeof spec, 1, -1);
    troupe_asgn_t *a = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_unop(
        b->comp, false, TROUPE_BINOP_ARG2, c, TROUPE_UNOP_IDENTITY, troupe_asgn_node(x), spec, &a));
    TROUPE_RETURN_IF_ERROR(s_push(b, a));
    *shadow = c;
    return TROUPE_OK;
}

/* x := finite != 0 ? x : shadow (a nan verdict keeps the old value; nothing when they are one
 * node). */
static troupe_status_t s_commit(s_builder_t *b, troupe_tnode_t *x, troupe_tnode_t *shadow)
{
    if (x == NULL || x == shadow)
        return TROUPE_OK;
    char spec[64];
    snprintf(spec, sizeof spec, ",%s,%s=>%s", b->letters, b->letters, b->letters);
    troupe_asgn_t *a = NULL;
    TROUPE_RETURN_IF_ERROR(
        troupe_asgn_accum_ternop(b->comp, false, TROUPE_BINOP_ARG2, x, TROUPE_TERNOP_WHERE,
                                 troupe_asgn_node(b->dp->ls_finite), troupe_asgn_node(x),
                                 troupe_asgn_node(shadow), spec, &a));
    return s_push(b, a);
}

/* Parameter i's update: on the nodes themselves, or with loss scaling on shadows committed
 * after it. */
static troupe_status_t s_param_update(s_builder_t *b, size_t i)
{
    troupe_dp_t *dp = b->dp;
    s_letters(b, i);
    troupe_tnode_t *p = dp->params[i];
    troupe_tnode_t *m = dp->nstate >= 1 ? dp->state[i * (size_t)dp->nstate] : NULL;
    troupe_tnode_t *v = dp->nstate == 2 ? dp->state[i * (size_t)dp->nstate + 1] : NULL;
    TROUPE_RETURN_IF_ERROR(s_shadow(b, p, &b->p));
    TROUPE_RETURN_IF_ERROR(s_shadow(b, m, &b->m));
    TROUPE_RETURN_IF_ERROR(s_shadow(b, v, &b->v));
    TROUPE_RETURN_IF_ERROR(dp->opt.kind == TROUPE_OPT_ADAMW ? s_adamw(b, i) : s_sgd(b, i));
    TROUPE_RETURN_IF_ERROR(s_commit(b, p, b->p));
    TROUPE_RETURN_IF_ERROR(s_commit(b, m, b->m));
    return s_commit(b, v, b->v);
}

troupe_status_t troupe__dp_optimizer_comp(troupe_dp_t *dp, troupe_asgn_comp_t **out)
{
    *out = NULL;
    s_builder_t b;
    memset(&b, 0, sizeof b);
    b.dp = dp;
    troupe_status_t st = troupe_asgn_comp_new(&b.comp);
    if (st == TROUPE_OK && dp->ls_on)
        st = s_finite(&b);
    if (st == TROUPE_OK && dp->grad_clip > 0.0)
        st = s_clip(&b);
    for (size_t i = 0; i < dp->n_params && st == TROUPE_OK; i++)
        st = s_param_update(&b, i);
    troupe_asgn_t *root = NULL;
    if (st == TROUPE_OK)
        st = troupe_asgn_seq(b.comp, b.nitems, b.items, &root);
    troupe_free(b.items);
    if (st != TROUPE_OK) {
        troupe_asgn_comp_destroy(&b.comp);
        return st;
    }
    troupe_asgn_comp_set_root(b.comp, root);
    *out = b.comp;
    return TROUPE_OK;
}

/* ---- the fused update (troupe_coll_apply_t) -------------------------------------------------- */

uint64_t troupe__dp_apply_id(const troupe_dp_t *dp)
{
    /* "dpupd" in the high bytes, then the kind and the state count */
    return UINT64_C(0x6470757064000000) | (uint64_t)dp->opt.kind << 8 | (uint64_t)dp->nstate;
}

/* No contraction of a product and a sum into an fma: the optimizer routine has none
 * (troupe_compile_unfused), and the build's ISO C mode keeps GCC from making any; Clang needs
 * the pragma, as the generated code has it. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* One loop per form, each statement of s_sgd / s_adamw per element, each operation rounded to
 * single. `decay` and
 * `momentum` are constants at each call, so every form compiles to its own vector loop. */
static inline void s_apply_sgd_form(const troupe__dp_apply_arg_t *a, int64_t n,
                                    const float *restrict g, float *restrict p,
                                    float *restrict m, bool decay, bool momentum)
{
    const float inv_n = a->h[TROUPE__DP_H_INV_N], wd = a->h[TROUPE__DP_H_SGD_WD],
                mu = a->h[TROUPE__DP_H_SGD_MOMENTUM], lr = a->h[TROUPE__DP_H_SGD_LR];
    for (int64_t e = 0; e < n; e++) {
        float t = g[e] * inv_n;
        if (decay)
            t = t + p[e] * wd;
        if (momentum) {
            float v = m[e] * mu;
            v = v + t;
            m[e] = v;
            t = v;
        }
        p[e] = p[e] - t * lr;
    }
}

TROUPE__DP_CLONED static void s_apply_sgd(const troupe__dp_apply_arg_t *a, int64_t n, const float *g,
                                 float *p, float *m)
{
    if (m != NULL && a->decay)
        s_apply_sgd_form(a, n, g, p, m, true, true);
    else if (m != NULL)
        s_apply_sgd_form(a, n, g, p, m, false, true);
    else if (a->decay)
        s_apply_sgd_form(a, n, g, p, NULL, true, false);
    else
        s_apply_sgd_form(a, n, g, p, NULL, false, false);
}

TROUPE__DP_CLONED static void s_apply_adamw(const troupe__dp_apply_arg_t *a, int64_t n, const float *restrict g,
                          float *restrict p, float *restrict m, float *restrict v)
{
    const float *h = a->h;
    const float inv_n = h[TROUPE__DP_H_INV_N], decay = h[TROUPE__DP_H_ADAM_DECAY],
                b1 = h[TROUPE__DP_H_ADAM_B1], omb1 = h[TROUPE__DP_H_ADAM_1MB1],
                b2 = h[TROUPE__DP_H_ADAM_B2], omb2 = h[TROUPE__DP_H_ADAM_1MB2],
                ibc2 = h[TROUPE__DP_H_ADAM_IBC2], eps = h[TROUPE__DP_H_ADAM_EPS],
                lr_bc1 = h[TROUPE__DP_H_ADAM_LR_BC1];
    for (int64_t e = 0; e < n; e++) {
        float pe = p[e] * decay; /* without weight decay, 1 - lr * 0: exactly p */
        float t = g[e] * inv_n;
        float me = m[e] * b1;
        me = me + t * omb1;
        float u = t * omb2;
        float ve = v[e] * b2;
        ve = ve + t * u;
        float d = ve * ibc2;
        d = sqrtf(d);
        d = d + eps;
        float r = me / d;
        m[e] = me;
        v[e] = ve;
        p[e] = pe - r * lr_bc1;
    }
}

void troupe__dp_apply(const void *arg, int64_t n, const float *sum, float *const *side)
{
    const troupe__dp_apply_arg_t *a = arg;
    /* the routine's floating-point mode: subnormals flushed unless TROUPE_DENORMALS=keep
     * (devices/host runs every routine so); the transport's thread runs this */
    bool flush = troupe_config_flush_denormals();
    troupe__fp_mode_t prev = flush ? troupe__fp_flush_enter() : (troupe__fp_mode_t)0;
    if (a->kind == TROUPE_OPT_ADAMW)
        s_apply_adamw(a, n, sum, side[0], side[1], side[2]);
    else
        s_apply_sgd(a, n, sum, side[0], a->nstate > 0 ? side[1] : NULL);
    if (flush)
        troupe__fp_restore(prev);
}

/* ---- precision and dynamic loss scaling (docs/parallel.md, Loss scaling) ----------------------
 */

const char *troupe_dp_precision_name(troupe_dp_precision_t p)
{
    switch (p) {
    case TROUPE_DP_PRECISION_FP32:
        return "fp32";
    case TROUPE_DP_PRECISION_BF16:
        return "bf16";
    case TROUPE_DP_PRECISION_FP16:
        return "fp16";
    }
    return "invalid";
}

troupe_status_t troupe_dp_precision_parse(const char *text, troupe_dp_precision_t *out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_precision_parse: NULL out");
    for (int p = TROUPE_DP_PRECISION_FP32; p <= TROUPE_DP_PRECISION_FP16; p++)
        if (text && strcmp(text, troupe_dp_precision_name((troupe_dp_precision_t)p)) == 0) {
            *out = (troupe_dp_precision_t)p;
            return TROUPE_OK;
        }
    return troupe__error(TROUPE_INVALID_ARGUMENT,
                         "unknown precision '%s': the choices are fp32, bf16, fp16",
                         text ? text : "(null)");
}

troupe_status_t troupe__dp_loss_scale_config(troupe_dp_t *dp, const troupe_dp_config_t *cfg,
                                             const troupe_dp_model_t *m)
{
    if ((unsigned)cfg->precision > (unsigned)TROUPE_DP_PRECISION_FP16)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: precision %d is none of fp32 (0), bf16 (1), fp16 (2)",
                             (int)cfg->precision);
    if ((unsigned)cfg->loss_scaling > (unsigned)TROUPE_DP_LOSS_SCALING_OFF)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: loss_scaling %d is none of auto (0), on (1), off (2)",
                             (int)cfg->loss_scaling);
    dp->precision = cfg->precision;
    dp->ls_on = cfg->loss_scaling == TROUPE_DP_LOSS_SCALING_ON ||
                (cfg->loss_scaling == TROUPE_DP_LOSS_SCALING_AUTO &&
                 cfg->precision == TROUPE_DP_PRECISION_FP16);
    double init = cfg->loss_scale_init != 0.0 ? cfg->loss_scale_init : TROUPE_DP_LOSS_SCALE_INIT;
    double growth =
        cfg->loss_scale_growth != 0.0 ? cfg->loss_scale_growth : TROUPE_DP_LOSS_SCALE_GROWTH;
    double backoff =
        cfg->loss_scale_backoff != 0.0 ? cfg->loss_scale_backoff : TROUPE_DP_LOSS_SCALE_BACKOFF;
    int64_t interval = cfg->loss_scale_interval != 0 ? cfg->loss_scale_interval
                                                     : (int64_t)TROUPE_DP_LOSS_SCALE_INTERVAL;
    if (!(init > 0.0) || !isfinite(init))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: loss_scale_init = %g must be finite and > 0", init);
    if (!(growth > 1.0) || !isfinite(growth))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: loss_scale_growth = %g must be finite and > 1", growth);
    if (!(backoff > 0.0 && backoff < 1.0))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: loss_scale_backoff = %g must be in (0, 1)", backoff);
    if (interval < 1)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: loss_scale_interval = %lld must be >= 1",
                             (long long)interval);
    if (m->loss_scale != NULL &&
        (m->loss_scale->ndims != 0 ||
         (m->loss_scale->prec != TROUPE_PREC_SINGLE && m->loss_scale->prec != TROUPE_PREC_DOUBLE)))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: loss_scale must be a single or double scalar node");
    if (dp->ls_on && m->loss_scale == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: loss scaling is on (precision %s, loss_scaling %s) but the "
                             "model has no loss_scale node for grad_comp to start from",
                             troupe_dp_precision_name(cfg->precision),
                             cfg->loss_scaling == TROUPE_DP_LOSS_SCALING_ON ? "on" : "auto");
    dp->ls_scale = init;
    dp->ls_growth = growth;
    dp->ls_backoff = backoff;
    dp->ls_interval = interval;
    if (m->loss_scale != NULL) {
        dp->ls_node = m->loss_scale;
        troupe_tnode_retain(dp->ls_node);
        /* the value every replica starts from (1 without loss scaling) */
        double seed = dp->ls_on ? init : 1.0;
        TROUPE_RETURN_IF_ERROR(troupe_tnode_set_values(dp->ls_node, &seed, 1));
        dp->ls_seed_last = seed;
        dp->ls_seed_uploaded = true;
    }
    if (dp->ls_on)
        TROUPE_RETURN_IF_ERROR(troupe__dp_new_hosted("dp_grad_finite", NULL, TROUPE_PREC_DOUBLE, 0,
                                                     NULL, &dp->ls_finite));
    return TROUPE_OK;
}

troupe_status_t troupe__dp_loss_scale_settle(troupe_dp_t *dp)
{
    if (!dp->ls_on || !dp->ls_pending)
        return TROUPE_OK;
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_to_host(troupe__dp_tail(dp, 0), dp->ls_finite, &ev));
    TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(&ev, "dp: reading the loss scaling verdict"));
    void *host = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(dp->ls_finite, &host));
    double finite = troupe_prec_load_double(TROUPE_PREC_DOUBLE, host);
    dp->ls_pending = false;
    int64_t step = dp->steps - 1;
    if (finite == 0.0) {
        if (++dp->ls_good >= dp->ls_interval) {
            dp->ls_scale *= dp->ls_growth;
            dp->ls_good = 0;
            TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL,
                       "dp: %lld good steps in a row after step %lld: loss scale %g -> %g",
                       (long long)dp->ls_interval, (long long)step, dp->ls_scale / dp->ls_growth,
                       dp->ls_scale);
        }
        return TROUPE_OK;
    }
    double was = dp->ls_scale;
    dp->ls_scale *= dp->ls_backoff;
    dp->ls_good = 0;
    dp->ls_skipped++;
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL,
               "dp: step %lld skipped: the averaged gradient holds an inf or nan; loss scale "
               "%g -> %g (%lld skipped)",
               (long long)step, was, dp->ls_scale, (long long)dp->ls_skipped);
    return TROUPE_OK;
}

troupe_status_t troupe__dp_loss_scale_begin(troupe_dp_t *dp)
{
    if (!dp->ls_on)
        return TROUPE_OK;
    TROUPE_RETURN_IF_ERROR(troupe__dp_loss_scale_settle(dp));
    double seed = dp->ls_scale;
    if (troupe__fault_armed(TROUPE__FAULT_OVERFLOW) && troupe__fault_overflow(dp->steps))
        seed = INFINITY;
    dp->ls_pending = true; /* this step's verdict */
    if (dp->ls_seed_uploaded && memcmp(&seed, &dp->ls_seed_last, sizeof seed) == 0)
        return TROUPE_OK;
    dp->ls_seed_uploaded = false;
    TROUPE_RETURN_IF_ERROR(troupe_tnode_set_values(dp->ls_node, &seed, 1));
    for (int k = 0; k < dp->n; k++)
        TROUPE_RETURN_IF_ERROR(troupe_from_host(troupe__dp_tail(dp, k), dp->ls_node, NULL));
    dp->ls_seed_last = seed;
    dp->ls_seed_uploaded = true;
    return TROUPE_OK;
}

troupe_status_t troupe_dp_loss_scale(troupe_dp_t *dp, troupe_dp_loss_scale_state_t *out)
{
    if (!dp || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_loss_scale: NULL argument");
    TROUPE_RETURN_IF_ERROR(troupe__dp_refuse_if_failed(dp, "dp_loss_scale"));
    TROUPE_RETURN_IF_ERROR(troupe__dp_loss_scale_settle(dp));
    out->on = dp->ls_on;
    out->scale = dp->ls_on ? dp->ls_scale : 1.0;
    out->good_steps = dp->ls_good;
    out->skipped_steps = dp->ls_skipped;
    return TROUPE_OK;
}
