"""BlockPool: examples, bad input, and a hypothesis state machine against a brute-force model."""

import doctest

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import nano_engine.paged
from nano_engine.paged import BlockPool


def test_module_doctest():
    result = doctest.testmod(nano_engine.paged)
    assert result.attempted > 0 and result.failed == 0


def test_allocate_and_free_reuse_blocks():
    pool = BlockPool(3)
    a = pool.allocate(2)
    assert a == [0, 1] and pool.ref_cnt == [1, 1, 0] and pool.num_free == 1
    assert pool.allocate(0) == []
    pool.free(a)
    assert pool.ref_cnt == [0, 0, 0] and pool.num_free == 3
    assert sorted(pool.allocate(3)) == [0, 1, 2]
    assert pool.allocate(1) is None


def test_allocate_is_all_or_nothing():
    pool = BlockPool(4)
    held = pool.allocate(3)
    before = (list(pool.ref_cnt), list(pool.free_queue))
    assert pool.allocate(2) is None
    assert pool.allocate(5) is None  # more than the whole pool: still just "does not fit"
    assert (list(pool.ref_cnt), list(pool.free_queue)) == before
    pool.free(held)


@pytest.mark.parametrize("num_blocks", [0, -1, 2.5, "4"])
def test_bad_pool_size(num_blocks):
    with pytest.raises(ValueError, match="num_blocks"):
        BlockPool(num_blocks)


@pytest.mark.parametrize("n", [-1, 1.5, None])
def test_bad_allocation_count(n):
    with pytest.raises(ValueError, match="allocate"):
        BlockPool(2).allocate(n)


def test_bad_frees_raise_and_change_nothing():
    pool = BlockPool(4)
    held = pool.allocate(2)
    before = (list(pool.ref_cnt), list(pool.free_queue))
    with pytest.raises(ValueError, match="not allocated"):
        pool.free([held[0], 3])  # 3 was never allocated: held[0] must not be freed either
    with pytest.raises(ValueError, match="double free"):
        pool.free([held[1], held[1]])
    with pytest.raises(ValueError, match="not in the pool"):
        pool.free([4])
    with pytest.raises(ValueError, match="not in the pool"):
        pool.free([-1])
    assert (list(pool.ref_cnt), list(pool.free_queue)) == before
    pool.free(held)
    with pytest.raises(ValueError, match="not allocated"):
        pool.free([held[0]])  # freed twice across calls
    assert pool.ref_cnt == [0] * 4 and sorted(pool.free_queue) == [0, 1, 2, 3]


class BlockPoolMachine(RuleBasedStateMachine):
    """The pool against a model: a FIFO list of free ids and a set of allocated ones."""

    NUM_BLOCKS = 6

    def __init__(self):
        super().__init__()
        self.pool = BlockPool(self.NUM_BLOCKS)
        self.model_free = list(range(self.NUM_BLOCKS))
        self.held: list[list[int]] = []  # what the "requests" own

    @rule(n=st.integers(0, NUM_BLOCKS + 1))
    def allocate(self, n):
        got = self.pool.allocate(n)
        if n > len(self.model_free):
            assert got is None
            return
        expected, self.model_free = self.model_free[:n], self.model_free[n:]
        assert got == expected
        self.held.append(got)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def free_some(self, data):
        i = data.draw(st.integers(0, len(self.held) - 1))
        blocks = self.held[i]
        k = data.draw(st.integers(0, len(blocks)))
        released, self.held[i] = blocks[:k], blocks[k:]
        self.pool.free(released)
        self.model_free.extend(released)

    @rule(blocks=st.lists(st.integers(0, NUM_BLOCKS - 1), max_size=4))
    def free_anything(self, blocks):
        """Any list of ids: valid exactly when each is held, and at most once."""
        owned = {b for bs in self.held for b in bs}
        valid = len(set(blocks)) == len(blocks) and set(blocks) <= owned
        before = (list(self.pool.ref_cnt), list(self.pool.free_queue))
        if not valid:
            with pytest.raises(ValueError):
                self.pool.free(blocks)
            assert (list(self.pool.ref_cnt), list(self.pool.free_queue)) == before
            return
        self.pool.free(blocks)
        self.model_free.extend(blocks)
        self.held = [[b for b in bs if b not in blocks] for bs in self.held]

    @invariant()
    def matches_model(self):
        owned = sorted(b for bs in self.held for b in bs)
        assert list(self.pool.free_queue) == self.model_free
        assert self.pool.num_free == len(self.model_free)
        assert [b for b, c in enumerate(self.pool.ref_cnt) if c] == owned
        assert all(c in (0, 1) for c in self.pool.ref_cnt)
        assert sorted(owned + self.model_free) == list(range(self.NUM_BLOCKS))


TestBlockPoolMachine = BlockPoolMachine.TestCase
TestBlockPoolMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
