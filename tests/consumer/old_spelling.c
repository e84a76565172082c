/* The consumer test (tests/consumer/run.sh): the spelling of troupe before 0.2 — "actors/..."
 * with include/troupe on the path — still compiles through the compatibility directory that
 * the .pc and the CMake package add (docs/install.md). Compiled and linked, not run. */
#include "actors/troupe.h"
#include "parallel/dp.h"

int main(void)
{
    troupe_backend_t *b = NULL;
    troupe_status_t st = troupe_backend_open("cpu", TROUPE_ONLY_DEVICES_PARALLEL, &b);
    troupe_backend_close(&b);
    return st == TROUPE_OK ? 0 : 1;
}
