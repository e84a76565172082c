/* troupe — the control plane in one process (actors/board_impl.h, transport/zmq/): the status
 * board records what actors wait on and extends host deadlines while the transport waits for
 * another rank; the status actor answers STATUS requests and gives malformed ones an error
 * reply; replies and job files that are malformed are refused with a message; the seed corpus
 * of the fuzz target (tests/data/status_corpus) runs through troupe__status_fuzz_one; the
 * verdict names the rank behind, a silent rank and a wait-for cycle; CURVE (TROUPE_STATUS=
 * tcp:lo) refuses clients without the job's key; SIGUSR1 and an expired deadline log the
 * report. Multi-rank behaviour (a stalled, stopped and killed rank; the trainer's deadline):
 * tests/mpi/status.cmake. */
#define _GNU_SOURCE
#include "actors/actor.h"
#include "actors/board_impl.h"
#include "actors/troupe.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/log.h"
#include "transport/mpi/cluster.h"
#include "transport/zmq/job_impl.h"
#include "transport/zmq/report_impl.h"
#include "transport/zmq/status_impl.h"
#include "transport/zmq/wire_impl.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_tmp[256];

/* Each test runs in its own process: a private status directory and no launcher. */
static void s_init(void)
{
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("SLURM_PROCID");
    unsetenv("TROUPE_STATUS");
    unsetenv("TROUPE_JOB_ID");
    snprintf(s_tmp, sizeof s_tmp, "/tmp/troupe-test-status-XXXXXX");
    cr_assert_not_null(mkdtemp(s_tmp));
    setenv("XDG_RUNTIME_DIR", s_tmp, 1);
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-runtime", 30);
}

static int s_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void s_fini(void)
{
    nftw(s_tmp, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(status, .init = s_init, .fini = s_fini);

/* ---- helpers ----------------------------------------------------------------------------- */

static const troupe__board_rec_t *s_find_rec(const troupe__board_rec_t *recs, size_t n,
                                             const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(recs[i].name, name) == 0)
            return &recs[i];
    return NULL;
}

static zmsg_t *s_msg(int nframes, const void *const *data, const size_t *sizes)
{
    zmsg_t *m = zmsg_new();
    for (int i = 0; i < nframes; i++)
        zmsg_addmem(m, data[i], sizes[i]);
    return m;
}

/* The reply to `req` from troupe__status_answer, checked to be an error reply with `id`. */
static void s_expect_error_reply(zmsg_t *req, uint64_t id, const char *needle)
{
    troupe__status_self_t self = {.rank = 0, .size = 1, .job = "t", .host = "h"};
    zmsg_t *reply = NULL;
    troupe__status_answer(&self, req, &reply);
    cr_assert_not_null(reply);
    cr_assert_eq(zmsg_size(reply), 3, "an error reply is [id][status][message]");
    zframe_t *f = zmsg_first(reply);
    cr_assert_eq(zframe_size(f), 8);
    uint64_t got;
    memcpy(&got, zframe_data(f), 8);
    cr_assert_eq(got, id);
    f = zmsg_next(reply);
    uint32_t st;
    cr_assert_eq(zframe_size(f), 4);
    memcpy(&st, zframe_data(f), 4);
    cr_assert_eq(st, TROUPE_INVALID_ARGUMENT);
    char *msg = zframe_strdup(zmsg_next(reply));
    cr_assert(strstr(msg, needle) != NULL, "message '%s' lacks '%s'", msg, needle);
    free(msg);
    troupe__status_reply_t dec;
    cr_assert_eq(troupe__status_decode_reply(reply, id, &dec), TROUPE_INVALID_ARGUMENT);
    zmsg_destroy(&reply);
}

static zmsg_t *s_status_request(uint64_t id)
{
    zmsg_t *m = NULL;
    OK(troupe_msg_build(&m, "s8", TROUPE__STATUS_VERB, id));
    return m;
}

/* ---- the status board -------------------------------------------------------------------- */

Test(status, the_board_records_what_a_stream_waits_on_and_its_queue)
{
    atomic_uint_fast64_t in = 10, out = 4;
    troupe__board_slot_t *slot = troupe__board_claim(TROUPE__BOARD_STREAM, "cpu:0:3", &in, &out);
    cr_assert_not_null(slot);
    troupe_event_t *ev = NULL;
    OK(troupe_event_new("cpu:0:1#7", &ev));
    troupe__board_wait_event(slot, ev);
    troupe__board_rec_t recs[TROUPE__BOARD_SLOTS];
    size_t n = troupe__board_snapshot(recs, TROUPE__BOARD_SLOTS, NULL);
    const troupe__board_rec_t *r = s_find_rec(recs, n, "cpu:0:3");
    cr_assert_not_null(r);
    cr_assert_eq(r->kind, TROUPE__BOARD_STREAM);
    cr_assert_eq(r->state, TROUPE__BOARD_PARKED);
    cr_assert_str_eq(r->wait_on, "cpu:0:1#7");
    cr_assert_str_eq(r->wait_by, "cpu:0:1");
    cr_assert_eq(r->queue, 6);
    cr_assert_gt(r->since_ns, 0);
    int64_t since = r->since_ns;
    troupe__board_wait_event(slot, ev); /* the same wait keeps its start */
    n = troupe__board_snapshot(recs, TROUPE__BOARD_SLOTS, NULL);
    cr_assert_eq(s_find_rec(recs, n, "cpu:0:3")->since_ns, since);
    troupe__board_wait_event(slot, NULL);
    n = troupe__board_snapshot(recs, TROUPE__BOARD_SLOTS, NULL);
    cr_assert_eq(s_find_rec(recs, n, "cpu:0:3")->state, TROUPE__BOARD_IDLE);
    troupe__board_release(&slot);
    cr_assert_null(slot);
    n = troupe__board_snapshot(recs, TROUPE__BOARD_SLOTS, NULL);
    cr_assert_null(s_find_rec(recs, n, "cpu:0:3"));
    troupe_event_release(&ev);
}

Test(status, transport_events_are_completed_by_the_transport)
{
    troupe__board_slot_t *slot = troupe__board_claim(TROUPE__BOARD_STREAM, "s", NULL, NULL);
    troupe_event_t *ev = NULL;
    OK(troupe_event_new("transport:allreduce_nodes", &ev));
    troupe__board_wait_event(slot, ev);
    troupe__board_rec_t recs[TROUPE__BOARD_SLOTS];
    size_t n = troupe__board_snapshot(recs, TROUPE__BOARD_SLOTS, NULL);
    cr_assert_str_eq(s_find_rec(recs, n, "s")->wait_by, "transport");
    cr_assert_eq(s_find_rec(recs, n, "s")->queue, -1, "no counters: queue unknown");
    troupe__board_release(&slot);
    troupe_event_release(&ev);
}

Test(status, a_host_wait_is_recorded_and_a_full_board_counts_the_misses)
{
    troupe__board_host_wait("stream idle", "cpu:0:0");
    troupe__board_rec_t recs[TROUPE__BOARD_SLOTS];
    size_t n = troupe__board_snapshot(recs, TROUPE__BOARD_SLOTS, NULL);
    bool seen = false;
    for (size_t i = 0; i < n; i++)
        seen |= recs[i].kind == TROUPE__BOARD_HOST && recs[i].state == TROUPE__BOARD_WAITING &&
                strcmp(recs[i].wait_by, "cpu:0:0") == 0;
    cr_assert(seen, "the host thread's wait is on the board");
    troupe__board_host_done();

    troupe__board_slot_t *slots[TROUPE__BOARD_SLOTS + 1] = {NULL};
    uint64_t missed0 = 0, missed1 = 0;
    troupe__board_snapshot(recs, 0, &missed0);
    int got = 0;
    for (int i = 0; i <= TROUPE__BOARD_SLOTS; i++)
        got += (slots[i] = troupe__board_claim(TROUPE__BOARD_STREAM, "x", NULL, NULL)) != NULL;
    troupe__board_snapshot(recs, 0, &missed1);
    cr_assert_lt(got, TROUPE__BOARD_SLOTS + 1);
    cr_assert_eq(missed1, missed0 + (uint64_t)(TROUPE__BOARD_SLOTS + 1 - got));
    for (int i = 0; i <= TROUPE__BOARD_SLOTS; i++)
        troupe__board_release(&slots[i]);
}

Test(status, a_host_deadline_waits_for_the_transports_verdict)
{
    troupe__board_slot_t *t = troupe__board_claim(TROUPE__BOARD_TRANSPORT, "transport", NULL, NULL);
    int64_t now = troupe_now_ns();
    troupe__board_transport_t w = {.state = TROUPE__BOARD_FINGERPRINT,
                                   .wait_on = "allreduce #3",
                                   .wait_by = "rank 1",
                                   .wait_rank = 1,
                                   .since_ns = now,
                                   .verdict_due_ns = now + 2000 * MS};
    troupe__board_set_transport(t, &w);
    troupe__board_host_wait("x", NULL);
    int64_t deadline = now;
    cr_assert(troupe__board_extend_deadline(&deadline));
    cr_assert_geq(deadline, now + 2000 * MS);
    int64_t again = deadline;
    cr_assert_not(troupe__board_extend_deadline(&again), "no extension past the verdict");
    w.state = TROUPE__BOARD_IDLE;
    troupe__board_set_transport(t, &w);
    deadline = now;
    cr_assert_not(troupe__board_extend_deadline(&deadline), "an idle transport blames no one");
    /* a gated collective waits for this rank's events: its gate's deadline is the verdict */
    w = (troupe__board_transport_t){.state = TROUPE__BOARD_WAITING,
                                    .wait_on = "allreduce #4",
                                    .wait_by = "this rank's events filling its tensors",
                                    .wait_rank = -1,
                                    .since_ns = now,
                                    .verdict_due_ns = now + 3000 * MS};
    troupe__board_set_transport(t, &w);
    deadline = now;
    cr_assert(troupe__board_extend_deadline(&deadline), "a gated wait's verdict is due later");
    cr_assert_geq(deadline, now + 3000 * MS);
    w.verdict_due_ns = 0;
    troupe__board_set_transport(t, &w);
    deadline = now;
    cr_assert_not(troupe__board_extend_deadline(&deadline), "no verdict due: no extension");
    troupe__board_host_done();
    troupe__board_release(&t);
}

/* ---- requests and replies ---------------------------------------------------------------- */

Test(status, a_malformed_request_gets_an_error_reply)
{
    uint64_t id = 0x1234;
    const char *verb = "STATUS", *bogus = "BOGUS", *bad = "ST\x01";
    const void *d2[2] = {verb, &id};
    size_t s2[2] = {6, 8};
    s_expect_error_reply(s_msg(0, NULL, NULL), 0, "empty");
    s_expect_error_reply(s_msg(1, d2, s2), 0, "missing request id");
    size_t s_short[2] = {6, 3};
    s_expect_error_reply(s_msg(2, d2, s_short), 0, "request id frame of 3 bytes");
    const void *db[2] = {bogus, &id};
    size_t sb[2] = {5, 8};
    s_expect_error_reply(s_msg(2, db, sb), id, "unknown verb 'BOGUS'");
    const void *d3[3] = {verb, &id, verb};
    size_t s3[3] = {6, 8, 6};
    s_expect_error_reply(s_msg(3, d3, s3), id, "STATUS takes 2 frames");
    const void *dn[2] = {bad, &id};
    size_t sn[2] = {3, 8};
    s_expect_error_reply(s_msg(2, dn, sn), id, "not printable");
    char big[TROUPE_MSG_VERB_MAX + 8];
    memset(big, 'A', sizeof big);
    const void *dl[2] = {big, &id};
    size_t sl[2] = {sizeof big, 8};
    s_expect_error_reply(s_msg(2, dl, sl), id, "verb of");
}

Test(status, a_status_reply_decodes_and_a_mangled_one_is_refused)
{
    troupe__board_slot_t *slot = troupe__board_claim(TROUPE__BOARD_STREAM, "cpu:0:0", NULL, NULL);
    troupe__status_self_t self = {.rank = 2, .size = 4, .job = "job-a", .host = "hostx"};
    zmsg_t *req = s_status_request(77), *reply = NULL;
    troupe__status_answer(&self, req, &reply);
    zmsg_destroy(&req);
    cr_assert_not_null(reply);
    troupe__status_reply_t dec;
    OK(troupe__status_decode_reply(reply, 77, &dec));
    cr_assert_eq(dec.head.rank, 2);
    cr_assert_eq(dec.head.size, 4);
    cr_assert_str_eq(dec.head.job, "job-a");
    cr_assert_eq(dec.head.pid, getpid());
    bool seen = false;
    for (int i = 0; i < dec.head.nrecs; i++)
        seen |= strcmp(dec.recs[i].name, "cpu:0:0") == 0;
    cr_assert(seen);
    troupe__status_reply_clear(&dec);
    cr_assert_eq(troupe__status_decode_reply(reply, 78, &dec), TROUPE_INVALID_ARGUMENT,
                 "a reply to another request");
    cr_assert(strstr(troupe_last_error(), "another request") != NULL);

    /* A bad magic, a record frame cut short, a frame too many, a kind out of range. */
    zmsg_t *m = zmsg_dup(reply);
    zmsg_first(m);
    zmsg_next(m);
    zframe_t *h = zmsg_next(m); /* [id][status][head]... */
    ((troupe__status_head_t *)zframe_data(h))->magic ^= 1;
    cr_assert_eq(troupe__status_decode_reply(m, 77, &dec), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "another troupe build") != NULL);
    zmsg_destroy(&m);

    m = zmsg_dup(reply);
    zframe_t *last = zmsg_last(m);
    zmsg_remove(m, last);
    zmsg_addmem(m, zframe_data(last), zframe_size(last) - 1);
    zframe_destroy(&last);
    cr_assert_eq(troupe__status_decode_reply(m, 77, &dec), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "record frame size") != NULL);
    zmsg_destroy(&m);

    m = zmsg_dup(reply);
    zmsg_addmem(m, zframe_data(zmsg_last(m)), zframe_size(zmsg_last(m)));
    cr_assert_eq(troupe__status_decode_reply(m, 77, &dec), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "record count") != NULL);
    zmsg_destroy(&m);

    m = zmsg_dup(reply);
    ((troupe__status_rec_t *)zframe_data(zmsg_last(m)))->kind = 99;
    cr_assert_eq(troupe__status_decode_reply(m, 77, &dec), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "out of range") != NULL);
    zmsg_destroy(&m);
    zmsg_destroy(&reply);
    troupe__board_release(&slot);
}

Test(status, the_seed_corpus_runs_through_the_fuzz_entry_point)
{
    const char *dir = TROUPE_TEST_DATA_DIR "/status_corpus";
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        cr_assert_not_null(f, "%s", path);
        unsigned char buf[65536];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        troupe_status_t st = troupe__status_fuzz_one(buf, len);
        cr_assert_neq(st, TROUPE_INTERNAL, "%s broke the message schema", e->d_name);
        files++;
    }
    closedir(d);
    cr_assert_geq(files, 5, "the seed corpus has its files");
    cr_assert_eq(troupe__status_fuzz_one(NULL, 0), TROUPE_OK);
    unsigned char junk[300];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 131 + 7);
    cr_assert_neq(troupe__status_fuzz_one(junk, sizeof junk), TROUPE_INTERNAL);
}

/* ---- job files --------------------------------------------------------------------------- */

Test(status, a_job_file_round_trips_and_malformed_ones_are_named)
{
    troupe__status_job_t job = {.size = 2, .curve = false};
    snprintf(job.id, sizeof job.id, "j1");
    OK(troupe__status_job_dir("j1", job.dir, sizeof job.dir, true));
    struct stat st;
    cr_assert_eq(stat(job.dir, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700);
    troupe__status_rank_info_t ranks[2] = {{.pid = 11, .host = "a", .endpoint = "ipc:///x/0"},
                                           {.pid = 12, .host = "b", .endpoint = "none"}};
    job.ranks = ranks;
    OK(troupe__status_job_write(&job));
    char path[600];
    snprintf(path, sizeof path, "%s/job", job.dir);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    troupe__status_job_t back;
    OK(troupe__status_job_load(job.dir, &back));
    cr_assert_str_eq(back.id, "j1");
    cr_assert_eq(back.size, 2);
    cr_assert_eq(back.ranks[1].pid, 12);
    cr_assert_str_eq(back.ranks[0].endpoint, "ipc:///x/0");
    cr_assert_str_eq(back.ranks[1].host, "b");
    troupe__status_job_clear(&back);

    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"", "empty job file"},
        {"hello\n", "not a troupe job file"},
        {"troupe-status-job 1\njob a\nsize 2\ncurve no\nrank 0 pid 1 host h endpoint none\n",
         "1 of 2 ranks"},
        {"troupe-status-job 1\njob a\nsize 1\ncurve no\nrank 0 pid 1 host h endpoint none\n"
         "rank 0 pid 1 host h endpoint none\n",
         "listed twice"},
        {"troupe-status-job 1\njob a\nsize 1\ncurve no\nrank 1 pid 1 host h endpoint none\n",
         "bad rank"},
        {"troupe-status-job 1\njob a\nsize 1\ncurve no\nrank 0 pid 1 host h endpoint http://x\n",
         "bad pid, host or endpoint"},
        {"troupe-status-job 1\nrank 0 pid 1 host h endpoint none\n", "before job, size"},
        {"troupe-status-job 1\njob a\nsize 0\n", "bad or repeated 'size'"},
        {"troupe-status-job 1\njob a\njob b\n", "bad or repeated 'job'"},
        {"troupe-status-job 1\njob a\nsize 1\ncurve maybe\n", "'curve'"},
        {"troupe-status-job 1\nflavour x\n", "bad or repeated 'flavour'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        troupe__status_job_t j;
        cr_assert_eq(troupe__status_job_parse(bad[i].text, strlen(bad[i].text), &j),
                     TROUPE_INVALID_ARGUMENT, "case %zu", i);
        cr_assert(strstr(troupe_last_error(), bad[i].needle) != NULL, "case %zu: '%s' lacks '%s'",
                  i, troupe_last_error(), bad[i].needle);
        cr_assert_null(j.ranks);
    }
}

/* A job file that is a FIFO or a directory is refused by its kind (a FIFO is not waited on). */
Test(status, a_job_file_that_is_not_a_regular_file_is_refused)
{
    char dir[] = "/tmp/troupe-test-jobkind-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[600];
    snprintf(path, sizeof path, "%s/job", dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    troupe__status_job_t j;
    cr_assert_eq(troupe__status_job_load(dir, &j), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "job: a FIFO, not a regular file"), "%s",
              troupe_last_error());
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkdir(path, 0700), 0);
    cr_assert_eq(troupe__status_job_load(dir, &j), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "job: a directory, not a regular file"), "%s",
              troupe_last_error());
    cr_assert_eq(rmdir(path), 0);
    cr_assert_eq(rmdir(dir), 0);
}

Test(status, a_status_directory_others_may_enter_is_refused)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/troupe", s_tmp);
    cr_assert_eq(mkdir(dir, 0755), 0);
    chmod(dir, 0755);
    char out[512];
    cr_assert_eq(troupe__status_base_dir(out, sizeof out, true), TROUPE_FAILED_PRECONDITION);
    cr_assert(strstr(troupe_last_error(), "only this user may enter") != NULL, "%s",
              troupe_last_error());
    char id[64];
    troupe__status_sanitize_id("../a b/c", id, sizeof id);
    cr_assert_str_eq(id, ".._a_b_c");
    troupe__status_sanitize_id("..", id, sizeof id);
    cr_assert_str_eq(id, "job");
}

/* ---- the verdict ------------------------------------------------------------------------- */

/* A rank that answered with the given actors (copied). */
static void s_answered(troupe__status_result_t *r, int rank, int size,
                       const troupe__status_rec_t *recs, int n)
{
    memset(r, 0, sizeof *r);
    r->rank = rank;
    r->answered = true;
    r->reply.head.rank = rank;
    r->reply.head.size = size;
    r->reply.head.nrecs = n;
    r->reply.recs = troupe_calloc((size_t)n + 1, sizeof *r->reply.recs);
    memcpy(r->reply.recs, recs, (size_t)n * sizeof *recs);
}

static troupe__status_rec_t s_transport(int state, int64_t issued, int64_t active, int wait_rank,
                                        int64_t age_ns)
{
    troupe__status_rec_t t = {.kind = TROUPE__BOARD_TRANSPORT,
                              .state = state,
                              .wait_rank = wait_rank,
                              .queue = 1,
                              .age_ns = age_ns,
                              .coll_issued = issued,
                              .coll_done = issued - 1,
                              .coll_active = active};
    snprintf(t.name, sizeof t.name, "transport");
    if (state != TROUPE__BOARD_IDLE)
        snprintf(t.wait_on, sizeof t.wait_on, "allreduce #%lld", (long long)active);
    if (wait_rank >= 0)
        snprintf(t.wait_by, sizeof t.wait_by, "rank %d", wait_rank);
    return t;
}

static troupe__status_rec_t s_stream(const char *name, int state, const char *on, const char *by,
                                     int64_t age_ns)
{
    troupe__status_rec_t s = {.kind = TROUPE__BOARD_STREAM, .state = state, .wait_rank = -1,
                              .queue = 3, .age_ns = age_ns};
    snprintf(s.name, sizeof s.name, "%s", name);
    snprintf(s.wait_on, sizeof s.wait_on, "%s", on);
    snprintf(s.wait_by, sizeof s.wait_by, "%s", by);
    return s;
}

static troupe__status_job_t s_job(int n)
{
    troupe__status_job_t job = {.size = n};
    snprintf(job.id, sizeof job.id, "v");
    job.ranks = troupe_calloc((size_t)n, sizeof *job.ranks);
    for (int r = 0; r < n; r++) {
        job.ranks[r].pid = 100 + r;
        snprintf(job.ranks[r].host, sizeof job.ranks[r].host, "h");
        snprintf(job.ranks[r].endpoint, sizeof job.ranks[r].endpoint, "none");
    }
    return job;
}

Test(status, the_verdict_names_a_rank_that_has_not_reached_the_collective)
{
    troupe__status_job_t job = s_job(3);
    troupe__status_result_t res[3];
    int64_t s5 = 5000 * MS;
    troupe__status_rec_t r0[2] = {
        s_transport(TROUPE__BOARD_FINGERPRINT, 17, 17, 2, s5),
        s_stream("cpu:0:0", TROUPE__BOARD_PARKED, "transport:allreduce_nodes", "transport", s5)};
    troupe__status_rec_t r1[1] = {s_transport(TROUPE__BOARD_FINGERPRINT, 17, 17, 2, s5)};
    troupe__status_rec_t r2[2] = {
        s_transport(TROUPE__BOARD_IDLE, 16, 0, -1, 0),
        s_stream("cpu:0:0", TROUPE__BOARD_PARKED, "cpu:0:1#9", "cpu:0:1", 4000 * MS)};
    s_answered(&res[0], 0, 3, r0, 2);
    s_answered(&res[1], 1, 3, r1, 1);
    s_answered(&res[2], 2, 3, r2, 2);
    troupe__status_verdict_t v;
    troupe__status_verdict(&job, res, 3, &v);
    cr_assert(v.stalled);
    cr_assert_not(v.cycle);
    cr_assert_eq(v.nbehind, 1, "%s", v.text);
    cr_assert_eq(v.behind[0], 2);
    cr_assert_str_eq(v.collective, "allreduce #17");
    cr_assert(strstr(v.text, "rank 2 is behind in allreduce #17") != NULL, "%s", v.text);
    cr_assert(strstr(v.text, "issued 16 collective(s) (not yet #17)") != NULL, "%s", v.text);
    cr_assert(strstr(v.text, "cpu:0:0 waits on cpu:0:1#9") != NULL, "%s", v.text);

    troupe__strbuf_t sb = TROUPE__STRBUF_INIT;
    troupe__status_format_json(&job, res, 3, 1.5, &v, &sb);
    cr_assert(strstr(troupe__strbuf_cstr(&sb), "\"behind\": [2]") != NULL);
    cr_assert(strstr(troupe__strbuf_cstr(&sb), "\"collective\": \"allreduce #17\"") != NULL);
    troupe__strbuf_reset(&sb);
    troupe__status_format_text(&job, res, 3, 1.5, &v, &sb);
    cr_assert(strstr(troupe__strbuf_cstr(&sb), "verdict: rank 2 is behind") != NULL);
    troupe__strbuf_reset(&sb);
    for (int r = 0; r < 3; r++)
        troupe__status_reply_clear(&res[r].reply);
    troupe__status_job_clear(&job);
}

Test(status, the_verdict_names_a_silent_rank_and_short_waits_are_progress)
{
    troupe__status_job_t job = s_job(2);
    troupe__status_result_t res[2];
    troupe__status_rec_t r0[1] = {s_transport(TROUPE__BOARD_DATA, 9, 9, 1, 3000 * MS)};
    s_answered(&res[0], 0, 2, r0, 1);
    memset(&res[1], 0, sizeof res[1]);
    res[1].rank = 1;
    snprintf(res[1].why, sizeof res[1].why, "process 101 is stopped");
    troupe__status_verdict_t v;
    troupe__status_verdict(&job, res, 2, &v);
    cr_assert(v.stalled);
    cr_assert_eq(v.nbehind, 1);
    cr_assert_eq(v.behind[0], 1);
    cr_assert(strstr(v.text, "rank 1 is behind in allreduce #9: it does not answer "
                             "(process 101 is stopped)") != NULL,
              "%s", v.text);
    troupe__status_reply_clear(&res[0].reply);

    /* Both answer and wait a few microseconds on each other: ordinary progress. */
    troupe__status_rec_t a[1] = {s_transport(TROUPE__BOARD_FINGERPRINT, 9, 9, 1, 20000)};
    troupe__status_rec_t b[1] = {s_transport(TROUPE__BOARD_FINGERPRINT, 9, 9, 0, 10000)};
    s_answered(&res[0], 0, 2, a, 1);
    s_answered(&res[1], 1, 2, b, 1);
    troupe__status_verdict(&job, res, 2, &v);
    cr_assert_not(v.stalled, "%s", v.text);
    cr_assert(strstr(v.text, "no rank is stalled (longest wait 20 us") != NULL, "%s", v.text);
    for (int r = 0; r < 2; r++)
        troupe__status_reply_clear(&res[r].reply);
    troupe__status_job_clear(&job);
}

Test(status, a_rank_stuck_in_a_collective_the_others_completed_is_behind)
{
    /* A cut link: ranks 0 and 1 completed allreduce #5 and wait in #6 for rank 2, which is
     * still in #5's data phase "waiting for ranks 0, 1": not a cycle, rank 2 is behind. */
    troupe__status_job_t job = s_job(3);
    troupe__status_result_t res[3];
    int64_t s6 = 6000 * MS;
    troupe__status_rec_t r0[1] = {s_transport(TROUPE__BOARD_FINGERPRINT, 6, 6, 2, s6)};
    troupe__status_rec_t r1[1] = {s_transport(TROUPE__BOARD_FINGERPRINT, 6, 6, 2, s6)};
    troupe__status_rec_t r2[1] = {s_transport(TROUPE__BOARD_PROBING, 5, 5, 0, s6)};
    r0[0].coll_done = r1[0].coll_done = 5;
    r2[0].coll_done = 4;
    snprintf(r2[0].wait_by, sizeof r2[0].wait_by, "ranks 0, 1");
    s_answered(&res[0], 0, 3, r0, 1);
    s_answered(&res[1], 1, 3, r1, 1);
    s_answered(&res[2], 2, 3, r2, 1);
    troupe__status_verdict_t v;
    troupe__status_verdict(&job, res, 3, &v);
    cr_assert(v.stalled);
    cr_assert_not(v.cycle, "%s", v.text);
    cr_assert_eq(v.nbehind, 1, "%s", v.text);
    cr_assert_eq(v.behind[0], 2);
    cr_assert(strstr(v.text, "rank 2 is behind in allreduce #6: it is still in allreduce #5 "
                             "(probing since 6.00 s)") != NULL,
              "%s", v.text);
    for (int r = 0; r < 3; r++)
        troupe__status_reply_clear(&res[r].reply);
    troupe__status_job_clear(&job);
}

Test(status, a_rank_whose_collective_waits_for_its_own_events_is_behind_and_says_so)
{
    /* Rank 0 waits in allreduce #6 for rank 1's fingerprint; rank 1's transport has not started
     * #6: it is gated on this rank's events (transport/mpi/collective.h `after`), which a stuck
     * stream never completes. The verdict names rank 1 and what it waits for, not "it computes". */
    troupe__status_job_t job = s_job(2);
    troupe__status_result_t res[2];
    int64_t s6 = 6000 * MS;
    troupe__status_rec_t r0[1] = {s_transport(TROUPE__BOARD_FINGERPRINT, 6, 6, 1, s6)};
    troupe__status_rec_t r1[1] = {s_transport(TROUPE__BOARD_WAITING, 6, 6, -1, s6)};
    snprintf(r1[0].wait_by, sizeof r1[0].wait_by, "this rank's events filling its tensors");
    s_answered(&res[0], 0, 2, r0, 1);
    s_answered(&res[1], 1, 2, r1, 1);
    troupe__status_verdict_t v;
    troupe__status_verdict(&job, res, 2, &v);
    cr_assert(v.stalled, "%s", v.text);
    cr_assert_eq(v.nbehind, 1, "%s", v.text);
    cr_assert_eq(v.behind[0], 1);
    cr_assert(strstr(v.text,
                     "rank 1 is behind in allreduce #6: it has not started allreduce #6: "
                     "it waits for this rank's events filling its tensors since 6.00 s") != NULL,
              "%s", v.text);
    for (int r = 0; r < 2; r++)
        troupe__status_reply_clear(&res[r].reply);
    troupe__status_job_clear(&job);
}

Test(status, the_verdict_finds_a_wait_for_cycle)
{
    troupe__status_job_t job = s_job(1);
    troupe__status_result_t res[1];
    int64_t s3 = 3000 * MS;
    troupe__status_rec_t r0[3] = {
        s_stream("cpu:0:0", TROUPE__BOARD_PARKED, "cpu:0:1#4", "cpu:0:1", s3),
        s_stream("cpu:0:1", TROUPE__BOARD_PARKED, "cpu:0:2#2", "cpu:0:2", s3),
        s_stream("cpu:0:2", TROUPE__BOARD_PARKED, "cpu:0:0#8", "cpu:0:0", s3)};
    s_answered(&res[0], 0, 1, r0, 3);
    troupe__status_verdict_t v;
    troupe__status_verdict(&job, res, 1, &v);
    cr_assert(v.stalled && v.cycle, "%s", v.text);
    cr_assert(strstr(v.text, "wait-for cycle: ") != NULL, "%s", v.text);
    cr_assert(strstr(v.path, "rank 0 cpu:0:0") && strstr(v.path, "rank 0 cpu:0:1") &&
                  strstr(v.path, "rank 0 cpu:0:2"),
              "%s", v.path);
    troupe__status_reply_clear(&res[0].reply);
    troupe__status_job_clear(&job);
}

/* ---- the live status actor --------------------------------------------------------------- */

/* Loads the job this process published. */
static void s_load_own_job(troupe__status_job_t *job)
{
    char id[64], dir[600];
    snprintf(id, sizeof id, "pid%ld", (long)getpid());
    OK(troupe__status_job_dir(id, dir, sizeof dir, false));
    OK(troupe__status_job_load(dir, job));
}

/* A DEALER to `ep` (CURVE with the given client keys when non-NULL) sends `req` (consumed);
 * returns the reply or NULL after `ms`. */
static zmsg_t *s_ask(const char *ep, const char *server_key, const char *pub, const char *sec,
                     zmsg_t *req, int ms)
{
    zsock_t *s = zsock_new(ZMQ_DEALER);
    zsock_set_linger(s, 0);
    if (server_key != NULL) {
        zsock_set_curve_serverkey(s, server_key);
        zsock_set_curve_publickey(s, pub);
        zsock_set_curve_secretkey(s, sec);
    }
    cr_assert_eq(zsock_connect(s, "%s", ep), 0);
    cr_assert_eq(zmsg_send(&req, s), 0);
    zpoller_t *p = zpoller_new(s, NULL);
    zmsg_t *reply = zpoller_wait(p, ms) == s ? zmsg_recv(s) : NULL;
    zpoller_destroy(&p);
    zsock_destroy(&s);
    return reply;
}

Test(status, the_status_actor_answers_and_survives_malformed_requests)
{
    OK(troupe_cluster_init(NULL, NULL));
    troupe__status_job_t job;
    s_load_own_job(&job);
    cr_assert_eq(job.size, 1);
    cr_assert_eq(job.ranks[0].pid, getpid());
    cr_assert(strncmp(job.ranks[0].endpoint, "ipc://", 6) == 0, "%s", job.ranks[0].endpoint);
    /* Malformed: an error reply, then a good request is still answered. */
    const char *bogus = "NOPE";
    uint64_t id = 5;
    const void *d[2] = {bogus, &id};
    size_t sz[2] = {4, 8};
    zmsg_t *reply = s_ask(job.ranks[0].endpoint, NULL, NULL, NULL, s_msg(2, d, sz), 5000);
    cr_assert_not_null(reply, "an error reply comes back");
    troupe__status_reply_t dec;
    cr_assert_eq(troupe__status_decode_reply(reply, 5, &dec), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "unknown verb 'NOPE'") != NULL, "%s",
              troupe_last_error());
    zmsg_destroy(&reply);
    troupe__status_query_t *q = NULL;
    OK(troupe__status_query_new(&job, NULL, 5000 * MS, &q));
    troupe__status_query_run(q);
    int n = 0;
    double ms = 0;
    const troupe__status_result_t *res = troupe__status_query_results(q, &n, &ms);
    cr_assert_eq(n, 1);
    cr_assert(res[0].answered, "%s", res[0].why);
    cr_assert_eq(res[0].reply.head.pid, getpid());
    troupe__status_query_destroy(&q, NULL);
    OK(troupe_cluster_finalize());
    struct stat st;
    cr_assert_neq(stat(job.dir, &st), 0, "the job's directory is removed at finalize");
    troupe__status_job_clear(&job);
}

Test(status, curve_refuses_a_client_without_the_jobs_key)
{
    if (!zsys_has_curve())
        cr_skip_test("libzmq was built without CURVE");
    OK(troupe_config_set_status("tcp:lo"));
    OK(troupe_cluster_init(NULL, NULL));
    troupe__status_job_t job;
    s_load_own_job(&job);
    cr_assert(job.curve);
    const char *ep = job.ranks[0].endpoint;
    cr_assert(strncmp(ep, "tcp://127.0.0.1:", 16) == 0, "%s", ep);
    char path[700];
    snprintf(path, sizeof path, "%s/curve.key", job.dir);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "the key file is the user's alone");
    /* With the key: answered. */
    zmsg_t *reply = s_ask(ep, job.curve_public, job.curve_public, job.curve_secret,
                          s_status_request(1), 5000);
    cr_assert_not_null(reply);
    troupe__status_reply_t dec;
    OK(troupe__status_decode_reply(reply, 1, &dec));
    troupe__status_reply_clear(&dec);
    zmsg_destroy(&reply);
    /* Another key pair (knowing the server's public key), or no CURVE at all: refused. */
    char pub[41], sec[41];
    cr_assert_eq(zmq_curve_keypair(pub, sec), 0);
    cr_assert_null(s_ask(ep, job.curve_public, pub, sec, s_status_request(2), 700));
    cr_assert_null(s_ask(ep, NULL, NULL, NULL, s_status_request(3), 700));
    /* The server still answers the job's key. */
    reply = s_ask(ep, job.curve_public, job.curve_public, job.curve_secret, s_status_request(4),
                  5000);
    cr_assert_not_null(reply);
    zmsg_destroy(&reply);
    troupe__status_job_clear(&job);
    OK(troupe_cluster_finalize());
}

/* Waits up to 30 s (a loaded machine, or TSAN) for `needle` in the log file; returns its text. */
static char *s_wait_log(const char *path, const char *needle)
{
    for (int i = 0; i < 600; i++) {
        FILE *f = fopen(path, "r");
        char *text = troupe_calloc(1, 1 << 16);
        if (f != NULL) {
            size_t n = fread(text, 1, (1 << 16) - 1, f);
            text[n] = '\0';
            fclose(f);
        }
        if (strstr(text, needle) != NULL)
            return text;
        troupe_free(text);
        rtu_sleep_ms(50);
    }
    return NULL;
}

static int s_count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

Test(status, sigusr1_logs_the_report_and_the_handler_is_given_back)
{
    char log[400];
    snprintf(log, sizeof log, "%s/log.txt", s_tmp);
    OK(troupe_log_set_file(log));
    OK(troupe_cluster_init(NULL, NULL));
    cr_assert_eq(raise(SIGUSR1), 0);
    char *text = s_wait_log(log, "verdict:");
    cr_assert_not_null(text, "the SIGUSR1 report was logged");
    cr_assert(strstr(text, "status report (SIGUSR1):") != NULL, "%s", text);
    cr_assert(strstr(text, "1 of 1 answered") != NULL, "%s", text);
    troupe_free(text);
    OK(troupe_cluster_finalize());
    struct sigaction sa;
    cr_assert_eq(sigaction(SIGUSR1, NULL, &sa), 0);
    cr_assert(sa.sa_handler == SIG_DFL, "SIGUSR1 is the program's again");
    OK(troupe_log_set_file(NULL));
}

Test(status, an_expired_deadline_logs_the_report_once)
{
    char log[400];
    snprintf(log, sizeof log, "%s/log.txt", s_tmp);
    OK(troupe_log_set_file(log));
    OK(troupe_cluster_init(NULL, NULL));
    troupe_event_t *ev = NULL;
    OK(troupe_event_new("never#1", &ev));
    cr_assert_eq(troupe_event_sync(ev, 50 * MS), TROUPE_DEADLINE_EXCEEDED);
    cr_assert(strstr(troupe_last_error(), "event never#1 not done") != NULL,
              "the caller's message is kept: %s", troupe_last_error());
    cr_assert_eq(troupe_event_sync(ev, 20 * MS), TROUPE_DEADLINE_EXCEEDED);
    char *text = s_wait_log(log, "verdict:");
    cr_assert_not_null(text);
    cr_assert_eq(s_count(text, "hang report (a deadline expired: event never#1 not done"), 1,
                 "%s", text);
    cr_assert(strstr(text, "waits on never#1") != NULL, "the waiting thread is shown: %s", text);
    troupe_free(text);
    troupe_event_release(&ev);
    OK(troupe_cluster_finalize());
    OK(troupe_log_set_file(NULL));
}
