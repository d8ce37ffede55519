// Registers the disc device with c10/ATen: one device (disc:0), a device
// guard, the allocator of lazy storages (allocator.h), and the PrivateUse1
// hooks (pinned host memory included).
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "lazy_backend/accelerator/events.h"
#include "lazy_backend/accelerator/pinned_memory.h"
#include "lazy_backend/device/device_index.h"
#include "lazy_backend/device/host_cache.h"
#include "lazy_backend/device/rng.h"
#include "lazy_backend/trace/allocator.h"
#include "lazy_backend/trace/lazy_storage.h"
#include "lazy_backend/trace/tensor_data.h"

namespace disc {

namespace {

constexpr c10::DeviceType kDisc = c10::DeviceType::PrivateUse1;

// One device; streams and events as events.h describes them.
struct DiscGuardImpl final : c10::impl::NoOpDeviceGuardImpl<kDisc> {
  c10::Device exchangeDevice(c10::Device) const override { return {kDisc, 0}; }
  c10::Device getDevice() const override { return {kDisc, 0}; }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() <= 0, "disc: device ", d, " does not exist (only disc:0)");
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }

  // torch.accelerator.get_device_capability(): the dtypes a disc tensor may
  // have (torch's default claims every dtype, float8 and quantized ones too).
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability cap;
    auto& has = cap.capability_data.supported_scalar_types;
#define DISC_HAS_DTYPE(_, name) has.has_##name = ir_dtype(c10::ScalarType::name).has_value();
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(DISC_HAS_DTYPE)
#undef DISC_HAS_DTYPE
    return cap;
  }

  c10::Stream getStream(c10::Device) const noexcept override { return events::current_stream(); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    return events::exchange_stream(s);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    check_device_index(d.index(), "default_stream");
    return events::default_stream();
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    check_device_index(d.index(), "Stream()");
    return events::new_stream();
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return getNewStream(d, 0);
  }
  bool queryStream(const c10::Stream&) const override { return events::query_device(); }
  void synchronizeStream(const c10::Stream&) const override { events::synchronize_device(); }
  void synchronizeDevice(c10::DeviceIndex index) const override {
    check_device_index(index, "synchronize");
    events::synchronize_device();
  }

  void record(void** event, const c10::Stream& stream, c10::DeviceIndex index,
              c10::EventFlag flag) const override {
    check_device_index(index, "Event.record");
    TORCH_CHECK(stream.device_type() == kDisc, "disc: Event.record on a ", stream.device_type(),
                " stream");
    events::record(event, flag);
  }
  // One execution order: whatever the event follows runs before what the
  // stream does next.
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void* event) const override { return !event || events::query(event); }
  void synchronizeEvent(void* event) const override {
    if (event) events::synchronize(event);
  }
  double elapsedTime(void* start, void* end, c10::DeviceIndex) const override {
    return events::elapsed_ms(start, end);
  }
  void destroyEvent(void* event, c10::DeviceIndex) const noexcept override {
    events::destroy(event);
  }
};

struct DiscHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return default_disc_generator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return default_disc_generator().clone();
  }
  at::Device getDeviceFromPtr(void*) const override { return {kDisc, 0}; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_memory_allocator(); }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex d) const override {
    TORCH_CHECK(d == 0, "disc: device disc:", static_cast<int>(d), " does not exist");
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex) const override { return 0; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return 0; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* s = static_cast<LazyStorage*>(storage.data_ptr().get_context());
    TORCH_CHECK(s, "disc: storage without a lazy buffer");
    TraceLock lock;
    TORCH_CHECK(newsize == 0 || newsize >= s->nbytes(), "disc: storage.resize_(", newsize,
                ") of a ", s->nbytes(), "-byte storage: shrinking is supported to 0 bytes only");
    if (newsize == 0) s->free_all();
    else s->grow(newsize);
    storage.unsafeGetStorageImpl()->set_nbytes(newsize);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, DiscGuardImpl);

const bool registered = [] {
  c10::SetAllocator(kDisc, disc_allocator());
  install_host_cache();
  at::RegisterPrivateUse1HooksInterface(new DiscHooks());  // lives for the process
  return true;
}();

}  // namespace

}  // namespace disc
