#define _POSIX_C_SOURCE 200809L
#include "base/config.h"
#include "base/config_impl.h"

#include "base/alloc.h"
#include "base/fault_impl.h"
#include "base/log.h"
#include "base/trace_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The environment variables this layer reads (base/config.h registry; docs/configuration.md). */
static const troupe_config_var_t s_env_vars[] = {
    {"TROUPE_LOG", "base", "level[:subsystems]", "warn",
     "error|warn|info|debug|trace[:SUBSYSTEM,...]", "troupe_log_configure",
     "what the library logs, and from which subsystems"},
    {"TROUPE_LOG_FILE", "base", "path", "stderr", "-", "troupe_log_set_file",
     "append the log lines to this file (never stdout)"},
    {"TROUPE_BACKEND", "base", "choice", "cpu", "cpu|sync|cuda (those built)",
     "troupe_config_set_backend", "the backend a program opens by default"},
    {"TROUPE_TIMEOUT_S", "base", "seconds", "120", "1..", "troupe_config_set_timeout_s",
     "deadline of every wait on another actor or rank"},
    {"TROUPE_FAULT", "base", "spec", "none", "docs/cluster.md, fault injection",
     "troupe_config_set_fault", "inject faults on purpose, to test recovery"},
    {"TROUPE_TRACE", "base", "prefix", "off", "<= 1000 bytes, a writable directory",
     "troupe_config_set_trace_prefix", "every rank writes its timeline to PREFIX.<rank>.json"},
    {"TROUPE_DENORMALS", "base", "choice", "flush", "flush|keep",
     "troupe_config_set_flush_denormals",
     "host routines flush subnormal floats to zero, or keep them"},
};
TROUPE_CONFIG_VARS(base, s_env_vars)

void troupe__log_init_clock(void);

#define S_STR_MAX 1024
#define S_TRACE_MAX 1000 /* room for ".<rank>.json.tmp.<pid>" */

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static char s_backend[64];
static char s_cache_dir[S_STR_MAX];
static char s_cc[S_STR_MAX];
static char s_cc_flags[S_STR_MAX];
static char s_trace[S_STR_MAX];
static char s_status[64];
static char s_job_id[64];
static char s_device[256]; /* TROUPE_DEVICE ("" when unset) */
static atomic_int s_cpu_devices;
static atomic_int_fast64_t s_timeout_s;
static atomic_size_t s_fusion_bytes;
static atomic_size_t s_dp_bucket_bytes; /* TROUPE_DP_BUCKET_BYTES */
static atomic_bool s_auto_host;
static atomic_bool s_coll_shm;
static atomic_int s_gemm_mode; /* troupe_gemm_mode_t */
static atomic_int s_cuda_aware; /* troupe_cuda_aware_t */
static atomic_int s_dp_overlap; /* troupe_dp_overlap_t */
static atomic_bool s_dp_fused_update;
static atomic_bool s_cuda_graphs_off; /* TROUPE_CUDA_GRAPHS=off */
static atomic_int s_cuda_gather_gemm; /* TROUPE_CUDA_GATHER_GEMM (troupe_cuda_gather_gemm_t) */
static atomic_bool s_flush_denormals;
static atomic_size_t s_stack_threshold;
static atomic_bool s_fuse_outer;        /* TROUPE_LOOP_FUSION=all (true) or same-space */
static atomic_bool s_iteration_scalars; /* TROUPE_ITERATION_SCALARS=on (true) or off */
static _Atomic int64_t s_host_memory;   /* TROUPE_HOST_MEMORY: bytes, or _AUTO, _OFF */
static char s_resume[S_STR_MAX];        /* TROUPE_RESUME ("" when unset) */
static char s_progress_file[S_STR_MAX]; /* TROUPE_PROGRESS_FILE ("" when unset) */
static troupe_status_t s_load_status;
static char s_load_error[512];

static void s_copy(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
}

static void s_bad(const char *var, const char *value, const char *why)
{
    if (s_load_status == TROUPE_OK) {
        s_load_status = TROUPE_INVALID_ARGUMENT;
        snprintf(s_load_error, sizeof s_load_error, "%s='%s': %s (default kept)", var, value, why);
    }
}

/* "ipc", "off", or "tcp:" and an interface name (1 to 15 bytes, as IFNAMSIZ allows). */
static bool s_status_ok(const char *v)
{
    if (strcmp(v, "ipc") == 0 || strcmp(v, "off") == 0)
        return true;
    size_t n = strlen(v);
    return strncmp(v, "tcp:", 4) == 0 && n > 4 && n - 4 <= 15 && strchr(v + 4, '/') == NULL;
}

/* Parses a positive decimal integer; false on junk, overflow or a value below `min`. */
static bool s_parse_int(const char *s, int64_t min, int64_t *out)
{
    if (s == NULL || *s == '\0')
        return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min)
        return false;
    *out = (int64_t)v;
    return true;
}

static void s_default_cache_dir(void)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (xdg != NULL && xdg[0] == '/')
        snprintf(s_cache_dir, sizeof s_cache_dir, "%s/troupe", xdg);
    else if (home != NULL && home[0] == '/')
        snprintf(s_cache_dir, sizeof s_cache_dir, "%s/.cache/troupe", home);
    else
        snprintf(s_cache_dir, sizeof s_cache_dir, "/tmp/troupe-cache-%ld", (long)getuid());
}

static void s_load(void)
{
    s_load_status = TROUPE_OK;
    s_load_error[0] = '\0';
    s_copy(s_backend, sizeof s_backend, "cpu");
    s_default_cache_dir();
    s_copy(s_cc, sizeof s_cc, "cc");
    s_copy(s_cc_flags, sizeof s_cc_flags, "-O3 -march=native -fno-math-errno -shared -fPIC");
    atomic_store(&s_timeout_s, 120);
    atomic_store(&s_fusion_bytes, (size_t)64 << 20);
    atomic_store(&s_dp_bucket_bytes, (size_t)TROUPE_DP_BUCKET_BYTES_DEFAULT);
    atomic_store(&s_auto_host, true);
    atomic_store(&s_coll_shm, true);
    atomic_store(&s_gemm_mode, TROUPE_GEMM_MODE_LIBRARY);
    atomic_store(&s_cuda_aware, TROUPE_CUDA_AWARE_AUTO);
    atomic_store(&s_dp_overlap, TROUPE_DP_OVERLAP_AUTO);
    atomic_store(&s_dp_fused_update, true);
    atomic_store(&s_cuda_graphs_off, false);
    atomic_store(&s_cuda_gather_gemm, TROUPE_CUDA_GATHER_GEMM_CHECKED);
    atomic_store(&s_flush_denormals, true);
    atomic_store(&s_stack_threshold, (size_t)16384);
    atomic_store(&s_fuse_outer, true);
    atomic_store(&s_iteration_scalars, true);
    atomic_store(&s_host_memory, TROUPE_HOST_MEMORY_AUTO);
    s_resume[0] = s_progress_file[0] = '\0';
    s_copy(s_status, sizeof s_status, "ipc");
    s_job_id[0] = '\0';
    s_device[0] = '\0';
    atomic_store(&s_cpu_devices, 1);

    const char *v;
    if ((v = getenv("TROUPE_LOG")) != NULL && troupe__log_configure(v) != TROUPE_OK)
        s_bad("TROUPE_LOG", v, troupe_last_error());
    if ((v = getenv("TROUPE_LOG_FILE")) != NULL && v[0] != '\0' &&
        troupe__log_set_file(v) != TROUPE_OK)
        s_bad("TROUPE_LOG_FILE", v, troupe_last_error());
    if ((v = getenv("TROUPE_BACKEND")) != NULL && v[0] != '\0') {
        if (strlen(v) >= sizeof s_backend)
            s_bad("TROUPE_BACKEND", v, "name too long");
        else
            s_copy(s_backend, sizeof s_backend, v);
    }
    if ((v = getenv("TROUPE_CACHE_DIR")) != NULL && v[0] != '\0')
        s_copy(s_cache_dir, sizeof s_cache_dir, v);
    if ((v = getenv("CC")) != NULL && v[0] != '\0')
        s_copy(s_cc, sizeof s_cc, v);
    if ((v = getenv("TROUPE_CC_FLAGS")) != NULL)
        s_copy(s_cc_flags, sizeof s_cc_flags, v);
    int64_t n;
    if ((v = getenv("TROUPE_TIMEOUT_S")) != NULL) {
        if (s_parse_int(v, 1, &n) && n <= INT64_MAX / 1000000000LL)
            atomic_store(&s_timeout_s, n);
        else
            s_bad("TROUPE_TIMEOUT_S", v, "expected a whole number of seconds >= 1");
    }
    if ((v = getenv("TROUPE_FUSION_BYTES")) != NULL) {
        if (s_parse_int(v, 1024, &n))
            atomic_store(&s_fusion_bytes, (size_t)n);
        else
            s_bad("TROUPE_FUSION_BYTES", v, "expected a byte count >= 1024");
    }
    if ((v = getenv("TROUPE_DP_BUCKET_BYTES")) != NULL) {
        if (s_parse_int(v, 1, &n))
            atomic_store(&s_dp_bucket_bytes, (size_t)n);
        else
            s_bad("TROUPE_DP_BUCKET_BYTES", v, "expected a byte count >= 1");
    }
    if ((v = getenv("TROUPE_AUTO_HOST_TRANSFERS")) != NULL) {
        if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
            atomic_store(&s_auto_host, v[0] == '1');
        else
            s_bad("TROUPE_AUTO_HOST_TRANSFERS", v, "expected 0 or 1");
    }
    if ((v = getenv("TROUPE_COLL_SHM")) != NULL) {
        if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
            atomic_store(&s_coll_shm, v[0] == '1');
        else
            s_bad("TROUPE_COLL_SHM", v, "expected 0 or 1");
    }
    if ((v = getenv("TROUPE_CUDA_AWARE")) != NULL) {
        if (strcmp(v, "auto") == 0)
            atomic_store(&s_cuda_aware, TROUPE_CUDA_AWARE_AUTO);
        else if (strcmp(v, "on") == 0)
            atomic_store(&s_cuda_aware, TROUPE_CUDA_AWARE_ON);
        else if (strcmp(v, "off") == 0)
            atomic_store(&s_cuda_aware, TROUPE_CUDA_AWARE_OFF);
        else
            s_bad("TROUPE_CUDA_AWARE", v, "expected auto, on or off");
    }
    if ((v = getenv("TROUPE_DP_OVERLAP")) != NULL) {
        if (strcmp(v, "auto") == 0)
            atomic_store(&s_dp_overlap, TROUPE_DP_OVERLAP_AUTO);
        else if (strcmp(v, "on") == 0)
            atomic_store(&s_dp_overlap, TROUPE_DP_OVERLAP_ON);
        else if (strcmp(v, "off") == 0)
            atomic_store(&s_dp_overlap, TROUPE_DP_OVERLAP_OFF);
        else
            s_bad("TROUPE_DP_OVERLAP", v, "expected auto, on or off");
    }
    if ((v = getenv("TROUPE_DP_FUSED_UPDATE")) != NULL) {
        if (strcmp(v, "auto") == 0)
            atomic_store(&s_dp_fused_update, true);
        else if (strcmp(v, "off") == 0)
            atomic_store(&s_dp_fused_update, false);
        else
            s_bad("TROUPE_DP_FUSED_UPDATE", v, "expected auto or off");
    }
    /* the graph policy (devices/graph.c) asks troupe_config_cuda_graphs_off */
    if ((v = getenv("TROUPE_CUDA_GRAPHS")) != NULL) {
        if (strcmp(v, "off") == 0)
            atomic_store(&s_cuda_graphs_off, true);
        else if (strcmp(v, "auto") != 0)
            s_bad("TROUPE_CUDA_GRAPHS", v, "expected auto or off");
    }
    /* the cuda driver's GEMM steps in routines with gather indices (devices/cuda/cuda.c) */
    if ((v = getenv("TROUPE_CUDA_GATHER_GEMM")) != NULL) {
        if (strcmp(v, "library") == 0)
            atomic_store(&s_cuda_gather_gemm, TROUPE_CUDA_GATHER_GEMM_LIBRARY);
        else if (strcmp(v, "tiles") == 0)
            atomic_store(&s_cuda_gather_gemm, TROUPE_CUDA_GATHER_GEMM_TILES);
        else if (strcmp(v, "checked") != 0)
            s_bad("TROUPE_CUDA_GATHER_GEMM", v, "expected checked, tiles or library");
    }
    if ((v = getenv("TROUPE_GEMM")) != NULL) {
        if (strcmp(v, "library") == 0)
            atomic_store(&s_gemm_mode, TROUPE_GEMM_MODE_LIBRARY);
        else if (strcmp(v, "openblas") == 0)
            atomic_store(&s_gemm_mode, TROUPE_GEMM_MODE_OPENBLAS);
        else if (strcmp(v, "generated") == 0)
            atomic_store(&s_gemm_mode, TROUPE_GEMM_MODE_GENERATED);
        else
            s_bad("TROUPE_GEMM", v, "expected library, openblas or generated");
    }
    if ((v = getenv("TROUPE_DENORMALS")) != NULL) {
        if (strcmp(v, "flush") == 0 || strcmp(v, "keep") == 0)
            atomic_store(&s_flush_denormals, v[0] == 'f');
        else
            s_bad("TROUPE_DENORMALS", v, "expected flush or keep");
    }
    /* set by `troupe run` for the programs it launches (README "Failures and restarts") */
    static const struct {
        const char *var;
        char *dst;
    } paths[] = {{"TROUPE_RESUME", s_resume}, {"TROUPE_PROGRESS_FILE", s_progress_file}};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        if ((v = getenv(paths[i].var)) == NULL)
            continue;
        if (strlen(v) >= S_STR_MAX)
            s_bad(paths[i].var, "...", "a path of 1024 bytes or more");
        else
            s_copy(paths[i].dst, S_STR_MAX, v);
    }
    if ((v = getenv("TROUPE_STACK_THRESHOLD")) != NULL) {
        if (s_parse_int(v, 0, &n))
            atomic_store(&s_stack_threshold, (size_t)n);
        else
            s_bad("TROUPE_STACK_THRESHOLD", v, "expected a byte count >= 0");
    }
    if ((v = getenv("TROUPE_LOOP_FUSION")) != NULL) {
        if (strcmp(v, "all") == 0 || strcmp(v, "same-space") == 0)
            atomic_store(&s_fuse_outer, strcmp(v, "all") == 0);
        else
            s_bad("TROUPE_LOOP_FUSION", v, "expected all or same-space");
    }
    if ((v = getenv("TROUPE_ITERATION_SCALARS")) != NULL) {
        if (strcmp(v, "on") == 0 || strcmp(v, "off") == 0)
            atomic_store(&s_iteration_scalars, strcmp(v, "on") == 0);
        else
            s_bad("TROUPE_ITERATION_SCALARS", v, "expected on or off");
    }
    if ((v = getenv("TROUPE_HOST_MEMORY")) != NULL) {
        if (strcmp(v, "auto") == 0 || strcmp(v, "off") == 0)
            atomic_store(&s_host_memory,
                         strcmp(v, "auto") == 0 ? TROUPE_HOST_MEMORY_AUTO : TROUPE_HOST_MEMORY_OFF);
        else if (s_parse_int(v, 0, &n))
            atomic_store(&s_host_memory, n);
        else
            s_bad("TROUPE_HOST_MEMORY", v, "expected auto, off or a byte count >= 0");
    }
    if (troupe__fault_configure(v = getenv("TROUPE_FAULT")) != TROUPE_OK) /* NULL: none */
        s_bad("TROUPE_FAULT", v, troupe_last_error());
    s_trace[0] = '\0';
    if ((v = getenv("TROUPE_TRACE")) != NULL && v[0] != '\0') {
        if (strlen(v) > S_TRACE_MAX)
            s_bad("TROUPE_TRACE", "...", "prefix longer than 1000 bytes");
        else
            s_copy(s_trace, sizeof s_trace, v);
    }
    troupe__trace_configure(s_trace);
    if ((v = getenv("TROUPE_STATUS")) != NULL && v[0] != '\0') {
        if (s_status_ok(v))
            s_copy(s_status, sizeof s_status, v);
        else
            s_bad("TROUPE_STATUS", v, "expected ipc, off or tcp:<interface>");
    }
    if ((v = getenv("TROUPE_JOB_ID")) != NULL && v[0] != '\0') {
        if (strlen(v) < sizeof s_job_id)
            s_copy(s_job_id, sizeof s_job_id, v);
        else
            s_bad("TROUPE_JOB_ID", v, "longer than 63 bytes");
    }
    if ((v = getenv("TROUPE_CPU_DEVICES")) != NULL && v[0] != '\0') {
        if (s_parse_int(v, 1, &n) && n <= TROUPE_CONFIG_MAX_CPU_DEVICES)
            atomic_store(&s_cpu_devices, (int)n);
        else
            s_bad("TROUPE_CPU_DEVICES", v, "expected a device count from 1 to 64");
    }
    if ((v = getenv("TROUPE_DEVICE")) != NULL && v[0] != '\0') {
        int list[TROUPE_CONFIG_MAX_DEVICE_LIST], nl = 0;
        if (strlen(v) >= sizeof s_device)
            s_bad("TROUPE_DEVICE", "...", "longer than 255 bytes");
        else if (troupe_config_parse_device_list(v, list, TROUPE_CONFIG_MAX_DEVICE_LIST, &nl) !=
                 TROUPE_OK)
            s_bad("TROUPE_DEVICE", v, troupe_last_error());
        else
            s_copy(s_device, sizeof s_device, v);
    }
    /* Not TROUPE_LOG: it would re-enter troupe__config_ensure_loaded (pthread_once). */
    if (s_load_status != TROUPE_OK && troupe_log_get_level() >= TROUPE_LOG_WARN)
        troupe_log_write(TROUPE_LOG_WARN, TROUPE_SUB_BASE, "configuration: %s", s_load_error);
}

static void s_once_init(void)
{
    troupe__log_init_clock();
    s_load();
}

void troupe__config_ensure_loaded(void)
{
    pthread_once(&s_once, s_once_init);
}

troupe_status_t troupe_config_check(void)
{
    troupe__config_ensure_loaded();
    if (s_load_status != TROUPE_OK)
        return troupe__error(s_load_status, "%s", s_load_error);
    return TROUPE_OK;
}

troupe_status_t troupe_config_reload(void)
{
    troupe__config_ensure_loaded();
    s_load();
    return troupe_config_check();
}

const char *troupe_config_backend(void)
{
    troupe__config_ensure_loaded();
    return s_backend;
}
const char *troupe_config_cache_dir(void)
{
    troupe__config_ensure_loaded();
    return s_cache_dir;
}
const char *troupe_config_cc(void)
{
    troupe__config_ensure_loaded();
    return s_cc;
}
const char *troupe_config_cc_flags(void)
{
    troupe__config_ensure_loaded();
    return s_cc_flags;
}
int64_t troupe_config_timeout_s(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_timeout_s);
}
int64_t troupe_config_timeout_ns(void)
{
    return troupe_config_timeout_s() * 1000000000LL;
}
size_t troupe_config_fusion_bytes(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_fusion_bytes);
}
size_t troupe_config_dp_bucket_bytes(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_dp_bucket_bytes);
}
bool troupe_config_auto_host_transfers(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_auto_host);
}
bool troupe_config_coll_shm(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_coll_shm);
}
troupe_gemm_mode_t troupe_config_gemm_mode(void)
{
    troupe__config_ensure_loaded();
    return (troupe_gemm_mode_t)atomic_load(&s_gemm_mode);
}
const char *troupe_config_gemm_mode_name(troupe_gemm_mode_t mode)
{
    return mode == TROUPE_GEMM_MODE_OPENBLAS    ? "openblas"
           : mode == TROUPE_GEMM_MODE_GENERATED ? "generated"
                                                : "library";
}
troupe_cuda_aware_t troupe_config_cuda_aware(void)
{
    troupe__config_ensure_loaded();
    return (troupe_cuda_aware_t)atomic_load(&s_cuda_aware);
}
const char *troupe_config_cuda_aware_name(troupe_cuda_aware_t mode)
{
    return mode == TROUPE_CUDA_AWARE_ON ? "on" : mode == TROUPE_CUDA_AWARE_OFF ? "off" : "auto";
}
void troupe_config_set_cuda_aware(troupe_cuda_aware_t mode)
{
    troupe__config_ensure_loaded();
    if (mode == TROUPE_CUDA_AWARE_AUTO || mode == TROUPE_CUDA_AWARE_ON ||
        mode == TROUPE_CUDA_AWARE_OFF)
        atomic_store(&s_cuda_aware, mode);
}
bool troupe_config_cuda_graphs_off(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_cuda_graphs_off);
}

troupe_cuda_gather_gemm_t troupe_config_cuda_gather_gemm(void)
{
    troupe__config_ensure_loaded();
    return (troupe_cuda_gather_gemm_t)atomic_load(&s_cuda_gather_gemm);
}

troupe_dp_overlap_t troupe_config_dp_overlap(void)
{
    troupe__config_ensure_loaded();
    return (troupe_dp_overlap_t)atomic_load(&s_dp_overlap);
}
const char *troupe_config_dp_overlap_name(troupe_dp_overlap_t mode)
{
    return mode == TROUPE_DP_OVERLAP_ON ? "on" : mode == TROUPE_DP_OVERLAP_OFF ? "off" : "auto";
}
void troupe_config_set_dp_overlap(troupe_dp_overlap_t mode)
{
    troupe__config_ensure_loaded();
    if (mode == TROUPE_DP_OVERLAP_AUTO || mode == TROUPE_DP_OVERLAP_ON ||
        mode == TROUPE_DP_OVERLAP_OFF)
        atomic_store(&s_dp_overlap, mode);
}
bool troupe_config_dp_fused_update(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_dp_fused_update);
}
void troupe_config_set_dp_fused_update(bool on)
{
    troupe__config_ensure_loaded();
    atomic_store(&s_dp_fused_update, on);
}
bool troupe_config_gemm_library(void)
{
    return troupe_config_gemm_mode() != TROUPE_GEMM_MODE_GENERATED;
}
bool troupe_config_flush_denormals(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_flush_denormals);
}
size_t troupe_config_stack_threshold_bytes(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_stack_threshold);
}
bool troupe_config_loop_fusion_outer(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_fuse_outer);
}
void troupe_config_set_loop_fusion_outer(bool on)
{
    troupe__config_ensure_loaded();
    atomic_store(&s_fuse_outer, on);
}
bool troupe_config_iteration_scalars(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_iteration_scalars);
}
void troupe_config_set_iteration_scalars(bool on)
{
    troupe__config_ensure_loaded();
    atomic_store(&s_iteration_scalars, on);
}
int64_t troupe_config_host_memory(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_host_memory);
}
troupe_status_t troupe_config_set_host_memory(int64_t bytes)
{
    troupe__config_ensure_loaded();
    if (bytes < 0 && bytes != TROUPE_HOST_MEMORY_AUTO && bytes != TROUPE_HOST_MEMORY_OFF)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "config: host memory %lld: expected TROUPE_HOST_MEMORY_AUTO, "
                             "TROUPE_HOST_MEMORY_OFF or a byte count >= 0",
                             (long long)bytes);
    atomic_store(&s_host_memory, bytes);
    return TROUPE_OK;
}

const char *troupe_config_status(void)
{
    troupe__config_ensure_loaded();
    return s_status;
}
const char *troupe_config_job_id(void)
{
    troupe__config_ensure_loaded();
    return s_job_id;
}

static troupe_status_t s_set_str(char *dst, size_t cap, const char *v, const char *what,
                                 bool allow_empty)
{
    troupe__config_ensure_loaded();
    if (v == NULL || (!allow_empty && v[0] == '\0'))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: empty value", what);
    if (strlen(v) >= cap)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: value longer than %zu bytes", what,
                             cap - 1);
    s_copy(dst, cap, v);
    return TROUPE_OK;
}

troupe_status_t troupe_config_set_backend(const char *name)
{
    return s_set_str(s_backend, sizeof s_backend, name, "backend", false);
}
troupe_status_t troupe_config_set_cache_dir(const char *dir)
{
    return s_set_str(s_cache_dir, sizeof s_cache_dir, dir, "cache directory", false);
}
troupe_status_t troupe_config_set_cc(const char *command)
{
    return s_set_str(s_cc, sizeof s_cc, command, "C compiler", false);
}
troupe_status_t troupe_config_set_cc_flags(const char *flags)
{
    return s_set_str(s_cc_flags, sizeof s_cc_flags, flags, "C compiler flags", true);
}
troupe_status_t troupe_config_set_timeout_s(int64_t seconds)
{
    troupe__config_ensure_loaded();
    if (seconds < 1 || seconds > INT64_MAX / 1000000000LL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "timeout %" PRId64 " s out of range",
                             seconds);
    atomic_store(&s_timeout_s, seconds);
    return TROUPE_OK;
}
troupe_status_t troupe_config_set_fusion_bytes(size_t size_bytes)
{
    troupe__config_ensure_loaded();
    if (size_bytes < 1024)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "fusion buffer of %zu bytes < 1024",
                             size_bytes);
    atomic_store(&s_fusion_bytes, size_bytes);
    return TROUPE_OK;
}
troupe_status_t troupe_config_set_dp_bucket_bytes(size_t size_bytes)
{
    troupe__config_ensure_loaded();
    if (size_bytes < 1)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "overlap bucket of 0 bytes: at least 1");
    atomic_store(&s_dp_bucket_bytes, size_bytes);
    return TROUPE_OK;
}
void troupe_config_set_auto_host_transfers(bool on)
{
    troupe__config_ensure_loaded();
    atomic_store(&s_auto_host, on);
}
void troupe_config_set_coll_shm(bool on)
{
    troupe__config_ensure_loaded();
    atomic_store(&s_coll_shm, on);
}
void troupe_config_set_gemm_mode(troupe_gemm_mode_t mode)
{
    troupe__config_ensure_loaded();
    if (mode == TROUPE_GEMM_MODE_LIBRARY || mode == TROUPE_GEMM_MODE_OPENBLAS ||
        mode == TROUPE_GEMM_MODE_GENERATED)
        atomic_store(&s_gemm_mode, mode);
}
void troupe_config_set_flush_denormals(bool on)
{
    troupe__config_ensure_loaded();
    atomic_store(&s_flush_denormals, on);
}
void troupe_config_set_gemm_library(bool on)
{
    troupe_config_set_gemm_mode(on ? TROUPE_GEMM_MODE_LIBRARY : TROUPE_GEMM_MODE_GENERATED);
}
troupe_status_t troupe_config_set_fault(const char *spec)
{
    troupe__config_ensure_loaded();
    troupe_status_t st = troupe__fault_configure(spec);
    if (st != TROUPE_OK)
        return troupe__fault_check();
    return TROUPE_OK;
}
const char *troupe_config_fault(void)
{
    troupe__config_ensure_loaded();
    return troupe__fault_spec();
}
troupe_status_t troupe_config_set_stack_threshold_bytes(size_t size_bytes)
{
    troupe__config_ensure_loaded();
    atomic_store(&s_stack_threshold, size_bytes);
    return TROUPE_OK;
}

const char *troupe_config_trace_prefix(void)
{
    troupe__config_ensure_loaded();
    return s_trace;
}
troupe_status_t troupe_config_set_trace_prefix(const char *prefix)
{
    troupe__config_ensure_loaded();
    if (prefix != NULL && strlen(prefix) > S_TRACE_MAX)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "trace prefix longer than %d bytes",
                             S_TRACE_MAX);
    s_copy(s_trace, sizeof s_trace, prefix != NULL ? prefix : "");
    troupe__trace_configure(s_trace);
    return TROUPE_OK;
}
const char *troupe_config_resume(void)
{
    troupe__config_ensure_loaded();
    return s_resume;
}
const char *troupe_config_progress_file(void)
{
    troupe__config_ensure_loaded();
    return s_progress_file;
}
troupe_status_t troupe_config_set_resume(const char *path)
{
    return s_set_str(s_resume, sizeof s_resume, path ? path : "", "resume path", true);
}
troupe_status_t troupe_config_set_progress_file(const char *path)
{
    return s_set_str(s_progress_file, sizeof s_progress_file, path ? path : "", "progress file",
                     true);
}
troupe_status_t troupe_config_set_status(const char *mode)
{
    if (mode == NULL || !s_status_ok(mode))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "status mode '%s': expected ipc, off or tcp:<interface>",
                             mode != NULL ? mode : "(null)");
    return s_set_str(s_status, sizeof s_status, mode, "status mode", false);
}
troupe_status_t troupe_config_set_job_id(const char *id)
{
    return s_set_str(s_job_id, sizeof s_job_id, id, "job id", true);
}

int troupe_config_cpu_devices(void)
{
    troupe__config_ensure_loaded();
    return atomic_load(&s_cpu_devices);
}
troupe_status_t troupe_config_set_cpu_devices(int n)
{
    troupe__config_ensure_loaded();
    if (n < 1 || n > TROUPE_CONFIG_MAX_CPU_DEVICES)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "cpu devices: %d is outside 1..%d", n, TROUPE_CONFIG_MAX_CPU_DEVICES);
    atomic_store(&s_cpu_devices, n);
    return TROUPE_OK;
}

troupe_status_t troupe_config_parse_device_list(const char *spec, int *out, int cap, int *out_n)
{
    *out_n = 0;
    if (spec == NULL || spec[0] == '\0')
        return TROUPE_OK;
    const char *p = spec;
    for (;;) {
        char *end = NULL;
        errno = 0;
        long v = (*p >= '0' && *p <= '9') ? strtol(p, &end, 10) : -1;
        if (v < 0 || errno != 0 || end == p || v > INT32_MAX || (*end != ',' && *end != '\0'))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "device list '%s': expected non-negative ordinals separated by "
                                 "commas (\"1\" or \"0,2\"), at byte %d",
                                 spec, (int)(p - spec));
        for (int i = 0; i < *out_n; i++)
            if (out[i] == (int)v)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "device list '%s': device %ld is named twice", spec, v);
        if (*out_n >= cap)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "device list '%s': more than %d devices", spec, cap);
        out[(*out_n)++] = (int)v;
        if (*end == '\0')
            return TROUPE_OK;
        p = end + 1;
    }
}
const char *troupe_config_device(void)
{
    troupe__config_ensure_loaded();
    return s_device;
}
troupe_status_t troupe_config_set_device(const char *spec)
{
    troupe__config_ensure_loaded();
    int list[TROUPE_CONFIG_MAX_DEVICE_LIST], n = 0;
    if (spec != NULL && strlen(spec) >= sizeof s_device)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "device list longer than %zu bytes",
                             sizeof s_device - 1);
    TROUPE_RETURN_IF_ERROR(
        troupe_config_parse_device_list(spec, list, TROUPE_CONFIG_MAX_DEVICE_LIST, &n));
    s_copy(s_device, sizeof s_device, spec != NULL ? spec : "");
    return TROUPE_OK;
}
