/* fmnist — the training set sharded per rank (see loader.h). */
#include "loader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t s_gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

troupe_status_t fmnist_share_init(int64_t batch, int64_t steps_per_epoch, int64_t accum,
                                  int64_t replicas, int64_t offset, int64_t streams,
                                  int64_t ranks, bool compact, fmnist_share_t *s)
{
    if (!s || batch < 1 || steps_per_epoch < 1 || accum < 1 || replicas < 1 || streams < 1 ||
        ranks < 1 || offset < 0 || offset + streams > replicas)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "fmnist_share_init: replicas [%lld, %lld) of %lld, batch %lld, "
                                "%lld steps, %lld micro-steps, %lld ranks",
                                (long long)offset, (long long)(offset + streams),
                                (long long)replicas, (long long)batch,
                                (long long)steps_per_epoch, (long long)accum, (long long)ranks);
    compact = compact && replicas == ranks * streams && s_gcd(accum, ranks) == 1;
    *s = (fmnist_share_t){.batch = batch,
                          .steps_per_epoch = steps_per_epoch,
                          .accum = accum,
                          .replicas = replicas,
                          .offset = offset,
                          .streams = streams,
                          .rows = accum * (compact ? streams : replicas)};
    return TROUPE_OK;
}

int64_t fmnist_share_count(const fmnist_share_t *s)
{
    return s->steps_per_epoch * s->accum * s->streams * s->batch;
}

/* Round t of the epoch (t < S K), replica k of this rank: its minibatch's first position. */
static int64_t s_position(const fmnist_share_t *s, int64_t t, int64_t k)
{
    return (t * s->replicas + s->offset + k) * s->batch;
}

void fmnist_share_items(const fmnist_share_t *s, const int64_t *order, int64_t *out)
{
    int64_t rounds = s->steps_per_epoch * s->accum, n = 0;
    for (int64_t t = 0; t < rounds; t++)
        for (int64_t k = 0; k < s->streams; k++) {
            int64_t p = s_position(s, t, k);
            for (int64_t i = 0; i < s->batch; i++)
                out[n++] = order[p + i];
        }
}

struct fmnist_loader {
    fmnist_share_t s;
    const fmnist_dataset_t *share;
    int64_t in, classes;
    float *x[2], *y[2]; /* step s fills buffer s % 2 */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, stop;
    int64_t want;  /* the step to fill next, -1: none */
    int64_t ready; /* the step filled, -1: none */
};

/* Step `step` into buffer step % 2: each micro-step j and replica k, the share's minibatch of
 * round (step K + j) mod S K, at the row dp binds (loader.h). */
static void s_fill(fmnist_loader_t *l, int64_t step)
{
    const fmnist_share_t *s = &l->s;
    float *x = l->x[step % 2], *y = l->y[step % 2];
    int64_t rounds = s->steps_per_epoch * s->accum, B = s->batch;
    size_t in = (size_t)l->in, classes = (size_t)l->classes;
    for (int64_t j = 0; j < s->accum; j++)
        for (int64_t k = 0; k < s->streams; k++) {
            int64_t local = ((step * s->accum + j) % rounds) * s->streams + k;
            int64_t row = (j * s->replicas + s->offset + k) % s->rows;
            for (int64_t i = 0; i < B; i++) {
                size_t from = (size_t)(local * B + i), to = (size_t)(row * B + i);
                const uint8_t *px = l->share->pixels + from * in;
                float *xr = x + to * in, *yr = y + to * classes;
                for (size_t p = 0; p < in; p++) /* as fmnist_mlp_load_train scales and rounds */
                    xr[p] = (float)(px[p] * (1.0 / 255.0));
                for (size_t c = 0; c < classes; c++)
                    yr[c] = l->share->labels[from] == c ? 1.0f : 0.0f;
            }
        }
}

static void *s_thread(void *arg)
{
    fmnist_loader_t *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->want < 0)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop)
            break;
        int64_t step = l->want;
        l->want = -1;
        pthread_mutex_unlock(&l->mu);
        s_fill(l, step);
        pthread_mutex_lock(&l->mu);
        l->ready = step;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

troupe_status_t fmnist_loader_new(const fmnist_share_t *s, const fmnist_dataset_t *share,
                                  int64_t in, int64_t classes, int64_t step,
                                  fmnist_loader_t **out)
{
    if (!s || !share || !out || in < 1 || classes < 1 || step < 0)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_loader_new: bad argument");
    *out = NULL;
    if (share->count != fmnist_share_count(s) || share->rows * share->cols != in)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "fmnist_loader_new: the share holds %lld items of %lld pixels, "
                                "the layout takes %lld of %lld",
                                (long long)share->count, (long long)(share->rows * share->cols),
                                (long long)fmnist_share_count(s), (long long)in);
    for (int64_t i = 0; i < share->count; i++)
        if (share->labels[i] >= classes)
            return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                    "fmnist_loader_new: label %u of item %lld is out of range "
                                    "0..%lld",
                                    (unsigned)share->labels[i], (long long)i,
                                    (long long)classes - 1);
    fmnist_loader_t *l = calloc(1, sizeof *l);
    if (!l)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "fmnist_loader_new: out of memory");
    troupe_status_t st = TROUPE_OK;
    l->s = *s;
    l->share = share;
    l->in = in;
    l->classes = classes;
    l->want = step;
    l->ready = -1;
    size_t rows = (size_t)(s->rows * s->batch);
    for (int b = 0; b < 2; b++) {
        /* zeros in the rows of other ranks (M = K T), which stay as they are */
        l->x[b] = calloc(rows * (size_t)in, sizeof(float));
        l->y[b] = calloc(rows * (size_t)classes, sizeof(float));
        if (!l->x[b] || !l->y[b]) {
            st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED,
                                  "fmnist_loader_new: out of memory for %zu rows", rows);
            goto free_loader;
        }
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    int e = pthread_create(&l->thread, NULL, s_thread, l);
    if (e != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        st = troupe_error_set(TROUPE_FAILED_PRECONDITION, "fmnist_loader_new: no thread: %s",
                              strerror(e));
        goto free_loader;
    }
    l->started = true;
    *out = l;
    return TROUPE_OK;
free_loader:
    for (int b = 0; b < 2; b++) {
        free(l->x[b]);
        free(l->y[b]);
    }
    free(l);
    return st;
}

troupe_status_t fmnist_loader_next(fmnist_loader_t *l, const float **x, const float **y)
{
    if (!l || !x || !y)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "fmnist_loader_next: bad argument");
    pthread_mutex_lock(&l->mu);
    while (l->ready < 0)
        pthread_cond_wait(&l->cv, &l->mu);
    int64_t step = l->ready;
    *x = l->x[step % 2];
    *y = l->y[step % 2];
    l->ready = -1;
    l->want = step + 1; /* into the other buffer, while the caller uses this one */
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return TROUPE_OK;
}

size_t fmnist_loader_bytes(const fmnist_loader_t *l)
{
    if (!l)
        return 0;
    return 2 * (size_t)(l->s.rows * l->s.batch) * (size_t)(l->in + l->classes) * sizeof(float);
}

void fmnist_loader_destroy(fmnist_loader_t **l_p)
{
    if (!l_p || !*l_p)
        return;
    fmnist_loader_t *l = *l_p;
    *l_p = NULL;
    if (l->started) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
    }
    for (int b = 0; b < 2; b++) {
        free(l->x[b]);
        free(l->y[b]);
    }
    free(l);
}
