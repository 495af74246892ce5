/* kiln_to_string / kiln_print against the text PyTorch's repr gives for the same tensors:
 * 0-d to 3-d, every dtype's suffix, column alignment, integer-valued and scientific floats,
 * NaN and infinities, a transposed view, line wrapping, summaries of large tensors, empty
 * tensors, short and NULL buffers, the handle left usable, stale and poisoned handles, leaks. */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln_test.h"

static kiln_tensor from(kiln_dtype d, kiln_shape s, const void *data) { return kiln_from_data(KILN_CPU, d, s, data); }

/* t's text is want (t is released afterwards: kiln_to_string does not consume it). */
static void expect_text_at(kiln_tensor t, const char *want, int line) {
    char buf[4096];
    size_t need = 0;
    kiln_status st = kiln_to_string(t, buf, sizeof buf, &need);
    KT_CHECK_MSG(st == KILN_OK, "line %d: %s (%s)", line, kiln_status_str(st), kiln_last_error());
    KT_CHECK_MSG(strcmp(buf, want) == 0, "line %d: got\n%s\nwant\n%s", line, buf, want);
    KT_CHECK_MSG(need == strlen(want) + 1, "line %d: needed %zu, want %zu", line, need, strlen(want) + 1);
    kiln_release(t);
}
#define EXPECT_TEXT(t, want) expect_text_at((t), (want), __LINE__)

KT_TEST(print_small_tensors_like_pytorch) {
    kt_mem_begin();
    float half = 3.5f;
    EXPECT_TEXT(from(KILN_F32, KILN_SCALAR_SHAPE, &half), "tensor(3.5000)");
    int64_t seven = -7;
    EXPECT_TEXT(from(KILN_I64, KILN_SCALAR_SHAPE, &seven), "tensor(-7)");
    EXPECT_TEXT(kiln_full(KILN_CPU, KILN_F64, KILN_SCALAR_SHAPE, 0.25), "tensor(0.2500, dtype=kiln.f64)");

    float ints[] = {1, 2, 3};
    EXPECT_TEXT(from(KILN_F32, KILN_SHAPE(3), ints), "tensor([1., 2., 3.])");
    double m[] = {1, -2.5, 3, 4};
    EXPECT_TEXT(from(KILN_F64, KILN_SHAPE(2, 2), m),
                "tensor([[ 1.0000, -2.5000],\n"
                "        [ 3.0000,  4.0000]], dtype=kiln.f64)");
    int32_t cube[12];
    for (int i = 0; i < 12; i++) cube[i] = i;
    EXPECT_TEXT(from(KILN_I32, KILN_SHAPE(2, 2, 3), cube),
                "tensor([[[ 0,  1,  2],\n"
                "         [ 3,  4,  5]],\n"
                "\n"
                "        [[ 6,  7,  8],\n"
                "         [ 9, 10, 11]]], dtype=kiln.i32)");
    int64_t longs[] = {-10, 200, 3};
    EXPECT_TEXT(from(KILN_I64, KILN_SHAPE(3), longs), "tensor([-10, 200,   3])");
    bool flags[] = {true, false, true};
    EXPECT_TEXT(from(KILN_BOOL, KILN_SHAPE(3), flags), "tensor([ True, False,  True])");
    float halves[] = {0.5f, -1.25f};
    EXPECT_TEXT(kiln_cast(from(KILN_F32, KILN_SHAPE(2), halves), KILN_F16),
                "tensor([ 0.5000, -1.2500], dtype=kiln.f16)");
    float wide[] = {1e-5f, 1.0f, -300.0f};
    EXPECT_TEXT(from(KILN_F32, KILN_SHAPE(3), wide), "tensor([ 1.0000e-05,  1.0000e+00, -3.0000e+02])");
    float big[] = {1e9f, 2e9f};
    EXPECT_TEXT(from(KILN_F32, KILN_SHAPE(2), big), "tensor([1.0000e+09, 2.0000e+09])");
    float odd[] = {1.5f, NAN, -INFINITY, 0.0f};
    EXPECT_TEXT(from(KILN_F32, KILN_SHAPE(4), odd), "tensor([1.5000,    nan,   -inf, 0.0000])");
    float zeros[] = {0, 0};
    EXPECT_TEXT(from(KILN_F32, KILN_SHAPE(2), zeros), "tensor([0., 0.])");

    float rows[] = {1, 2, 3, 4, 5, 6};
    EXPECT_TEXT(kiln_transpose(from(KILN_F32, KILN_SHAPE(2, 3), rows), 0, 1),
                "tensor([[1., 4.],\n"
                "        [2., 5.],\n"
                "        [3., 6.]])");
    EXPECT_TEXT(kiln_add_scalar(kiln_arange(KILN_CPU, KILN_F32, 0, 20, 1), 0.5),
                "tensor([ 0.5000,  1.5000,  2.5000,  3.5000,  4.5000,  5.5000,  6.5000,  7.5000,\n"
                "         8.5000,  9.5000, 10.5000, 11.5000, 12.5000, 13.5000, 14.5000, 15.5000,\n"
                "        16.5000, 17.5000, 18.5000, 19.5000])");
    kiln_sync();
    KT_MEM_CHECK();
}

KT_TEST(print_summarises_large_and_names_empty_shapes) {
    kt_mem_begin();
    EXPECT_TEXT(kiln_arange(KILN_CPU, KILN_I64, 0, 2000, 1), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
    EXPECT_TEXT(kiln_reshape(kiln_arange(KILN_CPU, KILN_I64, 0, 10000, 1), KILN_SHAPE(100, 100)),
                "tensor([[   0,    1,    2,  ...,   97,   98,   99],\n"
                "        [ 100,  101,  102,  ...,  197,  198,  199],\n"
                "        [ 200,  201,  202,  ...,  297,  298,  299],\n"
                "        ...,\n"
                "        [9700, 9701, 9702,  ..., 9797, 9798, 9799],\n"
                "        [9800, 9801, 9802,  ..., 9897, 9898, 9899],\n"
                "        [9900, 9901, 9902,  ..., 9997, 9998, 9999]])");
    EXPECT_TEXT(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)), "tensor([], size=(0, 3))");
    EXPECT_TEXT(kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(0)), "tensor([], dtype=kiln.i64)");
    EXPECT_TEXT(kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2, 0)), "tensor([], size=(2, 0), dtype=kiln.f64)");
    kiln_sync();
    KT_MEM_CHECK();
}

KT_TEST(print_buffers_and_handles) {
    kt_mem_begin();
    float v = 3.5f;
    kiln_tensor t = from(KILN_F32, KILN_SCALAR_SHAPE, &v); /* "tensor(3.5000)": 15 bytes */
    size_t need = 0;
    KT_CHECK(kiln_to_string(t, NULL, 0, &need) == KILN_ERR_BUFFER_SIZE && need == 15);
    KT_CHECK(kiln_to_string(t, NULL, 0, NULL) == KILN_ERR_BUFFER_SIZE);
    char small[8];
    need = 0;
    int line = __LINE__ + 1;
    KT_CHECK(kiln_to_string(t, small, sizeof small, &need) == KILN_ERR_BUFFER_SIZE);
    KT_CHECK(need == 15 && strcmp(small, "tensor(") == 0);
    KT_EXPECT_ERROR(KILN_ERR_BUFFER_SIZE, "kiln_to_string", line);
    char exact[15];
    KT_CHECK(kiln_to_string(t, exact, sizeof exact, NULL) == KILN_OK && strcmp(exact, "tensor(3.5000)") == 0);
    KT_CHECK(kiln_to_string(t, exact, 14, NULL) == KILN_ERR_BUFFER_SIZE && strcmp(exact, "tensor(3.5000") == 0);
    line = __LINE__ + 1;
    KT_CHECK(kiln_to_string(t, NULL, 4, &need) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_to_string", line);

    /* kiln_print writes the same text and a newline to stdout */
    fflush(stdout);
    FILE *cap = tmpfile();
    int saved = dup(STDOUT_FILENO);
    KT_CHECK(cap && saved >= 0 && dup2(fileno(cap), STDOUT_FILENO) >= 0);
    kiln_status st = kiln_print(t);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    char out[64] = {0};
    rewind(cap);
    size_t got = fread(out, 1, sizeof out - 1, cap);
    fclose(cap);
    KT_CHECK(st == KILN_OK && got == 15 && strcmp(out, "tensor(3.5000)\n") == 0);

    /* neither call consumed t */
    float back = 0;
    KT_CHECK(kiln_into_scalar(t, &back) == KILN_OK && back == 3.5f);

    char buf[64] = "junk";
    need = 99;
    line = __LINE__ + 1;
    KT_CHECK(kiln_to_string(t, buf, sizeof buf, &need) == KILN_ERR_STALE_HANDLE);
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_to_string", line);
    KT_CHECK(buf[0] == 0 && need == 0);
    line = __LINE__ + 1;
    KT_CHECK(kiln_print(t) == KILN_ERR_STALE_HANDLE);
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_print", line);

    /* a poisoned tensor reports its own error: the op that failed, at its line here */
    line = __LINE__ + 1;
    kiln_tensor bad = kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), KILN_SHAPE(7));
    strcpy(buf, "junk");
    KT_CHECK(kiln_to_string(bad, buf, sizeof buf, NULL) == KILN_ERR_SHAPE && buf[0] == 0);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_reshape", line);
    KT_CHECK(kiln_print(bad) == KILN_ERR_SHAPE);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_release(bad);
    kiln_sync();
    kiln_clear_error();
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(print_small_tensors_like_pytorch);
    KT_RUN(print_summarises_large_and_names_empty_shapes);
    KT_RUN(print_buffers_and_handles);
    return kt_finish();
}
