#!/usr/bin/env python3
"""Float64 ground truth for the small qwen3, granite, phi3 and gemma3 files of our generator.

The logits a GGUF file *defines*: every weight dequantized exactly as the format specifies
(gguf-py's dequantize), the forward pass in float64 with no activation quantization. Neither
llama.cpp nor jitllm computes this way, so both are measured against it: on a quantized file an
engine is as accurate as llama.cpp when its logits are at least as close to these. (The peer's
reference.py does the same for `llama` only.)

usage: reference_archs.py MODEL.gguf -t "IDS" --ctx N --out PREFIX
  writes PREFIX.cols.bin (float32 [positions][ceil(vocab / 37)]: every 37th column, the fidelity
  goldens' form) and PREFIX.argmax.txt (each position's argmax over the whole vocabulary).
  --ctx is the context the model is used at (phi3 picks its LongRoPE factors by it).
needs: Debian's python3-numpy and ../shared/peer/setup's build (gguf-py); run with /usr/bin/python3.
"""
import argparse
import os
import sys

PEER = os.environ.get("JITLLM_PEER_DIR", os.path.expanduser("~/.cache/jitllm-peer"))
sys.path.insert(0, os.path.join(PEER, "src", "gguf-py"))
import numpy as np  # noqa: E402

STRIDE = 37


class Model:
    def __init__(self, path):
        import gguf
        from gguf.quants import dequantize

        self.reader = gguf.GGUFReader(path)
        self.arch = self.string("general.architecture")
        if self.arch not in ("qwen3", "granite", "phi3", "gemma3"):
            sys.exit(f"reference_archs.py handles qwen3, granite, phi3 and gemma3, not {self.arch}")
        self.w = {}
        for t in self.reader.tensors:
            shape = tuple(int(x) for x in reversed(t.shape.tolist()))  # numpy order: rows, cols
            self.w[t.name] = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)

    def field(self, name, default=None):
        """The architecture's key `name` (ARCH.name) as a number, or `default`."""
        f = self.reader.fields.get(self.arch + "." + name)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        return v.tolist()[0] if hasattr(v, "tolist") else v

    def string(self, name):
        f = self.reader.fields[name]
        return bytes(f.parts[f.data[0]]).decode()


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, n_rot, base, scale, neox, factors, mscale=1.0):
    """x: [tokens, heads, head_dim]; ggml's rope (neox: halves, else adjacent pairs). mscale
    (LongRoPE's attention factor) multiplies cos and sin: the rotated dims only, as ggml and
    Hugging Face's Phi-3 scale them; dims past n_rot pass through."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv = base ** (-2.0 * i / n_rot)
    if factors is not None:
        inv = inv / factors
    theta = (pos[:, None].astype(np.float64) * scale) * inv[None, :]  # [tokens, n_rot / 2]
    cos, sin = mscale * np.cos(theta)[:, None, :], mscale * np.sin(theta)[:, None, :]
    out = x.copy()
    if neox:
        a, b = x[..., : n_rot // 2], x[..., n_rot // 2 : n_rot]
        out[..., : n_rot // 2] = a * cos - b * sin
        out[..., n_rot // 2 : n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def forward(m, ids, ctx):
    arch, w, f = m.arch, m.w, m.field
    n_embd, n_layer = f("embedding_length"), f("block_count")
    n_head, n_kv = f("attention.head_count"), f("attention.head_count_kv", f("attention.head_count"))
    head_dim = f("attention.key_length", n_embd // n_head)
    n_rot = f("rope.dimension_count", head_dim)
    eps = f("attention.layer_norm_rms_epsilon", 1e-5)
    base = f("rope.freq_base", 10000.0)
    scale = 1.0  # linear rope scaling: positions times 1 / factor
    if arch + ".rope.scaling.type" in m.reader.fields and m.string(arch + ".rope.scaling.type") == "linear":
        scale = 1.0 / f("rope.scaling.factor", 1.0)
    neox = arch in ("qwen3", "phi3", "gemma3")
    T = len(ids)
    pos = np.arange(T)

    factors, mscale = None, 1.0
    if arch == "phi3":
        orig = f("rope.scaling.original_context_length", 0)
        name = "rope_factors_long.weight" if orig and ctx > orig else "rope_factors_short.weight"
        factors = w.get(name)
        mscale = f("rope.scaling.attn_factor", 1.0)

    window, sliding = 0, [False] * n_layer
    if arch == "gemma3" and f("attention.sliding_window", 0):
        window = f("attention.sliding_window")
        period = f("attention.sliding_window_pattern", 6)
        sliding = [period == 0 or layer % period < period - 1 for layer in range(n_layer)]
    base_swa = f("rope.freq_base_swa", 10000.0)

    if arch == "granite":
        attn_scale = f("attention.scale", 1.0 / np.sqrt(head_dim))
    elif arch == "gemma3":
        attn_scale = 1.0 / np.sqrt(n_embd // n_head if n_layer == 62 else head_dim)
    else:
        attn_scale = 1.0 / np.sqrt(head_dim)

    x = w["token_embd.weight"][ids]
    if arch == "granite":
        x = x * f("embedding_scale", 1.0)
    if arch == "gemma3":
        x = x * np.float64(np.sqrt(np.float32(n_embd)))
    residual = f("residual_scale", 1.0) if arch == "granite" else 1.0
    causal = pos[None, :] <= pos[:, None]

    for layer in range(n_layer):
        p = f"blk.{layer}."
        h = rms_norm(x, w[p + "attn_norm.weight"], eps)
        if arch == "phi3":
            qkv = h @ w[p + "attn_qkv.weight"].T
            q, k, v = np.split(qkv, [n_head * head_dim, n_head * head_dim + n_kv * head_dim], axis=1)
        else:
            q, k, v = h @ w[p + "attn_q.weight"].T, h @ w[p + "attn_k.weight"].T, h @ w[p + "attn_v.weight"].T
        q = q.reshape(T, n_head, head_dim)
        k = k.reshape(T, n_kv, head_dim)
        v = v.reshape(T, n_kv, head_dim)
        if arch in ("qwen3", "gemma3"):
            q = rms_norm(q, w[p + "attn_q_norm.weight"], eps)
            k = rms_norm(k, w[p + "attn_k_norm.weight"], eps)
        layer_base, layer_scale = (base_swa, 1.0) if sliding[layer] else (base, scale)
        q = rope(q, pos, n_rot, layer_base, layer_scale, neox, factors, mscale)
        k = rope(k, pos, n_rot, layer_base, layer_scale, neox, factors, mscale)
        mask = causal
        if sliding[layer]:
            mask = causal & (pos[:, None] - pos[None, :] < window)
        group = n_head // n_kv
        out = np.empty((T, n_head, head_dim))
        for hd in range(n_head):
            s = (q[:, hd, :] @ k[:, hd // group, :].T) * attn_scale
            s = np.where(mask, s, -np.inf)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, hd, :] = s @ v[:, hd // group, :]
        o = out.reshape(T, n_head * head_dim) @ w[p + "attn_output.weight"].T
        if arch == "gemma3":
            o = rms_norm(o, w[p + "post_attention_norm.weight"], eps)
        x = x + o * residual

        h = rms_norm(x, w[p + "ffn_norm.weight"], eps)
        if arch == "phi3":
            gate, up = np.split(h @ w[p + "ffn_up.weight"].T, 2, axis=1)
        else:
            gate, up = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        if arch == "gemma3":
            act = 0.5 * gate * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (gate + 0.044715 * gate**3)))
        else:
            act = gate / (1.0 + np.exp(-gate))
        o = (act * up) @ w[p + "ffn_down.weight"].T
        if arch == "gemma3":
            o = rms_norm(o, w[p + "post_ffw_norm.weight"], eps)
        x = x + o * residual

    h = rms_norm(x, w["output_norm.weight"], eps)
    logits = h @ w.get("output.weight", w["token_embd.weight"]).T
    if arch == "granite":
        logits = logits / f("logit_scale", 1.0)
    cap = f("final_logit_softcapping", 0.0) if arch == "gemma3" else 0.0
    if cap:
        logits = cap * np.tanh(logits / cap)
    return logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-t", required=True)
    ap.add_argument("--ctx", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    m = Model(a.model)
    ids = [int(i) for i in a.t.split()]
    logits = forward(m, ids, a.ctx or m.field("context_length", 2048))
    np.ascontiguousarray(logits[:, ::STRIDE]).astype(np.float32).tofile(a.out + ".cols.bin")
    open(a.out + ".argmax.txt", "w").write("\n".join(str(int(i)) for i in logits.argmax(1)) + "\n")


if __name__ == "__main__":
    main()
