/* troupe — command-line tool.
 *
 *   troupe info          build features, backends and their devices, library versions, config
 *   troupe help          usage (also -h, --help)
 *   troupe --version     "troupe <version>" (also version)
 *
 * `troupe info` prints one `key: value` line per fact, in groups whose keys share a prefix:
 *
 *   troupe: 0.1.0
 *   build.cuda: 0                            troupe_config.h TROUPE_HAVE_CUDA
 *   build.mpi: 1                             troupe_config.h TROUPE_HAVE_MPI
 *   host.cores: 2                            online cores
 *   backends: cpu sync                       every built driver (devices/device.h)
 *   backend.cpu.devices: 1                   per backend: its device count, or
 *   backend.cpu.device.0.id: 0                 backend.<name>.error: <STATUS>: <message>
 *   backend.cpu.device.0.suggested_streams: 2  when it does not open (not fatal)
 *   mpi: Open MPI v4.1.4, ...                transport/mpi troupe_mpi_version(), or "none"
 *   cuda: nvrtc 13.0, runtime 13.0, driver none   devices/cuda troupe_cuda_versions(), or
 *                                                  "none (built without CUDA)"
 *   gemm: OpenBLAS 0.3.21 (...; core SkylakeX, chosen by troupe; 1 thread per stream)
 *                                            devices/host/gemm_library.h, or "none (...)"
 *   libzmq: 4.3.4
 *   czmq: 4.2.1
 *   config.backend: cpu                      base/config.h, after the environment
 *   config.cache_dir, config.cc, config.cc_flags, config.timeout_s, config.fusion_bytes,
 *   config.auto_host_transfers, config.stack_threshold_bytes, config.gemm
 *
 * Keys are stable; values are facts of this build and machine. Warnings (a malformed
 * environment variable) go to stderr.
 *
 * Exit status: 0 on success (a backend that fails to open is reported, not fatal), 2 on a
 * usage error (one line on stderr), 1 when the output cannot be written.
 *
 * This file includes no CUDA or MPI header: the versions come through devices/cuda/nvrtc.h
 * and transport/mpi/cluster.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "actors/backend.h"
#include "base/config.h"
#include "base/status.h"
#include "devices/device.h"
#include "devices/host/gemm_library.h"
#include "transport/mpi/cluster.h"
#include "troupe_config.h"

#if TROUPE_HAVE_CUDA
#include "devices/cuda/nvrtc.h"
#endif

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(TROUPE_CLI_HAVE_CZMQ)
#include <czmq.h>
#endif

/* Every driver name troupe knows; troupe_driver_lookup says which of them this build has. */
static const char *const s_driver_names[] = {"cpu", "sync", "cuda"};
#define S_NDRIVER_NAMES (sizeof s_driver_names / sizeof s_driver_names[0])

static void s_usage(FILE *f)
{
    fprintf(f, "usage: troupe <command>\n"
               "commands:\n"
               "  info       build features, backends, devices, library versions, configuration\n"
               "  help       this text (also -h, --help)\n"
               "  version    the version of troupe (also --version)\n"
               "exit status: 0 success, 1 output failed, 2 usage error\n");
}

/* Prints one backend's devices, or its error when it does not open. */
static void s_backend(const char *name)
{
    troupe_backend_t *b = NULL;
    troupe_status_t st = troupe_backend_open(name, TROUPE_ONLY_DEVICES_PARALLEL, &b);
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
        printf("backend.%s.device.%d.id: %d\n", name, i, (int)troupe_device_id(d));
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
    const char *built[S_NDRIVER_NAMES];
    size_t nbuilt = 0;
    for (size_t i = 0; i < S_NDRIVER_NAMES; i++) {
        const troupe_driver_vtable_t *vt = NULL;
        if (troupe_driver_lookup(s_driver_names[i], &vt) == TROUPE_OK)
            built[nbuilt++] = s_driver_names[i];
    }
    troupe_clear_error();
    printf("backends:");
    for (size_t i = 0; i < nbuilt; i++)
        printf(" %s", built[i]);
    printf("%s\n", nbuilt == 0 ? " none" : "");
    for (size_t i = 0; i < nbuilt; i++)
        s_backend(built[i]);
}

static void s_versions(void)
{
    printf("gemm: %s\n", troupe_gemm_library_name());
    printf("mpi: %s\n", troupe_mpi_version());
#if TROUPE_HAVE_CUDA
    char cuda[256];
    troupe_status_t st = troupe_cuda_versions(cuda, sizeof cuda);
    if (st == TROUPE_OK)
        printf("cuda: %s\n", cuda);
    else
        printf("cuda: error: %s: %s\n", troupe_status_str(st), troupe_last_error());
#else
    printf("cuda: none (built without CUDA)\n");
#endif
#if defined(TROUPE_CLI_HAVE_CZMQ)
    int major, minor, patch;
    zmq_version(&major, &minor, &patch);
    printf("libzmq: %d.%d.%d\n", major, minor, patch);
    printf("czmq: %d.%d.%d\n", CZMQ_VERSION_MAJOR, CZMQ_VERSION_MINOR, CZMQ_VERSION_PATCH);
#else
    printf("libzmq: none (not found at build time)\n");
    printf("czmq: none (not found at build time)\n");
#endif
}

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
    printf("config.gemm: %s\n", troupe_config_gemm_library() ? "library" : "generated");
}

static int s_info(void)
{
    if (troupe_config_check() != TROUPE_OK)
        fprintf(stderr, "troupe: warning: %s\n", troupe_last_error());
    printf("troupe: %s\n", TROUPE_VERSION_STRING);
    printf("build.cuda: %d\n", TROUPE_HAVE_CUDA);
    printf("build.mpi: %d\n", TROUPE_HAVE_MPI);
    printf("host.cores: %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
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

int main(int argc, char **argv)
{
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "info") == 0)
        return s_simple(s_info, argc, argv);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return s_simple(s_help, argc, argv);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0)
        return s_simple(s_version, argc, argv);
    fprintf(stderr, "troupe: unknown command '%s'; try 'troupe --help'\n", cmd);
    return 2;
}
