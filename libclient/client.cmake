# libjitllmclient: the synchronous C++ client of jitllmd (jitllm/client.h), the Cap'n Proto escape
# hatch (jitllm/client_capnp.h), and what `cmake --install` puts out for apps: headers, the shared
# library, a CMake package (find_package(jitllm) -> jitllm::client, jitllm::client_capnp) and
# pkg-config's jitllm-client.pc. Included by CMakeLists.txt after jitllm_schema is defined.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The SONAME's number: raise it with every ABI break of the library (a struct in client_types.h
# changing shape counts). The RPC protocol has its own number (jitllm.capnp's protocolVersion).
set(JITLLM_CLIENT_SOVERSION 2)

add_library(jitllmclient SHARED
  src/client.cc
  src/client_types.cc
  src/daemon_connection.cc
  src/error.cc
  src/schema_convert.cc
  src/socket_path.cc
  src/thread_event_loop.cc)
add_library(jitllm::client ALIAS jitllmclient)
set_target_properties(jitllmclient PROPERTIES
  VERSION ${PROJECT_VERSION}
  SOVERSION ${JITLLM_CLIENT_SOVERSION}
  EXPORT_NAME client
  # Only what JITLLM_CLIENT_API marks (and the generated schema code, for client_capnp.h) is ABI.
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)
target_include_directories(jitllmclient PUBLIC
  $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(jitllmclient PUBLIC cxx_std_20)
target_compile_definitions(jitllmclient PRIVATE JITLLM_CLIENT_VERSION="${PROJECT_VERSION}")
target_link_libraries(jitllmclient PRIVATE jitllm_schema)
# Apps get only -ljitllmclient; the generated code and Cap'n Proto stay inside.
target_link_options(jitllmclient PRIVATE -Wl,--no-undefined)

# For code in this build that uses jitllm/client_capnp.h.
add_library(jitllm_client_capnp INTERFACE)
add_library(jitllm::client_capnp ALIAS jitllm_client_capnp)
target_link_libraries(jitllm_client_capnp INTERFACE jitllmclient CapnProto::capnp-rpc)
target_include_directories(jitllm_client_capnp INTERFACE ${CMAKE_CURRENT_BINARY_DIR}/generated)

# --- install -------------------------------------------------------------------------------------
set(JITLLM_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/jitllm)
install(TARGETS jitllmclient EXPORT jitllmTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT client NAMELINK_COMPONENT client)
install(DIRECTORY include/jitllm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT client)
# The schema itself (for other languages' code generators) and its C++ header (client_capnp.h).
install(FILES jitllm.capnp ${JITLLM_SCHEMA_HDRS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/jitllm COMPONENT client)
install(EXPORT jitllmTargets NAMESPACE jitllm:: DESTINATION ${JITLLM_CMAKE_PACKAGE_DIR} COMPONENT client)
configure_package_config_file(cmake/jitllmConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/jitllmConfig.cmake
  INSTALL_DESTINATION ${JITLLM_CMAKE_PACKAGE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/jitllmConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)  # 0.x: a minor release may break the API
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/jitllmConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/jitllmConfigVersion.cmake
  DESTINATION ${JITLLM_CMAKE_PACKAGE_DIR} COMPONENT client)

# pkg-config: paths relative to the .pc file, so `cmake --install --prefix ANY` stays correct.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(JITLLM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(JITLLM_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(JITLLM_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH _jitllm_pc_up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" _jitllm_pc_up "${_jitllm_pc_up}")
  set(JITLLM_PC_PREFIX "\${pcfiledir}/${_jitllm_pc_up}")
  set(JITLLM_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(JITLLM_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(cmake/jitllm-client.pc.in ${CMAKE_CURRENT_BINARY_DIR}/jitllm-client.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/jitllm-client.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT client)
