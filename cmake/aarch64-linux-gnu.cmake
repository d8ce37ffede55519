# Cross-building disc for 64-bit Arm on an x86 Debian 12 machine: Debian's
# cross compiler, and the arm64 sysroot scripts/aarch64_sysroot.sh unpacks
# (glibc, libstdc++, LLVM / MLIR 15, oneDNN, GoogleTest). Binaries run under
# qemu-aarch64-static -L <sysroot>.
#   cmake -S . -B build-aarch64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

if(NOT DISC_AARCH64_SYSROOT)
  set(DISC_AARCH64_SYSROOT "${CMAKE_CURRENT_LIST_DIR}/../.aarch64/sysroot")
endif()
get_filename_component(DISC_AARCH64_SYSROOT "${DISC_AARCH64_SYSROOT}" ABSOLUTE)
set(DISC_AARCH64_SYSROOT "${DISC_AARCH64_SYSROOT}" CACHE PATH "the arm64 sysroot")
set(CMAKE_SYSROOT "${DISC_AARCH64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${DISC_AARCH64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Tests run under emulation: ctest and gtest_discover_tests call the emulator.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L "${DISC_AARCH64_SYSROOT}")
# The sysroot's Python is Debian 12's 3.11: its headers, and torch_disc._C's
# file suffix.
set(Python3_INCLUDE_DIR "${DISC_AARCH64_SYSROOT}/usr/include/python3.11" CACHE PATH "")
set(Python3_SOABI "cpython-311-aarch64-linux-gnu" CACHE STRING "the target Python's SOABI")
