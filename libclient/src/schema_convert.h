// Copies between the schema's readers/builders (jitllm/jitllm.capnp.h) and the plain values of
// jitllm/client_types.h. Internal to libjitllmclient.
//
// Thread-safety: pure functions.
#pragma once

#include "jitllm/client_types.h"
#include "jitllm/jitllm.capnp.h"

namespace jitllm::client::convert {

Version fromSchema(rpc::Version::Reader r);
DeviceInfo fromSchema(rpc::DeviceInfo::Reader r);
ModelInfo fromSchema(rpc::ModelInfo::Reader r);
LayerState fromSchema(rpc::LayerState::Reader r);
Event fromSchema(rpc::Event::Reader r);
GenerationStats fromSchema(rpc::GenerationStats::Reader r);
MigrationStats fromSchema(rpc::MigrationStats::Reader r);

void toSchema(const LoadOptions& in, rpc::LoadOptions::Builder out);
void toSchema(const SamplingParams& in, rpc::SamplingParams::Builder out);
// Error(FAILED) when both a text and a token prompt are given.
void toSchema(const GenerateRequest& in, rpc::GenerateRequest::Builder out);
void toSchema(const ChatRequest& in, rpc::ChatRequest::Builder out);
void toSchema(const MigrateRequest& in, rpc::MigrateRequest::Builder out);
void toSchema(const TensorParallelRequest& in, rpc::MigrateRequest::Builder out);

}  // namespace jitllm::client::convert
