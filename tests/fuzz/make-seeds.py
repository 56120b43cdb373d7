#!/usr/bin/env python3
"""Write the fuzz targets' seed corpora (corpus/<target>/): small valid
inputs of each reader, and a few near-misses, made from the test fixtures and
by hand. Standard library only.

    python3 tests/fuzz/make-seeds.py   # rewrites tests/fuzz/corpus/
"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
CORPUS = os.path.join(HERE, "corpus")


def safetensors(tensors, metadata=None, pad=0):
    """tensors: [(name, dtype, shape, bytes)] -> the file's bytes."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode() + b" " * pad
    return struct.pack("<Q", len(text)) + text + data


def sidecar_records():
    path = os.path.join(FIXTURES, "qwen3", "bf16-tied", "dflash.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))["__metadata__"]


def small_tokenizer(full, keep):
    """The fixture tokenizer cut to its first `keep` ids: merges whose parts
    and result survive are kept."""
    t = json.loads(json.dumps(full))
    vocab = {k: v for k, v in t["model"]["vocab"].items() if v < keep}
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = [m for m in t["model"]["merges"]
                            if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
    t["added_tokens"] = [a for a in t["added_tokens"] if a["id"] < keep]
    return t


def gguf_file(values, tensors, alignment=32):
    """values: [(key, type id, payload bytes)]; tensors: [(name, dims innermost
    first, GGUF type id, data bytes)] -> a GGUF v3 file's bytes."""
    def string(t):
        b = t.encode()
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(values))
    for key, vtype, payload in values:
        out += string(key) + struct.pack("<I", vtype) + payload
    data, infos = b"", b""
    for name, dims, ttype, raw in tensors:
        data += b"\0" * (-len(data) % alignment)
        infos += string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", ttype, len(data))
        data += raw
    out += infos
    out += b"\0" * (-len(out) % alignment)
    return out + data


def gguf_str(t):
    b = t.encode()
    return 8, struct.pack("<Q", len(b)) + b


def gguf_u32(v):
    return 4, struct.pack("<I", v)


def gguf_strs(items):
    payload = struct.pack("<IQ", 8, len(items))
    for t in items:
        b = t.encode()
        payload += struct.pack("<Q", len(b)) + b
    return 9, payload


def gguf_seeds():
    """A file of every value type and tensor type read, a tiny qwen3
    checkpoint, and a tokenizer-only file."""
    every = [("general.architecture",) + gguf_str("test"), ("u8", 0, b"\x07"),
             ("i8", 1, b"\xfe"), ("u16", 2, b"\x01\x02"), ("i16", 3, b"\xff\xff"),
             ("u32",) + gguf_u32(9), ("i32", 5, struct.pack("<i", -3)),
             ("f32", 6, struct.pack("<f", 0.5)), ("b", 7, b"\x01"),
             ("u64", 10, struct.pack("<Q", 1 << 40)), ("i64", 11, struct.pack("<q", -1)),
             ("f64", 12, struct.pack("<d", 2.5)),
             ("ints", 9, struct.pack("<IQ", 5, 3) + struct.pack("<3i", 1, -2, 3)),
             ("strs",) + gguf_strs(["a", "b c", "\u00e9"])]
    tensors = [("f32", [4, 2], 0, struct.pack("<8f", *range(8))),
               ("f16", [2], 1, b"\x00\x3c\x00\xc0"), ("bf16", [2], 30, b"\x80\x3f\x00\x40"),
               ("q8", [32], 8, b"\x00\x3c" + bytes(range(32))),
               ("q4", [32], 2, b"\x00\x3c" + bytes(16))]
    out = {"every-type": gguf_file(every, tensors)}

    h, f, hd, v = 32, 32, 32, 8
    meta = [("general.architecture",) + gguf_str("qwen3"),
            ("qwen3.block_count",) + gguf_u32(1), ("qwen3.embedding_length",) + gguf_u32(h),
            ("qwen3.feed_forward_length",) + gguf_u32(f),
            ("qwen3.attention.head_count",) + gguf_u32(1),
            ("qwen3.attention.head_count_kv",) + gguf_u32(1),
            ("qwen3.attention.key_length",) + gguf_u32(hd),
            ("qwen3.attention.value_length",) + gguf_u32(hd),
            ("qwen3.context_length",) + gguf_u32(64),
            ("qwen3.rope.freq_base", 6, struct.pack("<f", 10000.0)),
            ("qwen3.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-6))]
    one = struct.pack("<e", 1.0)
    ts = [("token_embd.weight", [h, v], 1, one * (h * v)), ("output_norm.weight", [h], 0,
                                                             struct.pack("<f", 1.0) * h)]
    for n in ("attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm"):
        ts.append((f"blk.0.{n}.weight", [h], 0, struct.pack("<f", 1.0) * h))
    for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
        ts.append((f"blk.0.{n}.weight", [h, h], 1, one * (h * h)))
    out["qwen3-tiny"] = gguf_file(meta, ts)

    tokens = ["!", "a", "b", "\u0120", "ab", "\u0120a", "<|endoftext|>", "[PAD7]"]
    tok = [("tokenizer.ggml.model",) + gguf_str("gpt2"), ("tokenizer.ggml.pre",) + gguf_str("qwen2"),
           ("tokenizer.ggml.tokens",) + gguf_strs(tokens),
           ("tokenizer.ggml.token_type", 9,
            struct.pack("<IQ", 5, 8) + struct.pack("<8i", 1, 1, 1, 1, 1, 1, 3, 5)),
           ("tokenizer.ggml.merges",) + gguf_strs(["a b", "\u0120 a"]),
           ("tokenizer.ggml.eos_token_id",) + gguf_u32(6)]
    out["tokenizer"] = gguf_file(tok, [])
    return out


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)

    # safetensors: files, and an index (starts with '{') over a.safetensors
    # ("x") and b.safetensors ("y"), the shards the target writes
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    write("fuzz-safetensors", "f32-bf16-i64",
          safetensors([("a", "F32", [2, 3], f32), ("b", "BF16", [2], b"\x80\x3f\x00\x40"),
                       ("c", "I64", [1], struct.pack("<q", 7))],
                      {"format": "pt", "dflash": "{}"}))
    write("fuzz-safetensors", "f16-scalar-empty",
          safetensors([("s", "F16", [], b"\x00\x3c"), ("e", "F32", [0, 4], b""),
                       ("u", "U8", [3], b"abc"), ("i", "I8", [1], b"\xff")]))
    write("fuzz-safetensors", "padded", safetensors([("w", "F32", [1], f32[:4])], pad=7))
    write("fuzz-safetensors", "no-tensors", safetensors([], {"k": "v"}))
    write("fuzz-safetensors", "index",
          json.dumps({"metadata": {"total_size": 28}, "weight_map": {"x": "a.safetensors",
                                                                      "y": "b.safetensors"}}))

    # GGUF files
    for name, data in gguf_seeds().items():
        write("fuzz-gguf", name, data)

    # configs: config.json NUL generation_config.json, and v1 drafter configs
    q = os.path.join(FIXTURES, "qwen3")
    for name in sorted(os.listdir(q)):
        cfg = os.path.join(q, name, "config.json")
        if os.path.isfile(cfg):
            gen = open(os.path.join(q, name, "generation_config.json"), "rb").read()
            write("fuzz-config", name, open(cfg, "rb").read() + b"\0" + gen)
    base = json.load(open(os.path.join(q, "bf16-tied", "config.json")))
    v1 = dict(base, architectures=["DFlashDraftModel"], num_hidden_layers=2, block_size=8,
              num_target_layers=3,
              dflash_config={"mask_token_id": 3, "target_layer_ids": [0, 1, 2]})
    write("fuzz-config", "v1-drafter", json.dumps(v1, indent=1))
    v1w = dict(v1, layer_types=["sliding_attention", "full_attention"], sliding_window=16,
               use_sliding_window=True)
    del v1w["dflash_config"]["target_layer_ids"]
    write("fuzz-config", "v1-drafter-windows", json.dumps(v1w))
    write("fuzz-config", "rope-scaling",
          json.dumps(dict(base, rope_scaling={"rope_type": "yarn", "factor": 4.0})))

    # sidecar records: dflash NUL base_binding NUL dflash_route
    rec = sidecar_records()
    geometry = json.loads(rec["dflash"])
    write("fuzz-sidecar", "fixture",
          rec["dflash"] + "\0" + rec["base_binding"] + "\0" + rec["dflash_route"])
    small = dict(geometry, hidden=4, intermediate=8, heads=2, kv_heads=1, head_dim=2,
                 conv_group=2, selector_rank=2)
    route = {"block": {"mean": [0.0] * 4, "basis": [[1.0, 0, 0, 0]], "rank": 1},
             "chain": {"mean": [0.5] * 4, "basis": [0.0, 1.0, 0, 0, 0, 0, 1.0, 0], "rank": 2},
             "block_rows": 10, "chain_rows": 12}
    write("fuzz-sidecar", "small-route",
          json.dumps(small) + "\0" + rec["base_binding"] + "\0" + json.dumps(route))
    windowed = dict(small, window=4, windows=[4, 0], no_rope=[1])
    write("fuzz-sidecar", "windows", json.dumps(windowed))

    # tokenizer: tokenizer.json NUL text
    full = json.load(open(os.path.join(FIXTURES, "tokenizer", "tokenizer.json")))
    text = "Hello, world! It's 2024 — naïve café 東京\n\tx += 1; <|im_end|><|im_start|>"
    write("fuzz-tokenizer", "fixture", json.dumps(full, ensure_ascii=False) + "\0" + text)
    write("fuzz-tokenizer", "small", json.dumps(small_tokenizer(full, 300)) + "\0" + text)
    plain = small_tokenizer(full, 280)
    plain["normalizer"] = None
    plain["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True}
    write("fuzz-tokenizer", "bytelevel-only", json.dumps(plain) + "\0" + "a  b\r\n\u00e9")
    # a text whose first piece has no byte in the vocab encodes to nothing
    tiny = dict(plain, model={"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
                              "merges": ["a b"]}, added_tokens=[])
    write("fuzz-tokenizer", "unknown-bytes", json.dumps(tiny) + "\0" + "xyz ab")

    # token lists
    for i, s in enumerate(["1,2,3", " 151644 , 872,198 ", "-3", "1,,2", "", "0",
                           "99999999999999999999", "2147483647,-2147483648", "0x10, 1e3"]):
        write("fuzz-token-list", f"list-{i}", s)


if __name__ == "__main__":
    main()
