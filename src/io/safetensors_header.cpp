// Note [Streaming the header]
// nlohmann::json's DOM costs 23-40 bytes of memory per header byte (a map
// node and a string per key, a vector per array) and keeps the last of two
// equal keys silently. Its SAX interface hands us each event instead; a
// small state machine accepts exactly the safetensors layout and stores
// entries straight into HeaderEntry, and a duplicate or a value of the
// wrong kind is refused where it occurs with a message naming the entry.
// Memory is then a fixed cost per entry rather than per header byte: a
// HeaderEntry (name, dtype, shape) and its name in the duplicate check, a
// few hundred bytes, then the Tensor the loader makes of it. Measured: a
// 98 MB header of 1.38 million one-element entries peaks at 0.97 GB for the
// whole load (`/usr/bin/time -v kiln generate --ckpt` of such a file), about
// 700 bytes per entry, the file's own bytes included; a header of few,
// large tensors costs about its own size.
#include "io/safetensors_header.h"

#include <nlohmann/json.hpp>
#include <set>

#include "kiln/detail/tensor_impl.h"
#include "kiln/error.h"

namespace kiln::io::detail {
namespace {

using json = nlohmann::json;

class HeaderReader {
 public:
  explicit HeaderReader(const char* op) : op_(op) {}
  Header take() { return std::move(header_); }

  // ---- nlohmann's SAX interface; each returns true to go on, and throws on anything unexpected.
  bool null() { return unexpected(); }
  bool boolean(bool) { return unexpected(); }
  bool number_integer(json::number_integer_t) { return unexpected(); }  // only negative integers arrive here
  bool number_float(json::number_float_t, const json::string_t&) { return unexpected(); }
  bool binary(json::binary_t&) { return unexpected(); }

  bool number_unsigned(json::number_unsigned_t v) {
    if (state_ == State::Shape) {
      check(v <= static_cast<uint64_t>(INT64_MAX), op_, "shape of '", entry().name, "' has entry ", v,
            ", which is not a valid size");
      check(entry().shape.size() < kMaxDims, op_, "shape of '", entry().name, "' has over ", kMaxDims,
            " dims (a tensor has at most ", kMaxDims, ")");
      entry().shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (state_ == State::Offsets && offsets_seen_ < 2) {
      (offsets_seen_++ == 0 ? entry().begin : entry().end) = v;
      return true;
    }
    return unexpected();
  }

  bool string(json::string_t& s) {
    if (state_ == State::MetaValue) {
      header_.metadata[meta_key_] = std::move(s);
      state_ = State::Meta;
      return true;
    }
    if (state_ == State::Dtype) {
      entry().dtype = std::move(s);
      state_ = State::Entry;
      return true;
    }
    return unexpected();
  }

  bool start_object(std::size_t) {
    switch (state_) {
      case State::Start: state_ = State::Root; return true;
      case State::MetaStart: state_ = State::Meta; return true;
      case State::EntryStart: state_ = State::Entry; return true;
      default: return unexpected();
    }
  }

  bool key(json::string_t& k) {
    if (state_ == State::Root) {
      if (k == "__metadata__") {
        check(!metadata_seen_, op_, "__metadata__ appears twice");
        metadata_seen_ = true;
        state_ = State::MetaStart;
      } else {
        check(names_.insert(k).second, op_, "tensor '", k, "' appears twice");
        header_.entries.push_back(HeaderEntry{k, {}, {}, 0, 0});
        fields_.clear();
        state_ = State::EntryStart;
      }
      return true;
    }
    if (state_ == State::Meta) {
      check(!header_.metadata.count(k), op_, "__metadata__ key '", k, "' appears twice");
      meta_key_ = std::move(k);
      state_ = State::MetaValue;
      return true;
    }
    check(state_ == State::Entry, op_, "unexpected key '", k, "' in the header");
    check(fields_.insert(k).second, op_, "entry '", entry().name, "' has field '", k, "' twice");
    if (k == "dtype") state_ = State::Dtype;
    else if (k == "shape") state_ = State::ShapeStart;
    else if (k == "data_offsets") state_ = State::OffsetsStart;
    else fail(op_, "entry '", entry().name, "' has unknown field '", k, "'");
    return true;
  }

  bool end_object() {
    if (state_ == State::Meta) {
      state_ = State::Root;
    } else if (state_ == State::Entry) {
      check(fields_.size() == 3, op_, "entry '", entry().name, "' needs dtype, shape and data_offsets");
      state_ = State::Root;
    } else if (state_ == State::Root) {
      state_ = State::Done;
    } else {
      return unexpected();
    }
    return true;
  }

  bool start_array(std::size_t) {
    if (state_ == State::ShapeStart) state_ = State::Shape;
    else if (state_ == State::OffsetsStart) state_ = State::Offsets, offsets_seen_ = 0;
    else return unexpected();
    return true;
  }

  bool end_array() {
    if (state_ == State::Shape || (state_ == State::Offsets && offsets_seen_ == 2)) {
      state_ = State::Entry;
      return true;
    }
    return unexpected();
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    fail(op_, "header is not valid JSON at byte ", position, ": ", e.what());
  }

 private:
  enum class State { Start, Root, MetaStart, Meta, MetaValue, EntryStart, Entry, Dtype, ShapeStart, Shape,
                     OffsetsStart, Offsets, Done };

  HeaderEntry& entry() { return header_.entries.back(); }

  // Says what the header should have had where a value of another kind arrived.
  [[noreturn]] bool unexpected() {
    switch (state_) {
      case State::Start: fail(op_, "header must be a JSON object");
      case State::MetaStart:
      case State::MetaValue:
        fail(op_, "__metadata__ must be an object of strings", state_ == State::MetaValue ? "; the value of '" : "",
             state_ == State::MetaValue ? meta_key_ : "", state_ == State::MetaValue ? "' is not a string" : "");
      case State::EntryStart: fail(op_, "entry '", entry().name, "' must be an object with dtype, shape and data_offsets");
      case State::Dtype: fail(op_, "dtype of '", entry().name, "' is not a string");
      case State::ShapeStart:
      case State::Shape: fail(op_, "shape of '", entry().name, "' must be an array of non-negative integers");
      case State::OffsetsStart:
      case State::Offsets: fail(op_, "data_offsets of '", entry().name, "' must be two non-negative integers");
      default: fail(op_, "unexpected value in the header");
    }
  }

  const char* op_;
  State state_ = State::Start;
  Header header_;
  std::set<std::string> names_;
  std::set<std::string> fields_;  // of the current entry
  std::string meta_key_;
  bool metadata_seen_ = false;
  int offsets_seen_ = 0;
};

}  // namespace

Header read_header(const char* json_text, size_t n, const char* op) {
  // The format's header is a JSON object; refusing any other first byte also
  // refuses a UTF-8 byte-order mark, which the JSON parser would skip.
  check(n > 0 && json_text[0] == '{', op, "header must be a JSON object, starting with '{'");
  HeaderReader reader(op);
  json::sax_parse(json_text, json_text + n, &reader);
  return reader.take();
}

}  // namespace kiln::io::detail
