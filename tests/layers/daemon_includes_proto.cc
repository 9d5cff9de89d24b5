// Compiles: the daemon may use the layers below it (the probes' control, cmake/layers.cmake).
#include "common/unix_socket.h"
#include "depot/client.h"
#include "proto/wire.h"
