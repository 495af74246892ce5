/* A data-parallel training loop in which one rank fails mid-step, run by test_dist_fail.sh
 * under mpirun. argv[1] says how rank 1 fails at step 2:
 *   poison  a kernel of its forward pass fails (an injected error): every rank's optimizer step
 *           returns an error (the peers' names rank 1), each rank prints it and exits 3;
 *   exit    it exits at once (a crash): mpirun ends the job, the others never hang;
 *   hang    it stops responding: the peers' watchdog (KILN_DIST_TIMEOUT) aborts the job.
 * Without a failure it would train 5 steps and exit 0. */
#include <kiln.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine-impl.h"

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "none";
    if (kiln_dist_init() != KILN_OK) {
        fprintf(stderr, "kiln_dist_init: %s\n", kiln_last_error());
        return 1;
    }
    int rank = kiln_dist_rank();
    kiln_module *layers[] = {kiln_linear_new(8, 16, true, 1), kiln_relu_new(), kiln_linear_new(16, 4, true, 2)};
    kiln_module *m = kiln_sequential_new(3, layers);
    kiln_ddp *ddp = kiln_ddp_new(m, kiln_ddp_defaults());
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    int status = 0;
    for (int step = 0; step < 5 && status == 0; step++) {
        if (rank == 1 && step == 2) {
            if (strcmp(mode, "poison") == 0) kiln__debug_fail_next_kernel("kiln_relu");
            if (strcmp(mode, "exit") == 0) _exit(3);
            if (strcmp(mode, "hang") == 0) sleep(600);
        }
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(4, 8), (uint64_t)(step * 10 + rank));
        int64_t yv[4] = {0, 1, 2, 3};
        kiln_tensor y = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(4), yv);
        kiln_tensor loss = kiln_cross_entropy(kiln_module_forward(m, x), y, kiln_cross_entropy_defaults());
        kiln_grads *g = NULL;
        kiln_status st = kiln_backward(loss, &g);
        if (st == KILN_OK) st = kiln_optimizer_step(opt, g);
        kiln_grads_free(g);
        if (st != KILN_OK) {
            fprintf(stderr, "rank %d: step %d failed: %s\n", rank, step, kiln_last_error());
            fflush(stderr);
            kiln_dist_barrier(); /* every rank failed this step: each has said so before mpirun ends the job */
            status = 3;
        }
    }
    kiln_sync();
    kiln_optimizer_free(opt);
    kiln_ddp_free(ddp);
    kiln_module_free(m);
    if (status == 0) kiln_dist_finalize();
    return status;
}
