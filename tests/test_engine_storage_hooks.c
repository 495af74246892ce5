/* How core reaches up without calling up: a device's memory registered with core makes and
 * frees that device's storages; a storage no op was queued on is freed at its last release;
 * one that queued ops still use is freed by the engine's release hook once they are done. */
#include <kiln.h>

#include "engine/engine-impl.h"
#include "kiln_test.h"

/* A stand-in device memory that counts its calls and checks it gets back what it gave. */
typedef struct {
    int allocs, frees;
    void *last_ptr;
    size_t last_bytes;
} fake_memory;

/* (it gives a larger block than asked, as a caching allocator may: free gets that size back) */
static void *fake_alloc(void *ctx, size_t nbytes, size_t *granted) {
    fake_memory *m = ctx;
    m->allocs++;
    m->last_bytes = *granted = nbytes + 32;
    m->last_ptr = malloc(m->last_bytes);
    return m->last_ptr;
}

static void fake_free(void *ctx, void *ptr, size_t granted) {
    fake_memory *m = ctx;
    m->frees++;
    KT_CHECK(ptr == m->last_ptr && granted == m->last_bytes);
    free(ptr);
}

KT_TEST(registered_memory_makes_and_frees_device_storages) {
    KT_CHECK(kiln__storage_new(KILN_CUDA, 64) == NULL); /* nothing registered: no storage */
    fake_memory fm = {0};
    kiln__device_memory mem = {.alloc = fake_alloc, .free = fake_free, .context = &fm};
    kiln__storage_register_memory(KILN_CUDA, &mem);
    kiln__storage *s = kiln__storage_new(KILN_CUDA, 96);
    KT_CHECK(s && fm.allocs == 1 && s->data == fm.last_ptr && s->nbytes == 96 && s->device == KILN_CUDA);
    kiln__storage_retain(s);
    kiln__storage_release(s);
    KT_CHECK(fm.frees == 0); /* an owner is left */
    kiln__storage_release(s); /* never queued on: freed here, at once */
    KT_CHECK(fm.frees == 1);
    kiln__storage_register_memory(KILN_CUDA, NULL);
    KT_CHECK(kiln__storage_new(KILN_CUDA, 64) == NULL);
}

KT_TEST(host_memory_needs_no_backend) {
    kiln__storage *s = kiln__storage_new(KILN_CPU, 256);
    KT_CHECK(s && s->data && s->var == NULL);
    kiln__storage_release(s);
}

KT_TEST(storage_released_under_queued_readers_outlives_them) {
    kt_mem_begin();
    enum { N = 1 << 16, CHAIN = 40 };
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(N), 0.25);
    kiln_tensor outs[CHAIN];
    for (int i = 0; i < CHAIN; i++) outs[i] = kiln_add_scalar(kiln_ref(x), (double)i);
    kiln_release(x); /* its buffer is still read by the queued adds */
    for (int i = 0; i < CHAIN; i++) {
        float v;
        KT_CHECK(kiln_into_scalar(kiln_max(outs[i]), &v) == KILN_OK);
        KT_NEAR(v, 0.25 + i, 0);
    }
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(registered_memory_makes_and_frees_device_storages);
    KT_RUN(host_memory_needs_no_backend);
    KT_RUN(storage_released_under_queued_readers_outlives_them);
    return kt_finish();
}
