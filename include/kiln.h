/* kiln: an asynchronous deep-learning tensor library in C. The whole public API. */
#ifndef KILN_H
#define KILN_H

#include "kiln/core.h"
#include "kiln/tensor.h"
#include "kiln/engine.h"
#include "kiln/autodiff.h"
#include "kiln/autocast.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/amp.h"
#include "kiln/data.h"
#include "kiln/text.h"
#include "kiln/train.h"
#include "kiln/bert.h"
#include "kiln/custom_op.h"
#include "kiln/dist.h"
#include "kiln/summary.h"
#include "kiln/dlpack.h"
#include "kiln/io.h"

#endif
