/* troupe — the cluster (transport/mpi/cluster.h): launcher detection, MPI initialisation and
 * finalisation, ranks, the cluster's failure state, and the remote transport that
 * troupe_device_to_device uses across ranks (actors/lend.h). */
#define _GNU_SOURCE /* setenv */
#include "troupe_config.h"

#include "base/config.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/engine_impl.h"
#include "transport/mpi/transport_impl.h"
#include "transport/zmq/status_impl.h"

#include "actors/lend.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/fault_impl.h"
#include "base/log.h"
#include "base/status.h"
#include "base/trace_impl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if TROUPE_HAVE_MPI
#include <mpi.h>
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* Open MPI's extensions: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support */
#endif
#endif
#endif

/* The environment variables this layer reads (base/config.h registry; docs/configuration.md). */
static const troupe_config_var_t s_env_vars[] = {
    {"TROUPE_FUSION_BYTES", "transport", "bytes", "67108864", "1024..",
     "troupe_config_set_fusion_bytes", "the size of a gradient fusion bucket"},
    {"TROUPE_COLL_SHM", "transport", "0|1", "1", "0|1", "troupe_config_set_coll_shm",
     "reduce through shared memory when every rank runs on this node"},
    {"TROUPE_CUDA_AWARE", "transport", "choice", "auto", "auto|on|off",
     "troupe_config_set_cuda_aware", "hand device arrays to a CUDA-aware MPI"},
    {"TROUPE_STATUS", "transport", "endpoint", "ipc", "ipc|off|tcp:<interface>",
     "troupe_config_set_status", "the control plane's status endpoint"},
    {"TROUPE_JOB_ID", "transport", "name", "the launcher's job id", "at most 63 bytes",
     "troupe_config_set_job_id", "names the job's status directory"},
};
TROUPE_CONFIG_VARS(transport, s_env_vars)

/* How long troupe_cluster_leave waits for the engine to get out of MPI. */
#define S_LEAVE_JOIN_NS (2LL * 1000 * 1000 * 1000)

static struct {
    atomic_bool initialized;
    atomic_bool distributed;
    atomic_bool failed; /* failure != TROUPE_OK, readable without the lock */
    atomic_int rank, size, local_rank, local_size;
    atomic_bool cuda_aware; /* MPIX_Query_cuda_support() at init */
    bool mpi_ours;      /* we called MPI_Init_thread (so we finalize) */
    bool mpi_finalized; /* MPI cannot be initialised again in this process */
    pthread_mutex_t mu; /* guards the failure fields */
    troupe_status_t failure;
    bool comm_broken;
    char failure_msg[1024];
#if TROUPE_HAVE_MPI
    MPI_Comm data_comm, ctl_comm;
#endif
} s_cl = {.size = 1, .local_size = 1, .mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- failure state ----------------------------------------------------------------------- */

/* Writes the trace file (base/trace.h) now; a failure to write is logged, not returned, and
 * the thread's last error stays the caller's. */
static void s_trace_flush(const char *when)
{
    if (!troupe_trace_enabled())
        return;
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", troupe_last_error());
    if (troupe_trace_flush() != TROUPE_OK) {
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT, "%s: %s", when, troupe_last_error());
        troupe_error_set(TROUPE_OK, "%s", saved);
    }
}

void troupe__cluster_fail(troupe_status_t status, const char *message, bool comm_broken)
{
    if (status == TROUPE_OK)
        return;
    bool first = false;
    pthread_mutex_lock(&s_cl.mu);
    if (s_cl.failure == TROUPE_OK) {
        first = true;
        s_cl.failure = status;
        snprintf(s_cl.failure_msg, sizeof s_cl.failure_msg, "%s",
                 message != NULL ? message : troupe_status_str(status));
        atomic_store(&s_cl.failed, true);
        TROUPE_LOG(TROUPE_LOG_ERROR, TROUPE_SUB_TRANSPORT, "cluster failed: %s: %s",
                   troupe_status_str(status), s_cl.failure_msg);
    }
    if (comm_broken)
        s_cl.comm_broken = true;
    pthread_mutex_unlock(&s_cl.mu);
    if (first) /* the job may end here: keep what was recorded up to the failure */
        s_trace_flush("the cluster failed");
}

bool troupe__cluster_is_failed(void)
{
    return atomic_load_explicit(&s_cl.failed, memory_order_acquire);
}

troupe_status_t troupe__cluster_failure(char *msg, size_t cap)
{
    if (!troupe__cluster_is_failed())
        return TROUPE_OK;
    pthread_mutex_lock(&s_cl.mu);
    troupe_status_t st = s_cl.failure;
    if (st != TROUPE_OK && msg != NULL && cap > 0)
        snprintf(msg, cap, "%s", s_cl.failure_msg);
    pthread_mutex_unlock(&s_cl.mu);
    return st;
}

troupe_status_t troupe_cluster_status(void)
{
    char msg[1024];
    troupe_status_t st = troupe__cluster_failure(msg, sizeof msg);
    if (st != TROUPE_OK)
        troupe__error(st, "%s", msg);
    return st;
}

/* ---- queries ----------------------------------------------------------------------------- */

bool troupe_cluster_is_initialized(void)
{
    return atomic_load(&s_cl.initialized);
}

bool troupe_cluster_is_distributed(void)
{
    return atomic_load(&s_cl.initialized) && atomic_load(&s_cl.distributed);
}

int troupe_cluster_rank(void)
{
    return atomic_load(&s_cl.initialized) ? atomic_load(&s_cl.rank) : 0;
}

int troupe_cluster_size(void)
{
    return atomic_load(&s_cl.initialized) ? atomic_load(&s_cl.size) : 1;
}

int troupe_cluster_local_rank(void)
{
    return atomic_load(&s_cl.initialized) ? atomic_load(&s_cl.local_rank) : 0;
}

int troupe_cluster_local_size(void)
{
    return atomic_load(&s_cl.initialized) ? atomic_load(&s_cl.local_size) : 1;
}

const char *troupe_mpi_cuda_support(void)
{
#if !TROUPE_HAVE_MPI
    return "none (built without MPI)";
#elif !defined(MPIX_CUDA_AWARE_SUPPORT)
    return "unknown (no MPIX_CUDA_AWARE_SUPPORT in mpi-ext.h)";
#elif MPIX_CUDA_AWARE_SUPPORT
    return "yes (MPIX_CUDA_AWARE_SUPPORT 1)";
#else
    return "no (MPIX_CUDA_AWARE_SUPPORT 0)";
#endif
}

bool troupe_cluster_cuda_aware(void)
{
    return atomic_load(&s_cl.initialized) && atomic_load(&s_cl.cuda_aware);
}

static pthread_once_t s_version_once = PTHREAD_ONCE_INIT;
static char s_version[256] = "none";

static void s_version_load(void)
{
#if TROUPE_HAVE_MPI
    char buf[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(buf, &len) == MPI_SUCCESS) {
        buf[len < (int)sizeof buf ? len : (int)sizeof buf - 1] = '\0';
        size_t end = strcspn(buf, "\r\n");
        buf[end] = '\0';
        snprintf(s_version, sizeof s_version, "%s", buf);
    } else {
        snprintf(s_version, sizeof s_version, "MPI (version unknown)");
    }
#endif
}

const char *troupe_mpi_version(void)
{
    pthread_once(&s_version_once, s_version_load);
    return s_version;
}

/* ---- the remote transport (actors/lend.h) -------------------------------------------- */

static troupe_status_t s_remote_move(void *user, bool is_send, int peer, troupe_tnode_t *tn,
                                     void *ptr, int64_t bytes, troupe_event_t *done)
{
    (void)user;
    const char *what = is_send ? "send" : "recv";
    if (tn == NULL || done == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "remote %s: %s is NULL", what,
                             tn == NULL ? "node" : "done event");
    char label[TROUPE__FP_NAME_MAX + 1];
    troupe_tnode_label_string(tn, label, sizeof label);
    int rank = troupe_cluster_rank(), size = troupe_cluster_size();
    if (peer < 0 || peer >= size || peer == rank)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "remote %s of node %d '%s': peer rank %d is not another rank of "
                             "0..%d (this is rank %d)",
                             what, (int)tn->id, label, peer, size - 1, rank);
    if (bytes != (int64_t)tn->size_bytes || (ptr == NULL && bytes > 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "remote %s of node %d '%s': %lld bytes at %p, the node has %zu", what,
                             (int)tn->id, label, (long long)bytes, ptr, tn->size_bytes);
    char msg[1024];
    troupe_status_t st = troupe__cluster_failure(msg, sizeof msg);
    if (st != TROUPE_OK)
        return troupe__error(st, "%s", msg);
    if (!troupe__engine_running())
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "remote %s of node %d '%s': the transport is not running "
                             "(troupe_cluster_finalize was called)",
                             what, (int)tn->id, label);
    troupe__req_t *r = troupe__req_new(is_send ? TROUPE__REQ_SEND : TROUPE__REQ_RECV, 1);
    if (r == NULL)
        return TROUPE_RESOURCE_EXHAUSTED;
    r->peer = peer;
    troupe_coll_tensor_t t = troupe_coll_tensor_of(tn, ptr);
    t.name = label;
    troupe__req_set_tensor(r, 0, &t);
    r->ev = done; /* adopted */
    troupe__engine_submit(&r);
    return TROUPE_OK;
}

/* ---- the control plane (transport/zmq/status_impl.h) ------------------------------------- */

/* Starts this process's status actor as rank `rank` of `size` with `plan`. */
static void s_status_start(const troupe__status_plan_t *plan, int rank, int size,
                           troupe__status_rank_info_t *mine)
{
    if (troupe__status_start(plan, rank, size, mine) != TROUPE_OK)
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT, "%s", troupe_last_error());
}

/* Without a launcher: this process is the whole job. */
static void s_status_single(void)
{
    troupe__status_plan_t plan;
    troupe__status_plan_make(&plan);
    troupe__status_rank_info_t mine;
    s_status_start(&plan, 0, 1, &mine);
    troupe__status_publish(&mine, 1, true);
}

#if TROUPE_HAVE_MPI
/* Every rank, before the engine owns MPI: the first rank's plan is broadcast, each rank starts
 * its status actor, the endpoints are gathered once (when every rank could make room for them),
 * and each node's first rank writes the job file. The control plane never fails the cluster:
 * what goes wrong is logged and that part stays off. */
static void s_status_mpi(int rank, int size, int local_rank)
{
    troupe__status_plan_t plan;
    memset(&plan, 0, sizeof plan);
    if (rank == 0)
        troupe__status_plan_make(&plan);
    int rc = MPI_Bcast(&plan, (int)sizeof plan, MPI_BYTE, 0, s_cl.ctl_comm);
    if (rc != MPI_SUCCESS) {
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT, "status: MPI_Bcast failed: no control "
                                                          "plane");
        return;
    }
    plan.job[sizeof plan.job - 1] = plan.iface[sizeof plan.iface - 1] = '\0';
    plan.curve_public[TROUPE__STATUS_KEY_LEN] = plan.curve_secret[TROUPE__STATUS_KEY_LEN] = '\0';
    troupe__status_rank_info_t mine;
    s_status_start(&plan, rank, size, &mine);
    troupe__status_rank_info_t *all = troupe_calloc((size_t)size, sizeof *all);
    int ok = all != NULL, all_ok = 0;
    rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, s_cl.ctl_comm);
    if (rc == MPI_SUCCESS && all_ok)
        rc = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                           s_cl.ctl_comm);
    if (rc == MPI_SUCCESS && all_ok)
        troupe__status_publish(all, size, local_rank == 0);
    else
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT,
                   "status: the endpoints could not be gathered: `troupe status` will not find "
                   "this job");
    troupe_free(all);
}
#endif

/* ---- init / finalize / leave ------------------------------------------------------------- */

static bool s_env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0';
}

static int s_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return dflt;
    char *end = NULL;
    long x = strtol(v, &end, 10); /* "2(x3)" (Slurm) reads as 2 */
    if (end == v || x < 0 || x > 1 << 24)
        return dflt;
    return (int)x;
}

bool troupe__cluster_env_local_rank(int *rank, int *size, const char **var)
{
    static const char *const pairs[2][2] = {
        {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    };
    for (int i = 0; i < 2; i++) {
        if (!s_env_set(pairs[i][0]) || !s_env_set(pairs[i][1]))
            continue;
        int r = s_env_int(pairs[i][0], -1), n = s_env_int(pairs[i][1], -1);
        if (r < 0 || n <= 0 || r >= n)
            return false;
        *rank = r;
        *size = n;
        if (var != NULL)
            *var = pairs[i][0];
        return true;
    }
    return false;
}

/* Open MPI's mpirun/prterun, PMIx launchers (srun --mpi=pmix, prun), or a multi-task Slurm
 * step. */
static bool s_launcher_detected(void)
{
    if (s_env_set("OMPI_COMM_WORLD_SIZE") || s_env_set("PMIX_RANK"))
        return true;
    return s_env_set("SLURM_PROCID") && s_env_int("SLURM_NTASKS", 1) > 1;
}

#if TROUPE_HAVE_MPI
static troupe_status_t s_mpi_init(int *argc, char ***argv)
{
    int rc, flag = 0;
    /* libnbc's default MPI_Iallreduce is 1.5-2x slower than MPI_Allreduce from 64 KiB to
     * 64 MiB on two ranks; Rabenseifner's (3) matches it. The user's choice wins. */
    if (getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm") == NULL)
        setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    MPI_Initialized(&flag);
    int provided = MPI_THREAD_SINGLE;
    if (flag) {
        MPI_Query_thread(&provided);
    } else {
        rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error("cluster", "MPI_Init_thread", rc);
        s_cl.mpi_ours = true;
    }
    if (provided < MPI_THREAD_SERIALIZED)
        return troupe__error(TROUPE_TRANSPORT_ERROR,
                             "MPI provides thread level %d, below MPI_THREAD_SERIALIZED (%d): "
                             "the transport engine cannot call MPI",
                             provided, MPI_THREAD_SERIALIZED);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, &rank)) != MPI_SUCCESS)
        return troupe__mpi_error("cluster", "MPI_Comm_rank", rc);
    if ((rc = MPI_Comm_size(MPI_COMM_WORLD, &size)) != MPI_SUCCESS)
        return troupe__mpi_error("cluster", "MPI_Comm_size", rc);
    int local_rank = -1, local_size = -1;
    if (!troupe__cluster_env_local_rank(&local_rank, &local_size, NULL)) {
        MPI_Comm node;
        rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
        if (rc != MPI_SUCCESS)
            return troupe__mpi_error("cluster", "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)", rc);
        MPI_Comm_rank(node, &local_rank);
        MPI_Comm_size(node, &local_size);
        MPI_Comm_free(&node);
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &s_cl.data_comm)) != MPI_SUCCESS)
        return troupe__mpi_error("cluster", "MPI_Comm_dup", rc);
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &s_cl.ctl_comm)) != MPI_SUCCESS)
        return troupe__mpi_error("cluster", "MPI_Comm_dup", rc);
    MPI_Comm_set_errhandler(s_cl.data_comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(s_cl.ctl_comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_name(s_cl.data_comm, "troupe-data");
    MPI_Comm_set_name(s_cl.ctl_comm, "troupe-ctl");
    atomic_store(&s_cl.rank, rank);
    atomic_store(&s_cl.size, size);
    atomic_store(&s_cl.local_rank, local_rank);
    atomic_store(&s_cl.local_size, local_size);
    atomic_store(&s_cl.distributed, size > 1);
#if defined(MPIX_CUDA_AWARE_SUPPORT) /* built with or without it, the library says at run time */
    atomic_store(&s_cl.cuda_aware, MPIX_Query_cuda_support() == 1);
#endif
    troupe_log_set_rank(rank);
    troupe__fault_set_rank(rank);
    troupe__trace_set_rank(rank, size);
    if (size > 1)
        TROUPE_RETURN_IF_ERROR(troupe__clock_sync(s_cl.ctl_comm, rank, size));
    s_status_mpi(rank, size, local_rank);
    if (size > 1)
        TROUPE_RETURN_IF_ERROR(troupe__engine_start(&s_cl.data_comm, &s_cl.ctl_comm, rank, size));
    return TROUPE_OK;
}
#endif

troupe_status_t troupe_cluster_init(int *argc, char ***argv)
{
    if (atomic_load(&s_cl.initialized))
        return TROUPE_OK;
    TROUPE_RETURN_IF_ERROR(troupe__fault_check()); /* a malformed TROUPE_FAULT: refuse to start */
    TROUPE_RETURN_IF_ERROR(troupe__trace_check()); /* timelines that could not be written */
    bool launcher = s_launcher_detected();
    atomic_store(&s_cl.rank, 0);
    atomic_store(&s_cl.size, 1);
    atomic_store(&s_cl.local_rank, 0);
    atomic_store(&s_cl.local_size, 1);
    atomic_store(&s_cl.distributed, false);
    if (launcher) {
#if TROUPE_HAVE_MPI
        if (s_cl.mpi_finalized)
            return troupe__error(TROUPE_TRANSPORT_ERROR,
                                 "troupe_cluster_init: MPI was finalized in this process and "
                                 "cannot be initialised again");
        troupe_status_t st = s_mpi_init(argc, argv);
        if (st != TROUPE_OK) {
            TROUPE_LOG(TROUPE_LOG_ERROR, TROUPE_SUB_TRANSPORT, "troupe_cluster_init: %s",
                       troupe_last_error());
            return st;
        }
#else
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT,
                   "a launcher is present but troupe was built without MPI: this process is "
                   "rank 0 of 1");
#endif
    }
    troupe_remote_transport_t t = {
        .move = s_remote_move,
        .user = NULL,
        .rank = atomic_load(&s_cl.rank),
        .size = atomic_load(&s_cl.size),
    };
    troupe_set_remote_transport(&t);
    if (!launcher)
        s_status_single();
    atomic_store(&s_cl.initialized, true);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TRANSPORT,
               "cluster: rank %d of %d (local %d of %d), %s, CUDA-aware MPI %s",
               atomic_load(&s_cl.rank), atomic_load(&s_cl.size), atomic_load(&s_cl.local_rank),
               atomic_load(&s_cl.local_size), launcher ? troupe_mpi_version() : "no launcher",
               atomic_load(&s_cl.cuda_aware) ? "yes" : "no");
    return TROUPE_OK;
}

troupe_status_t troupe_cluster_finalize(void)
{
    if (!atomic_load(&s_cl.initialized))
        return TROUPE_OK;
    troupe_set_remote_transport(NULL);
    /* Every submitted request completes first, each bounded by its deadline. */
    (void)troupe__engine_stop(true, TROUPE_TIMEOUT_INFINITE);
    s_trace_flush("cluster_finalize");
    troupe__status_stop();
    char msg[1024];
    troupe_status_t st = troupe__cluster_failure(msg, sizeof msg);
    pthread_mutex_lock(&s_cl.mu);
    bool broken = s_cl.comm_broken;
    pthread_mutex_unlock(&s_cl.mu);
#if TROUPE_HAVE_MPI
    if (s_cl.mpi_ours && !broken) {
        MPI_Comm_free(&s_cl.data_comm);
        MPI_Comm_free(&s_cl.ctl_comm);
        int rc = MPI_Finalize();
        if (rc != MPI_SUCCESS && st == TROUPE_OK) {
            st = troupe__mpi_error("cluster", "MPI_Finalize", rc);
            snprintf(msg, sizeof msg, "%s", troupe_last_error());
        }
    } else if (s_cl.mpi_ours) {
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT,
                   "MPI_Finalize skipped: the cluster failed (%s)", msg);
    }
    if (s_cl.mpi_ours)
        s_cl.mpi_finalized = true;
    s_cl.mpi_ours = false;
#else
    (void)broken;
#endif
    atomic_store(&s_cl.initialized, false);
    atomic_store(&s_cl.distributed, false);
    if (st != TROUPE_OK)
        return troupe__error(st, "%s", msg);
    return TROUPE_OK;
}

troupe_status_t troupe_cluster_leave(const char *reason)
{
    const char *why = reason != NULL ? reason : "(no reason given)";
    if (!atomic_load(&s_cl.initialized)) {
        TROUPE_LOG(TROUPE_LOG_ERROR, TROUPE_SUB_TRANSPORT, "leaving: %s", why);
        return TROUPE_OK;
    }
    /* The first failure stays the cluster's; a rank leaving on its own marks the
     * communicators unusable so that no later call waits in MPI for peers. */
    if (troupe__cluster_is_failed()) /* logged when it failed; else troupe__cluster_fail logs */
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TRANSPORT, "leaving the cluster: %s", why);
    troupe__cluster_fail(TROUPE_CANCELLED, why, true);
    s_trace_flush("cluster_leave");
    troupe_set_remote_transport(NULL);
    troupe_status_t st = TROUPE_OK;
    /* The engine only makes nonblocking MPI calls, so it stops within a turn. */
    if (!troupe__engine_stop(false, S_LEAVE_JOIN_NS))
        st = troupe__error(TROUPE_DEADLINE_EXCEEDED,
                           "cluster_leave: the transport engine did not stop within %lld s",
                           (long long)(S_LEAVE_JOIN_NS / 1000000000LL));
    troupe__status_stop();
    atomic_store(&s_cl.initialized, false);
    atomic_store(&s_cl.distributed, false);
    return st;
}
