"""Classic mistakes of exercise 41, each an edit of solution.py (`judge.py mistakes 41` shows them as diffs)."""

MISTAKES = [
    {"name": 'divides_by_looked_up_tokens',
     "explain": 'Divides by the tokens that could hit (all but each last token) instead of all tokens.',
     "old": '    return hits / sum(len(request) for request in workload)\n',
     "new": '    return hits / sum(len(request) - 1 for request in workload)\n'},
    {"name": 'no_last_token_rule',
     "explain": 'Matches the whole request: an exact repeat counts as a 100% hit.',
     "old": '        usable = (len(request) - 1) // size * size\n',
     "new": '        usable = len(request) // size * size\n'},
    {"name": 'partial_block_counted',
     "explain": 'With blocks, also counts the matched tokens of the block where the match stops.',
     "old": '    hits = 0\n    for request in workload:\n        # Match all but the last token, in whole blocks: the last token must be computed.\n        usable = (len(request) - 1) // size * size\n        matched = 0\n        while matched < usable and tuple(request[:matched + size]) in cached:\n            matched += size\n        hits += matched\n',
     "new": '    partial = set()\n    hits = 0\n    for request in workload:\n        # Match all but the last token, in whole blocks: the last token must be computed.\n        usable = (len(request) - 1) // size * size\n        matched = 0\n        while matched < usable and tuple(request[:matched + size]) in cached:\n            matched += size\n        common = matched\n        while common < len(request) - 1 and tuple(request[:common + 1]) in partial:\n            common += 1\n        hits += common\n        partial.update(tuple(request[:end]) for end in range(1, len(request) + 1))\n'},
    {"name": 'previous_request_only',
     "explain": 'Matches each request against the one just before it, not against everything cached.',
     "old": '        hits += matched\n',
     "new": '        hits += matched\n        cached.clear()\n'},
]
