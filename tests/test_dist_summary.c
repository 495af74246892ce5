/* kiln_metrics_log and the summary writer under MPI (run as 2 and 3 ranks by ctest): every rank
 * logs its own batch, the sums are all-reduced, and only rank 0's writer writes, a file holding
 * the whole job's mean loss and accuracy. As one process it is a world of one. */
#define _GNU_SOURCE /* memmem */
#include <kiln.h>
#include <unistd.h>

#include "kiln_test.h"
#include "train/summary-impl.h"

/* Whether the event file at path has a scalar event tag = value. */
static bool has_scalar(const char *path, const char *tag, float value) {
    uint8_t needle[64];
    size_t n = strlen(tag);
    memcpy(needle, tag, n);
    needle[n] = 0x15; /* Summary.Value.simple_value, a fixed32 */
    memcpy(needle + n + 1, &value, 4);
    FILE *f = fopen(path, "rb");
    bool found = false;
    uint8_t *data;
    size_t len;
    while (f && !found && kiln__record_read(f, &data, &len) == 1) {
        found = memmem(data, len, needle, n + 5) != NULL;
        free(data);
    }
    if (f) fclose(f);
    return found;
}

KT_TEST(metrics_of_every_rank_written_by_rank_0) {
    int rank = kiln_dist_rank(), world = kiln_dist_world_size();
    char dir[64] = "/tmp/kiln_tb_dist_XXXXXX";
    if (rank == 0) KT_CHECK(mkdtemp(dir) != NULL);
    kiln_summary_writer *w = kiln_summary_writer_open(dir); /* the other ranks': writes nothing */
    KT_CHECK(w != NULL);
    kiln_metrics *m = kiln_metrics_new();
    float logits[] = {1, 0, 1, 0}; /* both predict class 0 */
    int64_t targets[] = {rank ? 1 : 0, rank ? 1 : 0};
    KT_CHECK(kiln_metrics_add(m, kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, rank + 1.0),
                              kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 2), logits),
                              kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2), targets)) == KILN_OK);
    KT_CHECK(kiln_metrics_log(m, w, "train", 1) == KILN_OK);
    KT_CHECK_MSG(kiln_summary_writer_close(w) == KILN_OK, "%s", kiln_last_error());
    if (rank == 0) {
        const char *path = kiln_summary_writer_path(w);
        KT_CHECK(has_scalar(path, "train/loss", (float)((world + 1) / 2.0)));
        KT_CHECK(has_scalar(path, "train/accuracy", (float)(1.0 / world)));
        unlink(path);
        rmdir(dir);
    } else {
        KT_CHECK(!strcmp(kiln_summary_writer_path(w), ""));
    }
    kiln_summary_writer_free(w);
    kiln_metrics_free(m);
}

int main(void) {
    if (kiln_dist_init() != KILN_OK) {
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
    }
    KT_RUN(metrics_of_every_rank_written_by_rank_0);
    int failed = kt_finish();
    kiln_dist_finalize();
    return failed;
}
