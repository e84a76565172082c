/* troupe — the status actor and the control plane's life (see status_impl.h). */
#define _GNU_SOURCE
#include "transport/zmq/status_impl.h"

#include "actors/actor.h"
#include "actors/board_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/fault_impl.h"
#include "base/log.h"
#include "transport/zmq/report_impl.h"
#include "transport/zmq/wire_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define S_REPORT_TIMEOUT_NS (500LL * 1000 * 1000) /* per rank, for the logged reports */
#define S_SUN_PATH_MAX 107                        /* sockaddr_un.sun_path, without the NUL */
#define S_ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define S_ZAP_DOMAIN "troupe"

static struct {
    pthread_mutex_t mu; /* guards job/published (read by the deadline hook from any thread) */
    bool started;
    troupe__status_plan_t plan;
    troupe__status_self_t self;
    char dir[TROUPE__STATUS_PATH_MAX];
    char endpoint[TROUPE__STATUS_ENDPOINT_MAX + 1];
    troupe__status_job_t job;
    bool published, wrote_job;
    troupe_actor_t *actor;
    bool sig_installed;
    struct sigaction old_usr1;
    atomic_bool deadline_reported;
} s_st = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The actor's wake-up for SIGUSR1: made once and kept for the process's life, so a signal
 * handler never writes to a closed descriptor. */
/* The eventfd heads a zeroed block: zpoller probes it as a libzmq socket before taking it as a
 * descriptor, and libzmq's tag check reads 1560 bytes past it (actors/actor.c, the mailbox's
 * poll handle). */
static union {
    int fd;
    unsigned char probe_room[4096];
} s_wake = {.fd = -1};
#define s_wake_fd (s_wake.fd)
static pthread_once_t s_wake_once = PTHREAD_ONCE_INIT;
static volatile sig_atomic_t s_usr1;

static void s_make_wake_fd(void)
{
    s_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

static void s_on_usr1(int sig)
{
    (void)sig;
    int saved = errno;
    s_usr1 = 1;
    uint64_t one = 1;
    ssize_t rc = write(s_wake_fd, &one, sizeof one);
    (void)rc;
    errno = saved;
}

/* ---- the plan ---------------------------------------------------------------------------- */

static const char *s_env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

void troupe__status_plan_make(troupe__status_plan_t *plan)
{
    memset(plan, 0, sizeof *plan);
    char raw[128];
    const char *v;
    if ((v = troupe_config_job_id())[0] != '\0')
        snprintf(raw, sizeof raw, "%s", v);
    else if ((v = s_env("OMPI_MCA_orte_ess_jobid")) != NULL)
        snprintf(raw, sizeof raw, "ompi-%s", v);
    else if ((v = s_env("PMIX_NAMESPACE")) != NULL)
        snprintf(raw, sizeof raw, "%s", v);
    else if ((v = s_env("SLURM_JOB_ID")) != NULL)
        snprintf(raw, sizeof raw, "slurm-%s.%s", v,
                 s_env("SLURM_STEP_ID") ? s_env("SLURM_STEP_ID") : "0");
    else
        snprintf(raw, sizeof raw, "pid%ld", (long)getpid());
    troupe__status_sanitize_id(raw, plan->job, sizeof plan->job);
    const char *mode = troupe_config_status();
    if (strcmp(mode, "off") == 0) {
        plan->mode = TROUPE__STATUS_OFF;
    } else if (strncmp(mode, "tcp:", 4) == 0) {
        plan->mode = TROUPE__STATUS_TCP;
        snprintf(plan->iface, sizeof plan->iface, "%s", mode + 4);
        if (!zsys_has_curve() ||
            zmq_curve_keypair(plan->curve_public, plan->curve_secret) != 0) {
            TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT,
                       "status: TROUPE_STATUS=%s needs CURVE, which this libzmq lacks: the "
                       "control plane stays off (ipc:// needs no keys)",
                       mode);
            plan->mode = TROUPE__STATUS_OFF;
        }
    } else {
        plan->mode = TROUPE__STATUS_IPC;
    }
}

/* ---- the actor --------------------------------------------------------------------------- */

/* The IPv4 address of interface `iface` into addr. */
static troupe_status_t s_iface_addr(const char *iface, char *addr, size_t cap)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return troupe__error(TROUPE_UNAVAILABLE, "status: getifaddrs: %s", strerror(errno));
    troupe_status_t st = troupe__error(TROUPE_NOT_FOUND,
                                       "status: interface %s has no IPv4 address (TROUPE_STATUS)",
                                       iface);
    for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
            strcmp(i->ifa_name, iface) != 0)
            continue;
        const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)i->ifa_addr;
        if (inet_ntop(AF_INET, &sin->sin_addr, addr, (socklen_t)cap) != NULL) {
            troupe_clear_error();
            st = TROUPE_OK;
        }
        break;
    }
    freeifaddrs(ifs);
    return st;
}

/* Makes the ROUTER (and, for CURVE, the ZAP handler) and binds it; sets s_st.endpoint. */
static troupe_status_t s_setup(zsock_t **router_p, zsock_t **zap_p)
{
    zsock_t *router = zsock_new(ZMQ_ROUTER);
    if (router == NULL)
        return troupe__error(TROUPE_TRANSPORT_ERROR, "status: cannot make a ROUTER socket");
    *router_p = router;
    zsock_set_linger(router, 0);
    zsock_set_maxmsgsize(router, TROUPE__STATUS_MAX_REQ_BYTES);
    zsock_set_rcvhwm(router, 64);
    zsock_set_sndhwm(router, 64);
    const troupe__status_plan_t *p = &s_st.plan;
    if (p->mode == TROUPE__STATUS_TCP) {
        char addr[64];
        TROUPE_RETURN_IF_ERROR(s_iface_addr(p->iface, addr, sizeof addr));
        zsock_t *zap = zsock_new(ZMQ_REP);
        if (zap == NULL)
            return troupe__error(TROUPE_TRANSPORT_ERROR, "status: cannot make the ZAP socket");
        *zap_p = zap;
        zsock_set_linger(zap, 0);
        if (zsock_bind(zap, "%s", S_ZAP_ENDPOINT) != 0)
            return troupe__error(TROUPE_TRANSPORT_ERROR,
                                 "status: cannot bind %s (%s): another ZAP handler (zauth) runs "
                                 "in this process",
                                 S_ZAP_ENDPOINT, zmq_strerror(zmq_errno()));
        zsock_set_zap_domain(router, S_ZAP_DOMAIN);
        zsock_set_curve_server(router, 1);
        zsock_set_curve_publickey(router, p->curve_public);
        zsock_set_curve_secretkey(router, p->curve_secret);
        int port = zsock_bind(router, "tcp://%s:*", addr);
        if (port <= 0)
            return troupe__error(TROUPE_TRANSPORT_ERROR, "status: cannot bind tcp://%s:*: %s",
                                 addr, zmq_strerror(zmq_errno()));
        snprintf(s_st.endpoint, sizeof s_st.endpoint, "tcp://%s:%d", addr, port);
        return TROUPE_OK;
    }
    char path[TROUPE__STATUS_PATH_MAX + 16];
    int n = snprintf(path, sizeof path, "%s/%d", s_st.dir, s_st.self.rank);
    if (n < 0 || n > S_SUN_PATH_MAX)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "status: the socket path %s is longer than %d bytes: set "
                             "XDG_RUNTIME_DIR or TROUPE_JOB_ID to something shorter",
                             path, S_SUN_PATH_MAX);
    unlink(path); /* a socket a dead process of a job with the same id left */
    if (zsock_bind(router, "ipc://%s", path) != 0)
        return troupe__error(TROUPE_TRANSPORT_ERROR, "status: cannot bind ipc://%s: %s", path,
                             zmq_strerror(zmq_errno()));
    snprintf(s_st.endpoint, sizeof s_st.endpoint, "ipc://%.200s", path);
    return TROUPE_OK;
}

/* One request on the ROUTER: [routing id][empty, from a REQ client]?[request...]. */
static void s_serve(zsock_t *router)
{
    zmsg_t *msg = zmsg_recv(router);
    if (msg == NULL)
        return;
    if (troupe__fault_armed(TROUPE__FAULT_CTRL)) { /* TROUPE_FAULT=ctrl:drop|delay=MS */
        int64_t delay_ms = 0;
        troupe__fault_ctrl_action_t fa = troupe__fault_ctrl("a STATUS request", &delay_ms);
        if (fa == TROUPE__FAULT_CTRL_DROP) {
            zmsg_destroy(&msg);
            return;
        }
        if (fa == TROUPE__FAULT_CTRL_DELAY)
            troupe_sleep_ns(delay_ms * 1000000LL);
    }
    zframe_t *rid = zmsg_pop(msg);
    zframe_t *delim = NULL;
    zframe_t *first = zmsg_first(msg);
    if (first != NULL && zframe_size(first) == 0)
        delim = zmsg_pop(msg);
    zmsg_t *reply = NULL;
    if (rid != NULL)
        troupe__status_answer(&s_st.self, msg, &reply);
    if (reply != NULL) {
        if (delim != NULL)
            zmsg_prepend(reply, &delim);
        zmsg_prepend(reply, &rid);
        if (zmsg_send(&reply, router) != 0)
            zmsg_destroy(&reply);
    }
    zframe_destroy(&delim);
    zframe_destroy(&rid);
    zmsg_destroy(&msg);
}

/* A ZAP request (RFC 27): admits CURVE clients that present the job's public key. */
static void s_zap(zsock_t *zap)
{
    zmsg_t *req = zmsg_recv(zap);
    if (req == NULL)
        return;
    zframe_t *f[7] = {NULL};
    for (int i = 0; i < 7; i++)
        f[i] = zmsg_pop(req);
    uint8_t job_key[32];
    bool ok = f[6] != NULL && f[5] != NULL && f[0] != NULL && zframe_streq(f[0], "1.0") &&
              zframe_streq(f[5], "CURVE") && zframe_size(f[6]) == sizeof job_key &&
              zmq_z85_decode(job_key, s_st.plan.curve_public) != NULL &&
              memcmp(zframe_data(f[6]), job_key, sizeof job_key) == 0;
    if (!ok)
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TRANSPORT,
                   "status: refused a client without the job's key");
    zmsg_t *reply = zmsg_new();
    if (reply != NULL) {
        zmsg_addstr(reply, "1.0");
        if (f[1] != NULL)
            zmsg_append(reply, &f[1]);
        else
            zmsg_addstr(reply, "");
        zmsg_addstr(reply, ok ? "200" : "400");
        zmsg_addstr(reply, ok ? "OK" : "not the job's key");
        zmsg_addstr(reply, "");
        zmsg_addmem(reply, NULL, 0);
        if (zmsg_send(&reply, zap) != 0)
            zmsg_destroy(&reply);
    }
    for (int i = 0; i < 7; i++)
        zframe_destroy(&f[i]);
    zmsg_destroy(&req);
}

static void s_clear_wake(void)
{
    uint64_t v;
    ssize_t rc = read(s_wake_fd, &v, sizeof v);
    (void)rc;
}

/* Starts the SIGUSR1 report (not blocking the actor's answers). */
static troupe__status_query_t *s_usr1_start(zpoller_t *poller, troupe__status_job_t *job)
{
    troupe__status_query_t *q = NULL;
    if (troupe__status_job_copy(job) != TROUPE_OK ||
        troupe__status_query_new(job, &s_st.self, S_REPORT_TIMEOUT_NS, &q) != TROUPE_OK) {
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT, "status: SIGUSR1: no report: %s",
                   troupe_last_error());
        troupe__status_job_clear(job);
        return NULL;
    }
    troupe__status_query_poll_add(q, poller);
    return q;
}

static void s_usr1_finish(troupe__status_query_t **q_p, zpoller_t *poller, troupe__status_job_t *job)
{
    troupe__status_log_query(job, *q_p, "status report (SIGUSR1):");
    troupe__status_query_destroy(q_p, poller);
    troupe__status_job_clear(job);
}

/* Handles one thing the poller returned; false on $TERM or a dead context. */
static bool s_handle(zsock_t *pipe, zsock_t *router, zsock_t *zap, zpoller_t *poller,
                     void *which, troupe__status_query_t **q, troupe__status_job_t *job)
{
    if (which == pipe) {
        zmsg_t *msg = troupe_actor_recv(pipe);
        bool term = msg == NULL || zframe_streq(zmsg_first(msg), TROUPE_VERB_TERM);
        zmsg_destroy(&msg);
        return !term;
    }
    if (which == router) {
        s_serve(router);
    } else if (zap != NULL && which == zap) {
        s_zap(zap);
    } else if (which == &s_wake_fd) {
        s_clear_wake();
        if (s_usr1 && *q == NULL) {
            s_usr1 = 0;
            *q = s_usr1_start(poller, job);
        }
    } else if (*q != NULL && which != NULL) {
        troupe__status_query_handle(*q, which);
    } else if (which == NULL && zpoller_terminated(poller)) {
        return false;
    }
    return true;
}

static void s_actor(zsock_t *pipe, void *args)
{
    (void)args;
    zsock_t *router = NULL, *zap = NULL;
    zpoller_t *poller = NULL;
    troupe_log_set_thread_tag("status");
    troupe_status_t st = s_setup(&router, &zap);
    if (st == TROUPE_OK && (poller = zpoller_new(pipe, router, NULL)) == NULL)
        st = troupe__error(TROUPE_TRANSPORT_ERROR, "status: zpoller_new failed");
    if (st == TROUPE_OK && ((zap != NULL && zpoller_add(poller, zap) != 0) ||
                            (s_wake_fd >= 0 && zpoller_add(poller, &s_wake_fd) != 0)))
        st = troupe__error(TROUPE_TRANSPORT_ERROR, "status: zpoller_add failed");
    troupe_actor_ready(pipe, st);
    if (st == TROUPE_OK) {
        zpoller_set_nonstop(poller, true);
        troupe__status_query_t *q = NULL;
        troupe__status_job_t job = {0};
        for (;;) {
            void *which = zpoller_wait(poller, q != NULL ? troupe__status_query_wait_ms(q) : -1);
            if (!s_handle(pipe, router, zap, poller, which, &q, &job))
                break;
            if (q != NULL && troupe__status_query_done(q))
                s_usr1_finish(&q, poller, &job);
        }
        troupe__status_query_destroy(&q, poller);
        troupe__status_job_clear(&job);
    }
    zpoller_destroy(&poller);
    zsock_destroy(&zap);
    zsock_destroy(&router);
}

/* ---- the deadline hook ------------------------------------------------------------------- */

static void s_on_deadline(troupe_status_t status, const char *message)
{
    (void)status;
    if (atomic_exchange(&s_st.deadline_reported, true))
        return;
    troupe__status_job_t job;
    if (troupe__status_job_copy(&job) != TROUPE_OK)
        return;
    char title[512];
    snprintf(title, sizeof title, "hang report (a deadline expired: %.400s):", message);
    troupe__status_log_report(&job, &s_st.self, S_REPORT_TIMEOUT_NS, title);
    troupe__status_job_clear(&job);
}

/* ---- start / publish / stop -------------------------------------------------------------- */

troupe_status_t troupe__status_start(const troupe__status_plan_t *plan, int rank, int size,
                                     troupe__status_rank_info_t *mine)
{
    memset(mine, 0, sizeof *mine);
    mine->pid = (int)getpid();
    char host[256] = "unknown";
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    snprintf(mine->host, sizeof mine->host, "%.63s", host);
    if (s_st.started)
        return troupe__error(TROUPE_INTERNAL, "status: the status actor already runs");
    s_st.plan = *plan;
    s_st.self = (troupe__status_self_t){.rank = rank, .size = size};
    snprintf(s_st.self.job, sizeof s_st.self.job, "%s", plan->job);
    snprintf(s_st.self.host, sizeof s_st.self.host, "%s", mine->host);
    s_st.endpoint[0] = '\0';
    if (plan->mode == TROUPE__STATUS_OFF)
        return TROUPE_OK;
    pthread_once(&s_wake_once, s_make_wake_fd);
    troupe_status_t st = troupe__status_job_dir(plan->job, s_st.dir, sizeof s_st.dir, true);
    if (st == TROUPE_OK)
        st = troupe_actor_new("status", s_actor, NULL, &s_st.actor);
    if (st != TROUPE_OK) {
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT,
                   "status: the control plane did not start, the job runs without it "
                   "(`troupe status` will not see this rank): %s",
                   troupe_last_error());
        s_st.endpoint[0] = '\0';
        troupe_clear_error();
        return TROUPE_OK;
    }
    snprintf(mine->endpoint, sizeof mine->endpoint, "%s", s_st.endpoint);
    s_st.started = true;
    atomic_store(&s_st.deadline_reported, false);
    troupe__board_set_deadline_hook(s_on_deadline);
    struct sigaction cur;
    if (s_wake_fd >= 0 && sigaction(SIGUSR1, NULL, &cur) == 0 &&
        !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = s_on_usr1;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        s_st.sig_installed = sigaction(SIGUSR1, &sa, &s_st.old_usr1) == 0;
    }
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TRANSPORT, "status: rank %d answers on %s (job %s)",
               rank, s_st.endpoint, plan->job);
    return TROUPE_OK;
}

void troupe__status_publish(const troupe__status_rank_info_t *all, int size, bool write_job_file)
{
    if (!s_st.started || size < 1)
        return;
    pthread_mutex_lock(&s_st.mu);
    troupe__status_job_clear(&s_st.job);
    troupe__status_job_t *job = &s_st.job;
    job->ranks = troupe_calloc((size_t)size, sizeof *job->ranks);
    if (job->ranks == NULL) {
        pthread_mutex_unlock(&s_st.mu);
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT, "status: out of memory");
        return;
    }
    snprintf(job->id, sizeof job->id, "%s", s_st.plan.job);
    snprintf(job->dir, sizeof job->dir, "%s", s_st.dir);
    job->size = size;
    job->curve = s_st.plan.mode == TROUPE__STATUS_TCP;
    snprintf(job->curve_public, sizeof job->curve_public, "%s", s_st.plan.curve_public);
    snprintf(job->curve_secret, sizeof job->curve_secret, "%s", s_st.plan.curve_secret);
    for (int r = 0; r < size; r++) {
        job->ranks[r] = all[r];
        if (job->ranks[r].endpoint[0] == '\0')
            snprintf(job->ranks[r].endpoint, sizeof job->ranks[r].endpoint, "none");
        if (job->ranks[r].host[0] == '\0')
            snprintf(job->ranks[r].host, sizeof job->ranks[r].host, "unknown");
    }
    s_st.published = true;
    if (write_job_file) {
        troupe__status_prune(job->id);
        if (troupe__status_job_write(job) == TROUPE_OK)
            s_st.wrote_job = true;
        else
            TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT, "%s", troupe_last_error());
    }
    pthread_mutex_unlock(&s_st.mu);
}

troupe_status_t troupe__status_job_copy(troupe__status_job_t *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s_st.mu);
    troupe_status_t st = TROUPE_OK;
    if (!s_st.published) {
        st = troupe__error(TROUPE_NOT_FOUND, "status: no control plane runs in this process");
    } else {
        *out = s_st.job;
        out->ranks = troupe_calloc((size_t)s_st.job.size, sizeof *out->ranks);
        if (out->ranks == NULL)
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "status: out of memory");
        else
            memcpy(out->ranks, s_st.job.ranks, (size_t)s_st.job.size * sizeof *out->ranks);
    }
    pthread_mutex_unlock(&s_st.mu);
    return st;
}

void troupe__status_stop(void)
{
    if (!s_st.started)
        return;
    troupe__board_set_deadline_hook(NULL);
    if (s_st.sig_installed)
        sigaction(SIGUSR1, &s_st.old_usr1, NULL);
    s_st.sig_installed = false;
    troupe_actor_destroy(&s_st.actor);
    if (strncmp(s_st.endpoint, "ipc://", 6) == 0)
        unlink(s_st.endpoint + 6);
    pthread_mutex_lock(&s_st.mu);
    if (s_st.wrote_job)
        troupe__status_job_remove(s_st.dir);
    else
        rmdir(s_st.dir); /* the last rank out removes the directory */
    troupe__status_job_clear(&s_st.job);
    s_st.published = s_st.wrote_job = false;
    pthread_mutex_unlock(&s_st.mu);
    s_st.started = false;
}
