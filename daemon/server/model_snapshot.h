// What ps, /metrics and the scheduler see of a resident model: its sessions, its units and where
// their KV pages are, a copy taken by the model's worker after each step (ModelHost::snapshot()).
//
// snapshotPlacement() is the part that walks the model: every unit's device, residency and
// kernels, and every session's pages per unit and per device.
//
// States are enums; their names (ps's JSON, logs, events) come from sessionStateName(),
// residencyName() and modelStateName() alone.
// Thread-safety: the structs are plain values; snapshotPlacement() reads the model and its
// sessions, so only the thread that drives them (the model's worker) may call it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/server/service_tier.h"
#include "daemon/server/tier_goodput.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"

namespace jitllm::server {

// One KV pool of the model, as /metrics shows it.
struct KvPoolSnapshot {
  std::string device;
  size_t pagesInUse = 0;
  size_t pagesReserved = 0;  // held from the device (in use or free); the pool grows by chunks
};

enum class SessionState : uint8_t {
  kPrefill,    // computing its prompt
  kDecode,     // generating
  kWaiting,    // held back: its client reads slowly
  kPreempted,  // its KV parked in host RAM for a more urgent reply
  kIdle,       // idle sessions: kept after their reply, KV on the devices
  kParked,     // idle sessions: KV in host RAM
};
std::string_view sessionStateName(SessionState state);  // "prefill", "decode", ..., "parked"

// Where a unit's weights are.
enum class Residency : uint8_t {
  kDevice,    // copied into device memory
  kFile,      // read in place from the mapped file
  kStreamed,  // in pinned host memory, through device memory each step
};
std::string_view residencyName(Residency residency);  // "device", "file", "streamed"

enum class ModelState : uint8_t {
  kPreparingKernels,  // from the load until every kernel its steps can meet is ready (requests wait)
  kReady,
};
std::string_view modelStateName(ModelState state);  // "preparing kernels", "ready"

struct SessionSnapshot {
  uint64_t id = 0;
  uint32_t ownerUid = 0;
  int64_t tokens = 0;
  int64_t contextLimit = 0;
  SessionState state = SessionState::kPrefill;
  ServiceTier tier = ServiceTier::kStandard;
};

// One unit as ps -l shows it.
struct UnitSnapshot {
  std::string name;
  std::string device;
  Residency residency = Residency::kFile;
  std::string stagedOn;  // the target of the migration that has staged it; "" if none
  size_t weightBytes = 0;
  bool kernelsReady = false;
  std::string pinned;  // device id, "" when not pinned
  size_t kvPages = 0;
  size_t kvBytes = 0;
  std::vector<std::pair<uint64_t, uint32_t>> sessionPages;  // (session id, pages)

  // What the unit holds of its device's memory: its KV, and its weights when they were copied
  // there (read in place from the file or streamed through, they take none of it for good).
  size_t bytesInDeviceMemory() const { return (residency == Residency::kDevice ? weightBytes : 0) + kvBytes; }
};

struct ModelSnapshot {
  std::string name, path;
  std::vector<SessionSnapshot> sessions;                            // running or waiting for a step
  std::vector<SessionSnapshot> idle;                                // kept after their reply, least recently used first
  std::vector<std::pair<std::string, size_t>> kvBytesByDevice;      // every session's pages
  std::vector<std::pair<std::string, size_t>> idleKvBytesByDevice;  // the idle sessions' part of it
  std::vector<KvPoolSnapshot> kvPools;                              // pages per pool (/metrics)
  size_t parkedKvBytes = 0;                                         // idle sessions' KV in host RAM
  std::vector<UnitSnapshot> units;
  std::string migration;     // the one in progress, one line; "" when none
  bool migrating = false;    // a migration is requested or in progress (also before it has started)
  int64_t lastActiveMs = 0;  // steady-clock ms of the last step that ran a session (0: none yet)
  // Paged out by the scheduler: its units were moved off their devices to free memory (they
  // still run where they are, from the file); `home` is where they ran before, per unit.
  bool pagedOut = false;
  std::vector<std::string> home;
  ModelState state = ModelState::kPreparingKernels;
  std::vector<TierGoodput> goodput;  // one per tier, most urgent first
};

// A session whose KV pages snapshotPlacement() counts.
struct SessionPages {
  const runtime::Session* session;
  uint64_t id;  // as the client knows it
  bool idle;    // kept after its reply (counted in idleKvBytesByDevice too)
};

struct PlacementSnapshot {
  std::vector<UnitSnapshot> units;                      // pinned left empty
  std::vector<std::pair<std::string, size_t>> kvBytes;  // per device, every device of a block listed
  std::vector<std::pair<std::string, size_t>> idleKvBytes;
};

// The model's units and the sessions' KV per unit and device; `stagedOn(unit)` names the device a
// running migration has staged the unit on ("" if none).
PlacementSnapshot snapshotPlacement(const runtime::Model& model, const std::vector<SessionPages>& sessions,
                                    const std::function<std::string(int)>& stagedOn);

}  // namespace jitllm::server
