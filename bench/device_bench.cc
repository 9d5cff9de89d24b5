// device_bench: device objects on a real GPU, each figure beside its baseline from the same run.
//   1 a get whose chunk this connection has not imported yet (import + map) against a get of
//     an object in a chunk already imported, and a host get
//   2 a 1 GiB device-to-device copy into a depot object against one into a plain cuMemAlloc
//     buffer
//   3 a host-to-device copy out of a 256 MiB host object, with the host pool pinned
//     (Client::PinHostMemory) and without
// Where there is no driver or no GPU it prints why and exits 0: nothing was measured.
//
//   device_bench [--quick]
#include <fmt/format.h>

#include <cstring>

#include "bench/harness.h"
#include "bench/servers.h"
#include "common/cuda_driver.h"

using namespace depot;
using namespace depot::bench;

namespace {

CUdeviceptr Ptr(std::span<const std::byte> f) { return reinterpret_cast<CUdeviceptr>(f.data()); }

void CheckCu(const CudaDriver& cu, CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw BenchError(cu.Error(r, what));
}

// Seconds of one call of `fn`, `n` times, in `rounds` rounds.
Summary Measure(int rounds, int n, const std::function<void()>& fn) {
  Series s;
  for (int r = 0; r < rounds; ++r) {
    s.NextRound();
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      fn();
      s.Add(Since(t0));
    }
  }
  return s.Summarize();
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string_view(argv[1]) == "--quick";
  Say(fmt::format("# depot device benchmarks{}\n\n- machine: {}\n", quick ? " (--quick)" : "",
                  MachineDescription()));
  try {
    TempDir dir;
    // The daemon is started before this process initialises CUDA (a fork after cuInit is not
    // allowed to use the GPU; the daemon's exec starts afresh).
    DepotDaemon daemon(dir.path(), "device", DaemonConfig{});
    auto cu_loaded = LoadCudaDriver();
    if (!cu_loaded.ok()) {
      Say(fmt::format("No GPU here, nothing measured: {}", cu_loaded.status().message()));
      return 0;
    }
    const CudaDriver& cu = **cu_loaded;
    CUdevice dev;
    CUcontext ctx;
    CheckCu(cu, cu.DeviceGet(&dev, 0), "cuDeviceGet");
    CheckCu(cu, cu.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    CheckCu(cu, cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
    Client producer = daemon.Connect("producer");
    auto pools = Check(producer.DevicePools(), "device pools");
    Place gpu = Place::Gpu(pools.at(0).uuid);
    Say(fmt::format("- device pool: {} {} ({}), chunks of {}\n- {}\n", pools[0].uuid, pools[0].name,
                    pools[0].kind, Bytes(pools[0].chunk_size), daemon.Describe()));
    CreateOptions on_gpu;
    on_gpu.places = {gpu};
    const int rounds = quick ? 2 : 5;

    // 1: import + map against a cached get. Each object larger than half a chunk gets a chunk
    // of its own, so each fresh connection's first get of it imports one chunk.
    {
      uint64_t big = pools[0].chunk_size / 2 + 4096;
      int n = quick ? 3 : 8;
      std::vector<Guid> own_chunks;
      for (int i = 0; i < n; ++i) {
        auto d = Check(producer.Create({big}, on_gpu), "create");
        Check(d.Seal(), "seal");
        own_chunks.push_back(d.guid());
      }
      Guid small = Check(producer.Put(std::vector<std::byte>(4096), on_gpu), "put");
      Guid host = Check(producer.Put(std::vector<std::byte>(4096)), "put");
      size_t next = 0;
      Summary first = Measure(rounds, n / rounds + 1, [&] {
        Client fresh = daemon.Connect();
        KeepAlive(Check(fresh.Get(own_chunks[next++ % own_chunks.size()]), "get"));
      });
      Client reader = daemon.Connect();
      Summary cached = Measure(rounds, 200, [&] { KeepAlive(Check(reader.Get(small), "get")); });
      Summary host_get = Measure(rounds, 200, [&] { KeepAlive(Check(reader.Get(host), "get")); });
      Say("\n## 1. Get latency: importing a chunk, and after\n");
      Table t({"get", "p50 (rounds)", "p99", "/ cached device get"}, "lrrr");
      t.Row({"device object, chunk not yet imported (connect + import + map)", P50WithSpread(first),
             Time(first.p99), Ratio(first.p50 / cached.p50)});
      t.Row({"device object, chunk imported", P50WithSpread(cached), Time(cached.p99), "1.00×"});
      t.Row({"host object", P50WithSpread(host_get), Time(host_get.p99),
             Ratio(host_get.p50 / cached.p50)});
      t.Print();
    }

    // 2: a 1 GiB device-to-device copy into a depot object, against a plain buffer.
    {
      uint64_t size = quick ? 256ull << 20 : 1ull << 30;
      CUdeviceptr src, plain;
      CheckCu(cu, cu.MemAlloc(&src, size), "cuMemAlloc");
      CheckCu(cu, cu.MemAlloc(&plain, size), "cuMemAlloc");
      auto draft = Check(producer.Create({size}, on_gpu), "create");
      CUdeviceptr dst = Ptr(draft.frame(0));
      auto copy = [&](CUdeviceptr to) {
        CheckCu(cu, cu.MemcpyDtoD(to, src, size), "cuMemcpyDtoD");
        CheckCu(cu, cu.CtxSynchronize(), "cuCtxSynchronize");
      };
      copy(dst);  // first touch of both
      copy(plain);
      Series to_depot, to_plain;
      for (int r = 0; r < rounds; ++r) {
        to_depot.NextRound();
        to_plain.NextRound();
        for (int i = 0; i < 5; ++i) {
          auto t0 = Clock::now();
          copy(dst);
          to_depot.Add(Since(t0));
          t0 = Clock::now();
          copy(plain);
          to_plain.Add(Since(t0));
        }
      }
      Check(draft.Seal(), "seal");
      Summary a = to_depot.Summarize(), b = to_plain.Summarize();
      Say(fmt::format("\n## 2. Device-to-device copy of {}\n", Bytes(size)));
      Table t({"into", "p50 (rounds)", "bandwidth", "/ plain buffer"}, "lrrr");
      t.Row({"a depot object's device frame", P50WithSpread(a), Rate(size / a.p50),
             Ratio(b.p50 / a.p50)});
      t.Row({"a cuMemAlloc buffer", P50WithSpread(b), Rate(size / b.p50), "1.00×"});
      t.Print();
      cu.MemFree(src);
      cu.MemFree(plain);
    }

    // 3: host object to device, pinned and not.
    {
      uint64_t size = 256ull << 20;
      Guid host = Check(producer.Put(std::vector<std::byte>(size, std::byte{1})), "put");
      CUdeviceptr dst;
      CheckCu(cu, cu.MemAlloc(&dst, size), "cuMemAlloc");
      auto h2d = [&](Client& c) {
        auto obj = Check(c.Get(host), "get");
        return Measure(rounds, 3, [&] {
          CheckCu(cu, cu.MemcpyHtoD(dst, obj.frame(0).data(), size), "cuMemcpyHtoD");
        });
      };
      Client plain = daemon.Connect();
      Summary unpinned = h2d(plain);
      Client pinned_client = daemon.Connect();
      Check(pinned_client.PinHostMemory(), "pin");
      Summary pinned = h2d(pinned_client);
      Say(fmt::format("\n## 3. Host object to device, {}\n", Bytes(size)));
      Table t({"host pool", "p50 (rounds)", "bandwidth", "/ not pinned"}, "lrrr");
      t.Row({"pinned (PinHostMemory)", P50WithSpread(pinned), Rate(size / pinned.p50),
             Ratio(unpinned.p50 / pinned.p50)});
      t.Row({"not pinned", P50WithSpread(unpinned), Rate(size / unpinned.p50), "1.00×"});
      t.Print();
      cu.MemFree(dst);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "device_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
