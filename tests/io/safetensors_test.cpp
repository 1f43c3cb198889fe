// safetensors round trips, a file built by hand from the format's spec, and
// every kind of malformed file. Also the tokenizer and dataset split.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/io.h"
#include "test_util.h"

namespace kiln::test {
namespace {

std::string header_bytes(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json + data;
}

TEST(Safetensors, RoundTripsEveryDTypeAndMetadata) {
  const std::string path = ::testing::TempDir() + "/all.safetensors";
  nn::StateDict sd;
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = DType(i);
    sd.emplace(std::string("t_") + dtype_name(t), (randn({3, 5}, kFloat64) * 4).to(t));
  }
  sd.emplace("empty", zeros({0, 4}));
  sd.emplace("scalar", scalar_tensor(2.5));
  sd.emplace("strided", arange(12, kFloat32).view({3, 4}).t());
  io::save_safetensors(path, sd, {{"step", "42"}});
  auto f = io::load_safetensors(path);
  EXPECT_EQ(f.metadata.at("step"), "42");
  ASSERT_EQ(f.tensors.size(), sd.size());
  for (auto& [k, v] : sd) {
    EXPECT_EQ(f.tensors.at(k).dtype(), v.dtype()) << k;
    EXPECT_EQ(f.tensors.at(k).sizes(), v.sizes()) << k;
    EXPECT_EQ(values(f.tensors.at(k)), values(v)) << k;
  }
  // No temporary file is left beside the checkpoint.
  for (auto& e : std::filesystem::directory_iterator(::testing::TempDir()))
    EXPECT_EQ(e.path().string().find("all.safetensors.tmp"), std::string::npos);
  // Loaded tensors can be modified without touching the file.
  f.tensors.at("t_float32").fill_(0);
  EXPECT_EQ(values(io::load_safetensors(path).tensors.at("t_float32")), values(sd.at("t_float32")));
}

TEST(Safetensors, WrittenLayoutFollowsTheSpec) {
  const std::string path = ::testing::TempDir() + "/layout.safetensors";
  io::save_safetensors(path, {{"a", tensor<float>({1, 2})}});
  const std::string bytes = io::read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);  // data starts 8-byte aligned
  EXPECT_EQ(bytes.size(), 8 + n + 8);
  EXPECT_EQ(bytes[8], '{');
  float v[2];
  std::memcpy(v, bytes.data() + 8 + n, 8);
  EXPECT_EQ(v[1], 2.0f);
}

TEST(Safetensors, LoadsAFileBuiltByHand) {
  // Little-endian int16 [1, -2] and a bf16 [1.0], then a float64 [3.5], as another writer would lay them out.
  std::string data;
  const int16_t i16[2] = {1, -2};
  data.append(reinterpret_cast<const char*>(i16), 4);
  const uint16_t bf = 0x3f80;
  data.append(reinterpret_cast<const char*>(&bf), 2);
  data.append(2, '\0');
  const double d = 3.5;
  data.append(reinterpret_cast<const char*>(&d), 8);
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},)"
      R"("pad":{"dtype":"U8","shape":[2],"data_offsets":[6,8]},)"
      R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]},"d":{"dtype":"F64","shape":[1,1],"data_offsets":[8,16]}})";
  auto f = io::parse_safetensors(header_bytes(json, data));
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(values(f.tensors.at("x")), std::vector<double>({1, -2}));
  EXPECT_EQ(values(f.tensors.at("b")), std::vector<double>({1}));
  EXPECT_EQ(f.tensors.at("d").sizes(), Shape({1, 1}));
  EXPECT_EQ(f.tensors.at("d").item<double>(), 3.5);
}

TEST(Safetensors, MalformedFilesAreErrors) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  EXPECT_NO_THROW(io::parse_safetensors(header_bytes(ok, data)));
  expect_error([] { io::parse_safetensors("abc"); }, {"[safetensors]", "too short"});
  expect_error([&] { io::parse_safetensors(header_bytes(ok, data).substr(0, 20)); }, {"[safetensors]", "header length"});
  expect_error([&] { io::parse_safetensors(header_bytes(ok, data.substr(0, 4))); }, {"[safetensors]", "outside"});
  expect_error([&] { io::parse_safetensors(header_bytes("{not json", data)); }, {"[safetensors]", "not valid JSON"});
  expect_error([&] { io::parse_safetensors(header_bytes(R"([1, 2])", data)); }, {"[safetensors]", "JSON object"});
  expect_error([&] { io::parse_safetensors(header_bytes(R"({"a":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", data)); },
               {"[safetensors]", "unknown dtype 'F17'"});
  expect_error([&] { io::parse_safetensors(header_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data)); },
               {"[safetensors]", "need 12"});
  expect_error([&] { io::parse_safetensors(header_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data)); },
               {"[safetensors]", "negative"});
  expect_error([&] {
    io::parse_safetensors(header_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", data));
  }, {"[safetensors]", "overlap"});
  expect_error([&] { io::parse_safetensors(header_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data)); },
               {"[safetensors]", "hole"});
  expect_error([&] { io::parse_safetensors(header_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data)); },
               {"[safetensors]", "trailing"});
  expect_error([&] { io::parse_safetensors(header_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", data)); },
               {"[safetensors]", "data_offsets"});
  expect_error([&] { io::parse_safetensors(header_bytes(R"({"__metadata__":{"k":1}})", "")); },
               {"[safetensors]", "not a string"});
  expect_error([] { io::load_safetensors("/nonexistent/x.safetensors"); }, {"[safetensors]", "cannot open"});
}

// The header and data of a file, written to a temporary path for the mapped loader.
std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Both readers (from memory, and the file mapping) refuse `bytes` with every needle.
void expect_both_refuse(const std::string& bytes, const std::vector<std::string>& needles) {
  expect_error([&] { io::parse_safetensors(bytes); }, needles);
  const std::string path = write_temp("refused.safetensors", bytes);
  expect_error([&] { io::load_safetensors(path); }, needles);
}

TEST(Safetensors, SizesThatOverflowAreRefused) {
  // The 80-byte file whose 2^62 float32 elements wrapped to 0 bytes and loaded.
  const std::string f80 = header_bytes(R"({"x":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", "");
  ASSERT_EQ(f80.size(), 80u);
  expect_both_refuse(f80, {"[safetensors]", "[4611686018427387904]", "float32", "bytes"});
  expect_both_refuse(header_bytes(R"({"x":{"dtype":"U8","shape":[1099511627776,1099511627776],"data_offsets":[0,0]}})", ""),
                     {"[safetensors]", "[1099511627776, 1099511627776]", "int64"});
  // Entries at or above 2^63 are no int64 (the mapped path used to read them as negative sizes).
  expect_both_refuse(header_bytes(R"({"x":{"dtype":"U8","shape":[9223372036854775808, 0],"data_offsets":[0,0]}})", ""),
                     {"[safetensors]", "9223372036854775808", "not a valid size"});
  expect_both_refuse(header_bytes(R"({"x":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}})", ""),
                     {"[safetensors]", "shape of 'x'"});
  // No elements, but strides past int64: refused naming the tensor (the
  // tensor's own check named only "[empty]").
  expect_both_refuse(
      header_bytes(R"({"x":{"dtype":"U8","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0]}})", ""),
      {"[safetensors]", "'x': shape [0, 1099511627776, 1099511627776] has strides beyond int64"});
  // At most 64 dims, refused while the header is read (a header of 40
  // million dims was accepted).
  std::string dims = "1";
  for (int d = 1; d < 65; ++d) dims += ",1";
  expect_both_refuse(
      header_bytes(R"({"x":{"dtype":"U8","shape":[)" + dims + R"(],"data_offsets":[0,1]}})", std::string(1, '\0')),
      {"[safetensors]", "shape of 'x' has over 64 dims"});
}

TEST(Safetensors, RefusesWhatTheFormatForbids) {
  const std::string data(8, '\0');
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expect_both_refuse(header_bytes("{" + a + R"(,"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", data),
                     {"[safetensors]", "tensor 'a' appears twice"});
  expect_both_refuse(header_bytes(R"({"__metadata__":{"k":"1"},"__metadata__":{"k":"2"},)" + a + "}", data),
                     {"[safetensors]", "__metadata__ appears twice"});
  expect_both_refuse(header_bytes(R"({"__metadata__":{"k":"1","k":"2"},)" + a + "}", data),
                     {"[safetensors]", "key 'k' appears twice"});
  expect_both_refuse(header_bytes(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
                     {"[safetensors]", "field 'dtype' twice"});
  expect_both_refuse(header_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", data),
                     {"[safetensors]", "unknown field 'x'"});
  expect_both_refuse(header_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", data),
                     {"[safetensors]", "two non-negative integers"});
  expect_both_refuse(header_bytes(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", data),
                     {"[safetensors]", "shape of 'a'"});
  expect_both_refuse(header_bytes("\xEF\xBB\xBF{" + a + "}", data), {"[safetensors]", "starting with '{'"});
  // BOOL bytes other than 0 and 1.
  expect_both_refuse(header_bytes(R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\1\0\2", 3)),
                     {"[safetensors]", "BOOL tensor 'b'", "byte 2 at element 2"});
  EXPECT_EQ(values(io::parse_safetensors(header_bytes(R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                                                      std::string("\1\0\1", 3))).tensors.at("b")),
            std::vector<double>({1, 0, 1}));
  // A header length over the reference implementation's 100 MB cap, before the file size is even compared.
  std::string huge(16, '\0');
  const uint64_t n = 100'000'001;
  for (int i = 0; i < 8; ++i) huge[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  expect_both_refuse(huge, {"[safetensors]", "100000001", "limit"});
}

TEST(Safetensors, OnlyRegularFilesAreRead) {
  const std::string dir = ::testing::TempDir() + "/a_directory";
  std::filesystem::create_directories(dir);
  expect_error([&] { io::load_safetensors(dir); }, {"[safetensors]", "is a directory"});
  expect_error([&] { io::read_file(dir); }, {"[read_file]", "is a directory"});
  const std::string fifo = ::testing::TempDir() + "/a_fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Without a writer, opening a FIFO used to block forever.
  expect_error([&] { io::load_safetensors(fifo); }, {"[safetensors]", "is a FIFO"});
  expect_error([&] { io::read_file(fifo); }, {"[read_file]", "is a FIFO"});
  std::filesystem::remove(fifo);
}

TEST(Safetensors, SavesRemoveTemporariesOfDeadWritersOnly) {
  const std::string path = ::testing::TempDir() + "/tmpclean.safetensors";
  // A pid that has run and ended: a child that exited and was reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = path + ".tmp." + std::to_string(child) + ".1234";
  const std::string live = path + ".tmp." + std::to_string(::getpid()) + ".5678";
  const std::string legacy = path + ".tmp." + std::to_string(child);  // the name before the random suffix
  const std::string other = path + ".tmpx." + std::to_string(child) + ".1";
  for (const auto& p : {dead, legacy, live, other}) std::ofstream(p) << "partial";
  io::save_safetensors(path, {{"a", ones({2})}});
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_FALSE(std::filesystem::exists(legacy));
  EXPECT_TRUE(std::filesystem::exists(live));   // maybe a save in progress
  EXPECT_TRUE(std::filesystem::exists(other));  // not one of ours
  EXPECT_EQ(values(io::load_safetensors(path).tensors.at("a")), std::vector<double>({1, 1}));
  for (const auto& p : {live, other}) std::filesystem::remove(p);
}

// Note [Files that change while read]: a loaded checkpoint owns its bytes.
// When the loader mapped the file, truncating it in place (as `truncate` or
// a `cp` over it does) made the next read of a lost page a SIGBUS.
TEST(Safetensors, ALoadedCheckpointSurvivesItsFileShrinking) {
  const std::string path = ::testing::TempDir() + "/shrinks.safetensors";
  const Tensor w = randn({1 << 16}), b = randn({7});  // 256 KiB: many pages
  io::save_safetensors(path, {{"w", w}, {"b", b}});
  const io::SafetensorsFile loaded = io::load_safetensors(path);
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  expect_close(loaded.tensors.at("w"), values(w), 0, 0, "w after the file shrank");
  expect_close(loaded.tensors.at("b"), values(b), 0, 0, "b after the file shrank");
  std::filesystem::remove(path);
}

TEST(Safetensors, ASaveKeepsTheReplacedFilesModeAndANewOneTheUmask) {
  // A checkpoint made private stays private when a save replaces it (it
  // once came back 0644: the temporary's fixed mode, renamed over it).
  const std::string path = ::testing::TempDir() + "/private.safetensors";
  std::filesystem::remove(path);
  const mode_t saved_umask = ::umask(077);
  io::save_safetensors(path, {{"a", ones({2})}});
  ::umask(saved_umask);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "a new file: 0666 less the umask 077";
  for (const mode_t mode : {0600, 0640, 0604, 0660}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    io::save_safetensors(path, {{"a", ones({3})}});
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, mode);
    EXPECT_EQ(values(io::load_safetensors(path).tensors.at("a")), std::vector<double>({1, 1, 1}));
  }
  std::filesystem::remove(path);
}

TEST(Safetensors, ASymlinkBesideTheCheckpointIsNeverFollowed) {
  // Whatever names an attacker plants, the save creates its own new file
  // (O_EXCL | O_NOFOLLOW) and the target of a planted link is untouched.
  const std::string path = ::testing::TempDir() + "/linked.safetensors";
  const std::string victim = ::testing::TempDir() + "/victim.txt";
  std::ofstream(victim) << "precious";
  for (int i = 0; i < 64; ++i) {
    const std::string planted = path + ".tmp." + std::to_string(::getpid() + i);
    std::filesystem::remove(planted);
    std::filesystem::create_symlink(victim, planted);
  }
  io::save_safetensors(path, {{"a", ones({2})}});
  EXPECT_EQ(io::read_file(victim), "precious");
  for (int i = 0; i < 64; ++i) std::filesystem::remove(path + ".tmp." + std::to_string(::getpid() + i));
}

TEST(Text, TokenizerRoundTripsAndDatasetSplitsByDocument) {
  const std::string s = "h\xc3\xa9llo\n";
  EXPECT_EQ(io::decode(io::encode(s)), s);
  expect_error([] { io::decode({300}); }, {"[decode]", "300"});
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "fortune number " + std::to_string(i) + " is here\n%\n";
  corpus += "fortune number 7 is here\n%\n";  // a verbatim duplicate
  io::TextDataset ds(corpus, 0.2, 1);
  EXPECT_EQ(ds.duplicates_removed(), 1);
  int64_t total = 0;
  for (int i = 0; i < 50; ++i) total += static_cast<int64_t>(("fortune number " + std::to_string(i) + " is here\n").size());
  EXPECT_EQ(ds.train_tokens() + ds.val_tokens(), total);
  EXPECT_GT(ds.val_tokens(), 0);
  auto [x, y] = ds.batch(false, 4, 16);
  EXPECT_EQ(x.sizes(), Shape({4, 16}));
  EXPECT_EQ(values(x.slice(1, 1)), values(y.slice(1, 0, 15)));  // y is x shifted by one
}

}  // namespace
}  // namespace kiln::test

namespace kiln::test {
namespace {

// Every validation window lies in text that training never saw.
void expect_disjoint(const io::TextDataset& ds, const std::string& train_text_marker, int64_t context) {
  for (int i = 0; i < 20; ++i) {
    auto [x, y] = ds.batch(true, 4, context);
    const std::string window = io::decode(std::vector<int64_t>(x.data_ptr<int64_t>(), x.data_ptr<int64_t>() + context));
    EXPECT_EQ(window.find(train_text_marker), std::string::npos) << window;
  }
}

TEST(Text, APlainTextTrainsSplitByPosition) {
  // One document without separator lines (a licence, a book): its last tenth is validation.
  std::string text;
  for (int i = 0; i < 400; ++i) text += "line " + std::to_string(i) + " of a plain text file\n";
  io::TextDataset ds(text, 0.1, 0);
  EXPECT_TRUE(ds.split_by_position());
  EXPECT_EQ(ds.documents(), 1);
  EXPECT_EQ(ds.train_tokens() + ds.val_tokens(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(ds.val_tokens(), static_cast<int64_t>(text.size() / 10));
  expect_disjoint(ds, "line 100 ", 32);
  // The validation part is exactly the tail.
  const std::string tail = text.substr(text.size() - static_cast<size_t>(ds.val_tokens()));
  auto [x, y] = ds.batch(true, 1, 16);
  const std::string w = io::decode(std::vector<int64_t>(x.data_ptr<int64_t>(), x.data_ptr<int64_t>() + 16));
  EXPECT_NE(tail.find(w), std::string::npos);
}

TEST(Text, SeparatorsFewDocumentsAndDuplicates) {
  // A custom separator with three documents (one a duplicate): split by position, duplicates removed.
  std::string text;
  for (int d = 0; d < 2; ++d) {
    for (int i = 0; i < 100; ++i) text += "doc " + std::to_string(d) + " sentence " + std::to_string(i) + "\n";
    text += "=====\n";
  }
  text += text.substr(0, text.find("=====\n") + 6);  // document 0 again
  io::TextDataset ds(text, 0.1, 0, "=====");
  EXPECT_EQ(ds.documents(), 2);
  EXPECT_EQ(ds.duplicates_removed(), 1);
  EXPECT_TRUE(ds.split_by_position());
  // Without the separator flag it is one document holding the "=====" lines.
  EXPECT_EQ(io::TextDataset(text, 0.1, 0).documents(), 1);
  // "%" lines are found without being asked for.
  EXPECT_EQ(io::TextDataset("a\n%\nb\n%\nc\n", 0.1, 0).documents(), 3);
  expect_error([] { io::TextDataset("%\n%\n", 0.1, 0); }, {"[TextDataset]", "no document"});
  expect_error([] { io::TextDataset("", 0.1, 0); }, {"[TextDataset]", "no document"});
}

}  // namespace
}  // namespace kiln::test
