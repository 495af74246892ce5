/* Shared start and end of the dist test programs (tests/test_dist*.c), each run alone and under
 * mpirun. */
#ifndef KILN_TEST_DIST_UTIL_H
#define KILN_TEST_DIST_UTIL_H

#include <kiln.h>
#include <stdio.h>

/* Joins the job and queues a first collective, which allocates dist's order token (kept until
 * kiln_dist_finalize), before any leak check's mark. False (with a message) on failure. */
static inline bool kt_dist_begin(int *rank, int *world) {
    if (kiln_dist_init() != KILN_OK || kiln_dist_barrier() != KILN_OK) {
        fprintf(stderr, "joining the MPI job: %s\n", kiln_last_error());
        return false;
    }
    *rank = kiln_dist_rank();
    *world = kiln_dist_world_size();
    return true;
}

/* Finalizes MPI and returns the program's exit status (kt_finish's tally). */
static inline int kt_dist_end(void) {
    if (kiln_dist_finalize() != KILN_OK) {
        fprintf(stderr, "kiln_dist_finalize: %s\n", kiln_last_error());
        return 1;
    }
    return kt_finish();
}

#endif
