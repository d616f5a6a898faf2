/** \file
 * DataType: a scalar kind, a bit width and a vector lane count.
 * `float32x8` is eight float32 lanes. Bool is its own code with 1 bit.
 * Handle is an opaque pointer (the data of a buffer).
 */
#ifndef KILN_IR_DTYPE_H
#define KILN_IR_DTYPE_H

#include <cstdint>
#include <string>

namespace kiln {

class DataType {
 public:
  enum class Code : uint8_t { Int, UInt, Float, BFloat, Bool, Handle };

  constexpr DataType() = default;
  constexpr DataType(Code code, int bits, int lanes = 1) : code_(code), bits_(static_cast<uint8_t>(bits)), lanes_(static_cast<uint16_t>(lanes)) {}

  static constexpr DataType Int(int bits, int lanes = 1) { return {Code::Int, bits, lanes}; }
  static constexpr DataType UInt(int bits, int lanes = 1) { return {Code::UInt, bits, lanes}; }
  static constexpr DataType Float(int bits, int lanes = 1) { return {Code::Float, bits, lanes}; }
  static constexpr DataType BFloat16(int lanes = 1) { return {Code::BFloat, 16, lanes}; }
  static constexpr DataType Bool(int lanes = 1) { return {Code::Bool, 1, lanes}; }
  static constexpr DataType Handle() { return {Code::Handle, 64, 1}; }
  static constexpr DataType Void() { return {Code::Handle, 0, 0}; }

  /** Parses "float32", "int8", "bool", "bfloat16", "float32x8", "handle". Throws kiln::Error. */
  static DataType parse(const std::string& s);

  constexpr Code code() const { return code_; }
  constexpr int bits() const { return bits_; }
  constexpr int lanes() const { return lanes_; }
  constexpr int bytes() const { return (bits_ + 7) / 8; }

  constexpr bool is_int() const { return code_ == Code::Int; }
  constexpr bool is_uint() const { return code_ == Code::UInt; }
  /** Int or UInt (not Bool). */
  constexpr bool is_integer() const { return code_ == Code::Int || code_ == Code::UInt; }
  constexpr bool is_float() const { return code_ == Code::Float || code_ == Code::BFloat; }
  constexpr bool is_bfloat() const { return code_ == Code::BFloat; }
  constexpr bool is_bool() const { return code_ == Code::Bool; }
  constexpr bool is_handle() const { return code_ == Code::Handle && bits_ != 0; }
  constexpr bool is_void() const { return code_ == Code::Handle && bits_ == 0; }
  constexpr bool is_scalar() const { return lanes_ == 1; }
  constexpr bool is_vector() const { return lanes_ > 1; }

  constexpr DataType element_of() const { return {code_, bits_, 1}; }
  constexpr DataType with_lanes(int lanes) const { return {code_, bits_, lanes}; }
  constexpr DataType with_bits(int bits) const { return {code_, bits, lanes_}; }

  constexpr bool operator==(const DataType& o) const { return code_ == o.code_ && bits_ == o.bits_ && lanes_ == o.lanes_; }
  constexpr bool operator!=(const DataType& o) const { return !(*this == o); }

  /** "float32", "int64x4", "bool", "handle". */
  std::string str() const;

 private:
  Code code_ = Code::Handle;
  uint8_t bits_ = 0;
  uint16_t lanes_ = 0;
};

}  // namespace kiln

#endif  // KILN_IR_DTYPE_H
