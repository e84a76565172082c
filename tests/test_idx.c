/* fmnist IDX reader (examples/fmnist/idx.h): a valid round trip, every corrupt-file error
 * (missing file, truncated gzip, bad magic, wrong count, image/label count mismatch, label out
 * of range, corrupt stream), each asserting that the one-line message names the file and the
 * problem; the seeded shuffle; and the installed data set. Corrupt files are written with zlib
 * into a fresh temporary directory. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, truncate */

#include "examples/fmnist/idx.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char s_dir[256];

static void s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/troupe-test-idx-XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void s_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(idx, .init = s_setup, .fini = s_teardown);

static const char *s_path(const char *name)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", s_dir, name);
    return p;
}

static void s_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Writes bytes gzip-compressed (gz true) or raw. */
static void s_write(const char *path, const void *data, size_t n, bool gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        cr_assert_not_null(f);
        if (n)
            cr_assert_eq(gzwrite(f, data, (unsigned)n), (int)n);
        cr_assert_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(data, 1, n, f), n);
        fclose(f);
    }
}

/* An idx3 image file: header (magic, count, rows, cols) then `ndata` pixel bytes (pixel k of
 * the payload = k * 7 mod 256). */
static void s_images(const char *path, uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols,
                     size_t ndata)
{
    size_t n = 16 + ndata;
    unsigned char *b = malloc(n);
    s_be32(b, magic);
    s_be32(b + 4, count);
    s_be32(b + 8, rows);
    s_be32(b + 12, cols);
    for (size_t k = 0; k < ndata; k++)
        b[16 + k] = (unsigned char)(k * 7);
    s_write(path, b, n, true);
    free(b);
}

/* An idx1 label file with labels[i] = i mod 10 except where `bad_at` (>= 0) holds `bad`. */
static void s_labels(const char *path, uint32_t magic, uint32_t count, size_t ndata, long bad_at,
                     unsigned char bad)
{
    size_t n = 8 + ndata;
    unsigned char *b = malloc(n);
    s_be32(b, magic);
    s_be32(b + 4, count);
    for (size_t k = 0; k < ndata; k++)
        b[8 + k] = (unsigned char)(k % 10);
    if (bad_at >= 0)
        b[8 + bad_at] = bad;
    s_write(path, b, n, true);
    free(b);
}

#define PX FMNIST_IMAGE_PIXELS

/* Asserts status `want` and a message that holds the path and every fragment. */
static void s_expect(troupe_status_t got, troupe_status_t want, const char *path, const char *f1,
                     const char *f2)
{
    const char *msg = troupe_last_error();
    cr_assert_eq(got, want, "status %s, want %s (%s)", troupe_status_str(got),
                 troupe_status_str(want), msg);
    cr_assert(strstr(msg, path), "message does not name %s: %s", path, msg);
    cr_assert(strchr(msg, '\n') == NULL, "message is not one line: %s", msg);
    cr_assert(strstr(msg, f1), "message lacks '%s': %s", f1, msg);
    if (f2)
        cr_assert(strstr(msg, f2), "message lacks '%s': %s", f2, msg);
}

Test(idx, valid_files_round_trip)
{
    const char *im = s_path("im.gz"), *lb = s_path("lb.gz");
    s_images(im, FMNIST_IDX_MAGIC_IMAGES, 5, 28, 28, 5 * PX);
    s_labels(lb, FMNIST_IDX_MAGIC_LABELS, 5, 5, -1, 0);
    fmnist_dataset_t ds;
    cr_assert_eq(fmnist_dataset_load(im, lb, 0, &ds), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(ds.count, 5);
    cr_assert_eq(ds.rows, 28);
    cr_assert_eq(ds.cols, 28);
    for (size_t k = 0; k < 5 * PX; k++)
        cr_assert_eq(ds.pixels[k], (unsigned char)(k * 7), "pixel %zu", k);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(ds.labels[i], i);
    fmnist_dataset_free(&ds);
    cr_assert_null(ds.pixels);
    /* limit keeps the first items */
    cr_assert_eq(fmnist_dataset_load(im, lb, 3, &ds), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(ds.count, 3);
    fmnist_dataset_free(&ds);
}

Test(idx, uncompressed_file_is_read_too)
{
    const char *lb = s_path("plain-labels");
    unsigned char b[8 + 3];
    s_be32(b, FMNIST_IDX_MAGIC_LABELS);
    s_be32(b + 4, 3);
    b[8] = 9;
    b[9] = 0;
    b[10] = 4;
    s_write(lb, b, sizeof b, false);
    uint8_t *labels = NULL;
    int64_t n = 0;
    cr_assert_eq(fmnist_idx_read_labels(lb, 10, &labels, &n), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(n, 3);
    cr_assert(labels[0] == 9 && labels[1] == 0 && labels[2] == 4);
    free(labels);
}

Test(idx, missing_file)
{
    const char *im = s_path("absent-images.gz"), *lb = s_path("lb.gz");
    s_labels(lb, FMNIST_IDX_MAGIC_LABELS, 5, 5, -1, 0);
    fmnist_dataset_t ds;
    s_expect(fmnist_dataset_load(im, lb, 0, &ds), TROUPE_NOT_FOUND, im, "cannot open",
             "No such file");
    /* the labels' turn */
    const char *im2 = s_path("im.gz"), *lb2 = s_path("absent-labels.gz");
    s_images(im2, FMNIST_IDX_MAGIC_IMAGES, 5, 28, 28, 5 * PX);
    s_expect(fmnist_dataset_load(im2, lb2, 0, &ds), TROUPE_NOT_FOUND, lb2, "cannot open", NULL);
    /* a missing directory, through the split loader */
    const char *dir = s_path("no-such-dir");
    s_expect(fmnist_dataset_load_split(dir, "train", 0, &ds), TROUPE_NOT_FOUND,
             "no-such-dir/train-images-idx3-ubyte.gz", "cannot open", NULL);
}

/* A device, a FIFO or a directory is refused by its kind, and a FIFO is not waited on. */
Test(idx, not_a_regular_file)
{
    const char *fifo = s_path("fifo"), *dir = s_path("dir");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_eq(mkdir(dir, 0700), 0);
    static const struct {
        const char *kind;
    } k[] = {{"a character device"}, {"a FIFO"}, {"a directory"}};
    const char *paths[] = {"/dev/zero", fifo, dir};
    for (int i = 0; i < 3; i++) {
        uint8_t *px = NULL;
        int64_t n, r, c;
        cr_assert_eq(fmnist_idx_read_images(paths[i], &px, &n, &r, &c), TROUPE_INVALID_ARGUMENT,
                     "%s", paths[i]);
        char want[600];
        snprintf(want, sizeof want, "%s: %s, not a regular file: expected an IDX file", paths[i],
                 k[i].kind);
        cr_assert(strstr(troupe_last_error(), want), "%s", troupe_last_error());
        uint8_t *lb = NULL;
        cr_assert_eq(fmnist_idx_read_labels(paths[i], 10, &lb, &n), TROUPE_INVALID_ARGUMENT);
        cr_assert(strstr(troupe_last_error(), want), "%s", troupe_last_error());
    }
}

/* Writes a valid gzip image file, then keeps only the first `keep` bytes of it. */
static void s_truncate_file(const char *path, long keep)
{
    cr_assert_eq(truncate(path, keep), 0);
}

Test(idx, truncated_gzip)
{
    const char *im = s_path("trunc-images.gz");
    s_images(im, FMNIST_IDX_MAGIC_IMAGES, 50, 28, 28, 50 * PX);
    struct stat sb;
    cr_assert_eq(stat(im, &sb), 0);
    s_truncate_file(im, sb.st_size / 2);
    uint8_t *px = NULL;
    int64_t n, r, c;
    s_expect(fmnist_idx_read_images(im, &px, &n, &r, &c), TROUPE_INVALID_ARGUMENT, im, "truncated",
             "50 images of 28x28");
    cr_assert_null(px);
    /* cut inside the header */
    const char *lb = s_path("trunc-labels.gz");
    unsigned char hdr[6];
    s_be32(hdr, FMNIST_IDX_MAGIC_LABELS);
    hdr[4] = hdr[5] = 0;
    s_write(lb, hdr, sizeof hdr, true);
    uint8_t *labels = NULL;
    s_expect(fmnist_idx_read_labels(lb, 10, &labels, &n), TROUPE_INVALID_ARGUMENT, lb, "truncated",
             "header");
}

Test(idx, data_shorter_than_the_header_declares)
{
    const char *lb = s_path("short-labels.gz");
    s_labels(lb, FMNIST_IDX_MAGIC_LABELS, 100, 60, -1, 0);
    uint8_t *labels = NULL;
    int64_t n;
    s_expect(fmnist_idx_read_labels(lb, 10, &labels, &n), TROUPE_INVALID_ARGUMENT, lb, "truncated",
             "100 labels");
}

Test(idx, bad_magic)
{
    const char *im = s_path("magic-images.gz");
    s_images(im, 0x00000801u, 2, 28, 28, 2 * PX); /* a label file's magic */
    uint8_t *px = NULL;
    int64_t n, r, c;
    s_expect(fmnist_idx_read_images(im, &px, &n, &r, &c), TROUPE_INVALID_ARGUMENT, im,
             "bad magic 0x00000801", "0x00000803");
    const char *lb = s_path("magic-labels.gz");
    s_labels(lb, 0x12345678u, 2, 2, -1, 0);
    uint8_t *labels = NULL;
    s_expect(fmnist_idx_read_labels(lb, 10, &labels, &n), TROUPE_INVALID_ARGUMENT, lb,
             "bad magic 0x12345678", "0x00000801");
}

Test(idx, wrong_count)
{
    /* more data than the header declares */
    const char *im = s_path("count-images.gz");
    s_images(im, FMNIST_IDX_MAGIC_IMAGES, 3, 28, 28, 4 * PX);
    uint8_t *px = NULL;
    int64_t n, r, c;
    s_expect(fmnist_idx_read_images(im, &px, &n, &r, &c), TROUPE_INVALID_ARGUMENT, im,
             "wrong count", "3 images");
    /* a zero count */
    const char *lb = s_path("zero-labels.gz");
    s_labels(lb, FMNIST_IDX_MAGIC_LABELS, 0, 0, -1, 0);
    uint8_t *labels = NULL;
    s_expect(fmnist_idx_read_labels(lb, 10, &labels, &n), TROUPE_INVALID_ARGUMENT, lb,
             "bad count 0", NULL);
    /* a huge count with little data is truncation, not an allocation failure */
    const char *big = s_path("huge-labels.gz");
    s_labels(big, FMNIST_IDX_MAGIC_LABELS, 90000000u, 10, -1, 0);
    s_expect(fmnist_idx_read_labels(big, 10, &labels, &n), TROUPE_INVALID_ARGUMENT, big,
             "truncated", "90000000 labels");
    /* wrong image size */
    const char *sz = s_path("size-images.gz");
    s_images(sz, FMNIST_IDX_MAGIC_IMAGES, 2, 32, 32, 2 * 32 * 32);
    s_expect(fmnist_idx_read_images(sz, &px, &n, &r, &c), TROUPE_INVALID_ARGUMENT, sz,
             "bad image size 32x32", "28x28");
}

Test(idx, images_labels_count_mismatch)
{
    const char *im = s_path("m-images.gz"), *lb = s_path("m-labels.gz");
    s_images(im, FMNIST_IDX_MAGIC_IMAGES, 4, 28, 28, 4 * PX);
    s_labels(lb, FMNIST_IDX_MAGIC_LABELS, 5, 5, -1, 0);
    fmnist_dataset_t ds;
    s_expect(fmnist_dataset_load(im, lb, 0, &ds), TROUPE_INVALID_ARGUMENT, lb, "count mismatch",
             "5 labels");
    cr_assert(strstr(troupe_last_error(), im) && strstr(troupe_last_error(), "4 images"),
              "message names the image file and its count: %s", troupe_last_error());
    cr_assert_null(ds.pixels);
}

Test(idx, label_out_of_range)
{
    const char *lb = s_path("range-labels.gz");
    s_labels(lb, FMNIST_IDX_MAGIC_LABELS, 6, 6, 2, 10);
    uint8_t *labels = NULL;
    int64_t n;
    s_expect(fmnist_idx_read_labels(lb, 10, &labels, &n), TROUPE_INVALID_ARGUMENT, lb,
             "label 10 at index 2", "out of range 0..9");
    cr_assert_null(labels);
}

Test(idx, corrupt_gzip_stream)
{
    const char *lb = s_path("corrupt-labels.gz");
    s_labels(lb, FMNIST_IDX_MAGIC_LABELS, 20000, 20000, -1, 0);
    FILE *f = fopen(lb, "r+b");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    /* overwrite the middle of the deflate data and the trailer's CRC */
    for (long pos = 12; pos < size; pos += 3) {
        fseek(f, pos, SEEK_SET);
        fputc(0xA5, f);
    }
    fclose(f);
    uint8_t *labels = NULL;
    int64_t n;
    troupe_status_t st = fmnist_idx_read_labels(lb, 10, &labels, &n);
    cr_assert_neq(st, TROUPE_OK);
    const char *msg = troupe_last_error();
    cr_assert(strstr(msg, lb), "message does not name the file: %s", msg);
    cr_assert(strstr(msg, "corrupt gzip stream") || strstr(msg, "truncated") ||
                  strstr(msg, "bad magic") || strstr(msg, "out of range"),
              "message names no problem: %s", msg);
    cr_assert_null(labels);
}

Test(idx, shuffle_is_a_seeded_permutation)
{
    enum { N = 200 };
    fmnist_dataset_t a = {N, 28, 28, malloc(N * PX), malloc(N)};
    fmnist_dataset_t b = {N, 28, 28, malloc(N * PX), malloc(N)};
    for (int i = 0; i < N; i++) {
        a.labels[i] = b.labels[i] = (uint8_t)(i % 10);
        memset(a.pixels + (size_t)i * PX, i, PX); /* every pixel of image i is i */
        memset(b.pixels + (size_t)i * PX, i, PX);
    }
    fmnist_dataset_shuffle(&a, 7);
    fmnist_dataset_shuffle(&b, 7);
    cr_assert_eq(memcmp(a.pixels, b.pixels, N * PX), 0, "same seed, same order");
    int seen[N] = {0}, moved = 0;
    for (int i = 0; i < N; i++) {
        int orig = a.pixels[(size_t)i * PX];
        cr_assert_eq(a.pixels[(size_t)i * PX + PX - 1], orig, "image %d kept whole", i);
        cr_assert_eq(a.labels[i], orig % 10, "label moved with its image %d", orig);
        seen[orig]++;
        moved += orig != i;
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(seen[i], 1, "image %d appears once", i);
    cr_assert_gt(moved, N / 2, "the order changed");
    fmnist_dataset_shuffle(&b, 8);
    cr_assert_neq(memcmp(a.pixels, b.pixels, N * PX), 0, "another seed, another order");
    fmnist_dataset_free(&a);
    fmnist_dataset_free(&b);
}

Test(idx, shuffle_order_is_the_shuffle_as_indices)
{
    enum { N = 200 };
    fmnist_dataset_t a = {N, 28, 28, malloc(N * PX), malloc(N)};
    for (int i = 0; i < N; i++) {
        a.labels[i] = (uint8_t)(i % 10);
        memset(a.pixels + (size_t)i * PX, i, PX);
    }
    fmnist_dataset_shuffle(&a, 7);
    int64_t order[N];
    fmnist_shuffle_order(N, 7, order);
    for (int p = 0; p < N; p++)
        cr_assert_eq(order[p], a.pixels[(size_t)p * PX], "position %d", p);
    fmnist_dataset_free(&a);
}

/* A split "train" of 6 items in the test directory: images as s_images, labels i mod 10. */
static void s_train_split(size_t ndata, long bad_at, unsigned char bad)
{
    s_images(s_path("train-images-idx3-ubyte.gz"), FMNIST_IDX_MAGIC_IMAGES, 6, 28, 28, ndata);
    s_labels(s_path("train-labels-idx1-ubyte.gz"), FMNIST_IDX_MAGIC_LABELS, 6, 6, bad_at, bad);
}

Test(idx, load_items_keeps_only_the_items_asked_for)
{
    s_train_split(6 * PX, -1, 0);
    int64_t count = 0;
    cr_assert_eq(fmnist_dataset_peek_split(s_dir, "train", 5, &count), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(count, 5, "--train-limit 5 of 6");
    const int64_t items[3] = {4, 0, 2};
    fmnist_dataset_t ds;
    cr_assert_eq(fmnist_dataset_load_items_split(s_dir, "train", 5, items, 3, &ds), TROUPE_OK,
                 "%s", troupe_last_error());
    cr_assert_eq(ds.count, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(ds.labels[i], items[i] % 10, "label of entry %d", i);
        for (size_t k = 0; k < PX; k++)
            cr_assert_eq(ds.pixels[(size_t)i * PX + k],
                         (unsigned char)(((size_t)items[i] * PX + k) * 7), "entry %d pixel %zu",
                         i, k);
    }
    fmnist_dataset_free(&ds);
    /* an item beyond the limit, or twice */
    const int64_t beyond[2] = {1, 5}, twice[3] = {1, 3, 1};
    s_expect(fmnist_dataset_load_items_split(s_dir, "train", 5, beyond, 2, &ds),
             TROUPE_INVALID_ARGUMENT, "item 5", "out of range", NULL);
    s_expect(fmnist_dataset_load_items_split(s_dir, "train", 0, twice, 3, &ds),
             TROUPE_INVALID_ARGUMENT, "item 1", "given twice", NULL);
}

Test(idx, load_items_checks_the_whole_files)
{
    const char *im = s_path("train-images-idx3-ubyte.gz"), *lb = s_path("train-labels-idx1-ubyte.gz");
    const int64_t first[1] = {0};
    fmnist_dataset_t ds;
    s_train_split(5 * PX + 10, -1, 0); /* an item kept lies before the cut */
    s_expect(fmnist_dataset_load_items_split(s_dir, "train", 2, first, 1, &ds),
             TROUPE_INVALID_ARGUMENT, im, "truncated: the header declares 6 images of 28x28",
             "ends after 3930 bytes");
    s_train_split(6 * PX, 4, 11);
    s_expect(fmnist_dataset_load_items_split(s_dir, "train", 2, first, 1, &ds),
             TROUPE_INVALID_ARGUMENT, lb, "label 11 at index 4 is out of range 0..9", NULL);
    s_labels(lb, FMNIST_IDX_MAGIC_LABELS, 5, 5, -1, 0);
    s_expect(fmnist_dataset_load_items_split(s_dir, "train", 2, first, 1, &ds),
             TROUPE_INVALID_ARGUMENT, lb, "count mismatch: 5 labels", "holds 6 images");
    s_expect(fmnist_dataset_peek_split(s_dir, "train", 0, &(int64_t){0}),
             TROUPE_INVALID_ARGUMENT, lb, "count mismatch: 5 labels", "holds 6 images");
}

/* The data set deploy/setup.sh installs (dataset-fashion-mnist). */
Test(idx, installed_data_set_loads)
{
    fmnist_dataset_t ds;
    cr_assert_eq(fmnist_dataset_load_split(FMNIST_DEFAULT_DIR, "t10k", 0, &ds), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(ds.count, 10000);
    int per_class[FMNIST_NUM_CLASSES] = {0};
    for (int64_t i = 0; i < ds.count; i++)
        per_class[ds.labels[i]]++;
    for (int c = 0; c < FMNIST_NUM_CLASSES; c++)
        cr_assert_eq(per_class[c], 1000, "class %d", c);
    fmnist_dataset_free(&ds);
}
