/* troupe — logging.
 *
 * TROUPE_LOG(level, subsystem, fmt, ...) checks the level and the subsystem mask before
 * formatting anything. Lines go to stderr, or to the file named by TROUPE_LOG_FILE, never to
 * stdout. Each line carries the time since start, the level, the subsystem, the process's
 * rank (once transport/ sets it) and the calling thread's tag (an actor sets it to its
 * stream or device name, e.g. "cpu:0:1"):
 *
 *     troupe 0.012345 WARN  ir     r0 cpu:0:1 | message
 *
 * Configuration: environment variable TROUPE_LOG = LEVEL[:SUBSYSTEM,SUBSYSTEM...], e.g.
 * "info" or "debug:ir,actors"; levels error|warn|info|debug|trace (default warn);
 * subsystems base|ir|devices|actors|transport|parallel|tools|all (default all).
 * API equivalents: troupe_log_set_level, troupe_log_set_mask, troupe_log_set_file.
 *
 * Thread safety: thread-safe; each line is written with one call under a lock.
 * Ownership: troupe_log_set_thread_tag copies its argument.
 */
#ifndef TROUPE_BASE_LOG_H
#define TROUPE_BASE_LOG_H

#include "troupe/base/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum troupe_log_level {
    TROUPE_LOG_ERROR = 0,
    TROUPE_LOG_WARN = 1,
    TROUPE_LOG_INFO = 2,
    TROUPE_LOG_DEBUG = 3,
    TROUPE_LOG_TRACE = 4,
} troupe_log_level_t;

typedef enum troupe_log_subsystem {
    TROUPE_SUB_BASE = 1u << 0,
    TROUPE_SUB_IR = 1u << 1,
    TROUPE_SUB_DEVICES = 1u << 2,
    TROUPE_SUB_ACTORS = 1u << 3,
    TROUPE_SUB_TRANSPORT = 1u << 4,
    TROUPE_SUB_PARALLEL = 1u << 5,
    TROUPE_SUB_TOOLS = 1u << 6,
    TROUPE_SUB_ALL = 0x7fu,
} troupe_log_subsystem_t;

/* True when a message at `level` for `subsystem` would be written. Cheap (two atomic loads). */
bool troupe_log_enabled(troupe_log_level_t level, unsigned subsystem);

/* Writes one line whatever the level and mask say (the TROUPE_LOG macro checks them first and
 * is what callers use). */
void troupe_log_write(troupe_log_level_t level, unsigned subsystem, const char *fmt, ...)
    TROUPE_PRINTF(3, 4);

#define TROUPE_LOG(level, subsystem, ...)                                                         \
    do {                                                                                          \
        if (troupe_log_enabled((level), (subsystem)))                                             \
            troupe_log_write((level), (subsystem), __VA_ARGS__);                                       \
    } while (0)

void troupe_log_set_level(troupe_log_level_t level);
troupe_log_level_t troupe_log_get_level(void);
void troupe_log_set_mask(unsigned subsystem_mask);
unsigned troupe_log_get_mask(void); /* the enabled subsystems (TROUPE_SUB_* bits) */

/* Redirects log lines to `path` (appending); NULL returns to stderr.
 * Returns TROUPE_NOT_FOUND (with the OS error) when the file cannot be opened. */
TROUPE_MUST_USE troupe_status_t troupe_log_set_file(const char *path);

/* Parses a TROUPE_LOG specification ("debug:ir,actors") and applies it.
 * Returns TROUPE_INVALID_ARGUMENT naming the bad level or subsystem (nothing changes). */
TROUPE_MUST_USE troupe_status_t troupe_log_configure(const char *spec);

/* Per-thread tag printed on each line (NULL clears). Truncated to 47 bytes. */
void troupe_log_set_thread_tag(const char *tag);

/* Process rank printed on each line (-1, the default, prints nothing). */
void troupe_log_set_rank(int rank);

#ifdef __cplusplus
}
#endif
#endif
