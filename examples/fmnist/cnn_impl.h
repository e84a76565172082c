/* fmnist — the convnet's layers and initialisation (cnn.c), for mlp.c, which builds either
 * model around them (see mlp.h). Not installed.
 *
 * Thread safety: as mlp.h. Ownership: nodes are borrowed from the model or the nn.
 */
#ifndef FMNIST_CNN_IMPL_H
#define FMNIST_CNN_IMPL_H

#include "mlp.h"
#include "nn/nn.h"

/* The dims of the CNN's parameter i (0..FMNIST_CNN_NPARAMS-1) into dims (4 entries); returns
 * its number of axes. An image side too small for the layers still gives positive dims: the
 * layer that does not fit refuses when the forward pass is built. */
int fmnist__cnn_param_dims(const fmnist_mlp_config_t *c, int i, int64_t *dims);
const char *fmnist__cnn_param_name(int i);

/* The convnet over x (rows, 1, side, side); *logits gets (rows, out). INVALID_ARGUMENT naming
 * the layer and the shapes when a conv or pool does not fit; the nn's errors. */
troupe_status_t fmnist__cnn_forward(troupe_nn_t *nn, const fmnist_mlp_t *m, troupe_tnode_t *x,
                                    troupe_tnode_t **logits);

/* Kaiming-normal weights and zero biases from seed (mlp.h). */
troupe_status_t fmnist__cnn_init_params(fmnist_mlp_t *m, uint64_t seed);

#endif
