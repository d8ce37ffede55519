#include "lazy_backend/device/rng.h"

#include <ATen/ATen.h>
#include <c10/core/GeneratorImpl.h>

#include <cstring>
#include <mutex>

namespace disc {

namespace {

class DiscGeneratorImpl final : public c10::GeneratorImpl {
 public:
  DiscGeneratorImpl()
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, 0),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    set_current_seed(c10::detail::getNonDeterministicRandom());
    return seed_;
  }
  // State layout: 16 bytes, seed then offset (both little-endian uint64).
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.numel() == 16 && state.dtype() == at::kByte,
                "disc: RNG state must be a uint8 tensor of 16 bytes");
    const auto* p = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, p, 8);
    std::memcpy(&offset_, p + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::Tensor s = at::empty({16}, at::kByte);
    std::memcpy(s.data_ptr<uint8_t>(), &seed_, 8);
    std::memcpy(s.data_ptr<uint8_t>() + 8, &offset_, 8);
    return s.getIntrusivePtr();
  }
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  DiscGeneratorImpl* clone_impl() const override {
    auto* g = new DiscGeneratorImpl();
    g->seed_ = seed_;
    g->offset_ = offset_;
    return g;
  }
  uint64_t seed_ = 67280421310721ULL;  // torch's default CPU seed
  uint64_t offset_ = 0;
};

}  // namespace

at::Generator& default_disc_generator() {
  static at::Generator g = at::make_generator<DiscGeneratorImpl>();
  return g;
}

std::pair<uint64_t, uint64_t> next_random_draw() {
  at::Generator& g = default_disc_generator();
  std::lock_guard<std::mutex> lock(g.mutex());
  uint64_t offset = g.get_offset();
  g.set_offset(offset + 1);
  return {g.current_seed(), offset};
}

}  // namespace disc
