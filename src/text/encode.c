/* The encoder: special tokens written in the text ("[CLS]", "[MASK]", ... matched byte for byte
 * before any normalisation, as the reference's added tokens are) split it into spans that go
 * through basic tokenization and WordPiece; then [CLS] ... [SEP] around at most max_length
 * ids. The batch encoder pads the texts' ids into the model's three i64 input tensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/tensor.h"
#include "text/text-impl.h"

/* The special token that starts at s (of n bytes left), or NULL. The longest one wins. */
static const kiln__special *special_at(const kiln_tokenizer *tok, const char *s, size_t n) {
    const kiln__special *best = NULL;
    for (int k = 0; k < KILN__SPECIAL_COUNT; k++) {
        const kiln__special *sp = &tok->special[k];
        if (sp->len && sp->len <= n && (!best || sp->len > best->len) && memcmp(s, sp->text, sp->len) == 0)
            best = sp;
    }
    return best;
}

/* The ids of one text into ids (truncated to the tokenizer's max_length); false with the last
 * error set for op. `what` names the text in messages. */
static bool encode_text(const kiln_tokenizer *tok, const char *s, size_t len, kiln__ids *ids, const char *op,
                        const char *what) {
    if (kiln__utf8_check(KILN_ERR_INVALID_ARGUMENT, op, what, s, len) != KILN_OK) return false;
    const kiln_tokenizer_options *o = &tok->o;
    size_t cls = o->add_special_tokens ? 1 : 0, sep = cls;
    /* ids holds [CLS] and the text's ids, of which it keeps (and tokenizes) no more than fit */
    ids->limit = cls + (o->max_length > 0 ? (size_t)o->max_length : (size_t)INT32_MAX) - cls - sep;
    if (cls && !kiln__ids_push(ids, tok->special[KILN__CLS].id, op)) return false;
    size_t span = 0;
    for (size_t at = 0; at < len && ids->n < ids->limit;) {
        const kiln__special *sp = o->match_special_tokens && s[at] == '[' ? special_at(tok, s + at, len - at) : NULL;
        if (!sp) {
            at++;
            continue;
        }
        if (!kiln__basic_tokenize(tok, s + span, at - span, ids, op) || !kiln__ids_push(ids, sp->id, op)) return false;
        at += sp->len, span = at;
    }
    if (ids->n < ids->limit && !kiln__basic_tokenize(tok, s + span, len - span, ids, op)) return false;
    if (ids->n > ids->limit) {
        if (o->max_length == 0)
            return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s has more than %d tokens", what, INT32_MAX), false;
        ids->n = ids->limit; /* truncation keeps the first tokens */
    }
    ids->limit += sep;
    return !sep || kiln__ids_push(ids, tok->special[KILN__SEP].id, op);
}

kiln_status kiln_tokenizer_encode(const kiln_tokenizer *tok, const char *utf8, size_t len, int32_t *ids, int32_t cap,
                                  int32_t *n_out) {
    static const char OP[] = "kiln_tokenizer_encode";
    if (n_out) *n_out = 0;
    if (!tok) return kiln__report(KILN_ERR_NULL, OP, "tokenizer is NULL");
    KILN__OBJECT_OR_RETURN(tok, KILN__TOKENIZER_KIND, OP, kiln_last_status());
    if (!utf8 && len) return kiln__report(KILN_ERR_NULL, OP, "text is NULL (and len %zu)", len);
    if (!n_out) return kiln__report(KILN_ERR_NULL, OP, "n_out is NULL");
    if (cap < 0 || (!ids && cap > 0)) return kiln__report(KILN_ERR_INVALID_ARGUMENT, OP, "ids %p with cap %d", (void *)ids, cap);
    kiln__ids got = {0};
    if (!encode_text(tok, utf8 ? utf8 : "", len, &got, OP, "the text")) {
        free(got.v);
        return kiln_last_status();
    }
    *n_out = (int32_t)got.n;
    kiln_status st = KILN_OK;
    if (got.n > (size_t)cap)
        st = kiln__report(KILN_ERR_BUFFER_SIZE, OP, "the text has %zu tokens, more than cap %d", got.n, cap);
    else if (got.n)
        memcpy(ids, got.v, got.n * sizeof *ids);
    free(got.v);
    return st;
}

void kiln_token_batch_release(kiln_token_batch *b) {
    if (!b) return;
    kiln_tensor *t[3] = {&b->input_ids, &b->attention_mask, &b->token_type_ids};
    for (int k = 0; k < 3; k++) {
        if (t[k]->id) kiln_release(*t[k]);
        *t[k] = KILN_NONE;
    }
}

/* The three tensors from each text's ids; false with the last error set. */
static bool make_batch(const kiln_tokenizer *tok, int64_t n, kiln__ids *each, kiln_token_batch *out, const char *op) {
    size_t longest = 0;
    for (int64_t i = 0; i < n; i++) longest = each[i].n > longest ? each[i].n : longest;
    if ((uint64_t)n > SIZE_MAX / sizeof(int64_t) / (longest ? longest : 1))
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "%lld texts of %zu tokens overflow memory", (long long)n, longest),
               false;
    size_t count = (size_t)n * longest;
    int64_t *idv = malloc(count ? count * sizeof *idv : 1), *mask = malloc(count ? count * sizeof *mask : 1);
    int64_t *types = calloc(count ? count : 1, sizeof *types);
    bool ok = idv && mask && types;
    if (!ok) kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "out of memory for %lld x %zu token ids", (long long)n, longest);
    for (int64_t i = 0; ok && i < n; i++)
        for (size_t k = 0; k < longest; k++) {
            bool real = k < each[i].n;
            idv[(size_t)i * longest + k] = real ? each[i].v[k] : tok->special[KILN__PAD].id;
            mask[(size_t)i * longest + k] = real;
        }
    if (ok) {
        kiln_shape shape = KILN_SHAPE(n, (int64_t)longest);
        out->input_ids = kiln_from_data(KILN_CPU, KILN_I64, shape, idv);
        out->attention_mask = kiln_from_data(KILN_CPU, KILN_I64, shape, mask);
        out->token_type_ids = kiln_from_data(KILN_CPU, KILN_I64, shape, types);
        kiln_tensor t[3] = {out->input_ids, out->attention_mask, out->token_type_ids};
        for (int k = 0; ok && k < 3; k++) /* the error, if any, is the tensor's: make it the call's */
            if (!kiln_is_valid(t[k]) || kiln_tensor_status(t[k]) != KILN_OK) {
                kiln_status st = kiln_is_valid(t[k]) ? kiln_tensor_status(t[k]) : kiln_last_status();
                char why[256]; /* the last error's text is about to be replaced */
                snprintf(why, sizeof why, "%s", kiln_last_error());
                kiln__report(st, op, "cannot make the batch's tensors: %s", why);
                ok = false;
            }
    }
    free(idv), free(mask), free(types);
    return ok;
}

kiln_status kiln_tokenizer_encode_batch(const kiln_tokenizer *tok, int64_t n, const char *const *texts,
                                        const size_t *lens, kiln_token_batch *out) {
    static const char OP[] = "kiln_tokenizer_encode_batch";
    if (!out) return kiln__report(KILN_ERR_NULL, OP, "out is NULL");
    *out = (kiln_token_batch){KILN_NONE, KILN_NONE, KILN_NONE};
    if (!tok) return kiln__report(KILN_ERR_NULL, OP, "tokenizer is NULL");
    KILN__OBJECT_OR_RETURN(tok, KILN__TOKENIZER_KIND, OP, kiln_last_status());
    if (!texts) return kiln__report(KILN_ERR_NULL, OP, "texts is NULL");
    if (n < 1 || (uint64_t)n > SIZE_MAX / sizeof(kiln__ids))
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, OP, "n %lld: 1 text at least", (long long)n);
    kiln__ids *each = calloc((size_t)n, sizeof *each);
    if (!each) return kiln__report(KILN_ERR_OUT_OF_MEMORY, OP, "out of memory for %lld texts", (long long)n);
    bool ok = true;
    for (int64_t i = 0; ok && i < n; i++) {
        char what[48];
        snprintf(what, sizeof what, "texts[%lld]", (long long)i);
        if (!texts[i]) {
            kiln__report(KILN_ERR_NULL, OP, "%s is NULL", what);
            ok = false;
        } else {
            ok = encode_text(tok, texts[i], lens ? lens[i] : strlen(texts[i]), &each[i], OP, what);
        }
    }
    ok = ok && make_batch(tok, n, each, out, OP);
    for (int64_t i = 0; i < n; i++) free(each[i].v);
    free(each);
    if (ok) return KILN_OK;
    kiln_status st = kiln_last_status();
    kiln__site site = kiln__call_site(); /* releasing must not replace the error */
    kiln_token_batch_release(out);
    kiln__site_set(site.file, site.line);
    return st;
}
