/* hello — the smallest troupe program: one routine y = x · w (einsum "i,ij=>j") on the default
 * backend, uploaded, run and read back. Prints "y = 4 5" and exits 0; on a failure it prints
 * the call and troupe's one-line message and exits 1. Walkthrough: docs/api.md. */
#include <troupe/troupe.h>

#include <stdio.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != TROUPE_OK) {                                                                 \
            fprintf(stderr, "hello: %s: %s\n", #call, troupe_last_error());                        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    troupe_backend_t *b = NULL; /* NULL name: $TROUPE_BACKEND, else "cpu" */
    troupe_device_t *d = NULL;
    troupe_stream_t *s = NULL;
    troupe_context_t *ctx = NULL;
    CHECK(troupe_backend_open(NULL, TROUPE_ONLY_DEVICES_PARALLEL, &b));
    CHECK(troupe_get_device(b, 0, &d));
    CHECK(troupe_new_stream(d, &s));
    CHECK(troupe_context_new(s, &ctx));

    /* Nodes: x (3), w (3x2) and y (2). Setting values makes x and w hosted; y is marked hosted
     * so that its values can be read back on the host. */
    troupe_tnode_t *x = NULL, *w = NULL, *y = NULL;
    CHECK(troupe_tnode_new((const char *[]){"x"}, 1, TROUPE_PREC_SINGLE, 1, (int64_t[]){3}, NULL,
                           0, &x));
    CHECK(troupe_tnode_new((const char *[]){"w"}, 1, TROUPE_PREC_SINGLE, 2, (int64_t[]){3, 2},
                           NULL, 0, &w));
    CHECK(troupe_tnode_new((const char *[]){"y"}, 1, TROUPE_PREC_SINGLE, 1, (int64_t[]){2}, NULL,
                           0, &y));
    CHECK(troupe_tnode_set_values(x, (double[]){1, 2, 3}, 3));
    CHECK(troupe_tnode_set_values(w, (double[]){1, 0, 0, 1, 1, 1}, 6));
    troupe_memory_mode_t hosted = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, 0};
    CHECK(troupe_tnode_update_memory_mode(y, hosted, 1));

    /* The routine: y = sum over i of x[i] * w[i][j]. */
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *mm = NULL;
    troupe_code_t *code = NULL;
    CHECK(troupe_asgn_comp_new(&comp));
    CHECK(troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                  troupe_asgn_node(x), troupe_asgn_node(w), "i,ij=>j", &mm));
    troupe_asgn_comp_set_root(comp, mm);
    CHECK(troupe_compile(b, comp, "hello", &code));
    troupe_asgn_comp_destroy(&comp);

    /* Upload x and w (each upload yields a child context holding the array), link, run. */
    troupe_context_t *c1 = NULL, *c2 = NULL;
    troupe_routine_t *r = NULL;
    troupe_event_t *done = NULL;
    CHECK(troupe_init_from_host(ctx, x, &c1, NULL));
    CHECK(troupe_init_from_host(c1, w, &c2, NULL));
    CHECK(troupe_link(c2, code, &r));
    CHECK(troupe_routine_run(r, &done));
    CHECK(troupe_event_sync(done, 10LL * 1000 * 1000 * 1000)); /* deadline: 10 s, in ns */

    /* Read back: a host read of a hosted node fetches its newest value from the device. */
    double got[2];
    CHECK(troupe_tnode_get_values(y, got, 2));
    printf("y = %g %g\n", got[0], got[1]);

    troupe_event_release(&done);
    troupe_routine_release(&r);
    troupe_code_release(&code);
    troupe_context_release(&c2);
    troupe_context_release(&c1);
    troupe_context_release(&ctx);
    troupe_stream_release(&s);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
    troupe_backend_close(&b);
    return got[0] == 4 && got[1] == 5 ? 0 : 1;
}
