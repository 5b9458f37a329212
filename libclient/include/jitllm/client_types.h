// Plain values that mirror the RPC contract (libclient/jitllm.capnp), for the synchronous client
// in jitllm/client.h. Field names and defaults follow the schema; docs/api.md describes each.
//
// Thread-safety: values; copy them freely between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jitllm/client_export.h"

namespace jitllm::client {

struct Version {
  uint32_t major = 0;
  uint32_t minor = 0;
  uint32_t patch = 0;
  uint32_t protocol = 0;  // the daemon's protocol version (jitllm::client::kProtocolVersion here)
  std::string build;      // free-form: compiler, enabled backends
};

struct Telemetry {
  float temperatureC = 0;  // NaN where unknown
  float utilization = 0;   // 0..1
  float powerWatts = 0;    // NaN where unknown
};

struct DeviceInfo {
  std::string id;       // "cpu:0", "cuda:1", "vulkan:0"
  std::string backend;  // "cpu" | "cuda" | "vulkan"
  std::string name;
  uint64_t memoryTotal = 0;
  uint64_t memoryUsed = 0;
  uint32_t threads = 0;
  bool software = false;
  Telemetry telemetry;
  bool online = true;         // false: it went away (hot-plug); its models were re-placed
  std::string offlineReason;  // why it is offline
};

// Consecutive units of a model on one device: 0 = token_embd, 1..L = blk.0..blk.L-1, L+1 = output.
struct LayerRange {
  uint32_t first = 0;
  uint32_t last = 0;  // inclusive
  std::string device;
  std::string firstName;
  std::string lastName;
};

struct DeviceMemory {
  std::string device;
  uint64_t weightBytes = 0;
  uint64_t kvBytes = 0;
};

struct SessionInfo {
  uint64_t id = 0;
  uint32_t ownerUid = 0;
  uint32_t tokens = 0;
  uint32_t contextLimit = 0;
  std::string state;  // "prefill" | "decode" | "waiting" | "preempted"; idle sessions: "idle" | "parked"
  std::string tier;   // "interactive" | "standard" | "batch"
};

// One service tier's replies on a model since it was loaded (docs/tiers.md).
struct TierGoodput {
  std::string tier;
  double ttftTargetMs = 0;  // 0: none
  double tpotTargetMs = 0;  // 0: none
  uint64_t finished = 0;    // replies that ended normally
  uint64_t met = 0;         // ... of which met both targets
  double metPerSecond = 0;  // goodput over the last minute
};

// KV pages one session holds for one unit.
struct SessionPages {
  uint64_t sessionId = 0;
  uint32_t pages = 0;
};

// One schedulable unit of a model and where its state lives: the data behind `jitllmctl ps -l`.
struct LayerState {
  uint32_t unit = 0;      // 0 = token_embd, 1..L = blk.0..blk.L-1, L+1 = output
  std::string name;       // "token_embd", "blk.3", "output"
  std::string device;     // where it runs now
  std::string residency;  // its weights: "device" (in device memory) | "file" (read in place from
                          // the mapped file) | "host" (paged out to host RAM)
  std::string stagedOn;   // a migration has staged its weights on this device; empty if none
  uint64_t weightBytes = 0;
  bool kernelsReady = false;  // its kernels are compiled (and warmed) for `device`
  std::string pinned;         // the device it is pinned to; empty when not pinned
  uint32_t kvPages = 0;       // over all sessions (blocks only)
  uint64_t kvBytes = 0;
  std::vector<SessionPages> sessions;
};

// One resident model: the data behind `jitllmctl ps`.
struct ModelInfo {
  std::string name;
  std::string path;  // where it was loaded from ("fd:N" for a passed descriptor)
  std::string architecture;
  uint64_t fileBytes = 0;
  uint32_t layers = 0;
  uint32_t vocabSize = 0;
  uint32_t contextLength = 0;  // trained
  uint32_t contextSize = 0;    // the default session limit it was loaded with
  std::vector<LayerRange> placement;
  std::vector<DeviceMemory> memory;
  std::vector<SessionInfo> sessions;
  std::string chatTemplate;  // the chat template's family: "llama3", "chatml", "gemma", ... (docs/chat-templates.md)
  int64_t loadedUnixMs = 0;
  std::vector<LayerState> layerStates;    // one per unit, in order (schema: ModelInfo.layerStates)
  std::string migration;                  // the migration in progress, one line; empty when none
  std::vector<SessionInfo> idleSessions;  // kept after their reply for a follow-up to continue
  uint64_t parkedKvBytes = 0;             // idle sessions' KV parked in host RAM
  std::string state;                      // "preparing kernels" (requests wait), then "ready"
  std::vector<TierGoodput> goodput;       // one per tier, most urgent first
};

// What the KV cache stores (schema: KvPrecision).
enum class KvPrecision { kDefault, kF32, kF16 };

struct LoadOptions {
  std::string name;                  // empty: the file's general.name, made unique by the daemon
  uint32_t contextSize = 0;          // default session limit; 0: min(trained, the daemon's default)
  std::vector<std::string> devices;  // placement hint: {"cpu:0"} or {"cpu:0", "cpu:1"}; empty: the daemon decides
  KvPrecision kvPrecision = KvPrecision::kDefault;
  uint64_t maxDeviceBytes = 0;  // cap on the model's bytes per GPU (weights + KV); 0: none
  // Client::load(path) normally opens the file here and passes the descriptor, so the daemon
  // reads exactly what this process may read. With sendPath the path is sent instead and the
  // daemon opens it itself, only under its configured model directories (and only if this
  // process's user could read it); a relative path is made absolute against this process's
  // working directory first.
  bool sendPath = false;
};

// Stages and counts reported while a model loads ("read", "bind", ...; total 0 when unknown).
struct LoadProgress {
  std::string stage;
  uint64_t done = 0;
  uint64_t total = 0;
};

struct SamplingParams {
  float temperature = 0;  // 0: greedy (ties to the lowest id)
  int32_t topK = 0;
  float topP = 1;
  float minP = 0;
  float repeatPenalty = 1;
  int32_t repeatLastN = 64;
  uint64_t seed = 0;
};

struct GenerateRequest {
  std::string model;
  // Exactly one of these: text (tokenized by the daemon with the model's special tokens and BOS
  // flag) or token ids. Giving both is an Error(FAILED).
  std::string prompt;
  std::vector<int32_t> promptTokens;
  uint32_t maxTokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;       // generation ends before the first match
  uint32_t contextSize = 0;            // 0: the model's default
  bool ignoreEndOfGeneration = false;  // maxTokens whatever comes (benchmarks)
  std::string tier;                    // "interactive" | "standard" | "batch"; empty: the caller's default
};

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  uint32_t maxTokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop;
  uint32_t contextSize = 0;
  std::string tier;  // as GenerateRequest::tier
};

enum class StopReason {
  kMaxTokens,
  kEndOfGeneration,
  kStopString,
  kContextFull,
  kCancelled,  // client side only: the chunk callback returned false (the daemon sends no stats)
};
JITLLM_CLIENT_API const char* stopReasonName(StopReason reason);  // "maxTokens", "endOfGeneration", ...

struct GenerationStats {
  uint32_t promptTokens = 0;
  uint32_t generatedTokens = 0;
  double timeToFirstTokenMs = 0;
  double tokensPerSecond = 0;  // generated tokens after the first, per second
  double totalMs = 0;
  StopReason stopReason = StopReason::kMaxTokens;
  uint64_t sessionId = 0;
  uint32_t reusedTokens = 0;  // prompt tokens whose KV an idle session already held
  std::string tier;           // the tier it ran in
  bool metTargets = false;    // its tier's TTFT and TPOT targets both held
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (not the prompt)
  std::string text;
  GenerationStats stats;
  // True when the chunk callback stopped the generation: tokens and text are what had arrived,
  // stats count them (generatedTokens) and the rest is zero; stats.stopReason is kCancelled.
  bool cancelled = false;
};

enum class EventKind { kDaemon, kDevice, kModel, kSession, kMigration };
// "daemon", "device", "model", "session", "migration"
JITLLM_CLIENT_API const char* eventKindName(EventKind kind);

struct Event {
  int64_t unixMs = 0;
  EventKind kind = EventKind::kDaemon;
  std::string what;  // "model.loaded", "session.finished", "migration.committed", ...
  std::string model;
  std::string device;
  uint64_t sessionId = 0;
  std::string message;  // one human-readable line
};

// Moves a range of a model's units to a device while its sessions keep generating (admin only;
// Client::migrate). docs/api.md describes the layer ranges and the errors.
struct MigrateRequest {
  std::string model;
  // The units to move: empty = every unit; "3" = blk.3; "0-5" = blk.0..blk.5; an end may also be
  // "token_embd" (or "embd") and "output" (or "head"), e.g. "token_embd-output", "20-output".
  // The daemon parses it.
  std::string layers;
  std::string device;   // the target, e.g. "cpu:1", "vulkan:0"
  bool wait = true;     // return once committed; false: return at once, the outcome comes as events
  bool precopy = true;  // copy sealed KV pages while tokens stream (false: all of it in the pause)
  bool force = false;   // move units pinned elsewhere too (their pins follow them)
};

// Splits a range of a model's blocks over several devices (tensor parallelism), or joins them back
// onto one, while its sessions keep generating (admin only; Client::tensorParallel).
struct TensorParallelRequest {
  std::string model;
  std::string layers;                // MigrateRequest::layers; the embedding and head are not split
  std::vector<std::string> devices;  // the split, e.g. {"cuda:0", "cuda:1"}; one device: no split
  bool wait = true;
  bool precopy = true;       // re-lay sealed KV pages while tokens stream
  bool partialSums = false;  // split the output and down projections too (within rounding)
  bool force = false;        // also blocks pinned elsewhere
};

// What a migration did (or, without `wait`, what it is about to do).
struct MigrationStats {
  uint64_t id = 0;  // this migration, as named in its events
  std::string model;
  std::string firstName;  // the range moved, e.g. "token_embd" .. "output"
  std::string lastName;
  std::string from;  // source device(s), comma-separated
  std::string to;
  uint32_t units = 0;  // units that moved (those already on the target are skipped)
  bool committed = false;
  double prepareMs = 0;           // from the request to the commit point, while tokens streamed
  double pauseMs = 0;             // how long the model's step loop stood still for the commit
  uint64_t bytesPrecopied = 0;    // KV bytes copied during prepare
  uint64_t bytesInPause = 0;      // KV bytes copied during the pause
  uint64_t weightBytes = 0;       // weights brought to the target
  uint32_t recomputedTokens = 0;  // always 0: the KV cache moves, it is never recomputed
  uint32_t sessions = 0;          // sessions whose KV moved
};

// The scheduler's policy and the ones the daemon knows (Client::policy).
struct PolicyInfo {
  std::string name;
  std::vector<std::string> available;
};

}  // namespace jitllm::client
