# jitllm.capnp - the public contract between jitllmd and its clients (libclient, jitllmctl, apps).
#
# Transport: Cap'n Proto RPC (two-party) over a Unix stream socket; the daemon's bootstrap
# capability is a `Daemon`. File descriptors travel with messages (SCM_RIGHTS), which is how
# `load` takes a model file the client opened itself.
#
# Versioning: `protocolVersion` below rises by one with every incompatible change; additions of
# fields and methods (the usual Cap'n Proto evolution rules) do not change it. Clients compare
# `Daemon.version().protocol` with the constant they were built with. docs/api.md documents every
# method, its errors and its permissions.
#
# Errors are Cap'n Proto exceptions: FAILED (bad request: the message says what to fix),
# OVERLOADED (no memory or capacity now: retry later), DISCONNECTED (a device or the daemon went
# away), UNIMPLEMENTED (this daemon cannot do it).

@0xe3f77fa43ae28533;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("jitllm::rpc");

const protocolVersion :UInt32 = 2;
# 2: LoadOptions.devices is a list of ids and kvPrecision an enum (both were Text).

struct Version {
  major @0 :UInt32;
  minor @1 :UInt32;
  patch @2 :UInt32;
  protocol @3 :UInt32;   # = protocolVersion of the daemon
  build @4 :Text;        # free-form: compiler, enabled backends
}

struct Telemetry {
  # NaN (or 0 for counters) where unknown.
  temperatureC @0 :Float32;
  utilization @1 :Float32;      # 0..1, from our own executors
  powerWatts @2 :Float32;
}

struct DeviceInfo {
  id @0 :Text;                  # "cpu:0", "cuda:1", "vulkan:0": BACKEND:N (docs/api.md, "Device ids")
  backend @1 :Text;             # "cpu" | "cuda" | "vulkan": the backends are a registry, open-ended,
                                # so a new backend needs no protocol change
  name @2 :Text;
  memoryTotal @3 :UInt64;       # bytes this device may hand out
  memoryUsed @4 :UInt64;        # bytes handed out now
  threads @5 :UInt32;           # CPU devices: worker threads
  software @6 :Bool;            # an emulated device (placed last)
  telemetry @7 :Telemetry;
  online @8 :Bool;              # false: it went away (hot-plug); models were re-placed off it
  offlineReason @9 :Text;       # why it is offline
}

struct LayerRange {
  # Consecutive units of a model on one device. Units: 0 = "token_embd", 1..L = "blk.0".."blk.L-1",
  # L+1 = "output".
  first @0 :UInt32;
  last @1 :UInt32;              # inclusive
  device @2 :Text;
  firstName @3 :Text;           # "token_embd", "blk.3", "output"
  lastName @4 :Text;
}

struct DeviceMemory {
  device @0 :Text;
  weightBytes @1 :UInt64;
  kvBytes @2 :UInt64;           # KV pages in use on this device
}

struct SessionInfo {
  id @0 :UInt64;
  ownerUid @1 :UInt32;
  tokens @2 :UInt32;            # in its KV cache
  contextLimit @3 :UInt32;
  state @4 :Text;               # "prefill" | "decode" | "waiting" (slow reader) | "preempted"; idle sessions:
                                # "idle" (KV on the devices) | "parked" (KV in host RAM)
  tier @5 :Text;                # "interactive" | "standard" | "batch" (docs/tiers.md)
}

struct TierGoodput {
  # One service tier's replies on a model since it was loaded (docs/tiers.md).
  tier @0 :Text;
  ttftTargetMs @1 :Float64;     # 0: none
  tpotTargetMs @2 :Float64;     # 0: none
  finished @3 :UInt64;          # replies that ended normally
  met @4 :UInt64;               # ... of which met both targets
  metPerSecond @5 :Float64;     # goodput: those that met them, over the last minute
}

struct ModelInfo {
  name @0 :Text;
  path @1 :Text;                # where it was loaded from ("fd:N" for a passed descriptor)
  architecture @2 :Text;
  fileBytes @3 :UInt64;
  layers @4 :UInt32;            # transformer blocks
  vocabSize @5 :UInt32;
  contextLength @6 :UInt32;     # trained
  contextSize @7 :UInt32;       # the default session limit it was loaded with
  placement @8 :List(LayerRange);
  memory @9 :List(DeviceMemory);
  sessions @10 :List(SessionInfo);
  chatTemplate @11 :Text;       # the template family: "llama3", "chatml", "gemma", ... (docs/chat-templates.md)
  loadedUnixMs @12 :Int64;
  layerStates @13 :List(LayerState);  # one per unit, in order (jitllmctl ps -l)
  migration @14 :Text;          # the migration in progress, one line; "" when none
  idleSessions @15 :List(SessionInfo);  # finished replies kept so a follow-up continues them
                                        # (docs/daemon.md), least recently used first
  parkedKvBytes @16 :UInt64;    # idle sessions' KV parked in host RAM
  state @17 :Text;              # "preparing kernels" while load makes its kernels ready
                                # (requests wait), then "ready"
  goodput @18 :List(TierGoodput);  # one per tier, most urgent first
  replicaOf @19 :Text;          # a replica (Daemon.replicate): the model whose requests it shares
}

struct SessionPages {
  sessionId @0 :UInt64;
  pages @1 :UInt32;             # KV pages this session holds for the layer
}

struct LayerState {
  # One schedulable unit of a model and where its state lives.
  unit @0 :UInt32;
  name @1 :Text;                # "token_embd", "blk.3", "output"
  device @2 :Text;              # where it runs now
  residency @3 :Text;           # weights: "device" (copied into device memory) | "file" (read in
                                # place from the mapped file) | "host" (paged out to host RAM)
  stagedOn @4 :Text;            # a migration has staged its weights on this device; "" if none
  weightBytes @5 :UInt64;
  kernelsReady @6 :Bool;        # its kernels are compiled (and warmed) for `device`
  pinned @7 :Text;              # the device it is pinned to; "" when not pinned
  kvPages @8 :UInt32;           # over all sessions (blocks only)
  kvBytes @9 :UInt64;
  sessions @10 :List(SessionPages);
}

struct LoadOptions {
  name @0 :Text;                # default: the file's general.name, made unique
  contextSize @1 :UInt32;       # default session limit; 0: min(trained, daemon's default)
  devices @2 :List(Text);       # placement hint: ["cpu:0"] or ["cpu:0", "cpu:1"] (layers spread in
                                # order); empty: the daemon places it
  kvPrecision @3 :KvPrecision;
  maxDeviceBytes @4 :UInt64;    # cap on the model's bytes per GPU (weights + KV); 0: none
}

enum KvPrecision {
  default @0;                   # the daemon's default: f32
  f32 @1;
  f16 @2;                       # half the KV memory and migration bytes; ~1e-4 relative error
}

struct ModelSource {
  union {
    path @0 :Text;              # must be under one of the daemon's model directories
    file @1 :File;              # a descriptor the client opened (passed with the message)
  }
}

interface File {
  # Carries a file descriptor (Capability::Server::getFd). Has no methods.
}

interface ProgressSink {
  progress @0 (stage :Text, done :UInt64, total :UInt64) -> stream;
}

struct SamplingParams {
  temperature @0 :Float32 = 0;      # 0: greedy (ties to the lowest id)
  topK @1 :Int32 = 0;
  topP @2 :Float32 = 1;
  minP @3 :Float32 = 0;
  repeatPenalty @4 :Float32 = 1;
  repeatLastN @5 :Int32 = 64;
  seed @6 :UInt64 = 0;
}

struct GenerateRequest {
  model @0 :Text;
  prompt :union {
    text @1 :Text;                  # tokenized with the model's special tokens and BOS flag
    tokens @2 :List(Int32);
  }
  maxTokens @3 :UInt32 = 128;
  sampling @4 :SamplingParams;
  stop @5 :List(Text);              # stop strings: generation ends before the first match
  contextSize @6 :UInt32;           # 0: the model's default
  ignoreEndOfGeneration @7 :Bool;   # generate maxTokens whatever comes (benchmarks, as
                                    # llama-batched-bench does); the EOS/EOT tokens are kept
  tier @8 :Text;                    # "interactive" | "standard" | "batch"; "": the caller's default.
                                    # Only admins may ask for one more urgent than their default.
}

struct ChatMessage {
  role @0 :Text;                    # "system" | "user" | "assistant"
  content @1 :Text;
}

struct ChatRequest {
  model @0 :Text;
  messages @1 :List(ChatMessage);
  maxTokens @2 :UInt32 = 256;
  sampling @3 :SamplingParams;
  stop @4 :List(Text);
  contextSize @5 :UInt32;
  tier @6 :Text;                    # as GenerateRequest.tier
}

enum StopReason {
  maxTokens @0;
  endOfGeneration @1;
  stopString @2;
  contextFull @3;
}

struct GenerationStats {
  promptTokens @0 :UInt32;
  generatedTokens @1 :UInt32;
  timeToFirstTokenMs @2 :Float64;
  tokensPerSecond @3 :Float64;      # generated tokens after the first, per second
  totalMs @4 :Float64;
  stopReason @5 :StopReason;
  sessionId @6 :UInt64;
  reusedTokens @7 :UInt32;      # prompt tokens whose KV an idle session already held (not computed)
  tier @8 :Text;                # the tier it ran in
  metTargets @9 :Bool;          # its tier's TTFT and TPOT targets both held
}

interface TokenSink {
  # Receives a reply as it is generated. `text` is always whole UTF-8 characters; tokens whose
  # bytes are still incomplete arrive with empty text. Flow control: the daemon keeps at most a
  # few chunks unanswered per reply (each call returns when the client has taken the chunk), and
  # stops generating for the session while its unsent tokens reach the daemon's
  # max_queued_tokens, so a slow reader slows only itself and costs bounded memory.
  tokens @0 (ids :List(Int32), text :Text) -> ();
}

enum EventKind {
  daemon @0;      # started, reloaded config, stopping
  device @1;      # appeared, vanished
  model @2;       # loading, loaded, unloaded, load failed
  session @3;     # started, finished, cancelled
  migration @4;   # preparing, prepared, committed, failed; pinned, unpinned
}

struct Event {
  unixMs @0 :Int64;
  kind @1 :EventKind;
  what @2 :Text;          # "model.loaded", "session.finished", ... (docs/api.md lists them)
  model @3 :Text;
  device @4 :Text;
  sessionId @5 :UInt64;
  message @6 :Text;       # one human-readable line
}

interface EventSink {
  event @0 (event :Event) -> stream;
}

interface Subscription {
  # Drop it to unsubscribe.
}

interface Daemon {
  version @0 () -> (version :Version);
  devices @1 () -> (devices :List(DeviceInfo));
  models @2 () -> (models :List(ModelInfo));

  load @3 (source :ModelSource, options :LoadOptions, progress :ProgressSink) -> (model :ModelInfo);
  # Admin only. `progress` may be null.
  unload @4 (name :Text) -> ();
  # Admin only. Sessions of the model end with DISCONNECTED.

  generate @5 (request :GenerateRequest, sink :TokenSink)
      -> (tokens :List(Int32), text :Text, stats :GenerationStats);
  # Dropping the call (or disconnecting) cancels the generation and frees its KV pages.
  chat @6 (request :ChatRequest, sink :TokenSink)
      -> (tokens :List(Int32), text :Text, stats :GenerationStats);

  events @7 (sink :EventSink, replay :UInt32) -> (subscription :Subscription);
  # Sends up to `replay` recent events before it returns, then streams new ones until the
  # subscription is dropped.

  cancelSession @8 (sessionId :UInt64) -> ();
  # Owners cancel their own sessions; admins any.

  migrate @9 (request :MigrateRequest) -> (stats :MigrationStats);
  # Admin only. Moves a range of a model's units to a device while its sessions keep generating
  # (docs/migration.md). With `wait`, returns once committed (dropping the call cancels a
  # migration still preparing); without, returns at once with `committed` false and the outcome
  # arrives as events. FAILED when a unit of the range is pinned elsewhere (unless `force`), when
  # a migration of the model is already running, or when the target is out of memory; the model
  # then keeps running where it was.

  pin @10 (model :Text, layers :Text, device :Text) -> (stats :MigrationStats);
  # Admin only. Pins the units to `device`, first moving those that are elsewhere (stats of that
  # move; units 0 when none was needed). Pinned units never move on their own.
  unpin @11 (model :Text, layers :Text) -> ();
  # Admin only.

  policy @12 (name :Text) -> (name :Text, available :List(Text));
  # The scheduler's policy (docs/operations.md): with an empty `name`, which one is active; with a
  # name, switch to it (admin only; FAILED naming the available ones for an unknown name).
  # UNIMPLEMENTED when the daemon runs without a scheduler (scheduler_interval_ms = 0).

  replicate @14 (model :Text, device :Text) -> (model :ModelInfo);
  # Admin only. Data parallelism: a second copy of `model` on `device`, named MODEL#2 (#3, ...),
  # sharing its file, options and tier targets; new requests for `model` go to whichever copy has
  # the fewest jobs. Returns once its kernels are ready. `unload MODEL#N` drops it; unloading
  # `model` drops its replicas too. OVERLOADED when it does not fit on `device`.

  tensorParallel @13 (request :MigrateRequest) -> (stats :MigrationStats);
  # Admin only. Splits the blocks of the range over `request.split` (tensor parallelism: each
  # device runs its share of the attention heads, with their KV, and of the FFN rows; the first
  # keeps the hidden state), or with one device there joins them back onto it - live, like a
  # migration (prepared while replies stream, committed at a token boundary, nothing recomputed;
  # docs/tiers.md). `device` is ignored. FAILED when the model's KV heads or FFN rows do not split
  # over that many devices, a device is named twice, or a migration of the model is running.
}

struct MigrateRequest {
  model @0 :Text;
  layers @1 :Text;              # "" = every unit; "3" = blk.3; "0-5" = blk.0..blk.5; the ends
                                # may also be "token_embd"/"embd" and "output"/"head", e.g.
                                # "20-output"
  device @2 :Text;              # target, e.g. "cpu:1", "vulkan:0"
  wait @3 :Bool = true;
  precopy @4 :Bool = true;      # pre-copy sealed KV pages while streaming (else all in the pause)
  force @5 :Bool = false;       # move units pinned elsewhere too (their pins then follow)
  split @6 :List(Text);         # tensorParallel: the devices, e.g. ["cuda:0", "cuda:1"]
  partialSums @7 :Bool = false; # tensorParallel: split the output and down projections too (their
                                # sums added in shard order: within rounding of one device's
                                # logits instead of its exact bits)
}

struct MigrationStats {
  id @0 :UInt64;                # this migration, as named in its events
  model @1 :Text;
  firstName @2 :Text;           # the range moved
  lastName @3 :Text;
  from @4 :Text;                # source device(s), comma-separated
  to @5 :Text;
  units @6 :UInt32;             # units that moved (those already on the target are skipped)
  committed @7 :Bool;
  prepareMs @8 :Float64;        # from the request to the commit point, while tokens streamed
  pauseMs @9 :Float64;          # how long the model's step loop stood still for the commit
  bytesPrecopied @10 :UInt64;   # KV bytes copied during prepare
  bytesInPause @11 :UInt64;     # KV bytes copied during the pause (open tail pages and pages
                                # sealed since their pre-copy)
  weightBytes @12 :UInt64;      # weights brought to the target
  recomputedTokens @13 :UInt32; # always 0: KV moves, it is never recomputed
  sessions @14 :UInt32;         # sessions whose KV moved
}
