/* troupe — the data-parallel driver over devices x streams x ranks, with the cross-rank
 * allreduce staged through host memory (parallel/dp.h: stage_through_host, what a backend
 * without host-addressable memory such as cuda does; forced here on the cpu backend so that it
 * runs without a GPU). Each rank exposes two cpu devices (troupe_config_set_cpu_devices) and
 * runs one replica on each (devices {0, 1}: the merge crosses devices through a
 * device_to_device COPY into the owner stream's merge buffer). For SGD and AdamW: the staged
 * run's parameters equal the device-level (lent, in-place) run's bit for bit (one request of
 * the same tensors in node-id order: with two ranks either path adds a + b), are bitwise
 * identical on every rank (though each rank starts from its own host values: the staged
 * broadcast in troupe_dp_new gives rank 0's), and equal one replica on the global batch to
 * float rounding; the last loss equals the reference's. */
#include "test_dp_model.c"

#define STREAMS 2
#define STEPS 5

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, STREAMS);
    CHECK(troupe_config_set_cpu_devices(2));
    int R = troupe_cluster_size();
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        const char *name = troupe_optimizer_name(kinds[q]);
        float lent[NP], staged[NP], ref[NP];
        double lent_loss = 0, staged_loss = 0, ref_loss = 0;
        s_devices[0] = 0;
        s_devices[1] = 1;
        s_ndevices = 2;
        s_train(d, STREAMS * R, STREAMS, false, kinds[q], STEPS, lent, &lent_loss);
        s_stage = true;
        s_train(d, STREAMS * R, STREAMS, false, kinds[q], STEPS, staged, &staged_loss);
        s_stage = false;
        s_ndevices = 0;
        s_train(d, 1, 1, true, kinds[q], STEPS, ref, &ref_loss);
        s_same_on_every_rank(staged, name);
        for (int e = 0; e < NP; e++)
            if (memcmp(&staged[e], &lent[e], sizeof(float)) != 0)
                s_die("%s: parameter %d is %.9g staged through host memory but %.9g lent", name,
                      e, (double)staged[e], (double)lent[e]);
        if (staged_loss != lent_loss)
            s_die("%s: last loss %.9g staged but %.9g lent", name, staged_loss, lent_loss);
        s_close(staged, ref, 1e-5, name);
        if (!(fabs(staged_loss - ref_loss) <= 1e-5 * fmax(1.0, fabs(ref_loss))))
            s_die("%s: last loss %.9g but the reference's is %.9g", name, staged_loss, ref_loss);
        fprintf(stderr,
                "rank %d: %s: %d ranks x 2 devices x 1 stream, allreduce staged through host "
                "memory: bitwise the lent run's, W[0] %.7g vs %.7g on the global batch\n",
                troupe_cluster_rank(), name, R, (double)staged[0], (double)ref[0]);
    }
    free(d);
    CHECK(troupe_cluster_finalize());
    return 0;
}
