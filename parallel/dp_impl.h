/* troupe — private declarations shared by parallel/dp.c (the driver), parallel/dp_optim.c (the
 * optimizer routines and their hyper-parameter vector) and parallel/dp_ckpt.c (checkpoints).
 * Not installed.
 *
 * Thread safety: as parallel/dp.h (one thread drives a troupe_dp_t). Ownership: the driver
 * owns everything reachable from struct troupe_dp.
 */
#ifndef TROUPE_PARALLEL_DP_IMPL_H
#define TROUPE_PARALLEL_DP_IMPL_H

#include "actors/troupe.h"
#include "parallel/dp.h"
#include "parallel/dp_strategy_impl.h"
#include "transport/mpi/collective.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Hyper-parameter slots of the "hyper" node (double, TROUPE_DP_HYPER_COUNT elements), set on
 * the owner stream (from a staging node) before a step's optimizer routine when they changed. */
enum {
    TROUPE__DP_H_INV_N = 0, /* 1 / (N * R): merge and allreduce sum the N * R replicas */
    /* SGD */
    TROUPE__DP_H_SGD_WD = 1,
    TROUPE__DP_H_SGD_MOMENTUM = 2,
    TROUPE__DP_H_SGD_LR = 3,
    /* AdamW */
    TROUPE__DP_H_ADAM_DECAY = 1, /* 1 - lr * weight_decay */
    TROUPE__DP_H_ADAM_B1 = 2,
    TROUPE__DP_H_ADAM_1MB1 = 3, /* 1 - b1 */
    TROUPE__DP_H_ADAM_B2 = 4,
    TROUPE__DP_H_ADAM_1MB2 = 5, /* 1 - b2 */
    TROUPE__DP_H_ADAM_IBC2 = 6, /* 1 / (1 - b2^t) */
    TROUPE__DP_H_ADAM_EPS = 7,
    TROUPE__DP_H_ADAM_LR_BC1 = 8, /* lr / (1 - b1^t) */
    /* gradient clipping (grad_clip > 0), either optimizer */
    TROUPE__DP_H_CLIP = 9,      /* C, the largest global norm */
    TROUPE__DP_H_CLIP_EPS = 10, /* 1e-6, added to the norm (PyTorch's clip_grad_norm_) */
    TROUPE__DP_H_ONE = 11,      /* 1, the clip factor's bound */
    TROUPE__DP_H_ZERO = 12,     /* 0: loss scaling's finiteness check (g * 0 is nan for inf) */
    TROUPE__DP_HYPER_COUNT = 13,
};

/* Host staging nodes for the hyper values (see struct troupe_dp). */
#define TROUPE__DP_HYPER_STAGES 2

/* One local replica: a stream, the chain of contexts built on it (each retained, in creation
 * order; the last one holds every array), its gradient routine (one routine per segment:
 * docs/parallel.md, Overlap) and its merge routines. */
typedef struct troupe__dp_replica {
    troupe_stream_t *stream;
    troupe_context_t **ctxs;
    size_t nctxs, ctxs_cap;
    troupe_routine_t *feed;   /* the minibatch feed (troupe_dp_model_t.feed_comp), or NULL */
    troupe_routine_t **seg;   /* nseg: the gradient routine's segments, run in order */
    troupe_routine_t **merge; /* n_params entries; NULL on a stream that never receives */
} troupe__dp_replica_t;

/* dp_split.c: the segmented gradient routine (docs/parallel.md, Overlap). A plan cuts the
 * gradient comp's top-level items (the root SEQ's items; a root block comment around a SEQ is
 * opened) into nseg >= 1 segments: segment s holds items [seg_end[s - 1], seg_end[s]) (from 0)
 * and ends after the last item that reads or writes a gradient of its bucket (seg_of_grad[i]:
 * the segment whose bucket holds grads[i]); the last one runs to the end. Each bucket's
 * gradients are touched by no later segment, so its allreduce may run while they compute.
 * crossing[0..ncrossing): the nodes the comp writes that more than one segment touches (they
 * must stay in the context between the segments' routines). nseg == 1 (why says why): one
 * top-level item, every gradient last used by the last item, or a crossing node already
 * Virtual or Local. */
typedef struct troupe__dp_split {
    const troupe_asgn_t **items; /* nitems, borrowed from the comp */
    size_t nitems;
    size_t nseg;
    size_t *seg_end;     /* nseg */
    size_t *seg_of_grad; /* n_grads */
    troupe_tnode_t **crossing; /* borrowed from the comp */
    size_t ncrossing;
    char why[160]; /* nseg == 1: the reason, "" otherwise */
} troupe__dp_split_t;
/* Plans the split of comp for grads[0..n_grads) (borrowed for the call; *out borrows comp's
 * trees and nodes: use it while comp lives), a segment at every place a gradient is last
 * used. Errors: RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__dp_split_plan(const troupe_asgn_comp_t *comp,
                                                      troupe_tnode_t *const *grads,
                                                      size_t n_grads, troupe__dp_split_t *out);
/* The same, with buckets of gradients (PyTorch DDP's): a segment ends at such a place only
 * once the gradients last used since the previous cut hold first_bytes (the first segment) or
 * bucket_bytes (the later ones) or more; 0 for both: at every place. */
TROUPE_MUST_USE troupe_status_t troupe__dp_split_plan_buckets(const troupe_asgn_comp_t *comp,
                                                              troupe_tnode_t *const *grads,
                                                              size_t n_grads, size_t first_bytes,
                                                              size_t bucket_bytes,
                                                              troupe__dp_split_t *out);
void troupe__dp_split_free(troupe__dp_split_t *s);
/* With the fused update each bucket's request writes its parameters while later segments
 * compute: *out_late is the index of the first params[i] that a segment after grads[i]'s
 * reads (params[i] and grads[i] of one parameter), else SIZE_MAX. Errors: RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__dp_split_late_param(const troupe_asgn_comp_t *comp,
                                                            const troupe__dp_split_t *s,
                                                            troupe_tnode_t *const *params,
                                                            size_t n_params, size_t *out_late);
/* Refines every crossing node to Materialized (ir/memory_mode.h; the caller's nodes, for good).
 * FAILED_PRECONDITION naming the node when its mode cannot be. */
TROUPE_MUST_USE troupe_status_t troupe__dp_split_materialize(const troupe__dp_split_t *s);
/* Segment seg of comp as a comp of its own (caller owns *out): its items rebuilt with the
 * builders of ir/assign.h, comp's static indices (same names, ranges and ids) and the embedded
 * nodes it mentions. Errors: those of the builders (RESOURCE_EXHAUSTED). */
TROUPE_MUST_USE troupe_status_t troupe__dp_split_comp(const troupe_asgn_comp_t *comp,
                                                      const troupe__dp_split_t *s, size_t seg,
                                                      troupe_asgn_comp_t **out);

/* The per-step breakdown (dp_steplog.c; docs/parallel.md, Step breakdown). All calls accept a
 * NULL record (the step is not logged). */
typedef struct troupe__dp_steplog troupe__dp_steplog_t;
bool troupe__dp_steplog_wanted(int64_t step); /* debug:parallel on, and a logged step */
/* A record for `step` with n replicas and nbk buckets, the update fused into the allreduce
 * (fused), into one pass across the streams with the merge (local), or neither; NULL without
 * memory. */
troupe__dp_steplog_t *troupe__dp_steplog_new(int64_t step, int n, size_t nbk, int exchange,
                                             bool fused, bool local);
void troupe__dp_steplog_begin(troupe__dp_steplog_t *r, troupe_stream_t *owner);
void troupe__dp_steplog_grad(troupe__dp_steplog_t *r, int k, troupe_event_t *ev);
void troupe__dp_steplog_merge(troupe__dp_steplog_t *r, troupe_event_t *ev);
/* which: 0 the bucket's last to_host (staged) or the owner stream's last work before its
 * allreduce (in place: the bucket is ready), 1 its allreduce, 2 its last from_host. */
void troupe__dp_steplog_bucket(troupe__dp_steplog_t *r, size_t b, int which, troupe_event_t *ev);
void troupe__dp_steplog_optimizer(troupe__dp_steplog_t *r, troupe_event_t *ev);
void troupe__dp_steplog_set_host(troupe__dp_steplog_t *r, int64_t host_ns);
/* Drops a reference; the last one logs the line (when the step completed) and frees. */
void troupe__dp_steplog_release(troupe__dp_steplog_t **r_p);

struct troupe_dp {
    troupe_backend_t *backend;
    troupe_optimizer_t opt;
    double grad_clip; /* troupe_dp_config_t.grad_clip: 0 off */
    bool local_only;
    unsigned coll_flags; /* TROUPE_COLL_BF16 when the config compresses, else 0 */
    int n;               /* local replicas */
    int *dev_of;         /* n: the device ordinal replica k runs on */
    /* how a step exchanges, overlaps, updates and accumulates (dp_strategy_impl.h) */
    troupe__dp_strategy_t strat;
    /* staged exchange (dp_exchange.c): the buckets, gradients grads_by_id[bk_first[b] ..
     * bk_first[b + 1]) for b < nbk, cut in grads_by_id's order at troupe_config_fusion_bytes()
     * and at every segment's start; segment s's buckets are [seg_bk[s], seg_bk[s + 1]) */
    size_t nbk;
    size_t *bk_first;
    troupe_coll_tensor_t *host_t; /* staged: the gradients' host tensors, grads_by_id's order */
    size_t *seg_bk; /* nseg + 1 */
    /* overlap (dp_split.c): the gradient routine's nseg segments (1: the comp in one
     * routine), segment s's gradients are grads_by_id[seg_first[s] .. seg_first[s + 1]),
     * seg_of_grad[i] the segment of grads[i]. */
    bool overlap; /* the split is in use (nseg > 1) */
    size_t bucket_first, bucket_bytes; /* the split's bucket caps (troupe__dp_split_plan_buckets) */
    size_t nseg;  /* agreed across ranks */
    troupe_code_t **seg_code; /* nseg */
    size_t *seg_first;        /* nseg + 1 */
    size_t *seg_of_grad;      /* n_params */
    /* accumulation (dp_accum.c; NULL with strat.accum 1): per replica, the gradients' (and the
     * loss's) running sums over a step's micro-steps */
    struct troupe__dp_accum *accum;
    int rank;            /* this rank (0 when local_only) */
    int nranks;          /* ranks (1 when local_only) */
    int64_t replicas;       /* T: the replicas of every rank (n * nranks when they agree) */
    int64_t replica_offset; /* the replicas of the ranks before this one */

    size_t n_params;
    troupe_tnode_t **params;      /* retained */
    troupe_tnode_t **grads;       /* retained */
    /* the grads in exchange order: by segment, in node-id order within one (the order a
     * linked routine packs its arrays in its pool); with one segment, node-id order */
    troupe_tnode_t **grads_by_id;
    troupe_tnode_t *loss;         /* retained, or NULL */
    char *batch_index;
    int64_t num_batches;

    troupe__dp_replica_t *rep; /* n */
    troupe_code_t *feed_code;  /* NULL in the indexed form */
    troupe_code_t **merge_code; /* n_params, NULL when n == 1 */
    troupe_code_t *opt_code;
    troupe_routine_t *opt_routine; /* on replica 0 */
    /* strat.update FUSED (into the allreduce): the routine is compiled and linked but not run
     * (nor are the hyper-parameter uploads);
     * fused_side[s * n_params + j] is side array s (the parameter, then its states) of
     * grads_by_id[j] */
    troupe_tnode_t **fused_side;
    /* strat.update STREAMS: the tree merge, the optimizer step and the copies to the other
     * replicas as one pass on every stream (NULL when not): the merge and optimizer routines
     * are compiled and linked but not run */
    struct troupe__dp_local *local;

    troupe_tnode_t *hyper; /* hosted, TROUPE__DP_HYPER_COUNT doubles */
    /* Staging ring for new hyper values: a step whose values changed writes stage j's host
     * array, uploads it and runs hyper_copy[j] (hyper := stage j) on the owner stream. Writing
     * the host array of a node waits for its in-flight from_host (actors/transfer.h), so
     * alternating stages lets the host run up to TROUPE__DP_HYPER_STAGES steps ahead of the
     * owner stream instead of waiting for the previous step's upload. */
    troupe_tnode_t *hyper_stage[TROUPE__DP_HYPER_STAGES]; /* hosted, like hyper */
    troupe_code_t *hyper_copy_code[TROUPE__DP_HYPER_STAGES];
    troupe_routine_t *hyper_copy[TROUPE__DP_HYPER_STAGES]; /* on replica 0 */
    /* the stage the next change of the values uses */
    int hyper_next;
    /* The values the owner stream's hyper array holds after the steps scheduled so far (valid
     * when hyper_uploaded): a step with bit-identical values uploads nothing (SGD: only after
     * set_lr; AdamW: every step, its bias corrections change). */
    double hyper_last[TROUPE__DP_HYPER_COUNT];
    bool hyper_uploaded;
    int nstate;             /* optimizer state arrays per parameter: 0, 1 (m) or 2 (m, v) */
    troupe_tnode_t **state; /* n_params * nstate, hosted: state[i * nstate + s]; NULL when
                               sharded (zero) */
    struct troupe__dp_zero *zero; /* the sharded state (dp_zero.c), NULL when not sharded */
    troupe_tnode_t **temps; /* optimizer temporaries, retained */
    size_t ntemps, temps_cap;

    int64_t steps;
    /* dynamic loss scaling (troupe_dp_config_t.loss_scaling; dp_optim.c) */
    troupe_dp_precision_t precision;
    bool ls_on;
    double ls_scale, ls_growth, ls_backoff; /* the scale the next step's gradient uses */
    int64_t ls_interval, ls_good, ls_skipped;
    bool ls_pending;     /* the last step's verdict is not read yet */
    double ls_seed_last; /* the seed the replicas' loss_scale nodes hold */
    bool ls_seed_uploaded;
    troupe_tnode_t *ls_node;   /* troupe_dp_model_t.loss_scale, retained */
    troupe_tnode_t *ls_finite; /* hosted double scalar the optimizer routine writes: 0 or nan */
    char *ckpt_note;        /* troupe_dp_checkpoint_note: NULL for none (troupe_free) */
    troupe_dp_plan_t plan;  /* troupe_dp_set_plan: recorded in checkpoints */
    bool progress_tried;    /* TROUPE_PROGRESS_FILE looked at (progress_fd valid) */
    int progress_fd;        /* its descriptor, -1 when none */
    troupe_status_t failed; /* sticky failure of a partially scheduled step */
    char failed_msg[512];
};

/* The fused update's argument (dp_optim.c): the optimizer kind and state count, whether weight
 * decay is on, and the step's hyper-parameters (troupe__dp_hyper_values) rounded to single, as
 * the optimizer routine uses them. */
typedef struct troupe__dp_apply_arg {
    int32_t kind; /* troupe_optimizer_kind_t */
    int32_t nstate;
    int32_t decay; /* weight_decay != 0 */
    float h[TROUPE__DP_HYPER_COUNT];
} troupe__dp_apply_arg_t;
/* The update's loops are cloned for AVX2 and AVX-512 where GCC can (ifunc, chosen when the
 * library loads): the build targets the baseline x86-64, whose SSE2 loop took 2.5 times the
 * generated optimizer routine's time (-march=native) on the main job's 235,146 parameters. */
/* Not under the sanitizers: in the shared library an instrumented ifunc resolver runs while
 * the dynamic loader relocates it, before the sanitizer's runtime is set up (a crash at load). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) &&      \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define TROUPE__DP_CLONED __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define TROUPE__DP_CLONED
#endif

/* The fused update (troupe_coll_apply_fn): side[0] the parameter, side[1..nstate] its state
 * (SGD: m; AdamW: m, v), sum the gradient summed over every replica; the optimizer routine's
 * statements (dp_optim.c) element by element, in single precision, without contractions: the
 * same values within rounding (the routine's code may fuse a product and a sum). */
void troupe__dp_apply(const void *arg, int64_t n, const float *sum, float *const *side);
/* Its id in the fingerprint: the optimizer kind and the state count. */
uint64_t troupe__dp_apply_id(const troupe_dp_t *dp);

typedef struct troupe__dp_local troupe__dp_local_t;
/* What a pass does: FULL (one rank) sums the replicas' gradients, updates replica 0's
 * parameter and state and copies the parameter to the other replicas; with several ranks SUM
 * leaves the sums in replica 0's gradient (before the allreduce) and APPLY updates from it and
 * copies (after). */
typedef enum troupe__dp_local_mode {
    TROUPE__DP_LOCAL_FULL = 0,
    TROUPE__DP_LOCAL_SUM,
    TROUPE__DP_LOCAL_APPLY,
    TROUPE__DP_LOCAL_COPY, /* ZeRO-1: the allreduce updated replica 0; copies to the others */
} troupe__dp_local_mode_t;
/* The plan for dp's replicas, parameters and state (dp borrowed: its nodes must outlive the
 * plan's use in troupe__dp_local_step). Errors: RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__dp_local_new(troupe_dp_t *dp, troupe__dp_local_t **out);
void troupe__dp_local_free(troupe__dp_local_t **l_p); /* rounds in flight keep what they use */
/* Schedules a pass (dp->local) with the step's argument: a lend on every replica's last
 * context; *out_ev0 (may be NULL) gets replica 0's lend's event. On an error the parts already
 * scheduled fail instead of waiting. Errors: those of troupe_lend_arrays. */
TROUPE_MUST_USE troupe_status_t troupe__dp_local_step(troupe_dp_t *dp,
                                                      troupe__dp_local_mode_t mode,
                                                      const troupe__dp_apply_arg_t *arg,
                                                      troupe_event_t **out_ev0);

/* The owner stream's last context (holds the parameters, gradients and optimizer state). */
troupe_context_t *troupe__dp_tail(troupe_dp_t *dp, int k);

/* With the update fused into the allreduce and optimizer state (dp->fused, nstate > 0, several
 * ranks), the state arrays are private side arrays (transport/mpi/collective.h): through shared
 * memory each rank keeps only its chunk current. This gathers them (TROUPE_COLL_UNSHARD) so
 * every rank holds them whole, and waits. Collective: every rank calls it at the same point
 * (troupe_dp_save). No-op otherwise. Errors: the collective's (a failed cluster's status). */
TROUPE_MUST_USE troupe_status_t troupe__dp_unshard(troupe_dp_t *dp);

/* dp_zero.c: ZeRO stage 1's sharded optimizer state. count elements of the gradients end to
 * end (grads_by_id's order), at[i] the first element of parameter i. Each overlap segment's
 * request shards its own span (one segment without overlap): segment g's elements
 * [base[g], base[g] + seg count) hold this rank's shard [base[g] + lo[g], base[g] + hi[g]),
 * kept at shard[s] + off[g] for each of the nstate arrays (len elements in all). */
typedef struct troupe__dp_zero {
    int64_t count, len;
    size_t nseg;
    int64_t *base, *lo, *hi, *off; /* nseg each */
    float *shard[2];
    int64_t *at;
} troupe__dp_zero_t;
/* Whether dp shards its optimizer state (the fused update or the passes across the streams,
 * several ranks, state to keep; dp->strat and dp->nstate set). */
bool troupe__dp_zero_wanted(const troupe_dp_t *dp);
/* Whether the step's allreduce carries the optimizer step: the fused update, or the passes
 * across the streams with sharded state (the passes then only merge and copy). */
bool troupe__dp_update_in_allreduce(const troupe_dp_t *dp);
/* Allocates this rank's zeroed shard into dp->zero. Errors: RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__dp_zero_new(troupe_dp_t *dp);
void troupe__dp_zero_free(troupe__dp_zero_t **z_p);
/* Bytes of optimizer state this rank holds in its shard (0 when not sharded). */
int64_t troupe__dp_zero_bytes(const troupe_dp_t *dp);
/* Collective: fills full[0 .. count) with state array s, every rank's shard broadcast from it.
 * Errors: the broadcasts'. */
TROUPE_MUST_USE troupe_status_t troupe__dp_zero_gather(troupe_dp_t *dp, int s, float *full);
/* Copies the part of parameter i's state array s (values: all its elements) that falls in this
 * rank's shard into it. */
void troupe__dp_zero_load(troupe_dp_t *dp, size_t i, int s, const float *values);
/* Segment g's part of this rank's shard of state array s (the fused request's shard). */
float *troupe__dp_zero_seg_shard(const troupe_dp_t *dp, size_t g, int s);

/* dp_optim.c: the precision of the optimizer state for a parameter of precision p (single,
 * or p when wider). */
troupe_prec_t troupe__dp_state_prec(troupe_prec_t p);
/* Number of state arrays per parameter for opt (SGD: 1 with momentum else 0; AdamW: 2). */
int troupe__dp_nstate(const troupe_optimizer_t *opt);
/* Builds the optimizer comp for every parameter of dp (dp->hyper, dp->state set), appending
 * the temporaries it creates to dp->temps. Caller owns *out. */
TROUPE_MUST_USE troupe_status_t troupe__dp_optimizer_comp(troupe_dp_t *dp,
                                                          troupe_asgn_comp_t **out);
/* Loss scaling before step dp->steps is scheduled: reads the previous step's verdict (waits
 * for it), updates the scale, and writes this step's seed into every replica's loss_scale node
 * when it changed (TROUPE_FAULT overflow:step=N makes step N's seed +inf). No-op when off. */
TROUPE_MUST_USE troupe_status_t troupe__dp_loss_scale_begin(troupe_dp_t *dp);
/* Reads a pending verdict (waits). No-op when off or none is pending. */
TROUPE_MUST_USE troupe_status_t troupe__dp_loss_scale_settle(troupe_dp_t *dp);
/* Checks and takes cfg's precision and loss scaling into dp (INVALID_ARGUMENT naming the
 * field). */
TROUPE_MUST_USE troupe_status_t troupe__dp_loss_scale_config(troupe_dp_t *dp,
                                                             const troupe_dp_config_t *cfg,
                                                             const troupe_dp_model_t *m);
/* Fills h[TROUPE__DP_HYPER_COUNT] for step index `t` (1-based) with dp's optimizer. */
void troupe__dp_hyper_values(const troupe_dp_t *dp, int64_t t, double *h);
/* Validates an optimizer (INVALID_ARGUMENT naming the field and its value). */
TROUPE_MUST_USE troupe_status_t troupe__dp_check_optimizer(const troupe_optimizer_t *opt);

/* dp_agree.c: compares across ranks the library's settings lib[nlib] (troupe_dp_setting_t:
 * name, value), the program's prog[nprog] and learns every rank's replica count, as
 * troupe_dp_agree (`what` prefixes the messages): *out_total and *out_offset as
 * troupe_dp_replicas for `replicas` on this rank. */
TROUPE_MUST_USE troupe_status_t troupe__dp_agree(const troupe_dp_setting_t *lib, size_t nlib,
                                                 const troupe_dp_setting_t *prog, size_t nprog,
                                                 int replicas, const char *what,
                                                 int64_t *out_total, int64_t *out_offset);
/* dp_agree.c: troupe_dp_new's check (docs/parallel.md, Ranks that disagree); sets dp->replicas
 * and dp->replica_offset (dp->n and 0 with local_only, which checks nothing). */
TROUPE_MUST_USE troupe_status_t troupe__dp_agree_config(troupe_dp_t *dp,
                                                        const troupe_dp_config_t *cfg,
                                                        const troupe_dp_model_t *m);
/* dp_ckpt.c: after a step was scheduled, rank 0 writes dp->steps to TROUPE_PROGRESS_FILE when
 * it is set (best effort); _close closes the file (troupe_dp_destroy). */
void troupe__dp_note_progress(troupe_dp_t *dp);
void troupe__dp_close_progress(troupe_dp_t *dp);

/* dp_devices.c: the replicas one device takes (troupe_dp_suggested_streams): on a host backend
 * (`host`) the device's suggestion divided among the `sharers` local ranks that use it, at
 * least 1; on a device backend 1 (a replica's kernels fill the GPU; the suggestion there is the
 * seed's multiprocessor count, 132 on an H100, which would split the minibatch into a replica
 * per multiprocessor). */
int troupe__dp_device_streams(bool host, int suggested, int sharers);

/* dp_devices.c: troupe_dp_suggested_streams over the given devices (n ordinals of b; from_env:
 * TROUPE_DEVICE chose them). */
TROUPE_MUST_USE troupe_status_t troupe__dp_suggested_streams_on(troupe_backend_t *b,
                                                                const int *ordinals, int n,
                                                                bool from_env, int *out);

/* dp.c: waits for every local stream; the first failure with its stream named. */
TROUPE_MUST_USE troupe_status_t troupe__dp_await(troupe_dp_t *dp, const char *what);
/* Syncs an event (configured timeout), releasing it. */
TROUPE_MUST_USE troupe_status_t troupe__dp_sync_event(troupe_event_t **ev_p, const char *what);


/* ---- shared helpers (dp.c) ------------------------------------------------------------------ */

/* Re-records `st` with "<prefix>: <the current last error>". */
TROUPE_MUST_USE troupe_status_t troupe__dp_wrap(troupe_status_t st, const char *prefix);
void troupe__dp_node_name(const troupe_tnode_t *tn, char *buf, size_t cap);
/* Links code on replica r's last context; the routine's context becomes the last one. */
TROUPE_MUST_USE troupe_status_t troupe__dp_link(troupe__dp_replica_t *r, troupe_code_t *code,
                                                troupe_routine_t **out);
/* init_from_host of tn on replica r's last context, which becomes the last one. */
TROUPE_MUST_USE troupe_status_t troupe__dp_upload(troupe__dp_replica_t *r, troupe_tnode_t *tn);
/* The parameter index of grads_by_id[j]. */
size_t troupe__dp_param_of(const troupe_dp_t *dp, size_t j);
/* Uploads into one pool on r the node of each parameter (per_param[i * stride + at]) in the
 * order of the gradients (grads_by_id), so they lie as the gradients do. */
TROUPE_MUST_USE troupe_status_t troupe__dp_upload_by_grad(troupe_dp_t *dp,
                                                          troupe__dp_replica_t *r,
                                                          troupe_tnode_t *const *per_param,
                                                          size_t stride, size_t at,
                                                          const char *what);
/* A new hosted node "<label>[_<suffix>]" of zeros (caller owns *out). */
TROUPE_MUST_USE troupe_status_t troupe__dp_new_hosted(const char *label, const char *suffix,
                                                      troupe_prec_t prec, int ndims,
                                                      const int64_t *dims, troupe_tnode_t **out);

/* dp_schedule.c: the sticky failure of a step that failed while being scheduled, named with
 * `what`; OK when none. */
TROUPE_MUST_USE troupe_status_t troupe__dp_refuse_if_failed(const troupe_dp_t *dp,
                                                            const char *what);

static inline bool troupe__dp_staged(const troupe_dp_t *dp)
{
    return dp->strat.exchange == TROUPE__DP_EXCHANGE_STAGED;
}

/* ---- the strategy (dp_strategy.c) ----------------------------------------------------------- */

/* Resolves dp->strat before anything is compiled: the exchange, what the ranks agree on
 * (exchange, segments, streams), the overlap segments (materializing the nodes that cross
 * them and ordering grads_by_id by segment), the update and the accumulation; each decision
 * and its reason are logged at debug level (subsystem parallel). Errors: those of the
 * agreement's collective, RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__dp_strategy_resolve(troupe_dp_t *dp,
                                                            const troupe_dp_config_t *cfg,
                                                            const troupe_dp_model_t *m);

/* ---- the exchange (dp_exchange.c) ----------------------------------------------------------- */

/* Staged: checks every gradient can be staged (INVALID_ARGUMENT naming it), builds the host
 * tensors and cuts the buckets. No-op otherwise. */
TROUPE_MUST_USE troupe_status_t troupe__dp_exchange_setup(troupe_dp_t *dp);
/* Every replica of every rank takes rank 0's parameters (several ranks; else no-op). */
TROUPE_MUST_USE troupe_status_t troupe__dp_exchange_broadcast(troupe_dp_t *dp);
/* A step's exchange, issued segment by segment (_out) and waited for before the update
 * (_back). `done`: one event per request (in place: per segment; staged: per bucket); staged:
 * `after` the gradients' to_host events (grads_by_id's order); `arg` the step's update, which
 * a FUSED request carries. */
typedef struct troupe__dp_xstep {
    troupe_event_t **done;
    size_t ndone;
    troupe_event_t **after;
    troupe__dp_apply_arg_t arg;
} troupe__dp_xstep_t;
TROUPE_MUST_USE troupe_status_t troupe__dp_xstep_new(troupe_dp_t *dp, troupe__dp_xstep_t *x);
void troupe__dp_xstep_free(troupe_dp_t *dp, troupe__dp_xstep_t *x);
/* Segment g's request(s), once the owner stream holds their local sums (`ready`: the owner
 * stream's last event before, for the breakdown). */
TROUPE_MUST_USE troupe_status_t troupe__dp_xstep_out(troupe_dp_t *dp, troupe__dp_xstep_t *x,
                                                     size_t g, troupe_event_t *ready,
                                                     troupe__dp_steplog_t *rec);
/* The owner stream waits for every request in order (staged: and copies each bucket back). */
TROUPE_MUST_USE troupe_status_t troupe__dp_xstep_back(troupe_dp_t *dp, troupe__dp_xstep_t *x,
                                                      troupe__dp_steplog_t *rec);

/* ---- overlap (dp_split.c) ------------------------------------------------------------------- */

/* Compiles the nseg segments of m's grad_comp into dp->seg_code (the whole comp when
 * there is one). Errors: the compiler's, named with the segment. */
TROUPE_MUST_USE troupe_status_t troupe__dp_split_build(troupe_dp_t *dp,
                                                       const troupe_dp_model_t *m);

/* ---- the update (dp_update.c) --------------------------------------------------------------- */

/* Builds what strat.update needs on the owner stream: the optimizer state, the hyper-parameter
 * node and its staging ring, the optimizer routine (always compiled: the reference the fused
 * forms match bit for bit), and the side arrays (FUSED) or the passes (STREAMS). */
TROUPE_MUST_USE troupe_status_t troupe__dp_update_build(troupe_dp_t *dp);
/* Step 0: this step's hyper-parameters; for the routine, uploaded ahead of the step on the
 * owner stream when they changed; for the fused forms, written into *arg. */
TROUPE_MUST_USE troupe_status_t troupe__dp_update_begin(troupe_dp_t *dp,
                                                        troupe__dp_apply_arg_t *arg);
/* Step 4 after the exchange: the optimizer routine (ROUTINE) or the pass across the streams
 * (STREAMS, which also leaves the parameters on every replica); FUSED ran in the exchange. */
TROUPE_MUST_USE troupe_status_t troupe__dp_update_apply(troupe_dp_t *dp,
                                                        const troupe__dp_apply_arg_t *arg,
                                                        troupe__dp_steplog_t *rec);

/* ---- accumulation (dp_accum.c) -------------------------------------------------------------- */

typedef struct troupe__dp_accum troupe__dp_accum_t;
/* With strat.accum > 1: per replica, sums of the gradients and the loss, and the routines
 * that keep them (set, add, and one fold per segment). Errors: the compiler's and linker's,
 * RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe__dp_accum_build(troupe_dp_t *dp);
void troupe__dp_accum_free(troupe__dp_accum_t **a_p);
/* After micro-step j (< accum - 1) on every replica: sum := grads (j = 0) or sum += grads. */
TROUPE_MUST_USE troupe_status_t troupe__dp_accum_keep(troupe_dp_t *dp, int j);
/* After segment g of the last micro-step on every replica: its gradients += their sums (the
 * last segment: the loss too). *ready (may be NULL) gets replica 0's event. */
TROUPE_MUST_USE troupe_status_t troupe__dp_accum_fold(troupe_dp_t *dp, size_t g,
                                                      troupe_event_t **ready);

#endif /* TROUPE_PARALLEL_DP_IMPL_H */
