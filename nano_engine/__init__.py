"""nano_engine: a small inference engine that really runs Qwen3, built to teach KV-cache reuse.

Chapters import the pieces from their own modules (``nano_engine.model``, ``nano_engine.paged``,
``nano_engine.prefix_cache``, ``nano_engine.radix``, ``nano_engine.engine`` ...), so that the
reader finds each mechanism in the file named after it. The engine's two entry points are also
available here, as the book chapter imports them (``from nano_engine import LLMEngine``).
"""

__version__ = "0.1.0"

_LAZY = {"LLMEngine": "nano_engine.engine", "SamplingParams": "nano_engine.sampling"}


def __getattr__(name: str):
    # Imported on first use, so `import nano_engine` stays cheap (no torch) for the judge and CLI.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nano_engine' has no attribute {name!r}")
