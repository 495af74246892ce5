/* libFuzzer target for the tokenizer: each input is text, valid UTF-8 or not, encoded by two
 * tokenizers over a tiny vocabulary built here (uncased with the default 256-token limit; cased
 * with no limit) and as a batch of two texts (the input split in half). Checks what must hold
 * whatever the text: a status, never a crash, and ids within the vocabulary. */
#define _GNU_SOURCE
#include <kiln.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char VOCAB[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\na\n##b\n,\n.\n中\ncafe\n##é\né\nx\n##x\n";

static kiln_tokenizer *make(bool cased) {
    int fd = memfd_create("kiln-fuzz-vocab", MFD_CLOEXEC);
    if (fd < 0 || write(fd, VOCAB, sizeof VOCAB - 1) != (ssize_t)(sizeof VOCAB - 1)) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    kiln_tokenizer_options o = kiln_tokenizer_defaults();
    if (cased) o.lower_case = false, o.max_length = 0, o.max_chars_per_word = 7;
    kiln_tokenizer *tok = kiln_tokenizer_load(path, o);
    close(fd);
    if (!tok) fprintf(stderr, "fuzz_tokenizer: %s\n", kiln_last_error()), abort();
    return tok;
}

static void encode(const kiln_tokenizer *tok, const char *text, size_t n) {
    int32_t ids[64], got = -1;
    kiln_status st = kiln_tokenizer_encode(tok, text, n, ids, 64, &got);
    if (st == KILN_OK)
        for (int32_t k = 0; k < got; k++)
            if (ids[k] < 0 || ids[k] >= kiln_tokenizer_vocab_size(tok)) abort();
    if (st != KILN_OK && st != KILN_ERR_BUFFER_SIZE && st != KILN_ERR_INVALID_ARGUMENT) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static kiln_tokenizer *uncased, *cased;
    if (!uncased) uncased = make(false), cased = make(true);
    const char *text = (const char *)data;
    encode(uncased, text, size);
    encode(cased, text, size);
    const char *texts[2] = {text, text + size / 2};
    size_t lens[2] = {size / 2, size - size / 2};
    kiln_token_batch b;
    if (kiln_tokenizer_encode_batch(uncased, 2, texts, lens, &b) == KILN_OK) {
        if (kiln_tensor_dim(b.input_ids, 0) != 2 || kiln_tensor_dim(b.attention_mask, 1) > 256) abort();
        kiln_token_batch_release(&b);
    }
    return 0;
}
