/* troupe — reverse-mode differentiation of an assignment comp (ir/assign.h): from a forward
 * pass that computes a scalar loss, the backward pass that writes each parameter's gradient.
 *
 * Each accumulating assignment `lhs =accum op(r1[, r2[, r3]]) over P` has one gradient rule,
 * keyed by its accumulator and op (nn/grad.c, one switch; OCANNL's forward + backprop pairs,
 * ggml's ggml_compute_backward). The rule's assignments use the forward's index maps with the
 * terms exchanged, never a materialised transpose: a matmul `z =+ x * w over "bi,ij=>bj"`
 * gives `gx =+ gz * w over "bj,ij=>bi"` and `gw =+ x * gz over "bi,bj=>ij"` (OCANNL's
 * `g1 =+ g * v2; g2 =+ v1 * g`). Projections of every kind carry over: broadcasts,
 * reductions, transposes, diagonals, fixed and static indices, affine (strided, dilated)
 * indices, and gathers (the gradient of a gather is the scatter-add over the same map).
 *
 * Accumulators: ADD and SUB (sums, contractions); ARG2 (plain assignment) over an injective
 * projection; MAX and MIN, whose gradient goes to the arg-max cells, split evenly between
 * ties (PyTorch's amax/amin rule). Other accumulators (MUL, DIV, ...) and ARG2 over a
 * non-injective projection are refused. Ops with a derivative: identity, relu, satur01, exp,
 * log, exp2, log2, sin, cos, sqrt, recip, recip_sqrt, neg, tanh_approx; arg1, arg2, add, sub,
 * mul, div, to_pow_of, relu_gate, satur01_gate (through their second argument), max, min
 * (ties split evenly, PyTorch's maximum/minimum rule); where, fma. Comparisons, mod, or, and,
 * not, Threefry and the uniform conversions are constants: no gradient flows through them.
 *
 * Node versions: a node on the path from a parameter to the loss is first written by an
 * initialising assignment (a fetch, initialize_neutral, or a surjective ARG2) and afterwards
 * only added to (ADD or SUB without initialize_neutral), e.g. a bias broadcast then
 * `=+ x * w`. Other write patterns on that path are refused, naming the assignment.
 *
 * Mixed precision: the gradient of a narrow float node (half, bfloat16, fp8) is kept in the
 * loss's precision, and a product of two factors of one narrow precision reads its gradient
 * rounded once to that precision (autocast: the backward products run in the forward's).
 *
 * Each gradient is zeroed once (its first contribution initialises it) and a node read
 * several times accumulates its gradient. The backward is emitted layer by layer in reverse,
 * each forward block comment `L` giving a backward block comment "backward: L". Temporaries
 * get no memory mode, so the optimizer may virtualise or fuse them.
 *
 * Thread safety: troupe_nn_grad builds into `comp`; nothing else may use it meanwhile.
 * Ownership: parameters, gradients and constants are borrowed; the comp retains every node it
 * mentions, temporaries included.
 */
#ifndef TROUPE_NN_GRAD_H
#define TROUPE_NN_GRAD_H

#include "troupe/base/status.h"
#include "troupe/ir/assign.h"
#include "troupe/ir/tnode.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_nn_grad_opts {
    /* Nodes treated as constants: no gradient flows through them (a stop-gradient, e.g. the
     * max that shifts a softmax). May be NULL with n_constants 0. */
    troupe_tnode_t *const *constants;
    size_t n_constants;
    /* Loss scaling (mixed precision, fp16): a scalar node whose value seeds the backward pass
     * instead of 1, so every gradient comes out multiplied by it (parallel/dp.h,
     * troupe_dp_model_t.loss_scale keeps it current). NULL: the seed is 1. */
    troupe_tnode_t *loss_scale;
} troupe_nn_grad_opts_t;

/* Appends to `comp` (whose root is the forward pass) the backward pass of the scalar `loss`
 * with respect to params[0..n_params-1], writing grads[i] (same dims as params[i], overwritten
 * each run: the convention of parallel/dp.h's troupe_dp_model_t). comp's root becomes
 * SEQ(forward, backward). opts may be NULL.
 * A parameter that does not reach the loss gets a zero gradient and a warning in the log.
 * Errors (comp unchanged): INVALID_ARGUMENT for a non-scalar loss, a loss the forward never
 * writes, a gradient node whose dims differ from its parameter's, a parameter the forward
 * writes, an assignment on the path with no derivative (its accumulator, or ARG2 over a
 * non-injective projection) or with a write pattern other than the one above — the message
 * quotes the assignment; RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_nn_grad(troupe_asgn_comp_t *comp, troupe_tnode_t *loss,
                                               size_t n_params, troupe_tnode_t *const *params,
                                               troupe_tnode_t *const *grads,
                                               const troupe_nn_grad_opts_t *opts);

/* A new node for params' gradient: same precision and dims, labels (label of p, "grad").
 * The caller owns it. RESOURCE_EXHAUSTED; INVALID_ARGUMENT for NULL. */
TROUPE_MUST_USE troupe_status_t troupe_nn_grad_node_new(const troupe_tnode_t *param,
                                                        troupe_tnode_t **out);

#ifdef __cplusplus
}
#endif
#endif
