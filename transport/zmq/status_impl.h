/* troupe — the control plane's status actor (docs/architecture.md §8): one per process started
 * by troupe_cluster_init and stopped by troupe_cluster_finalize/_leave. Internal: not
 * installed; transport/mpi/cluster.c drives it.
 *
 * The actor is a CZMQ zactor holding a ZeroMQ ROUTER, bound by default to
 * ipc://<job dir>/<rank> (transport/zmq/job_impl.h: a directory only this user may enter). With
 * TROUPE_STATUS=tcp:<interface> it binds tcp://<that interface's IPv4 address>:<a free port>
 * instead, and only with CURVE: every rank is a CURVE server with the job's key pair, and the
 * actor itself answers ZeroMQ's authentication requests (ZAP, RFC 27) on
 * inproc://zeromq.zap.01, admitting only clients that present the job's public key — a client
 * without the key file (mode 0600 in the job directory) is refused. It answers STATUS requests
 * (transport/zmq/wire_impl.h) from the status board (actors/board_impl.h); it never carries
 * training data.
 *
 * Wire-up: the first rank decides a plan (troupe__status_plan_make: job id, mode, key pair),
 * which MPI broadcasts; every rank starts its actor with it (troupe__status_start), MPI gathers
 * every rank's endpoint once, and troupe__status_publish keeps the list (to query the others)
 * and, on each node's first rank, writes the job file `troupe status` reads.
 *
 * The hang report (transport/zmq/report_impl.h: every rank's actors, what they wait on, the
 * verdict) is logged at warn level
 *   - once, when a deadline expires (a collective's, or a host wait's: the status board's
 *     deadline hook), by the thread that saw it, before the failure propagates;
 *   - on SIGUSR1: the handler only sets a flag and writes to an eventfd (async-signal-safe);
 *     the actor then queries the ranks without blocking its own answers, and logs the report.
 *     The handler is installed only when the program left SIGUSR1 at its default, and the
 *     previous disposition is restored at stop.
 *
 * A control plane that cannot start (an unusable directory, a path too long for a socket, no
 * CURVE for tcp) is logged at warn level and training goes on without it.
 *
 * Thread safety: start/publish/stop from the thread that runs troupe_cluster_init/finalize;
 * troupe__status_job_copy and the deadline hook from any thread.
 */
#ifndef TROUPE_TRANSPORT_ZMQ_STATUS_IMPL_H
#define TROUPE_TRANSPORT_ZMQ_STATUS_IMPL_H

#include "base/status.h"
#include "transport/zmq/job_impl.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum troupe__status_mode {
    TROUPE__STATUS_OFF = 0,
    TROUPE__STATUS_IPC = 1,
    TROUPE__STATUS_TCP = 2,
} troupe__status_mode_t;

/* What every rank of a job must agree on (plain bytes: MPI broadcasts it from the first rank). */
typedef struct troupe__status_plan {
    int32_t mode; /* troupe__status_mode_t */
    char job[TROUPE__STATUS_JOB_MAX + 1];
    char iface[16];                                /* tcp: the interface */
    char curve_public[TROUPE__STATUS_KEY_LEN + 1]; /* tcp: the job's key pair */
    char curve_secret[TROUPE__STATUS_KEY_LEN + 1];
} troupe__status_plan_t;

/* Decides the plan from the configuration (TROUPE_STATUS, TROUPE_JOB_ID) and the launcher's
 * environment (Open MPI's OMPI_MCA_orte_ess_jobid, PMIx's PMIX_NAMESPACE, Slurm's SLURM_JOB_ID
 * and SLURM_STEP_ID; else "pid<pid>"), with a fresh CURVE key pair in tcp mode. A tcp mode
 * without CURVE in libzmq becomes OFF (logged). Never fails. */
void troupe__status_plan_make(troupe__status_plan_t *plan);

/* Starts this process's status actor for rank `rank` of `size` with `plan` and fills *mine
 * (pid, host, endpoint; endpoint "" when the control plane is off or could not start, which
 * is logged at warn level). Returns OK in every case but a second start (INTERNAL). */
TROUPE_MUST_USE troupe_status_t troupe__status_start(const troupe__status_plan_t *plan, int rank,
                                                     int size, troupe__status_rank_info_t *mine);

/* Keeps every rank's endpoint (all[size], copied) for the hang report, and writes the job file
 * when `write_job_file` (each node's first rank). A write failure is logged, not returned. */
void troupe__status_publish(const troupe__status_rank_info_t *all, int size, bool write_job_file);

/* Stops the actor, removes this rank's job file (if it wrote it) and restores SIGUSR1.
 * Idempotent. */
void troupe__status_stop(void);

/* A copy of the job as published (troupe__status_job_clear). NOT_FOUND when no control plane
 * runs or nothing was published yet. */
TROUPE_MUST_USE troupe_status_t troupe__status_job_copy(troupe__status_job_t *out);

#ifdef __cplusplus
}
#endif
#endif
