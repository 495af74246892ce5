/* A tiny convolutional autoencoder: two strided conv2d layers encode 16 x 16 images to
 * 16 x 4 x 4, two conv_transpose2d layers decode them back; trained with Adam on smooth random
 * images (4 x 4 noise upsampled with bilinear interpolate), minimising the reconstruction's
 * mean squared error. bench/peers/example_autoencoder.py is the same program in PyTorch.
 * Usage: autoencoder [--steps N] */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 32, S = 16 };

int main(int argc, char **argv) {
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return printf("usage: %s [--steps N]\n", argv[0]), 0;
    char *end = "";
    long steps = argc == 1 ? 200 : argc == 3 && strcmp(argv[1], "--steps") == 0 ? strtol(argv[2], &end, 10) : 0;
    if (*end || steps < 1 || steps > 1000000) return fprintf(stderr, "usage: %s [--steps N]\n", argv[0]), 2;
    kiln_conv2d_options d1 = kiln_conv2d_defaults(1, 8, 3), d2 = kiln_conv2d_defaults(8, 16, 3);
    kiln_conv_transpose2d_options u1 = kiln_conv_transpose2d_defaults(16, 8, 3);
    kiln_conv_transpose2d_options u2 = kiln_conv_transpose2d_defaults(8, 1, 3);
    d1.stride_h = d1.stride_w = d2.stride_h = d2.stride_w = u1.stride_h = u1.stride_w = u2.stride_h = u2.stride_w = 2;
    d1.pad_h = d1.pad_w = d2.pad_h = d2.pad_w = u1.pad_h = u1.pad_w = u2.pad_h = u2.pad_w = 1;
    u1.output_pad_h = u1.output_pad_w = u2.output_pad_h = u2.output_pad_w = 1;
    kiln_module *layers[] = {kiln_conv2d_new(d1, 1), kiln_relu_new(), kiln_conv2d_new(d2, 2), kiln_relu_new(),
                             kiln_conv_transpose2d_new(u1, 3), kiln_relu_new(), kiln_conv_transpose2d_new(u2, 4),
                             kiln_sigmoid_new()};
    kiln_module *model = kiln_sequential_new(8, layers);
    kiln_adam_options ao = kiln_adam_defaults();
    ao.lr = 3e-3;
    kiln_optimizer *opt = kiln_adam_new(model, ao);
    for (long step = 1; step <= steps; step++) {
        kiln_tensor noise = kiln_rand(KILN_CPU, KILN_F32, KILN_SHAPE(N, 1, 4, 4), (uint64_t)step);
        kiln_tensor images = kiln_interpolate(noise, S, S, 0, 0, KILN_INTERP_BILINEAR, false);
        kiln_tensor loss = kiln_mse_loss(kiln_module_forward(model, kiln_ref(images)), images);
        double l;
        if (kiln_train_step(opt, loss, &l) != KILN_OK) return fprintf(stderr, "%s\n", kiln_last_error()), 1;
        if (step == 1 || step % 20 == 0 || step == steps) printf("step %ld loss %.5f\n", step, l);
    }
    kiln_optimizer_free(opt);
    kiln_module_free(model);
    return 0;
}
