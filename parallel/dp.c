/* troupe — the data-parallel driver (parallel/dp.h; docs/architecture.md §5; OCANNL_NOTES §7.1 for the
 * stream pairing of the tree merge).
 *
 * Layout on each local stream k (a chain of contexts, each a child of the previous one):
 *   root -> init_from_host_packed(params, one pool in the gradients' order) -> init_from_host(inputs)
 *   [-> link(feed)] -> link(grad segment 0) [-> link(grad segment 1) ...] [-> link(merge_i)]
 * and on the owner stream 0, after those: -> init_from_host_packed(state m) [->
 * init_from_host_packed(state v)] -> init_from_host(hyper)
 * -> for each staging node j: init_from_host(hyper stage j) -> link(hyper := stage j)
 * -> link(optimizer). Every routine is compiled once and linked once per stream in
 * troupe_dp_new; a step only binds the batch index (on the feed routine in the fed form,
 * which then runs just before the gradient routine), schedules runs and transfers.
 *
 * Merge routines read the gradient through the stream's merge buffer (`g =+ g.merge`); they
 * are linked against the untagged context (the static link check only rejects a context tagged
 * with another node) and each run follows a COPY device_to_device of that gradient, which the
 * run-time check verifies.
 *
 * Cross-rank fast path: with one rank (or local_only) the allreduce is skipped: the mean over
 * one rank is the identity. With several ranks a step issues one fused allreduce (sum) of all
 * gradients after the local merges, or with the gradient routine split into segments
 * (parallel/dp.h, Overlap; dp_split.c) one per segment's bucket as soon as that segment and
 * its merges are done; the optimizer waits for all and scales by 1 / (N * R).
 *
 * Host cost per step: hyper-parameters are uploaded only when they changed, through a ring of
 * staging nodes so that the host write never waits for the previous step's upload.
 */
#include "parallel/dp_impl.h"

#include "base/config.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/fault_impl.h"
#include "base/log.h"
#include "base/trace_impl.h"
#include "base/vec.h"
#include "devices/device.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The environment variables this layer reads (base/config.h registry; docs/configuration.md). */
static const troupe_config_var_t s_env_vars[] = {
    {"TROUPE_DP_OVERLAP", "parallel", "choice", "auto", "auto|on|off",
     "troupe_config_set_dp_overlap",
     "overlap each gradient bucket's allreduce with the backward pass"},
    {"TROUPE_DP_FUSED_UPDATE", "parallel", "choice", "auto", "auto|off",
     "troupe_config_set_dp_fused_update",
     "reduce-scatter, update a share, allgather the parameters"},
    {"TROUPE_RESUME", "parallel", "path", "none", "-", "troupe_config_set_resume",
     "set by troupe run: the checkpoint to resume from"},
    {"TROUPE_PROGRESS_FILE", "parallel", "path", "none", "-", "troupe_config_set_progress_file",
     "set by troupe run: where rank 0 keeps its step count"},
};
TROUPE_CONFIG_VARS(parallel, s_env_vars)

/* Most local replicas accepted (a sanity bound on a config value). */
#define S_MAX_STREAMS 4096

/* ---- small helpers -------------------------------------------------------------------------- */

static troupe_status_t s_plan_fused(troupe_dp_t *dp);

static void s_name(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    troupe_tnode_debug_name(tn, buf, cap);
}

static void s_dims(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    troupe_tnode_dims_to_string(tn, false, buf, cap);
}

/* Re-records `st` with "<prefix>: <the current last error>". */
static troupe_status_t s_wrap(troupe_status_t st, const char *prefix)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", troupe_last_error());
    return troupe__error(st, "%s: %s", prefix, msg);
}

troupe_status_t troupe__dp_sync_event(troupe_event_t **ev_p, const char *what)
{
    troupe_status_t st = TROUPE_OK;
    if (*ev_p)
        st = troupe_event_sync(*ev_p, troupe_config_timeout_ns());
    troupe_event_release(ev_p);
    if (st != TROUPE_OK)
        return s_wrap(st, what);
    return TROUPE_OK;
}

/* Adopts the caller's reference to ctx as replica r's new last context. */
static troupe_status_t s_push(troupe__dp_replica_t *r, troupe_context_t *ctx)
{
    if (!TROUPE__VEC_PUSH(r->ctxs, r->nctxs, r->ctxs_cap, ctx)) {
        troupe_context_release(&ctx);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    }
    return TROUPE_OK;
}

static troupe_context_t *s_tail(troupe__dp_replica_t *r)
{
    return r->nctxs ? r->ctxs[r->nctxs - 1] : NULL;
}

troupe_context_t *troupe__dp_tail(troupe_dp_t *dp, int k)
{
    return s_tail(&dp->rep[k]);
}

/* Links code on replica r's last context; the routine's context becomes the last one. */
static troupe_status_t s_link(troupe__dp_replica_t *r, troupe_code_t *code, troupe_routine_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_link(s_tail(r), code, out));
    troupe_context_t *c = troupe_routine_context(*out);
    troupe_context_retain(c);
    return s_push(r, c);
}

/* init_from_host of tn on replica r's last context. */
static troupe_status_t s_upload(troupe__dp_replica_t *r, troupe_tnode_t *tn)
{
    troupe_context_t *c = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_init_from_host(s_tail(r), tn, &c, NULL));
    return s_push(r, c);
}

/* The parameter index of grads_by_id[j] (a permutation of grads: always found). */
static size_t s_param_of(const troupe_dp_t *dp, size_t j)
{
    size_t i = 0;
    while (i + 1 < dp->n_params && dp->grads[i] != dp->grads_by_id[j])
        i++;
    return i;
}

/* Uploads, into one pool on r (troupe_init_from_host_packed), the node of each parameter
 * (per_param[i * stride + at] for parameter i) in the order of the gradients (grads_by_id):
 * each the size of its gradient, they lie as the gradients do in the gradient routine's pool,
 * which the fused update needs (Fused update). `what` prefixes an error. */
static troupe_status_t s_upload_by_grad(troupe_dp_t *dp, troupe__dp_replica_t *r,
                                        troupe_tnode_t *const *per_param, size_t stride,
                                        size_t at, const char *what)
{
    troupe_tnode_t **by_grad = troupe_calloc(dp->n_params, sizeof *by_grad);
    if (by_grad == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    for (size_t j = 0; j < dp->n_params; j++)
        by_grad[j] = per_param[s_param_of(dp, j) * stride + at];
    troupe_context_t *c = NULL;
    troupe_status_t st = troupe_init_from_host_packed(s_tail(r), dp->n_params, by_grad, &c);
    troupe_free(by_grad);
    if (st == TROUPE_OK)
        st = s_push(r, c);
    return st == TROUPE_OK ? TROUPE_OK : s_wrap(st, what);
}

troupe_status_t troupe__dp_await(troupe_dp_t *dp, const char *what)
{
    for (int k = 0; k < dp->n; k++) {
        troupe_status_t st = troupe_stream_await(dp->rep[k].stream, troupe_config_timeout_ns());
        if (st != TROUPE_OK) {
            /* a stream cancelled because another failed first (the pass across the streams
             * gives up when a stream drops its part): name the one that failed first */
            if (st == TROUPE_CANCELLED) {
                char mine[1024];
                snprintf(mine, sizeof mine, "%s", troupe_last_error());
                int root = -1;
                for (int j = 0; j < dp->n && root < 0; j++) {
                    troupe_status_t sj = j != k ? troupe_stream_status(dp->rep[j].stream)
                                                : TROUPE_OK;
                    if (sj != TROUPE_OK && sj != TROUPE_CANCELLED) { /* its message is set */
                        st = sj;
                        root = j;
                    }
                }
                if (root >= 0)
                    k = root;
                else /* another stream's status replaced this one's message */
                    st = troupe__error(st, "%s", mine);
            }
            char prefix[160];
            snprintf(prefix, sizeof prefix, "%s: replica %d (stream %s)", what, k,
                     troupe_stream_name(dp->rep[k].stream));
            return s_wrap(st, prefix);
        }
    }
    return TROUPE_OK;
}

/* ---- validation ----------------------------------------------------------------------------- */

/* A feed writes the minibatch's nodes only: never a parameter, a gradient or the loss (which
 * it would overwrite on every replica behind the optimizer's back). */
static troupe_status_t s_check_feed_nodes(const troupe_dp_model_t *m)
{
    if (!m->feed_comp)
        return TROUPE_OK;
    for (size_t i = 0; i < 2 * m->n_params + 1; i++) {
        const char *what = i < m->n_params       ? "parameter"
                           : i < 2 * m->n_params ? "gradient"
                                                 : "loss";
        troupe_tnode_t *tn = i < m->n_params       ? m->params[i]
                             : i < 2 * m->n_params ? m->grads[i - m->n_params]
                                                   : m->loss;
        if (tn && troupe_asgn_comp_node_index(m->feed_comp, tn) != SIZE_MAX) {
            char nm[64];
            s_name(tn, nm, sizeof nm);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: feed_comp mentions the %s %s: a feed only writes the "
                                 "minibatch's nodes that grad_comp reads",
                                 what, nm);
        }
    }
    return TROUPE_OK;
}

static troupe_status_t s_check_model(const troupe_dp_config_t *cfg, const troupe_dp_model_t *m)
{
    if (!cfg)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: NULL config");
    if (!m)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: NULL model");
    if (!m->grad_comp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: the model has no grad_comp");
    if (!m->batch_index)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: the model has no batch_index");
    if (m->n_params == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: n_params is 0: nothing to train");
    if (!m->params || !m->grads)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: NULL %s with n_params = %zu",
                             !m->params ? "params" : "grads", m->n_params);
    if (m->n_inputs > 0 && !m->inputs)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: NULL inputs with n_inputs = %zu",
                             m->n_inputs);
    if (cfg->n_devices < 0 || cfg->n_devices > TROUPE_DP_MAX_DEVICES ||
        (cfg->n_devices > 0 && !cfg->devices))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: n_devices = %d with devices %s: expected 0 to %d entries",
                             cfg->n_devices, cfg->devices ? "set" : "NULL", TROUPE_DP_MAX_DEVICES);
    if (cfg->streams > S_MAX_STREAMS)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: streams = %d exceeds the limit of %d local replicas",
                             cfg->streams, S_MAX_STREAMS);
    /* the comp whose static index selects the minibatch: the feed's, else grad_comp's */
    const troupe_asgn_comp_t *sel = m->feed_comp ? m->feed_comp : m->grad_comp;
    const char *sel_name = m->feed_comp ? "feed_comp" : "grad_comp";
    if (m->feed_comp == m->grad_comp)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: feed_comp is grad_comp: the feed is a computation of its "
                             "own that writes the minibatch's nodes");
    int32_t sym = troupe_asgn_comp_find_static_symbol(sel, m->batch_index);
    if (sym < 0) {
        char have[256] = "";
        size_t used = 0;
        for (int32_t s = 0; s < sel->nsyms && used < sizeof have; s++)
            used += (size_t)snprintf(have + used, sizeof have - used, "%s%s", s ? ", " : "",
                                     sel->syms[s].name);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: batch_index '%s' is not a static index of %s "
                             "(its static indices: %s)",
                             m->batch_index, sel_name, sel->nsyms ? have : "none");
    }
    if (m->feed_comp && troupe_asgn_comp_find_static_symbol(m->grad_comp, m->batch_index) >= 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: grad_comp has the static index batch_index '%s' although a "
                             "feed_comp is given: with a feed, the feed selects the minibatch and "
                             "grad_comp reads the fed nodes (drop the index from grad_comp, or "
                             "give no feed_comp)",
                             m->batch_index);
    TROUPE_RETURN_IF_ERROR(s_check_feed_nodes(m));
    if (m->num_batches <= 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: num_batches = %lld must be > 0",
                             (long long)m->num_batches);
    int64_t range = sel->syms[sym].range;
    if (range > 0 && m->num_batches > range)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: num_batches = %lld exceeds the range %lld of batch_index "
                             "'%s'",
                             (long long)m->num_batches, (long long)range, m->batch_index);
    char n1[64], n2[64], d1[64], d2[64];
    for (size_t i = 0; i < m->n_params; i++) {
        troupe_tnode_t *p = m->params[i], *g = m->grads[i];
        if (!p || !g)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: %s[%zu] is NULL",
                                 !p ? "params" : "grads", i);
        s_name(p, n1, sizeof n1);
        s_name(g, n2, sizeof n2);
        if (p == g)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: grads[%zu] is the parameter %s itself", i, n1);
        for (size_t j = 0; j < i; j++) {
            if (m->params[j] == p || m->grads[j] == g || m->params[j] == g || m->grads[j] == p)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "dp_new: entries %zu and %zu of params/grads share a node "
                                     "(%s or %s)",
                                     j, i, n1, n2);
        }
        if (!troupe_prec_is_float(p->prec))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: params[%zu] %s has precision %s: only floating-point "
                                 "parameters are trained",
                                 i, n1, troupe_prec_name(p->prec));
        if (g->prec != p->prec)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: grads[%zu] %s has precision %s but params[%zu] %s has "
                                 "%s",
                                 i, n2, troupe_prec_name(g->prec), i, n1,
                                 troupe_prec_name(p->prec));
        bool same = g->ndims == p->ndims;
        for (int a = 0; same && a < p->ndims; a++)
            same = g->dims[a] == p->dims[a];
        if (!same) {
            s_dims(p, d1, sizeof d1);
            s_dims(g, d2, sizeof d2);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: grads[%zu] %s has dims %s but params[%zu] %s has dims "
                                 "%s",
                                 i, n2, d2, i, n1, d1);
        }
    }
    if (m->loss && troupe_tnode_num_elems(m->loss) != 1) {
        s_name(m->loss, n1, sizeof n1);
        s_dims(m->loss, d1, sizeof d1);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: loss %s has dims %s: it must be a scalar", n1, d1);
    }
    for (size_t i = 0; i < m->n_inputs; i++)
        if (!m->inputs[i])
            return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: inputs[%zu] is NULL", i);
    return troupe__dp_check_optimizer(&cfg->optimizer);
}

/* ---- construction --------------------------------------------------------------------------- */

static troupe_status_t s_new_hosted(const char *label, const char *suffix, troupe_prec_t prec,
                                    int ndims, const int64_t *dims, troupe_tnode_t **out)
{
    char text[160];
    snprintf(text, sizeof text, "%s%s%s", label, suffix ? "_" : "", suffix ? suffix : "");
    const char *l[1] = {text};
    TROUPE_RETURN_IF_ERROR(troupe_tnode_new(l, 1, prec, ndims, dims, NULL, 0.0, out));
    size_t n = (size_t)troupe_tnode_num_elems(*out);
    double *zeros = troupe_calloc(n, sizeof *zeros);
    if (!zeros) {
        troupe_tnode_release(out);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    }
    troupe_status_t st = troupe_tnode_set_values(*out, zeros, n);
    troupe_free(zeros);
    if (st != TROUPE_OK)
        troupe_tnode_release(out);
    return st;
}

static troupe_status_t s_open(troupe_dp_t *dp, const troupe_dp_config_t *cfg)
{
    TROUPE_RETURN_IF_ERROR(
        troupe_backend_open(cfg->backend, TROUPE_MOST_PARALLEL_STREAMS, &dp->backend));
    int ndev = 0;
    TROUPE_RETURN_IF_ERROR(troupe_num_devices(dp->backend, &ndev));
    if (ndev <= 0)
        return troupe__error(TROUPE_FAILED_PRECONDITION, "dp_new: backend %s has no device",
                             troupe_backend_name(dp->backend));
    /* this rank's devices: the config's, else TROUPE_DEVICE or the local rank's share */
    troupe_dp_devices_t dv;
    memset(&dv, 0, sizeof dv);
    if (cfg->n_devices > 0) {
        for (int i = 0; i < cfg->n_devices; i++) {
            int o = cfg->devices[i];
            if (o < 0 || o >= ndev)
                return troupe__error(TROUPE_NOT_FOUND,
                                     "dp_new: devices[%d] = %d: backend %s has no device %d (it "
                                     "has %d)",
                                     i, o, troupe_backend_name(dp->backend), o, ndev);
            for (int j = 0; j < i; j++)
                if (cfg->devices[j] == o)
                    return troupe__error(TROUPE_INVALID_ARGUMENT,
                                         "dp_new: device %d is listed twice (devices[%d] and "
                                         "devices[%d])",
                                         o, j, i);
            dv.ordinals[dv.n++] = o;
        }
    } else {
        TROUPE_RETURN_IF_ERROR(troupe_dp_pick_devices(dp->backend, &dv));
    }
    int n = cfg->streams;
    if (n <= 0) {
        TROUPE_RETURN_IF_ERROR(
            troupe__dp_suggested_streams_on(dp->backend, dv.ordinals, dv.n, dv.from_env, &n));
        if (n > S_MAX_STREAMS)
            n = S_MAX_STREAMS;
    }
    dp->n = n;
    dp->rep = troupe_calloc((size_t)n, sizeof *dp->rep);
    dp->dev_of = troupe_calloc((size_t)n, sizeof *dp->dev_of);
    if (!dp->rep || !dp->dev_of)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    /* consecutive replicas on one device, so the first merge rounds stay on a device */
    int per_dev = (n + dv.n - 1) / dv.n;
    for (int k = 0; k < n; k++) {
        troupe__dp_replica_t *r = &dp->rep[k];
        troupe_device_t *d = NULL;
        dp->dev_of[k] = dv.ordinals[k / per_dev];
        TROUPE_RETURN_IF_ERROR(troupe_get_device(dp->backend, dp->dev_of[k], &d));
        TROUPE_RETURN_IF_ERROR(troupe_new_stream(d, &r->stream));
        troupe_context_t *root = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_context_new(r->stream, &root));
        TROUPE_RETURN_IF_ERROR(s_push(r, root));
        r->merge = troupe_calloc(dp->n_params, sizeof *r->merge);
        if (!r->merge)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    }
    return TROUPE_OK;
}

/* qsort order of node pointers by node id. */
static int s_by_id(const void *a, const void *b)
{
    int32_t x = (*(troupe_tnode_t *const *)a)->id, y = (*(troupe_tnode_t *const *)b)->id;
    return (x > y) - (x < y);
}

static troupe_status_t s_copy_model(troupe_dp_t *dp, const troupe_dp_model_t *m)
{
    dp->n_params = m->n_params;
    dp->params = troupe_calloc(m->n_params, sizeof *dp->params);
    dp->grads = troupe_calloc(m->n_params, sizeof *dp->grads);
    dp->grads_by_id = troupe_calloc(m->n_params, sizeof *dp->grads_by_id);
    dp->batch_index = troupe_strdup(m->batch_index);
    if (!dp->params || !dp->grads || !dp->grads_by_id || !dp->batch_index)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    for (size_t i = 0; i < m->n_params; i++) {
        troupe_tnode_retain(m->params[i]);
        dp->params[i] = m->params[i];
        troupe_tnode_retain(m->grads[i]);
        dp->grads[i] = m->grads[i];
        dp->grads_by_id[i] = m->grads[i];
    }
    qsort(dp->grads_by_id, m->n_params, sizeof *dp->grads_by_id, s_by_id);
    if (m->loss) {
        troupe_tnode_retain(m->loss);
        dp->loss = m->loss;
        /* the loss is read back per replica with to_host: it must be hosted */
        void *host = NULL;
        troupe_status_t st = troupe_tnode_host_array(dp->loss, &host);
        if (st != TROUPE_OK)
            return s_wrap(st, "dp_new: the loss node cannot be hosted");
    }
    dp->num_batches = m->num_batches;
    return TROUPE_OK;
}

/* ---- the cross-rank exchange through host memory (troupe_dp_config_t.stage_through_host) --- */

/* Every gradient must have a host array to stage through. */
static troupe_status_t s_check_stageable(troupe_dp_t *dp)
{
    for (size_t i = 0; i < dp->n_params; i++) {
        void *host = NULL;
        troupe_status_t st = troupe_tnode_host_array(dp->grads[i], &host);
        if (st != TROUPE_OK) {
            char nm[64], prefix[320];
            s_name(dp->grads[i], nm, sizeof nm);
            snprintf(prefix, sizeof prefix,
                     "dp_new: the gradient %s cannot be staged through host memory for the "
                     "allreduce across ranks (backend %s%s)",
                     nm, troupe_backend_name(dp->backend),
                     troupe_backend_host_addressable(dp->backend)
                         ? ", stage_through_host set"
                         : ": its arrays are not host-addressable");
            return s_wrap(st == TROUPE_FAILED_PRECONDITION ? TROUPE_INVALID_ARGUMENT : st, prefix);
        }
    }
    return TROUPE_OK;
}

/* A host-level collective's tensors: nodes[i]'s host arrays (troupe_free the result). */
static troupe_status_t s_host_tensors(troupe_tnode_t *const *nodes, size_t n,
                                      troupe_coll_tensor_t **out)
{
    troupe_coll_tensor_t *t = troupe_calloc(n, sizeof *t);
    if (!t)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    for (size_t i = 0; i < n; i++) {
        void *host = NULL;
        troupe_status_t st = troupe_tnode_host_array(nodes[i], &host);
        if (st != TROUPE_OK) {
            troupe_free(t);
            return st;
        }
        t[i] = troupe_coll_tensor_of(nodes[i], host);
    }
    *out = t;
    return TROUPE_OK;
}

/* dp_new's broadcast through host memory: the parameters' host arrays (which every replica
 * was just initialised from) from rank 0 to every rank, then uploaded to every replica. */
static troupe_status_t s_broadcast_staged(troupe_dp_t *dp)
{
    troupe_coll_tensor_t *t = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__dp_await(dp, "dp_new")); /* the uploads read the host arrays */
    TROUPE_RETURN_IF_ERROR(s_host_tensors(dp->params, dp->n_params, &t));
    troupe_event_t *ev = NULL;
    const char *phase = troupe_trace_set_phase("dp.params");
    troupe_status_t st = troupe_broadcast(t, dp->n_params, 0, &ev);
    troupe_trace_set_phase(phase);
    troupe_free(t);
    TROUPE_RETURN_IF_ERROR(st);
    TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(&ev, "dp_new: broadcasting the parameters"));
    for (int k = 0; k < dp->n; k++)
        for (size_t i = 0; i < dp->n_params; i++)
            TROUPE_RETURN_IF_ERROR(troupe_from_host(s_tail(&dp->rep[k]), dp->params[i], NULL));
    return TROUPE_OK;
}

const char *troupe__dp_exchange_name(int exchange)
{
    switch (exchange) {
    case TROUPE__DP_EXCHANGE_INPLACE:
        return "in-place";
    case TROUPE__DP_EXCHANGE_STAGED:
        return "staged";
    case TROUPE__DP_EXCHANGE_DIRECT:
        return "direct";
    default:
        return "none";
    }
}

troupe__dp_exchange_t troupe__dp_choose_exchange(int nranks, bool device_memory, bool lendable,
                                                 bool cuda_aware)
{
    if (nranks <= 1)
        return TROUPE__DP_EXCHANGE_NONE;
    if (!device_memory)
        return TROUPE__DP_EXCHANGE_INPLACE;
    /* CUDA-aware MPI takes device pointers, but the arrays reach the transport through a lend,
     * which needs a backend that can hand out its arrays' addresses (actors/lend.h): a host
     * backend standing for device memory can; the cuda backend cannot yet, so it stages. */
    if (cuda_aware && lendable)
        return TROUPE__DP_EXCHANGE_DIRECT;
    return TROUPE__DP_EXCHANGE_STAGED;
}

/* The staged exchange's buckets: the gradients in grads_by_id's order (the request order of
 * the in-place path), cut greedily so that a bucket holds at most troupe_config_fusion_bytes()
 * (a larger gradient alone), and at every segment's start (Overlap). Every rank builds the same
 * model, so the cut is the same on every rank; each bucket's allreduce fingerprints its tensors
 * and the fusion size, so ranks that cut otherwise fail with FAILED_PRECONDITION instead of
 * mixing values. */
static troupe_status_t s_plan_buckets(troupe_dp_t *dp)
{
    size_t cap = troupe_config_fusion_bytes();
    dp->bk_first = troupe_calloc(dp->n_params + 1, sizeof *dp->bk_first);
    dp->seg_bk = troupe_calloc(dp->nseg + 1, sizeof *dp->seg_bk);
    if (dp->bk_first == NULL || dp->seg_bk == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    size_t nb = 0, bytes = 0, g = 0;
    for (size_t i = 0; i < dp->n_params; i++) {
        const troupe_tnode_t *g_i = dp->grads_by_id[i];
        size_t sz = (size_t)troupe_tnode_num_elems(g_i) * troupe_prec_size_bytes(g_i->prec);
        bool seg_start = i == dp->seg_first[g];
        if (seg_start || bytes + sz > cap) {
            while (seg_start && g < dp->nseg && dp->seg_first[g] == i)
                dp->seg_bk[g++] = nb;
            dp->bk_first[nb++] = i;
            bytes = 0;
        }
        bytes += sz;
    }
    dp->bk_first[nb] = dp->n_params;
    for (; g <= dp->nseg; g++)
        dp->seg_bk[g] = nb;
    dp->nbk = nb;
    return TROUPE_OK;
}

/* A step's cross-rank exchange, issued segment by segment (s_exchange_out) and waited for
 * before the optimizer (s_exchange_back). `done`: one event per request (in place: per
 * segment; staged: per bucket); staged: `after` the gradients' to_host events (grads_by_id's
 * order; their host tensors are dp->host_t, built once by troupe_dp_new); `arg` the step's
 * fused update (parallel/dp.h, Fused update). */
typedef struct s_exchange {
    troupe_event_t **done;
    size_t ndone;
    troupe_event_t **after;
    troupe__dp_apply_arg_t arg; /* dp->fused: the step's update (copied into its request) */
} s_exchange_t;

static void s_exchange_free(troupe_dp_t *dp, s_exchange_t *x)
{
    for (size_t i = 0; x->after != NULL && i < dp->n_params; i++)
        troupe_event_release(&x->after[i]);
    for (size_t b = 0; x->done != NULL && b < x->ndone; b++)
        troupe_event_release(&x->done[b]);
    troupe_free(x->after);
    troupe_free(x->done);
    memset(x, 0, sizeof *x);
}

static troupe_status_t s_exchange_new(troupe_dp_t *dp, s_exchange_t *x)
{
    memset(x, 0, sizeof *x);
    if (dp->nranks <= 1)
        return TROUPE_OK;
    x->ndone = dp->staged ? dp->nbk : dp->nseg;
    x->done = troupe_calloc(x->ndone, sizeof *x->done);
    if (dp->staged)
        x->after = troupe_calloc(dp->n_params, sizeof *x->after);
    if (x->done == NULL || (dp->staged && x->after == NULL)) {
        s_exchange_free(dp, x);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_step: out of memory");
    }
    return TROUPE_OK;
}

/* dp->fused's update with argument *arg: the parameters and, private to each rank's chunk,
 * their optimizer state as side arrays (dp->fused_side). */
static troupe_coll_apply_t s_fused_apply(const troupe_dp_t *dp, const troupe__dp_apply_arg_t *arg)
{
    return (troupe_coll_apply_t){.fn = troupe__dp_apply,
                                 .arg = arg,
                                 .arg_bytes = sizeof *arg,
                                 .id = troupe__dp_apply_id(dp),
                                 .n_side = 1 + (size_t)dp->nstate,
                                 .n_private = (size_t)dp->nstate,
                                 .side = dp->fused_side};
}

troupe_status_t troupe__dp_unshard(troupe_dp_t *dp)
{
    if (!dp->fused || dp->nranks <= 1 || dp->nstate == 0)
        return TROUPE_OK;
    troupe__dp_apply_arg_t arg;
    memset(&arg, 0, sizeof arg); /* not run: the request only gathers */
    troupe_coll_apply_t apply = s_fused_apply(dp, &arg);
    troupe_allreduce_args_t ar = {
        .op = TROUPE_REDUCE_SUM,
        .flags = dp->coll_flags | TROUPE_COLL_UNSHARD,
        .n = dp->seg_first[1] - dp->seg_first[0], /* fused: one segment, every gradient */
        .ctx = s_tail(&dp->rep[0]),
        .nodes = dp->grads_by_id + dp->seg_first[0],
        .apply = &apply,
    };
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_allreduce(&ar, &ev));
    return troupe__dp_sync_event(&ev, "dp_save: gathering the sharded optimizer state");
}

/* Segment g's bucket(s), once the owner stream holds their sums over the local replicas
 * (`ready`: the owner stream's last event before, for the breakdown). In place: one
 * device-level allreduce (sum) of the segment's gradients, which form one span of the
 * segment's pool when nothing else lies between them (node-id order, the order the linked
 * routine packs its arrays in: actors/routine.h), so the transport reduces them in place, cut
 * into fusion buckets of troupe_config_fusion_bytes() (Horovod's tensor fusion; collective.h).
 * The owner stream goes on with the next segment while the transport reduces
 * (TROUPE_COLL_DEFERRED); the last segment's allreduce starts lazily: the owner stream waits
 * for it next and runs it itself (TROUPE_COLL_LAZY). Staged (through host memory, pipelined
 * without host waits): per bucket, the owner stream copies its gradients to their host arrays
 * (to_host) and a host-level allreduce of them is issued that the transport starts as soon as
 * those copies completed (troupe_allreduce_args_t.after), so bucket b is reduced while the
 * stream copies bucket b+1 or computes the next segment. The sums are those of the in-place
 * path (the same tensors, summed alike: parallel/dp.h). The collective sums: the optimizer's
 * 1 / (N * R) scale makes it the mean without a division pass in the transport. */
static troupe_status_t s_exchange_out(troupe_dp_t *dp, s_exchange_t *x, size_t g,
                                      troupe_event_t *ready, troupe__dp_steplog_t *rec)
{
    if (dp->nranks <= 1)
        return TROUPE_OK;
    troupe_context_t *c0 = s_tail(&dp->rep[0]);
    troupe_status_t st = TROUPE_OK;
    const char *phase = troupe_trace_set_phase("dp.gradients");
    if (!dp->staged && dp->seg_first[g + 1] > dp->seg_first[g]) { /* a bucket of 1 or more */
        bool last = g + 1 == dp->nseg;
        troupe_allreduce_args_t ar = {
            .op = TROUPE_REDUCE_SUM,
            .flags = dp->coll_flags | TROUPE_COLL_DEFERRED | (last ? TROUPE_COLL_LAZY : 0u),
            .n = dp->seg_first[g + 1] - dp->seg_first[g],
            .ctx = c0,
            .nodes = dp->grads_by_id + dp->seg_first[g],
        };
        /* the optimizer step of this step fused into it (one segment: every gradient) */
        troupe_coll_apply_t apply;
        if (dp->fused) {
            apply = s_fused_apply(dp, &x->arg);
            ar.apply = &apply;
        }
        st = troupe_allreduce(&ar, &x->done[g]);
        troupe__dp_steplog_bucket(rec, g, 0, ready);
        troupe__dp_steplog_bucket(rec, g, 1, x->done[g]); /* before the stream's wait subscribes */
    }
    for (size_t b = dp->staged ? dp->seg_bk[g] : 0; dp->staged && b < dp->seg_bk[g + 1] &&
                                                    st == TROUPE_OK;
         b++) {
        size_t first = dp->bk_first[b], cnt = dp->bk_first[b + 1] - first;
        for (size_t i = 0; i < cnt && st == TROUPE_OK; i++)
            st = troupe_to_host(c0, dp->grads_by_id[first + i], &x->after[first + i]);
        if (st != TROUPE_OK)
            break;
        troupe__dp_steplog_bucket(rec, b, 0, x->after[first + cnt - 1]);
        troupe_allreduce_args_t ar = {.op = TROUPE_REDUCE_SUM,
                                      .flags = dp->coll_flags,
                                      .n = cnt,
                                      .tensors = dp->host_t + first,
                                      .after = x->after + first,
                                      .n_after = cnt};
        st = troupe_allreduce(&ar, &x->done[b]);
        troupe__dp_steplog_bucket(rec, b, 1, x->done[b]);
    }
    troupe_trace_set_phase(phase);
    return st;
}

/* The owner stream waits for every request, in order; staged: it copies each bucket's sums
 * back (from_host) once its allreduce completed, which overlaps the later buckets' reductions. */
static troupe_status_t s_exchange_back(troupe_dp_t *dp, s_exchange_t *x, troupe__dp_steplog_t *rec)
{
    troupe_context_t *c0 = s_tail(&dp->rep[0]);
    troupe_status_t st = TROUPE_OK;
    for (size_t b = 0; b < x->ndone && st == TROUPE_OK; b++) {
        if (x->done[b] == NULL)
            continue; /* a segment without gradients issued nothing */
        st = troupe_will_wait_for(c0, x->done[b]);
        for (size_t i = dp->staged ? dp->bk_first[b] : 0;
             dp->staged && i < dp->bk_first[b + 1] && st == TROUPE_OK; i++) {
            troupe_event_t *ev = NULL;
            bool last = i + 1 == dp->bk_first[b + 1];
            st = troupe_from_host(c0, dp->grads_by_id[i], last && rec != NULL ? &ev : NULL);
            troupe__dp_steplog_bucket(rec, b, 2, ev);
            troupe_event_release(&ev);
        }
    }
    return st;
}

/* ---- the segmented gradient routine (parallel/dp.h, Overlap; dp_split.c) -------------------- */

bool troupe__dp_choose_overlap(troupe_dp_overlap_t mode, int nranks, bool device_compute,
                               long cores, int local_ranks, int streams, char *why, size_t cap)
{
    if (mode == TROUPE_DP_OVERLAP_ON) {
        snprintf(why, cap, "asked for (on)");
        return true;
    }
    if (mode == TROUPE_DP_OVERLAP_OFF) {
        snprintf(why, cap, "turned off (off)");
        return false;
    }
    if (nranks <= 1) {
        snprintf(why, cap, "auto: one rank, no allreduce to overlap");
        return false;
    }
    if (device_compute) {
        snprintf(why, cap, "auto: the backend computes on a device, the host's cores are free "
                           "for the transport engine");
        return true;
    }
    long need = (long)(local_ranks > 0 ? local_ranks : 1) * ((long)streams + 1);
    bool spare = cores >= need;
    snprintf(why, cap,
             "auto: %ld cores on the node for %d local ranks x (%d compute streams + 1 "
             "transport engine) = %ld: %s",
             cores, local_ranks, streams, need,
             spare ? "a core per rank for the engine" : "no core left for the engine");
    return spare;
}

/* qsort order of (segment, node) pairs: by segment, then node id. */
typedef struct s_seg_node {
    size_t seg;
    troupe_tnode_t *tn;
} s_seg_node_t;

static int s_by_seg_id(const void *a, const void *b)
{
    const s_seg_node_t *x = a, *y = b;
    if (x->seg != y->seg)
        return (x->seg > y->seg) - (x->seg < y->seg);
    return (x->tn->id > y->tn->id) - (x->tn->id < y->tn->id);
}

/* Every rank must issue the same requests: the smallest and the largest segment count and
 * exchange kind over the ranks, and (for the pass across the streams, s_plan_fused) the most
 * streams of a rank, whether every rank's streams are threads on host memory and whether no
 * rank knows a parameter shared across streams (one host-level allreduce of min(v) and
 * min(-v)). */
static troupe_status_t s_agree_plan(troupe_dp_t *dp, size_t nseg, size_t *seg_lo, size_t *seg_hi,
                                    int *exch_lo, int *exch_hi)
{
    bool host_threads =
        troupe_backend_threaded(dp->backend) && troupe_backend_host_addressable(dp->backend);
    bool per_stream = true; /* no parameter known shared across streams */
    for (size_t i = 0; i < dp->n_params; i++)
        per_stream = per_stream && !troupe_tnode_known_shared_cross_streams(dp->params[i]);
    int32_t v[7] = {(int32_t)nseg,          -(int32_t)nseg,  (int32_t)dp->exchange,
                    -(int32_t)dp->exchange, -(int32_t)dp->n, host_threads ? 1 : 0,
                    per_stream ? 1 : 0};
    *seg_lo = *seg_hi = nseg;
    *exch_lo = *exch_hi = (int)dp->exchange;
    dp->max_streams = dp->n;
    dp->all_host_threads = host_threads;
    dp->all_per_stream = per_stream;
    if (dp->nranks <= 1)
        return TROUPE_OK;
    troupe_coll_tensor_t t;
    memset(&t, 0, sizeof t);
    t.data = v;
    t.count = 7;
    t.prec = TROUPE_PREC_INT32;
    t.name = "dp_exchange_plan";
    troupe_allreduce_args_t ar = {.op = TROUPE_REDUCE_MIN, .n = 1, .tensors = &t};
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_allreduce(&ar, &ev));
    TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(
        &ev, "dp_new: agreeing on the exchange and the gradient routine's segments"));
    *seg_lo = (size_t)v[0];
    *seg_hi = (size_t)-v[1];
    *exch_lo = v[2];
    *exch_hi = -v[3];
    dp->max_streams = (int)-v[4];
    dp->all_host_threads = v[5] != 0;
    dp->all_per_stream = v[6] != 0;
    return TROUPE_OK;
}

/* Ranks that chose different exchanges (a cuda rank staging beside a cpu rank lending in
 * place; CUDA-aware MPI detected on some ranks only) would issue different requests and meet
 * only at the collective's deadline: they all stage through host memory instead, which every
 * backend can (s_check_stageable names a gradient that cannot), and say so. */
static void s_agree_exchange(troupe_dp_t *dp, int lo, int hi)
{
    if (lo == hi)
        return;
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL,
               "dp: the ranks chose different exchanges (%s on some, %s on others; this rank: "
               "%s): every rank stages through host memory",
               troupe__dp_exchange_name(lo), troupe__dp_exchange_name(hi),
               troupe__dp_exchange_name((int)dp->exchange));
    dp->exchange = TROUPE__DP_EXCHANGE_STAGED;
    dp->staged = true;
}

/* Decides whether this run overlaps (troupe__dp_choose_overlap), plans the split, checks that
 * every rank splits alike, materializes the crossing nodes and orders grads_by_id by segment
 * (dp->nseg, seg_first, seg_of_grad; one segment when not overlapping). */
static troupe_status_t s_plan_segments(troupe_dp_t *dp, const troupe_dp_config_t *cfg,
                                       const troupe_dp_model_t *m)
{
    troupe_dp_overlap_t mode =
        cfg->overlap != TROUPE_DP_OVERLAP_AUTO ? cfg->overlap : troupe_config_dp_overlap();
    char why[256];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = dp->nranks > 1 ? troupe_cluster_local_size() : 1;
    bool want = troupe__dp_choose_overlap(mode, dp->nranks,
                                          !troupe_backend_host_addressable(dp->backend),
                                          cores, local, dp->n, why, sizeof why);
    troupe__dp_split_t sp;
    memset(&sp, 0, sizeof sp);
    TROUPE_RETURN_IF_ERROR(troupe__dp_split_plan(m->grad_comp, dp->grads, dp->n_params, &sp));
    size_t nseg = want ? sp.nseg : 1, lo = 0, hi = 0;
    int exch_lo = 0, exch_hi = 0;
    troupe_status_t st = s_agree_plan(dp, nseg, &lo, &hi, &exch_lo, &exch_hi);
    if (st == TROUPE_OK)
        s_agree_exchange(dp, exch_lo, exch_hi);
    if (st == TROUPE_OK && nseg > 1 && lo != hi) {
        snprintf(why, sizeof why, "the ranks split into %zu to %zu segments: every rank runs "
                                  "unsplit", lo, hi);
        nseg = 1;
    }
    if (st == TROUPE_OK && nseg > 1)
        st = troupe__dp_split_materialize(&sp);
    dp->nseg = st == TROUPE_OK ? nseg : 1;
    dp->overlap = dp->nseg > 1;
    dp->seg_first = troupe_calloc(dp->nseg + 1, sizeof *dp->seg_first);
    dp->seg_of_grad = troupe_calloc(dp->n_params, sizeof *dp->seg_of_grad);
    dp->seg_code = troupe_calloc(dp->nseg, sizeof *dp->seg_code);
    s_seg_node_t *pairs = troupe_calloc(dp->n_params, sizeof *pairs);
    if (st == TROUPE_OK && (!dp->seg_first || !dp->seg_of_grad || !dp->seg_code || !pairs))
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    for (int k = 0; k < dp->n && st == TROUPE_OK; k++) {
        dp->rep[k].seg = troupe_calloc(dp->nseg, sizeof *dp->rep[k].seg);
        if (dp->rep[k].seg == NULL)
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    }
    if (st == TROUPE_OK) {
        for (size_t i = 0; i < dp->n_params; i++) {
            dp->seg_of_grad[i] = dp->overlap ? sp.seg_of_grad[i] : 0;
            pairs[i] = (s_seg_node_t){dp->seg_of_grad[i], dp->grads[i]};
        }
        qsort(pairs, dp->n_params, sizeof *pairs, s_by_seg_id);
        for (size_t i = 0; i < dp->n_params; i++) {
            dp->grads_by_id[i] = pairs[i].tn;
            dp->seg_first[pairs[i].seg + 1] = i + 1;
        }
        for (size_t g = 1; g <= dp->nseg; g++) /* a segment without gradients: none */
            if (dp->seg_first[g] < dp->seg_first[g - 1])
                dp->seg_first[g] = dp->seg_first[g - 1];
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL,
                   "dp: overlap %s (%zu segments, %zu nodes materialized across them): %s%s%s",
                   dp->overlap ? "on" : "off", dp->nseg, dp->overlap ? sp.ncrossing : 0, why,
                   want && sp.nseg == 1 ? "; but grad_comp cannot be split: " : "",
                   want && sp.nseg == 1 ? sp.why : "");
    }
    troupe_free(pairs);
    troupe__dp_split_free(&sp);
    return st;
}

/* Compiles the segments (the whole comp when there is one). */
static troupe_status_t s_build_segments(troupe_dp_t *dp, const troupe_dp_model_t *m)
{
    if (!dp->overlap) {
        troupe_status_t st = troupe_compile(dp->backend, m->grad_comp, "dp_grad", &dp->seg_code[0]);
        return st == TROUPE_OK ? st : s_wrap(st, "dp_new: compiling grad_comp");
    }
    troupe__dp_split_t sp;
    memset(&sp, 0, sizeof sp);
    TROUPE_RETURN_IF_ERROR(troupe__dp_split_plan(m->grad_comp, dp->grads, dp->n_params, &sp));
    troupe_status_t st = TROUPE_OK;
    if (sp.nseg != dp->nseg)
        st = troupe__error(TROUPE_INTERNAL, "dp_new: grad_comp split into %zu segments, then %zu",
                           dp->nseg, sp.nseg);
    for (size_t g = 0; g < dp->nseg && st == TROUPE_OK; g++) {
        troupe_asgn_comp_t *c = NULL;
        char name[32], prefix[96];
        snprintf(name, sizeof name, "dp_grad_s%zu", g);
        st = troupe__dp_split_comp(m->grad_comp, &sp, g, &c);
        if (st == TROUPE_OK)
            st = troupe_compile(dp->backend, c, name, &dp->seg_code[g]);
        troupe_asgn_comp_destroy(&c);
        if (st != TROUPE_OK) {
            snprintf(prefix, sizeof prefix, "dp_new: compiling segment %zu of %zu of grad_comp",
                     g, dp->nseg);
            st = s_wrap(st, prefix);
        }
    }
    troupe__dp_split_free(&sp);
    return st;
}

/* The fed form (troupe_dp_model_t.feed_comp): the feed routine, compiled once and linked on
 * every replica before the gradient routine, so that the nodes it writes are in the context
 * the gradient routine links on. Every node both comps mention (the fixed nodes; the inputs
 * aside) must be an array of the feed routine's context: a virtual or local node would not
 * outlive the feed, and grad_comp would read an array nobody writes. */
static troupe_status_t s_build_feed(troupe_dp_t *dp, const troupe_dp_model_t *m)
{
    if (!m->feed_comp)
        return TROUPE_OK;
    troupe_status_t st = troupe_compile(dp->backend, m->feed_comp, "dp_feed", &dp->feed_code);
    if (st != TROUPE_OK)
        return s_wrap(st, "dp_new: compiling feed_comp");
    for (int k = 0; k < dp->n; k++) {
        troupe__dp_replica_t *r = &dp->rep[k];
        st = s_link(r, dp->feed_code, &r->feed);
        if (st != TROUPE_OK)
            return s_wrap(st, "dp_new: linking feed_comp");
        st = troupe_routine_set_index(r->feed, dp->batch_index, 0);
        if (st != TROUPE_OK)
            return s_wrap(st, "dp_new: binding batch_index on the feed");
    }
    size_t shared = 0;
    for (size_t i = 0; i < m->feed_comp->nnodes; i++) {
        troupe_tnode_t *tn = m->feed_comp->nodes[i];
        bool input = false;
        for (size_t j = 0; j < m->n_inputs && !input; j++)
            input = m->inputs[j] == tn;
        if (input || troupe_asgn_comp_node_index(m->grad_comp, tn) == SIZE_MAX)
            continue;
        shared++;
        if (!troupe_context_has_node(s_tail(&dp->rep[0]), tn)) {
            char nm[64];
            s_name(tn, nm, sizeof nm);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: node %s, which feed_comp writes and grad_comp reads, is "
                                 "not materialized by the feed routine (a virtual or local node "
                                 "does not outlive its routine: make it materialized)",
                                 nm);
        }
    }
    if (shared == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: grad_comp reads none of the nodes feed_comp writes (the "
                             "inputs aside): the feed would feed nothing");
    return TROUPE_OK;
}

/* The debug line naming the model's form and whether its routines are graph candidates. */
static void s_log_form(const troupe_dp_t *dp)
{
    bool graphs = troupe_backend_has_graphs(troupe_backend_name(dp->backend));
    bool on = graphs && troupe_driver_graphs() == TROUPE_GRAPHS_AUTO;
    bool fed = dp->feed_code != NULL;
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL,
               "dp: minibatches %s (batch_index '%s'); backend %s %s: %s",
               fed ? "fed into fixed nodes by feed_comp" : "indexed in grad_comp", dp->batch_index,
               troupe_backend_name(dp->backend),
               !graphs ? "has no graph entries"
               : on    ? "replays graphs (TROUPE_CUDA_GRAPHS=auto)"
                       : "has graphs off (TROUPE_CUDA_GRAPHS=off)",
               !on   ? "every routine launches plainly"
               : fed ? "the gradient, merge and optimizer routines launch with one binding each "
                       "and are graph candidates (the feed gets a new binding per minibatch)"
                     : "the merge and optimizer routines are graph candidates, the gradient "
                       "routine is not (a new binding per minibatch: give a feed_comp)");
}

static troupe_status_t s_build(troupe_dp_t *dp, const troupe_dp_config_t *cfg,
                               const troupe_dp_model_t *m)
{
    char nm[64];
    dp->opt = cfg->optimizer;
    dp->local_only = cfg->local_only;
    dp->coll_flags = cfg->compress_bf16 ? TROUPE_COLL_BF16 : 0u;
    dp->rank = 0;
    dp->nranks = 1;
    if (!dp->local_only) {
        TROUPE_RETURN_IF_ERROR(troupe_cluster_status());
        dp->rank = troupe_cluster_rank();
        dp->nranks = troupe_cluster_size();
    }
    TROUPE_RETURN_IF_ERROR(s_copy_model(dp, m));
    TROUPE_RETURN_IF_ERROR(s_open(dp, cfg));
    TROUPE_RETURN_IF_ERROR(troupe__dp_agree_config(dp, cfg, m)); /* before any long work */
    bool lendable = troupe_backend_host_addressable(dp->backend);
    bool cuda_aware = troupe_config_cuda_aware() == TROUPE_CUDA_AWARE_ON ||
                      (troupe_config_cuda_aware() == TROUPE_CUDA_AWARE_AUTO &&
                       troupe_cluster_cuda_aware());
    bool device_memory = cfg->stage_through_host || !lendable;
    dp->exchange = troupe__dp_choose_exchange(dp->nranks, device_memory, lendable, cuda_aware);
    /* DIRECT: the lent path, with device memory handed to MPI as it is; NONE (one rank,
     * local_only): nothing crosses ranks, so nothing is staged whatever the memory */
    dp->staged = dp->exchange == TROUPE__DP_EXCHANGE_STAGED;
    TROUPE_RETURN_IF_ERROR(s_plan_segments(dp, cfg, m));
    if (dp->staged && dp->nranks > 1) {
        TROUPE_RETURN_IF_ERROR(s_check_stageable(dp));
        TROUPE_RETURN_IF_ERROR(s_host_tensors(dp->grads_by_id, dp->n_params, &dp->host_t));
        TROUPE_RETURN_IF_ERROR(s_plan_buckets(dp));
    }

    /* parameters and inputs on every replica; the parameters packed in one pool in the order
     * of their gradients (grads_by_id), so that they lie as the gradients do (each the size of
     * its gradient): the fused update then reaches them through shared memory (Fused update) */
    for (int k = 0; k < dp->n; k++) {
        troupe__dp_replica_t *r = &dp->rep[k];
        TROUPE_RETURN_IF_ERROR(
            s_upload_by_grad(dp, r, dp->params, 1, 0, "dp_new: uploading the parameters"));
        troupe_status_t st = TROUPE_OK;
        for (size_t i = 0; i < m->n_inputs; i++) {
            if (troupe_context_has_node(s_tail(r), m->inputs[i]))
                continue;
            st = s_upload(r, m->inputs[i]);
            if (st != TROUPE_OK) {
                s_name(m->inputs[i], nm, sizeof nm);
                char prefix[128];
                snprintf(prefix, sizeof prefix, "dp_new: uploading input %s", nm);
                return s_wrap(st, prefix);
            }
        }
    }

    /* the feed (fed form) and the gradient routine, one routine per segment (Overlap), compiled once, linked on every
     * replica in order */
    TROUPE_RETURN_IF_ERROR(s_build_feed(dp, m));
    TROUPE_RETURN_IF_ERROR(s_build_segments(dp, m));
    for (int k = 0; k < dp->n; k++) {
        for (size_t g = 0; g < dp->nseg; g++) {
            troupe_status_t st = s_link(&dp->rep[k], dp->seg_code[g], &dp->rep[k].seg[g]);
            if (st != TROUPE_OK)
                return s_wrap(st, "dp_new: linking grad_comp");
            if (!dp->rep[k].feed) /* the fed form's segments have no batch index */
                st = troupe_routine_set_index(dp->rep[k].seg[g], dp->batch_index, 0);
            if (st != TROUPE_OK)
                return s_wrap(st, "dp_new: binding batch_index");
        }
        for (size_t i = 0; i < dp->n_params; i++) {
            if (!troupe_context_has_node(s_tail(&dp->rep[k]), dp->grads[i])) {
                s_name(dp->grads[i], nm, sizeof nm);
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "dp_new: grads[%zu] %s is not materialized by grad_comp "
                                     "(it must write it)",
                                     i, nm);
            }
        }
        if (dp->loss && !troupe_context_has_node(s_tail(&dp->rep[k]), dp->loss)) {
            s_name(dp->loss, nm, sizeof nm);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: loss %s is not written by grad_comp", nm);
        }
    }

    /* merge routines g =+ g.merge, on the replicas that receive (even k with a k+1) */
    troupe_status_t st = TROUPE_OK;
    if (dp->n > 1) {
        dp->merge_code = troupe_calloc(dp->n_params, sizeof *dp->merge_code);
        if (!dp->merge_code)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
        for (size_t i = 0; i < dp->n_params; i++) {
            troupe_tnode_t *g = dp->grads[i];
            troupe_asgn_comp_t *comp = NULL;
            troupe_asgn_t *t = NULL;
            char axes[TROUPE_MAX_DIMS + 1], spec[2 * TROUPE_MAX_DIMS + 4], name[48];
            int nd = g->ndims;
            for (int a = 0; a < nd; a++)
                axes[a] = (char)('a' + a);
            axes[nd] = '\0';
            snprintf(spec, sizeof spec, "%s=>%s", axes, axes); /* identity: "ab=>ab" */
            snprintf(name, sizeof name, "dp_merge_%zu", i);
            st = troupe_asgn_comp_new(&comp);
            if (st == TROUPE_OK)
                st = troupe_asgn_accum_unop(comp, false, TROUPE_BINOP_ADD, g, TROUPE_UNOP_IDENTITY,
                                            troupe_asgn_merge(g), spec, &t);
            if (st == TROUPE_OK) {
                troupe_asgn_comp_set_root(comp, t);
                st = troupe_compile(dp->backend, comp, name, &dp->merge_code[i]);
            }
            troupe_asgn_comp_destroy(&comp);
            if (st != TROUPE_OK)
                return s_wrap(st, "dp_new: compiling a merge routine");
            for (int k = 0; k + 1 < dp->n; k += 2) {
                st = s_link(&dp->rep[k], dp->merge_code[i], &dp->rep[k].merge[i]);
                if (st != TROUPE_OK)
                    return s_wrap(st, "dp_new: linking a merge routine");
            }
        }
    }

    /* optimizer state and hyper-parameters, on the owner stream only */
    troupe__dp_replica_t *r0 = &dp->rep[0];
    dp->nstate = troupe__dp_nstate(&dp->opt);
    if (dp->nstate > 0) {
        dp->state = troupe_calloc(dp->n_params * (size_t)dp->nstate, sizeof *dp->state);
        if (!dp->state)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
        static const char *const s_suffix[2] = {"opt_m", "opt_v"};
        for (size_t i = 0; i < dp->n_params; i++) {
            troupe_tnode_t *p = dp->params[i];
            char label[96];
            troupe_tnode_label_string(p, label, sizeof label);
            for (int s = 0; s < dp->nstate; s++) {
                troupe_tnode_t **slot = &dp->state[i * (size_t)dp->nstate + (size_t)s];
                TROUPE_RETURN_IF_ERROR(s_new_hosted(
                    label, s_suffix[s], troupe__dp_state_prec(p->prec), p->ndims, p->dims, slot));
            }
        }
        /* each state array in one pool per kind (m, v), in the gradients' order, laid out as
         * the gradients are (as the parameters: Fused update) */
        for (int s = 0; s < dp->nstate; s++)
            TROUPE_RETURN_IF_ERROR(s_upload_by_grad(dp, r0, dp->state, (size_t)dp->nstate,
                                                    (size_t)s, "dp_new: uploading the optimizer "
                                                               "state"));
    }
    int64_t hdim = TROUPE__DP_HYPER_COUNT;
    TROUPE_RETURN_IF_ERROR(
        s_new_hosted("dp_hyper", NULL, TROUPE_PREC_DOUBLE, 1, &hdim, &dp->hyper));
    TROUPE_RETURN_IF_ERROR(s_upload(r0, dp->hyper));
    for (int j = 0; j < TROUPE__DP_HYPER_STAGES; j++) {
        char suffix[16], name[32];
        snprintf(suffix, sizeof suffix, "stage%d", j);
        snprintf(name, sizeof name, "dp_hyper_stage%d", j);
        TROUPE_RETURN_IF_ERROR(
            s_new_hosted("dp_hyper", suffix, TROUPE_PREC_DOUBLE, 1, &hdim, &dp->hyper_stage[j]));
        TROUPE_RETURN_IF_ERROR(s_upload(r0, dp->hyper_stage[j]));
        troupe_asgn_comp_t *ccomp = NULL;
        troupe_asgn_t *t = NULL;
        st = troupe_asgn_comp_new(&ccomp);
        if (st == TROUPE_OK)
            st = troupe_asgn_accum_unop(ccomp, false, TROUPE_BINOP_ARG2, dp->hyper,
                                        TROUPE_UNOP_IDENTITY, troupe_asgn_node(dp->hyper_stage[j]),
                                        "a=>a", &t);
        if (st == TROUPE_OK) {
            troupe_asgn_comp_set_root(ccomp, t);
            st = troupe_compile(dp->backend, ccomp, name, &dp->hyper_copy_code[j]);
        }
        troupe_asgn_comp_destroy(&ccomp);
        if (st != TROUPE_OK)
            return s_wrap(st, "dp_new: compiling a hyper-parameter copy");
        st = s_link(r0, dp->hyper_copy_code[j], &dp->hyper_copy[j]);
        if (st != TROUPE_OK)
            return s_wrap(st, "dp_new: linking a hyper-parameter copy");
    }
    troupe_asgn_comp_t *ocomp = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__dp_optimizer_comp(dp, &ocomp));
    /* without fma fusion: the fused update (troupe__dp_apply) does the same operations in the
     * same order, so both give the same bits (parallel/dp.h, Fused update) */
    st = troupe_compile_unfused(dp->backend, ocomp,
                                dp->opt.kind == TROUPE_OPT_ADAMW ? "dp_adamw" : "dp_sgd",
                                &dp->opt_code);
    troupe_asgn_comp_destroy(&ocomp);
    if (st != TROUPE_OK)
        return s_wrap(st, "dp_new: compiling the optimizer");
    st = s_link(r0, dp->opt_code, &dp->opt_routine);
    if (st != TROUPE_OK)
        return s_wrap(st, "dp_new: linking the optimizer");
    TROUPE_RETURN_IF_ERROR(s_plan_fused(dp));

    /* every rank starts from rank 0's parameters */
    if (dp->nranks > 1 && dp->staged) {
        st = s_broadcast_staged(dp);
        if (st != TROUPE_OK)
            return s_wrap(st, "dp_new: broadcasting the parameters from rank 0 (through host "
                              "memory)");
    } else if (dp->nranks > 1) {
        troupe_event_t *ev = NULL;
        const char *phase = troupe_trace_set_phase("dp.params");
        st = troupe_broadcast_nodes(s_tail(r0), dp->n_params, dp->params, 0, &ev);
        troupe_trace_set_phase(phase);
        if (st != TROUPE_OK)
            return s_wrap(st, "dp_new: broadcasting the parameters from rank 0");
        TROUPE_RETURN_IF_ERROR(
            troupe__dp_sync_event(&ev, "dp_new: broadcasting the parameters from rank 0"));
        for (int k = 1; k < dp->n; k++)
            for (size_t i = 0; i < dp->n_params; i++)
                TROUPE_RETURN_IF_ERROR(troupe_device_to_device(dp->params[i], TROUPE_MERGE_NO,
                                                               s_tail(&dp->rep[k]), s_tail(r0),
                                                               NULL, NULL, NULL));
    }
    TROUPE_RETURN_IF_ERROR(troupe__dp_await(dp, "dp_new"));
    s_log_form(dp);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL,
               "dp: %d local replicas on %s (devices %d to %d), rank %d of %d, %zu parameters, "
               "optimizer %s%s, allreduce %s (%zu buckets), CUDA-aware MPI %s "
               "(TROUPE_CUDA_AWARE=%s)",
               dp->n, troupe_backend_name(dp->backend), dp->dev_of[0], dp->dev_of[dp->n - 1],
               dp->rank, dp->nranks, dp->n_params, troupe_optimizer_name(dp->opt.kind),
               dp->fused ? " (fused into the allreduce)" : "",
               dp->nranks == 1                            ? "none (one rank)"
               : dp->staged                               ? "pipelined through host memory"
               : dp->exchange == TROUPE__DP_EXCHANGE_DIRECT ? "direct on device memory"
                                                          : "in place on the devices",
               dp->staged ? dp->nbk : dp->nranks > 1 ? dp->nseg : 0,
               troupe_cluster_cuda_aware() ? "detected" : "not detected",
               troupe_config_cuda_aware_name(troupe_config_cuda_aware()));
    return TROUPE_OK;
}

troupe_status_t troupe_dp_new(const troupe_dp_config_t *cfg, const troupe_dp_model_t *model,
                              troupe_dp_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: NULL out");
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(s_check_model(cfg, model));
    troupe_dp_t *dp = troupe_calloc(1, sizeof *dp);
    if (!dp)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    troupe_status_t st = s_build(dp, cfg, model);
    if (st != TROUPE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        troupe_dp_destroy(&dp);
        return troupe__error(st, "%s", msg);
    }
    *out = dp;
    return TROUPE_OK;
}

/* Teardown after a failure stays quiet: a replica whose stream failed had its failure
 * reported by the call that met it (dp_step, dp_sync), so what it leaves behind is logged at
 * debug level; anything else (a stream that did not drain in time) is a warning. */
static troupe_log_level_t s_teardown_level(troupe_stream_t *s)
{
    return s != NULL && troupe_stream_status(s) != TROUPE_OK ? TROUPE_LOG_DEBUG : TROUPE_LOG_WARN;
}

void troupe_dp_destroy(troupe_dp_t **dp_p)
{
    if (!dp_p || !*dp_p)
        return;
    troupe_dp_t *dp = *dp_p;
    *dp_p = NULL;
    if (dp->rep) {
        for (int k = 0; k < dp->n; k++)
            if (dp->rep[k].stream) {
                troupe_status_t st =
                    troupe_stream_await(dp->rep[k].stream, troupe_config_timeout_ns());
                if (st != TROUPE_OK)
                    TROUPE_LOG(s_teardown_level(dp->rep[k].stream), TROUPE_SUB_PARALLEL,
                               "dp_destroy: replica %d: %s", k, troupe_last_error());
            }
    }
    troupe_free(dp->ckpt_note);
    troupe__dp_close_progress(dp);
    troupe_routine_release(&dp->opt_routine);
    for (int j = 0; j < TROUPE__DP_HYPER_STAGES; j++)
        troupe_routine_release(&dp->hyper_copy[j]);
    if (dp->rep) {
        for (int k = 0; k < dp->n; k++) {
            troupe__dp_replica_t *r = &dp->rep[k];
            troupe_routine_release(&r->feed);
            for (size_t g = 0; r->seg && g < dp->nseg; g++)
                troupe_routine_release(&r->seg[g]);
            troupe_free(r->seg);
            for (size_t i = 0; r->merge && i < dp->n_params; i++)
                troupe_routine_release(&r->merge[i]);
            troupe_free(r->merge);
        }
        for (int k = 0; k < dp->n; k++) {
            troupe__dp_replica_t *r = &dp->rep[k];
            for (size_t c = r->nctxs; c-- > 0;) {
                if (troupe_context_finalize(r->ctxs[c]) != TROUPE_OK)
                    TROUPE_LOG(s_teardown_level(r->stream), TROUPE_SUB_PARALLEL,
                               "dp_destroy: finalizing a context of replica %d: %s", k,
                               troupe_last_error());
                troupe_context_release(&r->ctxs[c]);
            }
            troupe_free(r->ctxs);
            troupe_stream_release(&r->stream);
        }
        troupe_free(dp->rep);
    }
    troupe_free(dp->dev_of);
    troupe_code_release(&dp->feed_code);
    for (size_t g = 0; dp->seg_code && g < dp->nseg; g++)
        troupe_code_release(&dp->seg_code[g]);
    troupe_free(dp->seg_code);
    troupe_free(dp->seg_first);
    troupe_free(dp->seg_of_grad);
    troupe_free(dp->seg_bk);
    troupe_code_release(&dp->opt_code);
    troupe_free(dp->fused_side);
    troupe__dp_local_free(&dp->local);
    for (size_t i = 0; dp->merge_code && i < dp->n_params; i++)
        troupe_code_release(&dp->merge_code[i]);
    troupe_free(dp->merge_code);
    for (size_t i = 0; dp->state && i < dp->n_params * (size_t)dp->nstate; i++)
        troupe_tnode_release(&dp->state[i]);
    troupe_free(dp->state);
    for (size_t i = 0; i < dp->ntemps; i++)
        troupe_tnode_release(&dp->temps[i]);
    troupe_free(dp->temps);
    troupe_tnode_release(&dp->hyper);
    for (int j = 0; j < TROUPE__DP_HYPER_STAGES; j++) {
        troupe_code_release(&dp->hyper_copy_code[j]);
        troupe_tnode_release(&dp->hyper_stage[j]);
    }
    for (size_t i = 0; i < dp->n_params; i++) {
        if (dp->params)
            troupe_tnode_release(&dp->params[i]);
        if (dp->grads)
            troupe_tnode_release(&dp->grads[i]);
    }
    troupe_free(dp->params);
    troupe_free(dp->grads);
    troupe_free(dp->grads_by_id);
    troupe_free(dp->bk_first);
    troupe_free(dp->host_t);
    troupe_tnode_release(&dp->loss);
    troupe_free(dp->batch_index);
    troupe_backend_close(&dp->backend);
    troupe_free(dp);
}

/* ---- the fused update (parallel/dp.h, Fused update) ------------------------------------------ */

bool troupe__dp_choose_fused(bool config_on, int nranks, troupe__dp_exchange_t exchange,
                             size_t nseg, bool all_single, char *why, size_t cap)
{
    const char *no = !config_on                               ? "TROUPE_DP_FUSED_UPDATE=off"
                     : nranks <= 1                            ? "one rank, no allreduce"
                     : exchange != TROUPE__DP_EXCHANGE_INPLACE ? "the exchange is not in place"
                     : nseg > 1    ? "overlap: one allreduce per segment"
                     : !all_single ? "a parameter is not single precision"
                                   : NULL;
    snprintf(why, cap, "%s", no != NULL ? no : "in place, one allreduce, single precision");
    return no == NULL;
}

/* Decides whether dp fuses its optimizer step into the allreduce, and lists the side arrays
 * (the parameter and its states in grads_by_id's order). The same on every rank: its inputs
 * are agreed (the exchange and the segments, s_agree_plan; the model and optimizer, dp_agree),
 * and the fingerprint checks the rest. */
static troupe_status_t s_plan_fused(troupe_dp_t *dp)
{
    bool all_single = true; /* the model's precisions are the same on every rank (dp_agree) */
    for (size_t i = 0; i < dp->n_params; i++)
        all_single = all_single && dp->params[i]->prec == TROUPE_PREC_SINGLE;
    char why[96];
    /* several streams on some rank: the passes across the streams (on every rank, so that
     * every rank's allreduce carries no update), else the update in the allreduce */
    if (troupe__dp_choose_local(troupe_config_dp_fused_update(), dp->max_streams, dp->exchange,
                                dp->all_host_threads, dp->nseg, all_single,
                                dp->all_per_stream, why, sizeof why)) {
        TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL,
                   "dp: merge and optimizer step fused into passes across the streams: %s", why);
        return troupe__dp_local_new(dp, &dp->local);
    }
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL,
               "dp: merge and optimizer step not fused across the streams: %s", why);
    dp->fused = troupe__dp_choose_fused(troupe_config_dp_fused_update(), dp->nranks, dp->exchange,
                                        dp->nseg, all_single, why, sizeof why);
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL, "dp: optimizer step %s: %s",
               dp->fused ? "fused into the allreduce" : "as a routine after the allreduce", why);
    if (!dp->fused)
        return TROUPE_OK;
    size_t n = dp->n_params, nside = 1 + (size_t)dp->nstate;
    dp->fused_side = troupe_calloc(n * nside, sizeof *dp->fused_side);
    if (dp->fused_side == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    for (size_t j = 0; j < n; j++) {
        size_t i = s_param_of(dp, j);
        dp->fused_side[j] = dp->params[i];
        for (int k = 0; k < dp->nstate; k++)
            dp->fused_side[(size_t)(k + 1) * n + j] = dp->state[i * (size_t)dp->nstate + (size_t)k];
    }
    return TROUPE_OK;
}

/* ---- a step --------------------------------------------------------------------------------- */

/* Traced runs (base/trace.h) mark each step on the owner stream: from when the stream begins
 * the step to when its optimizer finished, on the rank's "steps" timeline. A mark is shared by
 * the two stream items and the scheduling host thread; the last one to let go frees it. */
typedef struct s_step_mark {
    atomic_int refs;
    int64_t step;
    int64_t t0_ns; /* 0 until the stream reached the step */
} s_step_mark_t;

static void s_mark_release(void *arg)
{
    s_step_mark_t *m = arg;
    if (m != NULL && atomic_fetch_sub(&m->refs, 1) == 1)
        troupe_free(m);
}

static troupe_status_t s_mark_begin(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    ((s_step_mark_t *)arg)->t0_ns = troupe_now_ns();
    return TROUPE_OK;
}

static troupe_status_t s_mark_end(void *arg, troupe_dqueue_t *q)
{
    (void)q;
    const s_step_mark_t *m = arg;
    if (m->t0_ns != 0) {
        char name[32];
        snprintf(name, sizeof name, "step %lld", (long long)m->step);
        troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("step", m->step)};
        troupe__trace_emit(TROUPE__TRACK_STEPS, "step", name, m->t0_ns, troupe_now_ns(), a, 1);
    }
    return TROUPE_OK;
}

/* Schedules the step's begin mark on the owner stream; *out_mark (the host's reference, NULL
 * when not traced) goes to s_mark_step_end, or to s_mark_release if the step fails first. */
static troupe_status_t s_mark_step_begin(troupe_dp_t *dp, s_step_mark_t **out_mark)
{
    *out_mark = NULL;
    if (!troupe__trace_on())
        return TROUPE_OK;
    s_step_mark_t *m = troupe_calloc(1, sizeof *m);
    if (m == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_step: out of memory");
    atomic_init(&m->refs, 2);
    m->step = dp->steps;
    troupe_status_t st = troupe_stream_schedule(troupe_context_stream(s_tail(&dp->rep[0])),
                                                s_mark_begin, m, s_mark_release);
    if (st != TROUPE_OK) { /* the schedule dropped the item's reference */
        s_mark_release(m);
        return st;
    }
    *out_mark = m;
    return TROUPE_OK;
}

/* Schedules the end mark with the host's reference. */
static troupe_status_t s_mark_step_end(troupe_dp_t *dp, s_step_mark_t **mark_p)
{
    s_step_mark_t *m = *mark_p;
    *mark_p = NULL;
    if (m == NULL)
        return TROUPE_OK;
    return troupe_stream_schedule(troupe_context_stream(s_tail(&dp->rep[0])), s_mark_end, m,
                                  s_mark_release);
}

/* Points segment g of replica rep at minibatch b: the indexed form binds the segment's batch
 * index; the fed form binds the feed routine's and runs it before segment 0 (it copies the
 * minibatch into the fixed nodes, so the gradient routine keeps one binding: parallel/dp.h,
 * feed_comp). */
static troupe_status_t s_select_batch(troupe__dp_replica_t *rep, troupe_routine_t *seg, size_t g,
                                      const troupe_dp_t *dp, int64_t b)
{
    if (!rep->feed)
        return troupe_routine_set_index(seg, dp->batch_index, b);
    if (g != 0)
        return TROUPE_OK;
    TROUPE_RETURN_IF_ERROR(troupe_routine_set_index(rep->feed, dp->batch_index, b));
    return troupe_routine_run(rep->feed, NULL);
}

/* 1. Segment g of the gradient routine on every replica, each on its minibatch (round-robin
 * over the global list). *ready (replaced when the step is logged) gets the owner stream's
 * event after it; the last segment's events are the replicas' gradient ends. */
static troupe_status_t s_run_segment(troupe_dp_t *dp, size_t g, troupe__dp_steplog_t *rec,
                                     troupe_event_t **ready)
{
    int64_t base = dp->steps * dp->replicas + dp->replica_offset;
    bool last = g + 1 == dp->nseg;
    for (int k = 0; k < dp->n; k++) {
        int64_t b = (base + k) % dp->num_batches;
        troupe_routine_t *r = dp->rep[k].seg[g];
        TROUPE_RETURN_IF_ERROR(s_select_batch(&dp->rep[k], r, g, dp, b));
        troupe_event_t *ev = NULL;
        TROUPE_RETURN_IF_ERROR(
            troupe_routine_run(r, rec != NULL && (last || k == 0) ? &ev : NULL));
        if (last)
            troupe__dp_steplog_grad(rec, k, ev);
        if (k == 0 && ev != NULL) {
            troupe_event_release(ready);
            *ready = ev;
        } else {
            troupe_event_release(&ev);
        }
    }
    return TROUPE_OK;
}

/* 2. The tree merge into replica 0 of segment g's gradients, last parameter first (the order
 * backprop finishes them); with one segment, every gradient in that order. *ready as
 * s_run_segment's (the owner stream's last merge). */
static troupe_status_t s_merge_segment(troupe_dp_t *dp, size_t g, troupe__dp_steplog_t *rec,
                                       troupe_event_t **ready)
{
    int n = dp->n;
    for (size_t i = dp->n_params; i-- > 0;) {
        if (dp->seg_of_grad[i] != g)
            continue;
        troupe_tnode_t *gr = dp->grads[i];
        for (int stride = 1; stride < n; stride *= 2) {
            for (int k = 0; k + stride < n; k += 2 * stride) {
                TROUPE_RETURN_IF_ERROR(
                    troupe_device_to_device(gr, TROUPE_MERGE_COPY, s_tail(&dp->rep[k]),
                                            s_tail(&dp->rep[k + stride]), NULL, NULL, NULL));
                troupe_event_t *ev = NULL;
                TROUPE_RETURN_IF_ERROR(
                    troupe_routine_run(dp->rep[k].merge[i], rec != NULL && k == 0 ? &ev : NULL));
                if (ev != NULL) {
                    troupe_event_release(ready);
                    *ready = ev;
                }
            }
        }
    }
    return TROUPE_OK;
}

static troupe_status_t s_schedule_step(troupe_dp_t *dp, s_step_mark_t **mark,
                                       troupe__dp_steplog_t *rec)
{
    troupe__dp_replica_t *r0 = &dp->rep[0];
    int n = dp->n;
    /* 0. this step's hyper-parameters, ahead of everything else on the owner stream */
    double h[TROUPE__DP_HYPER_COUNT];
    troupe__dp_hyper_values(dp, dp->steps + 1, h);
    bool fused_any = dp->fused || dp->local != NULL;
    if (!fused_any && (!dp->hyper_uploaded || memcmp(h, dp->hyper_last, sizeof h) != 0)) {
        /* only the driver writes the hyper array, so equal values mean the owner stream's
         * array will already hold them; new values go through the next staging node */
        int j = dp->hyper_next;
        dp->hyper_uploaded = false;
        TROUPE_RETURN_IF_ERROR(
            troupe_tnode_set_values(dp->hyper_stage[j], h, TROUPE__DP_HYPER_COUNT));
        TROUPE_RETURN_IF_ERROR(troupe_from_host(s_tail(r0), dp->hyper_stage[j], NULL));
        TROUPE_RETURN_IF_ERROR(troupe_routine_run(dp->hyper_copy[j], NULL));
        dp->hyper_next = (j + 1) % TROUPE__DP_HYPER_STAGES;
        memcpy(dp->hyper_last, h, sizeof h);
        dp->hyper_uploaded = true;
    }
    /* 1-3. per segment of the gradient routine (one without overlap): the segment on every
     * replica, the tree merge of its gradients into replica 0, its bucket's allreduce across
     * ranks; then the owner stream waits for every bucket */
    s_exchange_t x;
    TROUPE_RETURN_IF_ERROR(s_exchange_new(dp, &x));
    if (fused_any) { /* the step's values (h above) for the pass that runs the update */
        x.arg.kind = (int32_t)dp->opt.kind;
        x.arg.nstate = dp->nstate;
        x.arg.decay = dp->opt.weight_decay != 0.0;
        for (int k = 0; k < TROUPE__DP_HYPER_COUNT; k++)
            x.arg.h[k] = (float)h[k];
    }
    troupe_status_t st = TROUPE_OK;
    troupe_event_t *ready = NULL;
    for (size_t g = 0; g < dp->nseg && st == TROUPE_OK; g++) {
        st = s_run_segment(dp, g, rec, &ready);
        if (st == TROUPE_OK && dp->local == NULL) {
            st = s_merge_segment(dp, g, rec, &ready);
        } else if (st == TROUPE_OK && n > 1 && dp->nranks > 1) {
            /* the merge as a pass across the streams into replica 0's gradients */
            troupe_event_release(&ready);
            st = troupe__dp_local_step(dp, TROUPE__DP_LOCAL_SUM, &x.arg,
                                       rec != NULL ? &ready : NULL);
        }
        if (st == TROUPE_OK)
            st = s_exchange_out(dp, &x, g, ready, rec);
    }
    if (st == TROUPE_OK && n > 1 && (dp->local == NULL || dp->nranks > 1))
        troupe__dp_steplog_merge(rec, ready); /* the owner stream's last merge */
    troupe_event_release(&ready);
    if (st == TROUPE_OK)
        st = s_exchange_back(dp, &x, rec);
    if (st == TROUPE_OK && dp->fused && x.ndone > 0) /* the update ends with the allreduce */
        troupe__dp_steplog_optimizer(rec, x.done[x.ndone - 1]);
    troupe__dp_apply_arg_t arg = x.arg;
    s_exchange_free(dp, &x);
    TROUPE_RETURN_IF_ERROR(st);
    /* 2 and 4 as one pass on every stream (parallel/dp.h, Fused update across streams),
     * which also leaves the new parameters on every replica (5) */
    if (dp->local != NULL) {
        troupe_event_t *oev = NULL;
        TROUPE_RETURN_IF_ERROR(troupe__dp_local_step(
            dp, dp->nranks > 1 ? TROUPE__DP_LOCAL_APPLY : TROUPE__DP_LOCAL_FULL, &arg,
            rec != NULL ? &oev : NULL));
        troupe__dp_steplog_optimizer(rec, oev);
        troupe_event_release(&oev);
        return s_mark_step_end(dp, mark);
    }
    /* 4. the optimizer on the owner stream, unless the allreduce ran it */
    if (!dp->fused) {
        troupe_event_t *oev = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_routine_run(dp->opt_routine, rec != NULL ? &oev : NULL));
        troupe__dp_steplog_optimizer(rec, oev);
        troupe_event_release(&oev);
    }
    TROUPE_RETURN_IF_ERROR(s_mark_step_end(dp, mark));
    /* 5. the new parameters to the other replicas */
    for (int k = 1; k < n; k++)
        for (size_t i = 0; i < dp->n_params; i++)
            TROUPE_RETURN_IF_ERROR(troupe_device_to_device(
                dp->params[i], TROUPE_MERGE_NO, s_tail(&dp->rep[k]), s_tail(r0), NULL, NULL, NULL));
    return TROUPE_OK;
}

static troupe_status_t s_refuse_if_failed(const troupe_dp_t *dp, const char *what)
{
    if (dp->failed != TROUPE_OK)
        return troupe__error(dp->failed, "%s: an earlier step failed while being scheduled: %s",
                             what, dp->failed_msg);
    return TROUPE_OK;
}

troupe_status_t troupe_dp_step(troupe_dp_t *dp)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_step: NULL dp");
    TROUPE_RETURN_IF_ERROR(s_refuse_if_failed(dp, "dp_step"));
    if (troupe__fault_armed(TROUPE__FAULT_STEP))
        troupe__fault_step(dp->steps);
    int64_t t0 = troupe__trace_on() ? troupe_now_ns() : 0;
    int64_t h0 = 0; /* the host's scheduling time, for a logged step only */
    troupe__dp_steplog_t *rec = NULL;
    if (troupe__dp_steplog_wanted(dp->steps)) {
        h0 = troupe_now_ns();
        size_t nbk = dp->exchange == TROUPE__DP_EXCHANGE_NONE ? 0
                     : dp->staged                             ? dp->nbk
                                                              : dp->nseg;
        rec = troupe__dp_steplog_new(dp->steps, dp->n, nbk, (int)dp->exchange, dp->fused,
                                     dp->local != NULL);
        troupe__dp_steplog_begin(rec, dp->rep[0].stream);
    }
    s_step_mark_t *mark = NULL;
    troupe_status_t st = s_mark_step_begin(dp, &mark);
    if (st == TROUPE_OK)
        st = s_schedule_step(dp, &mark, rec);
    s_mark_release(mark); /* the step failed before its end mark */
    if (rec != NULL)
        troupe__dp_steplog_set_host(rec, troupe_now_ns() - h0);
    troupe__dp_steplog_release(&rec);
    if (t0 != 0) {
        troupe__trace_arg_t a[] = {TROUPE__TRACE_NUM("step", dp->steps)};
        troupe__trace_emit(TROUPE__TRACK_THREAD, "step", "dp_step (schedule)", t0,
                           troupe_now_ns(), a, 1);
    }
    if (st != TROUPE_OK) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "dp_step %lld", (long long)dp->steps);
        st = s_wrap(st, prefix);
        dp->failed = st;
        snprintf(dp->failed_msg, sizeof dp->failed_msg, "%s", troupe_last_error());
        return st;
    }
    dp->steps++;
    troupe__dp_note_progress(dp);
    return TROUPE_OK;
}

troupe_status_t troupe_dp_sync(troupe_dp_t *dp)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_sync: NULL dp");
    TROUPE_RETURN_IF_ERROR(troupe__dp_await(dp, "dp_sync"));
    return s_refuse_if_failed(dp, "dp_sync");
}

troupe_status_t troupe_dp_last_loss(troupe_dp_t *dp, double *out)
{
    if (!dp || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_last_loss: NULL argument");
    if (!dp->loss)
        return troupe__error(TROUPE_FAILED_PRECONDITION, "dp_last_loss: the model has no loss "
                                                         "node");
    if (dp->steps == 0)
        return troupe__error(TROUPE_FAILED_PRECONDITION, "dp_last_loss: no step ran yet");
    TROUPE_RETURN_IF_ERROR(troupe_dp_sync(dp));
    double sum = 0.0;
    for (int k = 0; k < dp->n; k++) {
        troupe_event_t *ev = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_to_host(s_tail(&dp->rep[k]), dp->loss, &ev));
        TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(&ev, "dp_last_loss: reading the loss"));
        void *host = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(dp->loss, &host));
        sum += troupe_prec_load_double(dp->loss->prec, host);
    }
    double mean = sum / (double)dp->n;
    if (dp->nranks > 1) {
        /* the mean of the ranks' means; with ranks that run different numbers of replicas,
         * the sum over all of them, over T */
        bool uneven = dp->replicas != (int64_t)dp->n * dp->nranks;
        troupe_coll_tensor_t t;
        memset(&t, 0, sizeof t);
        t.data = uneven ? &sum : &mean;
        t.count = 1;
        t.prec = TROUPE_PREC_DOUBLE;
        t.name = "dp_loss";
        troupe_event_t *ev = NULL;
        troupe_allreduce_args_t ar = {.op = uneven ? TROUPE_REDUCE_SUM : TROUPE_REDUCE_MEAN,
                                      .n = 1,
                                      .tensors = &t};
        const char *phase = troupe_trace_set_phase("dp.loss");
        troupe_status_t st = troupe_allreduce(&ar, &ev);
        troupe_trace_set_phase(phase);
        TROUPE_RETURN_IF_ERROR(st);
        TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(&ev, "dp_last_loss: averaging across "
                                                          "ranks"));
        if (uneven)
            mean = sum / (double)dp->replicas;
    }
    *out = mean;
    return TROUPE_OK;
}

troupe_status_t troupe_dp_params_to_host(troupe_dp_t *dp)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_params_to_host: NULL dp");
    TROUPE_RETURN_IF_ERROR(troupe_dp_sync(dp));
    for (size_t i = 0; i < dp->n_params; i++) {
        troupe_event_t *ev = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_to_host(s_tail(&dp->rep[0]), dp->params[i], &ev));
        TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(&ev, "dp_params_to_host"));
    }
    return TROUPE_OK;
}

troupe_status_t troupe_dp_params_from_host(troupe_dp_t *dp)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_params_from_host: NULL dp");
    TROUPE_RETURN_IF_ERROR(s_refuse_if_failed(dp, "dp_params_from_host"));
    for (int k = 0; k < dp->n; k++)
        for (size_t i = 0; i < dp->n_params; i++)
            TROUPE_RETURN_IF_ERROR(troupe_from_host(s_tail(&dp->rep[k]), dp->params[i], NULL));
    return TROUPE_OK;
}

troupe_status_t troupe_dp_set_lr(troupe_dp_t *dp, double lr)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_set_lr: NULL dp");
    if (!(lr > 0.0) || !isfinite(lr))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_set_lr: learning rate %g must be finite and > 0", lr);
    dp->opt.lr = lr;
    return TROUPE_OK;
}

int troupe_dp_num_streams(const troupe_dp_t *dp)
{
    return dp ? dp->n : 0;
}

int troupe_dp_replica_device(const troupe_dp_t *dp, int k)
{
    return dp && k >= 0 && k < dp->n ? dp->dev_of[k] : -1;
}

bool troupe_dp_staged(const troupe_dp_t *dp)
{
    return dp && dp->staged;
}

bool troupe_dp_fused_streams(const troupe_dp_t *dp)
{
    return dp != NULL && dp->local != NULL;
}

bool troupe_dp_fused_update(const troupe_dp_t *dp)
{
    return dp && dp->fused;
}

int64_t troupe_dp_steps_done(const troupe_dp_t *dp)
{
    return dp ? dp->steps : 0;
}

troupe_context_t *troupe_dp_owner_context(troupe_dp_t *dp)
{
    return dp ? s_tail(&dp->rep[0]) : NULL;
}

troupe_backend_t *troupe_dp_backend(troupe_dp_t *dp)
{
    return dp ? dp->backend : NULL;
}
