"""kiln.utils.tensorboard.SummaryWriter: PyTorch's method names over kiln's C writer. The files
are read back with TensorBoard's own reader (the tensorboard package; scripts/setup-debian.sh
puts it in build-deps/python-tb), histograms checked against numpy.histogram over the edges
torch uses. Without tensorboard the read-back tests are skipped; the error tests still run."""
import os
import sys

import numpy as np
import pytest

import kiln
from kiln.utils.tensorboard import SummaryWriter

_TB = os.path.join(os.path.dirname(__file__), "..", "..", "build-deps", "python-tb")
if os.path.isdir(_TB) and _TB not in sys.path:
    sys.path.append(_TB)


def accumulator(logdir):
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = ea.EventAccumulator(logdir, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.TENSORS: 0})
    acc.Reload()
    return acc


def torch_histogram(values):
    """torch's make_histogram over its default bins: (limits, counts) as written."""
    v, pos = 1e-12, []
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    edges = [-x for x in reversed(pos)] + [0.0] + pos
    counts, limits = np.histogram(values.reshape(-1).astype(float), bins=edges)
    cum = np.cumsum(np.greater(counts, 0))
    start, end = np.searchsorted(cum, [0, cum[-1] - 1], side="right")
    start, end = int(start), int(end) + 1
    counts = counts[start - 1:end] if start > 0 else np.concatenate([[0], counts[:end]])
    return list(limits[start:end + 1]), [float(c) for c in counts]


def test_scalars_histogram_and_text_read_back(tmp_path):
    rng = np.random.default_rng(3)
    weights = (rng.standard_normal((64, 32)) * 0.05).astype(np.float32)
    with SummaryWriter(tmp_path / "run") as w:
        assert os.path.basename(w.file_name).startswith("events.out.tfevents.")
        for step in range(5):
            loss = kiln.tensor([2.0 - step * 0.25]).sum()  # a tensor: read later by the writer
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/lr", 0.1 / (step + 1), global_step=step)
        w.add_scalars("acc", {"train": 0.5, "test": 0.25}, 4)
        w.add_histogram("fc/weight", kiln.from_numpy(weights), 3)
        w.add_histogram("plain", [1.0, 2.0, 2.0, -3.5], 1)
        w.add_text("notes", "kiln *run*", 2)
        w.flush()
    acc = accumulator(str(tmp_path / "run"))
    assert sorted(acc.Tags()["scalars"]) == ["acc/test", "acc/train", "train/loss", "train/lr"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(s, 2.0 - s * 0.25) for s in range(5)]
    assert [e.value for e in acc.Scalars("train/lr")] == [float(np.float32(0.1 / (s + 1))) for s in range(5)]
    assert acc.Scalars("acc/test")[0].value == 0.25
    for tag, values, step in [("fc/weight", weights, 3), ("plain", np.array([1.0, 2.0, 2.0, -3.5]), 1)]:
        event = acc.Histograms(tag)[0]
        h = event.histogram_value
        limits, counts = torch_histogram(values)
        assert event.step == step and h.num == values.size
        assert list(h.bucket_limit) == limits and list(h.bucket) == counts
        assert h.min == values.min() and h.max == values.max()
        assert h.sum == pytest.approx(float(values.astype(float).sum()), rel=1e-12, abs=1e-12)
    assert list(acc.Tensors("notes")[0].tensor_proto.string_val) == [b"kiln *run*"]


def test_errors_name_the_python_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(kiln.KilnError, match=r"cannot create the log directory.*|test_tensorboard\.py"):
        SummaryWriter(blocker / "logs")
    with SummaryWriter(tmp_path / "ok") as w:
        with pytest.raises(kiln.ShapeError, match="one element"):
            w.add_scalar("x", kiln.tensor([1.0, 2.0]), 0)
        with pytest.raises(kiln.ShapeError, match="at least one value"):
            w.add_histogram("h", kiln.tensor(np.zeros(0, dtype=np.float32)), 0)
        with pytest.raises(NotImplementedError):
            w.add_histogram("h", [1.0], 0, bins="auto")
        w.add_scalar("y", 1.0, 0)  # the writer goes on after the errors
    with pytest.raises(RuntimeError, match="closed"):
        w.add_scalar("y", 2.0, 1)
    w.close()  # twice: harmless


def test_unwritable_directory_message(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(kiln.KilnError) as info:
        SummaryWriter(blocker / "logs")
    message = str(info.value)
    assert "kiln_summary_writer_open" in message and "cannot create the log directory" in message
    assert "test_tensorboard.py" in message  # the call site is this file's line
