// Must not compile: common/ is below proto/ (cmake/layers.cmake).
#include "proto/wire.h"
