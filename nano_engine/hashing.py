"""hashing.py - the hash functions a prefix cache can key its blocks with.

A block's key is a small tuple ``(parent_hash, block_tokens)`` or
``(parent_hash, block_tokens, extra_keys)``; a hash function turns it into a value.

**This package's default mode** (the book chapter's pool) takes one of three names and returns
ints:

``"builtin"``
    Python's ``hash``. This package's *teaching* default, not one of vLLM's choices. Fastest by
    far, but process-local: ``str`` and ``bytes`` hash differently in every interpreter unless
    ``PYTHONHASHSEED`` is fixed. Its 64 bits are not keyed for tuples of ints, so collisions can be
    crafted; a cache that uses it must confirm hits against the stored tokens
    (``PrefixCachingBlockPool`` does).
``"sha256"``
    The key pickled (memo off, see below), then SHA-256. The same value in every process and on
    every machine, so it can name a block outside the process (KV events read by a router, KV moved
    between machines).
``"xxhash"``
    The pickled key through xxHash's XXH3-128: as portable as ``"sha256"`` and faster, but not a
    cryptographic hash. Needs the ``xxhash`` package.

Why pickle with memoization off here: ``pickle.dumps`` writes a back-reference when the *same
object* appears twice in a key, so two equal keys (``("a", s, s)`` and ``("a", s, copy_of_s)``)
could serialize to different bytes and hash differently.

**vLLM mode** (``PrefixCachingBlockPool(..., vllm=True)``) uses vLLM's own four functions, which
return bytes (``vllm/utils/hashing.py``, ``get_hash_fn_by_name``; ``--prefix-caching-hash-algo``):

==================  ================================================================================
``"sha256"``        ``pickle.dumps(key, protocol=HIGHEST_PROTOCOL)`` then SHA-256 (32 bytes). vLLM's
                    default since v0.10.2 (supported since v0.8.3, PR #15297)
``"sha256_cbor"``   canonical CBOR (RFC 8949) then SHA-256: bytes any language can reproduce, no
                    Python pickle involved (PR #20511)
``"xxhash"``        pickle then XXH3-128 (16 bytes); not cryptographic, faster (PR #29163)
``"xxhash_cbor"``   canonical CBOR then XXH3-128
==================  ================================================================================

vLLM serializes with ``cbor2.dumps(key, canonical=True)``; ``cbor2`` is not a dependency here, so
:func:`cbor_dumps` encodes the few types a block key holds (ints, bytes, str, None, bools,
tuples/lists) the same way, checked against RFC 8949's Appendix A examples in the tests.

**NONE_HASH**, the parent of a sequence's first block in vLLM (``kv_cache_utils.py``,
``init_none_hash`` and ``hash_block_tokens``: ``if not parent_block_hash: parent_block_hash =
NONE_HASH``). Its history:

* vLLM used ``hash(None)`` there. Python 3.12 made ``hash(None)`` a constant, so the whole chain of
  a known prompt became predictable and a crafted prompt could be made to collide with it (advisory
  GHSA-rm76-4mrf-v9r8 / CVE-2025-25183; fixed by PR #12621, early 2025): ``NONE_HASH`` became 32 random
  bytes per process (``os.urandom(32)``), or ``hash_fn(PYTHONHASHSEED)`` when that variable is set,
  so several processes can agree (PR #17088 fixed the inverted condition).
* Since SHA-256 became the default, the secret start no longer protects anything that SHA-256's
  collision resistance does not already, and it stopped independent instances from sharing blocks.
  PR #51875 (merged 2026-08-11) derives ``NONE_HASH`` from a fixed default seed instead
  (``PYTHONHASHSEED`` still overrides it), but leaves the non-cryptographic ``xxhash`` choices on a
  random start, so that crafting a collision stays impractical (russellb, review of PR #54727).

:func:`none_hash` does the same, once per process and algorithm. Our fixed default seed is our own
string; vLLM's bytes for it are not reproduced here.

>>> sha = make_hash_function("sha256")
>>> sha((None, (1, 2))) == make_hash_function("sha256")((None, (1, 2)))
True
>>> make_hash_function("builtin")((None, (1, 2))) == hash((None, (1, 2)))
True
>>> cbor_dumps((b"\\x00", (1, 500), None)).hex()
'83410082011901f4f6'
>>> len(make_hash_function("sha256", vllm=True)((none_hash("sha256"), (1, 2), None)))
32
"""

import functools
import hashlib
import io
import os
import pickle
from collections.abc import Callable, Hashable
from typing import Any, Literal

HashFunction = Callable[[Any], Hashable]
HashAlgo = Literal["builtin", "sha256", "xxhash", "sha256_cbor", "xxhash_cbor"]
HASH_ALGOS: tuple[str, ...] = ("builtin", "sha256", "xxhash")
VLLM_HASH_ALGOS: tuple[str, ...] = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
DEFAULT_NONE_HASH_SEED = "nano_engine NONE_HASH"  # ours; plays the part of vLLM's fixed default seed


def _make_serializer() -> Callable[[Hashable], bytes]:
    """A memo-free pickler writing into its own buffer (reused: this is on the lookup hot path)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.fast = True  # no memo: equal keys give equal bytes, whatever objects they share

    def serialize(key: Hashable) -> bytes:
        buffer.seek(0)
        buffer.truncate()
        pickler.dump(key)
        return buffer.getvalue()

    return serialize


def _xxh3_128() -> Any:
    try:
        import xxhash
    except ImportError as e:
        raise ImportError(
            "hash_algo='xxhash' needs the xxhash package (pip install xxhash); "
            "or use hash_algo='sha256', which is as stable and needs nothing"
        ) from e
    return xxhash


# -- canonical CBOR (RFC 8949), for the types a block key holds ----------------------------------


def _cbor_head(major: int, n: int) -> bytes:
    """A data item's head: major type and argument, in the shortest form (canonical)."""
    if n < 24:
        return bytes([major << 5 | n])
    for extra, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | extra]) + n.to_bytes(size, "big")
    raise AssertionError("unreachable: callers pass n < 2**64")


def cbor_dumps(obj: Any) -> bytes:
    """Canonical CBOR of ``obj``: what ``cbor2.dumps(obj, canonical=True)`` writes for these types.

    Ints (bignums past 64 bits: tags 2 and 3), bytes, str, None, bools, and tuples or lists of
    them (arrays). Anything else raises TypeError rather than guess at an encoding.
    """
    out = bytearray()

    def encode(x: Any) -> None:
        if x is None:
            out.append(0xF6)
        elif x is True or x is False:
            out.append(0xF5 if x else 0xF4)
        elif isinstance(x, int):
            major, n = (0, x) if x >= 0 else (1, -1 - x)
            if n < 1 << 64:
                out.extend(_cbor_head(major, n))
            else:  # bignum: tag 2 (positive) or 3 (negative) around the magnitude's bytes
                out.extend(_cbor_head(6, 2 + major))
                encode(n.to_bytes((n.bit_length() + 7) // 8, "big"))
        elif isinstance(x, (bytes, bytearray)):
            out.extend(_cbor_head(2, len(x)) + bytes(x))
        elif isinstance(x, str):
            data = x.encode("utf-8")
            out.extend(_cbor_head(3, len(data)) + data)
        elif isinstance(x, (tuple, list)):
            out.extend(_cbor_head(4, len(x)))
            for item in x:
                encode(item)
        else:
            raise TypeError(f"cbor_dumps: cannot encode {type(x).__name__} ({x!r}) in a block key")

    encode(obj)
    return bytes(out)


def _vllm_hash_function(algo: str) -> Callable[[Any], bytes]:
    """vLLM's ``get_hash_fn_by_name(algo)``: serialize the key, digest it, return the bytes."""
    if algo not in VLLM_HASH_ALGOS:
        raise ValueError(f"hash_algo with vllm=True must be 'builtin', one of {VLLM_HASH_ALGOS} or a callable, "
                         f"got {algo!r}")
    if algo.endswith("_cbor"):
        serialize: Callable[[Any], bytes] = cbor_dumps
    else:
        def serialize(key: Any) -> bytes:
            return pickle.dumps(key, protocol=pickle.HIGHEST_PROTOCOL)
    if algo.startswith("sha256"):
        return lambda key: hashlib.sha256(serialize(key)).digest()
    xxh = _xxh3_128()
    return lambda key: xxh.xxh3_128_digest(serialize(key))


def make_hash_function(algo: HashAlgo | HashFunction = "builtin", *, vllm: bool = False) -> HashFunction:
    """Return a function mapping a block key to its hash, by name or as given (a callable).

    ``vllm=False``: ints (``HASH_ALGOS``). ``vllm=True``: vLLM's byte-valued functions
    (``VLLM_HASH_ALGOS``) or ``"builtin"``. Each call returns a fresh function with its own
    buffer, so two caches never share state.
    """
    if callable(algo):
        return algo
    if algo == "builtin":
        return hash
    if vllm:
        return _vllm_hash_function(algo)
    serialize = _make_serializer()
    if algo == "sha256":
        return lambda key: int.from_bytes(hashlib.sha256(serialize(key)).digest(), "big")
    if algo == "xxhash":
        xxh = _xxh3_128()
        return lambda key: xxh.xxh3_128_intdigest(serialize(key))
    raise ValueError(f"hash_algo must be one of {HASH_ALGOS} (or, with vllm=True, {VLLM_HASH_ALGOS}) "
                     f"or a callable, got {algo!r}")


@functools.cache
def none_hash(algo: str, seed: str | None = None) -> Hashable:
    """The parent hash of every sequence's first block in vLLM mode (vLLM's ``NONE_HASH``).

    ``seed`` (default: ``PYTHONHASHSEED`` if set): ``hash_fn(seed)``, the same in every process.
    Without one: for ``"sha256"`` / ``"sha256_cbor"`` a fixed default seed (vLLM since PR #51875);
    for ``"xxhash"`` / ``"xxhash_cbor"`` and ``"builtin"`` 32 random bytes, drawn once per process
    (cached), as vLLM did for every algorithm from PR #12621 until that change.
    """
    seed = os.environ.get("PYTHONHASHSEED") if seed is None else seed
    if seed is None:
        if not algo.startswith("sha256"):
            return os.urandom(32)
        seed = DEFAULT_NONE_HASH_SEED
    return make_hash_function(algo, vllm=True)(seed)  # type: ignore[arg-type]
