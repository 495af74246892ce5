/* Call-site wrappers of kiln/train.h's public calls, defined in this layer (api/call_site.h). */
#include "api/call_site.h"
#include "kiln/train.h"

KILN_TRAIN_API(KILN__AT_DEFINE)
KILN__FREE_AT_DEFINE(kiln_metrics, metrics_free)
#include "kiln/summary.h"

KILN_SUMMARY_API(KILN__AT_DEFINE)
KILN__FREE_AT_DEFINE(kiln_summary_writer, summary_writer_free)
