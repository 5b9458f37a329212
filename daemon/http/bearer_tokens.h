// The bearer tokens that admit HTTP clients over TCP (http_token_file): one a line, "TOKEN" for a
// client, "TOKEN admin" for one that may also load, unload, migrate and pin; '#' starts a comment.
// The file must not be readable by others (it is a password file): the daemon refuses to start
// otherwise.
//
// Thread-safety: immutable after construction.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jitllm::server::http {

class BearerTokens final {
 public:
  static constexpr size_t kMinTokenBytes = 16;  // shorter ones are guessable

  BearerTokens() = default;
  // Error(FAILED) naming the file and line when it cannot be read, is open to others, or a line
  // is malformed.
  static BearerTokens load(const std::string& path);

  bool empty() const { return tokens_.empty(); }
  // The token's grant: nullopt when `token` is none of them, else whether it is an admin's.
  // Compared in time independent of where a guess first differs.
  std::optional<bool> check(std::string_view token) const;

 private:
  struct Token {
    std::string value;
    bool admin = false;
  };
  std::vector<Token> tokens_;
};

}  // namespace jitllm::server::http
