/* troupe — the control plane's messages (docs/architecture.md §8): what `troupe status` asks a
 * rank's status actor and what it answers, with their decoders. Internal: not installed.
 *
 * A client (a DEALER, or a REQ: its empty delimiter is kept) sends to a rank's ROUTER
 *
 * | verb   | request frames          | reply frames                                          |
 * |--------|-------------------------|-------------------------------------------------------|
 * | STATUS | [STATUS s][id 8]        | [id 8][OK S][head H][record R]... (one per actor)      |
 * | other, wrong frame count or sizes | [id or 0][INVALID_ARGUMENT S][message s]         |
 *
 * (s string, 8 uint64, S troupe_status_t as 4 bytes; H one troupe__status_head_t, R one
 * troupe__status_rec_t, both in the sender's byte order: the ranks and the tool of one job run
 * the same build on one architecture, which `magic`, `version` and `rec_size` check.) The
 * reply is built from the status board (actors/board_impl.h) with the times made relative:
 * `age_ns` is how long a wait has lasted when the rank answered, `due_in_ns` how long until the
 * transport's deadline fails the collective it works on. No training data ever travels here.
 *
 * A malformed request gets the error reply; a malformed reply (a client's view) is a clear
 * error, never a crash. tests/fuzz/fuzz_status.c feeds arbitrary frames to both decoders and
 * to the job-file parser (troupe__status_fuzz_one; its seed corpus runs in tests/test_status.c).
 *
 * Thread safety: every function works on the caller's data (troupe__status_answer reads the
 * status board, which is thread-safe). Ownership: as documented per function.
 */
#ifndef TROUPE_TRANSPORT_ZMQ_WIRE_IMPL_H
#define TROUPE_TRANSPORT_ZMQ_WIRE_IMPL_H

#include "actors/board_impl.h"
#include "base/status.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE__STATUS_VERB "STATUS"
#define TROUPE__STATUS_MAGIC UINT64_C(0x7472707374617431) /* "trpstat1" */
#define TROUPE__STATUS_VERSION 1
#define TROUPE__STATUS_MAX_RECS 4096     /* records a reply may carry */
#define TROUPE__STATUS_MAX_REQ_BYTES 4096 /* ZMQ_MAXMSGSIZE of the ROUTER */
#define TROUPE__STATUS_HOST_MAX 63
#define TROUPE__STATUS_JOB_MAX 63

/* The header of a STATUS reply. */
typedef struct troupe__status_head {
    uint64_t magic;    /* TROUPE__STATUS_MAGIC */
    uint32_t version;  /* TROUPE__STATUS_VERSION */
    uint32_t rec_size; /* sizeof(troupe__status_rec_t) */
    int32_t rank, size;
    int32_t pid, nrecs;
    int64_t wall_ms;  /* the rank's realtime clock when it answered (ms since the epoch) */
    uint64_t missed;  /* actors that run without a board slot (the table was full) */
    char host[TROUPE__STATUS_HOST_MAX + 1];
    char job[TROUPE__STATUS_JOB_MAX + 1];
} troupe__status_head_t;

/* One actor of a STATUS reply (a status-board record with relative times). */
typedef struct troupe__status_rec {
    int32_t kind;      /* troupe__board_kind_t */
    int32_t state;     /* troupe__board_state_t */
    int32_t wait_rank; /* -1 none */
    int32_t reserved;
    int64_t queue;     /* -1 unknown */
    int64_t age_ns;    /* how long the current wait has lasted; 0 not waiting */
    int64_t due_in_ns; /* transport: until its deadline fails the collective (<= 0: past) */
    int64_t coll_issued, coll_done, coll_active;
    char name[TROUPE__BOARD_NAME_MAX + 1];
    char wait_on[TROUPE__BOARD_WAIT_ON_MAX + 1];
    char wait_by[TROUPE__BOARD_NAME_MAX + 1];
} troupe__status_rec_t;

/* Who answers: this process's rank, size, job id and host (set by the status actor at start). */
typedef struct troupe__status_self {
    int rank, size;
    char job[TROUPE__STATUS_JOB_MAX + 1];
    char host[TROUPE__STATUS_HOST_MAX + 1];
} troupe__status_self_t;

/* Answers one request `req` (the frames after the ROUTER's envelope; borrowed): a STATUS reply
 * from the status board, or the error reply. *reply_p gets a new message (caller owns it);
 * NULL only when out of memory. Never fails otherwise; a malformed request is logged at debug
 * level. */
void troupe__status_answer(const troupe__status_self_t *self, zmsg_t *req, zmsg_t **reply_p);

/* A decoded STATUS reply. */
typedef struct troupe__status_reply {
    troupe__status_head_t head;
    troupe__status_rec_t *recs; /* head.nrecs, owned (troupe__status_reply_clear) */
} troupe__status_reply_t;

/* Decodes `reply` (borrowed) to request `id`: OK and *out filled; the rank's error status with
 * its message (an error reply); INVALID_ARGUMENT naming what is malformed (frame count or
 * sizes, magic, version, record size, a count, rank, kind or state out of range; strings are
 * cut at their arrays' ends); RESOURCE_EXHAUSTED. *out is zeroed on failure. */
TROUPE_MUST_USE troupe_status_t troupe__status_decode_reply(zmsg_t *reply, uint64_t id,
                                                            troupe__status_reply_t *out);
void troupe__status_reply_clear(troupe__status_reply_t *r);

/* The fuzzing entry point (tests/fuzz/fuzz_status.c and the seed corpus in
 * tests/test_status.c): reads `data` as frames (each a length byte, 255 meaning a 2-byte
 * little-endian length follows, then the bytes), answers them as a request and checks the
 * reply's shape, decodes them as a reply, and parses `data` as a job file. Returns OK, or
 * INTERNAL when a reply broke the message schema (a bug: the fuzzer traps). */
troupe_status_t troupe__status_fuzz_one(const uint8_t *data, size_t size);

#ifdef __cplusplus
}
#endif
#endif
