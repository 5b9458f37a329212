// load and unload.
#include <ostream>

#include "base/byte_size.h"
#include "base/device_id.h"
#include "base/error.h"
#include "ctl/commands.h"
#include "ctl/json_views.h"
#include "ctl/progress_bar.h"
#include "ctl/text_format.h"

namespace jitllm::ctl {

int runLoad(Context& c) {
  const std::string& file = c.args.arguments[0];
  client::LoadOptions options;
  options.name = c.args.value("--name");
  options.contextSize = c.args.number<uint32_t>("--ctx", 0);
  if (c.args.has("--devices")) {
    // The daemon's grammar (base/device_id.h), checked here so a typo fails before the model is sent.
    try {
      for (const DeviceRequest& r : parseDeviceList(c.args.value("--devices"))) {
        if (r.memoryCap) throw UsageError("--devices names devices only (cap a model with --max-vram)", "load");
        options.devices.push_back(r.id.str());
      }
    } catch (const Error& e) {
      throw UsageError(std::string("--devices: ") + e.what(), "load");
    }
  }
  const std::string kv = c.args.value("--kv");
  if (kv == "f32") {
    options.kvPrecision = client::KvPrecision::kF32;
  } else if (kv == "f16") {
    options.kvPrecision = client::KvPrecision::kF16;
  } else if (!kv.empty()) {
    throw UsageError("--kv takes f32 or f16, not '" + kv + "'", "load");
  }
  if (c.args.has("--max-vram")) {
    const auto cap = parseByteSize(c.args.value("--max-vram"));
    if (!cap || *cap == 0) throw UsageError("--max-vram takes a size such as 512M or 2G", "load");
    options.maxDeviceBytes = *cap;
  }
  options.sendPath = c.args.has("--daemon-path");
  auto client = c.connect();
  const bool showProgress = c.terminal.stderrIsTty && !c.args.json;
  ProgressBar bar(c.err, showProgress);
  // No progress sink at all when nothing would be drawn: less traffic for scripts.
  client::ProgressCallback onProgress;
  if (showProgress) onProgress = [&](const client::LoadProgress& p) { bar.update(p); };
  const client::ModelInfo model = client.load(file, options, onProgress);
  bar.finish();
  if (c.args.json) {
    JsonWriter j;
    j.beginObject().key("model");
    writeJson(j, model);
    j.endObject();
    c.out << j.str() << "\n";
    return 0;
  }
  c.out << "loaded " << model.name << " (" << model.architecture << ", " << templateLabel(model) << ", " << model.layers
        << " layers, " << humanBytes(model.fileBytes) << ", context " << model.contextSize << ") on "
        << placementSummary(model) << "\n";
  return 0;
}

int runUnload(Context& c) {
  const std::string& name = c.args.arguments[0];
  auto client = c.connect();
  client.unload(name);
  if (c.args.json) {
    JsonWriter j;
    j.beginObject().field("unloaded", name).endObject();
    c.out << j.str() << "\n";
  } else {
    c.out << "unloaded " << name << "\n";
  }
  return 0;
}

}  // namespace jitllm::ctl
