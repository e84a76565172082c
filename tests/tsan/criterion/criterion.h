/* troupe — a minimal stand-in for Criterion's test API, used only for ThreadSanitizer builds.
 *
 * Criterion 2.4 cannot start under TSAN (its BoxFort arena fails to initialise:
 * Snaipe/Criterion#274), so the actor tests compile against this header when
 * TROUPE_ENABLE_TSAN=ON. It supports the subset those tests use: Test(suite, name),
 * TestSuite(suite, .init/.fini), cr_assert*, cr_skip_test. Each test runs in a forked child (tests/tsan/runner.c); an assert
 * failure or a TSAN report (TSAN_OPTIONS=halt_on_error=1) fails it.
 */
#ifndef TROUPE_TSAN_CRITERION_H
#define TROUPE_TSAN_CRITERION_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void troupe_tsan_register(const char *suite, const char *name, void (*fn)(void));

/* Suite options: the .init/.fini members of Criterion's TestSuite(...) (others ignored). */
struct troupe_tsan_suite_opts {
    void (*init)(void);
    void (*fini)(void);
    double timeout;
    const char *description;
};
void troupe_tsan_register_suite(const char *suite, struct troupe_tsan_suite_opts opts);

#define TestSuite(suite, ...)                                                                     \
    __attribute__((constructor)) static void suite##_suite_reg(void)                              \
    {                                                                                             \
        struct troupe_tsan_suite_opts o = {__VA_ARGS__};                                          \
        troupe_tsan_register_suite(#suite, o);                                                    \
    }

#define Test(suite, name, ...)                                                                    \
    static void suite##_##name(void);                                                             \
    __attribute__((constructor)) static void suite##_##name##_reg(void)                           \
    {                                                                                             \
        troupe_tsan_register(#suite, #name, suite##_##name);                                      \
    }                                                                                             \
    static void suite##_##name(void)

#define TROUPE_TSAN_FAIL(expr)                                                                    \
    do {                                                                                          \
        fprintf(stderr, "assertion failed %s:%d: %s\n", __FILE__, __LINE__, expr);                \
        fflush(stderr);                                                                           \
        _Exit(1);                                                                                 \
    } while (0)

#define TROUPE_TSAN_CHECK(ok, text)                                                               \
    do {                                                                                          \
        if (!(ok))                                                                                \
            TROUPE_TSAN_FAIL(text);                                                               \
    } while (0)

#define cr_assert(c, ...) TROUPE_TSAN_CHECK((c), #c)
#define cr_assert_not(c, ...) TROUPE_TSAN_CHECK(!(c), "!" #c)
#define cr_assert_eq(a, b, ...) TROUPE_TSAN_CHECK((a) == (b), #a " == " #b)
#define cr_assert_neq(a, b, ...) TROUPE_TSAN_CHECK((a) != (b), #a " != " #b)
#define cr_assert_lt(a, b, ...) TROUPE_TSAN_CHECK((a) < (b), #a " < " #b)
#define cr_assert_leq(a, b, ...) TROUPE_TSAN_CHECK((a) <= (b), #a " <= " #b)
#define cr_assert_gt(a, b, ...) TROUPE_TSAN_CHECK((a) > (b), #a " > " #b)
#define cr_assert_geq(a, b, ...) TROUPE_TSAN_CHECK((a) >= (b), #a " >= " #b)
#define cr_assert_null(a, ...) TROUPE_TSAN_CHECK((a) == NULL, #a " == NULL")
#define cr_assert_not_null(a, ...) TROUPE_TSAN_CHECK((a) != NULL, #a " != NULL")
#define cr_assert_str_eq(a, b, ...) TROUPE_TSAN_CHECK(strcmp((a), (b)) == 0, #a " str== " #b)
#define cr_assert_str_neq(a, b, ...) TROUPE_TSAN_CHECK(strcmp((a), (b)) != 0, #a " str!= " #b)
#define cr_assert_fail(...) TROUPE_TSAN_FAIL("cr_assert_fail")
#define cr_skip_test(...)                                                                         \
    do {                                                                                          \
        fprintf(stderr, "skipped\n");                                                             \
        _Exit(0);                                                                                 \
    } while (0)

#endif
