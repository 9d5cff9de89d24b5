// depotd: the daemon, with device pools on CUDA GPUs (where the driver and a GPU are).
#include "daemon/daemon_main.h"

int main(int argc, char** argv) { return depot::DaemonMain(argc, argv, depot::MakeCudaBackend); }
