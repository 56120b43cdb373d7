#!/usr/bin/env bash
# training/run_gpu.sh STEP [extra args for the step's script]
#
# The command each GPU step runs on the device machine (one H200), from the repository root.
# Results are copied under $OUT (at most 8 files, each < 16 MiB, come back). What each step
# needs carried (ignored paths) and what comes back:
#
#   target          carry: training/data/tokens training/data/tokenizer.json
#                   back:  $OUT/target/ config.json generation_config.json model-0000K-of-00003
#                          .safetensors (3) model.safetensors.index.json log.json     (~5 min)
#                   exit 3 = stopped at the call budget: run the same step again on the still-warm
#                   machine, it resumes from training/out/target/ckpt.pt
#   continuations   carry: training/out/target/hf training/data/tokens/prompts.npz
#                   back:  $OUT/continuations/ train-p32-00000.npz train-p04-00000.npz heldout-p32-00000.npz
#                          heldout-p04-00000.npz
#                          gen.json, and $OUT/parity-random/ (the PyTorch drafter = reference
#                          on a random drafter over the test checkpoint)           (~3 min)
#   drafter         carry: training/out/target/hf training/out/continuations
#                          training/data/tokens/prompts.npz
#                   back:  $OUT/drafter/ dflash.safetensors log.json, and $OUT/drafter/parity/
#                          torch_block.safetensors parity.json (the trained pair)  (~8 min;
#                          exit 3 as for target)
#   parity          carry: nothing (or training/out/target/hf training/out/drafter/dflash.safetensors
#                          training/data/tokens/prompts.npz to check the trained pair too)
#                   back:  $OUT/parity-random/ (and $OUT/parity-trained/) dflash.safetensors
#                          torch_block.safetensors parity.json                  (< 1 min)
#   smoke           carry: training/data/tokens training/data/tokenizer.json
#                   a tiny run of every step (small batches, tens of steps) to catch errors
#                   before spending the real budget; back: $OUT/smoke/ logs and parity (~2.5 min)
set -euo pipefail
STEP=${1:?usage: training/run_gpu.sh target|continuations|drafter|parity|smoke [args]}
shift
OUT=${OUT:-training/out/returned}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
$PY -c 'import torch, transformers, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'

copy() {  # copy DIR/FILE... into $OUT/SUB
  local sub=$1 dir=$2
  shift 2
  mkdir -p "$OUT/$sub"
  for f in "$@"; do cp "$dir/$f" "$OUT/$sub/"; done
  ls -l "$OUT/$sub"
}

case "$STEP" in
  target)
    set +e
    $PY training/train_target.py --sample "$@"
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then exit $rc; fi
    d=training/out/target/hf
    copy target "$d" $(cd "$d" && ls)
    cp training/out/target/log.json "$OUT/target/"
    ;;
  continuations)
    $PY training/gen_continuations.py "$@"
    d=training/out/continuations
    copy continuations "$d" $(cd "$d" && ls)
    $PY training/eval_parity.py --out "$OUT/parity-random"
    ;;
  drafter)
    set +e
    $PY training/train_drafter.py "$@"
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then exit $rc; fi
    copy drafter training/out/drafter dflash.safetensors log.json
    $PY training/eval_parity.py --out training/out/drafter/parity --target training/out/target/hf \
      --drafter training/out/drafter/dflash.safetensors --prompts training/data/tokens/prompts.npz
    copy drafter/parity training/out/drafter/parity torch_block.safetensors parity.json
    ;;
  parity)
    $PY training/eval_parity.py --out "$OUT/parity-random"
    if [ -f training/out/drafter/dflash.safetensors ] && [ -f training/out/target/hf/config.json ]; then
      $PY training/eval_parity.py --out "$OUT/parity-trained" --target training/out/target/hf \
        --drafter training/out/drafter/dflash.safetensors --prompts training/data/tokens/prompts.npz
    fi
    ;;
  smoke)
    S=training/out/smoke
    rm -rf "$S"
    $PY training/eval_parity.py --out "$OUT/smoke/parity-random"
    $PY training/train_target.py --out $S/target --seq 256 --batch 8 --max-steps 60 --eval-every 20 \
      --eval-windows 16 --time-budget 60 --call-budget 120 --sample
    $PY training/gen_continuations.py --target $S/target/hf --out $S/cont --n-train 1000 --n-heldout 40 \
      --batch 256 --part 600 --verify 32
    $PY training/train_drafter.py --target $S/target/hf --cont $S/cont --out $S/drafter --batch 8 \
      --max-steps 40 --eval-every 20 --eval-seqs 32 --time-budget 60 --call-budget 120
    # resume path: two more steps from the checkpoint
    $PY training/train_drafter.py --target $S/target/hf --cont $S/cont --out $S/drafter --batch 8 \
      --max-steps 42 --eval-every 20 --eval-seqs 32 --time-budget 600 --call-budget 120
    $PY training/eval_parity.py --out $S/parity-trained --target $S/target/hf \
      --drafter $S/drafter/dflash.safetensors
    $PY training/export.py assemble --target-dir $S/target/hf --drafter $S/drafter/dflash.safetensors \
      --tokenizer training/data/tokenizer.json --out $S/model > $S/assemble.json
    mkdir -p "$OUT/smoke"
    cp $S/target/log.json "$OUT/smoke/target-log.json"
    cp $S/cont/gen.json "$OUT/smoke/gen.json"
    cp $S/drafter/log.json "$OUT/smoke/drafter-log.json"
    cp $S/parity-trained/parity.json "$OUT/smoke/parity-trained.json"
    cp $S/assemble.json "$OUT/smoke/assemble.json"
    ls -lR "$OUT"
    ;;
  *)
    echo "unknown step $STEP" >&2
    exit 2
    ;;
esac
