// cache.c - compiled graphs on disk.
//
// Owns: the cache directory layout, <key>.so and <key>.sha256 (the sha256 of
// the .so's bytes). Writes are atomic (a private temporary file in the same
// directory, then rename), so concurrent processes never see half an entry;
// two processes compiling the same key both rename identical bytes. An entry
// whose bytes do not hash to its .sha256 is ignored (and rewritten by the
// next compile), never loaded. The directory is created 0700.
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

static char *slurp(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat sbuf;
    if (fstat(fd, &sbuf) != 0 || sbuf.st_size < 0) {
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

char *trn__cc_cache_lookup(const char *dir, const char *key) {
    char so[4200], sum[4200];
    snprintf(so, sizeof so, "%s/%s.so", dir, key);
    snprintf(sum, sizeof sum, "%s/%s.sha256", dir, key);
    size_t sl = 0, bl = 0;
    char *expect = slurp(sum, &sl);
    if (expect == NULL || sl < 64) {
        free(expect);
        return NULL;
    }
    char *bytes = slurp(so, &bl);
    if (bytes == NULL) {
        free(expect);
        return NULL;
    }
    char got[65];
    trn_sha256_hex(bytes, bl, got);
    free(bytes);
    bool ok = memcmp(got, expect, 64) == 0;
    free(expect);
    if (!ok) return NULL;
    char *path = malloc(strlen(so) + 1);
    if (path) strcpy(path, so);
    return path;
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

trn_status trn__cc_cache_store(const char *dir, const char *key, const char *so_path, char **stored) {
    *stored = NULL;
    trn_status st = trn__cc_mkdir_private(dir);
    if (st != TRN_SUCCESS) return st;
    size_t len = 0;
    char *bytes = slurp(so_path, &len);
    if (bytes == NULL) return trn__set_error(TRN_ERROR_SYSTEM, "compile cache: cannot read %s", so_path);
    char sum[65], name[100];
    trn_sha256_hex(bytes, len, sum);
    // The object first, then its checksum: a reader needs both to agree.
    snprintf(name, sizeof name, "%s.so", key);
    st = atomic_write(dir, name, bytes, len);
    free(bytes);
    if (st != TRN_SUCCESS) return st;
    snprintf(name, sizeof name, "%s.sha256", key);
    st = atomic_write(dir, name, sum, 64);
    if (st != TRN_SUCCESS) return st;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.so", dir, key);
    *stored = malloc(strlen(path) + 1);
    if (*stored) strcpy(*stored, path);
    return TRN_SUCCESS;
}
