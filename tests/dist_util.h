/* Shared start and end of the dist test programs (tests/test_dist*.c), each run alone and under
 * mpirun. */
#ifndef KILN_TEST_DIST_UTIL_H
#define KILN_TEST_DIST_UTIL_H

#include <kiln.h>
#include <stdint.h>
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

/* Every parameter of m, in kiln_module_params' order, read into out (room for cap floats): how
 * many floats were read, or -1 when they did not fit or a read failed. */
static inline int64_t kt_read_params(kiln_module *m, float *out, int64_t cap) {
    kiln_param ps[16];
    int np = kiln_module_params(m, ps, 16);
    int64_t off = 0;
    for (int i = 0; i < np; i++) {
        int64_t k = kiln_tensor_numel(*ps[i].slot);
        if (off + k > cap || kiln_into_data(kiln_ref(*ps[i].slot), out + off, sizeof(float) * (size_t)k) != KILN_OK)
            return -1;
        off += k;
    }
    return np < 0 ? -1 : off;
}

/* The forward of a container module whose test routes through the children itself. */
static inline kiln_tensor kt_identity_forward(kiln_module *m, kiln_tensor x, void *ctx) {
    (void)m, (void)ctx;
    return x;
}

#endif
