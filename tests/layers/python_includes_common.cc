// Must not compile: the Python binding uses the public API only (cmake/layers.cmake).
#include "common/unix_socket.h"
