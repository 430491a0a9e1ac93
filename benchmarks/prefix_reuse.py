"""The chapter's reuse experiment with caching off and on, side by side in one run.

Six chat prompts share a long system prompt. The first runs alone, then the other five together,
on one engine; we report the tokens the five computed, their wall time and their median time to
first token (the figure a user feels), for each cache manager, as ratios against no cache
measured in the same run, plus whether every output is identical to the reference ``generate``.
Each manager runs ``--repeats`` times in turn and keeps its fastest run, so that a second of
someone else's work on a shared machine does not decide the comparison.

    python benchmarks/prefix_reuse.py --model medium    # the timing model: prefill dominates (seconds)
    python benchmarks/prefix_reuse.py                   # default model (tiny: prefill is too cheap to show)
    python benchmarks/prefix_reuse.py --model full      # full-size random Qwen3-0.6B (slower)
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoTokenizer

from nano_engine.checkpoints import PRESETS, resolve_model, tokenizer_path
from nano_engine.model import Transformer, generate
from nano_engine.prompts import chat_prompts
from nano_engine.timing import compare_reuse, ratio_sentence


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default", help=f"'default', a preset {sorted(PRESETS)} or a model folder")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2, help="runs per cache manager; the fastest is kept")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for the timed runs (default 1: steadier on a shared machine; "
                        "see nano_engine.timing.compare_reuse)")
    args = p.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    path = resolve_model(args.model)
    model = Transformer.from_pretrained(path, device=args.device)
    tok = AutoTokenizer.from_pretrained(path if (path / "tokenizer.json").exists() else tokenizer_path())
    prompts = chat_prompts(tok)
    with torch.inference_mode():
        reference = [generate(model, torch.tensor([q], device=args.device), args.max_tokens,
                              eos_token_id=tok.eos_token_id)[0].tolist() for q in prompts]
        rows = compare_reuse(model, tok.eos_token_id, prompts, repeats=args.repeats, max_tokens=args.max_tokens,
                             threads=None)
    print(f"model {path.name} on {args.device} ({args.threads} thread(s)); prompt lengths "
          f"{[len(q) for q in prompts]}; {args.max_tokens} new tokens each; best of {args.repeats}")
    base = rows["none"]
    print(f"{'cache':8s}{'computed':>10s}{'cached':>8s}{'x off':>7s}{'wall s':>8s}{'x off':>7s}"
          f"{'TTFT ms':>9s}{'x off':>7s}  identical to reference")
    for cache, r in rows.items():
        print(f"{cache:8s}{r.computed_tokens:10d}{r.cached_tokens:8d}{r.computed_tokens / base.computed_tokens:7.2f}"
              f"{r.seconds:8.2f}{r.seconds / base.seconds:7.2f}{r.median_ttft * 1e3:9.1f}"
              f"{r.median_ttft / base.median_ttft:7.2f}  {r.outputs == reference}")
    hashed = rows["hashed"]
    print("hashed: " + ratio_sentence("wall time", hashed.seconds / base.seconds))
    print("hashed: " + ratio_sentence("median time to first token", hashed.median_ttft / base.median_ttft))
    print(f"total {time.perf_counter() - start:.0f} s (model load, reference and all runs)")


if __name__ == "__main__":
    main()
