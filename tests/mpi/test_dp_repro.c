/* troupe — bitwise reproducibility of data-parallel training across ranks (parallel/dp.h):
 * the reduction order is fixed by the layout (streams per rank, ranks), so two identical
 * distributed runs in one program give bitwise identical parameters and losses, and every rank
 * holds the same parameters. SGD with momentum and AdamW, 2 streams per rank. */
#include "test_dp_model.c"

#define STREAMS 2
#define STEPS 6

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, STREAMS);
    int R = troupe_cluster_size();
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        const char *name = troupe_optimizer_name(kinds[q]);
        float a[NP], b[NP];
        double la = 0, lb = 0;
        s_train(d, STREAMS * R, STREAMS, false, kinds[q], STEPS, a, &la);
        s_train(d, STREAMS * R, STREAMS, false, kinds[q], STEPS, b, &lb);
        if (memcmp(a, b, sizeof a) != 0)
            s_die("%s: two identical runs differ (W[0] %.9g vs %.9g)", name, (double)a[0],
                  (double)b[0]);
        if (memcmp(&la, &lb, sizeof la) != 0)
            s_die("%s: two identical runs report different losses (%.17g vs %.17g)", name, la, lb);
        s_same_on_every_rank(a, name);
        fprintf(stderr, "rank %d: %s: two runs bitwise identical (W[0] %.9g, loss %.9g)\n",
                troupe_cluster_rank(), name, (double)a[0], la);
    }
    free(d);
    CHECK(troupe_cluster_finalize());
    return 0;
}
