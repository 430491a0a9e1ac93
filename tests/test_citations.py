"""Every citation of vLLM / SGLang code in the chapters, modules and exercise statements is in the
register (tests/citations.toml), so that `make check-citations` checks it against its release.
Offline: the online check itself needs the network and is not part of `make test`."""

import check_citations as cc
import pytest


def test_every_citation_is_registered():
    missing = cc.missing_from_register()
    assert not missing, ("citations not in tests/citations.toml (add these entries; "
                         "`python tests/check_citations.py --missing` prints them):\n"
                         + cc.as_toml(list(missing)) + "\ncited in: "
                         + "; ".join(f"{c.path}::{c.symbol} in {w[0]}" for c, w in missing.items()))


def test_the_chapters_cite_symbols_and_pin_releases():
    found = cc.scan()
    assert sum(1 for c in found if c.symbol) >= 20, "the chapters should cite symbols as path::symbol"
    releases, _ = cc.load_register()
    assert releases["vllm"]["package"] == "vllm==0.33.0" and releases["sglang"]["package"] == "sglang==0.5.23"


def test_parse_recognises_the_citation_forms():
    text = ("see `vllm/v1/core/block_pool.py::BlockPool.touch` and `python/sglang/srt/mem_cache/radix_cache.py`, "
            "not `nano_engine/radix.py` nor `BlockPool`")
    assert cc.parse(text) == [cc.Citation("vllm", "vllm/v1/core/block_pool.py", "BlockPool.touch"),
                              cc.Citation("sglang", "python/sglang/srt/mem_cache/radix_cache.py", None)]


def test_definition_checks():
    source = "class A:\n    def b(self):\n        pass\nX = 1\nY: int = 2\n"
    assert cc.defines(source, "m.py", "A.b") and cc.defines(source, "m.py", "X") and cc.defines(source, "m.py", "Y")
    assert not cc.defines(source, "m.py", "A.c") and not cc.defines(source, "m.py", "b")
    rust = "impl CacheAwarePolicy {\n    fn select_worker(&self) {}\n}\npub struct CliArgs {}\n"
    assert cc.defines(rust, "x.rs", "select_worker") and cc.defines(rust, "x.rs", "CliArgs")
    assert not cc.defines(rust, "x.rs", "get_smallest_tenant")


def test_a_register_entry_must_name_a_known_release(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text('[releases.vllm]\nkind = "wheel"\npackage = "vllm==0.33.0"\n\n'
                   '[[cite]]\nproject = "sglang"\npath = "python/sglang/x.py"\nsymbols = []\n')
    with pytest.raises(ValueError, match="no \\[releases\\] entry"):
        cc.load_register(bad)


def wheel(folder, name, version, files):
    """A wheel-shaped zip of ``files`` (path -> text): enough for check_citations to read."""
    import zipfile

    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for inner, text in files.items():
            z.writestr(inner, text)
    return path


def test_newest_release_comparison_names_what_moved_disappeared_and_changed(tmp_path):
    """Against a newer release, each citation is the same, changed (same place, other text), moved
    (the file under another path, or the symbol defined in another file: both named) or gone."""
    spec = {"kind": "wheel", "package": "vllm==0.1.0"}
    pinned = cc.Release.from_archive(spec, wheel(tmp_path, "vllm", "0.1.0", {
        "vllm/core/pool.py": "class Pool:\n    def free(self):\n        return 1\n\ndef keep():\n    pass\n",
        "vllm/worker/gpu_model_runner.py": "X = 1\n",
        "vllm/gone.py": "def old():\n    pass\n",
        "vllm/moves.py": "def hop():\n    pass\n"}))
    newest = cc.Release.from_archive(dict(spec, package="vllm"), wheel(tmp_path, "vllm", "0.2.0", {
        "vllm/core/pool.py": "class Pool:\n    def free(self):\n        return 2\n\ndef keep():\n    pass\n",
        "vllm/worker/gpu/model_runner.py": "X = 1\n",
        "vllm/moves.py": "Y = 2\n",
        "vllm/elsewhere/hops.py": "def hop():\n    pass\n"}))
    assert str(newest.version) == "0.2.0"
    c = cc.Citation
    result = cc.compare([c("vllm", "vllm/core/pool.py", "Pool.free"), c("vllm", "vllm/core/pool.py", "keep"),
                         c("vllm", "vllm/worker/gpu_model_runner.py", None), c("vllm", "vllm/gone.py", "old"),
                         c("vllm", "vllm/moves.py", "hop")], pinned, newest)
    assert result["same"] == ["vllm/core/pool.py::keep"]
    assert result["changed"] == ["vllm/core/pool.py::Pool.free  (+1 -1 lines)"]
    assert result["moved"] == ["vllm/worker/gpu_model_runner.py  ->  vllm/worker/gpu/model_runner.py",
                               "vllm/moves.py::hop  ->  vllm/elsewhere/hops.py::hop"]
    assert result["disappeared"] == ["vllm/gone.py::old"]
