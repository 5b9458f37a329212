// The JSON form of the client's values for jitllmctl --json. Keys are the schema's field names
// (docs/api.md), so a script reads the same names the API documents.
//
// Thread-safety: pure functions.
#pragma once

#include "ctl/json_writer.h"
#include "jitllm/client.h"

namespace jitllm::ctl {

void writeJson(JsonWriter& j, const client::Version& v);
void writeJson(JsonWriter& j, const client::DeviceInfo& d);
void writeJson(JsonWriter& j, const client::ModelInfo& m);
void writeJson(JsonWriter& j, const client::Event& e);
void writeJson(JsonWriter& j, const client::GenerationStats& s);
void writeJson(JsonWriter& j, const client::LayerState& l);
// The one exception to the schema's names: migrate and pin print snake_case keys, the same words
// as their text output ("pause_ms", "bytes_in_pause", ...), which scripts grep.
void writeJson(JsonWriter& j, const client::MigrationStats& s);
// {"tokens": [...], "text": ..., "stats": {...}, "cancelled": b} without the enclosing braces.
void writeResultFields(JsonWriter& j, const client::GenerateResult& r);

}  // namespace jitllm::ctl
