"""Shared helpers of the kiln Python tests: a PyTorch reference when one is installed."""
import pytest

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except Exception:  # not installed in .venv-py by default: the comparisons are skipped
    HAVE_TORCH = False

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed")
