/* Between the queue's own files, top down: queue.c admits ops (the bounded queue, its bounds
 * and backpressure, the choice to run an op at dispatch), queue_workers.c runs them (the ready
 * queue, the workers and the communication thread, completion, a stream's errors, the recycling
 * of what ran), queue_epochs.c counts them for kiln_sync_all. What the layers above call is in
 * queue.h. */
#ifndef KILN_ENGINE_QUEUE_IMPL_H
#define KILN_ENGINE_QUEUE_IMPL_H

#include "engine/node.h"
#include "engine/queue.h"

/* ---- queue_workers.c: running ------------------------------------------------------------ */

/* Starts up to n workers that poll poll_ns for work before they sleep: false when none started. */
bool kiln__workers_start(int n, int64_t poll_ns);
/* Workers polling the ready queue now. A variable, not a call: the inline rule (queue.c) reads
 * it at every dispatch. Written only by queue_workers.c. */
extern atomic_int kiln__workers_polling;
/* One access of n granted: when that makes n ready it runs (a free of kiln's memory), or goes to
 * *keep (keep given and empty: this thread runs it next), or to the ready queue (true). */
bool kiln__node_release_grant(kiln__node *n, kiln__node **keep);
/* Waits on s->cond (s->lock held) until done(s, arg), running s's own ready ops meanwhile. */
void kiln__stream_wait_helping(kiln__stream *s, bool (*done)(kiln__stream *, void *), void *arg);
/* Keeps e as s's error if it is the earliest undelivered one (s->lock held). */
void kiln__stream_record_error_locked(kiln__stream *s, kiln__error *e);

/* A recycled fused group, linked through its first bytes (its contents are dead), with room
 * for `cap` ops. */
typedef struct kiln__group_link {
    struct kiln__group_link *next;
    int cap;
} kiln__group_link;
/* Gives a group that has run back to the stream that built it (any thread). */
void kiln__group_return(kiln__stream *s, const kiln__fused *g);
/* Frees a list of groups after its first `keep`. */
void kiln__group_list_free(kiln__group_link *l, int keep);

/* ---- queue_epochs.c: kiln_sync_all's epochs ------------------------------------------------ */

/* Counts one queued op in the current epoch, which it returns; the op leaves it at completion. */
struct kiln__epoch *kiln__epoch_count_in(void);
void kiln__epoch_done(struct kiln__epoch *ep);
/* fork(): the epochs' lock taken before (ahead of the ready queue's), given back in the parent;
 * the child starts with one empty epoch. */
void kiln__epochs_fork_lock(void);
void kiln__epochs_fork_unlock(void);
void kiln__epochs_fork_child(void);

#endif
