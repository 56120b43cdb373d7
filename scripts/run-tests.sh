#!/bin/bash
# Build and run every test twice: a normal build, then one under
# AddressSanitizer and UndefinedBehaviorSanitizer. Ends with one summary line.
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

run_build build || status=1
# ASan's leak checker and OpenBLAS's threads: one thread keeps the reports
# about our code, and UBSan stops at the first finding.
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
ASAN_OPTIONS=detect_leaks=1 \
  run_build build-asan -Db_sanitize=address,undefined -Db_lundef=false || status=1

python3 scripts/test-summary.py build/meson-logs/testlog.json build-asan/meson-logs/testlog.json || status=1
exit $status
