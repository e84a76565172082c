/* troupe status — the hang doctor (docs/architecture.md §8; issue 17).
 *
 *   troupe status [--job ID] [--json] [--timeout MS]
 *
 * Asks every rank of a running job, through each rank's status actor (transport/zmq), what each
 * of its actors does: state, queue length, what it waits on, who will complete it and since
 * when, and the collective each rank has reached; then prints the verdict: which rank is
 * behind, in which collective, or a wait-for cycle (transport/zmq/report_impl.h). Ranks are
 * asked at once; one that has not answered within --timeout (default 1000 ms) is reported as
 * not answering, with its process's state when it runs on this host (exited, stopped).
 *
 * The job is found in the status directory ($XDG_RUNTIME_DIR/troupe, else /tmp/troupe-<uid>):
 * --job names it (the launcher's job id as troupe_cluster_init saw it, or TROUPE_JOB_ID);
 * without it, the one job there whose processes run on this host is taken.
 *
 * Exit status: 0 the report was printed and no rank is stalled; 3 the report was printed and a
 * rank is stalled, behind or not answering; 1 no job could be found or read; 2 usage error.
 */
#define _GNU_SOURCE
#include "cmd_impl.h"

#include "base/log.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "transport/zmq/job_impl.h"
#include "transport/zmq/report_impl.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_DEFAULT_TIMEOUT_MS 1000

static void s_usage(FILE *f)
{
    fprintf(f, "usage: troupe status [--job ID] [--json] [--timeout MS]\n"
               "  --job ID       the job (default: the one job running on this host)\n"
               "  --json         the report as JSON\n"
               "  --timeout MS   how long to wait for each rank (default %d)\n"
               "exit status: 0 no rank stalled, 3 a rank is stalled or not answering, 1 no job, "
               "2 usage error\n",
               S_DEFAULT_TIMEOUT_MS);
}

/* Finds the job to ask: --job, or the only live one in the status directory. */
static int s_find_job(const char *want, troupe__status_job_t *job)
{
    char dir[TROUPE__STATUS_PATH_MAX + 256];
    if (want != NULL) {
        char id[TROUPE__STATUS_JOB_MAX + 1];
        troupe__status_sanitize_id(want, id, sizeof id);
        if (troupe__status_job_dir(id, dir, sizeof dir, false) != TROUPE_OK ||
            troupe__status_job_load(dir, job) != TROUPE_OK) {
            fprintf(stderr, "troupe status: job %s: %s\n", want, troupe_last_error());
            return 1;
        }
        return 0;
    }
    char base[TROUPE__STATUS_PATH_MAX];
    if (troupe__status_base_dir(base, sizeof base, false) != TROUPE_OK) {
        fprintf(stderr, "troupe status: no running troupe job found (%s)\n", troupe_last_error());
        return 1;
    }
    DIR *d = opendir(base);
    if (d == NULL) {
        fprintf(stderr, "troupe status: %s: %s\n", base, strerror(errno));
        return 1;
    }
    int found = 0;
    troupe__strbuf_t names = TROUPE__STRBUF_INIT;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        troupe__status_job_t j;
        int len = snprintf(dir, sizeof dir, "%s/%s", base, e->d_name);
        if (len < 0 || (size_t)len >= sizeof dir)
            continue;
        if (troupe__status_job_load(dir, &j) != TROUPE_OK)
            continue;
        if (!troupe__status_job_alive(&j)) {
            troupe__status_job_clear(&j);
            continue;
        }
        troupe__strbuf_printf(&names, "  %s (%d rank%s, rank 0 pid %d)\n", j.id, j.size,
                              j.size == 1 ? "" : "s", j.ranks[0].pid);
        if (found++ == 0)
            *job = j;
        else
            troupe__status_job_clear(&j);
    }
    closedir(d);
    int rc = 0;
    if (found == 0) {
        fprintf(stderr,
                "troupe status: no running troupe job found in %s (a job's status actor starts "
                "in troupe_cluster_init, unless TROUPE_STATUS=off)\n",
                base);
        rc = 1;
    } else if (found > 1) {
        fprintf(stderr, "troupe status: %d jobs run here; choose one with --job ID:\n%s", found,
                troupe__strbuf_cstr(&names));
        troupe__status_job_clear(job);
        rc = 2;
    }
    troupe__strbuf_reset(&names);
    return rc;
}

int troupe__cmd_status(int argc, char **argv)
{
    const char *want = NULL;
    bool json = false;
    long timeout_ms = S_DEFAULT_TIMEOUT_MS;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--job") == 0 && i + 1 < argc) {
            want = argv[++i];
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            char *end = NULL;
            timeout_ms = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end != '\0' || timeout_ms < 1 || timeout_ms > 600000) {
                fprintf(stderr, "troupe status: --timeout wants milliseconds from 1 to 600000, "
                                "got '%s'\n",
                        argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            s_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "troupe status: unknown or incomplete option '%s'\n", argv[i]);
            s_usage(stderr);
            return 2;
        }
    }
    troupe__status_job_t job;
    int rc = s_find_job(want, &job);
    if (rc != 0)
        return rc;
    troupe__status_query_t *q = NULL;
    if (troupe__status_query_new(&job, NULL, timeout_ms * 1000000LL, &q) != TROUPE_OK) {
        fprintf(stderr, "troupe status: %s\n", troupe_last_error());
        troupe__status_job_clear(&job);
        return 1;
    }
    troupe__status_query_run(q);
    int n = 0;
    double ms = 0;
    const troupe__status_result_t *res = troupe__status_query_results(q, &n, &ms);
    troupe__status_verdict_t v;
    troupe__status_verdict(&job, res, n, &v);
    troupe__strbuf_t sb = TROUPE__STRBUF_INIT;
    if (json)
        troupe__status_format_json(&job, res, n, ms, &v, &sb);
    else
        troupe__status_format_text(&job, res, n, ms, &v, &sb);
    fputs(troupe__strbuf_cstr(&sb), stdout);
    troupe__strbuf_reset(&sb);
    troupe__status_query_destroy(&q, NULL);
    troupe__status_job_clear(&job);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "troupe status: cannot write the output\n");
        return 1;
    }
    return v.stalled ? 3 : 0;
}
