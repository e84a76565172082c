/* libFuzzer target for the trainer's IDX reader (examples/fmnist/idx.c): every input is a file
 * (through a memory file, /proc/self/fd/N, so no disk is touched) read both as an image file
 * and as a label file. Whatever it holds, the reader must either succeed with a result that
 * satisfies its contract (28x28 images, a count from 1 to 100000000, exactly count*784 pixels;
 * every label below 10) or fail with INVALID_ARGUMENT / RESOURCE_EXHAUSTED and a message
 * naming the file; a broken contract traps. Crashes, leaks and undefined behaviour are caught by
 * the sanitizers. The seed corpus (tests/data/idx_corpus) also runs as a plain test
 * (corpus_idx, tests/fuzz/CMakeLists.txt).
 *
 * Build: deploy/fuzz.sh (clang); run: deploy/fuzz.sh SECONDS idx. */
#define _GNU_SOURCE /* memfd_create */
#include "idx.h"

#define FUZZ_NAME "fuzz_idx"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *s_path; /* the memory file holding the input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_path = fuzz_memfile_put(data, size);
    uint8_t *pixels = NULL;
    int64_t count = 0, rows = 0, cols = 0;
    troupe_status_t st = fmnist_idx_read_images(s_path, &pixels, &count, &rows, &cols);
    if (st == TROUPE_OK) {
        FUZZ_CHECK(pixels != NULL);
        FUZZ_CHECK(count >= 1 && count <= 100000000);
        FUZZ_CHECK(rows == FMNIST_IMAGE_ROWS && cols == FMNIST_IMAGE_COLS);
        volatile uint8_t sink = pixels[count * rows * cols - 1]; /* the whole array is there */
        (void)sink;
        free(pixels);
    } else {
        FUZZ_CHECK(pixels == NULL);
        fuzz_check_refusal(st, s_path);
    }
    uint8_t *labels = NULL;
    st = fmnist_idx_read_labels(s_path, FMNIST_NUM_CLASSES, &labels, &count);
    if (st == TROUPE_OK) {
        FUZZ_CHECK(labels != NULL && count >= 1 && count <= 100000000);
        for (int64_t i = 0; i < count; i++)
            FUZZ_CHECK(labels[i] < FMNIST_NUM_CLASSES);
        free(labels);
    } else {
        FUZZ_CHECK(labels == NULL);
        fuzz_check_refusal(st, s_path);
    }
    return 0;
}
