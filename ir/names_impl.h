/* troupe — names shared by the IR's modules (internal; not installed): the identifier rule and
 * how messages name a node.
 *
 * Procedure names, symbol names and static index symbols are C identifiers,
 * [A-Za-z_][A-Za-z0-9_]*: the text form (ir/text.h) refers to symbols by name and the code
 * generators (compiler/cgen.h) emit them into C.
 *
 * Thread safety: pure functions. Ownership: nothing is retained.
 */
#ifndef TROUPE_IR_NAMES_IMPL_H
#define TROUPE_IR_NAMES_IMPL_H

#include "ir/tnode.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* [A-Za-z_] */
static inline bool troupe__ir_ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* [A-Za-z0-9_] */
static inline bool troupe__ir_ident_char(char c)
{
    return troupe__ir_ident_start(c) || (c >= '0' && c <= '9');
}

/* The n bytes at s form an identifier. */
static inline bool troupe__ir_is_identifier_n(const char *s, size_t n)
{
    if (s == NULL || n == 0 || !troupe__ir_ident_start(s[0]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!troupe__ir_ident_char(s[i]))
            return false;
    return true;
}

/* The NUL-terminated s is an identifier (false for NULL). */
static inline bool troupe__ir_is_identifier(const char *s)
{
    return s != NULL && troupe__ir_is_identifier_n(s, strlen(s));
}

/* "#3 x": a node as projection and builder errors name it (id, then its labels joined by
 * '_'). snprintf convention. */
static inline void troupe__ir_node_name(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    char label[96];
    troupe_tnode_label_string(tn, label, sizeof label);
    snprintf(buf, cap, "#%" PRId32 " %s", tn->id, label);
}

#endif
