// jitllm's own HTTP routes, mirroring the RPC (docs/api.md, "HTTP: jitllm's routes"):
//   GET  /jitllm/v1/ps       resident models: state, placement, sessions (yours; all for admins)
//   GET  /jitllm/v1/events   daemon events as server-sent events, as `jitllmctl events`
//   POST /jitllm/v1/load     {"path", "name"?, "context_size"?}                   (admin)
//   POST /jitllm/v1/unload   {"model"}                                           (admin)
//   POST /jitllm/v1/migrate  {"model", "device", "layers"?, "force"?}; waits       (admin)
//   POST /jitllm/v1/pin      {"model", "device", "layers"?}; moves, then pins       (admin)
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "daemon/http/http_error.h"
#include "daemon/http/http_service.h"
#include "daemon/http/openai_response.h"

namespace jitllm::server::http {
namespace {

using nlohmann::json;

json psJson(const ModelHost& host, uint32_t uid, bool admin) {
  const ModelSnapshot snap = host.snapshot();
  json units = json::array();
  for (const auto& u : snap.units) {
    units.push_back({{"name", u.name},
                     {"device", u.device},
                     {"residency", residencyName(u.residency)},
                     {"pinned", u.pinned},
                     {"kv_pages", u.kvPages},
                     {"weight_bytes", u.weightBytes}});
  }
  auto sessions = [&](const std::vector<SessionSnapshot>& list) {
    json out = json::array();
    for (const auto& s : list) {
      if (!admin && s.ownerUid != uid) continue;
      out.push_back({{"id", s.id},
                     {"uid", s.ownerUid},
                     {"tokens", s.tokens},
                     {"context_limit", s.contextLimit},
                     {"state", sessionStateName(s.state)},
                     {"tier", tierName(s.tier)}});
    }
    return out;
  };
  json goodput = json::array();
  for (const auto& g : snap.goodput) {
    goodput.push_back({{"tier", tierName(g.tier)},
                       {"ttft_target_ms", g.targets.ttftMs},
                       {"tpot_target_ms", g.targets.tpotMs},
                       {"finished", g.finished},
                       {"met", g.met},
                       {"met_per_second", g.metPerSecond}});
  }
  return {{"name", host.name()},
          {"path", host.path()},
          {"state", modelStateName(snap.state)},
          {"paged_out", snap.pagedOut},
          {"migration", snap.migration},
          {"units", units},
          {"sessions", sessions(snap.sessions)},
          {"idle_sessions", sessions(snap.idle)},
          {"goodput", goodput}};
}

const json& requiredString(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || !it->is_string())
    throw HttpError::badParameter(name, std::string("'") + name + "' (a string) is required");
  return *it;
}

std::string optionalString(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_string()) throw HttpError::badParameter(name, std::string("'") + name + "' must be a string");
  return it->get<std::string>();
}

json migrationJson(const MigrationResult& r) {
  return {{"id", r.id},
          {"model", r.model},
          {"from", r.stats.from},
          {"to", r.to},
          {"units", r.stats.units},
          {"committed", r.committed},
          {"pause_ms", r.stats.pauseMs},
          {"prepare_ms", r.stats.prepareMs},
          {"recomputed_tokens", r.stats.recomputedTokens}};
}

// Waits for a migration on the KJ loop; dropping the promise (the client left) cancels a
// migration that has not committed yet.
kj::Promise<MigrationResult> whenMigrated(ReplyWakeups& wakeups, std::shared_ptr<MigrationTicket> ticket) {
  auto [done, waker] = wakeups.arm();
  ticket->setWaker(waker);
  auto cancel = kj::defer([ticket] {
    if (!ticket->done()) ticket->cancel();
  });
  return done
      .then([ticket]() -> MigrationResult {
        if (auto error = ticket->error()) kj::throwFatalException(asKjException(httpErrorFor(*error)));
        return ticket->result();
      })
      .attach(kj::mv(cancel));
}

// Streams a mailbox's events as SSE until the client goes (a failed write ends it).
class EventStream final {
 public:
  EventStream(HttpShared& shared, std::shared_ptr<EventMailbox> box, kj::Own<kj::AsyncOutputStream> body)
      : shared_(shared), box_(std::move(box)), body_(kj::mv(body)) {}

  kj::Promise<void> run() {
    size_t dropped = 0;
    std::string text;
    if (auto events = box_->take(&dropped); !events.empty() || dropped) {
      if (dropped) text += "event: dropped\ndata: " + std::to_string(dropped) + "\n\n";
      for (const auto& e : events) {
        text += "data: " +
                dumpJson({{"unix_ms", e.unixMs},
                          {"kind", eventKindName(e.kind)},
                          {"what", e.what},
                          {"model", e.model},
                          {"device", e.device},
                          {"session_id", e.sessionId},
                          {"message", e.message}}) +
                "\n\n";
      }
    }
    kj::Promise<void> written = kj::READY_NOW;
    if (!text.empty()) {
      auto bytes = kj::heapString(text.data(), text.size());
      written = body_->write(bytes.begin(), bytes.size()).attach(kj::mv(bytes));
    }
    return written
        .then([this] {
          auto [more, waker] = shared_.wakeups.arm();
          box_->setWaker(waker);
          return kj::mv(more);
        })
        .then([this] { return run(); });
  }

 private:
  HttpShared& shared_;
  std::shared_ptr<EventMailbox> box_;
  kj::Own<kj::AsyncOutputStream> body_;
};

}  // namespace

kj::Promise<void> HttpService::jitllmRoute(kj::HttpMethod method, const std::string& route, const Client& client,
                                           const kj::HttpHeaders& headers, kj::AsyncInputStream& body,
                                           Response& response) {
  DaemonCore& core = shared_.core;
  if (route == "ps" && method == kj::HttpMethod::GET) {
    json models = json::array();
    for (const auto& host : core.models()) models.push_back(psJson(*host, client.uid, client.admin));
    return sendJson(response, *shared_.headerTable, 200, dumpJson({{"models", models}}));
  }
  if (route == "events" && method == kj::HttpMethod::GET) {
    // An event stream never ends, so its connection is never idle and never gives way to a new
    // one: without a cap, one user could hold every HTTP connection with them.
    int& streams = shared_.eventStreams[client.uid];
    if (!client.admin && streams >= kMaxEventStreamsPerUser) {
      throw HttpError(429, "rate_limit_error",
                      "you (uid " + std::to_string(client.uid) + ") hold " + std::to_string(streams) +
                          " event streams already, the most one user may",
                      std::nullopt, "too_many_event_streams");
    }
    streams++;
    auto counted = kj::defer([&shared = shared_, uid = client.uid] {
      if (--shared.eventStreams[uid] == 0) shared.eventStreams.erase(uid);
    });
    const std::optional<uint32_t> viewer = client.admin ? std::nullopt : std::optional<uint32_t>(client.uid);
    auto box = core.events().subscribe(0, viewer);
    kj::HttpHeaders h(*shared_.headerTable);
    h.set(kj::HttpHeaderId::CONTENT_TYPE, "text/event-stream; charset=utf-8");
    h.add("Cache-Control", "no-cache");
    auto stream = kj::heap<EventStream>(shared_, std::move(box), response.send(200, "OK", h));
    auto run = stream->run();
    return run.attach(kj::mv(stream)).exclusiveJoin(peerGone()).attach(kj::mv(counted));
  }
  const bool admin = route == "load" || route == "unload" || route == "migrate" || route == "pin";
  if (!admin)
    throw HttpError(404, "invalid_request_error", "no route /jitllm/v1/" + route, std::nullopt, "unknown_url");
  if (method != kj::HttpMethod::POST)
    throw HttpError(405, "invalid_request_error", "/jitllm/v1/" + route + " takes POST");
  if (!client.admin) {
    throw HttpError(403, "permission_error",
                    route + " needs an admin: root or the admin group over the Unix socket, an admin token over TCP",
                    std::nullopt, "forbidden");
  }
  return readBody(headers, body).then([this, route, &response](std::string text) {
    return httpErrorsAsKj([&]() -> kj::Promise<void> {
      const json b = json::parse(text, nullptr, false);
      if (!b.is_object()) throw HttpError(400, "invalid_request_error", "the body must be a JSON object");
      DaemonCore& core = shared_.core;
      if (route == "load") {
        auto request = std::make_shared<LoadRequest>();
        request->path = requiredString(b, "path").get<std::string>();
        request->name = optionalString(b, "name");
        if (auto it = b.find("context_size"); it != b.end() && !it->is_null()) {
          if (!it->is_number_unsigned())
            throw HttpError::badParameter("context_size", "'context_size' must be a positive integer");
          request->contextSize = it->get<int64_t>();
        }
        // (bool, not the name, crosses threads: GCC 12 warns falsely on a kj::Promise<std::string>.)
        auto name = std::make_shared<std::string>();
        std::function<bool()> work = [&core, request, name] {
          *name = core.load(*request, nullptr)->name();
          return true;
        };
        return shared_.background.run(work).then([this, &response, name](bool) {
          return sendJson(response, *shared_.headerTable, 200, dumpJson({{"model", *name}, {"loaded", true}}));
        });
      }
      const std::string model = requiredString(b, "model").get<std::string>();
      auto host = core.find(model);
      if (route == "unload") {
        std::function<bool()> work = [&core, model] {
          core.unload(model);
          return true;
        };
        return shared_.background.run(work).then([this, &response, model](bool) {
          return sendJson(response, *shared_.headerTable, 200, dumpJson({{"model", model}, {"unloaded", true}}));
        });
      }
      MigrationRequest request;
      request.layers = optionalString(b, "layers");
      request.target = &core.device(std::string_view(requiredString(b, "device").get_ref<const std::string&>()));
      if (route == "pin") {
        request.force = true;
        request.pinAfter = true;
      } else if (auto it = b.find("force"); it != b.end() && it->is_boolean()) {
        request.force = it->get<bool>();
      }
      return whenMigrated(shared_.wakeups, host->migrate(request))
          .then([this, &response](MigrationResult r) {
            return sendJson(response, *shared_.headerTable, 200, dumpJson(migrationJson(r)));
          })
          .attach(kj::mv(host));
    });
  });
}

}  // namespace jitllm::server::http
