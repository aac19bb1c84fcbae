// janitor.c - the compilers' scratch space and the process that cleans it up
// (libtrn/tools/trn_janitor.c): nothing of a compile outlives its process,
// even one killed with SIGKILL.
//
// Owns, per process: the scratch root $TMPDIR/trn-cc-XXXXXX (0700; each
// compile makes a private directory in it), the trn-janitor process and the
// write end of its pipe, and the process group compilers run in. The janitor
// starts with the first compile (~1 ms, once); after that a compile costs
// what it did before (one mkdtemp, one spawn). A forked child closes the
// inherited pipe end and starts its own janitor when it compiles.
#define _GNU_SOURCE 1  // dladdr, pipe2
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../internal.h"
#include "../compiler_impl.h"

extern char **environ;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_state;        // 0: not started, 1: running, -1: unavailable
static char g_root[4096];  // the scratch root while running
static pid_t g_group;      // the compilers' process group (the janitor's pid)
static int g_pipe = -1;    // write end of the janitor's stdin
static bool g_atfork;

static void fork_prepare(void) { pthread_mutex_lock(&g_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&g_mu); }
static void fork_child(void) {
    // The parent's janitor watches the parent: the child must not keep its
    // pipe open (the janitor would outlive the parent) nor compile into its
    // directory (removed when the parent ends).
    if (g_pipe >= 0) (void)close(g_pipe);
    g_pipe = -1;
    g_state = 0;
    g_group = 0;
    g_root[0] = '\0';
    pthread_mutex_unlock(&g_mu);
}

static const char *tmp_base(void) {
    const char *base = getenv("TMPDIR");
    return base != NULL && base[0] == '/' ? base : "/tmp";
}

// trn-janitor beside the libtrn.so this code runs from (found by the
// address of one of its objects).
static bool janitor_path(char *out, size_t cap) {
    Dl_info info;
    if (dladdr(&g_mu, &info) == 0 || info.dli_fname == NULL) return false;
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash == NULL) return false;
    int n = snprintf(out, cap, "%.*s/trn-janitor", (int)(slash - info.dli_fname), info.dli_fname);
    return n > 0 && (size_t)n < cap && access(out, X_OK) == 0;
}

// Starts trn-janitor on a fresh scratch root; caller holds g_mu. Sets the
// error text (for the warning) and returns false when it cannot.
static bool janitor_start(char *why, size_t cap) {
    char exe[4096];
    if (!janitor_path(exe, sizeof exe)) {
        snprintf(why, cap, "trn-janitor not found beside libtrn.so");
        return false;
    }
    if ((size_t)snprintf(g_root, sizeof g_root, "%s/trn-cc-XXXXXX", tmp_base()) >=
        sizeof g_root - 64) {
        snprintf(why, cap, "TMPDIR is too long");
        return false;
    }
    if (mkdtemp(g_root) == NULL) {
        snprintf(why, cap, "mkdtemp %s: %s", g_root, strerror(errno));
        return false;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        snprintf(why, cap, "pipe: %s", strerror(errno));
        (void)rmdir(g_root);
        return false;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc == 0) {
        rc = posix_spawnattr_init(&at);
        if (rc != 0) posix_spawn_file_actions_destroy(&fa);
    }
    if (rc != 0) {
        snprintf(why, cap, "posix_spawn set-up: %s", strerror(rc));
        (void)close(p[0]);
        (void)close(p[1]);
        (void)rmdir(g_root);
        return false;
    }
    sigset_t none, def;
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGTERM);
    sigaddset(&def, SIGPIPE);
    if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, p[0], 0);
    if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
    // A process group of its own (its id is the janitor's pid): compilers
    // join it, and it keeps signals sent to ours (Ctrl-C, kill -9 of a
    // job) from taking the janitor down with us before it cleaned up.
    if (rc == 0)
        rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                               POSIX_SPAWN_SETSIGDEF);
    if (rc == 0) rc = posix_spawnattr_setpgroup(&at, 0);
    if (rc == 0) rc = posix_spawnattr_setsigmask(&at, &none);
    if (rc == 0) rc = posix_spawnattr_setsigdefault(&at, &def);
    pid_t pid = 0;
    char *argv[] = {exe, g_root, NULL};
    if (rc == 0) rc = posix_spawn(&pid, exe, &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    (void)close(p[0]);
    if (rc != 0) {
        snprintf(why, cap, "posix_spawn %s: %s", exe, strerror(rc));
        (void)close(p[1]);
        (void)rmdir(g_root);
        return false;
    }
    g_pipe = p[1];
    g_group = pid;
    trn_log(TRN_LOG_DEBUG, "compile", "janitor %ld watches %s", (long)pid, g_root);
    return true;
}

// mkdtemp of <base>/<prefix>XXXXXX into out.
static trn_status make_dir(char *out, size_t cap, const char *base, const char *prefix) {
    if ((size_t)snprintf(out, cap, "%s/%sXXXXXX", base, prefix) >= cap)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_program_compile: TMPDIR is too long");
    if (mkdtemp(out) == NULL)
        return trn__set_error(TRN_ERROR_SYSTEM, "trn_program_compile: mkdtemp %s: %s", out,
                              strerror(errno));
    return TRN_SUCCESS;
}

trn_status trn__cc_scratch_dir(char *out, size_t cap, pid_t *group) {
    pthread_mutex_lock(&g_mu);
    if (!g_atfork) {
        int rc = pthread_atfork(fork_prepare, fork_parent, fork_child);
        if (rc != 0) {
            pthread_mutex_unlock(&g_mu);
            return trn__set_error(TRN_ERROR_SYSTEM, "trn_program_compile: pthread_atfork: %s",
                                  strerror(rc));
        }
        g_atfork = true;
    }
    if (g_state == 0) {
        char why[4200];
        if (janitor_start(why, sizeof why)) {
            g_state = 1;
        } else {
            g_state = -1;
            trn_log(TRN_LOG_WARNING, "compile",
                    "no janitor (%s): a process killed while it "
                    "compiles may leave its C compiler running and files in %s/trn-cc-*",
                    why, tmp_base());
        }
    }
    trn_status st =
        g_state == 1 ? make_dir(out, cap, g_root, "") : make_dir(out, cap, tmp_base(), "trn-cc-");
    *group = g_state == 1 ? g_group : 0;
    pthread_mutex_unlock(&g_mu);
    return st;
}

void trn__cc_scratch_remove(const char *dir) {
    // Also whatever a compiler that died left there.
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                (void)unlinkat(dirfd(d), e->d_name, 0);
        (void)closedir(d);
    }
    (void)rmdir(dir);
}
