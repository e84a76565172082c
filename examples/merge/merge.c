/* merge — merge buffers between two streams of one device, and what waits for what
 * (docs/architecture.md, "Merge buffers"; docs/api.md walks through it).
 *
 * Both streams run the routine `produce`, g[i] = i + k, with its static index k bound to 1 on
 * stream 0 and 10 on stream 1. Stream 0 then adds stream 1's g into its own with the routine
 * `merge`, g =+ g.merge (it reads the other stream's values through its merge buffer):
 *   COPY       stream 0 copies stream 1's g into its merge buffer, then `merge` reads it. The
 *              copy waits for stream 1's write of g (read after write): here stream 1 is held
 *              by a gate event, so stream 0 waits until the gate opens.
 *   STREAMING  no copy: stream 0's merge buffer points at stream 1's array while `merge` runs.
 *              A later write of g on stream 1 waits until that read is over (write after
 *              read): here stream 0 is held by a gate, so stream 1's rewrite waits for it.
 * Prints each state and the merged values; exits 0 when every value and order is as stated,
 * 1 otherwise (or on a failure, with troupe's one-line message). The backend is
 * $TROUPE_BACKEND, else "cpu".
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "actors/troupe.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define N 4
#define DEADLINE_NS (30LL * 1000 * 1000 * 1000) /* 30 s for every wait */

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != TROUPE_OK) {                                                                 \
            fprintf(stderr, "merge: %s: %s\n", #call, troupe_last_error());                        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Prints whether ev completed; returns 1 when that is not `want_done`. */
static int s_show(const char *what, troupe_event_t *ev, int want_done)
{
    int done = troupe_event_is_done(ev);
    printf("  %-58s %s\n", what, done ? "done" : "waiting");
    return done != want_done;
}

/* Gives the streams time to run what they can: what waits on a gate stays waiting, and would
 * show as done here if the rule that holds it were broken. */
static void s_pause(void)
{
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
}

/* ctx's values of g: a to_host on ctx's stream, then its host array. */
static troupe_status_t s_read(troupe_context_t *ctx, troupe_tnode_t *g, float out[N])
{
    troupe_event_t *ev = NULL;
    void *host = NULL;
    troupe_status_t st = troupe_to_host(ctx, g, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, DEADLINE_NS);
    troupe_event_release(&ev);
    if (st == TROUPE_OK)
        st = troupe_tnode_host_array(g, &host);
    if (st == TROUPE_OK)
        memcpy(out, host, sizeof(float) * N);
    return st;
}

/* Prints the values and returns 1 unless they are first + step * i. */
static int s_expect(const char *what, const float got[N], float first, float step)
{
    int bad = 0;
    printf("  %-58s", what);
    for (int i = 0; i < N; i++) {
        printf(" %g", got[i]);
        bad |= got[i] != first + step * (float)i;
    }
    printf("%s\n", bad ? "  (WRONG)" : "");
    return bad;
}

int main(void)
{
    int bad = 0;
    troupe_backend_t *b = NULL;
    troupe_device_t *d = NULL;
    troupe_stream_t *s[2] = {NULL, NULL};
    troupe_context_t *root[2] = {NULL, NULL};
    CHECK(troupe_backend_open(NULL, TROUPE_FOR_PARALLEL_COPYING, &b));
    CHECK(troupe_get_device(b, 0, &d));
    for (int i = 0; i < 2; i++) {
        CHECK(troupe_new_stream(d, &s[i]));
        CHECK(troupe_context_new(s[i], &root[i]));
    }
    printf("merge: backend %s, two streams on device 0\n", troupe_backend_name(b));

    /* g: N floats, hosted so that stream arrays can be read back on the host. */
    troupe_tnode_t *g = NULL, *r = NULL, *k = NULL;
    CHECK(troupe_tnode_new((const char *[]){"g"}, 1, TROUPE_PREC_SINGLE, 1, (int64_t[]){N}, NULL,
                           0, &g));
    CHECK(troupe_tnode_new((const char *[]){"r"}, 1, TROUPE_PREC_SINGLE, 1, (int64_t[]){N}, NULL,
                           0, &r));
    CHECK(troupe_tnode_new((const char *[]){"k"}, 1, TROUPE_PREC_SINGLE, 1, (int64_t[]){N}, NULL,
                           0, &k));
    troupe_memory_mode_t hosted = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, 0};
    CHECK(troupe_tnode_update_memory_mode(g, hosted, 1));

    /* produce: r = offsets, k = the static index k, g = r + k. */
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *a[3] = {NULL, NULL, NULL}, *seq = NULL;
    int32_t sym = -1;
    troupe_code_t *produce = NULL, *merge = NULL;
    CHECK(troupe_asgn_comp_new(&comp));
    CHECK(troupe_asgn_comp_add_static_symbol(comp, "k", 0, &sym));
    CHECK(troupe_asgn_fetch_range_over_offsets(comp, r, &a[0]));
    CHECK(troupe_asgn_fetch_embed_symbol(comp, k, sym, &a[1]));
    CHECK(troupe_asgn_pointwise_binop(comp, g, TROUPE_BINOP_ADD, troupe_asgn_node(r),
                                      troupe_asgn_node(k), &a[2]));
    CHECK(troupe_asgn_seq(comp, 3, a, &seq));
    troupe_asgn_comp_set_root(comp, seq);
    CHECK(troupe_compile(b, comp, "produce", &produce));
    troupe_asgn_comp_destroy(&comp);
    /* merge: g =+ g.merge (the merge buffer's values, cell by cell). */
    troupe_asgn_t *m = NULL;
    CHECK(troupe_asgn_comp_new(&comp));
    CHECK(troupe_asgn_accum_unop(comp, false, TROUPE_BINOP_ADD, g, TROUPE_UNOP_IDENTITY,
                                 troupe_asgn_merge(g), "i=>i", &m));
    troupe_asgn_comp_set_root(comp, m);
    CHECK(troupe_compile(b, comp, "merge", &merge));
    troupe_asgn_comp_destroy(&comp);

    /* produce linked on each stream: each link's context holds that stream's own g. */
    troupe_routine_t *prod[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        CHECK(troupe_link(root[i], produce, &prod[i]));
    troupe_context_t *c0 = troupe_routine_context(prod[0]), *c1 = troupe_routine_context(prod[1]);
    CHECK(troupe_routine_set_index(prod[0], "k", 1));
    CHECK(troupe_routine_set_index(prod[1], "k", 10));

    /* ---- COPY ---- */
    printf("COPY: stream 0 merges stream 1's g through a copy into its merge buffer\n");
    troupe_event_t *gate = NULL, *ev_p0 = NULL, *ev_p1 = NULL, *ev_copy = NULL, *ev_m = NULL;
    troupe_context_t *tagged = NULL;
    troupe_routine_t *rm = NULL;
    CHECK(troupe_event_new("gate1", &gate));
    CHECK(troupe_will_wait_for(c1, gate)); /* stream 1 holds here until the gate completes */
    CHECK(troupe_routine_run(prod[0], &ev_p0));
    CHECK(troupe_routine_run(prod[1], &ev_p1));
    CHECK(troupe_device_to_device(g, TROUPE_MERGE_COPY, c0, c1, NULL, &tagged, &ev_copy));
    CHECK(troupe_link(tagged, merge, &rm)); /* tagged: its merge buffer holds g */
    CHECK(troupe_routine_run(rm, &ev_m));
    CHECK(troupe_event_sync(ev_p0, DEADLINE_NS)); /* stream 0 runs its own work meanwhile */
    s_pause();
    bad |= s_show("stream 0 produce (k=1)", ev_p0, 1);
    bad |= s_show("stream 1 produce (k=10), behind the gate", ev_p1, 0);
    bad |= s_show("stream 0 copy of stream 1's g (waits for its write)", ev_copy, 0);
    troupe_event_complete(gate, TROUPE_OK, NULL);
    CHECK(troupe_event_sync(ev_m, DEADLINE_NS));
    bad |= s_show("gate opened: stream 0 merge", ev_m, 1);
    float got[N];
    CHECK(s_read(c0, g, got));
    bad |= s_expect("stream 0's g = (i+1) + (i+10):", got, 11, 2);
    troupe_event_release(&gate);
    troupe_event_release(&ev_p0);
    troupe_event_release(&ev_p1);
    troupe_event_release(&ev_copy);
    troupe_event_release(&ev_m);
    troupe_routine_release(&rm);
    troupe_context_release(&tagged);

    /* ---- STREAMING ---- */
    printf("STREAMING: stream 0 reads stream 1's g in place while `merge` runs\n");
    troupe_event_t *ev_s = NULL, *ev_w = NULL;
    CHECK(troupe_link(c0, merge, &rm)); /* the consumer, on stream 0 */
    CHECK(troupe_event_new("gate0", &gate));
    CHECK(troupe_will_wait_for(c0, gate)); /* stream 0 holds here */
    CHECK(troupe_device_to_device(g, TROUPE_MERGE_STREAMING, c0, c1, rm, &tagged, &ev_s));
    CHECK(troupe_routine_set_index(prod[1], "k", 1000));
    CHECK(troupe_routine_run(prod[1], &ev_w)); /* stream 1 overwrites g: must wait */
    s_pause();
    bad |= s_show("stream 0 merge reading stream 1's g, behind the gate", ev_s, 0);
    bad |= s_show("stream 1 rewrite of g (waits until that read is over)", ev_w, 0);
    troupe_event_complete(gate, TROUPE_OK, NULL);
    CHECK(troupe_event_sync(ev_w, DEADLINE_NS));
    bad |= s_show("gate opened: stream 0 merge", ev_s, 1);
    bad |= s_show("stream 1 rewrite", ev_w, 1);
    CHECK(s_read(c0, g, got));
    bad |= s_expect("stream 0's g = (2i+11) + (i+10), not + (i+1000):", got, 21, 3);
    CHECK(s_read(c1, g, got));
    bad |= s_expect("stream 1's g after its rewrite = i+1000:", got, 1000, 1);
    troupe_event_release(&gate);
    troupe_event_release(&ev_s);
    troupe_event_release(&ev_w);
    troupe_routine_release(&rm);
    troupe_context_release(&tagged);

    for (int i = 0; i < 2; i++) {
        troupe_routine_release(&prod[i]);
        troupe_context_release(&root[i]);
        troupe_stream_release(&s[i]);
    }
    troupe_code_release(&produce);
    troupe_code_release(&merge);
    troupe_tnode_release(&g);
    troupe_tnode_release(&r);
    troupe_tnode_release(&k);
    troupe_backend_close(&b);
    printf("merge: %s\n", bad ? "FAILED" : "ok");
    return bad;
}
