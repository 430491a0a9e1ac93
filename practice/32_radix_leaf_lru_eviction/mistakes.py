"""Classic mistakes of exercise 32, each an edit of solution.py (`judge.py mistakes 32` shows them as diffs)."""

MISTAKES = [
    {"name": 'forgets_evictable_size',
     "explain": 'Frees the slots but leaves evictable_size unchanged.',
     "old": '            del parent.children[node.key[0]]\n            self.evictable_size -= len(node.key)\n',
     "new": '            del parent.children[node.key[0]]\n'},
    {"name": 'ignores_locks',
     "explain": 'Evicts leaves whether or not a running request has locked them.',
     "old": '                  if not n.children and n.lock_ref == 0]\n',
     "new": '                  if not n.children]\n'},
    {"name": 'most_recent_first',
     "explain": 'Orders the heap the wrong way round: evicts the most recently used leaf first.',
     "old": '        leaves = [(n.last_access, i, n) for i, n in enumerate(self._nodes())\n',
     "new": '        leaves = [(-n.last_access, i, n) for i, n in enumerate(self._nodes())\n'},
    {"name": 'no_parent_push',
     "explain": 'Never reconsiders a parent that has just become a leaf.',
     "old": "            if not parent.children and parent.lock_ref == 0:   # the root's permanent lock keeps it\n                heapq.heappush(leaves, (parent.last_access, tiebreak, parent))\n                tiebreak += 1\n",
     "new": ''},
    {"name": 'parent_keeps_child_stamp',
     "explain": "A parent left as a leaf enters the heap with its evicted child's older stamp: a hot shared prefix goes before a cold leaf.",
     "old": '                heapq.heappush(leaves, (parent.last_access, tiebreak, parent))\n',
     "new": '                heapq.heappush(leaves, (node.last_access, tiebreak, parent))\n'},
]
