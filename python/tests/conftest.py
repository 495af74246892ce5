"""Shared helpers of the kiln Python tests: a PyTorch reference when one is installed, and the
C op tables as scripts/gen_optable.py --json gives them."""
import json
import pathlib
import subprocess
import sys

import pytest

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except Exception:  # not installed in .venv-py by default: the comparisons are skipped
    HAVE_TORCH = False

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed")


def optable_json():
    """The C op tables (src/ir/*_table.h) as data; skips when not run from the repository."""
    script = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "gen_optable.py"
    if not script.exists():
        pytest.skip("not run from the repository")
    return json.loads(subprocess.run([sys.executable, str(script), "--json"], check=True,
                                     capture_output=True, text=True).stdout)
