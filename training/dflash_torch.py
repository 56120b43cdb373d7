"""DFlash 2 drafter in PyTorch: DESIGN.md's math, term for term as
tests/drafter/reference.py computes it (float64 there), batched for training.

One function, `Drafter.blocks`, runs any number of blocks per sequence over
that sequence's context rows; training (many random anchors per sequence,
block-sparse mask) and the one-block parity check (eval_parity.py) both call
it, so what is trained is what the C drafter runs.

Parameter names are the sidecar's (without the `dflash.` prefix); the
target's embedding (also its head: tied) is a frozen buffer, not a parameter.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """rms(x, w) = x / sqrt(mean(x²) + eps) ⊙ w, in float32."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()


def rope_cos_sin(pos, head_dim, theta):
    """inv_freq[i] = theta^(−2i/hd) (formed in float64, stored float32); the angle
    pos × inv_freq in float32, as reference.rope (and Hugging Face) form it."""
    half = head_dim // 2
    inv = torch.tensor((theta ** (-(2.0 * np.arange(half)) / head_dim)).astype(np.float32),
                       device=pos.device)
    ang = pos.to(torch.float32)[..., None] * inv
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):
    """Half-split (NeoX/Qwen) rotation; x [..., heads, hd], cos/sin [..., hd/2] (no heads axis)."""
    half = x.shape[-1] // 2
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    lo, hi = x[..., :half].float(), x[..., half:].float()
    return torch.cat([lo * cos - hi * sin, hi * cos + lo * sin], dim=-1)


class Conv(nn.Module):
    """conv_s(x)[r][i] = Σ_{o < min(kernel, r+1)} (base[s][o][i] + d[r][s][o][i / group]) · x[r−o][i],
    causal over a block's rows; d = kernel_projection(x_in) made once per sub-layer."""

    def __init__(self, hidden, kernel, group):
        super().__init__()
        self.kernel, self.group = kernel, group
        base = torch.zeros(2, kernel, hidden)
        base[:, 0, :] = 1.0                      # starts as the identity
        self.base_kernel = nn.Parameter(base)
        self.kernel_projection = nn.Linear(hidden, 2 * kernel * (hidden // group), bias=False)
        nn.init.normal_(self.kernel_projection.weight, std=0.02 / math.sqrt(hidden))

    def dynamic(self, x):
        """[..., R, H] -> d [..., R, 2, kernel, groups]."""
        d = self.kernel_projection(x)
        return d.float().view(*x.shape[:-1], 2, self.kernel, -1)

    def forward(self, x, d, stage):
        """x [B, A, R, H] (rows of each block on axis 2), d from dynamic()."""
        x = x.float()
        R = x.shape[2]
        y = torch.zeros_like(x)
        for o in range(min(self.kernel, R)):
            coef = self.base_kernel[stage, o].float() + d[:, :, :, stage, o].repeat_interleave(self.group, dim=-1)
            shifted = F.pad(x, (0, 0, o, 0))[:, :, :R]          # shifted[r] = x[r − o], 0 for r < o
            y = y + coef * shifted
        return y


class Attention(nn.Module):
    def __init__(self, g):
        super().__init__()
        h, hd = g["hidden"], g["head_dim"]
        self.heads, self.kv_heads, self.head_dim = g["heads"], g["kv_heads"], hd
        self.q_proj = nn.Linear(h, g["heads"] * hd, bias=False)
        self.k_proj = nn.Linear(h, g["kv_heads"] * hd, bias=False)
        self.v_proj = nn.Linear(h, g["kv_heads"] * hd, bias=False)
        self.o_proj = nn.Linear(g["heads"] * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, g["eps"])
        self.k_norm = RMSNorm(hd, g["eps"])


class MLP(nn.Module):
    def __init__(self, g):
        super().__init__()
        h, i = g["hidden"], g["intermediate"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, g):
        super().__init__()
        h = g["hidden"]
        self.input_layernorm = RMSNorm(h, g["eps"])
        self.post_attention_layernorm = RMSNorm(h, g["eps"])
        self.self_attn = Attention(g)
        self.mlp = MLP(g)
        if g["conv_kernel"]:
            self.attention_conv = Conv(h, g["conv_kernel"], g["conv_group"])
            self.mlp_conv = Conv(h, g["conv_kernel"], g["conv_group"])


class Selector(nn.Module):
    def __init__(self, g):
        super().__init__()
        r, v, h = g["selector_rank"], g["vocab"], g["hidden"]
        self.hidden_projection = nn.Linear(h, r, bias=False)
        nn.init.normal_(self.hidden_projection.weight, std=1.0 / math.sqrt(h))
        self.predecessor_codebook = nn.Parameter(torch.randn(v, r))
        self.successor_codebook = nn.Parameter(0.01 * torch.randn(v, r))

    def bias(self, hp, prev, cand):
        """(P[prev] ⊙ hp) · C[cand]: hp [..., r], prev [...], cand [..., K] -> [..., K]."""
        u = self.predecessor_codebook[prev].float() * hp.float()
        return torch.einsum("...r,...kr->...k", u, self.successor_codebook[cand].float())


class Drafter(nn.Module):
    def __init__(self, g):
        super().__init__()
        self.g = dict(g)
        h = g["hidden"]
        self.fc = nn.Linear(len(g["taps"]) * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, g["eps"])
        self.layers = nn.ModuleList([Layer(g) for _ in range(g["layers"])])
        self.norm = RMSNorm(h, g["eps"])
        if g["selector_rank"]:
            self.candidate_selector = Selector(g)
        for n, p in self.named_parameters():
            if n == "fc.weight" or n.endswith("_proj.weight"):     # the attention and MLP matrices
                nn.init.normal_(p, std=0.02)
        self.register_buffer("embed", torch.zeros(g["vocab"], h), persistent=False)

    # -- geometry helpers
    def window_of(self, l):
        w = self.g.get("windows") or []
        return w[l] if w else self.g["window"]

    def rotary(self, l):
        return l not in (self.g.get("no_rope") or [])

    def set_embedding(self, weight):
        """The target's embedding table (= its head: tied), frozen."""
        self.embed = weight.detach().float().clone().to(self.embed.device)

    # -- the math
    def context(self, taps):
        """taps [B, L, n_taps·H] (positions 0 … L−1) -> per layer (K, V) [B, kv, L, hd]."""
        g = self.g
        B, L, _ = taps.shape
        t = self.hidden_norm(self.fc(taps))
        pos = torch.arange(L, device=taps.device)
        cos, sin = rope_cos_sin(pos, g["head_dim"], g["rope_theta"])
        out = []
        for l, layer in enumerate(self.layers):
            a = layer.self_attn
            k = a.k_norm(a.k_proj(t).view(B, L, a.kv_heads, a.head_dim))
            if self.rotary(l):
                k = apply_rope(k, cos, sin)
            v = a.v_proj(t).view(B, L, a.kv_heads, a.head_dim)
            out.append((k.transpose(1, 2), v.transpose(1, 2)))
        return out

    def mask(self, L, anchors, rows, window):
        """[B, 1, A·R, L + A·R] bool: context row p is seen by block row r of the block at a when
        p < a and (no window, or p ≥ a + r + 1 − window); block rows see every row of their own
        block (not causal) and nothing of the other blocks."""
        B, A = anchors.shape
        dev = anchors.device
        p = torch.arange(L, device=dev).view(1, 1, 1, L)
        a = anchors.view(B, A, 1, 1)
        r = torch.arange(rows, device=dev).view(1, 1, rows, 1)
        ctx = p < a
        if window:
            ctx = ctx & (p >= a + r + 1 - window)
        ctx = ctx.expand(B, A, rows, L).reshape(B, A * rows, L)
        blk_id = torch.arange(A, device=dev).repeat_interleave(rows)
        blk = (blk_id[:, None] == blk_id[None, :]).expand(B, A * rows, A * rows)
        return torch.cat([ctx, blk], dim=2).unsqueeze(1)

    def blocks(self, ctx, anchors, block_tokens):
        """ctx: context(taps of positions 0 … L−1); anchors [B, A] (positions); block_tokens
        [B, A, R] = [anchor, MASK × (R−1)] per block. -> rows after the last norm [B, A, R, H]."""
        g = self.g
        B, A, R = block_tokens.shape
        L = ctx[0][0].shape[2]
        h = self.embed[block_tokens].float()
        pos = anchors[:, :, None] + torch.arange(R, device=anchors.device)
        cos, sin = rope_cos_sin(pos, g["head_dim"], g["rope_theta"])
        masks = {}
        for l, layer in enumerate(self.layers):
            a = layer.self_attn
            win = self.window_of(l)
            if win not in masks:
                masks[win] = self.mask(L, anchors, R, win)
            conv = g["conv_kernel"] > 0
            x = layer.input_layernorm(h)
            if conv:
                d = layer.attention_conv.dynamic(x)
                x = layer.attention_conv(x, d, 0)
            q_lin = a.q_proj(x)
            dt = q_lin.dtype                     # bfloat16 under autocast, else float32
            q = a.q_norm(q_lin.view(B, A, R, a.heads, a.head_dim))
            k = a.k_norm(a.k_proj(x).view(B, A, R, a.kv_heads, a.head_dim))
            v = a.v_proj(x).view(B, A, R, a.kv_heads, a.head_dim)
            if self.rotary(l):
                q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            q = q.reshape(B, A * R, a.heads, a.head_dim).transpose(1, 2)
            k = k.reshape(B, A * R, a.kv_heads, a.head_dim).transpose(1, 2)
            v = v.reshape(B, A * R, a.kv_heads, a.head_dim).transpose(1, 2)
            ck, cv = ctx[l]
            rep = a.heads // a.kv_heads
            # GQA: query head j reads KV head j // rep (reference.block's kvh = hq // rep)
            keys = torch.cat([ck.to(dt), k.to(dt)], dim=2).repeat_interleave(rep, dim=1)
            vals = torch.cat([cv.to(dt), v.to(dt)], dim=2).repeat_interleave(rep, dim=1)
            y = F.scaled_dot_product_attention(q.to(dt), keys, vals, attn_mask=masks[win])
            y = y.transpose(1, 2).reshape(B, A, R, a.heads * a.head_dim)
            o = a.o_proj(y)
            if conv:
                o = layer.attention_conv(o, d, 1)
            h = h + o.float()
            x = layer.post_attention_layernorm(h)
            if conv:
                d = layer.mlp_conv.dynamic(x)
                x = layer.mlp_conv(x, d, 0)
            m = layer.mlp(x)
            if conv:
                m = layer.mlp_conv(m, d, 1)
            h = h + m.float()
        return self.norm(h)

    def logits(self, h):
        """The target's head (tied: its embedding) over block rows."""
        return F.linear(h, self.embed)

    # -- selection (reference.select)
    @torch.no_grad()
    def select(self, h, logits, anchor_tokens):
        """h [N, R−1, H] rows after the anchor, logits [N, R−1, V], anchor_tokens [N] ->
        (chosen [N, R−1], plain [N, R−1]). Each row's top selector_top re-scored against the
        token chosen before it; the first of equal scores wins (torch.argmax's rule)."""
        plain = logits.argmax(-1)
        if not self.g["selector_rank"]:
            return plain, plain
        sel = self.candidate_selector
        hp = sel.hidden_projection(h.float())
        prev = anchor_tokens
        chosen = []
        for j in range(logits.shape[1]):
            val, cand = torch.topk(logits[:, j].float(), self.g["selector_top"], dim=-1)
            s = val + sel.bias(hp[:, j], prev, cand)
            prev = cand.gather(1, s.argmax(-1, keepdim=True)).squeeze(1)
            chosen.append(prev)
        return torch.stack(chosen, 1), plain


def load_numpy_weights(model, weights):
    """Unprefixed float arrays (export.read_f32 / stored_weights) into the module."""
    sd = model.state_dict()
    missing = set(sd) - set(weights)
    extra = set(weights) - set(sd)
    assert not missing and not extra, (sorted(missing), sorted(extra))
    with torch.no_grad():
        for n, t in sd.items():
            t.copy_(torch.from_numpy(np.asarray(weights[n], np.float32)).reshape(t.shape))


def numpy_weights(model):
    return {n: t.detach().float().cpu().numpy() for n, t in model.state_dict().items()}


class TapHooks:
    """The raw outputs of the target's layers `taps` (residual stream after the layer, before
    any norm: forward hooks on model.model.layers[i]), concatenated in taps order."""

    def __init__(self, model, taps):
        self.taps, self.out, self.handles = list(taps), {}, []
        for i in self.taps:
            self.handles.append(model.model.layers[i].register_forward_hook(self._hook(i)))

    def _hook(self, i):
        def fn(mod, args, output):
            self.out[i] = output[0] if isinstance(output, tuple) else output
        return fn

    def collect(self):
        x = torch.cat([self.out[i].float() for i in self.taps], dim=-1)
        self.out = {}
        return x

    def remove(self):
        for h in self.handles:
            h.remove()
