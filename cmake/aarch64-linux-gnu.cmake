# Cross-compiling anvil for 64-bit Arm Linux (Debian: g++-aarch64-linux-gnu, libc6-dev-arm64-cross), the tests
# run under qemu-user (Debian: qemu-user). tools/test.sh's aarch64 stage builds the CPU kernels' tests this way:
# every user of the private route is on Apple Silicon, where segments that fall back run the NEON kernels.
#   cmake -S . -B build/aarch64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# What every Apple Silicon chip has (armv8.4-a: NEON, FMA, dotprod; +fp16: half-precision arithmetic), so the
# compiler may use what an Apple Silicon build may. g++ 12 knows no -mcpu=apple-m1.
set(CMAKE_CXX_FLAGS_INIT "-march=armv8.4-a+fp16")

# The target's libraries only, the host's programs; headers from either, because the tests' doctest (one
# architecture-independent header) is installed for the host (tests/cross copies it out of the host's
# /usr/include, whose C library headers must not come before the target's).
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)

# ctest runs the test programs through this; -cpu max has every feature the flags above allow.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu)
