// util.c - owns the small helpers several runtime files share: byte-size
// parsing and printing (for TORCH_NEURONX_HBM_SIZE and OOM messages), the
// monotonic clock and the spin-loop pause.
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../internal.h"

bool trn__parse_size(const char *text, size_t *bytes) {
    if (text == NULL) return false;
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    if (!isdigit((unsigned char)*p)) return false;
    uint64_t value = 0;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned digit = (unsigned)(*p - '0');
        if (value > (UINT64_MAX - digit) / 10) return false;
        value = value * 10 + digit;
    }
    unsigned shift = 0;
    switch (toupper((unsigned char)*p)) {
    case 'K':
        shift = 10;
        p++;
        break;
    case 'M':
        shift = 20;
        p++;
        break;
    case 'G':
        shift = 30;
        p++;
        break;
    case 'T':
        shift = 40;
        p++;
        break;
    default: break;
    }
    if (shift != 0 && (*p == 'i' || *p == 'I')) {
        p++;
        if (toupper((unsigned char)*p) != 'B') return false;
    }
    if (toupper((unsigned char)*p) == 'B') p++;
    while (isspace((unsigned char)*p)) p++;
    if (*p != '\0') return false;
    if (shift != 0 && value > (UINT64_MAX >> shift)) return false;
    value <<= shift;
    if (value > SIZE_MAX) return false;
    *bytes = (size_t)value;
    return true;
}

void trn__format_bytes(char *buf, size_t size, uint64_t bytes) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (bytes < 1024) {
        snprintf(buf, size, "%llu bytes", (unsigned long long)bytes);
        return;
    }
    double value = (double)bytes / 1024.0;
    size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < sizeof units / sizeof units[0]) {
        value /= 1024.0;
        unit++;
    }
    snprintf(buf, size, "%.2f %s", value, units[unit]);
}

uint64_t trn__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void trn__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

void trn__die(const char *what, int rc) {
    fprintf(stderr, "libtrn: internal error: %s failed: %s\n", what, strerror(rc));
    abort();
}
