"""Our hand-written Qwen3 against transformers' Qwen3ForCausalLM on the same checkpoint."""

import json
import shutil

import pytest
import torch
from transformers import Qwen3Config as HFQwen3Config, Qwen3ForCausalLM

from nano_engine.model import Qwen3Config, Transformer, generate

SMALL = dict(vocab_size=1000, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             max_position_embeddings=512, rope_theta=10_000.0, tie_word_embeddings=False)


def _hf_checkpoint(path, seed=0, initializer_range=0.02, **cfg):
    torch.manual_seed(seed)
    hf = Qwen3ForCausalLM(HFQwen3Config(initializer_range=initializer_range, **cfg)).eval()
    hf.save_pretrained(path)
    return hf


@pytest.fixture(scope="session")
def small_pair(tmp_path_factory):
    path = tmp_path_factory.mktemp("small")
    hf = _hf_checkpoint(path, seed=1, **SMALL)
    return path, hf


@pytest.fixture(scope="session")
def full_size_pair():
    """Qwen3-0.6B's own config with random weights: the bfloat16 checkpoint that the benchmarks and
    test_checkpoints use (written once per machine into the cache, not once per session), loaded in
    float32 by both sides. bfloat16 -> float32 is exact, so both hold the same weights; and these
    weights keep the top two logits apart (``nano_engine.checkpoints``), so 32 greedy steps compare
    sharply instead of flipping on rounding."""
    from nano_engine.checkpoints import full_size_checkpoint

    path = full_size_checkpoint()
    return path, Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _prompts(vocab, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g) for n in lengths]


def _check_against_hf(path, hf, lengths, steps):
    """Our greedy decode (prefill, then ``steps`` single-token steps on our KV cache) against
    transformers' forward pass over the prompt and our continuation: its logits equal ours at every
    position (to 1e-4), and at every step our token is its argmax given the tokens before it, which
    is the token its greedy search would pick there (one forward pass of transformers instead of
    its ``steps``-step generate loop: the same verdict on our tokens, a fraction of the work)."""
    ours = Transformer.from_pretrained(path)
    for p in _prompts(ours.config.vocab_size, lengths):
        new = generate(ours, p[None], steps)[0]
        sequence = torch.cat([p, new])[None]
        with torch.inference_mode():
            theirs = hf(sequence).logits
            torch.testing.assert_close(ours(sequence), theirs, atol=1e-4, rtol=1e-4)
        assert new.tolist() == theirs[0, len(p) - 1:-1].argmax(-1).tolist()


def test_matches_transformers_small_untied(small_pair):
    path, hf = small_pair
    _check_against_hf(path, hf, lengths=[1, 7, 33], steps=32)


def test_matches_transformers_tiny_checkpoint():
    checkpoints = pytest.importorskip("nano_engine.checkpoints")
    path = checkpoints.tiny_checkpoint()
    hf = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    _check_against_hf(path, hf, lengths=[5, 40, 123], steps=32)


def test_matches_transformers_trained_checkpoint():
    """The trained model: untied head, real vocabulary, weights expanded from the compact file."""
    checkpoints = pytest.importorskip("nano_engine.checkpoints")
    training = pytest.importorskip("nano_engine.training")
    if not training.PACKED_PATH.is_file():
        pytest.skip("nano_engine/data/trained_compact.safetensors not built (python -m nano_engine.training)")
    path = checkpoints.trained_checkpoint()
    hf = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    _check_against_hf(path, hf, lengths=[5, 40, 123], steps=32)


@pytest.mark.slow
def test_matches_transformers_full_size(full_size_pair):
    path, hf = full_size_pair
    _check_against_hf(path, hf, lengths=[3, 17, 64], steps=32)


def test_cached_and_uncached_generate_agree(small_pair):
    model = Transformer.from_pretrained(small_pair[0])
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    assert torch.equal(generate(model, ids, 12), generate(model, ids, 12, use_cache=False))


def test_generate_stops_at_eos_and_pads_finished_rows(small_pair):
    model = Transformer.from_pretrained(small_pair[0])
    prompt = torch.randint(0, model.config.vocab_size, (1, 6))
    free_run = generate(model, prompt, 10)[0].tolist()
    eos = free_run[3]
    stopped = generate(model, prompt, 10, eos_token_id=eos)[0].tolist()
    assert stopped == free_run[: free_run.index(eos) + 1]


def test_generate_rejects_bad_input(small_pair):
    model = Transformer.from_pretrained(small_pair[0])
    with pytest.raises(ValueError, match="non-empty"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, torch.tensor([[1, 2]]), 0)


def test_bfloat16_load_is_close_to_float32(small_pair):
    fp32 = Transformer.from_pretrained(small_pair[0])
    bf16 = Transformer.from_pretrained(small_pair[0], dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16
    ids = torch.randint(0, fp32.config.vocab_size, (1, 20))
    with torch.inference_mode():
        a, b = fp32(ids), bf16(ids).float()
    assert (a - b).abs().max() < 0.05 * a.abs().max()


# ---------------------------------------------------------------------------- both config layouts

def _rewrite_config(path, edit):
    cfg = json.loads((path / "config.json").read_text())
    edit(cfg)
    (path / "config.json").write_text(json.dumps(cfg))


def test_reads_hub_and_transformers5_config_layouts(small_pair, tmp_path):
    src = small_pair[0]
    written = json.loads((src / "config.json").read_text())
    hub, v5 = tmp_path / "hub", tmp_path / "v5"
    shutil.copytree(src, hub)
    shutil.copytree(src, v5)

    def to_hub(cfg):       # how the hub's Qwen3 files spell it
        theta = (cfg.pop("rope_parameters", None) or {}).get("rope_theta", cfg.get("rope_theta"))
        cfg["rope_theta"] = theta
        cfg["torch_dtype"] = cfg.pop("dtype", "float32")

    def to_v5(cfg):        # how transformers 5 writes it
        theta = cfg.pop("rope_theta", None) or cfg["rope_parameters"]["rope_theta"]
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}

    _rewrite_config(hub, to_hub)
    _rewrite_config(v5, to_v5)
    a, b = Transformer.from_pretrained(hub), Transformer.from_pretrained(v5)
    assert a.config == b.config and a.config.rope_theta == SMALL["rope_theta"]
    assert "rope_parameters" in written or "rope_theta" in written


def test_reads_sharded_checkpoint(small_pair, tmp_path):
    path, hf = small_pair
    hf.save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    ids = torch.randint(0, SMALL["vocab_size"], (1, 11))
    with torch.inference_mode():
        assert torch.equal(Transformer.from_pretrained(tmp_path)(ids), Transformer.from_pretrained(path)(ids))


# ---------------------------------------------------------------------------- clear loading errors

def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Transformer.from_pretrained(tmp_path / "nope")


def test_missing_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        Transformer.from_pretrained(tmp_path)


def test_other_architecture(small_pair, tmp_path):
    shutil.copytree(small_pair[0], tmp_path / "m")
    _rewrite_config(tmp_path / "m", lambda c: c.update(model_type="llama", architectures=["LlamaForCausalLM"]))
    with pytest.raises(ValueError, match=r"config\.json.*'llama'"):
        Transformer.from_pretrained(tmp_path / "m")


def test_wrong_tensor_shape(small_pair, tmp_path):
    shutil.copytree(small_pair[0], tmp_path / "m")
    _rewrite_config(tmp_path / "m", lambda c: c.update(intermediate_size=128))
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor .*mlp\.\w+_proj\.weight.* has shape"):
        Transformer.from_pretrained(tmp_path / "m")


def test_missing_weights(small_pair, tmp_path):
    shutil.copytree(small_pair[0], tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no weights"):
        Transformer.from_pretrained(tmp_path / "m")


def test_config_dataclass_rejects_incomplete_config():
    with pytest.raises(ValueError, match="missing required keys"):
        Qwen3Config.from_dict({"model_type": "qwen3", "hidden_size": 8})


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")
def test_cuda_bfloat16_close_to_cpu_float32(small_pair):
    cpu = Transformer.from_pretrained(small_pair[0])
    gpu = Transformer.from_pretrained(small_pair[0], device="cuda")
    assert gpu.dtype == torch.bfloat16
    ids = torch.randint(0, SMALL["vocab_size"], (2, 30))
    with torch.inference_mode():
        a, b = cpu(ids), gpu(ids.cuda()).float().cpu()
    assert (a - b).abs().max() < 0.05 * a.abs().max()
