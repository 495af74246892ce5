/* The loader's shards (kiln_loader_options.shard_rank / shard_count, for data parallelism):
 * for each epoch the shards of one seed are distinct slices that together cover the dataset
 * (padded by wrapping around to equal sizes), have equal batch counts, and follow the shuffle;
 * bad shard options are rejected. All shards are built here, in one process. */
#include <kiln.h>

#include "kiln_test.h"

#define N 10

static kiln_dataset *indices_dataset(void) {
    float x[N];
    int64_t y[N];
    for (int i = 0; i < N; i++) x[i] = (float)i, y[i] = i;
    return kiln_memory_dataset_new(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N, 1), x),
                                   kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(N), y));
}

/* The sample indices shard `rank` of `count` sees in `epoch`, in order; returns how many. */
static int shard_samples(kiln_dataset *ds, int rank, int count, int64_t epoch, int64_t *out, int64_t *batches) {
    kiln_loader_options o = kiln_loader_defaults(3);
    o.workers = rank % 2; /* with and without worker threads */
    o.seed = 5;
    o.shard_rank = rank;
    o.shard_count = count;
    kiln_loader *l = kiln_loader_new(ds, o);
    KT_CHECK(l != NULL);
    *batches = kiln_loader_batches(l);
    kiln_loader_start_epoch(l, epoch);
    int n = 0;
    kiln_tensor x, y;
    while (kiln_loader_next(l, &x, &y) == KILN_OK) {
        int64_t k = kiln_tensor_numel(y);
        KT_CHECK(n + k <= N);
        KT_CHECK(kiln_into_data(y, out + n, sizeof(int64_t) * (size_t)k) == KILN_OK);
        kiln_release(x);
        n += (int)k;
    }
    kiln_loader_free(l);
    return n;
}

KT_TEST(shards_are_distinct_equal_and_cover_the_epoch) {
    kiln_dataset *ds = indices_dataset();
    for (int count = 1; count <= 4; count++) {
        for (int64_t epoch = 0; epoch < 2; epoch++) {
            int seen[N] = {0};
            int64_t first_batches = -1;
            int per = (N + count - 1) / count;
            int64_t firsts[4];
            for (int r = 0; r < count; r++) {
                int64_t got[N], batches;
                int n = shard_samples(ds, r, count, epoch, got, &batches);
                KT_CHECK_MSG(n == per, "count %d rank %d: %d samples, expected %d", count, r, n, per);
                if (r == 0) first_batches = batches;
                KT_CHECK(batches == first_batches && batches == (per + 2) / 3);
                for (int i = 0; i < n; i++) seen[got[i]]++;
                firsts[r] = got[0];
            }
            int missing = 0, extra = 0;
            for (int i = 0; i < N; i++) missing += seen[i] == 0, extra += seen[i] > 1 ? seen[i] - 1 : 0;
            KT_CHECK(missing == 0);
            KT_CHECK_MSG(extra == per * count - N, "count %d: %d samples repeated", count, extra);
            for (int r = 1; r < count; r++) KT_CHECK(firsts[r] != firsts[0]);
        }
    }
    /* the shuffle moves with the epoch (same seed everywhere) */
    int64_t a[N], b[N], nb;
    shard_samples(ds, 0, 2, 0, a, &nb);
    shard_samples(ds, 0, 2, 1, b, &nb);
    KT_CHECK(memcmp(a, b, sizeof(int64_t) * 5) != 0);
    kiln_dataset_free(ds);
}

KT_TEST(bad_shard_options) {
    kiln_dataset *ds = indices_dataset();
    kiln_loader_options o = kiln_loader_defaults(3);
    o.shard_rank = 2;
    o.shard_count = 2;
    KT_CHECK(kiln_loader_new(ds, o) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "shard_rank 2", __LINE__ - 1);
    o.shard_rank = -1;
    KT_CHECK(kiln_loader_new(ds, o) == NULL);
    KT_CHECK(kiln_last_status() == KILN_ERR_INVALID_ARGUMENT);
    kiln_dataset_free(ds);
}

int main(void) {
    KT_RUN(shards_are_distinct_equal_and_cover_the_epoch);
    KT_RUN(bad_shard_options);
    return kt_finish();
}
