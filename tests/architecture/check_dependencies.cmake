# The dependency rules of docs/architecture.md, checked on every #include of the tree:
#   cmake -DSOURCE_DIR=<root> [-DEXTRA_FILE=<file>=<as-path>] -P check_dependencies.cmake
# Fails (non-zero exit), listing every include that breaks a rule. EXTRA_FILE scans one more file
# as if it stood at <as-path> in the tree: how the test plants a violation without touching it.
#
# Each folder may include (by path from the root) only what its rule lists; system headers are
# free except those named as forbidden for the folder (the engine builds without Cap'n Proto,
# libsystemd, Boost or spdlog).
cmake_minimum_required(VERSION 3.25)

# folder -> folders of ours it may include
set(allowed_base      "base")
set(allowed_kernels   "base;kernels")
set(allowed_engine    "base;kernels;engine")
set(allowed_policies  "base;policies")
set(allowed_daemon    "base;kernels;engine;policies;daemon;jitllm")  # jitllm/: the schema's header
set(allowed_libclient "libclient;jitllm")
set(allowed_ctl       "base;ctl;jitllm")
set(allowed_tools     "base;kernels;engine;tools")
# Measures the daemon's own scheduler in-process: the one tool that is the daemon's.
set(allowed_tools/jitllm_scheduler_bench.cc "base;kernels;engine;policies;daemon;tools")
# Drives a daemon over its socket, as any app does: through the client library.
set(allowed_tools/jitllm_serve_bench.cc "tools;jitllm")
# System headers a folder must not use: the engine and the device layer stay free of the
# daemon's dependencies, so a GPU machine builds them with a compiler and the CUDA toolkit alone.
set(forbidden_system "capnp;kj;boost;systemd;spdlog;fmt")
set(checked_folders base kernels engine policies daemon libclient ctl tools)

set(ours base kernels engine policies daemon libclient ctl tools tests jitllm)

set(files)
foreach(folder IN LISTS checked_folders)
  file(GLOB_RECURSE found RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${folder}/*.h ${SOURCE_DIR}/${folder}/*.cc
       ${SOURCE_DIR}/${folder}/*.cuh ${SOURCE_DIR}/${folder}/*.c++)
  list(APPEND files ${found})
endforeach()

set(violations "")
function(check_file path as)
  file(STRINGS ${path} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  string(REGEX MATCH "^[^/]+" folder ${as})
  set(rule allowed_${folder})
  if(DEFINED allowed_${as})
    set(rule allowed_${as})
  endif()
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*" "\\1" header "${line}")
    string(REGEX MATCH "^[^/]+" top "${header}")
    if(NOT header MATCHES "/")
      continue()  # a neighbour in the same folder, or a standard header
    endif()
    if(top IN_LIST ours)
      if(NOT top IN_LIST ${rule})
        set(violations "${violations}\n  ${as}: #include \"${header}\" (${folder}/ may include only: ${${rule}})")
      endif()
    elseif(folder STREQUAL "engine" OR folder STREQUAL "kernels" OR folder STREQUAL "base")
      if(top IN_LIST forbidden_system)
        set(violations "${violations}\n  ${as}: #include <${header}> (${folder}/ builds without ${top})")
      endif()
    endif()
  endforeach()
  set(violations "${violations}" PARENT_SCOPE)
endfunction()

foreach(f IN LISTS files)
  check_file(${SOURCE_DIR}/${f} ${f})
endforeach()
if(DEFINED EXTRA_FILE)
  string(REPLACE "=" ";" extra "${EXTRA_FILE}")
  list(GET extra 0 extra_path)
  list(GET extra 1 extra_as)
  check_file(${extra_path} ${extra_as})
endif()

list(LENGTH files count)
if(violations)
  message(FATAL_ERROR "dependency rules (docs/architecture.md) broken:${violations}")
endif()
message(STATUS "dependency rules hold for ${count} files")
