#!/usr/bin/python3
"""Checks a `lat export` against an independent PyTorch forward of the HybridLM.

Usage:
  build/lat export --checkpoint CKPT --out DIR --check-tokens 1,2,3,...
  /usr/bin/python3 tools/check_export.py DIR [--tokens 1,2,3 | --tokens-file FILE] [--atol 1e-4]

`lat export --check-tokens` writes DIR/check_logits.safetensors: "tokens", and lat's logits
for them from its training forward ("logits") and from its generation path, one token at a
time ("logits_step"), both computed from the export read back. This script reads
DIR/model.safetensors and DIR/config.json itself (its own safetensors parser: no package
beyond torch and numpy), runs the model below in float64 on the same tokens, and asserts
max |lat - reference| < atol for both. The tokens default to those of the check file; given
ones must equal them.

The reference is written from the papers' recurrent formulas, one token at a time, and
matches lat's conventions (layers/*.cpp):
  block        h = x + mixer(rms_norm(x)); h + down(silu(gate h') * up h'), h' = rms_norm(h)
  rms_norm     x / sqrt(mean(x^2) + eps) * w
  attn         RoPE (Su et al. 2021) non-interleaved: pair (i, i + D/2) turns by p theta^(-2i/D);
               GQA: query head h reads kv head h // (H / Hkv); scale D^-0.5; sliding window
               j > i - window
  linear_attn  phi in {elu+1, relu, identity} on q, k; S_t = S_{t-1} + k_t v_t^T,
               o_t = scale S_t^T q_t, normalized: / (scale q_t . z_t + 1e-6), z_t = sum k
               (Katharopoulos et al. 2020, sec. 3.2-3.4); no short conv, no output norm
  simple_gla   S_t = exp(g_t) S_{t-1} + k_t v_t^T, g_t = -exp(A_log) softplus(x a_proj^T + dt_bias)
               (Mamba-2 decay, Dao & Gu 2024); retention: g_h = log(1 - 2^(-5-h)) (Sun et al. 2023)
  delta_net    q, k L2-normalized (x / sqrt(sum x^2 + 1e-6)), beta = sigmoid(x b_proj^T),
  gdn          S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T (Yang et al. 2025);
               without short conv, SiLU on q, k, v
  short conv   causal depthwise, weight [C, 1, W], then SiLU
  gated output o_proj(rms_norm_V(o) * silu(x g_proj^T)) (without use_gate: o_proj(rms_norm_V(o)))
  scale        K^-0.5 for every linear mixer

Exit codes: 0 match, 1 mismatch or bad input, 77 torch or numpy missing (a skip) -- except
that with CI=true in the environment a missing torch is an error (exit 1).
"""
import argparse
import json
import math
import os
import struct
import sys

SKIP = 77


def require_torch(user="check_export.py"):
    """Exits SKIP when torch or numpy is missing (exit 1 with CI=true); `user` names the caller."""
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI", "").lower() == "true":
            print(f"error: {user} needs torch and numpy (CI=true): {e}", file=sys.stderr)
            sys.exit(1)
        print(f"skipped: torch or numpy missing ({e}); install python3-torch python3-numpy", file=sys.stderr)
        sys.exit(SKIP)


def load_safetensors(path):
    """name -> float64 torch tensor; F32, BF16 and F16."""
    import numpy as np
    import torch

    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} overruns the file ({len(data)} bytes)")
    header = json.loads(data[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[base + begin:base + end]
        dtype = entry["dtype"]
        if dtype == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif dtype == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dtype}")
        tensors[name] = torch.from_numpy(a.astype(np.float64).reshape(entry["shape"]))
    return tensors


# ---- the reference model (float64, one sequence, x: [T, d_model]) ----------------------------

def rms_norm(x, w, eps):
    import torch
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def linear(x, w):
    return x @ w.T  # w: [out, in], as torch.nn.Linear


def silu(x):
    import torch
    return x * torch.sigmoid(x)


def short_conv(x, w):
    """Causal depthwise conv then SiLU: y[t, c] = silu(sum_k w[c, 0, k] x[t - (W-1) + k, c])."""
    import torch
    T, C = x.shape
    W = w.shape[2]
    xp = torch.cat([torch.zeros(W - 1, C, dtype=x.dtype), x])
    y = torch.zeros_like(x)
    for k in range(W):
        y += w[:, 0, k] * xp[k:k + T]
    return silu(y)


def rope(x, theta):
    """x: [T, H, D] rotated by position t, non-interleaved halves."""
    import torch
    T, H, D = x.shape
    half = D // 2
    inv_freq = torch.tensor([theta ** (-2.0 * i / D) for i in range(half)], dtype=torch.float64)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [T, half]
    cos, sin = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(x, p, cfg):
    import torch
    T = x.shape[0]
    H, D = cfg["n_heads"], cfg["head_dim"]
    Hkv = cfg["attn"]["n_kv_heads"]
    window = cfg["attn"]["window_size"]
    theta = cfg["attn"]["rope_theta"]
    q = rope(linear(x, p["q_proj.weight"]).view(T, H, D), theta)
    k = rope(linear(x, p["k_proj.weight"]).view(T, Hkv, D), theta)
    v = linear(x, p["v_proj.weight"]).view(T, Hkv, D)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    visible = j <= i
    if window > 0:
        visible &= j > i - window
    o = torch.zeros(T, H, D, dtype=x.dtype)
    for h in range(H):
        hk = h // (H // Hkv)
        scores = (q[:, h] @ k[:, hk].T) * D ** -0.5
        scores = scores.masked_fill(~visible, float("-inf"))
        o[:, h] = torch.softmax(scores, dim=-1) @ v[:, hk]
    return linear(o.reshape(T, H * D), p["o_proj.weight"])


def mamba2_log_decay(x, p):
    import torch
    return -torch.exp(p["A_log"]) * torch.nn.functional.softplus(linear(x, p["a_proj.weight"]) + p["dt_bias"])


def l2norm(x):
    import torch
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def linear_mixer(kind, x, p, cfg):
    import torch
    T = x.shape[0]
    H, K, V = cfg["n_heads"], cfg["head_dim"], cfg["value_head_dim"]
    lin = cfg["linear"]
    scale = K ** -0.5
    q, k, v = (linear(x, p[f"{n}_proj.weight"]) for n in "qkv")
    if kind != "linear_attn" and lin["use_short_conv"]:
        q, k, v = (short_conv(t, p[f"{n}_conv1d.weight"]) for t, n in zip((q, k, v), "qkv"))
    elif kind in ("delta_net", "gdn"):
        q, k, v = silu(q), silu(k), silu(v)
    q, k, v = q.view(T, H, K), k.view(T, H, K), v.view(T, H, V)

    if kind == "linear_attn":
        phi = {"elu1": lambda t: torch.nn.functional.elu(t) + 1.0, "relu": torch.relu,
               "identity": lambda t: t}[lin["feature_map"]]
        q, k = phi(q), phi(k)
    if kind in ("delta_net", "gdn"):
        q, k = l2norm(q), l2norm(k)
        beta = torch.sigmoid(linear(x, p["b_proj.weight"]))  # [T, H]
    if kind in ("simple_gla", "gdn"):
        g = mamba2_log_decay(x, p)  # [T, H]
    elif kind == "retention":
        g = torch.tensor([math.log1p(-2.0 ** (-5 - h)) for h in range(H)], dtype=x.dtype).expand(T, H)
    else:
        g = torch.zeros(T, H, dtype=x.dtype)

    S = torch.zeros(H, K, V, dtype=x.dtype)
    z = torch.zeros(H, K, dtype=x.dtype)
    o = torch.zeros(T, H, V, dtype=x.dtype)
    for t in range(T):
        for h in range(H):
            qt, kt, vt = q[t, h], k[t, h], v[t, h]
            S[h] = torch.exp(g[t, h]) * S[h]
            if kind in ("delta_net", "gdn"):
                u = beta[t, h] * (vt - kt @ S[h])  # beta (v - S^T k)
                S[h] = S[h] + torch.outer(kt, u)
            else:
                S[h] = S[h] + torch.outer(kt, vt)
            o[t, h] = scale * (qt @ S[h])
            if kind == "linear_attn" and lin["normalize"]:
                z[h] = z[h] + kt
                o[t, h] = o[t, h] / (scale * (qt @ z[h]) + 1e-6)

    if kind == "linear_attn":
        return linear(o.reshape(T, H * V), p["o_proj.weight"])
    y = rms_norm(o, p["o_norm.weight"], cfg["norm_eps"])
    if lin["use_gate"]:
        y = y * silu(linear(x, p["g_proj.weight"])).view(T, H, V)
    return linear(y.reshape(T, H * V), p["o_proj.weight"])


def reference_logits(tokens, weights, cfg):
    import torch
    eps = cfg["norm_eps"]
    h = weights["embeddings.weight"][torch.tensor(tokens)]
    for i, kind in enumerate(cfg["layers"]):
        prefix = f"layers.{i}."
        p = {name[len(prefix + "attn."):]: w for name, w in weights.items() if name.startswith(prefix + "attn.")}
        x = rms_norm(h, weights[prefix + "attn_norm.weight"], eps)
        h = h + (attention(x, p, cfg) if kind == "attn" else linear_mixer(kind, x, p, cfg))
        x = rms_norm(h, weights[prefix + "mlp_norm.weight"], eps)
        mlp = lambda n: weights[f"{prefix}mlp.{n}.weight"]  # noqa: E731
        h = h + linear(silu(linear(x, mlp("gate_proj"))) * linear(x, mlp("up_proj")), mlp("down_proj"))
    h = rms_norm(h, weights["norm.weight"], eps)
    head = weights["embeddings.weight"] if cfg["tie_embeddings"] else weights["lm_head.weight"]
    return linear(h, head)


def parse_tokens(text):
    return [int(t) for t in text.replace(",", " ").split()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export_dir", help="a `lat export --format safetensors` directory")
    parser.add_argument("--tokens", help="comma-separated token ids (default: those of the check file)")
    parser.add_argument("--tokens-file", help="a file of token ids separated by commas or whitespace")
    parser.add_argument("--logits", help="lat's logits (default: EXPORT_DIR/check_logits.safetensors)")
    parser.add_argument("--atol", type=float, default=1e-4, help="max abs difference allowed (default 1e-4)")
    args = parser.parse_args()
    require_torch()
    import torch

    d = args.export_dir
    with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    weights = load_safetensors(os.path.join(d, "model.safetensors"))
    check = load_safetensors(args.logits or os.path.join(d, "check_logits.safetensors"))
    file_tokens = [int(t) for t in check["tokens"].tolist()]
    tokens = file_tokens
    if args.tokens_file:
        with open(args.tokens_file, encoding="utf-8") as f:
            tokens = parse_tokens(f.read())
    elif args.tokens:
        tokens = parse_tokens(args.tokens)
    if tokens != file_tokens:
        print(f"error: the tokens given differ from those lat computed logits for ({file_tokens[:8]}...); "
              f"rerun lat export --check-tokens with them", file=sys.stderr)
        return 1

    with torch.no_grad():
        ref = reference_logits(tokens, weights, cfg)
    failed = False
    for name in ("logits", "logits_step"):
        got = check[name]
        if got.shape != ref.shape:
            print(f"{name}: shape {list(got.shape)} != reference {list(ref.shape)}", file=sys.stderr)
            failed = True
            continue
        diff = (got - ref).abs().max().item()
        ok = diff < args.atol
        failed |= not ok
        print(f"{d}: {name}: max |lat - reference| = {diff:.3e} over {len(tokens)} tokens x {ref.shape[1]} "
              f"({'ok' if ok else 'FAIL'}, atol {args.atol:g}; layers {','.join(cfg['layers'])})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
