#!/bin/bash
# Build and run every test twice: a normal build, then one under
# AddressSanitizer and UndefinedBehaviorSanitizer; then a third build with
# clang and libFuzzer that runs each fuzz target for 30 s (suite 'fuzz').
# Ends with one summary line.
set -uo pipefail
cd "$(dirname "$0")/.."

# the parity tests' references run on the virtual environment's Python
export PATH="$PWD/.venv/bin:$PATH"
status=0

run_build () {
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" || return 1
  fi
  ninja -C "$dir" || return 1
  meson test -C "$dir" --print-errorlogs --num-processes 2
}

# The fuzz build: `meson test` builds only what the fuzz tests need (the
# readers and their targets), each instrumented for libFuzzer. The GPU back
# ends stay out: the fuzzed code is the CPU-side readers.
run_fuzz_build () {
  local dir=build-fuzz
  if [ ! -f "$dir/build.ninja" ]; then
    CC=clang meson setup "$dir" -Dfuzzing=true -Dcuda=disabled -Dvulkan=disabled \
      -Db_sanitize=address,undefined -Db_lundef=false || return 1
  fi
  meson test -C "$dir" --print-errorlogs --num-processes 2 --suite fuzz
}

run_build build || status=1
# ASan's leak checker and OpenBLAS's threads: one thread keeps the reports
# about our code, and UBSan stops at the first finding.
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
ASAN_OPTIONS=detect_leaks=1 \
  run_build build-asan -Db_sanitize=address,undefined -Db_lundef=false || status=1

# UBSan stops at the first finding, so libFuzzer reports it as a crash
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  run_fuzz_build || status=1

# ThreadSanitizer on four pipelines sharing one model: only what that test needs
run_tsan () {
  local dir=build-tsan
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" -Db_sanitize=thread -Db_lundef=false -Dcuda=disabled -Dvulkan=disabled \
      || return 1
  fi
  ninja -C "$dir" plugins/libgstdflash.so tests/soak/test-concurrent || return 1
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    meson test -C "$dir" --no-rebuild --print-errorlogs concurrent
}
run_tsan || status=1

python3 scripts/test-summary.py build/meson-logs/testlog.json build-asan/meson-logs/testlog.json \
  build-fuzz/meson-logs/testlog.json build-tsan/meson-logs/testlog.json || status=1
exit $status
