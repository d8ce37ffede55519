// Where the user's Python code is now, for errors, compile logs and profiler
// ranges that name the line that traced or synced. The Python bindings set
// the provider; C++ code below them only asks.
#pragma once

#include <functional>
#include <string>

namespace disc {

// Set by the Python bindings: returns "file:line (function)" of the user code
// running now, or "" when called outside Python.
void set_python_location_provider(std::function<std::string()> provider);
std::string python_location();

}  // namespace disc
