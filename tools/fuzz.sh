#!/usr/bin/env bash
# Builds the libFuzzer targets (tools/bootstrap.sh --fuzz: clang, in the sanitizer build
# ./build-asan, preset asan) and runs each for ABLATE_FUZZ_SECONDS (default 60) through
# ctest's `fuzz` configuration. New corpus entries stay in build-asan/fuzz-corpus, crash
# inputs in build-asan/fuzz-artifacts.
#   tools/fuzz.sh                       # all targets, 60 s each
#   ABLATE_FUZZ_SECONDS=600 tools/fuzz.sh -R checkpoint
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-asan
"$root/tools/bootstrap.sh" --fuzz
cmake -S "$root" -B "$build" -DABLATE_FUZZ_SECONDS="${ABLATE_FUZZ_SECONDS:-60}" >/dev/null
# Leaks are findings too; the fuzzer's own RSS limit stands in for an allocation limit.
# intercept_tls_get_addr=0: Debian 12's clang 14 has the sanitizer runtime whose TLS
# interceptor makes LeakSanitizer die on a dlopened plugin's thread_local data (tools/sanitize.sh).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:intercept_tls_get_addr=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build" -C fuzz -L fuzz --output-on-failure "$@"
