/* Call-site wrappers of kiln/bert.h's public calls, defined in this layer (api/call_site.h). */
#include "api/call_site.h"
#include "kiln/bert.h"

KILN_BERT_API(KILN__AT_DEFINE)
KILN__FREE_AT_DEFINE(kiln_bert, bert_free)
