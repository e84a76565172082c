/* troupe — the C compile cache shared by the host drivers (cpu, sync): generated C source in,
 * a loaded shared object and its entry symbol out (docs/architecture.md §1 (devices), OCANNL_NOTES §6.5).
 *
 * The object is cached in the configured cache directory (troupe_config_cache_dir(), created
 * with mode 0700) as `<name>-<hash>.so`, where the 64-bit FNV-1a hash covers the troupe
 * version, the compiler command, its flags and the source (and, when the command or flags say
 * `native`, the host CPU's identity from /proc/cpuinfo, so a cache directory shared between
 * different machines never serves an object built for another CPU). On a miss the source is written
 * to a unique temporary file there and renamed to `<name>-<hash>.c` (kept for inspection;
 * compiler messages name it), compiled with `$CC <flags> -o <tmp>.so <name>-<hash>.c -lm`
 * (argv built by splitting CC and the flags on whitespace; no shell; stdout and stderr
 * captured), and the object is renamed into place, so processes and threads compiling the
 * same code at once never see a partial object. A source longer than TROUPE_CC_SPLIT_BYTES
 * that the caller can split is compiled as units instead (`<name>-<hash>.u<k>.c`, removed
 * once built), each `$CC <flags> -c`, TROUPE_CC_JOBS at once, then linked with
 * `$CC <flags> -o <tmp>.so <objects> -lm`; the key stays the whole source's.
 * Each compiler run has a watcher process of its own (forked, leading the run's process
 * group) that kills the group when the calling process ends, even by SIGKILL: no compiler
 * outlives it.
 *
 * Thread safety: thread-safe (the configuration strings are copied on entry).
 * Ownership: the caller owns the returned library handle and closes it with
 * troupe__cc_unload().
 */
#ifndef TROUPE_DEVICES_HOST_CC_CACHE_IMPL_H
#define TROUPE_DEVICES_HOST_CC_CACHE_IMPL_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

/* Splits a source into units (compiler/cgen.h troupe_cgen_c_split's contract: `unit_bytes`
 * a unit, 0 units for "keep it whole"; the array and strings from troupe_malloc). */
typedef troupe_status_t (*troupe__cc_split_fn)(void *ctx, size_t unit_bytes, char ***out_units,
                                               size_t *out_count);

/* Compiles (or finds in the cache) `source` and loads it; returns the dlopen handle in
 * *out_lib and the address of `entry_symbol` in *out_entry.
 * `name` is a C identifier used in the file names. `split` (NULL: never) is called on a miss
 * when the source is longer than TROUPE_CC_SPLIT_BYTES.
 * Callers loading the same source at once (threads, or the ranks of a run sharing the cache
 * directory) compile it once: the first takes the key's file lock (`<name>-<hash>.lock`, flock)
 * and compiles; the others wait for it, logging that they wait, then load its object. A waiter
 * whose holder is still busy past the compile deadline plus 30 s compiles on its own (logged).
 * Errors: INVALID_ARGUMENT (NULL/empty name or source); DEVICE_ERROR when the cache
 * directory cannot be created or written, the compiler is missing (message names it) or fails
 * (message carries the first lines of its output) or does not finish within TROUPE_CC_TIMEOUT_S
 * seconds (default 600; its process group is killed, the message names the command and the
 * time; all units and the link share the deadline), or dlopen/dlsym fail; INVALID_ARGUMENT
 * for a malformed TROUPE_CC_TIMEOUT_S, TROUPE_CC_SPLIT_BYTES or TROUPE_CC_JOBS;
 * RESOURCE_EXHAUSTED; what `split` returns. */
troupe_status_t troupe__cc_load(const char *name, const char *source, const char *entry_symbol,
                                troupe__cc_split_fn split, void *split_ctx, void **out_lib,
                                void **out_entry);

/* Closes a handle from troupe__cc_load (NULL is ignored). */
void troupe__cc_unload(void *lib);

/* For the caches of compiled code (this one, devices/cuda's cubins): `mkdir -p dir` with mode
 * 0700 for what it creates (DEVICE_ERROR naming the path and errno when it cannot, or when dir
 * is no directory), and writing `len` bytes to a new file `path` (O_EXCL, mode 0600; removed
 * again on failure; DEVICE_ERROR naming it). */
troupe_status_t troupe__cache_mkdir_p(const char *dir);
troupe_status_t troupe__cache_write_new(const char *path, const void *data, size_t len);

/* 64-bit FNV-1a over `len` bytes, continuing from `h` (start with TROUPE__FNV64_INIT). */
#define TROUPE__FNV64_INIT UINT64_C(0xcbf29ce484222325)
uint64_t troupe__fnv1a64(uint64_t h, const void *data, size_t len);

#endif
