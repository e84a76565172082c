/* troupe — the graph policy: plain launches, then one capture, then replays, per code, queue and
 * argument binding; plain for good after a failure (devices/graph_impl.h, devices/device.h). */
#define _POSIX_C_SOURCE 200809L
#include "devices/graph_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/log.h"
#include "base/status.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct s_slot {
    troupe_karg_t *args; /* the binding; NULL: an empty slot */
    size_t nargs;
    int plain_runs;
    uint64_t last_use;
    troupe_dgraph_t *graph; /* once captured */
} s_slot_t;

typedef struct s_rec {
    struct s_rec *next;
    troupe_driver_t *drv;
    troupe_dqueue_t *q;
    troupe_dcode_t *code;
    bool refused;
    unsigned evictions;
    uint64_t clock;
    s_slot_t slots[TROUPE_GRAPH_SLOTS];
} s_rec_t;

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static s_rec_t *s_recs;

static atomic_int s_mode = -1; /* -1: TROUPE_CUDA_GRAPHS not read yet */
static atomic_uint_fast64_t s_n_plain, s_captures, s_capture_failures, s_replays, s_stale,
    s_refused;

/* ---- mode and statistics ----------------------------------------------------------------- */

troupe_graphs_mode_t troupe_driver_graphs(void)
{
    int m = atomic_load(&s_mode);
    if (m >= 0)
        return (troupe_graphs_mode_t)m;
    /* base/config.c read TROUPE_CUDA_GRAPHS (and warned of a malformed value, kept auto) */
    int from_env = troupe_config_cuda_graphs_off() ? TROUPE_GRAPHS_OFF : TROUPE_GRAPHS_AUTO;
    int expected = -1; /* a concurrent troupe_driver_set_graphs wins */
    atomic_compare_exchange_strong(&s_mode, &expected, from_env);
    return (troupe_graphs_mode_t)atomic_load(&s_mode);
}

void troupe_driver_set_graphs(troupe_graphs_mode_t mode)
{
    atomic_store(&s_mode, mode == TROUPE_GRAPHS_OFF ? TROUPE_GRAPHS_OFF : TROUPE_GRAPHS_AUTO);
}

void troupe_driver_graph_stats(troupe_graph_stats_t *out)
{
    if (out == NULL)
        return;
    *out = (troupe_graph_stats_t){
        atomic_load(&s_n_plain), atomic_load(&s_captures), atomic_load(&s_capture_failures),
        atomic_load(&s_replays), atomic_load(&s_stale),    atomic_load(&s_refused)};
}

void troupe_driver_graph_stats_reset(void)
{
    atomic_store(&s_n_plain, 0);
    atomic_store(&s_captures, 0);
    atomic_store(&s_capture_failures, 0);
    atomic_store(&s_replays, 0);
    atomic_store(&s_stale, 0);
    atomic_store(&s_refused, 0);
}

/* ---- records ------------------------------------------------------------------------------ */

static bool s_same_binding(const s_slot_t *sl, const troupe_karg_t *args, size_t nargs)
{
    if (sl->args == NULL || sl->nargs != nargs)
        return false;
    for (size_t i = 0; i < nargs; i++) {
        const troupe_karg_t *a = &sl->args[i], *b = &args[i];
        if (a->kind != b->kind || a->ordinal != b->ordinal || a->value != b->value ||
            a->buf.pool_id != b->buf.pool_id || a->buf.offset != b->buf.offset ||
            a->buf.size_bytes != b->buf.size_bytes)
            return false;
    }
    return true;
}

/* Empties a slot; its graph, if any, goes to *graph_out for release outside the lock. */
static void s_slot_clear(s_slot_t *sl, troupe_dgraph_t **graph_out)
{
    *graph_out = sl->graph;
    troupe_free(sl->args);
    *sl = (s_slot_t){0};
}

/* The record of (drv, q, code), created when missing; NULL when out of memory. s_mu held. */
static s_rec_t *s_rec_locked(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code)
{
    for (s_rec_t *r = s_recs; r != NULL; r = r->next)
        if (r->drv == drv && r->q == q && r->code == code)
            return r;
    s_rec_t *r = troupe_calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->drv = drv;
    r->q = q;
    r->code = code;
    r->next = s_recs;
    s_recs = r;
    return r;
}

/* Turns r plain for good, saying why once; its graphs go to graphs[] (TROUPE_GRAPH_SLOTS). */
static void s_refuse_locked(s_rec_t *r, const char *why, troupe_dgraph_t **graphs)
{
    for (size_t i = 0; i < TROUPE_GRAPH_SLOTS; i++)
        s_slot_clear(&r->slots[i], &graphs[i]);
    if (r->refused)
        return;
    r->refused = true;
    atomic_fetch_add(&s_refused, 1);
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
               "%s graphs: plain launches from now on for this code on this queue: %s",
               troupe_driver_name(r->drv), why);
}

static void s_release_all(troupe_driver_t *drv, troupe_dgraph_t **graphs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (graphs[i] != NULL)
            drv->vt->graph_release(drv, graphs[i]);
}

/* The slot of this binding in r, taking an empty or the least recently used one (whose graph
 * goes to *evicted) when new; NULL when r was refused or memory ran out. s_mu held. */
static s_slot_t *s_slot_locked(s_rec_t *r, const troupe_karg_t *args, size_t nargs,
                               troupe_dgraph_t **evicted, troupe_dgraph_t **graphs)
{
    s_slot_t *victim = NULL;
    for (size_t i = 0; i < TROUPE_GRAPH_SLOTS; i++) {
        s_slot_t *sl = &r->slots[i];
        if (s_same_binding(sl, args, nargs))
            return sl;
        if (victim == NULL ||
            (victim->args != NULL && (sl->args == NULL || sl->last_use < victim->last_use)))
            victim = sl;
    }
    if (victim->args != NULL && ++r->evictions >= TROUPE_GRAPH_MAX_EVICTIONS) {
        char why[96];
        snprintf(why, sizeof why, "its arguments changed %u times beyond %d bindings", r->evictions,
                 TROUPE_GRAPH_SLOTS);
        s_refuse_locked(r, why, graphs);
        return NULL;
    }
    s_slot_clear(victim, evicted);
    victim->args = nargs ? troupe_malloc(nargs * sizeof *args) : troupe_malloc(1);
    if (victim->args == NULL)
        return NULL;
    if (nargs)
        memcpy(victim->args, args, nargs * sizeof *args);
    victim->nargs = nargs;
    return victim;
}

/* ---- launching ------------------------------------------------------------------------------ */

static troupe_status_t s_plain(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                               const troupe_karg_t *args, size_t nargs)
{
    atomic_fetch_add(&s_n_plain, 1);
    return drv->vt->launch(drv, q, code, args, nargs);
}

/* A failed capture or graph launch: r turns plain, this launch runs plainly. */
static troupe_status_t s_give_up(s_rec_t *r, const char *what, troupe_status_t st,
                                 const troupe_karg_t *args, size_t nargs)
{
    char why[1200];
    snprintf(why, sizeof why, "%s failed (%s): %s", what, troupe_status_str(st),
             troupe_last_error());
    troupe_dgraph_t *graphs[TROUPE_GRAPH_SLOTS];
    pthread_mutex_lock(&s_mu);
    s_refuse_locked(r, why, graphs);
    pthread_mutex_unlock(&s_mu);
    s_release_all(r->drv, graphs, TROUPE_GRAPH_SLOTS);
    troupe_clear_error();
    return s_plain(r->drv, r->q, r->code, args, nargs);
}

troupe_status_t troupe__graph_run(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                                  const troupe_karg_t *args, size_t nargs)
{
    if (troupe_driver_graphs() == TROUPE_GRAPHS_OFF || (nargs > 0 && args == NULL))
        return s_plain(drv, q, code, args, nargs);
    troupe_dgraph_t *evicted = NULL, *graphs[TROUPE_GRAPH_SLOTS] = {0};
    enum { S_PLAIN, S_CAPTURE, S_REPLAY } action = S_PLAIN;
    pthread_mutex_lock(&s_mu);
    s_rec_t *r = s_rec_locked(drv, q, code);
    s_slot_t *sl =
        r != NULL && !r->refused ? s_slot_locked(r, args, nargs, &evicted, graphs) : NULL;
    troupe_dgraph_t *g = NULL;
    if (sl != NULL) {
        sl->last_use = ++r->clock;
        if (sl->graph != NULL) {
            action = S_REPLAY;
            g = sl->graph;
            r->evictions = 0; /* a binding came back: the churn so far was no steady state */
        } else if (sl->plain_runs >= TROUPE_GRAPH_WARMUP_RUNS) {
            action = S_CAPTURE;
        } else {
            sl->plain_runs++;
        }
    }
    pthread_mutex_unlock(&s_mu);
    s_release_all(drv, &evicted, 1);
    s_release_all(drv, graphs, TROUPE_GRAPH_SLOTS);
    if (action == S_PLAIN) {
        troupe_status_t pst = s_plain(drv, q, code, args, nargs);
        if (pst != TROUPE_OK && sl != NULL) { /* a refused launch is no warm-up */
            pthread_mutex_lock(&s_mu);
            sl->plain_runs = 0;
            pthread_mutex_unlock(&s_mu);
        }
        return pst;
    }
    troupe_status_t st;
    if (action == S_CAPTURE) {
        atomic_fetch_add(&s_captures, 1);
        st = drv->vt->graph_capture(drv, q, code, args, nargs, &g);
        if (st == TROUPE_OK && g == NULL)
            st = troupe__error(TROUPE_INTERNAL, "%s graph_capture returned no graph",
                               troupe_driver_name(drv));
        if (st != TROUPE_OK) {
            /* UNAVAILABLE: the driver does not capture this code by design (the cuda driver's
             * checked gather products wait on the host): plain launches, no failure */
            if (st != TROUPE_UNAVAILABLE)
                atomic_fetch_add(&s_capture_failures, 1);
            return s_give_up(r, st == TROUPE_UNAVAILABLE ? "not capturable" : "capture", st, args,
                             nargs);
        }
        pthread_mutex_lock(&s_mu);
        sl->graph = g;
        pthread_mutex_unlock(&s_mu);
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES,
                   "%s graphs: captured a launch after %d plain ones (%zu arguments)",
                   troupe_driver_name(drv), TROUPE_GRAPH_WARMUP_RUNS, nargs);
    }
    st = drv->vt->graph_launch(drv, q, g, args, nargs);
    if (st == TROUPE_OK) {
        atomic_fetch_add(&s_replays, 1);
        return TROUPE_OK;
    }
    if (st != TROUPE_UNAVAILABLE)
        return s_give_up(r, "graph launch", st, args, nargs);
    /* Stale (an address or setting changed under the same binding): capture it again later. */
    atomic_fetch_add(&s_stale, 1);
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES, "%s graphs: a graph went stale (%s)",
               troupe_driver_name(drv), troupe_last_error());
    pthread_mutex_lock(&s_mu);
    sl->graph = NULL;
    sl->plain_runs = 0;
    pthread_mutex_unlock(&s_mu);
    s_release_all(drv, &g, 1);
    troupe_clear_error();
    return s_plain(drv, q, code, args, nargs);
}

void troupe__graph_forget(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code)
{
    for (;;) {
        s_rec_t *r = NULL;
        pthread_mutex_lock(&s_mu);
        for (s_rec_t **p = &s_recs; *p != NULL; p = &(*p)->next) {
            if ((*p)->drv == drv && (q == NULL || (*p)->q == q) &&
                (code == NULL || (*p)->code == code)) {
                r = *p;
                *p = r->next;
                break;
            }
        }
        troupe_dgraph_t *graphs[TROUPE_GRAPH_SLOTS] = {0};
        if (r != NULL)
            for (size_t i = 0; i < TROUPE_GRAPH_SLOTS; i++)
                s_slot_clear(&r->slots[i], &graphs[i]);
        pthread_mutex_unlock(&s_mu);
        if (r == NULL)
            return;
        s_release_all(drv, graphs, TROUPE_GRAPH_SLOTS);
        troupe_free(r);
    }
}
