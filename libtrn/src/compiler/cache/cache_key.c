// cache_key.c - who may write the compile cache: private directories and the
// user's cache key.
//
// Owns: the trust checks on cache directories and the per-user key that
// authenticates every cache entry (HMAC-SHA256, RFC 2104). A checksum alone
// only catches accidents: anyone who can write the directory can write a
// matching checksum. The key lives outside the cache, 0600 in the user's own
// config directory, so a cache directory another user prepared (or a shared
// one) can at worst cost a recompile, never run their code.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../internal.h"
#include "../compiler_impl.h"

enum { KEY_BYTES = 32 };

trn_status trn__cc_check_private_dir(const char *dir, const char *what) {
    // lstat a path with trailing slashes would follow a symlink: strip them.
    char path[4096];
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    if (n == 0 || n >= sizeof path)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "%s: bad directory name", what);
    memcpy(path, dir, n);
    path[n] = 0;
    struct stat s;
    if (lstat(path, &s) != 0)
        return trn__set_error(TRN_ERROR_SYSTEM, "%s %s: %s", what, path, strerror(errno));
    if (S_ISLNK(s.st_mode))
        return trn__set_error(TRN_ERROR_SYSTEM, "%s %s is a symbolic link", what, path);
    if (!S_ISDIR(s.st_mode))
        return trn__set_error(TRN_ERROR_SYSTEM, "%s %s is not a directory", what, path);
    if (s.st_uid != geteuid())
        return trn__set_error(TRN_ERROR_SYSTEM, "%s %s is owned by uid %u, not by you (uid %u)",
                              what, path, (unsigned)s.st_uid, (unsigned)geteuid());
    if (s.st_mode & (S_IWGRP | S_IWOTH))
        return trn__set_error(TRN_ERROR_SYSTEM, "%s %s is writable by group or others (mode %03o)",
                              what, path, (unsigned)(s.st_mode & 0777));
    if (access(path, W_OK | X_OK) != 0)
        return trn__set_error(TRN_ERROR_SYSTEM, "%s %s is not writable: %s", what, path,
                              strerror(errno));
    return TRN_SUCCESS;
}

trn_status trn_compile_cache_check_dir(const char *dir) {
    if (dir == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "compile cache: NULL directory");
    trn_status st = trn__cc_mkdir_private(dir);
    return st != TRN_SUCCESS ? st : trn__cc_check_private_dir(dir, "compile cache directory");
}

// $XDG_CONFIG_HOME/openneuron, else ~/.config/openneuron (HOME, else passwd).
static bool key_dir(char *out, size_t cap) {
    const char *xdg = getenv("XDG_CONFIG_HOME");
    if (xdg && xdg[0] == '/') return (size_t)snprintf(out, cap, "%s/openneuron", xdg) < cap;
    const char *home = getenv("HOME");
    struct passwd pw, *found = NULL;
    char buf[4096];
    if ((home == NULL || home[0] != '/') &&
        getpwuid_r(geteuid(), &pw, buf, sizeof buf, &found) == 0 && found)
        home = found->pw_dir;
    if (home == NULL || home[0] != '/') return false;
    return (size_t)snprintf(out, cap, "%s/.config/openneuron", home) < cap;
}

// Reads the key at `path`: a regular file of KEY_BYTES, ours, private.
// 1: read; 0: no such file; -1: refused (error set).
static int key_read(const char *path, unsigned char key[KEY_BYTES]) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        trn__set_error(TRN_ERROR_SYSTEM, "compile cache key %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat s;
    ssize_t got = -1;
    const char *why = NULL;
    if (fstat(fd, &s) != 0 || !S_ISREG(s.st_mode))
        why = "is not a regular file";
    else if (s.st_uid != geteuid())
        why = "is not owned by you";
    else if (s.st_mode & 077)
        why = "is readable or writable by others (want mode 600)";
    else if ((got = read(fd, key, KEY_BYTES)) != KEY_BYTES || s.st_size != KEY_BYTES)
        why = "is not a key (size)";
    close(fd);
    if (why == NULL) return 1;
    trn__set_error(TRN_ERROR_SYSTEM, "compile cache key %s %s; remove it to make a new one", path,
                   why);
    return -1;
}

// Makes a fresh key at `path`: written to a private temporary file, then
// linked into place, so concurrent processes agree on the first one made.
static trn_status key_create(const char *dir, const char *path) {
    unsigned char key[KEY_BYTES];
    if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key)
        return trn__set_error(TRN_ERROR_SYSTEM, "compile cache key: getrandom: %s",
                              strerror(errno));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/.key-XXXXXX", dir);
    int fd = mkstemp(tmp);  // mode 0600
    if (fd < 0)
        return trn__set_error(TRN_ERROR_SYSTEM, "compile cache key: cannot write in %s: %s", dir,
                              strerror(errno));
    bool ok = write(fd, key, sizeof key) == (ssize_t)sizeof key && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    int linked = ok ? link(tmp, path) : -1;
    int err = errno;
    unlink(tmp);
    if (linked != 0 && !(ok && err == EEXIST))
        return trn__set_error(TRN_ERROR_SYSTEM, "compile cache key: cannot create %s: %s", path,
                              strerror(err));
    return TRN_SUCCESS;
}

static pthread_mutex_t key_lock = PTHREAD_MUTEX_INITIALIZER;
static char key_path[4200];  // the path the cached key came from
static unsigned char key_bytes[KEY_BYTES];

// The user's key (copied out), loaded or created once per path.
static trn_status key_get(unsigned char key[KEY_BYTES]) {
    char dir[4096], path[4200];
    if (!key_dir(dir, sizeof dir))
        return trn__set_error(TRN_ERROR_SYSTEM,
                              "compile cache key: no home directory (set HOME or XDG_CONFIG_HOME)");
    snprintf(path, sizeof path, "%s/compile-cache.key", dir);
    pthread_mutex_lock(&key_lock);
    trn_status st = TRN_SUCCESS;
    if (strcmp(path, key_path) != 0) {
        st = trn__cc_mkdir_private(dir);
        if (st == TRN_SUCCESS) st = trn__cc_check_private_dir(dir, "compile cache key directory");
        int r = st == TRN_SUCCESS ? key_read(path, key_bytes) : -1;
        if (r == 0) {
            st = key_create(dir, path);
            r = st == TRN_SUCCESS ? key_read(path, key_bytes) : -1;
        }
        if (r == 1)
            snprintf(key_path, sizeof key_path, "%s", path);
        else if (st == TRN_SUCCESS)
            st = TRN_ERROR_SYSTEM;  // key_read set the message
    }
    if (st == TRN_SUCCESS) memcpy(key, key_bytes, KEY_BYTES);
    pthread_mutex_unlock(&key_lock);
    return st;
}

trn_status trn_compile_cache_mac(const char *label, const void *data, size_t len, char out[65]) {
    if (label == NULL || (data == NULL && len) || out == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_compile_cache_mac: NULL argument");
    unsigned char key[KEY_BYTES], pad[64], inner[32], mac[32];
    trn_status st = key_get(key);
    if (st != TRN_SUCCESS) return st;
    // The label's length first, so (label, data) splits one way only.
    unsigned char lab[8];
    uint64_t ll = strlen(label);
    for (int i = 0; i < 8; i++) lab[i] = (unsigned char)(ll >> (8 * i));
    trn__sha256 c;
    memset(pad, 0x36, sizeof pad);
    for (int i = 0; i < KEY_BYTES; i++) pad[i] ^= key[i];
    trn__sha256_init(&c);
    trn__sha256_update(&c, pad, sizeof pad);
    trn__sha256_update(&c, lab, sizeof lab);
    trn__sha256_update(&c, label, ll);
    trn__sha256_update(&c, data, len);
    trn__sha256_final(&c, inner);
    memset(pad, 0x5c, sizeof pad);
    for (int i = 0; i < KEY_BYTES; i++) pad[i] ^= key[i];
    trn__sha256_init(&c);
    trn__sha256_update(&c, pad, sizeof pad);
    trn__sha256_update(&c, inner, sizeof inner);
    trn__sha256_final(&c, mac);
    trn__hex(mac, sizeof mac, out);
    return TRN_SUCCESS;
}
