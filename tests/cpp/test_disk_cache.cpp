// The on-disk blob store of the persistent compile cache: round trip, and
// every kind of bad entry discarded (and deleted), never returned.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/disk_cache.h"

using disc::runtime::DiskCache;

namespace {

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("disc_disk_cache_test." + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string file(const std::string& key) const { return (dir_ / key).string(); }
  std::string read(const std::string& key) const {
    std::ifstream f(file(key), std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
  }
  void write(const std::string& key, const std::string& bytes) const {
    std::ofstream(file(key), std::ios::binary | std::ios::trunc) << bytes;
  }

  std::filesystem::path dir_;
};

}  // namespace

TEST_F(DiskCacheTest, StoresAndLoadsAPayload) {
  DiskCache c(dir_.string(), "v1");
  DiskCache::Status st;
  EXPECT_FALSE(c.load("k", &st));
  EXPECT_EQ(st, DiskCache::Status::kMissing);
  std::string payload("bytes\0with a nul", 16);
  ASSERT_TRUE(c.store("k", payload));
  EXPECT_EQ(*c.load("k", &st), payload);
  EXPECT_EQ(st, DiskCache::Status::kHit);
  // No temporary files left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
}

TEST_F(DiskCacheTest, TruncatedEntryIsDiscardedAndDeleted) {
  DiskCache c(dir_.string(), "v1");
  ASSERT_TRUE(c.store("k", std::string(1000, 'x')));
  std::string bytes = read("k");
  write("k", bytes.substr(0, bytes.size() - 10));
  DiskCache::Status st;
  EXPECT_FALSE(c.load("k", &st));
  EXPECT_EQ(st, DiskCache::Status::kDiscarded);
  EXPECT_FALSE(std::filesystem::exists(file("k")));
}

TEST_F(DiskCacheTest, FlippedByteIsDiscarded) {
  DiskCache c(dir_.string(), "v1");
  ASSERT_TRUE(c.store("k", std::string(1000, 'x')));
  std::string bytes = read("k");
  bytes[bytes.size() - 500] ^= 0x20;
  write("k", bytes);
  DiskCache::Status st;
  EXPECT_FALSE(c.load("k", &st));
  EXPECT_EQ(st, DiskCache::Status::kDiscarded);
}

TEST_F(DiskCacheTest, OtherVersionIsDiscarded) {
  ASSERT_TRUE(DiskCache(dir_.string(), "v1").store("k", "payload"));
  DiskCache::Status st;
  EXPECT_FALSE(DiskCache(dir_.string(), "v2").load("k", &st));
  EXPECT_EQ(st, DiskCache::Status::kDiscarded);
  // A version that is a prefix of the stored one is another version too.
  ASSERT_TRUE(DiskCache(dir_.string(), "v10").store("k", "payload"));
  EXPECT_FALSE(DiskCache(dir_.string(), "v1").load("k", &st));
}

TEST_F(DiskCacheTest, GarbageAndEmptyFilesAreDiscarded) {
  DiskCache c(dir_.string(), "v1");
  std::filesystem::create_directories(dir_);
  for (const std::string bytes : {std::string(), std::string("DISC"), std::string(64, '\xff')}) {
    write("k", bytes);
    DiskCache::Status st;
    EXPECT_FALSE(c.load("k", &st));
    EXPECT_EQ(st, DiskCache::Status::kDiscarded);
  }
}

TEST_F(DiskCacheTest, UnwritableDirectoryFailsQuietly) {
  DiskCache c("/proc/disc_cannot_write_here", "v1");
  EXPECT_FALSE(c.store("k", "payload"));
  EXPECT_FALSE(c.load("k"));
}
