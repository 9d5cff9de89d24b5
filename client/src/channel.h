// internal::Channel is a connection's socket to depotd. It frames requests and gives each an id,
// hands each reply to the thread waiting for it (replies may arrive out of order), queues the
// events the daemon pushes, and takes in the fds that travel with replies: a shared segment's
// fd goes to the SegmentMap as soon as it is read (later replies may name that segment without
// an fd), and a dedicated segment's rides with its reply. Retire notices go to the SegmentMap
// too.
//
// It trusts nothing the daemon sends (a process of another user may answer at the socket): each
// fd belongs to the message whose bytes brought it and must be one of the segments that message
// names, each checked with fstat against the size claimed for it; fds no message claims are
// closed, never paired with a later reply. A reply that breaks the protocol is ProtocolError and
// the connection is broken for good.
//
// A child forked after it was made uses none of it: the socket's conversation, its locks and
// its waiting threads are the parent's. Every call there is Disconnected, saying so.
//
// Threads share it. Replies are read by whichever waiting thread holds the reader role (leader
// and followers): a single-threaded caller reads its own reply with no thread hand-off, and a
// thread parked in a long get hands the role on so others' replies still flow.
#ifndef DEPOT_CLIENT_SRC_CHANNEL_H_
#define DEPOT_CLIENT_SRC_CHANNEL_H_

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/src/segment_map.h"
#include "common/fork_generation.h"
#include "common/unique_fd.h"
#include "depot/status.h"
#include "proto/frame_reader.h"
#include "proto/wire.h"

namespace depot::internal {

// One received reply or event, with the fds of the dedicated segments it names.
struct Message {
  proto::Header header{};
  std::vector<uint8_t> body;
  std::vector<SegmentFd> dedicated;
  // A hello reply's: the index (read-only) and this connection's reference slots, when it has
  // them; an index reply's: the index that replaced the last one.
  std::vector<UniqueFd> index_fds;
  uint16_t type() const { return header.type; }
};

class Channel {
 public:
  // Talks over the connected socket `fd` (to the daemon at `path`, for messages). Segments that
  // replies bring go to `segments`, which must outlive the channel.
  Channel(UniqueFd fd, std::string path, SegmentMap& segments);
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Sends a request, after `ahead` (messages that ride along in the same write), and waits for
  // its reply. An ErrorReply becomes its Status; a broken connection is Disconnected.
  Result<Message> Call(proto::MsgType type, flatbuffers::FlatBufferBuilder& fbb,
                       std::vector<uint8_t> ahead);

  // Writes whole messages. `peer_closed` says whether it failed because the daemon hung up.
  Status Send(const std::vector<uint8_t>& bytes, bool* peer_closed = nullptr);

  // The next event pushed by the daemon (after a subscribe), waiting up to `timeout` (negative:
  // no limit). Timeout when none came.
  Result<Message> NextEvent(std::chrono::milliseconds timeout);

  const std::string& path() const { return path_; }
  // The socket, for a watcher to poll for the daemon's hang-up (never to read or write).
  int fd() const { return fd_.get(); }
  // Ends the conversation: a daemon still there closes the session and drops what it held.
  void Shutdown() { ::shutdown(fd_.get(), SHUT_RDWR); }

  // Whether this process is a child forked since the channel was made; and what its calls say
  // there.
  bool forked() const { return made_.forked(); }
  Status ForkedError() const;

  // A reply broke the protocol in a way only its reader could see (a get answered for other
  // GUIDs, say): the connection is unusable from now on. Returns `why`.
  Status Break(const Status& why);

 private:
  struct Slot {
    bool done = false;
    Status status;
    Message message;
  };

  Status Wait(uint64_t id, Slot& slot);
  // Reads until at least one message has been dispatched. Called by the reader only. With a
  // deadline, Timeout when nothing arrives before it.
  Status ReadSome(std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);
  // Hands on a whole message, whose last byte is at stream offset `end` - 1.
  Status Dispatch(const proto::Header& h, std::span<const uint8_t> body, uint64_t end);
  void Fail(const Status& st);  // with mu_ held

  ForkMark made_;
  UniqueFd fd_;
  std::string path_;
  SegmentMap& segments_;
  std::atomic<uint64_t> next_id_{1};

  std::mutex send_mu_;

  std::mutex mu_;  // guards everything below but the reader state
  ParentOwned<std::condition_variable> cv_;
  bool reading_ = false;
  Status broken_;
  std::unordered_map<uint64_t, Slot*> pending_;
  std::deque<Message> events_;

  // Reader state: touched only by the thread holding the reader role.
  proto::FrameReader reader_;
  uint64_t received_ = 0;  // stream bytes read
  uint64_t taken_ = 0;     // stream offset of the next message
  // Fds received, each with the stream offset of the last byte of the read that brought it: the
  // kernel ends a read with the bytes that carried fds, so that byte is in the fds' message.
  std::deque<std::pair<uint64_t, UniqueFd>> fds_;
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_CHANNEL_H_
