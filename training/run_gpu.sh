#!/usr/bin/env bash
# training/run_gpu.sh STEP [extra args for the step's script]
#
# The command each GPU step runs on the device machine (one H200), from the repository root.
# Results are copied under $OUT; at most 8 files come back, each < 16 MiB, 64 MiB in all, so
# files over 15 MiB are cut into NAME.part-NN (collect.sh joins them). What each step needs
# carried (ignored paths; the whole tree that travels must stay within 64 MiB) and returns:
#
#   target          carry: training/data/tokens training/data/tokenizer.json training/wheels
#                   trains the BF16 target (training/out/target/hf, stays there: 143 MiB), converts
#                   it with tools/hf-to-gguf.py to the shipped quantized target.gguf, dequantizes that
#                   to training/out/target/hf-q (F32: what the next steps run on) and measures its
#                   held-out loss
#                   back:  $OUT/target/ target.gguf.part-00..02 log.json quantized.json config.json
#                   (~7.5 min) exit 3 = stopped at the call budget: run the same step again on the
#                   still-warm machine, it resumes from training/out/target/ckpt.pt
#   continuations   carry: as for target (the tokenizer and the wheels remake hf-q from a carried
#                          training/out/target/target.gguf on a fresh machine)
#                   back:  $OUT/continuations/ train-p32-00000.npz train-p04-00000.npz
#                          heldout-p32-00000.npz heldout-p04-00000.npz gen.json, and
#                          $OUT/parity-random/ (the PyTorch drafter = reference on a random drafter
#                          over the test checkpoint)                                (~5 min)
#   drafter         carry: as for target (and, on a fresh machine, training/out/target/target.gguf
#                          training/out/continuations)
#                   back:  $OUT/drafter/ dflash.safetensors.part-00..01 log.json, and
#                          $OUT/drafter/parity/ torch_block.safetensors parity.json (the trained
#                          pair)                                       (~5.5 min; exit 3 as for target)
#   parity          carry: as for target (checks the trained pair too where training/out/drafter
#                          and the target are there)
#                   back:  $OUT/parity-random/ (and $OUT/parity-trained/) dflash.safetensors
#                          torch_block.safetensors parity.json                  (< 1 min)
#   smoke           carry: as for target
#                   a tiny run of every step (small batches, tens of steps, the quantization and the
#                   dequantization included) to catch errors before spending the real budget;
#                   back: $OUT/smoke/ logs and parity (~3 min)
set -euo pipefail
STEP=${1:?usage: training/run_gpu.sh target|continuations|drafter|parity|smoke [args]}
shift
OUT=${OUT:-training/out/returned}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
# PyTorch's allocator in segments that grow: a generation batch's caches reserved in one piece
# each left 29 GB of the 80 GB H100 reserved but unusable (an out-of-memory error)
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
# the gguf package (tools/hf-to-gguf.py, export.py dequant) is not in the machine's image: it
# travels as wheels (training/README.md says how to fetch them)
# (gguf needs requests and what requests needs: installed from the wheels only where the image
# lacks requests, so its own copies are left alone)
if [ -d training/wheels ]; then
  whl=$(ls training/wheels/gguf-*.whl)
  $PY -c 'import requests' 2>/dev/null || whl=$(ls training/wheels/*.whl)
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
$PY -c 'import torch, transformers, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'
$PY -c 'import gguf; print("gguf", gguf.__file__)' || { echo "the gguf package is missing: carry training/wheels" >&2; exit 4; }

TOK=training/data/tokenizer.json
T=training/out/target

quantize() {  # the trained BF16 target DIR -> DIR/../target.gguf (shipped type) -> DIR/../hf-q
  local hf=$1 dir
  dir=$(dirname "$hf")
  cp "$TOK" "$hf/tokenizer.json"
  $PY tools/hf-to-gguf.py "$hf" "$dir/target.gguf" --outtype "$($PY -c 'import sys; sys.path.insert(0, "training"); import config; print(config.TARGET_OUTTYPE)')"
  $PY training/export.py dequant "$dir/target.gguf" --out "$dir/hf-q" --tokenizer "$TOK" --config "$hf/config.json"
}

need_hfq() {  # on a fresh machine: hf-q from a carried target.gguf
  if [ ! -f $T/hf-q/config.json ]; then
    [ -f $T/target.gguf ] || { echo "no $T/hf-q and no $T/target.gguf to make it from" >&2; exit 5; }
    $PY training/export.py dequant $T/target.gguf --out $T/hf-q --tokenizer "$TOK"
  fi
}

copy() {  # copy DIR/FILE... into $OUT/SUB, files over 15 MiB cut into FILE.part-NN
  local sub=$1 dir=$2
  shift 2
  mkdir -p "$OUT/$sub"
  for f in "$@"; do
    if [ "$(stat -c %s "$dir/$f")" -gt $((15 << 20)) ]; then
      split -b $((15 << 20)) -d -a 2 "$dir/$f" "$OUT/$sub/$f.part-"
    else
      cp "$dir/$f" "$OUT/$sub/"
    fi
  done
  ls -l "$OUT/$sub"
}

case "$STEP" in
  target)
    set +e
    $PY training/train_target.py --sample "$@"
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then exit $rc; fi
    quantize $T/hf
    $PY training/train_target.py --eval-dir $T/hf-q --eval-out $T/quantized.json
    copy target $T target.gguf log.json quantized.json
    copy target $T/hf config.json
    ;;
  continuations)
    need_hfq
    $PY training/gen_continuations.py "$@"
    d=training/out/continuations
    copy continuations "$d" $(cd "$d" && ls)
    $PY training/eval_parity.py --out "$OUT/parity-random"
    ;;
  drafter)
    need_hfq
    set +e
    $PY training/train_drafter.py "$@"
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then exit $rc; fi
    copy drafter training/out/drafter dflash.safetensors log.json
    $PY training/eval_parity.py --out training/out/drafter/parity --target $T/hf-q \
      --drafter training/out/drafter/dflash.safetensors --prompts training/data/tokens/prompts.npz
    copy drafter/parity training/out/drafter/parity torch_block.safetensors parity.json
    ;;
  parity)
    $PY training/eval_parity.py --out "$OUT/parity-random"
    if [ -f training/out/drafter/dflash.safetensors ] && [ -f $T/target.gguf ]; then
      need_hfq
      $PY training/eval_parity.py --out "$OUT/parity-trained" --target $T/hf-q \
        --drafter training/out/drafter/dflash.safetensors --prompts training/data/tokens/prompts.npz
    fi
    ;;
  smoke)
    S=training/out/smoke
    rm -rf "$S"
    $PY training/eval_parity.py --out "$OUT/smoke/parity-random"
    $PY training/train_target.py --out $S/target --seq 256 --batch 8 --max-steps 60 --eval-every 20 \
      --eval-windows 16 --time-budget 60 --call-budget 120 --sample
    quantize $S/target/hf
    $PY training/train_target.py --eval-dir $S/target/hf-q --eval-out $S/target/quantized.json \
      --seq 256 --eval-windows 16
    $PY training/gen_continuations.py --target $S/target/hf-q --out $S/cont --n-train 1000 --n-heldout 40 \
      --batch 256 --part 600 --verify 32
    $PY training/train_drafter.py --target $S/target/hf-q --cont $S/cont --out $S/drafter --batch 8 \
      --max-steps 40 --eval-every 20 --eval-seqs 32 --time-budget 60 --call-budget 120
    # resume path: two more steps from the checkpoint
    $PY training/train_drafter.py --target $S/target/hf-q --cont $S/cont --out $S/drafter --batch 8 \
      --max-steps 42 --eval-every 20 --eval-seqs 32 --time-budget 600 --call-budget 120
    $PY training/eval_parity.py --out $S/parity-trained --target $S/target/hf-q \
      --drafter $S/drafter/dflash.safetensors
    $PY training/export.py assemble --target-gguf $S/target/target.gguf \
      --drafter $S/drafter/dflash.safetensors --tokenizer "$TOK" --out $S/model/qwen3-go > $S/assemble.json
    mkdir -p "$OUT/smoke"
    cp $S/target/log.json "$OUT/smoke/target-log.json"
    cp $S/target/quantized.json "$OUT/smoke/target-quantized.json"
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
