"""Fault injection: whatever raises inside ``LLMEngine.step``, the engine stays consistent.

Two kinds of faults, on all three caches (none, hashed, radix):

* **Injected at every stage of a step** (``test_fault_at_every_stage``): an exception or a
  ``KeyboardInterrupt`` raised by one call at a chosen stage (scheduling, admission, preemption,
  the forward, sampling, cache registration, finish/free), the first, second or fourth time that
  call happens, while other requests are in flight. The step raises; the test keeps stepping.
  Every request in flight must still finish with exactly the reference tokens (it was scheduled
  again, never lost or corrupted), nothing may leak once the queue drains, and the engine then
  serves new requests correctly.
* **Ctrl-C at random moments** (``test_random_interrupt_soak``): a real SIGINT raised at a random
  line of ``nano_engine`` code while ``generate`` runs (``sys.settrace`` counts the lines), as a
  user pressing Ctrl-C would. ``generate`` raises KeyboardInterrupt; then the engine must have
  no leak, and (every fourth round, and at the end) generate the same prompts correctly. 60
  rounds per cache by default (``SOAK_ROUNDS=...`` for more; ``NANO_ENGINE_SOAK_LONG=1`` runs 1000 per cache).

``pytest -s tests/test_faults.py`` prints the counts (faults per stage and cache, interrupts,
broken engines).
"""

from __future__ import annotations

import collections
import os
import random
import signal
from pathlib import Path

import pytest
import torch
from engine_helpers import MAX_TOKENS, SigintAtLine, assert_running_prefixes_intact

import nano_engine
import nano_engine.engine as engine_module
from nano_engine.engine import LLMEngine, SamplingParams
from nano_engine.model import generate
from nano_engine.sequence import Sequence, Status


@pytest.fixture(scope="module")
def tiny_model(small_vocab_model):
    """These tests feed token ids, never text: the tiny body over a 4,096-token vocabulary
    (conftest.py's ``small_vocab_model``), so a step is not spent in a 151,936-row LM head."""
    return small_vocab_model


CACHES = ["none", "hashed", "vllm", "radix"]
FAULTS = [RuntimeError, KeyboardInterrupt]
FIRE_AT = [0, 1, 3]             # the 1st, 2nd or 4th matching call raises
IN_FLIGHT = [3, 7, 9, 11, 15, 1]   # 17, 48, 150, 33, 33 (a repeat) and 1 tokens; 7 and 9 share 40
PROBE = [0, 13]                 # new requests after the fault: 100 and 31 tokens


def engine_options(cache: str) -> dict:
    # 16 blocks of 16 for ~22 blocks of requests: admissions wait and running requests are preempted;
    # 64 tokens per step: prompts are prefilled in chunks, next to decodes.
    return dict(cache=cache, num_blocks=16, block_size=16, max_num_batched_tokens=64)


class Injector:
    """Replace ``obj.name`` by a wrapper whose ``at``-th call matching ``when`` raises ``fault``."""

    def __init__(self, monkeypatch, obj, name: str, fault: type[BaseException], at: int, when=None) -> None:
        self.original, self.fault, self.at, self.when = getattr(obj, name), fault, at, when
        self.calls, self.fired = 0, False
        monkeypatch.setattr(obj, name, self)

    def __call__(self, *args, **kwargs):
        if not self.fired and (self.when is None or self.when(*args, **kwargs)):
            self.calls += 1
            if self.calls > self.at:
                self.fired = True
                raise self.fault(f"injected into {getattr(self.original, '__name__', self.original)}")
        return self.original(*args, **kwargs)


class ShortOfMemoryOnce:
    """``cache.allocate`` reports memory short once, for a running sequence: the scheduler preempts."""

    def __init__(self, monkeypatch, cache) -> None:
        self.original, self.done = cache.allocate, False
        monkeypatch.setattr(cache, "allocate", self)

    def __call__(self, seq: Sequence, num_tokens: int) -> bool:
        if not self.done and _running(seq):
            self.done = True
            return False
        return self.original(seq, num_tokens)


def _running(seq: Sequence, *args) -> bool:
    return seq.status is Status.RUNNING and not seq.is_finished


STAGES = {
    # stage: (object to patch, given the engine; attribute; which calls count)
    "schedule": (lambda e: e.cache, "allocate", _running),
    "admission": (lambda e: e.cache, "allocate", lambda seq, n: seq.status is Status.WAITING),
    "lock": (lambda e: e.cache, "lock", None),
    "preemption": (lambda e: e.cache, "free", _running),    # one preemption forced per run
    "forward": (lambda e: e.kv_cache, "store", None),        # mid-forward: some layers wrote their KV
    "sampling": (lambda e: engine_module, "sample", None),
    "cache registration": (lambda e: e.cache, "cache", None),
    "finish/free": (lambda e: e.cache, "free", lambda seq: seq.is_finished),
}


@pytest.fixture(scope="module")
def counts():
    """Faults injected, by stage and cache; printed at the end of the module (``pytest -s``)."""
    table: collections.Counter = collections.Counter()
    yield table
    if table:
        print("\nfaults injected (RuntimeError + KeyboardInterrupt):")
        for (stage, cache), n in sorted(table.items()):
            print(f"  {stage:20s} {cache:7s} {n}")
        print(f"  total {sum(table.values())}")


def drain(engine: LLMEngine) -> int:
    """Step until the queue is empty; returns the faults that escaped a step."""
    escaped = 0
    while engine.scheduler.has_unfinished:
        try:
            engine.step()
        except (RuntimeError, KeyboardInterrupt) as e:
            assert "injected" in str(e), f"a fault the test did not inject: {e!r}"
            escaped += 1
        assert_running_prefixes_intact(engine)
    return escaped


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("stage", list(STAGES))
def test_fault_at_every_stage(make_engine, monkeypatch, prompts, reference, eos, counts, cache, stage):
    engine = make_engine(eos_token_id=eos, **engine_options(cache))
    params = SamplingParams(max_tokens=MAX_TOKENS)
    for fault in FAULTS:
        for at in FIRE_AT:
            target, name, when = STAGES[stage]
            ids = [engine.add_request(prompts[i], params) for i in IN_FLIGHT]
            seqs = {s.request_id: s for s in engine.scheduler.waiting if s.request_id in ids}
            with monkeypatch.context() as patch:
                if stage == "preemption":
                    ShortOfMemoryOnce(patch, engine.cache)
                    at = 0
                injector = Injector(patch, target(engine), name, fault, at, when)
                assert drain(engine) == 1 and injector.fired, f"{stage}: the fault never fired"
            counts[stage, cache] += 1
            assert [seqs[i].output_token_ids for i in ids] == [reference[i] for i in IN_FLIGHT]
            assert all(seqs[i].finish_reason in ("stop", "length") for i in ids)
            engine.check_no_leaks()
            assert engine.generate([prompts[i] for i in PROBE], params) == [reference[i] for i in PROBE]


def test_sampling_overflow_is_rejected_not_a_wedged_engine(make_engine, prompts, reference, eos):
    """The temperature that used to overflow in sampling (1e-39) is refused at the door, and a
    sampling error (forced here) leaves the others to finish correctly."""
    engine = make_engine(eos_token_id=eos)
    with pytest.raises(ValueError, match="temperature"):
        engine.generate([prompts[3]], SamplingParams(max_tokens=MAX_TOKENS, temperature=1e-39))
    params = SamplingParams(max_tokens=MAX_TOKENS)
    ok = engine.add_request(prompts[7], params)
    bad_params = SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0)
    engine.add_request(prompts[9], bad_params)
    bad_params.temperature = 1e-39          # changed after it was checked: sampling overflows
    with pytest.raises(RuntimeError):
        while engine.scheduler.has_unfinished:
            engine.step()
    (bad,) = [s for s in engine.scheduler.running if s.params is bad_params]
    engine.abort(bad)
    finished = []
    while engine.scheduler.has_unfinished:
        finished += engine.step()
    assert [(s.request_id, s.output_token_ids) for s in finished] == [(ok, reference[7])]


# -- Ctrl-C at random lines ----------------------------------------------------------------------

PACKAGE_DIR = str(Path(nano_engine.__file__).parent)
SOAK_PROMPTS = [[1, 2, 3], list(range(40, 75)), list(range(40, 60)) + [7, 8, 9], list(range(100, 118))]


def soak(engine: LLMEngine, expected: dict, rounds: int, rng: random.Random) -> tuple[int, int]:
    """``rounds`` generate calls, each hit by SIGINT at a random line (unless the call turns out
    shorter than the line counted for its prompts before); returns (interrupts, broken engines)."""
    interrupts = broken = 0
    lines: dict[tuple, int] = {}           # lines a clean generate of these prompts ran, once measured
    params = SamplingParams(max_tokens=MAX_TOKENS)
    for round in range(rounds):
        batch = tuple(sorted(rng.sample(range(len(SOAK_PROMPTS)), rng.randint(1, 3))))
        batch_prompts, want = [SOAK_PROMPTS[i] for i in batch], [expected[i] for i in batch]
        if batch not in lines:
            with SigintAtLine(None, PACKAGE_DIR) as counter:
                assert engine.generate(batch_prompts, params) == want
            lines[batch] = counter.lines
        try:
            with SigintAtLine(rng.randrange(1, lines[batch]), PACKAGE_DIR):
                engine.generate(batch_prompts, params)
        except KeyboardInterrupt:
            interrupts += 1
        try:
            drain(engine)                   # requests a generate was interrupted before aborting
            engine.check_no_leaks()
            if round % 4 == 3 or round == rounds - 1:     # and it still computes the right tokens
                assert engine.generate(batch_prompts, params) == want
                engine.check_no_leaks()
        except AssertionError:
            broken += 1
            raise
    return interrupts, broken


@pytest.fixture(scope="module")
def soak_expected(tiny_model):
    return {i: generate(tiny_model, torch.tensor([p]), MAX_TOKENS)[0].tolist() for i, p in enumerate(SOAK_PROMPTS)}


def run_soak(make_engine, soak_expected, cache: str, rounds: int) -> None:
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("needs Python's default SIGINT handler")
    engine = make_engine(cache=cache, num_blocks=24, block_size=4, max_num_batched_tokens=16)
    interrupts, broken = soak(engine, soak_expected, rounds, random.Random(cache))
    print(f"\nsoak {cache}: {interrupts} interrupts in {rounds} generate calls, {broken} broken engines")
    assert interrupts >= 0.8 * rounds and broken == 0


@pytest.mark.parametrize("cache", CACHES)
def test_random_interrupt_soak(make_engine, soak_expected, cache):
    run_soak(make_engine, soak_expected, cache, rounds=int(os.environ.get("SOAK_ROUNDS", 60)))


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("NANO_ENGINE_SOAK_LONG"),
                    reason="1000 rounds per cache, about 5 CPU-minutes each: set NANO_ENGINE_SOAK_LONG=1")
@pytest.mark.parametrize("cache", CACHES)
def test_random_interrupt_soak_long(make_engine, soak_expected, cache):
    run_soak(make_engine, soak_expected, cache, rounds=1000)
