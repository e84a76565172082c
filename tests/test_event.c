/* Tests for actors/event.h and actors/actor.h: event states, sync with deadlines, subscribers
 * (callbacks and actor mailboxes), the all-combinator, the message schema helpers, actors'
 * setup status and request/reply. */
#define _POSIX_C_SOURCE 200809L
#include "actors/actor.h"
#include "actors/event.h"
#include "actors/event_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/status.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* ---- states, completion, sync ---------------------------------------------------------------- */

Test(event, new_is_pending_then_done)
{
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("test#1", &ev), TROUPE_OK);
    cr_assert_not(troupe_event_is_done(ev));
    cr_assert_eq(troupe_event_state(ev), TROUPE_EVENT_PENDING);
    cr_assert_str_eq(troupe_event_name(ev), "test#1");
    cr_assert(troupe_event_complete(ev, TROUPE_OK, NULL));
    cr_assert(troupe_event_is_done(ev));
    cr_assert_eq(troupe_event_state(ev), TROUPE_EVENT_DONE);
    cr_assert_eq(troupe_event_status(ev), TROUPE_OK);
    cr_assert_eq(troupe_event_sync(ev, 0), TROUPE_OK);
    cr_assert_null(troupe_event_copy_message(ev));
    troupe_event_release(&ev);
    cr_assert_null(ev);
    troupe_event_release(&ev); /* NULL-safe */
}

Test(event, failed_event_reports_status_and_message)
{
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("failing", &ev), TROUPE_OK);
    cr_assert(troupe_event_complete(ev, TROUPE_DEVICE_ERROR, "cudaErrorIllegalAddress in k1"));
    cr_assert(troupe_event_is_done(ev));
    cr_assert_eq(troupe_event_state(ev), TROUPE_EVENT_FAILED);
    cr_assert_eq(troupe_event_status(ev), TROUPE_DEVICE_ERROR);
    troupe_clear_error();
    cr_assert_eq(troupe_event_sync(ev, TROUPE_TIMEOUT_INFINITE), TROUPE_DEVICE_ERROR);
    cr_assert_str_eq(troupe_last_error(), "cudaErrorIllegalAddress in k1");
    char *msg = troupe_event_copy_message(ev);
    cr_assert_str_eq(msg, "cudaErrorIllegalAddress in k1");
    troupe_free(msg);
    troupe_event_release(&ev);
}

Test(event, first_completion_wins)
{
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("twice", &ev), TROUPE_OK);
    cr_assert(troupe_event_complete(ev, TROUPE_CANCELLED, "first"));
    cr_assert_not(troupe_event_complete(ev, TROUPE_OK, NULL));
    cr_assert_not(troupe_event_complete(ev, TROUPE_INTERNAL, "third"));
    cr_assert_eq(troupe_event_sync(ev, 0), TROUPE_CANCELLED);
    cr_assert_str_eq(troupe_last_error(), "first");
    troupe_event_release(&ev);
}

Test(event, sync_deadline_names_the_event)
{
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("never#7", &ev), TROUPE_OK);
    int64_t t0 = troupe_now_ns();
    cr_assert_eq(troupe_event_sync(ev, 50 * MS), TROUPE_DEADLINE_EXCEEDED);
    int64_t dt = troupe_now_ns() - t0;
    cr_assert_geq(dt, 50 * MS);
    cr_assert_lt(dt, 10000 * MS, "sync overshot its deadline: %lld ns", (long long)dt);
    cr_assert_not_null(strstr(troupe_last_error(), "never#7"), "%s", troupe_last_error());
    cr_assert_eq(troupe_event_sync(ev, 0), TROUPE_DEADLINE_EXCEEDED);
    troupe_event_release(&ev);
}

static void *s_complete_later(void *arg)
{
    rtu_sleep_ms(30);
    troupe_event_complete((troupe_event_t *)arg, TROUPE_OK, NULL);
    return NULL;
}

Test(event, sync_wakes_on_completion_from_another_thread)
{
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("later", &ev), TROUPE_OK);
    pthread_t t;
    pthread_create(&t, NULL, s_complete_later, ev);
    int64_t t0 = troupe_now_ns();
    cr_assert_eq(troupe_event_sync(ev, 60000 * MS), TROUPE_OK);
    cr_assert_lt(troupe_now_ns() - t0, 30000 * MS);
    pthread_join(t, NULL);
    troupe_event_release(&ev);
}

/* Many host threads wait on one event at once. */
static void *s_sync_forever(void *arg)
{
    return (void *)(intptr_t)troupe_event_sync((troupe_event_t *)arg, TROUPE_TIMEOUT_INFINITE);
}

Test(event, many_waiters_all_wake)
{
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("broadcast", &ev), TROUPE_OK);
    pthread_t t[6];
    for (int i = 0; i < 6; i++)
        pthread_create(&t[i], NULL, s_sync_forever, ev);
    rtu_sleep_ms(20);
    troupe_event_complete(ev, TROUPE_UNAVAILABLE, "peer gone");
    for (int i = 0; i < 6; i++) {
        void *r;
        pthread_join(t[i], &r);
        cr_assert_eq((troupe_status_t)(intptr_t)r, TROUPE_UNAVAILABLE);
    }
    troupe_event_release(&ev);
}

/* ---- subscribers --------------------------------------------------------------------------- */

typedef struct {
    atomic_int calls;
    atomic_int last_status;
    atomic_int null_event_calls;
} s_cb_state_t;

static void s_count_cb(void *user, troupe_event_t *ev, troupe_status_t status)
{
    s_cb_state_t *st = (s_cb_state_t *)user;
    atomic_fetch_add(&st->calls, 1);
    atomic_store(&st->last_status, (int)status);
    if (!ev)
        atomic_fetch_add(&st->null_event_calls, 1);
}

Test(event, subscribers_called_once_in_order_of_completion)
{
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("subs", &ev), TROUPE_OK);
    s_cb_state_t a = {0}, b = {0}, c = {0};
    cr_assert_eq(troupe_event_subscribe(ev, s_count_cb, &a), TROUPE_OK);
    cr_assert_eq(troupe_event_subscribe(ev, s_count_cb, &b), TROUPE_OK);
    cr_assert_eq(troupe_event_subscribe(ev, s_count_cb, &c), TROUPE_OK); /* grows past inline */
    cr_assert_eq(atomic_load(&a.calls), 0);
    troupe_event_complete(ev, TROUPE_INTERNAL, "bug");
    troupe_event_complete(ev, TROUPE_OK, NULL);
    cr_assert_eq(atomic_load(&a.calls), 1);
    cr_assert_eq(atomic_load(&b.calls), 1);
    cr_assert_eq(atomic_load(&c.calls), 1);
    cr_assert_eq(atomic_load(&c.last_status), TROUPE_INTERNAL);
    /* Subscribing to a completed event calls back at once. */
    s_cb_state_t d = {0};
    cr_assert_eq(troupe_event_subscribe(ev, s_count_cb, &d), TROUPE_OK);
    cr_assert_eq(atomic_load(&d.calls), 1);
    cr_assert_eq(atomic_load(&d.last_status), TROUPE_INTERNAL);
    troupe_event_release(&ev);
}

/* A subscriber reads the completion's time, not its own: dp_steplog's breakdown depends on it
 * (a late subscriber would otherwise clamp a phase to 0). */
static void s_completed_at_cb(void *user, troupe_event_t *ev, troupe_status_t status)
{
    (void)status;
    *(int64_t *)user = troupe__event_completed_ns(ev);
}

Test(event, completion_time_is_stamped_once_by_the_completer)
{
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("stamped", &ev), TROUPE_OK);
    cr_assert_eq(troupe__event_completed_ns(ev), 0, "a pending event has no completion time");
    int64_t early = 0, late = 0;
    cr_assert_eq(troupe_event_subscribe(ev, s_completed_at_cb, &early), TROUPE_OK);
    int64_t t0 = troupe_now_ns();
    troupe_event_complete(ev, TROUPE_OK, NULL);
    int64_t t1 = troupe_now_ns(), done = troupe__event_completed_ns(ev);
    cr_assert(done >= t0 && done <= t1, "completed at %lld, outside [%lld, %lld]",
              (long long)done, (long long)t0, (long long)t1);
    cr_assert_eq(early, done, "a subscriber before completion reads the completion's time");
    while (troupe_now_ns() == t1) /* the clock moves on before the late subscriber */
        ;
    troupe_event_complete(ev, TROUPE_INTERNAL, "later"); /* ignored: neither state nor time */
    cr_assert_eq(troupe_event_subscribe(ev, s_completed_at_cb, &late), TROUPE_OK);
    cr_assert_eq(late, done, "a subscriber after completion reads the completion's time");
    cr_assert_eq(troupe__event_completed_ns(NULL), 0);
    troupe_event_release(&ev);
}

Test(event, releasing_a_pending_event_cancels_subscribers)
{
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("orphan", &ev), TROUPE_OK);
    s_cb_state_t a = {0};
    cr_assert_eq(troupe_event_subscribe(ev, s_count_cb, &a), TROUPE_OK);
    troupe_event_release(&ev);
    cr_assert_eq(atomic_load(&a.calls), 1);
    cr_assert_eq(atomic_load(&a.null_event_calls), 1);
    cr_assert_eq(atomic_load(&a.last_status), TROUPE_CANCELLED);
}

Test(event, mailbox_subscription_posts_ev_done_and_ev_fail)
{
    troupe_mailbox_t *mb = NULL;
    cr_assert_eq(troupe_mailbox_new(&mb), TROUPE_OK);
    troupe_event_t *ok = NULL, *bad = NULL;
    cr_assert_eq(troupe_event_new("ok", &ok), TROUPE_OK);
    cr_assert_eq(troupe_event_new("bad", &bad), TROUPE_OK);
    cr_assert_eq(troupe_event_subscribe_mailbox(ok, mb, 11), TROUPE_OK);
    cr_assert_eq(troupe_event_subscribe_mailbox(bad, mb, 12), TROUPE_OK);
    cr_assert_null(troupe_mailbox_take(mb));
    troupe_event_complete(ok, TROUPE_OK, NULL);
    troupe_event_complete(bad, TROUPE_TRANSPORT_ERROR, "MPI_ERR_TRUNCATE");

    zmsg_t *m = troupe_mailbox_take(mb);
    cr_assert_not_null(m);
    char *verb = NULL;
    uint64_t id = 0;
    void *evp = NULL;
    cr_assert_eq(troupe_msg_decode(m, "s8p", &verb, &id, &evp), TROUPE_OK);
    cr_assert_str_eq(verb, TROUPE_VERB_EV_DONE);
    cr_assert_eq(id, 11);
    cr_assert_eq(evp, ok);
    troupe_event_t *adopted = (troupe_event_t *)evp;
    troupe_event_release(&adopted);
    troupe_free(verb);
    zmsg_destroy(&m);

    m = troupe_mailbox_take(mb);
    cr_assert_not_null(m);
    troupe_status_t st = TROUPE_OK;
    cr_assert_eq(troupe_msg_decode(m, "s8pS", &verb, &id, &evp, &st), TROUPE_OK);
    cr_assert_str_eq(verb, TROUPE_VERB_EV_FAIL);
    cr_assert_eq(id, 12);
    cr_assert_eq(st, TROUPE_TRANSPORT_ERROR);
    adopted = (troupe_event_t *)evp;
    troupe_event_release(&adopted);
    troupe_free(verb);
    zmsg_destroy(&m);
    cr_assert_null(troupe_mailbox_take(mb));

    troupe_event_release(&ok);
    troupe_event_release(&bad);
    troupe_mailbox_release(&mb);
}

Test(event, closed_mailbox_drops_the_notification_reference)
{
    troupe_mailbox_t *mb = NULL;
    cr_assert_eq(troupe_mailbox_new(&mb), TROUPE_OK);
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("late", &ev), TROUPE_OK);
    cr_assert_eq(troupe_event_subscribe_mailbox(ev, mb, 1), TROUPE_OK);
    troupe_mailbox_close(mb);
    troupe_mailbox_release(&mb); /* the subscription still holds it */
    troupe_event_complete(ev, TROUPE_OK, NULL);
    troupe_event_release(&ev); /* last reference: nothing leaked (ASAN/valgrind would say) */
}

/* ---- all ----------------------------------------------------------------------------------- */

Test(event, all_done_when_every_input_done)
{
    troupe_event_t *in[3] = {NULL};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(troupe_event_new("in", &in[i]), TROUPE_OK);
    troupe_event_t *all = NULL;
    cr_assert_eq(troupe_event_all("all3", in, 3, &all), TROUPE_OK);
    troupe_event_complete(in[1], TROUPE_OK, NULL);
    troupe_event_complete(in[0], TROUPE_OK, NULL);
    cr_assert_not(troupe_event_is_done(all));
    troupe_event_complete(in[2], TROUPE_OK, NULL);
    cr_assert_eq(troupe_event_sync(all, 0), TROUPE_OK);
    for (int i = 0; i < 3; i++)
        troupe_event_release(&in[i]);
    troupe_event_release(&all);

    cr_assert_eq(troupe_event_all("none", NULL, 0, &all), TROUPE_OK);
    cr_assert(troupe_event_is_done(all));
    troupe_event_release(&all);
}

Test(event, all_fails_at_the_first_failure)
{
    troupe_event_t *in[2] = {NULL};
    for (int i = 0; i < 2; i++)
        cr_assert_eq(troupe_event_new("in", &in[i]), TROUPE_OK);
    troupe_event_t *all = NULL;
    cr_assert_eq(troupe_event_all("all2", in, 2, &all), TROUPE_OK);
    troupe_event_complete(in[1], TROUPE_DEVICE_ERROR, "kernel crashed");
    cr_assert_eq(troupe_event_sync(all, 0), TROUPE_DEVICE_ERROR);
    cr_assert_str_eq(troupe_last_error(), "kernel crashed");
    troupe_event_complete(in[0], TROUPE_OK, NULL);
    cr_assert_eq(troupe_event_status(all), TROUPE_DEVICE_ERROR);
    for (int i = 0; i < 2; i++)
        troupe_event_release(&in[i]);
    troupe_event_release(&all);
}

Test(event, all_fails_cancelled_when_an_input_is_dropped)
{
    troupe_event_t *in = NULL;
    cr_assert_eq(troupe_event_new("dropped", &in), TROUPE_OK);
    troupe_event_t *all = NULL;
    cr_assert_eq(troupe_event_all("all1", &in, 1, &all), TROUPE_OK);
    troupe_event_release(&in);
    cr_assert_eq(troupe_event_sync(all, 0), TROUPE_CANCELLED);
    troupe_event_release(&all);
}

Test(event, debug_info_is_an_sexp)
{
    troupe_event_t *ev = NULL;
    cr_assert_eq(troupe_event_new("cpu:0:1#3", &ev), TROUPE_OK);
    char *s = NULL;
    cr_assert_eq(troupe_event_debug_info(ev, &s), TROUPE_OK);
    cr_assert_str_eq(s, "(event (name \"cpu:0:1#3\") (state pending))");
    troupe_free(s);
    troupe_event_complete(ev, TROUPE_CANCELLED, "say \"bye\"");
    cr_assert_eq(troupe_event_debug_info(ev, &s), TROUPE_OK);
    cr_assert_str_eq(s, "(event (name \"cpu:0:1#3\") (state failed) (status CANCELLED) "
                        "(message \"say \\\"bye\\\"\"))");
    troupe_free(s);
    troupe_event_release(&ev);
}

/* Concurrent completers and subscribers: every subscriber is called exactly once. */
typedef struct {
    troupe_event_t *ev;
    s_cb_state_t *cb;
} s_race_arg_t;

static void *s_race_subscribe(void *arg)
{
    s_race_arg_t *a = (s_race_arg_t *)arg;
    for (int i = 0; i < 100; i++)
        if (troupe_event_subscribe(a->ev, s_count_cb, a->cb) != TROUPE_OK)
            return (void *)1;
    return NULL;
}

static void *s_race_complete(void *arg)
{
    s_race_arg_t *a = (s_race_arg_t *)arg;
    troupe_event_complete(a->ev, TROUPE_OK, NULL);
    return NULL;
}

Test(event, concurrent_subscribe_and_complete)
{
    for (int round = 0; round < 20; round++) {
        troupe_event_t *ev = NULL;
        cr_assert_eq(troupe_event_new("race", &ev), TROUPE_OK);
        s_cb_state_t cb = {0};
        s_race_arg_t a = {ev, &cb};
        pthread_t t1, t2, t3;
        pthread_create(&t1, NULL, s_race_subscribe, &a);
        pthread_create(&t2, NULL, s_race_complete, &a);
        pthread_create(&t3, NULL, s_race_complete, &a);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        pthread_join(t3, NULL);
        cr_assert_eq(atomic_load(&cb.calls), 100);
        troupe_event_release(&ev);
    }
}

/* ---- message schema ------------------------------------------------------------------------ */

Test(msg, build_decode_roundtrip)
{
    zmsg_t *m = NULL;
    int x = 5;
    cr_assert_eq(troupe_msg_build(&m, "s84Sp", "RUN", (uint64_t)0x1122334455667788ULL, (uint32_t)77,
                                  TROUPE_CANCELLED, (void *)&x),
                 TROUPE_OK);
    cr_assert_eq(zmsg_size(m), 5);
    char *verb = NULL;
    uint64_t id = 0;
    uint32_t u = 0;
    troupe_status_t st = TROUPE_OK;
    void *p = NULL;
    cr_assert_eq(troupe_msg_decode(m, "s84Sp", &verb, &id, &u, &st, &p), TROUPE_OK);
    cr_assert_str_eq(verb, "RUN");
    cr_assert_eq(id, 0x1122334455667788ULL);
    cr_assert_eq(u, 77);
    cr_assert_eq(st, TROUPE_CANCELLED);
    cr_assert_eq(p, &x);
    troupe_free(verb);

    char head[TROUPE_MSG_VERB_MAX + 1];
    cr_assert_eq(troupe_msg_head(m, head, sizeof head, &id), TROUPE_OK);
    cr_assert_str_eq(head, "RUN");
    cr_assert_eq(id, 0x1122334455667788ULL);

    /* Wrong frame count and wrong sizes are INVALID_ARGUMENT, never an assert. */
    cr_assert_eq(troupe_msg_decode(m, "s84S", NULL, NULL, NULL, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_msg_decode(m, "s88Sp", NULL, NULL, NULL, NULL, NULL),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(troupe_last_error(), "frame 2"), "%s", troupe_last_error());
    zmsg_destroy(&m);
}

Test(msg, head_of_malformed_messages)
{
    char verb[TROUPE_MSG_VERB_MAX + 1];
    uint64_t id = 99;
    zmsg_t *m = zmsg_new();
    cr_assert_eq(troupe_msg_head(m, verb, sizeof verb, &id), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(id, 0);
    zmsg_addstr(m, "PING");
    cr_assert_eq(troupe_msg_head(m, verb, sizeof verb, &id), TROUPE_INVALID_ARGUMENT);
    cr_assert_str_eq(verb, "PING");
    zmsg_addmem(m, "abc", 3);
    cr_assert_eq(troupe_msg_head(m, verb, sizeof verb, &id), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(id, 0);
    zmsg_destroy(&m);
    m = zmsg_new();
    zmsg_addmem(m, "\x01\x02", 2);
    zmsg_addmem(m, "12345678", 8);
    cr_assert_eq(troupe_msg_head(m, verb, sizeof verb, &id), TROUPE_INVALID_ARGUMENT);
    cr_assert_neq(id, 0); /* the id is still recovered so the actor can answer */
    zmsg_destroy(&m);
    /* A status frame outside the enum is rejected. */
    cr_assert_eq(troupe_msg_build(&m, "4", (uint32_t)1000), TROUPE_OK);
    troupe_status_t st;
    cr_assert_eq(troupe_msg_decode(m, "S", &st), TROUPE_INVALID_ARGUMENT);
    zmsg_destroy(&m);
}

/* ---- actors -------------------------------------------------------------------------------- */

static void s_failing_actor(zsock_t *pipe, void *args)
{
    (void)args;
    troupe__error(TROUPE_DEVICE_ERROR, "cuInit failed: CUDA_ERROR_NO_DEVICE");
    troupe_actor_ready(pipe, TROUPE_DEVICE_ERROR);
}

static void s_silent_actor(zsock_t *pipe, void *args)
{
    (void)pipe;
    (void)args;
}

Test(actor, setup_failure_becomes_a_status)
{
    troupe_actor_t *a = NULL;
    cr_assert_eq(troupe_actor_new("dev:0", s_failing_actor, NULL, &a), TROUPE_DEVICE_ERROR);
    cr_assert_null(a);
    cr_assert_not_null(strstr(troupe_last_error(), "CUDA_ERROR_NO_DEVICE"));
    cr_assert_eq(troupe_actor_new("dev:1", s_silent_actor, NULL, &a), TROUPE_INTERNAL);
    cr_assert_null(a);
}

/* Echo actor: [ECHO][id][x...] → [id][OK][x...]; SLOW sleeps first; others INVALID_ARGUMENT. */
static void s_echo_actor(zsock_t *pipe, void *args)
{
    (void)args;
    troupe_actor_ready(pipe, TROUPE_OK);
    for (;;) {
        zmsg_t *msg = troupe_actor_recv(pipe);
        if (!msg)
            break;
        char verb[TROUPE_MSG_VERB_MAX + 1];
        uint64_t id;
        zframe_t *f0 = zmsg_first(msg);
        if (zframe_streq(f0, TROUPE_VERB_TERM)) {
            zmsg_destroy(&msg);
            break;
        }
        if (troupe_msg_head(msg, verb, sizeof verb, &id) != TROUPE_OK ||
            (strcmp(verb, "ECHO") != 0 && strcmp(verb, "SLOW") != 0)) {
            troupe_actor_reply_status(pipe, id, TROUPE_INVALID_ARGUMENT);
            zmsg_destroy(&msg);
            continue;
        }
        if (strcmp(verb, "SLOW") == 0)
            rtu_sleep_ms(100);
        zframe_t *v = zmsg_pop(msg);
        zframe_destroy(&v);
        zframe_t *idf = zmsg_pop(msg);
        zmsg_pushmem(msg, &(uint32_t){TROUPE_OK}, 4);
        zmsg_prepend(msg, &idf);
        if (troupe_actor_send(pipe, &msg) != TROUPE_OK)
            break;
    }
}

Test(actor, request_reply_and_timeout)
{
    troupe_actor_t *a = NULL;
    cr_assert_eq(troupe_actor_new("echo", s_echo_actor, NULL, &a), TROUPE_OK);
    uint64_t id = troupe_actor_next_id(a);
    cr_assert_neq(id, 0);
    zmsg_t *req = NULL, *reply = NULL;
    cr_assert_eq(troupe_msg_build(&req, "s8s", "ECHO", id, "hello"), TROUPE_OK);
    cr_assert_eq(troupe_actor_request(a, &req, 60000 * MS, &reply), TROUPE_OK);
    cr_assert_null(req);
    uint64_t rid;
    troupe_status_t st;
    char *text = NULL;
    cr_assert_eq(troupe_msg_decode(reply, "8Ss", &rid, &st, &text), TROUPE_OK);
    cr_assert_eq(rid, id);
    cr_assert_eq(st, TROUPE_OK);
    cr_assert_str_eq(text, "hello");
    troupe_free(text);
    zmsg_destroy(&reply);

    /* A reply that comes too late is a DEADLINE_EXCEEDED, and is discarded later. */
    uint64_t slow_id = troupe_actor_next_id(a);
    cr_assert_eq(troupe_msg_build(&req, "s8", "SLOW", slow_id), TROUPE_OK);
    cr_assert_eq(troupe_actor_request(a, &req, 10 * MS, &reply), TROUPE_DEADLINE_EXCEEDED);
    cr_assert_null(reply);
    id = troupe_actor_next_id(a);
    cr_assert_eq(troupe_msg_build(&req, "s8", "NOPE", id), TROUPE_OK);
    cr_assert_eq(troupe_actor_request(a, &req, 60000 * MS, &reply), TROUPE_OK);
    cr_assert_eq(troupe_msg_decode(reply, "8S", &rid, &st), TROUPE_OK);
    cr_assert_eq(rid, id);
    cr_assert_eq(st, TROUPE_INVALID_ARGUMENT);
    zmsg_destroy(&reply);
    troupe_actor_destroy(&a);
    cr_assert_null(a);
    troupe_actor_destroy(&a);
}

/* Posting from many threads: every message arrives, none twice. */
typedef struct {
    troupe_mailbox_t *mb;
    int base;
} s_post_arg_t;

static void *s_poster(void *arg)
{
    s_post_arg_t *p = (s_post_arg_t *)arg;
    for (int i = 0; i < 500; i++) {
        zmsg_t *m = NULL;
        if (troupe_msg_build(&m, "s8", "N", (uint64_t)(p->base + i)) != TROUPE_OK ||
            troupe_mailbox_post(p->mb, &m) != TROUPE_OK)
            return (void *)1;
    }
    return NULL;
}

Test(mailbox, many_posters_one_owner)
{
    troupe_mailbox_t *mb = NULL;
    cr_assert_eq(troupe_mailbox_new(&mb), TROUPE_OK);
    zpoller_t *poller = zpoller_new(troupe_mailbox_poll_handle(mb), NULL);
    cr_assert_not_null(poller);
    pthread_t t[4];
    s_post_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (s_post_arg_t){mb, i * 1000};
        pthread_create(&t[i], NULL, s_poster, &args[i]);
    }
    static bool seen[4000];
    int got = 0;
    while (got < 2000) {
        void *which = zpoller_wait(poller, 5000);
        cr_assert_eq(which, troupe_mailbox_poll_handle(mb), "mailbox never woke its owner");
        troupe_mailbox_clear(mb);
        zmsg_t *m;
        while ((m = troupe_mailbox_take(mb))) {
            uint64_t v = 0;
            cr_assert_eq(troupe_msg_decode(m, "s8", NULL, &v), TROUPE_OK);
            cr_assert_lt(v, 4000);
            cr_assert_not(seen[v]);
            seen[v] = true;
            got++;
            zmsg_destroy(&m);
        }
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    troupe_mailbox_close(mb);
    zmsg_t *m = NULL;
    cr_assert_eq(troupe_msg_build(&m, "s8", "N", (uint64_t)1), TROUPE_OK);
    cr_assert_eq(troupe_mailbox_post(mb, &m), TROUPE_UNAVAILABLE);
    cr_assert_null(m);
    zpoller_destroy(&poller);
    troupe_mailbox_release(&mb);
}
