// runtime/options: every DISC_* option parses one way, from the environment
// at first read or from set(); bad values name the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "runtime/options.h"

using namespace disc;

TEST(Options, BooleansTakeTheSixSpellingsInAnyCase) {
  for (const char* on : {"1", "true", "on", "TRUE", "On"}) {
    options::set(options::Id::kGemmMerge, on);
    EXPECT_TRUE(options::flag(options::Id::kGemmMerge)) << on;
  }
  for (const char* off : {"0", "false", "off", "False", "OFF"}) {
    options::set(options::Id::kGemmMerge, off);
    EXPECT_FALSE(options::flag(options::Id::kGemmMerge)) << off;
  }
  options::reset(options::Id::kGemmMerge);
}

TEST(Options, ABadValueNamesTheVariableAndChangesNothing) {
  options::set(options::Id::kDebugSync, "0");
  try {
    options::set(options::Id::kDebugSync, "yes");
    FAIL() << "accepted 'yes'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("DISC_DEBUG_SYNC='yes'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(options::flag(options::Id::kDebugSync));
  EXPECT_THROW(options::set(options::Id::kHostCacheMb, "12MB"), std::invalid_argument);
  EXPECT_THROW(options::set(options::Id::kHostCacheMb, "-1"), std::invalid_argument);
  EXPECT_THROW(options::set(options::Id::kConv, "nhcw"), std::invalid_argument);
  options::reset(options::Id::kDebugSync);
}

TEST(Options, TheEnvironmentIsReadAtTheFirstReadAfterAReset) {
  setenv("DISC_PROFILE", "on", 1);
  options::reset(options::Id::kProfile);
  EXPECT_TRUE(options::flag(options::Id::kProfile));
  setenv("DISC_PROFILE", "", 1);  // empty: unset, the default
  options::reset(options::Id::kProfile);
  EXPECT_FALSE(options::flag(options::Id::kProfile));
  unsetenv("DISC_PROFILE");
  options::reset(options::Id::kProfile);
}

TEST(Options, ChoicesAndNumbersReadBackCanonically) {
  options::set(options::Id::kConv, "NCHW");
  EXPECT_EQ(options::text(options::Id::kConv), "nchw");
  EXPECT_EQ(options::choice(options::Id::kConv), 1);
  options::reset(options::Id::kConv);
  options::set(options::Id::kHostCacheMb, "64");
  EXPECT_EQ(options::integer(options::Id::kHostCacheMb), 64);
  options::set(options::Id::kHostCacheMb, "AUTO");  // a named value: -1
  EXPECT_EQ(options::text(options::Id::kHostCacheMb), "auto");
  EXPECT_EQ(options::integer(options::Id::kHostCacheMb), -1);
  options::reset(options::Id::kHostCacheMb);
}

TEST(Options, EachOptionIsDeclaredOnceWithADocLineAndAValidDefault) {
  std::set<std::string> names;
  for (const options::Info& o : options::all()) {
    EXPECT_TRUE(names.insert(o.name).second) << o.name;
    EXPECT_EQ(std::string(o.name).rfind("DISC_", 0), 0u) << o.name;
    EXPECT_GT(std::string(o.doc).size(), 10u) << o.name;
    EXPECT_NO_THROW(options::set(o.id, o.default_value)) << o.name;
    options::reset(o.id);
  }
  EXPECT_THROW(options::info("DISC_NO_SUCH_THING"), std::invalid_argument);
}
