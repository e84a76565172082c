#!/usr/bin/env python3
"""troupe — PyTorch reference values for nn/conv.h and nn/pool.h (tests/test_nn_conv.c).

Writes tests/data/nn_conv_ref.bin: for each case below, in double precision, PyTorch's own
F.conv2d / F.max_pool2d / F.avg_pool2d on fixed random inputs, loss = sum(y * r), and the
gradients of x, w and b. The test builds the same layer from troupe's nn/ layers, runs it through
the interpreter on the stored inputs and compares.

Cases (name, x shape, w shape or pool kernel, stride, padding, dilation):
  job1      x (2,1,8,8)  w (4,1,3,3)  s1 p0 d1   the convnet's first layer, small
  job2      x (2,4,6,6)  w (4,4,3,3)  s1 p0 d1   its 32->32 / 32->64 layers, small
  stride2   x (2,3,7,7)  w (4,3,3,3)  s2 p0 d1
  pad1      x (2,3,5,5)  w (4,3,3,3)  s1 p1 d1
  dilation2 x (2,3,7,7)  w (4,3,3,3)  s1 p0 d2
  maxpool2  x (2,3,6,6)  kernel 2 stride 2 (no ties: the values are distinct)
  avgpool3  x (2,3,7,7)  kernel 3 stride 2

Format (little-endian): b"troupecv", uint32 case count; per case: uint32 kind (0 conv, 1 max
pool, 2 avg pool), 8 int32 (B, Cin, H, W, Cout or 0, K, stride, padding), int32 dilation, then
arrays as uint32 count + float64 values: x, w, b (conv only), r, y, x_grad, w_grad, b_grad (conv
only).

Usage: /usr/bin/python3 bench/peers/conv_reference.py [output path]   (needs torch)
"""
import struct
import sys

import torch
import torch.nn.functional as F

CASES = [
    ("job1", 0, (2, 1, 8, 8), 4, 3, 1, 0, 1),
    ("job2", 0, (2, 4, 6, 6), 4, 3, 1, 0, 1),
    ("stride2", 0, (2, 3, 7, 7), 4, 3, 2, 0, 1),
    ("pad1", 0, (2, 3, 5, 5), 4, 3, 1, 1, 1),
    ("dilation2", 0, (2, 3, 7, 7), 4, 3, 1, 0, 2),
    ("maxpool2", 1, (2, 3, 6, 6), 0, 2, 2, 0, 1),
    ("avgpool3", 2, (2, 3, 7, 7), 0, 3, 2, 0, 1),
]


def arr(f, t):
    v = t.detach().contiguous().view(-1).tolist()
    f.write(struct.pack("<I", len(v)))
    f.write(struct.pack("<%dd" % len(v), *v))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/nn_conv_ref.bin"
    g = torch.Generator().manual_seed(32)
    uni = lambda *shape: torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1
    with open(out, "wb") as f:
        f.write(b"troupecv")
        f.write(struct.pack("<I", len(CASES)))
        for name, kind, xs, cout, k, s, p, d in CASES:
            B, cin, H, W = xs
            f.write(struct.pack("<I", kind))
            f.write(struct.pack("<9i", B, cin, H, W, cout, k, s, p, d))
            x = uni(*xs).requires_grad_()
            if kind == 0:
                w = uni(cout, cin, k, k).requires_grad_()
                b = uni(cout).requires_grad_()
                y = F.conv2d(x, w, b, stride=s, padding=p, dilation=d)
            elif kind == 1:
                y = F.max_pool2d(x, k, s)
            else:
                y = F.avg_pool2d(x, k, s)
            r = uni(*y.shape)
            (y * r).sum().backward()
            arr(f, x)
            if kind == 0:
                arr(f, w)
                arr(f, b)
            arr(f, r)
            arr(f, y)
            arr(f, x.grad)
            if kind == 0:
                arr(f, w.grad)
                arr(f, b.grad)
            print("%s: y %s" % (name, tuple(y.shape)))


if __name__ == "__main__":
    main()
