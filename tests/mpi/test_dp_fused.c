/* troupe — the optimizer step fused into the cross-rank allreduce (parallel/dp.h, Fused update;
 * troupe_coll_apply_t) with one stream per rank, and with two the merge and the update as
 * passes across the streams around a plain allreduce (Fused update across streams): on R ranks
 * of 1 and of 2 streams, for SGD with momentum and weight decay, SGD with neither (no state
 * array), AdamW with weight decay and AdamW without:
 *   - troupe_dp_fused_update says fused by default with one stream per rank, and
 *     troupe_dp_fused_streams with two; neither with TROUPE_DP_FUSED_UPDATE=off
 *     (troupe_config_set_dp_fused_update), nor on a rank-local run of one stream;
 *   - the fused run's parameters and last loss equal the unfused run's (the optimizer routine
 *     after the allreduce) bit for bit: the routine is compiled without fma fusion and the
 *     fused update does its operations in the same order;
 *   - the parameters are bitwise identical on every rank;
 *   - both stay within rounding of one replica training on the global batch.
 * The test model's gradients form no span in shareable memory, so the update runs on every
 * rank after the MPI reduction here; tests/mpi/test_transport_apply.c covers the shared-memory
 * path, and the trainer's jobs (tests/mpi/trainer.cmake) run the main job's MLP through it. */
#include "test_dp_model.c"

#define STEPS 5

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, 2);
    int R = troupe_cluster_size();
    troupe_optimizer_t opts[4] = {dpt_opt(TROUPE_OPT_SGD), dpt_opt(TROUPE_OPT_SGD),
                                  dpt_opt(TROUPE_OPT_ADAMW), dpt_opt(TROUPE_OPT_ADAMW)};
    opts[1].momentum = 0.0; /* no state array: the update has the parameter only */
    opts[1].weight_decay = 0.0;
    opts[3].weight_decay = 0.0;
    const char *names[4] = {"sgd momentum+decay", "sgd plain", "adamw decay", "adamw"};
    for (int q = 0; q < 4; q++) {
        for (int streams = 1; streams <= 2; streams++) {
            char what[96];
            snprintf(what, sizeof what, "%s, %d x %d", names[q], R, streams);
            float fused[NP], unfused[NP], ref[NP];
            double fused_loss = 0, unfused_loss = 0, ref_loss = 0;
            bool on = false, off = true, local = true, on_s = false, off_s = true;
            s_opt = &opts[q];
            troupe_config_set_dp_fused_update(true);
            s_train(d, streams * R, streams, false, opts[q].kind, STEPS, fused, &fused_loss);
            on = s_last_fused;
            on_s = s_last_fused_streams;
            troupe_config_set_dp_fused_update(false);
            s_train(d, streams * R, streams, false, opts[q].kind, STEPS, unfused, &unfused_loss);
            off = s_last_fused;
            off_s = s_last_fused_streams;
            troupe_config_set_dp_fused_update(true);
            s_train(d, 1, 1, true, opts[q].kind, STEPS, ref, &ref_loss);
            local = s_last_fused;
            /* one stream per rank: the update in the allreduce; two: the passes across the
             * streams around a plain allreduce (parallel/dp.h) */
            bool want_on = R > 1 && streams == 1, want_s = streams > 1;
            if (on != want_on || off || local || on_s != want_s || off_s)
                s_die("%s: troupe_dp_fused_update says %d by default, %d when off, %d for a "
                      "rank-local run, troupe_dp_fused_streams %d by default and %d when off; "
                      "expected %d, 0, 0, %d, 0",
                      what, on, off, local, on_s, off_s, want_on, want_s);
            for (int e = 0; e < NP; e++)
                if (memcmp(&fused[e], &unfused[e], sizeof(float)) != 0)
                    s_die("%s: parameter %d is %.9g fused but %.9g unfused", what, e,
                          (double)fused[e], (double)unfused[e]);
            if (memcmp(&fused_loss, &unfused_loss, sizeof(double)) != 0)
                s_die("%s: last loss %.17g fused but %.17g unfused", what, fused_loss,
                      unfused_loss);
            s_same_on_every_rank(fused, what);
            s_close(fused, ref, 1e-5, what);
            fprintf(stderr, "rank %d: %s: fused equals unfused bit for bit (W[0] %.9g)\n",
                    troupe_cluster_rank(), what, (double)fused[0]);
        }
    }
    free(d);
    CHECK(troupe_cluster_finalize());
    fprintf(stderr, "PASS rank %d: fused optimizer update\n", troupe_cluster_rank());
    return 0;
}
