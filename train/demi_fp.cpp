// demi-fp VALUE... [--scale S]: prints what fp32, fp16 and bf16 store for each value, to see at a
// glance whether a gradient underflows in fp16 and what loss scaling does about it.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "train/fp_inspect.h"

namespace {

constexpr const char* kFooter = R"(Columns:
  sign exponent mantissa  the stored bits (fp16's 5 exponent bits are padded to line up)
  stored                  the value the format holds, shortest text that reads back exactly
  rel. error              |stored - value| / |value|
  verdict                 normal or subnormal, then exact or rounded (to a neighbour);
                          or underflows to 0, overflows to inf; inf and nan pass through

fp16 and bf16 are rounded from the fp32 value, as autocast casts an fp32 tensor.
Scaling the loss by S scales every gradient by S: --scale shows which values that lifts out
of fp16's underflow and which it pushes into overflow.

Examples:
  demi-fp 1e-8 65504 65520            fp16's underflow and overflow
  demi-fp 1e-8 2 --scale 65536        what loss scaling by 2^16 rescues and what it breaks
  demi-fp 0x1p-24 6.103515625e-5      smallest fp16 subnormal and smallest normal
  demi-fp -1e-8 -inf nan              negative values need no '--'; inf and nan pass through)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Shows how each value is stored in fp32, fp16 and bf16: the bits, the stored value,\n"
               "the relative error, and whether it is exact, rounded, subnormal, underflows or overflows.",
               "demi-fp"};
  app.footer(kFooter);
  std::vector<std::string> unused;  // split_command_line() keeps values from CLI11; declared for --help
  std::string scale_text = "1";
  app.add_option("VALUE", unused, "Values to inspect: decimal (1e-8), hex float (0x1p-24), inf, -inf or nan")
      ->type_name("");
  app.add_option("-s,--scale", scale_text,
                 "Loss scale: also show each value times S (default 1: no scaling)")
      ->type_name("S");

  const demi::fp::CommandLine line =
      demi::fp::split_command_line(std::vector<std::string>(argv + 1, argv + argc));
  std::vector<std::string> options(line.options.rbegin(), line.options.rend());  // CLI11 parses last-first
  try {
    app.parse(options);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "demi-fp: " << e.what() << "; see demi-fp --help\n";
    return 2;  // as run_demi_fp() does for a bad value
  }
  return demi::fp::run_demi_fp(line.values, scale_text, std::cout, std::cerr);
}
