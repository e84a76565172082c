/* The consumer test's program (tests/consumer/run.sh), built against an installed troupe.
 *
 *   cpu_only              runs one routine on the cpu backend (y = x · w, as examples/hello),
 *                         then reads /proc/self/maps: no CUDA library (libcudart, NVRTC,
 *                         nvJitLink, cuBLAS(Lt), libcuda) and not the cuda plugin may be mapped.
 *   cpu_only cuda         the same, then opens the cuda backend: it must go through the plugin
 *                         (libtroupe_cuda.so mapped afterwards) and either open (its device
 *                         count printed; 0 on a machine without a GPU) or fail with a message
 *                         that names cuda. A troupe built without CUDA must say NOT_FOUND
 *                         "no backend named 'cuda'".
 *   cpu_only no-plugin    the same, where the plugin was removed from the installation: NOT_FOUND
 *                         naming libtroupe_cuda.so, and nothing of CUDA mapped.
 * Prints what it found; exit status 0 when every check holds, 1 otherwise.
 */
#include <troupe/troupe.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != TROUPE_OK) {                                                                 \
            fprintf(stderr, "cpu_only: %s: %s\n", #call, troupe_last_error());                     \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static const char *const s_cuda_libs[] = {"libcudart", "libnvrtc", "libnvJitLink", "libcublas",
                                          "libcuda.so"};

/* Counts the mapped CUDA libraries (each mapping line once) and whether the plugin is mapped;
 * prints each CUDA mapping. -1 when /proc/self/maps cannot be read. */
static int s_mapped(bool *plugin)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return -1;
    char line[4096];
    int n = 0;
    *plugin = false;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strstr(line, "libtroupe_cuda.so") != NULL)
            *plugin = true;
        for (size_t i = 0; i < sizeof s_cuda_libs / sizeof s_cuda_libs[0]; i++) {
            if (strstr(line, s_cuda_libs[i]) != NULL) {
                if (n++ < 3)
                    fprintf(stderr, "cpu_only: mapped: %s", line);
                break;
            }
        }
    }
    fclose(f);
    return n;
}

static int s_cpu_routine(void)
{
    troupe_backend_t *b = NULL;
    troupe_device_t *d = NULL;
    troupe_stream_t *s = NULL;
    troupe_context_t *ctx = NULL, *c1 = NULL, *c2 = NULL;
    CHECK(troupe_backend_open("cpu", TROUPE_ONLY_DEVICES_PARALLEL, &b));
    CHECK(troupe_get_device(b, 0, &d));
    CHECK(troupe_new_stream(d, &s));
    CHECK(troupe_context_new(s, &ctx));
    troupe_tnode_t *x = NULL, *w = NULL, *y = NULL;
    CHECK(troupe_tnode_new((const char *[]){"x"}, 1, TROUPE_PREC_SINGLE, 1, (int64_t[]){3}, NULL,
                           0, &x));
    CHECK(troupe_tnode_new((const char *[]){"w"}, 1, TROUPE_PREC_SINGLE, 2, (int64_t[]){3, 2},
                           NULL, 0, &w));
    CHECK(troupe_tnode_new((const char *[]){"y"}, 1, TROUPE_PREC_SINGLE, 1, (int64_t[]){2}, NULL,
                           0, &y));
    CHECK(troupe_tnode_set_values(x, (double[]){1, 2, 3}, 3));
    CHECK(troupe_tnode_set_values(w, (double[]){1, 0, 0, 1, 1, 1}, 6));
    troupe_memory_mode_t hosted = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, 0};
    CHECK(troupe_tnode_update_memory_mode(y, hosted, 1));
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *mm = NULL;
    troupe_code_t *code = NULL;
    CHECK(troupe_asgn_comp_new(&comp));
    CHECK(troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ADD, y, TROUPE_BINOP_MUL,
                                  troupe_asgn_node(x), troupe_asgn_node(w), "i,ij=>j", &mm));
    troupe_asgn_comp_set_root(comp, mm);
    CHECK(troupe_compile(b, comp, "consumer", &code));
    troupe_asgn_comp_destroy(&comp);
    troupe_routine_t *r = NULL;
    troupe_event_t *done = NULL;
    CHECK(troupe_init_from_host(ctx, x, &c1, NULL));
    CHECK(troupe_init_from_host(c1, w, &c2, NULL));
    CHECK(troupe_link(c2, code, &r));
    CHECK(troupe_routine_run(r, &done));
    CHECK(troupe_event_sync(done, 10LL * 1000 * 1000 * 1000));
    double got[2];
    CHECK(troupe_tnode_get_values(y, got, 2));
    troupe_event_release(&done);
    troupe_routine_release(&r);
    troupe_code_release(&code);
    troupe_context_release(&c2);
    troupe_context_release(&c1);
    troupe_context_release(&ctx);
    troupe_stream_release(&s);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
    troupe_backend_close(&b);
    if (got[0] != 4 || got[1] != 5) {
        fprintf(stderr, "cpu_only: y = %g %g, expected 4 5\n", got[0], got[1]);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (s_cpu_routine() != 0)
        return 1;
    bool plugin = false;
    int n = s_mapped(&plugin);
    if (n != 0 || plugin) {
        fprintf(stderr, "cpu_only: after the cpu routine: %d CUDA mapping(s), plugin %s\n", n,
                plugin ? "mapped" : "not mapped");
        return 1;
    }
    printf("cpu_only: cpu routine ran; no CUDA library mapped\n");
    if (strcmp(mode, "cuda") != 0 && strcmp(mode, "no-plugin") != 0)
        return 0;

    troupe_backend_t *b = NULL;
    troupe_status_t st = troupe_backend_open("cuda", TROUPE_ONLY_DEVICES_PARALLEL, &b);
    const char *msg = troupe_last_error();
    n = s_mapped(&plugin);
    if (strcmp(mode, "no-plugin") == 0 || !TROUPE_HAVE_CUDA) {
        const char *want = TROUPE_HAVE_CUDA ? "libtroupe_cuda.so" : "no backend named 'cuda'";
        bool ok = st == TROUPE_NOT_FOUND && strstr(msg, want) != NULL && n == 0 && !plugin;
        printf("cpu_only: open cuda: %s: %s\n", troupe_status_str(st), msg);
        if (!ok)
            fprintf(stderr, "cpu_only: expected NOT_FOUND naming \"%s\" and nothing of CUDA "
                            "mapped (%d CUDA mapping(s), plugin %s)\n",
                    want, n, plugin ? "mapped" : "not mapped");
        troupe_backend_close(&b);
        return ok ? 0 : 1;
    }
    if (!plugin) {
        fprintf(stderr, "cpu_only: open cuda (%s) did not map libtroupe_cuda.so\n",
                troupe_status_str(st));
        troupe_backend_close(&b);
        return 1;
    }
    int ok = 1;
    if (st == TROUPE_OK) {
        int ndev = -1;
        if (troupe_num_devices(b, &ndev) == TROUPE_OK && ndev >= 0) {
            printf("cpu_only: open cuda: OK through the plugin, %d device(s)\n", ndev);
            ok = 0;
        } else {
            fprintf(stderr, "cpu_only: cuda opened but has no device count: %s\n",
                    troupe_last_error());
        }
    } else if (strstr(msg, "cuda") != NULL) {
        printf("cpu_only: open cuda: %s through the plugin: %s\n", troupe_status_str(st), msg);
        ok = 0;
    } else {
        fprintf(stderr, "cpu_only: open cuda: %s without naming cuda: %s\n",
                troupe_status_str(st), msg);
    }
    troupe_backend_close(&b);
    return ok;
}
