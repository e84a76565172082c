/* troupe — the OpenBLAS peer of the benchmarks (openblas_peer.h). */
#define _GNU_SOURCE /* dladdr */
#include "bench/openblas_peer.h"
#include "bench/bench_util.h"

#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS x86-64 core names from weak to strong, as far as the benchmarks care: everything
 * not listed (Prescott, Core2, Nehalem, Atom, ...) ranks 0. */
static int s_rank(const char *core)
{
    static const char *const names[] = {"Sandybridge", "Haswell",    "Zen",
                                        "SkylakeX",    "Cooperlake", "SapphireRapids"};
    static const int ranks[] = {1, 2, 2, 3, 4, 5};
    for (size_t i = 0; core && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(core, names[i]) == 0)
            return ranks[i];
    return 0;
}

const char *troupe_bench_openblas_cpu_core(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bf16"))
        return "Cooperlake";
    if (__builtin_cpu_supports("avx512f"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    if (__builtin_cpu_supports("avx"))
        return "Sandybridge";
#endif
    return NULL;
}

const char *troupe_bench_openblas_core(void)
{
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

bool troupe_bench_openblas_core_degraded(void)
{
    const char *want = troupe_bench_openblas_cpu_core();
    return want && s_rank(troupe_bench_openblas_core()) < s_rank(want);
}

void troupe_bench_openblas_identify(void)
{
    openblas_set_num_threads(1);
    Dl_info info, sg;
    const char *path = "unknown";
    if (dladdr((void *)openblas_get_config, &info) != 0 && info.dli_fname)
        path = info.dli_fname;
    /* another BLAS loaded ahead of OpenBLAS (BLIS exports the same names) would take the calls */
    if (dladdr((void *)cblas_sgemm, &sg) != 0 && sg.dli_fname && strcmp(sg.dli_fname, path) != 0)
        fprintf(stderr,
                "bench: warning: cblas_sgemm binds to %s, not to OpenBLAS (%s): the peer's "
                "times are that library's\n",
                sg.dli_fname, path);
    const char *env = getenv("OPENBLAS_CORETYPE");
    char extra[1024];
    snprintf(extra, sizeof extra, "core=%s threads=%d path=%s coretype_env=%s at_best=%s",
             troupe_bench_openblas_core(), openblas_get_num_threads(), path,
             env && env[0] ? env : "unset", troupe_bench_openblas_core_degraded() ? "no" : "yes");
    troupe_bench_print_library("openblas", openblas_get_config(), extra);
    if (troupe_bench_openblas_core_degraded())
        fprintf(stderr,
                "bench: warning: the OpenBLAS peer is not at its best: it runs core %s, this "
                "CPU takes %s%s (deploy/bench.sh sets OPENBLAS_CORETYPE=%s)\n",
                troupe_bench_openblas_core(), troupe_bench_openblas_cpu_core(),
                env && env[0] ? " (OPENBLAS_CORETYPE is set)"
                              : " (OpenBLAS does not know this CPU model)",
                troupe_bench_openblas_cpu_core());
}
