/* The epochs kiln_sync_all waits for: the bottom of the queue (queue.c admits, queue_workers.c
 * runs). Every queued op is counted in the epoch current when it was admitted and leaves it when
 * it completes; a sync_all starts a new epoch and waits only for the ops counted in earlier ones,
 * so threads that keep dispatching cannot hold it. An op its caller runs at dispatch is done
 * before its dispatch returns, so it is never counted. Calls no other file of engine/. */
#include <pthread.h>
#include <stdlib.h>

#include "engine/queue-impl.h"

/* Work queued between two kiln_sync_all calls. */
typedef struct kiln__epoch {
    int64_t pending;
    uint64_t id;
    struct kiln__epoch *next, *prev; /* live epochs, newest first; or the spare list */
} kiln__epoch;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* an epoch emptied */
    kiln__epoch *current; /* head of the live list */
    kiln__epoch *spare;
    kiln__epoch first;
} epochs = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .current = &epochs.first};

kiln__epoch *kiln__epoch_count_in(void) {
    pthread_mutex_lock(&epochs.lock);
    kiln__epoch *ep = epochs.current;
    ep->pending++;
    pthread_mutex_unlock(&epochs.lock);
    return ep;
}

/* An emptied epoch that is not the current one: no op and no new work can reach it, so it
 * leaves the live list for the spare list (epochs.lock held). */
static void epoch_recycle(kiln__epoch *ep) {
    if (ep->prev) ep->prev->next = ep->next;
    if (ep->next) ep->next->prev = ep->prev;
    ep->next = epochs.spare;
    epochs.spare = ep;
}

void kiln__epoch_done(kiln__epoch *ep) {
    pthread_mutex_lock(&epochs.lock);
    if (--ep->pending == 0) {
        if (ep != epochs.current) epoch_recycle(ep);
        pthread_cond_broadcast(&epochs.cond);
    }
    pthread_mutex_unlock(&epochs.lock);
}

static bool epochs_pending_upto(uint64_t id) {
    for (const kiln__epoch *ep = epochs.current; ep; ep = ep->next)
        if (ep->id <= id && ep->pending > 0) return true;
    return false;
}

void kiln__queue_wait_all(void) {
    pthread_mutex_lock(&epochs.lock);
    kiln__epoch *cur = epochs.current;
    if (cur->pending > 0 || cur->next) {
        uint64_t target = cur->id;
        kiln__epoch *next = epochs.spare;
        if (next)
            epochs.spare = next->next;
        else
            next = malloc(sizeof *next);
        if (next) { /* (without memory for one, this waits for the current epoch to empty) */
            *next = (kiln__epoch){.id = cur->id + 1, .next = cur};
            cur->prev = next;
            epochs.current = next;
            if (cur->pending == 0) epoch_recycle(cur); /* nothing will complete in it any more */
        }
        while (epochs_pending_upto(target)) pthread_cond_wait(&epochs.cond, &epochs.lock);
    }
    pthread_mutex_unlock(&epochs.lock);
}

void kiln__epochs_fork_lock(void) { pthread_mutex_lock(&epochs.lock); }

void kiln__epochs_fork_unlock(void) { pthread_mutex_unlock(&epochs.lock); }

void kiln__epochs_fork_child(void) {
    epochs.first = (kiln__epoch){0};
    epochs.current = &epochs.first; /* the parent's uncounted work never completes here */
    epochs.spare = NULL;
    pthread_cond_init(&epochs.cond, NULL);
    pthread_mutex_unlock(&epochs.lock);
}
