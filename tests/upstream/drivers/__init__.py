"""Drivers, one module per family of examples; importing this package registers them all."""
from . import ampere, blackwell, blackwell_tutorials, distributed, experimental, hopper, tutorials  # noqa: F401
