"""kiln statuses as exceptions: a class per kind, the message naming this file and the line
that queued the failing op (also when the error surfaces at a later read), and bad arguments
that raise instead of crashing."""
import inspect

import pytest

import kiln


def line_here():
    return inspect.currentframe().f_back.f_lineno


def test_shape_error_is_value_error_with_line():
    a, b = kiln.ones(2, 3), kiln.ones(4, 5)
    with pytest.raises(ValueError) as info:
        line = line_here(); a + b  # noqa: E702
    assert isinstance(info.value, kiln.ShapeError) and isinstance(info.value, kiln.KilnError)
    assert f"test_errors.py:{line}" in str(info.value) and "kiln_add" in str(info.value)


def test_dtype_error_is_type_error():
    with pytest.raises(kiln.DTypeError):
        kiln.randn(3, dtype=kiln.int64)


def test_error_found_while_running_names_the_queuing_line():
    # the op may have failed by the time the next call looks (then that call raises), or not
    # yet (then the read does): either way the message names the line that queued it
    i = kiln.arange(5)
    with pytest.raises(kiln.InvalidArgumentError) as info:
        queued = line_here(); r = i % 0  # noqa: E702
        r.sum().item()
    assert f"test_errors.py:{queued}" in str(info.value)
    assert "division by zero" in str(info.value)


def test_error_inside_the_package_names_the_user_line():
    import kiln.nn.functional as F
    with pytest.raises(ValueError) as info:
        line = line_here(); F.linear(kiln.ones(2, 3), kiln.ones(4, 5))  # noqa: E702
    assert f"test_errors.py:{line}" in str(info.value)


def test_binding_argument_errors_name_the_user_line():
    # checks the binding makes itself, before kiln is called, name the calling line as kiln's do
    def expect(kind, text, info, line):
        assert isinstance(info.value, kind) and text in str(info.value), str(info.value)
        assert f"test_errors.py:{line})" in str(info.value), str(info.value)
    with pytest.raises(ValueError) as info:
        line = line_here(); kiln.zeros(2, dtype="nope")  # noqa: E702
    expect(ValueError, "unknown dtype", info, line)
    with pytest.raises(ValueError) as info:
        line = line_here(); kiln.zeros(2, device="tpu")  # noqa: E702
    expect(ValueError, "unknown device", info, line)
    with pytest.raises(TypeError) as info:
        line = line_here(); kiln.ones(2).sum(dim="x")  # noqa: E702
    expect(TypeError, "dim must be an int", info, line)
    with pytest.raises(ValueError) as info:
        line = line_here(); kiln.nn.LSTM(3, 4, num_layers=40)  # noqa: E702
    expect(ValueError, "num_layers must be 1 to 32", info, line)
    import kiln.nn.functional as F
    with pytest.raises(ValueError) as info:
        line = line_here(); F.conv2d(kiln.zeros(1, 1, 4, 4), kiln.zeros(1, 1, 3, 3), stride=-1)  # noqa: E702
    expect(ValueError, "conv2d(): stride -1", info, line)
    with pytest.raises(IndexError) as info:
        line = line_here(); kiln.ones(3)[1.5]  # noqa: E702
    expect(IndexError, "cannot be indexed by float", info, line)


def test_index_errors():
    with pytest.raises(IndexError):
        kiln.ones(3)[3]
    with pytest.raises(IndexError):
        kiln.ones(3)[kiln.tensor([5])].numpy()
    with pytest.raises(IndexError):
        kiln.ones(3).sum(dim=9)


@pytest.mark.parametrize("call", [
    lambda: kiln.zeros("a"), lambda: kiln.zeros(None), lambda: kiln.zeros(-3),
    lambda: kiln.zeros(2, dtype="nope"), lambda: kiln.zeros(2, dtype=3), lambda: kiln.zeros(2, device="tpu"),
    lambda: kiln.zeros(2, device=5), lambda: kiln.ones(2) + "x", lambda: kiln.ones(2).reshape("a"),
    lambda: kiln.ones(2).sum(dim="x"), lambda: kiln.ones(2).transpose(0), lambda: kiln.exp(3),
    lambda: kiln.ones(2)[1.5], lambda: kiln.ones(2)[::-1], lambda: kiln.cat([]), lambda: kiln.cat([1, 2]),
    lambda: kiln.read_many([kiln.ones(1), None]), lambda: kiln.tensor(["a"]), lambda: kiln.ones(2).softmax(),
    lambda: kiln.arange(None), lambda: kiln.full((2,), "x"), lambda: kiln.Generator("x"), lambda: kiln.ones(2)[kiln.tensor([0.5])],
    lambda: kiln.ones(*([1] * 9)), lambda: kiln.ones(2).max(dim=1.5), lambda: kiln.set_num_threads(0),
])
def test_bad_arguments_raise(call):
    with pytest.raises((TypeError, ValueError, IndexError, RuntimeError, OverflowError, MemoryError)):
        call()


def test_huge_sizes_raise_memory_or_shape_errors():
    with pytest.raises((MemoryError, ValueError)):
        kiln.zeros(1 << 40, 1 << 40)
    with pytest.raises((MemoryError, ValueError, OverflowError)):
        kiln.zeros(1 << 62)
