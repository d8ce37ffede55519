// A directory of checksummed blobs that outlives the process: compiled
// kernels and graph manifests, so a second run of a script compiles nothing.
// Torch-free.
//
// Each file holds a header (magic, the version string, payload size and
// checksum) and the payload. Anything that does not check out -- truncated,
// corrupted, written by another version -- is deleted and reported as
// kDiscarded, never loaded. Writers write a private temporary file and
// rename it into place, which is atomic: concurrent processes never see a
// half-written entry, and the last writer of identical content wins.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace disc::runtime {

class DiskCache {
 public:
  enum class Status { kHit, kMissing, kDiscarded };

  // `version` names everything the entries depend on (compiler version,
  // LLVM version, target CPU and features); entries of another version are
  // discarded on load.
  DiskCache(std::string dir, std::string version);

  // The payload stored under `key` (a file name: [0-9a-z._-]).
  std::optional<std::string> load(const std::string& key, Status* status = nullptr) const;
  // Stores the payload; false (and nothing left behind) when the directory
  // cannot be written. Never throws.
  bool store(const std::string& key, const std::string& payload) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string path(const std::string& key) const;
  std::string dir_;
  std::string version_;
};

// Checksum of the payload (FNV-1a 64): detects truncation and bit flips.
uint64_t checksum(const std::string& bytes);

}  // namespace disc::runtime
