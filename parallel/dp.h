/* troupe — data-parallel training (docs/architecture.md §5; OCANNL_NOTES §7.1 for the stream pairing).
 *
 * A troupe_dp_t replicates a gradient computation on every stream of every device of this
 * rank (N local replicas; R ranks; N*R replicas in all) and runs synchronous data-parallel
 * SGD/AdamW steps:
 *   1. replica k (stream k) runs the gradient routine on minibatch
 *        b = step * (N*R) + rank * N + k          (round-robin over the global minibatch list;
 *      the routine's static index `batch_index` is bound to b mod num_batches — or, with a
 *      feed_comp (troupe_dp_model_t), the feed routine's, run just before; with ranks that
 *      run different numbers of streams, N*R and rank * N are the replicas of all ranks and of
 *      the ranks before this one: Ranks that disagree, below);
 *   2. tree merge of the gradients across the local streams through merge buffers, in OCANNL
 *      0.6.0's pairing: for stride 1, 2, 4, ...: stream k (k % (2*stride) == 0) receives
 *      stream k+stride's gradient with a COPY device_to_device and adds it (`g =+ g.merge`),
 *      so stream 0 ends with the sum, in a fixed order;
 *   3. one allreduce (SUM) across ranks of all of stream 0's gradients, in node-id order (one
 *      span of the routine's pool, reduced in place), which the transport cuts into fusion
 *      buckets of at most troupe_config_fusion_bytes() (Horovod's tensor fusion; two in
 *      flight); stream 0 waits for it and runs it itself (TROUPE_COLL_LAZY) before the
 *      optimizer, which scales the sum by 1 / (N * R) (the mean over all replicas; no division
 *      pass in the transport); with one rank (or local_only) no collective is issued;
 *   4. the optimizer on stream 0 (the owner stream), per parameter — or, fused into step 3's
 *      allreduce, where the reduction leaves the sums (Fused update, below), or with several
 *      streams fused with steps 2 and 5 into passes across the streams (Fused update across
 *      streams, below);
 *   5. broadcast of the parameters from stream 0 to the other local streams (device_to_device
 *      NO); every rank computes the same update from the same reduced gradient, so parameters
 *      stay identical across ranks without moving them.
 * The reduction order is fixed by (N, R), so a run is bitwise reproducible for a given layout,
 * and equals one replica training on the global batch up to float rounding.
 *
 * Gradient convention: the gradient computation must write, for its minibatch, the gradient of
 * the MEAN loss over the minibatch into each grads[i] (overwriting it, not accumulating), and
 * may write a scalar `loss` (the minibatch's mean loss).
 *
 * Optimizers (per element, t = step + 1, g = averaged gradient):
 *   SGD:   g' = g + weight_decay * p;  m = momentum * m + g';  p -= lr * (momentum ? m : g')
 *          (PyTorch's SGD with dampening 0, nesterov off)
 *   AdamW: p -= lr * weight_decay * p;  m = b1*m + (1-b1) g;  v = b2*v + (1-b2) g^2;
 *          p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 *          (Loshchilov & Hutter, decoupled weight decay; PyTorch's AdamW)
 * Optimizer state lives on stream 0 only, in single precision or the parameter's precision if
 * wider. The learning rate may change between steps (troupe_dp_set_lr).
 *
 * Across ranks, collectives are matched by order and fingerprinted with node ids, dims and
 * precisions (transport/mpi/collective.h): every rank must build the same model (creating its
 * nodes in the same order, so ids agree) and call troupe_dp_new / troupe_dp_step /
 * troupe_dp_last_loss in the same order.
 *
 * Ranks that disagree: troupe_dp_new fingerprints the configuration that decides the results —
 * the parameters' labels, shapes and precisions, the inputs' shapes, num_batches, the form
 * (a feed_comp or an indexed grad_comp, and batch_index), the optimizer
 * and each of its hyper-parameters, compress_bf16, and the program's own settings
 * (troupe_dp_config_t.settings: what the library cannot know, such as epochs, seed, global
 * batch, schedule) — and compares it across ranks before any work: on a difference every rank
 * fails with FAILED_PRECONDITION naming the setting and each rank's value. Streams per rank are
 * allowed to differ (nodes with different core counts get different suggestions): with
 * N_r replicas on rank r and T = sum of N_r, replica k of rank r takes minibatch
 * step * T + (N_0 + ... + N_{r-1}) + k and the optimizer scales the sum by 1 / T, so a step
 * trains on the same T minibatches and takes their mean whatever the layout; only the order of
 * the sums changes (the tree over each rank's streams, then the ranks), so such a run equals a
 * run with the same T replicas laid out otherwise up to float rounding, and is bitwise
 * reproducible for its own layout — as for any two layouts. (T is what the trainer splits its
 * global batch over: troupe_dp_replicas.)
 *
 * Overlap (Horovod's and PyTorch DDP's buckets, which start their allreduce as soon as the
 * backward pass produced them): with overlap on (troupe_dp_config_t.overlap, TROUPE_DP_OVERLAP)
 * troupe_dp_new cuts grad_comp's top-level sequence (its root SEQ's items; a root block comment
 * around a SEQ is opened, and while every gradient is last used by the last item and that item
 * is itself a sequence — Seq(forward, backprop), a backward pass under block comments — it is
 * opened too) into segments: a segment ends after the last item that reads or writes
 * any gradient of its bucket, so the buckets follow the backward pass (a network's last layer
 * first) and no later segment touches a bucket's gradients. Each segment is compiled as a routine
 * of its own (dp_grad_s0, dp_grad_s1, ...; unsplit: dp_grad) and linked on every replica after
 * the previous one; in the indexed form the static index batch_index is bound on every segment
 * (in the fed form only the feed has it). Nodes the comp writes that two segments touch must stay
 * in the context between them: troupe_dp_new refines them to Materialized (memory modes,
 * ir/memory_mode.h) — on the caller's nodes, for good, so a later compile of the same nodes keeps
 * them materialized. A step then runs, per segment: the segment on every replica, the tree merge
 * of its bucket's gradients, and its bucket's allreduce, which the transport engine runs while
 * the owner stream computes the next segment (in place: one device-level request per bucket, the
 * last one run by the owner stream itself; staged: its to_host copies and host-level allreduces
 * gated on them); the optimizer waits for every bucket. Every rank issues the buckets in the same
 * order (every rank splits the same model alike; troupe_dp_new checks across ranks that they all
 * overlap with the same number of segments, else every rank runs unsplit). A comp that cannot be
 * split (one top-level item, every gradient last used by its last item, a crossing node already
 * Virtual or Local) keeps one routine; so does auto where overlap cannot pay: with one rank, and
 * on a host backend whose node lacks a core per rank for the transport engine beyond its compute
 * streams (two ranks of one stream on two cores; on "cpu" with the suggested streams, one per
 * core, there is none to spare); a device backend (cuda) leaves the host free. The decision and
 * its reason are logged at debug level (subsystem parallel) by troupe_dp_new. Results: the local
 * merges add in the same order and each gradient element is reduced by the same rule whatever the
 * request it travels in, so with two ranks (a + b either way) or on the shared-memory path (ranks
 * summed in rank order per element) a split run equals the unsplit one bit for bit, provided the
 * segments' code computes the gradients to the same bits as the whole routine
 * (tests/mpi/test_dp_overlap.c checks both on the test models); with more ranks on the ring or
 * MPI paths, where a request's bucket cut decides where each chunk's ring sum starts, they agree
 * to float rounding.
 *
 * Fused update (ZeRO stage 1's sharded update and optimizer state, Rajbhandari et al. 2020):
 * with more than one rank, the in-place exchange (a host backend),
 * one gradient routine (no Overlap segments) and single-precision parameters, unless the
 * passes across the streams take the update (several streams on some rank: Fused update
 * across streams, below), and unless
 * TROUPE_DP_FUSED_UPDATE=off, troupe_dp_new fuses the optimizer step into step 3's allreduce
 * (troupe_coll_apply_t, transport/mpi/collective.h): the request carries the parameters and
 * their state as side arrays, and the optimizer's statements run element by element where the
 * transport holds the sums (troupe__dp_apply, parallel/dp_optim.c) instead of the optimizer
 * routine after it. Through shared memory (all ranks on one node) rank c updates chunk c of
 * every parameter and state array and writes the new parameters into every rank's copies, so
 * the update's work is divided by R and its pass over the parameters shares the reduction's
 * pass over the gradients. The state is private (troupe_coll_apply_t n_private): rank c keeps
 * chunk c of it to itself, current on rank c only, which saves a copy of each state array to
 * every other rank each step (with AdamW, two of the three arrays the update writes).
 * troupe_dp_save gathers it first (TROUPE_COLL_UNSHARD), and a request that leaves shared
 * memory (a failed mapping turns it off) gathers it through MPI before updating every element;
 * on the MPI paths (several nodes) every rank updates every element after
 * the reduction, as the routine would. The optimizer routine is compiled without fma fusion
 * (troupe_compile_unfused) and the fused update does the same operations in the same order, so
 * fused and unfused runs give the same bits, as do all ranks' parameters, and their state once
 * gathered (tests/mpi/test_dp_fused.c, tests/mpi/trainer_shard.sh). For
 * the shared-memory path the parameters and each state array are uploaded into one pool each,
 * in the gradients' order (troupe_init_from_host_packed), so they lie as the gradients do; a
 * model whose gradients form no span there takes the MPI path, fused all the same, and one whose
 * parameters or state do not lie so in shareable memory (a pool under 64 KiB, a parameter known
 * shared across streams) reduces through shared memory and then updates every element on every
 * rank: the same bits whichever way. The decision
 * and its reason are logged at debug level (subsystem parallel); troupe_dp_fused_update tells
 * it. The step breakdown (Step breakdown) then says update=fused and counts the update in
 * exchange_us (optimizer_us 0).
 *
 * Fused update across streams: with several streams (on some rank: the ranks agree) on
 * backends whose streams are threads on host memory (cpu), no exchange or the in-place one,
 * one gradient routine, single-precision parameters none of which is shared across streams,
 * and unless TROUPE_DP_FUSED_UPDATE=off, steps 2, 4 and 5 run as passes divided among the
 * streams (parallel/dp_local.c), and the update is not fused into the allreduce (every rank's
 * request then carries none). With one rank (or local_only) it is one pass: every
 * replica lends its gradients and parameters (replica 0 its optimizer state too) to the step,
 * and when every stream reached its lend, stream k, on its own thread, takes chunk k of the
 * parameters (laid end to end, cut at cache lines): it sums the n gradients block by block in
 * the tree merge's order, runs the update on replica 0's parameter and state (the fused
 * update's statements: troupe__dp_apply) and copies the new values into every other replica's
 * parameter; each stream goes on once every stream finished. With several ranks a first pass
 * leaves the tree merge's sums in replica 0's gradients, the in-place allreduce sums those
 * across the ranks (step 3, as without the passes), and a second pass updates from them and
 * copies: every rank updates every element, each of its streams 1/n of them (a rank of one
 * stream runs the second pass alone). The merge buffers' copies and
 * the separate passes go, the update's work is divided by n, and no core writes lines the
 * others hold for reading (the separate form's copies made stream 0's next update wait on
 * every line of its parameters). Same bits as the separate merge, optimizer routine and copies
 * (tests/test_dp_streams.c, tests/mpi/test_dp_fused.c); troupe_dp_fused_streams tells it, the decision and its reason are logged
 * at debug level. A stream that fails before the pass, or that the others waited for
 * TROUPE_TIMEOUT_S to reach a merge pass, fails the step on every stream with the reason and
 * the streams that did not arrive, instead of hanging (before the update pass the streams wait
 * for stream 0, which waits for the allreduce and its deadlines, warning each TROUPE_TIMEOUT_S).
 *
 * Thread safety: one thread drives a troupe_dp_t. Ownership: the caller keeps its references
 * to the comp and nodes (borrowed for troupe_dp_new, retained where needed); troupe_dp_new
 * refines the memory modes of grad_comp's nodes as the compiler does (see Overlap).
 */
#ifndef TROUPE_PARALLEL_DP_H
#define TROUPE_PARALLEL_DP_H

#include "troupe/actors/backend.h"
#include "troupe/actors/context.h"
#include "troupe/actors/event.h"
#include "troupe/base/config.h"
#include "troupe/base/status.h"
#include "troupe/ir/assign.h"
#include "troupe/ir/tnode.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_dp troupe_dp_t;

typedef enum troupe_optimizer_kind {
    TROUPE_OPT_SGD = 0,
    TROUPE_OPT_ADAMW,
} troupe_optimizer_kind_t;

typedef struct troupe_optimizer {
    troupe_optimizer_kind_t kind;
    double lr;           /* > 0 */
    double momentum;     /* SGD, 0 <= momentum < 1 */
    double weight_decay; /* >= 0 */
    double beta1, beta2; /* AdamW, in [0, 1) */
    double eps;          /* AdamW, > 0 */
} troupe_optimizer_t;

/* Defaults: SGD lr 0.1 momentum 0.9 wd 0; AdamW lr 1e-3 betas (0.9, 0.999) eps 1e-8 wd 0.01. */
troupe_optimizer_t troupe_optimizer_default(troupe_optimizer_kind_t kind);
const char *troupe_optimizer_name(troupe_optimizer_kind_t kind); /* "sgd", "adamw" */
/* "sgd" / "adamw" -> kind; INVALID_ARGUMENT naming the text and the choices. */
TROUPE_MUST_USE troupe_status_t troupe_optimizer_parse(const char *text,
                                                       troupe_optimizer_kind_t *out);

typedef struct troupe_dp_model {
    const troupe_asgn_comp_t *grad_comp; /* forward + backward for one minibatch */
    const char *batch_index;       /* the comp's static index symbol selecting the minibatch */
    int64_t num_batches;           /* minibatches available (the symbol's range when it has one) */
    troupe_tnode_t *const *params; /* n_params parameter nodes (hosted: initial values) */
    troupe_tnode_t *const *grads;  /* their gradients, written by grad_comp, same dims/prec */
    size_t n_params;
    troupe_tnode_t *loss; /* optional scalar written by grad_comp, or NULL */
    /* Nodes grad_comp reads that are neither params nor embedded (the data set, labels):
     * hosted; uploaded once per stream (init_from_host) before the first step. */
    troupe_tnode_t *const *inputs;
    size_t n_inputs;
    /* Optional minibatch feed. NULL (the indexed form): grad_comp selects its minibatch itself
     * through the static index batch_index. Non-NULL (the fed form): feed_comp has the static
     * index batch_index and writes the minibatch into fixed nodes that grad_comp reads (e.g.
     * x [B,in] := x_all[batch], y [B,out] := y_all[batch]); grad_comp has no static index of
     * that name. dp compiles it once, links it on every replica before the gradient routine
     * (same stream, same context chain) and, each step, runs it with batch_index bound to the
     * replica's minibatch just before that replica's gradient routine. Why: the gradient
     * routine then launches with the same arguments every step, so on a backend with graph
     * entries (troupe_backend_has_graphs: cuda) it is captured once and replayed (one graph
     * launch per step) like the merge and optimizer routines, where the indexed form has a new
     * binding per minibatch and stays on plain launches; on a host backend the feed is one copy
     * more per step and buys nothing. Both forms compute the same values when the feed is an
     * exact copy. The fixed nodes must outlive the feed routine (materialized, not virtual or
     * local) and belong to one replica (not shared across streams); feed_comp must not mention
     * params, grads or loss; the data set it reads goes in inputs. Borrowed for the call. */
    const troupe_asgn_comp_t *feed_comp;
} troupe_dp_model_t;

typedef struct troupe_dp_config {
    const char *backend; /* "cpu", "sync"; NULL: troupe_config_backend() */
    int streams;         /* local replicas; <= 0: the device's suggested_num_streams */
    troupe_optimizer_t optimizer;
    /* true: this rank trains alone, as if it were rank 0 of 1, even under a distributed
     * cluster: no broadcast in troupe_dp_new, no allreduce in troupe_dp_step, the loss is not
     * averaged across ranks, replica k of step s gets minibatch s*N + k, and troupe_dp_save
     * writes on every rank. For rank-local references and evaluation (zero-initialised
     * configs keep the distributed behaviour). */
    bool local_only;
    /* true: the cross-rank allreduce of single-precision gradients travels as bfloat16
     * (TROUPE_COLL_BF16, transport/mpi/collective.h: half the bytes, bfloat16's 8 significant
     * bits; PyTorch DDP's bf16_compress_hook, Horovod's Compression.fp16). Every rank must
     * set it alike (fingerprinted). false (default): exact single-precision sums. */
    bool compress_bf16;
    /* The program's settings that every rank must give alike (above, Ranks that disagree):
     * n_settings (at most TROUPE_DP_MAX_SETTINGS) named values, borrowed for the call. NULL/0:
     * none. */
    const struct troupe_dp_setting *settings;
    size_t n_settings;
    /* The device ordinals of the backend this rank replicates on (n_devices entries, distinct,
     * borrowed for the call). NULL/0: troupe_dp_pick_devices (TROUPE_DEVICE, else the
     * node-local rank's share). Replicas are laid out consecutively: with N replicas over D
     * devices, replica k runs on devices[k / ceil(N / D)], so the first merge rounds stay on a
     * device and later ones cross devices (device_to_device COPY into the receiving stream's
     * merge buffer; the parameters go back with device_to_device NO). A device that does not
     * exist is NOT_FOUND naming it and the backend's count. */
    const int *devices;
    int n_devices;
    /* true: the cross-rank allreduce of the gradients goes through host memory: the owner
     * stream's gradients are copied to their host arrays (to_host), reduced there by a
     * host-level allreduce per bucket (the gradients in node-id order cut greedily at
     * troupe_config_fusion_bytes(), the same on every rank: each bucket's request is
     * fingerprinted with its tensors and the fusion size), and copied back (from_host) before
     * the optimizer. Pipelined, without host waits: bucket b's allreduce starts once its
     * to_host copies completed (troupe_allreduce_args_t.after) while the owner stream copies
     * bucket b+1, and its copies back overlap the later buckets' reductions. With CUDA-aware
     * MPI (TROUPE_CUDA_AWARE=on, or auto and MPIX_Query_cuda_support() says so) a backend that
     * can lend its arrays hands them to the transport in place instead (on a host backend
     * with this set: the ordinary in-place path); the cuda backend cannot lend device memory
     * yet and stages whatever MPI supports. It is
     * what a backend without host-addressable memory (cuda: its arrays cannot be lent to the
     * transport) does whatever this says; set it to force that path on a host backend (tests,
     * or a transport that must not touch device pools). The sums are the same bits as the
     * device-level path's (same request, same reduction). The gradients must be hostable
     * (not Virtual/Local/On_device): INVALID_ARGUMENT naming the node otherwise. Ranks whose
     * exchanges differ (a cuda rank beside a cpu rank; CUDA-aware MPI detected on some ranks
     * only) would issue different requests: troupe_dp_new compares them (with the segment
     * count, one small allreduce) and then every rank stages, logged at info level. */
    bool stage_through_host;
    /* Whether each gradient bucket's allreduce overlaps the rest of the backward pass (above,
     * Overlap): TROUPE_DP_OVERLAP_AUTO (0, the default) follows troupe_config_dp_overlap()
     * (TROUPE_DP_OVERLAP); ON or OFF decide for this run. */
    troupe_dp_overlap_t overlap;
    /* Gradient accumulation: K micro-steps per optimizer step (0 means 1; at most
     * TROUPE_DP_MAX_GRAD_ACCUM). Micro-step j of step s gives replica k of rank r the minibatch
     * of round s * K + j (step 1 above); each replica sums its K gradients, the merge and the
     * exchange run once, the update scales by 1 / (K * T), and troupe_dp_last_loss is the mean
     * over the micro-steps too. Equals one step on a K times larger batch within float rounding
     * (docs/parallel.md, Accumulation). Every rank must give the same K (fingerprinted). */
    int grad_accum;
} troupe_dp_config_t;
#define TROUPE_DP_MAX_GRAD_ACCUM 65536

/* One setting of a run, as its user knows it (examples/fmnist: {"--epochs", "10"}): name 1 or
 * more bytes, value any text (the message shows its first 127 bytes; all of it is compared). */
typedef struct troupe_dp_setting {
    const char *name;
    const char *value;
} troupe_dp_setting_t;
#define TROUPE_DP_MAX_SETTINGS 32

/* Checks that every rank of the cluster gives the same settings (names, order and values):
 * a collective (every rank calls it, in the same order as its other collectives; without a
 * distributed cluster it returns OK). For the settings a program acts on before troupe_dp_new
 * (a check that exits on one rank only would leave the others waiting for it until the
 * deadline). Errors: FAILED_PRECONDITION, alike on every rank, naming the first (up to three)
 * differing settings and each value with its ranks ("--optimizer is 'sgd' on rank 0, 'adamw'
 * on rank 1"); INVALID_ARGUMENT (more than TROUPE_DP_MAX_SETTINGS, a setting without a name or
 * value); the transport's errors. */
TROUPE_MUST_USE troupe_status_t troupe_dp_agree(const troupe_dp_setting_t *settings, size_t n);

/* The replicas of the whole run when this rank runs `streams` (> 0) of them: *out_total, the
 * sum over every rank, and *out_offset, the sum over the ranks before this one (a collective,
 * as troupe_dp_agree; without a distributed cluster: streams and 0). A program splits its
 * global batch over *out_total replicas when ranks may run different numbers of streams.
 * Errors: INVALID_ARGUMENT, the transport's. */
TROUPE_MUST_USE troupe_status_t troupe_dp_replicas(int streams, int64_t *out_total,
                                                   int64_t *out_offset);

/* The devices of a backend this rank uses (troupe_dp_pick_devices). */
#define TROUPE_DP_MAX_DEVICES 64
typedef struct troupe_dp_devices {
    int n;                               /* 1 to TROUPE_DP_MAX_DEVICES */
    int ordinals[TROUPE_DP_MAX_DEVICES]; /* distinct, in use order */
    int local_rank, local_size;          /* this rank's place on its node, as found */
    bool from_env;                       /* true: TROUPE_DEVICE chose them */
    char why[192];                       /* how they were chosen, for logs and messages */
} troupe_dp_devices_t;

/* Picks this rank's device(s) of backend b (one rank per GPU is the usual layout):
 *   - TROUPE_DEVICE (troupe_config_device: "1" or a list "0,2") when set: exactly those;
 *   - else by the node-local rank l of L local ranks (the cluster's when it is initialized:
 *     OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or MPI's shared-memory communicator; before
 *     troupe_cluster_init, OMPI_COMM_WORLD_LOCAL_RANK/_SIZE or SLURM_LOCALID/
 *     SLURM_NTASKS_PER_NODE from the environment; else 0 of 1) over the backend's D devices:
 *     when l < D, the share l, l + L, l + 2L, ... < D (one rank alone takes every device;
 *     two ranks on four GPUs take {0, 2} and {1, 3}); when l >= D, device l mod D alone
 *     (ranks share devices).
 * Logs at info level (subsystem parallel) which devices and why (out->why). Errors:
 * FAILED_PRECONDITION (b has no device), NOT_FOUND (TROUPE_DEVICE names an ordinal b lacks:
 * the message names it, the backend and its count), INVALID_ARGUMENT (NULL). */
TROUPE_MUST_USE troupe_status_t troupe_dp_pick_devices(troupe_backend_t *b,
                                                       troupe_dp_devices_t *out);

/* The streams per rank a run uses when troupe_dp_config_t.streams is 0: the backend's
 * suggestion (troupe_suggested_num_streams, on "cpu" the cores of the CPU affinity split among
 * its devices) summed over the devices troupe_dp_pick_devices gives this rank. On host
 * backends ("cpu", "sync") ranks that share a device share its cores, so a device's suggestion
 * is divided by the local ranks that use it (at least 1 per device): two ranks on a 2-core
 * machine with one device get one stream each instead of four threads on two cores. With
 * TROUPE_DEVICE every local rank is assumed to use the devices it names. On a device backend
 * ("cuda") each device takes one replica: its kernels fill the GPU, and the backend's suggestion
 * (the seed's multiprocessor count) would split the minibatch into a replica per
 * multiprocessor. Errors: those of troupe_dp_pick_devices. */
TROUPE_MUST_USE troupe_status_t troupe_dp_suggested_streams(troupe_backend_t *b, int *out);

/* Builds the driver: opens the backend, makes the streams, compiles and links the gradient,
 * merge and optimizer routines, uploads params (from their host arrays) and inputs to every
 * stream. With the cluster distributed, parameters are broadcast from rank 0 first, so every
 * rank starts from the same values. Caller owns *out.
 * Logs at debug level (subsystem parallel) which form the model uses (fed or indexed) and
 * whether its gradient routine is a graph candidate on this backend.
 * Errors: INVALID_ARGUMENT (NULL, n_params == 0, grads whose dims/prec differ from params,
 * a batch_index the comp lacks, bad optimizer settings — each named; with a feed_comp: a
 * feed_comp without batch_index, a grad_comp that still has it, a feed_comp that is grad_comp
 * or mentions a parameter, gradient or the loss, a fixed node grad_comp reads that the feed
 * routine does not materialize, a grad_comp that reads none of the feed's nodes),
 * FAILED_PRECONDITION when the ranks disagree on the configuration (above, Ranks that disagree)
 * or a fixed node shared across streams is written by a second replica's feed (the link's check),
 * the errors of troupe_backend_open / troupe_compile / troupe_link / transfers, the cluster's
 * status. */
TROUPE_MUST_USE troupe_status_t troupe_dp_new(const troupe_dp_config_t *cfg,
                                              const troupe_dp_model_t *model, troupe_dp_t **out);

/* Awaits every stream (configured timeout), finalizes contexts, closes the backend.
 * NULL-safe; nulls *dp_p. */
void troupe_dp_destroy(troupe_dp_t **dp_p);

/* Schedules one synchronous step (1-5 above) and returns without waiting; the next call's
 * work queues behind it.
 * Step breakdown: at TROUPE_LOG=debug:parallel, steps 0-9 and every 100th log one line, when
 * the step completed: "dp step S breakdown: wall_us= compute_us= merge_us= exchange_us=
 * optimizer_us= host_us= exchange=none|in-place|staged|direct buckets= d2h_us= reduce_us=
 * h2d_us= overlap_us= compute_overlap_us= update=routine|fused|streams" (microseconds, from the completion times of the
 * step's events on troupe_now_ns, the trace recorder's clock): compute from the step's start
 * on the owner stream to the last replica's gradient routine, merge to the owner stream's
 * last merge, exchange to the last copy back (staged) or the allreduce (in place), optimizer
 * to its end — the four add up to wall; d2h/reduce/h2d the staged exchange's copies and
 * reductions (reduce: in place too, each bucket from when the owner stream handed it over
 * and the previous one finished), overlap_us how much of the staged ones ran at once
 * (d2h + reduce + h2d - exchange), compute_overlap_us how much of the reductions ran while
 * gradients were still computed (buckets = segments in place, with Overlap: the time each
 * bucket's allreduce ran before the last replica's gradient routine ended; 0 with one
 * gradient routine, where no bucket is ready before it ends); host_us the time this
 * call took; update=fused when the optimizer step ran inside the allreduce (Fused update: its
 * time is then in exchange_us and reduce_us, and optimizer_us is 0), update=streams when the
 * merge and the optimizer step ran as passes across the streams (Fused update across streams:
 * with one rank merge_us is then 0 and optimizer_us the pass, from the last gradient routine's
 * end, waits included; with several ranks merge_us is the merge pass and optimizer_us the
 * update pass, from the allreduce's end). On a backend whose events complete asynchronously (cuda) the times are when the
 * host learned of the completions. Errors: a stream's or the transport's failure (the message names the
 * stream or ranks), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_dp_step(troupe_dp_t *dp);

/* Waits (configured timeout) for every scheduled step. Errors: the first failure, named;
 * DEADLINE_EXCEEDED. */
TROUPE_MUST_USE troupe_status_t troupe_dp_sync(troupe_dp_t *dp);

/* The mean over all replicas of all ranks of `loss` for the last completed step (syncs).
 * FAILED_PRECONDITION when the model has no loss node or no step ran. */
TROUPE_MUST_USE troupe_status_t troupe_dp_last_loss(troupe_dp_t *dp, double *out);

/* Copies the current parameters into their host arrays (syncs; from stream 0). */
TROUPE_MUST_USE troupe_status_t troupe_dp_params_to_host(troupe_dp_t *dp);

/* Uploads the params' host arrays to every stream (after editing them on the host, or after
 * a load); the optimizer state is kept. */
TROUPE_MUST_USE troupe_status_t troupe_dp_params_from_host(troupe_dp_t *dp);

/* Sets the learning rate for later steps (> 0, else INVALID_ARGUMENT). */
TROUPE_MUST_USE troupe_status_t troupe_dp_set_lr(troupe_dp_t *dp, double lr);

int troupe_dp_num_streams(const troupe_dp_t *dp);    /* local replicas N */
/* The device ordinal replica k (0 <= k < N) runs on; -1 for a bad k. */
int troupe_dp_replica_device(const troupe_dp_t *dp, int k);
/* Whether the cross-rank allreduce goes through host memory (troupe_dp_config_t.
 * stage_through_host, a backend without host-addressable memory, or another rank's exchange
 * differing from this one's); false with one rank or local_only, where nothing crosses ranks. */
bool troupe_dp_staged(const troupe_dp_t *dp);
/* Whether each step's optimizer update is fused into the cross-rank allreduce (above, Fused
 * update): decided in troupe_dp_new from this rank's settings (TROUPE_DP_FUSED_UPDATE must be
 * alike on every rank: a rank that differs fails the first step's allreduce naming the fused
 * update); false with one rank, and when the passes across the streams take the update
 * (troupe_dp_fused_streams: several streams on some rank). */
bool troupe_dp_fused_update(const troupe_dp_t *dp);
/* Whether each step's merge across this rank's streams and its optimizer update run as passes
 * divided among the streams (above, Fused update across streams): decided in troupe_dp_new;
 * false when every rank runs one stream (with several ranks the allreduce then carries the
 * update: troupe_dp_fused_update), on backends whose streams are not threads on host memory,
 * or with TROUPE_DP_FUSED_UPDATE=off; false for NULL. Borrows dp; no status to handle. */
bool troupe_dp_fused_streams(const troupe_dp_t *dp);
int64_t troupe_dp_steps_done(const troupe_dp_t *dp); /* steps scheduled so far */
/* The owner stream's context holding the current parameters (borrowed): link evaluation
 * routines to it (after troupe_dp_sync). */
troupe_context_t *troupe_dp_owner_context(troupe_dp_t *dp);
troupe_backend_t *troupe_dp_backend(troupe_dp_t *dp); /* borrowed */

/* Checkpoints (atomic: written to "<path>.tmp.<pid>", fsynced, renamed over path; a save first
 * removes the "<path>.tmp.<pid>" files that processes of this machine which no longer run left
 * behind, as a crash does). The file (format version 3; the layout is in parallel/dp_ckpt.c)
 * holds a magic "TROUPECK", the step count (which is also AdamW's step t), the optimizer kind,
 * the checkpoint note, the run's record (the layout that saved: ranks x streams; the learning
 * rate in effect; the plan set with troupe_dp_set_plan and the data position derived from it)
 * and, per parameter in order, its label, precision, dims, values and optimizer state (SGD's
 * momentum; AdamW's first and second moments), and a CRC-32 (zlib) of everything before it.
 * Every rank calls it at the same step (it is collective whenever the update is fused into the
 * allreduce and has optimizer state: several ranks, SGD with momentum or AdamW; the gather
 * moves data only where shared memory sharded the state). Only rank 0 writes (every rank with
 * local_only; the others sync and return OK), after the ranks gather the optimizer state that
 * the fused update keeps sharded (Fused update); a rank that steps on while another saves fails
 * both with FAILED_PRECONDITION ("rank 0 gathers the sharded state ... every rank must save
 * the checkpoint"). Every rank may load.
 *
 * Resuming: a load restores the parameters, the optimizer state, the step count, the learning
 * rate, the note and the plan. The minibatch of replica k at step s is a function of s and the
 * layout (the round-robin rule above), so a run resumed with the layout that saved continues
 * with the same minibatches and gives bitwise the same parameters as a run that never stopped.
 * A load with another layout (ranks x streams) is accepted: a step then covers the same global
 * minibatch when the program keeps global_batch and gives num_batches = steps_per_epoch * N * R
 * (as examples/fmnist does), and the results equal the first layout's to float rounding (the
 * gradient sums are added in another order), not bitwise.
 * Older files: versions 1 (no note) and 2 (no run record) still load; their record reads as
 * zeros (unknown).
 * Errors: save: NOT_FOUND / FAILED_PRECONDITION / RESOURCE_EXHAUSTED with the path and
 * strerror; load: NOT_FOUND (no file), INVALID_ARGUMENT naming the path and the problem
 * (bad magic, version, truncated, CRC mismatch, a parameter whose count/label/dims/precision
 * differ from the model's). A failed load changes nothing. */
TROUPE_MUST_USE troupe_status_t troupe_dp_save(troupe_dp_t *dp, const char *path);
TROUPE_MUST_USE troupe_status_t troupe_dp_load(troupe_dp_t *dp, const char *path);

/* The run's plan, recorded in every later checkpoint so that a resumed run can check it
 * continues the same run and find its place: how many samples one step takes (over every
 * replica of every rank), how many steps make an epoch, the seed of the data order, and the
 * length of the learning-rate schedule. A save derives from it the data position of the next
 * step: epoch = steps / steps_per_epoch and sample_in_epoch = (steps % steps_per_epoch) *
 * global_batch (the index, in the epoch's order, of that step's first sample). A zero plan
 * (the default) records no position. */
typedef struct troupe_dp_plan {
    int64_t global_batch;    /* samples per step, all replicas of all ranks (>= 0; 0: none) */
    int64_t steps_per_epoch; /* steps per pass over the data (> 0 when global_batch > 0) */
    uint64_t data_seed;      /* the data order's seed (the shuffle) */
    int64_t schedule_steps;  /* the learning-rate schedule's length in steps (0: constant) */
} troupe_dp_plan_t;

/* set: INVALID_ARGUMENT (NULL, a negative field, global_batch > 0 with steps_per_epoch <= 0).
 * get: the current plan (zeros when none was set or loaded). */
TROUPE_MUST_USE troupe_status_t troupe_dp_set_plan(troupe_dp_t *dp, const troupe_dp_plan_t *plan);
troupe_dp_plan_t troupe_dp_plan(const troupe_dp_t *dp);

/* What a checkpoint file holds, read without a model (troupe_dp_checkpoint_parse/_read):
 * for tools (`troupe run` reads the step of the last committed checkpoint) and for programs
 * that check a file before building their model. Fields a file's version lacks are 0. */
#define TROUPE_DP_NOTE_MAX 4096
typedef struct troupe_dp_checkpoint_info {
    uint32_t version;                  /* format version, 1 to 3 */
    int64_t steps;                     /* steps done (the next step's index) */
    troupe_optimizer_kind_t optimizer; /* the optimizer whose state the file holds */
    int nstate;                        /* optimizer state arrays per parameter (0, 1, 2) */
    size_t n_params;
    size_t param_bytes;      /* bytes of parameter values in all */
    uint32_t params_crc32;   /* CRC-32 of the parameter values in order (compare two runs) */
    int ranks, streams;      /* v3: the layout that saved (ranks; rank 0's streams) */
    int64_t replicas;        /* v3: its replicas over all ranks */
    double lr;               /* v3: the learning rate in effect for the next step */
    troupe_dp_plan_t plan;   /* v3: the plan (zeros when none was set) */
    int64_t epoch;           /* v3 with a plan: the next step's epoch (from 0) */
    int64_t sample_in_epoch; /* v3 with a plan: its first sample's index in the epoch */
    char note[TROUPE_DP_NOTE_MAX + 1]; /* the checkpoint note ("" when none) */
} troupe_dp_checkpoint_info_t;

/* Parses a whole checkpoint image (bytes[len], borrowed) into *out, checking its structure,
 * sizes and CRC: the same reader troupe_dp_load uses before comparing with its model. `name`
 * (the path, or any label; NULL: "<memory>") goes into messages. INVALID_ARGUMENT naming name
 * and the problem (bad magic, unsupported version, truncated, an invalid field, CRC mismatch,
 * trailing bytes). _read reads the file first: NOT_FOUND (no file), FAILED_PRECONDITION (cannot
 * read), RESOURCE_EXHAUSTED, then _parse's errors. Never crashes on any input (fuzzed). */
TROUPE_MUST_USE troupe_status_t troupe_dp_checkpoint_parse(const void *bytes, size_t len,
                                                           const char *name,
                                                           troupe_dp_checkpoint_info_t *out);
TROUPE_MUST_USE troupe_status_t troupe_dp_checkpoint_read(const char *path,
                                                          troupe_dp_checkpoint_info_t *out);

/* The checkpoint note: a short text (at most TROUPE_DP_NOTE_MAX bytes) the program stores in
 * every later save, e.g. the settings a resumed run must repeat (examples/fmnist stores its
 * --batch and training-set size). troupe_dp_load replaces it with the loaded file's note (none
 * for a version 1 file). set: NULL or "" clears it; INVALID_ARGUMENT when too long or NULL dp,
 * RESOURCE_EXHAUSTED. get: the current note (borrowed, valid until the next set or load), or
 * NULL when there is none. */
TROUPE_MUST_USE troupe_status_t troupe_dp_set_checkpoint_note(troupe_dp_t *dp, const char *note);
const char *troupe_dp_checkpoint_note(const troupe_dp_t *dp);

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_PARALLEL_DP_H */
