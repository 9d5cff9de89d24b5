// The README's example: put bytes, get them back zero-copy, write an object in place.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "depot/client.h"

int main() {
  auto client = depot::Client::Connect();  // $DEPOT_SOCKET, else the default socket
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  std::string_view text = "hello, depot";
  depot::Result<depot::Guid> id = client->Put(std::as_bytes(std::span(text)));
  if (!id.ok()) return 1;

  // Any process on the node can do this with the GUID; the view points into shared memory.
  depot::Result<depot::Object> obj = client->Get(*id, std::chrono::milliseconds(500));
  if (!obj.ok()) return 1;
  std::span<const std::byte> view = obj->frame(0);
  std::printf("%s: %.*s\n", id->ToString().c_str(), static_cast<int>(view.size()),
              reinterpret_cast<const char*>(view.data()));

  // Large objects are written in place: two frames, no intermediate buffer.
  depot::CreateOptions options;
  options.name = "two frames";
  auto draft = client->Create({1 << 20, 4096}, options);
  if (!draft.ok()) return 1;
  std::memset(draft->frame(0).data(), 1, draft->frame(0).size());
  std::memset(draft->frame(1).data(), 2, draft->frame(1).size());
  depot::Status sealed = draft->Seal();
  std::printf("sealed %s: %s\n", draft->guid().ToString().c_str(), sealed.ToString().c_str());
  return sealed.ok() ? 0 : 1;
}
