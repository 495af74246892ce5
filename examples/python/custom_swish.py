"""A user's own C kernel as a kiln op, from Python: examples/swish_ops.c (the AVX2 and OpenCL
swish of examples/swish_op.h, with its backward) built as a shared library, loaded with
kiln.ops.load_library, then called and differentiated like kiln's own ops and checked against
the composition x * sigmoid(x). Exits 1 when they differ.

    cmake --build build --target swish_ops           # build/examples/libswish_ops.so
    python examples/python/custom_swish.py build/examples/libswish_ops.so

or without CMake (kiln's headers ship with the package; kiln itself is not linked):
    cc -shared -fPIC -O2 -I"$(python -c 'import kiln; print(kiln.get_include())')" \\
       -o libswish_ops.so examples/swish_ops.c -lm
"""
import sys

import kiln

kiln.ops.load_library(sys.argv[1] if len(sys.argv) > 1 else "build/examples/libswish_ops.so")
swish = kiln.ops.example_swish

x = (kiln.randn(1000, 1000, generator=kiln.Generator().manual_seed(0)) * 4).requires_grad_()
y = swish(x)                      # queued on this thread's stream: returns before the kernel runs
(y * y).sum().backward()          # through the op's backward (the registered example_swish_grad)
mine = x.grad
x.grad = None

z = x * x.sigmoid()               # what the op replaces
(z * z).sum().backward()
value_diff = float(((y - z).abs() / (z.abs() + 1)).max())
grad_diff = float(((mine - x.grad).abs() / (x.grad.abs() + 1)).max())
print(f"swish vs x*sigmoid(x): values differ by {value_diff:.2g}, gradients by {grad_diff:.2g} (relative)")
sys.exit(0 if value_diff < 1e-5 and grad_diff < 1e-5 else 1)
