/* Weight-only block-quantized Linear pieces (linear_blockq.c): ggml-style q8_0 and q4_0 weights
 * with f32 activations, for kiln_quantize_dynamic's layer and for models that hold raw weights
 * (BERT).
 *
 * kiln__quantize_weight_blockq: w [out, in] f32 (borrowed; a blocking read) into *packed
 * [out, ceil(in/32), 8] i32 for q8_0 (32 int8 values a block) or [out, ceil(in/32), 4] for
 * q4_0 (32 nibbles), in kiln__gemm_bq's layout, and *scales [out, ceil(in/32)] f32; with a
 * bias (f32 [out], borrowed; KILN_NONE for none) the scales take it as one more column. A
 * status reported for op otherwise (the outputs then KILN_NONE).
 * kiln__linear_blockq: x [..., in] f32 times the packed weight (+ bias, or KILN_NONE), all
 * consumed; errors name op or the product ("linear_q8_0", "linear_q4_0").
 * kiln__linear_blockq_fused: the same with the bias in the scales and GELU after it when gelu
 * ("linear_q8_0_bias[_gelu]"); the format is read from packed's last dim.
 * kiln__quant_type_of: which kiln_quant_type a packed weight is (a 2-d one is int8's), 0 for
 * none of them. */
#ifndef KILN_NN_LINEAR_BLOCKQ_IMPL_H
#define KILN_NN_LINEAR_BLOCKQ_IMPL_H

#include "nn/layers-impl.h"

kiln_status kiln__quantize_weight_blockq(const char *op, kiln_quant_type type, kiln_tensor w, kiln_tensor bias,
                                         kiln_tensor *packed, kiln_tensor *scales);
kiln_tensor kiln__linear_blockq(const char *op, kiln_quant_type type, kiln_tensor x, kiln_tensor packed,
                                kiln_tensor scales, kiln_tensor bias);
kiln_tensor kiln__linear_blockq_fused(const char *op, kiln_tensor x, kiln_tensor packed, kiln_tensor scales_bias,
                                      bool gelu);
kiln_quant_type kiln__quant_type_of(kiln_tensor packed);

/* For kiln_quantize_dynamic (linear_int8.c): every f32 Linear in m's tree to type's layer
 * (already quantized layers stay as they are); on error the layer that failed is unchanged. */
kiln_status kiln__quantize_tree_blockq(kiln_module *m, kiln_quant_type type);
/* Whether m itself is a q8_0 or q4_0 Linear. */
bool kiln__module_is_blockq(const kiln_module *m);

#endif
