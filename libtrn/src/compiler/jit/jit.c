// jit.c - compiles a graph's C with the system compiler and loads it.
//
// Owns: trn_program (schedule + loaded shared object). The compiler is $CC
// (default gcc) with -O<opt_level> (default -O2) -march=native -shared -fPIC
// plus the flags the eager kernels use (-fno-math-errno -fno-trapping-math:
// sqrt and compares vectorize; NaN/inf semantics unchanged) and the
// caller's extra flags (trn_compile_options.cc_flags; the Python side reads
// them from TORCH_NEURONX_CC_EXTRA_FLAGS: NEURON_CC_FLAGS holds neuronx-cc
// flags, which are not the C compiler's). Warnings stay on (the generated
// code is warning-free; the tests compile it with -Werror). The source
// is written into a private directory (janitor.c), which is also the
// compiler's $TMPDIR, so its temporaries land there too; the compiler runs
// in the janitor's process group, which the janitor kills if this process
// dies. The object goes into the disk cache (cache/) keyed by a hash of
// everything that shapes it (the host CPU's features too: -march=native);
// processes sharing the cache take a per-key lock, so each key compiles once.
#define _GNU_SOURCE 1  // pipe2
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../internal.h"
#include "../compiler_impl.h"
#include "../../runtime/stream_drain.h"

extern char **environ;

#define CACHE_VERSION "2"  // 2: entries carry a MAC (.mac), not a checksum
#define MAX_FLAGS 64

static const char *cc_path(void) {
    const char *cc = getenv("CC");
    return cc && *cc ? cc : "gcc";
}

// Reads a whole file (malloc'd, NUL-terminated); NULL if unreadable.
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = (cap + 4096) * 2;
            char *nb = realloc(buf, cap);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

static bool write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) return false;
    bool ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

// Splits extra flags on blanks into argv entries (no shell quoting).
static int split_flags(char *text, char **argv, int max) {
    int n = 0;
    for (char *p = text; p && *p && n < max;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        argv[n++] = p;
        while (*p && *p != ' ' && *p != '\t') p++;
        if (*p) *p++ = 0;
    }
    return n;
}

// Starts argv[0] (PATH lookup) with stdin /dev/null and stdout and stderr
// to out_fd (or, when out_fd < 0, to the file log_path), in process group
// `group` (0: ours), with environment envp. Returns its pid, or -1.
static pid_t spawn_start(char *const argv[], char *const envp[], int out_fd, const char *log_path,
                         pid_t group, int *spawn_errno) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc != 0) return -1;
    rc = posix_spawnattr_init(&at);
    if (rc != 0) {
        posix_spawn_file_actions_destroy(&fa);
        return -1;
    }
    if (out_fd >= 0)
        rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else
        rc = posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (rc == 0 && group > 0) {
        rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
        if (rc == 0) rc = posix_spawnattr_setpgroup(&at, group);
    }
    pid_t pid = 0;
    if (rc == 0) rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, envp);
    if (rc == EPERM && group > 0) {
        // The janitor's group is gone (its anchor was killed): run the
        // compiler in our own group rather than not at all.
        trn_log(TRN_LOG_WARNING, "compile",
                "the janitor's process group %ld is gone; "
                "compiling without it",
                (long)group);
        posix_spawnattr_destroy(&at);
        rc = posix_spawnattr_init(&at);
        if (rc == 0) rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, envp);
    }
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (spawn_errno) *spawn_errno = rc;
    return rc == 0 ? pid : -1;
}

// Waits for pid: its exit status, or -1 when it did not exit normally.
static int spawn_wait(pid_t pid) {
    if (pid < 0) return -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The C compiler's version line (once per process; it is part of the key).
// Once, not a flag: graphs may compile on several threads at a time.
static char cc_version_line[256];
static pthread_once_t cc_version_once = PTHREAD_ONCE_INIT;
static pid_t cc_version_group;  // the compilers' group, set before the once

static void cc_version_read(void) {
    cc_version_line[0] = 0;
    int p[2];
    // Close-on-exec: compilers other threads start meanwhile must not hold
    // the write end (the read below would wait for them).
    if (pipe2(p, O_CLOEXEC) != 0) return;
    char *argv[] = {(char *)cc_path(), "-dumpfullversion", "-dumpversion", NULL};
    pid_t pid = spawn_start(argv, environ, p[1], NULL,
                            __atomic_load_n(&cc_version_group, __ATOMIC_RELAXED), NULL);
    (void)close(p[1]);
    char buf[4096], sink[512];
    size_t n = 0;
    for (;;) {  // all it prints (it may not exit before it is read); keeps the start
        bool keep = n < sizeof buf - 1;
        ssize_t r = keep ? read(p[0], buf + n, sizeof buf - 1 - n) : read(p[0], sink, sizeof sink);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (keep) n += (size_t)r;
    }
    (void)close(p[0]);
    buf[n] = 0;
    if (spawn_wait(pid) != 0) return;
    size_t line = strcspn(buf, "\n");
    if (line < n) line++;  // with its newline, as fgets gave it
    if (line >= sizeof cc_version_line) line = sizeof cc_version_line - 1;
    memcpy(cc_version_line, buf, line);
    cc_version_line[line] = 0;
}

static const char *cc_version(pid_t group) {
    __atomic_store_n(&cc_version_group, group, __ATOMIC_RELAXED);
    pthread_once(&cc_version_once, cc_version_read);
    return cc_version_line;
}

// The host CPU's instruction-set features: -march=native makes objects
// that only CPUs with them run, so a cache (or a bundle loaded from another
// machine) must not hand one to a CPU without them.
static char cpu_text[320];
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_fill(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    size_t n = 0;
// clang-format off
#define FEAT(f) \
    if (__builtin_cpu_supports(f) && n + sizeof f + 1 < sizeof cpu_text) \
        n += (size_t)snprintf(cpu_text + n, sizeof cpu_text - n, "%s ", f);
    FEAT("sse4.2") FEAT("avx") FEAT("avx2") FEAT("fma") FEAT("bmi2") FEAT("f16c") FEAT("avx512f")
    FEAT("avx512bw") FEAT("avx512vl") FEAT("avx512dq") FEAT("avx512cd") FEAT("avx512vnni")
    FEAT("avx512bf16") FEAT("avx512fp16") FEAT("avx512vbmi") FEAT("avx512vbmi2") FEAT("avx512bitalg")
    FEAT("avx512vpopcntdq") FEAT("amx-tile") FEAT("amx-bf16") FEAT("amx-int8") FEAT("gfni") FEAT("vaes")
    FEAT("vpclmulqdq") FEAT("avxvnni")
#undef FEAT
// clang-format on
#else
    snprintf(cpu_text, sizeof cpu_text, "unknown-cpu");
#endif
}

static const char *cpu_features(void) {
    pthread_once(&cpu_once, cpu_fill);
    return cpu_text;
}

// Hash of the headers generated code includes: a changed scalar.h must not
// reuse objects compiled against the old one.
static void headers_hash(const char *dir, char out[65]) {
    static const char *names[] = {"trn/kernel_abi.h", "trn/scalar.h", "trn/convert.h"};
    char *all = NULL;
    size_t total = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = 0;
        char *text = read_file(path, &len);
        if (text == NULL) continue;
        char *na = realloc(all, total + len + 1);
        if (na) {
            memcpy(na + total, text, len);
            total += len;
            all = na;
        }
        free(text);
    }
    trn_sha256_hex(all ? all : "", total, out);
    free(all);
}

static double now_s(void) { return (double)trn__now_ns() * 1e-9; }

static const char *opt_flag(const trn_compile_options *o) {
    static const char *levels[] = {"-O2", "-O0", "-O1", "-O2", "-O3"};
    return o->opt_level >= 0 && o->opt_level <= 4 ? levels[o->opt_level] : "-O2";
}

// Runs the compiler: source -> so_path; the command and its output go to
// `log` (malloc'd). It runs in process group `group` (janitor.c) with
// $TMPDIR set to tmpdir. Returns the exit status (-1 if it could not start;
// then *spawn_errno says why).
static int run_cc(const trn_compile_options *o, const char *src_path, const char *so_path,
                  const char *log_path, const char *tmpdir, pid_t group, char **cmdline,
                  int *spawn_errno) {
    char *flags_copy = NULL;
    const char *extra = o->cc_flags;
    if (extra && *extra) {
        flags_copy = malloc(strlen(extra) + 1);
        if (flags_copy) strcpy(flags_copy, extra);
    }
    char incflag[4200];
    snprintf(incflag, sizeof incflag, "-I%s", o->include_dir);
    char *argv[MAX_FLAGS + 16];
    int n = 0;
    argv[n++] = (char *)cc_path();
    // -ffp-contract=off: gnu11 lets gcc fuse a * b + c into one rounding,
    // which libtrn's eager kernels (ISO C11) never do, so a compiled GELU
    // differed from eager's by an ulp; scalar.h asks for fmaf where it
    // wants one, and then both get it.
    const char *fixed[] = {
        opt_flag(o),       "-march=native",      "-shared",           "-fPIC",
        "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-std=gnu11"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) argv[n++] = (char *)fixed[i];
    n += split_flags(flags_copy, argv + n, MAX_FLAGS);
    argv[n++] = incflag;
    argv[n++] = (char *)src_path;
    argv[n++] = "-o";
    argv[n++] = (char *)so_path;
    argv[n] = NULL;
    size_t len = 0;
    for (int i = 0; i < n; i++) len += strlen(argv[i]) + 1;
    *cmdline = malloc(len + 1);
    if (*cmdline) {
        (*cmdline)[0] = 0;
        for (int i = 0; i < n; i++) {
            strcat(*cmdline, argv[i]);
            if (i + 1 < n) strcat(*cmdline, " ");
        }
    }
    // The environment, with TMPDIR pointing into our private directory.
    size_t nenv = 0;
    for (char **e = environ; e != NULL && *e != NULL; e++) nenv++;
    char **envp = malloc((nenv + 2) * sizeof *envp);
    size_t tlen = strlen(tmpdir) + sizeof "TMPDIR=";
    char *tmpvar = malloc(tlen);
    int rc = -1;
    if (envp != NULL && tmpvar != NULL) {
        size_t k = 0;
        for (size_t i = 0; i < nenv; i++)
            if (strncmp(environ[i], "TMPDIR=", 7) != 0) envp[k++] = environ[i];
        snprintf(tmpvar, tlen, "TMPDIR=%s", tmpdir);
        envp[k++] = tmpvar;
        envp[k] = NULL;
        rc = spawn_wait(spawn_start(argv, envp, -1, log_path, group, spawn_errno));
    }
    free(envp);
    free(tmpvar);
    free(flags_copy);
    return rc;
}

static void debug_write(const trn_compile_options *o, const char *suffix, const char *text) {
    if (o->debug_dir == NULL || text == NULL) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s", o->debug_dir, o->name ? o->name : "graph", suffix);
    write_file(path, text, strlen(text));
}

static trn_status copy_graph(trn_graph *dst, const trn_graph *src) {
    memset(dst, 0, sizeof *dst);
    dst->nodes = malloc(((size_t)src->count + 1) * sizeof *dst->nodes);
    if (dst->nodes == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_program_compile: out of memory");
    memcpy(dst->nodes, src->nodes, (size_t)src->count * sizeof *dst->nodes);
    for (int i = 0; i < src->count; i++) dst->nodes[i].label = NULL;
    dst->count = dst->cap = src->count;
    dst->hosts = NULL;  // runs only need the steps, which record host numbers
    // Extern calls run from the program: their arguments, function, context.
    dst->externs = malloc(((size_t)src->n_externs + 1) * sizeof *dst->externs);
    if (dst->externs == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_program_compile: out of memory");
    for (int i = 0; i < src->n_externs; i++) {
        const trn__cc_extern *x = &src->externs[i];
        trn__cc_extern *y = &dst->externs[i];
        *y = *x;
        y->args = malloc(((size_t)x->n_args + 1) * sizeof *y->args);
        if (y->args == NULL) {
            dst->n_externs = i;
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_program_compile: out of memory");
        }
        if (x->n_args) memcpy(y->args, x->args, (size_t)x->n_args * sizeof *y->args);
    }
    dst->n_externs = dst->cap_externs = src->n_externs;
    return TRN_SUCCESS;
}

// The graph's check of a loaded object: ABI and kernel count; records its
// launch table only when both match.
static trn_status graph_check(void *ctx, void *dl, const char *path) {
    trn_program *p = ctx;
    const int *abi = dlsym(dl, "trn_graph_abi_version");
    const int *count = dlsym(dl, "trn_graph_kernel_count");
    const trn_kernel_launch *launches = dlsym(dl, "trn_graph_launches");
    if (abi == NULL || count == NULL || launches == NULL || *abi != TRN_KERNEL_ABI_VERSION ||
        *count != p->sched.n_kernels)
        return trn__set_error(TRN_ERROR_SYSTEM,
                              "trn_program_compile: %s is not a graph of this compiler "
                              "(ABI or kernel count differs)",
                              path);
    p->launches = launches;
    return TRN_SUCCESS;
}

// The node lists of struct trn_program that runs read (see there).
static trn_status index_nodes(trn_program *p) {
    const trn_graph *g = &p->graph;
    p->stores = malloc(((size_t)g->count + 1) * sizeof *p->stores);
    p->caller = malloc(((size_t)g->count + 1) * sizeof *p->caller);
    if (p->stores == NULL || p->caller == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_program_compile: out of memory");
    for (int i = 0; i < g->count; i++) {
        const trn__cc_node *n = &g->nodes[i];
        if (n->kind == CC_GATHER || n->kind == CC_SCATTER) p->checks_indices = 1;
        if (n->store_to >= 0) p->stores[p->n_stores++] = i;
        if (p->sched.home[i] == HOME_CALLER && n->kind != CC_HOST_RESULT && trn__cc_numel(n) > 0)
            p->caller[p->n_caller++] = i;
    }
    return TRN_SUCCESS;
}

// dlopens `so` and runs the job's check on it: *dl set, or an error.
static trn_status open_checked(const trn__cc_job *job, const char *so, void **dl) {
    *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (*dl == NULL)
        return trn__set_error(TRN_ERROR_SYSTEM, "%s: dlopen %s: %s", job->what, so, dlerror());
    trn_status st = job->check ? job->check(job->ctx, *dl, so) : TRN_SUCCESS;
    if (st != TRN_SUCCESS) {
        dlclose(*dl);
        *dl = NULL;
    }
    return st;
}

// The verified cached object for out->key, copied to `so` and loaded: true
// (out->dl and out->object set). False on a miss or an object that does not
// load or pass the check (then it is compiled instead).
static bool load_cached(const trn__cc_job *job, const trn_compile_options *opts, const char *so,
                        trn__cc_built *out) {
    size_t n = 0;
    char *bytes = trn__cc_cache_read(opts->cache_dir, out->key, &n);
    if (bytes == NULL || !write_file(so, bytes, n)) {
        free(bytes);
        return false;
    }
    if (open_checked(job, so, &out->dl) == TRN_SUCCESS) {
        out->object = bytes;
        out->object_len = n;
        return true;
    }
    free(bytes);
    unlink(so);
    trn_clear_error();
    return false;
}

// Writes the debug log of a compile: the compiler's output and its status.
static void debug_log(const trn_compile_options *o, const char *log, int rc, double seconds) {
    if (o->debug_dir == NULL) return;
    char text[256];
    snprintf(text, sizeof text, "exit status %d after %.3f s\n", rc, seconds);
    size_t ll = (log ? strlen(log) : 0) + strlen(text) + 1;
    char *full = malloc(ll);
    if (full) {
        snprintf(full, ll, "%s%s", log ? log : "", text);
        debug_write(o, ".log", full);
        free(full);
    }
}

trn_status trn__cc_build(const char *source, const trn_compile_options *opts,
                         const trn__cc_job *job, trn__cc_built *out) {
    memset(out, 0, sizeof *out);
    if (source == NULL || opts == NULL || job == NULL || opts->include_dir == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: NULL argument",
                              job && job->what ? job->what : "trn__cc_build");
    debug_write(opts, ".c", source);
    char *cmd = NULL, *log = NULL;
    int lock_fd = -1;
    // One private directory (janitor.c) holds the source, the object, the
    // log and the compiler's temporaries; a cached object is loaded from a
    // copy made here, so the bytes loaded are the bytes the cache verified.
    char tmpdir[4096];
    pid_t group = 0;
    trn_status st = trn__cc_scratch_dir(tmpdir, sizeof tmpdir, &group);
    if (st != TRN_SUCCESS) return st;

    // Key: source, our version, compiler, its version, flags, headers, CPU.
    char hh[65];
    headers_hash(opts->include_dir, hh);
    const char *extra = opts->cc_flags;
    size_t klen = strlen(source) + 2048 + (extra ? strlen(extra) : 0);
    char *keytext = malloc(klen);
    if (keytext == NULL) {
        st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "%s: out of memory", job->what);
        goto fail;
    }
    int kn = snprintf(
        keytext, klen, "%s\n%s\ncache %s abi %d\ncc %s %s\nflags %s %s\nheaders %s\ncpu %s\n",
        source, TRN_COMPILER_VERSION, CACHE_VERSION, TRN_KERNEL_ABI_VERSION, cc_path(),
        cc_version(group), opt_flag(opts), extra ? extra : "", hh, cpu_features());
    trn_sha256_hex(keytext, (size_t)kn, out->key);
    free(keytext);

    char src[4200], so[4200], logp[4200];
    snprintf(src, sizeof src, "%s/graph.c", tmpdir);
    snprintf(so, sizeof so, "%s/graph.so", tmpdir);
    snprintf(logp, sizeof logp, "%s/cc.log", tmpdir);
    if (opts->cache_dir && load_cached(job, opts, so, out)) goto cached;
    if (opts->cache_dir) {
        // Another process compiling this key: wait for it, then load its
        // object; without the lock (timed out) we compile too (atomic
        // writes make that only a duplicate). A holder that dies drops it.
        double wait = opts->lock_timeout_s == 0 ? 1200.0 : opts->lock_timeout_s;
        lock_fd = trn__cc_lock(opts->cache_dir, out->key, wait);
        if (lock_fd == -1 && wait > 0)
            trn_log(TRN_LOG_WARNING, "compile",
                    "%s %s: the compile lock of %.12s was not free after %g s "
                    "(TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT); compiling it here too",
                    job->kind, opts->name ? opts->name : job->kind, out->key, wait);
        if (lock_fd >= 0 && load_cached(job, opts, so, out)) goto cached;
    }
    if (!write_file(src, source, strlen(source))) {
        st = trn__set_error(TRN_ERROR_SYSTEM, "%s: cannot write %s", job->what, src);
        goto fail;
    }
    double t0 = now_s();
    int spawn_errno = 0;
    int rc = run_cc(opts, src, so, logp, tmpdir, group, &cmd, &spawn_errno);
    out->seconds = now_s() - t0;
    log = read_file(logp, NULL);
    debug_write(opts, ".cmd", cmd);
    debug_log(opts, log, rc, out->seconds);
    if (rc != 0 && spawn_errno != 0) {
        st = trn__set_error(
            TRN_ERROR_SYSTEM,
            "%s: cannot run the C compiler `%s` (%s). "
            "%s needs a C compiler: install gcc (Debian/Ubuntu: "
            "`apt-get install gcc`; Fedora/RHEL: `dnf install gcc`; Alpine: `apk add gcc "
            "musl-dev`) "
            "or set CC to one",
            job->what, cc_path(), strerror(spawn_errno), job->needs);
        goto fail;
    }
    if (rc != 0) {
        st = trn__set_error(TRN_ERROR_SYSTEM, "%s: `%s` failed (status %d): %.600s", job->what,
                            cmd ? cmd : cc_path(), rc, log ? log : "");
        goto fail;
    }
    out->object = read_file(so, &out->object_len);
    if (out->object == NULL) {
        st = trn__set_error(TRN_ERROR_SYSTEM, "%s: cannot read %s", job->what, so);
        goto fail;
    }
    if (opts->cache_dir) {
        trn__cc_cache_store(opts->cache_dir, out->key, out->object, out->object_len);
        if (opts->cache_max_bytes > 0)
            trn_compile_cache_evict(opts->cache_dir, opts->cache_max_bytes, out->key, NULL);
        trn_clear_error();  // a cache that cannot be written only costs time
    }
    trn__cc_unlock(lock_fd);
    lock_fd = -1;
    st = open_checked(job, so, &out->dl);
    if (st != TRN_SUCCESS) goto fail;
    trn__cc_scratch_remove(tmpdir);
    free(cmd);
    free(log);
    return TRN_SUCCESS;
cached:
    trn__cc_unlock(lock_fd);
    out->from_cache = 1;
    debug_write(opts, ".log", "loaded from the disk cache; nothing compiled\n");
    trn__cc_scratch_remove(tmpdir);
    return TRN_SUCCESS;
fail:
    trn__cc_unlock(lock_fd);
    trn__cc_scratch_remove(tmpdir);
    free(cmd);
    free(log);
    free(out->object);
    out->object = NULL;
    out->object_len = 0;
    return st;
}

trn_status trn_program_compile(const trn_graph *g, const trn_compile_options *opts,
                               trn_program **out) {
    if (g == NULL || opts == NULL || out == NULL || opts->include_dir == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_program_compile: NULL argument");
    trn_program *p = calloc(1, sizeof *p);
    if (p == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_program_compile: out of memory");
    trn_status st = trn__cc_schedule_build(g, &p->sched);
    if (st == TRN_SUCCESS) st = copy_graph(&p->graph, g);
    if (st == TRN_SUCCESS) st = index_nodes(p);
    if (st == TRN_SUCCESS) st = trn__cc_render(g, &p->sched, &p->source);
    trn__cc_built b;
    const trn__cc_job job = {"trn_program_compile", "graph", "torch.compile(backend=\"neuron\")",
                             graph_check, p};
    if (st == TRN_SUCCESS) st = trn__cc_build(p->source, opts, &job, &b);
    if (st != TRN_SUCCESS) {
        trn_program_free(p);
        return st;
    }
    p->dl = b.dl;
    memcpy(p->key, b.key, sizeof p->key);
    p->object = b.object;
    p->object_len = b.object_len;
    p->from_cache = b.from_cache;
    p->compile_seconds = b.seconds;
    *out = p;
    return TRN_SUCCESS;
}

void trn_program_free(trn_program *p) {
    if (p == NULL) return;
    // Queued runs of the program call its code and read its schedule.
    trn__streams_drain();
    if (p->dl) dlclose(p->dl);
    trn__cc_schedule_free(&p->sched);
    free(p->graph.nodes);
    trn__cc_externs_free(p->graph.externs, p->graph.n_externs);
    free(p->source);
    free(p->object);
    free(p->stores);
    free(p->caller);
    free(p);
}

size_t trn_program_workspace_size(const trn_program *p) { return p ? p->sched.ws_size : 0; }
int trn_program_kernel_count(const trn_program *p) { return p ? p->sched.n_kernels : 0; }
int trn_program_from_cache(const trn_program *p) { return p ? p->from_cache : 0; }
double trn_program_compile_seconds(const trn_program *p) { return p ? p->compile_seconds : 0.0; }
const char *trn_program_source(const trn_program *p) { return p ? p->source : ""; }
const char *trn_program_cache_key(const trn_program *p) { return p ? p->key : ""; }

const void *trn_program_object(const trn_program *p, size_t *len) {
    if (len) *len = p ? p->object_len : 0;
    return p ? p->object : NULL;
}

int trn_program_checks_indices(const trn_program *p) { return p ? p->checks_indices : 0; }

// NKI's build (src/nki/program.c): trn__cc_build with no check of its own
// (the caller looks up its symbols); the object's bytes are not kept.
trn_status trn__cc_build_shared(const char *source, const trn_compile_options *opts, void **dl,
                                char key[65], int *from_cache, double *seconds) {
    if (dl == NULL || key == NULL || from_cache == NULL || seconds == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn__cc_build_shared: NULL argument");
    const trn__cc_job job = {"trn_nki_compile", "nki kernel", "NKI (nki.jit)", NULL, NULL};
    trn__cc_built b;
    trn_status st = trn__cc_build(source, opts, &job, &b);
    *dl = b.dl;
    memcpy(key, b.key, 65);
    *from_cache = b.from_cache;
    *seconds = b.seconds;
    free(b.object);
    return st;
}

int trn_program_extern_count(const trn_program *p) { return p ? p->graph.n_externs : 0; }
