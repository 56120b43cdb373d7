#!/bin/bash
# The default pair's quality and speed on held-out code: every pipeline that
# drafts against the no-draft baseline on the 50 prompts of
# bench/heldout-prompts.txt (function headers from net/http, encoding/json
# and text/template, which the pair never trained on), 128 new tokens each.
# dflash ab prints tau, acceptance by block position, tokens/s of both sides
# measured in the same run, and whether the outputs are identical.
#
#   bash bench/default-pair.sh [BUILD_DIR]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
for a in routed speculative selector-plain routed-match chain-only; do
  echo "== $a.pipeline against no-draft.pipeline"
  "$build/tools/dflash" ab "pipelines/$a.pipeline" pipelines/no-draft.pipeline \
    --prompts bench/heldout-prompts.txt --max-new 128 --plot "$build/ab-$a.png" | sed -n '/^total/,$p'
done
