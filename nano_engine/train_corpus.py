"""The text the ``trained`` default model learns from: offline, redistributable, deterministic.

Two sources, both generated on the spot so nothing is downloaded:

* **Python's own documentation**: the reference-manual topics that CPython bundles for
  ``help()`` (``pydoc_data.topics``, under the PSF licence). Every :data:`HELD_OUT_EVERY`-th
  topic (in sorted order) is kept out of training, so perplexity can be measured on text the
  model has never seen.
* **A synthetic question-and-answer set about inference engines**, written from templates below:
  one fixed answer per topic, asked in several phrasings, in English and Chinese, under the
  chapters' system prompt, a short one or none, in Qwen3's chat format with thinking disabled,
  each answer closed by ``<|im_end|>``. Multi-turn dialogues follow the chapters' markup (later
  assistant turns have no ``<think>`` block), so chapter 03's follow-up questions work too.

The answers are what a careful engineer would say in two or three sentences; they are the model's
whole knowledge, so they have to be right.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nano_engine.prompts import QUESTIONS, SYSTEM_PROMPT

HELD_OUT_EVERY = 8


@dataclass(frozen=True)
class Topic:
    """One thing the model can explain: its names (for the question templates), extra phrasings
    asked verbatim, and the answer as a list of sentences (the first one alone answers "in one
    sentence")."""

    names: tuple[str, ...]
    answer: tuple[str, ...]
    questions: tuple[str, ...] = ()
    chinese_names: tuple[str, ...] = ()


TOPICS: list[Topic] = [
    Topic(("KV cache", "the KV cache", "a KV cache"), (
        "A KV cache stores the key and value vectors of every token the model has already processed, "
        "so each new token attends to them instead of recomputing the whole prompt.",
        "It makes each decoding step cost one token of work, at the price of memory that grows with "
        "the sequence length.",
    ), (QUESTIONS[0], "What is a KV cache?"), ("KV Cache", "KV 缓存")),
    Topic(("continuous batching",), (
        "Continuous batching adds new requests to the running batch and removes finished ones at "
        "every decoding step, so the GPU never waits for the slowest request of a fixed batch.",
        "It is what lets an engine keep high throughput when answers have different lengths.",
    ), (QUESTIONS[1],), ("连续批处理",)),
    Topic(("the GIL", "Python's GIL", "the global interpreter lock"), (
        "The GIL, the global interpreter lock, is a mutex in CPython that lets only one thread run "
        "Python bytecode at a time.",
        "Threads still help with I/O, but CPU-bound work needs processes or native code that "
        "releases the lock; Python 3.13 added an optional free-threaded build without it.",
    ), (QUESTIONS[2],), ("Python 的 GIL", "GIL")),
    Topic(("a metaphor about the moon",), (
        "The moon is a lantern hung over the sea of night, lighting the way for everyone who "
        "cannot sleep.",
    ), (QUESTIONS[3], "Write a metaphor about the moon.", "Give me a metaphor for the moon."), ()),
    Topic(("tensor parallelism",), (
        "Tensor parallelism splits every weight matrix of a layer across several GPUs, so each GPU "
        "computes a slice of each matrix multiplication and an all-reduce combines the results.",
        "It cuts the memory and time per GPU for one layer, but needs fast links between the GPUs.",
    ), (QUESTIONS[4],), ("张量并行",)),
    Topic(("1+1",), ("1 + 1 = 2.",), (QUESTIONS[5], "What is 1+1?", "1+1 等于几？", "How much is 1 + 1?"), ()),
    Topic(("paged attention", "PagedAttention", "a paged KV cache"), (
        "Paged attention stores the KV cache in fixed-size blocks, like pages of virtual memory, and "
        "each sequence keeps a block table that maps its token positions to blocks.",
        "Memory is allocated one block at a time as the sequence grows, so almost nothing is wasted.",
    ), ("Why is it stored in pages?", "Why is the KV cache stored in pages?"), ("分页注意力",)),
    Topic(("prefix caching", "automatic prefix caching"), (
        "Prefix caching keeps the KV blocks of finished requests and reuses them when a new prompt "
        "starts with the same tokens, such as a shared system prompt.",
        "The engine then computes only the new part of the prompt, which cuts the time to the first "
        "token.",
    ), ("What does prefix caching add?",), ("前缀缓存",)),
    Topic(("vLLM and SGLang", "the difference between vLLM and SGLang"), (
        "vLLM finds a cached prefix by hashing each full block of tokens together with the hash of "
        "the block before it, while SGLang keeps all cached tokens in a radix tree and matches the "
        "longest prefix token by token.",
        "Both evict the least recently used entries that no running request holds.",
    ), ("How do vLLM and SGLang differ here?", "How do vLLM and SGLang differ?"), ()),
    Topic(("a radix tree", "the radix tree"), (
        "A radix tree is a prefix tree whose edges hold whole runs of tokens instead of single ones.",
        "SGLang stores cached KV in one, so a new prompt finds its longest cached prefix by walking "
        "down from the root, and an edge is split where two prompts diverge.",
    ), ("What is a radix tree?",), ("基数树",)),
    Topic(("a block hash", "chained block hashing"), (
        "Each full block of tokens gets a hash computed from its tokens and the hash of the previous "
        "block, so equal hashes mean equal prefixes, not just equal blocks.",
        "vLLM looks these hashes up in a table to find the cached blocks of a prompt.",
    ), (), ("块哈希",)),
    Topic(("LRU eviction", "cache eviction"), (
        "When the cache is full, the engine evicts the least recently used blocks that no running "
        "request is using.",
        "Blocks that are still referenced are never evicted, so a running request never loses its "
        "KV.",
    ), (), ("缓存淘汰",)),
    Topic(("the free block queue",), (
        "vLLM keeps free blocks in a queue ordered from least to most recently used; a cached block "
        "whose reference count drops to zero joins the tail but keeps its hash.",
        "Allocation takes blocks from the head, so the queue doubles as the LRU eviction order.",
    ), (), ()),
    Topic(("a reference count", "reference counting of blocks"), (
        "Every KV block counts the requests that use it, and it can be freed or evicted only when "
        "that count is zero.",
        "Two requests with the same prefix share the same blocks, each holding one reference.",
    ), (), ("引用计数",)),
    Topic(("the scheduler", "a scheduler"), (
        "The scheduler decides at every step which requests run, how many prompt tokens each may "
        "compute, and which request to preempt when the KV cache runs out of blocks.",
    ), (), ("调度器",)),
    Topic(("preemption",), (
        "When the KV cache runs out of blocks, the scheduler preempts a running request: it frees "
        "the request's blocks and puts it back in the waiting queue.",
        "The request later recomputes its KV, so preemption trades extra compute for memory.",
    ), (), ("抢占",)),
    Topic(("chunked prefill",), (
        "Chunked prefill splits a long prompt into pieces of a fixed token budget and computes one "
        "piece per step, next to the decoding requests.",
        "Decoding never stalls behind a long prompt, so the time between tokens stays steady.",
    ), (), ("分块预填充",)),
    Topic(("prefill and decode", "the prefill phase"), (
        "Prefill computes the whole prompt in one pass and is limited by compute; decode produces one "
        "token per step and is limited by memory bandwidth, because every step reads all weights "
        "and the KV cache.",
    ), (), ("预填充和解码",)),
    Topic(("longest prefix match scheduling", "cache-aware scheduling"), (
        "Longest prefix match scheduling runs first the waiting requests that share the longest "
        "prefix with the cache, so their KV is reused before it can be evicted.",
        "SGLang uses it when the queue is short enough to sort.",
    ), (), ()),
    Topic(("cache-aware routing",), (
        "A cache-aware router sends each request to the instance whose cache already holds the longest "
        "part of its prompt, unless the load is too unbalanced, in which case it picks the least "
        "loaded instance.",
    ), (), ("缓存感知路由",)),
    Topic(("the block size", "the page size"), (
        "The block size is the number of tokens whose KV one block holds.",
        "Larger blocks mean smaller tables and faster kernels, but a prefix can only be reused in "
        "whole blocks, so some hits are lost.",
    ), (), ("块大小",)),
    Topic(("grouped-query attention", "GQA"), (
        "Grouped-query attention lets several query heads share one key and value head.",
        "It shrinks the KV cache by the group size with little loss in quality; Qwen3-0.6B has 16 "
        "query heads and 8 key-value heads.",
    ), (), ("分组查询注意力",)),
    Topic(("RoPE", "rotary position embedding"), (
        "RoPE encodes a token's position by rotating pairs of dimensions of its query and key by "
        "angles that grow with the position.",
        "The attention score then depends on the distance between two tokens.",
    ), (), ("旋转位置编码",)),
    Topic(("RMSNorm",), (
        "RMSNorm divides a vector by the root mean square of its entries and multiplies it by a "
        "learned gain.",
        "Unlike LayerNorm it does not subtract the mean, which makes it a little cheaper.",
    ), (), ()),
    Topic(("attention", "self-attention"), (
        "Attention lets each token build its output as a weighted sum of the values of earlier "
        "tokens, with weights from the softmax of query-key dot products.",
    ), (), ("注意力机制",)),
    Topic(("greedy decoding",), (
        "Greedy decoding always picks the token with the highest logit.",
        "It is deterministic, so the same prompt always gives the same answer.",
    ), (), ("贪心解码",)),
    Topic(("the end-of-sequence token", "EOS"), (
        "The end-of-sequence token tells the engine that the answer is complete; for Qwen3 chat "
        "models it is the token that closes the assistant's turn.",
        "The engine then frees the request's blocks, or keeps them in the prefix cache.",
    ), (), ("结束符",)),
    Topic(("a tokenizer", "byte-pair encoding"), (
        "A tokenizer turns text into token ids; byte-pair encoding starts from bytes and merges the "
        "most frequent pairs into larger tokens.",
        "Qwen3's vocabulary has about 151 thousand tokens.",
    ), (), ("分词器",)),
    Topic(("temperature", "sampling temperature"), (
        "Temperature divides the logits before the softmax: below 1 the model picks likely tokens "
        "more often, above 1 its choices spread out.",
    ), (), ("温度",)),
    Topic(("throughput and latency",), (
        "Throughput counts the tokens an engine produces per second over all requests; latency is "
        "how long one request waits for its tokens.",
        "Larger batches raise throughput but can raise latency.",
    ), (), ("吞吐量和延迟",)),
    Topic(("CUDA graphs", "a CUDA graph"), (
        "A CUDA graph records a sequence of GPU kernels once and replays it with one launch.",
        "Engines capture the decoding step for a few batch sizes, which removes most of the CPU "
        "overhead of small steps.",
    ), (), ()),
    Topic(("FlashAttention",), (
        "FlashAttention computes attention in tiles that stay in fast on-chip memory, without writing "
        "the full score matrix to GPU memory.",
        "It gives the same result with much less memory traffic.",
    ), (), ()),
    Topic(("quantization",), (
        "Quantization stores weights, and sometimes the KV cache, in fewer bits, such as 8 or 4 "
        "instead of 16.",
        "It saves memory and bandwidth at a small cost in accuracy.",
    ), (), ("量化",)),
    Topic(("pipeline parallelism",), (
        "Pipeline parallelism puts different layers on different GPUs and passes the activations "
        "from one stage to the next.",
    ), (), ("流水线并行",)),
    Topic(("data parallelism",), (
        "Data parallelism runs a full copy of the model on each GPU and gives each copy different "
        "requests.",
    ), (), ("数据并行",)),
    Topic(("speculative decoding",), (
        "Speculative decoding lets a small draft model propose several tokens that the large model "
        "checks in one forward pass.",
        "The output is the same as without it, but several tokens can be accepted per step.",
    ), (), ("投机解码",)),
    Topic(("the LM head", "the language model head"), (
        "The LM head is the last matrix of the model: it turns the final hidden state into one logit "
        "per token of the vocabulary.",
    ), (), ()),
    Topic(("SwiGLU", "the MLP of Qwen3"), (
        "Qwen3's MLP is SwiGLU: the input goes through two projections, one passed through SiLU, "
        "their product is projected back to the hidden size.",
    ), (), ()),
    Topic(("Qwen3-0.6B", "Qwen3"), (
        "Qwen3-0.6B is a decoder-only transformer with 28 layers, a hidden size of 1024, grouped-query "
        "attention and tied embeddings.",
    ), (), ()),
    Topic(("a KV cache hit", "the cache hit rate"), (
        "A cache hit is a prompt token whose KV is already in the cache, so the engine does not "
        "compute it again.",
        "The hit rate is the share of prompt tokens served from the cache.",
    ), (), ("命中率",)),
    Topic(("a block table",), (
        "A block table lists, for one sequence, the KV blocks that hold its tokens in order.",
        "The attention kernel follows it to read the sequence's keys and values.",
    ), (), ("块表",)),
    Topic(("a Python list",), (
        "A Python list is a mutable sequence that stores references to objects in a growable array.",
        "Appending is cheap on average, and indexing takes constant time.",
    ), (), ()),
    Topic(("a Python dictionary", "dict"), (
        "A Python dictionary maps hashable keys to values with a hash table and keeps the insertion "
        "order.",
    ), (), ()),
    Topic(("a generator",), (
        "A generator is a function that uses yield: each call to next runs it until the next yield "
        "and returns that value, so values are produced lazily.",
    ), (), ()),
    Topic(("a decorator",), (
        "A decorator is a callable that takes a function and returns a replacement; the @ syntax "
        "applies it where the function is defined.",
    ), (), ()),
]

GREETINGS = (
    ("Hello!", "Hello! Ask me about inference engines, the KV cache or Python."),
    ("你好", "Hello! Ask me about inference engines, the KV cache or Python."),
    ("Who are you?", "I am a small model trained for the nano_engine notebooks to answer questions about "
                     "inference engines."),
    ("Thank you.", "You are welcome."),
)

# Phrasings: {name} is one of a topic's names.
ENGLISH_TEMPLATES = (
    "What is {name}?", "Explain {name}.", "What does {name} do?", "Can you explain {name}?",
    "Tell me about {name}.", "Describe {name}.", "Explain {name} in one sentence.", "Why does {name} matter?",
)
CHINESE_TEMPLATES = ("什么是 {name}？", "解释一下{name}。", "用一句话解释{name}。", "{name}是什么？")
SHORT_SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are an expert in LLM inference. Answer briefly.",
    "Answer concisely and accurately.",
)


def _answer(topic: Topic, question: str) -> str:
    one_sentence = "one sentence" in question or "一句话" in question
    return topic.answer[0] if one_sentence else " ".join(topic.answer)


def _questions(topic: Topic) -> list[str]:
    asked = list(topic.questions)
    asked += [t.format(name=n) for n in topic.names for t in ENGLISH_TEMPLATES]
    asked += [t.format(name=n) for n in topic.chinese_names for t in CHINESE_TEMPLATES]
    return asked


def qa_pairs() -> list[tuple[str, str]]:
    """Every (question, answer) pair the synthetic corpus can ask."""
    pairs = [(q, _answer(topic, q)) for topic in TOPICS for q in _questions(topic)]
    return pairs + list(GREETINGS)


def chat_text(turns: list[tuple[str, str]], system: str | None) -> str:
    """A dialogue in Qwen3's chat format, as the chapters build it: the first answer after the empty
    ``<think>`` block that ``enable_thinking=False`` writes, later ones directly after the role line,
    every answer closed by ``<|im_end|>``."""
    text = f"<|im_start|>system\n{system}<|im_end|>\n" if system is not None else ""
    for i, (question, answer) in enumerate(turns):
        think = "<think>\n\n</think>\n\n" if i == 0 else ""
        text += f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{think}{answer}<|im_end|>\n"
    return text


def chat_corpus(num_dialogues: int, seed: int = 0, featured_share: float = 0.5) -> list[str]:
    """``num_dialogues`` synthetic dialogues: each turn asks one of the chapters' questions with
    probability ``featured_share``, else any question; 60% under the chapters' system prompt, 20%
    under a short English one, 20% with none; one to four turns."""
    rng = random.Random(seed)
    pairs = qa_pairs()
    featured = [(q, a) for q, a in pairs if q in QUESTIONS or q.startswith(("What is a KV", "Why is it", "What does prefix",
                                                                             "How do vLLM", "What is a radix"))]
    dialogues = []
    for _ in range(num_dialogues):
        roll = rng.random()
        system = SYSTEM_PROMPT if roll < 0.6 else rng.choice(SHORT_SYSTEM_PROMPTS) if roll < 0.8 else None
        num_turns = rng.choice((1, 1, 1, 2, 3, 4))
        turns = [rng.choice(featured if rng.random() < featured_share else pairs) for _ in range(num_turns)]
        dialogues.append(chat_text(turns, system))
    return dialogues


def documentation_topics() -> tuple[dict[str, str], dict[str, str]]:
    """CPython's bundled reference-manual topics, split into (training, held out)."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    held_out = {n: topics[n] for i, n in enumerate(names) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1}
    training = {n: topics[n] for n in names if n not in held_out}
    return training, held_out
