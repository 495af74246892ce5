/* What kiln knows of the machine it runs on, read once from the system (machine.c): cache sizes,
 * online cores, the CPU's name and family/model/stepping, its vector ISA flags. One place for
 * the facts that rules depend on (issue #29: rules from the machine, not constants tuned on one
 * CPU), so that every rule that uses a cache size reads the same number.
 *
 *   const kiln__machine *mc = kiln__machine_facts();
 *   int64_t panel = mc->l2_bytes / 2;   // never 0: a default where the system says nothing
 */
#ifndef KILN_CORE_MACHINE_H
#define KILN_CORE_MACHINE_H

#include <stdbool.h>
#include <stdint.h>

/* Where a cache size came from: the first of these that answered. */
typedef enum kiln__fact_source {
    KILN__FACT_DEFAULT = 0, /* nothing said: a typical size of a recent x86 core */
    KILN__FACT_SYSFS,       /* /sys/devices/system/cpu/cpu0/cache/index* */
    KILN__FACT_SYSCONF,     /* glibc's sysconf(_SC_LEVEL*_CACHE_SIZE) */
    KILN__FACT_CPUID,       /* the CPU's deterministic cache leaf (0x8000001D on AMD, 4 on Intel) */
} kiln__fact_source;

typedef struct kiln__machine {
    int64_t l1d_bytes, l2_bytes, l3_bytes; /* one core's L1d and L2, the L3 cpu0 shares; > 0 */
    kiln__fact_source l1d_from, l2_from, l3_from;
    int cores;                   /* online logical CPUs, >= 1 */
    char vendor[16];             /* "AuthenticAMD", "GenuineIntel", "" off x86 */
    char model_name[64];         /* the brand string, spaces trimmed ("AMD EPYC"), "unknown" if none */
    int family, model, stepping; /* cpuid leaf 1 with the extended fields folded in; 0 off x86 */
    bool avx2, fma, avx512f, avx512bw, avx512vl, avx512_vnni, avx512_bf16; /* usable: the OS saves the registers */
} kiln__machine;

/* The facts, read on the first call (a few file reads and cpuid; thread-safe) and the same
 * pointer after. Never NULL. */
const kiln__machine *kiln__machine_facts(void);

/* The name of a fact's source ("sysfs", ...), for messages. */
const char *kiln__fact_source_name(kiln__fact_source s);

/* Parses a sysfs cache size ("48K", "32768K", "1M", "512"): bytes, or 0 when the text is not
 * such a size or is over 1 TiB. Exposed for tests. */
int64_t kiln__machine_parse_size(const char *text);

#endif
