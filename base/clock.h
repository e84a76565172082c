/* troupe — monotonic clock and deadlines.
 *
 * Thread safety: thread-safe. Ownership: nothing allocated.
 */
#ifndef TROUPE_BASE_CLOCK_H
#define TROUPE_BASE_CLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A timeout that never expires (timeout_ns arguments). */
#define TROUPE_TIMEOUT_INFINITE INT64_MAX

/* Nanoseconds on CLOCK_MONOTONIC; only differences are meaningful. */
int64_t troupe_now_ns(void);

/* Absolute deadline (troupe_now_ns units) `timeout_ns` from now; saturates to
 * TROUPE_TIMEOUT_INFINITE for an infinite or overflowing timeout. Negative means 0. */
int64_t troupe_deadline_after(int64_t timeout_ns);

/* Nanoseconds left until `deadline_ns` (0 when passed; INT64_MAX for infinite). */
int64_t troupe_deadline_remaining(int64_t deadline_ns);

/* Sleeps at least `ns` nanoseconds (resumed after signals); returns at once for ns <= 0. */
void troupe_sleep_ns(int64_t ns);

#ifdef __cplusplus
}
#endif
#endif
