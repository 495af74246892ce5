"""Ops registered in C called from Python (kiln.ops): a library of ops built here with the C
compiler (custom_ops_lib.c: the example swish of examples/swish_op.h and a few test ops) loaded
with kiln.ops.load_library; values against the composition x * sigmoid(x), gradients against
finite differences and the double formula, a call returning before its kernel runs, errors
naming this file's line (a failing kernel, a wrong dtype from the shape rule, a wrong count, an
unknown name), libraries that cannot load or whose registration fails, and ops that C code
registered by other ways (a constructor, a later call) found too. Registered ops are never
unregistered (kiln has no such call), so there is no call after one is freed to test."""
import ctypes
import inspect
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

import kiln

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"


def line_here():
    return inspect.currentframe().f_back.f_lineno


def build_library(out_dir, name, *defines, source=HERE / "custom_ops_lib.c"):
    cc = os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0]
    if not shutil.which(cc):
        pytest.skip(f"no C compiler ({cc}) to build a library of ops")
    lib = out_dir / name
    cmd = [cc, "-shared", "-fPIC", "-O1", "-Wall", "-I", kiln.get_include(), "-I", str(EXAMPLES), *defines,
           "-o", str(lib), str(source), "-lm"]
    subprocess.run(cmd, check=True)
    return lib


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory):
    path = build_library(tmp_path_factory.mktemp("ops"), "libtest_ops.so")
    kiln.ops.load_library(path)
    return path


@pytest.fixture(scope="module")
def swish(lib_path):
    return kiln.ops.example_swish


def swish_reference(x):
    x = np.asarray(x, dtype=np.float64)
    return x / (1 + np.exp(-x))


def test_values_match_the_composition(swish):
    x = kiln.randn(33, 65, generator=kiln.Generator().manual_seed(3)) * 4
    y = swish(x)
    composed = x * x.sigmoid()
    np.testing.assert_allclose(y.numpy(), composed.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.numpy(), swish_reference(x.numpy()), rtol=1e-5, atol=1e-6)
    # a strided input (the kernel's element-by-element path) and a temporary given away
    np.testing.assert_allclose(swish(x.T).numpy(), swish_reference(x.numpy().T), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(swish(x * 2).numpy(), swish_reference(x.numpy() * 2), rtol=1e-5, atol=1e-6)
    assert y.shape == (33, 65) and y.dtype == kiln.float32


def test_gradient_matches_finite_differences(swish):
    rng = np.random.default_rng(5)
    x_np = (rng.standard_normal((4, 9)) * 3).astype(np.float32)
    w_np = rng.standard_normal((4, 9)).astype(np.float32)
    x = kiln.tensor(x_np, requires_grad=True)
    (swish(x) * kiln.tensor(w_np)).sum().backward()
    got = x.grad.numpy().astype(np.float64)
    # central differences of the op itself (elementwise: one pass for all elements), in float32
    h = 1e-2
    fd = (swish(kiln.tensor(x_np + h)).numpy().astype(np.float64) -
          swish(kiln.tensor(x_np - h)).numpy().astype(np.float64)) / (2 * h) * w_np
    np.testing.assert_allclose(got, fd, rtol=2e-3, atol=2e-3)
    s = 1 / (1 + np.exp(-x_np.astype(np.float64)))
    np.testing.assert_allclose(got, w_np * s * (1 + x_np * (1 - s)), rtol=1e-5, atol=1e-6)


def test_gradient_equals_the_compositions(swish):
    x = kiln.tensor(np.linspace(-6, 6, 50, dtype=np.float32), requires_grad=True)
    swish(x).pow(2).sum().backward()
    mine = x.grad.numpy()
    x.grad = None
    (x * x.sigmoid()).pow(2).sum().backward()
    np.testing.assert_allclose(mine, x.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(os.environ.get("KILN_SYNC") == "1", reason="KILN_SYNC=1 runs every op before the call returns")
def test_call_returns_before_the_kernel_runs(lib_path):
    x = kiln.ones(8)
    y = kiln.ops.test_gated(x)  # its kernel waits until the gate opens: the call must not
    ctypes.CDLL(str(lib_path)).open_gate()
    np.testing.assert_array_equal(y.numpy(), np.full(8, 2, np.float32))


def test_failing_kernel_names_the_calling_line(lib_path):
    x = kiln.ones(3)
    with pytest.raises(kiln.KilnError) as info:
        line = line_here(); y = kiln.ops.test_fails(x)  # noqa: E702
        y.numpy()
    message = str(info.value)
    assert f"test_custom_ops.py:{line}" in message and "test_fails" in message
    assert "the kernel refused its input" in message
    assert x.numpy().tolist() == [1, 1, 1]  # the input is untouched and still usable


def test_wrong_dtype_from_the_shape_rule(swish):
    with pytest.raises(TypeError) as info:
        line = line_here(); swish(kiln.ones(3, dtype=kiln.int64))  # noqa: E702
    assert isinstance(info.value, kiln.DTypeError)
    assert f"test_custom_ops.py:{line}" in str(info.value) and "swish takes f32 tensors" in str(info.value)


def test_wrong_arguments(swish):
    x = kiln.ones(3)
    with pytest.raises(kiln.InvalidArgumentError) as info:
        line = line_here(); swish(x, x)  # noqa: E702
    assert f"test_custom_ops.py:{line}" in str(info.value) and "takes 1 inputs, got 2" in str(info.value)
    with pytest.raises(kiln.InvalidArgumentError):
        swish()
    with pytest.raises(TypeError, match="argument 1 is float"):
        swish(1.5)
    with pytest.raises(TypeError, match="positional"):
        swish(x=x)
    with pytest.raises(TypeError):
        swish(*([x] * 100))
    assert x.numpy().tolist() == [1, 1, 1]  # nothing was consumed by the refused calls


def test_unknown_op_name(lib_path):
    with pytest.raises(AttributeError) as info:
        line = line_here(); kiln.ops.no_such_op  # noqa: E702,B018
    assert isinstance(info.value, kiln.ops.UnknownOpError) and isinstance(info.value, kiln.KilnError)
    assert f"test_custom_ops.py:{line}" in str(info.value) and "'no_such_op'" in str(info.value)
    assert not hasattr(kiln.ops, "no_such_op")
    with pytest.raises(kiln.ops.UnknownOpError):
        kiln.ops.find("")
    with pytest.raises(TypeError):
        kiln.ops.find(None)
    assert kiln.ops.find("example_swish").name == "example_swish"
    assert repr(kiln.ops.example_swish) == "<kiln.ops.example_swish>"


def test_library_not_found():
    with pytest.raises(OSError) as info:
        line = line_here(); kiln.ops.load_library("/no/such/libops.so")  # noqa: E702
    assert "/no/such/libops.so" in str(info.value) and f"test_custom_ops.py:{line}" in str(info.value)
    with pytest.raises(ValueError):
        kiln.ops.load_library("")
    with pytest.raises(TypeError):
        kiln.ops.load_library(None)
    with pytest.raises(OSError):  # not a shared library
        kiln.ops.load_library(__file__)


def test_failing_registration_raises(tmp_path):
    path = build_library(tmp_path, "libfailing_ops.so", "-DFAILING_ENTRY")
    with pytest.raises(kiln.InvalidArgumentError) as info:
        kiln.ops.load_library(path)
    assert "kiln_register_ops of" in str(info.value) and "non-empty name" in str(info.value)
    with pytest.raises(kiln.InvalidArgumentError):  # again: not run twice, still an error
        kiln.ops.load_library(path)


def test_loading_again_and_ops_registered_other_ways(lib_path):
    kiln.ops.load_library(lib_path)  # its entry point does not run twice (it would fail)
    x = kiln.arange(4, dtype=kiln.float32)
    assert kiln.ops.test_from_constructor(x).tolist() == [0, 2, 4, 6]
    assert not hasattr(kiln.ops, "test_late")
    assert ctypes.CDLL(str(lib_path)).register_late() == 0  # C code registering later
    assert kiln.ops.test_late(x).tolist() == [0, 2, 4, 6]


def test_backward_through_an_op_without_one(lib_path):
    x = kiln.ones(3, requires_grad=True)
    with pytest.raises(kiln.KilnError, match="test_from_constructor"):
        kiln.ops.test_from_constructor(x).sum().backward()


def test_python_example_runs(tmp_path):
    lib = build_library(tmp_path, "libswish_ops.so", source=EXAMPLES / "swish_ops.c")
    r = subprocess.run([sys.executable, str(EXAMPLES / "python" / "custom_swish.py"), str(lib)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "values differ by" in r.stdout


@pytest.mark.skipif(kiln.device_count("opencl") == 0, reason="no OpenCL device")
def test_opencl_kernel_from_python(swish):
    x = kiln.randn(7, 9, generator=kiln.Generator().manual_seed(4)) * 3
    y = swish(x.to("opencl:0").T)  # the op's own OpenCL kernel, on a strided input
    assert y.device == "opencl:0"
    np.testing.assert_allclose(y.to("cpu").numpy(), swish_reference(x.numpy().T), rtol=1e-5, atol=1e-6)


def test_temporary_argument_is_overwritten_in_place(swish):
    n = 512 * 512  # 1 MiB of f32: above the elision threshold
    x = kiln.randn(n, seed=1)
    kiln.sync()
    before = kiln.memory_stats()["inplace_reuses"]
    y = swish(x * 2)  # the product only the interpreter holds: swish writes into its buffer
    kiln.sync()
    assert kiln.memory_stats()["inplace_reuses"] - before >= 1
    kept = kiln.memory_stats()["inplace_reuses"]
    z = swish(x)  # a named tensor is never consumed
    kiln.sync()
    assert kiln.memory_stats()["inplace_reuses"] == kept
    x_np = x.numpy()
    np.testing.assert_allclose(y.numpy(), swish_reference(2 * x_np), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z.numpy(), swish_reference(x_np), rtol=1e-5, atol=1e-6)
