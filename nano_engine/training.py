"""Train the ``trained`` default model: a small Qwen3 that answers the chapters' questions in English.

The series runs offline, so its default model must come with the package. A Qwen3 checkpoint
stores two ``[151936, hidden]`` matrices (embeddings and LM head) that dwarf a small model's body,
yet the training text (:mod:`nano_engine.train_corpus`) uses only a few thousand distinct tokens.
So training happens in a *compact* vocabulary, and only that is shipped:

* **Compact model.** The real :class:`~nano_engine.model.Transformer` body, with an embedding of
  ``V + 1`` rows: one per token the corpus uses, plus ``UNK``, the input row for every other id.
  Its head is tied to the first ``V`` embedding rows, plus one extra class, ``REST``, a learned
  vector ``r`` that stands for *all* ``N`` unused ids at once: its logit is ``h·r + log N``.
* **Expansion.** :func:`nano_engine.checkpoints.expand` writes a normal, untied Hugging Face checkpoint with the real
  vocabulary: used ids get their trained rows in both matrices, every other id gets ``UNK`` as its
  embedding and ``r`` as its LM-head row. Each unused id then has logit ``h·r``, so the full softmax
  equals the compact one exactly (``N`` copies of ``exp(h·r)`` are ``exp(h·r + log N)``), and greedy
  decoding can never pick an unused id: its logit sits ``log N ≈ 12`` below the ``REST`` class,
  which itself loses to the real answer. (Tied weights could not do this: an unused row would give
  a logit the training never pushed down.)

Training has three stages: :func:`train` on the whole corpus (English, the chat format, the
answers), then :func:`focus` on dialogues that mostly ask the chapters' questions (which answer goes
with which question), then ``focus`` again with :data:`ANNEAL`'s settings, a learning rate decaying
to almost nothing, so that the answers settle. The shipped
``nano_engine/data/trained_compact.safetensors`` was made by::

    python -m nano_engine.training --steps 450 --focus-steps 300 --anneal-steps 100

which rebuilds it (same tensors) on the same machine type: seeds, data order and thread counts are
fixed, and the numbers of steps are in the file's metadata with every other setting. On two CPU cores
shared with other work the stages took about 40, 40 and 5 minutes. ``--first-stage FILE`` and
``--second-stage FILE`` restart from a stage's output (its settings must match); ``--report``
prints the chapter answers and the held-out perplexity.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from nano_engine.checkpoints import PACKED_PATH, QWEN3_0_6B_CONFIG, TINY_CONFIG
from nano_engine.model import Qwen3Config, Transformer, rope_cos_sin
from nano_engine.prompts import SYSTEM_PROMPT
from nano_engine.train_corpus import chat_corpus, chat_text, documentation_topics, qa_pairs

# The body of the `tiny` model (4 layers, hidden 128: 0.8M parameters outside the embeddings, sized
# for half an hour on two busy CPU cores): every setting in which TINY_CONFIG differs from
# Qwen3-0.6B's, plus an untied head for the expansion above. ``full_config`` puts it back on 0.6B's.
TRAINED_BODY = {
    **{key: value for key, value in TINY_CONFIG.items() if QWEN3_0_6B_CONFIG.get(key) != value},
    "tie_word_embeddings": False,
}


@dataclass(frozen=True)
class TrainingSettings:
    steps: int = 300
    rows: int = 4                 # sequences per step
    row_length: int = 384         # tokens per sequence: a four-turn chapter dialogue fits
    learning_rate: float = 5e-3
    warmup_steps: int = 20
    weight_decay: float = 0.1
    unk_rate: float = 0.01        # share of inputs replaced by UNK, so that row learns to be harmless
    num_dialogues: int = 2500
    doc_copies: int = 1
    seed: int = 0
    threads: int = 1              # one thread: on a shared machine a second one mostly waits
    body: tuple = tuple(sorted(TRAINED_BODY.items()))


def full_config(settings: TrainingSettings) -> dict:
    return {**QWEN3_0_6B_CONFIG, **dict(settings.body)}


# --------------------------------------------------------------------------- data

def _tokenizer():
    from transformers import AutoTokenizer

    from nano_engine.checkpoints import tokenizer_path

    return AutoTokenizer.from_pretrained(tokenizer_path())


def _doc_ids(tokenizer, texts: dict[str, str]) -> list[list[int]]:
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return [tokenizer(texts[name]).input_ids + [eot] for name in sorted(texts)]


def build_vocabulary(tokenizer, documents: list[list[int]]) -> list[int]:
    """Sorted ids of every token the model may ever need to produce: those of the training documents,
    of every synthetic answer and question, of the chapters' system prompt, and the chat markers."""
    used = {i for doc in documents for i in doc}
    for question, answer in qa_pairs():
        used.update(tokenizer(chat_text([(question, answer)], SYSTEM_PROMPT)).input_ids)
    used.update(tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]))
    return sorted(used)


def token_stream(tokenizer, settings: TrainingSettings) -> tuple[list[int], list[int]]:
    """(vocabulary, one shuffled stream of real token ids): dialogues and documentation topics."""
    training_docs, _ = documentation_topics()
    docs = _doc_ids(tokenizer, training_docs)
    pieces = [tokenizer(text).input_ids for text in chat_corpus(settings.num_dialogues, settings.seed)]
    pieces += docs * settings.doc_copies
    random.Random(settings.seed).shuffle(pieces)
    return build_vocabulary(tokenizer, docs), [i for piece in pieces for i in piece]


# --------------------------------------------------------------------------- the compact model

class CompactModel(nn.Module):
    """The model trained on the compact vocabulary (see the module docstring)."""

    vocab: torch.Tensor          # compact id -> real id, [V]
    to_compact: torch.Tensor     # real id -> compact id (UNK for unused ids), [vocab_size]

    def __init__(self, config: dict, vocab: list[int]):
        super().__init__()
        self.num_used = len(vocab)
        self.num_rest = config["vocab_size"] - self.num_used
        body = Qwen3Config.from_dict({**config, "vocab_size": self.num_used + 1, "tie_word_embeddings": True})
        self.body = Transformer(body)
        self.rest = nn.Parameter(torch.zeros(body.hidden_size))
        to_compact = torch.full((config["vocab_size"],), self.num_used, dtype=torch.long)   # UNK by default
        to_compact[torch.tensor(vocab)] = torch.arange(self.num_used)
        self.register_buffer("vocab", torch.tensor(vocab, dtype=torch.long), persistent=False)
        self.register_buffer("to_compact", to_compact, persistent=False)

    def hidden(self, compact_ids: torch.Tensor) -> torch.Tensor:
        body = self.body
        x = body.embed_tokens(compact_ids)
        positions = torch.arange(compact_ids.shape[-1]).expand_as(compact_ids)
        cos, sin = rope_cos_sin(positions, body.config.head_dim, body.config.rope_theta, x.dtype)
        for layer in body.layers:
            x = layer(x, cos, sin, None)
        return body.norm(x)

    def forward(self, compact_ids: torch.Tensor) -> torch.Tensor:
        """Logits over the ``V`` used tokens and, last, the ``REST`` class."""
        h = self.hidden(compact_ids)
        used = h @ self.body.embed_tokens.weight[: self.num_used].T
        rest = (h @ self.rest)[..., None] + math.log(self.num_rest)
        return torch.cat((used, rest), dim=-1)


def initialize(model: CompactModel, seed: int) -> None:
    """GPT-2's initialisation (std 0.02, residual outputs scaled by 1/sqrt(2 layers), norms 1) from
    uniform draws of one seeded generator, in name order: CPU ``rand`` gives the same bytes on every
    machine."""
    generator = torch.Generator().manual_seed(seed)
    layers = model.body.config.num_hidden_layers
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
                continue
            std = 0.02 / math.sqrt(2 * layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            uniform = torch.rand(param.shape, generator=generator)
            param.copy_((uniform * 2 - 1) * std * math.sqrt(3.0))


# --------------------------------------------------------------------------- training

def train(settings: TrainingSettings, log=print, snapshot=None, snapshot_every: int = 25
          ) -> tuple[CompactModel, list[float]]:
    """Train from scratch; return the model and the loss of every step. Deterministic for fixed
    settings on one machine type (fixed seeds, data order and thread count). ``snapshot(k, model)``
    is called after every ``snapshot_every`` steps: the model then equals a ``steps=k`` run's."""
    torch.manual_seed(settings.seed)
    torch.set_num_threads(settings.threads)
    tokenizer = _tokenizer()
    config = full_config(settings)
    vocab, stream = token_stream(tokenizer, settings)
    model = CompactModel(config, vocab)
    initialize(model, settings.seed)
    compact = model.to_compact[torch.tensor(stream)]
    log(f"vocabulary {len(vocab)} tokens; stream {len(stream)} tokens; {settings.rows} x {settings.row_length} per step; "
        f"{sum(p.numel() for n, p in model.named_parameters() if 'embed' not in n):,} parameters outside the embedding")

    losses = _optimize(model, compact, settings.steps, settings.rows, settings.row_length, settings.unk_rate,
                       lambda step: _learning_rate(step, settings), settings.learning_rate, settings.weight_decay,
                       settings.seed, log, snapshot, snapshot_every)
    return model, losses


def _optimize(model: CompactModel, compact: torch.Tensor, steps: int, num_rows: int, row_length: int,
              unk_rate: float, learning_rate, base_rate: float, weight_decay: float, seed: int,
              log=print, snapshot=None, snapshot_every: int = 25) -> list[float]:
    """AdamW on rows of ``row_length + 1`` tokens cut at random offsets of the ``compact`` stream."""
    num_starts = len(compact) - row_length
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=base_rate, betas=(0.9, 0.95))
    generator = torch.Generator().manual_seed(seed)
    losses, start = [], time.time()
    for step in range(steps):
        lr = learning_rate(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        rows = torch.randint(num_starts, (num_rows,), generator=generator)   # any offset: no fixed cuts
        batch = torch.stack([compact[r: r + row_length + 1] for r in rows.tolist()])
        inputs, targets = batch[:, :-1].clone(), batch[:, 1:]
        inputs[torch.rand(inputs.shape, generator=generator) < unk_rate] = model.num_used
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if step % 5 == 0 or step == steps - 1:
            log(f"step {step:4d}  loss {loss.item():.4f}  lr {lr:.2e}  {time.time() - start:6.0f} s")
        if snapshot is not None and (step + 1) % snapshot_every == 0:
            snapshot(step + 1, model)
    return losses


@dataclass(frozen=True)
class FocusSettings:
    """The second stage: dialogues only, most of them asking the chapters' questions, at a constant
    learning rate. The first stage teaches English, the chat format and the answers; within its
    budget it had not yet learned to pick the answer from the question (it answered everything with
    the most frequent one), which is what this stage adds."""

    steps: int = 150
    rows: int = 4
    row_length: int = 256
    learning_rate: float = 1e-3
    final_learning_rate: float | None = None   # None: constant; else linear decay to it over ``steps``
    warmup_steps: int = 0
    num_dialogues: int = 800
    featured_share: float = 0.8
    seed: int = 1
    threads: int = 2

    def rate(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.learning_rate * (step + 1) / self.warmup_steps
        if self.final_learning_rate is None:
            return self.learning_rate
        done = (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps - 1)
        return self.learning_rate + (self.final_learning_rate - self.learning_rate) * done


# The third stage: the same kind of dialogues, fresh data order, and a learning rate that decays to
# almost nothing. At the second stage's constant rate the answer to one question keeps flipping to
# another's between snapshots; decaying the rate lets the weights settle.
ANNEAL = FocusSettings(steps=100, rows=8, learning_rate=3e-4, final_learning_rate=1e-5, warmup_steps=10, seed=2)


def focus(model: CompactModel, settings: FocusSettings, log=print, snapshot=None
          ) -> tuple[CompactModel, list[float]]:
    """Continue training ``model`` (in place) on :class:`FocusSettings`' dialogues. The first stage's
    weights are rounded to float16 first, as :func:`save_packed` stores them, so a run from scratch and
    one that starts from a shipped first-stage file are the same."""
    torch.manual_seed(settings.seed)
    torch.set_num_threads(settings.threads)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.float16).float())
    tokenizer = _tokenizer()
    pieces = [tokenizer(text).input_ids for text in chat_corpus(settings.num_dialogues, settings.seed,
                                                                settings.featured_share)]
    compact = model.to_compact[torch.tensor([i for piece in pieces for i in piece])]
    log(f"focus: {len(compact)} tokens of dialogue; {settings.rows} x {settings.row_length} per step")
    losses = _optimize(model, compact, settings.steps, settings.rows, settings.row_length, 0.0,
                       settings.rate, settings.learning_rate, 0.0, settings.seed, log, snapshot)
    return model, losses


def _learning_rate(step: int, settings: TrainingSettings) -> float:
    """Linear warm-up, then inverse square-root decay. It does not depend on the total number of
    steps, so a run stopped at step k equals a run of k steps (and snapshots are reproducible)."""
    if step < settings.warmup_steps:
        return settings.learning_rate * (step + 1) / settings.warmup_steps
    return settings.learning_rate * math.sqrt(settings.warmup_steps / (step + 1))


# --------------------------------------------------------------------------- shipping

def pack(model: CompactModel, settings: TrainingSettings) -> dict[str, torch.Tensor]:
    """The compact weights in float16 (the body's names, ``rest``) and the used ids (int32)."""
    tensors = {name: p.detach().to(torch.float16).contiguous() for name, p in model.body.named_parameters()
               if name != "lm_head.weight"}
    tensors["rest"] = model.rest.detach().to(torch.float16)
    tensors["vocab"] = model.vocab.to(torch.int32)
    return tensors


def save_packed(model: CompactModel, settings: TrainingSettings, path: str | Path,
                focus_settings: FocusSettings | None = None, anneal_settings: FocusSettings | None = None) -> Path:
    """Write :func:`pack`'s tensors, with the config and both stages' settings as metadata."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = {"format": "pt", "config": json.dumps(full_config(settings), sort_keys=True),
                "settings": json.dumps(asdict(settings), sort_keys=True)}
    if focus_settings is not None:
        metadata["focus"] = json.dumps(asdict(focus_settings), sort_keys=True)
    if anneal_settings is not None:
        metadata["anneal"] = json.dumps(asdict(anneal_settings), sort_keys=True)
    save_file(pack(model, settings), path, metadata=metadata)
    return path


def load_compact(path: str | Path = PACKED_PATH) -> CompactModel:
    """The compact model of a packed file, in float32 (for comparing it with its expansion)."""
    with safe_open(str(path), "pt") as f:
        config = json.loads(f.metadata()["config"])
    tensors = load_file(str(path))
    model = CompactModel(config, tensors.pop("vocab").tolist())
    with torch.no_grad():
        model.rest.copy_(tensors.pop("rest").float())
        state = {name: t.float() for name, t in tensors.items()}
        model.body.load_state_dict({**state, "lm_head.weight": state["embed_tokens.weight"]}, strict=True)
    return model.eval()


# --------------------------------------------------------------------------- evaluation

def held_out_texts() -> list[str]:
    """The documentation topics kept out of training (every eighth, see ``train_corpus``)."""
    _, held_out = documentation_topics()
    return [held_out[name] for name in sorted(held_out)]


@torch.inference_mode()
def perplexity(model: Transformer, tokenizer, texts: list[str], window: int = 512) -> float:
    """exp(mean negative log-likelihood per predicted token) of ``texts``, each cut into windows of
    ``window`` tokens that are scored independently."""
    total, count = 0.0, 0
    for text in texts:
        ids = tokenizer(text).input_ids
        for start in range(0, len(ids) - 1, window):
            chunk = torch.tensor([ids[start: start + window + 1]])
            if chunk.shape[1] < 2:
                continue
            logits = model(chunk[:, :-1]).float()
            total += F.cross_entropy(logits[0], chunk[0, 1:], reduction="sum").item()
            count += chunk.shape[1] - 1
    return math.exp(total / count)


def chapter_answers(path: str | Path, max_new_tokens: int = 128) -> list[list[int]]:
    """Greedy answers (token ids, EOS included when reached) of the checkpoint at ``path`` to the
    chapters' six prompts."""
    from transformers import AutoTokenizer

    from nano_engine.model import generate
    from nano_engine.prompts import chat_prompts

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = Transformer.from_pretrained(path)
    answers = []
    for prompt in chat_prompts(tokenizer):
        out = generate(model, torch.tensor([prompt]), max_new_tokens, eos_token_id=tokenizer.eos_token_id)[0].tolist()
        answers.append(out)
    return answers


def report(path: str | Path | None = None) -> None:
    """Print the greedy answers to the six chapter prompts and the held-out perplexity of the
    trained model and of the random ``tiny`` one."""
    from transformers import AutoTokenizer

    from nano_engine.checkpoints import tiny_checkpoint, trained_checkpoint
    from nano_engine.prompts import QUESTIONS

    path = Path(path) if path else trained_checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(path)
    for question, answer in zip(QUESTIONS, chapter_answers(path), strict=True):
        ended = answer[-1] == tokenizer.eos_token_id
        print(f"{question}\n  -> {tokenizer.decode(answer, skip_special_tokens=True)!r}"
              f"  [{len(answer)} tokens{', EOS' if ended else ', no EOS'}]")
    texts = held_out_texts()[:6]          # the seventh, string-methods, alone is longer than these six
    print(f"held-out text: {sum(len(tokenizer(t).input_ids) for t in texts)} tokens of Python's reference manual")
    for name, folder in (("trained", path), ("tiny", tiny_checkpoint())):
        print(f"held-out perplexity, {name}: {perplexity(Transformer.from_pretrained(folder), tokenizer, texts):,.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=TrainingSettings.steps)
    parser.add_argument("--out", type=Path, default=PACKED_PATH)
    parser.add_argument("--focus-steps", type=int, default=FocusSettings.steps)
    parser.add_argument("--anneal-steps", type=int, default=ANNEAL.steps)
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--first-stage", type=Path, default=None, metavar="FILE",
                       help="skip the first stage: start the second from this first-stage snapshot")
    start.add_argument("--second-stage", type=Path, default=None, metavar="FILE",
                       help="skip the first two stages: start the third from this second-stage snapshot")
    parser.add_argument("--report", nargs="?", const="", default=None, metavar="CHECKPOINT",
                        help="instead of training: answers to the chapter prompts and held-out perplexity")
    args = parser.parse_args(argv)
    if args.report is not None:
        report(args.report or None)
        return
    settings = TrainingSettings(steps=args.steps)
    focus_settings = FocusSettings(steps=args.focus_steps)
    anneal_settings = replace(ANNEAL, steps=args.anneal_steps)

    def log(line: str) -> None:
        print(line, flush=True)

    def snapshot(step: int, model: CompactModel) -> None:
        log(f"snapshot {save_packed(model, replace(settings, steps=step), f'{args.out}.step{step}')}")

    def focus_snapshot(step: int, model: CompactModel) -> None:
        path = f"{args.out}.focus{step}"
        log(f"snapshot {save_packed(model, settings, path, replace(focus_settings, steps=step))}")

    def check_settings(path: Path, key: str, expected: TrainingSettings | FocusSettings) -> None:
        with safe_open(str(path), "pt") as f:
            if json.loads(f.metadata()[key]) != json.loads(json.dumps(asdict(expected))):
                parser.error(f"{path} was not made with these {key} settings")

    if args.second_stage:
        model = load_compact(args.second_stage)
        check_settings(args.second_stage, "settings", settings)
        check_settings(args.second_stage, "focus", focus_settings)
    else:
        if args.first_stage:
            model = load_compact(args.first_stage)
            check_settings(args.first_stage, "settings", settings)
        else:
            model, _ = train(settings, log=log, snapshot=snapshot)
        model, _ = focus(model, focus_settings, log=log, snapshot=focus_snapshot)
        log(f"second stage: {save_packed(model, settings, f'{args.out}.focus', focus_settings)}")
    # Snapshots of the third stage are not shorter runs (its rate schedule depends on its length).
    model, _ = focus(model, anneal_settings, log=log)
    log(f"wrote {save_packed(model, settings, args.out, focus_settings, anneal_settings)}")


if __name__ == "__main__":
    main()
