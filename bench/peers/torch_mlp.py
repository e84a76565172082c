#!/usr/bin/env python3
"""troupe — the PyTorch peer of bench_train (bench/train.c): the main job's model trained by
PyTorch on the CPU, timed per step.

The same job as examples/fmnist: the MLP 784-256-128-10 (Linear, ReLU, Linear, ReLU, Linear),
mean softmax cross-entropy on the logits, SGD with momentum 0.9 (dampening 0, no Nesterov, no
weight decay; troupe's dp.h rule) at lr 0.05, or with --optimizer adamw torch.optim.AdamW at its
defaults (lr 1e-3, betas 0.9 and 0.999, eps 1e-8, weight decay 0.01: troupe's
troupe_optimizer_default(TROUPE_OPT_ADAMW)), single precision, global minibatch 128, on a
synthetic data set of 5120 rows (deterministic pseudo-random pixels scaled by 1/255 and labels;
throughput does not depend on the values). The minibatches are cut before timing: a step is
forward, loss, backward and the optimizer update only, as in bench_train.

Modes:
  1thread  one process, torch.set_num_threads(1)
  ddp      two processes on loopback (torch.distributed, gloo backend,
           DistributedDataParallel), one thread each, 64 samples per rank (global 128)
  gpu      one process on CUDA device 0 (bench_train --backend cuda's peer, issue 16): TF32 off
           (torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 False, as troupe's
           CUBLAS_COMPUTE_32F), the data set and every minibatch on the device before timing,
           each timed run between two torch.cuda.synchronize(); at least 4 minibatches of rows

BLAS threads are pinned to one (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS) before torch loads: a
pthread OpenBLAS would otherwise use every core for one sgemm. OPENBLAS_CORETYPE is inherited
(deploy/bench.sh sets it when OpenBLAS does not recognise the CPU, see bench/openblas_peer.h).

Output (stdout), parseable:
  library name=torch version="<torch.__version__>" blas="<openblas_get_config()>" core=<core>
      blas_threads=<n> path=<libopenblas loaded> at_best=<yes|no>     (1thread mode only)
  torch_peer mode=<mode> ranks=<n> threads_per_rank=1 global_batch=<n> steps=<steps per run>
      runs=<n> median_step_us=<us> min_step_us=<us> max_step_us=<us> samples_per_s=<n>
Exit status: 0; 3 when torch cannot be imported (one line `torch_peer absent reason="..."`);
1 on another failure.
"""

import argparse
import contextlib
import os
import socket
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

IN, H1, H2, OUT = 784, 256, 128, 10
ROWS = 5120
LR, MOMENTUM = 0.05, 0.9


def _import_torch():
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        print('torch_peer absent reason="%s: %s"' % (type(e).__name__, str(e).replace('"', "'")))
        sys.stdout.flush()
        sys.exit(3)
    return sys.modules["torch"]


def _cpu_core():
    """The strongest OpenBLAS core this CPU's flags allow (bench/openblas_peer.c's rule)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    except OSError:
        return None
    if "avx512_bf16" in flags:
        return "Cooperlake"
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags and "fma" in flags:
        return "Haswell"
    if "avx" in flags:
        return "Sandybridge"
    return None


_RANK = {"Sandybridge": 1, "Haswell": 2, "Zen": 2, "SkylakeX": 3, "Cooperlake": 4,
         "SapphireRapids": 5}


def _blas_identity():
    """The OpenBLAS torch loaded: (config, core, threads, path), or None."""
    import ctypes
    path = None
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if "libopenblas" in os.path.basename(p):
                    path = p
                    break
    except OSError:
        return None
    if not path:
        return None
    lib = ctypes.CDLL(path)
    lib.openblas_get_config.restype = ctypes.c_char_p
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return (lib.openblas_get_config().decode(), lib.openblas_get_corename().decode(),
            lib.openblas_get_num_threads(), path)


def _print_identity(torch):
    ident = _blas_identity()
    if ident is None:
        print('library name=torch version="%s" blas=not-openblas' % torch.__version__)
        return
    config, core, threads, path = ident
    want = _cpu_core()
    at_best = not want or _RANK.get(core, 0) >= _RANK[want]
    print('library name=torch version="%s" blas="%s" core=%s blas_threads=%d path=%s at_best=%s'
          % (torch.__version__, config, core, threads, path, "yes" if at_best else "no"))
    if not at_best:
        print("torch_mlp: warning: the torch peer's OpenBLAS runs core %s, this CPU takes %s "
              "(set OPENBLAS_CORETYPE=%s; deploy/bench.sh does)" % (core, want, want),
              file=sys.stderr)


def _data(torch, rows):
    """Synthetic pixels (xorshift, as bench_train's) and labels, as float32 / int64 tensors."""
    g = torch.Generator().manual_seed(0x9E3779B9)
    pixels = torch.randint(0, 256, (rows, IN), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, OUT, (rows,), generator=g, dtype=torch.int64)
    return pixels.to(torch.float32).div_(255.0), labels


def _model(torch):
    nn = torch.nn
    torch.manual_seed(42)
    return nn.Sequential(nn.Linear(IN, H1), nn.ReLU(), nn.Linear(H1, H2), nn.ReLU(),
                         nn.Linear(H2, OUT))


def _train(torch, model, batches, args, barrier=None, sync=None):
    """Warm-up steps, then `runs` timed runs of `steps` steps; per-step times in us."""
    F = torch.nn.functional
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters())
    else:
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    n = len(batches)
    i = 0

    def step():
        nonlocal i
        x, y = batches[i % n]
        i += 1
        opt.zero_grad(set_to_none=True)
        k = getattr(args, "grad_accum", 1)
        if k == 1:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
        else:  # the batch's mean loss as the sum of K micro-batches' means over K
            loss = 0.0
            for j, (xs, ys) in enumerate(zip(x.chunk(k), y.chunk(k))):
                # DDP: allreduce once, in the last micro-step's backward
                quiet = model.no_sync() if j < k - 1 and hasattr(model, "no_sync") \
                    else contextlib.nullcontext()
                with quiet:
                    part = F.cross_entropy(model(xs), ys) / k
                    part.backward()
                loss = loss + part.detach()
        opt.step()
        return loss

    for _ in range(args.warmup_steps):
        step()
    per_step = []
    for _ in range(args.runs):
        if barrier:
            barrier()
        if sync:
            sync()
        t0 = time.perf_counter_ns()
        for _ in range(args.steps):
            loss = step()
        if sync:
            sync()
        per_step.append((time.perf_counter_ns() - t0) / 1e3 / args.steps)
    if not torch.isfinite(loss.detach()):
        raise RuntimeError("the loss is %s after training" % float(loss))
    return per_step


def _report(mode, ranks, args, per_step):
    s = sorted(per_step)
    med = s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])
    print("torch_peer mode=%s ranks=%d threads_per_rank=1 global_batch=%d steps=%d runs=%d "
          "median_step_us=%.3f min_step_us=%.3f max_step_us=%.3f samples_per_s=%.0f"
          % (mode, ranks, args.batch, args.steps, args.runs, med, s[0], s[-1],
             args.batch / med * 1e6))
    sys.stdout.flush()


def _one_thread(args):
    torch = _import_torch()
    torch.set_num_threads(1)
    _print_identity(torch)
    x, y = _data(torch, ROWS)
    B = args.batch
    batches = [(x[i:i + B].contiguous(), y[i:i + B].contiguous())
               for i in range(0, ROWS - B + 1, B)]
    _report("1thread", 1, args, _train(torch, _model(torch), batches, args))


def _gpu_device(torch, cudnn=False):
    """CUDA device 0 with TF32 off (matmul and cuDNN, as troupe's fp32), its identity printed
    (with cuDNN's version when cudnn); exit status 3 with one line when torch sees no device."""
    if not torch.cuda.is_available():
        print('torch_peer absent reason="torch %s sees no CUDA device"' % torch.__version__)
        sys.stdout.flush()
        sys.exit(3)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0)
    print('library name=torch version="%s" device="%s" cuda=%s%s tf32=off'
          % (torch.__version__, torch.cuda.get_device_name(dev), torch.version.cuda,
             " cudnn=%s" % torch.backends.cudnn.version() if cudnn else ""))
    return dev


def _gpu(args):
    torch = _import_torch()
    dev = _gpu_device(torch)
    B = args.batch
    rows = max(ROWS, 4 * B)
    x, y = _data(torch, rows)
    x, y = x.to(dev), y.to(dev)
    batches = [(x[i:i + B].contiguous(), y[i:i + B].contiguous())
               for i in range(0, rows - B + 1, B)]
    model = _model(torch).to(dev)
    _report("gpu", 1, args, _train(torch, model, batches, args, sync=torch.cuda.synchronize))


def _ddp_rank(rank, world, port, args):
    torch = _import_torch()
    torch.set_num_threads(1)
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    try:
        x, y = _data(torch, ROWS)
        B = args.batch
        b = B // world
        # each rank takes its slice of every global minibatch
        batches = [(x[i + rank * b:i + (rank + 1) * b].contiguous(),
                    y[i + rank * b:i + (rank + 1) * b].contiguous())
                   for i in range(0, ROWS - B + 1, B)]
        model = DistributedDataParallel(_model(torch))
        per_step = _train(torch, model, batches, args, barrier=dist.barrier)
        # the slower rank's time is the step time
        t = torch.tensor(per_step, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            _report("ddp", world, args, t.tolist())
    finally:
        dist.destroy_process_group()


def _ddp(args):
    torch = _import_torch()
    import torch.multiprocessing as mp
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_rank, args=(args.ranks, port, args), nprocs=args.ranks, join=True)
    del torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("1thread", "ddp", "gpu"), default="1thread")
    ap.add_argument("--batch", type=int, default=128, help="global minibatch")
    ap.add_argument("--ranks", type=int, default=2, help="processes in ddp mode")
    ap.add_argument("--steps", type=int, default=40, help="steps per timed run")
    ap.add_argument("--runs", type=int, default=7, help="timed runs")
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--grad-accum", type=int, default=1,
                   help="micro-steps per step: the gradient summed over K backward passes")
    ap.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    args = ap.parse_args()
    if args.batch % (args.ranks if args.mode == "ddp" else 1) or args.batch < 2 or \
            args.steps < 1 or args.runs < 1 or (args.batch > ROWS and args.mode != "gpu"):
        ap.error("bad sizes")
    try:
        {"1thread": _one_thread, "ddp": _ddp, "gpu": _gpu}[args.mode](args)
    except SystemExit:
        raise
    except Exception as e:
        print("torch_mlp: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
