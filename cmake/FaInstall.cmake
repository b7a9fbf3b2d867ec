# Install rules and the CMake package: find_package(fa) then target_link_libraries(app PRIVATE fa::fa).
include(CMakePackageConfigHelpers)
install(TARGETS fa EXPORT faTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES include/fa/fa.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fa)
if(TARGET fa-tune)
  install(TARGETS fa-tune RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT faTargets NAMESPACE fa:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fa)
configure_package_config_file(cmake/faConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/faConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fa)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/faConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/faConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/faConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fa)
