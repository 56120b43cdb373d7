#!/usr/bin/env python3
"""Convert the default model to GGUF, then run the GGUF tests against it.

    run-gguf-tests.py --converter tools/hf-to-gguf.py --model models/qwen3-go
                      --dflash build/tools/dflash -- test-gguf --tap

Writes go-f32.gguf, go-bf16.gguf and go-f16.gguf (tools/hf-to-gguf.py; the
last with go-f16.dflash.safetensors, the model's sidecar bound by signs too),
go-q8_0.gguf and go-q4_0.gguf with the folders go-q8_0-deq and go-q4_0-deq
(the same quantized weights dequantized, as F32 safetensors), and
go-other.gguf (go-f32.gguf with the sign of its first embedding value
flipped: a model of the same sizes and other weights) to a scratch folder,
checks `dflash inspect` on go-bf16.gguf and `dflash generate` on the files
(the folder's text; the drafter found beside go-f16.gguf), then runs the
test program with DFL_GGUF_DIR and DFL_GGUF_MODEL set; its exit status is
this script's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import gguf


def flip_first_embedding_sign(src, dst):
    reader = gguf.GGUFReader(src)
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert embd.tensor_type == gguf.GGMLQuantizationType.F32
    with open(src, "rb") as f:
        data = bytearray(f.read())
    data[embd.data_offset + 3] ^= 0x80
    with open(dst, "wb") as f:
        f.write(data)


def check_inspect(dflash, path):
    out = subprocess.run([dflash, "inspect", "--tensors", path], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dflash inspect {path} failed: {out.stderr}")
    for want in ("general.architecture", "qwen3", "tokenizer.ggml.tokens",
                 "token_embd.weight", "BF16", "[8192, 384]", "blk.7.ffn_down.weight",
                 "8 layers", "vocab 8192"):
        if want not in out.stdout:
            sys.exit(f"dflash inspect {path}: no '{want}' in:\n{out.stdout}")
    print("# dflash inspect on a .gguf shows its metadata and tensors")


def generate(dflash, target, *extra):
    out = subprocess.run([dflash, "generate", "--target", target, "--prompt", "func main() {",
                          "--max-new", "24", "--json"] + list(extra), capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dflash generate --target {target} {' '.join(extra)} failed: {out.stderr}")
    return json.loads(out.stdout)


def check_generate(dflash, model, tmp):
    """The whole pipeline (the model loader, tapsource's tokenizer, the
    verifier) on a .gguf: the folder's text, and a drafter found beside it."""
    want = generate(dflash, model, "--no-draft")
    for t in ("f32", "bf16"):
        got = generate(dflash, os.path.join(tmp, f"go-{t}.gguf"), "--no-draft")
        if (got["new_tokens"], got["text"]) != (want["new_tokens"], want["text"]):
            sys.exit(f"dflash generate on go-{t}.gguf: {got['text']!r}, the folder: {want['text']!r}")
    f16 = os.path.join(tmp, "go-f16.gguf")
    plain = generate(dflash, f16, "--no-draft")
    drafted = generate(dflash, f16, "--route", "block")
    if drafted["block_rounds"] == 0 or drafted["new_tokens"] != plain["new_tokens"]:
        sys.exit(f"dflash generate on go-f16.gguf with go-f16.dflash.safetensors: {drafted}")
    print("# dflash generate on a .gguf gives the folder's text; beside go-f16.gguf, its drafter drafts")

    # a cut file: exit status 1, one line naming the file and what is wrong
    cut = os.path.join(tmp, "cut.gguf")
    with open(os.path.join(tmp, "go-bf16.gguf"), "rb") as f, open(cut, "wb") as g:
        g.write(f.read(100000))
    out = subprocess.run([dflash, "generate", "--target", cut, "--prompt", "x", "--max-new", "1"],
                         capture_output=True, text=True)
    lines = out.stderr.strip().splitlines()
    if out.returncode != 1 or len(lines) != 1 or cut not in lines[0] \
            or ": truncated: " not in lines[0]:
        sys.exit(f"dflash generate on a cut .gguf: status {out.returncode}, {out.stderr!r}")
    print("# dflash generate on a cut .gguf:", lines[0])


def write_dequantized(model, hf_to_gguf, qtype, out_dir):
    """model's weights quantized to qtype as the converter quantizes them,
    then dequantized, as an F32 folder: the weights a quantized file's
    logits are measured against"""
    import importlib.util
    from safetensors.numpy import save_file

    spec = importlib.util.spec_from_file_location("hf_to_gguf", hf_to_gguf)
    conv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conv)
    tensors = {}
    for name, (dtype, shape, raw) in conv.read_checkpoint(model).items():
        x = conv.as_f32(dtype, shape, raw)
        if len(shape) == 2:
            x = gguf.quants.dequantize(gguf.quants.quantize(x, qtype), qtype)
        tensors[name] = x.astype("float32").reshape(shape)
    os.makedirs(out_dir)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    for f in ("config.json", "tokenizer.json"):
        with open(os.path.join(model, f), "rb") as a, open(os.path.join(out_dir, f), "wb") as b:
            b.write(a.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--converter", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dflash", required=True)
    ap.add_argument("test", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    test = [a for a in args.test if a != "--"]

    with tempfile.TemporaryDirectory(prefix="dfl-gguf-") as tmp:
        for t in ("f32", "bf16", "f16", "q8_0", "q4_0"):
            # the f16 conversion carries the sidecar along, bound by signs
            extra = ["--sidecar", os.path.join(args.model, "dflash.safetensors")] if t == "f16" else []
            subprocess.run([sys.executable, args.converter, args.model,
                            os.path.join(tmp, f"go-{t}.gguf"), "--outtype", t] + extra, check=True)
        for t, q in (("q8_0", gguf.GGMLQuantizationType.Q8_0),
                     ("q4_0", gguf.GGMLQuantizationType.Q4_0)):
            write_dequantized(args.model, args.converter, q, os.path.join(tmp, f"go-{t}-deq"))
        flip_first_embedding_sign(os.path.join(tmp, "go-f32.gguf"),
                                  os.path.join(tmp, "go-other.gguf"))
        check_inspect(args.dflash, os.path.join(tmp, "go-bf16.gguf"))
        check_generate(args.dflash, args.model, tmp)
        env = dict(os.environ, DFL_GGUF_DIR=tmp, DFL_GGUF_MODEL=os.path.abspath(args.model))
        sys.exit(subprocess.run(test, env=env).returncode)


if __name__ == "__main__":
    main()
