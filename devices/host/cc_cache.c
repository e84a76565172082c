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
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
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

/* Kills the compiler's process group (the compiler driver and what it started: cc1, as, ld). */
static void s_kill_group(pid_t pid)
{
    (void)kill(-pid, SIGKILL);
    (void)kill(pid, SIGKILL);
}

/* Runs argv (argv[0] looked up in PATH) in a process group of its own, with stdin from
 * /dev/null and stdout+stderr captured into out (S_OUTPUT_MAX bytes kept). *exit_code: exit
 * status, or 128+signal. When it has not exited by deadline_ns (troupe_now_ns() clock), its
 * process group is killed and *timed_out set (not an error here: the caller names the command). */
static troupe_status_t s_run_capture(char *const *argv, char *out, int *exit_code,
                                     int64_t deadline_ns, bool *timed_out)
{
    char eb[160];
    troupe_status_t st = TROUPE_OK;
    int fds[2];
    out[0] = '\0';
    *timed_out = false;
    if (pipe2(fds, O_CLOEXEC) != 0)
        return troupe__error(TROUPE_DEVICE_ERROR, "cannot run C compiler '%s': pipe (%s)", argv[0],
                             s_errstr(errno, eb, sizeof eb));
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int e = posix_spawn_file_actions_init(&fa);
    if (e != 0) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cannot run C compiler '%s': %s", argv[0],
                           s_errstr(e, eb, sizeof eb));
        goto out_pipe;
    }
    e = posix_spawnattr_init(&attr);
    if (e != 0) {
        posix_spawn_file_actions_destroy(&fa);
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cannot run C compiler '%s': %s", argv[0],
                           s_errstr(e, eb, sizeof eb));
        goto out_pipe;
    }
    /* its own process group, so that a deadline kills what the compiler driver started too */
    e = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    if (e == 0)
        e = posix_spawnattr_setpgroup(&attr, 0);
    if (e == 0)
        e = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (e == 0)
        e = posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    if (e == 0)
        e = posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    pid_t pid = -1;
    if (e == 0)
        e = posix_spawnp(&pid, argv[0], &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (e != 0) {
        if (e == ENOENT)
            st = troupe__error(TROUPE_DEVICE_ERROR,
                               "C compiler '%s' not found (%s); set CC or troupe_config_set_cc",
                               argv[0], s_errstr(e, eb, sizeof eb));
        else
            st = troupe__error(TROUPE_DEVICE_ERROR, "cannot run C compiler '%s' (%s)", argv[0],
                               s_errstr(e, eb, sizeof eb));
        goto out_pipe;
    }
    close(fds[1]);
    fds[1] = -1;

    size_t kept = 0;
    char chunk[4096];
    for (;;) {
        int64_t left_ns = troupe_deadline_remaining(deadline_ns);
        if (left_ns <= 0) {
            *timed_out = true;
            break;
        }
        int ms = left_ns / 1000000 > 1000 ? 1000 : (int)(left_ns / 1000000) + 1;
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&pfd, 1, ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0)
            continue;
        if (pr < 0)
            break;
        ssize_t r = read(fds[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        size_t take = (size_t)r;
        if (take > S_OUTPUT_MAX - 1 - kept)
            take = S_OUTPUT_MAX - 1 - kept;
        memcpy(out + kept, chunk, take);
        kept += take;
        out[kept] = '\0';
    }
    int wstatus = 0;
    pid_t w;
    for (;;) {
        if (*timed_out)
            s_kill_group(pid);
        w = waitpid(pid, &wstatus, *timed_out ? 0 : WNOHANG);
        if (w < 0 && errno == EINTR)
            continue;
        if (w != 0)
            break;
        /* output closed but the compiler still runs: wait for it, up to the deadline */
        if (troupe_deadline_remaining(deadline_ns) <= 0)
            *timed_out = true;
        else
            (void)poll(NULL, 0, 10);
    }
    if (w < 0) {
        st = troupe__error(TROUPE_DEVICE_ERROR, "waiting for C compiler '%s' failed (%s)", argv[0],
                           s_errstr(errno, eb, sizeof eb));
        goto out_pipe;
    }
    if (*timed_out)
        s_kill_group(pid); /* what the compiler left running in its group */
    if (WIFEXITED(wstatus))
        *exit_code = WEXITSTATUS(wstatus);
    else if (WIFSIGNALED(wstatus))
        *exit_code = 128 + WTERMSIG(wstatus);
    else
        *exit_code = -1;
out_pipe:
    close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    return st;
}

/* Compiles src_path into so_path with the configured compiler. */
static troupe_status_t s_compile(const char *name, const char *cc, const char *flags,
                                 const char *src_path, const char *so_path)
{
    troupe_status_t st = TROUPE_OK;
    s_argv_t a = {0};
    char *out = NULL;
    if (!s_argv_split(&a, cc) || !s_argv_split(&a, flags) || !s_argv_push(&a, "-o", 2) ||
        !s_argv_push(&a, so_path, strlen(so_path)) ||
        !s_argv_push(&a, src_path, strlen(src_path)) || !s_argv_push(&a, "-lm", 3)) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compiling %s: out of memory", name);
        goto out_argv;
    }
    if (a.n < 5) { /* at least one word of CC, then "-o", out, src, -lm */
        st = troupe__error(TROUPE_DEVICE_ERROR, "C compiler command is empty; set CC");
        goto out_argv;
    }
    out = troupe_malloc(S_OUTPUT_MAX);
    if (!out) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compiling %s: out of memory", name);
        goto out_argv;
    }
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES, "compiling %s: %s %s -o %s %s -lm", name, cc,
               flags, so_path, src_path);
    double timeout_s = 0;
    st = s_cc_timeout_s(&timeout_s);
    if (st != TROUPE_OK)
        goto out_buf;
    int code = -1;
    bool timed_out = false;
    int64_t t0 = troupe_now_ns();
    st = s_run_capture(a.v, out, &code, t0 + (int64_t)(timeout_s * 1e9), &timed_out);
    if (st != TROUPE_OK)
        goto out_buf;
    if (timed_out) {
        st = troupe__error(TROUPE_DEVICE_ERROR,
                           "C compiler did not finish within %g s compiling %s and was killed (its "
                           "process group); check the compiler or raise TROUPE_CC_TIMEOUT_S; "
                           "command: %s %s -o %s %s -lm",
                           timeout_s, name, cc, flags, so_path, src_path);
        goto out_buf;
    }
    if (code != 0) {
        char first[S_MSG_BYTES];
        s_first_lines(out, first, sizeof first);
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES, "C compiler output for %s:\n%s", name,
                   out);
        st = troupe__error(TROUPE_DEVICE_ERROR,
                           "C compiler '%s' failed (exit %d) compiling %s (source %s): %s", a.v[0],
                           code, name, src_path, first);
        goto out_buf;
    }
    if (access(so_path, R_OK) != 0)
        st = troupe__error(TROUPE_DEVICE_ERROR,
                           "C compiler '%s' exited 0 but wrote no '%s' compiling %s", a.v[0],
                           so_path, name);
out_buf:
    troupe_free(out);
out_argv:
    s_argv_free(&a);
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

troupe_status_t troupe__cc_load(const char *name, const char *source, const char *entry_symbol,
                                void **out_lib, void **out_entry)
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
    st = troupe__cache_write_new(tmp_c, source, strlen(source));
    if (st != TROUPE_OK)
        goto out_strings;
    /* The source goes under its stable name first (for inspection, and so diagnostics name
     * it): a concurrent writer of the same name writes the same bytes. */
    int64_t t0 = troupe_now_ns();
    if (rename(tmp_c, c_path) == 0) {
        st = s_compile(name, cc, flags, c_path, tmp_so);
    } else {
        st = s_compile(name, cc, flags, tmp_c, tmp_so);
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
                   "compile %s: cache miss, compiled by %s in %.3f s (%s)", name, cc,
                   (double)(troupe_now_ns() - t0) * 1e-9, so_path);

out_strings:
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
