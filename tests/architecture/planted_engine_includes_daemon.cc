// Planted by tests/architecture: the engine must not include the daemon.
#include "daemon/server/daemon_core.h"
