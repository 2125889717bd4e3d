"""``python -m cluster.native_build``: compile jetraft's hot modules with mypyc.

Writes the extensions to ``build/native`` (one directory per package, plus mypyc's shared
runtime library) and, only once every one of them was built, the manifest that lets
``protocol/native.py`` use them. Without mypyc or a C compiler it says so and exits 0: the pure
Python modules are then used, which behave the same. ``--check`` exits 1 when the build is
missing or stale (what ``make`` asks before rebuilding).

Must never: leave a manifest that names sources other than the ones compiled, or fail the
install because compiling is impossible here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from protocol.native import (
    COMPILED_MODULES,
    MANIFEST_NAME,
    NATIVE_DIR,
    PROJECT_ROOT,
    build_tag,
    decide,
    source_hash,
    source_path,
)

BUILD_TEMP_DIR = PROJECT_ROOT / "build" / "native-temp"


def build() -> bool:
    """Compile every module of COMPILED_MODULES; True when the build is in place."""
    try:
        from mypyc.build import mypycify
        from setuptools import Distribution  # type: ignore[import-untyped]
    except ImportError as exc:
        print(f"native build skipped: {exc.name} is not installed (pure Python is used)")
        return False
    hashes = {module: source_hash(module) for module in COMPILED_MODULES}
    # from scratch: an extension left from an earlier module list would shadow its source
    shutil.rmtree(NATIVE_DIR, ignore_errors=True)
    NATIVE_DIR.mkdir(parents=True)
    manifest = NATIVE_DIR / MANIFEST_NAME
    sources = [str(source_path(m).relative_to(PROJECT_ROOT)) for m in COMPILED_MODULES]
    print(f"compiling {len(COMPILED_MODULES)} modules with mypyc into {NATIVE_DIR} (a minute)")
    cwd = os.getcwd()
    os.chdir(PROJECT_ROOT)  # mypyc names modules after their paths relative to here
    try:
        # a cache of its own: the project's .mypy_cache may be in use by a concurrent `mypy`
        cache = ["--cache-dir", str(BUILD_TEMP_DIR / "mypy-cache")]
        extensions = mypycify([*cache, *sources], opt_level="3", target_dir=str(BUILD_TEMP_DIR))
        dist = Distribution({"name": "jetraft-native", "ext_modules": extensions})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib = str(NATIVE_DIR)
        cmd.build_temp = str(BUILD_TEMP_DIR)
        cmd.parallel = os.cpu_count() or 1
        dist.run_command("build_ext")
    except (Exception, SystemExit) as exc:  # a compiler error, no compiler, a mypyc error
        print(f"native build failed ({exc!r}); pure Python is used", file=sys.stderr)
        return False
    finally:
        os.chdir(cwd)
    # written last and atomically: a half-built directory is never taken for a build
    with tempfile.NamedTemporaryFile("w", dir=NATIVE_DIR, delete=False) as out:
        json.dump({"build_tag": build_tag(), "modules": hashes}, out, indent=1, sort_keys=True)
    os.replace(out.name, manifest)
    print(f"compiled: {decide(NATIVE_DIR, {})[1]}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 unless the build is current")
    parser.add_argument("--clean", action="store_true", help="remove the build")
    args = parser.parse_args(argv)
    if args.clean:
        shutil.rmtree(NATIVE_DIR, ignore_errors=True)
        shutil.rmtree(BUILD_TEMP_DIR, ignore_errors=True)
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
