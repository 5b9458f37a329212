#include "daemon/server/generation_intake.h"

#include "base/error.h"
#include "engine/chat/chat_template.h"

namespace jitllm::server {

std::vector<int32_t> preparePrompt(const ModelHost& host, const GenerationRequest& request) {
  if (!request.messages.empty()) {
    const std::string text = runtime::renderChat(host.chatTemplate(), request.messages);
    return host.model().tokenizer().encode(text, true, true);
  }
  if (request.text) {
    std::vector<int32_t> tokens = host.model().tokenizer().encode(*request.text, true, true);
    JITLLM_REQUIRE(!tokens.empty(), "the prompt is empty");  // text that is no token (no BOS)
    return tokens;
  }
  return request.prompt;
}

kj::Promise<QueuedGeneration> GenerationIntake::start(std::shared_ptr<ModelHost> host, GenerationRequest request,
                                                      const Caller& caller, Router route,
                                                      std::shared_ptr<DaemonCore::AdmissionGuard> admission) {
  if (!admission) admission = core_.admitGeneration();
  validateRequest(request);
  try {
    // A TCP client has no local user: the default tier, or what its token's admin grant allows.
    const std::vector<gid_t> groups = caller.anonymous ? std::vector<gid_t>{} : core_.access().groupsOf(caller.uid);
    request.tier = resolveTier(core_.config().tiers, request.requestedTier, caller.uid, groups, caller.admin);
  } catch (const Error& e) {
    throw RequestError(RequestField::kTier, e.what(), true);
  }
  request.ownerUid = caller.uid;
  const size_t perUserLimit = caller.admin ? SIZE_MAX : core_.config().maxSessionsPerUid;
  auto queue = [this, host, route, perUserLimit](GenerationRequest prepared) {
    QueuedGeneration queued{route ? route() : host,
                            std::make_shared<GenerationJob>(std::move(prepared), core_.config().maxQueuedTokens)};
    queued.host->submit(queued.job, perUserLimit);
    return queued;
  };
  if (request.promptPrepared()) return queue(std::move(request));
  // The tokens stay in the shared request rather than travel in the promise (GCC 12 warns falsely
  // about a vector inside kj::Promise, -Wmaybe-uninitialized).
  auto shared = std::make_shared<GenerationRequest>(std::move(request));
  std::function<bool()> prepare = [host, shared] {
    shared->setPrompt(preparePrompt(*host, *shared));
    return true;
  };
  return background_.post(std::move(prepare))
      .then([shared, queue = std::move(queue)](bool) mutable {
        return translateErrors([&] { return queue(std::move(*shared)); });
      })
      .attach(std::move(admission));
}

}  // namespace jitllm::server
