/* troupe — the graph policy behind troupe_driver_launch (devices/device.h): when a launch on a
 * driver with graph entries is captured, replayed, or stays plain. Internal: device.c calls it.
 *
 * State: one record per (driver, queue, code) that was launched with graphs on, holding up to
 * TROUPE_GRAPH_SLOTS argument bindings (a copy of the troupe_karg_t array), each with its count
 * of plain launches and its graph once captured. A record is refused (plain for good) after a
 * failed capture or graph launch or too many evictions, and says why once at debug level.
 *
 * Thread safety: the record table is behind one mutex; a record's slots are used by the thread
 * that drives its queue (device.h), and dropped by troupe__graph_forget, which callers run only
 * when no launch of that queue or code is in progress. Ownership: the policy owns the graphs it
 * captured and releases them through the driver's graph_release.
 */
#ifndef TROUPE_DEVICES_GRAPH_IMPL_H
#define TROUPE_DEVICES_GRAPH_IMPL_H

#include "devices/device.h"

/* A launch through the policy (the driver has the three graph entries; q and code non-NULL). */
TROUPE_MUST_USE troupe_status_t troupe__graph_run(troupe_driver_t *drv, troupe_dqueue_t *q,
                                                  troupe_dcode_t *code, const troupe_karg_t *args,
                                                  size_t nargs);

/* Releases the graphs and records of drv matching q (NULL: any queue) and code (NULL: any
 * code). Called before a queue is destroyed, a code released and the driver closed. */
void troupe__graph_forget(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code);

#endif
