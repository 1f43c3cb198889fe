# Cross build for arm64 with Debian's cross toolchain (g++-aarch64-linux-gnu)
# against the sysroot cmake/arm64-sysroot.sh unpacks from Debian's arm64
# packages; programs run under qemu-user (tests, code generators).
#   cmake -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DKILN_ARM64_SYSROOT=<dir> ...
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# try_compile projects get the variables too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES KILN_ARM64_SYSROOT)
if(NOT KILN_ARM64_SYSROOT)
  set(KILN_ARM64_SYSROOT $ENV{KILN_ARM64_SYSROOT})
endif()
if(NOT KILN_ARM64_SYSROOT OR NOT EXISTS ${KILN_ARM64_SYSROOT}/.complete)
  message(FATAL_ERROR "aarch64 toolchain: KILN_ARM64_SYSROOT (${KILN_ARM64_SYSROOT}) is not a sysroot made by "
                      "cmake/arm64-sysroot.sh (make arm64 makes one)")
endif()
set(CMAKE_SYSROOT ${KILN_ARM64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH ${KILN_ARM64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config reads the sysroot's .pc files and prefixes their paths.
set(ENV{PKG_CONFIG_SYSROOT_DIR} ${KILN_ARM64_SYSROOT})
set(ENV{PKG_CONFIG_LIBDIR}
    "${KILN_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${KILN_ARM64_SYSROOT}/usr/share/pkgconfig")
# Libraries that the linked ones need in turn (libgfortran for OpenBLAS, ...).
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${KILN_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu -Wl,-rpath-link,${KILN_ARM64_SYSROOT}/lib/aarch64-linux-gnu -Wl,-rpath-link,${KILN_ARM64_SYSROOT}/usr/lib")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${CMAKE_EXE_LINKER_FLAGS_INIT}")
# Tests (and gtest_discover_tests) run through qemu with the sysroot's loader
# and libraries; KILN_QEMU_CPU picks the emulated CPU (default: qemu's max,
# which has SVE; the NEON run asks for a CPU without it).
find_program(KILN_QEMU qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${KILN_QEMU} -L ${KILN_ARM64_SYSROOT})
