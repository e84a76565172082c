/* libFuzzer target for ir/text: every input goes through troupe_text_fuzz_one (the same entry
 * point the seed-corpus test in tests/test_text.c uses), which parses it as a low-level
 * procedure and as an assignment comp and checks that whatever parses prints, parses back to
 * an equal tree and prints identically. A broken round trip is a bug: trap so the fuzzer
 * records the input. Crashes, leaks and undefined behaviour are caught by the sanitizers.
 *
 * Build: CC=clang cmake -DTROUPE_BUILD_FUZZ=ON ...
 * Run:   fuzz_text WORK_DIR tests/data/text_corpus (new inputs go to WORK_DIR, the first). */
#include "ir/text.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    troupe_status_t st = troupe_text_fuzz_one(data, size);
    if (st == TROUPE_INTERNAL)
        __builtin_trap();
    return 0;
}
