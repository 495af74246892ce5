/* RMSprop (alpha, eps, weight decay, momentum, centered) and Adagrad (lr_decay, weight decay,
 * initial_accumulator_value, eps) against double-precision references written from
 * torch.optim's single-tensor update rules, over four steps with the learning rate changing;
 * parameter groups with their own rate and decay; f32 and f64; the state through a
 * checkpoint; bad options and leaks. */
#include <kiln.h>

#include "kiln_test.h"
#include "nn/module-impl.h"
#include "optim/optim-impl.h"

#define NW 6
#define NB 3
#define STEPS 4

static const double w0[NW] = {0.5, -1.25, 2.0, 0.75, -0.3, 1.1};
static const double b0[NB] = {0.1, -0.2, 0.3};
static const double grad_w[STEPS][NW] = {{0.3, -0.7, 1.2, 0.05, -2.0, 0.9},
                                         {-0.4, 0.25, 0.8, -1.5, 0.6, 0.0},
                                         {1.0, -0.1, -0.6, 0.33, 0.7, -0.8},
                                         {0.2, 0.2, -0.9, 0.4, -0.05, 1.3}};
static const double grad_b[STEPS][NB] = {{0.2, -0.5, 1.0}, {0.9, 0.1, -0.3}, {-0.7, 0.4, 0.6}, {0.05, -0.6, 0.25}};
static const double lrs[STEPS] = {0.1, 0.05, 0.2, 0.02};

static kiln_tensor make(kiln_dtype dt, kiln_shape shape, const double *v) {
    float f[NW];
    for (int i = 0; i < kiln_shape_numel(shape); i++) f[i] = (float)v[i];
    return kiln_from_data(KILN_CPU, dt, shape, dt == KILN_F64 ? (const void *)v : (const void *)f);
}

/* ---- references, in double, from torch/optim/rmsprop.py and adagrad.py ------------------- */

typedef struct {
    double p[NW], sq[NW], buf[NW], ga[NW], sum[NW];
    int t;
} ref_state;

static void ref_init(ref_state *s, const double *p, int n, double init_acc) {
    memset(s, 0, sizeof *s);
    memcpy(s->p, p, sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) s->sum[i] = init_acc;
}

static void ref_rmsprop(ref_state *s, int n, const double *g, double lr, double wd, kiln_rmsprop_options o) {
    for (int i = 0; i < n; i++) {
        double d = g[i] + wd * s->p[i];
        s->sq[i] = s->sq[i] * o.alpha + (1 - o.alpha) * d * d;
        double avg;
        if (o.centered) {
            s->ga[i] = s->ga[i] + (1 - o.alpha) * (d - s->ga[i]);
            avg = sqrt(s->sq[i] - s->ga[i] * s->ga[i]) + o.eps;
        } else {
            avg = sqrt(s->sq[i]) + o.eps;
        }
        if (o.momentum > 0) {
            s->buf[i] = s->buf[i] * o.momentum + d / avg;
            s->p[i] -= lr * s->buf[i];
        } else {
            s->p[i] -= lr * d / avg;
        }
    }
    s->t++;
}

static void ref_adagrad(ref_state *s, int n, const double *g, double lr, double wd, kiln_adagrad_options o) {
    s->t++;
    double clr = lr / (1 + (s->t - 1) * o.lr_decay);
    for (int i = 0; i < n; i++) {
        double d = g[i] + wd * s->p[i];
        s->sum[i] += d * d;
        s->p[i] -= clr * d / (sqrt(s->sum[i]) + o.eps);
    }
}

/* ---- the runs ---------------------------------------------------------------------------------- */

static void check_tensor(kiln_tensor t, kiln_dtype dt, const ref_state *r, int n, const char *what, int step) {
    double got[NW];
    float f[NW];
    KT_CHECK(kiln_into_data(kiln_ref(t), dt == KILN_F64 ? (void *)got : (void *)f, (size_t)n * kiln_dtype_size(dt)) ==
             KILN_OK);
    if (dt == KILN_F32)
        for (int k = 0; k < n; k++) got[k] = f[k];
    double tol = dt == KILN_F64 ? 1e-12 : 2e-6;
    for (int k = 0; k < n; k++)
        KT_CHECK_MSG(fabs(got[k] - r->p[k]) <= tol * fmax(1.0, fabs(r->p[k])), "%s step %d [%d]: %.15g vs %.15g", what,
                     step, k, got[k], r->p[k]);
}

static kiln_grads *grads_of(kiln_dtype dt, kiln_tensor w, kiln_tensor b, const double *gw, const double *gb) {
    kiln_tensor loss = kiln_sum(kiln_mul(kiln_ref(w), make(dt, KILN_SHAPE(2, 3), gw)));
    if (gb) loss = kiln_add(loss, kiln_sum(kiln_mul(kiln_ref(b), make(dt, KILN_SHAPE(3), gb))));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    return g;
}

typedef struct {
    bool adagrad;
    kiln_rmsprop_options r;
    kiln_adagrad_options a;
    const char *what;
} optim_case;

/* w in group 0 (the options' rate and decay; the rate changed every step), b in group 1 (rate
 * 0.03, decay 0.1, no gradient at step 0): four steps against the references. */
static void run_case(kiln_dtype dt, optim_case oc) {
    kiln_memory_stats base = kiln_memory_stats_get(KILN_CPU);
    kiln_tensor w = make(dt, KILN_SHAPE(2, 3), w0), b = make(dt, KILN_SHAPE(3), b0);
    kiln_require_grad(w);
    kiln_require_grad(b);
    kiln_param_group groups[2] = {kiln_param_group_of(1, &w), kiln_param_group_of(1, &b)};
    groups[1].lr = 0.03, groups[1].weight_decay = 0.1;
    kiln_optimizer *opt = oc.adagrad ? kiln_adagrad_new_groups(2, groups, oc.a) : kiln_rmsprop_new_groups(2, groups, oc.r);
    KT_CHECK_MSG(opt != NULL, "%s: %s", oc.what, kiln_last_error());
    if (!opt) return;
    double wd = oc.adagrad ? oc.a.weight_decay : oc.r.weight_decay;
    double init = oc.adagrad ? oc.a.initial_accumulator_value : 0;
    ref_state rw, rb;
    ref_init(&rw, w0, NW, init);
    ref_init(&rb, b0, NB, init);
    for (int t = 0; t < STEPS; t++) {
        KT_CHECK(kiln_optimizer_set_group_lr(opt, 0, lrs[t]) == KILN_OK);
        kiln_grads *g = grads_of(dt, w, b, grad_w[t], t == 0 ? NULL : grad_b[t]);
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        KT_CHECK(kiln_grads_count(g) == 0);
        kiln_grads_free(g);
        if (oc.adagrad) {
            ref_adagrad(&rw, NW, grad_w[t], lrs[t], wd, oc.a);
            if (t > 0) ref_adagrad(&rb, NB, grad_b[t], 0.03, 0.1, oc.a);
        } else {
            ref_rmsprop(&rw, NW, grad_w[t], lrs[t], wd, oc.r);
            if (t > 0) ref_rmsprop(&rb, NB, grad_b[t], 0.03, 0.1, oc.r);
        }
        check_tensor(w, dt, &rw, NW, oc.what, t);
        check_tensor(b, dt, &rb, NB, oc.what, t);
    }
    KT_CHECK(kiln_optimizer_steps(opt) == STEPS);
    kiln_optimizer_free(opt);
    kiln_release(w);
    kiln_release(b);
    kiln_sync();
    kiln_memory_stats now = kiln_memory_stats_get(KILN_CPU);
    KT_CHECK_MSG(now.live_tensors == base.live_tensors && now.bytes_in_use == base.bytes_in_use, "%s leaks", oc.what);
}

static optim_case rms(double alpha, double eps, double wd, double momentum, bool centered, const char *what) {
    optim_case c = {.adagrad = false, .r = kiln_rmsprop_defaults(), .what = what};
    c.r.alpha = alpha, c.r.eps = eps, c.r.weight_decay = wd, c.r.momentum = momentum, c.r.centered = centered;
    return c;
}

static optim_case ada(double lr_decay, double wd, double init, double eps, const char *what) {
    optim_case c = {.adagrad = true, .a = kiln_adagrad_defaults(), .what = what};
    c.a.lr_decay = lr_decay, c.a.weight_decay = wd, c.a.initial_accumulator_value = init, c.a.eps = eps;
    return c;
}

KT_TEST(defaults_are_torchs) {
    kiln_rmsprop_options r = kiln_rmsprop_defaults();
    KT_CHECK(r.lr == 0.01 && r.alpha == 0.99 && r.eps == 1e-8 && r.weight_decay == 0 && r.momentum == 0 && !r.centered);
    kiln_adagrad_options a = kiln_adagrad_defaults();
    KT_CHECK(a.lr == 0.01 && a.lr_decay == 0 && a.weight_decay == 0 && a.initial_accumulator_value == 0 && a.eps == 1e-10);
}

KT_TEST(rmsprop_matches_reference) {
    const kiln_dtype dts[2] = {KILN_F64, KILN_F32};
    for (int i = 0; i < 2; i++) {
        run_case(dts[i], rms(0.99, 1e-8, 0, 0, false, "rmsprop defaults"));
        run_case(dts[i], rms(0.9, 1e-3, 0.05, 0, false, "rmsprop alpha eps decay"));
        run_case(dts[i], rms(0.95, 1e-8, 0, 0.9, false, "rmsprop momentum"));
        run_case(dts[i], rms(0.9, 1e-6, 0, 0, true, "rmsprop centered"));
        run_case(dts[i], rms(0.8, 1e-4, 0.02, 0.5, true, "rmsprop centered momentum decay"));
    }
}

KT_TEST(adagrad_matches_reference) {
    const kiln_dtype dts[2] = {KILN_F64, KILN_F32};
    for (int i = 0; i < 2; i++) {
        run_case(dts[i], ada(0, 0, 0, 1e-10, "adagrad defaults"));
        run_case(dts[i], ada(0.1, 0, 0, 1e-10, "adagrad lr_decay"));
        run_case(dts[i], ada(0, 0.05, 0.5, 1e-6, "adagrad decay initial accumulator"));
        run_case(dts[i], ada(0.3, 0.01, 0.1, 1e-3, "adagrad everything"));
    }
}

/* ---- module optimizers and checkpoints -------------------------------------------------------- */

static kiln_tensor toy_forward(kiln_module *m, kiln_tensor x) { return (void)m, x; }
static const kiln__module_vtable toy_vt = {"Toy", toy_forward, NULL};

static kiln_module *toy_new(void) {
    kiln_module *m = kiln__module_new(&toy_vt, 0);
    kiln__module_add_param(m, "w", make(KILN_F32, KILN_SHAPE(2, 3), w0), false);
    kiln__module_add_param(m, "b", make(KILN_F32, KILN_SHAPE(3), b0), false);
    return m;
}

static kiln_tensor *slot(kiln_module *m, int i) { return &m->params[i].tensor; }

static void step_module(kiln_module *m, kiln_optimizer *opt, int t) {
    kiln_grads *g = grads_of(KILN_F32, *slot(m, 0), *slot(m, 1), grad_w[t], grad_b[t]);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
}

/* Two steps, save, load into a fresh model and optimizer, then one more step on both: the
 * same values, bit for bit (the state, step counts and options went through the file). */
static void checkpoint_case(bool adagrad) {
    const char *path = "test_optim_rmsprop_adagrad.safetensors";
    kiln_module *m1 = toy_new(), *m2 = toy_new();
    kiln_rmsprop_options ro = kiln_rmsprop_defaults();
    ro.momentum = 0.9, ro.centered = true, ro.alpha = 0.9;
    kiln_adagrad_options ao = kiln_adagrad_defaults();
    ao.lr_decay = 0.2, ao.initial_accumulator_value = 0.1;
    kiln_optimizer *o1 = adagrad ? kiln_adagrad_new(m1, ao) : kiln_rmsprop_new(m1, ro);
    kiln_optimizer *o2 = adagrad ? kiln_adagrad_new(m2, kiln_adagrad_defaults()) : kiln_rmsprop_new(m2, kiln_rmsprop_defaults());
    KT_CHECK(o1 && o2);
    step_module(m1, o1, 0);
    step_module(m1, o1, 1);
    KT_CHECK(kiln_checkpoint_save(path, m1, o1) == KILN_OK);
    KT_CHECK(kiln_checkpoint_load(path, m2, o2) == KILN_OK);
    KT_CHECK(kiln_optimizer_steps(o2) == 2);
    if (adagrad) KT_CHECK(o2->adagrad.lr_decay == 0.2 && o2->adagrad.initial_accumulator_value == 0.1);
    else KT_CHECK(o2->rmsprop.momentum == 0.9 && o2->rmsprop.centered && o2->rmsprop.alpha == 0.9);
    step_module(m1, o1, 2);
    step_module(m2, o2, 2);
    for (int i = 0; i < 2; i++) {
        float a[NW], b[NW];
        int n = i ? NB : NW;
        KT_CHECK(kiln_into_data(kiln_ref(*slot(m1, i)), a, sizeof(float) * (size_t)n) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_ref(*slot(m2, i)), b, sizeof(float) * (size_t)n) == KILN_OK);
        for (int k = 0; k < n; k++) KT_CHECK_MSG(a[k] == b[k], "%s param %d [%d]: %.9g vs %.9g", adagrad ? "adagrad" : "rmsprop", i, k, a[k], b[k]);
    }
    /* another optimizer kind refuses the file */
    kiln_optimizer *other = adagrad ? kiln_rmsprop_new(m2, ro) : kiln_adagrad_new(m2, ao);
    KT_CHECK(kiln_checkpoint_load(path, m2, other) == KILN_ERR_SHAPE); KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_checkpoint_load", __LINE__);
    remove(path);
    kiln_optimizer_free(other);
    kiln_optimizer_free(o1);
    kiln_optimizer_free(o2);
    kiln_module_free(m1);
    kiln_module_free(m2);
}

KT_TEST(state_through_checkpoint) {
    kiln_memory_stats base = kiln_memory_stats_get(KILN_CPU);
    checkpoint_case(false);
    checkpoint_case(true);
    kiln_sync();
    kiln_memory_stats now = kiln_memory_stats_get(KILN_CPU);
    KT_CHECK(now.live_tensors == base.live_tensors && now.bytes_in_use == base.bytes_in_use);
}

/* ---- bad input ------------------------------------------------------------------------------------ */

KT_TEST(bad_options) {
    kiln_memory_stats base = kiln_memory_stats_get(KILN_CPU);
    kiln_tensor w = make(KILN_F64, KILN_SHAPE(2, 3), w0);
    kiln_require_grad(w);
    kiln_param_group g1 = kiln_param_group_of(1, &w);
    const double bad[] = {-1, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        for (int f = 0; f < 5; f++) {
            kiln_rmsprop_options r = kiln_rmsprop_defaults();
            double *field[] = {&r.lr, &r.alpha, &r.eps, &r.weight_decay, &r.momentum};
            *field[f] = bad[i];
            KT_CHECK(kiln_rmsprop_new_groups(1, &g1, r) == NULL);
            KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_rmsprop_new_groups", 0);
            kiln_adagrad_options a = kiln_adagrad_defaults();
            double *afield[] = {&a.lr, &a.lr_decay, &a.weight_decay, &a.initial_accumulator_value, &a.eps};
            *afield[f] = bad[i];
            KT_CHECK(kiln_adagrad_new_groups(1, &g1, a) == NULL);
            KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_adagrad_new_groups", 0);
        }
    }
    /* the call site is the caller's line */
    kiln_rmsprop_options r = kiln_rmsprop_defaults();
    r.alpha = -0.5;
    KT_CHECK(kiln_rmsprop_new_groups(1, &g1, r) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "alpha", __LINE__);
    kiln_adagrad_options a = kiln_adagrad_defaults();
    a.lr_decay = NAN;
    KT_CHECK(kiln_adagrad_new_groups(1, &g1, a) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "lr_decay", __LINE__);
    KT_CHECK(kiln_rmsprop_new_groups(1, NULL, kiln_rmsprop_defaults()) == NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_rmsprop_new_groups", __LINE__);
    KT_CHECK(kiln_adagrad_new_groups(0, &g1, kiln_adagrad_defaults()) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_adagrad_new_groups", __LINE__);
    KT_CHECK(kiln_rmsprop_new(NULL, kiln_rmsprop_defaults()) == NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_rmsprop_new", 0);
    KT_CHECK(kiln_adagrad_new(NULL, kiln_adagrad_defaults()) == NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_adagrad_new", 0);
    /* an integer parameter is refused */
    kiln_tensor iw = kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(3));
    if (kiln_require_grad(iw) == KILN_OK) {
        kiln_param_group gi = kiln_param_group_of(1, &iw);
        KT_CHECK(kiln_adagrad_new_groups(1, &gi, kiln_adagrad_defaults()) == NULL);
        KT_CHECK(kiln_last_status() == KILN_ERR_DTYPE || kiln_last_status() == KILN_ERR_INVALID_ARGUMENT);
    }
    kiln_release(iw);
    /* a good step, then a NULL optimizer */
    kiln_optimizer *opt = kiln_rmsprop_new_groups(1, &g1, kiln_rmsprop_defaults());
    KT_CHECK(opt != NULL);
    kiln_grads *g = grads_of(KILN_F64, w, w, grad_w[0], NULL);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    KT_CHECK(kiln_optimizer_step(NULL, NULL) == KILN_ERR_NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_optimizer_step", __LINE__);
    kiln_optimizer_free(opt);
    kiln_release(w);
    kiln_sync();
    kiln_memory_stats now = kiln_memory_stats_get(KILN_CPU);
    KT_CHECK(now.live_tensors == base.live_tensors && now.bytes_in_use == base.bytes_in_use);
}

int main(void) {
    KT_RUN(defaults_are_torchs);
    KT_RUN(rmsprop_matches_reference);
    KT_RUN(adagrad_matches_reference);
    KT_RUN(state_through_checkpoint);
    KT_RUN(bad_options);
    return kt_finish();
}
