// Sizes as people write them: "512", "64K", "256M", "2G" (powers of 1024; a trailing B or iB is
// allowed: "2GiB", "64MB"). Used by device specs ("cuda:0@2G"), telemetry scripts and the config.
// And sizes as events and logs show them ("12.5 KB", "3.2 MB").
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace jitllm {

// nullopt for anything else (empty, negative, a fraction, an unknown suffix, overflow).
std::optional<size_t> parseByteSize(std::string_view text);

// "%.1f KB" below 1,000,000 bytes, else "%.1f MB" (powers of 1000): what events and progress lines
// say of copied bytes.
std::string humanBytes(size_t bytes);

}  // namespace jitllm
