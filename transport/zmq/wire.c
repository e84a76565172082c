/* troupe — the control plane's messages and their decoders (see wire_impl.h). */
#define _GNU_SOURCE
#include "transport/zmq/wire_impl.h"

#include "actors/actor.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "transport/zmq/job_impl.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- answering --------------------------------------------------------------------------- */

static void s_rec_from_board(const troupe__board_rec_t *b, int64_t now, troupe__status_rec_t *r)
{
    memset(r, 0, sizeof *r);
    r->kind = b->kind;
    r->state = b->kind == TROUPE__BOARD_STREAM && b->state == TROUPE__BOARD_IDLE && b->queue > 0
                   ? TROUPE__BOARD_RUNNING
                   : b->state;
    r->wait_rank = b->wait_rank;
    r->queue = b->queue;
    r->age_ns = b->since_ns > 0 && b->state != TROUPE__BOARD_IDLE ? now - b->since_ns : 0;
    r->due_in_ns = b->verdict_due_ns > 0 ? b->verdict_due_ns - now : 0;
    r->coll_issued = b->coll_issued;
    r->coll_done = b->coll_done;
    r->coll_active = b->coll_active;
    memcpy(r->name, b->name, sizeof r->name);
    memcpy(r->wait_on, b->wait_on, sizeof r->wait_on);
    memcpy(r->wait_by, b->wait_by, sizeof r->wait_by);
}

static void s_error_reply(uint64_t id, const char *why, zmsg_t **reply_p)
{
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_TRANSPORT, "status: bad request: %s", why);
    if (troupe_msg_build(reply_p, "8Ss", id, TROUPE_INVALID_ARGUMENT, why) != TROUPE_OK)
        *reply_p = NULL;
}

/* The STATUS reply: the head, then one frame per board record. */
static void s_status_reply(const troupe__status_self_t *self, uint64_t id, zmsg_t **reply_p)
{
    troupe__board_rec_t *recs = troupe_calloc(TROUPE__BOARD_SLOTS, sizeof *recs);
    zmsg_t *reply = NULL;
    if (recs == NULL || troupe_msg_build(&reply, "8S", id, TROUPE_OK) != TROUPE_OK) {
        troupe_free(recs);
        *reply_p = NULL;
        return;
    }
    troupe__status_head_t h = {.magic = TROUPE__STATUS_MAGIC,
                               .version = TROUPE__STATUS_VERSION,
                               .rec_size = (uint32_t)sizeof(troupe__status_rec_t),
                               .rank = self->rank,
                               .size = self->size,
                               .pid = (int32_t)getpid()};
    snprintf(h.host, sizeof h.host, "%s", self->host);
    snprintf(h.job, sizeof h.job, "%s", self->job);
    size_t n = troupe__board_snapshot(recs, TROUPE__BOARD_SLOTS, &h.missed);
    int64_t now = troupe_now_ns();
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    h.wall_ms = (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
    h.nrecs = (int32_t)n;
    bool ok = zmsg_addmem(reply, &h, sizeof h) == 0;
    for (size_t i = 0; i < n && ok; i++) {
        troupe__status_rec_t r;
        s_rec_from_board(&recs[i], now, &r);
        ok = zmsg_addmem(reply, &r, sizeof r) == 0;
    }
    troupe_free(recs);
    if (!ok)
        zmsg_destroy(&reply);
    *reply_p = reply;
}

void troupe__status_answer(const troupe__status_self_t *self, zmsg_t *req, zmsg_t **reply_p)
{
    char verb[TROUPE_MSG_VERB_MAX + 1];
    uint64_t id = 0;
    *reply_p = NULL;
    if (troupe_msg_head(req, verb, sizeof verb, &id) != TROUPE_OK) {
        s_error_reply(id, troupe_last_error(), reply_p);
        return;
    }
    if (strcmp(verb, TROUPE__STATUS_VERB) != 0) {
        char why[96];
        snprintf(why, sizeof why, "unknown verb '%s' (the status actor answers STATUS)", verb);
        s_error_reply(id, why, reply_p);
        return;
    }
    if (zmsg_size(req) != 2) {
        char why[96];
        snprintf(why, sizeof why, "STATUS takes 2 frames ([STATUS][id]), got %zu",
                 zmsg_size(req));
        s_error_reply(id, why, reply_p);
        return;
    }
    s_status_reply(self, id, reply_p);
}

/* ---- decoding a reply -------------------------------------------------------------------- */

static void s_terminate(char *s, size_t cap)
{
    s[cap - 1] = '\0';
}

void troupe__status_reply_clear(troupe__status_reply_t *r)
{
    if (r == NULL)
        return;
    troupe_free(r->recs);
    memset(r, 0, sizeof *r);
}

static troupe_status_t s_bad(troupe__status_reply_t *out, const char *what, size_t got)
{
    troupe__status_reply_clear(out);
    return troupe__error(TROUPE_INVALID_ARGUMENT, "status reply: %s (%zu)", what, got);
}

troupe_status_t troupe__status_decode_reply(zmsg_t *reply, uint64_t id, troupe__status_reply_t *out)
{
    memset(out, 0, sizeof *out);
    size_t nf = reply != NULL ? zmsg_size(reply) : 0;
    zframe_t *f = reply != NULL ? zmsg_first(reply) : NULL;
    if (nf < 3 || zframe_size(f) != sizeof(uint64_t))
        return s_bad(out, "too few frames or a bad id frame", nf);
    uint64_t got_id;
    memcpy(&got_id, zframe_data(f), sizeof got_id);
    if (got_id != id)
        return s_bad(out, "a reply to another request", (size_t)got_id);
    f = zmsg_next(reply);
    uint32_t st32;
    if (zframe_size(f) != sizeof st32)
        return s_bad(out, "bad status frame", zframe_size(f));
    memcpy(&st32, zframe_data(f), sizeof st32);
    if (st32 >= TROUPE_STATUS_COUNT)
        return s_bad(out, "unknown status", st32);
    f = zmsg_next(reply);
    if (st32 != TROUPE_OK) {
        size_t n = zframe_size(f);
        char msg[256];
        n = n < sizeof msg - 1 ? n : sizeof msg - 1;
        memcpy(msg, zframe_data(f), n);
        msg[n] = '\0';
        for (size_t i = 0; i < n; i++)
            msg[i] = (msg[i] < 0x20 || msg[i] > 0x7e) ? '?' : msg[i];
        return troupe__error((troupe_status_t)st32, "the rank answered %s: %s",
                             troupe_status_str((troupe_status_t)st32), msg);
    }
    if (zframe_size(f) != sizeof out->head)
        return s_bad(out, "bad head frame size", zframe_size(f));
    memcpy(&out->head, zframe_data(f), sizeof out->head);
    troupe__status_head_t *h = &out->head;
    if (h->magic != TROUPE__STATUS_MAGIC || h->version != TROUPE__STATUS_VERSION ||
        h->rec_size != sizeof(troupe__status_rec_t))
        return s_bad(out, "another troupe build or protocol version answered", h->version);
    if (h->size < 1 || h->size > TROUPE__STATUS_MAX_RANKS || h->rank < 0 || h->rank >= h->size)
        return s_bad(out, "rank or size out of range", (size_t)(uint32_t)h->rank);
    if (h->nrecs < 0 || h->nrecs > TROUPE__STATUS_MAX_RECS || (size_t)h->nrecs != nf - 3)
        return s_bad(out, "record count does not match the frames", (size_t)(uint32_t)h->nrecs);
    s_terminate(h->host, sizeof h->host);
    s_terminate(h->job, sizeof h->job);
    out->recs = troupe_calloc((size_t)h->nrecs + 1, sizeof *out->recs);
    if (out->recs == NULL) {
        troupe__status_reply_clear(out);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "status reply: out of memory");
    }
    for (int32_t i = 0; i < h->nrecs; i++) {
        f = zmsg_next(reply);
        troupe__status_rec_t *r = &out->recs[i];
        if (zframe_size(f) != sizeof *r)
            return s_bad(out, "bad record frame size", zframe_size(f));
        memcpy(r, zframe_data(f), sizeof *r);
        if (r->kind <= TROUPE__BOARD_FREE || r->kind >= TROUPE__BOARD_KIND_COUNT ||
            r->state < 0 || r->state >= TROUPE__BOARD_STATE_COUNT || r->wait_rank < -1 ||
            r->wait_rank >= h->size)
            return s_bad(out, "record kind, state or rank out of range", (size_t)i);
        s_terminate(r->name, sizeof r->name);
        s_terminate(r->wait_on, sizeof r->wait_on);
        s_terminate(r->wait_by, sizeof r->wait_by);
    }
    return TROUPE_OK;
}

/* ---- fuzzing ----------------------------------------------------------------------------- */

/* Reads data as frames: [len 1 byte | 255 then len 2 bytes LE][bytes]. */
static zmsg_t *s_frames(const uint8_t *data, size_t size)
{
    zmsg_t *m = zmsg_new();
    size_t i = 0;
    while (m != NULL && i < size && zmsg_size(m) < 64) {
        size_t n = data[i++];
        if (n == 255) {
            if (i + 2 > size)
                break;
            n = (size_t)data[i] | (size_t)data[i + 1] << 8;
            i += 2;
        }
        if (n > size - i)
            n = size - i;
        if (zmsg_addmem(m, data + i, n) != 0)
            break;
        i += n;
    }
    return m;
}

troupe_status_t troupe__status_fuzz_one(const uint8_t *data, size_t size)
{
    troupe_status_t rc = TROUPE_OK;
    zmsg_t *req = s_frames(data, size);
    if (req == NULL)
        return TROUPE_OK; /* out of memory: nothing to check */
    troupe__status_self_t self = {.rank = 0, .size = 1, .job = "fuzz", .host = "fuzz"};
    zmsg_t *reply = NULL;
    troupe__status_answer(&self, req, &reply);
    if (reply != NULL) {
        /* Every reply is [id 8][status S]...; an OK one decodes as a STATUS reply. */
        zframe_t *f0 = zmsg_first(reply), *f1 = zmsg_next(reply);
        uint32_t st32 = TROUPE_STATUS_COUNT;
        if (f1 != NULL && zframe_size(f1) == sizeof st32)
            memcpy(&st32, zframe_data(f1), sizeof st32);
        uint64_t id = 0;
        if (f0 != NULL && zframe_size(f0) == sizeof id)
            memcpy(&id, zframe_data(f0), sizeof id);
        if (f0 == NULL || zframe_size(f0) != sizeof id || st32 >= TROUPE_STATUS_COUNT)
            rc = TROUPE_INTERNAL;
        troupe__status_reply_t dec;
        troupe_status_t dst = troupe__status_decode_reply(reply, id, &dec);
        if (st32 == TROUPE_OK && dst != TROUPE_OK)
            rc = TROUPE_INTERNAL; /* our own STATUS reply must decode */
        if (st32 != TROUPE_OK && dst != (troupe_status_t)st32)
            rc = TROUPE_INTERNAL; /* an error reply decodes as its status */
        troupe__status_reply_clear(&dec);
        zmsg_destroy(&reply);
    }
    /* The same frames as a reply to request 0 and to the id they carry. */
    troupe__status_reply_t dec;
    uint64_t id = 0;
    zframe_t *f0 = zmsg_first(req);
    if (f0 != NULL && zframe_size(f0) == sizeof id)
        memcpy(&id, zframe_data(f0), sizeof id);
    if (troupe__status_decode_reply(req, id, &dec) == TROUPE_OK && dec.head.nrecs > 0 &&
        dec.recs == NULL)
        rc = TROUPE_INTERNAL;
    troupe__status_reply_clear(&dec);
    zmsg_destroy(&req);
    /* And the bytes as a job file. */
    troupe__status_job_t job;
    if (troupe__status_job_parse((const char *)data, size, &job) == TROUPE_OK &&
        (job.size < 1 || job.ranks == NULL))
        rc = TROUPE_INTERNAL;
    troupe__status_job_clear(&job);
    return rc;
}
