/* troupe — data-parallel training on the GPU across ranks (issue 16's tests): R ranks, one
 * replica each on the cuda backend's device (two ranks on a machine with one GPU share it),
 * the cross-rank merge of device buffers staged through pinned host memory; after several steps
 * the parameters equal, to float rounding, one replica on the GPU training on the whole global
 * batch (a rank-local troupe_dp_t), for SGD and AdamW; they are bitwise identical on every rank;
 * and a second identical run gives the same bits. Without a GPU every rank prints one SKIP line
 * with the reason and exits 0 (CTest counts it skipped: SKIP_REGULAR_EXPRESSION). */
#include "test_dp_model.c"

#include "troupe_config.h"
#if TROUPE_HAVE_CUDA
#include "devices/cuda/cuda_impl.h"
#endif

#define STEPS 5

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, 1);
    char why[400] = "built without the CUDA toolkit";
#if TROUPE_HAVE_CUDA
    /* the runtime's own count: opening a backend would create a context on every device */
    int ndev = troupe__cuda_device_count();
    if (ndev == 0)
        troupe__cuda_why_no_device(why, sizeof why);
#else
    int ndev = 0;
#endif
    if (ndev == 0) {
        if (troupe_cluster_rank() == 0)
            printf("SKIP: no CUDA device (%s)\n", why);
        free(d);
        CHECK(troupe_cluster_finalize());
        return 0;
    }
    s_backend = "cuda";
    s_stage_elsewhere = true; /* device memory: the exchange is staged through host memory */
    int R = troupe_cluster_size();
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        const char *name = troupe_optimizer_name(kinds[q]);
        float dist[NP], again[NP], ref[NP];
        double dist_loss = 0, again_loss = 0, ref_loss = 0;
        s_train(d, R, 1, false, kinds[q], STEPS, dist, &dist_loss);
        s_train(d, R, 1, false, kinds[q], STEPS, again, &again_loss);
        s_train(d, 1, 1, true, kinds[q], STEPS, ref, &ref_loss); /* exchanges nothing */
        s_same_on_every_rank(dist, name);
        if (memcmp(dist, again, sizeof dist) != 0 || dist_loss != again_loss)
            s_die("%s: two identical runs on the GPU differ", name);
        s_close(dist, ref, 1e-5, name);
        fprintf(stderr,
                "rank %d: %s on cuda: %d ranks equal 1 replica on the global batch (W[0] %.7g "
                "vs %.7g), and a second run the same bits\n",
                troupe_cluster_rank(), name, R, (double)dist[0], (double)ref[0]);
    }
    free(d);
    CHECK(troupe_cluster_finalize());
    return 0;
}
