/* troupe — the hang report (docs/architecture.md §8; issue 17): asks every rank of a job for
 * its status (transport/zmq/wire_impl.h), then tells what each actor waits on, the collective
 * each rank reached and the verdict: which rank is behind, in which collective, and any
 * wait-for cycle. `troupe status` prints it; the status actor logs it when a deadline expires
 * and on SIGUSR1. Internal: not installed.
 *
 * The verdict. The actors of every rank that answered, and every rank that did not, form a
 * wait-for graph: a parked stream or a blocked host thread points to the actor that completes
 * what it waits on (a stream, or the transport), and a transport working on a collective points
 * to the ranks it still waits for (their transport when it is in a collective too, else the
 * rank itself). A cycle in that graph is reported as such. Otherwise the waits that have lasted
 * at least TROUPE__STATUS_STALL_NS are followed to where they end: a rank that did not answer
 * (with why, when it runs on this host: exited, or stopped), or one that has not issued the
 * awaited collective yet (what its threads do instead is shown). Shorter waits are ordinary
 * progress: the verdict then says no rank is stalled and names the longest wait.
 *
 * Thread safety: a query belongs to one thread. Ownership: as documented per function.
 */
#ifndef TROUPE_TRANSPORT_ZMQ_REPORT_IMPL_H
#define TROUPE_TRANSPORT_ZMQ_REPORT_IMPL_H

#include "base/status.h"
#include "base/strbuf.h"
#include "transport/zmq/job_impl.h"
#include "transport/zmq/wire_impl.h"

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A wait counts as stalled from this age on. */
#define TROUPE__STATUS_STALL_NS (1000LL * 1000 * 1000)

/* One rank's answer. */
typedef struct troupe__status_result {
    int rank;
    bool answered;
    double rtt_ms;    /* request to reply */
    char why[256];    /* when not answered: what is known (no answer, process state, error) */
    troupe__status_reply_t reply; /* when answered */
} troupe__status_result_t;

typedef struct troupe__status_query troupe__status_query_t;

/* Sends a STATUS request to every rank of `job` (borrowed; it must outlive the query), each
 * through its own DEALER (with the job's CURVE keys for a tcp job); the rank self->rank, when
 * self is not NULL, is answered from this process's status board instead. Ranks that have not
 * answered `timeout_ns` from now count as not answering. Errors: RESOURCE_EXHAUSTED,
 * TRANSPORT_ERROR (a socket could not be made). */
TROUPE_MUST_USE troupe_status_t troupe__status_query_new(const troupe__status_job_t *job,
                                                         const troupe__status_self_t *self,
                                                         int64_t timeout_ns,
                                                         troupe__status_query_t **out);

/* Adds the query's sockets to `poller` (a caller that polls other sockets too: the status
 * actor); troupe__status_query_handle takes what the poller returned and tells whether it was
 * one of them (the reply is then consumed). */
void troupe__status_query_poll_add(troupe__status_query_t *q, zpoller_t *poller);
bool troupe__status_query_handle(troupe__status_query_t *q, void *which);

/* True once every rank answered or the deadline passed; then the results are final. */
bool troupe__status_query_done(troupe__status_query_t *q);

/* Milliseconds until the deadline (0 when passed), for zpoller_wait. */
int troupe__status_query_wait_ms(troupe__status_query_t *q);

/* Runs the query to its end on its own poller (blocks at most until the deadline). */
void troupe__status_query_run(troupe__status_query_t *q);

/* The results, one per rank in rank order (borrowed from q); `elapsed_ms` since the query
 * began. Call when done. */
const troupe__status_result_t *troupe__status_query_results(troupe__status_query_t *q, int *n,
                                                            double *elapsed_ms);

/* Removes the sockets from `poller` (may be NULL) and frees the query; NULL-safe. */
void troupe__status_query_destroy(troupe__status_query_t **q_p, zpoller_t *poller);

/* The verdict (see the header comment). */
typedef struct troupe__status_verdict {
    bool stalled;         /* a wait of at least TROUPE__STATUS_STALL_NS, or a silent rank */
    bool cycle;           /* `path` is a wait-for cycle */
    int behind[16];       /* the ranks found behind (at most 16 listed) */
    int nbehind;          /* how many (may exceed 16) */
    char collective[64];  /* the collective they are behind in ("allreduce #17"), or "" */
    char path[512];       /* the wait-for cycle, "rank 0 cpu:0:0 -> ...", or "" */
    char text[1024];      /* the verdict in one line */
} troupe__status_verdict_t;

void troupe__status_verdict(const troupe__status_job_t *job, const troupe__status_result_t *res,
                            int n, troupe__status_verdict_t *v);

/* The report as text (one line per rank and per actor, then "verdict: ...") or JSON, appended
 * to sb. */
void troupe__status_format_text(const troupe__status_job_t *job, const troupe__status_result_t *res,
                                int n, double elapsed_ms, const troupe__status_verdict_t *v,
                                troupe__strbuf_t *sb);
void troupe__status_format_json(const troupe__status_job_t *job, const troupe__status_result_t *res,
                                int n, double elapsed_ms, const troupe__status_verdict_t *v,
                                troupe__strbuf_t *sb);

/* Logs the finished query's text report at warn level: "<title>", then one log line per
 * report line. */
void troupe__status_log_query(const troupe__status_job_t *job, troupe__status_query_t *q,
                              const char *title);

/* Queries `job` (self as in troupe__status_query_new) with `timeout_ns` per rank and logs the
 * text report at warn level, one log line per report line, after a first line "<title>". */
void troupe__status_log_report(const troupe__status_job_t *job, const troupe__status_self_t *self,
                               int64_t timeout_ns, const char *title);

#ifdef __cplusplus
}
#endif
#endif
