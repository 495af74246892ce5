/* The machine's facts (machine.h), read once.
 *
 * Cache sizes: sysfs first, because it says what this core sees (on a virtual AMD EPYC glibc's
 * sysconf, which decodes CPUID itself, said 384 MiB for a 32 MiB L3); then sysconf; then the
 * CPU's own cache leaf (AMD's 0x8000001D, Intel's 4: ways x partitions x line x sets); then a
 * default (32 KiB, 1 MiB, 32 MiB), so a rule never divides by an unknown. ISA flags come from
 * the compiler's cpuid reader, which also checks that the OS saves the wider registers. */
#include "core/machine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define MACHINE_X86 1
#include <cpuid.h>
#else
#define MACHINE_X86 0
#endif

static kiln__machine facts;
static pthread_once_t facts_once = PTHREAD_ONCE_INIT;

const char *kiln__fact_source_name(kiln__fact_source s) {
    switch (s) {
    case KILN__FACT_SYSFS: return "sysfs";
    case KILN__FACT_SYSCONF: return "sysconf";
    case KILN__FACT_CPUID: return "cpuid";
    default: return "default";
    }
}

int64_t kiln__machine_parse_size(const char *text) {
    if (!text) return 0;
    int64_t v = 0;
    const char *p = text;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > ((int64_t)1 << 40)) return 0;
    }
    if (p == text) return 0;
    int shift = *p == 'K' ? 10 : *p == 'M' ? 20 : *p == 'G' ? 30 : 0;
    if (shift) p++;
    if (*p == '\n') p++;
    if (*p != '\0' || v > ((int64_t)1 << (40 - shift))) return 0;
    return v << shift;
}

/* The first line of a small sysfs file, or "" */
static void read_line(const char *path, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(out, (int)cap, f)) out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

/* sysfs's caches of cpu0: level 1 data, 2 and 3 (0 where it does not list one) */
static void caches_from_sysfs(int64_t bytes[4]) {
    for (int i = 0; i < 16; i++) {
        char path[96], level[16], type[32], size[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        read_line(path, level, sizeof level);
        if (!level[0]) break;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        read_line(path, type, sizeof type);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        read_line(path, size, sizeof size);
        int lv = atoi(level);
        if (lv < 1 || lv > 3 || strcmp(type, "Instruction") == 0) continue;
        int64_t b = kiln__machine_parse_size(size);
        if (b > 0 && bytes[lv] == 0) bytes[lv] = b;
    }
}

static void caches_from_sysconf(int64_t bytes[4]) {
    long v[4] = {0, -1, -1, -1};
#ifdef _SC_LEVEL1_DCACHE_SIZE /* (glibc extensions: 0 or -1 when it does not know) */
    v[1] = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    v[2] = sysconf(_SC_LEVEL2_CACHE_SIZE);
    v[3] = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    for (int lv = 1; lv <= 3; lv++) bytes[lv] = v[lv] > 0 ? v[lv] : 0;
}

static void caches_from_cpuid(int64_t bytes[4]) {
    memset(bytes, 0, 4 * sizeof *bytes);
#if MACHINE_X86
    unsigned a, b, c, d, leaf = 0;
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x8000001Du && __get_cpuid(0x80000001u, &a, &b, &c, &d) &&
        (c >> 22 & 1u)) /* AMD's topology extensions */
        leaf = 0x8000001Du;
    else if ((unsigned)__get_cpuid_max(0, NULL) >= 4u)
        leaf = 4;
    if (!leaf) return;
    for (unsigned i = 0; i < 16; i++) {
        if (!__get_cpuid_count(leaf, i, &a, &b, &c, &d)) break;
        unsigned type = a & 31u, level = a >> 5 & 7u;
        if (type == 0) break;
        if (type == 2 || level < 1 || level > 3) continue; /* instruction caches */
        int64_t size = (int64_t)((b >> 22) + 1) * ((b >> 12 & 1023u) + 1) * ((b & 4095u) + 1) * ((int64_t)c + 1);
        if (bytes[level] == 0) bytes[level] = size;
    }
#endif
}

static void read_caches(void) {
    int64_t *out[4] = {NULL, &facts.l1d_bytes, &facts.l2_bytes, &facts.l3_bytes};
    kiln__fact_source *from[4] = {NULL, &facts.l1d_from, &facts.l2_from, &facts.l3_from};
    const int64_t fallback[4] = {0, (int64_t)32 << 10, (int64_t)1 << 20, (int64_t)32 << 20};
    void (*const readers[3])(int64_t[4]) = {caches_from_sysfs, caches_from_sysconf, caches_from_cpuid};
    const kiln__fact_source names[3] = {KILN__FACT_SYSFS, KILN__FACT_SYSCONF, KILN__FACT_CPUID};
    for (int lv = 1; lv <= 3; lv++) *out[lv] = 0;
    for (int r = 0; r < 3; r++) {
        int64_t got[4] = {0, 0, 0, 0};
        readers[r](got);
        for (int lv = 1; lv <= 3; lv++)
            if (*out[lv] == 0 && got[lv] > 0) *out[lv] = got[lv], *from[lv] = names[r];
    }
    for (int lv = 1; lv <= 3; lv++)
        if (*out[lv] == 0) *out[lv] = fallback[lv], *from[lv] = KILN__FACT_DEFAULT;
}

static void read_cpu_id(void) {
    snprintf(facts.model_name, sizeof facts.model_name, "unknown");
#if MACHINE_X86
    unsigned r[12];
    if (__get_cpuid(0, &r[0], &r[1], &r[2], &r[3])) {
        memcpy(facts.vendor, &r[1], 4), memcpy(facts.vendor + 4, &r[3], 4), memcpy(facts.vendor + 8, &r[2], 4);
        facts.vendor[12] = '\0';
    }
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        unsigned family = a >> 8 & 15u, model = a >> 4 & 15u;
        if (family == 15) family += a >> 20 & 255u;
        if (family == 6 || family >= 15) model += (a >> 16 & 15u) << 4;
        facts.family = (int)family, facts.model = (int)model, facts.stepping = (int)(a & 15u);
    }
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        char brand[49] = {0};
        for (unsigned i = 0; i < 3; i++) {
            __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        }
        memcpy(brand, r, 48);
        char *s = brand;
        while (*s == ' ') s++;
        size_t n = strlen(s);
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\0')) s[--n] = '\0';
        for (char *p = s; *p; p++)
            if ((unsigned char)*p < 32 || (unsigned char)*p > 126) *p = '?'; /* the cache file's key is text */
        if (n > 0) snprintf(facts.model_name, sizeof facts.model_name, "%s", s);
    }
    __builtin_cpu_init();
    facts.avx2 = __builtin_cpu_supports("avx2");
    facts.fma = __builtin_cpu_supports("fma");
    facts.avx512f = __builtin_cpu_supports("avx512f");
    facts.avx512bw = __builtin_cpu_supports("avx512bw");
    facts.avx512vl = __builtin_cpu_supports("avx512vl");
    facts.avx512_vnni = __builtin_cpu_supports("avx512vnni");
    /* leaf 7 subleaf 1, EAX bit 5; usable where AVX-512 is (the same registers) */
    facts.avx512_bf16 = facts.avx512f && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1u);
#endif
}

static void read_facts(void) {
    read_caches();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    facts.cores = cores >= 1 ? (cores < (1 << 20) ? (int)cores : 1 << 20) : 1;
    read_cpu_id();
}

const kiln__machine *kiln__machine_facts(void) {
    pthread_once(&facts_once, read_facts);
    return &facts;
}
