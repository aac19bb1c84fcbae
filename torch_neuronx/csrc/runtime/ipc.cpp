// runtime/ipc.cpp - neuron storages shared between processes
// (torch_neuronx/multiprocessing.py registers the pickling). Sharing moves a
// storage into a shareable device block (trn/ipc.h) once, swapping its
// DataPtr in place so every tensor viewing it keeps working; the receiver
// maps the same pages as a storage of its own. Each side's DataPtr deleter
// unmaps its mapping; the last one frees the pages.
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Storage.h>

#include <unistd.h>

#include "runtime/bindings.h"
#include "runtime/device.h"
#include "trn/ipc.h"

namespace py = pybind11;

namespace neuron {
at::Allocator *device_allocator();

namespace {

void shared_delete(void *ptr) {
    if (trn_mem_free(ptr) != TRN_SUCCESS) {
        std::fprintf(stderr, "[neuron] warning: unmapping shared device memory failed: %s\n",
                     trn_last_error());
        trn_clear_error();
    }
}

// (fd, nbytes, device) of the storage, after moving it into shared memory if
// needed. The caller owns fd.
py::tuple share(py::handle storage_obj) {
    const c10::Storage &storage = THPStorage_Unpack(storage_obj.ptr());
    c10::Device dev = storage.device();
    TORCH_CHECK(dev.type() == kNeuron, "expected a neuron storage, got one on ", dev);
    size_t nbytes = storage.nbytes();
    TORCH_CHECK(nbytes > 0, "cannot share an empty neuron storage");
    void *old = storage.mutable_data();
    if (!trn_ipc_is_shared(old)) {
        void *fresh = nullptr;
        TRN_CHECK(trn_ipc_alloc(dev.index(), nbytes, &fresh));
        c10::DataPtr data(fresh, fresh, &shared_delete, dev);
        int64_t n = static_cast<int64_t>(nbytes), one = 1;
        trn_copy_desc desc{1, &n, fresh, &one, TRN_DTYPE_U8, old, &one, TRN_DTYPE_U8};
        trn_stream *s = current_trn_stream(dev.index());
        TRN_CHECK(trn_copy_launch(s, &desc));
        TRN_CHECK(trn_device_synchronize(dev.index()));
        // Old block goes back to the cache when the old DataPtr dies here.
        storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(data));
    } else {
        // Writes queued on the device must land before the receiver reads.
        TRN_CHECK(trn_device_synchronize(dev.index()));
    }
    int fd = -1;
    size_t size = 0;
    TRN_CHECK(trn_ipc_export(storage.mutable_data(), &fd, &size));
    return py::make_tuple(fd, size, static_cast<int>(dev.index()));
}

py::object open_shared(int fd, size_t nbytes, int device) {
    check_device(static_cast<c10::DeviceIndex>(device));
    void *ptr = nullptr;
    TRN_CHECK(trn_ipc_import(device, fd, nbytes, &ptr));
    c10::Device dev(kNeuron, static_cast<c10::DeviceIndex>(device));
    c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes,
                         c10::DataPtr(ptr, ptr, &shared_delete, dev), device_allocator(),
                         /*resizable=*/false);
    return py::reinterpret_steal<py::object>(THPStorage_Wrap(std::move(storage)));
}

BindingsRegistrar reg([](py::module_ &m) {
    m.def("_share_storage", [](py::handle s) { return guarded([&] { return share(s); }); });
    m.def("_open_shared_storage", [](int fd, size_t nbytes, int device) {
        return guarded([&] { return open_shared(fd, nbytes, device); });
    });
    m.def("_is_shared_storage",
          [](py::handle s) { return trn_ipc_is_shared(THPStorage_Unpack(s.ptr()).data()) != 0; });
});

}  // namespace
}  // namespace neuron
