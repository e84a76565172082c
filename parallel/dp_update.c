/* troupe — the data-parallel driver's update (parallel/dp.h; docs/parallel.md, Update): the
 * optimizer state and hyper-parameters on the owner stream, the optimizer routine, and where a
 * step runs it (dp_strategy_impl.h, troupe__dp_update_t): the routine after the exchange,
 * fused into the in-place allreduce (the parameters and their state as the request's side
 * arrays, updated by troupe__dp_apply where the transport holds the sums), or as passes
 * divided among the streams (dp_local.c). The routine is compiled in every case, without fma
 * fusion, so that the fused forms, which do the same operations in the same order, give the
 * same bits.
 *
 * Host cost per step: the routine's hyper-parameters are uploaded only when they changed,
 * through a ring of staging nodes so that the host write never waits for the previous step's
 * upload.
 */
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/log.h"

#include <stdio.h>
#include <string.h>

/* FUSED: the side arrays of the allreduce's request, the parameter and its states in
 * grads_by_id's order. */
static troupe_status_t s_fused_sides(troupe_dp_t *dp)
{
    size_t n = dp->n_params, nside = 1 + (size_t)dp->nstate;
    dp->fused_side = troupe_calloc(n * nside, sizeof *dp->fused_side);
    if (dp->fused_side == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    for (size_t j = 0; j < n; j++) {
        size_t i = troupe__dp_param_of(dp, j);
        dp->fused_side[j] = dp->params[i];
        for (int k = 0; k < dp->nstate && dp->zero == NULL; k++) /* sharded: no nodes */
            dp->fused_side[(size_t)(k + 1) * n + j] =
                dp->state[i * (size_t)dp->nstate + (size_t)k];
    }
    return TROUPE_OK;
}

troupe_status_t troupe__dp_update_build(troupe_dp_t *dp)
{
    troupe__dp_replica_t *r0 = &dp->rep[0];
    troupe_status_t st = TROUPE_OK;
    dp->nstate = troupe__dp_nstate(&dp->opt);
    if (troupe__dp_zero_wanted(dp)) /* ZeRO-1: only this rank's shard of the state (dp_zero.c) */
        TROUPE_RETURN_IF_ERROR(troupe__dp_zero_new(dp));
    else if (dp->nstate > 0) {
        dp->state = troupe_calloc(dp->n_params * (size_t)dp->nstate, sizeof *dp->state);
        if (!dp->state)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
        static const char *const s_suffix[2] = {"opt_m", "opt_v"};
        for (size_t i = 0; i < dp->n_params; i++) {
            troupe_tnode_t *p = dp->params[i];
            char label[96];
            troupe_tnode_label_string(p, label, sizeof label);
            for (int s = 0; s < dp->nstate; s++) {
                troupe_tnode_t **slot = &dp->state[i * (size_t)dp->nstate + (size_t)s];
                TROUPE_RETURN_IF_ERROR(troupe__dp_new_hosted(
                    label, s_suffix[s], troupe__dp_state_prec(p->prec), p->ndims, p->dims, slot));
            }
        }
        /* each state array in one pool per kind (m, v), in the gradients' order, laid out as
         * the gradients are (as the parameters: Fused update) */
        for (int s = 0; s < dp->nstate; s++)
            TROUPE_RETURN_IF_ERROR(troupe__dp_upload_by_grad(dp, r0, dp->state, (size_t)dp->nstate,
                                                    (size_t)s, "dp_new: uploading the optimizer "
                                                               "state"));
    }
    int64_t hdim = TROUPE__DP_HYPER_COUNT;
    TROUPE_RETURN_IF_ERROR(
        troupe__dp_new_hosted("dp_hyper", NULL, TROUPE_PREC_DOUBLE, 1, &hdim, &dp->hyper));
    TROUPE_RETURN_IF_ERROR(troupe__dp_upload(r0, dp->hyper));
    for (int j = 0; j < TROUPE__DP_HYPER_STAGES; j++) {
        char suffix[16], name[32];
        snprintf(suffix, sizeof suffix, "stage%d", j);
        snprintf(name, sizeof name, "dp_hyper_stage%d", j);
        TROUPE_RETURN_IF_ERROR(
            troupe__dp_new_hosted("dp_hyper", suffix, TROUPE_PREC_DOUBLE, 1, &hdim, &dp->hyper_stage[j]));
        TROUPE_RETURN_IF_ERROR(troupe__dp_upload(r0, dp->hyper_stage[j]));
        troupe_asgn_comp_t *ccomp = NULL;
        troupe_asgn_t *t = NULL;
        st = troupe_asgn_comp_new(&ccomp);
        if (st == TROUPE_OK)
            st = troupe_asgn_accum_unop(ccomp, false, TROUPE_BINOP_ARG2, dp->hyper,
                                        TROUPE_UNOP_IDENTITY, troupe_asgn_node(dp->hyper_stage[j]),
                                        "a=>a", &t);
        if (st == TROUPE_OK) {
            troupe_asgn_comp_set_root(ccomp, t);
            st = troupe_compile(dp->backend, ccomp, name, &dp->hyper_copy_code[j]);
        }
        troupe_asgn_comp_destroy(&ccomp);
        if (st != TROUPE_OK)
            return troupe__dp_wrap(st, "dp_new: compiling a hyper-parameter copy");
        st = troupe__dp_link(r0, dp->hyper_copy_code[j], &dp->hyper_copy[j]);
        if (st != TROUPE_OK)
            return troupe__dp_wrap(st, "dp_new: linking a hyper-parameter copy");
    }
    if (dp->zero != NULL) { /* the fused update runs on the shard; no routine reads the state */
        /* several streams: their passes merge and copy, the allreduce updates (dp_zero.c) */
        if (dp->strat.update == TROUPE__DP_UPDATE_STREAMS)
            TROUPE_RETURN_IF_ERROR(troupe__dp_local_new(dp, &dp->local));
        return s_fused_sides(dp);
    }
    if (dp->ls_finite != NULL) /* loss scaling's verdict, read back after each step */
        TROUPE_RETURN_IF_ERROR(troupe__dp_upload(r0, dp->ls_finite));
    troupe_asgn_comp_t *ocomp = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__dp_optimizer_comp(dp, &ocomp));
    /* without fma fusion: the fused update (troupe__dp_apply) does the same operations in the
     * same order, so both give the same bits (docs/parallel.md, Fused update) */
    st = troupe_compile_unfused(dp->backend, ocomp,
                                dp->opt.kind == TROUPE_OPT_ADAMW ? "dp_adamw" : "dp_sgd",
                                &dp->opt_code);
    troupe_asgn_comp_destroy(&ocomp);
    if (st != TROUPE_OK)
        return troupe__dp_wrap(st, "dp_new: compiling the optimizer");
    st = troupe__dp_link(r0, dp->opt_code, &dp->opt_routine);
    if (st != TROUPE_OK)
        return troupe__dp_wrap(st, "dp_new: linking the optimizer");
    if (dp->strat.update == TROUPE__DP_UPDATE_STREAMS)
        return troupe__dp_local_new(dp, &dp->local);
    if (dp->strat.update == TROUPE__DP_UPDATE_FUSED)
        return s_fused_sides(dp);
    return TROUPE_OK;
}

troupe_status_t troupe__dp_update_begin(troupe_dp_t *dp, troupe__dp_apply_arg_t *arg)
{
    double h[TROUPE__DP_HYPER_COUNT];
    /* AdamW's t counts the steps that updated (loss scaling skips some) */
    troupe__dp_hyper_values(dp, dp->steps - dp->ls_skipped + 1, h);
    memset(arg, 0, sizeof *arg);
    if (dp->strat.update != TROUPE__DP_UPDATE_ROUTINE) { /* the pass that runs the update */
        arg->kind = (int32_t)dp->opt.kind;
        arg->nstate = dp->nstate;
        arg->decay = dp->opt.weight_decay != 0.0;
        for (int k = 0; k < TROUPE__DP_HYPER_COUNT; k++)
            arg->h[k] = (float)h[k];
        return TROUPE_OK;
    }
    if (dp->hyper_uploaded && memcmp(h, dp->hyper_last, sizeof h) == 0)
        return TROUPE_OK;
    /* only the driver writes the hyper array, so equal values mean the owner stream's array
     * will already hold them; new values go through the next staging node */
    int j = dp->hyper_next;
    dp->hyper_uploaded = false;
    TROUPE_RETURN_IF_ERROR(troupe_tnode_set_values(dp->hyper_stage[j], h, TROUPE__DP_HYPER_COUNT));
    TROUPE_RETURN_IF_ERROR(troupe_from_host(troupe__dp_tail(dp, 0), dp->hyper_stage[j], NULL));
    TROUPE_RETURN_IF_ERROR(troupe_routine_run(dp->hyper_copy[j], NULL));
    dp->hyper_next = (j + 1) % TROUPE__DP_HYPER_STAGES;
    memcpy(dp->hyper_last, h, sizeof h);
    dp->hyper_uploaded = true;
    return TROUPE_OK;
}

troupe_status_t troupe__dp_update_apply(troupe_dp_t *dp, const troupe__dp_apply_arg_t *arg,
                                        troupe__dp_steplog_t *rec)
{
    troupe_event_t *oev = NULL;
    troupe_status_t st = TROUPE_OK;
    if (dp->strat.update == TROUPE__DP_UPDATE_STREAMS)
        st = troupe__dp_local_step(dp,
                                   dp->nranks == 1    ? TROUPE__DP_LOCAL_FULL
                                   : dp->zero != NULL ? TROUPE__DP_LOCAL_COPY
                                                      : TROUPE__DP_LOCAL_APPLY,
                                   arg, rec != NULL ? &oev : NULL);
    else if (dp->strat.update == TROUPE__DP_UPDATE_ROUTINE)
        st = troupe_routine_run(dp->opt_routine, rec != NULL ? &oev : NULL);
    else
        return TROUPE_OK; /* FUSED: the exchange ran it */
    if (st == TROUPE_OK)
        troupe__dp_steplog_optimizer(rec, oev);
    troupe_event_release(&oev);
    return st;
}
