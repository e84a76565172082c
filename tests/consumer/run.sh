#!/bin/sh
# troupe — the consumer test (tests/consumer/CMakeLists.txt): builds and runs a program against
# an installed troupe, with pkg-config and with find_package.
# usage: run.sh SOURCE_DIR BUILD_DIR WORK_DIR LIBDIR CC CMAKE HAVE_CUDA
set -eu
src=$1 build=$2 work=$3 libdir=$4 cc=$5 cmake=$6 have_cuda=$7
hello=$src/examples/hello/hello.c

# check LABEL PREFIX: both ways of consuming the package installed in PREFIX.
check() {
  label=$1 prefix=$2
  echo "consumer ($label): pkg-config"
  flags=$(PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig pkg-config --cflags --libs troupe)
  # shellcheck disable=SC2086 # the flags are words
  "$cc" -std=c11 -o "$work/$label-pkgconfig" "$hello" $flags
  "$work/$label-pkgconfig"
  echo "consumer ($label): find_package"
  rm -rf "$work/$label-cmake"
  "$cmake" -S "$src/tests/consumer/project" -B "$work/$label-cmake" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$prefix" >"$work/$label-cmake.log" 2>&1 ||
    { cat "$work/$label-cmake.log"; exit 1; }
  "$cmake" --build "$work/$label-cmake" >>"$work/$label-cmake.log" 2>&1 ||
    { cat "$work/$label-cmake.log"; exit 1; }
  "$work/$label-cmake/hello_consumer"
}

install_into() { # BUILD PREFIX
  rm -rf "$2"
  "$cmake" --install "$1" --prefix "$2" >/dev/null
}

mkdir -p "$work"
if [ "$have_cuda" = 1 ]; then main=cuda; else main=nocuda; fi
install_into "$build" "$work/prefix-$main"
check "$main" "$work/prefix-$main"

if [ "$have_cuda" = 1 ]; then
  # The same package without CUDA: the libraries only, unoptimized (it only has to link).
  nb=$work/build-nocuda
  "$cmake" -S "$src" -B "$nb" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Debug \
    -DTROUPE_WITH_CUDA=OFF -DTROUPE_BUILD_TESTS=OFF -DTROUPE_BUILD_EXAMPLES=OFF \
    -DTROUPE_BUILD_BENCH=OFF >"$work/build-nocuda.log" 2>&1 ||
    { cat "$work/build-nocuda.log"; exit 1; }
  "$cmake" --build "$nb" -j2 >>"$work/build-nocuda.log" 2>&1 ||
    { cat "$work/build-nocuda.log"; exit 1; }
  install_into "$nb" "$work/prefix-nocuda"
  check nocuda "$work/prefix-nocuda"
else
  echo "consumer: this build did not find the CUDA toolkit; only the package without CUDA is checked"
fi
echo "consumer: ok"
