"""Multi-turn chat with a host tier off and on: hit rate and median time to first token per round.

The shape of SGLang's ``benchmark/hicache/bench_multiturn.py``, on this package's real engine
(``LLMEngine``): ``--clients`` conversations share a system prompt; in every round each client sends
its whole conversation so far plus a new user turn, and the answer joins the conversation. The
clients take turns, so by the time a client comes back, the others have pushed its conversation
out of a device pool smaller than the working set. With a host tier under the cache
(``host_kv_tokens``, write-through) the evicted conversation is one tier down and is loaded back
instead of recomputed.

Each configuration runs on its own engine over the same model; the engines take turns request by
request (client c of round r runs on every engine before client c+1 starts), so a burst of
someone else's work on a shared machine hits every configuration alike. Ratios are against the
same cache without a tier, measured in the same run. Outputs must be identical with the tier on
and off (greedy decoding); the script checks it and says so.

Two times per request, one CPU thread: the engine's own ``time_to_first_token`` (wall clock: on a
shared machine inflated and noisy) and the CPU time of the whole request (``time.process_time``
around ``generate``: its prefill plus the few decode steps of the answer; fairer under load). On CPU
"device" and "host" are the same RAM and every copy is synchronous, so the saving is the prefill
the tier avoids, not a transfer overlapped with compute. The model is the random ``medium``
preset: random weights change nothing about what is cached, evicted or loaded.

    python benchmarks/multiturn_tier.py                         # radix and hashed, tier off and on
    python benchmarks/multiturn_tier.py --caches radix --clients 8 --rounds 5
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from nano_engine.checkpoints import PRESETS, resolve_model
from nano_engine.engine import LLMEngine
from nano_engine.model import Transformer
from nano_engine.sampling import SamplingParams


@dataclass
class Config:
    name: str
    cache: str
    host_tokens: int | None
    engine: LLMEngine | None = None
    prompt_tokens: list[int] = field(default_factory=list)     # per round
    cached_tokens: list[int] = field(default_factory=list)
    host_tokens_hit: list[int] = field(default_factory=list)
    ttft: list[list[float]] = field(default_factory=list)
    cpu: list[list[float]] = field(default_factory=list)        # CPU seconds of each request


def host_hits(engine: LLMEngine) -> int:
    stats = getattr(engine.cache, "tier_stats", None)
    return int(stats()["host_hit_tokens"]) if stats is not None else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="medium", help=f"'default', a preset {sorted(PRESETS)} or a model folder")
    p.add_argument("--device", default="cpu")
    p.add_argument("--caches", nargs="+", default=["radix", "hashed"], choices=["radix", "hashed"])
    p.add_argument("--clients", type=int, default=5)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--system-len", type=int, default=64, help="tokens of the system prompt all clients share")
    p.add_argument("--first-len", type=int, default=192, help="each client's first user turn, in tokens")
    p.add_argument("--turn-len", type=int, default=64, help="each later user turn, in tokens")
    p.add_argument("--max-tokens", type=int, default=4, help="answer length (greedy, joins the conversation)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-blocks", type=int, default=32, help="the device pool, in blocks")
    p.add_argument("--host-tokens", type=int, default=8192, help="the host tier when on")
    p.add_argument("--write-policy", default="write_through")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    path = resolve_model(args.model)
    model = Transformer.from_pretrained(path, device=args.device)
    rng = random.Random(args.seed)
    vocab = (1000, min(model.config.vocab_size, 50_000))

    def tokens(n: int) -> list[int]:
        return [rng.randrange(*vocab) for _ in range(n)]

    system = tokens(args.system_len)
    conversations = [system + tokens(args.first_len) for _ in range(args.clients)]
    turns = [[tokens(args.turn_len) for _ in range(args.clients)] for _ in range(args.rounds)]
    longest = args.system_len + args.first_len + (args.rounds - 1) * args.turn_len + args.rounds * args.max_tokens
    device_tokens = args.num_blocks * args.block_size
    working_set = args.clients * longest
    if longest + args.block_size > device_tokens:
        raise SystemExit(f"a conversation grows to {longest} tokens: give the device pool more than that "
                         f"(--num-blocks > {longest // args.block_size + 1})")

    configs = []
    for cache in args.caches:
        configs.append(Config(f"{cache}", cache, None))
        configs.append(Config(f"{cache} + host", cache, args.host_tokens))
    for c in configs:
        options: dict = dict(cache=c.cache, num_blocks=args.num_blocks, block_size=args.block_size, max_num_seqs=1)
        if c.host_tokens:
            options.update(host_kv_tokens=c.host_tokens, write_policy=args.write_policy)
        c.engine = LLMEngine(model, **options)
    params = SamplingParams(max_tokens=args.max_tokens)

    identical = True
    bar = tqdm(total=args.rounds * args.clients * len(configs), desc="multi-turn", unit="req")
    with torch.inference_mode():
        for r in range(args.rounds):
            for c in configs:
                c.prompt_tokens.append(0)
                c.cached_tokens.append(0)
                c.host_tokens_hit.append(0)
                c.ttft.append([])
                c.cpu.append([])
            for i in range(args.clients):
                prompt = conversations[i] + (turns[r][i] if r else [])
                answers = []
                for c in configs:
                    assert c.engine is not None
                    before = host_hits(c.engine)
                    cpu = time.process_time()
                    outs, metrics = c.engine.generate([prompt], params, return_metrics=True)
                    c.cpu[r].append(time.process_time() - cpu)
                    answers.append(outs[0])
                    c.prompt_tokens[r] += len(prompt)
                    c.cached_tokens[r] += metrics[0].num_cached_tokens
                    c.host_tokens_hit[r] += host_hits(c.engine) - before
                    c.ttft[r].append(metrics[0].time_to_first_token)
                    bar.update()
                identical &= all(a == answers[0] for a in answers)
                conversations[i] = prompt + answers[0]
    bar.close()
    for c in configs:
        assert c.engine is not None
        c.engine.check_no_leaks()

    print(f"model {path.name} (random weights) on {args.device}, {args.threads} thread(s); {args.clients} clients x "
          f"{args.rounds} rounds, one request at a time, engines taking turns")
    print(f"device pool {device_tokens} tokens ({args.num_blocks} x {args.block_size}); working set at the last "
          f"round {working_set} tokens ({working_set / device_tokens:.1f}x the pool); host tier "
          f"{args.host_tokens} tokens, {args.write_policy}")
    print(f"prompts: system {args.system_len} (shared) + first turn {args.first_len}, then +{args.turn_len} "
          f"per round + the {args.max_tokens}-token answer; outputs identical with the tier on and off: {identical}")
    head = f"{'round':>5s}  " + "".join(f"{c.name:>26s}" for c in configs)
    print("\nhit rate per round (from host in brackets)")
    print(head)
    for r in range(args.rounds):
        cells = [f"{c.cached_tokens[r] / c.prompt_tokens[r]:.1%} ({c.host_tokens_hit[r] / c.prompt_tokens[r]:.1%})"
                 for c in configs]
        print(f"{r + 1:5d}  " + "".join(f"{x:>26s}" for x in cells))
    for title, series in (("median time to first token per round, wall ms", "ttft"),
                          ("median CPU time per request per round (prefill + the answer's decode steps), ms", "cpu")):
        print(f"\n{title} (x: against the same cache without a tier)")
        print(head)
        for r in range(args.rounds):
            cells = []
            for k, c in enumerate(configs):
                med = statistics.median(getattr(c, series)[r])
                base = statistics.median(getattr(configs[k - k % 2], series)[r])
                cells.append(f"{med * 1e3:.0f}" + (f" ({med / base:.2f}x)" if k % 2 else ""))
            print(f"{r + 1:5d}  " + "".join(f"{x:>26s}" for x in cells))
    for c in configs:
        assert c.engine is not None
        stats = getattr(c.engine.cache, "tier_stats", None)
        if stats is not None:
            s = stats()
            print(f"{c.name}: {s['bytes_written'] / 2**20:.1f} MiB written to the host, "
                  f"{s['bytes_loaded'] / 2**20:.1f} MiB loaded back")
    print(f"total {time.perf_counter() - start:.0f} s wall (model load and all runs)")
    if not identical:
        raise SystemExit("outputs differ with the tier on and off")


if __name__ == "__main__":
    main()
