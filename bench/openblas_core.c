/* troupe — openblas_core: prints the core OpenBLAS picks on this machine and, when that core is
 * weaker than the CPU's features allow (openblas_peer.h), the one to force, for deploy/bench.sh:
 *
 *   <core OpenBLAS runs> <core for OPENBLAS_CORETYPE, or - when it is at its best>
 *
 * Run it with OPENBLAS_CORETYPE unset to see OpenBLAS's own choice. Exit status 0.
 */
#include "bench/openblas_peer.h"

#include <stdio.h>

int main(void)
{
    const char *want = troupe_bench_openblas_cpu_core();
    printf("%s %s\n", troupe_bench_openblas_core(),
           troupe_bench_openblas_core_degraded() && want ? want : "-");
    return 0;
}
