#!/usr/bin/env python3
"""Write the default pair in the layout the C side loads: numpy (and the gguf package for
the quantized target), no torch.

    models/<name>/<name>.gguf               the target, quantized (config.TARGET_OUTTYPE) by
                                            tools/hf-to-gguf.py; carries the tokenizer
    models/<name>/<name>.dflash.safetensors the DFlash 2 sidecar, bound to the .gguf
    models/<name>/training.json             provenance: corpus packages, versions, licences,
                                            held-out packages, training summaries

The target is trained in BF16 on the GPU machine, converted there to the quantized GGUF by
tools/hf-to-gguf.py, and dequantized (`dequant`) to an F32 Hugging Face folder, `hf-q`: the
shipped weights exactly, which the continuations, the drafter's training and the parity checks
run on. Only the .gguf comes back (the BF16 checkpoint is too large to); `assemble` here
dequantizes it to the same hf-q, checks that the sidecar is bound to it, and converts hf-q
again with tools/hf-to-gguf.py --sidecar, which writes the shipped .gguf and the sidecar bound
to it; re-quantizing dequantized weights must give the returned file's tensors bit for bit.

Sidecar: tensors named `dflash.<name>` (matrices BF16, vectors — norms, conv
base kernels — F32, selector codebooks F16) and `__metadata__` with
"dflash" (the geometry, exactly config.GEOMETRY_KEYS' keys, windows/no_rope
only where set), "base_binding" {"trunk_hash64": …} (DESIGN.md's FNV-1a over
model.embed_tokens.weight; hf-to-gguf.py adds the fields that bind the .gguf) and,
optionally, "dflash_route".

Commands:
    export.py dequant GGUF --out DIR --tokenizer tok.json
        the GGUF's weights as an F32 Hugging Face folder (config.json, generation_config.json,
        tokenizer.json, model.safetensors)
    export.py assemble --target-gguf G --drafter D.safetensors --tokenizer tok.json --out models/NAME
                       [--corpus-manifest M --target-log L1 --drafter-log L2]
        G: the quantized target from the GPU machine; D: train_drafter.py's sidecar (bound to
        G dequantized)
    export.py fake --out DIR [--tokenizer tok.json] [--seed S]
        a random target + drafter of the real shapes through the same path (tests the layout
        without a GPU)
    export.py check DIR
        sizes, types, binding and geometry of an assembled folder

The safetensors files are written here byte by byte (8-byte header length,
JSON header, data), so nothing depends on the safetensors package version.
"""
import argparse
import hashlib
import importlib.util
import json
import re
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
HF_TO_GGUF = os.path.join(REPO, "tools", "hf-to-gguf.py")
sys.path.insert(0, HERE)
import config as C  # noqa: E402

DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2),
          "I32": (np.int32, 4), "I64": (np.int64, 8), "U16": (np.uint16, 2), "U8": (np.uint8, 1)}


# ---------------------------------------------------------------- safetensors

def bf16_bits(x):
    """float array -> uint16 BF16 bits, round to nearest even (as torch does)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode(dtype, a):
    """(dtype, float array) -> raw little-endian bytes."""
    if dtype == "BF16":
        return bf16_bits(a).astype("<u2").tobytes()
    np_t = {"F32": "<f4", "F16": "<f2", "I32": "<i4", "I64": "<i8", "U16": "<u2", "U8": "u1"}[dtype]
    return np.ascontiguousarray(a).astype(np_t).tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> (dtype, shape, raw bytes) or (dtype, array); metadata: str -> str."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        t = tensors[name]
        if len(t) == 2:
            dtype, a = t
            shape, raw = list(np.shape(a)), encode(dtype, a)
        else:
            dtype, shape, raw = t
            shape = list(shape)
        n = int(np.prod(shape)) if shape else 1
        assert len(raw) == n * DTYPES[dtype][1], (name, dtype, shape, len(raw))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_raw(path):
    """-> (metadata, {name: (dtype, shape, raw bytes)})."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", None) or {}
    base = 8 + n
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), blob[base + a:base + b])
    return meta, out


def to_f32(dtype, shape, raw):
    if dtype == "BF16":
        return bf16_to_f32(np.frombuffer(raw, "<u2")).reshape(shape)
    return np.frombuffer(raw, DTYPES[dtype][0]).astype(np.float32).reshape(shape)


def read_f32(path):
    meta, raw = read_raw(path)
    return meta, {k: to_f32(*v) for k, v in raw.items()}


def target_files(folder):
    idx = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
        return [os.path.join(folder, f) for f in files]
    return [os.path.join(folder, "model.safetensors")]


def read_target_raw(folder):
    out = {}
    for f in target_files(folder):
        out.update(read_raw(f)[1])
    return out


# ---------------------------------------------------------------- the binding

def fnv1a(h, data):
    # byte by byte as DESIGN.md defines it; vectorised by 8-byte-free chunks is
    # not possible (the multiply depends on every previous byte), so plain Python:
    # at most 4 MiB per tensor, a few seconds.
    p = 0x100000001B3
    for b in data:
        h = ((h ^ b) * p) & 0xFFFFFFFFFFFFFFFF
    return h


def trunk_hash64(folder, tied=None):
    """DESIGN.md's trunk_hash64 of a target folder (reference.py's `trunk_hash64`)."""
    if tied is None:
        tied = json.load(open(os.path.join(folder, "config.json"))).get("tie_word_embeddings", False)
    raw = read_target_raw(folder)
    h = 0xCBF29CE484222325
    for name in ["model.embed_tokens.weight"] + ([] if tied else ["lm_head.weight"]):
        data = raw[name][2]
        if len(data) <= 2 << 20:
            h = fnv1a(h, data)
        else:
            h = fnv1a(fnv1a(h, data[:1 << 20]), data[-(1 << 20):])
    return f"{h:016x}"


# ---------------------------------------------------------------- the sidecar

def geometry_record(g):
    """The "dflash" record: exactly the geometry keys, optional ones only where set."""
    rec = {}
    for k in C.GEOMETRY_KEYS:
        if k in ("windows", "no_rope"):
            if g.get(k):
                rec[k] = [int(x) for x in g[k]]
            continue
        v = g[k]
        rec[k] = [int(x) for x in v] if k == "taps" else (float(v) if k in ("rope_theta", "eps") else int(v))
    extra = set(g) - set(C.GEOMETRY_KEYS)
    assert not extra, f"unknown geometry keys {extra}"
    return rec


def expected_shapes(g):
    h, i, hd = g["hidden"], g["intermediate"], g["head_dim"]
    q, kv = g["heads"] * hd, g["kv_heads"] * hd
    s = {"fc.weight": (h, len(g["taps"]) * h), "hidden_norm.weight": (h,), "norm.weight": (h,)}
    for l in range(g["layers"]):
        p = f"layers.{l}."
        s.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                  p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                  p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                  p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                  p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
                  p + "mlp.down_proj.weight": (h, i)})
        if g["conv_kernel"]:
            kn, groups = g["conv_kernel"], h // g["conv_group"]
            for w in ("attention_conv", "mlp_conv"):
                s[p + w + ".base_kernel"] = (2, kn, h)
                s[p + w + ".kernel_projection.weight"] = (2 * kn * groups, h)
    if g["selector_rank"]:
        r = g["selector_rank"]
        s["candidate_selector.hidden_projection.weight"] = (r, h)
        s["candidate_selector.predecessor_codebook"] = (g["vocab"], r)
        s["candidate_selector.successor_codebook"] = (g["vocab"], r)
    return s


def storage_dtype(name, shape, matrix_dtype="BF16"):
    if name.endswith("_codebook"):
        return "F16"
    if len(shape) == 1 or name.endswith("base_kernel"):
        return "F32"
    return matrix_dtype


def sidecar_tensors(weights, g, matrix_dtype="BF16"):
    """Unprefixed float weights -> the sidecar's {dflash.name: (dtype, array)}, checked."""
    want = expected_shapes(g)
    missing, extra = set(want) - set(weights), set(weights) - set(want)
    assert not missing and not extra, f"drafter weights: missing {sorted(missing)}, extra {sorted(extra)}"
    out = {}
    for name, shape in want.items():
        a = np.asarray(weights[name], np.float32)
        if name.endswith("base_kernel") and a.size == int(np.prod(shape)):
            a = a.reshape(shape)
        assert a.shape == tuple(shape), (name, a.shape, shape)
        assert np.isfinite(a).all(), f"{name} is not finite"
        out["dflash." + name] = (storage_dtype(name, shape, matrix_dtype), a)
    return out


def write_sidecar(path, weights, g, trunk_hash, route=None, matrix_dtype="BF16", extra_meta=None):
    """The DFlash 2 sidecar from unprefixed float32 weights (as the PyTorch module names them)."""
    meta = {"dflash": json.dumps(geometry_record(g)),
            "base_binding": json.dumps({"trunk_hash64": trunk_hash})}
    if route is not None:
        meta["dflash_route"] = json.dumps(route)
    if extra_meta:
        meta.update(extra_meta)
    write_safetensors(path, sidecar_tensors(weights, g, matrix_dtype), meta)
    return path


def stored_weights(weights, g, matrix_dtype="BF16"):
    """The float32 values the sidecar will hold (BF16 / F16 rounding applied)."""
    out = {}
    for name, (dtype, a) in sidecar_tensors(weights, g, matrix_dtype).items():
        out[name[len("dflash."):]] = to_f32(dtype, a.shape, encode(dtype, a))
    return out


# ---------------------------------------------------------------- the target

def hf_config(t=C.TARGET):
    """config.json as transformers 5.17 writes a Qwen3ForCausalLM's (the keys and order of
    tests/fixtures/qwen3/*/config.json), for the fake pair; the real one comes from
    save_pretrained."""
    L = t["num_hidden_layers"]
    return {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": t["bos_token_id"], "dtype": "bfloat16", "eos_token_id": t["eos_token_id"],
        "head_dim": t["head_dim"], "hidden_act": "silu", "hidden_size": t["hidden_size"],
        "initializer_range": t["initializer_range"], "intermediate_size": t["intermediate_size"],
        "layer_types": ["full_attention"] * L,
        "max_position_embeddings": t["max_position_embeddings"], "max_window_layers": 28,
        "model_type": "qwen3", "num_attention_heads": t["num_attention_heads"],
        "num_hidden_layers": L, "num_key_value_heads": t["num_key_value_heads"],
        "pad_token_id": None, "rms_norm_eps": t["rms_norm_eps"],
        "rope_parameters": {"rope_theta": t["rope_theta"], "rope_type": "default"},
        "sliding_window": None, "tie_word_embeddings": t["tie_word_embeddings"],
        "transformers_version": "5.17.0", "use_cache": True, "use_sliding_window": False,
        "vocab_size": t["vocab_size"]}


def generation_config(eos=C.EOT):
    return {"_from_model_config": True, "bos_token_id": eos, "eos_token_id": eos,
            "output_attentions": False, "output_hidden_states": False,
            "transformers_version": "5.17.0", "use_cache": True}


def check_target_config(cfg):
    """What our C target refuses, refused here first."""
    assert cfg.get("model_type") == "qwen3" and "Qwen3ForCausalLM" in cfg.get("architectures", [])
    assert not cfg.get("use_sliding_window"), "sliding window set"
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    assert rp.get("rope_type", rp.get("type", "default")) == "default", f"rope scaling {rp}"
    assert cfg.get("attention_dropout", 0.0) == 0.0, "attention_dropout left on"
    for k in ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size",
              "num_attention_heads", "num_key_value_heads", "head_dim", "tie_word_embeddings"):
        assert cfg[k] == C.TARGET[k], f"config.json {k} = {cfg[k]}, config.py says {C.TARGET[k]}"


def write_target_f32(tensors, out):
    """F32 target tensors into model.safetensors, or shards below 2 GiB with an index."""
    write_safetensors(os.path.join(out, "model.safetensors"),
                      {n: ("F32", a) for n, a in tensors.items()}, {"format": "pt"})
    return ["model.safetensors"]


# ---------------------------------------------------------------- GGUF

def _gguf():
    try:
        import gguf
    except ImportError:
        sys.exit("export.py: the gguf package is missing (pip install gguf; on the GPU machine it is "
                 "carried as a wheel, training/README.md)")
    return gguf


def _hf_to_gguf_names():
    """GGUF name -> Hugging Face name, from tools/hf-to-gguf.py's own tables (read, not copied)."""
    spec = importlib.util.spec_from_file_location("hf_to_gguf", HF_TO_GGUF)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    names = {g: h for h, g in mod.MODEL_NAMES.items()}
    for h, g in mod.LAYER_NAMES.items():
        names["blk.{}." + g] = "model.layers.{}." + h
    return names


def gguf_tensors(path):
    """-> {GGUF name: (type name, HF-order shape, raw bytes)} of a GGUF file."""
    gguf = _gguf()
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        out[t.name] = (t.tensor_type.name, shape, np.ascontiguousarray(t.data).tobytes())
    return out


def gguf_config(path):
    """The qwen3.* sizes of a GGUF, as config.TARGET's keys."""
    gguf = _gguf()
    r = gguf.GGUFReader(path)

    def val(key):
        f = r.get_field(key)
        if f is None:
            sys.exit(f"export.py: {path} has no {key}")
        return f.contents()
    return {"hidden_size": val("qwen3.embedding_length"), "num_hidden_layers": val("qwen3.block_count"),
            "intermediate_size": val("qwen3.feed_forward_length"),
            "num_attention_heads": val("qwen3.attention.head_count"),
            "num_key_value_heads": val("qwen3.attention.head_count_kv"),
            "head_dim": val("qwen3.attention.key_length"),
            "vocab_size": len(r.get_field("tokenizer.ggml.tokens").data)}


def dequantize_gguf(path):
    """-> {HF name: float32 array} of a Qwen3 GGUF (the values the C target computes with)."""
    gguf = _gguf()
    names = _hf_to_gguf_names()
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk":
            hf = names["blk.{}." + ".".join(parts[2:])].format(int(parts[1]))
        else:
            hf = names[t.name]
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        out[hf] = np.ascontiguousarray(a, np.float32).reshape(shape)
    return out


def dequant(gguf_path, out, tokenizer, cfg=None):
    """The GGUF's weights, dequantized, as an F32 Hugging Face folder."""
    sizes = gguf_config(gguf_path)
    for k, v in sizes.items():
        assert v == C.TARGET[k], f"{gguf_path}: {k} = {v}, config.py says {C.TARGET[k]}"
    cfg = dict(cfg or hf_config())
    cfg["dtype"] = "float32"
    check_target_config(cfg)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    w = dequantize_gguf(gguf_path)
    if cfg["tie_word_embeddings"]:
        assert "lm_head.weight" not in w
    write_target_f32(w, out)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(generation_config(), f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copyfile(tokenizer, os.path.join(out, "tokenizer.json"))
    return {"folder": out, "tensors": len(w), "trunk_hash64": trunk_hash64(out, cfg["tie_word_embeddings"]),
            "gguf_sha256": sha256_of(gguf_path)}


def convert(model_dir, out_gguf, outtype=C.TARGET_OUTTYPE, sidecar=None):
    """tools/hf-to-gguf.py MODEL_DIR OUT --outtype T [--sidecar S] (S is copied, bound, to
    OUT without .gguf + .dflash.safetensors)."""
    cmd = [sys.executable, HF_TO_GGUF, model_dir, out_gguf, "--outtype", outtype]
    if sidecar:
        cmd += ["--sidecar", sidecar]
    subprocess.run(cmd, check=True)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- commands

def provenance(corpus_manifest=None, target_log=None, drafter_log=None):
    """training.json: where the pair comes from (small: no file lists, no curves)."""
    rec = {"name": C.NAME, "made_by": "training/ (corpus.py, tokenizer.py, train_target.py, "
                                      "gen_continuations.py, train_drafter.py, export.py)"}
    if corpus_manifest and os.path.exists(corpus_manifest):
        m = json.load(open(corpus_manifest))
        rec["corpus"] = {"sources": [{k: v for k, v in src.items() if k != "left_out_for_licence"}
                                     | {"left_out_for_licence": len(src["left_out_for_licence"])}
                                     for src in m["sources"]],
                         "rules": m["rules"],
                         "splits": {k: {kk: vv for kk, vv in v.items() if kk not in ("paths", "package_list")}
                                    for k, v in m["splits"].items()}}
    for key, path in (("target", target_log), ("drafter", drafter_log)):
        if path and os.path.exists(path):
            summ = json.load(open(path))["summary"]
            rec[key] = {k: v for k, v in summ.items() if k not in ("files", "sample")}
    if target_log:
        # the shipped (quantized) weights' held-out loss, run_gpu.sh's quantized.json beside the log
        q = os.path.join(os.path.dirname(target_log), "quantized.json")
        if os.path.exists(q) and "target" in rec:
            rec["target"]["quantized"] = {k: v for k, v in json.load(open(q)).items() if k != "sample"}
    return rec


def assemble(target_gguf, drafter, tokenizer, out, info=None, keep_hfq=None):
    """models/<name>/: the .gguf and its sidecar as tools/hf-to-gguf.py writes them from the
    returned target dequantized, checked against it, and training.json."""
    name = os.path.basename(os.path.normpath(out))
    # named as the model (hf-to-gguf.py writes the folder's name as general.name)
    work_parent = out.rstrip("/") + ".hf-q"
    work = os.path.join(work_parent, name)
    dq = dequant(target_gguf, work, tokenizer)
    meta, _ = read_raw(drafter)
    g = json.loads(meta["dflash"])
    was = json.loads(meta.get("base_binding", "{}")).get("trunk_hash64")
    if was != dq["trunk_hash64"]:
        sys.exit(f"export.py: {drafter} is bound to {was}; {target_gguf} dequantized hashes to "
                 f"{dq['trunk_hash64']}: the drafter was trained against another target")
    assert g["hidden"] == C.TARGET["hidden_size"] and g["vocab"] == C.TARGET["vocab_size"]
    assert g["target_layers"] == C.TARGET["num_hidden_layers"]
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    gpath = os.path.join(out, name + ".gguf")
    convert(work, gpath, C.TARGET_OUTTYPE, sidecar=drafter)
    # re-quantizing the dequantized weights must give the very blocks that came back
    want, got = gguf_tensors(target_gguf), gguf_tensors(gpath)
    assert set(want) == set(got), set(want) ^ set(got)
    differ = [n for n in want if want[n] != got[n]]
    assert not differ, f"re-quantized tensors differ from {target_gguf}: {differ[:5]}"
    if info is not None:
        info = dict(info, target_gguf_sha256=sha256_of(gpath), returned_gguf_sha256=dq["gguf_sha256"])
        # the machines' own folders are nobody else's business: paths are
        # kept from the repository's top on
        text = re.sub(r'"/[^"]*?/((?:training|models|tests)/[^"]*)"', r'"\1"', json.dumps(info, indent=1))
        with open(os.path.join(out, "training.json"), "w") as f:
            f.write(text + "\n")
    if keep_hfq:
        if os.path.exists(keep_hfq):
            shutil.rmtree(keep_hfq)
        shutil.move(work, keep_hfq)
    shutil.rmtree(work_parent)
    return check(out)


def check(folder):
    """Sizes, types, geometry and binding of an assembled folder; returns a summary."""
    name = os.path.basename(os.path.normpath(folder))
    gpath = os.path.join(folder, name + ".gguf")
    spath = os.path.join(folder, name + ".dflash.safetensors")
    files = sorted(os.listdir(folder))
    # beside the pair: its provenance and its card (MODEL_CARD.md, curves as PNG and CSV)
    extra = [f for f in files if f not in (name + ".gguf", name + ".dflash.safetensors", "training.json",
                                           "MODEL_CARD.md") and not f.endswith((".png", ".csv"))]
    assert not extra, f"{folder}: unexpected files {extra}"
    sizes = {f: os.path.getsize(os.path.join(folder, f)) for f in files}
    total = sum(sizes.values())
    assert total <= C.TOTAL_LIMIT, f"{folder} holds {total} bytes, past 64 MiB"
    sizes_cfg = gguf_config(gpath)
    for k, v in sizes_cfg.items():
        assert v == C.TARGET[k], f"{gpath}: {k} = {v}, config.py says {C.TARGET[k]}"
    tensors = gguf_tensors(gpath)
    qtype = C.TARGET_OUTTYPE.upper()
    params = 0
    for n, (t, shape, _) in tensors.items():
        params += int(np.prod(shape))
        assert t == (qtype if len(shape) == 2 else "F32"), (n, t, shape)
    assert params == C.target_params(), (params, C.target_params())
    meta, draw = read_raw(spath)
    g = json.loads(meta["dflash"])
    assert set(g) <= set(C.GEOMETRY_KEYS) and set(C.GEOMETRY_KEYS) - set(g) <= {"windows", "no_rope"}
    assert {k: v for k, v in g.items() if k in C.DRAFTER} == geometry_record(C.DRAFTER), g
    want = expected_shapes(g)
    assert set(draw) == {"dflash." + n for n in want}, set(draw) ^ {"dflash." + n for n in want}
    for n, shape in want.items():
        dtype, s, _ = draw["dflash." + n]
        assert tuple(s) == tuple(shape), (n, s, shape)
        assert dtype == storage_dtype(n, shape), (n, dtype)
    binding = json.loads(meta["base_binding"])
    # trunk_hash64: the dequantized embedding's F32 bytes, which the drafter was trained on
    emb = dequantize_gguf_tensor(gpath, "token_embd.weight").tobytes()
    h = 0xCBF29CE484222325
    h = fnv1a(fnv1a(h, emb[:1 << 20]), emb[-(1 << 20):]) if len(emb) > 2 << 20 else fnv1a(h, emb)
    assert binding["trunk_hash64"] == f"{h:016x}", f"sidecar bound to {binding['trunk_hash64']}, " \
                                                   f"the .gguf's dequantized embedding is {h:016x}"
    assert "trunk_signs64" in binding, "the sidecar lacks hf-to-gguf.py's binding to the .gguf"
    return {"folder": folder, "files": sizes, "total_bytes": total,
            "total_mib": round(total / C.MIB, 2), "target_type": qtype, "target_params": params,
            "binding": binding, "geometry": g}


def dequantize_gguf_tensor(path, gguf_name):
    gguf = _gguf()
    for t in gguf.GGUFReader(path).tensors:
        if t.name == gguf_name:
            shape = tuple(int(x) for x in reversed(t.shape.tolist()))
            return np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(shape)
    raise KeyError(gguf_name)


def random_target(folder, tokenizer, seed=0):
    """A random BF16 target of config.TARGET's shapes, as train_target.py saves one."""
    rng = np.random.default_rng(seed)
    t = C.TARGET
    h, L, v = t["hidden_size"], t["num_hidden_layers"], t["vocab_size"]
    q, kv = t["num_attention_heads"] * t["head_dim"], t["num_key_value_heads"] * t["head_dim"]
    w = {"model.embed_tokens.weight": rng.normal(0, 0.02, (v, h)).astype(np.float32),
         "model.norm.weight": np.ones(h, np.float32)}
    for l in range(L):
        p = f"model.layers.{l}."
        for n, s in (("self_attn.q_proj", (q, h)), ("self_attn.k_proj", (kv, h)),
                     ("self_attn.v_proj", (kv, h)), ("self_attn.o_proj", (h, q)),
                     ("mlp.gate_proj", (t["intermediate_size"], h)),
                     ("mlp.up_proj", (t["intermediate_size"], h)),
                     ("mlp.down_proj", (h, t["intermediate_size"]))):
            w[p + n + ".weight"] = rng.normal(0, 1 / np.sqrt(s[1]), s).astype(np.float32)
        for n, k in (("input_layernorm", h), ("post_attention_layernorm", h),
                     ("self_attn.q_norm", t["head_dim"]), ("self_attn.k_norm", t["head_dim"])):
            w[p + n + ".weight"] = np.ones(k, np.float32)
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"),
                      {n: ("BF16", a) for n, a in w.items()}, {"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf_config(), f, indent=2)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump(generation_config(), f, indent=2)
    shutil.copyfile(tokenizer, os.path.join(folder, "tokenizer.json"))


def fake(out, tokenizer=None, seed=0):
    """A random pair with the real shapes and types, through the real path: a BF16 target
    converted to the quantized GGUF (what the GPU's target step returns), dequantized, a
    random drafter bound to that, assembled."""
    if tokenizer is None:
        tokenizer = os.path.join(HERE, "data", "tokenizer.json")
    src = out.rstrip("/") + ".fake-src"
    if os.path.exists(src):
        shutil.rmtree(src)
    random_target(os.path.join(src, "hf"), tokenizer, seed)
    returned = os.path.join(src, "target.gguf")
    convert(os.path.join(src, "hf"), returned)
    dq = dequant(returned, os.path.join(src, "hf-q"), tokenizer)
    rng = np.random.default_rng(seed + 1)
    g = dict(C.DRAFTER)
    dw = {}
    for n, s in expected_shapes(g).items():
        if len(s) == 1:
            dw[n] = np.ones(s)
        elif n.endswith("base_kernel"):
            b = np.zeros(s)
            b[:, 0, :] = 1.0
            dw[n] = b
        else:
            dw[n] = rng.normal(0, 1 / np.sqrt(s[1]), s)
    side = os.path.join(src, "dflash.safetensors")
    write_sidecar(side, dw, g, dq["trunk_hash64"])
    summary = assemble(returned, side, tokenizer, out, info={"name": C.NAME, "fake": True})
    shutil.rmtree(src)
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a0 = sub.add_parser("dequant")
    a0.add_argument("gguf")
    a0.add_argument("--out", required=True)
    a0.add_argument("--tokenizer", required=True)
    a0.add_argument("--config", help="the BF16 folder's config.json to keep (default: config.py's)")
    a1 = sub.add_parser("assemble")
    a1.add_argument("--target-gguf", required=True)
    a1.add_argument("--drafter", required=True)
    a1.add_argument("--tokenizer", required=True)
    a1.add_argument("--out", required=True)
    a1.add_argument("--keep-hfq", help="keep the dequantized folder there (check_parity.py's target)")
    a1.add_argument("--corpus-manifest", help="training/data/corpus/manifest.json (into training.json)")
    a1.add_argument("--target-log", help="train_target.py's log.json")
    a1.add_argument("--drafter-log", help="train_drafter.py's log.json")
    a2 = sub.add_parser("fake")
    a2.add_argument("--out", required=True)
    a2.add_argument("--tokenizer")
    a2.add_argument("--seed", type=int, default=0)
    a3 = sub.add_parser("check")
    a3.add_argument("folder")
    a = ap.parse_args()
    if a.cmd == "dequant":
        cfg = json.load(open(a.config)) if a.config else None
        s = dequant(a.gguf, a.out, a.tokenizer, cfg)
    elif a.cmd == "assemble":
        info = provenance(a.corpus_manifest, a.target_log, a.drafter_log)
        s = assemble(a.target_gguf, a.drafter, a.tokenizer, a.out, info=info, keep_hfq=a.keep_hfq)
    elif a.cmd == "fake":
        s = fake(a.out, a.tokenizer, a.seed)
    else:
        s = check(a.folder)
    print(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
