#!/bin/sh
# troupe — the trainer's convnet (examples/fmnist --model cnn) across ranks:
# trainer_cnn.sh FMNIST DATA_DIR WORK_DIR MPIEXEC LAUNCHER_ARGS... Five steps of the global
# batch 128 on 1 rank and on 2 ranks (one stream each): the 2-rank parameters equal the 1-rank
# ones within float rounding (the gradient sums are added in another order; bound below), and
# a second 2-rank run writes the first one's checkpoint byte for byte. Then the same in
# micro-steps (--grad-accum 16: 8 samples on 1 rank, 4 a rank on 2), the form whose activations
# are channels last around Winograd (examples/fmnist/cnn.c); its routines compiled at -O1, as
# gcc -O3 takes half a minute over each.
set -u
fmnist=$1 data=$2 work=$3
shift 3
mkdir -p "$work" && cd "$work" || exit 1
small="--data $data --model cnn --train-limit 640 --test-limit 100 --epochs 1 --streams 1"
fail() { echo "FAIL: $*"; echo "--- stdout"; cat out; echo "--- stderr"; cat err; exit 1; }
for form in whole micro; do
  extra=""
  [ "$form" = micro ] && extra="--grad-accum 16"
  for run in np1:1 np2:2 np2b:2; do
    name=${form}_${run%:*} np=${run#*:}
    rm -f "ck_$name"
    if [ "$form" = micro ]; then
      export TROUPE_CC_FLAGS="-O1 -march=native -fno-math-errno -shared -fPIC"
    fi
    # shellcheck disable=SC2086 # word lists
    timeout -k 5 240 "$@" -n "$np" "$fmnist" $small $extra --checkpoint "ck_$name" >out 2>err ||
      fail "$name: exit status $?"
    grep -q "^final test_accuracy=.* ranks=$np " out || fail "$name: no final line for $np rank(s)"
  done
  cmp -s "ck_${form}_np2" "ck_${form}_np2b" || fail "$form: two 2-rank runs wrote different checkpoints"
  # The parameters of the two layouts (parallel/dp_ckpt.c's format 3, single precision).
  python3 - "ck_${form}_np1" "ck_${form}_np2" <<'PY' || fail "$form: the 1-rank and 2-rank parameters differ"

import struct, sys
def params(path):
    b = open(path, "rb").read()
    assert b[:8] == b"TROUPECK", path
    o = 8
    version, = struct.unpack_from("<I", b, o); o += 4
    assert version == 3, version
    o += 8 + 4  # steps, optimizer
    nstate, n = struct.unpack_from("<II", b, o); o += 8
    note_len, = struct.unpack_from("<I", b, o); o += 4 + note_len
    rec_len, = struct.unpack_from("<I", b, o); o += 4 + rec_len
    out = {}
    for _ in range(n):
        ll, = struct.unpack_from("<I", b, o); o += 4
        label = b[o:o + ll].decode(); o += ll
        prec, nd = struct.unpack_from("<II", b, o); o += 8
        dims = struct.unpack_from("<%dq" % nd, b, o); o += 8 * nd
        sprec, = struct.unpack_from("<I", b, o); o += 4
        assert prec == 11 and sprec in (11, 12), (label, prec, sprec)  # single; state single/double
        cnt = 1
        for d in dims:
            cnt *= d
        out[label] = struct.unpack_from("<%df" % cnt, b, o)
        o += 4 * cnt + (4 if sprec == 11 else 8) * cnt * nstate
    return out
a, b = params(sys.argv[1]), params(sys.argv[2])
assert sorted(a) == sorted(b) and len(a) == 10, (sorted(a), sorted(b))
for k in a:
    scale = max(abs(v) for v in a[k])
    diff = max(abs(x - y) for x, y in zip(a[k], b[k]))
    print("%s: max |1 rank - 2 ranks| %.3g (max |p| %.3g)" % (k, diff, scale))
    # the conv biases' gradients are float sums over B*H*W (up to 86528) cells that largely
    # cancel: after 5 steps with momentum they differ by ~1e-3 of their size (fc layers
    # ~1e-5); an averaging error would be of the order of the update itself
    assert diff <= 5e-3 * scale + 1e-6, k
PY
done
echo "2 ranks: the 1-rank parameters within float rounding; bitwise the same run to run; whole batches and micro-steps"
