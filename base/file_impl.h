/* troupe — opening a file that must be a regular file, and checking that a file can be
 * written (internal; not installed).
 *
 * Readers of files a user names (job files, datasets, traces, checkpoints) refuse a path that
 * is a device, a FIFO, a socket or a directory by its kind, without waiting on a FIFO, and
 * refuse a file larger than the reader's bound before reading it. Programs that write a file
 * at the end of long work (a checkpoint, a picture) check its place first.
 *
 * Thread safety: thread-safe (no shared state).
 * Ownership: the descriptor returned is the caller's (close it).
 */
#ifndef TROUPE_BASE_FILE_IMPL_H
#define TROUPE_BASE_FILE_IMPL_H

#include "base/status.h"

#include <stdint.h>
#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "a directory", "a character device", "a block device", "a FIFO", "a socket" or "not a
 * regular file", for messages. */
const char *troupe__file_kind(unsigned mode);

/* Opens `path` read-only (O_CLOEXEC, and `flags`, e.g. O_NOFOLLOW) if it is a regular file of
 * at most max_bytes (0: no bound): *out_fd (blocking) and *out_st. `what` names what the caller
 * expected ("a job file"). Errors, each starting with the path: NOT_FOUND (no such file),
 * FAILED_PRECONDITION (cannot open: permissions...), INVALID_ARGUMENT ("'<path>' is a FIFO, not a
 * regular file: expected <what>"; "... is N bytes, more than the M bytes <what> may have"). */
TROUPE_MUST_USE troupe_status_t troupe__file_open_regular(const char *path, const char *what,
                                                          uint64_t max_bytes, int flags,
                                                          int *out_fd, struct stat *out_st);

/* Whether a file can be written at `path` the way troupe's writers do (a temporary beside it,
 * renamed over it), checked before long work that ends by writing it: `path` is not a
 * directory, and a new file can be created beside it (one is created and removed). Errors:
 * INVALID_ARGUMENT "'<path>' is a directory"; FAILED_PRECONDITION "cannot write '<path>':
 * <the OS's reason>" (a missing directory, no permission, a read-only file system). */
TROUPE_MUST_USE troupe_status_t troupe__file_check_writable(const char *path);

#ifdef __cplusplus
}
#endif
#endif
