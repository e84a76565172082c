#!/usr/bin/env python3
"""troupe — PyTorch reference values for the GPT-2 block layers of nn/ (tests/test_nn_layers.c).

Writes tests/data/nn_block.bin: one small GPT-2 block (B=2, T=3, C=4, NH=2) in double
precision, built from PyTorch's own layers: F.layer_norm (eps 1e-5), causal multi-head
self-attention as GPT-2 (fused QKV with the weight in (in, out) layout, masked_fill(-inf),
softmax, heads concatenated, output projection), F.gelu(approximate="tanh"), residuals, and
the mean cross-entropy of the (B*T, C) rows against one-hot targets. Its inputs, loss and the
gradient of every parameter are stored; the test builds the same block from troupe's layers,
runs it through the interpreter on the stored inputs and compares.

Format (little-endian): the 8 bytes b"troupenn", a uint32 count of arrays, then each array as
a uint32 element count followed by that many float64 values (row-major), in this order:
  x (B,T,C), targets (B*T,C),
  ln1_w, ln1_b, w_qkv (C,3C), b_qkv, w_proj (C,C), b_proj, ln2_w, ln2_b, w_fc (C,4C), b_fc,
  w_fcproj (4C,C), b_fcproj                      -- the parameters, in troupe's creation order
  loss (1),
  the twelve parameters' gradients in the same order.

Usage: python3 bench/peers/nn_reference.py [output path]   (needs torch; Debian python3-torch)
"""
import math
import struct
import sys

import torch
import torch.nn.functional as F

B, T, C, NH = 2, 3, 4, 2
PARAMS = [
    ("ln1_w", (C,)), ("ln1_b", (C,)), ("w_qkv", (C, 3 * C)), ("b_qkv", (3 * C,)),
    ("w_proj", (C, C)), ("b_proj", (C,)), ("ln2_w", (C,)), ("ln2_b", (C,)),
    ("w_fc", (C, 4 * C)), ("b_fc", (4 * C,)), ("w_fcproj", (4 * C, C)), ("b_fcproj", (C,)),
]


def attention(x, w_qkv, b_qkv, w_proj, b_proj):
    hd = C // NH
    q, k, v = (x @ w_qkv + b_qkv).split(C, dim=2)
    q, k, v = (t.view(B, T, NH, hd).transpose(1, 2) for t in (q, k, v))
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
    return y @ w_proj + b_proj


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/nn_block.bin"
    g = torch.Generator().manual_seed(2024)
    uni = lambda shape: torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
    x = uni((B, T, C))
    targets = torch.zeros(B * T, C, dtype=torch.float64)
    for r in range(B * T):
        targets[r, (r * 7 + 3) % C] = 1.0
    p = {name: uni(shape).requires_grad_() for name, shape in PARAMS}
    l1 = F.layer_norm(x, (C,), p["ln1_w"], p["ln1_b"], eps=1e-5)
    r1 = x + attention(l1, p["w_qkv"], p["b_qkv"], p["w_proj"], p["b_proj"])
    l2 = F.layer_norm(r1, (C,), p["ln2_w"], p["ln2_b"], eps=1e-5)
    h = F.gelu(l2 @ p["w_fc"] + p["b_fc"], approximate="tanh")
    r2 = r1 + h @ p["w_fcproj"] + p["b_fcproj"]
    loss = -(targets * F.log_softmax(r2.view(B * T, C), dim=-1)).sum(-1).mean()
    loss.backward()
    arrays = [x, targets] + [p[n] for n, _ in PARAMS] + [loss.reshape(1)]
    arrays += [p[n].grad for n, _ in PARAMS]
    with open(out, "wb") as f:
        f.write(b"troupenn")
        f.write(struct.pack("<I", len(arrays)))
        for a in arrays:
            flat = a.detach().reshape(-1).tolist()
            f.write(struct.pack("<I", len(flat)))
            f.write(struct.pack("<%dd" % len(flat), *flat))
    print("wrote %s (%d arrays), torch %s, loss %.17g" % (out, len(arrays), torch.__version__,
                                                          loss.item()))


if __name__ == "__main__":
    main()
