#include "lazy_backend/base/failures.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace disc {

namespace {

std::mutex& failures_mutex() {
  static std::mutex mu;
  return mu;
}

// Failing threads and their errors (failures_mutex()); `failing` mirrors
// its size for the lock-free check.
std::unordered_map<uint64_t, std::exception_ptr>& failing_threads() {
  static auto* m = new std::unordered_map<uint64_t, std::exception_ptr>();  // leaked: read at exit
  return *m;
}
std::atomic<size_t> failing{0};

std::exception_ptr erase(uint64_t thread) {
  auto it = failing_threads().find(thread);
  if (it == failing_threads().end()) return nullptr;
  std::exception_ptr e = it->second;
  failing_threads().erase(it);
  failing.store(failing_threads().size());
  return e;
}

}  // namespace

uint64_t this_thread_token() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t token = next++;
  return token;
}

void record_failure(const std::exception_ptr& error, const std::vector<uint64_t>& threads) {
  std::lock_guard<std::mutex> lock(failures_mutex());
  for (uint64_t t : threads) failing_threads().emplace(t, error);
  failing.store(failing_threads().size());
}

std::exception_ptr failure_of(uint64_t thread) {
  if (!any_thread_failing()) return nullptr;
  std::lock_guard<std::mutex> lock(failures_mutex());
  auto it = failing_threads().find(thread);
  return it == failing_threads().end() ? nullptr : it->second;
}

bool any_thread_failing() { return failing.load(std::memory_order_acquire) > 0; }

std::exception_ptr end_failure() {
  if (!any_thread_failing()) return nullptr;
  std::lock_guard<std::mutex> lock(failures_mutex());
  return erase(this_thread_token());
}

void failure_seen(const std::exception_ptr& error) {
  std::lock_guard<std::mutex> lock(failures_mutex());
  auto it = failing_threads().find(this_thread_token());
  if (it != failing_threads().end() && it->second == error) erase(it->first);
}

}  // namespace disc
