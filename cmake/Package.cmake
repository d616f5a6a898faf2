# The CMake package: `cmake --install build --prefix P` puts headers in
# P/include, libraries in P/lib and kilnConfig.cmake in P/lib/cmake/kiln, so
# that a project can
#
#   find_package(kiln REQUIRED)
#   target_link_libraries(app PRIVATE kiln::runtime)   # load and run exported libraries
#   target_link_libraries(tool PRIVATE kiln::kiln)     # compile (also kiln::graph, kiln::tuner, ...)
#
# Two components: `runtime` (kiln_runtime, its headers and the C API: all a
# deployment needs; `cmake --install build --component runtime`) and `dev`
# (the compiler's libraries and every header). kilnConfig.cmake loads the
# compiler's targets only where the dev component is installed.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

set_target_properties(kiln_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(kiln_runtime_static PROPERTIES EXPORT_NAME runtime_static)
install(TARGETS kiln_runtime kiln_runtime_static EXPORT kilnRuntimeTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
# runtime/include holds all of it: runtime/, support/error.h and ir/dtype.h.
install(DIRECTORY runtime/include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT runtime)
install(EXPORT kilnRuntimeTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR} COMPONENT runtime)

# The compiler: every library that is built, under kiln:: names.
set(KILN_DEV_TARGETS kiln)
set_target_properties(kiln PROPERTIES EXPORT_NAME kiln)
foreach(t tuning_db ops graph tuner dist)
  if(TARGET kiln_${t})
    set_target_properties(kiln_${t} PROPERTIES EXPORT_NAME ${t})
    list(APPEND KILN_DEV_TARGETS kiln_${t})
  endif()
endforeach()
install(TARGETS ${KILN_DEV_TARGETS} EXPORT kilnTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
# Every library's headers, each from its own folder (runtime's come with the runtime component).
foreach(d core tuning_db ops graph tuner dist)
  if(d STREQUAL core OR TARGET kiln_${d})
    install(DIRECTORY ${d}/include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
  endif()
endforeach()
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR} COMPONENT dev)

configure_package_config_file(cmake/kilnConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_CMAKE_DIR} COMPONENT runtime)
