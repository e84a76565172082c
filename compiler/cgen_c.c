/* troupe — the C target of the code generator (compiler/cgen.h, "C dialect"): a routine with
 * external linkage for a typed trampoline, and `<name>_entry(void **args)`, the uniform entry a
 * driver dlsyms and calls with one pointer per parameter; contractions the GEMM library takes
 * call it through `<name>_gemm_hooks` (compiler/gemm.h). */
#include "compiler/cgen_impl.h"

#include "base/alloc.h"
#include "base/status.h"
#include "base/vec.h"
#include "ir/prec.h"

#include <string.h>

static void s_put_calling(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    troupe__strbuf_printf(b,
                          " * Entry: void %s(void **args), args[k] = the k-th parameter's pointer "
                          "(static index: pointer to int64_t).\n",
                          r->entry_name);
    if (r->ngathers > 0)
        troupe__strbuf_printf(b,
                              " * args[%zu]: int64_t[%d] gather error words, zeroed by the caller "
                              "(troupe_cgen_gather_failure).\n",
                              r->nparams, TROUPE_CGEN_GATHER_ERR_WORDS);
}

static void s_put_open(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    troupe__cgen_put_signature(b, "void ", r, "void");
}

/* `<name>_entry`: casts args[k] back to the k-th parameter's type (a static index arrives as a
 * pointer to its int64_t value). */
static void s_put_entry(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    troupe__strbuf_printf(b, "\nvoid %s(void **args)\n{\n", r->entry_name);
    if (r->nparams == 0)
        troupe__strbuf_puts(b, "    (void)args;\n");
    troupe__strbuf_printf(b, "    %s(", r->name);
    for (size_t i = 0; i < r->nparams; i++) {
        const troupe_cgen_param_t *p = &r->params[i];
        troupe__strbuf_puts(b, i ? ",\n        " : "\n        ");
        if (p->kind == TROUPE_CGEN_PARAM_STATIC_IDX) {
            troupe__strbuf_printf(b, "*(const int64_t *)args[%zu]", i);
        } else {
            const char *type = troupe_prec_c_type(p->tn->prec);
            bool is_const = p->kind == TROUPE_CGEN_PARAM_MERGE_BUFFER || !p->is_written;
            troupe__strbuf_printf(b, "(%s%s *)args[%zu]", is_const ? "const " : "", type, i);
        }
    }
    if (r->ngathers > 0) /* the gather error block follows the parameters */
        troupe__strbuf_printf(b, "%s(int64_t *)args[%zu]", r->nparams ? ",\n        " : "\n        ",
                              r->nparams);
    troupe__strbuf_puts(b, ");\n}\n");
}

/* `<name>_gemm_hooks`: the loader's door to the GEMM library (compiler/gemm.h). A unit split
 * into parts (troupe_cgen_c_split) passes the entries on to its `nparts` other units, whose
 * hooks are statics of their own. */
static void s_put_gemm_hooks(troupe__strbuf_t *b, const troupe_cgen_result_t *r, size_t nparts)
{
    troupe__strbuf_printf(b, "\nvoid %s(troupe_sgemm_fn s, troupe_dgemm_fn d);\n",
                          r->gemm_hooks_name);
    troupe__strbuf_printf(b, "void %s(troupe_sgemm_fn s, troupe_dgemm_fn d)\n{\n",
                          r->gemm_hooks_name);
    troupe__strbuf_puts(b, "    troupe_sgemm = s;\n    troupe_dgemm = d;\n");
    for (size_t k = 1; k <= nparts; k++)
        troupe__strbuf_printf(b, "    %s__p%zu_gemm_hooks(s, d);\n", r->name, k);
    troupe__strbuf_puts(b, "}\n");
    if (r->gemm_bf16_hooks_name != NULL) {
        troupe__strbuf_printf(b, "\nvoid %s(troupe_bgemm_fn f);\n", r->gemm_bf16_hooks_name);
        troupe__strbuf_printf(b, "void %s(troupe_bgemm_fn f)\n{\n    troupe_bgemm = f;\n",
                              r->gemm_bf16_hooks_name);
        for (size_t k = 1; k <= nparts; k++)
            troupe__strbuf_printf(b, "    %s__p%zu_gemm_bf16_hooks(f);\n", r->name, k);
        troupe__strbuf_puts(b, "}\n");
    }
    if (r->gemm_half_hooks_name != NULL) {
        troupe__strbuf_printf(b, "\nvoid %s(troupe_hgemm_fn f);\n", r->gemm_half_hooks_name);
        troupe__strbuf_printf(b, "void %s(troupe_hgemm_fn f)\n{\n    troupe_hgemm = f;\n",
                              r->gemm_half_hooks_name);
        for (size_t k = 1; k <= nparts; k++)
            troupe__strbuf_printf(b, "    %s__p%zu_gemm_half_hooks(f);\n", r->name, k);
        troupe__strbuf_puts(b, "}\n");
    }
    if (r->gemm_pack_hooks_name != NULL) {
        troupe__strbuf_printf(b, "\nvoid %s(troupe_spack_bt_fn f);\n", r->gemm_pack_hooks_name);
        troupe__strbuf_printf(b, "void %s(troupe_spack_bt_fn f)\n{\n    troupe_spack_bt = f;\n",
                              r->gemm_pack_hooks_name);
        for (size_t k = 1; k <= nparts; k++)
            troupe__strbuf_printf(b, "    %s__p%zu_gemm_pack_hooks(f);\n", r->name, k);
        troupe__strbuf_puts(b, "}\n");
    }
    if (r->gemm_brgemm_hooks_name != NULL) {
        troupe__strbuf_printf(b, "\nvoid %s(troupe_sbrgemm_fn f);\n", r->gemm_brgemm_hooks_name);
        troupe__strbuf_printf(b, "void %s(troupe_sbrgemm_fn f)\n{\n    troupe_sbrgemm = f;\n",
                              r->gemm_brgemm_hooks_name);
        for (size_t k = 1; k <= nparts; k++)
            troupe__strbuf_printf(b, "    %s__p%zu_gemm_brgemm_hooks(f);\n", r->name, k);
        troupe__strbuf_puts(b, "}\n");
    }
}

static void s_put_after(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    s_put_entry(b, r);
    if (r->gemm_hooks_name != NULL)
        s_put_gemm_hooks(b, r, 0);
}

static const char *s_section_text(const troupe__cgen_section_t *s)
{
    return s->text_c;
}

const troupe__cgen_target_t troupe__cgen_target_c = {
    .dialect = TROUPE_CGEN_C,
    .name = "c",
    .restrict_kw = "restrict",
    .has_entry = true,
    .gemm_library = true,
    .put_calling = s_put_calling,
    .put_open = s_put_open,
    .put_after = s_put_after,
    .section_text = s_section_text,
};

/* ---- one unit split into several (troupe_cgen_c_split) ------------------------------------- */

/* Most parts a unit is split into (the unit size grows past the requested one instead). */
#define S_SPLIT_MAX_PARTS 64

typedef struct s_span {
    size_t off, len;
} s_span_t;

static bool s_is_ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Whether text[0..len) holds `word` as a whole token (in comments too, which only makes the
 * caller more careful). */
static bool s_has_token(const char *text, size_t len, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = text, *end = text + len; p + wl <= end;) {
        const char *hit = memchr(p, word[0], (size_t)(end - p));
        if (hit == NULL || hit + wl > end)
            return false;
        if (memcmp(hit, word, wl) == 0 && (hit == text || !s_is_ident_char(hit[-1])) &&
            (hit + wl == end || !s_is_ident_char(hit[wl])))
            return true;
        p = hit + 1;
    }
    return false;
}

/* Whether the statement at text[0..len) starts as a declaration does: two identifiers in a
 * row ("float v", "const int64_t i3"), not a keyword that takes an expression. */
static bool s_starts_declaration(const char *text, size_t len)
{
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\n'))
        i++;
    size_t a = i;
    while (i < len && s_is_ident_char(text[i]))
        i++;
    if (i == a || (text[a] >= '0' && text[a] <= '9'))
        return false;
    size_t alen = i - a;
    static const char *const not_types[] = {"return", "goto", "else", "case", "do"};
    for (size_t k = 0; k < sizeof not_types / sizeof not_types[0]; k++)
        if (alen == strlen(not_types[k]) && memcmp(text + a, not_types[k], alen) == 0)
            return false;
    while (i < len && text[i] == ' ')
        i++;
    return i < len && (s_is_ident_char(text[i]) || text[i] == '*');
}

/* The top-level statements of a routine's body text[0..len): appends the offset where each
 * begins to *starts. A statement begins at a line that starts at brace depth 0, outside a
 * comment, after a line that ended one (its last code character `;` or `}` at depth 0; a line
 * without code changes nothing), and does not start with `else`. Comments and string and
 * character literals are skipped. 1 when done, 0 when the braces do not balance (the caller
 * does not split then), -1 when memory ran out. */
static int s_top_statements(const char *text, size_t len, size_t **starts, size_t *n,
                             size_t *cap)
{
    enum { CODE, BLOCK_COMMENT, LINE_COMMENT, STRING, CHAR } state = CODE;
    long depth = 0;
    bool clean = true; /* the text so far ends a statement */
    char last = 0;     /* the current line's last code character */
    for (size_t i = 0; i < len; i++) {
        bool line_start = i == 0 || text[i - 1] == '\n';
        if (line_start) {
            if (clean && depth == 0 && state == CODE) {
                size_t j = i;
                while (j < len && text[j] == ' ')
                    j++;
                bool is_else = len - j >= 4 && memcmp(text + j, "else", 4) == 0 &&
                               (j + 4 == len || !s_is_ident_char(text[j + 4]));
                if (!is_else && j < len && text[j] != '\n' &&
                    !TROUPE__VEC_PUSH(*starts, *n, *cap, i))
                    return -1;
            }
            last = 0;
        }
        char c = text[i];
        switch (state) {
        case CODE:
            if (c == '/' && i + 1 < len && text[i + 1] == '*') {
                state = BLOCK_COMMENT;
                i++;
            } else if (c == '/' && i + 1 < len && text[i + 1] == '/') {
                state = LINE_COMMENT;
                i++;
            } else if (c == '"') {
                state = STRING;
                last = c;
            } else if (c == '\'') {
                state = CHAR;
                last = c;
            } else if (c == '{') {
                depth++;
                last = c;
            } else if (c == '}') {
                if (--depth < 0)
                    return 0;
                last = c;
            } else if (c != ' ' && c != '\n' && c != '\t') {
                last = c;
            }
            break;
        case BLOCK_COMMENT:
            if (c == '*' && i + 1 < len && text[i + 1] == '/') {
                state = CODE;
                i++;
            }
            break;
        case LINE_COMMENT:
            if (c == '\n')
                state = CODE;
            break;
        case STRING:
        case CHAR:
            if (c == '\\')
                i++;
            else if (c == (state == STRING ? '"' : '\''))
                state = CODE;
            break;
        }
        if (c == '\n' || i + 1 >= len) {
            if (last != 0)
                clean = depth == 0 && (last == ';' || last == '}');
            if (state == BLOCK_COMMENT || state == STRING || state == CHAR)
                clean = false;
        }
    }
    return depth == 0 && state != STRING && state != CHAR && state != BLOCK_COMMENT ? 1 : 0;
}

/* Finds `needle` in hay[from..len). */
static const char *s_find(const char *hay, size_t len, size_t from, const char *needle)
{
    size_t nl = strlen(needle);
    for (size_t i = from; i + nl <= len; i++) {
        const char *hit = memchr(hay + i, needle[0], len - i);
        if (hit == NULL || (size_t)(hit - hay) + nl > len)
            return NULL;
        if (memcmp(hit, needle, nl) == 0)
            return hit;
        i = (size_t)(hit - hay);
    }
    return NULL;
}

static const char s_part_macro[] = "#if defined(__GNUC__)\n"
                                   "#define TROUPE_PART __attribute__((visibility(\"hidden\")))\n"
                                   "#else\n"
                                   "#define TROUPE_PART\n"
                                   "#endif\n";

/* "void <name>__p<k>(<params>, <locals as restrict pointers>)" without a terminator. */
static void s_put_part_signature(troupe__strbuf_t *b, const troupe_cgen_result_t *r, size_t k,
                                 const char *src, const s_span_t *ltype, const s_span_t *lident,
                                 size_t nlocals)
{
    troupe__strbuf_printf(b, "TROUPE_PART void %s__p%zu(", r->name, k);
    bool any = false;
    for (size_t i = 0; i < r->nparams; i++, any = true)
        troupe__strbuf_printf(b, "%s%s", any ? ", " : "", r->params[i].decl);
    if (r->ngathers > 0) {
        troupe__strbuf_printf(b, "%sint64_t *troupe_err", any ? ", " : "");
        any = true;
    }
    for (size_t i = 0; i < nlocals; i++, any = true) {
        troupe__strbuf_puts(b, any ? ", " : "");
        troupe__strbuf_putn(b, src + ltype[i].off, ltype[i].len);
        troupe__strbuf_puts(b, " *restrict ");
        troupe__strbuf_putn(b, src + lident[i].off, lident[i].len);
    }
    if (!any)
        troupe__strbuf_puts(b, "void");
    troupe__strbuf_puts(b, ")");
}

/* The GEMM hooks a part passes on (s_put_gemm_hooks): its suffix, parameters and body. */
typedef struct s_part_hook {
    const char *suffix, *params, *body;
} s_part_hook_t;

static const s_part_hook_t s_part_hooks[] = {
    {"gemm_hooks", "troupe_sgemm_fn s, troupe_dgemm_fn d",
     "    troupe_sgemm = s;\n    troupe_dgemm = d;\n"},
    {"gemm_bf16_hooks", "troupe_bgemm_fn f", "    troupe_bgemm = f;\n"},
    {"gemm_half_hooks", "troupe_hgemm_fn f", "    troupe_hgemm = f;\n"},
    {"gemm_pack_hooks", "troupe_spack_bt_fn f", "    troupe_spack_bt = f;\n"},
    {"gemm_brgemm_hooks", "troupe_sbrgemm_fn f", "    troupe_sbrgemm = f;\n"},
};

/* Whether the unit has hook h (s_part_hooks' order). */
static bool s_has_hook(const troupe_cgen_result_t *r, size_t h)
{
    const char *names[] = {r->gemm_hooks_name, r->gemm_bf16_hooks_name, r->gemm_half_hooks_name,
                           r->gemm_pack_hooks_name, r->gemm_brgemm_hooks_name};
    return r->gemm_hooks_name != NULL && names[h] != NULL;
}

/* Part k's hooks: their declarations, or (define) their definitions. */
static void s_put_part_hooks(troupe__strbuf_t *b, const troupe_cgen_result_t *r, size_t k,
                             bool define)
{
    for (size_t h = 0; h < sizeof s_part_hooks / sizeof s_part_hooks[0]; h++) {
        if (!s_has_hook(r, h))
            continue;
        troupe__strbuf_printf(b, "TROUPE_PART void %s__p%zu_%s(%s);\n", r->name, k,
                              s_part_hooks[h].suffix, s_part_hooks[h].params);
        if (define)
            troupe__strbuf_printf(b, "TROUPE_PART void %s__p%zu_%s(%s)\n{\n%s}\n", r->name, k,
                                  s_part_hooks[h].suffix, s_part_hooks[h].params,
                                  s_part_hooks[h].body);
    }
}

troupe_status_t troupe_cgen_c_split(const troupe_cgen_result_t *r, size_t unit_bytes,
                                    char ***out_units, size_t *out_count)
{
    if (out_units == NULL || out_count == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_cgen_c_split: NULL output");
    *out_units = NULL;
    *out_count = 0;
    if (r == NULL || r->dialect != TROUPE_CGEN_C || r->source == NULL || r->name == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_cgen_c_split: no C-dialect result to split");
    troupe_status_t st = TROUPE_OK;
    const char *src = r->source;
    size_t len = r->source_len;
    size_t *starts = NULL, nstarts = 0, starts_cap = 0;
    s_span_t *ltype = NULL, *lident = NULL;
    size_t nlocals = 0, ltype_cap = 0, lident_cap = 0;
    size_t *group_end = NULL, ngroups = 0, group_cap = 0;
    char **units = NULL;
    size_t nunits = 0;
    troupe__strbuf_t b = TROUPE__STRBUF_INIT;

    /* The layout troupe_cgen_emit writes: prelude, "\nvoid <name>(...)\n{\n", the Local
     * arrays, "    /" "* Main logic. *" "/", the body, "}\n", then the entry and the hooks.
     * Anything else is left whole. */
    troupe__strbuf_printf(&b, "\nvoid %s(", r->name);
    if (b.failed)
        goto oom;
    const char *fn = s_find(src, len, 0, b.data);
    troupe__strbuf_reset(&b);
    if (fn == NULL)
        goto done;
    size_t fn_off = (size_t)(fn - src) + 1;
    const char *open = s_find(src, len, fn_off, ")\n{\n");
    if (open == NULL)
        goto done;
    size_t p = (size_t)(open - src) + 4;
    static const char s_locals_line[] = "    /* Local arrays. */\n";
    static const char s_main_line[] = "    /* Main logic. */\n";
    if (len - p >= sizeof s_locals_line - 1 &&
        memcmp(src + p, s_locals_line, sizeof s_locals_line - 1) == 0) {
        p += sizeof s_locals_line - 1;
        /* "    <type> <ident>[<count>] = <init>;\n" each */
        while (len - p >= 4 && memcmp(src + p, "    ", 4) == 0 && src[p + 4] != '/') {
            const char *eol = memchr(src + p, '\n', len - p);
            const char *br = memchr(src + p, '[', len - p);
            if (eol == NULL || br == NULL || br > eol)
                goto done;
            size_t a = p + 4, e = (size_t)(br - src), s = e;
            while (s > a && s_is_ident_char(src[s - 1]))
                s--;
            if (s == e || s < a + 2 || src[s - 1] != ' ')
                goto done;
            if (!TROUPE__VEC_PUSH(ltype, nlocals, ltype_cap, ((s_span_t){a, s - 1 - a})))
                goto oom;
            size_t nl = nlocals - 1;
            if (!TROUPE__VEC_PUSH(lident, nl, lident_cap, ((s_span_t){s, e - s})))
                goto oom;
            p = (size_t)(eol - src) + 1;
        }
    }
    if (len - p < sizeof s_main_line - 1 ||
        memcmp(src + p, s_main_line, sizeof s_main_line - 1) != 0)
        goto done;
    size_t body = p + sizeof s_main_line - 1;
    const char *close = s_find(src, len, body > 0 ? body - 1 : 0, "\n}\n");
    if (close == NULL)
        goto done;
    size_t body_end = (size_t)(close - src) + 1;
    int top = s_top_statements(src + body, body_end - body, &starts, &nstarts, &starts_cap);
    if (top < 0)
        goto oom;
    if (top == 0)
        goto done;
    if (nstarts < 2)
        goto done;
    /* Statements up to the last one that returns (the gather checks) stay in the routine: a
     * return in a part would end only the part. A declaration among the others leaves the
     * unit whole (a later statement may use it). */
    size_t first = 0;
    for (size_t i = 0; i < nstarts; i++) {
        size_t a = body + starts[i], e = i + 1 < nstarts ? body + starts[i + 1] : body_end;
        if (s_has_token(src + a, e - a, "return") || s_has_token(src + a, e - a, "goto"))
            first = i + 1;
    }
    for (size_t i = first; i < nstarts; i++) {
        size_t a = body + starts[i], e = i + 1 < nstarts ? body + starts[i + 1] : body_end;
        if (s_starts_declaration(src + a, e - a))
            goto done;
    }
    if (nstarts - first < 2)
        goto done;
    size_t moved = body_end - (body + starts[first]);
    if (unit_bytes == 0)
        unit_bytes = 1;
    if (moved / unit_bytes >= S_SPLIT_MAX_PARTS)
        unit_bytes = moved / S_SPLIT_MAX_PARTS + 1;
    size_t acc = 0;
    for (size_t i = first; i < nstarts; i++) {
        size_t a = body + starts[i], e = i + 1 < nstarts ? body + starts[i + 1] : body_end;
        acc += e - a;
        if (acc >= unit_bytes || i + 1 == nstarts) {
            if (!TROUPE__VEC_PUSH(group_end, ngroups, group_cap, i + 1))
                goto oom;
            acc = 0;
        }
    }
    if (ngroups < 2)
        goto done;

    units = troupe_calloc(ngroups + 1, sizeof *units);
    if (units == NULL)
        goto oom;
    nunits = ngroups + 1;
    /* Unit 0: the prelude, the parts' prototypes, the routine calling them, entry, hooks. */
    troupe__strbuf_putn(&b, src, fn_off);
    troupe__strbuf_puts(&b, s_part_macro);
    for (size_t k = 1; k <= ngroups; k++) {
        s_put_part_signature(&b, r, k, src, ltype, lident, nlocals);
        troupe__strbuf_puts(&b, ";\n");
        s_put_part_hooks(&b, r, k, false);
    }
    troupe__strbuf_putn(&b, src + fn_off, body + starts[first] - fn_off);
    for (size_t k = 1; k <= ngroups; k++) {
        troupe__strbuf_printf(&b, "    %s__p%zu(", r->name, k);
        bool any = false;
        for (size_t i = 0; i < r->nparams; i++, any = true)
            troupe__strbuf_printf(&b, "%s%s", any ? ", " : "", r->params[i].ident);
        if (r->ngathers > 0) {
            troupe__strbuf_printf(&b, "%stroupe_err", any ? ", " : "");
            any = true;
        }
        for (size_t i = 0; i < nlocals; i++, any = true) {
            troupe__strbuf_puts(&b, any ? ", " : "");
            troupe__strbuf_putn(&b, src + lident[i].off, lident[i].len);
        }
        troupe__strbuf_puts(&b, ");\n");
    }
    troupe__strbuf_puts(&b, "}\n");
    s_put_entry(&b, r);
    if (r->gemm_hooks_name != NULL)
        s_put_gemm_hooks(&b, r, ngroups);
    if ((st = troupe__strbuf_finish(&b, "cgen split", &units[0], NULL)) != TROUPE_OK)
        goto done;
    /* Parts 1..ngroups: the prelude and one function each over a run of statements. */
    size_t from = first;
    for (size_t k = 1; k <= ngroups; k++) {
        size_t to = group_end[k - 1];
        troupe__strbuf_putn(&b, src, fn_off);
        troupe__strbuf_puts(&b, s_part_macro);
        s_put_part_signature(&b, r, k, src, ltype, lident, nlocals);
        troupe__strbuf_puts(&b, ";\n");
        s_put_part_signature(&b, r, k, src, ltype, lident, nlocals);
        troupe__strbuf_puts(&b, "\n{\n");
        size_t a = body + starts[from], e = to < nstarts ? body + starts[to] : body_end;
        troupe__strbuf_putn(&b, src + a, e - a);
        troupe__strbuf_puts(&b, "}\n");
        s_put_part_hooks(&b, r, k, true);
        if ((st = troupe__strbuf_finish(&b, "cgen split", &units[k], NULL)) != TROUPE_OK)
            goto done;
        from = to;
    }
    *out_units = units;
    *out_count = nunits;
    units = NULL;
    goto done;
oom:
    st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen split of %s: out of memory", r->name);
done:
    if (units != NULL)
        troupe_cgen_c_units_free(&units, nunits);
    troupe__strbuf_reset(&b);
    troupe_free(group_end);
    troupe_free(lident);
    troupe_free(ltype);
    troupe_free(starts);
    return st;
}

void troupe_cgen_c_units_free(char ***units_p, size_t count)
{
    if (units_p == NULL || *units_p == NULL)
        return;
    for (size_t i = 0; i < count; i++)
        troupe_free((*units_p)[i]);
    troupe_free(*units_p);
    *units_p = NULL;
}
