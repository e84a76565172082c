#!/usr/bin/env python3
"""troupe — the PyTorch peer of `fmnist --model cnn` (examples/fmnist, issue 32): the same
convnet trained by PyTorch on the CPU, for its test accuracy beside troupe's, and for its step
time (bench_train's output format).

The model, NCHW as examples/fmnist/mlp.h's convnet: conv3x3(1->32) ReLU, conv3x3(32->32) ReLU,
maxpool 2, conv3x3(32->64) ReLU, maxpool 2, flatten (c, h, w), linear(64*5*5 -> 128) ReLU,
linear(128 -> 10); stride 1, no padding. Initialisation as the trainer's: Kaiming normal
(std gain/sqrt(fan_in), gain sqrt(2) before a ReLU, 1 for the last layer), biases 0, from
torch.manual_seed(seed) (another generator than troupe's Threefry: the same distribution, not
the same values). Mean softmax cross-entropy; the trainer's default optimizer: SGD with
momentum 0.9 (dampening 0, no Nesterov, no weight decay) at lr 0.05, the learning rate
following a cosine from 0.05 down to 0 over the run, set before every step (the trainer's
--schedule cosine); single precision; global minibatch 128, the training set shuffled once
with the seed and the tail that fills no whole step left out, as the trainer does (its
shuffle is its own: another order).

Modes:
  accuracy  trains --epochs passes over the Fashion-MNIST IDX files in --data with --threads
            threads and prints one line per epoch, then the last line
              torch_cnn accuracy epochs=<n> test_accuracy=<0..1> seconds=<training s>
              threads=<n> torch=<version>
  1thread   one thread, synthetic data (5120 rows), warm-up then timed runs of --steps steps:
              torch_peer mode=1thread ranks=1 threads_per_rank=1 global_batch=<n> steps=<n>
                  runs=<n> median_step_us=<us> min_step_us=<us> max_step_us=<us>
                  samples_per_s=<n>
            (bench/peers/torch_mlp.py's line; its library identity line is not repeated here)
Run with /usr/bin/python3 (Debian's torch 1.13). Exit status 0; 3 when torch cannot be
imported (one line `torch_peer absent reason="..."`); 1 on another failure.
"""

import argparse
import gzip
import math
import os
import struct
import sys
import time

LR, MOMENTUM = 0.05, 0.9


def _import_torch(threads):
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[v] = str(threads)
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        print('torch_peer absent reason="%s: %s"' % (type(e).__name__, str(e).replace('"', "'")))
        sys.stdout.flush()
        sys.exit(3)
    torch = sys.modules["torch"]
    torch.set_num_threads(threads)
    return torch


def _model(torch, seed):
    nn = torch.nn
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 32, 3), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(64 * 5 * 5, 128), nn.ReLU(), nn.Linear(128, 10))
    layers = [l for l in m if isinstance(l, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        for i, l in enumerate(layers):
            fan_in = l.weight[0].numel()
            gain = 1.0 if i == len(layers) - 1 else math.sqrt(2.0)
            l.weight.normal_(0.0, gain / math.sqrt(fan_in))
            l.bias.zero_()
    return m


def _idx(torch, path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        t = torch.frombuffer(bytearray(data[16:]), dtype=torch.uint8)
        return t.reshape(n, 1, rows, cols).to(torch.float32).div_(255.0)
    if magic == 2049:
        return torch.frombuffer(bytearray(data[8:]), dtype=torch.uint8).to(torch.int64)
    raise RuntimeError("%s: not an IDX image or label file (magic %d)" % (path, magic))


def _accuracy(torch, model, x, y):
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            right += int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum())
    model.train()
    return right / len(x)


def _run_accuracy(args):
    torch = _import_torch(args.threads)
    F = torch.nn.functional
    d = args.data
    xtr = _idx(torch, os.path.join(d, "train-images-idx3-ubyte.gz"))
    ytr = _idx(torch, os.path.join(d, "train-labels-idx1-ubyte.gz"))
    xte = _idx(torch, os.path.join(d, "t10k-images-idx3-ubyte.gz"))
    yte = _idx(torch, os.path.join(d, "t10k-labels-idx1-ubyte.gz"))
    model = _model(torch, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    g = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(xtr), generator=g)
    xtr, ytr = xtr[order], ytr[order]
    B = args.batch
    steps = len(xtr) // B
    total = steps * args.epochs
    seconds, acc = 0.0, 0.0
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        loss_sum = 0.0
        for s in range(steps):
            t = (epoch * steps + s) / total
            for grp in opt.param_groups:
                grp["lr"] = max(LR * 0.5 * (1.0 + math.cos(math.pi * t)), 1e-12)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xtr[s * B:(s + 1) * B]), ytr[s * B:(s + 1) * B])
            loss.backward()
            opt.step()
            loss_sum += float(loss)
        dt = time.perf_counter() - t0
        seconds += dt
        acc = _accuracy(torch, model, xte, yte)
        print("epoch %d/%d  samples/s %.0f  loss %.4f  test_accuracy %.4f  (%.1f s)"
              % (epoch + 1, args.epochs, steps * B / dt, loss_sum / steps, acc, dt))
        sys.stdout.flush()
    print("torch_cnn accuracy epochs=%d test_accuracy=%.4f seconds=%.1f threads=%d torch=%s"
          % (args.epochs, acc, seconds, args.threads, torch.__version__))


def _run_1thread(args):
    torch = _import_torch(1)
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0x9E3779B9)
    rows = 5120
    x = torch.randint(0, 256, (rows, 1, 28, 28), generator=g, dtype=torch.uint8)
    x = x.to(torch.float32).div_(255.0)
    y = torch.randint(0, 10, (rows,), generator=g, dtype=torch.int64)
    B = args.batch
    batches = [(x[i:i + B].contiguous(), y[i:i + B]) for i in range(0, rows - B + 1, B)]
    model = _model(torch, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    i = 0

    def step():
        nonlocal i
        xb, yb = batches[i % len(batches)]
        i += 1
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()

    for _ in range(args.warmup_steps):
        step()
    per_step = []
    for _ in range(args.runs):
        t0 = time.perf_counter_ns()
        for _ in range(args.steps):
            step()
        per_step.append((time.perf_counter_ns() - t0) / 1e3 / args.steps)
    s = sorted(per_step)
    med = s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])
    print("torch_peer mode=1thread ranks=1 threads_per_rank=1 global_batch=%d steps=%d runs=%d "
          "median_step_us=%.3f min_step_us=%.3f max_step_us=%.3f samples_per_s=%.0f"
          % (B, args.steps, args.runs, med, s[0], s[-1], B / med * 1e6))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["accuracy", "1thread"])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup-steps", type=int, default=3)
    args = p.parse_args()
    if args.mode == "accuracy":
        _run_accuracy(args)
    else:
        _run_1thread(args)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as e:  # one line, exit status 1
        print("torch_cnn: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)
