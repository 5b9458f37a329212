// Model names: what a client may call a model, and the name a model gets from its file when the
// client gives none. Names appear in commands ("jitllmctl migrate NAME:3-5"), events and logs, so
// they are kept to a plain alphabet: letters, digits, '.', '_' and '-', starting with a letter or
// digit, at most kMaxLength characters. A name a client gives is checked, never rewritten; one
// taken from a file's general.name is made to fit.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace jitllm::server {

inline constexpr size_t kMaxModelNameLength = 64;

// Error(FAILED) saying what is allowed, quoting at most 80 characters of `name`.
void requireValidModelName(std::string_view name);

// `text` (a file's general.name, or its file name) as a valid name: other characters become '-',
// runs of them one, and it is cut to kMaxModelNameLength. "model" when nothing is left.
std::string modelNameFrom(std::string_view text);

// At most `max` characters of `text`, with "..." when it was longer: how errors quote what a
// client sent.
std::string clipped(std::string_view text, size_t max = 80);

}  // namespace jitllm::server
