/* troupe — command-line tool.
 *
 *   troupe info          build features, backends and their devices, library versions, config
 *   troupe doctor        preflight checks (cmd_doctor.c)
 *   troupe plot          learning curve CSV -> PNG (cmd_plot.c)
 *   troupe trace merge   one timeline from the ranks' TROUPE_TRACE files; straggler report
 *                        (cmd_trace.c)
 *   troupe run           elastic runs: launch, watch, restart from checkpoints (cmd_run.c)
 *   troupe status        what every rank of a running job waits on; the verdict (cmd_status.c)
 *   troupe help          usage (also -h, --help)
 *   troupe --version     "troupe <version>" (also version)
 *
 * `troupe info` prints one `key: value` line per fact, in groups whose keys share a prefix:
 *
 *   troupe: 0.1.0
 *   build.cuda: 0                            0 without CUDA; "nvrtc only" when the toolkit was
 *                                              found (NVRTC compiles CUDA C) but no cuda backend
 *                                              is built; 1 with the cuda backend
 *   build.mpi: 1                             troupe_config.h TROUPE_HAVE_MPI
 *   host.cores: 2                            cores this process may run on (CPU affinity)
 *   host.cores_online: 2                     online cores of the machine
 *   backends: cpu sync                       every built driver (devices/device.h)
 *   backends.stream_config: most_parallel_streams   the config suggested_streams is for
 *                                              (parallel/dp's and the trainer's)
 *   backend.cpu.devices: 1                   per backend: its device count, or
 *   backend.cpu.device.0.suggested_streams: 2  backend.<name>.error: <STATUS>: <message>
 *                                              when it does not open (not fatal)
 *   mpi: Open MPI v4.1.4, ...                transport/mpi troupe_mpi_version(), or "none"
 *   cuda: nvrtc 13.0, runtime 13.0, driver none   devices/cuda troupe_cuda_versions() through
 *                                                  the plugin, "none (built without CUDA)",
 *                                                  or "error: NOT_FOUND: ..." when the plugin
 *                                                  or a CUDA library is missing
 *   cuda.devices: 0 (cudaGetDeviceCount: ...)   CUDA builds: the GPUs, or why there are none;
 *   cuda.device.0: <name>, compute 9.0, 132 SMs, 81079 MiB, arch sm_90   one line per GPU;
 *   cuda.gemm: cuBLASLt 13.0.0               what runs GEMM steps (devices/cuda/cuda_impl.h)
 *   cuda.assembler: nvjitlink 13.0           what turns NVRTC's PTX into cubins (nvrtc.h)
 *   gemm: OpenBLAS 0.3.21 (...; core SkylakeX, chosen by troupe; 1 thread per stream)
 *                                            devices/host/gemm_library.h, or "none (...)"
 *   libzmq: 4.3.4                            the loaded libraries' versions
 *   czmq: 4.2.1
 *   config.backend: cpu                      base/config.h, after the environment
 *   config.cache_dir, config.cc, config.cc_flags, config.timeout_s, config.fusion_bytes,
 *   config.auto_host_transfers, config.stack_threshold_bytes, config.gemm, config.coll_shm,
 *   config.denormals (flush|keep, as TROUPE_DENORMALS),
 *   config.trace (TROUPE_TRACE's prefix, empty when off; the command itself is never traced),
 *   config.fault (the armed TROUPE_FAULT specification, empty when none),
 *   config.log (LEVEL[:SUBSYSTEM,...], as TROUPE_LOG),
 *   config.cpu_devices (TROUPE_CPU_DEVICES), config.device (TROUPE_DEVICE, empty when unset),
 *   config.cuda_aware (auto|on|off, as TROUPE_CUDA_AWARE),
 *   config.dp_overlap (auto|on|off, as TROUPE_DP_OVERLAP),
 *   config.dp_fused_update (auto|off, as TROUPE_DP_FUSED_UPDATE)
 *   cluster.cuda_aware: no (MPIX_CUDA_AWARE_SUPPORT 0)   whether the MPI library takes CUDA
 *                                              device memory (transport/mpi/cluster.h
 *                                              troupe_mpi_cuda_support; the cross-rank exchange
 *                                              of device gradients, parallel/dp.h)
 *
 * Keys are stable; values are facts of this build and machine. Warnings go to stderr, once
 * each: a malformed environment variable (logged by base/config at warn level, else printed
 * here) and a TROUPE_BACKEND that names no built backend.
 *
 * Exit status: 0 on success (a backend that fails to open is reported, not fatal), 2 on a
 * usage error (one line on stderr), 1 when the output cannot be written.
 *
 * This file includes no CUDA or MPI header and links no CUDA library: the cuda lines come
 * through the cuda driver's plugin (devices/plugin_impl.h), loaded only by `info` (and by
 * whatever opens the cuda backend), and MPI's through transport/mpi/cluster.h.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "cmd_impl.h"

#include "actors/backend.h"
#include "base/config.h"
#include "base/log.h"
#include "base/status.h"
#include "devices/device.h"
#include "devices/host/gemm_library.h"
#include "tools/troupe/cmd_impl.h"
#include "transport/mpi/cluster.h"
#include "troupe_config.h"

#include "devices/plugin_impl.h"

#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(TROUPE_CLI_HAVE_CZMQ)
#include <czmq.h>
#endif

/* The stream config suggested_streams is asked for: parallel/dp's and the trainer's. */
#define S_STREAM_CONFIG TROUPE_MOST_PARALLEL_STREAMS
#define S_STREAM_CONFIG_NAME "most_parallel_streams"

static void s_usage(FILE *f)
{
    fprintf(f, "usage: troupe <command>\n"
               "commands:\n"
               "  info       build features, backends, devices, library versions, configuration\n"
               "  doctor     preflight: compiler, cache, data set, GPUs; under mpirun the ranks'\n"
               "             settings, shared memory and MPI (troupe doctor --help)\n"
               "  plot       draw a learning curve CSV as a PNG (troupe plot --help)\n"
               "  trace      trace merge [-o OUT] [--all] FILE|PREFIX...: one timeline from the\n"
               "             ranks' TROUPE_TRACE files, and the straggler report\n"
               "  run        launch a job and restart it from its checkpoint when a rank dies\n"
               "             (troupe run --help)\n"
               "  status     what every rank of a running job waits on, and which rank is behind\n"
               "  help       this text (also -h, --help)\n"
               "  version    the version of troupe (also --version)\n"
               "exit status: 0 success, 1 output failed, 2 usage error\n");
}

/* Prints one backend's devices, or its error when it does not open. */
static void s_backend(const char *name)
{
    troupe_backend_t *b = NULL;
    troupe_status_t st = troupe_backend_open(name, S_STREAM_CONFIG, &b);
    if (st != TROUPE_OK) {
        printf("backend.%s.error: %s: %s\n", name, troupe_status_str(st), troupe_last_error());
        return;
    }
    int n = 0;
    st = troupe_num_devices(b, &n);
    if (st != TROUPE_OK) {
        printf("backend.%s.error: %s: %s\n", name, troupe_status_str(st), troupe_last_error());
        goto close_backend;
    }
    printf("backend.%s.devices: %d\n", name, n);
    for (int i = 0; i < n; i++) {
        troupe_device_t *d = NULL;
        st = troupe_get_device(b, i, &d);
        if (st != TROUPE_OK) {
            printf("backend.%s.device.%d.error: %s: %s\n", name, i, troupe_status_str(st),
                   troupe_last_error());
            continue;
        }
        int streams = 0;
        st = troupe_suggested_num_streams(d, &streams);
        if (st != TROUPE_OK)
            printf("backend.%s.device.%d.suggested_streams: error: %s: %s\n", name, i,
                   troupe_status_str(st), troupe_last_error());
        else
            printf("backend.%s.device.%d.suggested_streams: %d\n", name, i, streams);
    }
close_backend:
    troupe_backend_close(&b);
}

static void s_backends(void)
{
    size_t n = troupe_driver_built_count();
    printf("backends:");
    for (size_t i = 0; i < n; i++)
        printf(" %s", troupe_driver_built_name(i));
    printf("%s\n", n == 0 ? " none" : "");
    printf("backends.stream_config: %s\n", S_STREAM_CONFIG_NAME);
    for (size_t i = 0; i < n; i++)
        s_backend(troupe_driver_built_name(i));
}

static bool s_is_built(const char *name)
{
    for (size_t i = 0; i < troupe_driver_built_count(); i++)
        if (strcmp(troupe_driver_built_name(i), name) == 0)
            return true;
    return false;
}

#if TROUPE_HAVE_CUDA
/* The GPUs the cuda driver sees (or why none), one line each, and what runs GEMM steps. */
static void s_cuda_devices(const troupe__cuda_plugin_t *cuda)
{
    char line[512];
    int n = cuda->device_count();
    if (n == 0) {
        cuda->why_no_device(line, sizeof line);
        printf("cuda.devices: 0 (%s)\n", line);
    } else {
        printf("cuda.devices: %d\n", n);
    }
    for (int i = 0; i < n; i++) {
        if (cuda->describe(i, line, sizeof line) == TROUPE_OK)
            printf("cuda.device.%d: %s\n", i, line);
        else
            printf("cuda.device.%d: error: %s\n", i, troupe_last_error());
    }
    printf("cuda.gemm: %s\n", cuda->gemm_name());
    printf("cuda.assembler: %s\n", cuda->assembler());
}
#endif

static void s_versions(void)
{
    printf("gemm: %s\n", troupe_gemm_library_name());
    printf("mpi: %s\n", troupe_mpi_version());
#if TROUPE_HAVE_CUDA
    /* Loads the cuda driver's plugin (and the CUDA libraries), as opening `cuda` does. */
    const troupe__cuda_plugin_t *plugin = NULL;
    char cuda[256];
    troupe_status_t st = troupe__cuda_plugin_load(&plugin);
    if (st == TROUPE_OK)
        st = plugin->versions(cuda, sizeof cuda);
    if (st == TROUPE_OK)
        printf("cuda: %s\n", cuda);
    else
        printf("cuda: error: %s: %s\n", troupe_status_str(st), troupe_last_error());
    if (plugin != NULL)
        s_cuda_devices(plugin);
#else
    printf("cuda: none (built without CUDA)\n");
#endif
#if defined(TROUPE_CLI_HAVE_CZMQ)
    int major, minor, patch;
    zmq_version(&major, &minor, &patch);
    printf("libzmq: %d.%d.%d\n", major, minor, patch);
    zsys_version(&major, &minor, &patch);
    printf("czmq: %d.%d.%d\n", major, minor, patch);
#else
    printf("libzmq: none (not found at build time)\n");
    printf("czmq: none (not found at build time)\n");
#endif
}

/* TROUPE_LOG's form of the current log configuration: "warn", "info:transport,parallel". */
static void s_print_log(void)
{
    static const char *const levels[] = {"error", "warn", "info", "debug", "trace"};
    static const char *const subs[] = {"base",      "ir",       "devices", "actors",
                                       "transport", "parallel", "tools"};
    troupe_log_level_t level = troupe_log_get_level();
    unsigned mask = troupe_log_get_mask();
    printf("config.log: %s", level <= TROUPE_LOG_TRACE ? levels[level] : "?");
    if (mask != TROUPE_SUB_ALL) {
        char sep = ':';
        for (unsigned i = 0; i < sizeof subs / sizeof subs[0]; i++) {
            if (mask & (1u << i)) {
                printf("%c%s", sep, subs[i]);
                sep = ',';
            }
        }
        if (sep == ':')
            printf(":none");
    }
    printf("\n");
}

/* TROUPE_TRACE as configured (the command itself is not traced: see main). */
static char s_trace_prefix[1024];

static void s_config(void)
{
    printf("config.backend: %s\n", troupe_config_backend());
    printf("config.cache_dir: %s\n", troupe_config_cache_dir());
    printf("config.cc: %s\n", troupe_config_cc());
    printf("config.cc_flags: %s\n", troupe_config_cc_flags());
    printf("config.timeout_s: %lld\n", (long long)troupe_config_timeout_s());
    printf("config.fusion_bytes: %zu\n", troupe_config_fusion_bytes());
    printf("config.auto_host_transfers: %d\n", troupe_config_auto_host_transfers() ? 1 : 0);
    printf("config.stack_threshold_bytes: %zu\n", troupe_config_stack_threshold_bytes());
    printf("config.gemm: %s\n", troupe_config_gemm_mode_name(troupe_config_gemm_mode()));
    printf("config.denormals: %s\n", troupe_config_flush_denormals() ? "flush" : "keep");
    printf("config.coll_shm: %d\n", troupe_config_coll_shm() ? 1 : 0);
    printf("config.trace: %s\n", s_trace_prefix);
    printf("config.fault: %s\n", troupe_config_fault());
    s_print_log();
    printf("config.cpu_devices: %d\n", troupe_config_cpu_devices());
    const char *dev = troupe_config_device();
    printf("config.device: %s\n", dev != NULL ? dev : "");
    printf("config.cuda_aware: %s\n", troupe_config_cuda_aware_name(troupe_config_cuda_aware()));
    printf("config.dp_overlap: %s\n", troupe_config_dp_overlap_name(troupe_config_dp_overlap()));
    printf("config.dp_fused_update: %s\n", troupe_config_dp_fused_update() ? "auto" : "off");
    printf("cluster.cuda_aware: %s\n", troupe_mpi_cuda_support());
}

/* The cores this process may run on (its CPU affinity), else the online cores. */
static long s_usable_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return sysconf(_SC_NPROCESSORS_ONLN);
}

static int s_info(void)
{
    /* base/config logs a malformed variable at warn level when it loads; say it here only
     * when that log line was not written. */
    if (troupe_config_check() != TROUPE_OK && troupe_log_get_level() < TROUPE_LOG_WARN)
        fprintf(stderr, "troupe: warning: %s\n", troupe_last_error());
    troupe_clear_error();
    const char *backend = troupe_config_backend();
    if (!s_is_built(backend)) {
        fprintf(stderr, "troupe: warning: TROUPE_BACKEND names '%s', which is not a built backend "
                        "(built:", backend);
        for (size_t i = 0; i < troupe_driver_built_count(); i++)
            fprintf(stderr, " %s", troupe_driver_built_name(i));
        fprintf(stderr, ")\n");
    }
    printf("troupe: %s\n", TROUPE_VERSION_STRING);
#if TROUPE_HAVE_CUDA
    printf("build.cuda: %s\n", s_is_built("cuda") ? "1" : "nvrtc only");
#else
    printf("build.cuda: 0\n");
#endif
    printf("build.mpi: %d\n", TROUPE_HAVE_MPI);
    printf("host.cores: %ld\n", s_usable_cores());
    printf("host.cores_online: %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    s_backends();
    s_versions();
    s_config();
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "troupe: cannot write the output\n");
        return 1;
    }
    return 0;
}

static int s_simple(int (*fn)(void), int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "troupe: '%s' takes no arguments (got '%s'); try 'troupe --help'\n",
                argv[1], argv[2]);
        return 2;
    }
    return fn();
}

static int s_version(void)
{
    printf("troupe %s\n", TROUPE_VERSION_STRING);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int s_help(void)
{
    s_usage(stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* troupe info --env: the registry (base/config.h), aligned; "set: VALUE" when the variable
 * is set here. */
static int s_info_env(void)
{
    size_t n = troupe_config_var_count();
    int w[6] = {4, 6, 4, 7, 6, 3};
    for (size_t i = 0; i < n; i++) {
        const troupe_config_var_t *v = troupe_config_var_at(i);
        const char *f[6] = {v->name, v->layer, v->type, v->def, v->range, v->api};
        for (int k = 0; k < 6; k++)
            if ((int)strlen(f[k]) > w[k])
                w[k] = (int)strlen(f[k]);
    }
    printf("%-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %s\n", w[0], "name", w[1], "module", w[2], "type",
           w[3], "default", w[4], "values", w[5], "api", "help");
    for (size_t i = 0; i < n; i++) {
        const troupe_config_var_t *v = troupe_config_var_at(i);
        const char *set = getenv(v->name);
        printf("%-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %s%s%s\n", w[0], v->name, w[1], v->layer, w[2],
               v->type, w[3], v->def, w[4], v->range, w[5], v->api, v->help, set ? "  set: " : "",
               set ? set : "");
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    /* TROUPE_TRACE names a job's trace files: this command must not overwrite rank 0's */
    snprintf(s_trace_prefix, sizeof s_trace_prefix, "%s", troupe_config_trace_prefix());
    troupe_status_t tst = troupe_config_set_trace_prefix(NULL);
    (void)tst; /* turning tracing off cannot fail */
    if (strcmp(cmd, "info") == 0) {
        if (argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
            printf("usage: troupe info [--env]\n"
                   "  prints what was built and what this machine has, one 'key: value' line per\n"
                   "  fact (docs/cluster.md, troupe info); exit status 0\n"
                   "  --env: the environment variables troupe reads, one a line: name, module,\n"
                   "  type, default, accepted values, API equivalent, help, and the value set\n"
                   "  here (columns apart by two blanks or more; docs/configuration.md)\n");
            return fflush(stdout) == 0 ? 0 : 1;
        }
        if (argc == 3 && strcmp(argv[2], "--env") == 0)
            return s_info_env();
        return s_simple(s_info, argc, argv);
    }
    if (strcmp(cmd, "doctor") == 0)
        return troupe__cmd_doctor(argc, argv);
    if (strcmp(cmd, "plot") == 0)
        return troupe__cmd_plot(argc, argv);
    if (strcmp(cmd, "trace") == 0)
        return troupe__cmd_trace(argc, argv);
    if (strcmp(cmd, "run") == 0)
        return troupe__cmd_run(argc, argv);
    if (strcmp(cmd, "status") == 0)
        return troupe__cmd_status(argc, argv);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return s_simple(s_help, argc, argv);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0)
        return s_simple(s_version, argc, argv);
    fprintf(stderr, "troupe: unknown command '%s'; try 'troupe --help'\n", cmd);
    return 2;
}
