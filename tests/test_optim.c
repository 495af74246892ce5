/* Optimizers: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW against
 * hand-computed double references over 3 steps; updates in place (same handle, tensor,
 * storage and leaf; no allocation after the state exists); parameters without a gradient
 * skipped; learning-rate changes; clipping by global norm; bad input and leaks. */
#include <kiln.h>

#include "autodiff/autodiff-impl.h"
#include "kiln_test.h"
#include "nn/module-impl.h"
#include "optim/optim-impl.h"

/* ---- a toy module: w [2, 3], b [3], and a buffer, with gradients chosen by the test ---- */

#define NW 6
#define NB 3

static kiln_tensor toy_forward(kiln_module *m, kiln_tensor x) { return x; }
static const kiln__module_vtable toy_vt = {"Toy", toy_forward, NULL};

static const double w0[NW] = {0.5, -1.25, 2.0, 0.75, -0.3, 1.1};
static const double b0[NB] = {0.1, -0.2, 0.3};

static kiln_tensor make(kiln_dtype dt, kiln_shape shape, const double *v) {
    float f[NW];
    for (int i = 0; i < kiln_shape_numel(shape); i++) f[i] = (float)v[i];
    return kiln_from_data(KILN_CPU, dt, shape, dt == KILN_F64 ? (const void *)v : (const void *)f);
}

static kiln_module *toy_new(kiln_dtype dt) {
    kiln_module *m = kiln__module_new(&toy_vt, 0);
    kiln__module_add_param(m, "w", make(dt, KILN_SHAPE(2, 3), w0), false);
    kiln__module_add_param(m, "b", make(dt, KILN_SHAPE(3), b0), false);
    kiln__module_add_param(m, "stat", kiln_zeros(KILN_CPU, dt, KILN_SHAPE(3)), true);
    return m;
}

static kiln_tensor *slot(kiln_module *m, int i) { return &m->params[i].tensor; }

/* Gradients gw (and gb unless NULL) through a real backward: loss = sum(w*gw) + sum(b*gb). */
static kiln_grads *grads_for(kiln_module *m, kiln_dtype dt, const double *gw, const double *gb) {
    kiln_tensor loss = kiln_sum(kiln_mul(kiln_ref(*slot(m, 0)), make(dt, KILN_SHAPE(2, 3), gw)));
    if (gb) loss = kiln_add(loss, kiln_sum(kiln_mul(kiln_ref(*slot(m, 1)), make(dt, KILN_SHAPE(3), gb))));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    return g;
}

static void read_param(kiln_module *m, int i, kiln_dtype dt, double *out) {
    int64_t n = kiln_tensor_numel(*slot(m, i));
    float f[NW];
    double d[NW];
    KT_CHECK(kiln_into_data(kiln_ref(*slot(m, i)), dt == KILN_F64 ? (void *)d : (void *)f,
                            (size_t)n * (dt == KILN_F64 ? 8 : 4)) == KILN_OK);
    for (int k = 0; k < n; k++) out[k] = dt == KILN_F64 ? d[k] : f[k];
}

static const double grad_w[3][NW] = {
    {0.3, -0.7, 1.2, 0.05, -2.0, 0.9}, {-0.4, 0.25, 0.8, -1.5, 0.6, 0.0}, {1.0, -0.1, -0.6, 0.33, 0.7, -0.8}};
static const double grad_b[3][NB] = {{0.2, -0.5, 1.0}, {0.9, 0.1, -0.3}, {-0.7, 0.4, 0.6}};
static const double lrs[3] = {0.1, 0.05, 0.2};

/* ---- references in double, written from the update rules ---------------------------------- */

typedef struct {
    double p[NW], m[NW], v[NW];
    int t;
} ref_state;

static void ref_sgd(ref_state *s, int n, const double *g, double lr, kiln_sgd_options o) {
    for (int i = 0; i < n; i++) {
        double d = g[i] + o.weight_decay * s->p[i];
        if (o.momentum != 0) {
            s->m[i] = s->t == 0 ? d : o.momentum * s->m[i] + (1 - o.dampening) * d;
            d = o.nesterov ? d + o.momentum * s->m[i] : s->m[i];
        }
        s->p[i] -= lr * d;
    }
    s->t++;
}

static void ref_adam(ref_state *s, int n, const double *g, double lr, kiln_adam_options o) {
    s->t++;
    double bc1 = 1 - pow(o.beta1, s->t), bc2 = 1 - pow(o.beta2, s->t);
    for (int i = 0; i < n; i++) {
        double d = g[i];
        if (o.decoupled_weight_decay) s->p[i] *= 1 - lr * o.weight_decay;
        else d += o.weight_decay * s->p[i];
        s->m[i] = o.beta1 * s->m[i] + (1 - o.beta1) * d;
        s->v[i] = o.beta2 * s->v[i] + (1 - o.beta2) * d * d;
        s->p[i] -= lr / bc1 * s->m[i] / (sqrt(s->v[i]) / sqrt(bc2) + o.eps);
    }
}

static void ref_init(ref_state *s, const double *p, int n) {
    memset(s, 0, sizeof *s);
    memcpy(s->p, p, sizeof(double) * (size_t)n);
}

static void check_close(kiln_module *m, int i, kiln_dtype dt, const ref_state *r, int n, double tol, const char *what) {
    double got[NW];
    read_param(m, i, dt, got);
    for (int k = 0; k < n; k++)
        KT_CHECK_MSG(fabs(got[k] - r->p[k]) <= tol * fmax(1.0, fabs(r->p[k])), "%s[%d]: %.12g vs %.12g", what, k,
                     got[k], r->p[k]);
}

/* Three steps of opt (lr changing each step) against the reference; b is skipped on step 1. */
static void run_three(kiln_optimizer *opt, kiln_module *m, kiln_dtype dt, bool adam, kiln_sgd_options so,
                      kiln_adam_options ao, const char *what) {
    double tol = dt == KILN_F64 ? 1e-12 : 3e-6;
    ref_state rw, rb;
    ref_init(&rw, w0, NW);
    ref_init(&rb, b0, NB);
    for (int t = 0; t < 3; t++) {
        kiln_optimizer_set_lr(opt, lrs[t]);
        KT_CHECK(kiln_optimizer_lr(opt) == lrs[t]);
        kiln_grads *g = grads_for(m, dt, grad_w[t], t == 0 ? NULL : grad_b[t]);
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        KT_CHECK(kiln_grads_count(g) == 0); /* every gradient used was taken */
        kiln_grads_free(g);
        if (adam) ref_adam(&rw, NW, grad_w[t], lrs[t], ao);
        else ref_sgd(&rw, NW, grad_w[t], lrs[t], so);
        if (t > 0) {
            if (adam) ref_adam(&rb, NB, grad_b[t], lrs[t], ao);
            else ref_sgd(&rb, NB, grad_b[t], lrs[t], so);
        }
        check_close(m, 0, dt, &rw, NW, tol, what);
        check_close(m, 1, dt, &rb, NB, tol, what);
    }
    KT_CHECK(kiln_optimizer_steps(opt) == 3);
}

static kiln_memory_stats stats(void) { return kiln_memory_stats_get(KILN_CPU); }

/* Every tensor and byte alive at `base` is alive again, and nothing more. */
static void no_leaks(kiln_memory_stats base) {
    kiln_memory_stats now = stats();
    KT_CHECK(now.live_tensors == base.live_tensors);
    KT_CHECK(now.bytes_in_use == base.bytes_in_use);
}

static void sgd_case(kiln_dtype dt, double momentum, double dampening, double wd, bool nesterov, const char *what) {
    kiln_memory_stats base = stats();
    kiln_module *m = toy_new(dt);
    kiln_sgd_options o = kiln_sgd_defaults();
    o.momentum = momentum, o.dampening = dampening, o.weight_decay = wd, o.nesterov = nesterov;
    kiln_optimizer *opt = kiln_sgd_new(m, o);
    KT_CHECK(opt != NULL);
    if (opt) run_three(opt, m, dt, false, o, kiln_adam_defaults(), what);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
    no_leaks(base);
}

static void adam_case(kiln_dtype dt, kiln_adam_options o, const char *what) {
    kiln_memory_stats base = stats();
    kiln_module *m = toy_new(dt);
    kiln_optimizer *opt = kiln_adam_new(m, o);
    KT_CHECK(opt != NULL);
    if (opt) run_three(opt, m, dt, true, kiln_sgd_defaults(), o, what);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
    no_leaks(base);
}

KT_TEST(sgd_matches_reference) {
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_F64 : KILN_F32;
        sgd_case(dt, 0, 0, 0, false, "plain");
        sgd_case(dt, 0, 0, 0.1, false, "weight decay");
        sgd_case(dt, 0.9, 0, 0, false, "momentum");
        sgd_case(dt, 0.9, 0.3, 0.05, false, "momentum + dampening + decay");
        sgd_case(dt, 0.8, 0, 0, true, "nesterov");
        sgd_case(dt, 0.8, 0, 0.2, true, "nesterov + decay");
    }
}

KT_TEST(adam_matches_reference) {
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_F64 : KILN_F32;
        kiln_adam_options o = kiln_adam_defaults();
        adam_case(dt, o, "adam");
        o.beta1 = 0.8, o.beta2 = 0.95, o.eps = 1e-3; /* bias correction and eps are visible */
        adam_case(dt, o, "adam betas");
        o.weight_decay = 0.1;
        adam_case(dt, o, "adam L2");
        o = kiln_adamw_defaults();
        KT_CHECK(o.decoupled_weight_decay && o.weight_decay == 0.01);
        o.weight_decay = 0.3;
        adam_case(dt, o, "adamw");
    }
}

/* ---- in place ----------------------------------------------------------------------------- */

KT_TEST(updates_in_place) {
    kiln_memory_stats base = stats();
    kiln_module *m = toy_new(KILN_F32);
    kiln_tensor handles[2] = {*slot(m, 0), *slot(m, 1)};
    kiln__tensor *objs[2];
    void *data[2];
    kiln__ad_leaf *leaves[2];
    for (int i = 0; i < 2; i++) {
        objs[i] = kiln__handle_peek(handles[i], "test", NULL);
        data[i] = objs[i]->storage->data;
        leaves[i] = ((kiln__ad_meta *)objs[i]->autodiff)->leaf;
    }
    kiln_optimizer *opt = kiln_adam_new(m, kiln_adamw_defaults());
    for (int t = 0; t < 3; t++) {
        kiln_grads *g = grads_for(m, KILN_F32, grad_w[t], grad_b[t]);
        kiln_memory_stats before = stats();
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        kiln_memory_stats after = stats();
        /* step 1 creates exp_avg and exp_avg_sq of both parameters; later steps allocate nothing */
        KT_CHECK(after.alloc_count - before.alloc_count == (t == 0 ? 4u : 0u));
        kiln_grads_free(g);
        for (int i = 0; i < 2; i++) {
            KT_CHECK(slot(m, i)->id == handles[i].id);
            KT_CHECK(kiln_is_valid(handles[i]));
            kiln__tensor *now = kiln__handle_peek(handles[i], "test", NULL);
            KT_CHECK(now == objs[i]);
            KT_CHECK(now && now->storage->data == data[i]);
            KT_CHECK(now && now->autodiff && ((kiln__ad_meta *)now->autodiff)->leaf == leaves[i]);
            KT_CHECK(kiln_requires_grad(handles[i]));
        }
    }
    /* still a usable leaf: a new backward reaches it */
    kiln_grads *g = grads_for(m, KILN_F32, grad_w[0], grad_b[0]);
    KT_CHECK(kiln_grads_count(g) == 2);
    kiln_grads_free(g);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
    no_leaks(base);
}

/* A queued reader of the parameter sees the value from before the update. */
KT_TEST(queued_readers_see_old_values) {
    kiln_module *m = toy_new(KILN_F32);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    kiln_optimizer_set_lr(opt, 1.0);
    kiln_tensor before = kiln_mul_scalar(kiln_ref(*slot(m, 0)), 1.0); /* queued, reads w */
    kiln_grads *g = grads_for(m, KILN_F32, grad_w[0], NULL);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    float v[NW];
    KT_CHECK(kiln_into_data(before, v, sizeof v) == KILN_OK);
    for (int i = 0; i < NW; i++) KT_CHECK(v[i] == (float)w0[i]);
    double now[NW];
    read_param(m, 0, KILN_F32, now);
    for (int i = 0; i < NW; i++) KT_NEAR(now[i], (float)w0[i] - (float)grad_w[0][i], 1e-6);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

KT_TEST(params_without_grads_are_skipped) {
    kiln_module *m = toy_new(KILN_F32);
    kiln_sgd_options so = kiln_sgd_defaults();
    so.momentum = 0.9;
    kiln_optimizer *opt = kiln_sgd_new(m, so);
    kiln_grads *g = grads_for(m, KILN_F32, grad_w[0], NULL);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    double b[NB];
    read_param(m, 1, KILN_F32, b);
    for (int i = 0; i < NB; i++) KT_CHECK(b[i] == (float)b0[i]);
    kiln__optim_param *pb = &opt->params[1];
    KT_CHECK(strcmp(pb->name, "b") == 0 && pb->state[0] == NULL && pb->step == 0);
    KT_CHECK(opt->n_params == 2); /* the buffer is not optimised */
    /* an empty container: nothing changes but the step count */
    kiln_grads *none = grads_for(m, KILN_F32, grad_w[0], NULL);
    kiln_tensor taken = kiln_grad(none, *slot(m, 0));
    kiln_release(taken);
    KT_CHECK(kiln_optimizer_step(opt, none) == KILN_OK);
    kiln_grads_free(none);
    KT_CHECK(kiln_optimizer_steps(opt) == 2 && opt->params[0].step == 1);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

/* The optimizer reads the module's slot at every step: a replaced parameter is followed. */
KT_TEST(replaced_parameter_is_followed) {
    kiln_module *m = toy_new(KILN_F32);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    kiln_optimizer_set_lr(opt, 1.0);
    kiln_release(*slot(m, 0));
    *slot(m, 0) = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
    kiln_require_grad(*slot(m, 0));
    kiln_grads *g = grads_for(m, KILN_F32, grad_w[0], NULL);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    double w[NW];
    read_param(m, 0, KILN_F32, w);
    for (int i = 0; i < NW; i++) KT_NEAR(w[i], -(float)grad_w[0][i], 1e-7);
    kiln_optimizer_free(opt);
    /* one of another shape than its optimizer state is refused */
    kiln_sgd_options so = kiln_sgd_defaults();
    so.momentum = 0.5;
    opt = kiln_sgd_new(m, so);
    g = grads_for(m, KILN_F32, grad_w[0], NULL);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    kiln_release(*slot(m, 0));
    *slot(m, 0) = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2));
    kiln_require_grad(*slot(m, 0));
    kiln_tensor loss = kiln_sum(kiln_ref(*slot(m, 0)));
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_ERR_SHAPE);
    KT_CHECK(strstr(kiln_last_error(), "'w' changed shape") != NULL);
    kiln_grads_free(g);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

/* ---- clipping ------------------------------------------------------------------------------- */

static double global_norm(int t) {
    double s = 0;
    for (int i = 0; i < NW; i++) s += grad_w[t][i] * grad_w[t][i];
    for (int i = 0; i < NB; i++) s += grad_b[t][i] * grad_b[t][i];
    return sqrt(s);
}

/* With SGD at lr 1 the update is exactly the (clipped) gradient. */
static void clip_case(double max_norm, kiln_dtype dt) {
    kiln_module *m = toy_new(dt);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    kiln_optimizer_set_lr(opt, 1.0);
    kiln_grads *g = grads_for(m, dt, grad_w[0], grad_b[0]);
    kiln_tensor norm = KILN_NONE;
    KT_CHECK(kiln_clip_grad_norm(opt, g, max_norm, &norm) == KILN_OK);
    KT_CHECK(kiln_tensor_ndim(norm) == 0 && kiln_tensor_dtype(norm) == dt);
    double n = 0, want = global_norm(0);
    KT_CHECK(kiln_into_scalar_f64(norm, &n) == KILN_OK);
    KT_NEAR(n, want, dt == KILN_F64 ? 1e-14 : 1e-6);
    KT_CHECK(kiln_grads_count(g) == 2); /* scaled where they are: still in the container */
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    double scale = fmin(1.0, max_norm / (want + 1e-6));
    double w[NW], b[NB];
    read_param(m, 0, dt, w);
    read_param(m, 1, dt, b);
    double tol = dt == KILN_F64 ? 1e-14 : 1e-6;
    for (int i = 0; i < NW; i++) KT_NEAR(w0[i] - w[i], grad_w[0][i] * scale, tol);
    for (int i = 0; i < NB; i++) KT_NEAR(b0[i] - b[i], grad_b[0][i] * scale, tol);
    if (scale == 1.0) /* under the limit: bit for bit what an unclipped step gives */
        for (int i = 0; i < NW; i++) {
            if (dt == KILN_F32) KT_CHECK((float)w[i] == (float)w0[i] - (float)grad_w[0][i]);
            else KT_CHECK(w[i] == w0[i] - grad_w[0][i]);
        }
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

KT_TEST(clip_grad_norm) {
    kiln_memory_stats base = stats();
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_F64 : KILN_F32;
        clip_case(1.0, dt);  /* the norm is ~3.3: scaled */
        clip_case(0.25, dt);
        clip_case(100.0, dt); /* under: unchanged */
        clip_case(0.0, dt);   /* zero: every gradient zeroed */
    }
    no_leaks(base);
}

KT_TEST(clip_scales_in_place) {
    kiln_module *m = kiln__module_new(&toy_vt, 0);
    kiln__module_add_param(m, "w", kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(512, 256), 1), false);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    kiln_tensor loss = kiln_sum(kiln_mul(kiln_ref(*slot(m, 0)), kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(512, 256), 2)));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    kiln_memory_stats before = stats();
    kiln_memory_reset_peak(KILN_CPU);
    KT_CHECK(kiln_clip_grad_norm(opt, g, 1.0, NULL) == KILN_OK);
    kiln_memory_stats after = stats();
    KT_CHECK(after.peak_bytes - before.bytes_in_use < 4096); /* a few scalars, no gradient copy */
    KT_CHECK(after.bytes_in_use == before.bytes_in_use);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

KT_TEST(clip_edge_cases) {
    kiln_module *m = toy_new(KILN_F32);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    /* nothing to clip: the norm is 0 */
    kiln_grads *g = grads_for(m, KILN_F32, grad_w[0], NULL);
    kiln_release(kiln_grad(g, *slot(m, 0)));
    kiln_tensor norm = KILN_NONE;
    KT_CHECK(kiln_clip_grad_norm(opt, g, 1.0, &norm) == KILN_OK);
    float n = -1;
    KT_CHECK(kiln_into_scalar(norm, &n) == KILN_OK && n == 0.0f);
    kiln_grads_free(g);
    /* clipped gradients of a container that was freed unstepped never leak into a later step */
    g = grads_for(m, KILN_F32, grad_w[0], NULL);
    KT_CHECK(kiln_clip_grad_norm(opt, g, 1e-3, NULL) == KILN_OK);
    kiln_grads_free(g);
    double w_before[NW], w[NW];
    read_param(m, 0, KILN_F32, w_before);
    kiln_optimizer_set_lr(opt, 1.0);
    g = grads_for(m, KILN_F32, grad_w[1], NULL);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    read_param(m, 0, KILN_F32, w);
    for (int i = 0; i < NW; i++) KT_NEAR(w_before[i] - w[i], grad_w[1][i], 1e-6);
    /* clipping twice clips the clipped values */
    g = grads_for(m, KILN_F32, grad_w[0], grad_b[0]);
    KT_CHECK(kiln_clip_grad_norm(opt, g, 1.0, NULL) == KILN_OK);
    KT_CHECK(kiln_clip_grad_norm(opt, g, 1.0, &norm) == KILN_OK);
    KT_CHECK(kiln_into_scalar(norm, &n) == KILN_OK);
    KT_NEAR(n, 1.0, 1e-5);
    kiln_grads_free(g);
    kiln_optimizer_free(opt); /* drops the clipped gradients it still holds */
    kiln_module_free(m);
}

/* ---- parameter groups ------------------------------------------------------------------------ */

/* loss = sum(w*gw) + sum(b*gb) over the caller's own tensors */
static kiln_grads *grads_of(kiln_tensor w, kiln_tensor b, const double *gw, const double *gb) {
    kiln_tensor loss = kiln_add(kiln_sum(kiln_mul(kiln_ref(w), make(KILN_F64, KILN_SHAPE(2, 3), gw))),
                                kiln_sum(kiln_mul(kiln_ref(b), make(KILN_F64, KILN_SHAPE(3), gb))));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    return g;
}

static void check_tensor(kiln_tensor t, const ref_state *r, int n, const char *what) {
    double got[NW];
    KT_CHECK(kiln_into_data(kiln_ref(t), got, sizeof(double) * (size_t)n) == KILN_OK);
    for (int k = 0; k < n; k++) KT_CHECK_MSG(fabs(got[k] - r->p[k]) <= 1e-12, "%s[%d]: %.15g vs %.15g", what, k, got[k], r->p[k]);
}

/* w in group 0 (the options' rate and decay), b in group 1 (its own rate, no decay), each
 * group's rate changed between steps: every update matches the reference of its group. */
static void groups_case(bool adam) {
    kiln_memory_stats base = stats();
    kiln_tensor w = make(KILN_F64, KILN_SHAPE(2, 3), w0), b = make(KILN_F64, KILN_SHAPE(3), b0);
    KT_CHECK(kiln_require_grad(w) == KILN_OK && kiln_require_grad(b) == KILN_OK);
    kiln_sgd_options so = kiln_sgd_defaults();
    so.momentum = 0.9, so.weight_decay = 0.05;
    kiln_adam_options ao = kiln_adamw_defaults();
    ao.weight_decay = 0.2;
    kiln_param_group groups[2] = {kiln_param_group_of(1, &w), kiln_param_group_of(1, &b)};
    groups[1].lr = 0.05, groups[1].weight_decay = 0;
    kiln_optimizer *opt = adam ? kiln_adam_new_groups(2, groups, ao) : kiln_sgd_new_groups(2, groups, so);
    KT_CHECK(opt != NULL);
    if (!opt) return;
    KT_CHECK(kiln_optimizer_num_groups(opt) == 2);
    KT_CHECK(kiln_optimizer_group_lr(opt, 0) == (adam ? ao.lr : so.lr) && kiln_optimizer_group_lr(opt, 1) == 0.05);
    ref_state rw, rb;
    ref_init(&rw, w0, NW);
    ref_init(&rb, b0, NB);
    kiln_sgd_options so_b = so;
    so_b.weight_decay = 0;
    kiln_adam_options ao_b = ao;
    ao_b.weight_decay = 0;
    for (int t = 0; t < 3; t++) {
        KT_CHECK(kiln_optimizer_set_group_lr(opt, 0, lrs[t]) == KILN_OK);
        double lr_b = t == 2 ? 0.3 : 0.05;
        if (t == 2) KT_CHECK(kiln_optimizer_set_group_lr(opt, 1, lr_b) == KILN_OK);
        KT_CHECK(kiln_optimizer_group_lr(opt, 0) == lrs[t] && kiln_optimizer_group_lr(opt, 1) == lr_b);
        kiln_grads *g = grads_of(w, b, grad_w[t], grad_b[t]);
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        KT_CHECK(kiln_grads_count(g) == 0);
        kiln_grads_free(g);
        if (adam) ref_adam(&rw, NW, grad_w[t], lrs[t], ao), ref_adam(&rb, NB, grad_b[t], lr_b, ao_b);
        else ref_sgd(&rw, NW, grad_w[t], lrs[t], so), ref_sgd(&rb, NB, grad_b[t], lr_b, so_b);
        check_tensor(w, &rw, NW, adam ? "adamw group 0" : "sgd group 0");
        check_tensor(b, &rb, NB, adam ? "adamw group 1" : "sgd group 1");
        if (t == 0) { /* the caller may drop its handle: the optimizer holds its own */
            kiln_tensor keep = kiln_ref(b);
            KT_CHECK(kiln_release(b) == KILN_OK);
            b = keep;
        }
    }
    kiln_optimizer_set_lr(opt, 0.5); /* every group */
    KT_CHECK(kiln_optimizer_group_lr(opt, 0) == 0.5 && kiln_optimizer_group_lr(opt, 1) == 0.5);
    kiln_optimizer_free(opt);
    kiln_release(w);
    kiln_release(b);
    kiln_sync();
    no_leaks(base);
}

KT_TEST(param_groups_match_reference) {
    groups_case(false);
    groups_case(true);
    /* a module optimizer is one group */
    kiln_module *m = toy_new(KILN_F32);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    KT_CHECK(kiln_optimizer_num_groups(opt) == 1 && kiln_optimizer_group_lr(opt, 0) == 0.01);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

KT_TEST(param_groups_bad_input) {
    kiln_memory_stats base = stats();
    kiln_tensor w = make(KILN_F64, KILN_SHAPE(2, 3), w0), plain = make(KILN_F64, KILN_SHAPE(3), b0);
    kiln_require_grad(w);
    kiln_param_group g1 = kiln_param_group_of(1, &w);
    kiln_sgd_options so = kiln_sgd_defaults();
    KT_CHECK(kiln_sgd_new_groups(1, NULL, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_sgd_new_groups", __LINE__);
    KT_CHECK(kiln_sgd_new_groups(0, &g1, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_groups", __LINE__);
    KT_CHECK(kiln_adam_new_groups(2000, &g1, kiln_adam_defaults()) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_adam_new_groups", __LINE__);
    so.lr = -1;
    KT_CHECK(kiln_sgd_new_groups(1, &g1, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_groups", __LINE__);
    so = kiln_sgd_defaults();
    kiln_param_group bad = g1;
    bad.n = -1;
    KT_CHECK(kiln_sgd_new_groups(1, &bad, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_groups", __LINE__);
    bad.n = INT32_MAX;
    KT_CHECK(kiln_sgd_new_groups(1, &bad, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_groups", __LINE__);
    bad = kiln_param_group_of(2, NULL);
    KT_CHECK(kiln_sgd_new_groups(1, &bad, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_sgd_new_groups", __LINE__);
    bad = g1, bad.lr = NAN;
    KT_CHECK(kiln_sgd_new_groups(1, &bad, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_groups", __LINE__);
    bad = g1, bad.weight_decay = INFINITY;
    KT_CHECK(kiln_sgd_new_groups(1, &bad, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_groups", __LINE__);
    bad = kiln_param_group_of(1, &plain); /* not marked with kiln_require_grad */
    KT_CHECK(kiln_sgd_new_groups(1, &bad, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_groups", __LINE__);
    KT_CHECK(strstr(kiln_last_error(), "kiln_require_grad") != NULL);
    kiln_tensor twice[2] = {w, kiln_ref(w)};
    bad = kiln_param_group_of(2, twice);
    KT_CHECK(kiln_sgd_new_groups(1, &bad, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new_groups", __LINE__);
    kiln_release(twice[1]);
    bad = kiln_param_group_of(1, &twice[1]); /* stale */
    KT_CHECK(kiln_sgd_new_groups(1, &bad, so) == NULL); KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_sgd_new_groups", __LINE__);
    kiln_tensor half = kiln_zeros(KILN_CPU, KILN_F16, KILN_SHAPE(3));
    if (kiln_require_grad(half) == KILN_OK) {
        bad = kiln_param_group_of(1, &half);
        KT_CHECK(kiln_adam_new_groups(1, &bad, kiln_adam_defaults()) == NULL); KT_EXPECT_ERROR(KILN_ERR_DTYPE, "kiln_adam_new_groups", __LINE__);
    }
    kiln_release(half);
    kiln_param_group empty = kiln_param_group_of(0, NULL); /* an empty group is fine, as in PyTorch */
    kiln_optimizer *opt = kiln_sgd_new_groups(1, &empty, so);
    KT_CHECK(opt != NULL && kiln_optimizer_num_groups(opt) == 1);
    kiln_optimizer_free(opt);

    opt = kiln_sgd_new_groups(1, &g1, so);
    KT_CHECK(opt != NULL);
    KT_CHECK(kiln_optimizer_set_group_lr(NULL, 0, 0.1) == KILN_ERR_NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_optimizer_set_group_lr", __LINE__);
    KT_CHECK(kiln_optimizer_set_group_lr(opt, 1, 0.1) == KILN_ERR_INDEX); KT_EXPECT_ERROR(KILN_ERR_INDEX, "kiln_optimizer_set_group_lr", __LINE__);
    KT_CHECK(kiln_optimizer_set_group_lr(opt, -1, 0.1) == KILN_ERR_INDEX);
    KT_CHECK(kiln_optimizer_set_group_lr(opt, 0, NAN) == KILN_ERR_INVALID_ARGUMENT); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_optimizer_set_group_lr", __LINE__);
    KT_CHECK(kiln_optimizer_group_lr(opt, 0) == 0.01);
    KT_CHECK(isnan(kiln_optimizer_group_lr(opt, 7)) && kiln_last_status() == KILN_ERR_INDEX);
    KT_CHECK(isnan(kiln_optimizer_group_lr(NULL, 0)) && kiln_optimizer_num_groups(NULL) == 0);
    kiln_optimizer_free(opt);
    kiln_release(w);
    kiln_release(plain);
    kiln_sync();
    no_leaks(base);
}

/* A groups optimizer's state, step counts and per-group rates and decays survive a
 * checkpoint; a file with another number of groups is refused. */
KT_TEST(param_groups_checkpoint) {
    kiln_memory_stats base = stats();
    const char *path = "test_optim_groups.safetensors";
    kiln_module *m1 = toy_new(KILN_F32), *m2 = toy_new(KILN_F32);
    kiln_param_group g1[2] = {kiln_param_group_of(1, slot(m1, 0)), kiln_param_group_of(1, slot(m1, 1))};
    kiln_param_group g2[2] = {kiln_param_group_of(1, slot(m2, 0)), kiln_param_group_of(1, slot(m2, 1))};
    g1[1].lr = 0.02, g1[1].weight_decay = 0;
    kiln_adam_options ao = kiln_adamw_defaults();
    kiln_optimizer *o1 = kiln_adam_new_groups(2, g1, ao), *o2 = kiln_adam_new_groups(2, g2, ao);
    for (int t = 0; t < 2; t++) {
        kiln_grads *g = grads_for(m1, KILN_F32, grad_w[t], grad_b[t]);
        KT_CHECK(kiln_optimizer_step(o1, g) == KILN_OK);
        kiln_grads_free(g);
    }
    KT_CHECK(kiln_checkpoint_save(path, m1, o1) == KILN_OK);
    KT_CHECK(kiln_checkpoint_load(path, m2, o2) == KILN_OK);
    KT_CHECK(kiln_optimizer_group_lr(o2, 1) == 0.02 && o2->groups[1].weight_decay == 0 && o2->groups[0].weight_decay == 0.01);
    KT_CHECK(kiln_optimizer_steps(o2) == 2);
    /* one more step on both: the same values */
    kiln_grads *ga = grads_for(m1, KILN_F32, grad_w[2], grad_b[2]), *gb = grads_for(m2, KILN_F32, grad_w[2], grad_b[2]);
    KT_CHECK(kiln_optimizer_step(o1, ga) == KILN_OK && kiln_optimizer_step(o2, gb) == KILN_OK);
    kiln_grads_free(ga);
    kiln_grads_free(gb);
    for (int i = 0; i < 2; i++) {
        double a[NW], b[NW];
        read_param(m1, i, KILN_F32, a);
        read_param(m2, i, KILN_F32, b);
        for (int k = 0; k < (i ? NB : NW); k++) KT_CHECK(a[k] == b[k]);
    }
    kiln_optimizer *one = kiln_adam_new(m2, ao); /* one group, other names */
    KT_CHECK(kiln_checkpoint_load(path, m2, one) == KILN_ERR_SHAPE); KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_checkpoint_load", __LINE__);
    KT_CHECK(strstr(kiln_last_error(), "groups") != NULL);
    remove(path);
    kiln_optimizer_free(one);
    kiln_optimizer_free(o1);
    kiln_optimizer_free(o2);
    kiln_module_free(m1);
    kiln_module_free(m2);
    kiln_sync();
    no_leaks(base);
}

/* ---- clipping by value ------------------------------------------------------------------------ */

KT_TEST(clip_grad_value) {
    kiln_memory_stats base = stats();
    kiln_module *m = toy_new(KILN_F32);
    kiln_sgd_options so = kiln_sgd_defaults();
    so.lr = 1.0;
    kiln_optimizer *opt = kiln_sgd_new(m, so);
    kiln_grads *g = grads_for(m, KILN_F32, grad_w[0], grad_b[0]);
    KT_CHECK(kiln_clip_grad_value(opt, g, 0.5) == KILN_OK);
    KT_CHECK(kiln_grads_count(g) == 2); /* still in g */
    double w_before[NW], w[NW], b[NB];
    read_param(m, 0, KILN_F32, w_before);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    read_param(m, 0, KILN_F32, w);
    read_param(m, 1, KILN_F32, b);
    for (int i = 0; i < NW; i++) KT_NEAR(w_before[i] - w[i], fmax(-0.5, fmin(0.5, grad_w[0][i])), 1e-6);
    for (int i = 0; i < NB; i++) KT_NEAR((float)b0[i] - b[i], fmax(-0.5, fmin(0.5, grad_b[0][i])), 1e-6);
    /* zero clamps everything to zero */
    g = grads_for(m, KILN_F32, grad_w[1], NULL);
    KT_CHECK(kiln_clip_grad_value(opt, g, 0.0) == KILN_OK);
    read_param(m, 0, KILN_F32, w_before);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    read_param(m, 0, KILN_F32, w);
    for (int i = 0; i < NW; i++) KT_CHECK(w[i] == w_before[i]);
    /* bad input: a status naming the call and this line; nothing clipped */
    g = grads_for(m, KILN_F32, grad_w[2], NULL);
    KT_CHECK(kiln_clip_grad_value(NULL, g, 1.0) == KILN_ERR_NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_clip_grad_value", __LINE__);
    KT_CHECK(kiln_clip_grad_value(opt, NULL, 1.0) == KILN_ERR_NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_clip_grad_value", __LINE__);
    KT_CHECK(kiln_clip_grad_value(opt, g, -1.0) == KILN_ERR_INVALID_ARGUMENT); KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_clip_grad_value", __LINE__);
    KT_CHECK(kiln_clip_grad_value(opt, g, NAN) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(kiln_clip_grad_value(opt, g, INFINITY) == KILN_ERR_INVALID_ARGUMENT);
    /* a stale parameter: refused before any gradient changes */
    kiln_tensor keep = kiln_ref(*slot(m, 1));
    kiln_release(*slot(m, 1));
    KT_CHECK(kiln_clip_grad_value(opt, g, 0.1) == KILN_ERR_STALE_HANDLE); KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_clip_grad_value", __LINE__);
    *slot(m, 1) = keep;
    read_param(m, 0, KILN_F32, w_before);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    read_param(m, 0, KILN_F32, w);
    for (int i = 0; i < NW; i++) KT_NEAR(w_before[i] - w[i], grad_w[2][i], 1e-6); /* unclipped */
    kiln_optimizer_free(opt);
    kiln_module_free(m);
    kiln_sync();
    no_leaks(base);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void expect_error(kiln_status got, kiln_status want, const char *op) {
    KT_CHECK_MSG(got == want, "%s: got %s, want %s", op, kiln_status_str(got), kiln_status_str(want));
    KT_CHECK_MSG(kiln_last_status() == want, "%s: last status %s", op, kiln_status_str(kiln_last_status()));
    KT_CHECK_MSG(strstr(kiln_last_error(), op) != NULL, "'%s' lacks %s", kiln_last_error(), op);
}

KT_TEST(bad_input) {
    kiln_memory_stats base = stats();
    kiln_module *m = toy_new(KILN_F32);
    KT_CHECK(kiln_sgd_new(NULL, kiln_sgd_defaults()) == NULL);
    expect_error(kiln_last_status(), KILN_ERR_NULL, "kiln_sgd_new");
    KT_CHECK(kiln_adam_new(NULL, kiln_adam_defaults()) == NULL);
    expect_error(kiln_last_status(), KILN_ERR_NULL, "kiln_adam_new");
    kiln_sgd_options so = kiln_sgd_defaults();
    so.lr = -1;
    KT_CHECK(kiln_sgd_new(m, so) == NULL);
    expect_error(kiln_last_status(), KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new");
    so = kiln_sgd_defaults();
    so.nesterov = true; /* without momentum */
    KT_CHECK(kiln_sgd_new(m, so) == NULL);
    so.momentum = 0.9, so.dampening = 0.1; /* nesterov with dampening */
    KT_CHECK(kiln_sgd_new(m, so) == NULL);
    so = kiln_sgd_defaults();
    so.momentum = NAN;
    KT_CHECK(kiln_sgd_new(m, so) == NULL);
    kiln_adam_options ao = kiln_adam_defaults();
    ao.beta1 = 1.0;
    KT_CHECK(kiln_adam_new(m, ao) == NULL);
    expect_error(kiln_last_status(), KILN_ERR_INVALID_ARGUMENT, "kiln_adam_new");
    ao = kiln_adam_defaults();
    ao.eps = -1;
    KT_CHECK(kiln_adam_new(m, ao) == NULL);
    ao = kiln_adam_defaults();
    ao.weight_decay = INFINITY;
    KT_CHECK(kiln_adam_new(m, ao) == NULL);

    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    kiln_grads *g = grads_for(m, KILN_F32, grad_w[0], grad_b[0]);
    expect_error(kiln_optimizer_step(NULL, g), KILN_ERR_NULL, "kiln_optimizer_step");
    KT_CHECK(strstr(kiln_last_error(), "test_optim.c") != NULL);
    expect_error(kiln_optimizer_step(opt, NULL), KILN_ERR_NULL, "kiln_optimizer_step");
    expect_error(kiln_clip_grad_norm(NULL, g, 1.0, NULL), KILN_ERR_NULL, "kiln_clip_grad_norm");
    expect_error(kiln_clip_grad_norm(opt, NULL, 1.0, NULL), KILN_ERR_NULL, "kiln_clip_grad_norm");
    expect_error(kiln_clip_grad_norm(opt, g, -1.0, NULL), KILN_ERR_INVALID_ARGUMENT, "kiln_clip_grad_norm");
    expect_error(kiln_clip_grad_norm(opt, g, NAN, NULL), KILN_ERR_INVALID_ARGUMENT, "kiln_clip_grad_norm");
    KT_CHECK(kiln_grads_count(g) == 2); /* nothing was taken */
    kiln_optimizer_set_lr(opt, -0.5);
    KT_CHECK(kiln_last_status() == KILN_ERR_INVALID_ARGUMENT && kiln_optimizer_lr(opt) == 0.01);
    kiln_optimizer_set_lr(opt, NAN);
    KT_CHECK(kiln_optimizer_lr(opt) == 0.01);
    kiln_optimizer_set_lr(NULL, 0.1);
    KT_CHECK(kiln_last_status() == KILN_ERR_NULL);
    KT_CHECK(kiln_optimizer_lr(NULL) == 0.0 && kiln_optimizer_steps(NULL) == 0);
    kiln_optimizer_free(NULL);
    kiln_grads_free(g);

    /* a stale parameter handle: the step fails and changes nothing */
    kiln_tensor w = *slot(m, 0);
    kiln_tensor keep = kiln_ref(w);
    g = grads_for(m, KILN_F32, grad_w[0], grad_b[0]);
    kiln_release(w);
    expect_error(kiln_optimizer_step(opt, g), KILN_ERR_STALE_HANDLE, "kiln_optimizer_step");
    kiln_grads_free(g);
    double b[NB];
    read_param(m, 1, KILN_F32, b);
    for (int i = 0; i < NB; i++) KT_CHECK(b[i] == (float)b0[i]);
    *slot(m, 0) = keep;
    KT_CHECK(kiln_optimizer_steps(opt) == 0);
    kiln_optimizer_free(opt);

    /* parameters in borrowed memory are never written: refused up front, and at a step when
     * one takes a parameter's place later */
    float mem[3] = {1, 2, 3};
    kiln_module *mb = kiln__module_new(&toy_vt, 0);
    kiln__module_add_param(mb, "w", kiln_from_borrowed(KILN_F32, KILN_SHAPE(3), mem, NULL, NULL), false);
    KT_CHECK(kiln_sgd_new(mb, kiln_sgd_defaults()) == NULL);
    expect_error(kiln_last_status(), KILN_ERR_INVALID_ARGUMENT, "kiln_sgd_new");
    kiln_tensor borrowed = *slot(mb, 0);
    *slot(mb, 0) = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_require_grad(*slot(mb, 0));
    opt = kiln_sgd_new(mb, kiln_sgd_defaults());
    KT_CHECK(opt != NULL);
    kiln_release(*slot(mb, 0));
    *slot(mb, 0) = borrowed;
    kiln_tensor loss = kiln_sum(kiln_mul(kiln_ref(*slot(mb, 0)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3))));
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    expect_error(kiln_optimizer_step(opt, g), KILN_ERR_INVALID_ARGUMENT, "kiln_optimizer_step");
    KT_CHECK(mem[0] == 1 && mem[1] == 2 && mem[2] == 3);
    kiln_grads_free(g);
    kiln_optimizer_free(opt);
    kiln_module_free(mb);

    /* integer or half parameters are refused up front */
    kiln_module *mh = kiln__module_new(&toy_vt, 0);
    kiln__module_add_param(mh, "w", kiln_zeros(KILN_CPU, KILN_F16, KILN_SHAPE(3)), false);
    KT_CHECK(kiln_adam_new(mh, kiln_adam_defaults()) == NULL);
    expect_error(kiln_last_status(), KILN_ERR_DTYPE, "kiln_adam_new");
    kiln_module_free(mh);

    kiln_module_free(m);
    no_leaks(base);
}

/* A gradient whose kernel failed while running: the step reports that error and leaves the
 * parameters alone rather than poison them. */
KT_TEST(failed_gradient_is_refused) {
    kiln_module *m = toy_new(KILN_F32);
    kiln_optimizer *opt = kiln_adam_new(m, kiln_adam_defaults());
    kiln__debug_fail_next_kernel("kiln_backward");
    kiln_grads *g = grads_for(m, KILN_F32, grad_w[0], grad_b[0]);
    KT_CHECK(kiln_sync() == KILN_ERR_KERNEL); /* the failure is known now */
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_ERR_KERNEL);
    KT_CHECK(strstr(kiln_last_error(), "injected") != NULL);
    kiln_grads_free(g);
    KT_CHECK(kiln_optimizer_steps(opt) == 0);
    double w[NW], b[NB];
    read_param(m, 0, KILN_F32, w);
    read_param(m, 1, KILN_F32, b);
    for (int i = 0; i < NW; i++) KT_CHECK(w[i] == (float)w0[i]);
    for (int i = 0; i < NB; i++) KT_CHECK(b[i] == (float)b0[i]);
    g = grads_for(m, KILN_F32, grad_w[0], grad_b[0]); /* and the next step works */
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

/* Out of memory at any point of a step (gradient handles, state): the step fails whole. */
KT_TEST(allocation_failures) {
    kiln_memory_stats base = stats();
    kiln_module *m = toy_new(KILN_F32);
    kiln_optimizer *opt = kiln_adam_new(m, kiln_adam_defaults());
    kiln_status st = KILN_ERR_OUT_OF_MEMORY;
    for (int n = 1; n < 20 && st != KILN_OK; n++) {
        kiln_grads *g = grads_for(m, KILN_F32, grad_w[0], grad_b[0]);
        kiln_debug_fail_alloc_after(n);
        st = kiln_optimizer_step(opt, g);
        kiln_debug_fail_alloc_after(0);
        kiln_grads_free(g);
        if (st == KILN_OK) break;
        KT_CHECK(st == KILN_ERR_OUT_OF_MEMORY);
        KT_CHECK(kiln_optimizer_steps(opt) == 0);
        for (int i = 0; i < 2; i++) KT_CHECK(opt->params[i].state[0] == NULL && opt->params[i].step == 0);
        double w[NW];
        read_param(m, 0, KILN_F32, w);
        for (int i = 0; i < NW; i++) KT_CHECK(w[i] == (float)w0[i]);
    }
    KT_CHECK(st == KILN_OK && kiln_optimizer_steps(opt) == 1);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
    no_leaks(base);
}

/* Real layers: a small regression whose loss falls under each optimizer. */
KT_TEST(training_loss_falls) {
    kiln_memory_stats base = stats();
    for (int kind = 0; kind < 3; kind++) {
        kiln_module *layers[3] = {kiln_linear_new(4, 16, true, 1), kiln_tanh_new(), kiln_linear_new(16, 1, true, 2)};
        kiln_module *model = kiln_sequential_new(3, layers);
        KT_CHECK(model != NULL);
        if (!model) return;
        kiln_sgd_options so = kiln_sgd_defaults();
        so.lr = 0.05, so.momentum = 0.9, so.nesterov = kind == 1;
        kiln_optimizer *opt = kind == 2 ? kiln_adam_new(model, kiln_adamw_defaults()) : kiln_sgd_new(model, so);
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(64, 4), 7);
        kiln_tensor y = kiln_sum_dims(kiln_sin(kiln_ref(x)), KILN_DIMS(1), true);
        float first = 0, last = 0;
        for (int step = 0; step < 150; step++) {
            if (kind == 2) kiln_optimizer_set_lr(opt, kiln_lr_warmup(kiln_lr_cosine(1e-2, 1e-3, step, 150), step, 10));
            kiln_tensor loss = kiln_mse_loss(kiln_module_forward(model, kiln_ref(x)), kiln_ref(y));
            float v;
            KT_CHECK(kiln_into_scalar(kiln_ref(loss), &v) == KILN_OK);
            if (step == 0) first = v;
            last = v;
            kiln_grads *g = NULL;
            KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
            KT_CHECK(kiln_clip_grad_norm(opt, g, 5.0, NULL) == KILN_OK);
            KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
            kiln_grads_free(g);
        }
        KT_CHECK_MSG(last < 0.2 * first, "optimizer %d: loss %g -> %g", kind, first, last);
        kiln_release(x);
        kiln_release(y);
        kiln_optimizer_free(opt);
        kiln_module_free(model);
    }
    no_leaks(base);
}

int main(void) {
    KT_RUN(sgd_matches_reference);
    KT_RUN(adam_matches_reference);
    KT_RUN(updates_in_place);
    KT_RUN(queued_readers_see_old_values);
    KT_RUN(params_without_grads_are_skipped);
    KT_RUN(replaced_parameter_is_followed);
    KT_RUN(clip_grad_norm);
    KT_RUN(clip_scales_in_place);
    KT_RUN(clip_edge_cases);
    KT_RUN(bad_input);
    KT_RUN(failed_gradient_is_refused);
    KT_RUN(allocation_failures);
    KT_RUN(training_loss_falls);
    KT_RUN(param_groups_match_reference);
    KT_RUN(param_groups_bad_input);
    KT_RUN(param_groups_checkpoint);
    KT_RUN(clip_grad_value);
    return kt_finish();
}
