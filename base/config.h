/* clang-format off */
/* troupe — process configuration, read once from the environment, with API setters.
 *
 * Every environment variable troupe reads is registered by the module that reads it (the
 * registry below: name, type, default, accepted values, API equivalent, one line of help);
 * `troupe info --env` prints the table and docs/configuration.md lists them (tests/config_docs.sh
 * checks that the two agree and that the library reads no unregistered TROUPE_* variable).
 * The values are read here, once, with the getters and setters below (TROUPE_CC_TIMEOUT_S is
 * read by devices/host/cc_cache.c at each compile).
 *
 * A malformed value keeps the default, logs a warning and is reported by
 * troupe_config_check(), which programs call once at start to fail loudly.
 *
 * Thread safety: loading is done once (pthread_once) on first use and is thread-safe.
 * Setters are meant for program start: they are atomic for integers, but a string getter's
 * result is only valid until the matching setter runs again.
 * Ownership: string getters return troupe-owned storage; setters copy their argument.
 */
/* clang-format on */
#ifndef TROUPE_BASE_CONFIG_H
#define TROUPE_BASE_CONFIG_H

#include "troupe/base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the registry of environment variables ------------------------------------------------
 * Each layer registers the variables it reads (a static table, at library load): `troupe info
 * --env` prints them, and docs/configuration.md is checked against them (tests/config_docs.sh).
 * Fields are one-line texts; none holds two blanks in a row (the table is aligned by them). */
typedef struct troupe_config_var {
    const char *name;  /* "TROUPE_CC_TIMEOUT_S" */
    const char *layer; /* the module that reads it: "base", "devices", "transport", ... */
    const char *type;  /* "seconds", "bytes", "count", "0|1", "choice", "path", "text", ... */
    const char *def;   /* its default, as docs/configuration.md writes it */
    const char *range; /* the values accepted ("(0, 86400]", "auto|on|off"), or "-" */
    const char *api;   /* its API equivalent, or "-" */
    const char *help;  /* one line */
} troupe_config_var_t;

/* Adds `count` variables (the table is borrowed: static storage). INVALID_ARGUMENT for a name
 * already registered or a field NULL; RESOURCE_EXHAUSTED past TROUPE_CONFIG_MAX_TABLES tables. */
#define TROUPE_CONFIG_MAX_TABLES 32
TROUPE_MUST_USE troupe_status_t troupe_config_register(const troupe_config_var_t *vars,
                                                       size_t count);
/* The registered variables, sorted by name: their count, and the i-th (NULL past the end). */
size_t troupe_config_var_count(void);
const troupe_config_var_t *troupe_config_var_at(size_t i);
/* The variable called `name`, or NULL. */
const troupe_config_var_t *troupe_config_var_find(const char *name);

/* Registers a layer's table when the library loads (file scope; `tag` makes the name unique). */
#define TROUPE_CONFIG_VARS(tag, table)                                                             \
    __attribute__((constructor)) static void troupe__config_vars_##tag(void)                       \
    {                                                                                              \
        (void)!troupe_config_register(table, sizeof table / sizeof table[0]);                      \
    }

/* Returns the status of reading the environment: TROUPE_OK, or TROUPE_INVALID_ARGUMENT with
 * troupe_last_error() naming the first bad variable and its value. */
TROUPE_MUST_USE troupe_status_t troupe_config_check(void);

/* Re-reads the environment (tests). Not thread-safe with concurrent getters. */
TROUPE_MUST_USE troupe_status_t troupe_config_reload(void);

const char *troupe_config_backend(void);
const char *troupe_config_cache_dir(void);
const char *troupe_config_cc(void);
const char *troupe_config_cc_flags(void);
int64_t troupe_config_timeout_s(void);
int64_t troupe_config_timeout_ns(void); /* timeout_s in nanoseconds */
size_t troupe_config_fusion_bytes(void);
/* TROUPE_DP_BUCKET_BYTES (default TROUPE_DP_BUCKET_BYTES_DEFAULT, PyTorch DDP's 25 MiB): the
 * gradient bytes after which an overlap segment closes its bucket (docs/parallel.md, Overlap);
 * the first bucket closes after min(this, TROUPE_DP_FIRST_BUCKET_BYTES), DDP's 1 MiB. 1: a
 * bucket at every place a gradient is last used. */
#define TROUPE_DP_BUCKET_BYTES_DEFAULT ((size_t)25 << 20)
#define TROUPE_DP_FIRST_BUCKET_BYTES ((size_t)1 << 20)
size_t troupe_config_dp_bucket_bytes(void);
bool troupe_config_auto_host_transfers(void);
size_t troupe_config_stack_threshold_bytes(void);
/* TROUPE_LOOP_FUSION=all (the default: true) or same-space (false): whether routines for the
 * host backends also fuse nests over shared outer loops, past independent statements and with
 * zeroings moved in (compiler/fuse.h troupe_ll_fuse_loops_outer); routines for cuda never do
 * (devices/device.h no_outer_fusion). same-space keeps one nest per pass, e.g. for a profile. */
bool troupe_config_loop_fusion_outer(void);
/* TROUPE_ITERATION_SCALARS=on (the default: true) or off (false): whether routines for the host
 * backends hold a node written and read only in one loop's body, at one cell, written first, in a
 * C variable instead of an array (compiler/optimize.h step 4c, iteration_scalars); routines for
 * cuda never do. Bit for bit the same results either way. */
bool troupe_config_iteration_scalars(void);
/* TROUPE_HOST_MEMORY: the host memory the host drivers (cpu, sync) may take for a new pool
 * (devices/host/host.c). auto (the default, TROUPE_HOST_MEMORY_AUTO): for pools of 16 MiB or
 * more, what the kernel reports free, MemAvailable + SwapFree of /proc/meminfo, capped by every
 * memory cgroup with a limit on the process's path, less what it holds other than page cache
 * (devices/host/host_memory_impl.h); no check where nothing can be read. off
 * (TROUPE_HOST_MEMORY_OFF): no check. A byte count: that figure instead, for every pool. A pool
 * larger than it is refused (RESOURCE_EXHAUSTED naming the bytes asked for and free) before any
 * memory is touched, instead of the kernel's OOM killer ending the process part way through its
 * first writes. */
#define TROUPE_HOST_MEMORY_AUTO ((int64_t)-1)
#define TROUPE_HOST_MEMORY_OFF ((int64_t)-2)
int64_t troupe_config_host_memory(void);
/* Whether host routines (the cpu and sync backends) run with subnormal floats flushed to zero:
 * results that would be subnormal become 0, and subnormal inputs read as 0 (x86 MXCSR FTZ and
 * DAZ; AArch64 FPCR.FZ). TROUPE_DENORMALS=flush (the default) or keep (IEEE gradual underflow).
 * Why flush: SGD momentum of a unit that stopped learning (a dead ReLU) decays geometrically
 * into the subnormal range and stays there at the smallest subnormal (0.9 x that rounds back to
 * it), and every arithmetic instruction on a subnormal takes a microcode assist: the main job's
 * optimizer step became ~6x slower after ~800 steps, the whole step ~2x (bench_train). The same
 * default as TensorFlow's and oneDNN's CPU kernels; PyTorch's torch.set_flush_denormal(True).
 * Results stay bitwise reproducible run to run; they may differ from the interpreter (which
 * keeps IEEE semantics) only where a value is subnormal. The mode is set around each routine
 * run and the thread's previous mode restored after it (devices/host). */
bool troupe_config_flush_denormals(void);
void troupe_config_set_flush_denormals(bool on);
/* Whether ranks that share a node reduce through shared memory (transport/mpi/collective.h,
 * Algorithms); read when the cluster starts. */
bool troupe_config_coll_shm(void);
/* What the contractions generated CPU code recognises call (compiler/gemm.h,
 * devices/host/gemm_library.h): TROUPE_GEMM=library (the default) libxsmm's kernels where it has
 * them and OpenBLAS for the rest; openblas: OpenBLAS only; generated: troupe's own loops. The
 * library or loops choice is read when a routine's code is generated (code generated while a
 * library is in use has no loops of its own: compiler/cgen.h c_gemm_library_only) and again
 * when it is compiled and loaded (such code is then refused without the library); the libxsmm
 * choice when the library is first loaded. */
typedef enum troupe_gemm_mode {
    TROUPE_GEMM_MODE_LIBRARY = 0,
    TROUPE_GEMM_MODE_OPENBLAS,
    TROUPE_GEMM_MODE_GENERATED,
} troupe_gemm_mode_t;
troupe_gemm_mode_t troupe_config_gemm_mode(void);
/* Whether the cross-rank exchange may hand device memory to MPI as it is (parallel/dp.h,
 * CUDA-aware MPI): TROUPE_CUDA_AWARE=auto (the default: when Open MPI's
 * MPIX_Query_cuda_support() says so at troupe_cluster_init, troupe_cluster_cuda_aware), on
 * (assume it: for an MPI that supports it without saying so, and for tests), off (never: stage
 * through host memory). */
typedef enum troupe_cuda_aware {
    TROUPE_CUDA_AWARE_AUTO = 0,
    TROUPE_CUDA_AWARE_ON,
    TROUPE_CUDA_AWARE_OFF,
} troupe_cuda_aware_t;
troupe_cuda_aware_t troupe_config_cuda_aware(void);
const char *troupe_config_cuda_aware_name(troupe_cuda_aware_t mode); /* "auto", "on", "off" */
/* Whether data-parallel training overlaps each gradient bucket's cross-rank allreduce with the
 * rest of the backward pass (docs/parallel.md, Overlap; troupe_dp_config_t.overlap):
 * TROUPE_DP_OVERLAP=auto (the default: where it can pay, decided in troupe_dp_new), on
 * (whenever the gradient computation can be split), off (one gradient routine, one allreduce
 * after it). */
typedef enum troupe_dp_overlap {
    TROUPE_DP_OVERLAP_AUTO = 0,
    TROUPE_DP_OVERLAP_ON,
    TROUPE_DP_OVERLAP_OFF,
} troupe_dp_overlap_t;
troupe_dp_overlap_t troupe_config_dp_overlap(void);
/* Whether data-parallel training may fuse the optimizer step into the cross-rank allreduce
 * (docs/parallel.md, Fused update): TROUPE_DP_FUSED_UPDATE=auto (the default: where the exchange
 * allows it, decided in troupe_dp_new) or off (the optimizer routine after the allreduce, on
 * every rank). */
bool troupe_config_dp_fused_update(void);
/* TROUPE_CUDA_GRAPHS=off (default auto): the graph policy's starting mode, which
 * troupe_driver_set_graphs (devices/device.h) overrides. */
bool troupe_config_cuda_graphs_off(void);
/* TROUPE_CUDA_GATHER_GEMM=checked|tiles|library (default checked): how the cuda driver runs the
 * GEMM steps of a routine with gather indices, whose first kernel checks every index before
 * anything is written. checked: the host waits for that check (one round trip per launch,
 * bounded by TROUPE_TIMEOUT_S), then runs the products on cuBLASLt, or nothing more when an
 * index failed, so nothing of the routine is written; inside a CUDA graph capture, where it
 * cannot wait, as tiles. tiles: troupe's shared-memory tiles, which return at once after a
 * failed check (no wait). library: cuBLASLt without the wait, so a failed check leaves the
 * products' outputs written from stale inputs (the step still fails with the index error).
 * docs/cuda.md. */
typedef enum troupe_cuda_gather_gemm {
    TROUPE_CUDA_GATHER_GEMM_CHECKED = 0,
    TROUPE_CUDA_GATHER_GEMM_TILES,
    TROUPE_CUDA_GATHER_GEMM_LIBRARY,
} troupe_cuda_gather_gemm_t;
troupe_cuda_gather_gemm_t troupe_config_cuda_gather_gemm(void);
const char *troupe_config_dp_overlap_name(troupe_dp_overlap_t mode); /* "auto", "on", "off" */
/* mode != TROUPE_GEMM_MODE_GENERATED. */
bool troupe_config_gemm_library(void);
/* "library", "openblas" or "generated". */
const char *troupe_config_gemm_mode_name(troupe_gemm_mode_t mode);

/* The control plane's status endpoint (transport/zmq/status_impl.h), read when the cluster
 * starts: "ipc" (the default: a socket in a private directory), "off" (no status actor), or
 * "tcp:<interface>" (TCP on that interface's IPv4 address, CURVE-encrypted with a key pair per
 * job; refused when ZeroMQ lacks CURVE). */
const char *troupe_config_status(void);
/* The job id naming the job's status directory; "" (the default) means the launcher's id
 * (Open MPI, PMIx, Slurm), else the process id. */
const char *troupe_config_job_id(void);

/* TROUPE_CPU_DEVICES: how many devices the host backends ("cpu", "sync") expose, 1 (the
 * default) to TROUPE_CONFIG_MAX_CPU_DEVICES; read when such a backend opens. Each device has its
 * own memory pools and streams; on "cpu" the cores of the process's affinity are split among
 * them for suggested_num_streams (device d gets cores / N, plus one for d < cores % N, at least
 * 1). A real use: one device per NUMA node or core group, so that data-parallel training
 * (parallel/dp.h) merges within a group first; a test use: the devices dimension of parallel/
 * without a GPU. Setter: INVALID_ARGUMENT outside 1..TROUPE_CONFIG_MAX_CPU_DEVICES. */
#define TROUPE_CONFIG_MAX_CPU_DEVICES 64
int troupe_config_cpu_devices(void);
TROUPE_MUST_USE troupe_status_t troupe_config_set_cpu_devices(int n);

/* TROUPE_DEVICE: the device ordinals this process uses (parallel/dp.h, troupe_dp_pick_devices),
 * overriding the node-local rank's share: one ordinal ("1") or a comma-separated list ("0,2"),
 * at most TROUPE_CONFIG_MAX_DEVICE_LIST distinct non-negative ordinals. "" (unset) means the
 * local rank's share. Whether the ordinals exist is checked against the backend when they are
 * used. Getter: the text as given ("" when unset; borrowed, valid until the setter runs again).
 * Setter: NULL or "" clears; INVALID_ARGUMENT naming the bad part (not a number, negative, a
 * repeated ordinal, too many). */
#define TROUPE_CONFIG_MAX_DEVICE_LIST 64
const char *troupe_config_device(void);
TROUPE_MUST_USE troupe_status_t troupe_config_set_device(const char *spec);
/* Parses a TROUPE_DEVICE text into out[0..*out_n) (cap entries at most, in the given order):
 * INVALID_ARGUMENT as troupe_config_set_device, naming the text. "" gives *out_n = 0. */
TROUPE_MUST_USE troupe_status_t troupe_config_parse_device_list(const char *spec, int *out,
                                                                int cap, int *out_n);

/* Setters return TROUPE_INVALID_ARGUMENT for NULL/empty strings, non-positive timeouts
 * or fusion sizes below 1 KiB; TROUPE_RESOURCE_EXHAUSTED if a copy cannot be allocated. */
TROUPE_MUST_USE troupe_status_t troupe_config_set_backend(const char *name);
TROUPE_MUST_USE troupe_status_t troupe_config_set_cache_dir(const char *dir);
TROUPE_MUST_USE troupe_status_t troupe_config_set_cc(const char *command);
TROUPE_MUST_USE troupe_status_t troupe_config_set_cc_flags(const char *flags);
TROUPE_MUST_USE troupe_status_t troupe_config_set_timeout_s(int64_t seconds);
TROUPE_MUST_USE troupe_status_t troupe_config_set_fusion_bytes(size_t size_bytes);
/* INVALID_ARGUMENT for 0. */
TROUPE_MUST_USE troupe_status_t troupe_config_set_dp_bucket_bytes(size_t size_bytes);
void troupe_config_set_auto_host_transfers(bool on);
void troupe_config_set_coll_shm(bool on);
/* An unknown mode is ignored. */
void troupe_config_set_gemm_mode(troupe_gemm_mode_t mode);
/* An out-of-range mode is ignored. */
void troupe_config_set_cuda_aware(troupe_cuda_aware_t mode);
/* An out-of-range mode is ignored. */
void troupe_config_set_dp_overlap(troupe_dp_overlap_t mode);
/* false: TROUPE_DP_FUSED_UPDATE=off; true: auto. */
void troupe_config_set_dp_fused_update(bool on);
/* on: TROUPE_GEMM_MODE_LIBRARY; off: TROUPE_GEMM_MODE_GENERATED. */
void troupe_config_set_gemm_library(bool on);
TROUPE_MUST_USE troupe_status_t troupe_config_set_stack_threshold_bytes(size_t size_bytes);
/* true: TROUPE_LOOP_FUSION=all; false: same-space. */
void troupe_config_set_loop_fusion_outer(bool on);
/* true: TROUPE_ITERATION_SCALARS=on; false: off. */
void troupe_config_set_iteration_scalars(bool on);
/* TROUPE_HOST_MEMORY_AUTO, TROUPE_HOST_MEMORY_OFF or a byte count >= 0 (INVALID_ARGUMENT
 * otherwise). */
TROUPE_MUST_USE troupe_status_t troupe_config_set_host_memory(int64_t bytes);
/* "ipc", "off" or "tcp:<interface>" (INVALID_ARGUMENT otherwise). */
TROUPE_MUST_USE troupe_status_t troupe_config_set_status(const char *mode);
/* Any text of at most 63 bytes; "" returns to the launcher's id. */
TROUPE_MUST_USE troupe_status_t troupe_config_set_job_id(const char *id);

/* Fault injection (README "Fault injection"; the language is in base/fault_impl.h): `spec` is
 * what TROUPE_FAULT holds, e.g. "kill:rank=1:collective=3" or "alloc:nth=2,ckpt:half"; NULL or
 * "" disarms every fault. It replaces the faults armed before and restarts their counts. For
 * program start, before any work. INVALID_ARGUMENT naming the bad part (nothing is armed then,
 * and troupe_backend_open and troupe_cluster_init refuse to start until a good one is set). */
TROUPE_MUST_USE troupe_status_t troupe_config_set_fault(const char *spec);
/* The faults armed ("" when none): borrowed, valid until the next troupe_config_set_fault. */
const char *troupe_config_fault(void);
/* TROUPE_TRACE: the prefix of the trace files (base/trace.h: PREFIX.<rank>.json), "" when
 * tracing is off. */
const char *troupe_config_trace_prefix(void);
/* Turns tracing on with files PREFIX.<rank>.json (NULL or "": off). INVALID_ARGUMENT for a
 * prefix longer than 1000 bytes. */
TROUPE_MUST_USE troupe_status_t troupe_config_set_trace_prefix(const char *prefix);

/* The restart contract of `troupe run` (README "Failures and restarts"). TROUPE_RESUME: the
 * checkpoint a relaunched job resumes from ("" on a first launch, or when no checkpoint was
 * committed yet); a program that checkpoints reads it as its default resume path.
 * TROUPE_PROGRESS_FILE: where rank 0 of a data-parallel run (parallel/dp.h) keeps the count
 * of steps it has scheduled, so that troupe run can say how much work a failure lost ("" : not
 * kept). Getters: "" when unset (borrowed, valid until the matching setter). Setters: NULL or
 * "" clears; INVALID_ARGUMENT for a path of S_STR_MAX (1024) bytes or more. */
const char *troupe_config_resume(void);
const char *troupe_config_progress_file(void);
TROUPE_MUST_USE troupe_status_t troupe_config_set_resume(const char *path);
TROUPE_MUST_USE troupe_status_t troupe_config_set_progress_file(const char *path);

#ifdef __cplusplus
}
#endif
#endif
