// aten/index_checked.cpp - the memo behind index_checked.h: a few recent
// checks, each keyed by its tensor's storage (held weakly, so a freed
// storage whose address comes back never matches), the elements it reads
// (data pointer and count for a dense tensor, else also sizes and strides:
// an expanded index such as BERT's token types), dtype and version.
#include "aten/index_checked.h"

#include <c10/core/StorageImpl.h>

#include <pthread.h>

#include <array>
#include <mutex>
#include <vector>

namespace neuron {
namespace {

struct Entry {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
    const void *data = nullptr;
    int64_t numel = 0;
    bool dense = true;
    std::vector<int64_t> sizes, strides;  // of a tensor that is not dense
    at::ScalarType dtype = at::ScalarType::Undefined;
    uint32_t version = 0;
    IndexCheck check{IndexCheck::Kind::Index, 0};
};

// A step's forwards check a handful of index tensors (BERT: the token ids,
// position ids, token types and the loss's labels) before their backwards
// read them; older entries are overwritten round robin.
constexpr size_t kEntries = 8;

struct Memo {
    std::mutex mu;
    std::array<Entry, kEntries> entries;
    size_t next = 0;
};

Memo *g_memo = nullptr;
std::once_flag g_memo_once;

// A forked child may have forked while another thread held the lock: it
// starts from an empty memo (the parent's is left as it was).
void memo_after_fork_child() { g_memo = new Memo; }

Memo &memo() {
    std::call_once(g_memo_once, [] {
        g_memo = new Memo;
        pthread_atfork(nullptr, nullptr, memo_after_fork_child);
    });
    return *g_memo;
}

// The tensor's version, or false when it cannot be keyed (inference tensors
// have no version counter; tensors without storage).
bool key_of(const at::Tensor &t, uint32_t *version) {
    if (!t.defined() || t.is_inference() || !t.has_storage()) return false;
    *version = t.unsafeGetTensorImpl()->version_counter().current_version();
    return true;
}

// Whether `e` keys the elements `t` reads: a dense block matches any dense
// view of it (the forward checks indices.reshape(-1), the backward reshapes
// them again); other views match only the same sizes and strides.
bool same_elements(const Entry &e, const at::Tensor &t) {
    if (e.data != t.const_data_ptr() || e.numel != t.numel() || e.dtype != t.scalar_type())
        return false;
    if (t.is_contiguous()) return e.dense;
    return !e.dense && t.sizes().equals(e.sizes) && t.strides().equals(e.strides);
}

bool within(const IndexCheck &have, const IndexCheck &need) {
    if (have.kind != need.kind || have.bound > need.bound) return false;
    return have.kind == IndexCheck::Kind::Index || have.ignore == need.ignore;
}

}  // namespace

void index_checked_note(const at::Tensor &idx, const IndexCheck &check) {
    uint32_t version;
    if (!key_of(idx, &version)) return;
    Entry e;
    e.storage = idx.storage().getWeakStorageImpl();
    e.data = idx.const_data_ptr();
    e.numel = idx.numel();
    e.dtype = idx.scalar_type();
    e.dense = idx.is_contiguous();
    if (!e.dense) {
        e.sizes = idx.sizes().vec();
        e.strides = idx.strides().vec();
    }
    e.version = version;
    e.check = check;
    Memo &m = memo();
    std::lock_guard<std::mutex> lock(m.mu);
    m.entries[m.next] = std::move(e);
    m.next = (m.next + 1) % kEntries;
}

bool index_checked_covers(const at::Tensor &idx, const IndexCheck &need) {
    uint32_t version;
    if (!key_of(idx, &version)) return false;
    const c10::StorageImpl *storage = idx.storage().unsafeGetStorageImpl();
    Memo &m = memo();
    std::lock_guard<std::mutex> lock(m.mu);
    for (const Entry &e : m.entries) {
        if (e.version != version || !within(e.check, need) || !same_elements(e, idx)) continue;
        // Alive and the same storage: a freed one expired, so an address
        // reused by a later storage is never taken for the checked one.
        const c10::intrusive_ptr<c10::StorageImpl> alive = e.storage.lock();
        if (alive && alive.get() == storage) return true;
    }
    return false;
}

}  // namespace neuron
