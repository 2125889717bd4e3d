# Compiled forms of this package's hot modules come first when built and current.
from protocol.native import package_path

__path__ = package_path(__name__, __path__)
