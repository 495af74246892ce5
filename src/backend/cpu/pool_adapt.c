/* The worker's poll window follows the jobs' rhythm.
 *
 * A fixed poll is right for one rhythm only. The measured one (pool_poll.c: four wake-ups, 14-25
 * us on this VM) is shorter than the gaps of a 16-token BERT pass in int8 (its products ~10 us
 * apart from each other by 20-60 us of layer norms, attention and quantization), so the worker
 * slept at every gap and the pass took 1.15 ms against 0.74 with a 50 us poll (bench_embed
 * --int8, Zen 5, 2026-11-29); a 50 us constant is in turn too short for other trains and burns a
 * core after the last job of every burst. So the worker learns the gap:
 *   - a job that came after the worker gave up, within KILN__POOL_POLL_MAX_NS: the window was
 *     too short for this train, and a wake-up was paid; it grows at once to twice that gap;
 *   - a job that came while it polled: the window moves an eighth of the way to twice that gap
 *     (so a train of shorter gaps shrinks it, slowly: one long gap in a train is likely again);
 *   - a job after a longer sleep (the train ended; the worker was idle): it halves toward the
 *     floor, so an idle program stops polling for long after each burst.
 * Twice the gap is the margin for the gap's spread; the cap keeps a worker from holding a core
 * that a longer rhythm does not pay back (past ~200 us an idle vCPU's wake-up costs the same as
 * the poll would: KVM's default halt polling). */
#include "backend/cpu/pool_adapt.h"

#include "backend/cpu/pool_poll.h"

int64_t kiln__pool_adapt_window(int64_t window, int64_t gap, bool polled, int64_t floor) {
    int64_t cap = floor > KILN__POOL_POLL_MAX_NS ? floor : KILN__POOL_POLL_MAX_NS;
    if (floor < 0) floor = 0;
    if (window < floor) window = floor;
    if (window > cap) window = cap;
    if (gap < 0) gap = 0;
    int64_t target = gap > cap / 2 ? cap : 2 * gap;
    if (polled) {
        window += (target - window) / 8;
    } else if (gap <= cap) {
        if (target > window) window = target;
    } else {
        window -= (window - floor + 1) / 2;
    }
    if (window < floor) window = floor;
    return window > cap ? cap : window;
}
