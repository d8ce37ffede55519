#include "lazy_backend/dist/groups.h"

#include <c10/util/Exception.h>

#include <mutex>
#include <unordered_map>

namespace disc::dist {

namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

std::unordered_map<int64_t, std::shared_ptr<Group>>& registry() {
  static auto* groups = new std::unordered_map<int64_t, std::shared_ptr<Group>>();
  return *groups;
}

}  // namespace

int64_t register_group(std::shared_ptr<Group> g) {
  static int64_t next = 0;
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().emplace(next, std::move(g));
  return next++;
}

void unregister_group(int64_t id) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(id);
}

std::shared_ptr<Group> find_group(int64_t id) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(id);
  TORCH_CHECK(it != registry().end(), "disc: a recorded collective's process group (disc backend #",
              id, ") was destroyed before the graph that runs it");
  return it->second;
}

}  // namespace disc::dist
