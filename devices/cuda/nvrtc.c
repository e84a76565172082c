/* troupe — NVRTC compilation to PTX (see devices/cuda/nvrtc.h). */
#include "devices/cuda/nvrtc.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "base/trace_impl.h"
#include "troupe_config.h"
#include "troupe_paths_impl.h"

#include <cuda_runtime_api.h>
#include <nvrtc.h>
#if TROUPE_HAVE_NVJITLINK
#include <nvJitLink.h>
#endif
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* How much of the log goes into troupe_last_error() (the status buffer holds 1023 bytes). */
#define S_LOG_IN_ERROR 600

static bool s_valid_arch(const char *arch)
{
    if (arch[0] == '\0')
        return false;
    for (const char *p = arch; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    return true;
}

/* Copies the program's log into a new string (NULL on failure). */
static char *s_get_log(nvrtcProgram prog)
{
    size_t size = 0;
    if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS)
        return NULL;
    char *log = troupe_malloc(size + 1);
    if (log == NULL)
        return NULL;
    if (size == 0 || nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS)
        log[0] = '\0';
    log[size] = '\0';
    return log;
}

/* The log's start on one line for the error message: newlines become " | "; "..." marks a
 * cut. cap >= 8. */
static void s_log_excerpt(const char *log, char *buf, size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    for (const char *p = log ? log : ""; *p != '\0' && sb.len < cap; p++) {
        if (*p != '\n')
            troupe__strbuf_putc(&sb, *p);
        else if (p[1] != '\0')
            troupe__strbuf_puts(&sb, " | ");
    }
    if (sb.len >= cap) /* truncated */
        memcpy(buf + cap - 4, "...", 4);
}

/* NVRTC's own output for `arch`: PTX, or a cubin when `cubin` (arch sm_XY). */
static troupe_status_t s_nvrtc(const char *source, const char *name, const char *arch,
                                 bool cubin, bool ftz, char **out_code, size_t *out_size,
                                 char **out_log)
{
    troupe_status_t st = TROUPE_OK;
    nvrtcProgram prog = NULL;
    char *log = NULL, *code = NULL;
    char include_opt[1100], arch_opt[128];
    const char *opts[4];
    int nopts = 0;

    if (out_log != NULL)
        *out_log = NULL;
    if (out_code == NULL || source == NULL) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nvrtc_compile: NULL %s",
                           source == NULL ? "source" : "output");
        goto out_program;
    }
    *out_code = NULL;
    if (arch != NULL && (!s_valid_arch(arch) || strlen(arch) > 64)) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT,
                           "troupe_nvrtc_compile: architecture '%.80s' is not of the form "
                           "compute_XY or sm_XY",
                           arch);
        goto out_program;
    }
    if (cubin && (arch == NULL || strncmp(arch, "sm_", 3) != 0)) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT,
                           "troupe_nvrtc_compile: a cubin needs a real architecture sm_XY, not "
                           "'%.80s'",
                           arch ? arch : "(default)");
        goto out_program;
    }
    if (name == NULL)
        name = "troupe.cu";

    snprintf(include_opt, sizeof include_opt, "-I%s", TROUPE_CUDA_INCLUDE_DIR);
    if (TROUPE_CUDA_INCLUDE_DIR[0] != '\0')
        opts[nopts++] = include_opt;
    opts[nopts++] = "--fmad=false";
    opts[nopts++] = ftz ? "--ftz=true" : "--ftz=false";
    if (arch != NULL) {
        snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
        opts[nopts++] = arch_opt;
    }

    nvrtcResult res = nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
    if (res != NVRTC_SUCCESS) {
        prog = NULL;
        st = troupe__error(res == NVRTC_ERROR_OUT_OF_MEMORY ? TROUPE_RESOURCE_EXHAUSTED
                                                            : TROUPE_DEVICE_ERROR,
                           "nvrtcCreateProgram(%.100s): %s", name, nvrtcGetErrorString(res));
        goto out_program;
    }
    int64_t t_trace = troupe__trace_on() ? troupe_now_ns() : 0;
    res = nvrtcCompileProgram(prog, nopts, opts);
    if (t_trace != 0) {
        troupe__trace_arg_t a[] = {TROUPE__TRACE_STR("compiler", "nvrtc"),
                                   TROUPE__TRACE_STR("result", nvrtcGetErrorString(res))};
        troupe__trace_emit(TROUPE__TRACK_THREAD, "compile", name, t_trace, troupe_now_ns(), a, 2);
    }
    log = s_get_log(prog);
    if (res != NVRTC_SUCCESS) {
        char excerpt[S_LOG_IN_ERROR];
        s_log_excerpt(log, excerpt, sizeof excerpt);
        st = troupe__error(TROUPE_DEVICE_ERROR, "nvrtcCompileProgram(%.100s): %s: %s", name,
                           nvrtcGetErrorString(res), excerpt);
        goto out_program;
    }
    if (log == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "nvrtc: out of memory reading the log");
        goto out_program;
    }
    size_t size = 0;
    res = cubin ? nvrtcGetCUBINSize(prog, &size) : nvrtcGetPTXSize(prog, &size);
    if (res != NVRTC_SUCCESS) {
        st = troupe__error(TROUPE_DEVICE_ERROR, "%s(%.100s): %s",
                           cubin ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize", name,
                           nvrtcGetErrorString(res));
        goto out_program;
    }
    code = troupe_malloc(size + 1);
    if (code == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "nvrtc: out of memory for %zu bytes of %s",
                           size, cubin ? "cubin" : "PTX");
        goto out_program;
    }
    res = cubin ? nvrtcGetCUBIN(prog, code) : nvrtcGetPTX(prog, code);
    if (res != NVRTC_SUCCESS) {
        st = troupe__error(TROUPE_DEVICE_ERROR, "%s(%.100s): %s",
                           cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX", name, nvrtcGetErrorString(res));
        goto out_program;
    }
    code[size] = '\0';
    *out_code = code;
    if (out_size != NULL)
        *out_size = size;
    code = NULL;

out_program:
    if (prog != NULL)
        nvrtcDestroyProgram(&prog);
    troupe_free(code);
    if (out_log != NULL)
        *out_log = log;
    else
        troupe_free(log);
    return st;
}

#if TROUPE_HAVE_NVJITLINK
/* nvJitLink's log of h, excerpted into buf (cap bytes). */
static void s_link_log(nvJitLinkHandle h, char *buf, size_t cap)
{
    size_t size = 0;
    buf[0] = '\0';
    if (nvJitLinkGetErrorLogSize(h, &size) != NVJITLINK_SUCCESS || size == 0)
        return;
    char *log = troupe_malloc(size + 1);
    if (log == NULL)
        return;
    if (nvJitLinkGetErrorLog(h, log) == NVJITLINK_SUCCESS) {
        log[size] = '\0';
        s_log_excerpt(log, buf, cap);
    }
    troupe_free(log);
}

/* The cubin of `ptx` (NUL-terminated) for arch sm_XY, through nvJitLink. */
static troupe_status_t s_ptx_to_cubin(const char *ptx, const char *name, const char *arch,
                                      char **out_code, size_t *out_size)
{
    char arch_opt[96];
    snprintf(arch_opt, sizeof arch_opt, "-arch=%s", arch);
    const char *opts[1] = {arch_opt};
    nvJitLinkHandle h = NULL;
    char excerpt[S_LOG_IN_ERROR];
    excerpt[0] = '\0';
    const char *step = "nvJitLinkCreate";
    nvJitLinkResult res = nvJitLinkCreate(&h, 1, opts);
    if (res == NVJITLINK_SUCCESS) {
        step = "nvJitLinkAddData";
        res = nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, ptx, strlen(ptx) + 1, name);
    }
    if (res == NVJITLINK_SUCCESS) {
        step = "nvJitLinkComplete";
        res = nvJitLinkComplete(h);
    }
    size_t size = 0;
    if (res == NVJITLINK_SUCCESS) {
        step = "nvJitLinkGetLinkedCubinSize";
        res = nvJitLinkGetLinkedCubinSize(h, &size);
    }
    char *code = NULL;
    if (res == NVJITLINK_SUCCESS) {
        code = troupe_malloc(size + 1);
        if (code == NULL) {
            nvJitLinkDestroy(&h);
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                                 "nvJitLink: out of memory for %zu bytes of cubin", size);
        }
        step = "nvJitLinkGetLinkedCubin";
        res = nvJitLinkGetLinkedCubin(h, code);
    }
    if (res != NVJITLINK_SUCCESS) {
        if (h != NULL)
            s_link_log(h, excerpt, sizeof excerpt);
        nvJitLinkDestroy(&h);
        troupe_free(code);
        return troupe__error(res == NVJITLINK_ERROR_INTERNAL ? TROUPE_INTERNAL : TROUPE_DEVICE_ERROR,
                             "%s(%.100s, %s): nvJitLink error %d%s%s", step, name, arch, (int)res,
                             excerpt[0] ? ": " : "", excerpt);
    }
    nvJitLinkDestroy(&h);
    code[size] = '\0';
    *out_code = code;
    *out_size = size;
    return TROUPE_OK;
}
#endif

/* The compilation behind both entry points: PTX, or a cubin when `cubin` (arch sm_XY). A cubin
 * is NVRTC's PTX for compute_XY assembled by nvJitLink where the build has it: NVRTC's own
 * cubins ignored --ftz on a GPU machine (CUDA 13.0, driver 580: the first compile's setting held
 * for every later one in the process, so TROUPE_DENORMALS=keep still flushed), while its PTX
 * carries the setting in every instruction (.ftz or not), which the assembler keeps. */
static troupe_status_t s_compile(const char *source, const char *name, const char *arch,
                                 bool cubin, bool ftz, char **out_code, size_t *out_size,
                                 char **out_log)
{
#if TROUPE_HAVE_NVJITLINK
    if (cubin && arch != NULL && strncmp(arch, "sm_", 3) == 0 && strlen(arch) < 64) {
        char virt[80];
        snprintf(virt, sizeof virt, "compute_%s", arch + 3);
        char *ptx = NULL;
        size_t ptx_size = 0;
        TROUPE_RETURN_IF_ERROR(s_nvrtc(source, name, virt, false, ftz, &ptx, &ptx_size, out_log));
        troupe_status_t st = s_ptx_to_cubin(ptx, name ? name : "troupe.cu", arch, out_code,
                                            out_size);
        troupe_free(ptx);
        if (st == TROUPE_OK || st == TROUPE_RESOURCE_EXHAUSTED)
            return st;
        /* nvJitLink refused (older than NVRTC, say): NVRTC's own cubin, which may not honour
         * --ftz; said once per compile */
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_DEVICES,
                   "cuda compile %s for %s: %s; NVRTC's own cubin instead (its subnormal mode "
                   "may be the process's first)",
                   name ? name : "troupe.cu", arch, troupe_last_error());
        troupe_free(out_log != NULL ? *out_log : NULL);
        if (out_log != NULL)
            *out_log = NULL;
    }
#endif
    return s_nvrtc(source, name, arch, cubin, ftz, out_code, out_size, out_log);
}

troupe_status_t troupe_nvrtc_compile(const char *source, const char *name, const char *arch,
                                     char **out_ptx, char **out_log)
{
    return s_compile(source, name, arch, false, false, out_ptx, NULL, out_log);
}

troupe_status_t troupe_nvrtc_compile_image(const char *source, const char *name, const char *arch,
                                           bool ftz, void **out_code, size_t *out_size,
                                           char **out_log)
{
    if (out_code == NULL || out_size == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nvrtc_compile_image: NULL output");
    *out_code = NULL;
    *out_size = 0;
    bool cubin = arch != NULL && strncmp(arch, "sm_", 3) == 0;
    char *code = NULL;
    troupe_status_t st = s_compile(source, name, arch, cubin, ftz, &code, out_size, out_log);
    if (st == TROUPE_OK && !cubin)
        *out_size += 1; /* PTX: the terminating NUL belongs to the image */
    *out_code = code;
    return st;
}

troupe_status_t troupe_nvrtc_arch_for(int major, int minor, char *buf, size_t cap)
{
    if (buf == NULL || cap < 16 || major <= 0 || minor < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_nvrtc_arch_for: bad arguments (%d.%d, capacity %zu)", major,
                             minor, cap);
    int n = 0;
    nvrtcResult res = nvrtcGetNumSupportedArchs(&n);
    if (res != NVRTC_SUCCESS || n <= 0)
        return troupe__error(TROUPE_DEVICE_ERROR, "nvrtcGetNumSupportedArchs: %s",
                             nvrtcGetErrorString(res));
    int archs[256];
    if (n > 256)
        n = 256;
    res = nvrtcGetSupportedArchs(archs);
    if (res != NVRTC_SUCCESS)
        return troupe__error(TROUPE_DEVICE_ERROR, "nvrtcGetSupportedArchs: %s",
                             nvrtcGetErrorString(res));
    int want = major * 10 + minor, best = -1;
    for (int i = 0; i < n; i++) {
        if (archs[i] == want) {
            snprintf(buf, cap, "sm_%d", want);
            return TROUPE_OK;
        }
        if (archs[i] < want && archs[i] > best)
            best = archs[i];
    }
    if (best < 0)
        return troupe__error(TROUPE_NOT_FOUND,
                             "NVRTC cannot compile for compute capability %d.%d (its oldest "
                             "architecture is newer)",
                             major, minor);
    snprintf(buf, cap, "compute_%d", best);
    return TROUPE_OK;
}

#if TROUPE_HAVE_NVJITLINK
static char s_assembler[48];
static pthread_once_t s_assembler_once = PTHREAD_ONCE_INIT;

static void s_assembler_name(void)
{
    unsigned major = 0, minor = 0;
    if (nvJitLinkVersion(&major, &minor) == NVJITLINK_SUCCESS)
        snprintf(s_assembler, sizeof s_assembler, "nvjitlink %u.%u", major, minor);
    else
        snprintf(s_assembler, sizeof s_assembler, "nvjitlink");
}
#endif

const char *troupe_nvrtc_assembler(void)
{
#if TROUPE_HAVE_NVJITLINK
    pthread_once(&s_assembler_once, s_assembler_name);
    return s_assembler;
#else
    return "nvrtc";
#endif
}

troupe_status_t troupe_nvrtc_version(int *major, int *minor)
{
    if (major == NULL || minor == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nvrtc_version: NULL output");
    nvrtcResult res = nvrtcVersion(major, minor);
    if (res != NVRTC_SUCCESS)
        return troupe__error(TROUPE_DEVICE_ERROR, "nvrtcVersion: %s", nvrtcGetErrorString(res));
    return TROUPE_OK;
}

/* "<major>.<minor>" of a CUDA version number (1000 * major + 10 * minor), or "none" for 0. */
static void s_cuda_version_str(int v, char *buf, size_t cap)
{
    if (v <= 0)
        snprintf(buf, cap, "none");
    else
        snprintf(buf, cap, "%d.%d", v / 1000, (v % 1000) / 10);
}

troupe_status_t troupe_cuda_versions(char *buf, size_t cap)
{
    if (buf == NULL || cap < 64)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_cuda_versions: NULL buffer or capacity %zu < 64", cap);
    char nvrtc[32] = "none", runtime[32], driver[32];
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
        snprintf(nvrtc, sizeof nvrtc, "%d.%d", major, minor);
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
        v = 0;
        (void)cudaGetLastError(); /* leave no error behind for later runtime calls */
    }
    s_cuda_version_str(v, runtime, sizeof runtime);
    /* No driver installed: cudaSuccess with 0 (CUDA runtime API reference); an error code
     * (libcuda.so.1 present but unusable) also reads "none". */
    v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) {
        v = 0;
        (void)cudaGetLastError();
    }
    s_cuda_version_str(v, driver, sizeof driver);
    snprintf(buf, cap, "nvrtc %s, runtime %s, driver %s", nvrtc, runtime, driver);
    return TROUPE_OK;
}
