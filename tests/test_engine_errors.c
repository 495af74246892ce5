/* Asynchronous errors: a kernel failing in the middle of a chain poisons what it writes;
 * later ops skip but complete; the next read returns the error once with the op's name,
 * sequence number and file:line; later syncs succeed; nothing hangs or leaks. */
#include <kiln.h>

#include "engine/engine-impl.h"
#include "kiln_test.h"

KT_TEST(failure_mid_chain_reaches_the_read) {
    uint64_t live = kiln_memory_stats_get(KILN_CPU).live_tensors;
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(256, 256), 0.5);
    x = kiln_exp(x);
    kiln__debug_fail_next_kernel("kiln_mul");
    int line = __LINE__ + 1;
    x = kiln_mul(x, kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(256), 2.0));
    kiln_tensor side = kiln_add_scalar(kiln_ref(x), 1.0);
    for (int i = 0; i < 50; i++) x = kiln_add_scalar(x, 1.0);
    float v;
    KT_CHECK(kiln_into_scalar(kiln_sum(x), &v) == KILN_ERR_KERNEL);
    char where[64];
    snprintf(where, sizeof where, "test_engine_errors.c:%d (op #", line);
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(strstr(msg, "kiln_mul at ") && strstr(msg, where) && strstr(msg, "injected failure"), "%s", msg);
    /* the same error reached the other branch */
    KT_CHECK(kiln_into_scalar(kiln_sum(side), &v) == KILN_ERR_KERNEL);
    /* it was reported by the reads: the stream has nothing more to say */
    KT_CHECK(kiln_sync() == KILN_OK);
    /* and the engine keeps working */
    KT_CHECK(kiln_into_scalar(kiln_sum(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(10))), &v) == KILN_OK);
    KT_NEAR(v, 10.0, 0);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).live_tensors == live);
}

KT_TEST(unread_failure_is_returned_once_by_sync) {
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1000));
    kiln__debug_fail_next_kernel("kiln_exp");
    x = kiln_exp(x);
    kiln_release(x); /* never read */
    KT_CHECK(kiln_sync() == KILN_ERR_KERNEL);
    KT_CHECK(strstr(kiln_last_error(), "kiln_exp at") != NULL);
    KT_CHECK(kiln_sync() == KILN_OK);
}

KT_TEST(failure_inside_a_transaction) {
    kiln_tensor good = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4), 3.0);
    kiln__debug_fail_next_kernel("kiln_neg");
    kiln_tensor bad = kiln_neg(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)));
    float a[4], b[4];
    kiln_transaction *tx = kiln_transaction_new();
    KT_CHECK(kiln_transaction_read(tx, good, a, sizeof a) == KILN_OK);
    KT_CHECK(kiln_transaction_read(tx, bad, b, sizeof b) == KILN_OK);
    KT_CHECK(kiln_transaction_execute(tx) == KILN_ERR_KERNEL);
    KT_CHECK(strstr(kiln_last_error(), "kiln_neg") != NULL);
    KT_NEAR(a[0], 3.0, 0); /* the good read still arrived */
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_transaction_free(tx);
}

int main(void) {
    KT_RUN(failure_mid_chain_reaches_the_read);
    KT_RUN(unread_failure_is_returned_once_by_sync);
    KT_RUN(failure_inside_a_transaction);
    return kt_finish();
}
