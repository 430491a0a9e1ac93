"""hashing.py - the hash functions a prefix cache can key its blocks with.

A block's key is a small tuple ``(parent_hash, block_tokens)`` or
``(parent_hash, block_tokens, extra_keys)``; a hash function turns it into a value.

**This package's default mode** (chapter 02's pool, without ``vllm=True``) takes one of three
names and returns ints:

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
return bytes (vLLM 0.33.0, ``vllm/utils/hashing.py``: ``get_hash_fn_by_name``;
``--prefix-caching-hash-algo``):

==================  ================================================================================
``"sha256"``        ``pickle.dumps(key, protocol=HIGHEST_PROTOCOL)`` then SHA-256 (32 bytes). vLLM's
                    default since v0.10.2 (supported since v0.8.3, PR #15297)
``"sha256_cbor"``   canonical CBOR (RFC 8949) then SHA-256: bytes any language can reproduce, no
                    Python pickle involved (PR #20511 as ``sha256_cbor_64bit``, renamed by #23673)
``"xxhash"``        pickle then XXH3-128 (16 bytes); not cryptographic, faster (PR #29163)
``"xxhash_cbor"``   canonical CBOR then XXH3-128
==================  ================================================================================

vLLM serializes with ``cbor2.dumps(key, canonical=True)``; ``cbor2`` is not a dependency here, so
:func:`cbor_dumps` encodes the few types a block key holds (ints, bytes, str, None, bools,
tuples/lists) the same way, checked against RFC 8949's Appendix A examples in the tests.

**NONE_HASH**, the parent of a sequence's first block in vLLM (vLLM 0.33.0,
``vllm/v1/core/kv_cache_utils.py``: ``hash_block_tokens``, ``if not parent_block_hash:
parent_block_hash = NONE_HASH``; ``NONE_HASH = hash_fn(seed)`` in ``init_none_hash``, the seed from
``resolve_none_hash_seed``): ``PYTHONHASHSEED`` if set; otherwise the fixed
``DEFAULT_NONE_HASH_SEED = "vllm-none-hash"`` for ``sha256`` / ``sha256_cbor``, and
``os.urandom(32).hex()`` for the non-cryptographic ``xxhash`` / ``xxhash_cbor``. :func:`none_hash`
does exactly that (``"builtin"`` counts as non-cryptographic), so with the same seed and function
the first block's hash, and every hash after it, equals vLLM's byte for byte.

Why a random start for some and a fixed one for others: vLLM used ``hash(None)`` there, and Python
3.12 made ``hash(None)`` a constant, so the whole chain of a known prompt became predictable and a
crafted prompt could be made to collide with it (advisory GHSA-rm76-4mrf-v9r8 / CVE-2025-25183).
With SHA-256 a known start costs nothing (its collision resistance needs no secret) and lets
independent instances share blocks; with a non-cryptographic hash a secret start is what keeps
crafted collisions impractical.

History and sources (as of 2026-12-01):

- PR #12621 (Jan/Feb 2025, vLLM 0.7.2) replaced ``hash(None)`` by ``hash('None')``, a start that
  Python's string hashing randomises per process.
- PR #15297 (SHA-256 support, v0.8.3) made ``NONE_HASH`` 32 random bytes (``os.urandom(32)``), or a
  hash of ``PYTHONHASHSEED`` when set; PR #17088 (2025-04) fixed that condition, which was inverted.
- PR #20511 (July 2025) introduced ``init_none_hash(hash_fn)`` (and ``sha256_cbor``, then called
  ``sha256_cbor_64bit``, renamed by PR #23673).
- PR #51875 (opened 2026-08-11, merged between 2026-08-18 and 2026-09-04) derives ``NONE_HASH``
  from the fixed default seed for the cryptographic functions and keeps the random seed for the
  ``xxhash`` ones (the maintainer's review of PR #54727, 2026-09-04).

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
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"  # vLLM 0.33.0's (kv_cache_utils.py, DEFAULT_NONE_HASH_SEED)
NON_CRYPTO_HASH_ALGOS: tuple[str, ...] = ("xxhash", "xxhash_cbor", "builtin")  # a random seed: see resolve_none_hash_seed


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


def resolve_none_hash_seed(algo: str | HashFunction) -> str:
    """vLLM 0.33's ``vllm/v1/core/kv_cache_utils.py::resolve_none_hash_seed``: the seed ``NONE_HASH`` is hashed from.

    ``PYTHONHASHSEED`` wins if set. Otherwise a cryptographic function (``sha256``, ``sha256_cbor``,
    a callable) gets the fixed ``DEFAULT_NONE_HASH_SEED``, shareable across processes, and a
    non-cryptographic one (``NON_CRYPTO_HASH_ALGOS``) fresh random bytes as hex.
    """
    seed = os.environ.get("PYTHONHASHSEED")
    if seed is not None:
        return seed
    if isinstance(algo, str) and algo in NON_CRYPTO_HASH_ALGOS:
        return os.urandom(32).hex()
    return DEFAULT_NONE_HASH_SEED


@functools.cache
def none_hash(algo: str | HashFunction, seed: str | None = None) -> Hashable:
    """The parent hash of every sequence's first block in vLLM mode: vLLM's ``NONE_HASH``.

    ``hash_fn(seed)`` as ``init_none_hash`` computes it, ``seed`` resolved by
    :func:`resolve_none_hash_seed` when not given. Computed once per process and algorithm
    (cached), as vLLM initialises its global once, so a random seed is drawn once.
    """
    seed = resolve_none_hash_seed(algo) if seed is None else seed
    return make_hash_function(algo, vllm=True)(seed)  # type: ignore[arg-type]
