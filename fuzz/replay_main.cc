// Runs a fuzz target's entry point over files, without libFuzzer: how the seed corpus and every
// regression input run in the ordinary builds (ctest), the sanitizer builds included. Each
// argument is a file or a directory of files (names starting with '.' or README are skipped).
// A finding aborts, as it would under the fuzzer.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool Replay(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return false;
  }
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replaying %s (%zu bytes)\n", path.c_str(), data.size());
  LLVMFuzzerTestOneInput(data.data(), data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    fs::path arg(argv[i]);
    std::vector<fs::path> files;
    if (fs::is_directory(arg)) {
      for (const auto& e : fs::directory_iterator(arg)) {
        std::string name = e.path().filename().string();
        if (e.is_regular_file() && !name.starts_with(".") && !name.starts_with("README")) {
          files.push_back(e.path());
        }
      }
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(arg);
    }
    for (const auto& f : files) {
      if (!Replay(f)) return 1;
      ++count;
    }
  }
  std::fprintf(stderr, "%zu inputs replayed without a finding\n", count);
  return count > 0 ? 0 : 1;
}
