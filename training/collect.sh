#!/usr/bin/env bash
# training/collect.sh STEP FILES_AT
# Puts what a GPU step brought back (the run tool's files_at folder) where the next steps and
# export.py read it, here on the CPU machine; files cut into NAME.part-NN (run_gpu.sh's copy)
# are joined back into NAME:
#   target         FILES_AT/target/target.gguf.part-* -> training/out/target/target.gguf
#                  FILES_AT/target/{log,quantized}.json -> training/out/target/, config.json ->
#                  training/out/target/hf-config.json
#   continuations  FILES_AT/continuations/*     -> training/out/continuations/
#                  FILES_AT/parity-random/      -> training/out/parity-random/
#   drafter        FILES_AT/drafter/{dflash.safetensors(.part-*),log.json} -> training/out/drafter/
#                  FILES_AT/drafter/parity/     -> training/out/drafter/parity/
#   parity         FILES_AT/parity-*            -> training/out/
set -euo pipefail
STEP=${1:?usage: training/collect.sh target|continuations|drafter|parity FILES_AT}
SRC=${2:?FILES_AT}
cd "$(dirname "$0")"

take() {  # take SRC_DIR NAME DEST_DIR: NAME or its parts
  local src=$1 name=$2 dest=$3
  if [ -f "$src/$name" ]; then
    cp "$src/$name" "$dest/$name"
  else
    ls "$src/$name".part-* > /dev/null || { echo "no $src/$name(.part-*)" >&2; exit 1; }
    cat "$src/$name".part-* > "$dest/$name"
  fi
}

case "$STEP" in
  target)
    rm -rf out/target && mkdir -p out/target
    take "$SRC"/target target.gguf out/target
    cp "$SRC"/target/log.json "$SRC"/target/quantized.json out/target/
    cp "$SRC"/target/config.json out/target/hf-config.json
    sha256sum out/target/target.gguf
    ls -l out/target ;;
  continuations)
    rm -rf out/continuations out/parity-random && mkdir -p out/continuations
    cp "$SRC"/continuations/* out/continuations/
    cp -r "$SRC"/parity-random out/parity-random
    ls -l out/continuations ;;
  drafter)
    rm -rf out/drafter && mkdir -p out/drafter/parity
    take "$SRC"/drafter dflash.safetensors out/drafter
    cp "$SRC"/drafter/log.json out/drafter/
    cp "$SRC"/drafter/parity/* out/drafter/parity/
    ls -lR out/drafter ;;
  parity)
    for d in "$SRC"/parity-*; do rm -rf "out/$(basename "$d")"; cp -r "$d" out/; done ;;
  *) echo "unknown step $STEP" >&2; exit 2 ;;
esac
chmod -R u+w out   # the returned files come read-only
