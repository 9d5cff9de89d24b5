#include "bench/redis.h"

#include <fmt/format.h>

#include <algorithm>

#include "bench/harness.h"
#include "bench/servers.h"

namespace depot::bench {

Redis Redis::Connect(const std::string& socket) {
  redisContext* c = redisConnectUnix(socket.c_str());
  if (c == nullptr || c->err) {
    std::string why = c ? c->errstr : "out of memory";
    if (c) redisFree(c);
    throw BenchError(fmt::format("cannot connect to redis at {}: {}", socket, why));
  }
  return Redis(c);
}

Reply Redis::Command(const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  Reply r(static_cast<redisReply*>(
      redisCommandArgv(c_.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
  if (!r) throw BenchError(fmt::format("redis {}: {}", args.front(), c_->errstr));
  if (r->type == REDIS_REPLY_ERROR) {
    throw BenchError(fmt::format("redis {}: {}", args.front(), std::string(r->str, r->len)));
  }
  return r;
}

void Redis::Set(std::string_view key, std::span<const std::byte> value) {
  Command({"SET", key, {reinterpret_cast<const char*>(value.data()), value.size()}});
}

Reply Redis::Get(std::string_view key) {
  Reply r = Command({"GET", key});
  if (r->type != REDIS_REPLY_STRING) throw BenchError(fmt::format("redis GET {}: no value", key));
  return r;
}

Reply Redis::MGet(const std::vector<std::string>& keys) {
  std::vector<std::string_view> args{"MGET"};
  for (const auto& k : keys) args.push_back(k);
  Reply r = Command(args);
  if (r->type != REDIS_REPLY_ARRAY || r->elements != keys.size()) {
    throw BenchError("redis MGET: unexpected reply");
  }
  return r;
}

void Redis::Del(std::string_view key) { Command({"DEL", key}); }

void Redis::FlushAll() { Command({"FLUSHALL", "SYNC"}); }

uint64_t Redis::ScanAll(uint32_t per_call) {
  std::string cursor = "0", count = std::to_string(per_call);
  uint64_t seen = 0;
  do {
    Reply r = Command({"SCAN", cursor, "COUNT", count});
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) throw BenchError("redis SCAN: bad reply");
    cursor.assign(r->element[0]->str, r->element[0]->len);
    seen += r->element[1]->elements;
  } while (cursor != "0");
  return seen;
}

std::string Redis::Info(std::string_view field) {
  Reply r = Command({"INFO"});
  std::string_view text(r->str, r->len);
  std::string prefix = std::string(field) + ":";
  size_t at = text.find(prefix);
  if (at == std::string_view::npos) throw BenchError(fmt::format("redis INFO has no {}", field));
  size_t end = text.find("\r\n", at);
  return std::string(text.substr(at + prefix.size(), end - at - prefix.size()));
}

const char* RedisServer::CommandLine() {
  return "redis-server --port 0 --unixsocket DIR/redis.sock --save '' --appendonly no "
         "--proto-max-bulk-len 2gb --client-query-buffer-limit 2gb";
}

RedisServer::RedisServer(const std::string& dir) : socket_(dir + "/redis.sock") {
  std::string log = dir + "/redis.log";
  pid_ = LaunchServer({"redis-server", "--port", "0", "--unixsocket", socket_, "--unixsocketperm",
                       "700", "--save", "", "--appendonly", "no", "--proto-max-bulk-len", "2gb",
                       "--client-query-buffer-limit", "2gb", "--dir", dir, "--logfile", log},
                      log);
  AwaitServer(pid_, "redis-server", log, [&] {
    redisContext* c = redisConnectUnix(socket_.c_str());
    bool ok = c != nullptr && c->err == 0;
    if (c) redisFree(c);
    return ok;
  });
  version_ = Redis::Connect(socket_).Info("redis_version");
}

RedisServer::~RedisServer() { StopServer(pid_); }

}  // namespace depot::bench
