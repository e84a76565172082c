/* troupe — the status board (see board_impl.h).
 *
 * Each slot is a seqlock: the owner makes `seq` odd, stores the fields (release), makes it even
 * again (release); a reader loads `seq` (acquire), the fields (acquire), `seq` again, and keeps
 * the copy when both loads saw the same even value. Every field is an atomic (strings are packed
 * into 64-bit words), so there is no data race for the compiler or ThreadSanitizer to see, and
 * no fence is needed: a reader that sees one new field also sees the odd `seq` stored before it.
 */
#define _GNU_SOURCE /* gettid */
#include "actors/board_impl.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define S_NAME_WORDS ((TROUPE__BOARD_NAME_MAX + 1) / 8)
#define S_ON_WORDS ((TROUPE__BOARD_WAIT_ON_MAX + 1) / 8)
#define S_READ_TRIES 64
#define S_EXTEND_GRACE_NS (1000LL * 1000 * 1000) /* after the transport's verdict is due */
#define S_PROBE_ALLOWANCE_NS (5LL * 1000 * 1000 * 1000)

_Static_assert((TROUPE__BOARD_NAME_MAX + 1) % 8 == 0, "names pack into words");
_Static_assert((TROUPE__BOARD_WAIT_ON_MAX + 1) % 8 == 0, "wait_on packs into words");

struct troupe__board_slot {
    atomic_int claimed;  /* 0 free, 1 in use (claim: compare-and-swap) */
    atomic_uint readers; /* readers of q_in/q_out right now */
    atomic_uint seq;     /* odd while the owner writes */
    atomic_int kind, state, wait_rank;
    _Atomic int64_t queue, since_ns, coll_done, coll_active, due_ns;
    _Atomic int64_t issued; /* outside the seqlock: written by any submitting thread */
    _Atomic(const atomic_uint_fast64_t *) q_in;
    _Atomic(const atomic_uint_fast64_t *) q_out;
    _Atomic uint64_t name[S_NAME_WORDS], wait_on[S_ON_WORDS], wait_by[S_NAME_WORDS];
    const void *key; /* owner only: the event recorded as waited on */
};

static troupe__board_slot_t s_slots[TROUPE__BOARD_SLOTS];
static atomic_uint_fast64_t s_missed;
static _Atomic(troupe__board_slot_t *) s_transport;
static _Atomic(troupe__board_deadline_fn) s_deadline_hook;

static const char *const s_kind_names[] = {"free", "stream", "device", "transport", "host"};
static const char *const s_state_names[] = {"idle", "parked",  "waiting", "fingerprints",
                                            "data", "probing", "running"};

const char *troupe__board_kind_name(int kind)
{
    return kind > 0 && kind < TROUPE__BOARD_KIND_COUNT ? s_kind_names[kind] : "?";
}

const char *troupe__board_state_name(int state)
{
    return state >= 0 && state < TROUPE__BOARD_STATE_COUNT ? s_state_names[state] : "?";
}

/* ---- writing ----------------------------------------------------------------------------- */

static void s_begin(troupe__board_slot_t *s)
{
    unsigned q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 1, memory_order_relaxed);
}

static void s_end(troupe__board_slot_t *s)
{
    unsigned q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 1, memory_order_release);
}

static void s_put_i64(_Atomic int64_t *f, int64_t v)
{
    atomic_store_explicit(f, v, memory_order_release);
}

static void s_put_int(atomic_int *f, int v)
{
    atomic_store_explicit(f, v, memory_order_release);
}

/* Stores `len` bytes of `str` (cut at `len` and at words*8-1) NUL-padded into words. */
static void s_put_str(_Atomic uint64_t *words, size_t nwords, const char *str, size_t len)
{
    char buf[8 * S_ON_WORDS] = {0};
    size_t cap = nwords * 8 - 1;
    if (str != NULL) {
        if (len > cap)
            len = cap;
        memcpy(buf, str, len);
    }
    for (size_t i = 0; i < nwords; i++) {
        uint64_t w;
        memcpy(&w, buf + 8 * i, 8);
        atomic_store_explicit(&words[i], w, memory_order_release);
    }
}

static void s_put_cstr(_Atomic uint64_t *words, size_t nwords, const char *str)
{
    s_put_str(words, nwords, str, str != NULL ? strlen(str) : 0);
}

/* Who completes an event, from its name: "cpu:0:1#5" -> "cpu:0:1"; "transport:..." and the
 * remote moves' events -> "transport"; otherwise unknown (""). */
static void s_producer(const char *name, const char **by, size_t *len)
{
    *by = "";
    *len = 0;
    if (name == NULL)
        return;
    const char *hash = strchr(name, '#');
    if (hash != NULL) {
        *by = name;
        *len = (size_t)(hash - name);
    } else if (strncmp(name, "transport:", 10) == 0 || strncmp(name, "remote-", 7) == 0) {
        *by = "transport";
        *len = 9;
    }
}

troupe__board_slot_t *troupe__board_claim(troupe__board_kind_t kind, const char *name,
                                          const atomic_uint_fast64_t *q_in,
                                          const atomic_uint_fast64_t *q_out)
{
    for (size_t i = 0; i < TROUPE__BOARD_SLOTS; i++) {
        troupe__board_slot_t *s = &s_slots[i];
        int expected = 0;
        if (atomic_load_explicit(&s->claimed, memory_order_relaxed) != 0 ||
            !atomic_compare_exchange_strong(&s->claimed, &expected, 1))
            continue;
        s->key = NULL;
        atomic_store(&s->q_in, q_in != NULL && q_out != NULL ? q_in : NULL);
        atomic_store(&s->q_out, q_in != NULL && q_out != NULL ? q_out : NULL);
        atomic_store_explicit(&s->issued, 0, memory_order_relaxed);
        s_begin(s);
        s_put_int(&s->state, TROUPE__BOARD_IDLE);
        s_put_int(&s->wait_rank, -1);
        s_put_i64(&s->queue, -1);
        s_put_i64(&s->since_ns, 0);
        s_put_i64(&s->coll_done, 0);
        s_put_i64(&s->coll_active, 0);
        s_put_i64(&s->due_ns, 0);
        s_put_cstr(s->name, S_NAME_WORDS, name);
        s_put_cstr(s->wait_on, S_ON_WORDS, NULL);
        s_put_cstr(s->wait_by, S_NAME_WORDS, NULL);
        s_put_int(&s->kind, (int)kind);
        s_end(s);
        if (kind == TROUPE__BOARD_TRANSPORT)
            atomic_store(&s_transport, s);
        return s;
    }
    atomic_fetch_add_explicit(&s_missed, 1, memory_order_relaxed);
    return NULL;
}

void troupe__board_release(troupe__board_slot_t **slot_p)
{
    if (slot_p == NULL || *slot_p == NULL)
        return;
    troupe__board_slot_t *s = *slot_p;
    *slot_p = NULL;
    troupe__board_slot_t *expected = s;
    atomic_compare_exchange_strong(&s_transport, &expected, NULL);
    /* No reader may follow the counters once this returns (they die with their actor). */
    atomic_store(&s->q_in, NULL);
    atomic_store(&s->q_out, NULL);
    while (atomic_load(&s->readers) != 0)
        sched_yield();
    s_begin(s);
    s_put_int(&s->kind, TROUPE__BOARD_FREE);
    s_end(s);
    atomic_store_explicit(&s->claimed, 0, memory_order_release);
}

void troupe__board_wait_event(troupe__board_slot_t *slot, const troupe_event_t *ev)
{
    if (slot == NULL || slot->key == (const void *)ev)
        return;
    slot->key = ev;
    const char *name = ev != NULL ? troupe_event_name(ev) : NULL;
    const char *by;
    size_t by_len;
    s_producer(name, &by, &by_len);
    bool stream = atomic_load_explicit(&slot->kind, memory_order_relaxed) == TROUPE__BOARD_STREAM;
    s_begin(slot);
    s_put_int(&slot->state, ev == NULL ? TROUPE__BOARD_IDLE
                            : stream   ? TROUPE__BOARD_PARKED
                                       : TROUPE__BOARD_WAITING);
    s_put_i64(&slot->since_ns, ev != NULL ? troupe_now_ns() : 0);
    s_put_cstr(slot->wait_on, S_ON_WORDS, name);
    s_put_str(slot->wait_by, S_NAME_WORDS, by, by_len);
    s_end(slot);
}

void troupe__board_set_transport(troupe__board_slot_t *slot, const troupe__board_transport_t *t)
{
    if (slot == NULL || t == NULL)
        return;
    s_begin(slot);
    s_put_int(&slot->state, (int)t->state);
    s_put_int(&slot->wait_rank, t->wait_rank);
    s_put_i64(&slot->queue, t->queue);
    s_put_i64(&slot->since_ns, t->since_ns);
    s_put_i64(&slot->coll_done, t->coll_done);
    s_put_i64(&slot->coll_active, t->coll_active);
    s_put_i64(&slot->due_ns, t->verdict_due_ns);
    s_put_cstr(slot->wait_on, S_ON_WORDS, t->wait_on);
    s_put_cstr(slot->wait_by, S_NAME_WORDS, t->wait_by);
    s_end(slot);
}

void troupe__board_set_queue(troupe__board_slot_t *slot, int64_t queue)
{
    if (slot != NULL)
        atomic_store_explicit(&slot->queue, queue, memory_order_release);
}

void troupe__board_set_issued(troupe__board_slot_t *slot, int64_t issued)
{
    if (slot != NULL)
        atomic_store_explicit(&slot->issued, issued, memory_order_relaxed);
}

/* ---- host threads ------------------------------------------------------------------------ */

static pthread_once_t s_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t s_host_key;
static bool s_key_ok;
static _Thread_local troupe__board_slot_t *s_host;
static _Thread_local int64_t s_extend_limit; /* this wait's bound on extensions, 0 unset */

static void s_host_exit(void *slot)
{
    troupe__board_slot_t *s = slot;
    troupe__board_release(&s);
}

static void s_make_key(void)
{
    s_key_ok = pthread_key_create(&s_host_key, s_host_exit) == 0;
}

/* The calling thread's slot, claimed at its first wait (once: a full table is not retried). */
static troupe__board_slot_t *s_host_slot(void)
{
    static _Thread_local bool tried;
    if (s_host != NULL || tried)
        return s_host;
    tried = true;
    pthread_once(&s_key_once, s_make_key);
    if (!s_key_ok)
        return NULL;
    char name[TROUPE__BOARD_NAME_MAX + 1];
    pid_t tid = gettid();
    if (tid == getpid())
        snprintf(name, sizeof name, "main");
    else
        snprintf(name, sizeof name, "host-%ld", (long)tid);
    s_host = troupe__board_claim(TROUPE__BOARD_HOST, name, NULL, NULL);
    if (s_host != NULL)
        pthread_setspecific(s_host_key, s_host);
    return s_host;
}

void troupe__board_host_wait(const char *what, const char *by)
{
    s_extend_limit = 0;
    troupe__board_slot_t *s = s_host_slot();
    if (s == NULL)
        return;
    const char *pby = by;
    size_t by_len = by != NULL ? strlen(by) : 0;
    if (by == NULL)
        s_producer(what, &pby, &by_len);
    char idle[TROUPE__BOARD_WAIT_ON_MAX + 1];
    if (what == NULL && by != NULL) { /* "<stream> idle", without formatting */
        size_t n = by_len < sizeof idle - 6 ? by_len : sizeof idle - 6;
        memcpy(idle, by, n);
        memcpy(idle + n, " idle", 6);
        what = idle;
    }
    s->key = NULL;
    s_begin(s);
    s_put_int(&s->state, TROUPE__BOARD_WAITING);
    s_put_i64(&s->since_ns, troupe_now_ns());
    s_put_cstr(s->wait_on, S_ON_WORDS, what);
    s_put_str(s->wait_by, S_NAME_WORDS, pby, by_len);
    s_end(s);
}

void troupe__board_host_done(void)
{
    troupe__board_slot_t *s = s_host;
    if (s == NULL)
        return;
    s_begin(s);
    s_put_int(&s->state, TROUPE__BOARD_IDLE);
    s_put_i64(&s->since_ns, 0);
    s_end(s);
}

/* ---- reading ----------------------------------------------------------------------------- */

static int64_t s_get_i64(_Atomic int64_t *f)
{
    return atomic_load_explicit(f, memory_order_acquire);
}

static int s_get_int(atomic_int *f)
{
    return atomic_load_explicit(f, memory_order_acquire);
}

static void s_get_str(_Atomic uint64_t *words, size_t nwords, char *out)
{
    for (size_t i = 0; i < nwords; i++) {
        uint64_t w = atomic_load_explicit(&words[i], memory_order_acquire);
        memcpy(out + 8 * i, &w, 8);
    }
    out[nwords * 8 - 1] = '\0';
}

/* One consistent copy of slot s into r; false when the owner kept writing. */
static bool s_read(troupe__board_slot_t *s, troupe__board_rec_t *r)
{
    for (int tries = 0; tries < S_READ_TRIES; tries++) {
        unsigned q1 = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (q1 & 1u) {
            sched_yield();
            continue;
        }
        r->kind = s_get_int(&s->kind);
        r->state = s_get_int(&s->state);
        r->wait_rank = s_get_int(&s->wait_rank);
        r->queue = s_get_i64(&s->queue);
        r->since_ns = s_get_i64(&s->since_ns);
        r->coll_done = s_get_i64(&s->coll_done);
        r->coll_active = s_get_i64(&s->coll_active);
        r->verdict_due_ns = s_get_i64(&s->due_ns);
        s_get_str(s->name, S_NAME_WORDS, r->name);
        s_get_str(s->wait_on, S_ON_WORDS, r->wait_on);
        s_get_str(s->wait_by, S_NAME_WORDS, r->wait_by);
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) == q1)
            return true;
    }
    return false;
}

/* The queue length from the owner's counters, if it published them. */
static int64_t s_queue(troupe__board_slot_t *s, int64_t fallback)
{
    atomic_fetch_add(&s->readers, 1);
    const atomic_uint_fast64_t *in = atomic_load(&s->q_in);
    const atomic_uint_fast64_t *out = atomic_load(&s->q_out);
    int64_t q = fallback;
    if (in != NULL && out != NULL) {
        uint64_t done = atomic_load(out); /* first: `in` only grows */
        q = (int64_t)(atomic_load(in) - done);
    }
    atomic_fetch_sub(&s->readers, 1);
    return q;
}

size_t troupe__board_snapshot(troupe__board_rec_t *out, size_t cap, uint64_t *missed)
{
    size_t n = 0;
    for (size_t i = 0; i < TROUPE__BOARD_SLOTS && n < cap; i++) {
        troupe__board_slot_t *s = &s_slots[i];
        if (atomic_load_explicit(&s->claimed, memory_order_acquire) == 0)
            continue;
        troupe__board_rec_t *r = &out[n];
        memset(r, 0, sizeof *r);
        if (!s_read(s, r)) { /* keep who it is; its wait was changing under us */
            r->state = TROUPE__BOARD_IDLE;
            r->wait_rank = -1;
            r->since_ns = 0;
            r->wait_on[0] = r->wait_by[0] = '\0';
        }
        if (r->kind <= TROUPE__BOARD_FREE || r->kind >= TROUPE__BOARD_KIND_COUNT)
            continue;
        r->queue = s_queue(s, r->queue);
        r->coll_issued = atomic_load_explicit(&s->issued, memory_order_relaxed);
        n++;
    }
    if (missed != NULL)
        *missed = atomic_load_explicit(&s_missed, memory_order_relaxed);
    return n;
}

/* ---- deadlines --------------------------------------------------------------------------- */

bool troupe__board_extend_deadline(int64_t *deadline_ns)
{
    troupe__board_slot_t *s = atomic_load(&s_transport);
    if (s == NULL || deadline_ns == NULL || *deadline_ns == TROUPE_TIMEOUT_INFINITE)
        return false;
    troupe__board_rec_t r;
    if (!s_read(s, &r) || r.kind != TROUPE__BOARD_TRANSPORT)
        return false;
    /* waiting: a gated collective, failed at its gate's deadline (transport/mpi/engine.c) */
    bool gated = r.state == TROUPE__BOARD_WAITING && r.verdict_due_ns > 0;
    if (r.state != TROUPE__BOARD_FINGERPRINT && r.state != TROUPE__BOARD_DATA &&
        r.state != TROUPE__BOARD_PROBING && !gated)
        return false;
    /* A verdict already due comes at the engine's next turn (a process resumed after a stop
     * finds every deadline past at once): a grace period lets it arrive. */
    int64_t now = troupe_now_ns();
    int64_t due = (r.verdict_due_ns > now ? r.verdict_due_ns : now) + S_EXTEND_GRACE_NS;
    if (s_extend_limit == 0)
        s_extend_limit = now + troupe_config_timeout_ns() + S_PROBE_ALLOWANCE_NS;
    if (due > s_extend_limit)
        due = s_extend_limit;
    if (due <= *deadline_ns || due <= now)
        return false;
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_ACTORS,
               "a host wait's deadline passed while the transport waits for %s in %s: waiting "
               "%.1f s more for its verdict",
               r.wait_by[0] ? r.wait_by : "other ranks", r.wait_on, (double)(due - now) / 1e9);
    *deadline_ns = due;
    return true;
}

void troupe__board_set_deadline_hook(troupe__board_deadline_fn fn)
{
    atomic_store(&s_deadline_hook, fn);
}

void troupe__board_deadline_hit(troupe_status_t status)
{
    troupe__board_deadline_fn fn = atomic_load(&s_deadline_hook);
    if (fn == NULL)
        return;
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", troupe_last_error());
    fn(status, saved);
    troupe__error(status, "%s", saved);
}
