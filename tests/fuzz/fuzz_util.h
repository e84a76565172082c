/* troupe — what the fuzz harnesses (tests/fuzz/fuzz_<target>.c) share:
 * - FUZZ_CHECK(cond): a rule of the target that must hold whatever the input; a broken one
 *   prints "<FUZZ_NAME>: broken: <cond> (<the last error>)" and traps (abort), which libFuzzer
 *   reports as a crash and keeps the input of. The harness defines FUZZ_NAME first.
 * - fuzz_check_refusal(st, path): a reader's refusal of the input at path is INVALID_ARGUMENT or
 *   RESOURCE_EXHAUSTED with a message that starts with the path.
 * - fuzz_memfile_put(data, size): the input as the whole content of a memory file (memfd), for
 *   readers that take a path; returns that path, /proc/self/fd/N (static storage, the same file
 *   for every input), so no disk is touched. Only where the harness defines _GNU_SOURCE (for
 *   memfd_create) before its first include.
 *
 * Thread safety: one harness thread (libFuzzer's). Ownership: the memory file stays open for the
 * process's life. */
#ifndef TROUPE_TESTS_FUZZ_UTIL_H
#define TROUPE_TESTS_FUZZ_UTIL_H

#include "base/status.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FUZZ_NAME
#error "define FUZZ_NAME (the harness's name, for its messages) before including fuzz_util.h"
#endif

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s: broken: %s (%s)\n", FUZZ_NAME, #cond, troupe_last_error());       \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static inline void fuzz_check_refusal(troupe_status_t st, const char *path)
{
    FUZZ_CHECK(st == TROUPE_INVALID_ARGUMENT || st == TROUPE_RESOURCE_EXHAUSTED);
    FUZZ_CHECK(strncmp(troupe_last_error(), path, strlen(path)) == 0);
}

#ifdef _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>

static inline const char *fuzz_memfile_put(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create(FUZZ_NAME, MFD_CLOEXEC);
        FUZZ_CHECK(fd >= 0);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    FUZZ_CHECK(ftruncate(fd, 0) == 0);
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
        FUZZ_CHECK(w > 0);
        done += (size_t)w;
    }
    return path;
}
#endif

#endif
