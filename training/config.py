"""Sizes of the default pair, shared by every training script (pure Python).

The byte budget (everything shipped ≤ 48 MiB, every file < 15 MiB) is checked
by `budget()`; `python3 training/config.py` prints it.
"""
NAME = "qwen3-go"          # models/<NAME>/
EOT, MASK = 0, 1           # <|endoftext|>, <|mask|> (training/tokenizer.py)
VOCAB = 8192

# The target: a Qwen3ForCausalLM (transformers 5). Tied embeddings, plain
# RoPE, no sliding window (what our C target runs).
TARGET = dict(
    vocab_size=VOCAB, hidden_size=384, num_hidden_layers=8, num_attention_heads=8,
    num_key_value_heads=4, head_dim=64, intermediate_size=1024,
    max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0,
    tie_word_embeddings=True, attention_bias=False, bos_token_id=EOT, eos_token_id=EOT,
    initializer_range=0.02,
)

# The DFlash 2 drafter: the sidecar's "dflash" record, exactly its keys.
# taps: four layers spread over the target's eight, the last one included
# (its raw output, before the final norm, is the richest about the next token).
# window 256: a layer sees at most 256 positions back, so contexts longer
# than the training sequences (256 tokens) look like the ones it was trained
# on; in training (anchors ≤ 240) the window never cuts anything.
DRAFTER = dict(
    hidden=384, intermediate=1024, layers=3, heads=8, kv_heads=4, head_dim=64,
    vocab=VOCAB, block=16, mask_token=MASK, conv_group=16, conv_kernel=4,
    selector_rank=32, selector_top=8, taps=[1, 3, 5, 7], target_layers=8,
    window=256, rope_theta=10000.0, eps=1e-6,
)
GEOMETRY_KEYS = ["hidden", "intermediate", "layers", "heads", "kv_heads", "head_dim", "vocab",
                 "block", "mask_token", "conv_group", "conv_kernel", "selector_rank",
                 "selector_top", "taps", "target_layers", "window", "windows", "no_rope",
                 "rope_theta", "eps"]

MIB = 1 << 20
TOTAL_LIMIT = 48 * MIB
FILE_LIMIT = 15 * MIB
SHARD_BYTES = 14 * MIB     # target shards are cut below this


def target_params(c=TARGET):
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * c["head_dim"]
    emb = v * h * (1 if c["tie_word_embeddings"] else 2)
    return emb + c["num_hidden_layers"] * layer + h


def drafter_bytes(g=DRAFTER, matrix_bytes=2):
    """(matrix params, F32 vector params, F16 codebook params, bytes)."""
    h, i, hd = g["hidden"], g["intermediate"], g["head_dim"]
    q, kv = g["heads"] * hd, g["kv_heads"] * hd
    kn, groups = g["conv_kernel"], h // g["conv_group"]
    mats = len(g["taps"]) * h * h
    vecs = 2 * h
    for _ in range(g["layers"]):
        mats += h * q + 2 * h * kv + q * h + 3 * h * i
        vecs += 2 * h + 2 * hd
        if kn:
            mats += 2 * (2 * kn * groups * h)
            vecs += 2 * (2 * kn * h)
    books = 0
    if g["selector_rank"]:
        mats += g["selector_rank"] * h
        books = 2 * g["vocab"] * g["selector_rank"]
    return mats, vecs, books, mats * matrix_bytes + vecs * 4 + books * 2


def budget():
    t = target_params()
    m, v, b, d = drafter_bytes()
    tb = 2 * t
    return {"target_params": t, "target_bytes_bf16": tb,
            "drafter_params": m + v + b, "drafter_bytes": d,
            "total_bytes": tb + d, "total_mib": round((tb + d) / MIB, 2),
            "limit_mib": TOTAL_LIMIT / MIB, "target_shards": -(-tb // SHARD_BYTES),
            "sidecar_mib": round(d / MIB, 2)}


if __name__ == "__main__":
    import json
    b = budget()
    print(json.dumps(b, indent=1))
    assert b["total_bytes"] < TOTAL_LIMIT and b["drafter_bytes"] < FILE_LIMIT
