"""Real engines behind the router: two LLMEngine processes publishing KV events, one index.

The outputs are checked against one engine in this process (routing must never change greedy
tokens); where each prompt went against what the router could know (the engine that computed a
prefix holds it); the index against each engine's real cache; and after the run, no child process,
socket or socket folder may be left.
"""

import multiprocessing
import os

import pytest

from nano_engine.checkpoints import resolve_model
from nano_engine.engine import LLMEngine, SamplingParams
from nano_engine.engine_cluster import EngineCluster, EngineClusterConfig
from nano_engine.model import Transformer

SYSTEM = list(range(100, 164))          # 4 full blocks of 16 tokens shared by the first four prompts
PROMPTS = [SYSTEM + [300 + i, 301 + i, 302 + i] for i in range(4)] + [list(range(500, 560)) + [7]]


def test_two_engine_processes_route_by_events_and_answer_as_one_engine():
    assert not multiprocessing.active_children()
    config = EngineClusterConfig(instances=2, router="dynamo", model="tiny", capacity_tokens=1024, timeout_s=120.0)
    with EngineCluster(config) as cluster:
        folder = cluster._dir
        served = cluster.serve_all(PROMPTS, max_tokens=4)
        accuracy = cluster.index_accuracy()
        counters = cluster.counters()
    assert not multiprocessing.active_children() and not os.path.exists(folder)

    model = Transformer.from_pretrained(resolve_model("tiny"))
    engine = LLMEngine(model, cache="vllm", num_blocks=64, block_size=16)
    expected = [engine.generate([p], SamplingParams(max_tokens=4))[0] for p in PROMPTS]
    assert [s.output_token_ids for s in served] == expected

    first = served[0]
    assert first.cached_tokens == 0
    for s in served[1:4]:               # the shared prefix lives where the first prompt went
        assert (s.engine, s.cached_tokens) == (first.engine, len(SYSTEM))
    assert served[4].cached_tokens == 0
    assert accuracy == [1.0, 1.0] and counters["gaps_detected"] == 0


def test_engine_cluster_refuses_bad_config():
    with pytest.raises(ValueError, match="multiple of block_size"):
        EngineClusterConfig(capacity_tokens=1000)
    with pytest.raises(ValueError, match="block_size"):
        EngineClusterConfig(block_size=0)
