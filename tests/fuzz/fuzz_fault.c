/* libFuzzer target for TROUPE_FAULT specifications (base/fault.c): every input (cut at its first
 * NUL) is configured as a specification. Either it is accepted, armed as given (the spec reads
 * back, some place is armed) and the hooks that neither kill nor sleep answer (allocation,
 * routine, control-plane message, checkpoint), or it is refused with INVALID_ARGUMENT naming the
 * bad part ("fault N '...'") and nothing stays armed; a broken rule traps. The seed corpus
 * (tests/data/fault_corpus) also runs as a plain test (corpus_fault, tests/fuzz/CMakeLists.txt).
 *
 * Build: deploy/fuzz.sh (clang); run: deploy/fuzz.sh SECONDS fault. */
#include "base/fault_impl.h"
#include "base/log.h"

#define FUZZ_NAME "fuzz_fault"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool quiet;
    if (!quiet) { /* the lines a fault writes when it fires */
        FUZZ_CHECK(troupe_log_set_file("/dev/null") == TROUPE_OK);
        quiet = true;
    }
    char *spec = malloc(size + 1);
    FUZZ_CHECK(spec != NULL);
    memcpy(spec, data, size);
    spec[size] = '\0';
    troupe_status_t st = troupe__fault_configure(spec);
    if (st == TROUPE_OK) {
        FUZZ_CHECK(strcmp(troupe__fault_spec(), spec) == 0);
        FUZZ_CHECK(spec[0] == '\0' || atomic_load(&troupe__fault_places) != 0);
        FUZZ_CHECK(troupe__fault_check() == TROUPE_OK);
        for (int k = 0; k < 3; k++) {
            st = troupe__fault_alloc("fuzz pool");
            FUZZ_CHECK(st == TROUPE_OK || st == TROUPE_RESOURCE_EXHAUSTED);
            st = troupe__fault_kernel(k == 0 ? "dp_grad" : "fuzz_routine");
            FUZZ_CHECK(st == TROUPE_OK || st == TROUPE_DEVICE_ERROR);
            int64_t ms = -1;
            troupe__fault_ctrl_action_t a = troupe__fault_ctrl("FUZZ", &ms);
            FUZZ_CHECK(a == TROUPE__FAULT_CTRL_PASS || a == TROUPE__FAULT_CTRL_DROP ||
                       (a == TROUPE__FAULT_CTRL_DELAY && ms >= 1));
            size_t n = 1000;
            if (troupe__fault_ckpt("/fuzz/ck.tmp", &n))
                FUZZ_CHECK(n == 500);
        }
    } else {
        FUZZ_CHECK(st == TROUPE_INVALID_ARGUMENT);
        /* the bad part named ("fault N '...'"), unless the whole text is too long */
        FUZZ_CHECK(strstr(troupe_last_error(), "fault ") != NULL || size > 1024);
        FUZZ_CHECK(atomic_load(&troupe__fault_places) == 0);
        FUZZ_CHECK(troupe__fault_check() == TROUPE_INVALID_ARGUMENT);
        FUZZ_CHECK(strncmp(troupe_last_error(), "TROUPE_FAULT='", 14) == 0);
    }
    FUZZ_CHECK(troupe__fault_configure(NULL) == TROUPE_OK);
    free(spec);
    return 0;
}
