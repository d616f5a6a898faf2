// The cost model's file: a small binary container holding the samples it was
// trained on (so that later updates retrain on them too) and the booster in
// XGBoost's own UBJSON form. Every length read is checked against what is
// left of the file, so a corrupt or truncated file raises kiln::Error.
//
//   "KILNCM01"  u32 version  string extractor  i32 cols
//   u64 samples  { string group  f64 throughput  sample rows }
//   string booster  (empty: untrained)
// where string = u64 length + bytes; numbers are in host byte order. The
// sample rows are, in version 2 (extractor kiln-store-v2):
//   i32 rows  f32[rows * cols]  f32[rows] (counts)      -- rows collapsed
// (kiln-nest-v3's rows are num_earlier_feature_columns() wide) and in
// version 1 (kiln-store-v1, still read):
//   i32 rows  u32 distinct  f32[distinct * cols]  u32[rows] (row -> distinct row)
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cost_model_internal.h"

namespace kiln::tuner::detail {

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'M', '0', '1'};
constexpr uint32_t kVersion = 2;
constexpr uint32_t kLegacyVersion = 1;  // one row per store, read only

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.append(s);
  }
  void put_floats(const std::vector<float>& v) { out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)); }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(std::string bytes, std::string path) : in_(std::move(bytes)), path_(std::move(path)) {}
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string get_string(const char* what) {
    uint64_t n = get<uint64_t>(what);
    need(n, what);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<float> get_floats(uint64_t n, const char* what) {
    KILN_USER_CHECK(n <= (in_.size() - pos_) / sizeof(float)) << corrupt(what);
    std::vector<float> v(n);
    std::memcpy(v.data(), in_.data() + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return v;
  }
  bool at_end() const { return pos_ == in_.size(); }
  size_t remaining() const { return in_.size() - pos_; }
  std::string corrupt(const char* what) const {
    return "cost model file '" + path_ + "' is truncated or corrupt (reading " + what + " at byte " + std::to_string(pos_) +
           "); delete it to start a fresh model";
  }

 private:
  void need(uint64_t n, const char* what) const { KILN_USER_CHECK(n <= in_.size() - pos_) << corrupt(what); }
  std::string in_;
  std::string path_;
  size_t pos_ = 0;
};

void put_rows(Writer& w, const Features& f) {
  Features c = collapse_rows(f);
  w.put<int32_t>(c.rows);
  w.put_floats(c.values);
  w.put_floats(c.counts);
}

Features get_collapsed_rows(Reader& r, int cols) {
  Features f;
  f.cols = cols;
  f.rows = r.get<int32_t>("a sample's row count");
  KILN_USER_CHECK(f.rows >= 0) << r.corrupt("a sample's row count");
  f.values = r.get_floats(static_cast<uint64_t>(f.rows) * static_cast<uint64_t>(cols), "a sample's features");
  f.counts = r.get_floats(static_cast<uint64_t>(f.rows), "a sample's row counts");
  for (float c : f.counts) KILN_USER_CHECK(c >= 1) << r.corrupt("a sample's row counts");
  return f;
}

std::vector<float> get_rows(Reader& r, int rows, int cols) {
  uint32_t distinct = r.get<uint32_t>("a sample's distinct row count");
  std::vector<float> table = r.get_floats(static_cast<uint64_t>(distinct) * static_cast<uint64_t>(cols), "a sample's features");
  // Each row takes a 4-byte index: a row count the file cannot hold is corrupt (and must not allocate).
  KILN_USER_CHECK(static_cast<uint64_t>(rows) <= r.remaining() / sizeof(uint32_t)) << r.corrupt("a sample's row indices");
  std::vector<float> values;
  values.reserve(static_cast<size_t>(rows) * cols);
  for (int i = 0; i < rows; ++i) {
    uint32_t k = r.get<uint32_t>("a sample's row index");
    KILN_USER_CHECK(k < distinct) << r.corrupt("a sample's row index");
    values.insert(values.end(), table.begin() + static_cast<size_t>(k) * cols, table.begin() + static_cast<size_t>(k + 1) * cols);
  }
  return values;
}

}  // namespace

void write_model_file(const std::string& path, const ModelFile& file) {
  Writer w;
  w.bytes().append(kMagic, sizeof(kMagic));
  w.put<uint32_t>(kVersion);
  w.put_string(feature_extractor_name());
  w.put<int32_t>(file.cols);
  w.put<uint64_t>(file.samples.size());
  for (const Sample& s : file.samples) {
    w.put_string(s.group);
    w.put<double>(s.throughput);
    put_rows(w, s.features);
  }
  w.put_string(file.booster);
  // Write to a temporary and rename, so a crash never leaves half a model behind.
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    KILN_USER_CHECK(out.good()) << "cannot write the cost model to '" << tmp << "': check that the directory exists and is writable";
    out.write(w.bytes().data(), static_cast<std::streamsize>(w.bytes().size()));
    KILN_USER_CHECK(out.good()) << "writing the cost model to '" << tmp << "' failed (disk full?)";
  }
  KILN_USER_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0) << "cannot move the cost model into place at '" << path << "'";
}

namespace {

/** Reads the header up to the extractor name; returns the version. */
uint32_t read_header(Reader& r, const std::string& path, std::string* extractor) {
  char magic[sizeof(kMagic)];
  for (char& c : magic) c = r.get<char>("the header");
  KILN_USER_CHECK(std::memcmp(magic, kMagic, sizeof(kMagic)) == 0) << "'" << path << "' is not a kiln cost model file (bad header)";
  uint32_t version = r.get<uint32_t>("the version");
  KILN_USER_CHECK(version == kVersion || version == kLegacyVersion)
      << "cost model file '" << path << "' has version " << version << "; this kiln reads versions " << kLegacyVersion << " and " << kVersion;
  *extractor = r.get_string("the feature extractor name");
  return version;
}

Reader open_model_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_USER_CHECK(in.good()) << "cannot open the cost model file '" << path << "': check the path";
  std::stringstream ss;
  ss << in.rdbuf();
  return Reader(ss.str(), path);
}

}  // namespace

ModelFile read_model_file(const std::string& path) {
  Reader r = open_model_file(path);
  std::string extractor;
  uint32_t version = read_header(r, path, &extractor);
  ModelFile file;
  file.cols = r.get<int32_t>("the column count");
  // Files of earlier extractors hold rows without the intensity columns:
  // version 1 kiln-store-v1 rows (uncollapsed), version 2 kiln-store-v2 or
  // kiln-nest-v3 ones. Their samples load widened (the new columns missing)
  // and the booster, which knew other columns, is dropped: the next update
  // retrains. (The tuner retrains from the DB rather than load such a file:
  // see cost_model_file_extractor.)
  const bool current = version == kVersion && extractor == feature_extractor_name() && file.cols == num_feature_columns();
  const bool earlier = file.cols == num_earlier_feature_columns() &&
                       (version == kVersion ? extractor == previous_feature_extractor_name() || extractor == expanded_feature_extractor_name()
                                            : extractor == legacy_feature_extractor_name());
  KILN_USER_CHECK(current || earlier)
      << "cost model file '" << path << "' was trained on features '" << extractor << "' (" << file.cols << " columns); this kiln extracts '"
      << feature_extractor_name() << "' (" << num_feature_columns() << " columns); delete the file to train a fresh model";
  uint64_t n = r.get<uint64_t>("the sample count");
  for (uint64_t i = 0; i < n; ++i) {
    Sample s;
    s.group = r.get_string("a sample's task");
    s.throughput = r.get<double>("a sample's throughput");
    if (version == kVersion) {
      s.features = get_collapsed_rows(r, file.cols);
    } else {
      s.features.rows = r.get<int32_t>("a sample's row count");
      s.features.cols = file.cols;
      KILN_USER_CHECK(s.features.rows >= 0) << r.corrupt("a sample's row count");
      s.features.values = get_rows(r, s.features.rows, file.cols);
    }
    if (earlier) s.features = widen_earlier_features(s.features);
    file.samples.push_back(std::move(s));
  }
  file.cols = num_feature_columns();
  file.booster = r.get_string("the booster");
  if (earlier) file.booster.clear();
  KILN_USER_CHECK(r.at_end()) << r.corrupt("the end of the file");
  return file;
}

}  // namespace kiln::tuner::detail

namespace kiln::tuner {

std::string cost_model_file_extractor(const std::string& path) {
  detail::Reader r = detail::open_model_file(path);
  std::string extractor;
  detail::read_header(r, path, &extractor);
  return extractor;
}

}  // namespace kiln::tuner
