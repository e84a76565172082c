/* troupe — the one string builder (see strbuf.h). */
#include "base/strbuf.h"

#include "base/alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

void troupe__strbuf_init_fixed(troupe__strbuf_t *sb, char *buf, size_t cap)
{
    sb->data = cap > 0 ? buf : NULL;
    sb->len = 0;
    sb->cap = buf ? cap : 0;
    sb->fixed = true;
    sb->failed = false;
    if (sb->cap > 0)
        sb->data[0] = '\0';
}

bool troupe__strbuf_reserve(troupe__strbuf_t *sb, size_t extra)
{
    if (sb->failed)
        return false;
    if (sb->len + extra + 1 <= sb->cap)
        return true;
    if (sb->fixed)
        return false;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + extra + 1) {
        if (cap > SIZE_MAX / 2) {
            sb->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *d = troupe_realloc(sb->data, cap);
    if (d == NULL) {
        sb->failed = true;
        return false;
    }
    sb->data = d;
    sb->cap = cap;
    return true;
}

void troupe__strbuf_putn(troupe__strbuf_t *sb, const char *s, size_t n)
{
    if (sb->fixed) {
        if (sb->cap > 0 && sb->len < sb->cap - 1) {
            size_t room = sb->cap - 1 - sb->len;
            size_t k = n < room ? n : room;
            memcpy(sb->data + sb->len, s, k);
            sb->data[sb->len + k] = '\0';
        }
        sb->len += n;
        return;
    }
    if (!troupe__strbuf_reserve(sb, n))
        return;
    if (n > 0) /* s may be NULL for nothing: memcpy's arguments must not be */
        memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

void troupe__strbuf_puts(troupe__strbuf_t *sb, const char *s)
{
    troupe__strbuf_putn(sb, s, strlen(s));
}

void troupe__strbuf_putc(troupe__strbuf_t *sb, char c)
{
    troupe__strbuf_putn(sb, &c, 1);
}

void troupe__strbuf_vprintf(troupe__strbuf_t *sb, const char *fmt, va_list ap)
{
    char small[256];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) {
        sb->failed = true;
    } else if ((size_t)n < sizeof small) {
        troupe__strbuf_putn(sb, small, (size_t)n);
    } else if (sb->fixed) {
        if (sb->cap > sb->len)
            (void)vsnprintf(sb->data + sb->len, sb->cap - sb->len, fmt, ap2);
        sb->len += (size_t)n;
    } else if (troupe__strbuf_reserve(sb, (size_t)n)) {
        (void)vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap2);
        sb->len += (size_t)n;
    }
    va_end(ap2);
}

void troupe__strbuf_printf(troupe__strbuf_t *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    troupe__strbuf_vprintf(sb, fmt, ap);
    va_end(ap);
}

void troupe__strbuf_repeat(troupe__strbuf_t *sb, const char *s, int n)
{
    for (int i = 0; i < n; i++)
        troupe__strbuf_puts(sb, s);
}

/* The escape of byte c into out[5] (NUL-terminated); returns its length. */
static size_t s_escape_byte(unsigned char c, char *out)
{
    if (c == '\\')
        return (size_t)snprintf(out, 5, "\\\\");
    if (c >= 0x20 && c < 0x7f) {
        out[0] = (char)c;
        out[1] = '\0';
        return 1;
    }
    if (c == '\n')
        return (size_t)snprintf(out, 5, "\\n");
    if (c == '\t')
        return (size_t)snprintf(out, 5, "\\t");
    if (c == '\r')
        return (size_t)snprintf(out, 5, "\\r");
    return (size_t)snprintf(out, 5, "\\x%02x", c);
}

void troupe__strbuf_put_escaped(troupe__strbuf_t *sb, const char *s, size_t n)
{
    char e[5];
    for (size_t i = 0; i < n; i++) {
        size_t k = s_escape_byte((unsigned char)s[i], e);
        troupe__strbuf_putn(sb, e, k);
    }
}

const char *troupe__escaped(const char *s, size_t n, char *buf, size_t cap)
{
    if (cap == 0)
        return buf;
    char e[5];
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += s_escape_byte((unsigned char)s[i], e);
    troupe__strbuf_t sb;
    troupe__strbuf_init_fixed(&sb, buf, cap);
    if (total < cap || cap < 16) {
        troupe__strbuf_put_escaped(&sb, s, n);
        return buf;
    }
    /* head ... tail, each escape whole */
    size_t room = cap - 1 - 3, head_room = room / 2, tail_room = room - head_room;
    size_t head = 0, used = 0;
    while (head < n) {
        size_t k = s_escape_byte((unsigned char)s[head], e);
        if (used + k > head_room)
            break;
        used += k;
        head++;
    }
    size_t tail = n;
    used = 0;
    while (tail > head) {
        size_t k = s_escape_byte((unsigned char)s[tail - 1], e);
        if (used + k > tail_room)
            break;
        used += k;
        tail--;
    }
    troupe__strbuf_put_escaped(&sb, s, head);
    troupe__strbuf_puts(&sb, "...");
    troupe__strbuf_put_escaped(&sb, s + tail, n - tail);
    return buf;
}

const char *troupe__strbuf_cstr(const troupe__strbuf_t *sb)
{
    return sb->data && sb->cap > 0 ? sb->data : "";
}

troupe_status_t troupe__strbuf_finish(troupe__strbuf_t *sb, const char *what, char **out,
                                      size_t *out_len)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (sb->fixed)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: a fixed string builder cannot be handed over",
                             what);
    if (!sb->failed && sb->data == NULL)
        (void)troupe__strbuf_reserve(sb, 0);
    if (sb->failed) {
        size_t need = sb->len;
        troupe__strbuf_reset(sb);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory building text (%zu bytes)",
                             what, need);
    }
    *out = sb->data;
    if (out_len)
        *out_len = sb->len;
    sb->data = NULL;
    sb->len = sb->cap = 0;
    return TROUPE_OK;
}

void troupe__strbuf_reset(troupe__strbuf_t *sb)
{
    if (sb->fixed) {
        sb->len = 0;
        sb->failed = false;
        if (sb->cap > 0)
            sb->data[0] = '\0';
        return;
    }
    troupe_free(sb->data);
    sb->data = NULL;
    sb->len = sb->cap = 0;
    sb->failed = false;
}
