# Dated measurements belong in docs/benchmarks.md, not in the code (docs/architecture.md): fails,
# naming each line, when a source file of kernels/, engine/ or daemon/ carries a date.
#   cmake -DSOURCE_DIR=<root> [-DEXTRA_FILE=<file>] -P check_no_dated_measurements.cmake
# EXTRA_FILE is scanned too: how the test proves the check fails without touching the tree.
cmake_minimum_required(VERSION 3.25)
file(GLOB_RECURSE sources LIST_DIRECTORIES false
     ${SOURCE_DIR}/kernels/*.cc ${SOURCE_DIR}/kernels/*.h ${SOURCE_DIR}/kernels/*.cuh ${SOURCE_DIR}/kernels/*.inc
     ${SOURCE_DIR}/engine/*.cc ${SOURCE_DIR}/engine/*.h ${SOURCE_DIR}/daemon/*.cc ${SOURCE_DIR}/daemon/*.h)
if(EXTRA_FILE)
  list(APPEND sources ${EXTRA_FILE})
endif()
set(found "")
foreach(f IN LISTS sources)
  file(STRINGS ${f} dated REGEX "20[0-9][0-9]-[01][0-9]-[0-3][0-9]")
  foreach(line IN LISTS dated)
    file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
    string(STRIP "${line}" line)
    string(APPEND found "\n  ${rel}: ${line}")
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "dated lines in the code (measurements go to docs/benchmarks.md):${found}")
endif()
