"""The default ``PrefixCachingBlockPool`` against an independent implementation, operation by operation.

``ChapterPool`` below is our own transcription of that implementation's ``prefix_cache.py`` (the
pool chapter 02 builds by hand: chained ``hash((parent, tokens))``, one block per hash, the free
queue as the LRU cache, frees in reverse). Hypothesis drives both with the same random sequences of allocate /
touch / free / lookup / cache_blocks / block_hashes calls, shaped as an engine uses them (requests
admitted with a lookup of all but their last token, computed in chunks, decoding, finishing; bare
allocations that cache nothing; probes), and after every call compares every observable: return
values, free-queue order, reference counts, the cached set in both directions and the hit
counters. With the built-in hash and small ints there are no collisions, so the collision guard
must never refuse anything here.
"""

from collections import OrderedDict

from hypothesis import HealthCheck, given, settings, strategies as st

from nano_engine.prefix_cache import PrefixCachingBlockPool

NUM_BLOCKS, BLOCK_SIZE = 8, 2
NUM_EXAMPLES = 2000


class ChapterPool:
    """The chapter's pool, transcribed (our code; only the behaviour is the chapter's)."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.ref_cnt = [0] * num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self.block_hash: list[int | None] = [None] * num_blocks
        self.num_queries = 0
        self.num_hits = 0

    def allocate(self, n):
        if len(self.free_queue) < n:
            return None
        taken = []
        while len(taken) < n:
            b = next(iter(self.free_queue))
            del self.free_queue[b]
            old = self.block_hash[b]
            if old is not None:  # overwritten from now on: forget what it cached
                del self.hash_to_block[old]
                self.block_hash[b] = None
            self.ref_cnt[b] = 1
            taken.append(b)
        return taken

    def free(self, blocks):
        for b in blocks[::-1]:
            self.ref_cnt[b] -= 1
            if not self.ref_cnt[b]:
                self.free_queue[b] = None

    def touch(self, blocks):
        for b in blocks:
            if not self.ref_cnt[b]:
                self.free_queue.pop(b)
            self.ref_cnt[b] += 1

    def block_hashes(self, token_ids):
        out, parent = [], None
        for i in range(len(token_ids) // self.block_size):
            parent = hash((parent, tuple(token_ids[i * self.block_size:(i + 1) * self.block_size])))
            out.append(parent)
        return out

    def lookup(self, token_ids):
        hit = []
        for h in self.block_hashes(token_ids):
            if h not in self.hash_to_block:
                break
            hit.append(self.hash_to_block[h])
        self.num_queries += len(token_ids)
        self.num_hits += self.block_size * len(hit)
        return hit

    def cache_blocks(self, token_ids, block_ids, num_computed):
        for i, h in enumerate(self.block_hashes(token_ids[:num_computed])):
            b = block_ids[i]
            if self.block_hash[b] is None and h not in self.hash_to_block:
                self.block_hash[b] = h
                self.hash_to_block[h] = b


def same_state(ours: PrefixCachingBlockPool, chapter: ChapterPool) -> None:
    assert list(ours.free_queue) == list(chapter.free_queue)
    assert ours.ref_cnt == chapter.ref_cnt
    assert ours.block_hash == chapter.block_hash  # with the next line: the cached set, both directions
    assert ours.hash_to_blocks.keys() == chapter.hash_to_block.keys()
    assert (ours.num_queries, ours.num_hits) == (chapter.num_queries, chapter.num_hits)


OPS = ("admit", "admit", "admit_together", "compute", "compute", "compute", "decode", "finish", "scratch", "probe",
       "hashes")


def decode(code: int) -> tuple[int, int, int, int, list[int]]:
    """One operation packed in an int (cheap for hypothesis to draw): its kind, three small choices
    (which request, how many tokens, a cut) and up to 9 tokens of two values (many shared prefixes)."""
    fields = []
    for size in (len(OPS), 8, 8, 10, 9):
        code, field = divmod(code, size)
        fields.append(field)
    kind, pick, amount, cut, length = fields
    return kind, pick, amount, cut, [(code >> i) & 1 for i in range(length + 1)]


def run_operations(operations) -> None:
    ours, chapter = PrefixCachingBlockPool(NUM_BLOCKS, BLOCK_SIZE), ChapterPool(NUM_BLOCKS, BLOCK_SIZE)
    requests: list[dict] = []  # running: tokens, block table, tokens computed
    seen: list[list[int]] = []

    def both(name, *args):
        mine, theirs = getattr(ours, name)(*args), getattr(chapter, name)(*args)
        assert mine == theirs, f"{name}{args}: ours {mine}, chapter {theirs}"
        return mine

    def prompt(pick, cut, tokens):
        if seen and pick % 2:  # share a prefix with an earlier prompt
            old = seen[pick % len(seen)]
            return (old[:cut % (len(old) + 1)] + tokens[:cut % 5]) or [0]
        return tokens

    def admit(tokens):
        hit = both("lookup", tokens[:-1])  # the engine never matches the last prompt token
        both("touch", hit)
        new = both("allocate", -(-len(tokens) // BLOCK_SIZE) - len(hit))
        if new is None:
            both("free", hit)
        else:
            requests.append({"tokens": tokens, "blocks": hit + new, "computed": len(hit) * BLOCK_SIZE})

    for kind, pick, amount, cut, tokens in map(decode, operations):
        op = OPS[kind]
        if op in ("admit", "admit_together"):
            tokens = prompt(pick, cut, tokens)
            seen.append(tokens)
            admit(tokens)
            if op == "admit_together":  # a second request sharing a prefix, admitted before either computes
                admit(tokens[:1 + amount % len(tokens)] + tokens[:cut % 3])
        elif op == "compute" and requests:
            req = requests[pick % len(requests)]
            req["computed"] = min(len(req["tokens"]), req["computed"] + 1 + amount % 5)
            both("cache_blocks", req["tokens"], req["blocks"], req["computed"])
        elif op == "decode" and requests:  # a fully computed request samples one more token
            req = requests[pick % len(requests)]
            if req["computed"] == len(req["tokens"]):
                if len(req["tokens"]) == BLOCK_SIZE * len(req["blocks"]):
                    more = both("allocate", 1)
                    if more is None:
                        continue
                    req["blocks"] += more
                req["tokens"] = req["tokens"] + [amount % 3]
        elif op == "finish" and requests:
            both("free", requests.pop(pick % len(requests))["blocks"])
        elif op == "scratch":  # memory pressure: blocks that never cache anything, returned at once
            blocks = both("allocate", (amount + cut) % (NUM_BLOCKS + 1))
            if blocks is not None:
                both("free", blocks)
        elif op == "probe":
            both("lookup", prompt(pick, cut, tokens))
        elif op == "hashes":
            both("block_hashes", prompt(pick, cut, tokens))
        same_state(ours, chapter)
    for req in requests:
        both("free", req["blocks"])
    same_state(ours, chapter)
    ours.check_invariants()


@settings(max_examples=NUM_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(st.integers(0, 2**32), min_size=20, max_size=60))
def test_default_pool_is_the_chapters_pool(operations):
    run_operations(operations)


def test_duplicate_then_eviction_recaches_like_the_chapter():
    """The issue's case, by hand: two requests compute one prefix in the same step, then the first
    copy is evicted; the same content must be cached again (an orphaned entry must not block it)."""
    ours, chapter = PrefixCachingBlockPool(6, 2), ChapterPool(6, 2)
    for pool in (ours, chapter):
        a, b = pool.allocate(2), pool.allocate(2)  # both admitted before either computed: no hit
        pool.cache_blocks([1, 1, 2, 2], a, 4)
        pool.cache_blocks([1, 1, 3, 3], b, 4)  # b's first block duplicates a's; b's second chains to it
        pool.free(a)  # a finishes, b runs on
        c = pool.allocate(2)  # a third request, [1, 1, 3, 3] again
        assert pool.allocate(2) == a[::-1]  # memory pressure evicts a's blocks: b's second is orphaned
        pool.cache_blocks([1, 1, 3, 3], c, 4)
        assert pool.block_hash[c[0]] is not None  # the prefix is cached again ...
        assert pool.lookup([1, 1, 3, 3]) == [c[0], b[1]]  # ... and reaches b's second block
    same_state(ours, chapter)
