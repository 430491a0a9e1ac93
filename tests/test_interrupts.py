"""InterruptGuard against Ctrl-C at every line of its own code.

The engine's soak (tests/test_faults.py) lands SIGINT at random lines of the whole package; this
test is exhaustive over the guard itself, where a signal at the wrong line once left the guard at
depth 1 (every later section then counted as nested, so nothing was deferred any more)."""

import signal

import pytest
from engine_helpers import SigintAtLine

import nano_engine.interrupts as interrupts_module
from nano_engine.interrupts import InterruptGuard

GUARD_FILE = interrupts_module.__file__


def one_step(guard: InterruptGuard, log: list[str]) -> None:
    """The shape of an engine step: a deferred section with an allowed one (the forward) inside."""
    with guard.deferred():
        log.append("plan")
        with guard.allowed():
            log.append("forward")
        log.append("commit")


def test_the_guard_is_whole_after_ctrl_c_at_any_of_its_lines():
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("needs Python's default SIGINT handler")
    with SigintAtLine(None, GUARD_FILE) as counter:
        one_step(InterruptGuard(), [])
    assert counter.lines > 10
    for at in range(1, counter.lines + 1):
        guard, log = InterruptGuard(), []
        try:
            with SigintAtLine(at, GUARD_FILE):
                one_step(guard, log)
        except KeyboardInterrupt:
            pass
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, f"line {at}: handler not restored"
        assert (guard.depth, guard.allow) == (0, False), f"line {at}: guard left at depth {guard.depth}, allow {guard.allow}"
        # The guard still works: a Ctrl-C inside the next section waits until the section ends.
        after: list[str] = []
        with pytest.raises(KeyboardInterrupt):
            with guard.deferred():
                signal.raise_signal(signal.SIGINT)
                after.append("section finished")
        assert after == ["section finished"], f"line {at}: the next section was not deferred"
