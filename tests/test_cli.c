/* Tests for the `troupe` command (tools/troupe/main.c): it runs the built binary
 * (TROUPE_TEST_BUILD_DIR/../tools/troupe/troupe, built by the default target) with a controlled
 * environment and checks its output lines and exit status. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "troupe_config.h"

#include <criterion/criterion.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define S_TROUPE_BIN TROUPE_TEST_BUILD_DIR "/../tools/troupe/troupe"
#define S_MAX_ENV 512

typedef struct s_run {
    int status; /* exit status, or -1 when the child did not exit normally */
    char out[16384];
    char err[4096];
} s_run_t;

static void s_slurp(FILE *f, char *buf, size_t cap)
{
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
}

/* Runs troupe with argv (NULL-terminated, argv[0] is set here) in this process's environment
 * minus every TROUPE_* variable, plus `extra_env` (NULL-terminated "NAME=value", may be NULL). */
static void s_troupe(s_run_t *r, const char *const *args, const char *const *extra_env)
{
    cr_assert_eq(access(S_TROUPE_BIN, X_OK), 0,
                 "%s is not built (cmake --build <dir> builds it with the default target)",
                 S_TROUPE_BIN);
    char *argv[16];
    size_t na = 0;
    argv[na++] = (char *)S_TROUPE_BIN;
    for (size_t i = 0; args[i] != NULL && na < 15; i++)
        argv[na++] = (char *)args[i];
    argv[na] = NULL;
    char *envp[S_MAX_ENV];
    size_t ne = 0;
    for (char **e = environ; *e != NULL && ne < S_MAX_ENV - 16; e++)
        if (strncmp(*e, "TROUPE_", 7) != 0)
            envp[ne++] = *e;
    for (size_t i = 0; extra_env != NULL && extra_env[i] != NULL && ne < S_MAX_ENV - 1; i++)
        envp[ne++] = (char *)extra_env[i];
    envp[ne] = NULL;

    FILE *out = tmpfile(), *err = tmpfile();
    cr_assert(out != NULL && err != NULL);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (dup2(fileno(out), 1) < 0 || dup2(fileno(err), 2) < 0)
            _exit(126);
        execve(S_TROUPE_BIN, argv, envp);
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

/* The value of the first line "key: value" of text, copied into buf ("" and false if absent). */
static bool s_value(const char *text, const char *key, char *buf, size_t cap)
{
    size_t kl = strlen(key);
    buf[0] = '\0';
    for (const char *p = text; *p != '\0';) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len >= kl + 2 && strncmp(p, key, kl) == 0 && p[kl] == ':' && p[kl + 1] == ' ') {
            size_t vl = len - kl - 2;
            if (vl >= cap)
                vl = cap - 1;
            memcpy(buf, p + kl + 2, vl);
            buf[vl] = '\0';
            return true;
        }
        p += len + (eol ? 1 : 0);
    }
    return false;
}

static size_t s_count_lines(const char *text)
{
    size_t n = 0;
    for (const char *p = text; *p != '\0'; p++)
        n += *p == '\n';
    return n;
}

Test(cli, info_prints_key_value_lines_for_every_fact)
{
    s_run_t r;
    s_troupe(&r, (const char *[]){"info", NULL}, NULL);
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_str_empty(r.err, "stderr: %s", r.err);

    /* Every line is `key: value` with a key of [a-z0-9._]. */
    for (const char *p = r.out; *p != '\0';) {
        const char *eol = strchr(p, '\n');
        cr_assert_not_null(eol, "last line not terminated: %s", p);
        size_t k = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789._");
        cr_assert(k > 0 && p[k] == ':' && p[k + 1] == ' ', "not a key: value line: %.*s",
                  (int)(eol - p), p);
        p = eol + 1;
    }

    char v[512];
    cr_assert(s_value(r.out, "troupe", v, sizeof v));
    cr_assert_str_eq(v, TROUPE_VERSION_STRING);
    /* build.cuda: 0, or "nvrtc only" while the toolkit is found but no cuda backend is built,
     * or 1 with that backend (checked against backends: below). */
    char cuda[64];
    cr_assert(s_value(r.out, "build.cuda", cuda, sizeof cuda));
    if (!TROUPE_HAVE_CUDA)
        cr_assert_str_eq(cuda, "0");
    cr_assert(s_value(r.out, "build.mpi", v, sizeof v));
    cr_assert_eq(atoi(v), TROUPE_HAVE_MPI);
    /* host.cores: the cores this process may run on; host.cores_online: the machine's. */
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    cr_assert(s_value(r.out, "host.cores", v, sizeof v));
    cr_assert_eq(atol(v), CPU_COUNT(&set));
    cr_assert(s_value(r.out, "host.cores_online", v, sizeof v));
    cr_assert_eq(atol(v), sysconf(_SC_NPROCESSORS_ONLN));

    /* backends: every built driver; sync and cpu always are, each with one device. */
    cr_assert(s_value(r.out, "backends", v, sizeof v), "no backends: line in\n%s", r.out);
    cr_assert(strstr(v, "cpu") != NULL && strstr(v, "sync") != NULL, "backends: %s", v);
    if (!TROUPE_HAVE_CUDA)
        cr_assert_null(strstr(v, "cuda"), "backends: %s in a build without CUDA", v);
    else
        cr_assert_str_eq(cuda, strstr(v, "cuda") ? "1" : "nvrtc only", "backends: %s", v);
    /* Each listed backend has its devices or its error. */
    char names[512];
    snprintf(names, sizeof names, "%s", v);
    char *save = NULL;
    for (char *name = strtok_r(names, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
        char key[128], w[512];
        snprintf(key, sizeof key, "backend.%s.devices", name);
        bool devices = s_value(r.out, key, w, sizeof w);
        snprintf(key, sizeof key, "backend.%s.error", name);
        bool error = s_value(r.out, key, w, sizeof w);
        cr_assert(devices != error, "backend %s: devices line %d, error line %d", name, devices,
                  error);
    }
    cr_assert(s_value(r.out, "backend.sync.devices", v, sizeof v));
    cr_assert_str_eq(v, "1");
    cr_assert(s_value(r.out, "backend.sync.device.0.suggested_streams", v, sizeof v));
    cr_assert_str_eq(v, "1");
    cr_assert(s_value(r.out, "backend.cpu.devices", v, sizeof v));
    cr_assert_str_eq(v, "1");
    /* suggested_streams are for the config named once (parallel/dp's); the cpu backend's
     * follow the CPU affinity. No device id: it is a counter of this process. */
    cr_assert(s_value(r.out, "backends.stream_config", v, sizeof v));
    cr_assert_str_eq(v, "most_parallel_streams");
    cr_assert(s_value(r.out, "backend.cpu.device.0.suggested_streams", v, sizeof v));
    cr_assert_eq(atoi(v), CPU_COUNT(&set));
    cr_assert_null(strstr(r.out, ".id: "), "%s", r.out);

    /* Library versions. */
    cr_assert(s_value(r.out, "mpi", v, sizeof v), "no mpi: line in\n%s", r.out);
    if (TROUPE_HAVE_MPI)
        cr_assert(v[0] != '\0' && strcmp(v, "none") != 0, "mpi: %s", v);
    else
        cr_assert_str_eq(v, "none");
    cr_assert(s_value(r.out, "cuda", v, sizeof v), "no cuda: line in\n%s", r.out);
    if (TROUPE_HAVE_CUDA)
        cr_assert_eq(strncmp(v, "nvrtc ", 6), 0, "cuda: %s", v);
    else
        cr_assert_str_eq(v, "none (built without CUDA)");
    cr_assert(s_value(r.out, "libzmq", v, sizeof v));
    cr_assert(s_value(r.out, "czmq", v, sizeof v));

    /* Configuration defaults (no TROUPE_* in the environment). */
    cr_assert(s_value(r.out, "config.timeout_s", v, sizeof v));
    cr_assert_str_eq(v, "120");
    cr_assert(s_value(r.out, "config.fusion_bytes", v, sizeof v));
    cr_assert_str_eq(v, "67108864");
    cr_assert(s_value(r.out, "config.backend", v, sizeof v));
    cr_assert_str_eq(v, "cpu");
    cr_assert(s_value(r.out, "config.coll_shm", v, sizeof v));
    cr_assert_str_eq(v, "1");
    cr_assert(s_value(r.out, "config.log", v, sizeof v));
    cr_assert_str_eq(v, "warn");
    cr_assert(s_value(r.out, "config.fault", v, sizeof v));
    cr_assert_str_eq(v, "");
    cr_assert(s_value(r.out, "config.cpu_devices", v, sizeof v), "%s", r.out);
    cr_assert_str_eq(v, "1");
    cr_assert(s_value(r.out, "config.device", v, sizeof v), "%s", r.out);
    cr_assert_str_eq(v, "");
    cr_assert(s_value(r.out, "config.cuda_aware", v, sizeof v), "%s", r.out);
    cr_assert_str_eq(v, "auto");
    /* what this build's MPI says about device memory (the Debian Open MPI here: 0) */
    cr_assert(s_value(r.out, "cluster.cuda_aware", v, sizeof v), "%s", r.out);
    if (TROUPE_HAVE_MPI)
        cr_assert(strncmp(v, "yes (", 5) == 0 || strncmp(v, "no (", 4) == 0 ||
                      strncmp(v, "unknown (", 9) == 0,
                  "cluster.cuda_aware: %s", v);
    else
        cr_assert_str_eq(v, "none (built without MPI)");
}

Test(cli, info_reports_the_environment_configuration)
{
    s_run_t r;
    s_troupe(&r, (const char *[]){"info", NULL},
             (const char *[]){"TROUPE_TIMEOUT_S=77", "TROUPE_FUSION_BYTES=4096",
                              "TROUPE_BACKEND=sync", "TROUPE_CACHE_DIR=/tmp/troupe-cli-cache",
                              NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    char v[512];
    cr_assert(s_value(r.out, "config.timeout_s", v, sizeof v));
    cr_assert_str_eq(v, "77");
    cr_assert(s_value(r.out, "config.fusion_bytes", v, sizeof v));
    cr_assert_str_eq(v, "4096");
    cr_assert(s_value(r.out, "config.backend", v, sizeof v));
    cr_assert_str_eq(v, "sync");
    cr_assert(s_value(r.out, "config.cache_dir", v, sizeof v));
    cr_assert_str_eq(v, "/tmp/troupe-cli-cache");
    cr_assert_str_empty(r.err, "stderr: %s", r.err);

    s_troupe(&r, (const char *[]){"info", NULL},
             (const char *[]){"TROUPE_LOG=error:transport,parallel", "TROUPE_COLL_SHM=0",
                              "TROUPE_FAULT=kill:rank=3:step=9,alloc:nth=2", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert(s_value(r.out, "config.fault", v, sizeof v));
    cr_assert_str_eq(v, "kill:rank=3:step=9,alloc:nth=2");
    cr_assert(s_value(r.out, "config.log", v, sizeof v));
    cr_assert_str_eq(v, "error:transport,parallel");
    cr_assert(s_value(r.out, "config.coll_shm", v, sizeof v));
    cr_assert_str_eq(v, "0");

    s_troupe(&r, (const char *[]){"info", NULL},
             (const char *[]){"TROUPE_CPU_DEVICES=3", "TROUPE_DEVICE=2,0", "TROUPE_CUDA_AWARE=off",
                              "TROUPE_DP_OVERLAP=on", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert(s_value(r.out, "config.cpu_devices", v, sizeof v));
    cr_assert_str_eq(v, "3");
    cr_assert(s_value(r.out, "config.device", v, sizeof v));
    cr_assert_str_eq(v, "2,0");
    cr_assert(s_value(r.out, "config.cuda_aware", v, sizeof v));
    cr_assert_str_eq(v, "off");
    cr_assert(s_value(r.out, "config.dp_overlap", v, sizeof v));
    cr_assert_str_eq(v, "on");
    cr_assert_str_empty(r.err, "stderr: %s", r.err);

    /* a malformed TROUPE_DP_OVERLAP keeps the default and warns on stderr */
    s_troupe(&r, (const char *[]){"info", NULL}, (const char *[]){"TROUPE_DP_OVERLAP=yes", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert(s_value(r.out, "config.dp_overlap", v, sizeof v));
    cr_assert_str_eq(v, "auto");
    cr_assert_not_null(strstr(r.err, "TROUPE_DP_OVERLAP"), "stderr: %s", r.err);

    /* TROUPE_DP_FUSED_UPDATE: auto by default, off when set so; a malformed value warns */
    s_troupe(&r, (const char *[]){"info", NULL}, (const char *[]){"TROUPE_DP_FUSED_UPDATE=off", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert(s_value(r.out, "config.dp_fused_update", v, sizeof v));
    cr_assert_str_eq(v, "off");
    s_troupe(&r, (const char *[]){"info", NULL}, (const char *[]){"TROUPE_DP_FUSED_UPDATE=on", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert(s_value(r.out, "config.dp_fused_update", v, sizeof v));
    cr_assert_str_eq(v, "auto");
    cr_assert_not_null(strstr(r.err, "TROUPE_DP_FUSED_UPDATE"), "stderr: %s", r.err);

    /* a malformed TROUPE_CUDA_AWARE keeps the default and warns on stderr */
    s_troupe(&r, (const char *[]){"info", NULL}, (const char *[]){"TROUPE_CUDA_AWARE=maybe", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert(s_value(r.out, "config.cuda_aware", v, sizeof v));
    cr_assert_str_eq(v, "auto");
    cr_assert_not_null(strstr(r.err, "TROUPE_CUDA_AWARE"), "stderr: %s", r.err);
}

Test(cli, info_warns_when_the_default_backend_is_not_built)
{
    const char *names[] = {"TROUPE_BACKEND=bogus", "TROUPE_BACKEND=cuda"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        s_run_t r;
        s_troupe(&r, (const char *[]){"info", NULL}, (const char *[]){names[i], NULL});
        cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
        char v[64];
        cr_assert(s_value(r.out, "backends", v, sizeof v));
        const char *name = names[i] + strlen("TROUPE_BACKEND=");
        if (strstr(v, name)) /* a build with the cuda backend */
            continue;
        cr_assert_eq(s_count_lines(r.err), 1, "stderr: %s", r.err);
        cr_assert(strstr(r.err, "TROUPE_BACKEND") && strstr(r.err, name) &&
                      strstr(r.err, "not a built backend"),
                  "stderr: %s", r.err);
    }
}

Test(cli, info_warns_on_a_malformed_variable_and_keeps_the_default)
{
    s_run_t r;
    s_troupe(&r, (const char *[]){"info", NULL}, (const char *[]){"TROUPE_TIMEOUT_S=soon", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert(strstr(r.err, "TROUPE_TIMEOUT_S") != NULL, "stderr: %s", r.err);
    char v[64];
    cr_assert(s_value(r.out, "config.timeout_s", v, sizeof v));
    cr_assert_str_eq(v, "120");
    cr_assert_null(strstr(r.out, "warning"), "warnings belong on stderr: %s", r.out);
    cr_assert_eq(s_count_lines(r.err), 1, "one warning, not two: %s", r.err);

    /* with the log quiet, troupe says it itself, still once */
    s_troupe(&r, (const char *[]){"info", NULL},
             (const char *[]){"TROUPE_TIMEOUT_S=soon", "TROUPE_LOG=error", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_eq(s_count_lines(r.err), 1, "stderr: %s", r.err);
    cr_assert(strstr(r.err, "TROUPE_TIMEOUT_S") != NULL, "stderr: %s", r.err);

    /* a malformed TROUPE_LOG: one line too */
    s_troupe(&r, (const char *[]){"info", NULL}, (const char *[]){"TROUPE_LOG=loud", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_eq(s_count_lines(r.err), 1, "stderr: %s", r.err);
    cr_assert(strstr(r.err, "loud") != NULL, "stderr: %s", r.err);
}

Test(cli, unknown_command_is_one_line_on_stderr_and_exit_2)
{
    s_run_t r;
    s_troupe(&r, (const char *[]){"frobnicate", NULL}, NULL);
    cr_assert_eq(r.status, 2);
    cr_assert_str_empty(r.out);
    cr_assert_eq(s_count_lines(r.err), 1, "stderr: %s", r.err);
    cr_assert(strstr(r.err, "unknown command 'frobnicate'") != NULL, "stderr: %s", r.err);
}

Test(cli, extra_arguments_are_a_usage_error)
{
    s_run_t r;
    s_troupe(&r, (const char *[]){"info", "now", NULL}, NULL);
    cr_assert_eq(r.status, 2);
    cr_assert_str_empty(r.out);
    cr_assert_eq(s_count_lines(r.err), 1, "stderr: %s", r.err);
}

Test(cli, info_help_is_usage_and_exit_0)
{
    const char *help[] = {"--help", "-h"};
    for (size_t i = 0; i < sizeof help / sizeof help[0]; i++) {
        s_run_t r;
        s_troupe(&r, (const char *[]){"info", help[i], NULL}, NULL);
        cr_assert_eq(r.status, 0, "info %s: exit %d, stderr: %s", help[i], r.status, r.err);
        cr_assert(strstr(r.out, "usage: troupe info") != NULL, "info %s: %s", help[i], r.out);
        cr_assert_str_empty(r.err);
    }
}

Test(cli, no_command_prints_usage_to_stderr_and_exits_2)
{
    s_run_t r;
    s_troupe(&r, (const char *[]){NULL}, NULL);
    cr_assert_eq(r.status, 2);
    cr_assert_str_empty(r.out);
    cr_assert(strstr(r.err, "usage: troupe") != NULL, "stderr: %s", r.err);
}

Test(cli, help_and_version)
{
    const char *help[] = {"--help", "-h", "help"};
    for (size_t i = 0; i < sizeof help / sizeof help[0]; i++) {
        s_run_t r;
        s_troupe(&r, (const char *[]){help[i], NULL}, NULL);
        cr_assert_eq(r.status, 0, "%s: exit %d", help[i], r.status);
        cr_assert(strstr(r.out, "usage: troupe") != NULL, "%s: %s", help[i], r.out);
        cr_assert(strstr(r.out, "info") != NULL);
        cr_assert_str_empty(r.err);
    }
    const char *version[] = {"--version", "version"};
    for (size_t i = 0; i < sizeof version / sizeof version[0]; i++) {
        s_run_t r;
        s_troupe(&r, (const char *[]){version[i], NULL}, NULL);
        cr_assert_eq(r.status, 0);
        cr_assert_str_eq(r.out, "troupe " TROUPE_VERSION_STRING "\n");
        cr_assert_str_empty(r.err);
    }
}
