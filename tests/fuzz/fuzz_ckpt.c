/* libFuzzer target for the checkpoint reader (parallel/dp_ckpt.c, troupe_dp_checkpoint_parse:
 * the reader troupe_dp_load and `troupe run` use before anything else). Whatever the bytes,
 * it must either accept them with a description that is true to the format (a version from 1
 * to 4, 0 to 2 optimizer state arrays, a note no longer than TROUPE_DP_NOTE_MAX and terminated,
 * a v3 layout of at least one rank and stream, a v4 loss scale finite and > 0 with counts
 * >= 0) or refuse them with INVALID_ARGUMENT naming the
 * image; a broken rule traps. Crashes, leaks and undefined behaviour in the reader (compiled
 * with the fuzzer's instrumentation and sanitizers) are caught by the sanitizers. The seed
 * corpus (tests/data/ckpt_corpus: checkpoints of the dp tests' model, SGD with and without
 * momentum, AdamW, with and without a plan and note, with loss scaling (v4), and damaged
 * copies) also runs as a plain
 * test (corpus_ckpt, tests/fuzz/CMakeLists.txt). Each input is parsed as it is, then with its
 * last 4 bytes replaced by the right CRC, which random mutations almost never produce.
 *
 * Build: deploy/fuzz.sh (clang); run: deploy/fuzz.sh SECONDS ckpt. */
#include "parallel/dp.h"

#define FUZZ_NAME "fuzz_ckpt"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Parses img[size] and checks the outcome. */
static void s_parse(const uint8_t *img, size_t size)
{
    troupe_dp_checkpoint_info_t *info = malloc(sizeof *info);
    FUZZ_CHECK(info != NULL);
    memset(info, 0xa5, sizeof *info);
    troupe_status_t st = troupe_dp_checkpoint_parse(img, size, "fuzz image", info);
    if (st == TROUPE_OK) {
        FUZZ_CHECK(info->version >= 1 && info->version <= 4);
        FUZZ_CHECK(info->nstate >= 0 && info->nstate <= 2);
        FUZZ_CHECK(info->optimizer == TROUPE_OPT_SGD || info->optimizer == TROUPE_OPT_ADAMW);
        FUZZ_CHECK(info->steps >= 0);
        FUZZ_CHECK(info->param_bytes <= size);
        FUZZ_CHECK(memchr(info->note, '\0', sizeof info->note) != NULL);
        if (info->version >= 3)
            FUZZ_CHECK(info->ranks >= 1 && info->streams >= 1);
        if (info->version >= 4)
            FUZZ_CHECK(info->loss_scale > 0.0 && info->loss_scale <= 1.7976931348623157e308 &&
                       info->loss_scale_good >= 0 && info->skipped_steps >= 0);
    } else {
        FUZZ_CHECK(st == TROUPE_INVALID_ARGUMENT || st == TROUPE_RESOURCE_EXHAUSTED);
        FUZZ_CHECK(strstr(troupe_last_error(), "fuzz image") != NULL);
    }
    free(info);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact copy: a read past the image is a heap overflow the sanitizer reports */
    uint8_t *img = malloc(size ? size : 1);
    FUZZ_CHECK(img != NULL);
    memcpy(img, data, size);
    s_parse(img, size);
    /* again with its last 4 bytes made the CRC-32 of the bytes before them (as a save writes
     * it), so that mutated structures also reach what the reader does after the CRC check */
    if (size >= 4) {
        uLong crc = crc32(crc32(0L, Z_NULL, 0), img, (uInt)(size - 4));
        for (int i = 0; i < 4; i++)
            img[size - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
        s_parse(img, size);
    }
    free(img);
    return 0;
}
