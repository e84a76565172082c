/* troupe — command-line tool.
 *
 *   troupe info      build features, backends, devices, suggested streams, library versions
 *   troupe help      usage
 *
 * Exit status: 0 on success, 2 on a usage error, 1 when a query fails.
 */
#define _POSIX_C_SOURCE 200809L
#include "base/config.h"
#include "base/status.h"
#include "troupe_config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(TROUPE_CLI_HAVE_CZMQ)
#include <czmq.h>
#endif

static void s_usage(FILE *f)
{
    fprintf(f, "usage: troupe <command>\n"
               "commands:\n"
               "  info    build features, backends, devices and library versions\n"
               "  help    this text\n");
}

static int s_info(void)
{
    if (troupe_config_check() != TROUPE_OK)
        fprintf(stderr, "troupe: warning: %s\n", troupe_last_error());
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("troupe %s\n", TROUPE_VERSION_STRING);
    printf("features: cuda=%d mpi=%d\n", TROUPE_HAVE_CUDA, TROUPE_HAVE_MPI);
    printf("host: cores=%ld\n", cores);
#if defined(TROUPE_CLI_HAVE_CZMQ)
    int major, minor, patch;
    zmq_version(&major, &minor, &patch);
    printf("libzmq: %d.%d.%d\n", major, minor, patch);
    printf("czmq: %d.%d.%d\n", CZMQ_VERSION_MAJOR, CZMQ_VERSION_MINOR, CZMQ_VERSION_PATCH);
#else
    printf("libzmq: not found at build time\n");
#endif
    printf("config: backend=%s cache_dir=%s cc=\"%s %s\" timeout_s=%lld fusion_bytes=%zu\n",
           troupe_config_backend(), troupe_config_cache_dir(), troupe_config_cc(),
           troupe_config_cc_flags(), (long long)troupe_config_timeout_s(),
           troupe_config_fusion_bytes());
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "info") == 0)
        return s_info();
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0) {
        s_usage(stdout);
        return 0;
    }
    fprintf(stderr, "troupe: unknown command '%s'\n", argv[1]);
    s_usage(stderr);
    return 2;
}
