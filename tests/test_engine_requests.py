"""The engine's edges: abort, threads, Ctrl-C during bookkeeping, bad input, bounded growth.

Every check compares with the plain reference loop (``nano_engine.model.generate``) or with the
engine's state before a rejected call."""

from __future__ import annotations

import ast
import inspect
import signal
import threading

import pytest
import torch
from engine_fixtures import MAX_TOKENS, eos, make_engine, prompts, reference, single_thread, tiny_model  # noqa: F401

import nano_engine.cuda_graph
from nano_engine.engine import EngineConfig, LLMEngine, RequestAborted, SamplingParams
from nano_engine.model import generate

PARAMS = SamplingParams(max_tokens=MAX_TOKENS)


def run_to_end(engine: LLMEngine) -> list:
    finished = []
    while engine.scheduler.has_unfinished:
        finished += engine.step()
    return finished


# -- abort ----------------------------------------------------------------------------------------

def test_abort_by_id_and_by_sequence_is_idempotent(make_engine, prompts, reference, eos):
    engine = make_engine(eos_token_id=eos, cache="radix", max_num_batched_tokens=32)
    ids = [engine.add_request(prompts[i], PARAMS) for i in (0, 3, 7)]
    seqs = list(engine.scheduler.waiting)
    engine.step()                                    # 0 is prefilling (chunked), 3 and 7 wait
    assert engine.abort(ids[0]) and engine.abort(seqs[2])          # a running one by id, a waiting one
    assert not engine.abort(ids[0]) and not engine.abort(seqs[2])  # again: nothing changes
    assert [s.finish_reason for s in (seqs[0], seqs[2])] == ["abort", "abort"]
    (done,) = run_to_end(engine)
    assert (done.request_id, done.output_token_ids) == (ids[1], reference[3])
    reason = done.finish_reason
    assert not engine.abort(ids[1]) and done.finish_reason == reason   # finished: its reason stays
    engine.check_no_leaks()
    for bad in (99, -1, True, "0"):
        with pytest.raises(ValueError, match="request id"):
            engine.abort(bad)


def test_generate_raises_when_one_of_its_requests_is_aborted(make_engine, prompts, reference, eos, monkeypatch):
    engine = make_engine(eos_token_id=eos)
    step, calls = engine.step, []

    def step_then_abort():
        calls.append(1)
        if len(calls) == 2:                          # another caller aborts request 1 meanwhile
            engine.abort(1)
        return step()
    monkeypatch.setattr(engine, "step", step_then_abort)
    with pytest.raises(RequestAborted, match=r"\[1\]"):
        engine.generate([prompts[3], prompts[7], prompts[9]], PARAMS)
    assert len(calls) == 2                           # returned at once: no spinning on the aborted request
    engine.check_no_leaks()
    monkeypatch.undo()
    assert engine.generate([prompts[3], prompts[7]], PARAMS) == [reference[3], reference[7]]


# -- threads --------------------------------------------------------------------------------------

def test_threads_share_one_engine(make_engine, prompts, reference, eos):
    engine = make_engine(eos_token_id=eos, cache="hashed", num_blocks=40, max_num_batched_tokens=64)
    groups = [[0, 3, 5], [7, 9, 11], [13, 15, 2]]
    results, errors = {}, []

    def work(g):
        try:
            results[g] = engine.generate([prompts[i] for i in groups[g]], PARAMS)
        except Exception as e:       # reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(g,)) for g in range(len(groups))]
    for t in threads:
        t.start()
    ids = [engine.add_request(prompts[1], PARAMS) for _ in range(3)]    # and requests added meanwhile
    for t in threads:
        t.join()
    assert not errors, errors
    assert {g: results[g] for g in range(len(groups))} == {g: [reference[i] for i in group]
                                                            for g, group in enumerate(groups)}
    finished = run_to_end(engine)
    assert all(s.output_token_ids == reference[1] for s in finished if s.request_id in ids)
    engine.check_no_leaks()


def test_abort_from_another_thread_wakes_generate(make_engine, prompts):
    engine = make_engine(cache="radix")
    started = threading.Event()
    step = engine.step

    def step_and_signal():
        started.set()
        return step()
    engine.step = step_and_signal
    errors = []

    def work():
        try:
            engine.generate([prompts[5]], SamplingParams(max_tokens=200, ignore_eos=True))
        except RequestAborted as e:
            errors.append(e)
    thread = threading.Thread(target=work)
    thread.start()
    started.wait()                  # generate has queued request 0 and is stepping
    assert engine.abort(0)
    thread.join()
    assert len(errors) == 1
    engine.check_no_leaks()


# -- Ctrl-C inside the bookkeeping ----------------------------------------------------------------

@pytest.mark.parametrize("cache", ["none", "hashed", "radix"])
def test_ctrl_c_during_the_commit_is_delivered_after_it(make_engine, prompts, reference, eos, cache):
    """SIGINT arriving while a step records its results (here: while the cache registers KV) waits
    until the step is complete, then interrupts: no request is left half updated."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("needs Python's default SIGINT handler")
    engine = make_engine(eos_token_id=eos, cache=cache)
    register = engine.cache.cache
    interrupted = []

    def register_with_ctrl_c(seq, n):
        if not interrupted:
            interrupted.append(seq)
            signal.raise_signal(signal.SIGINT)
        register(seq, n)
    engine.cache.cache = register_with_ctrl_c
    for i in (3, 7):
        engine.add_request(prompts[i], PARAMS)
    seqs = list(engine.scheduler.waiting)
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    assert all(len(s.output_token_ids) == 1 for s in seqs), "the step's tokens were recorded before the interrupt"
    run_to_end(engine)
    assert [s.output_token_ids for s in seqs] == [reference[3], reference[7]]
    engine.check_no_leaks()


# -- validation at the edge -----------------------------------------------------------------------

@pytest.mark.parametrize("cache", ["none", "hashed", "radix"])
@pytest.mark.parametrize("block_size", [0, -4, 2.5, True])
def test_block_size_is_checked_for_every_cache(tiny_model, cache, block_size):
    with pytest.raises(ValueError, match=r"block_size must be an integer >= 1"):
        LLMEngine(tiny_model, cache=cache, num_blocks=8, block_size=block_size)


@pytest.mark.parametrize("options, message", [
    ({"kv_dtype": torch.int8}, "kv_dtype must be None .* or a floating torch dtype"),
    ({"policy": None}, "not a policy None"),
    ({"policy": "lifo"}, "unknown policy 'lifo'"),
    ({"max_num_seqs": 0}, "max_num_seqs must be an integer >= 1"),
    ({"max_num_batched_tokens": 1.5}, "max_num_batched_tokens must be None or an integer >= 1"),
    ({"attention": "flash"}, "attention must be one of"),
    ({"step_log_size": -1}, "step_log_size must be None or an integer >= 0"),
    ({"cache": "lru"}, "cache must be None, one of"),
    ({"gpu_memory_utilization": 1.5}, r"gpu_memory_utilization must be None or a fraction in \(0, 1\]"),
])
def test_bad_engine_options_name_the_option(tiny_model, options, message):
    with pytest.raises(ValueError, match=message):
        LLMEngine(tiny_model, num_blocks=8, **options)


@pytest.mark.parametrize("kwargs, message", [
    ({"seed": 2**64}, r"seed must be None or an integer in \[0, 2\*\*64\)"),
    ({"seed": -1}, "seed"),
    ({"lora_id": [1]}, "lora_id must be hashable"),
    ({"cache_salt": {"tenant": 1}}, "cache_salt must be hashable"),
    ({"stop_token_ids": None}, r"stop_token_ids must be a list of token ids \(\(\) for none\)"),
    ({"stop_token_ids": [1.5]}, "stop_token_ids must be token ids"),
    ({"temperature": "hot"}, "temperature must be 0 .greedy. or a finite number >= 0.01"),
    ({"temperature": 1e-39}, "temperature must be 0"),
    ({"temperature": float("inf")}, "temperature must be 0"),
    ({"max_tokens": True}, "max_tokens must be an integer >= 1"),
])
def test_bad_sampling_params_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_bad_requests_change_nothing(make_engine, tiny_model, prompts, reference, eos):
    engine = make_engine(eos_token_id=eos, cache="radix", num_blocks=40)
    first = engine.add_request(prompts[3], PARAMS)
    before = (len(engine.scheduler.waiting), engine.cache.size_info())
    bad_calls = [
        (lambda: engine.generate(torch.tensor(prompts[3])), "prompts as a tensor must be 2-D"),
        (lambda: engine.add_request(torch.tensor([prompts[3], prompts[3]])), "a tensor prompt must be 1-D"),
        (lambda: engine.add_request(b"\x01\x02"), "not bools, floats or bytes"),
        (lambda: engine.add_request([True, 5]), "not bools, floats or bytes"),
        (lambda: engine.generate([prompts[3]], {"max_tokens": 3}), r"params must be a SamplingParams.*\*\*params"),
        (lambda: engine.add_request(prompts[3], {"max_tokens": 3}), r"params must be a SamplingParams"),
        (lambda: engine.generate(prompts[3]), "prompts must be a list of prompts"),
        (lambda: engine.generate([prompts[3], [1, 2.5]]), r"prompt 1\).*integers"),
    ]
    for call, message in bad_calls:
        with pytest.raises(ValueError, match=message):
            call()
        assert (len(engine.scheduler.waiting), engine.cache.size_info()) == before
    assert engine.add_request(prompts[7], PARAMS) == first + 1       # no request id was used up
    run_to_end(engine)
    two = torch.tensor([prompts[3][:10], prompts[7][:10]])            # a 2-D tensor: one prompt per row
    assert engine.generate(two, PARAMS) == [generate(tiny_model, row[None], MAX_TOKENS, eos)[0].tolist()
                                            for row in two]


def test_engine_config_object_and_keywords(tiny_model):
    config = EngineConfig(cache="radix", num_blocks=9, block_size=4)
    engine = LLMEngine(tiny_model, config=config)
    assert (engine.cache.name, engine.cache.num_blocks, engine.block_size) == ("radix", 9, 4)
    assert engine.pool is engine.cache.pool
    with pytest.raises(ValueError, match="not both"):
        LLMEngine(tiny_model, config=config, num_blocks=3)


# -- bounded growth -------------------------------------------------------------------------------

def test_step_log_keeps_the_last_steps_indexed_by_step_number(make_engine, prompts):
    engine = make_engine(step_log_size=4)
    engine.generate([prompts[1]], SamplingParams(max_tokens=3))
    n = len(engine.step_log)
    assert n == 3 and [s["num_tokens"] for s in engine.step_log] == [1, 1, 1]
    engine.generate([prompts[3]], SamplingParams(max_tokens=3))
    assert len(engine.step_log) == 6 and len(list(engine.step_log)) == 4
    assert sum(s["num_tokens"] for s in engine.step_log[n:]) == len(prompts[3]) + 2   # steps since n
    assert engine.step_log[-1] is list(engine.step_log)[-1]
    with pytest.raises(IndexError, match="keeps steps 2..5"):
        engine.step_log[0]
    assert len(list(make_engine(step_log_size=0).step_log)) == 0


def test_radix_namespaces_of_finished_tenants_are_dropped(make_engine, prompts):
    engine = make_engine(cache="radix", num_blocks=24, block_size=4)
    for salt in range(30):
        engine.generate([prompts[7][:30]], SamplingParams(max_tokens=2, cache_salt=f"tenant {salt}"))
        assert len(engine.cache.trees) <= 5, "empty per-tenant trees pile up"
    engine.check_no_leaks()


# -- structure ------------------------------------------------------------------------------------

def test_cuda_graph_runner_does_not_import_the_engine():
    tree = ast.parse(inspect.getsource(nano_engine.cuda_graph))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "nano_engine.engine" not in imported
