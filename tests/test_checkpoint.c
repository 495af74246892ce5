/* Checkpoints: bit-exact round trip of model and optimizer state (training resumed from a
 * checkpoint matches training that never stopped), the file read by Python (safetensors when
 * installed, else a json/struct reference reader) and a file written by Python read back,
 * every truncation and many byte flips rejected with nothing half-loaded, mismatched models
 * and optimizers, missing files, out of memory, bad arguments, and no leaks. Hostile files:
 * FIFOs and devices rejected without blocking, gigabyte files with garbage headers rejected
 * without reading them, 100k-key headers parsed in linear-ish time; and durable saves: the
 * directory synced after the rename, temporaries of saves killed mid-write cleaned up. */
#include <dirent.h>
#include <errno.h>
#include <kiln.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln_test.h"
#include "nn/module-impl.h"
#include "optim/optim-impl.h"
#include "io/safetensors.h"

static char dir[64];

static const char *path_in(const char *name) {
    static char buf[16][256];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static kiln_memory_stats stats(void) { return kiln_memory_stats_get(KILN_CPU); }

/* Every tensor and byte alive at `base` is alive again, and nothing more. */
static void no_leaks(kiln_memory_stats base) {
    kiln_memory_stats now = stats();
    KT_CHECK(now.live_tensors == base.live_tensors);
    KT_CHECK(now.bytes_in_use == base.bytes_in_use);
}

static kiln_module *mlp(uint64_t seed) {
    kiln_module *layers[3] = {kiln_linear_new(3, 5, true, seed), kiln_tanh_new(), kiln_linear_new(5, 2, true, seed + 1)};
    return kiln_sequential_new(3, layers);
}

/* Every parameter's and buffer's bytes, concatenated (malloc'd; *n bytes). */
static unsigned char *snapshot(kiln_module *m, size_t *n) {
    kiln_param ps[32];
    int np = kiln_module_params(m, ps, 32);
    size_t total = 0;
    for (int i = 0; i < np; i++)
        total += (size_t)kiln_tensor_numel(*ps[i].slot) * kiln_dtype_size(kiln_tensor_dtype(*ps[i].slot));
    unsigned char *out = malloc(total + 1), *at = out;
    for (int i = 0; i < np; i++) {
        size_t b = (size_t)kiln_tensor_numel(*ps[i].slot) * kiln_dtype_size(kiln_tensor_dtype(*ps[i].slot));
        KT_CHECK(kiln_into_data(kiln_ref(*ps[i].slot), at, b) == KILN_OK);
        at += b;
    }
    *n = total;
    return out;
}

/* The optimizer's state bytes and counters, concatenated. */
static unsigned char *opt_snapshot(kiln_optimizer *opt, size_t *n) {
    size_t total = 3 * sizeof(double);
    for (int i = 0; i < opt->n_params; i++)
        for (int k = 0; k < KILN__OPTIM_MAX_STATE; k++)
            if (opt->params[i].state[k]) total += (size_t)kiln__tensor_numel(opt->params[i].state[k]) * 4 + 8;
    unsigned char *out = calloc(1, total + 8 * (size_t)opt->n_params), *at = out;
    double head[3] = {(double)opt->steps, opt->groups[0].lr, opt->kind == KILN__OPTIM_ADAM ? opt->adam.beta1 : opt->sgd.momentum};
    memcpy(at, head, sizeof head), at += sizeof head;
    for (int i = 0; i < opt->n_params; i++) {
        memcpy(at, &opt->params[i].step, 8), at += 8;
        for (int k = 0; k < KILN__OPTIM_MAX_STATE; k++) {
            kiln__tensor *s = opt->params[i].state[k];
            if (!s) continue;
            kiln__tensor_retain(s);
            kiln_tensor h = kiln__handle_new(s);
            size_t b = (size_t)kiln__tensor_numel(s) * 4;
            KT_CHECK(kiln_into_data(h, at, b) == KILN_OK);
            at += b + 8;
        }
    }
    *n = (size_t)(at - out);
    return out;
}

static void free_both(kiln_optimizer *oa, kiln_optimizer *ob, kiln_module *a, kiln_module *b) {
    kiln_optimizer_free(oa);
    kiln_optimizer_free(ob);
    kiln_module_free(a);
    kiln_module_free(b);
}

static void same_bytes(unsigned char *a, size_t na, unsigned char *b, size_t nb, const char *what) {
    KT_CHECK_MSG(na == nb && memcmp(a, b, na) == 0, "%s differ", what);
    free(a);
    free(b);
}

typedef struct {
    kiln_tensor x, y;
} batch;

static batch data(uint64_t seed, int64_t in_features) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, in_features), seed);
    kiln_tensor y = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, 2), seed + 100);
    return (batch){x, y};
}

static void train(kiln_module *m, kiln_optimizer *opt, int steps, int first_step, bool clip) {
    for (int s = first_step; s < first_step + steps; s++) {
        kiln_param first;
        kiln_module_params(m, &first, 1); /* the first layer's weight: [out, in] */
        batch b = data((uint64_t)s, kiln_tensor_dim(*first.slot, 1));
        kiln_tensor loss = kiln_mse_loss(kiln_module_forward(m, b.x), b.y);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
        if (clip) KT_CHECK(kiln_clip_grad_norm(opt, g, 0.5, NULL) == KILN_OK);
        kiln_optimizer_set_lr(opt, kiln_lr_cosine(0.05, 0.01, s, 10));
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        kiln_grads_free(g);
    }
}

static kiln_optimizer *make_opt(kiln_module *m, int kind) {
    kiln_sgd_options so = kiln_sgd_defaults();
    so.momentum = 0.9, so.nesterov = true, so.weight_decay = 1e-3;
    kiln_adam_options ao = kind == 1 ? kiln_adam_defaults() : kiln_adamw_defaults();
    ao.weight_decay = 0.02;
    return kind == 0 ? kiln_sgd_new(m, so) : kiln_adam_new(m, ao);
}

KT_TEST(resume_is_bit_exact) {
    kiln_memory_stats base = stats();
    for (int kind = 0; kind < 3; kind++) {
        const char *path = path_in("resume.safetensors");
        kiln_module *a = mlp(1);
        kiln_optimizer *oa = make_opt(a, kind);
        train(a, oa, 3, 0, kind == 2);
        KT_CHECK(kiln_checkpoint_save(path, a, oa) == KILN_OK);
        size_t na, nsa;
        unsigned char *at_save = snapshot(a, &na), *opt_at_save = opt_snapshot(oa, &nsa);
        train(a, oa, 4, 3, kind == 2);

        kiln_module *b = mlp(77); /* other initial values */
        kiln_optimizer *ob = make_opt(b, kind);
        kiln_optimizer_set_lr(ob, 0.5);
        kiln_param ps[8];
        int np = kiln_module_params(b, ps, 8);
        KT_CHECK(np == 4);
        kiln_tensor handles[4];
        void *storage[4];
        for (int i = 0; i < np; i++) {
            handles[i] = *ps[i].slot;
            storage[i] = kiln__handle_peek(handles[i], "test", NULL)->storage->data;
        }
        KT_CHECK(kiln_checkpoint_load(path, b, ob) == KILN_OK);
        size_t nb, nsb;
        unsigned char *loaded = snapshot(b, &nb), *opt_loaded = opt_snapshot(ob, &nsb);
        same_bytes(at_save, na, loaded, nb, "loaded parameters");
        same_bytes(opt_at_save, nsa, opt_loaded, nsb, "loaded optimizer state");
        KT_CHECK(kiln_optimizer_steps(ob) == 3);
        for (int i = 0; i < np; i++) { /* loaded into the very same tensors */
            KT_CHECK(ps[i].slot->id == handles[i].id && kiln_requires_grad(handles[i]));
            KT_CHECK(kiln__handle_peek(handles[i], "test", NULL)->storage->data == storage[i]);
        }
        train(b, ob, 4, 3, kind == 2);
        size_t n1, n2;
        unsigned char *s1 = snapshot(a, &n1), *s2 = snapshot(b, &n2);
        same_bytes(s1, n1, s2, n2, "parameters after resuming");
        free_both(oa, ob, a, b);
    }
    no_leaks(base);
}

/* ---- a module of our own: a buffer, an empty tensor and a 0-d tensor ---------------------- */

static kiln_tensor same_forward(kiln_module *m, kiln_tensor x) { return x; }
static const kiln__module_vtable odd_vt = {"Odd", same_forward, NULL};

static kiln_module *odd_new(kiln_dtype dt, double v) {
    kiln_module *m = kiln__module_new(&odd_vt, 0);
    kiln__module_add_param(m, "w", kiln_full(KILN_CPU, dt, KILN_SHAPE(2, 2), v), false);
    kiln__module_add_param(m, "empty", kiln_zeros(KILN_CPU, dt, KILN_SHAPE(0, 3)), false);
    kiln__module_add_param(m, "scale", kiln_full(KILN_CPU, dt, KILN_SCALAR_SHAPE, v * 2), false);
    kiln__module_add_param(m, "count", kiln_full(KILN_CPU, KILN_I64, KILN_SHAPE(2), v * 3), true);
    return m;
}

KT_TEST(buffers_empty_and_scalar_tensors) {
    kiln_memory_stats base = stats();
    const char *path = path_in("odd.safetensors");
    kiln_module *a = odd_new(KILN_F32, 1.5), *b = odd_new(KILN_F32, -4.0);
    KT_CHECK(kiln_checkpoint_save(path, a, NULL) == KILN_OK);
    KT_CHECK(kiln_checkpoint_load(path, b, NULL) == KILN_OK);
    size_t na, nb;
    unsigned char *sa = snapshot(a, &na), *sb = snapshot(b, &nb);
    same_bytes(sa, na, sb, nb, "parameters and buffers");
    int64_t count[2];
    KT_CHECK(kiln_into_data(kiln_ref(b->params[3].tensor), count, sizeof count) == KILN_OK);
    KT_CHECK(count[0] == 4 && count[1] == 4);
    /* an optimizer never sees the buffer; its state for the empty tensor round-trips too */
    kiln_optimizer *oa = kiln_adam_new(a, kiln_adam_defaults());
    KT_CHECK(oa->n_params == 3);
    kiln_tensor loss = kiln_add(kiln_sum(kiln_ref(a->params[0].tensor)),
                                kiln_add(kiln_sum(kiln_ref(a->params[1].tensor)), kiln_ref(a->params[2].tensor)));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    KT_CHECK(kiln_optimizer_step(oa, g) == KILN_OK);
    kiln_grads_free(g);
    KT_CHECK(kiln_checkpoint_save(path, a, oa) == KILN_OK);
    kiln_optimizer *ob = kiln_adam_new(b, kiln_adam_defaults());
    KT_CHECK(kiln_checkpoint_load(path, b, ob) == KILN_OK);
    KT_CHECK(ob->params[1].state[0] && kiln__tensor_numel(ob->params[1].state[0]) == 0);
    size_t n1, n2;
    unsigned char *o1 = opt_snapshot(oa, &n1), *o2 = opt_snapshot(ob, &n2);
    same_bytes(o1, n1, o2, n2, "optimizer state");
    free_both(oa, ob, a, b);
    no_leaks(base);
}

/* ---- Python reads kiln's file; kiln reads Python's ---------------------------------------- */

static const char *py_script =
    "import json, struct, sys\n"
    "src, out = sys.argv[1], sys.argv[2]\n"
    "def ref_read(p):\n"
    "    b = open(p, 'rb').read()\n"
    "    n = struct.unpack('<Q', b[:8])[0]\n"
    "    h = json.loads(b[8:8 + n].decode('utf-8'))\n"
    "    meta = h.pop('__metadata__', {})\n"
    "    data = b[8 + n:]\n"
    "    res = {}\n"
    "    for k, v in h.items():\n"
    "        s, e = v['data_offsets']\n"
    "        fmt = {'F32': 'f', 'F64': 'd', 'I64': 'q'}[v['dtype']]\n"
    "        cnt = (e - s) // struct.calcsize(fmt)\n"
    "        res[k] = (v['dtype'], v['shape'], list(struct.unpack('<%d%s' % (cnt, fmt), data[s:e])))\n"
    "    return meta, res\n"
    "meta, ref = ref_read(src)\n"
    "assert meta.get('format') == 'pt', meta\n"
    "reader = 'reference reader (json/struct)'\n"
    "doubled = {k: [2 * x for x in v[2]] for k, v in ref.items() if not k.startswith('optim.')}\n"
    "try:\n"
    "    import numpy as np\n"
    "    import safetensors\n"
    "    from safetensors import safe_open\n"
    "    from safetensors.numpy import load_file, save_file\n"
    "except ImportError:\n"
    "    safetensors = None\n"
    "if safetensors is not None:\n"
    "    got = load_file(src)\n"
    "    assert set(got) == set(ref)\n"
    "    with safe_open(src, 'np') as f:\n"
    "        assert f.metadata() == meta\n"
    "    for k, (dt, shape, vals) in ref.items():\n"
    "        assert list(got[k].shape) == shape and got[k].flatten().tolist() == vals, k\n"
    "    reader = 'safetensors ' + safetensors.__version__\n"
    "    try:\n"
    "        import torch\n"
    "        from safetensors.torch import load_file as torch_load\n"
    "        tg = torch_load(src)\n"
    "        for k, (dt, shape, vals) in ref.items():\n"
    "            assert list(tg[k].shape) == shape and tg[k].flatten().tolist() == vals, k\n"
    "        reader += ' + torch ' + torch.__version__\n"
    "    except ImportError:\n"
    "        pass\n"
    "    save_file({k: np.array(v, dtype=np.float32).reshape(ref[k][1]) for k, v in doubled.items()}, out,\n"
    "              metadata={'format': 'pt'})\n"
    "else:\n"
    "    # another layout than kiln's: names in reverse order, data in reverse order, no padding\n"
    "    keys = sorted(doubled, reverse=True)\n"
    "    blobs, header, at = [], {}, 0\n"
    "    for k in reversed(keys):\n"
    "        blob = struct.pack('<%df' % len(doubled[k]), *doubled[k])\n"
    "        header[k] = {'data_offsets': [at, at + len(blob)], 'shape': ref[k][1], 'dtype': 'F32'}\n"
    "        blobs.append(blob)\n"
    "        at += len(blob)\n"
    "    text = json.dumps({k: header[k] for k in keys}).encode()\n"
    "    open(out, 'wb').write(struct.pack('<Q', len(text)) + text + b''.join(blobs))\n"
    "for k in sorted(ref):\n"
    "    dt, shape, vals = ref[k]\n"
    "    print('T', k, dt, ','.join(map(str, shape)) or '-', repr(float(sum(vals))))\n"
    "print('R', reader)\n";

static double param_sum(kiln_tensor t) {
    int64_t n = kiln_tensor_numel(t);
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    KT_CHECK(kiln_into_data(kiln_ref(t), v, sizeof(float) * (size_t)n) == KILN_OK);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += v[i];
    free(v);
    return s;
}

KT_TEST(python_reads_and_writes) {
    const char *py = getenv("KILN_TEST_PYTHON");
    if (!py || !*py) py = "python3";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s -c 'import json, struct' >/dev/null 2>&1", py);
    if (system(cmd) != 0) {
        fprintf(stderr, "  (skipped: no %s)\n", py);
        return;
    }
    const char *src = path_in("for_python.safetensors"), *out = path_in("from_python.safetensors");
    const char *script = path_in("check.py");
    FILE *f = fopen(script, "w");
    KT_CHECK(f != NULL);
    if (!f) return;
    fputs(py_script, f);
    fclose(f);
    kiln_module *m = mlp(5);
    kiln_optimizer *opt = make_opt(m, 1);
    train(m, opt, 2, 0, false);
    KT_CHECK(kiln_checkpoint_save(src, m, opt) == KILN_OK);
    snprintf(cmd, sizeof cmd, "%s %s %s %s", py, script, src, out);
    FILE *p = popen(cmd, "r");
    KT_CHECK(p != NULL);
    if (!p) return;
    char line[512];
    int tensors = 0, matched = 0;
    kiln_param ps[8];
    int np = kiln_module_params(m, ps, 8);
    while (fgets(line, sizeof line, p)) {
        char name[128], dtype[16], shape[64], sum[64];
        if (line[0] == 'R') fprintf(stderr, "  read by %s", line + 2);
        if (sscanf(line, "T %127s %15s %63s %63s", name, dtype, shape, sum) != 4) continue;
        tensors++;
        KT_CHECK(strcmp(dtype, "F32") == 0);
        for (int i = 0; i < np; i++) {
            if (strcmp(ps[i].name, name) != 0) continue;
            matched++;
            KT_CHECK_MSG(strtod(sum, NULL) == param_sum(*ps[i].slot), "%s: python sum %s", name, sum);
        }
    }
    KT_CHECK(pclose(p) == 0);
    KT_CHECK(tensors == np * 3); /* parameters, exp_avg, exp_avg_sq */
    KT_CHECK(matched == np);
    /* the file Python wrote (its own layout, no checksum) loads: parameters doubled */
    double before[4];
    for (int i = 0; i < np; i++) before[i] = param_sum(*ps[i].slot);
    KT_CHECK(kiln_checkpoint_load(out, m, NULL) == KILN_OK);
    for (int i = 0; i < np; i++) KT_CHECK(param_sum(*ps[i].slot) == 2 * before[i]);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
    unlink(script);
    unlink(out);
}

/* ---- damaged files ---------------------------------------------------------------------- */

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    KT_CHECK(fread(b, 1, *n, f) == *n);
    fclose(f);
    return b;
}

static void write_all(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    KT_CHECK(f && fwrite(b, 1, n, f) == n);
    if (f) fclose(f);
}

static bool clear_status(kiln_status st) {
    return st == KILN_ERR_CORRUPT || st == KILN_ERR_IO || st == KILN_ERR_SHAPE || st == KILN_ERR_DTYPE ||
           st == KILN_ERR_UNSUPPORTED;
}

typedef struct {
    kiln_module *m;
    kiln_optimizer *opt;
    const char *good;           /* the undamaged file */
    unsigned char *model, *state; /* the victim now (it differs from the file) */
    size_t n_model, n_state;
    unsigned char *saved;       /* the model as the file holds it */
    size_t n_saved;
    int rejected, accepted;
} victim;

/* Makes the victim differ from the file again, and records it. */
static void diverge(victim *v) {
    train(v->m, v->opt, 1, 1, false);
    free(v->model), free(v->state);
    v->model = snapshot(v->m, &v->n_model);
    v->state = opt_snapshot(v->opt, &v->n_state);
}

/* Loads path. A rejected load must leave model and optimizer exactly as they were; an
 * accepted one (exact: a damage the file shows no sign of, e.g. in a metadata key) must give
 * exactly the saved values. */
static void load_damaged(victim *v, const char *path, bool must_fail, bool exact, const char *what, size_t at) {
    kiln_status st = kiln_checkpoint_load(path, v->m, v->opt);
    if (st == KILN_OK) {
        KT_CHECK_MSG(!must_fail, "%s at %zu loaded", what, at);
        v->accepted++;
        size_t n;
        unsigned char *now = snapshot(v->m, &n);
        KT_CHECK_MSG(!exact || (n == v->n_saved && memcmp(now, v->saved, n) == 0), "%s at %zu: wrong values loaded",
                     what, at);
        free(now);
        KT_CHECK(kiln_checkpoint_load(v->good, v->m, v->opt) == KILN_OK);
        diverge(v);
        return;
    }
    v->rejected++;
    KT_CHECK_MSG(clear_status(st), "%s at %zu: %s", what, at, kiln_status_str(st));
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_checkpoint_load") != NULL, "%s", kiln_last_error());
    size_t n1, n2;
    unsigned char *m = snapshot(v->m, &n1), *s = opt_snapshot(v->opt, &n2);
    KT_CHECK_MSG(n1 == v->n_model && memcmp(m, v->model, n1) == 0, "%s at %zu: model changed", what, at);
    KT_CHECK_MSG(n2 == v->n_state && memcmp(s, v->state, n2) == 0, "%s at %zu: optimizer changed", what, at);
    free(m);
    free(s);
}

KT_TEST(damaged_files_are_rejected) {
    kiln_memory_stats base = stats();
    const char *bad = path_in("damaged.safetensors");
    victim v = {0};
    v.good = path_in("small.safetensors");
    v.m = kiln_linear_new(2, 2, true, 3);
    v.opt = make_opt(v.m, 0);
    train(v.m, v.opt, 1, 0, false);
    KT_CHECK(kiln_checkpoint_save(v.good, v.m, v.opt) == KILN_OK);
    v.saved = snapshot(v.m, &v.n_saved);
    diverge(&v);
    size_t n = 0;
    unsigned char *file = read_all(v.good, &n);
    KT_CHECK(file && n > 200 && n < 2000);
    if (!file) return;
    for (size_t len = 0; len < n; len++) {
        write_all(bad, file, len);
        load_damaged(&v, bad, true, true, "truncated", len);
    }
    static const unsigned char masks[] = {0x01, 0x20, 0x80, 0xFF};
    for (size_t at = 0; at < n; at++)
        for (size_t k = 0; k < sizeof masks; k++) {
            file[at] ^= masks[k];
            write_all(bad, file, n);
            load_damaged(&v, bad, false, true, "flipped", at);
            file[at] ^= masks[k];
        }
    fprintf(stderr, "  with a checksum: %d damaged loads rejected, %d harmless damages loaded the saved values\n",
            v.rejected, v.accepted);
    KT_CHECK(v.accepted < 4 * 12); /* only flips that hide the checksum's own key, or blank to blank */
    unsigned char *longer = malloc(n + 8); /* trailing garbage */
    memcpy(longer, file, n);
    memset(longer + n, 0, 8);
    write_all(bad, longer, n + 8);
    load_damaged(&v, bad, true, true, "extended", n);
    free(longer);

    /* without the checksum (as other programs write), structure is still checked in full;
     * flipped data bytes then load as other values, which is all the format can know */
    char *crc = strstr((char *)file + 8, "\"kiln.crc32\":\"");
    KT_CHECK(crc != NULL);
    if (crc) memset(crc, ' ', strlen("\"kiln.crc32\":\"01234567\","));
    v.rejected = v.accepted = 0;
    for (size_t len = 0; len < n; len++) {
        write_all(bad, file, len);
        load_damaged(&v, bad, true, true, "truncated (no crc)", len);
    }
    for (size_t at = 0; at < n; at++) {
        file[at] ^= 0x5A;
        write_all(bad, file, n);
        load_damaged(&v, bad, false, false, "flipped (no crc)", at);
        file[at] ^= 0x5A;
    }
    fprintf(stderr, "  without: %d rejected, %d loaded\n", v.rejected, v.accepted);
    /* the undamaged file still loads, and gives the saved values */
    write_all(bad, file, n);
    KT_CHECK(kiln_checkpoint_load(bad, v.m, v.opt) == KILN_OK);
    size_t nm;
    unsigned char *now = snapshot(v.m, &nm);
    same_bytes(now, nm, v.saved, v.n_saved, "loaded values");
    free(file);
    free(v.model), free(v.state);
    kiln_optimizer_free(v.opt);
    kiln_module_free(v.m);
    no_leaks(base);
}

/* ---- mismatches ------------------------------------------------------------------------- */

static void expect_rejected(const char *path, kiln_module *m, kiln_optimizer *opt, kiln_status want) {
    size_t n1, n2;
    unsigned char *before = snapshot(m, &n1);
    kiln_status st = kiln_checkpoint_load(path, m, opt);
    KT_CHECK_MSG(st == want, "got %s, want %s (%s)", kiln_status_str(st), kiln_status_str(want), kiln_last_error());
    KT_CHECK(strstr(kiln_last_error(), "kiln_checkpoint_load") && strstr(kiln_last_error(), "test_checkpoint.c"));
    unsigned char *after = snapshot(m, &n2);
    same_bytes(before, n1, after, n2, "parameters after a rejected load");
}

KT_TEST(mismatched_model_or_optimizer) {
    kiln_memory_stats base = stats();
    const char *lin = path_in("lin.safetensors"), *seq = path_in("seq.safetensors");
    kiln_module *l22 = kiln_linear_new(2, 2, true, 1);
    KT_CHECK(kiln_checkpoint_save(lin, l22, NULL) == KILN_OK);
    kiln_module *m = mlp(3);
    kiln_optimizer *adam = make_opt(m, 1);
    train(m, adam, 1, 0, false);
    KT_CHECK(kiln_checkpoint_save(seq, m, adam) == KILN_OK);

    kiln_module *l23 = kiln_linear_new(2, 3, true, 1);
    expect_rejected(lin, l23, NULL, KILN_ERR_SHAPE); /* other shapes */
    kiln_module *l22nb = kiln_linear_new(2, 2, false, 1);
    expect_rejected(lin, l22nb, NULL, KILN_ERR_SHAPE); /* the file has a tensor the model lacks */
    kiln_module *inner[1] = {kiln_linear_new(2, 2, true, 1)};
    kiln_module *wrapped = kiln_sequential_new(1, inner);
    expect_rejected(lin, wrapped, NULL, KILN_ERR_SHAPE); /* other names ("0.weight") */
    kiln_module *bigger = mlp(4);
    kiln_module *layers[2] = {kiln_linear_new(3, 5, true, 1), kiln_tanh_new()};
    kiln_module *smaller = kiln_sequential_new(2, layers);
    expect_rejected(seq, smaller, NULL, KILN_ERR_SHAPE);
    kiln_module *f64 = odd_new(KILN_F64, 1.0), *f32 = odd_new(KILN_F32, 2.0);
    const char *odd = path_in("odd32.safetensors");
    KT_CHECK(kiln_checkpoint_save(odd, f32, NULL) == KILN_OK);
    expect_rejected(odd, f64, NULL, KILN_ERR_DTYPE);

    /* optimizers: another kind, none in the file, or other hyperparameters' state */
    kiln_optimizer *sgd = make_opt(bigger, 0);
    expect_rejected(seq, bigger, sgd, KILN_ERR_SHAPE);
    KT_CHECK(strstr(kiln_last_error(), "adam") != NULL);
    KT_CHECK(kiln_optimizer_steps(sgd) == 0);
    kiln_optimizer *adam2 = make_opt(bigger, 1);
    const char *model_only = path_in("model_only.safetensors");
    KT_CHECK(kiln_checkpoint_save(model_only, m, NULL) == KILN_OK);
    expect_rejected(model_only, bigger, adam2, KILN_ERR_SHAPE);
    /* the model alone loads from a file that also holds optimizer state */
    KT_CHECK(kiln_checkpoint_load(seq, bigger, NULL) == KILN_OK);
    KT_CHECK(kiln_checkpoint_load(seq, bigger, adam2) == KILN_OK);
    KT_CHECK(kiln_optimizer_steps(adam2) == 1);

    kiln_module *mods[] = {l22, l23, l22nb, wrapped, bigger, smaller, f64, f32, m};
    for (size_t i = 0; i < sizeof mods / sizeof mods[0]; i++) kiln_module_free(mods[i]);
    kiln_optimizer_free(sgd);
    kiln_optimizer_free(adam);
    kiln_optimizer_free(adam2);
    no_leaks(base);
}

/* ---- files and arguments ---------------------------------------------------------------- */

static int files_in_dir(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

KT_TEST(files_and_arguments) {
    kiln_memory_stats base = stats();
    kiln_module *m = kiln_linear_new(2, 2, true, 1);
    kiln_optimizer *opt = make_opt(m, 0);
    const char *path = path_in("args.safetensors");
    expect_rejected(path_in("missing.safetensors"), m, NULL, KILN_ERR_IO);
    expect_rejected(dir, m, NULL, KILN_ERR_IO); /* a directory */
    KT_CHECK(kiln_checkpoint_load(NULL, m, NULL) == KILN_ERR_NULL);
    KT_CHECK(strstr(kiln_last_error(), "kiln_checkpoint_load") != NULL);
    KT_CHECK(kiln_checkpoint_load(path, NULL, opt) == KILN_ERR_NULL);
    KT_CHECK(kiln_checkpoint_save(NULL, m, opt) == KILN_ERR_NULL);
    KT_CHECK(strstr(kiln_last_error(), "kiln_checkpoint_save") && strstr(kiln_last_error(), "test_checkpoint.c"));
    KT_CHECK(kiln_checkpoint_save(path, NULL, opt) == KILN_ERR_NULL);
    KT_CHECK(kiln_checkpoint_save(path_in("no/such/dir/x.safetensors"), m, opt) == KILN_ERR_IO);

    /* saving replaces the file whole and leaves nothing else behind */
    int before = files_in_dir();
    KT_CHECK(kiln_checkpoint_save(path, m, opt) == KILN_OK);
    train(m, opt, 1, 0, false);
    KT_CHECK(kiln_checkpoint_save(path, m, opt) == KILN_OK);
    KT_CHECK(files_in_dir() == before + 1);
    kiln_optimizer *fresh = make_opt(m, 0);
    KT_CHECK(kiln_checkpoint_load(path, m, fresh) == KILN_OK && kiln_optimizer_steps(fresh) == 1);
    kiln_optimizer_free(fresh);

    /* a poisoned or stale parameter is reported; no file is written */
    kiln_tensor keep = m->params[0].tensor;
    m->params[0].tensor = kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 2)), KILN_SHAPE(5));
    KT_CHECK(kiln_checkpoint_save(path_in("poisoned.safetensors"), m, NULL) == KILN_ERR_SHAPE);
    KT_CHECK(access(path_in("poisoned.safetensors"), F_OK) != 0);
    kiln_status st = kiln_checkpoint_load(path, m, NULL);
    KT_CHECK_MSG(st == KILN_ERR_SHAPE, "%s", kiln_last_error());
    kiln_release(m->params[0].tensor);
    KT_CHECK(kiln_checkpoint_save(path_in("stale.safetensors"), m, NULL) == KILN_ERR_STALE_HANDLE);
    m->params[0].tensor = keep;
    KT_CHECK(files_in_dir() == before + 1);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
    no_leaks(base);
}

/* Out of memory at any allocation of a load: rejected whole, then it succeeds. */
KT_TEST(load_out_of_memory) {
    kiln_memory_stats base = stats();
    const char *path = path_in("oom.safetensors");
    kiln_module *a = mlp(1);
    kiln_optimizer *oa = make_opt(a, 2);
    train(a, oa, 1, 0, false);
    KT_CHECK(kiln_checkpoint_save(path, a, oa) == KILN_OK);
    kiln_module *b = mlp(2);
    kiln_optimizer *ob = make_opt(b, 2);
    size_t n1, n2;
    unsigned char *model = snapshot(b, &n1), *state = opt_snapshot(ob, &n2);
    kiln_status st = KILN_ERR_OUT_OF_MEMORY;
    int tries = 0;
    for (int n = 1; n < 64 && st != KILN_OK; n++, tries++) {
        kiln_debug_fail_alloc_after(n);
        st = kiln_checkpoint_load(path, b, ob);
        kiln_debug_fail_alloc_after(0);
        if (st == KILN_OK) break;
        KT_CHECK(st == KILN_ERR_OUT_OF_MEMORY);
        size_t m1, m2;
        unsigned char *m = snapshot(b, &m1), *s = opt_snapshot(ob, &m2);
        KT_CHECK(m1 == n1 && memcmp(m, model, n1) == 0);
        KT_CHECK(m2 == n2 && memcmp(s, state, n2) == 0);
        free(m), free(s);
    }
    KT_CHECK(st == KILN_OK && tries > 4);
    free(model), free(state);
    free_both(oa, ob, a, b);
    no_leaks(base);
}

/* ---- hostile files ----------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A FIFO blocked open() forever waiting for a writer; a device never ends. The alarm turns a
 * hang into a failed test. */
KT_TEST(special_files_are_rejected) {
    kiln_module *m = kiln_linear_new(2, 2, true, 1);
    const char *fifo = path_in("fifo.safetensors");
    KT_CHECK(mkfifo(fifo, 0600) == 0);
    alarm(20);
    const char *paths[] = {fifo, "/dev/zero", "/dev/null", dir};
    for (int i = 0; i < 4; i++) {
        int line = __LINE__ + 1;
        KT_CHECK(kiln_checkpoint_load(paths[i], m, NULL) == KILN_ERR_IO);
        KT_EXPECT_ERROR(KILN_ERR_IO, "kiln_checkpoint_load", line);
        KT_EXPECT_ERROR(KILN_ERR_IO, paths[i], 0);
        KT_EXPECT_ERROR(KILN_ERR_IO, "not a regular file", 0);
    }
    /* saving never replaces them: a FIFO stays a FIFO (the same rule keeps /dev/null a device) */
    for (int i = 0; i < 2; i++) {
        const char *to[] = {fifo, dir};
        int line = __LINE__ + 1;
        KT_CHECK(kiln_checkpoint_save(to[i], m, NULL) == KILN_ERR_IO);
        KT_EXPECT_ERROR(KILN_ERR_IO, "kiln_checkpoint_save", line);
        KT_EXPECT_ERROR(KILN_ERR_IO, "not a regular file", 0);
        kiln_tensor t = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
        line = __LINE__ + 1;
        KT_CHECK(kiln_tensors_save(to[i], 1, (const char *[]){"t"}, &t) == KILN_ERR_IO);
        KT_EXPECT_ERROR(KILN_ERR_IO, "kiln_tensors_save", line);
        kiln_release(t);
    }
    struct stat sb;
    KT_CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
    alarm(0);
    unlink(fifo);
    kiln_module_free(m);
}

/* A 1 GiB sparse file whose header is garbage, or whose tensor claims more data than the
 * file holds, is rejected from its header alone: no gigabyte read, allocated or waited for. */
KT_TEST(huge_files_rejected_from_the_header) {
    kiln_module *m = kiln_linear_new(2, 2, true, 1);
    const char *path = path_in("huge.safetensors");
    const long long gib = 1LL << 30;
    char head[256];
    const char *headers[] = {"{\"a\": garbage", /* malformed JSON */
                             "{\"weight\":{\"dtype\":\"F32\",\"shape\":[268435456],\"data_offsets\":[0,1073741824]}}",
                             "{\"weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}"};
    const char *why[] = {"malformed header", "1073741824", "tensors cover 16 bytes"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(headers[k]);
        for (int i = 0; i < 8; i++) head[i] = (char)((uint64_t)n >> (8 * i));
        memcpy(head + 8, headers[k], n);
        KT_CHECK(kt_write_sparse(path, head, 8 + n, gib) == 0);
        double rss = kt_peak_rss_mib(), t0 = now_s();
        KT_CHECK(kiln_checkpoint_load(path, m, NULL) == KILN_ERR_CORRUPT);
        double took = now_s() - t0, grew = kt_peak_rss_mib() - rss;
        KT_EXPECT_ERROR(KILN_ERR_CORRUPT, why[k], 0);
        KT_CHECK_MSG(grew < 64, "header %d: peak memory grew by %.0f MiB", k, grew);
        KT_CHECK_MSG(took < 2, "header %d: took %.2f s", k, took);
    }
    /* a header length that the file cannot hold, and one beyond the format's 100 MB */
    uint64_t lens[] = {(uint64_t)gib, (uint64_t)200 << 20, UINT64_MAX};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 8; i++) head[i] = (char)(lens[k] >> (8 * i));
        KT_CHECK(kt_write_sparse(path, head, 8, k == 1 ? gib : 4096) == 0);
        KT_CHECK(kiln_checkpoint_load(path, m, NULL) == KILN_ERR_CORRUPT);
        KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "header length", 0);
    }
    unlink(path);
    kiln_module_free(m);
}

/* A header of `n` tensors "t<i>" (F32 [1]) and n metadata keys "k<i>"; with dup, the last
 * metadata key repeats an earlier one. Returns the file's bytes (malloc'd; *size). */
static unsigned char *many_keys_file(int n, bool dup, size_t *size) {
    size_t cap = (size_t)n * 96 + 64, len = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(h + len, cap - len, "%s\"k%d\":\"v%d\"", i ? "," : "", dup && i == n - 1 ? n / 2 : i, i);
    len += (size_t)snprintf(h + len, cap - len, "}");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(h + len, cap - len, ",\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}", i,
                                4 * i, 4 * i + 4);
    len += (size_t)snprintf(h + len, cap - len, "}");
    unsigned char *f = calloc(8 + len + 4 * (size_t)n, 1);
    for (int i = 0; i < 8; i++) f[i] = (unsigned char)((uint64_t)len >> (8 * i));
    memcpy(f + 8, h, len);
    free(h);
    *size = 8 + len + 4 * (size_t)n;
    return f;
}

/* The parse's CPU time (this thread's, so a loaded machine or a sanitizer slows both sizes
 * alike) for a file of n distinct keys. */
static double parse_cpu_s(int n) {
    size_t size;
    unsigned char *bytes = many_keys_file(n, false, &size);
    kiln__st_file f;
    char why[256] = "";
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    kiln_status st = kiln__st_parse(bytes, size, &f, why, sizeof why);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    if (st == KILN_OK) kiln__st_free(&f);
    free(bytes);
    return (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
}

/* Checking 100k keys for repeats compared each with all before it (20 s); now sorted. The
 * check is on growth, not on a wall-clock limit: ten times the keys must cost well under the
 * hundred times a quadratic parse would (n log n gives about 12). */
KT_TEST(many_keys_parse_in_n_log_n) {
    const int n = 100000;
    double small = 1e9;
    for (int r = 0; r < 3; r++) {
        double t = parse_cpu_s(n / 10);
        if (t < small) small = t;
    }
    double large = parse_cpu_s(n);
    KT_CHECK_MSG(large < 40 * small + 0.05, "%d keys: %.3f s of CPU, %d keys: %.3f s", n / 10, small, n, large);
    size_t size;
    unsigned char *bytes = many_keys_file(n, false, &size);
    kiln__st_file f;
    char why[256] = "";
    kiln_status st = kiln__st_parse(bytes, size, &f, why, sizeof why);
    KT_CHECK_MSG(st == KILN_OK, "%s", why);
    if (st == KILN_OK) {
        KT_CHECK(f.n_meta == n && f.n_tensors == n);
        int found = 0;
        char name[32];
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "t%d", i);
            const kiln__st_tensor *t = kiln__st_find(&f, name);
            found += t && t->begin == 4u * (unsigned)i;
            snprintf(name, sizeof name, "k%d", i);
            const char *v = kiln__st_meta_get(&f, name);
            snprintf(name, sizeof name, "v%d", i);
            found += v && strcmp(v, name) == 0;
        }
        KT_CHECK(found == 2 * n);
        KT_CHECK(!kiln__st_find(&f, "t100000") && !kiln__st_meta_get(&f, "k-1"));
        kiln__st_free(&f);
    }
    free(bytes);
    bytes = many_keys_file(n, true, &size);
    KT_CHECK(kiln__st_parse(bytes, size, &f, why, sizeof why) == KILN_ERR_CORRUPT);
    KT_CHECK_MSG(strstr(why, "'k50000' appears twice") != NULL, "%s", why);
    free(bytes);
}

/* ---- durable saves ----------------------------------------------------------------------- */

static int dir_syncs, temps_at_dir_sync;

static int count_temporaries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".kiln-tmp-") != NULL;
    if (d) closedir(d);
    return n;
}

static bool is_dir_fd(int fd) {
    struct stat sb;
    return fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int record_fsync(int fd) {
    if (is_dir_fd(fd)) dir_syncs++, temps_at_dir_sync += count_temporaries();
    return fsync(fd);
}

static int fail_dir_fsync(int fd) {
    if (!is_dir_fd(fd)) return fsync(fd);
    errno = EIO;
    return -1;
}

/* The rename itself lives in the directory: without syncing it, a power cut can undo it. */
KT_TEST(save_syncs_the_directory) {
    kiln_module *m = kiln_linear_new(2, 2, true, 1);
    const char *path = path_in("durable.safetensors");
    dir_syncs = temps_at_dir_sync = 0;
    kiln__st_fsync = record_fsync;
    KT_CHECK(kiln_checkpoint_save(path, m, NULL) == KILN_OK);
    KT_CHECK(dir_syncs == 1 && temps_at_dir_sync == 0); /* once, after the rename */
    kiln__st_fsync = fail_dir_fsync;
    int line = __LINE__ + 1;
    KT_CHECK(kiln_checkpoint_save(path, m, NULL) == KILN_ERR_IO);
    KT_EXPECT_ERROR(KILN_ERR_IO, "kiln_checkpoint_save", line);
    KT_EXPECT_ERROR(KILN_ERR_IO, "cannot sync its directory", 0);
    kiln__st_fsync = fsync;
    KT_CHECK(kiln_checkpoint_load(path, m, NULL) == KILN_OK);
    unlink(path);
    kiln_module_free(m);
}

static void die_mid_write(const char *tmp) { raise(SIGKILL); }

/* A child process starts a save to path and is killed after its header is written. */
static void killed_save(const char *path) {
    pid_t pid = fork();
    if (pid == 0) {
        static float big[1 << 16];
        kiln__st_entry e = {"0.weight", KILN_F32, 1, (int64_t[]){1 << 16}, big, sizeof big};
        kiln__st_mid_write = die_mid_write;
        char why[256];
        kiln__st_write(path, &e, 1, NULL, 0, why, sizeof why);
        _exit(0); /* not reached: the hook kills */
    }
    int status = 0;
    KT_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    KT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* Saves killed mid-write leave temporaries and never touch the checkpoint; the next save to
 * the same path removes those whose process is gone, never a live saver's. */
KT_TEST(killed_saves_are_cleaned_up) {
    kiln_module *a = mlp(1), *b = mlp(2), *c = mlp(3);
    const char *path = path_in("killed.safetensors");
    KT_CHECK(kiln_checkpoint_save(path, a, NULL) == KILN_OK);
    size_t na, nb, nc;
    unsigned char *sa = snapshot(a, &na), *sb = snapshot(b, &nb);
    for (int k = 0; k < 3; k++) killed_save(path);
    KT_CHECK(count_temporaries() == 1); /* each killed save removed its dead predecessor's */
    KT_CHECK(kiln_checkpoint_load(path, c, NULL) == KILN_OK); /* still the whole first save */
    unsigned char *sc = snapshot(c, &nc);
    same_bytes(sc, nc, sa, na, "model after killed saves");

    pid_t live = fork(); /* a saver still at work */
    if (live == 0) {
        pause();
        _exit(0);
    }
    char live_tmp[300];
    snprintf(live_tmp, sizeof live_tmp, "%s.kiln-tmp-%ld-0", path, (long)live);
    write_all(live_tmp, (const unsigned char *)"x", 1);
    write_all(path_in("killed.safetensors.kiln-tmp-1-x"), (const unsigned char *)"x", 1); /* not ours */
    KT_CHECK(kiln_checkpoint_save(path, b, NULL) == KILN_OK);
    KT_CHECK(count_temporaries() == 2);
    KT_CHECK(access(live_tmp, F_OK) == 0);
    KT_CHECK(kiln_checkpoint_load(path, c, NULL) == KILN_OK);
    sc = snapshot(c, &nc);
    same_bytes(sc, nc, sb, nb, "model after the next save");
    kill(live, SIGKILL);
    waitpid(live, NULL, 0);
    unlink(live_tmp);
    unlink(path_in("killed.safetensors.kiln-tmp-1-x"));
    unlink(path);
    kiln_module_free(a), kiln_module_free(b), kiln_module_free(c);
}

static void remove_dir(void) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') unlink(path_in(e->d_name));
    if (d) closedir(d);
    rmdir(dir);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/kiln-ckpt-XXXXXX");
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    KT_RUN(resume_is_bit_exact);
    KT_RUN(buffers_empty_and_scalar_tensors);
    KT_RUN(python_reads_and_writes);
    KT_RUN(damaged_files_are_rejected);
    KT_RUN(mismatched_model_or_optimizer);
    KT_RUN(files_and_arguments);
    KT_RUN(load_out_of_memory);
    KT_RUN(special_files_are_rejected);
    KT_RUN(huge_files_rejected_from_the_header);
    KT_RUN(many_keys_parse_in_n_log_n);
    KT_RUN(save_syncs_the_directory);
    KT_RUN(killed_saves_are_cleaned_up);
    remove_dir();
    return kt_finish();
}
