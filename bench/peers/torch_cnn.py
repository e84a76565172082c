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

Modes (--mode):
  accuracy  trains --epochs passes over the Fashion-MNIST IDX files in --data with --threads
            threads and prints one line per epoch, then the last line
              torch_cnn accuracy epochs=<n> test_accuracy=<0..1> seconds=<training s>
              threads=<n> torch=<version>
  1thread   bench_train --model cnn's peer: one thread, synthetic data (5120 rows, as
  ddp       bench/peers/torch_mlp.py's), warm-up then timed runs of --steps steps; ddp: two
            processes on loopback (gloo, DistributedDataParallel), one thread and half the
            global minibatch each. The output is torch_mlp.py's (its `library` identity line,
            then `torch_peer mode=...`), made by its functions.
  gpu       one process on CUDA device 0 (issue 32's GPU target, batch 1024): the data on the
            device, cuDNN with its autotuner (cudnn.benchmark) and TF32 off (matmul and cuDNN),
            as torch_mlp.py's gpu mode otherwise (each timed run between two synchronizes).
Run with /usr/bin/python3 (Debian's torch 1.13); gpu with a CUDA build of torch. Exit status 0; 3 when torch cannot be
imported (one line `torch_peer absent reason="..."`); 1 on another failure.
"""

import argparse
import gzip
import math
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mlp as peer  # noqa: E402  the timing machinery bench_train parses

LR, MOMENTUM = peer.LR, peer.MOMENTUM


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


def _synthetic(torch, rows):
    x, y = peer._data(torch, rows)  # torch_mlp.py's pixels and labels, as (1, 28, 28) images
    return x.reshape(rows, 1, 28, 28), y


def _run_1thread(args):
    torch = _import_torch(1)
    peer._print_identity(torch)
    x, y = _synthetic(torch, peer.ROWS)
    B = args.batch
    batches = [(x[i:i + B].contiguous(), y[i:i + B].contiguous())
               for i in range(0, peer.ROWS - B + 1, B)]
    peer._report("1thread", 1, args, peer._train(torch, _model(torch, args.seed), batches, args))


def _run_gpu(args):
    torch = _import_torch(1)
    torch.backends.cudnn.benchmark = True  # cuDNN's autotuner: its best algorithms
    dev = peer._gpu_device(torch, cudnn=True)
    B = args.batch
    rows = max(peer.ROWS, 4 * B)
    x, y = _synthetic(torch, rows)
    x, y = x.to(dev), y.to(dev)
    batches = [(x[i:i + B].contiguous(), y[i:i + B].contiguous())
               for i in range(0, rows - B + 1, B)]
    model = _model(torch, args.seed).to(dev)
    peer._report("gpu", 1, args, peer._train(torch, model, batches, args,
                                             sync=torch.cuda.synchronize))


def _ddp_rank(rank, world, port, args):
    torch = _import_torch(1)
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    try:
        x, y = _synthetic(torch, peer.ROWS)
        B = args.batch
        b = B // world
        batches = [(x[i + rank * b:i + (rank + 1) * b].contiguous(),
                    y[i + rank * b:i + (rank + 1) * b].contiguous())
                   for i in range(0, peer.ROWS - B + 1, B)]
        model = DistributedDataParallel(_model(torch, args.seed))
        per_step = peer._train(torch, model, batches, args, barrier=dist.barrier)
        t = torch.tensor(per_step, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slower rank's time is the step time
        if rank == 0:
            peer._report("ddp", world, args, t.tolist())
    finally:
        dist.destroy_process_group()


def _run_ddp(args):
    _import_torch(1)
    import socket
    import torch.multiprocessing as mp
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_rank, args=(args.ranks, port, args), nprocs=args.ranks, join=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["accuracy", "1thread", "ddp", "gpu"], default="accuracy")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=128, help="global minibatch")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1, help="accuracy mode's threads")
    p.add_argument("--ranks", type=int, default=2, help="processes in ddp mode")
    p.add_argument("--steps", type=int, default=40, help="steps per timed run")
    p.add_argument("--runs", type=int, default=7, help="timed runs")
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--grad-accum", type=int, default=1,
                   help="micro-steps per step: the gradient summed over K backward passes")
    p.add_argument("--optimizer", choices=["sgd"], default="sgd")
    args = p.parse_args()
    if args.batch < 2 or args.batch % (args.ranks if args.mode == "ddp" else 1) or \
            args.steps < 1 or args.runs < 1 or args.epochs < 1:
        p.error("bad sizes")
    {"accuracy": _run_accuracy, "1thread": _run_1thread, "ddp": _run_ddp,
     "gpu": _run_gpu}[args.mode](args)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as e:  # one line, exit status 1
        print("torch_cnn: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)
