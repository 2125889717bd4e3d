"""Where the compiled (mypyc) forms of jetraft's hot modules are found, and whether to use them.

``make`` compiles the modules in ``COMPILED_MODULES`` with mypyc into ``build/native`` (see
``cluster/native_build.py``) and writes a manifest naming each module's source hash. Each of
jetraft's packages calls :func:`package_path` from its ``__init__``: when the manifest matches
this interpreter and every compiled module's source is unchanged since the build, the package's
compiled directory goes first on its ``__path__``, so ``import engine.stream`` loads the compiled
extension; otherwise (no build, a stale one, ``JETRAFT_PURE_PYTHON=1``) the plain modules load.
A compiled module is never used against edited source: the same code runs either way, only
faster compiled.

Must never: import anything outside the standard library (it runs before any package loads),
raise on a damaged or foreign build directory (the pure modules are the fallback), or mix a
compiled module built from other source with the current one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Final

# The modules on the per-message paths (publish, Direct Get, replication, acks), measured to gain
# from compiling.
COMPILED_MODULES: Final = (
    "engine.batch",
    "engine.digest",
    "engine.direct_get",
    "engine.entries",
    "engine.filestore",
    "engine.index",
    "engine.records",
    "engine.stream",
    "protocol.api_json",
    "protocol.headers",
    "protocol.parser",
    "protocol.session",
    "protocol.sublist",
    "cluster.batching",
    "cluster.client_conn",
    "cluster.direct_get_responder",
    "cluster.router",
    "cluster.stream_host",
)
PURE_PYTHON_ENV: Final = "JETRAFT_PURE_PYTHON"
PROJECT_ROOT: Final = Path(__file__).resolve().parent.parent
NATIVE_DIR: Final = PROJECT_ROOT / "build" / "native"
MANIFEST_NAME: Final = "manifest.json"


def source_path(module: str) -> Path:
    return PROJECT_ROOT.joinpath(*module.split(".")).with_suffix(".py")


def source_hash(module: str) -> str:
    return hashlib.sha256(source_path(module).read_bytes()).hexdigest()


def build_tag() -> str:
    """What a compiled extension is bound to: the interpreter and its extension ABI."""
    return f"{sys.implementation.cache_tag}{sysconfig.get_config_var('EXT_SUFFIX')}"


def decide(native_dir: Path, environ: Mapping[str, str]) -> tuple[bool, str]:
    """(use the compiled modules in ``native_dir``, why or why not)."""
    if environ.get(PURE_PYTHON_ENV) == "1":
        return False, f"{PURE_PYTHON_ENV}=1"
    try:
        manifest = json.loads((native_dir / MANIFEST_NAME).read_text())
        if manifest.get("build_tag") != build_tag():
            return False, f"{native_dir} was compiled for another Python"
        modules = manifest.get("modules")
        if not isinstance(modules, dict) or set(modules) != set(COMPILED_MODULES):
            return False, f"{native_dir} holds another module list"
        stale = [m for m in COMPILED_MODULES if modules[m] != source_hash(m)]
        # an extension of a module no longer listed would still shadow its source
        if _extension_modules(native_dir) != set(COMPILED_MODULES):
            return False, f"{native_dir} holds extensions of other modules (make rebuilds)"
    except (OSError, ValueError, AttributeError):
        return False, "no compiled build (make builds it; pure Python behaves the same)"
    if stale:
        return False, f"changed since the build: {', '.join(stale)} (make rebuilds)"
    return True, f"{len(COMPILED_MODULES)} modules compiled with mypyc"


def _extension_modules(native_dir: Path) -> set[str]:
    """The modules ``native_dir`` holds an extension of, by dotted name."""
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
    return {
        ".".join(path.relative_to(native_dir).parts)[: -len(suffix)]
        for path in native_dir.rglob(f"*{suffix}")
        if path.parent != native_dir  # the build's shared runtime library
    }


class _Decision:
    """Taken once per process, at the first package import."""

    made = False
    compiled = False
    reason = ""


def _decide_once() -> None:
    if _Decision.made:
        return
    _Decision.made = True
    _Decision.compiled, _Decision.reason = decide(NATIVE_DIR, os.environ)
    if _Decision.compiled and str(NATIVE_DIR) not in sys.path:
        sys.path.append(str(NATIVE_DIR))  # the build's shared runtime is a top-level module


def package_path(package: str, path: list[str]) -> list[str]:
    """``path`` (a package's ``__path__``), with its compiled directory first when in use."""
    _decide_once()
    if not _Decision.compiled:
        return path
    return [str(NATIVE_DIR.joinpath(*package.split("."))), *path]


def status() -> tuple[bool, str]:
    """(compiled modules in use, why or why not): for the server's startup log."""
    _decide_once()
    return _Decision.compiled, _Decision.reason
