"""Queues a block on every free, even while another request still references it."""

from collections import OrderedDict


class PrefixCachingBlockPool:
    def __init__(self, num_blocks, block_size):
        self.block_size = block_size
        self.ref_cnt = [0] * num_blocks
        self.free_queue = OrderedDict((b, None) for b in range(num_blocks))
        self.hash_to_block, self.block_hash = {}, [None] * num_blocks
        self.num_queries = self.num_hits = 0

    def allocate(self, n):
        if n > len(self.free_queue):
            return None
        blocks = []
        for _ in range(n):
            b, _ = self.free_queue.popitem(last=False)
            if self.block_hash[b] is not None:
                del self.hash_to_block[self.block_hash[b]]
                self.block_hash[b] = None
            self.ref_cnt[b] = 1
            blocks.append(b)
        return blocks

    def free(self, blocks):
        for b in reversed(blocks):
            self.ref_cnt[b] = max(self.ref_cnt[b] - 1, 0)
            self.free_queue[b] = None

    def touch(self, blocks):
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self.free_queue[b]
            self.ref_cnt[b] += 1

    def block_hashes(self, token_ids):
        hashes, parent = [], None
        for start in range(0, len(token_ids) - self.block_size + 1, self.block_size):
            parent = hash((parent, tuple(token_ids[start:start + self.block_size])))
            hashes.append(parent)
        return hashes

    def lookup(self, token_ids):
        hit = []
        for h in self.block_hashes(token_ids):
            if h not in self.hash_to_block:
                break
            hit.append(self.hash_to_block[h])
        self.num_queries += len(token_ids)
        self.num_hits += len(hit) * self.block_size
        return hit

    def cache_blocks(self, token_ids, block_ids, num_computed):
        for i, h in enumerate(self.block_hashes(token_ids[:num_computed])):
            b = block_ids[i]
            if self.block_hash[b] is None and h not in self.hash_to_block:
                self.block_hash[b] = h
                self.hash_to_block[h] = b
