/* Learning-rate schedules: step decay, cosine annealing, linear warm-up, their composition,
 * edge steps and bad periods. */
#include <kiln.h>

#include "kiln_test.h"

KT_TEST(step_decay) {
    /* torch StepLR(step_size=3, gamma=0.5) from 0.1 */
    const double want[10] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125};
    for (int s = 0; s < 10; s++) KT_NEAR(kiln_lr_step(0.1, s, 3, 0.5), want[s], 1e-15);
    KT_CHECK(kiln_lr_step(0.1, -5, 3, 0.5) == 0.1); /* before the start: the base rate */
    KT_NEAR(kiln_lr_step(1.0, 1000, 10, 0.9), pow(0.9, 100), 1e-15);
    KT_CHECK(kiln_lr_step(0.3, 7, 1, 1.0) == 0.3);
}

KT_TEST(cosine) {
    double base = 0.1, lo = 0.001;
    int64_t total = 8;
    for (int64_t s = 0; s <= total; s++) {
        double want = lo + (base - lo) * (1 + cos(M_PI * (double)s / (double)total)) / 2;
        KT_NEAR(kiln_lr_cosine(base, lo, s, total), want, 1e-15);
    }
    KT_CHECK(kiln_lr_cosine(base, lo, 0, total) == base);
    KT_NEAR(kiln_lr_cosine(base, lo, 4, total), (base + lo) / 2, 1e-15);
    KT_CHECK(kiln_lr_cosine(base, lo, total, total) == lo);
    KT_CHECK(kiln_lr_cosine(base, lo, total + 100, total) == lo); /* stays at the floor */
    KT_CHECK(kiln_lr_cosine(base, lo, -3, total) == base);
    /* monotone non-increasing */
    for (int64_t s = 1; s < 100; s++) KT_CHECK(kiln_lr_cosine(1.0, 0.0, s, 100) <= kiln_lr_cosine(1.0, 0.0, s - 1, 100));
}

KT_TEST(warmup) {
    KT_CHECK(kiln_lr_warmup(0.4, 0, 4) == 0.0);
    KT_NEAR(kiln_lr_warmup(0.4, 1, 4), 0.1, 1e-15);
    KT_NEAR(kiln_lr_warmup(0.4, 3, 4), 0.3, 1e-15);
    KT_CHECK(kiln_lr_warmup(0.4, 4, 4) == 0.4);
    KT_CHECK(kiln_lr_warmup(0.4, 50, 4) == 0.4);
    KT_CHECK(kiln_lr_warmup(0.4, 2, 0) == 0.4); /* no warm-up */
    KT_CHECK(kiln_lr_warmup(0.4, -1, 4) == 0.0);
    /* composed: warm-up into a cosine over the whole run */
    for (int64_t s = 0; s < 20; s++) {
        double c = kiln_lr_cosine(1e-3, 0, s, 20);
        double got = kiln_lr_warmup(c, s, 5);
        KT_NEAR(got, s < 5 ? c * (double)s / 5.0 : c, 1e-18);
    }
}

KT_TEST(bad_periods) {
    kiln_clear_error();
    KT_CHECK(kiln_lr_step(0.1, 3, 0, 0.5) == 0.1);
    KT_CHECK(kiln_last_status() == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(strstr(kiln_last_error(), "kiln_lr_step") != NULL);
    kiln_clear_error();
    KT_CHECK(kiln_lr_cosine(0.1, 0.0, 3, -1) == 0.1);
    KT_CHECK(kiln_last_status() == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(strstr(kiln_last_error(), "kiln_lr_cosine") != NULL);
    /* valid calls leave the error state alone: they are pure */
    kiln_clear_error();
    (void)kiln_lr_cosine(0.1, 0.0, 3, 10);
    (void)kiln_lr_step(0.1, 3, 2, 0.1);
    (void)kiln_lr_warmup(0.1, 3, 10);
    KT_CHECK(kiln_last_status() == KILN_OK);
}

int main(void) {
    KT_RUN(step_decay);
    KT_RUN(cosine);
    KT_RUN(warmup);
    KT_RUN(bad_periods);
    return kt_finish();
}
