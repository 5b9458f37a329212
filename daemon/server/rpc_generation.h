// The Cap'n Proto surface of a generation: GenerateRequest and ChatRequest translated into the
// daemon's GenerationRequest (types and the RPC's own spellings only; what jitllmd requires of any
// request is validateRequest()'s), a RequestError told in the RPC's words, and a reply's stats
// written into its results.
//
// Thread-safety: pure functions.
#pragma once

#include "daemon/server/generation_request.h"
#include "daemon/server/generation_stats.h"
#include "jitllm/jitllm.capnp.h"

namespace jitllm::server {

GenerationRequest requestFromRpc(rpc::GenerateRequest::Reader r);
GenerationRequest requestFromRpc(rpc::ChatRequest::Reader r);

// The field as the schema names it ("maxTokens", "sampling.temperature", ...).
const char* rpcFieldName(RequestField field);
// A RequestError as the RPC reports it: FAILED, "maxTokens: <message>".
Error rpcErrorFor(const RequestError& e);

void fillStats(const GenerationStats& stats, rpc::GenerationStats::Builder b);

}  // namespace jitllm::server
