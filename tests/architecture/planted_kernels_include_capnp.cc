// Planted by tests/architecture: the device layer must not use Cap'n Proto.
#include <capnp/message.h>
