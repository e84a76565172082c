/* troupe — the OpenBLAS peer of the benchmarks (bench/): its identity, its thread count, and
 * whether it runs the kernels this CPU can take.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels ("core") when it is loaded,
 * from the CPU model, or from OPENBLAS_CORETYPE when that is set. A release older than the CPU
 * does not know the model and falls back to a generic core: OpenBLAS 0.3.21 (Debian 12) runs
 * the SSE3 core "Prescott" on an AVX-512 Xeon of model 0xCF, several times slower than its
 * AVX-512 core. A peer in that state is not at its best; the benchmarks say so, and
 * deploy/bench.sh sets OPENBLAS_CORETYPE to the core the CPU's features call for (the
 * `openblas_core` helper program prints it).
 *
 * Compiled only into programs that link OpenBLAS (BENCH_HAVE_OPENBLAS).
 * Thread safety: call from the main thread before timing. Ownership: strings returned are
 * static.
 */
#ifndef TROUPE_BENCH_OPENBLAS_PEER_H
#define TROUPE_BENCH_OPENBLAS_PEER_H

#include <stdbool.h>

/* The strongest OpenBLAS x86-64 core name this CPU's features allow ("Cooperlake" with
 * AVX-512 BF16, "SkylakeX" with AVX-512F, "Haswell" with AVX2 and FMA, "Sandybridge" with AVX),
 * or NULL (another architecture, or none of these). */
const char *troupe_bench_openblas_cpu_core(void);

/* The core OpenBLAS runs (openblas_get_corename()). */
const char *troupe_bench_openblas_core(void);

/* True when the core OpenBLAS runs is weaker than troupe_bench_openblas_cpu_core(). */
bool troupe_bench_openblas_core_degraded(void);

/* Sets OpenBLAS to one thread (openblas_set_num_threads(1): one stream is one core) and prints
 * its identity as a facts line:
 *   library name=openblas version="<openblas_get_config()>" core=<corename> threads=<n>
 *           path=<the loaded library file> coretype_env=<OPENBLAS_CORETYPE or unset>
 *           at_best=<yes, or no for a degraded core>
 * then, on stderr, a warning when the peer is not at its best (a degraded core). */
void troupe_bench_openblas_identify(void);

#endif
