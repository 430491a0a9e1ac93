"""Classic mistakes of exercise 22, each an edit of solution.py (`judge.py mistakes 22` shows them as diffs)."""

MISTAKES = [
    {"name": 'free_forward',
     "explain": "Frees blocks in forward order, so a sequence's head is evicted before its tail.",
     "old": '        for b in reversed(blocks):   # the tail of a sequence is evicted before its head\n',
     "new": '        for b in blocks:\n'},
    {"name": 'free_to_head',
     "explain": 'Puts freed blocks at the head of the queue (most recently freed reused first).',
     "old": '                self.free_queue[b] = None\n',
     "new": '                self.free_queue[b] = None\n                self.free_queue.move_to_end(b, last=False)\n'},
    {"name": 'queues_shared_block',
     "explain": 'Queues a block on every free, even while another request still references it.',
     "old": '            self.ref_cnt[b] -= 1\n            if self.ref_cnt[b] == 0:\n                self.free_queue[b] = None\n',
     "new": '            self.ref_cnt[b] = max(self.ref_cnt[b] - 1, 0)\n            self.free_queue[b] = None\n'},
    {"name": 'touch_keeps_block_queued',
     "explain": 'touch adds a reference but leaves a free block in the queue, so a block in use can be handed out.',
     "old": '            if self.ref_cnt[b] == 0:\n                del self.free_queue[b]\n',
     "new": ''},
]
