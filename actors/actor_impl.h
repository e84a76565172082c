/* troupe — internal helpers of the actor core (see actor.h): S-expression strings for debug
 * info (ir/sexp_impl.h's writer), bounded spinning, and ThreadSanitizer happens-before
 * annotations. Internal: not installed.
 *
 * Thread safety: the spin helper works on the caller's state; the annotations may be called
 * from any thread. Ownership: nothing is retained.
 */
#ifndef TROUPE_ACTORS_ACTOR_IMPL_H
#define TROUPE_ACTORS_ACTOR_IMPL_H

#include "actors/actor.h"
#include "base/strbuf.h"
#include "ir/sexp_impl.h" /* troupe__sexp_put_quoted: strings of debug info */

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A bounded busy wait for another thread of this process: a stream actor out of work waiting
 * for more, a host thread syncing an event that is about to complete. Each troupe__spin_step
 * yields the CPU once (sched_yield: on a shared or busy core the awaited thread gets it at
 * once; on an idle one the call returns at once, a poll every few hundred ns without pause
 * loops) and returns false once `limit_ns` passed since the first step: the caller then blocks.
 * A waiter that finds its condition true stops calling it. Start from TROUPE__SPIN_INIT.
 * (Measured on the 2-core development VM: pausing before the first yield made a stream round
 * trip 2-5x slower when both threads share a core, and no faster on two cores.) */
typedef struct troupe__spin {
    int64_t start_ns;
    unsigned steps;
} troupe__spin_t;
#define TROUPE__SPIN_INIT {0, 0}
bool troupe__spin_step(troupe__spin_t *sp, int64_t limit_ns);

/* Happens-before edges through channels TSAN cannot see (libzmq's lock-free pipes); no-ops in
 * builds without ThreadSanitizer. */
void troupe__hb_release(const void *addr);
void troupe__hb_acquire(const void *addr);

#ifdef __cplusplus
}
#endif
#endif
