/* Tests for base/: status strings, last error, logging configuration, environment
 * configuration, allocation hooks, refcounts, clocks. */
#define _POSIX_C_SOURCE 200809L
#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/refcount.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "base/vec.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

Test(status, names_cover_every_code)
{
    cr_assert_str_eq(troupe_status_str(TROUPE_OK), "OK");
    cr_assert_str_eq(troupe_status_str(TROUPE_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
    cr_assert_str_eq(troupe_status_str(TROUPE_TRANSPORT_ERROR), "TRANSPORT_ERROR");
    for (int s = 0; s < TROUPE_STATUS_COUNT; s++)
        cr_assert_str_neq(troupe_status_str((troupe_status_t)s), "UNKNOWN_STATUS", "code %d", s);
    cr_assert_str_eq(troupe_status_str((troupe_status_t)99), "UNKNOWN_STATUS");
    cr_assert_str_eq(troupe_status_str((troupe_status_t)-1), "UNKNOWN_STATUS");
}

static void *s_thread_error(void *arg)
{
    (void)arg;
    /* A fresh thread sees no error from the main thread. */
    return (void *)(troupe_last_error()[0] == '\0' ? (void *)1 : NULL);
}

Test(status, last_error_is_thread_local_and_returned)
{
    troupe_status_t s = troupe__error(TROUPE_NOT_FOUND, "node %d missing", 7);
    cr_assert_eq(s, TROUPE_NOT_FOUND);
    cr_assert_str_eq(troupe_last_error(), "node 7 missing");
    pthread_t t;
    void *ok = NULL;
    pthread_create(&t, NULL, s_thread_error, NULL);
    pthread_join(t, &ok);
    cr_assert_not_null(ok);
    troupe_clear_error();
    cr_assert_str_eq(troupe_last_error(), "");
}

Test(status, public_error_set_records_the_message_and_returns_the_status)
{
    troupe_clear_error();
    cr_assert_eq(troupe_error_set(TROUPE_UNAVAILABLE, "peer %s gone", "rank 1"),
                 TROUPE_UNAVAILABLE);
    cr_assert_str_eq(troupe_last_error(), "peer rank 1 gone");
}

Test(status, long_messages_are_truncated_not_overflowed)
{
    char big[4096];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    troupe__error(TROUPE_INTERNAL, "%s", big);
    cr_assert_eq(strlen(troupe_last_error()), 1023);
}

/* A message over the buffer keeps its start and its end: a 5,000-character path in the
 * middle cannot push the reason out. */
Test(status, long_messages_keep_their_reason)
{
    char path[5001];
    memset(path, 'p', sizeof path - 1);
    path[sizeof path - 1] = '\0';
    troupe__error(TROUPE_NOT_FOUND, "dp_load: cannot open '/x/%s/ck': No such file or directory",
                  path);
    const char *m = troupe_last_error();
    cr_assert_eq(strlen(m), 1023);
    cr_assert(strncmp(m, "dp_load: cannot open '/x/ppp", 28) == 0, "%s", m);
    cr_assert(strstr(m, "ppp ... ppp"), "%s", m);
    const char *end = "ppp/ck': No such file or directory";
    cr_assert_str_eq(m + strlen(m) - strlen(end), end);
    char small[64];
    troupe__format_fit(small, sizeof small, "open '%s': gone", path);
    cr_assert_eq(strlen(small), 63);
    cr_assert(strstr(small, " ... ") && strcmp(small + 63 - 7, "': gone") == 0, "%s", small);
}

/* The registry: the layers' tables are there at start (TROUPE_CC_TIMEOUT_S among them), sorted
 * by name; a name registered twice or a NULL field is refused. */
Test(config, registry_lists_the_layers_variables_sorted)
{
    size_t n = troupe_config_var_count();
    cr_assert_geq(n, 20u);
    for (size_t i = 1; i < n; i++)
        cr_assert_lt(strcmp(troupe_config_var_at(i - 1)->name, troupe_config_var_at(i)->name), 0);
    cr_assert_null(troupe_config_var_at(n));
    const troupe_config_var_t *v = troupe_config_var_find("TROUPE_CC_TIMEOUT_S");
    cr_assert_not_null(v);
    cr_assert_str_eq(v->layer, "devices");
    cr_assert_str_eq(v->def, "600");
    static const troupe_config_var_t twice[] = {
        {"TROUPE_TIMEOUT_S", "x", "seconds", "1", "-", "-", "again"}};
    cr_assert_eq(troupe_config_register(twice, 1), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "TROUPE_TIMEOUT_S is registered twice"));
    static const troupe_config_var_t null_help[] = {
        {"TROUPE_X_TEST", "x", "seconds", "1", "-", "-", NULL}};
    cr_assert_eq(troupe_config_register(null_help, 1), TROUPE_INVALID_ARGUMENT);
    static const troupe_config_var_t fresh[] = {
        {"TROUPE_ZZ_TEST", "tests", "0|1", "0", "0|1", "-", "a test's own"}};
    cr_assert_eq(troupe_config_register(fresh, 1), TROUPE_OK);
    cr_assert_eq(troupe_config_var_count(), n + 1);
    cr_assert_str_eq(troupe_config_var_at(n)->name, "TROUPE_ZZ_TEST");
}

Test(log, configure_accepts_levels_and_subsystems)
{
    cr_assert_eq(troupe_log_configure("debug:ir,actors"), TROUPE_OK);
    cr_assert_eq(troupe_log_get_level(), TROUPE_LOG_DEBUG);
    cr_assert(troupe_log_enabled(TROUPE_LOG_DEBUG, TROUPE_SUB_IR));
    cr_assert(troupe_log_enabled(TROUPE_LOG_INFO, TROUPE_SUB_ACTORS));
    cr_assert_not(troupe_log_enabled(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT));
    cr_assert_not(troupe_log_enabled(TROUPE_LOG_TRACE, TROUPE_SUB_IR));
    cr_assert_eq(troupe_log_configure("warn"), TROUPE_OK);
    cr_assert_not(troupe_log_enabled(TROUPE_LOG_INFO, TROUPE_SUB_IR));
}

Test(log, configure_rejects_bad_spec_and_keeps_state)
{
    cr_assert_eq(troupe_log_configure("info"), TROUPE_OK);
    cr_assert_eq(troupe_log_configure("loud"), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "unknown level 'loud'") != NULL);
    cr_assert_eq(troupe_log_configure("debug:ir,gpu"), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "unknown subsystem 'gpu'") != NULL);
    cr_assert_eq(troupe_log_get_level(), TROUPE_LOG_INFO);
}

Test(log, lines_go_to_the_log_file_with_tag_and_rank)
{
    char path[] = "/tmp/troupe_test_log_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(troupe_log_set_file(path), TROUPE_OK);
    cr_assert_eq(troupe_log_configure("info:tools"), TROUPE_OK);
    troupe_log_set_thread_tag("cpu:0:1");
    troupe_log_set_rank(3);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS, "hello %d", 42);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_IR, "filtered out");
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TOOLS, "too verbose");
    cr_assert_eq(troupe_log_set_file(NULL), TROUPE_OK);
    troupe_log_set_rank(-1);
    troupe_log_set_thread_tag(NULL);
    FILE *f = fopen(path, "r");
    char buf[4096] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    unlink(path);
    buf[n] = '\0';
    cr_assert(strstr(buf, "hello 42") != NULL, "log: %s", buf);
    cr_assert(strstr(buf, " r3 cpu:0:1 | hello 42") != NULL, "log: %s", buf);
    cr_assert(strstr(buf, "filtered out") == NULL);
    cr_assert(strstr(buf, "too verbose") == NULL);
    cr_assert_eq(troupe_log_configure("warn"), TROUPE_OK);
}

Test(log, unopenable_file_is_not_found)
{
    cr_assert_eq(troupe_log_set_file("/nonexistent-dir/x.log"), TROUPE_NOT_FOUND);
    cr_assert(strstr(troupe_last_error(), "/nonexistent-dir/x.log") != NULL);
}

Test(config, defaults_without_environment)
{
    unsetenv("TROUPE_TIMEOUT_S");
    unsetenv("TROUPE_FUSION_BYTES");
    unsetenv("TROUPE_BACKEND");
    unsetenv("TROUPE_AUTO_HOST_TRANSFERS");
    unsetenv("TROUPE_STACK_THRESHOLD");
    unsetenv("TROUPE_LOOP_FUSION");
    unsetenv("TROUPE_ITERATION_SCALARS");
    unsetenv("TROUPE_HOST_MEMORY");
    unsetenv("TROUPE_COLL_SHM");
    unsetenv("TROUPE_GEMM");
    unsetenv("TROUPE_DENORMALS");
    unsetenv("TROUPE_LOG");
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert(troupe_config_flush_denormals());
    cr_assert(troupe_config_coll_shm());
    cr_assert(troupe_config_gemm_library());
    cr_assert_eq(troupe_config_timeout_s(), 120);
    cr_assert_eq(troupe_config_timeout_ns(), 120LL * 1000000000LL);
    cr_assert_eq(troupe_config_fusion_bytes(), (size_t)64 << 20);
    cr_assert_str_eq(troupe_config_backend(), "cpu");
    cr_assert(troupe_config_auto_host_transfers());
    cr_assert_eq(troupe_config_stack_threshold_bytes(), 16384);
    cr_assert(troupe_config_loop_fusion_outer());
    cr_assert(troupe_config_iteration_scalars());
    cr_assert_eq(troupe_config_host_memory(), TROUPE_HOST_MEMORY_AUTO);
}

Test(config, environment_is_read)
{
    setenv("TROUPE_TIMEOUT_S", "7", 1);
    setenv("TROUPE_FUSION_BYTES", "2048", 1);
    setenv("TROUPE_BACKEND", "sync", 1);
    setenv("TROUPE_AUTO_HOST_TRANSFERS", "0", 1);
    setenv("TROUPE_CACHE_DIR", "/tmp/troupe-test-cache", 1);
    setenv("TROUPE_COLL_SHM", "0", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert_not(troupe_config_coll_shm());
    unsetenv("TROUPE_COLL_SHM");
    setenv("TROUPE_GEMM", "generated", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert_not(troupe_config_gemm_library());
    cr_assert_eq(troupe_config_gemm_mode(), TROUPE_GEMM_MODE_GENERATED);
    setenv("TROUPE_GEMM", "openblas", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert(troupe_config_gemm_library());
    cr_assert_eq(troupe_config_gemm_mode(), TROUPE_GEMM_MODE_OPENBLAS);
    unsetenv("TROUPE_GEMM");
    setenv("TROUPE_DENORMALS", "keep", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert_not(troupe_config_flush_denormals());
    setenv("TROUPE_DENORMALS", "flush", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert(troupe_config_flush_denormals());
    unsetenv("TROUPE_DENORMALS");
    setenv("TROUPE_LOOP_FUSION", "same-space", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert_not(troupe_config_loop_fusion_outer());
    setenv("TROUPE_LOOP_FUSION", "prefix", 1);
    cr_assert_neq(troupe_config_reload(), TROUPE_OK, "an unknown TROUPE_LOOP_FUSION is refused");
    cr_assert(strstr(troupe_last_error(), "TROUPE_LOOP_FUSION") != NULL, "%s", troupe_last_error());
    unsetenv("TROUPE_LOOP_FUSION");
    setenv("TROUPE_ITERATION_SCALARS", "off", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert_not(troupe_config_iteration_scalars());
    setenv("TROUPE_ITERATION_SCALARS", "0", 1);
    cr_assert_neq(troupe_config_reload(), TROUPE_OK, "TROUPE_ITERATION_SCALARS takes on or off");
    cr_assert(strstr(troupe_last_error(), "TROUPE_ITERATION_SCALARS") != NULL, "%s",
              troupe_last_error());
    unsetenv("TROUPE_ITERATION_SCALARS");
    setenv("TROUPE_HOST_MEMORY", "off", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert_eq(troupe_config_host_memory(), TROUPE_HOST_MEMORY_OFF);
    setenv("TROUPE_HOST_MEMORY", "8000000000", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert_eq(troupe_config_host_memory(), 8000000000LL);
    setenv("TROUPE_HOST_MEMORY", "8G", 1);
    cr_assert_neq(troupe_config_reload(), TROUPE_OK, "TROUPE_HOST_MEMORY takes a byte count");
    cr_assert(strstr(troupe_last_error(), "TROUPE_HOST_MEMORY") != NULL, "%s", troupe_last_error());
    unsetenv("TROUPE_HOST_MEMORY");
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
    cr_assert_eq(troupe_config_timeout_s(), 7);
    cr_assert_eq(troupe_config_fusion_bytes(), 2048);
    cr_assert_str_eq(troupe_config_backend(), "sync");
    cr_assert_not(troupe_config_auto_host_transfers());
    cr_assert_str_eq(troupe_config_cache_dir(), "/tmp/troupe-test-cache");
}

Test(config, malformed_environment_keeps_default_and_names_variable)
{
    setenv("TROUPE_TIMEOUT_S", "soon", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "TROUPE_TIMEOUT_S='soon'") != NULL, "%s",
              troupe_last_error());
    cr_assert_eq(troupe_config_timeout_s(), 120);
    cr_assert_eq(troupe_config_check(), TROUPE_INVALID_ARGUMENT);
    setenv("TROUPE_TIMEOUT_S", "0", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_INVALID_ARGUMENT);
    unsetenv("TROUPE_TIMEOUT_S");
    setenv("TROUPE_FUSION_BYTES", "12", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "TROUPE_FUSION_BYTES") != NULL);
    unsetenv("TROUPE_FUSION_BYTES");
    setenv("TROUPE_COLL_SHM", "yes", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "TROUPE_COLL_SHM='yes'") != NULL, "%s",
              troupe_last_error());
    cr_assert(troupe_config_coll_shm(), "a malformed value keeps the default (1)");
    unsetenv("TROUPE_COLL_SHM");
    setenv("TROUPE_CUDA_GRAPHS", "on", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "TROUPE_CUDA_GRAPHS='on'") != NULL, "%s",
              troupe_last_error());
    setenv("TROUPE_CUDA_GRAPHS", "off", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK, "%s", troupe_last_error());
    unsetenv("TROUPE_CUDA_GRAPHS");
    setenv("TROUPE_CUDA_GATHER_GEMM", "cublas", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "TROUPE_CUDA_GATHER_GEMM='cublas'") != NULL, "%s",
              troupe_last_error());
    cr_assert_eq(troupe_config_cuda_gather_gemm(), TROUPE_CUDA_GATHER_GEMM_CHECKED,
                 "a malformed value keeps the default (checked)");
    setenv("TROUPE_CUDA_GATHER_GEMM", "library", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_config_cuda_gather_gemm(), TROUPE_CUDA_GATHER_GEMM_LIBRARY);
    setenv("TROUPE_CUDA_GATHER_GEMM", "tiles", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_config_cuda_gather_gemm(), TROUPE_CUDA_GATHER_GEMM_TILES);
    unsetenv("TROUPE_CUDA_GATHER_GEMM");
    setenv("TROUPE_GEMM", "blas", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "TROUPE_GEMM='blas'") != NULL, "%s",
              troupe_last_error());
    cr_assert(troupe_config_gemm_library(), "a malformed value keeps the default (library)");
    unsetenv("TROUPE_GEMM");
    setenv("TROUPE_DENORMALS", "0", 1);
    cr_assert_eq(troupe_config_reload(), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "TROUPE_DENORMALS='0'") != NULL, "%s",
              troupe_last_error());
    cr_assert(troupe_config_flush_denormals(), "a malformed value keeps the default (flush)");
    unsetenv("TROUPE_DENORMALS");
    cr_assert_eq(troupe_config_reload(), TROUPE_OK);
}

Test(config, setters_validate)
{
    cr_assert_eq(troupe_config_set_timeout_s(30), TROUPE_OK);
    cr_assert_eq(troupe_config_timeout_s(), 30);
    cr_assert_eq(troupe_config_set_timeout_s(0), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_config_timeout_s(), 30);
    cr_assert_eq(troupe_config_set_fusion_bytes(100), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_config_set_backend(""), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_config_set_cc("clang"), TROUPE_OK);
    cr_assert_str_eq(troupe_config_cc(), "clang");
    troupe_config_set_gemm_library(false);
    cr_assert_not(troupe_config_gemm_library());
    troupe_config_set_gemm_library(true);
    cr_assert(troupe_config_gemm_library());
    cr_assert_eq(troupe_config_gemm_mode(), TROUPE_GEMM_MODE_LIBRARY);
    troupe_config_set_gemm_mode(TROUPE_GEMM_MODE_OPENBLAS);
    cr_assert_eq(troupe_config_gemm_mode(), TROUPE_GEMM_MODE_OPENBLAS);
    troupe_config_set_gemm_mode((troupe_gemm_mode_t)42);
    cr_assert_eq(troupe_config_gemm_mode(), TROUPE_GEMM_MODE_OPENBLAS, "unknown mode ignored");
    troupe_config_set_gemm_mode(TROUPE_GEMM_MODE_LIBRARY);
    troupe_config_set_coll_shm(false);
    cr_assert_not(troupe_config_coll_shm());
    troupe_config_set_coll_shm(true);
    cr_assert(troupe_config_coll_shm());
}

static size_t s_allocs;
static void *s_count_malloc(void *u, size_t n)
{
    (void)u;
    s_allocs++;
    return malloc(n);
}
static void *s_count_realloc(void *u, void *p, size_t n)
{
    (void)u;
    return realloc(p, n);
}
static void s_count_free(void *u, void *p)
{
    (void)u;
    free(p);
}

Test(alloc, hooks_are_used_and_restorable)
{
    troupe_allocator_t a = {s_count_malloc, s_count_realloc, s_count_free, NULL};
    troupe_set_allocator(&a);
    char *s = troupe_strdup("abc");
    int *z = troupe_calloc(4, sizeof(int));
    cr_assert_eq(s_allocs, 2);
    cr_assert_str_eq(s, "abc");
    cr_assert_eq(z[3], 0);
    troupe_free(s);
    troupe_free(z);
    troupe_set_allocator(NULL);
    troupe_free(troupe_malloc(8));
    cr_assert_eq(s_allocs, 2);
}

Test(alloc, strdup_printf_formats_into_hooked_memory)
{
    troupe_allocator_t a = {s_count_malloc, s_count_realloc, s_count_free, NULL};
    s_allocs = 0;
    troupe_set_allocator(&a);
    char *s = troupe_strdup_printf("%s-%03d", "node", 7);
    cr_assert_eq(s_allocs, 1);
    cr_assert_str_eq(s, "node-007");
    troupe_free(s);
    troupe_set_allocator(NULL);
}

Test(alloc, calloc_overflow_returns_null)
{
    cr_assert_null(troupe_calloc(SIZE_MAX / 2, 4));
}

Test(refcount, last_release_reports_true)
{
    troupe_refcount_t r;
    troupe_refcount_init(&r);
    troupe_refcount_retain(&r);
    cr_assert_eq(troupe_refcount_get(&r), 2);
    cr_assert_not(troupe_refcount_release(&r));
    cr_assert(troupe_refcount_release(&r));
}

Test(clock, monotonic_and_deadlines)
{
    int64_t a = troupe_now_ns();
    nanosleep(&(struct timespec){0, 2000000}, NULL);
    int64_t b = troupe_now_ns();
    cr_assert_gt(b - a, 1000000);
    cr_assert_eq(troupe_deadline_after(TROUPE_TIMEOUT_INFINITE), TROUPE_TIMEOUT_INFINITE);
    cr_assert_eq(troupe_deadline_remaining(TROUPE_TIMEOUT_INFINITE), INT64_MAX);
    int64_t d = troupe_deadline_after(0);
    cr_assert_eq(troupe_deadline_remaining(d), 0);
    int64_t d2 = troupe_deadline_after(1000000000LL);
    cr_assert_gt(troupe_deadline_remaining(d2), 900000000LL);
    cr_assert_eq(troupe_deadline_after(INT64_MAX - 1), TROUPE_TIMEOUT_INFINITE);
}

Test(strbuf, grows_formats_and_hands_over_the_text)
{
    troupe__strbuf_t sb = TROUPE__STRBUF_INIT;
    cr_assert_str_eq(troupe__strbuf_cstr(&sb), "");
    troupe__strbuf_puts(&sb, "(a ");
    troupe__strbuf_printf(&sb, "%d %s", 42, "b");
    troupe__strbuf_putc(&sb, ')');
    troupe__strbuf_repeat(&sb, "..", 3);
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    troupe__strbuf_printf(&sb, "%s", big); /* longer than the small stack buffer */
    char *out = NULL;
    size_t n = 0;
    cr_assert_eq(troupe__strbuf_finish(&sb, "test", &out, &n), TROUPE_OK);
    cr_assert_eq(n, strlen("(a 42 b)......") + 999);
    cr_assert_eq(strncmp(out, "(a 42 b)......xxx", 17), 0);
    cr_assert_eq(strlen(out), n);
    cr_assert_null(sb.data);
    troupe_free(out);
}

Test(strbuf, escaped_quotes_control_bytes_and_keeps_both_ends)
{
    char buf[32];
    const char raw[] = "a\x1b[31m\tb\\\n\x7f\xff";
    cr_assert_str_eq(troupe__escaped(raw, sizeof raw - 1, buf, sizeof buf),
                     "a\\x1b[31m\\tb\\\\\\n\\x7f\\xff");
    char path[5000];
    memset(path, 'd', sizeof path);
    memcpy(path, "/tmp/", 5);
    memcpy(path + sizeof path - 8, "/ck.bin", 8);
    const char *e = troupe__escaped(path, strlen(path), buf, sizeof buf);
    cr_assert_eq(strlen(e), sizeof buf - 1, "%s", e);
    cr_assert(strncmp(e, "/tmp/", 5) == 0 && strstr(e, "...") &&
                  strcmp(e + strlen(e) - 7, "/ck.bin") == 0,
              "%s", e);
    /* an escape is never cut in half */
    char ctl[40];
    memset(ctl, 0x01, sizeof ctl);
    e = troupe__escaped(ctl, sizeof ctl, buf, sizeof buf);
    cr_assert(strlen(e) < sizeof buf && strstr(e, "\\x01...\\x01"), "%s", e);
}

Test(strbuf, fixed_builder_truncates_and_counts_like_snprintf)
{
    char buf[8];
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, sizeof buf);
    troupe__strbuf_puts(&sb, "abcdef");
    troupe__strbuf_printf(&sb, "%d", 12345);
    cr_assert_str_eq(buf, "abcdef1");
    cr_assert_eq(sb.len, 11);
    char *out = NULL;
    cr_assert_eq(troupe__strbuf_finish(&sb, "fixed", &out, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert_null(out);
}

static int s_fail_allocs;
static void *s_failing_malloc(void *user, size_t n)
{
    (void)user;
    return s_fail_allocs ? NULL : malloc(n);
}
static void *s_failing_realloc(void *user, void *p, size_t n)
{
    (void)user;
    return s_fail_allocs ? NULL : realloc(p, n);
}
static void s_plain_free(void *user, void *p)
{
    (void)user;
    free(p);
}

Test(strbuf, out_of_memory_is_sticky_and_reported_once_at_finish)
{
    troupe_allocator_t a = {s_failing_malloc, s_failing_realloc, s_plain_free, NULL};
    troupe_set_allocator(&a);
    troupe__strbuf_t sb = TROUPE__STRBUF_INIT;
    troupe__strbuf_puts(&sb, "kept");
    s_fail_allocs = 1;
    char big[600];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    troupe__strbuf_puts(&sb, big);
    cr_assert(sb.failed);
    s_fail_allocs = 0;
    troupe__strbuf_puts(&sb, "after"); /* ignored: the failure sticks */
    cr_assert_str_eq(troupe__strbuf_cstr(&sb), "kept");
    char *out = (char *)1;
    cr_assert_eq(troupe__strbuf_finish(&sb, "sexp", &out, NULL), TROUPE_RESOURCE_EXHAUSTED);
    cr_assert_null(out);
    cr_assert(strstr(troupe_last_error(), "sexp") != NULL);
    troupe_set_allocator(NULL);
}

Test(vec, push_grows_and_reserve_refuses_overflow)
{
    int *v = NULL;
    size_t n = 0, cap = 0;
    for (int i = 0; i < 100; i++)
        cr_assert(TROUPE__VEC_PUSH(v, n, cap, i * 3));
    cr_assert_eq(n, 100);
    cr_assert_geq(cap, 100);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(v[i], i * 3);
    size_t before = cap;
    cr_assert_not(TROUPE__VEC_RESERVE(v, cap, SIZE_MAX / 2));
    cr_assert_eq(cap, before);
    cr_assert_eq(v[99], 297);
    troupe_free(v);
}
