"""nano_engine: a small inference engine that really runs Qwen3, built to teach KV-cache reuse.

Chapters import the pieces from their own modules (``nano_engine.model``, ``nano_engine.paged``,
``nano_engine.prefix_cache``, ``nano_engine.radix``, ``nano_engine.engine`` ...), so that the
reader finds each mechanism in the file named after it.
"""

__version__ = "0.1.0"
