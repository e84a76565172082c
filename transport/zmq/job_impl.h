/* troupe — where a job's control plane lives on disk (docs/architecture.md §8): the job
 * directory, the job file listing every rank's status endpoint, and the job's CURVE key.
 * Internal: not installed.
 *
 * Layout. The base directory is $XDG_RUNTIME_DIR/troupe when XDG_RUNTIME_DIR is an absolute
 * path, else /tmp/troupe-<uid>; each job has <base>/<job>/ (mode 0700; an existing directory is
 * used only when it is this user's and nobody else may enter it). In it:
 *   <rank>      rank r's ipc:// endpoint (a socket file), in the default ipc mode;
 *   job         the job file, written by each node's first rank once every rank's endpoint is
 *               known (mode 0600, replaced atomically);
 *   curve.key   the job's CURVE key pair, in tcp mode only (mode 0600).
 *
 * Job file (text, one record per line, fields separated by one space):
 *   troupe-status-job 1
 *   job <id>
 *   size <n>
 *   curve yes|no
 *   rank <r> pid <pid> host <hostname> endpoint <endpoint>     (one per rank, 0..n-1; the
 *                                   endpoint is "none" when that rank's control plane is off)
 * Key file: "public <z85>" and "secret <z85>" lines (40 characters each).
 *
 * Thread safety: functions work on the caller's data. Ownership: troupe__status_job_t owns its
 * rank array (troupe__status_job_clear).
 */
#ifndef TROUPE_TRANSPORT_ZMQ_JOB_IMPL_H
#define TROUPE_TRANSPORT_ZMQ_JOB_IMPL_H

#include "base/status.h"
#include "transport/zmq/wire_impl.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE__STATUS_PATH_MAX 512
#define TROUPE__STATUS_ENDPOINT_MAX 255
#define TROUPE__STATUS_KEY_LEN 40 /* a Z85-encoded CURVE key */
#define TROUPE__STATUS_MAX_RANKS (1 << 20)

typedef struct troupe__status_rank_info {
    int pid;
    char host[TROUPE__STATUS_HOST_MAX + 1];
    char endpoint[TROUPE__STATUS_ENDPOINT_MAX + 1];
} troupe__status_rank_info_t;

typedef struct troupe__status_job {
    char id[TROUPE__STATUS_JOB_MAX + 1];
    char dir[TROUPE__STATUS_PATH_MAX]; /* the job directory ("" when not known) */
    int size;
    bool curve;
    char curve_public[TROUPE__STATUS_KEY_LEN + 1]; /* curve: the job's key pair */
    char curve_secret[TROUPE__STATUS_KEY_LEN + 1];
    troupe__status_rank_info_t *ranks; /* [size], owned */
} troupe__status_job_t;

/* The base directory (see the header) into out; with `create`, makes it (mode 0700) when
 * missing. Errors: FAILED_PRECONDITION when it exists but is not a directory of this user's
 * that only this user may enter (the message names the path and the fix), INVALID_ARGUMENT
 * (path too long), UNAVAILABLE (mkdir failed; errno named). */
TROUPE_MUST_USE troupe_status_t troupe__status_base_dir(char *out, size_t cap, bool create);

/* "<base>/<job>" into out, made (mode 0700) with `create`; same errors. `job` must be a
 * sanitized id (troupe__status_sanitize_id). */
TROUPE_MUST_USE troupe_status_t troupe__status_job_dir(const char *job, char *out, size_t cap,
                                                       bool create);

/* Copies `raw` into out (cap bytes) keeping [A-Za-z0-9._-] and replacing anything else with
 * '_'; an empty result becomes "job". */
void troupe__status_sanitize_id(const char *raw, char *out, size_t cap);

/* Parses a job file's text (len bytes, need not be NUL-terminated) into *out (zeroed first;
 * dir left empty). Errors: INVALID_ARGUMENT naming the line and what is wrong (unknown record,
 * bad number, a rank missing, repeated or out of range, a field too long),
 * RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__status_job_parse(const char *text, size_t len,
                                                         troupe__status_job_t *out);

/* Reads <dir>/job (and <dir>/curve.key for a curve job) into *out. Errors: NOT_FOUND (no job
 * file: the job ended or never started its control plane), the parser's, FAILED_PRECONDITION
 * (a key file readable by others). */
TROUPE_MUST_USE troupe_status_t troupe__status_job_load(const char *dir, troupe__status_job_t *out);

/* Writes job->dir/job (and, for a curve job, job->dir/curve.key) with mode 0600, each through
 * a temporary file renamed into place. Errors: UNAVAILABLE naming the file and errno. */
TROUPE_MUST_USE troupe_status_t troupe__status_job_write(const troupe__status_job_t *job);

/* Removes the job file and key from dir and the directory itself when it is then empty. */
void troupe__status_job_remove(const char *dir);

/* True when a process of `job` may still run: one on another host (this one cannot tell), or
 * a live process of this host. */
bool troupe__status_job_alive(const troupe__status_job_t *job);

/* Removes stale job directories from the base directory, except `keep`'s: those whose job file
 * lists only ended processes of this host, or without a job file for a minute, and only when
 * no socket in them has a listener. Looks at 64 entries at most; errors are ignored. */
void troupe__status_prune(const char *keep);

void troupe__status_job_clear(troupe__status_job_t *job);

#ifdef __cplusplus
}
#endif
#endif
