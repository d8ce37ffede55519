// Every DISC_* option, declared once (options.def), parsed one way, and
// settable in-process (torch_disc.options from Python).
//
// A value comes from the environment the first time the option is read,
// and from set() after that. Booleans are 0/1/false/true/off/on (any case);
// anything else, an unknown choice or a number that is not one, is an
// std::invalid_argument naming the variable. This is the only place that
// reads the environment (tests/python/test_options.py checks that too).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace disc::options {

enum class Id : uint8_t {
#define DISC_OPTION(id, name, type, def, choices, effect, doc) id,
#include "runtime/options.def"
#undef DISC_OPTION
  kCount
};

enum class Type : uint8_t { kBool, kInt, kChoice, kText };
enum class Effect : uint8_t { kProcess, kCompile, kRun, kTest };

struct Info {
  Id id;
  const char* name;
  Type type;
  const char* default_value;
  const char* choices;  // kChoice: '|'-separated; kInt: named values besides numbers
  Effect effect;
  const char* doc;
};

const std::vector<Info>& all();
const Info& info(Id id);
// The option called `name` (DISC_...); throws std::invalid_argument
// listing the known ones when there is none.
const Info& info(const std::string& name);

bool flag(Id id);        // kBool
int64_t integer(Id id);  // kInt: the number, or -1, -2, ... for its named values
// kChoice: the index of the value in `choices`; kBool: 0 or 1.
int64_t choice(Id id);
std::string text(Id id);  // any type, as canonical text ("1", "nhwc", "1024")

// Parses `value` as option `id` takes it and makes it the value from now
// on; throws std::invalid_argument naming the variable on a bad value.
void set(Id id, const std::string& value);
// Back to the environment's value (or the default), read again.
void reset(Id id);

// $XDG_CACHE_HOME, else $HOME/.cache (else /tmp/.cache): where the
// persistent cache goes when DISC_CACHE_DIR is not set.
std::string user_cache_dir();

}  // namespace disc::options
