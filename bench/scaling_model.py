#!/usr/bin/env python3
"""troupe — the step-time model of docs/scaling.md: data-parallel GPT-2 training on R workers.

Prints, for GPT-2 124M and 1.5B and R = 16 .. 1024 workers, the step time, its parts and the
scaling efficiency E(R) = compute / step, from the measured terms given as options (their
defaults are the figures docs/scaling.md quotes, with where each was measured).

The model (docs/scaling.md, "The model"):
  compute   t_c  = K * tokens_per_worker * (6 N + 6 L C T) / flops  (llm.c's FLOP accounting;
                                                   K micro-steps per step, --accum)
  backward  t_b  = 2/3 t_c / K          (twice the forward's FLOPs; only the last micro-step's
                                         backward can hide the reductions)
  node      t_n  = 2 W S / node_gbs + 2 S / pcie_gbs
                     (the node's W workers summed in its shared memory: every worker's S bytes
                      read once and the sum written back to each; on GPU nodes each gradient
                      also crosses PCIe down and up, troupe's host staging; pcie_gbs 0: none)
  ring      t_r  = 2 (n-1)/n * S / net_gbs + 2 (n-1) alpha         (n = R / per_node nodes)
  exposed   t_x  = t_n + t_r - min(t_n + t_r, overlap * t_b)
  update    t_u  = 28 N / (R mem_gbs)     (ZeRO-1: 1/R of AdamW's 7 fp32 streams per parameter)
  step      t_s  = t_c + t_x + t_u,   E = t_c / t_s
with S = 4 N bytes of fp32 gradients (2 N in bf16: --grad-bytes 2).

Usage: bench/scaling_model.py [--flops F] [--per-node W] [--tokens N] [--accum K]
         [--net-gbs B] [--node-gbs B] [--pcie-gbs B] [--alpha-us A] [--overlap F] [--mem-gbs B]
         [--grad-bytes 4|2] [--ranks 16,64,...]
No third-party modules; prints a Markdown table.
"""
import argparse

MODELS = {
    # name: (parameters N with the padded vocabulary 50304, layers L, channels C, sequence T)
    "gpt2-124M": (124_475_904, 12, 768, 1024),
    "gpt2-1.5B": (1_557_611_200, 48, 1600, 1024),
}


def step(model, r, a):
    n_par, layers, chans, seq = MODELS[model]
    flops_tok = 6 * n_par + 6 * layers * chans * seq
    t_c = a.accum * a.tokens * flops_tok / a.flops
    t_b = 2.0 / 3.0 * t_c / a.accum
    size = a.grad_bytes * n_par
    nodes = max(1, r // a.per_node)
    t_n = 2 * a.per_node * size / (a.node_gbs * 1e9) if a.per_node > 1 else 0.0
    if a.pcie_gbs > 0:
        t_n += 2 * size / (a.pcie_gbs * 1e9)
    t_r = 0.0
    if nodes > 1:
        t_r = 2 * (nodes - 1) / nodes * size / (a.net_gbs * 1e9) + 2 * (nodes - 1) * a.alpha_us * 1e-6
    comm = t_n + t_r
    t_x = comm - min(comm, a.overlap * t_b)
    t_u = 28 * n_par / (r * a.mem_gbs * 1e9)
    t_s = t_c + t_x + t_u
    return t_c, comm, t_x, t_u, t_s


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--flops", type=float, default=60e9,
                   help="one worker's sustained FLOP/s on the model (default: one core, 60e9)")
    p.add_argument("--per-node", type=int, default=16, help="workers per node (default 16)")
    p.add_argument("--tokens", type=float, default=1024,
                   help="tokens per worker per step, B_local * T (default 1024)")
    p.add_argument("--accum", type=int, default=1, help="micro-steps per step (default 1)")
    p.add_argument("--net-gbs", type=float, default=3.1,
                   help="a node's network bandwidth each way, GB/s (default 3.1: 25 GbE)")
    p.add_argument("--node-gbs", type=float, default=100.0,
                   help="the node's memory bandwidth for the node-level sum, GB/s (default 100)")
    p.add_argument("--pcie-gbs", type=float, default=0.0,
                   help="host staging per GPU each way, GB/s (default 0: CPU workers)")
    p.add_argument("--alpha-us", type=float, default=30.0,
                   help="one ring hop's fixed cost, microseconds (default 30)")
    p.add_argument("--overlap", type=float, default=0.8,
                   help="fraction of the backward pass the reductions can hide under (default 0.8)")
    p.add_argument("--mem-gbs", type=float, default=10.0,
                   help="a worker's memory bandwidth for the update, GB/s (default 10)")
    p.add_argument("--grad-bytes", type=int, default=4, choices=(2, 4))
    p.add_argument("--ranks", default="16,64,256,1024")
    a = p.parse_args()
    ranks = [int(x) for x in a.ranks.split(",")]
    print(f"flops={a.flops:.3g} per_node={a.per_node} tokens={a.tokens:g} accum={a.accum} "
          f"net_gbs={a.net_gbs} "
          f"node_gbs={a.node_gbs} pcie_gbs={a.pcie_gbs} alpha_us={a.alpha_us} overlap={a.overlap} "
          f"mem_gbs={a.mem_gbs} grad_bytes={a.grad_bytes}")
    print()
    print("| model | R | compute s | comm s | exposed s | update s | step s | E(R) |")
    print("|---|---|---|---|---|---|---|---|")
    for m in MODELS:
        for r in ranks:
            t_c, comm, t_x, t_u, t_s = step(m, r, a)
            print(f"| {m} | {r} | {t_c:.3f} | {comm:.3f} | {t_x:.3f} | {t_u:.4f} | {t_s:.3f} "
                  f"| {t_c / t_s:.2f} |")


if __name__ == "__main__":
    main()
