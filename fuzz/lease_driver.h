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
//                           it: memory runs short and idle leases are taken back
//                        5: the slot's session closes
//                        6: timers run (ring polls), then every invariant is checked
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
#include <vector>

#include "common/shared_mapping.h"
#include "daemon/store.h"

namespace depot::fuzz {

class LeaseDriver {
 public:
  LeaseDriver();
  ~LeaseDriver();

  // Runs the operations of `in`; "" or the first invariant found broken.
  std::string Run(std::span<const uint8_t> in);
  // Closes every session, deletes every object: "" when nothing stays used or leased.
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
  static constexpr int kAdmin = kClients;  // a session of messages only: list, delete, status

  uint64_t Open(int slot);
  void CloseSlot(int slot);
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
  // The admin's list of every object (at most kMaxListLimit, which a run never reaches).
  std::vector<wire::Guid> List(std::vector<wire::FrameLocation>* frames);

  // Declared first: it outlives the store, whose timers it holds.
  boost::asio::io_context io_;
  std::unique_ptr<Store> store_;
  std::array<std::unique_ptr<Peer>, kClients + 1> peers_;
  std::array<uint64_t, kClients + 1> sessions_{};
  std::array<Lease, kClients> leases_{};
  uint64_t sessions_refused_ = 0;
  uint64_t most_objects_ = 0;
  uint64_t request_ = 1;
};

}  // namespace depot::fuzz

#endif  // DEPOT_FUZZ_LEASE_DRIVER_H_
