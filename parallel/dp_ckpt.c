/* troupe — checkpoints of the data-parallel driver (parallel/dp.h).
 *
 * File format, version 3 (integers little-endian, reals as the bits of an IEEE double, arrays
 * in the host's layout of the precision, which troupe's hosts — x86-64, aarch64 — store
 * little-endian):
 *   "TROUPECK"                       8 bytes of magic
 *   u32 version                      3, or 4 with loss scaling (1: no note, no run record;
 *                                    2: no run record; all load)
 *   i64 steps                        steps done when saved (AdamW's step count t - 1)
 *   u32 optimizer kind               troupe_optimizer_kind_t
 *   u32 nstate                       optimizer state arrays per parameter (0, 1 or 2)
 *   u32 n_params
 *   u32 note length, note bytes      the checkpoint note (version >= 2; may be empty)
 *   u32 run record length            S_RUN_BYTES (version 3), then the run record:
 *     u32 ranks, u32 streams         the layout that saved (streams: rank 0's)
 *     i64 replicas                   replicas of all ranks (ranks x streams unless they differ)
 *     f64 lr                         the learning rate in effect
 *     i64 global_batch, i64 steps_per_epoch, u64 data_seed, i64 schedule_steps   the plan
 *     i64 epoch, i64 sample_in_epoch the next step's data position (0 without a plan)
 *     version 4 (S_RUN_BYTES_V4, written when loss scaling is on) continues:
 *     f64 loss_scale, i64 good_steps, i64 skipped_steps   loss scaling's state
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
 * no longer runs left behind (a crash between create and rename) are removed. A load parses the
 * whole file (s_parse: structure, sizes, CRC; no model needed: troupe_dp_checkpoint_parse is
 * the same reader) and compares it with the model (s_match) before changing anything.
 */
#define _GNU_SOURCE /* strerror_r returning the text */
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/fault_impl.h"
#include "base/file_impl.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "transport/mpi/cluster.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define S_MAGIC "TROUPECK"
#define S_VERSION 4u
#define S_RUN_BYTES 72u    /* the run record of version 3 */
#define S_RUN_BYTES_V4 96u /* version 4's: loss scaling's state added */
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
    uint64_t need; /* at the first short read: the length the read needed */
    bool in_data;  /* the short read was a parameter's values and state */
} s_rd_t;

/* Records a short read of n bytes at r->pos (the first one only). */
static void s_short(s_rd_t *r, uint64_t n)
{
    if (!r->short_read)
        r->need = n > UINT64_MAX - r->pos ? UINT64_MAX : (uint64_t)r->pos + n;
    r->short_read = true;
}

static const unsigned char *s_take(s_rd_t *r, size_t n)
{
    if (r->short_read || n > r->len - r->pos) {
        s_short(r, n);
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

/* CRC-32 of p[n] continued from c (crc32(0L, Z_NULL, 0) to start). */
static uint32_t s_crc_more(uLong c, const unsigned char *p, size_t n)
{
    while (n > 0) {
        uInt chunk = n > (size_t)UINT_MAX ? UINT_MAX : (uInt)n;
        c = crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)c;
}

static uint32_t s_crc(const unsigned char *p, size_t n)
{
    return s_crc_more(crc32(0L, Z_NULL, 0), p, n);
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

/* full[s]: state array s gathered from the shards (dp->zero), unused otherwise. */
static troupe_status_t s_serialize(troupe_dp_t *dp, troupe__strbuf_t *b, float *const *full)
{
    s_put(b, S_MAGIC, 8);
    s_put_u32(b, dp->ls_on ? 4u : 3u); /* version 4 only where it carries something */
    s_put_i64(b, dp->steps);
    s_put_u32(b, (uint32_t)dp->opt.kind);
    s_put_u32(b, (uint32_t)dp->nstate);
    s_put_u32(b, (uint32_t)dp->n_params);
    size_t note_len = dp->ckpt_note ? strlen(dp->ckpt_note) : 0;
    s_put_u32(b, (uint32_t)note_len);
    s_put(b, dp->ckpt_note, note_len);
    const troupe_dp_plan_t *pl = &dp->plan;
    uint64_t lr_bits = 0;
    memcpy(&lr_bits, &dp->opt.lr, sizeof lr_bits);
    s_put_u32(b, dp->ls_on ? S_RUN_BYTES_V4 : S_RUN_BYTES);
    s_put_u32(b, (uint32_t)dp->nranks);
    s_put_u32(b, (uint32_t)dp->n);
    s_put_i64(b, dp->replicas);
    s_put_i64(b, (int64_t)lr_bits);
    s_put_i64(b, pl->global_batch);
    s_put_i64(b, pl->steps_per_epoch);
    s_put_i64(b, (int64_t)pl->data_seed);
    s_put_i64(b, pl->schedule_steps);
    bool planned = pl->global_batch > 0 && pl->steps_per_epoch > 0;
    s_put_i64(b, planned ? dp->steps / pl->steps_per_epoch : 0);
    s_put_i64(b, planned ? dp->steps % pl->steps_per_epoch * pl->global_batch : 0);
    if (dp->ls_on) {
        uint64_t scale_bits = 0;
        memcpy(&scale_bits, &dp->ls_scale, sizeof scale_bits);
        s_put_i64(b, (int64_t)scale_bits);
        s_put_i64(b, dp->ls_good);
        s_put_i64(b, dp->ls_skipped);
    }
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
            if (dp->zero != NULL) { /* single precision, as the fused update needs */
                s_put(b, full[s] + dp->zero->at[i],
                      (size_t)troupe_tnode_num_elems(p) * sizeof(float));
                continue;
            }
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
    TROUPE_RETURN_IF_ERROR(troupe__dp_loss_scale_settle(dp)); /* the state after the last step */
    /* the optimizer state whole on every rank first (sharded by the fused update) */
    TROUPE_RETURN_IF_ERROR(troupe__dp_unshard(dp));
    /* ZeRO-1's shards gathered in gradient order (collective: every rank) */
    float *full[2] = {NULL, NULL};
    troupe__strbuf_t b = TROUPE__STRBUF_INIT;
    char *bytes = NULL;
    size_t n = 0;
    troupe_status_t st = TROUPE_OK;
    for (int s = 0; dp->zero != NULL && s < dp->nstate && st == TROUPE_OK; s++) {
        full[s] = troupe_malloc((dp->zero->count > 0 ? (size_t)dp->zero->count : 1) * sizeof(float));
        st = full[s] == NULL ? troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_save: out of memory")
                             : troupe__dp_zero_gather(dp, s, full[s]);
    }
    if (st != TROUPE_OK || dp->rank != 0) /* only rank 0 writes (every rank holds the same
                                              parameters) */
        goto out_full;
    st = s_serialize(dp, &b, full);
    if (st == TROUPE_OK)
        st = troupe__strbuf_finish(&b, "dp_save", &bytes, &n);
    troupe__strbuf_reset(&b);
    if (st == TROUPE_OK)
        st = s_write_atomic(path, bytes, n);
    troupe_free(bytes);
    if (st == TROUPE_OK)
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL, "dp: saved step %lld to %s",
                   (long long)dp->steps, path);
out_full:
    troupe_free(full[0]);
    troupe_free(full[1]);
    return st;
}

/* ---- load ----------------------------------------------------------------------------------- */

/* One parameter's entry in a parsed image (pointers into the image). */
typedef struct s_param {
    const unsigned char *label;
    uint32_t label_len, prec, ndims, sprec;
    int64_t dims[TROUPE_MAX_DIMS];
    const unsigned char *values; /* vbytes, in the parameter's precision */
    const unsigned char *state;  /* nstate arrays in the state precision */
    size_t vbytes;
} s_param_t;

/* A parsed image: the info a caller sees, the note and the parameters (borrowed from the
 * image; params owned, troupe_free). */
typedef struct s_image {
    troupe_dp_checkpoint_info_t *info;
    const unsigned char *note;
    uint32_t note_len;
    s_param_t *params; /* info->n_params */
} s_image_t;

/* INVALID_ARGUMENT "<what>: checkpoint '<name>': <message>". */
static troupe_status_t s_bad(const char *what, const char *name, const char *fmt, ...)
    TROUPE_PRINTF(3, 4);
static troupe_status_t s_bad(const char *what, const char *name, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: checkpoint '%s': %s", what, name, msg);
}

static troupe_status_t s_read_file(const char *what, const char *path, unsigned char **out,
                                   size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    char es[128];
    int fd = -1;
    struct stat sb;
    /* a device, FIFO or directory is refused by its kind (a FIFO is not waited on) */
    troupe_status_t st = troupe__file_open_regular(path, "a troupe checkpoint", 0, 0, &fd, &sb);
    if (st != TROUPE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        return troupe__error(st, "%s: %s", what, msg);
    }
    unsigned char *p = NULL;
    size_t n = (size_t)sb.st_size;
    p = troupe_malloc(n ? n : 1);
    if (!p) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory reading '%s' (%zu bytes)",
                           what, path, n);
        goto out_close;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, p + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = troupe__error(TROUPE_FAILED_PRECONDITION, "%s: cannot read '%s': %s", what, path,
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

/* Bytes a parameter entry takes at least (label length, precision, ndims, state precision):
 * bounds the parameter count a file may claim before anything is allocated for it. */
#define S_MIN_PARAM_BYTES 16u
/* Most elements one parameter may claim (2^56: its bytes, times 8 for state, fit in 64 bits). */
#define S_MAX_COUNT (UINT64_C(1) << 56)

/* Reads one parameter's entry (index i) into *e. A short read sets r->short_read and returns
 * OK; an invalid field is INVALID_ARGUMENT. */
static troupe_status_t s_parse_param(const char *what, const char *name, s_rd_t *r, uint32_t i,
                                     uint32_t nstate, s_param_t *e)
{
    uint32_t ll = s_get_u32(r);
    if (!r->short_read && ll > S_MAX_LABEL)
        return s_bad(what, name, "parameter %u: label length %u exceeds %u (corrupt file)", i, ll,
                     S_MAX_LABEL);
    e->label = s_take(r, ll);
    e->label_len = ll;
    e->prec = s_get_u32(r);
    e->ndims = s_get_u32(r);
    if (r->short_read)
        return TROUPE_OK;
    if (!troupe_prec_is_valid((troupe_prec_t)e->prec) || e->prec == TROUPE_PREC_VOID ||
        e->ndims > TROUPE_MAX_DIMS)
        return s_bad(what, name, "parameter %u: invalid precision %u or ndims %u (corrupt file)", i,
                     e->prec, e->ndims);
    /* A parameter larger than the file is a truncated file, not a corrupt one; only a count
     * no file could hold is refused as corrupt. */
    uint64_t count = 1;
    bool overflow = false;
    for (uint32_t a = 0; a < e->ndims; a++) {
        int64_t d = s_get_i64(r);
        e->dims[a] = d;
        if (d <= 0 || (uint64_t)d > S_MAX_COUNT || count > S_MAX_COUNT / (uint64_t)d)
            overflow = true;
        else
            count *= (uint64_t)d;
    }
    e->sprec = s_get_u32(r);
    if (r->short_read)
        return TROUPE_OK;
    if (overflow || !troupe_prec_is_valid((troupe_prec_t)e->sprec) || e->sprec == TROUPE_PREC_VOID)
        return s_bad(what, name, "parameter %u: invalid dims or state precision (corrupt file)", i);
    uint64_t vbytes = count * troupe_prec_size_bytes((troupe_prec_t)e->prec);
    uint64_t sbytes = count * troupe_prec_size_bytes((troupe_prec_t)e->sprec) * nstate;
    if (vbytes + sbytes > r->len - r->pos) {
        s_short(r, vbytes + sbytes);
        r->in_data = true;
        return TROUPE_OK;
    }
    e->values = s_take(r, (size_t)vbytes);
    e->state = s_take(r, (size_t)sbytes);
    e->vbytes = (size_t)vbytes;
    return TROUPE_OK;
}

/* Reads the version 3 or 4 run record into info. */
static troupe_status_t s_parse_run(const char *what, const char *name, s_rd_t *r, uint32_t version,
                                   troupe_dp_checkpoint_info_t *info)
{
    uint32_t run_len = s_get_u32(r);
    if (r->short_read)
        return TROUPE_OK;
    uint32_t want = version >= 4 ? S_RUN_BYTES_V4 : S_RUN_BYTES;
    if (run_len != want)
        return s_bad(what, name, "run record of %u bytes, expected %u (corrupt file)", run_len,
                     want);
    uint32_t ranks = s_get_u32(r), streams = s_get_u32(r);
    info->replicas = s_get_i64(r);
    uint64_t lr_bits = (uint64_t)s_get_i64(r);
    troupe_dp_plan_t *pl = &info->plan;
    pl->global_batch = s_get_i64(r);
    pl->steps_per_epoch = s_get_i64(r);
    pl->data_seed = (uint64_t)s_get_i64(r);
    pl->schedule_steps = s_get_i64(r);
    info->epoch = s_get_i64(r);
    info->sample_in_epoch = s_get_i64(r);
    uint64_t scale_bits = 0;
    if (version >= 4) {
        scale_bits = (uint64_t)s_get_i64(r);
        info->loss_scale_good = s_get_i64(r);
        info->skipped_steps = s_get_i64(r);
    }
    if (r->short_read)
        return TROUPE_OK;
    memcpy(&info->loss_scale, &scale_bits, sizeof info->loss_scale);
    if (version >= 4 && (!(info->loss_scale > 0.0) || !isfinite(info->loss_scale) ||
                         info->loss_scale_good < 0 || info->skipped_steps < 0))
        return s_bad(what, name, "invalid loss scaling state (corrupt file)");
    memcpy(&info->lr, &lr_bits, sizeof info->lr);
    if (ranks < 1 || ranks > (uint32_t)INT_MAX || streams < 1 || streams > (uint32_t)INT_MAX)
        return s_bad(what, name, "invalid layout %u rank(s) x %u stream(s) (corrupt file)", ranks,
                     streams);
    info->ranks = (int)ranks;
    info->streams = (int)streams;
    if (info->replicas < (int64_t)ranks)
        return s_bad(what, name, "invalid replica count %lld for %u rank(s) (corrupt file)",
                     (long long)info->replicas, ranks);
    if (!(info->lr >= 0.0) || !isfinite(info->lr))
        return s_bad(what, name, "invalid learning rate %g (corrupt file)", info->lr);
    if (pl->global_batch < 0 || pl->steps_per_epoch < 0 || pl->schedule_steps < 0 ||
        info->epoch < 0 || info->sample_in_epoch < 0 ||
        (pl->global_batch > 0 && pl->steps_per_epoch == 0))
        return s_bad(what, name, "invalid plan or data position (corrupt file)");
    return TROUPE_OK;
}

typedef enum s_stage { S_AT_HEADER, S_AT_PARAMS, S_AT_CRC } s_stage_t;

/* "truncated: N bytes, expected M": M is exact when the cut is in the CRC or in the last
 * parameter's data, else a lower bound (the sizes of later parameters are in the missing
 * part). r is the reader after its first short read, at parameter at_param of np. */
static troupe_status_t s_truncated(const char *what, const char *name, size_t len, const s_rd_t *r,
                                   s_stage_t stage, uint32_t at_param, uint32_t np)
{
    uint64_t expected = r->need;
    bool exact = stage == S_AT_CRC || (r->in_data && at_param + 1 == np);
    if (stage != S_AT_CRC) {
        uint32_t later = stage == S_AT_HEADER ? np : np - at_param - 1;
        expected += (uint64_t)later * S_MIN_PARAM_BYTES + 4;
    }
    static const char *const where[] = {"header", "parameters", "CRC"};
    return s_bad(what, name, "truncated: %zu bytes, expected %s%" PRIu64 " (it ends in the %s)",
                 len, exact ? "" : "at least ", expected, where[stage]);
}

/* Parses img[len] (structure, sizes, CRC; no model) into *im (im->info zeroed first; on
 * success the caller frees im->params). */
static troupe_status_t s_parse(const char *what, const char *name, const unsigned char *img,
                               size_t len, s_image_t *im)
{
    troupe_dp_checkpoint_info_t *info = im->info;
    memset(info, 0, sizeof *info);
    im->note = NULL;
    im->note_len = 0;
    im->params = NULL;
    size_t m = len < 8 ? len : 8;
    if (memcmp(img, S_MAGIC, m) != 0)
        return s_bad(what, name, "bad magic (not a troupe checkpoint: it must start with \"%s\")",
                     S_MAGIC);
    s_rd_t r = {img, len, 0, false, 0, false};
    uint32_t at_param = 0; /* the parameter being read at a short read */
    s_stage_t stage = S_AT_HEADER;
    (void)s_take(&r, 8);
    uint32_t version = s_get_u32(&r);
    if (!r.short_read && (version < 1 || version > S_VERSION))
        return s_bad(what, name,
                     "unsupported format version %u (this build reads versions 1 to %u)", version,
                     S_VERSION);
    int64_t steps = s_get_i64(&r);
    uint32_t kind = s_get_u32(&r);
    uint32_t nstate = s_get_u32(&r);
    uint32_t np = s_get_u32(&r);
    if (version >= 2) {
        im->note_len = s_get_u32(&r);
        if (!r.short_read && im->note_len > TROUPE_DP_NOTE_MAX)
            return s_bad(what, name, "note length %u exceeds %u (corrupt file)", im->note_len,
                         TROUPE_DP_NOTE_MAX);
        im->note = s_take(&r, im->note_len);
    }
    troupe_status_t st = TROUPE_OK;
    if (version >= 3 && !r.short_read)
        st = s_parse_run(what, name, &r, version, info);
    if (st != TROUPE_OK)
        return st;
    if (r.short_read)
        goto truncated;
    if (nstate > 2)
        return s_bad(what, name, "invalid optimizer state count %u (corrupt file)", nstate);
    if (kind > (uint32_t)TROUPE_OPT_ADAMW)
        return s_bad(what, name, "invalid optimizer kind %u (corrupt file)", kind);
    if (steps < 0)
        return s_bad(what, name, "negative step count %lld (corrupt file)", (long long)steps);
    stage = S_AT_PARAMS;
    if (np > (len - r.pos) / S_MIN_PARAM_BYTES) {
        /* not even the parameters' headers fit */
        s_short(&r, (uint64_t)np * S_MIN_PARAM_BYTES);
        goto truncated;
    }
    im->params = troupe_calloc(np ? np : 1, sizeof *im->params);
    if (!im->params)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    for (uint32_t i = 0; i < np && st == TROUPE_OK && !r.short_read; i++) {
        at_param = i;
        st = s_parse_param(what, name, &r, i, nstate, &im->params[i]);
    }
    if (st != TROUPE_OK)
        goto out_free;
    size_t body = r.pos;
    if (!r.short_read)
        stage = S_AT_CRC;
    uint32_t stored = s_get_u32(&r);
    if (r.short_read)
        goto truncated;
    uint32_t computed = s_crc(img, body);
    if (stored != computed) {
        st = s_bad(what, name, "CRC mismatch (stored 0x%08x, computed 0x%08x): the file is corrupt",
                   stored, computed);
        goto out_free;
    }
    if (r.pos != len) {
        st = s_bad(what, name, "%zu trailing bytes after the CRC", len - r.pos);
        goto out_free;
    }
    info->version = version;
    info->steps = steps;
    info->optimizer = (troupe_optimizer_kind_t)kind;
    info->nstate = (int)nstate;
    info->n_params = np;
    uint32_t crc = s_crc(NULL, 0);
    for (uint32_t i = 0; i < np; i++) {
        info->param_bytes += im->params[i].vbytes;
        crc = s_crc_more(crc, im->params[i].values, im->params[i].vbytes);
    }
    info->params_crc32 = crc;
    memcpy(info->note, im->note ? (const char *)im->note : "", im->note_len);
    info->note[im->note_len] = '\0';
    return TROUPE_OK;
truncated:
    st = s_truncated(what, name, len, &r, stage, at_param, np);
out_free:
    troupe_free(im->params);
    im->params = NULL;
    return st;
}

troupe_status_t troupe_dp_checkpoint_parse(const void *bytes, size_t len, const char *name,
                                           troupe_dp_checkpoint_info_t *out)
{
    if (!out || (!bytes && len > 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_checkpoint_parse: NULL argument");
    s_image_t im = {.info = out};
    static const unsigned char empty[1] = {0};
    TROUPE_RETURN_IF_ERROR(
        s_parse("dp_checkpoint_parse", name ? name : "<memory>", len ? bytes : empty, len, &im));
    troupe_free(im.params);
    return TROUPE_OK;
}

troupe_status_t troupe_dp_checkpoint_read(const char *path, troupe_dp_checkpoint_info_t *out)
{
    if (!path || !*path || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_checkpoint_read: NULL argument or empty path");
    unsigned char *img = NULL;
    size_t len = 0;
    TROUPE_RETURN_IF_ERROR(s_read_file("dp_checkpoint_read", path, &img, &len));
    s_image_t im = {.info = out};
    troupe_status_t st = s_parse("dp_checkpoint_read", path, img, len, &im);
    troupe_free(im.params);
    troupe_free(img);
    return st;
}

/* Compares a parsed image with dp's model: optimizer, state arrays, parameter count and each
 * parameter's label, precision, dims and state precision. */
static troupe_status_t s_match(troupe_dp_t *dp, const char *path, const s_image_t *im)
{
    const troupe_dp_checkpoint_info_t *info = im->info;
    const char *w = "dp_load";
    if (info->optimizer != dp->opt.kind)
        return s_bad(w, path, "optimizer %s in the file but %s in the model",
                     troupe_optimizer_name(info->optimizer), troupe_optimizer_name(dp->opt.kind));
    if (info->nstate != dp->nstate)
        return s_bad(w, path,
                     "%d optimizer state arrays per parameter in the file but %d in the "
                     "model",
                     info->nstate, dp->nstate);
    if (info->n_params != dp->n_params)
        return s_bad(w, path, "%zu parameters in the file but %zu in the model", info->n_params,
                     dp->n_params);
    for (size_t i = 0; i < dp->n_params; i++) {
        const s_param_t *e = &im->params[i];
        troupe_tnode_t *p = dp->params[i];
        char label[S_MAX_LABEL], name[64];
        size_t ll = troupe_tnode_label_string(p, label, sizeof label);
        troupe_tnode_debug_name(p, name, sizeof name);
        if (ll != e->label_len || memcmp(label, e->label, ll) != 0) {
            char flabel[128];
            return s_bad(
                w, path,
                "parameter %zu is labelled '%s' in the file but '%s' (%s) in the "
                "model",
                i, troupe__escaped((const char *)e->label, e->label_len, flabel, sizeof flabel),
                label, name);
        }
        if (e->prec != (uint32_t)p->prec)
            return s_bad(w, path,
                         "parameter %zu (%s) has precision %s in the file but %s in the "
                         "model",
                         i, name, troupe_prec_name((troupe_prec_t)e->prec),
                         troupe_prec_name(p->prec));
        bool same = e->ndims == (uint32_t)p->ndims;
        for (int a = 0; same && a < p->ndims; a++)
            same = e->dims[a] == p->dims[a];
        if (!same) {
            char fd[128] = "", md[64];
            size_t u = 0;
            for (uint32_t a = 0; a < e->ndims && u < sizeof fd; a++)
                u += (size_t)snprintf(fd + u, sizeof fd - u, "%s%lld", a ? "x" : "",
                                      (long long)e->dims[a]);
            if (e->ndims == 0)
                snprintf(fd, sizeof fd, "1");
            troupe_tnode_dims_to_string(p, false, md, sizeof md);
            return s_bad(w, path, "parameter %zu (%s) has dims %s in the file but %s in the model",
                         i, name, fd, md);
        }
        if (e->sprec != (uint32_t)troupe__dp_state_prec(p->prec))
            return s_bad(w, path,
                         "parameter %zu (%s): optimizer state precision %s in the file but %s "
                         "in the model",
                         i, name, troupe_prec_name((troupe_prec_t)e->sprec),
                         troupe_prec_name(troupe__dp_state_prec(p->prec)));
    }
    return TROUPE_OK;
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

/* Uploads the parsed parameters and optimizer state to the streams (after s_match). */
static troupe_status_t s_restore(troupe_dp_t *dp, const s_image_t *im)
{
    size_t maxn = 1;
    for (size_t i = 0; i < dp->n_params; i++)
        if ((size_t)troupe_tnode_num_elems(dp->params[i]) > maxn)
            maxn = (size_t)troupe_tnode_num_elems(dp->params[i]);
    double *tmp = troupe_malloc(maxn * sizeof *tmp);
    if (!tmp)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_load: out of memory");
    troupe_status_t st = TROUPE_OK;
    for (size_t i = 0; i < dp->n_params && st == TROUPE_OK; i++) {
        troupe_tnode_t *p = dp->params[i];
        st = s_set_raw(p, im->params[i].values, tmp);
        for (int k = 0; k < dp->n && st == TROUPE_OK; k++)
            st = troupe_from_host(troupe__dp_tail(dp, k), p, NULL);
        const unsigned char *src = im->params[i].state;
        for (int s = 0; s < dp->nstate && st == TROUPE_OK && dp->zero != NULL; s++) {
            /* ZeRO-1: this rank's slice (single precision, as the fused update needs); the
             * image is unaligned, so through a copy */
            size_t count = (size_t)troupe_tnode_num_elems(p);
            float *v = troupe_malloc((count > 0 ? count : 1) * sizeof *v);
            if (v == NULL) {
                st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_load: out of memory");
                break;
            }
            memcpy(v, src, count * sizeof *v);
            troupe__dp_zero_load(dp, i, s, v);
            troupe_free(v);
            src += count * sizeof *v;
        }
        for (int s = 0; s < dp->nstate && st == TROUPE_OK && dp->zero == NULL; s++) {
            troupe_tnode_t *sn = dp->state[i * (size_t)dp->nstate + (size_t)s];
            st = s_set_raw(sn, src, tmp);
            src += sn->size_bytes;
            if (st == TROUPE_OK)
                st = troupe_from_host(troupe__dp_tail(dp, 0), sn, NULL);
        }
    }
    troupe_free(tmp);
    return st;
}

troupe_status_t troupe_dp_load(troupe_dp_t *dp, const char *path)
{
    if (!dp || !path || !*path)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_load: NULL dp or empty path");
    unsigned char *img = NULL;
    size_t len = 0;
    TROUPE_RETURN_IF_ERROR(s_read_file("dp_load", path, &img, &len));
    troupe_dp_checkpoint_info_t *info = troupe_malloc(sizeof *info);
    s_image_t im = {.info = info};
    char *note_copy = NULL;
    troupe_status_t st = TROUPE_OK;
    if (!info) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_load: out of memory");
        goto out_free;
    }
    st = s_parse("dp_load", path, img, len, &im);
    if (st == TROUPE_OK)
        st = s_match(dp, path, &im);
    if (st != TROUPE_OK)
        goto out_free;
    if (im.note_len > 0 && !(note_copy = troupe_strdup(info->note))) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_load: out of memory");
        goto out_free;
    }
    st = troupe_dp_sync(dp);
    if (st != TROUPE_OK)
        goto out_free;
    /* validated: from here on the checkpoint replaces the state */
    st = s_restore(dp, &im);
    if (st == TROUPE_OK) {
        dp->steps = info->steps;
        if (info->version >= 3 && info->lr > 0.0)
            dp->opt.lr = info->lr;
        dp->plan = info->plan;
        if (dp->ls_on && info->version >= 4) { /* loss scaling continues where it stopped */
            dp->ls_scale = info->loss_scale;
            dp->ls_good = info->loss_scale_good;
            dp->ls_skipped = info->skipped_steps;
        }
        dp->ls_pending = false;
        troupe_free(dp->ckpt_note);
        dp->ckpt_note = note_copy;
        note_copy = NULL;
        st = troupe__dp_await(dp, "dp_load");
    }
    if (st == TROUPE_OK)
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL,
                   "dp: loaded step %lld from %s (format %u, saved by %d rank(s), %lld replica(s); "
                   "loaded by %d, %lld)",
                   (long long)info->steps, path, info->version, info->ranks,
                   (long long)info->replicas, dp->nranks, (long long)dp->replicas);
out_free:
    troupe_free(note_copy);
    troupe_free(im.params);
    troupe_free(info);
    troupe_free(img);
    return st;
}

troupe_status_t troupe_dp_set_plan(troupe_dp_t *dp, const troupe_dp_plan_t *plan)
{
    if (!dp || !plan)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_set_plan: NULL argument");
    if (plan->global_batch < 0 || plan->steps_per_epoch < 0 || plan->schedule_steps < 0 ||
        (plan->global_batch > 0 && plan->steps_per_epoch == 0))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_set_plan: global_batch %lld, steps_per_epoch %lld, "
                             "schedule_steps %lld: none may be negative, and a global batch "
                             "needs steps_per_epoch > 0",
                             (long long)plan->global_batch, (long long)plan->steps_per_epoch,
                             (long long)plan->schedule_steps);
    dp->plan = *plan;
    return TROUPE_OK;
}

troupe_dp_plan_t troupe_dp_plan(const troupe_dp_t *dp)
{
    troupe_dp_plan_t none = {0, 0, 0, 0};
    return dp ? dp->plan : none;
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

/* ---- progress for `troupe run` ----------------------------------------------------------------
 */

/* One fixed-width line ("%020lld\n") rewritten in place, so a reader never sees a mix of two
 * counts' digits of different lengths. */
void troupe__dp_note_progress(troupe_dp_t *dp)
{
    char es[128];
    if (!dp->progress_tried) {
        dp->progress_tried = true;
        dp->progress_fd = -1;
        const char *path = troupe_config_progress_file();
        if (dp->rank != 0 || !path[0])
            return;
        dp->progress_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (dp->progress_fd < 0) {
            TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_PARALLEL,
                       "dp: TROUPE_PROGRESS_FILE '%s': %s (the step count is not kept)", path,
                       S_ERRSTR(errno, es));
            return;
        }
    }
    if (dp->progress_fd < 0)
        return;
    char line[24];
    int n = snprintf(line, sizeof line, "%020lld\n", (long long)dp->steps);
    if (pwrite(dp->progress_fd, line, (size_t)n, 0) != (ssize_t)n) {
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_PARALLEL,
                   "dp: writing TROUPE_PROGRESS_FILE: %s (the step count is no longer kept)",
                   S_ERRSTR(errno, es));
        troupe__dp_close_progress(dp);
    }
}

void troupe__dp_close_progress(troupe_dp_t *dp)
{
    if (dp->progress_tried && dp->progress_fd >= 0)
        close(dp->progress_fd);
    dp->progress_fd = -1;
}
