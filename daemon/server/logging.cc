#include "daemon/server/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/systemd_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

namespace jitllm::server {

bool stderrIsJournal() {
  // systemd sets JOURNAL_STREAM=<dev>:<ino> for the stream it connected to stdout/stderr.
  const char* js = std::getenv("JOURNAL_STREAM");
  if (!js) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(js, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  return ::fstat(2, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

void setupLogging(const std::string& level) {
  std::shared_ptr<spdlog::logger> logger;
  if (stderrIsJournal()) {
    logger = std::make_shared<spdlog::logger>("jitllmd", std::make_shared<spdlog::sinks::systemd_sink_mt>());
    logger->set_pattern("%v");
  } else {
    logger = std::make_shared<spdlog::logger>("jitllmd", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  }
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace jitllm::server
