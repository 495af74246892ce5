/* Tensors to and from safetensors files outside checkpoints: several named tensors
 * (kiln_tensors_save, e.g. a corpus's embeddings), or one (kiln_save_tensor / kiln_load_tensor,
 * PyTorch's torch.save / torch.load of a tensor). Saving goes through a temporary file renamed
 * over the path (safetensors_write.c), so a failed save never leaves a half-written file; loading
 * checks the whole file (header, sizes, offsets, the CRC kiln writes) before it makes a tensor. */
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "kiln/io.h"
#include "ops/ops-impl.h"
#include "ops/optim_ops-impl.h"

/* c's error reported as the thread's last error (if any), and its status. */
static kiln_status finish(kiln__opctx *c) {
    if (!c->err) return KILN_OK;
    kiln_status st = kiln__error_report(c->err);
    kiln__error_unref(c->err);
    c->err = NULL;
    return st;
}

/* The n tensors (borrowed handles) written under names; false + c's error. */
static bool save_named(kiln__opctx *c, const char *path, int n, const char *const *names, const kiln_tensor *tensors) {
    if (!path || (n > 0 && (!names || !tensors)))
        return kiln__fail(c, KILN_ERR_NULL, "%s is NULL", !path ? "path" : !names ? "names" : "tensors"), false;
    if (n < 0) return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "n is %d", n), false;
    kiln__st_entry *entries = calloc((size_t)(n ? n : 1), sizeof *entries);
    void **host = calloc((size_t)(n ? n : 1), sizeof *host);
    if (!entries || !host) kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate %d entries", n);
    for (int i = 0; i < n && !c->err; i++) {
        size_t len = names[i] ? strlen(names[i]) : 0;
        if (!names[i] || !len || len > 127) {
            kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "name %d is %s", i, !names[i] ? "NULL" : !len ? "empty" : "over 127 bytes");
            break;
        }
        for (int k = 0; k < i && !c->err; k++)
            if (strcmp(names[k], names[i]) == 0) kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "name '%s' is repeated", names[i]);
        kiln__tensor *t = c->err ? NULL : kiln__peek(c, tensors[i]);
        if (!t) break;
        size_t nbytes = (size_t)kiln__tensor_numel(t) * kiln__elsize(t->dtype);
        host[i] = malloc(nbytes ? nbytes : 1);
        if (!host[i]) {
            kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes for '%s'", nbytes, names[i]);
            break;
        }
        if (!kiln__t_copy_to_host(c, t, host[i], nbytes)) break;
        entries[i] = (kiln__st_entry){names[i], t->dtype, t->ndim, t->shape, host[i], nbytes};
    }
    if (!c->err) {
        kiln__st_meta meta = {"format", "pt"};
        char why[512];
        kiln_status st = kiln__st_write(path, entries, n, &meta, 1, why, sizeof why);
        if (st != KILN_OK) kiln__fail(c, st, "%s", why);
    }
    for (int i = 0; host && i < n; i++) free(host[i]);
    free(host), free(entries);
    return !c->err;
}

kiln_status kiln_tensors_save(const char *path, int n, const char *const *names, const kiln_tensor *tensors) {
    KILN__OP_BEGIN("kiln_tensors_save");
    save_named(&c, path, n, names, tensors);
    return finish(&c);
}

kiln_status kiln_save_tensor(const char *path, kiln_tensor t) {
    KILN__OP_BEGIN("kiln_save_tensor");
    const char *name = KILN_SAVED_TENSOR_NAME;
    save_named(&c, path, 1, &name, &t);
    return finish(&c);
}

kiln_tensor kiln_load_tensor(const char *path, const char *name, kiln_device dev) {
    KILN__OP_BEGIN("kiln_load_tensor");
    if (!path) return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "path is NULL"));
    kiln__st_file f;
    char why[512];
    kiln_status st = kiln__st_read(path, &f, why, sizeof why);
    if (st != KILN_OK) return kiln__result(&c, kiln__fail(&c, st, "%s", why));
    const kiln__st_tensor *t = NULL;
    if (name) {
        if (!(t = kiln__st_find(&f, name))) kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "'%s' has no tensor '%s'", path, name);
    } else if (f.n_tensors != 1) {
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "'%s' holds %d tensors: name the one to load", path, f.n_tensors);
    } else {
        t = &f.tensors[0];
    }
    if (t && t->kiln_dtype < 0) {
        kiln__fail(&c, KILN_ERR_UNSUPPORTED, "tensor '%s' is %s, which kiln has no dtype for", t->name, t->dtype);
        t = NULL;
    }
    kiln__tensor *out = NULL;
    if (t) {
        kiln_dtype dtype = (kiln_dtype)t->kiln_dtype;
        size_t nbytes = (size_t)(t->end - t->begin);
        const unsigned char *src = f.data + t->begin;
        unsigned char *tmp = NULL;
        if (dtype == KILN_BOOL && nbytes) { /* any non-zero byte is true; kiln's bools are 0 or 1 */
            if (!(tmp = malloc(nbytes))) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot convert a bool tensor");
            for (size_t i = 0; tmp && i < nbytes; i++) tmp[i] = src[i] != 0;
            src = tmp;
        }
        if (!c.err && !kiln__backend_get(dev)) kiln__fail(&c, KILN_ERR_DEVICE, "device %s is not available", kiln_device_name(dev));
        if (!c.err && (out = kiln__t_empty(&c, dev, dtype, t->ndim, t->shape)) && !kiln__t_copy_from_host(&c, out, src, nbytes))
            kiln__tensor_release(out), out = NULL;
        free(tmp);
    }
    kiln__st_free(&f);
    return kiln__result(&c, out);
}
