"""kv_wire against an independent transcription of vLLM 0.33.0's structs, both ways.

The classes below are written from ``vllm/distributed/kv_events.py`` of the vLLM 0.33.0 wheel
(``EventBatch`` l. 31, ``KVCacheEvent`` l. 42, ``BlockStored`` l. 56, ``BlockRemoved`` l. 123,
``AllBlocksCleared`` l. 144, ``KVEventBatch`` l. 148): the same names, fields, order, types and
msgspec options, decoded and encoded by msgspec as a vLLM consumer / publisher would. If our bytes
decode with them, a vLLM consumer reads our engine; if theirs decode with ours, our router reads vLLM.
"""

from __future__ import annotations

import ast
import os
import zipfile
from collections import Counter
from dataclasses import replace
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings, strategies as st
from kv_event_helpers import pool_events

from nano_engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, replay
from nano_engine.kv_wire import WireError, decode_batch, encode_batch

# -- vLLM 0.33.0, transcribed --------------------------------------------------------------------

ExternalBlockHash = bytes | int          # vllm/v1/core/kv_cache_utils.py l. 57


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class VBlockStored(KVCacheEvent, tag="BlockStored"):   # vLLM's class is named BlockStored (tag = name)
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
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


class VBlockRemoved(KVCacheEvent, tag="BlockRemoved"):
    block_hashes: list[ExternalBlockHash]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class VAllBlocksCleared(KVCacheEvent, tag="AllBlocksCleared"):
    pass


class KVEventBatch(EventBatch):
    events: list[VBlockStored | VBlockRemoved | VAllBlocksCleared]


vllm_decoder = msgspec.msgpack.Decoder(KVEventBatch)
vllm_encoder = msgspec.msgpack.Encoder()     # ZmqEventPublisher._publisher_thread: msgspec.msgpack.Encoder()


# -- helpers ------------------------------------------------------------------------------------------

def to_vllm(event, structs=None) -> Any:
    """Our event as vLLM's struct, field by field (what a vLLM engine would have published);
    ``structs``: the three classes to build (the transcription by default)."""
    stored_cls, removed_cls, cleared_cls = structs or (VBlockStored, VBlockRemoved, VAllBlocksCleared)
    if isinstance(event, BlockStored):
        return stored_cls(block_hashes=list(event.block_hashes), parent_block_hash=event.parent_block_hash,
                          token_ids=list(event.token_ids), block_size=event.block_size,
                          lora_id=event.lora_id if isinstance(event.lora_id, int) else None,
                          medium=event.medium, lora_name=event.lora_name,
                          extra_keys=event.extra_keys, group_idx=event.group_idx,
                          kv_cache_spec_kind=event.kv_cache_spec_kind,
                          kv_cache_spec_sliding_window=event.kv_cache_spec_sliding_window, locality=event.locality,
                          ownership=event.ownership, session_id=event.session_id,
                          lookahead_token_ids=event.lookahead_token_ids)
    if isinstance(event, BlockRemoved):
        return removed_cls(block_hashes=list(event.block_hashes), medium=event.medium, group_idx=event.group_idx,
                           locality=event.locality, ownership=event.ownership)
    return cleared_cls()


def as_plain(value):
    """Compare across the two class families: structs and dataclasses as plain builtins."""
    return msgspec.to_builtins(value)


# -- tests ----------------------------------------------------------------------------------------------

def test_our_bytes_decode_with_vllms_structs():
    events = pool_events() + [AllBlocksCleared()]
    assert {type(e) for e in events} == {BlockStored, BlockRemoved, AllBlocksCleared}
    assert any(e.lora_name for e in events if isinstance(e, BlockStored))
    payload = encode_batch(events, ts=1789095808.84, data_parallel_rank=0)
    batch = vllm_decoder.decode(payload)
    assert batch.ts == 1789095808.84 and batch.data_parallel_rank == 0
    assert as_plain(batch.events) == as_plain([to_vllm(e) for e in events])
    # and byte for byte what vLLM's own encoder writes for the same batch
    assert payload == vllm_encoder.encode(KVEventBatch(ts=1789095808.84, events=[to_vllm(e) for e in events],
                                                       data_parallel_rank=0))


def test_vllms_bytes_decode_with_ours():
    events = pool_events(seed=1)
    payload = vllm_encoder.encode(KVEventBatch(ts=12.5, events=[to_vllm(e) for e in events] + [VAllBlocksCleared()]))
    ts, decoded, rank = decode_batch(payload)
    assert (ts, rank) == (12.5, None)
    # the package's dataclasses, equal field by field (vLLM's lora_id is an int: the pool's name is in lora_name)
    expected = [replace(e, lora_id=None) if isinstance(e, BlockStored) and not isinstance(e.lora_id, int) else e
                for e in events]
    assert any(e != x for e, x in zip(events, expected, strict=True))
    assert decoded == expected + [AllBlocksCleared()]
    # the index a router builds from vLLM's bytes is the one the pool's own events give
    assert replay(decoded[:-1], Counter()) == replay(events, Counter()) != set()
    assert replay(decoded, Counter()) == set()


def test_all_of_vllms_fields_come_through():
    stored = VBlockStored(block_hashes=[b"\x01" * 32, 2**64 - 1], parent_block_hash=-5, token_ids=[1, 2, 3, 4],
                          block_size=2, lora_id=7, medium="CPU", lora_name="ada",
                          extra_keys=[("ada", ("img", 3), "salt"), None], group_idx=1,
                          kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=128,
                          locality="LOCAL", ownership="disk0", session_id="s1", lookahead_token_ids=[[5], [6]])
    removed = VBlockRemoved(block_hashes=[3], medium="GPU", group_idx=1, locality="REMOTE", ownership="x")
    payload = vllm_encoder.encode(KVEventBatch(ts=1.0, events=[stored, removed], data_parallel_rank=3))
    ts, (ours_stored, ours_removed), rank = decode_batch(payload)
    assert rank == 3
    assert ours_stored == BlockStored(
        block_hashes=[b"\x01" * 32, 2**64 - 1], parent_block_hash=-5, token_ids=[1, 2, 3, 4], block_size=2,
        lora_id=7, extra_keys=[("ada", ("img", 3), "salt"), None], medium="CPU", lora_name="ada", group_idx=1,
        kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=128, locality="LOCAL",
        ownership="disk0", session_id="s1", lookahead_token_ids=[[5], [6]])
    assert ours_removed == BlockRemoved([3], medium="GPU", group_idx=1, locality="REMOTE", ownership="x")
    # and back: our bytes are vLLM's bytes
    assert encode_batch([ours_stored, ours_removed], ts, rank) == payload


def test_vllm_mode_events_carry_the_group_as_vllm_writes_them():
    """vLLM 0.33 always writes ``group_idx`` (block_pool.py: ``_build_block_stored_event``,
    ``_emit_block_removed_events``) and, on BlockStored, the group's ``kv_cache_spec_kind``
    (``KVCacheManager.take_events``); a one-group full-attention model has group 0."""
    events = pool_events(40, seed=3)
    stored = [e for e in events if isinstance(e, BlockStored)]
    removed = [e for e in events if isinstance(e, BlockRemoved)]
    assert stored and removed, "the helper's pool stores and evicts"
    assert {(e.group_idx, e.kv_cache_spec_kind, e.kv_cache_spec_sliding_window) for e in stored} == \
        {(0, "full_attention", None)}, "BlockStored: group 0, full attention, no window"
    assert {e.group_idx for e in removed} == {0}, "BlockRemoved: group 0"
    plain = msgspec.msgpack.decode(encode_batch(events, 1.0))
    stored_keys = {tuple(e) for e in plain[1] if e["type"] == "BlockStored"}
    assert stored_keys == {("type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                            "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind")}, \
        "on the wire: vLLM's seven fields, extra_keys, group_idx and kv_cache_spec_kind"
    assert {tuple(e) for e in plain[1] if e["type"] == "BlockRemoved"} == \
        {("type", "block_hashes", "medium", "group_idx")}, "BlockRemoved: with group_idx"


VLLM_WHEEL = os.environ.get("NANO_ENGINE_VLLM_WHEEL")


def vllm_own_structs(source: str) -> dict[str, Any]:
    """vLLM's event structs, executed from the source of ``vllm/distributed/kv_events.py`` alone: its
    constants and the six struct classes, without importing the rest of vLLM (only msgspec)."""
    wanted = {"EventBatch", "KVCacheEvent", "BlockStored", "BlockRemoved", "AllBlocksCleared", "KVEventBatch"}
    tree = ast.parse(source)
    body = [node for node in tree.body if (isinstance(node, ast.ClassDef) and node.name in wanted)
            or (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id.startswith("MEDIUM_")
                                                     for t in node.targets))]
    assert {n.name for n in body if isinstance(n, ast.ClassDef)} == wanted, "vLLM's file changed shape"
    namespace: dict[str, Any] = {"__name__": "vllm_kv_events", "msgspec": msgspec, "Any": Any,
                                 "ExternalBlockHash": bytes | int}     # vllm/v1/core/kv_cache_utils.py l. 57
    code = compile(ast.Module(body=body, type_ignores=[]), "vllm/distributed/kv_events.py", "exec", dont_inherit=True)
    exec(code, namespace)     # as the file runs it: without this test file's `from __future__ import annotations`
    return namespace


@pytest.mark.skipif(not VLLM_WHEEL, reason="set NANO_ENGINE_VLLM_WHEEL to vLLM 0.33.0's wheel (pip download "
                                           "--no-deps vllm==0.33.0) to decode with vLLM's own structs")
def test_our_bytes_decode_with_vllms_own_structs_from_its_wheel():
    """Not the transcription: the classes of the released file, read out of the wheel."""
    with zipfile.ZipFile(VLLM_WHEEL) as wheel:
        version = wheel.read("vllm/_version.py").decode()
        vllm = vllm_own_structs(wheel.read("vllm/distributed/kv_events.py").decode())
    assert "'0.33.0'" in version or '"0.33.0"' in version, "the wheel is vLLM 0.33.0"
    events = pool_events(40, seed=3) + [AllBlocksCleared()]
    payload = encode_batch(events, ts=17.25, data_parallel_rank=0)
    batch = msgspec.msgpack.Decoder(vllm["KVEventBatch"]).decode(payload)
    structs = (vllm["BlockStored"], vllm["BlockRemoved"], vllm["AllBlocksCleared"])
    assert batch.events == [to_vllm(e, structs) for e in events], "vLLM reads every field as we meant it"
    stored = [e for e in batch.events if isinstance(e, vllm["BlockStored"])]
    assert {(e.group_idx, e.kv_cache_spec_kind, e.medium) for e in stored} == {(0, "full_attention", "GPU")}
    assert msgspec.msgpack.Encoder().encode(batch) == payload, "vLLM would write the same bytes"
    # and vLLM's bytes read back as our events (vLLM's lora_id is an int: the pool's name is in lora_name)
    expected = [replace(e, lora_id=None) if isinstance(e, BlockStored) and not isinstance(e.lora_id, int) else e
                for e in events]
    assert decode_batch(msgspec.msgpack.Encoder().encode(batch)) == (17.25, expected, 0)


def test_wire_shape_is_an_array_of_tagged_maps():
    """B.1's shape: ``[ts, [{"type": ...}, ...], rank]``, the seven fields of BlockStored always written."""
    payload = encode_batch([BlockStored([1], None, [9, 9], 2, None, [None]), BlockRemoved([1]), AllBlocksCleared()], 2.0, 0)
    plain = msgspec.msgpack.decode(payload)
    assert plain == [2.0, [
        {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [9, 9], "block_size": 2,
         "lora_id": None, "medium": "GPU", "lora_name": None, "extra_keys": [None]},
        {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU"},
        {"type": "AllBlocksCleared"}], 0]


def test_package_specific_values_map_to_vllms_types():
    # a non-int lora_id (this package allows names) goes out as None; the name is in lora_name
    payload = encode_batch([BlockStored([1], None, [1], 1, ("ada", "/p"), None, lora_name="ada")], 0.0)
    (event,) = vllm_decoder.decode(payload).events
    assert event.lora_id is None and event.lora_name == "ada" and event.extra_keys is None
    # a medium vLLM leaves unset reads as the device pool's
    payload = vllm_encoder.encode(KVEventBatch(ts=0.0, events=[VBlockRemoved(block_hashes=[1], medium=None)]))
    assert decode_batch(payload)[1] == [BlockRemoved([1], medium="GPU")]


@pytest.mark.parametrize("payload, message", [
    (b"\xc1", "not msgpack"),
    (b"", "not msgpack"),
    (msgspec.msgpack.encode({"ts": 1.0}), "not a vLLM KV event batch"),
    (msgspec.msgpack.encode([1.0, [{"type": "BlockStored"}]]), "missing required field"),
    (msgspec.msgpack.encode([1.0, [{"type": "BlockRemoved", "block_hashes": ["x"], "medium": "GPU"}]]),
     "not a vLLM KV event batch"),
    (msgspec.msgpack.encode([1.0, [{"type": "AllBlocksCleared"}, {"type": "BlockEvicted", "block_hashes": [1]}]]),
     "unknown KV event tag 'BlockEvicted' (event 1"),
    (msgspec.msgpack.encode([1.0, [["BlockStored", [1], None, [1], 1, None, "GPU"]]]), "positional format"),
], ids=["bad-opcode", "empty", "a-map", "missing-field", "str-hash", "unknown-tag", "legacy-array-events"])
def test_malformed_payloads_raise_wire_error(payload, message):
    with pytest.raises(WireError) as info:
        decode_batch(payload)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("event, message", [
    (BlockRemoved([1 << 64]), "does not fit in 64 bits"),
    (BlockRemoved([("a", 1)]), "must be an int or bytes"),
    (BlockStored([1], None, [1], 1, None, None, lora_name=("a", "b")), "lora_name must be a str"),
    (BlockStored([1], None, [1], 1, None, [(object(),)]), "cannot be encoded"),
])
def test_unencodable_events_raise_wire_error(event, message):
    with pytest.raises(WireError) as info:
        encode_batch([event], 0.0)
    assert message in str(info.value)


def stored_map(**fields) -> dict:
    """A BlockStored as vLLM's msgpack map, with ``fields`` replaced."""
    event = {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [1, 2],
             "block_size": 2, "lora_id": None, "medium": "GPU", "lora_name": None}
    event.update(fields)
    return event


def nested(depth: int) -> bytes:
    """A batch whose one block's extra keys nest ``depth`` arrays deep (raw msgpack: any depth)."""
    head = msgspec.msgpack.encode([1.0, [stored_map(extra_keys=[["X"]])]])
    return head.replace(b"\x91\xa1X", b"\x91" + b"\x91" * depth + b"\xc0")


def not_utf8(payload: bytes, text: bytes) -> bytes:
    """``payload`` with the msgpack string ``text`` replaced by as many bytes that are not UTF-8."""
    target = bytes([0xA0 | len(text)]) + text
    assert payload.count(target) == 1
    return payload.replace(target, bytes([0xA0 | len(text)]) + b"\xff" * len(text))


@pytest.mark.parametrize("payload, message", [
    (nested(500), "nest deeper than 32 levels"),
    (nested(5000), "nested too deep to decode"),
    (nested(100_000), "nested too deep to decode"),
    (not_utf8(msgspec.msgpack.encode([1.0, [stored_map()]]), b"GPU"), "a string is not UTF-8"),
    (not_utf8(msgspec.msgpack.encode([1.0, [stored_map(lora_name="ada")]]), b"ada"), "a string is not UTF-8"),
    (not_utf8(msgspec.msgpack.encode([1.0, [{"type": "AllBlocksCleared"}]]), b"AllBlocksCleared"),
     "a string is not UTF-8"),
], ids=["extra-keys-500-deep", "5000-deep", "100000-deep", "medium-not-utf8", "lora-name-not-utf8", "tag-not-utf8"])
def test_hostile_payloads_raise_wire_error_and_nothing_else(payload, message):
    with pytest.raises(WireError, match=message):
        decode_batch(payload)


def test_extra_keys_at_the_depth_limit_still_decode():
    assert decode_batch(nested(31))[1][0].extra_keys is not None, "32 levels in a block's entry are allowed"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.builds(lambda ev, cut: msgspec.msgpack.encode([1.0, [ev]])[:cut],
                                            st.builds(stored_map), st.integers(0, 120)))
def test_any_bytes_decode_or_raise_wire_error(payload):
    try:
        decode_batch(payload)
    except WireError:
        pass


@pytest.mark.parametrize("event, field", [
    (BlockStored([1], None, ["x"], 2, None, None), "field token_ids[0]: expected `int`, got `str`"),
    (BlockStored([1], None, [True], 2, None, None), "field token_ids[0]: expected `int`, got `bool`"),
    (BlockStored([1], None, [1, 2], "2", None, None), "field block_size: expected `int`, got `str`"),
    (BlockStored([1], None, [1, 2], True, None, None), "field block_size: expected `int`, got `bool`"),
    (BlockStored([1], None, [1, 2], 2, None, None, medium=5), "field medium: expected `str | null`, got `int`"),  # type: ignore[arg-type]
    (BlockStored([1], None, [1, 2], 2, None, None, group_idx="0"), "field group_idx: expected `int | null`"),  # type: ignore[arg-type]
    (BlockRemoved([1], group_idx=True), "KV event 1 (BlockRemoved), field group_idx"),
    (BlockStored([1], None, [1, 2], 2, None, ["ab"]), "field extra_keys[0]: expected `array | null`"),  # type: ignore[list-item]
    (BlockStored([1], None, [1, 2], 2, None, None, kv_cache_spec_kind=3), "field kv_cache_spec_kind"),  # type: ignore[arg-type]
    (BlockStored([1], None, [1, 2], 2, None, None, lookahead_token_ids=[["a"]]),  # type: ignore[list-item]
     "field lookahead_token_ids[0][0]"),
    (BlockStored([1], None, [2**70], 2, None, None), "KV event 1 (BlockStored), field token_ids: can't serialize"),
    (BlockStored([1], None, [1, 2], 2, None, [((((("deep",),),),),)] * 1), None),
], ids=["token-str", "token-bool", "block-size-str", "block-size-bool", "medium-int", "group-str", "group-bool",
        "extra-keys-str", "kind-int", "lookahead-str", "token-too-big", "nested-but-fine"])
def test_the_publisher_refuses_fields_of_the_wrong_type_naming_them(event, field):
    """vLLM's decoder (and ours) would refuse these, and a subscriber drops the whole batch it cannot
    decode: refused at the encoder, with the event and the field named."""
    batch = [BlockStored([7], None, [1, 2], 2, None, None), event]
    if field is None:
        assert decode_batch(encode_batch(batch, 1.0))[1][1] == event
        return
    with pytest.raises(WireError) as info:
        encode_batch(batch, 1.0)
    assert field in str(info.value), str(info.value)
    assert "KV event 1" in str(info.value), str(info.value)


def test_unknown_fields_from_a_newer_vllm_are_ignored():
    payload = msgspec.msgpack.encode([3.0, [{"type": "BlockRemoved", "block_hashes": [4], "medium": "GPU",
                                             "future_field": [1, 2]}]])
    assert decode_batch(payload) == (3.0, [BlockRemoved([4])], None)


# -- any event, both ways ------------------------------------------------------------------------------

block_hash = st.one_of(st.integers(-(2**63), 2**64 - 1), st.binary(min_size=1, max_size=32))
maybe_str = st.one_of(st.none(), st.text(max_size=6))
maybe_int = st.one_of(st.none(), st.integers(0, 2**31))
extra_key = st.one_of(st.text(max_size=4), st.integers(0, 99), st.tuples(st.text(max_size=4), st.integers(0, 99)))
any_stored = st.builds(
    BlockStored, st.lists(block_hash, max_size=4), st.one_of(st.none(), block_hash),
    st.lists(st.integers(0, 2**32), max_size=8), st.integers(1, 64), maybe_int,
    st.one_of(st.none(), st.lists(st.one_of(st.none(), st.tuples(extra_key) | st.tuples(extra_key, extra_key)),
                                  max_size=4)),
    medium=st.sampled_from(["GPU", "CPU", "STORAGE"]), lora_name=maybe_str, group_idx=maybe_int,
    kv_cache_spec_kind=maybe_str, kv_cache_spec_sliding_window=maybe_int, locality=maybe_str,
    ownership=maybe_str, session_id=maybe_str,
    lookahead_token_ids=st.one_of(st.none(), st.lists(st.lists(st.integers(0, 999), max_size=3), max_size=3)))
any_removed = st.builds(BlockRemoved, st.lists(block_hash, max_size=4), medium=st.sampled_from(["GPU", "CPU"]),
                        group_idx=maybe_int, locality=maybe_str, ownership=maybe_str)
any_event = st.one_of(any_stored, any_removed, st.just(AllBlocksCleared()))


@settings(max_examples=100, deadline=None)
@given(st.lists(any_event, max_size=6), st.floats(allow_nan=False, allow_infinity=False), maybe_int)
def test_any_batch_round_trips_through_vllms_structs(events, ts, rank):
    payload = encode_batch(events, ts, rank)
    theirs = vllm_decoder.decode(payload)                        # a vLLM consumer reads it
    assert (theirs.ts, theirs.data_parallel_rank) == (ts, rank)
    assert vllm_encoder.encode(theirs) == payload                # and would have written the same bytes
    assert decode_batch(payload) == (ts, events, rank)           # and we read back exactly what we sent
