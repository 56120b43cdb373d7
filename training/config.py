"""Sizes of the default pair, shared by every training script (pure Python).

`budget()` checks what the pair must satisfy and `python3 training/config.py`
prints it:
- the target has at least 60 M parameters and is shipped as a Q4_0 GGUF
  (tools/hf-to-gguf.py --outtype q4_0: every matrix, the embedding too, in
  blocks of 32 weights with an F16 scale, 4.5 bits a weight); its weights are
  larger than the development machine's 32 MiB L3, so a decoding step streams
  them from memory as a real model's does;
- everything shipped (the .gguf, which carries the tokenizer, the sidecar,
  training.json and room for the model card) is at most 64 MiB;
- the drafter is cheap beside the target: the weight bytes a block reads are
  at most half of those a plain target step reads, and its block, estimated
  from rates measured on the 2-core machine (docs/FIGURES.md), costs at most
  one plain target step.
"""
NAME = "qwen3-go"          # models/<NAME>/
EOT, MASK = 0, 1           # <|endoftext|>, <|mask|> (training/tokenizer.py)
VOCAB = 8192               # 8192 ids: the embedding is 4.2 M of the target's 75 M parameters

# The target: a Qwen3ForCausalLM (transformers 5). Tied embeddings, plain RoPE, no sliding
# window (what our C target runs). Every width is a multiple of 256 (512, 2048, q 512, kv 256),
# so the same checkpoint also converts to Q4_K (256-weight super-blocks) where a converter
# writes it; Q4_0 needs multiples of 32.
TARGET = dict(
    vocab_size=VOCAB, hidden_size=512, num_hidden_layers=18, num_attention_heads=8,
    num_key_value_heads=4, head_dim=64, intermediate_size=2048,
    max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0,
    tie_word_embeddings=True, attention_bias=False, bos_token_id=EOT, eos_token_id=EOT,
    initializer_range=0.02,
)
TARGET_OUTTYPE = "q4_0"    # tools/hf-to-gguf.py --outtype

# The DFlash 2 drafter: the sidecar's "dflash" record, exactly its keys. Its hidden is the
# target's (it embeds with the target's table and drafts through the target's head).
# taps: four layers spread over the target's 18, the last one included (its raw output,
# before the final norm, is the richest about the next token).
# Two layers (the old drafter had three), MLP 3 × hidden, block 8: see budget() for the cost.
# window 256: a layer sees at most 256 positions back, so contexts longer than the training
# sequences look like the ones it was trained on.
DRAFTER = dict(
    hidden=512, intermediate=1536, layers=2, heads=8, kv_heads=4, head_dim=64,
    vocab=VOCAB, block=8, mask_token=MASK, conv_group=16, conv_kernel=4,
    selector_rank=32, selector_top=8, taps=[2, 7, 12, 17], target_layers=18,
    window=256, rope_theta=10000.0, eps=1e-6,
)
GEOMETRY_KEYS = ["hidden", "intermediate", "layers", "heads", "kv_heads", "head_dim", "vocab",
                 "block", "mask_token", "conv_group", "conv_kernel", "selector_rank",
                 "selector_top", "taps", "target_layers", "window", "windows", "no_rope",
                 "rope_theta", "eps"]

MIB = 1 << 20
TOTAL_LIMIT = 64 * MIB     # models/<NAME>/ in all
MIN_TARGET_PARAMS = 60_000_000
L3_BYTES = 32 * MIB        # the 2-core development machine's last-level cache
PIECE_BYTES = 15 * MIB     # files coming back from the GPU machine are cut below 16 MiB
# What a GGUF holds besides the tensors (header, metadata, the tokenizer's 8192 tokens and
# ~8000 merges): measured on `export.py fake` output, rounded up.
GGUF_OVERHEAD = 400_000
TRAINING_JSON = 16_000
CARD_BYTES = 64_000        # MODEL_CARD.md and its curves (PNG, CSV): the old pair's were 21 kB

# Rates measured on the 2-core development machine (docs/FIGURES.md), for the cost estimate:
# the quantized target's decoding step runs through about 11.2 G weights a second (a 159 M
# Qwen3 in Q4_K_M: 70.2 tokens/s), the drafter's BF16 products over the block's rows about
# 24 G multiply-adds a second (the old default drafter: 147 M multiply-adds a block in 6.1 ms).
TARGET_WEIGHTS_PER_S = 159e6 * 70.2
DRAFTER_MACS_PER_S = 147e6 / 6.1e-3

# GGML block sizes: (weights per block, bytes per block)
QBLOCKS = {"q4_0": (32, 18), "q8_0": (32, 34), "bf16": (1, 2), "f16": (1, 2), "f32": (1, 4)}


def target_params(c=TARGET):
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * c["head_dim"]
    emb = v * h * (1 if c["tie_word_embeddings"] else 2)
    return emb + c["num_hidden_layers"] * layer + h


def target_matrices(c=TARGET):
    """[(rows, cols)] of every matrix (the embedding once when tied)."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    layer = [(q, h), (kv, h), (kv, h), (h, q), (i, h), (i, h), (h, i)]
    return [(v, h)] * (1 if c["tie_word_embeddings"] else 2) + layer * c["num_hidden_layers"]


def target_bytes(c=TARGET, outtype=TARGET_OUTTYPE):
    """Tensor bytes of the GGUF: matrices in `outtype`, vectors (norms) F32."""
    per, nbytes = QBLOCKS[outtype]
    mats = 0
    for r, k in target_matrices(c):
        assert k % per == 0, f"a {r}×{k} matrix is not whole {outtype} blocks"
        mats += r * k // per * nbytes
    vec = target_params(c) - sum(r * k for r, k in target_matrices(c))
    return mats + 4 * vec


def target_step_weights(c=TARGET):
    """Weights a decoding step multiplies (the layers and the head; the embedding's one row
    aside)."""
    h, v = c["hidden_size"], c["vocab_size"]
    return sum(r * k for r, k in target_matrices(c)) - (v * h if c["tie_word_embeddings"] else 0) + v * h


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


def drafter_block_cost(g=DRAFTER, c=TARGET, outtype=TARGET_OUTTYPE):
    """(weight bytes a block reads, multiply-adds of a block). A block runs its `block` rows
    through every layer (attention and MLP products, the conv projections) and the target's
    head for the block − 1 drafted rows; the fc projection runs once per context row, when
    rows are settled, not per block."""
    h, i, hd = g["hidden"], g["intermediate"], g["head_dim"]
    q, kv = g["heads"] * hd, g["kv_heads"] * hd
    kn, groups = g["conv_kernel"], h // g["conv_group"]
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + (2 * (2 * kn * groups * h) if kn else 0)
    per, nbytes = QBLOCKS[outtype]
    head_bytes = g["vocab"] * h // per * nbytes
    reads = g["layers"] * layer * 2 + head_bytes
    macs = g["block"] * g["layers"] * layer + (g["block"] - 1) * g["vocab"] * h
    return reads, macs


def flops_per_token(c=TARGET, seq=1024):
    """Training FLOPs a token (forward + backward = 3 × forward): 6 per weight of the products
    (the tied head included) and causal attention over seq / 2 keys on average."""
    q = c["num_attention_heads"] * c["head_dim"]
    return 6 * target_step_weights(c) + 6 * c["num_hidden_layers"] * seq * q


# The 17.3 M target this replaces trained at 58 ms a step of 32 × 1024 tokens on the H200
# (training/README.md); a step of the new one is estimated by the FLOPs' ratio.
OLD_TARGET = dict(TARGET, hidden_size=384, num_hidden_layers=8, intermediate_size=1024)
OLD_STEP_S = 0.058


def budget():
    t = target_params()
    tb = target_bytes()
    m, v, b, d = drafter_bytes()
    reads, macs = drafter_block_cost()
    step_w = target_step_weights()
    step_s = step_w / TARGET_WEIGHTS_PER_S
    block_s = macs / DRAFTER_MACS_PER_S
    gguf = tb + GGUF_OVERHEAD
    total = gguf + d + TRAINING_JSON + CARD_BYTES
    return {"target_params": t, "target_outtype": TARGET_OUTTYPE, "target_tensor_bytes": tb,
            "target_gguf_mib": round(gguf / MIB, 2), "target_bf16_mib": round(2 * t / MIB, 2),
            "drafter_params": m + v + b, "drafter_bytes": d, "sidecar_mib": round(d / MIB, 2),
            "total_bytes": total, "total_mib": round(total / MIB, 2), "limit_mib": TOTAL_LIMIT / MIB,
            "target_step_weight_bytes": tb, "drafter_block_weight_bytes": reads,
            "block_over_step_bytes": round(reads / tb, 3),
            "target_step_macs": step_w, "drafter_block_macs": macs,
            "est_target_step_ms": round(1e3 * step_s, 2), "est_drafter_block_ms": round(1e3 * block_s, 2),
            "est_block_over_step": round(block_s / step_s, 3),
            "train_flops_per_token": flops_per_token(),
            "est_train_step_s_32x1024": round(OLD_STEP_S * flops_per_token() / flops_per_token(OLD_TARGET), 3)}


def check(b=None):
    b = b or budget()
    assert b["target_params"] >= MIN_TARGET_PARAMS, f"target {b['target_params']} parameters < 60 M"
    assert b["target_tensor_bytes"] > L3_BYTES, "the target's weights fit in the L3: not bandwidth-bound"
    assert b["total_bytes"] <= TOTAL_LIMIT, f"the pair is {b['total_mib']} MiB, past 64 MiB"
    assert b["block_over_step_bytes"] <= 0.5, "a block reads more than half the bytes of a target step"
    assert b["est_block_over_step"] <= 1.0, "a block is estimated to cost more than a target step"
    assert DRAFTER["hidden"] == TARGET["hidden_size"] and DRAFTER["vocab"] == VOCAB
    assert DRAFTER["target_layers"] == TARGET["num_hidden_layers"]
    assert max(DRAFTER["taps"]) == TARGET["num_hidden_layers"] - 1
    return b


if __name__ == "__main__":
    import json
    print(json.dumps(check(), indent=1))
