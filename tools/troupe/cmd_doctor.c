/* troupe doctor [--data DIR] [--timeout S] — preflight checks before a training job.
 *
 * Each check prints one line, `PASS|FAIL|SKIP <check>: <detail>`, a failure's detail ending
 * with `; fix: <hint>`, then a summary line `summary: P pass, F fail, S skip`:
 *
 *   compiler       the C compiler (CC, TROUPE_CC_FLAGS) compiles and loads a routine through
 *                  the cpu backend, as a user's routine is, and it computes the right values
 *                  (in a private cache directory, so the compiler always runs)
 *   cache          the compiled-routine cache (TROUPE_CACHE_DIR) can be created, written, read
 *   data           the Fashion-MNIST IDX files are in DIR (--data, default the trainer's,
 *                  /usr/share/datasets/fashion-mnist) and readable, headers checked
 *   gpu            per local rank, the GPUs the cuda backend sees (the devices API); SKIP with
 *                  the reason when the cuda backend is not built or sees no GPU on any rank
 *   agreement      under a launcher (size > 1): every rank has the same troupe version, MPI
 *                  library, build, default backend, and every setting that changes results or
 *                  the protocol (s_agreed below: fusion bucket size, compiler and flags, ...)
 *   shared-memory  the ranks of each node map each other's memory (base/shared_memory_impl.h,
 *                  what the shared-memory allreduce needs) and see each other's writes
 *   mpi            1 MiB moves from rank 0 to every rank and from the last rank to every
 *                  rank (MPI broadcasts), the bytes checked on every rank
 * Without a launcher the last three are SKIP. Under one, every rank runs the local checks,
 * the ranks exchange their results (an MPI allgather) and rank 0 prints one line per check
 * for all of them, naming the failing ranks; the others print nothing unless the exchange
 * itself failed (then each prints its own lines, `rank R:` in the detail).
 *
 * Bounded in time: every check has a deadline, --timeout seconds (default 30). A local check
 * runs on a thread of its own; past the deadline it is a FAIL, the processes it started (a hung
 * compiler) are killed, and the next check runs. The collectives get the deadline as their
 * transport deadline (twice it for the first exchange, which a rank whose local check hung
 * reaches late), so a rank that does not answer is named by the transport; a watchdog thread
 * ends the process (exit 1) after printing a FAIL line when an MPI call does not return.
 * The deadline of a collective is --timeout, not TROUPE_TIMEOUT_S, and its fusion size the
 * default, so that ranks that disagree on those settings still exchange their results.
 *
 * Exit status: 0 all checks pass (or skip), 1 a check fails, 2 usage error. Under a launcher,
 * once the results were exchanged, rank 0 exits with the report's status and the others with
 * 0 (so the launcher does not end rank 0 before its report is out; its exit status is rank
 * 0's); when the exchange failed, every rank exits 1.
 */
#define _GNU_SOURCE /* mkdtemp, gethostname, pthread_condattr_setclock */
#include "cmd_impl.h"

#include "actors/troupe.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/shared_memory_impl.h"
#include "base/strbuf.h"
#include "devices/device.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"
#include "troupe_config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define S_DEFAULT_DATA "/usr/share/datasets/fashion-mnist" /* examples/fmnist/idx.h's */
#define S_DEFAULT_TIMEOUT_S 30
#define S_DETAIL 2048         /* bytes of one check's line */
#define S_RECORD 8192         /* bytes of one rank's record in the exchange */
#define S_MIB (1024 * 1024)   /* the mpi check's bytes each way */
#define S_SHM_DATA 4096       /* the shared-memory check's pattern bytes */
#define S_WATCHDOG_SLACK_S 10 /* a collective's watchdog: its deadline plus this */

typedef enum { S_PASS, S_FAIL, S_SKIP } s_verdict_t;
static const char s_verdict_code[] = {'P', 'F', 'S'};
static const char *const s_verdict_word[] = {"PASS", "FAIL", "SKIP"};

enum { C_COMPILER, C_CACHE, C_DATA, C_GPU, C_LOCAL, C_AGREEMENT = C_LOCAL, C_SHM, C_MPI, C_N };
static const char *const s_check_name[C_N] = {"compiler",  "cache",         "data", "gpu",
                                              "agreement", "shared-memory", "mpi"};

typedef struct s_result {
    s_verdict_t v;
    char detail[S_DETAIL]; /* one line; a failure's ends with "; fix: ..." */
} s_result_t;

typedef struct s_doctor {
    const char *data;
    int timeout_s;
    int rank, size;
    s_result_t res[C_N];
    char settings[S_RECORD / 2]; /* "key=value" lines of s_agreed, before the doctor's own */
} s_doctor_t;

/* Sets a result, printf-style (newlines become spaces: one line per check). */
static void s_set(s_result_t *r, s_verdict_t v, const char *fmt, ...) TROUPE_PRINTF(3, 4);
static void s_set(s_result_t *r, s_verdict_t v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
    va_end(ap);
    for (char *p = r->detail; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    r->v = v;
}

static void s_print(int check, const s_result_t *r)
{
    printf("%s %s: %s\n", s_verdict_word[r->v], s_check_name[check], r->detail);
    fflush(stdout);
}

/* ---- the watchdog ---------------------------------------------------------------------------
 * A thread that ends the process when an MPI step (starting MPI, an exchange, a broadcast)
 * outlives its deadline, whatever the transport's own deadline did: it prints the mpi check's
 * FAIL line (write(2): the main thread may be stuck anywhere), kills the processes this one
 * started and calls _exit(1). The local checks have deadlines of their own (s_run_local). */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int check;           /* -1: nothing watched */
    int64_t deadline_ns; /* troupe_now_ns units */
    int seconds;
    char what[160]; /* what hangs, for the line */
    char prefix[24];
} s_wd = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, -1, 0, 0, "", ""};

/* SIGKILLs this process's descendants (a hung compiler and what it started), found through
 * /proc: the process is about to end, and they must not outlive it. Linux only; elsewhere
 * nothing. */
static void s_kill_descendants(void)
{
    enum { S_MAX = 4096 };
    static pid_t pids[S_MAX], ppids[S_MAX];
    static bool mine[S_MAX];
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && n < S_MAX && (e = readdir(d)) != NULL) {
        char path[64], buf[512];
        long pid = strtol(e->d_name, NULL, 10);
        if (pid <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t len = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        char *paren = len > 0 ? (buf[len] = '\0', strrchr(buf, ')')) : NULL;
        long ppid = 0;
        if (paren && sscanf(paren + 1, " %*c %ld", &ppid) == 1) {
            pids[n] = (pid_t)pid;
            ppids[n] = (pid_t)ppid;
            mine[n++] = false;
        }
    }
    if (d)
        closedir(d);
    for (bool grew = true; grew;) { /* mark descendants until none is added */
        grew = false;
        for (int i = 0; i < n; i++) {
            if (mine[i])
                continue;
            bool child = ppids[i] == getpid();
            for (int j = 0; j < n && !child; j++)
                child = mine[j] && ppids[i] == pids[j];
            if (child)
                mine[i] = grew = true;
        }
    }
    for (int i = 0; i < n; i++)
        if (mine[i])
            kill(pids[i], SIGKILL);
}

static void *s_watchdog(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&s_wd.mu);
    for (;;) {
        if (s_wd.check >= 0 && troupe_now_ns() >= s_wd.deadline_ns) {
            char line[400];
            int n = snprintf(line, sizeof line,
                             "FAIL mpi: %s%s did not finish within %d s (hung); fix: every rank "
                             "must get there: check that the launcher started them all, that "
                             "none is stuck (its own lines say), and the network "
                             "(OMPI_MCA_oob_tcp_if_include, OMPI_MCA_btl_tcp_if_include)\n",
                             s_wd.prefix, s_wd.what, s_wd.seconds);
            if (n > 0 && write(STDOUT_FILENO, line, (size_t)n) < 0)
                n = 0; /* nothing more to do: the process ends */
            s_kill_descendants();
            _exit(1);
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100 * 1000 * 1000; /* 100 ms ticks */
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s_wd.cv, &s_wd.mu, &ts);
    }
    return NULL;
}

static void s_watch(int seconds, const char *what)
{
    pthread_mutex_lock(&s_wd.mu);
    s_wd.check = C_MPI;
    s_wd.seconds = seconds;
    s_wd.deadline_ns = troupe_deadline_after((int64_t)seconds * 1000000000);
    snprintf(s_wd.what, sizeof s_wd.what, "%s", what);
    pthread_mutex_unlock(&s_wd.mu);
}

static void s_unwatch(void)
{
    pthread_mutex_lock(&s_wd.mu);
    s_wd.check = -1;
    pthread_mutex_unlock(&s_wd.mu);
}

/* Re-initialises a condition variable to time out on CLOCK_MONOTONIC (troupe_now_ns's). */
static void s_cond_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(cv);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

static bool s_watchdog_start(void)
{
    s_cond_monotonic(&s_wd.cv);
    pthread_t t;
    if (pthread_create(&t, NULL, s_watchdog, NULL) != 0)
        return false;
    pthread_detach(t);
    return true;
}

static double s_seconds_since(int64_t t0_ns)
{
    return (double)(troupe_now_ns() - t0_ns) / 1e9;
}

/* ---- compiler -------------------------------------------------------------------------------- */

/* Removes a directory's files, then the directory (one level: the probe's cache). */
static void s_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char path[4096 + sizeof e->d_name + 2];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* y = x . w ("i,ij=>j") on one stream of `backend`, as examples/hello does: compiled, linked,
 * run, read back and checked. */
static troupe_status_t s_probe_routine(const char *backend)
{
    troupe_status_t st;
    troupe_backend_t *b = NULL;
    troupe_device_t *d = NULL;
    troupe_stream_t *s = NULL;
    troupe_context_t *ctx = NULL, *c1 = NULL, *c2 = NULL;
    troupe_tnode_t *x = NULL, *w = NULL, *y = NULL;
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *mm = NULL;
    troupe_code_t *code = NULL;
    troupe_routine_t *r = NULL;
    troupe_event_t *done = NULL;
    double got[2] = {0, 0};
    troupe_memory_mode_t hosted = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, 0};
    if ((st = troupe_backend_open(backend, TROUPE_ONLY_DEVICES_PARALLEL, &b)) != TROUPE_OK ||
        (st = troupe_get_device(b, 0, &d)) != TROUPE_OK ||
        (st = troupe_new_stream(d, &s)) != TROUPE_OK ||
        (st = troupe_context_new(s, &ctx)) != TROUPE_OK ||
        (st = troupe_tnode_new((const char *[]){"doctor_x"}, 1, TROUPE_PREC_SINGLE, 1,
                               (int64_t[]){3}, NULL, 0, &x)) != TROUPE_OK ||
        (st = troupe_tnode_new((const char *[]){"doctor_w"}, 1, TROUPE_PREC_SINGLE, 2,
                               (int64_t[]){3, 2}, NULL, 0, &w)) != TROUPE_OK ||
        (st = troupe_tnode_new((const char *[]){"doctor_y"}, 1, TROUPE_PREC_SINGLE, 1,
                               (int64_t[]){2}, NULL, 0, &y)) != TROUPE_OK ||
        (st = troupe_tnode_set_values(x, (double[]){1, 2, 3}, 3)) != TROUPE_OK ||
        (st = troupe_tnode_set_values(w, (double[]){1, 0, 0, 1, 1, 1}, 6)) != TROUPE_OK ||
        (st = troupe_tnode_update_memory_mode(y, hosted, 1)) != TROUPE_OK ||
        (st = troupe_asgn_comp_new(&comp)) != TROUPE_OK ||
        (st = troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                      troupe_asgn_node(x), troupe_asgn_node(w), "i,ij=>j", &mm)) !=
            TROUPE_OK)
        goto out;
    troupe_asgn_comp_set_root(comp, mm);
    if ((st = troupe_compile(b, comp, "doctor_probe", &code)) != TROUPE_OK ||
        (st = troupe_init_from_host(ctx, x, &c1, NULL)) != TROUPE_OK ||
        (st = troupe_init_from_host(c1, w, &c2, NULL)) != TROUPE_OK ||
        (st = troupe_link(c2, code, &r)) != TROUPE_OK ||
        (st = troupe_routine_run(r, &done)) != TROUPE_OK ||
        (st = troupe_event_sync(done, TROUPE_TIMEOUT_INFINITE)) != TROUPE_OK ||
        (st = troupe_tnode_get_values(y, got, 2)) != TROUPE_OK)
        goto out;
    if (got[0] != 4 || got[1] != 5)
        st = troupe_error_set(TROUPE_INTERNAL,
                              "the compiled routine computed y = [%g; %g] instead of [4; 5]: the "
                              "compiler's flags break the generated code",
                              got[0], got[1]);
out:
    troupe_event_release(&done);
    troupe_routine_release(&r);
    troupe_code_release(&code);
    troupe_asgn_comp_destroy(&comp);
    troupe_context_release(&c2);
    troupe_context_release(&c1);
    troupe_context_release(&ctx);
    troupe_stream_release(&s);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
    troupe_backend_close(&b);
    return st;
}

static bool s_built(const char *name)
{
    for (size_t i = 0; i < troupe_driver_built_count(); i++)
        if (!strcmp(troupe_driver_built_name(i), name))
            return true;
    return false;
}

static void s_check_compiler(s_result_t *r)
{
    const char *fix = "install a C compiler (apt-get install gcc) or point CC at one; "
                      "TROUPE_CC_FLAGS sets its flags";
    char cc[512];
    snprintf(cc, sizeof cc, "%s %s", troupe_config_cc(), troupe_config_cc_flags());
    if (!s_built("cpu")) {
        s_set(r, S_SKIP, "the cpu backend is not built");
        return;
    }
    /* a fresh cache directory: a cached object would not run the compiler */
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/troupe-doctor-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        s_set(r, S_FAIL,
              "cannot make a temporary directory '%s': %s; fix: set TMPDIR to a "
              "writable directory",
              dir, strerror(errno));
        return;
    }
    char *saved = strdup(troupe_config_cache_dir());
    int64_t t0 = troupe_now_ns();
    troupe_status_t st = saved ? troupe_config_set_cache_dir(dir) : TROUPE_RESOURCE_EXHAUSTED;
    if (st == TROUPE_OK)
        st = s_probe_routine("cpu");
    double dt = s_seconds_since(t0);
    if (st == TROUPE_OK)
        s_set(r, S_PASS,
              "'%s' compiled and loaded a routine through the cpu backend in %.2f s "
              "(result checked)",
              cc, dt);
    else
        s_set(r, S_FAIL, "'%s': %s: %s; fix: %s", cc, troupe_status_str(st), troupe_last_error(),
              fix);
    if (saved && troupe_config_set_cache_dir(saved) != TROUPE_OK)
        s_set(r, S_FAIL, "cannot restore the cache directory setting: %s", troupe_last_error());
    free(saved);
    if (r->v == S_PASS)
        s_remove_dir(dir);
    /* else kept: the compiler's messages name the source file in it */
}

/* ---- cache ----------------------------------------------------------------------------------- */

/* mkdir -p, mode 0700 for what it creates (as the compile cache does). errno on failure. */
static bool s_mkdirs(const char *dir, char *failed, size_t cap)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            snprintf(failed, cap, "%s", path);
            return false;
        }
        *p = c;
        if (!c)
            return true;
    }
}

static void s_check_cache(s_result_t *r)
{
    const char *fix = "set TROUPE_CACHE_DIR to a writable directory on node-local storage";
    const char *dir = troupe_config_cache_dir();
    char failed[4096], probe[4200];
    if (!s_mkdirs(dir, failed, sizeof failed)) {
        s_set(r, S_FAIL, "cannot create '%s' (for the cache directory '%s'): %s; fix: %s", failed,
              dir, strerror(errno), fix);
        return;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        s_set(r, S_FAIL, "the cache directory '%s' is not a directory; fix: %s", dir, fix);
        return;
    }
    snprintf(probe, sizeof probe, "%s/.troupe-doctor.%ld", dir, (long)getpid());
    char wbuf[4096], rbuf[sizeof wbuf];
    for (size_t i = 0; i < sizeof wbuf; i++)
        wbuf[i] = (char)(i * 31 + 7);
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && write(fd, wbuf, sizeof wbuf) == (ssize_t)sizeof wbuf;
    int err = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        unlink(probe);
        s_set(r, S_FAIL, "cannot write a file in the cache directory '%s': %s; fix: %s", dir,
              strerror(err), fix);
        return;
    }
    fd = open(probe, O_RDONLY | O_CLOEXEC);
    ok = fd >= 0 && read(fd, rbuf, sizeof rbuf) == (ssize_t)sizeof rbuf &&
         memcmp(rbuf, wbuf, sizeof wbuf) == 0;
    if (fd >= 0)
        close(fd);
    unlink(probe);
    if (!ok) {
        s_set(r, S_FAIL, "a file written in the cache directory '%s' reads back different; fix: %s",
              dir, fix);
        return;
    }
    struct statvfs vfs;
    if (statvfs(dir, &vfs) == 0)
        s_set(r, S_PASS, "'%s' is writable (%.1f GiB free)", dir,
              (double)vfs.f_bavail * (double)vfs.f_frsize / (1024.0 * 1024 * 1024));
    else
        s_set(r, S_PASS, "'%s' is writable", dir);
}

/* ---- data ------------------------------------------------------------------------------------ */

/* Reads an IDX file's header (gzip or plain): magic, then dims. *count the items; for images
 * the rows and columns must be 28x28. false with the problem in err. */
static bool s_idx_header(const char *path, bool images, long *count, char *err, size_t cap)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "%s: cannot open: %s", path, strerror(errno ? errno : ENOMEM));
        return false;
    }
    unsigned char h[16];
    int want = images ? 16 : 8;
    int got = gzread(f, h, (unsigned)want);
    int zerr = 0;
    const char *zmsg = got < 0 ? gzerror(f, &zerr) : NULL;
    bool ok = false;
    unsigned long magic = got >= 4 ? (unsigned long)h[0] << 24 | h[1] << 16 | h[2] << 8 | h[3] : 0;
    unsigned long expect = images ? 0x803 : 0x801;
    if (got < 0)
        snprintf(err, cap, "%s: cannot read: %s", path, zmsg ? zmsg : "zlib error");
    else if (got < want)
        snprintf(err, cap, "%s: truncated: %d of the header's %d bytes", path, got, want);
    else if (magic != expect)
        snprintf(err, cap, "%s: bad magic 0x%08lx (expected 0x%08lx: IDX %s)", path, magic, expect,
                 images ? "images" : "labels");
    else {
        *count = (long)((unsigned long)h[4] << 24 | h[5] << 16 | h[6] << 8 | h[7]);
        long rows =
            images ? (long)((unsigned long)h[8] << 24 | h[9] << 16 | h[10] << 8 | h[11]) : 28;
        long cols =
            images ? (long)((unsigned long)h[12] << 24 | h[13] << 16 | h[14] << 8 | h[15]) : 28;
        if (rows != 28 || cols != 28)
            snprintf(err, cap, "%s: images of %ldx%ld, expected 28x28", path, rows, cols);
        else if (*count <= 0)
            snprintf(err, cap, "%s: %ld items", path, *count);
        else
            ok = true;
    }
    gzclose(f);
    return ok;
}

static void s_check_data(const char *dir, s_result_t *r)
{
    const char *fix = "install Debian's dataset-fashion-mnist (apt-get install "
                      "dataset-fashion-mnist), or pass the trainer's --data DIR to troupe doctor "
                      "--data DIR";
    static const char *const splits[2] = {"train", "t10k"};
    long counts[2] = {0, 0};
    char err[S_DETAIL - 200];
    for (int s = 0; s < 2; s++) {
        char images[4096], labels[4096];
        snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, splits[s]);
        snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, splits[s]);
        long ni = 0, nl = 0;
        if (!s_idx_header(images, true, &ni, err, sizeof err) ||
            !s_idx_header(labels, false, &nl, err, sizeof err)) {
            s_set(r, S_FAIL, "%s; fix: %s", err, fix);
            return;
        }
        if (ni != nl) {
            s_set(r, S_FAIL, "%s holds %ld images but %s %ld labels; fix: %s", images, ni, labels,
                  nl, fix);
            return;
        }
        counts[s] = ni;
    }
    s_set(r, S_PASS, "'%s': %ld training and %ld test images (IDX headers checked)", dir, counts[0],
          counts[1]);
}

/* ---- gpu ------------------------------------------------------------------------------------- */

static void s_check_gpu(s_result_t *r)
{
    if (!s_built("cuda")) {
        s_set(r, S_SKIP, "%s",
              TROUPE_HAVE_CUDA ? "the cuda backend is not built (this build has NVRTC only)"
                               : "built without CUDA (TROUPE_WITH_CUDA)");
        return;
    }
    troupe_backend_t *b = NULL;
    int n = 0;
    troupe_status_t st = troupe_backend_open("cuda", TROUPE_ONLY_DEVICES_PARALLEL, &b);
    if (st == TROUPE_OK)
        st = troupe_num_devices(b, &n);
    troupe_backend_close(&b);
    int local = troupe_cluster_local_rank(), locals = troupe_cluster_local_size();
    if (st != TROUPE_OK)
        s_set(r, S_FAIL,
              "local rank %d: the cuda backend does not open: %s: %s; fix: check the "
              "NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES",
              local, troupe_status_str(st), troupe_last_error());
    else if (n == 0)
        s_set(r, S_SKIP, "local rank %d sees no GPU (the cuda backend reports 0 devices)", local);
    else
        s_set(r, S_PASS, "local rank %d of %d sees %d GPU(s)%s", local, locals, n,
              locals > n ? ", fewer than the node's ranks: ranks share GPUs" : "");
}

/* ---- the exchange ---------------------------------------------------------------------------- */

/* The settings the ranks must share: the variable (or fact) and what it sets. Values are the
 * effective ones (base/config.h after the environment). Not compared: TROUPE_LOG,
 * TROUPE_LOG_FILE, TROUPE_CACHE_DIR (per rank or per node by design), TROUPE_FAULT (aims at
 * given ranks by design), TROUPE_TRACE and TROUPE_PROGRESS_FILE (output files: they change
 * neither results nor the protocol). A new setting that changes results or the protocol gets
 * a row. */
static const struct {
    const char *key, *what;
} s_agreed[] = {
    {"troupe", "troupe's version"},
    {"build", "the build's features"},
    {"mpi", "the MPI library"},
    {"TROUPE_BACKEND", "the default backend"},
    {"TROUPE_FUSION_BYTES", "the fusion bucket size: part of every collective's fingerprint"},
    {"TROUPE_COLL_SHM", "whether gradients are reduced through shared memory"},
    {"TROUPE_GEMM", "what matrix products call: it changes results in the last bits"},
    {"CC", "the C compiler of generated code"},
    {"TROUPE_CC_FLAGS", "the flags of generated code"},
    {"TROUPE_AUTO_HOST_TRANSFERS", "automatic host transfers"},
    {"TROUPE_STACK_THRESHOLD", "which nodes become local"},
    {"TROUPE_DENORMALS", "whether routines flush subnormals: it changes results"},
    {"TROUPE_RESUME", "the checkpoint a relaunched job resumes from"},
    {"TROUPE_TIMEOUT_S", "the deadline of every wait on another rank"},
    {"TROUPE_DP_FUSED_UPDATE", "whether the optimizer step is fused into the allreduce: it "
                               "changes results in the last bits"},
};
#define S_AGREED (sizeof s_agreed / sizeof s_agreed[0])

/* This rank's value of s_agreed[k]. */
static void s_agreed_value(size_t k, char *out, size_t cap)
{
    const char *key = s_agreed[k].key;
    if (!strcmp(key, "troupe"))
        snprintf(out, cap, "%s", TROUPE_VERSION_STRING);
    else if (!strcmp(key, "build")) {
        troupe__strbuf_t sb;
        troupe__strbuf_init_fixed(&sb, out, cap);
        troupe__strbuf_printf(&sb, "mpi=%d cuda=%d backends=", TROUPE_HAVE_MPI, TROUPE_HAVE_CUDA);
        for (size_t i = 0; i < troupe_driver_built_count(); i++)
            troupe__strbuf_printf(&sb, "%s%s", i ? "," : "", troupe_driver_built_name(i));
    } else if (!strcmp(key, "mpi"))
        snprintf(out, cap, "%s", troupe_mpi_version());
    else if (!strcmp(key, "TROUPE_BACKEND"))
        snprintf(out, cap, "%s", troupe_config_backend());
    else if (!strcmp(key, "TROUPE_FUSION_BYTES"))
        snprintf(out, cap, "%zu", troupe_config_fusion_bytes());
    else if (!strcmp(key, "TROUPE_COLL_SHM"))
        snprintf(out, cap, "%d", troupe_config_coll_shm() ? 1 : 0);
    else if (!strcmp(key, "TROUPE_GEMM"))
        snprintf(out, cap, "%s", troupe_config_gemm_mode_name(troupe_config_gemm_mode()));
    else if (!strcmp(key, "CC"))
        snprintf(out, cap, "%s", troupe_config_cc());
    else if (!strcmp(key, "TROUPE_CC_FLAGS"))
        snprintf(out, cap, "%s", troupe_config_cc_flags());
    else if (!strcmp(key, "TROUPE_AUTO_HOST_TRANSFERS"))
        snprintf(out, cap, "%d", troupe_config_auto_host_transfers() ? 1 : 0);
    else if (!strcmp(key, "TROUPE_RESUME"))
        snprintf(out, cap, "%s", troupe_config_resume());
    else if (!strcmp(key, "TROUPE_DENORMALS"))
        snprintf(out, cap, "%s", troupe_config_flush_denormals() ? "flush" : "keep");
    else if (!strcmp(key, "TROUPE_DP_FUSED_UPDATE"))
        snprintf(out, cap, "%s", troupe_config_dp_fused_update() ? "auto" : "off");
    else if (!strcmp(key, "TROUPE_STACK_THRESHOLD"))
        snprintf(out, cap, "%zu", troupe_config_stack_threshold_bytes());
    else
        snprintf(out, cap, "%lld", (long long)troupe_config_timeout_s());
    for (char *p = out; *p; p++) /* one line per value in the record */
        if (*p == '\n')
            *p = ' ';
}

/* The value of `key` in a record ("key=value" lines) into out; "" when absent. */
static void s_get(const char *record, const char *key, char *out, size_t cap)
{
    size_t klen = strlen(key);
    out[0] = '\0';
    for (const char *p = record; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (!strncmp(p, key, klen) && p[klen] == '=') {
            const char *v = p + klen + 1, *e = strchr(v, '\n');
            size_t n = e ? (size_t)(e - v) : strlen(v);
            snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), v);
            return;
        }
    }
}

/* Gathers every rank's text (at most cap - 1 bytes each) into table[rank * cap], through one
 * allreduce (sum) of integers where only the owner of a slot writes it. The deadline is the
 * doctor's timeout (set as the transport's). */
static troupe_status_t s_allgather(const s_doctor_t *doc, const char *mine, size_t cap, char *table)
{
    size_t words = cap / sizeof(uint64_t) * (size_t)doc->size;
    uint64_t *buf = calloc(words, sizeof *buf);
    if (!buf)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "exchange: out of memory");
    snprintf((char *)buf + (size_t)doc->rank * cap, cap, "%s", mine);
    troupe_coll_tensor_t t = {.data = buf,
                              .count = (int64_t)words,
                              .prec = TROUPE_PREC_UINT64,
                              .name = "troupe doctor exchange"};
    troupe_allreduce_args_t args = {.op = TROUPE_REDUCE_SUM, .n = 1, .tensors = &t};
    troupe_event_t *ev = NULL;
    troupe_status_t st = troupe_allreduce(&args, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, TROUPE_TIMEOUT_INFINITE); /* the transport's deadline */
    troupe_event_release(&ev);
    if (st == TROUPE_OK) {
        memcpy(table, buf, cap * (size_t)doc->size);
        for (int r = 0; r < doc->size; r++)
            table[(size_t)r * cap + cap - 1] = '\0';
    }
    free(buf);
    return st;
}

/* Appends "rank 0" / "ranks 0,2-4" for the ranks whose flag is set. */
static void s_rank_list(troupe__strbuf_t *sb, const bool *in, int n)
{
    int count = 0;
    for (int r = 0; r < n; r++)
        count += in[r];
    troupe__strbuf_puts(sb, count == 1 ? "rank " : "ranks ");
    bool first = true;
    for (int r = 0; r < n; r++) {
        if (!in[r])
            continue;
        int e = r;
        while (e + 1 < n && in[e + 1])
            e++;
        troupe__strbuf_printf(sb, first ? "%d" : ",%d", r);
        if (e > r)
            troupe__strbuf_printf(sb, "-%d", e);
        first = false;
        r = e;
    }
}

/* The agreement check over the gathered records. */
static void s_check_agreement(const s_doctor_t *doc, const char *table, s_result_t *r)
{
    char buf[S_DETAIL];
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, sizeof buf);
    int n = doc->size, differ = 0;
    bool *group = calloc((size_t)n * 2, sizeof *group), *done = group + n;
    char(*vals)[256] = calloc((size_t)n, sizeof *vals);
    if (!group || !vals) {
        free(group);
        free(vals);
        s_set(r, S_FAIL, "out of memory");
        return;
    }
    for (size_t k = 0; k < S_AGREED; k++) {
        for (int q = 0; q < n; q++)
            s_get(table + (size_t)q * S_RECORD, s_agreed[k].key, vals[q], sizeof vals[q]);
        bool same = true;
        for (int q = 1; q < n; q++)
            same &= !strcmp(vals[q], vals[0]);
        if (same)
            continue;
        troupe__strbuf_printf(&sb, "%s%s (%s) differs: ", differ++ ? "; " : "", s_agreed[k].key,
                              s_agreed[k].what);
        memset(done, 0, (size_t)n * sizeof *done);
        bool first = true;
        for (int q = 0; q < n; q++) {
            if (done[q])
                continue;
            for (int p = 0; p < n; p++)
                done[p] |= group[p] = !strcmp(vals[p], vals[q]);
            troupe__strbuf_printf(&sb, "%s'%s' on ", first ? "" : ", ", vals[q]);
            s_rank_list(&sb, group, n);
            first = false;
        }
    }
    if (differ)
        s_set(r, S_FAIL,
              "%s; fix: set them alike on every rank: deploy/mpirun.sh passes every "
              "exported TROUPE_* variable and CC to every rank (-x); by hand, "
              "mpirun -x NAME for each",
              buf);
    else
        s_set(r, S_PASS,
              "%d ranks share troupe %s, the build, the MPI library and every setting "
              "that changes results or the protocol (%zu compared)",
              n, TROUPE_VERSION_STRING, S_AGREED);
    free(group);
    free(vals);
}

/* ---- shared memory --------------------------------------------------------------------------- */

#define S_SHM_MARK UINT64_C(0x74726f7570650000) /* + writer's rank: a peer's write */

static unsigned char s_shm_byte(int rank, size_t i)
{
    return (unsigned char)(i * 7 + (size_t)rank * 13 + 1);
}

/* This rank's region: pattern bytes, then one 8-byte slot per rank for the peers' writes. */
static void *s_shm_region(const s_doctor_t *doc, size_t *len, troupe__shm_ref_t *ref)
{
    *len = S_SHM_DATA + 8 * (size_t)doc->size;
    unsigned char *p = troupe__shm_alloc(*len);
    if (!p)
        return NULL;
    for (size_t i = 0; i < S_SHM_DATA; i++)
        p[i] = s_shm_byte(doc->rank, i);
    if (!troupe__shm_find(p, *len, ref)) {
        troupe__shm_free(p);
        return NULL;
    }
    return p;
}

/* Maps every peer of this host, checks its pattern and writes this rank's mark in its slot.
 * Result into out: "" when all worked, else the first problem. *peers counts the peers. */
static void s_shm_visit(const s_doctor_t *doc, const char *table, char *out, size_t cap, int *peers)
{
    char host[256], mine[256], ref_text[256];
    s_get(table + (size_t)doc->rank * S_RECORD, "host", mine, sizeof mine);
    out[0] = '\0';
    *peers = 0;
    for (int q = 0; q < doc->size; q++) {
        const char *rec = table + (size_t)q * S_RECORD;
        s_get(rec, "host", host, sizeof host);
        if (q == doc->rank || strcmp(host, mine) != 0)
            continue;
        (*peers)++;
        s_get(rec, "shm", ref_text, sizeof ref_text);
        troupe__shm_ref_t ref = {0};
        unsigned long long id, ino;
        long long pid, fd, len;
        if (sscanf(ref_text, "%llu %llu %lld %lld %lld", &id, &ino, &pid, &fd, &len) != 5) {
            snprintf(out, cap, "rank %d could not make a memory file (%s)", q, ref_text);
            return;
        }
        ref = (troupe__shm_ref_t){id, ino, pid, fd, len, 0};
        void *base = NULL;
        if (troupe__shm_map(&ref, &base) != TROUPE_OK) {
            snprintf(out, cap, "rank %d cannot map rank %d's memory: %s", doc->rank, q,
                     troupe_last_error());
            return;
        }
        const unsigned char *p = base;
        size_t bad = S_SHM_DATA;
        for (size_t i = 0; i < S_SHM_DATA && bad == S_SHM_DATA; i++)
            if (p[i] != s_shm_byte(q, i))
                bad = i;
        if (bad == S_SHM_DATA) {
            uint64_t mark = S_SHM_MARK + (uint64_t)doc->rank;
            memcpy((unsigned char *)base + S_SHM_DATA + 8 * (size_t)doc->rank, &mark, 8);
        }
        troupe__shm_unmap(base, ref.len);
        if (bad != S_SHM_DATA) {
            snprintf(out, cap, "rank %d maps rank %d's memory but reads other bytes (offset %zu)",
                     doc->rank, q, bad);
            return;
        }
    }
}

/* After every peer visited: did each peer of this host that reported success write its mark? */
static void s_shm_marks(const s_doctor_t *doc, const char *table, const char *visits,
                        const unsigned char *region, char *out, size_t cap)
{
    char host[256], mine[256];
    s_get(table + (size_t)doc->rank * S_RECORD, "host", mine, sizeof mine);
    out[0] = '\0';
    for (int q = 0; q < doc->size && region; q++) {
        s_get(table + (size_t)q * S_RECORD, "host", host, sizeof host);
        if (q == doc->rank || strcmp(host, mine) != 0 || visits[(size_t)q * 1024] != '\0')
            continue;
        uint64_t mark;
        memcpy(&mark, region + S_SHM_DATA + 8 * (size_t)q, 8);
        if (mark != S_SHM_MARK + (uint64_t)q) {
            snprintf(out, cap, "rank %d's write into rank %d's memory did not arrive", q,
                     doc->rank);
            return;
        }
    }
}

/* How many ranks found a peer on their node (the "peers" of the last results). */
static int s_ranks_with_peers(const s_doctor_t *doc, const char *last)
{
    int n = 0;
    char val[32];
    for (int q = 0; q < doc->size; q++) {
        s_get(last + (size_t)q * S_RECORD, "peers", val, sizeof val);
        n += atoi(val) > 0;
    }
    return n;
}

/* ---- mpi ------------------------------------------------------------------------------------- */

static unsigned char s_mpi_byte(int root, size_t i)
{
    return (unsigned char)((i >> 3) * 131 + i + (size_t)root * 29 + 5);
}

/* Broadcasts 1 MiB from `root` and checks it here. Result text into out ("" when right),
 * the time into *seconds. */
static troupe_status_t s_mpi_move(const s_doctor_t *doc, int root, unsigned char *buf, char *out,
                                  size_t cap, double *seconds)
{
    for (size_t i = 0; i < S_MIB; i++)
        buf[i] = doc->rank == root ? s_mpi_byte(root, i) : 0;
    troupe_coll_tensor_t t = {
        .data = buf, .count = S_MIB / 4, .prec = TROUPE_PREC_INT32, .name = "troupe doctor 1 MiB"};
    troupe_event_t *ev = NULL;
    int64_t t0 = troupe_now_ns();
    troupe_status_t st = troupe_broadcast(&t, 1, root, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, TROUPE_TIMEOUT_INFINITE);
    troupe_event_release(&ev);
    *seconds = s_seconds_since(t0);
    out[0] = '\0';
    if (st != TROUPE_OK)
        return st;
    for (size_t i = 0; i < S_MIB; i++) {
        if (buf[i] != s_mpi_byte(root, i)) {
            snprintf(out, cap, "rank %d received other bytes from rank %d (first at offset %zu)",
                     doc->rank, root, i);
            break;
        }
    }
    return TROUPE_OK;
}

/* ---- the report ------------------------------------------------------------------------------ */

/* This rank's record: host, settings (doc->settings), local results, shared-memory region. */
static void s_record(const s_doctor_t *doc, const troupe__shm_ref_t *ref, bool have_ref, char *out,
                     size_t cap)
{
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, out, cap);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    troupe__strbuf_printf(&sb, "host=%s\n%s", host, doc->settings);
    if (have_ref)
        troupe__strbuf_printf(&sb, "shm=%llu %llu %lld %lld %lld\n", (unsigned long long)ref->id,
                              (unsigned long long)ref->ino, (long long)ref->pid, (long long)ref->fd,
                              (long long)ref->len);
    else
        troupe__strbuf_puts(&sb, "shm=none: memfd_create or its mapping failed\n");
    /* results last: the most likely to be cut by the record's size */
    for (int c = 0; c < C_LOCAL; c++)
        troupe__strbuf_printf(&sb, "check.%s=%c%.1000s\n", s_check_name[c],
                              s_verdict_code[doc->res[c].v], doc->res[c].detail);
}

/* Ranks named in one combined line at most; the others are counted. */
#define S_NAMED_RANKS 4

/* One local check's line for every rank, from the records: a failure names the failing ranks
 * (their details without their fix hints, S_NAMED_RANKS of them), then the first one's hint. */
static void s_combine_local(const s_doctor_t *doc, int c, const char *table, s_result_t *out)
{
    char buf[S_DETAIL], val[S_DETAIL + 2], fix[S_DETAIL] = "";
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, sizeof buf);
    char key[32];
    snprintf(key, sizeof key, "check.%s", s_check_name[c]);
    int passes = 0, skips = 0;
    for (int q = 0; q < doc->size; q++) {
        s_get(table + (size_t)q * S_RECORD, key, val, sizeof val);
        passes += val[0] == 'P';
        skips += val[0] == 'S';
    }
    /* some ranks see GPUs and others none: every rank is named */
    bool gpu_mix = c == C_GPU && passes > 0 && skips > 0;
    int named = 0, fails = 0;
    for (int q = 0; q < doc->size; q++) {
        s_get(table + (size_t)q * S_RECORD, key, val, sizeof val);
        if (!gpu_mix && (val[0] == 'P' || val[0] == 'S'))
            continue;
        fails++;
        char *hint = strstr(val, "; fix: ");
        if (hint) {
            if (!fix[0])
                snprintf(fix, sizeof fix, "%s", hint + 7);
            *hint = '\0';
        }
        if (named++ < S_NAMED_RANKS)
            troupe__strbuf_printf(&sb, "%srank %d: %s", named > 1 ? " | " : "", q,
                                  val[0] ? val + 1 : "no result");
    }
    if (named > S_NAMED_RANKS)
        troupe__strbuf_printf(&sb, " | and %d more rank(s)", named - S_NAMED_RANKS);
    if (gpu_mix)
        snprintf(fix, sizeof fix,
                 "give every rank a GPU (CUDA_VISIBLE_DEVICES, the launcher's "
                 "GPU binding)");
    s_get(table, key, val, sizeof val); /* rank 0's */
    if (fails)
        s_set(out, S_FAIL, "%s; fix: %s", buf, fix[0] ? fix : "see the ranks' messages");
    else if (skips == doc->size)
        s_set(out, S_SKIP, "every rank: %s", val + 1);
    else
        s_set(out, S_PASS, "%d ranks pass; rank 0: %s", doc->size, val + 1);
}

static int s_summary(const s_doctor_t *doc)
{
    int n[3] = {0, 0, 0};
    for (int c = 0; c < C_N; c++)
        n[doc->res[c].v]++;
    printf("summary: %d pass, %d fail, %d skip\n", n[S_PASS], n[S_FAIL], n[S_SKIP]);
    fflush(stdout);
    return n[S_FAIL] ? 1 : 0;
}

/* Prints this rank's own lines (a single process, or after a failed exchange). */
static int s_report_own(s_doctor_t *doc)
{
    for (int c = 0; c < C_N; c++) {
        if (doc->size > 1 && c < C_LOCAL) {
            char d[S_DETAIL];
            snprintf(d, sizeof d, "%s", doc->res[c].detail);
            s_set(&doc->res[c], doc->res[c].v, "rank %d: %s", doc->rank, d);
        }
        s_print(c, &doc->res[c]);
    }
    return s_summary(doc);
}

/* Appends one rank's problem to a combined line: S_NAMED_RANKS of them, then a count. */
static void s_problem(troupe__strbuf_t *sb, int *problems, const char *text)
{
    if (*problems < S_NAMED_RANKS)
        troupe__strbuf_printf(sb, "%s%s", *problems ? " | " : "", text);
    else if (*problems == S_NAMED_RANKS)
        troupe__strbuf_puts(sb, " | and more");
    (*problems)++;
}

/* The cross-rank checks (size > 1). Returns false when an exchange failed: the results of
 * the other ranks are then unknown. */
static bool s_cross_rank(s_doctor_t *doc, char *table)
{
    const char *mpi_fix = "see which rank is named; check the launcher's network settings "
                          "(OMPI_MCA_btl_tcp_if_include) and that no rank is stuck";
    bool ok = false;
    size_t shm_len = 0;
    troupe__shm_ref_t ref = {0};
    void *region = s_shm_region(doc, &shm_len, &ref);
    char *mine = malloc(S_RECORD), *visits = calloc((size_t)doc->size, 1024);
    unsigned char *move = malloc(S_MIB);
    if (!mine || !visits || !move) {
        s_set(&doc->res[C_MPI], S_FAIL, "out of memory");
        goto out;
    }
    s_record(doc, &ref, region != NULL, mine, S_RECORD);
    char what[64];
    s_watch(2 * doc->timeout_s + S_WATCHDOG_SLACK_S, "the exchange of results");
    troupe_status_t st = s_allgather(doc, mine, S_RECORD, table);
    if (st == TROUPE_OK)
        st = troupe_config_set_timeout_s(doc->timeout_s);
    if (st != TROUPE_OK) {
        s_set(&doc->res[C_MPI], S_FAIL,
              "rank %d: the exchange of the checks' results failed: "
              "%s: %s; fix: %s",
              doc->rank, troupe_status_str(st), troupe_last_error(), mpi_fix);
        goto out;
    }
    s_check_agreement(doc, table, &doc->res[C_AGREEMENT]);

    /* shared memory: visit, exchange the outcomes (the peers' writes are then done), check
     * the marks */
    int peers = 0;
    char visit[1024] = "", marks[512] = "";
    if (region)
        s_shm_visit(doc, table, visit, sizeof visit, &peers);
    else
        snprintf(visit, sizeof visit, "rank %d cannot make a memory file (memfd_create)",
                 doc->rank);
    s_watch(doc->timeout_s + S_WATCHDOG_SLACK_S, "the exchange of shared-memory results");
    if ((st = s_allgather(doc, visit, 1024, visits)) != TROUPE_OK) {
        s_set(&doc->res[C_MPI], S_FAIL,
              "rank %d: the exchange of shared-memory results failed: "
              "%s: %s; fix: %s",
              doc->rank, troupe_status_str(st), troupe_last_error(), mpi_fix);
        goto out;
    }
    s_shm_marks(doc, table, visits, region, marks, sizeof marks);

    /* mpi: 1 MiB from rank 0, then from the last rank */
    char moved[2][256];
    double secs[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        int root = k == 0 ? 0 : doc->size - 1;
        snprintf(what, sizeof what, "the 1 MiB broadcast from rank %d", root);
        s_watch(doc->timeout_s + S_WATCHDOG_SLACK_S, what);
        st = s_mpi_move(doc, root, move, moved[k], sizeof moved[k], &secs[k]);
        if (st != TROUPE_OK) {
            s_set(&doc->res[C_MPI], S_FAIL, "rank %d: 1 MiB from rank %d: %s: %s; fix: %s",
                  doc->rank, root, troupe_status_str(st), troupe_last_error(), mpi_fix);
            goto out;
        }
    }
    /* the outcomes of this rank's last two checks, for rank 0's report */
    snprintf(mine, S_RECORD, "marks=%s\nmoved=%s%s%s\nsecs=%.6f %.6f\npeers=%d\n", marks, moved[0],
             moved[0][0] && moved[1][0] ? " | " : "", moved[1], secs[0], secs[1], peers);
    s_watch(doc->timeout_s + S_WATCHDOG_SLACK_S, "the exchange of the last results");
    if ((st = s_allgather(doc, mine, S_RECORD, table + (size_t)doc->size * S_RECORD)) !=
        TROUPE_OK) {
        s_set(&doc->res[C_MPI], S_FAIL,
              "rank %d: the exchange of the last results failed: %s: "
              "%s; fix: %s",
              doc->rank, troupe_status_str(st), troupe_last_error(), mpi_fix);
        goto out;
    }
    s_unwatch();

    /* verdicts, alike on every rank */
    const char *last = table + (size_t)doc->size * S_RECORD;
    char buf[S_DETAIL], val[512];
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, sizeof buf);
    int problems = 0, any_peers = 0;
    double worst = 0;
    for (int q = 0; q < doc->size; q++) {
        const char *rec = last + (size_t)q * S_RECORD;
        if (visits[(size_t)q * 1024])
            s_problem(&sb, &problems, visits + (size_t)q * 1024);
        s_get(rec, "marks", val, sizeof val);
        if (val[0])
            s_problem(&sb, &problems, val);
        s_get(rec, "peers", val, sizeof val);
        any_peers += atoi(val);
    }
    int shm_off = 0;
    for (int q = 0; q < doc->size; q++) {
        s_get(table + (size_t)q * S_RECORD, "TROUPE_COLL_SHM", val, sizeof val);
        shm_off += !strcmp(val, "0");
    }
    if (shm_off == doc->size)
        s_set(&doc->res[C_SHM], S_SKIP,
              "TROUPE_COLL_SHM=0 on every rank: troupe reduces through MPI, not shared memory");
    else if (problems)
        s_set(&doc->res[C_SHM], S_FAIL,
              "%s; fix: the ranks of a node must share a PID namespace "
              "and may not be blocked from each other's /proc/<pid>/fd "
              "(ptrace restrictions); until then TROUPE_COLL_SHM falls "
              "back to MPI",
              buf);
    else if (!any_peers)
        s_set(&doc->res[C_SHM], S_SKIP, "one rank per node: nothing to share");
    else
        s_set(&doc->res[C_SHM], S_PASS,
              "%d rank(s) with a peer on their node map each other's "
              "memory and see each other's writes",
              s_ranks_with_peers(doc, last));
    troupe__strbuf_init_fixed(&sb, buf, sizeof buf);
    problems = 0;
    for (int q = 0; q < doc->size; q++) {
        const char *rec = last + (size_t)q * S_RECORD;
        s_get(rec, "moved", val, sizeof val);
        if (val[0])
            s_problem(&sb, &problems, val);
        s_get(rec, "secs", val, sizeof val);
        double a = 0, b = 0;
        if (sscanf(val, "%lf %lf", &a, &b) == 2 && a + b > worst)
            worst = a + b;
    }
    if (problems)
        s_set(&doc->res[C_MPI], S_FAIL,
              "%s; fix: the network or MPI corrupts data: check the "
              "interfaces (OMPI_MCA_btl_tcp_if_include) and the MPI "
              "library",
              buf);
    else
        s_set(&doc->res[C_MPI], S_PASS,
              "1 MiB from rank 0 to every rank and from rank %d to "
              "every rank, bytes checked on every rank (%.1f ms both "
              "ways on the slowest rank)",
              doc->size - 1, worst * 1e3);
    ok = true;
out:
    s_unwatch();
    if (region)
        troupe__shm_free(region);
    free(mine);
    free(visits);
    free(move);
    return ok;
}

/* A local check on a thread of its own: the main thread waits for it until the deadline. */
typedef struct s_job {
    int check;
    const char *data;
    bool done;
    s_result_t res;
} s_job_t;

static pthread_mutex_t s_job_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t s_job_cv = PTHREAD_COND_INITIALIZER; /* monotonic: see the doctor */

static void *s_job_main(void *arg)
{
    s_job_t *job = arg;
    if (job->check == C_COMPILER)
        s_check_compiler(&job->res);
    else if (job->check == C_CACHE)
        s_check_cache(&job->res);
    else if (job->check == C_DATA)
        s_check_data(job->data, &job->res);
    else
        s_check_gpu(&job->res);
    pthread_mutex_lock(&s_job_mu);
    job->done = true;
    pthread_cond_broadcast(&s_job_cv);
    pthread_mutex_unlock(&s_job_mu);
    return NULL;
}

/* Waits for job->done until deadline_ns; true when it came. */
static bool s_job_wait(s_job_t *job, int64_t deadline_ns)
{
    pthread_mutex_lock(&s_job_mu);
    while (!job->done && troupe_now_ns() < deadline_ns) {
        struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
        pthread_cond_timedwait(&s_job_cv, &s_job_mu, &ts);
    }
    bool done = job->done;
    pthread_mutex_unlock(&s_job_mu);
    return done;
}

/* Runs local check c into doc->res[c] within doc->timeout_s. Past it the check is a FAIL, the
 * processes it started are killed (a hung compiler), and it gets 2 s more to let go of what
 * it holds (the compile check restores the cache setting); false when it still has not: its
 * thread is then abandoned (and its job leaked, as it may still write there). */
static bool s_run_local(s_doctor_t *doc, int c)
{
    static const char *const what[C_LOCAL] = {"the C compiler", "the cache check",
                                              "reading the data set", "the GPU check"};
    s_job_t *job = calloc(1, sizeof *job);
    if (!job) {
        s_set(&doc->res[c], S_FAIL, "out of memory");
        return true;
    }
    job->check = c;
    job->data = doc->data;
    pthread_t t;
    if (pthread_create(&t, NULL, s_job_main, job) != 0) {
        free(job);
        s_set(&doc->res[c], S_FAIL, "cannot start the check's thread");
        return true;
    }
    bool done = s_job_wait(job, troupe_deadline_after((int64_t)doc->timeout_s * 1000000000));
    if (done) {
        doc->res[c] = job->res;
    } else {
        s_set(&doc->res[c], S_FAIL,
              "%s did not finish within %d s (hung); fix: see what "
              "blocks it, or raise --timeout",
              what[c], doc->timeout_s);
        s_kill_descendants();
        done = s_job_wait(job, troupe_deadline_after(2000000000));
    }
    if (!done) {
        pthread_detach(t);
        return false;
    }
    pthread_join(t, NULL);
    free(job);
    return true;
}

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: troupe doctor [--data DIR] [--timeout S]     (also under mpirun)\n"
            "Preflight checks, one line each: PASS|FAIL|SKIP <check>: <detail>; fix: <hint>\n"
            "  compiler, cache, data, gpu on every rank; under a launcher also agreement\n"
            "  (versions, backend, settings, fusion size), shared-memory, mpi (1 MiB both ways)\n"
            "options:\n"
            "  --data DIR     the Fashion-MNIST IDX files [%s]\n"
            "  --timeout S    seconds each check may take, 1..3600 [%d]\n"
            "exit status: 0 all pass, 1 a check failed, 2 usage error\n",
            S_DEFAULT_DATA, S_DEFAULT_TIMEOUT_S);
}

/* Parses the options; returns -1 to go on, else the exit status. */
static int s_parse(int argc, char **argv, s_doctor_t *doc, bool quiet)
{
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (!quiet)
                s_usage(stdout);
            return 0;
        }
        bool data = !strcmp(a, "--data"), timeout = !strcmp(a, "--timeout");
        if (!data && !timeout) {
            if (!quiet)
                fprintf(stderr, "troupe doctor: unknown option '%s'; try 'troupe doctor --help'\n",
                        a);
            return 2;
        }
        if (i + 1 >= argc || !*argv[i + 1]) {
            if (!quiet)
                fprintf(stderr, "troupe doctor: option %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (data) {
            doc->data = v;
            continue;
        }
        char *end = NULL;
        errno = 0;
        long s = strtol(v, &end, 10);
        if (errno || end == v || *end || s < 1 || s > 3600) {
            if (!quiet)
                fprintf(stderr,
                        "troupe doctor: option --timeout: expected whole seconds in "
                        "1..3600, got '%s'\n",
                        v);
            return 2;
        }
        doc->timeout_s = (int)s;
    }
    return -1;
}

int troupe__cmd_doctor(int argc, char **argv)
{
    static s_doctor_t doc; /* static: the results are large */
    memset(&doc, 0, sizeof doc);
    doc.data = S_DEFAULT_DATA;
    doc.timeout_s = S_DEFAULT_TIMEOUT_S;
    int code = s_parse(argc, argv, &doc, false);
    if (code >= 0)
        return code;
    s_cond_monotonic(&s_job_cv);
    if (!s_watchdog_start()) {
        fprintf(stderr, "troupe doctor: cannot start the watchdog thread\n");
        return 1;
    }

    s_watch(doc.timeout_s + S_WATCHDOG_SLACK_S, "starting MPI (troupe_cluster_init)");
    troupe_status_t st = troupe_cluster_init(&argc, &argv);
    s_unwatch();
    if (st != TROUPE_OK) {
        printf("FAIL mpi: starting the cluster: %s: %s; fix: check the launcher and the MPI "
               "installation (mpirun --version)\n",
               troupe_status_str(st), troupe_last_error());
        return 1;
    }
    doc.rank = troupe_cluster_rank();
    doc.size = troupe_cluster_size();
    pthread_mutex_lock(&s_wd.mu);
    snprintf(s_wd.prefix, sizeof s_wd.prefix, doc.size > 1 ? "rank %d: " : "", doc.rank);
    pthread_mutex_unlock(&s_wd.mu);

    /* the local checks, each on a thread of its own with a deadline; printed at once by a
     * single process */
    bool stuck = false;
    for (int c = 0; c < C_LOCAL; c++) {
        stuck |= !s_run_local(&doc, c);
        if (doc.size == 1)
            s_print(c, &doc.res[c]);
    }
    if (doc.size == 1) {
        for (int c = C_LOCAL; c < C_N; c++) {
            s_set(&doc.res[c], S_SKIP,
                  "one process; run it under the job's launcher (mpirun "
                  "-np N troupe doctor) to check the ranks together");
            s_print(c, &doc.res[c]);
        }
        code = s_summary(&doc);
        if (stuck) /* a check's thread still runs: end without the exit handlers' teardown */
            _exit(code ? code : 1);
        st = troupe_cluster_finalize();
        return st == TROUPE_OK ? code : 1;
    }

    /* the doctor's own collectives: its deadline, the default fusion size (the ranks'
     * settings were recorded first) */
    char *table = calloc((size_t)doc.size * 2, S_RECORD);
    bool exchanged = false;
    if (!table)
        s_set(&doc.res[C_MPI], S_FAIL, "out of memory");
    else {
        troupe__strbuf_t sb;
        troupe__strbuf_init_fixed(&sb, doc.settings, sizeof doc.settings);
        char v[512];
        for (size_t k = 0; k < S_AGREED; k++) {
            s_agreed_value(k, v, sizeof v);
            troupe__strbuf_printf(&sb, "%s=%s\n", s_agreed[k].key, v);
        }
        /* the first exchange waits twice the deadline: a rank whose local check hung
         * arrives after one */
        troupe_status_t set = troupe_config_set_timeout_s(2 * doc.timeout_s);
        if (set == TROUPE_OK)
            set = troupe_config_set_fusion_bytes((size_t)64 << 20);
        (void)set; /* both values are valid */
        exchanged = s_cross_rank(&doc, table);
    }
    if (!exchanged) {
        for (int c = C_AGREEMENT; c < C_MPI; c++)
            s_set(&doc.res[c], S_SKIP, "needs the exchange between ranks, which failed (see mpi)");
        code = s_report_own(&doc);
        free(table);
        (void)troupe_cluster_leave("troupe doctor: the exchange between ranks failed");
        if (stuck)
            _exit(1);
        return 1;
    }
    for (int c = 0; c < C_LOCAL; c++)
        s_combine_local(&doc, c, table, &doc.res[c]);
    free(table);
    int fails = 0;
    for (int c = 0; c < C_N; c++)
        fails += doc.res[c].v == S_FAIL;
    if (doc.rank == 0) {
        for (int c = 0; c < C_N; c++)
            s_print(c, &doc.res[c]);
        s_summary(&doc);
    }
    if (stuck)
        _exit(doc.rank == 0 && fails ? 1 : 0);
    st = troupe_cluster_finalize();
    /* rank 0 carries the verdict (the launcher's exit status is the first non-zero one): a
     * failing exit of another rank could make the launcher end rank 0 before its report is out */
    return doc.rank == 0 && (fails || st != TROUPE_OK) ? 1 : 0;
}
