#!/usr/bin/env python3
"""Random DFlash drafters for the tests, seeded: DFlash 2 sidecars, a
released-v1-layout folder, targets (embedding and head) to bind and run them
against, the inputs (context rows and a script of operations) the parity
test runs, and bad sidecars with the messages they must be refused with.

    make_sidecar.py OUT_DIR

OUT_DIR/<variant>/{dflash.safetensors | drafter/}, target/, inputs.safetensors
OUT_DIR/bad/*.safetensors and bad/expect.json; OUT_DIR/bigtarget (the hash
of tensors past 2 MiB).
"""
import copy
import json
import os
import sys

import stio
from stio import np
import reference

MAIN = dict(hidden=64, intermediate=160, layers=3, heads=4, kv_heads=2, head_dim=16, vocab=320,
            block=7, mask_token=319, conv_group=4, conv_kernel=3, selector_rank=16, selector_top=6,
            taps=[1, 4, 6], target_layers=8, window=24, windows=[24, 0, 40], no_rope=[1],
            rope_theta=10000.0, eps=1e-6)
# F16 and BF16 matrices, conv_group 8, a longer kernel, one window for all
MIXED = dict(hidden=96, intermediate=192, layers=2, heads=6, kv_heads=3, head_dim=16, vocab=400,
             block=6, mask_token=7, conv_group=8, conv_kernel=4, selector_rank=8, selector_top=5,
             taps=[0, 2, 3], target_layers=4, window=0, rope_theta=1000000.0, eps=1e-5)


def f32(x):
    """Values a float32 holds, as plain floats (JSON round-trips them exactly)."""
    return [float(v) for v in np.asarray(x, np.float32).ravel()]


def drafter_tensors(rng, g, prefix, conv, selector, dtype_of, book_scale):
    hs, ffn, hd = g["hidden"], g["intermediate"], g["head_dim"]
    qd, kd = g["heads"] * hd, g["kv_heads"] * hd
    t = {}

    def mat(name, rows, cols, scale=1.0):
        t[prefix + name] = (dtype_of(name), rng.normal(0, scale / np.sqrt(cols), (rows, cols)))

    def norm(name, n):
        t[prefix + name] = ("F32", 1.0 + 0.1 * rng.normal(size=n))

    mat("fc.weight", hs, len(g["taps"]) * hs)
    norm("hidden_norm.weight", hs)
    norm("norm.weight", hs)
    for i in range(g["layers"]):
        p = f"layers.{i}."
        norm(p + "input_layernorm.weight", hs)
        norm(p + "post_attention_layernorm.weight", hs)
        mat(p + "self_attn.q_proj.weight", qd, hs)
        mat(p + "self_attn.k_proj.weight", kd, hs)
        mat(p + "self_attn.v_proj.weight", kd, hs)
        mat(p + "self_attn.o_proj.weight", hs, qd)
        norm(p + "self_attn.q_norm.weight", hd)
        norm(p + "self_attn.k_norm.weight", hd)
        mat(p + "mlp.gate_proj.weight", ffn, hs)
        mat(p + "mlp.up_proj.weight", ffn, hs)
        mat(p + "mlp.down_proj.weight", hs, ffn)
        if conv:
            kn, groups = g["conv_kernel"], hs // g["conv_group"]
            for which in ("attention_conv", "mlp_conv"):
                base = 0.3 * rng.normal(size=(2, kn, hs))
                base[:, 0, :] += 1.0          # mostly the row itself, some of the ones before
                t[prefix + p + which + ".base_kernel"] = ("F32", base.ravel())
                mat(p + which + ".kernel_projection.weight", 2 * kn * groups, hs, 0.3)
    if selector:
        mat("candidate_selector.hidden_projection.weight", g["selector_rank"], hs)
        for b in ("predecessor_codebook", "successor_codebook"):
            t[prefix + "candidate_selector." + b] = (
                "F16", book_scale * rng.normal(size=(g["vocab"], g["selector_rank"])))
    return t


def route(rng, hidden, rank=3):
    def sub():
        q, _ = np.linalg.qr(rng.normal(size=(hidden, rank)))
        return {"mean": f32(0.05 * rng.normal(size=hidden)), "basis": f32(q.T), "rank": rank}
    return {"block": sub(), "chain": sub(), "block_rows": 40, "chain_rows": 25}


def make_target(rng, folder, layers, hidden, vocab, tied, logit_scale=3.0):
    os.makedirs(folder, exist_ok=True)
    t = {"model.embed_tokens.weight": ("F32", rng.normal(size=(vocab, hidden)))}
    if not tied:
        t["lm_head.weight"] = ("F32", rng.normal(0, logit_scale / np.sqrt(hidden), (vocab, hidden)))
    else:
        t["model.embed_tokens.weight"] = ("F32", t["model.embed_tokens.weight"][1] * logit_scale / np.sqrt(hidden))
    stio.write(f"{folder}/model.safetensors", t)
    json.dump({"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": layers,
               "hidden_size": hidden, "vocab_size": vocab, "tie_word_embeddings": tied},
              open(f"{folder}/config.json", "w"))
    return reference.trunk_hash64(f"{folder}/model.safetensors", tied)


def make_inputs(rng, path, g, script, n_rows, n_tip, rt):
    tw = len(g["taps"]) * g["hidden"]
    taps = rng.normal(size=(n_rows, tw))
    tip = rng.normal(size=(n_tip, g["hidden"]))
    if rt is not None:
        # rows near each subspace too, so both signs of the margin show
        for i in range(0, n_tip, 2):
            s = rt["block"] if i % 4 == 0 else rt["chain"]
            basis = np.asarray(s["basis"]).reshape(s["rank"], -1)
            tip[i] = np.asarray(s["mean"]) + rng.normal(size=s["rank"]) @ basis * 0.3 + 0.01 * tip[i]
    stio.write(path, {"taps": ("F32", taps), "tip": ("F32", tip)},
               metadata={"script": json.dumps(script)})


def main_script(rng, vocab):
    tok = lambda: int(rng.integers(0, vocab))
    return [
        {"op": "queue", "pos": 0, "src": 0, "n": 300},
        {"op": "block", "name": "b0", "pos": 300, "token": tok(), "width": vocab},
        {"op": "queue", "pos": 300, "src": 300, "n": 4},
        {"op": "block", "name": "b1", "pos": 304, "token": tok(), "width": 250},   # a shortlist
        {"op": "truncate", "pos": 302},
        {"op": "queue", "pos": 302, "src": 310, "n": 3},                            # rows replaced
        {"op": "block", "name": "b2", "pos": 305, "token": tok(), "width": vocab},
        {"op": "queue", "pos": 305, "src": 320, "n": 700},                          # past PENDING_ROWS
        {"op": "block", "name": "b3", "pos": 1005, "token": tok(), "width": vocab},  # drops windows
        {"op": "truncate", "pos": 905},                                             # inside the slack
        {"op": "queue", "pos": 905, "src": 1100, "n": 5},
        {"op": "block", "name": "b4", "pos": 910, "token": tok(), "width": vocab},
        {"op": "dump_ctx", "name": "c0"},
        {"op": "block", "name": "b5", "pos": 900, "token": tok(), "width": vocab},  # before the end
        {"op": "queue", "pos": 2000, "src": 0, "n": 50},                            # a gap: restart
        {"op": "block", "name": "b6", "pos": 2050, "token": tok(), "width": vocab},
        {"op": "dump_ctx", "name": "c1"},
        {"op": "margin", "name": "m0"},
    ]


def small_script(rng, vocab, n):
    tok = lambda: int(rng.integers(0, vocab))
    return [
        {"op": "queue", "pos": 0, "src": 0, "n": n},
        {"op": "block", "name": "b0", "pos": n, "token": tok(), "width": vocab},
        {"op": "queue", "pos": n, "src": n, "n": 3},
        {"op": "block", "name": "b1", "pos": n + 3, "token": tok(), "width": vocab - 17},
        {"op": "truncate", "pos": n + 1},
        {"op": "queue", "pos": n + 1, "src": n + 5, "n": 2},
        {"op": "block", "name": "b2", "pos": n + 3, "token": tok(), "width": vocab},
        {"op": "dump_ctx", "name": "c0"},
    ]


def write_sidecar(path, tensors, geometry, binding, rt=None):
    meta = {"dflash": json.dumps(geometry)}
    if binding is not None:
        meta["base_binding"] = json.dumps({"trunk_hash64": binding})
    if rt is not None:
        meta["dflash_route"] = json.dumps(rt)
    stio.write(path, tensors, meta)


def make_main(out, rng):
    d = f"{out}/main"
    os.makedirs(d, exist_ok=True)
    g = MAIN
    h = make_target(rng, f"{d}/target", g["target_layers"], g["hidden"], g["vocab"], tied=False)
    t = drafter_tensors(rng, g, "dflash.", True, True, lambda n: "F32", book_scale=0.6)
    rt = route(rng, g["hidden"])
    write_sidecar(f"{d}/dflash.safetensors", t, g, h, rt)
    make_inputs(rng, f"{d}/inputs.safetensors", g, main_script(rng, g["vocab"]), 1200, 8, rt)
    return t, h, rt


def make_mixed(out, rng):
    d = f"{out}/mixed"
    os.makedirs(d, exist_ok=True)
    g = MIXED
    h = make_target(rng, f"{d}/target", g["target_layers"], g["hidden"], g["vocab"], tied=True)
    # matrices alternate F16 and BF16 (the norms stay F32)
    kinds = {}
    dtype_of = lambda n: kinds.setdefault(n, "F16" if len(kinds) % 2 == 0 else "BF16")
    t = drafter_tensors(rng, g, "dflash.", True, True, dtype_of, book_scale=0.8)
    write_sidecar(f"{d}/dflash.safetensors", t, g, h)
    make_inputs(rng, f"{d}/inputs.safetensors", g, small_script(rng, g["vocab"], 60), 80, 2, None)


def make_v1(out, rng):
    """The released layout: config.json and unprefixed BF16 tensors, no conv, no selector."""
    d = f"{out}/v1"
    os.makedirs(f"{d}/drafter", exist_ok=True)
    hidden, vocab, layers = 64, 300, 2
    cfg = {"architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
           "dflash_config": {"mask_token_id": 299, "block_size": 6}, "dtype": "bfloat16",
           "head_dim": 16, "hidden_act": "silu", "hidden_size": hidden, "intermediate_size": 128,
           "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 20,
           "use_sliding_window": True, "model_type": "qwen3", "num_attention_heads": 4,
           "num_hidden_layers": layers, "num_key_value_heads": 2, "num_target_layers": 12,
           "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
           "tie_word_embeddings": True, "vocab_size": vocab}
    json.dump(cfg, open(f"{d}/drafter/config.json", "w"), indent=1)
    # default taps of 2 layers over a 12-layer target: round(1 + i·8/1) = [1, 9]
    g = dict(hidden=hidden, intermediate=128, layers=layers, heads=4, kv_heads=2, head_dim=16,
             vocab=vocab, taps=[1, 9])
    t = drafter_tensors(rng, g, "", False, False, lambda n: "BF16", 0)
    t = {k: ("BF16", v) for k, (_, v) in t.items()}
    stio.write(f"{d}/drafter/model.safetensors", t)
    make_target(rng, f"{d}/target", 12, hidden, vocab, tied=False)
    make_inputs(rng, f"{d}/inputs.safetensors", dict(g, block=6), small_script(rng, vocab, 50), 70, 2, None)


def make_bad(out, main_tensors, main_hash):
    d = f"{out}/bad"
    os.makedirs(d, exist_ok=True)
    expect = {}

    def geo(name, msg, **change):
        g = dict(MAIN, **change)
        for k, v in list(g.items()):
            if v is None:
                del g[k]
        write_sidecar(f"{d}/{name}.safetensors", main_tensors, g, main_hash)
        expect[name] = msg

    geo("layers0", "layers is 0", layers=0)
    geo("block1", "block is 1", block=1)
    geo("notaps", "taps is empty", taps=[])
    geo("kv0", "kv_heads is 0", kv_heads=0)
    geo("heads", "heads 4 is not a multiple of kv_heads 3", kv_heads=3)
    geo("headdim", "head_dim 15 is odd", head_dim=15)
    geo("group0", "conv_group is 0", conv_group=0)
    geo("group5", "hidden 64 is not a multiple of conv_group 5", conv_group=5)
    geo("windows", "windows has 2 entries for 3 layers", windows=[24, 0])
    geo("norope", "no_rope names layer 3", no_rope=[3])
    geo("tapout", "taps names layer 9; the target has 8 layers", taps=[1, 9])
    geo("nohidden", "has no \"hidden\"", hidden=None)
    geo("badhidden", "\"hidden\" is -64", hidden=-64)

    stio.write(f"{d}/norecord.safetensors", main_tensors, {"base_binding": json.dumps({"trunk_hash64": main_hash})})
    expect["norecord"] = "has no \"dflash\" record"

    def tens(name, msg, edit):
        t = dict(main_tensors)
        edit(t)
        write_sidecar(f"{d}/{name}.safetensors", t, MAIN, main_hash)
        expect[name] = msg

    tens("missing", "has no tensor dflash.layers.1.mlp.up_proj.weight",
         lambda t: t.pop("dflash.layers.1.mlp.up_proj.weight"))
    tens("shape", "dflash.layers.0.self_attn.k_proj.weight is [16, 64]; expected [32, 64]",
         lambda t: t.__setitem__("dflash.layers.0.self_attn.k_proj.weight", ("F32", np.zeros((16, 64)))))
    tens("bookbf16", "dflash.candidate_selector.predecessor_codebook is BF16 [320, 16]; the codebooks must be F16",
         lambda t: t.__setitem__("dflash.candidate_selector.predecessor_codebook", ("BF16", np.zeros((320, 16)))))
    tens("bookf32", "dflash.candidate_selector.successor_codebook is F32 [320, 16]; the codebooks must be F16",
         lambda t: t.__setitem__("dflash.candidate_selector.successor_codebook", ("F32", np.zeros((320, 16)))))
    tens("int", "dflash.fc.weight is I32; expected F32, F16 or BF16",
         lambda t: t.__setitem__("dflash.fc.weight", ("I32", np.zeros((64, 192), np.int32))))
    tens("normlen", "dflash.norm.weight is [63] (63 values); expected 64 values",
         lambda t: t.__setitem__("dflash.norm.weight", ("F32", np.ones(63))))

    # loads, but is refused against the main target
    write_sidecar(f"{d}/other.safetensors", main_tensors, MAIN, "0123456789abcdef")
    expect["other"] = f"was made for the target 0123456789abcdef, this target ({out}/main/target/model.safetensors) is {main_hash}"
    write_sidecar(f"{d}/unbound.safetensors", main_tensors, MAIN, None)
    expect["unbound"] = "has no base_binding"
    # a router that does not read: the sidecar loads without one, with a warning
    rt = route(np.random.default_rng(5), MAIN["hidden"])
    rt["chain"]["basis"] = rt["chain"]["basis"][:-1]
    write_sidecar(f"{d}/route.safetensors", main_tensors, MAIN, main_hash, rt)
    # a count of rows no integer holds (a value a fuzzer found)
    rt = route(np.random.default_rng(5), MAIN["hidden"])
    rt["block_rows"] = 1.08889e87
    write_sidecar(f"{d}/route-rows.safetensors", main_tensors, MAIN, main_hash, rt)
    json.dump(expect, open(f"{d}/expect.json", "w"), indent=1)


def make_bigtarget(out, rng):
    """Tensors past 2 MiB: the hash reads their first and last MiB."""
    d = f"{out}/bigtarget"
    os.makedirs(d, exist_ok=True)
    t = {"model.embed_tokens.weight": ("F32", rng.normal(size=(4100, 160))),
         "lm_head.weight": ("BF16", rng.normal(size=(4100, 160 * 2))),
         "model.norm.weight": ("F32", np.ones(160))}
    stio.write(f"{d}/model.safetensors", t)
    json.dump({"untied": reference.trunk_hash64(f"{d}/model.safetensors", False),
               "tied": reference.trunk_hash64(f"{d}/model.safetensors", True)},
              open(f"{d}/hash.json", "w"))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240611)
    main_tensors, main_hash, _ = make_main(out, rng)
    make_mixed(out, rng)
    make_v1(out, rng)
    make_bad(out, main_tensors, main_hash)
    make_bigtarget(out, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
