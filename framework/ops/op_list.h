// Every differentiable op, one entry each. The op table (ops::all_ops), amp::policy_table() and the
// "every op has a gradcheck" test are built from this list; adding an op = its file + one entry.
#pragma once

#define DEMI_FOR_EACH_OP(X)                                                                    \
  X(Add) X(Sub) X(Mul) X(Div) X(Neg) X(Affine) X(Exp) X(Log) X(Sqrt) X(Pow) X(Relu) X(Gelu)     \
  X(Sum) X(Mean) X(Reshape) X(Cast) X(ToDevice) X(Matmul) X(Linear) X(Conv2d) X(MaxPool2d)      \
  X(AvgPool2d) X(BatchNorm) X(BatchNormRelu) X(BatchNormGelu) X(Softmax) X(LogSoftmax) X(CrossEntropy) X(Transpose)  \
  X(Clamp) X(Select) X(Cat)                                                                    \
  X(Dropout) X(Embedding)                                                                      \
  X(Abs) X(Amax) X(Amin) X(MaxDim) X(MinDim) X(Where) X(Permute) X(Expand)                    \
  X(ScaledDotProductAttention)                                                                \
  X(LayerNorm) X(ToMemoryFormat)
