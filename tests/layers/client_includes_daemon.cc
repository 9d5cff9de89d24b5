// Must not compile: the client library is not the daemon's layer (cmake/layers.cmake).
#include "daemon/store.h"
