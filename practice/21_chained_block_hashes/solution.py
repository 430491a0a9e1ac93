"""Reference solution for exercise 21: chained block hashes as vLLM computes them."""

import hashlib
import pickle

NONE_HASH_SEED = "vllm-none-hash"


def _sha256(obj) -> bytes:
    """vLLM's ``sha256`` (vllm/utils/hashing.py): pickle the object, hash the bytes."""
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


NONE_HASH = _sha256(NONE_HASH_SEED)   # the parent of every sequence's first block


def block_hashes(token_ids: list[int], block_size: int, known: list[bytes] = ()) -> list[bytes]:
    """The hashes of the full blocks of token_ids after the first len(known), chained on from
    known[-1] (NONE_HASH when known is empty): each block is hashed once, however long the
    request grows."""
    hashes, parent = [], None
    if known:
        parent = known[-1]                  # vLLM: request.block_hashes[-1]
    for start in range(len(known) * block_size, len(token_ids) - block_size + 1, block_size):
        key = (parent or NONE_HASH, tuple(token_ids[start:start + block_size]), None)   # vLLM: if not parent
        parent = _sha256(key)
        hashes.append(parent)
    return hashes
