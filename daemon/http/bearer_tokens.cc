#include "daemon/http/bearer_tokens.h"

#include <sys/stat.h>

#include <sstream>

#include "base/error.h"
#include "base/regular_file.h"

namespace jitllm::server::http {

BearerTokens BearerTokens::load(const std::string& path) {
  struct stat st {};
  JITLLM_REQUIRE(::stat(path.c_str(), &st) == 0, "http_token_file '", path, "' does not exist");
  JITLLM_REQUIRE((st.st_mode & 0077) == 0, "http_token_file '", path,
                 "' may be read by others; chmod 600 it (it holds passwords)");
  BearerTokens out;
  std::istringstream in(readRegularFile(path, "http_token_file"));
  std::string line;
  for (int n = 1; std::getline(in, line); n++) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    Token t;
    std::string grant, extra;
    if (!(words >> t.value)) continue;
    if (words >> grant) {
      JITLLM_REQUIRE(grant == "admin" && !(words >> extra), path, ":", n, ": expected 'TOKEN' or 'TOKEN admin'");
      t.admin = true;
    }
    JITLLM_REQUIRE(t.value.size() >= kMinTokenBytes, path, ":", n, ": a token is at least ", kMinTokenBytes,
                   " characters");
    out.tokens_.push_back(std::move(t));
  }
  JITLLM_REQUIRE(!out.tokens_.empty(), "http_token_file '", path, "' holds no token");
  return out;
}

std::optional<bool> BearerTokens::check(std::string_view token) const {
  std::optional<bool> grant;
  for (const Token& t : tokens_) {
    // Every byte of every token is compared, whatever matched before.
    unsigned diff = unsigned(t.value.size() ^ token.size());
    for (size_t i = 0; i < t.value.size(); i++)
      diff |= unsigned(uint8_t(t.value[i]) ^ uint8_t(i < token.size() ? token[i] : 0));
    if (diff == 0) grant = grant.value_or(false) || t.admin;
  }
  return grant;
}

}  // namespace jitllm::server::http
