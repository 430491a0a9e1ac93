"""The generated checkpoints: Hugging Face layout, determinism, the cache, and weights whose greedy
outputs depend on the context (checked with a plain forward written here, not nano_engine.model)."""

import hashlib
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoConfig, AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

from nano_engine import checkpoints
from nano_engine.checkpoints import (
    QWEN3_0_6B_CONFIG,
    TINY_CONFIG,
    cache_dir,
    default_model_path,
    full_size_checkpoint,
    parameter_shapes,
    tiny_checkpoint,
    tokenizer_path,
    trained_checkpoint,
    write_random_checkpoint,
)
from nano_engine.prompts import chat_prompts


def file_hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("NANO_ENGINE_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("NANO_ENGINE_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "nano_engine"


def test_configs_describe_qwen3():
    full = QWEN3_0_6B_CONFIG
    assert full["architectures"] == ["Qwen3ForCausalLM"] and full["model_type"] == "qwen3"
    assert (full["num_hidden_layers"], full["hidden_size"], full["intermediate_size"]) == (28, 1024, 3072)
    assert (full["num_attention_heads"], full["num_key_value_heads"], full["head_dim"]) == (16, 8, 128)
    assert (full["vocab_size"], full["rope_theta"], full["max_position_embeddings"]) == (151936, 1000000, 40960)
    assert full["tie_word_embeddings"] and full["rms_norm_eps"] == 1e-6 and not full["attention_bias"]
    tiny = TINY_CONFIG
    assert (tiny["num_hidden_layers"], tiny["hidden_size"], tiny["intermediate_size"]) == (4, 128, 384)
    assert (tiny["num_attention_heads"], tiny["num_key_value_heads"], tiny["head_dim"]) == (4, 2, 32)
    assert (tiny["vocab_size"], tiny["torch_dtype"], tiny["max_position_embeddings"]) == (151936, "float32", 4096)


def test_parameter_shapes_match_transformers():
    for config in (QWEN3_0_6B_CONFIG, {**TINY_CONFIG, "tie_word_embeddings": False}):
        with torch.device("meta"):
            model = Qwen3ForCausalLM(Qwen3Config(**config))
        expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
        if config["tie_word_embeddings"]:
            del expected["lm_head.weight"]
        assert parameter_shapes(config) == expected
    # Qwen3-0.6B's published size: 0.6B parameters, 0.44B of them outside the embedding.
    counts = {name: math.prod(shape) for name, shape in parameter_shapes(QWEN3_0_6B_CONFIG).items()}
    assert sum(counts.values()) == 596_049_920
    assert sum(counts.values()) - counts["model.embed_tokens.weight"] == 440_467_456


def test_tiny_checkpoint_is_byte_identical_across_creations(tmp_path):
    first = write_random_checkpoint(tmp_path / "a", TINY_CONFIG)
    second = write_random_checkpoint(tmp_path / "b", TINY_CONFIG)
    hashes = file_hashes(first)
    assert set(hashes) == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
    assert file_hashes(second) == hashes
    # The cached copy (possibly written by another process, earlier) has the same bytes too.
    assert file_hashes(tiny_checkpoint()) == hashes
    other_seed = write_random_checkpoint(tmp_path / "c", TINY_CONFIG, seed=1, with_tokenizer=False)
    assert file_hashes(other_seed)["model.safetensors"] != hashes["model.safetensors"]


def test_safetensors_layout(tmp_path):
    path = write_random_checkpoint(tmp_path / "bf16", TINY_CONFIG, dtype=torch.bfloat16, with_tokenizer=False)
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((path / "config.json").read_text())["torch_dtype"] == "bfloat16"
    with safe_open(path / "model.safetensors", "pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()} == parameter_shapes(TINY_CONFIG)
        assert "lm_head.weight" not in f.keys()
        assert f.get_tensor("model.norm.weight").dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        write_random_checkpoint(tmp_path / "int", TINY_CONFIG, dtype=torch.int8)
    with pytest.raises(ValueError, match="qwen3"):
        write_random_checkpoint(tmp_path / "llama", {**TINY_CONFIG, "model_type": "llama"})


@pytest.mark.parametrize("tied", [True, False])
def test_transformers_loads_without_missing_or_unexpected_keys(tmp_path, tied):
    path = tiny_checkpoint() if tied else write_random_checkpoint(tmp_path, {**TINY_CONFIG, "tie_word_embeddings": False})
    model, info = Qwen3ForCausalLM.from_pretrained(path, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set() and info["mismatched_keys"] == set()
    file_weights = load_file(path / "model.safetensors")
    assert ("lm_head.weight" in file_weights) == (not tied)
    head = file_weights["model.embed_tokens.weight" if tied else "lm_head.weight"]
    assert torch.equal(model.lm_head.weight, head)


def test_transformers5_layout_is_what_transformers_writes(tmp_path):
    hub = write_random_checkpoint(tmp_path / "hub", TINY_CONFIG, with_tokenizer=False)
    new = write_random_checkpoint(tmp_path / "new", TINY_CONFIG, with_tokenizer=False, transformers5_layout=True)
    AutoConfig.from_pretrained(hub).save_pretrained(tmp_path / "resaved")
    written = json.loads((new / "config.json").read_text())
    assert written == json.loads((tmp_path / "resaved" / "config.json").read_text())
    assert "rope_theta" not in written and "torch_dtype" not in written
    assert written["rope_parameters"] == {"rope_theta": 1000000, "rope_type": "default"}
    assert (new / "model.safetensors").read_bytes() == (hub / "model.safetensors").read_bytes()


def test_default_model_path(monkeypatch, tmp_path):
    monkeypatch.setattr(checkpoints, "REPO_ROOT", tmp_path / "repo")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NANO_ENGINE_MODEL", raising=False)
    assert default_model_path() == trained_checkpoint()
    AutoTokenizer.from_pretrained(default_model_path())  # the design's promise: it has a tokenizer

    real = tmp_path / "models" / "Qwen3-0.6B"
    real.mkdir(parents=True)
    assert default_model_path() == trained_checkpoint(), "a folder without config.json is not a model"
    (real / "config.json").write_text("{}")
    assert default_model_path().resolve() == real.resolve()

    monkeypatch.setenv("NANO_ENGINE_MODEL", str(tmp_path / "mine"))
    with pytest.raises(FileNotFoundError, match="NANO_ENGINE_MODEL"):
        default_model_path()
    (tmp_path / "mine").mkdir()
    assert default_model_path() == tmp_path / "mine"


def test_cache_survives_two_processes_building_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv("NANO_ENGINE_CACHE", str(tmp_path))
    code = "from nano_engine.checkpoints import tiny_checkpoint; print(tiny_checkpoint())"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outputs[0] == outputs[1] and Path(outputs[0]).parent == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([Path(outputs[0]).name, tokenizer_path().name])
    assert file_hashes(Path(outputs[0])) == file_hashes(tiny_checkpoint())


@pytest.mark.slow
def test_full_size_checkpoint_has_qwen3_0_6b_shapes():
    path = full_size_checkpoint()
    assert full_size_checkpoint() == path  # written once
    assert json.loads((path / "config.json").read_text()) == QWEN3_0_6B_CONFIG
    with safe_open(path / "model.safetensors", "pt") as f:
        assert {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()} == parameter_shapes(QWEN3_0_6B_CONFIG)
        assert f.get_tensor("model.norm.weight").dtype == torch.bfloat16


# --- the weights behave: a plain Qwen3 forward, written from the architecture's definition ---


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate(x, positions, theta):
    """Rotary embedding, Hugging Face's half-split convention."""
    half = x.shape[-1] // 2
    freqs = 1.0 / theta ** (torch.arange(half, dtype=torch.float64) / half)
    angles = positions[:, None].double() * freqs[None, :]
    cos = torch.cat([angles.cos(), angles.cos()], -1).float()[:, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], -1).float()[:, None, :]
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def reference_logits(w, config, ids, last_only=False):
    """Logits [seq, vocab] (or [1, vocab] for the last position) of one sequence, no cache."""
    seq, heads, kv_heads, head_dim = len(ids), config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    eps, theta = config["rms_norm_eps"], config["rope_theta"]
    positions = torch.arange(seq)
    causal = torch.full((seq, seq), float("-inf")).triu(1)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(config["num_hidden_layers"]):
        p = {name.split(f"layers.{i}.")[1]: t for name, t in w.items() if f"layers.{i}." in name}
        h = rms_norm(x, p["input_layernorm.weight"], eps)
        q = rms_norm((h @ p["self_attn.q_proj.weight"].T).view(seq, heads, head_dim), p["self_attn.q_norm.weight"], eps)
        k = rms_norm((h @ p["self_attn.k_proj.weight"].T).view(seq, kv_heads, head_dim), p["self_attn.k_norm.weight"], eps)
        v = (h @ p["self_attn.v_proj.weight"].T).view(seq, kv_heads, head_dim)
        q, k = rotate(q, positions, theta), rotate(k, positions, theta)
        k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
        attn = (torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim) + causal).softmax(-1)
        x = x + torch.einsum("hqk,khd->qhd", attn, v).reshape(seq, -1) @ p["self_attn.o_proj.weight"].T
        h = rms_norm(x, p["post_attention_layernorm.weight"], eps)
        x = x + (torch.nn.functional.silu(h @ p["mlp.gate_proj.weight"].T) * (h @ p["mlp.up_proj.weight"].T)) @ p["mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    if last_only:
        x = x[-1:]
    return rms_norm(x, w["model.norm.weight"], eps) @ head.T


def greedy(w, config, ids, steps):
    """(generated ids, top-1 minus top-2 logit at each step)."""
    ids, gaps = list(ids), []
    for _ in range(steps):
        top = reference_logits(w, config, ids, last_only=True)[-1].topk(2)
        gaps.append((top.values[0] - top.values[1]).item())
        ids.append(top.indices[0].item())
    return ids[-steps:], gaps


@pytest.fixture(scope="module")
def tiny():
    path = tiny_checkpoint()
    return load_file(path / "model.safetensors"), json.loads((path / "config.json").read_text()), AutoTokenizer.from_pretrained(path)


def test_reference_forward_matches_transformers(tiny):
    weights, config, tok = tiny
    ids = chat_prompts(tok)[0]
    model = Qwen3ForCausalLM.from_pretrained(tiny_checkpoint()).eval()
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0]
    # Two float32 implementations of the same model: they differ by rounding only (rotary angles,
    # summation order), which these weights keep to a few 1e-5.
    torch.testing.assert_close(reference_logits(weights, config, ids), expected, rtol=0, atol=1e-4)


def test_greedy_depends_on_context_with_clear_margins(tiny):
    weights, config, tok = tiny
    prompts = chat_prompts(tok)
    steps, differ, first_differ, gaps, continuations = 6, 0, 0, [], []
    with torch.no_grad():
        for prompt in prompts:
            # The same prompt with one early token of the system prompt replaced.
            edited = list(prompt)
            edited[5] = 40000
            original, prompt_gaps = greedy(weights, config, prompt, steps)
            changed, _ = greedy(weights, config, edited, steps)
            differ += original != changed
            first_differ += original[0] != changed[0]
            gaps += prompt_gaps
            continuations.append(tuple(original))
    # (a) the context matters: an early edit changes the continuation, prompts that differ only
    # in their last question continue differently, and the model does not just echo a token.
    assert differ >= 5 and first_differ >= 2, (differ, first_differ)
    assert len(set(continuations)) == len(prompts)
    echoes = sum(c[i] == c[i - 1] for c in continuations for i in range(1, steps))
    assert echoes <= len(continuations) * steps // 4, continuations
    # (b) greedy has margin: the top-1/top-2 logit gap is far above float32 rounding.
    assert statistics.median(gaps) > 1e-2, sorted(gaps)
