#!/bin/bash
# gst-dflash beside llama.cpp on the same GGUF files, on the CPU, 2 threads.
#
#   bash bench/vs-llama-cpp.sh [BUILD_DIR] [CACHE_DIR]
#       (defaults: build, ~/.cache/gst-dflash; REPS=3 alternating rounds,
#        FILES="f32 bf16 f16 Q8_0 Q4_K_M", PROMPTS=10, THREADS=2 for the
#        plain decoding)
#
# Builds llama.cpp's CPU tools once into the cache (bench/llama-cpp-build.sh,
# from PyPI's llama-cpp-python source distribution), writes a random Qwen3
# of about 159M parameters there (bench/make-random-qwen3.py), converts it
# to GGUF (tools/hf-to-gguf.py: F32, F16, BF16) and quantizes the F16 file
# with llama.cpp's own llama-quantize (Q8_0, Q4_K_M). Then, for each file,
# alternating the two programs REPS times:
#   - plain decoding: llama-bench tg128 against bench-target's decode (128
#     steps after a 128-token prompt), and our step against the streaming-
#     read floor of its weights measured in the same run;
#   - our verification of 16 rows as a multiple of our plain step.
# Last, the default pair converted to BF16 GGUF (its drafter beside it):
# prompt lookup in `dflash generate --route chain` and the default route
# against llama.cpp's llama-lookup, cold, per prompt, on the first PROMPTS
# (default 10) held-out prompts, 128 new tokens each.
# A benchmark, not a test; the machine's noise is in every figure, so each
# ratio is one run's.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cache=${2:-${XDG_CACHE_HOME:-$HOME/.cache}/gst-dflash}
reps=${REPS:-3}
threads=${THREADS:-2}
prompts=${PROMPTS:-10}
py=${PYTHON:-.venv/bin/python3}
[ -x "$py" ] || py=python3

bin=$(bash bench/llama-cpp-build.sh "$cache") || exit 1
model="$cache/random-qwen3-159m"
if [ ! -f "$model/model.safetensors" ]; then
  "$py" bench/make-random-qwen3.py "$model" || exit 1
fi
for t in f32 f16 bf16; do
  [ -f "$model-$t.gguf" ] || "$py" tools/hf-to-gguf.py "$model" "$model-$t.gguf" --outtype $t >/dev/null || exit 1
done
for q in Q8_0 Q4_K_M; do
  [ -f "$model-$q.gguf" ] || "$bin/llama-quantize" "$model-f16.gguf" "$model-$q.gguf" $q >/dev/null 2>&1 \
    || { echo "llama-quantize $q failed" >&2; exit 1; }
done

# one llama-bench tg128 figure (tokens/s)
llama_tg () {
  "$bin/llama-bench" -m "$1" -p 0 -n 128 -t "$threads" -r 1 -o csv 2>/dev/null \
    | tail -1 | awk -F'","' '{ gsub(/"/, "", $(NF-1)); print $(NF-1) }'
}
# bench-target's decode tokens/s, read floor ratio and verify-16 ratio (a
# pass of 16 rows as a multiple of a one-row step), or the error it gave
ours () {
  local out
  if ! out=$(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$build/bench/bench-target" --target "$1" \
               --prompt 128 --decode 128 --verify-rows 16 2>&1); then
    echo "error: $(echo "$out" | tail -1)"
    return
  fi
  echo "$out" | awk '
    /^decode:/ { tps = $2 }
    /decode \/ read floor:/ { for (i = 1; i <= NF; i++) if ($i == "floor:") r = $(i + 1) }
    $1 == "16" && $3 ~ /x$/ { v = $3 }
    END { printf "%s %s %s\n", tps, r, v }'
}

printf "%-34s %12s %12s %8s %14s %12s\n" "file" "llama.cpp t/s" "ours t/s" "× llama" "ours × floor" \
  "16 rows ×"
for f in ${FILES:-f32 bf16 f16 Q8_0 Q4_K_M}; do
  file="$model-$f.gguf"
  l_sum=0 o_sum=0 n=0 floor="" verify="" err=""
  for r in $(seq "$reps"); do
    l=$(llama_tg "$file")
    o=$(ours "$file" 2>/dev/null)
    case "$o" in error:*) err=$o; break ;; esac
    set -- $o
    l_sum=$(echo "$l_sum + $l" | bc -l); o_sum=$(echo "$o_sum + $1" | bc -l)
    floor=$2 verify=$3 n=$((n + 1))
  done
  if [ -n "$err" ]; then
    printf "%-34s %12s   %s\n" "$(basename "$file")" "$l" "$err"
    continue
  fi
  printf "%-34s %12.1f %12.1f %7.2f× %14s %12s\n" "$(basename "$file")" "$(echo "$l_sum / $n" | bc -l)" \
    "$(echo "$o_sum / $n" | bc -l)" "$(echo "$o_sum / $l_sum" | bc -l)" "$floor" "$verify"
done
echo "(tokens/s: the mean of $reps alternating runs; ours × floor: the last run's decode step"
echo " over the weights' bytes / the read rate bench-target measured in the same run; 16 rows ×:"
echo " the last run's verification pass of 16 rows as a multiple of its one-row step)"

# the default pair: prompt lookup against llama-lookup, cold per prompt
pair="$cache/qwen3-go-bf16.gguf"
if [ ! -f "$pair" ]; then
  "$py" tools/hf-to-gguf.py models/qwen3-go "$pair" --outtype bf16 \
    --sidecar models/qwen3-go/dflash.safetensors >/dev/null || exit 1
fi
echo
echo "default pair as BF16 GGUF, first $prompts held-out prompts × 128 tokens, cold per prompt:"
head -n "$prompts" bench/heldout-prompts.txt | while IFS= read -r p; do
  p=$(printf '%b' "$p")
  # llama-lookup: "decoded N tokens in T seconds"
  "$bin/llama-lookup" -m "$pair" -p "$p" -n 128 -t 2 --temp 0 --spec-draft-n-max 8 2>&1 \
    | awk '/decoded/ { for (i = 1; i <= NF; i++) { if ($i == "decoded") n = $(i + 1); if ($i == "in") s = $(i + 1) } } END { print "llama-lookup", n, s }'
  for side in chain default no-draft; do
    case $side in chain) a="--route chain" ;; default) a="" ;; no-draft) a="--no-draft" ;; esac
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$build/tools/dflash" generate --target "$pair" $a \
      --max-new 128 --json --prompt "$p" 2>/dev/null \
      | "$py" -c 'import json, sys; j = json.load(sys.stdin); n = len(j["new_tokens"]); print(sys.argv[1], n, n / j["decode_tokens_per_s"])' "$side"
  done
done | awk '{ n[$1] += $2; s[$1] += $3 } END {
  for (k in n) printf "  %-14s %8.1f tokens/s\n", k, n[k] / s[k];
  printf "  llama-lookup is llama.cpp'"'"'s prompt lookup (8 drafts); chain: ours; default: our cost route\n" }'
