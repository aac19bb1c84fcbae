// test_compiler_nki_cache.c - NKI kernels go through the graph compiler's one
// build path (jit.c: trn__cc_build): two concurrent compiles of one kernel
// sharing a cache compile it once (the per-key lock), and the cache's size
// bound (cache_max_bytes) evicts the least recently used kernel.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler_test.h"
#include "trn/nki.h"

// out = a + C for a 2 x 4 float32 tensor (the text nki/_ir.py writes for
// `nl.store(out, nl.add(nl.load(a), C))`); %s is the constant C.
static const char *add_ir =
    "K add_const 3 1 1\n"
    "T 0 0 0 2 2 4 4 1 0 -1 0 k.py:5\n"
    "T 1 1 0 2 2 4 4 1 0 -1 0 k.py:2\n"
    "T 2 2 0 2 2 4 4 1 0 -1 0 k.py:3\n"
    "T 3 2 0 2 2 4 4 1 0 -1 0 k.py:4\n"
    "P 2 k.py:3\n"
    "I 0 nl.load k.py:3 1 0.0 2 2 2 2 4 2 0 0 1 0 0 0 0 1 0 2 2 4 2 0 0 1 0 0 0 0 1 0 0\n"
    "P 3 k.py:4\n"
    "I 2 nl.add k.py:4 8 1.0 0.0 1.0 %s 0.0 0.0 0.0 0.0 2 3 2 2 4 2 0 0 1 0 0 0 0 1 2 2 2 4 2 0 "
    "0 1 0 0 0 0 1 0 0\n"
    "I 0 nl.store k.py:4 1 0.0 2 1 2 2 4 2 0 0 1 0 0 0 0 1 3 2 2 4 2 0 0 1 0 0 0 0 1 0 0\n";

static trn_nki_program *nki_compile(const char *cache, const char *constant, int64_t max_bytes) {
    char ir[2048];
    snprintf(ir, sizeof ir, add_ir, constant);
    trn_compile_options o = {include_dir, cache,    NULL, "nki_add", 0, "-Wall -Wextra -Werror",
                             0,           max_bytes};
    trn_nki_program *p = NULL;
    trn_status st = trn_nki_compile(ir, &o, &p);
    if (st != TRN_SUCCESS) fprintf(stderr, "nki compile: %s\n", trn_last_error());
    CHECK_INT(st, TRN_SUCCESS);
    return p;
}

// Runs p on 0..7 and checks every element is i + c.
static void check_adds(const trn_nki_program *p, float c) {
    float a[8], out[8];
    for (int i = 0; i < 8; i++) a[i] = (float)i;
    CHECK_INT(trn_nki_run(p, (void *[]){a, out}), TRN_SUCCESS);
    for (int i = 0; i < 8; i++) CHECK(out[i] == (float)i + c);
}

static bool entry_exists(const char *cache, const char *key) {
    char so[4400];
    snprintf(so, sizeof so, "%s/%s.so", cache, key);
    return access(so, F_OK) == 0;
}

typedef struct racer {
    const char *cache;
    pthread_barrier_t *start;
    trn_nki_program *p;
} racer;

static void *race(void *v) {
    racer *r = v;
    pthread_barrier_wait(r->start);
    r->p = nki_compile(r->cache, "1.0", 0);
    return NULL;
}

// Both threads miss the cache at once; the one without the key's lock waits
// for the other's compile and loads its object.
static void test_concurrent_compiles_once(const char *cache) {
    pthread_barrier_t start;
    CHECK_INT(pthread_barrier_init(&start, NULL, 2), 0);
    racer r[2] = {{cache, &start, NULL}, {cache, &start, NULL}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK_INT(pthread_create(&t[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 2; i++) CHECK_INT(pthread_join(t[i], NULL), 0);
    pthread_barrier_destroy(&start);
    if (r[0].p == NULL || r[1].p == NULL) return;
    CHECK_INT(trn_nki_program_from_cache(r[0].p) + trn_nki_program_from_cache(r[1].p), 1);
    CHECK(strcmp(trn_nki_program_cache_key(r[0].p), trn_nki_program_cache_key(r[1].p)) == 0);
    for (int i = 0; i < 2; i++) {
        check_adds(r[i].p, 1.0f);
        trn_nki_program_free(r[i].p);
    }
}

// A bound of one byte keeps only the entry just stored (never evicted):
// compiling a second kernel evicts the first, which then compiles again.
static void test_size_bound_evicts(const char *cache) {
    trn_nki_program *one = nki_compile(cache, "3.0", 1);
    if (one == NULL) return;
    CHECK_INT(trn_nki_program_from_cache(one), 0);
    CHECK(entry_exists(cache, trn_nki_program_cache_key(one)));
    trn_nki_program *two = nki_compile(cache, "5.0", 1);
    if (two == NULL) {
        trn_nki_program_free(one);
        return;
    }
    CHECK(entry_exists(cache, trn_nki_program_cache_key(two)));
    CHECK(!entry_exists(cache, trn_nki_program_cache_key(one)));
    check_adds(one, 3.0f);
    check_adds(two, 5.0f);
    trn_nki_program_free(one);
    trn_nki_program_free(two);
    one = nki_compile(cache, "3.0", 0);  // evicted: compiled again, not loaded
    if (one) CHECK_INT(trn_nki_program_from_cache(one), 0);
    trn_nki_program_free(one);
    one = nki_compile(cache, "3.0", 0);  // and now a hit
    if (one) CHECK_INT(trn_nki_program_from_cache(one), 1);
    trn_nki_program_free(one);
}

int main(void) {
    find_include_dir();
    char dir[] = "/tmp/trn-nki-cache-test-XXXXXX";
    if (mkdtemp(dir) == NULL) return 1;
    char path[4200];
    snprintf(path, sizeof path, "%s/config", dir);
    setenv("XDG_CONFIG_HOME", path, 1);  // the cache key, kept out of $HOME
    snprintf(path, sizeof path, "%s/cache", dir);
    test_concurrent_compiles_once(path);
    test_size_bound_evicts(path);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_INT(system(cmd), 0);
    return TEST_REPORT();
}
