# tokenizer_fuzz: included from tests/fuzz/CMakeLists.txt in the clang build that
# cmake/Fuzzers.cmake sets up, where every library is already instrumented for libFuzzer with
# ASan+UBSan; `ctest -L fuzz` runs it on tests/fuzz/corpus/tokenizer. It loads the llama-spm and
# llama-bpe vocabularies from JITLLM_SHARED_DIR at start-up.
jitllm_fuzzer(tokenizer_fuzz
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tokenizer_fuzz.cc
  LIBS jitllm_tokenizer)
target_compile_definitions(tokenizer_fuzz PRIVATE JITLLM_SHARED_DIR="${JITLLM_SHARED_DIR}")
