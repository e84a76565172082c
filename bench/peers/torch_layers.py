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
  gelu          x (1024, 1536), tanh approximation
  layernorm     x (8, 128, 384), eps 1e-5
  softmax       x (6144, 128)                                   the attention scores' shape
  attention     x (8, 128, 384), 6 heads, causal, fused QKV + output projection
  embedding     ids (8, 128) into a (256, 384) table
  softmax-xent  logits (1024, 256), integer targets (troupe: one-hot)
  xent-targets  logits (8, 128, 256), integer targets (8, 128)
  conv1-1x32    x (128, 1, 28, 28) -> Conv2d(1, 32, 3), x needs no gradient
  conv2-32x32   x (128, 32, 26, 26) -> Conv2d(32, 32, 3)
  conv3-32x64   x (128, 32, 12, 12) -> Conv2d(32, 64, 3)
  maxpool       x (128, 32, 24, 24) -> max_pool2d(2)
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

    def gelu():
        x = rnd(1024, 1536)
        return (lambda: nn.functional.gelu(x, approximate="tanh")), (1024, 1536)

    def layernorm():
        layer = nn.LayerNorm(384, eps=1e-5)
        x = rnd(8, 128, 384)
        return (lambda: layer(x)), (8, 128, 384)

    def softmax():
        x = rnd(8 * 6 * 128, 128)
        return (lambda: torch.softmax(x, -1)), (8 * 6 * 128, 128)

    def attention():
        B, T, C, NH = 8, 128, 384, 6
        qkv, proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        x = rnd(B, T, C)
        mask = torch.tril(torch.ones(T, T)).view(1, 1, T, T)

        def f():  # GPT-2's attention as llm.c's PyTorch reference writes it
            q, k, v = qkv(x).split(C, dim=2)
            q = q.view(B, T, NH, C // NH).transpose(1, 2)
            k = k.view(B, T, NH, C // NH).transpose(1, 2)
            v = v.view(B, T, NH, C // NH).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / (C // NH) ** 0.5)
            att = torch.softmax(att.masked_fill(mask == 0, float("-inf")), dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return proj(y)
        return f, (B, T, C)

    def embedding():
        wte = nn.Embedding(256, 384)
        ids = torch.randint(0, 256, (8, 128), generator=g)
        return (lambda: wte(ids)), (8, 128, 384)

    def xent_targets():
        z = rnd(8, 128, 256)
        t = torch.randint(0, 256, (8, 128), generator=g)
        return (lambda: nn.functional.cross_entropy(z.view(-1, 256), t.view(-1)).reshape(1)), (1,)

    def conv(cin, cout, hw, dx):
        layer = nn.Conv2d(cin, cout, 3)
        x = torch.rand(128, cin, hw, hw, generator=g) * 2 - 1
        x.requires_grad_(dx)
        return (lambda: layer(x)), (128, cout, hw - 2, hw - 2)

    def maxpool():
        x = rnd(128, 32, 24, 24)
        return (lambda: nn.functional.max_pool2d(x, 2)), (128, 32, 12, 12)

    return {
        "linear-fc": lambda: linear(1024, 384, 1536),
        "linear-proj": lambda: linear(1024, 1536, 384),
        "relu": lambda: relu(1024, 1536),
        "gelu": gelu,
        "layernorm": layernorm,
        "softmax": softmax,
        "attention": attention,
        "embedding": embedding,
        "softmax-xent": lambda: xent(1024, 256),
        "xent-targets": xent_targets,
        "conv1-1x32": lambda: conv(1, 32, 28, False),
        "conv2-32x32": lambda: conv(32, 32, 26, True),
        "conv3-32x64": lambda: conv(32, 64, 12, True),
        "maxpool": maxpool,
        "mlp-fmnist": mlp,
    }, g


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--cases", default="all")
    args = ap.parse_args()
    torch = torch_mlp._import_torch()
    torch.set_num_threads(1)
    torch_mlp._print_identity(torch)
    cases, g = _cases(torch)
    names = list(cases) if args.cases == "all" else args.cases.split(",")
    for name in names:
        if name not in cases:
            print("torch_layers: unknown case %s" % name, file=sys.stderr)
            return 1
        fwd, shape = cases[name]()
        r = torch.rand(*shape, generator=g)
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
