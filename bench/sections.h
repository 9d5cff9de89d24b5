// The sections of depot_bench's document, one function each (one file each), and what they
// share. Each prints its own heading, method and tables, and records its target checks.
#ifndef DEPOT_BENCH_SECTIONS_H_
#define DEPOT_BENCH_SECTIONS_H_

#include <string>

#include "bench/harness.h"
#include "bench/servers.h"

namespace depot::bench {

class RedisServer;  // bench/redis.h

struct Context {
  bool quick = false;
  std::string dir;  // temporary directory for sockets and server logs
  const RedisServer* redis = nullptr;
  Targets* targets = nullptr;
  // A depotd of an earlier commit, measured beside this tree's where a section says so (empty:
  // none).
  std::string previous_depotd;
};

void GetLatency(const Context& ctx);  // 1. get latency by size, against the floor, Redis, a socket
void HeldGet(const Context& ctx);     // 2. repeated get of an object already held
void PutThroughput(const Context& ctx);      // 3. put bandwidth against memcpy and Redis SET
void SmallObjects(const Context& ctx);       // 4. 1 KiB put+get ops/s, multi-get
void ManyReaders(const Context& ctx);        // 5. 8 readers of one large object
void AllocatorWorkload(const Context& ctx);  // 6. fragmentation under a random workload
void Scale(const Context& ctx);              // 7. a million objects: daemon memory, listing
void FirstGet(const Context& ctx);     // 8. get of an object not held yet: the index, no round trip
void ScaleGets(const Context& ctx);    // 9. first gets and multi-gets at a million objects
void ManyClients(const Context& ctx);  // 10. busy clients among a thousand connected

}  // namespace depot::bench

#endif  // DEPOT_BENCH_SECTIONS_H_
