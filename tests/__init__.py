"""The test tree mirrors the packages (tests/engine/stream tests engine/ stream code, ...).

This file makes ``tests`` a regular package so that test folders with an ``__init__.py`` get
dotted module names under pytest's default import mode (``tests.engine.stream.test_limits``):
a helper or test module imported as ``from tests.engine.stream.harness import ...`` is then the
very module pytest collected, not a second copy under a bare name, and no folder needs to be put
on ``sys.path``. Without it, pytest would import tests/engine/... as a top-level ``engine``
package and shadow the real one. Folders without an ``__init__.py`` are still collected the
rootless way (their directory prepended to ``sys.path``, modules by bare name), so their test
file basenames must stay unique across such folders.
"""
