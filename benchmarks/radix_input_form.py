"""Where insert's remaining gap to SGLang's tree goes: the form the key arrives in.

``peer_bench_sglang.py`` hands each tree a request in the form its own engine does: SGLang's an
``array('q')`` (8 bytes a token), ours a Python list of fresh ints, as ``Sequence.token_ids`` (a
pointer and a 32-byte int object a token). Every token of an inserted request is read once, to be
compared or stored, so reading the list is a floor of our insert that SGLang's does not have.

This script loads that tool by path and replays its Mooncake workload (the conversation trace's
first requests, unlimited capacity, pages of 1 and 16) three ways, in one process, alternating:
SGLang's tree; ours fed lists (as the tool does); ours fed ``array('Q')`` keys (SGLang's form,
``array('q')``, unsigned: the typecode our tree stores).
It also times ``array.fromlist`` alone over the same lists: the price of reading them once.
Printed: µs per call of match and insert (median of ``--reps`` passes, gc off), and ours ÷ SGLang.

    SGLANG_SRC=<unpacked sglang 0.5.23 wheel> python benchmarks/radix_input_form.py \
        [--tool ../shared/tools/peer_bench_sglang.py] [--requests 2000] [--reps 3]
"""

import argparse
import gc
import importlib.util
import os
import statistics
import sys
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_tool(path: str):  # type: ignore[no-untyped-def]
    """The side-by-side tool as a module (it loads SGLang's files from SGLANG_SRC on import)."""
    if not Path(path).is_file():
        sys.exit(f"{path}: no such file (pass --tool, the path of peer_bench_sglang.py)")
    os.environ.setdefault("NANO_ENGINE_CHECKOUT", str(ROOT))
    spec = importlib.util.spec_from_file_location("peer_bench_sglang", path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    sys.modules["peer_bench_sglang"] = tool
    spec.loader.exec_module(tool)
    return tool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", default=str(ROOT.parent / "shared" / "tools" / "peer_bench_sglang.py"))
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if args.requests < 1 or args.reps < 1:
        sys.exit("--requests and --reps must be >= 1")
    tool = load_tool(args.tool)
    wl = tool.wl_mooncake(args.requests)
    as_lists = wl.nano_p
    as_arrays = [array("Q", p.astype("uint64").tobytes()) for p in wl.prompts]
    print(f"load average at start: {open('/proc/loadavg').read().split()[0]}; {wl.n} Mooncake requests, "
          f"{wl.total_tokens / wl.n:,.0f} tokens each on average")

    def fromlist_us() -> float:
        gc.disable()
        t = time.perf_counter()
        for tokens in as_lists:
            array("Q").fromlist(tokens)
        gc.enable()
        return (time.perf_counter() - t) / wl.n * 1e6

    print(f"{'page':>4}  {'side':<22} {'match µs':>9} {'insert µs':>10} {'match ÷ SGLang':>15} {'insert ÷ SGLang':>16}")
    for page in (1, 16):
        runs: dict[str, list[dict]] = {"sglang": [], "lists": [], "arrays": []}
        conversion = []
        for rep in range(args.reps):
            order = ["sglang", "lists", "arrays"] if rep % 2 == 0 else ["arrays", "lists", "sglang"]
            for side in order:
                wl.nano_p = wl.nano_f = as_arrays if side == "arrays" else as_lists
                result, _ = tool.run_pass("sglang" if side == "sglang" else "nano", wl, page, 10 ** 8 // page)
                runs[side].append(result)
                gc.collect()
            conversion.append(fromlist_us())
        med = {side: {op: statistics.median(r[op] for r in rs) * 1e6 for op in ("match", "insert")}
               for side, rs in runs.items()}
        for side, label in (("sglang", "SGLang (array('q'))"), ("lists", "ours, lists (the tool)"),
                            ("arrays", "ours, array('Q') keys")):
            m, i = med[side]["match"], med[side]["insert"]
            ratio = "" if side == "sglang" else f"{m / med['sglang']['match']:>15.2f} {i / med['sglang']['insert']:>16.2f}"
            print(f"{page:>4}  {label:<22} {m:>9.1f} {i:>10.1f} {ratio}")
        print(f"{page:>4}  {'array.fromlist alone':<22} {'':>9} {statistics.median(conversion):>10.1f}"
              f"   (reading each list once)")
    wl.nano_p = wl.nano_f = as_lists


if __name__ == "__main__":
    main()
