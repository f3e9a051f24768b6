#!/usr/bin/env bash
# Sets up ablate on Debian 12: installs the Debian packages that are missing (and only
# those), then configures and builds an optimised Release in ./build.
#   tools/bootstrap.sh            # packages + build
#   tools/bootstrap.sh --tests    # also what the test suite uses (h5py, h5dump, chromium, PyTorch)
#   tools/bootstrap.sh --fuzz     # clang + libFuzzer; builds only the fuzz targets, in the
#                                 # sanitizer build (preset asan, ./build-asan)
#   tools/bootstrap.sh --sanitize # clang and its sanitizer runtimes, for tools/sanitize.sh
#   tools/bootstrap.sh --qemu     # QEMU's user-mode emulator, for the `qemu` test (the portable
#                                 # build runs no AVX-512 instruction: docs/BENCHMARKS.md)
#   tools/bootstrap.sh --cluster  # Slurm (slurmctld slurmd slurm-client munge) and Open MPI, for
#                                 # the `cluster` tests and data-parallel runs (docs/CLUSTER.md)
#   tools/bootstrap.sh --no-build --tests --cluster   # only the packages (CI installs all first)
#   ABLATE_BUILD_DIR=dir tools/bootstrap.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ABLATE_BUILD_DIR:-$root/build}
fuzz=0
build_it=1

packages=(g++ cmake make git libboost-program-options-dev libboost-dev libboost-filesystem-dev
          libeigen3-dev libtbb-dev libyaml-cpp-dev libhdf5-dev doctest-dev nlohmann-json3-dev zlib1g-dev libzstd-dev libsentencepiece-dev
          libdnnl-dev)
for arg in "$@"; do
  case $arg in
    # npm: the GPT-2 tokenizer's reference check (js-tiktoken), unless Node already brings one.
    --tests) packages+=(hdf5-tools python3-h5py python3-numpy python3-sentencepiece python3-torch chromium zstd); command -v npm >/dev/null || packages+=(npm) ;;
    # libFuzzer's runtime is only a recommendation of clang's: name it.
    --fuzz) packages+=(clang libclang-rt-dev); fuzz=1 ;;
    --sanitize) packages+=(clang libclang-rt-dev) ;;
    --qemu) packages+=(qemu-user) ;;
    --cluster) packages+=(slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev) ;;
    --no-build) build_it=0 ;;
    *) echo "bootstrap: unknown option '$arg' (known: --tests, --fuzz, --sanitize, --qemu, --cluster, --no-build)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  # apt's lock may be held by another process for a while: retry rather than fail.
  for attempt in 1 2 3 4 5; do
    if $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
      break
    fi
    [ $attempt -eq 5 ] && { echo "bootstrap: apt-get failed 5 times; install by hand: ${missing[*]}" >&2; exit 1; }
    echo "bootstrap: apt-get failed (attempt $attempt), retrying in 10 s" >&2; sleep 10
  done
fi

[ $build_it -eq 1 ] || exit 0
if [ $fuzz -eq 1 ]; then
  # The fuzz targets and what they load (the core, model and train layers, the plugins).
  cd "$root"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j"$(nproc)" --target fuzz_checkpoint fuzz_tokenizer fuzz_experiment
  exit 0
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)"
