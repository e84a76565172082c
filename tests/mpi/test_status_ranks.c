/* troupe — a job for `troupe status` to look at (tests/mpi/status.sh drives it): two ranks run
 * two allreduces, then
 *   stall  rank 0 issues a third and waits for it (its transport waits for rank 1's
 *          fingerprint), while rank 1 sleeps in its main thread without issuing it, until the
 *          script creates DIR/go (at most 60 s); then both finish normally (exit 0);
 *   kill   rank 1 SIGKILLs itself; rank 0 waits for DIR/go, then leaves the cluster
 *          (troupe_cluster_leave: MPI_Finalize would wait for the dead rank) and exits 0.
 * Rank 0 creates DIR/waiting once it is where the script should look. Checks print FAIL
 * lines. */
#define _GNU_SOURCE
#include "actors/event.h"
#include "base/config.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void s_touch(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f != NULL)
        fclose(f);
}

/* Waits (at most `limit_s`) for dir/name. */
static bool s_wait_file(const char *dir, const char *name, int limit_s)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    for (int i = 0; i < limit_s * 20; i++) {
        if (stat(path, &st) == 0)
            return true;
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    return false;
}

static troupe_status_t s_allreduce(float *buf, int64_t count, troupe_event_t **ev)
{
    troupe_coll_tensor_t t = {.data = buf, .count = count, .prec = TROUPE_PREC_SINGLE};
    troupe_allreduce_args_t a = {.op = TROUPE_REDUCE_SUM, .n = 1, .tensors = &t};
    return troupe_allreduce(&a, ev);
}

static bool s_one(float *buf, int rank, int k)
{
    troupe_event_t *ev = NULL;
    troupe_status_t st = s_allreduce(buf, 256, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, troupe_config_timeout_ns());
    troupe_event_release(&ev);
    if (st != TROUPE_OK)
        printf("FAIL rank %d: allreduce %d: %s: %s\n", rank, k, troupe_status_str(st),
               troupe_last_error());
    return st == TROUPE_OK;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 2 ? argv[1] : "";
    const char *dir = argc > 2 ? argv[2] : "";
    bool stall = strcmp(mode, "stall") == 0, kill = strcmp(mode, "kill") == 0;
    if (!stall && !kill) {
        printf("FAIL: usage: test_status_ranks stall|kill DIR\n");
        return 2;
    }
    if (troupe_cluster_init(&argc, &argv) != TROUPE_OK) {
        printf("FAIL: troupe_cluster_init: %s\n", troupe_last_error());
        return 1;
    }
    int rank = troupe_cluster_rank();
    float buf[256] = {0};
    bool ok = s_one(buf, rank, 1) && s_one(buf, rank, 2);
    if (ok && kill) {
        if (rank == 1)
            raise(SIGKILL);
        s_touch(dir, "waiting");
        if (!s_wait_file(dir, "go", 60))
            printf("FAIL rank 0: no DIR/go within 60 s\n");
        fflush(stdout);
        (void)troupe_cluster_leave("the test is over");
        return 0;
    }
    if (ok && rank == 1) {
        if (!s_wait_file(dir, "go", 60))
            printf("FAIL rank 1: no DIR/go within 60 s\n");
        ok = s_one(buf, rank, 3);
    } else if (ok) {
        troupe_event_t *ev = NULL;
        troupe_status_t st = s_allreduce(buf, 256, &ev);
        s_touch(dir, "waiting");
        if (st == TROUPE_OK)
            st = troupe_event_sync(ev, troupe_config_timeout_ns());
        troupe_event_release(&ev);
        if (st != TROUPE_OK)
            printf("FAIL rank 0: allreduce 3: %s: %s\n", troupe_status_str(st),
                   troupe_last_error());
        ok = st == TROUPE_OK;
    }
    fflush(stdout);
    troupe_status_t st = troupe_cluster_finalize();
    if (st != TROUPE_OK)
        printf("FAIL rank %d: finalize: %s\n", rank, troupe_last_error());
    return ok && st == TROUPE_OK ? 0 : 1;
}
