"""``python -m cluster.native_build``: compile jetraft's hot modules with mypyc.

Builds the extensions (one directory per package, plus mypyc's shared runtime library) beside
``build/native``, writes the manifest that lets ``protocol/native.py`` use them (the hash of
every source they were built from, and each file's size), then swaps the new directory in.
One build runs at a time (a lock in the temp directory). Without mypyc or a C compiler it says
so and exits 0: the pure Python modules are then used, which behave the same. ``--check`` exits
1 when the build is missing or stale.

Must never: leave a manifest that names sources other than the ones compiled, expose a
half-built directory, or fail the install because compiling is impossible here.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
from typing import Any

from protocol.native import (
    C_EXTENSIONS,
    COMPILED_MODULES,
    MANIFEST_NAME,
    NATIVE_DIR,
    PROJECT_ROOT,
    decide,
    manifest_for,
    source_hashes,
    source_path,
)

BUILD_TEMP_DIR = PROJECT_ROOT / "build" / "native-temp"
# a build is made here and swapped in whole; the one it replaces waits here to be removed
FRESH_DIR = NATIVE_DIR.with_name(NATIVE_DIR.name + ".new")
OLD_DIR = NATIVE_DIR.with_name(NATIVE_DIR.name + ".old")


def build() -> bool:
    """Compile every module of COMPILED_MODULES; True when the build is in place."""
    try:
        from mypyc.build import mypycify
        from setuptools import Distribution, Extension  # type: ignore[import-untyped]
    except ImportError as exc:
        print(f"native build skipped: {exc.name} is not installed (pure Python is used)")
        return False
    BUILD_TEMP_DIR.mkdir(parents=True, exist_ok=True)
    with open(BUILD_TEMP_DIR / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (they share the temp dir)
        if decide(NATIVE_DIR, {})[0]:
            return True  # another build finished while this one waited for the lock
        return _build_locked(mypycify, Distribution, Extension)


def _build_locked(mypycify: Any, distribution: Any, extension: Any) -> bool:
    sources = source_hashes()  # before compiling: an edit made meanwhile makes the build stale
    files = [str(source_path(m).relative_to(PROJECT_ROOT)) for m in COMPILED_MODULES]
    # built beside the one in use and swapped in whole: a reader sees the old build, none, or
    # the new one, never a half-written extension (which would crash the import)
    shutil.rmtree(FRESH_DIR, ignore_errors=True)
    FRESH_DIR.mkdir(parents=True)
    print(
        f"compiling {len(COMPILED_MODULES)} modules with mypyc and {len(C_EXTENSIONS)} C"
        f" extension(s) into {NATIVE_DIR} (a minute)"
    )
    cwd = os.getcwd()
    os.chdir(PROJECT_ROOT)  # mypyc names modules after their paths relative to here
    try:
        # a cache of its own: the project's .mypy_cache may be in use by a concurrent `mypy`
        cache = ["--cache-dir", str(BUILD_TEMP_DIR / "mypy-cache")]
        _build_ext(
            distribution,
            mypycify([*cache, *files], opt_level="3", target_dir=str(BUILD_TEMP_DIR)),
        )
        c_built = _build_c_extensions(distribution, extension)
    except (Exception, SystemExit) as exc:  # a compiler error, no compiler, a mypyc error
        print(f"native build failed ({exc!r}); pure Python is used", file=sys.stderr)
        shutil.rmtree(FRESH_DIR, ignore_errors=True)
        return False
    finally:
        os.chdir(cwd)
    manifest = manifest_for(FRESH_DIR, sources, c_built)
    (FRESH_DIR / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))
    shutil.rmtree(OLD_DIR, ignore_errors=True)
    if NATIVE_DIR.exists():
        NATIVE_DIR.rename(OLD_DIR)
    FRESH_DIR.rename(NATIVE_DIR)
    shutil.rmtree(OLD_DIR, ignore_errors=True)
    print(f"compiled: {decide(NATIVE_DIR, {})[1]}")
    return True


def _build_ext(distribution: Any, extensions: list[Any]) -> None:
    dist = distribution({"name": "jetraft-native", "ext_modules": extensions})
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib = str(FRESH_DIR)
    cmd.build_temp = str(BUILD_TEMP_DIR)
    cmd.parallel = os.cpu_count() or 1
    dist.run_command("build_ext")


def _build_c_extensions(distribution: Any, extension: Any) -> list[str]:
    """Each C extension on its own, after the mypyc modules: one that does not build (zlib's
    header missing, say) is left out and its module keeps its Python function, while the rest
    of the build is still used. The names of those built, in C_EXTENSIONS order."""
    built = []
    for name, source, libraries in C_EXTENSIONS:
        try:
            ext = extension(name, [source], libraries=list(libraries), extra_compile_args=["-O3"])
            _build_ext(distribution, [ext])
        except (Exception, SystemExit) as exc:
            print(
                f"C extension {name} not built ({exc!r}): its Python form is used", file=sys.stderr
            )
            for leftover in FRESH_DIR.joinpath(*name.split(".")).parent.glob(
                name.split(".")[-1] + ".*"
            ):
                leftover.unlink()
            continue
        built.append(name)
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 unless the build is current")
    parser.add_argument("--clean", action="store_true", help="remove the build")
    args = parser.parse_args(argv)
    if args.clean:
        for directory in (FRESH_DIR, OLD_DIR, NATIVE_DIR, BUILD_TEMP_DIR):
            shutil.rmtree(directory, ignore_errors=True)
        return 0
    active, reason = decide(NATIVE_DIR, {})  # the build itself, whatever the environment asks
    if args.check:
        print(reason)
        return 0 if active else 1
    if active:
        print(f"native build is current: {reason}")
        return 0
    build()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
