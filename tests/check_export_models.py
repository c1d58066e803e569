#!/usr/bin/python3
"""ctest driver of tools/check_export.py: trains tiny models covering every mixer kind and
option (a few steps at a high learning rate, so that every weight, norms included, moves
away from its initialization), exports each with `lat export --check-tokens`, and runs the
PyTorch reference on it. Also checks a bf16 export, and that the check catches a transposed
square projection (the control that proves it can fail).

Usage: check_export_models.py --lat build/lat --work DIR
Exit codes: 0 all match, 1 a mismatch or a failed command, 77 torch missing (skip; an error
when CI=true).
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")
CHECKER = os.path.join(TOOLS, "check_export.py")
sys.path.insert(0, TOOLS)
from check_export import SKIP, require_torch  # noqa: E402

TEXT = ("First Citizen: Before we proceed any further, hear me speak.\n"
        "All: Speak, speak.\nFirst Citizen: You are all resolved rather to die than to famish?\n"
        "All: Resolved. resolved.\n") * 6

COMMON = {
    "data": {"block_size": 16, "val_fraction": 0.2},
    "train": {"batch_size": 2, "max_steps": 4, "lr": 0.03, "min_lr": 0.03, "warmup": 0,
              "schedule": "constant", "eval_every": 0, "eval_batches": 1, "log_every": 1,
              "ckpt_every": 100, "keep_last": 0, "weight_decay": 0.0},
}

# name -> model.* keys. "square" has d_model = n_heads * head_dim and expand_v 1, so every
# q/k/v/g/o projection is square and only the logits can tell a transposition.
MODELS = {
    "square": {"d_model": 32, "n_layers": 5, "n_heads": 2, "layers": "simple_gla,retention,delta_net,gdn,attn",
               "linear": {"chunk_size": 8}},
    "gqa_window_tied_normalized": {"d_model": 32, "n_layers": 2, "n_heads": 4, "head_dim": 8,
                                   "layers": "attn,linear_attn", "tie_embeddings": True,
                                   "attn": {"n_kv_heads": 2, "window_size": 5},
                                   "linear": {"feature_map": "elu1", "normalize": True, "chunk_size": 8}},
    "no_conv_no_gate_expand_v": {"d_model": 24, "n_layers": 4, "n_heads": 2, "head_dim": 8, "expand_v": 2.0,
                                 "layers": "delta_net,simple_gla,linear_attn,gdn",
                                 "linear": {"use_short_conv": False, "use_gate": False, "feature_map": "relu",
                                            "chunk_size": 8}},
    "conv2_identity_mqa": {"d_model": 18, "n_layers": 3, "n_heads": 3, "head_dim": 6, "mlp_ratio": 2.0,
                           "layers": "gdn,linear_attn,attn", "norm_eps": 1e-5,
                           "attn": {"n_kv_heads": 1, "rope_theta": 500.0},
                           "linear": {"conv_size": 2, "feature_map": "identity", "chunk_size": 8}},
}


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        print(f"command failed ({result.returncode}): {' '.join(cmd)}\n{result.stdout}{result.stderr}",
              file=sys.stderr)
    return result


def yaml_of(config):
    # JSON is YAML: lat's config loader reads it as it is.
    return json.dumps(config, indent=1)


def transpose_square(path, name):
    """Transposes the square F32 tensor `name` of a safetensors file in place."""
    import numpy as np
    with open(path, "r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        entry = json.loads(f.read(n))[name]
        assert entry["dtype"] == "F32" and entry["shape"][0] == entry["shape"][1], entry
        begin, end = entry["data_offsets"]
        f.seek(8 + n + begin)
        a = np.frombuffer(f.read(end - begin), dtype="<f4").reshape(entry["shape"])
        f.seek(8 + n + begin)
        f.write(np.ascontiguousarray(a.T).tobytes())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lat", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    require_torch("the export check")

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    data = os.path.join(args.work, "text.txt")
    with open(data, "w", encoding="utf-8") as f:
        f.write(TEXT)
    vocab = len(set(TEXT))
    tokens = ",".join(str((7 * i + 3) % vocab) for i in range(40))  # 40 > chunk_size 8 and the window 5

    failures = []

    def check(export_dir, expect_ok=True):
        result = subprocess.run([sys.executable, CHECKER, export_dir], capture_output=True, text=True)
        sys.stdout.write(result.stdout + result.stderr)
        if result.returncode == SKIP:
            sys.exit(SKIP)
        if (result.returncode == 0) != expect_ok:
            failures.append(f"{export_dir}: check_export.py exit {result.returncode}, expected "
                            f"{'a match' if expect_ok else 'a mismatch'}")

    for name, model in MODELS.items():
        config = {"model": model, **COMMON}
        config = json.loads(json.dumps(config))
        config["data"]["path"] = data
        config["train"]["out_dir"] = os.path.join(args.work, name, "run")
        config_path = os.path.join(args.work, name + ".yaml")
        with open(config_path, "w", encoding="utf-8") as f:
            f.write(yaml_of(config))
        if run([args.lat, "train", config_path]).returncode != 0:
            failures.append(f"{name}: lat train failed")
            continue
        for dtype in ("f32", "bf16") if name == "square" else ("f32",):
            out = os.path.join(args.work, name, "export_" + dtype)
            if run([args.lat, "export", "--checkpoint", config["train"]["out_dir"], "--out", out, "--dtype", dtype,
                    "--check-tokens", tokens]).returncode != 0:
                failures.append(f"{name}: lat export --dtype {dtype} failed")
                continue
            check(out)

    # The control: a transposed square projection must be caught.
    square = os.path.join(args.work, "square", "export_f32")
    if os.path.exists(os.path.join(square, "model.safetensors")):
        for weight in ("layers.0.attn.q_proj.weight", "layers.4.attn.v_proj.weight", "layers.3.attn.o_proj.weight"):
            tampered = os.path.join(args.work, "square", "tampered")
            shutil.rmtree(tampered, ignore_errors=True)
            shutil.copytree(square, tampered)
            transpose_square(os.path.join(tampered, "model.safetensors"), weight)
            print(f"control: {weight} transposed, expecting a mismatch")
            check(tampered, expect_ok=False)

    for failure in failures:
        print("FAIL: " + failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
