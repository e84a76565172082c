/* troupe — schedule fuzzer: random programs of small routines, device_to_device copies and
 * merges (COPY and STREAMING) over 2–8 streams run on the threaded "cpu" driver must give, bit
 * for bit, what the same program gives on the inline, deterministic "sync" driver. Any missing
 * RAW/WAR/WAW wait in the ledger shows up as a difference (or a hang, caught by deadlines).
 *
 * Environment: TROUPE_FUZZ_SEEDS (default 20) programs, seeds TROUPE_FUZZ_SEED_BASE (default 1)
 * onward. A failure names the seed and prints the program. */
#include "actors/troupe.h"

#include "base/alloc.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_NODES 4
#define S_ELEMS 8
#define S_MAX_STREAMS 8
#define S_MAX_OPS 48
#define S_KINDS 3 /* a = a + b, a = b - a, a = a * b */

typedef enum op_kind { OP_RUN = 0, OP_D2D, OP_COPY, OP_STREAM, OP_GATE } op_kind_t;

typedef struct op {
    op_kind_t kind;
    int s, s2;   /* stream; source stream for transfers */
    int k, a, b; /* routine kind and nodes */
    int release_at; /* OP_GATE: op index after which the gate opens */
} op_t;

typedef struct program {
    uint64_t seed;
    int nstreams, nops;
    float init[S_MAX_STREAMS][S_NODES][S_ELEMS];
    op_t ops[S_MAX_OPS];
} program_t;

static uint64_t s_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int s_rand(uint64_t *x, int n)
{
    return (int)(s_next(x) % (uint64_t)n);
}

static void s_generate(uint64_t seed, program_t *p)
{
    memset(p, 0, sizeof *p);
    uint64_t x = seed;
    p->seed = seed;
    p->nstreams = 2 + s_rand(&x, S_MAX_STREAMS - 1);
    p->nops = 16 + s_rand(&x, S_MAX_OPS - 16);
    for (int s = 0; s < p->nstreams; s++)
        for (int n = 0; n < S_NODES; n++)
            for (int i = 0; i < S_ELEMS; i++)
                p->init[s][n][i] = (float)(s_rand(&x, 17) - 8) * 0.25f;
    for (int i = 0; i < p->nops; i++) {
        op_t *o = &p->ops[i];
        int r = s_rand(&x, 10);
        o->kind = r < 4 ? OP_RUN : r < 6 ? OP_D2D : r < 7 ? OP_COPY : r < 9 ? OP_STREAM : OP_GATE;
        o->s = s_rand(&x, p->nstreams);
        o->s2 = s_rand(&x, p->nstreams - 1);
        if (o->s2 >= o->s)
            o->s2++;
        o->k = s_rand(&x, S_KINDS);
        o->a = s_rand(&x, S_NODES);
        o->b = s_rand(&x, S_NODES);
        o->release_at = i + 1 + s_rand(&x, 6);
    }
}

static void s_print(const program_t *p)
{
    static const char *const kinds[] = {"run", "d2d", "merge_copy", "merge_streaming", "gate"};
    fprintf(stderr, "program seed %llu: %d streams\n", (unsigned long long)p->seed, p->nstreams);
    for (int i = 0; i < p->nops; i++) {
        const op_t *o = &p->ops[i];
        fprintf(stderr, "  %2d %-15s s%d <- s%d kind %d a n%d b n%d release %d\n", i,
                kinds[o->kind], o->s, o->s2, o->k, o->a, o->b, o->release_at);
    }
}

/* ---- nodes (shared by every program of the process, so compiled code is reused) ------------- */

static troupe_tnode_t *s_nodes[S_NODES];

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-runtime", 30);
    troupe_config_set_auto_host_transfers(false);
    for (int n = 0; n < S_NODES; n++) {
        char label[8];
        snprintf(label, sizeof label, "f%d", n);
        s_nodes[n] = rtu_vec(label, S_ELEMS);
        rtu_set_hosted(s_nodes[n], 411);
    }
}

static void s_teardown(void)
{
    for (int n = 0; n < S_NODES; n++)
        troupe_tnode_release(&s_nodes[n]);
}

TestSuite(fuzz, .init = s_setup, .fini = s_teardown);

/* ---- one run of a program on one driver ------------------------------------------------------ */

#define S_NCODES (S_KINDS * S_NODES * S_NODES + S_NODES)

typedef struct runner {
    troupe_backend_t *b;
    troupe_device_t *d;
    troupe_stream_t *s[S_MAX_STREAMS];
    troupe_context_t *ctx[S_MAX_STREAMS];
    troupe_code_t *codes[S_NCODES];
    troupe_routine_t *routines[S_MAX_STREAMS][S_NCODES];
} runner_t;

static troupe_code_t *s_code(runner_t *r, int idx)
{
    if (r->codes[idx])
        return r->codes[idx];
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    char name[32];
    OK(troupe_asgn_comp_new(&comp));
    if (idx >= S_KINDS * S_NODES * S_NODES) {
        int a = idx - S_KINDS * S_NODES * S_NODES;
        OK(troupe_asgn_accum_unop(comp, false, TROUPE_BINOP_ADD, s_nodes[a], TROUPE_UNOP_IDENTITY,
                                  troupe_asgn_merge(s_nodes[a]), "i=>i", &t));
        snprintf(name, sizeof name, "fz_merge_%d", a);
    } else {
        int k = idx / (S_NODES * S_NODES), a = idx / S_NODES % S_NODES, b = idx % S_NODES;
        troupe_tnode_t *na = s_nodes[a], *nb = s_nodes[b];
        if (k == 0)
            OK(troupe_asgn_pointwise_binop(comp, na, TROUPE_BINOP_ADD, troupe_asgn_node(na),
                                           troupe_asgn_node(nb), &t));
        else if (k == 1)
            OK(troupe_asgn_pointwise_binop(comp, na, TROUPE_BINOP_SUB, troupe_asgn_node(nb),
                                           troupe_asgn_node(na), &t));
        else
            OK(troupe_asgn_pointwise_binop(comp, na, TROUPE_BINOP_MUL, troupe_asgn_node(na),
                                           troupe_asgn_node(nb), &t));
        snprintf(name, sizeof name, "fz_k%d_%d_%d", k, a, b);
    }
    r->codes[idx] = rtu_compile_root(r->b, &comp, t, name);
    return r->codes[idx];
}

static troupe_routine_t *s_routine(runner_t *r, int s, int idx)
{
    if (!r->routines[s][idx])
        OK(troupe_link(r->ctx[s], s_code(r, idx), &r->routines[s][idx]));
    return r->routines[s][idx];
}

/* Runs p on `driver`; out gets every stream's final values of every node. */
static void s_run(const program_t *p, const char *driver,
                  float out[S_MAX_STREAMS][S_NODES][S_ELEMS])
{
    runner_t r;
    memset(&r, 0, sizeof r);
    OK(troupe_backend_open(driver, TROUPE_MOST_PARALLEL_STREAMS, &r.b));
    OK(troupe_get_device(r.b, 0, &r.d));
    for (int s = 0; s < p->nstreams; s++) {
        OK(troupe_new_stream(r.d, &r.s[s]));
        OK(troupe_context_new(r.s[s], &r.ctx[s]));
        for (int n = 0; n < S_NODES; n++) {
            double v[S_ELEMS];
            for (int i = 0; i < S_ELEMS; i++)
                v[i] = p->init[s][n][i];
            rtu_put(&r.ctx[s], s_nodes[n], v);
        }
    }
    troupe_event_t *gates[S_MAX_OPS] = {0};
    for (int i = 0; i < p->nops; i++) {
        const op_t *o = &p->ops[i];
        troupe_tnode_t *na = s_nodes[o->a];
        int merge_idx = S_KINDS * S_NODES * S_NODES + o->a;
        switch (o->kind) {
        case OP_RUN:
            OK(troupe_routine_run(s_routine(&r, o->s, (o->k * S_NODES + o->a) * S_NODES + o->b),
                                  NULL));
            break;
        case OP_D2D:
            OK(troupe_device_to_device(na, TROUPE_MERGE_NO, r.ctx[o->s], r.ctx[o->s2], NULL, NULL,
                                       NULL));
            break;
        case OP_COPY:
            OK(troupe_device_to_device(na, TROUPE_MERGE_COPY, r.ctx[o->s], r.ctx[o->s2], NULL, NULL,
                                       NULL));
            OK(troupe_routine_run(s_routine(&r, o->s, merge_idx), NULL));
            break;
        case OP_STREAM:
            OK(troupe_device_to_device(na, TROUPE_MERGE_STREAMING, r.ctx[o->s], r.ctx[o->s2],
                                       s_routine(&r, o->s, merge_idx), NULL, NULL));
            break;
        case OP_GATE:
            OK(troupe_event_new("fuzz-gate", &gates[i]));
            OK(troupe_will_wait_for(r.ctx[o->s], gates[i]));
            break;
        }
        for (int j = 0; j <= i; j++) {
            if (gates[j] && p->ops[j].release_at == i) {
                troupe_event_complete(gates[j], TROUPE_OK, NULL);
                troupe_event_release(&gates[j]);
            }
        }
    }
    for (int j = 0; j < p->nops; j++) {
        if (gates[j]) {
            troupe_event_complete(gates[j], TROUPE_OK, NULL);
            troupe_event_release(&gates[j]);
        }
    }
    for (int s = 0; s < p->nstreams; s++) {
        for (int n = 0; n < S_NODES; n++)
            rtu_get(r.ctx[s], s_nodes[n], out[s][n]);
    }
    for (int s = 0; s < p->nstreams; s++) {
        OK(troupe_stream_await(r.s[s], 20000 * MS));
        for (int c = 0; c < S_NCODES; c++)
            troupe_routine_release(&r.routines[s][c]);
        troupe_context_release(&r.ctx[s]);
        troupe_stream_release(&r.s[s]);
    }
    for (int c = 0; c < S_NCODES; c++)
        troupe_code_release(&r.codes[c]);
    troupe_backend_close(&r.b);
}

/* Program order, on the host: what every schedule must compute, since the ledger orders every
 * conflicting pair of accesses as the program issued them. */
static void s_oracle(const program_t *p, float out[S_MAX_STREAMS][S_NODES][S_ELEMS])
{
    memcpy(out, p->init, sizeof p->init);
    for (int i = 0; i < p->nops; i++) {
        const op_t *o = &p->ops[i];
        volatile float *a = out[o->s][o->a];
        const float *b = out[o->s][o->b];
        const float *src = out[o->s2][o->a];
        for (int e = 0; e < S_ELEMS; e++) {
            switch (o->kind) {
            case OP_RUN:
                a[e] = o->k == 0 ? a[e] + b[e] : o->k == 1 ? b[e] - a[e] : a[e] * b[e];
                break;
            case OP_D2D:
                a[e] = src[e];
                break;
            case OP_COPY:
            case OP_STREAM:
                a[e] = a[e] + src[e];
                break;
            case OP_GATE:
                break;
            }
        }
    }
}

static long s_env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    return end && *end == '\0' ? x : dflt;
}

Test(fuzz, cpu_matches_sync_bit_for_bit, .timeout = 300)
{
    long nseeds = s_env_long("TROUPE_FUZZ_SEEDS", 20);
    long base = s_env_long("TROUPE_FUZZ_SEED_BASE", 1);
    static program_t p;
    static float want[S_MAX_STREAMS][S_NODES][S_ELEMS], got[S_MAX_STREAMS][S_NODES][S_ELEMS];
    static float oracle[S_MAX_STREAMS][S_NODES][S_ELEMS];
    for (long k = 0; k < nseeds; k++) {
        uint64_t seed = (uint64_t)(base + k);
        s_generate(seed, &p);
        memset(want, 0, sizeof want);
        memset(got, 0, sizeof got);
        s_run(&p, "sync", want);
        s_run(&p, "cpu", got);
        s_oracle(&p, oracle);
        if (memcmp(want, oracle, sizeof want) != 0) {
            s_print(&p);
            for (int s = 0; s < p.nstreams; s++)
                for (int n = 0; n < S_NODES; n++)
                    for (int i = 0; i < S_ELEMS; i++)
                        if (memcmp(&want[s][n][i], &oracle[s][n][i], sizeof(float)) != 0)
                            cr_assert_fail("seed %llu: stream %d node f%d[%d]: sync %.9g, "
                                           "program order %.9g",
                                           (unsigned long long)seed, s, n, i,
                                           (double)want[s][n][i], (double)oracle[s][n][i]);
        }
        if (memcmp(want, got, sizeof want) != 0) {
            s_print(&p);
            if (getenv("TROUPE_FUZZ_DUMP"))
                for (int s = 0; s < p.nstreams; s++)
                    for (int n = 0; n < S_NODES; n++)
                        fprintf(stderr, "s%d f%d init %g %g sync %g %g cpu %g %g\n", s, n,
                                (double)p.init[s][n][0], (double)p.init[s][n][1],
                                (double)want[s][n][0], (double)want[s][n][1],
                                (double)got[s][n][0], (double)got[s][n][1]);
            for (int s = 0; s < p.nstreams; s++)
                for (int n = 0; n < S_NODES; n++)
                    for (int i = 0; i < S_ELEMS; i++)
                        if (memcmp(&want[s][n][i], &got[s][n][i], sizeof(float)) != 0)
                            cr_assert_fail("seed %llu: stream %d node f%d[%d]: cpu %.9g, sync %.9g",
                                    (unsigned long long)seed, s, n, i, (double)got[s][n][i],
                                    (double)want[s][n][i]);
        }
    }
}

/* The same programs on the cuda driver (asynchronous queues, device-side waits, the device
 * poller) give, bit for bit, what they give on sync. Skips without a CUDA device. */
Test(fuzz, cuda_matches_sync_bit_for_bit, .timeout = 300)
{
    char why[512];
    if (!rtu_cuda_present(why, sizeof why))
        cr_skip_test("%s", why);
    long nseeds = s_env_long("TROUPE_FUZZ_SEEDS", 20);
    long base = s_env_long("TROUPE_FUZZ_SEED_BASE", 1);
    static program_t p;
    static float want[S_MAX_STREAMS][S_NODES][S_ELEMS], got[S_MAX_STREAMS][S_NODES][S_ELEMS];
    for (long k = 0; k < nseeds; k++) {
        uint64_t seed = (uint64_t)(base + k);
        s_generate(seed, &p);
        memset(want, 0, sizeof want);
        memset(got, 0, sizeof got);
        s_run(&p, "sync", want);
        s_run(&p, "cuda", got);
        for (int s = 0; s < p.nstreams; s++)
            for (int n = 0; n < S_NODES; n++)
                for (int i = 0; i < S_ELEMS; i++)
                    if (memcmp(&want[s][n][i], &got[s][n][i], sizeof(float)) != 0) {
                        s_print(&p);
                        cr_assert_fail("seed %llu: stream %d node f%d[%d]: cuda %.9g, sync %.9g",
                                       (unsigned long long)seed, s, n, i, (double)got[s][n][i],
                                       (double)want[s][n][i]);
                    }
    }
}

/* The generator itself: programs are reproducible and use every kind of operation. */
Test(fuzz, programs_are_reproducible_and_cover_every_op)
{
    static program_t p1, p2;
    bool seen[5] = {false};
    for (uint64_t seed = 1; seed <= 20; seed++) {
        s_generate(seed, &p1);
        s_generate(seed, &p2);
        cr_assert_eq(memcmp(&p1, &p2, sizeof p1), 0);
        cr_assert(p1.nstreams >= 2 && p1.nstreams <= S_MAX_STREAMS);
        for (int i = 0; i < p1.nops; i++) {
            seen[p1.ops[i].kind] = true;
            cr_assert_neq(p1.ops[i].s, p1.ops[i].s2);
        }
    }
    for (int k = 0; k < 5; k++)
        cr_assert(seen[k], "op kind %d never generated", k);
}
