/* Environment settings are parsed strictly (src/core/env.c): a whole number in range, or a
 * switch; anything else ("64abc", overflow, a negative size) is ignored with one warning on
 * stderr naming the variable, and the default is used. Also KILN_DDP_BUCKET_KB through
 * kiln_ddp_defaults (it used to read "12abc" as 12 and overflow a signed shift). */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core-impl.h"
#include "kiln_test.h"

/* What the calls in between wrote to stderr. */
static FILE *capture;
static int saved_stderr = -1;
static char captured[4096];

static void capture_begin(void) {
    fflush(stderr);
    capture = tmpfile();
    saved_stderr = dup(2);
    dup2(fileno(capture), 2);
}

static const char *capture_end(void) {
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    rewind(capture);
    size_t n = fread(captured, 1, sizeof captured - 1, capture);
    captured[n] = '\0';
    fclose(capture);
    return captured;
}

KT_TEST(whole_numbers_in_range) {
    setenv("KILN_TEST_INT", "64", 1);
    KT_CHECK(kiln__env_int_range("KILN_TEST_INT", 1, 100, 7) == 64);
    setenv("KILN_TEST_INT", "-3", 1);
    KT_CHECK(kiln__env_int_range("KILN_TEST_INT", -5, 100, 7) == -3);
    setenv("KILN_TEST_INT", "", 1); /* empty is unset: the default, silently */
    capture_begin();
    KT_CHECK(kiln__env_int_range("KILN_TEST_INT", 1, 100, 7) == 7);
    unsetenv("KILN_TEST_INT");
    KT_CHECK(kiln__env_int_range("KILN_TEST_INT", 1, 100, 7) == 7);
    KT_CHECK(strlen(capture_end()) == 0);
}

/* Each bad value: the default, and one warning naming the variable and the value. */
static void expect_rejected(const char *name, const char *value, int64_t min, int64_t max) {
    setenv(name, value, 1);
    capture_begin();
    int64_t got = kiln__env_int_range(name, min, max, 42);
    int64_t again = kiln__env_int_range(name, min, max, 42);
    const char *err = capture_end();
    KT_CHECK_MSG(got == 42 && again == 42, "%s=%s gave %lld", name, value, (long long)got);
    KT_CHECK_MSG(strstr(err, name) && strstr(err, value), "%s=%s: stderr '%s'", name, value, err);
    KT_CHECK_MSG(!strstr(err, name) || !strstr(strstr(err, name) + 1, name), "%s warned twice: '%s'", name, err);
    unsetenv(name);
}

KT_TEST(junk_overflow_and_range_are_refused) {
    expect_rejected("KILN_TEST_JUNK", "64abc", 1, INT64_MAX);
    expect_rejected("KILN_TEST_SPACE", " 64", 1, INT64_MAX);
    expect_rejected("KILN_TEST_SUFFIX", "64 ", 1, INT64_MAX);
    expect_rejected("KILN_TEST_TEXT", "lots", 0, INT64_MAX);
    expect_rejected("KILN_TEST_NEGATIVE", "-1", 0, INT64_MAX);
    expect_rejected("KILN_TEST_OVERFLOW", "99999999999999999999", 0, INT64_MAX);
    expect_rejected("KILN_TEST_ABOVE", "101", 0, 100);
    expect_rejected("KILN_TEST_HEX", "0x40", 0, INT64_MAX);
}

KT_TEST(switches) {
    const char *on[] = {"1", "true", "YES", "on"}, *off[] = {"0", "False", "no", "OFF"};
    for (int i = 0; i < 4; i++) {
        setenv("KILN_TEST_FLAG", on[i], 1);
        KT_CHECK(kiln__env_flag("KILN_TEST_FLAG", false));
        setenv("KILN_TEST_FLAG", off[i], 1);
        KT_CHECK(!kiln__env_flag("KILN_TEST_FLAG", true));
    }
    setenv("KILN_TEST_FLAG", "2", 1);
    capture_begin();
    KT_CHECK(kiln__env_flag("KILN_TEST_FLAG", true));
    KT_CHECK(!kiln__env_flag("KILN_TEST_FLAG", false));
    KT_CHECK(strstr(capture_end(), "KILN_TEST_FLAG=\"2\"") != NULL);
    unsetenv("KILN_TEST_FLAG");
}

KT_TEST(real_numbers) {
    setenv("KILN_TEST_SECONDS", "2.5", 1);
    KT_CHECK(kiln__env_double("KILN_TEST_SECONDS", 1e-3, 1e9, 300) == 2.5);
    setenv("KILN_TEST_SECONDS", "2.5s", 1);
    capture_begin();
    KT_CHECK(kiln__env_double("KILN_TEST_SECONDS", 1e-3, 1e9, 300) == 300);
    setenv("KILN_TEST_SECONDS2", "nan", 1);
    KT_CHECK(kiln__env_double("KILN_TEST_SECONDS2", 1e-3, 1e9, 300) == 300);
    setenv("KILN_TEST_SECONDS3", "-1", 1);
    KT_CHECK(kiln__env_double("KILN_TEST_SECONDS3", 1e-3, 1e9, 300) == 300);
    const char *err = capture_end();
    KT_CHECK(strstr(err, "KILN_TEST_SECONDS=") && strstr(err, "KILN_TEST_SECONDS2=") && strstr(err, "KILN_TEST_SECONDS3="));
    unsetenv("KILN_TEST_SECONDS");
    unsetenv("KILN_TEST_SECONDS2");
    unsetenv("KILN_TEST_SECONDS3");
}

/* Issue 24 item 4: the bucket size in KB, checked before the shift to bytes. */
KT_TEST(ddp_bucket_kb) {
    const int64_t dflt = (int64_t)25 << 20;
    unsetenv("KILN_DDP_BUCKET_KB");
    KT_CHECK(kiln_ddp_defaults().bucket_bytes == dflt);
    setenv("KILN_DDP_BUCKET_KB", "64", 1);
    KT_CHECK(kiln_ddp_defaults().bucket_bytes == 64 << 10);
    capture_begin();
    const char *bad[] = {"12abc", "99999999999999999", "18014398509481985", "0", "-4", "1e3"};
    for (int i = 0; i < 6; i++) {
        setenv("KILN_DDP_BUCKET_KB", bad[i], 1);
        int64_t got = kiln_ddp_defaults().bucket_bytes;
        KT_CHECK_MSG(got == dflt, "KILN_DDP_BUCKET_KB=%s gave %lld bytes", bad[i], (long long)got);
    }
    const char *err = capture_end();
    KT_CHECK_MSG(strstr(err, "KILN_DDP_BUCKET_KB=\"12abc\"") != NULL, "stderr '%s'", err);
    setenv("KILN_DDP_BUCKET_KB", "9007199254740991", 1); /* the largest that fits in bytes */
    KT_CHECK(kiln_ddp_defaults().bucket_bytes == (int64_t)9007199254740991 << 10);
    unsetenv("KILN_DDP_BUCKET_KB");
}

int main(void) {
    KT_RUN(whole_numbers_in_range);
    KT_RUN(junk_overflow_and_range_are_refused);
    KT_RUN(switches);
    KT_RUN(real_numbers);
    KT_RUN(ddp_bucket_kb);
    return kt_finish();
}
