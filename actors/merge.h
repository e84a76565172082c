/* troupe — merge buffers (docs/architecture.md §5; seed `merge_buffer_use`, era-B `merge_buffer_node`;
 * OCANNL_NOTES §2.3, §2.4, §3.4).
 *
 * A merge buffer is how one stream reads another stream's array of a node without the node
 * having an array of its own for it: gradients are merged by copying a replica's gradient into
 * the merging stream's merge buffer and running a routine that reads it through `.merge`
 * (ir/assign's troupe_asgn_merge, the low-level Get_merge_buffer). The rules:
 *
 *   one per stream  Every stream made by troupe_new_stream has one merge buffer: grow-only
 *                   (it never shrinks while the stream lives), in a device pool of its own,
 *                   counted by troupe_get_used_memory at the size scheduled so far, freed at
 *                   backend teardown. It is tagged with the node it was last scheduled to hold.
 *   filling it      troupe_device_to_device (actors/transfer.h) with TROUPE_MERGE_COPY copies
 *                   the source array into the destination stream's merge buffer (grown first
 *                   if needed); with TROUPE_MERGE_STREAMING (one device only) the merge buffer
 *                   points at the source array itself while the given consumer routine runs.
 *                   A receive from another rank with COPY fills it the same way
 *                   (actors/lend.h). TROUPE_MERGE_NO copies into the destination's own array
 *                   and leaves the merge buffer alone.
 *   one merge node  A routine reads at most one node through its merge buffer.
 *   static check    A context made by a COPY or STREAMING device_to_device is tagged with its
 *                   node, and contexts derived from it (links, children) inherit the tag. Code
 *                   that reads m through `.merge` linked against a context tagged with n != m
 *                   fails at link time (FAILED_PRECONDITION naming both: era B's check).
 *   run-time check  When such a routine is run, its stream's merge buffer must have been
 *                   scheduled to hold m (the last COPY/STREAMING on that stream was of m):
 *                   FAILED_PRECONDITION naming both, or "nothing", otherwise. A STREAMING
 *                   consumer must read the streamed node (FAILED_PRECONDITION) and run on the
 *                   destination stream (INVALID_ARGUMENT).
 *   resolution      The routine's merge-buffer argument is resolved when it launches, in its
 *                   stream's FIFO order: to the buffer the last COPY before it filled, or to the
 *                   source array of the last STREAMING.
 *   handoff         The copy (or the STREAMING consumer) first waits for the source stream's
 *                   pending write of the node (RAW); the source array then counts as read by
 *                   the destination stream until the copy's (the consumer's) event completes,
 *                   so a later write of it on any other stream waits for that (WAR, which
 *                   OCANNL left unguarded). A routine's own merge-buffer read needs no event:
 *                   it follows the copy in its stream's FIFO.
 *
 * Thread safety and ownership: see actors/transfer.h.
 */
#ifndef TROUPE_ACTORS_MERGE_H
#define TROUPE_ACTORS_MERGE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seed `merge_buffer_use`. */
typedef enum troupe_merge_use {
    TROUPE_MERGE_NO = 0,    /* copy src's array of n into dst's array of n */
    TROUPE_MERGE_COPY,      /* copy src's array of n into dst's stream's merge buffer */
    TROUPE_MERGE_STREAMING, /* dst's merge buffer points at src's array while `consumer` runs */
} troupe_merge_use_t;

#ifdef __cplusplus
}
#endif
#endif
