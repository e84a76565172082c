/* troupe — the optimizer step fused into the cross-rank allreduce (parallel/dp.h, Fused update;
 * troupe_coll_apply_t) with one stream per rank, and with two the merge and the update as
 * passes across the streams around the allreduce (Fused update across streams; with state to
 * keep, the allreduce updates each rank's shard of it: Sharded optimizer state): on R ranks
 * of 1 and of 2 streams, for SGD with momentum and weight decay, SGD with neither (no state
 * array), AdamW with weight decay and AdamW without:
 *   - troupe_dp_fused_update says fused by default with one stream per rank, and
 *     troupe_dp_fused_streams with two; neither with TROUPE_DP_FUSED_UPDATE=off
 *     (troupe_config_set_dp_fused_update), nor on a rank-local run of one stream;
 *   - the fused run's parameters and last loss equal the unfused run's (the optimizer routine
 *     after the allreduce) bit for bit: the routine is compiled without fma fusion and the
 *     fused update does its operations in the same order;
 *   - the parameters are bitwise identical on every rank;
 *   - both stay within rounding of one replica training on the global batch;
 *   - mode `save-one` (its own run: it fails the cluster): with the update fused and state to
 *     gather (SGD with momentum; this model's state takes the MPI path, so the gather moves
 *     nothing, but it is collective all the same), rank 0 saves while rank 1 steps on, and both
 *     fail with FAILED_PRECONDITION saying every rank must save the checkpoint.
 * The test model's gradients form no span in shareable memory, so the update runs on every
 * rank after the MPI reduction here; tests/mpi/test_transport_apply.c covers the shared-memory
 * path, and the trainer's jobs (tests/mpi/trainer.cmake) run the main job's MLP through it. */
#include "test_dp_model.c"

#define STEPS 5

/* Mode save-one: only rank 0 saves; both ranks must fail naming the gather. */
static int s_save_one(data_t *d)
{
    dpt_lr_t m;
    s_model(&m, d, troupe_cluster_size(), troupe_cluster_rank());
    troupe_dp_config_t cfg = {.backend = "cpu", .streams = 1, .optimizer = dpt_opt(TROUPE_OPT_SGD)};
    troupe_dp_t *dp = NULL;
    CHECK(troupe_dp_new(&cfg, &m.model, &dp));
    if (!troupe_dp_fused_update(dp))
        s_die("save-one: the update is not fused");
    for (int s = 0; s < 2; s++)
        CHECK(troupe_dp_step(dp));
    troupe_status_t st;
    if (troupe_cluster_rank() == 0) {
        st = troupe_dp_save(dp, "dp-fused-save-one.ck");
    } else {
        st = troupe_dp_step(dp);
        if (st == TROUPE_OK)
            st = troupe_dp_sync(dp);
    }
    const char *msg = troupe_last_error();
    fprintf(stderr, "rank %d: %s: %s\n", troupe_cluster_rank(), troupe_status_str(st), msg);
    if (st != TROUPE_FAILED_PRECONDITION || strstr(msg, "every rank must save the checkpoint") == NULL)
        s_die("save-one: expected FAILED_PRECONDITION saying every rank must save, got %s: %s",
              troupe_status_str(st), msg);
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
    free(d);
    int rank = troupe_cluster_rank();
    st = troupe_cluster_finalize();
    if (st != TROUPE_FAILED_PRECONDITION)
        s_die("save-one: troupe_cluster_finalize: %s, expected the failure", troupe_status_str(st));
    fprintf(stderr, "PASS rank %d: a save on one rank fails both, naming it\n", rank);
    return 0;
}

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, 2);
    if (argc > 1 && strcmp(argv[1], "save-one") == 0)
        return s_save_one(d);
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
