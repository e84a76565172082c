/* troupe — data-parallel equivalence across ranks (parallel/dp.h, docs/architecture.md §5): each of R
 * ranks runs 2 streams, each replica on a 1/(2R) part of the global batch; after several steps
 * the parameters equal, to float rounding, one replica training on the whole global batch
 * (computed on each rank by a rank-local troupe_dp_t: local_only, 1 stream, which issues no
 * collective), for SGD and AdamW; the last loss equals the reference's; and the parameters are
 * bitwise identical on every rank (also though each rank starts from different host values:
 * troupe_dp_new broadcasts rank 0's). With bfloat16 gradient compression (compress_bf16) the
 * SGD run stays bitwise identical on every rank, differs from the exact one (the compression
 * took effect) and stays within 1% of the reference. The default stream count
 * (troupe_dp_suggested_streams) shares the node's cores among its ranks on the cpu backend. */
#include "test_dp_model.c"

#define STREAMS 2
#define STEPS 5

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, STREAMS);
    int R = troupe_cluster_size();
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        const char *name = troupe_optimizer_name(kinds[q]);
        float dist[NP], ref[NP];
        double dist_loss = 0, ref_loss = 0;
        s_train(d, STREAMS * R, STREAMS, false, kinds[q], STEPS, dist, &dist_loss);
        s_train(d, 1, 1, true, kinds[q], STEPS, ref, &ref_loss);
        s_same_on_every_rank(dist, name);
        s_close(dist, ref, 1e-5, name);
        if (!(fabs(dist_loss - ref_loss) <= 1e-5 * fmax(1.0, fabs(ref_loss))))
            s_die("%s: last loss %.9g but the reference's is %.9g", name, dist_loss, ref_loss);
        fprintf(stderr,
                "rank %d: %s: %d ranks x %d streams equal 1 replica on the global batch "
                "(W[0] %.7g vs %.7g, loss %.7g vs %.7g)\n",
                troupe_cluster_rank(), name, R, STREAMS, (double)dist[0], (double)ref[0], dist_loss,
                ref_loss);
    }
    float exact[NP], bf16[NP], ref[NP];
    double loss = 0;
    s_train(d, STREAMS * R, STREAMS, false, TROUPE_OPT_SGD, STEPS, exact, &loss);
    s_compress = true;
    s_train(d, STREAMS * R, STREAMS, false, TROUPE_OPT_SGD, STEPS, bf16, &loss);
    s_compress = false;
    s_train(d, 1, 1, true, TROUPE_OPT_SGD, STEPS, ref, &loss);
    s_same_on_every_rank(bf16, "sgd bf16");
    if (memcmp(exact, bf16, sizeof exact) == 0)
        s_die("sgd bf16: the parameters equal the uncompressed run's bit for bit");
    s_close(bf16, ref, 1e-2, "sgd bf16");
    fprintf(stderr, "rank %d: sgd with bfloat16 gradients: W[0] %.7g vs %.7g exact\n",
            troupe_cluster_rank(), (double)bf16[0], (double)exact[0]);
    /* streams 0: the cpu backend's suggestion divided among this node's ranks */
    troupe_backend_t *b = NULL;
    troupe_device_t *d0 = NULL;
    int per = 0, shared = 0;
    CHECK(troupe_backend_open("cpu", TROUPE_MOST_PARALLEL_STREAMS, &b));
    CHECK(troupe_get_device(b, 0, &d0));
    CHECK(troupe_suggested_num_streams(d0, &per));
    CHECK(troupe_dp_suggested_streams(b, &shared));
    int local = troupe_cluster_local_size(), want = per / local > 0 ? per / local : 1;
    if (shared != want)
        s_die("dp_suggested_streams: %d streams per rank, want %d (%d suggested, %d local ranks)",
              shared, want, per, local);
    troupe_backend_close(&b);
    free(d);
    CHECK(troupe_cluster_finalize());
    return 0;
}
