"""kv_wire.py - KV events as bytes, exactly as vLLM 0.33.0 puts them on the wire.

A router in another process reads an engine's KV events (:mod:`nano_engine.kv_events`) from a
socket, so both sides must agree on bytes. This module speaks vLLM's format, so a real vLLM could
feed this package's router and this package's engine could feed any vLLM consumer (llm-d, Dynamo,
Mooncake's Conductor). The format (vLLM 0.33.0, ``vllm/distributed/kv_events.py``, read from the
released wheel):

- A **batch** (``EventBatch`` / ``KVEventBatch``): a msgspec struct with ``array_like=True,
  omit_defaults=True``, so it is a msgpack *array* ``[ts, events, data_parallel_rank]`` (the rank
  ``nil`` when it is ``None``: msgspec 0.22 writes an array-like struct's fields all, defaults too).
- Each **event** (base ``KVCacheEvent``, ``tag=True, omit_defaults=True``, not array-like): a
  msgpack *map* whose ``"type"`` key is the class name, ``"BlockStored"``, ``"BlockRemoved"`` or
  ``"AllBlocksCleared"``; fields with a default are left out while they hold it.
- ``BlockStored``, in field order: ``block_hashes: list[bytes | int]``, ``parent_block_hash: bytes |
  int | None``, ``token_ids: list[int]``, ``block_size: int``, ``lora_id: int | None`` (deprecated),
  ``medium: str | None``, ``lora_name: str | None`` (these seven are always written, even when
  ``None``), then, defaulting to ``None`` and omitted when ``None``: ``extra_keys: list[tuple | None]``,
  ``group_idx: int``, ``kv_cache_spec_kind: str``, ``kv_cache_spec_sliding_window: int``,
  ``locality: str``, ``ownership: str``, ``session_id: str``, ``lookahead_token_ids: list[list[int]]``.
- ``BlockRemoved``: ``block_hashes``, ``medium`` (always written), then ``group_idx``, ``locality``,
  ``ownership`` (omitted when ``None``). ``AllBlocksCleared``: no field, ``{"type": "AllBlocksCleared"}``.

vLLM 0.33.0's block pool always sets ``group_idx`` (the KV-cache group: ``BlockPool.cache_full_blocks``
and ``_emit_block_removed_events`` in ``vllm/v1/core/block_pool.py``), and its ``KVCacheManager.take_events``
sets ``kv_cache_spec_kind`` on every ``BlockStored`` (``"full_attention"`` for a model like Qwen3), so
both are on the wire although they default to ``None``. So a batch with one event of each kind reads,
as msgpack decodes it (a vLLM 0.26 ``BlockStored`` captured in volcano-sh/kthena issue #1535 has the
same fields)::

    [1789095808.84, [{"type": "BlockStored", "block_hashes": [15760518052499183552],
                      "parent_block_hash": None, "token_ids": [...], "block_size": 16,
                      "lora_id": None, "medium": "GPU", "lora_name": None, "extra_keys": [None],
                      "group_idx": 0, "kv_cache_spec_kind": "full_attention"},
                     {"type": "BlockRemoved", "block_hashes": [...], "medium": "GPU", "group_idx": 0},
                     {"type": "AllBlocksCleared"}], 0]

A hash (vLLM's ``ExternalBlockHash = bytes | int``) is an int by default: the low 64 bits of the
digest (``maybe_convert_block_hash``), which is what this package's vLLM-mode pool publishes
(``PrefixCachingBlockPool(..., vllm=True).event_hash``). msgpack's ints stop at 64 bits, so the
chapter pool's ``hash_algo="sha256"`` (256-bit ints) cannot be sent: use the vLLM-mode pool.

Where this package's dataclasses differ, the conversion here decides, in one place each:

- ``lora_id`` is vLLM's integer adapter id; this package lets it be any hashable (a name, a
  ``(name, path)`` pair). A non-int ``lora_id`` goes on the wire as ``None`` (the name travels in
  ``lora_name``, which, with the adapter's path, is what vLLM hashes, and what consumers key on).
- ``medium`` is ``str | None`` in vLLM and always set by its block pool (``"GPU"``); this package's
  field is a ``str``, so a ``None`` read from the wire becomes ``"GPU"``.
- ``extra_keys`` come back as tuples all the way down (msgpack has one array type), as the pool
  published them.

Decoding ignores map keys it does not know (msgspec's default), so a newer vLLM's extra fields do
not break it; an unknown ``"type"`` or a malformed payload raises :class:`WireError`, whatever the
bytes (a string that is not UTF-8, arrays nested past :data:`MAX_DEPTH` included). Encoding refuses,
with a :class:`WireError` naming the event and the field, any event this decoder or vLLM's would
refuse (a field of the wrong type): a subscriber drops a whole batch it cannot decode, so one bad
event would cost every subscriber the good events beside it.

Where the 0.33 format came from: until vLLM 0.23 events were positional arrays too
(``["BlockStored", hashes, parent, ...]``); PR #42892 (merged 2026-06-09) made them maps while the
batch stayed an array, which broke consumers that decoded each event as an array ("every KV event
from a new vLLM fails to parse", llm-d-kv-cache PR #661; volcano-sh/kthena issue #1535). Dynamo's
Rust decoder already read both shapes; its issue #10660 was a stale Python test. vLLM 0.34.0 leaves
the format as it is (``vllm/distributed/kv_events.py`` is unchanged).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import Any

import msgspec

from nano_engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

EVENT_TAGS = ("BlockStored", "BlockRemoved", "AllBlocksCleared")
_MIN_INT, _MAX_INT = -(1 << 63), (1 << 64) - 1       # what a msgpack int holds
MAX_DEPTH = 32
"""How deep a block's ``extra_keys`` entry may nest (vLLM 0.33's are at most 2 deep: a block's tuple of
strings and ``(identifier, offset)`` pairs, ``kv_cache_utils.to_event_extra_keys``); deeper ones are
refused both ways, before they can exhaust a consumer's stack."""


class WireError(ValueError):
    """Bytes that are not a vLLM 0.33 KV event batch, or an event that cannot be written as one."""


# -- the wire schema: vLLM 0.33's structs, field for field (names, order, types, options) ---------

class _Event(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    pass


class _BlockStored(_Event, tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class _BlockRemoved(_Event, tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class _AllBlocksCleared(_Event, tag="AllBlocksCleared"):
    pass


class _Batch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[_BlockStored | _BlockRemoved | _AllBlocksCleared]
    data_parallel_rank: int | None = None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Batch)


# -- package dataclasses <-> wire structs -----------------------------------------------------------

def _wire_hash(h: Hashable, what: str) -> int | bytes:
    if isinstance(h, bytes):
        return h
    if isinstance(h, int) and not isinstance(h, bool):
        if not _MIN_INT <= h <= _MAX_INT:
            raise WireError(f"{what} {h} does not fit in 64 bits (msgpack's ints); publish the low 64 bits, "
                            "as vLLM does (the vLLM-mode pool's event_hash)")
        return h
    raise WireError(f"{what} must be an int or bytes (vLLM's ExternalBlockHash), got {type(h).__name__}: {h!r}")


def _optional_str(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise WireError(f"{what} must be a str or None on vLLM's wire, got {type(value).__name__}: {value!r}")


def _depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep lists and tuples nest in ``value`` (0 for a scalar), counting no further than
    ``limit + 1``; iterative, so that no input exhausts the stack."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple)):
            deepest = max(deepest, depth + 1)
            if depth + 1 <= limit:
                stack.extend((v, depth + 1) for v in item)
    return deepest


def _extra_keys(keys: Any) -> Any:
    if keys is not None and _depth(keys, MAX_DEPTH + 1) > MAX_DEPTH + 1:   # + 1: the list of per-block entries
        raise WireError(f"extra_keys nest deeper than {MAX_DEPTH} levels (vLLM's are at most 2)")
    return keys


def _to_wire(event: KVEvent) -> _BlockStored | _BlockRemoved | _AllBlocksCleared:
    if isinstance(event, BlockStored):
        return _BlockStored(
            block_hashes=[_wire_hash(h, "block hash") for h in event.block_hashes],
            parent_block_hash=None if event.parent_block_hash is None
            else _wire_hash(event.parent_block_hash, "parent_block_hash"),
            token_ids=list(event.token_ids),
            block_size=event.block_size,
            lora_id=event.lora_id if isinstance(event.lora_id, int) and not isinstance(event.lora_id, bool) else None,
            medium=event.medium,
            lora_name=_optional_str(event.lora_name, "lora_name"),
            extra_keys=None if event.extra_keys is None else _extra_keys(list(event.extra_keys)),
            group_idx=event.group_idx,
            kv_cache_spec_kind=event.kv_cache_spec_kind,
            kv_cache_spec_sliding_window=event.kv_cache_spec_sliding_window,
            locality=event.locality,
            ownership=event.ownership,
            session_id=event.session_id,
            lookahead_token_ids=event.lookahead_token_ids,
        )
    if isinstance(event, BlockRemoved):
        return _BlockRemoved(block_hashes=[_wire_hash(h, "block hash") for h in event.block_hashes],
                             medium=event.medium, group_idx=event.group_idx, locality=event.locality,
                             ownership=event.ownership)
    if isinstance(event, AllBlocksCleared):
        return _AllBlocksCleared()
    raise TypeError(f"not a KV event: {event!r}")


def _tuples(value: Any, depth: int = 0) -> Any:
    """msgpack arrays back to tuples, all the way down (extra keys are hashable tuples); WireError
    past ``MAX_DEPTH`` levels, checked on the way down (so the recursion stays shallow)."""
    if not isinstance(value, (list, tuple)):
        return value
    if depth >= MAX_DEPTH:
        raise WireError(f"extra_keys nest deeper than {MAX_DEPTH} levels (vLLM's are at most 2)")
    return tuple(_tuples(v, depth + 1) for v in value)


def _extra_keys_back(keys: list | None) -> list | None:
    return None if keys is None else [_tuples(k) for k in keys]


def _from_wire(event: _BlockStored | _BlockRemoved | _AllBlocksCleared) -> KVEvent:
    if isinstance(event, _BlockStored):
        return BlockStored(
            block_hashes=list(event.block_hashes),
            parent_block_hash=event.parent_block_hash,
            token_ids=event.token_ids,
            block_size=event.block_size,
            lora_id=event.lora_id,
            extra_keys=_extra_keys_back(event.extra_keys),
            medium="GPU" if event.medium is None else event.medium,
            lora_name=event.lora_name,
            group_idx=event.group_idx,
            kv_cache_spec_kind=event.kv_cache_spec_kind,
            kv_cache_spec_sliding_window=event.kv_cache_spec_sliding_window,
            locality=event.locality,
            ownership=event.ownership,
            session_id=event.session_id,
            lookahead_token_ids=event.lookahead_token_ids,
        )
    if isinstance(event, _BlockRemoved):
        return BlockRemoved(block_hashes=list(event.block_hashes),
                            medium="GPU" if event.medium is None else event.medium,
                            group_idx=event.group_idx, locality=event.locality, ownership=event.ownership)
    return AllBlocksCleared()


# -- the two functions --------------------------------------------------------------------------------

def encode_batch(events: Sequence[KVEvent], ts: float, data_parallel_rank: int | None = None) -> bytes:
    """One batch of events as vLLM 0.33's ``msgpack(KVEventBatch(ts, events, data_parallel_rank))``.

    Raises :class:`WireError` for an event that vLLM's format cannot hold, naming the event and the
    field: a hash that is neither bytes nor a 64-bit int, a field of another type than vLLM's
    (``token_ids=['x']``, ``block_size='2'`` or ``True``, ``medium=5``, ``group_idx='0'``, ...), an
    int msgpack cannot write, extra keys nested past :data:`MAX_DEPTH`. The bytes are checked by
    decoding them with the wire schema (vLLM's types), so nothing leaves that a consumer would drop.
    """
    try:
        ts = float(ts)
    except (TypeError, ValueError):
        raise WireError(f"ts must be a number (seconds since the epoch), got {type(ts).__name__}: {ts!r}") from None
    structs = []
    for i, event in enumerate(events):
        try:
            structs.append(_to_wire(event))
        except WireError as error:
            raise WireError(f"KV event {i} ({type(event).__name__}): {error}") from None
    batch = _Batch(ts=ts, events=structs, data_parallel_rank=data_parallel_rank)
    try:
        payload = _encoder.encode(batch)
    except (TypeError, OverflowError, msgspec.EncodeError) as error:
        raise WireError(f"KV event batch cannot be encoded in vLLM's format: {_unencodable(batch, events)}: "
                        f"{error}") from None
    try:
        _decoder.decode(payload)
    except msgspec.ValidationError as error:
        raise WireError(f"KV event batch not written: {_field_of(error, events)}") from None
    return payload


def _unencodable(batch: _Batch, events: Sequence[KVEvent]) -> str:
    """Which field msgspec could not write (the first one that fails alone)."""
    for name in ("ts", "data_parallel_rank"):
        try:
            _encoder.encode(getattr(batch, name))
        except (TypeError, OverflowError, msgspec.EncodeError):
            return name
    for i, struct in enumerate(batch.events):
        for name in struct.__struct_fields__:
            try:
                _encoder.encode(getattr(struct, name))
            except (TypeError, OverflowError, msgspec.EncodeError):
                return f"KV event {i} ({type(events[i]).__name__}), field {name}"
    return "a value"


_PATH = re.compile(r"^(?P<what>.*) - at `\$\[(?P<top>\d+)\](?:\[(?P<index>\d+)\]\.?(?P<field>\S*))?`$")


def _field_of(error: msgspec.ValidationError, events: Sequence[KVEvent]) -> str:
    """msgspec's "Expected `int`, got `str` - at `$[1][0].block_size`" as "KV event 0 (BlockStored),
    field block_size: expected `int`, got `str`"."""
    found = _PATH.match(str(error))
    if found is None:
        return str(error)
    what = found["what"][0].lower() + found["what"][1:]
    if found["index"] is None:
        return f"{('ts', 'events', 'data_parallel_rank')[int(found['top'])]}: {what}"
    i = int(found["index"])
    return f"KV event {i} ({type(events[i]).__name__}), field {found['field'] or '?'}: {what}"


_LEGACY_EVENT = re.compile(r"Expected `object`, got `array` - at `\$\[1\]\[\d+\]`")
_UNKNOWN_TAG = re.compile(r"Invalid value (?P<tag>.+) - at `\$\[1\]\[(?P<index>\d+)\]\.type`")


def decode_batch(payload: bytes) -> tuple[float, list[KVEvent], int | None]:
    """``(ts, events, data_parallel_rank)`` from a vLLM 0.33 batch's bytes (the third ZMQ frame).

    Raises :class:`WireError`, and nothing else, for any bytes that are not such a batch: not
    msgpack, not a ``[ts, events(, rank)]`` array, an event whose ``"type"`` is not one of
    ``EVENT_TAGS`` or whose fields have wrong types, a string that is not UTF-8, arrays nested
    past :data:`MAX_DEPTH` in ``extra_keys`` (or too deep for msgspec at all).
    """
    try:
        batch = _decoder.decode(payload)
        return batch.ts, [_from_wire(e) for e in batch.events], batch.data_parallel_rank
    except msgspec.ValidationError as error:
        unknown = _UNKNOWN_TAG.search(str(error))
        if unknown:
            raise WireError(f"unknown KV event tag {unknown['tag']} (event {unknown['index']} of the batch; "
                            f"known: {', '.join(EVENT_TAGS)})") from None
        legacy = _LEGACY_EVENT.search(str(error))
        hint = (" (events as arrays: the positional format of vLLM until 0.23, which PR #42892 replaced by "
                "tagged maps; this decoder reads 0.33's maps)") if legacy else ""
        raise WireError(f"not a vLLM KV event batch: {error}{hint}") from None
    except msgspec.DecodeError as error:
        raise WireError(f"malformed KV event batch ({len(payload)} bytes are not msgpack: {error})") from None
    except UnicodeDecodeError as error:
        raise WireError(f"not a vLLM KV event batch: a string is not UTF-8 ({error.reason} at byte "
                        f"{error.start} of the string)") from None
    except RecursionError:
        raise WireError(f"not a vLLM KV event batch: arrays nested too deep to decode (extra keys may nest "
                        f"{MAX_DEPTH} levels)") from None
