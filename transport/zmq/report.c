/* troupe — the hang report: querying the ranks, the verdict, text and JSON (see report_impl.h). */
#define _GNU_SOURCE
#include "transport/zmq/report_impl.h"

#include "actors/actor.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define S_MAX_EDGES 16

/* ---- the query --------------------------------------------------------------------------- */

struct troupe__status_query {
    const troupe__status_job_t *job;
    int n;
    troupe__status_result_t *res; /* [n] */
    zsock_t **socks;              /* [n]: NULL when answered locally or not asked */
    uint64_t *ids;                /* [n] */
    int64_t t0, deadline;
    int pending;
    bool finalized;
};

static double s_ms_since(int64_t t0)
{
    return (double)(troupe_now_ns() - t0) / 1e6;
}

/* Answers rank `r` from this process's status board, through the same encoding. */
static void s_local(troupe__status_query_t *q, const troupe__status_self_t *self, int r)
{
    troupe__status_result_t *res = &q->res[r];
    zmsg_t *req = NULL, *reply = NULL;
    if (troupe_msg_build(&req, "s8", TROUPE__STATUS_VERB, q->ids[r]) == TROUPE_OK)
        troupe__status_answer(self, req, &reply);
    zmsg_destroy(&req);
    if (reply != NULL && troupe__status_decode_reply(reply, q->ids[r], &res->reply) == TROUPE_OK) {
        res->answered = true;
        res->rtt_ms = s_ms_since(q->t0);
    } else {
        snprintf(res->why, sizeof res->why, "its own status could not be read: %s",
                 troupe_last_error());
    }
    zmsg_destroy(&reply);
}

/* A DEALER to rank r's endpoint with the request sent; false (why set) when that fails. */
static bool s_ask(troupe__status_query_t *q, int r)
{
    const troupe__status_job_t *job = q->job;
    troupe__status_result_t *res = &q->res[r];
    const char *ep = job->ranks[r].endpoint;
    if (strcmp(ep, "none") == 0) {
        snprintf(res->why, sizeof res->why, "no status endpoint (its control plane is off or "
                                            "did not start)");
        return false;
    }
    zsock_t *s = zsock_new(ZMQ_DEALER);
    if (s == NULL) {
        snprintf(res->why, sizeof res->why, "cannot make a socket");
        return false;
    }
    zsock_set_linger(s, 0);
    zsock_set_sndtimeo(s, 0);
    zsock_set_maxmsgsize(s, (int64_t)(TROUPE__STATUS_MAX_RECS + 4) * 1024);
    if (job->curve) {
        zsock_set_curve_serverkey(s, job->curve_public);
        zsock_set_curve_publickey(s, job->curve_public);
        zsock_set_curve_secretkey(s, job->curve_secret);
    }
    zmsg_t *req = NULL;
    if (zsock_connect(s, "%s", ep) != 0 ||
        troupe_msg_build(&req, "s8", TROUPE__STATUS_VERB, q->ids[r]) != TROUPE_OK ||
        zmsg_send(&req, s) != 0) {
        snprintf(res->why, sizeof res->why, "cannot send to %.160s: %s", ep,
                 zmq_strerror(zmq_errno()));
        zmsg_destroy(&req);
        zsock_destroy(&s);
        return false;
    }
    q->socks[r] = s;
    return true;
}

troupe_status_t troupe__status_query_new(const troupe__status_job_t *job,
                                         const troupe__status_self_t *self, int64_t timeout_ns,
                                         troupe__status_query_t **out)
{
    *out = NULL;
    troupe__status_query_t *q = troupe_calloc(1, sizeof *q);
    if (q == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "status: out of memory");
    q->job = job;
    q->n = job->size;
    q->res = troupe_calloc((size_t)q->n, sizeof *q->res);
    q->socks = troupe_calloc((size_t)q->n, sizeof *q->socks);
    q->ids = troupe_calloc((size_t)q->n, sizeof *q->ids);
    if (q->res == NULL || q->socks == NULL || q->ids == NULL) {
        troupe__status_query_destroy(&q, NULL);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "status: out of memory");
    }
    q->t0 = troupe_now_ns();
    q->deadline = troupe_deadline_after(timeout_ns);
    for (int r = 0; r < q->n; r++) {
        q->res[r].rank = r;
        q->ids[r] = ((uint64_t)q->t0 << 12) ^ (uint64_t)r ^ ((uint64_t)getpid() << 40);
        if (self != NULL && self->rank == r)
            s_local(q, self, r);
        else if (s_ask(q, r))
            q->pending++;
    }
    *out = q;
    return TROUPE_OK;
}

void troupe__status_query_poll_add(troupe__status_query_t *q, zpoller_t *poller)
{
    for (int r = 0; r < q->n; r++)
        if (q->socks[r] != NULL)
            zpoller_add(poller, q->socks[r]);
}

bool troupe__status_query_handle(troupe__status_query_t *q, void *which)
{
    for (int r = 0; r < q->n; r++) {
        if (q->socks[r] == NULL || (void *)q->socks[r] != which)
            continue;
        troupe__status_result_t *res = &q->res[r];
        zmsg_t *reply = zmsg_recv(q->socks[r]);
        if (reply == NULL || res->answered || q->finalized) {
            zmsg_destroy(&reply);
            return true;
        }
        if (troupe__status_decode_reply(reply, q->ids[r], &res->reply) == TROUPE_OK) {
            res->answered = true;
            res->rtt_ms = s_ms_since(q->t0);
            res->why[0] = '\0';
            q->pending--;
        } else if (zmsg_size(reply) >= 1 && zframe_size(zmsg_first(reply)) == sizeof(uint64_t) &&
                   memcmp(zframe_data(zmsg_first(reply)), &q->ids[r], sizeof(uint64_t)) == 0) {
            snprintf(res->why, sizeof res->why, "%s", troupe_last_error());
            q->pending--; /* an error reply to our request: final */
            res->rtt_ms = -1;
        }
        zmsg_destroy(&reply);
        return true;
    }
    return false;
}

/* What is known about a rank that did not answer, when it runs on this host: its process's
 * state from /proc. */
static void s_why_silent(troupe__status_query_t *q, int r)
{
    troupe__status_result_t *res = &q->res[r];
    if (res->answered || res->why[0] != '\0')
        return;
    const troupe__status_rank_info_t *ri = &q->job->ranks[r];
    double ms = (double)(q->deadline - q->t0) / 1e6;
    char host[256] = "";
    if (gethostname(host, sizeof host) != 0 || strcmp(host, ri->host) != 0) {
        snprintf(res->why, sizeof res->why, "no answer within %.0f ms (on host %s)", ms,
                 ri->host);
        return;
    }
    if (kill(ri->pid, 0) != 0 && errno == ESRCH) {
        snprintf(res->why, sizeof res->why, "no answer within %.0f ms: process %d has exited",
                 ms, ri->pid);
        return;
    }
    char path[64], stat[512] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", ri->pid);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(stat, sizeof stat, f) == NULL)
            stat[0] = '\0';
        fclose(f);
    }
    const char *paren = strrchr(stat, ')');
    char state = paren != NULL && paren[1] == ' ' ? paren[2] : '?';
    const char *what = state == 'T'   ? "is stopped (SIGSTOP, or job control)"
                       : state == 't' ? "is stopped by a debugger"
                       : state == 'Z' ? "has exited (not yet reaped)"
                       : state == 'D' ? "is blocked in the kernel (uninterruptible I/O)"
                                      : "is alive, but its status thread did not answer";
    snprintf(res->why, sizeof res->why, "no answer within %.0f ms: process %d %s", ms, ri->pid,
             what);
}

bool troupe__status_query_done(troupe__status_query_t *q)
{
    if (q->finalized)
        return true;
    if (q->pending > 0 && troupe_now_ns() < q->deadline)
        return false;
    q->finalized = true;
    for (int r = 0; r < q->n; r++)
        s_why_silent(q, r);
    return true;
}

int troupe__status_query_wait_ms(troupe__status_query_t *q)
{
    int64_t left = troupe_deadline_remaining(q->deadline);
    return (int)((left + 999999) / 1000000);
}

void troupe__status_query_run(troupe__status_query_t *q)
{
    zpoller_t *poller = zpoller_new(NULL);
    if (poller == NULL) {
        q->deadline = troupe_now_ns();
    } else {
        troupe__status_query_poll_add(q, poller);
        while (!troupe__status_query_done(q)) {
            void *which = zpoller_wait(poller, troupe__status_query_wait_ms(q));
            if (which != NULL)
                troupe__status_query_handle(q, which);
            else if (zpoller_terminated(poller))
                q->deadline = troupe_now_ns();
        }
    }
    for (int r = 0; r < q->n; r++) {
        if (poller != NULL && q->socks[r] != NULL)
            zpoller_remove(poller, q->socks[r]);
    }
    zpoller_destroy(&poller);
}

const troupe__status_result_t *troupe__status_query_results(troupe__status_query_t *q, int *n,
                                                            double *elapsed_ms)
{
    troupe__status_query_done(q);
    *n = q->n;
    *elapsed_ms = 0;
    for (int r = 0; r < q->n; r++)
        if (q->res[r].answered && q->res[r].rtt_ms > *elapsed_ms)
            *elapsed_ms = q->res[r].rtt_ms;
    if (q->pending > 0)
        *elapsed_ms = (double)(q->deadline - q->t0) / 1e6;
    return q->res;
}

void troupe__status_query_destroy(troupe__status_query_t **q_p, zpoller_t *poller)
{
    if (q_p == NULL || *q_p == NULL)
        return;
    troupe__status_query_t *q = *q_p;
    *q_p = NULL;
    for (int r = 0; q->socks != NULL && r < q->n; r++) {
        if (q->socks[r] == NULL)
            continue;
        if (poller != NULL)
            zpoller_remove(poller, q->socks[r]);
        zsock_destroy(&q->socks[r]);
    }
    for (int r = 0; q->res != NULL && r < q->n; r++)
        troupe__status_reply_clear(&q->res[r].reply);
    troupe_free(q->res);
    troupe_free(q->socks);
    troupe_free(q->ids);
    troupe_free(q);
}

/* ---- the wait-for graph ------------------------------------------------------------------ */

/* A node: one actor of an answering rank, or (rec == -1) a rank as a whole. */
typedef struct s_node {
    int rank, rec;
    int nedge;
    int edge[S_MAX_EDGES];
    bool same[S_MAX_EDGES]; /* transport to transport within one collective: not a cycle */
} s_node_t;

typedef struct s_graph {
    const troupe__status_result_t *res;
    int n;
    int *base; /* [n]: the node of rank r's first actor */
    int nrecs; /* actor nodes; rank nodes follow */
    s_node_t *nodes;
} s_graph_t;

static const troupe__status_rec_t *s_rec(const s_graph_t *g, int node)
{
    const s_node_t *x = &g->nodes[node];
    return x->rec < 0 ? NULL : &g->res[x->rank].reply.recs[x->rec];
}

static bool s_in_collective(const troupe__status_rec_t *r)
{
    return r->kind == TROUPE__BOARD_TRANSPORT &&
           (r->state == TROUPE__BOARD_FINGERPRINT || r->state == TROUPE__BOARD_DATA ||
            r->state == TROUPE__BOARD_PROBING);
}

static bool s_waiting(const troupe__status_rec_t *r)
{
    return r != NULL && ((r->kind == TROUPE__BOARD_STREAM && r->state == TROUPE__BOARD_PARKED) ||
                         ((r->kind == TROUPE__BOARD_HOST || r->kind == TROUPE__BOARD_DEVICE) &&
                          r->state == TROUPE__BOARD_WAITING) ||
                         s_in_collective(r));
}

static bool s_stalled(const troupe__status_rec_t *r)
{
    return s_waiting(r) && r->age_ns >= TROUPE__STATUS_STALL_NS;
}

/* The node of the actor named `name` (or of kind TRANSPORT for "transport") of rank r. */
static int s_find(const s_graph_t *g, int r, const char *name)
{
    const troupe__status_result_t *res = &g->res[r];
    if (!res->answered)
        return -1;
    bool tr = strcmp(name, "transport") == 0;
    for (int i = 0; i < res->reply.head.nrecs; i++) {
        const troupe__status_rec_t *x = &res->reply.recs[i];
        if ((tr && x->kind == TROUPE__BOARD_TRANSPORT) ||
            (!tr && x->kind == TROUPE__BOARD_STREAM && strcmp(x->name, name) == 0))
            return g->base[r] + i;
    }
    return -1;
}

/* The ranks a transport waits for: "rank 1", "ranks 1, 3" (cut at the field's end), else
 * wait_rank. */
static int s_waited_ranks(const troupe__status_rec_t *t, int n, int *out, int cap)
{
    int k = 0;
    const char *p = strncmp(t->wait_by, "rank", 4) == 0 ? t->wait_by + 4 : NULL;
    while (p != NULL && *p != '\0' && k < cap) {
        while (*p != '\0' && (*p < '0' || *p > '9'))
            p++;
        if (*p == '\0')
            break;
        long v = 0;
        while (*p >= '0' && *p <= '9' && v < n)
            v = v * 10 + (*p++ - '0');
        if (v < n)
            out[k++] = (int)v;
    }
    if (k == 0 && t->wait_rank >= 0 && t->wait_rank < n)
        out[k++] = t->wait_rank;
    return k;
}

static void s_edge(s_node_t *x, int to, bool same)
{
    if (x->nedge < S_MAX_EDGES) {
        x->same[x->nedge] = same;
        x->edge[x->nedge++] = to;
    }
}

static void s_edges(s_graph_t *g, int node)
{
    s_node_t *x = &g->nodes[node];
    const troupe__status_rec_t *r = s_rec(g, node);
    if (!s_waiting(r))
        return;
    if (!s_in_collective(r)) {
        int to = r->wait_by[0] != '\0' ? s_find(g, x->rank, r->wait_by) : -1;
        if (to >= 0 && to != node)
            s_edge(x, to, false);
        return;
    }
    int ranks[S_MAX_EDGES];
    int k = s_waited_ranks(r, g->n, ranks, S_MAX_EDGES);
    for (int i = 0; i < k; i++) {
        int q = ranks[i];
        if (q == x->rank)
            continue;
        int tq = s_find(g, q, "transport");
        const troupe__status_rec_t *rq = tq >= 0 ? s_rec(g, tq) : NULL;
        if (rq != NULL && r->coll_active > 0 && rq->coll_done >= r->coll_active)
            continue; /* q completed that collective: it is not what r waits for */
        if (rq != NULL && s_in_collective(rq))
            s_edge(x, tq, rq->coll_active == r->coll_active);
        else
            s_edge(x, g->nrecs + q, false);
    }
}

static troupe_status_t s_graph_build(s_graph_t *g, const troupe__status_result_t *res, int n)
{
    memset(g, 0, sizeof *g);
    g->res = res;
    g->n = n;
    g->base = troupe_calloc((size_t)n + 1, sizeof *g->base);
    if (g->base == NULL)
        return TROUPE_RESOURCE_EXHAUSTED;
    for (int r = 0; r < n; r++) {
        g->base[r] = g->nrecs;
        g->nrecs += res[r].answered ? res[r].reply.head.nrecs : 0;
    }
    g->nodes = troupe_calloc((size_t)g->nrecs + (size_t)n, sizeof *g->nodes);
    if (g->nodes == NULL)
        return TROUPE_RESOURCE_EXHAUSTED;
    for (int r = 0; r < n; r++) {
        for (int i = 0; res[r].answered && i < res[r].reply.head.nrecs; i++)
            g->nodes[g->base[r] + i] = (s_node_t){.rank = r, .rec = i};
        g->nodes[g->nrecs + r] = (s_node_t){.rank = r, .rec = -1};
    }
    for (int i = 0; i < g->nrecs; i++)
        s_edges(g, i);
    return TROUPE_OK;
}

static void s_graph_free(s_graph_t *g)
{
    troupe_free(g->base);
    troupe_free(g->nodes);
}

/* "rank 0 cpu:0:1" / "rank 1". */
static void s_node_name(const s_graph_t *g, int node, char *buf, size_t cap)
{
    const troupe__status_rec_t *r = s_rec(g, node);
    if (r == NULL)
        snprintf(buf, cap, "rank %d", g->nodes[node].rank);
    else
        snprintf(buf, cap, "rank %d %s", g->nodes[node].rank, r->name);
}

/* "5.21 s", "3.1 ms", "12 us". */
static void s_dur(int64_t ns, char *buf, size_t cap)
{
    if (ns >= 1000000000LL || ns <= -1000000000LL)
        snprintf(buf, cap, "%.2f s", (double)ns / 1e9);
    else if (ns >= 1000000LL || ns <= -1000000LL)
        snprintf(buf, cap, "%.1f ms", (double)ns / 1e6);
    else
        snprintf(buf, cap, "%lld us", (long long)(ns / 1000));
}

/* A wait-for cycle among stalled waits (edges within one collective excluded) into v. */
static bool s_find_cycle(const s_graph_t *g, troupe__status_verdict_t *v)
{
    int total = g->nrecs + g->n;
    unsigned char *color = troupe_calloc((size_t)total, 1);
    int *parent = troupe_calloc((size_t)total, sizeof *parent);
    int *stack = troupe_calloc((size_t)total, sizeof *stack);
    int *next = troupe_calloc((size_t)total, sizeof *next);
    bool found = false;
    for (int s = 0; s < g->nrecs && !found && color && parent && stack && next; s++) {
        if (color[s] != 0 || !s_stalled(s_rec(g, s)))
            continue;
        int sp = 0;
        stack[sp++] = s;
        color[s] = 1;
        parent[s] = -1;
        next[s] = 0;
        while (sp > 0 && !found) {
            int u = stack[sp - 1];
            const s_node_t *x = &g->nodes[u];
            if (next[u] >= x->nedge) {
                color[u] = 2;
                sp--;
                continue;
            }
            int k = next[u]++;
            int w = x->edge[k];
            if (x->same[k] || w >= g->nrecs || !s_stalled(s_rec(g, w)))
                continue;
            if (color[w] == 1) { /* back edge: the cycle is w .. u */
                found = true;
                troupe__strbuf_t sb;
                troupe__strbuf_init_fixed(&sb, v->path, sizeof v->path);
                int chain[64], m = 0;
                for (int y = u; y != -1 && m < 64; y = y == w ? -1 : parent[y])
                    chain[m++] = y;
                for (int i = m - 1; i >= 0; i--) {
                    char name[96];
                    s_node_name(g, chain[i], name, sizeof name);
                    troupe__strbuf_printf(&sb, "%s -> ", name);
                }
                char name[96];
                s_node_name(g, w, name, sizeof name);
                troupe__strbuf_puts(&sb, name);
            } else if (color[w] == 0) {
                color[w] = 1;
                parent[w] = u;
                next[w] = 0;
                stack[sp++] = w;
            }
        }
    }
    troupe_free(color);
    troupe_free(parent);
    troupe_free(stack);
    troupe_free(next);
    return found;
}

/* Marks the rank nodes and the not-waiting actors that the stalled waits lead to. */
static void s_find_ends(const s_graph_t *g, unsigned char *end)
{
    int total = g->nrecs + g->n;
    unsigned char *seen = troupe_calloc((size_t)total, 1);
    int *stack = troupe_calloc((size_t)total, sizeof *stack);
    for (int s = 0; s < g->nrecs && seen && stack; s++) {
        if (!s_stalled(s_rec(g, s)))
            continue;
        memset(seen, 0, (size_t)total);
        int sp = 0;
        stack[sp++] = s;
        seen[s] = 1;
        while (sp > 0) {
            int u = stack[--sp];
            const s_node_t *x = &g->nodes[u];
            /* A stalled transport that waits for no rank left (each completed its collective)
             * is where its own wait ends. */
            if (x->nedge == 0 && (u >= g->nrecs || u != s || s_in_collective(s_rec(g, u))))
                end[u] = 1;
            for (int k = 0; k < x->nedge; k++) {
                int w = x->edge[k];
                if (!seen[w]) {
                    seen[w] = 1;
                    stack[sp++] = w;
                }
            }
        }
    }
    troupe_free(seen);
    troupe_free(stack);
}

/* The oldest stalled transport wait that points at rank q (directly, or at its transport). */
static int s_waiter_of(const s_graph_t *g, int q)
{
    int best = -1;
    for (int u = 0; u < g->nrecs; u++) {
        const troupe__status_rec_t *r = s_rec(g, u);
        if (!s_stalled(r) || !s_in_collective(r))
            continue;
        const s_node_t *x = &g->nodes[u];
        for (int k = 0; k < x->nedge; k++)
            if (g->nodes[x->edge[k]].rank == q && x->rank != q &&
                (best < 0 || r->age_ns > s_rec(g, best)->age_ns))
                best = u;
    }
    return best;
}

/* What rank q (answering) does: its collectives and its longest wait. */
static void s_rank_doing(const s_graph_t *g, int q, int64_t awaited, troupe__strbuf_t *sb)
{
    const troupe__status_result_t *res = &g->res[q];
    const troupe__status_rec_t *t = NULL, *w = NULL;
    for (int i = 0; i < res->reply.head.nrecs; i++) {
        const troupe__status_rec_t *x = &res->reply.recs[i];
        if (x->kind == TROUPE__BOARD_TRANSPORT)
            t = x;
        else if (s_waiting(x) && (w == NULL || x->age_ns > w->age_ns))
            w = x;
    }
    if (t != NULL) {
        troupe__strbuf_printf(sb, "it has issued %lld collective(s)", (long long)t->coll_issued);
        if (awaited > 0 && t->coll_issued < awaited)
            troupe__strbuf_printf(sb, " (not yet #%lld)", (long long)awaited);
    } else {
        troupe__strbuf_puts(sb, "it runs no transport");
    }
    if (w != NULL) {
        char age[32];
        s_dur(w->age_ns, age, sizeof age);
        troupe__strbuf_printf(sb, "; %s %s waits on %s%s%s%s since %s",
                              troupe__board_kind_name(w->kind), w->name, w->wait_on,
                              w->wait_by[0] ? " (" : "", w->wait_by, w->wait_by[0] ? ")" : "",
                              age);
    } else {
        troupe__strbuf_puts(sb, "; none of its threads waits (it computes, or is between "
                                "collectives)");
    }
}

static void s_longest(const s_graph_t *g, troupe__strbuf_t *sb)
{
    int best = -1;
    for (int u = 0; u < g->nrecs; u++)
        if (s_waiting(s_rec(g, u)) &&
            (best < 0 || s_rec(g, u)->age_ns > s_rec(g, best)->age_ns))
            best = u;
    if (best < 0) {
        troupe__strbuf_puts(sb, "no rank is stalled (nothing waits)");
        return;
    }
    const troupe__status_rec_t *r = s_rec(g, best);
    char age[32];
    s_dur(r->age_ns, age, sizeof age);
    troupe__strbuf_printf(sb, "no rank is stalled (longest wait %s: rank %d %s on %s%s%s)", age,
                          g->nodes[best].rank, r->name, r->wait_on, r->wait_by[0] ? " from " : "",
                          r->wait_by);
}

/* Ranks behind (end[] rank nodes): the verdict's text. */
static void s_say_behind(const s_graph_t *g, const unsigned char *end, troupe__status_verdict_t *v,
                         troupe__strbuf_t *sb)
{
    for (int q = 0; q < g->n; q++) {
        int tq = s_find(g, q, "transport");
        if (!end[g->nrecs + q] && (tq < 0 || !end[tq]))
            continue;
        if (v->nbehind < 16)
            v->behind[v->nbehind] = q;
        v->nbehind++;
    }
    for (int i = 0; i < v->nbehind && i < 16; i++) {
        int q = v->behind[i];
        int w = s_waiter_of(g, q);
        const troupe__status_rec_t *wr = w >= 0 ? s_rec(g, w) : NULL;
        if (wr != NULL && v->collective[0] == '\0')
            snprintf(v->collective, sizeof v->collective, "%s", wr->wait_on);
        troupe__strbuf_printf(sb, "%srank %d is behind", i ? "; " : "", q);
        if (wr != NULL)
            troupe__strbuf_printf(sb, " in %s", wr->wait_on);
        troupe__strbuf_puts(sb, ": ");
        int tq = s_find(g, q, "transport");
        const troupe__status_rec_t *tx = tq >= 0 ? s_rec(g, tq) : NULL;
        const troupe__status_rec_t *tr = tq >= 0 && end[tq] ? tx : NULL;
        if (!g->res[q].answered) {
            troupe__strbuf_printf(sb, "it does not answer (%s)", g->res[q].why);
        } else if (tx != NULL && tx->state == TROUPE__BOARD_WAITING) {
            /* a gated collective (transport/mpi/collective.h `after`): not started, its own
             * events (copies to the host from a stream or device) have not completed */
            char age[32];
            s_dur(tx->age_ns, age, sizeof age);
            troupe__strbuf_printf(sb,
                                  "it has not started %s: it waits for %s since %s (a stuck "
                                  "stream or device?)",
                                  tx->wait_on, tx->wait_by, age);
        } else if (tr != NULL) {
            char age[32];
            s_dur(tr->age_ns, age, sizeof age);
            troupe__strbuf_printf(sb,
                                  "it is still in %s (%s since %s), which the ranks it waits for "
                                  "have completed (lost messages, or a broken link?)",
                                  tr->wait_on, troupe__board_state_name(tr->state), age);
        } else {
            s_rank_doing(g, q, wr != NULL ? wr->coll_active : 0, sb);
        }
        if (wr != NULL) {
            char age[32];
            s_dur(wr->age_ns, age, sizeof age);
            troupe__strbuf_printf(sb, "; rank %d has waited for it %s", g->nodes[w].rank, age);
        }
    }
}

void troupe__status_verdict(const troupe__status_job_t *job, const troupe__status_result_t *res,
                            int n, troupe__status_verdict_t *v)
{
    (void)job;
    memset(v, 0, sizeof *v);
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, v->text, sizeof v->text);
    s_graph_t g;
    unsigned char *end = NULL;
    if (s_graph_build(&g, res, n) != TROUPE_OK ||
        (end = troupe_calloc((size_t)g.nrecs + (size_t)n, 1)) == NULL) {
        troupe__strbuf_puts(&sb, "no verdict (out of memory)");
        goto free_graph;
    }
    if (s_find_cycle(&g, v)) {
        v->stalled = v->cycle = true;
        troupe__strbuf_printf(&sb, "wait-for cycle: %s", v->path);
        goto free_graph;
    }
    s_find_ends(&g, end);
    bool silent = false, any_end = false;
    for (int q = 0; q < n; q++) {
        int tq = s_find(&g, q, "transport");
        silent |= !res[q].answered;
        any_end |= end[g.nrecs + q] != 0 || (tq >= 0 && end[tq]);
    }
    if (any_end) {
        v->stalled = true;
        s_say_behind(&g, end, v, &sb);
        goto free_graph;
    }
    for (int u = 0; u < g.nrecs; u++) {
        if (!end[u])
            continue;
        /* A stalled wait that ends at a local actor which is not waiting (running). */
        const troupe__status_rec_t *r = s_rec(&g, u);
        v->stalled = true;
        troupe__strbuf_printf(&sb, "rank %d is stalled behind its %s %s, which is not waiting "
                                   "(queue %lld: running)",
                              g.nodes[u].rank, troupe__board_kind_name(r->kind), r->name,
                              (long long)r->queue);
        goto free_graph;
    }
    if (silent) {
        v->stalled = true;
        for (int q = 0; q < n; q++) {
            if (res[q].answered)
                continue;
            if (v->nbehind < 16)
                v->behind[v->nbehind] = q;
            v->nbehind++;
            troupe__strbuf_printf(&sb, "%srank %d does not answer (%s)", v->nbehind > 1 ? "; " : "",
                                  q, res[q].why);
        }
        troupe__strbuf_puts(&sb, "; no rank waits for it yet");
        goto free_graph;
    }
    s_longest(&g, &sb);
free_graph:
    troupe_free(end);
    s_graph_free(&g);
}

/* ---- text -------------------------------------------------------------------------------- */

static void s_text_rec(const troupe__status_rec_t *r, troupe__strbuf_t *sb)
{
    troupe__strbuf_printf(sb, "  %-9s %-12s %-12s", troupe__board_kind_name(r->kind), r->name,
                          troupe__board_state_name(r->state));
    if (r->queue >= 0)
        troupe__strbuf_printf(sb, " queue %-4lld", (long long)r->queue);
    if (r->kind == TROUPE__BOARD_TRANSPORT)
        troupe__strbuf_printf(sb, " collectives issued %lld, done %lld",
                              (long long)r->coll_issued, (long long)r->coll_done);
    if (r->state != TROUPE__BOARD_IDLE && r->state != TROUPE__BOARD_RUNNING) {
        char age[32];
        s_dur(r->age_ns, age, sizeof age);
        troupe__strbuf_printf(sb, "%s waits on %s", r->kind == TROUPE__BOARD_TRANSPORT ? ";" : "",
                              r->wait_on);
        if (r->wait_by[0] != '\0')
            troupe__strbuf_printf(sb, " (from %s)", r->wait_by);
        troupe__strbuf_printf(sb, " since %s", age);
        if (r->kind == TROUPE__BOARD_TRANSPORT && r->due_in_ns != 0) {
            char due[32];
            s_dur(r->due_in_ns > 0 ? r->due_in_ns : -r->due_in_ns, due, sizeof due);
            troupe__strbuf_printf(sb, " (deadline %s %s%s)", r->due_in_ns > 0 ? "in" : "passed",
                                  due, r->due_in_ns > 0 ? "" : " ago");
        }
    }
    troupe__strbuf_putc(sb, '\n');
}

static int s_answered_count(const troupe__status_result_t *res, int n)
{
    int answered = 0;
    for (int r = 0; r < n; r++)
        answered += res[r].answered;
    return answered;
}

void troupe__status_format_text(const troupe__status_job_t *job, const troupe__status_result_t *res,
                                int n, double elapsed_ms, const troupe__status_verdict_t *v,
                                troupe__strbuf_t *sb)
{
    int answered = s_answered_count(res, n);
    troupe__strbuf_printf(sb, "job %s (%d rank%s%s%s): %d of %d answered in %.1f ms\n", job->id,
                          n, n == 1 ? "" : "s", job->dir[0] ? ", " : "", job->dir, answered, n,
                          elapsed_ms);
    for (int r = 0; r < n; r++) {
        const troupe__status_rank_info_t *ri = &job->ranks[r];
        troupe__strbuf_printf(sb, "rank %d (pid %d, host %s): ", r, ri->pid, ri->host);
        if (!res[r].answered) {
            troupe__strbuf_printf(sb, "NOT ANSWERING: %s\n", res[r].why);
            continue;
        }
        const troupe__status_reply_t *rp = &res[r].reply;
        troupe__strbuf_printf(sb, "%d actor(s)", rp->head.nrecs);
        if (rp->head.missed > 0)
            troupe__strbuf_printf(sb, " (%llu more without a board slot)",
                                  (unsigned long long)rp->head.missed);
        troupe__strbuf_printf(sb, ", answered in %.1f ms\n", res[r].rtt_ms);
        for (int i = 0; i < rp->head.nrecs; i++)
            s_text_rec(&rp->recs[i], sb);
    }
    troupe__strbuf_printf(sb, "verdict: %s\n", v->text);
}

/* ---- JSON -------------------------------------------------------------------------------- */

static void s_json_str(troupe__strbuf_t *sb, const char *s)
{
    troupe__strbuf_putc(sb, '"');
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            troupe__strbuf_printf(sb, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            troupe__strbuf_printf(sb, "\\u%04x", c);
        else
            troupe__strbuf_putc(sb, (char)c);
    }
    troupe__strbuf_putc(sb, '"');
}

static void s_json_rec(const troupe__status_rec_t *r, troupe__strbuf_t *sb)
{
    troupe__strbuf_puts(sb, "{\"kind\": ");
    s_json_str(sb, troupe__board_kind_name(r->kind));
    troupe__strbuf_puts(sb, ", \"name\": ");
    s_json_str(sb, r->name);
    troupe__strbuf_puts(sb, ", \"state\": ");
    s_json_str(sb, troupe__board_state_name(r->state));
    troupe__strbuf_printf(sb, ", \"queue\": %lld", (long long)r->queue);
    if (r->state != TROUPE__BOARD_IDLE && r->state != TROUPE__BOARD_RUNNING) {
        troupe__strbuf_puts(sb, ", \"waits_on\": ");
        s_json_str(sb, r->wait_on);
        troupe__strbuf_puts(sb, ", \"waits_for\": ");
        s_json_str(sb, r->wait_by);
        troupe__strbuf_printf(sb, ", \"wait_rank\": %d, \"since_s\": %.6f", r->wait_rank,
                              (double)r->age_ns / 1e9);
    }
    if (r->kind == TROUPE__BOARD_TRANSPORT)
        troupe__strbuf_printf(sb,
                              ", \"collectives\": {\"issued\": %lld, \"done\": %lld, \"active\": "
                              "%lld}, \"deadline_in_s\": %.6f",
                              (long long)r->coll_issued, (long long)r->coll_done,
                              (long long)r->coll_active, (double)r->due_in_ns / 1e9);
    troupe__strbuf_putc(sb, '}');
}

void troupe__status_format_json(const troupe__status_job_t *job, const troupe__status_result_t *res,
                                int n, double elapsed_ms, const troupe__status_verdict_t *v,
                                troupe__strbuf_t *sb)
{
    int answered = s_answered_count(res, n);
    troupe__strbuf_puts(sb, "{\"job\": ");
    s_json_str(sb, job->id);
    troupe__strbuf_puts(sb, ", \"dir\": ");
    s_json_str(sb, job->dir);
    troupe__strbuf_printf(sb, ", \"size\": %d, \"answered\": %d, \"elapsed_ms\": %.3f,\n \"ranks\": [",
                          n, answered, elapsed_ms);
    for (int r = 0; r < n; r++) {
        const troupe__status_rank_info_t *ri = &job->ranks[r];
        troupe__strbuf_printf(sb, "%s\n  {\"rank\": %d, \"answered\": %s, \"pid\": %d, \"host\": ",
                              r ? "," : "", r, res[r].answered ? "true" : "false", ri->pid);
        s_json_str(sb, ri->host);
        if (!res[r].answered) {
            troupe__strbuf_puts(sb, ", \"why\": ");
            s_json_str(sb, res[r].why);
            troupe__strbuf_putc(sb, '}');
            continue;
        }
        troupe__strbuf_printf(sb, ", \"rtt_ms\": %.3f, \"actors\": [", res[r].rtt_ms);
        for (int i = 0; i < res[r].reply.head.nrecs; i++) {
            troupe__strbuf_puts(sb, i ? ",\n    " : "\n    ");
            s_json_rec(&res[r].reply.recs[i], sb);
        }
        troupe__strbuf_puts(sb, "]}");
    }
    troupe__strbuf_printf(sb, "],\n \"verdict\": {\"stalled\": %s, \"cycle\": ",
                          v->stalled ? "true" : "false");
    if (v->cycle)
        s_json_str(sb, v->path);
    else
        troupe__strbuf_puts(sb, "null");
    troupe__strbuf_puts(sb, ", \"behind\": [");
    for (int i = 0; i < v->nbehind && i < 16; i++)
        troupe__strbuf_printf(sb, "%s%d", i ? ", " : "", v->behind[i]);
    troupe__strbuf_puts(sb, "], \"collective\": ");
    s_json_str(sb, v->collective);
    troupe__strbuf_puts(sb, ", \"text\": ");
    s_json_str(sb, v->text);
    troupe__strbuf_puts(sb, "}}\n");
}

/* ---- the logged report ------------------------------------------------------------------- */

void troupe__status_log_query(const troupe__status_job_t *job, troupe__status_query_t *q,
                              const char *title)
{
    int n = 0;
    double ms = 0;
    const troupe__status_result_t *res = troupe__status_query_results(q, &n, &ms);
    troupe__status_verdict_t v;
    troupe__status_verdict(job, res, n, &v);
    troupe__strbuf_t sb = TROUPE__STRBUF_INIT;
    troupe__status_format_text(job, res, n, ms, &v, &sb);
    TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT, "%s", title);
    const char *text = troupe__strbuf_cstr(&sb);
    while (*text != '\0') {
        size_t len = strcspn(text, "\n");
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT, "  %.*s", (int)len, text);
        text += len + (text[len] == '\n');
    }
    troupe__strbuf_reset(&sb);
}

void troupe__status_log_report(const troupe__status_job_t *job, const troupe__status_self_t *self,
                               int64_t timeout_ns, const char *title)
{
    troupe__status_query_t *q = NULL;
    if (troupe__status_query_new(job, self, timeout_ns, &q) != TROUPE_OK) {
        TROUPE_LOG(TROUPE_LOG_WARN, TROUPE_SUB_TRANSPORT, "%s no report: %s", title,
                   troupe_last_error());
        return;
    }
    troupe__status_query_run(q);
    troupe__status_log_query(job, q, title);
    troupe__status_query_destroy(&q, NULL);
}
