# Makes helpers.py importable and the package importable from the source tree when
# PYTHONPATH does not already name it.
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
try:
    import attn  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.dirname(here))
