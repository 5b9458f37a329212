// One HTTP connection's requests: OpenAI's API (/v1/...), /health, /metrics and jitllm's own
// routes (/jitllm/v1/..., jitllm_routes.cc), answered on the KJ event loop that also runs
// Cap'n Proto RPC, with the same engine path as the RPC service (tokenizer, chat template,
// GenerationJob on the model's worker).
//
// Who the client is comes from the listener (HttpPeer): over a Unix socket, its SO_PEERCRED uid
// and that user's rights (AccessPolicy); over TCP, an anonymous user - admitted only on a loopback
// address unless it presents a bearer token (BearerTokens), and an admin only with an admin token.
//
// Every response to a request the service takes on is JSON (or SSE, or Prometheus text); every
// failure is an OpenAI error object (http_error.h). A body is read only up to http_max_body_bytes
// (413) and within http_body_timeout_ms (408). A generation whose client goes away - its socket
// reports the peer's end, or a write fails - is cancelled, and its KV pages go back at the
// worker's next step.
//
// Ownership: HttpShared is owned by the listener and outlives every connection's service; a
// service borrows it.
// Thread-safety: the KJ (RPC) thread only.
#pragma once

#include <kj/async-unix.h>
#include <kj/async.h>
#include <kj/compat/http.h>
#include <kj/timer.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "daemon/http/bearer_tokens.h"
#include "daemon/http/model_catalog.h"
#include "daemon/server/access_policy.h"
#include "daemon/server/background_threads.h"
#include "daemon/server/daemon_core.h"
#include "daemon/server/generation_intake.h"
#include "daemon/server/reply_wakeups.h"

namespace jitllm::server::http {

// The uid generations of TCP clients run as (session ownership, per-user limits): "nobody".
inline constexpr uint32_t kTcpClientUid = 65534;
// /jitllm/v1/events streams one user who is not an admin may hold at once (TCP clients share one
// count): a dashboard or two per user, not a way to pin down every connection.
inline constexpr int kMaxEventStreamsPerUser = 8;

struct HttpPeer {
  bool tcp = false;
  PeerCredentials credentials;  // over a Unix socket
  std::string address;          // over TCP, for the log
  int fd = -1;                  // the connection's socket, to notice the client leaving (ClientWatch)
};

// What every connection's service shares.
struct HttpShared {
  HttpShared(DaemonCore& core, BackgroundThreads& background, kj::UnixEventPort& eventPort, kj::Timer& timer,
             BearerTokens tokens);

  DaemonCore& core;
  BackgroundThreads& background;
  kj::UnixEventPort& eventPort;  // where ClientWatch observes a connection's socket
  kj::Timer& timer;
  BearerTokens tokens;
  ReplyWakeups wakeups;
  ModelCatalog catalog;
  kj::Own<kj::HttpHeaderTable> headerTable;
  kj::HttpHeaderId authorization;
  std::map<uint32_t, int> eventStreams;  // open /jitllm/v1/events streams by user
  bool ready = false;                    // set once the daemon is serving; /health says 503 before
  bool draining = false;                 // set when the listeners stop accepting (SIGTERM); /health says 503
};

class HttpService final : public kj::HttpService {
 public:
  // `stream`: the connection's, which outlives the service.
  HttpService(HttpShared& shared, HttpPeer peer, kj::AsyncIoStream& stream);
  ~HttpService();

  kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                            kj::AsyncInputStream& requestBody, Response& response) override;

  // A request is being answered on this connection (the listener closes idle ones first).
  bool busy() const { return requests_ > 0; }

  // What a handler works with, once the client is known.
  struct Client {
    uint32_t uid = 0;
    bool admin = false;
  };
  struct Route;

 private:
  kj::Promise<void> dispatch(kj::HttpMethod method, const std::string& path, const kj::HttpHeaders& headers,
                             kj::AsyncInputStream& body, Response& response);
  Client authenticate(const kj::HttpHeaders& headers) const;
  kj::Promise<std::string> readBody(const kj::HttpHeaders& headers, kj::AsyncInputStream& body);
  kj::Promise<void> completion(bool chat, const Client& client, std::string body, Response& response);
  kj::Promise<void> models(const std::string& id, Response& response);
  kj::Promise<void> health(Response& response);
  kj::Promise<void> metrics(Response& response);
  // jitllm's own routes (jitllm_routes.cc).
  kj::Promise<void> jitllmRoute(kj::HttpMethod method, const std::string& route, const Client& client,
                                const kj::HttpHeaders& headers, kj::AsyncInputStream& body, Response& response);
  // Resolves when the client has gone away (client_watch.h; never, when that cannot be told).
  kj::Promise<void> peerGone();

  HttpShared& shared_;
  const HttpPeer peer_;
  kj::AsyncIoStream& stream_;
  GenerationIntake intake_;
  int requests_ = 0;
};

// Sends `body` with `status` and a content type; how every complete (not streamed) answer goes.
kj::Promise<void> sendBody(kj::HttpService::Response& response, const kj::HttpHeaderTable& table, int status,
                           const std::string& contentType, std::string body);
kj::Promise<void> sendJson(kj::HttpService::Response& response, const kj::HttpHeaderTable& table, int status,
                           std::string json);

}  // namespace jitllm::server::http
