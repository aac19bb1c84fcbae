// cache.c - compiled graphs on disk.
//
// Owns: the cache directory layout, <key>.so and <key>.mac (the HMAC of the
// key and the .so's bytes under the user's cache key, cache_key.c), the
// per-key compile locks (locks/<key>.lock) and the size bound (least
// recently used entries go first; a hit refreshes an entry's time). Writes
// are atomic (a private temporary file in the same directory, then rename),
// so concurrent processes never see half an entry; two processes compiling
// the same key both rename identical bytes. A directory is used only if it
// passes trn_compile_cache_check_dir; an entry whose MAC does not verify is
// ignored (and rewritten by the next compile), never loaded; a verified entry
// is handed out as bytes, so what is loaded is what was verified.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../internal.h"
#include "../compiler_impl.h"

trn_status trn__cc_mkdir_private(const char *dir) {
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "compile cache: bad directory name");
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != 0) continue;
        char c = path[i];
        path[i] = 0;
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return trn__set_error(TRN_ERROR_SYSTEM, "compile cache: cannot create %s: %s", path,
                                  strerror(errno));
        path[i] = c;
    }
    struct stat sbuf;
    if (stat(dir, &sbuf) != 0 || !S_ISDIR(sbuf.st_mode))
        return trn__set_error(TRN_ERROR_SYSTEM, "compile cache: %s is not a directory", dir);
    return TRN_SUCCESS;
}

// The whole of a regular file owned by the caller (no symlink followed),
// malloc'd; NULL otherwise.
static char *slurp(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat sbuf;
    if (fstat(fd, &sbuf) != 0 || !S_ISREG(sbuf.st_mode) || sbuf.st_uid != geteuid()) {
        close(fd);
        return NULL;
    }
    size_t n = (size_t)sbuf.st_size;
    char *buf = malloc(n + 1);
    size_t got = 0;
    while (buf && got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (buf == NULL || got != n) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

char *trn__cc_cache_read(const char *dir, const char *key, size_t *len) {
    if (trn_compile_cache_check_dir(dir) != TRN_SUCCESS) {
        trn_clear_error();  // an unusable cache is a miss
        return NULL;
    }
    char so[4200], macp[4200];
    snprintf(so, sizeof so, "%s/%s.so", dir, key);
    snprintf(macp, sizeof macp, "%s/%s.mac", dir, key);
    size_t ml = 0, bl = 0;
    char *expect = slurp(macp, &ml);
    char *bytes = expect && ml == 64 ? slurp(so, &bl) : NULL;
    char got[65];
    bool ok = bytes && trn_compile_cache_mac(key, bytes, bl, got) == TRN_SUCCESS;
    // Compare every digit: how long a comparison takes says nothing.
    unsigned diff = 0;
    for (int i = 0; ok && i < 64; i++) diff |= (unsigned)(got[i] ^ expect[i]);
    free(expect);
    trn_clear_error();
    if (!ok || diff != 0) {
        free(bytes);
        return NULL;
    }
    // A use: the size bound removes the least recently used entries first.
    (void)utimensat(AT_FDCWD, so, NULL, 0);
    *len = bl;
    return bytes;
}

// Writes `len` bytes to dir/<final> through a temporary file and rename.
static trn_status atomic_write(const char *dir, const char *final, const char *data, size_t len) {
    char tmp[4200], dst[4200];
    snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", dir);
    snprintf(dst, sizeof dst, "%s/%s", dir, final);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return trn__set_error(TRN_ERROR_SYSTEM, "compile cache: cannot write in %s: %s", dir,
                              strerror(errno));
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w <= 0) break;
        done += (size_t)w;
    }
    bool ok = done == len && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, dst) != 0) {
        unlink(tmp);
        return trn__set_error(TRN_ERROR_SYSTEM, "compile cache: cannot store %s", dst);
    }
    return TRN_SUCCESS;
}

trn_status trn__cc_cache_store(const char *dir, const char *key, const char *bytes, size_t len) {
    trn_status st = trn_compile_cache_check_dir(dir);
    if (st != TRN_SUCCESS) return st;
    char mac[65], name[100];
    st = trn_compile_cache_mac(key, bytes, len, mac);
    if (st != TRN_SUCCESS) return st;
    // The object first, then its MAC: a reader needs both to agree.
    snprintf(name, sizeof name, "%s.so", key);
    st = atomic_write(dir, name, bytes, len);
    if (st != TRN_SUCCESS) return st;
    snprintf(name, sizeof name, "%s.mac", key);
    return atomic_write(dir, name, mac, 64);
}

static bool is_key(const char *s, size_t n) {
    if (n != 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

trn_status trn_compile_cache_store(const char *dir, const char *key, const void *bytes,
                                   size_t len) {
    if (dir == NULL || key == NULL || (bytes == NULL && len))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_compile_cache_store: NULL argument");
    if (!is_key(key, strlen(key)))
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_compile_cache_store: key must be 64 hex digits");
    return trn__cc_cache_store(dir, key, bytes, len);
}

int trn__cc_lock(const char *dir, const char *key, double timeout_s) {
    char locks[4200], path[4300];
    snprintf(locks, sizeof locks, "%s/locks", dir);
    // Nothing is created in a directory the cache refuses (a symlink, say).
    if (trn_compile_cache_check_dir(dir) != TRN_SUCCESS ||
        trn__cc_mkdir_private(locks) != TRN_SUCCESS ||
        trn__cc_check_private_dir(locks, "compile cache lock directory") != TRN_SUCCESS) {
        trn_clear_error();
        return -2;
    }
    snprintf(path, sizeof path, "%s/%s.lock", locks, key);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -2;
    // flock, not a pid file: the kernel releases it when the holder dies,
    // however it dies, so a crashed compile never blocks the others.
    uint64_t deadline = trn__now_ns() + (uint64_t)(timeout_s * 1e9);
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
        if (errno != EWOULDBLOCK && errno != EINTR) break;
        if (timeout_s <= 0 || trn__now_ns() >= deadline) break;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    close(fd);
    return -1;
}

void trn__cc_unlock(int fd) {
    if (fd >= 0) close(fd);  // closing drops the flock
}

typedef struct cache_entry {
    char key[65];
    bool aot;  // aot/<key>.bin (else <key>.so + <key>.mac)
    int64_t bytes;
    struct timespec used;
} cache_entry;

static int entry_older(const void *a, const void *b) {
    const cache_entry *x = a, *y = b;
    if (x->used.tv_sec != y->used.tv_sec) return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    if (x->used.tv_nsec != y->used.tv_nsec) return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
    return 0;
}

// Adds dir's entries with suffix `suffix` to *list; their bytes to *total.
static trn_status scan_entries(const char *dir, const char *suffix, bool aot, cache_entry **list,
                               size_t *n, size_t *cap, int64_t *total) {
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT
                   ? TRN_SUCCESS
                   : trn__set_error(TRN_ERROR_SYSTEM, "compile cache: cannot list %s: %s", dir,
                                    strerror(errno));
    size_t sl = strlen(suffix);
    struct dirent *e;
    trn_status st = TRN_SUCCESS;
    while ((e = readdir(d)) != NULL) {
        size_t nl = strlen(e->d_name);
        if (nl != 64 + sl || strcmp(e->d_name + 64, suffix) != 0 || !is_key(e->d_name, 64))
            continue;
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            continue;
        int64_t size = (int64_t)sb.st_size;
        if (!aot) {  // the .mac beside it
            char mac[80];
            memcpy(mac, e->d_name, 64);
            strcpy(mac + 64, ".mac");
            struct stat mb;
            if (fstatat(dirfd(d), mac, &mb, AT_SYMLINK_NOFOLLOW) == 0) size += (int64_t)mb.st_size;
        }
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 64;
            cache_entry *nl2 = realloc(*list, nc * sizeof *nl2);
            if (nl2 == NULL) {
                st = trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "compile cache: out of memory");
                break;
            }
            *list = nl2;
            *cap = nc;
        }
        cache_entry *c = &(*list)[(*n)++];
        memcpy(c->key, e->d_name, 64);
        c->key[64] = 0;
        c->aot = aot;
        c->bytes = size;
        c->used = sb.st_mtim;
        *total += size;
    }
    closedir(d);
    return st;
}

trn_status trn_compile_cache_evict(const char *dir, int64_t max_bytes, const char *keep,
                                   int64_t *removed) {
    if (removed) *removed = 0;
    if (dir == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT,
                              "trn_compile_cache_evict: NULL directory");
    trn_status st = trn_compile_cache_check_dir(dir);
    if (st != TRN_SUCCESS) return st;
    char aot[4200];
    snprintf(aot, sizeof aot, "%s/aot", dir);
    cache_entry *list = NULL;
    size_t n = 0, cap = 0;
    int64_t total = 0;
    st = scan_entries(dir, ".so", false, &list, &n, &cap, &total);
    if (st == TRN_SUCCESS) st = scan_entries(aot, ".bin", true, &list, &n, &cap, &total);
    if (st != TRN_SUCCESS) {
        free(list);
        return st;
    }
    qsort(list, n, sizeof *list, entry_older);
    int64_t gone = 0;
    for (size_t i = 0; i < n && total > max_bytes; i++) {
        if (keep != NULL && strcmp(list[i].key, keep) == 0) continue;
        char path[4300];
        if (list[i].aot) {
            snprintf(path, sizeof path, "%s/%s.bin", aot, list[i].key);
            if (unlink(path) != 0 && errno != ENOENT) continue;
        } else {
            // The MAC first: an .so without one is a miss, never a load.
            snprintf(path, sizeof path, "%s/%s.mac", dir, list[i].key);
            if (unlink(path) != 0 && errno != ENOENT) continue;
            snprintf(path, sizeof path, "%s/%s.so", dir, list[i].key);
            (void)unlink(path);
            snprintf(path, sizeof path, "%s/locks/%s.lock", dir, list[i].key);
            (void)unlink(path);
        }
        total -= list[i].bytes;
        gone += list[i].bytes;
    }
    free(list);
    if (removed) *removed = gone;
    return TRN_SUCCESS;
}
