/* troupe — the C compile cache shared by the host drivers (see cc_cache_impl.h). */
#define _GNU_SOURCE /* pipe2, GNU strerror_r, environ */
#include "devices/host/cc_cache_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "base/trace_impl.h"
#include "base/vec.h"
#include "troupe_config.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* The environment variables this layer reads (base/config.h registry; docs/configuration.md). */
static const troupe_config_var_t s_env_vars[] = {
    {"CC", "devices", "command", "cc", "-", "troupe_config_set_cc",
     "the C compiler for generated code"},
    {"TROUPE_CC_FLAGS", "devices", "flags", "-O3 -march=native -fno-math-errno -shared -fPIC", "-",
     "troupe_config_set_cc_flags", "the flags generated code is compiled with"},
    {"TROUPE_CC_TIMEOUT_S", "devices", "seconds", "600", "(0, 86400]", "-",
     "a compile's deadline: past it the compiler's process group is killed"},
    {"TROUPE_CC_SPLIT_BYTES", "devices", "bytes", "65536", "[0, 2^40]", "-",
     "generated source longer than this compiles as several units of about this size (0: never)"},
    {"TROUPE_CC_JOBS", "devices", "count", "online CPUs", "[1, 1024]", "-",
     "compiler runs at once for a source split into units"},
    {"TROUPE_CACHE_DIR", "devices", "path",
     "$XDG_CACHE_HOME/troupe, ~/.cache/troupe, else /tmp/troupe-cache-$UID", "-",
     "troupe_config_set_cache_dir", "the compiled-routine cache (shared objects, cubins, PTX)"},
};
TROUPE_CONFIG_VARS(cc, s_env_vars)

/* Longest name part of a cache file name (the hash tells files apart). */
#define S_NAME_MAX 96
/* Compiler output kept for the error message and the log. */
#define S_OUTPUT_MAX 16384
/* Lines and bytes of compiler output quoted in troupe_last_error(). */
#define S_MSG_LINES 8
#define S_MSG_BYTES 640
/* TROUPE_CC_TIMEOUT_S's default: generous, a generated routine compiles in seconds. */
#define S_CC_TIMEOUT_DEFAULT_S 600.0
/* TROUPE_CC_SPLIT_BYTES's default: GCC's time and memory grow faster than the size of one
 * function. 64 KiB: the convnet's micro-step gradient routine (0.71 MB of C, with the products'
 * own loops) compiled in 12 s instead of 24, GPT "small"'s (2.7 MB) in 10 s instead of 20, the
 * routines as fast (docs/configuration.md). */
#define S_CC_SPLIT_BYTES_DEFAULT ((size_t)1 << 16)

/* How often a process waiting for another's compile of the same key looks at the lock. */
#define S_LOCK_POLL_NS 20000000L
/* How long past the compile deadline a waiter waits before compiling itself (the holder's
 * compile is killed at its deadline, so the lock is free by then unless the holder is stuck). */
#define S_LOCK_GRACE_S 30.0

static atomic_uint_fast64_t s_tmp_seq;

uint64_t troupe__fnv1a64(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

static const char *s_errno_name(int e)
{
    switch (e) {
    case ENOENT:
        return "ENOENT";
    case EACCES:
        return "EACCES";
    case EPERM:
        return "EPERM";
    case EEXIST:
        return "EEXIST";
    case ENOTDIR:
        return "ENOTDIR";
    case EROFS:
        return "EROFS";
    case ENOSPC:
        return "ENOSPC";
    case EDQUOT:
        return "EDQUOT";
    case EIO:
        return "EIO";
    case ENOMEM:
        return "ENOMEM";
    case EMFILE:
        return "EMFILE";
    case ENFILE:
        return "ENFILE";
    case ENAMETOOLONG:
        return "ENAMETOOLONG";
    case ENOEXEC:
        return "ENOEXEC";
    case ECHILD:
        return "ECHILD";
    case EAGAIN:
        return "EAGAIN";
    default:
        return "errno";
    }
}

/* "ENOENT: No such file or directory" into buf. */
static const char *s_errstr(int e, char *buf, size_t cap)
{
    char tmp[128];
    const char *msg = strerror_r(e, tmp, sizeof tmp); /* GNU variant: returns the text */
    snprintf(buf, cap, "%s %d: %s", s_errno_name(e), e, msg ? msg : "?");
    return buf;
}

troupe_status_t troupe__cache_mkdir_p(const char *dir)
{
    char eb[160];
    size_t len = strlen(dir);
    char *path = troupe_malloc(len + 1);
    if (!path)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cache directory path: out of memory");
    memcpy(path, dir, len + 1);
    troupe_status_t st = TROUPE_OK;
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            st = troupe__error(TROUPE_DEVICE_ERROR, "cannot create cache directory '%s' (%s)", path,
                               s_errstr(errno, eb, sizeof eb));
            goto out_path;
        }
        path[i] = saved;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        st = troupe__error(TROUPE_DEVICE_ERROR, "cache directory '%s' is not a directory", dir);
out_path:
    troupe_free(path);
    return st;
}

troupe_status_t troupe__cache_write_new(const char *path, const void *data, size_t len)
{
    char eb[160];
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return troupe__error(TROUPE_DEVICE_ERROR, "cannot create '%s' (%s)", path,
                             s_errstr(errno, eb, sizeof eb));
    troupe_status_t st = TROUPE_OK;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, (const char *)data + done, len - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            st = troupe__error(TROUPE_DEVICE_ERROR, "cannot write '%s' (%s)", path,
                               s_errstr(errno, eb, sizeof eb));
            break;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0 && st == TROUPE_OK)
        st = troupe__error(TROUPE_DEVICE_ERROR, "cannot write '%s' (%s)", path,
                           s_errstr(errno, eb, sizeof eb));
    if (st != TROUPE_OK)
        unlink(path);
    return st;
}

/* A growable NULL-terminated argv whose strings are owned by it. */
typedef struct s_argv {
    char **v;
    size_t n, cap;
} s_argv_t;

static bool s_argv_push(s_argv_t *a, const char *s, size_t len)
{
    if (!TROUPE__VEC_RESERVE(a->v, a->cap, a->n + 2)) /* the word and the NULL after it */
        return false;
    char *copy = troupe_malloc(len + 1);
    if (!copy)
        return false;
    memcpy(copy, s, len);
    copy[len] = '\0';
    a->v[a->n++] = copy;
    a->v[a->n] = NULL;
    return true;
}

/* Appends the whitespace-separated words of s. */
static bool s_argv_split(s_argv_t *a, const char *s)
{
    while (*s) {
        while (*s && isspace((unsigned char)*s))
            s++;
        const char *w = s;
        while (*s && !isspace((unsigned char)*s))
            s++;
        if (s > w && !s_argv_push(a, w, (size_t)(s - w)))
            return false;
    }
    return true;
}

static void s_argv_free(s_argv_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        troupe_free(a->v[i]);
    troupe_free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

/* The first lines of compiler output as one line ("a | b | c"), into buf (truncated). */
static void s_first_lines(const char *out, char *buf, size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    int lines = 0;
    for (const char *p = out; *p && lines < S_MSG_LINES && sb.len < cap;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        while (len > 0 && isspace((unsigned char)p[len - 1]))
            len--;
        if (len > 0) {
            if (lines++ > 0)
                troupe__strbuf_puts(&sb, " | ");
            troupe__strbuf_putn(&sb, p, len);
        }
        if (!eol)
            break;
        p = eol + 1;
    }
    if (lines == 0)
        troupe__strbuf_puts(&sb, "(no output)");
}

/* The compile deadline in seconds from TROUPE_CC_TIMEOUT_S (a positive number, at most a day;
 * unset or empty: S_CC_TIMEOUT_DEFAULT_S). Read at each compile. */
static troupe_status_t s_cc_timeout_s(double *out_s)
{
    const char *v = getenv("TROUPE_CC_TIMEOUT_S");
    *out_s = S_CC_TIMEOUT_DEFAULT_S;
    if (!v || !*v)
        return TROUPE_OK;
    char *end = NULL;
    errno = 0;
    double d = strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !isfinite(d) || d <= 0 || d > 86400)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "TROUPE_CC_TIMEOUT_S='%.40s' is not a number of seconds in (0, 86400]",
                             v);
    *out_s = d;
    return TROUPE_OK;
}

/* An unsigned integer knob from the environment in [lo, hi] (unset or empty: def). */
static troupe_status_t s_env_size(const char *var, size_t def, size_t lo, size_t hi,
                                  size_t *out)
{
    const char *v = getenv(var);
    *out = def;
    if (!v || !*v)
        return TROUPE_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || v[0] == '-' || x < lo || x > hi)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s='%.40s' is not an integer in [%zu, %zu]", var, v, lo, hi);
    *out = (size_t)x;
    return TROUPE_OK;
}

/* TROUPE_CC_SPLIT_BYTES: a source longer than this is compiled as several units (0: never). */
static troupe_status_t s_cc_split_bytes(size_t *out)
{
    return s_env_size("TROUPE_CC_SPLIT_BYTES", S_CC_SPLIT_BYTES_DEFAULT, 0, (size_t)1 << 40, out);
}

/* TROUPE_CC_JOBS: compiler runs at once for a split source (default: the online CPUs). */
static troupe_status_t s_cc_jobs(size_t *out)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return s_env_size("TROUPE_CC_JOBS", cpus > 0 ? (size_t)cpus : 1, 1, 1024, out);
}

/* Kills a compile's process group: its watcher (the leader), the compiler driver and what it
 * started (cc1, as, ld). */
static void s_kill_group(pid_t pid)
{
    (void)kill(-pid, SIGKILL);
    (void)kill(pid, SIGKILL);
}

/* Sanitizer runtimes take their own locks around fork() (their interceptor); _Fork bypasses
 * it. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define S_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define S_SANITIZED 1
#endif
#endif
#ifndef S_SANITIZED
#define S_SANITIZED 0
#endif

/* fork without the atfork handlers of the libraries loaded (OpenBLAS's stop its threads, MPI's
 * warn): the child only calls async-signal-safe functions. */
static pid_t s_fork(void)
{
#if !S_SANITIZED && defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 34)
    return _Fork();
#else
    return fork();
#endif
#else
    return fork();
#endif
}

/* Closes every descriptor from `lowest` up (close_range, else one by one). */
static void s_close_from(int lowest)
{
#if defined(SYS_close_range)
    if (syscall(SYS_close_range, (unsigned)lowest, ~0U, 0) == 0)
        return;
#endif
    struct rlimit rl;
    long top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                   ? (long)rl.rlim_cur
                   : 65536;
    if (top > 65536)
        top = 65536;
    for (long fd = lowest; fd < top; fd++)
        (void)close((int)fd);
}

/* The watcher: the child the library forks for each compiler run. It leads the compile's
 * process group, runs the compiler `path` as its child with stdin /dev/null and stdout and
 * stderr on `out_w`, and exits with the compiler's status (128+signal when a signal ended
 * it). `life_r` is the read end of a pipe whose write end only the library's process holds:
 * when that process ends, however it ends, the pipe reports EOF and the watcher kills its
 * whole group, so no compiler outlives the process that started it. Async-signal-safe calls
 * only (the library's process may have threads). */
static void s_watcher(const char *path, char *const *argv, int out_w, int life_r)
{
    if (setpgid(0, 0) != 0)
        _exit(127); /* without a group of its own, killing "its group" would hit the caller's */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaction(sig, &dfl, NULL); /* a parent's SIGCHLD ignored would eat the status */
    sigset_t none;
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    int lr = fcntl(life_r, F_DUPFD, 10), ow = fcntl(out_w, F_DUPFD, 10);
    int dn = open("/dev/null", O_RDONLY);
    if (lr < 0 || ow < 0 || dn < 0 || dup2(dn, 0) < 0 || dup2(ow, 1) < 0 || dup2(ow, 2) < 0 ||
        dup2(lr, 3) < 0)
        _exit(127);
    s_close_from(4);
    pid_t c = s_fork();
    if (c == 0) {
        (void)close(3);
        execv(path, argv);
        static const char msg[] = "troupe: cannot execute the C compiler\n";
        (void)!write(2, msg, sizeof msg - 1);
        _exit(127);
    }
    if (c < 0)
        _exit(127);
    int pfd = -1;
#if defined(SYS_pidfd_open)
    pfd = (int)syscall(SYS_pidfd_open, c, 0);
#endif
    for (;;) {
        struct pollfd f[2] = {{.fd = 3, .events = POLLIN}, {.fd = pfd, .events = POLLIN}};
        int r = poll(f, pfd >= 0 ? 2 : 1, pfd >= 0 ? -1 : 20);
        if (r > 0 && f[0].revents != 0)
            (void)kill(-getpid(), SIGKILL); /* the library's process is gone: so is the group */
        int ws = 0;
        pid_t w = waitpid(c, &ws, WNOHANG);
        if (w == c)
            _exit(WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 127);
        if (w < 0 && errno != EINTR)
            _exit(127);
    }
}

/* argv[0] looked up as execvp would (a name without '/' in PATH): a new string, or NULL with
 * errno set (ENOENT when not found, EACCES when found but not executable, ENOMEM). */
static char *s_find_program(const char *name)
{
    if (strchr(name, '/'))
        return access(name, X_OK) == 0 ? troupe_strdup(name) : NULL;
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    int err = ENOENT;
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        char *cand = n == 0 ? troupe_strdup_printf("./%s", name)
                            : troupe_strdup_printf("%.*s/%s", (int)n, p, name);
        if (!cand) {
            errno = ENOMEM;
            return NULL;
        }
        struct stat sb;
        if (stat(cand, &sb) == 0 && S_ISREG(sb.st_mode)) {
            if (access(cand, X_OK) == 0)
                return cand;
            err = EACCES;
        }
        troupe_free(cand);
        if (!colon)
            break;
        p = colon + 1;
    }
    errno = err;
    return NULL;
}

/* One compiler run: argv, what it builds (for messages), its output and exit status. */
typedef struct s_job {
    char **argv;      /* borrowed */
    const char *path; /* argv[0] resolved (borrowed) */
    pid_t pid;        /* the watcher (the group's leader); -1 before the start and once reaped */
    int out_fd;       /* read end of its output, -1 once closed */
    int life_fd;      /* write end of the watcher's life pipe, -1 once closed */
    char *out;        /* S_OUTPUT_MAX bytes, NUL-terminated */
    size_t kept;
    int exit_code; /* exit status, or 128+signal */
    bool started, done;
} s_job_t;

static void s_job_close(s_job_t *j)
{
    if (j->out_fd >= 0)
        close(j->out_fd);
    if (j->life_fd >= 0)
        close(j->life_fd);
    j->out_fd = j->life_fd = -1;
}

/* Starts job j under a watcher (s_watcher). */
static troupe_status_t s_job_start(s_job_t *j)
{
    char eb[160];
    int out[2] = {-1, -1}, life[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(life, O_CLOEXEC) != 0) {
        int e = errno;
        for (int k = 0; k < 2; k++) {
            if (out[k] >= 0)
                close(out[k]);
            if (life[k] >= 0)
                close(life[k]);
        }
        return troupe__error(TROUPE_DEVICE_ERROR, "cannot run C compiler '%s': pipe (%s)",
                             j->argv[0], s_errstr(e, eb, sizeof eb));
    }
    pid_t pid = s_fork();
    if (pid == 0)
        s_watcher(j->path, j->argv, out[1], life[0]); /* does not return */
    int e = errno;
    close(out[1]);
    close(life[0]);
    if (pid < 0) {
        close(out[0]);
        close(life[1]);
        return troupe__error(TROUPE_DEVICE_ERROR, "cannot run C compiler '%s': fork (%s)",
                             j->argv[0], s_errstr(e, eb, sizeof eb));
    }
    (void)setpgid(pid, pid); /* also here, so that a kill right away finds the group */
    j->pid = pid;
    j->out_fd = out[0];
    j->life_fd = life[1];
    j->started = true;
    return TROUPE_OK;
}

/* Reads what job j's output has (EOF closes it). */
static void s_job_read(s_job_t *j)
{
    char chunk[4096];
    ssize_t r = read(j->out_fd, chunk, sizeof chunk);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (r <= 0) {
        close(j->out_fd);
        j->out_fd = -1;
        return;
    }
    size_t take = (size_t)r;
    if (take > S_OUTPUT_MAX - 1 - j->kept)
        take = S_OUTPUT_MAX - 1 - j->kept;
    memcpy(j->out + j->kept, chunk, take);
    j->kept += take;
    j->out[j->kept] = '\0';
}

/* Reaps job j (blocking when `block`); true once reaped. */
static bool s_job_reap(s_job_t *j, bool block)
{
    int ws = 0;
    pid_t w;
    do
        w = waitpid(j->pid, &ws, block ? 0 : WNOHANG);
    while (w < 0 && errno == EINTR);
    if (w == 0)
        return false;
    if (w < 0)
        j->exit_code = -1;
    else if (WIFEXITED(ws))
        j->exit_code = WEXITSTATUS(ws);
    else if (WIFSIGNALED(ws))
        j->exit_code = 128 + WTERMSIG(ws);
    else
        j->exit_code = -1;
    j->pid = -1;
    j->done = true;
    s_job_close(j);
    return true;
}

/* Runs the n jobs, at most `parallel` at once, in order of index; stops starting jobs after
 * one fails (exit status not 0: *failed is its index, else n) and kills those still running.
 * When they have not all ended by deadline_ns, the running ones' process groups are killed and
 * *timed_out set (not an error here: the caller names the command); *failed is then the first
 * job still running. A job that was never started keeps done false. */
static troupe_status_t s_run_jobs(s_job_t *jobs, size_t n, size_t parallel, int64_t deadline_ns,
                                  bool *timed_out, size_t *failed)
{
    troupe_status_t st = TROUPE_OK;
    *timed_out = false;
    *failed = n;
    size_t next = 0, running = 0;
    bool stop = false;
    struct pollfd *pfd = troupe_calloc(n ? n : 1, sizeof *pfd);
    size_t *who = troupe_calloc(n ? n : 1, sizeof *who);
    if (!pfd || !who) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compiling: out of memory");
        goto out_arrays;
    }
    for (;;) {
        while (!stop && running < parallel && next < n) {
            if ((st = s_job_start(&jobs[next])) != TROUPE_OK) {
                stop = true;
                break;
            }
            next++;
            running++;
        }
        if (running == 0)
            break;
        int64_t left_ns = troupe_deadline_remaining(deadline_ns);
        if (left_ns <= 0) {
            *timed_out = true;
            break;
        }
        nfds_t np = 0;
        for (size_t i = 0; i < next; i++)
            if (jobs[i].out_fd >= 0) {
                pfd[np] = (struct pollfd){.fd = jobs[i].out_fd, .events = POLLIN};
                who[np++] = i;
            }
        int ms = left_ns / 1000000 > 1000 ? 1000 : (int)(left_ns / 1000000) + 1;
        if (np == 0 && ms > 10)
            ms = 10; /* output closed, the watcher not yet reaped */
        int pr = poll(pfd, np, ms);
        if (pr < 0 && errno != EINTR) {
            char eb[160];
            st = troupe__error(TROUPE_DEVICE_ERROR, "waiting for C compiler '%s' failed (%s)",
                               jobs[0].argv[0], s_errstr(errno, eb, sizeof eb));
            break;
        }
        for (nfds_t k = 0; pr > 0 && k < np; k++)
            if (pfd[k].revents != 0)
                s_job_read(&jobs[who[k]]);
        for (size_t i = 0; i < next; i++) {
            s_job_t *j = &jobs[i];
            if (!j->started || j->done || j->out_fd >= 0 || !s_job_reap(j, false))
                continue;
            running--;
            if (j->exit_code != 0 && !stop) {
                stop = true;
                *failed = i;
            }
        }
        if (stop && st == TROUPE_OK) /* one failed: the others' work is wasted */
            for (size_t i = 0; i < next; i++)
                if (jobs[i].started && !jobs[i].done)
                    s_kill_group(jobs[i].pid);
    }
    for (size_t i = 0; i < next; i++) { /* a deadline or an error: end and reap the rest */
        s_job_t *j = &jobs[i];
        if (!j->started || j->done)
            continue;
        if (*timed_out && *failed == n)
            *failed = i;
        pid_t pid = j->pid;
        s_kill_group(pid);
        (void)s_job_reap(j, true);
        s_kill_group(pid); /* what the compiler left running in its group */
    }
out_arrays:
    troupe_free(who);
    troupe_free(pfd);
    return st;
}

/* "cc flags ... src" of job j, into buf (truncated). */
static const char *s_command_line(const s_job_t *j, char *buf, size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    for (size_t i = 0; j->argv[i]; i++) {
        if (i > 0)
            troupe__strbuf_putc(&sb, ' ');
        troupe__strbuf_puts(&sb, j->argv[i]);
    }
    return buf;
}

/* Compiles into so_path with the configured compiler: one unit (nsrc == 1) as
 * `cc flags -o so src -lm`; several as an object each, `cc flags -c -o obj_k src_k`, at most
 * `parallel` at once, then `cc flags -o so obj_1 .. obj_n -lm`. One deadline for it all. */
static troupe_status_t s_compile(const char *name, const char *cc, const char *flags,
                                 char *const *src_paths, char *const *obj_paths, size_t nsrc,
                                 size_t parallel, const char *so_path)
{
    troupe_status_t st = TROUPE_OK;
    size_t njobs = nsrc == 1 ? 1 : nsrc + 1; /* the units, then the link */
    s_argv_t *a = troupe_calloc(njobs, sizeof *a);
    s_job_t *jobs = troupe_calloc(njobs, sizeof *jobs);
    char *path = NULL;
    if (!a || !jobs) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compiling %s: out of memory", name);
        goto out_jobs;
    }
    bool ok = true;
    for (size_t k = 0; k < njobs && ok; k++) {
        ok = s_argv_split(&a[k], cc) && s_argv_split(&a[k], flags);
        if (nsrc == 1)
            ok = ok && s_argv_push(&a[k], "-o", 2) && s_argv_push(&a[k], so_path, strlen(so_path)) &&
                 s_argv_push(&a[k], src_paths[0], strlen(src_paths[0])) &&
                 s_argv_push(&a[k], "-lm", 3);
        else if (k < nsrc)
            ok = ok && s_argv_push(&a[k], "-c", 2) && s_argv_push(&a[k], "-o", 2) &&
                 s_argv_push(&a[k], obj_paths[k], strlen(obj_paths[k])) &&
                 s_argv_push(&a[k], src_paths[k], strlen(src_paths[k]));
        else {
            ok = ok && s_argv_push(&a[k], "-o", 2) && s_argv_push(&a[k], so_path, strlen(so_path));
            for (size_t u = 0; u < nsrc && ok; u++)
                ok = s_argv_push(&a[k], obj_paths[u], strlen(obj_paths[u]));
            ok = ok && s_argv_push(&a[k], "-lm", 3);
        }
    }
    if (!ok) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compiling %s: out of memory", name);
        goto out_jobs;
    }
    if (a[0].n < 5) { /* at least one word of CC, then "-o", out, src, -lm */
        st = troupe__error(TROUPE_DEVICE_ERROR, "C compiler command is empty; set CC");
        goto out_jobs;
    }
    path = s_find_program(a[0].v[0]);
    if (!path) {
        char eb[160];
        int e = errno;
        if (e == ENOENT)
            st = troupe__error(TROUPE_DEVICE_ERROR,
                               "C compiler '%s' not found (%s); set CC or troupe_config_set_cc",
                               a[0].v[0], s_errstr(e, eb, sizeof eb));
        else
            st = troupe__error(TROUPE_DEVICE_ERROR, "cannot run C compiler '%s' (%s)", a[0].v[0],
                               s_errstr(e, eb, sizeof eb));
        goto out_jobs;
    }
    for (size_t k = 0; k < njobs; k++) {
        jobs[k] = (s_job_t){.argv = a[k].v, .path = path, .pid = -1, .out_fd = -1, .life_fd = -1};
        jobs[k].out = troupe_malloc(S_OUTPUT_MAX);
        if (!jobs[k].out) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compiling %s: out of memory", name);
            goto out_jobs;
        }
        jobs[k].out[0] = '\0';
    }
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
               "compiling %s: %s %s -o %s %s%s -lm (%zu unit%s, %zu at once)", name, cc, flags,
               so_path, src_paths[0], nsrc > 1 ? " ..." : "", nsrc, nsrc > 1 ? "s" : "",
               parallel);
    double timeout_s = 0;
    if ((st = s_cc_timeout_s(&timeout_s)) != TROUPE_OK)
        goto out_jobs;
    bool timed_out = false;
    size_t failed = njobs;
    int64_t deadline = troupe_now_ns() + (int64_t)(timeout_s * 1e9);
    /* the units first, then (all built) the link */
    size_t nfirst = nsrc == 1 ? 1 : nsrc;
    st = s_run_jobs(jobs, nfirst, parallel, deadline, &timed_out, &failed);
    if (st == TROUPE_OK && !timed_out && failed == nfirst && njobs > nfirst) {
        size_t lf = 1;
        st = s_run_jobs(jobs + nfirst, 1, 1, deadline, &timed_out, &lf);
        failed = lf == 1 ? njobs : nfirst;
    }
    if (st != TROUPE_OK)
        goto out_jobs;
    char cmd[1024];
    if (timed_out) {
        st = troupe__error(TROUPE_DEVICE_ERROR,
                           "C compiler did not finish within %g s compiling %s and was killed (its "
                           "process group); check the compiler or raise TROUPE_CC_TIMEOUT_S; "
                           "command: %s",
                           timeout_s, name,
                           s_command_line(&jobs[failed < njobs ? failed : 0], cmd, sizeof cmd));
        goto out_jobs;
    }
    if (failed < njobs) {
        const s_job_t *j = &jobs[failed];
        char first[S_MSG_BYTES];
        s_first_lines(j->out, first, sizeof first);
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES, "C compiler output for %s:\n%s", name,
                   j->out);
        st = troupe__error(TROUPE_DEVICE_ERROR,
                           "C compiler '%s' failed (exit %d) compiling %s (%s %s): %s", a[0].v[0],
                           j->exit_code, name, failed < nsrc ? "source" : "linking",
                           failed < nsrc ? src_paths[failed] : so_path, first);
        goto out_jobs;
    }
    if (access(so_path, R_OK) != 0)
        st = troupe__error(TROUPE_DEVICE_ERROR,
                           "C compiler '%s' exited 0 but wrote no '%s' compiling %s", a[0].v[0],
                           so_path, name);
out_jobs:
    for (size_t k = 0; jobs && k < njobs; k++)
        troupe_free(jobs[k].out);
    for (size_t k = 0; a && k < njobs; k++)
        s_argv_free(&a[k]);
    troupe_free(path);
    troupe_free(jobs);
    troupe_free(a);
    return st;
}

/* dlopen + dlsym. */
static troupe_status_t s_open(const char *so_path, const char *entry_symbol, void **out_lib,
                              void **out_entry)
{
    void *lib = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        return troupe__error(TROUPE_DEVICE_ERROR, "dlopen '%s' failed: %s", so_path,
                             e ? e : "unknown error");
    }
    dlerror();
    void *sym = dlsym(lib, entry_symbol);
    if (!sym) {
        const char *e = dlerror();
        troupe_status_t st = troupe__error(TROUPE_DEVICE_ERROR, "dlsym '%s' in '%s' failed: %s",
                                           entry_symbol, so_path, e ? e : "symbol is NULL");
        dlclose(lib);
        return st;
    }
    *out_lib = lib;
    *out_entry = sym;
    return TROUPE_OK;
}

/* Hash of the host CPU's identity (first processor of /proc/cpuinfo: vendor, family, model,
 * feature flags), so objects built with `-march=native` in a cache directory shared between
 * different machines (an NFS home on a cluster) are never loaded on a CPU lacking their
 * instructions. 0 where /proc/cpuinfo cannot be read. */
static pthread_once_t s_cpu_once = PTHREAD_ONCE_INIT;
static uint64_t s_cpu_hash;

static void s_cpu_fingerprint(void)
{
    static const char *const keys[] = {
        "vendor_id", "cpu family", "model",           "model name",       "stepping",
        "flags",     "Features",   "CPU implementer", "CPU architecture", "CPU variant",
        "CPU part",  "isa",        "uarch",           "cpu model"};
    FILE *f = fopen("/proc/cpuinfo", "re");
    if (!f)
        return;
    uint64_t h = TROUPE__FNV64_INIT;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '\n')
            break; /* end of the first processor's block */
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            size_t n = strlen(keys[k]);
            if (strncmp(line, keys[k], n) == 0 &&
                (line[n] == '\t' || line[n] == ' ' || line[n] == ':')) {
                h = troupe__fnv1a64(h, line, strlen(line));
                break;
            }
        }
    }
    fclose(f);
    s_cpu_hash = h;
}

static bool s_is_ident(const char *s)
{
    if (!s || !(isalpha((unsigned char)*s) || *s == '_'))
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_'))
            return false;
    return true;
}

/* Takes the key's compile lock, `lock_path` (flock, exclusive), so that processes and threads
 * loading the same routine at once compile it once: the others wait, then find it cached.
 * Every rank of a run compiles the same routines, and a large one can take a compiler several
 * GB, so compiling it R times at once can exhaust the node.
 * Returns the locked descriptor, or -1 when there is no lock to take (the file cannot be
 * opened: the compile goes ahead unlocked) or the wait passed the compile deadline plus
 * S_LOCK_GRACE_S (the holder is stuck: logged, and the compile goes ahead unlocked). The lock
 * is the kernel's: a holder that dies releases it. */
static int s_lock_key(const char *name, const char *lock_path)
{
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                   "compile %s: no compile lock (%s: errno %d); compiling unlocked", name,
                   lock_path, errno);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return fd;
    double timeout_s = S_CC_TIMEOUT_DEFAULT_S;
    if (s_cc_timeout_s(&timeout_s) != TROUPE_OK)
        timeout_s = S_CC_TIMEOUT_DEFAULT_S; /* the compile itself reports the bad value */
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
               "compile %s: waiting for another process compiling the same routine (%s)", name,
               lock_path);
    int64_t deadline = troupe_now_ns() + (int64_t)((timeout_s + S_LOCK_GRACE_S) * 1e9);
    while (troupe_now_ns() < deadline) {
        nanosleep(&(struct timespec){.tv_nsec = S_LOCK_POLL_NS}, NULL);
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return fd;
        if (errno != EWOULDBLOCK && errno != EINTR)
            break;
    }
    TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_DEVICES,
               "compile %s: the compile lock %s is still held after %.0f s; compiling unlocked",
               name, lock_path, timeout_s + S_LOCK_GRACE_S);
    close(fd);
    return -1;
}

/* Frees n strings and the array, and NULLs it. */
static void s_free_paths(char ***v, size_t n)
{
    if (!*v)
        return;
    for (size_t i = 0; i < n; i++)
        troupe_free((*v)[i]);
    troupe_free(*v);
    *v = NULL;
}

/* Writes the units of a split compile as `<name>-<hash>.u<k>.c` (through a temporary name, as
 * the whole source) and names their objects `<name>-<hash>.tmp<pid>-<seq>.u<k>.o`. */
static troupe_status_t s_write_units(const char *name, const char *dir, int name_len, uint64_t h,
                                     unsigned long long seq, char *const *units, size_t n,
                                     char ***out_c, char ***out_o)
{
    troupe_status_t st = TROUPE_OK;
    char **c = troupe_calloc(n, sizeof *c), **o = troupe_calloc(n, sizeof *o);
    *out_c = c;
    *out_o = o;
    if (!c || !o)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compile %s: out of memory", name);
    for (size_t k = 0; k < n && st == TROUPE_OK; k++) {
        char *tmp = troupe_strdup_printf("%s/%.*s-%016llx.tmp%ld-%llu.u%zu.c", dir, name_len, name,
                                         (unsigned long long)h, (long)getpid(), seq, k);
        c[k] = troupe_strdup_printf("%s/%.*s-%016llx.u%zu.c", dir, name_len, name,
                                    (unsigned long long)h, k);
        o[k] = troupe_strdup_printf("%s/%.*s-%016llx.tmp%ld-%llu.u%zu.o", dir, name_len, name,
                                    (unsigned long long)h, (long)getpid(), seq, k);
        if (!tmp || !c[k] || !o[k])
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compile %s: out of memory", name);
        else if ((st = troupe__cache_write_new(tmp, units[k], strlen(units[k]))) == TROUPE_OK &&
                 rename(tmp, c[k]) != 0) {
            troupe_free(c[k]); /* compile it under the temporary name (removed after) */
            c[k] = tmp;
            tmp = NULL;
        }
        troupe_free(tmp);
    }
    return st;
}

troupe_status_t troupe__cc_load(const char *name, const char *source, const char *entry_symbol,
                                troupe__cc_split_fn split, void *split_ctx, void **out_lib,
                                void **out_entry)
{
    if (!s_is_ident(name))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "compile: procedure name '%s' is not a C identifier",
                             name ? name : "(null)");
    if (!source || !*source || !s_is_ident(entry_symbol) || !out_lib || !out_entry)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "compile %s: empty source, bad entry symbol or NULL output", name);
    *out_lib = NULL;
    *out_entry = NULL;

    troupe_status_t st = TROUPE_OK;
    int64_t t_trace = troupe__trace_on() ? troupe_now_ns() : 0;
    const char *how = "miss"; /* for the trace */
    char *cc = troupe_strdup(troupe_config_cc());
    char *flags = troupe_strdup(troupe_config_cc_flags());
    char *dir = troupe_strdup(troupe_config_cache_dir());
    char *so_path = NULL, *c_path = NULL, *tmp_c = NULL, *tmp_so = NULL, *lock_path = NULL;
    char **units = NULL, **unit_c = NULL, **unit_o = NULL;
    size_t nunits = 0;
    int lock_fd = -1;
    if (!cc || !flags || !dir) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compile %s: out of memory", name);
        goto out_strings;
    }

    static const char s_version[] = "troupe " TROUPE_VERSION_STRING;
    uint64_t h = troupe__fnv1a64(TROUPE__FNV64_INIT, s_version, sizeof s_version);
    h = troupe__fnv1a64(h, cc, strlen(cc) + 1);
    h = troupe__fnv1a64(h, flags, strlen(flags) + 1);
    h = troupe__fnv1a64(h, entry_symbol, strlen(entry_symbol) + 1);
    h = troupe__fnv1a64(h, source, strlen(source));
    if (strstr(cc, "native") || strstr(flags, "native")) {
        pthread_once(&s_cpu_once, s_cpu_fingerprint);
        h = troupe__fnv1a64(h, &s_cpu_hash, sizeof s_cpu_hash);
    }

    int name_len = (int)strnlen(name, S_NAME_MAX);
    so_path =
        troupe_strdup_printf("%s/%.*s-%016llx.so", dir, name_len, name, (unsigned long long)h);
    c_path = troupe_strdup_printf("%s/%.*s-%016llx.c", dir, name_len, name, (unsigned long long)h);
    if (!so_path || !c_path) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compile %s: out of memory", name);
        goto out_strings;
    }

    if (access(so_path, R_OK) == 0) {
        st = s_open(so_path, entry_symbol, out_lib, out_entry);
        if (st == TROUPE_OK) {
            TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES, "compile %s: cache hit (%s)", name,
                       so_path);
            how = "hit";
            goto out_strings;
        }
        /* An unusable cached object (foreign, damaged): rebuild it over the old one. */
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                   "cached object unusable (%s); recompiling %s", troupe_last_error(), name);
        st = TROUPE_OK;
    }

    st = troupe__cache_mkdir_p(dir);
    if (st != TROUPE_OK)
        goto out_strings;
    lock_path =
        troupe_strdup_printf("%s/%.*s-%016llx.lock", dir, name_len, name, (unsigned long long)h);
    if (!lock_path) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compile %s: out of memory", name);
        goto out_strings;
    }
    lock_fd = s_lock_key(name, lock_path);
    /* Another process or thread may have compiled it while this one waited. */
    if (access(so_path, R_OK) == 0 &&
        s_open(so_path, entry_symbol, out_lib, out_entry) == TROUPE_OK) {
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
                   "compile %s: compiled meanwhile by another process (%s)", name, so_path);
        how = "hit";
        goto out_strings;
    }
    unsigned long long seq = (unsigned long long)atomic_fetch_add(&s_tmp_seq, 1);
    tmp_c = troupe_strdup_printf("%s/%.*s-%016llx.tmp%ld-%llu.c", dir, name_len, name,
                                 (unsigned long long)h, (long)getpid(), seq);
    tmp_so = troupe_strdup_printf("%s/%.*s-%016llx.tmp%ld-%llu.so", dir, name_len, name,
                                  (unsigned long long)h, (long)getpid(), seq);
    if (!tmp_c || !tmp_so) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compile %s: out of memory", name);
        goto out_strings;
    }
    size_t split_bytes = 0, parallel = 1;
    if ((st = s_cc_split_bytes(&split_bytes)) != TROUPE_OK ||
        (st = s_cc_jobs(&parallel)) != TROUPE_OK)
        goto out_strings;
    size_t source_len = strlen(source);
    if (split != NULL && split_bytes > 0 && source_len > split_bytes &&
        (st = split(split_ctx, split_bytes, &units, &nunits)) != TROUPE_OK)
        goto out_strings;
    st = troupe__cache_write_new(tmp_c, source, source_len);
    if (st != TROUPE_OK)
        goto out_strings;
    /* The source goes under its stable name first (for inspection, and so diagnostics name
     * it): a concurrent writer of the same name writes the same bytes. */
    int64_t t0 = troupe_now_ns();
    bool stable = rename(tmp_c, c_path) == 0;
    if (nunits > 1) {
        st = s_write_units(name, dir, name_len, h, seq, units, nunits, &unit_c, &unit_o);
        if (st == TROUPE_OK)
            st = s_compile(name, cc, flags, unit_c, unit_o, nunits, parallel, tmp_so);
        for (size_t k = 0; unit_c && k < nunits; k++) {
            if (unit_o[k])
                unlink(unit_o[k]);
            if (unit_c[k] && st == TROUPE_OK)
                unlink(unit_c[k]); /* kept after a failure: the message names them */
        }
        if (!stable)
            unlink(tmp_c);
    } else {
        char *one = stable ? c_path : tmp_c;
        st = s_compile(name, cc, flags, &one, NULL, 1, 1, tmp_so);
        if (!stable)
            unlink(tmp_c);
    }
    if (st != TROUPE_OK) {
        unlink(tmp_so);
        goto out_strings;
    }
    if (rename(tmp_so, so_path) != 0) {
        char eb[160];
        st = troupe__error(TROUPE_DEVICE_ERROR, "cannot move '%s' to '%s' (%s)", tmp_so, so_path,
                           s_errstr(errno, eb, sizeof eb));
        unlink(tmp_so);
        goto out_strings;
    }
    st = s_open(so_path, entry_symbol, out_lib, out_entry);
    if (st == TROUPE_OK)
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_DEVICES,
                   "compile %s: cache miss, compiled by %s in %.3f s (%zu unit%s) (%s)", name, cc,
                   (double)(troupe_now_ns() - t0) * 1e-9, nunits > 1 ? nunits : 1,
                   nunits > 1 ? "s" : "", so_path);

out_strings:
    s_free_paths(&unit_c, nunits);
    s_free_paths(&unit_o, nunits);
    s_free_paths(&units, nunits);
    if (lock_fd >= 0)
        close(lock_fd); /* releases the lock */
    if (t_trace != 0) {
        troupe__trace_arg_t a[] = {TROUPE__TRACE_STR("cache", how),
                                   TROUPE__TRACE_STR("status", troupe_status_str(st))};
        troupe__trace_emit(TROUPE__TRACK_THREAD, "compile", name, t_trace, troupe_now_ns(), a, 2);
    }
    troupe_free(lock_path);
    troupe_free(tmp_so);
    troupe_free(tmp_c);
    troupe_free(c_path);
    troupe_free(so_path);
    troupe_free(dir);
    troupe_free(flags);
    troupe_free(cc);
    return st;
}

void troupe__cc_unload(void *lib)
{
    if (lib)
        dlclose(lib);
}
