/* Datasets: user datasets, in-memory data, the IDX reader (plain and gzip'd files written
 * here into a temp dir, damaged files, the real Fashion-MNIST when installed) and transforms
 * (normalize against a double reference; crop and flip against shifted / mirrored copies of a
 * known image; determinism). Bad input for every constructor; no leaks. */
#include <kiln.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/data-impl.h"
#include "ew_util.h"
#include "kiln_test.h"


/* The last error is `st`, names `what` (an op or a path) and this file's line `line`. */

/* Reads a sample's tensors (consumed) as doubles. */
static void read_sample(kiln_tensor x, kiln_tensor y, double *xv, int64_t xn, double *yv, int64_t yn) {
    KT_CHECK(kiln_into_data(kiln_cast(x, KILN_F64), xv, sizeof(double) * (size_t)xn) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_cast(y, KILN_F64), yv, sizeof(double) * (size_t)yn) == KILN_OK);
}

/* ---- a user dataset: input [2] = (i, -i), target i32 = 3i; get fails for index 4 -------- */
static int user_frees;
static int64_t user_length(void *ctx) { return *(int64_t *)ctx; }
static kiln_status user_get(void *ctx, int64_t i, void *in, void *tg, uint64_t seed) {
    if (i == 4) return kiln__report(KILN_ERR_CORRUPT, "user get", "sample four is damaged");
    if (i == 5) return KILN_DONE; /* a status that is no error: still a failed sample */
    ((float *)in)[0] = (float)i;
    ((float *)in)[1] = (float)-i;
    *(int32_t *)tg = (int32_t)(3 * i);
    return KILN_OK;
}
static void user_free(void *ctx) { user_frees++; }

KT_TEST(user_dataset) {
    ew_mark m = ew_mark_now();
    static int64_t n = 8;
    kiln_dataset_desc d = {.input_dtype = KILN_F32, .target_dtype = KILN_I32, .input_shape = KILN_SHAPE(2),
                           .target_shape = KILN_SCALAR_SHAPE, .length = user_length, .get = user_get, .free = user_free};
    kiln_dataset *ds = kiln_dataset_new(d, &n);
    KT_CHECK(ds && kiln_dataset_length(ds) == 8);
    kiln_tensor x, y;
    double xv[2], yv[1];
    for (int64_t i = 0; i < 4; i++) {
        KT_CHECK(kiln_dataset_get(ds, i, &x, &y) == KILN_OK);
        KT_CHECK(kiln_tensor_ndim(x) == 1 && kiln_tensor_dim(x, 0) == 2 && kiln_tensor_ndim(y) == 0);
        KT_CHECK(kiln_tensor_dtype(x) == KILN_F32 && kiln_tensor_dtype(y) == KILN_I32);
        read_sample(x, y, xv, 2, yv, 1);
        KT_CHECK(xv[0] == (double)i && xv[1] == (double)-i && yv[0] == 3.0 * (double)i);
    }
    /* errors: out of range, NULL, a failing get (its message kept), a get returning DONE */
    int line = __LINE__ + 1;
    KT_CHECK(kiln_dataset_get(ds, 8, &x, &y) == KILN_ERR_INDEX && x.id == 0 && y.id == 0);
    KT_EXPECT_ERROR(KILN_ERR_INDEX, "kiln_dataset_get", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_dataset_get(ds, -1, &x, &y) == KILN_ERR_INDEX);
    KT_EXPECT_ERROR(KILN_ERR_INDEX, "kiln_dataset_get", line);
    KT_CHECK(kiln_dataset_get(NULL, 0, &x, &y) == KILN_ERR_NULL);
    KT_CHECK(kiln_dataset_get(ds, 0, NULL, &y) == KILN_ERR_NULL);
    line = __LINE__ + 1;
    KT_CHECK(kiln_dataset_get(ds, 4, &x, &y) == KILN_ERR_CORRUPT && x.id == 0);
    KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "kiln_dataset_get", line);
    KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "sample 4: user get: sample four is damaged", 0);
    KT_CHECK(kiln_dataset_get(ds, 5, &x, &y) == KILN_ERR_INTERNAL);
    KT_EXPECT_ERROR(KILN_ERR_INTERNAL, "sample 5: get: returned no more data", 0);
    kiln_dataset_free(ds);
    KT_CHECK(user_frees == 1);
    kiln_dataset_free(NULL);
    KT_CHECK(kiln_dataset_length(NULL) == -1);

    /* bad descriptors: NULL, the context freed through desc.free */
    kiln_dataset_desc bad[4] = {d, d, d, d};
    bad[0].get = NULL;
    bad[1].input_dtype = KILN_DTYPE_COUNT;
    bad[2].target_shape = (kiln_shape){9, {0}};
    bad[3].input_shape = KILN_SHAPE(2, -1);
    const kiln_status want[4] = {KILN_ERR_NULL, KILN_ERR_DTYPE, KILN_ERR_SHAPE, KILN_ERR_SHAPE};
    for (int k = 0; k < 4; k++) {
        line = __LINE__ + 1;
        KT_CHECK(kiln_dataset_new(bad[k], &n) == NULL);
        KT_EXPECT_ERROR(want[k], "kiln_dataset_new", line);
        KT_CHECK(user_frees == 2 + k);
    }
    EW_NO_LEAKS(m);
}

KT_TEST(memory_dataset) {
    ew_mark m = ew_mark_now();
    enum { N = 6 };
    float xs[N][2][3];
    int64_t ys[N];
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 6; j++) xs[i][j / 3][j % 3] = (float)(10 * i + j);
        ys[i] = 100 + i;
    }
    /* inputs given as a transposed view: the dataset keeps dense copies */
    kiln_tensor xt = kiln_contiguous(kiln_transpose(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N, 2, 3), xs), 1, 2));
    kiln_tensor x_view = kiln_transpose(xt, 1, 2);
    kiln_dataset *ds = kiln_memory_dataset_new(x_view, kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(N), ys));
    KT_CHECK(ds && kiln_dataset_length(ds) == N);
    for (int i = 0; ds && i < N; i++) {
        kiln_tensor x, y;
        double xv[6], yv[1];
        KT_CHECK(kiln_dataset_get(ds, i, &x, &y) == KILN_OK);
        kiln_shape s = kiln_tensor_shape(x);
        KT_CHECK(s.ndim == 2 && s.dims[0] == 2 && s.dims[1] == 3 && kiln_tensor_ndim(y) == 0);
        read_sample(x, y, xv, 6, yv, 1);
        for (int j = 0; j < 6; j++) KT_CHECK(xv[j] == 10 * i + j);
        KT_CHECK(yv[0] == 100 + i);
    }
    kiln_dataset_free(ds);

    /* empty dataset: fine */
    ds = kiln_memory_dataset_new(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 4)), kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(0)));
    KT_CHECK(ds && kiln_dataset_length(ds) == 0);
    kiln_dataset_free(ds);

    /* bad input: both arguments are consumed on every path */
    int line = __LINE__ + 1;
    KT_CHECK(!kiln_memory_dataset_new(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2)), kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(4))));
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_memory_dataset_new", line);
    line = __LINE__ + 1;
    KT_CHECK(!kiln_memory_dataset_new(kiln_zeros(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(1))));
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_memory_dataset_new", line);
    kiln_tensor stale = ew_stale();
    line = __LINE__ + 1;
    KT_CHECK(!kiln_memory_dataset_new(stale, kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(2))));
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_memory_dataset_new", line);
    stale = ew_stale();
    KT_CHECK(!kiln_memory_dataset_new(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), stale));
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "targets", 0);
    kiln_tensor poisoned = EW_POISONED();
    KT_CHECK(!kiln_memory_dataset_new(poisoned, kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(2))));
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_reshape", 0);
    KT_CHECK(!kiln_memory_dataset_new(KILN_NONE, KILN_NONE));
    KT_CHECK(kiln_last_status() != KILN_OK);
    EW_NO_LEAKS(m);
}

/* ---- IDX files ----------------------------------------------------------------------------- */
static char tmp_dir[64];

static const char *tmp_path(const char *name) {
    static char paths[8][128];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 128, "%s/%s", tmp_dir, name);
    return p;
}

static void write_file(const char *path, const unsigned char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    KT_CHECK(f != NULL);
    if (!f) return;
    KT_CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static uint32_t crc32_of(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

/* A gzip file of `stored` deflate blocks (RFC 1951 3.2.4) of at most 100 bytes: no zlib needed
 * to write it, and it crosses many block boundaries. Returns its size in out (cap bytes). */
static size_t gzip_stored(const unsigned char *data, size_t n, unsigned char *out, size_t cap) {
    size_t at = 0;
    const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
    memcpy(out, head, 10);
    at = 10;
    size_t done = 0;
    do {
        size_t len = n - done < 100 ? n - done : 100;
        KT_CHECK(at + 5 + len + 8 <= cap);
        out[at++] = done + len == n; /* BFINAL, BTYPE 00 */
        out[at++] = (unsigned char)len, out[at++] = (unsigned char)(len >> 8);
        out[at++] = (unsigned char)~len, out[at++] = (unsigned char)(~len >> 8);
        memcpy(out + at, data + done, len);
        at += len, done += len;
    } while (done < n);
    uint32_t crc = crc32_of(data, n), size = (uint32_t)n;
    for (int k = 0; k < 4; k++) out[at++] = (unsigned char)(crc >> (8 * k));
    for (int k = 0; k < 4; k++) out[at++] = (unsigned char)(size >> (8 * k));
    return at;
}

static size_t put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
    return 4;
}

/* An IDX file of u8 data: magic, dims, then `data_bytes` bytes of pixel(i) = (7 i + 3) % 256. */
static size_t idx_bytes(unsigned char *out, uint32_t magic, int ndim, const uint32_t *dims, size_t data_bytes) {
    size_t at = put_be32(out, magic);
    for (int d = 0; d < ndim; d++) at += put_be32(out + at, dims[d]);
    for (size_t i = 0; i < data_bytes; i++) out[at++] = (unsigned char)((7 * i + 3) % 256);
    return at;
}

enum { NI = 5, H = 3, W = 4 };
static unsigned char img_file[16 + NI * H * W], lbl_file[8 + NI];
static size_t img_size, lbl_size;

static void make_idx_pair(void) {
    img_size = idx_bytes(img_file, 0x803, 3, (uint32_t[]){NI, H, W}, NI * H * W);
    lbl_size = idx_bytes(lbl_file, 0x801, 1, (uint32_t[]){NI}, NI);
}

static void check_idx_dataset(kiln_dataset *ds) {
    KT_CHECK(ds != NULL);
    if (!ds) return;
    KT_CHECK(kiln_dataset_length(ds) == NI);
    for (int i = 0; i < NI; i++) {
        kiln_tensor x, y;
        double xv[H * W], yv[1];
        KT_CHECK(kiln_dataset_get(ds, i, &x, &y) == KILN_OK);
        kiln_shape s = kiln_tensor_shape(x);
        KT_CHECK(s.ndim == 3 && s.dims[0] == 1 && s.dims[1] == H && s.dims[2] == W);
        KT_CHECK(kiln_tensor_dtype(x) == KILN_F32 && kiln_tensor_dtype(y) == KILN_I64 && kiln_tensor_ndim(y) == 0);
        read_sample(x, y, xv, H * W, yv, 1);
        int bad = 0;
        for (int j = 0; j < H * W; j++) bad += xv[j] != (double)(float)(((7 * (i * H * W + j) + 3) % 256) / 255.0);
        KT_CHECK_MSG(bad == 0, "sample %d: %d pixels differ", i, bad);
        KT_CHECK(yv[0] == (7 * i + 3) % 256);
    }
    kiln_dataset_free(ds);
}

/* Whether this build reads gzip'd files (it reports KILN_ERR_UNSUPPORTED otherwise). */
static bool have_gzip;

KT_TEST(idx_round_trip) {
    ew_mark m = ew_mark_now();
    make_idx_pair();
    write_file(tmp_path("img"), img_file, img_size);
    write_file(tmp_path("lbl"), lbl_file, lbl_size);
    check_idx_dataset(kiln_idx_dataset_new(tmp_path("img"), tmp_path("lbl")));

    static unsigned char gz_img[1024], gz_lbl[256];
    size_t gi = gzip_stored(img_file, img_size, gz_img, sizeof gz_img);
    size_t gl = gzip_stored(lbl_file, lbl_size, gz_lbl, sizeof gz_lbl);
    write_file(tmp_path("img.gz"), gz_img, gi);
    write_file(tmp_path("lbl.gz"), gz_lbl, gl);
    kiln_dataset *ds = kiln_idx_dataset_new(tmp_path("img.gz"), tmp_path("lbl.gz"));
    have_gzip = ds != NULL;
    if (ds) {
        check_idx_dataset(ds);
        /* a plain file beside a gzip'd one */
        check_idx_dataset(kiln_idx_dataset_new(tmp_path("img.gz"), tmp_path("lbl")));
    } else {
        KT_EXPECT_ERROR(KILN_ERR_UNSUPPORTED, "built without zlib", 0);
        fprintf(stderr, "  (this build reads no gzip'd files: gzip cases skipped)\n");
    }
    EW_NO_LEAKS(m);
}

/* The images file `img` (size n) paired with the good labels file must fail with st,
 * naming the images path. */
static void expect_bad_images(const unsigned char *img, size_t n, bool gz, kiln_status st, const char *detail, int here) {
    static unsigned char packed[2048];
    const char *path = tmp_path(gz ? "bad.gz" : "bad");
    if (gz) n = gzip_stored(img, n, packed, sizeof packed), img = packed;
    write_file(path, img, n);
    kiln_dataset *ds = kiln_idx_dataset_new(path, tmp_path("lbl"));
    KT_CHECK_MSG(ds == NULL, "line %d: a damaged file was accepted", here);
    kiln_dataset_free(ds);
    kt_expect_error_at(st, path, __FILE__, 0, here);
    if (detail) kt_expect_error_at(st, detail, __FILE__, 0, here);
}

/* Every byte value converts to (float)(v / 255.0), the value the loader's 256-entry table held
 * before src/data/idx.c divided in float: one 16 x 16 image of (7 i + 3) % 256, which takes
 * every value once. */
KT_TEST(idx_every_byte_value) {
    ew_mark m = ew_mark_now();
    static unsigned char img[16 + 256], lbl[8 + 1];
    size_t ni = idx_bytes(img, 0x803, 3, (uint32_t[]){1, 16, 16}, 256), nl = idx_bytes(lbl, 0x801, 1, (uint32_t[]){1}, 1);
    write_file(tmp_path("img256"), img, ni);
    write_file(tmp_path("lbl1"), lbl, nl);
    kiln_dataset *ds = kiln_idx_dataset_new(tmp_path("img256"), tmp_path("lbl1"));
    KT_CHECK(ds != NULL);
    kiln_tensor x, y;
    if (ds && kiln_dataset_get(ds, 0, &x, &y) == KILN_OK) {
        double xv[256], yv[1];
        read_sample(x, y, xv, 256, yv, 1);
        int bad = 0;
        for (int i = 0; i < 256; i++) bad += xv[i] != (double)(float)(((7 * i + 3) % 256) / 255.0);
        KT_CHECK_MSG(bad == 0, "%d byte values convert to another float", bad);
    } else {
        KT_CHECK(false);
    }
    kiln_dataset_free(ds);
    EW_NO_LEAKS(m);
}

KT_TEST(idx_damaged) {
    ew_mark m = ew_mark_now();
    make_idx_pair();
    write_file(tmp_path("lbl"), lbl_file, lbl_size);
    unsigned char buf[1024];
    for (int gz = 0; gz <= (int)have_gzip; gz++) {
        /* wrong magic: labels where images belong, another type byte, garbage */
        size_t n = idx_bytes(buf, 0x801, 3, (uint32_t[]){NI, H, W}, NI * H * W);
        expect_bad_images(buf, n, gz, KILN_ERR_CORRUPT, "magic 0x00000801, expected 0x00000803", __LINE__);
        n = idx_bytes(buf, 0x0d03, 3, (uint32_t[]){NI, H, W}, NI * H * W);
        expect_bad_images(buf, n, gz, KILN_ERR_CORRUPT, "magic", __LINE__);
        /* truncated at every position of the header and in the data */
        for (size_t cut = 0; cut < img_size; cut += cut < 20 ? 1 : 9)
            expect_bad_images(img_file, cut, gz, KILN_ERR_CORRUPT, "truncated", __LINE__);
        /* dims larger than the data; dims no file can hold; zero-size images; trailing bytes */
        n = idx_bytes(buf, 0x803, 3, (uint32_t[]){NI, H + 1, W}, NI * H * W);
        expect_bad_images(buf, n, gz, KILN_ERR_CORRUPT, "dims 5 x 4 x 4 need 80 bytes of data, the file has 60", __LINE__);
        n = idx_bytes(buf, 0x803, 3, (uint32_t[]){1u << 20, 1000, 1000}, NI * H * W); /* 1 TB: not allocated */
        expect_bad_images(buf, n, gz, KILN_ERR_CORRUPT, "truncated", __LINE__);
        n = idx_bytes(buf, 0x803, 3, (uint32_t[]){0xffffffffu, 0xffffffffu, 0xffffffffu}, 8);
        expect_bad_images(buf, n, gz, KILN_ERR_CORRUPT, "too large", __LINE__);
        n = idx_bytes(buf, 0x803, 3, (uint32_t[]){NI, 0, W}, 0);
        expect_bad_images(buf, n, gz, KILN_ERR_CORRUPT, "images of size", __LINE__);
        n = idx_bytes(buf, 0x803, 3, (uint32_t[]){NI, H, W}, NI * H * W + 3);
        expect_bad_images(buf, n, gz, KILN_ERR_CORRUPT, "more data than", __LINE__);
    }
    if (have_gzip) {
        /* a damaged gzip stream: wrong CRC, truncated inside the compressed stream, garbage */
        static unsigned char gz[1024];
        size_t n = gzip_stored(img_file, img_size, gz, sizeof gz);
        const char *path = tmp_path("damaged.gz");
        for (int k = 0; k < 3; k++) {
            static unsigned char copy[1024];
            memcpy(copy, gz, n);
            size_t len = n;
            if (k == 0) copy[n - 6] ^= 0x55; /* CRC */
            if (k == 1) len = n - 20;         /* mid-stream */
            if (k == 2) copy[10] = 0x07;      /* invalid block type */
            write_file(path, copy, len);
            KT_CHECK(kiln_idx_dataset_new(path, tmp_path("lbl")) == NULL);
            KT_EXPECT_ERROR(KILN_ERR_CORRUPT, path, 0);
        }
    }
    /* a labels file with an images magic, truncated labels, mismatched counts */
    write_file(tmp_path("img"), img_file, img_size);
    size_t n = idx_bytes(buf, 0x803, 1, (uint32_t[]){NI}, NI);
    write_file(tmp_path("lbl2"), buf, n);
    int line = __LINE__ + 1;
    KT_CHECK(kiln_idx_dataset_new(tmp_path("img"), tmp_path("lbl2")) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "kiln_idx_dataset_new", line);
    KT_EXPECT_ERROR(KILN_ERR_CORRUPT, tmp_path("lbl2"), 0);
    write_file(tmp_path("lbl2"), lbl_file, lbl_size - 1);
    KT_CHECK(kiln_idx_dataset_new(tmp_path("img"), tmp_path("lbl2")) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "truncated", 0);
    n = idx_bytes(buf, 0x801, 1, (uint32_t[]){NI + 1}, NI + 1);
    write_file(tmp_path("lbl2"), buf, n);
    KT_CHECK(kiln_idx_dataset_new(tmp_path("img"), tmp_path("lbl2")) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "holds 5 images but", 0);
    KT_EXPECT_ERROR(KILN_ERR_CORRUPT, "holds 6 labels", 0);
    /* missing files and NULL paths */
    line = __LINE__ + 1;
    KT_CHECK(kiln_idx_dataset_new(tmp_path("missing"), tmp_path("lbl")) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_IO, "kiln_idx_dataset_new", line);
    KT_EXPECT_ERROR(KILN_ERR_IO, "missing: cannot open", 0);
    KT_CHECK(kiln_idx_dataset_new(tmp_path("img"), tmp_path("missing.gz")) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_IO, "missing.gz", 0);
    KT_CHECK(kiln_idx_dataset_new(tmp_dir, tmp_path("lbl")) == NULL); /* a directory */
    KT_EXPECT_ERROR(KILN_ERR_IO, tmp_dir, 0);
    KT_CHECK(kiln_idx_dataset_new(NULL, tmp_path("lbl")) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "images path is NULL", 0);
    KT_CHECK(kiln_idx_dataset_new(tmp_path("img"), NULL) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "labels path is NULL", 0);
    EW_NO_LEAKS(m);
}

/* Fashion-MNIST from Debian's dataset-fashion-mnist, when installed. */
KT_TEST(fashion_mnist) {
    const char *dir = "/usr/share/datasets/fashion-mnist";
    char img[256], lbl[256];
    snprintf(img, sizeof img, "%s/train-images-idx3-ubyte.gz", dir);
    if (access(img, R_OK) != 0 || !have_gzip) {
        fprintf(stderr, "  (no readable %s: skipped)\n", img);
        return;
    }
    const char *split[2] = {"train", "t10k"};
    const int64_t want_n[2] = {60000, 10000};
    for (int s = 0; s < 2; s++) {
        snprintf(img, sizeof img, "%s/%s-images-idx3-ubyte.gz", dir, split[s]);
        snprintf(lbl, sizeof lbl, "%s/%s-labels-idx1-ubyte.gz", dir, split[s]);
        kiln_dataset *ds = kiln_idx_dataset_new(img, lbl);
        KT_CHECK_MSG(ds != NULL, "%s", kiln_last_error());
        if (!ds) continue;
        KT_CHECK(kiln_dataset_length(ds) == want_n[s]);
        KT_CHECK(ds->desc.input_shape.ndim == 3 && ds->desc.input_shape.dims[1] == 28 && ds->desc.input_shape.dims[2] == 28);
        /* every label in 0..9, every class present; pixels in [0, 1] with some ink */
        int64_t per_class[10] = {0}, bad = 0;
        static float px[784];
        double ink = 0;
        for (int64_t i = 0; i < want_n[s]; i++) {
            int64_t label = -1;
            KT_CHECK(ds->desc.get(ds->ctx, i, px, &label, 0) == KILN_OK);
            if (label < 0 || label > 9) {
                bad++;
                continue;
            }
            per_class[label]++;
            if (i % 97 == 0)
                for (int j = 0; j < 784; j++) bad += !(px[j] >= 0 && px[j] <= 1), ink += px[j];
        }
        KT_CHECK(bad == 0);
        KT_CHECK(ink > 0);
        for (int c = 0; c < 10; c++) KT_CHECK(per_class[c] == want_n[s] / 10); /* the set is balanced */
        kiln_dataset_free(ds);
    }
}

/* ---- transforms --------------------------------------------------------------------------- */

/* A memory dataset of n copies of one [C, Hh, Ww] image (value at (c, y, x) = 1 + c*100 + y*10 + x)
 * in dtype dt, so index i differs from index j only in the per-sample seed. */
static kiln_dataset *image_dataset(int n, int c, int hh, int ww, kiln_dtype dt) {
    double *v = malloc(sizeof(double) * (size_t)(n * c * hh * ww));
    for (int i = 0; i < n * c * hh * ww; i++) {
        int r = i % (c * hh * ww);
        v[i] = 1 + (r / (hh * ww)) * 100 + (r / ww % hh) * 10 + r % ww;
    }
    kiln_tensor x = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(n, c, hh, ww), v), dt);
    free(v);
    return kiln_memory_dataset_new(x, kiln_arange(KILN_CPU, KILN_I64, 0, n, 1));
}

/* Reads sample i's input of ds as doubles into out. */
static void input_of(kiln_dataset *ds, int64_t i, double *out, int64_t numel) {
    kiln_tensor x, y;
    KT_CHECK(kiln_dataset_get(ds, i, &x, &y) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_cast(x, KILN_F64), out, sizeof(double) * (size_t)numel) == KILN_OK);
    kiln_release(y);
}

KT_TEST(transform_normalize) {
    ew_mark m = ew_mark_now();
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    const double mean[3] = {100, 150.5, -2}, stdv[3] = {50, 0.25, 3};
    for (int k = 0; k < 4; k++) {
        for (int per_channel = 0; per_channel < 2; per_channel++) {
            int n = per_channel ? 3 : 1;
            kiln_dataset *ds = kiln_transform_normalize(image_dataset(2, 3, 2, 2, dts[k]), n, mean, stdv);
            KT_CHECK(ds != NULL);
            if (!ds) continue;
            double got[12];
            input_of(ds, 1, got, 12);
            double tol = dts[k] == KILN_F64 ? 1e-12 : dts[k] == KILN_F32 ? 1e-6 : dts[k] == KILN_F16 ? 2e-3 : 1e-2;
            for (int i = 0; i < 12; i++) {
                int c = i / 4;
                double want = ((1 + c * 100 + (i / 2 % 2) * 10 + i % 2) - mean[per_channel ? c : 0]) / stdv[per_channel ? c : 0];
                KT_NEAR(got[i], want, tol);
            }
            kiln_dataset_free(ds);
        }
    }
    /* bad arguments: the base is taken (freed) on every path */
    const double zero[3] = {1, 0, 1}, nan3[3] = {NAN, 0, 0};
    kiln_dataset *base = image_dataset(1, 3, 2, 2, KILN_F32); /* apart: its own calls move the call site */
    int line = __LINE__ + 1;
    KT_CHECK(!kiln_transform_normalize(base, 2, mean, stdv));
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_transform_normalize", line);
    KT_CHECK(!kiln_transform_normalize(image_dataset(1, 3, 2, 2, KILN_F32), 0, mean, stdv));
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_transform_normalize", 0);
    KT_CHECK(!kiln_transform_normalize(image_dataset(1, 3, 2, 2, KILN_F32), 3, mean, zero));
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "std non-zero", 0);
    KT_CHECK(!kiln_transform_normalize(image_dataset(1, 3, 2, 2, KILN_F32), 1, nan3, stdv));
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "finite", 0);
    KT_CHECK(!kiln_transform_normalize(image_dataset(1, 3, 2, 2, KILN_I32), 1, mean, stdv));
    KT_EXPECT_ERROR(KILN_ERR_DTYPE, "float inputs", 0);
    KT_CHECK(!kiln_transform_normalize(image_dataset(1, 3, 2, 2, KILN_F32), 1, NULL, stdv));
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_transform_normalize", 0);
    KT_CHECK(!kiln_transform_normalize(NULL, 1, mean, stdv));
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_transform_normalize", 0);
    EW_NO_LEAKS(m);
}

enum { CN = 400, CC = 2, CH = 5, CW = 6 };

/* Which shift (dy, dx) in [-p, p] makes got from the test image, or -1 if none. */
static int which_shift(const double *got, int p) {
    for (int dy = -p; dy <= p; dy++)
        for (int dx = -p; dx <= p; dx++) {
            bool same = true;
            for (int i = 0; same && i < CC * CH * CW; i++) {
                int c = i / (CH * CW), y = i / CW % CH, x = i % CW, sy = y + dy, sx = x + dx;
                double want = sy < 0 || sy >= CH || sx < 0 || sx >= CW ? 0 : 1 + c * 100 + sy * 10 + sx;
                same = got[i] == want;
            }
            if (same) return (dy + p) * (2 * p + 1) + dx + p;
        }
    return -1;
}

KT_TEST(transform_random_crop) {
    ew_mark m = ew_mark_now();
    const kiln_dtype dts[] = {KILN_F32, KILN_I64, KILN_F16, KILN_F64};
    for (int k = 0; k < 4; k++) {
        int p = k == 3 ? 0 : 2, span = (2 * p + 1) * (2 * p + 1); /* padding 0: the identity */
        kiln_dataset *ds = kiln_transform_random_crop(image_dataset(CN, CC, CH, CW, dts[k]), p);
        KT_CHECK(ds != NULL);
        if (!ds) continue;
        int seen[25] = {0}, unmatched = 0;
        static double got[CC * CH * CW], again[CC * CH * CW];
        for (int i = 0; i < CN; i++) {
            input_of(ds, i, got, CC * CH * CW);
            int s = which_shift(got, p);
            if (s < 0) unmatched++;
            else seen[s]++;
            if (i < 20) { /* the same sample seed gives the same crop */
                input_of(ds, i, again, CC * CH * CW);
                KT_CHECK(memcmp(got, again, sizeof got) == 0);
            }
        }
        KT_CHECK_MSG(unmatched == 0, "%s: %d crops are no shifted copy", kiln_dtype_name(dts[k]), unmatched);
        for (int s = 0; s < span; s++) KT_CHECK_MSG(seen[s] > 0, "offset %d never drawn (%d samples)", s, CN);
        kiln_dataset_free(ds);
    }
    /* padding larger than the image: blank or shifted, never out of bounds */
    kiln_dataset *ds = kiln_transform_random_crop(image_dataset(50, 1, 2, 3, KILN_F32), 7);
    for (int i = 0; ds && i < 50; i++) {
        double got[6];
        input_of(ds, i, got, 6);
    }
    kiln_dataset_free(ds);
    kiln_dataset *base = image_dataset(1, 1, 2, 3, KILN_F32);
    int line = __LINE__ + 1;
    KT_CHECK(!kiln_transform_random_crop(base, -1));
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_transform_random_crop", line);
    KT_CHECK(!kiln_transform_random_crop(kiln_memory_dataset_new(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 5)),
                                                                 kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(2))), 1));
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "at least 2 dims", 0);
    KT_CHECK(!kiln_transform_random_crop(NULL, 1));
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_transform_random_crop", 0);
    EW_NO_LEAKS(m);
}

KT_TEST(transform_random_hflip) {
    ew_mark m = ew_mark_now();
    const double probs[] = {0, 1, 0.5, 0.2};
    const kiln_dtype dts[] = {KILN_I32, KILN_F64, KILN_F16, KILN_F32};
    for (int k = 0; k < 4; k++) {
        kiln_dataset *ds = kiln_transform_random_hflip(image_dataset(CN, CC, CH, CW, dts[k]), probs[k]);
        KT_CHECK(ds != NULL);
        if (!ds) continue;
        int flipped = 0, other = 0;
        for (int i = 0; i < CN; i++) {
            double got[CC * CH * CW];
            input_of(ds, i, got, CC * CH * CW);
            bool same = true, mirrored = true;
            for (int j = 0; j < CC * CH * CW; j++) {
                int c = j / (CH * CW), y = j / CW % CH, x = j % CW;
                same &= got[j] == 1 + c * 100 + y * 10 + x;
                mirrored &= got[j] == 1 + c * 100 + y * 10 + (CW - 1 - x);
            }
            flipped += mirrored;
            other += !same && !mirrored;
        }
        KT_CHECK(other == 0);
        double frac = (double)flipped / CN;
        KT_CHECK_MSG(fabs(frac - probs[k]) < 0.08, "p %g: flipped %g of the samples", probs[k], frac);
        kiln_dataset_free(ds);
    }
    /* stacked transforms: crop then flip then normalize, all deterministic per seed */
    kiln_dataset *ds = kiln_transform_normalize(
        kiln_transform_random_hflip(kiln_transform_random_crop(image_dataset(8, 1, 4, 4, KILN_F32), 1), 0.5), 1,
        (double[]){1}, (double[]){2});
    KT_CHECK(ds != NULL);
    for (int i = 0; ds && i < 8; i++) {
        double a[16], b[16];
        input_of(ds, i, a, 16);
        input_of(ds, i, b, 16);
        KT_CHECK(memcmp(a, b, sizeof a) == 0);
    }
    kiln_dataset_free(ds);
    const double bad[] = {-0.1, 1.5, NAN};
    for (int k = 0; k < 3; k++) {
        kiln_dataset *base = image_dataset(1, 1, 2, 2, KILN_F32);
        int line = __LINE__ + 1;
        KT_CHECK(!kiln_transform_random_hflip(base, bad[k]));
        KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_transform_random_hflip", line);
    }
    EW_NO_LEAKS(m);
}

/* ---- hostile IDX files --------------------------------------------------------------------- */

/* A FIFO blocked open() forever waiting for a writer; a device never ends. The alarm turns a
 * hang into a failed test. */
KT_TEST(idx_special_files) {
    make_idx_pair();
    write_file(tmp_path("img"), img_file, img_size);
    write_file(tmp_path("lbl"), lbl_file, lbl_size);
    const char *fifo = tmp_path("fifo");
    KT_CHECK(mkfifo(fifo, 0600) == 0);
    alarm(20);
    const char *paths[] = {fifo, "/dev/zero", "/dev/null"};
    for (int i = 0; i < 3; i++) {
        int line = __LINE__ + 1;
        KT_CHECK(kiln_idx_dataset_new(paths[i], tmp_path("lbl")) == NULL);
        KT_EXPECT_ERROR(KILN_ERR_IO, "kiln_idx_dataset_new", line);
        KT_EXPECT_ERROR(KILN_ERR_IO, paths[i], 0);
        KT_EXPECT_ERROR(KILN_ERR_IO, "not a regular file", 0);
        KT_CHECK(kiln_idx_dataset_new(tmp_path("img"), paths[i]) == NULL);
        KT_EXPECT_ERROR(KILN_ERR_IO, paths[i], 0);
    }
    alarm(0);
    unlink(fifo);
}

/* Deflate's fixed Huffman codes (RFC 1951 3.2.6), written most significant bit first into a
 * stream filled from each byte's least significant bit. */
typedef struct {
    unsigned char *out;
    size_t at;
    int bit;
} bits;

static void put_bits(bits *b, uint32_t code, int len, bool msb_first) {
    for (int i = 0; i < len; i++) {
        int v = msb_first ? (int)(code >> (len - 1 - i)) & 1 : (int)(code >> i) & 1;
        if (b->bit == 0) b->out[b->at] = 0;
        b->out[b->at] |= (unsigned char)(v << b->bit);
        if (++b->bit == 8) b->bit = 0, b->at++;
    }
}

static void put_literal(bits *b, unsigned v) {
    if (v < 144) put_bits(b, 0x30 + v, 8, true);
    else put_bits(b, 0x190 + v - 144, 9, true);
}

/* A gzip file (`cap` bytes at most) of idx (n bytes) followed by as many zero bytes as one
 * deflate block of 258-byte copies can hold: ~160x smaller than what it inflates to.
 * Returns the file's size and the zeros in *zeros. The CRC is wrong: nobody should get there. */
static size_t gzip_bomb(const unsigned char *idx, size_t n, unsigned char *out, size_t cap, uint64_t *zeros) {
    const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
    memcpy(out, head, 10);
    bits b = {out, 10, 0};
    put_bits(&b, 1, 1, false); /* BFINAL */
    put_bits(&b, 1, 2, false); /* BTYPE 01: fixed codes */
    for (size_t i = 0; i < n; i++) put_literal(&b, idx[i]);
    put_literal(&b, 0);
    *zeros = 1;
    while (b.at + 16 < cap) {
        put_bits(&b, 0xC5, 8, true); /* length code 285: 258 bytes */
        put_bits(&b, 0, 5, true);    /* distance code 0: 1 byte back */
        *zeros += 258;
    }
    put_bits(&b, 0, 7, true); /* end of block */
    size_t at = b.at + (b.bit != 0);
    memset(out + at, 0, 8);
    return at + 8;
}

/* Runs kiln_idx_dataset_new on img: it must fail with `st` naming `what`, within 2 s and
 * without its peak memory growing by more than 64 MiB. */
static void expect_fast_failure(const char *img, kiln_status st, const char *what, int here) {
    double rss = kt_peak_rss_mib();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kiln_dataset *ds = kiln_idx_dataset_new(img, tmp_path("lbl"));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, grew = kt_peak_rss_mib() - rss;
    KT_CHECK_MSG(ds == NULL, "line %d: accepted", here);
    kiln_dataset_free(ds);
    kt_expect_error_at(st, what, __FILE__, 0, here);
    KT_CHECK_MSG(grew < 64, "line %d: peak memory grew by %.0f MiB", here, grew);
    KT_CHECK_MSG(took < 2, "line %d: took %.2f s", here, took);
}

/* Headers that claim far more than the file can hold are rejected before any data is read:
 * a 1 GiB sparse file, a 1 MiB gzip that inflates to ~170 MB, both claiming 2^40 bytes. */
KT_TEST(idx_huge_claims) {
    make_idx_pair();
    write_file(tmp_path("lbl"), lbl_file, lbl_size);
    unsigned char head[16];
    size_t hn = idx_bytes(head, 0x803, 3, (uint32_t[]){1u << 20, 1024, 1024}, 0);
    const char *path = tmp_path("huge");
    KT_CHECK(kt_write_sparse(path, head, hn, 1LL << 30) == 0);
    expect_fast_failure(path, KILN_ERR_CORRUPT, "need 1099511627776 bytes of data, the file has 1073741808", __LINE__);
    unlink(path);
    if (!have_gzip) return;
    size_t cap = (size_t)1 << 20;
    unsigned char *gz = malloc(cap);
    uint64_t zeros;
    size_t n = gzip_bomb(head, hn, gz, cap, &zeros);
    KT_CHECK(zeros > (uint64_t)150 << 20);
    path = tmp_path("huge.gz");
    write_file(path, gz, n);
    expect_fast_failure(path, KILN_ERR_CORRUPT, "need 1099511627776 bytes of data, a gzip file of", __LINE__);
    /* a claim the file could hold, far below what it inflates to: stops right after it */
    hn = idx_bytes(head, 0x803, 3, (uint32_t[]){16, 1024, 1024}, 0);
    n = gzip_bomb(head, hn, gz, cap, &zeros);
    write_file(path, gz, n);
    expect_fast_failure(path, KILN_ERR_CORRUPT, "more data than dims 16 x 1024 x 1024 declare", __LINE__);
    unlink(path);
    free(gz);
}

int main(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/kiln_dataset_XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    KT_RUN(user_dataset);
    KT_RUN(memory_dataset);
    KT_RUN(idx_round_trip);
    KT_RUN(idx_every_byte_value);
    KT_RUN(idx_damaged);
    KT_RUN(idx_special_files);
    KT_RUN(idx_huge_claims);
    KT_RUN(fashion_mnist);
    KT_RUN(transform_normalize);
    KT_RUN(transform_random_crop);
    KT_RUN(transform_random_hflip);
    const char *names[] = {"img", "lbl", "img.gz", "lbl.gz", "bad", "bad.gz", "damaged.gz", "lbl2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
    rmdir(tmp_dir);
    return kt_finish();
}
