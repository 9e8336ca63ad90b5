"""Drivers, one module per family of examples; importing this package registers them all."""
from . import (  # noqa: F401
    ampere, blackwell, blackwell_tutorials, distributed, experimental, hopper, more_blackwell, tutorials)
