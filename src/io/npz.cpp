// NumPy's .npz: a zip archive of .npy members (numpy.savez stores them,
// savez_compressed deflates them), read and written through libzip in
// memory: the file itself is read as one regular file (io/files.h's rules)
// and written atomically like the other writers.
#include <zip.h>

#include <memory>

#include "io/files.h"
#include "io/npy_format.h"
#include "kiln/error.h"
#include "kiln/io.h"

namespace kiln::io {
namespace {

std::string zip_message(zip_error_t* e) { return zip_error_strerror(e); }

struct ArchiveCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
using Archive = std::unique_ptr<zip_t, ArchiveCloser>;

}  // namespace

std::map<std::string, Tensor> load_npz(const std::string& path) {
  const char* op = "load_npz";
  const std::string bytes = read_file(path);
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  check(source != nullptr, op, "'", path, "': ", zip_message(&error));
  Archive archive(zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error));
  if (!archive) {
    zip_source_free(source);
    const std::string why = zip_message(&error);
    zip_error_fini(&error);
    fail(op, "'", path, "' is not a readable zip archive (.npz): ", why);
  }
  zip_error_fini(&error);
  std::map<std::string, Tensor> arrays;
  const zip_int64_t n = zip_get_num_entries(archive.get(), 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    check(zip_stat_index(archive.get(), static_cast<zip_uint64_t>(i), 0, &st) == 0 && (st.valid & ZIP_STAT_NAME) &&
              (st.valid & ZIP_STAT_SIZE),
          op, "'", path, "': member ", i, " cannot be read: ", zip_strerror(archive.get()));
    std::string name = st.name;
    const std::string member = path + "/" + name;
    check(name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0, op, "'", member,
          "' is not a .npy member (an .npz holds only NumPy arrays)");
    // A member's stated size is checked against what inflating gives.
    check(st.size <= (zip_uint64_t{1} << 40), op, "'", member, "' claims ", st.size, " bytes");
    std::string data(static_cast<size_t>(st.size), '\0');
    zip_file_t* f = zip_fopen_index(archive.get(), static_cast<zip_uint64_t>(i), 0);
    check(f != nullptr, op, "'", member, "' cannot be opened: ", zip_strerror(archive.get()));
    const zip_int64_t got = zip_fread(f, data.data(), st.size);
    char extra;
    const bool exact = got == static_cast<zip_int64_t>(st.size) && zip_fread(f, &extra, 1) == 0;
    const std::string why = got < 0 ? zip_file_strerror(f) : "";
    zip_fclose(f);
    check(exact, op, "'", member, "' is damaged", why.empty() ? "" : ": ", why);
    name.resize(name.size() - 4);
    check(!arrays.count(name), op, "'", path, "' holds '", name, "' twice");
    arrays.emplace(name, npy_from_bytes(data, member, op));
  }
  return arrays;
}

void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays, bool compress) {
  const char* op = "save_npz";
  std::vector<std::string> members;  // alive until the archive is written
  for (const auto& [name, t] : arrays) {
    check(!name.empty() && name.find('/') == std::string::npos, op, "array name '", name,
          "' must be non-empty and have no '/'");
    members.push_back(npy_bytes(t, op));
  }
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* out = zip_source_buffer_create(nullptr, 0, 0, &error);
  check(out != nullptr, op, zip_message(&error));
  zip_source_keep(out);  // read back after zip_close
  std::unique_ptr<zip_source_t, decltype(&zip_source_free)> hold(out, zip_source_free);
  zip_t* z = zip_open_from_source(out, ZIP_TRUNCATE, &error);
  check(z != nullptr, op, zip_message(&error));
  size_t k = 0;
  for (const auto& [name, t] : arrays) {
    const std::string& m = members[k++];
    zip_source_t* s = zip_source_buffer(z, m.data(), m.size(), 0);
    const zip_int64_t at = s ? zip_file_add(z, (name + ".npy").c_str(), s, ZIP_FL_ENC_UTF_8) : -1;
    if (at < 0) {
      if (s) zip_source_free(s);
      const std::string why = zip_strerror(z);
      zip_discard(z);
      fail(op, "cannot add '", name, "': ", why);
    }
    zip_set_file_compression(z, static_cast<zip_uint64_t>(at), compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0);
  }
  if (zip_close(z) != 0) {
    const std::string why = zip_strerror(z);
    zip_discard(z);
    fail(op, "cannot write the archive: ", why);
  }
  zip_stat_t st;
  check(zip_source_stat(out, &st) == 0 && zip_source_open(out) == 0, op, "cannot read the archive back");
  std::string bytes(static_cast<size_t>(st.size), '\0');
  const zip_int64_t got = zip_source_read(out, bytes.data(), st.size);
  zip_source_close(out);
  check(got == static_cast<zip_int64_t>(st.size), op, "cannot read the archive back");
  detail::write_atomically(path, op, [&](int fd) { detail::write_all(fd, bytes.data(), bytes.size(), path, op); });
}

}  // namespace kiln::io
