/* troupe — how much host memory a new pool of the host drivers may take (TROUPE_HOST_MEMORY=auto,
 * base/config.h; devices/host/host.c checks each pool against it).
 *
 * The figure is the smallest of:
 *   - MemAvailable + SwapFree of /proc/meminfo (the kernel's estimate of what can be allocated
 *     without swapping out, page cache it can drop included, plus free swap);
 *   - for each memory cgroup with a limit from the process's own up to the root of the mount
 *     (cgroup v2: memory.max; a limit is also set on a parent, e.g. a Slurm job's on its step's
 *     and task's cgroups), the limit minus what it holds that cannot be dropped: memory.current
 *     less the file pages of memory.stat ("file");
 *   - cgroup v1: the "memory" controller's hierarchical_memory_limit of memory.stat (the
 *     smallest limit on the path) minus memory.usage_in_bytes less total_cache.
 * Page cache is counted as free on purpose: a container that has read more files than its limit
 * holds its usage near the limit, yet can allocate by dropping cache. The figure errs towards
 * allowing: what it refuses cannot fit.
 *
 * Thread safety: reads files only. Ownership: none kept.
 */
#ifndef TROUPE_DEVICES_HOST_HOST_MEMORY_IMPL_H
#define TROUPE_DEVICES_HOST_HOST_MEMORY_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* The bytes free for a new allocation, or -1 when none of the files can be read. `meminfo`,
 * `self_cgroup` and `cgroup_root` are /proc/meminfo, /proc/self/cgroup and /sys/fs/cgroup
 * (tests give files of their own); `how` (cap bytes) says where the figure comes from, e.g.
 * "cgroup /sys/fs/cgroup/job_7: memory.max 4294967296 - (memory.current 2147483648 - file
 * 1073741824)". */
int64_t troupe__host_memory_free(const char *meminfo, const char *self_cgroup,
                                 const char *cgroup_root, char *how, size_t cap);

#endif /* TROUPE_DEVICES_HOST_HOST_MEMORY_IMPL_H */
