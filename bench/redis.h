// Redis, what depot is compared with: RedisServer starts redis-server (from PATH) on a Unix socket
// in a temporary directory, pinned like depotd (see servers.h); Redis is a connection to it
// through hiredis, the C client most Redis clients build on: each call sends one command and
// waits for its reply, parsed into a redisReply (bulk strings are copied into it). Failures throw
// BenchError.
#ifndef DEPOT_BENCH_REDIS_H_
#define DEPOT_BENCH_REDIS_H_

#include <hiredis.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace depot::bench {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

class Redis {
 public:
  static Redis Connect(const std::string& socket);

  // Sends the command made of `args` and returns its parsed reply; BenchError for a connection
  // failure or an error reply.
  Reply Command(const std::vector<std::string_view>& args);

  void Set(std::string_view key, std::span<const std::byte> value);
  // The value's bytes live in the reply (reply->str, reply->len).
  Reply Get(std::string_view key);
  Reply MGet(const std::vector<std::string>& keys);
  void Del(std::string_view key);
  void FlushAll();
  // Walks every key with SCAN (COUNT `per_call`); returns how many it saw.
  uint64_t ScanAll(uint32_t per_call);
  // One field of INFO ("used_memory", "redis_version").
  std::string Info(std::string_view field);

 private:
  explicit Redis(redisContext* c) : c_(c) {}
  struct ContextDeleter {
    void operator()(redisContext* c) const { redisFree(c); }
  };
  std::unique_ptr<redisContext, ContextDeleter> c_;
};

class RedisServer {
 public:
  // Starts `redis-server --port 0 --unixsocket DIR/redis.sock --save '' --appendonly no` (with
  // limits raised so that a 1 GiB value is accepted) and returns once it answers PING.
  explicit RedisServer(const std::string& dir);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  const std::string& version() const { return version_; }
  static const char* CommandLine();  // for the document

 private:
  std::string socket_;
  std::string version_;
  pid_t pid_ = -1;
};

}  // namespace depot::bench

#endif  // DEPOT_BENCH_REDIS_H_
