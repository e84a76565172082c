/* troupe — gradient accumulation (parallel/dp.h, troupe_dp_config_t.grad_accum; docs/parallel.md,
 * Accumulation): an optimizer step of K micro-steps. Each replica runs the gradient routine K
 * times on K minibatches and keeps, in nodes of its own, the sums of its gradients and loss:
 *   micro-step 0:          sum := g                     (set)
 *   micro-steps 1..K-2:    sum =+ g                     (add)
 *   micro-step K-1:        g =+ sum, segment by segment (fold; the loss with the last one)
 * so that the merge, the exchange and the update see, once per step, the sum over K micro-steps
 * of each replica's gradient, in a fixed order (bitwise reproducible), and the update scales
 * it by 1 / (K * T) (troupe__dp_hyper_values). With overlap segments the fold runs after each
 * segment of the last micro-step, so each bucket's exchange still starts as soon as its
 * gradients are final. The sums have the gradients' precision.
 */
#include "parallel/dp_impl.h"

#include "base/alloc.h"

#include <stdio.h>
#include <string.h>

struct troupe__dp_accum {
    int n;                     /* replicas */
    size_t nseg;               /* folds */
    size_t nsum;               /* n_params + (a loss: 1) */
    troupe_tnode_t **sum;      /* nsum: the sums of grads[i], then of the loss */
    troupe_tnode_t **of;       /* nsum: grads[i], then the loss (borrowed from dp) */
    troupe_code_t *set_code, *add_code;
    troupe_code_t **fold_code; /* nseg: NULL for a segment with nothing to fold */
    troupe_routine_t **set, **add; /* n */
    troupe_routine_t **fold;       /* n * nseg */
};

void troupe__dp_accum_free(troupe__dp_accum_t **a_p)
{
    troupe__dp_accum_t *a = a_p ? *a_p : NULL;
    if (a == NULL)
        return;
    *a_p = NULL;
    for (int k = 0; k < a->n; k++) {
        if (a->set)
            troupe_routine_release(&a->set[k]);
        if (a->add)
            troupe_routine_release(&a->add[k]);
        for (size_t g = 0; a->fold && g < a->nseg; g++)
            troupe_routine_release(&a->fold[(size_t)k * a->nseg + g]);
    }
    troupe_code_release(&a->set_code);
    troupe_code_release(&a->add_code);
    for (size_t g = 0; a->fold_code && g < a->nseg; g++)
        troupe_code_release(&a->fold_code[g]);
    for (size_t i = 0; a->sum && i < a->nsum; i++)
        troupe_tnode_release(&a->sum[i]);
    troupe_free(a->sum);
    troupe_free(a->of);
    troupe_free(a->fold_code);
    troupe_free(a->set);
    troupe_free(a->add);
    troupe_free(a->fold);
    troupe_free(a);
}

/* The identity spec over tn's axes ("ab=>ab"; "=>" for a scalar). */
static void s_identity_spec(const troupe_tnode_t *tn, char *spec, size_t cap)
{
    char axes[TROUPE_MAX_DIMS + 1];
    int nd = tn->ndims;
    for (int a = 0; a < nd; a++)
        axes[a] = (char)('a' + a);
    axes[nd] = '\0';
    snprintf(spec, cap, "%s=>%s", axes, axes);
}

/* A routine of the assignments lhs[i] op= rhs[i] for the pairs with pick[i] (pick NULL: all):
 * ARG2 sets, ADD adds. *out stays NULL when no pair is picked. */
static troupe_status_t s_compile(troupe_dp_t *dp, troupe__dp_accum_t *a, bool to_sum,
                                 troupe_binop_t op, const bool *pick, const char *name,
                                 troupe_code_t **out)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t **items = troupe_calloc(a->nsum, sizeof *items);
    size_t count = 0;
    troupe_status_t st = items ? troupe_asgn_comp_new(&comp)
                               : troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    for (size_t i = 0; i < a->nsum && st == TROUPE_OK; i++) {
        if (pick != NULL && !pick[i])
            continue;
        char spec[2 * TROUPE_MAX_DIMS + 4];
        s_identity_spec(a->of[i], spec, sizeof spec);
        troupe_tnode_t *lhs = to_sum ? a->sum[i] : a->of[i];
        troupe_tnode_t *rhs = to_sum ? a->of[i] : a->sum[i];
        st = troupe_asgn_accum_unop(comp, false, op, lhs, TROUPE_UNOP_IDENTITY,
                                    troupe_asgn_node(rhs), spec, &items[count]);
        if (st == TROUPE_OK)
            count++;
    }
    troupe_asgn_t *root = NULL;
    if (st == TROUPE_OK && count == 1)
        root = items[0];
    else if (st == TROUPE_OK && count > 1)
        st = troupe_asgn_seq(comp, count, items, &root);
    if (st == TROUPE_OK && root != NULL) {
        troupe_asgn_comp_set_root(comp, root);
        st = troupe_compile(dp->backend, comp, name, out);
    }
    troupe_asgn_comp_destroy(&comp);
    troupe_free(items);
    if (st != TROUPE_OK) {
        char prefix[96];
        snprintf(prefix, sizeof prefix, "dp_new: compiling the accumulation routine %s", name);
        return troupe__dp_wrap(st, prefix);
    }
    return TROUPE_OK;
}

static troupe_status_t s_build(troupe_dp_t *dp, troupe__dp_accum_t *a)
{
    a->n = dp->n;
    a->nseg = dp->nseg;
    a->nsum = dp->n_params + (dp->loss != NULL ? 1 : 0);
    a->sum = troupe_calloc(a->nsum, sizeof *a->sum);
    a->of = troupe_calloc(a->nsum, sizeof *a->of);
    a->fold_code = troupe_calloc(a->nseg, sizeof *a->fold_code);
    a->set = troupe_calloc((size_t)a->n, sizeof *a->set);
    a->add = troupe_calloc((size_t)a->n, sizeof *a->add);
    a->fold = troupe_calloc((size_t)a->n * a->nseg, sizeof *a->fold);
    bool *pick = troupe_calloc(a->nsum, sizeof *pick);
    troupe_status_t st = TROUPE_OK;
    if (!a->sum || !a->of || !a->fold_code || !a->set || !a->add || !a->fold || !pick)
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    for (size_t i = 0; i < a->nsum && st == TROUPE_OK; i++) {
        a->of[i] = i < dp->n_params ? dp->grads[i] : dp->loss;
        char label[96];
        troupe_tnode_label_string(a->of[i], label, sizeof label);
        st = troupe__dp_new_hosted(label, "accum", a->of[i]->prec, a->of[i]->ndims,
                                   a->of[i]->dims, &a->sum[i]);
    }
    if (st == TROUPE_OK)
        st = s_compile(dp, a, true, TROUPE_BINOP_ARG2, NULL, "dp_accum_set", &a->set_code);
    if (st == TROUPE_OK)
        st = s_compile(dp, a, true, TROUPE_BINOP_ADD, NULL, "dp_accum_add", &a->add_code);
    for (size_t g = 0; g < a->nseg && st == TROUPE_OK; g++) {
        for (size_t i = 0; i < a->nsum; i++) /* the loss folds with the last segment */
            pick[i] = i < dp->n_params ? dp->seg_of_grad[i] == g : g + 1 == a->nseg;
        char name[48];
        snprintf(name, sizeof name, "dp_accum_fold_s%zu", g);
        st = s_compile(dp, a, false, TROUPE_BINOP_ADD, pick, name, &a->fold_code[g]);
    }
    troupe_free(pick);
    /* on every replica: the sums uploaded (zeros), then the routines linked after them */
    for (int k = 0; k < a->n && st == TROUPE_OK; k++) {
        troupe__dp_replica_t *r = &dp->rep[k];
        for (size_t i = 0; i < a->nsum && st == TROUPE_OK; i++)
            st = troupe__dp_upload(r, a->sum[i]);
        if (st == TROUPE_OK)
            st = troupe__dp_link(r, a->set_code, &a->set[k]);
        if (st == TROUPE_OK)
            st = troupe__dp_link(r, a->add_code, &a->add[k]);
        for (size_t g = 0; g < a->nseg && st == TROUPE_OK; g++)
            if (a->fold_code[g] != NULL)
                st = troupe__dp_link(r, a->fold_code[g], &a->fold[(size_t)k * a->nseg + g]);
        if (st != TROUPE_OK)
            st = troupe__dp_wrap(st, "dp_new: linking the accumulation routines");
    }
    return st;
}

troupe_status_t troupe__dp_accum_build(troupe_dp_t *dp)
{
    if (dp->strat.accum <= 1)
        return TROUPE_OK;
    troupe__dp_accum_t *a = troupe_calloc(1, sizeof *a);
    if (a == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    troupe_status_t st = s_build(dp, a);
    if (st != TROUPE_OK) {
        troupe__dp_accum_free(&a);
        return st;
    }
    dp->accum = a;
    return TROUPE_OK;
}

troupe_status_t troupe__dp_accum_keep(troupe_dp_t *dp, int j)
{
    troupe__dp_accum_t *a = dp->accum;
    for (int k = 0; a != NULL && k < a->n; k++)
        TROUPE_RETURN_IF_ERROR(troupe_routine_run(j == 0 ? a->set[k] : a->add[k], NULL));
    return TROUPE_OK;
}

troupe_status_t troupe__dp_accum_fold(troupe_dp_t *dp, size_t g, troupe_event_t **ready)
{
    troupe__dp_accum_t *a = dp->accum;
    for (int k = 0; a != NULL && k < a->n; k++) {
        troupe_routine_t *r = a->fold[(size_t)k * a->nseg + g];
        if (r == NULL)
            continue;
        troupe_event_t *ev = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_routine_run(r, k == 0 && ready != NULL ? &ev : NULL));
        if (ev != NULL) {
            troupe_event_release(ready);
            *ready = ev;
        }
    }
    return TROUPE_OK;
}
