/* LSTM and GRU layers (torch.nn.LSTM / torch.nn.GRU: several layers, bidirectional, dropout
 * between layers), composed from differentiable ops so autodiff runs backward through time.
 * Per layer l (and direction: the reverse one's names end in _reverse), PyTorch's parameters
 * and gate order:
 *
 *   weight_ih_l{l} [G H, in], weight_hh_l{l} [G H, H], bias_ih_l{l}, bias_hh_l{l} [G H]
 *   LSTM (G = 4: i, f, g, o)  c' = f c + i g,  h' = o tanh(c')   (i, f, o sigmoid; g tanh)
 *   GRU  (G = 3: r, z, n)     n = tanh(W_in x + b_in + r (W_hn h + b_hn)),  h' = (1 - z) n + z h
 *
 * The input projection of every time step is one matmul over the whole sequence; the loop
 * then adds the hidden projection step by step. A bidirectional layer runs a second pass from
 * the last step back and concatenates the two outputs' features; in training mode, dropout
 * masks each layer's output but the last. */
#include <math.h>
#include <stdlib.h>

#include "kiln/tensor.h"
#include "nn/layers-impl.h"

typedef struct {
    kiln_rnn_options o;
    bool lstm;
    int dirs;                  /* 1, or 2 when bidirectional */
    uint64_t seed, calls;      /* dropout masks: stream `calls` of seed */
} rnn_state;

static kiln_tensor rnn_module_forward(kiln_module *m, kiln_tensor x);
static const kiln__module_vtable lstm_vt = {"LSTM", rnn_module_forward, NULL};
static const kiln__module_vtable gru_vt = {"GRU", rnn_module_forward, NULL};

kiln_rnn_options kiln_rnn_defaults(int64_t input_size, int64_t hidden_size) {
    return (kiln_rnn_options){.input_size = input_size, .hidden_size = hidden_size, .num_layers = 1, .bias = true};
}

/* PyTorch initialises every weight and bias uniform in +-1/sqrt(hidden_size). */
static kiln_module *rnn_new(const kiln__module_vtable *vt, const char *op, kiln_rnn_options o, uint64_t seed) {
    if (o.input_size < 1 || o.hidden_size < 1 || o.num_layers < 1 || o.num_layers > 32 ||
        o.input_size > ((int64_t)1 << 30) || o.hidden_size > ((int64_t)1 << 28))
        return kiln__nn_bad_arg(op, "input_size (%lld), hidden_size (%lld) and num_layers (%d, at most 32) must be "
                                ">= 1", (long long)o.input_size, (long long)o.hidden_size, o.num_layers);
    if (!(o.dropout >= 0 && o.dropout < 1))
        return kiln__nn_bad_arg(op, "dropout %g must lie in [0, 1)", o.dropout);
    bool lstm = vt == &lstm_vt;
    int dirs = o.bidirectional ? 2 : 1;
    kiln_module *m = kiln__module_new(vt, sizeof(rnn_state));
    if (!m) return NULL;
    *(rnn_state *)m->state = (rnn_state){o, lstm, dirs, kiln__nn_seed(seed, 1u << 20), 0};
    int64_t h = o.hidden_size, g = (lstm ? 4 : 3) * h;
    double bound = 1.0 / sqrt((double)h);
    for (int ld = 0; ld < o.num_layers * dirs && m; ld++) {
        int l = ld / dirs;
        char names[4][32];
        const char *kinds[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
        kiln__nn_param ps[4];
        int np = o.bias ? 4 : 2;
        for (int i = 0; i < np; i++) {
            snprintf(names[i], sizeof names[i], "%s_l%d%s", kinds[i], l, ld % dirs ? "_reverse" : "");
            kiln_shape s = i == 0 ? KILN_SHAPE(g, l ? dirs * h : o.input_size) : i == 1 ? KILN_SHAPE(g, h) : KILN_SHAPE(g);
            uint64_t k = (uint64_t)(4 * ld + i);
            kiln_tensor v = kiln_uniform(KILN_CPU, KILN_F32, s, -bound, bound, kiln__nn_seed(seed, k));
            ps[i] = (kiln__nn_param){names[i], v, false};
        }
        m = kiln__nn_finish(m, np, ps);
    }
    return m;
}

kiln_module *kiln_lstm_new(kiln_rnn_options o, uint64_t seed) { return rnn_new(&lstm_vt, "kiln_lstm_new", o, seed); }
kiln_module *kiln_gru_new(kiln_rnn_options o, uint64_t seed) { return rnn_new(&gru_vt, "kiln_gru_new", o, seed); }

/* Parameter i (weight_ih, weight_hh, bias_ih, bias_hh) of layer-and-direction ld. */
static kiln_tensor param(kiln_module *m, const kiln_rnn_options *o, int ld, int i) {
    if (i >= 2 && !o->bias) return KILN_NONE;
    return kiln_ref(m->params[ld * (o->bias ? 4 : 2) + i].tensor);
}

/* Entry `layer` of an initial state [layers * dirs, N, H] (borrowed), or zeros. */
static kiln_tensor initial(kiln_tensor s, int layer, int64_t n, int64_t h, kiln_dtype dt, kiln_device dev) {
    if (s.id == KILN_NONE.id) return kiln_zeros(dev, dt, KILN_SHAPE(n, h));
    return kiln_squeeze(kiln_narrow(kiln_ref(s), 0, layer, 1), 0);
}

/* After a split or chunk that gave `got` of n pieces: a failed one gives one poisoned piece,
 * which the missing ones share, so the error flows on and every piece is released once. */
static void pieces(int got, kiln_tensor *out, int n) {
    for (int i = got; i < n; i++) out[i] = kiln_ref(out[0]);
}

/* One direction of layer-and-direction ld over x [T, N, in] (consumed), from the last step
 * back when reverse: its outputs [T, N, H] in time order; *h and *c (LSTM) hold the initial
 * state on entry (consumed) and the final one on return. */
static kiln_tensor run_layer(kiln_module *m, const rnn_state *st, int ld, bool reverse, kiln_tensor x,
                             int64_t t_len, kiln_tensor *h, kiln_tensor *c) {
    const kiln_rnn_options *o = &st->o;
    int gates = st->lstm ? 4 : 3;
    kiln_tensor *steps = malloc(sizeof(kiln_tensor) * (size_t)t_len * 2);
    if (!steps)
        return kiln__nn_fail(st->lstm ? "kiln_lstm" : "kiln_gru", 1, &x, KILN_ERR_OUT_OF_MEMORY,
                             "no memory for %lld time steps", (long long)t_len);
    kiln_tensor *outs = steps + t_len;
    kiln_tensor gi = kiln_linear(x, param(m, o, ld, 0), param(m, o, ld, 2)); /* [T, N, G H] */
    pieces(kiln_split(gi, 1, 0, steps, (int)t_len), steps, (int)t_len);
    for (int64_t step = 0; step < t_len; step++) {
        int64_t t = reverse ? t_len - 1 - step : step;
        kiln_tensor a = kiln_squeeze(steps[t], 0);
        kiln_tensor b = kiln_linear(kiln_ref(*h), param(m, o, ld, 1), param(m, o, ld, 3));
        kiln_tensor ga[4], gb[4];
        if (st->lstm) {
            pieces(kiln_chunk(kiln_add(a, b), gates, 1, ga, gates), ga, gates);
            kiln_tensor i = kiln_sigmoid(ga[0]), f = kiln_sigmoid(ga[1]), g = kiln_tanh(ga[2]);
            kiln_tensor og = kiln_sigmoid(ga[3]);
            *c = kiln_add(kiln_mul(f, *c), kiln_mul(i, g));
            kiln_release(*h);
            *h = kiln_mul(og, kiln_tanh(kiln_ref(*c)));
        } else {
            pieces(kiln_chunk(a, gates, 1, ga, gates), ga, gates);
            pieces(kiln_chunk(b, gates, 1, gb, gates), gb, gates);
            kiln_tensor r = kiln_sigmoid(kiln_add(ga[0], gb[0])), z = kiln_sigmoid(kiln_add(ga[1], gb[1]));
            kiln_tensor nn = kiln_tanh(kiln_add(ga[2], kiln_mul(r, gb[2])));
            /* h' = n + z (h - n) */
            kiln_tensor diff = kiln_sub(*h, kiln_ref(nn));
            *h = kiln_add(nn, kiln_mul(z, diff));
        }
        outs[t] = kiln_ref(*h);
    }
    kiln_tensor y = kiln_stack(outs, (int)t_len, 0);
    free(steps);
    return y;
}

typedef struct {
    int64_t t, n;
    kiln_dtype dtype;
    kiln_device dev;
} rnn_dims;

static bool check(const rnn_state *st, const kiln__tensor *x, const kiln__tensor *h0, const kiln__tensor *c0,
                  rnn_dims *d, kiln_status *status, char *msg, size_t size) {
    const kiln_rnn_options *o = &st->o;
    char a[96], b[96];
    kiln__nn_shape_str(a, sizeof a, x);
    const char *layout = o->batch_first ? "[N, T, input_size]" : "[T, N, input_size]";
    *status = KILN_ERR_DTYPE;
    if (!kiln__dtype_is_float(x->dtype))
        return snprintf(msg, size, "input must be floating-point, got %s", kiln_dtype_name(x->dtype)), false;
    *status = KILN_ERR_SHAPE;
    if (x->ndim != 3 || x->shape[2] != o->input_size || x->shape[0] < 1 || x->shape[1] < 1)
        return snprintf(msg, size, "input %s must be %s with input_size %lld and T, N >= 1", a, layout,
                        (long long)o->input_size), false;
    d->t = x->shape[o->batch_first ? 1 : 0], d->n = x->shape[o->batch_first ? 0 : 1];
    d->dtype = x->dtype, d->dev = x->device;
    if (d->t > INT32_MAX)
        return snprintf(msg, size, "input %s has more than 2^31 - 1 time steps", a), false;
    const kiln__tensor *s[2] = {h0, c0};
    for (int i = 0; i < 2; i++) {
        if (!s[i]) continue;
        const char *what = i ? "c0" : "h0";
        if (s[i]->dtype != x->dtype) {
            *status = KILN_ERR_DTYPE;
            return snprintf(msg, size, "%s must have the input's dtype %s, got %s", what, kiln_dtype_name(x->dtype),
                            kiln_dtype_name(s[i]->dtype)), false;
        }
        if (s[i]->ndim != 3 || s[i]->shape[0] != o->num_layers * st->dirs || s[i]->shape[1] != d->n ||
            s[i]->shape[2] != o->hidden_size)
            return snprintf(msg, size, "%s %s must be [num_layers * directions, N, hidden_size] = [%d, %lld, %lld]",
                            what, kiln__nn_shape_str(b, sizeof b, s[i]), o->num_layers * st->dirs, (long long)d->n,
                            (long long)o->hidden_size), false;
    }
    return true;
}

static kiln_tensor rnn_run(const char *op, bool want_lstm, kiln_module *m, kiln_tensor x, kiln_tensor h0,
                           kiln_tensor c0, kiln_tensor *h_n, kiln_tensor *c_n) {
    bool has_h0 = h0.id != KILN_NONE.id, has_c0 = c0.id != KILN_NONE.id;
    kiln_tensor in[3] = {x}; /* the inputs given, for kiln__nn_fail */
    int n = 1;
    if (has_h0) in[n++] = h0;
    if (has_c0) in[n++] = c0;
    const kiln__module_vtable *vt = want_lstm ? &lstm_vt : &gru_vt;
    if (!m || m->vt != vt)
        return kiln__nn_fail(op, n, in, !m ? KILN_ERR_NULL : KILN_ERR_INVALID_ARGUMENT, "module is %s, not a%s %s",
                             kiln_module_type(m), want_lstm ? "n" : "", vt->type);
    rnn_state *st = m->state;
    const kiln__tensor *t[3] = {kiln__nn_peek(x), has_h0 ? kiln__nn_peek(h0) : NULL,
                                has_c0 ? kiln__nn_peek(c0) : NULL};
    if (!t[0] || (has_h0 && !t[1]) || (has_c0 && !t[2]))
        return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "unusable input");
    rnn_dims d;
    kiln_status status;
    char msg[384];
    if (!check(st, t[0], t[1], t[2], &d, &status, msg, sizeof msg)) return kiln__nn_fail(op, n, in, status, "%s", msg);
    const kiln_rnn_options *o = &st->o;
    if (o->batch_first) x = kiln_transpose(x, 0, 1);
    kiln_tensor hs[64], cs[64]; /* final states, [layers * dirs] */
    int n_states = o->num_layers * st->dirs;
    for (int l = 0; l < o->num_layers; l++) {
        if (l > 0 && o->dropout > 0 && m->training) /* between layers, as PyTorch */
            x = kiln_dropout(x, o->dropout, kiln__nn_call_seed(st->seed, &st->calls));
        kiln_tensor outs[2];
        for (int dir = 0; dir < st->dirs; dir++) {
            int ld = l * st->dirs + dir;
            kiln_tensor h = initial(h0, ld, d.n, o->hidden_size, d.dtype, d.dev);
            kiln_tensor c = st->lstm ? initial(c0, ld, d.n, o->hidden_size, d.dtype, d.dev) : KILN_NONE;
            outs[dir] = run_layer(m, st, ld, dir == 1, dir + 1 < st->dirs ? kiln_ref(x) : x, d.t, &h, &c);
            hs[ld] = h, cs[ld] = c;
        }
        x = st->dirs == 1 ? outs[0] : kiln_cat(outs, 2, 2);
    }
    kiln_release(h0);
    kiln_release(c0);
    if (h_n) *h_n = kiln_stack(hs, n_states, 0);
    if (c_n) *c_n = kiln_stack(cs, n_states, 0);
    for (int i = 0; i < n_states; i++) {
        if (!h_n) kiln_release(hs[i]);
        if (!c_n) kiln_release(cs[i]);
    }
    return o->batch_first ? kiln_transpose(x, 0, 1) : x;
}

kiln_tensor kiln_lstm(kiln_module *m, kiln_tensor x, kiln_tensor h0, kiln_tensor c0, kiln_tensor *h_n,
                      kiln_tensor *c_n) {
    if (h_n) *h_n = KILN_NONE;
    if (c_n) *c_n = KILN_NONE;
    if (m && !KILN__MODULE_LIVE(m)) return kiln__module_refused("kiln_lstm", m, 3, (kiln_tensor[]){x, h0, c0});
    const char *outer = kiln__op_scope_enter("kiln_lstm"); /* the ops inside report as it */
    kiln_tensor y = rnn_run("kiln_lstm", true, m, x, h0, c0, h_n, c_n);
    kiln__op_scope_leave(outer);
    return y;
}

kiln_tensor kiln_gru(kiln_module *m, kiln_tensor x, kiln_tensor h0, kiln_tensor *h_n) {
    if (h_n) *h_n = KILN_NONE;
    if (m && !KILN__MODULE_LIVE(m)) return kiln__module_refused("kiln_gru", m, 2, (kiln_tensor[]){x, h0});
    const char *outer = kiln__op_scope_enter("kiln_gru");
    kiln_tensor y = rnn_run("kiln_gru", false, m, x, h0, KILN_NONE, h_n, NULL);
    kiln__op_scope_leave(outer);
    return y;
}

/* kiln_module_forward: the outputs from zero initial states. */
static kiln_tensor rnn_module_forward(kiln_module *m, kiln_tensor x) {
    const rnn_state *st = m->state;
    return st->lstm ? kiln_lstm(m, x, KILN_NONE, KILN_NONE, NULL, NULL) : kiln_gru(m, x, KILN_NONE, NULL);
}
