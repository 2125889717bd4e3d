"""protocol/native.py: compiled modules are used only from a build that matches the sources."""

from __future__ import annotations

import importlib
import json
import sysconfig
from pathlib import Path

from protocol import native
from protocol.native import (
    C_EXTENSION_NAMES,
    C_EXTENSIONS,
    COMPILED_MODULES,
    MANIFEST_NAME,
    PURE_PYTHON_ENV,
    decide,
    manifest_for,
    source_hashes,
)

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
BUILT = (*COMPILED_MODULES, *C_EXTENSION_NAMES)


def _build(
    directory: Path,
    modules: tuple[str, ...] = BUILT,
    c_built: tuple[str, ...] = C_EXTENSION_NAMES,
) -> None:
    """A stand-in build: an extension file per module, the shared runtime, the manifest (which
    names ``c_built`` as the C extensions built)."""
    for module in modules:
        path = directory.joinpath(*module.split(".")).with_name(module.split(".")[-1] + SUFFIX)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"compiled " + module.encode())
    (directory / f"runtime__mypyc{SUFFIX}").write_bytes(b"runtime")
    manifest = manifest_for(directory, source_hashes(), c_built)
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest))


def _manifest(directory: Path) -> dict[str, object]:
    loaded = json.loads((directory / MANIFEST_NAME).read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_a_build_of_the_current_sources_is_used(tmp_path: Path) -> None:
    _build(tmp_path)
    assert decide(tmp_path, {})[0]
    assert decide(tmp_path, {PURE_PYTHON_ENV: "1"}) == (False, f"{PURE_PYTHON_ENV}=1")


def test_an_edit_to_any_source_it_was_built_from_turns_it_off(tmp_path: Path) -> None:
    """Not only the compiled modules: mypyc copies constants and types of the modules they
    import (engine/limits.py is not compiled, yet its limits are inside stream.py's build)."""
    _build(tmp_path)
    manifest = _manifest(tmp_path)
    sources = manifest["sources"]
    assert isinstance(sources, dict) and "engine/limits.py" in sources
    sources["engine/limits.py"] = "0" * 64
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    compiled, why = decide(tmp_path, {})
    assert not compiled and "engine/limits.py" in why


def test_an_edit_to_a_c_source_turns_it_off(tmp_path: Path) -> None:
    _build(tmp_path)
    manifest = _manifest(tmp_path)
    sources = manifest["sources"]
    assert isinstance(sources, dict)
    for _name, source, _libraries in C_EXTENSIONS:
        assert source in sources
        sources[source] = "0" * 64
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    compiled, why = decide(tmp_path, {})
    assert not compiled and C_EXTENSIONS[0][1] in why


def test_a_build_missing_a_c_extension_its_manifest_names_is_not_used(tmp_path: Path) -> None:
    _build(tmp_path, COMPILED_MODULES)
    compiled, why = decide(tmp_path, {})
    assert not compiled and "other extensions" in why


def test_a_build_whose_c_extension_did_not_compile_is_used_without_it(tmp_path: Path) -> None:
    """One C extension failing (zlib's header missing, say) costs only that function's speed:
    the mypyc modules and the other C extensions are still used."""
    first, *rest = C_EXTENSION_NAMES
    _build(tmp_path, (*COMPILED_MODULES, *rest), tuple(rest))
    compiled, why = decide(tmp_path, {})
    assert compiled and f"{len(rest)} of {len(C_EXTENSION_NAMES)} C extensions" in why
    manifest = _manifest(tmp_path)
    for listed in ([*rest, "engine._other_c"], [*reversed(C_EXTENSION_NAMES)], "all"):
        manifest["c_extensions"] = listed  # names no build of these sources can hold
        (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
        compiled, why = decide(tmp_path, {})
        assert not compiled and "another module list" in why, listed
    assert first not in rest


def test_extensions_other_than_built_turn_it_off(tmp_path: Path) -> None:
    """One cut short (it would crash the import), one of a module no longer listed, or any
    stray file that could shadow a source."""
    _build(tmp_path)
    stream = tmp_path / "engine" / f"stream{SUFFIX}"
    stream.write_bytes(b"cut")
    assert "other extensions" in decide(tmp_path, {})[1]
    _build(tmp_path)
    (tmp_path / "cluster" / f"routes{SUFFIX}").write_bytes(b"old")
    assert "other extensions" in decide(tmp_path, {})[1]
    (tmp_path / "cluster" / f"routes{SUFFIX}").unlink()
    (tmp_path / "cluster" / "routes.py").write_text("")
    assert "other extensions" in decide(tmp_path, {})[1]
    (tmp_path / "cluster" / "routes.py").unlink()
    assert decide(tmp_path, {})[0]


def test_missing_foreign_or_damaged_builds_fall_back(tmp_path: Path) -> None:
    assert not decide(tmp_path, {})[0]  # no manifest
    _build(tmp_path, COMPILED_MODULES[1:])
    manifest = _manifest(tmp_path)
    manifest["modules"] = list(COMPILED_MODULES)
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert "other extensions" in decide(tmp_path, {})[1]  # one extension missing
    _build(tmp_path)
    manifest = _manifest(tmp_path)
    manifest["build_tag"] = "cpython-399.so"
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert "another Python" in decide(tmp_path, {})[1]
    _build(tmp_path)
    manifest = _manifest(tmp_path)
    manifest["modules"] = list(COMPILED_MODULES[1:])
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
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
    suffix = SUFFIX if compiled else ".py"
    for name in COMPILED_MODULES:
        module = importlib.import_module(name)
        assert str(module.__file__).endswith(suffix), (name, module.__file__)
