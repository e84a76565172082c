/* troupe — shareable host memory: regions other processes of this node can map.
 *
 * A region is an anonymous memory file (Linux memfd_create) mapped MAP_SHARED in the process
 * that made it, its owner. Its descriptor stays open while the region lives, so a process of
 * the same user on the same node maps the same pages by opening /proc/<owner pid>/fd/<fd>
 * (the kernel's ptrace-read access check, which Yama's ptrace_scope does not restrict,
 * unlike the attach check of Open MPI's CMA single copy) and checking the inode number it was
 * told. The intra-node shared-memory allreduce
 * (transport/mpi/shm_allreduce.c; collective.h, Algorithms) reduces gradients in place this way, in
 * the manner of NCCL's SHM transport and Open MPI's vader segments, without a copy through the
 * kernel.
 *
 * Which memory is shareable: the host pools of devices/cpu and devices/sync of at least
 * TROUPE__SHM_MIN_BYTES, once troupe__shm_set_pools(true) (the transport turns it on when
 * several ranks share this node and can map each other's memory); troupe__shm_alloc on
 * request. Regions are zero-filled, page-aligned, and count at most TROUPE__SHM_MAX_REGIONS at
 * once, and at most a quarter of the descriptor limit (RLIMIT_NOFILE: each region holds a
 * descriptor); beyond that, or off Linux, allocation returns NULL and callers use ordinary
 * memory. A freed region's pages go back to the system at once, even while peers still map
 * it (they then read zeros), unless freed with troupe__shm_free_keep. Regions are MAP_SHARED:
 * a child made by fork() shares them with its parent instead of getting a copy.
 *
 * Thread safety: every function is thread-safe (one mutex over the region table).
 * Ownership: a region belongs to the caller of troupe__shm_alloc until troupe__shm_free; a
 * peer mapping (troupe__shm_map) until troupe__shm_unmap. A peer's mapping keeps the pages
 * alive after their owner frees the region.
 */
#ifndef TROUPE_BASE_SHARED_MEMORY_IMPL_H
#define TROUPE_BASE_SHARED_MEMORY_IMPL_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Smallest host pool made shareable when pools are (bytes). */
#define TROUPE__SHM_MIN_BYTES ((size_t)64 * 1024)
/* Most regions alive at once in one process. */
#define TROUPE__SHM_MAX_REGIONS 1024

/* Where an address lies in a region, as a peer needs it to map the region (all int64 so it
 * travels in fingerprint digests without padding). */
typedef struct troupe__shm_ref {
    uint64_t id;  /* the region's id: unique in its process, never reused; 0: not shareable */
    uint64_t ino; /* the memory file's inode number (checked by the mapping peer) */
    int64_t pid;  /* the owner process */
    int64_t fd;   /* the region's descriptor in its owner */
    int64_t len;  /* the region's mapped bytes */
    int64_t off;  /* the looked-up address: its offset in the region */
} troupe__shm_ref_t;

/* Makes host pools of at least TROUPE__SHM_MIN_BYTES shareable (on) or ordinary (off) from now
 * on; pools allocated before keep their kind. */
void troupe__shm_set_pools(bool on);
bool troupe__shm_pools(void);

/* A new zero-filled region of at least `size_bytes` (rounded up to pages), or NULL when it
 * cannot be made (not Linux, too many regions, no memory or descriptors: no error recorded; the
 * caller falls back to ordinary memory). */
void *troupe__shm_alloc(size_t size_bytes);

/* Frees the region at `base` and returns true, or returns false when `base` is not the start
 * of a region (then it is ordinary memory, untouched). NULL-safe (false). */
bool troupe__shm_free(void *base);

/* As troupe__shm_free, except that the pages keep their contents for the peers that still map
 * the region (freed when the last of them unmaps it): for words peers poll after this process
 * let go of them (the shared-memory allreduce's control page, transport/mpi/shm_allreduce.c). */
bool troupe__shm_free_keep(void *base);

/* True when [p, p + size_bytes) lies inside one region; then fills *ref. */
bool troupe__shm_find(const void *p, size_t size_bytes, troupe__shm_ref_t *ref);

/* Maps another process's region (ref from its owner; ref->off is ignored) into this process:
 * *base_out then addresses its ref->len bytes. Errors: UNAVAILABLE naming the owner's pid and
 * descriptor when the region cannot be opened (gone, permission: ptrace restrictions, not
 * Linux) or is not the one described (inode or size differ); RESOURCE_EXHAUSTED when mapping
 * fails. */
TROUPE_MUST_USE troupe_status_t troupe__shm_map(const troupe__shm_ref_t *ref, void **base_out);

/* Unmaps a peer mapping made by troupe__shm_map (len: its ref->len). NULL-safe. */
void troupe__shm_unmap(void *base, int64_t len);

/* Regions alive in this process (tests). */
size_t troupe__shm_count(void);

#ifdef __cplusplus
}
#endif
#endif
