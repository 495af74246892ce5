"""kiln.utils: data loading (kiln.utils.data) and TensorBoard logging (kiln.utils.tensorboard)."""
from . import data  # noqa: F401
from . import tensorboard  # noqa: F401
