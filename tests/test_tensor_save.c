/* kiln_save_tensor / kiln_load_tensor (torch.save / torch.load of one tensor, in safetensors):
 * every dtype, 0-d, empty and strided tensors round-trip bit for bit; a named tensor is read
 * from a file of several; a save that fails (its fsync fails) leaves the earlier file whole and
 * no temporary behind; damaged, truncated, hostile and foreign files give poisoned tensors
 * naming the call and this file's line, not crashes or huge allocations; no leaks. */
#include <dirent.h>
#include <errno.h>
#include <unistd.h>

#include <kiln.h>

#include "kiln_test.h"
#include "io/safetensors.h"

static const char *path_of(const char *name) {
    static char buf[4][256];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 256, "test_tensor_save.%d.%s", (int)getpid(), name);
    return p;
}

static bool same_bytes(kiln_tensor a, kiln_tensor b, size_t nbytes) {
    unsigned char *x = malloc(nbytes ? nbytes : 1), *y = malloc(nbytes ? nbytes : 1);
    bool ok = kiln_into_data(a, x, nbytes) == KILN_OK && kiln_into_data(b, y, nbytes) == KILN_OK && memcmp(x, y, nbytes) == 0;
    free(x);
    free(y);
    return ok;
}

KT_TEST(round_trips) {
    kt_mem_begin();
    const char *path = path_of("rt.safetensors");
    for (int d = 0; d < KT_N_DTYPES; d++) {
        kiln_dtype dt = kt_all_dtypes[d];
        kiln_tensor t = kiln_cast(kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(3, 4, 5), (uint64_t)d + 1), dt);
        KT_CHECK_MSG(kiln_save_tensor(path, t) == KILN_OK, "%s: %s", kiln_dtype_name(dt), kiln_last_error());
        kiln_tensor u = kiln_load_tensor(path, NULL, KILN_CPU);
        KT_CHECK(kiln_tensor_dtype(u) == dt && kiln_tensor_ndim(u) == 3 && kiln_tensor_dim(u, 2) == 5);
        KT_CHECK_MSG(same_bytes(t, u, 60 * kiln_dtype_size(dt)), "%s differs", kiln_dtype_name(dt));
    }
    /* 0-d, empty, a transposed view, and the name it is saved under */
    kiln_tensor s = kiln_full(KILN_CPU, KILN_F64, KILN_SCALAR_SHAPE, -3.25);
    KT_CHECK(kiln_save_tensor(path, s) == KILN_OK);
    kiln_release(s);
    double v = 0;
    KT_CHECK(kiln_into_scalar_f64(kiln_load_tensor(path, KILN_SAVED_TENSOR_NAME, KILN_CPU), &v) == KILN_OK && v == -3.25);
    kiln_tensor e = kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(0, 7));
    KT_CHECK(kiln_save_tensor(path, e) == KILN_OK);
    kiln_release(e);
    kiln_tensor le = kiln_load_tensor(path, NULL, KILN_CPU);
    KT_CHECK(kiln_tensor_ndim(le) == 2 && kiln_tensor_dim(le, 0) == 0 && kiln_tensor_dim(le, 1) == 7);
    kiln_release(le);
    kiln_tensor m = kiln_transpose(kiln_reshape(kiln_arange(KILN_CPU, KILN_F32, 0, 6, 1), KILN_SHAPE(2, 3)), 0, 1);
    KT_CHECK(kiln_save_tensor(path, m) == KILN_OK); /* m is not consumed */
    KT_CHECK(same_bytes(kiln_contiguous(m), kiln_load_tensor(path, NULL, KILN_CPU), 24));
    /* a file of several tensors: by name */
    kiln_tensor two[2] = {kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), kiln_full(KILN_CPU, KILN_I32, KILN_SHAPE(3), 7)};
    KT_CHECK(kiln_tensors_save(path, 2, (const char *[]){"a", "b"}, two) == KILN_OK);
    int32_t iv[3];
    KT_CHECK(kiln_into_data(kiln_load_tensor(path, "b", KILN_CPU), iv, sizeof iv) == KILN_OK && iv[0] == 7 && iv[2] == 7);
    KT_READ_ERROR(kiln_load_tensor(path, NULL, KILN_CPU), KILN_ERR_INVALID_ARGUMENT, "kiln_load_tensor");
    KT_READ_ERROR(kiln_load_tensor(path, "c", KILN_CPU), KILN_ERR_INVALID_ARGUMENT, "kiln_load_tensor");
    kiln_release(two[0]);
    kiln_release(two[1]);
    unlink(path);
    KT_MEM_CHECK();
}

static int count_temporaries(void) {
    DIR *d = opendir(".");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, "test_tensor_save.") && strstr(e->d_name, ".kiln-tmp-");
    if (d) closedir(d);
    return n;
}

static int failing_fsync(int fd) {
    (void)fd;
    errno = EIO;
    return -1;
}

KT_TEST(failed_save_keeps_the_old_file) {
    kt_mem_begin();
    const char *path = path_of("atomic.safetensors");
    kiln_tensor old = kiln_arange(KILN_CPU, KILN_F32, 0, 4, 1), next = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(9));
    KT_CHECK(kiln_save_tensor(path, old) == KILN_OK);
    kiln__st_fsync = failing_fsync;
    int line = __LINE__ + 1;
    KT_CHECK(kiln_save_tensor(path, next) == KILN_ERR_IO);
    KT_EXPECT_ERROR(KILN_ERR_IO, "kiln_save_tensor", line);
    kiln__st_fsync = fsync;
    KT_CHECK(count_temporaries() == 0);
    KT_CHECK(same_bytes(kiln_ref(old), kiln_load_tensor(path, NULL, KILN_CPU), 16)); /* the old one, whole */
    /* bad arguments: a status naming the call, nothing written */
    line = __LINE__ + 1;
    KT_CHECK(kiln_save_tensor(NULL, old) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_save_tensor", line);
    kiln_tensor stale = kiln_ref(old);
    kiln_release(stale);
    line = __LINE__ + 1;
    KT_CHECK(kiln_save_tensor(path, stale) == KILN_ERR_STALE_HANDLE);
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_save_tensor", line);
    kiln_tensor poisoned = kiln_reshape(kiln_ref(old), KILN_SHAPE(3));
    KT_CHECK(kiln_save_tensor(path, poisoned) == KILN_ERR_SHAPE); /* the tensor's own error */
    kiln_release(poisoned);
    KT_CHECK(kiln_save_tensor("no-such-dir/x.safetensors", old) == KILN_ERR_IO);
    KT_CHECK(same_bytes(kiln_ref(old), kiln_load_tensor(path, NULL, KILN_CPU), 16));
    kiln_release(old);
    kiln_release(next);
    unlink(path);
    KT_MEM_CHECK();
}

/* Writes bytes to path. */
static void write_file(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    KT_CHECK(f && fwrite(bytes, 1, n, f) == n);
    if (f) fclose(f);
}

/* A safetensors file from a header (padded, with its length in front) and data. */
static size_t make_file(unsigned char *buf, const char *header, const void *data, size_t data_len) {
    uint64_t n = strlen(header);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, header, n);
    memcpy(buf + 8 + n, data, data_len);
    return 8 + n + data_len;
}

KT_TEST(hostile_files) {
    kt_mem_begin();
    const char *path = path_of("bad.safetensors");
    KT_READ_ERROR(kiln_load_tensor(path_of("missing.safetensors"), NULL, KILN_CPU), KILN_ERR_IO, "kiln_load_tensor");
    KT_READ_ERROR(kiln_load_tensor(".", NULL, KILN_CPU), KILN_ERR_IO, "kiln_load_tensor"); /* a directory */
    KT_READ_ERROR(kiln_load_tensor(NULL, NULL, KILN_CPU), KILN_ERR_NULL, "kiln_load_tensor");
    /* a good file, then damaged: a flipped data byte (the CRC), truncated, empty */
    kiln_tensor t = kiln_arange(KILN_CPU, KILN_F32, 0, 64, 1);
    KT_CHECK(kiln_save_tensor(path, t) == KILN_OK);
    kiln_release(t);
    FILE *f = fopen(path, "rb");
    unsigned char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    KT_CHECK(n > 256);
    buf[n - 5] ^= 0x40;
    write_file(path, buf, n);
    KT_READ_ERROR(kiln_load_tensor(path, NULL, KILN_CPU), KILN_ERR_CORRUPT, "kiln_load_tensor");
    buf[n - 5] ^= 0x40;
    write_file(path, buf, n - 10);
    KT_READ_ERROR(kiln_load_tensor(path, NULL, KILN_CPU), KILN_ERR_CORRUPT, "kiln_load_tensor");
    write_file(path, buf, 3);
    KT_READ_ERROR(kiln_load_tensor(path, NULL, KILN_CPU), KILN_ERR_CORRUPT, "kiln_load_tensor");
    /* a header claiming 2^62 bytes in a file of 1 GiB (sparse): refused without reading it */
    unsigned char head[8] = {0, 0, 0, 0, 0, 0, 0, 0x40};
    double before = kt_peak_rss_mib();
    KT_CHECK(kt_write_sparse(path, head, 8, 1LL << 30) == 0);
    KT_READ_ERROR(kiln_load_tensor(path, NULL, KILN_CPU), KILN_ERR_CORRUPT, "kiln_load_tensor");
    KT_CHECK(kt_peak_rss_mib() - before < 64);
    /* malformed JSON, offsets beyond the data, shape and size at odds, a dtype kiln lacks */
    const char *headers[] = {"{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]",
                             "{\"x\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}",
                             "{\"x\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}",
                             "{\"x\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}",
                             "{\"x\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]}}"};
    const kiln_status want[] = {KILN_ERR_CORRUPT, KILN_ERR_CORRUPT, KILN_ERR_CORRUPT, KILN_ERR_CORRUPT, KILN_ERR_UNSUPPORTED};
    const unsigned char data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int i = 0; i < 5; i++) {
        write_file(path, buf, make_file(buf, headers[i], data, 8));
        KT_READ_ERROR(kiln_load_tensor(path, NULL, KILN_CPU), want[i], "kiln_load_tensor");
    }
    /* a foreign file's bools (any non-zero byte) read as 0 or 1 */
    write_file(path, buf, make_file(buf, "{\"x\": {\"dtype\": \"BOOL\", \"shape\": [8], \"data_offsets\": [0, 8]}}", data, 8));
    unsigned char b[8];
    KT_CHECK(kiln_into_data(kiln_load_tensor(path, "x", KILN_CPU), b, 8) == KILN_OK);
    for (int i = 0; i < 8; i++) KT_CHECK(b[i] == 1);
    KT_READ_ERROR(kiln_load_tensor(path, NULL, (kiln_device)7), KILN_ERR_DEVICE, "kiln_load_tensor");
    unlink(path);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(round_trips);
    KT_RUN(failed_save_keeps_the_old_file);
    KT_RUN(hostile_files);
    return kt_finish();
}
