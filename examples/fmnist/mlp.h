/* fmnist — the trainer's models written as troupe assignments (ir/assign.h), for data-parallel
 * training with parallel/dp.h: a three-layer perceptron (in-h1-h2-out, ReLU, softmax
 * cross-entropy; kind FMNIST_MODEL_MLP, the default) or a convnet (FMNIST_MODEL_CNN, below).
 * Both share the node bookkeeping, the memory modes, the indexed and fed forms, the data
 * placement and the evaluation; only the layers and the initialisation differ.
 *
 * Model (row-major, minibatch rows b, Fashion-MNIST sizes 784-256-128-10):
 *   z1 = x w1 + b1,  a1 = relu z1          x [B,in], w1 [in,h1], b1 [h1]
 *   z2 = a1 w2 + b2, a2 = relu z2          w2 [h1,h2], b2 [h2]
 *   z3 = a2 w3 + b3                        w3 [h2,out], b3 [out]  (the logits)
 *   loss = mean_b ( log sum_c exp(z3[b,c] - m[b]) - (z3[b,y_b] - m[b]) ),  m[b] = max_c z3[b,c]
 * (the max subtraction keeps exp from overflowing). Backward, for the MEAN loss:
 *   dz3 = (softmax(z3) - onehot(y)) / B
 *   gw3 = a2^T dz3, gb3 = sum_b dz3,  da2 = dz3 w3^T, dz2 = (z2 > 0) ? da2 : 0
 *   gw2 = a1^T dz2, gb2 = sum_b dz2,  da1 = dz2 w2^T, dz1 = (z1 > 0) ? da1 : 0
 *   gw1 = x^T dz1,  gb1 = sum_b dz1.
 * The products with w^T read a transposed copy of w made at the start of the backward pass, so
 * every generated matmul loop walks contiguous memory in its innermost loop.
 *
 * The training set lives on the device as two hosted-constant nodes (one device-wide array,
 * uploaded once): x_all [num_batches, B, in] (pixels scaled to [0,1]) and the one-hot labels
 * y_all [num_batches, B, out]. Minibatch `batch` (the static index symbol FMNIST_BATCH_SYMBOL,
 * range num_batches) is rows batch*B .. batch*B+B-1 of the (shuffled) training set, reached in
 * one of two forms (fmnist_mlp_config_t.fed; parallel/dp.h, troupe_dp_model_t.feed_comp):
 *   indexed: the gradient computation has the symbol and reads x_all / y_all directly with
 *            "{batch}bi"-projections (no feed_comp);
 *   fed:     a feed computation feed_comp (with the symbol) copies the minibatch into two fixed
 *            materialized nodes x [B,in] and y [B,out], which the gradient computation (without
 *            a static index) reads: its launches then have the same arguments every step, so a
 *            backend with graphs replays it (cuda), where the indexed form is a new binding per
 *            minibatch. The copy is exact: both forms compute the same bits.
 * The gradient computation overwrites every gradient node (never accumulates) and writes the
 * scalar mean loss: the contract of parallel/dp.h.
 *
 * Initialisation (fmnist_mlp_init_params) is computed on the host from Threefry4x32 (crypto
 * variant, ir/ops.h) uniforms: w ~ U(-a, a) with a = sqrt(6 / fan_in) for the ReLU layers
 * (He et al. 2015, variance 2/fan_in) and a = sqrt(6 / (fan_in + fan_out)) for the last
 * (Glorot & Bengio 2010); biases 0. The key is (seed, parameter index), the counter the flat
 * element index, so the values do not depend on the number of streams or ranks.
 *
 * The convnet (cfg.kind FMNIST_MODEL_CNN; nn/conv.h, nn/pool.h), NCHW, an image row of
 * side*side pixels viewed as (1, side, side), side 28:
 *   conv3x3(1 -> c1) ReLU, conv3x3(c1 -> c2) ReLU, maxpool 2, conv3x3(c2 -> c3) ReLU, maxpool 2
 *   (28 -> 26 -> 24 -> 12 -> 10 -> 5), then fc1 (c3*5*5 -> hidden1) ReLU, fc2 (hidden1 -> out).
 * Stride 1, no padding; c1 c2 c3 = 32 32 64, hidden1 = 128. fc1 reads the 4-d pool output
 * directly ("bchw,chwj=>bj", weight (c3, 5, 5, hidden1)): no flatten copy, and its gradients
 * are plain einsum transposes (a flattening "bchw=>b(25c+5h+w)" would be an affine lhs index).
 * Parameters: conv1_w (c1, 1, 3, 3), conv1_b, conv2_w, conv2_b, conv3_w, conv3_b, fc1_w, fc1_b,
 * fc2_w (hidden1, out), fc2_b. Initialisation (fmnist_mlp_init_params): Kaiming normal
 * (nn/init.h) with gain sqrt(2) before a ReLU and 1 for fc2, fan_in = Cin*9 or the rows of
 * the weight, one seed per tensor (seed, index); biases 0. A conv or pool that does not fit
 * its input (an image side below 14) is refused when the model is built, naming the layer
 * and the shapes.
 *
 * Thread safety: build and fill from one thread. Ownership: fmnist_mlp_new/_eval_new return
 * objects the caller frees with _destroy; they own their tnodes and comps (each node one
 * reference), which callers borrow.
 */
#ifndef FMNIST_MLP_H
#define FMNIST_MLP_H

#include "actors/routine.h"
#include "base/status.h"
#include "idx.h"
#include "ir/assign.h"
#include "ir/tnode.h"
#include "nn/conv.h"
#include "parallel/dp.h"

#include <stdbool.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FMNIST_BATCH_SYMBOL "batch"
#define FMNIST_MLP_NPARAMS 6 /* w1 b1 w2 b2 w3 b3 */
#define FMNIST_CNN_NPARAMS 10
#define FMNIST_MAX_PARAMS 10
#define FMNIST_EVAL_SYMBOL "chunk" /* the evaluation's static index (fmnist_mlp_eval_t) */

typedef enum fmnist_model_kind {
    FMNIST_MODEL_MLP = 0,
    FMNIST_MODEL_CNN,
} fmnist_model_kind_t;
/* "mlp" / "cnn" -> *out; INVALID_ARGUMENT naming the text and the choices. */
TROUPE_MUST_USE troupe_status_t fmnist_model_parse(const char *text, fmnist_model_kind_t *out);
const char *fmnist_model_name(fmnist_model_kind_t k); /* "mlp", "cnn" */

typedef struct fmnist_mlp_config {
    fmnist_model_kind_t kind;          /* MLP (default) or CNN */
    int64_t in, hidden1, hidden2, out; /* 784, 256, 128, 10; CNN: in = side^2, hidden2 unused */
    int64_t side;                      /* CNN: the image side (28) */
    int64_t conv[3];                   /* CNN: the convolutions' output channels (32, 32, 64) */
    int64_t eval_chunk;                /* CNN: images per evaluation run, 0: 500 (memory) */
    /* CNN: the convolutions' lowering (nn/conv.h); 0: AUTO. fmnist_conv_lowering_resolve gives
     * the trainer's choice for a backend. */
    troupe_nn_conv2d_lowering_t conv_lowering;
    int64_t batch;                     /* rows per minibatch (one replica's share) */
    int64_t num_batches;               /* minibatches held by x_all / y_all */
    troupe_prec_t prec;                /* SINGLE, or DOUBLE (gradient checks) */
    /* The linear layers' products: VOID (0) or prec in prec; BFLOAT16 or HALF (prec SINGLE):
     * mixed precision, bfloat16 or half copies of the factors, fp32 sums
     * (troupe_nn_set_compute_prec); HALF adds the loss scale node (loss_scale). */
    troupe_prec_t compute_prec;
    bool fed; /* true: the fed form (feed_comp, x, y); false: the indexed form (header) */
    /* true: x_all / y_all change between steps (the trainer's sharded data writes each step's
     * minibatches with troupe_tnode_set_values; loader.h): hosted non-constant, one array per
     * stream; false: hosted constant, filled once (fmnist_mlp_load_train). */
    bool changing;
    /* The gradient: derived from the forward pass by nn/ (false, the default), or the
     * hand-written backward kept as the tests' reference (true). */
    bool hand_grad;
} fmnist_mlp_config_t;

/* 784-256-128-10 in single precision with the given minibatch layout, indexed form. */
fmnist_mlp_config_t fmnist_mlp_config_default(int64_t batch, int64_t num_batches);
/* The convnet of the header (28x28 images, 32-32-64 channels, fc 128) likewise. */
fmnist_mlp_config_t fmnist_cnn_config_default(int64_t batch, int64_t num_batches);

/* The trainer's choice of form (--feed): auto picks fed on a backend whose driver replays
 * graphs (troupe_backend_has_graphs: cuda) and indexed elsewhere (cpu, sync: there the feed
 * is one more copy of the minibatch per step and buys nothing). */
typedef enum fmnist_feed {
    FMNIST_FEED_AUTO = 0,
    FMNIST_FEED_FED,
    FMNIST_FEED_INDEXED,
} fmnist_feed_t;
/* "auto" / "fed" / "indexed" -> *out; INVALID_ARGUMENT naming the text and the choices. */
TROUPE_MUST_USE troupe_status_t fmnist_feed_parse(const char *text, fmnist_feed_t *out);
const char *fmnist_feed_name(fmnist_feed_t f); /* "auto", "fed", "indexed" */
/* Whether f means the fed form on backend `backend` (NULL: troupe_config_backend()). */
bool fmnist_feed_resolve(fmnist_feed_t f, const char *backend);
/* The convnet's convolution lowering on backend `backend` (NULL: troupe_config_backend()):
 * IM2COL_FOLDED on cuda, whose GEMM step takes one product for the whole batch where the
 * per-sample forms are loops of products it runs as plain kernels (35-120x slower than cuDNN on
 * an H200, docs/trainer.md); AUTO elsewhere. */
troupe_nn_conv2d_lowering_t fmnist_conv_lowering_resolve(const char *backend);

typedef struct fmnist_mlp {
    fmnist_mlp_config_t cfg;
    int nparams;                               /* FMNIST_MLP_NPARAMS or FMNIST_CNN_NPARAMS */
    troupe_tnode_t *params[FMNIST_MAX_PARAMS]; /* hosted: initial values set on the host */
    troupe_tnode_t *grads[FMNIST_MAX_PARAMS];  /* same dims, labels "<param>_grad" */
    troupe_tnode_t *loss;                      /* scalar, hosted */
    /* [num_batches, batch, in], hosted constant; CNN: [num_batches, batch, 1, side, side] */
    troupe_tnode_t *x_all;
    troupe_tnode_t *y_all;         /* [num_batches, batch, out], hosted constant */
    troupe_asgn_comp_t *grad_comp; /* forward + backward of one minibatch */
    /* fed form only (NULL when indexed): x [batch, in] (CNN [batch, 1, side, side]) and
     * y [batch, out], materialized, and
     * the feed x := x_all[batch], y := y_all[batch] */
    troupe_tnode_t *x, *y;
    troupe_asgn_comp_t *feed_comp;
    troupe_tnode_t *inputs[2]; /* x_all, y_all: troupe_dp_model_t.inputs */
    troupe_tnode_t *loss_scale; /* compute_prec HALF: troupe_dp_model_t.loss_scale, else NULL */
    troupe_tnode_t **nodes;    /* every node created, for release */
    size_t nnodes, nodes_cap;
} fmnist_mlp_t;

/* Builds the nodes and the gradient computation. INVALID_ARGUMENT (a size < 1, a precision
 * other than single/double), RESOURCE_EXHAUSTED, the builders' errors. Caller owns *out. */
TROUPE_MUST_USE troupe_status_t fmnist_mlp_new(const fmnist_mlp_config_t *cfg, fmnist_mlp_t **out);
void fmnist_mlp_destroy(fmnist_mlp_t **m_p); /* NULL-safe, nulls *m_p */

/* The data-parallel model of m (parallel/dp.h) for num_batches = cfg.num_batches, in m's form
 * (feed_comp set when fed). *out points into m: valid while m lives. */
void fmnist_mlp_dp_model(const fmnist_mlp_t *m, troupe_dp_model_t *out);

/* The MLP's parameter labels: "w1" "b1" "w2" "b2" "w3" "b3". */
const char *fmnist_mlp_param_name(int i);
/* Parameter i's label in m's kind ("conv1_w", ...; the MLP's as above). */
const char *fmnist_mlp_param_label(const fmnist_mlp_t *m, int i);

/* Sets every parameter's host values from `seed` (see the header comment). Errors of
 * troupe_tnode_set_values, RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t fmnist_mlp_init_params(fmnist_mlp_t *m, uint64_t seed);

/* Fills x_all / y_all from the first num_batches*batch items of ds (pixels / 255, one-hot
 * labels). Must run before the nodes are first uploaded. INVALID_ARGUMENT when ds holds fewer
 * items, or its image size differs from cfg.in. */
TROUPE_MUST_USE troupe_status_t fmnist_mlp_load_train(fmnist_mlp_t *m, const fmnist_dataset_t *ds);

/* The same from raw values: x has num_batches*batch*in values, labels num_batches*batch
 * classes in 0..out-1 (INVALID_ARGUMENT naming the first bad one). */
TROUPE_MUST_USE troupe_status_t fmnist_mlp_set_train(fmnist_mlp_t *m, const double *x,
                                                     const uint8_t *labels);

/* A plain SGD step p -= lr * g over every parameter, for driving one context without
 * parallel/dp.h (tests, single-stream experiments). Caller owns *out. */
TROUPE_MUST_USE troupe_status_t fmnist_mlp_sgd_comp(const fmnist_mlp_t *m, double lr,
                                                    troupe_asgn_comp_t **out);

/* Forward pass over `n` images for evaluation: reads the params, writes logits. Link it where
 * the params live (troupe_dp_owner_context after troupe_dp_sync). The MLP takes the n images
 * in one run (chunk = n, nchunks = 1). The CNN runs chunks of cfg.eval_chunk images (its
 * activations for all 10000 test images would take gigabytes): x holds nchunks chunks (the
 * last padded with zero images) and run k (static index FMNIST_EVAL_SYMBOL = k) writes
 * chunk k's logits; fmnist_mlp_eval_run drives them. */
typedef struct fmnist_mlp_eval {
    int64_t n, chunk, nchunks;
    /* [n, in] (CNN [n, 1, side, side]) when nchunks = 1, else [nchunks, chunk, ...]; hosted
     * constant */
    troupe_tnode_t *x;
    troupe_tnode_t *logits; /* [chunk, out], hosted */
    troupe_asgn_comp_t *comp;
    troupe_tnode_t **nodes;
    size_t nnodes, nodes_cap;
} fmnist_mlp_eval_t;

TROUPE_MUST_USE troupe_status_t fmnist_mlp_eval_new(const fmnist_mlp_t *m, int64_t n,
                                                    fmnist_mlp_eval_t **out);
void fmnist_mlp_eval_destroy(fmnist_mlp_eval_t **e_p);
/* x := the first n images of ds / 255. INVALID_ARGUMENT when ds is smaller or the sizes
 * differ. Before the first upload only (x is constant). */
TROUPE_MUST_USE troupe_status_t fmnist_mlp_eval_load(fmnist_mlp_eval_t *e,
                                                     const fmnist_dataset_t *ds);
/* After a run of a one-chunk evaluation: the fraction of the n rows whose largest logit
 * (first on ties) is labels[row]. Reads the logits from the device (troupe_tnode_get_values).
 * FAILED_PRECONDITION when e has several chunks (use fmnist_mlp_eval_run). */
TROUPE_MUST_USE troupe_status_t fmnist_mlp_eval_accuracy(fmnist_mlp_eval_t *e,
                                                         const uint8_t *labels, double *out);
/* Runs `routine` (e->comp linked) once per chunk, waiting for each, and returns the accuracy
 * over the n images as fmnist_mlp_eval_accuracy. The routine's and the runtime's errors. */
TROUPE_MUST_USE troupe_status_t fmnist_mlp_eval_run(fmnist_mlp_eval_t *e, troupe_routine_t *routine,
                                                    const uint8_t *labels, double *out);

#ifdef __cplusplus
}
#endif
#endif
