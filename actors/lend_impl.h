/* troupe — lends inside the runtime (see lend.h). Internal: not installed.
 *
 * Thread safety: thread-safe (takes the local context's device lock). Ownership: as
 * troupe_device_to_device.
 */
#ifndef TROUPE_ACTORS_LEND_IMPL_H
#define TROUPE_ACTORS_LEND_IMPL_H

#include "actors/lend.h"
#include "actors/merge.h"

#ifdef __cplusplus
extern "C" {
#endif

/* troupe_device_to_device with one remote side (dst_ctx or src_ctx is remote; the caller
 * passes STREAMING when it was given a consumer: neither has a remote form): a send (dst remote)
 * reads the local array, a receive (src remote) writes the local array (NO) or the local stream's
 * merge buffer (COPY), through the registered remote transport. Errors as troupe_device_to_device
 * and troupe_context_new_remote. */
TROUPE_MUST_USE troupe_status_t troupe__lend_d2d_remote(troupe_tnode_t *n, troupe_merge_use_t use,
                                                        troupe_context_t *dst_ctx,
                                                        troupe_context_t *src_ctx,
                                                        troupe_context_t **out_ctx,
                                                        troupe_event_t **out_ev);

#ifdef __cplusplus
}
#endif
#endif
