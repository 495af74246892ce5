/* Transactions: many reads, one wait; and their bad inputs. */
#include <kiln.h>

#include "kiln_test.h"

KT_TEST(many_reads_one_wait) {
    kiln_transaction *tx = kiln_transaction_new();
    float f[8];
    int64_t n[3];
    double d;
    KT_CHECK(kiln_transaction_read(tx, kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4), 1.25), f, sizeof f) == KILN_OK);
    KT_CHECK(kiln_transaction_read(tx, kiln_full(KILN_CPU, KILN_I64, KILN_SHAPE(3), 7), n, sizeof n) == KILN_OK);
    kiln_tensor t = kiln_transpose(kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(1, 1), -2.5), 0, 1);
    KT_CHECK(kiln_transaction_read(tx, t, &d, sizeof d) == KILN_OK);
    KT_CHECK(kiln_transaction_execute(tx) == KILN_OK);
    KT_NEAR(f[7], 1.25, 0);
    KT_CHECK(n[2] == 7);
    KT_NEAR(d, -2.5, 0);
    /* reusable */
    KT_CHECK(kiln_transaction_read(tx, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(8)), f, sizeof f) == KILN_OK);
    KT_CHECK(kiln_transaction_execute(tx) == KILN_OK);
    KT_NEAR(f[0], 0, 0);
    KT_CHECK(kiln_transaction_execute(tx) == KILN_OK); /* empty */
    kiln_transaction_free(tx);
}

KT_TEST(bad_input) {
    uint64_t live = kiln_memory_stats_get(KILN_CPU).live_tensors;
    float f[4];
    KT_CHECK(kiln_transaction_read(NULL, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), f, sizeof f) == KILN_ERR_NULL);
    KT_CHECK(kiln_transaction_execute(NULL) == KILN_ERR_NULL);
    kiln_transaction_free(NULL);
    kiln_transaction *tx = kiln_transaction_new();
    KT_CHECK(kiln_transaction_read(tx, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), f, 12) == KILN_ERR_BUFFER_SIZE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_transaction_read at") && strstr(kiln_last_error(), "test_engine_transaction.c:"));
    KT_CHECK(kiln_transaction_read(tx, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), NULL, 16) == KILN_ERR_NULL);
    kiln_tensor gone = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    kiln_release(gone);
    KT_CHECK(kiln_transaction_read(tx, gone, f, sizeof f) == KILN_ERR_STALE_HANDLE);
    kiln_tensor poisoned = kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), KILN_SHAPE(5));
    KT_CHECK(kiln_transaction_read(tx, poisoned, f, sizeof f) == KILN_ERR_SHAPE);
    /* a good read after bad ones: execute reports the first error and still delivers */
    float g[2];
    KT_CHECK(kiln_transaction_read(tx, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), g, sizeof g) == KILN_OK);
    KT_CHECK(kiln_transaction_execute(tx) == KILN_ERR_BUFFER_SIZE);
    KT_NEAR(g[1], 1.0, 0);
    /* freeing with registered reads releases them */
    KT_CHECK(kiln_transaction_read(tx, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), g, sizeof g) == KILN_OK);
    kiln_transaction_free(tx);
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).live_tensors == live);
}

int main(void) {
    KT_RUN(many_reads_one_wait);
    KT_RUN(bad_input);
    return kt_finish();
}
