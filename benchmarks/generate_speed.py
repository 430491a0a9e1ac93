"""Time to first token and decode tokens/s of the plain reference loop, beside transformers.

Both run greedy decoding of one prompt with a KV cache on the same checkpoint, in the same process,
alternating, so machine noise hits both alike; the figure to read is the ratio column.

    python benchmarks/generate_speed.py                     # tiny checkpoint and full-size random 0.6B
    python benchmarks/generate_speed.py --model tiny --device cpu --prompt-len 128 --new-tokens 32
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import Qwen3ForCausalLM

from nano_engine.checkpoints import full_size_checkpoint, medium_checkpoint, tiny_checkpoint
from nano_engine.model import Transformer, generate


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_ours(model: Transformer, prompt: torch.Tensor, new_tokens: int) -> tuple[float, float]:
    """(time to first token, total time) of nano_engine.model.generate."""
    _sync(model.device)
    t0 = time.perf_counter()
    generate(model, prompt, 1)
    _sync(model.device)
    ttft = time.perf_counter() - t0
    t0 = time.perf_counter()
    generate(model, prompt, new_tokens)
    _sync(model.device)
    return ttft, time.perf_counter() - t0


def time_hf(model: Qwen3ForCausalLM, prompt: torch.Tensor, new_tokens: int) -> tuple[float, float]:
    kwargs = dict(do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt))
    device = prompt.device
    with torch.inference_mode():
        _sync(device)
        t0 = time.perf_counter()
        model.generate(prompt, max_new_tokens=1, **kwargs)
        _sync(device)
        ttft = time.perf_counter() - t0
        t0 = time.perf_counter()
        model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
        _sync(device)
        return ttft, time.perf_counter() - t0


def bench(name: str, path, device: str, dtype: torch.dtype, prompt_len: int, new_tokens: int, repeats: int):
    ours = Transformer.from_pretrained(path, device=device, dtype=dtype)
    hf = Qwen3ForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    prompt = torch.randint(0, ours.config.vocab_size, (1, prompt_len),
                           generator=torch.Generator().manual_seed(0)).to(device)
    same = generate(ours, prompt, new_tokens)[0].tolist() == \
        hf.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                    pad_token_id=0, attention_mask=torch.ones_like(prompt))[0, prompt_len:].tolist()
    runs = {"nano_engine": [], "transformers": []}
    time_ours(ours, prompt, 2), time_hf(hf, prompt, 2)            # warm-up
    for _ in range(repeats):                                      # alternate: noise hits both
        runs["nano_engine"].append(time_ours(ours, prompt, new_tokens))
        runs["transformers"].append(time_hf(hf, prompt, new_tokens))
    rows = {}
    for who, r in runs.items():
        ttft = statistics.median(t for t, _ in r)
        total = statistics.median(t for _, t in r)
        rows[who] = (ttft, (new_tokens - 1) / max(total - ttft, 1e-9))
    print(f"\n{name}: {device}, {str(dtype).removeprefix('torch.')}, prompt {prompt_len} tokens, "
          f"{new_tokens} new tokens, median of {repeats}; greedy tokens identical: {same}")
    print(f"{'':14s}{'TTFT ms':>10s}{'decode tok/s':>14s}")
    for who, (ttft, tps) in rows.items():
        print(f"{who:14s}{ttft * 1e3:10.1f}{tps:14.1f}")
    (a_ttft, a_tps), (b_ttft, b_tps) = rows["nano_engine"], rows["transformers"]
    print(f"{'ratio ours/hf':14s}{a_ttft / b_ttft:10.2f}{a_tps / b_tps:14.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["tiny", "medium", "full", "both"], default="both")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                   help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if args.device == "cuda" else torch.float32)
    if args.model in ("tiny", "both"):
        bench("tiny checkpoint", tiny_checkpoint(), args.device, dtype, args.prompt_len, args.new_tokens, args.repeats)
    if args.model == "medium":
        bench("medium checkpoint", medium_checkpoint(), args.device, dtype, args.prompt_len, args.new_tokens, args.repeats)
    if args.model in ("full", "both"):
        bench("full-size random Qwen3-0.6B", full_size_checkpoint(), args.device, dtype,
              args.prompt_len, args.new_tokens, args.repeats)


if __name__ == "__main__":
    main()
