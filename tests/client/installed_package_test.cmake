# Installs the client component of the build into a temporary prefix and builds
# libclient/examples against it, through find_package(jitllm) and through pkg-config; each
# example must then run and report that no daemon listens on a socket that does not exist.
#   cmake -DBUILD_DIR=... -DEXAMPLES_DIR=... -DWORK_DIR=... -DGENERATOR=... -P installed_package_test.cmake
cmake_minimum_required(VERSION 3.20)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

# A program must exit 1 saying jitllmd is not running at the socket it was given.
function(expect_not_running program)
  set(socket "${WORK_DIR}/no-daemon.sock")
  execute_process(COMMAND ${program} ${socket} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 1 OR NOT err MATCHES "jitllmd is not running \\(no socket at ${socket}\\)")
    message(FATAL_ERROR "${program}: expected exit 1 and the not-running message, got ${rc}:\n${out}\n${err}")
  endif()
  message(STATUS "${program}: ${err}")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}" --component client)

# What an application developer gets.
file(GLOB_RECURSE installed RELATIVE "${prefix}" "${prefix}/*")
list(SORT installed)
string(REPLACE ";" "\n  " listing "${installed}")
message(STATUS "installed:\n  ${listing}")
foreach(expected include/jitllm/client.h include/jitllm/client_capnp.h include/jitllm/jitllm.capnp.h
                 include/jitllm/jitllm.capnp)
  if(NOT EXISTS "${prefix}/${expected}")
    message(FATAL_ERROR "not installed: ${expected}")
  endif()
endforeach()
file(GLOB sonames "${prefix}/lib*/libjitllmclient.so.2" "${prefix}/lib*/*/libjitllmclient.so.2")
file(GLOB pcfiles "${prefix}/lib*/pkgconfig/jitllm-client.pc" "${prefix}/lib*/*/pkgconfig/jitllm-client.pc")
file(GLOB configs "${prefix}/lib*/cmake/jitllm/jitllmConfig.cmake" "${prefix}/lib*/*/cmake/jitllm/jitllmConfig.cmake")
if(NOT sonames OR NOT pcfiles OR NOT configs)
  message(FATAL_ERROR "missing the versioned library, jitllm-client.pc or jitllmConfig.cmake")
endif()

# find_package(jitllm) from an outside project.
run(${CMAKE_COMMAND} -S "${EXAMPLES_DIR}" -B "${WORK_DIR}/cmake-build" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK_DIR}/cmake-build")
expect_not_running("${WORK_DIR}/cmake-build/jitllm-list-models")
expect_not_running("${WORK_DIR}/cmake-build/jitllm-pipelined-status")

# pkg-config, with the .pc file relocated along with the prefix.
find_program(PKG_CONFIG pkg-config)
find_program(CXX NAMES c++ g++ clang++)
if(PKG_CONFIG AND CXX)
  list(GET pcfiles 0 pc)
  get_filename_component(pcdir "${pc}" DIRECTORY)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pcdir}" ${PKG_CONFIG} --cflags --libs jitllm-client
                  OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config does not know jitllm-client")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pcdir}" ${PKG_CONFIG} --variable=libdir jitllm-client
                  OUTPUT_VARIABLE libdir OUTPUT_STRIP_TRAILING_WHITESPACE)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  run(${CXX} -std=c++20 "${EXAMPLES_DIR}/list_models.cc" -o "${WORK_DIR}/list-models-pkgconfig" ${flags}
      "-Wl,-rpath,${libdir}")
  expect_not_running("${WORK_DIR}/list-models-pkgconfig")
else()
  message(STATUS "pkg-config or a C++ compiler missing: the pkg-config half is skipped")
endif()
