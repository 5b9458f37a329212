// A toy fourth backend for tests: "null:N" devices whose memory is plain host memory under a
// budget and which run no ops (each says UNIMPLEMENTED). It exists to prove that a backend is one
// Backend implementation plus one registration - BackendRegistry::add - and nothing else; the
// conformance suite runs its memory subset on it.
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace jitllm::testing {

std::unique_ptr<Backend> makeNullBackend();

}  // namespace jitllm::testing
