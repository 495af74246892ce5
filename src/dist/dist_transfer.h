/* The MPI transfers of one collective (dist_transfer.c), called by the communication thread's
 * kernel in dist.c. Each returns KILN_OK or the status of an error it reported with
 * kiln__kernel_error (naming this rank and the MPI call). */
#ifndef KILN_DIST_TRANSFER_H
#define KILN_DIST_TRANSFER_H

#include "ops/ops-impl.h"

/* Agrees with the peers on the lowest rank that failed before this collective (-1: none). */
kiln_status kiln__dist_xfer_agree(const kiln__op *op, bool failed_here, int *failed_rank);
/* A data-parallel bucket's all-reduce with the agreement travelling beside the data. */
kiln_status kiln__dist_xfer_reduce_sized(const kiln__op *op, bool failed_here, int *failed_rank);
kiln_status kiln__dist_xfer_all_reduce(const kiln__op *op);
kiln_status kiln__dist_xfer_broadcast(const kiln__op *op);
kiln_status kiln__dist_xfer_all_gather(const kiln__op *op);
kiln_status kiln__dist_xfer_barrier(void);

#endif
