// jitllm-pipelined-status [SOCKET]: asks for the version, devices and models at once, with three
// calls in flight on one connection, on the program's own KJ event loop (jitllm/client_capnp.h).
#include <jitllm/client_capnp.h>

#include <cstdio>

int main(int argc, char** argv) {
  try {
    auto io = kj::setupAsyncIo();
    auto connection = jitllm::client::DaemonConnection::connect(*io.lowLevelProvider, argc > 1 ? argv[1] : "");
    auto daemon = connection->daemon();
    auto version = daemon.versionRequest().send();
    auto devices = daemon.devicesRequest().send();
    auto models = daemon.modelsRequest().send();
    const auto v = version.wait(io.waitScope).getVersion();
    std::printf("jitllmd %u.%u.%u (protocol %u)\n", v.getMajor(), v.getMinor(), v.getPatch(), v.getProtocol());
    std::printf("%u devices, %u models\n", devices.wait(io.waitScope).getDevices().size(),
                models.wait(io.waitScope).getModels().size());
    return 0;
  } catch (const jitllm::client::Error& e) {
    std::fprintf(stderr, "jitllm-pipelined-status: %s\n", e.what());
    return 1;
  } catch (const kj::Exception& e) {
    std::fprintf(stderr, "jitllm-pipelined-status: %s\n", jitllm::client::toError(e).what());
    return 1;
  }
}
