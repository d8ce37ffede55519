#include "runtime/cuda/nvrtc.h"

#include <cstdio>
#include <iterator>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>

#ifdef DISC_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace disc::runtime::nvrtc {

Resources parse_resources(const std::string& log, const std::string& kernel) {
  // ptxas info    : Compiling entry function 'k' for 'sm_90'
  // ptxas info    : Function properties for k
  //     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  // ptxas info    : Used 12 registers, used 0 barriers, 380 bytes cmem[0]
  Resources r;
  const size_t at = log.find("entry function '" + kernel + "'");
  if (at == std::string::npos) return r;
  const size_t end = log.find("entry function '", at + 1);
  const std::string part = log.substr(at, end == std::string::npos ? std::string::npos : end - at);
  std::smatch m;
  const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  if (std::regex_search(part, m, frame)) {
    r.stack_bytes = std::stoi(m[1]);
    r.spill_store_bytes = std::stoi(m[2]);
    r.spill_load_bytes = std::stoi(m[3]);
  }
  if (std::regex_search(part, m, std::regex(R"(Used (\d+) registers)"))) r.registers = std::stoi(m[1]);
  if (std::regex_search(part, m, std::regex(R"((\d+) bytes smem)"))) r.shared_bytes = std::stoi(m[1]);
  return r;
}

namespace {

// An entry: the source's size and text, the resources, the cubin.
std::string entry(const std::string& source, const Compiled& c) {
  const Resources& r = c.resources;
  std::ostringstream out;
  out << source.size() << "\n" << source << r.registers << " " << r.spill_store_bytes << " "
      << r.spill_load_bytes << " " << r.shared_bytes << " " << r.stack_bytes << "\n";
  out.write(c.cubin.data(), static_cast<std::streamsize>(c.cubin.size()));
  return out.str();
}

// The compiled kernel in `payload`, or nullopt when it is of another source.
std::optional<Compiled> from_entry(const std::string& payload, const std::string& source,
                                   const std::string& arch) {
  std::istringstream in(payload);
  size_t size = 0;
  if (!(in >> size) || in.get() != '\n' || size != source.size()) return std::nullopt;
  std::string text(size, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size)) || text != source) return std::nullopt;
  Compiled c;
  Resources& r = c.resources;
  if (!(in >> r.registers >> r.spill_store_bytes >> r.spill_load_bytes >> r.shared_bytes >> r.stack_bytes) ||
      in.get() != '\n')
    return std::nullopt;
  c.arch = arch;
  c.cubin.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (c.cubin.empty()) return std::nullopt;
  return c;
}

}  // namespace

Compiled compile_cached(const DiskCache& cache, const std::string& source, const std::string& kernel,
                        const std::string& arch, bool* hit) {
  char key[64];
  std::snprintf(key, sizeof key, "cuda.%016llx.%s",
                static_cast<unsigned long long>(checksum(source + "\n" + arch)), arch.c_str());
  if (std::optional<std::string> payload = cache.load(key)) {
    if (std::optional<Compiled> c = from_entry(*payload, source, arch)) {
      if (hit) *hit = true;
      return *c;
    }
  }
  if (hit) *hit = false;
  Compiled c = compile(source, kernel, arch);
  cache.store(key, entry(source, c));
  return c;
}

#ifdef DISC_HAVE_NVRTC

namespace {

void check(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS)
    throw std::runtime_error(std::string("disc: NVRTC ") + what + ": " + nvrtcGetErrorString(r));
}

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  check(nvrtcGetProgramLogSize(prog, &size), "log size");
  std::string log(size, '\0');
  check(nvrtcGetProgramLog(prog, log.data()), "log");
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

}  // namespace

bool available() { return true; }

std::string version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "version");
  return "nvrtc-" + std::to_string(major) + "." + std::to_string(minor);
}

Compiled compile(const std::string& source, const std::string& kernel, const std::string& arch) {
  nvrtcProgram prog;
  check(nvrtcCreateProgram(&prog, source.c_str(), (kernel + ".cu").c_str(), 0, nullptr, nullptr),
        "create program");
  const std::string gpu = "--gpu-architecture=" + arch;
  const char* options[] = {gpu.c_str(), "--std=c++17", "--ptxas-options=-v"};
  const nvrtcResult built = nvrtcCompileProgram(prog, 3, options);
  Compiled out;
  out.arch = arch;
  out.log = program_log(prog);
  if (built != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    throw std::runtime_error("disc: kernel " + kernel + " does not compile for " + arch + ":\n" +
                             out.log);
  }
  size_t size = 0;
  check(nvrtcGetCUBINSize(prog, &size), "cubin size");
  out.cubin.resize(size);
  check(nvrtcGetCUBIN(prog, out.cubin.data()), "cubin");
  nvrtcDestroyProgram(&prog);
  out.resources = parse_resources(out.log, kernel);
  return out;
}

#else

bool available() { return false; }

std::string version() { return "no-nvrtc"; }

Compiled compile(const std::string&, const std::string& kernel, const std::string& arch) {
  throw std::runtime_error("disc: this build has no NVRTC (the CUDA toolkit was not found): cannot "
                           "compile " + kernel + " for " + arch);
}

#endif

}  // namespace disc::runtime::nvrtc
