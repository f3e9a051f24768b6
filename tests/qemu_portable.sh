#!/usr/bin/env bash
# The portable build (-DABLATE_PORTABLE=ON) executes no AVX-512 instruction: it builds one
# and trains a tiny model with it under QEMU's user-mode emulator as a Haswell CPU (AVX2 +
# FMA, no AVX-512; QEMU's TCG has no AVX-512 at all, so any such instruction is SIGILL),
# then checks that the run finished on the avx2 kernel path, and on the portable path
# with ABLATE_ISA=portable (read from the run file with Debian's h5py: bootstrap --tests).
# ctest label `qemu` (tests/CMakeLists.txt; .ci/run runs it).
#   tests/qemu_portable.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
build=$2
command -v qemu-x86_64 >/dev/null ||
  { echo "qemu_portable: qemu-x86_64 not found: tools/bootstrap.sh --qemu installs Debian's qemu-user" >&2; exit 1; }
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DABLATE_PORTABLE=ON -DABLATE_BUILD_TESTS=OFF \
      -DABLATE_MPI=OFF ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} >/dev/null
cmake --build "$build" -j2 --target ablate ablate_plugins
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for isa in "" portable; do
  out="$tmp/run${isa:+_$isa}"
  echo "qemu_portable: qemu-x86_64 -cpu Haswell, ABLATE_ISA=${isa:-(unset)}"
  ABLATE_ISA=$isa qemu-x86_64 -cpu Haswell "$build/ablate" run "$src/experiments/quickstart.yaml" -q -j 2 -o "$out" \
    data.path="$src/tests/data/shakespeare_16k.txt" model.n_layers=1 model.d_model=32 train.steps=4 train.batch_size=4 \
    train.eval_every=2 train.eval_batches=1 train.checkpoint_every=4 sample.tokens=8
  want=${isa:-avx2}
  got=$(/usr/bin/python3 -c "import h5py,sys; v=h5py.File(sys.argv[1],'r').attrs['kernel_path']; print(v.decode() if isinstance(v,bytes) else v)" "$out/run.h5")
  [ "$got" = "$want" ] || { echo "qemu_portable: the run used kernel path '$got', expected '$want'" >&2; exit 1; }
  echo "qemu_portable: trained 4 steps on kernel path $got, no illegal instruction"
done
