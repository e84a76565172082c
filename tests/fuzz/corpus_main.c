/* troupe — runs a fuzz target's seed corpus without libFuzzer: every file named on the command
 * line, or found in a directory named there, goes through the target's LLVMFuzzerTestOneInput
 * once (the same harness the fuzzer runs, compiled by the normal build), so the corpora run as
 * plain tests (label unit; tests/fuzz/CMakeLists.txt). A harness aborts on a broken invariant;
 * this driver fails when a file cannot be read or no input was found.
 * usage: corpus_<target> FILE_OR_DIR... */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int s_run_file(const char *path, int *count)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "corpus: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "corpus: out of memory reading %s\n", path);
        return 1;
    }
    /* a copy of exactly n bytes, so that AddressSanitizer sees a read past the input */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, n);
    free(buf);
    fprintf(stderr, "corpus: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    (*count)++;
    return 0;
}

int main(int argc, char **argv)
{
    int count = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "corpus: no such file or directory: %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            bad |= s_run_file(argv[i], &count);
            continue;
        }
        struct dirent **names = NULL;
        int n = scandir(argv[i], &names, NULL, alphasort);
        for (int j = 0; j < n; j++) {
            if (names[j]->d_name[0] != '.') {
                char path[4096];
                snprintf(path, sizeof path, "%s/%s", argv[i], names[j]->d_name);
                bad |= s_run_file(path, &count);
            }
            free(names[j]);
        }
        free(names);
    }
    fprintf(stderr, "corpus: %d input(s) ran\n", count);
    return bad || count == 0;
}
