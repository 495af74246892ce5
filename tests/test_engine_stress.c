/* Randomised stress: several threads push random op sequences over shared and private
 * tensors; the results must equal, bit for bit, the same program run with KILN_SYNC=1
 * (this binary re-runs itself in that mode and compares hashes). */
#include <kiln.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kiln_test.h"

#define THREADS 4
#define STEPS 400
#define SHARED 3
#define PRIVATE 4
#define N 48

static kiln_tensor shared[SHARED];

typedef struct {
    int id;
    uint64_t hash;
    int failures;
} worker;

static uint32_t next_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Keeps values in a tame range so every op stays finite. */
static kiln_tensor tame(kiln_tensor t) { return kiln_tanh(t); }

static void *run(void *arg) {
    worker *w = arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(w->id + 1);
    kiln_tensor p[PRIVATE];
    for (int i = 0; i < PRIVATE; i++) p[i] = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(N, N), (uint64_t)(100 * w->id + i));
    for (int step = 0; step < STEPS; step++) {
        int a = (int)(next_rand(&rng) % PRIVATE), b = (int)(next_rand(&rng) % PRIVATE);
        int s = (int)(next_rand(&rng) % SHARED);
        switch (next_rand(&rng) % 9) {
        case 0: p[a] = tame(kiln_add(p[a], kiln_ref(shared[s]))); break;
        case 1: p[a] = kiln_mul(p[a], kiln_ref(p[b])); break;
        case 2: p[a] = tame(kiln_matmul(p[a], kiln_ref(shared[s]))); break;
        case 3: p[a] = kiln_contiguous(kiln_transpose(p[a], 0, 1)); break;
        case 4: p[a] = kiln_softmax(kiln_mul_scalar(p[a], 3.0), -1); break;
        case 5: /* reduce and broadcast back */
            p[a] = kiln_sub(p[a], kiln_mean_dims(kiln_ref(p[b]), KILN_DIMS(0), true));
            break;
        case 6: /* drop and recreate */
            kiln_release(p[a]);
            p[a] = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(N, N), (uint64_t)step * 7 + (uint64_t)w->id);
            break;
        case 7: p[a] = kiln_where(kiln_gt_scalar(kiln_ref(shared[s]), 0.0), p[a], kiln_neg(kiln_ref(p[b]))); break;
        default: { /* a read in the middle */
            float v;
            if (kiln_into_scalar(kiln_sum(kiln_ref(p[a])), &v) != KILN_OK) w->failures++;
            w->hash = fnv(w->hash, &v, sizeof v);
        }
        }
    }
    float buf[PRIVATE][N * N];
    kiln_transaction *tx = kiln_transaction_new();
    for (int i = 0; i < PRIVATE; i++) kiln_transaction_read(tx, p[i], buf[i], sizeof buf[i]);
    if (kiln_transaction_execute(tx) != KILN_OK) w->failures++;
    kiln_transaction_free(tx);
    w->hash = fnv(w->hash, buf, sizeof buf);
    return NULL;
}

static void workload(uint64_t hashes[THREADS], int *failures) {
    for (int i = 0; i < SHARED; i++) shared[i] = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(N, N), 999 + (uint64_t)i);
    pthread_t th[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.id = i, .hash = 1469598103934665603ull};
        pthread_create(&th[i], NULL, run, &w[i]);
    }
    *failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        hashes[i] = w[i].hash;
        *failures += w[i].failures;
    }
    for (int i = 0; i < SHARED; i++) kiln_release(shared[i]);
}

KT_TEST(async_equals_sync_bit_for_bit) {
    uint64_t h[THREADS];
    int failures;
    workload(h, &failures);
    KT_CHECK(failures == 0);
    KT_CHECK(kiln_sync_all() == KILN_OK);
    /* the reference: this program again, every op run at dispatch */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "KILN_SYNC=1 KILN_STRESS_CHILD=1 /proc/%d/exe", (int)getpid());
    FILE *f = popen(cmd, "r");
    KT_CHECK(f != NULL);
    if (!f) return;
    uint64_t ref[THREADS] = {0};
    for (int i = 0; i < THREADS; i++) KT_CHECK(fscanf(f, "%llx", (unsigned long long *)&ref[i]) == 1);
    KT_CHECK(pclose(f) == 0);
    for (int i = 0; i < THREADS; i++) KT_CHECK_MSG(h[i] == ref[i], "thread %d: %llx vs sync %llx", i, (unsigned long long)h[i], (unsigned long long)ref[i]);
}

int main(void) {
    if (getenv("KILN_STRESS_CHILD")) {
        uint64_t h[THREADS];
        int failures;
        workload(h, &failures);
        for (int i = 0; i < THREADS; i++) printf("%llx\n", (unsigned long long)h[i]);
        return failures != 0;
    }
    KT_RUN(async_equals_sync_bit_for_bit);
    return kt_finish();
}
