/* troupe — the benchmark harness (bench_util.h). */
#define _POSIX_C_SOURCE 200809L
#include "bench/bench_util.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/status.h"
#include "devices/host/gemm_library.h"
#include "troupe_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

void troupe_bench_opts_default(troupe_bench_opts_t *opts)
{
    opts->warmup = 1;
    opts->min_runs = 5;
    opts->max_runs = 51;
    opts->min_total_s = 0.5;
    opts->dump_source = false;
}

/* Parses argv[*i + 1] as an int in lo..hi; advances *i. false on a bad or missing value. */
static bool s_int_arg(int argc, char **argv, int *i, int lo, int hi, int *out)
{
    if (*i + 1 >= argc)
        return false;
    char *end = NULL;
    long v = strtol(argv[*i + 1], &end, 10);
    if (end == argv[*i + 1] || *end != '\0' || v < lo || v > hi)
        return false;
    *out = (int)v;
    (*i)++;
    return true;
}

static void s_usage(FILE *f, const char *prog, const char *about)
{
    fprintf(f,
            "usage: %s [--runs N] [--warmup N] [--quick] [--dump-source]\n"
            "%s\n"
            "  --runs N       exactly N timed runs (default: >= 5 runs and >= 0.5 s, <= 51)\n"
            "  --warmup N     untimed runs before timing (default 1)\n"
            "  --quick        3 timed runs, no minimum time\n"
            "  --dump-source  print the code troupe generates on stderr\n"
            "Output: machine facts, then one line per (case, peer):\n"
            "  bench=... case=... bytes=... troupe_us=... peer=... peer_us=... ratio=... ...\n"
            "  ratio = troupe_us / peer_us (below 1: troupe is faster); times are medians.\n",
            prog, about ? about : "");
}

int troupe_bench_parse_args(int argc, char **argv, const char *about, troupe_bench_opts_t *opts)
{
    const char *prog = argc > 0 ? argv[0] : "bench";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int v = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            s_usage(stdout, prog, about);
            return 1;
        } else if (strcmp(a, "--runs") == 0) {
            if (!s_int_arg(argc, argv, &i, 1, TROUPE_BENCH_MAX_RUNS, &v))
                goto bad_value;
            opts->min_runs = opts->max_runs = v;
            opts->min_total_s = 0.0;
        } else if (strcmp(a, "--warmup") == 0) {
            if (!s_int_arg(argc, argv, &i, 0, 100, &v))
                goto bad_value;
            opts->warmup = v;
        } else if (strcmp(a, "--quick") == 0) {
            opts->min_runs = opts->max_runs = 3;
            opts->min_total_s = 0.0;
        } else if (strcmp(a, "--dump-source") == 0) {
            opts->dump_source = true;
        } else {
            fprintf(stderr, "%s: unknown option '%s'\n", prog, a);
            s_usage(stderr, prog, about);
            return -1;
        }
        continue;
    bad_value:
        fprintf(stderr, "%s: %s needs a number in range\n", prog, a);
        s_usage(stderr, prog, about);
        return -1;
    }
    return 0;
}

/* ---- machine facts ------------------------------------------------------------------------ */

/* Removes trailing blanks and newlines; replaces double quotes (values are printed quoted). */
static void s_clean(char *s)
{
    for (char *p = s; *p; p++)
        if (*p == '"')
            *p = '\'';
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
}

/* The CPU model from /proc/cpuinfo ("model name", else "Processor"/"cpu model"/"uarch"
 * fields), "unknown" when none. */
static void s_cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    static const char *const keys[] = {"model name", "Processor", "cpu model", "uarch", "cpu"};
    char line[512];
    int best = (int)(sizeof keys / sizeof keys[0]);
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        for (int k = 0; k < best; k++) {
            size_t kl = strlen(keys[k]);
            if (strncmp(line, keys[k], kl) == 0 &&
                (line[kl] == ' ' || line[kl] == '\t' || line[kl] == ':')) {
                const char *v = colon + 1;
                while (*v == ' ' || *v == '\t')
                    v++;
                snprintf(buf, cap, "%s", v);
                s_clean(buf);
                best = k;
                break;
            }
        }
        if (best == 0)
            break;
    }
    fclose(f);
}

/* First line of `<cc> --version`, "unknown" when it cannot be run. */
static void s_cc_version(const char *cc, char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --version 2>/dev/null", cc);
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    char line[512];
    if (fgets(line, sizeof line, p)) {
        snprintf(buf, cap, "%s", line);
        s_clean(buf);
    }
    while (fgets(line, sizeof line, p))
        ; /* drain, so the compiler does not die of SIGPIPE */
    pclose(p);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>
#include <time.h>

static double s_thread_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define S_CHAINS 12
#define S_FMA_ITERS 2000000L

/* GFLOP/s of S_FMA_ITERS rounds of S_CHAINS independent FMAs on 16 lanes (the best of 3). */
__attribute__((target("avx512f"))) static double s_peak_avx512(void)
{
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        __m512 a[S_CHAINS];
        const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
        for (int i = 0; i < S_CHAINS; i++)
            a[i] = _mm512_set1_ps((float)i);
        double t0 = s_thread_cpu_s();
        for (long k = 0; k < S_FMA_ITERS; k++) {
#pragma GCC unroll 12 /* the chains in registers, not in memory */
            for (int i = 0; i < S_CHAINS; i++)
                a[i] = _mm512_fmadd_ps(a[i], b, c);
        }
        double t = s_thread_cpu_s() - t0;
        volatile float sink = 0;
        for (int i = 0; i < S_CHAINS; i++)
            sink += _mm512_reduce_add_ps(a[i]);
        (void)sink;
        double g = (double)S_FMA_ITERS * S_CHAINS * 16 * 2 / t * 1e-9;
        best = t > 0 && g > best ? g : best;
    }
    return best;
}

/* The same on 8 lanes (AVX2 + FMA). */
__attribute__((target("avx2,fma"))) static double s_peak_avx2(void)
{
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        __m256 a[S_CHAINS];
        const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
        for (int i = 0; i < S_CHAINS; i++)
            a[i] = _mm256_set1_ps((float)i);
        double t0 = s_thread_cpu_s();
        for (long k = 0; k < S_FMA_ITERS; k++) {
#pragma GCC unroll 12
            for (int i = 0; i < S_CHAINS; i++)
                a[i] = _mm256_fmadd_ps(a[i], b, c);
        }
        double t = s_thread_cpu_s() - t0;
        float lanes[8], sum = 0;
        for (int i = 0; i < S_CHAINS; i++) {
            _mm256_storeu_ps(lanes, a[i]);
            for (int l = 0; l < 8; l++)
                sum += lanes[l];
        }
        volatile float sink = sum;
        (void)sink;
        double g = (double)S_FMA_ITERS * S_CHAINS * 8 * 2 / t * 1e-9;
        best = t > 0 && g > best ? g : best;
    }
    return best;
}

double troupe_bench_fp32_peak_gflops(const char **isa)
{
    static double peak = -1;
    static const char *which = "none";
    if (peak < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f")) {
            peak = s_peak_avx512();
            which = "avx512";
        } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            peak = s_peak_avx2();
            which = "avx2";
        } else {
            peak = NAN;
        }
    }
    if (isa)
        *isa = which;
    return peak;
}
#else
double troupe_bench_fp32_peak_gflops(const char **isa)
{
    if (isa)
        *isa = "none";
    return NAN;
}
#endif

void troupe_bench_print_machine(const char *bench_flags)
{
    if (troupe_config_check() != TROUPE_OK)
        fprintf(stderr, "bench: warning: %s\n", troupe_last_error());

    char cpu[256], os[256] = "unknown";
    s_cpu_model(cpu, sizeof cpu);
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
    /* the load average: others compiling on a shared machine make every time noisier */
    char load[64] = "unknown";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        double l1 = 0, l5 = 0;
        if (fscanf(lf, "%lf %lf", &l1, &l5) == 2)
            snprintf(load, sizeof load, "%.2f,%.2f", l1, l5);
        fclose(lf);
    }
    printf("machine cores=%ld cpu=\"%s\" os=\"%s\" load=%s\n", sysconf(_SC_NPROCESSORS_ONLN), cpu,
           os, load);

#if defined(__clang__)
    const char *bench_cc = "clang " __clang_version__;
#elif defined(__GNUC__)
    const char *bench_cc = "GCC " __VERSION__;
#else
    const char *bench_cc = "unknown";
#endif
    printf("compiler bench_cc=\"%s\" bench_flags=\"%s\"\n", bench_cc,
           bench_flags ? bench_flags : "");

    char ccv[512];
    s_cc_version(troupe_config_cc(), ccv, sizeof ccv);
    printf("troupe version=%s cc=\"%s\" cc_version=\"%s\" cc_flags=\"%s\" cache_dir=%s "
           "gemm=%s gemm_library=\"%s\"\n",
           TROUPE_VERSION_STRING, troupe_config_cc(), ccv, troupe_config_cc_flags(),
           troupe_config_cache_dir(), troupe_config_gemm_mode_name(troupe_config_gemm_mode()),
           troupe_gemm_library_name());
    const char *isa = "none";
    double peak = troupe_bench_fp32_peak_gflops(&isa);
    printf("peak fp32_gflops=%.1f isa=%s (one core: vector FMAs timed by the thread's CPU clock)\n",
           peak, isa);
    fflush(stdout);
}

void troupe_bench_print_library(const char *name, const char *version, const char *extra)
{
    char v[512];
    snprintf(v, sizeof v, "%s", version ? version : "unknown");
    s_clean(v);
    printf("library name=%s version=\"%s\"%s%s\n", name, v, extra ? " " : "", extra ? extra : "");
    fflush(stdout);
}

/* ---- timing ------------------------------------------------------------------------------- */

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void s_stats(double *samples, int n, troupe_bench_stats_t *out)
{
    qsort(samples, (size_t)n, sizeof samples[0], s_cmp_double);
    out->runs = n;
    out->min_us = samples[0];
    out->max_us = samples[n - 1];
    out->median_us = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

int troupe_bench_time_sides(const troupe_bench_side_t *sides, int nsides,
                            const troupe_bench_opts_t *opts, troupe_bench_stats_t *out)
{
    if (out && nsides >= 1 && nsides <= TROUPE_BENCH_MAX_SIDES)
        memset(out, 0, (size_t)nsides * sizeof *out);
    /* a bad call says so: a benchmark that only returned -1 would end without a word */
    if (!out || nsides < 1 || nsides > TROUPE_BENCH_MAX_SIDES || !sides || !opts ||
        opts->warmup < 0 || opts->min_runs < 1 || opts->max_runs < opts->min_runs ||
        opts->max_runs > TROUPE_BENCH_MAX_RUNS || !(opts->min_total_s >= 0.0)) {
        fprintf(stderr, "troupe_bench_time_sides: bad arguments (%d sides; options not set by "
                        "troupe_bench_opts_default?)\n", nsides);
        return -1;
    }
    for (int s = 0; s < nsides; s++)
        if (!sides[s].fn) {
            fprintf(stderr, "troupe_bench_time_sides: side %d has no function\n", s);
            return -1;
        }
    double *samples = malloc((size_t)nsides * (size_t)opts->max_runs * sizeof *samples);
    if (!samples) {
        fprintf(stderr, "troupe_bench_time_sides: out of memory\n");
        return -1;
    }
    int n[TROUPE_BENCH_MAX_SIDES] = {0};
    int64_t total_ns[TROUPE_BENCH_MAX_SIDES] = {0};
    const int64_t min_total_ns = (int64_t)(opts->min_total_s * 1e9);
    const int64_t slice_ns = min_total_ns / 10;
    int rc = 0;

    for (int s = 0; s < nsides && rc == 0; s++)
        for (int i = 0; i < opts->warmup && rc == 0; i++)
            rc = sides[s].fn(sides[s].arg);

    bool all_done = false;
    while (rc == 0 && !all_done) {
        all_done = true;
        for (int s = 0; s < nsides && rc == 0; s++) {
            double *mine = samples + (size_t)s * (size_t)opts->max_runs;
            int64_t round_ns = 0;
            while (rc == 0 && n[s] < opts->max_runs &&
                   (n[s] < opts->min_runs || total_ns[s] < min_total_ns)) {
                int64_t t0 = troupe_now_ns();
                rc = sides[s].fn(sides[s].arg);
                int64_t dt = troupe_now_ns() - t0;
                mine[n[s]++] = (double)dt / 1e3;
                total_ns[s] += dt;
                round_ns += dt;
                if (round_ns >= slice_ns)
                    break;
            }
            if (n[s] < opts->max_runs && (n[s] < opts->min_runs || total_ns[s] < min_total_ns))
                all_done = false;
        }
    }
    if (rc == 0)
        for (int s = 0; s < nsides; s++)
            s_stats(samples + (size_t)s * (size_t)opts->max_runs, n[s], &out[s]);
    else
        memset(out, 0, (size_t)nsides * sizeof *out);
    free(samples);
    return rc;
}

int troupe_bench_time(troupe_bench_fn_t fn, void *arg, const troupe_bench_opts_t *opts,
                      troupe_bench_stats_t *out)
{
    troupe_bench_side_t side = {fn, arg};
    return troupe_bench_time_sides(&side, 1, opts, out);
}

/* ---- operands ----------------------------------------------------------------------------- */

float *troupe_bench_alloc_floats(int64_t count)
{
    void *p = NULL;
    if (count < 0 || posix_memalign(&p, 64, (size_t)count * sizeof(float)) != 0)
        return NULL;
    memset(p, 0, (size_t)count * sizeof(float));
    return p;
}

void troupe_bench_fill_uniform(float *v, int64_t count, uint64_t seed)
{
    uint64_t z = seed;
    for (int64_t i = 0; i < count; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(z >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

/* ---- output ------------------------------------------------------------------------------- */

void troupe_bench_print_case(const char *bench, const char *case_name, int64_t bytes,
                             double troupe_us, const char *peer, double peer_us,
                             const char *extra_fmt, ...)
{
    double ratio = peer_us > 0.0 ? troupe_us / peer_us : 0.0;
    printf("bench=%s case=%s bytes=%lld troupe_us=%.1f peer=%s peer_us=%.1f ratio=%.3f", bench,
           case_name, (long long)bytes, troupe_us, peer, peer_us, ratio);
    if (extra_fmt && extra_fmt[0]) {
        va_list ap;
        va_start(ap, extra_fmt);
        putchar(' ');
        vprintf(extra_fmt, ap);
        va_end(ap);
    }
    putchar('\n');
    fflush(stdout);
}

int troupe_bench_fail_status(const char *prog, const char *what, troupe_status_t st)
{
    fprintf(stderr, "%s: %s: %s: %s\n", prog, what, troupe_status_str(st), troupe_last_error());
    return 1;
}
