/* troupe — fault injection (TROUPE_FAULT; internal, not installed).
 *
 * A process can be told to fail on purpose, so that tests (and users rehearsing a failure)
 * see what a real crash, stall or error does to a run: TROUPE_FAULT holds one or more fault
 * specifications separated by commas, each `KIND[:KEY=VALUE]...`:
 *
 *   kill:rank=R:collective=N      SIGKILL this process at its collective N (1-based, as the
 *   kill:rank=R:step=N            transport numbers them in its messages: "allreduce #N"), once
 *                                 the ranks agreed on its fingerprint and its data moves (in the
 *                                 middle of a merge); or when the data-parallel driver
 *                                 schedules step N (0-based: N steps done, troupe_dp_steps_done)
 *   stall:rank=R:collective=N:ms=M   sleep M ms once at that place (a stuck rank)
 *   stall:rank=R:step=N:ms=M
 *   slow:rank=R:ms=M[:step=N | :collective=N]   sleep M ms at every step (from step N on,
 *                                 default 0), or at every collective from N on (a straggler)
 *   alloc[:nth=N][:rank=R]        the Nth device pool allocation of this process (default 1)
 *                                 fails with RESOURCE_EXHAUSTED
 *   kernel:routine=NAME[:nth=N][:rank=R]   the Nth run (default 1) of the routine compiled as
 *                                 NAME fails its event with DEVICE_ERROR
 *   kernel:routine=NAME:ms=M[:nth=N][:rank=R]   that run stalls M ms on its stream's thread
 *                                 before it launches (a stuck kernel), then runs
 *   ckpt:half[:nth=N][:kill][:rank=R]   the Nth checkpoint write (default 1) stops half-way
 *                                 as a crash would: the temporary file keeps half the bytes and
 *                                 is neither renamed nor removed; the save fails with
 *                                 INTERNAL (with `kill`, the process SIGKILLs itself there)
 *   ctrl:drop[:nth=N][:rank=R]    control-plane messages are dropped (every one, or only the
 *   ctrl:delay=MS[:rank=R]        Nth), or delayed by MS ms (troupe__fault_ctrl; the status
 *                                 actor, transport/zmq/status.c, asks before it answers a
 *                                 request)
 *
 *   overflow:step=N[:rank=R]      the gradient of training step N (0-based) overflows: with
 *                                 loss scaling on (parallel/dp.h), the step's backward pass
 *                                 starts from +inf instead of the scale, so the step must be
 *                                 skipped; without loss scaling nothing happens
 *
 * `rank=R` limits a fault to the process whose rank is R (troupe_cluster_init sets it; 0
 * before and in a single process); without it every rank has the fault. A malformed
 * specification is an error naming the bad part (troupe__fault_check): the library refuses
 * to start (troupe_backend_open, troupe_cluster_init) rather than run without the fault asked
 * for.
 *
 * Each hook is one call behind troupe__fault_armed(kind), one relaxed atomic load and a
 * branch predicted not taken: with TROUPE_FAULT unset nothing else runs.
 *
 * Thread safety: hooks are thread-safe (counters are atomic). troupe__fault_configure (through
 * troupe_config_set_fault / the environment) is meant for program start, before any hook runs.
 * Ownership: messages are recorded with troupe_error_set; nothing is handed to the caller.
 */
#ifndef TROUPE_BASE_FAULT_IMPL_H
#define TROUPE_BASE_FAULT_IMPL_H

#include "base/status.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Places a fault can be armed at (bits of troupe__fault_places). */
enum {
    TROUPE__FAULT_COLLECTIVE = 1u << 0, /* kill/stall/slow at a collective */
    TROUPE__FAULT_STEP = 1u << 1,       /* kill/stall/slow at a training step */
    TROUPE__FAULT_ALLOC = 1u << 2,
    TROUPE__FAULT_KERNEL = 1u << 3,
    TROUPE__FAULT_CKPT = 1u << 4,
    TROUPE__FAULT_CTRL = 1u << 5,
    TROUPE__FAULT_OVERFLOW = 1u << 6,
};

/* The places some fault of this process is armed at (0: TROUPE_FAULT unset). */
extern atomic_uint troupe__fault_places;

/* True when a fault is armed at `place` (a TROUPE__FAULT_* bit): the cheap test every hook
 * sits behind. */
static inline bool troupe__fault_armed(unsigned place)
{
    return __builtin_expect(
        (atomic_load_explicit(&troupe__fault_places, memory_order_relaxed) & place) != 0, 0);
}

/* Parses `spec` (NULL or "" clears every fault) and arms what it names, replacing the faults
 * configured before. INVALID_ARGUMENT naming the bad part and why (nothing is armed then). */
TROUPE_MUST_USE troupe_status_t troupe__fault_configure(const char *spec);

/* The status of the last configuration (TROUPE_OK, or INVALID_ARGUMENT with the parse error
 * recorded again as this thread's last error). Loads the configuration first. */
TROUPE_MUST_USE troupe_status_t troupe__fault_check(void);

/* The specification armed now ("" when none). Borrowed, valid until the next configure. */
const char *troupe__fault_spec(void);

/* Sets the process rank that `rank=` matches (troupe_cluster_init). */
void troupe__fault_set_rank(int rank);

/* Collective number `seq` (1-based) of this process is under way (its data phase began);
 * `what` names it ("allreduce #3"). Kills, stalls or slows as armed; returns when it does not
 * kill. */
void troupe__fault_collective(uint64_t seq, const char *what);

/* The data-parallel driver schedules step `step` (0-based: steps done so far). As above. */
void troupe__fault_step(int64_t step);

/* True when step `step`'s gradient is to overflow (overflow:step=N), logged at warn level. */
bool troupe__fault_overflow(int64_t step);

/* A device pool allocation (`what` names the pool, device and size). RESOURCE_EXHAUSTED
 * naming the fault when it is the one armed, else TROUPE_OK. */
TROUPE_MUST_USE troupe_status_t troupe__fault_alloc(const char *what);

/* A run of the routine `routine` starts on its stream. DEVICE_ERROR naming the routine and
 * the fault when armed for this run, else TROUPE_OK. */
TROUPE_MUST_USE troupe_status_t troupe__fault_kernel(const char *routine);

/* A checkpoint of *size_bytes is about to be written to `path`: true when this write is the
 * one to break, with *size_bytes halved (the caller writes that much, syncs it, and then
 * calls troupe__fault_ckpt_crash instead of finishing). */
bool troupe__fault_ckpt(const char *path, size_t *size_bytes);

/* After the half-written checkpoint: SIGKILLs the process when the fault says `kill`, else
 * returns INTERNAL naming the fault and the temporary file left behind. */
TROUPE_MUST_USE troupe_status_t troupe__fault_ckpt_crash(const char *path);

/* What to do with a control-plane message (transport/zmq): pass it, drop it, or delay it by
 * *delay_ms first. `what` names the message for the log line a drop or delay writes. */
typedef enum troupe__fault_ctrl_action {
    TROUPE__FAULT_CTRL_PASS = 0,
    TROUPE__FAULT_CTRL_DROP,
    TROUPE__FAULT_CTRL_DELAY,
} troupe__fault_ctrl_action_t;
troupe__fault_ctrl_action_t troupe__fault_ctrl(const char *what, int64_t *delay_ms);

#ifdef __cplusplus
}
#endif
#endif
