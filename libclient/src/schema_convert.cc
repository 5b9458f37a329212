#include "schema_convert.h"

#include "jitllm/client_error.h"

namespace jitllm::client::convert {
namespace {

std::string str(capnp::Text::Reader t) { return std::string(t.cStr(), t.size()); }

void setStrings(capnp::List<capnp::Text>::Builder out, const std::vector<std::string>& in) {
  for (size_t i = 0; i < in.size(); i++) out.set(unsigned(i), in[i]);
}

}  // namespace

Version fromSchema(rpc::Version::Reader r) {
  return {r.getMajor(), r.getMinor(), r.getPatch(), r.getProtocol(), str(r.getBuild())};
}

DeviceInfo fromSchema(rpc::DeviceInfo::Reader r) {
  DeviceInfo d;
  d.id = str(r.getId());
  d.backend = str(r.getBackend());
  d.name = str(r.getName());
  d.memoryTotal = r.getMemoryTotal();
  d.memoryUsed = r.getMemoryUsed();
  d.threads = r.getThreads();
  d.software = r.getSoftware();
  auto t = r.getTelemetry();
  d.telemetry = {t.getTemperatureC(), t.getUtilization(), t.getPowerWatts()};
  d.online = r.getOnline();
  d.offlineReason = str(r.getOfflineReason());
  return d;
}

ModelInfo fromSchema(rpc::ModelInfo::Reader r) {
  ModelInfo m;
  m.name = str(r.getName());
  m.path = str(r.getPath());
  m.architecture = str(r.getArchitecture());
  m.fileBytes = r.getFileBytes();
  m.layers = r.getLayers();
  m.vocabSize = r.getVocabSize();
  m.contextLength = r.getContextLength();
  m.contextSize = r.getContextSize();
  for (auto p : r.getPlacement()) {
    m.placement.push_back({p.getFirst(), p.getLast(), str(p.getDevice()), str(p.getFirstName()), str(p.getLastName())});
  }
  for (auto mem : r.getMemory()) m.memory.push_back({str(mem.getDevice()), mem.getWeightBytes(), mem.getKvBytes()});
  for (auto s : r.getSessions()) {
    m.sessions.push_back(
        {s.getId(), s.getOwnerUid(), s.getTokens(), s.getContextLimit(), str(s.getState()), str(s.getTier())});
  }
  m.chatTemplate = str(r.getChatTemplate());
  m.loadedUnixMs = r.getLoadedUnixMs();
  for (auto l : r.getLayerStates()) m.layerStates.push_back(fromSchema(l));
  m.migration = str(r.getMigration());
  for (auto s : r.getIdleSessions()) {
    m.idleSessions.push_back(
        {s.getId(), s.getOwnerUid(), s.getTokens(), s.getContextLimit(), str(s.getState()), str(s.getTier())});
  }
  m.parkedKvBytes = r.getParkedKvBytes();
  m.state = r.getState();
  for (auto g : r.getGoodput()) {
    m.goodput.push_back(
        {str(g.getTier()), g.getTtftTargetMs(), g.getTpotTargetMs(), g.getFinished(), g.getMet(), g.getMetPerSecond()});
  }
  return m;
}

LayerState fromSchema(rpc::LayerState::Reader r) {
  LayerState l;
  l.unit = r.getUnit();
  l.name = str(r.getName());
  l.device = str(r.getDevice());
  l.residency = str(r.getResidency());
  l.stagedOn = str(r.getStagedOn());
  l.weightBytes = r.getWeightBytes();
  l.kernelsReady = r.getKernelsReady();
  l.pinned = str(r.getPinned());
  l.kvPages = r.getKvPages();
  l.kvBytes = r.getKvBytes();
  for (auto s : r.getSessions()) l.sessions.push_back({s.getSessionId(), s.getPages()});
  return l;
}

Event fromSchema(rpc::Event::Reader r) {
  Event e;
  e.unixMs = r.getUnixMs();
  switch (r.getKind()) {
    case rpc::EventKind::DAEMON:
      e.kind = EventKind::kDaemon;
      break;
    case rpc::EventKind::DEVICE:
      e.kind = EventKind::kDevice;
      break;
    case rpc::EventKind::MODEL:
      e.kind = EventKind::kModel;
      break;
    case rpc::EventKind::SESSION:
      e.kind = EventKind::kSession;
      break;
    case rpc::EventKind::MIGRATION:
      e.kind = EventKind::kMigration;
      break;
  }
  e.what = str(r.getWhat());
  e.model = str(r.getModel());
  e.device = str(r.getDevice());
  e.sessionId = r.getSessionId();
  e.message = str(r.getMessage());
  return e;
}

GenerationStats fromSchema(rpc::GenerationStats::Reader r) {
  GenerationStats s;
  s.promptTokens = r.getPromptTokens();
  s.generatedTokens = r.getGeneratedTokens();
  s.timeToFirstTokenMs = r.getTimeToFirstTokenMs();
  s.tokensPerSecond = r.getTokensPerSecond();
  s.totalMs = r.getTotalMs();
  switch (r.getStopReason()) {
    case rpc::StopReason::MAX_TOKENS:
      s.stopReason = StopReason::kMaxTokens;
      break;
    case rpc::StopReason::END_OF_GENERATION:
      s.stopReason = StopReason::kEndOfGeneration;
      break;
    case rpc::StopReason::STOP_STRING:
      s.stopReason = StopReason::kStopString;
      break;
    case rpc::StopReason::CONTEXT_FULL:
      s.stopReason = StopReason::kContextFull;
      break;
  }
  s.sessionId = r.getSessionId();
  s.reusedTokens = r.getReusedTokens();
  s.tier = str(r.getTier());
  s.metTargets = r.getMetTargets();
  return s;
}

MigrationStats fromSchema(rpc::MigrationStats::Reader r) {
  MigrationStats s;
  s.id = r.getId();
  s.model = str(r.getModel());
  s.firstName = str(r.getFirstName());
  s.lastName = str(r.getLastName());
  s.from = str(r.getFrom());
  s.to = str(r.getTo());
  s.units = r.getUnits();
  s.committed = r.getCommitted();
  s.prepareMs = r.getPrepareMs();
  s.pauseMs = r.getPauseMs();
  s.bytesPrecopied = r.getBytesPrecopied();
  s.bytesInPause = r.getBytesInPause();
  s.weightBytes = r.getWeightBytes();
  s.recomputedTokens = r.getRecomputedTokens();
  s.sessions = r.getSessions();
  return s;
}

void toSchema(const LoadOptions& in, rpc::LoadOptions::Builder out) {
  out.setName(in.name);
  out.setContextSize(in.contextSize);
  auto devices = out.initDevices(uint32_t(in.devices.size()));
  for (size_t i = 0; i < in.devices.size(); i++) devices.set(uint32_t(i), in.devices[i]);
  out.setKvPrecision(in.kvPrecision == KvPrecision::kF16   ? rpc::KvPrecision::F16
                     : in.kvPrecision == KvPrecision::kF32 ? rpc::KvPrecision::F32
                                                           : rpc::KvPrecision::DEFAULT);
  out.setMaxDeviceBytes(in.maxDeviceBytes);
}

void toSchema(const SamplingParams& in, rpc::SamplingParams::Builder out) {
  out.setTemperature(in.temperature);
  out.setTopK(in.topK);
  out.setTopP(in.topP);
  out.setMinP(in.minP);
  out.setRepeatPenalty(in.repeatPenalty);
  out.setRepeatLastN(in.repeatLastN);
  out.setSeed(in.seed);
}

void toSchema(const GenerateRequest& in, rpc::GenerateRequest::Builder out) {
  if (!in.prompt.empty() && !in.promptTokens.empty()) {
    throw Error(ErrorKind::kFailed, "give the prompt as text or as token ids, not both");
  }
  out.setModel(in.model);
  if (!in.promptTokens.empty()) {
    auto ids = out.getPrompt().initTokens(unsigned(in.promptTokens.size()));
    for (size_t i = 0; i < in.promptTokens.size(); i++) ids.set(unsigned(i), in.promptTokens[i]);
  } else {
    out.getPrompt().setText(in.prompt);
  }
  out.setMaxTokens(in.maxTokens);
  toSchema(in.sampling, out.initSampling());
  setStrings(out.initStop(unsigned(in.stop.size())), in.stop);
  out.setContextSize(in.contextSize);
  out.setIgnoreEndOfGeneration(in.ignoreEndOfGeneration);
  out.setTier(in.tier);
}

void toSchema(const ChatRequest& in, rpc::ChatRequest::Builder out) {
  out.setModel(in.model);
  auto messages = out.initMessages(unsigned(in.messages.size()));
  for (size_t i = 0; i < in.messages.size(); i++) {
    messages[unsigned(i)].setRole(in.messages[i].role);
    messages[unsigned(i)].setContent(in.messages[i].content);
  }
  out.setMaxTokens(in.maxTokens);
  toSchema(in.sampling, out.initSampling());
  setStrings(out.initStop(unsigned(in.stop.size())), in.stop);
  out.setContextSize(in.contextSize);
  out.setTier(in.tier);
}

void toSchema(const MigrateRequest& in, rpc::MigrateRequest::Builder out) {
  out.setModel(in.model);
  out.setLayers(in.layers);
  out.setDevice(in.device);
  out.setWait(in.wait);
  out.setPrecopy(in.precopy);
  out.setForce(in.force);
}

void toSchema(const TensorParallelRequest& in, rpc::MigrateRequest::Builder out) {
  out.setModel(in.model);
  out.setLayers(in.layers);
  out.setWait(in.wait);
  out.setPrecopy(in.precopy);
  out.setForce(in.force);
  out.setPartialSums(in.partialSums);
  auto split = out.initSplit(unsigned(in.devices.size()));
  for (size_t i = 0; i < in.devices.size(); i++) split.set(unsigned(i), in.devices[i]);
}

}  // namespace jitllm::client::convert
