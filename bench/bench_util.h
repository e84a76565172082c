/* troupe — the benchmark harness (bench/): command-line options, machine facts, timing and the
 * output line every benchmark prints.
 *
 * Rules (developers' guide): a benchmark runs troupe and a peer (a naive loop, a system
 * library) in the same run and prints their ratio; it never asserts on time. It prints the
 * machine facts first (troupe_bench_print_machine, then one troupe_bench_print_library line
 * per peer library it linked), then one line per (case, peer), grep-friendly:
 *
 *   bench=<name> case=<case> bytes=<n> troupe_us=<t> peer=<name> peer_us=<t> ratio=<r> ...
 *
 * where the times are medians in microseconds and ratio = troupe_us / peer_us (below 1 means
 * troupe is faster). Further key=value fields follow (troupe_gflops=, check=ok, ...). Values
 * holding blanks are double-quoted. Facts lines start with `machine`, `compiler`, `troupe` or
 * `library`. A benchmark that finds troupe's results wrong prints why on stderr and exits 1.
 *
 * Timing: `warmup` untimed runs, then timed runs until both `min_runs` runs and `min_total_s`
 * seconds are reached, or `max_runs` runs; the median, min and max are reported. Troupe and its
 * peers are timed together (troupe_bench_time_sides): their runs are interleaved in rounds, so
 * load that comes and goes on a shared machine falls on every side alike instead of on
 * whichever happened to run at the time, which would skew the ratio.
 *
 * Thread safety: not thread-safe (benchmarks are single-threaded programs).
 * Ownership: nothing returned needs freeing; strings passed in are borrowed.
 */
#ifndef TROUPE_BENCH_BENCH_UTIL_H
#define TROUPE_BENCH_BENCH_UTIL_H

#include "base/status.h"

#include <stdbool.h>
#include <stdint.h>

/* Largest max_runs troupe_bench_time accepts. */
#define TROUPE_BENCH_MAX_RUNS 1000
/* Most sides troupe_bench_time_sides accepts. */
#define TROUPE_BENCH_MAX_SIDES 8

typedef struct troupe_bench_opts {
    int warmup;         /* untimed runs first (default 1) */
    int min_runs;       /* at least this many timed runs (default 5) */
    int max_runs;       /* at most this many (default 51, <= TROUPE_BENCH_MAX_RUNS) */
    double min_total_s; /* keep running until this much time was timed (default 0.5) */
    bool dump_source;   /* --dump-source: print generated code on stderr */
} troupe_bench_opts_t;

typedef struct troupe_bench_stats {
    double median_us, min_us, max_us;
    int runs;
} troupe_bench_stats_t;

/* One run of the timed operation; returns 0 on success, anything else stops the timing. */
typedef int (*troupe_bench_fn_t)(void *arg);

/* Fills *opts with the defaults above. */
void troupe_bench_opts_default(troupe_bench_opts_t *opts);

/* Parses the options every benchmark takes:
 *   --runs N        exactly N timed runs (1..TROUPE_BENCH_MAX_RUNS)
 *   --warmup N      N untimed runs first (0..100)
 *   --quick         3 timed runs, no minimum time (a smoke run)
 *   --dump-source   print the code troupe generates on stderr
 *   --help          usage on stdout
 * Returns 0 to go on, 1 when --help was printed (exit 0), -1 after printing a usage error on
 * stderr (exit 2). `about` is one line describing the benchmark, for --help. */
int troupe_bench_parse_args(int argc, char **argv, const char *about, troupe_bench_opts_t *opts);

/* Prints the machine facts on stdout:
 *   machine cores=<online> cpu="<model>" os="<sysname release machine>" load=<1 min>,<5 min>
 *   compiler bench_cc="<compiler of the benchmark>" bench_flags="<its flags>"
 *   troupe version=<v> cc="<$CC>" cc_version="<first line of $CC --version>" cc_flags="<flags>"
 *          cache_dir=<dir> gemm=<library|generated: TROUPE_GEMM> gemm_library="<the library
 *          contractions call, troupe_gemm_library_name()>"
 *   peak fp32_gflops=<one core's single-precision FMA rate> isa=<avx512|avx2|none>
 * `bench_flags` is how the benchmark (and so its naive peers) was compiled. */
void troupe_bench_print_machine(const char *bench_flags);

/* One core's single-precision peak in GFLOP/s, measured: 12 independent chains of vector FMAs
 * (enough to cover the FMA latency on every pipe), timed by this thread's CPU clock so that
 * other processes' load does not lower it, best of 3 runs of about 0.1 s; the widest ISA the
 * CPU has (AVX-512, else AVX2+FMA). Measured once per process and cached. NAN on a CPU with
 * neither. It is the peak the "fraction of one core's fp32 peak" divides by: vendors'
 * figures differ by core (two 512-bit FMA pipes on Intel server cores, 512-bit operations on
 * two 256-bit pipes on AMD Zen 4). `isa` (may be NULL) gets "avx512", "avx2" or "none". */
double troupe_bench_fp32_peak_gflops(const char **isa);

/* Prints `library name=<name> version="<version>"` (and ` <extra>` when extra is not NULL). */
void troupe_bench_print_library(const char *name, const char *version, const char *extra);

/* One thing to time: fn(arg). */
typedef struct troupe_bench_side {
    troupe_bench_fn_t fn;
    void *arg;
} troupe_bench_side_t;

/* Times fn(arg) as described in the header comment. Returns 0, or the first nonzero value fn
 * returned (then *out is zeroed), or -1 for bad options. */
int troupe_bench_time(troupe_bench_fn_t fn, void *arg, const troupe_bench_opts_t *opts,
                      troupe_bench_stats_t *out);

/* Times `nsides` (1..TROUPE_BENCH_MAX_SIDES) sides together: each side's warm-up runs, then
 * rounds in which every side not yet done runs for about min_total_s / 10 (at least once; one
 * run per round when min_total_s is 0). A side is done at max_runs runs, or at min_runs runs
 * and min_total_s seconds timed. out[i] gets side i's statistics. Returns 0, the first nonzero
 * value a side returned (then every out[i] is zeroed), or -1 for bad arguments or no memory. */
int troupe_bench_time_sides(const troupe_bench_side_t *sides, int nsides,
                            const troupe_bench_opts_t *opts, troupe_bench_stats_t *out);

/* Prints one result line (the format in the header comment) with `extra_fmt` (printf-style,
 * may be NULL) appended after a blank: further key=value fields. bytes: the bytes the case
 * reads and writes once (its operands), not a traffic estimate. */
void troupe_bench_print_case(const char *bench, const char *case_name, int64_t bytes,
                             double troupe_us, const char *peer, double peer_us,
                             const char *extra_fmt, ...) TROUPE_PRINTF(7, 8);

/* `count` floats, zeroed, 64-byte aligned (free() them); NULL when out of memory. */
float *troupe_bench_alloc_floats(int64_t count);

/* Fills v[0..count) with deterministic values uniform in [-1, 1) from `seed` (a 64-bit LCG's
 * high bits): the same operands in every run. */
void troupe_bench_fill_uniform(float *v, int64_t count, uint64_t seed);

/* Prints "<prog>: <what>: <STATUS>: <troupe_last_error()>" on stderr and returns 1 (an exit
 * status for main). */
int troupe_bench_fail_status(const char *prog, const char *what, troupe_status_t st);

#endif
