#!/usr/bin/env python3
"""Convert a Hugging Face Qwen3 checkpoint folder to one GGUF file.

    hf-to-gguf.py MODEL_DIR OUT.gguf [--outtype f32|f16|bf16|q8_0|q4_0] [--sidecar DFLASH]

The file is laid out as llama.cpp's convert_hf_to_gguf.py lays out a Qwen3
model: general.architecture "qwen3", the sizes under qwen3.*, the tensors
under GGUF's names (token_embd, blk.N.attn_q, …, output_norm; output only
where the head is not tied), matrices in the chosen type and the 1-D
tensors (norms) in F32, and the tokenizer as tokenizer.ggml.* (model gpt2,
pre qwen2: tokens, token types, merges, special token ids). Qwen3's q and k
projections are written as they are (no permutation: its RoPE rotates
halves, which GGUF's NEOX RoPE also does).

With --sidecar, a DFlash sidecar bound to MODEL_DIR (its base_binding's
trunk_hash64 is the folder's) is copied to OUT.dflash.safetensors (OUT
without .gguf) with base_binding's trunk_signs64 and trunk_sample added:
the hash of the embedding's signs, which every F32/F16/BF16 conversion
keeps, and 256 of the embedding's values (as many of an untied head's) at
fixed positions, which a Q8_0 or Q4_0 conversion keeps within its
rounding; so the copy binds to the .gguf (core/trunk-hash.c says how each
is made and checked).

Reads model.safetensors or its shards (model.safetensors.index.json),
config.json, generation_config.json where present, and tokenizer.json.
Needs numpy and the gguf package (pip install gguf).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("hf-to-gguf.py: the gguf package is missing (pip install gguf)")

LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
MODEL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
OUTTYPES = {
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    # every matrix (the embedding too) in blocks of 32 with an F16 scale, as
    # the gguf package quantizes them (llama.cpp's reference quantizers)
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
}


def gguf_name(hf):
    if hf in MODEL_NAMES:
        return MODEL_NAMES[hf]
    parts = hf.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in LAYER_NAMES:
        return f"blk.{int(parts[2])}.{LAYER_NAMES[parts[3]]}"
    raise SystemExit(f"hf-to-gguf.py: tensor {hf!r} is not one of a Qwen3 checkpoint's")


def read_safetensors(path):
    """name -> (dtype name, shape, raw little-endian bytes), in file order."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[begin:end])
    return out


def read_checkpoint(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    tensors = {}
    for shard in shards:
        tensors.update(read_safetensors(os.path.join(model_dir, shard)))
    return tensors


def as_f32(dtype, shape, raw):
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").reshape(shape)
    if dtype == "F16":
        return np.frombuffer(raw, "<f2").astype(np.float32).reshape(shape)
    if dtype == "BF16":
        bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    raise SystemExit(f"hf-to-gguf.py: dtype {dtype} is not converted (F32, F16, BF16)")


def tensor_data(dtype, shape, raw, qtype):
    """The array GGUFWriter takes for the tensor in type qtype (raw_dtype or None)."""
    if qtype == gguf.GGMLQuantizationType.BF16:
        if dtype == "BF16":
            # the same bytes: no round trip through F32
            return np.frombuffer(raw, np.uint8).reshape(list(shape[:-1]) + [shape[-1] * 2]), qtype
        return gguf.quants.quantize(as_f32(dtype, shape, raw), qtype), qtype
    if qtype in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0):
        return gguf.quants.quantize(as_f32(dtype, shape, raw), qtype), qtype
    return gguf.quants.quantize(as_f32(dtype, shape, raw), qtype), None


FNV_OFFSET, FNV_PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, 0xFFFFFFFFFFFFFFFF
MIB = 1 << 20


def fnv1a(h, data):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def binding_tensors(tensors, tied):
    return [tensors[n] for n in ["model.embed_tokens.weight"] + ([] if tied else ["lm_head.weight"])]


def trunk_hash64(tensors, tied):
    """The bytes' hash: each tensor whole up to 2 MiB, else its first and last MiB."""
    h = FNV_OFFSET
    for _, _, raw in binding_tensors(tensors, tied):
        h = fnv1a(h, raw) if len(raw) <= 2 * MIB else fnv1a(fnv1a(h, raw[:MIB]), raw[-MIB:])
    return f"{h:016x}"


def trunk_signs64(tensors, tied):
    """The signs' hash: each value's sign bit, eight to a byte, lowest bit
    first; all values up to 2^21, else the first and last 2^20."""
    h = FNV_OFFSET
    for dtype, _, raw in binding_tensors(tensors, tied):
        size = {"F32": 4, "F16": 2, "BF16": 2}[dtype]
        signs = np.frombuffer(raw, np.uint8)[size - 1::size] >> 7
        if signs.size > 2 * MIB:
            signs = np.concatenate([signs[:MIB], signs[-MIB:]])
        h = fnv1a(h, np.packbits(signs, bitorder="little").tobytes())
    return f"{h:016x}"


TRUNK_SAMPLE = 256


def sample_position(which, k, n):
    """The k-th sampled element of tensor `which` (0 the embedding, 1 an
    untied head) of n elements: splitmix64's output mix of the number."""
    z = ((which * TRUNK_SAMPLE + k + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) % n


def trunk_sample(tensors, tied):
    """The values at the sampled positions, each the 8 hex digits of its F32 bits."""
    out = []
    for which, (dtype, shape, raw) in enumerate(binding_tensors(tensors, tied)):
        flat = as_f32(dtype, shape, raw).reshape(-1)
        for k in range(TRUNK_SAMPLE):
            bits = flat[sample_position(which, k, flat.size)].astype(np.float32).view(np.uint32)
            out.append(f"{int(bits):08x}")
    return "".join(out)


def copy_sidecar(sidecar, out, tensors, tied):
    with open(sidecar, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.get("__metadata__", {})
    binding = json.loads(meta.get("base_binding", "{}"))
    want = trunk_hash64(tensors, tied)
    if binding.get("trunk_hash64") != want:
        raise SystemExit(f"hf-to-gguf.py: {sidecar} is bound to {binding.get('trunk_hash64')}, "
                         f"the model folder's trunk hash is {want}")
    binding["trunk_signs64"] = trunk_signs64(tensors, tied)
    binding["trunk_sample"] = trunk_sample(tensors, tied)
    meta["base_binding"] = json.dumps(binding)
    header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def add_tokenizer(w, model_dir, cfg, gen):
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    model = tok["model"]
    if model.get("type") != "BPE":
        raise SystemExit("hf-to-gguf.py: tokenizer.json is not a BPE tokenizer")
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    by_id = {i: t for t, i in model["vocab"].items()}
    for i, a in added.items():
        by_id[i] = a["content"]
    n = max(cfg["vocab_size"], max(by_id) + 1)
    tokens, types = [], []
    for i in range(n):
        if i not in by_id:
            # ids the embedding has but the tokenizer never gives
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if added[i].get("special")
                         else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)

    eos = gen.get("eos_token_id", cfg.get("eos_token_id"))
    eos = eos if isinstance(eos, list) else ([] if eos is None else [eos])
    if cfg.get("bos_token_id") is not None:
        w.add_bos_token_id(cfg["bos_token_id"])
    if eos:
        w.add_eos_token_id(eos[0])
    if len(eos) > 1:
        # llama.cpp stops at end-of-turn too; a second id is that
        w.add_eot_token_id(eos[1])
    if len(eos) > 2:
        raise SystemExit(f"hf-to-gguf.py: {len(eos)} eos ids; GGUF holds at most two (eos, eot)")
    if cfg.get("pad_token_id") is not None:
        w.add_pad_token_id(cfg["pad_token_id"])
    w.add_add_bos_token(False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=sorted(OUTTYPES), default="bf16")
    ap.add_argument("--sidecar", help="a DFlash sidecar of MODEL_DIR to copy, bound to the .gguf too")
    args = ap.parse_args()

    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    gen = {}
    gen_path = os.path.join(args.model_dir, "generation_config.json")
    if os.path.exists(gen_path):
        with open(gen_path) as f:
            gen = json.load(f)
    if cfg.get("model_type") != "qwen3":
        raise SystemExit(f"hf-to-gguf.py: model_type {cfg.get('model_type')!r}; this converts qwen3")
    rope = cfg.get("rope_parameters") or {}
    theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    if (cfg.get("rope_scaling") or {}).get("rope_type", "default") != "default" \
            or rope.get("rope_type", "default") != "default":
        raise SystemExit("hf-to-gguf.py: scaled RoPE is not converted")
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    qtype, ftype = OUTTYPES[args.outtype]

    w = gguf.GGUFWriter(args.out, "qwen3")
    w.add_name(os.path.basename(os.path.normpath(args.model_dir)))
    w.add_context_length(cfg.get("max_position_embeddings", 40960))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(cfg.get("num_key_value_heads", heads))
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-6))
    w.add_file_type(ftype)
    add_tokenizer(w, args.model_dir, cfg, gen)

    tensors = read_checkpoint(args.model_dir)
    tied = cfg.get("tie_word_embeddings", False)
    for hf, (dtype, shape, raw) in tensors.items():
        if hf == "lm_head.weight" and tied:
            continue
        name = gguf_name(hf)
        if len(shape) <= 1:
            data, raw_dtype = as_f32(dtype, shape, raw).copy(), None
        else:
            data, raw_dtype = tensor_data(dtype, shape, raw, qtype)
        w.add_tensor(name, np.ascontiguousarray(data), raw_dtype=raw_dtype)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    if args.sidecar:
        stem = args.out[:-len(".gguf")] if args.out.endswith(".gguf") else args.out
        copy_sidecar(args.sidecar, stem + ".dflash.safetensors", tensors, tied)


if __name__ == "__main__":
    main()
