/* kiln custom ops: a user's own CPU kernel registered by name and then called like kiln's own
 * ops: queued on the caller's stream after what it reads, written in place when its first
 * input has no other owner and the kernel allows it, poisoning its result (naming the op and
 * the caller's file:line) when the kernel fails, shown in the profiler by its name, and
 * differentiated by autodiff through a backward written with kiln's public ops; optionally with an
 * OpenCL kernel too, which runs when the inputs are on an OpenCL device.
 *
 *   #include <kiln.h>
 *
 *   static kiln_status square_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
 *       (void)n, (void)user;
 *       if (in[0].dtype != KILN_F32 || in[0].ndim != 1) return kiln_custom_op_error("1-d f32 only");
 *       *out = in[0];                                       // same shape and dtype
 *       return KILN_OK;
 *   }
 *   static kiln_status square_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out,
 *                                 int threads, void *user) {
 *       (void)n, (void)threads, (void)user;                 // may use up to `threads` threads
 *       const float *x = in[0].data;                        // inputs: any strides
 *       float *y = out->data;                               // the output: dense
 *       for (int64_t i = 0; i < out->shape[0]; i++) y[i] = x[i * in[0].strides[0]] * x[i * in[0].strides[0]];
 *       return KILN_OK;
 *   }
 *   static kiln_status square_backward(int n, const kiln_tensor *in, kiln_tensor out, kiln_tensor grad,
 *                                      kiln_tensor *grad_in, void *user) {
 *       (void)n, (void)out, (void)user;                     // borrowed: kiln_ref what an op consumes
 *       grad_in[0] = kiln_mul(kiln_mul_scalar(kiln_ref(in[0]), 2.0), kiln_ref(grad));
 *       return KILN_OK;
 *   }
 *   // optional: the same for tensors on an OpenCL device, built once per device and cached
 *   static const char square_cl[] = "kernel void square(global const float *x, global float *y, long n) {\n"
 *                                   "    long i = get_global_id(0); if (i < n) y[i] = x[i] * x[i];\n}\n";
 *   // optional: the composition it replaces, x * x, so that kiln_mul(kiln_ref(x), x) runs square
 *   static const kiln_pattern_node square_pattern[] = {
 *       {KILN_PATTERN_MUL, {KILN_PATTERN_INPUT(0), KILN_PATTERN_INPUT(0)}, 0}, // node 0: the result
 *   };
 *   int main(void) {
 *       kiln_custom_op_def def = {.name = "square", .n_inputs = 1, .shape = square_shape,
 *                                 .cpu_kernel = square_cpu, .in_place = true, .backward = square_backward,
 *                                 .opencl_source = square_cl, .opencl_kernel = "square",
 *                                 .pattern = square_pattern, .pattern_len = 1};
 *       kiln_custom_op *square = NULL;
 *       if (kiln_custom_op_register(&def, &square) != KILN_OK) return 1;
 *       kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4));
 *       kiln_tensor y = kiln_custom_op_call(square, 1, &x);   // consumes x (written in place)
 *       kiln_tensor z = kiln_mul(kiln_ref(y), y);              // queued, then run as square(y)
 *       float v[4];
 *       return kiln_into_data(z, v, sizeof v) == KILN_OK ? 0 : 1;
 *   }
 *
 * A pattern (a small graph of kiln ops over the op's inputs, its last node the result) lets the
 * engine run the op wherever that composition is queued, when no intermediate of it is read
 * elsewhere (a handle still held, autodiff's saved tensors, another queued op) and the op
 * takes the shapes (its shape rule gives the composition's result shape and dtype, and its
 * `supports` says yes). The op must declare in_place where the composition writes its result
 * over an input's memory (each op consuming the only handle). KILN_SUBSTITUTE=0 turns it off.
 * kiln's own layer norm (kiln_layer_norm untracked, or the same composition written by hand:
 * mean over the last dim, subtract, square, mean, add eps, rsqrt, multiply, times weight, plus
 * bias) is replaced this way by one fused kernel; the profiler shows it as fused_layer_norm.
 * So is composed attention, softmax(matmul(q, transpose(k)) * scale, last dim) @ v without a
 * mask: fused_attention (KILN_SUBSTITUTE_ATTENTION=0 keeps it as written).
 * Substitution needs queued ops: with KILN_SYNC=1 every op runs as it is called, as written.
 * Patterns match CPU tensors only. */
#ifndef KILN_CUSTOM_OP_H
#define KILN_CUSTOM_OP_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CUSTOM_MAX_INPUTS 3

/* What a shape rule sees of an operand, and fills in for the output. */
typedef struct kiln_custom_meta {
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
} kiln_custom_meta;

/* What a kernel sees of an operand: its first element, and strides in elements (any strides
 * for inputs; the output is dense, row-major). */
typedef struct kiln_custom_operand {
    void *data;
    kiln_dtype dtype;
    int ndim;
    const int64_t *shape;
    const int64_t *strides;
} kiln_custom_operand;

/* Fills *out from the inputs (runs on the caller's thread when the op is called). Anything but
 * KILN_OK poisons the result with the message given to kiln_custom_op_error. */
typedef kiln_status (*kiln_custom_shape_fn)(int n_inputs, const kiln_custom_meta *inputs, kiln_custom_meta *out,
                                            void *user_data);
/* Computes out from the inputs (runs later, on the stream's thread). It may use up to `threads`
 * threads of its own. Anything but KILN_OK poisons the result. */
typedef kiln_status (*kiln_custom_kernel_fn)(int n_inputs, const kiln_custom_operand *inputs,
                                             const kiln_custom_operand *out, int threads, void *user_data);
/* Writes to grad_inputs[i] the gradient of input i (an owned tensor of the input's shape, or
 * KILN_NONE: none) from grad, the gradient of the output, using kiln's public ops. inputs,
 * out and grad are borrowed: kiln_ref one before giving it to an op (ops consume); one written
 * to grad_inputs as it is (grad_inputs[0] = grad) is handed over. Runs with grad mode off. */
typedef kiln_status (*kiln_custom_backward_fn)(int n_inputs, const kiln_tensor *inputs, kiln_tensor out,
                                               kiln_tensor grad, kiln_tensor *grad_inputs, void *user_data);

typedef struct kiln_custom_op_def {
    const char *name;                /* non-empty, unique; copied */
    int n_inputs;                    /* 1..KILN_CUSTOM_MAX_INPUTS */
    kiln_custom_shape_fn shape;      /* required */
    kiln_custom_kernel_fn cpu_kernel; /* required */
    /* The kernel is correct when out's memory is inputs[0]'s (same dense layout and element
     * size): then an input with no other owner is overwritten instead of a new buffer made. */
    bool in_place;
    kiln_custom_backward_fn backward; /* NULL: not differentiable (backward through it fails) */
    void *user_data;                  /* passed to every callback */
    /* Optional, both or neither (copied): OpenCL C source and the name of the kernel in it that
     * runs the op for inputs on an OpenCL device. Its arguments are the inputs' buffers, the
     * output's and the element count, (global const T *in0, ..., global T *out, long n), each
     * operand dense from element 0 (kiln copies an input that is not; see opencl_layout for
     * the operands' shapes and strides), with one work item per
     * output element (n of them; i < n always). Without it, an op on an OpenCL tensor is refused:
     * move the inputs to the CPU. A build error poisons the result with the build log's head. */
    const char *opencl_source;
    const char *opencl_kernel;
    /* Set: the OpenCL kernel also gets each operand's layout, as the CPU kernel does, and its
     * inputs as they are (strided, offset, broadcast: no dense copy). After n come, for each
     * input and then the output, (long8 shape, long8 strides, long offset) in elements, dims
     * right-aligned (a 2-d operand's are .s6 and .s7; leading dims have size 1). kiln declares,
     * ahead of the source, KILN_LAYOUT(x) for such a parameter triple named x_shape, x_strides,
     * x_offset and KILN_AT(x, i), where x's i-th element (row-major) is in its buffer:
     *   kernel void row_sum(global const float *x, global float *y, long n, KILN_LAYOUT(x), KILN_LAYOUT(y)) {
     *       long r = get_global_id(0);                              // one item per output element
     *       if (r >= n) return;
     *       float s = 0;
     *       for (long j = 0; j < x_shape.s7; j++) s += x[KILN_AT(x, r * x_shape.s7 + j)];
     *       y[KILN_AT(y, r)] = s;
     *   } */
    bool opencl_layout;
    /* Optional: the composition this op replaces (see the top of this header), copied. The
     * op's inputs are the pattern's inputs in order, and each must be read by some node. */
    const struct kiln_pattern_node *pattern;
    int pattern_len; /* 1..KILN_PATTERN_MAX_NODES */
    /* Optional, with a pattern: whether the kernel takes these inputs (as the composition's ops
     * read them: broadcast to the result's shape where they were); NULL: whatever the shape
     * rule accepts. Runs while kiln's queue is locked: it must not call kiln. */
    bool (*supports)(int n_inputs, const kiln_custom_meta *inputs, void *user_data);
} kiln_custom_op_def;

/* ---- patterns: what a registered op replaces ----------------------------------------------- */
#define KILN_PATTERN_MAX_NODES 12
#define KILN_PATTERN_INPUT(k) (-1 - (k)) /* a node input that is the op's input k */
#define KILN_PATTERN_CONSTANT (-100)     /* in[1]: the node's constant (an op with a Python scalar) */
#define KILN_PATTERN_NUMBER(k) (-200 - (k)) /* in[1]: the op's input k is the number a scalar op was given */

typedef enum kiln_pattern_op {
    KILN_PATTERN_ADD = 1, KILN_PATTERN_SUB, KILN_PATTERN_MUL, KILN_PATTERN_DIV, /* binary */
    KILN_PATTERN_NEG, KILN_PATTERN_EXP, KILN_PATTERN_LOG, KILN_PATTERN_SQRT, KILN_PATTERN_RSQRT, /* unary */
    KILN_PATTERN_TANH, KILN_PATTERN_SIGMOID, KILN_PATTERN_RELU,
    KILN_PATTERN_MEAN_LAST, KILN_PATTERN_SUM_LAST, KILN_PATTERN_MAX_LAST, /* over the last dim, dims kept */
    KILN_PATTERN_SOFTMAX_LAST,
    KILN_PATTERN_MATMUL, /* kiln_matmul(a, b): batched, no bias; a transposed operand is read strided */
} kiln_pattern_op;

/* One op of a pattern. in[k]: KILN_PATTERN_INPUT(i), an earlier node's index (0-based), or
 * for in[1] of a binary op KILN_PATTERN_CONSTANT (kiln_add_scalar(t, constant) and the like:
 * only that exact value matches) or KILN_PATTERN_NUMBER(i): any number, which becomes the op's
 * input i (kiln_mul_scalar(x, 0.125) gives it 0.125). The shape rule and kernel see such an
 * input as a 0-d KILN_F64 operand holding the number as written; a direct call passes a 0-d
 * f64 tensor there. Add and mul match either order of their operands. */
typedef struct kiln_pattern_node {
    kiln_pattern_op op;
    int in[2];
    double constant;
} kiln_pattern_node;

typedef struct kiln_custom_op kiln_custom_op; /* lives until the process ends */

/* Registers def (thread-safe); *out receives the op. KILN_ERR_INVALID_ARGUMENT, with a message
 * in kiln_last_error, for a NULL or empty name, a taken name, a NULL shape rule or kernel,
 * n_inputs out of range, an OpenCL source without a kernel name (or the reverse), opencl_layout
 * without an OpenCL kernel, or a bad pattern (an unknown op, a node reading a later node or an
 * input past n_inputs, a node or an input nothing reads, a constant where no binary op's second
 * operand is). */
KILN_API kiln_status kiln_custom_op_register(const kiln_custom_op_def *def, kiln_custom_op **out);
/* The op registered under name, or NULL. */
KILN_API kiln_custom_op *kiln_custom_op_find(const char *name);
/* Queues op over inputs[0..n_inputs) (consumed) and returns its result; a poisoned result for a
 * wrong count, inputs on different devices, on an OpenCL device when the op has no OpenCL
 * kernel (or on another kind of device), or a failing shape rule. */
KILN_API kiln_tensor kiln_custom_op_call(kiln_custom_op *op, int n_inputs, const kiln_tensor *inputs);
/* From a shape rule or a kernel: sets the message of the failure it returns, and returns
 * KILN_ERR_INVALID_ARGUMENT (return it, or another status to give the failure that kind:
 * `return kiln_custom_op_error("f32 only"), KILN_ERR_DTYPE;` is a dtype error). */
KILN_API kiln_status kiln_custom_op_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Loads the shared library at path (dlopen; a path without a slash is searched for as dlopen
 * does) whose ops then register, as torch.ops.load_library: it calls the library's
 *     kiln_status kiln_register_ops(void)
 * when it defines one (once per library, however often it is loaded), or the library registers
 * from a constructor of its own. Build the library without linking kiln: its kiln_* calls
 * resolve to the kiln of the process that loads it, which kiln makes visible to the library
 * first (libkiln.so, or the Python package; a program linking kiln statically must export its
 * symbols: -rdynamic, CMake's ENABLE_EXPORTS).
 * KILN_ERR_IO when the library cannot be loaded (dlerror's reason in kiln_last_error),
 * KILN_ERR_INVALID_ARGUMENT for a library that brought its own copy of kiln, or the status of
 * a failing kiln_register_ops. The library stays loaded until the process ends.
 *   cc -shared -fPIC -o libmy_ops.so my_ops.c $(pkg-config --cflags kiln)    // no -lkiln
 *   if (kiln_custom_op_load_library("./libmy_ops.so") != KILN_OK) puts(kiln_last_error());
 *   kiln_custom_op *op = kiln_custom_op_find("my_op");                        */
KILN_API kiln_status kiln_custom_op_load_library(const char *path);
/* Defined by a library of ops (not by kiln): the entry point kiln_custom_op_load_library calls. */
__attribute__((visibility("default"))) kiln_status kiln_register_ops(void);

/* For a kernel: runs fn over [0, n) split into chunks of at least grain items on kiln's own
 * threads (`threads` of them, the calling one included), returning when all are done; inline
 * when n <= grain or the pool is busy. fn must not call kiln. */
KILN_API void kiln_parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx);

/* ---- call sites ------------------------------------------------------------------------- */
#define KILN_CUSTOM_OP_API(X) \
    X(kiln_status, custom_op_register, (const kiln_custom_op_def *def, kiln_custom_op **out), (def, out)) \
    X(kiln_tensor, custom_op_call, (kiln_custom_op *op, int n_inputs, const kiln_tensor *inputs), (op, n_inputs, inputs)) \
    X(kiln_status, custom_op_load_library, (const char *path), (path))
KILN_CUSTOM_OP_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_custom_op_register(...) KILN__AT(custom_op_register, __VA_ARGS__)
#define kiln_custom_op_call(...) KILN__AT(custom_op_call, __VA_ARGS__)
#define kiln_custom_op_load_library(...) KILN__AT(custom_op_load_library, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
