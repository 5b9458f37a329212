// Sizes as people write them: "512", "64K", "256M", "2G" (powers of 1024; a trailing B or iB is
// allowed: "2GiB", "64MB"). Used by device specs ("cuda:0@2G"), telemetry scripts and the config.
//
// Thread-safety: pure function.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace jitllm {

// nullopt for anything else (empty, negative, a fraction, an unknown suffix, overflow).
std::optional<size_t> parseByteSize(std::string_view text);

}  // namespace jitllm
