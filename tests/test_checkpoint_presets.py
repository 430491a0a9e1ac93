"""The named checkpoint presets: `model_path(name)`, `resolve_model(spec)` and the medium model
the chapters time things on (its logits against transformers' Qwen3, its bytes across creations)."""

import hashlib
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, Qwen3ForCausalLM

from nano_engine import checkpoints
from nano_engine.checkpoints import (
    MEDIUM_CONFIG,
    PRESETS,
    TINY_CONFIG,
    medium_checkpoint,
    model_path,
    parameter_shapes,
    resolve_model,
    timing_model_path,
    tiny_checkpoint,
    write_random_checkpoint,
)
from nano_engine.model import Transformer
from nano_engine.prompts import chat_prompts


def file_hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_model_path_names_every_cheap_preset():
    assert model_path("tiny") == tiny_checkpoint()
    assert model_path("medium") == medium_checkpoint()
    for name in ("tiny", "medium"):
        AutoTokenizer.from_pretrained(model_path(name))   # each folder is a complete model
    assert {"tiny", "medium", "full"} <= set(PRESETS)
    with pytest.raises(ValueError, match=r"name must be one of \[.*'medium'.*\], got 'huge'"):
        model_path("huge")


def test_resolve_model_accepts_presets_default_and_folders(monkeypatch, tmp_path):
    monkeypatch.setenv("NANO_ENGINE_MODEL", str(tmp_path))
    assert resolve_model(None) == resolve_model("default") == tmp_path
    assert resolve_model("tiny") == tiny_checkpoint()
    assert resolve_model(str(tmp_path)) == tmp_path
    with pytest.raises(ValueError, match="neither 'default', a preset"):
        resolve_model(str(tmp_path / "missing"))


def test_a_new_preset_is_one_registry_entry(monkeypatch, tmp_path):
    monkeypatch.setitem(PRESETS, "mine", lambda: tmp_path)
    assert model_path("mine") == resolve_model("mine") == tmp_path


def test_medium_config_is_qwen3_with_a_heavier_body():
    # The point of the preset: tiny's LM head, and a body that costs as much per token.
    assert parameter_shapes(MEDIUM_CONFIG)["model.embed_tokens.weight"] == parameter_shapes(TINY_CONFIG)[
        "model.embed_tokens.weight"] == (151936, 128)
    body = sum(torch.Size(s).numel() for n, s in parameter_shapes(MEDIUM_CONFIG).items() if ".layers." in n)
    assert body > 151936 * 128
    assert json.loads((medium_checkpoint() / "config.json").read_text()) == MEDIUM_CONFIG


def test_medium_checkpoint_is_byte_identical_across_creations(tmp_path):
    again = write_random_checkpoint(tmp_path / "again", MEDIUM_CONFIG)
    assert file_hashes(again) == file_hashes(medium_checkpoint())


def test_medium_logits_match_transformers():
    path = medium_checkpoint()
    ids = torch.tensor([chat_prompts(AutoTokenizer.from_pretrained(path))[0]])
    ours = Transformer.from_pretrained(path, dtype=torch.float32)
    theirs = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), theirs(ids).logits, rtol=0, atol=1e-4)


def test_cli_takes_a_preset_name(capsys):
    from nano_engine.__main__ import main

    main(["generate", "--prompt", "Hi", "--model", "tiny", "--max-tokens", "3", "--device", "cpu"])
    by_name = capsys.readouterr().out
    main(["generate", "--prompt", "Hi", "--model", str(tiny_checkpoint()), "--max-tokens", "3", "--device", "cpu"])
    assert capsys.readouterr().out == by_name


def test_the_medium_folder_name_changes_with_its_shape():
    assert medium_checkpoint().name == f"qwen3-medium-12x4096-v{checkpoints.CACHE_VERSION}"


def test_timing_model_is_the_real_model_when_downloaded(monkeypatch, tmp_path):
    monkeypatch.setattr(checkpoints, "REPO_ROOT", tmp_path / "repo")
    monkeypatch.chdir(tmp_path)
    assert timing_model_path() == medium_checkpoint()
    real = tmp_path / "models" / "Qwen3-0.6B"
    real.mkdir(parents=True)
    assert timing_model_path() == medium_checkpoint(), "a folder without config.json is not a model"
    (real / "config.json").write_text("{}")
    assert timing_model_path().resolve() == real.resolve()
