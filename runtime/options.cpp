#include "runtime/options.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace disc::options {

namespace {

constexpr size_t kCount = static_cast<size_t>(Id::kCount);

// Values: numbers (bool, int, choice index) in atomics, read on hot paths
// without a lock; text under a mutex.
struct Slot {
  std::atomic<bool> loaded{false};
  std::atomic<int64_t> number{0};
  std::string text;
};

struct Store {
  std::mutex mu;
  Slot slots[kCount];
};

Store& store() {
  static Store s;
  return s;
}

std::vector<std::string> split_choices(const char* choices) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* c = choices; *c; ++c) {
    if (*c == '|') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += *c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

[[noreturn]] void bad(const Info& o, const std::string& value, const std::string& expected) {
  throw std::invalid_argument(std::string(o.name) + "='" + value + "': expected " + expected);
}

// `value` as the option stores it: (number, canonical text).
std::pair<int64_t, std::string> parse(const Info& o, const std::string& value) {
  switch (o.type) {
    case Type::kBool: {
      const std::string v = lower(value);
      if (v == "1" || v == "true" || v == "on") return {1, "1"};
      if (v == "0" || v == "false" || v == "off") return {0, "0"};
      bad(o, value, "one of 0/1/false/true/off/on");
    }
    case Type::kInt: {
      // A named value (`choices`, e.g. "auto") reads as -1, -2, ...
      const std::vector<std::string> named = o.choices[0] ? split_choices(o.choices) : std::vector<std::string>{};
      for (size_t k = 0; k < named.size(); ++k)
        if (lower(value) == named[k]) return {-static_cast<int64_t>(k) - 1, named[k]};
      size_t used = 0;
      long long n = -1;
      try {
        n = std::stoll(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != value.size() || n < 0)
        bad(o, value, named.empty() ? "a whole number >= 0" : "a whole number >= 0 or " + std::string(o.choices));
      return {n, std::to_string(n)};
    }
    case Type::kChoice: {
      const std::vector<std::string> known = split_choices(o.choices);
      for (size_t k = 0; k < known.size(); ++k)
        if (lower(value) == known[k]) return {static_cast<int64_t>(k), known[k]};
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      bad(o, value, "one of " + list);
    }
    case Type::kText: return {0, value};
  }
  bad(o, value, "a value");
}

void store_value(Slot& slot, const std::pair<int64_t, std::string>& v) {
  slot.text = v.second;
  slot.number.store(v.first, std::memory_order_relaxed);
  slot.loaded.store(true, std::memory_order_release);
}

Slot& loaded(Id id) {
  Slot& slot = store().slots[static_cast<size_t>(id)];
  if (slot.loaded.load(std::memory_order_acquire)) return slot;
  std::lock_guard<std::mutex> lock(store().mu);
  if (slot.loaded.load(std::memory_order_relaxed)) return slot;
  const Info& o = info(id);
  const char* env = std::getenv(o.name);
  // An empty variable is an unset one, as `VAR= cmd` means in a shell.
  store_value(slot, parse(o, env && *env ? env : o.default_value));
  return slot;
}

void check_type(Id id, Type want) {
  if (info(id).type != want)
    throw std::logic_error(std::string(info(id).name) + " is read as the wrong type");
}

}  // namespace

const std::vector<Info>& all() {
  static const std::vector<Info> infos{
#define DISC_OPTION(id, name, type, def, choices, effect, doc) \
  {Id::id, name, Type::type, def, choices, Effect::effect, doc},
#include "runtime/options.def"
#undef DISC_OPTION
  };
  return infos;
}

const Info& info(Id id) { return all()[static_cast<size_t>(id)]; }

const Info& info(const std::string& name) {
  for (const Info& o : all())
    if (name == o.name) return o;
  std::string known;
  for (const Info& o : all()) known += (known.empty() ? "" : ", ") + std::string(o.name);
  throw std::invalid_argument("unknown option '" + name + "' (known: " + known + ")");
}

bool flag(Id id) {
  check_type(id, Type::kBool);
  return loaded(id).number.load(std::memory_order_relaxed) != 0;
}

int64_t integer(Id id) {
  check_type(id, Type::kInt);
  return loaded(id).number.load(std::memory_order_relaxed);
}

int64_t choice(Id id) {
  if (info(id).type != Type::kChoice) check_type(id, Type::kBool);
  return loaded(id).number.load(std::memory_order_relaxed);
}

std::string text(Id id) {
  Slot& slot = loaded(id);
  std::lock_guard<std::mutex> lock(store().mu);
  return slot.text;
}

void set(Id id, const std::string& value) {
  const auto parsed = parse(info(id), value);  // throws before anything changes
  std::lock_guard<std::mutex> lock(store().mu);
  store_value(store().slots[static_cast<size_t>(id)], parsed);
}

void reset(Id id) {
  {
    std::lock_guard<std::mutex> lock(store().mu);
    store().slots[static_cast<size_t>(id)].loaded.store(false, std::memory_order_release);
  }
  loaded(id);
}

std::string user_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return x;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache";
}

}  // namespace disc::options
