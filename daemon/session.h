// Session is one client connection: it reads framed messages, checks each header and verifies
// each body before the Store sees it, and writes replies (with their fds) without ever blocking
// the loop. A connection that sends a malformed message gets one error reply and is closed; no
// other session notices.
//
// Fair service: a session handles a bounded number of messages per loop turn, and takes the puts
// of its ring that come before them a turn's worth at a time (Store::TakeRingTurn), and then lets
// the others run; it stops reading requests while too many of its replies wait to be written (a
// client that sends without reading only fills its own socket); and a connection that does not
// say hello within the handshake timeout is closed.
//
// Bounded memory: before hello a connection may send only a small message (kPreHelloMaxBody), so
// that an unauthenticated peer cannot make the daemon hold a large buffer; the receive buffer
// grows only as bytes arrive and shrinks after a large message (proto::FrameReader); and the
// replies waiting to be written are bounded in bytes (max_pending_bytes) as well as in count.
#ifndef DEPOT_DAEMON_SESSION_H_
#define DEPOT_DAEMON_SESSION_H_

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "daemon/store.h"
#include "proto/frame_reader.h"

namespace depot {

class Session : public Peer, public std::enable_shared_from_this<Session> {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;

  // The largest body a connection may send before its hello is answered: a hello is tiny.
  static constexpr uint32_t kPreHelloMaxBody = 4096;

  // `on_closed` runs once, after the store forgot the session.
  Session(Socket socket, Store& store, std::function<void(Session*)> on_closed);

  // Records the peer's credentials (ReadPeerCredentials), registers with the store and starts
  // reading.
  void Start(PeerCredentials creds);

  // Closes the connection now; the store drops everything the session held.
  void Close();

  void Send(std::vector<uint8_t> message, std::vector<UniqueFd> fds) override;
  size_t Backlog() const override { return out_.size(); }
  // Reads what the socket holds now and handles it in order as Serve does, except that past the
  // Throttled limit it handles only puts (they have no reply), stopping at the first other
  // message. Nothing while this session is itself handling a message.
  void HandleArrived() override;
  int fd() const override;
  void Abort(const Status& status) override {
    if (!closed_ && !failing_) Fail(status, 0);
  }

 private:
  struct Outbound {
    std::vector<uint8_t> bytes;
    std::vector<UniqueFd> fds;
    size_t bytes_sent = 0;
    size_t fds_sent = 0;
  };

  // Waits until the socket is readable, then reads (ReadNow). The read is not left pending on a
  // buffer, so that HandleArrived may read the socket at any time.
  void Read();
  void ReadNow();
  // Handles buffered messages, up to a turn's worth; then reads more, or comes back next turn.
  void Serve();
  // Handles the next buffered message. False when none is complete (or the session failed).
  bool ParseOne();
  // Too many replies, or too many bytes of them, wait to be written: requests are left unread
  // until they drain.
  bool Throttled() const {
    return out_.size() >= store_.options().max_pending ||
           out_bytes_ >= store_.options().max_pending_bytes;
  }
  void Fail(const Status& status, uint64_t request_id);
  void Flush();

  Socket socket_;
  Store& store_;
  std::function<void(Session*)> on_closed_;
  PeerCredentials creds_;
  SessionId id_ = 0;
  bool closed_ = false;
  bool failing_ = false;  // an error reply is queued; close once it is written
  bool write_waiting_ = false;
  bool paused_ = false;    // Serve stopped because Throttled()
  bool greeted_ = false;   // hello was answered
  bool handling_ = false;  // inside Store::Handle: the frame's body is a view of reader_
  int ring_turns_ = 0;     // turns of its put ring the next request has waited
  proto::FrameReader reader_;
  std::deque<Outbound> out_;
  uint64_t out_bytes_ = 0;  // bytes of out_ not yet written
  boost::asio::steady_timer handshake_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SESSION_H_
