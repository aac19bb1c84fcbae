// dnnl_common.c - owns libtrn's oneDNN engine, the per-thread oneDNN stream
// and workspace, oneDNN status translation and the plan cache (see
// dnnl_common.h for why each exists).
#include "dnnl_common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trn/log.h"

// oneDNN 2.x by its soname (any 2.x the system has), then the file found at
// build time (a oneDNN outside the loader's path), unless
// TORCH_NEURONX_DNNL_LIBRARY names one.
#define TRN_DNNL_SONAME "libdnnl.so.2"
#ifndef TRN_DNNL_BUILD_PATH
#define TRN_DNNL_BUILD_PATH TRN_DNNL_SONAME
#endif

trn__dnnl_api trn__dnnl;

// libgomp's thread-count controls, from oneDNN's own OpenMP runtime (found
// through its handle, so it is the copy oneDNN uses, not PyTorch's). NULL if
// that oneDNN is not built on OpenMP.
static void (*omp_set_threads_fn)(int);
static int (*omp_max_threads_fn)(void);

// ---- implementation choice --------------------------------------------------

trn__dnnl_impl trn__dnnl_impl_of(const_dnnl_primitive_desc_t pd) {
    const char *name = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success ||
        name == NULL)
        return TRN__DNNL_IMPL_UNKNOWN;
    return strncmp(name, "ref", 3) == 0 ? TRN__DNNL_IMPL_REFERENCE : TRN__DNNL_IMPL_OPTIMIZED;
}

// ---- native bfloat16 -------------------------------------------------------------
// oneDNN 2.6 has bf16 matmul and convolution kernels that use vdpbf16ps on an
// AVX512-BF16 CPU (and AMX tiles where the CPU and OS allow). On an AVX-512
// CPU without BF16 oneDNN emulates the instruction (slower than the float32
// kernels on widened operands), and on AVX2 it has only its reference
// kernel, so the native path needs the instruction. Where the CPU has it,
// the default follows the core: native when AMX is usable or vdpbf16ps
// gives at least 1.5x the float32 FMA's multiply-adds per second
// (bf16_rate.c: 2.0 on AMD Zen 4, 1.0 on an Intel Xeon without AMX, where
// the float32 kernels ran bfloat16 products 1.3-1.7x faster).
// TORCH_NEURONX_BF16_KERNELS=native / float32 overrides the measurement.
#define BF16_NATIVE_MIN_RATIO 1.5

static bool cpu_has_avx512_bf16(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax, ebx, ecx, edx;
    // __builtin_cpu_supports("avx512f") also checks that the OS saves the
    // zmm state; AVX512_BF16 is CPUID leaf 7, subleaf 1, EAX bit 5.
    if (!__builtin_cpu_supports("avx512f")) return false;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    (void)ebx, (void)ecx, (void)edx;
    return (eax >> 5) & 1u;
#else
    return false;
#endif
}

static pthread_once_t g_bf16_once = PTHREAD_ONCE_INIT;
static bool g_bf16_cpu;                // the CPU has vdpbf16ps
static bool g_bf16_default;            // what the process runs unless a test forces a path
static atomic_int g_bf16_forced = -1;  // -1: the default; 0 / 1: forced

static void bf16_probe(void) {
    g_bf16_cpu = cpu_has_avx512_bf16();
    if (!g_bf16_cpu) return;
    const char *env = getenv("TORCH_NEURONX_BF16_KERNELS");
    if (env != NULL && strcmp(env, "native") == 0) {
        g_bf16_default = true;
        return;
    }
    if (env != NULL && strcmp(env, "float32") == 0) return;
    if (env != NULL && *env != '\0' && strcmp(env, "auto") != 0)
        trn_log(TRN_LOG_WARNING, "matmul",
                "TORCH_NEURONX_BF16_KERNELS='%s' is not 'auto', 'native' or 'float32': "
                "using 'auto'",
                env);
    if (trn__dnnl_amx()) {
        g_bf16_default = true;
        return;
    }
    const double ratio = trn__bf16_dot_rate_ratio();
    g_bf16_default = ratio >= BF16_NATIVE_MIN_RATIO;
    trn_log(TRN_LOG_INFO, "matmul",
            "bfloat16 products and convolutions: %s kernels (vdpbf16ps gives %.2fx the "
            "float32 FMA's multiply-adds per second here)",
            g_bf16_default ? "native bfloat16" : "float32", ratio);
}

bool trn__dnnl_bf16_native(void) {
    (void)pthread_once(&g_bf16_once, bf16_probe);
    if (!g_bf16_cpu) return false;
    const int forced = atomic_load_explicit(&g_bf16_forced, memory_order_relaxed);
    return forced >= 0 ? forced != 0 : g_bf16_default;
}

void trn__dnnl_set_bf16_native(int forced) {
    atomic_store_explicit(&g_bf16_forced, forced < 0 ? -1 : forced != 0, memory_order_relaxed);
}

static atomic_int g_amx_forced = -1;

bool trn__dnnl_amx(void) {
    const int forced = atomic_load_explicit(&g_amx_forced, memory_order_relaxed);
    if (forced >= 0) return forced != 0;
    dnnl_engine_t engine;
    if (trn__dnnl_engine(&engine) != TRN_SUCCESS) return false;
    const unsigned amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
    return ((unsigned)dnnl_get_effective_cpu_isa() & amx) == amx;
}

void trn__dnnl_set_amx(int forced) {
    atomic_store_explicit(&g_amx_forced, forced < 0 ? -1 : forced != 0, memory_order_relaxed);
}

// ---- errors --------------------------------------------------------------------

trn_status trn__dnnl_error(dnnl_status_t st, const char *call, const char *context) {
    trn_status code;
    switch (st) {
    case dnnl_out_of_memory: code = TRN_ERROR_OUT_OF_MEMORY; break;
    case dnnl_invalid_arguments: code = TRN_ERROR_INVALID_ARGUMENT; break;
    case dnnl_unimplemented: code = TRN_ERROR_UNSUPPORTED; break;
    default: code = TRN_ERROR_KERNEL; break;
    }
    return trn__set_error(code, "oneDNN: %s failed: %s (%s)", call,
                          trn__dnnl.dnnl_status2str_fn ? dnnl_status2str(st) : "?",
                          context ? context : "");
}

// ---- engine --------------------------------------------------------------------

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine_handle;
static dnnl_status_t engine_status = dnnl_success;
static char load_error[512];

static bool load_api(void) {
    int flags = RTLD_NOW | RTLD_LOCAL;
#if !defined(TRN_DNNL_NO_DEEPBIND) && defined(RTLD_DEEPBIND)
    flags |= RTLD_DEEPBIND;
#endif
    const char *env = getenv("TORCH_NEURONX_DNNL_LIBRARY");
    const char *tries[2] = {TRN_DNNL_SONAME, TRN_DNNL_BUILD_PATH};
    int n_tries = strcmp(tries[0], tries[1]) == 0 ? 1 : 2;
    if (env && *env) tries[0] = env, n_tries = 1;
    void *h = NULL;
    const char *lib = tries[0];
    char why[256] = "";
    for (int i = 0; i < n_tries && h == NULL; i++) {
        lib = tries[i];
        h = dlopen(lib, flags);
        const char *e = h == NULL && why[0] == '\0' ? dlerror() : NULL;
        if (e) snprintf(why, sizeof why, "%s", e);
    }
    if (h == NULL) {
        snprintf(
            load_error, sizeof load_error,
            "cannot load oneDNN, which runs matmul and convolution on neuron (tried %s%s%s): %s. "
            "Install oneDNN 2.x (Debian/Ubuntu: apt-get install libdnnl2, or the project's "
            "scripts/install-deps.sh) or point TORCH_NEURONX_DNNL_LIBRARY at a libdnnl.so.2",
            tries[0], n_tries > 1 ? ", " : "", n_tries > 1 ? tries[1] : "",
            why[0] ? why : "unknown error");
        return false;
    }
    trn__dnnl_api api;
#define TRN__DNNL_LOAD(name)                                                                       \
    {                                                                                              \
        void *sym = dlsym(h, #name);                                                               \
        if (sym == NULL) {                                                                         \
            snprintf(load_error, sizeof load_error,                                                \
                     "oneDNN (%s) lacks %s: a oneDNN 2.x library is required", lib, #name);        \
            return false;                                                                          \
        }                                                                                          \
        memcpy(&api.name##_fn, &sym, sizeof sym);                                                  \
    }
    TRN__DNNL_API(TRN__DNNL_LOAD)
#undef TRN__DNNL_LOAD
    trn__dnnl = api;
    void *set = dlsym(h, "omp_set_num_threads"), *max = dlsym(h, "omp_get_max_threads");
    if (set != NULL && max != NULL) {
        memcpy(&omp_set_threads_fn, &set, sizeof set);
        memcpy(&omp_max_threads_fn, &max, sizeof max);
    }
    return true;
}

static void engine_init(void) {
    if (!load_api()) return;
    engine_status = dnnl_engine_create(&engine_handle, dnnl_cpu, 0);
}

trn_status trn__dnnl_engine(dnnl_engine_t *engine) {
    int rc = pthread_once(&engine_once, engine_init);
    if (rc != 0) trn__die("pthread_once", rc);
    // A missing library is an error of the call (never "unsupported", which
    // callers may answer with a CPU fallback that reads unwritten memory).
    if (load_error[0] != '\0') return trn__set_error(TRN_ERROR_SYSTEM, "%s", load_error);
    if (engine_status != dnnl_success)
        return trn__dnnl_error(engine_status, "dnnl_engine_create(dnnl_cpu, 0)",
                               "creating the CPU engine");
    *engine = engine_handle;
    return TRN_SUCCESS;
}

// ---- OpenMP thread count ----------------------------------------------------------

int trn__dnnl_serial_begin(void) {
    if (omp_set_threads_fn == NULL) return 0;
    int old = omp_max_threads_fn();
    if (old != 1) omp_set_threads_fn(1);
    return old;
}

void trn__dnnl_serial_end(int saved) {
    if (omp_set_threads_fn != NULL && saved > 1) omp_set_threads_fn(saved);
}

bool trn__dnnl_can_serialize(void) { return omp_set_threads_fn != NULL; }

void trn__split_error_record(trn__split_error *e, trn_status st) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&e->failed, &expected, 1)) {
        e->status = st;
        snprintf(e->message, sizeof e->message, "%s", trn_last_error());
    }
}

trn_status trn__split_error_raise(trn__split_error *e) {
    if (!atomic_load(&e->failed)) return TRN_SUCCESS;
    return trn__set_error(e->status, "%s", e->message);
}

// ---- per-thread state ------------------------------------------------------------

// The per-thread buffers (dnnl_common.h): workspace, accumulation, staging.
enum { BUF_WORKSPACE, BUF_ACCUM, BUF_STAGE, BUF_COUNT };

typedef struct thread_state {
    dnnl_stream_t stream;
    void *buf[BUF_COUNT];
    size_t buf_size[BUF_COUNT];
} thread_state;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t state_key;
static int key_rc;

static void state_destroy(void *p) {
    thread_state *ts = p;
    if (ts->stream) dnnl_stream_destroy(ts->stream);
    for (int i = 0; i < BUF_COUNT; i++) free(ts->buf[i]);
    free(ts);
}

static void key_init(void) { key_rc = pthread_key_create(&state_key, state_destroy); }

static trn_status thread_state_get(thread_state **out) {
    int rc = pthread_once(&key_once, key_init);
    if (rc != 0) trn__die("pthread_once", rc);
    if (key_rc != 0)
        return trn__set_error(TRN_ERROR_SYSTEM,
                              "pthread_key_create for the oneDNN thread "
                              "state failed: %s",
                              strerror(key_rc));
    thread_state *ts = pthread_getspecific(state_key);
    if (ts == NULL) {
        ts = calloc(1, sizeof *ts);
        if (ts == NULL)
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "out of host memory for the oneDNN "
                                                           "thread state");
        rc = pthread_setspecific(state_key, ts);
        if (rc != 0) {
            free(ts);
            return trn__set_error(TRN_ERROR_SYSTEM, "pthread_setspecific failed: %s", strerror(rc));
        }
    }
    *out = ts;
    return TRN_SUCCESS;
}

trn_status trn__dnnl_stream(dnnl_stream_t *stream) {
    thread_state *ts = NULL;
    trn_status st = thread_state_get(&ts);
    if (st != TRN_SUCCESS) return st;
    if (ts->stream == NULL) {
        dnnl_engine_t engine;
        st = trn__dnnl_engine(&engine);
        if (st != TRN_SUCCESS) return st;
        dnnl_status_t ds = dnnl_stream_create(&ts->stream, engine, dnnl_stream_default_flags);
        if (ds != dnnl_success) {
            ts->stream = NULL;
            return trn__dnnl_error(ds, "dnnl_stream_create", "creating this thread's stream");
        }
    }
    *stream = ts->stream;
    return TRN_SUCCESS;
}

// A grow-only 64-byte aligned buffer *buf of *size bytes.
static trn_status grow(void **buf, size_t *size, size_t bytes, const char *what) {
    if (bytes == 0) bytes = 64;
    if (*size < bytes) {
        size_t want = bytes + bytes / 4;  // some headroom against regrowth
        want = (want + 4095) & ~(size_t)4095;
        void *p = NULL;
        int rc = posix_memalign(&p, 64, want);
        if (rc != 0)
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                                  "out of host memory for a %zu-byte oneDNN %s", want, what);
        free(*buf);
        *buf = p;
        *size = want;
    }
    return TRN_SUCCESS;
}

static trn_status thread_buffer(int which, size_t bytes, void **ptr, const char *what) {
    thread_state *ts = NULL;
    trn_status st = thread_state_get(&ts);
    if (st != TRN_SUCCESS) return st;
    if ((st = grow(&ts->buf[which], &ts->buf_size[which], bytes, what)) != TRN_SUCCESS) return st;
    *ptr = ts->buf[which];
    return TRN_SUCCESS;
}

trn_status trn__dnnl_workspace(size_t bytes, void **ptr) {
    return thread_buffer(BUF_WORKSPACE, bytes, ptr, "workspace");
}

trn_status trn__dnnl_accum_buffer(size_t bytes, void **ptr) {
    return thread_buffer(BUF_ACCUM, bytes, ptr, "accumulation buffer");
}

trn_status trn__dnnl_stage_buffer(size_t bytes, void **ptr) {
    return thread_buffer(BUF_STAGE, bytes, ptr, "float32 staging buffer");
}

// ---- plan cache --------------------------------------------------------------------

#define PLAN_SLOTS 2048  // power of two; at most PLAN_SLOTS / 2 plans are kept

typedef struct plan_slot {
    uint64_t hash;
    size_t key_size;
    unsigned char *key;
    void *plan;
} plan_slot;

static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;
static plan_slot plan_slots[PLAN_SLOTS];
static int plan_count;

static uint64_t hash_bytes(const void *key, size_t n) {
    const unsigned char *p = key;
    uint64_t h = UINT64_C(1469598103934665603);  // FNV-1a
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

// Slot holding the key, or the empty slot where it would go.
static plan_slot *probe(const void *key, size_t n, uint64_t h) {
    for (size_t i = 0;; i++) {
        plan_slot *s = &plan_slots[(h + i) & (PLAN_SLOTS - 1)];
        if (s->plan == NULL) return s;
        if (s->hash == h && s->key_size == n && memcmp(s->key, key, n) == 0) return s;
    }
}

void *trn__plan_find(const void *key, size_t key_size) {
    uint64_t h = hash_bytes(key, key_size);
    trn__lock(&plan_lock);
    void *plan = probe(key, key_size, h)->plan;
    trn__unlock(&plan_lock);
    return plan;
}

void *trn__plan_insert(const void *key, size_t key_size, void *plan) {
    uint64_t h = hash_bytes(key, key_size);
    void *result = NULL;
    trn__lock(&plan_lock);
    plan_slot *s = probe(key, key_size, h);
    if (s->plan != NULL) {
        result = s->plan;
    } else if (plan_count < PLAN_SLOTS / 2) {
        unsigned char *copy = malloc(key_size);
        if (copy != NULL) {
            memcpy(copy, key, key_size);
            s->hash = h;
            s->key_size = key_size;
            s->key = copy;
            s->plan = plan;
            plan_count++;
            result = plan;
        }
    }
    trn__unlock(&plan_lock);
    return result;
}

// ---- views -----------------------------------------------------------------------

int trn__view_span(int ndim, const int64_t *sizes, const int64_t *strides, size_t esize,
                   int64_t *lo, int64_t *span) {
    int64_t l = 0, h = 0;
    for (int d = 0; d < ndim; d++) {
        int64_t reach;
        if (__builtin_mul_overflow(strides[d], (int64_t)esize, &reach) ||
            __builtin_mul_overflow(reach, sizes[d] - 1, &reach))
            return 0;
        if (reach < 0) {
            if (__builtin_add_overflow(l, reach, &l)) return 0;
        } else if (__builtin_add_overflow(h, reach, &h)) {
            return 0;
        }
    }
    *lo = l;
    *span = h - l + (int64_t)esize;
    return 1;
}

// ---- fork (see fork.c): the plan cache's lock is held across fork. --------------
void trn__plan_fork_prepare(void) { trn__lock(&plan_lock); }
void trn__plan_fork_release(void) { trn__unlock(&plan_lock); }
