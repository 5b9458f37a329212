// Writing a cache file so that no reader ever sees half of it: the bytes go to a temporary file
// beside it (named with the process id, so concurrent processes do not share one), which is then
// renamed over the file.
//
// Thread-safety: pure function (two threads of one process must not write the same path at once).
#pragma once

#include <string>
#include <string_view>

namespace jitllm {

// Writes `bytes` to `path` atomically; false when it cannot (the temporary file is removed then).
// Caches treat false as "not cached": a read-only or full disk only costs work later.
bool writeFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace jitllm
