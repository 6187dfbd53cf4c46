// Crash-safe checkpoints: write a fresh step directory, then commit it by renaming DIR/state.json.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/warning.h"
#include "framework/serialize/safetensors.h"

namespace demi::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kTensorFiles[] = {"model.safetensors", "optimizer.safetensors"};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  DEMI_CHECK(in.good(), "cannot open '", path.string(), "'");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Makes a directory's entries (a new file, a rename) durable, not just the files' contents.
void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some filesystems refuse; the data itself is already synced
  ::fsync(fd);
  ::close(fd);
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

json describe_file(const fs::path& path) {
  const std::string bytes = read_file(path);
  return {{"bytes", bytes.size()}, {"fnv1a64", hex64(fnv1a64(bytes.data(), bytes.size()))}};
}

// Checks that the tensor files of a committed state exist with the recorded size and checksum.
void verify_files(const fs::path& root, const json& state, const std::string& name) {
  const json& record = state.at("checkpoint");
  const fs::path dir = root / record.at("dir").get<std::string>();
  for (const char* file : kTensorFiles) {
    const json& expected = record.at("files").at(file);
    const fs::path path = dir / file;
    DEMI_CHECK(fs::exists(path), name, ": '", path.string(), "' is missing");
    const std::string bytes = read_file(path);
    DEMI_CHECK(bytes.size() == expected.at("bytes").get<uint64_t>(), name, ": '", path.string(), "' has ",
               bytes.size(), " bytes, the checkpoint recorded ", expected.at("bytes").get<uint64_t>(),
               " (truncated or replaced)");
    DEMI_CHECK(hex64(fnv1a64(bytes.data(), bytes.size())) == expected.at("fnv1a64").get<std::string>(), name,
               ": '", path.string(), "' does not match its recorded checksum (corrupted)");
  }
}

Checkpoint load_verified(const fs::path& root, const fs::path& state_path, const StateCheck& check) {
  const std::string name = state_path.string();
  Checkpoint c;
  c.state = parse_checkpoint_state(read_file(state_path), name);
  if (check) check(c.state, name);
  if (!c.state.contains("checkpoint")) {
    // Written before checkpoints were versioned: tensor files beside state.json, no checksums.
    warn("checkpoint '" + name + "' predates checksums; loading it unverified");
    c.dir = root.string();
  } else {
    verify_files(root, c.state, name);
    c.dir = (root / c.state.at("checkpoint").at("dir").get<std::string>()).string();
  }
  c.model = load_safetensors((fs::path(c.dir) / kTensorFiles[0]).string());
  c.optimizer = load_safetensors((fs::path(c.dir) / kTensorFiles[1]).string());
  return c;
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

json parse_checkpoint_state(const std::string& text, const std::string& name) {
  json s;
  try {
    s = json::parse(text);
  } catch (const json::exception& e) {
    DEMI_THROW(name, ": not valid JSON (", e.what(), ")");
  }
  DEMI_CHECK(s.is_object(), name, ": expected a JSON object, got ", s.type_name());
  if (s.contains("checkpoint")) {
    const json& c = s.at("checkpoint");
    DEMI_CHECK(c.is_object(), name, ": \"checkpoint\" must be an object");
    const auto dir = read_field<std::string>(c, "dir", name);
    // Only ever a directory we wrote: never an absolute path or one that climbs out of DIR.
    DEMI_CHECK(dir.rfind("checkpoints/step-", 0) == 0 && dir.find("..") == std::string::npos &&
                   dir.find('/', 12) == std::string::npos,
               name, ": \"checkpoint.dir\" '", dir, "' is not a checkpoints/step-<N> directory");
    DEMI_CHECK(c.contains("files") && c.at("files").is_object(), name, ": \"checkpoint.files\" is missing");
    for (const char* file : kTensorFiles) {
      DEMI_CHECK(c.at("files").contains(file), name, ": \"checkpoint.files\" lacks ", file);
      const json& f = c.at("files").at(file);
      DEMI_CHECK(f.is_object(), name, ": \"checkpoint.files.", file, "\" must be an object");
      read_field<uint64_t>(f, "bytes", name);
      const auto sum = read_field<std::string>(f, "fnv1a64", name);
      DEMI_CHECK(sum.size() == 16 && sum.find_first_not_of("0123456789abcdef") == std::string::npos, name,
                 ": \"checkpoint.files.", file, ".fnv1a64\" is not 16 hex digits");
    }
  }
  return s;
}

void save_checkpoint(const std::string& out_dir, int64_t step, const Checkpoint& checkpoint) {
  DEMI_CHECK(checkpoint.state.is_object(), "save_checkpoint: state must be a JSON object");
  const fs::path root(out_dir);
  const fs::path checkpoints = root / "checkpoints";
  fs::create_directories(checkpoints);
  char base[40];
  std::snprintf(base, sizeof base, "step-%09lld", static_cast<long long>(step));
  std::string name = base;
  for (int k = 1; fs::exists(checkpoints / name); ++k) name = std::string(base) + "-" + std::to_string(k);
  const fs::path dir = checkpoints / name;
  fs::create_directory(dir);
  fsync_directory(checkpoints);

  save_safetensors((dir / kTensorFiles[0]).string(), checkpoint.model, {{"format", "pt"}});
  save_safetensors((dir / kTensorFiles[1]).string(), checkpoint.optimizer);
  json state = checkpoint.state;
  state["checkpoint"] = {{"dir", "checkpoints/" + name},
                         {"step", step},
                         {"files",
                          {{kTensorFiles[0], describe_file(dir / kTensorFiles[0])},
                           {kTensorFiles[1], describe_file(dir / kTensorFiles[1])}}}};
  const std::string text = state.dump(2) + "\n";
  write_file_atomically((dir / "state.json").string(), text);
  fsync_directory(dir);

  std::string previous;  // the committed checkpoint being replaced: kept as the fallback
  try {
    const json old = parse_checkpoint_state(read_file(root / "state.json"), "state.json");
    if (old.contains("checkpoint")) previous = fs::path(old.at("checkpoint").at("dir").get<std::string>()).filename();
  } catch (const Error&) {
  }
  write_file_atomically((root / "state.json").string(), text);  // the commit
  fsync_directory(root);

  // DIR/model.safetensors: the latest weights under a stable name (a hard link, swapped atomically).
  const fs::path link_tmp = root / ".model.safetensors.link";
  std::error_code ec;
  fs::remove(link_tmp, ec);
  fs::create_hard_link(dir / kTensorFiles[0], link_tmp, ec);
  if (!ec) fs::rename(link_tmp, root / "model.safetensors", ec);
  if (ec) fs::copy_file(dir / kTensorFiles[0], root / "model.safetensors", fs::copy_options::overwrite_existing, ec);

  for (const auto& entry : fs::directory_iterator(checkpoints, ec)) {
    const std::string n = entry.path().filename();
    if (n != name && n != previous) fs::remove_all(entry.path(), ec);
  }
}

Checkpoint load_checkpoint(const std::string& out_dir, const StateCheck& check) {
  const fs::path root(out_dir);
  std::vector<std::string> problems;
  if (fs::exists(root / "state.json")) {
    try {
      return load_verified(root, root / "state.json", check);
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  // Fall back to the step directories, newest first (their names sort by step).
  std::vector<fs::path> dirs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root / "checkpoints", ec)) {
    if (fs::exists(entry.path() / "state.json")) dirs.push_back(entry.path());
  }
  std::sort(dirs.rbegin(), dirs.rend());
  for (const fs::path& dir : dirs) {
    try {
      Checkpoint c = load_verified(root, dir / "state.json", check);
      warn("resuming from the older checkpoint '" + dir.string() + "': " +
           (problems.empty() ? std::string("the commit record state.json is missing") : problems.front()));
      return c;
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  DEMI_CHECK(!problems.empty(), "--resume: no checkpoint in '", out_dir, "' (no state.json there)");
  std::string all;
  for (const std::string& p : problems) all += "\n  " + p;
  DEMI_THROW("--resume: no usable checkpoint in '", out_dir, "':", all);
}

}  // namespace demi::train
