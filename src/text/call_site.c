/* Call-site wrappers of kiln/text.h's public calls, defined in this layer (api/call_site.h). */
#include "api/call_site.h"
#include "kiln/text.h"

KILN_TEXT_API(KILN__AT_DEFINE)
KILN__FREE_AT_DEFINE(kiln_tokenizer, tokenizer_free)
