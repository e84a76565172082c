/* troupe — the C target of the code generator (compiler/cgen.h, "C dialect"): a routine with
 * external linkage for a typed trampoline, and `<name>_entry(void **args)`, the uniform entry a
 * driver dlsyms and calls with one pointer per parameter; contractions the GEMM library takes
 * call it through `<name>_gemm_hooks` (compiler/gemm.h). */
#include "compiler/cgen_impl.h"

#include "ir/prec.h"

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

/* `<name>_gemm_hooks`: the loader's door to the GEMM library (compiler/gemm.h). */
static void s_put_gemm_hooks(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    troupe__strbuf_printf(b, "\nvoid %s(troupe_sgemm_fn s, troupe_dgemm_fn d);\n",
                          r->gemm_hooks_name);
    troupe__strbuf_printf(b, "void %s(troupe_sgemm_fn s, troupe_dgemm_fn d)\n{\n",
                          r->gemm_hooks_name);
    troupe__strbuf_puts(b, "    troupe_sgemm = s;\n    troupe_dgemm = d;\n}\n");
    if (r->gemm_bf16_hooks_name != NULL) {
        troupe__strbuf_printf(b, "\nvoid %s(troupe_bgemm_fn f);\n", r->gemm_bf16_hooks_name);
        troupe__strbuf_printf(b, "void %s(troupe_bgemm_fn f)\n{\n    troupe_bgemm = f;\n}\n",
                              r->gemm_bf16_hooks_name);
    }
    if (r->gemm_half_hooks_name != NULL) {
        troupe__strbuf_printf(b, "\nvoid %s(troupe_hgemm_fn f);\n", r->gemm_half_hooks_name);
        troupe__strbuf_printf(b, "void %s(troupe_hgemm_fn f)\n{\n    troupe_hgemm = f;\n}\n",
                              r->gemm_half_hooks_name);
    }
}

static void s_put_after(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    s_put_entry(b, r);
    if (r->gemm_hooks_name != NULL)
        s_put_gemm_hooks(b, r);
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
