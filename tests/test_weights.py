"""Loading a broken checkpoint folder: every error is a ValueError (or FileNotFoundError) that names
the file and the field, never a traceback from deep inside safetensors or a ZeroDivisionError."""

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from nano_engine.checkpoints import TINY_CONFIG, write_random_checkpoint
from nano_engine.model import Transformer
from nano_engine.weights import INDEX_FILE, SINGLE_FILE

SMALL = {**TINY_CONFIG, "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}


@pytest.fixture
def folder(tmp_path) -> Path:
    path = write_random_checkpoint(tmp_path / "model", SMALL, with_tokenizer=False)
    Transformer.from_pretrained(path)          # the unbroken folder loads
    return path


def refused(folder: Path, *fragments: str, error: type[Exception] = ValueError) -> str:
    with pytest.raises(error) as caught:
        Transformer.from_pretrained(folder)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def test_missing_folder(tmp_path):
    refused(tmp_path / "nowhere", str(tmp_path / "nowhere"), "does not exist", error=FileNotFoundError)


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_truncated_safetensors(folder, keep):
    weights = folder / SINGLE_FILE
    data = weights.read_bytes()
    weights.write_bytes(data[:int(len(data) * keep)])
    refused(folder, str(weights), "not a readable safetensors file")


def test_junk_safetensors(folder):
    (folder / SINGLE_FILE).write_bytes(b"<html>404: not found</html>")
    refused(folder, str(folder / SINGLE_FILE), "not a readable safetensors file")


def write_index(folder: Path, content: str) -> Path:
    (folder / INDEX_FILE).write_text(content)
    return folder / INDEX_FILE


def tensor_names(folder: Path) -> list[str]:
    with safe_open(folder / SINGLE_FILE, framework="pt") as f:
        return list(f.keys())


def test_index_that_is_not_json(folder):
    index = write_index(folder, '{"weight_map": {')
    refused(folder, str(index), "not valid JSON")


@pytest.mark.parametrize("content", ['[]', '{"metadata": {}}', '{"weight_map": ["model.safetensors"]}',
                                     '{"weight_map": {"model.norm.weight": 3}}'])
def test_index_without_a_weight_map(folder, content):
    index = write_index(folder, content)
    refused(folder, str(index), "'weight_map'")


def test_index_naming_an_unknown_tensor_or_a_missing_shard(folder):
    weight_map = {name: SINGLE_FILE for name in tensor_names(folder)}
    write_index(folder, json.dumps({"weight_map": weight_map | {"model.extra.weight": SINGLE_FILE}}))
    refused(folder, "model.extra.weight", "unexpected tensor")
    write_index(folder, json.dumps({"weight_map": weight_map | {"model.norm.weight": "model-00002.safetensors"}}))
    refused(folder, "model-00002.safetensors", "missing", error=FileNotFoundError)


def test_index_listing_a_tensor_its_shard_lacks(folder):
    save_file({"something.else": torch.zeros(2)}, folder / "model-00002.safetensors")
    weight_map = {name: SINGLE_FILE for name in tensor_names(folder)} | {"model.norm.weight": "model-00002.safetensors"}
    write_index(folder, json.dumps({"weight_map": weight_map}))
    refused(folder, str(folder / "model-00002.safetensors"), "'model.norm.weight'", "not in the file")


def test_config_that_is_a_list(folder):
    (folder / "config.json").write_text(json.dumps([SMALL]))
    refused(folder, str(folder / "config.json"), "JSON object", "list")


def test_config_that_is_not_json(folder):
    (folder / "config.json").write_text("model_type: qwen3\n")
    refused(folder, str(folder / "config.json"), "not valid JSON")


@pytest.mark.parametrize("field, value, wanted", [
    ("num_attention_heads", 0, "an integer >= 1"),
    ("num_key_value_heads", -1, "an integer >= 1"),
    ("hidden_size", "32", "an integer >= 1"),
    ("num_hidden_layers", 1.0, "an integer >= 1"),
    ("vocab_size", True, "an integer >= 1"),
    ("head_dim", 0, "an integer >= 1"),
    ("rms_norm_eps", "1e-6", "a positive number"),
    ("rope_theta", 0, "a positive number"),
    ("tie_word_embeddings", "true", "true or false"),
])
def test_config_fields_of_the_wrong_type_or_range(folder, field, value, wanted):
    edit_config(folder, **{field: value})
    message = refused(folder, str(folder / "config.json"), field, wanted)
    assert re.search(re.escape(repr(value)), message)


def test_heads_that_do_not_group(folder):
    edit_config(folder, num_attention_heads=3, num_key_value_heads=2)
    refused(folder, str(folder / "config.json"), "num_attention_heads (3)", "num_key_value_heads (2)")


def test_head_dim_null_is_derived(folder):
    """Older configs have no head_dim (or null): it is hidden_size // num_attention_heads."""
    edit_config(folder, head_dim=None)
    assert Transformer.from_pretrained(folder).config.head_dim == SMALL["hidden_size"] // 2
