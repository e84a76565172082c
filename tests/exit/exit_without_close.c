/* troupe — a program may end without closing what it opened: the library must not abort
 * (actors/actor.c stops the actors still running at exit, before CZMQ's own exit handler checks
 * for open sockets). tests/exit/CMakeLists.txt runs each way of ending and expects exit status
 * 0 and no "dangling" socket report.
 *
 * usage: exit_without_close return|exit|pending|thread
 *   return   main returns with a cpu backend, two streams, a context and a routine alive
 *   exit     exit(0) from a function, the same objects alive
 *   pending  as return, with work still queued behind an event that never completes
 *   thread   exit(0) from another thread while main waits in troupe_event_sync
 */
#define _DEFAULT_SOURCE /* usleep */
#include "actors/troupe.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != TROUPE_OK) {                                                                 \
            fprintf(stderr, "exit_without_close: %s: %s\n", #call, troupe_last_error());           \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)

/* Opens the cpu backend, two streams with their contexts and a routine a = a + a that ran
 * once; everything stays referenced (leaked on purpose). Returns stream 0's routine context. */
static troupe_context_t *s_open_everything(troupe_routine_t **out_r)
{
    troupe_backend_t *b = NULL;
    troupe_device_t *d = NULL;
    troupe_stream_t *s[2] = {NULL, NULL};
    troupe_context_t *ctx[2] = {NULL, NULL}, *c = NULL;
    CHECK(troupe_backend_open("cpu", TROUPE_FOR_PARALLEL_COPYING, &b));
    CHECK(troupe_get_device(b, 0, &d));
    for (int i = 0; i < 2; i++) {
        CHECK(troupe_new_stream(d, &s[i]));
        CHECK(troupe_context_new(s[i], &ctx[i]));
    }
    troupe_tnode_t *a = NULL;
    CHECK(troupe_tnode_new((const char *[]){"a"}, 1, TROUPE_PREC_SINGLE, 1, (int64_t[]){4}, NULL,
                           0, &a));
    CHECK(troupe_tnode_set_values(a, (double[]){1, 2, 3, 4}, 4));
    CHECK(troupe_init_from_host(ctx[0], a, &c, NULL));
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    troupe_code_t *code = NULL;
    CHECK(troupe_asgn_comp_new(&comp));
    CHECK(troupe_asgn_pointwise_binop(comp, a, TROUPE_BINOP_ADD, troupe_asgn_node(a),
                                      troupe_asgn_node(a), &t));
    troupe_asgn_comp_set_root(comp, t);
    CHECK(troupe_compile(b, comp, "double_a", &code));
    CHECK(troupe_link(c, code, out_r));
    troupe_event_t *ev = NULL;
    CHECK(troupe_routine_run(*out_r, &ev));
    CHECK(troupe_event_sync(ev, 30LL * 1000 * 1000 * 1000));
    return troupe_routine_context(*out_r);
}

static void *s_exit_later(void *arg)
{
    usleep(100 * 1000);
    fflush(stdout);
    exit(0);
    return arg;
}

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "return";
    troupe_routine_t *r = NULL;
    troupe_context_t *ctx = s_open_everything(&r);
    printf("exit_without_close: %s\n", how);
    if (!strcmp(how, "return"))
        return 0;
    if (!strcmp(how, "exit"))
        exit(0);
    troupe_event_t *never = NULL;
    CHECK(troupe_event_new("never", &never));
    CHECK(troupe_will_wait_for(ctx, never)); /* the stream parks here */
    CHECK(troupe_routine_run(r, NULL));      /* queued behind it */
    if (!strcmp(how, "pending"))
        return 0;
    if (!strcmp(how, "thread")) {
        pthread_t th;
        if (pthread_create(&th, NULL, s_exit_later, NULL) != 0)
            return 3;
        troupe_event_t *ev = NULL;
        CHECK(troupe_routine_run(r, &ev));
        /* The exit stops the stream, which cancels the run: the sync may return, and this
         * thread then waits for the exit to end the process. */
        troupe_status_t st = troupe_event_sync(ev, 60LL * 1000 * 1000 * 1000);
        if (st == TROUPE_OK)
            return 4; /* the run cannot have happened */
        for (;;)
            pause();
    }
    fprintf(stderr, "exit_without_close: unknown way '%s'\n", how);
    return 2;
}
