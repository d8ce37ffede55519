// disc has one device, disc:0: a call naming another fails, naming the call.
#pragma once
#include <c10/core/Device.h>
#include <c10/util/Exception.h>

namespace disc {

inline void check_device_index(c10::DeviceIndex index, const char* call) {
  TORCH_CHECK(index <= 0, "disc: ", call, " on device disc:", static_cast<int>(index),
              ", which does not exist (only disc:0)");
}

}  // namespace disc
