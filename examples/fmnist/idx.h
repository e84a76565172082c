/* fmnist — reading the Fashion-MNIST data set from IDX files (gzip-compressed or plain).
 *
 * Format (Y. LeCun's MNIST page; Fashion-MNIST uses the same files): a big-endian header,
 *   labels  (idx1-ubyte): magic 0x00000801, int32 count, then `count` bytes;
 *   images  (idx3-ubyte): magic 0x00000803, int32 count, int32 rows, int32 cols, then
 *                         count*rows*cols bytes, row-major, 0 = background.
 * Debian's `dataset-fashion-mnist` installs them as
 *   /usr/share/datasets/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
 * Files are read with zlib (gzopen/gzread, which also reads uncompressed files unchanged).
 *
 * Every problem is an error naming the file and the problem in one line, in
 * troupe_last_error(): "<path>: <problem>", e.g.
 *   "/d/train-labels-idx1-ubyte.gz: cannot open: No such file or directory"
 *   "/d/train-images-idx3-ubyte.gz: bad magic 0x00000802 (expected 0x00000803: IDX ubyte
 *    images)"
 *   "/d/t10k-images-idx3-ubyte.gz: truncated: the header declares 10000 images of 28x28
 *    (7840000 bytes) but the data ends after 5000 bytes"
 *   "/d/train-labels-idx1-ubyte.gz: label 11 at index 7 is out of range 0..9"
 *
 * Thread safety: reentrant (no shared state). Ownership: a loaded fmnist_dataset_t owns its
 * arrays; fmnist_dataset_free releases them.
 */
#ifndef FMNIST_IDX_H
#define FMNIST_IDX_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FMNIST_IDX_MAGIC_LABELS 0x00000801u
#define FMNIST_IDX_MAGIC_IMAGES 0x00000803u
#define FMNIST_IMAGE_ROWS 28
#define FMNIST_IMAGE_COLS 28
#define FMNIST_IMAGE_PIXELS (FMNIST_IMAGE_ROWS * FMNIST_IMAGE_COLS)
#define FMNIST_NUM_CLASSES 10
#define FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/* One split of the data set: `count` images of rows x cols bytes and their labels. */
typedef struct fmnist_dataset {
    int64_t count;
    int64_t rows, cols;
    uint8_t *pixels; /* count * rows * cols, row-major per image */
    uint8_t *labels; /* count, each in 0..FMNIST_NUM_CLASSES-1 */
} fmnist_dataset_t;

/* Reads an idx3-ubyte image file: validates the magic, a positive count, rows x cols equal to
 * 28x28, and that exactly count*rows*cols data bytes follow (fewer: "truncated", more:
 * "trailing data"). *out_pixels (caller frees with free()) gets the bytes; *out_count,
 * *out_rows, *out_cols the header values.
 * Errors (message "<path>: <problem>"): NOT_FOUND (cannot open), INVALID_ARGUMENT (bad magic,
 * bad count or dims, truncated or corrupt gzip stream, trailing data), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t fmnist_idx_read_images(const char *path, uint8_t **out_pixels,
                                                       int64_t *out_count, int64_t *out_rows,
                                                       int64_t *out_cols);

/* Reads an idx1-ubyte label file the same way and checks every label is below num_classes
 * (naming the first bad one and its index). *out_labels (caller frees with free()). */
TROUPE_MUST_USE troupe_status_t fmnist_idx_read_labels(const char *path, int num_classes,
                                                       uint8_t **out_labels, int64_t *out_count);

/* Reads an image file and its label file and checks that both hold the same number of items
 * (INVALID_ARGUMENT naming both files and both counts). `limit` > 0 keeps only the first
 * `limit` items (the whole files are still validated). *out is owned by the caller. */
TROUPE_MUST_USE troupe_status_t fmnist_dataset_load(const char *images_path,
                                                    const char *labels_path, int64_t limit,
                                                    fmnist_dataset_t *out);

/* fmnist_dataset_load of `dir`/<split>-images-idx3-ubyte.gz and `dir`/<split>-labels-idx1-
 * ubyte.gz, split "train" or "t10k". */
TROUPE_MUST_USE troupe_status_t fmnist_dataset_load_split(const char *dir, const char *split,
                                                          int64_t limit, fmnist_dataset_t *out);

/* The item count of `dir`/<split> (as fmnist_dataset_load_split names its files) from the two
 * headers alone, reduced to `limit` when 0 < limit < count: checks each file's magic, its
 * count (and the images' size) and that the two counts agree, naming the file. The data is
 * not read: a truncated or corrupt body is found by fmnist_dataset_load_items_split. */
TROUPE_MUST_USE troupe_status_t fmnist_dataset_peek_split(const char *dir, const char *split,
                                                          int64_t limit, int64_t *out_count);

/* Only the items items[0..n) (indices below the count that `limit` leaves, each at most once)
 * of `dir`/<split>: out->count = n, item i of *out is item items[i] of the files. Both files
 * are read through once, in chunks of about 1 MiB, and checked as fmnist_dataset_load checks
 * them (same errors, same messages); nothing else of them is kept, so *out holds n images.
 * INVALID_ARGUMENT also for an index out of range or given twice. *out is owned by the caller. */
TROUPE_MUST_USE troupe_status_t fmnist_dataset_load_items_split(const char *dir, const char *split,
                                                                int64_t limit, const int64_t *items,
                                                                int64_t n, fmnist_dataset_t *out);

/* The order fmnist_dataset_shuffle gives `count` items with `seed`, as indices: out[p] (count
 * entries) is the item that lands at position p. */
void fmnist_shuffle_order(int64_t count, uint64_t seed, int64_t *out);

/* Frees the arrays and zeroes *ds (NULL-safe). */
void fmnist_dataset_free(fmnist_dataset_t *ds);

/* Reorders the items in place with a Fisher-Yates shuffle whose draws come from Threefry4x32
 * (crypto variant, ir/ops.h) keyed by `seed`: the same seed gives the same order everywhere. */
void fmnist_dataset_shuffle(fmnist_dataset_t *ds, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
