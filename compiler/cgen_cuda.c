/* troupe — the CUDA target of the code generator (compiler/cgen.h, "CUDA dialect"): an
 * `extern "C" __global__` kernel for NVRTC (devices/cuda/nvrtc.h) that runs on thread 0 of
 * block 0 only; a prelude section's CUDA text replaces its C text where it has one. */
#include "compiler/cgen_impl.h"

static void s_put_calling(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    (void)r;
    troupe__strbuf_puts(b,
                        " * Kernel: single-threaded; launch argument k points to parameter k.\n");
}

static void s_put_open(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    troupe__cgen_put_signature(b, "extern \"C\" __global__ void ", r, "");
    troupe__strbuf_puts(b, "    if (threadIdx.x != 0 || blockIdx.x != 0) return;\n");
}

static const char *s_section_text(const troupe__cgen_section_t *s)
{
    return s->text_cuda != NULL ? s->text_cuda : s->text_c;
}

const troupe__cgen_target_t troupe__cgen_target_cuda = {
    .dialect = TROUPE_CGEN_CUDA,
    .name = "cuda",
    .restrict_kw = "__restrict__",
    .has_entry = false,
    .gemm_library = false,
    .put_calling = s_put_calling,
    .put_open = s_put_open,
    .put_after = NULL,
    .section_text = s_section_text,
};
