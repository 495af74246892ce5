"""kiln.utils.tensorboard: TensorBoard event files with PyTorch's SummaryWriter names.

    from kiln.utils.tensorboard import SummaryWriter
    with SummaryWriter("runs/mlp") as w:
        w.add_scalar("train/loss", loss, step)        # a kiln Tensor: read later, no wait
        w.add_scalar("train/lr", 1e-3, step)
        w.add_histogram("fc1.weight", model[1].weight, step)   # computed where it lives
        w.add_text("notes", "first run", 0)

A thin layer over kiln's C writer (kiln/summary.h): adding never waits for the device, a writer
thread reads pending tensors in batches and appends the records; `tensorboard --logdir runs`
reads the files as it reads PyTorch's. Errors raise kiln's exceptions, naming the Python line.
"""
import os
import socket
from datetime import datetime

import kiln
from kiln import _C

__all__ = ["SummaryWriter"]


class SummaryWriter:
    """torch.utils.tensorboard.SummaryWriter's constructor and add_* methods.

    log_dir: where the event file goes (created with its parents); None: runs/<date>_<host><comment>.
    max_queue: events pending before an add waits for the writer thread (kiln's bound; PyTorch's
    default of 10 would make the thread read every few steps, so None keeps kiln's 10000).
    flush_secs: the file is flushed at least this often. purge_step is not supported.
    """

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=None, flush_secs=120, filename_suffix=""):
        if purge_step is not None:
            raise NotImplementedError("purge_step is not supported")
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = os.fspath(log_dir)
        self._w = _C._summary_open(self.log_dir, float(flush_secs), 10000 if max_queue is None else int(max_queue),
                                   filename_suffix or None)

    def get_logdir(self):
        return self.log_dir

    @property
    def file_name(self):
        """The event file's path."""
        return _C._summary_path(self._w)

    def _writer(self):
        if self._w is None:
            raise RuntimeError("the SummaryWriter was closed")
        return self._w

    @staticmethod
    def _step(global_step):
        return 0 if global_step is None else int(global_step)

    @staticmethod
    def _no_walltime(walltime):
        if walltime is not None:
            raise NotImplementedError("walltime is taken when the value is added")

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False, double_precision=False):
        """A number, or a kiln Tensor of one element (read later by the writer's thread)."""
        self._no_walltime(walltime)
        if isinstance(scalar_value, kiln.Tensor):
            _C._summary_add(self._writer(), 1, tag, scalar_value, self._step(global_step))
        else:
            _C._summary_add(self._writer(), 0, tag, float(scalar_value), self._step(global_step))

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        """Each value under main_tag/name (in this writer's file, where PyTorch opens one per name)."""
        for name, value in tag_scalar_dict.items():
            self.add_scalar(f"{main_tag}/{name}", value, global_step, walltime)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None):
        """TensorBoard's default buckets (bins="tensorflow"), computed on the tensor's device."""
        self._no_walltime(walltime)
        if bins != "tensorflow" or max_bins is not None:
            raise NotImplementedError('only bins="tensorflow" (TensorBoard\'s default buckets) is supported')
        if not isinstance(values, kiln.Tensor):
            values = kiln.tensor(values)
        _C._summary_add(self._writer(), 2, tag, values.detach(), self._step(global_step))

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        self._no_walltime(walltime)
        _C._summary_add(self._writer(), 3, tag, str(text_string), self._step(global_step))

    def flush(self):
        """Waits until everything added is in the file."""
        _C._summary_flush(self._writer())

    def close(self):
        """Flushes and closes the file; closing twice is harmless, adding afterwards an error."""
        if self._w is not None:
            w, self._w = self._w, None
            _C._summary_close(w)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
