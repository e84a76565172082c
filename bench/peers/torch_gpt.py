#!/usr/bin/python3
"""The PyTorch peer of bench/gpt.c: GPT-2 as examples/gpt trains it, from the same llm.c model
file and token shard, the same batches (sequential: batch k holds the B sequences of T+1 tokens
starting at tokens kBT, kBT+T, ...) and the same AdamW, timed per step.

usage: torch_gpt.py --model FILE --data SHARD --batch B --seq T --steps N [--lr 1e-4]
                    [--weight-decay 0] [--threads 1] [--ranks R] [--device cpu|cuda]
                    [--warmup K]
Prints `step=K loss=X` per step, then
`peer=torch-<version>-<threads>thread peer_us=<mean us per step> tokens_per_s=<from it>`
(the mean over every step of the run, as `gpt train` reports its tokens/s). With --ranks R > 1:
DistributedDataParallel over gloo on loopback, R processes of --threads threads each, the batch
global as in `gpt train` (rank r takes sequences [rB/R, (r+1)B/R)); the loss printed is the mean
over the ranks, a step's time the slowest rank's, and the peer `torch-<version>-ddp-gloo-<R>x<threads>`.
--device cuda (issue 31's GPU target): the model on CUDA device 0 at PyTorch's best in eager mode,
F.scaled_dot_product_attention (is_causal) for attention and the fused AdamW, TF32 off
(torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 False, as troupe's fp32); each step
ends with loss.item(), which waits for the GPU; the peer is `torch-<version>-cuda`. --warmup K
steps run first and are not timed (the first steps pay cuBLAS's and the allocator's set-up).
Run with Debian's torch (/usr/bin/python3) on the CPU; with a CUDA build of torch for --device cuda. The model follows llm.c's train_gpt2.py (pre-LN
blocks, fused QKV, causal attention, GELU tanh, tied classifier over Vp; only the first V logits
count), written from the equations as bench/peers/torch_gpt_reference.py has it."""
import argparse
import math
import os
import statistics
import struct
import sys
import time


def _blas_threads():
    """--threads, read before torch loads: Debian's torch calls the system BLAS (OpenBLAS's
    pthread build, BLAS_INFO=generic), which torch.set_num_threads does not reach; it sizes its
    pool from these variables when it loads, else it takes every core (a second GEMM thread on a
    2-core machine: the '1 thread' peer then ran its products on two cores)."""
    n = "1"
    for i, v in enumerate(sys.argv[:-1]):
        if v == "--threads":
            n = sys.argv[i + 1]
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[v] = n


_blas_threads()
import torch  # noqa: E402  after the BLAS threads are pinned
import torch.nn.functional as F  # noqa: E402

ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def read_model(path):
    with open(path, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        if head[0] != 20240326 or head[1] != 3:
            sys.exit("%s: not an llm.c fp32 model file (magic %d, version %d)" % (path, head[0], head[1]))
        maxt, v, l, nh, c, vp = head[2:8]
        shapes = {"wte": (vp, c), "wpe": (maxt, c), "ln1w": (l, c), "ln1b": (l, c),
                  "qkvw": (l, 3 * c, c), "qkvb": (l, 3 * c), "attprojw": (l, c, c),
                  "attprojb": (l, c), "ln2w": (l, c), "ln2b": (l, c), "fcw": (l, 4 * c, c),
                  "fcb": (l, 4 * c), "fcprojw": (l, c, 4 * c), "fcprojb": (l, c), "lnfw": (c,),
                  "lnfb": (c,)}
        p = {}
        for k in ORDER:
            n = math.prod(shapes[k])
            data = f.read(4 * n)
            if len(data) != 4 * n:
                sys.exit("%s: truncated at %s" % (path, k))
            p[k] = torch.frombuffer(bytearray(data), dtype=torch.float32).view(shapes[k]).clone()
            p[k].requires_grad_(True)
    return (l, nh, c, v), p


def read_shard(path):
    with open(path, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        if head[0] != 20240520 or head[1] != 1:
            sys.exit("%s: not an llm.c token shard" % path)
        data = f.read(2 * head[2])
    return torch.frombuffer(bytearray(data), dtype=torch.int16).to(torch.int64) & 0xFFFF


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(cfg, p, x, y, sdpa=False):
    L, NH, C, V = cfg
    b, t = x.shape
    h = p["wte"][x] + p["wpe"][:t]
    hd = C // NH
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))
    for l in range(L):
        a = F.layer_norm(h, (C,), p["ln1w"][l], p["ln1b"][l], 1e-5)
        qkv = F.linear(a, p["qkvw"][l], p["qkvb"][l])
        q, k, v = qkv.split(C, dim=2)
        q = q.view(b, t, NH, hd).transpose(1, 2)
        k = k.view(b, t, NH, hd).transpose(1, 2)
        v = v.view(b, t, NH, hd).transpose(1, 2)
        if sdpa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            o = att @ v
        o = o.transpose(1, 2).reshape(b, t, C)
        h = h + F.linear(o, p["attprojw"][l], p["attprojb"][l])
        a = F.layer_norm(h, (C,), p["ln2w"][l], p["ln2b"][l], 1e-5)
        f = gelu(F.linear(a, p["fcw"][l], p["fcb"][l]))
        h = h + F.linear(f, p["fcprojw"][l], p["fcprojb"][l])
    h = F.layer_norm(h, (C,), p["lnfw"], p["lnfb"], 1e-5)
    logits = (h @ p["wte"].T)[:, :, :V]
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


class _Model(torch.nn.Module):
    """The parameters as a module, for DistributedDataParallel."""

    def __init__(self, cfg, p):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict({k: torch.nn.Parameter(v.detach()) for k, v in p.items()})

    def forward(self, x, y):
        return forward(self.cfg, self.p, x, y)


def train(a, rank=0, world=1, dist=None):
    torch.set_num_threads(a.threads)
    cfg, p = read_model(a.model)
    tokens = read_shard(a.data)
    gpu = a.device == "cuda"
    if gpu:
        if not torch.cuda.is_available():
            sys.exit("torch_gpt: --device cuda, but torch sees no CUDA device")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        dev = torch.device("cuda", 0)
        print('library name=torch version="%s" device="%s" cuda=%s tf32=off'
              % (torch.__version__, torch.cuda.get_device_name(dev), torch.version.cuda),
              flush=True)
        p = {k: v.detach().to(dev).requires_grad_(True) for k, v in p.items()}
    B, T = a.batch, a.seq
    nb = (len(tokens) - 1) // (B * T)
    if nb < 1:
        sys.exit("%s: fewer than B*T+1 tokens" % a.data)
    b = B // world
    model = None
    if dist is not None:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(_Model(cfg, p))
        params = list(model.parameters())
    else:
        params = list(p.values())
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a.weight_decay, **({"fused": True} if gpu else {}))
    times = []
    for step in range(a.warmup + a.steps):
        at = (step % nb) * B * T
        seqs = range(rank * b, (rank + 1) * b)
        x = torch.stack([tokens[at + i * T: at + i * T + T] for i in seqs])
        y = torch.stack([tokens[at + i * T + 1: at + i * T + T + 1] for i in seqs])
        if gpu:
            x, y = x.to(dev), y.to(dev)
        if dist is not None:
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y) if model is not None else forward(cfg, p, x, y, sdpa=gpu)
        loss.backward()
        opt.step()
        value = loss.item()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
        if dist is not None:  # the mean loss over the ranks, outside the timed step
            lt = torch.tensor([value], dtype=torch.float64)
            dist.all_reduce(lt)
            value = lt.item() / world
        if rank == 0:
            print("step=%d loss=%.6f" % (step, value), flush=True)
    if dist is not None:  # a step lasts as long as its slowest rank
        tt = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        times = tt.tolist()
    us = statistics.mean(times) * 1e6  # as gpt train reports: every step of the run
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    name = ("torch-%s-ddp-gloo-%dx%d" % (version, world, a.threads) if dist is not None
            else "torch-%s-cuda" % version if gpu
            else "torch-%s-%dthread" % (version, a.threads))
    if rank == 0:
        print("peer=%s peer_us=%.1f tokens_per_s=%.1f" % (name, us, B * T / (us * 1e-6)),
              flush=True)


def _ddp_rank(rank, world, port, a):
    import torch.distributed as dist
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    try:
        train(a, rank, world, dist)
    finally:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--warmup", type=int, default=0, help="untimed steps first")
    a = ap.parse_args()
    if a.device == "cuda" and a.ranks != 1:
        sys.exit("--device cuda runs one process (--ranks 1)")
    if a.ranks < 1 or a.batch % a.ranks:
        sys.exit("--batch %d does not split over --ranks %d" % (a.batch, a.ranks))
    if a.ranks > 1:
        import socket
        import torch.multiprocessing as mp
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        mp.spawn(_ddp_rank, args=(a.ranks, port, a), nprocs=a.ranks, join=True)
        return
    train(a)


if __name__ == "__main__":
    main()
