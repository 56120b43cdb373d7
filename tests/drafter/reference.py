"""A float64 reference of the DFlash drafter, written from DESIGN.md ("The
math") alone: context rows, the block, logits through a head, the selector,
the router's margin and the trunk hash. Slow and plain on purpose.
"""
import json
import os

import numpy as np

import stio


class Geometry:
    def __init__(self, rec):
        self.__dict__.update(rec)
        self.windows = rec.get("windows") or []
        self.no_rope = rec.get("no_rope") or []

    def window_of(self, layer):
        return self.windows[layer] if self.windows else self.window

    def rotary(self, layer):
        return layer not in self.no_rope


class Drafter:
    """Weights as float64 arrays, names without prefix."""

    def __init__(self, g, w, conv=True, selector=True):
        self.g, self.w, self.conv, self.selector = g, w, conv, selector

    @classmethod
    def sidecar(cls, path):
        if os.path.isdir(path):
            path = os.path.join(path, "dflash.safetensors")
        meta, t = stio.read(path)
        g = Geometry(json.loads(meta["dflash"]))
        w = {k[len("dflash."):]: v for k, v in t.items()}
        d = cls(g, w)
        d.meta = meta
        return d

    @classmethod
    def released(cls, folder):
        """A v1 folder: the geometry from config.json as DESIGN.md / the loader reads it."""
        cfg = json.load(open(f"{folder}/config.json"))
        dc = cfg.get("dflash_config", {})
        layers = cfg["num_hidden_layers"]
        taps = dc.get("target_layer_ids")
        if taps is None:
            L, n = cfg["num_target_layers"], layers
            taps = [L // 2] if n == 1 else [int(round(1 + i * (L - 4) / (n - 1))) for i in range(n)]
        sw = cfg.get("sliding_window") or 0
        types = cfg.get("layer_types")
        windows = [sw if t == "sliding_attention" else 0 for t in types] if types else [0] * layers
        theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        rec = dict(hidden=cfg["hidden_size"], intermediate=cfg["intermediate_size"], layers=layers,
                   heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
                   head_dim=cfg["head_dim"], vocab=cfg["vocab_size"],
                   block=cfg.get("block_size", dc.get("block_size")), mask_token=dc["mask_token_id"],
                   conv_group=1, conv_kernel=0, selector_rank=0, selector_top=1, taps=taps,
                   target_layers=cfg["num_target_layers"], window=0, windows=windows, no_rope=[],
                   rope_theta=theta, eps=cfg["rms_norm_eps"])
        _, t = stio.read(f"{folder}/model.safetensors")
        return cls(Geometry(rec), t, conv=False, selector=False)


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, pos, theta):
    """x [rows, heads, hd], pos [rows]: the half-split (NeoX/Qwen) rotation.

    The angle is position × inv_freq formed in float32, as the checkpoints'
    own code (Hugging Face's rotary embedding) forms it: at position 2000
    that alone moves an angle by 1e-4 rad from the exact one, which is the
    model's behaviour, not an error of the C code. The rest is float64."""
    hd = x.shape[-1]
    half = hd // 2
    inv = (theta ** (-(2.0 * np.arange(half)) / hd)).astype(np.float32)
    ang = (np.asarray(pos, np.float32)[:, None] * inv[None, :]).astype(np.float64)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    lo, hi = x[..., :half], x[..., half:]
    return np.concatenate([lo * c - hi * s, hi * c + lo * s], axis=-1)


def context(d, taps, pos0):
    """K, V per layer ([n, kv, hd] each) of context rows at pos0 …."""
    g, w = d.g, d.w
    n = taps.shape[0]
    t = rms(taps @ w["fc.weight"].T, w["hidden_norm.weight"], g.eps)
    pos = pos0 + np.arange(n)
    out = []
    for l in range(g.layers):
        p = f"layers.{l}."
        k = (t @ w[p + "self_attn.k_proj.weight"].T).reshape(n, g.kv_heads, g.head_dim)
        k = rms(k, w[p + "self_attn.k_norm.weight"], g.eps)
        if g.rotary(l):
            k = rope(k, pos, g.rope_theta)
        v = (t @ w[p + "self_attn.v_proj.weight"].T).reshape(n, g.kv_heads, g.head_dim)
        out.append((k, v))
    return out


def conv(d, x, dyn, base, stage):
    """conv_s(x)[r][i] = Σ_{o<min(kernel,r+1)} (base[s][o][i] + d[r][s][o][i/group]) x[r−o][i]."""
    g = d.g
    rows, hs = x.shape
    kn, gs = g.conv_kernel, g.conv_group
    base = base.reshape(2, kn, hs)
    dyn = dyn.reshape(rows, 2, kn, hs // gs)
    y = np.zeros_like(x)
    for r in range(rows):
        for o in range(min(kn, r + 1)):
            y[r] += (base[stage, o] + np.repeat(dyn[r, stage, o], gs)) * x[r - o]
    return y


def block(d, ctx, first, anchor, h):
    """ctx: context(d, all rows from `first`); h: block embeddings [block, hidden]."""
    g, w = d.g, d.w
    rows, hd = g.block, g.head_dim
    rep = g.heads // g.kv_heads
    h = h.astype(np.float64).copy()
    for l in range(g.layers):
        p = f"layers.{l}."
        win = g.window_of(l)
        ck, cv = ctx[l]
        x = rms(h, w[p + "input_layernorm.weight"], g.eps)
        if d.conv:
            dyn = x @ w[p + "attention_conv.kernel_projection.weight"].T
            x = conv(d, x, dyn, w[p + "attention_conv.base_kernel"], 0)
        q = (x @ w[p + "self_attn.q_proj.weight"].T).reshape(rows, g.heads, hd)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).reshape(rows, g.kv_heads, hd)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(rows, g.kv_heads, hd)
        q = rms(q, w[p + "self_attn.q_norm.weight"], g.eps)
        k = rms(k, w[p + "self_attn.k_norm.weight"], g.eps)
        if g.rotary(l):
            pos = anchor + np.arange(rows)
            q, k = rope(q, pos, g.rope_theta), rope(k, pos, g.rope_theta)
        y = np.zeros((rows, g.heads, hd))
        n = max(0, min(anchor, first + ck.shape[0]) - first)   # context rows before the anchor
        cpos = first + np.arange(n)
        for hq in range(g.heads):
            kvh = hq // rep
            for r in range(rows):
                see = np.ones(n, bool) if win == 0 else cpos >= anchor + r + 1 - win
                keys = np.concatenate([ck[:n, kvh][see], k[:, kvh]])
                vals = np.concatenate([cv[:n, kvh][see], v[:, kvh]])
                s = keys @ q[r, hq] / np.sqrt(hd)
                s = np.exp(s - s.max())
                y[r, hq] = (s / s.sum()) @ vals
        o = y.reshape(rows, -1) @ w[p + "self_attn.o_proj.weight"].T
        if d.conv:
            o = conv(d, o, dyn, w[p + "attention_conv.base_kernel"], 1)
        h = h + o
        x = rms(h, w[p + "post_attention_layernorm.weight"], g.eps)
        if d.conv:
            dyn = x @ w[p + "mlp_conv.kernel_projection.weight"].T
            x = conv(d, x, dyn, w[p + "mlp_conv.base_kernel"], 0)
        a = x @ w[p + "mlp.gate_proj.weight"].T
        m = (a / (1 + np.exp(-a)) * (x @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        if d.conv:
            m = conv(d, m, dyn, w[p + "mlp_conv.base_kernel"], 1)
        h = h + m
    return rms(h, w["norm.weight"], d.g.eps)


def top(x, k):
    """Indices of the k largest, largest first; the first of equals first."""
    return np.argsort(-x, kind="stable")[:k]


def select(d, hidden, logits, anchor):
    """-> (chosen, plain, best score gap per row) for rows after the anchor."""
    g, w = d.g, d.w
    chosen, plain, gaps = [], [], []
    prev = anchor
    if d.selector:
        hp = hidden @ w["candidate_selector.hidden_projection.weight"].T
        P, C = w["candidate_selector.predecessor_codebook"], w["candidate_selector.successor_codebook"]
    for j in range(logits.shape[0]):
        cand = top(logits[j], g.selector_top if d.selector else 1)
        plain.append(int(cand[0]))
        if d.selector:
            s = logits[j, cand] + C[cand] @ (P[prev] * hp[j])
            best = int(np.argmax(s))      # the first of equals: the earlier candidate
            srt = np.sort(s)[::-1]
            gaps.append(float(srt[0] - srt[1]) if len(srt) > 1 else np.inf)
            prev = int(cand[best])
        else:
            srt = np.sort(logits[j])[::-1]
            gaps.append(float(srt[0] - srt[1]))
            prev = int(cand[0])
        chosen.append(prev)
    return np.array(chosen), np.array(plain), np.array(gaps)


def margin(route, row):
    """err_chain(u) − err_block(u): u the unit row, err the squared residual off the subspace."""
    u = row / max(np.linalg.norm(row), 1e-12)

    def err(s):
        mean = np.asarray(s["mean"], np.float64)
        basis = np.asarray(s["basis"], np.float64).reshape(s["rank"], -1)
        c = u - mean
        r = c - basis.T @ (basis @ c)
        return float(r @ r)

    return err(route["chain"]) - err(route["block"])


def fnv1a(h, data):
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def trunk_hash64(target_path, tied):
    _, raw = stio.read_raw(target_path)
    h = 0xCBF29CE484222325
    names = ["model.embed_tokens.weight"] + ([] if tied else ["lm_head.weight"])
    for name in names:
        data = raw[name][2]
        if len(data) <= 2 << 20:
            h = fnv1a(h, data)
        else:
            h = fnv1a(fnv1a(h, data[:1 << 20]), data[-(1 << 20):])
    return f"{h:016x}"


class Context:
    """The logical context (the positions' tap rows), as the bookkeeping should keep it."""

    def __init__(self):
        self.first, self.rows = 0, []

    @property
    def end(self):
        return self.first + len(self.rows)

    def queue(self, pos, rows):
        if pos > self.end or pos < self.first:
            self.first, self.rows = pos, []
        else:
            self.rows = self.rows[:pos - self.first]
        self.rows += list(rows)

    def truncate(self, pos):
        self.rows = self.rows[:max(pos - self.first, 0)]

    def reset(self):
        self.first, self.rows = 0, []
