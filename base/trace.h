/* troupe — timelines: what each stream, transport engine and host thread of a rank did, written
 * as a Chrome trace-event file that Perfetto (ui.perfetto.dev, "Open trace file") and
 * chrome://tracing open.
 *
 * With TROUPE_TRACE=PREFIX (or troupe_config_set_trace_prefix) every process writes
 * PREFIX.<rank>.json: one complete event ("ph":"X", ts and dur in microseconds of
 * CLOCK_MONOTONIC) per routine run, copy, wait, merge-buffer copy, collective and its phases
 * (fingerprints, shared-memory arrivals/reduction/departures, ring reduce-scatter and
 * allgather, MPI_Iallreduce buckets, with their bytes), compilation and training step; pid is
 * the rank, tid the thread (its name: the stream, "transport", "host") or one of the rank's
 * timelines ("collectives", "steps", "buckets"). The file's "otherData" holds the rank, the
 * cluster size, the clock offset to rank 0 found at troupe_cluster_init (clock_offset_us: 0 on
 * rank 0's machine, which shares its clock, clock_same_as_rank0; else the offset measured
 * with the shortest of 32 round trips, clock_measured_offset_us, off by at most half of
 * clock_rtt_us) and the count of events dropped because a thread's buffer was full
 * (dropped_events). `troupe trace merge` aligns the ranks' files into one and reports
 * stragglers.
 *
 * The file is written at exit, by troupe_cluster_finalize, when the cluster fails and by
 * troupe_cluster_leave (the error path that ends a job), and by troupe_trace_flush; each write
 * replaces the file with everything recorded so far. Events are buffered per thread, without
 * locks; a thread keeps at most TROUPE_TRACE_MAX_EVENTS_PER_THREAD events, and counts the
 * rest as dropped. When tracing is off, recording costs one predictable branch.
 *
 * Thread safety: thread-safe. Ownership: names and categories are copied when recorded (a
 * name is truncated to 47 bytes); a phase name is borrowed and must outlive the process's
 * last flush (a string literal).
 */
#ifndef TROUPE_BASE_TRACE_H
#define TROUPE_BASE_TRACE_H

#include "troupe/base/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Events one thread keeps (about 180 bytes each, allocated as they come); later ones are
 * counted in the file's dropped_events. */
#define TROUPE_TRACE_MAX_EVENTS_PER_THREAD (1 << 20)

/* Whether this process records a trace (TROUPE_TRACE set and not empty). */
bool troupe_trace_enabled(void);

/* Records a complete event on the calling thread's timeline: `category` and `name` (copied,
 * NULL reads ""), from start_ns to end_ns (troupe_now_ns() times; end before start records
 * a zero duration). Does nothing when tracing is off. */
void troupe_trace_span(const char *category, const char *name, int64_t start_ns, int64_t end_ns);

/* Names the step phase the calling thread is in ("trainer.loss"; NULL: none) and returns the
 * previous one. Collectives issued by this thread carry it, so the straggler report of
 * `troupe trace merge` groups lateness by it. `phase` is borrowed: a string literal. */
const char *troupe_trace_set_phase(const char *phase);

/* The calling thread's step phase (NULL: none). */
const char *troupe_trace_phase(void);

/* Writes PREFIX.<rank>.json now, with every event recorded so far (a temporary file renamed
 * over it). OK when tracing is off. Errors: NOT_FOUND (the file cannot be created or written:
 * the OS error), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_trace_flush(void);

#ifdef __cplusplus
}
#endif
#endif
