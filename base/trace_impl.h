/* troupe — the trace recorder's internal API (base/trace.h; not installed): events with
 * arguments, the rank's extra timelines, and what transport/ tells the recorder (rank, clock
 * offset).
 *
 * A call site pays one branch when tracing is off:
 *
 *     int64_t t0 = troupe__trace_on() ? troupe_now_ns() : 0;
 *     ... the work ...
 *     if (t0 != 0) {
 *         troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("bytes", n)};
 *         troupe__trace_emit(TROUPE__TRACK_THREAD, "copy", "h2d", t0, troupe_now_ns(), a, 1);
 *     }
 *
 * Thread safety: thread-safe; each thread writes its own buffer (registered once, under a
 * lock), readers take only what was published (release/acquire).
 * Ownership: names are copied; categories, argument keys and string argument values are
 * borrowed and must be string literals.
 */
#ifndef TROUPE_BASE_TRACE_IMPL_H
#define TROUPE_BASE_TRACE_IMPL_H

#include "base/trace.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where an event is drawn: the recording thread's own timeline, or one of the rank's shared
 * ones (events of one track must not overlap partially: each is a sequence, or nested). */
typedef enum troupe__trace_track {
    TROUPE__TRACK_THREAD = 0,
    TROUPE__TRACK_COLLECTIVES, /* one span per collective, arrival to completion */
    TROUPE__TRACK_PHASES,      /* a collective's phases (fingerprints, shared memory, ...) */
    TROUPE__TRACK_BUCKET0,     /* fusion buckets in flight (two at a time) */
    TROUPE__TRACK_BUCKET1,
    TROUPE__TRACK_STEPS, /* training steps as the owner stream runs them */
    TROUPE__TRACK_P2P,   /* point-to-point transfers between ranks */
    TROUPE__TRACK_COUNT,
} troupe__trace_track_t;

#define TROUPE__TRACE_MAX_ARGS 4
#define TROUPE__TRACE_NAME_MAX 48

/* An argument: a number, or (str != NULL) a string literal. */
typedef struct troupe__trace_arg {
    const char *key;
    const char *str;
    int64_t num;
} troupe__trace_arg_t;

#define TROUPE__TRACE_NUM(k, v) {(k), NULL, (int64_t)(v)}
#define TROUPE__TRACE_STR(k, s) {(k), (s), 0}

/* 0: not yet known (configuration not loaded), 1: off, 2: on. */
extern atomic_int troupe__trace_state;

int troupe__trace_on_slow(void);

/* Whether tracing is on: one load and one predictable branch once the configuration is
 * loaded. */
static inline int troupe__trace_on(void)
{
    int s = atomic_load_explicit(&troupe__trace_state, memory_order_relaxed);
    if (__builtin_expect(s == 1, 1))
        return 0;
    return s == 2 ? 1 : troupe__trace_on_slow();
}

/* Records a complete event (see the header comment). At most TROUPE__TRACE_MAX_ARGS arguments
 * are kept. Does nothing when tracing is off. */
void troupe__trace_emit(troupe__trace_track_t track, const char *cat, const char *name,
                        int64_t t0_ns, int64_t t1_ns, const troupe__trace_arg_t *args,
                        size_t nargs);

/* Start-up check (troupe_backend_open, troupe_cluster_init): with tracing on, the directory of
 * the prefix must exist and be writable, or the timelines would be lost at exit.
 * FAILED_PRECONDITION naming TROUPE_TRACE, the directory and why. */
troupe_status_t troupe__trace_check(void);

/* base/config: TROUPE_TRACE was read or set (NULL or "": off). */
void troupe__trace_configure(const char *prefix);

/* base/log: the calling thread's tag (its timeline's name) changed. */
void troupe__trace_name_thread(const char *tag);

/* transport/: this process's rank and the cluster's size (file name, metadata). */
void troupe__trace_set_rank(int rank, int size);

/* transport/: this rank's clock minus rank 0's (ns): offset_ns, the one the merge uses;
 * measured_ns, measured with a round trip of rtt_ns (off by at most rtt_ns / 2) as the best of
 * `samples`; same_clock: this rank reads rank 0's very clock (offset_ns is then 0). */
void troupe__trace_set_clock(int64_t offset_ns, int64_t measured_ns, int64_t rtt_ns, int samples,
                             bool same_clock);

/* Tests: the events a thread keeps from now on (0: TROUPE_TRACE_MAX_EVENTS_PER_THREAD);
 * rounded up to whole chunks of 1024. */
void troupe__trace_set_max_events(size_t per_thread);

#ifdef __cplusplus
}
#endif
#endif
