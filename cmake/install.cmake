# Installed: include/attn/attn.h, lib/libattn.a, lib/libattn.so (ATTN_BUILD_SHARED), the CMake package (attn::attn) and attn.pc.
# Both package files locate the prefix relative to themselves, so an install tree can be
# moved, and `cmake --install <build> --prefix <dir>` works without reconfiguring.
include(CMakePackageConfigHelpers)

set(ATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/attn)
set(ATTN_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/attn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The exported attn::attn carries its link dependencies: TBB::tbb (found again by the
# package's find_dependency) and, for C consumers, the C++ runtime and libm.
install(TARGETS attn EXPORT attnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# libattn.so beside it (exported as attn::attn_shared); attn::attn and attn.pc stay static.
if(ATTN_BUILD_SHARED)
  install(TARGETS attn_shared EXPORT attnTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(EXPORT attnTargets NAMESPACE attn:: DESTINATION ${ATTN_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/attnConfig.cmake INSTALL_DESTINATION ${ATTN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attnConfig.cmake ${PROJECT_BINARY_DIR}/attnConfigVersion.cmake
        DESTINATION ${ATTN_CMAKE_DIR})

# attn.pc: prefix = the directory two levels above the .pc file (for libdir "lib").
file(RELATIVE_PATH ATTN_PC_TO_PREFIX /prefix/${ATTN_PKGCONFIG_DIR} /prefix)
string(REGEX REPLACE "/$" "" ATTN_PC_TO_PREFIX "${ATTN_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/attn.pc.in ${PROJECT_BINARY_DIR}/attn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/attn.pc DESTINATION ${ATTN_PKGCONFIG_DIR})
