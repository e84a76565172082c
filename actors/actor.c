/* troupe — actor core: zactor wrapper, mailboxes, message schema (see actor.h). */
#define _GNU_SOURCE
#include "actors/actor_impl.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define TROUPE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TROUPE_TSAN 1
#endif
#endif
#ifndef TROUPE_TSAN
#define TROUPE_TSAN 0
#endif
#if TROUPE_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* ---- TSAN ---------------------------------------------------------------------------------- */

void troupe__hb_release(const void *addr)
{
#if TROUPE_TSAN
    __tsan_release((void *)addr);
#else
    (void)addr;
#endif
}

void troupe__hb_acquire(const void *addr)
{
#if TROUPE_TSAN
    __tsan_acquire((void *)addr);
#else
    (void)addr;
#endif
}

/* ---- spinning ------------------------------------------------------------------------------ */

bool troupe__spin_step(troupe__spin_t *sp, int64_t limit_ns)
{
    int64_t now = troupe_now_ns();
    if (sp->steps++ == 0)
        sp->start_ns = now;
    if (now - sp->start_ns >= limit_ns)
        return false;
    sched_yield();
    return true;
}

/* ---- zsys initialisation ------------------------------------------------------------------- */

static pthread_mutex_t s_init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool s_zsys_ready;
static bool s_at_exit_registered;
static pthread_once_t s_atfork_once = PTHREAD_ONCE_INIT;

/* The live actors (troupe_actor_t.live_prev/next), for s_at_exit; guarded by s_live_lock. */
static pthread_mutex_t s_live_lock = PTHREAD_MUTEX_INITIALIZER;
static troupe_actor_t *s_live;
static bool s_exiting; /* s_at_exit runs: destroyed actors are no longer freed */

static void s_at_exit(void);

static void s_atfork_child(void)
{
    /* CZMQ resets its own state in a forked child; redo ours on next use there. The parent's
     * actor threads do not exist in the child: forget them (their memory stays). */
    s_zsys_ready = false;
    s_live = NULL;
}

static void s_register_atfork(void)
{
    pthread_atfork(NULL, NULL, s_atfork_child);
}

static troupe_status_t s_zsys_init(void)
{
    troupe_status_t st = TROUPE_OK;
    pthread_once(&s_atfork_once, s_register_atfork);
    pthread_mutex_lock(&s_init_lock);
    if (!s_zsys_ready) {
        zsys_handler_set(NULL); /* a library does not take SIGINT/SIGTERM */
        if (!zsys_init()) {
            st = troupe__error(TROUPE_TRANSPORT_ERROR, "zsys_init failed: %s",
                               zmq_strerror(zmq_errno()));
        } else {
            if (!getenv("ZSYS_LOGSTREAM"))
                zsys_set_logstream(stderr); /* never stdout */
            s_zsys_ready = true;
            /* Registered after zsys_init registered zsys_shutdown, so it runs before it
             * (atexit handlers run in reverse order). Once: a forked child inherits it. */
            if (!s_at_exit_registered && atexit(s_at_exit) == 0)
                s_at_exit_registered = true;
        }
    }
    pthread_mutex_unlock(&s_init_lock);
    return st;
}

/* ---- actors -------------------------------------------------------------------------------- */

struct troupe_actor {
    zactor_t *za;
    pthread_mutex_t lock; /* serialises the pipe's front end (sockets are not thread-safe) */
    atomic_uint_fast64_t next_id;
    zactor_fn *fn;
    void *args;
    char tag[48];
    /* Setup result, written by the actor thread before `ready` is stored (release). */
    atomic_int ready; /* 0: not yet; 1: troupe_actor_ready was called */
    troupe_status_t setup_status;
    char setup_msg[1024];
    char hb; /* address used for TSAN happens-before edges through the pipe */
    troupe_actor_t *live_prev, *live_next; /* s_live, under s_live_lock */
};

static _Thread_local troupe_actor_t *s_self;

/* Under s_live_lock. */
static void s_live_add(troupe_actor_t *a)
{
    a->live_prev = NULL;
    a->live_next = s_live;
    if (s_live)
        s_live->live_prev = a;
    s_live = a;
}

/* Under s_live_lock; a no-op for an actor that is not in the list. */
static void s_live_remove(troupe_actor_t *a)
{
    if (a->live_prev)
        a->live_prev->live_next = a->live_next;
    else if (s_live == a)
        s_live = a->live_next;
    else
        return;
    if (a->live_next)
        a->live_next->live_prev = a->live_prev;
    a->live_prev = a->live_next = NULL;
}

/* Process exit with actors still running (a program that returns without closing its backend,
 * or calls exit): CZMQ's exit handler, zsys_shutdown, would close their pipes under them and
 * an actor thread that then touches its pipe fails CZMQ's assertions: SIGABRT. So this handler,
 * which runs first, stops each live actor as troupe_actor_destroy does ($TERM, then the wait
 * for its thread: a stream cancels its queued work). The actors' memory is not freed: the
 * program may still hold pointers to them. The calling thread's own actor (exit called on an
 * actor thread) cannot wait for itself and is left to CZMQ. */
static void s_at_exit(void)
{
    for (;;) {
        pthread_mutex_lock(&s_live_lock);
        s_exiting = true;
        troupe_actor_t *a = s_live;
        while (a && a == s_self)
            a = a->live_next;
        if (a)
            s_live_remove(a);
        pthread_mutex_unlock(&s_live_lock);
        if (!a)
            break;
        pthread_mutex_lock(&a->lock);
        troupe__hb_release(&a->hb);
        zactor_destroy(&a->za); /* NULL afterwards: troupe_actor_request says CANCELLED */
        troupe__hb_acquire(&a->hb);
        pthread_mutex_unlock(&a->lock);
    }
}

static void s_boot(zsock_t *pipe, void *args)
{
    troupe_actor_t *a = (troupe_actor_t *)args;
    s_self = a;
    troupe_log_set_thread_tag(a->tag[0] ? a->tag : NULL);
    a->fn(pipe, a->args);
    if (!atomic_load_explicit(&a->ready, memory_order_acquire)) {
        /* The function returned without reporting: fail the creator. zactor's shim signals once
         * more on exit, so zactor_destroy still finds its signal. */
        troupe__error(TROUPE_INTERNAL, "actor %s returned before signalling ready", a->tag);
        troupe_actor_ready(pipe, TROUPE_INTERNAL);
    }
    s_self = NULL;
}

void troupe_actor_ready(zsock_t *pipe, troupe_status_t status)
{
    troupe_actor_t *a = s_self;
    if (a && !atomic_load_explicit(&a->ready, memory_order_relaxed)) {
        a->setup_status = status;
        if (status != TROUPE_OK)
            snprintf(a->setup_msg, sizeof a->setup_msg, "%s", troupe_last_error());
        atomic_store_explicit(&a->ready, 1, memory_order_release);
    }
    zsock_signal(pipe, status == TROUPE_OK ? 0 : 1);
}

troupe_status_t troupe_actor_new(const char *tag, zactor_fn *fn, void *args, troupe_actor_t **out)
{
    troupe_status_t st = TROUPE_OK;
    troupe_actor_t *a = NULL;
    if (!out || !fn)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_actor_new: NULL %s",
                             out ? "function" : "out");
    *out = NULL;
    st = s_zsys_init();
    if (st != TROUPE_OK)
        return st;
    a = (troupe_actor_t *)troupe_calloc(1, sizeof *a);
    if (!a)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "troupe_actor_new: out of memory");
    pthread_mutex_init(&a->lock, NULL);
    atomic_init(&a->next_id, 1);
    atomic_init(&a->ready, 0);
    a->fn = fn;
    a->args = args;
    if (tag)
        snprintf(a->tag, sizeof a->tag, "%s", tag);
    a->za = zactor_new(s_boot, a);
    if (!a->za) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "zactor_new failed for %s: %s", a->tag,
                           zmq_strerror(zmq_errno()));
        goto cleanup_actor;
    }
    if (!atomic_load_explicit(&a->ready, memory_order_acquire)) {
        st = troupe__error(TROUPE_INTERNAL, "actor %s did not report its setup", a->tag);
        goto cleanup_zactor;
    }
    if (a->setup_status != TROUPE_OK) {
        st = troupe__error(a->setup_status, "%s", a->setup_msg);
        goto cleanup_zactor;
    }
    pthread_mutex_lock(&s_live_lock);
    s_live_add(a);
    pthread_mutex_unlock(&s_live_lock);
    *out = a;
    return TROUPE_OK;

cleanup_zactor:
    zactor_destroy(&a->za);
cleanup_actor:
    pthread_mutex_destroy(&a->lock);
    troupe_free(a);
    return st;
}

void troupe_actor_destroy(troupe_actor_t **actor_p)
{
    if (!actor_p || !*actor_p)
        return;
    troupe_actor_t *a = *actor_p;
    *actor_p = NULL;
    pthread_mutex_lock(&s_live_lock);
    s_live_remove(a);
    bool exiting = s_exiting; /* then s_at_exit may hold a: keep its memory */
    pthread_mutex_unlock(&s_live_lock);
    pthread_mutex_lock(&a->lock);
    troupe__hb_release(&a->hb);
    zactor_destroy(&a->za); /* sends $TERM, waits for the actor's exit signal */
    troupe__hb_acquire(&a->hb);
    pthread_mutex_unlock(&a->lock);
    if (exiting)
        return;
    pthread_mutex_destroy(&a->lock);
    troupe_free(a);
}

uint64_t troupe_actor_next_id(troupe_actor_t *actor)
{
    return atomic_fetch_add_explicit(&actor->next_id, 1, memory_order_relaxed);
}

/* The id a reply to `req` must carry: frame 1 when it is 8 bytes, else 0. */
static uint64_t s_request_id(zmsg_t *req)
{
    uint64_t id = 0;
    zframe_t *f = zmsg_first(req);
    if (f)
        f = zmsg_next(req);
    if (f && zframe_size(f) == sizeof id)
        memcpy(&id, zframe_data(f), sizeof id);
    return id;
}

static bool s_reply_matches(zmsg_t *reply, uint64_t id)
{
    zframe_t *f = zmsg_first(reply);
    uint64_t got;
    if (!f || zframe_size(f) != sizeof got)
        return false;
    memcpy(&got, zframe_data(f), sizeof got);
    return got == id;
}

troupe_status_t troupe_actor_request(troupe_actor_t *actor, zmsg_t **req_p, int64_t timeout_ns,
                                     zmsg_t **reply_p)
{
    troupe_status_t st = TROUPE_OK;
    if (reply_p)
        *reply_p = NULL;
    if (!actor || !req_p || !*req_p || !reply_p || zmsg_size(*req_p) == 0) {
        if (req_p)
            zmsg_destroy(req_p);
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_actor_request: NULL or empty");
    }
    uint64_t id = s_request_id(*req_p);
    int64_t deadline = troupe_deadline_after(timeout_ns);

    pthread_mutex_lock(&actor->lock);
    if (!actor->za) {
        zmsg_destroy(req_p);
        st = troupe__error(TROUPE_CANCELLED, "actor %s: stopped at process exit", actor->tag);
        goto unlock;
    }
    void *sock = zsock_resolve(actor->za);
    troupe__hb_release(&actor->hb);
    if (zmsg_send(req_p, actor->za) != 0) {
        zmsg_destroy(req_p);
        st = troupe__error(TROUPE_TRANSPORT_ERROR, "actor %s: send failed: %s", actor->tag,
                           zmq_strerror(zmq_errno()));
        goto unlock;
    }
    for (;;) {
        int64_t left = troupe_deadline_remaining(deadline);
        long ms = left == INT64_MAX ? -1 : (long)((left + 999999) / 1000000);
        zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&item, 1, ms);
        if (rc < 0) {
            if (zmq_errno() == EINTR)
                continue;
            st = troupe__error(TROUPE_TRANSPORT_ERROR, "actor %s: poll failed: %s", actor->tag,
                               zmq_strerror(zmq_errno()));
            break;
        }
        if (rc == 0) {
            if (troupe_deadline_remaining(deadline) > 0)
                continue;
            st = troupe__error(TROUPE_DEADLINE_EXCEEDED,
                               "actor %s: no reply to request %llu within %lld ns", actor->tag,
                               (unsigned long long)id, (long long)timeout_ns);
            break;
        }
        zmsg_t *reply = zmsg_recv(actor->za);
        if (!reply) {
            st = troupe__error(TROUPE_TRANSPORT_ERROR, "actor %s: receive failed: %s", actor->tag,
                               zmq_strerror(zmq_errno()));
            break;
        }
        troupe__hb_acquire(&actor->hb);
        if (s_reply_matches(reply, id)) {
            *reply_p = reply;
            break;
        }
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_ACTORS,
                   "actor %s: discarding a stale reply (waiting for %llu)", actor->tag,
                   (unsigned long long)id);
        zmsg_destroy(&reply);
    }
unlock:
    pthread_mutex_unlock(&actor->lock);
    return st;
}

zmsg_t *troupe_actor_recv(zsock_t *pipe)
{
    zmsg_t *msg = zmsg_recv(pipe);
    if (msg && s_self)
        troupe__hb_acquire(&s_self->hb);
    return msg;
}

troupe_status_t troupe_actor_send(zsock_t *pipe, zmsg_t **msg_p)
{
    if (!msg_p || !*msg_p)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_actor_send: NULL message");
    if (s_self)
        troupe__hb_release(&s_self->hb);
    if (zmsg_send(msg_p, pipe) != 0) {
        zmsg_destroy(msg_p);
        return troupe__error(TROUPE_TRANSPORT_ERROR, "actor reply failed: %s",
                             zmq_strerror(zmq_errno()));
    }
    return TROUPE_OK;
}

void troupe_actor_reply_status(zsock_t *pipe, uint64_t id, troupe_status_t status)
{
    zmsg_t *reply = NULL;
    if (troupe_msg_build(&reply, "8S", id, status) != TROUPE_OK)
        return;
    if (troupe_actor_send(pipe, &reply) != TROUPE_OK)
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_ACTORS, "%s", troupe_last_error());
}

/* ---- mailboxes ----------------------------------------------------------------------------- */

typedef struct s_mail {
    zmsg_t *msg;
    struct s_mail *next;
} s_mail_t;

struct troupe_mailbox {
    atomic_int_fast32_t refs;
    pthread_mutex_t lock;
    s_mail_t *head, *tail;
    bool closed;
    int fd;       /* eventfd (Linux) or the read end of a pipe: what the owner polls */
    int write_fd; /* same as fd for eventfd, the write end of the pipe otherwise */
    /* The poll handle: a copy of fd at the head of a zeroed block. CZMQ's zpoller probes every
     * item as a libzmq socket before taking it as a file descriptor (zsock_resolve calls
     * zmq_getsockopt, whose socket tag check reads 1560 bytes past the pointer in libzmq
     * 4.3.4), so a bare int would be read far out of bounds: AddressSanitizer's heap layout
     * turned that read into a SEGV in a stream actor. The block is larger than the probe reads
     * and holds no socket tag. */
    union {
        int fd;
        unsigned char probe_room[4096];
    } handle;
};

troupe_status_t troupe_mailbox_new(troupe_mailbox_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_mailbox_new: NULL out");
    *out = NULL;
    troupe_status_t st = s_zsys_init();
    if (st != TROUPE_OK)
        return st;
    troupe_mailbox_t *mb = (troupe_mailbox_t *)troupe_calloc(1, sizeof *mb);
    if (!mb)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "troupe_mailbox_new: out of memory");
    char es[128];
#ifdef __linux__
    mb->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    mb->write_fd = mb->fd;
    if (mb->fd < 0) {
        st = troupe__error(TROUPE_TRANSPORT_ERROR, "eventfd: %s",
                           strerror_r(errno, es, sizeof es)); /* GNU: returns the text */
        troupe_free(mb);
        return st;
    }
#else
    int fds[2];
    if (pipe(fds) != 0) {
        st = troupe__error(TROUPE_TRANSPORT_ERROR, "pipe: %s",
                           strerror_r(errno, es, sizeof es)); /* GNU: returns the text */
        troupe_free(mb);
        return st;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    mb->fd = fds[0];
    mb->write_fd = fds[1];
#endif
    mb->handle.fd = mb->fd; /* the rest of the block stays zero (calloc) */
    atomic_init(&mb->refs, 1);
    pthread_mutex_init(&mb->lock, NULL);
    *out = mb;
    return TROUPE_OK;
}

void troupe_mailbox_retain(troupe_mailbox_t *mb)
{
    atomic_fetch_add_explicit(&mb->refs, 1, memory_order_relaxed);
}

void troupe_mailbox_release(troupe_mailbox_t **mb_p)
{
    if (!mb_p || !*mb_p)
        return;
    troupe_mailbox_t *mb = *mb_p;
    *mb_p = NULL;
    if (atomic_fetch_sub_explicit(&mb->refs, 1, memory_order_acq_rel) != 1)
        return;
    s_mail_t *m = mb->head;
    while (m) {
        s_mail_t *next = m->next;
        zmsg_destroy(&m->msg);
        troupe_free(m);
        m = next;
    }
    if (mb->write_fd != mb->fd)
        close(mb->write_fd);
    close(mb->fd);
    pthread_mutex_destroy(&mb->lock);
    troupe_free(mb);
}

static void s_fd_signal(int fd)
{
#ifdef __linux__
    uint64_t one = 1;
    ssize_t rc;
    do
        rc = write(fd, &one, sizeof one);
    while (rc < 0 && errno == EINTR);
#else
    char one = 1;
    ssize_t rc;
    do
        rc = write(fd, &one, 1);
    while (rc < 0 && errno == EINTR);
#endif
    /* EAGAIN: the counter is saturated or the pipe is full — the owner is awake anyway. */
    (void)rc;
}

troupe_status_t troupe_mailbox_post(troupe_mailbox_t *mb, zmsg_t **msg_p)
{
    if (!mb || !msg_p || !*msg_p) {
        if (msg_p)
            zmsg_destroy(msg_p);
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_mailbox_post: NULL argument");
    }
    s_mail_t *m = (s_mail_t *)troupe_malloc(sizeof *m);
    if (!m) {
        zmsg_destroy(msg_p);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "troupe_mailbox_post: out of memory");
    }
    m->msg = *msg_p;
    m->next = NULL;
    *msg_p = NULL;
    pthread_mutex_lock(&mb->lock);
    if (mb->closed) {
        pthread_mutex_unlock(&mb->lock);
        zmsg_destroy(&m->msg);
        troupe_free(m);
        return troupe__error(TROUPE_UNAVAILABLE, "mailbox closed: its actor has ended");
    }
    bool was_empty = mb->head == NULL;
    if (mb->tail)
        mb->tail->next = m;
    else
        mb->head = m;
    mb->tail = m;
    /* Signal under the lock: a concurrent close+release cannot close the descriptor first. */
    if (was_empty)
        s_fd_signal(mb->write_fd);
    pthread_mutex_unlock(&mb->lock);
    return TROUPE_OK;
}

void troupe_mailbox_wake(troupe_mailbox_t *mb)
{
    s_fd_signal(mb->write_fd);
}

void *troupe_mailbox_poll_handle(troupe_mailbox_t *mb)
{
    return &mb->handle.fd;
}

void troupe_mailbox_clear(troupe_mailbox_t *mb)
{
#ifdef __linux__
    uint64_t v;
    ssize_t rc;
    do
        rc = read(mb->fd, &v, sizeof v);
    while (rc < 0 && errno == EINTR);
#else
    char buf[64];
    while (read(mb->fd, buf, sizeof buf) > 0) {
    }
#endif
}

zmsg_t *troupe_mailbox_take(troupe_mailbox_t *mb)
{
    zmsg_t *msg = NULL;
    pthread_mutex_lock(&mb->lock);
    s_mail_t *m = mb->head;
    if (m) {
        mb->head = m->next;
        if (!mb->head)
            mb->tail = NULL;
    }
    pthread_mutex_unlock(&mb->lock);
    if (m) {
        msg = m->msg;
        troupe_free(m);
    }
    return msg;
}

void troupe_mailbox_close(troupe_mailbox_t *mb)
{
    pthread_mutex_lock(&mb->lock);
    mb->closed = true;
    pthread_mutex_unlock(&mb->lock);
}

/* ---- message schema ------------------------------------------------------------------------ */

static troupe_status_t s_vappend(zmsg_t *msg, const char *picture, va_list ap)
{
    for (const char *p = picture; *p; p++) {
        int rc = 0;
        switch (*p) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            rc = s ? zmsg_addstr(msg, s) : zmsg_addmem(msg, NULL, 0);
            break;
        }
        case '8': {
            uint64_t v = va_arg(ap, uint64_t);
            rc = zmsg_addmem(msg, &v, sizeof v);
            break;
        }
        case '4': {
            uint32_t v = va_arg(ap, uint32_t);
            rc = zmsg_addmem(msg, &v, sizeof v);
            break;
        }
        case 'S': {
            uint32_t v = (uint32_t)va_arg(ap, int); /* enums promote to int */
            rc = zmsg_addmem(msg, &v, sizeof v);
            break;
        }
        case 'p': {
            const void *v = va_arg(ap, const void *);
            rc = zmsg_addmem(msg, &v, sizeof v);
            break;
        }
        default:
            return troupe__error(TROUPE_INVALID_ARGUMENT, "message picture: unknown letter '%c'",
                                 *p);
        }
        if (rc != 0)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "message: cannot add a frame");
    }
    return TROUPE_OK;
}

troupe_status_t troupe_msg_build(zmsg_t **out, const char *picture, ...)
{
    if (!out || !picture)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_msg_build: NULL argument");
    *out = NULL;
    zmsg_t *msg = zmsg_new();
    if (!msg)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "troupe_msg_build: out of memory");
    va_list ap;
    va_start(ap, picture);
    troupe_status_t st = s_vappend(msg, picture, ap);
    va_end(ap);
    if (st != TROUPE_OK) {
        zmsg_destroy(&msg);
        return st;
    }
    *out = msg;
    return TROUPE_OK;
}

troupe_status_t troupe_msg_append(zmsg_t *msg, const char *picture, ...)
{
    if (!msg || !picture)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_msg_append: NULL argument");
    va_list ap;
    va_start(ap, picture);
    troupe_status_t st = s_vappend(msg, picture, ap);
    va_end(ap);
    return st;
}

static size_t s_letter_size(char c)
{
    switch (c) {
    case '8':
        return 8;
    case '4':
    case 'S':
        return 4;
    case 'p':
        return sizeof(void *);
    default:
        return 0;
    }
}

troupe_status_t troupe_msg_decode(zmsg_t *msg, const char *picture, ...)
{
    if (!msg || !picture)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_msg_decode: NULL argument");
    size_t want = strlen(picture);
    if (zmsg_size(msg) != want)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "message has %zu frames, expected %zu",
                             zmsg_size(msg), want);
    /* Validate every frame first so that nothing is allocated for a bad message. */
    zframe_t *f = zmsg_first(msg);
    for (size_t i = 0; i < want; i++, f = zmsg_next(msg)) {
        char c = picture[i];
        if (c == 's')
            continue;
        size_t need = s_letter_size(c);
        if (need == 0)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "message picture: unknown letter '%c'",
                                 c);
        if (zframe_size(f) != need)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "message frame %zu: %zu bytes, expected %zu", i, zframe_size(f),
                                 need);
        if (c == 'S') {
            uint32_t v;
            memcpy(&v, zframe_data(f), sizeof v);
            if (v >= TROUPE_STATUS_COUNT)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "message frame %zu: unknown status %u", i, v);
        }
    }
    troupe_status_t st = TROUPE_OK;
    va_list ap;
    va_start(ap, picture);
    f = zmsg_first(msg);
    for (size_t i = 0; i < want; i++, f = zmsg_next(msg)) {
        switch (picture[i]) {
        case 's': {
            char **out = va_arg(ap, char **);
            if (out) {
                size_t n = zframe_size(f);
                char *s = (char *)troupe_malloc(n + 1);
                if (!s) {
                    st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "message: out of memory");
                    *out = NULL;
                    break;
                }
                if (n)
                    memcpy(s, zframe_data(f), n);
                s[n] = '\0';
                *out = s;
            }
            break;
        }
        case '8': {
            uint64_t *out = va_arg(ap, uint64_t *);
            if (out)
                memcpy(out, zframe_data(f), sizeof *out);
            break;
        }
        case '4': {
            uint32_t *out = va_arg(ap, uint32_t *);
            if (out)
                memcpy(out, zframe_data(f), sizeof *out);
            break;
        }
        case 'S': {
            troupe_status_t *out = va_arg(ap, troupe_status_t *);
            if (out) {
                uint32_t v;
                memcpy(&v, zframe_data(f), sizeof v);
                *out = (troupe_status_t)v;
            }
            break;
        }
        case 'p': {
            void **out = va_arg(ap, void **);
            if (out)
                memcpy(out, zframe_data(f), sizeof *out);
            break;
        }
        default:
            break;
        }
    }
    va_end(ap);
    return st;
}

troupe_status_t troupe_msg_head(zmsg_t *msg, char *verb, size_t cap, uint64_t *id)
{
    if (verb && cap)
        verb[0] = '\0';
    if (id)
        *id = 0;
    if (!msg || !verb || cap == 0 || !id)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_msg_head: NULL argument");
    zframe_t *f0 = zmsg_first(msg);
    zframe_t *f1 = f0 ? zmsg_next(msg) : NULL;
    if (f1 && zframe_size(f1) == sizeof *id)
        memcpy(id, zframe_data(f1), sizeof *id);
    if (!f0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "empty message");
    size_t n = zframe_size(f0);
    if (n == 0 || n > TROUPE_MSG_VERB_MAX || n >= cap)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "message verb of %zu bytes", n);
    memcpy(verb, zframe_data(f0), n);
    verb[n] = '\0';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)verb[i];
        if (c < 0x20 || c > 0x7e) {
            verb[0] = '\0';
            return troupe__error(TROUPE_INVALID_ARGUMENT, "message verb is not printable");
        }
    }
    if (!f1)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: missing request id frame", verb);
    if (zframe_size(f1) != sizeof *id)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: request id frame of %zu bytes", verb,
                             zframe_size(f1));
    return TROUPE_OK;
}

