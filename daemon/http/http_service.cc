#include "daemon/http/http_service.h"

#include <kj/debug.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "daemon/http/client_watch.h"
#include "daemon/http/completion_reply.h"
#include "daemon/http/http_error.h"
#include "daemon/http/metrics_page.h"
#include "daemon/http/openai_request.h"
#include "daemon/http/openai_response.h"
#include "engine/chat/chat_template.h"

namespace jitllm::server::http {
namespace {

using nlohmann::json;

constexpr std::string_view kJitllmPrefix = "/jitllm/v1/";

kj::Own<kj::HttpHeaderTable> buildTable(kj::HttpHeaderId* authorization) {
  kj::HttpHeaderTable::Builder builder;
  *authorization = builder.add("Authorization");
  return builder.build();
}

// The path of a request target, without its query ("/v1/models?x" -> "/v1/models").
std::string pathOf(kj::StringPtr url) {
  std::string u(url.cStr(), url.size());
  const size_t q = u.find_first_of("?#");
  return q == std::string::npos ? u : u.substr(0, q);
}

const char* statusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    default:
      return status >= 500 ? "Internal Server Error" : "Error";
  }
}

}  // namespace

kj::Promise<void> sendBody(kj::HttpService::Response& response, const kj::HttpHeaderTable& table, int status,
                           const std::string& contentType, std::string body) {
  kj::HttpHeaders headers(table);
  headers.set(kj::HttpHeaderId::CONTENT_TYPE, kj::heapString(contentType.c_str(), contentType.size()));
  auto bytes = kj::heapString(body.data(), body.size());
  auto stream = response.send(uint(status), statusText(status), headers, uint64_t(bytes.size()));
  auto write = stream->write(bytes.begin(), bytes.size());
  return write.attach(kj::mv(stream), kj::mv(bytes));
}

kj::Promise<void> sendJson(kj::HttpService::Response& response, const kj::HttpHeaderTable& table, int status,
                           std::string body) {
  return sendBody(response, table, status, "application/json", std::move(body));
}

namespace {

kj::Promise<void> sendError(kj::HttpService::Response& response, const kj::HttpHeaderTable& table,
                            const HttpError& error) {
  kj::HttpHeaders headers(table);
  headers.set(kj::HttpHeaderId::CONTENT_TYPE, "application/json");
  if (auto retry = error.retryAfterSeconds()) headers.add("Retry-After", kj::str(*retry));
  if (error.status() == 401) headers.add("WWW-Authenticate", "Bearer");
  auto bytes = kj::heapString(error.body().c_str());
  auto stream = response.send(uint(error.status()), statusText(error.status()), headers, uint64_t(bytes.size()));
  auto write = stream->write(bytes.begin(), bytes.size());
  return write.attach(kj::mv(stream), kj::mv(bytes));
}

}  // namespace

HttpShared::HttpShared(DaemonCore& c, BackgroundThreads& b, kj::UnixEventPort& port, kj::Timer& t, BearerTokens tk)
    : core(c),
      background(b),
      eventPort(port),
      timer(t),
      tokens(std::move(tk)),
      catalog(c, b, t),
      headerTable(buildTable(&authorization)) {}

HttpService::HttpService(HttpShared& shared, HttpPeer peer, kj::AsyncIoStream& stream)
    : shared_(shared), peer_(std::move(peer)), stream_(stream), intake_(shared.core, shared.background) {}
HttpService::~HttpService() = default;

HttpService::Client HttpService::authenticate(const kj::HttpHeaders& headers) const {
  Client c;
  if (!peer_.tcp) {
    c.uid = peer_.credentials.uid;
    c.admin = shared_.core.access().isAdmin(c.uid);
    return c;
  }
  c.uid = kTcpClientUid;
  if (shared_.tokens.empty()) return c;  // loopback only (the listener checked), no one is admin
  std::optional<bool> grant;
  KJ_IF_MAYBE (value, headers.get(shared_.authorization)) {
    const std::string v(value->cStr(), value->size());
    constexpr std::string_view kBearer = "Bearer ";
    if (v.size() > kBearer.size() && v.compare(0, kBearer.size(), kBearer) == 0)
      grant = shared_.tokens.check(v.substr(kBearer.size()));
  }
  if (!grant) {
    throw HttpError(401, "invalid_request_error",
                    "a bearer token is needed (Authorization: Bearer TOKEN; one of http_token_file's)", std::nullopt,
                    "invalid_api_key");
  }
  c.admin = *grant;
  return c;
}

kj::Promise<std::string> HttpService::readBody(const kj::HttpHeaders& headers, kj::AsyncInputStream& body) {
  const DaemonConfig config = shared_.core.config();
  const uint64_t limit = config.httpMaxBodyBytes;
  const HttpError tooLarge(413, "invalid_request_error",
                           "the body is larger than http_max_body_bytes (" + std::to_string(limit) + " bytes)");
  KJ_IF_MAYBE (length, body.tryGetLength()) {
    // Refused before a byte of it is read: the server then closes the connection rather than
    // swallow the rest.
    if (*length > limit) throw tooLarge;
  }
  auto read = body.readAllBytes(limit + 1).then([tooLarge, limit](kj::Array<kj::byte> bytes) {
    if (bytes.size() > limit) kj::throwFatalException(asKjException(tooLarge));
    return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  });
  const auto timeout = config.httpBodyTimeoutMs;
  return shared_.timer.afterDelay(timeout * kj::MILLISECONDS)
      .then([timeout]() -> std::string {
        kj::throwFatalException(asKjException(
            HttpError(408, "invalid_request_error",
                      "the body did not arrive within http_body_timeout_ms (" + std::to_string(timeout) + " ms)")));
      })
      .exclusiveJoin(kj::mv(read));
}

kj::Promise<void> HttpService::peerGone() {
  auto watch = kj::heap<ClientWatch>(shared_.eventPort, stream_, peer_.fd);
  auto gone = watch->gone();
  return gone.attach(kj::mv(watch));
}

kj::Promise<void> HttpService::request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                                       kj::AsyncInputStream& requestBody, Response& response) {
  requests_++;
  auto done = kj::defer([this] { requests_--; });
  const std::string path = pathOf(url);
  return kj::evalNow(
             [&] { return httpErrorsAsKj([&] { return dispatch(method, path, headers, requestBody, response); }); })
      .catch_([this, &response](kj::Exception&& e) -> kj::Promise<void> {
        if (e.getType() == kj::Exception::Type::DISCONNECTED && e.getDescription().startsWith("jitllm-client-gone")) {
          return kj::READY_NOW;  // nobody to answer
        }
        const HttpError error = fromKjException(e);
        if (error.status() >= 500) spdlog::warn("http: {} {}", error.status(), error.what());
        return sendError(response, *shared_.headerTable, error);
      })
      .attach(kj::mv(done));
}

kj::Promise<void> HttpService::dispatch(kj::HttpMethod method, const std::string& path, const kj::HttpHeaders& headers,
                                        kj::AsyncInputStream& body, Response& response) {
  auto only = [&](kj::HttpMethod allowed) {
    if (method != allowed) {
      throw HttpError(405, "invalid_request_error",
                      std::string(path) + " takes " + kj::str(allowed).cStr() + ", not " + kj::str(method).cStr());
    }
  };
  // Health and metrics answer without credentials: probes and scrapers carry none, and neither
  // says anything about anyone's requests.
  if (path == "/health") {
    only(kj::HttpMethod::GET);
    return health(response);
  }
  if (path == "/metrics") {
    only(kj::HttpMethod::GET);
    return metrics(response);
  }
  const Client client = authenticate(headers);
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    only(kj::HttpMethod::POST);
    const bool chat = path == "/v1/chat/completions";
    return readBody(headers, body).then([this, chat, client, &response](std::string text) {
      return httpErrorsAsKj([&] { return completion(chat, client, std::move(text), response); });
    });
  }
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    only(kj::HttpMethod::GET);
    return models(path.size() > 11 ? path.substr(11) : std::string(), response);
  }
  if (path.rfind(kJitllmPrefix, 0) == 0) {
    return jitllmRoute(method, path.substr(kJitllmPrefix.size()), client, headers, body, response);
  }
  throw HttpError(404, "invalid_request_error", "no route " + path + " (see docs/api.md, \"HTTP\")", std::nullopt,
                  "unknown_url");
}

kj::Promise<void> HttpService::completion(bool chat, const Client& client, std::string body, Response& response) {
  // Received before a stop: a drain waits for it from here (503 once the daemon stops accepting).
  std::shared_ptr<DaemonCore::AdmissionGuard> admission = shared_.core.admitGeneration();
  // The body (up to http_max_body_bytes of JSON) is parsed off the event loop, like the prompt.
  auto params = std::make_shared<CompletionParams>();
  std::function<bool()> parse = [params, chat, body = std::move(body)] {
    return httpErrorsAsKj([&] {
      *params = parseCompletionRequest(chat ? Endpoint::kChat : Endpoint::kCompletions, body);
      return true;
    });
  };
  auto started = std::make_shared<bool>(false);
  auto generation =
      shared_.background.post(std::move(parse))
          .then([this, params](bool) {
            return httpErrorsAsKj(
                [&] { return shared_.catalog.acquire(params->request.model, params->keepAliveSeconds); });
          })
          .then([this, params, client, started, admission, &response](std::shared_ptr<ModelHost> host) mutable {
            return httpErrorsAsKj([&]() -> kj::Promise<void> {
              auto released = kj::defer([this, name = host->name()] { shared_.catalog.released(name); });
              // Completions' echo: the prompt's text, as given or made of the token ids given.
              // TODO(cleanup): the ids' text is made here, on the event loop - linear and cheap
              // beside a render, but it could join the prompt's preparation on a request worker.
              const GenerationRequest& r = params->request;
              std::string echo = !params->echo ? std::string()
                                 : r.text      ? *r.text
                                               : host->model().tokenizer().detokenize(r.prompt, true, false);
              kj::Promise<QueuedGeneration> queued = nullptr;
              try {
                queued = intake_.start(host, params->request, Caller{client.uid, client.admin, peer_.tcp}, {},
                                       std::move(admission));
              } catch (const RequestError& e) {
                throw openAiErrorFor(e, params->endpoint);
              }
              return queued
                  .then([this, params, started, &response, echo = std::move(echo)](QueuedGeneration queued) mutable {
                    return httpErrorsAsKj([&]() -> kj::Promise<void> {
                      const std::shared_ptr<GenerationJob>& job = queued.job;
                      const std::shared_ptr<ModelHost>& host = queued.host;
                      const GenerationRequest& q = job->request();
                      auto reply = kj::heap<CompletionReply>(
                          shared_, job,
                          ReplyShape::start(params->endpoint, host->name(), host->model().tokenizer(),
                                            q.topLogprobs >= 0, std::string(openAiTierName(q.tier))),
                          params->stream, params->includeUsage, std::move(echo), response, started);
                      auto run = reply->run();
                      return run.attach(kj::mv(reply), kj::mv(queued.host));
                    });
                  })
                  .attach(kj::mv(released));
            });
          });
  // A client that leaves ends its generation, whether it was being streamed or collected.
  auto gone = peerGone().then([]() -> kj::Promise<void> {
    return KJ_EXCEPTION(DISCONNECTED, "jitllm-client-gone: the client closed its connection");
  });
  return generation.exclusiveJoin(kj::mv(gone)).catch_([started](kj::Exception&& e) -> kj::Promise<void> {
    if (*started) return kj::READY_NOW;  // the stream has begun: nothing more can be said
    return kj::mv(e);
  });
}

kj::Promise<void> HttpService::models(const std::string& id, Response& response) {
  auto entryJson = [](const ModelCatalog::Entry& e) {
    return json{{"id", e.name},
                {"object", "model"},
                {"created", e.createdUnix},
                {"owned_by", "jitllm"},
                {"resident", e.resident}};
  };
  const auto entries = shared_.catalog.list();
  if (!id.empty()) {
    for (const auto& e : entries) {
      if (e.name == id) return sendJson(response, *shared_.headerTable, 200, dumpJson(entryJson(e)));
    }
    throw HttpError(404, "invalid_request_error", "the model '" + id + "' does not exist", "model", "model_not_found");
  }
  json data = json::array();
  for (const auto& e : entries) data.push_back(entryJson(e));
  return sendJson(response, *shared_.headerTable, 200, dumpJson({{"object", "list"}, {"data", data}}));
}

kj::Promise<void> HttpService::health(Response& response) {
  const bool starting = !shared_.ready, draining = shared_.draining || !shared_.core.accepting();
  const char* status = starting ? "starting" : draining ? "draining" : "ok";
  return sendJson(response, *shared_.headerTable, starting || draining ? 503 : 200,
                  dumpJson({{"status", status}, {"models", shared_.core.models().size()}}));
}

kj::Promise<void> HttpService::metrics(Response& response) {
  return sendBody(response, *shared_.headerTable, 200, "text/plain; version=0.0.4; charset=utf-8",
                  renderMetrics(shared_.core));
}

}  // namespace jitllm::server::http
