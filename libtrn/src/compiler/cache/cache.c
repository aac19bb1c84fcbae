// cache.c - compiled graphs on disk.
//
// Owns: the cache directory layout, <key>.so and <key>.mac (the HMAC of the
// key and the .so's bytes under the user's cache key, cache_key.c). Writes
// are atomic (a private temporary file in the same directory, then rename),
// so concurrent processes never see half an entry; two processes compiling
// the same key both rename identical bytes. A directory is used only if it
// passes trn_compile_cache_check_dir; an entry whose MAC does not verify is
// ignored (and rewritten by the next compile), never loaded; a verified entry
// is handed out as bytes, so what is loaded is what was verified.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../internal.h"
#include "../compiler_impl.h"

trn_status trn__cc_mkdir_private(const char *dir) {
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "compile cache: bad directory name");
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != 0) continue;
        char c = path[i];
        path[i] = 0;
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return trn__set_error(TRN_ERROR_SYSTEM, "compile cache: cannot create %s: %s", path, strerror(errno));
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
    *len = bl;
    return bytes;
}

// Writes `len` bytes to dir/<final> through a temporary file and rename.
static trn_status atomic_write(const char *dir, const char *final, const char *data, size_t len) {
    char tmp[4200], dst[4200];
    snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", dir);
    snprintf(dst, sizeof dst, "%s/%s", dir, final);
    int fd = mkstemp(tmp);
    if (fd < 0) return trn__set_error(TRN_ERROR_SYSTEM, "compile cache: cannot write in %s: %s", dir, strerror(errno));
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
