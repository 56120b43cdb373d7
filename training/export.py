#!/usr/bin/env python3
"""Write the default pair in the layout the C side loads: numpy only (no torch).

    models/<name>/config.json               the target's, as transformers 5 wrote it
    models/<name>/generation_config.json    eos = <|endoftext|> (0)
    models/<name>/tokenizer.json
    models/<name>/model-0000K-of-0000N.safetensors + model.safetensors.index.json
                                            BF16, every shard < 15 MiB
    models/<name>/dflash.safetensors        the DFlash 2 sidecar
    models/<name>/training.json             provenance: corpus package, version, licence,
                                            held-out packages, training summaries

Sidecar: tensors named `dflash.<name>` (matrices BF16, vectors — norms, conv
base kernels — F32, selector codebooks F16) and `__metadata__` with
"dflash" (the geometry, exactly config.GEOMETRY_KEYS' keys, windows/no_rope
only where set), "base_binding" {"trunk_hash64": …} (DESIGN.md's FNV-1a over
model.embed_tokens.weight) and, optionally, "dflash_route".

Commands:
    export.py assemble --target-dir T --drafter D.safetensors --tokenizer tok.json --out models/NAME
                       [--corpus-manifest M --target-log L1 --drafter-log L2]
        T: the target as train_target.py saved it (config.json, shards or one file)
        D: train_drafter.py's dflash.safetensors (re-bound here to the shipped target)
    export.py fake --out DIR [--tokenizer tok.json] [--seed S]
        a random target + drafter of the real shapes (tests the layout without a GPU)
    export.py check DIR
        sizes, dtypes, binding and geometry of an assembled folder

The safetensors files are written here byte by byte (8-byte header length,
JSON header, data), so nothing depends on the safetensors package version.
"""
import argparse
import json
import re
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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


def write_shards(raw, out, limit=C.SHARD_BYTES):
    """Target tensors (raw, any dtype) into model-0000K-of-0000N.safetensors below `limit` bytes,
    in name order, with model.safetensors.index.json (one file, no index, when it fits)."""
    names = sorted(raw)
    groups, cur, size = [], [], 0
    for n in names:
        b = len(raw[n][2])
        assert b < limit, f"{n} alone is {b} bytes"
        if cur and size + b > limit:
            groups.append(cur)
            cur, size = [], 0
        cur.append(n)
        size += b
    groups.append(cur)
    meta = {"format": "pt"}
    if len(groups) == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), {n: raw[n] for n in names}, meta)
        return ["model.safetensors"]
    files, wmap = [], {}
    for k, g in enumerate(groups):
        f = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        write_safetensors(os.path.join(out, f), {n: raw[n] for n in g}, meta)
        files.append(f)
        wmap.update({n: f for n in g})
    total = sum(len(raw[n][2]) for n in names)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, fh, indent=2)
    return files


# ---------------------------------------------------------------- commands

def provenance(corpus_manifest=None, target_log=None, drafter_log=None):
    """training.json: where the pair comes from (small: no file lists, no curves)."""
    rec = {"name": C.NAME, "made_by": "training/ (corpus.py, tokenizer.py, train_target.py, "
                                      "gen_continuations.py, train_drafter.py, export.py)"}
    if corpus_manifest and os.path.exists(corpus_manifest):
        m = json.load(open(corpus_manifest))
        rec["corpus"] = {"source": m["source"], "licence": {k: v for k, v in m["licence"].items()
                                                             if k != "files_under_other_licences_left_out"},
                         "rules": m["rules"],
                         "splits": {k: {kk: vv for kk, vv in v.items() if kk not in ("paths", "package_list")}
                                    for k, v in m["splits"].items()}}
    for key, path in (("target", target_log), ("drafter", drafter_log)):
        if path and os.path.exists(path):
            summ = json.load(open(path))["summary"]
            rec[key] = {k: v for k, v in summ.items() if k not in ("files",)}
    return rec


def assemble(target_dir, drafter, tokenizer, out, rebind=True, info=None):
    cfg = json.load(open(os.path.join(target_dir, "config.json")))
    check_target_config(cfg)
    raw = read_target_raw(target_dir)
    bad = {n: v[0] for n, v in raw.items() if v[0] != "BF16"}
    assert not bad, f"target tensors not BF16: {bad}"
    assert "lm_head.weight" not in raw or not cfg["tie_word_embeddings"]
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    gen = os.path.join(target_dir, "generation_config.json")
    gcfg = json.load(open(gen)) if os.path.exists(gen) else generation_config()
    assert gcfg.get("eos_token_id") == C.EOT, gcfg
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gcfg, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copyfile(tokenizer, os.path.join(out, "tokenizer.json"))
    write_shards(raw, out)
    h = trunk_hash64(out, cfg["tie_word_embeddings"])
    meta, draw = read_raw(drafter)
    g = json.loads(meta["dflash"])
    was = json.loads(meta.get("base_binding", "{}")).get("trunk_hash64")
    if was != h and not rebind:
        sys.exit(f"{drafter} is bound to {was}, the target is {h} (use --rebind if the bytes are the same)")
    assert g["hidden"] == cfg["hidden_size"] and g["vocab"] == cfg["vocab_size"]
    assert g["target_layers"] == cfg["num_hidden_layers"]
    meta["base_binding"] = json.dumps({"trunk_hash64": h})
    write_safetensors(os.path.join(out, "dflash.safetensors"), draw, meta)
    if info:
        # the machines' own folders are nobody else's business: paths are
        # kept from the repository's top on
        text = re.sub(r'"/[^"]*?/((?:training|models|tests)/[^"]*)"', r'"\1"', json.dumps(info, indent=1))
        with open(os.path.join(out, "training.json"), "w") as f:
            f.write(text + "\n")
    return check(out)


def check(folder):
    """Sizes, dtypes, geometry and binding of an assembled folder; returns a summary."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    check_target_config(cfg)
    files = sorted(os.listdir(folder))
    sizes = {f: os.path.getsize(os.path.join(folder, f)) for f in files}
    for f, s in sizes.items():
        assert s < C.FILE_LIMIT, f"{f} is {s} bytes, not < 15 MiB"
    total = sum(sizes.values())
    assert total <= C.TOTAL_LIMIT, f"{folder} holds {total} bytes, past 48 MiB"
    meta, draw = read_raw(os.path.join(folder, "dflash.safetensors"))
    g = json.loads(meta["dflash"])
    assert set(g) <= set(C.GEOMETRY_KEYS) and set(C.GEOMETRY_KEYS) - set(g) <= {"windows", "no_rope"}
    want = expected_shapes(g)
    assert set(draw) == {"dflash." + n for n in want}, set(draw) ^ {"dflash." + n for n in want}
    for n, shape in want.items():
        dtype, s, _ = draw["dflash." + n]
        assert tuple(s) == tuple(shape), (n, s, shape)
        assert dtype == storage_dtype(n, shape) or (dtype == "F16" and not n.endswith("_codebook")
                                                    and len(shape) == 2), (n, dtype)
    h = trunk_hash64(folder, cfg["tie_word_embeddings"])
    bound = json.loads(meta["base_binding"])["trunk_hash64"]
    assert bound == h, f"sidecar bound to {bound}, target is {h}"
    return {"folder": folder, "files": sizes, "total_bytes": total,
            "total_mib": round(total / C.MIB, 2), "trunk_hash64": h, "geometry": g}


def fake(out, tokenizer=None, seed=0):
    """A random pair with the real shapes and dtypes (the layout, without training)."""
    rng = np.random.default_rng(seed)
    t = C.TARGET
    h, L, v = t["hidden_size"], t["num_hidden_layers"], t["vocab_size"]
    q, kv = t["num_attention_heads"] * t["head_dim"], t["num_key_value_heads"] * t["head_dim"]
    w = {"model.embed_tokens.weight": rng.normal(0, 0.02, (v, h)), "model.norm.weight": np.ones(h)}
    for l in range(L):
        p = f"model.layers.{l}."
        for n, s in (("self_attn.q_proj", (q, h)), ("self_attn.k_proj", (kv, h)),
                     ("self_attn.v_proj", (kv, h)), ("self_attn.o_proj", (h, q)),
                     ("mlp.gate_proj", (t["intermediate_size"], h)),
                     ("mlp.up_proj", (t["intermediate_size"], h)),
                     ("mlp.down_proj", (h, t["intermediate_size"]))):
            w[p + n + ".weight"] = rng.normal(0, 1 / np.sqrt(s[1]), s)
        for n, k in (("input_layernorm", h), ("post_attention_layernorm", h),
                     ("self_attn.q_norm", t["head_dim"]), ("self_attn.k_norm", t["head_dim"])):
            w[p + n + ".weight"] = np.ones(k)
    src = out + ".target-src"
    os.makedirs(src, exist_ok=True)
    write_safetensors(os.path.join(src, "model.safetensors"),
                      {n: ("BF16", a) for n, a in w.items()}, {"format": "pt"})
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(hf_config(), f, indent=2)
    with open(os.path.join(src, "generation_config.json"), "w") as f:
        json.dump(generation_config(), f, indent=2)
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
    write_sidecar(side, dw, g, trunk_hash64(src, True))
    if tokenizer is None:
        tokenizer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tokenizer.json")
    summary = assemble(src, side, tokenizer, out)
    shutil.rmtree(src)
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a1 = sub.add_parser("assemble")
    a1.add_argument("--target-dir", required=True)
    a1.add_argument("--drafter", required=True)
    a1.add_argument("--tokenizer", required=True)
    a1.add_argument("--out", required=True)
    a1.add_argument("--no-rebind", action="store_true")
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
    if a.cmd == "assemble":
        info = provenance(a.corpus_manifest, a.target_log, a.drafter_log)
        s = assemble(a.target_dir, a.drafter, a.tokenizer, a.out, rebind=not a.no_rebind, info=info)
    elif a.cmd == "fake":
        s = fake(a.out, a.tokenizer, a.seed)
    else:
        s = check(a.folder)
    print(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
