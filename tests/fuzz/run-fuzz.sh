#!/bin/sh
# Run one libFuzzer target for a while over a fresh copy of its seed corpus.
# usage: run-fuzz.sh TARGET SEED_DIR WORK_DIR SECONDS [DICT]
# The copy (WORK_DIR/corpus) grows with what the run finds; the tree's seeds
# are never written. A finding's input is saved as WORK_DIR/crash-…,
# leak-…, timeout-… or oom-…, and the run fails.
set -eu
target=$1 seeds=$2 work=$3 seconds=$4
dict=${5:-}

rm -rf "$work"
mkdir -p "$work/corpus"
cp "$seeds"/* "$work/corpus/"
set -- -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/"
if [ -n "$dict" ]; then
  set -- "$@" -dict="$dict"
fi
# the sanitizers' defaults for libFuzzer, with leak checking on
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
  exec "$target" "$@" "$work/corpus"
