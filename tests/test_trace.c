/* Tests for the trace recorder (base/trace.h, base/trace_impl.h) and `troupe trace merge`
 * (tools/troupe/cmd_trace.c): files written with TROUPE_TRACE parse as JSON and hold what was
 * recorded (threads' names, escaped names, arguments, metadata), a full buffer counts what it
 * drops, tracing off writes nothing; the merge shifts ranks by their clock offsets, names the
 * late rank, and refuses malformed inputs with a line naming the file and the problem.
 * Criterion runs each test in a process of its own, so the recorder starts fresh in each. */
#define _GNU_SOURCE
#include "actors/troupe.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/trace_impl.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* An unwritable prefix is found at start-up (troupe_backend_open), not at the end of the run
 * when the timelines are lost. */
Test(trace, unwritable_prefix_is_refused_at_startup)
{
    cr_assert_eq(troupe_config_set_trace_prefix("/nonexistent-dir-for-troupe/t"), TROUPE_OK);
    troupe_backend_t *b = NULL;
    cr_assert_eq(troupe_backend_open("sync", TROUPE_ONLY_DEVICES_PARALLEL, &b),
                 TROUPE_FAILED_PRECONDITION);
    cr_assert_null(b);
    cr_assert(strstr(troupe_last_error(),
                     "TROUPE_TRACE '/nonexistent-dir-for-troupe/t': its timelines "
                     "(/nonexistent-dir-for-troupe/t.<rank>.json) cannot be written: directory "
                     "'/nonexistent-dir-for-troupe': No such file or directory"),
              "%s", troupe_last_error());
    cr_assert_eq(troupe_config_set_trace_prefix("/etc/passwd/t"), TROUPE_OK);
    cr_assert_eq(troupe_backend_open("sync", TROUPE_ONLY_DEVICES_PARALLEL, &b),
                 TROUPE_FAILED_PRECONDITION);
    cr_assert(strstr(troupe_last_error(), "directory '/etc/passwd': not a directory"), "%s",
              troupe_last_error());
    cr_assert_eq(troupe_config_set_trace_prefix(""), TROUPE_OK);
    cr_assert_eq(troupe_backend_open("sync", TROUPE_ONLY_DEVICES_PARALLEL, &b), TROUPE_OK, "%s",
                 troupe_last_error());
    troupe_backend_close(&b);
}

#if TROUPE_TEST_HAVE_JANSSON
#include <jansson.h>
#endif

#define S_TROUPE_BIN TROUPE_TEST_BUILD_DIR "/../tools/troupe/troupe"

/* A fresh directory for this test's files (its path in dir[cap]). */
static void s_tmpdir(char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/trace-test-XXXXXX", TROUPE_TEST_BUILD_DIR);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
}

Test(trace, off_records_and_writes_nothing)
{
    char dir[512], path[600];
    s_tmpdir(dir, sizeof dir);
    cr_assert_eq(troupe_config_set_trace_prefix(""), TROUPE_OK);
    cr_assert_not(troupe_trace_enabled());
    troupe_trace_span("test", "nothing", 1, 2);
    cr_assert_eq(troupe_trace_flush(), TROUPE_OK);
    snprintf(path, sizeof path, "%s/t.0.json", dir);
    cr_assert_neq(access(path, F_OK), 0, "a trace file appeared with tracing off");
}

Test(trace, bad_prefix_is_an_error)
{
    char longp[1200];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    cr_assert_eq(troupe_config_set_trace_prefix(longp), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_config_set_trace_prefix("/nonexistent-dir-for-troupe/t"), TROUPE_OK);
    troupe_trace_span("test", "x", 1, 2);
    cr_assert_eq(troupe_trace_flush(), TROUPE_NOT_FOUND);
    cr_assert(strstr(troupe_last_error(), "/nonexistent-dir-for-troupe/t.0.json") != NULL, "%s",
              troupe_last_error());
}

#if TROUPE_TEST_HAVE_JANSSON

static void s_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

static json_t *s_load(const char *path)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    cr_assert_not_null(root, "%s: line %d: %s", path, err.line, err.text);
    cr_assert(json_is_array(json_object_get(root, "traceEvents")), "%s: no traceEvents", path);
    return root;
}

/* The first complete event named `name` (NULL when none). */
static json_t *s_find(json_t *root, const char *name)
{
    size_t i;
    json_t *ev;
    json_array_foreach(json_object_get(root, "traceEvents"), i, ev)
    {
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        const char *n = json_string_value(json_object_get(ev, "name"));
        if (ph && n && strcmp(ph, "X") == 0 && strcmp(n, name) == 0)
            return ev;
    }
    return NULL;
}

/* The tid of the thread_name metadata naming `thread`, -1 when none. */
static json_int_t s_thread_tid(json_t *root, const char *thread)
{
    size_t i;
    json_t *ev;
    json_array_foreach(json_object_get(root, "traceEvents"), i, ev)
    {
        const char *n = json_string_value(json_object_get(ev, "name"));
        const char *a = json_string_value(json_object_get(json_object_get(ev, "args"), "name"));
        if (n && a && strcmp(n, "thread_name") == 0 && strcmp(a, thread) == 0)
            return json_integer_value(json_object_get(ev, "tid"));
    }
    return -1;
}

static void *s_worker(void *arg)
{
    troupe_log_set_thread_tag("worker:1");
    troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("bytes", 4096),
                               TROUPE__TRACE_STR("path", "shm")};
    troupe__trace_emit(TROUPE__TRACK_THREAD, "copy", "worker copy", 5000, 7500, a, 2);
    troupe__trace_emit(TROUPE__TRACK_COLLECTIVES, "collective", "allreduce #1", 8000, 9000, NULL,
                       0);
    (void)arg;
    return NULL;
}

Test(trace, writes_events_of_every_thread)
{
    char dir[512], prefix[600], path[700];
    s_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/t", dir);
    cr_assert_eq(troupe_config_set_trace_prefix(prefix), TROUPE_OK);
    cr_assert(troupe_trace_enabled());
    /* escaping: a quote, a backslash, a newline, an invalid byte, a valid UTF-8 letter */
    troupe_trace_span("test", "q\"b\\n\nx\xff\xc3\xa9", 1000, 2500);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, s_worker, NULL), 0);
    cr_assert_eq(pthread_join(t, NULL), 0); /* its buffer outlives it */
    cr_assert_eq(troupe_trace_flush(), TROUPE_OK);

    snprintf(path, sizeof path, "%s.0.json", prefix);
    json_t *root = s_load(path);
    json_t *e = s_find(root, "q\"b\\n\nx?\xc3\xa9");
    cr_assert_not_null(e, "the escaped name did not read back");
    cr_assert_float_eq(json_number_value(json_object_get(e, "ts")), 1.0, 1e-9);
    cr_assert_float_eq(json_number_value(json_object_get(e, "dur")), 1.5, 1e-9);
    cr_assert_eq(json_integer_value(json_object_get(e, "pid")), 0);
    cr_assert_eq(json_integer_value(json_object_get(e, "tid")), s_thread_tid(root, "host"));

    e = s_find(root, "worker copy");
    cr_assert_not_null(e);
    json_int_t wtid = s_thread_tid(root, "worker:1");
    cr_assert_geq(wtid, 0, "no thread_name for the worker");
    cr_assert_eq(json_integer_value(json_object_get(e, "tid")), wtid);
    json_t *args = json_object_get(e, "args");
    cr_assert_eq(json_integer_value(json_object_get(args, "bytes")), 4096);
    cr_assert_str_eq(json_string_value(json_object_get(args, "path")), "shm");
    cr_assert_str_eq(json_string_value(json_object_get(e, "cat")), "copy");

    e = s_find(root, "allreduce #1");
    cr_assert_not_null(e);
    json_int_t ctid = s_thread_tid(root, "collectives");
    cr_assert_geq(ctid, 0, "no thread_name for the collectives' track");
    cr_assert_eq(json_integer_value(json_object_get(e, "tid")), ctid);

    json_t *meta = json_object_get(root, "otherData");
    cr_assert_eq(json_integer_value(json_object_get(meta, "rank")), 0);
    cr_assert_eq(json_integer_value(json_object_get(meta, "events")), 3);
    cr_assert_eq(json_integer_value(json_object_get(meta, "dropped_events")), 0);
    cr_assert(json_is_number(json_object_get(meta, "clock_offset_us")));
    json_decref(root);

    /* a second flush rewrites the file with what came since */
    troupe_trace_span("test", "later", 3000, 4000);
    cr_assert_eq(troupe_trace_flush(), TROUPE_OK);
    root = s_load(path);
    cr_assert_not_null(s_find(root, "later"));
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(root, "otherData"), "events")),
                 4);
    json_decref(root);
}

static void *s_flood(void *arg)
{
    for (int i = 0; i < 3000; i++)
        troupe_trace_span("test", "flood", i, i + 1);
    (void)arg;
    return NULL;
}

Test(trace, a_full_buffer_counts_dropped_events)
{
    char dir[512], prefix[600], path[700];
    s_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/t", dir);
    cr_assert_eq(troupe_config_set_trace_prefix(prefix), TROUPE_OK);
    troupe__trace_set_max_events(1024);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, s_flood, NULL), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(troupe_trace_flush(), TROUPE_OK);
    snprintf(path, sizeof path, "%s.0.json", prefix);
    json_t *root = s_load(path);
    json_t *meta = json_object_get(root, "otherData");
    cr_assert_eq(json_integer_value(json_object_get(meta, "events")), 1024);
    cr_assert_eq(json_integer_value(json_object_get(meta, "dropped_events")), 3000 - 1024);
    json_decref(root);
}

/* ---- troupe trace merge ------------------------------------------------------------------- */

typedef struct s_run {
    int status;
    char out[16384];
    char err[4096];
} s_run_t;

static void s_slurp(FILE *f, char *buf, size_t cap)
{
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
}

/* Runs `troupe CMD SUB ARGS...` (args NULL-terminated; SUB may be NULL) with `env` (one
 * "NAME=value" or NULL) added to the environment. */
static void s_troupe(s_run_t *r, const char *cmd, const char *sub, const char *const *args,
                     const char *env)
{
    cr_assert_eq(access(S_TROUPE_BIN, X_OK), 0, "%s is not built", S_TROUPE_BIN);
    char *argv[16];
    size_t na = 0;
    argv[na++] = (char *)S_TROUPE_BIN;
    argv[na++] = (char *)cmd;
    if (sub != NULL)
        argv[na++] = (char *)sub;
    for (size_t i = 0; args[i] != NULL && na < 15; i++)
        argv[na++] = (char *)args[i];
    argv[na] = NULL;
    FILE *out = tmpfile(), *err = tmpfile();
    cr_assert(out != NULL && err != NULL);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fileno(out), 1);
        dup2(fileno(err), 2);
        if (env != NULL)
            putenv((char *)env);
        execv(argv[0], argv);
        _exit(127);
    }
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    s_slurp(out, r->out, sizeof r->out);
    s_slurp(err, r->err, sizeof r->err);
    fclose(out);
    fclose(err);
}

/* Runs `troupe trace merge ARGS...` (NULL-terminated). */
static void s_merge(s_run_t *r, const char *const *args)
{
    s_troupe(r, "trace", "merge", args, NULL);
}

Test(trace, the_troupe_command_is_not_traced)
{
    char dir[512], env[700], path[700];
    s_tmpdir(dir, sizeof dir);
    snprintf(env, sizeof env, "TROUPE_TRACE=%s/job", dir);
    s_run_t r;
    const char *none[] = {NULL};
    s_troupe(&r, "info", NULL, none, env);
    cr_assert_eq(r.status, 0, "%s", r.err);
    char line[700];
    snprintf(line, sizeof line, "config.trace: %s/job\n", dir);
    cr_assert(strstr(r.out, line) != NULL, "no '%s' in: %s", line, r.out);
    snprintf(path, sizeof path, "%s/job.0.json", dir);
    cr_assert_neq(access(path, F_OK), 0, "troupe info wrote the job's %s", path);
}

/* A rank's file: rank, clock offset (us), and its collectives' arrivals (ts in its own clock). */
static void s_rank_file(const char *path, int rank, double offset_us, const double *arrive,
                        int n)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\","
               "\"args\":{\"name\":\"rank %d\"}}",
            rank, rank);
    for (int i = 0; i < n; i++)
        fprintf(f,
                ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":1,\"ts\":%.3f,\"dur\":10.0,\"cat\":"
                "\"collective\",\"name\":\"allreduce #%d\",\"args\":{\"seq\":%d,\"bytes\":64,"
                "\"status\":\"OK\",\"phase\":\"%s\"}}",
                rank, arrive[i], i + 1, i + 1, i == 1 ? "test.late" : "test.other");
    fprintf(f, "\n],\"otherData\":{\"rank\":%d,\"size\":2,\"clock_offset_us\":%.3f,"
               "\"clock_rtt_us\":2.0,\"dropped_events\":0}}\n",
            rank, offset_us);
    cr_assert_eq(fclose(f), 0);
}

Test(trace, merge_aligns_clocks_and_names_the_late_rank)
{
    char dir[512], p0[600], p1[600], out[600];
    s_tmpdir(dir, sizeof dir);
    snprintf(p0, sizeof p0, "%s/m.0.json", dir);
    snprintf(p1, sizeof p1, "%s/m.1.json", dir);
    snprintf(out, sizeof out, "%s/merged.json", dir);
    /* rank 1's clock runs 1000 us ahead: on rank 0's clock it arrives at 100, 700, 300 */
    const double a0[] = {100, 200, 300}, a1[] = {1100, 1700, 1300};
    s_rank_file(p0, 0, 0.0, a0, 3);
    s_rank_file(p1, 1, 1000.0, a1, 3);
    s_run_t r;
    const char *args[] = {"-o", out, p0, p1, NULL};
    s_merge(&r, args);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    /* the collective with seq 2: rank 1 arrived 500 us after rank 0 */
    char phase[64];
    int last = -1;
    double late = 0;
    const char *line = strstr(r.out, "  allreduce #2 ");
    cr_assert_not_null(line, "%s", r.out);
    cr_assert_eq(sscanf(line, "%*s %*s %63s %d %lf", phase, &last, &late), 3, "%s", line);
    cr_assert_str_eq(phase, "test.late");
    cr_assert_eq(last, 1);
    cr_assert_float_eq(late, 500.0, 0.05);
    /* per step phase: test.late, one collective, rank 1 last */
    line = strstr(r.out, "per step phase");
    cr_assert_not_null(line, "%s", r.out);
    line = strstr(line, "  test.late ");
    size_t n = 0;
    cr_assert_not_null(line, "%s", r.out);
    cr_assert_eq(sscanf(line, "%63s %zu rank %d", phase, &n, &last), 3, "%s", line);
    cr_assert_eq(n, 1);
    cr_assert_eq(last, 1);
    json_t *root = s_load(out);
    json_t *e = NULL;
    size_t i;
    json_t *ev;
    json_array_foreach(json_object_get(root, "traceEvents"), i, ev)
    {
        if (json_integer_value(json_object_get(ev, "pid")) == 1 &&
            json_string_value(json_object_get(ev, "name")) != NULL &&
            strcmp(json_string_value(json_object_get(ev, "name")), "allreduce #2") == 0)
            e = ev;
    }
    cr_assert_not_null(e, "rank 1's events are not in the merged file");
    cr_assert_float_eq(json_number_value(json_object_get(e, "ts")), 700.0, 1e-6);
    cr_assert(json_is_true(json_object_get(json_object_get(root, "otherData"), "troupe_merged")));
    json_decref(root);

    /* a PREFIX argument stands for PREFIX.<rank>.json; the merged file is skipped */
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s/m", dir);
    const char *args2[] = {"-o", out, prefix, out, NULL};
    s_merge(&r, args2);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "skipped") != NULL, "%s", r.err);
    cr_assert(strstr(r.out, "test.late") != NULL, "%s", r.out);
}

/* Merges a good rank-0 file with `bad` as rank 1's; expects exit 1 and stderr naming the bad
 * file and holding `problem`. */
static void s_expect_refused(const char *bad, const char *problem)
{
    char dir[512], good[600], badp[600], out[600];
    s_tmpdir(dir, sizeof dir);
    snprintf(good, sizeof good, "%s/g.0.json", dir);
    snprintf(badp, sizeof badp, "%s/b.1.json", dir);
    snprintf(out, sizeof out, "%s/out.json", dir);
    const double a[] = {1, 2};
    s_rank_file(good, 0, 0.0, a, 2);
    s_write(badp, bad);
    s_run_t r;
    const char *args[] = {"-o", out, good, badp, NULL};
    s_merge(&r, args);
    cr_assert_eq(r.status, 1, "exit %d for %s: %s", r.status, problem, r.err);
    cr_assert(strstr(r.err, badp) != NULL, "the error does not name the file: %s", r.err);
    cr_assert(strstr(r.err, problem) != NULL, "expected '%s' in: %s", problem, r.err);
    cr_assert_neq(access(out, F_OK), 0, "an output was left behind");
}

Test(trace, merge_refuses_malformed_inputs)
{
    s_expect_refused("{\"traceEvents\": [ {\"ph\":", "not valid JSON: line 1");
    s_expect_refused("[1, 2]", "the top level is not an object");
    s_expect_refused("{\"otherData\":{\"rank\":1,\"clock_offset_us\":0}}", "no \"traceEvents\"");
    s_expect_refused("{\"traceEvents\":[],\"otherData\":{\"clock_offset_us\":0}}",
                     "otherData.rank");
    s_expect_refused("{\"traceEvents\":[],\"otherData\":{\"rank\":1}}", "clock_offset_us");
    s_expect_refused("{\"traceEvents\":[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":\"soon\","
                     "\"dur\":1,\"name\":\"x\"}],\"otherData\":{\"rank\":1,\"clock_offset_us\":0}}",
                     "traceEvents[0]: \"ts\" is not a finite number");
    s_expect_refused("{\"traceEvents\":[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":-1,"
                     "\"name\":\"x\"}],\"otherData\":{\"rank\":1,\"clock_offset_us\":0}}",
                     "\"dur\" >= 0");
    s_expect_refused("{\"traceEvents\":[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1,"
                     "\"name\":\"x\",\"cat\":\"collective\",\"args\":{}}],"
                     "\"otherData\":{\"rank\":1,\"clock_offset_us\":0}}",
                     "args.seq");
    s_expect_refused("{\"traceEvents\":[],\"otherData\":{\"rank\":0,\"clock_offset_us\":0}}",
                     "rank 0 again");
    s_expect_refused("", "");

    s_run_t r;
    const char *missing[] = {"/nonexistent-troupe-trace/x.0.json", NULL};
    s_merge(&r, missing);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "/nonexistent-troupe-trace/x.0.json: no such file") != NULL, "%s",
              r.err);
    const char *none[] = {NULL};
    s_merge(&r, none);
    cr_assert_eq(r.status, 2, "%s", r.err);
}

/* An input larger than a trace may be is refused before it is parsed (a sparse file: no disk). */
Test(trace, merge_refuses_an_oversized_input)
{
    char dir[512], path[600];
    s_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/big.0.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(truncate(path, (off_t)(UINT64_C(2) << 30) + 1), 0);
    s_run_t r;
    const char *args[] = {path, NULL};
    s_merge(&r, args);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "big.0.json: 2147483649 bytes, more than the 2147483648 bytes a trace "
                            "(PREFIX.<rank>.json) may have"),
              "%s", r.err);
    unlink(path);
}

#else

Test(trace, json_checks)
{
    cr_skip_test("built without libjansson (libjansson-dev): the trace files are not parsed");
}

#endif
