/* troupe — the cluster: ranks, the transport engine, and the cross-process data plane
 * (docs/architecture.md §6; ../shared/OCANNL_NOTES.md §7: OCANNL merges across streams only, multi-process
 * merging is where troupe goes beyond it).
 *
 * Process model. troupe_cluster_init detects a launcher from the environment (Open MPI's
 * OMPI_COMM_WORLD_*, PMIx's PMIX_RANK, Slurm's SLURM_PROCID with SLURM_NTASKS > 1). Under one,
 * it initialises MPI with MPI_THREAD_SERIALIZED (or better) and starts the transport engine, a
 * thread that alone calls MPI from then until troupe_cluster_finalize (except that a thread
 * waiting for a lazily started collective while the engine thread is idle runs the engine
 * itself, one owner at a time: the calls stay serialized). Without a launcher (or
 * in a build without MPI) the process is rank 0 of 1 and every collective is local and exact
 * (sum/max/min of one rank is the identity, mean divides by 1), so programs run unchanged
 * without mpirun.
 *
 * Deadlines. Every wait of the transport has one: troupe_config_timeout_s() (TROUPE_TIMEOUT_S,
 * default 120 s). A collective that has not completed by then fails its event with
 * DEADLINE_EXCEEDED and a message naming the ranks that did not answer a liveness probe (sent
 * 2 s before the verdict, when the fingerprint exchange that precedes every collective or its
 * data phase stalls): "allreduce #17: rank 1 did not answer within 120 s (dead or stuck)";
 * ranks that answer but never reached the collective are named apart. After
 * such a failure the cluster is failed (troupe_cluster_status): later collectives fail at once
 * with the same status and message. A program then reports, calls troupe_cluster_leave and
 * exits with a non-zero status; the launcher ends the other ranks (mpirun's default
 * orte_abort_on_non_zero_status, srun --kill-on-bad-exit), and any rank it does not end fails
 * its own next wait by its deadline: no rank hangs.
 *
 * Thread safety: init/finalize/leave from the main thread only; the rest is thread-safe.
 */
#ifndef TROUPE_TRANSPORT_MPI_CLUSTER_H
#define TROUPE_TRANSPORT_MPI_CLUSTER_H

#include "troupe/base/status.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Initialises the cluster (see the header comment) and registers troupe's remote transport
 * (actors/lend.h) so troupe_device_to_device accepts remote contexts. argc/argv may be NULL.
 * A second call returns OK and does nothing. Unless the user set it, Open MPI's non-blocking
 * allreduce algorithm is chosen as Rabenseifner's (coll_libnbc_iallreduce_algorithm=3, which
 * matches blocking MPI_Allreduce on large buffers; libnbc's default is up to 2x slower).
 * Errors: TRANSPORT_ERROR (MPI_Init_thread failed, or thread support below SERIALIZED),
 * RESOURCE_EXHAUSTED, INTERNAL. */
TROUPE_MUST_USE troupe_status_t troupe_cluster_init(int *argc, char ***argv);

/* Stops the transport engine and finalizes MPI. Returns the cluster's failure status, if any.
 * After a deadline or MPI failure MPI_Finalize is skipped (it would wait for dead peers);
 * after a fingerprint mismatch every rank knows of it and MPI is healthy, so MPI is finalized
 * normally. Safe to call without init (OK). */
TROUPE_MUST_USE troupe_status_t troupe_cluster_finalize(void);

/* For a program that stops after a failure while other ranks may be dead or stuck: logs
 * `reason` (may be NULL) at error level, unregisters the remote transport, stops the
 * transport engine (waiting at most 2 s for it to leave MPI) and marks the cluster failed
 * (TROUPE_CANCELLED unless it already failed), without MPI_Finalize, which would wait for the
 * peers. It does not end the process: the caller exits with a non-zero status next. Later
 * troupe_cluster_finalize calls return OK and do nothing.
 * troupe_cluster_status() keeps the first failure. Returns OK (also when the cluster was not
 * initialized), or DEADLINE_EXCEEDED if the engine did not stop within 2 s (the process should
 * exit all the same). */
troupe_status_t troupe_cluster_leave(const char *reason);

bool troupe_cluster_is_initialized(void);
bool troupe_cluster_is_distributed(void); /* size > 1 under a launcher */
int troupe_cluster_rank(void);            /* 0 when not initialized */
int troupe_cluster_size(void);            /* 1 when not initialized */
int troupe_cluster_local_rank(void);      /* rank among the processes of this node */
int troupe_cluster_local_size(void);
/* Internal: the node-local rank and size a launcher announces in the environment, readable
 * before or without troupe_cluster_init: Open MPI's OMPI_COMM_WORLD_LOCAL_RANK and _SIZE, else
 * Slurm's SLURM_LOCALID and SLURM_NTASKS_PER_NODE (its uneven form "2(x3)" reads as 2). The
 * first pair whose two variables are set decides: true with 0 <= *rank < *size and *var the
 * rank's variable name (static) when its values are consistent; false otherwise (no pair, or
 * the deciding pair inconsistent), the outputs then untouched. */
bool troupe__cluster_env_local_rank(int *rank, int *size, const char **var);
/* Whether the MPI library says it takes CUDA device memory (Open MPI's mpi-ext.h:
 * MPIX_Query_cuda_support() where MPIX_CUDA_AWARE_SUPPORT is defined), asked once at
 * troupe_cluster_init; false before it, without MPI, or with an MPI that cannot say. */
bool troupe_cluster_cuda_aware(void);
/* What this build's MPI says about CUDA device memory without initializing it (troupe info):
 * "yes (MPIX_CUDA_AWARE_SUPPORT 1)", "no (MPIX_CUDA_AWARE_SUPPORT 0)", "unknown (no
 * MPIX_CUDA_AWARE_SUPPORT in mpi-ext.h)", or "none (built without MPI)"; a static string. The
 * run-time answer (troupe_cluster_cuda_aware) is asked at troupe_cluster_init. */
const char *troupe_mpi_cuda_support(void);

/* TROUPE_OK while healthy; after a failed collective its status (message in
 * troupe_last_error()). */
troupe_status_t troupe_cluster_status(void);

/* "Open MPI v4.1.4, ..." (MPI_Get_library_version's first line), or "none" in a build without
 * MPI. Callable before init. */
const char *troupe_mpi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_TRANSPORT_MPI_CLUSTER_H */
