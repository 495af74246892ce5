/* Streams that belong to no thread: the engine's one internal a layer above api/ may include
 * (data/'s loader, DESIGN.md section 2), so it names nothing else of the engine. */
#ifndef KILN_ENGINE_STREAM_H
#define KILN_ENGINE_STREAM_H

/* A stream that belongs to no thread, for work a thread queues apart from the rest of its own
 * (the data loader's copies to the device when it has no worker threads): on a device it has
 * its own queue, so that work does not wait behind the thread's. kiln__stream_enter makes s
 * the calling thread's stream, returning the thread's own, until kiln__stream_leave(s, own)
 * flushes what s holds back and gives the thread its own again. One thread at a time may be
 * in s. kiln__stream_free ends s (its queued ops still run). */
struct kiln__stream;
struct kiln__stream *kiln__stream_new(void);
struct kiln__stream *kiln__stream_enter(struct kiln__stream *s);
void kiln__stream_leave(struct kiln__stream *s, struct kiln__stream *own);
void kiln__stream_free(struct kiln__stream *s);

#endif
