// Reading files whole (src/io/files.h): a file that another process changes
// while kiln reads it is an error naming it (Note [Files that change while
// read]); the change is made deterministically between the opening and the
// reading by the loader's test hook.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/files.h"
#include "kiln/io.h"
#include "test_util.h"

namespace kiln::test {
namespace {

class FilesChangingWhileRead : public ::testing::Test {
 protected:
  void TearDown() override { io::detail::set_before_read_hook({}); }
  const std::string path = ::testing::TempDir() + "/changing.safetensors";
};

TEST_F(FilesChangingWhileRead, AShrinkingCheckpointIsAnErrorNamingIt) {
  io::save_safetensors(path, {{"w", randn({1 << 14})}});
  io::detail::set_before_read_hook([&] { ASSERT_EQ(::truncate(path.c_str(), 4096), 0); });
  expect_error([&] { io::load_safetensors(path); }, {path, "shrank while it was read", "only 4096"});
  io::detail::set_before_read_hook({});
  std::filesystem::remove(path);
}

TEST_F(FilesChangingWhileRead, AGrowingFileIsAnErrorNamingIt) {
  io::save_safetensors(path, {{"w", randn({100})}});
  const auto append = [&] { std::ofstream(path, std::ios::app) << "more bytes"; };
  io::detail::set_before_read_hook(append);
  expect_error([&] { io::load_safetensors(path); }, {path, "changed while it was read"});
  expect_error([&] { io::read_file(path); }, {"[read_file]", path, "changed while it was read"});
  // Without a change, the same file reads whole.
  io::detail::set_before_read_hook({});
  const std::string bytes = io::read_file(path);
  EXPECT_EQ(bytes.substr(bytes.size() - 20), "more bytesmore bytes");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kiln::test
