"""hashing.py - the hash functions a prefix cache can key its blocks with.

A block's key is a small tuple ``(parent_hash, block_tokens)`` or
``(parent_hash, block_tokens, extra_keys)``; a hash function turns it into an int.
Three choices, from fastest to most portable:

``"builtin"``
    Python's ``hash``. Fastest by far, but process-local: ``str`` and ``bytes`` hash differently
    in every interpreter unless ``PYTHONHASHSEED`` is fixed (and so do keys holding ``None`` on
    Python < 3.12). Good for a cache that never leaves the process. Its 64 bits are not keyed for
    tuples of ints, so collisions can be crafted; a cache that uses it must confirm hits against
    the stored tokens (``PrefixCachingBlockPool`` does).
``"sha256"``
    The key pickled, then SHA-256 (vLLM's default). The same value in every process and on every
    machine, so it can name a block outside the process: in KV events read by a router, or when
    KV moves between machines.
``"xxhash"``
    The pickled key through xxHash's XXH3-128: as portable as ``"sha256"`` and faster, but not a
    cryptographic hash. Needs the ``xxhash`` package.

Why pickle with memoization off: ``pickle.dumps`` writes a back-reference when the *same object*
appears twice in a key, so two equal keys (``("a", s, s)`` and ``("a", s, copy_of_s)``) could
serialize to different bytes and hash differently. With memoization off, equal keys of ints,
strings, bytes, ``None`` and tuples always give equal bytes.

>>> sha = make_hash_function("sha256")
>>> sha((None, (1, 2))) == make_hash_function("sha256")((None, (1, 2)))
True
>>> make_hash_function("builtin")((None, (1, 2))) == hash((None, (1, 2)))
True
"""

import hashlib
import io
import pickle
from collections.abc import Callable, Hashable
from typing import Literal

HashFunction = Callable[[Hashable], int]
HashAlgo = Literal["builtin", "sha256", "xxhash"]
HASH_ALGOS: tuple[str, ...] = ("builtin", "sha256", "xxhash")


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


def make_hash_function(algo: HashAlgo | HashFunction = "builtin") -> HashFunction:
    """Return a function mapping a block key to an int, by name or as given (a callable).

    Each call returns a fresh function with its own buffer, so two caches never share state.
    """
    if callable(algo):
        return algo
    if algo == "builtin":
        return hash
    serialize = _make_serializer()
    if algo == "sha256":
        return lambda key: int.from_bytes(hashlib.sha256(serialize(key)).digest(), "big")
    if algo == "xxhash":
        try:
            import xxhash
        except ImportError as e:
            raise ImportError(
                "hash_algo='xxhash' needs the xxhash package (pip install xxhash); "
                "or use hash_algo='sha256', which is as stable and needs nothing"
            ) from e
        return lambda key: xxhash.xxh3_128_intdigest(serialize(key))
    raise ValueError(f"hash_algo must be one of {HASH_ALGOS} or a callable, got {algo!r}")
