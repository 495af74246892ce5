/* Helpers shared by the layer, loss and initialisation files of src/nn: input checks that
 * report a poisoned result naming the layer, constructor argument errors, parameter
 * registration that cleans up on failure, and seeds derived from a user seed. */
#ifndef KILN_NN_LAYERS_IMPL_H
#define KILN_NN_LAYERS_IMPL_H

#include "nn/module-impl.h"

/* The tensor behind x, borrowed for checks (x is not consumed), or NULL when x is stale or
 * was poisoned when dispatched: the caller then fails with kiln__nn_fail, which reports the
 * input's own error. */
const kiln__tensor *kiln__nn_peek(kiln_tensor x);

/* Consumes the n inputs and returns a tensor poisoned for op: with the first input's own
 * error when one is stale or poisoned, else with st and the formatted detail. */
kiln_tensor kiln__nn_fail(const char *op, int n, const kiln_tensor *inputs, kiln_status st, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Checks that *x is a float tensor of shape `want` (ndim sizes; -1 matches any size; with
 * `leading`, any number of extra leading dims). Otherwise replaces *x (consumed) by a tensor
 * poisoned for op, whose message starts with the layer as desc_fmt prints it, and returns
 * false. */
bool kiln__nn_expect_input(kiln_tensor *x, int ndim, const int64_t *want, bool leading, const char *op,
                           const char *desc_fmt, ...) __attribute__((format(printf, 6, 7)));

/* Whether r is a reduction (BATCHMEAN only when batchmean_ok), and x (consumed) reduced by
 * it: the mean, the sum, x itself (NONE), or the sum over x's first dim's size (BATCHMEAN). */
bool kiln__nn_check_reduction(kiln_reduction r, bool batchmean_ok);
kiln_tensor kiln__nn_reduce(kiln_tensor x, kiln_reduction r);

/* x - mean and the biased variance mean((x - mean)^2) over dims (kept), for the norms (norm.c):
 * consumes x, keeps mean. Centring first means backward saves only x - mean. */
kiln_tensor kiln__nn_centre(kiln_tensor x, kiln_tensor mean, kiln_dims dims, kiln_tensor *var);
/* Whether h is a float tensor of shape [size], or (when optional) KILN_NONE; false with st and
 * a message naming `what` otherwise (h is borrowed). */
bool kiln__nn_check_channel_vec(kiln_tensor h, const char *what, int64_t size, bool optional, kiln_status *st, char *msg,
                                size_t cap);
/* A norm's inputs: x, then weight and bias unless KILN_NONE, listed in in[0..*n) (for
 * kiln__nn_fail). x's tensor (borrowed) when usable and float; otherwise NULL with every input
 * consumed into *fail, a tensor poisoned for op. */
const kiln__tensor *kiln__nn_norm_input(const char *op, kiln_tensor x, kiln_tensor weight, kiln_tensor bias, kiln_tensor *in,
                                        int *n, kiln_tensor *fail);
/* Whether eps is unusable as a norm's epsilon (negative, NaN or infinite). */
bool kiln__nn_bad_eps(double eps);

/* Reports a bad constructor argument (KILN_ERR_INVALID_ARGUMENT) and returns NULL. */
kiln_module *kiln__nn_bad_arg(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct {
    const char *name;
    kiln_tensor tensor;
    bool buffer;
} kiln__nn_param;

/* Registers the n tensors of ps with m in order, taking them all (also when m is NULL or a
 * registration fails: then every tensor and m are freed and NULL returned). */
kiln_module *kiln__nn_finish(kiln_module *m, int n, const kiln__nn_param *ps);

/* A seed for stream k derived from seed (splitmix64 of both), so that the streams a layer
 * derives from one seed neither repeat nor line up with another layer's seed + 1. */
uint64_t kiln__nn_seed(uint64_t seed, uint64_t k);
/* The seed of a layer's next random call (dropout), kiln__nn_seed(seed, (*calls)++), except in a
 * checkpointed region's recomputation, which replays the seed its forward drew (dropout.c). */
uint64_t kiln__nn_call_seed(uint64_t seed, uint64_t *calls);

/* PyTorch's default initialisation of Linear and Conv weights and biases: f32 on the CPU,
 * uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)] (zeros when fan_in is 0). */
kiln_tensor kiln__nn_uniform_fan_in(kiln_shape shape, int64_t fan_in, uint64_t seed);

/* "[2, 3]" for x's shape into buf. */
const char *kiln__nn_shape_str(char *buf, size_t size, const kiln__tensor *x);

/* Linear's settings and vtable (linear.c), shared with its int8 form (linear_int8.c), which
 * kiln_quantize_dynamic swaps in for a Linear's vtable. */
typedef struct {
    int64_t in_features, out_features;
    bool bias;
} kiln__linear_state;
extern const kiln__module_vtable kiln__linear_vt;
/* Puts packed and scales (consumed) in place of Linear m's weight, under these buffer names,
 * and its bias as a buffer, and gives m the quantized layer's vtable (linear.c). */
kiln_status kiln__linear_take_quantized(kiln_module *m, const kiln__module_vtable *vt, const char *weight_name,
                                        const char *scale_name, kiln_tensor packed, kiln_tensor scales);

/* int8 linear pieces (linear_int8.c), for the layer and for models that hold raw weights.
 * kiln__quantize_weight_i8: w [out, in] f32 (borrowed; a blocking read) into *packed [out,
 * ceil(in/4)] i32 (int8 values, four to an element) and *scales [out, ceil(in/32)] f32, both
 * packed for kiln__gemm_s8_rescale; with a bias (f32 [out], borrowed; KILN_NONE for none) the
 * scales take it as one more column, [out, ceil(in/32) + 1]; a status reported
 * for op otherwise. kiln__linear_i8: x [..., in] f32 times the packed weight (+ bias, or
 * KILN_NONE), all consumed; errors name op or the product "linear_int8". kiln__linear_i8_fused:
 * the same with the bias in the scales, and GELU after it when gelu ("linear_int8_bias[_gelu]"). */
kiln_status kiln__quantize_weight_i8(const char *op, kiln_tensor w, kiln_tensor bias, kiln_tensor *packed,
                                     kiln_tensor *scales);
kiln_tensor kiln__linear_i8(const char *op, kiln_tensor x, kiln_tensor packed, kiln_tensor scales, kiln_tensor bias);
kiln_tensor kiln__linear_i8_fused(const char *op, kiln_tensor x, kiln_tensor packed, kiln_tensor scales_bias, bool gelu);

/* Attention within each of n sequences packed one after another along T (FlashAttention's
 * varlen form; src/nn/attention.c): q, k [heads, T, E] and v [heads, T, Ev] (consumed, any
 * strides), lengths[0..n) adding up to T (copied: the caller's to free at once); the result
 * [heads, T, Ev], laid out [T, heads, Ev]. Inference: tracked inputs are an error. */
kiln_tensor kiln__attention_segments(kiln_tensor q, kiln_tensor k, kiln_tensor v, int64_t n, const int64_t *lengths,
                                     double scale);

#endif
