"""Reading a Hugging Face checkpoint folder: ``config.json`` and safetensors, one file or sharded.

Every error names the file and what is wrong with it, because a reader pointing
``NANO_ENGINE_MODEL`` at the wrong folder should learn why in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def load_config(path: Path) -> dict:
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model folder {path} does not exist (or is not a folder)")
    config = path / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{config} is missing: a Hugging Face model folder needs one")
    try:
        return json.loads(config.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{config} is not valid JSON: {e}") from None


def weight_files(path: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file that holds it."""
    index = path / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index} has no 'weight_map'")
        files = {name: path / fname for name, fname in weight_map.items()}
        for f in set(files.values()):
            if not f.is_file():
                raise FileNotFoundError(f"{f} is listed in {index} but missing")
        return files
    single = path / SINGLE_FILE
    if not single.is_file():
        raise FileNotFoundError(f"no weights in {path}: expected {SINGLE_FILE} or {INDEX_FILE}")
    with safe_open(single, framework="pt") as f:
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
        with safe_open(file, framework="pt") as f:
            for ckpt_name, name in pairs:
                t = f.get_tensor(ckpt_name)
                if tuple(t.shape) != expected[name]:
                    raise ValueError(f"{file}: tensor {ckpt_name!r} has shape {tuple(t.shape)}, "
                                     f"config.json implies {expected[name]}")
                state[name] = t.to(device=device, dtype=dtype)
    return state
