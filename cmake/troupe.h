/* troupe — everything a program needs in one include: #include <troupe/troupe.h>, with only
 * <prefix>/include on the include path (docs/install.md). It brings the runtime API
 * (actors/troupe.h: backends, devices, streams, contexts, compile/link/run, transfers, merge
 * buffers, events, and the IR to write routines), models from their forward pass (nn/:
 * layers, differentiation), data-parallel training (parallel/dp.h) and the cluster
 * (transport/mpi/cluster.h: ranks; no MPI header). Each piece can also be included alone, e.g.
 * <troupe/parallel/dp.h>. No CZMQ, MPI or CUDA header is included.
 *
 * Thread safety and ownership: see each header.
 */
#ifndef TROUPE_TROUPE_H
#define TROUPE_TROUPE_H

#include "troupe/actors/troupe.h"
#include "troupe/nn/grad.h"
#include "troupe/nn/layers.h"
#include "troupe/nn/activation.h"
#include "troupe/nn/attention.h"
#include "troupe/nn/conv.h"
#include "troupe/nn/dropout.h"
#include "troupe/nn/init.h"
#include "troupe/nn/norm.h"
#include "troupe/nn/pool.h"
#include "troupe/parallel/dp.h"
#include "troupe/transport/mpi/cluster.h"
#include "troupe/troupe_config.h"

#endif
