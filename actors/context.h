/* troupe — contexts: {stream, parent, arrays: tnode -> device buffer} (docs/architecture.md §2; seed
 * `Backend_intf` context, make_context / make_child / finalize; OCANNL_NOTES §1.4).
 *
 * Contexts are immutable values forming a tree. A root context is empty; linking code
 * (troupe_link), init_from_host and device_to_device produce children holding the parent's
 * arrays plus the arrays they added. Related contexts using a node use the same array; sibling
 * contexts that both add a node get different arrays. A context produced by a merging
 * device_to_device (COPY/STREAMING) is tagged with its merge-buffer node (era B
 * `merge_buffer_node`): code linked against it must read that node through `.merge`, if it
 * reads any merge node (checked at link time).
 *
 * Thread safety: immutable, so thread-safe; finalize may be called once from any thread.
 * Ownership: refcounted (atomic); a child retains its parent, the backend and the stream.
 * Device memory of a context's added arrays is freed by troupe_context_finalize, or at backend
 * teardown when it never was.
 */
#ifndef TROUPE_ACTORS_CONTEXT_H
#define TROUPE_ACTORS_CONTEXT_H

#include "troupe/actors/event.h"
#include "troupe/actors/stream.h"
#include "troupe/base/status.h"
#include "troupe/devices/device.h"
#include "troupe/ir/tnode.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_context troupe_context_t;

/* A root context (no arrays) on `stream`, which must come from troupe_new_stream.
 * Errors: INVALID_ARGUMENT (NULL, or a stream not created by troupe_new_stream),
 * RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_context_new(troupe_stream_t *stream, troupe_context_t **out);

/* Seed `make_child`: same stream and arrays, parent = ctx. RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_context_child(troupe_context_t *ctx, troupe_context_t **out);

void troupe_context_retain(troupe_context_t *ctx);
void troupe_context_release(troupe_context_t **ctx_p);

/* Seed `finalize`: awaits the context's stream and every other stream still reading its
 * arrays (configured timeout), then frees the arrays the parent lacks (never shared arrays);
 * troupe_get_used_memory drops by their pool's size. Contexts derived from ctx must not be used
 * afterwards. A second call returns OK and does nothing.
 * Errors: the awaited stream's or reader's failure status, DEADLINE_EXCEEDED (nothing freed). */
TROUPE_MUST_USE troupe_status_t troupe_context_finalize(troupe_context_t *ctx);

troupe_stream_t *troupe_context_stream(const troupe_context_t *ctx);  /* borrowed */
troupe_context_t *troupe_context_parent(const troupe_context_t *ctx); /* borrowed, or NULL */
/* True when tn has an array in ctx (or an ancestor: arrays are inherited). */
bool troupe_context_has_node(const troupe_context_t *ctx, const troupe_tnode_t *tn);
/* The buffer of tn in ctx; NOT_FOUND naming the node. */
TROUPE_MUST_USE troupe_status_t troupe_context_buffer(const troupe_context_t *ctx,
                                                      const troupe_tnode_t *tn,
                                                      troupe_buffer_loc_t *out);
/* The merge-buffer node ctx is tagged with, or NULL (borrowed). */
troupe_tnode_t *troupe_context_merge_buffer_node(const troupe_context_t *ctx);

/* Seed `will_wait_for`: nothing scheduled on ctx's stream after this runs before ev completed;
 * if ev fails, the stream fails with its status. ev is borrowed.
 * Errors: the stream's failure, INVALID_ARGUMENT, RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_will_wait_for(troupe_context_t *ctx, troupe_event_t *ev);

#ifdef __cplusplus
}
#endif
#endif
