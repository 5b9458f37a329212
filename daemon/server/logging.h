// Where jitllmd's log lines go: the systemd journal, with priorities, when systemd started us
// (JOURNAL_STREAM names our stderr), else stderr with timestamps.
//
// Thread-safety: setupLogging() once, from main, before other threads start.
#pragma once

#include <string>

namespace jitllm::server {

void setupLogging(const std::string& level);
bool stderrIsJournal();

}  // namespace jitllm::server
