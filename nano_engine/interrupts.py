"""interrupts.py: hold Ctrl-C back while the engine's bookkeeping changes, deliver it right after.

Python turns Ctrl-C (SIGINT) into a ``KeyboardInterrupt`` raised at whatever line the main thread
is running. Most of an engine step is a model forward, where that is harmless: nothing has been
recorded yet, and the step is simply undone. But between "the token was appended" and "the
finished request released its pages" an interrupt would leave a request half finished.

:class:`InterruptGuard` makes the bookkeeping sections atomic with respect to Ctrl-C:

* ``with guard.deferred():`` installs a SIGINT handler that only *remembers* the signal; when the
  block ends, the previous handler is restored and a remembered signal is raised again, so the
  ``KeyboardInterrupt`` (or whatever that handler does) happens right after the section;
* ``with guard.allowed():`` inside it, lets SIGINT interrupt at once again (the forward: a
  ``KeyboardInterrupt`` there is cheap to undo, and a long forward should stop when asked).

Why defer rather than repair afterwards: a half-done step inside a cache manager (a radix insert
that split a node but did not store its pages) cannot be reconstructed from the outside; the
sections are short (microseconds, no GPU wait), so holding the signal costs the user nothing.

Signals reach only the main thread, so in any other thread both sections do nothing.

>>> import signal
>>> guard, log = InterruptGuard(), []
>>> try:
...     with guard.deferred():
...         signal.raise_signal(signal.SIGINT)     # Ctrl-C in the middle of the section
...         log.append("section finished")
... except KeyboardInterrupt:
...     log.append("interrupted right after it")
>>> log
['section finished', 'interrupted right after it']
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class InterruptGuard:
    """Defers SIGINT inside ``deferred()`` sections, except within ``allowed()`` sub-sections.

    Sections nest (the outermost one installs the handler and delivers); both do nothing outside
    the main thread."""

    def __init__(self) -> None:
        self.pending = False     # a SIGINT arrived while deferred
        self.allow = False       # inside allowed(): interrupt at once
        self.depth = 0           # nesting of deferred() sections in the main thread

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.allow:
            self.allow = False   # the rollback that follows is deferred again
            raise KeyboardInterrupt
        self.pending = True

    @staticmethod
    def _main_thread() -> bool:
        return threading.current_thread() is threading.main_thread()

    @contextmanager
    def deferred(self) -> Iterator[None]:
        if not self._main_thread() or self.depth:     # elsewhere, or nested: the outermost delivers
            yield
            return
        self.pending = self.allow = False
        previous = signal.signal(signal.SIGINT, self._handler)
        self.depth = 1
        try:
            yield
        except BaseException:
            self._restore(previous, deliver=False)      # the exception stops the caller anyway
            raise
        self._restore(previous, deliver=True)

    def _restore(self, previous: object, deliver: bool) -> None:
        # depth first: once the previous handler is back, Ctrl-C may raise at the very next line,
        # and a guard left at depth 1 would treat every later section as nested (no deferral).
        self.depth = 0
        # None: the previous handler was not installed from Python (an embedding application)
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)  # type: ignore[arg-type]
        if self.pending and deliver:
            self.pending = False
            signal.raise_signal(signal.SIGINT)         # now handled by the previous handler

    @contextmanager
    def allowed(self) -> Iterator[None]:
        if not self._main_thread() or not self.depth:
            yield
            return
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt
        self.allow = True
        try:
            yield
        finally:
            self.allow = False
