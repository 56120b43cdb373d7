#!/usr/bin/env bash
# training/collect.sh STEP FILES_AT
# Puts what a GPU step brought back (the run tool's files_at folder) where the next steps and
# export.py read it, here on the CPU machine:
#   target         FILES_AT/target/*            -> training/out/target/hf/ (log.json -> training/out/target/)
#   continuations  FILES_AT/continuations/*     -> training/out/continuations/
#                  FILES_AT/parity-random/      -> training/out/parity-random/
#   drafter        FILES_AT/drafter/{dflash.safetensors,log.json} -> training/out/drafter/
#                  FILES_AT/drafter/parity/     -> training/out/drafter/parity/
#   parity         FILES_AT/parity-*            -> training/out/
set -euo pipefail
STEP=${1:?usage: training/collect.sh target|continuations|drafter|parity FILES_AT}
SRC=${2:?FILES_AT}
cd "$(dirname "$0")"
case "$STEP" in
  target)
    rm -rf out/target/hf && mkdir -p out/target/hf
    cp "$SRC"/target/* out/target/hf/
    mv out/target/hf/log.json out/target/log.json
    ls -l out/target/hf ;;
  continuations)
    rm -rf out/continuations out/parity-random && mkdir -p out/continuations
    cp "$SRC"/continuations/* out/continuations/
    cp -r "$SRC"/parity-random out/parity-random
    ls -l out/continuations ;;
  drafter)
    rm -rf out/drafter && mkdir -p out/drafter/parity
    cp "$SRC"/drafter/dflash.safetensors "$SRC"/drafter/log.json out/drafter/
    cp "$SRC"/drafter/parity/* out/drafter/parity/
    ls -lR out/drafter ;;
  parity)
    for d in "$SRC"/parity-*; do rm -rf "out/$(basename "$d")"; cp -r "$d" out/; done ;;
  *) echo "unknown step $STEP" >&2; exit 2 ;;
esac
chmod -R u+w out   # the returned files come read-only
