/* troupe — a model under construction: the forward pass as layers of assignments, its
 * parameters and their gradients, then the backward pass derived by nn/grad.h.
 *
 * A troupe_nn_t appends assignments to a comp (ir/assign.h) in order, grouped into layers
 * (`troupe_nn_begin` / `troupe_nn_end`: one block comment each, which the derived backward
 * mirrors as "backward: <layer>"). Layers (nn/linear.h, nn/activation.h, nn/loss.h, ...) are
 * functions of the form troupe_nn_<layer>(nn, inputs..., &out) that create their result
 * nodes here and emit forward assignments only. `troupe_nn_finish` sets the comp's root and
 * derives the gradient of the loss with respect to every parameter.
 *
 * Errors are sticky: after a failure every call returns the first error and does nothing, so
 * a model reads as a list of layers with one check at the end (troupe_nn_finish returns it).
 *
 * Thread safety: none; one thread builds a model.
 * Ownership: troupe_nn_new borrows the comp (it must outlive the nn). Nodes created through
 * the nn (troupe_nn_node, troupe_nn_param, every layer's outputs) are owned by the nn until
 * troupe_nn_destroy; the comp holds its own references to the nodes its assignments mention,
 * so the comp may outlive the nn. Returned node pointers are borrowed.
 */
#ifndef TROUPE_NN_NN_H
#define TROUPE_NN_NN_H

#include "troupe/base/status.h"
#include "troupe/ir/assign.h"
#include "troupe/ir/tnode.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_nn troupe_nn_t;

/* A new model building into `comp` (borrowed) with nodes of precision `prec` (single or
 * double). INVALID_ARGUMENT, RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_nn_new(troupe_asgn_comp_t *comp, troupe_prec_t prec,
                                              troupe_nn_t **out);
/* Releases the nn's nodes. Accepts NULL; sets *nn_p NULL. */
void troupe_nn_destroy(troupe_nn_t **nn_p);

/* The first error so far (TROUPE_OK when none). */
troupe_status_t troupe_nn_status(const troupe_nn_t *nn);
troupe_asgn_comp_t *troupe_nn_comp(const troupe_nn_t *nn);
troupe_prec_t troupe_nn_prec(const troupe_nn_t *nn);

/* Mixed precision (autocast): the precision the layers' matrix products read their factors in
 * (linear, linear_oi, attention). Default the model's own; BFLOAT16 or HALF (fp16) in a
 * single-precision model makes each product read copies of its operands rounded to it
 * (troupe_nn_compute_copy, round to nearest even) and accumulate into single. fp16's narrow
 * range wants loss scaling (troupe_nn_loss_scale; parallel/dp.h, loss_scaling). Parameters,
 * gradients, every other layer and the loss stay in the model's precision. Set it before the
 * layers it should apply to. INVALID_ARGUMENT for another combination. */
TROUPE_MUST_USE troupe_status_t troupe_nn_set_compute_prec(troupe_nn_t *nn, troupe_prec_t prec);
troupe_prec_t troupe_nn_compute_prec(const troupe_nn_t *nn);

/* Loss scaling (fp16): a hosted non-constant scalar node of the model's precision, value 1,
 * that troupe_nn_finish's backward pass starts from instead of 1 (nn/grad.h, loss_scale); the
 * data-parallel driver keeps it at the current scale (parallel/dp.h, troupe_dp_model_t.
 * loss_scale). Created on the first call; call before troupe_nn_finish. *out is borrowed. */
TROUPE_MUST_USE troupe_status_t troupe_nn_loss_scale(troupe_nn_t *nn, troupe_tnode_t **out);

/* x itself when it already has the compute precision (or is not a float), else a new node of
 * the compute precision holding x rounded to it (a cast: out = identity x, round to nearest
 * even; its gradient, like every other, is derived: nn/grad.h). *out is borrowed. */
troupe_status_t troupe_nn_compute_copy(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t **out);

/* Opens a layer named `name` (copied; shown in the generated code and traces), closing the
 * open one: layers do not nest. troupe_nn_end closes it. */
troupe_status_t troupe_nn_begin(troupe_nn_t *nn, const char *name);
troupe_status_t troupe_nn_end(troupe_nn_t *nn);

/* A new node of the nn's precision labelled `label`: an activation (troupe_nn_node) or a
 * parameter with its gradient node (troupe_nn_param; gradients are labelled (label, "grad")).
 * *out is borrowed from the nn. */
troupe_status_t troupe_nn_node(troupe_nn_t *nn, const char *label, int ndims,
                               const int64_t *dims, troupe_tnode_t **out);
troupe_status_t troupe_nn_param(troupe_nn_t *nn, const char *label, int ndims,
                                const int64_t *dims, troupe_tnode_t **out);
/* Registers caller-made nodes as a parameter and its gradient (same dims; both retained by the
 * nn), e.g. nodes whose memory modes and labels a trainer chose. */
troupe_status_t troupe_nn_param_use(troupe_nn_t *nn, troupe_tnode_t *param, troupe_tnode_t *grad);
/* Like troupe_nn_node with another precision (integer targets, token ids). */
troupe_status_t troupe_nn_node_prec(troupe_nn_t *nn, const char *label, troupe_prec_t prec,
                                    int ndims, const int64_t *dims, troupe_tnode_t **out);

/* Appends `lhs =accum op(operands) over spec` to the current layer (ir/assign.h builders). */
troupe_status_t troupe_nn_un(troupe_nn_t *nn, bool init, troupe_binop_t accum, troupe_tnode_t *lhs,
                             troupe_unop_t op, troupe_tnode_t *a, const char *spec);
troupe_status_t troupe_nn_bin(troupe_nn_t *nn, bool init, troupe_binop_t accum,
                              troupe_tnode_t *lhs, troupe_binop_t op, troupe_tnode_t *a,
                              troupe_tnode_t *b, const char *spec);
troupe_status_t troupe_nn_ter(troupe_nn_t *nn, bool init, troupe_binop_t accum,
                              troupe_tnode_t *lhs, troupe_ternop_t op, troupe_tnode_t *a,
                              troupe_tnode_t *b, troupe_tnode_t *c, const char *spec);
/* Appends an assignment built in the nn's comp by the caller. */
troupe_status_t troupe_nn_add(troupe_nn_t *nn, troupe_status_t built, troupe_asgn_t *const *t);
/* A scalar constant node holding c (fetched where it is first asked for), one node per distinct
 * value: at most 32 distinct values per nn, past which RESOURCE_EXHAUSTED ("too many
 * constants"; the Winograd lowerings of nn/conv.h take up to 9). */
troupe_status_t troupe_nn_const(troupe_nn_t *nn, double c, troupe_tnode_t **out);

/* Marks tn (borrowed) Materialized (ir/memory_mode.h, `provenance` the caller's code for the
 * choice): an array the optimizer keeps, e.g. a factor the GEMM matcher must see as one
 * (compiler/gemm.h: inlined into a product, it would make it a nest of loops again) or a copy a
 * later layer reads in another layout. Returns OK; the nn's first error when it already has one
 * (tn is then not looked at); FAILED_PRECONDITION for a mode that conflicts with one set before
 * (troupe_tnode_update_memory_mode's message, naming the node and both modes) or
 * INVALID_ARGUMENT for a NULL tn, each recorded as the nn's first error as every builder's is;
 * INVALID_ARGUMENT for a NULL nn. */
troupe_status_t troupe_nn_materialize(troupe_nn_t *nn, troupe_tnode_t *tn, int32_t provenance);

/* No gradient flows through tn (a stop-gradient, e.g. a softmax's max shift). */
troupe_status_t troupe_nn_stop_gradient(troupe_nn_t *nn, troupe_tnode_t *tn);

/* Closes any open layer, sets the comp's root to the forward pass, then derives the gradient
 * of the scalar `loss` with respect to every parameter (troupe_nn_grad, nn/grad.h): the
 * root becomes forward then backward. Returns the first error of the whole build. */
TROUPE_MUST_USE troupe_status_t troupe_nn_finish(troupe_nn_t *nn, troupe_tnode_t *loss);

/* Closes any open layer and sets the comp's root to the forward pass, without a backward
 * (an evaluation). Returns the first error of the whole build. */
TROUPE_MUST_USE troupe_status_t troupe_nn_forward_root(troupe_nn_t *nn);

/* The parameters and their gradients in creation order (borrowed arrays of n nodes). */
size_t troupe_nn_params(const troupe_nn_t *nn, troupe_tnode_t *const **params,
                        troupe_tnode_t *const **grads);

#ifdef __cplusplus
}
#endif
#endif
