// safetensors round trips, a file built by hand from the format's spec, and
// every kind of malformed file. Also the tokenizer and dataset split.
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
