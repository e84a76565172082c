#!/usr/bin/env python3
"""Writes the seed corpus of the gpt fuzz target (tests/fuzz/fuzz_gpt.c) into a directory
(default tests/data/gpt_corpus): small valid files of llm.c's four formats, as examples/gpt
reads them (docs/gpt.md), and damaged copies of each. Every file is below 4 KiB, libFuzzer's
input limit in deploy/fuzz.sh. The debug state is for fuzz_gpt.c's fixed config: maxT=4 V=5 L=1
NH=2 C=4 Vp=8 (300 parameters). Deterministic; needs only the standard library.

usage: tests/fuzz/gpt_seeds.py [DIR]"""
import os
import struct
import sys

MODEL, STATE, TOKENIZER, SHARD = 20240326, 20240327, 20240328, 20240520
CFG = dict(maxT=4, V=5, L=1, NH=2, C=4, Vp=8)


def header(*ints):
    h = list(ints) + [0] * (256 - len(ints))
    return struct.pack("<256i", *h)


def num_params(maxT, V, L, NH, C, Vp):
    return 12 * L * C * C + (Vp + maxT) * C + 13 * L * C + 2 * C


def model(version=3, **over):
    c = dict(CFG, **over)
    n = num_params(**c)
    vals = [((i * 37) % 101 - 50) / 64.0 for i in range(n)]
    if version == 5:  # bf16: the top half of each float
        body = b"".join(struct.pack("<f", v)[2:] for v in vals)
    else:
        body = struct.pack("<%df" % n, *vals)
    return header(MODEL, version, c["maxT"], c["V"], c["L"], c["NH"], c["C"], c["Vp"]) + body


def state(B=1, T=2, x=None, version=2):
    bt = B * T
    x = x if x is not None else [i % CFG["V"] for i in range(bt)]
    y = [(i + 1) % CFG["V"] for i in range(bt)]
    logits = [0.25 * (i % 7) for i in range(bt * CFG["V"])]
    grads = [0.001 * (i % 13) for i in range(num_params(**CFG))]
    return (header(STATE, version, B, T) + struct.pack("<%di" % bt, *x) +
            struct.pack("<%di" % bt, *y) + struct.pack("<%df" % len(logits), *logits) +
            struct.pack("<f", 1.609) + struct.pack("<%df" % len(grads), *grads))


def tokenizer(tokens, version=1, vocab=None, eot=2):
    vocab = len(tokens) if vocab is None else vocab
    body = b"".join(bytes([len(t)]) + t for t in tokens)
    return header(TOKENIZER, version, vocab, eot if version == 2 else 0) + body


def shard(tokens, version=1, count=None):
    count = len(tokens) if count is None else count
    return header(SHARD, version, count) + struct.pack("<%dH" % len(tokens), *tokens)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "gpt_corpus")
    os.makedirs(out, exist_ok=True)
    good_model, good_state = model(), state()
    toks = [b"a", b"bc", b"", b"\xff" * 3]
    files = {
        "model_v3.bin": good_model,
        "model_v5_bf16.bin": model(version=5),
        "model_truncated.bin": good_model[:-2],
        "model_trailing.bin": good_model + b"\0\0\0\0",
        "model_version4.bin": model(version=4),
        "model_heads_not_dividing.bin": model(NH=3),
        "model_vp_below_v.bin": model(Vp=4),
        "model_too_many_params.bin": header(MODEL, 3, 1024, 50257, 100000, 16, 65536, 50304),
        "model_negative_layers.bin": header(MODEL, 3, 4, 5, -1, 2, 4, 8),
        "state.bin": good_state,
        "state_batch2.bin": state(B=2, T=1),
        "state_token_out_of_range.bin": state(x=[5, 0]),
        "state_seq_past_maxT.bin": state(B=1, T=5),
        "state_truncated.bin": good_state[:-4],
        "state_version1.bin": state(version=1),
        "tokenizer_v1.bin": tokenizer(toks),
        "tokenizer_v2.bin": tokenizer(toks, version=2, eot=3),
        "tokenizer_token_past_end.bin": tokenizer(toks)[:-2],
        "tokenizer_more_tokens_than_bytes.bin": tokenizer(toks, vocab=2147483647),
        "tokenizer_trailing.bin": tokenizer(toks) + b"x",
        "tokenizer_version3.bin": tokenizer(toks, version=3),
        "shard.bin": shard([104, 105, 10, 0, 255]),
        "shard_token_past_vocab.bin": shard([104, 300, 10]),
        "shard_count_disagrees.bin": shard([1, 2, 3], count=4),
        "shard_negative_count.bin": shard([], count=-1),
        "shard_empty.bin": shard([]),
        "shard_version2.bin": shard([1, 2], version=2),
        "header_only.bin": header(SHARD),
        "short.bin": struct.pack("<i", MODEL),
        "empty.bin": b"",
    }
    for name, data in sorted(files.items()):
        assert len(data) <= 4096, name
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(files), out))


if __name__ == "__main__":
    main()
