#!/usr/bin/env python3
"""troupe — the PyTorch peer of bench_layers (bench/layers.c): each layer's forward and backward
pass timed by PyTorch on the CPU with one thread, on the shapes bench_layers uses.

A timed run is: the layer's forward on fixed inputs (the input and every weight require
gradients), loss = sum(y * r) with a fixed random r, and loss.backward(). Gradients are reset to
None before each run (no accumulation cost). Single precision.

Cases (names and shapes shared with bench/layers.c):
  linear-fc     x (1024, 384)  -> Linear(384, 1536)             GPT small: B*T = 8*128, C = 384
  linear-proj   x (1024, 1536) -> Linear(1536, 384)
  relu          x (1024, 1536)
  softmax-xent  logits (1024, 256), integer targets as one-hot    the byte vocabulary
  mlp-fmnist    784-256-128-10 with ReLUs, batch 128             the main job's forward+backward

Output (stdout): the library line of torch_mlp.py, then one line per case:
  torch_layer case=<name> runs=<n> median_us=<us> min_us=<us>
Exit status 0; 3 when torch cannot be imported; 1 on another failure.
"""

import argparse
import os
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mlp  # noqa: E402  (the identity line and the import guard)


def _cases(torch):
    nn = torch.nn
    g = torch.Generator().manual_seed(7)

    def rnd(*shape):
        return (torch.rand(*shape, generator=g) * 2 - 1).requires_grad_(True)

    def linear(n, cin, cout):
        layer = nn.Linear(cin, cout)
        x = rnd(n, cin)
        return (lambda: layer(x)), (n, cout)

    def relu(n, c):
        x = rnd(n, c)
        return (lambda: torch.relu(x)), (n, c)

    def xent(n, v):
        z = rnd(n, v)
        t = torch.randint(0, v, (n,), generator=g)
        return (lambda: nn.functional.cross_entropy(z, t).reshape(1)), (1,)

    def mlp():
        m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 10))
        x = rnd(128, 784)
        t = torch.randint(0, 10, (128,), generator=g)
        return (lambda: nn.functional.cross_entropy(m(x), t).reshape(1)), (1,)

    return {
        "linear-fc": lambda: linear(1024, 384, 1536),
        "linear-proj": lambda: linear(1024, 1536, 384),
        "relu": lambda: relu(1024, 1536),
        "softmax-xent": lambda: xent(1024, 256),
        "mlp-fmnist": mlp,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--cases", default="all")
    args = ap.parse_args()
    torch = torch_mlp._import_torch()
    torch.set_num_threads(1)
    torch_mlp._print_identity(torch)
    cases = _cases(torch)
    names = list(cases) if args.cases == "all" else args.cases.split(",")
    for name in names:
        if name not in cases:
            print("torch_layers: unknown case %s" % name, file=sys.stderr)
            return 1
        fwd, shape = cases[name]()
        r = torch.rand(*shape)
        times = []
        for i in range(args.runs + 2):
            t0 = time.perf_counter()
            y = fwd()
            (y * r).sum().backward()
            t1 = time.perf_counter()
            if i >= 2:  # two warm-up runs
                times.append((t1 - t0) * 1e6)
        times.sort()
        print("torch_layer case=%s runs=%d median_us=%.1f min_us=%.1f"
              % (name, len(times), times[len(times) // 2], times[0]))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
