// runtime/hooks.cpp - PrivateUse1 hooks: what autograd, torch.accelerator,
// pin_memory, from_blob and torch.Generator ask of an accelerator.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>

#include "runtime/generator.h"
#include "runtime/device.h"

namespace neuron {

at::Allocator *device_allocator();

namespace {

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
    bool isBuilt() const override { return true; }
    bool isAvailable() const override { return trn_device_count() > 0; }
    bool hasPrimaryContext(c10::DeviceIndex index) const override {
        return trn_runtime_is_initialized() && trn_device_check(index) == TRN_SUCCESS;
    }
    void init() const override { TRN_CHECK(trn_runtime_init()); }

    c10::DeviceIndex deviceCount() const override {
        return static_cast<c10::DeviceIndex>(trn_device_count());
    }
    void setCurrentDevice(c10::DeviceIndex index) const override {
        check_device(index);
        TRN_CHECK(trn_device_set_current(index));
    }
    c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
    c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
        c10::DeviceIndex old = current_device();
        if (index != old) setCurrentDevice(index);
        return old;
    }
    c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
        return exchangeDevice(index);
    }

    bool isPinnedPtr(const void *data) const override { return trn_host_is_pinned(data); }
    at::Allocator *getPinnedMemoryAllocator() const override {
        return at::getHostAllocator(at::kPrivateUse1);
    }
    at::Device getDeviceFromPtr(void *data) const override {
        int dev = 0;
        TRN_CHECK(trn_mem_get_device(data, &dev));
        return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(dev));
    }

    const at::Generator &getDefaultGenerator(c10::DeviceIndex index) const override {
        return default_generator(index);
    }
    at::Generator getNewGenerator(c10::DeviceIndex index) const override {
        return new_generator(index);
    }

    // UntypedStorage.resize_ on a neuron storage: new block, old bytes copied
    // on the stream, old block released (stream-ordered, so safe).
    void resizePrivateUse1Bytes(const c10::Storage &storage, size_t newsize) const override {
        c10::StorageImpl *impl = storage.unsafeGetStorageImpl();
        TORCH_CHECK(impl->resizable(), "trying to resize a storage that is not resizable");
        size_t old = impl->nbytes();
        c10::DeviceGuard guard(impl->device());
        c10::DataPtr fresh = device_allocator()->allocate(newsize);
        size_t keep = std::min(old, newsize);
        if (keep > 0) device_allocator()->copy_data(fresh.get(), impl->data(), keep);
        impl->set_data_ptr_noswap(std::move(fresh));
        impl->set_nbytes(newsize);
    }
};

// Registered when the extension loads, before Python touches the device.
struct HooksRegistrar {
    HooksRegistrar() { at::RegisterPrivateUse1HooksInterface(new NeuronHooks()); }
} g_hooks_registrar;

}  // namespace
}  // namespace neuron
