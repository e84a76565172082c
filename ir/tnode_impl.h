/* troupe — the allocator of tensor nodes' host arrays (ir/tnode.h), for drivers that copy faster
 * from memory of their own kind: the cuda driver page-aligns host arrays of 64 KiB or more and
 * registers them (cudaHostRegister, whole pages), so its copies read and write them directly and
 * asynchronously (devices/cuda/cuda_impl.h).
 * Internal: not installed.
 *
 * Thread safety: thread-safe. Ownership: a node allocated through `alloc` remembers `free_fn` and
 * frees its array with it, whatever is installed later.
 */
#ifndef TROUPE_IR_TNODE_IMPL_H
#define TROUPE_IR_TNODE_IMPL_H

#include <stdbool.h>
#include <stddef.h>

/* Host arrays of min_bytes or more allocated from now on come from alloc (zero-filled by the
 * caller; a NULL result falls back to troupe_calloc) and are freed with free_fn; alloc NULL
 * restores troupe_calloc for all. Arrays already allocated keep their allocator. */
void troupe__tnode_set_host_allocator(void *(*alloc)(size_t size_bytes), void (*free_fn)(void *p),
                                      size_t min_bytes);
/* Whether an allocator other than troupe_calloc is installed (tests). */
bool troupe__tnode_host_allocator_installed(void);

#endif
