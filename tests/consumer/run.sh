#!/bin/sh
# troupe — the consumer test (tests/consumer/CMakeLists.txt): builds and runs programs against
# an installed troupe, with pkg-config, with find_package and with only <prefix>/include on the
# include path, and checks what the installation holds and what the programs load.
# usage: run.sh SOURCE_DIR BUILD_DIR WORK_DIR LIBDIR CC CMAKE HAVE_CUDA
set -eu
src=$1 build=$2 work=$3 libdir=$4 cc=$5 cmake=$6 have_cuda=$7
hello=$src/examples/hello/hello.c
cpu_only=$src/tests/consumer/cpu_only.c
cuda_libs='libcudart|libnvrtc|libnvJitLink|libcublas|libcuda\.so|libtroupe_cuda'

fail() { echo "consumer: FAIL: $*" >&2; exit 1; }

# no_cuda_needed LABEL PROGRAM: ldd lists no CUDA library (nor the plugin) for PROGRAM.
no_cuda_needed() {
  if ldd "$2" | grep -E "$cuda_libs"; then fail "$1: ldd lists a CUDA library"; fi
}

# check_install LABEL PREFIX: what the installation holds.
check_install() {
  label=$1 prefix=$2 inc=$2/include
  [ -f "$inc/troupe/troupe.h" ] || fail "$label: no include/troupe/troupe.h"
  [ ! -e "$inc/troupe/actors/actor.h" ] || fail "$label: actors/actor.h is installed"
  [ -f "$inc/troupe/compat/actors/troupe.h" ] || fail "$label: no compatibility directory"
  # The package names no directory of the build machine.
  if grep -nE "/usr/local/cuda|libxsmm|$src|$build" "$prefix/$libdir/pkgconfig/troupe.pc" \
       "$prefix/$libdir/cmake/troupe/"*.cmake; then
    fail "$label: the .pc or the CMake package names a directory of the build machine"
  fi
  # <troupe/troupe.h> brings no CZMQ header; every installed header compiles alone with only
  # <prefix>/include on the path.
  if echo '#include <troupe/troupe.h>' | "$cc" -std=c11 -E -I"$inc" -x c - | grep -E 'czmq\.h|zmq\.h'; then
    fail "$label: <troupe/troupe.h> includes CZMQ"
  fi
  n=0
  for h in $(cd "$inc" && find troupe -name '*.h' ! -path 'troupe/compat/*'); do
    echo "#include <$h>" | "$cc" -std=c11 -fsyntax-only -Wall -Werror -I"$inc" -x c - ||
      fail "$label: <$h> does not compile alone with -I<prefix>/include"
    n=$((n + 1))
  done
  echo "consumer ($label): $n installed headers compile alone; no build-machine path; no CZMQ"
}

# check LABEL PREFIX: the ways of consuming the package installed in PREFIX.
check() {
  label=$1 prefix=$2
  export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
  echo "consumer ($label): pkg-config"
  flags=$(pkg-config --cflags --libs troupe)
  # shellcheck disable=SC2086 # the flags are words
  "$cc" -std=c11 -o "$work/$label-pkgconfig" "$hello" $flags
  "$work/$label-pkgconfig"
  no_cuda_needed "$label pkg-config" "$work/$label-pkgconfig"
  # shellcheck disable=SC2086
  "$cc" -std=c11 -o "$work/$label-old" "$src/tests/consumer/old_spelling.c" $flags
  echo "consumer ($label): the old spelling (\"actors/troupe.h\") builds through the compat directory"

  echo "consumer ($label): only <prefix>/include on the path"
  "$cc" -std=c11 -Wall -Werror -o "$work/$label-cpu" "$cpu_only" -I"$prefix/include" \
    -L"$prefix/$libdir" -Wl,-rpath,"$prefix/$libdir" -ltroupe
  no_cuda_needed "$label cpu_only" "$work/$label-cpu"
  "$work/$label-cpu"

  echo "consumer ($label): find_package"
  rm -rf "$work/$label-cmake"
  "$cmake" -S "$src/tests/consumer/project" -B "$work/$label-cmake" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$prefix" -DTROUPE_COMPAT_INCLUDES=OFF >"$work/$label-cmake.log" 2>&1 ||
    { cat "$work/$label-cmake.log"; exit 1; }
  "$cmake" --build "$work/$label-cmake" >>"$work/$label-cmake.log" 2>&1 ||
    { cat "$work/$label-cmake.log"; exit 1; }
  "$work/$label-cmake/hello_consumer"
  no_cuda_needed "$label find_package" "$work/$label-cmake/cpu_only"
  # the cpu backend maps no CUDA library; opening cuda goes through the plugin (or, built
  # without CUDA, is NOT_FOUND)
  "$work/$label-cmake/cpu_only" cuda
  unset PKG_CONFIG_PATH
}

install_into() { # BUILD PREFIX
  rm -rf "$2"
  "$cmake" --install "$1" --prefix "$2" >/dev/null
}

mkdir -p "$work"
if [ "$have_cuda" = 1 ]; then main=cuda; else main=nocuda; fi
install_into "$build" "$work/prefix-$main"
check_install "$main" "$work/prefix-$main"
check "$main" "$work/prefix-$main"

if [ "$have_cuda" = 1 ]; then
  [ -f "$work/prefix-cuda/$libdir/libtroupe_cuda.so" ] || fail "the plugin is not installed"
  # The same installation without the plugin: opening cuda is NOT_FOUND naming it.
  rm -rf "$work/prefix-noplugin"
  cp -a "$work/prefix-cuda" "$work/prefix-noplugin"
  rm "$work/prefix-noplugin/$libdir/libtroupe_cuda.so"
  LD_LIBRARY_PATH="$work/prefix-noplugin/$libdir" "$work/cuda-cpu" no-plugin

  # The same package without CUDA: the libraries only, unoptimized (it only has to link).
  nb=$work/build-nocuda
  "$cmake" -S "$src" -B "$nb" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Debug \
    -DTROUPE_WITH_CUDA=OFF -DTROUPE_BUILD_TESTS=OFF -DTROUPE_BUILD_EXAMPLES=OFF \
    -DTROUPE_BUILD_BENCH=OFF >"$work/build-nocuda.log" 2>&1 ||
    { cat "$work/build-nocuda.log"; exit 1; }
  "$cmake" --build "$nb" -j2 >>"$work/build-nocuda.log" 2>&1 ||
    { cat "$work/build-nocuda.log"; exit 1; }
  install_into "$nb" "$work/prefix-nocuda"
  check_install nocuda "$work/prefix-nocuda"
  check nocuda "$work/prefix-nocuda"
else
  echo "consumer: this build did not find the CUDA toolkit; only the package without CUDA is checked"
fi
echo "consumer: ok"
