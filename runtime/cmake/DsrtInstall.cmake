# Install rules for libdsrt: the shared library, its public headers (the C API and the
# header-only C++ wrapper) and a CMake package, so that an application does
#
#   find_package(dsrt CONFIG REQUIRED)          # with CMAKE_PREFIX_PATH=<prefix>
#   target_link_libraries(app PRIVATE dsrt::dsrt)
#
# after `cmake --install <build> --prefix <prefix>`. Only the shared library is installed:
# its sole interface is dsrt.h, the static pieces (dsrt_core, dsrt_ops, ...) live inside it
# with hidden symbols, and it needs nothing beyond the C and C++ standard libraries, so the
# package has no dependencies to find (runtime/test/CheckNoCompilerDeps.cmake checks that).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DSRT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/dsrt)

install(TARGETS dsrt EXPORT dsrtTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dsrt
                NAMELINK_COMPONENT dsrt_dev
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT dsrt)
install(FILES ${PROJECT_SOURCE_DIR}/runtime/include/dsrt/dsrt.h
              ${PROJECT_SOURCE_DIR}/runtime/include/dsrt/dsrt.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dsrt COMPONENT dsrt_dev)
install(EXPORT dsrtTargets NAMESPACE dsrt:: FILE dsrtTargets.cmake
        DESTINATION ${DSRT_INSTALL_CMAKEDIR} COMPONENT dsrt_dev)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/dsrtConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/dsrtConfig.cmake
                              INSTALL_DESTINATION ${DSRT_INSTALL_CMAKEDIR}
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# The SONAME carries the major version, so a package of another major is not compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/dsrtConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/dsrtConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/dsrtConfigVersion.cmake
        DESTINATION ${DSRT_INSTALL_CMAKEDIR} COMPONENT dsrt_dev)
