/* fmnist — IDX reader (see idx.h). */
#include "idx.h"

#include "base/file_impl.h"
#include "ir/ops.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Largest item count accepted in a header (the real files hold 60000 and 10000). */
#define S_MAX_COUNT 100000000LL
/* Growth step of the data buffer: the buffer never gets much larger than the data present,
 * so a header claiming a huge count is reported as truncated, not as out of memory. */
#define S_CHUNK (4u << 20)

static uint32_t s_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Reads up to n bytes; *got gets the count. A read error (corrupt stream) is an error; a short
 * read at the end of a stream that ended early ("unexpected end of file") is not: the caller
 * reports it as truncation with the sizes. */
static troupe_status_t s_read(gzFile gz, const char *path, void *buf, size_t n, size_t *got,
                              bool *cut_short)
{
    *got = 0;
    while (*got < n) {
        size_t want = n - *got;
        unsigned step = want > S_CHUNK ? S_CHUNK : (unsigned)want;
        int r = gzread(gz, (unsigned char *)buf + *got, step);
        if (r < 0) {
            int code = 0;
            const char *msg = gzerror(gz, &code);
            if (code == Z_BUF_ERROR) { /* the compressed stream ends early */
                *cut_short = true;
                return TROUPE_OK;
            }
            /* zlib prefixes its message with the path: keep the message only */
            size_t plen = strlen(path);
            if (msg && strncmp(msg, path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0)
                msg += plen + 2;
            return troupe_error_set(TROUPE_INVALID_ARGUMENT, "%s: corrupt gzip stream: %s", path,
                                    msg && *msg ? msg : "read error");
        }
        if (r == 0) {
            int code = 0;
            (void)gzerror(gz, &code);
            if (code == Z_BUF_ERROR)
                *cut_short = true;
            break;
        }
        *got += (size_t)r;
    }
    return TROUPE_OK;
}

static const char *s_cut_note(bool cut_short)
{
    return cut_short ? " (the gzip stream ends unexpectedly)" : "";
}

/* Opens path, checks the magic, returns the header's dimension words. */
static troupe_status_t s_open_header(const char *path, uint32_t magic, const char *what,
                                     int ndims_after, gzFile *out_gz, uint32_t *dims)
{
    *out_gz = NULL;
    /* a device, FIFO or directory is refused by its kind (a FIFO is not waited on) */
    int fd = -1;
    struct stat sb;
    troupe_status_t ost = troupe__file_open_regular(path, "an IDX file", 0, 0, &fd, &sb);
    if (ost != TROUPE_OK)
        return ost == TROUPE_FAILED_PRECONDITION ? TROUPE_INVALID_ARGUMENT : ost;
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: cannot open: out of memory", path);
    }
    unsigned char hdr[16];
    size_t need = 4 + 4 * (size_t)ndims_after, got = 0;
    bool cut = false;
    troupe_status_t st = s_read(gz, path, hdr, need, &got, &cut);
    if (st != TROUPE_OK)
        goto fail;
    if (got < 4 || (got < need && s_be32(hdr) == magic)) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: truncated: the file ends inside the %zu-byte IDX header (after "
                              "%zu bytes)%s",
                              path, need, got, s_cut_note(cut));
        goto fail;
    }
    if (s_be32(hdr) != magic) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: bad magic 0x%08x (expected 0x%08x: IDX %s)", path,
                              (unsigned)s_be32(hdr), (unsigned)magic, what);
        goto fail;
    }
    for (int i = 0; i < ndims_after; i++)
        dims[i] = s_be32(hdr + 4 + 4 * i);
    *out_gz = gz;
    return TROUPE_OK;
fail:
    gzclose(gz);
    return st;
}

/* Reads exactly `bytes` data bytes and checks nothing follows. `desc` describes the declared
 * payload for messages ("10000 images of 28x28"). */
static troupe_status_t s_read_body(gzFile gz, const char *path, int64_t bytes, const char *desc,
                                   uint8_t **out)
{
    *out = NULL;
    size_t total = (size_t)bytes, got = 0, cap = 0;
    uint8_t *buf = NULL;
    bool cut = false;
    troupe_status_t st = TROUPE_OK;
    while (got < total) {
        size_t next = cap + S_CHUNK < total ? cap + S_CHUNK : total;
        uint8_t *nb = realloc(buf, next);
        if (!nb) {
            st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory reading %zu bytes",
                                  path, total);
            goto fail;
        }
        buf = nb;
        cap = next;
        size_t n = 0;
        st = s_read(gz, path, buf + got, cap - got, &n, &cut);
        if (st != TROUPE_OK)
            goto fail;
        got += n;
        if (got < cap)
            break; /* end of data */
    }
    if (got < total) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: truncated: the header declares %s (%zu bytes) but the data ends "
                              "after %zu bytes%s",
                              path, desc, total, got, s_cut_note(cut));
        goto fail;
    }
    unsigned char extra[1];
    size_t n = 0;
    st = s_read(gz, path, extra, 1, &n, &cut);
    if (st != TROUPE_OK)
        goto fail;
    if (n > 0) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: wrong count: the header declares %s (%zu bytes) but more data "
                              "follows",
                              path, desc, total);
        goto fail;
    }
    *out = buf;
    return TROUPE_OK;
fail:
    free(buf);
    return st;
}

static troupe_status_t s_check_count(const char *path, uint32_t count, const char *what)
{
    if (count == 0 || (int64_t)count > S_MAX_COUNT)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: bad count %u in the header (expected 1..%lld %s)", path,
                                (unsigned)count, (long long)S_MAX_COUNT, what);
    return TROUPE_OK;
}

troupe_status_t fmnist_idx_read_images(const char *path, uint8_t **out_pixels, int64_t *out_count,
                                       int64_t *out_rows, int64_t *out_cols)
{
    if (!path || !out_pixels || !out_count || !out_rows || !out_cols)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_idx_read_images: NULL argument");
    *out_pixels = NULL;
    gzFile gz = NULL;
    uint32_t dims[3];
    TROUPE_RETURN_IF_ERROR(
        s_open_header(path, FMNIST_IDX_MAGIC_IMAGES, "ubyte images", 3, &gz, dims));
    troupe_status_t st = s_check_count(path, dims[0], "images");
    if (st == TROUPE_OK && (dims[1] != FMNIST_IMAGE_ROWS || dims[2] != FMNIST_IMAGE_COLS))
        st = troupe_error_set(
            TROUPE_INVALID_ARGUMENT, "%s: bad image size %ux%u in the header (expected %dx%d)",
            path, (unsigned)dims[1], (unsigned)dims[2], FMNIST_IMAGE_ROWS, FMNIST_IMAGE_COLS);
    if (st == TROUPE_OK) {
        char desc[96];
        snprintf(desc, sizeof desc, "%u images of %ux%u", (unsigned)dims[0], (unsigned)dims[1],
                 (unsigned)dims[2]);
        st = s_read_body(gz, path, (int64_t)dims[0] * dims[1] * dims[2], desc, out_pixels);
    }
    gzclose(gz);
    if (st != TROUPE_OK)
        return st;
    *out_count = dims[0];
    *out_rows = dims[1];
    *out_cols = dims[2];
    return TROUPE_OK;
}

troupe_status_t fmnist_idx_read_labels(const char *path, int num_classes, uint8_t **out_labels,
                                       int64_t *out_count)
{
    if (!path || !out_labels || !out_count || num_classes <= 0 || num_classes > 256)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_idx_read_labels: bad argument");
    *out_labels = NULL;
    gzFile gz = NULL;
    uint32_t count = 0;
    TROUPE_RETURN_IF_ERROR(
        s_open_header(path, FMNIST_IDX_MAGIC_LABELS, "ubyte labels", 1, &gz, &count));
    troupe_status_t st = s_check_count(path, count, "labels");
    uint8_t *labels = NULL;
    if (st == TROUPE_OK) {
        char desc[64];
        snprintf(desc, sizeof desc, "%u labels", (unsigned)count);
        st = s_read_body(gz, path, count, desc, &labels);
    }
    gzclose(gz);
    if (st != TROUPE_OK)
        return st;
    for (uint32_t i = 0; i < count; i++) {
        if (labels[i] >= num_classes) {
            st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                  "%s: label %u at index %u is out of range 0..%d", path,
                                  (unsigned)labels[i], (unsigned)i, num_classes - 1);
            free(labels);
            return st;
        }
    }
    *out_labels = labels;
    *out_count = count;
    return TROUPE_OK;
}

troupe_status_t fmnist_dataset_load(const char *images_path, const char *labels_path, int64_t limit,
                                    fmnist_dataset_t *out)
{
    if (!images_path || !labels_path || !out)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_dataset_load: NULL argument");
    memset(out, 0, sizeof *out);
    fmnist_dataset_t ds = {0};
    int64_t nlabels = 0;
    TROUPE_RETURN_IF_ERROR(
        fmnist_idx_read_images(images_path, &ds.pixels, &ds.count, &ds.rows, &ds.cols));
    troupe_status_t st =
        fmnist_idx_read_labels(labels_path, FMNIST_NUM_CLASSES, &ds.labels, &nlabels);
    if (st == TROUPE_OK && nlabels != ds.count)
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: count mismatch: %lld labels but %s holds %lld images",
                              labels_path, (long long)nlabels, images_path, (long long)ds.count);
    if (st != TROUPE_OK) {
        fmnist_dataset_free(&ds);
        return st;
    }
    if (limit > 0 && limit < ds.count) { /* only the first `limit` are kept */
        uint8_t *px = realloc(ds.pixels, (size_t)(limit * ds.rows * ds.cols));
        uint8_t *lb = realloc(ds.labels, (size_t)limit);
        ds.pixels = px ? px : ds.pixels; /* a failed shrink keeps the larger block */
        ds.labels = lb ? lb : ds.labels;
        ds.count = limit;
    }
    *out = ds;
    return TROUPE_OK;
}

/* The two files of `dir`/<split>. */
static troupe_status_t s_split_paths(const char *dir, const char *split, char *images,
                                     char *labels, size_t cap)
{
    int a = snprintf(images, cap, "%s/%s-images-idx3-ubyte.gz", dir, split);
    int b = snprintf(labels, cap, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    if (a < 0 || b < 0 || (size_t)a >= cap || (size_t)b >= cap)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "%s: data directory path too long", dir);
    return TROUPE_OK;
}

troupe_status_t fmnist_dataset_load_split(const char *dir, const char *split, int64_t limit,
                                          fmnist_dataset_t *out)
{
    if (!dir || !split || !out)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "fmnist_dataset_load_split: NULL argument");
    char images[4096], labels[4096];
    TROUPE_RETURN_IF_ERROR(s_split_paths(dir, split, images, labels, sizeof images));
    return fmnist_dataset_load(images, labels, limit, out);
}

/* Opens an image file (magic, count, 28x28) or a label file (magic, count): *out_gz positioned
 * at the data, *out_count the header's count. */
static troupe_status_t s_open_images(const char *path, gzFile *out_gz, int64_t *out_count)
{
    uint32_t dims[3];
    TROUPE_RETURN_IF_ERROR(
        s_open_header(path, FMNIST_IDX_MAGIC_IMAGES, "ubyte images", 3, out_gz, dims));
    troupe_status_t st = s_check_count(path, dims[0], "images");
    if (st == TROUPE_OK && (dims[1] != FMNIST_IMAGE_ROWS || dims[2] != FMNIST_IMAGE_COLS))
        st = troupe_error_set(
            TROUPE_INVALID_ARGUMENT, "%s: bad image size %ux%u in the header (expected %dx%d)",
            path, (unsigned)dims[1], (unsigned)dims[2], FMNIST_IMAGE_ROWS, FMNIST_IMAGE_COLS);
    if (st != TROUPE_OK) {
        gzclose(*out_gz);
        *out_gz = NULL;
        return st;
    }
    *out_count = dims[0];
    return TROUPE_OK;
}

static troupe_status_t s_open_labels(const char *path, gzFile *out_gz, int64_t *out_count)
{
    uint32_t count = 0;
    TROUPE_RETURN_IF_ERROR(
        s_open_header(path, FMNIST_IDX_MAGIC_LABELS, "ubyte labels", 1, out_gz, &count));
    troupe_status_t st = s_check_count(path, count, "labels");
    if (st != TROUPE_OK) {
        gzclose(*out_gz);
        *out_gz = NULL;
        return st;
    }
    *out_count = count;
    return TROUPE_OK;
}

troupe_status_t fmnist_dataset_peek_split(const char *dir, const char *split, int64_t limit,
                                          int64_t *out_count)
{
    if (!dir || !split || !out_count)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "fmnist_dataset_peek_split: NULL argument");
    char images[4096], labels[4096];
    TROUPE_RETURN_IF_ERROR(s_split_paths(dir, split, images, labels, sizeof images));
    gzFile gz = NULL;
    int64_t count = 0, nlabels = 0;
    TROUPE_RETURN_IF_ERROR(s_open_images(images, &gz, &count));
    gzclose(gz);
    TROUPE_RETURN_IF_ERROR(s_open_labels(labels, &gz, &nlabels));
    gzclose(gz);
    if (nlabels != count)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: count mismatch: %lld labels but %s holds %lld images", labels,
                                (long long)nlabels, images, (long long)count);
    *out_count = limit > 0 && limit < count ? limit : count;
    return TROUPE_OK;
}

/* Reads the `count` items of `item_bytes` each that follow the header, in chunks, copying item
 * i to out + slot[i] * item_bytes when i < nslots and slot[i] >= 0, and checks what
 * s_read_body checks (truncated, trailing data) with its messages. classes > 0: every item is
 * a label below classes (the first bad one is named, after the size checks, as
 * fmnist_idx_read_labels does). */
static troupe_status_t s_stream_items(gzFile gz, const char *path, int64_t count,
                                      size_t item_bytes, const char *desc, const int64_t *slot,
                                      int64_t nslots, int classes, uint8_t *out)
{
    size_t per = S_CHUNK / 4 / item_bytes; /* items a chunk: about 1 MiB */
    if (per < 1)
        per = 1;
    uint8_t *buf = malloc(per * item_bytes);
    if (!buf)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    size_t total = (size_t)count * item_bytes, got = 0;
    int64_t bad = -1; /* the first label out of range, and its value */
    unsigned bad_value = 0;
    bool cut = false;
    troupe_status_t st = TROUPE_OK;
    for (int64_t i = 0; i < count;) {
        size_t items = (size_t)(count - i) < per ? (size_t)(count - i) : per, n = 0;
        st = s_read(gz, path, buf, items * item_bytes, &n, &cut);
        if (st != TROUPE_OK)
            goto free_buf;
        got += n;
        size_t whole = n / item_bytes;
        for (size_t k = 0; k < whole; k++, i++) {
            const uint8_t *it = buf + k * item_bytes;
            if (classes > 0 && bad < 0 && it[0] >= classes) {
                bad = i;
                bad_value = it[0];
            }
            if (i < nslots && slot[i] >= 0)
                memcpy(out + (size_t)slot[i] * item_bytes, it, item_bytes);
        }
        if (n < items * item_bytes)
            break; /* end of data */
    }
    if (got < total) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: truncated: the header declares %s (%zu bytes) but the data ends "
                              "after %zu bytes%s",
                              path, desc, total, got, s_cut_note(cut));
        goto free_buf;
    }
    size_t n = 0;
    st = s_read(gz, path, buf, 1, &n, &cut);
    if (st != TROUPE_OK)
        goto free_buf;
    if (n > 0) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: wrong count: the header declares %s (%zu bytes) but more data "
                              "follows",
                              path, desc, total);
        goto free_buf;
    }
    if (bad >= 0)
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: label %u at index %lld is out of range 0..%d", path, bad_value,
                              (long long)bad, classes - 1);
free_buf:
    free(buf);
    return st;
}

troupe_status_t fmnist_dataset_load_items_split(const char *dir, const char *split, int64_t limit,
                                                const int64_t *items, int64_t n,
                                                fmnist_dataset_t *out)
{
    if (!dir || !split || !out || (n > 0 && !items) || n < 0)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "fmnist_dataset_load_items_split: bad argument");
    memset(out, 0, sizeof *out);
    char images[4096], labels[4096];
    TROUPE_RETURN_IF_ERROR(s_split_paths(dir, split, images, labels, sizeof images));
    gzFile gz = NULL;
    int64_t count = 0, nlabels = 0;
    TROUPE_RETURN_IF_ERROR(s_open_images(images, &gz, &count));
    int64_t usable = limit > 0 && limit < count ? limit : count;
    fmnist_dataset_t ds = {.count = n, .rows = FMNIST_IMAGE_ROWS, .cols = FMNIST_IMAGE_COLS};
    int64_t *slot = malloc((size_t)usable * sizeof *slot);
    ds.pixels = malloc((size_t)(n ? n : 1) * FMNIST_IMAGE_PIXELS);
    ds.labels = malloc((size_t)(n ? n : 1));
    troupe_status_t st = TROUPE_OK;
    if (!slot || !ds.pixels || !ds.labels) {
        st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory for %lld items",
                              images, (long long)n);
        goto close_gz;
    }
    for (int64_t i = 0; i < usable; i++)
        slot[i] = -1;
    for (int64_t i = 0; i < n; i++) {
        if (items[i] < 0 || items[i] >= usable || slot[items[i]] >= 0) {
            st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                  "fmnist_dataset_load_items_split: item %lld (entry %lld) %s",
                                  (long long)items[i], (long long)i,
                                  items[i] < 0 || items[i] >= usable ? "is out of range"
                                                                     : "is given twice");
            goto close_gz;
        }
        slot[items[i]] = i;
    }
    char desc[96];
    snprintf(desc, sizeof desc, "%lld images of %dx%d", (long long)count, FMNIST_IMAGE_ROWS,
             FMNIST_IMAGE_COLS);
    st = s_stream_items(gz, images, count, FMNIST_IMAGE_PIXELS, desc, slot, usable, 0,
                        ds.pixels);
    if (st != TROUPE_OK)
        goto close_gz;
    gzclose(gz);
    gz = NULL;
    st = s_open_labels(labels, &gz, &nlabels);
    if (st != TROUPE_OK)
        goto free_all;
    snprintf(desc, sizeof desc, "%lld labels", (long long)nlabels);
    st = s_stream_items(gz, labels, nlabels, 1, desc, slot, usable < nlabels ? usable : nlabels,
                        FMNIST_NUM_CLASSES, ds.labels);
    if (st == TROUPE_OK && nlabels != count)
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: count mismatch: %lld labels but %s holds %lld images", labels,
                              (long long)nlabels, images, (long long)count);
close_gz:
    if (gz)
        gzclose(gz);
free_all:
    free(slot);
    if (st != TROUPE_OK) {
        fmnist_dataset_free(&ds);
        return st;
    }
    *out = ds;
    return TROUPE_OK;
}

void fmnist_dataset_free(fmnist_dataset_t *ds)
{
    if (!ds)
        return;
    free(ds->pixels);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

/* A uniform integer in 0..bound-1 (bound >= 1) from the Threefry stream (key, *ctr), by
 * Lemire's multiply-and-reject method on 32-bit draws, so the shuffle is unbiased. */
static uint32_t s_uniform_below(troupe_uint4x32_t key, uint64_t *ctr, uint32_t bound)
{
    for (;;) {
        troupe_uint4x32_t c = {{(uint32_t)*ctr, (uint32_t)(*ctr >> 32), 0x5f3759dfu, 0}};
        (*ctr)++;
        troupe_uint4x32_t r = troupe_threefry4x32_crypto(key, c);
        for (int w = 0; w < 4; w++) {
            uint64_t m = (uint64_t)r.v[w] * bound;
            uint32_t low = (uint32_t)m;
            if (low >= bound || low >= (uint32_t)(-bound) % bound)
                return (uint32_t)(m >> 32);
        }
    }
}

static troupe_uint4x32_t s_key(uint64_t seed, uint32_t stream)
{
    troupe_uint4x32_t k = {{(uint32_t)seed, (uint32_t)(seed >> 32), stream, 0x9e3779b9u}};
    return k;
}

void fmnist_dataset_shuffle(fmnist_dataset_t *ds, uint64_t seed)
{
    if (!ds || ds->count < 2)
        return;
    troupe_uint4x32_t key = s_key(seed, 0x5348u);
    uint64_t ctr = 0;
    size_t px = (size_t)(ds->rows * ds->cols);
    uint8_t tmp[FMNIST_IMAGE_PIXELS];
    uint8_t *t = px <= sizeof tmp ? tmp : NULL;
    for (int64_t i = ds->count - 1; i > 0; i--) {
        int64_t j = s_uniform_below(key, &ctr, (uint32_t)(i + 1));
        if (j == i)
            continue;
        uint8_t l = ds->labels[i];
        ds->labels[i] = ds->labels[j];
        ds->labels[j] = l;
        uint8_t *a = ds->pixels + (size_t)i * px, *b = ds->pixels + (size_t)j * px;
        if (t) {
            memcpy(t, a, px);
            memcpy(a, b, px);
            memcpy(b, t, px);
        } else {
            for (size_t k = 0; k < px; k++) {
                uint8_t v = a[k];
                a[k] = b[k];
                b[k] = v;
            }
        }
    }
}

void fmnist_shuffle_order(int64_t count, uint64_t seed, int64_t *out)
{
    if (!out)
        return;
    for (int64_t i = 0; i < count; i++)
        out[i] = i;
    if (count < 2)
        return;
    /* the draws of fmnist_dataset_shuffle, applied to the indices */
    troupe_uint4x32_t key = s_key(seed, 0x5348u);
    uint64_t ctr = 0;
    for (int64_t i = count - 1; i > 0; i--) {
        int64_t j = s_uniform_below(key, &ctr, (uint32_t)(i + 1));
        int64_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}
