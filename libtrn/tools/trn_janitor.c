// trn_janitor.c - trn-janitor: cleans up after a process that compiles
// graphs, however that process ends (SIGKILL included).
//
// libtrn starts one per process, on its first compile (src/compiler/jit/
// janitor.c), as `trn-janitor <dir>` with its stdin the read end of a pipe
// whose only write end the process holds (close-on-exec; forked children
// close it), in a new process group J whose id is the janitor's pid. The
// process runs its C compilers in group J and their temporary files in
// <dir>. The janitor forks a watcher into a group of its own and then only
// anchors group J (it stays its leader, so the group exists for setpgid)
// while the watcher lives.
// The watcher reads its stdin until end of file, which comes when the
// process is gone (exit, exec, kill), and then kills group J - the anchor
// and every compiler and compiler child still running (gcc's cc1, as, ld
// inherit the group) - and removes <dir> with what it holds (one level of
// per-compile directories of plain files).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

// Removes dir's entries (recursing `depth` more levels) and dir itself.
static void remove_tree(int parent, const char *name, int depth) {
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        (void)unlinkat(parent, name, 0);  // not a directory (or already gone)
        return;
    }
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        (void)close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (depth > 0 && e->d_type == DT_DIR)
            remove_tree(fd, e->d_name, depth - 1);
        else if (unlinkat(fd, e->d_name, 0) != 0 && errno == EISDIR && depth > 0)
            remove_tree(fd, e->d_name, depth - 1);
    }
    (void)closedir(d);
    (void)unlinkat(parent, name, AT_REMOVEDIR);
}

// Closes every fd above stderr: descriptors the process left inheritable
// must not live on in the janitor (a pipe's reader would wait for it).
static void close_inherited(void) {
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) return;
    int self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end = NULL;
        long fd = strtol(e->d_name, &end, 10);
        if (end != e->d_name && *end == '\0' && fd > 2 && fd != self) (void)close((int)fd);
    }
    (void)closedir(d);
}

int main(int argc, char **argv) {
    if (argc != 2 || argv[1][0] != '/') {
        fprintf(stderr, "usage: trn-janitor /absolute/dir (started by libtrn, stdin a pipe)\n");
        return 2;
    }
    pid_t group = getpid();
    if (getpgid(0) != group) {
        fprintf(stderr, "trn-janitor: must lead its own process group\n");
        return 2;
    }
    close_inherited();
    pid_t watcher = fork();
    if (watcher < 0) return 1;  // libtrn sees the group vanish: it compiles without us
    if (watcher > 0) {
        // The anchor: keeps group J alive until the watcher kills it. Should
        // the watcher die first (killed by someone), the anchor leaves too,
        // and libtrn runs compilers in its own group from then on.
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null >= 0) (void)dup2(null, 0);  // (dup2 clears close-on-exec)
        while (waitpid(watcher, NULL, 0) < 0 && errno == EINTR) continue;
        return 1;
    }
    (void)setpgid(0, 0);  // out of group J, which it will kill
    (void)signal(SIGINT, SIG_IGN);
    (void)signal(SIGHUP, SIG_IGN);
    (void)signal(SIGPIPE, SIG_IGN);
    char buf[256];
    for (;;) {
        ssize_t n = read(0, buf, sizeof buf);
        if (n > 0) continue;  // nothing is sent; a write only keeps it alive
        if (n < 0 && errno == EINTR) continue;
        break;  // end of file (or an error): the process is gone
    }
    (void)kill(-group, SIGKILL);
    // Compilers killed, nothing writes into the directory any more.
    char *slash = strrchr(argv[1], '/');
    *slash = '\0';
    int parent = open(slash == argv[1] ? "/" : argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (parent < 0) return 1;
    remove_tree(parent, slash + 1, 1);
    (void)close(parent);
    return 0;
}
