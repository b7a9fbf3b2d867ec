// temp_dir.h -- a test's temporary directory: made under $TMPDIR (else /tmp) as fa_<tag>_XXXXXX and removed with
// everything in it when the object goes, permissions restored first (for tests that take them away). ctest points
// $TMPDIR at a folder of its own and fails its last test when an fa_* entry is left there (tests/CMakeLists.txt).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace fa::test {

// Where temporary files go: $TMPDIR when set and non-empty, else /tmp.
inline std::string temp_root() {
  const char* t = std::getenv("TMPDIR");
  return t != nullptr && *t != '\0' ? std::string(t) : std::string("/tmp");
}

class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    std::string tmpl = temp_root() + "/fa_" + tag + "_XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
    else ADD_FAILURE() << "mkdtemp(" << tmpl << ") failed";
  }
  ~TempDir() {
    if (path_.empty()) return;
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto it = fs::recursive_directory_iterator(path_, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      std::error_code e2;
      if (it->is_directory(e2)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, e2);
    }
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;  // "" when it could not be made (the test has failed)
};

}  // namespace fa::test
