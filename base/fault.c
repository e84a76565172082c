/* troupe — fault injection (base/fault_impl.h): the TROUPE_FAULT parser and the hooks. */
#define _POSIX_C_SOURCE 200809L
#include "base/fault_impl.h"

#include "base/clock.h"
#include "base/config_impl.h"
#include "base/log.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_FAULTS 16
#define S_SPEC_MAX 1024
#define S_ROUTINE_MAX 128
#define S_TEXT_MAX 160

typedef enum s_kind {
    S_KILL = 0,
    S_STALL,
    S_SLOW,
    S_ALLOC,
    S_KERNEL,
    S_CKPT,
    S_CTRL,
    S_OVERFLOW
} s_kind_t;

/* The keys of a fault's fields (bits), and which each kind accepts. */
enum {
    K_RANK = 1u << 0,
    K_COLLECTIVE = 1u << 1,
    K_STEP = 1u << 2,
    K_MS = 1u << 3,
    K_NTH = 1u << 4,
    K_ROUTINE = 1u << 5,
    K_HALF = 1u << 6,
    K_KILL = 1u << 7,
    K_DROP = 1u << 8,
    K_DELAY = 1u << 9,
};

static const struct {
    const char *name;
    unsigned keys;
    const char *keys_text; /* for messages */
} s_kinds[] = {
    [S_KILL] = {"kill", K_RANK | K_COLLECTIVE | K_STEP, "rank, collective, step"},
    [S_STALL] = {"stall", K_RANK | K_COLLECTIVE | K_STEP | K_MS, "rank, collective, step, ms"},
    [S_SLOW] = {"slow", K_RANK | K_COLLECTIVE | K_STEP | K_MS, "rank, collective, step, ms"},
    [S_ALLOC] = {"alloc", K_RANK | K_NTH, "rank, nth"},
    [S_KERNEL] = {"kernel", K_RANK | K_NTH | K_ROUTINE | K_MS, "rank, routine, nth, ms"},
    [S_CKPT] = {"ckpt", K_RANK | K_NTH | K_HALF | K_KILL, "rank, half, nth, kill"},
    [S_CTRL] = {"ctrl", K_RANK | K_NTH | K_DROP | K_DELAY, "rank, drop, delay, nth"},
    [S_OVERFLOW] = {"overflow", K_RANK | K_STEP, "rank, step"},
};
#define S_NKINDS (sizeof s_kinds / sizeof s_kinds[0])

static const struct {
    const char *name;
    unsigned bit;
    bool flag; /* a bare word (no =value) */
} s_keys[] = {
    {"rank", K_RANK, false}, {"collective", K_COLLECTIVE, false},
    {"step", K_STEP, false}, {"ms", K_MS, false},
    {"nth", K_NTH, false},   {"routine", K_ROUTINE, false},
    {"half", K_HALF, true},  {"kill", K_KILL, true},
    {"drop", K_DROP, true},  {"delay", K_DELAY, false},
};
#define S_NKEYS (sizeof s_keys / sizeof s_keys[0])

typedef struct s_fault {
    s_kind_t kind;
    unsigned place;     /* TROUPE__FAULT_* */
    int rank;           /* -1: every rank */
    int64_t collective; /* -1: not at a collective */
    int64_t step;       /* -1: not at a step */
    int64_t ms;
    int64_t nth; /* 0: every one */
    bool kill;   /* ckpt: SIGKILL after the half write */
    bool drop;   /* ctrl: drop (else delay by ms) */
    char routine[S_ROUTINE_MAX];
    char text[S_TEXT_MAX];     /* its part of the specification */
    atomic_int_fast64_t count; /* matching events seen */
    atomic_bool fired;         /* a once-only fault fired */
} s_fault_t;

atomic_uint troupe__fault_places;

static s_fault_t s_faults[S_MAX_FAULTS];
static int s_nfaults;
static char s_spec[S_SPEC_MAX + 1];
static troupe_status_t s_status;
static char s_error[512];
static atomic_int s_rank = -1;

/* ---- parsing -------------------------------------------------------------------------------- */

/* A whole number in [min, max] from text[0..len) (no sign, no junk). */
static bool s_number(const char *text, size_t len, int64_t min, int64_t max, int64_t *out)
{
    if (len == 0 || len > 18)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9')
            return false;
        v = v * 10 + (text[i] - '0');
    }
    if (v < min || v > max)
        return false;
    *out = v;
    return true;
}

static troupe_status_t s_part_error(int index, const char *part, size_t part_len, const char *fmt,
                                    ...) TROUPE_PRINTF(4, 5);
static troupe_status_t s_part_error(int index, const char *part, size_t part_len, const char *fmt,
                                    ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return troupe__error(TROUPE_INVALID_ARGUMENT, "fault %d '%.*s': %s", index,
                         (int)(part_len > 100 ? 100 : part_len), part, why);
}

/* Parses one fault, part[0..len), the index-th (1-based) of the specification, into f. */
static troupe_status_t s_parse_part(const char *part, size_t len, int index, s_fault_t *f)
{
    memset(f, 0, sizeof *f);
    f->rank = -1;
    f->collective = -1;
    f->step = -1;
    if (len == 0)
        return s_part_error(index, part, len, "empty (two commas in a row, or a comma at an end)");
    if (len >= S_TEXT_MAX)
        return s_part_error(index, part, len, "longer than %d characters", S_TEXT_MAX - 1);
    memcpy(f->text, part, len);
    f->text[len] = '\0';
    const char *end = part + len;
    const char *p = part;
    const char *colon = memchr(p, ':', (size_t)(end - p));
    size_t klen = (size_t)((colon ? colon : end) - p);
    size_t k = 0;
    while (k < S_NKINDS &&
           !(strlen(s_kinds[k].name) == klen && memcmp(s_kinds[k].name, p, klen) == 0))
        k++;
    if (k == S_NKINDS)
        return s_part_error(index, part, len,
                            "unknown fault '%.*s' (expected kill, stall, slow, alloc, kernel, "
                            "ckpt, ctrl or overflow)",
                            (int)klen, p);
    f->kind = (s_kind_t)k;
    unsigned seen = 0;
    p = colon ? colon + 1 : end;
    while (colon != NULL) {
        colon = memchr(p, ':', (size_t)(end - p));
        const char *fend = colon ? colon : end;
        const char *eq = memchr(p, '=', (size_t)(fend - p));
        const char *kend = eq ? eq : fend;
        size_t kl = (size_t)(kend - p);
        size_t j = 0;
        while (j < S_NKEYS && !(strlen(s_keys[j].name) == kl && memcmp(s_keys[j].name, p, kl) == 0))
            j++;
        if (j == S_NKEYS || !(s_kinds[k].keys & s_keys[j].bit))
            return s_part_error(index, part, len,
                                "'%.*s' is not a setting of %s (its settings: %s)", (int)kl, p,
                                s_kinds[k].name, s_kinds[k].keys_text);
        if (seen & s_keys[j].bit)
            return s_part_error(index, part, len, "'%s' given twice", s_keys[j].name);
        seen |= s_keys[j].bit;
        if (s_keys[j].flag && eq)
            return s_part_error(index, part, len, "'%s' takes no value", s_keys[j].name);
        if (!s_keys[j].flag && !eq)
            return s_part_error(index, part, len, "'%s' needs a value (%s=...)", s_keys[j].name,
                                s_keys[j].name);
        const char *v = eq ? eq + 1 : NULL;
        size_t vl = eq ? (size_t)(fend - v) : 0;
        int64_t n = 0;
        switch (s_keys[j].bit) {
        case K_RANK:
            if (!s_number(v, vl, 0, INT32_MAX, &n))
                goto bad_number;
            f->rank = (int)n;
            break;
        case K_COLLECTIVE:
            if (!s_number(v, vl, 1, INT64_MAX / 2, &f->collective))
                return s_part_error(index, part, len,
                                    "collective='%.*s': expected a collective number >= 1 (the "
                                    "transport numbers them from 1: \"allreduce #1\")",
                                    (int)vl, v);
            break;
        case K_STEP:
            if (!s_number(v, vl, 0, INT64_MAX / 2, &f->step))
                goto bad_number;
            break;
        case K_MS:
        case K_DELAY:
            if (!s_number(v, vl, 1, 24LL * 3600 * 1000, &f->ms))
                return s_part_error(index, part, len,
                                    "%s='%.*s': expected milliseconds from 1 to 86400000",
                                    s_keys[j].name, (int)vl, v);
            break;
        case K_NTH:
            if (!s_number(v, vl, 1, INT64_MAX / 2, &f->nth))
                return s_part_error(index, part, len, "nth='%.*s': expected a count >= 1", (int)vl,
                                    v);
            break;
        case K_ROUTINE:
            if (vl == 0 || vl >= S_ROUTINE_MAX)
                return s_part_error(index, part, len,
                                    "routine: expected a name of 1 to %d "
                                    "characters",
                                    S_ROUTINE_MAX - 1);
            memcpy(f->routine, v, vl);
            f->routine[vl] = '\0';
            break;
        case K_KILL:
            f->kill = true;
            break;
        case K_DROP:
            f->drop = true;
            break;
        default: /* K_HALF */
            break;
        }
        p = fend + 1;
        continue;
    bad_number:
        return s_part_error(index, part, len, "%s='%.*s': expected a whole number >= 0",
                            s_keys[j].name, (int)vl, v);
    }
    /* what each kind needs */
    bool place = (seen & (K_COLLECTIVE | K_STEP)) != 0;
    if ((seen & K_COLLECTIVE) && (seen & K_STEP))
        return s_part_error(index, part, len, "give collective=N or step=N, not both");
    switch (f->kind) {
    case S_KILL:
    case S_STALL:
        if (!place)
            return s_part_error(index, part, len, "%s needs a place: collective=N or step=N",
                                s_kinds[k].name);
        if (f->kind == S_STALL && !(seen & K_MS))
            return s_part_error(index, part, len, "stall needs ms=M (how long)");
        f->place = (seen & K_STEP) ? TROUPE__FAULT_STEP : TROUPE__FAULT_COLLECTIVE;
        break;
    case S_SLOW:
        if (!(seen & K_MS))
            return s_part_error(index, part, len, "slow needs ms=M (the delay each time)");
        if (!place)
            f->step = 0; /* every step */
        f->place = (seen & K_COLLECTIVE) ? TROUPE__FAULT_COLLECTIVE : TROUPE__FAULT_STEP;
        break;
    case S_ALLOC:
        f->place = TROUPE__FAULT_ALLOC;
        break;
    case S_KERNEL:
        if (!(seen & K_ROUTINE))
            return s_part_error(index, part, len,
                                "kernel needs routine=NAME (the name the "
                                "routine was compiled with)");
        f->place = TROUPE__FAULT_KERNEL;
        break;
    case S_CKPT:
        if (!(seen & K_HALF))
            return s_part_error(index, part, len,
                                "ckpt needs 'half' (ckpt:half: the write "
                                "stops half-way)");
        f->place = TROUPE__FAULT_CKPT;
        break;
    case S_CTRL:
        if (((seen & K_DROP) != 0) == ((seen & K_DELAY) != 0))
            return s_part_error(index, part, len, "ctrl needs one of drop or delay=MS");
        if ((seen & K_NTH) && !(seen & K_DROP))
            return s_part_error(index, part, len,
                                "nth goes with drop only (a delay applies to "
                                "every message)");
        f->place = TROUPE__FAULT_CTRL;
        break;
    case S_OVERFLOW:
        if (!(seen & K_STEP))
            return s_part_error(index, part, len,
                                "overflow needs step=N (the step whose gradient overflows)");
        f->place = TROUPE__FAULT_OVERFLOW;
        break;
    }
    if (f->kind != S_CTRL && f->kind != S_SLOW && f->nth == 0)
        f->nth = 1; /* alloc, kernel, ckpt: the first by default */
    return TROUPE_OK;
}

troupe_status_t troupe__fault_configure(const char *spec)
{
    atomic_store(&troupe__fault_places, 0u);
    s_nfaults = 0;
    s_spec[0] = '\0';
    s_status = TROUPE_OK;
    s_error[0] = '\0';
    if (spec == NULL || spec[0] == '\0')
        return TROUPE_OK;
    troupe_status_t st = TROUPE_OK;
    size_t n = strlen(spec);
    if (n > S_SPEC_MAX) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT, "longer than %d characters", S_SPEC_MAX);
        goto out_bad;
    }
    unsigned places = 0;
    int count = 0;
    const char *p = spec, *end = spec + n;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *pend = comma ? comma : end;
        if (count == S_MAX_FAULTS) {
            st =
                s_part_error(count + 1, p, (size_t)(pend - p), "more than %d faults", S_MAX_FAULTS);
            goto out_bad;
        }
        st = s_parse_part(p, (size_t)(pend - p), count + 1, &s_faults[count]);
        if (st != TROUPE_OK)
            goto out_bad;
        places |= s_faults[count].place;
        count++;
        if (!comma)
            break;
        p = comma + 1;
    }
    s_nfaults = count;
    memcpy(s_spec, spec, n + 1);
    atomic_store(&troupe__fault_places, places);
    return TROUPE_OK;
out_bad:
    s_nfaults = 0;
    s_status = st;
    snprintf(s_error, sizeof s_error, "TROUPE_FAULT='%.200s': %s", spec, troupe_last_error());
    return st;
}

troupe_status_t troupe__fault_check(void)
{
    troupe__config_ensure_loaded();
    if (s_status != TROUPE_OK)
        return troupe__error(s_status, "%s", s_error);
    return TROUPE_OK;
}

const char *troupe__fault_spec(void)
{
    return s_spec;
}

void troupe__fault_set_rank(int rank)
{
    atomic_store(&s_rank, rank);
}

/* ---- the hooks ------------------------------------------------------------------------------ */

static bool s_on_this_rank(const s_fault_t *f)
{
    int r = atomic_load(&s_rank);
    return f->rank < 0 || f->rank == (r < 0 ? 0 : r);
}

/* Counts one matching event of f; true when it is the nth (or every one for nth 0). */
static bool s_count(s_fault_t *f)
{
    int_fast64_t c = atomic_fetch_add(&f->count, 1) + 1;
    return f->nth == 0 || c == f->nth;
}

/* Writes one line whatever TROUPE_LOG says: an injected fault must be visible. */
#define S_SAY(level, ...) troupe_log_write((level), TROUPE_SUB_BASE, __VA_ARGS__)

static void s_kill(const s_fault_t *f, const char *where)
{
    S_SAY(TROUPE_LOG_ERROR, "TROUPE_FAULT '%s': killing this process (SIGKILL) at %s", f->text,
          where);
    fflush(NULL);
    raise(SIGKILL);
}

/* kill/stall/slow at a collective (seq) or step: the same rules, two counters. */
static void s_at(unsigned place, int64_t n, const char *where)
{
    for (int i = 0; i < s_nfaults; i++) {
        s_fault_t *f = &s_faults[i];
        if (f->place != place || !s_on_this_rank(f))
            continue;
        int64_t at = place == TROUPE__FAULT_STEP ? f->step : f->collective;
        if (f->kind == S_SLOW) {
            if (n >= at)
                troupe_sleep_ns(f->ms * 1000000LL);
            continue;
        }
        if (n != at || atomic_exchange(&f->fired, true))
            continue;
        if (f->kind == S_KILL)
            s_kill(f, where);
        S_SAY(TROUPE_LOG_WARN, "TROUPE_FAULT '%s': stalling %" PRId64 " ms at %s", f->text, f->ms,
              where);
        troupe_sleep_ns(f->ms * 1000000LL);
        S_SAY(TROUPE_LOG_WARN, "TROUPE_FAULT '%s': stall at %s over", f->text, where);
    }
}

void troupe__fault_collective(uint64_t seq, const char *what)
{
    char where[128];
    snprintf(where, sizeof where, "collective %s", what ? what : "");
    s_at(TROUPE__FAULT_COLLECTIVE, (int64_t)seq, where);
}

void troupe__fault_step(int64_t step)
{
    char where[64];
    snprintf(where, sizeof where, "training step %" PRId64, step);
    s_at(TROUPE__FAULT_STEP, step, where);
}

bool troupe__fault_overflow(int64_t step)
{
    for (int i = 0; i < s_nfaults; i++) {
        s_fault_t *f = &s_faults[i];
        if (f->place != TROUPE__FAULT_OVERFLOW || !s_on_this_rank(f) || f->step != step)
            continue;
        S_SAY(TROUPE_LOG_WARN,
              "TROUPE_FAULT '%s': the gradient of training step %" PRId64 " overflows (its "
              "loss scale is +inf)",
              f->text, step);
        return true;
    }
    return false;
}

troupe_status_t troupe__fault_alloc(const char *what)
{
    for (int i = 0; i < s_nfaults; i++) {
        s_fault_t *f = &s_faults[i];
        if (f->place != TROUPE__FAULT_ALLOC || !s_on_this_rank(f) || !s_count(f))
            continue;
        S_SAY(TROUPE_LOG_WARN, "TROUPE_FAULT '%s': failing %s", f->text, what);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                             "%s: allocation refused by TROUPE_FAULT '%s' (injected fault: "
                             "device pool allocation %" PRId64 " of this process)",
                             what, f->text, f->nth);
    }
    return TROUPE_OK;
}

troupe_status_t troupe__fault_kernel(const char *routine)
{
    for (int i = 0; i < s_nfaults; i++) {
        s_fault_t *f = &s_faults[i];
        if (f->place != TROUPE__FAULT_KERNEL || !s_on_this_rank(f) || !routine ||
            strcmp(routine, f->routine) != 0 || !s_count(f))
            continue;
        if (f->ms > 0) { /* a stuck kernel: the run stalls, then goes on */
            S_SAY(TROUPE_LOG_WARN,
                  "TROUPE_FAULT '%s': stalling run %" PRId64 " of routine %s for %" PRId64 " ms",
                  f->text, f->nth, routine, f->ms);
            troupe_sleep_ns(f->ms * 1000000LL);
            S_SAY(TROUPE_LOG_WARN, "TROUPE_FAULT '%s': stall of routine %s over", f->text,
                  routine);
            return TROUPE_OK;
        }
        S_SAY(TROUPE_LOG_WARN, "TROUPE_FAULT '%s': failing run %" PRId64 " of routine %s", f->text,
              f->nth, routine);
        return troupe__error(TROUPE_DEVICE_ERROR,
                             "routine %s: run %" PRId64 " failed by TROUPE_FAULT '%s' (injected "
                             "kernel failure)",
                             routine, f->nth, f->text);
    }
    return TROUPE_OK;
}

/* The checkpoint fault that fired last (between troupe__fault_ckpt and _crash). */
static _Thread_local const s_fault_t *s_ckpt_fired;

bool troupe__fault_ckpt(const char *path, size_t *size_bytes)
{
    for (int i = 0; i < s_nfaults; i++) {
        s_fault_t *f = &s_faults[i];
        if (f->place != TROUPE__FAULT_CKPT || !s_on_this_rank(f) || !s_count(f))
            continue;
        S_SAY(TROUPE_LOG_WARN,
              "TROUPE_FAULT '%s': checkpoint write %" PRId64 " to %s stops after %zu of %zu bytes",
              f->text, f->nth, path, *size_bytes / 2, *size_bytes);
        *size_bytes /= 2;
        s_ckpt_fired = f;
        return true;
    }
    return false;
}

troupe_status_t troupe__fault_ckpt_crash(const char *path)
{
    const s_fault_t *f = s_ckpt_fired;
    s_ckpt_fired = NULL;
    if (f == NULL)
        return troupe__error(TROUPE_INTERNAL, "fault_ckpt_crash without a checkpoint fault");
    if (f->kill) {
        char where[S_TEXT_MAX + 64];
        snprintf(where, sizeof where, "the half-written checkpoint %s", path);
        s_kill(f, where);
    }
    return troupe__error(TROUPE_INTERNAL,
                         "checkpoint write %" PRId64 " stopped half-way by TROUPE_FAULT '%s' "
                         "(injected crash): the temporary %s is left behind as a crash leaves it",
                         f->nth, f->text, path);
}

troupe__fault_ctrl_action_t troupe__fault_ctrl(const char *what, int64_t *delay_ms)
{
    if (delay_ms)
        *delay_ms = 0;
    for (int i = 0; i < s_nfaults; i++) {
        s_fault_t *f = &s_faults[i];
        if (f->place != TROUPE__FAULT_CTRL || !s_on_this_rank(f))
            continue;
        if (f->drop && !s_count(f))
            continue;
        if (!f->drop && delay_ms)
            *delay_ms = f->ms;
        /* the first time whatever TROUPE_LOG says, later ones at info level */
        bool first = !atomic_exchange(&f->fired, true);
        char line[S_TEXT_MAX + 160];
        if (f->drop)
            snprintf(line, sizeof line, "TROUPE_FAULT '%s': dropping %s", f->text,
                     what ? what : "a control-plane message");
        else
            snprintf(line, sizeof line, "TROUPE_FAULT '%s': delaying %s by %" PRId64 " ms", f->text,
                     what ? what : "a control-plane message", f->ms);
        if (first)
            S_SAY(TROUPE_LOG_WARN, "%s%s", line,
                  f->drop && f->nth == 0 ? " (and every later one)" : "");
        else
            TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_BASE, "%s", line);
        return f->drop ? TROUPE__FAULT_CTRL_DROP : TROUPE__FAULT_CTRL_DELAY;
    }
    return TROUPE__FAULT_CTRL_PASS;
}
