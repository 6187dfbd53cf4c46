# Installs the libraries, the public headers (under include/demi) and demiConfig.cmake, so that
# find_package(demi) gives the same demi::demi target as add_subdirectory.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS demi_framework demi_backend_cpu demi_models demi_datasets EXPORT demiTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET demi_backend_cuda)
  install(TARGETS demi_backend_cuda EXPORT demiTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# Public headers only: framework/ and the backend interface (backends/cpu and cuda stay private).
install(DIRECTORY framework DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/demi FILES_MATCHING PATTERN "*.h")
install(DIRECTORY datasets DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/demi FILES_MATCHING PATTERN "*.h")
install(DIRECTORY models DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/demi FILES_MATCHING PATTERN "*.h")
install(FILES backends/kernels.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/demi/backends)
install(FILES framework/demi/demi.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/demi)
install(EXPORT demiTargets NAMESPACE demi:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/demi)

configure_package_config_file(cmake/demiConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/demiConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/demi)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/demiConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/demiConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/demiConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/demi)
