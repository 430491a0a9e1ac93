"""proxy.py -- the learner's code in a child process, the tests in the judge, plain data between.

The judge (``practice/judge.py``) runs the tests of ``test.py`` in its own process. The learner's
file is imported in a child process, and the tests reach it through *mirrors*: ``import
solution_under_test`` gives the tests a module whose classes and functions stand for the child's.
Calling one sends a request over a pipe; the child runs the learner's code and answers with the
result and with what changed in the learner's objects the judge already mirrors.

Why mirrors rather than a request per attribute read: the tests read a lot (exercise 31 walks
every node of a radix tree after every operation). A mirror of one of the learner's objects is a
real object in the judge whose ``__dict__`` holds the child object's attributes, and a list,
dict, set or deque of the learner's is mirrored by a subclass of the same type with the same
items; so reading ``node.parent.children`` costs what it costs in one process. After every
request the child walks the objects reachable from what the request touched and sends the ones
whose contents changed (compared by identity, item by item; a list or dict of plain data that
changed in a few places travels as an edit of what was sent last), so the mirrors are exact
whenever the test reads them: the child runs nothing between two requests. A test that changes a mirror
(``pool.block_hash[b] = h``, ``node.lock_ref = 5``) has the change applied in the child first.

What travels is plain data only: None, bools, numbers, strings, bytes, tuples, lists, dicts,
sets, tensors (dtype + shape + bytes), handles (numbers) for the learner's objects and their
classes' method names; an exception travels as its type's name, its builtin base classes and its
message. Messages are length-prefixed JSON, decoded by the C json parser and then checked by
``Link._decode`` into those types only: nothing the child sends can run code in the judge (no
pickle). The test logic, the expected values and the verdict never enter the child; a function of
the test handed to the learner's code (exercise 52's ``match_len``) stays in the judge, and the
child gets a stub that asks the judge to call it.

Limits of the child (``child_main``): CPU time per test (the child's own CPU clock, checked by a
watchdog thread that reports the line the code was stuck on), an address-space limit, a total CPU
limit (RLIMIT_CPU), no new processes, no ctypes, nothing under /proc, writes only inside a fresh
working directory (runner.py's audit hook), and what it prints is capped. In the judge, a
watchdog gives each test the same CPU time for its own code (a learner's object that makes a
test loop forever -- a cycle of ``parent`` links -- ends the test), and a generous wall-clock
limit catches code that sleeps or blocks.

Standard library only (torch is used when a test passes a tensor).
"""

from __future__ import annotations

import base64
import builtins
import collections
import copy
import functools
import itertools
import json
import operator
import os
import signal
import struct
import sys
import threading
import time
import types
from typing import Any, Callable, Iterable

MAX_MESSAGE = 256 * 2**20          # bytes in one message from the child (a bigger one is refused)
DEFAULT_BUDGET = 2048 * 2**20      # the judge's memory for one message, when no memory limit is given
WRITE_STALL = 20.0                 # seconds of wall-clock time a write to the child may make no progress
PRINT_LIMIT = 2000                 # characters of the learner's printing kept per test
_HEADER = struct.Struct(">I")
_STATUS, _UNKNOWN = struct.Struct(">q"), -(1 << 62)   # the zygote's answer: how a child ended
_TUPLE_FIELD = type(collections.namedtuple("_Pair", "a b").a)   # what a named tuple's field is (its getter)
_is = operator.is_
_SCALARS = frozenset({type(None), bool, int, str})
_PLAIN_VALUES = frozenset({int, str, float, bytes})
_TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")
# What a test passes as a function (a callback) rather than as an object with methods.
_TEST_FUNCTIONS = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.BuiltinMethodType,
                   functools.partial, type)
# The special methods a learner's class may define that a mirror forwards to the child.
SPECIALS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__len__", "__iter__",
            "__contains__", "__getitem__", "__setitem__", "__delitem__", "__bool__", "__repr__", "__str__",
            "__call__", "__index__", "__int__", "__float__")
_OPERATORS: dict[str, Callable] = {
    "__eq__": operator.eq, "__ne__": operator.ne, "__lt__": operator.lt, "__le__": operator.le,
    "__gt__": operator.gt, "__ge__": operator.ge, "__hash__": hash, "__len__": len, "__iter__": list,
    "__contains__": lambda a, k: k in a, "__getitem__": operator.getitem, "__setitem__": operator.setitem,
    "__delitem__": operator.delitem, "__bool__": bool, "__repr__": repr, "__str__": str,
    "__index__": operator.index, "__int__": int, "__float__": float}
_RESULT_TYPES: dict[str, type] = {"__hash__": int, "__len__": int, "__bool__": bool, "__repr__": str, "__str__": str,
                                  "__index__": int, "__int__": int, "__float__": float, "__contains__": bool,
                                  "__iter__": list}


class JudgeStop(BaseException):
    """The child cannot answer any more (timeout, crash, a malformed answer), or the test ran out
    of CPU time in the judge: the current test ends with this verdict and the rest are skipped.
    A BaseException, so ``except Exception`` in a test does not swallow it."""

    def __init__(self, verdict: str = "timeout", message: str = "", where: dict | None = None):
        super().__init__(message)
        self.verdict, self.message, self.where = verdict, message, where


class JudgeTimeout(JudgeStop):
    """Raised asynchronously in a test's thread when the test's own code used up its CPU time."""


class ProtocolError(Exception):
    """A message from the child that is not a well-formed answer."""


def _tensor_from(dtype: object, shape: object, data: object):
    import torch
    dt = getattr(torch, str(dtype).replace("torch.", ""), None)
    if not isinstance(dt, torch.dtype) or not isinstance(shape, list) or not isinstance(data, str) or not all(
            type(s) is int and s >= 0 for s in shape):
        raise ProtocolError(f"not a tensor: {dtype} {shape}")
    raw = base64.b64decode(data)
    if not raw:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt).reshape(shape).clone()


def _tensor_data(t) -> list:
    import torch
    t = t.detach().cpu().contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return ["T", str(t.dtype), list(t.shape), base64.b64encode(raw).decode("ascii")]


def _is_tensor(value: object) -> bool:
    cls = type(value)
    return cls.__name__ in ("Tensor", "Parameter") and f"{cls.__module__}.{cls.__qualname__}" in _TENSOR_TYPES


def _checked(value: object, kind: type) -> Any:
    if kind is int and type(value) is bool:
        return int(value)
    if kind is float and type(value) is int:
        return float(value)
    if not isinstance(value, kind):
        raise TypeError(f"your code returned {type(value).__name__} where {kind.__name__} was expected")
    return value


# ============================================================================================
# Judge side: mirrors


class Mirror:
    """Base of the mirrors of the learner's objects (one generated subclass per learner class)."""

    __slots__ = ("__dict__", "__weakref__")
    _link: Link
    learner_object = True

    # copy.copy / copy.deepcopy of a learner's object (exercise 61's brute force works on a deep
    # copy of the learner's tree): the child makes the copy, the judge gets its mirror.
    def __copy__(self) -> Any:
        link = type(self)._link
        return link.request("copy", link.handles[id(self)], "shallow")

    def __deepcopy__(self, memo: dict) -> Any:
        link = type(self)._link
        return link.request("copy", link.handles[id(self)], "deep")


class _MirrorMeta(type):
    """The generated mirror classes: calling one constructs an object in the child; reading an
    attribute the class does not mirror (a class attribute, a static method) asks the child."""

    _link: Link
    _h: int

    def __call__(cls, *args: object, **kwargs: object) -> Any:
        return cls._link.request("call", cls._h, None, args, kwargs)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return cls._link.request("get", cls._h, name)


def _fwd_method(name: str) -> Callable:
    def method(self: Any, *args: object, **kwargs: object) -> Any:
        link = type(self)._link
        return link.request("call", link.handles[id(self)], name, args, kwargs)
    method.__name__ = method.__qualname__ = name
    return method


def _fwd_property(name: str) -> property:
    def fget(self: Any) -> Any:
        link = type(self)._link
        h = link.handles[id(self)]
        values = link.props.get(h)
        if values is not None and name in values:   # evaluated by the child with the last answer
            return values[name]
        return link.request("get", h, name)

    def fset(self: Any, value: object) -> None:
        link = type(self)._link
        link.request("set", link.handles[id(self)], name, value)

    def fdel(self: Any) -> None:
        link = type(self)._link
        link.request("del", link.handles[id(self)], name)
    return property(fget, fset, fdel)


def _fwd_special(name: str) -> Callable:
    kind = _RESULT_TYPES.get(name)

    def special(self: Any, *args: object) -> Any:
        link = type(self)._link
        if name in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__") and not (
                isinstance(args[0], Mirror) and type(args[0])._link is link):
            return NotImplemented   # the learner's == decides only between the learner's objects
        if link.stopped is not None and name in ("__repr__", "__str__"):
            return f"<{type(self).__name__} (the process of your code has ended)>"
        value = link.request("op", link.handles[id(self)], name, args)
        if name == "__iter__":
            return iter(_checked(value, list))
        return _checked(value, kind) if kind is not None else value
    special.__name__ = special.__qualname__ = name
    return special


def _mirror_getattr(self: Any, name: str) -> Any:
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    link = type(self)._link
    return link.request("get", link.handles[id(self)], name)


def _mirror_setattr(self: Any, name: str, value: object) -> None:
    link = type(self)._link
    link.request("set", link.handles[id(self)], name, value)


def _mirror_delattr(self: Any, name: str) -> None:
    link = type(self)._link
    link.request("del", link.handles[id(self)], name)


class Opaque:
    """Anything of the child's that is neither plain data nor an object of the learner's classes
    (a function, a generator, a random.Random): every use is a request."""

    __slots__ = ("_link", "_h", "_label", "__weakref__")
    learner_object = True

    def __init__(self, link: Link, handle: int, label: str):
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_h", handle)
        object.__setattr__(self, "_label", label)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._link.request("get", self._h, name)

    def __setattr__(self, name: str, value: object) -> None:
        self._link.request("set", self._h, name, value)

    def __call__(self, *args: object, **kwargs: object) -> Any:
        return self._link.request("call", self._h, None, args, kwargs)

    def __iter__(self):
        return iter(_checked(self._link.request("op", self._h, "__iter__", ()), list))

    def __len__(self) -> int:
        return _checked(self._link.request("op", self._h, "__len__", ()), int)

    def __getitem__(self, key: object) -> Any:
        return self._link.request("op", self._h, "__getitem__", (key,))

    def __repr__(self) -> str:
        if self._link.stopped is not None:
            return f"<{self._label} (the process of your code has ended)>"
        return _checked(self._link.request("op", self._h, "__repr__", ()), str)


class RemoteModule(types.ModuleType):
    """``solution_under_test`` in the judge: its attributes are the child's module's."""

    def __init__(self, link: Link, name: str):
        super().__init__(name)
        self.__dict__["_link"] = link

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self.__dict__["_link"].request("get", 0, name)


_MUTATORS: dict[type, tuple[str, ...]] = {
    list: ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert", "pop", "remove",
           "clear", "sort", "reverse"),
    dict: ("__setitem__", "__delitem__", "__ior__", "pop", "popitem", "clear", "update", "setdefault"),
    set: ("__ior__", "__iand__", "__isub__", "__ixor__", "add", "discard", "remove", "pop", "clear", "update",
          "difference_update", "intersection_update", "symmetric_difference_update"),
    collections.deque: ("__setitem__", "__delitem__", "__iadd__", "append", "appendleft", "pop", "popleft",
                        "extend", "extendleft", "clear", "remove", "rotate", "insert"),
}
_MUTATORS[collections.OrderedDict] = _MUTATORS[dict] + ("move_to_end",)
_CONTAINER_TAGS: dict[str, type] = {"l": list, "d": dict, "o": collections.OrderedDict, "s": set,
                                    "q": collections.deque}


def _live_class(base: type) -> type:
    """A mirror of a container of the child: reading is the base type's own; each mutating method
    is applied in the child first, and the mirror then takes the child's new contents."""

    def forward(name: str) -> Callable:
        def method(self: Any, *args: object, **kwargs: object) -> Any:
            link = self._link
            result = link.request("mut", link.handles[id(self)], name, args, kwargs)
            return self if name.startswith("__i") else result
        method.__name__ = method.__qualname__ = name
        return method

    def plain_copy(self: Any, *args: object) -> Any:
        return base(self) if base is not collections.deque else collections.deque(self, self.maxlen)

    namespace: dict[str, Any] = {name: forward(name) for name in _MUTATORS[base]}
    namespace.update(_link=None, __copy__=plain_copy, copy=plain_copy, __reduce_ex__=lambda self, p: (base, (base(self),)),
                     __deepcopy__=lambda self, memo: __import__("copy").deepcopy(base(self), memo))
    # named as its base: a mirror's repr (a deque's, an OrderedDict's) and its type in a report read
    # as they do in one process
    return type(base.__name__, (base,), namespace)


_LIVE = {tag: _live_class(base) for tag, base in _CONTAINER_TAGS.items()}
_LIVE_TYPES = frozenset(_LIVE.values())


def _fill(obj: Any, tag: str, items: list, values: list | None) -> None:
    """Replace a mirror container's contents without forwarding anything."""
    base = _CONTAINER_TAGS[tag]
    base.clear(obj)
    if values is not None:
        for k, v in zip(items, values):
            base.__setitem__(obj, k, v)
    elif base is set:
        set.update(obj, items)
    else:
        base.extend(obj, items)


class Link:
    """The judge's end of the pipe to one child: requests, answers, mirrors, callbacks."""

    def __init__(self, send_fd: int, recv_fd: int, pid: int, wall_limit: float, budget: int = DEFAULT_BUDGET):
        self.send_fd, self.recv_fd, self.pid, self.wall_limit = send_fd, recv_fd, pid, wall_limit
        self.budget = budget                  # bytes the judge may spend on one message: the child's own limit
        self.received = 0                     # bytes of messages so far (the mirrors they made stay in the judge)
        self.describe_exit: Callable[[int | None], str] = lambda status: f"exit status {status}"
        self.buffer = bytearray()
        self.objects: dict[int, Any] = {}     # handle -> mirror (the child keeps the object as long)
        self.handles: dict[int, int] = {}     # id(mirror) -> handle
        self.props: dict[int, dict] = {}      # handle -> its properties' values, as of the last answer
        self.callbacks: list[Callable] = []
        self.stopped: JudgeStop | None = None
        self.output: Any = None               # where the learner's printing goes (the test's capture)
        self.requests = 0
        self.wall_deadline = float("inf")     # while waiting for an answer: when the watchdog ends the child
        self.wall_expired = False
        _watch_link(self)
        self._encode_json = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode

    # -- the wire ----------------------------------------------------------------------------

    def send(self, message: list) -> None:
        """Write one message. A child that stops reading (a callback's reply of megabytes the code
        never reads) would block the write forever: the watchdog ends it after ``wall_limit``."""
        data = self._encode_json(message).encode("utf-8")
        view = memoryview(_HEADER.pack(len(data)) + data)
        stall = min(self.wall_limit, WRITE_STALL)
        try:
            while view:
                self.wall_deadline = time.monotonic() + stall   # reading a message costs the child next to nothing
                view = view[os.write(self.send_fd, view):]
        except OSError:
            if self.wall_expired:
                self.stop(JudgeStop("timeout", f"your code stopped reading the judge's messages: no progress within "
                                               f"{stall:g} s of wall-clock time"))
            self._stop_dead()
        finally:
            self.wall_deadline = float("inf")

    def _fill_buffer(self, need: int) -> None:
        """Read until ``need`` bytes are buffered: a plain blocking read (no select per answer);
        the watchdog thread ends the child when an answer takes longer than ``wall_limit``."""
        buffer = self.buffer
        if len(buffer) >= need:
            return
        self.wall_deadline = time.monotonic() + self.wall_limit
        try:
            while len(buffer) < need:
                chunk = os.read(self.recv_fd, max(1 << 16, need - len(buffer)))
                if not chunk:
                    if self.wall_expired:
                        self.stop(JudgeStop("timeout", f"no answer within {self.wall_limit:g} s of wall-clock time "
                                                       "(the code sleeps, or waits for something that never comes)"))
                    self._stop_dead()
                buffer += chunk
        finally:
            self.wall_deadline = float("inf")

    def receive(self) -> Any:
        """The next message, decoded. Its memory is bounded by ``budget`` (what the child may use):
        the frame and its text take twice its size, and the objects the JSON decoder builds are
        counted before it runs (``decoded_size``: ~70 bytes per ``[]``), so a frame of empty lists
        is refused rather than decoded into gigabytes. What the judge keeps (the mirrors) is bounded
        too: all messages of a run together may not exceed ``budget / 16``."""
        self._fill_buffer(4)
        (size,) = _HEADER.unpack_from(self.buffer)
        if size > MAX_MESSAGE or 2 * size > self.budget:
            self._too_large(2 * size)
        self.received += 4 + size
        if self.received > self.budget // 16:   # mirrors cost the judge up to ~8 bytes per byte received
            self.stop(JudgeStop("runtime error", f"your code sent the judge more than {self.budget / 2**24:,.0f} MiB "
                                                 "in this run, too much to mirror (an honest run sends a few MB)"))
        self._fill_buffer(4 + size)
        buffer = self.buffer
        need = 2 * size + decoded_size(buffer, 4, 4 + size)
        if need > self.budget:
            self._too_large(need)
        try:
            with memoryview(buffer) as view:
                text = str(view[4:4 + size], "utf-8")   # a str: no guessing of the encoding
            del buffer[:4 + size]
            return json.loads(text)
        except (ValueError, RecursionError):
            self.stop(JudgeStop("runtime error", "the child process wrote something that is not an answer"))

    def _too_large(self, need: int) -> None:
        self.stop(JudgeStop("runtime error", f"your code sent the judge a value too large to judge: reading it would "
                                             f"take about {need / 2**20:,.0f} MiB, more than the "
                                             f"{self.budget / 2**20:,.0f} MiB your code may use"))

    def stop(self, why: JudgeStop) -> None:
        if self.stopped is None:
            self.stopped = why
        raise self.stopped

    def _stop_dead(self) -> None:
        """The child's end of the pipe closed: say how the child ended (which limit, a crash, an exit)."""
        if self.stopped is None:
            why = self.describe_exit(child_status(self.pid) if self.pid > 0 else None)
            self.stopped = JudgeStop("runtime error", f"the Python process ended during this test: {why}")
        raise self.stopped

    # -- requests ----------------------------------------------------------------------------

    def request(self, op: str, handle: int, name: object = None, args: tuple | list = (),
                kwargs: dict | None = None) -> Any:
        """Send one request and wait for its answer, serving the child's callbacks meanwhile."""
        if self.stopped is not None:
            raise self.stopped
        self.requests += 1
        enc = self.encode
        if op in ("call", "mut", "op"):
            originals = list(args)
            message = [op, handle, name, [enc(a) for a in args],
                       {str(k): enc(v) for k, v in (kwargs or {}).items()}]
        elif op == "set":
            originals = []
            message = [op, handle, name, enc(args)]
        else:
            originals = []
            message = [op, handle, name]
        self.send(message)
        return self.wait(originals)

    def wait(self, originals: list) -> Any:
        while True:
            answer = self.receive()
            failure: BaseException | None = None
            try:
                kind = answer[0]
                if kind == "R":   # ["R", value, delta, printed, write-backs]
                    self._printed(answer[3])
                    self._apply(answer[2])
                    value = self._decode(answer[1])
                    for index, new in answer[4]:
                        self._write_back(originals[index], self._decode(new))
                    return value
                if kind == "E":   # ["E", name, bases, message, where, delta, printed]
                    self._printed(answer[6])
                    self._apply(answer[5])
                    failure = self._exception(answer)
                elif kind == "C":   # ["C", callback, args, delta, printed(, method of a test's object)]
                    self._printed(answer[4])
                    self._apply(answer[3])
                    self._serve_callback(answer[1], answer[2], answer[5] if len(answer) > 5 else None)
                    continue
                elif kind == "X":   # ["X", message, where(, printed)]: the child's watchdog
                    if len(answer) > 3:
                        self._printed(answer[3])
                    where = _clean_where(answer[2])
                    failure = self.stopped = JudgeStop("timeout", str(answer[1])[:500], where)
                else:
                    raise ProtocolError(f"unknown answer {kind!r}")
            except Exception as exc:   # ProtocolError, a missing field, a value deeper than the recursion limit...
                failure = self.stopped = self.stopped or JudgeStop(
                    "runtime error", f"the child process answered something malformed ({type(exc).__name__}: "
                                     f"{str(exc)[:200]})")
            raise failure

    def _printed(self, printed: object) -> None:
        if not printed:
            return
        text, dropped, lines = (list(printed) + [0])[:3]   # type: ignore[call-overload]
        out = self.output
        if out is None:
            return
        if isinstance(text, str) and text:
            out.write(text)
        if type(dropped) is int and dropped > 0 and hasattr(out, "dropped"):
            out.dropped += dropped
            out.dropped_lines += lines if type(lines) is int and lines > 0 else 0

    def _serve_callback(self, index: object, args: object, method: object = None) -> None:
        if type(index) is not int or not 0 <= index < len(self.callbacks) or not isinstance(args, list):
            raise ProtocolError("unknown callback")
        target = self.callbacks[index]
        if method is not None:   # a method of a test's object: public ones only (or calling it)
            if type(method) is not str or not method.isidentifier() or (
                    method.startswith("_") and method != "__call__"):
                raise ProtocolError("not a public method")
        try:
            if method is not None:
                target = getattr(target, method)
            value = target(*[self._decode(a) for a in args])
            reply = ["R", self.encode(value)]
        except JudgeStop:
            raise
        except Exception as exc:   # the test's function raised: the learner's code sees the exception
            reply = ["E", type(exc).__name__, [c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins"],
                     str(exc)[:2000]]
        self.send(reply)

    # -- values ------------------------------------------------------------------------------

    def encode(self, value: object) -> Any:
        """A value of the test, as plain data for the child."""
        kind = type(value)
        if kind in _SCALARS:
            return value
        if kind is float:
            return value if value == value and value not in (float("inf"), float("-inf")) else ["F", repr(value)]
        h = self.handles.get(id(value))
        if h is not None and self.objects.get(h) is value:
            return ["r", h]
        enc = self.encode
        if kind is list:
            return ["l", [enc(v) for v in value]]  # type: ignore[attr-defined]
        if kind is tuple:
            return ["t", [enc(v) for v in value]]  # type: ignore[attr-defined]
        if kind in (dict, collections.Counter, collections.defaultdict, collections.OrderedDict):
            return ["o" if kind is collections.OrderedDict else "d", [enc(k) for k in value],  # type: ignore[attr-defined]
                    [enc(v) for v in value.values()]]  # type: ignore[attr-defined]
        if kind in (set, frozenset):
            return ["s" if kind is set else "f", [enc(v) for v in value]]  # type: ignore[attr-defined]
        if kind is collections.deque:
            return ["q", [enc(v) for v in value], value.maxlen]  # type: ignore[attr-defined]
        if kind is bytes:
            return ["y", base64.b64encode(value).decode("ascii")]  # type: ignore[arg-type]
        if kind is range:
            return ["l", list(value)]  # type: ignore[call-overload]
        if _is_tensor(value):
            return _tensor_data(value)
        if isinstance(value, tuple):   # a named tuple of the test: its items
            return ["t", [enc(v) for v in value]]
        if kind is slice:   # got[:2] on a learner's sequence
            return ["S", enc(value.start), enc(value.stop), enc(value.step)]  # type: ignore[attr-defined]
        if kind in (int, float, str) or isinstance(value, (int, float, str)):
            return kind.__mro__[1](value) if kind not in (int, float, str) else value  # type: ignore[operator]
        if isinstance(value, _TEST_FUNCTIONS):
            self.callbacks.append(value)  # type: ignore[arg-type]
            return ["c", len(self.callbacks) - 1]
        # Any other object of the test (exercise 72's random.Random, a scripted Draw) stays here:
        # the learner's code gets a stand-in whose method calls come back as callbacks.
        self.callbacks.append(value)  # type: ignore[arg-type]
        return ["g", len(self.callbacks) - 1]

    def _decode(self, data: Any) -> Any:
        """The child's plain data as values (strictly: anything else is a ProtocolError)."""
        if type(data) is not list:
            if type(data) in _SCALARS or type(data) is float:
                return data
            raise ProtocolError("not a value")
        tag = data[0]
        if tag == "r":
            obj = self.objects.get(data[1])
            if obj is None:
                raise ProtocolError("unknown handle")
            return obj
        if tag == "t":
            return tuple(self._items(data[1]))
        if tag == "L":   # a list of plain scalars, as is
            return [self._plain(v) for v in data[1]]
        if tag == "f":
            return frozenset(self._items(data[1]))
        if tag == "y":
            return base64.b64decode(data[1])
        if tag == "F" and data[1] in ("nan", "inf", "-inf"):
            return float(data[1])
        if tag == "T":
            return _tensor_from(data[1], data[2], data[3])
        if tag == "J":   # a description (plain JSON, cleaned by _clean_where)
            return data[1]
        if tag == "l":
            return self._items(data[1])
        if tag == "s":
            return set(self._items(data[1]))
        if tag in ("d", "o"):
            return (dict if tag == "d" else collections.OrderedDict)(
                zip(map(self._decode, data[1]), map(self._decode, data[2]), strict=True))
        if tag == "q":
            return collections.deque(map(self._decode, data[1]), data[2] if type(data[2]) is int else None)
        raise ProtocolError(f"unknown value tag {tag!r}")

    @staticmethod
    def _plain(value: object) -> Any:
        if type(value) in _SCALARS:
            return value
        raise ProtocolError("not a plain value")

    def _items(self, data: object) -> list:
        """A list of encoded items: plain scalars pass as they are (the common case: token ids)."""
        if type(data) is not list:
            raise ProtocolError("not a list of items")
        return [v if type(v) in _SCALARS else self._decode(v) for v in data]

    def _apply(self, delta: object) -> None:
        """Bring the mirrors up to date: create the new ones (classes first), then fill them."""
        if not delta:
            return
        if type(delta) is not list:
            raise ProtocolError("not a delta")
        objects, handles = self.objects, self.handles
        for pass_ in (0, 1):
            for entry in delta:
                h, tag = entry[0], entry[1]
                if type(h) is not int or h in objects or (tag == "K") != (pass_ == 0):
                    continue
                if tag == "K":
                    obj: Any = self._mirror_class(h, entry)
                elif tag == "i":
                    cls = objects.get(entry[2])
                    if not (isinstance(cls, type) and issubclass(cls, Mirror)):
                        raise ProtocolError("an object of an unknown class")
                    obj = object.__new__(cls)
                elif tag in _LIVE:
                    obj = _LIVE[tag]() if tag != "q" else _LIVE[tag]((), entry[3] if type(entry[3]) is int else None)
                    obj._link = self
                elif tag == "h":
                    obj = Opaque(self, h, str(entry[2])[:200])
                else:
                    raise ProtocolError(f"unknown kind {tag!r}")
                objects[h] = obj
                handles[id(obj)] = h
        for entry in delta:
            h, tag = entry[0], entry[1]
            obj = objects[h]
            if tag == "i":
                if not isinstance(obj, Mirror) or type(entry[3]) is not list:
                    raise ProtocolError("not an object of the learner's")
                state = object.__getattribute__(obj, "__dict__")
                state.clear()
                for name, value in zip(entry[3], self._items(entry[4]), strict=True):
                    if type(name) is not str:
                        raise ProtocolError("an attribute name that is not a string")
                    state[name] = value
                if type(entry[5]) is not list:
                    raise ProtocolError("not a list of property names")
                self.props[h] = dict(zip(map(str, entry[5]), self._items(entry[6]), strict=True))
            elif tag == "L":
                self._edit_list(obj, entry)
            elif tag == "D":
                self._edit_dict(obj, entry)
            elif tag in ("d", "o"):
                if type(obj) is not _LIVE[tag]:
                    raise ProtocolError("a container changed its kind")
                _fill(obj, tag, self._items(entry[2]), self._items(entry[3]))
            elif tag in _LIVE:
                if type(obj) is not _LIVE[tag]:
                    raise ProtocolError("a container changed its kind")
                _fill(obj, tag, self._items(entry[2]), None)

    def _edit_list(self, obj: Any, entry: list) -> None:
        """[h, "L", start, stop, items]: the mirror's items start:stop become ``items``."""
        start, stop = entry[2], entry[3]
        if type(obj) is not _LIVE["l"] or type(start) is not int or type(stop) is not int or not (
                0 <= start <= stop <= len(obj)):
            raise ProtocolError("not an edit of a list")
        list.__setitem__(obj, slice(start, stop), self._items(entry[4]))

    def _edit_dict(self, obj: Any, entry: list) -> None:
        """[h, "D", gone, changed, new values, new keys, their values]: by position in the
        mirror's order, the keys that went and the values replaced; then the keys that came."""
        base = dict if type(obj) is _LIVE["d"] else collections.OrderedDict
        gone, changed = entry[2], entry[3]
        if type(obj) not in (_LIVE["d"], _LIVE["o"]) or type(gone) is not list or type(changed) is not list:
            raise ProtocolError("not an edit of a dict")
        keys = list(obj)
        if not all(type(i) is int and 0 <= i < len(keys) for i in gone + changed):
            raise ProtocolError("not an edit of a dict")
        for i, value in zip(changed, self._items(entry[4]), strict=True):
            base.__setitem__(obj, keys[i], value)
        for i in gone:
            base.__delitem__(obj, keys[i])
        for key, value in zip(self._items(entry[5]), self._items(entry[6]), strict=True):
            base.__setitem__(obj, key, value)

    def _mirror_class(self, h: int, entry: list) -> type:
        _, _, name, methods, props, specials = entry[:6]
        if not isinstance(name, str) or not name.isidentifier():
            name = "LearnerClass"
        namespace: dict[str, Any] = {"__module__": "solution_under_test", "__qualname__": name, "_link": self,
                                     "_h": h, "__getattr__": _mirror_getattr, "__setattr__": _mirror_setattr,
                                     "__delattr__": _mirror_delattr}
        for method in methods if isinstance(methods, list) else []:
            if isinstance(method, str) and method.isidentifier() and not method.startswith("__"):
                namespace[method] = _fwd_method(method)
        for prop in props if isinstance(props, list) else []:
            if isinstance(prop, str) and prop.isidentifier() and not prop.startswith("__"):
                namespace[prop] = _fwd_property(prop)
        for special in specials if isinstance(specials, list) else []:
            if special == "unhashable":
                namespace["__hash__"] = None
            elif special in SPECIALS:
                namespace[special] = _fwd_special(special)
                if special == "__call__":
                    namespace[special] = _fwd_method("__call__")
        for method_name, fn in list(namespace.items()):
            if callable(fn) and method_name in SPECIALS:
                fn.__module__ = "solution_under_test"   # runner.plain_equal: the learner's own ==
        return _MirrorMeta(name, (Mirror,), namespace)

    def _write_back(self, original: Any, new: Any) -> None:
        """The learner's code changed an argument: change the test's own object the same way."""
        if isinstance(original, list) and isinstance(new, list):
            original[:] = new
        elif isinstance(original, dict) and isinstance(new, dict):
            original.clear()
            original.update(new)
        elif isinstance(original, set) and isinstance(new, (set, frozenset)):
            original.clear()
            original.update(new)
        elif isinstance(original, collections.deque) and isinstance(new, (list, collections.deque)):
            original.clear()
            original.extend(new)
        elif _is_tensor(original) and _is_tensor(new) and original.shape == new.shape:
            original.copy_(new)

    def _exception(self, answer: list) -> BaseException:
        _, name, bases, message, where = answer[:5]
        name = str(name)[:100]
        bases = [b for b in bases if isinstance(b, str)] if isinstance(bases, list) else []
        builtin = getattr(builtins, name, None)
        if isinstance(builtin, type) and issubclass(builtin, Exception) and name in bases:
            cls: type = builtin
        else:
            base = next((getattr(builtins, b) for b in bases if isinstance(getattr(builtins, b, None), type)
                         and issubclass(getattr(builtins, b), Exception)), BaseException)
            cls = _foreign_exception(name, base)
        exc = cls(str(message)[:2000]) if message not in (None, "") else cls()
        exc.remote_failure = _LazyWhere(self, where) if type(where) is int else _clean_where(where)  # type: ignore[attr-defined]
        return exc

    def begin_test(self, timeout: float, output: Any) -> None:
        """A test starts: the child's CPU clock gets ``timeout`` seconds; its printing goes to ``output``.
        The only right answer is ["R", None, ...]: anything else (an error, an exception of the
        code's, a load error) means the child's end of the protocol was tampered with, and the test
        ends as a runtime error (JudgeStop) instead of an exception outside every test's guard."""
        self.callbacks.clear()
        self.output = output
        try:
            value = self.request("begin", 0, float(timeout))
        except (JudgeStop, KeyboardInterrupt, SystemExit):   # the real ones: only the judge's own
            raise
        except BaseException as exc:  # noqa: B036 -- whatever the child's answer became
            value = exc
        if value is not None:
            self.stop(JudgeStop("runtime error", "the process of your code answered the start of a test with something "
                                                 f"else ({type(value).__name__}): its end of the judge's pipe was "
                                                 "tampered with"))

    def end_test(self) -> None:
        self.output = None


class _LazyWhere(dict):
    """Where the learner's code raised, fetched from the child only when a report needs it (most
    exceptions are expected by the tests, and describing one -- its lines, its locals -- costs)."""

    def __init__(self, link: Link, token: int):
        super().__init__()
        self.link, self.token, self.loaded = link, token, False

    def __bool__(self) -> bool:
        return True

    def get(self, key: str, default: Any = None) -> Any:
        if not self.loaded:
            self.loaded = True
            if self.link.stopped is None:
                try:
                    self.update(_clean_where(self.link.request("why", 0, self.token)) or {})
                except (KeyboardInterrupt, SystemExit):   # the real ones: only the judge's own
                    raise
                except BaseException:  # noqa: B036 -- a report without the learner's line
                    pass
        return dict.get(self, key, default)


_FOREIGN: dict[tuple[str, type], type] = {}


def _foreign_exception(name: str, base: type) -> type:
    """A stand-in class for an exception class of the learner's (same name, builtin base). A
    KeyboardInterrupt or SystemExit of the learner's code becomes one too: never the real one.
    ``learner_exception`` tells the judge's own guards (runner.safe_repr) that it may be caught."""
    if (name, base) not in _FOREIGN:
        _FOREIGN[(name, base)] = type(name if name.isidentifier() else "LearnerException", (base,),
                                      {"__module__": "your file", "learner_exception": True})
    return _FOREIGN[(name, base)]


def decoded_size(data: bytes | bytearray, start: int = 0, end: int | None = None) -> int:
    """An upper bound of the memory (bytes) json.loads needs for the objects of ``data[start:end]``,
    counted without decoding: each container (``[``, ``{``) up to ~80 bytes, each other item (a
    comma separates items) up to ~44 (a pointer and an int or float), each string ~50 plus its text."""
    end = len(data) if end is None else end
    containers = data.count(b"[", start, end) + data.count(b"{", start, end)
    items = data.count(b",", start, end) + 1
    strings = data.count(b'"', start, end) // 2
    return 80 * containers + 44 * items + 50 * strings + (end - start)


def _clean_where(where: object) -> dict | None:
    """The child's description of a place in the learner's file, reduced to strings and ints."""
    if not isinstance(where, dict):
        return None
    out: dict[str, Any] = {}
    frame = where.get("yours")
    if isinstance(frame, dict):
        locals_ = frame.get("locals") if isinstance(frame.get("locals"), dict) else {}
        out["yours"] = {"file": "your file", "path": str(frame.get("path", ""))[:500],
                        "lineno": frame.get("lineno") if type(frame.get("lineno")) is int else 0,
                        "function": str(frame.get("function", ""))[:200], "line": str(frame.get("line", ""))[:500],
                        "locals": {str(k)[:100]: str(v)[:300] for k, v in list(locals_.items())[:20]}}
    trace = where.get("traceback")
    out["traceback"] = [{"file": "your file", "lineno": t.get("lineno") if type(t.get("lineno")) is int else 0,
                         "function": str(t.get("function", ""))[:200], "line": str(t.get("line", ""))[:500]}
                        for t in (trace if isinstance(trace, list) else [])[-8:] if isinstance(t, dict)]
    return out


# -- the judge's own watchdog: CPU time of a test's code in the judge ---------------------------

_WATCH_LOCK = threading.Lock()
_WATCHED: dict[int, tuple[int, float, Link]] = {}   # thread ident -> (its CPU clock, deadline, link)
_WATCHDOG: list[threading.Thread] = []
_LINKS: Any = None   # the links whose answers the watchdog times (a WeakSet)


def _ensure_watchdog() -> None:
    with _WATCH_LOCK:
        if not _WATCHDOG or _WATCHDOG[0].ident is None or not _WATCHDOG[0].is_alive():
            _WATCHDOG[:] = [threading.Thread(target=_watch_loop, name="judge-watchdog", daemon=True)]
            _WATCHDOG[0].start()


def _watch_link(link: Link) -> None:
    global _LINKS
    import weakref
    with _WATCH_LOCK:
        if _LINKS is None:
            _LINKS = weakref.WeakSet()
        _LINKS.add(link)
    _ensure_watchdog()


def _watch_loop() -> None:
    import ctypes
    while True:
        time.sleep(0.05)
        now = time.monotonic()
        with _WATCH_LOCK:
            items = list(_WATCHED.items())
            links = list(_LINKS) if _LINKS is not None else []
        for link in links:
            if link.wall_deadline < now and not link.wall_expired and link.pid > 0:
                link.wall_expired = True   # the blocked read sees the pipe close: a timeout, not a crash
                try:
                    os.killpg(link.pid, signal.SIGKILL)
                except OSError:
                    pass
        for ident, (clock, deadline, link) in items:
            try:
                used = time.clock_gettime(clock)
            except OSError:
                continue
            if used > deadline:
                with _WATCH_LOCK:
                    if _WATCHED.get(ident, (0, 0.0, None))[2] is not link:
                        continue
                    del _WATCHED[ident]
                    if link.stopped is None:
                        link.stopped = JudgeTimeout("timeout", "")
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(JudgeTimeout))


def watch_test(link: Link, seconds: float) -> None:
    """Give the test now starting in this thread ``seconds`` of its own CPU time in the judge."""
    if not hasattr(time, "pthread_getcpuclockid"):   # pragma: no cover -- not POSIX: the wall-clock limit holds
        return
    ident = threading.get_ident()
    clock = time.pthread_getcpuclockid(ident)
    with _WATCH_LOCK:
        _WATCHED[ident] = (clock, time.clock_gettime(clock) + seconds, link)
    _ensure_watchdog()


def unwatch_test() -> None:
    with _WATCH_LOCK:
        _WATCHED.pop(threading.get_ident(), None)


# ============================================================================================
# Child side (runs in the learner's process; nothing here is trusted by the judge)


class _Server:
    def __init__(self, runner: types.ModuleType, solution_path: str, send_bytes: Callable[[bytes], None],
                 recv: Callable[[], Any]):
        self.runner, self.solution_path = runner, solution_path
        self.solution_dir = os.path.dirname(os.path.abspath(solution_path))
        self.send_bytes, self.recv = send_bytes, recv
        self.objects: dict[int, Any] = {}      # handle -> object
        self.ids: dict[int, int] = {}          # id(object) -> handle
        self.kinds: dict[int, str] = {}
        self.snaps: dict[int, Any] = {}        # handle -> the contents last sent (the objects themselves)
        self.kids: dict[int, list] = {}        # handle -> the handles those contents refer to
        self.fresh: list[int] = []             # handles given since the last delta
        self.learner_classes: dict[type, bool] = {}
        self.getters: dict[type, list] = {}    # class -> its plain properties, (name, getter)
        self.deadline = [float("inf")]
        self.timeout = [0.0]
        self.printed = runner._HELPERS["CapturedOutput"](PRINT_LIMIT)
        self.printed_sent = [0, 0, 0]          # characters of printed.parts, dropped and its lines already sent
        self.roots: list[list] = []            # the objects each request in progress touches
        self.failures: dict[int, BaseException] = {}   # token -> an exception the judge may ask about
        self._encode_json = json.JSONEncoder(separators=(",", ":"), check_circular=False, default=repr).encode
        self.module: Any = None
        self.globals_seen: tuple[list, int, list[int]] = ([], -1, [])   # see global_handles
        self.memory_mb: int | None = None
        self.reserve: bytearray | None = bytearray(1 << 20)   # freed on a MemoryError, to answer it

    # -- wire --

    def send(self, message: list) -> None:
        data = self._encode_json(message).encode("utf-8")
        self.send_bytes(_HEADER.pack(len(data)) + data)

    def take_printed(self) -> Any:
        out = self.printed
        kept = "".join(out.parts)
        text, dropped = kept[self.printed_sent[0]:], out.dropped - self.printed_sent[1]
        if not text and not dropped:
            return None
        lines = out.dropped_lines - self.printed_sent[2]
        self.printed_sent[:] = [len(kept), out.dropped, out.dropped_lines]
        return [text, dropped, lines]

    # -- handles and contents --

    def is_learner_class(self, cls: type) -> bool:
        known = self.learner_classes.get(cls)
        if known is None:
            module = sys.modules.get(getattr(cls, "__module__", "") or "")
            path = getattr(module, "__file__", None) if module is not None else None
            known = cls.__module__ == self.runner.SOLUTION_MODULE or (
                isinstance(path, str) and os.path.dirname(os.path.abspath(path)) == self.solution_dir)
            if known and ("__getattribute__" in vars(cls) or not isinstance(getattr(cls, "__dict__", None),
                                                                               types.MappingProxyType)):
                known = False
            self.learner_classes[cls] = known
        return known

    def handle_of(self, obj: object, kind: str) -> int:
        h = len(self.objects) + 1
        self.objects[h], self.ids[id(obj)], self.kinds[h], self.snaps[h] = obj, h, kind, None
        self.kids[h] = []
        self.fresh.append(h)
        return h

    def encode(self, value: Any) -> Any:
        kind = type(value)
        if kind in _SCALARS:
            return value
        if kind is float:
            return value if value == value and value not in (float("inf"), float("-inf")) else ["F", repr(value)]
        if kind is tuple or kind is frozenset:   # in place (never a handle); numbers and strings as they are
            return ["t" if kind is tuple else "f", [v if type(v) in _SCALARS else self.encode(v) for v in value]]
        if kind is bytes:
            return ["y", base64.b64encode(value).decode("ascii")]
        h = self.ids.get(id(value))   # (after the tuples: each id() runs the judge's audit hook)
        if h is not None:
            return ["r", h]
        if kind is list:
            return ["r", self.handle_of(value, "l")]
        if kind is collections.OrderedDict:
            return ["r", self.handle_of(value, "o")]
        if kind is dict or isinstance(value, dict):
            return ["r", self.handle_of(value, "d")]
        if kind is set:
            return ["r", self.handle_of(value, "s")]
        if kind is collections.deque:
            return ["r", self.handle_of(value, "q")]
        if _is_tensor(value):
            return _tensor_data(value)
        numeric = _plain_number(value)
        if numeric is not None:
            return numeric
        if isinstance(value, type) and self.is_learner_class(value):
            return ["r", self.handle_of(value, "K")]
        if self.is_learner_class(kind):
            self.encode(kind)   # its class first
            return ["r", self.handle_of(value, "i")]
        return ["r", self.handle_of(value, "h")]

    def properties(self, cls: type) -> list:
        """The plain properties of a learner's class: their values travel with the object's state,
        so that reading one in the judge costs no request (a getter that raises is asked for)."""
        found = self.getters.get(cls)
        if found is None:
            found = []
            for name in dir(cls):
                member = getattr(cls, name, None)
                if isinstance(member, property) and isinstance(member.fget, types.FunctionType):
                    found.append((name, member.fget))
                elif type(member) is _TUPLE_FIELD:   # a named tuple's field (exercise 62's LoadPlan)
                    found.append((name, member.__get__))
            self.getters[cls] = found
        return found

    def contents(self, obj: Any, kind: str, old: Any) -> Any:
        """What a mirrored object holds now (the objects themselves, not copies), or None when
        that is still ``old``, the contents last sent: the same keys and the same objects in the
        same order. Comparing by identity copies nothing and runs none of the learner's code (no
        ``__eq__``); only a changed object's contents are copied."""
        if kind == "i":   # an instance of a learner's class: its attributes, then its properties
            state = getattr(obj, "__dict__", None)
            if type(state) is not dict:
                state = {}
            getters = self.getters.get(type(obj))
            if getters is None:
                getters = self.properties(type(obj))
            props = self.property_values(obj, getters, old[2] if old is not None else ()) if getters else []
            if old is not None and len(state) == len(old[0]) and all(map(_is, state, old[0])) and (
                    all(map(_is, state.values(), old[1])) or _same_values(state.values(), old[1])) and (
                    not getters or (len(props) == len(old[2]) and _same_values(props, old[2]))):
                return None
            return (list(state), list(state.values()), props)
        if kind in ("d", "o"):
            if old is not None and len(obj) == len(old[0]) and all(map(_is, obj, old[0])) and all(
                    map(_is, obj.values(), old[1])):
                return None
            return (list(obj), list(obj.values()))
        if old is not None and len(obj) == len(old) and all(map(_is, obj, old)):   # "l", "s", "q"
            return None
        return list(obj)

    def property_values(self, obj: Any, getters: list, old: Any) -> list:
        """The values of the object's plain properties now (``_RAISED`` where the getter raised:
        the judge asks for that one when the test reads it). A property that builds a new
        container on every read (``return list(self._free)``) would make its object look
        changed after every request, and cost a new mirror each time; while the new container
        holds the same items as the one sent last, the one sent last stands for it."""
        values = []
        for i, (_name, getter) in enumerate(getters):
            try:
                value = getter(obj)
            except Exception:
                value = _RAISED
            if i < len(old) and _same_container(value, old[i]) and id(value) not in self.ids:
                value = old[i]
            values.append(value)
        return values

    def content(self, h: int, obj: Any, kind: str, snap: Any) -> list:
        """The delta entry of one object; remembers the handles it refers to (its kids)."""
        kids: list[int] = []

        def items(values: Iterable) -> list:
            return self.encode_items(values, kids)

        if kind == "i":
            names, values, props = snap
            shown = [(name, value) for (name, _), value in zip(self.properties(type(obj)), props)
                     if value is not _RAISED]
            entry = [h, "i", self.ids[id(type(obj))], names, items(values), [name for name, _ in shown],
                     items(value for _, value in shown)]
        elif kind in ("d", "o"):
            entry = [h, kind, items(snap[0]), items(snap[1])]
        elif kind == "q":
            entry = [h, kind, items(snap), obj.maxlen]
        elif kind in ("l", "s"):
            entry = [h, kind, items(snap)]
        elif kind == "K":
            entry = [h, "K", *self.describe_class(obj)]
        else:
            entry = [h, "h", f"{type(obj).__module__}.{type(obj).__qualname__}"]
        self.kids[h] = kids
        return entry

    def edit(self, h: int, kind: str, old: Any, new: Any) -> list | None:
        """A short entry for a list or dict of plain data that changed in a few places (a block
        appended, a hash removed): by position in the contents last sent, what to replace (a
        list), or which keys went, which values changed and which keys came (a dict: a dict's
        surviving keys keep their order, new ones come last). None where a full entry is due:
        another kind, a container holding mirrored objects (a full entry records their
        handles), or an edit as long as the contents."""
        if self.kids[h] or kind not in ("l", "d", "o"):
            return None
        if kind == "l":
            head = _common_head(old, new)
            tail = _common_head(reversed(old[head:]), reversed(new[head:]))
            if head + tail < len(new) // 2:
                return None
            items = self.plain_items(new[head:len(new) - tail])
            return None if items is None else [h, "L", head, len(old) - tail, items]
        (old_keys, old_values), (keys, values) = old, new
        gone: list[int] = []       # positions of the keys that went
        changed: list[int] = []    # positions of the values replaced
        replaced: list = []        # their new values
        i = j = 0
        for j, key in enumerate(keys):   # the surviving keys, in their old order
            while i < len(old_keys) and old_keys[i] is not key:
                gone.append(i)
                i += 1
            if i == len(old_keys):
                break
            if old_values[i] is not values[j]:
                changed.append(i)
                replaced.append(values[j])
            i += 1
        else:
            j = len(keys)
        gone += range(i, len(old_keys))
        if len(gone) + len(changed) + len(keys) - j > len(keys) // 2:
            return None
        encoded = [self.plain_items(part) for part in (replaced, keys[j:], values[j:])]
        if any(part is None for part in encoded):
            return None
        return [h, "D", gone, changed, *encoded]

    def plain_items(self, values: list) -> list | None:
        """The items encoded, or None if one is (or holds) a mirrored object."""
        kids: list[int] = []
        out = self.encode_items(values, kids)
        return None if kids else out

    def encode_items(self, values: Iterable, kids: list[int]) -> list:
        """Items encoded (numbers and strings as they are); the handles they refer to go to ``kids``."""
        out = []
        for v in values:
            if type(v) in _SCALARS:
                out.append(v)
            else:
                data = self.encode(v)
                _handles_in(data, kids)
                out.append(data)
        return out

    def describe_class(self, cls: type) -> list:
        methods, props, specials = set(), set(), set()
        for klass in reversed(cls.__mro__[:-1]):
            for name, member in vars(klass).items():
                if name in SPECIALS:
                    if name == "__hash__" and member is None:
                        specials.discard("__hash__")
                        specials.add("unhashable")
                    else:
                        specials.discard("unhashable" if name == "__hash__" else "")
                        specials.add(name)
                elif name.startswith("__"):
                    continue
                elif isinstance(member, (types.FunctionType, staticmethod, classmethod, types.BuiltinFunctionType)):
                    methods.add(name)
                    props.discard(name)
                elif hasattr(type(member), "__set__") or isinstance(member, property):
                    props.add(name)
                    methods.discard(name)
        return [cls.__name__, sorted(methods), sorted(props), sorted(specials)]

    def delta(self, roots: list) -> list:
        """What changed among the mirrored objects reachable from ``roots``, from the module's
        globals and from the objects given a handle meanwhile: each changed object's new
        contents, new objects included. The walk goes from handle to handle (the contents last
        sent record the handles they refer to), so an unchanged object costs one comparison."""
        out: list = []
        objects, kinds, snaps, kids = self.objects, self.kinds, self.snaps, self.kids
        stack = self.handles_among(roots)
        stack += self.global_handles()
        stack += self.fresh
        self.fresh = []
        seen: set[int] = set()
        while stack:
            h = stack.pop()
            if h in seen:
                continue
            seen.add(h)
            kind, old = kinds[h], snaps[h]
            if kind in ("h", "K"):   # an opaque object or a class: described once, never changes
                if old is None:
                    snaps[h] = ()
                    out.append(self.content(h, objects[h], kind, None))
                continue
            new = self.contents(objects[h], kind, old)
            stack += kids[h]         # unchanged, its kids may have changed; changed, so may those it let go
            if new is None:
                continue
            out.append((old is not None and self.edit(h, kind, old, new)) or self.content(h, objects[h], kind, new))
            snaps[h] = new
            stack += kids[h]
            stack += self.fresh
            self.fresh = []
        return out

    def handles_among(self, values: Iterable) -> list[int]:
        """The handles of the mirrored objects among ``values`` (and inside tuples among them)."""
        found: list[int] = []
        todo = list(values)
        while todo:
            value = todo.pop()
            if type(value) in _SCALARS or type(value) is float:
                continue
            h = self.ids.get(id(value))
            if h is not None:
                found.append(h)
            elif type(value) in (tuple, frozenset):
                todo += value
        return found

    def global_handles(self) -> list[int]:
        """The mirrored objects among the module's globals (a module-level cache): the test may
        hold their mirrors while a call changes them. Looked up again only when a global was
        rebound or a handle given since the last time."""
        if self.module is None:
            return []
        values = list(vars(self.module).values())
        known, count, handles = self.globals_seen
        if count == len(self.objects) and len(values) == len(known) and all(map(_is, values, known)):
            return list(handles)
        handles = [h for h in map(self.ids.get, map(id, values)) if h is not None]
        self.globals_seen = (values, len(self.objects), handles)
        return list(handles)

    def decode(self, data: Any) -> Any:
        if type(data) is not list:
            return data
        tag = data[0]
        if tag == "r":
            return self.objects[data[1]]
        if tag == "t":
            return tuple(self.decode(v) for v in data[1])
        if tag == "f":
            return frozenset(self.decode(v) for v in data[1])
        if tag == "l":
            return [self.decode(v) for v in data[1]]
        if tag == "s":
            return {self.decode(v) for v in data[1]}
        if tag == "q":
            return collections.deque((self.decode(v) for v in data[1]), data[2])
        if tag in ("d", "o"):
            return (dict if tag == "d" else collections.OrderedDict)(
                zip([self.decode(k) for k in data[1]], [self.decode(v) for v in data[2]]))
        if tag == "y":
            return base64.b64decode(data[1])
        if tag == "F":
            return float(data[1])
        if tag == "T":
            return _tensor_from(data[1], data[2], data[3])
        if tag == "c":
            return self._callback(data[1])
        if tag == "g":
            return _TestObject(self, data[1])
        if tag == "S":
            return slice(self.decode(data[1]), self.decode(data[2]), self.decode(data[3]))
        raise ValueError(f"unknown tag {tag!r}")

    def _callback(self, index: int, method: str | None = None) -> Callable:
        def callback(*args: Any) -> Any:
            encoded = [self.encode(a) for a in args]
            roots = [r for frame in self.roots for r in frame] + list(args)
            message = ["C", index, encoded, self.delta(roots), self.take_printed()]
            if method is not None:
                message.append(method)
            self.send(message)
            return self.serve(until_reply=True)
        return callback

    # -- requests --

    def describe(self, exc: BaseException) -> dict:
        runner, path = self.runner, self.solution_path
        where = runner._innermost(exc.__traceback__, path)
        out: dict[str, Any] = {}
        if where is not None:
            out["yours"] = runner.describe_frame(*where, "your file")
        tb, trace = exc.__traceback__, []
        while tb is not None:
            code = tb.tb_frame.f_code
            if runner._same_file(code.co_filename, path):
                trace.append({"lineno": tb.tb_lineno, "function": code.co_name,
                              "line": runner._source_line(path, tb.tb_lineno)})
            tb = tb.tb_next
        out["traceback"] = trace[-8:]
        return out

    def serve(self, until_reply: bool = False) -> Any:
        """Answer requests; inside a callback, return when the judge's reply comes."""
        while True:
            message = self.recv()
            if message is None:
                os._exit(0)
            op = message[0]
            if op in ("R", "E"):
                if not until_reply:
                    continue
                if op == "R":
                    return self.decode(message[1])
                raise _judge_exception(message)
            self.answer(op, message)

    def answer(self, op: str, message: list) -> None:
        roots: list = []
        self.roots.append(roots)
        try:
            target = self.objects[message[1]] if message[1] else self.module
            roots.append(target)
            if op == "why":
                failure = self.failures.get(message[2])
                self.send(["R", ["J", self.describe(failure) if failure is not None else None], [], None, []])
                return
            if op == "begin":
                self.failures.clear()
                self.timeout[0] = float(message[2])
                self.deadline[0] = time.process_time() + self.timeout[0]
                out = self.printed
                out.parts, out.kept, out.dropped, out.dropped_lines = [], 0, 0, 0
                self.printed_sent[:] = [0, 0, 0]
                self.send(["R", None, [], None, []])
                return
            writes: list = []
            if op == "get":
                result = getattr(target, message[2])
            elif op == "copy":
                result = (copy.deepcopy if message[2] == "deep" else copy.copy)(target)
            elif op == "set":
                value = self.decode(message[3])
                roots.append(value)
                result = setattr(target, message[2], value)
            elif op == "del":
                result = delattr(target, message[2])
            else:   # call, mut, op
                args = [self.decode(a) for a in message[3]]
                kwargs = {k: self.decode(v) for k, v in message[4].items()}
                roots += args
                roots += kwargs.values()
                before = self.watch_arguments(args)
                if op == "call":
                    func = target if message[2] is None else getattr(target, message[2])
                    result = func(*args, **kwargs)
                elif op == "mut":
                    if self.kinds.get(message[1]) not in _CONTAINER_TAGS or message[2] not in _MUTATORS[
                            _CONTAINER_TAGS[self.kinds[message[1]]]]:
                        raise TypeError(f"cannot apply {message[2]!r} here")
                    result = getattr(target, message[2])(*args, **kwargs)
                    if result is target:
                        result = None
                else:
                    result = _OPERATORS[message[2]](target, *args)
                for i, arg, snap in before:
                    now = _shallow(arg)
                    if now is not None and not _same_shallow(now, snap):
                        writes.append([i, self.encode_value_copy(arg)])
            value = self.encode(result)
            roots.append(result)
            self.send(["R", value, self.delta(roots), self.take_printed(), writes])
        except BaseException as exc:  # noqa: B036 -- exit() and KeyboardInterrupt too: the judge decides
            if isinstance(exc, _Quit):
                raise
            text = self.runner._truncate(str(exc), 2000)
            if isinstance(exc, MemoryError):   # room to answer, and no walk of what filled the memory
                self.reserve = None
                roots, text = [], text or f"over the memory limit of your code ({self.memory_mb} MiB)"
            token = len(self.failures) + 1
            if token <= 1000:
                self.failures[token] = exc
            self.send(["E", type(exc).__name__, [c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins"],
                       text, token, self.delta(roots), self.take_printed()])
        finally:
            self.roots.pop()

    def watch_arguments(self, args: list) -> list:
        """The arguments that came by value (a list, a dict, a tensor of the test's), each with
        a shallow copy: when the learner's code changes one, the judge changes the test's own."""
        watched = []
        for i, arg in enumerate(args):
            if type(arg) not in _SCALARS:
                snap = _shallow(arg)
                if snap is not None and id(arg) not in self.ids:
                    watched.append((i, arg, snap))
        return watched

    def encode_value_copy(self, value: Any) -> Any:
        """An argument the learner's code changed, by value (the judge writes it back)."""
        if _is_tensor(value):
            return _tensor_data(value)
        if isinstance(value, (list, collections.deque)):
            return ["l", [self.encode(v) for v in value]]
        if isinstance(value, (set, frozenset)):
            return ["s", [self.encode(v) for v in value]]
        if isinstance(value, dict):
            return ["d", [self.encode(k) for k in value], [self.encode(v) for v in value.values()]]
        return self.encode(value)


_RAISED = object()   # among a snapshot's property values: the getter raised
_CONTAINER_TYPES = frozenset({list, dict, collections.OrderedDict, set, collections.deque})


def _same_values(a: Iterable, b: Iterable) -> bool:
    """The same objects, or equal numbers and strings (a property's ``len(...)`` is a new int
    on every read; an attribute set to an equal float has not changed)."""
    return all(map(_is, a, b)) or all(x is y or (type(x) is type(y) and type(x) in _PLAIN_VALUES and x == y)
                                      for x, y in zip(a, b))


def _same_container(a: Any, b: Any) -> bool:
    """Two distinct containers of the same type holding the same objects in the same order."""
    kind = type(a)
    if a is b or kind is not type(b) or kind not in _CONTAINER_TYPES or len(a) != len(b):
        return False
    if kind is collections.deque and a.maxlen != b.maxlen:
        return False
    return all(map(_is, a, b)) and (kind not in (dict, collections.OrderedDict) or all(map(_is, a.values(), b.values())))


def _common_head(a: Iterable, b: Iterable) -> int:
    """How many leading items two sequences share (the same objects)."""
    return sum(1 for _ in itertools.takewhile(bool, map(_is, a, b)))


def _handles_in(data: Any, into: list) -> None:
    """The handles an encoded value refers to (a tuple's items are encoded in place)."""
    if type(data) is list:
        if data[0] == "r":
            into.append(data[1])
        elif data[0] in ("t", "f"):
            for item in data[1]:
                if type(item) is list:
                    _handles_in(item, into)


class _TestObject:
    """In the learner's process: a stand-in for an object of the test (not plain data). Calling
    one of its methods asks the judge to call the real one; nothing else of it is here."""

    __slots__ = ("_server", "_index")

    def __init__(self, server: _Server, index: int):
        object.__setattr__(self, "_server", server)
        object.__setattr__(self, "_index", index)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._server._callback(self._index, name)

    def __call__(self, *args: Any) -> Any:
        return self._server._callback(self._index, "__call__")(*args)

    def __repr__(self) -> str:
        return "<an object of the tests>"


def _shallow(value: Any) -> Any:
    kind = type(value)
    if kind in (list, set, collections.deque):
        return list(value)
    if kind in (dict, collections.OrderedDict):
        return (list(value), list(value.values()))
    if _is_tensor(value):
        return value.detach().clone()
    return None


def _same_shallow(a: Any, b: Any) -> bool:
    if _is_tensor(a):
        return bool(a.shape == b.shape and a.dtype == b.dtype and (a == b).all().item()) or bool(
            a.shape == b.shape and a.isnan().all().item())
    if type(a) is tuple:
        return len(a[0]) == len(b[0]) and all(map(_is, a[0], b[0])) and all(map(_is, a[1], b[1]))
    return len(a) == len(b) and all(map(_is, a, b))


class _Quit(BaseException):
    pass


def _judge_exception(message: list) -> BaseException:
    name, bases, text = message[1], message[2] or [], message[3]
    builtin = getattr(builtins, str(name), None)
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        return builtin(text)
    base = next((getattr(builtins, b) for b in bases if isinstance(getattr(builtins, b, None), type)), Exception)
    return type(str(name), (base,), {})(text)


def _plain_number(value: object) -> int | float | None:
    """numpy and other numeric scalars become plain ints and floats."""
    import numbers
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        return None
    try:
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real):
            return float(value)
    except Exception:
        return None
    return None


# -- the child process ------------------------------------------------------------------------

# The learner's processes are forked from a *zygote*: a copy of the judge made before any test
# is loaded (``start_zygote``). A fork, not a fresh interpreter, because the tests compare values
# of Python's ``hash()`` computed on both sides (exercise 24's block hashes): a fork keeps the
# string hash seed and the address ``hash(None)`` is made of. Each learner's process gets the
# pipe ends over a Unix socket, its own session (so the judge can end it and whatever it
# started), a fresh working directory and its limits; the spec comes as the first message on its
# pipe. The zygote holds no test, no expected value and no verdict: only judge.py, runner.py and
# this file, as loaded.
_ZYGOTE: dict[str, Any] = {}
_ZYGOTE_LOCK = threading.Lock()


def start_zygote(runner_path: str | None = None) -> None:
    """Fork the zygote now (judge.py calls this before it loads any test or starts threads).
    ``runner_path``: runner.py, compiled once here for the in-child runner's processes."""
    import socket
    with _ZYGOTE_LOCK:
        if _ZYGOTE.get("owner") == os.getpid():
            return
        if runner_path is not None:
            import hashlib
            with open(runner_path, encoding="utf-8") as f:
                source = f.read()
            _RUNNER_CODE[hashlib.sha256(source.encode("utf-8")).hexdigest()] = compile(source, runner_path, "exec")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:   # pragma: no cover -- the zygote
            code = 0
            try:
                ours.close()
                _zygote_main(theirs)
            except BaseException:  # noqa: B036
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        _ZYGOTE.update(owner=os.getpid(), socket=ours, pid=pid)
        import atexit
        atexit.register(stop_zygote)


def child_status(pid: int) -> int | None:
    """How a learner's process ended, as subprocess gives it (a negative number: the signal), from
    the zygote that reaps it; None when it is unknown (still running, or no zygote of ours)."""
    with _ZYGOTE_LOCK:
        if _ZYGOTE.get("owner") != os.getpid():
            return None
        sock = _ZYGOTE["socket"]
        try:
            sock.sendall(b"?" + _HEADER.pack(pid))
            answer = b""
            while len(answer) < _STATUS.size:
                chunk = sock.recv(_STATUS.size - len(answer))
                if not chunk:
                    return None
                answer += chunk
        except OSError:
            return None
    (status,) = _STATUS.unpack(answer)
    return None if status == _UNKNOWN else status


def stop_zygote() -> None:
    """Close the zygote's socket and wait for it (it ends the learner's processes left first)."""
    with _ZYGOTE_LOCK:
        if _ZYGOTE.get("owner") != os.getpid():
            return
        _ZYGOTE.pop("owner")
        _ZYGOTE["socket"].close()
        pid = _ZYGOTE["pid"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.01)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass


def _zygote_main(sock: Any) -> None:   # pragma: no cover -- runs in the zygote
    import gc
    import socket
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C ends the judge; the zygote sees its socket close
    gc.freeze()   # the children's collector leaves the inherited objects alone: no copy of their pages
    children: set[int] = set()
    ended: dict[int, int] = {}   # pid -> exit status as subprocess gives it (negative: the signal)

    def reap(block: bool) -> None:
        for pid in list(children):
            try:
                done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                done, status = pid, None
            if done:
                children.discard(pid)
                if status is not None:
                    ended[pid] = os.waitstatus_to_exitcode(status)
                    while len(ended) > 1000:
                        ended.pop(next(iter(ended)))

    while True:
        reap(block=False)
        try:
            data, fds, _, _ = socket.recv_fds(sock, 16, 3)
        except OSError:
            data, fds = b"", []
        if data[:1] == b"?" and len(data) == 5 and not fds:   # how did this child end? (waits up to 2 s)
            (asked,) = _HEADER.unpack(data[1:])
            for _ in range(200):
                if asked in ended or asked not in children:
                    break
                time.sleep(0.01)
                reap(block=False)
            try:
                sock.sendall(_STATUS.pack(ended.pop(asked, _UNKNOWN)))
            except OSError:
                return
            continue
        if not data or len(fds) != 3:
            for pid in children:   # the judge has gone: end what is left, and wait for it
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            reap(block=True)
            return
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                sock.close()
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                os.closerange(3, 65536)
                os.setsid()
                code = _child_entry()
            finally:
                os._exit(code)
        children.add(pid)
        for fd in fds:
            os.close(fd)
        try:
            sock.sendall(_HEADER.pack(pid))
        except OSError:
            return


def _child_entry() -> int:   # pragma: no cover -- runs in the learner's process
    """Read the spec (the first message on stdin) and serve."""
    data = bytearray()
    while len(data) < 4 or len(data) < 4 + _HEADER.unpack_from(data)[0]:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return 1
        data += chunk
    size = _HEADER.unpack_from(data)[0]
    spec = json.loads(bytes(data[4:4 + size]))
    del data
    if "torch" in sys.modules:   # imported by the judge before the zygote: one thread after a fork
        try:
            sys.modules["torch"].set_num_threads(1)
        except Exception:
            pass
    if spec.get("kind") == "in-child":
        return _in_child_entry(spec)
    runner = sys.modules[spec["runner_module"]]
    try:
        return child_main(spec, runner, 0, 1, b"")
    except MemoryError:   # outside every answer's guard: the judge names the limit from this status
        return runner.EXIT_OUT_OF_MEMORY


def _in_child_entry(spec: dict) -> int:   # pragma: no cover -- runs in the learner's process
    """The in-child runner's process (judge.py's ``test``): the tests and the code here, as in a
    new interpreter started with ``runner.BOOTSTRAP``, without starting one (the tests' libraries
    are already imported; for exercise 01, torch). runner.py is executed afresh, as a module in no
    registry, so that the code's changes to the runner module the judge loaded reach nothing here."""
    import hashlib
    os.chdir(spec["home"])
    sys.dont_write_bytecode = True
    os.environ["PYTHONBREAKPOINT"] = "0"    # a breakpoint() while the file loads: ignored, as for BOOTSTRAP
    source = spec.pop("runner_source")
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    code = _RUNNER_CODE.get(digest) or compile(source, spec["runner_path"], "exec")
    module = types.ModuleType("judge_runner")
    module.__file__ = spec["runner_path"]
    exec(code, module.__dict__)
    try:
        return module.child_main(spec)
    except MemoryError:   # outside every test's guard: the judge names the limit from this status
        return module.EXIT_OUT_OF_MEMORY


_RUNNER_CODE: dict[str, types.CodeType] = {}   # sha256 of runner.py's text -> its code, compiled in the zygote


def _set_limits(memory_mb: int | None, cpu_seconds: float) -> None:
    try:
        import resource
    except ImportError:   # pragma: no cover -- not POSIX: the watchdog still limits time
        return
    wanted = [(resource.RLIMIT_CPU, int(cpu_seconds) + 1), (resource.RLIMIT_CORE, 0)]
    if memory_mb:
        wanted.append((resource.RLIMIT_AS, int(memory_mb) * 2**20))
    for which, value in wanted:
        try:
            soft, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, hard if which != resource.RLIMIT_AS else value))
        except (ValueError, OSError):
            pass


def child_main(spec: dict, runner: types.ModuleType, in_fd: int, out_fd: int, pending: bytes = b"") -> int:
    """The child: limits, the learner's file, then requests until the pipe closes.

    spec: {"solution", "starter" (or None), "preload" (modules the tests import), "timeout",
    "memory_mb", "cpu_total", "home" (the fresh working directory)}. First answer: ["R", ...] when
    the file loaded, or ["L", load error]; then one answer per request (see _Server.answer)."""
    import _thread

    protocol = os.dup(out_fd)
    os.dup2(2, out_fd)          # printing below Python lands on stderr, never in the protocol
    sys.stdin = open(os.devnull, encoding="utf-8")
    write_lock = _thread.allocate_lock()

    def send_bytes(data: bytes) -> None:
        with write_lock:
            view = memoryview(data)
            while view:
                view = view[os.write(protocol, view):]

    buffer = bytearray(pending)
    read, unpack = os.read, _HEADER.unpack_from
    loads = json.loads

    def recv() -> Any:
        while len(buffer) < 4 or len(buffer) < 4 + unpack(buffer)[0]:
            chunk = read(in_fd, 1 << 16)   # 64 KiB: a read of 1 MiB costs ~20 us of the kernel's time each
            if not chunk:
                return None
            buffer.extend(chunk)
        size = unpack(buffer)[0]
        message = loads(buffer[4:4 + size].decode("utf-8"))
        del buffer[:4 + size]
        return message

    os.chdir(spec["home"])
    sys.dont_write_bytecode = True   # nothing written next to the learner's files
    _set_limits(spec.get("memory_mb"), float(spec.get("cpu_total") or 600))
    preload = [n for n in spec.get("preload") or [] if n.split(".")[0] != runner.PACKAGE]   # sealed off below
    for name in preload + ["ctypes"]:   # ctypes: numpy imports it (then it is refused)
        try:
            __import__(name)
        except Exception:
            pass
    server = _Server(runner, spec["solution"], send_bytes, recv)
    server.memory_mb = spec.get("memory_mb")
    stderr = open(2, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)
    sys.stdout = sys.stderr = stderr   # what the file prints while it loads: the report's stderr
    sys.breakpointhook = runner._HELPERS["ignore_breakpoint"]
    main_thread = _thread.get_ident()

    def watchdog() -> None:
        while True:
            time.sleep(0.02)
            if time.process_time() > server.deadline[0]:
                frame = sys._current_frames().get(main_thread)
                where = runner._where_stuck(frame, spec["solution"], "") if frame is not None else None
                message = runner.timeout_message(server.timeout[0], server.printed.total())
                data = json.dumps(["X", message, {"yours": where}, server.take_printed()], default=repr).encode("utf-8")
                with write_lock:
                    os.write(protocol, _HEADER.pack(len(data)) + data)
                    os._exit(3)

    server.timeout[0] = float(spec.get("timeout") or 10)
    server.deadline[0] = time.process_time() + server.timeout[0]
    sys.path.insert(0, os.path.dirname(os.path.abspath(spec["solution"])))   # a solution may span two files
    sealed = runner.seal_off_package(spec.get("package_dir"))   # the tests run in the judge: nothing here needs it
    runner._install_guard(spec["home"], trusted=[globals()], sealed=sealed)
    _thread.start_new_thread(watchdog, ())
    try:
        module = runner.load_solution(spec["solution"], spec.get("starter"))
    except runner.LoadError as exc:
        stderr.flush()
        server.send(["L", exc.info])
        return 0
    stderr.flush()
    sys.stdout = sys.stderr = server.printed   # from here on, printing is the tests' output
    server.deadline[0] = float("inf")
    sys.modules[runner.SOLUTION_MODULE] = module
    server.module = module
    server.objects[0] = module
    server.send(["R", None, [], server.take_printed(), []])
    server.serve()
    return 0


def spawn(stderr_fd: int | None = None) -> tuple[int, int, int]:
    """A new process forked from the zygote, in a session of its own: (its pid, the descriptor
    that writes to its stdin, the one that reads its stdout); its stderr is ``stderr_fd``
    (/dev/null without one). It waits for one message on stdin, its spec (``_child_entry``)."""
    start_zygote()
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    err_fd = stderr_fd if stderr_fd is not None else os.open(os.devnull, os.O_WRONLY)
    import socket
    try:
        with _ZYGOTE_LOCK:
            sock = _ZYGOTE["socket"]
            socket.send_fds(sock, [b"go"], [to_child_r, from_child_w, err_fd])
            answer = b""
            while len(answer) < 4:
                chunk = sock.recv(4 - len(answer))
                if not chunk:
                    raise OSError("the judge's zygote process ended")
                answer += chunk
        pid = _HEADER.unpack(answer)[0]
    except BaseException:
        os.close(to_child_w)
        os.close(from_child_r)
        raise
    finally:
        for fd in (to_child_r, from_child_w) + (() if stderr_fd is not None else (err_fd,)):
            os.close(fd)
    return pid, to_child_w, from_child_r


def start(spec: dict, *, runner_module: str, wall_limit: float = 60.0, load_wall_limit: float = 180.0,
          stderr: Any = None) -> tuple[Link, dict | None]:
    """Start a learner's process for ``spec`` (see child_main); return its Link and its load
    error (or None). ``runner_module``: the name runner.py has in sys.modules. The judge spends
    on one message of the child's at most what the child may use (``spec["memory_mb"]``)."""
    pid, to_child_w, from_child_r = spawn(stderr.fileno() if stderr is not None else None)
    link = Link(to_child_w, from_child_r, pid, load_wall_limit,
                budget=int(spec["memory_mb"]) * 2**20 if spec.get("memory_mb") else DEFAULT_BUDGET)
    link.describe_exit = functools.partial(sys.modules[runner_module].describe_exit, memory_mb=spec.get("memory_mb"),
                                           cpu_seconds=spec.get("cpu_total"))
    link.send({**spec, "runner_module": runner_module})
    answer_ = _first_answer(link)
    link.wall_limit = wall_limit
    return link, answer_


def _first_answer(link: Link) -> dict | None:
    """The child's first answer: None when the file loaded, else the load error (a dict)."""
    try:
        answer = link.receive()
    except JudgeStop as stop:
        if stop.verdict == "timeout":
            return {"verdict": "timeout", "message": "your file did not finish loading in time "
                                                     "(an endless loop at module level?)"}
        return {"verdict": "runtime error", "message": "the Python process ended while loading your file "
                                                       f"({stop.message})"}
    if isinstance(answer, list) and answer[:1] == ["R"]:
        return None
    if isinstance(answer, list) and answer[:1] == ["X"]:
        cleaned = _clean_where(answer[2] if len(answer) > 2 else None)
        link.stopped = JudgeStop("timeout", "")
        return {"verdict": "timeout", "message": "your file did not finish loading within the time limit "
                                                 "(an endless loop at module level?)",
                "where": cleaned.get("yours") if cleaned else None}
    if isinstance(answer, list) and len(answer) == 2 and answer[0] == "L" and isinstance(answer[1], dict):
        info = answer[1]
        verdict = info.get("verdict") if info.get("verdict") in ("compile error", "runtime error", "refused") else (
            "runtime error")
        clean: dict[str, Any] = {"verdict": verdict, "message": str(info.get("message", ""))[:2000]}
        if type(info.get("lineno")) is int:
            clean["lineno"] = info["lineno"]
        for key in ("line", "pointer"):
            if isinstance(info.get(key), str):
                clean[key] = info[key][:2000]
        for key in ("missing", "borrowed"):
            if isinstance(info.get(key), list):
                clean[key] = [str(m)[:300] for m in info[key][:50]]
        return clean
    link.stopped = JudgeStop("runtime error", "the child process did not answer as expected")
    return {"verdict": "runtime error", "message": "the child process did not answer as expected (its end of the "
                                                   "judge's pipe was tampered with)"}


def close(link: Link) -> None:
    """End the learner's process and anything it started in its session."""
    for fd in (link.send_fd, link.recv_fd):
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        os.killpg(link.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
