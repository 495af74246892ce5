/* A tensor handed from one thread to another in the OpenCL tests, in stages (include after
 * kiln_test.h and opencl_compare.h, with DEV defined): hand, await, and a tensor poisoned while its
 * kernel ran read on another thread. */
#ifndef KILN_TEST_OPENCL_HANDOFF_H
#define KILN_TEST_OPENCL_HANDOFF_H

#include <pthread.h>
#include <string.h>

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stage;
    kiln_tensor x;      /* made by the producer, read by the consumer */
    kiln_tensor result; /* the consumer's */
    kiln_tensor back;   /* a CPU tensor from the consumer */
    int bad;            /* the consumer's failed checks */
} handoff;

static void hand(handoff *h, int stage) {
    pthread_mutex_lock(&h->lock);
    h->stage = stage;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

static void await(handoff *h, int stage) {
    pthread_mutex_lock(&h->lock);
    while (h->stage < stage) pthread_cond_wait(&h->cond, &h->lock);
    pthread_mutex_unlock(&h->lock);
}

/* Hands x to the consumer (stage 1) and waits until it has queued its work (stage 2). */
static void hand_over(handoff *h, kiln_tensor x) {
    h->x = kiln_ref(x);
    hand(h, 1);
    await(h, 2);
}

/* Reads exp(x) + 1 computed on DEV from h->x (stage 1; poisoned by kiln_one_hot while its
 * kernel ran): stage 2 when the read reports that error and kiln_sync does not again. */
static void *poisoned_reader(void *p) {
    handoff *h = p;
    await(h, 1);
    kiln_tensor y = kiln_add_scalar(kiln_exp(kiln_to_device(h->x, DEV)), 1);
    bool on_dev = kiln_tensor_device(y) == DEV;
    float v[6];
    kiln_status st = kiln_into_data(y, v, sizeof v);
    h->stage = st == KILN_ERR_INDEX && on_dev && strstr(kiln_last_error(), "kiln_one_hot") ? 2 : -1;
    if (kiln_sync() != KILN_OK) h->stage = -2; /* reported once, by the read */
    return NULL;
}

/* A tensor poisoned while its kernel ran on `producer` (an index past one_hot's classes),
 * read on another thread by poisoned_reader: the read reports it, this thread's sync does not. */
static void failure_handed_over(kiln_device producer) {
    handoff h = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    int64_t idx[2] = {1, 7}; /* 7 is past 3 classes: found while the kernel runs */
    pthread_t t;
    pthread_create(&t, NULL, poisoned_reader, &h);
    h.x = kiln_one_hot(kiln_from_data(producer, KILN_I64, KILN_SHAPE(2), idx), 3, KILN_F32);
    hand(&h, 1);
    pthread_join(t, NULL);
    KT_CHECK_MSG(h.stage == 2, "stage %d: %s", h.stage, kiln_last_error());
    KT_CHECK(kiln_sync() == KILN_OK); /* delivered by the other thread's read: not again here */
}

#endif
