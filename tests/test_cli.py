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


def assert_one_line_error(capsys, argv: list[str], *fragments: str) -> None:
    """What argparse accepts but the engine refuses: status 2, no output, one line on stderr."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nano-engine {argv[0]}: error: "), captured.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")


@pytest.mark.parametrize("extra, fragments", [
    (["--max-tokens", "0"], ["max_tokens", ">= 1"]),
    (["--top-p", "2"], ["top_p", "(0, 1]"]),
    (["--temperature", "-1"], ["temperature"]),
    pytest.param(["--device", "cuda"], ["--device cuda", "CUDA is not available"], marks=NO_CUDA),
    (["--device", "potato"], ["--device 'potato'"]),
    (["--model", "/nonexistent/model"], ["/nonexistent/model", "does not exist"]),
])
def test_generate_refuses_bad_values_in_one_line(capsys, extra, fragments):
    argv = ["generate", "--prompt", "x", "--model", str(tiny_checkpoint()), *extra]
    assert_one_line_error(capsys, argv, *fragments)


def test_model_is_read_before_the_tokenizer(capsys, tmp_path):
    """A folder with weights but no tokenizer: the model loads, then our error names the folder
    (never a hub lookup: the tokenizer is read with local_files_only)."""
    from nano_engine.checkpoints import TINY_CONFIG, write_random_checkpoint

    small = {**TINY_CONFIG, "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
             "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}
    folder = write_random_checkpoint(tmp_path / "no-tokenizer", small, with_tokenizer=False)
    assert_one_line_error(capsys, ["generate", "--prompt", "x", "--model", str(folder)],
                          str(folder), "no tokenizer in the folder")


@pytest.mark.parametrize("extra, fragments", [
    (["--capacity", "0"], ["--capacity", ">= 1"]),
    (["--capacity", "256", "-5"], ["--capacity", "-5"]),
    (["--plot", "/nonexistent/folder/hits.png"], ["/nonexistent/folder", "does not exist"]),
    (["--plot", "hits.txt"], ["hits.txt", ".png"]),
])
def test_hitrate_refuses_bad_values_before_any_work(capsys, extra, fragments):
    assert_one_line_error(capsys, ["hitrate", *extra], *fragments)


@pytest.mark.parametrize("extra, fragments", [
    (["--num-seqs", "0"], ["--num-seqs must be >= 1, got 0"]),
    (["--min-len", "0"], ["--min-len"]),
    (["--threads", "0"], ["--threads"]),
    (["--hf-batch-size", "0"], ["--hf-batch-size"]),
    (["--json", "/nonexistent/folder/figures.json"], ["/nonexistent/folder", "does not exist"]),
    pytest.param(["--device", "cuda"], ["--device cuda", "CUDA is not available"], marks=NO_CUDA),
])
def test_bench_refuses_bad_values_instead_of_replacing_them(capsys, extra, fragments):
    assert_one_line_error(capsys, ["bench", *extra], *fragments)


def test_module_exits_with_status_2_on_a_refused_value():
    result = subprocess.run([sys.executable, "-m", "nano_engine", "generate", "--prompt", "x", "--max-tokens", "0"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nano-engine generate: error: max_tokens"), result.stderr


def test_module_entry_point(tiny_model, tokenizer):
    result = subprocess.run([sys.executable, "-m", "nano_engine", "generate", "--prompt", QUESTION,
                             "--model", str(tiny_checkpoint()), "--max-tokens", "4", "--device", "cpu"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected(tiny_model, tokenizer, 4) + "\n"
