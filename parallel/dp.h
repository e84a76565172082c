/* troupe — data-parallel training (docs/parallel.md; docs/architecture.md §5).
 *
 * A troupe_dp_t replicates a gradient computation on N streams (replicas) of each of R ranks
 * and runs synchronous SGD/AdamW steps: each replica computes the gradient of its minibatch
 * (round-robin over the global list: replica k of rank r at step s takes minibatch
 * s * T + (replicas of the ranks before r) + k, T = the replicas of all ranks; with
 * grad_accum K, K such rounds per step), the gradients are summed over the replicas in a fixed
 * order (a tree over the streams, then the ranks), the optimizer applies their mean and every
 * replica gets the new parameters. A run is bitwise reproducible for its layout and equals one
 * replica on the global batch up to float rounding. How a step exchanges, overlaps, updates
 * and accumulates is resolved once in troupe_dp_new; docs/parallel.md describes each strategy,
 * how they combine, and the optimizers' formulas.
 *
 * Gradient convention: grad_comp writes, for its minibatch, the gradient of the MEAN loss over
 * the minibatch into each grads[i] (overwriting it), and may write a scalar `loss` (the
 * minibatch's mean loss).
 *
 * Across ranks: every rank builds the same model (nodes created in the same order) and calls
 * troupe_dp_new / troupe_dp_step / troupe_dp_last_loss / troupe_dp_save in the same order;
 * troupe_dp_new fingerprints the settings that decide the results and fails every rank with
 * FAILED_PRECONDITION naming a setting the ranks disagree on (docs/parallel.md, Ranks that
 * disagree). Ranks may run different numbers of streams.
 *
 * Thread safety: one thread drives a troupe_dp_t. Ownership: the caller keeps its references
 * to the comp and nodes (borrowed for troupe_dp_new, retained where needed); troupe_dp_new
 * refines the memory modes of grad_comp's nodes as the compiler does (docs/parallel.md,
 * Overlap).
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
    /* Loss scaling (troupe_dp_config_t.loss_scaling): a hosted scalar (single or double) that
     * grad_comp's backward pass starts from instead of 1 (nn/grad.h, troupe_nn_grad_opts_t.
     * loss_scale), so that every gradient comes out multiplied by it. The driver writes the
     * current scale into it on every replica before a step that needs a new value. Required
     * when loss scaling is on, else NULL or ignored. Retained. */
    troupe_tnode_t *loss_scale;
} troupe_dp_model_t;

/* The precision a model computes its matrix products in (mixed precision, docs/trainer.md):
 * parameters, gradients and optimizer state stay single (master weights); the program builds
 * grad_comp so (nn/nn.h, troupe_nn_set_compute_prec). The driver agrees it across ranks and
 * turns loss scaling on for FP16 by default. */
typedef enum troupe_dp_precision {
    TROUPE_DP_PRECISION_FP32 = 0,
    TROUPE_DP_PRECISION_BF16,
    TROUPE_DP_PRECISION_FP16,
} troupe_dp_precision_t;
const char *troupe_dp_precision_name(troupe_dp_precision_t p); /* "fp32", "bf16", "fp16" */
/* "fp32" / "bf16" / "fp16" -> *out; INVALID_ARGUMENT naming the text and the choices. */
TROUPE_MUST_USE troupe_status_t troupe_dp_precision_parse(const char *text,
                                                          troupe_dp_precision_t *out);

/* Whether dynamic loss scaling runs (troupe_dp_config_t.loss_scaling). */
typedef enum troupe_dp_loss_scaling {
    TROUPE_DP_LOSS_SCALING_AUTO = 0, /* on for precision FP16 only */
    TROUPE_DP_LOSS_SCALING_ON,
    TROUPE_DP_LOSS_SCALING_OFF,
} troupe_dp_loss_scaling_t;
/* Dynamic loss scaling's defaults (torch.cuda.amp.GradScaler's). */
#define TROUPE_DP_LOSS_SCALE_INIT 65536.0
#define TROUPE_DP_LOSS_SCALE_GROWTH 2.0
#define TROUPE_DP_LOSS_SCALE_BACKOFF 0.5
#define TROUPE_DP_LOSS_SCALE_INTERVAL 2000

/* Where a step's optimizer update runs (docs/parallel.md, The code, by strategy). */
typedef enum troupe_dp_update {
    TROUPE_DP_UPDATE_AUTO = 0, /* the rules of docs/parallel.md (and TROUPE_DP_FUSED_UPDATE) */
    TROUPE_DP_UPDATE_ROUTINE,  /* the optimizer routine on the owner stream, after the exchange */
    TROUPE_DP_UPDATE_FUSED,    /* fused into the in-place allreduce (Fused update) */
    TROUPE_DP_UPDATE_STREAMS,  /* passes across the streams (Fused update across streams) */
} troupe_dp_update_t;
const char *troupe_dp_update_name(troupe_dp_update_t u); /* "auto", "routine", "fused", ... */

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
    /* The program's settings that every rank must give alike (docs/parallel.md, Ranks that disagree):
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
    /* Whether each gradient bucket's allreduce overlaps the rest of the backward pass (docs/parallel.md,
     * Overlap): TROUPE_DP_OVERLAP_AUTO (0, the default) follows troupe_config_dp_overlap()
     * (TROUPE_DP_OVERLAP); ON or OFF decide for this run. */
    troupe_dp_overlap_t overlap;
    /* With overlap: the gradient bytes after which a segment closes its bucket (PyTorch DDP's
     * bucket_cap_mb; the first bucket closes after at most TROUPE_DP_FIRST_BUCKET_BYTES).
     * 0 follows troupe_config_dp_bucket_bytes() (TROUPE_DP_BUCKET_BYTES, 25 MiB); 1: a bucket
     * at every place a gradient is last used. Every rank must give the same value. */
    size_t bucket_bytes;
    /* Gradient accumulation: K micro-steps per optimizer step (0 means 1; at most
     * TROUPE_DP_MAX_GRAD_ACCUM). Micro-step j of step s gives replica k of rank r the minibatch
     * of round s * K + j (the round-robin rule above); each replica sums its K gradients, the merge and the
     * exchange run once, the update scales by 1 / (K * T), and troupe_dp_last_loss is the mean
     * over the micro-steps too. Equals one step on a K times larger batch within float rounding
     * (docs/parallel.md, Accumulation). Every rank must give the same K (fingerprinted). */
    int grad_accum;
    /* The update's form: AUTO (0) lets troupe_dp_new choose; ROUTINE always runs the routine;
     * FUSED or STREAMS asked for where the strategy cannot take it (one rank, a staged
     * exchange, overlap segments, one stream, grad_clip, ...) is INVALID_ARGUMENT naming the
     * conflict. Every rank must give the same (fingerprinted). */
    troupe_dp_update_t update;
    /* Global-norm gradient clipping (PyTorch's torch.nn.utils.clip_grad_norm_): C > 0 scales
     * the averaged gradient by min(1, C / (||g||_2 + 1e-6)) before the optimizer, the norm
     * taken over every parameter's gradient; 0: off. Finite and >= 0, else INVALID_ARGUMENT
     * naming grad_clip. With AUTO the update then runs as the routine (docs/parallel.md,
     * Gradient clipping). Fingerprinted. */
    double grad_clip;
    /* The model's compute precision (troupe_dp_precision_t; FP32, the zero value, by
     * default). Fingerprinted. */
    troupe_dp_precision_t precision;
    /* Dynamic loss scaling (GradScaler; docs/parallel.md, Loss scaling): AUTO (0) is on for
     * FP16 only. When on, the backward pass starts from the scale S (troupe_dp_model_t.
     * loss_scale), the averaged gradient is multiplied by 1/S before clipping and the update,
     * and a step whose averaged gradient holds an inf or nan changes nothing (parameters and
     * optimizer state stay; AdamW's t does not advance) on every rank, counts as skipped and
     * multiplies S by loss_scale_backoff; loss_scale_interval good steps in a row multiply it
     * by loss_scale_growth. The verdict is read back before the next step: one host wait per
     * step. The update then runs as the routine (FUSED or STREAMS: INVALID_ARGUMENT). 0 in the
     * numbers means the default: TROUPE_DP_LOSS_SCALE_INIT (65536), _GROWTH (2), _BACKOFF
     * (0.5), _INTERVAL (2000). Bad values (init not finite > 0, growth <= 1, backoff not in
     * (0, 1), interval < 0) are INVALID_ARGUMENT naming the field. Fingerprinted. */
    troupe_dp_loss_scaling_t loss_scaling;
    double loss_scale_init;
    double loss_scale_growth;
    double loss_scale_backoff;
    int64_t loss_scale_interval;
} troupe_dp_config_t;

/* Loss scaling's state (troupe_dp_loss_scale): whether it runs, the scale the next step uses,
 * the good steps in a row since the scale last changed, and the steps skipped so far (a
 * checkpoint keeps all three). */
typedef struct troupe_dp_loss_scale_state {
    bool on;
    double scale;
    int64_t good_steps;
    int64_t skipped_steps;
} troupe_dp_loss_scale_state_t;
/* Reads it after every scheduled step (syncs). Errors: INVALID_ARGUMENT (NULL), a step's
 * failure, the transfer's. */
TROUPE_MUST_USE troupe_status_t troupe_dp_loss_scale(troupe_dp_t *dp,
                                                     troupe_dp_loss_scale_state_t *out);
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
 * FAILED_PRECONDITION when the ranks disagree on the configuration (docs/parallel.md, Ranks that disagree)
 * or a fixed node shared across streams is written by a second replica's feed (the link's check),
 * the errors of troupe_backend_open / troupe_compile / troupe_link / transfers, the cluster's
 * status. */
TROUPE_MUST_USE troupe_status_t troupe_dp_new(const troupe_dp_config_t *cfg,
                                              const troupe_dp_model_t *model, troupe_dp_t **out);

/* Awaits every stream (configured timeout), finalizes contexts, closes the backend.
 * NULL-safe; nulls *dp_p. */
void troupe_dp_destroy(troupe_dp_t **dp_p);

/* Schedules one synchronous step (docs/parallel.md, The step) and returns without waiting; the next call's
 * work queues behind it.
 * At TROUPE_LOG=debug:parallel, steps 0-9 and every 100th log their breakdown when they
 * complete (docs/parallel.md, Step breakdown). Errors: a stream's or the transport's failure
 * (the message names the stream or ranks), RESOURCE_EXHAUSTED. */
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
/* Whether each step's optimizer update is fused into the cross-rank allreduce (docs/parallel.md, Fused
 * update): decided in troupe_dp_new from this rank's settings (TROUPE_DP_FUSED_UPDATE must be
 * alike on every rank: a rank that differs fails the first step's allreduce naming the fused
 * update); false with one rank, and when the passes across the streams take the update
 * (troupe_dp_fused_streams: several streams on some rank). */
bool troupe_dp_fused_update(const troupe_dp_t *dp);
/* Whether each step's merge across this rank's streams and its optimizer update run as passes
 * divided among the streams (docs/parallel.md, Fused update across streams): decided in troupe_dp_new;
 * false when every rank runs one stream (with several ranks the allreduce then carries the
 * update: troupe_dp_fused_update), on backends whose streams are not threads on host memory,
 * or with TROUPE_DP_FUSED_UPDATE=off; false for NULL. Borrows dp; no status to handle. */
bool troupe_dp_fused_streams(const troupe_dp_t *dp);
/* Bytes of optimizer state this rank holds for the update (the state arrays on the owner
 * stream, not their host copies; with the update fused into the allreduce on several ranks,
 * only this rank's shard: ZeRO stage 1, docs/parallel.md, Sharded optimizer state). 0 for
 * NULL or an optimizer without state. */
int64_t troupe_dp_optimizer_state_bytes(const troupe_dp_t *dp);
/* Bytes of device memory this rank's devices hold now (troupe_get_used_memory summed over the
 * devices its replicas run on): the parameters, the optimizer state and every stream's arrays
 * of the gradient routine, for one to size --batch against. 0 for NULL; a device whose figure
 * cannot be read counts 0. No status to handle. */
int64_t troupe_dp_device_bytes(troupe_dp_t *dp);
int64_t troupe_dp_steps_done(const troupe_dp_t *dp); /* steps scheduled so far */
/* The owner stream's context holding the current parameters (borrowed): link evaluation
 * routines to it (after troupe_dp_sync). */
troupe_context_t *troupe_dp_owner_context(troupe_dp_t *dp);
troupe_backend_t *troupe_dp_backend(troupe_dp_t *dp); /* borrowed */

/* Checkpoints (atomic: written to "<path>.tmp.<pid>", fsynced, renamed over path; a save first
 * removes the "<path>.tmp.<pid>" files that processes of this machine which no longer run left
 * behind, as a crash does). The file (format version 3, or 4 with loss scaling on, whose run
 * record adds the loss scale's state; the layout is in parallel/dp_ckpt.c)
 * holds a magic "TROUPECK", the step count (which is also AdamW's step t), the optimizer kind,
 * the checkpoint note, the run's record (the layout that saved: ranks x streams; the learning
 * rate in effect; the plan set with troupe_dp_set_plan and the data position derived from it)
 * and, per parameter in order, its label, precision, dims, values and optimizer state (SGD's
 * momentum; AdamW's first and second moments), and a CRC-32 (zlib) of everything before it.
 * Every rank calls it at the same step (it is collective whenever the update is fused into the
 * allreduce and has optimizer state: several ranks, SGD with momentum or AdamW; each rank then
 * holds only its shard of the state, ZeRO-1, which the save gathers in gradient order and a
 * load slices for this rank: docs/parallel.md, Sharded optimizer state). Only rank 0 writes (every rank with
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
 * A load restores the loss scale's state from a version 4 file (bitwise resume holds with loss
 * scaling too); other files leave it at its initial value.
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
    uint32_t version;                  /* format version, 1 to 4 */
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
    /* v4 (written when loss scaling is on): its state; 0 in older files */
    double loss_scale;
    int64_t loss_scale_good, skipped_steps;
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
