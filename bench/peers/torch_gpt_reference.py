#!/usr/bin/python3
"""The PyTorch reference for troupe's GPT-2 (examples/gpt): a small random-init model, one
batch, its step-0 debug state and 10 AdamW steps' losses, in llm.c's file formats.

Writes into OUT_DIR (default tests/data):
  gpt_ref_model.bin   the model (llm.c's model file, magic 20240326, version 3, fp32)
  gpt_ref_state.bin   the debug state (magic 20240327, version 2): x, y (B,T) int32, the
                      logits (B,T,V), the loss, every gradient (16 tensors, wte padded to Vp)
  gpt_ref_losses.txt  the losses of 10 AdamW steps on that batch (llm.c's test_gpt2.c: lr 1e-4,
                      betas 0.9/0.999, eps 1e-8, weight decay 0.01)

Run with Debian's torch (/usr/bin/python3). The model is GPT-2 as llm.c's train_gpt2.py has it
(pre-LN blocks, fused QKV, causal attention, GELU tanh, tied classifier over Vp; only the first V
logits count), written here from the equations."""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

L, NH, C, MAXT, V, VP = 2, 2, 32, 16, 60, 64
B, T = 2, 16
STEPS = 10


def gpt_init(gen):
    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std

    resid = 0.02 / math.sqrt(2 * L)
    wte = normal(VP, C)
    wte[V:] = 0  # llm.c pads the vocabulary with zero rows
    p = {
        "wte": wte, "wpe": normal(MAXT, C),
        "ln1w": torch.ones(L, C), "ln1b": torch.zeros(L, C),
        "qkvw": normal(L, 3 * C, C), "qkvb": normal(L, 3 * C),
        "attprojw": normal(L, C, C, std=resid), "attprojb": normal(L, C),
        "ln2w": 1 + normal(L, C), "ln2b": normal(L, C),
        "fcw": normal(L, 4 * C, C), "fcb": normal(L, 4 * C),
        "fcprojw": normal(L, C, 4 * C, std=resid), "fcprojb": normal(L, C),
        "lnfw": 1 + normal(C), "lnfb": normal(C),
    }
    # biases and LN parameters get random values too, so that every gradient is exercised
    return {k: v.clone().requires_grad_(True) for k, v in p.items()}


ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(p, x, y):
    b, t = x.shape
    h = p["wte"][x] + p["wpe"][:t]
    hd = C // NH
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for l in range(L):
        a = F.layer_norm(h, (C,), p["ln1w"][l], p["ln1b"][l], 1e-5)
        qkv = a @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(b, t, NH, hd).transpose(1, 2)
        k = k.view(b, t, NH, hd).transpose(1, 2)
        v = v.view(b, t, NH, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        o = (att @ v).transpose(1, 2).reshape(b, t, C)
        h = h + o @ p["attprojw"][l].T + p["attprojb"][l]
        a = F.layer_norm(h, (C,), p["ln2w"][l], p["ln2b"][l], 1e-5)
        f = gelu(a @ p["fcw"][l].T + p["fcb"][l])
        h = h + f @ p["fcprojw"][l].T + p["fcprojb"][l]
    h = F.layer_norm(h, (C,), p["lnfw"], p["lnfb"], 1e-5)
    logits = (h @ p["wte"].T)[:, :, :V]
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    return logits, loss


def header(magic, version, rest):
    h = [0] * 256
    h[0], h[1] = magic, version
    for i, v in enumerate(rest):
        h[2 + i] = v
    return struct.pack("<256i", *h)


def flat(tensors):
    return b"".join(t.detach().contiguous().numpy().astype("<f4").tobytes() for t in tensors)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(31)
    p = gpt_init(gen)
    tokens = torch.randint(0, V, (B * T + 1,), generator=gen)
    x = tokens[:-1].view(B, T)
    y = tokens[1:].view(B, T)
    with open(os.path.join(out, "gpt_ref_model.bin"), "wb") as f:
        f.write(header(20240326, 3, [MAXT, V, L, NH, C, VP]))
        f.write(flat(p[k] for k in ORDER))
    logits, loss = forward(p, x, y)
    loss.backward()
    with open(os.path.join(out, "gpt_ref_state.bin"), "wb") as f:
        f.write(header(20240327, 2, [B, T]))
        f.write(x.numpy().astype("<i4").tobytes())
        f.write(y.numpy().astype("<i4").tobytes())
        f.write(flat([logits]))
        f.write(struct.pack("<f", loss.item()))
        f.write(flat(p[k].grad for k in ORDER))
    opt = torch.optim.AdamW(list(p.values()), lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        _, loss = forward(p, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(os.path.join(out, "gpt_ref_losses.txt"), "w") as f:
        f.write("".join("%.9g\n" % v for v in losses))
    print("wrote", out, "loss", losses[0], "->", losses[-1])


if __name__ == "__main__":
    main()
