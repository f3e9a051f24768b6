#!/usr/bin/python3
"""A PyTorch peer for ablate's Hugging Face export and import (tests/cli/test_interop.cpp,
tools/bench_hf_gpt2.sh): GPT-2 and Llama written here with Hugging Face's module names
(GPT2LMHeadModel: Conv1D weights stored (in, out), GELU tanh, tied head; LlamaForCausalLM:
nn.Linear (out, in), RMSNorm, SwiGLU, rotate_half RoPE, grouped-query attention), and
safetensors read and written with numpy. No transformers and no safetensors package: the
state dict must match the file exactly (strict), so a wrong name, shape or layout fails.

  hf_peer.py make DIR --arch gpt2|llama [--seed S] [--vocab V] [--d D] [--heads H] [--kv-heads K]
             [--layers L] [--context T] [--hidden F] [--untied] [--tokenizer-files DIR]
  hf_peer.py logits DIR IDS_FILE OUT_FILE [N]  rows of ids (one sequence per line) -> float32 (B, T, V);
                                               with N, prints the N greedy ids after row 0's first 8
  hf_peer.py greedy DIR IDS N                  "1,2,3" -> the N greedy ids after it (KV cache)
  hf_peer.py bench DIR IDS N THREADS           greedy tokens/s at batch 1 with the KV cache
  hf_peer.py finetune-check DIR_A DIR_B        same tensor names, shapes, dtypes and config keys
"""
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---- safetensors with numpy ---------------------------------------------------------------

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        if info["dtype"] == "BF16":
            raw = np.frombuffer(data[8 + n + b:8 + n + e], dtype="<u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[8 + n + b:8 + n + e], dtype=np.dtype(DTYPES[info["dtype"]]).newbyteorder("<"))
        out[name] = arr.reshape(info["shape"]).copy()
    return out, meta


def write_safetensors(path, tensors, metadata=None, dtype="F32"):
    header, chunks, at = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, arr in tensors.items():
        if dtype == "BF16":
            raw = (np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(arr, dtype=np.dtype(DTYPES[dtype]).newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


# ---- GPT-2 --------------------------------------------------------------------------------

def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight (in, out), y = x W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class GPT2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.hs = c["n_head"], c["n_embd"] // c["n_head"]
        self.c_attn = Conv1D(c["n_embd"], 3 * c["n_embd"])
        self.c_proj = Conv1D(c["n_embd"], c["n_embd"])

    def forward(self, x, past):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, self.hs).transpose(1, 2) for t in (q, k, v))
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        y = attend(q, k, v)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)


def attend(q, k, v):
    """Causal attention of the last q.shape[2] positions over all k.shape[2] keys."""
    T, S = q.shape[2], k.shape[2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    return att @ v


class GPT2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        inner = c.get("n_inner") or 4 * c["n_embd"]
        self.c_fc, self.c_proj = Conv1D(c["n_embd"], inner), Conv1D(inner, c["n_embd"])

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c.get("layer_norm_epsilon", 1e-5)
        self.ln_1, self.attn = nn.LayerNorm(c["n_embd"], eps=eps), GPT2Attention(c)
        self.ln_2, self.mlp = nn.LayerNorm(c["n_embd"], eps=eps), GPT2MLP(c)

    def forward(self, x, past):
        a, present = self.attn(self.ln_1(x), past)
        x = x + a
        return x + self.mlp(self.ln_2(x)), present


class GPT2Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
        self.h = nn.ModuleList([GPT2Block(c) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=c.get("layer_norm_epsilon", 1e-5))

    def forward(self, ids, pos0, pasts):
        x = self.wte(ids) + self.wpe(torch.arange(pos0, pos0 + ids.shape[1]))
        presents = []
        for i, block in enumerate(self.h):
            x, p = block(x, pasts[i] if pasts else None)
            presents.append(p)
        return self.ln_f(x), presents


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = GPT2Model(c)
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.tied = c.get("tie_word_embeddings", True)
        if self.tied:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, ids, pos0=0, pasts=None):
        x, presents = self.transformer(ids, pos0, pasts)
        return self.lm_head(x), presents


# ---- Llama --------------------------------------------------------------------------------

class LlamaRMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, self.nh = c["hidden_size"], c["num_attention_heads"]
        self.nkv = c.get("num_key_value_heads") or self.nh
        self.hs = C // self.nh
        self.theta = c.get("rope_theta", 10000.0)
        self.q_proj = nn.Linear(C, self.nh * self.hs, bias=False)
        self.k_proj = nn.Linear(C, self.nkv * self.hs, bias=False)
        self.v_proj = nn.Linear(C, self.nkv * self.hs, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hs, C, bias=False)

    def rope(self, x, pos0):
        T = x.shape[2]
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hs, 2, dtype=torch.float64) / self.hs))
        ang = torch.outer(torch.arange(pos0, pos0 + T, dtype=torch.float64), inv)
        emb = torch.cat([ang, ang], -1)
        return x * emb.cos().float() + rotate_half(x) * emb.sin().float()

    def forward(self, x, pos0, past):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nkv, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hs).transpose(1, 2)
        q, k = self.rope(q, pos0), self.rope(k, pos0)
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        rep = self.nh // self.nkv
        y = attend(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1))
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.nh * self.hs)), (k, v)


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, H = c["hidden_size"], c["intermediate_size"]
        self.gate_proj, self.up_proj = nn.Linear(C, H, bias=False), nn.Linear(C, H, bias=False)
        self.down_proj = nn.Linear(H, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c.get("rms_norm_eps", 1e-6)
        self.input_layernorm, self.self_attn = LlamaRMSNorm(c["hidden_size"], eps), LlamaAttention(c)
        self.post_attention_layernorm, self.mlp = LlamaRMSNorm(c["hidden_size"], eps), LlamaMLP(c)

    def forward(self, x, pos0, past):
        a, present = self.self_attn(self.input_layernorm(x), pos0, past)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), present


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = LlamaRMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))

    def forward(self, ids, pos0, pasts):
        x, presents = self.embed_tokens(ids), []
        for i, layer in enumerate(self.layers):
            x, p = layer(x, pos0, pasts[i] if pasts else None)
            presents.append(p)
        return self.norm(x), presents


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self.tied = c.get("tie_word_embeddings", False)
        if self.tied:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, ids, pos0=0, pasts=None):
        x, presents = self.model(ids, pos0, pasts)
        return self.lm_head(x), presents


CLASSES = {"GPT2LMHeadModel": GPT2LMHeadModel, "LlamaForCausalLM": LlamaForCausalLM}


# ---- loading and saving a directory --------------------------------------------------------

def state_for_file(model):
    """The state dict as Hugging Face saves it: a tied lm_head.weight left out."""
    sd = model.state_dict()
    if model.tied:
        sd.pop("lm_head.weight")
    return {k: v.detach().numpy() for k, v in sd.items()}


def load(d):
    c = json.load(open(os.path.join(d, "config.json")))
    model = CLASSES[c["architectures"][0]](c)
    tensors, _ = read_safetensors(os.path.join(d, "model.safetensors"))
    want = state_for_file(model)
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing or extra:
        sys.exit("state dict mismatch: missing %s, unexpected %s" % (missing, extra))
    for k, v in tensors.items():
        if tuple(v.shape) != tuple(want[k].shape):
            sys.exit("%s: shape %s in the file, the module has %s" % (k, v.shape, want[k].shape))
    sd = {k: torch.from_numpy(v.astype(np.float32)) for k, v in tensors.items()}
    if model.tied:
        sd["lm_head.weight"] = sd[[k for k in sd if k.endswith("wte.weight") or k.endswith("embed_tokens.weight")][0]]
    model.load_state_dict(sd, strict=True)
    return model.eval(), c


def byte_tokenizer_json():
    """A byte-level BPE without merges: id b is byte b (as ablate's byte tokenizer)."""
    chars, n = {}, 256
    for b in range(256):
        printable = (33 <= b <= 126) or (161 <= b <= 172) or (174 <= b <= 255)
        if printable:
            chars[b] = chr(b)
    for b in range(256):
        if b not in chars:
            chars[b] = chr(n)
            n += 1
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": level, "decoder": level,
            "model": {"type": "BPE", "vocab": {chars[b]: b for b in range(256)}, "merges": []}}


def make(d, a):
    torch.manual_seed(a["seed"])
    V, C, L, T = a["vocab"], a["d"], a["layers"], a["context"]
    if a["arch"] == "gpt2":
        c = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": T, "n_ctx": T,
             "n_embd": C, "n_head": a["heads"], "n_layer": L, "n_inner": a["hidden"] or 4 * C,
             "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": not a["untied"],
             "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    else:
        c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
             "intermediate_size": a["hidden"] or 3 * C, "num_attention_heads": a["heads"],
             "num_key_value_heads": a["kv_heads"] or a["heads"], "num_hidden_layers": L, "max_position_embeddings": T,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": not a["untied"],
             "attention_bias": False, "mlp_bias": False, "rope_scaling": None}
    model = CLASSES[c["architectures"][0]](c)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Every tensor random (gains around 1): a tensor in the wrong place changes the logits.
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight") or \
                    name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.05 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p) if V <= 1024 else 0.02 * torch.randn_like(p))
    os.makedirs(d, exist_ok=True)
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), state_for_file(model), {"format": "pt"}, a["dtype"])
    if a["tokenizer_files"]:
        src = a["tokenizer_files"]
        open(os.path.join(d, "vocab.json"), "wb").write(open(os.path.join(src, "encoder.json"), "rb").read())
        open(os.path.join(d, "merges.txt"), "wb").write(open(os.path.join(src, "vocab.bpe"), "rb").read())
    elif V == 256:
        json.dump(byte_tokenizer_json(), open(os.path.join(d, "tokenizer.json"), "w"), ensure_ascii=False)


def greedy(model, ids, n):
    out, pasts, pos = [], None, 0
    x = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(n):
            logits, pasts = model(x, pos, pasts)
            pos += x.shape[1]
            nxt = int(logits[0, -1].argmax())
            out.append(nxt)
            x = torch.tensor([[nxt]])
    return out


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        a = {"arch": "gpt2", "seed": 1, "vocab": 256, "d": 32, "heads": 4, "kv_heads": 0, "layers": 2, "context": 32,
             "hidden": 0, "untied": False, "tokenizer_files": "", "dtype": "F32"}
        d, rest = args[0], args[1:]
        i = 0
        while i < len(rest):
            key = rest[i][2:].replace("-", "_")
            if key == "untied":
                a["untied"] = True
                i += 1
                continue
            a[key] = rest[i + 1] if key in ("arch", "tokenizer_files", "dtype") else int(rest[i + 1])
            i += 2
        make(d, a)
    elif cmd == "logits":
        model, _ = load(args[0])
        rows = [[int(t) for t in line.split()] for line in open(args[1]) if line.strip()]
        with torch.no_grad():
            logits, _ = model(torch.tensor(rows))
        logits.numpy().astype("<f4").tofile(args[2])
        if len(args) > 3:
            print(",".join(str(t) for t in greedy(model, rows[0][:8], int(args[3]))))
    elif cmd == "greedy":
        model, _ = load(args[0])
        print(",".join(str(t) for t in greedy(model, [int(t) for t in args[1].split(",")], int(args[2]))))
    elif cmd == "bench":
        torch.set_num_threads(int(args[3]))
        model, _ = load(args[0])
        prompt, n = [int(t) for t in args[1].split(",")], int(args[2])
        greedy(model, prompt, 4)  # warm-up
        t0 = time.perf_counter()
        out = greedy(model, prompt, n)
        dt = time.perf_counter() - t0
        print("pytorch %s: %d tokens in %.2f s, %.2f tokens/s, %d threads; ids %s" %
              (torch.__version__, n, dt, n / dt, torch.get_num_threads(), ",".join(map(str, out[:16]))))
    elif cmd == "finetune-check":
        (ta, _), (tb, _) = read_safetensors(os.path.join(args[0], "model.safetensors")), \
            read_safetensors(os.path.join(args[1], "model.safetensors"))
        la = [(k, v.shape, v.dtype) for k, v in sorted(ta.items())]
        lb = [(k, v.shape, v.dtype) for k, v in sorted(tb.items())]
        ca, cb = json.load(open(os.path.join(args[0], "config.json"))), json.load(open(os.path.join(args[1], "config.json")))
        if la != lb:
            sys.exit("layouts differ: %s" % sorted(set(map(str, la)) ^ set(map(str, lb))))
        # What describes the model must be the same (dropout is a training setting).
        differ = [k for k in ca if not k.endswith("pdrop") and ca[k] != cb.get(k)]
        if differ:
            sys.exit("config.json differs in %s" % ", ".join("%s: %r -> %r" % (k, ca[k], cb.get(k)) for k in differ))
        changed = sum(1 for k in ta if not np.array_equal(ta[k], tb[k]))
        print("same layout: %d tensors, %d changed by fine-tuning" % (len(la), changed))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
