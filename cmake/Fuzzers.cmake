# Fuzzing in the ordinary build. Included twice over, in two different builds:
#
# - In the ordinary build (g++ or anything else), with JITLLM_FUZZ on (the default): when clang++
#   and its libFuzzer runtime are found, configures this same source tree a second time with clang
#   into <build>/fuzz (ExternalProject, built as part of `all`) and registers each fuzzer as a ctest
#   test labelled `fuzz` that runs for JITLLM_FUZZ_SECONDS. Without clang it says so and skips.
# - In that second build (JITLLM_FUZZ_ONLY): instruments every library for libFuzzer with
#   ASan+UBSan and builds only base/, kernels/, engine/ (and, for the RPC fuzzer, policies/,
#   libclient/ and daemon/) and the targets in tests/fuzz/.
#
# A fuzz test passes when its fuzzer runs out its time without finding anything; a crash, a
# sanitizer report, a leak, an input slower than 10 s or a 2 GiB RSS fails it, and the input that
# did it is saved in <build>/fuzz/artifacts/<name>/ (rerun it: <build>/fuzz/bin/<fuzzer> FILE).
# New inputs the fuzzer finds go to <build>/fuzz/corpus/<name>/, which later runs start from; the
# committed seed corpus in tests/fuzz/corpus/ is only read.

if(JITLLM_FUZZ_ONLY)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "JITLLM_FUZZ_ONLY needs clang++ (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  # Coverage instrumentation everywhere, libFuzzer's main only in the fuzz targets. UBSan aborts
  # rather than printing and going on, so undefined behaviour fails the run like a crash does.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer
                      # GCC-only names in `#pragma GCC diagnostic` (kernels/cpu/gemm) are no news here.
                      -Wno-unknown-warning-option)
  # Not _GLIBCXX_SANITIZE_VECTOR: libFuzzer's runtime carries its own uninstrumented copies of
  # std::vector<uint8_t> members, the linker may pick those, and ASan then reports false overflows.
  add_link_options(-fsanitize=address,undefined)
  # EXCLUDE_FROM_ALL: only the libraries some fuzz target links are built.
  add_subdirectory(base EXCLUDE_FROM_ALL)
  add_subdirectory(kernels EXCLUDE_FROM_ALL)
  add_subdirectory(engine EXCLUDE_FROM_ALL)
  # The RPC surface's fuzzer needs the daemon's code (and its dependencies, uninstrumented).
  include(DaemonDeps)
  if(JITLLM_HAVE_DAEMON)
    add_subdirectory(policies EXCLUDE_FROM_ALL)
    add_subdirectory(libclient EXCLUDE_FROM_ALL)
    add_subdirectory(daemon EXCLUDE_FROM_ALL)
  endif()
  add_subdirectory(tests/fuzz)
  return()
endif()

if(NOT JITLLM_FUZZ)
  message(STATUS "Fuzzers: off (JITLLM_FUZZ=OFF)")
  return()
endif()

set(JITLLM_FUZZ_SECONDS 60 CACHE STRING "How long each fuzz test (ctest -L fuzz) fuzzes, in seconds")
set(JITLLM_FUZZ_JOBS "" CACHE STRING "Parallel jobs of the clang fuzz build (empty: the generator's default)")

# clang and clang++ of one version: the unversioned names first, then Debian's versioned ones.
find_program(JITLLM_FUZZ_CXX NAMES clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14
             DOC "clang++ for the libFuzzer build")
if(JITLLM_FUZZ_CXX)
  get_filename_component(clang_dir ${JITLLM_FUZZ_CXX} DIRECTORY)
  get_filename_component(clang_name ${JITLLM_FUZZ_CXX} NAME)
  string(REPLACE "clang++" "clang" clang_name ${clang_name})  # clang++-14 -> clang-14
  find_program(JITLLM_FUZZ_CC NAMES ${clang_name} HINTS ${clang_dir} NO_DEFAULT_PATH NO_CACHE)
endif()
if(NOT JITLLM_FUZZ_CXX OR NOT JITLLM_FUZZ_CC)
  message(STATUS "Fuzzers: skipped, no clang/clang++ found (scripts/install-deps.sh installs clang and "
                 "libclang-rt-14-dev; -DJITLLM_FUZZ=OFF silences this)")
  return()
endif()

# Whether this clang can link a libFuzzer binary with ASan+UBSan (Debian ships the runtime apart, in
# libclang-rt-NN-dev). Probed once per compiler; a failure is probed again on the next configure.
if(NOT JITLLM_FUZZ_PROBED STREQUAL JITLLM_FUZZ_CXX)
  set(probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/jitllm_fuzz_probe)
  file(WRITE ${probe_dir}/probe.cc
       "#include <cstddef>\n#include <cstdint>\n"
       "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(COMMAND ${JITLLM_FUZZ_CXX} -fsanitize=fuzzer,address,undefined probe.cc -o probe
                  WORKING_DIRECTORY ${probe_dir} RESULT_VARIABLE probe_rc OUTPUT_VARIABLE probe_log
                  ERROR_VARIABLE probe_log)
  if(NOT probe_rc EQUAL 0)
    message(STATUS "Fuzzers: skipped, ${JITLLM_FUZZ_CXX} cannot link -fsanitize=fuzzer,address,undefined "
                   "(libclang-rt-NN-dev missing? scripts/install-deps.sh installs it):\n${probe_log}")
    return()
  endif()
  set(JITLLM_FUZZ_PROBED ${JITLLM_FUZZ_CXX} CACHE INTERNAL "clang++ that linked the libFuzzer probe")
endif()

set(JITLLM_FUZZ_DIR ${CMAKE_BINARY_DIR}/fuzz)
set(fuzz_src ${PROJECT_SOURCE_DIR}/tests/fuzz)
if(NOT DEFINED JITLLM_SHARED_DIR)
  set(JITLLM_SHARED_DIR "${PROJECT_SOURCE_DIR}/../shared" CACHE PATH "The shared/ folder beside the checkout")
endif()

# The fuzzers that exist in this tree. tokenizer_fuzz needs the tokenizer, its own CMake fragment and
# the real vocabularies it loads at start-up (tests/fuzz/CMakeLists.txt checks the same files).
set(fuzzers gguf_fuzz jinja_fuzz)
if(JITLLM_HAVE_DAEMON)
  list(APPEND fuzzers rpc_fuzz)
endif()
set(with_tokenizer_fuzz OFF)
if(EXISTS ${PROJECT_SOURCE_DIR}/engine/tokenizer/CMakeLists.txt AND EXISTS ${fuzz_src}/tokenizer.cmake
   AND EXISTS ${fuzz_src}/tokenizer_fuzz.cc)
  list(APPEND fuzzers tokenizer_fuzz)
  set(with_tokenizer_fuzz ON)
endif()

set(fuzz_build_args)
if(JITLLM_FUZZ_JOBS)
  set(fuzz_build_args --parallel ${JITLLM_FUZZ_JOBS})
endif()
set(fuzz_binaries)
foreach(f IN LISTS fuzzers)
  list(APPEND fuzz_binaries ${JITLLM_FUZZ_DIR}/bin/${f})
endforeach()

include(ExternalProject)
ExternalProject_Add(jitllm_fuzzers
  SOURCE_DIR ${PROJECT_SOURCE_DIR}
  BINARY_DIR ${JITLLM_FUZZ_DIR}
  PREFIX ${CMAKE_BINARY_DIR}/CMakeFiles/jitllm_fuzzers
  CMAKE_ARGS
    -DCMAKE_C_COMPILER=${JITLLM_FUZZ_CC}
    -DCMAKE_CXX_COMPILER=${JITLLM_FUZZ_CXX}
    -DCMAKE_BUILD_TYPE=RelWithDebInfo
    -DJITLLM_FUZZ_ONLY=ON
    -DJITLLM_BUILD_TESTS=OFF
    -DJITLLM_SHARED_DIR=${JITLLM_SHARED_DIR}
  BUILD_COMMAND ${CMAKE_COMMAND} --build <BINARY_DIR> ${fuzz_build_args}
  # The inner build tracks its own sources; running it every time costs one no-op ninja when
  # nothing changed.
  BUILD_ALWAYS ON
  BUILD_BYPRODUCTS ${fuzz_binaries}
  INSTALL_COMMAND ""
  USES_TERMINAL_CONFIGURE ON
  USES_TERMINAL_BUILD ON)

enable_testing()

# jitllm_fuzz_test(NAME FUZZER [ARGS ...]) - runs <build>/fuzz/bin/FUZZER for JITLLM_FUZZ_SECONDS on
# <build>/fuzz/corpus/NAME (written) and tests/fuzz/corpus/NAME (read only) as the ctest test
# fuzz_NAME.
function(jitllm_fuzz_test name fuzzer)
  add_test(NAME fuzz_${name}
           COMMAND ${JITLLM_FUZZ_DIR}/bin/${fuzzer}
                   -max_total_time=${JITLLM_FUZZ_SECONDS} -rss_limit_mb=2048 -timeout=10
                   -print_final_stats=1 -create_missing_dirs=1
                   -artifact_prefix=${JITLLM_FUZZ_DIR}/artifacts/${name}/
                   ${ARGN}
                   ${JITLLM_FUZZ_DIR}/corpus/${name} ${fuzz_src}/corpus/${name}
           WORKING_DIRECTORY ${JITLLM_FUZZ_DIR})
  # Loading the corpus and libFuzzer's final merge come on top of the fuzzing time.
  math(EXPR timeout "${JITLLM_FUZZ_SECONDS} + 300")
  set_tests_properties(fuzz_${name} PROPERTIES LABELS fuzz TIMEOUT ${timeout})
endfunction()

jitllm_fuzz_test(gguf gguf_fuzz -dict=${fuzz_src}/gguf.dict)
jitllm_fuzz_test(jinja jinja_fuzz -dict=${fuzz_src}/jinja.dict -max_len=8192)
if(JITLLM_HAVE_DAEMON)
  jitllm_fuzz_test(rpc rpc_fuzz)
endif()
if(with_tokenizer_fuzz)
  set(vocab_files ${JITLLM_SHARED_DIR}/vocab/ggml-vocab-llama-spm.gguf ${JITLLM_SHARED_DIR}/vocab/ggml-vocab-llama-bpe.gguf)
  set(have_vocab ON)
  foreach(v IN LISTS vocab_files)
    if(NOT EXISTS ${v})
      set(have_vocab OFF)
    endif()
  endforeach()
  set(tokenizer_args)
  if(EXISTS ${fuzz_src}/tokenizer.dict)
    set(tokenizer_args -dict=${fuzz_src}/tokenizer.dict)
  endif()
  if(have_vocab)
    jitllm_fuzz_test(tokenizer tokenizer_fuzz ${tokenizer_args})
  else()
    message(STATUS "Fuzzers: fuzz_tokenizer not registered, it needs ${vocab_files}")
  endif()
endif()
list(JOIN fuzzers ", " fuzzer_names)
message(STATUS "Fuzzers: ${fuzzer_names} with ${JITLLM_FUZZ_CXX} in ${JITLLM_FUZZ_DIR}; "
               "ctest -L fuzz runs each for ${JITLLM_FUZZ_SECONDS} s")
