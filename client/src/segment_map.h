// internal::SegmentMap is the segments, host segments and device chunks, that this process has
// mapped, by pool and id. The daemon sends each segment's fds once: a read-only one with gets and
// a read-write one with this process's creates; a segment is mapped on first use (read-only from
// the read-only fd for gets, read-write from the read-write fd for creates) through a Mapper:
// MmapMapper, or CudaMapper for a CUDA pool's chunk (which has one fd for both: its importer sets
// its own access). Each frame of a live Object or Draft counts one use of
// its segment. A shared segment stays mapped for the objects to come until the daemon retires
// it; a retired one, or one dedicated to a single object, is unmapped when its last use goes.
// The daemon counts a retired segment's bytes until this process says it has unmapped it: the
// calls that unmap retired segments return that message (SegmentsDropped), for the caller to
// send at once.
//
// Thread-safe: one mutex guards the map.
#ifndef DEPOT_CLIENT_SRC_SEGMENT_MAP_H_
#define DEPOT_CLIENT_SRC_SEGMENT_MAP_H_

#include <atomic>
#include <boost/container/small_vector.hpp>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "client/src/cuda_mapper.h"
#include "client/src/mmap_mapper.h"
#include "client/src/pools.h"
#include "common/fork_generation.h"
#include "common/unique_fd.h"
#include "depot/status.h"
#include "proto/wire.h"

namespace depot::internal {

// An object's frames as mapped in this process, and the segment uses that keep them mapped: most
// objects have one frame, kept inline, so that holding one costs no allocation for either.
using FrameViews = boost::container::small_vector<std::span<const std::byte>, 1>;
using SegmentUses = boost::container::small_vector<uint64_t, 1>;
// `v` as a span (Boost 1.74's iterators are not the contiguous iterators std::span asks for).
template <typename T, size_t N>
std::span<const T> AsSpan(const boost::container::small_vector<T, N>& v) {
  return {v.data(), v.size()};
}

// A segment's fd, as a reply brought it: read-only or read-write, as its access mode says.
struct SegmentFd {
  uint32_t pool;
  uint32_t id;
  uint64_t size;
  UniqueFd fd;
};

class SegmentMap {
 public:
  // `pools` and `cuda` must outlive the map.
  SegmentMap(const Pools& pools, CudaMapper& cuda) : pools_(pools), cuda_(cuda) {}
  ~SegmentMap();  // unmaps every segment
  SegmentMap(const SegmentMap&) = delete;
  SegmentMap& operator=(const SegmentMap&) = delete;

  // Whether the daemon asks for huge pages on host segments. Set while connecting.
  void set_hugepages(bool on) { mmap_.set_hugepages(on); }

  // A shared segment, from the reply that first named it (kept unless already known).
  void AddShared(SegmentFd segment);
  // The daemon retired these segments: each is unmapped now if unused, else when its last use
  // goes. Returns the SegmentsDropped message naming those unmapped now (and those this process
  // never mapped), or nothing.
  std::vector<uint8_t> Retire(const wire::SegmentsRetired& notice);

  // The daemon that sent these segments went away: each is unmapped now if unused, else when its
  // last use goes (as Retire, with no message: no one is there to hear it).
  void RetireAll();

  // Resolves frame locations of a reply to pointers in this process, mapping segments as
  // needed (read-write for `writable`). `dedicated` holds the fds of the reply's dedicated
  // segments; they are taken. Records one segment use per frame in `uses`; the caller gives
  // them back with DropUses. For writable frames, `unpopulated` receives the address ranges
  // whose page tables this process has not filled yet (the caller fills them, outside the lock).
  Result<std::vector<std::span<std::byte>>> MapFrames(
      const flatbuffers::Vector<const wire::FrameLocation*>* frames, bool writable,
      std::vector<SegmentFd>& dedicated, SegmentUses& uses,
      std::vector<std::span<std::byte>>* unpopulated = nullptr);
  // Resolves frames the shared index named, in segments this process has already mapped
  // read-only and that are neither retired nor dedicated (no fd comes with the index); records
  // one use per frame in `uses` and appends each frame's bytes to `views`. False, with nothing
  // recorded or appended, when one is not so mapped or a frame leaves its segment: the caller
  // asks the daemon, whose reply brings the descriptor.
  bool MapIndexed(std::span<const wire::FrameLocation> frames, SegmentUses& uses,
                  FrameViews& views);
  // One object of MapIndexedMany: its frames, where their uses and views go, and whether they
  // were mapped.
  struct IndexedFrames {
    std::span<const wire::FrameLocation> frames;
    SegmentUses* uses;
    FrameViews* views;
    bool mapped = false;
  };
  // MapIndexed for each of `objects`, under one lock for them all (a multi-GUID get).
  void MapIndexedMany(std::span<IndexedFrames> objects);
  // Returns the SegmentsDropped message naming the retired segments this unmapped, or nothing.
  std::vector<uint8_t> DropUses(std::span<const uint64_t> uses);
  // A reply's results are all handled: its dedicated segments that no frame uses (a mapping
  // failed, or no result named them) are unmapped and their fds closed, rather than kept
  // forever.
  void DropIdle(const std::vector<SegmentFd>& dedicated);

  // How many retired segments this map has unmapped so far.
  uint64_t retired_drops() const { return retired_drops_.load(std::memory_order_relaxed); }

  // Registers every host mapping, present and to come, with CUDA (see Client::PinHostMemory).
  Status PinHostMemory();

 private:
  // MapIndexed, under mu_.
  bool MapIndexedLocked(std::span<const wire::FrameLocation> frames, SegmentUses& uses,
                        FrameViews& views);
  struct Segment {
    UniqueFd ro_fd;  // opened O_RDONLY: maps read-only only
    UniqueFd rw_fd;  // sent with creates (and, for a CUDA chunk, with gets too)
    uint64_t size = 0;
    bool dedicated = false;
    bool retired = false;
    void* ro = nullptr;
    void* rw = nullptr;
    uint32_t uses = 0;
    // Granules of the read-write mapping whose page tables are filled. Filling them once per
    // process in one call is cheaper than a fault per page, and filling them again is not free.
    std::vector<bool> rw_populated;
    uint32_t pool = 0;       // 0: host; otherwise a device chunk
    bool cuda = false;       // mapped by CudaMapper: ro and rw are device addresses
    void* pinned = nullptr;  // the mapping registered with CUDA (ro, else rw), if any
  };

  // SegmentsDropped messages (one per pool) naming `keys`; empty when `keys` is.
  std::vector<uint8_t> DroppedMessage(std::vector<uint64_t> keys);
  // Keeps a received fd in the slot its access mode names (unless that slot has one). mu_ held.
  static void Keep(Segment& s, UniqueFd fd);
  // Maps segment `s` read-write or read-only into `base` (its rw or ro), and pins a host
  // mapping when pin_host_ is set. mu_ held.
  Status Map(Segment& s, bool writable, void*& base);
  // Registers a host mapping with CUDA when pin_host_ is set. mu_ held.
  Status Pin(Segment& s, void* base);
  void Unmap(Segment& s);
  // CudaMapper for a CUDA pool's chunks, MmapMapper for every other segment.
  Mapper& MapperFor(bool cuda) { return cuda ? static_cast<Mapper&>(cuda_) : mmap_; }

  const Pools& pools_;
  CudaMapper& cuda_;
  MmapMapper mmap_;

  std::atomic<uint64_t> retired_drops_{0};
  ForkMark made_;
  std::mutex mu_;
  bool pin_host_ = false;  // register host mappings with CUDA (PinHostMemory)
  std::unordered_map<uint64_t, Segment> segments_;  // by SegmentKey(pool, id)
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_SEGMENT_MAP_H_
