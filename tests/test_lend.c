/* troupe — lending arrays to an external agent and remote contexts (actors/transfer.h, the
 * hooks transport/mpi builds on): the stream waits for the agent, other streams wait for the
 * lent arrays (ledger), failures of the agent fail the stream, and device_to_device with a
 * remote side moves bytes through a registered transport (here a loopback fake, so the actors
 * side is tested without MPI). Runs on "sync" and "cpu". */
#include "actors/troupe.h"

#include "base/alloc.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-runtime", 30);
    troupe_config_set_auto_host_transfers(false);
}

static void s_teardown(void)
{
    troupe_set_remote_transport(NULL);
}

TestSuite(lend, .init = s_setup, .fini = s_teardown);

/* ---- a slow agent: a thread that waits, scales the lent floats, completes `done` ---------- */

typedef struct agent {
    float *ptr;
    int64_t count;
    float scale;
    int delay_ms;
    troupe_event_t *go;   /* when set, the agent waits for it instead of delay_ms (borrowed) */
    troupe_status_t fail; /* complete done with this instead */
    troupe_event_t *done; /* a reference of the agent */
    int started;
    int dtors;
    pthread_t thread; /* joined by the test before `a` goes */
} agent_t;

static void *s_agent_thread(void *arg)
{
    agent_t *a = arg;
    if (a->go == NULL)
        rtu_sleep_ms(a->delay_ms);
    else if (troupe_event_sync(a->go, TROUPE_TIMEOUT_INFINITE) != TROUPE_OK)
        a->fail = TROUPE_INTERNAL; /* never let go: the lend fails */
    if (a->fail != TROUPE_OK) {
        troupe_event_complete(a->done, a->fail, "agent: the peer went away");
    } else {
        for (int64_t i = 0; i < a->count; i++)
            a->ptr[i] *= a->scale;
        troupe_event_complete(a->done, TROUPE_OK, NULL);
    }
    troupe_event_release(&a->done);
    return NULL;
}

static troupe_status_t s_agent_start(void *user, void *const *ptrs, const int64_t *bytes, size_t n)
{
    agent_t *a = user;
    cr_assert_eq(n, 1);
    a->ptr = ptrs[0];
    a->count = bytes[0] / (int64_t)sizeof(float);
    a->started++;
    cr_assert_eq(pthread_create(&a->thread, NULL, s_agent_thread, a), 0);
    return TROUPE_OK;
}

static void s_agent_dtor(void *user)
{
    ((agent_t *)user)->dtors++;
}

Test(lend, stream_and_other_streams_wait_for_the_agent)
{
    FOR_EACH_HOST_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *g = rtu_vec("g", 4);
        const double v[4] = {1, 2, 3, 4}, zeros[4] = {0};
        rtu_put(&e.ctx[0], g, v);
        rtu_put(&e.ctx[1], g, zeros);
        agent_t a = {.scale = 10.0f, .delay_ms = 100};
        OK(troupe_event_new("agent-done", &a.done));
        troupe_event_t *ev = NULL;
        OK(troupe_lend_arrays(e.ctx[0], 1, &g, s_agent_start, &a, s_agent_dtor, a.done, &ev));
        /* Stream 1 copies stream 0's g: RAW on the lend's write. */
        troupe_event_t *cp = NULL;
        OK(troupe_device_to_device(g, TROUPE_MERGE_NO, e.ctx[1], e.ctx[0], NULL, NULL, &cp));
        OK(troupe_event_sync(cp, 20000 * MS));
        cr_assert(troupe_event_is_done(ev), "%s: the copy ran before the lend completed", *drv);
        float out[4];
        rtu_get(e.ctx[1], g, out);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(out[i], 10.0f * (float)(i + 1), "%s: stream 1 g[%d] = %g", *drv, i,
                         (double)out[i]);
        rtu_get(e.ctx[0], g, out);
        cr_assert_eq(out[3], 40.0f, "%s", *drv);
        cr_assert_eq(a.started, 1);
        cr_assert_eq(a.dtors, 1, "%s: dtor ran %d times", *drv, a.dtors);
        pthread_join(a.thread, NULL);
        troupe_event_release(&ev);
        troupe_event_release(&cp);
        troupe_tnode_release(&g);
        rtu_env_close(&e);
    }
}

Test(lend, deferred_lend_lets_the_stream_go_on_and_guards_other_streams)
{
    FOR_EACH_HOST_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *g = rtu_vec("g", 4), *h = rtu_vec("h", 4);
        const double v[4] = {1, 2, 3, 4}, zeros[4] = {0};
        rtu_put(&e.ctx[0], g, v);
        rtu_put(&e.ctx[0], h, v);
        rtu_put(&e.ctx[1], g, zeros);
        /* the agent holds g until `go` (not for a time: a loaded machine could outlast it) */
        troupe_event_t *go = NULL;
        OK(troupe_event_new("agent-go", &go));
        agent_t a = {.scale = 10.0f, .go = go};
        OK(troupe_event_new("agent-done", &a.done));
        troupe_event_t *done = a.done;
        troupe_event_retain(done);
        OK(troupe_lend_arrays_deferred(e.ctx[0], 1, &g, s_agent_start, &a, s_agent_dtor, done));
        /* Stream 0 goes on with h while the agent holds g. */
        troupe_event_t *h_ev = NULL;
        OK(troupe_to_host(e.ctx[0], h, &h_ev));
        OK(troupe_event_sync(h_ev, 20000 * MS));
        cr_assert(!troupe_event_is_done(done), "%s: the agent finished before it was let go",
                  *drv);
        troupe_event_complete(go, TROUPE_OK, NULL);
        /* Stream 1 reading g waits for the agent (ledger: `done` is the write event). */
        troupe_event_t *cp = NULL;
        OK(troupe_device_to_device(g, TROUPE_MERGE_NO, e.ctx[1], e.ctx[0], NULL, NULL, &cp));
        OK(troupe_event_sync(cp, 20000 * MS));
        cr_assert(troupe_event_is_done(done), "%s: the copy ran before the agent finished", *drv);
        float out[4];
        rtu_get(e.ctx[1], g, out);
        cr_assert_eq(out[2], 30.0f, "%s: stream 1 g[2] = %g", *drv, (double)out[2]);
        /* Stream 0 reads g after waiting for `done` itself. */
        OK(troupe_will_wait_for(e.ctx[0], done));
        rtu_get(e.ctx[0], g, out);
        cr_assert_eq(out[3], 40.0f, "%s", *drv);
        pthread_join(a.thread, NULL);
        troupe_event_release(&go);
        troupe_event_release(&done);
        troupe_event_release(&h_ev);
        troupe_event_release(&cp);
        troupe_tnode_release(&g);
        troupe_tnode_release(&h);
        rtu_env_close(&e);
    }
}

Test(lend, a_failed_agent_fails_the_stream)
{
    FOR_EACH_HOST_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *g = rtu_vec("g", 2);
        const double v[2] = {1, 2};
        rtu_put(&e.ctx[0], g, v);
        agent_t a = {.scale = 1.0f, .delay_ms = 10, .fail = TROUPE_UNAVAILABLE};
        OK(troupe_event_new("agent-done", &a.done));
        troupe_event_t *ev = NULL;
        OK(troupe_lend_arrays(e.ctx[0], 1, &g, s_agent_start, &a, s_agent_dtor, a.done, &ev));
        troupe_status_t st = troupe_event_sync(ev, 20000 * MS);
        cr_assert_eq(st, TROUPE_UNAVAILABLE, "%s: %s", *drv, troupe_status_str(st));
        cr_assert(strstr(troupe_last_error(), "the peer went away"), "%s: %s", *drv,
                  troupe_last_error());
        cr_assert_eq(troupe_stream_await(e.s[0], 20000 * MS), TROUPE_UNAVAILABLE);
        pthread_join(a.thread, NULL);
        /* A failed stream refuses the next lend: dtor runs, done untouched. */
        agent_t b = {.scale = 1.0f};
        OK(troupe_event_new("agent-done-2", &b.done));
        st = troupe_lend_arrays(e.ctx[0], 1, &g, s_agent_start, &b, s_agent_dtor, b.done, NULL);
        cr_assert_eq(st, TROUPE_UNAVAILABLE, "%s", *drv);
        cr_assert_eq(b.started, 0);
        cr_assert_eq(b.dtors, 1);
        cr_assert(!troupe_event_is_done(b.done));
        troupe_event_release(&b.done);
        troupe_event_release(&ev);
        troupe_tnode_release(&g);
        rtu_env_close(&e);
    }
}

Test(lend, bad_arguments_are_named)
{
    rtu_env_t e;
    rtu_env_open(&e, "cpu", 2);
    troupe_tnode_t *g = rtu_vec("g", 2), *h = rtu_vec("absent", 2);
    const double v[2] = {1, 2};
    rtu_put(&e.ctx[0], g, v);
    agent_t a = {.scale = 1.0f};
    OK(troupe_event_new("agent-done", &a.done));
    troupe_status_t st =
        troupe_lend_arrays(e.ctx[0], 1, &h, s_agent_start, &a, s_agent_dtor, a.done, NULL);
    cr_assert_eq(st, TROUPE_NOT_FOUND);
    cr_assert(strstr(troupe_last_error(), "absent"), "%s", troupe_last_error());
    cr_assert_eq(a.dtors, 1);
    st = troupe_lend_arrays(e.ctx[0], 0, &g, s_agent_start, &a, s_agent_dtor, a.done, NULL);
    cr_assert_eq(st, TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(a.dtors, 2);
    cr_assert(!troupe_event_is_done(a.done));
    troupe_event_release(&a.done);
    troupe_tnode_release(&g);
    troupe_tnode_release(&h);
    rtu_env_close(&e);
}

/* ---- a loopback transport: this process plays rank 0 of 2; "rank 1" is a mailbox ---------- */

typedef struct loopback {
    pthread_mutex_t lock;
    unsigned char box[256];
    int64_t box_bytes;
    int32_t box_node;
    int sends, recvs;
    troupe_status_t fail;
} loopback_t;

static loopback_t s_lb = {.lock = PTHREAD_MUTEX_INITIALIZER};

static troupe_status_t s_lb_move(void *user, bool is_send, int peer, troupe_tnode_t *tn, void *ptr,
                                 int64_t bytes, troupe_event_t *done)
{
    loopback_t *lb = user;
    cr_assert_eq(peer, 1);
    cr_assert_eq(bytes, (int64_t)tn->size_bytes);
    if (lb->fail != TROUPE_OK)
        return troupe__error(lb->fail, "loopback: refused");
    pthread_mutex_lock(&lb->lock);
    troupe_status_t st = TROUPE_OK;
    if (is_send) {
        memcpy(lb->box, ptr, (size_t)bytes);
        lb->box_bytes = bytes;
        lb->box_node = tn->id;
        lb->sends++;
    } else if (lb->box_node != tn->id || lb->box_bytes != bytes) {
        st = TROUPE_FAILED_PRECONDITION;
    } else {
        memcpy(ptr, lb->box, (size_t)bytes);
        lb->recvs++;
    }
    pthread_mutex_unlock(&lb->lock);
    troupe_event_complete(done, st, st == TROUPE_OK ? NULL : "loopback: fingerprint mismatch");
    troupe_event_release(&done);
    return TROUPE_OK;
}

static void s_register_loopback(void)
{
    memset(s_lb.box, 0, sizeof s_lb.box);
    s_lb.box_bytes = 0;
    s_lb.box_node = 0;
    s_lb.sends = s_lb.recvs = 0;
    s_lb.fail = TROUPE_OK;
    troupe_remote_transport_t t = {.move = s_lb_move, .user = &s_lb, .rank = 0, .size = 2};
    troupe_set_remote_transport(&t);
}

Test(lend, remote_contexts_need_a_transport)
{
    troupe_set_remote_transport(NULL);
    troupe_context_t *r = NULL;
    cr_assert_eq(troupe_context_new_remote(1, &r), TROUPE_FAILED_PRECONDITION);
    cr_assert(strstr(troupe_last_error(), "troupe_cluster_init"), "%s", troupe_last_error());
    s_register_loopback();
    cr_assert_eq(troupe_context_new_remote(0, &r), TROUPE_INVALID_ARGUMENT); /* own rank */
    cr_assert(strstr(troupe_last_error(), "rank 0"), "%s", troupe_last_error());
    cr_assert_eq(troupe_context_new_remote(2, &r), TROUPE_INVALID_ARGUMENT);
    OK(troupe_context_new_remote(1, &r));
    cr_assert(troupe_context_is_remote(r));
    cr_assert_eq(troupe_context_remote_rank(r), 1);
    cr_assert_null(troupe_context_stream(r));
    troupe_context_t *child = NULL;
    cr_assert_eq(troupe_context_child(r, &child), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "rank 1"), "%s", troupe_last_error());
    OK(troupe_context_finalize(r));
    troupe_context_release(&r);
}

Test(lend, remote_copy_into_the_merge_buffer_and_into_the_array)
{
    FOR_EACH_HOST_DRIVER(drv)
    {
        s_register_loopback();
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *g = rtu_vec("g", 2);
        const double mine[2] = {1, 2}, theirs[2] = {3, 4};
        rtu_put(&e.ctx[1], g, theirs);
        rtu_put(&e.ctx[0], g, mine);
        troupe_context_t *remote = NULL;
        OK(troupe_context_new_remote(1, &remote));
        troupe_code_t *code = rtu_merge_code(e.b, g, g, "i=>i", "merge_g");
        /* "Rank 1" (stream 1 here) sends its g; rank 0 receives it into its merge buffer. */
        troupe_event_t *sent = NULL, *recvd = NULL;
        troupe_context_t *nothing = (troupe_context_t *)1;
        OK(troupe_device_to_device(g, TROUPE_MERGE_COPY, remote, e.ctx[1], NULL, &nothing, &sent));
        cr_assert_null(nothing);
        OK(troupe_event_sync(sent, 20000 * MS));
        troupe_context_t *tagged = NULL;
        OK(troupe_device_to_device(g, TROUPE_MERGE_COPY, e.ctx[0], remote, NULL, &tagged, &recvd));
        cr_assert_eq(troupe_context_merge_buffer_node(tagged), g);
        troupe_routine_t *r = NULL;
        OK(troupe_link(tagged, code, &r));
        troupe_event_t *ran = NULL;
        OK(troupe_routine_run(r, &ran));
        OK(troupe_event_sync(ran, 20000 * MS));
        float out[2];
        rtu_get(e.ctx[0], g, out);
        cr_assert(out[0] == 4.0f && out[1] == 6.0f, "%s: merged [%g %g]", *drv, (double)out[0],
                  (double)out[1]);
        /* NO: straight into rank 0's array. */
        OK(troupe_device_to_device(g, TROUPE_MERGE_NO, remote, e.ctx[1], NULL, NULL, NULL));
        OK(troupe_stream_await(e.s[1], 20000 * MS));
        troupe_event_t *into = NULL;
        OK(troupe_device_to_device(g, TROUPE_MERGE_NO, e.ctx[0], remote, NULL, NULL, &into));
        OK(troupe_event_sync(into, 20000 * MS));
        rtu_get(e.ctx[0], g, out);
        cr_assert(out[0] == 3.0f && out[1] == 4.0f, "%s: received [%g %g]", *drv, (double)out[0],
                  (double)out[1]);
        cr_assert_eq(s_lb.sends, 2);
        cr_assert_eq(s_lb.recvs, 2);
        /* STREAMING has no remote form. */
        cr_assert_eq(troupe_device_to_device(g, TROUPE_MERGE_STREAMING, e.ctx[0], remote, r, NULL,
                                             NULL),
                     TROUPE_FAILED_PRECONDITION);
        /* A remote context is refused where arrays are needed. */
        cr_assert_eq(troupe_link(remote, code, &(troupe_routine_t *){NULL}),
                     TROUPE_INVALID_ARGUMENT);
        cr_assert_eq(troupe_from_host(remote, g, NULL), TROUPE_INVALID_ARGUMENT);
        troupe_event_release(&sent);
        troupe_event_release(&recvd);
        troupe_event_release(&ran);
        troupe_event_release(&into);
        troupe_routine_release(&r);
        troupe_context_release(&tagged);
        troupe_context_release(&remote);
        troupe_code_release(&code);
        troupe_tnode_release(&g);
        rtu_env_close(&e);
        troupe_set_remote_transport(NULL);
    }
}

Test(lend, a_refusing_or_mismatching_transport_fails_the_stream)
{
    FOR_EACH_HOST_DRIVER(drv)
    {
        s_register_loopback();
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *g = rtu_vec("g", 2), *h = rtu_vec("h", 2);
        const double v[2] = {1, 2};
        rtu_put(&e.ctx[0], g, v);
        rtu_put(&e.ctx[1], h, v);
        troupe_context_t *remote = NULL;
        OK(troupe_context_new_remote(1, &remote));
        /* Stream 1 "sent" h; stream 0 expects g: the transport reports the mismatch. */
        OK(troupe_device_to_device(h, TROUPE_MERGE_NO, remote, e.ctx[1], NULL, NULL, NULL));
        OK(troupe_stream_await(e.s[1], 20000 * MS));
        troupe_event_t *ev = NULL;
        OK(troupe_device_to_device(g, TROUPE_MERGE_NO, e.ctx[0], remote, NULL, NULL, &ev));
        cr_assert_eq(troupe_event_sync(ev, 20000 * MS), TROUPE_FAILED_PRECONDITION, "%s", *drv);
        cr_assert(strstr(troupe_last_error(), "fingerprint mismatch"), "%s",
                  troupe_last_error());
        troupe_event_release(&ev);
        /* A transport refusing the move fails the stream with its status. */
        s_lb.fail = TROUPE_UNAVAILABLE;
        OK(troupe_device_to_device(h, TROUPE_MERGE_NO, remote, e.ctx[1], NULL, NULL, &ev));
        cr_assert_eq(troupe_event_sync(ev, 20000 * MS), TROUPE_UNAVAILABLE, "%s", *drv);
        cr_assert(strstr(troupe_last_error(), "refused"), "%s", troupe_last_error());
        cr_assert_eq(troupe_stream_await(e.s[1], 20000 * MS), TROUPE_UNAVAILABLE);
        troupe_event_release(&ev);
        troupe_context_release(&remote);
        troupe_tnode_release(&g);
        troupe_tnode_release(&h);
        rtu_env_close(&e);
        troupe_set_remote_transport(NULL);
    }
}
