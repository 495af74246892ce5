/* bf16 and f16 parameters with f32 master weights (the options' master_weights): every kind's
 * master equals, bit for bit, an f32 parameter given the same gradients, and stays within f32
 * rounding of an f64 run of the same updates; the parameter is the master rounded; updates below
 * bf16's spacing accumulate in the master; a failed step changes neither parameter nor master nor
 * state; checkpoints carry the master bit-exactly; without the option the parameter is refused
 * naming the constructor and the caller's line. */
#include <kiln.h>
#include <math.h>
#include <unistd.h>
#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#include <kiln/dlpack.h>
#define HAVE_DLPACK 1
#endif

#include "autodiff/autodiff-impl.h"
#include "engine/engine-impl.h"
#include "kiln_test.h"
#include "nn/module-impl.h"
#include "optim/optim-impl.h"

#define N 8
#define STEPS 6

typedef enum { SGD, ADAM, ADAMW, RMSPROP, ADAGRAD, N_KINDS } kind;
static const char *const kind_names[N_KINDS] = {"sgd", "adam", "adamw", "rmsprop", "adagrad"};

/* An optimizer of kind k over the module m. */
static kiln_optimizer *make_opt(kind k, kiln_module *m, bool master) {
    switch (k) {
    case SGD: {
        kiln_sgd_options o = {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .master_weights = master};
        return kiln_sgd_new(m, o);
    }
    case ADAM:
    case ADAMW: {
        kiln_adam_options o = k == ADAM ? kiln_adam_defaults() : kiln_adamw_defaults();
        o.lr = 0.01, o.master_weights = master;
        return kiln_adam_new(m, o);
    }
    case RMSPROP: {
        kiln_rmsprop_options o = {.lr = 0.01, .momentum = 0.5, .centered = true, .weight_decay = 0.02, .master_weights = master};
        return kiln_rmsprop_new(m, o);
    }
    default: {
        kiln_adagrad_options o = {.lr = 0.1, .lr_decay = 0.01, .initial_accumulator_value = 0.1, .master_weights = master};
        return kiln_adagrad_new(m, o);
    }
    }
}

/* bf16-representable starting values and gradients (8 significant bits at most), so the f32,
 * f64, bf16 and f16 runs start from the same numbers and get the same gradients. */
static double start_value(int i) { return ((i * 37) % 19 - 9) / 8.0; }
static double grad_value(int s, int i) { return ((s * 11 + i * 5) % 13 - 6) / 16.0; }

static kiln_tensor leaf_of(kiln_dtype dt, const double *v) {
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(N), v), dt);
    return kiln_leaf(t);
}

/* A module of one parameter "w" of dtype dt holding v. */
static kiln_tensor toy_forward(kiln_module *m, kiln_tensor x) {
    (void)m;
    return x;
}
static const kiln__module_vtable toy_vt = {"Toy", toy_forward, NULL};
static kiln_module *toy_new(kiln_dtype dt, const double *v) {
    kiln_module *m = kiln__module_new(&toy_vt, 0);
    kiln__module_add_param(m, "w", kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(N), v), dt), false);
    return m;
}
static kiln_tensor W(kiln_module *m) { return m->params[0].tensor; }

/* One step with gradient grad_value(s, .) (as d/dw of sum(w * c)); late: the gradients marked
 * as data parallelism's (the step's copy-and-commit path). */
static kiln_status step_late(kiln_optimizer *opt, kiln_tensor w, int s, bool late) {
    double c[N];
    for (int i = 0; i < N; i++) c[i] = grad_value(s, i);
    kiln_tensor ct = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(N), c), kiln_tensor_dtype(w));
    kiln_grads *g = NULL;
    kiln_status st = kiln_backward(kiln_sum(kiln_mul(kiln_ref(w), ct)), &g);
    if (st == KILN_OK && late) KT_CHECK(kiln__grads_mark_late(g, NULL, NULL));
    if (st == KILN_OK) st = kiln_optimizer_step(opt, g);
    kiln_grads_free(g);
    return st;
}
static kiln_status step_with(kiln_optimizer *opt, kiln_tensor w, int s) { return step_late(opt, w, s, false); }

/* The values of t (borrowed) as doubles. */
static void read_doubles(kiln_tensor t, double *out) {
    KT_CHECK(kiln_into_data(kiln_cast(kiln_ref(t), KILN_F64), out, N * sizeof(double)) == KILN_OK);
}

/* The optimizer's first parameter's master (k < 0) or k-th state (f32) as doubles; false when
 * it has none. */
static bool read_state(kiln_optimizer *opt, int k, double *out) {
    kiln__tensor *m = k < 0 ? opt->params[0].master : opt->params[0].state[k];
    if (!m) return false;
    kiln__tensor_retain(m); /* the handle's own reference */
    kiln_tensor h = kiln__handle_new(m);
    read_doubles(h, out);
    kiln_release(h);
    return true;
}
static bool read_master(kiln_optimizer *opt, double *out) { return read_state(opt, -1, out); }

static double round_to(kiln_dtype dt, double v) {
    return dt == KILN_BF16 ? kiln__bf16_to_f32(kiln__f32_to_bf16((float)v)) : kiln__f16_to_f32(kiln__f32_to_f16((float)v));
}

static void check_follows_f32(kind k, kiln_dtype low) {
    double v0[N], ref64[N], ref32[N], master[N], param[N];
    for (int i = 0; i < N; i++) v0[i] = start_value(i);
    kiln_module *m64 = toy_new(KILN_F64, v0), *m32 = toy_new(KILN_F32, v0), *ml = toy_new(low, v0);
    kiln_tensor w64 = W(m64), w32 = W(m32), wl = W(ml);
    kiln_optimizer *o64 = make_opt(k, m64, false), *o32 = make_opt(k, m32, false), *ol = make_opt(k, ml, true);
    KT_CHECK_MSG(o64 && o32 && ol, "%s: %s", kind_names[k], kiln_last_error());
    for (int s = 0; s < STEPS && o64 && o32 && ol; s++) {
        KT_CHECK(step_with(o64, w64, s) == KILN_OK);
        KT_CHECK(step_with(o32, w32, s) == KILN_OK);
        KT_CHECK_MSG(step_with(ol, wl, s) == KILN_OK, "%s", kiln_last_error());
        read_doubles(w64, ref64), read_doubles(w32, ref32), read_doubles(wl, param);
        KT_CHECK(read_master(ol, master));
        for (int i = 0; i < N; i++) {
            KT_CHECK_MSG(master[i] == ref32[i], "%s %s step %d [%d]: master %.9g, f32 run %.9g", kind_names[k],
                         kiln_dtype_name(low), s, i, master[i], ref32[i]);
            KT_NEAR(master[i], ref64[i], 1e-5 * (1 + fabs(ref64[i])));
            KT_CHECK_MSG(param[i] == round_to(low, master[i]), "%s step %d [%d]: parameter %.9g, master %.9g",
                         kind_names[k], s, i, param[i], master[i]);
        }
    }
    /* the state is f32 beside the low-precision parameter */
    if (ol && ol->params[0].state[0]) KT_CHECK(ol->params[0].state[0]->dtype == KILN_F32);
    kiln_optimizer_free(o64), kiln_optimizer_free(o32), kiln_optimizer_free(ol);
    kiln_module_free(m64), kiln_module_free(m32), kiln_module_free(ml);
}

KT_TEST(bf16_master_follows_the_f32_run_exactly) {
    for (int k = 0; k < N_KINDS; k++) check_follows_f32((kind)k, KILN_BF16);
}

KT_TEST(f16_master_follows_the_f32_run_exactly) {
    for (int k = 0; k < N_KINDS; k++) check_follows_f32((kind)k, KILN_F16);
}

/* lr * grad = 1e-3, below half of bf16's spacing at 1 (2^-8): a bf16 parameter updated alone
 * never moves; through its master it moves by 0.1 over 100 steps. */
KT_TEST(updates_below_bf16_spacing_accumulate_in_the_master) {
    double one[N], master[N], param[N];
    for (int i = 0; i < N; i++) one[i] = 1.0;
    kiln_tensor w = leaf_of(KILN_BF16, one);
    kiln_optimizer *opt = kiln_sgd_new_params(1, &w, (kiln_sgd_options){.lr = 1e-3, .master_weights = true});
    KT_CHECK(opt != NULL);
    double alone = 1.0, exact = 1.0;
    for (int s = 0; s < 100 && opt; s++) {
        kiln_tensor ones = kiln_ones(KILN_CPU, KILN_BF16, KILN_SHAPE(N));
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(kiln_sum(kiln_mul(kiln_ref(w), ones)), &g) == KILN_OK);
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        kiln_grads_free(g);
        alone = round_to(KILN_BF16, alone - 1e-3);
        exact = (double)(float)(exact - (double)(float)1e-3);
    }
    KT_CHECK(alone == 1.0); /* what bf16 alone would keep */
    KT_CHECK(opt && read_master(opt, master));
    read_doubles(w, param);
    for (int i = 0; i < N; i++) {
        KT_NEAR(master[i], 0.9, 1e-5);
        KT_NEAR(master[i], exact, 1e-5);
        KT_CHECK(param[i] == round_to(KILN_BF16, master[i]) && param[i] < 0.91);
    }
    kiln_optimizer_free(opt);
    kiln_release(w);
}

/* The step on late gradients (data parallelism's: updates into copies, committed when every
 * gradient arrived) gives the in-place step's parameter, master and state bit for bit, and a
 * kernel failing in it changes nothing (it waits, so the step itself reports it). */
KT_TEST(late_gradients_give_the_same_masters) {
    double v0[N], a[N], b[N];
    for (int i = 0; i < N; i++) v0[i] = start_value(i);
    for (int k = 0; k < N_KINDS; k++) {
        kiln_module *ma = toy_new(KILN_BF16, v0), *mb = toy_new(KILN_BF16, v0);
        kiln_optimizer *oa = make_opt((kind)k, ma, true), *ob = make_opt((kind)k, mb, true);
        for (int s = 0; s < 3; s++) {
            KT_CHECK(step_late(oa, W(ma), s, false) == KILN_OK);
            KT_CHECK_MSG(step_late(ob, W(mb), s, true) == KILN_OK, "%s", kiln_last_error());
        }
        read_doubles(W(ma), a), read_doubles(W(mb), b);
        KT_CHECK_MSG(memcmp(a, b, sizeof a) == 0, "%s: parameters differ", kind_names[k]);
        for (int st = -1; st < 3; st++) {
            bool ha = read_state(oa, st, a), hb = read_state(ob, st, b);
            KT_CHECK_MSG(ha == hb && (!ha || memcmp(a, b, sizeof a) == 0), "%s: state %d differs", kind_names[k], st);
        }
        /* a failing kernel in the late step: nothing changes, the step says so */
        double before[4][N], after[4][N];
        bool had[4];
        for (int st = -1; st < 3; st++) had[st + 1] = read_state(ob, st, before[st + 1]);
        read_doubles(W(mb), a);
        KT_CHECK(kiln_sync() == KILN_OK);
        kiln__debug_fail_next_kernel("kiln_optimizer_step");
        kiln_status failed = step_late(ob, W(mb), 3, true);
        kiln__debug_fail_next_kernel(NULL);
        KT_CHECK_MSG(failed == KILN_ERR_KERNEL, "%s: %s", kind_names[k], kiln_status_str(failed));
        kiln_sync();
        read_doubles(W(mb), b);
        KT_CHECK(memcmp(a, b, sizeof a) == 0);
        for (int st = -1; st < 3; st++)
            KT_CHECK(read_state(ob, st, after[st + 1]) == had[st + 1] &&
                     (!had[st + 1] || memcmp(before[st + 1], after[st + 1], sizeof after[0]) == 0));
        kiln_optimizer_free(oa), kiln_optimizer_free(ob);
        kiln_module_free(ma), kiln_module_free(mb);
    }
}

/* Checkpoint bytes of (w, opt): the parameter, the master and the state. */
static long save_bytes(kiln_module *m, kiln_optimizer *opt, unsigned char *buf, long cap) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_optim_lowp_%d.safetensors", (int)getpid());
    KT_CHECK(kiln_checkpoint_save(path, m, opt) == KILN_OK);
    FILE *f = fopen(path, "rb");
    long n = f ? (long)fread(buf, 1, (size_t)cap, f) : -1;
    if (f) fclose(f);
    remove(path);
    return n;
}

/* A failing update kernel (or a gradient that fails to compute) leaves parameter, master and
 * state exactly as they were; later steps train. */
KT_TEST(a_failed_step_changes_nothing) {
    static unsigned char before[1 << 14], after[1 << 14];
    double v0[N], p_before[N], p_after[N];
    for (int i = 0; i < N; i++) v0[i] = start_value(i);
    for (int how = 0; how < 2; how++) {
        kiln_module *m = toy_new(KILN_BF16, v0);
        kiln_tensor w = W(m);
        kiln_adam_options o = kiln_adamw_defaults();
        o.master_weights = true;
        kiln_optimizer *opt = kiln_adam_new(m, o);
        KT_CHECK(step_with(opt, w, 0) == KILN_OK && step_with(opt, w, 1) == KILN_OK);
        read_doubles(w, p_before);
        double s_before[3][N], s_after[3][N];
        for (int k = 0; k < 3; k++) KT_CHECK(read_state(opt, k - 1, s_before[k]));
        long nb = save_bytes(m, opt, before, sizeof before);
        int64_t steps = kiln_optimizer_steps(opt);
        int line;
        kiln_status st, sync;
        if (how == 0) {
            kiln__debug_fail_next_kernel("kiln_optimizer_step");
            line = __LINE__ + 1;
            st = step_with(opt, w, 2);
            sync = kiln_sync();
            KT_CHECK_MSG(st == KILN_ERR_KERNEL || sync == KILN_ERR_KERNEL, "step %s, sync %s", kiln_status_str(st),
                         kiln_status_str(sync));
            line = 0; /* the update names the step's caller: step_with's line */
        } else { /* a gradient that fails while it is computed: an index out of range */
            int64_t bad = 99;
            kiln_grads *g = NULL;
            kiln_tensor all = kiln_ones(KILN_CPU, KILN_BF16, KILN_SHAPE(N));
            kiln_tensor at = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(1), &bad);
            line = __LINE__ + 1; /* (one line: gcc and clang name different lines of a call spanning two) */
            kiln_tensor x = kiln_index_select(all, 0, at);
            st = kiln_backward(kiln_sum(kiln_mul(kiln_ref(w), x)), &g);
            if (st == KILN_OK) st = kiln_optimizer_step(opt, g);
            kiln_grads_free(g);
            KT_EXPECT_ERROR(KILN_ERR_INDEX, "kiln_index_select", line);
            KT_CHECK(kiln_sync() == KILN_OK);
        }
        read_doubles(w, p_after);
        KT_CHECK(memcmp(p_before, p_after, sizeof p_before) == 0);
        for (int k = 0; k < 3; k++) KT_CHECK(read_state(opt, k - 1, s_after[k]));
        KT_CHECK_MSG(memcmp(s_before, s_after, sizeof s_before) == 0, "how %d: master or state changed by a failed step",
                     how);
        /* a step refused at once changes nothing at all (a kernel that fails later is
         * counted as a step, as for f32 parameters: the step had been queued) */
        long na = save_bytes(m, opt, after, sizeof after);
        if (how == 1) KT_CHECK(kiln_optimizer_steps(opt) == steps && na == nb && memcmp(before, after, (size_t)nb) == 0);
        KT_CHECK(step_with(opt, w, 2) == KILN_OK);
        read_doubles(w, p_after);
        KT_CHECK(memcmp(p_before, p_after, sizeof p_before) != 0);
        kiln_optimizer_free(opt);
        kiln_module_free(m);
    }
}

/* A checkpoint saves the master and loads it bit-exactly: two optimizers, one restored from
 * the other's file, take identical further steps. */
KT_TEST(checkpoint_carries_the_master_bit_exactly) {
    double v0[N], zeros[N] = {0}, a[N], b[N];
    for (int i = 0; i < N; i++) v0[i] = start_value(i);
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_optim_lowp_ck_%d.safetensors", (int)getpid());
    for (int k = 0; k < N_KINDS; k++) {
        kiln_module *ma = toy_new(KILN_BF16, v0), *mb = toy_new(KILN_BF16, zeros);
        kiln_tensor wa = W(ma), wb = W(mb);
        kiln_optimizer *oa = make_opt((kind)k, ma, true), *ob = make_opt((kind)k, mb, true);
        for (int s = 0; s < 3; s++) KT_CHECK(step_with(oa, wa, s) == KILN_OK);
        KT_CHECK(kiln_checkpoint_save(path, ma, oa) == KILN_OK);
        KT_CHECK_MSG(kiln_checkpoint_load(path, mb, ob) == KILN_OK, "%s", kiln_last_error());
        KT_CHECK(read_master(oa, a) && read_master(ob, b) && memcmp(a, b, sizeof a) == 0);
        for (int s = 3; s < 5; s++) KT_CHECK(step_with(oa, wa, s) == KILN_OK && step_with(ob, wb, s) == KILN_OK);
        read_doubles(wa, a), read_doubles(wb, b);
        KT_CHECK_MSG(memcmp(a, b, sizeof a) == 0, "%s: parameters differ after the restore", kind_names[k]);
        KT_CHECK(read_master(oa, a) && read_master(ob, b) && memcmp(a, b, sizeof a) == 0);
        /* an optimizer without master weights cannot take the file (its f32 master is extra) */
        kiln_module *m32 = toy_new(KILN_F32, zeros);
        kiln_optimizer *o32 = make_opt((kind)k, m32, false);
        KT_CHECK(kiln_checkpoint_load(path, m32, o32) != KILN_OK);
        kiln_optimizer_free(o32), kiln_module_free(m32);
        kiln_optimizer_free(oa), kiln_optimizer_free(ob);
        kiln_module_free(ma), kiln_module_free(mb);
    }
    remove(path);
}

/* A parameter written since the last step (weights loaded without the optimizer) is the new
 * truth: the next step starts its master from the loaded values instead of writing the old
 * master back over them, on the in-place path and on data parallelism's copy path alike. */
KT_TEST(weights_loaded_without_the_optimizer_win_over_the_master) {
    double v0[N], v1[N], ref[N], p[N], m[N];
    for (int i = 0; i < N; i++) v0[i] = start_value(i), v1[i] = start_value(i + 5) / 2;
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_optim_lowp_w_%d.safetensors", (int)getpid());
    kiln_module *other = toy_new(KILN_BF16, v1);
    KT_CHECK(kiln_checkpoint_save(path, other, NULL) == KILN_OK);
    for (int late = 0; late < 2; late++) {
        /* the reference: a fresh optimizer whose first step starts from v1 */
        kiln_module *mr = toy_new(KILN_BF16, v1);
        kiln_optimizer *orf = make_opt(ADAM, mr, true);
        KT_CHECK(step_late(orf, W(mr), 3, late) == KILN_OK);
        read_doubles(W(mr), ref);
        kiln_module *mm = toy_new(KILN_BF16, v0);
        kiln_optimizer *opt = make_opt(ADAM, mm, true);
        for (int s = 0; s < 3; s++) KT_CHECK(step_late(opt, W(mm), s, late) == KILN_OK);
        KT_CHECK_MSG(kiln_checkpoint_load(path, mm, NULL) == KILN_OK, "%s", kiln_last_error());
        read_doubles(W(mm), p);
        for (int i = 0; i < N; i++) KT_CHECK(p[i] == v1[i]);
        KT_CHECK(step_late(opt, W(mm), 3, late) == KILN_OK);
        read_doubles(W(mm), p);
        KT_CHECK(read_master(opt, m));
        for (int i = 0; i < N; i++) {
            /* one step from v1 (Adam's moments carry the earlier steps: near, not equal, to ref) */
            KT_CHECK_MSG(fabs(p[i] - v1[i]) <= 0.02 + 1e-6 && fabs(p[i] - ref[i]) <= 0.03,
                         "late %d [%d]: %.6g after the load of %.6g (ref %.6g)", late, i, p[i], v1[i], ref[i]);
            KT_CHECK(p[i] == round_to(KILN_BF16, m[i]));
        }
        /* and a step with nothing written in between keeps the master's own bits */
        double m_before[N];
        memcpy(m_before, m, sizeof m);
        KT_CHECK(step_late(opt, W(mm), 4, late) == KILN_OK);
        KT_CHECK(read_master(opt, m));
        int kept_fraction = 0;
        for (int i = 0; i < N; i++) kept_fraction += m[i] != round_to(KILN_BF16, m[i]);
        KT_CHECK_MSG(kept_fraction > 0, "late %d: the master lost its bits below bf16 (re-made from the parameter)", late);
        kiln_optimizer_free(orf), kiln_optimizer_free(opt);
        kiln_module_free(mr), kiln_module_free(mm);
    }
    kiln_module_free(other);
    remove(path);
}

/* A parameter exported through DLPack can be written by its consumer behind the engine (no
 * write stamp): the element it wrote wins over the master, every other element keeps the
 * master's bits below bf16. */
KT_TEST(elements_written_through_dlpack_win_over_the_master) {
#ifdef HAVE_DLPACK
    double v0[N], p[N], m[N];
    for (int i = 0; i < N; i++) v0[i] = start_value(i);
    for (int late = 0; late < 2; late++) {
        kiln_module *mm = toy_new(KILN_BF16, v0);
        kiln_optimizer *opt = make_opt(ADAM, mm, true);
        for (int s = 0; s < 3; s++) KT_CHECK(step_late(opt, W(mm), s, late) == KILN_OK);
        struct DLManagedTensor *dl = NULL;
        KT_CHECK_MSG(kiln_to_dlpack(kiln_ref(W(mm)), &dl) == KILN_OK, "%s", kiln_last_error());
        if (!dl) break;
        uint16_t *data = (uint16_t *)((char *)dl->dl_tensor.data + dl->dl_tensor.byte_offset);
        data[2] = kiln__f32_to_bf16(3.5f); /* the consumer resets one element */
        dl->deleter(dl);
        KT_CHECK_MSG(step_late(opt, W(mm), 3, late) == KILN_OK, "%s", kiln_last_error());
        read_doubles(W(mm), p);
        KT_CHECK(read_master(opt, m));
        KT_CHECK_MSG(fabs(p[2] - 3.5) <= 0.02 + 1e-6, "late %d: the written 3.5 became %.6g (the master's old value won)", late, p[2]);
        int kept_fraction = 0;
        for (int i = 0; i < N; i++) {
            KT_CHECK(p[i] == round_to(KILN_BF16, m[i]));
            kept_fraction += i != 2 && m[i] != round_to(KILN_BF16, m[i]);
        }
        KT_CHECK_MSG(kept_fraction > 0, "late %d: the other elements lost their bits below bf16", late);
        kiln_optimizer_free(opt);
        kiln_module_free(mm);
    }
#endif
}

/* Clipping and the gradient scaler take the bf16 gradients of master-weighted parameters. */
KT_TEST(clipping_works_on_low_precision_gradients) {
    double v0[N], p[N], m[N];
    for (int i = 0; i < N; i++) v0[i] = start_value(i);
    kiln_tensor w = leaf_of(KILN_BF16, v0), w32 = leaf_of(KILN_F32, v0);
    kiln_optimizer *opt = kiln_sgd_new_groups(
        2, (kiln_param_group[]){kiln_param_group_of(1, &w), kiln_param_group_of(1, &w32)},
        (kiln_sgd_options){.lr = 0.5, .master_weights = true});
    KT_CHECK(opt != NULL);
    kiln_tensor ones = kiln_ones(KILN_CPU, KILN_BF16, KILN_SHAPE(N)), ones32 = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(N));
    kiln_grads *g = NULL;
    kiln_tensor loss = kiln_add(kiln_sum(kiln_mul(kiln_ref(w), ones)),
                                kiln_cast(kiln_sum(kiln_mul(kiln_ref(w32), ones32)), KILN_BF16));
    KT_CHECK_MSG(kiln_backward(loss, &g) == KILN_OK, "%s", kiln_last_error());
    kiln_tensor norm = KILN_NONE;
    KT_CHECK_MSG(kiln_clip_grad_norm(opt, g, 1.0, &norm) == KILN_OK, "%s", kiln_last_error());
    double total = 0;
    KT_CHECK(kiln_into_data(kiln_cast(norm, KILN_F64), &total, sizeof total) == KILN_OK);
    KT_NEAR(total, 4.0, 1e-6); /* 16 ones */
    KT_CHECK_MSG(kiln_optimizer_step(opt, g) == KILN_OK, "%s", kiln_last_error());
    kiln_grads_free(g);
    KT_CHECK(read_master(opt, m));
    read_doubles(w, p);
    for (int i = 0; i < N; i++) {
        KT_NEAR(m[i], v0[i] - 0.5 * 0.25, 1e-3); /* the gradient 1 scaled to 1/4 (bf16 scale) */
        KT_CHECK(p[i] == round_to(KILN_BF16, m[i]));
    }
    kiln_optimizer_free(opt);
    kiln_release(w), kiln_release(w32);
}

/* f16 with loss scaling: a gradient of 2^-26 per element is below f16's smallest subnormal
 * (2^-24); scaled by 2^16 it is representable, and the scaler unscales a master-weighted
 * parameter's gradient in f32, so the master moves by exactly lr * 2^-26 (unscaled in f16 it
 * would flush to 0 again). A step with an inf gradient is skipped and changes nothing. */
KT_TEST(f16_loss_scaling_reaches_the_master) {
    double v0[N], m[N], p[N];
    for (int i = 0; i < N; i++) v0[i] = 1.0 / 1024;
    kiln_module *mod = toy_new(KILN_F16, v0);
    kiln_optimizer *opt = kiln_sgd_new(mod, (kiln_sgd_options){.lr = 1.0, .master_weights = true});
    kiln_grad_scaler *gs = kiln_grad_scaler_new(kiln_grad_scaler_defaults()); /* scale 2^16 */
    KT_CHECK(opt && gs);
    for (int s = 0; s < 2 && opt && gs; s++) {
        double tiny = ldexp(1.0, -26), huge = s == 1 ? INFINITY : tiny;
        kiln_tensor c = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(N), s == 1 ? huge : tiny);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(kiln_grad_scaler_scale(gs, kiln_sum(kiln_mul(kiln_ref(W(mod)), c))), &g) == KILN_OK);
        bool stepped = false;
        KT_CHECK_MSG(kiln_grad_scaler_step(gs, opt, g, &stepped) == KILN_OK, "%s", kiln_last_error());
        KT_CHECK(stepped == (s == 0));
        kiln_grads_free(g);
        KT_CHECK(read_master(opt, m));
        read_doubles(W(mod), p);
        for (int i = 0; i < N; i++) {
            KT_CHECK_MSG(m[i] == 1.0 / 1024 - tiny, "step %d: master %.12g", s, m[i]);
            KT_CHECK(p[i] == round_to(KILN_F16, m[i]));
        }
    }
    KT_CHECK(kiln_grad_scaler_get_scale(gs) == 32768); /* backed off once */
    kiln_grad_scaler_free(gs);
    kiln_optimizer_free(opt);
    kiln_module_free(mod);
}

KT_TEST(low_precision_parameters_without_the_option_are_refused) {
    double v0[N] = {0};
    kiln_tensor w = leaf_of(KILN_BF16, v0), h = leaf_of(KILN_F16, v0);
    int line = __LINE__ + 1;
    kiln_optimizer *opt = kiln_adam_new_params(1, &w, kiln_adam_defaults());
    KT_CHECK(opt == NULL);
    KT_EXPECT_ERROR(KILN_ERR_DTYPE, "master_weights", line);
    KT_EXPECT_ERROR(KILN_ERR_DTYPE, "kiln_adam_new_params", line);
    kiln_module *m = toy_new(KILN_BF16, v0);
    line = __LINE__ + 1;
    opt = kiln_adagrad_new(m, kiln_adagrad_defaults());
    KT_CHECK(opt == NULL);
    KT_EXPECT_ERROR(KILN_ERR_DTYPE, "parameter 'w' is bf16", line);
    kiln_module_free(m);
    line = __LINE__ + 1;
    opt = kiln_sgd_new_params(1, &h, kiln_sgd_defaults());
    KT_CHECK(opt == NULL);
    KT_EXPECT_ERROR(KILN_ERR_DTYPE, "is f16", line);
    kiln_release(w), kiln_release(h);
}

int main(void) {
    kt_mem_begin();
    KT_RUN(bf16_master_follows_the_f32_run_exactly);
    KT_RUN(f16_master_follows_the_f32_run_exactly);
    KT_RUN(updates_below_bf16_spacing_accumulate_in_the_master);
    KT_RUN(a_failed_step_changes_nothing);
    KT_RUN(late_gradients_give_the_same_masters);
    KT_RUN(checkpoint_carries_the_master_bit_exactly);
    KT_RUN(weights_loaded_without_the_optimizer_win_over_the_master);
    KT_RUN(elements_written_through_dlpack_win_over_the_master);
    KT_RUN(clipping_works_on_low_precision_gradients);
    KT_RUN(f16_loss_scaling_reaches_the_master);
    KT_RUN(low_precision_parameters_without_the_option_are_refused);
    KT_MEM_CHECK();
    return kt_finish();
}
