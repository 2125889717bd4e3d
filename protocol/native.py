"""Where the compiled (mypyc) forms of jetraft's hot modules are found, and whether to use them.

``make`` compiles the modules in ``COMPILED_MODULES`` with mypyc into ``build/native`` (see
``cluster/native_build.py``) with a manifest of the hash of every source it was built from and
the size of every file it wrote. Each of jetraft's packages calls :func:`package_path` from its
``__init__``: when the manifest matches this interpreter, every source is unchanged since the
build and the directory holds exactly what was built, the package's compiled directory goes
first on its ``__path__``, so ``import engine.stream`` loads the compiled extension; otherwise
(no build, a stale or damaged one, ``JETRAFT_PURE_PYTHON=1``) the plain modules load.
A compiled module is never used against edited source: the same code runs either way, only
faster compiled.

Must never: import anything outside the standard library (it runs before any package loads),
raise on a damaged or foreign build directory (the pure modules are the fallback), or mix a
compiled module built from other source with the current one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

# The modules on the per-message paths (publish, Direct Get, replication, acks), measured to gain
# from compiling.
COMPILED_MODULES: Final = (
    "engine.batch",
    "engine.digest",
    "engine.direct_get",
    "engine.entries",
    "engine.entry_codec",
    "engine.filestore",
    "engine.index",
    "engine.limits",
    "engine.memstore",
    "engine.meta_columns",
    "engine.read_cache",
    "engine.read_tail",
    "engine.records",
    "engine.seqlist",
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
# Hand-written C extensions built beside them: module, source, libraries to link. Each replaces
# one function of a module above, which keeps the Python form as the fallback.
C_EXTENSIONS: Final = (
    ("engine._codec_c", "engine/_codec_c.c", ("z", "dl")),
    ("protocol._parser_c", "protocol/_parser_c.c", ()),
)
C_EXTENSION_NAMES: Final = tuple(name for name, _source, _libraries in C_EXTENSIONS)
PURE_PYTHON_ENV: Final = "JETRAFT_PURE_PYTHON"
PROJECT_ROOT: Final = Path(__file__).resolve().parent.parent
NATIVE_DIR: Final = PROJECT_ROOT / "build" / "native"
MANIFEST_NAME: Final = "manifest.json"


# Every module the compiled ones were built against: mypyc copies constants (``Final``) and
# types of imported modules into the extensions, so an edit to any of them makes a build stale.
SOURCE_PACKAGES: Final = ("protocol", "engine", "cluster")
SOURCE_PATTERNS: Final = ("*.py", "*.c")


def source_path(module: str) -> Path:
    return PROJECT_ROOT.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes() -> dict[str, str]:
    """sha256 of every source file of SOURCE_PACKAGES, by path relative to the project."""
    return {
        path.relative_to(PROJECT_ROOT).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for package in SOURCE_PACKAGES
        for pattern in SOURCE_PATTERNS
        for path in sorted((PROJECT_ROOT / package).rglob(pattern))
    }


def extension_sizes(native_dir: Path) -> dict[str, int]:
    """Every file under ``native_dir`` but the manifest (the modules' extensions and the shared
    runtime's; anything else there could shadow a source too), by relative path, with its size."""
    return {
        path.relative_to(native_dir).as_posix(): path.stat().st_size
        for path in sorted(native_dir.rglob("*"))
        if path.is_file() and path.name != MANIFEST_NAME
    }


def expected_extensions(c_built: Sequence[str] = C_EXTENSION_NAMES) -> set[str]:
    """The module extensions a build of COMPILED_MODULES and of the C extensions ``c_built``
    holds (besides the shared runtime)."""
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
    return {"/".join(m.split(".")) + suffix for m in (*COMPILED_MODULES, *c_built)}


def build_tag() -> str:
    """What a compiled extension is bound to: the interpreter and its extension ABI."""
    return f"{sys.implementation.cache_tag}{sysconfig.get_config_var('EXT_SUFFIX')}"


def manifest_for(
    native_dir: Path, sources: dict[str, str], c_built: Sequence[str] = C_EXTENSION_NAMES
) -> dict[str, object]:
    """What a finished build in ``native_dir`` of ``sources`` records about itself (``c_built``:
    the C extensions it holds; one that did not compile is left out, its Python form used)."""
    return {
        "build_tag": build_tag(),
        "modules": list(COMPILED_MODULES),
        "c_extensions": list(c_built),
        "sources": sources,
        "extensions": extension_sizes(native_dir),
    }


def decide(native_dir: Path, environ: Mapping[str, str]) -> tuple[bool, str]:
    """(use the compiled modules in ``native_dir``, why or why not)."""
    if environ.get(PURE_PYTHON_ENV) == "1":
        return False, f"{PURE_PYTHON_ENV}=1"
    try:
        manifest = json.loads((native_dir / MANIFEST_NAME).read_text())
        if not isinstance(manifest, dict) or manifest.get("build_tag") != build_tag():
            return False, f"{native_dir} was compiled for another Python"
        c_built = manifest.get("c_extensions")
        if (
            manifest.get("modules") != list(COMPILED_MODULES)
            or not isinstance(c_built, list)
            or c_built != [name for name in C_EXTENSION_NAMES if name in c_built]
        ):
            return False, f"{native_dir} holds another module list (make rebuilds)"
        sources = manifest.get("sources")
        current = source_hashes()
        if sources != current:
            known = sources if isinstance(sources, dict) else {}
            changed = sorted(p for p in set(known) | set(current) if known.get(p) != current.get(p))
            shown = ", ".join(changed[:3]) + (" ..." if len(changed) > 3 else "")
            return False, f"sources changed since the build: {shown} (make rebuilds)"
        # a damaged (cut short) or foreign extension would crash the import, not fall back
        extensions = extension_sizes(native_dir)
        expected = expected_extensions(c_built)
        if extensions != manifest.get("extensions") or not expected <= set(extensions):
            return False, f"{native_dir} holds other extensions than it built (make rebuilds)"
    except (OSError, ValueError):
        return False, "no compiled build (make builds it; pure Python behaves the same)"
    return True, (
        f"{len(COMPILED_MODULES)} modules compiled with mypyc, {len(c_built)} of"
        f" {len(C_EXTENSIONS)} C extensions"
    )


@functools.cache
def status() -> tuple[bool, str]:
    """(compiled modules in use, why or why not): decided once per process, at the first
    package import (also for the server's startup log)."""
    compiled, reason = decide(NATIVE_DIR, os.environ)
    if compiled and str(NATIVE_DIR) not in sys.path:
        sys.path.append(str(NATIVE_DIR))  # the build's shared runtime is a top-level module
    return compiled, reason


def package_path(package: str, path: list[str]) -> list[str]:
    """``path`` (a package's ``__path__``), with its compiled directory first when in use."""
    if not status()[0]:
        return path
    return [str(NATIVE_DIR.joinpath(*package.split("."))), *path]
