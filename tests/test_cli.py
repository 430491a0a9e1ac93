"""``python -m nano_engine generate``: the engine behind a command line, checked against the
reference greedy loop on the tiny checkpoint."""

import subprocess
import sys

import pytest
import torch

from nano_engine.__main__ import main
from nano_engine.checkpoints import tiny_checkpoint
from nano_engine.model import generate

QUESTION = "What is a KV cache?"


def expected(model, tok, max_tokens, raw=False):
    if raw:
        ids = tok(QUESTION)["input_ids"]
    else:
        text = tok.apply_chat_template([{"role": "user", "content": QUESTION}], tokenize=False,
                                       add_generation_prompt=True, enable_thinking=False)
        ids = tok(text)["input_ids"]
    out = generate(model, torch.tensor([ids]), max_tokens, eos_token_id=tok.eos_token_id)[0].tolist()
    return tok.decode(out, skip_special_tokens=True)


@pytest.mark.parametrize("cache", ["none", "hashed", "radix"])
def test_generate_command_prints_the_reference_completion(capsys, tiny_model, tokenizer, cache):
    argv = ["generate", "--prompt", QUESTION, "--model", str(tiny_checkpoint()), "--max-tokens", "7",
            "--device", "cpu", "--cache", cache, "--stats"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == expected(tiny_model, tokenizer, 7) + "\n"
    assert "time to first token" in captured.err


def test_raw_prompt_and_sampling_options(capsys, tiny_model, tokenizer):
    argv = ["generate", "--prompt", QUESTION, "--model", str(tiny_checkpoint()), "--max-tokens", "5", "--raw"]
    assert main(argv) == 0
    assert capsys.readouterr().out == expected(tiny_model, tokenizer, 5, raw=True) + "\n"
    seeded = argv + ["--temperature", "0.9", "--top-p", "0.8", "--seed", "4"]
    main(seeded)
    first = capsys.readouterr().out
    main(seeded)
    assert capsys.readouterr().out == first


def test_bad_arguments_exit_with_usage(capsys):
    with pytest.raises(SystemExit):
        main(["generate"])                              # --prompt is required
    assert "--prompt" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["generate", "--prompt", "x", "--cache", "lru"])
    with pytest.raises(ValueError, match="max_tokens"):
        main(["generate", "--prompt", "x", "--model", str(tiny_checkpoint()), "--max-tokens", "0"])


def test_module_entry_point(tiny_model, tokenizer):
    result = subprocess.run([sys.executable, "-m", "nano_engine", "generate", "--prompt", QUESTION,
                             "--model", str(tiny_checkpoint()), "--max-tokens", "4", "--device", "cpu"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected(tiny_model, tokenizer, 4) + "\n"
