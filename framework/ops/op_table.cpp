// ops::all_ops(): the op table, built from op_list.h. Each op's file defines op_info_<Op>()
// with DEMI_REGISTER_OP, so a listed op without a file fails to link.
#include "framework/ops/op.h"
#include "framework/ops/op_list.h"

namespace demi::ops {

#define DEMI_DECLARE_OP_INFO(Op) OpInfo op_info_##Op();
DEMI_FOR_EACH_OP(DEMI_DECLARE_OP_INFO)
#undef DEMI_DECLARE_OP_INFO

const std::vector<OpInfo>& all_ops() {
#define DEMI_OP_INFO_ROW(Op) op_info_##Op(),
  static const std::vector<OpInfo> table = {DEMI_FOR_EACH_OP(DEMI_OP_INFO_ROW)};
#undef DEMI_OP_INFO_ROW
  return table;
}

}  // namespace demi::ops
