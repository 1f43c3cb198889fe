# kiln as an installed package: `cmake --install` puts the library, the
# public headers and the `kiln` CLI under the prefix; find_package(kiln)
# gives kiln::kiln (the library) and kiln::stable (the header-only stable
# API for extensions); pkg-config finds kiln.pc; `cmake --build <dir>
# --target package` (make package) builds a Debian package with CPack.
include(CMakePackageConfigHelpers)

install(TARGETS kiln kiln-stable EXPORT kilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_CMAKE_DIR})
# Within a major version the library's C++ API may still change between
# minors (0.x): only the same minor is compatible for find_package's check.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_CMAKE_DIR})

file(RELATIVE_PATH KILN_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
configure_file(${PROJECT_SOURCE_DIR}/cmake/kiln.pc.in ${PROJECT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kiln)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "kiln: a CPU-first deep-learning library in C++20 (library, headers, CLI)")
set(CPACK_PACKAGE_CONTACT "kiln developers <kiln@localhost>")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# The shared libraries' packages, found by dpkg-shlibdeps from what the
# library and the CLI link. A cross build's libraries are in a sysroot that
# dpkg does not know: there cmake/cross-depends.cmake reads the same shlibs
# records, kept by cmake/arm64-sysroot.sh, when cpack runs.
if(CMAKE_CROSSCOMPILING)
  if(CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
    set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
  endif()
  set(CPACK_KILN_SHLIBS ${CMAKE_SYSROOT}/.shlibs)
  set(CPACK_KILN_READELF ${CMAKE_READELF})
  set(CPACK_KILN_BINARIES_FILE ${PROJECT_BINARY_DIR}/cpack-binaries.cmake)
  file(GENERATE OUTPUT ${CPACK_KILN_BINARIES_FILE}
       CONTENT "set(KILN_PACKAGED_BINARIES \"$<TARGET_FILE:kiln>;$<TARGET_FILE:kiln-cli>\")\n")
  set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_SOURCE_DIR}/cmake/cross-depends.cmake)
else()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
endif()
# The headers include the standard library only; kiln::compile runs a C++
# compiler at run time (without one it falls back to the interpreter).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "g++")
include(CPack)
