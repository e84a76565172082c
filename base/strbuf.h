/* troupe — the one string builder (internal; not installed).
 *
 * A growable, NUL-terminated text buffer with a sticky failure flag: appends after an
 * allocation failure do nothing, and the failure is reported once, by troupe__strbuf_finish
 * (or read from `failed`), instead of at every append. A builder made with
 * troupe__strbuf_init_fixed writes into the caller's array instead and never allocates: it
 * truncates, like snprintf, while `len` keeps counting the length the whole text needs.
 *
 * Thread safety: a builder belongs to one thread.
 * Ownership: a growable builder owns `data` (troupe_malloc) until troupe__strbuf_finish hands
 * it to the caller or troupe__strbuf_reset frees it; a fixed builder borrows the caller's
 * array.
 */
#ifndef TROUPE_BASE_STRBUF_H
#define TROUPE_BASE_STRBUF_H

#include "base/status.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe__strbuf {
    char *data;  /* NUL-terminated when cap > 0; NULL for a fresh growable builder */
    size_t len;  /* bytes appended (fixed: bytes the text needs, perhaps more than fit) */
    size_t cap;  /* bytes at data */
    bool fixed;  /* data is the caller's array: never grown, never freed */
    bool failed; /* an allocation or encoding failed: the text is truncated */
} troupe__strbuf_t;

/* An empty growable builder; the same as zero-initialising it. */
#define TROUPE__STRBUF_INIT {NULL, 0, 0, false, false}

/* A builder that writes into buf[cap] (cap may be 0, buf NULL), truncating. */
void troupe__strbuf_init_fixed(troupe__strbuf_t *sb, char *buf, size_t cap);

/* Makes room for `extra` more bytes (and the NUL). false when the builder has failed or the
 * allocation fails (then it has failed); a fixed builder answers whether they fit. */
bool troupe__strbuf_reserve(troupe__strbuf_t *sb, size_t extra);
void troupe__strbuf_putn(troupe__strbuf_t *sb, const char *s, size_t n);
void troupe__strbuf_puts(troupe__strbuf_t *sb, const char *s);
void troupe__strbuf_putc(troupe__strbuf_t *sb, char c);
void troupe__strbuf_printf(troupe__strbuf_t *sb, const char *fmt, ...) TROUPE_PRINTF(2, 3);
void troupe__strbuf_vprintf(troupe__strbuf_t *sb, const char *fmt, va_list ap);
/* `n` copies of `s` (indentation). */
void troupe__strbuf_repeat(troupe__strbuf_t *sb, const char *s, int n);

/* Appends s[n] with every byte outside printable ASCII written as an escape ("\\n", "\\t",
 * "\\r", "\\xNN"; a backslash as "\\\\"): file contents and labels quoted in messages reach
 * the terminal without control bytes. */
void troupe__strbuf_put_escaped(troupe__strbuf_t *sb, const char *s, size_t n);

/* s[n] escaped as troupe__strbuf_put_escaped does, into buf[cap] (cap >= 16): when it does not
 * fit, its start and end are kept around "..." so that a long path keeps its file name and the
 * message after it keeps its reason. Returns buf. */
const char *troupe__escaped(const char *s, size_t n, char *buf, size_t cap);

/* The text so far ("" when nothing was appended). Borrowed: valid until the next append. */
const char *troupe__strbuf_cstr(const troupe__strbuf_t *sb);

/* Hands the text to the caller (release with troupe_free; "" is allocated too) and empties
 * the builder. RESOURCE_EXHAUSTED naming `what` when an append failed (the builder is freed
 * and *out is NULL). Not for fixed builders (INVALID_ARGUMENT). */
TROUPE_MUST_USE troupe_status_t troupe__strbuf_finish(troupe__strbuf_t *sb, const char *what,
                                                      char **out, size_t *out_len);

/* Frees a growable builder's text and empties it; a fixed builder is emptied only. */
void troupe__strbuf_reset(troupe__strbuf_t *sb);

#ifdef __cplusplus
}
#endif
#endif
