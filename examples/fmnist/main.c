/* fmnist — data-parallel Fashion-MNIST trainer (docs/architecture.md §5, §10: the main job).
 *
 *   fmnist [options]                      one process, every stream of the backend
 *   mpiexec -n R fmnist [options]         R ranks, each with --streams replicas
 *
 * Trains the 784-256-128-10 MLP of mlp.h, or with --model cnn its convnet (conv 32-32-64,
 * fc 128), with parallel/dp.h over N streams on every rank: one
 * step takes a global minibatch of --batch rows, split into N*R replica minibatches of
 * batch/(N*R) rows; gradients are averaged over all of them, so the result does not depend on
 * the layout (to rounding). The training set is reordered once with a seeded Fisher-Yates
 * shuffle; minibatch b is rows b*B..b*B+B-1 of it. Each rank reads only the rows its replicas
 * take (loader.h), once, and writes each step's minibatches, laid out a step ahead on a loader
 * thread; --data-layout whole keeps the whole set on the devices instead (the same bits).
 * Every rank prints its `data rank=R ...` line on stderr (docs/trainer.md, Sharded data).
 * After each epoch rank 0 evaluates the test set with a forward routine linked on the owner
 * stream's context and prints one line; while the epoch runs a progress bar takes its place
 * when stdout is a terminal and the run is not under a launcher, whose ranks always see a
 * pseudo-terminal (progress.h). --plot FILE redraws the learning curve as a PNG after every
 * epoch (plot.h).
 * The last line, printed by rank 0 only, is machine-readable:
 *   final test_accuracy=<0..1> samples_per_s=<n> ranks=<r> streams=<s> epochs=<e>
 *
 * Before any work, rank 0 checks that it can write --checkpoint and --curve, and refuses to
 * overwrite an existing checkpoint that this run does not --resume from (--force allows it).
 * Checkpoints commit every --checkpoint-every steps and at every epoch's end; they carry the
 * run's --model, --batch and training-set size (the checkpoint note) and its plan (parallel/dp.h:
 * global batch, steps per epoch, --seed, the schedule's length), so a --resume continues at the
 * exact step and sample, on any ranks x streams that divide --batch (docs/cluster.md "Failures and
 * restarts"); another --model, --batch, --train-limit or --seed is refused, naming the
 * setting (the model before the file's parameters are compared with the run's). The
 * data order: step g of an epoch takes rows g*batch .. g*batch+batch-1 of the shuffled set,
 * whatever the layout (the set's tail that fills no whole step is left out).
 * TROUPE_LOG=info also logs (subsystem tools) the streams chosen and why, the time spent
 * building the routines, and per epoch the timing split (issuing steps, waiting for the
 * streams, evaluation, checkpoint) and the path the merge across ranks took.
 *
 * Exit status: 0 done, 1 a runtime failure (one line on stderr), 2 a bad option (one line on
 * stderr), 75 (EX_TEMPFAIL) a failure of the cluster — TRANSPORT_ERROR or DEADLINE_EXCEEDED: a
 * rank died, hung or became unreachable — after which a restart from the checkpoint may
 * succeed (what `troupe run` restarts). `--help` lists every option with its default.
 */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath */

#include "idx.h"
#include "loader.h"
#include "mlp.h"
#include "plot.h"
#include "progress.h"

#include "actors/troupe.h"
#include "base/clock.h"
#include "base/file_impl.h"
#include "base/log.h"
#include "base/trace.h"
#include "devices/device.h"
#include "parallel/dp.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"
#include "troupe_config.h"

#include "devices/plugin_impl.h" /* why the cuda backend sees no GPU */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define S_DEFAULT_EPOCHS 10
#define S_DEFAULT_BATCH 128
#define S_DEFAULT_SEED 42
#define S_DEFAULT_LR_SGD 0.05
#define S_LOSS_SAMPLES_PER_EPOCH 20 /* dp_last_loss calls per epoch (each one syncs) */

typedef struct opts {
    const char *data;
    int epochs;
    int64_t batch;
    troupe_optimizer_t opt;
    bool lr_set, wd_set, momentum_set;
    double lr, wd, momentum;
    uint64_t seed;
    const char *backend;
    int streams;
    int grad_accum; /* --grad-accum: micro-steps per optimizer step */
    int64_t train_limit, test_limit;
    const char *curve, *checkpoint, *resume, *plot;
    int64_t checkpoint_every; /* steps between checkpoints, 0: at epoch ends only */
    bool cosine;        /* --schedule cosine */
    bool compress_bf16; /* --compress bf16 */
    /* --precision: the linear layers' products (mixed precision; fp16 with loss scaling) */
    troupe_dp_precision_t precision;
    fmnist_feed_t feed; /* --feed */
    bool whole_data;    /* --data-layout whole: every rank keeps the whole training set */
    bool force;         /* --force: overwrite a checkpoint this run does not resume from */

    fmnist_model_kind_t model; /* --model */
} opts_t;

/* The built backends, "cpu, sync" (devices/device.h). */
static const char *s_backends(void)
{
    static char list[128];
    size_t n = 0;
    list[0] = '\0';
    for (size_t i = 0; i < troupe_driver_built_count() && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "",
                              troupe_driver_built_name(i));
    return list;
}

static bool s_backend_built(const char *name)
{
    for (size_t i = 0; i < troupe_driver_built_count(); i++)
        if (!strcmp(troupe_driver_built_name(i), name))
            return true;
    return false;
}

static void s_help(void)
{
    troupe_optimizer_t sgd = troupe_optimizer_default(TROUPE_OPT_SGD);
    troupe_optimizer_t adamw = troupe_optimizer_default(TROUPE_OPT_ADAMW);
    printf("usage: fmnist [options]            (under mpiexec: one process per rank)\n"
           "Trains an MLP or a convnet on Fashion-MNIST, data-parallel over streams and ranks.\n"
           "options (default in brackets):\n"
           "  --model NAME         mlp (784-256-128-10) or cnn (conv3x3 32, conv3x3 32, maxpool\n"
           "                       2, conv3x3 64, maxpool 2, linear 128, linear 10) [mlp]\n"
           "  --data DIR           IDX files {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz\n"
           "                       [%s]\n"
           "  --epochs N           passes over the training set [%d]\n"
           "  --batch N            global minibatch rows per step, divided evenly over\n"
           "                       ranks x streams [%d]\n"
           "  --optimizer NAME     sgd | adamw [sgd]\n"
           "  --lr X               learning rate [%g for sgd, %g for adamw]\n"
           "  --momentum X         SGD momentum [%g]\n"
           "  --weight-decay X     [%g for sgd, %g for adamw]\n"
           "  --schedule NAME      learning rate over the run: constant, or cosine (from --lr\n"
           "                       down to 0 at the last step, per step) [cosine]\n"
           "  --seed N             shuffle and initialisation seed [%d]\n"
           "  --backend NAME       one of the built backends: %s\n"
           "                       [$TROUPE_BACKEND, else cpu]; each rank uses the devices\n"
           "                       TROUPE_DEVICE names, else its node-local rank's share\n"
           "  --streams N          replicas per rank over its devices, 0 = the backend's\n"
           "                       suggestion [0]\n"
           "  --grad-accum K       micro-steps per optimizer step: each replica sums the\n"
           "                       gradients of K minibatches, --batch is divided over\n"
           "                       ranks x streams x K [1]\n"
           "  --precision NAME     the matrix products: fp32, bf16 or fp16 (bfloat16 or half\n"
           "                       copies of their factors, fp32 sums; parameters, gradients\n"
           "                       and the optimizer stay fp32; fp16 adds dynamic loss\n"
           "                       scaling, skipped steps in the last line) [fp32]\n"
           "  --compress NAME      gradients between ranks: none (exact single precision) or\n"
           "                       bf16 (half the bytes, bfloat16 rounding) [none]\n"
           "  --feed NAME          how a step reaches its minibatch: fed (a feed routine copies\n"
           "                       it into fixed nodes, so the gradient routine keeps one\n"
           "                       binding and replays as a graph), indexed (the gradient\n"
           "                       routine reads the data set at the minibatch's index), or\n"
           "                       auto (fed on a backend with graphs: cuda) [auto]\n"
           "  --data-layout NAME   share: each rank keeps only the training images its\n"
           "                       replicas take and writes each step's minibatches, which\n"
           "                       a loader thread prepares a step ahead; whole: every rank\n"
           "                       keeps the whole shuffled set on its devices (the same\n"
           "                       batches, the same bits) [share]\n"
           "  --train-limit N      use the first N training images, 0 = all [0]\n"
           "  --test-limit N       evaluate the first N test images, 0 = all [0]\n"
           "  --curve FILE         CSV epoch,loss,test_accuracy,samples_per_s,seconds (seconds:\n"
           "                       this run's training time so far, evaluation excluded;\n"
           "                       appended to with --resume) [none]\n"
           "  --plot FILE          PNG of the learning curve (training loss and test accuracy\n"
           "                       per epoch), redrawn after every epoch [none]%s\n"
           "  --checkpoint FILE    parameters, optimizer state and the run's position, written\n"
           "                       atomically after every epoch; an existing FILE is only\n"
           "                       overwritten when this run resumes from it, or with --force\n"
           "                       [none]\n"
           "  --checkpoint-every S also commit the checkpoint every S steps, 0 = epoch ends\n"
           "                       only [0]\n"
           "  --resume FILE        continue a checkpoint's run at its step and sample, on any\n"
           "                       ranks x streams; the run must use its --batch, --train-limit\n"
           "                       and --seed [none]\n"
           "  --force              let --checkpoint overwrite a file this run does not resume\n"
           "                       from\n"
           "  --help               this text\n"
           "Last line: final test_accuracy=<0..1> samples_per_s=<n> ranks=<r> streams=<s> "
           "epochs=<e>\n"
           "Exit status: 0 done, 1 runtime failure, 2 bad option, 75 the cluster failed (a rank\n"
           "died or is unreachable: a restart from the checkpoint may succeed).\n",
           FMNIST_DEFAULT_DIR, S_DEFAULT_EPOCHS, S_DEFAULT_BATCH, S_DEFAULT_LR_SGD, adamw.lr,
           sgd.momentum, sgd.weight_decay, adamw.weight_decay, S_DEFAULT_SEED, s_backends(),
           fmnist_plot_help_note());
}

/* ---- option parsing ---------------------------------------------------------------------- */

static bool s_int(const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool s_real(const char *text, double lo, double hi, bool lo_open, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
        return false;
    *out = v;
    return true;
}

/* Parses argv into *o. On a bad option writes one line into err and returns false. */
static bool s_parse(int argc, char **argv, opts_t *o, bool *help, char *err, size_t cap)
{
    memset(o, 0, sizeof *o);
    o->data = FMNIST_DEFAULT_DIR;
    o->epochs = S_DEFAULT_EPOCHS;
    o->batch = S_DEFAULT_BATCH;
    o->grad_accum = 1;
    o->opt.kind = TROUPE_OPT_SGD;
    o->seed = S_DEFAULT_SEED;
    o->cosine = true;
    *help = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = true;
            return true;
        }
        if (strncmp(a, "--", 2) != 0) {
            troupe__format_fit(err, cap, "unexpected argument '%s' (see --help)", a);
            return false;
        }
        /* --name value or --name=value */
        char name[64];
        const char *val = NULL, *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof name) {
            troupe__format_fit(err, cap, "unknown option '%s' (see --help)", a);
            return false;
        }
        memcpy(name, a, len);
        name[len] = '\0';
        if (!strcmp(name, "--force")) {
            if (eq) {
                troupe__format_fit(err, cap, "option --force takes no value (got '%s')", eq + 1);
                return false;
            }
            o->force = true;
            continue;
        }
        static const char *const known[] = {
            "--data",        "--epochs",       "--batch", "--optimizer",        "--lr",
            "--momentum",    "--weight-decay", "--seed",  "--backend",          "--streams",
            "--train-limit", "--test-limit",   "--curve", "--checkpoint",       "--resume",
            "--schedule",    "--compress",     "--plot",  "--checkpoint-every", "--feed",
            "--model",       "--grad-accum",   "--data-layout",
            "--precision"};
        bool ok = false;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            ok |= !strcmp(name, known[k]);
        if (!ok) {
            troupe__format_fit(err, cap, "unknown option '%s' (see --help)", name);
            return false;
        }
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else {
            troupe__format_fit(err, cap, "option %s needs a value (see --help)", name);
            return false;
        }
        int64_t n = 0;
        const char *want = NULL;
        if (!strcmp(name, "--data")) {
            o->data = val;
        } else if (!strcmp(name, "--epochs")) {
            if (s_int(val, 1, 100000, &n))
                o->epochs = (int)n;
            else
                want = "an integer in 1..100000";
        } else if (!strcmp(name, "--batch")) {
            if (s_int(val, 1, 1 << 20, &n))
                o->batch = n;
            else
                want = "an integer in 1..1048576";
        } else if (!strcmp(name, "--optimizer")) {
            if (troupe_optimizer_parse(val, &o->opt.kind) != TROUPE_OK)
                want = "sgd or adamw";
        } else if (!strcmp(name, "--lr")) {
            if (s_real(val, 0, 100, true, &o->lr))
                o->lr_set = true;
            else
                want = "a number in (0, 100]";
        } else if (!strcmp(name, "--momentum")) {
            if (s_real(val, 0, 0.999999, false, &o->momentum))
                o->momentum_set = true;
            else
                want = "a number in [0, 1)";
        } else if (!strcmp(name, "--weight-decay")) {
            if (s_real(val, 0, 10, false, &o->wd))
                o->wd_set = true;
            else
                want = "a number in [0, 10]";
        } else if (!strcmp(name, "--seed")) {
            if (s_int(val, 0, INT64_MAX, &n))
                o->seed = (uint64_t)n;
            else
                want = "a non-negative integer";
        } else if (!strcmp(name, "--backend")) {
            static char built[160];
            snprintf(built, sizeof built, "one of the built backends (%s)", s_backends());
            if (s_backend_built(val))
                o->backend = val;
            else
                want = built;
        } else if (!strcmp(name, "--streams")) {
            if (s_int(val, 0, 64, &n))
                o->streams = (int)n;
            else
                want = "an integer in 0..64";
        } else if (!strcmp(name, "--grad-accum")) {
            if (s_int(val, 1, 1024, &n))
                o->grad_accum = (int)n;
            else
                want = "an integer in 1..1024";
        } else if (!strcmp(name, "--train-limit") || !strcmp(name, "--test-limit")) {
            if (!s_int(val, 0, INT64_MAX, &n))
                want = "a non-negative integer";
            else if (name[2] == 't' && name[3] == 'r')
                o->train_limit = n;
            else
                o->test_limit = n;
        } else if (!strcmp(name, "--schedule")) {
            if (!strcmp(val, "cosine") || !strcmp(val, "constant"))
                o->cosine = val[1] == 'o' && val[2] == 's';
            else
                want = "constant or cosine";
        } else if (!strcmp(name, "--compress")) {
            if (!strcmp(val, "none") || !strcmp(val, "bf16"))
                o->compress_bf16 = val[0] == 'b';
            else
                want = "none or bf16";
        } else if (!strcmp(name, "--precision")) {
            if (troupe_dp_precision_parse(val, &o->precision) != TROUPE_OK)
                want = "fp32, bf16 or fp16";
        } else if (!strcmp(name, "--model")) {
            if (fmnist_model_parse(val, &o->model) != TROUPE_OK)
                want = "mlp or cnn";
        } else if (!strcmp(name, "--feed")) {
            if (fmnist_feed_parse(val, &o->feed) != TROUPE_OK)
                want = "auto, fed or indexed";
        } else if (!strcmp(name, "--data-layout")) {
            if (!strcmp(val, "share") || !strcmp(val, "whole"))
                o->whole_data = val[0] == 'w';
            else
                want = "share or whole";
        } else if (!strcmp(name, "--curve")) {
            o->curve = val;
        } else if (!strcmp(name, "--checkpoint-every")) {
            if (!s_int(val, 0, INT64_MAX, &o->checkpoint_every))
                want = "a non-negative integer";
        } else if (!strcmp(name, "--checkpoint")) {
            o->checkpoint = val;
        } else if (!strcmp(name, "--resume")) {
            o->resume = val;
        } else if (!strcmp(name, "--plot")) {
            o->plot = val;
        }
        if (want) {
            troupe__format_fit(err, cap, "option %s: expected %s, got '%s'", name, want, val);
            return false;
        }
        if (!*val) {
            troupe__format_fit(err, cap, "option %s: empty value", name);
            return false;
        }
    }
    troupe_optimizer_t d = troupe_optimizer_default(o->opt.kind);
    o->opt.lr = o->lr_set ? o->lr : (o->opt.kind == TROUPE_OPT_SGD ? S_DEFAULT_LR_SGD : d.lr);
    o->opt.momentum = o->momentum_set ? o->momentum : d.momentum;
    o->opt.weight_decay = o->wd_set ? o->wd : d.weight_decay;
    o->opt.beta1 = d.beta1;
    o->opt.beta2 = d.beta2;
    o->opt.eps = d.eps;
    if (o->checkpoint_every > 0 && !o->checkpoint) {
        troupe__format_fit(err, cap, "option --checkpoint-every needs --checkpoint FILE");
        return false;
    }
    if (o->momentum_set && o->opt.kind != TROUPE_OPT_SGD) {
        troupe__format_fit(err, cap, "option --momentum applies to --optimizer sgd only");
        return false;
    }
    return true;
}

/* ---- the run ------------------------------------------------------------------------------- */

/* The options every rank must give alike (troupe_dp_agree, troupe_dp_config_t.settings): those
 * that decide the results. Not --streams (ranks may run different numbers: the global batch is
 * split over all replicas), --data (a path per node), --backend, --test-limit (rank 0
 * evaluates), the output files. */
enum {
    S_SET_EPOCHS,
    S_SET_BATCH,
    S_SET_OPT,
    S_SET_LR,
    S_SET_MOM,
    S_SET_WD,
    S_SET_SCHEDULE,
    S_SET_SEED,
    S_SET_COMPRESS,
    S_SET_TRAIN_LIMIT,
    S_SET_MODEL,
    S_SET_GRAD_ACCUM,
    S_SET_DATA_LAYOUT,
    S_SET_PRECISION,
    S_NSETTINGS
};

typedef struct run_settings {
    char values[S_NSETTINGS][32];
    troupe_dp_setting_t list[S_NSETTINGS];
} run_settings_t;

typedef struct run {
    opts_t o;
    run_settings_t settings;
    int rank, ranks, streams;
    troupe_dp_devices_t devices; /* this rank's (troupe_dp_pick_devices) */
    int64_t replicas; /* over all ranks: --batch is split over them (troupe_dp_replicas) */
    bool tty;         /* progress lines update in place (rank 0, stdout a terminal, one process) */
    /* the training set: whole (--data-layout whole) or this rank's share (loader.h), and the
     * images a pass has in all (--train-limit applied) */
    fmnist_dataset_t train, test;
    int64_t train_count;
    fmnist_share_t share;    /* --data-layout share */
    fmnist_loader_t *loader; /* --data-layout share: each step's minibatches */
    fmnist_mlp_t *mlp;
    fmnist_mlp_eval_t *eval;
    troupe_dp_t *dp;
    troupe_code_t *eval_code;
    troupe_routine_t *eval_routine;
    FILE *curve;
    fmnist_progress_t progress; /* the bar within an epoch (r.tty) */
    fmnist_plot_t plot;         /* --plot */
    int64_t saved_step;         /* the step of this run's last checkpoint, -1 before one */
} run_t;

static void s_settings(const opts_t *o, run_settings_t *s)
{
    static const char *const names[S_NSETTINGS] = {
        [S_SET_EPOCHS] = "--epochs",     [S_SET_BATCH] = "--batch",
        [S_SET_OPT] = "--optimizer",     [S_SET_LR] = "--lr",
        [S_SET_MOM] = "--momentum",      [S_SET_WD] = "--weight-decay",
        [S_SET_SCHEDULE] = "--schedule", [S_SET_SEED] = "--seed",
        [S_SET_COMPRESS] = "--compress", [S_SET_TRAIN_LIMIT] = "--train-limit",
        [S_SET_MODEL] = "--model",       [S_SET_GRAD_ACCUM] = "--grad-accum",
        [S_SET_DATA_LAYOUT] = "--data-layout",
        [S_SET_PRECISION] = "--precision"};
    char(*v)[32] = s->values;
    snprintf(v[S_SET_EPOCHS], sizeof v[0], "%d", o->epochs);
    snprintf(v[S_SET_BATCH], sizeof v[0], "%lld", (long long)o->batch);
    snprintf(v[S_SET_OPT], sizeof v[0], "%s", troupe_optimizer_name(o->opt.kind));
    snprintf(v[S_SET_LR], sizeof v[0], "%g", o->opt.lr);
    snprintf(v[S_SET_MOM], sizeof v[0], "%g", o->opt.momentum);
    snprintf(v[S_SET_WD], sizeof v[0], "%g", o->opt.weight_decay);
    snprintf(v[S_SET_SCHEDULE], sizeof v[0], "%s", o->cosine ? "cosine" : "constant");
    snprintf(v[S_SET_SEED], sizeof v[0], "%llu", (unsigned long long)o->seed);
    snprintf(v[S_SET_COMPRESS], sizeof v[0], "%s", o->compress_bf16 ? "bf16" : "none");
    snprintf(v[S_SET_TRAIN_LIMIT], sizeof v[0], "%lld", (long long)o->train_limit);
    snprintf(v[S_SET_MODEL], sizeof v[0], "%s", fmnist_model_name(o->model));
    snprintf(v[S_SET_GRAD_ACCUM], sizeof v[0], "%d", o->grad_accum);
    snprintf(v[S_SET_DATA_LAYOUT], sizeof v[0], "%s", o->whole_data ? "whole" : "share");
    snprintf(v[S_SET_PRECISION], sizeof v[0], "%s", troupe_dp_precision_name(o->precision));
    for (int i = 0; i < S_NSETTINGS; i++)
        s->list[i] = (troupe_dp_setting_t){names[i], v[i]};
}

/* The run in progress, for s_die's teardown. */
static run_t *s_active;

/* Releases everything the run holds (NULL-safe members): the driver's streams are awaited and
 * its backend closed, so no actor thread outlives main. */
static void s_teardown(run_t *r)
{
    if (r->curve && fclose(r->curve) != 0)
        fprintf(stderr, "fmnist: writing %s: %s\n", r->o.curve, strerror(errno));
    r->curve = NULL;
    fmnist_plot_free(&r->plot);
    troupe_routine_release(&r->eval_routine);
    troupe_code_release(&r->eval_code);
    troupe_dp_destroy(&r->dp);
    fmnist_loader_destroy(&r->loader);
    fmnist_mlp_eval_destroy(&r->eval);
    fmnist_mlp_destroy(&r->mlp);
    fmnist_dataset_free(&r->train);
    fmnist_dataset_free(&r->test);
}

/* A runtime failure of status `st`: one line on stderr, then exit status 1, or 75 when the
 * cluster failed (TRANSPORT_ERROR, DEADLINE_EXCEEDED: worth a restart). Under a distributed cluster
 * this rank leaves it first (troupe_cluster_leave: no MPI_Finalize, which would wait for peers that
 * may be dead), and the launcher ends the other ranks on the non-zero exit; the run is torn down
 * before the process exits, so the actor threads stop first. */
static void s_die(troupe_status_t failed, const char *what)
{
    char line[1400];
    snprintf(line, sizeof line, "fmnist: %s%s%s", what, *troupe_last_error() ? ": " : "",
             troupe_last_error());
    fprintf(stderr, "%s\n", line);
    fflush(stdout);
    troupe_status_t st = TROUPE_OK;
    if (troupe_cluster_is_distributed())
        st = troupe_cluster_leave(line);
    if (s_active)
        s_teardown(s_active);
    if (st == TROUPE_OK)
        st = troupe_cluster_finalize();
    (void)st; /* already failing: its message would repeat the first */
    exit(failed == TROUPE_TRANSPORT_ERROR || failed == TROUPE_DEADLINE_EXCEEDED ? 75 : 1);
}

#define CHECK(expr, what)                                                                          \
    do {                                                                                           \
        troupe_status_t check_st_ = (expr);                                                        \
        if (check_st_ != TROUPE_OK)                                                                \
            s_die(check_st_, what);                                                                \
    } while (0)

/* Stops the run because it diverged: `what` ("the loss is NaN", ...) at `step` (epoch, step s
 * of the epoch's); one line with what to do and what became of the checkpoint, exit status 1.
 * Nothing is written after it: the curve keeps its finite rows and the checkpoint, if any, the
 * last state saved, whose parameters were checked finite. */
static void s_diverged(const run_t *r, const char *what, int64_t step, int epoch, int64_t s,
                       int64_t steps_per_epoch)
{
    char kept[600];
    if (!r->o.checkpoint)
        snprintf(kept, sizeof kept, "no checkpoint was asked for (--checkpoint)");
    else if (r->saved_step >= 0)
        snprintf(kept, sizeof kept, "%.400s keeps the last state with finite parameters, step %lld",
                 r->o.checkpoint, (long long)r->saved_step);
    else
        snprintf(kept, sizeof kept, "%.400s was not written%s", r->o.checkpoint,
                 r->o.resume ? " by this run (it holds the state it resumed from)" : "");
    (void)troupe_error_set(TROUPE_FAILED_PRECONDITION,
                           "%s at step %lld (epoch %d, step %lld of %lld): the training diverged; "
                           "lower --lr (%g); %s",
                           what, (long long)step, epoch + 1, (long long)s,
                           (long long)steps_per_epoch, r->o.opt.lr, kept);
    s_die(TROUPE_FAILED_PRECONDITION, "stopped");
}

static void s_check_loss(const run_t *r, double loss, int64_t step, int epoch, int64_t s,
                         int64_t steps_per_epoch)
{
    if (!isfinite(loss))
        s_diverged(r, isnan(loss) ? "the loss is NaN" : "the loss is infinite", step, epoch, s,
                   steps_per_epoch);
}

static troupe_status_t s_params_finite(run_t *r, bool *out)
{
    *out = true;
    troupe_status_t st = troupe_dp_params_to_host(r->dp);
    for (int i = 0; st == TROUPE_OK && i < r->mlp->nparams && *out; i++) {
        size_t n = (size_t)troupe_tnode_num_elems(r->mlp->params[i]);
        double *v = malloc(n * sizeof *v);
        if (!v)
            return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "out of memory");
        st = troupe_tnode_get_values(r->mlp->params[i], v, n);
        for (size_t k = 0; st == TROUPE_OK && k < n; k++)
            if (!isfinite(v[k])) {
                *out = false;
                break;
            }
        free(v);
    }
    return st;
}

/* Saves the checkpoint after `step`, unless the parameters are not finite (then stops). Every
 * rank holds the same parameters, so every rank decides alike (the save is collective). */
static void s_save(run_t *r, int64_t step, int epoch, int64_t s, int64_t steps_per_epoch)
{
    bool finite = true;
    CHECK(s_params_finite(r, &finite), "checking the parameters");
    if (!finite)
        s_diverged(r, "the parameters are not finite", step, epoch, s, steps_per_epoch);
    CHECK(troupe_dp_save(r->dp, r->o.checkpoint), "writing the checkpoint");
    r->saved_step = step;
}

static double s_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A backend without devices (cuda on a machine without a GPU or driver): FAILED_PRECONDITION
 * naming it and, for cuda, the reason its runtime gives. */
static troupe_status_t s_no_device(const char *backend)
{
    char why[320] = "";
    const troupe__cuda_plugin_t *cuda = NULL;
    if (strcmp(backend, "cuda") == 0 && troupe__cuda_plugin_load(&cuda) == TROUPE_OK)
        cuda->why_no_device(why, sizeof why);
    return troupe_error_set(TROUPE_FAILED_PRECONDITION, "backend %s has no device%s%s%s", backend,
                            why[0] ? " (" : "", why, why[0] ? ")" : "");
}

/* This rank's devices (TROUPE_DEVICE, else its node-local rank's share: parallel/dp.h) into
 * dv, and the number of replicas per rank dp will use: --streams, else the backend's
 * suggestion per device summed over them (parallel/dp.c's rule). */
static int s_resolve_streams(const opts_t *o, troupe_dp_devices_t *dv)
{
    troupe_backend_t *b = NULL;
    int n = 1, ndev = 0;
    CHECK(troupe_backend_open(o->backend, TROUPE_MOST_PARALLEL_STREAMS, &b), "opening the backend");
    troupe_status_t st = troupe_num_devices(b, &ndev);
    char name[64];
    snprintf(name, sizeof name, "%s", troupe_backend_name(b));
    if (st == TROUPE_OK && ndev == 0)
        st = s_no_device(name);
    if (st == TROUPE_OK)
        st = troupe_dp_pick_devices(b, dv);
    if (st == TROUPE_OK && o->streams <= 0)
        st = troupe_dp_suggested_streams(b, &n);
    troupe_backend_close(&b); /* before a failure exits: its stream threads must stop */
    CHECK(st, "choosing this rank's devices and streams");
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS, "fmnist: rank %d on %s device(s) %d..%d (%d): %s",
               troupe_cluster_rank(), name, dv->ordinals[0], dv->ordinals[dv->n - 1], dv->n,
               dv->why);
    if (o->streams > 0) {
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS, "fmnist: %d stream(s) per rank: --streams",
                   o->streams);
        return o->streams;
    }
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS,
               "fmnist: %d stream(s) per rank: the backend's suggestion for most_parallel_streams, "
               "shared by the %d rank(s) of this node on a host backend (troupe_dp_suggested_streams)",
               n, troupe_cluster_local_size());
    return n;
}

/* ---- output paths, checked before any work ------------------------------------------------ */

/* Whether paths a and b name one existing file. */
static bool s_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Whether paths a and b name one file, existing or not: the same file, or the same name in the
 * same directory (the directories compared through realpath). */
static bool s_same_path(const char *a, const char *b)
{
    if (strcmp(a, b) == 0 || s_same_file(a, b))
        return true;
    char da[4096], db[4096], ra[PATH_MAX], rb[PATH_MAX];
    snprintf(da, sizeof da, "%s", a);
    snprintf(db, sizeof db, "%s", b);
    const char *ba = strrchr(a, '/') ? strrchr(a, '/') + 1 : a;
    const char *bb = strrchr(b, '/') ? strrchr(b, '/') + 1 : b;
    if (strcmp(ba, bb) != 0)
        return false;
    char *sa = strrchr(da, '/'), *sb = strrchr(db, '/');
    const char *pa = sa ? (sa == da ? "/" : (*sa = '\0', da)) : ".";
    const char *pb = sb ? (sb == db ? "/" : (*sb = '\0', db)) : ".";
    return realpath(pa, ra) && realpath(pb, rb) && strcmp(ra, rb) == 0;
}

/* Whether an existing, non-empty `path` starts with `magic` (a missing or empty file: yes). */
static bool s_starts_with(const char *path, const char *magic, size_t len)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
        return true;
    char head[32] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return true; /* the open for writing names the problem */
    size_t got = fread(head, 1, len, f);
    fclose(f);
    return got == len && memcmp(head, magic, len) == 0;
}

/* Two outputs (or an output and --resume, other than --checkpoint's own) on one path, and
 * --curve/--plot onto a file that is not a curve or a picture. */
static bool s_check_paths(const opts_t *o, char *err, size_t cap)
{
    const struct {
        const char *opt, *path;
    } p[] = {{"--checkpoint", o->checkpoint}, {"--curve", o->curve}, {"--plot", o->plot},
             {"--resume", o->resume}};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        for (size_t j = i + 1; j < sizeof p / sizeof p[0]; j++) {
            if (!p[i].path || !p[j].path || (i == 0 && j == 3))
                continue;
            if (s_same_path(p[i].path, p[j].path)) {
                troupe__format_fit(err, cap,
                                   "options %s and %s name one file, '%.300s'; give each its own",
                                   p[i].opt, p[j].opt, p[j].path);
                return false;
            }
        }
    static const char curve_head[] = "epoch,loss,test_accuracy";
    if (o->curve && !s_starts_with(o->curve, curve_head, sizeof curve_head - 1)) {
        troupe__format_fit(
            err, cap,
            "option --curve: '%.300s' exists and is not a learning curve (its first line is "
            "not '%s,...'); remove it or choose another file",
            o->curve, curve_head);
        return false;
    }
    if (o->plot && !s_starts_with(o->plot, "\x89PNG\r\n\x1a\n", 8)) {
        troupe__format_fit(
            err, cap,
            "option --plot: '%.300s' exists and is not a PNG picture; remove it or choose "
            "another file",
            o->plot);
        return false;
    }
    return true;
}

/* Rank 0: can the checkpoint be written, and may it be? Opens the curve file (r->curve).
 * Returns false with one line in err (a bad option). */
static bool s_check_outputs(run_t *r, char *err, size_t cap)
{
    const opts_t *o = &r->o;
    if (!s_check_paths(o, err, cap))
        return false;
    if (o->checkpoint) {
        struct stat st;
        if (stat(o->checkpoint, &st) == 0) {
            if (S_ISDIR(st.st_mode)) {
                troupe__format_fit(err, cap, "option --checkpoint: '%s' is a directory",
                                   o->checkpoint);
                return false;
            }
            if (!o->force && !(o->resume && s_same_file(o->checkpoint, o->resume))) {
                troupe__format_fit(
                    err, cap,
                    "option --checkpoint: '%s' exists and this run does not resume from "
                    "it; add --resume %s to continue that run, or --force to overwrite it",
                    o->checkpoint, o->checkpoint);
                return false;
            }
        }
        /* a file beside it, as troupe_dp_save creates its temporary */
        if (troupe__file_check_writable(o->checkpoint) != TROUPE_OK) {
            troupe__format_fit(err, cap, "option --checkpoint: %s", troupe_last_error());
            return false;
        }
    }
    if (!fmnist_plot_open(&r->plot, o->plot, o->resume ? o->curve : NULL, err, cap))
        return false;
    if (o->curve) {
        r->curve = fopen(o->curve, o->resume ? "a" : "w");
        if (!r->curve) {
            troupe__format_fit(err, cap, "option --curve: cannot write '%s': %s", o->curve,
                               strerror(errno));
            return false;
        }
        if (ftell(r->curve) == 0)
            fprintf(r->curve, "epoch,loss,test_accuracy,samples_per_s,seconds\n");
    }
    return true;
}

/* Rank 0's verdict (0: go on, else an exit status) for every rank. */
static int32_t s_agree(int32_t verdict)
{
    if (!troupe_cluster_is_distributed())
        return verdict;
    troupe_coll_tensor_t t = {.data = &verdict, .count = 1, .prec = TROUPE_PREC_INT32,
                              .name = "fmnist verdict"};
    troupe_event_t *ev = NULL;
    CHECK(troupe_broadcast(&t, 1, 0, &ev), "agreeing on the options");
    troupe_status_t st = troupe_event_sync(ev, troupe_config_timeout_ns());
    troupe_event_release(&ev);
    CHECK(st, "agreeing on the options");
    return verdict;
}

/* ---- resuming ------------------------------------------------------------------------------ */

/* The checkpoint note of this run: what a resumed run must repeat. The model comes last, so
 * that notes written before --model existed (an MLP's) still parse. */
static void s_note(const run_t *r, char *note, size_t cap)
{
    snprintf(note, cap,
             "fmnist batch=%lld train_images=%lld train_limit=%lld model=%s precision=%s",
             (long long)r->o.batch, (long long)r->train_count, (long long)r->o.train_limit,
             fmnist_model_name(r->o.model), troupe_dp_precision_name(r->o.precision));
}

/* Before troupe_dp_load compares the file's parameters with the model's: was the checkpoint
 * written for this run's --model (a note without one: the MLP)? A file that cannot be read
 * passes here, for troupe_dp_load to name its problem. Returns false with one line in err. */
static bool s_check_resume_model(const run_t *r, char *err, size_t cap)
{
    troupe_dp_checkpoint_info_t *info = calloc(1, sizeof *info);
    if (!info || troupe_dp_checkpoint_read(r->o.resume, info) != TROUPE_OK) {
        free(info);
        return true;
    }
    const char *at = strstr(info->note, " model=");
    char model[16] = "mlp";
    if (strncmp(info->note, "fmnist ", 7) == 0 && at)
        sscanf(at, " model=%15s", model);
    bool ok = strcmp(model, fmnist_model_name(r->o.model)) == 0;
    if (!ok)
        snprintf(err, cap,
                 "option --model: checkpoint '%s' was written by --model %s, this run has "
                 "--model %s; resume with --model %s",
                 r->o.resume, model, fmnist_model_name(r->o.model), model);
    free(info);
    return ok;
}

/* After troupe_dp_load: does the checkpoint continue this run (its --batch, training set and,
 * with a plan (format 3), --seed)? A file without a plan (format 2) must end at an epoch.
 * Returns false with one line in err naming the differing setting. */
static bool s_check_resume(const run_t *r, int64_t steps_per_epoch, char *err, size_t cap)
{
    const opts_t *o = &r->o;
    const char *note = troupe_dp_checkpoint_note(r->dp);
    long long batch = 0, images = 0, limit = 0;
    int64_t done = troupe_dp_steps_done(r->dp);
    if (note && sscanf(note, "fmnist batch=%lld train_images=%lld train_limit=%lld", &batch,
                       &images, &limit) == 3) {
        if (batch != o->batch) {
            troupe__format_fit(
                err, cap,
                "option --batch: checkpoint '%s' was written with --batch %lld, not %lld; "
                "resume with --batch %lld",
                o->resume, batch, (long long)o->batch, batch);
            return false;
        }
        if (images != r->train_count) {
            troupe__format_fit(
                err, cap,
                "option --train-limit: checkpoint '%s' was trained on %lld images "
                "(--train-limit %lld), this run has %lld; resume with --train-limit %lld",
                o->resume, images, limit, (long long)r->train_count, limit);
            return false;
        }
    }
    troupe_dp_plan_t plan = troupe_dp_plan(r->dp);
    if (plan.global_batch > 0 && plan.data_seed != o->seed) {
        troupe__format_fit(
            err, cap,
            "option --seed: checkpoint '%s' was written with --seed %llu, not %llu (another "
            "data order); resume with --seed %llu",
            o->resume, (unsigned long long)plan.data_seed, (unsigned long long)o->seed,
            (unsigned long long)plan.data_seed);
        return false;
    }
    if (plan.global_batch > 0 && plan.steps_per_epoch != steps_per_epoch) {
        troupe__format_fit(
            err, cap,
            "option --resume: checkpoint '%s' has %lld steps per epoch, this run %lld; "
            "resume with the --batch and --train-limit it was written with",
            o->resume, (long long)plan.steps_per_epoch, (long long)steps_per_epoch);
        return false;
    }
    if (plan.global_batch == 0 && done % steps_per_epoch != 0) {
        troupe__format_fit(
            err, cap,
            "option --resume: checkpoint '%s' holds %lld steps, not a whole number of "
            "epochs of %lld steps (--batch %lld over %lld images); resume with the --batch "
            "and --train-limit it was written with",
            o->resume, (long long)done, (long long)steps_per_epoch, (long long)o->batch,
            (long long)r->train_count);
        return false;
    }
    return true;
}

/* Rank 0: where the resumed run continues, and the layout that wrote the checkpoint when it
 * differs (another ranks x streams: the same global batch, results equal to rounding). */
static void s_print_resumed(const run_t *r, int64_t done, int64_t steps_per_epoch)
{
    printf("fmnist: resumed from %s at step %lld (epoch %lld", r->o.resume, (long long)done,
           (long long)(done / steps_per_epoch));
    if (done % steps_per_epoch)
        printf(", sample %lld", (long long)(done % steps_per_epoch * r->o.batch));
    printf(")\n");
    troupe_dp_checkpoint_info_t *info = calloc(1, sizeof *info);
    if (info && troupe_dp_checkpoint_read(r->o.resume, info) == TROUPE_OK && info->ranks > 0 &&
        (info->ranks != r->ranks || info->streams != r->streams || info->replicas != r->replicas))
        printf("fmnist: the checkpoint was written by %d rank(s) x %d stream(s) (%lld replicas), "
               "this run has %d x %d (%lld): the same global batch, results equal to rounding, "
               "not bitwise\n",
               info->ranks, info->streams, (long long)info->replicas, r->ranks, r->streams,
               (long long)r->replicas);
    free(info);
}

/* Logs (info) how the epoch's gradients were merged: across the streams through merge buffers
 * (parallel/dp.h), across ranks by the transport's path (transport/mpi/collective.h,
 * "Algorithms" and "Shared memory"), from its counters' change since *before. */
static void s_log_merge(const run_t *r, int epoch, int64_t steps,
                        const troupe_transport_stats_t *before)
{
    if (!troupe_log_enabled(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS))
        return;
    char local[96] = "one stream: no local merge";
    if (r->streams > 1)
        snprintf(local, sizeof local, "%d streams merged by merge-buffer copies (a tree)",
                 r->streams);
    if (r->ranks == 1) {
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS,
                   "fmnist: epoch %d merge: %lld steps, %s; one rank: no allreduce", epoch,
                   (long long)steps, local);
        return;
    }
    troupe_transport_stats_t now;
    troupe_transport_get_stats(&now);
    unsigned long long colls = now.collectives - before->collectives;
    unsigned long long shm = now.shm - before->shm;
    unsigned long long buckets = now.buckets - before->buckets;
    unsigned long long ring = now.ring_buckets - before->ring_buckets;
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS,
               "fmnist: epoch %d merge: %lld steps, %s; across %d ranks %llu allreduce(s): %llu "
               "through shared memory, %llu bucket(s) over MPI (%llu by troupe's ring, %llu by "
               "MPI_Iallreduce), %llu bytes staged%s",
               epoch, (long long)steps, local, r->ranks, colls, shm, buckets, ring,
               buckets - ring, (unsigned long long)(now.staged - before->staged),
               r->o.compress_bf16 ? ", bfloat16 gradients" : "");
}

/* Rank 0's test-set accuracy with the current parameters (syncs the training first). */
static double s_evaluate(run_t *r)
{
    CHECK(troupe_dp_sync(r->dp), "training");
    if (!r->eval_routine) {
        /* linked once: the owner context's parameter arrays are updated in place, so later
         * runs read the current values */
        CHECK(troupe_link(troupe_dp_owner_context(r->dp), r->eval_code, &r->eval_routine),
              "linking the evaluation");
    }
    double acc = 0;
    CHECK(fmnist_mlp_eval_run(r->eval, r->eval_routine, r->test.labels, &acc), "evaluating");
    return acc;
}


/* ---- the training data --------------------------------------------------------------------- */

/* --data-layout share: the layout of this rank's share (r->share) and its images (r->train),
 * read once from the IDX files (loader.h). B: rows per replica minibatch, offset: replicas of
 * the ranks before this one. A collective (the ranks compare their streams). */
static troupe_status_t s_load_share(run_t *r, int64_t B, int64_t steps_per_epoch, int64_t offset)
{
    /* every rank runs the same streams when sum N^2 = (sum N)^2 / R */
    int64_t sq = 0, sq_offset = 0;
    TROUPE_RETURN_IF_ERROR(troupe_dp_replicas(r->streams * r->streams, &sq, &sq_offset));
    bool compact = sq * r->ranks == r->replicas * r->replicas;
    TROUPE_RETURN_IF_ERROR(fmnist_share_init(B, steps_per_epoch, r->o.grad_accum, r->replicas,
                                             offset, r->streams, r->ranks, compact, &r->share));
    int64_t n = fmnist_share_count(&r->share);
    int64_t *order = malloc((size_t)r->train_count * sizeof *order);
    int64_t *items = malloc((size_t)(n ? n : 1) * sizeof *items);
    troupe_status_t st = TROUPE_OK;
    if (!order || !items) {
        st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "out of memory for %lld items",
                              (long long)r->train_count);
        goto free_lists;
    }
    fmnist_shuffle_order(r->train_count, r->o.seed, order);
    fmnist_share_items(&r->share, order, items);
    st = fmnist_dataset_load_items_split(r->o.data, "train", r->o.train_limit, items, n,
                                         &r->train);
free_lists:
    free(order);
    free(items);
    return st;
}

/* Every rank, on stderr: the training data it holds (docs/trainer.md, Sharded data). */
static void s_print_data(const run_t *r, const fmnist_mlp_config_t *mc)
{
    size_t row = (size_t)(mc->in + mc->out) * sizeof(float); /* a row of x_all and y_all */
    size_t item = (size_t)(r->train.rows * r->train.cols) + 1; /* an image and its label */
    size_t images = (size_t)r->train.count * item, arrays = (size_t)(mc->num_batches * mc->batch) * row;
    size_t resident = 0;
    if (r->loader) /* the share, the loader's buffers, x_all and y_all on the host and each stream */
        resident = images + fmnist_loader_bytes(r->loader) + arrays * (1 + (size_t)r->streams);
    else /* the set, x_all and y_all on the host and once on each device (constant) */
        resident = images + arrays * (1 + (size_t)r->devices.n);
    fprintf(stderr,
            "data rank=%d layout=%s images=%lld of %lld minibatch_rows=%lld resident_bytes=%zu\n",
            r->rank, r->loader ? "share" : "whole", (long long)r->train.count,
            (long long)r->train_count, (long long)mc->num_batches, resident);
}

/* --data-layout share, before each step: the step's minibatches, which the loader thread
 * prepared in single precision, into the host arrays of x_all and y_all; each stream's arrays
 * follow before its routine reads them (automatic host transfers). A one-element host write
 * (troupe_tnode_set_value) waits for the uploads still reading the array and starts its new
 * generation (actors/host.h); the rest is copied into the host array as it is, which saves the
 * conversion through doubles that troupe_tnode_set_values makes (docs/trainer.md, Sharded
 * data). */
static troupe_status_t s_place(troupe_tnode_t *tn, const float *v, size_t count)
{
    int64_t at[TROUPE_MAX_DIMS] = {0};
    void *host = NULL;
    if (tn->prec != TROUPE_PREC_SINGLE)
        return troupe_error_set(TROUPE_INTERNAL, "fmnist: the training data is not single precision");
    TROUPE_RETURN_IF_ERROR(troupe_tnode_set_value(tn, at, v[0]));
    TROUPE_RETURN_IF_ERROR(troupe_tnode_host_array(tn, &host));
    memcpy(host, v, count * sizeof *v);
    return TROUPE_OK;
}

static troupe_status_t s_place_step(run_t *r)
{
    const float *x = NULL, *y = NULL;
    const fmnist_mlp_config_t *c = &r->mlp->cfg;
    size_t rows = (size_t)(c->num_batches * c->batch);
    TROUPE_RETURN_IF_ERROR(fmnist_loader_next(r->loader, &x, &y));
    TROUPE_RETURN_IF_ERROR(s_place(r->mlp->x_all, x, rows * (size_t)c->in));
    return s_place(r->mlp->y_all, y, rows * (size_t)c->out);
}

/* Ends the cluster before the run started (usage errors, --help) and returns `code`. */
static int s_leave(int code)
{
    troupe_status_t st = troupe_cluster_finalize();
    if (st != TROUPE_OK)
        fprintf(stderr, "fmnist: stopping the cluster: %s\n", troupe_last_error());
    return code;
}

int main(int argc, char **argv)
{
    if (troupe_cluster_init(&argc, &argv) != TROUPE_OK) {
        fprintf(stderr, "fmnist: starting the cluster: %s\n", troupe_last_error());
        return 1;
    }
    run_t r;
    memset(&r, 0, sizeof r);
    r.saved_step = -1;
    r.rank = troupe_cluster_rank();
    r.ranks = troupe_cluster_size();
    bool help = false;
    char err[512];
    if (!s_parse(argc, argv, &r.o, &help, err, sizeof err)) {
        if (r.rank == 0)
            fprintf(stderr, "fmnist: %s\n", err);
        return s_leave(2);
    }
    if (help) {
        if (r.rank == 0)
            s_help();
        return s_leave(0);
    }
    const opts_t *o = &r.o;
    s_active = &r;
    /* every rank runs with the same settings, or every rank stops here naming them */
    s_settings(o, &r.settings);
    CHECK(troupe_dp_agree(r.settings.list, S_NSETTINGS), "checking the options across ranks");
    /* In-place progress only for a terminal of our own: under a launcher, Open MPI hands each
     * rank a pseudo-terminal even when mpiexec's output goes to a pipe or a file. */
    r.tty = r.rank == 0 && isatty(STDOUT_FILENO) && !troupe_cluster_is_distributed();
    fmnist_progress_init(&r.progress, r.tty);
    /* The output paths, before any work: rank 0 writes them, every rank learns the verdict. */
    int32_t verdict = 0;
    if (r.rank == 0 && !s_check_outputs(&r, err, sizeof err)) {
        fprintf(stderr, "fmnist: %s\n", err);
        verdict = 2;
    }
    if (s_agree(verdict) != 0) {
        s_teardown(&r);
        return s_leave(2);
    }
    r.streams = s_resolve_streams(o, &r.devices);
    int64_t offset = 0;
    CHECK(troupe_dp_replicas(r.streams, &r.replicas, &offset), "counting the replicas");
    int64_t replicas = r.replicas;
    /* --batch rows per optimizer step: --grad-accum micro-steps on every replica */
    int64_t parts = replicas * o->grad_accum;
    if (o->batch % parts != 0) {
        if (r.rank == 0)
            fprintf(stderr,
                    "fmnist: option --batch: %lld rows do not split evenly over %lld replicas "
                    "(%d rank(s), %d stream(s) on rank 0) x %d micro-step(s) (--grad-accum)\n",
                    (long long)o->batch, (long long)replicas, r.ranks, r.streams,
                    o->grad_accum);
        return s_leave(2);
    }
    int64_t B = o->batch / parts;

    /* data: each rank holds its replicas' share of the training set (loader.h), or with
     * --data-layout whole all of it, identically shuffled; rank 0 the whole test set */
    if (o->whole_data) {
        CHECK(fmnist_dataset_load_split(o->data, "train", o->train_limit, &r.train),
              "loading the training set");
        fmnist_dataset_shuffle(&r.train, o->seed);
        r.train_count = r.train.count;
    } else {
        CHECK(fmnist_dataset_peek_split(o->data, "train", o->train_limit, &r.train_count),
              "loading the training set");
    }
    /* step g of an epoch takes rows g*batch.. of the set whatever the layout (parallel/dp.h) */
    int64_t steps_per_epoch = r.train_count / o->batch;
    int64_t num_batches = steps_per_epoch * parts;
    if (steps_per_epoch < 1) {
        if (r.rank == 0)
            fprintf(stderr,
                    "fmnist: option --batch: %lld rows per step need more than the %lld "
                    "training images\n",
                    (long long)o->batch, (long long)r.train_count);
        s_teardown(&r);
        return s_leave(2);
    }
    if (!o->whole_data)
        CHECK(s_load_share(&r, B, steps_per_epoch, offset), "loading the training set");
    if (r.rank == 0)
        CHECK(fmnist_dataset_load_split(o->data, "t10k", o->test_limit, &r.test),
              "loading the test set");

    /* a checkpoint of the other model: refused before anything is built */
    if (o->resume && !s_check_resume_model(&r, err, sizeof err)) {
        if (r.rank == 0)
            fprintf(stderr, "fmnist: %s\n", err);
        s_teardown(&r);
        return s_leave(2);
    }

    /* model and driver */
    if (!o->whole_data)
        num_batches = r.share.rows; /* the rows dp binds (loader.h) */
    fmnist_mlp_config_t mc = o->model == FMNIST_MODEL_CNN
                                 ? fmnist_cnn_config_default(B, num_batches)
                                 : fmnist_mlp_config_default(B, num_batches);
    mc.fed = fmnist_feed_resolve(o->feed, o->backend);
    mc.conv_lowering = fmnist_conv_lowering_resolve(o->backend);
    mc.changing = !o->whole_data;
    if (o->precision != TROUPE_DP_PRECISION_FP32)
        mc.compute_prec =
            o->precision == TROUPE_DP_PRECISION_BF16 ? TROUPE_PREC_BFLOAT16 : TROUPE_PREC_HALF;
    CHECK(fmnist_mlp_new(&mc, &r.mlp), "building the model");
    CHECK(fmnist_mlp_init_params(r.mlp, o->seed), "initialising the parameters");
    if (o->whole_data)
        CHECK(fmnist_mlp_load_train(r.mlp, &r.train), "placing the training set");
    else /* each step's minibatches reach the streams' arrays after the host write */
        troupe_config_set_auto_host_transfers(true);
    troupe_dp_model_t model;
    fmnist_mlp_dp_model(r.mlp, &model);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS, "fmnist: minibatches %s (--feed %s)",
               mc.fed ? "fed into fixed nodes" : "indexed in the gradient routine",
               fmnist_feed_name(o->feed));
    troupe_dp_config_t dc = {.backend = o->backend,
                             .streams = r.streams,
                             .optimizer = o->opt,
                             .compress_bf16 = o->compress_bf16,
                             .settings = r.settings.list,
                             .n_settings = S_NSETTINGS,
                             .devices = r.devices.ordinals,
                             .n_devices = r.devices.n,
                             .grad_accum = o->grad_accum,
                             .precision = o->precision};
    double t_build = s_now();
    /* the first run of a model compiles its routines (the convnet's gradient: seconds), silent
     * otherwise: on a terminal, say so while it lasts and how long it took */
    if (r.tty) { /* one short line: \r\033[K below erases one row only */
        printf("fmnist: compiling the training routines (%s) ...",
               o->backend ? o->backend : troupe_config_backend());
        fflush(stdout);
    }
    troupe_status_t dp_st = troupe_dp_new(&dc, &model, &r.dp);
    if (r.tty && dp_st != TROUPE_OK) {
        printf("\n");
        fflush(stdout);
    }
    CHECK(dp_st, "starting data-parallel training");
    if (r.tty) {
        printf("\r\033[Kfmnist: training routines compiled and linked in %.1f s\n",
               s_now() - t_build);
        fflush(stdout);
    }
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS,
               "fmnist: training routines compiled and linked on %d stream(s) of %s in %.3f s",
               r.streams, troupe_backend_name(troupe_dp_backend(r.dp)), s_now() - t_build);
    /* this rank's optimizer state (ZeRO-1 shards it: docs/parallel.md) */
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS, "fmnist: optimizer_state_bytes=%lld",
               (long long)troupe_dp_optimizer_state_bytes(r.dp));
    if (troupe_dp_num_streams(r.dp) != r.streams) {
        troupe_error_set(TROUPE_INTERNAL, "dp made %d streams, expected %d",
                         troupe_dp_num_streams(r.dp), r.streams);
        s_die(TROUPE_INTERNAL, "starting data-parallel training");
    }
    if (o->resume) {
        CHECK(troupe_dp_load(r.dp, o->resume), "resuming");
        /* every rank read the same file: all refuse alike */
        if (!s_check_resume(&r, steps_per_epoch, err, sizeof err)) {
            if (r.rank == 0)
                fprintf(stderr, "fmnist: %s\n", err);
            s_teardown(&r);
            return s_leave(2);
        }
    }
    char note[160];
    s_note(&r, note, sizeof note);
    CHECK(troupe_dp_set_checkpoint_note(r.dp, note), "noting the run's settings");
    int64_t total_steps = (int64_t)o->epochs * steps_per_epoch;
    troupe_dp_plan_t plan = {.global_batch = o->batch,
                             .steps_per_epoch = steps_per_epoch,
                             .data_seed = o->seed,
                             .schedule_steps = o->cosine ? total_steps : 0};
    CHECK(troupe_dp_set_plan(r.dp, &plan), "recording the run's plan");
    int64_t done = troupe_dp_steps_done(r.dp);
    int first_epoch = (int)(done / steps_per_epoch);
    if (!o->whole_data)
        CHECK(fmnist_loader_new(&r.share, &r.train, mc.in, mc.out, done, &r.loader),
              "starting the data loader");
    s_print_data(&r, &mc);
    if (r.rank == 0) {
        CHECK(fmnist_mlp_eval_new(r.mlp, r.test.count, &r.eval), "building the evaluation");
        CHECK(fmnist_mlp_eval_load(r.eval, &r.test), "placing the test set");
        CHECK(troupe_compile(troupe_dp_backend(r.dp), r.eval->comp, "fmnist_eval", &r.eval_code),
              "compiling the evaluation");
        char layout[96];
        if (r.replicas == (int64_t)r.streams * r.ranks)
            snprintf(layout, sizeof layout, "%d rank(s) x %d stream(s)", r.ranks, r.streams);
        else /* ranks with different numbers of streams */
            snprintf(layout, sizeof layout, "%d rank(s), %lld replicas (%d stream(s) on rank 0)",
                     r.ranks, (long long)r.replicas, r.streams);
        /* a limit above a set's size was reduced to it: say so */
        char reduced[160] = "";
        if (o->train_limit > r.train_count && o->test_limit > r.test.count)
            snprintf(reduced, sizeof reduced,
                     " (--train-limit %lld and --test-limit %lld reduced to the sets' sizes)",
                     (long long)o->train_limit, (long long)o->test_limit);
        else if (o->train_limit > r.train_count || o->test_limit > r.test.count)
            snprintf(reduced, sizeof reduced, " (--%s-limit %lld reduced to the set's %lld)",
                     o->train_limit > r.train_count ? "train" : "test",
                     (long long)(o->train_limit > r.train_count ? o->train_limit : o->test_limit),
                     (long long)(o->train_limit > r.train_count ? r.train_count : r.test.count));
        printf("fmnist: %lld train / %lld test images%s, %s on %s, batch "
               "%lld (%lld per replica), %lld steps/epoch, %s lr %g",
               (long long)r.train_count, (long long)r.test.count, reduced, layout,
               troupe_backend_name(troupe_dp_backend(r.dp)), (long long)o->batch, (long long)B,
               (long long)steps_per_epoch, troupe_optimizer_name(o->opt.kind), o->opt.lr);
        snprintf(r.plot.title, sizeof r.plot.title, "fmnist: %d rank(s) x %d stream(s) on %s, "
                 "batch %lld, %s lr %g", r.ranks, r.streams,
                 troupe_backend_name(troupe_dp_backend(r.dp)), (long long)o->batch,
                 troupe_optimizer_name(o->opt.kind), o->opt.lr);
        if (o->opt.kind == TROUPE_OPT_SGD)
            printf(" momentum %g", o->opt.momentum);
        printf(" weight_decay %g, %s schedule, precision %s\n", o->opt.weight_decay,
               o->cosine ? "cosine" : "constant", troupe_dp_precision_name(o->precision));
        if (o->model == FMNIST_MODEL_CNN) /* the MLP's lines stay as README.md shows them */
            printf("fmnist: model cnn: conv3x3 1->%lld, conv3x3 ->%lld, maxpool 2, conv3x3 "
                   "->%lld, maxpool 2, linear ->%lld, linear ->%lld\n",
                   (long long)mc.conv[0], (long long)mc.conv[1], (long long)mc.conv[2],
                   (long long)mc.hidden1, (long long)mc.out);
        if (o->resume)
            s_print_resumed(&r, done, steps_per_epoch);
        if (first_epoch >= o->epochs)
            printf("fmnist: the checkpoint already holds %d epoch(s) (--epochs %d): nothing to "
                   "train\n",
                   first_epoch, o->epochs);
        fflush(stdout);
    }

    /* training */
    double train_seconds = 0, acc = -1;
    int64_t samples = 0;
    int64_t every = steps_per_epoch / S_LOSS_SAMPLES_PER_EPOCH;
    if (every < 1)
        every = 1;
    for (int epoch = first_epoch; epoch < o->epochs; epoch++) {
        double t0 = s_now(), loss_sum = 0;
        int64_t t0_ns = troupe_now_ns(); /* for the trace (TROUPE_TRACE) */
        double t_issue = 0, t_loss = 0, t_mid = 0; /* issuing steps; sampled losses; checkpoints */
        int64_t s0 = epoch == first_epoch ? done % steps_per_epoch : 0; /* a resumed epoch */
        troupe_transport_stats_t tr0;
        troupe_transport_get_stats(&tr0);
        int loss_n = 0;
        for (int64_t s = s0; s < steps_per_epoch; s++) {
            double ti = s_now();
            if (o->cosine) {
                double t = (double)(epoch * steps_per_epoch + s) / (double)total_steps;
                double lr = o->opt.lr * 0.5 * (1.0 + cos(M_PI * t));
                CHECK(troupe_dp_set_lr(r.dp, lr > 0 ? lr : 1e-12), "setting the learning rate");
            }
            if (r.loader)
                CHECK(s_place_step(&r), "placing the training data");
            CHECK(troupe_dp_step(r.dp), "training");
            double tl = s_now();
            t_issue += tl - ti;
            if ((s + 1) % every == 0 || s + 1 == steps_per_epoch) {
                double l = 0;
                int64_t tl_ns = troupe_now_ns();
                CHECK(troupe_dp_last_loss(r.dp, &l), "reading the loss");
                s_check_loss(&r, l, (int64_t)epoch * steps_per_epoch + s + 1, epoch, s + 1,
                             steps_per_epoch);
                troupe_trace_span("trainer", "loss sample", tl_ns, troupe_now_ns());
                t_loss += s_now() - tl;
                loss_sum += l;
                loss_n++;
            }
            int64_t g = (int64_t)epoch * steps_per_epoch + s + 1; /* steps done */
            if (o->checkpoint_every > 0 && g % o->checkpoint_every == 0 &&
                s + 1 < steps_per_epoch) {
                double tc = s_now();
                s_save(&r, g, epoch, s + 1, steps_per_epoch);
                t_mid += s_now() - tc;
            }
            fmnist_progress_update(&r.progress, epoch + 1, o->epochs, s + 1, steps_per_epoch,
                                   o->batch, loss_n ? loss_sum / loss_n : NAN, s_now(), t0,
                                   (s + 1) % every == 0);
        }
        double t_sync = s_now();
        CHECK(troupe_dp_sync(r.dp), "training");
        t_sync = s_now() - t_sync;
        double dt = s_now() - t0;
        if (troupe_trace_enabled()) {
            char span[32];
            snprintf(span, sizeof span, "epoch %d", epoch + 1);
            troupe_trace_span("trainer", span, t0_ns, troupe_now_ns());
        }
        s_log_merge(&r, epoch + 1, steps_per_epoch, &tr0);
        train_seconds += dt;
        samples += (steps_per_epoch - s0) * o->batch;
        double rate = (double)((steps_per_epoch - s0) * o->batch) / dt, loss = loss_sum / loss_n;
        double t_eval = s_now();
        if (r.rank == 0) {
            int64_t te_ns = troupe_now_ns();
            acc = s_evaluate(&r);
            troupe_trace_span("trainer", "evaluate", te_ns, troupe_now_ns());
            t_eval = s_now() - t_eval;
            printf("%sepoch %d/%d  samples/s %.0f  loss %.4f  test_accuracy %.4f  (%.1f s)\n",
                   r.tty ? "\r\033[K" : "", epoch + 1, o->epochs, rate, loss, acc, dt);
            fflush(stdout);
            if (r.curve) {
                fprintf(r.curve, "%d,%.6f,%.6f,%.1f,%.3f\n", epoch + 1, loss, acc, rate,
                        train_seconds);
                fflush(r.curve);
            }
            troupe_curve_row_t row = {epoch + 1, loss, acc, rate, train_seconds};
            if (fmnist_plot_epoch(&r.plot, &row) != TROUPE_OK)
                fprintf(stderr, "fmnist: warning: --plot: %s\n", troupe_last_error());
        }
        if (r.rank != 0)
            t_eval = 0;
        double t_ckpt = s_now();
        int64_t tc_ns = troupe_now_ns();
        if (o->checkpoint)
            s_save(&r, (int64_t)(epoch + 1) * steps_per_epoch, epoch, steps_per_epoch,
                   steps_per_epoch);
        if (o->checkpoint)
            troupe_trace_span("trainer", "checkpoint", tc_ns, troupe_now_ns());
        t_ckpt = s_now() - t_ckpt;
        TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_TOOLS,
                   "fmnist: epoch %d: training %.3f s = issuing steps %.3f s + waiting for "
                   "sampled losses %.3f s + final sync %.3f s + checkpoints within the epoch "
                   "%.3f s + other %.3f s; evaluation %.3f s; checkpoint %.3f s",
                   epoch + 1, dt, t_issue, t_loss, t_sync, t_mid,
                   dt - t_issue - t_loss - t_sync - t_mid, t_eval, t_ckpt);
    }
    if (r.rank == 0) {
        if (acc < 0) /* no epoch ran (resumed at or past --epochs) */
            acc = s_evaluate(&r);
        printf("final test_accuracy=%.4f samples_per_s=%.0f ranks=%d streams=%d epochs=%d", acc,
               train_seconds > 0 ? (double)samples / train_seconds : 0.0, r.ranks, r.streams,
               o->epochs);
        /* loss scaling (fp16): the steps it skipped and its scale, appended */
        troupe_dp_loss_scale_state_t ls;
        if (troupe_dp_loss_scale(r.dp, &ls) == TROUPE_OK && ls.on)
            printf(" skipped_steps=%lld loss_scale=%g", (long long)ls.skipped_steps, ls.scale);
        printf("\n");
        fflush(stdout);
    }

    s_teardown(&r);
    s_active = NULL;
    if (troupe_cluster_finalize() != TROUPE_OK) {
        fprintf(stderr, "fmnist: stopping the cluster: %s\n", troupe_last_error());
        return 1;
    }
    return 0;
}
