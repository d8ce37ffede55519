#include "runtime/disk_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace disc::runtime {

namespace {

constexpr char kMagic[8] = {'D', 'I', 'S', 'C', 'C', 'A', 'C', '1'};

void put_u64(std::string& out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}

bool get_u64(const std::string& in, size_t& pos, uint64_t* v) {
  if (pos + 8 > in.size()) return false;
  std::memcpy(v, in.data() + pos, 8);
  pos += 8;
  return true;
}

}  // namespace

uint64_t checksum(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

DiskCache::DiskCache(std::string dir, std::string version)
    : dir_(std::move(dir)), version_(std::move(version)) {}

std::string DiskCache::path(const std::string& key) const { return dir_ + "/" + key; }

std::optional<std::string> DiskCache::load(const std::string& key, Status* status) const {
  auto say = [status](Status s) {
    if (status) *status = s;
  };
  std::ifstream f(path(key), std::ios::binary);
  if (!f) {
    say(Status::kMissing);
    return std::nullopt;
  }
  std::ostringstream buf;
  buf << f.rdbuf();
  const std::string file = buf.str();
  // Header: magic, version length, version, payload size, checksum.
  size_t pos = sizeof(kMagic);
  uint64_t version_size = 0, size = 0, sum = 0;
  bool ok = file.size() >= pos && std::memcmp(file.data(), kMagic, sizeof(kMagic)) == 0 &&
            get_u64(file, pos, &version_size) && pos + version_size <= file.size() &&
            file.compare(pos, version_size, version_) == 0 && version_size == version_.size();
  if (ok) {
    pos += version_size;
    ok = get_u64(file, pos, &size) && get_u64(file, pos, &sum) && pos + size == file.size();
  }
  std::string payload = ok ? file.substr(pos) : std::string();
  if (!ok || checksum(payload) != sum) {
    std::error_code ec;
    std::filesystem::remove(path(key), ec);  // stale or damaged: recompile, rewrite
    say(Status::kDiscarded);
    return std::nullopt;
  }
  say(Status::kHit);
  return payload;
}

bool DiskCache::store(const std::string& key, const std::string& payload) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return false;
  std::string file(kMagic, sizeof(kMagic));
  put_u64(file, version_.size());
  file += version_;
  put_u64(file, payload.size());
  put_u64(file, checksum(payload));
  file += payload;
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path(key) + ".tmp." + std::to_string(getpid()) + "." +
                          std::to_string(counter++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return false;
    f.write(file.data(), static_cast<std::streamsize>(file.size()));
    if (!f.flush()) {
      f.close();
      std::filesystem::remove(tmp, ec);
      return false;
    }
  }
  std::filesystem::rename(tmp, path(key), ec);
  const bool renamed = !ec;
  if (!renamed) std::filesystem::remove(tmp, ec);
  return renamed;
}

}  // namespace disc::runtime
