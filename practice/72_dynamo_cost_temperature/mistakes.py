"""Classic mistakes of exercise 72, each an edit of solution.py (`judge.py mistakes 72` shows them as diffs)."""

MISTAKES = [
    {"name": "softmax_of_raw_costs",
     "explain": "softmaxes exp(-cost / T) without normalising by the spread, so T means something else for every request",
     "old": "    weights = [math.exp(-(c - lo) / ((hi - lo) * temperature)) for c in costs]\n",
     "new": "    weights = [math.exp(-c / temperature) for c in costs]\n"},
    {"name": "costs_not_negated",
     "explain": "softmaxes the costs themselves, so the dearest worker is the most likely",
     "old": "    weights = [math.exp(-(c - lo) / ((hi - lo) * temperature)) for c in costs]\n",
     "new": "    weights = [math.exp((c - lo) / ((hi - lo) * temperature)) for c in costs]\n"},
    {"name": "normalised_by_the_max",
     "explain": "divides the costs by the largest one instead of the spread, so close costs stay nearly uniform",
     "old": "    weights = [math.exp(-(c - lo) / ((hi - lo) * temperature)) for c in costs]\n",
     "new": "    weights = [math.exp(-(c / hi) / temperature) for c in costs]\n"},
    {"name": "scale_on_decode",
     "explain": "multiplies the decode blocks by prefill_load_scale instead of the prefill blocks (the old "
                "overlap_score_weight read as a decode weight)",
     "old": "    return prefill_load_scale * prefill_blocks + worker.decode_blocks\n",
     "new": "    return prefill_blocks + prefill_load_scale * worker.decode_blocks\n"},
    {"name": "whole_prefill_blocks",
     "explain": "counts prefill in whole blocks (floor division), so a partial block costs nothing",
     "old": "    prefill_blocks = (worker.active_prefill_tokens + isl_tokens) / block_size - overlap_score_credit * worker.overlap_blocks\n",
     "new": "    prefill_blocks = (worker.active_prefill_tokens + isl_tokens) // block_size - overlap_score_credit * worker.overlap_blocks\n"},
    {"name": "queued_prefill_ignored",
     "explain": "leaves out the worker's queued prefill tokens (the simple form of the design document), "
                "so a worker busy prefilling looks as cheap as an idle one",
     "old": "    prefill_blocks = (worker.active_prefill_tokens + isl_tokens) / block_size - overlap_score_credit * worker.overlap_blocks\n",
     "new": "    prefill_blocks = isl_tokens / block_size - overlap_score_credit * worker.overlap_blocks\n"},
    {"name": "credit_scales_the_whole_prefill",
     "explain": "multiplies the credit into the uncached blocks instead of the cached ones, so credit 0 makes "
                "prefill free instead of ignoring the cache",
     "old": "    prefill_blocks = (worker.active_prefill_tokens + isl_tokens) / block_size - overlap_score_credit * worker.overlap_blocks\n",
     "new": "    prefill_blocks = overlap_score_credit * ((worker.active_prefill_tokens + isl_tokens) / block_size - worker.overlap_blocks)\n"},
    {"name": "ties_to_the_lower_index",
     "explain": "breaks a tie by the lower index (a reproducible rule, but not Dynamo's: it draws a tie at random)",
     "old": "                tied += 1                       # reservoir sampling: each tied worker kept with probability 1/tied\n"
            "                if rng.randrange(tied) == 0:\n"
            "                    best = i\n",
     "new": "                pass\n"},
    {"name": "tie_count_not_reset",
     "explain": "keeps counting ties across a new minimum, so a tie after a cheaper worker is kept with too small a probability",
     "old": "                best, tied = i, 1\n",
     "new": "                best = i\n"},
    {"name": "ties_by_choice",
     "explain": "collects the tied workers and draws one with rng.choice: uniform too, but not the statement's "
                "draws, so the answer cannot be reproduced against Dynamo's order of draws",
     "old": "        best, tied = 0, 1\n"
            "        for i in range(1, len(costs)):\n"
            "            if costs[i] < costs[best]:\n"
            "                best, tied = i, 1\n"
            "            elif costs[i] == costs[best]:\n"
            "                tied += 1                       # reservoir sampling: each tied worker kept with probability 1/tied\n"
            "                if rng.randrange(tied) == 0:\n"
            "                    best = i\n"
            "        return best\n",
     "new": "        lowest = min(costs)\n"
            "        tied_workers = [i for i, c in enumerate(costs) if c == lowest]\n"
            "        return tied_workers[0] if len(tied_workers) == 1 else rng.choice(tied_workers)\n"},
]
