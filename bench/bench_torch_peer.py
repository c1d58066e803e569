#!/usr/bin/env python3
"""PyTorch peer of bench_model's training rows: the same hybrid, timed the same way.

The model is built from a lat config's model section (default configs/shakespeare_hybrid.yaml:
d_model 128, 4 heads, layers gdn,gdn,attn,gdn, block 256, batch 4) with lat's layer
structure, so that the work per step is lat's:
  gdn   q, k, v, a, b, g projections; causal depthwise short convolutions (conv_size) with
        SiLU on q, k, v; L2-normalised q, k; decay g = -exp(A_log) softplus(a + dt_bias),
        beta = sigmoid(b); the chunkwise gated delta rule (Yang et al. 2024, "Gated Delta
        Networks", sec. 3; ALGORITHMS.md's chunk form, WY representation through a unit
        lower-triangular solve) in chunks of model.linear.chunk_size; per-head RMSNorm of the
        output times SiLU(g); o projection.
  attn  q, k, v projections, RoPE (rope_theta), causal scaled_dot_product_attention, o
        projection. A window (model.attn.window_size) shorter than the block is a boolean
        [T, T] mask (key j visible to query i when i - W < j <= i) given to
        scaled_dot_product_attention as attn_mask; a window of the block or more, or 0, is
        is_causal=True.
  mlp   SwiGLU with lat's hidden width (2/3 mlp_ratio d_model rounded up to 32).
Pre-norm RMSNorm blocks, a final RMSNorm, an untied LM head, cross-entropy, global-norm
clipping (train.grad_clip) and torch.optim.AdamW (train.lr, weight_decay) at every step.
Numbers are not lat's (other init), the FLOPs and memory traffic are.

Sizes (--preset, bench_model --preset's shapes): main (the config as it is, and at nanoGPT
size: block 64, batch 12), 25M (d_model 512, layers gdn,gdn,gdn,attn x 2, 8 heads of 64, block
512, batch 4, chunk 64, window 512) and 100M (d_model 768, gdn,gdn,gdn,attn x 3, 12 heads of
64, block 1024, batch 4, chunk 64, window 1024), set over the config's model/data/train keys. --long-context instead runs, at the 25M width, for
each block of --blocks (512,2048,8192,16384) at 16384 tokens per step (batch 16384 / block), a
gdn-only model (gdn x 8) and the hybrid with a window of 512 (hybrid-swa), as bench_model
--long-context. Each row reports tokens/s, peak RSS (resource.getrusage's ru_maxrss of the
process that ran the mode: each mode runs in a fresh spawned process, so the figure is its own,
torch's import included), parameters and MFU: model FLOPs per token (bench/model_flops.h's
count, docs/MFU.md, ported below: the same structure) x tokens/s over torch's own product peak
at that precision (torch.mm of 1024 x 1024 fp32, or bf16 for compile-bf16, best of 20, at
--threads, in this process, on the rows' clock: CPU time with --cpu-time).

Modes (--modes, each timed on the same random batches):
  eager          fp32
  compile        torch.compile (inductor, its C++ CPU backend) of the model's forward, fp32
  compile-bf16   the same under torch.autocast("cpu", dtype=torch.bfloat16): matmuls in bf16
Median ms/step over --steps after --warmup steps; tokens/s = batch * block / median. --cpu-time
times with the process CPU clock instead of the wall clock (with --threads 1 on shared cores it
still measures the work, as bench_linear_attention --cpu-time).
--mamba2 times instead one transformers Mamba2Mixer (transformers.models.mamba2; 5.24 has no
separate torch_forward: its forward falls back to plain PyTorch when neither the `kernels` hub
package nor mamba_ssm / causal_conv1d is installed, which the script checks) forward + backward
of x [4, 2048, 256] at hidden_size 256, expand 2, head_dim 64 (8 heads), state_size 128,
n_groups 1, chunk_size 64, conv_kernel 4, fp32, in train mode, modes eager and compile
(--modes); median ms per forward+backward. Its lat peer is build/bench/bench_linear_attention
--shape mamba2 (rows simple_gla: the SSD op alone, mamba2_mixer: the whole mixer).
--kda times instead transformers' chunk_kimi_delta_attention (transformers.models.kimi_linear,
its plain-PyTorch path: the script refuses to run where `fla` or `kernels` is importable)
forward + backward (dq, dk, dv, dg, dbeta) at B 4, T 2048, H 4, K = V = 64, chunk 64, fp32,
use_qk_l2norm_in_kernel as KimiLinearDeltaAttention calls it; g drawn as the forget gate makes
it at initialization (-exp(A_log) softplus(x + dt_bias), A_log = log U[1, 16] per head, dt_bias
for dt log-uniform in [1e-3, 1e-1] per channel, x ~ N(0, 1)), beta = sigmoid(N(0, 1)); modes eager and
compile; median ms per forward+backward. Its lat peer is build/bench/bench_linear_attention
--op kda --op gated_delta_rule --T 2048 (B 4, H 4, K = V = 64, C 64).
Run it with the interop virtualenv (make interop-venv): .venv-interop/bin/python
bench/bench_torch_peer.py --threads 1; compare with build/bench/bench_model --skip-generate
--skip-inference --rows hybrid --threads 1 run right after (this VM's speed drifts between periods).
"""
import argparse
import math
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml


def swiglu_hidden(d_model, mlp_ratio):
    return 32 * math.ceil(2.0 * mlp_ratio * d_model / 3.0 / 32.0 - 1e-9)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ShortConv(nn.Module):
    """Causal depthwise convolution over time with SiLU, x [B, T, C]."""

    def __init__(self, channels, size):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, size, groups=channels, padding=size - 1, bias=False)

    def forward(self, x):
        t = x.shape[1]
        return F.silu(self.conv(x.transpose(1, 2))[..., :t].transpose(1, 2))


def chunk_gated_delta_rule(q, k, v, g, beta, chunk):
    """q, k [B, H, T, K], v [B, H, T, V], g (log decay) and beta [B, H, T]; T a multiple of chunk."""
    b, h, t, dk = q.shape
    dv = v.shape[-1]
    n = t // chunk
    q = q * dk ** -0.5
    k_beta = k * beta[..., None]
    v_beta = v * beta[..., None]
    q, k, k_beta, v_beta = (x.reshape(b, h, n, chunk, -1) for x in (q, k, k_beta, v_beta))
    g = g.reshape(b, h, n, chunk).cumsum(-1)
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = (g[..., :, None] - g[..., None, :]).masked_fill(~lower, float("-inf")).exp()
    strict = (k_beta @ k.transpose(-1, -2) * decay).tril(-1)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    # (I + strict)^-1 applied to the beta-scaled values and decayed keys (the WY form).
    w_inv = torch.linalg.solve_triangular(eye + strict, eye.expand_as(strict), upper=False, unitriangular=True)
    u = w_inv @ v_beta
    w = w_inv @ (k_beta * g.exp()[..., None])
    state = q.new_zeros(b, h, dk, dv)
    outs = []
    for i in range(n):
        qi, ki, gi = q[:, :, i], k[:, :, i], g[:, :, i]
        intra = (qi @ ki.transpose(-1, -2) * decay[:, :, i])
        v_new = u[:, :, i] - w[:, :, i] @ state
        outs.append((qi * gi.exp()[..., None]) @ state + intra @ v_new)
        last = gi[..., -1:]
        state = state * last.exp()[..., None] + (ki * (last - gi).exp()[..., None]).transpose(-1, -2) @ v_new
    return torch.stack(outs, dim=2).reshape(b, h, t, dv)


class GatedDeltaNet(nn.Module):
    def __init__(self, d, heads, conv_size, chunk, eps):
        super().__init__()
        self.h, self.dk, self.chunk = heads, d // heads, chunk
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.a_proj, self.b_proj = nn.Linear(d, heads, bias=False), nn.Linear(d, heads, bias=False)
        self.g_proj, self.o_proj = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.q_conv, self.k_conv, self.v_conv = (ShortConv(d, conv_size) for _ in range(3))
        self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(1, 16)))
        self.dt_bias = nn.Parameter(torch.empty(heads).uniform_(-4, -2))
        self.o_norm = RMSNorm(self.dk, eps)

    def forward(self, x):
        b, t, _ = x.shape
        split = lambda y: y.reshape(b, t, self.h, -1).transpose(1, 2)
        q = F.normalize(split(self.q_conv(self.q_proj(x))), dim=-1)
        k = F.normalize(split(self.k_conv(self.k_proj(x))), dim=-1)
        v = split(self.v_conv(self.v_proj(x)))
        g = (-self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)).transpose(1, 2)
        beta = torch.sigmoid(self.b_proj(x)).transpose(1, 2)
        o = chunk_gated_delta_rule(q, k, v, g.float(), beta, self.chunk).transpose(1, 2)
        o = self.o_norm(o) * F.silu(self.g_proj(x).reshape(b, t, self.h, -1))
        return self.o_proj(o.reshape(b, t, -1))


class Attention(nn.Module):
    def __init__(self, d, heads, theta, block, window):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.window = window if 0 < window < block else 0
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))
        inv = theta ** (-torch.arange(0, self.dh, 2, dtype=torch.float64) / self.dh)
        angle = torch.arange(block, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", angle.cos().float(), persistent=False)
        self.register_buffer("sin", angle.sin().float(), persistent=False)

    def rope(self, x):
        t = x.shape[2]
        x1, x2 = x[..., : self.dh // 2], x[..., self.dh // 2 :]
        c, s = self.cos[:t], self.sin[:t]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    def forward(self, x):
        b, t, _ = x.shape
        split = lambda y: y.reshape(b, t, self.h, self.dh).transpose(1, 2)
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        if self.window:
            i = torch.arange(t)
            visible = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - self.window)
            o = F.scaled_dot_product_attention(self.rope(q), self.rope(k), v, attn_mask=visible)
        else:
            o = F.scaled_dot_product_attention(self.rope(q), self.rope(k), v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, mixer, d, hidden, eps):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(d, eps), RMSNorm(d, eps)
        self.attn, self.mlp = mixer, SwiGLU(d, hidden)

    def forward(self, x):
        h = x + self.attn(self.attn_norm(x))
        return h + self.mlp(self.mlp_norm(h))


class HybridLM(nn.Module):
    def __init__(self, model, block, vocab):
        super().__init__()
        d, heads = model["d_model"], model["n_heads"]
        eps = model.get("norm_eps", 1e-6)
        hidden = model.get("intermediate_size") or swiglu_hidden(d, model.get("mlp_ratio", 4.0))
        linear = model.get("linear", {})
        layers = []
        for kind in model["layers"].split(","):
            if kind == "gdn":
                mixer = GatedDeltaNet(d, heads, linear.get("conv_size", 4), linear.get("chunk_size", 64), eps)
            elif kind == "attn":
                window = (model.get("attn") or {}).get("window_size", 0)
                mixer = Attention(d, heads, model.get("rope_theta", 10000.0), block, window)
            else:
                sys.exit(f"bench_torch_peer: layer kind '{kind}' is not modelled here (gdn, attn)")
            layers.append(Block(mixer, d, hidden, eps))
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(d, eps)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


LONG_CONTEXT_TOKENS = 16384  # tokens per step of the long-context rows


def sized(cfg, d_model, layers, block, batch, window):
    """A copy of cfg with bench_model's sized_overrides: heads of 64, chunks of 64, grad_accum 1."""
    cfg = {key: dict(value) if isinstance(value, dict) else value for key, value in cfg.items()}
    model = cfg["model"]
    model.update(d_model=d_model, n_layers=len(layers.split(",")), n_heads=d_model // 64, layers=layers)
    model["linear"] = {**(model.get("linear") or {}), "chunk_size": 64}
    model["attn"] = {**(model.get("attn") or {}), "window_size": window}
    cfg["data"]["block_size"] = block
    cfg["train"].update(batch_size=batch, grad_accum=1)
    return cfg


def at_nanogpt_size(cfg):
    """A copy of cfg at bench_model's nanoGPT size: block 64, batch 12, grad_accum 1."""
    cfg = {key: dict(value) if isinstance(value, dict) else value for key, value in cfg.items()}
    cfg["data"]["block_size"] = 64
    cfg["train"].update(batch_size=12, grad_accum=1)
    return cfg


def training_rows(cfg, args):
    """(name, config) of each row: bench_model's all_training_rows / long_context_rows."""
    if args.long_context:
        rows = []
        for block in args.blocks:
            batch = max(1, LONG_CONTEXT_TOKENS // block)
            rows.append((f"gdn block {block}", sized(cfg, 512, ",".join(["gdn"] * 8), block, batch, 0)))
            rows.append((f"hybrid-swa block {block}", sized(cfg, 512, ",".join(["gdn,gdn,gdn,attn"] * 2), block, batch, 512)))
        return rows
    if args.preset == "25M":
        return [("25M", sized(cfg, 512, ",".join(["gdn,gdn,gdn,attn"] * 2), 512, 4, 512))]
    if args.preset == "100M":
        return [("100M", sized(cfg, 768, ",".join(["gdn,gdn,gdn,attn"] * 3), 1024, 4, 1024))]
    return [(Path(args.config).stem, cfg), (f"{Path(args.config).stem} nanoGPT-size", at_nanogpt_size(cfg))]


def block_list(text):
    """--blocks: comma-separated positive integers."""
    try:
        blocks = [int(b) for b in text.split(",")]
    except ValueError:
        blocks = []
    if not blocks or min(blocks) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got '{text}'")
    return blocks


def attended_pairs(t, w):
    """Query-key pairs a causal attention with window w (0: none) scores over t tokens."""
    w = min(w, t) if w > 0 else t
    return w * (w + 1) / 2 + (t - w) * w


def training_flops_per_token(model, t):
    """bench/model_flops.h's training_flops_per_token (docs/MFU.md) for this peer's model:
    (forward, backward) FLOPs per token at sequences of t tokens."""
    forward = backward = 0.0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            forward += 2.0 * module.in_features * module.out_features
            backward += 4.0 * module.in_features * module.out_features
    for block in model.layers:
        mixer = block.attn
        if isinstance(mixer, Attention):
            per_token = attended_pairs(t, mixer.window) / t
            forward += mixer.h * per_token * (2 * mixer.dh + 2 * mixer.dh)
            backward += mixer.h * per_token * (6 * mixer.dh + 4 * mixer.dh)
        else:
            c, k, v = mixer.chunk, mixer.dk, mixer.dk
            scale = mixer.h * math.ceil(t / c) / t
            forward += scale * (6 * c * c * k + 4 * c * c * v + 6 * c * k * v + c ** 3 / 3)
            backward += scale * (16 * c * c * k + 10 * c * c * v + 16 * c * k * v + c ** 3 / 3)
    return forward, backward


def product_peak(dtype, cpu_time):
    """FLOP/s of torch.mm of two 1024 x 1024 matrices of dtype, best of 20 after a warm-up, on
    the rows' clock (process CPU time with --cpu-time, else wall time)."""
    clock = time.process_time if cpu_time else time.perf_counter
    n = 1024
    gen = torch.Generator().manual_seed(1)
    a, b = (torch.randn(n, n, generator=gen).to(dtype) for _ in range(2))
    torch.mm(a, b)
    best = float("inf")
    for _ in range(20):
        start = clock()
        torch.mm(a, b)
        best = min(best, clock() - start)
    return 2.0 * n ** 3 / best


def median_seconds(step, args):
    """Median seconds of step(i) over args.steps calls after args.warmup untimed ones; wall clock,
    or with --cpu-time this process's CPU time (all its threads)."""
    clock = time.process_time if args.cpu_time else time.perf_counter
    times = []
    for i in range(args.warmup + args.steps):
        start = clock()
        step(i)
        if i >= args.warmup:
            times.append(clock() - start)
    return statistics.median(times)


def time_mode(mode, cfg, args):
    """(median seconds per step, parameters, (forward, backward) FLOPs per token, peak RSS in MiB)
    of mode on cfg; run in a process of its own (main), so the peak RSS is the mode's."""
    import resource

    torch.set_num_threads(args.threads)
    batch, block = cfg["train"]["batch_size"], cfg["data"]["block_size"]
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, args.vocab, (batch, block + 1), generator=gen) for _ in range(8)]
    torch.manual_seed(0)
    train = cfg.get("train", {})
    block = cfg["data"]["block_size"]
    model = HybridLM(cfg["model"], block, args.vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=train.get("lr", 3e-3), weight_decay=train.get("weight_decay", 0.1),
                            betas=(0.9, 0.99))
    forward = torch.compile(model) if mode.startswith("compile") else model
    use_bf16 = mode.endswith("bf16")

    def step(ids):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
            logits = forward(ids[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.get("grad_clip", 1.0))
        opt.step()
        return loss.item()

    seconds = median_seconds(lambda i: step(batches[i % len(batches)]), args)
    params = sum(p.numel() for p in model.parameters())
    flops = training_flops_per_token(model, block)
    return seconds, params, flops, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def time_mamba2_mixer(mode, args):
    """Median seconds of one Mamba2Mixer forward + backward, x [4, 2048, 256]."""
    import importlib.util

    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    for package in ("kernels", "mamba_ssm", "causal_conv1d"):
        if importlib.util.find_spec(package) is not None:
            sys.exit(f"bench_torch_peer: --mamba2: '{package}' is installed; the peer is the plain-PyTorch path "
                     "(run it in an environment without it)")
    torch.manual_seed(0)
    config = Mamba2Config(hidden_size=256, expand=2, head_dim=64, num_heads=8, state_size=128, n_groups=1,
                          chunk_size=64, conv_kernel=4, use_conv_bias=True, use_bias=False, num_hidden_layers=1,
                          vocab_size=65)
    mixer = Mamba2Mixer(config, layer_idx=0).train()
    forward = torch.compile(mixer) if mode == "compile" else mixer
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 2048, 256, generator=gen, requires_grad=True)
    dy = torch.randn(4, 2048, 256, generator=gen)

    def step():
        forward(x).backward(dy)
        x.grad = None
        mixer.zero_grad(set_to_none=True)

    return median_seconds(lambda i: step(), args)


def time_chunk_kda(mode, args):
    """Median seconds of one chunk_kimi_delta_attention forward + backward, [4, 2048, 4, 64]."""
    import importlib.util

    from transformers.models.kimi_linear.modeling_kimi_linear import chunk_kimi_delta_attention

    for package in ("fla", "kernels"):
        if importlib.util.find_spec(package) is not None:
            sys.exit(f"bench_torch_peer: --kda: '{package}' is installed; the peer is the plain-PyTorch path "
                     "(run it in an environment without it)")
    batch, length, heads, dim = 4, 2048, 4, 64
    gen = torch.Generator().manual_seed(1)

    def leaf(t):
        return t.requires_grad_(True)

    q = leaf(torch.randn(batch, length, heads, dim, generator=gen))
    k = leaf(torch.randn(batch, length, heads, dim, generator=gen))
    v = leaf(torch.randn(batch, length, heads, dim, generator=gen))
    a_log = torch.log(torch.empty(heads, 1).uniform_(1.0, 16.0, generator=gen))
    dt = torch.exp(torch.empty(heads, dim).uniform_(math.log(1e-3), math.log(1e-1), generator=gen))
    dt_bias = dt + torch.log(-torch.expm1(-dt))  # softplus^-1(dt)
    gate_in = torch.randn(batch, length, heads, dim, generator=gen)
    g = leaf(-torch.exp(a_log) * F.softplus(gate_in + dt_bias))
    beta = leaf(torch.sigmoid(torch.randn(batch, length, heads, generator=gen)))
    do = torch.randn(batch, length, heads, dim, generator=gen)

    def attend(q, k, v, g, beta):
        return chunk_kimi_delta_attention(q, k, v, g=g, beta=beta, chunk_size=64, use_qk_l2norm_in_kernel=True)[0]

    forward = torch.compile(attend) if mode == "compile" else attend

    def step():
        forward(q, k, v, g, beta).backward(do)
        for t in (q, k, v, g, beta):
            t.grad = None

    return median_seconds(lambda i: step(), args)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(Path(__file__).resolve().parent.parent / "configs/shakespeare_hybrid.yaml"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5, help="steps before timing (compilation happens here)")
    parser.add_argument("--modes", default="eager,compile,compile-bf16")
    parser.add_argument("--vocab", type=int, default=65)
    parser.add_argument("--cpu-time", action="store_true",
                        help="time with the process CPU clock (bench_linear_attention --cpu-time's measure on shared cores)")
    parser.add_argument("--preset", default="main", choices=("main", "25M", "100M"),
                        help="the training rows' sizes (bench_model --preset)")
    parser.add_argument("--long-context", action="store_true",
                        help="the long-context rows (gdn and hybrid-swa at each of --blocks) instead")
    parser.add_argument("--blocks", type=block_list,
                        default=[512, 2048, 8192, 16384], help="the long-context rows' block sizes")
    parser.add_argument("--mamba2", action="store_true", help="time one Mamba2Mixer forward + backward instead")
    parser.add_argument("--kda", action="store_true",
                        help="time transformers' chunk_kimi_delta_attention forward + backward instead")
    args = parser.parse_args()
    if args.mamba2 and args.kda:
        parser.error("--mamba2 and --kda time different things; give one")
    torch.set_num_threads(args.threads)
    if args.kda:
        import transformers

        modes = args.modes if args.modes != parser.get_default("modes") else "eager,compile"
        print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} thread(s), "
              f"chunk_kimi_delta_attention B 4, T 2048, H 4, K = V = 64, chunk 64, qk l2norm, forward+backward; "
              f"median of {args.steps} after {args.warmup}")
        print(f"{'mode':<14} {'ms':>9}")
        for mode in modes.split(","):
            if mode not in ("eager", "compile"):
                sys.exit(f"bench_torch_peer: --modes: unknown mode '{mode}' with --kda (eager, compile)")
            print(f"{mode:<14} {1e3 * time_chunk_kda(mode, args):9.2f}", flush=True)
        return
    if args.mamba2:
        import transformers

        modes = args.modes if args.modes != parser.get_default("modes") else "eager,compile"
        print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} thread(s), "
              f"Mamba2Mixer hidden 256, 8 heads x 64, state 128, chunk 64, x [4, 2048, 256], forward+backward; "
              f"median of {args.steps} after {args.warmup}")
        print(f"{'mode':<14} {'ms':>9}")
        for mode in modes.split(","):
            if mode not in ("eager", "compile"):
                sys.exit(f"bench_torch_peer: --modes: unknown mode '{mode}' with --mamba2 (eager, compile)")
            print(f"{mode:<14} {1e3 * time_mamba2_mixer(mode, args):9.2f}", flush=True)
        return
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in ("eager", "compile", "compile-bf16"):
            sys.exit(f"bench_torch_peer: --modes: unknown mode '{mode}' (eager, compile, compile-bf16)")
    cfg = yaml.safe_load(Path(args.config).read_text())
    peak = {"fp32": product_peak(torch.float32, args.cpu_time), "bf16": product_peak(torch.bfloat16, args.cpu_time)}
    print(f"torch {torch.__version__}, {args.threads} thread(s), {Path(args.config).name}, preset "
          f"{'long-context' if args.long_context else args.preset}; median of {args.steps} steps after {args.warmup}; "
          f"product peak (torch.mm 1024^3, best of 20, {'CPU' if args.cpu_time else 'wall'} time): fp32 {peak['fp32'] / 1e9:.1f} GFLOP/s, "
          f"bf16 {peak['bf16'] / 1e9:.1f} GFLOP/s")
    print(f"{'row':<22} {'mode':<14} {'params M':>8} {'batch':>5} {'block':>6} {'ms/step':>10} {'tokens/s':>10} "
          f"{'peak RSS':>9} {'MFU':>6}")
    # Each mode in a fresh process: its peak RSS is its own, and no compiled graph carries over.
    context = multiprocessing.get_context("spawn")
    for name, row in training_rows(cfg, args):
        batch, block = row["train"]["batch_size"], row["data"]["block_size"]
        for mode in modes:
            with context.Pool(1) as pool:
                seconds, params, (forward, backward), rss = pool.apply(time_mode, (mode, row, args))
            tokens_per_s = batch * block / seconds
            mfu = (forward + backward) * tokens_per_s / peak["bf16" if mode.endswith("bf16") else "fp32"]
            print(f"{name:<22} {mode:<14} {params / 1e6:8.3f} {batch:5d} {block:6d} {1e3 * seconds:10.2f} "
                  f"{tokens_per_s:10.0f} {rss:9.0f} {100 * mfu:5.1f}%", flush=True)


if __name__ == "__main__":
    main()
