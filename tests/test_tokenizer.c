/* The WordPiece tokenizer (kiln/text.h): each rule of BERT's basic tokenization on hand-written
 * strings over a small vocabulary, WordPiece, truncation, batches with padding and attention
 * mask, and bad input (invalid UTF-8 of each kind, NULLs, a small cap, missing, corrupt and
 * special vocabulary files).
 *
 *   test_tokenizer               the unit tests (no model needed)
 *   test_tokenizer --reference   ids identical to the reference's on every sentence of
 *                                tests/data/minilm; exit 77 (skipped) without the model package
 *   test_tokenizer --ids FILE    prints kiln's ids of each sentence of FILE (sentences.txt's
 *                                format), for scripts/make_minilm_reference.py --compare */
#define _GNU_SOURCE
#include <kiln.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln_test.h"
#include "minilm_reference.h"

static char tmp_dir[64];
static char vocab_path[128];

/* The small vocabulary of the unit tests, ids 0.. in this order. */
static const char *const VOCAB[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",", "!", ".", "cafe",
                                    "café", "naive", "un", "##aff", "##able", "中", "国", "a", "##a", "ab", "##c", "[",
                                    "]", "mask", "$", "^", "¿", "ss", "i", "x", "y"};
#define VOCAB_N ((int)(sizeof VOCAB / sizeof VOCAB[0]))

static int32_t id_of(const char *token) {
    for (int i = 0; i < VOCAB_N; i++)
        if (strcmp(VOCAB[i], token) == 0) return i;
    return -100;
}

static void write_text(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    KT_CHECK(f != NULL);
    if (!f) return;
    KT_CHECK(fwrite(text, 1, n, f) == n);
    fclose(f);
}

static kiln_tokenizer *small_tokenizer(kiln_tokenizer_options o) { return kiln_tokenizer_load(vocab_path, o); }

/* Encodes text (len bytes) and checks the ids against the space-separated tokens of `want`
 * ([CLS] and [SEP] included when the options add them). */
static void expect_tokens_at(const kiln_tokenizer *tok, const char *text, size_t len, const char *want, int line) {
    int32_t ids[600], n = -1;
    kiln_status st = kiln_tokenizer_encode(tok, text, len, ids, 600, &n);
    KT_CHECK_MSG(st == KILN_OK, "line %d: %s", line, kiln_last_error());
    char buf[2048], *save = NULL;
    snprintf(buf, sizeof buf, "%s", want);
    int k = 0;
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save), k++) {
        KT_CHECK_MSG(k < n, "line %d: %d ids, expected more ('%s')", line, n, want);
        if (k >= n) return;
        KT_CHECK_MSG(ids[k] == id_of(t), "line %d: token %d is '%s', expected '%s'", line, k,
                     kiln_tokenizer_token(tok, ids[k]), t);
    }
    KT_CHECK_MSG(k == n, "line %d: %d ids, expected %d ('%s')", line, n, k, want);
}
#define EXPECT_TOKENS(tok, text, want) expect_tokens_at((tok), (text), strlen(text), (want), __LINE__)

KT_TEST(lower_case_and_accents) {
    kiln_tokenizer *tok = small_tokenizer(kiln_tokenizer_defaults());
    KT_CHECK(tok != NULL);
    if (!tok) return;
    EXPECT_TOKENS(tok, "Hello WORLD", "[CLS] hello world [SEP]");
    EXPECT_TOKENS(tok, "Café NAÏVE", "[CLS] cafe naive [SEP]");       /* precomposed */
    EXPECT_TOKENS(tok, "Cafe\xCC\x81", "[CLS] cafe [SEP]");           /* e + combining acute */
    EXPECT_TOKENS(tok, "\xC4\xB0", "[CLS] i [SEP]");                  /* İ: I + dot above, dropped */
    EXPECT_TOKENS(tok, "\xEF\xA4\x80", "[CLS] [UNK] [SEP]");          /* U+F900 -> U+8C48, not in vocab */
    kiln_tokenizer_free(tok);
    kiln_tokenizer_options o = kiln_tokenizer_defaults();
    o.strip_accents = 0; /* lower case only: the accent stays */
    tok = small_tokenizer(o);
    EXPECT_TOKENS(tok, "CAFÉ", "[CLS] café [SEP]");
    kiln_tokenizer_free(tok);
    o = kiln_tokenizer_defaults();
    o.lower_case = false; /* cased: nothing is normalised (accents follow lower_case) */
    tok = small_tokenizer(o);
    EXPECT_TOKENS(tok, "Hello café", "[CLS] [UNK] café [SEP]");
    kiln_tokenizer_free(tok);
}

KT_TEST(cjk_punctuation_and_spaces) {
    kiln_tokenizer *tok = small_tokenizer(kiln_tokenizer_defaults());
    EXPECT_TOKENS(tok, "中国abc", "[CLS] 中 国 ab ##c [SEP]");
    EXPECT_TOKENS(tok, "hello,world!", "[CLS] hello , world ! [SEP]");
    EXPECT_TOKENS(tok, "$a^b", "[CLS] $ a ^ [UNK] [SEP]");             /* ASCII symbols are punctuation */
    EXPECT_TOKENS(tok, "¿hello.", "[CLS] ¿ hello . [SEP]");            /* Unicode Po */
    EXPECT_TOKENS(tok, "hello\xE3\x80\x80world\xC2\xA0!", "[CLS] hello world ! [SEP]"); /* U+3000, U+00A0 */
    EXPECT_TOKENS(tok, "\thello\n\r\nworld  ", "[CLS] hello world [SEP]");
    EXPECT_TOKENS(tok, "", "[CLS] [SEP]");
    EXPECT_TOKENS(tok, " \t\n ", "[CLS] [SEP]");
    kiln_tokenizer_options o = kiln_tokenizer_defaults();
    o.split_chinese_chars = false;
    kiln_tokenizer *whole = small_tokenizer(o);
    EXPECT_TOKENS(whole, "中国", "[CLS] [UNK] [SEP]");
    kiln_tokenizer_free(whole);
    kiln_tokenizer_free(tok);
}

KT_TEST(control_characters) {
    kiln_tokenizer *tok = small_tokenizer(kiln_tokenizer_defaults());
    EXPECT_TOKENS(tok, "hel\x01lo wor\x7Fld", "[CLS] hello world [SEP]");   /* Cc: dropped, not a break */
    EXPECT_TOKENS(tok, "hel\xE2\x80\x8Blo", "[CLS] hello [SEP]");           /* U+200B (Cf) */
    EXPECT_TOKENS(tok, "hel\xEF\xBF\xBDlo", "[CLS] hello [SEP]");           /* U+FFFD */
    expect_tokens_at(tok, "hel\0lo", 6, "[CLS] hello [SEP]", __LINE__);     /* NUL inside len */
    kiln_tokenizer_free(tok);
}

KT_TEST(wordpiece_and_unknown) {
    kiln_tokenizer *tok = small_tokenizer(kiln_tokenizer_defaults());
    EXPECT_TOKENS(tok, "unaffable", "[CLS] un ##aff ##able [SEP]");
    EXPECT_TOKENS(tok, "unaffablez hello", "[CLS] [UNK] hello [SEP]"); /* one piece missing: the whole word */
    EXPECT_TOKENS(tok, "aaa", "[CLS] a ##a ##a [SEP]");
    char word[128];
    memset(word, 'a', sizeof word);
    char want[1024] = "[CLS] a";
    for (int i = 1; i < 100; i++) strcat(want, " ##a");
    strcat(want, " [SEP]");
    expect_tokens_at(tok, word, 100, want, __LINE__);                  /* 100 characters: split */
    expect_tokens_at(tok, word, 101, "[CLS] [UNK] [SEP]", __LINE__);    /* 101: unknown */
    kiln_tokenizer_free(tok);
    kiln_tokenizer_options o = kiln_tokenizer_defaults();
    o.max_chars_per_word = 3;
    tok = small_tokenizer(o);
    EXPECT_TOKENS(tok, "aaa aaaa", "[CLS] a ##a ##a [UNK] [SEP]");
    EXPECT_TOKENS(tok, "Ééé", "[CLS] [UNK] [SEP]"); /* eee: no "e" in the vocabulary */
    kiln_tokenizer_free(tok);
}

KT_TEST(special_tokens_in_text) {
    kiln_tokenizer *tok = small_tokenizer(kiln_tokenizer_defaults());
    EXPECT_TOKENS(tok, "x[MASK]y", "[CLS] x [MASK] y [SEP]");
    EXPECT_TOKENS(tok, "[SEP][PAD]", "[CLS] [SEP] [PAD] [SEP]");
    EXPECT_TOKENS(tok, "[mask]", "[CLS] [ mask ] [SEP]"); /* matched before lower-casing: exact case only */
    kiln_tokenizer_free(tok);
    kiln_tokenizer_options o = kiln_tokenizer_defaults();
    o.match_special_tokens = false;
    o.add_special_tokens = false;
    tok = small_tokenizer(o);
    EXPECT_TOKENS(tok, "x[MASK]", "x [ mask ]");
    kiln_tokenizer_free(tok);
}

KT_TEST(truncation) {
    kiln_tokenizer_options o = kiln_tokenizer_defaults();
    o.max_length = 5;
    kiln_tokenizer *tok = small_tokenizer(o);
    EXPECT_TOKENS(tok, "x y x y x y", "[CLS] x y x [SEP]");
    EXPECT_TOKENS(tok, "unaffable x", "[CLS] un ##aff ##able [SEP]");
    EXPECT_TOKENS(tok, "x y", "[CLS] x y [SEP]");
    kiln_tokenizer_free(tok);
    /* the default limit is 256: a long text keeps [CLS], 254 tokens and [SEP] */
    tok = small_tokenizer(kiln_tokenizer_defaults());
    char text[1200];
    for (int i = 0; i < 600; i++) text[2 * i] = 'x', text[2 * i + 1] = ' ';
    int32_t ids[600], n = 0;
    KT_CHECK(kiln_tokenizer_encode(tok, text, sizeof text, ids, 600, &n) == KILN_OK);
    KT_CHECK(n == 256 && ids[0] == id_of("[CLS]") && ids[254] == id_of("x") && ids[255] == id_of("[SEP]"));
    kiln_tokenizer_free(tok);
    o.max_length = 0; /* no limit */
    tok = small_tokenizer(o);
    KT_CHECK(kiln_tokenizer_encode(tok, text, sizeof text, ids, 600, &n) == KILN_ERR_BUFFER_SIZE && n == 602);
    kiln_tokenizer_free(tok);
}

KT_TEST(batch_padding_and_mask) {
    kt_mem_begin();
    kiln_tokenizer *tok = small_tokenizer(kiln_tokenizer_defaults());
    const char *texts[] = {"hello", "hello world !", ""};
    kiln_token_batch b;
    KT_CHECK(kiln_tokenizer_encode_batch(tok, 3, texts, NULL, &b) == KILN_OK);
    kiln_shape s = kiln_tensor_shape(b.input_ids);
    KT_CHECK(s.ndim == 2 && s.dims[0] == 3 && s.dims[1] == 5);
    KT_CHECK(kiln_tensor_dtype(b.input_ids) == KILN_I64 && kiln_tensor_dtype(b.attention_mask) == KILN_I64 &&
             kiln_tensor_dtype(b.token_type_ids) == KILN_I64);
    int64_t ids[15], mask[15], types[15];
    KT_CHECK(kiln_into_data(kiln_ref(b.input_ids), ids, sizeof ids) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_ref(b.attention_mask), mask, sizeof mask) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_ref(b.token_type_ids), types, sizeof types) == KILN_OK);
    const char *want[3][5] = {{"[CLS]", "hello", "[SEP]", "[PAD]", "[PAD]"},
                              {"[CLS]", "hello", "world", "!", "[SEP]"},
                              {"[CLS]", "[SEP]", "[PAD]", "[PAD]", "[PAD]"}};
    const int real[3] = {3, 5, 2};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 5; k++) {
            KT_CHECK_MSG(ids[i * 5 + k] == id_of(want[i][k]), "ids[%d][%d] = %lld", i, k, (long long)ids[i * 5 + k]);
            KT_CHECK(mask[i * 5 + k] == (k < real[i]));
            KT_CHECK(types[i * 5 + k] == 0);
        }
    kiln_token_batch_release(&b);
    KT_CHECK(b.input_ids.id == 0 && b.attention_mask.id == 0 && b.token_type_ids.id == 0);
    size_t lens[] = {5, 3};
    KT_CHECK(kiln_tokenizer_encode_batch(tok, 2, texts, lens, &b) == KILN_OK); /* "hello", "hel" */
    KT_CHECK(kiln_tensor_dim(b.input_ids, 1) == 3);
    kiln_token_batch_release(&b);
    kiln_tokenizer_free(tok);
    KT_MEM_CHECK();
}

KT_TEST(vocabulary_lookups) {
    kiln_tokenizer *tok = small_tokenizer(kiln_tokenizer_defaults());
    KT_CHECK(kiln_tokenizer_vocab_size(tok) == VOCAB_N);
    KT_CHECK(kiln_tokenizer_vocab_size(NULL) == -1);
    KT_CHECK(strcmp(kiln_tokenizer_token(tok, 5), "hello") == 0);
    KT_CHECK(kiln_tokenizer_id(tok, "##aff", 5) == id_of("##aff"));
    int line = __LINE__ + 1;
    KT_CHECK(kiln_tokenizer_id(tok, "absent", 6) == -1);
    KT_EXPECT_ERROR(KILN_ERR_INDEX, "kiln_tokenizer_id", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_tokenizer_token(tok, VOCAB_N) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INDEX, "kiln_tokenizer_token", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_tokenizer_token(tok, -1) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INDEX, "kiln_tokenizer_token", line);
    kiln_tokenizer_free(tok);
    kiln_tokenizer_free(NULL);
}

/* Every kind of invalid UTF-8, alone and inside valid text, in encode and in a batch. */
KT_TEST(invalid_utf8) {
    kt_mem_begin();
    kiln_tokenizer *tok = small_tokenizer(kiln_tokenizer_defaults());
    static const struct {
        const char *bytes, *why;
    } bad[] = {
        {"\xC0\xAF", "overlong"},           {"\xE0\x80\xAF", "overlong"},    {"\xF0\x80\x80\xAF", "overlong"},
        {"\xED\xA0\x80", "surrogate"},      {"\xED\xBF\xBF", "surrogate"},   {"\xE4\xB8", "truncated"},
        {"\xF0\x9F\x98", "truncated"},      {"\xE4" "a\xAD", "truncated"},   {"\x80", "continuation"},
        {"\xF4\x90\x80\x80", "U+10FFFF"},   {"\xFF", "never appears"},       {"\xF8\x88\x80\x80\x80", "never appears"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[64];
        int n = snprintf(text, sizeof text, "hello %s world", bad[i].bytes);
        int32_t ids[16], got = -1;
        int line = __LINE__ + 1;
        KT_CHECK(kiln_tokenizer_encode(tok, text, (size_t)n, ids, 16, &got) == KILN_ERR_INVALID_ARGUMENT);
        KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_tokenizer_encode", line);
        KT_CHECK_MSG(strstr(kiln_last_error(), bad[i].why) && strstr(kiln_last_error(), "at byte 6"), "case %zu: %s",
                     i, kiln_last_error());
        KT_CHECK(got == 0);
        const char *texts[] = {"fine", text};
        size_t lens[] = {4, (size_t)n};
        kiln_token_batch b;
        line = __LINE__ + 1;
        KT_CHECK(kiln_tokenizer_encode_batch(tok, 2, texts, lens, &b) == KILN_ERR_INVALID_ARGUMENT);
        KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "texts[1]", line);
        KT_CHECK(b.input_ids.id == 0 && b.attention_mask.id == 0 && b.token_type_ids.id == 0);
    }
    kiln_tokenizer_free(tok);
    KT_MEM_CHECK();
}

KT_TEST(null_and_small_buffers) {
    kiln_tokenizer *tok = small_tokenizer(kiln_tokenizer_defaults());
    int32_t ids[4], n = -1;
    int line = __LINE__ + 1;
    KT_CHECK(kiln_tokenizer_encode(NULL, "x", 1, ids, 4, &n) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_tokenizer_encode", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_tokenizer_encode(tok, NULL, 3, ids, 4, &n) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "text is NULL", line);
    KT_CHECK(kiln_tokenizer_encode(tok, NULL, 0, ids, 4, &n) == KILN_OK && n == 2); /* the empty text */
    line = __LINE__ + 1;
    KT_CHECK(kiln_tokenizer_encode(tok, "x", 1, ids, 4, NULL) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "n_out", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_tokenizer_encode(tok, "x", 1, NULL, 4, &n) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_tokenizer_encode", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_tokenizer_encode(tok, "x y x y", 7, ids, 4, &n) == KILN_ERR_BUFFER_SIZE);
    KT_EXPECT_ERROR(KILN_ERR_BUFFER_SIZE, "cap 4", line);
    KT_CHECK(n == 6); /* the count needed */
    KT_CHECK(kiln_tokenizer_encode(tok, "x y", 3, NULL, 0, &n) == KILN_ERR_BUFFER_SIZE && n == 4);
    kiln_token_batch b;
    const char *texts[] = {"x", NULL};
    line = __LINE__ + 1;
    KT_CHECK(kiln_tokenizer_encode_batch(tok, 2, texts, NULL, &b) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "texts[1] is NULL", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_tokenizer_encode_batch(tok, 0, texts, NULL, &b) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_tokenizer_encode_batch", line);
    KT_CHECK(kiln_tokenizer_encode_batch(tok, 1, NULL, NULL, &b) == KILN_ERR_NULL);
    KT_CHECK(kiln_tokenizer_encode_batch(tok, 1, texts, NULL, NULL) == KILN_ERR_NULL);
    KT_CHECK(kiln_tokenizer_encode_batch(NULL, 1, texts, NULL, &b) == KILN_ERR_NULL);
    kiln_token_batch_release(NULL);
    kiln_tokenizer_free(tok);
}

static void expect_load_error_at(const char *path, kiln_tokenizer_options o, kiln_status st, const char *what,
                                 int line) {
    kiln_tokenizer *tok = kiln_tokenizer_load(path, o);
    KT_CHECK_MSG(tok == NULL, "line %d: loaded", line);
    kiln_tokenizer_free(tok);
    kt_expect_error_at(st, what, __FILE__, 0, line);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_tokenizer_load"), "line %d: %s", line, kiln_last_error());
}
#define EXPECT_LOAD_ERROR(path, o, st, what) expect_load_error_at((path), (o), (st), (what), __LINE__)

KT_TEST(bad_vocabulary_files) {
    kiln_tokenizer_options o = kiln_tokenizer_defaults();
    char path[160];
    snprintf(path, sizeof path, "%s/bad.txt", tmp_dir);
    EXPECT_LOAD_ERROR("/nonexistent/vocab.txt", o, KILN_ERR_IO, "cannot open");
    EXPECT_LOAD_ERROR(tmp_dir, o, KILN_ERR_IO, "not a regular file");
    EXPECT_LOAD_ERROR(NULL, o, KILN_ERR_NULL, "vocab_path");
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"", "empty vocabulary"},
        {"[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n", "line 3 is empty"},
        {"[PAD]\n[UNK]\n[CLS]\n[SEP]\nbad\xC0\xAF\n", "line 5"},
        {"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[UNK]\n", "also on line 2"},
        {"[PAD]\n[CLS]\n[SEP]\n[MASK]\n", "no token '[UNK]'"},
        {"[PAD]\n[UNK]\n[CLS]\n[SEP]\n", "no token '[MASK]'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(path, bad[i].text, strlen(bad[i].text));
        EXPECT_LOAD_ERROR(path, o, KILN_ERR_CORRUPT, bad[i].why);
    }
    char huge[3000] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
    size_t at = strlen(huge);
    memset(huge + at, 'w', 2000);
    write_text(path, huge, at + 2000);
    EXPECT_LOAD_ERROR(path, o, KILN_ERR_CORRUPT, "line 6 is 2000 bytes long");
    write_text(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n\0\n", 26);
    EXPECT_LOAD_ERROR(path, o, KILN_ERR_CORRUPT, "NUL");
    o.mask_token = NULL; /* no mask token needed: the same file loads, with \r\n lines too */
    write_text(path, "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nx", 29);
    kiln_tokenizer *tok = kiln_tokenizer_load(path, o);
    KT_CHECK(tok && kiln_tokenizer_vocab_size(tok) == 5 && kiln_tokenizer_id(tok, "x", 1) == 4);
    kiln_tokenizer_free(tok);
    o = kiln_tokenizer_defaults();
    o.max_length = 2;
    EXPECT_LOAD_ERROR(vocab_path, o, KILN_ERR_INVALID_ARGUMENT, "max_length");
    o = kiln_tokenizer_defaults();
    o.max_chars_per_word = 0;
    EXPECT_LOAD_ERROR(vocab_path, o, KILN_ERR_INVALID_ARGUMENT, "max_chars_per_word");
    o = kiln_tokenizer_defaults();
    o.unk_token = NULL;
    EXPECT_LOAD_ERROR(vocab_path, o, KILN_ERR_NULL, "unk_token");
}

/* A FIFO would block open() or read() forever; the alarm turns a hang into a failed test. */
KT_TEST(fifo_vocabulary) {
    char fifo[160];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmp_dir);
    KT_CHECK(mkfifo(fifo, 0600) == 0);
    alarm(20);
    EXPECT_LOAD_ERROR(fifo, kiln_tokenizer_defaults(), KILN_ERR_IO, "not a regular file");
    EXPECT_LOAD_ERROR("/dev/zero", kiln_tokenizer_defaults(), KILN_ERR_IO, "not a regular file");
    alarm(0);
    unlink(fifo);
}

/* ---- the reference ----------------------------------------------------------------------- */
static kiln_tokenizer *model_tokenizer(void) {
    const char *dir = mr_model_dir();
    if (!dir) return NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    kiln_tokenizer *tok = kiln_tokenizer_load(path, kiln_tokenizer_defaults());
    if (!tok) fprintf(stderr, "  %s\n", kiln_last_error());
    return tok;
}

/* kiln's ids of each sentence of path, one line each (for the reference script). */
static int print_ids(const char *path) {
    kiln_tokenizer *tok = model_tokenizer();
    size_t n = 0;
    mr_sentence *s = tok ? mr_read_sentences(path, &n) : NULL;
    if (!s) return fprintf(stderr, "test_tokenizer --ids: no model (KILN_MINILM_DIR) or no %s\n", path), 2;
    int32_t ids[1024];
    for (size_t i = 0; i < n; i++) {
        int32_t got = 0;
        if (kiln_tokenizer_encode(tok, s[i].text, s[i].len, ids, 1024, &got) != KILN_OK)
            fprintf(stderr, "sentence %zu: %s\n", i + 1, kiln_last_error()), got = 0;
        for (int32_t k = 0; k < got; k++) printf(k ? " %d" : "%d", ids[k]);
        printf("\n");
    }
    mr_free_sentences(s, n);
    kiln_tokenizer_free(tok);
    return 0;
}

/* One reference line of token ids into ids; the count. */
static int32_t parse_ids(char *line, int32_t *ids, int32_t cap) {
    int32_t n = 0;
    for (char *p = line, *end; n < cap; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        ids[n++] = (int32_t)v;
    }
    return n;
}

static kiln_tokenizer *ref_tok;

KT_TEST(reference_ids) {
    size_t n = 0;
    mr_sentence *s = mr_reference_sentences(&n);
    FILE *f = mr_open_data("token_ids.txt");
    KT_CHECK(s && f && n >= 200);
    if (!s || !f) return;
    char *line = NULL;
    size_t size = 0, same = 0, longest = 0;
    int32_t want[1024], got[1024];
    const char **texts = malloc(n * sizeof *texts);
    size_t *lens = malloc(n * sizeof *lens);
    int32_t (*rows)[300] = malloc(n * sizeof *rows), *counts = malloc(n * sizeof *counts);
    for (size_t i = 0; i < n && getline(&line, &size, f) >= 0; i++) {
        int32_t nw = parse_ids(line, want, 1024), ng = 0;
        kiln_status st = kiln_tokenizer_encode(ref_tok, s[i].text, s[i].len, got, 1024, &ng);
        bool ok = st == KILN_OK && ng == nw && memcmp(got, want, (size_t)nw * sizeof *got) == 0;
        same += ok;
        KT_CHECK_MSG(ok, "sentence %zu (%.40s): %d ids, reference %d (%s)", i + 1, s[i].text, ng, nw,
                     st == KILN_OK ? "ids differ" : kiln_last_error());
        texts[i] = s[i].text, lens[i] = s[i].len;
        counts[i] = nw < 300 ? nw : 300;
        memcpy(rows[i], want, (size_t)counts[i] * sizeof *want);
        longest = (size_t)counts[i] > longest ? (size_t)counts[i] : longest;
    }
    fprintf(stderr, "  %zu of %zu sentences: ids identical to the reference\n", same, n);
    /* the same sentences as one batch: padded rows equal to the reference, masks cover the ids */
    kiln_token_batch b;
    KT_CHECK(kiln_tokenizer_encode_batch(ref_tok, (int64_t)n, texts, lens, &b) == KILN_OK);
    KT_CHECK(kiln_tensor_dim(b.input_ids, 1) == (int64_t)longest);
    int64_t *ids = malloc(n * longest * sizeof *ids), *mask = malloc(n * longest * sizeof *mask);
    KT_CHECK(kiln_into_data(kiln_ref(b.input_ids), ids, n * longest * sizeof *ids) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_ref(b.attention_mask), mask, n * longest * sizeof *mask) == KILN_OK);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < longest; k++) {
            bool real = k < (size_t)counts[i];
            bad += ids[i * longest + k] != (real ? rows[i][k] : 0) || mask[i * longest + k] != real;
        }
    KT_CHECK_MSG(bad == 0, "%zu batch entries differ from the reference", bad);
    kiln_token_batch_release(&b);
    free(ids), free(mask), free(texts), free(lens), free(rows), free(counts), free(line);
    fclose(f);
    mr_free_sentences(s, n);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--ids") == 0) return print_ids(argv[2]);
    if (argc == 2 && strcmp(argv[1], "--reference") == 0) {
        ref_tok = model_tokenizer();
        if (!ref_tok) return mr_skip();
        KT_RUN(reference_ids);
        kiln_tokenizer_free(ref_tok);
        return kt_finish();
    }
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/kiln_tokenizer_XXXXXX");
    if (!mkdtemp(tmp_dir)) return perror("mkdtemp"), 1;
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.txt", tmp_dir);
    FILE *f = fopen(vocab_path, "w");
    for (int i = 0; f && i < VOCAB_N; i++) fprintf(f, "%s\n", VOCAB[i]);
    if (f) fclose(f);
    kiln_tokenizer *probe = small_tokenizer(kiln_tokenizer_defaults());
    if (!probe && kiln_last_status() == KILN_ERR_UNSUPPORTED) { /* a build without utf8proc */
        KT_CHECK(strstr(kiln_last_error(), "utf8proc") != NULL);
        printf("SKIP: %s\n", kiln_last_error());
        return 77;
    }
    kiln_tokenizer_free(probe);
    KT_RUN(lower_case_and_accents);
    KT_RUN(cjk_punctuation_and_spaces);
    KT_RUN(control_characters);
    KT_RUN(wordpiece_and_unknown);
    KT_RUN(special_tokens_in_text);
    KT_RUN(truncation);
    KT_RUN(batch_padding_and_mask);
    KT_RUN(vocabulary_lookups);
    KT_RUN(invalid_utf8);
    KT_RUN(null_and_small_buffers);
    KT_RUN(bad_vocabulary_files);
    KT_RUN(fifo_vocabulary);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", tmp_dir);
    return kt_finish();
}
