// LeaseDriver runs a real Store (a small real host pool, keep_warm 0, leases taken back as soon
// as they are idle) through the puts a client can make into its lease, read from bytes: leases,
// puts as messages and as put-ring records whose frames lie relative to the lease's start, end
// and cursor (whole-lease frames, repeats, overlaps, out-of-order and unaligned offsets, other
// segments), mixed with deletes, memory pressure that takes idle leases back, segments given
// back, and closes. It checks the invariants of leases and the allocator as a client sees them
// (list and status): no two live objects share a byte; the bytes `used` are exactly the live
// objects' blocks; and once every session is closed and every object deleted, nothing is used
// or leased. Shared by the fuzz target fuzz_lease and the property test lease_invariants_test.
//
// Input: a sequence of operations, each one control byte then its operands:
//   control % 2          the client slot (a closed slot opens and greets a fresh session)
//   (control / 2) % 7    0: a lease, of a size picked by the next byte
//                        1: a put message; 2: a put-ring record, then (odd next byte) a doorbell.
//                           Operands: a byte, 1 + its value % 3 frames, then two bytes a frame:
//                           an anchor, its flags and a size (see FrameAt), and a signed offset
//                           from the anchor in blocks
//                        3: the admin deletes the live object picked by the next byte
//                        4: the admin creates an object as large as most of the pool, and aborts
//                           it: memory runs short and idle leases are taken back (a create that
//                           waits for retired segments is answered once every session has
//                           answered its notices, as client libraries do)
//                        5: the slot's session closes
//                        6: timers run (ring polls), then every invariant is checked
//
// At scale (a driver made with `background` objects): the store first holds that many sealed
// objects of 64 B, put into leases by a session of the driver's own (closed after; the objects
// are not evictable and no input can name them), among the holes that deleting about one in
// seven of those put left (every eighth, and a run of up to 63 in each lease), so that leases are
// cut from a pool and an allocator that hold a million objects and 140,000 free extents. The live
// objects a check sees are then the ones the input created (recorded from the store's events by a
// watching session, each stat'ed), checked against each other and against the background's blocks;
// `used` must be the background's bytes and theirs. Finish deletes the input's objects and leaves
// the store as the fill left it, so one driver serves every input.
//
// Not thread-safe.
#ifndef DEPOT_FUZZ_LEASE_DRIVER_H_
#define DEPOT_FUZZ_LEASE_DRIVER_H_

#include <array>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "common/shared_mapping.h"
#include "daemon/store.h"

namespace depot::fuzz {

class LeaseDriver {
 public:
  explicit LeaseDriver(uint64_t background = 0);
  ~LeaseDriver();

  // Runs the operations of `in`; "" or the first invariant found broken.
  std::string Run(std::span<const uint8_t> in);
  // Closes every client session, deletes every object but the background: "" when nothing but
  // the background stays used, and nothing leased.
  std::string Finish();

  // Sessions the store closed for what they sent, and the most objects seen live at a check:
  // what a run reached.
  uint64_t sessions_refused() const { return sessions_refused_; }
  uint64_t most_objects() const { return most_objects_; }

 private:
  class Peer;
  struct Lease {
    bool held = false;
    uint64_t start = 0, end = 0, cursor = 0, last = 0;  // `last`: where the last frame began
    uint32_t segment = 0;
  };
  static constexpr int kClients = 2;
  static constexpr int kAdmin = kClients;        // a session of messages only: list, delete, status
  static constexpr int kWatcher = kClients + 1;  // at scale: fills, then records what is created
  using Block = std::tuple<uint32_t, uint64_t, uint64_t>;  // segment, offset, bytes

  uint64_t Open(int slot);
  void CloseSlot(int slot);
  // Every open session answers the SegmentsRetired notices it received with SegmentsDropped.
  void DropRetired();
  // What Session::Parse does with one message: an error from Handle closes the session.
  void Deliver(int slot, uint16_t type, flatbuffers::FlatBufferBuilder& fbb);
  void CloseAborted();
  void TakeLease(int slot, uint8_t size_pick);
  // Reads a put's frames from `in`; false when the input ran out.
  bool Put(int slot, std::span<const uint8_t>& in, bool ring);
  wire::FrameLocation FrameAt(const Lease& lease, uint8_t pick, uint8_t offset) const;
  void Delete(uint8_t pick);
  void Pressure();
  std::string Check();
  // The live objects besides the background, and their frames when `frames` is not null: the
  // admin's list of every object (at most kMaxListLimit, which a run never reaches), or at scale
  // a stat of each object the input created.
  std::vector<wire::Guid> List(std::vector<wire::FrameLocation>* frames);
  // At scale: the watcher puts `count` objects of 64 B into leases, then closes and subscribes.
  std::string Fill(uint64_t count);
  // The admin's status: the bytes used and leased; false when none came.
  bool Usage(uint64_t& used, uint64_t& leased);

  // Declared first: it outlives the store, whose timers it holds.
  boost::asio::io_context io_;
  std::unique_ptr<Store> store_;
  std::array<std::unique_ptr<Peer>, kClients + 2> peers_;
  std::array<uint64_t, kClients + 2> sessions_{};
  std::array<Lease, kClients> leases_{};
  uint64_t sessions_refused_ = 0;
  uint64_t most_objects_ = 0;
  uint64_t request_ = 1;
  uint64_t capacity_ = 0;
  std::string broken_;             // why the store or its background could not be made
  std::vector<Block> background_;  // sorted
  uint64_t background_bytes_ = 0;
  std::vector<wire::Guid> created_;  // at scale: what the input's sessions created
};

}  // namespace depot::fuzz

#endif  // DEPOT_FUZZ_LEASE_DRIVER_H_
