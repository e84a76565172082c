/* troupe — status codes and the thread-local last-error message.
 *
 * Every troupe call that can fail returns a troupe_status_t (TROUPE_OK == 0) and
 * delivers results through out_* parameters. The first place that sees a failure
 * records a one-line message (with the foreign error's name where one exists) in a
 * thread-local buffer read with troupe_last_error().
 *
 * Thread safety: all functions are thread-safe; the last-error buffer is per thread.
 * Ownership: troupe_status_str returns a static string; troupe_last_error returns a
 * pointer into thread-local storage valid until the next troupe call on that thread.
 */
#ifndef TROUPE_BASE_STATUS_H
#define TROUPE_BASE_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TROUPE_MUST_USE __attribute__((warn_unused_result))
#define TROUPE_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TROUPE_MUST_USE
#define TROUPE_PRINTF(f, a)
#endif

/* Status codes (STYLE.md "Errors"). Values are stable; never reorder. */
typedef enum troupe_status {
    TROUPE_OK = 0,
    TROUPE_INVALID_ARGUMENT = 1,    /* bad input: malformed text, wrong shape, bad message */
    TROUPE_NOT_FOUND = 2,           /* a named thing (node id, file, device) does not exist */
    TROUPE_ALREADY_EXISTS = 3,      /* creating what is already there */
    TROUPE_RESOURCE_EXHAUSTED = 4,  /* out of memory, queue full, pool cap reached */
    TROUPE_FAILED_PRECONDITION = 5, /* state does not allow the call (e.g. inconsistent memory mode) */
    TROUPE_UNAVAILABLE = 6,         /* a peer or device cannot be reached now */
    TROUPE_DEADLINE_EXCEEDED = 7,   /* a wait ran past its deadline */
    TROUPE_CANCELLED = 8,           /* work was cancelled (stream shut down) */
    TROUPE_UNIMPLEMENTED = 9,       /* a driver lacks the entry / feature not built */
    TROUPE_INTERNAL = 10,           /* a troupe invariant broke: a bug */
    TROUPE_DEVICE_ERROR = 11,       /* the device or its toolchain (compiler, CUDA) failed */
    TROUPE_TRANSPORT_ERROR = 12,    /* ZeroMQ or MPI failed */
} troupe_status_t;

#define TROUPE_STATUS_COUNT 13

/* Upper-case name of a status ("OK", "INVALID_ARGUMENT", ...); "UNKNOWN_STATUS" for
 * values outside the enum. Never NULL. */
const char *troupe_status_str(troupe_status_t status);

/* The message recorded by the last failing troupe call on this thread, or "" if none.
 * Never NULL. */
const char *troupe_last_error(void);

/* Clears this thread's last-error message. */
void troupe_clear_error(void);

/* Records `status` with a printf-style message as this thread's last error and returns
 * `status`, so a failure site reads `return troupe_error_set(TROUPE_NOT_FOUND, "...", ...)`.
 * This is how code outside the library (programs, examples, drivers or callbacks a program
 * hands to troupe) reports a failure in troupe's terms: the message is what
 * troupe_last_error() returns on this thread until the next call that records or clears one.
 * `fmt` and its arguments are borrowed and formatted at once; the message is copied into
 * thread-local storage; a message over 1023 bytes keeps its start and its end (the reason)
 * around " ... ", so a long path cannot push the reason out. Never fails; `status` may be any code,
 * TROUPE_OK included (it then records the message without signalling a failure). */
troupe_status_t troupe_error_set(troupe_status_t status, const char *fmt, ...) TROUPE_PRINTF(2, 3);

/* The same with a va_list (consumed as by vsnprintf). */
troupe_status_t troupe_error_vset(troupe_status_t status, const char *fmt, va_list ap);

/* snprintf(dst, cap, ...) except that a text that does not fit keeps its start and its end
 * around " ... " (as troupe_error_set does); internal, for programs' own message buffers. */
void troupe__format_fit(char *dst, size_t cap, const char *fmt, ...) TROUPE_PRINTF(3, 4);
void troupe__vformat_fit(char *dst, size_t cap, const char *fmt, va_list ap);

/* The library's internal spelling of troupe_error_set (STYLE.md "Errors"); code outside the
 * library uses the public name. */
#define troupe__error troupe_error_set

/* Propagate a non-OK status from an expression. */
#define TROUPE_RETURN_IF_ERROR(expr)                                                              \
    do {                                                                                          \
        troupe_status_t troupe__s = (expr);                                                       \
        if (troupe__s != TROUPE_OK)                                                               \
            return troupe__s;                                                                     \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
