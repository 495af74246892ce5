/* Every row of the optimizer-update table (src/ir/optim_table.h) on every registered device, as
 * tests/test_backend_ops.c runs the op table's rows: each update with every combination of its
 * flags (first step, nesterov, decoupled, centered) and with its momentum and weight decay on
 * and off, in f32 and f64, on a contiguous and a transposed parameter; the parameters are
 * written into the op record from the table's slots (so a slot the kernels read differently
 * fails here), the CPU's results against a double-precision reference of the row's formula, every
 * other device's against the CPU's. SGD's bf16 copy (BF16_COPY) against the f32 result rounded;
 * bad input (wrong tensor counts, shapes, devices, a dtype no kernel takes) fails naming the op.
 * Same switches as test_backend_ops (KILN_TEST_OPS=SGD_UPDATE,ADAM_UPDATE,
 * KILN_TEST_OPS_UNSUPPORTED=1). Runs in well under a second warm. */
#include "backend_ops.h"
#include "ir/optim_params.h"
#include "ops/optim_ops-impl.h"

enum { N = ROWS * COLS, MAX_T = KILN__OP_MAX_OUT + KILN__OP_MAX_IN };

/* Any row's parameter struct, decoded from an op record by the row's own decoder. */
typedef union {
#define MEMBER(NAME, name, ...) kiln__##name name;
    KILN__OPTIM_TABLE(MEMBER)
#undef MEMBER
} any_update;

static void decode_any(const kiln__op *op, any_update *u) {
    switch ((int)op->code) {
#define DECODE(NAME, name, ...) \
    case KILN__OP_##NAME: u->name = kiln__##name##_decode(op); break;
        KILN__OPTIM_TABLE(DECODE)
#undef DECODE
    default: KT_CHECK_MSG(false, "%s is no row", kiln__opcode_name(op->code));
    }
}

/* A case: the row's parameters in an op record (written by the table's slots), and its tensors'
 * values (outs then ins), in double. */
typedef struct {
    const kiln__optim_row *row;
    kiln__op op;
    int n_out, n_in;
    bool off; /* momentum and weight decay 0 */
    double v[MAX_T][N];
} optim_case;

static int field_of(const kiln__optim_row *row, const char *name) {
    for (int i = 0; i < row->n_fields; i++)
        if (strcmp(row->field[i].name, name) == 0) return i;
    return -1;
}

/* The value of a field in the case's op record, read through the table's slot. */
static double P(const optim_case *k, const char *name) {
    int i = field_of(k->row, name);
    KT_CHECK_MSG(i >= 0, "%s has no field %s", k->row->name, name);
    if (i < 0) return NAN;
    int at = k->row->field[i].at;
    switch (k->row->field[i].enc) {
    case KILN__OPTIM_ENC_F: return k->op.p.f[at];
    case KILN__OPTIM_ENC_BITS: return kiln__optim_f64_of_bits(k->op.pi[at]);
    default: return (k->op.pi[KILN__OPTIM_PI_FLAGS] & at) != 0;
    }
}

static void set_field(optim_case *k, int i, double v) {
    int at = k->row->field[i].at;
    switch (k->row->field[i].enc) {
    case KILN__OPTIM_ENC_F: k->op.p.f[at] = v; break;
    case KILN__OPTIM_ENC_BITS: k->op.pi[at] = kiln__optim_f64_bits(v); break;
    default:
        if (v != 0) k->op.pi[KILN__OPTIM_PI_FLAGS] |= at;
    }
}

/* A hyperparameter's test value by its name; off: momentum and weight decay 0 (the kernels'
 * other loops). */
static double hyper(const char *name, bool off, bool decoupled) {
    static const struct {
        const char *name;
        double v;
    } values[] = {{"lr", 0.1},    {"momentum", 0.9},  {"dampening", 0.25}, {"step_size", 0.05},
                  {"beta1", 0.9}, {"beta2", 0.999},   {"eps", 1e-3},       {"sqrt_bias_correction2", 0.3},
                  {"alpha", 0.9}, {"clr", 0.05},      {"initial_accumulator_value", 0.5}};
    if (strcmp(name, "weight_decay") == 0) return off ? 0 : 0.125;
    if (strcmp(name, "momentum") == 0 && off) return 0;
    if (strcmp(name, "weight_decay_term") == 0) return decoupled ? (off ? 1 : 1 - 0.1 * 0.125) : off ? 0 : 0.125;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
        if (strcmp(values[i].name, name) == 0) return values[i].v;
    KT_CHECK_MSG(false, "no test value for the field %s: add one", name);
    return 0;
}

/* ---- the reference: each row's formula in double, and which optional tensors it takes -------- */

typedef struct {
    /* the tensors a case takes (optional ones by its parameters) */
    void (*counts)(const optim_case *k, int *n_out, int *n_in);
    /* the formula over element i: outs are k->v[0..n_out), ins follow */
    void (*update)(optim_case *k, int64_t i);
} row_reference;

static void sgd_counts(const optim_case *k, int *o, int *i) { *o = P(k, "momentum") != 0 ? 2 : 1, *i = 1; }
static void sgd_ref(optim_case *k, int64_t e) {
    bool buf = k->n_out == 2;
    double *p = &k->v[0][e], *b = &k->v[1][e], g = k->v[buf ? 2 : 1][e], mu = P(k, "momentum");
    double d = g + P(k, "weight_decay") * *p;
    if (buf) {
        *b = P(k, "first") ? d : mu * *b + (1 - P(k, "dampening")) * d;
        d = P(k, "nesterov") ? d + mu * *b : *b;
    }
    *p -= P(k, "lr") * d;
}

static void fixed_counts(const optim_case *k, int *o, int *i) { *o = k->row->out_min, *i = k->row->in_min; }
static void adam_ref(optim_case *k, int64_t e) {
    double *p = &k->v[0][e], *m = &k->v[1][e], *v = &k->v[2][e], g = k->v[3][e], t = P(k, "weight_decay_term");
    double x = *p;
    if (P(k, "decoupled")) x *= t;
    else g += t * x;
    double m0 = P(k, "first") ? 0 : *m, v0 = P(k, "first") ? 0 : *v;
    *m = m0 + (1 - P(k, "beta1")) * (g - m0);
    *v = P(k, "beta2") * v0 + (1 - P(k, "beta2")) * g * g;
    *p = x - P(k, "step_size") * (*m / (sqrt(*v) / P(k, "sqrt_bias_correction2") + P(k, "eps")));
}

static void grad_avg_ref(optim_case *k, int64_t e) {
    double *ga = &k->v[0][e], d = k->v[1][e] + P(k, "weight_decay") * k->v[2][e];
    double g0 = P(k, "first") ? 0 : *ga;
    *ga = g0 + (1 - P(k, "alpha")) * (d - g0);
}

static void rmsprop_counts(const optim_case *k, int *o, int *i) {
    *o = P(k, "momentum") != 0 ? 3 : 2, *i = P(k, "centered") ? 2 : 1;
}
static void rmsprop_ref(optim_case *k, int64_t e) {
    bool buf = k->n_out == 3, first = P(k, "first");
    double *p = &k->v[0][e], *sq = &k->v[1][e], *b = &k->v[2][e], alpha = P(k, "alpha");
    double d = k->v[k->n_out][e] + P(k, "weight_decay") * *p;
    *sq = (first ? 0 : alpha * *sq) + (1 - alpha) * d * d;
    double s = *sq;
    if (k->n_in == 2) s -= k->v[k->n_out + 1][e] * k->v[k->n_out + 1][e];
    double avg = sqrt(s) + P(k, "eps");
    if (buf) {
        *b = (first ? 0 : P(k, "momentum") * *b) + d / avg;
        *p -= P(k, "lr") * *b;
    } else {
        *p -= P(k, "lr") * (d / avg);
    }
}

static void adagrad_ref(optim_case *k, int64_t e) {
    double *p = &k->v[0][e], *sum = &k->v[1][e], d = k->v[2][e] + P(k, "weight_decay") * *p;
    *sum = (P(k, "first") ? P(k, "initial_accumulator_value") : *sum) + d * d;
    *p -= P(k, "clr") * (d / (sqrt(*sum) + P(k, "eps")));
}

/* One per row: a row added to the table without one here fails the_table_rows_have_references. */
static const row_reference references[KILN__OPTIM_ROW_COUNT] = {
    [KILN__OPTIM_ROW_SGD_UPDATE] = {sgd_counts, sgd_ref},
    [KILN__OPTIM_ROW_ADAM_UPDATE] = {fixed_counts, adam_ref},
    [KILN__OPTIM_ROW_RMSPROP_GRAD_AVG] = {fixed_counts, grad_avg_ref},
    [KILN__OPTIM_ROW_RMSPROP_UPDATE] = {rmsprop_counts, rmsprop_ref},
    [KILN__OPTIM_ROW_ADAGRAD_UPDATE] = {fixed_counts, adagrad_ref},
};

/* ---- cases ------------------------------------------------------------------------------------ */

/* The variants of a row: one bit per FLAG field, and one more for momentum and decay off. */
static int row_flags(const kiln__optim_row *row) {
    int n = 0;
    for (int i = 0; i < row->n_fields; i++) n += row->field[i].enc == KILN__OPTIM_ENC_FLAG;
    return n;
}

static void make_case(optim_case *k, int r, int variant) {
    memset(k, 0, sizeof *k);
    k->row = &kiln__optim_rows[r];
    k->op.code = (kiln__opcode)k->row->code;
    k->op.flags = KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR; /* not tentative: the optimizers' usual step */
    int flag = 0, n_flags = row_flags(k->row);
    bool off = variant >> n_flags & 1, decoupled = false;
    k->off = off;
    for (int i = 0; i < k->row->n_fields; i++)
        if (k->row->field[i].enc == KILN__OPTIM_ENC_FLAG) {
            bool on = variant >> flag++ & 1;
            set_field(k, i, on);
            decoupled = decoupled || (on && strcmp(k->row->field[i].name, "decoupled") == 0);
        }
    for (int i = 0; i < k->row->n_fields; i++)
        if (k->row->field[i].enc != KILN__OPTIM_ENC_FLAG) set_field(k, i, hyper(k->row->field[i].name, off, decoupled));
    references[r].counts(k, &k->n_out, &k->n_in);
    /* values: the parameter and the inputs in [-2.5, 2.5], the state positive (square sums) */
    for (int t = 0; t < k->n_out + k->n_in; t++)
        fill(k->v[t], N, t == 0 || t >= k->n_out ? KILN__DOMAIN_ANY : KILN__DOMAIN_POS, KILN_F32,
             1000 + 17 * (uint64_t)r + (uint64_t)t);
    /* a centered RMSprop's grad_avg: half its first value at most, so sq - ga^2 stays positive */
    if (k->row->code == KILN__OP_RMSPROP_UPDATE && k->n_in == 2)
        for (int64_t e = 0; e < N; e++) {
            double d = k->v[k->n_out][e] + P(k, "weight_decay") * k->v[0][e];
            k->v[k->n_out + 1][e] = (double)(float)(0.5 * (1 - P(k, "alpha")) * d);
        }
}

static const char *variant_name(const optim_case *k, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s", k->row->name);
    for (int i = 0; i < k->row->n_fields && n < (int)cap; i++)
        if (k->row->field[i].enc == KILN__OPTIM_ENC_FLAG && P(k, k->row->field[i].name))
            n += snprintf(buf + n, cap - (size_t)n, " %s", k->row->field[i].name);
    if (n < (int)cap && k->off) snprintf(buf + n, cap - (size_t)n, " momentum and decay off");
    return buf;
}

/* A tensor of the case's values on dev in dt: contiguous, or (transposed) a [COLS, ROWS] tensor
 * seen transposed, so the kernels' strided loops run. */
static kiln_tensor case_tensor(const double *v, kiln_device dev, kiln_dtype dt, bool transposed) {
    double w[N];
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t c = 0; c < COLS; c++) w[transposed ? c * ROWS + r : r * COLS + c] = v[r * COLS + c];
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, transposed ? KILN_SHAPE(COLS, ROWS) : KILN_SHAPE(ROWS, COLS), w), dt);
    if (dev != KILN_CPU) t = kiln_to_device(t, dev);
    return transposed ? kiln_transpose(t, 0, 1) : t;
}

static kiln_status read_back(kiln_tensor t, double *out) {
    return kiln_into_data(kiln_cast(kiln_to_device(kiln_ref(t), KILN_CPU), KILN_F64), out, sizeof(double) * N);
}

/* Queues the case's op through the ops layer's table-driven submit on handles h (outs, then
 * ins): its status, the dispatch error read as a poisoned result. */
static kiln_status submit(const optim_case *k, const kiln_tensor *h, int n_out, int n_in) {
    KILN__OP_BEGIN(k->row->name);
    kiln__tensor *t[2 * MAX_T] = {0};
    bool ok = true;
    for (int i = 0; i < n_out + n_in; i++) ok = (t[i] = kiln__peek(&c, h[i])) != NULL && ok;
    any_update u;
    decode_any(&k->op, &u);
    if (ok) ok = kiln__t_optim_update(&c, k->op.code, n_out, t, n_in, (const kiln__tensor *const *)t + n_out, &u);
    if (ok) return KILN_OK;
    kiln_tensor y = kiln__result(&c, NULL);
    kiln_status st = kiln_into_data(y, NULL, 0);
    return st;
}

/* Runs the case on dev in dt; outs' values after the update into got. */
static kiln_status run_case(const optim_case *k, kiln_device dev, kiln_dtype dt, bool transposed, double got[][N]) {
    kiln_tensor h[MAX_T];
    for (int t = 0; t < k->n_out + k->n_in; t++) h[t] = case_tensor(k->v[t], dev, dt, transposed);
    kiln_set_call_site(__FILE__, __LINE__);
    kiln_status st = submit(k, h, k->n_out, k->n_in);
    if (st == KILN_OK) st = kiln_sync();
    for (int t = 0; t < k->n_out && st == KILN_OK; t++) st = read_back(h[t], got[t]);
    for (int t = 0; t < k->n_out + k->n_in; t++) kiln_release(h[t]);
    return st;
}

static bool row_selected(int r) { return name_selected(kiln__optim_rows[r].name); }

KT_TEST(the_table_rows_have_references) {
    for (int r = 0; r < KILN__OPTIM_ROW_COUNT; r++)
        KT_CHECK_MSG(references[r].counts && references[r].update, "%s has no reference in %s: add one",
                     kiln__optim_rows[r].name, __FILE__);
}

KT_TEST(updates_match_double_precision_and_the_cpu) {
    bool list = list_unsupported();
    int cases = 0, dev_cases[8] = {0}, unsupported[8] = {0};
    static double want[KILN__OP_MAX_OUT][N], got[KILN__OP_MAX_OUT][N], cpu[KILN__OP_MAX_OUT][N];
    for (int r = 0; r < KILN__OPTIM_ROW_COUNT; r++) {
        if (!row_selected(r) || !references[r].update) continue;
        int variants = 2 << row_flags(&kiln__optim_rows[r]);
        for (int variant = 0; variant < variants; variant++) {
            static optim_case k;
            make_case(&k, r, variant);
            char name[160];
            variant_name(&k, name, sizeof name);
            optim_case ref = k;
            for (int64_t e = 0; e < N; e++) references[r].update(&ref, e);
            for (int t = 0; t < k.n_out; t++) memcpy(want[t], ref.v[t], sizeof want[t]);
            for (int d = 0; d < 2; d++) {
                kiln_dtype dt = d ? KILN_F64 : KILN_F32;
                for (int tr = 0; tr < 2; tr++) {
                    char what[200];
                    snprintf(what, sizeof what, "%s %s%s", name, dtype_str(dt), tr ? " transposed" : "");
                    kiln_status st = run_case(&k, KILN_CPU, dt, tr, cpu);
                    KT_CHECK_MSG(st == KILN_OK, "cpu: %s: %s", what, kiln_last_error());
                    if (st != KILN_OK) continue;
                    cases++;
                    for (int t = 0; t < k.n_out; t++) {
                        double e = nmse(cpu[t], want[t], N), tol = dt == KILN_F64 ? 1e-24 : 1e-11;
                        KT_CHECK_MSG(e <= tol, "cpu: %s: output %d: normalized error %.3g > %.3g against double precision",
                                     what, t, e, tol);
                    }
                    for (int n = 0; other_device(n) != KILN_CPU && n < 8; n++) {
                        kiln_device dev = other_device(n);
                        st = run_case(&k, dev, dt, tr, got);
                        if (!device_case_ran(dev, st, what, list, &unsupported[n])) continue;
                        dev_cases[n]++;
                        for (int t = 0; t < k.n_out; t++) {
                            char out_what[220];
                            snprintf(out_what, sizeof out_what, "%s output %d", what, t);
                            device_case_matches(dev, out_what, dt, nmse(got[t], cpu[t], N), 1);
                        }
                    }
                }
            }
        }
    }
    printf("cpu: %d update cases\n", cases);
    for (int n = 0; other_device(n) != KILN_CPU && n < 8; n++)
        device_summary(other_device(n), "update ", dev_cases[n], unsupported[n], list);
    KT_CHECK(cases > 0 || getenv("KILN_TEST_OPS"));
}

/* x rounded to bf16 (nearest, ties to even) and back, as a cast does; x is finite. */
static double bf16_round(double x) {
    float f = (float)x;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* SGD on an f32 parameter with autocast's bf16 copy as its last output (BF16_COPY, the CPU's):
 * the copy is the updated parameter rounded to bf16. */
KT_TEST(sgd_bf16_copy_is_the_update_rounded) {
    if (!name_selected("SGD_UPDATE")) return;
    for (int variant = 0; variant < 2; variant++) {
        optim_case k;
        make_case(&k, KILN__OPTIM_ROW_SGD_UPDATE, variant ? 1 : 4); /* first, or momentum off */
        kiln_tensor p = case_tensor(k.v[0], KILN_CPU, KILN_F32, false);
        kiln_tensor b = k.n_out == 2 ? case_tensor(k.v[1], KILN_CPU, KILN_F32, false) : KILN_NONE;
        kiln_tensor g = case_tensor(k.v[k.n_out], KILN_CPU, KILN_F32, false);
        kiln_tensor copy = kiln_zeros(KILN_CPU, KILN_BF16, KILN_SHAPE(ROWS, COLS));
        kiln_set_call_site(__FILE__, __LINE__);
        KILN__OP_BEGIN("SGD_UPDATE");
        kiln__tensor *tp = kiln__peek(&c, p), *tb = k.n_out == 2 ? kiln__peek(&c, b) : NULL;
        kiln__tensor *tg = kiln__peek(&c, g), *tc = kiln__peek(&c, copy);
        kiln__sgd_update u = kiln__sgd_update_decode(&k.op);
        KT_CHECK(tp && tg && tc && kiln__t_sgd_update(&c, tp, tb, tg, &u, tc));
        static double pv[N], cv[N];
        KT_CHECK(read_back(p, pv) == KILN_OK && read_back(copy, cv) == KILN_OK);
        int bad = 0;
        for (int64_t e = 0; e < N; e++) bad += cv[e] != bf16_round(pv[e]);
        KT_CHECK_MSG(bad == 0, "variant %d: %d elements of the bf16 copy are not the parameter rounded", variant, bad);
        kiln_release(p), kiln_release(g), kiln_release(copy);
        if (k.n_out == 2) kiln_release(b);
    }
}

/* Wrong tensor counts, a shape or a device that differs from the parameter's fail at the submit
 * naming the row and this file's line; a dtype no kernel takes (bf16 parameters: the optimizers
 * update an f32 master instead) fails when the kernel runs, naming the row too. */
KT_TEST(bad_input_fails_naming_the_op) {
    for (int r = 0; r < KILN__OPTIM_ROW_COUNT; r++) {
        if (!row_selected(r)) continue;
        optim_case k;
        make_case(&k, r, 0);
        /* the case's tensors, then spare ones for a count past the row's */
        kiln_tensor h[2 * MAX_T];
        int n = k.n_out + k.n_in;
        for (int t = 0; t < 2 * MAX_T; t++)
            h[t] = t < n ? case_tensor(k.v[t], KILN_CPU, KILN_F32, false) : kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, COLS));
        char want[96];
        snprintf(want, sizeof want, "%s at", k.row->name);
        /* one output too many (past the row's maximum) and one too few */
        kiln_set_call_site(__FILE__, __LINE__);
        kiln_status st = submit(&k, h, k.row->out_max + 1, k.n_in); /* past op.out too: refused first */
        KT_CHECK_MSG(st == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), want) &&
                         strstr(kiln_last_error(), "test_backend_ops_optim.c"),
                     "%s: too many outputs: %s (%s)", k.row->name, kiln_status_str(st), kiln_last_error());
        kiln_set_call_site(__FILE__, __LINE__);
        st = submit(&k, h, k.row->out_min - 1, k.n_in);
        KT_CHECK_MSG(st == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), want), "%s: too few outputs: %s (%s)",
                     k.row->name, kiln_status_str(st), kiln_last_error());
        /* the gradient of another shape */
        kiln_tensor keep = h[k.n_out];
        h[k.n_out] = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(COLS, ROWS));
        kiln_set_call_site(__FILE__, __LINE__);
        st = submit(&k, h, k.n_out, k.n_in);
        KT_CHECK_MSG(st == KILN_ERR_SHAPE && strstr(kiln_last_error(), want), "%s: a bad shape: %s (%s)", k.row->name,
                     kiln_status_str(st), kiln_last_error());
        kiln_release(h[k.n_out]);
        /* the gradient on another device */
        kiln_device dev = other_device(0);
        if (dev != KILN_CPU) {
            h[k.n_out] = kiln_to_device(kiln_ref(keep), dev);
            kiln_set_call_site(__FILE__, __LINE__);
            st = submit(&k, h, k.n_out, k.n_in);
            KT_CHECK_MSG(st == KILN_ERR_DEVICE && strstr(kiln_last_error(), want), "%s: another device: %s (%s)",
                         k.row->name, kiln_status_str(st), kiln_last_error());
            kiln_release(h[k.n_out]);
        }
        h[k.n_out] = keep;
        /* bf16 tensors: every device refuses them when the kernel runs (the parameters keep their
         * values: an update keeps its outputs on error) */
        for (int d = -1; d < 0 || other_device(d) != KILN_CPU; d++) {
            kiln_device on = d < 0 ? KILN_CPU : other_device(d);
            kiln_tensor b[MAX_T];
            for (int t = 0; t < n; t++) b[t] = kiln_cast(case_tensor(k.v[t], on, KILN_F32, false), KILN_BF16);
            kiln_set_call_site(__FILE__, __LINE__);
            st = submit(&k, b, k.n_out, k.n_in);
            if (st == KILN_OK) st = kiln_sync();
            KT_CHECK_MSG((st == KILN_ERR_DTYPE || st == KILN_ERR_UNSUPPORTED) && strstr(kiln_last_error(), k.row->name),
                         "%s: bf16 on %s: %s (%s)", k.row->name, kiln_device_name(on), kiln_status_str(st), kiln_last_error());
            double v[N];
            st = read_back(b[0], v);
            KT_CHECK_MSG(st == KILN_OK && v[0] == bf16_round(k.v[0][0]), "%s: bf16 on %s: the parameter after: %s %g (%s)",
                         k.row->name, kiln_device_name(on), kiln_status_str(st), v[0], kiln_last_error());
            for (int t = 0; t < n; t++) kiln_release(b[t]);
        }
        /* a tentative update (data parallelism's copies) poisons its outputs instead */
        kiln_tensor b[MAX_T];
        for (int t = 0; t < n; t++) b[t] = kiln_cast(case_tensor(k.v[t], KILN_CPU, KILN_F32, false), KILN_BF16);
        k.op.flags = 0;
        kiln_set_call_site(__FILE__, __LINE__);
        KT_CHECK(submit(&k, b, k.n_out, k.n_in) == KILN_OK);
        for (int t = 0; t < k.n_out; t++) KT_READ_ERROR(kiln_ref(b[t]), KILN_ERR_DTYPE, k.row->name);
        for (int t = 0; t < n; t++) kiln_release(b[t]);
        for (int t = 0; t < 2 * MAX_T; t++) kiln_release(h[t]);
    }
}

int main(void) {
    (void)gc_check; /* backend_ops.h's gradient checks: updates are not differentiable */
    KT_RUN(the_table_rows_have_references);
    KT_RUN(updates_match_double_precision_and_the_cpu);
    KT_RUN(sgd_bf16_copy_is_the_update_rounded);
    KT_RUN(bad_input_fails_naming_the_op);
    return kt_finish();
}
