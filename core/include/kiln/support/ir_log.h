/** \file
 * The IR logger of every pipeline: the loop passes (te::lower), the GPU
 * passes (lower_gpu) and the graph passes (graph::optimize).
 *
 * KILN_DUMP_IR is read once per process: unset, empty or "0" prints nothing;
 * "1" prints the IR after every pass; any other value is a pass name, and
 * only the IR after passes of that name is printed (KILN_DUMP_IR=fuse_ops).
 * Each pass is printed to stderr as "// after NAME (T ms)" and its IR, or
 * "(unchanged)" when the pass returned its input.
 */
#ifndef KILN_SUPPORT_IR_LOG_H
#define KILN_SUPPORT_IR_LOG_H

#include <chrono>
#include <string>

namespace kiln {

/** What KILN_DUMP_IR asks for (read on first use, then kept). */
struct IrDumpSetting {
  bool on = false;   ///< print at all
  std::string only;  ///< a pass name to print alone; empty: every pass
};
const IrDumpSetting& ir_dump_setting();

/** One pipeline's logger. */
class IrLog {
 public:
  /** `force`: print even without KILN_DUMP_IR (a pipeline's dump option); its pass filter still applies. */
  explicit IrLog(bool force = false);

  /** Whether the IR after a pass named `pass` is printed. */
  bool wants(const std::string& pass) const { return on_ && (only_.empty() || only_ == pass); }

  /** Prints "// WHAT" and `text()` (an input, before any pass) when every pass is printed. */
  template <typename Text>
  void heading(const std::string& what, Text&& text) const {
    if (on_ && only_.empty()) print(what, text());
  }

  /**
   * Runs `pass()` (returning the new IR), times it, and when `name` is wanted
   * prints it with `text(out)`: the IR as text, or "" for an unchanged IR.
   */
  template <typename Pass, typename Text>
  auto run(const std::string& name, Pass&& pass, Text&& text) -> decltype(pass()) {
    auto t0 = std::chrono::steady_clock::now();
    auto out = pass();
    if (wants(name)) after(name, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), text(out));
    return out;
  }

 private:
  void print(const std::string& what, const std::string& ir) const;
  void after(const std::string& name, double ms, const std::string& ir) const;
  bool on_;
  std::string only_;
};

}  // namespace kiln

#endif  // KILN_SUPPORT_IR_LOG_H
