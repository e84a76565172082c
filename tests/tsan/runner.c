/* troupe — runner for tests built against tests/tsan/criterion/criterion.h (TSAN builds).
 * Runs every registered test in a forked child with a 600 s alarm; exit status is non-zero
 * when any test failed. An optional argument filters tests by suite or name substring. */
#define _POSIX_C_SOURCE 200809L
#include "criterion/criterion.h"

#include <sys/wait.h>
#include <unistd.h>

#define S_MAX_TESTS 512

typedef struct s_test {
    const char *suite, *name;
    void (*fn)(void);
} s_test_t;

static s_test_t s_tests[S_MAX_TESTS];
static int s_count;
static int s_overflow;

typedef struct s_suite {
    const char *suite;
    struct troupe_tsan_suite_opts opts;
} s_suite_t;

static s_suite_t s_suites[64];
static int s_nsuites;

void troupe_tsan_register_suite(const char *suite, struct troupe_tsan_suite_opts opts)
{
    if (s_nsuites == 64) {
        s_overflow = 1;
        return;
    }
    s_suites[s_nsuites++] = (s_suite_t){suite, opts};
}

static const struct troupe_tsan_suite_opts *s_suite_opts(const char *suite)
{
    for (int i = 0; i < s_nsuites; i++)
        if (strcmp(s_suites[i].suite, suite) == 0)
            return &s_suites[i].opts;
    return NULL;
}

void troupe_tsan_register(const char *suite, const char *name, void (*fn)(void))
{
    if (s_count == S_MAX_TESTS) {
        s_overflow = 1;
        return;
    }
    s_tests[s_count++] = (s_test_t){suite, name, fn};
}

int main(int argc, char **argv)
{
    int failed = 0, ran = 0;
    if (s_overflow) {
        fprintf(stderr, "tsan runner: too many tests or suites registered\n");
        return 2;
    }
    for (int i = 0; i < s_count; i++) {
        if (argc > 1 && !strstr(s_tests[i].name, argv[1]) && !strstr(s_tests[i].suite, argv[1]))
            continue;
        ran++;
        fprintf(stderr, "[RUN ] %s::%s\n", s_tests[i].suite, s_tests[i].name);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            alarm(600);
            const struct troupe_tsan_suite_opts *o = s_suite_opts(s_tests[i].suite);
            if (o != NULL && o->init != NULL)
                o->init();
            s_tests[i].fn();
            if (o != NULL && o->fini != NULL)
                o->fini();
            exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "[FAIL] %s::%s (wait status 0x%x)\n", s_tests[i].suite,
                    s_tests[i].name, (unsigned)status);
            failed++;
        }
    }
    fprintf(stderr, "[====] tsan runner: %d tests, %d failed\n", ran, failed);
    return failed != 0;
}
