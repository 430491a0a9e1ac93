"""A hand-written Qwen3 decoder in plain PyTorch, and the reference greedy loop.

Qwen3 is a standard pre-norm decoder: token embeddings, then N blocks of

    x = x + Attention(RMSNorm(x))      # grouped-query attention, RoPE, per-head q/k RMSNorm
    x = x + MLP(RMSNorm(x))            # SwiGLU: down(silu(gate(x)) * up(x))

then a final RMSNorm and the LM head (tied to the embeddings in the small models).

Every layer works on any leading shape ``[..., hidden]``, so the same weights serve two callers:

* the plain path, ``model(input_ids)`` with a ``[batch, seq]`` tensor: ordinary causal
  attention, the oracle every faster path is checked against;
* the engine's path, a flat ``[num_tokens]`` batch mixing many sequences, where attention is
  delegated to an *attention context* (``context.attend(layer_idx, q, k, v)``) that writes the
  new K/V into the paged cache and reads each sequence's history through its block table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

# --------------------------------------------------------------------------- configuration

@dataclass(frozen=True)
class Qwen3Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = True

    @classmethod
    def from_dict(cls, raw: dict, source: str = "config.json") -> "Qwen3Config":
        """Read both config layouts: the hub's (top-level ``rope_theta``) and transformers 5's
        (``rope_parameters: {"rope_theta": ...}``)."""
        model_type = raw.get("model_type")
        if model_type != "qwen3":
            archs = raw.get("architectures")
            raise ValueError(f"{source}: model_type is {model_type!r} (architectures {archs}); "
                             "nano_engine implements Qwen3 only (model_type 'qwen3')")
        raw = dict(raw)
        if "rope_theta" not in raw:
            rope = raw.get("rope_parameters") or {}
            if "rope_theta" in rope:
                raw["rope_theta"] = rope["rope_theta"]
        missing = sorted(_REQUIRED_KEYS - raw.keys())
        if missing:
            raise ValueError(f"{source}: missing required keys {missing}")
        if raw.get("head_dim") is None:
            raw.pop("head_dim", None)
        kinds = {f.name: str(f.type) for f in fields(cls)}    # "int", "float" or "bool"
        for name in kinds.keys() & raw.keys():
            _check_field(source, name, raw[name], kinds[name])
        if raw["num_attention_heads"] % raw["num_key_value_heads"]:
            raise ValueError(f"{source}: num_attention_heads ({raw['num_attention_heads']}) must be a multiple of "
                             f"num_key_value_heads ({raw['num_key_value_heads']})")
        raw.setdefault("head_dim", raw["hidden_size"] // raw["num_attention_heads"])
        return cls(**{k: raw[k] for k in kinds if k in raw})

    @property
    def num_kv_groups(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads


_REQUIRED_KEYS = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads"}


def _check_field(source: str, name: str, value: object, kind: str) -> None:
    """A config value of the right JSON type: sizes are integers >= 1 (a string such as "16"
    is refused, not guessed at), ``rope_theta`` and ``rms_norm_eps`` positive finite numbers."""
    if kind == "bool":
        ok, wanted = isinstance(value, bool), "true or false"
    elif isinstance(value, bool):
        ok, wanted = False, ("an integer >= 1" if kind == "int" else "a positive number")
    elif kind == "int":
        ok, wanted = isinstance(value, int) and value >= 1, "an integer >= 1"
    else:
        ok = isinstance(value, (int, float)) and math.isfinite(value) and value > 0
        wanted = "a positive number"
    if not ok:
        raise ValueError(f"{source}: {name} must be {wanted}, got {value!r} ({type(value).__name__})")


# --------------------------------------------------------------------------- layers

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 (bf16 squares overflow precision), scale in the input dtype.
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin tables for the given positions, shape ``[*positions.shape, head_dim]``.

    Computed from the positions on every forward (cheap next to the matmuls) so any mix of
    sequences at any offsets works without a precomputed table."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                             dtype=torch.int64).float() / head_dim))
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [..., heads, head_dim]`` by position (the "rotate half" layout Qwen uses)."""
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)   # broadcast over heads
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain attention for ``q [B, Sq, H, D]`` over ``k, v [B, Sk, KVH, D]``.

    The queries are the *last* Sq positions of the Sk keys (Sq == Sk for a full forward,
    Sq < Sk when continuing from a cache), so query i may see keys up to Sk - Sq + i."""
    sq, sk = q.shape[1], k.shape[1]
    groups = q.shape[2] // k.shape[2]
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))          # [B, heads, S, D]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    if sq == sk:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2)


class AttentionContext(Protocol):
    """What the engine passes to route attention through its KV cache."""

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        ...


class Attention(nn.Module):
    def __init__(self, cfg: Qwen3Config, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=False)
        # Qwen3's addition over Qwen2: RMSNorm each head's q and k before RoPE (stabilises logits).
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                context: AttentionContext | None) -> torch.Tensor:
        q = self.q_proj(x).unflatten(-1, (self.num_heads, self.head_dim))
        k = self.k_proj(x).unflatten(-1, (self.num_kv_heads, self.head_dim))
        v = self.v_proj(x).unflatten(-1, (self.num_kv_heads, self.head_dim))
        q, k = apply_rope(self.q_norm(q), cos, sin), apply_rope(self.k_norm(k), cos, sin)
        if context is None:
            out = causal_attention(q, k, v)
        else:
            out = context.attend(self.layer_idx, q, k, v)
        return self.o_proj(out.flatten(-2))


class MLP(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: Qwen3Config, layer_idx: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, context):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, context)
        return x + self.mlp(self.post_attention_layernorm(x))


# --------------------------------------------------------------------------- the model

class Transformer(nn.Module):
    """Qwen3 for causal LM. Parameter names follow the Hugging Face checkpoint minus its
    ``model.`` prefix, so a checkpoint loads with a plain rename."""

    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None,
                context: AttentionContext | None = None,
                logits_indices: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for ``input_ids``.

        * ``model(ids)`` with ``ids [batch, seq]``: positions 0..seq-1, causal attention,
          logits ``[batch, seq, vocab]``.
        * The engine passes a flat ``[num_tokens]`` batch, each token's ``positions``, an
          attention ``context``, and ``logits_indices``: the rows whose next token it samples
          (the last token of each sequence), so the LM head, the largest matmul of a small
          model, runs on a handful of rows instead of every prompt token. The indices select
          along the token dimension (``x[..., logits_indices, :]``), so the plain path can ask
          for the last position only, as :func:`generate` does.
        """
        if input_ids.numel() == 0:
            raise ValueError("input_ids is empty")
        if positions is None:
            if context is not None:
                raise ValueError("positions are required when an attention context is given")
            positions = torch.arange(input_ids.shape[-1], device=input_ids.device).expand_as(input_ids)
        x = self.embed_tokens(input_ids)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, context)
        if logits_indices is not None:
            x = x[..., logits_indices, :]
        return self.lm_head(self.norm(x))

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device | None = None,
                        dtype: torch.dtype | None = None) -> "Transformer":
        """Load a Hugging Face Qwen3 checkpoint folder (config.json + safetensors, one file or
        sharded with ``model.safetensors.index.json``).

        ``device`` defaults to CPU; ``dtype`` to the device's default (``nano_engine.devices``):
        bfloat16 on a GPU with bf16 tensor cores (sm_80 and later), float32 on a T4 and on CPU."""
        from nano_engine.weights import load_config, load_state_dict

        path = Path(path)
        cfg = Qwen3Config.from_dict(load_config(path), source=str(path / "config.json"))
        device = torch.device(device or "cpu")
        if dtype is None:        # bfloat16 on GPUs with bf16 tensor cores (sm_80+), else float32
            from nano_engine.devices import device_defaults
            dtype = device_defaults(device).dtype
        with torch.device("meta"):          # no throw-away random init of 600M parameters
            model = cls(cfg)
        model._assign(load_state_dict(path, model.expected_shapes(), device=device, dtype=dtype))
        return model.eval()

    @classmethod
    def from_state_dict(cls, cfg: Qwen3Config, state: dict[str, torch.Tensor]) -> "Transformer":
        """A small model of ``cfg`` holding the tensors of ``state`` (our parameter names, the tied
        LM head left out), for weights already in memory. It is built with an ordinary (throw-away)
        initialisation: for a model of a few million parameters that costs milliseconds, where a
        meta-device build first imports about a second of torch machinery."""
        model = cls(cfg)
        model._assign(state)
        return model.eval()

    def _assign(self, state: dict[str, torch.Tensor]) -> None:
        """Make ``state``'s tensors this model's parameters (re-tying a tied LM head)."""
        state = dict(state)
        if self.config.tie_word_embeddings:
            state["lm_head.weight"] = state["embed_tokens.weight"]
        self.load_state_dict(state, strict=True, assign=True)
        if self.config.tie_word_embeddings:   # assign=True replaced the shared parameter: re-tie
            self.lm_head.weight = self.embed_tokens.weight

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """Parameter name -> shape, as stored in a checkpoint (without the tied LM head)."""
        shapes = {name: tuple(p.shape) for name, p in self.named_parameters()}
        if self.config.tie_word_embeddings:
            shapes.pop("lm_head.weight", None)
        return shapes


# --------------------------------------------------------------------------- reference loop

class _ContiguousCache:
    """The simplest KV cache: one growing ``[batch, seq, kv_heads, head_dim]`` tensor per
    layer. Used only by :func:`generate`; the engine's paged cache lives in ``kv_cache.py``."""

    def __init__(self) -> None:
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}

    def attend(self, layer_idx, q, k, v):
        if layer_idx in self.k:
            k = torch.cat((self.k[layer_idx], k), dim=1)
            v = torch.cat((self.v[layer_idx], v), dim=1)
        self.k[layer_idx], self.v[layer_idx] = k, v
        return causal_attention(q, k, v)


@torch.inference_mode()
def generate(model: Transformer, input_ids: torch.Tensor, max_new_tokens: int,
             eos_token_id: int | None = None, use_cache: bool = True) -> torch.Tensor:
    """Greedy decoding, one batch of equal-length prompts, no paging and no batching tricks.

    Returns only the generated tokens, ``[batch, new_tokens]``. Generation stops when every
    row has produced ``eos_token_id`` (rows that finished early are padded with it) or after
    ``max_new_tokens``. With ``use_cache=False`` every step recomputes the whole sequence:
    the same tokens, quadratically more work (chapter 00 times both)."""
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        raise ValueError(f"input_ids must be a non-empty [batch, seq] tensor, got shape {tuple(input_ids.shape)}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    input_ids = input_ids.to(model.device)
    batch, seq = input_ids.shape
    cache = _ContiguousCache() if use_cache else None
    tokens, out = input_ids, []
    finished = torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
    last = torch.tensor([-1], device=input_ids.device)   # greedy needs the last position's logits only
    for step in range(max_new_tokens):
        if cache is None:
            logits = model(tokens, logits_indices=last)[:, -1]
        else:
            new = input_ids if step == 0 else tokens[:, -1:]
            pos = torch.arange(tokens.shape[1] - new.shape[1], tokens.shape[1], device=tokens.device)
            logits = model(new, positions=pos.expand_as(new), context=cache, logits_indices=last)[:, -1]
        next_token = logits.argmax(-1)
        if eos_token_id is not None:
            next_token = torch.where(finished, torch.full_like(next_token, eos_token_id), next_token)
            finished |= next_token == eos_token_id
        out.append(next_token)
        tokens = torch.cat((tokens, next_token[:, None]), dim=1)
        if eos_token_id is not None and bool(finished.all()):
            break
    return torch.stack(out, dim=1)
