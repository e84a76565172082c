/* troupe — the job directory, the job file and the CURVE key file (see job_impl.h). */
#define _GNU_SOURCE
#include "transport/zmq/job_impl.h"

#include "base/alloc.h"
#include "base/file_impl.h"
#include "base/strbuf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_JOB_FILE "job"
#define S_KEY_FILE "curve.key"
#define S_MAGIC_LINE "troupe-status-job 1"
#define S_MAX_FILE_BYTES (64u << 20)

/* ---- directories ------------------------------------------------------------------------- */

/* Makes `path` a directory only this user may enter, or checks that it is one. */
static troupe_status_t s_private_dir(const char *path, bool create)
{
    if (create && mkdir(path, 0700) != 0 && errno != EEXIST)
        return troupe__error(TROUPE_UNAVAILABLE, "status: cannot create %s: %s", path,
                             strerror(errno));
    struct stat st;
    if (lstat(path, &st) != 0)
        return troupe__error(create ? TROUPE_UNAVAILABLE : TROUPE_NOT_FOUND, "status: %s: %s",
                             path, strerror(errno));
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0)
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "status: %s is not a directory of this user's that only this user "
                             "may enter (mode %03o, owner %ld): remove it, or set "
                             "XDG_RUNTIME_DIR to a private directory",
                             path, (unsigned)(st.st_mode & 0777), (long)st.st_uid);
    return TROUPE_OK;
}

troupe_status_t troupe__status_base_dir(char *out, size_t cap, bool create)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (xdg != NULL && xdg[0] == '/')
        n = snprintf(out, cap, "%s/troupe", xdg);
    else
        n = snprintf(out, cap, "/tmp/troupe-%ld", (long)geteuid());
    if (n < 0 || (size_t)n >= cap)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "status: base directory path too long");
    return s_private_dir(out, create);
}

troupe_status_t troupe__status_job_dir(const char *job, char *out, size_t cap, bool create)
{
    char base[TROUPE__STATUS_PATH_MAX];
    TROUPE_RETURN_IF_ERROR(troupe__status_base_dir(base, sizeof base, create));
    int n = snprintf(out, cap, "%s/%s", base, job);
    if (n < 0 || (size_t)n >= cap)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "status: job directory path too long");
    return s_private_dir(out, create);
}

void troupe__status_sanitize_id(const char *raw, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = raw; p != NULL && *p != '\0' && n + 1 < cap; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        out[n++] = ok ? c : '_';
    }
    if (n == 0 || (n <= 2 && out[0] == '.')) /* never "", "." or ".." */
        n = (size_t)snprintf(out, cap, "job");
    out[n < cap ? n : cap - 1] = '\0';
}

/* ---- parsing ----------------------------------------------------------------------------- */

/* The next space-separated token of line[*pos..len) into tok (cap bytes); false when there is
 * none or it does not fit. */
static bool s_token(const char *line, size_t len, size_t *pos, char *tok, size_t cap)
{
    size_t i = *pos;
    while (i < len && line[i] == ' ')
        i++;
    size_t start = i;
    while (i < len && line[i] != ' ')
        i++;
    size_t n = i - start;
    *pos = i;
    if (n == 0 || n >= cap)
        return false;
    memcpy(tok, line + start, n);
    tok[n] = '\0';
    return true;
}

static bool s_rest_empty(const char *line, size_t len, size_t pos)
{
    while (pos < len && line[pos] == ' ')
        pos++;
    return pos == len;
}

static bool s_parse_int(const char *tok, long min, long max, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(tok, &end, 10);
    if (errno != 0 || end == tok || *end != '\0' || v < min || v > max)
        return false;
    *out = (int)v;
    return true;
}

static bool s_printable(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
            return false;
    return true;
}

/* One "rank" record. */
static troupe_status_t s_rank_line(troupe__status_job_t *job, const char *line, size_t len,
                                   size_t pos, unsigned char *seen, int lineno)
{
    char w[4][TROUPE__STATUS_ENDPOINT_MAX + 1];
    int rank = -1, pid = 0;
    if (!s_token(line, len, &pos, w[0], sizeof w[0]) || !s_parse_int(w[0], 0, job->size - 1, &rank))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "job file line %d: bad rank (size %d)",
                             lineno, job->size);
    for (int k = 0; k < 3; k++) {
        char key[16];
        if (!s_token(line, len, &pos, key, sizeof key) ||
            !s_token(line, len, &pos, w[k + 1], sizeof w[k + 1]))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "job file line %d: rank %d: expected pid, host and endpoint",
                                 lineno, rank);
        static const char *const keys[3] = {"pid", "host", "endpoint"};
        if (strcmp(key, keys[k]) != 0)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "job file line %d: rank %d: expected '%s', got '%s'", lineno,
                                 rank, keys[k], key);
    }
    if (!s_rest_empty(line, len, pos) || !s_parse_int(w[1], 1, 1L << 30, &pid) ||
        strlen(w[2]) > TROUPE__STATUS_HOST_MAX || !s_printable(w[2]) || !s_printable(w[3]) ||
        (strncmp(w[3], "ipc://", 6) != 0 && strncmp(w[3], "tcp://", 6) != 0 &&
         strcmp(w[3], "none") != 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "job file line %d: rank %d: bad pid, host or endpoint", lineno, rank);
    if (seen[rank])
        return troupe__error(TROUPE_INVALID_ARGUMENT, "job file line %d: rank %d listed twice",
                             lineno, rank);
    seen[rank] = 1;
    troupe__status_rank_info_t *ri = &job->ranks[rank];
    ri->pid = pid;
    snprintf(ri->host, sizeof ri->host, "%s", w[2]);
    snprintf(ri->endpoint, sizeof ri->endpoint, "%s", w[3]);
    return TROUPE_OK;
}

/* A header record ("job", "size", "curve"); `have` counts them. */
static troupe_status_t s_head_line(troupe__status_job_t *job, const char *key, const char *line,
                                   size_t len, size_t pos, int lineno, int *have)
{
    char val[TROUPE__STATUS_JOB_MAX + 1];
    if (!s_token(line, len, &pos, val, sizeof val) || !s_rest_empty(line, len, pos))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "job file line %d: bad '%s' value", lineno,
                             key);
    if (strcmp(key, "job") == 0 && (*have & 1) == 0 && s_printable(val)) {
        snprintf(job->id, sizeof job->id, "%s", val);
        *have |= 1;
    } else if (strcmp(key, "size") == 0 && (*have & 2) == 0 &&
               s_parse_int(val, 1, TROUPE__STATUS_MAX_RANKS, &job->size)) {
        *have |= 2;
    } else if (strcmp(key, "curve") == 0 && (*have & 4) == 0 &&
               (strcmp(val, "yes") == 0 || strcmp(val, "no") == 0)) {
        job->curve = val[0] == 'y';
        *have |= 4;
    } else {
        return troupe__error(TROUPE_INVALID_ARGUMENT, "job file line %d: bad or repeated '%s'",
                             lineno, key);
    }
    return TROUPE_OK;
}

troupe_status_t troupe__status_job_parse(const char *text, size_t len, troupe__status_job_t *out)
{
    memset(out, 0, sizeof *out);
    troupe_status_t st = TROUPE_OK;
    unsigned char *seen = NULL;
    int have = 0, lineno = 0, nranks = 0;
    size_t off = 0;
    while (off < len && st == TROUPE_OK) {
        const char *line = text + off;
        const char *nl = memchr(line, '\n', len - off);
        size_t n = nl != NULL ? (size_t)(nl - line) : len - off;
        off += n + (nl != NULL);
        lineno++;
        if (memchr(line, '\0', n) != NULL) {
            st = troupe__error(TROUPE_INVALID_ARGUMENT, "job file line %d: NUL byte", lineno);
            break;
        }
        if (lineno == 1) {
            if (n != strlen(S_MAGIC_LINE) || memcmp(line, S_MAGIC_LINE, n) != 0)
                st = troupe__error(TROUPE_INVALID_ARGUMENT,
                                   "not a troupe job file (first line is not '%s')", S_MAGIC_LINE);
            continue;
        }
        if (n == 0)
            continue;
        size_t pos = 0;
        char key[16];
        if (!s_token(line, n, &pos, key, sizeof key)) {
            st = troupe__error(TROUPE_INVALID_ARGUMENT, "job file line %d: unknown record",
                               lineno);
        } else if (strcmp(key, "rank") == 0) {
            if (have != 7) {
                st = troupe__error(TROUPE_INVALID_ARGUMENT,
                                   "job file line %d: a rank before job, size and curve", lineno);
            } else {
                st = s_rank_line(out, line, n, pos, seen, lineno);
                nranks += st == TROUPE_OK;
            }
        } else {
            st = s_head_line(out, key, line, n, pos, lineno, &have);
            if (st == TROUPE_OK && have == 7 && seen == NULL) {
                seen = troupe_calloc((size_t)out->size, 1);
                out->ranks = troupe_calloc((size_t)out->size, sizeof *out->ranks);
                if (seen == NULL || out->ranks == NULL)
                    st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "job file: out of memory");
            }
        }
    }
    if (st == TROUPE_OK && lineno == 0)
        st = troupe__error(TROUPE_INVALID_ARGUMENT, "empty job file");
    if (st == TROUPE_OK && have != 7)
        st = troupe__error(TROUPE_INVALID_ARGUMENT, "job file: job, size or curve missing");
    if (st == TROUPE_OK && nranks != out->size)
        st = troupe__error(TROUPE_INVALID_ARGUMENT, "job file: %d of %d ranks listed", nranks,
                           out->size);
    troupe_free(seen);
    if (st != TROUPE_OK)
        troupe__status_job_clear(out);
    return st;
}

/* ---- files ------------------------------------------------------------------------------- */

/* Reads path (at most S_MAX_FILE_BYTES) into a NUL-terminated buffer (troupe_free). */
static troupe_status_t s_read_file(const char *path, char **out, size_t *len, struct stat *st)
{
    *out = NULL;
    int fd = -1;
    troupe_status_t rc = troupe__file_open_regular(path, "a troupe status file", S_MAX_FILE_BYTES,
                                                   O_NOFOLLOW, &fd, st);
    if (rc != TROUPE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        return troupe__error(rc == TROUPE_FAILED_PRECONDITION ? TROUPE_UNAVAILABLE : rc,
                             "status: %s", msg);
    }
    char *buf = NULL;
    buf = troupe_malloc((size_t)st->st_size + 1);
    if (buf == NULL) {
        rc = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "status: out of memory");
        goto close_fd;
    }
    size_t n = 0;
    while (n < (size_t)st->st_size) {
        ssize_t k = read(fd, buf + n, (size_t)st->st_size - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
close_fd:
    close(fd);
    return rc;
}

/* Reads the key file: "public <z85>\nsecret <z85>\n". */
static troupe_status_t s_load_key(const char *dir, troupe__status_job_t *job)
{
    char path[TROUPE__STATUS_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/%s", dir, S_KEY_FILE);
    char *text = NULL;
    size_t len = 0;
    struct stat st;
    TROUPE_RETURN_IF_ERROR(s_read_file(path, &text, &len, &st));
    troupe_status_t rc = TROUPE_OK;
    if ((st.st_mode & 077) != 0 || st.st_uid != geteuid()) {
        rc = troupe__error(TROUPE_FAILED_PRECONDITION,
                           "status: %s may be read by others (mode %03o): refusing it", path,
                           (unsigned)(st.st_mode & 0777));
    } else if (sscanf(text, "public %40s secret %40s", job->curve_public, job->curve_secret) != 2 ||
               strlen(job->curve_public) != TROUPE__STATUS_KEY_LEN ||
               strlen(job->curve_secret) != TROUPE__STATUS_KEY_LEN) {
        rc = troupe__error(TROUPE_INVALID_ARGUMENT, "status: %s: not a CURVE key file", path);
    }
    troupe_free(text);
    return rc;
}

troupe_status_t troupe__status_job_load(const char *dir, troupe__status_job_t *out)
{
    memset(out, 0, sizeof *out);
    char path[TROUPE__STATUS_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/%s", dir, S_JOB_FILE);
    char *text = NULL;
    size_t len = 0;
    struct stat st;
    troupe_status_t rc = s_read_file(path, &text, &len, &st);
    if (rc == TROUPE_NOT_FOUND)
        return troupe__error(rc, "status: no job file in %s (the job ended, or has not started "
                                 "its control plane yet)", dir);
    TROUPE_RETURN_IF_ERROR(rc);
    rc = troupe__status_job_parse(text, len, out);
    troupe_free(text);
    if (rc != TROUPE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        return troupe__error(rc, "%s: %s", path, msg);
    }
    snprintf(out->dir, sizeof out->dir, "%s", dir);
    if (out->curve && (rc = s_load_key(dir, out)) != TROUPE_OK)
        troupe__status_job_clear(out);
    return rc;
}

/* Writes `text` to dir/name through dir/.name.tmp (mode 0600) and a rename. */
static troupe_status_t s_write_file(const char *dir, const char *name, const char *text)
{
    char tmp[TROUPE__STATUS_PATH_MAX + 32], path[TROUPE__STATUS_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", dir, name, (long)getpid());
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return troupe__error(TROUPE_UNAVAILABLE, "status: cannot write %s: %s", tmp,
                             strerror(errno));
    size_t len = strlen(text), n = 0;
    while (n < len) {
        ssize_t k = write(fd, text + n, len - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    bool ok = n == len && fchmod(fd, 0600) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return troupe__error(TROUPE_UNAVAILABLE, "status: cannot write %s: %s", path, strerror(e));
    }
    return TROUPE_OK;
}

troupe_status_t troupe__status_job_write(const troupe__status_job_t *job)
{
    troupe__strbuf_t b = TROUPE__STRBUF_INIT;
    troupe__strbuf_printf(&b, "%s\njob %s\nsize %d\ncurve %s\n", S_MAGIC_LINE, job->id, job->size,
                          job->curve ? "yes" : "no");
    for (int r = 0; r < job->size; r++)
        troupe__strbuf_printf(&b, "rank %d pid %d host %s endpoint %s\n", r, job->ranks[r].pid,
                              job->ranks[r].host, job->ranks[r].endpoint);
    char *text = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__strbuf_finish(&b, "job file", &text, NULL));
    troupe_status_t rc = TROUPE_OK;
    if (job->curve) {
        char key[2 * TROUPE__STATUS_KEY_LEN + 32];
        snprintf(key, sizeof key, "public %s\nsecret %s\n", job->curve_public, job->curve_secret);
        rc = s_write_file(job->dir, S_KEY_FILE, key);
    }
    if (rc == TROUPE_OK)
        rc = s_write_file(job->dir, S_JOB_FILE, text);
    troupe_free(text);
    return rc;
}

void troupe__status_job_remove(const char *dir)
{
    char path[TROUPE__STATUS_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/%s", dir, S_JOB_FILE);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s", dir, S_KEY_FILE);
    unlink(path);
    rmdir(dir); /* fails while another rank's socket is still there: that rank removes it */
}

/* ---- stale jobs ------------------------------------------------------------------------- */

bool troupe__status_job_alive(const troupe__status_job_t *job)
{
    char host[256] = "";
    if (gethostname(host, sizeof host) != 0)
        return true;
    for (int r = 0; r < job->size; r++)
        if (strcmp(job->ranks[r].host, host) != 0 ||
            (kill(job->ranks[r].pid, 0) == 0 || errno == EPERM))
            return true;
    return false;
}

/* True when nothing listens on the socket file `path` (its process died without closing). */
static bool s_socket_dead(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        return false;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool dead = connect(fd, (const struct sockaddr *)&sa, sizeof sa) != 0 && errno == ECONNREFUSED;
    close(fd);
    return dead;
}

/* Removes job directory `dir` when what it holds is stale: a job file of processes that all
 * ended on this host, and sockets nobody listens on (a job killed before it could clean up). */
static void s_prune_dir(const char *dir)
{
    troupe__status_job_t job;
    troupe_status_t st = troupe__status_job_load(dir, &job);
    bool alive = st == TROUPE_OK ? troupe__status_job_alive(&job) : st != TROUPE_NOT_FOUND;
    troupe__status_job_clear(&job);
    struct stat sd;
    if (alive || lstat(dir, &sd) != 0 || time(NULL) - sd.st_mtime < 60)
        return; /* a job that is starting has no job file yet */
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char path[TROUPE__STATUS_PATH_MAX + 300];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        int len = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (len < 0 || (size_t)len >= sizeof path)
            continue;
        struct stat se;
        if (lstat(path, &se) == 0 && S_ISSOCK(se.st_mode) && s_socket_dead(path))
            unlink(path);
    }
    closedir(d);
    troupe__status_job_remove(dir);
}

void troupe__status_prune(const char *keep)
{
    char base[TROUPE__STATUS_PATH_MAX];
    if (troupe__status_base_dir(base, sizeof base, false) != TROUPE_OK)
        return;
    DIR *d = opendir(base);
    if (d == NULL)
        return;
    struct dirent *e;
    char dir[TROUPE__STATUS_PATH_MAX + 300];
    for (int n = 0; n < 64 && (e = readdir(d)) != NULL; n++) {
        if (e->d_name[0] == '.' || (keep != NULL && strcmp(e->d_name, keep) == 0))
            continue;
        int len = snprintf(dir, sizeof dir, "%s/%s", base, e->d_name);
        if (len > 0 && (size_t)len < sizeof dir)
            s_prune_dir(dir);
    }
    closedir(d);
    troupe_clear_error();
}

void troupe__status_job_clear(troupe__status_job_t *job)
{
    if (job == NULL)
        return;
    troupe_free(job->ranks);
    memset(job, 0, sizeof *job);
}
