/* troupe — dynamic loss scaling across ranks (parallel/dp.h, loss_scaling), 2 ranks of 1 stream
 * on the half-precision softmax regression of tests/dp_half_model.h. An overflow injected on
 * rank 1 only (TROUPE_FAULT overflow:step=2:rank=1) reaches every rank through the allreduce,
 * so every rank skips step 2: the parameters after it are those after step 1, the scale halves
 * and one step is counted on both ranks, and the steps after it train. The parameters and the
 * loss scaling state are then the same on every rank (troupe_dp_agree compares them). */
#include "actors/troupe.h"
#include "base/config.h"
#include "parallel/dp.h"
#include "transport/mpi/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_die.h"

#define DHM_CHECK(expr) CHECK(expr)
#include "tests/dp_half_model.h"

#define STEPS 5

int main(int argc, char **argv)
{
    CHECK(troupe_cluster_init(&argc, &argv));
    if (troupe_cluster_size() != 2)
        s_die("run with mpiexec -n 2 (got %d ranks)", troupe_cluster_size());
    int rank = troupe_cluster_rank();
    CHECK(troupe_config_set_fault("overflow:step=2:rank=1"));
    dhm_model_t m;
    dhm_model_new(&m);
    troupe_dp_config_t cfg = dhm_config(1, false);
    troupe_dp_t *dp = NULL;
    CHECK(troupe_dp_new(&cfg, &m.dp, &dp));
    float p[STEPS][DHM_NP];
    troupe_dp_loss_scale_state_t ls[STEPS];
    dhm_steps(dp, &m, STEPS, p, ls);
    if (memcmp(p[1], p[2], sizeof p[0]) != 0)
        s_die("step 2 overflowed on rank 1 but changed this rank's parameters");
    if (memcmp(p[0], p[1], sizeof p[0]) == 0 || memcmp(p[2], p[3], sizeof p[0]) == 0 ||
        memcmp(p[3], p[4], sizeof p[0]) == 0)
        s_die("a step other than the overflowed one changed nothing");
    if (ls[1].scale != 65536.0 || ls[1].skipped_steps != 0 || ls[2].scale != 32768.0 ||
        ls[2].skipped_steps != 1 || ls[4].scale != 32768.0 || ls[4].skipped_steps != 1)
        s_die("loss scale %g, %g, %g with %lld, %lld, %lld skipped after steps 1, 2, 4 "
              "(expected 65536, 32768, 32768 and 0, 1, 1)",
              ls[1].scale, ls[2].scale, ls[4].scale, (long long)ls[1].skipped_steps,
              (long long)ls[2].skipped_steps, (long long)ls[4].skipped_steps);
    /* the same bits on every rank: the parameters and the state as text */
    char hex[2 * sizeof p[0] + 1], state[96];
    const unsigned char *bytes = (const unsigned char *)p[STEPS - 1];
    for (size_t i = 0; i < sizeof p[0]; i++)
        snprintf(hex + 2 * i, 3, "%02x", bytes[i]);
    snprintf(state, sizeof state, "scale=%.17g good=%lld skipped=%lld", ls[STEPS - 1].scale,
             (long long)ls[STEPS - 1].good_steps, (long long)ls[STEPS - 1].skipped_steps);
    troupe_dp_setting_t same[2] = {{"parameters", hex}, {"loss scaling", state}};
    CHECK(troupe_dp_agree(same, 2));
    fprintf(stderr, "rank %d: the overflow on rank 1 skipped step 2 on every rank (%s)\n", rank,
            state);
    troupe_dp_destroy(&dp);
    dhm_model_destroy(&m);
    CHECK(troupe_config_set_fault(""));
    CHECK(troupe_cluster_finalize());
    return 0;
}
