"""Six chat requests that share one long system prompt: the experiment of chapters 00, 02 and 03.

Every request starts with the same system turn, so a prefix cache can reuse its KV; only the
user question at the end differs. With Qwen3's tokenizer the six prompts are 123, 126, 126, 126,
128 and 132 tokens long.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

# "You are an inference-optimization expert; answer concisely and accurately, with numbers
# where needed." repeated six times to make a long shared prefix.
SYSTEM_PROMPT = "你是一个推理优化专家，回答要简洁、准确，必要时给出数字。" * 6

QUESTIONS = [
    "什么是 KV Cache？",  # What is a KV cache?
    "用一句话解释连续批处理。",  # Explain continuous batching in one sentence.
    "Python 的 GIL 是什么？",  # What is Python's GIL?
    "写一个关于月亮的比喻。",  # Write a metaphor about the moon.
    "Explain tensor parallelism in one sentence.",
    "1+1 等于几？请直接回答。",  # What is 1+1? Answer directly.
]

PROMPT_LENGTHS = [123, 126, 126, 126, 128, 132]


def chat_text(tokenizer: PreTrainedTokenizerBase, question: str, system: str = SYSTEM_PROMPT) -> str:
    """One request rendered by the chat template, ready for the assistant's answer (thinking off)."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert isinstance(text, str)  # tokenize=False renders text
    return text


def chat_prompts(
    tokenizer: PreTrainedTokenizerBase, questions: Sequence[str] = QUESTIONS, system: str = SYSTEM_PROMPT
) -> list[list[int]]:
    """Token ids of each question asked after ``system``, as the chapter builds them."""
    return [tokenizer(chat_text(tokenizer, question, system)).input_ids for question in questions]
