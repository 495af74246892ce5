/* The summary writer with tensors on the OpenCL device: a histogram is computed there (the
 * bucket search, counts and statistics are device kernels) and equals the CPU's bucket for
 * bucket, in f32 and f64; a scalar still on the device is written like any other. Skipped
 * (exit 77) without an OpenCL device. */
#include <kiln.h>
#include <unistd.h>

#include "kiln_test.h"
#include "train/summary-impl.h"

#if KILN_HAVE_OPENCL
static void same_histogram(kiln_dtype dtype) {
    const double *e;
    int buckets = kiln__histogram_edges(&e) - 1;
    size_t bytes = (size_t)(buckets + 4) * sizeof(double);
    double *cpu = malloc(bytes), *dev = malloc(bytes);
    /* weights of several scales and signs, plus edges and zeros */
    kiln_tensor x = kiln_mul(kiln_randn(KILN_CPU, dtype, KILN_SHAPE(64, 100), 3),
                             kiln_exp(kiln_uniform(KILN_CPU, dtype, KILN_SHAPE(64, 100), -20, 20, 4)));
    kiln_tensor on_dev = kiln_to_device(kiln_ref(x), KILN_OPENCL);
    KT_CHECK(kiln_into_data(kiln__histogram_compute(x), cpu, bytes) == KILN_OK);
    kiln_status st = kiln_into_data(kiln__histogram_compute(on_dev), dev, bytes);
    KT_CHECK_MSG(st == KILN_OK, "%s", kiln_last_error());
    int wrong = 0;
    for (int b = 0; b < buckets; b++) wrong += cpu[4 + b] != dev[4 + b];
    KT_CHECK_MSG(wrong == 0, "%s: %d buckets differ", kiln_dtype_name(dtype), wrong);
    KT_CHECK(cpu[0] == dev[0] && cpu[1] == dev[1]);
    KT_NEAR(dev[2], cpu[2], 1e-9);
    KT_NEAR(dev[3], cpu[3], 1e-9);
    free(cpu);
    free(dev);
}

KT_TEST(histogram_on_the_device_equals_the_cpu) {
    kt_mem_begin();
    same_histogram(KILN_F32);
    same_histogram(KILN_F64);
    KT_MEM_CHECK();
}

KT_TEST(writer_takes_device_tensors) {
    kt_mem_begin();
    char dir[] = "/tmp/kiln_tb_opencl_XXXXXX";
    KT_CHECK(mkdtemp(dir) != NULL);
    kiln_summary_writer *w = kiln_summary_writer_open(dir);
    KT_CHECK(w != NULL);
    if (!w) return;
    kiln_tensor loss = kiln_mean(kiln_ones(KILN_OPENCL, KILN_F32, KILN_SHAPE(10)));
    KT_CHECK(kiln_summary_writer_add_scalar_tensor(w, "loss", loss, 1) == KILN_OK);
    KT_CHECK(kiln_summary_writer_add_histogram(w, "w", kiln_randn(KILN_OPENCL, KILN_F32, KILN_SHAPE(1000), 1), 1) == KILN_OK);
    KT_CHECK_MSG(kiln_summary_writer_close(w) == KILN_OK, "%s", kiln_last_error());
    FILE *f = fopen(kiln_summary_writer_path(w), "rb");
    int records = 0;
    uint8_t *data;
    size_t len;
    while (f && kiln__record_read(f, &data, &len) == 1) records++, free(data);
    if (f) fclose(f);
    KT_CHECK(records == 3);
    unlink(kiln_summary_writer_path(w));
    rmdir(dir);
    kiln_summary_writer_free(w);
    KT_MEM_CHECK();
}
#endif

int main(void) {
    if (kt_opencl_missing()) return 77;
#if KILN_HAVE_OPENCL
    KT_RUN(histogram_on_the_device_equals_the_cpu);
    KT_RUN(writer_takes_device_tensors);
#endif
    return kt_finish();
}
