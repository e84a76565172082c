/* troupe run — elastic runs: launch a job, watch it, relaunch it from its last committed
 * checkpoint when a rank dies or the cluster fails (docs/cluster.md "Failures and restarts").
 *
 *   troupe run -np N [--min-np M] [--max-restarts K] [--hostfile F] [--checkpoint FILE]
 *              [--timeout S] [--launcher auto|mpiexec|srun] [--resume-flag FLAG|none]
 *              [--dry-run] -- PROGRAM [ARGS...]
 *
 * Launcher: srun under Slurm (SLURM_JOB_ID set, no --hostfile), else mpiexec (the one the build
 * found). Without a hostfile, mpiexec gets the settings troupe's own runs use on one machine
 * (shared memory and loopback: --mca btl self,vader --mca oob_tcp_if_include lo --oversubscribe
 * --bind-to none) and --allow-run-as-root as root; every TROUPE_* variable goes to the ranks
 * with -x. The job's standard output is this process's; its standard error passes through this
 * process (read to learn which rank failed and how); its standard input is /dev/null.
 *
 * The ranks available for an attempt: with --hostfile, the slots the file lists now (it is
 * read again before every attempt: take a failed node out of it and the next attempt runs
 * without it); under srun, SLURM_NTASKS (else N); otherwise N. An attempt runs
 * min(N, available) ranks; fewer than M (default N) ends the run.
 *
 * What is restarted: a rank killed by a signal (the launcher reports it), a job that exits with
 * status 75 (EX_TEMPFAIL: troupe's trainer exits so when the cluster failed — TRANSPORT_ERROR,
 * DEADLINE_EXCEEDED), an MPI transport failure the launcher reports (a lost peer or daemon),
 * and an attempt that outlives --timeout (the watchdog ends it: SIGTERM, SIGKILL 10 s later).
 * Any other failure (a usage error, a program error) ends the run at once with its status.
 *
 * The restart contract: a relaunched job gets TROUPE_RESUME=<the checkpoint> in its
 * environment and, unless --resume-flag none, `--resume <checkpoint>` replacing any --resume
 * in ARGS (the trainer's option); when no checkpoint was committed yet, it starts over without
 * them. TROUPE_PROGRESS_FILE names a file where rank 0 of a data-parallel program keeps its
 * step count (parallel/dp.h does it), from which the summary tells how much work a failure
 * lost: the steps between the checkpoint and the failure. The checkpoint path is --checkpoint,
 * else the value of --checkpoint in ARGS.
 *
 * Output (stderr, lines starting "troupe run:"): the launch of each attempt, one line per
 * restart ("restart 1/3: rank 1 died (signal 9, Killed) after 4.2 s at step 37; resuming from
 * step 30 (ck) on 2 rank(s)"), and after any failure a summary: each attempt, what ended it,
 * the work redone. Exit status: the job's (0 when the last attempt succeeded; else its exit
 * status, 128 + signal for a launcher killed by a signal, 124 after the watchdog); 2 for a
 * usage error of troupe run itself, 127 when the launcher or the program cannot be started (a
 * program that is not an executable file here is refused before any launch; through a
 * hostfile or srun, the launcher's own words say so).
 */
#define _GNU_SOURCE /* environ, mkdtemp, strsignal */
#include "cmd_impl.h"

#include "base/alloc.h"
#include "base/strbuf.h"
#include "base/vec.h"
#include "parallel/dp.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef TROUPE_MPIEXEC
#define TROUPE_MPIEXEC "mpiexec"
#endif

#define S_EX_TEMPFAIL 75    /* sysexits.h: a temporary failure, worth a retry */
#define S_EX_WATCHDOG 124   /* as timeout(1) */
#define S_EX_NOLAUNCH 127   /* the launcher could not be executed */
#define S_GRACE_S 10        /* SIGTERM to SIGKILL for the watchdog */
#define S_MAX_ATTEMPTS 1001 /* --max-restarts at most 1000 */

typedef enum s_launcher { S_AUTO, S_MPIEXEC, S_SRUN } s_launcher_t;

typedef struct s_opts {
    int np, min_np, max_restarts;
    double timeout_s; /* 0: none */
    const char *hostfile, *checkpoint, *resume_flag;
    s_launcher_t launcher;
    bool dry_run;
    char **prog; /* PROGRAM ARGS..., NULL-terminated (argv's tail) */
    int nprog;
} s_opts_t;

/* How an attempt ended. */
typedef struct s_attempt {
    int np;
    int64_t from_step;     /* the checkpoint's step it resumed from, -1: from the start */
    double t_start, t_end; /* seconds since troupe run started */
    int status;            /* exit status as the summary reports it */
    bool restartable;
    char what[256];        /* "rank 1 died (signal 9, Killed)" */
    int64_t progress_step; /* TROUPE_PROGRESS_FILE at the end, -1: unknown */
    int64_t ckpt_step;     /* the checkpoint's step at the end, -1: none */
} s_attempt_t;

/* What the launcher's standard error said about the failure. */
typedef struct s_seen {
    int signal_rank, signal; /* "rank R ... exited on signal N", -1 when not seen */
    int exit_rank;           /* "Process name: [[j,1],R]" before an "Exit code:" */
    int exit_code;
    char task_msg[128]; /* srun: "task R: <msg>" */
    int task_rank;
    char transport[160]; /* an MPI transport failure's words */
    bool no_program;     /* the launcher could not find or execute the program */
} s_seen_t;

static volatile sig_atomic_t s_interrupted; /* the signal that asked us to stop, or 0 */

static void s_on_signal(int sig)
{
    s_interrupted = sig;
}

static double s_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void s_usage(FILE *f)
{
    fprintf(f, "usage: troupe run -np N [options] -- PROGRAM [ARGS...]\n"
               "Launches PROGRAM on N ranks (mpiexec, or srun under Slurm), watches it, and when\n"
               "a rank dies or the cluster fails relaunches it from its last committed checkpoint\n"
               "(TROUPE_RESUME=FILE, and --resume FILE for the trainer).\n"
               "options:\n"
               "  -np N                ranks to run [required]\n"
               "  --min-np M           fewest ranks a restart may run on [N]\n"
               "  --max-restarts K     restarts before giving up [3]\n"
               "  --hostfile F         mpiexec's hostfile; read again before every attempt: its\n"
               "                       slots are the ranks available\n"
               "  --checkpoint FILE    the checkpoint the job commits [the value of --checkpoint\n"
               "                       in ARGS]\n"
               "  --timeout S          watchdog: end an attempt that runs longer than S seconds\n"
               "                       and count it as a failure, 0 = none [0]\n"
               "  --launcher NAME      auto, mpiexec or srun [auto: srun when SLURM_JOB_ID is set\n"
               "                       and no --hostfile is given]\n"
               "  --resume-flag FLAG   the program's resume option, or none (only TROUPE_RESUME)\n"
               "                       [--resume]\n"
               "  --dry-run            print the first launch command and exit\n"
               "exit status: the job's; 124 after the watchdog; 2 usage error; 127 no launcher or\n"
               "no program\n");
}

/* ---- options ----------------------------------------------------------------------------- */

static bool s_int_arg(const char *text, long lo, long hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* Parses argv[2..] into *o; false with one line on stderr. *help: --help seen. */
static bool s_parse(int argc, char **argv, s_opts_t *o, bool *help)
{
    memset(o, 0, sizeof *o);
    o->min_np = -1;
    o->max_restarts = 3;
    o->resume_flag = "--resume";
    *help = false;
    int i = 2;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = true;
            return true;
        }
        if (!strcmp(a, "--dry-run")) {
            o->dry_run = true;
            continue;
        }
        if (a[0] != '-') /* PROGRAM without "--" */
            break;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) {
            fprintf(stderr, "troupe run: option %s needs a value (see troupe run --help)\n", a);
            return false;
        }
        i++;
        bool ok = true;
        double t = 0;
        char *end = NULL;
        if (!strcmp(a, "-np") || !strcmp(a, "-n") || !strcmp(a, "--np"))
            ok = s_int_arg(val, 1, 1 << 20, &o->np);
        else if (!strcmp(a, "--min-np"))
            ok = s_int_arg(val, 1, 1 << 20, &o->min_np);
        else if (!strcmp(a, "--max-restarts"))
            ok = s_int_arg(val, 0, S_MAX_ATTEMPTS - 1, &o->max_restarts);
        else if (!strcmp(a, "--hostfile"))
            o->hostfile = val;
        else if (!strcmp(a, "--checkpoint"))
            o->checkpoint = val;
        else if (!strcmp(a, "--resume-flag"))
            o->resume_flag = strcmp(val, "none") ? val : NULL;
        else if (!strcmp(a, "--timeout")) {
            errno = 0;
            t = strtod(val, &end);
            ok = !errno && end != val && !*end && t >= 0 && t <= 1e7;
            o->timeout_s = t;
        } else if (!strcmp(a, "--launcher")) {
            o->launcher = !strcmp(val, "auto")      ? S_AUTO
                          : !strcmp(val, "mpiexec") ? S_MPIEXEC
                          : !strcmp(val, "srun")    ? S_SRUN
                                                    : (ok = false, S_AUTO);
        } else {
            fprintf(stderr, "troupe run: unknown option '%s' (see troupe run --help)\n", a);
            return false;
        }
        if (!ok || !*val) {
            fprintf(stderr, "troupe run: option %s: bad value '%s' (see troupe run --help)\n", a,
                    val);
            return false;
        }
    }
    if (o->np < 1) {
        fprintf(stderr, "troupe run: -np N is required (see troupe run --help)\n");
        return false;
    }
    if (o->min_np < 0)
        o->min_np = o->np;
    if (o->min_np > o->np) {
        fprintf(stderr, "troupe run: --min-np %d exceeds -np %d\n", o->min_np, o->np);
        return false;
    }
    if (i >= argc) {
        fprintf(stderr, "troupe run: no program to run (troupe run -np N -- PROGRAM ARGS)\n");
        return false;
    }
    o->prog = argv + i;
    o->nprog = argc - i;
    if (o->launcher == S_AUTO)
        o->launcher = getenv("SLURM_JOB_ID") && !o->hostfile ? S_SRUN : S_MPIEXEC;
    if (o->launcher == S_SRUN && o->hostfile) {
        fprintf(stderr, "troupe run: --hostfile is for mpiexec; srun takes its nodes from Slurm\n");
        return false;
    }
    /* the checkpoint: --checkpoint, else the program's own --checkpoint */
    for (int k = 1; !o->checkpoint && k < o->nprog; k++) {
        if (!strcmp(o->prog[k], "--checkpoint") && k + 1 < o->nprog)
            o->checkpoint = o->prog[k + 1];
        else if (!strncmp(o->prog[k], "--checkpoint=", 13))
            o->checkpoint = o->prog[k] + 13;
    }
    return true;
}

/* ---- the ranks available -------------------------------------------------------------------- */

/* The slots a hostfile lists (Open MPI's format: "host [slots=N] [max_slots=M]", '#' comments;
 * a line without slots= counts 1). -1 with one line on stderr when it cannot be read. */
static int s_hostfile_slots(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "troupe run: cannot read hostfile '%s': %s\n", path, strerror(errno));
        return -1;
    }
    char line[1024];
    long total = 0;
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *host = strtok(line, " \t\r\n");
        if (!host)
            continue;
        long slots = 1;
        for (char *w = strtok(NULL, " \t\r\n"); w; w = strtok(NULL, " \t\r\n"))
            if (!strncmp(w, "slots=", 6))
                slots = strtol(w + 6, NULL, 10);
        if (slots > 0 && total < INT_MAX - slots)
            total += slots;
    }
    fclose(f);
    return (int)total;
}

/* The ranks available now (header comment), or -1 when it cannot be told. `why` says how. */
static int s_available(const s_opts_t *o, char *why, size_t cap)
{
    if (o->hostfile) {
        snprintf(why, cap, "the slots of hostfile %s", o->hostfile);
        return s_hostfile_slots(o->hostfile);
    }
    const char *tasks = getenv("SLURM_NTASKS");
    if (!tasks)
        tasks = getenv("SLURM_NPROCS");
    int n = 0;
    if (o->launcher == S_SRUN && tasks && s_int_arg(tasks, 1, INT_MAX, &n)) {
        snprintf(why, cap, "SLURM_NTASKS");
        return n;
    }
    snprintf(why, cap, "-np");
    return o->np;
}

/* ---- the command line ---------------------------------------------------------------------- */

typedef struct s_argv {
    char **v;
    size_t n, cap;
    bool failed;
} s_argv_t;

static void s_arg(s_argv_t *a, const char *fmt, ...) TROUPE_PRINTF(2, 3);
static void s_arg(s_argv_t *a, const char *fmt, ...)
{
    if (a->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int r = vasprintf(&s, fmt, ap);
    va_end(ap);
    /* keep one slot for the NULL terminator */
    if (r < 0 || !TROUPE__VEC_RESERVE(a->v, a->cap, a->n + 2)) {
        if (r >= 0)
            free(s);
        a->failed = true;
        return;
    }
    a->v[a->n++] = s;
    a->v[a->n] = NULL;
}

static void s_argv_free(s_argv_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->v[i]);
    troupe_free(a->v);
    memset(a, 0, sizeof *a);
}

extern char **environ;

/* The launcher's command for np ranks, resuming from `resume` (NULL: none). */
static bool s_command(const s_opts_t *o, int np, const char *resume, s_argv_t *a)
{
    if (o->launcher == S_SRUN) {
        s_arg(a, "srun");
        s_arg(a, "-n");
        s_arg(a, "%d", np);
        s_arg(a, "--kill-on-bad-exit=1");
    } else {
        s_arg(a, "%s", TROUPE_MPIEXEC);
        s_arg(a, "-n");
        s_arg(a, "%d", np);
        if (o->hostfile) {
            s_arg(a, "--hostfile");
            s_arg(a, "%s", o->hostfile);
        } else {
            static const char *const local[] = {
                "--mca",           "btl",       "self,vader", "--mca", "oob_tcp_if_include", "lo",
                "--oversubscribe", "--bind-to", "none"};
            for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
                s_arg(a, "%s", local[i]);
        }
        if (geteuid() == 0)
            s_arg(a, "--allow-run-as-root");
        /* TROUPE_* to every rank (the local ones inherit them anyway); the two the child
         * gets from s_spawn always */
        s_arg(a, "-x");
        s_arg(a, "TROUPE_RESUME");
        s_arg(a, "-x");
        s_arg(a, "TROUPE_PROGRESS_FILE");
        for (char **e = environ; *e; e++) {
            const char *eq = strchr(*e, '=');
            if (!strncmp(*e, "TROUPE_", 7) && eq && strncmp(*e, "TROUPE_RESUME=", 14) &&
                strncmp(*e, "TROUPE_PROGRESS_FILE=", 21)) {
                s_arg(a, "-x");
                s_arg(a, "%.*s", (int)(eq - *e), *e);
            }
        }
    }
    s_arg(a, "%s", o->prog[0]);
    for (int k = 1; k < o->nprog; k++) {
        const char *w = o->prog[k];
        if (resume && o->resume_flag) { /* drop the program's own resume option */
            size_t fl = strlen(o->resume_flag);
            if (!strcmp(w, o->resume_flag)) {
                k++;
                continue;
            }
            if (!strncmp(w, o->resume_flag, fl) && w[fl] == '=')
                continue;
        }
        s_arg(a, "%s", w);
    }
    if (resume && o->resume_flag) {
        s_arg(a, "%s", o->resume_flag);
        s_arg(a, "%s", resume);
    }
    return !a->failed;
}

static void s_print_command(FILE *f, const s_argv_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        fprintf(f, "%s%s", i ? " " : "", a->v[i]);
    fprintf(f, "\n");
}

/* ---- watching an attempt --------------------------------------------------------------------- */

/* Reads what one line of the launcher's standard error says about a failure. */
static void s_scan_line(const char *line, s_seen_t *seen)
{
    const char *p;
    int rank = -1, sig = -1, code = 0;
    if ((p = strstr(line, "noticed that process rank ")) != NULL &&
        sscanf(p, "noticed that process rank %d", &rank) == 1 &&
        (p = strstr(p, "exited on signal ")) != NULL &&
        sscanf(p, "exited on signal %d", &sig) == 1) {
        if (seen->signal < 0) {
            seen->signal_rank = rank;
            seen->signal = sig;
        }
        return;
    }
    if ((p = strstr(line, "Process name: [[")) != NULL) {
        int j = 0, v = 0;
        if (sscanf(p, "Process name: [[%d,%d],%d]", &j, &v, &rank) == 3 && seen->exit_rank < 0)
            seen->exit_rank = rank;
        return;
    }
    if ((p = strstr(line, "Exit code:")) != NULL && sscanf(p, "Exit code: %d", &code) == 1) {
        if (seen->exit_code == 0)
            seen->exit_code = code;
        return;
    }
    /* srun: "srun: error: node: task 1: Killed" */
    if (strstr(line, "srun: error:") && (p = strstr(line, ": task ")) != NULL &&
        sscanf(p, ": task %d", &rank) == 1 && seen->task_rank < 0) {
        const char *msg = strchr(p + 7, ':');
        seen->task_rank = rank;
        snprintf(seen->task_msg, sizeof seen->task_msg, "%s", msg ? msg + 2 : "failed");
        seen->task_msg[strcspn(seen->task_msg, "\r\n")] = '\0';
        return;
    }
    static const char *const no_program[] = {
        "unable to find the specified executable",    /* mpiexec: not on PATH */
        "unable to launch the specified application", /* mpiexec: cannot access or execute */
        "execve(): ",                                 /* slurmstepd: "execve(): prog: No such..." */
        "Unable to exec",                             /* srun */
    };
    for (size_t i = 0; i < sizeof no_program / sizeof no_program[0]; i++)
        if (strstr(line, no_program[i]))
            seen->no_program = true;
    static const char *const transport[] = {
        "lost communication with a remote daemon",
        "communication peer process has unexpectedly disconnected",
        "unable to complete a TCP connection",
        "A daemon (pid", /* "... died unexpectedly" */
        "ORTE has lost communication",
        "srun: error: Node failure",
        "task launch failed",
    };
    for (size_t i = 0; i < sizeof transport / sizeof transport[0]; i++)
        if (strstr(line, transport[i]) && !seen->transport[0]) {
            snprintf(seen->transport, sizeof seen->transport, "%s", line);
            seen->transport[strcspn(seen->transport, "\r\n")] = '\0';
        }
}

/* Echoes buf[n] to stderr line by line and scans each complete line; *pending holds a line
 * begun but not ended (flushed as it is when it grows past its size). */
static void s_take_output(const char *buf, size_t n, troupe__strbuf_t *pending, s_seen_t *seen)
{
    (void)!write(STDERR_FILENO, buf, n);
    for (size_t i = 0; i < n; i++) {
        troupe__strbuf_putc(pending, buf[i]);
        if (buf[i] == '\n' || pending->len >= 4096) {
            s_scan_line(troupe__strbuf_cstr(pending), seen);
            troupe__strbuf_reset(pending);
        }
    }
}

/* A whole-number file (TROUPE_PROGRESS_FILE), or -1. */
static int64_t s_read_step_file(const char *path)
{
    FILE *f = fopen(path, "r");
    long long v = -1;
    if (f) {
        if (fscanf(f, "%lld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* The checkpoint's step, or -1 when there is none; *bad: a file that exists but does not
 * parse (its message on stderr). */
static int64_t s_ckpt_step(const char *path, bool *bad)
{
    *bad = false;
    if (!path || access(path, F_OK) != 0)
        return -1;
    troupe_dp_checkpoint_info_t *info = calloc(1, sizeof *info);
    int64_t step = -1;
    if (info && troupe_dp_checkpoint_read(path, info) == TROUPE_OK) {
        step = info->steps;
    } else {
        *bad = true;
        fprintf(stderr, "troupe run: checkpoint %s: %s\n", path,
                info ? troupe_last_error() : "out of memory");
    }
    free(info);
    return step;
}

static const char *s_signame(int sig)
{
    const char *s = strsignal(sig);
    return s ? s : "unknown signal";
}

/* Starts `a` with the given environment additions; returns the child's pid (its own process
 * group) and the read end of its standard error in *err_fd, or -1. */
static pid_t s_spawn(const s_argv_t *a, const char *resume, const char *progress, int *err_fd)
{
    int fds[2];
    if (pipe(fds) != 0) {
        fprintf(stderr, "troupe run: pipe: %s\n", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "troupe run: fork: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            close(devnull);
        }
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        setenv("TROUPE_RESUME", resume ? resume : "", 1);
        setenv("TROUPE_PROGRESS_FILE", progress, 1);
        execvp(a->v[0], a->v);
        fprintf(stderr, "troupe run: cannot run %s: %s\n", a->v[0], strerror(errno));
        _exit(S_EX_NOLAUNCH);
    }
    setpgid(pid, pid); /* also here: no race with a signal sent before the child ran */
    close(fds[1]);
    *err_fd = fds[0];
    return pid;
}

/* Runs one attempt to its end (or the watchdog's): fills at->status, ->what, ->restartable. */
static void s_watch(const s_opts_t *o, pid_t pid, int err_fd, double t0, s_attempt_t *at)
{
    s_seen_t seen = {.signal_rank = -1, .signal = -1, .exit_rank = -1, .task_rank = -1};
    troupe__strbuf_t pending = TROUPE__STRBUF_INIT;
    double deadline = o->timeout_s > 0 ? s_now() + o->timeout_s : 0, kill_at = 0;
    double drain_until = 0; /* after the launcher exited: what its group still writes */
    bool watchdog = false, open_fd = true, exited = false;
    int forwarded = 0, wstatus = 0;
    while (!exited || open_fd) {
        if (s_interrupted && forwarded != s_interrupted && !exited) {
            forwarded = s_interrupted;
            kill(-pid, forwarded);
        }
        double now = s_now();
        if (deadline > 0 && now >= deadline && !watchdog && !exited) {
            watchdog = true;
            fprintf(stderr,
                    "troupe run: watchdog: the attempt ran past --timeout %g s; ending it\n",
                    o->timeout_s);
            kill(-pid, SIGTERM);
            kill_at = now + S_GRACE_S;
        }
        if (kill_at > 0 && now >= kill_at && !exited) {
            kill(-pid, SIGKILL);
            kill_at = 0;
        }
        if (!exited && waitpid(pid, &wstatus, WNOHANG) == pid) {
            exited = true;
            drain_until = now + 2.0;
        }
        if (exited && open_fd && now >= drain_until)
            break; /* something of the job's group still holds the pipe: stop reading */
        if (!open_fd) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        struct pollfd pfd = {.fd = err_fd, .events = POLLIN};
        int r = poll(&pfd, 1, 100);
        if (r > 0) {
            char buf[4096];
            ssize_t n = read(err_fd, buf, sizeof buf);
            if (n > 0)
                s_take_output(buf, (size_t)n, &pending, &seen);
            else if (n == 0 || (errno != EINTR && errno != EAGAIN))
                open_fd = false;
        }
    }
    if (pending.len > 0)
        s_scan_line(troupe__strbuf_cstr(&pending), &seen);
    troupe__strbuf_reset(&pending);
    close(err_fd);
    kill(-pid, SIGKILL); /* what the launcher left of its group (usually nothing: ESRCH) */

    at->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    at->restartable = true;
    if (s_interrupted) {
        at->restartable = false;
        snprintf(at->what, sizeof at->what, "interrupted (%s)", s_signame(s_interrupted));
        at->status = 128 + s_interrupted;
    } else if (watchdog) {
        snprintf(at->what, sizeof at->what, "watchdog: still running after %g s", o->timeout_s);
        at->status = S_EX_WATCHDOG;
    } else if (at->status == 0) {
        at->restartable = false;
        snprintf(at->what, sizeof at->what, "completed");
    } else if (seen.no_program) {
        at->restartable = false;
        at->status = S_EX_NOLAUNCH;
        snprintf(at->what, sizeof at->what,
                 "the ranks could not start the program '%.100s' (not found or not executable; "
                 "the launcher's message is above)",
                 o->prog[0]);
    } else if (seen.signal >= 0) {
        snprintf(at->what, sizeof at->what, "rank %d died (signal %d, %s)", seen.signal_rank,
                 seen.signal, s_signame(seen.signal));
    } else if (seen.task_rank >= 0 &&
               (strstr(seen.task_msg, "Killed") || strstr(seen.task_msg, "signal") ||
                strstr(seen.task_msg, "exit code 75"))) {
        snprintf(at->what, sizeof at->what, "rank %d failed (srun: %s)", seen.task_rank,
                 seen.task_msg);
    } else if (at->status == S_EX_TEMPFAIL) {
        if (seen.exit_rank >= 0)
            snprintf(at->what, sizeof at->what,
                     "rank %d reported a failure of the cluster (exit status 75)", seen.exit_rank);
        else
            snprintf(at->what, sizeof at->what,
                     "a rank reported a failure of the cluster (exit status 75)");
    } else if (seen.transport[0]) {
        snprintf(at->what, sizeof at->what, "transport error: %.200s", seen.transport);
    } else if (WIFSIGNALED(wstatus)) {
        snprintf(at->what, sizeof at->what, "the launcher died (signal %d, %s)", WTERMSIG(wstatus),
                 s_signame(WTERMSIG(wstatus)));
    } else {
        at->restartable = false;
        if (at->status == S_EX_NOLAUNCH)
            snprintf(at->what, sizeof at->what, "the launcher could not be started");
        else if (seen.exit_rank >= 0)
            snprintf(at->what, sizeof at->what,
                     "rank %d exited with status %d (a program error, not a rank death or a "
                     "transport error: not restarted)",
                     seen.exit_rank, seen.exit_code ? seen.exit_code : at->status);
        else
            snprintf(at->what, sizeof at->what,
                     "the job exited with status %d (a program error, not a rank death or a "
                     "transport error: not restarted)",
                     at->status);
    }
    at->t_end = s_now() - t0;
}

/* ---- the run ------------------------------------------------------------------------------- */

static void s_summary(const s_attempt_t *at, int n, int restarts, const s_opts_t *o, int status)
{
    int64_t redone = 0;
    bool redone_known = true;
    fprintf(stderr,
            "troupe run: summary: %d attempt(s), %d restart(s) (--max-restarts %d), "
            "%.1f s; exit status %d\n",
            n, restarts, o->max_restarts, at[n - 1].t_end, status);
    for (int i = 0; i < n; i++) {
        const s_attempt_t *a = &at[i];
        char from[48] = "from the start", lost[160] = "";
        if (a->from_step >= 0)
            snprintf(from, sizeof from, "from step %lld", (long long)a->from_step);
        if (a->status != 0 && a->restartable) {
            char at_step[48] = "at an unknown step";
            if (a->progress_step >= 0)
                snprintf(at_step, sizeof at_step, "at step %lld", (long long)a->progress_step);
            int64_t base = a->ckpt_step >= 0 ? a->ckpt_step : 0;
            if (a->progress_step >= base) {
                snprintf(lost, sizeof lost, " %s; %s %lld: %lld step(s) redone", at_step,
                         a->ckpt_step >= 0 ? "last checkpoint at step" : "no checkpoint: from step",
                         (long long)base, (long long)(a->progress_step - base));
                redone += a->progress_step - base;
            } else {
                snprintf(lost, sizeof lost, " %s; work redone unknown", at_step);
                redone_known = false;
            }
        }
        fprintf(stderr, "troupe run:   attempt %d: %d rank(s) %s, %.1f-%.1f s: %s%s\n", i + 1,
                a->np, from, a->t_start, a->t_end, a->what, lost);
    }
    if (redone_known)
        fprintf(stderr, "troupe run: work redone: %lld step(s) in all\n", (long long)redone);
    else
        fprintf(stderr,
                "troupe run: work redone: at least %lld step(s) (some failures' steps "
                "unknown: TROUPE_PROGRESS_FILE was not written)\n",
                (long long)redone);
}

/* The progress file: beside the checkpoint (a file system rank 0 can reach when it runs on
 * another node, as the checkpoint must be), else in TMPDIR. */
static char *s_progress_path(const s_opts_t *o)
{
    if (o->checkpoint)
        return troupe_strdup_printf("%s.progress.%ld", o->checkpoint, (long)getpid());
    const char *tmp = getenv("TMPDIR");
    return troupe_strdup_printf("%s/troupe-run-progress.%ld", tmp && *tmp ? tmp : "/tmp",
                                (long)getpid());
}

/* Whether `prog` names an executable file here (a path, or a name on PATH); else one line on
 * stderr saying why. Checked before a launch on this machine (no --hostfile, not srun): the
 * launcher's own failure reads like a program's (mpiexec exits 132 or 134). */
static bool s_program_found(const char *prog)
{
    struct stat sb;
    if (strchr(prog, '/')) {
        const char *why = NULL;
        if (stat(prog, &sb) != 0)
            why = strerror(errno);
        else if (!S_ISREG(sb.st_mode))
            why = "not a regular file";
        else if (access(prog, X_OK) != 0)
            why = "not executable";
        if (why)
            fprintf(stderr, "troupe run: cannot run '%s': %s\n", prog, why);
        return why == NULL;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *d = path; *d;) {
        size_t n = strcspn(d, ":");
        char full[4096];
        int len = snprintf(full, sizeof full, "%.*s%s%s", (int)n, d, n ? "/" : "", prog);
        if (len > 0 && (size_t)len < sizeof full && stat(full, &sb) == 0 && S_ISREG(sb.st_mode) &&
            access(full, X_OK) == 0)
            return true;
        d += n;
        if (*d == ':')
            d++;
    }
    fprintf(stderr, "troupe run: cannot run '%s': no such program on PATH\n", prog);
    return false;
}

int troupe__cmd_run(int argc, char **argv)
{
    s_opts_t o;
    bool help = false;
    if (!s_parse(argc, argv, &o, &help))
        return 2;
    if (help) {
        s_usage(stdout);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (o.dry_run) {
        s_argv_t a = {0};
        bool ok = s_command(&o, o.np, NULL, &a);
        if (ok)
            s_print_command(stdout, &a);
        s_argv_free(&a);
        return ok && fflush(stdout) == 0 ? 0 : 1;
    }
    if (!o.hostfile && o.launcher == S_MPIEXEC && !s_program_found(o.prog[0]))
        return S_EX_NOLAUNCH;
    if (!o.checkpoint)
        fprintf(stderr, "troupe run: warning: no checkpoint (--checkpoint, or --checkpoint in "
                        "the program's arguments): a restart starts over\n");
    char *progress = s_progress_path(&o);
    s_attempt_t *at = calloc(S_MAX_ATTEMPTS, sizeof *at);
    if (!progress || !at) {
        fprintf(stderr, "troupe run: out of memory\n");
        troupe_free(progress);
        free(at);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    double t0 = s_now();
    int n = 0, restarts = 0, status = 1;
    bool failed_any = false;
    const char *resume = NULL;
    int64_t resume_step = -1;
    for (;;) {
        char why[160];
        int avail = s_available(&o, why, sizeof why);
        int np = avail < o.np ? avail : o.np;
        if (avail < 0 || np < o.min_np) {
            if (avail >= 0)
                fprintf(stderr,
                        "troupe run: only %d rank(s) available (%s), fewer than "
                        "--min-np %d: stopping\n",
                        avail, why, o.min_np);
            if (n == 0)
                status = 1;
            break;
        }
        s_attempt_t *a = &at[n++];
        a->np = np;
        a->from_step = resume ? resume_step : -1;
        a->t_start = s_now() - t0;
        s_argv_t cmd = {0};
        if (!s_command(&o, np, resume, &cmd)) {
            fprintf(stderr, "troupe run: out of memory\n");
            s_argv_free(&cmd);
            status = 1;
            break;
        }
        fprintf(stderr, "troupe run: attempt %d: %d rank(s)%s%s: ", n, np,
                resume ? ", resuming from " : "", resume ? resume : "");
        s_print_command(stderr, &cmd);
        unlink(progress);
        int err_fd = -1;
        pid_t pid = s_spawn(&cmd, resume, progress, &err_fd);
        s_argv_free(&cmd);
        if (pid < 0) {
            status = 1;
            break;
        }
        s_watch(&o, pid, err_fd, t0, a);
        status = a->status;
        bool bad = false;
        a->progress_step = s_read_step_file(progress);
        a->ckpt_step = s_ckpt_step(o.checkpoint, &bad);
        if (a->status == 0 || !a->restartable) {
            failed_any |= a->status != 0;
            if (a->status != 0)
                fprintf(stderr, "troupe run: attempt %d: %s\n", n, a->what);
            break;
        }
        failed_any = true;
        if (restarts >= o.max_restarts) {
            fprintf(stderr,
                    "troupe run: attempt %d: %s; giving up after %d restart(s) "
                    "(--max-restarts %d)\n",
                    n, a->what, restarts, o.max_restarts);
            break;
        }
        if (bad) {
            fprintf(stderr,
                    "troupe run: attempt %d: %s; the checkpoint cannot be read: not "
                    "restarting\n",
                    n, a->what);
            break;
        }
        restarts++;
        resume = a->ckpt_step >= 0 ? o.checkpoint : NULL;
        resume_step = a->ckpt_step;
        char at_step[48] = "";
        if (a->progress_step >= 0)
            snprintf(at_step, sizeof at_step, " at step %lld", (long long)a->progress_step);
        int next = s_available(&o, why, sizeof why);
        next = next < o.np ? next : o.np;
        if (resume)
            fprintf(stderr,
                    "troupe run: restart %d/%d: %s after %.1f s%s; resuming from step "
                    "%lld (%s) on %d rank(s)\n",
                    restarts, o.max_restarts, a->what, a->t_end - a->t_start, at_step,
                    (long long)resume_step, resume, next);
        else
            fprintf(stderr,
                    "troupe run: restart %d/%d: %s after %.1f s%s; no checkpoint yet: "
                    "starting over on %d rank(s)\n",
                    restarts, o.max_restarts, a->what, a->t_end - a->t_start, at_step, next);
    }
    if (failed_any && n > 0)
        s_summary(at, n, restarts, &o, status);
    unlink(progress);
    troupe_free(progress);
    free(at);
    return status;
}
