#include "lazy_backend/base/python_location.h"

#include <utility>

namespace disc {

namespace {

std::function<std::string()>& location_provider() {
  static std::function<std::string()> f;
  return f;
}

}  // namespace

void set_python_location_provider(std::function<std::string()> provider) {
  location_provider() = std::move(provider);
}

std::string python_location() {
  return location_provider() ? location_provider()() : "";
}

}  // namespace disc
