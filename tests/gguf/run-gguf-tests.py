#!/usr/bin/env python3
"""Convert the default model to GGUF, then run the GGUF tests against it.

    run-gguf-tests.py --converter tools/hf-to-gguf.py --model models/qwen3-go
                      --dflash build/tools/dflash -- test-gguf --tap

Writes go-f32.gguf, go-bf16.gguf and go-f16.gguf (tools/hf-to-gguf.py; the
last with go-f16.dflash.safetensors, the model's sidecar bound by signs too),
go-q8_0.gguf and go-q4_0.gguf, each with its sidecar copy (bound by a sample
of values too) and the folders go-q8_0-deq and go-q4_0-deq (the same
quantized weights dequantized, as F32 safetensors), and go-other.gguf
(go-f32.gguf with the sign of its first embedding value flipped: a model of
the same sizes and other weights) to a scratch folder; then three models
the drafter was not made for, as folders (F32) and Q8_0 files: rand (random
weights of the model's shapes and scales, another seed), perm (the same
weights with the tokenizer's ordinary tokens numbered in reverse, the
embedding's rows moved with them) and cut (the same model's first 6 of its 8
layers), and copies of the Q8_0 sidecar bound by the sample alone
(sample-only) and with a malformed sample (bad-sample-short,
bad-sample-hex). It checks `dflash inspect` on go-bf16.gguf, `dflash
quantize` (Q8_0 and Q4_0 of go-f32.gguf against the gguf package's; its
Q4_K_M of go-f16.gguf, go-q4_k_m.gguf with the sidecar copied, and that
file dequantized by the gguf package as the folder go-q4_k_m-deq) and
`dflash generate` on the files (the folder's text; the drafter found beside
go-f16.gguf; on the quantized files the drafter's output is the same
file's plain decoding, with τ > 1), then runs the test program with DFL_GGUF_DIR and
DFL_GGUF_MODEL set; its exit status is this script's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import gguf
import numpy as np

# greedy prompts for the lossless runs on the quantized files (not the
# drafter's training data: held-out style Go signatures, and one that
# prompt lookup cannot help)
LOSSLESS_PROMPTS = (
    "func (c *conn) Close() error {",
    "func parseHeader(line string) (key, value string, ok bool) {",
    "// Package cache keeps the most recently used entries",
)


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


def tensors_and_values(path):
    r = gguf.GGUFReader(path)
    tensors = {t.name: (int(t.tensor_type), bytes(t.data.tobytes())) for t in r.tensors}
    values = {f.name: [bytes(p.tobytes()) for p in f.parts]
              for f in r.fields.values() if not f.name.startswith("GGUF.")}
    return tensors, values


def quantize(dflash, src, dst, qtype):
    out = subprocess.run([dflash, "quantize", src, dst, "--type", qtype], capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(f"dflash quantize {src} {dst} --type {qtype} failed: {out.stderr}")
    return out


def check_quantize(dflash, tmp):
    """`dflash quantize`: Q8_0 and Q4_0 of the F32 file equal, tensor for
    tensor and byte for byte, the gguf package's (its reference
    quantizers), the metadata copied with the file type set; Q4_K_M of the
    F16 file (go-q4_k_m.gguf) holds Q4_K and Q6_K where the widths allow,
    its sidecar copied beside it; bad input refused by name."""
    f32 = os.path.join(tmp, "go-f32.gguf")
    src_tensors, src_values = tensors_and_values(f32)
    for t, file_type in (("q8_0", 7), ("q4_0", 2)):
        ours = os.path.join(tmp, f"ours-{t}.gguf")
        quantize(dflash, f32, ours, t)
        got, values = tensors_and_values(ours)
        want, _ = tensors_and_values(os.path.join(tmp, f"go-{t}.gguf"))
        if got != want:
            bad = sorted(n for n in want if got.get(n) != want[n])
            sys.exit(f"dflash quantize --type {t}: {len(bad)} tensors differ from the gguf "
                     f"package's, first {bad[:3]}")
        for key, parts in src_values.items():
            if key != "general.file_type" and values.get(key) != parts:
                sys.exit(f"dflash quantize --type {t}: metadata {key} not copied")
        if gguf.GGUFReader(ours).fields["general.file_type"].contents() != file_type:
            sys.exit(f"dflash quantize --type {t}: general.file_type is not {file_type}")
        os.unlink(ours)
    print("# dflash quantize: Q8_0 and Q4_0 byte for byte the gguf package's, metadata copied")

    out = quantize(dflash, os.path.join(tmp, "go-f16.gguf"), os.path.join(tmp, "go-q4_k_m.gguf"),
                   "q4_k_m")
    sidecar = os.path.join(tmp, "go-q4_k_m.dflash.safetensors")
    if not os.path.exists(sidecar) or "copied to" not in out.stderr:
        sys.exit(f"dflash quantize: go-f16's sidecar not copied beside go-q4_k_m.gguf: {out.stderr}")
    types = {}
    for t in gguf.GGUFReader(os.path.join(tmp, "go-q4_k_m.gguf")).tensors:
        types[t.name] = t.tensor_type.name
    # 384-wide rows are not whole K-blocks (Q4_K -> Q4_0, Q6_K -> Q8_0);
    # attn_output (512) and ffn_down (1024) are; layers 0, 3, 6, 7 of 8 get
    # the more bits
    want = {"token_embd.weight": "Q8_0", "blk.1.attn_q.weight": "Q4_0",
            "blk.0.attn_v.weight": "Q8_0", "blk.1.attn_v.weight": "Q4_0",
            "blk.1.attn_output.weight": "Q4_K", "blk.1.ffn_down.weight": "Q4_K",
            "blk.3.ffn_down.weight": "Q6_K", "blk.7.ffn_down.weight": "Q6_K",
            "blk.0.attn_norm.weight": "F32"}
    for name, qtype in want.items():
        if types[name] != qtype:
            sys.exit(f"dflash quantize --type q4_k_m: {name} is {types[name]}, expected {qtype}")
    print("# dflash quantize --type q4_k_m:", ", ".join(f"{n} {q}" for n, q in want.items()))

    for argv, status, words in (
            ([os.path.join(tmp, "go-q8_0.gguf"), "x.gguf", "--type", "q4_0"], 1,
             ("go-q8_0.gguf", "token_embd.weight", "is Q8_0 already")),
            ([f32, f32, "--type", "q4_0"], 1, ("go-f32.gguf", "the output is the input")),
            ([f32, "x.gguf", "--type", "q5_k"], 2, ("q5_k", "q4_k_m")),
            ([f32, "x.gguf"], 2, ("--type is required",)),
            ([os.path.join(tmp, "missing.gguf"), "x.gguf", "--type", "q4_0"], 1,
             ("missing.gguf", "no such file"))):
        out = subprocess.run([os.path.abspath(dflash), "quantize", *argv], capture_output=True,
                             text=True, cwd=tmp)
        lines = out.stderr.strip().splitlines()
        if out.returncode != status or len(lines) != 1 or not all(w in lines[0] for w in words):
            sys.exit(f"dflash quantize {argv}: status {out.returncode}, {out.stderr!r}; "
                     f"expected {status} and {words}")
        if os.path.exists(os.path.join(tmp, "x.gguf")):
            sys.exit(f"dflash quantize {argv} refused, but wrote x.gguf")
    print("# dflash quantize refuses a quantized input, OUT = IN, an unknown type, no type, "
          "a missing file")


def load_converter(hf_to_gguf):
    import importlib.util

    spec = importlib.util.spec_from_file_location("hf_to_gguf", hf_to_gguf)
    conv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conv)
    return conv


def write_dequantized_file(path, model, hf_to_gguf, out_dir):
    """A GGUF file's tensors dequantized by the gguf package, as an F32
    folder under the checkpoint's names (the model's config and tokenizer)."""
    from safetensors.numpy import save_file

    conv = load_converter(hf_to_gguf)
    with open(os.path.join(model, "model.safetensors.index.json")) as f:
        names = json.load(f)["weight_map"]
    reader = gguf.GGUFReader(path)
    by_name = {t.name: t for t in reader.tensors}
    tensors = {}
    for hf in names:
        t = by_name[conv.gguf_name(hf)]
        x = gguf.quants.dequantize(t.data, t.tensor_type)
        tensors[hf] = np.ascontiguousarray(x, dtype=np.float32).reshape(
            [int(d) for d in reversed(t.shape)])
    os.makedirs(out_dir)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    for f in ("config.json", "tokenizer.json"):
        with open(os.path.join(model, f), "rb") as a, open(os.path.join(out_dir, f), "wb") as b:
            b.write(a.read())


def check_lossless(dflash, tmp):
    """The drafter on Q8_0, Q4_0 and Q4_K_M files (its sidecar copy found
    beside each): greedy output identical to the same file's plain
    decoding, by the block alone and by the default route; τ (tokens a
    block round gives) above 1."""
    for t in ("q8_0", "q4_0", "q4_k_m"):
        path = os.path.join(tmp, f"go-{t}.gguf")
        accepted = rounds = 0
        for prompt in LOSSLESS_PROMPTS:
            args = ["--prompt", prompt, "--max-new", "48"]
            plain = generate(dflash, path, "--no-draft", *args)
            for route in ("block", "cost"):
                got = generate(dflash, path, "--route", route, *args)
                if got["new_tokens"] != plain["new_tokens"]:
                    sys.exit(f"dflash generate --route {route} on go-{t}.gguf, prompt {prompt!r}: "
                             f"{got['text']!r}; --no-draft: {plain['text']!r}")
                if route == "block":
                    if got["block_rounds"] != got["rounds"]:
                        sys.exit(f"go-{t}.gguf --route block: {got['block_rounds']} block rounds "
                                 f"of {got['rounds']}")
                    accepted += got["mean_accepted"] * got["rounds"]
                    rounds += got["rounds"]
        tau = accepted / rounds
        print(f"# {t}: the drafter's output is the file's plain decoding ({len(LOSSLESS_PROMPTS)} "
              f"prompts, --route block and cost); tau {tau:.2f} over {rounds} block rounds")
        if tau <= 1.0:
            sys.exit(f"go-{t}.gguf: the drafter gives tau {tau:.2f}, not above 1")


# the drafter on a GPU over a quantized file: the Vulkan drafter beside
# the CPU's target, and the whole loop on a CUDA card (the target's
# matrices dequantized to F32 there)
GPU_PIPELINES = {
    "vulkan": ("tapsource model={path} ! verifier ! fdsink",
               "tapsource model={path} ! queue ! ctxsettle backend=vulkan ! queue ! "
               "dflashblock backend=vulkan ! selector backend=vulkan ! verifier ! fdsink"),
    "cuda": ("tapsource model={path} backend=cuda ! verifier backend=cuda ! fdsink",
             "tapsource model={path} backend=cuda ! queue ! ctxsettle backend=cuda ! queue ! "
             "dflashblock backend=cuda ! selector backend=cuda ! verifier backend=cuda ! fdsink"),
}


def vulkan_driver_held(dflash):
    """The environment that keeps Mesa's Vulkan driver loaded until the tool
    ends, as tests/common/hold-vulkan-driver.h does inside the test
    programs (it says why a sanitizer build needs it): the driver preloaded,
    after the sanitizer's runtime where the tool links one (which must come
    first). Unchanged where Mesa's driver is not installed."""
    libs = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    if "libvulkan_lvp.so " not in libs:
        return None
    linked = subprocess.run(["ldd", dflash], capture_output=True, text=True).stdout
    first = [line.split("=>")[1].split()[0] for line in linked.splitlines()
             if "libasan" in line and "=>" in line]
    return dict(os.environ, LD_PRELOAD=" ".join(first + ["libvulkan_lvp.so"]))


def check_gpu_lossless(dflash, tmp, built):
    """`dflash ab` of plain decoding against the drafter on a GPU on the Q8_0
    and Q4_0 files: the same text (exit 0, identical), τ above 1; a back end
    this build lacks (not in `built`) or this machine lacks is passed over,
    saying why."""
    prompts = os.path.join(tmp, "lossless-prompts.txt")
    with open(prompts, "w") as f:
        f.write("".join(p + "\n" for p in LOSSLESS_PROMPTS))
    for backend, (plain, drafted) in GPU_PIPELINES.items():
        if backend not in built:
            print(f"# {backend}: passed over: this build has no {backend} back end")
            continue
        for t in ("q8_0", "q4_0"):
            path = os.path.join(tmp, f"go-{t}.gguf")
            files = []
            for side, desc in (("plain", plain), ("drafted", drafted)):
                files.append(os.path.join(tmp, f"{backend}-{t}-{side}.pipeline"))
                with open(files[-1], "w") as f:
                    f.write(desc.format(path=path) + "\n")
            out = subprocess.run([dflash, "ab", *files, "--prompts", prompts, "--max-new", "48",
                                  "--json"], capture_output=True, text=True,
                                 env=vulkan_driver_held(dflash) if backend == "vulkan" else None)
            if out.returncode != 0 and "is unavailable" in out.stderr:
                print(f"# {backend}: passed over: {out.stderr.strip()}")
                break
            try:
                o = json.loads(out.stdout)
            except ValueError:
                o = {}
            if out.returncode != 0 or o.get("identical") is not True or o["b"]["tau"] <= 1.0:
                sys.exit(f"dflash ab on go-{t}.gguf with the drafter on {backend}: status "
                         f"{out.returncode}, {out.stdout!r} {out.stderr!r}")
            print(f"# {t}, the drafter on {backend}: the text of plain decoding "
                  f"({len(LOSSLESS_PROMPTS)} prompts); tau {o['b']['tau']:.2f}")


def read_model(model, hf_to_gguf):
    """The folder's config and tensors as F32 arrays, through the converter's reader."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hf_to_gguf", hf_to_gguf)
    conv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conv)
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    tensors = {name: conv.as_f32(dtype, shape, raw).reshape(shape)
               for name, (dtype, shape, raw) in conv.read_checkpoint(model).items()}
    return cfg, tensors


def write_folder(out_dir, cfg, tensors, tokenizer):
    from safetensors.numpy import save_file

    os.makedirs(out_dir)
    save_file({n: np.ascontiguousarray(x, dtype=np.float32) for n, x in tensors.items()},
              os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)


def write_other_models(model, hf_to_gguf, tmp):
    """rand, perm and cut (the module's doc), each a folder other-NAME and
    a file other-NAME-q8_0.gguf."""
    cfg, tensors = read_model(model, hf_to_gguf)
    with open(os.path.join(model, "tokenizer.json"), encoding="utf-8") as f:
        tokenizer = json.load(f)

    # random weights of each tensor's shape, mean and spread
    rng = np.random.default_rng(20260)
    rand = {n: (rng.standard_normal(x.shape) * x.std() + x.mean()).astype(np.float32)
            for n, x in tensors.items()}

    # the ordinary tokens (not the added ones) numbered in reverse
    added = {a["id"] for a in tokenizer.get("added_tokens", [])}
    ordinary = sorted(i for i in tokenizer["model"]["vocab"].values() if i not in added)
    new_id = dict(zip(ordinary, reversed(ordinary)))
    perm_tok = json.loads(json.dumps(tokenizer))
    perm_tok["model"]["vocab"] = {t: new_id.get(i, i) for t, i in tokenizer["model"]["vocab"].items()}
    rows = np.arange(cfg["vocab_size"])
    for old, new in new_id.items():
        rows[new] = old
    perm = dict(tensors)
    perm["model.embed_tokens.weight"] = tensors["model.embed_tokens.weight"][rows]
    if "lm_head.weight" in tensors:
        perm["lm_head.weight"] = tensors["lm_head.weight"][rows]

    # the first 6 layers
    cut_cfg = dict(cfg, num_hidden_layers=6)
    if "layer_types" in cut_cfg:
        cut_cfg["layer_types"] = cfg["layer_types"][:6]
    cut = {n: x for n, x in tensors.items()
           if not n.startswith("model.layers.") or int(n.split(".")[2]) < 6}

    for name, (c, t, tok) in {"rand": (cfg, rand, tokenizer), "perm": (cfg, perm, perm_tok),
                              "cut": (cut_cfg, cut, tokenizer)}.items():
        folder = os.path.join(tmp, f"other-{name}")
        write_folder(folder, c, t, tok)
        subprocess.run([sys.executable, hf_to_gguf, folder,
                        os.path.join(tmp, f"other-{name}-q8_0.gguf"), "--outtype", "q8_0"],
                       check=True)


def check_refused(dflash, tmp):
    """`dflash generate` with the Q8_0 sidecar copy on a model it was not
    made for: exit status 1, one line naming the sidecar, the file and what
    differs."""
    sidecar = os.path.join(tmp, "go-q8_0.dflash.safetensors")
    for name, want in (("rand", "was made for another target than"),
                       ("perm", "was made for another target than"),
                       ("cut", "drafts for a target of 8 layers")):
        target = os.path.join(tmp, f"other-{name}-q8_0.gguf")
        out = subprocess.run([dflash, "generate", "--target", target, "--drafter", sidecar,
                              "--prompt", "x", "--max-new", "1"], capture_output=True, text=True)
        lines = out.stderr.strip().splitlines()
        if out.returncode != 1 or len(lines) != 1 or want not in lines[0] \
                or sidecar not in lines[0] or target not in lines[0]:
            sys.exit(f"dflash generate --drafter {sidecar} on {target}: status {out.returncode}, "
                     f"{out.stderr!r}")
        print(f"# the Q8_0 sidecar on other-{name}-q8_0.gguf:", lines[0])


def write_sample_copies(tmp):
    """Copies of the Q8_0 sidecar whose base_binding holds the sample alone
    (sample-only), and whose trunk_sample is not 256 values of 8 hex digits:
    bad-sample-short (255 values) and bad-sample-hex (a value with a letter
    past f)."""
    import struct

    src = os.path.join(tmp, "go-q8_0.dflash.safetensors")
    with open(src, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    binding = json.loads(header["__metadata__"]["base_binding"])
    sample = binding["trunk_sample"]
    for name, b in (("sample-only", {"trunk_sample": sample}),
                    ("bad-sample-short", dict(binding, trunk_sample=sample[:-8])),
                    ("bad-sample-hex", dict(binding, trunk_sample="0000000g" + sample[8:]))):
        header["__metadata__"]["base_binding"] = json.dumps(b)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(tmp, f"{name}.dflash.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + data)


def write_dequantized(model, hf_to_gguf, qtype, out_dir):
    """model's weights quantized to qtype as the converter quantizes them,
    then dequantized, as an F32 folder: the weights a quantized file's
    logits are measured against"""
    from safetensors.numpy import save_file

    conv = load_converter(hf_to_gguf)
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
    ap.add_argument("--gpu-backends", default="",
                    help="the GPU back ends this build has, comma-separated (cuda,vulkan)")
    ap.add_argument("test", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    test = [a for a in args.test if a != "--"]

    with tempfile.TemporaryDirectory(prefix="dfl-gguf-") as tmp:
        for t in ("f32", "bf16", "f16", "q8_0", "q4_0"):
            # the f16 conversion carries the sidecar along, bound by signs;
            # the quantized ones by the sample of values
            extra = (["--sidecar", os.path.join(args.model, "dflash.safetensors")]
                     if t in ("f16", "q8_0", "q4_0") else [])
            subprocess.run([sys.executable, args.converter, args.model,
                            os.path.join(tmp, f"go-{t}.gguf"), "--outtype", t] + extra, check=True)
        for t, q in (("q8_0", gguf.GGMLQuantizationType.Q8_0),
                     ("q4_0", gguf.GGMLQuantizationType.Q4_0)):
            write_dequantized(args.model, args.converter, q, os.path.join(tmp, f"go-{t}-deq"))
        flip_first_embedding_sign(os.path.join(tmp, "go-f32.gguf"),
                                  os.path.join(tmp, "go-other.gguf"))
        check_inspect(args.dflash, os.path.join(tmp, "go-bf16.gguf"))
        write_other_models(args.model, args.converter, tmp)
        write_sample_copies(tmp)
        check_generate(args.dflash, args.model, tmp)
        check_quantize(args.dflash, tmp)
        write_dequantized_file(os.path.join(tmp, "go-q4_k_m.gguf"), args.model, args.converter,
                               os.path.join(tmp, "go-q4_k_m-deq"))
        check_lossless(args.dflash, tmp)
        check_gpu_lossless(args.dflash, tmp, [b for b in args.gpu_backends.split(",") if b])
        check_refused(args.dflash, tmp)
        env = dict(os.environ, DFL_GGUF_DIR=tmp, DFL_GGUF_MODEL=os.path.abspath(args.model))
        sys.exit(subprocess.run(test, env=env).returncode)


if __name__ == "__main__":
    main()
