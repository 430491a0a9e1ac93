"""Mooncake's traces through the real caches, checked against brute-force counts made from the ids."""

import gzip
import json
from collections import OrderedDict

import pytest

from nano_engine.__main__ import main
from nano_engine.traces import (
    TOKENS_PER_ID,
    Trace,
    TraceError,
    format_results,
    load_trace,
    parse_tokens,
    replay_trace,
    request_tokens,
    serve_request,
    trace_replay,
)

SLICE = 300


@pytest.fixture(scope="module", params=["conversation", "synthetic"])
def trace(request) -> Trace:
    return load_trace(request.param)[:SLICE]


def common_ids(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def brute_force_unlimited(trace: Trace, block_size: int) -> int:
    """Hit tokens of an unlimited cache, from the ids alone: each request against every earlier one.

    At 512 a request hits ``min(512 k, input_length)``, k its longest run of leading ids seen before.
    With tokens, an earlier request R cached its full blocks, so it serves the common tokens
    ``min(512 k, len R, len)`` (no match goes into a differing id) rounded down to blocks, and the
    engine serves at most ``len - 1`` tokens, in whole blocks.
    """
    total = 0
    for i, r in enumerate(trace.requests):
        earlier = trace.requests[:i]
        if block_size == TOKENS_PER_ID:
            k = max((common_ids(r.hash_ids, e.hash_ids) for e in earlier), default=0)
            total += min(TOKENS_PER_ID * k, r.input_length)
        else:
            common = max((min(TOKENS_PER_ID * common_ids(r.hash_ids, e.hash_ids), e.input_length, r.input_length)
                          for e in earlier), default=0)
            total += min(common // block_size, (r.input_length - 1) // block_size) * block_size
    return total


def brute_force_lru_blocks(trace: Trace, capacity_blocks: int) -> int:
    """The chapter's pool at 512, as a plain LRU of id-prefixes: hits leave the LRU while in use,
    misses take never-used blocks first, then evict the oldest; the request's blocks return
    last block first (so a prefix's first block is the newest)."""
    lru: OrderedDict[tuple[int, ...], None] = OrderedDict()
    total = 0
    for r in trace.requests:
        if len(r.hash_ids) > capacity_blocks:    # larger than the whole cache: rejected
            continue
        prefixes = [r.hash_ids[:j + 1] for j in range(len(r.hash_ids))]
        k = 0
        while k < len(prefixes) and prefixes[k] in lru:
            k += 1
        for p in prefixes[:k]:
            del lru[p]
        need = len(prefixes) - k
        never_used = capacity_blocks - k - len(lru)
        for _ in range(max(0, need - never_used)):
            lru.popitem(last=False)
        for p in reversed(prefixes):
            lru[p] = None
        total += min(TOKENS_PER_ID * k, r.input_length)
    return total


# ----------------------------------------------------------------------------- loading


def test_shipped_traces_load_with_the_readme_figures():
    conversation, synthetic = load_trace("conversation"), load_trace("synthetic")
    assert (len(conversation), len(synthetic)) == (12031, 3993)
    assert round(conversation.input_tokens / len(conversation)) == 12035
    assert round(synthetic.input_tokens / len(synthetic)) == 15325
    assert conversation.requests[0].hash_ids[:1] == (0,)
    assert conversation[:10].name == "conversation" and len(conversation[:10]) == 10


def write_lines(path, lines, compress=True):
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


GOOD = json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]})


@pytest.mark.parametrize("bad_line, fragment", [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5}), "no 'hash_ids'"),
    (json.dumps({"timestamp": 0, "input_length": -3, "output_length": 5, "hash_ids": []}), "input_length must be an integer in 0..2"),
    (json.dumps({"timestamp": 0, "input_length": 600, "output_length": -1, "hash_ids": [1, 2]}), "output_length"),
    (json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, "x"]}), "hash_ids must be"),
    (json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]}), "expected 2"),
    (json.dumps({"timestamp": "soon", "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}), "timestamp"),
])
def test_a_bad_line_is_named_by_file_and_line(tmp_path, bad_line, fragment):
    path = write_lines(tmp_path / "bad.jsonl.gz", [GOOD, GOOD, bad_line, GOOD])
    with pytest.raises(TraceError, match=fragment) as error:
        load_trace(path)
    assert f"{path}: line 3:" in str(error.value)


HOSTILE = {
    "a 400-digit timestamp": ('{"timestamp": 1' + "0" * 399 + ', "input_length": 600, "output_length": 5, '
                              '"hash_ids": [1, 2]}', "timestamp must be a finite number"),
    "a 5,000-digit integer": ('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2' + "0" * 5000
                              + ']}', "not JSON this package reads"),
    "hash_ids nested 100,000 deep": ('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": '
                                     + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    "a hash id of 2**64": (json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2**64]}),
                           "hash_ids must be a list of integers in 0..2**64-1"),
    "a 400-digit output_length": ('{"timestamp": 0, "input_length": 600, "output_length": 1' + "0" * 399
                                  + ', "hash_ids": [1, 2]}', "output_length must be an integer in 0..2**31-1"),
}


@pytest.mark.parametrize("cause", HOSTILE)
def test_a_hostile_line_is_refused_by_file_and_line(tmp_path, cause):
    """Issue 38: each used to raise OverflowError, a bare ValueError, RecursionError, or was
    accepted and crashed --block-size 16 later."""
    bad_line, fragment = HOSTILE[cause]
    path = write_lines(tmp_path / "hostile.jsonl", [GOOD, bad_line], compress=False)
    with pytest.raises(TraceError, match=fragment.replace("*", r"\*")) as error:
        load_trace(path)
    message = str(error.value)
    assert message.startswith(f"{path}: line 2:"), f"the message must name the file and line: {message[:200]}"
    assert len(message) < 300, f"one short line, not the line's content: {len(message)} characters"


@pytest.mark.parametrize("cause", HOSTILE)
def test_hitrate_refuses_a_hostile_trace_in_one_line(tmp_path, capsys, cause):
    path = write_lines(tmp_path / "hostile.jsonl", [GOOD, HOSTILE[cause][0]], compress=False)
    assert main(["hitrate", "--trace", str(path), "--cache", "hashed", "--block-size", "16"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured.err[:300]
    assert f"{path}: line 2:" in captured.err


def test_hitrate_capacity_beyond_2_to_53_tokens_is_refused(capsys):
    assert main(["hitrate", "--trace", "conversation", "--cache", "hashed", "--capacity", "1e30"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--capacity 1e30" in err and "inf" in err


def test_hitrate_capacity_1e12_runs_in_bounded_memory():
    """In a child limited to 6 GiB of address space (room for torch's libraries): the old replay
    asked for a pool of 2 billion blocks (MemoryError, or tens of GB where it fits)."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    result = subprocess.run([sys.executable, "-m", "nano_engine", "hitrate", "--trace", "conversation", "--requests",
                             "50", "--cache", "hashed", "--capacity", "1e12", "--json"],
                            capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert result.returncode == 0, result.stderr[-500:]
    assert json.loads(result.stdout.splitlines()[-1])["capacity_tokens"] == 10**12


def test_plain_jsonl_and_blank_lines(tmp_path):
    path = write_lines(tmp_path / "mine.jsonl", [GOOD, "", GOOD], compress=False)
    trace = load_trace(path)
    assert trace.name == "mine" and len(trace) == 2 and trace.requests[0].hash_ids == (1, 2)


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_trace(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match="conversation, synthetic"):
        load_trace("conversations")
    with pytest.raises(TraceError, match="no request"):
        load_trace(write_lines(tmp_path / "empty.jsonl.gz", []))


def test_a_cut_short_gzip_is_an_error_not_a_shorter_trace(tmp_path):
    data = (load_trace.__globals__["trace_path"]("synthetic")).read_bytes()
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(TraceError, match="cut short or corrupt") as error:
        load_trace(path)
    assert str(path) in str(error.value) and "line" in str(error.value)


# ----------------------------------------------------------------------------- ids -> tokens


def test_tokens_agree_exactly_as_far_as_the_ids_do(trace):
    reqs = trace.requests[:60]
    tokens = [request_tokens(r, 16) for r in reqs]
    for r, t in zip(reqs, tokens):
        assert len(t) == r.input_length and all(0 <= x < 256 for x in t[:1000])
        assert request_tokens(r) == list(r.hash_ids)
    for i in range(len(reqs)):
        for j in range(i):
            a, b = reqs[i], reqs[j]
            k = common_ids(a.hash_ids, b.hash_ids)
            same = min(TOKENS_PER_ID * k, a.input_length, b.input_length)
            common = next((n for n, (x, y) in enumerate(zip(tokens[i], tokens[j])) if x != y),
                          min(len(tokens[i]), len(tokens[j])))
            assert same <= common < same + 8      # never a whole 8-token group into a different id


def test_block_size_must_divide_512(trace):
    with pytest.raises(ValueError, match="divide 512"):
        request_tokens(trace.requests[0], 24)


# ----------------------------------------------------------------------------- replay


@pytest.mark.parametrize("block_size", [512, 16])
@pytest.mark.parametrize("cache", ["hashed", "vllm", "radix"])
def test_unlimited_replay_equals_the_brute_force_count(trace, cache, block_size):
    replay = trace_replay(trace, cache, None, block_size=block_size)
    for r in trace:
        serve_request(replay, r)
    replay.check_no_leaks()
    result = replay.result(trace.name)
    assert result.hit_tokens == brute_force_unlimited(trace, block_size)
    assert (result.requests, result.rejected, result.input_tokens) == (len(trace), 0, trace.input_tokens)


@pytest.mark.parametrize("capacity", [64 * TOKENS_PER_ID, 400 * TOKENS_PER_ID, 1000 * TOKENS_PER_ID])
def test_bounded_pool_equals_a_brute_force_lru_and_vllm_mode_agrees(trace, capacity):
    """At 512 every block is full and cached, so vLLM's free order (hash-less blocks first) never
    applies and no duplicate is ever cached: vLLM mode must give the chapter's pool's hits."""
    expected = brute_force_lru_blocks(trace, capacity // TOKENS_PER_ID)
    for cache in ("hashed", "vllm"):
        replay = trace_replay(trace, cache, capacity)
        for r in trace:
            serve_request(replay, r)
            if replay.requests % 50 == 0:
                replay.check_no_leaks()
        replay.check_no_leaks()
        assert replay.hit_tokens == expected, cache


@pytest.mark.parametrize("cache", ["hashed", "vllm", "radix"])
@pytest.mark.parametrize("block_size", [512, 16])
def test_bounded_replays_stay_consistent_and_within_capacity(trace, cache, block_size):
    capacity = 200_000
    replay = trace_replay(trace[:120], cache, capacity, block_size=block_size)
    unlimited = replay_trace(trace[:120], cache, None, block_size=block_size)
    for i, r in enumerate(trace.requests[:120]):
        serve_request(replay, r)
        if i % 10 == 0:
            replay.check_no_leaks()
    replay.check_no_leaks()
    assert 0 < replay.hit_tokens <= unlimited.hit_tokens


@pytest.mark.parametrize("cache", ["hashed", "radix"])
def test_a_request_larger_than_the_cache_is_rejected_and_changes_nothing(trace, cache):
    capacity = 8 * TOKENS_PER_ID
    replay = trace_replay(None, cache, capacity)
    too_big = [r for r in trace if len(r.hash_ids) > 8]
    assert too_big
    for r in trace:
        before = replay.hit_tokens
        assert (serve_request(replay, r) is None) == (r in too_big)
        if r in too_big:
            assert replay.hit_tokens == before
    replay.check_no_leaks()
    assert replay.rejected == len(too_big) and replay.requests == len(trace)


def test_token_level_replay_is_close_to_the_512_one(trace):
    for cache in ("hashed", "radix"):
        coarse = replay_trace(trace, cache, 1_000_000).hit_rate
        fine = replay_trace(trace, cache, 1_000_000, block_size=16).hit_rate
        assert abs(coarse - fine) < 0.01, (cache, coarse, fine)


def test_bad_replay_arguments():
    with pytest.raises(ValueError, match="cache must be"):
        trace_replay(None, "lru", None)
    with pytest.raises(ValueError, match="holds no block"):
        trace_replay(None, "hashed", 100)
    with pytest.raises(ValueError, match="sized from the trace"):
        trace_replay(None, "hashed", None)


def test_a_capacity_beyond_the_trace_builds_only_what_the_trace_can_fill(trace):
    """``hitrate --capacity 1e12``: a pool larger than everything the trace holds never evicts, so
    it is built no larger than that (not 2 billion blocks) and replays as the unlimited one."""
    sub = trace[:40]
    needed = sub.unique_ids * (TOKENS_PER_ID // 16) + len(sub)
    for block_size in (TOKENS_PER_ID, 16):
        huge = trace_replay(sub, "hashed", 10**12, block_size=block_size)
        blocks = huge.side.pool.num_blocks
        assert blocks <= needed, f"{blocks} blocks built for a trace that fills at most {needed}"
        for r in sub:
            serve_request(huge, r)
        assert huge.result().hit_tokens == replay_trace(sub, "hashed", None, block_size=block_size).hit_tokens


def test_old_names_still_work_with_a_warning(trace):
    import nano_engine.traces as traces_module

    with pytest.warns(DeprecationWarning, match="moved to nano_engine.replay"):
        old = traces_module.TraceReplay("hashed", 10**6)
    for r in trace[:30]:
        old.serve(r)
    assert old.result(trace.name).hit_tokens == replay_trace(trace[:30], "hashed", 10**6).hit_tokens
    with pytest.warns(DeprecationWarning, match="moved to nano_engine.replay"):
        from nano_engine.replay import ReplayResult
        assert traces_module.ReplayResult is ReplayResult


# ----------------------------------------------------------------------------- command line


@pytest.mark.parametrize("text, value", [("4096", 4096), ("1e6", 1_000_000), ("2.5e6", 2_500_000), ("inf", None)])
def test_parse_tokens(text, value):
    assert parse_tokens(text) == value


def test_hitrate_json_matches_the_library(capsys):
    argv = ["hitrate", "--trace", "synthetic", "--requests", "200", "--cache", "hashed", "radix",
            "--capacity", "1e6", "inf", "--json"]
    assert main(argv) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    trace = load_trace("synthetic")[:200]
    expected = [replay_trace(trace, c, cap).as_dict() for c in ("hashed", "radix") for cap in (1_000_000, None)]
    assert records == expected
    for record in records:
        assert {"capacity_tokens", "hit_rate", "hit_tokens", "input_tokens", "requests", "rejected"} <= record.keys()


def test_hitrate_table_and_plot(capsys, tmp_path):
    figure = tmp_path / "curve.png"
    argv = ["hitrate", "--trace", "conversation", "--requests", "100", "--capacity", "1e6", "inf",
            "--plot", str(figure)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    trace = load_trace("conversation")[:100]
    table = format_results([replay_trace(trace, c, cap) for c in ("hashed", "radix") for cap in (1_000_000, None)])
    assert table in out and "unlimited" in out
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, fragments", [
    (["--json"], ["--json", "--trace"]),
    (["--capacity", "inf"], ["inf", "--trace"]),
    (["--trace", "synthetic", "--capacity", "1e6", "lots"], ["--capacity lots"]),
    (["--trace", "synthetic", "--block-size", "24"], ["divide 512"]),
    (["--trace", "synthetic", "--capacity", "100"], ["--capacity 100", "no block"]),
    (["--trace", "/nonexistent/t.jsonl"], ["/nonexistent/t.jsonl"]),
    (["--trace", "synthetic", "--requests", "0"], ["--requests"]),
    (["--trace", "synthetic", "--host-capacity", "1e30", "--capacity", "1e6"], ["--host-capacity 1e30"]),
])
def test_hitrate_trace_refuses_bad_values_in_one_line(capsys, argv, fragments):
    assert main(["hitrate", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    for fragment in fragments:
        assert fragment in captured.err
