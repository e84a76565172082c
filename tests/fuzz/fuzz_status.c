/* libFuzzer target for the control plane's decoders (transport/zmq/wire_impl.h): every input goes
 * through troupe__status_fuzz_one (the same entry point the seed-corpus test in
 * tests/test_status.c uses), which reads it as ZeroMQ frames, answers them as a status request
 * and checks that the reply keeps the message schema ([id][status]..., an OK reply decodable),
 * decodes them as a reply, and parses the bytes as a job file. A broken schema is a bug: trap so
 * the fuzzer records the input. Crashes, leaks and undefined behaviour are caught by the
 * sanitizers.
 *
 * Build: CC=clang cmake -DTROUPE_BUILD_FUZZ=ON ...
 * Run:   fuzz_status WORK_DIR tests/data/status_corpus (new inputs go to WORK_DIR, the first). */
#include "transport/zmq/wire_impl.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    troupe_status_t st = troupe__status_fuzz_one(data, size);
    if (st == TROUPE_INTERNAL)
        __builtin_trap();
    return 0;
}
