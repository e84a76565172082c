/* troupe — checkpoints of the data-parallel driver (parallel/dp.h).
 *
 * File format, version 2 (integers little-endian, arrays in the host's layout of the
 * precision, which troupe's hosts — x86-64, aarch64 — store little-endian):
 *   "TROUPECK"                       8 bytes of magic
 *   u32 version                      2 (version 1 has no note; both load)
 *   i64 steps                        steps done when saved
 *   u32 optimizer kind               troupe_optimizer_kind_t
 *   u32 nstate                       optimizer state arrays per parameter (0, 1 or 2)
 *   u32 n_params
 *   u32 note length, note bytes      the checkpoint note (version 2 only; may be empty)
 *   per parameter, in the model's order:
 *     u32 label length, label bytes  (troupe_tnode_label_string, no terminator)
 *     u32 precision                  troupe_prec_t
 *     u32 ndims, i64 dims[ndims]
 *     u32 state precision
 *     values                         num_elems elements of the precision
 *     state                          nstate arrays of num_elems elements of the state precision
 *   u32 CRC-32 (zlib crc32) of every byte before it.
 * Writes are atomic: "<path>.tmp.<pid>" is written, fsynced and renamed over path, then the
 * directory is fsynced. Before that, temporaries of path that a process of this machine which
 * no longer runs left behind (a crash between create and rename) are removed. A load validates
 * the whole file against the model before changing anything.
 */
#define _GNU_SOURCE /* strerror_r returning the text */
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/fault_impl.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "transport/mpi/cluster.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define S_MAGIC "TROUPECK"
#define S_VERSION 2u
#define S_MAX_LABEL 4096u

/* The text of errno value `err` in char buf[] (strerror_r: the library's threads share
 * strerror's buffer). */
#define S_ERRSTR(err, buf) strerror_r((err), (buf), sizeof(buf))

/* ---- writing: bytes through base/strbuf.h (an allocation failure is reported once, at the
 * end) ----------------------------------------------------------------------------------------- */

static void s_put(troupe__strbuf_t *b, const void *src, size_t n)
{
    troupe__strbuf_putn(b, src, n);
}

static void s_put_u32(troupe__strbuf_t *b, uint32_t v)
{
    unsigned char x[4];
    for (int i = 0; i < 4; i++)
        x[i] = (unsigned char)(v >> (8 * i));
    s_put(b, x, 4);
}

static void s_put_i64(troupe__strbuf_t *b, int64_t v)
{
    unsigned char x[8];
    uint64_t u = (uint64_t)v;
    for (int i = 0; i < 8; i++)
        x[i] = (unsigned char)(u >> (8 * i));
    s_put(b, x, 8);
}

/* ---- a bounded reader ----------------------------------------------------------------------- */

typedef struct s_rd {
    const unsigned char *p;
    size_t len, pos;
    bool short_read;
} s_rd_t;

static const unsigned char *s_take(s_rd_t *r, size_t n)
{
    if (r->short_read || n > r->len - r->pos) {
        r->short_read = true;
        return NULL;
    }
    const unsigned char *q = r->p + r->pos;
    r->pos += n;
    return q;
}

static uint32_t s_get_u32(s_rd_t *r)
{
    const unsigned char *q = s_take(r, 4);
    uint32_t v = 0;
    for (int i = 0; q && i < 4; i++)
        v |= (uint32_t)q[i] << (8 * i);
    return v;
}

static int64_t s_get_i64(s_rd_t *r)
{
    const unsigned char *q = s_take(r, 8);
    uint64_t v = 0;
    for (int i = 0; q && i < 8; i++)
        v |= (uint64_t)q[i] << (8 * i);
    return (int64_t)v;
}

static uint32_t s_crc(const unsigned char *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt chunk = n > (size_t)UINT_MAX ? UINT_MAX : (uInt)n;
        c = crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)c;
}

/* ---- save ----------------------------------------------------------------------------------- */

static troupe_status_t s_os_error(int err, const char *what, const char *path)
{
    troupe_status_t st = TROUPE_FAILED_PRECONDITION;
    if (err == ENOENT || err == ENOTDIR)
        st = TROUPE_NOT_FOUND;
    else if (err == ENOSPC || err == EDQUOT || err == ENOMEM || err == EFBIG || err == EMFILE ||
             err == ENFILE)
        st = TROUPE_RESOURCE_EXHAUSTED;
    char es[128];
    return troupe__error(st, "dp_save: %s '%s': %s", what, path, S_ERRSTR(err, es));
}

/* Copies node tn of the owner stream into its host array and returns the array. */
static troupe_status_t s_fetch(troupe_dp_t *dp, troupe_tnode_t *tn, void **out)
{
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_to_host(troupe__dp_tail(dp, 0), tn, &ev));
    TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(&ev, "dp_save: reading the owner stream"));
    return troupe_tnode_host_array(tn, out);
}

static troupe_status_t s_serialize(troupe_dp_t *dp, troupe__strbuf_t *b)
{
    s_put(b, S_MAGIC, 8);
    s_put_u32(b, S_VERSION);
    s_put_i64(b, dp->steps);
    s_put_u32(b, (uint32_t)dp->opt.kind);
    s_put_u32(b, (uint32_t)dp->nstate);
    s_put_u32(b, (uint32_t)dp->n_params);
    size_t note_len = dp->ckpt_note ? strlen(dp->ckpt_note) : 0;
    s_put_u32(b, (uint32_t)note_len);
    s_put(b, dp->ckpt_note, note_len);
    for (size_t i = 0; i < dp->n_params; i++) {
        troupe_tnode_t *p = dp->params[i];
        char label[S_MAX_LABEL];
        size_t ll = troupe_tnode_label_string(p, label, sizeof label);
        if (ll >= sizeof label)
            ll = sizeof label - 1;
        s_put_u32(b, (uint32_t)ll);
        s_put(b, label, ll);
        s_put_u32(b, (uint32_t)p->prec);
        s_put_u32(b, (uint32_t)p->ndims);
        for (int a = 0; a < p->ndims; a++)
            s_put_i64(b, p->dims[a]);
        s_put_u32(b, (uint32_t)troupe__dp_state_prec(p->prec));
        void *host = NULL;
        TROUPE_RETURN_IF_ERROR(s_fetch(dp, p, &host));
        s_put(b, host, p->size_bytes);
        for (int s = 0; s < dp->nstate; s++) {
            troupe_tnode_t *st = dp->state[i * (size_t)dp->nstate + (size_t)s];
            TROUPE_RETURN_IF_ERROR(s_fetch(dp, st, &host));
            s_put(b, host, st->size_bytes);
        }
    }
    s_put_u32(b, s_crc((const unsigned char *)troupe__strbuf_cstr(b), b->len));
    return TROUPE_OK; /* an allocation failure: troupe__strbuf_finish reports it */
}

/* The directory part of path ("." when none, "/" for a file in the root), troupe_free'd by
 * the caller; NULL when out of memory. */
static char *s_dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return troupe_strdup(".");
    if (slash == path)
        return troupe_strdup("/");
    return troupe_strdup_printf("%.*s", (int)(slash - path), path);
}

/* Removes "<path>.tmp.<pid>" files left by processes that no longer run on this machine (a
 * save that crashed between create and rename). Best effort: what cannot be listed or removed
 * stays, and a pid that runs (or that this process cannot signal) keeps its file. */
static void s_remove_stale_temporaries(const char *path)
{
    char *dir = s_dir_of(path);
    if (!dir)
        return;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".tmp.", 5) != 0)
            continue;
        const char *digits = name + bl + 5;
        char *end = NULL;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (errno || end == digits || *end || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* running, or not ours to know */
        char *stale = troupe_strdup_printf("%s/%s", dir, name);
        if (stale && unlink(stale) == 0)
            TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL,
                       "dp_save: removed %s, left by process %ld, which no longer runs", stale,
                       pid);
        troupe_free(stale);
    }
    if (d)
        closedir(d);
    troupe_free(dir);
}

static troupe_status_t s_write_atomic(const char *path, const char *p, size_t n)
{
    s_remove_stale_temporaries(path);
    char *tmp = troupe_strdup_printf("%s.tmp.%ld", path, (long)getpid());
    if (!tmp)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_save: out of memory");
    troupe_status_t st = TROUPE_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = s_os_error(errno, "cannot create", tmp);
        goto out_free;
    }
    size_t done = 0, limit = n;
    bool crash = troupe__fault_armed(TROUPE__FAULT_CKPT) && troupe__fault_ckpt(tmp, &limit);
    while (done < limit) {
        ssize_t w = write(fd, p + done, limit - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            st = s_os_error(errno, "cannot write", tmp);
            goto out_close;
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0) {
        st = s_os_error(errno, "cannot fsync", tmp);
        goto out_close;
    }
    if (crash) { /* an injected crash half-way: the temporary stays, nothing is renamed */
        close(fd);
        st = troupe__fault_ckpt_crash(tmp);
        goto out_free;
    }
out_close:
    if (close(fd) != 0 && st == TROUPE_OK)
        st = s_os_error(errno, "cannot close", tmp);
    if (st == TROUPE_OK && rename(tmp, path) != 0)
        st = s_os_error(errno, "cannot rename the temporary file over", path);
    if (st != TROUPE_OK) {
        unlink(tmp);
        goto out_free;
    }
    /* make the rename durable: fsync the directory */
    {
        char *dir = s_dir_of(path);
        if (dir) {
            int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd >= 0) {
                char es[128];
                if (fsync(dfd) != 0)
                    TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_PARALLEL,
                               "dp_save: fsync of the directory of '%s': %s", path,
                               S_ERRSTR(errno, es));
                close(dfd);
            }
            troupe_free(dir);
        }
    }
out_free:
    troupe_free(tmp);
    return st;
}

troupe_status_t troupe_dp_save(troupe_dp_t *dp, const char *path)
{
    if (!dp || !path || !*path)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_save: NULL dp or empty path");
    TROUPE_RETURN_IF_ERROR(troupe_dp_sync(dp));
    if (dp->rank != 0)
        return TROUPE_OK; /* only rank 0 writes (every rank holds the same parameters) */
    troupe__strbuf_t b = TROUPE__STRBUF_INIT;
    char *bytes = NULL;
    size_t n = 0;
    troupe_status_t st = s_serialize(dp, &b);
    if (st == TROUPE_OK)
        st = troupe__strbuf_finish(&b, "dp_save", &bytes, &n);
    troupe__strbuf_reset(&b);
    if (st == TROUPE_OK)
        st = s_write_atomic(path, bytes, n);
    troupe_free(bytes);
    if (st == TROUPE_OK)
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL, "dp: saved step %lld to %s",
                   (long long)dp->steps, path);
    return st;
}

/* ---- load ----------------------------------------------------------------------------------- */

typedef struct s_entry {
    const unsigned char *values; /* in the parameter's precision */
    const unsigned char *state;  /* nstate arrays in the state precision */
} s_entry_t;

static troupe_status_t s_bad(const char *path, const char *fmt, ...) TROUPE_PRINTF(2, 3);
static troupe_status_t s_bad(const char *path, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_load: checkpoint '%s': %s", path, msg);
}

static troupe_status_t s_read_file(const char *path, unsigned char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char es[128];
    if (fd < 0) {
        int err = errno;
        return troupe__error(err == ENOENT || err == ENOTDIR ? TROUPE_NOT_FOUND
                                                             : TROUPE_FAILED_PRECONDITION,
                             "dp_load: cannot open '%s': %s", path, S_ERRSTR(err, es));
    }
    troupe_status_t st = TROUPE_OK;
    struct stat sb;
    unsigned char *p = NULL;
    if (fstat(fd, &sb) != 0) {
        st = troupe__error(TROUPE_FAILED_PRECONDITION, "dp_load: cannot stat '%s': %s", path,
                           S_ERRSTR(errno, es));
        goto out_close;
    }
    size_t n = (size_t)sb.st_size;
    p = troupe_malloc(n ? n : 1);
    if (!p) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                           "dp_load: out of memory reading '%s' (%zu "
                           "bytes)",
                           path, n);
        goto out_close;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, p + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = troupe__error(TROUPE_FAILED_PRECONDITION, "dp_load: cannot read '%s': %s", path,
                               S_ERRSTR(errno, es));
            goto out_close;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    *out = p;
    *out_len = done;
    p = NULL;
out_close:
    troupe_free(p);
    close(fd);
    return st;
}

/* A checkpoint note inside the file's image. */
typedef struct s_note {
    const unsigned char *p;
    size_t len;
} s_note_t;

/* Parses and validates the image against the model; fills entries[n_params], *out_steps and
 * *out_note (pointing into img; empty for a version 1 file). */
static troupe_status_t s_validate(troupe_dp_t *dp, const char *path, const unsigned char *img,
                                  size_t len, s_entry_t *entries, int64_t *out_steps,
                                  s_note_t *out_note)
{
    size_t m = len < 8 ? len : 8;
    if (memcmp(img, S_MAGIC, m) != 0)
        return s_bad(path, "bad magic (not a troupe checkpoint: it must start with \"%s\")",
                     S_MAGIC);
    s_rd_t r = {img, len, 0, false};
    (void)s_take(&r, 8);
    uint32_t version = s_get_u32(&r);
    if (!r.short_read && (version < 1 || version > S_VERSION))
        return s_bad(path, "unsupported format version %u (this build reads versions 1 to %u)",
                     version, S_VERSION);
    int64_t steps = s_get_i64(&r);
    uint32_t kind = s_get_u32(&r);
    uint32_t nstate = s_get_u32(&r);
    uint32_t np = s_get_u32(&r);
    uint32_t note_len = 0;
    const unsigned char *note = NULL;
    if (version >= 2) {
        note_len = s_get_u32(&r);
        if (!r.short_read && note_len > TROUPE_DP_NOTE_MAX)
            return s_bad(path, "note length %u exceeds %u (corrupt file)", note_len,
                         TROUPE_DP_NOTE_MAX);
        note = s_take(&r, note_len);
    }
    if (r.short_read)
        goto truncated;
    if (nstate > 2)
        return s_bad(path, "invalid optimizer state count %u (corrupt file)", nstate);
    /* structure first (sizes come from the file), then the CRC, then the model */
    struct {
        const unsigned char *label;
        uint32_t label_len, prec, ndims, sprec;
        int64_t dims[TROUPE_MAX_DIMS];
    } *meta = NULL;
    if (np > 0 && np == dp->n_params) {
        meta = troupe_calloc(np, sizeof *meta);
        if (!meta)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_load: out of memory");
    }
    troupe_status_t st = TROUPE_OK;
    for (uint32_t i = 0; i < np && st == TROUPE_OK; i++) {
        uint32_t ll = s_get_u32(&r);
        if (!r.short_read && ll > S_MAX_LABEL) {
            st = s_bad(path, "parameter %u: label length %u exceeds %u (corrupt file)", i, ll,
                       S_MAX_LABEL);
            break;
        }
        const unsigned char *label = s_take(&r, ll);
        uint32_t prec = s_get_u32(&r);
        uint32_t ndims = s_get_u32(&r);
        if (r.short_read)
            break;
        if (!troupe_prec_is_valid((troupe_prec_t)prec) || prec == TROUPE_PREC_VOID ||
            ndims > TROUPE_MAX_DIMS) {
            st = s_bad(path, "parameter %u: invalid precision %u or ndims %u (corrupt file)", i,
                       prec, ndims);
            break;
        }
        int64_t dims[TROUPE_MAX_DIMS];
        uint64_t count = 1;
        bool overflow = false;
        for (uint32_t a = 0; a < ndims; a++) {
            dims[a] = s_get_i64(&r);
            if (dims[a] <= 0 || (uint64_t)dims[a] > (uint64_t)len ||
                count > (uint64_t)len / (uint64_t)dims[a])
                overflow = true;
            else
                count *= (uint64_t)dims[a];
        }
        uint32_t sprec = s_get_u32(&r);
        if (r.short_read)
            break;
        if (overflow || !troupe_prec_is_valid((troupe_prec_t)sprec) || sprec == TROUPE_PREC_VOID) {
            st = s_bad(path, "parameter %u: invalid dims or state precision (corrupt file)", i);
            break;
        }
        uint64_t vbytes = count * troupe_prec_size_bytes((troupe_prec_t)prec);
        uint64_t sbytes = count * troupe_prec_size_bytes((troupe_prec_t)sprec) * nstate;
        if (vbytes > len || sbytes > len) {
            r.short_read = true;
            break;
        }
        const unsigned char *values = s_take(&r, (size_t)vbytes);
        const unsigned char *state = s_take(&r, (size_t)sbytes);
        if (r.short_read)
            break;
        if (meta) {
            meta[i].label = label;
            meta[i].label_len = ll;
            meta[i].prec = prec;
            meta[i].ndims = ndims;
            meta[i].sprec = sprec;
            memcpy(meta[i].dims, dims, ndims * sizeof *dims);
            entries[i].values = values;
            entries[i].state = state;
        }
    }
    if (st != TROUPE_OK)
        goto out_free;
    size_t body = r.pos;
    uint32_t stored = s_get_u32(&r);
    if (r.short_read) {
        troupe_free(meta);
        goto truncated;
    }
    uint32_t computed = s_crc(img, body);
    if (stored != computed) {
        st = s_bad(path, "CRC mismatch (stored 0x%08x, computed 0x%08x): the file is corrupt",
                   stored, computed);
        goto out_free;
    }
    if (r.pos != len) {
        st = s_bad(path, "%zu trailing bytes after the CRC", len - r.pos);
        goto out_free;
    }
    /* the model */
    if (kind != (uint32_t)dp->opt.kind) {
        st = s_bad(path, "optimizer %s in the file but %s in the model",
                   troupe_optimizer_name((troupe_optimizer_kind_t)kind),
                   troupe_optimizer_name(dp->opt.kind));
        goto out_free;
    }
    if (nstate != (uint32_t)dp->nstate) {
        st = s_bad(path, "%u optimizer state arrays per parameter in the file but %d in the model",
                   nstate, dp->nstate);
        goto out_free;
    }
    if (np != dp->n_params) {
        st = s_bad(path, "%u parameters in the file but %zu in the model", np, dp->n_params);
        goto out_free;
    }
    if (steps < 0) {
        st = s_bad(path, "negative step count %lld", (long long)steps);
        goto out_free;
    }
    for (uint32_t i = 0; i < np; i++) {
        troupe_tnode_t *p = dp->params[i];
        char label[S_MAX_LABEL], name[64];
        size_t ll = troupe_tnode_label_string(p, label, sizeof label);
        troupe_tnode_debug_name(p, name, sizeof name);
        if (ll != meta[i].label_len || memcmp(label, meta[i].label, ll) != 0) {
            st = s_bad(path,
                       "parameter %u is labelled '%.*s' in the file but '%s' (%s) in the "
                       "model",
                       i, (int)meta[i].label_len, (const char *)meta[i].label, label, name);
            goto out_free;
        }
        if (meta[i].prec != (uint32_t)p->prec) {
            st = s_bad(path, "parameter %u (%s) has precision %s in the file but %s in the model",
                       i, name, troupe_prec_name((troupe_prec_t)meta[i].prec),
                       troupe_prec_name(p->prec));
            goto out_free;
        }
        bool same = meta[i].ndims == (uint32_t)p->ndims;
        for (int a = 0; same && a < p->ndims; a++)
            same = meta[i].dims[a] == p->dims[a];
        if (!same) {
            char fd[128] = "", md[64];
            size_t u = 0;
            for (uint32_t a = 0; a < meta[i].ndims && u < sizeof fd; a++)
                u += (size_t)snprintf(fd + u, sizeof fd - u, "%s%lld", a ? "x" : "",
                                      (long long)meta[i].dims[a]);
            if (meta[i].ndims == 0)
                snprintf(fd, sizeof fd, "1");
            troupe_tnode_dims_to_string(p, false, md, sizeof md);
            st = s_bad(path, "parameter %u (%s) has dims %s in the file but %s in the model", i,
                       name, fd, md);
            goto out_free;
        }
        if (meta[i].sprec != (uint32_t)troupe__dp_state_prec(p->prec)) {
            st = s_bad(path,
                       "parameter %u (%s): optimizer state precision %s in the file but %s "
                       "in the model",
                       i, name, troupe_prec_name((troupe_prec_t)meta[i].sprec),
                       troupe_prec_name(troupe__dp_state_prec(p->prec)));
            goto out_free;
        }
    }
    *out_steps = steps;
    out_note->p = note;
    out_note->len = note_len;
out_free:
    troupe_free(meta);
    return st;
truncated:
    return s_bad(path, "truncated: %zu bytes end inside the %s", len,
                 r.pos < 32 ? "header" : "parameter data");
}

/* node := `src` (elements of the node's precision), through set_values (the host write path). */
static troupe_status_t s_set_raw(troupe_tnode_t *tn, const unsigned char *src, double *tmp)
{
    size_t n = (size_t)troupe_tnode_num_elems(tn);
    size_t es = troupe_prec_size_bytes(tn->prec);
    for (size_t e = 0; e < n; e++)
        tmp[e] = troupe_prec_load_double(tn->prec, src + e * es);
    return troupe_tnode_set_values(tn, tmp, n);
}

troupe_status_t troupe_dp_load(troupe_dp_t *dp, const char *path)
{
    if (!dp || !path || !*path)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_load: NULL dp or empty path");
    unsigned char *img = NULL;
    size_t len = 0;
    TROUPE_RETURN_IF_ERROR(s_read_file(path, &img, &len));
    troupe_status_t st = TROUPE_OK;
    double *tmp = NULL;
    s_entry_t *entries = troupe_calloc(dp->n_params, sizeof *entries);
    int64_t steps = 0;
    s_note_t note = {NULL, 0};
    char *note_copy = NULL;
    if (!entries) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_load: out of memory");
        goto out_free;
    }
    st = s_validate(dp, path, img, len, entries, &steps, &note);
    if (st != TROUPE_OK)
        goto out_free;
    if (note.len > 0) {
        note_copy = troupe_strdup_printf("%.*s", (int)note.len, (const char *)note.p);
        if (!note_copy) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_load: out of memory");
            goto out_free;
        }
    }
    st = troupe_dp_sync(dp);
    if (st != TROUPE_OK)
        goto out_free;
    size_t maxn = 1;
    for (size_t i = 0; i < dp->n_params; i++)
        if ((size_t)troupe_tnode_num_elems(dp->params[i]) > maxn)
            maxn = (size_t)troupe_tnode_num_elems(dp->params[i]);
    tmp = troupe_malloc(maxn * sizeof *tmp);
    if (!tmp) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_load: out of memory");
        goto out_free;
    }
    /* validated: from here on the checkpoint replaces the state */
    for (size_t i = 0; i < dp->n_params && st == TROUPE_OK; i++) {
        troupe_tnode_t *p = dp->params[i];
        st = s_set_raw(p, entries[i].values, tmp);
        for (int k = 0; k < dp->n && st == TROUPE_OK; k++)
            st = troupe_from_host(troupe__dp_tail(dp, k), p, NULL);
        const unsigned char *src = entries[i].state;
        for (int s = 0; s < dp->nstate && st == TROUPE_OK; s++) {
            troupe_tnode_t *sn = dp->state[i * (size_t)dp->nstate + (size_t)s];
            st = s_set_raw(sn, src, tmp);
            src += sn->size_bytes;
            if (st == TROUPE_OK)
                st = troupe_from_host(troupe__dp_tail(dp, 0), sn, NULL);
        }
    }
    if (st == TROUPE_OK) {
        dp->steps = steps;
        troupe_free(dp->ckpt_note);
        dp->ckpt_note = note_copy;
        note_copy = NULL;
        st = troupe__dp_await(dp, "dp_load");
    }
    if (st == TROUPE_OK)
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL, "dp: loaded step %lld from %s",
                   (long long)steps, path);
out_free:
    troupe_free(note_copy);
    troupe_free(tmp);
    troupe_free(entries);
    troupe_free(img);
    return st;
}

troupe_status_t troupe_dp_set_checkpoint_note(troupe_dp_t *dp, const char *note)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_set_checkpoint_note: NULL dp");
    size_t n = note ? strlen(note) : 0;
    if (n > TROUPE_DP_NOTE_MAX)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_set_checkpoint_note: %zu bytes exceed TROUPE_DP_NOTE_MAX (%d)", n,
                             TROUPE_DP_NOTE_MAX);
    char *copy = NULL;
    if (n > 0 && !(copy = troupe_strdup(note)))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_set_checkpoint_note: out of memory");
    troupe_free(dp->ckpt_note);
    dp->ckpt_note = copy;
    return TROUPE_OK;
}

const char *troupe_dp_checkpoint_note(const troupe_dp_t *dp)
{
    return dp ? dp->ckpt_note : NULL;
}
