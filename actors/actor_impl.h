/* troupe — internal helpers of the actor core (see actor.h): S-expression strings for debug
 * info (ir/sexp_impl.h's writer), and ThreadSanitizer happens-before annotations. Internal: not
 * installed.
 *
 * Thread safety: the annotations may be called from any thread. Ownership: nothing is retained.
 */
#ifndef TROUPE_ACTORS_ACTOR_IMPL_H
#define TROUPE_ACTORS_ACTOR_IMPL_H

#include "actors/actor.h"
#include "base/strbuf.h"
#include "ir/sexp_impl.h" /* troupe__sexp_put_quoted: strings of debug info */

#ifdef __cplusplus
extern "C" {
#endif

/* Happens-before edges through channels TSAN cannot see (libzmq's lock-free pipes); no-ops in
 * builds without ThreadSanitizer. */
void troupe__hb_release(const void *addr);
void troupe__hb_acquire(const void *addr);

#ifdef __cplusplus
}
#endif
#endif
