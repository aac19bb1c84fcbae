// trn/ipc.h - device memory shared between processes (torch.multiprocessing
// queues and pipes, DataLoader workers).
//
// A shared block is device memory backed by an anonymous memory file
// (memfd): the owner passes a file descriptor to another process, which maps
// the same pages as a device block of its own. Each side frees its mapping
// with trn_mem_free; the pages go back to the system when the last mapping
// and the last descriptor are gone, so nothing is ever left behind in
// /dev/shm, whichever process exits first.
// Shared blocks count as allocated and reserved memory in each process that
// maps them and are never cached.
#ifndef TRN_IPC_H
#define TRN_IPC_H

#include <stddef.h>

#include "trn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// Allocates a shareable block of nbytes (> 0) on the device.
trn_status trn_ipc_alloc(int device, size_t nbytes, void **ptr);
// A new descriptor (close-on-exec, owned by the caller) for the shared block
// that starts at ptr. TRN_ERROR_INVALID_POINTER if it is not one.
trn_status trn_ipc_export(const void *ptr, int *fd, size_t *nbytes);
// Maps a block exported by another process (fd is not consumed) as device
// memory of `device` in this process.
trn_status trn_ipc_import(int device, int fd, size_t nbytes, void **ptr);
// Whether ptr is the start of a shared block.
int trn_ipc_is_shared(const void *ptr);

#ifdef __cplusplus
}
#endif
#endif
