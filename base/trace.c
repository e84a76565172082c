/* troupe — the trace recorder (base/trace.h, base/trace_impl.h).
 *
 * Each recording thread owns a buffer: a chain of chunks of S_CHUNK_EVENTS events. The owner
 * fills a slot, then publishes the chunk's count (release); a flush reads the counts (acquire)
 * and the slots below them, so nothing on the recording path takes a lock. A buffer is
 * registered once per thread (under s_mu) and kept until the process ends, so the events of a
 * thread that exited are still written. A buffer past TROUPE_TRACE_MAX_EVENTS_PER_THREAD events
 * counts what it drops.
 */
#define _GNU_SOURCE /* gettid */
#include "base/trace_impl.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/config_impl.h"
#include "base/log.h"
#include "troupe_config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_CHUNK_EVENTS 1024
#define S_PREFIX_MAX 1024
#define S_THREAD_TID0 100 /* thread timelines' tids; the shared tracks are 1..TRACK_COUNT-1 */

typedef struct s_ev {
    int64_t t0_ns, t1_ns;
    const char *cat;
    troupe__trace_arg_t args[TROUPE__TRACE_MAX_ARGS];
    uint8_t track, nargs;
    char name[TROUPE__TRACE_NAME_MAX];
} s_ev_t;

typedef struct s_chunk {
    _Atomic(struct s_chunk *) next; /* set (release) before an event of it is published */
    atomic_size_t count;            /* events published */
    s_ev_t ev[S_CHUNK_EVENTS];
} s_chunk_t;

typedef struct s_buf {
    struct s_buf *next; /* the registry, newest first; immutable once linked */
    int tid;
    char name[TROUPE__TRACE_NAME_MAX]; /* under s_mu */
    s_chunk_t *head;                   /* immutable */
    /* the owner thread only */
    s_chunk_t *tail;
    size_t tail_n, total;
    atomic_uint_fast64_t dropped;
} s_buf_t;

atomic_int troupe__trace_state = 0;

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static s_buf_t *s_bufs; /* s_mu */
static int s_nbufs;     /* s_mu */
static char s_prefix[S_PREFIX_MAX]; /* s_mu */
static bool s_atexit_registered;    /* s_mu */
static atomic_uint_fast64_t s_lost; /* events lost before a buffer existed (out of memory) */
static atomic_size_t s_max_events = TROUPE_TRACE_MAX_EVENTS_PER_THREAD;

static atomic_int s_rank, s_size = 1;
static atomic_int_fast64_t s_clock_offset_ns, s_clock_measured_ns, s_clock_rtt_ns;
static atomic_int s_clock_samples;
static atomic_bool s_clock_same;

static pthread_mutex_t s_flush_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t s_flushed_events = UINT64_MAX; /* s_flush_mu: events in the last file */
static char s_flushed_path[S_PREFIX_MAX + 32]; /* s_flush_mu */

static _Thread_local s_buf_t *s_tls;
static _Thread_local char s_tls_name[TROUPE__TRACE_NAME_MAX];
static _Thread_local const char *s_phase;

static const char *const s_track_names[TROUPE__TRACK_COUNT] = {
    "", "collectives", "collective phases", "buckets (1)", "buckets (2)", "steps", "point-to-point",
};

/* ---- configuration ------------------------------------------------------------------------- */

static void s_atexit(void)
{
    if (troupe_trace_flush() != TROUPE_OK)
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_BASE, "%s", troupe_last_error());
}

void troupe__trace_configure(const char *prefix)
{
    bool on = prefix != NULL && prefix[0] != '\0';
    bool hook = false;
    pthread_mutex_lock(&s_mu);
    snprintf(s_prefix, sizeof s_prefix, "%s", on ? prefix : "");
    if (on && !s_atexit_registered)
        hook = s_atexit_registered = true;
    pthread_mutex_unlock(&s_mu);
    atomic_store(&troupe__trace_state, on ? 2 : 1);
    if (hook)
        atexit(s_atexit);
}

troupe_status_t troupe__trace_check(void)
{
    if (!troupe__trace_on())
        return TROUPE_OK;
    char prefix[S_PREFIX_MAX];
    pthread_mutex_lock(&s_mu);
    snprintf(prefix, sizeof prefix, "%s", s_prefix);
    pthread_mutex_unlock(&s_mu);
    /* the files are PREFIX.<rank>.json, written through a temporary beside them */
    char dir[S_PREFIX_MAX];
    const char *slash = strrchr(prefix, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == prefix)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - prefix), prefix);
    struct stat sb;
    const char *why = NULL;
    if (stat(dir, &sb) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(sb.st_mode))
        why = "not a directory";
    else if (access(dir, W_OK | X_OK) != 0)
        why = strerror(errno);
    if (why == NULL)
        return TROUPE_OK;
    return troupe__error(TROUPE_FAILED_PRECONDITION,
                         "TROUPE_TRACE '%s': its timelines (%s.<rank>.json) cannot be written: "
                         "directory '%s': %s; create it, or set TROUPE_TRACE to a writable prefix",
                         prefix, prefix, dir, why);
}

int troupe__trace_on_slow(void)
{
    troupe__config_ensure_loaded(); /* calls troupe__trace_configure */
    return atomic_load(&troupe__trace_state) == 2;
}

bool troupe_trace_enabled(void)
{
    return troupe__trace_on() != 0;
}

void troupe__trace_set_rank(int rank, int size)
{
    atomic_store(&s_rank, rank < 0 ? 0 : rank);
    atomic_store(&s_size, size < 1 ? 1 : size);
}

void troupe__trace_set_clock(int64_t offset_ns, int64_t measured_ns, int64_t rtt_ns, int samples,
                             bool same_clock)
{
    atomic_store(&s_clock_offset_ns, offset_ns);
    atomic_store(&s_clock_measured_ns, measured_ns);
    atomic_store(&s_clock_same, same_clock);
    atomic_store(&s_clock_rtt_ns, rtt_ns);
    atomic_store(&s_clock_samples, samples);
}

const char *troupe_trace_set_phase(const char *phase)
{
    const char *old = s_phase;
    s_phase = phase;
    return old;
}

const char *troupe_trace_phase(void)
{
    return s_phase;
}

/* ---- recording ----------------------------------------------------------------------------- */

static void s_default_name(char *buf, size_t cap, int tid)
{
    if (gettid() == getpid())
        snprintf(buf, cap, "host");
    else
        snprintf(buf, cap, "thread %d", tid - S_THREAD_TID0);
}

/* The calling thread's buffer, registered now (NULL when out of memory). */
static s_buf_t *s_register(void)
{
    s_buf_t *b = troupe_calloc(1, sizeof *b);
    s_chunk_t *c = troupe_calloc(1, sizeof *c);
    if (b == NULL || c == NULL) {
        troupe_free(b);
        troupe_free(c);
        return NULL;
    }
    b->head = b->tail = c;
    pthread_mutex_lock(&s_mu);
    b->tid = S_THREAD_TID0 + ++s_nbufs;
    if (s_tls_name[0] != '\0')
        snprintf(b->name, sizeof b->name, "%s", s_tls_name);
    else
        s_default_name(b->name, sizeof b->name, b->tid);
    b->next = s_bufs;
    s_bufs = b;
    pthread_mutex_unlock(&s_mu);
    s_tls = b;
    return b;
}

void troupe__trace_name_thread(const char *tag)
{
    snprintf(s_tls_name, sizeof s_tls_name, "%s", tag != NULL ? tag : "");
    if (s_tls == NULL)
        return;
    pthread_mutex_lock(&s_mu);
    if (s_tls_name[0] != '\0')
        snprintf(s_tls->name, sizeof s_tls->name, "%s", s_tls_name);
    else
        s_default_name(s_tls->name, sizeof s_tls->name, s_tls->tid);
    pthread_mutex_unlock(&s_mu);
}

void troupe__trace_emit(troupe__trace_track_t track, const char *cat, const char *name,
                        int64_t t0_ns, int64_t t1_ns, const troupe__trace_arg_t *args,
                        size_t nargs)
{
    if (!troupe__trace_on())
        return;
    s_buf_t *b = s_tls != NULL ? s_tls : s_register();
    if (b == NULL) {
        atomic_fetch_add_explicit(&s_lost, 1, memory_order_relaxed);
        return;
    }
    if (b->tail_n == S_CHUNK_EVENTS) {
        size_t cap = atomic_load_explicit(&s_max_events, memory_order_relaxed);
        s_chunk_t *c = b->total < cap ? troupe_calloc(1, sizeof *c) : NULL;
        if (c == NULL) {
            atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
            return;
        }
        atomic_store_explicit(&b->tail->next, c, memory_order_release);
        b->tail = c;
        b->tail_n = 0;
    }
    s_ev_t *e = &b->tail->ev[b->tail_n];
    e->t0_ns = t0_ns;
    e->t1_ns = t1_ns > t0_ns ? t1_ns : t0_ns;
    e->cat = cat != NULL ? cat : "";
    e->track = (uint8_t)((unsigned)track < TROUPE__TRACK_COUNT ? track : TROUPE__TRACK_THREAD);
    if (nargs > TROUPE__TRACE_MAX_ARGS)
        nargs = TROUPE__TRACE_MAX_ARGS;
    e->nargs = (uint8_t)nargs;
    for (size_t i = 0; i < nargs; i++)
        e->args[i] = args[i];
    size_t len = name != NULL ? strnlen(name, sizeof e->name - 1) : 0;
    if (len > 0)
        memcpy(e->name, name, len);
    e->name[len] = '\0';
    b->tail_n++;
    b->total++;
    atomic_store_explicit(&b->tail->count, b->tail_n, memory_order_release);
}

void troupe__trace_set_max_events(size_t per_thread)
{
    atomic_store(&s_max_events, per_thread ? per_thread : TROUPE_TRACE_MAX_EVENTS_PER_THREAD);
}

void troupe_trace_span(const char *category, const char *name, int64_t start_ns, int64_t end_ns)
{
    if (troupe__trace_on())
        troupe__trace_emit(TROUPE__TRACK_THREAD, category, name, start_ns, end_ns, NULL, 0);
}

/* ---- writing ------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 when invalid. */
static size_t s_utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (len == 0 || len > n || s[0] >= 0xf8)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

/* Writes `s` as a JSON string: quotes, backslashes and control characters escaped, bytes that
 * are not UTF-8 written as '?'. */
static void s_put_string(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else if (c < 0x80) {
            fputc(c, f);
        } else {
            size_t len = s_utf8_len(p + i, n - i);
            if (len == 0) {
                fputc('?', f);
            } else {
                fwrite(p + i, 1, len, f);
                i += len;
                continue;
            }
        }
        i++;
    }
    fputc('"', f);
}

/* Microseconds with nanosecond digits ("12.345"). */
static void s_put_us(FILE *f, int64_t ns)
{
    if (ns < 0) {
        fputc('-', f);
        ns = ns == INT64_MIN ? INT64_MAX : -ns;
    }
    fprintf(f, "%" PRId64 ".%03d", ns / 1000, (int)(ns % 1000));
}

static void s_put_event(FILE *f, int pid, int tid, const s_ev_t *e)
{
    fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", pid, tid);
    s_put_us(f, e->t0_ns);
    fputs(",\"dur\":", f);
    s_put_us(f, e->t1_ns - e->t0_ns);
    fputs(",\"cat\":", f);
    s_put_string(f, e->cat);
    fputs(",\"name\":", f);
    s_put_string(f, e->name);
    fputs(",\"args\":{", f);
    for (unsigned i = 0; i < e->nargs; i++) {
        if (i > 0)
            fputc(',', f);
        s_put_string(f, e->args[i].key != NULL ? e->args[i].key : "?");
        fputc(':', f);
        if (e->args[i].str != NULL)
            s_put_string(f, e->args[i].str);
        else
            fprintf(f, "%" PRId64, e->args[i].num);
    }
    fputs("}}", f);
}

static void s_put_meta(FILE *f, int pid, int tid, const char *what, const char *name, int sort)
{
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{\"name\":", pid,
            tid, what);
    s_put_string(f, name);
    fputs("}}", f);
    const char *key = strcmp(what, "process_name") == 0 ? "process_sort_index" : "thread_sort_index";
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{\"sort_index\":%d}}",
            pid, tid, key, sort);
}

/* A buffer as a flush sees it (taken under s_mu). */
typedef struct s_snap {
    const s_buf_t *buf;
    int tid;
    char name[TROUPE__TRACE_NAME_MAX];
} s_snap_t;

/* Events published in b, and the ones it dropped. */
static uint64_t s_count(const s_buf_t *b, uint64_t *dropped)
{
    uint64_t n = 0;
    for (s_chunk_t *c = b->head; c != NULL;
         c = atomic_load_explicit(&c->next, memory_order_acquire))
        n += atomic_load_explicit(&c->count, memory_order_acquire);
    *dropped += atomic_load_explicit(&b->dropped, memory_order_relaxed);
    return n;
}

/* Writes the whole file to f; returns the events written. */
static uint64_t s_write(FILE *f, const s_snap_t *snap, int nsnap, uint64_t dropped)
{
    int pid = atomic_load(&s_rank);
    uint64_t n = 0;
    bool used[TROUPE__TRACK_COUNT] = {false};
    fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":"
               "\"rank %d\"}}",
            pid, pid);
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_sort_index\",\"args\":{"
               "\"sort_index\":%d}}",
            pid, pid);
    for (int i = 0; i < nsnap; i++) {
        bool own = false;
        for (s_chunk_t *c = snap[i].buf->head; c != NULL;
             c = atomic_load_explicit(&c->next, memory_order_acquire)) {
            size_t cnt = atomic_load_explicit(&c->count, memory_order_acquire);
            for (size_t k = 0; k < cnt; k++) {
                const s_ev_t *e = &c->ev[k];
                int tid = e->track == TROUPE__TRACK_THREAD ? snap[i].tid : (int)e->track;
                used[e->track] = true;
                own = own || e->track == TROUPE__TRACK_THREAD;
                s_put_event(f, pid, tid, e);
                n++;
            }
        }
        if (own)
            s_put_meta(f, pid, snap[i].tid, "thread_name", snap[i].name, snap[i].tid);
    }
    for (int t = 1; t < TROUPE__TRACK_COUNT; t++)
        if (used[t])
            s_put_meta(f, pid, t, "thread_name", s_track_names[t], t);
    fprintf(f, "\n],\n\"otherData\":{\"troupe_version\":\"%s\",\"rank\":%d,\"size\":%d,"
               "\"clock\":\"CLOCK_MONOTONIC\",\"clock_offset_us\":",
            TROUPE_VERSION_STRING, pid, atomic_load(&s_size));
    s_put_us(f, atomic_load(&s_clock_offset_ns));
    fputs(",\"clock_measured_offset_us\":", f);
    s_put_us(f, atomic_load(&s_clock_measured_ns));
    fputs(",\"clock_rtt_us\":", f);
    s_put_us(f, atomic_load(&s_clock_rtt_ns));
    fprintf(f, ",\"clock_same_as_rank0\":%s", atomic_load(&s_clock_same) ? "true" : "false");
    fprintf(f,
            ",\"clock_samples\":%d,\"events\":%" PRIu64 ",\"dropped_events\":%" PRIu64
            ",\"threads\":%d,\"max_events_per_thread\":%zu,\"os_pid\":%ld}}\n",
            atomic_load(&s_clock_samples), n, dropped, nsnap, atomic_load(&s_max_events),
            (long)getpid());
    return n;
}

troupe_status_t troupe_trace_flush(void)
{
    if (!troupe__trace_on())
        return TROUPE_OK;
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&s_flush_mu);
    pthread_mutex_lock(&s_mu);
    char path[S_PREFIX_MAX + 32];
    snprintf(path, sizeof path, "%s.%d.json", s_prefix, atomic_load(&s_rank));
    int nsnap = s_nbufs;
    s_snap_t *snap = troupe_calloc(nsnap > 0 ? (size_t)nsnap : 1, sizeof *snap);
    if (snap != NULL) {
        int i = nsnap;
        for (const s_buf_t *b = s_bufs; b != NULL && i > 0; b = b->next) {
            i--; /* oldest first */
            snap[i].buf = b;
            snap[i].tid = b->tid;
            memcpy(snap[i].name, b->name, sizeof snap[i].name);
        }
    }
    pthread_mutex_unlock(&s_mu);
    if (snap == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "trace: out of memory writing %s", path);
        goto unlock;
    }
    uint64_t dropped = atomic_load(&s_lost), total = 0;
    for (int i = 0; i < nsnap; i++)
        total += s_count(snap[i].buf, &dropped);
    if (total + dropped == s_flushed_events && strcmp(path, s_flushed_path) == 0)
        goto free_snap; /* nothing new since the last write */
    char tmp[sizeof path + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        st = troupe__error(TROUPE_NOT_FOUND, "trace: cannot create %s: %s", tmp, strerror(errno));
        goto free_snap;
    }
    static char s_iobuf[1 << 16]; /* under s_flush_mu */
    setvbuf(f, s_iobuf, _IOFBF, sizeof s_iobuf);
    s_write(f, snap, nsnap, dropped);
    bool bad = ferror(f) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) {
        bad = true;
        err = errno;
    }
    if (bad || rename(tmp, path) != 0) {
        if (!bad)
            err = errno;
        remove(tmp);
        st = troupe__error(TROUPE_NOT_FOUND, "trace: cannot write %s: %s", path, strerror(err));
        goto free_snap;
    }
    s_flushed_events = total + dropped;
    snprintf(s_flushed_path, sizeof s_flushed_path, "%s", path);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_BASE, "trace: %" PRIu64 " events written to %s%s",
               total, path, dropped ? " (some dropped: see dropped_events)" : "");
free_snap:
    troupe_free(snap);
unlock:
    pthread_mutex_unlock(&s_flush_mu);
    return st;
}
