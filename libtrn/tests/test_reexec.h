// test_reexec.h - runs this test binary again as a child in one of its
// modes (argv[1]), after `setup` sets the child's environment (a debug
// switch read once at init), with core dumps off: for checks whose child is
// meant to crash or abort. Returns waitpid's status, or -1.
#ifndef TRN_TEST_REEXEC_H
#define TRN_TEST_REEXEC_H

#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static inline int test_reexec(const char *self, const char *mode, void (*setup)(const void *),
                              const void *ctx) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (setup != NULL) setup(ctx);
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        execl("/proc/self/exe", self, mode, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return status;
}

#endif
