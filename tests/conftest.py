"""Fixtures shared by the test files (pytest finds them here; nothing imports this file).

Everything runs offline: no model hub is ever contacted. The tiny checkpoint (Qwen's real
vocabulary, 4 layers) is loaded once per session (per xdist worker); its greedy outputs under
``nano_engine.model.generate``, also computed once, are the reference every engine run must equal. Plain helpers
(constants, prompt builders, invariant checks) live in ``engine_helpers.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist (`make test`: one worker per core) each worker, and every notebook kernel or
# child process it starts, gets its share of the cores: torch's default of one thread per core in
# every worker would oversubscribe them, and spinning OpenMP threads slow everything on the machine.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

# Imported after the environment above: huggingface_hub reads it once, at its first import.
import pytest
import torch
from engine_helpers import MAX_TOKENS, make_prompts

from nano_engine.checkpoints import tiny_checkpoint
from nano_engine.engine import LLMEngine
from nano_engine.model import Transformer, generate

if "PYTEST_XDIST_WORKER_COUNT" in os.environ:     # in case a plugin imported torch before us
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# Tests that share a heavy helper run on one worker under `--dist loadgroup` (`make test`): the
# browser tests (one JupyterLab and one Chromium for all of them), and the tests that read
# `judge.py check`'s one run or the one Triton-interpreter child. The chapters are not grouped:
# each starts its own kernel (own ports, own process, one thread per worker's share of the cores)
# and writes nothing another chapter reads, so two run at once, one per worker, and the longest
# chapters no longer queue behind each other on one worker.
XDIST_GROUPS = ("browser",)
SHARED_RUN_GROUPS = {"judge_check": "judge_check", "interpreter_run": "interpreter_run"}   # session fixture -> group


def _xdist_groups(item) -> list[str]:
    groups = [group for group in XDIST_GROUPS if item.get_closest_marker(group)]
    groups += [group for fixture, group in SHARED_RUN_GROUPS.items() if fixture in getattr(item, "fixturenames", ())]
    return sorted(groups)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    if config.pluginmanager.hasplugin("xdist"):    # its mark is unknown under -p no:xdist
        for item in items:
            for group in _xdist_groups(item):
                item.add_marker(pytest.mark.xdist_group(group))
    yield                               # pytest-xdist's hook reads the marks here
    if not getattr(config.option, "loadgroup", False):     # set on xdist's workers under --dist loadgroup
        return
    # pytest-xdist 3.8 puts a test in its group by renaming it "<id>@<group>", through the attribute
    # that held the id before pytest 9.2; with pytest 9.2 the renaming is lost and groups are ignored
    # (pytest-dev/pytest-xdist#1386, fix pending in #1388). Until then we rename it where pytest 9.2
    # keeps the id.
    from _pytest.nodeid import NodeId

    for item in items:
        groups = _xdist_groups(item)
        suffix = "@" + "_".join(groups)
        if groups and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)


JUDGE_CHECK_TIMEOUT_S = 5.0     # CPU seconds per test, as for a learner's file in the notebooks


@pytest.fixture(scope="session")
def judge_check(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """``python practice/judge.py check --json``, run once: every exercise's reference, starter, wrong
    variants and mistakes judged in child processes, its worked examples, seal and mutation report.
    test_judge checks the command as a whole, test_exercises reads each wrong file's verdict from it
    (one judging per file instead of two). Its tests share one xdist worker (``SHARED_RUN_GROUPS``),
    so it runs once per ``make test``."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "NANO_ENGINE_WORKSPACE": str(tmp_path_factory.mktemp("workspace")), "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, str(root / "practice" / "judge.py"), "check", "--json",
                           "--timeout", str(JUDGE_CHECK_TIMEOUT_S)],
                          capture_output=True, text=True, cwd=str(root), env=env, timeout=1800)
    try:
        return proc, json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"judge.py check printed no JSON (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


INTERPRETER_CASES = {   # file -> the tests of it that need TRITON_INTERPRET=1 (None: the whole file)
    "test_triton_attention.py": None,
    "test_fast_path.py": ["test_interpreter_engine_triton_equals_reference",
                          "test_interpreter_runner_decode_through_static_buffers",
                          "test_interpreter_runner_returns_the_requested_logit_rows",
                          "test_interpreter_precompile_writes_nothing"],
}


@pytest.fixture(scope="session")
def interpreter_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict[str, dict[str, int]]]:
    """The Triton-interpreter cases of test_triton_attention.py and test_fast_path.py, in one child
    pytest started with ``TRITON_INTERPRET=1`` (it must be set before the process first imports
    triton; see test_triton_attention.py): one child, so torch and triton are imported once for both.
    Returns the child and, per file, its counts of passed / failed / skipped tests (from JUnit XML).
    Its tests share one xdist worker (``SHARED_RUN_GROUPS``), so it runs once per ``make test``."""
    import xml.etree.ElementTree as ET

    if os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on"):
        pytest.skip("this is the interpreter run")   # the child itself: it starts no child
    here = Path(__file__).resolve().parent
    junit = tmp_path_factory.mktemp("interpreter") / "junit.xml"
    targets = [str(here / name) if tests is None else f"{here / name}::{test}"
               for name, tests in INTERPRETER_CASES.items() for test in (tests or [None])]
    command = [sys.executable, "-m", "pytest", *targets, "-q", "-rs", "-p", "no:cacheprovider",
               "-p", "no:xdist", f"--junitxml={junit}"]
    child = subprocess.run(command, env={**os.environ, "TRITON_INTERPRET": "1"}, cwd=here.parent,
                           capture_output=True, text=True, timeout=900)
    counts = {name: {"passed": 0, "failed": 0, "skipped": 0} for name in INTERPRETER_CASES}
    if junit.exists():
        for case in ET.parse(junit).iter("testcase"):
            name = case.get("classname", "").rsplit(".", 1)[-1] + ".py"
            if name in counts:
                kind = ("failed" if case.find("failure") is not None or case.find("error") is not None
                        else "skipped" if case.find("skipped") is not None else "passed")
                counts[name][kind] += 1
    return child, counts


@pytest.fixture(scope="module")
def single_thread():
    """The tiny model's matrices are far too small for a thread pool to pay; with two busy cores
    (or pytest-xdist) OpenMP's wake-ups cost milliseconds per call."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_model_once() -> Transformer:
    return Transformer.from_pretrained(tiny_checkpoint())


@pytest.fixture(scope="session")
def small_vocab_model_once(tmp_path_factory) -> Transformer:
    """The tiny preset's body (4 layers, hidden 128, same seed and init) over a 4,096-token
    vocabulary. On the tiny preset the LM head (151,936 x 128) is ~96% of the weights and most of
    a decode step's time; the engine's caching, scheduling and fault handling do not depend on the
    vocabulary, so the tests of those mechanics that feed token ids (never text) run on this one
    (``small_vocab_model`` below), about 4x cheaper."""
    from nano_engine.checkpoints import TINY_CONFIG, write_random_checkpoint

    folder = tmp_path_factory.mktemp("small-vocab")
    config = {**TINY_CONFIG, "vocab_size": 4096, "bos_token_id": 4094, "eos_token_id": 4095}
    write_random_checkpoint(folder, config, with_tokenizer=False)
    return Transformer.from_pretrained(folder)


@pytest.fixture(scope="module")
def small_vocab_model(single_thread, small_vocab_model_once) -> Transformer:
    """A test module whose tests need no tokenizer runs on it by overriding ``tiny_model`` with a
    module fixture that returns it (test_faults.py, test_host_tier_engine.py)."""
    return small_vocab_model_once


@pytest.fixture(scope="module")
def tiny_model(single_thread, tiny_model_once) -> Transformer:
    """Loaded once per session (once per xdist worker): the engine and the tests only read it."""
    return tiny_model_once


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tiny_checkpoint())


@pytest.fixture(scope="module")
def prompts(tiny_model) -> list[list[int]]:
    return make_prompts(tiny_model.config.vocab_size)


_GREEDY: dict[tuple[tuple[int, ...], int | None], list[int]] = {}


def tiny_greedy(model: Transformer, prompt: list[int], eos: int | None = None) -> list[int]:
    """``generate``'s greedy tokens for one prompt on the tiny model, computed once per session."""
    key = (tuple(prompt), eos)
    if key not in _GREEDY:
        _GREEDY[key] = generate(model, torch.tensor([prompt]), MAX_TOKENS, eos_token_id=eos)[0].tolist()
    return list(_GREEDY[key])


@pytest.fixture(scope="module")
def eos(tiny_model, prompts) -> int:
    """A stand-in eos: the token the random model emits most often, so that some requests stop
    early and some do not (the real eos id almost never comes out of random weights)."""
    counts: dict[int, int] = {}
    for p in prompts:
        for t in tiny_greedy(tiny_model, p):
            counts[t] = counts.get(t, 0) + 1
    return max(counts, key=counts.__getitem__)


@pytest.fixture(scope="module")
def reference(tiny_model, prompts, eos) -> list[list[int]]:
    return [tiny_greedy(tiny_model, p, eos) for p in prompts]


@pytest.fixture
def make_engine(tiny_model):
    """``make_engine(**kwargs)`` builds an engine on the tiny model; after the test every engine
    it built must have no request left and no block held outside its cache."""
    engines = []

    def build(model=None, **kwargs) -> LLMEngine:
        engine = LLMEngine(model or tiny_model, **kwargs)
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        engine.check_no_leaks()
