// The readers of other tools' data files: IDX (plain and gzip), CSV and
// .npy, against files written here byte by byte, and their errors.
#include <zlib.h>

#include <cstdio>
#include <fstream>

#include "test_util.h"

namespace kiln::test {
namespace {

std::string temp(const std::string& name) { return ::testing::TempDir() + "/" + name; }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

TEST(DataFiles, IdxPlainAndGzipped) {
  // 2 x 3 uint8 images, as MNIST's files hold them.
  const std::string u8 = std::string("\0\0\x08\x02", 4) + be32(2) + be32(3) + std::string("\x00\x01\x7f\x80\xfe\xff", 6);
  write_bytes(temp("a.idx"), u8);
  write_gzip(temp("a.idx.gz"), u8);
  for (const char* f : {"a.idx", "a.idx.gz"}) {
    const Tensor t = io::load_idx(temp(f));
    EXPECT_EQ(t.dtype(), kUInt8);
    EXPECT_EQ(t.sizes(), (Shape{2, 3}));
    EXPECT_EQ(values(t), (std::vector<double>{0, 1, 127, 128, 254, 255})) << f;
  }
  // Big-endian int32 and float32 elements; a 1-D label file.
  const std::string i32 = std::string("\0\0\x0C\x01", 4) + be32(2) + be32(0xFFFFFFFE) + be32(70000);
  write_bytes(temp("b.idx"), i32);
  EXPECT_EQ(values(io::load_idx(temp("b.idx"))), (std::vector<double>{-2, 70000}));
  uint32_t bits;
  const float f = -1.5f;
  std::memcpy(&bits, &f, 4);
  write_bytes(temp("c.idx"), std::string("\0\0\x0D\x01", 4) + be32(1) + be32(bits));
  EXPECT_EQ(values(io::load_idx(temp("c.idx"))), (std::vector<double>{-1.5}));
  // Errors: bad magic, unknown type, truncated data, a shape larger than the file, not a file.
  write_bytes(temp("bad1"), std::string("\1\0\x08\x01", 4) + be32(1) + "x");
  expect_error([&] { (void)io::load_idx(temp("bad1")); }, {"load_idx", "bad1", "magic"});
  write_bytes(temp("bad2"), std::string("\0\0\x07\x01", 4) + be32(1) + "x");
  expect_error([&] { (void)io::load_idx(temp("bad2")); }, {"load_idx", "type code 0x7"});
  write_bytes(temp("bad3"), u8.substr(0, u8.size() - 1));
  expect_error([&] { (void)io::load_idx(temp("bad3")); }, {"load_idx", "5 bytes", "[2, 3]", "needs 6"});
  write_bytes(temp("bad4"), std::string("\0\0\x08\x03", 4) + be32(0xFFFFFFFF) + be32(0xFFFFFFFF) + be32(0xFFFFFFFF));
  expect_error([&] { (void)io::load_idx(temp("bad4")); }, {"load_idx", "more elements than it holds"});
  write_bytes(temp("bad7"), u8 + "x");
  expect_error([&] { (void)io::load_idx(temp("bad7")); }, {"load_idx", "more than 6 bytes"});
  // A header claiming 2^31 elements over a few bytes fails when the data runs out, allocating nothing first.
  write_gzip(temp("bad8.gz"), std::string("\0\0\x08\x01", 4) + be32(0x80000000u) + "abc");
  expect_error([&] { (void)io::load_idx(temp("bad8.gz")); }, {"load_idx", "holds 3 bytes", "needs 2147483648"});
  write_bytes(temp("bad5"), std::string("\0\0\x08\x02", 4) + be32(1));
  expect_error([&] { (void)io::load_idx(temp("bad5")); }, {"load_idx", "inside its header"});
  write_gzip(temp("bad6.gz"), u8);
  std::string gz;
  {
    std::ifstream in(temp("bad6.gz"), std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  write_bytes(temp("bad6.gz"), gz.substr(0, gz.size() / 2));  // a truncated gzip stream
  expect_error([&] { (void)io::load_idx(temp("bad6.gz")); }, {"load_idx", "bad6.gz"});
  expect_error([&] { (void)io::load_idx(temp("absent.idx")); }, {"absent.idx"});
}

TEST(DataFiles, Csv) {
  write_bytes(temp("a.csv"), "x,y,label\n1, 2.5,0\r\n-3e2,4,1\n\n0.125 ,nan,2\n");
  const Tensor t = io::load_csv(temp("a.csv"), true);
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_EQ(t.sizes(), (Shape{3, 3}));
  const auto v = values(t);
  EXPECT_EQ(std::vector<double>(v.begin(), v.begin() + 7), (std::vector<double>{1, 2.5, 0, -300, 4, 1, 0.125}));
  EXPECT_TRUE(std::isnan(v[7]));
  write_bytes(temp("b.tsv"), "1\t2\n3\t4\n");
  EXPECT_EQ(values(io::load_csv(temp("b.tsv"), false, '\t', kFloat64)), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(io::load_csv(temp("b.tsv"), false, '\t', kInt64).dtype(), kInt64);
  write_bytes(temp("empty.csv"), "");
  EXPECT_EQ(io::load_csv(temp("empty.csv")).sizes(), (Shape{0, 0}));
  write_bytes(temp("ragged.csv"), "1,2\n3\n");
  expect_error([&] { (void)io::load_csv(temp("ragged.csv")); }, {"load_csv", "line 2", "1 fields", "have 2"});
  write_bytes(temp("word.csv"), "1,2\n3,abc\n");
  expect_error([&] { (void)io::load_csv(temp("word.csv")); }, {"load_csv", "line 2 field 2", "\"abc\""});
  write_bytes(temp("blank_field.csv"), "1,,2\n");
  expect_error([&] { (void)io::load_csv(temp("blank_field.csv")); }, {"load_csv", "field 2"});
}

TEST(DataFiles, NpyRoundTripsEveryDtypeAndReadsFortranOrder) {
  manual_seed(60);
  for (DType dt : {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kFloat32, kFloat64}) {
    for (const Shape& shape : {Shape{3, 5}, Shape{7}, Shape{}, Shape{0, 2}, Shape{2, 1, 3}}) {
      const Tensor t = dt == kBool ? gt(randn(shape), wrapped_scalar(0.0)) : (randn(shape) * 50.0).to(dt);
      io::save_npy(temp("t.npy"), t.dim() >= 2 ? t.transpose(0, 1).contiguous().transpose(0, 1) : t);
      const Tensor back = io::load_npy(temp("t.npy"));
      EXPECT_EQ(back.dtype(), dt);
      EXPECT_EQ(back.sizes(), shape);
      EXPECT_EQ(values(back), values(t));
    }
  }
  // The header is NumPy's: version 1.0, the data 64-byte aligned.
  std::string bytes;
  {
    io::save_npy(temp("h.npy"), zeros({2, 3}, kFloat32));
    std::ifstream in(temp("h.npy"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"), std::string::npos);
  EXPECT_EQ((bytes.size() - 24) % 64, 0u);
  // A Fortran-order file, as numpy.save(np.asfortranarray(a)) writes it (version 2.0 header).
  const std::string header = "{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3), }";
  std::string f = std::string("\x93NUMPY\x02\x00", 8);
  f += static_cast<char>(header.size()), f += std::string(3, '\0');
  f += header;
  for (int16_t v : {1, 4, 2, 5, 3, 6}) f.append(reinterpret_cast<const char*>(&v), 2);  // columns of [[1,2,3],[4,5,6]]
  write_bytes(temp("f.npy"), f);
  EXPECT_EQ(values(io::load_npy(temp("f.npy"))), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  // Errors.
  expect_error([] { io::save_npy(temp("x.npy"), zeros({2}, kBFloat16)); }, {"save_npy", "bfloat16"});
  write_bytes(temp("big.npy"), std::string(bytes).replace(bytes.find("'<f4'"), 5, "'>f4'"));
  expect_error([&] { (void)io::load_npy(temp("big.npy")); }, {"load_npy", "'>f4'"});
  write_bytes(temp("short.npy"), bytes.substr(0, bytes.size() - 4));
  expect_error([&] { (void)io::load_npy(temp("short.npy")); }, {"load_npy", "20 bytes", "[2, 3]", "needs 24"});
  write_bytes(temp("nope.npy"), "PK\3\4 not numpy");
  expect_error([&] { (void)io::load_npy(temp("nope.npy")); }, {"load_npy", "not a .npy file"});
  // Headers cut short or malformed at each field (a fuzzer's find: a header ending right after a key's colon).
  for (const std::string cut : {"{'descr': '<f4', 'fortran_order': False, 'shape':", "{'descr':",
                                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", "{'descr': '<f4",
                                "{'descr': '<f4', 'fortran_order': False, 'shape': 6, }"}) {
    std::string h = std::string("\x93NUMPY\x01\x00", 8);
    h += static_cast<char>(cut.size()), h += '\0';
    write_bytes(temp("cut.npy"), h + cut);
    expect_error([&] { (void)io::load_npy(temp("cut.npy")); }, {"load_npy", "cut.npy"});
  }
  // Bool bytes other than 0 and 1 are refused (a fuzzer's find).
  std::string bools = std::string("\x93NUMPY\x01\x00", 8);
  const std::string bool_header = "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }";
  bools += static_cast<char>(bool_header.size()), bools += '\0';
  write_bytes(temp("bools.npy"), bools + bool_header + std::string("\x01\x00\x7d", 3));
  expect_error([&] { (void)io::load_npy(temp("bools.npy")); }, {"load_npy", "bool byte 125", "element 2"});
  std::string huge = bytes;
  huge.replace(huge.find("(2, 3)"), 6, "(9999999999, 9999999999)");
  write_bytes(temp("huge.npy"), huge);
  expect_error([&] { (void)io::load_npy(temp("huge.npy")); }, {"load_npy"});
}

}  // namespace
}  // namespace kiln::test

namespace kiln::test {
namespace {

// Archives written by NumPy 2.4.6 (tests/io/fixtures; numpy.savez stores
// members with zip64 extra fields, savez_compressed deflates them).
TEST(DataFiles, NpzFromNumPyStoredAndDeflated) {
  for (const char* file : {"numpy_savez.npz", "numpy_savez_compressed.npz"}) {
    const auto arrays = io::load_npz(std::string(KILN_TEST_FIXTURES) + "/" + file);
    ASSERT_EQ(arrays.size(), 5u) << file;
    EXPECT_EQ(arrays.at("a").dtype(), kFloat32);
    EXPECT_EQ(arrays.at("a").sizes(), (Shape{2, 3}));
    EXPECT_EQ(values(arrays.at("a")), (std::vector<double>{-1.5, -0.5, 0.5, 1.5, 2.5, 3.5}));
    EXPECT_EQ(arrays.at("b").dtype(), kInt64);  // Fortran order, read back in C order
    EXPECT_EQ(values(arrays.at("b")), (std::vector<double>{1, -2, 7, 3, 4, -9}));
    EXPECT_EQ(arrays.at("c").dtype(), kBool);
    EXPECT_EQ(values(arrays.at("c")), (std::vector<double>{1, 0, 1}));
    EXPECT_EQ(arrays.at("d").dim(), 0);
    EXPECT_EQ(arrays.at("d").item<double>(), 3.25);
    EXPECT_EQ(arrays.at("e").sizes(), (Shape{0, 4}));
  }
}

TEST(DataFiles, NpzRoundTripsAndRefusesBadArchives) {
  manual_seed(5701);
  const std::map<std::string, Tensor> arrays = {{"weights", randn({3, 4})},
                                                {"ids", randint(-5, 5, {7})},
                                                {"strided", randn({4, 6}, kFloat64).t()},
                                                {"half", randn({5}).to(kFloat16)}};
  for (bool compress : {false, true}) {
    io::save_npz(temp("r.npz"), arrays, compress);
    const auto back = io::load_npz(temp("r.npz"));
    ASSERT_EQ(back.size(), arrays.size());
    for (const auto& [name, t] : arrays) {
      EXPECT_EQ(back.at(name).dtype(), t.dtype()) << name;
      EXPECT_EQ(back.at(name).sizes(), t.sizes()) << name;
      EXPECT_EQ(values(back.at(name)), values(t)) << name;
    }
  }
  // Compression shrinks a compressible array.
  io::save_npz(temp("z0.npz"), {{"z", zeros({4096})}}, false);
  io::save_npz(temp("z1.npz"), {{"z", zeros({4096})}}, true);
  EXPECT_LT(io::read_file(temp("z1.npz")).size() * 10, io::read_file(temp("z0.npz")).size());
  expect_error([] { io::save_npz(temp("x.npz"), {{"b", ones({2}, kBFloat16)}}); }, {"[save_npz]", "bfloat16"});
  expect_error([] { io::save_npz(temp("x.npz"), {{"a/b", ones({2})}}); }, {"[save_npz]", "'a/b'"});
  write_bytes(temp("bad.npz"), "PK\x03\x04 not really a zip");
  expect_error([] { io::load_npz(temp("bad.npz")); }, {"[load_npz]", "bad.npz", "not a readable zip archive"});
  // A member that is not .npy, and a damaged member (a byte of the
  // deflated stream flipped: its CRC no longer matches).
  std::string archive = io::read_file(temp("r.npz"));
  const size_t at = archive.find("weights.npy");
  ASSERT_NE(at, std::string::npos);
  std::string renamed = archive;
  for (size_t p = renamed.find("weights.npy"); p != std::string::npos; p = renamed.find("weights.npy", p + 1))
    renamed.replace(p, 11, "weights.txt");
  write_bytes(temp("renamed.npz"), renamed);
  expect_error([] { io::load_npz(temp("renamed.npz")); }, {"[load_npz]", "weights.txt", "not a .npy member"});
  io::save_npz(temp("one.npz"), {{"w", randn({64})}}, false);
  std::string one = io::read_file(temp("one.npz"));
  one[one.find("NUMPY") + 200] ^= 0x55;  // inside the stored data
  write_bytes(temp("damaged.npz"), one);
  expect_error([] { io::load_npz(temp("damaged.npz")); }, {"[load_npz]", "w.npy"});
}

}  // namespace
}  // namespace kiln::test
