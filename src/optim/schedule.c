/* Learning-rate schedules: pure functions of the step. A negative step counts as 0; bad
 * periods report an error and give the base rate back (never NaN into training). */
#include <math.h>

#include "core/core-impl.h"
#include "kiln/optim.h"

/* base * gamma^floor(step / step_size), as torch's StepLR. */
double kiln_lr_step(double base_lr, int64_t step, int64_t step_size, double gamma) {
    if (step_size <= 0) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_lr_step", "step_size %lld must be > 0", (long long)step_size);
        return base_lr;
    }
    if (step < 0) step = 0;
    return base_lr * pow(gamma, (double)(step / step_size));
}

/* Half a cosine from base_lr at step 0 to min_lr at total_steps (and after), as torch's
 * CosineAnnealingLR in closed form. */
double kiln_lr_cosine(double base_lr, double min_lr, int64_t step, int64_t total_steps) {
    if (total_steps <= 0) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_lr_cosine", "total_steps %lld must be > 0",
                     (long long)total_steps);
        return base_lr;
    }
    if (step < 0) step = 0;
    if (step >= total_steps) return min_lr;
    const double pi = 3.14159265358979323846;
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + cos(pi * (double)step / (double)total_steps));
}

/* after * step / warmup_steps while step < warmup_steps (0 at step 0), then after: the linear
 * warm-up of Hugging Face's schedules. warmup_steps <= 0 means no warm-up. */
double kiln_lr_warmup(double after, int64_t step, int64_t warmup_steps) {
    if (step < 0) step = 0;
    if (warmup_steps <= 0 || step >= warmup_steps) return after;
    return after * (double)step / (double)warmup_steps;
}
