"""kiln.utils: data loading (kiln.utils.data); room for more (tensorboard)."""
from . import data  # noqa: F401
