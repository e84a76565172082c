/* troupe — the coherence ledger: who waits for what (docs/architecture.md §4; OCANNL_NOTES §3, with the
 * gaps of §3.5 closed). Internal: not installed, not part of the user API.
 *
 * Each device keeps one ledger (troupe__ledger_t, in the device on the caller's side, behind the
 * device's mutex). It keys every device array by {pool_id, offset} (a troupe__akey_t) and keeps,
 * per array (a troupe__entry_t):
 *   - the node it holds and whether it is a cross-stream shared array (with its owner stream,
 *     the only stream allowed to write it: seed `owner_stream`);
 *   - the last writer: (stream, event) of the most recent scheduled write (routine output,
 *     from_host, d2d destination, a lend);
 *   - the readers: (stream, event) of scheduled reads still pending (routine inputs, to_host,
 *     d2d sources — COPY into a merge buffer included — and STREAMING consumers reading the
 *     array through their merge buffer), at most one entry per stream (FIFO makes the newest
 *     event of a stream imply the older ones);
 *   - host_gen: the generation of the node's host array the array holds (or -1), and whether an
 *     explicit from_host put it there, so "lagging the host" is decided per array, not per
 *     device (gap 3.5.7), and explicit uploads are not undone (actors/host.h, "Lagging the
 *     host").
 *
 * Rules, applied at schedule time by the caller holding the device's mutex:
 *   RAW  before a read on stream s: wait for the last writer if it is another stream's and not
 *        done (a failed writer is waited for too, so its failure reaches the reader);
 *   WAR  before a write on stream s: wait for every other stream's pending reader;
 *   WAW  before a write on stream s: wait for another stream's pending last write (only shared
 *        arrays can see this: link refuses a second writing stream of a shared array, naming
 *        both, unless it is the array's owner).
 * After the operation is scheduled its event is recorded on s and noted: reads add (s, e) to
 * the readers, writes replace the writer with (s, e) and drop the readers (they are all before
 * e: other streams' were waited for, s's own precede it in FIFO order). Done events are pruned
 * whenever an entry is touched, and every 64 ledger operations across the whole ledger.
 *
 * Thread safety: every function is called with the owning device's mutex held.
 * Ownership: the ledger owns its entries; entries own one reference to each event they hold.
 * Streams are borrowed (identities and names only: the device keeps them alive).
 */
#ifndef TROUPE_ACTORS_LEDGER_H
#define TROUPE_ACTORS_LEDGER_H

#include "actors/event.h"
#include "actors/stream.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "devices/device.h"
#include "ir/tnode.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device-array identity. */
typedef struct troupe__akey {
    int32_t pool_id;
    int64_t offset;
} troupe__akey_t;

static inline troupe__akey_t troupe__key_of(troupe_buffer_loc_t loc)
{
    troupe__akey_t k = {loc.pool_id, loc.offset};
    return k;
}

typedef struct troupe__reader {
    troupe_stream_t *s;
    troupe_event_t *ev;
} troupe__reader_t;

typedef struct troupe__entry {
    int32_t node_id;
    char node_name[64];
    troupe__akey_t key;
    int64_t size_bytes;
    bool shared;
    troupe_stream_t *owner;    /* shared arrays: the writing stream, NULL until one writes */
    troupe_stream_t *writer_s; /* last writer, NULL when none */
    troupe_event_t *writer_ev;
    troupe__reader_t *readers;
    size_t nreaders, readers_cap;
    int64_t host_gen;   /* host generation the array holds, -1 none */
    bool host_explicit; /* ...put there by an explicit from_host (host.h) */
} troupe__entry_t;

typedef struct troupe__ledger {
    troupe__entry_t **entries;
    size_t nentries, entries_cap;
    /* An open-addressing index of `entries` by key (linear probing, NULL slots empty), a power of
     * two at least twice nentries; NULL when it could not be allocated (finds then scan). A
     * routine run looks up each of its arrays here, so a scan cost the convnet's micro-steps 2 %.
     */
    troupe__entry_t **index;
    size_t index_cap;
    uint64_t ops; /* operations noted, for the periodic prune */
} troupe__ledger_t;

/* The entry of array `key`, or NULL. */
troupe__entry_t *troupe__ledger_find(troupe__ledger_t *l, troupe__akey_t key);
/* The entry of the array at `loc` holding tn, added (no writer, no readers, host_gen -1) when
 * missing. RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__ledger_add(troupe__ledger_t *l, troupe_tnode_t *tn,
                                                   troupe_buffer_loc_t loc, bool shared,
                                                   troupe__entry_t **out);
/* Forgets every array of pool `pool_id` (the pool is being freed). */
void troupe__ledger_remove_pool(troupe__ledger_t *l, int32_t pool_id);
/* Forgets everything (device teardown). */
void troupe__ledger_clear(troupe__ledger_t *l);
/* Drops e's done events (a failed writer is kept: its failure must reach readers). */
void troupe__ledger_prune(troupe__entry_t *e);
/* Counts one operation; every 64th prunes every entry. */
void troupe__ledger_tick(troupe__ledger_t *l);

/* RAW: makes s wait for another stream's pending write of e. The stream's refusal status. */
TROUPE_MUST_USE troupe_status_t troupe__ledger_before_read(troupe_stream_t *s, troupe__entry_t *e);
/* WAR and WAW: makes s wait for other streams' pending reads and write of e. */
TROUPE_MUST_USE troupe_status_t troupe__ledger_before_write(troupe_stream_t *s, troupe__entry_t *e);
/* Notes s's read of e completing with ev (retained). RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__ledger_note_read(troupe__entry_t *e, troupe_stream_t *s,
                                                         troupe_event_t *ev);
/* Notes s's write of e completing with ev (retained); the readers are dropped. */
void troupe__ledger_note_write(troupe__entry_t *e, troupe_stream_t *s, troupe_event_t *ev);
/* Every pending event of e, readers and writer (retained into *out, count in *n; troupe_free
 * the vector). RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__ledger_pending(troupe__entry_t *e, troupe_event_t ***out,
                                                       size_t *n);
/* Appends the ledger as an S-expression, (ledger ((array (node n) (pool 1) ...) ...)). */
void troupe__ledger_sexp(troupe__ledger_t *l, troupe__strbuf_t *sb);

#ifdef __cplusplus
}
#endif
#endif
