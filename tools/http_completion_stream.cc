#include "tools/http_completion_stream.h"

#include <kj/compat/http.h>

#include <nlohmann/json.hpp>

namespace jitllm::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Reads the response body, taking its server-sent events one by one.
struct EventReader {
  kj::Own<kj::AsyncInputStream> body;
  StreamedCompletion& out;
  std::string pending;
  char buffer[16384];

  kj::Promise<void> readOn() {
    return body->tryRead(buffer, 1, sizeof buffer).then([this](size_t n) -> kj::Promise<void> {
      if (n == 0) return kj::READY_NOW;
      const auto now = Clock::now();
      pending.append(buffer, n);
      for (size_t end; (end = pending.find("\n\n")) != std::string::npos; pending.erase(0, end + 2)) {
        const std::string_view event(pending.data(), end);
        if (event.rfind("data: {", 0) != 0) continue;
        if (event.find("\"usage\":{") != std::string_view::npos) {
          const auto j = nlohmann::json::parse(event.substr(6), nullptr, false);
          if (j.is_object()) out.tokens = j["usage"].value("completion_tokens", size_t(0));
        } else if (event.find("\"text\":\"\"") == std::string_view::npos) {  // a chunk with text: tokens
          if (!out.gotFirst) {
            out.first = now;
            out.gotFirst = true;
          }
          out.last = now;
        }
      }
      return readOn();
    });
  }
};

}  // namespace

kj::Promise<void> streamCompletion(kj::Network& network, const std::string& socketPath, std::string body,
                                   StreamedCompletion& out) {
  auto table = kj::heap<kj::HttpHeaderTable>();
  return network.parseAddress(kj::str("unix:", socketPath.c_str()))
      .then([](kj::Own<kj::NetworkAddress> address) { return address->connect(); })
      .then([&out, body = std::move(body),
             table = kj::mv(table)](kj::Own<kj::AsyncIoStream> stream) mutable -> kj::Promise<void> {
        auto client = kj::newHttpClient(*table, *stream);
        kj::HttpHeaders headers(*table);
        headers.set(kj::HttpHeaderId::HOST, "localhost");
        headers.set(kj::HttpHeaderId::CONTENT_TYPE, "application/json");
        out.sent = Clock::now();
        auto request = client->request(kj::HttpMethod::POST, "/v1/completions", headers, uint64_t(body.size()));
        auto bytes = kj::heapString(body.data(), body.size());
        auto sent = request.body->write(bytes.begin(), bytes.size()).attach(kj::mv(bytes), kj::mv(request.body));
        auto response = kj::mv(request.response);
        return sent.then([response = kj::mv(response)]() mutable { return kj::mv(response); })
            .then([&out](kj::HttpClient::Response&& response) -> kj::Promise<void> {
              if (response.statusCode != 200) {
                out.error = "HTTP " + std::to_string(response.statusCode);
                return kj::READY_NOW;
              }
              auto reader = kj::heap<EventReader>(EventReader{kj::mv(response.body), out, {}, {}});
              auto read = reader->readOn();
              return read.attach(kj::mv(reader));
            })
            // Destroyed in this order: the client uses the connection and the table.
            .attach(kj::mv(client))
            .attach(kj::mv(stream))
            .attach(kj::mv(table));
      });
}

}  // namespace jitllm::tools
