"""Reading a Hugging Face checkpoint folder: ``config.json`` and safetensors, one file or sharded.

Every error names the file and what is wrong with it, because a reader pointing
``NANO_ENGINE_MODEL`` at the wrong folder should learn why in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def load_config(path: Path) -> dict:
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model folder {path} does not exist (or is not a folder)")
    config = path / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{config} is missing: a Hugging Face model folder needs one")
    raw = read_json(config)
    if not isinstance(raw, dict):
        raise ValueError(f"{config} must hold one JSON object of fields, got a {type(raw).__name__}")
    return raw


def read_json(file: Path) -> object:
    try:
        return json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{file} is not valid JSON: {e}") from None


def open_safetensors(file: Path):
    """``safe_open`` whose failure (a truncated file, or not safetensors at all) names the file."""
    try:
        return safe_open(file, framework="pt")
    except SafetensorError as e:
        raise ValueError(f"{file} is not a readable safetensors file (truncated, or another format): {e}") from None


def weight_files(path: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file that holds it."""
    index = path / INDEX_FILE
    if index.is_file():
        data = read_json(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"{index}: 'weight_map' must be an object mapping each tensor name to a file name")
        files = {name: path / fname for name, fname in weight_map.items()}
        for f in set(files.values()):
            if not f.is_file():
                raise FileNotFoundError(f"{f} is listed in {index} but missing")
        return files
    single = path / SINGLE_FILE
    if not single.is_file():
        raise FileNotFoundError(f"no weights in {path}: expected {SINGLE_FILE} or {INDEX_FILE}")
    with open_safetensors(single) as f:
        return {name: single for name in f.keys()}


def load_state_dict(path: Path, expected: dict[str, tuple[int, ...]], device: torch.device,
                    dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Load the tensors named in ``expected`` (our names: the checkpoint's minus ``model.``),
    checking every shape, converting to ``dtype`` on ``device``."""
    files = weight_files(Path(path))
    by_file: dict[Path, list[tuple[str, str]]] = {}
    for ckpt_name, file in files.items():
        name = ckpt_name.removeprefix("model.")
        if name not in expected:
            if name == "lm_head.weight":    # tied model that still ships a copy of the head
                continue
            raise ValueError(f"{file}: unexpected tensor {ckpt_name!r} (not part of a Qwen3 model "
                             "with this config.json)")
        by_file.setdefault(file, []).append((ckpt_name, name))
    missing = sorted(set(expected) - {n for pairs in by_file.values() for _, n in pairs})
    if missing:
        raise ValueError(f"{path}: tensors missing from the checkpoint: {missing[:5]}"
                         + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    state = {}
    for file, pairs in by_file.items():
        with open_safetensors(file) as f:
            on_file = set(f.keys())
            for ckpt_name, name in pairs:
                if ckpt_name not in on_file:
                    raise ValueError(f"{file}: tensor {ckpt_name!r} is listed in {INDEX_FILE} but not in the file")
                t = f.get_tensor(ckpt_name)
                if tuple(t.shape) != expected[name]:
                    raise ValueError(f"{file}: tensor {ckpt_name!r} has shape {tuple(t.shape)}, "
                                     f"config.json implies {expected[name]}")
                state[name] = t.to(device=device, dtype=dtype)
    return state
