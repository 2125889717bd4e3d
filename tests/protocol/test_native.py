"""protocol/native.py: compiled modules are used only from a build that matches the sources."""

from __future__ import annotations

import importlib
import json
import sysconfig
from pathlib import Path

from protocol import native
from protocol.native import (
    COMPILED_MODULES,
    MANIFEST_NAME,
    PURE_PYTHON_ENV,
    build_tag,
    decide,
    source_hash,
)


def _write_manifest(directory: Path, modules: dict[str, str], tag: str | None = None) -> None:
    manifest = {"build_tag": tag or build_tag(), "modules": modules}
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest))


def _current() -> dict[str, str]:
    return {m: source_hash(m) for m in COMPILED_MODULES}


def _write_extensions(directory: Path, modules: tuple[str, ...]) -> None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for module in modules:
        path = directory.joinpath(*module.split(".")).with_name(module.split(".")[-1] + suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    (directory / f"runtime__mypyc{suffix}").write_bytes(b"")


def test_a_build_of_the_current_sources_is_used(tmp_path: Path) -> None:
    _write_manifest(tmp_path, _current())
    _write_extensions(tmp_path, COMPILED_MODULES)
    assert decide(tmp_path, {})[0]
    assert decide(tmp_path, {PURE_PYTHON_ENV: "1"}) == (False, f"{PURE_PYTHON_ENV}=1")


def test_an_extension_of_an_unlisted_module_turns_the_build_off(tmp_path: Path) -> None:
    """A module dropped from the list keeps no stale extension in front of its source."""
    _write_manifest(tmp_path, _current())
    _write_extensions(tmp_path, (*COMPILED_MODULES, "cluster.routes"))
    compiled, why = decide(tmp_path, {})
    assert not compiled and "other modules" in why


def test_one_edited_source_turns_the_whole_build_off(tmp_path: Path) -> None:
    _write_extensions(tmp_path, COMPILED_MODULES)
    modules = _current()
    modules["engine.stream"] = "0" * 64
    _write_manifest(tmp_path, modules)
    compiled, why = decide(tmp_path, {})
    assert not compiled and "engine.stream" in why


def test_missing_foreign_or_damaged_builds_fall_back(tmp_path: Path) -> None:
    assert not decide(tmp_path, {})[0]  # no manifest
    _write_extensions(tmp_path, COMPILED_MODULES[1:])
    _write_manifest(tmp_path, _current())
    assert "other modules" in decide(tmp_path, {})[1]  # one extension missing
    _write_extensions(tmp_path, COMPILED_MODULES)
    _write_manifest(tmp_path, _current(), tag="cpython-399.so")
    assert "another Python" in decide(tmp_path, {})[1]
    _write_manifest(tmp_path, {m: h for m, h in _current().items() if m != "engine.index"})
    assert "module list" in decide(tmp_path, {})[1]
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    assert not decide(tmp_path, {})[0]
    (tmp_path / MANIFEST_NAME).write_text("[]")
    assert not decide(tmp_path, {})[0]


def test_the_modules_loaded_are_the_ones_the_decision_names() -> None:
    """Under `make test` this runs compiled and again with JETRAFT_PURE_PYTHON=1: each time every
    listed module must come from where the decision says (a loader that silently kept the .py
    files, or mixed them, would fail here)."""
    compiled, _why = native.status()
    suffix = sysconfig.get_config_var("EXT_SUFFIX") if compiled else ".py"
    for name in COMPILED_MODULES:
        module = importlib.import_module(name)
        assert str(module.__file__).endswith(suffix), (name, module.__file__)
