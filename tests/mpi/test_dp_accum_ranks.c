/* troupe — gradient accumulation across ranks (parallel/dp.h, troupe_dp_config_t.grad_accum):
 * R ranks of 1 stream, K = 2 micro-steps per step, each replica on 1/(K*R) of the global batch,
 * equal within float rounding one replica training on the whole global batch (a rank-local
 * troupe_dp_t, local_only), parameters and last loss, for SGD and AdamW; bitwise the same on
 * every rank and from one run to the next; and a K that differs on one rank fails every rank
 * naming grad_accum. */
#include "test_dp_model.c"

#define STEPS 4
#define ACCUM 2

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, ACCUM); /* global batches of 2 * ACCUM * R rows */
    int R = troupe_cluster_size();
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        const char *name = troupe_optimizer_name(kinds[q]);
        float acc[NP], again[NP], ref[NP];
        double acc_loss = 0, again_loss = 0, ref_loss = 0;
        s_accum = ACCUM;
        s_train(d, ACCUM * R, 1, false, kinds[q], STEPS, acc, &acc_loss);
        s_train(d, ACCUM * R, 1, false, kinds[q], STEPS, again, &again_loss);
        s_accum = 0;
        s_train(d, 1, 1, true, kinds[q], STEPS, ref, &ref_loss);
        s_same_on_every_rank(acc, name);
        if (memcmp(acc, again, sizeof acc) != 0 || memcmp(&acc_loss, &again_loss, sizeof acc_loss))
            s_die("%s: two runs with grad_accum %d differ (W[0] %.9g vs %.9g)", name, ACCUM,
                  (double)acc[0], (double)again[0]);
        s_close(acc, ref, 1e-5, name);
        if (!(fabs(acc_loss - ref_loss) <= 1e-5 * fmax(1.0, fabs(ref_loss))))
            s_die("%s: last loss %.9g but the reference's is %.9g", name, acc_loss, ref_loss);
        fprintf(stderr,
                "rank %d: %s: %d ranks x %d micro-steps equal 1 replica on the global batch "
                "(W[0] %.7g vs %.7g, loss %.7g vs %.7g)\n",
                troupe_cluster_rank(), name, R, ACCUM, (double)acc[0], (double)ref[0], acc_loss,
                ref_loss);
    }
    if (R > 1) { /* rank 1 asks for another K: every rank fails, naming it */
        dpt_lr_t m;
        s_model(&m, d, ACCUM * R, 0);
        troupe_dp_config_t cfg = {.backend = s_backend,
                                  .streams = 1,
                                  .optimizer = dpt_opt(TROUPE_OPT_SGD),
                                  .grad_accum = troupe_cluster_rank() == 1 ? 3 : ACCUM};
        troupe_dp_t *dp = NULL;
        troupe_status_t st = troupe_dp_new(&cfg, &m.model, &dp);
        if (st != TROUPE_FAILED_PRECONDITION || strstr(troupe_last_error(), "grad_accum") == NULL)
            s_die("grad_accum differing across ranks: %s: %s", troupe_status_str(st),
                  troupe_last_error());
        dpt_lr_destroy(&m);
    }
    free(d);
    CHECK(troupe_cluster_finalize());
    return 0;
}
