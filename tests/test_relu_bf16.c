/* relu and its gradient on bf16 tensors through the CPU's bf16 loops (backend/cpu/
 * elementwise_lowp.c), with no casts around them: bit for bit the f32 kernels between casts
 * (the route the op layer took before) on every bf16 bit pattern (each sign of zero,
 * infinities, subnormals, quiet and signaling NaNs), dense and strided; the gradient against
 * central finite differences of the bf16 forward (exact: whole numbers a step from zero); the
 * op queues no casts; bad input; no leaks. */
#include <math.h>
#include <string.h>

#include "ew_util.h"
#include "kiln_test.h"

#define ALL 65536

/* relu(x) and d sum(relu(x) * seed) / dx as bf16 bits, in bf16 or between casts to f32. */
static void run(bool through_f32, bool strided, const uint16_t *x, const uint16_t *seed, uint16_t *y, uint16_t *dx) {
    kiln_tensor leaf = kiln_from_data(KILN_CPU, KILN_BF16, KILN_SHAPE(strided ? 2 * ALL : ALL), x);
    KT_CHECK(kiln_require_grad(leaf) == KILN_OK);
    kiln_tensor v = strided ? kiln_slice(kiln_ref(leaf), 0, 1, 2 * ALL, 2) : kiln_ref(leaf);
    if (through_f32) v = kiln_cast(v, KILN_F32);
    kiln_tensor out = kiln_relu(v);
    if (through_f32) out = kiln_cast(out, KILN_BF16);
    KT_CHECK(kiln_into_data(kiln_ref(out), y, sizeof(uint16_t) * ALL) == KILN_OK);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward_seed(out, kiln_from_data(KILN_CPU, KILN_BF16, KILN_SHAPE(ALL), seed), &g) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_grad(g, leaf), dx, sizeof(uint16_t) * (strided ? 2 * ALL : ALL)) == KILN_OK);
    kiln_grads_free(g);
    kiln_release(leaf);
}

KT_TEST(bf16_relu_matches_the_cast_route) {
    ew_mark mark = ew_mark_now();
    uint16_t *x = malloc(sizeof(uint16_t) * 2 * ALL), *seed = malloc(sizeof(uint16_t) * ALL);
    uint16_t *y = malloc(sizeof(uint16_t) * ALL), *y_ref = malloc(sizeof(uint16_t) * ALL);
    uint16_t *dx = malloc(sizeof(uint16_t) * 2 * ALL), *dx_ref = malloc(sizeof(uint16_t) * 2 * ALL);
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < 2 * ALL; i++) x[i] = (uint16_t)(s ? i / 2 : i); /* every pattern */
        for (int i = 0; i < ALL; i++) seed[i] = (uint16_t)(i * 40503u); /* every pattern, shuffled */
        run(false, s, x, seed, y, dx);
        run(true, s, x, seed, y_ref, dx_ref);
        int bad_y = 0, bad_dx = 0;
        for (int i = 0; i < ALL; i++) bad_y += y[i] != y_ref[i];
        for (int i = 0; i < (s ? 2 * ALL : ALL); i++) bad_dx += dx[i] != dx_ref[i];
        KT_CHECK_MSG(bad_y == 0 && bad_dx == 0, "%s: %d values and %d gradients differ", s ? "strided" : "dense",
                     bad_y, bad_dx);
    }
    free(x), free(seed), free(y), free(y_ref), free(dx), free(dx_ref);
    EW_NO_LEAKS(mark);
}

/* d/dx sum(relu(x) * seed) by central differences of the bf16 forward, at whole numbers in
 * -64..64 other than 0 (x +- 1/2 is bf16-exact there and keeps x's sign). */
KT_TEST(bf16_relu_finite_differences) {
    ew_mark mark = ew_mark_now();
    double x[128], seed[128];
    int n = 0;
    for (int v = -64; v <= 64; v++)
        if (v) x[n] = v, seed[n] = (double)(n % 5 - 2), n++;
    kiln_tensor leaf = ew_tensor(KILN_BF16, KILN_SHAPE(n), x);
    kiln_require_grad(leaf);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward_seed(kiln_relu(kiln_ref(leaf)), ew_tensor(KILN_BF16, KILN_SHAPE(n), seed), &g) == KILN_OK);
    double *grad = ew_read(kiln_grad(g, leaf), KILN_BF16, n);
    kiln_grads_free(g);
    kiln_release(leaf);
    int bad = 0;
    for (int i = 0; grad && i < n; i++) {
        double side[2];
        for (int k = 0; k < 2; k++) {
            double at = x[i] + (k ? -0.5 : 0.5);
            double *r = ew_read(kiln_relu(ew_tensor(KILN_BF16, KILN_SHAPE(1), &at)), KILN_BF16, 1);
            side[k] = r ? r[0] * seed[i] : NAN;
            free(r);
        }
        if (side[0] - side[1] != grad[i]) bad++;
    }
    KT_CHECK(grad && bad == 0);
    free(grad);
    EW_NO_LEAKS(mark);
}

/* The kernels a bf16 relu's forward and backward queue (fusion off, so each op is its own):
 * how many of them are casts (COPY), and whether RELU and RELU_BACKWARD ran. */
static int casts_queued(bool *relu_ran) {
    kiln_fusion_set_enabled(false);
    kiln_profiler_start();
    kiln_tensor x = kiln_cast(kiln_arange(KILN_CPU, KILN_F32, -8, 8, 1), KILN_BF16);
    kiln_require_grad(x);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward_seed(kiln_relu(kiln_ref(x)), kiln_ones(KILN_CPU, KILN_BF16, KILN_SHAPE(16)), &g) == KILN_OK);
    kiln_release(kiln_grad(g, x));
    kiln_grads_free(g);
    kiln_release(x);
    kiln_profiler_stop();
    kiln_profile_event ev[256];
    size_t n = kiln_profiler_events(ev, 256);
    int casts = 0, relus = 0;
    for (size_t i = 0; i < n && i < 256; i++) {
        bool in_relu = strcmp(ev[i].op, "kiln_relu") == 0 || strcmp(ev[i].op, "kiln_backward") == 0;
        casts += in_relu && strcmp(ev[i].kernel, "COPY") == 0;
        relus += strcmp(ev[i].kernel, "RELU") == 0 || strcmp(ev[i].kernel, "RELU_BACKWARD") == 0;
    }
    kiln_fusion_set_enabled(true);
    *relu_ran = relus == 2;
    return casts;
}

KT_TEST(queues_no_casts) {
    ew_mark mark = ew_mark_now();
    bool ran = false;
    int casts = casts_queued(&ran);
    KT_CHECK_MSG(casts == 0 && ran, "%d casts queued by relu and its gradient (none expected), relu kernels ran: %d",
                 casts, (int)ran);
    EW_NO_LEAKS(mark);
}

KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    int line;
    kiln_tensor r = kiln_relu(ew_stale()); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_relu", line);
    r = kiln_relu(KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_relu", line);
    line = __LINE__; r = kiln_relu(kiln_reshape(kiln_zeros(KILN_CPU, KILN_BF16, KILN_SHAPE(2, 3)), KILN_SHAPE(4)));
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line); /* a poisoned bf16 input: the first error */
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(bf16_relu_matches_the_cast_route);
    KT_RUN(bf16_relu_finite_differences);
    KT_RUN(queues_no_casts);
    KT_RUN(bad_input);
    return kt_finish();
}
