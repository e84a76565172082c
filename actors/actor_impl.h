/* troupe — internal helpers of the actor core (see actor.h): S-expression strings for debug
 * info, and ThreadSanitizer happens-before annotations. Internal: not installed.
 *
 * Thread safety: troupe__sexp_put_quoted works on the caller's builder; the annotations may be
 * called from any thread. Ownership: nothing is retained.
 */
#ifndef TROUPE_ACTORS_ACTOR_IMPL_H
#define TROUPE_ACTORS_ACTOR_IMPL_H

#include "actors/actor.h"
#include "base/strbuf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends `s` (NULL: "") as a double-quoted S-expression string: '"' and '\\' escaped,
 * control bytes as spaces. */
void troupe__sexp_put_quoted(troupe__strbuf_t *sb, const char *s);

/* Happens-before edges through channels TSAN cannot see (libzmq's lock-free pipes); no-ops in
 * builds without ThreadSanitizer. */
void troupe__hb_release(const void *addr);
void troupe__hb_acquire(const void *addr);

#ifdef __cplusplus
}
#endif
#endif
