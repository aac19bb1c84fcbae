// runtime/guard.cpp - c10's device guard for `neuron`: current device, current
// stream and events, all kept by libtrn. torch.Stream, torch.Event,
// torch.accelerator and every DeviceGuard in ATen reach the device through
// this object.
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "aten/eager_group.h"
#include "runtime/device.h"

namespace neuron {
namespace {

trn_event *as_event(void *event) { return static_cast<trn_event *>(event); }

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
    c10::DeviceType type() const override { return kNeuron; }

    c10::Device exchangeDevice(c10::Device d) const override {
        c10::Device old = getDevice();
        if (old.index() != d.index()) setDevice(d);
        return old;
    }
    c10::Device getDevice() const override { return c10::Device(kNeuron, current_device()); }
    void setDevice(c10::Device d) const override {
        TRN_CHECK(trn_device_set_current(device_index(d)));
    }
    void uncheckedSetDevice(c10::Device d) const noexcept override {
        (void)trn_device_set_current(d.index());
    }

    c10::Stream getStream(c10::Device d) const override {
        return to_c10_stream(current_trn_stream(device_index(d)));
    }
    c10::Stream getDefaultStream(c10::Device d) const override {
        trn_stream *s = nullptr;
        TRN_CHECK(trn_stream_get_default(device_index(d), &s));
        return to_c10_stream(s);
    }
    c10::Stream getNewStream(c10::Device d, int priority) const override {
        trn_stream *s = nullptr;
        TRN_CHECK(trn_stream_create(device_index(d), priority, &s));
        return to_c10_stream(s);
    }
    c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
        return getNewStream(d, high_priority ? -1 : 0);
    }
    c10::Stream exchangeStream(c10::Stream s) const override {
        c10::Stream old = getStream(s.device());
        TRN_CHECK(trn_stream_set_current(to_trn_stream(s)));
        return old;
    }
    c10::DeviceIndex deviceCount() const noexcept override {
        return static_cast<c10::DeviceIndex>(trn_device_count());
    }
    // torch.accelerator.get_device_capability: the dtypes libtrn stores
    // (trn/dtype.h), float8 included; quantized types are not supported.
    c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
        (void)device_index(d);  // validates the index
        using namespace c10;
        DeviceCapability cap;
        cap.capability_data.capability_bits =
            (1ULL << kIndex_Bool) | (1ULL << kIndex_Byte) | (1ULL << kIndex_Char) |
            (1ULL << kIndex_Short) | (1ULL << kIndex_Int) | (1ULL << kIndex_Long) |
            (1ULL << kIndex_UInt16) | (1ULL << kIndex_UInt32) | (1ULL << kIndex_UInt64) |
            (1ULL << kIndex_Half) | (1ULL << kIndex_BFloat16) | (1ULL << kIndex_Float) |
            (1ULL << kIndex_Double) | (1ULL << kIndex_ComplexFloat) |
            (1ULL << kIndex_ComplexDouble) | (1ULL << kIndex_Float8_e4m3fn) |
            (1ULL << kIndex_Float8_e5m2) | (1ULL << kIndex_Float8_e4m3fnuz) |
            (1ULL << kIndex_Float8_e5m2fnuz) | (1ULL << kIndex_Float8_e8m0fnu);
        return cap;
    }

    // Events: created lazily on first record, as CUDA does. Every event
    // takes timestamps (clock reads are cheap here), so the enable_timing
    // flag only affects what PyTorch lets the user ask for.
    void record(void **event, const c10::Stream &stream, const c10::DeviceIndex device_index,
                const c10::EventFlag flag) const override {
        (void)flag;
        TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                    "event device index ", device_index,
                    " does not match the recording stream's device ", stream.device_index());
        if (*event == nullptr) {
            trn_event *e = nullptr;
            TRN_CHECK(trn_event_create(TRN_EVENT_TIMING, &e));
            *event = e;
        }
        // An event captures the stream's work: it ends an open eager group as a sync.
        eager_group::EndHint hint(eager_group::End::Sync);
        TRN_CHECK(trn_event_record(as_event(*event), to_trn_stream(stream)));
    }
    void block(void *event, const c10::Stream &stream) const override {
        if (event == nullptr) return;
        eager_group::EndHint hint(eager_group::End::Sync);
        TRN_CHECK(trn_stream_wait_event(to_trn_stream(stream), as_event(event)));
    }
    bool queryEvent(void *event) const override {
        if (event == nullptr) return true;
        bool done = false;
        TRN_CHECK(trn_event_query(as_event(event), &done));
        return done;
    }
    void destroyEvent(void *event, const c10::DeviceIndex) const noexcept override {
        if (event != nullptr) trn_event_destroy(as_event(event));
    }
    void synchronizeEvent(void *event) const override {
        if (event != nullptr) TRN_CHECK(trn_event_synchronize(as_event(event)));
    }
    double elapsedTime(void *start, void *end, const c10::DeviceIndex) const override {
        TORCH_CHECK(start != nullptr && end != nullptr,
                    "both events must be recorded before elapsed_time");
        double ms = 0;
        TRN_CHECK(trn_event_elapsed_ms(as_event(start), as_event(end), &ms));
        return ms;
    }

    bool queryStream(const c10::Stream &stream) const override {
        bool done = false;
        TRN_CHECK(trn_stream_query(to_trn_stream(stream), &done));
        return done;
    }
    void synchronizeStream(const c10::Stream &stream) const override {
        TRN_CHECK(trn_stream_synchronize(to_trn_stream(stream)));
    }
    void synchronizeDevice(const c10::DeviceIndex index) const override {
        check_device(index);
        TRN_CHECK(trn_device_synchronize(index));
    }
    void recordDataPtrOnStream(const c10::DataPtr &data, const c10::Stream &stream) const override {
        if (data.get() != nullptr)
            TRN_CHECK(trn_mem_record_stream(data.get(), to_trn_stream(stream)));
    }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace
}  // namespace neuron
