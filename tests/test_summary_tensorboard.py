#!/usr/bin/env python3
"""kiln's TensorBoard event files read back by TensorBoard's own reader (issue 30).

    test_summary_tensorboard.py TEST_SUMMARY_EXE

Runs `test_summary --write DIR` (scalars from numbers and from tensors, two histograms, a text),
then loads DIR with tensorboard's EventAccumulator and checks every tag, step and value, each
histogram's buckets against numpy.histogram over the edges torch's SummaryWriter uses (trimmed
as torch trims them), and that a record corrupted on disk fails TensorBoard's CRC check.
Exits 77 (skipped) when tensorboard or numpy cannot be imported."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.compat.tensorflow_stub import errors as tb_errors
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
except ImportError as e:  # the package is not installed for this python
    print(f"SKIP: {e}")
    sys.exit(77)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"  check failed: {what}", file=sys.stderr)


def default_bins():
    """torch.utils.tensorboard's bins="tensorflow" (SummaryWriter._get_default_bins)."""
    v, pos = 1e-12, []
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    return [-x for x in reversed(pos)] + [0.0] + pos


def torch_histogram(values):
    """What torch's make_histogram writes for values: (min, max, num, sum, sum_squares, limits, counts)."""
    values = values.reshape(-1).astype(float)
    counts, limits = np.histogram(values, bins=default_bins())
    cum = np.cumsum(np.greater(counts, 0))
    start, end = np.searchsorted(cum, [0, cum[-1] - 1], side="right")
    start, end = int(start), int(end) + 1
    counts = counts[start - 1:end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start:end + 1]
    return values.min(), values.max(), len(values), values.sum(), values.dot(values), limits, counts


def check_histogram(acc, tag, step, values):
    events = acc.Histograms(tag)
    check(len(events) == 1 and events[0].step == step, f"{tag}: one histogram at step {step}")
    if not events:
        return
    h = events[0].histogram_value
    mn, mx, num, total, sq, limits, counts = torch_histogram(values)
    check(h.min == mn and h.max == mx and h.num == num, f"{tag}: min/max/num {h.min} {h.max} {h.num} vs {mn} {mx} {num}")
    check(abs(h.sum - total) <= 1e-12 * max(1.0, abs(total)), f"{tag}: sum {h.sum} vs {total}")
    check(abs(h.sum_squares - sq) <= 1e-12 * max(1.0, sq), f"{tag}: sum_squares {h.sum_squares} vs {sq}")
    check(list(h.bucket_limit) == list(limits), f"{tag}: bucket limits differ from numpy's")
    check(list(h.bucket) == [float(c) for c in counts], f"{tag}: bucket counts differ from numpy's")
    check(sum(h.bucket) == num, f"{tag}: buckets hold every value")


def main():
    exe = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="kiln_tb_")
    try:
        run_dir = os.path.join(tmp, "run")
        started = time.time()
        out = subprocess.run([exe, "--write", run_dir], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            print(out.stdout + out.stderr, file=sys.stderr)
            return 1
        path = out.stdout.strip()
        check(os.path.dirname(path) == run_dir and os.path.basename(path).startswith("events.out.tfevents."),
              f"file name {path}")

        acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.TENSORS: 0})
        acc.Reload()
        check(acc.file_version == 2.0, f"file_version {acc.file_version!r}")  # "brain.Event:2", parsed
        tags = acc.Tags()
        check(sorted(tags["scalars"]) == ["train/hits", "train/loss", "train/lr"], f"scalar tags {tags['scalars']}")
        check(sorted(tags["histograms"]) == ["fc1/weight", "fc1/weight32"], f"histogram tags {tags['histograms']}")
        check(tags["tensors"] == ["notes"], f"tensor tags {tags['tensors']}")
        f32 = np.float32
        expected = {
            "train/lr": [float(f32(0.1 / (i + 1))) for i in range(10)],
            "train/loss": [float(f32(2.0 - 0.125 * i)) for i in range(10)],
            "train/hits": [float(3 * i) for i in range(10)],
        }
        for tag, want in expected.items():
            events = acc.Scalars(tag)
            check([e.step for e in events] == list(range(10)), f"{tag}: steps {[e.step for e in events]}")
            got = [e.value for e in events]
            # loss went through exp(log(x)) in f32: within an ulp or two of x
            tol = 4e-7 if tag == "train/loss" else 0.0
            check(len(got) == 10 and all(abs(g - w) <= tol * abs(w) for g, w in zip(got, want)), f"{tag}: {got} vs {want}")
            check(all(started - 5 <= e.wall_time <= time.time() + 5 for e in events), f"{tag}: wall times")

        values = np.fromfile(os.path.join(run_dir, "histogram.f64"), dtype=np.float64)
        check(values.size == 5000, "histogram.f64 has the 5000 values")
        check_histogram(acc, "fc1/weight", 3, values)
        check_histogram(acc, "fc1/weight32", 4, values.astype(np.float32))

        text = acc.Tensors("notes")
        check(len(text) == 1 and text[0].step == 2, "one text at step 2")
        if text:
            check(list(text[0].tensor_proto.string_val) == ["kiln **run** 1: lr 0.1, ünïcode".encode()],
                  f"text {text[0].tensor_proto.string_val}")
            check(text[0].tensor_proto.dtype == 7 and [d.size for d in text[0].tensor_proto.tensor_shape.dim] == [1],
                  "text is a DT_STRING tensor of shape [1]")
        check(acc.SummaryMetadata("notes").plugin_data.plugin_name == "text", "text's plugin is 'text'")

        # every record passes TensorBoard's own CRC checks; one flipped byte does not
        reader = pywrap_tensorflow.PyRecordReader_New(path)
        records = 0
        while True:
            try:
                reader.GetNext()
                records += 1
            except tb_errors.OutOfRangeError:
                break
        check(records == 34, f"{records} records, expected 34")
        bad_dir = os.path.join(tmp, "corrupt")
        os.mkdir(bad_dir)
        bad = os.path.join(bad_dir, os.path.basename(path))
        data = bytearray(open(path, "rb").read())
        offset = 0
        for _ in range(5):  # skip the version and four scalars: corrupt the data of the sixth record
            offset += 8 + 4 + struct.unpack_from("<Q", data, offset)[0] + 4
        data[offset + 8 + 4 + 3] ^= 0x04
        open(bad, "wb").write(data)
        reader = pywrap_tensorflow.PyRecordReader_New(bad)
        caught = None
        try:
            while True:
                reader.GetNext()
        except tb_errors.DataLossError as e:
            caught = str(e)
        except tb_errors.OutOfRangeError:
            pass
        check(caught is not None and "crc32" in caught, f"corrupt record: {caught}")
        acc_bad = ea.EventAccumulator(bad_dir, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.TENSORS: 0})
        acc_bad.Reload()  # stops at the bad record instead of reading garbage
        n_bad = sum(len(acc_bad.Scalars(t)) for t in acc_bad.Tags()["scalars"])
        check(n_bad == 4, f"the reader stopped at the corrupt record ({n_bad} scalars read)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'FAIL' if failures else 'ok'}: {len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
