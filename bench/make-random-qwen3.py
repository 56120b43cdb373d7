#!/usr/bin/env python3
"""Write a random Qwen3 checkpoint (safetensors, BF16) of a chosen shape, with
the default pair's tokenizer, for benchmarks that need model files of a size
the embedded pair does not have (llama.cpp side by side, quantized targets).

    make-random-qwen3.py OUT_DIR [--hidden 1024] [--layers 12] [--heads 16]
        [--kv-heads 8] [--head-dim 64] [--intermediate 3072] [--seed 1]

The default shape has about 159M parameters (vocab 8192, tied embeddings);
its matrices' widths are multiples of 256, as the K-quants need. Weights are
normal with σ 0.02 (norms 1), so activations stay in range through the
layers; the text it writes means nothing, the time it takes is what counts.
"""
import argparse
import json
import os
import shutil

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PAIR = os.path.join(HERE, "..", "models", "qwen3-go")


def bf16(a):
    """float32 → bfloat16 bits (round to nearest even) as uint16"""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_bf16_safetensors(path, tensors):
    """safetensors.numpy knows no bfloat16: the header and data by hand
    (8-byte header length, JSON padded with spaces to 8 bytes, then data)"""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, t in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(t.shape),
                        "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for t in tensors.values():
            f.write(t.tobytes())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=3072)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()

    with open(os.path.join(PAIR, "config.json")) as f:
        config = json.load(f)
    vocab = config["vocab_size"]
    config.update(hidden_size=a.hidden, num_hidden_layers=a.layers,
                  num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                  head_dim=a.head_dim, intermediate_size=a.intermediate,
                  layer_types=["full_attention"] * a.layers)
    rng = np.random.default_rng(a.seed)
    tensors = {}
    count = 0

    def add(name, *shape, norm=False):
        nonlocal count
        t = np.ones(shape, np.float32) if norm else \
            rng.standard_normal(shape, dtype=np.float32) * 0.02
        tensors[name] = bf16(t)
        count += t.size

    h, d = a.hidden, a.head_dim
    add("model.embed_tokens.weight", vocab, h)
    for i in range(a.layers):
        pre = f"model.layers.{i}."
        add(pre + "input_layernorm.weight", h, norm=True)
        add(pre + "post_attention_layernorm.weight", h, norm=True)
        add(pre + "self_attn.q_proj.weight", a.heads * d, h)
        add(pre + "self_attn.k_proj.weight", a.kv_heads * d, h)
        add(pre + "self_attn.v_proj.weight", a.kv_heads * d, h)
        add(pre + "self_attn.o_proj.weight", h, a.heads * d)
        add(pre + "self_attn.q_norm.weight", d, norm=True)
        add(pre + "self_attn.k_norm.weight", d, norm=True)
        add(pre + "mlp.gate_proj.weight", a.intermediate, h)
        add(pre + "mlp.up_proj.weight", a.intermediate, h)
        add(pre + "mlp.down_proj.weight", h, a.intermediate)
    add("model.norm.weight", h, norm=True)

    os.makedirs(a.out, exist_ok=True)
    write_bf16_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shutil.copy(os.path.join(PAIR, "tokenizer.json"), a.out)
    print(f"{a.out}: {count / 1e6:.1f}M parameters, BF16")


if __name__ == "__main__":
    main()
