/* libFuzzer target for the configuration's parsing of TROUPE_* values (base/config.c, with
 * TROUPE_LOG through base/log.c and TROUPE_FAULT through base/fault.c): the input is an
 * environment, one variable per line, each line's first byte choosing the variable from the
 * table below and the rest its value. The harness makes that the process's whole environment
 * (swapping `environ`, so nothing is allocated per input) and reloads the configuration.
 * Whatever the values, a reload must end either OK or INVALID_ARGUMENT naming a variable
 * ("NAME='value': why"), and every setting must keep a valid value (a malformed one keeps its
 * default); a broken rule traps. TROUPE_LOG_FILE and TROUPE_TRACE are not in the table: they
 * would create files at paths the fuzzer invents (the log at once, the trace at exit). The seed corpus (tests/data/config_corpus) also runs as a plain test
 * (corpus_config, tests/fuzz/CMakeLists.txt).
 *
 * Build: deploy/fuzz.sh (clang); run: deploy/fuzz.sh SECONDS config. */
#define _GNU_SOURCE /* environ */
#include "base/config.h"
#include "base/log.h"

#define FUZZ_NAME "fuzz_config"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const s_names[] = {
    "TROUPE_LOG",
    "TROUPE_BACKEND",
    "TROUPE_CACHE_DIR",
    "CC",
    "TROUPE_CC_FLAGS",
    "TROUPE_TIMEOUT_S",
    "TROUPE_FUSION_BYTES",
    "TROUPE_AUTO_HOST_TRANSFERS",
    "TROUPE_STACK_THRESHOLD",
    "TROUPE_LOOP_FUSION",
    "TROUPE_ITERATION_SCALARS",
    "TROUPE_HOST_MEMORY",
    "TROUPE_COLL_SHM",
    "TROUPE_GEMM",
    "TROUPE_DENORMALS",
    "TROUPE_FAULT",
    "XDG_CACHE_HOME",
    "HOME",
    "TROUPE_RESUME",
    "TROUPE_PROGRESS_FILE",
    "TROUPE_JOB_ID",
    "TROUPE_CPU_DEVICES",
    "TROUPE_DEVICE",
    "TROUPE_CUDA_AWARE",
    "TROUPE_CUDA_GRAPHS",
    "TROUPE_CUDA_GATHER_GEMM",
    "TROUPE_DP_OVERLAP",
    "TROUPE_DP_FUSED_UPDATE",
};
#define S_NNAMES (sizeof s_names / sizeof s_names[0])
#define S_MAX_VARS 24
#define S_BUF 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char buf[S_BUF];
    char *env[S_MAX_VARS + 1];
    int nenv = 0;
    size_t used = 0;
    static bool quiet;
    if (!quiet) { /* warnings about malformed values: not on the fuzzer's output */
        FUZZ_CHECK(troupe_log_set_file("/dev/null") == TROUPE_OK);
        quiet = true;
    }
    size_t i = 0;
    while (i < size && nenv < S_MAX_VARS) {
        size_t end = i;
        while (end < size && data[end] != '\n')
            end++;
        if (end > i) {
            const char *name = s_names[data[i] % S_NNAMES];
            size_t vlen = end - i - 1, nlen = strlen(name);
            if (used + nlen + 1 + vlen + 1 > S_BUF)
                break;
            char *var = buf + used;
            memcpy(var, name, nlen);
            var[nlen] = '=';
            memcpy(var + nlen + 1, data + i + 1, vlen);
            var[nlen + 1 + vlen] = '\0';
            used += nlen + 1 + vlen + 1;
            env[nenv++] = var;
        }
        i = end + 1;
    }
    env[nenv] = NULL;
    char **saved = environ;
    environ = env;
    troupe_log_set_level(TROUPE_LOG_WARN);
    troupe_status_t st = troupe_config_reload();
    environ = saved;
    FUZZ_CHECK(st == TROUPE_OK || st == TROUPE_INVALID_ARGUMENT);
    if (st != TROUPE_OK) {
        const char *msg = troupe_last_error();
        bool named = false;
        for (size_t k = 0; k < S_NNAMES && !named; k++)
            named = strncmp(msg, s_names[k], strlen(s_names[k])) == 0 &&
                    strncmp(msg + strlen(s_names[k]), "='", 2) == 0;
        FUZZ_CHECK(named);
        FUZZ_CHECK(troupe_config_check() == TROUPE_INVALID_ARGUMENT);
    }
    FUZZ_CHECK(troupe_config_timeout_s() >= 1);
    FUZZ_CHECK(troupe_config_timeout_ns() >= 1000000000LL);
    FUZZ_CHECK(troupe_config_fusion_bytes() >= 1024);
    const char *b = troupe_config_backend();
    FUZZ_CHECK(b[0] != '\0' && strlen(b) < 64);
    FUZZ_CHECK(troupe_config_cc()[0] != '\0');
    FUZZ_CHECK(troupe_config_cache_dir()[0] != '\0');
    troupe_gemm_mode_t g = troupe_config_gemm_mode();
    FUZZ_CHECK(g == TROUPE_GEMM_MODE_LIBRARY || g == TROUPE_GEMM_MODE_OPENBLAS ||
               g == TROUPE_GEMM_MODE_GENERATED);
    FUZZ_CHECK(troupe_log_get_level() <= TROUPE_LOG_TRACE);
    FUZZ_CHECK(troupe_config_cpu_devices() >= 1 &&
               troupe_config_cpu_devices() <= TROUPE_CONFIG_MAX_CPU_DEVICES);
    int devs[TROUPE_CONFIG_MAX_DEVICE_LIST], ndevs = -1; /* a kept TROUPE_DEVICE parses */
    FUZZ_CHECK(troupe_config_parse_device_list(troupe_config_device(), devs,
                                               TROUPE_CONFIG_MAX_DEVICE_LIST, &ndevs) == TROUPE_OK);
    FUZZ_CHECK(ndevs >= 0 && ndevs <= TROUPE_CONFIG_MAX_DEVICE_LIST);
    for (int k = 0; k < ndevs; k++)
        FUZZ_CHECK(devs[k] >= 0);
    troupe_cuda_aware_t ca = troupe_config_cuda_aware();
    FUZZ_CHECK(ca == TROUPE_CUDA_AWARE_AUTO || ca == TROUPE_CUDA_AWARE_ON ||
               ca == TROUPE_CUDA_AWARE_OFF);
    troupe_dp_overlap_t ov = troupe_config_dp_overlap();
    FUZZ_CHECK(ov == TROUPE_DP_OVERLAP_AUTO || ov == TROUPE_DP_OVERLAP_ON ||
               ov == TROUPE_DP_OVERLAP_OFF);
    return 0;
}
