// Must not compile: the daemon is not the client library's layer (cmake/layers.cmake).
#include "client/src/channel.h"
